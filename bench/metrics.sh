#!/usr/bin/env bash
#
# bench/metrics.sh: the cost of one increment of a hot metric as threads are added (issue 11,
# item 5; seed 002). bench/build/metrics_bench (bench/metrics_bench.c) has 1, 2, 4 and 8
# threads add to one counter, and observe into one histogram, OPS times each, three ways in
# the same run: src/contract/metrics.c's stripes (each thread its own, as the server writes
# them), one shared atomic (fetch_add), and one mutex. Reports the median over RUNS runs of
# the nanoseconds per operation each thread sees, and each way's cost at n threads over its
# cost at 1 (flat means no contention). On a machine with fewer cores than threads, threads
# take turns and the ratio there says little: the device machine (16 cores) is where 8
# threads show. Writes the section "Striped metrics" of bench/RESULTS.md. No PostgreSQL.
#
# Knobs: RUNS (5), THREADS ("1 2 4 8"), OPS (10000000). About a minute.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-5}
THREADS=${THREADS:-1 2 4 8}
OPS=${OPS:-10000000}
bench_init
bench_tools
"$here/build/metrics_bench" --threads "$THREADS" --ops "$OPS" --runs "$RUNS" >"$out/runs.txt"
BENCH_RUNS=$RUNS BENCH_OPS=$OPS python3 - "$here/RESULTS.md" "$out/runs.txt" <<'PY'
import collections, json, os, statistics, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
from results_section import machine, write_section

ns = collections.defaultdict(list)
for line in open(sys.argv[2]):
    d = json.loads(line)
    ns[(d["metric"], d["way"], d["threads"])].append(d["ns"])
threads = sorted({k[2] for k in ns})
ways = ["striped", "atomic", "mutex"]
rows = []
for metric in ("counter", "histogram"):
    for t in threads:
        cells = []
        for w in ways:
            m = statistics.median(ns[(metric, w, t)])
            one = statistics.median(ns[(metric, w, threads[0])])
            cells.append(f"{m:.1f} | {m / one:.2f}x")
        rows.append(f"| {metric} | {t} | " + " | ".join(cells) + " |")
lines = [
    "## Striped metrics",
    "",
    machine(),
    "",
    "`bash bench/metrics.sh`: n threads each add 1 to one counter (or observe one value into "
    f"one histogram of 7 buckets) {int(os.environ['BENCH_OPS']):,} times at once; nanoseconds "
    "per operation as each thread sees it (the run's time over one thread's operations), and "
    "its ratio to the same way with one thread. Striped: `src/contract/metrics.c`, a stripe per "
    "thread; atomic: one shared `fetch_add` (a histogram: bucket, count, and a CAS loop for the "
    "sum); mutex: one `pthread_mutex`. Same run, medians of "
    f"{os.environ['BENCH_RUNS']} runs. With more threads than CPUs, threads take turns: "
    "those rows show oversubscription, not contention.",
    "",
    "| metric | threads | striped ns | vs 1 thread | atomic ns | vs 1 thread | mutex ns | vs 1 thread |",
    "|---|---:|---:|---:|---:|---:|---:|---:|",
    *rows,
]
write_section(sys.argv[1], "metrics", lines)
PY
