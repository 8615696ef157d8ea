#!/usr/bin/env bash
#
# bench/storm.sh: a disconnect storm (seed 004; issue 10, items 4 and 6). SIZES parked live
# clients on one shape (bench/build/loadgen --drop --rst) all reset their connections at once,
# while PROBE other clients on another table keep receiving a commit every 20 ms. Measured:
# the time from the resets until the worker has closed every dropped socket (its open sockets
# are back to as many as before the clients came, polled every millisecond), the probe
# clients' commit-to-client p99 during the storm against the same in a quiet window just
# before it (the baseline, same run), the admission slots still held
# afterwards (must be 0) and the worker's private memory (RssAnon) after, against before the
# clients came. The same storm is also dropped on bench/build/floor_server, whose drain is
# the floor for "notice a reset and free the connection". RUNS runs; reports medians.
# Writes the section "Disconnect storms" of bench/RESULTS.md.
#
# Knobs: RUNS (3), SIZES ("1000 10000"; a size needs that many file descriptors on both
# sides: the hard limit here, `ulimit -Hn`, bounds it), PROBE (20), LOADGEN_THREADS (1).
# About 4 minutes.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}
SIZES=${SIZES:-1000 10000}
PROBE=${PROBE:-20}
LOADGEN_THREADS=${LOADGEN_THREADS:-1}
bench_init	# the loadgen and floor_server processes of the Python part are listed in $BENCH_PIDS
bench_fd_limit
bench_tools
max=0
for n in $SIZES; do ((n > max)) && max=$n; done
if ((max + 200 > $(ulimit -n))); then
	echo "storms of $max connections need more file descriptors than $(ulimit -n)" >&2
	exit 1
fi

SHAPE_SYNC_EXTRA_CONF="shape_sync.max_connections = $((max + PROBE + 100))
shape_sync.max_concurrent_existing = $((max + PROBE + 100))
shape_sync.long_poll_timeout = '60s'" bench_cluster_start
cluster_psql -q <<SQL
CREATE EXTENSION shape_sync;
CREATE TABLE storm (id int PRIMARY KEY, mark text NOT NULL);
ALTER TABLE storm REPLICA IDENTITY FULL;
INSERT INTO storm VALUES (1, '0');
CREATE TABLE storm_probe (id bigserial PRIMARY KEY, mark text NOT NULL);
ALTER TABLE storm_probe REPLICA IDENTITY FULL;
SQL
worker=$(bench_worker_pid)

export STORM_OUT=$out STORM_LOADGEN=$here/build/loadgen STORM_FLOOR=$here/build/floor_server \
	STORM_PORT=${SHAPE_SYNC_URL##*:} STORM_WORKER=$worker STORM_PROBE=$PROBE \
	STORM_THREADS=$LOADGEN_THREADS STORM_PSQL="$SHAPE_SYNC_PG_BINDIR/psql" \
	STORM_SIZES="$SIZES" STORM_RUNS=$RUNS STORM_PG="$pg_version"
python3 - "$here/RESULTS.md" <<'PY'
import json, os, signal, statistics, subprocess, sys, threading, time
sys.path.insert(0, os.path.dirname(sys.argv[1]))
from results_section import machine, write_section
import loadgen_driver

E = os.environ
out, loadgen, floor = E["STORM_OUT"], E["STORM_LOADGEN"], E["STORM_FLOOR"]
worker = int(E["STORM_WORKER"])
probe_n, threads = int(E["STORM_PROBE"]), E["STORM_THREADS"]
MARK = "((extract(epoch FROM clock_timestamp()) * 1000000)::bigint * 1000)::text"

def psql(sql):
    return subprocess.run([E["STORM_PSQL"], "-X", "-At", "-c", sql], capture_output=True,
                          text=True, check=True).stdout.strip()

fds = loadgen_driver.sockets

def all_fds(pid):
    """Every descriptor: one directory read, fast enough to poll every millisecond."""
    return len(os.listdir(f"/proc/{pid}/fd"))

def rss_anon_kb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1])

def start_loadgen(port, clients, path, extra, name):
    return loadgen_driver.start(loadgen, port, clients, path, extra, f"{out}/{name}.out", threads)

result = loadgen_driver.report

def commits(n, gap=0.02):
    """n one-row commits on the probe table, gap apart; returns [(start, end)] of the window."""
    p = subprocess.Popen([E["STORM_PSQL"], "-X", "-q"], stdin=subprocess.PIPE, text=True,
                         stdout=subprocess.DEVNULL)
    t0 = time.time_ns()
    for _ in range(n):
        p.stdin.write(f"INSERT INTO storm_probe (mark) VALUES ({MARK});\n")
        p.stdin.flush()
        time.sleep(gap)
    p.stdin.close()
    p.wait()
    return t0, time.time_ns()

def p99(values):
    values = sorted(values)
    return values[max(0, int(len(values) * 0.99 + 0.5) - 1)] if values else None

def storm(target, size, run):
    """One storm on 'shape_sync' or 'floor'; returns a dict of measurements."""
    res = {}
    if target == "floor":
        fl = subprocess.Popen([floor, "--port", "0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
        loadgen_driver.track(fl, floor)
        port = int(fl.stdout.readline().split()[1])
        pid = fl.pid
    else:
        port, pid = int(E["STORM_PORT"]), worker
    time.sleep(0.3)
    base_fds, base_rss = fds(pid), rss_anon_kb(pid)
    if target == "shape_sync":
        probe, probe_f = start_loadgen(port, probe_n, "/v1/shape?table=storm_probe",
                                       ["--rounds", "10000"], f"probe-{size}-{run}")
        probe_fds = fds(pid)
        quiet = commits(50)
    lg, lg_f = start_loadgen(port, size, "/v1/shape?table=storm", ["--drop", "--rst", "--rounds", "0"],
                             f"storm-{target}-{size}-{run}")
    time.sleep(0.5)
    held = fds(pid)
    # the drop, and meanwhile the probe's commits
    if target == "shape_sync":
        window = {}
        t = threading.Thread(target=lambda: window.setdefault("w", commits(50)))
        t.start()
    t0 = time.monotonic()
    lg.send_signal(signal.SIGUSR1)
    goal = probe_fds if target == "shape_sync" else base_fds
    others = all_fds(pid) - fds(pid)  # log files; a round may hold one or two more meanwhile
    drained = None
    while time.monotonic() - t0 < 60:
        # polled by the count of all descriptors, confirmed by the sockets'
        if all_fds(pid) - others <= goal + 2 and fds(pid) <= goal:
            drained = time.monotonic() - t0
            break
        time.sleep(0.001)
    lg.wait()
    res["drain_ms"] = None if drained is None else drained * 1000
    res["held_fds"] = held - goal
    if target == "shape_sync":
        t.join()
        probe.send_signal(signal.SIGINT)
        probe.wait()
        d = result(probe_f)
        q0, q1 = quiet
        s0, s1 = window["w"]
        lat = {"quiet": [], "storm": []}
        for r in d["rounds"]:
            m = int(r["mark"])
            # a round's latencies are pooled: its p99 stands for the round
            if r["p99_ms"] is None:
                continue
            if q0 <= m <= q1:
                lat["quiet"].append(r["p99_ms"])
            elif s0 <= m <= s1:
                lat["storm"].append(r["p99_ms"])
        res["probe_quiet_p99"] = p99(lat["quiet"])
        res["probe_storm_p99"] = p99(lat["storm"])
        res["probe_rounds"] = (len(lat["quiet"]), len(lat["storm"]))
        time.sleep(3)  # the worker hands freed memory back at most once a second
        res["in_use"] = int(psql("SELECT sum(in_use) FROM shape_sync.admission"))
        res["rss_after_kb"] = rss_anon_kb(pid) - base_rss
        res["fds_after"] = fds(pid) - base_fds
    else:
        fl.stdin.close()
        fl.wait()
    print(f"run {run}: {target}, {size} clients: {res}", file=sys.stderr)
    return res

sizes = [int(s) for s in E["STORM_SIZES"].split()]
runs = int(E["STORM_RUNS"])
results = {(t, s): [] for t in ("shape_sync", "floor") for s in sizes}
for run in range(1, runs + 1):
    for size in sizes:
        order = ("floor", "shape_sync") if run % 2 else ("shape_sync", "floor")
        for target in order:
            results[(target, size)].append(storm(target, size, run))

def med(rs, key):
    vals = [r[key] for r in rs if r.get(key) is not None]
    return statistics.median(vals) if vals else None

def f1(v, unit=""):
    return "-" if v is None else f"{v:.1f}{unit}"

rows = []
for size in sizes:
    s, fl = results[("shape_sync", size)], results[("floor", size)]
    drain, floor_drain = med(s, "drain_ms"), med(fl, "drain_ms")
    per = None if drain is None else drain * 1000 / size
    quiet, stormy = med(s, "probe_quiet_p99"), med(s, "probe_storm_p99")
    rows.append(
        f"| {size:,} | {f1(drain, ' ms')} | {f1(per, ' µs')} | {f1(floor_drain, ' ms')} | "
        f"{'-' if not floor_drain or drain is None else f'{drain / floor_drain:.1f}x'} | "
        f"{f1(quiet, ' ms')} | {f1(stormy, ' ms')} | "
        f"{'-' if not quiet or stormy is None else f'{stormy / quiet:.1f}x'} | "
        f"{max(r['in_use'] for r in s)} | {f1(med(s, 'rss_after_kb'), ' kB')} | {max(r['fds_after'] for r in s)} |")
lines = [
    "## Disconnect storms",
    "",
    machine(E["STORM_PG"]),
    "",
    "`bash bench/storm.sh`: parked live clients on one shape (`bench/loadgen.c --drop --rst`) reset "
    "their connections at once. Drain: from the resets until the worker has closed every dropped "
    "socket (its open file descriptors back to the count before they came, polled every "
    "millisecond); the floor is the same storm dropped on `bench/floor_server.c` (epoll, frees a "
    f"connection on its reset). Meanwhile {probe_n} other live clients on another table get a commit "
    "every 20 ms: their p99 commit-to-client latency during the storm's window against a quiet window "
    "of the same length just before it (the baseline, same run). After (3 s after that window): "
    "admission slots still held, the worker's private resident memory (RssAnon) against before the "
    "clients came, and file "
    f"descriptors left over. Medians over {runs} runs.",
    "",
    "| parked clients | drain | per client | floor's drain | drain / floor | probe p99 quiet | probe p99 in the storm | ratio | slots held after | memory after | fds left |",
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    *rows,
]
write_section(sys.argv[1], "storm", lines)
PY
