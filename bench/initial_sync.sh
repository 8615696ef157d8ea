#!/usr/bin/env bash
#
# bench/initial_sync.sh: the first client of a big table against COPY.  A table of ROWS rows
# of about 100 bytes (id int, a int, b text of 80 characters) is read, RUNS times each, in
# alternating order:
#   copy         psql -c "COPY (SELECT * FROM t) TO STDOUT" > /dev/null (the baseline);
#   copy_json    the same with row_to_json(t), closer to what shape_sync sends;
#   first        the first client of a new shape over every row (`id > -k`, a new k each
#                time): from its offset=-1 request until it has read the up-to-date response,
#                following electric-offset (bench/RESULTS.md: the snapshot is taken while it
#                reads);
#   second       a second client of the same shape, served from the log.
# Clients read bodies without parsing them (Python http.client).  Reports rows per second
# and the ratio to COPY (the target of issue 12: the first client at 0.8x COPY or better).
# Writes the section "Initial sync against COPY" of bench/RESULTS.md.
#
# With LOG_MEMORY set (say 16MB), shape_sync.log_memory is that instead of 2 GB: the table's
# log is then many times the memory (durable logs: the snapshot is written to its data file as
# it is taken and leaves memory, docs/storage.md), a second client reads it from the file, and
# the section written is "Initial sync of a table larger than the log memory against COPY",
# with the log's size against the memory.
#
# Knobs: RUNS (3), ROWS (1000000), LOG_MEMORY (unset: 2GB).
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}
ROWS=${ROWS:-1000000}
LOG_MEMORY=${LOG_MEMORY:-}
bench_init

SHAPE_SYNC_EXTRA_CONF="shape_sync.log_memory = '${LOG_MEMORY:-2GB}'
shape_sync.max_shapes = 64" bench_cluster_start
cluster_psql -c "CREATE EXTENSION shape_sync" \
	-c "CREATE TABLE bench_sync (id int PRIMARY KEY, a int, b text)" \
	-c "INSERT INTO bench_sync SELECT g, g % 1000, repeat(md5(g::text), 3)::char(80) FROM generate_series(1, $ROWS) g" \
	-c "ALTER TABLE bench_sync REPLICA IDENTITY FULL" -c "VACUUM ANALYZE bench_sync" >/dev/null

cat >"$out/follow.py" <<'PY'
import http.client, sys, time, urllib.parse
url, where = sys.argv[1], sys.argv[2]
u = urllib.parse.urlsplit(url)
conn = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
q = {"table": "bench_sync", "offset": "-1", "where": where}
t0 = time.monotonic()
n = 0
while True:
    conn.request("GET", "/v1/shape?" + urllib.parse.urlencode(q))
    r = conn.getresponse()
    body = r.read()
    n += len(body)
    if r.status != 200:
        sys.exit(f"status {r.status}: {body[:200]!r}")
    if r.getheader("electric-up-to-date") is not None:
        break
    q["handle"], q["offset"] = r.getheader("electric-handle"), r.getheader("electric-offset")
print(f"{time.monotonic() - t0:.4f} {n}")
PY

timed() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null; t1=$(date +%s.%N); awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", b - a }'; }
for run in $(seq 1 "$RUNS"); do
	order="copy copy_json first"
	((run % 2 == 0)) && order="first copy_json copy"
	for m in $order; do
		case $m in
		copy) echo "copy $(timed cluster_psql -c "COPY (SELECT * FROM bench_sync) TO STDOUT")" ;;
		copy_json) echo "copy_json $(timed cluster_psql -c "COPY (SELECT row_to_json(t) FROM bench_sync t) TO STDOUT")" ;;
		first)
			read -r s bytes < <(python3 "$out/follow.py" "$SHAPE_SYNC_URL" "id > -$run")
			echo "first $s $bytes"
			read -r s bytes < <(python3 "$out/follow.py" "$SHAPE_SYNC_URL" "id > -$run")
			echo "second $s $bytes"
			read -r rows log_bytes < <(cluster_psql -At -F' ' -c "SELECT snapshot_rows, log_bytes FROM shape_sync.shapes ORDER BY created_at DESC LIMIT 1")
			[[ $rows == "$ROWS" ]] || { echo "the shape has $rows rows, not $ROWS" >&2; exit 1; }
			echo "log $log_bytes $(cluster_psql -At -c "SELECT total_bytes FROM shape_sync.log_memory_usage()")"
			;;
		esac
	done
done | tee "$out/runs.txt" >&2
cluster_stop

python3 - "$out/runs.txt" "$RUNS" "$ROWS" "$here" "$pg_version" "$LOG_MEMORY" <<'PY'
import statistics, sys
runs_file, runs, rows, here, pg, log_memory = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
sys.path.insert(0, here)
from results_section import machine, write_section
t = {}
sizes = []
for line in open(runs_file):
    parts = line.split()
    if parts[0] == "log":
        sizes.append((int(parts[1]), int(parts[2])))
        continue
    t.setdefault(parts[0], []).append(float(parts[1]))
med = {k: statistics.median(v) for k, v in t.items()}
copy = med["copy"]
names = {"copy": "`COPY (SELECT *) TO STDOUT` through psql (baseline)",
         "copy_json": "`COPY (SELECT row_to_json(t)) TO STDOUT` through psql",
         "first": "shape_sync, the first client (the snapshot is taken while it reads)",
         "second": "shape_sync, a second client (from the log)"}
disk = log_memory != ""
log_bytes, memory = sizes[-1]
lines = [
    "## Initial sync of a table larger than the log memory against COPY" if disk else "## Initial sync against COPY",
    "",
    f"{machine(pg)} `{'LOG_MEMORY=' + log_memory + ' ' if disk else ''}bash bench/initial_sync.sh`: medians of {runs} runs.",
    "",
    *([f"`shape_sync.log_memory` is {memory / 1048576:.0f} MB and each shape's log {log_bytes / 1048576:.0f} MB "
       f"({log_bytes / memory:.1f}x): the snapshot worker writes it to the shape's data file as it takes it and its "
       "chunks leave memory (durable logs, `docs/storage.md`); the second client reads them from the file.", ""]
      if disk else []),
    f"A table of {rows:,} rows of about 100 bytes (`id int, a int, b char(80)`), read whole: by `COPY` "
    "through psql to /dev/null, and by a client of a new shape over every row that follows `electric-offset` "
    "from `offset=-1` to the up-to-date response, reading bodies without parsing them; the server, PostgreSQL "
    "and the clients share the machine.",
    "",
    "| reader | seconds | rows/s | ratio to COPY |",
    "|---|---:|---:|---:|",
]
for k in ["copy", "copy_json", "first", "second"]:
    lines.append(f"| {names[k]} | {med[k]:.2f} | {rows / med[k]:,.0f} | {copy / med[k]:.2f}x |")
lines += ["", f"Target: the first client at 0.8x of `COPY` or better: "
          f"{'met' if copy / med['first'] >= 0.8 else 'not met'} ({copy / med['first']:.2f}x).",
          "", "Runs (seconds): " + "; ".join(f"{k} " + ", ".join(f"{x:.2f}" for x in v) for k, v in t.items()) + "."]
write_section(f"{here}/RESULTS.md", "initial_sync_disk" if disk else "initial_sync", lines)
PY
