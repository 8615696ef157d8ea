#!/usr/bin/env bash
#
# bench/deadline.sh: the cost per write of arming and clearing a stall deadline
# (shape_sync's per-connection slot) against a mutex-guarded shared heap and a
# message per write to one consumer thread, with 1..N writer threads.  Runs
# bench/deadline_bench.c RUNS times, takes the median of each figure, and writes
# the table into bench/RESULTS.md between the "deadline" markers.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-5}
WRITES=${WRITES:-2000000}
THREADS=${THREADS:-8}
bench_init

bench_cc deadline_bench "$here/deadline_bench.c"
for i in $(seq 1 "$RUNS"); do
	"$out/deadline_bench" "$WRITES" "$THREADS" >"$out/run$i.txt"
done

python3 - "$out" "$RUNS" "$here" <<'PY'
import statistics, sys
out, runs, here = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sys.path.insert(0, here)
from results_section import machine, write_section
vals = {}
for i in range(1, runs + 1):
    for line in open(f"{out}/run{i}.txt"):
        p = line.split()
        if len(p) == 3 and p[0] in ("slot", "heap", "queue"):
            vals.setdefault((p[0], int(p[1])), []).append(float(p[2]))
        elif len(p) == 2 and p[0].startswith("sweep"):
            vals.setdefault((p[0], 0), []).append(float(p[1]))
med = {k: statistics.median(v) for k, v in vals.items()}
threads = sorted({t for (d, t) in med if d == "slot"})
lines = [
    "## Per-write cost of the stall deadline",
    "",
    f"{machine()} "
    f"`bash bench/deadline.sh`: median of {runs} runs, each write one arm/clear pair, "
    "nanoseconds per write aggregated over all writer threads (wall time / writes), and the "
    "ratio to shape_sync's per-connection slot in the same run.",
    "",
    "| writer threads | slot (shape_sync) | mutex-guarded heap | ratio | message to one consumer | ratio |",
    "|---|---|---|---|---|---|",
]
for t in threads:
    s, h, q = med[("slot", t)], med[("heap", t)], med[("queue", t)]
    lines.append(f"| {t} | {s:.1f} ns | {h:.1f} ns | {h/s:.1f}x | {q:.1f} ns | {q/s:.1f}x |")
s1 = med[("slot", threads[0])]
lines += [
    "",
    f"The slot's cost per write does not grow with writer threads "
    f"({med[('slot', threads[0])]:.1f} ns with 1, {med[('slot', threads[-1])]:.1f} ns aggregate with {threads[-1]}); "
    "it is two relaxed stores to the connection's own cache line plus a coarse clock read. "
    "The heap serializes every write on one lock, and the consumer design also pays for the queue.",
    f"The deadline thread's sweep reads one cache line per connection: "
    f"{med[('sweep_10k_ns', 0)]/1000:.0f} µs for 10,000 connections, "
    f"{med[('sweep_100k_ns', 0)]/1000:.0f} µs for 100,000, a few times per timeout window, whatever the write rate.",
    "On this 2-core machine threads beyond 2 time-share the cores, so contention effects are muted; "
    "the ordering, and the slot's flat cost, are the point.",
]
write_section(f"{here}/RESULTS.md", "deadline", lines)
PY
