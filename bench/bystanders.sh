#!/usr/bin/env bash
#
# bench/bystanders.sh: what connections parked on other shapes cost the clients a commit
# wakes (issue 10, item 2: "no walk of unrelated suspended connections").
#
# PROBE live clients on one shape get COMMITS one-row commits, GAP seconds apart, while
# BYSTANDERS other live clients (bench/build/loadgen --drop) sit parked on SHAPES shapes of
# another table that is never written. For each count in BYSTANDERS (0 is the baseline, in
# the same run), the probe clients' commit-to-client median, p99 and time to the last one,
# and the ratio of the p99 to the p99 with no bystanders. What it shows: libmicrohttpd 0.9.75
# keeps a thread's suspended connections in one list and walks all of it on every pass that
# resumes any of them (resume_suspended_connections), so each wake-up costs time in the
# number of connections parked on that thread, related or not; shape_sync's own wake-up
# (waiters.c) visits only the woken shape's waiters. RUNS runs, the counts in a new order
# each run; medians. Writes the section "Bystanders: parked clients of other shapes" of
# bench/RESULTS.md.
#
# Knobs: RUNS (3), BYSTANDERS ("0 1000 10000"), SHAPES (1000), PROBE (100), COMMITS (50),
# GAP (0.1), LOADGEN_THREADS (1). About 4 minutes.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}
BYSTANDERS=${BYSTANDERS:-0 1000 10000}
SHAPES=${SHAPES:-1000}
PROBE=${PROBE:-100}
COMMITS=${COMMITS:-50}
GAP=${GAP:-0.1}
LOADGEN_THREADS=${LOADGEN_THREADS:-1}
bench_init	# the loadgen processes of the Python part are listed in $BENCH_PIDS
bench_fd_limit
bench_tools
max=0
for n in $BYSTANDERS; do ((n > max)) && max=$n; done
if ((max + PROBE + 200 > $(ulimit -n))); then
	echo "$max bystanders need more file descriptors than $(ulimit -n)" >&2
	exit 1
fi

SHAPE_SYNC_EXTRA_CONF="shape_sync.max_connections = $((max + PROBE + 100))
shape_sync.max_concurrent_existing = $((max + PROBE + 100))
shape_sync.max_concurrent_initial = $((SHAPES + 100))
shape_sync.max_new_shapes_per_client = 0
shape_sync.max_shapes = $((SHAPES + 24))
shape_sync.long_poll_timeout = '60s'" bench_cluster_start
cluster_psql -q <<SQL
CREATE EXTENSION shape_sync;
CREATE TABLE by_probe (id bigserial PRIMARY KEY, mark text NOT NULL);
ALTER TABLE by_probe REPLICA IDENTITY FULL;
CREATE TABLE by_idle (k int PRIMARY KEY, mark text NOT NULL);
ALTER TABLE by_idle REPLICA IDENTITY FULL;
INSERT INTO by_idle SELECT k, '0' FROM generate_series(0, $((SHAPES - 1))) k;
SQL
for _ in $(seq 1 100); do
	curl -sf -o /dev/null "$SHAPE_SYNC_URL/v1/shape?table=by_probe&offset=-1" && break
	sleep 0.1
done
worker=$(bench_worker_pid)

export BY_OUT=$out BY_LOADGEN=$here/build/loadgen BY_PORT=${SHAPE_SYNC_URL##*:} \
	BY_WORKER=$worker BY_PROBE=$PROBE BY_THREADS=$LOADGEN_THREADS \
	BY_PSQL="$SHAPE_SYNC_PG_BINDIR/psql" BY_COUNTS="$BYSTANDERS" BY_SHAPES=$SHAPES \
	BY_RUNS=$RUNS BY_COMMITS=$COMMITS BY_GAP=$GAP BY_PG="$pg_version"
python3 - "$here/RESULTS.md" <<'PY'
import os, statistics, subprocess, sys, time
sys.path.insert(0, os.path.dirname(sys.argv[1]))
from results_section import machine, write_section
import loadgen_driver

E = os.environ
out, loadgen, port, worker = E["BY_OUT"], E["BY_LOADGEN"], int(E["BY_PORT"]), int(E["BY_WORKER"])
probe_n, shapes, commits, gap = int(E["BY_PROBE"]), int(E["BY_SHAPES"]), int(E["BY_COMMITS"]), float(E["BY_GAP"])
counts = [int(n) for n in E["BY_COUNTS"].split()]
MARK = "((extract(epoch FROM clock_timestamp()) * 1000000)::bigint * 1000)::text"

def fds():
    return loadgen_driver.sockets(worker)

def start_loadgen(clients, path, extra, name):
    return loadgen_driver.start(loadgen, port, clients, path, extra, f"{out}/{name}.out",
                                E["BY_THREADS"])

result = loadgen_driver.report

def case(count, run):
    base = fds()
    idle = None
    if count:
        idle, _ = start_loadgen(count, "/v1/shape?table=by_idle&where=k%3D{i}",
                                ["--shapes", str(shapes), "--drop", "--rounds", "0"],
                                f"idle-{count}-{run}")
        time.sleep(1)
    probe, probe_f = start_loadgen(probe_n, "/v1/shape?table=by_probe",
                                   ["--rounds", str(commits)], f"probe-{count}-{run}")
    w = subprocess.Popen([E["BY_PSQL"], "-X", "-q"], stdin=subprocess.PIPE, text=True,
                         stdout=subprocess.DEVNULL)
    for _ in range(commits):
        w.stdin.write(f"INSERT INTO by_probe (mark) VALUES ({MARK});\n")
        w.stdin.flush()
        time.sleep(gap)
    w.stdin.close()
    w.wait()
    probe.wait(timeout=120)
    d = result(probe_f)
    if idle:
        idle.stdin.write("drop\n")
        idle.stdin.flush()
        idle.wait(timeout=120)
    deadline = time.time() + 60
    while fds() > base and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(1)
    last = [r["max_ms"] for r in d["rounds"] if r["max_ms"] is not None]
    res = {"p50": d["all"]["p50_ms"], "p99": d["all"]["p99_ms"],
           "last": statistics.median(last) if last else None,
           "samples": d["all"]["samples"] or 0, "errors": sum(d["errors"].values())}
    print(f"run {run}: {count} bystanders: probe p50 {res['p50']} ms, p99 {res['p99']} ms, "
          f"last {res['last']} ms, errors {res['errors']}", file=sys.stderr)
    return res

# a warm-up, not reported
case(counts[-1], 0)
results = {n: [] for n in counts}
for run in range(1, int(E["BY_RUNS"]) + 1):
    order = counts[run % len(counts):] + counts[:run % len(counts)]
    for n in order:
        results[n].append(case(n, run))

def med(key, rs):
    values = [r[key] for r in rs if r[key] is not None]
    return statistics.median(values) if values else None

rows = []
for n in counts:
    rs = results[n]
    p50, p99, last = med("p50", rs), med("p99", rs), med("last", rs)
    def ratio(key):
        rs0 = results.get(0, [])
        values = [r[key] / b[key] for r, b in zip(rs, rs0) if r[key] and b[key]]
        return f"**{statistics.median(values):.2f}x**" if values else "-"
    rows.append(f"| {n:,} | {p50:.1f} | {ratio('p50')} | {p99:.1f} | {ratio('p99')} | {last:.1f} | "
                f"{sum(r['samples'] for r in rs):,} | {sum(r['errors'] for r in rs)} |")
lines = [
    "## Bystanders: parked clients of other shapes",
    "",
    machine(E["BY_PG"]),
    "",
    f"`bash bench/bystanders.sh`: {probe_n} live clients on one shape get {commits} one-row commits "
    f"{E['BY_GAP']} s apart while the given number of other live clients (`bench/loadgen.c --drop`) "
    f"sit parked on {shapes:,} shapes of a table that is never written. Commit-to-client latency "
    "of the probe clients; the ratios are each run's median and p99 over the same run's with no "
    f"bystanders (the baseline), medians over {E['BY_RUNS']} runs, the counts in a new order each run. "
    "libmicrohttpd 0.9.75 walks a thread's whole list of suspended connections on each pass that "
    "resumes any of them; this is what that walk costs the clients that were woken.",
    "",
    "| bystanders | probe median ms | median / none | probe p99 ms | p99 / none | last client ms | samples | errors |",
    "|---:|---:|---:|---:|---:|---:|---:|---:|",
    *rows,
]
write_section(sys.argv[1], "bystanders", lines)
PY
