#!/usr/bin/env bash
#
# bench/create.sh: shapes created at scale.  COUNTS (1000 and 3650) concurrent requests, each
# for a new shape of its own (`id = k` on a table of 5,000 rows: one-row snapshots), all
# sent at once by one Node process (bench/create.mjs; a 503 is retried after its
# retry-after), until every one has its 200; then the same requests again, now for shapes
# that exist (the baseline: what the requests cost without a snapshot).  RUNS runs, a fresh
# table each.  Reports the medians of the seconds until the last 200, shapes per second, the
# ratio to the baseline, and the 503s.  Snapshots run on the pool of
# shape_sync.max_snapshot_workers workers (default 4).  Writes the section "Shapes created at
# scale" of bench/RESULTS.md.
#
# Knobs: RUNS (3), COUNTS ("1000 3650"), WORKERS (shape_sync.max_snapshot_workers, 4).
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}
COUNTS=${COUNTS:-"1000 3650"}
WORKERS=${WORKERS:-4}
bench_init
bench_fd_limit
max=0
for n in $COUNTS; do ((n > max)) && max=$n; done

SHAPE_SYNC_EXTRA_CONF="shape_sync.max_shapes = $((2 * max * RUNS + 100))
shape_sync.log_memory = '2GB'
shape_sync.shape_eviction = none
shape_sync.max_concurrent_initial = $((max + 100))
shape_sync.max_snapshot_workers = $WORKERS" bench_cluster_start
cluster_psql -c "CREATE EXTENSION shape_sync" >/dev/null

for run in $(seq 1 "$RUNS"); do
	for n in $COUNTS; do
		table="bench_create_${n}_$run"
		cluster_psql -c "CREATE TABLE $table (id int PRIMARY KEY, v text)" \
			-c "INSERT INTO $table SELECT g, 'v' || g FROM generate_series(1, 5000) g" >/dev/null
		new=$(node "$here/create.mjs" "$SHAPE_SYNC_URL" "$table" "$n")
		existing=$(node "$here/create.mjs" "$SHAPE_SYNC_URL" "$table" "$n")
		ready=$(cluster_psql -At -c "SELECT count(*) FROM shape_sync.shapes WHERE state = 'ready' AND relation = '\"public\".\"$table\"'")
		((ready == n)) || { echo "$table: $ready of $n shapes ready" >&2; exit 1; }
		echo "$n|$run|$new|$existing" | tee -a "$out/runs.txt" >&2
	done
done
cluster_stop

python3 - "$out/runs.txt" "$RUNS" "$WORKERS" "$here" "$pg_version" <<'PY'
import json, statistics, sys
runs_file, runs, workers, here, pg = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
sys.path.insert(0, here)
from results_section import machine, write_section
new, old, retried, order = {}, {}, {}, []
for line in open(runs_file):
    n, run, a, b = line.strip().split("|")
    n = int(n)
    if n not in new:
        order.append(n)
    a, b = json.loads(a), json.loads(b)
    new.setdefault(n, []).append(a["ms"] / 1000)
    old.setdefault(n, []).append(b["ms"] / 1000)
    retried.setdefault(n, []).append(a["retried"])
med = statistics.median
lines = [
    "## Shapes created at scale",
    "",
    f"{machine(pg)} `bash bench/create.sh`: medians of {runs} runs.",
    "",
    "N requests sent at once, each for a new shape of its own (`id = k` on a table of 5,000 rows: a "
    "one-row snapshot each), by one Node process, a `503` retried after its `retry-after`; seconds until "
    "the last `200`. Baseline: the same requests again, for the shapes that now exist. Snapshots run on "
    f"the pool of `shape_sync.max_snapshot_workers` = {workers} workers; the server, PostgreSQL and the "
    "client share the machine.",
    "",
    "| concurrent new shapes | seconds until all ready | shapes/s | existing shapes, seconds (baseline) | ratio | 503s retried |",
    "|---:|---:|---:|---:|---:|---:|",
]
for n in order:
    a, b = med(new[n]), med(old[n])
    lines.append(f"| {n:,} | {a:.2f} | {n / a:,.0f} | {b:.2f} | {a / b:.2f}x | {med(retried[n]):.0f} |")
if 3650 in new:
    a = med(new[3650])
    lines += ["", f"Target: 3,650 concurrent new shapes ready in under 4 s: {'met' if a < 4 else 'not met'} ({a:.2f} s)."]
lines += ["", "Runs (seconds, new / existing): " + "; ".join(
    f"{n}: " + ", ".join(f"{x:.2f}/{y:.2f}" for x, y in zip(new[n], old[n])) for n in order) + "."]
write_section(f"{here}/RESULTS.md", "create", lines)
PY
