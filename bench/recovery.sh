#!/usr/bin/env bash
#
# bench/recovery.sh: how long CLIENTS live clients on SHAPES shapes take to be served again
# after a restart of PostgreSQL (issue 9, item 8). Shapes live in shared memory, so a restart
# drops them all: every client gets a 409 (or a cut connection, then a 409) and fetches its
# shape from offset=-1; the new snapshots queue behind shape_sync.max_snapshot_workers, and
# requests over shape_sync.max_concurrent_initial get 503 with retry-after. bench/recovery.mjs
# runs the clients (raw long-poll clients that behave like the official one) and times each
# from the restart until it holds all its rows again, up to date on a new handle. Default
# settings otherwise. Baseline, in the same run: the time the same clients take to sync
# from scratch on a fresh server (cold start, no restart), so that the ratio says what the
# restart adds. RUNS runs; reports medians. Writes the section "Recovery after a restart"
# of bench/RESULTS.md.
#
# Knobs: RUNS (3), SHAPES (100), CLIENTS (1000), ROWS (50 per shape).
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}
SHAPES=${SHAPES:-100}
CLIENTS=${CLIENTS:-1000}
ROWS=${ROWS:-50}
bench_init
bench_need_node_modules
bench_fd_limit

bench_cluster_start
cluster_psql -q <<SQL
CREATE EXTENSION shape_sync;
CREATE TABLE bench_recovery (tenant int, id int, payload text, PRIMARY KEY (tenant, id));
ALTER TABLE bench_recovery REPLICA IDENTITY FULL;
INSERT INTO bench_recovery SELECT t, i, md5((t * 1000 + i)::text)
  FROM generate_series(0, $((SHAPES - 1))) t, generate_series(1, $ROWS) i;
SQL

for ((run = 1; run <= RUNS; run++)); do
	rm -f "$out/ready" "$out/restart"
	# cold start: the clients' first sync, timed by the clients themselves from their start
	t0=$(date +%s.%N)
	node "$here/recovery.mjs" "$SHAPE_SYNC_URL" "$SHAPES" "$CLIENTS" "$ROWS" "$out/ready" "$out/restart" \
		>"$out/run$run.json" &
	node_pid=$!
	bench_track "$node_pid"
	for _ in $(seq 1 3000); do
		[[ -e $out/ready ]] && break
		sleep 0.1
	done
	[[ -e $out/ready ]] || { echo "the clients did not all go live" >&2; exit 1; }
	cold=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')
	sleep 1
	date +%s.%N >"$out/restart"	# the clients count from here
	cluster_restart
	wait "$node_pid"
	helpers=()
	echo "$cold" >"$out/cold$run"
	# the next run starts from a fresh server too: every shape is gone again
	cluster_restart
done

python3 - "$out" "$RUNS" "$SHAPES" "$CLIENTS" "$ROWS" "$here" "$pg_version" <<'PY'
import json, statistics, sys
out, runs, shapes, clients, rows, here, pg = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7]
sys.path.insert(0, here)
from results_section import machine, write_section
res = [json.load(open(f"{out}/run{i}.json")) for i in range(1, runs + 1)]
cold = [float(open(f"{out}/cold{i}").read()) for i in range(1, runs + 1)]
med = statistics.median
statuses = {}
for r in res:
    for k, v in r["statuses"].items():
        statuses[k] = statuses.get(k, 0) + v
bad = {k: v for k, v in statuses.items() if k.isdigit() and int(k) >= 500 and k != "503"}
lines = [
    "## Recovery after a restart",
    "",
    f"{machine(pg)} `bash bench/recovery.sh`: medians of {runs} runs.",
    "",
    f"{clients} raw long-poll clients (bench/recovery.mjs: a 409 starts over from -1, a 503 "
    f"waits its retry-after, a cut connection 100-300 ms) on {shapes} shapes (`where tenant = k`, "
    f"{rows} rows each), all live; then `pg_ctl restart -m fast`. Each client's time from the "
    "restart until it holds all its rows again, up to date on a new handle. Baseline: the same "
    "clients' first sync on the fresh server (from their start until all are live), in the same "
    "run. Default settings: `max_snapshot_workers` 4, `max_concurrent_initial` 300.",
    "",
    "| | seconds |",
    "|---|---:|",
    f"| cold start, all {clients} clients live (baseline) | {med(cold):.2f} |",
    f"| after the restart, median client | {med(r['median'] for r in res):.2f} |",
    f"| after the restart, p99 client | {med(r['p99'] for r in res):.2f} |",
    f"| after the restart, last client | {med(r['max'] for r in res):.2f} ({med(r['max'] for r in res) / med(cold):.2f}x the cold start) |",
    "",
    "Responses after the restart, all runs: " + ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items()))
    + (f". 5xx other than 503: {bad}." if bad else ". No 5xx other than 503."),
]
write_section(f"{here}/RESULTS.md", "recovery", lines)
print("\n".join(lines))
PY
