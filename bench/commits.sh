#!/usr/bin/env bash
#
# bench/commits.sh: what decoding costs per commit. The worker decodes a commit only once
# TransactionIdIsInProgress(xid) is false (src/pg/worker/decoder.c, dec_commit_still_running), and it
# empties the relation and catalog caches whenever its main loop switches between resolving
# requests (the current catalog) and decoding (the historic one: dec_switch_catalog_use).
# bench/decode.sh, one big transaction, shows neither. Here COMMITS one-row INSERT
# transactions, each its own commit (a procedure that COMMITs per row), on a fresh table for
# each measurement, with one shape on it (no where clause) followed live by a raw client:
#   baseline          a test_decoding slot created just before the writes (dropped after):
#                     the server's time of SELECT count(*) FROM pg_logical_slot_get_changes(...)
#                     over them (clock_timestamp() - statement_timestamp(): no psql start);
#   backlog_quiet     shape_sync decodes the same writes as a backlog: from its release (the
#                     server's clock at pg_cancel_backend, below) until the client has read
#                     the response holding the row id = COMMITS, the last one (its body, not
#                     parsed: see follow.py);
#   backlog_requests  the same, while one connection sends catch-up requests for a shape of
#                     another table back to back (offset=-1, then offset=<end>&handle=<handle>);
#   live_quiet        shape_sync decodes while the commits are written (synchronous_commit =
#                     local: each commit flushes the WAL and wakes the worker), as in use: from
#                     the start of the writes until the client has read the last row;
#   live_requests     the same with the catch-up requests: the main loop now resolves requests
#                     (current catalog) and decodes (historic catalog) in turn all the time;
#   idle_requests     the catch-up requests alone for 1 s, nothing to decode: what a request
#                     costs the worker without a switch.
# For every shape_sync measurement, the CPU time of the worker's main thread over it
# (/proc/PID/task/PID/schedstat, in ns; the HTTP threads are not in it) and the requests it
# resolved meanwhile (the catch-up loop's and the follower's live ones). A catch-up request's
# cost to the main thread while decoding, (CPU of live_requests - CPU of live_quiet) / (their
# difference in requests), against its cost in idle_requests, is what interleaving adds.
# The backlog: shape_sync decodes while commits are written, so to time the decoding alone a
# transaction whose commit waits for a synchronous standby that does not exist
# (synchronous_standby_names = 'bench_gate'; the writes use synchronous_commit = off, the last
# local to flush the WAL, and do not wait) stays in progress at its commit record, where the
# worker stops, while the commits are written behind it; pg_cancel_backend ends the wait, and
# the end of that commit wakes the worker (the hold of test/integration/decoder_behind.sh,
# without a standby). The baseline's writes sit behind the same hold, so that the worker does
# not decode them while get_changes runs.
# RUNS runs, each in a different order (the list reversed every other run); reports medians.
# Writes the section "Decoding many small transactions" of bench/RESULTS.md.
#
# Knobs: RUNS (3), COMMITS (20000).
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}
COMMITS=${COMMITS:-20000}
((COMMITS >= 2)) || { echo "COMMITS must be at least 2" >&2; exit 1; }
bench_init	# helpers: the background processes of the measurement under way

# Follows a shape live until the row id = LAST_ID: prints "first last live_requests", the
# times (epoch) a response with the first change and one with that row had been read, and the
# number of live requests. A response is parsed only when it may hold that row (its id, quoted,
# is in the body), after its time is taken: JSON parsing in Python is the client's cost (about
# 50 ms for 20000 rows), and the next request does not wait for it.
cat >"$out/follow.py" <<'PY'
import http.client, json, sys, time, urllib.parse
url, table, last_id, ready = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
u = urllib.parse.urlsplit(url)
conn = http.client.HTTPConnection(u.hostname, u.port, timeout=150)
q = {"table": table, "offset": "-1"}
def get():
    conn.request("GET", "/v1/shape?" + urllib.parse.urlencode(q))
    r = conn.getresponse()
    body = r.read()
    received = time.time()
    if r.status != 200:
        sys.exit(f"{table}: status {r.status}: {body[:300]!r}")
    q["handle"], q["offset"] = r.getheader("electric-handle"), r.getheader("electric-offset")
    return r, received, body
while "electric-up-to-date" not in get()[0].headers:
    pass
open(ready, "w").close()
q["live"] = "true"
first, n, mark = None, 0, f'"{last_id}"'.encode()
while True:
    r, received, body = get()
    n += 1
    if first is None and b'"insert"' in body:
        first = received
    if mark in body and any(m.get("headers", {}).get("operation") == "insert" and m["value"]["id"] == last_id
                            for m in json.loads(body)):
        print(f"{first:.6f} {received:.6f} {n}")
        sys.exit(0)
PY
# Catch-up requests for TABLE on one connection, back to back (offset=-1, then the shape's
# end with its handle, in turn) until STOP exists: prints the time each one ended.
cat >"$out/requests.py" <<'PY'
import http.client, os, sys, time, urllib.parse
url, table, stop = sys.argv[1], sys.argv[2], sys.argv[3]
u = urllib.parse.urlsplit(url)
conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
handle = offset = None
ends = []
while not os.path.exists(stop):
    q = {"table": table, "offset": "-1"}
    if len(ends) % 2 and handle:
        q.update(offset=offset, handle=handle)
    conn.request("GET", "/v1/shape?" + urllib.parse.urlencode(q))
    r = conn.getresponse()
    r.read()
    if r.status != 200:
        sys.exit(f"{table}: status {r.status}")
    handle, offset = r.getheader("electric-handle"), r.getheader("electric-offset")
    ends.append(time.time())
print("\n".join(f"{t:.6f}" for t in ends))
PY

# no standby 'bench_gate' exists, and only the gate's commit waits for it
SHAPE_SYNC_MANAGE_REPLICA_IDENTITY=off SHAPE_SYNC_EXTRA_CONF="shape_sync.long_poll_timeout = 120s
synchronous_standby_names = 'bench_gate'
synchronous_commit = local" bench_cluster_start
cluster_psql <<'SQL' >/dev/null
CREATE TABLE bench_commits_gate (id serial PRIMARY KEY);
CREATE TABLE bench_commits_side (id int PRIMARY KEY, v text) WITH (autovacuum_enabled = off);
ALTER TABLE bench_commits_side REPLICA IDENTITY FULL;
INSERT INTO bench_commits_side SELECT g, 'v' || g FROM generate_series(1, 10) g;
CREATE PROCEDURE bench_commits_write(tbl regclass, n int) LANGUAGE plpgsql AS $$
BEGIN
	FOR i IN 1..n LOOP
		EXECUTE format('INSERT INTO %s VALUES ($1, $2)', tbl) USING i, 'v' || i;
		COMMIT;
	END LOOP;
END $$;
SQL
worker=$(bench_worker_pid)
[[ $worker =~ ^[0-9]+$ && -r /proc/$worker/task/$worker/schedstat ]] ||
	{ echo "cannot read the CPU time of the shape_sync worker ($worker)" >&2; exit 1; }

worker_cpu() { bench_cpu_ns "$worker"; }	# ns on CPU, main thread
cpu_seconds() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.6f", (b - a) / 1e9 }'; }
count_between() {	# from to file: the lines (times) in [from, to]
	awk -v a="$1" -v b="$2" '$1 >= a && $1 <= b { n++ } END { print n + 0 }' "$3"
}

caught_up() {	# waits until the worker has decoded all WAL written so far
	local lsn
	lsn=$(cluster_psql -At -c "SELECT pg_current_wal_insert_lsn()")
	for _ in $(seq 1 600); do
		[[ $(cluster_psql -At -c "SELECT bool_and(confirmed_flush_lsn >= '$lsn') FROM pg_replication_slots WHERE slot_name LIKE 'shape_sync%'") == t ]] &&
			return 0
		sleep 0.1
	done
	echo "the worker did not catch up" >&2
	exit 1
}

write_commits() {	# table off|local  (prints the seconds): COMMITS commits, the last one local
	local t0 t1
	t0=$(date +%s.%N)
	cluster_psql -c "SET synchronous_commit = $2" -c "CALL bench_commits_write('$1', $((COMMITS - 1)))" \
		-c "SET synchronous_commit = local" -c "INSERT INTO $1 VALUES ($COMMITS, 'v$COMMITS')" >/dev/null
	t1=$(date +%s.%N)
	elapsed "$t0" "$t1"
}

requests_start() {
	rm -f "$out/stop"
	python3 "$out/requests.py" "$SHAPE_SYNC_URL" bench_commits_side "$out/stop" >"$out/requests.txt" &
	requests_pid=$!
	bench_track "$requests_pid"
}

requests_stop() {
	touch "$out/stop"
	wait "$requests_pid"
}

# Each prints "name run seconds cpu_seconds writes_seconds loop_requests follower_requests".

measure_baseline() {	# run
	local table="bench_commits_baseline_$1" writes res n secs
	cluster_psql -c "CREATE TABLE $table (id int PRIMARY KEY, v text) WITH (autovacuum_enabled = off)" >/dev/null
	cluster_psql -c "SELECT pg_create_logical_replication_slot('bench_commits', 'test_decoding')" >/dev/null
	gate_hold bench_commits_gate
	writes=$(write_commits "$table" off)
	# the aggregate's clock_timestamp() is read after the last change is counted
	res=$(cluster_psql -At -F ' ' -c "SELECT count(*), extract(epoch FROM clock_timestamp() - statement_timestamp()) FROM pg_logical_slot_get_changes('bench_commits', NULL, NULL)")
	read -r n secs <<<"$res"
	((n >= 3 * COMMITS)) || { echo "test_decoding returned $n rows for $COMMITS commits" >&2; exit 1; }
	gate_release
	caught_up
	cluster_psql -c "SELECT pg_drop_replication_slot('bench_commits')" >/dev/null
	helpers=()
	echo "baseline $1 $secs - $writes 0 0"
}

measure_shape() {	# backlog|live quiet|requests run
	local name="$1_$2" table="bench_commits_$1_$2_$3" writes t0 t1 c0 c1 first nf n=0 follow_pid
	cluster_psql -c "CREATE TABLE $table (id int PRIMARY KEY, v text) WITH (autovacuum_enabled = off)" \
		-c "ALTER TABLE $table REPLICA IDENTITY FULL" >/dev/null
	rm -f "$out/ready"
	python3 "$out/follow.py" "$SHAPE_SYNC_URL" "$table" "$COMMITS" "$out/ready" >"$out/follow.txt" &
	follow_pid=$!
	bench_track "$follow_pid"
	for _ in $(seq 1 300); do
		[[ -e $out/ready ]] && break
		sleep 0.1
	done
	[[ -e $out/ready ]] || { echo "the shape of $table is not up to date" >&2; exit 1; }
	if [[ $2 == requests ]]; then
		requests_start
	fi
	if [[ $1 == backlog ]]; then
		gate_hold bench_commits_gate
		sleep 0.2	# the live request is parked, the worker holds at the gate's commit
		writes=$(write_commits "$table" off)
		c0=$(worker_cpu)
		gate_release
		read -r _ t0 <"$out/released"
	else
		sleep 0.2	# the live request is parked
		t0=$(date +%s.%N)
		c0=$(worker_cpu)
		writes=$(write_commits "$table" local)
	fi
	wait "$follow_pid"
	c1=$(worker_cpu)
	read -r first t1 nf <"$out/follow.txt"
	if [[ $1 == backlog ]]; then
		awk -v a="$t0" -v b="$first" 'BEGIN { exit !(b >= a) }' ||
			{ echo "$table: a change came before the release: the gate did not hold the worker" >&2; exit 1; }
	fi
	if [[ $2 == requests ]]; then
		requests_stop
		n=$(count_between "$t0" "$t1" "$out/requests.txt")
	fi
	helpers=()
	caught_up
	echo "$name $3 $(elapsed "$t0" "$t1") $(cpu_seconds "$c0" "$c1") $writes $n $nf"
}

measure_idle() {	# run
	local tc0 tc1 c0 c1
	requests_start
	sleep 0.2
	tc0=$(date +%s.%N)
	c0=$(worker_cpu)
	sleep 1
	c1=$(worker_cpu)
	tc1=$(date +%s.%N)
	requests_stop
	helpers=()
	echo "idle_requests $1 $(elapsed "$tc0" "$tc1") $(cpu_seconds "$c0" "$c1") - $(count_between "$tc0" "$tc1" "$out/requests.txt") 0"
}

measure() {	# name run
	case $1 in
	baseline) measure_baseline "$2" ;;
	idle_requests) measure_idle "$2" ;;
	*) measure_shape "${1%%_*}" "${1#*_}" "$2" ;;
	esac
}

all="baseline backlog_quiet backlog_requests live_quiet live_requests idle_requests"
for i in $(seq 1 "$RUNS"); do
	# reverse the order every other run, so that no measurement always runs on a warmer server
	if ((i % 2)); then order=$all; else order=$(tr ' ' '\n' <<<"$all" | tac | tr '\n' ' '); fi
	for name in $order; do
		measure "$name" "$i" >>"$out/runs.txt"
	done
done
[[ $(cluster_psql -At -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'shape_sync'") == "$worker" ]] ||
	{ echo "the shape_sync worker restarted during the runs" >&2; exit 1; }
cluster_stop

python3 - "$out/runs.txt" "$RUNS" "$COMMITS" "$here" "$pg_version" <<'PY'
import statistics, sys
runs_file, runs, commits, here, pg = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
sys.path.insert(0, here)
from results_section import machine, write_section
r = {}	# name -> run -> (seconds, cpu, writes, loop requests, follower requests)
for line in open(runs_file):
    name, run, secs, cpu, writes, n, nf = line.split()
    f = lambda x: None if x == "-" else float(x)
    r.setdefault(name, {})[int(run)] = (float(secs), f(cpu), f(writes), int(n), int(nf))
med = lambda name, k: statistics.median(v[k] for v in r[name].values())
listed = lambda name, k: ", ".join(f"{v[k]:.3f}" for _, v in sorted(r[name].items()))
base = med("baseline", 0)
writes_off = statistics.median(v[2] for n in ("baseline", "backlog_quiet", "backlog_requests") for v in r[n].values())
reqs = lambda v: v[3] + v[4]
# a request's cost to the main thread: alone, and while decoding (the live runs' difference)
idle_us = statistics.median(v[1] / v[3] * 1e6 for v in r["idle_requests"].values())
per_run = [(r["live_requests"][i][1] - r["live_quiet"][i][1]) / (reqs(r["live_requests"][i]) - reqs(r["live_quiet"][i])) * 1e6
           for i in r["live_quiet"] if reqs(r["live_requests"][i]) > reqs(r["live_quiet"][i])]
busy_us = statistics.median(per_run) if per_run else None
lines = [
    "## Decoding many small transactions",
    "",
    f"{machine(pg)} `bash bench/commits.sh`: medians of {runs} runs.",
    "",
    f"{commits} one-row `INSERT` transactions, each its own commit (a procedure that commits per "
    "row), on a fresh table per measurement with one shape on it (no where clause) followed by a "
    "live raw client; \"worker CPU\" is the CPU time of the shape_sync worker's main thread over "
    "the measurement (decoding, resolving requests; not the HTTP threads), from "
    "`/proc/PID/task/PID/schedstat`. Each run takes the measurements in another order.",
    "",
    "Decoding a backlog. shape_sync decodes while commits are written, so to time the decoding "
    "alone a transaction whose commit waits for a synchronous standby that is not there holds the "
    "worker at its commit record (still in progress) while the commits are written behind it "
    "(they do not wait: `synchronous_commit = off`, the last one `local`); `pg_cancel_backend` "
    "ends the wait, and the end of that commit wakes the worker. shape_sync: seconds from the "
    "release (the server's clock) until the client has read the response holding the last row "
    "(not parsed yet: JSON parsing in Python is the client's cost). Baseline: a `test_decoding` slot created just before the writes (behind "
    "the same hold); the server's time of `SELECT count(*) FROM pg_logical_slot_get_changes(...)`. "
    "shape_sync also encodes the rows, appends them to the shape's log and sends them over HTTP; "
    "`test_decoding` formats text lines into a tuplestore.",
    "",
    "| scenario | seconds | commits/s | ratio to baseline | worker CPU s | requests/s |",
    "|---|---:|---:|---:|---:|---:|",
]
def row(label, name, seconds_key=0):
    s = med(name, seconds_key)
    cpu = "" if name == "baseline" else f"{med(name, 1):.3f}"
    rps = "" if name == "baseline" else f"{statistics.median(reqs(v) / v[0] for v in r[name].values()):.0f}"
    return f"| {label} | {s:.3f} | {commits / s:.0f} | {s / base:.2f}x | {cpu} | {rps} |"
lines += [
    row("`test_decoding`: `pg_logical_slot_get_changes` (baseline)", "baseline"),
    row("shape_sync, quiet", "backlog_quiet"),
    row("shape_sync, catch-up requests on another shape", "backlog_requests"),
    "",
    "A backlog is decoded in batches of up to 50 ms (`DECODER_BATCH_MS`) and requests are "
    "resolved between batches, so there the caches are emptied at most twice a batch; when the "
    "backlog fits in one batch, the requests wait for it.",
    "",
    "Decoding while the commits are written, as in use (`synchronous_commit = local`: each commit "
    "flushes the WAL and wakes the worker, which holds a commit record whose transaction is still "
    "in progress until it ends). Seconds from the start of the "
    "writes until the client has read the last row; commits/s and the ratio are of the worker's "
    "CPU time, against the baseline's seconds (one process decoding, on CPU throughout); "
    "requests/s counts the catch-up requests and the follower's own live requests, each resolved "
    "by the main loop:",
    "",
    "| scenario | seconds | writes alone s | worker CPU s | commits per CPU s | CPU ratio to baseline | requests/s |",
    "|---|---:|---:|---:|---:|---:|---:|",
]
for label, name in (("shape_sync, quiet", "live_quiet"),
                    ("shape_sync, catch-up requests on another shape", "live_requests")):
    cpu = med(name, 1)
    rps = statistics.median(reqs(v) / v[0] for v in r[name].values())
    lines.append(f"| {label} | {med(name, 0):.3f} | {med(name, 2):.3f} | {cpu:.3f} | "
                 f"{commits / cpu:.0f} | {cpu / base:.2f}x | {rps:.0f} |")
idle = (f"A catch-up request costs the main thread {idle_us:.0f} µs when there is nothing to decode "
        f"({statistics.median(v[3] / v[0] for v in r['idle_requests'].values()):.0f} requests/s on one "
        "connection for 1 s)")
if busy_us is None:
    interleaving = (f"{idle}; what it costs while decoding could not be estimated: no run's live "
                    "measurement with requests resolved more requests than the quiet one. ")
else:
    interleaving = (
        f"{idle} and {busy_us:.0f} µs while it decodes these commits (the difference of the worker "
        "CPU of the two live measurements over the difference of their requests, median of the "
        f"runs). The {busy_us - idle_us:.0f} µs more are what interleaving adds: the switch from "
        "decoding to resolving and back, each emptying the relation and catalog caches "
        "(`dec_switch_catalog_use`, src/pg/worker/decoder.c), and the entries built again after each (and "
        "the writer, the clients and the worker sharing the cores). ")
lines += [
    "",
    interleaving +
    f"Writing the commits alone took {writes_off:.2f} s with `synchronous_commit = off` (median "
    "of the backlog measurements).",
    "",
    f"Runs (seconds): baseline {listed('baseline', 0)}; backlog quiet {listed('backlog_quiet', 0)}; "
    f"backlog with requests {listed('backlog_requests', 0)}; live quiet {listed('live_quiet', 0)} "
    f"(worker CPU {listed('live_quiet', 1)}); live with requests {listed('live_requests', 0)} "
    f"(worker CPU {listed('live_requests', 1)}).",
]
write_section(f"{here}/RESULTS.md", "commits", lines)
PY
