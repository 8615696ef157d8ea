#!/usr/bin/env bash
#
# bench/compaction.sh: the memory of one hot shape over time, with compaction and without.
# A table of ROWS rows (REPLICA IDENTITY FULL, about 100 bytes each) has one shape, read to
# its end; then pgbench updates random rows, UPDATES single-row transactions in STEPS steps.
# After each step, once the worker has decoded everything written (its slot's confirmed
# position reached the WAL's end), the shape's log_bytes is read from shape_sync.shapes.
# The same run is made with shape_sync.compaction_factor = 0 (the baseline: no compaction)
# and with the default 4, on a fresh table each, alternating which goes first; the worker
# main thread's CPU time over the updates (/proc/PID/task/PID/schedstat) says what
# compaction costs. RUNS runs; reports medians. Writes the section "Memory of a hot shape"
# of bench/RESULTS.md.
#
# With LOG_MEMORY (for example 8MB; the default is 1GB) smaller than the log grows, the log
# leaves memory for its file (durable logs): compaction then reads it from there and writes
# its next generation as it builds it. That run writes the section "A hot shape larger than
# the log memory" instead.
#
# Knobs: RUNS (3), ROWS (10000), UPDATES (200000), STEPS (5), LOG_MEMORY. About 7 minutes.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}
ROWS=${ROWS:-10000}
UPDATES=${UPDATES:-200000}
STEPS=${STEPS:-5}
LOG_MEMORY=${LOG_MEMORY:-}
bench_init
chmod 755 "$out"	# pgbench reads update.sql as the PostgreSQL user

SHAPE_SYNC_EXTRA_CONF="shape_sync.log_memory = '${LOG_MEMORY:-1GB}'
shape_sync.chunk_bytes_threshold = '1MB'" bench_cluster_start
cluster_psql -q -c "CREATE EXTENSION shape_sync"
worker=$(bench_worker_pid)
cpu_ns() { bench_cpu_ns "$worker"; }
printf '\\set id random(1, %d)\nUPDATE bench_hot SET v = v + 1 WHERE id = :id;\n' "$ROWS" >"$out/update.sql"
caught_up() {
	[[ $(cluster_psql -At -c "SELECT confirmed_flush_lsn >= pg_current_wal_lsn() FROM pg_replication_slots WHERE plugin = 'shape_sync'") == t ]]
}
wait_caught_up() {
	local i
	for ((i = 0; i < 600; i++)); do
		caught_up && return 0
		sleep 0.1
	done
	echo "the worker did not catch up" >&2
	return 1
}

measure() {	# MODE FACTOR RUN: prints "MODE RUN STEP BYTES" lines and "MODE RUN cpu NS"
	local mode=$1 factor=$2 run=$3 handle step cpu0
	cluster_psql -q -c "ALTER SYSTEM SET shape_sync.compaction_factor = $factor" -c "SELECT pg_reload_conf()" >/dev/null
	cluster_psql -q <<SQL
DROP TABLE IF EXISTS bench_hot;
CREATE TABLE bench_hot (id int PRIMARY KEY, v int NOT NULL, pad text NOT NULL) WITH (autovacuum_enabled = off);
ALTER TABLE bench_hot REPLICA IDENTITY FULL;
INSERT INTO bench_hot SELECT g, 0, repeat('p', 100) FROM generate_series(1, $ROWS) g;
SQL
	sleep 0.5
	handle=$(curl -sf -D - -o /dev/null "$SHAPE_SYNC_URL/v1/shape?table=bench_hot&offset=-1" |
		bench_header electric-handle)
	[[ -n $handle ]] || { echo "no shape" >&2; return 1; }
	for _ in $(seq 1 100); do
		[[ $(cluster_psql -At -c "SELECT state FROM shape_sync.shapes WHERE handle = '$handle'") == ready ]] && break
		sleep 0.1
	done
	wait_caught_up
	echo "$mode $run 0 $(cluster_psql -At -c "SELECT log_bytes FROM shape_sync.shapes WHERE handle = '$handle'")"
	cpu0=$(cpu_ns)
	for ((step = 1; step <= STEPS; step++)); do
		"$SHAPE_SYNC_PG_BINDIR/pgbench" -n -c 2 -j 2 -t $((UPDATES / STEPS / 2)) -f "$out/update.sql" \
			>/dev/null 2>&1
		wait_caught_up
		echo "$mode $run $((step * UPDATES / STEPS)) $(cluster_psql -At -c "SELECT log_bytes FROM shape_sync.shapes WHERE handle = '$handle'")"
	done
	echo "$mode $run cpu $(($(cpu_ns) - cpu0))"
	# the shape's data files once the slot is confirmed (a compacted generation is gone by then)
	echo "$mode $run file $(_cluster_as_pg sh -c "cat '$SHAPE_SYNC_PGDATA'/pg_shape_sync/$handle.*.log 2>/dev/null | wc -c" || echo 0)"
	echo "$mode $run compactions $(cluster_psql -At -c "SELECT compactions FROM shape_sync.shapes WHERE handle = '$handle'")"
}

for ((run = 1; run <= RUNS; run++)); do
	if ((run % 2)); then
		measure none 0 "$run" >>"$out/runs.txt"
		measure compaction 4 "$run" >>"$out/runs.txt"
	else
		measure compaction 4 "$run" >>"$out/runs.txt"
		measure none 0 "$run" >>"$out/runs.txt"
	fi
done

python3 - "$out/runs.txt" "$RUNS" "$ROWS" "$UPDATES" "$here" "$pg_version" "$LOG_MEMORY" <<'PY'
import statistics, sys
path, runs, rows, updates, here, pg = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
log_memory = sys.argv[7]
sys.path.insert(0, here)
from results_section import machine, write_section
size, cpu, comp, files = {}, {}, {}, {}
for line in open(path):
    fields = line.split()
    if len(fields) != 4:
        continue
    mode, run, what, value = fields
    if what == "cpu":
        cpu.setdefault(mode, []).append(int(value) / 1e9)
    elif what == "file":
        files.setdefault(mode, []).append(int(value))
    elif what == "compactions":
        comp.setdefault(mode, []).append(int(value))
    else:
        size.setdefault((mode, int(what)), []).append(int(value))
med = statistics.median
steps = sorted({s for (_, s) in size})
mb = lambda b: f"{b / 1048576:.1f}"
lines = [
    "## A hot shape larger than the log memory" if log_memory else "## Memory of a hot shape",
    "",
    f"{machine(pg)} `{'LOG_MEMORY=' + log_memory + ' ' if log_memory else ''}bash bench/compaction.sh`: medians of {runs} runs.",
    "",
] + ([
    f"`shape_sync.log_memory` is {log_memory}: the log outgrows it and leaves memory for its file "
    "(durable logs, `docs/storage.md`); compaction reads it from there and writes its next "
    "generation as it builds it. Otherwise as in \"Memory of a hot shape\".",
    "",
] if log_memory else []) + [
    f"One shape on a table of {rows} rows (`REPLICA IDENTITY FULL`, about 100 bytes each); pgbench "
    f"updates random rows, {updates} single-row transactions, two clients. After each step, once "
    "the worker has decoded everything written, the shape's `log_bytes` (`shape_sync.shapes`). "
    "Baseline: the same with `shape_sync.compaction_factor = 0` (no compaction), on a fresh table "
    "in the same run. Worker CPU: the main thread's CPU time over the updates (decoding, encoding, "
    "appending, compacting).",
    "",
    "| updates | log MB, no compaction | log MB, compaction (factor 4) | ratio |",
    "|---:|---:|---:|---:|",
]
for s in steps:
    a, b = med(size[("none", s)]), med(size[("compaction", s)])
    lines.append(f"| {s} | {mb(a)} | {mb(b)} | {b / a:.2f}x |")
peak = med(max(size[("compaction", s)][i] for s in steps) for i in range(runs))
lines += [
    "",
    f"With compaction the log peaked at {mb(peak)} MB (the median over runs of each run's largest "
    f"sample) and was compacted {med(comp['compaction']):.0f} times; without, it grows by every "
    "update. Worker CPU over the updates: "
    f"{med(cpu['none']):.2f} s without compaction, {med(cpu['compaction']):.2f} s with "
    f"({med(cpu['compaction']) / med(cpu['none']):.2f}x)."
    + (f" The shape's data file at the end: {mb(med(files['none']))} MB without compaction, "
       f"{mb(med(files['compaction']))} MB with." if files.get('none') and files.get('compaction') else ""),
]
write_section(f"{here}/RESULTS.md", "compaction_disk" if log_memory else "compaction", lines)
print("\n".join(lines))
PY
