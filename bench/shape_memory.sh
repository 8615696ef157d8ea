#!/usr/bin/env bash
#
# bench/shape_memory.sh: what a small shape costs.  SHAPES shapes of one row each (`id = k`
# on a table of SHAPES rows) are made, 8 requests at a time, on a cluster with the default
# shape_sync.log_memory (128MB); then each is deleted (DELETE /v1/shape).  Measured, RUNS
# times (a fresh table each):
#   log memory per shape   the arena's used bytes (shape_sync.log_memory_usage()) with the
#                          shapes held, less before, over SHAPES; against the baseline of
#                          what the shape's log holds (shape_sync.shapes.log_bytes: its one
#                          row and the snapshot-end message);
#   worker memory          the shape_sync worker's private memory (RssAnon) before, with the
#                          shapes held, and after they were deleted; the result compares the
#                          last run's "after" with the worker's memory after one warm-up shape
#                          was made and deleted (what any first shape loads once: catalog
#                          caches, the stream table sized by max_shapes), and also with the
#                          worker before any shape.
# Targets of issue 12: 10,000 small shapes fit in the default log_memory (12.8 kB each at
# most), and the worker's memory comes back to within 10% of where it started.  Writes the
# section "Memory of small shapes" of bench/RESULTS.md.
#
# Knobs: RUNS (3), SHAPES (10000; with a table of as many rows). About a minute.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}
SHAPES=${SHAPES:-10000}
bench_init

SHAPE_SYNC_EXTRA_CONF="shape_sync.log_memory = '128MB'
shape_sync.max_shapes = $((SHAPES + 100))
shape_sync.shape_eviction = none
shape_sync.allow_shape_deletion = on" bench_cluster_start
cluster_psql -c "CREATE EXTENSION shape_sync" >/dev/null
worker=$(bench_worker_pid)
rss_anon_kb() { bench_rss_anon_kb "$worker"; }
used_bytes() { cluster_psql -At -c "SELECT total_bytes - free_bytes FROM shape_sync.log_memory_usage()"; }


# one warm-up shape, made and deleted
cold=$(rss_anon_kb)
cluster_psql -c "CREATE TABLE bench_memory_warmup (id int PRIMARY KEY, v text)" \
	-c "INSERT INTO bench_memory_warmup VALUES (1, 'v1')" >/dev/null
python3 "$here/shapes.py" "$SHAPE_SYNC_URL" bench_memory_warmup 1 1 make "$out/handles"
python3 "$here/shapes.py" "$SHAPE_SYNC_URL" bench_memory_warmup 1 1 delete "$out/handles"
sleep 2
warm=$(rss_anon_kb)

for run in $(seq 1 "$RUNS"); do
	table="bench_memory_$run"
	cluster_psql -c "CREATE TABLE $table (id int PRIMARY KEY, v text)" \
		-c "INSERT INTO $table SELECT g, 'v' || g FROM generate_series(1, $SHAPES) g" >/dev/null
	sleep 1
	u0=$(used_bytes)
	m0=$(rss_anon_kb)
	python3 "$here/shapes.py" "$SHAPE_SYNC_URL" "$table" 1 "$SHAPES" make "$out/handles"
	u1=$(used_bytes)
	m1=$(rss_anon_kb)
	data=$(cluster_psql -At -c "SELECT sum(log_bytes) FROM shape_sync.shapes WHERE relation = '\"public\".\"$table\"'")
	python3 "$here/shapes.py" "$SHAPE_SYNC_URL" "$table" 1 "$SHAPES" delete "$out/handles"
	sleep 2	# the deleted shapes' memory goes back once their last reader lets go
	u2=$(used_bytes)
	m2=$(rss_anon_kb)
	echo "$run $u0 $u1 $u2 $m0 $m1 $m2 $data" | tee -a "$out/runs.txt" >&2
done
cluster_stop

python3 - "$out/runs.txt" "$RUNS" "$SHAPES" "$here" "$pg_version" "$cold" "$warm" <<'PY'
import statistics, sys
runs_file, runs, shapes, here, pg = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
cold, warm = int(sys.argv[6]), int(sys.argv[7])
sys.path.insert(0, here)
from results_section import machine, write_section
rows = [list(map(int, line.split()[1:])) for line in open(runs_file)]
med = lambda i: statistics.median(r[i] for r in rows)
per_shape = statistics.median((r[1] - r[0]) / shapes for r in rows)
data = statistics.median(r[6] / shapes for r in rows)
worker_per_shape = statistics.median((r[4] - r[3]) * 1024 / shapes for r in rows)
back = (rows[-1][5] - warm) / warm	# after the last run's deletions
back_cold = (rows[-1][5] - cold) / cold
log_memory = 128 * 1024 * 1024
fit = int(log_memory / per_shape)
lines = [
    "## Memory of small shapes",
    "",
    f"{machine(pg)} `bash bench/shape_memory.sh`: medians of {runs} runs.",
    "",
    f"{shapes} shapes of one row each (`id = k`), made 8 requests at a time with the default "
    "`shape_sync.log_memory` (128MB), then deleted. Baseline: the bytes each shape's log holds "
    "(`shape_sync.shapes.log_bytes`: the row and the snapshot-end message).",
    "",
    "| measure | per shape | baseline: log bytes per shape | ratio |",
    "|---|---:|---:|---:|",
    f"| log memory (arena blocks) | {per_shape / 1024:.1f} kB | {data:.0f} B | {per_shape / data:.0f}x |",
    f"| worker private memory (RssAnon) while held | {worker_per_shape / 1024:.1f} kB | | |",
    "",
    f"So {fit:,} such shapes fit in the default log memory (target 10,000: "
    f"{'met' if fit >= 10000 else 'not met'}).",
    "",
    f"The worker's private memory after the last run's deletions is {back * 100:+.1f}% of where it was "
    f"after one warm-up shape had been made and deleted ({warm} kB; target within 10%: "
    f"{'met' if back <= 0.10 else 'not met'}), and {back_cold * 100:+.1f}% of where it was before any "
    f"shape ({cold} kB: the warm-up loads catalog caches and the stream table sized by "
    "`shape_sync.max_shapes` once). Runs (kB before / held / after): "
    + "; ".join(f"{r[3]} / {r[4]} / {r[5]}" for r in rows) + ".",
]
write_section(f"{here}/RESULTS.md", "shape_memory", lines)
PY
