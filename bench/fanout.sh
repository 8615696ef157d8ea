#!/usr/bin/env bash
#
# bench/fanout.sh: one commit woken at many parked live clients, and what each connection
# costs the worker (issue 10, items 1, 2 and 6).
#
# bench/build/loadgen (bench/loadgen.c) holds CLIENTS raw long-poll clients from one process
# and times, for every client, commit to the end of the response that carries it. The floor,
# measured by the same loadgen in the same run: bench/build/floor_server, an epoll server that
# parks the same live requests and, for each commit, writes one prebuilt response to all of
# them (no database, no decoding: the least any server can do). Cases: every count in CLIENTS
# on one shape (a one-row INSERT per commit), and SPREAD_CLIENTS over SPREAD_SHAPES shapes
# (`where k = i`; each commit updates one row of every shape in one transaction). COMMITS
# commits per case, GAP seconds apart, each row carrying its commit's time. Memory per connection: the worker's RssAnon (private
# memory, all buffers included; the shape logs are shared memory and not in it) with the
# clients parked again after COMMITS - 1 deliveries on their keep-alive connections, less
# the same before they connected, divided by the clients. RUNS runs, the floor and
# shape_sync alternating which goes first; reports medians over the runs of each run's
# median, p99 and time to the last client, and the ratio to the floor. Writes the section
# "Fan-out to many live clients" of bench/RESULTS.md.
#
# Knobs: RUNS (3), CLIENTS ("100 1000 10000"), SPREAD_CLIENTS (10000; 0 skips the case),
# SPREAD_SHAPES (1000), COMMITS (30), GAP (0.3), SPREAD_GAP (1.5: decoding a commit that
# changes a row of each of 1,000 shapes evaluates 1,000 where clauses per row, about half a
# second here, issue 12; closer commits would measure that backlog), LOADGEN_THREADS (1).
# About 12 minutes.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}
CLIENTS=${CLIENTS:-100 1000 10000}
SPREAD_CLIENTS=${SPREAD_CLIENTS:-10000}
SPREAD_SHAPES=${SPREAD_SHAPES:-1000}
COMMITS=${COMMITS:-30}
GAP=${GAP:-0.3}
SPREAD_GAP=${SPREAD_GAP:-1.5}
LOADGEN_THREADS=${LOADGEN_THREADS:-1}
bench_init
bench_fd_limit
bench_tools
loadgen=$here/build/loadgen
floor=$here/build/floor_server
max_clients=$SPREAD_CLIENTS
for n in $CLIENTS; do ((n > max_clients)) && max_clients=$n; done

SHAPE_SYNC_EXTRA_CONF="shape_sync.max_connections = $((max_clients + 100))
shape_sync.max_concurrent_existing = $((max_clients + 100))
shape_sync.max_concurrent_initial = $((SPREAD_SHAPES + 100))
shape_sync.max_new_shapes_per_client = 0
shape_sync.max_shapes = $((SPREAD_SHAPES + 24))
shape_sync.long_poll_timeout = '60s'" bench_cluster_start
port=${SHAPE_SYNC_URL##*:}
cluster_psql -q <<SQL
CREATE EXTENSION shape_sync;
CREATE TABLE fan_one (id bigserial PRIMARY KEY, mark text NOT NULL);
ALTER TABLE fan_one REPLICA IDENTITY FULL;
CREATE TABLE fan_spread (k int PRIMARY KEY, mark text NOT NULL);
ALTER TABLE fan_spread REPLICA IDENTITY FULL;
INSERT INTO fan_spread SELECT k, '0' FROM generate_series(0, $((SPREAD_SHAPES - 1))) k;
SQL
# the worker, once it serves (it starts over when the extension is created)
for _ in $(seq 1 100); do
	curl -sf -o /dev/null "$SHAPE_SYNC_URL/v1/shape?table=fan_one&offset=-1" && break
	sleep 0.1
done
worker=$(bench_worker_pid)
mark_sql='((extract(epoch FROM clock_timestamp()) * 1000000)::bigint * 1000)::text'


# run_case SERVER CLIENTS SHAPES RUN: one measurement; prints the loadgen JSON with
# "rss_kb_per_conn" added
run_case() {
	local server=$1 clients=$2 shapes=$3 run=$4 path target_pid fifo="$out/fifo" lg i before after port_now
	local json="$out/$server-$clients-$shapes-$run.json"
	rm -f "$fifo" && mkfifo "$fifo"
	if [[ $server == floor ]]; then
		"$floor" --port 0 <"$fifo" >"$out/floor.out" 2>/dev/null &
		target_pid=$!
		bench_track "$target_pid"
		exec 8>"$fifo"
		for ((i = 0; i < 50; i++)); do grep -q '^listening' "$out/floor.out" && break; sleep 0.1; done
		port_now=$(awk '/^listening/ { print $2 }' "$out/floor.out")
		path='/v1/shape?table=fan'
	else
		target_pid=$worker
		port_now=$port
		if ((shapes == 1)); then
			path='/v1/shape?table=fan_one'
		else
			path='/v1/shape?table=fan_spread&where=k%3D{i}'
		fi
	fi
	sleep 2.5 # what the previous case's clients had goes back first (at most once a second)
	before=$(bench_rss_anon_kb "$target_pid")
	"$loadgen" --port "$port_now" --clients "$clients" --shapes "$shapes" --path "$path" \
		--rounds "$COMMITS" --threads "$LOADGEN_THREADS" --timeout 300 >"$json.lg" 2>/dev/null &
	lg=$!
	bench_track "$lg"
	bench_wait_parked "$json.lg"
	for ((i = 1; i <= COMMITS; i++)); do
		if ((i == COMMITS)); then
			sleep 1 # every client is parked again, after COMMITS - 1 deliveries
			bench_rss_anon_kb "$target_pid" >"$out/after" # (this loop runs in a subshell)
		fi
		if [[ $server == floor ]]; then
			echo "commit $(date +%s%N)" >&8
		elif ((shapes == 1)); then
			echo "INSERT INTO fan_one (mark) VALUES ($mark_sql);"
		else
			echo "UPDATE fan_spread SET mark = $mark_sql;"
		fi
		if ((shapes == 1)); then sleep "$GAP"; else sleep "$SPREAD_GAP"; fi
	done | if [[ $server == floor ]]; then cat; else cluster_psql -q >/dev/null; fi
	wait "$lg" || true
	after=$(cat "$out/after")
	if [[ $server == floor ]]; then
		exec 8>&-
		wait "$target_pid" 2>/dev/null || true
	fi
	helpers=()	# both ended
	python3 - "$json.lg" "$before" "$after" "$clients" <<'PY' >"$json"
import json, sys
d = json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][-1])
d["rss_kb_per_conn"] = (int(sys.argv[3]) - int(sys.argv[2])) / int(sys.argv[4])
d["rss_kb"] = [int(sys.argv[2]), int(sys.argv[3])]
print(json.dumps(d))
PY
	cat "$json"
}

# a warm-up, not reported: the first commits after a start are slower (caches, the first shape)
run_case shape_sync 100 1 0 >/dev/null
rm -f "$out"/shape_sync-100-1-0.json
for ((run = 1; run <= RUNS; run++)); do
	for n in $CLIENTS; do
		if ((run % 2)); then order="floor shape_sync"; else order="shape_sync floor"; fi
		for s in $order; do
			run_case "$s" "$n" 1 "$run" >/dev/null
			echo "run $run: $s, $n clients on 1 shape: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["all"], "rss/conn", round(d["rss_kb_per_conn"],1), "kB", d["rss_kb"], d["errors"])' "$out/$s-$n-1-$run.json")" >&2
		done
	done
	if ((SPREAD_CLIENTS > 0)); then
		for s in floor shape_sync; do
			run_case "$s" "$SPREAD_CLIENTS" "$SPREAD_SHAPES" "$run" >/dev/null
			echo "run $run: $s, $SPREAD_CLIENTS clients on $SPREAD_SHAPES shapes: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["all"], "rss/conn", round(d["rss_kb_per_conn"],1), "kB", d["rss_kb"], d["errors"])' "$out/$s-$SPREAD_CLIENTS-$SPREAD_SHAPES-$run.json")" >&2
		done
	fi
done

BENCH_OUT=$out BENCH_PG="$pg_version" BENCH_CLIENTS="$CLIENTS" BENCH_SPREAD="$SPREAD_CLIENTS" \
	BENCH_SHAPES="$SPREAD_SHAPES" BENCH_RUNS=$RUNS BENCH_COMMITS=$COMMITS BENCH_GAP=$GAP \
	BENCH_SPREAD_GAP=$SPREAD_GAP \
	python3 - "$here/RESULTS.md" <<'PY'
import glob, json, os, statistics, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
from results_section import machine, write_section

out = os.environ["BENCH_OUT"]
runs = int(os.environ["BENCH_RUNS"])

def load(server, clients, shapes):
    return [json.load(open(f)) for f in sorted(glob.glob(f"{out}/{server}-{clients}-{shapes}-*.json"))]

def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None

def stats(ds):
    last = [max((r["max_ms"] for r in d["rounds"] if r["max_ms"] is not None), default=None) for d in ds]
    return {
        "p50": med([d["all"]["p50_ms"] for d in ds]),
        "p99": med([d["all"]["p99_ms"] for d in ds]),
        "last": med([med([r["max_ms"] for r in d["rounds"]]) for d in ds]),
        "rss": med([d["rss_kb_per_conn"] for d in ds]),
        "samples": sum(d["all"]["samples"] or 0 for d in ds),
        "errors": {k: sum(d["errors"].get(k, 0) for d in ds) for k in ds[0]["errors"]} if ds else {},
    }

def fmt(v, unit=""):
    return "-" if v is None else f"{v:.1f}{unit}"

def ratio(a, b):
    return "-" if a is None or not b else f"{a / b:.2f}x"

cases = [(int(n), 1) for n in os.environ["BENCH_CLIENTS"].split()]
if int(os.environ["BENCH_SPREAD"]) > 0:
    cases.append((int(os.environ["BENCH_SPREAD"]), int(os.environ["BENCH_SHAPES"])))
rows = []
notes = []
for clients, shapes in cases:
    s, f = stats(load("shape_sync", clients, shapes)), stats(load("floor", clients, shapes))
    where = "1 shape" if shapes == 1 else f"{shapes} shapes"
    rows.append(f"| {clients:,} on {where} | {fmt(s['p50'])} | {fmt(f['p50'])} | {fmt(s['p99'])} | "
                f"{fmt(f['p99'])} | **{ratio(s['p99'], f['p99'])}** | {fmt(s['last'])} | {fmt(f['last'])} | "
                f"{fmt(s['rss'], ' kB')} | {fmt(f['rss'], ' kB')} | {s['samples']:,} |")
    bad = {k: v for k, v in s["errors"].items() if v}
    if bad:
        notes.append(f"{clients:,} clients on {where}: loadgen counted {bad} against shape_sync.")
lines = [
    "## Fan-out to many live clients",
    "",
    machine(os.environ["BENCH_PG"]),
    "",
    "`bash bench/fanout.sh`: raw long-poll clients held by `bench/loadgen.c` (one process, epoll), "
    "each commit's row carrying its commit time; latency is commit to the end of the response at each "
    "client. The floor is `bench/floor_server.c`, which parks the same requests and writes one prebuilt "
    "response to all of them per commit, measured by the same loadgen in the same run (no database and "
    "no decoding in it). "
    f"{os.environ['BENCH_COMMITS']} commits {os.environ['BENCH_GAP']} s apart per case "
    f"({os.environ['BENCH_SPREAD_GAP']} s over many shapes, whose decoding takes about half a second a "
    "commit: issue 12); "
    f"medians over {runs} runs of each run's median, p99 and time to the last client (the "
    "median over commits of the slowest client). Memory: the worker's private resident memory "
    "(RssAnon) with every client parked after all but one delivery on its keep-alive connection, less "
    "the same before they connected, per client. Server, clients and writer share this machine.",
    "",
    "| clients | median ms | floor median | p99 ms | floor p99 | p99 / floor | last client ms | floor last | memory per connection | floor's | samples |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    *rows,
    "",
    *notes,
]
write_section(sys.argv[1], "fanout", lines)
PY
