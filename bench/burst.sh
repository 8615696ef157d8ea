#!/usr/bin/env bash
#
# bench/burst.sh: decoding more than shape_sync.log_memory at once into a shape whose log is
# on disk (issue 26). Behind the gate (bench/lib.sh: decoding waits at a held commit) one of
# two loads of ROWS rows of 1 kB is written into a fresh table with one shape and one live
# client:
#   burst  ROWS transactions of one row each (a DO loop that commits after each row)
#   one    one transaction of all ROWS rows
# then the gate opens, and the time from its release until the live client has the last row
# is measured. With shape_sync.log_memory = SMALL the log does not fit in memory: a decoding
# batch ends at a commit once memory runs short, and one transaction's log is written to the
# file ahead of its commit (src/pg/worker/shape_stream_log.c, log_trim.c); before, the shape
# was rotated (409). The baseline, same run, is log_memory = 1GB, where it all fits. Durable
# logs at the default policy (log_fsync = batch) in both; the setting alternates between
# runs (a restart each). Also checked: the shape kept its handle and the server log shows no
# rotation. RUNS runs; medians. Writes the section "More than the log memory at once" of
# bench/RESULTS.md.
#
# Knobs: RUNS (3), ROWS (150000: about 170 MB of log), SMALL (64MB), CHUNK (the server's
# default shape_sync.chunk_bytes_threshold, 10MB; it must stay well under a quarter of SMALL:
# the open chunk stays in memory).
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}
ROWS=${ROWS:-150000}
SMALL=${SMALL:-64MB}
CHUNK=${CHUNK:-}
bench_init

SHAPE_SYNC_EXTRA_CONF="synchronous_standby_names = 'bench_gate'
synchronous_commit = local
shape_sync.long_poll_timeout = 120s
shape_sync.log_memory = '1GB'${CHUNK:+
shape_sync.chunk_bytes_threshold = '$CHUNK'}" bench_cluster_start
cluster_psql -q -c "CREATE EXTENSION shape_sync" -c "CREATE TABLE bench_gate_t (id serial)" \
	-c "ALTER TABLE bench_gate_t REPLICA IDENTITY FULL"

set_log_memory() {
	cluster_psql -q -c "ALTER SYSTEM SET shape_sync.log_memory = '$1'"
	cluster_restart
	for _ in $(seq 1 100); do
		[[ $(curl -s -o /dev/null -w '%{http_code}' "$SHAPE_SYNC_URL/v1/health") == 200 ]] && return 0
		sleep 0.1
	done
	echo "the server did not come back" >&2
	exit 1
}

one_run() {	# setting load run  (prints "setting load seconds log_bytes rotated")
	local table="bench_burst_$2_$3_${1//[^a-zA-Z0-9]/}" handle offset follower t1 released
	cluster_psql -q -c "CREATE TABLE $table (id int PRIMARY KEY, v text)" \
		-c "ALTER TABLE $table REPLICA IDENTITY FULL"
	handle=$(curl -s -D - -o /dev/null "$SHAPE_SYNC_URL/v1/shape?table=$table&offset=-1" |
		bench_header electric-handle)
	offset=$(curl -s -D - -o /dev/null "$SHAPE_SYNC_URL/v1/shape?table=$table&offset=-1&handle=$handle" |
		bench_header electric-offset)
	python3 "$here/follow_live.py" "$SHAPE_SYNC_URL" "$table" "$handle" "$offset" "$ROWS" >"$out/follow" &
	follower=$!
	bench_track "$follower"
	gate_hold bench_gate_t
	if [[ $2 == burst ]]; then
		cluster_psql -q -c "DO \$\$ BEGIN FOR i IN 1..$ROWS LOOP
			INSERT INTO $table VALUES (i, repeat(chr(98 + i % 20), 1000)); COMMIT; END LOOP; END \$\$"
	else
		cluster_psql -q -c "INSERT INTO $table SELECT g, repeat(chr(98 + g % 20), 1000) FROM generate_series(1, $ROWS) g"
	fi
	gate_release
	wait "$follower" || true
	helpers=()
	t1=$(cat "$out/follow")
	[[ $t1 =~ ^[0-9.]+$ ]] || { echo "$1 $2: the live client got $t1" >&2; grep -E "rotated" "$SHAPE_SYNC_LOG" >&2; exit 1; }
	released=$(cut -d' ' -f2 "$out/released")
	local bytes rotated
	bytes=$(cluster_psql -At -c "SELECT log_bytes FROM shape_sync.shapes WHERE handle = '$handle'")
	rotated=$({ grep -c "will be rotated" "$SHAPE_SYNC_LOG" || true; })
	echo "$1 $2 $(elapsed "$released" "$t1") ${bytes:-0} $rotated"
}

for ((run = 1; run <= RUNS; run++)); do
	# alternate which setting goes first, so that neither always runs on a warmer server
	if ((run % 2)); then order="$SMALL 1GB"; else order="1GB $SMALL"; fi
	for setting in $order; do
		set_log_memory "$setting"
		for load in burst one; do
			one_run "$setting" "$load" "$run" | tee -a "$out/runs.txt"
		done
	done
done
cluster_stop

python3 - "$out/runs.txt" "$RUNS" "$ROWS" "$SMALL" "$here" "$pg_version" "$CHUNK" <<'PY'
import statistics, sys
path, runs, rows, small, here, pg, chunk = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7]
chunk = f" (and `shape_sync.chunk_bytes_threshold = '{chunk}'`)" if chunk else ""
sys.path.insert(0, here)
from results_section import machine, write_section
t, size, rot = {}, {}, 0
for line in open(path):
    setting, load, secs, nbytes, rotated = line.split()
    t.setdefault((setting, load), []).append(float(secs))
    size.setdefault((setting, load), []).append(int(nbytes))
    rot = max(rot, int(rotated))
med = lambda k: statistics.median(t[k])
mb = lambda k: statistics.median(size[k]) / 1e6
ratio = lambda load: med(("1GB", load)) / med((small, load))
lines = [
    "## More than the log memory at once",
    "",
    f"{machine(pg)} `bash bench/burst.sh`: medians of {runs} runs.",
    "",
    f"Decoding waits at a held commit while {rows:,} rows of 1 kB are written into a fresh "
    "table with one shape (durable logs, `log_fsync = batch`), as many one-row transactions "
    "(burst) or as one transaction (one); then decoding goes on, and the time from then until "
    "the shape's live client has the last row is measured. With "
    f"`shape_sync.log_memory = '{small}'`{chunk} the log does not fit in memory: a decoding batch "
    "ends at a commit once memory runs short, and one transaction's log is written to its "
    "file ahead of the commit; before, the shape was rotated (`409`). Baseline, same run: "
    "`log_memory = '1GB'`, where it fits.",
    "",
    f"| load | log (MB) | 1 GB of memory: s | {small}: s | throughput ratio |",
    "|---|---:|---:|---:|---:|",
]
for load, name in (("burst", f"{rows:,} one-row transactions"), ("one", f"one transaction of {rows:,} rows")):
    lines.append(f"| {name} | {mb((small, load)):.1f} | {med(('1GB', load)):.2f} | "
                 f"{med((small, load)):.2f} | **{ratio(load):.2f}x** |")
lines += [
    "",
    f"Rotations in the server log over all runs: {rot}. Runs (seconds, 1 GB / {small}): "
    + "; ".join(f"{load} " + ", ".join(f"{a:.2f}/{b:.2f}" for a, b in zip(t[('1GB', load)], t[(small, load)]))
                for load in ("burst", "one")) + ".",
]
if rot:
    sys.exit("a shape was rotated")
write_section(f"{here}/RESULTS.md", "burst", lines)
print("\n".join(lines))
PY
