#!/usr/bin/env bash
#
# bench/proxy.sh: what nginx in front (examples/nginx/shape_sync.conf, as documented) saves
# shape_sync with many live clients of one shape (issue 28, item 5).
#
# bench/build/loadgen (bench/loadgen.c) holds CLIENTS raw long-poll clients of one shape, each
# following the Shape protocol, and times for every client commit to the end of the response
# that carries it. Two ways, alternating which goes first in each run:
#   direct  the clients talk to shape_sync (with the secret in their URL);
#   nginx   the clients talk to nginx, which asks the application (the example's server, which
#           says yes to all; nginx keeps the yes 10 s), adds the secret, and collapses identical
#           requests (proxy_cache_lock). loadgen speaks plain HTTP/1.1, so nginx gets a plain
#           listener beside its TLS one (scripts/lib/nginx.sh): TLS, which browsers need, is not
#           measured.
# Per case: a shape of its own, COMMITS one-row INSERTs GAP seconds apart, each row carrying
# its commit's time; a case starts once the previous one's requests have left shape_sync
# (long polls of 5 s, so that those nginx still holds for gone clients end soon).
# Reported, medians over RUNS runs: the clients' median and p99 latency, the shape requests that
# reached shape_sync per commit (its own counters), and the CPU time per commit of shape_sync's
# worker (all its threads: HTTP, decoding) and of nginx's workers (one per CPU). Server, proxy, clients and
# writer share this machine. Writes the section "Behind nginx" of bench/RESULTS.md.
#
# Knobs: RUNS (3), CLIENTS ("1000 10000"), COMMITS (20), GAP (0.5). About 5 minutes.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=scripts/lib/nginx.sh
source "$root/scripts/lib/nginx.sh"
RUNS=${RUNS:-3}
CLIENTS=${CLIENTS:-1000 10000}
COMMITS=${COMMITS:-20}
GAP=${GAP:-0.5}
bench_init
bench_fd_limit
bench_tools
bench_need nginx openssl node
[[ -d $root/examples/web/node_modules ]] || { echo "run scripts/install-deps.sh first" >&2; exit 1; }
loadgen=$here/build/loadgen
max_clients=0
for n in $CLIENTS; do ((n > max_clients)) && max_clients=$n; done

secret=bench-secret-$RANDOM$RANDOM
SHAPE_SYNC_EXTRA_CONF="shape_sync.max_connections = $((max_clients + 100))
shape_sync.max_concurrent_existing = $((max_clients + 100))
shape_sync.max_new_shapes_per_client = 0
shape_sync.long_poll_timeout = '5s'
shape_sync.trusted_proxies = '127.0.0.1'
shape_sync.secret = '$secret'" bench_cluster_start
port=${SHAPE_SYNC_URL##*:}
cluster_psql -q <<SQL
CREATE EXTENSION shape_sync;
CREATE TABLE px_one (id bigserial PRIMARY KEY, mark text NOT NULL);
ALTER TABLE px_one REPLICA IDENTITY FULL;
SQL
for _ in $(seq 1 100); do
	curl -sf -o /dev/null "$SHAPE_SYNC_URL/v1/shape?table=px_one&offset=-1&secret=$secret" && break
	sleep 0.1
done
worker=$(bench_worker_pid)
mark_sql='((extract(epoch FROM clock_timestamp()) * 1000000)::bigint * 1000)::text'

# the application (for auth_request) and nginx
app_port=$(bench_free_port)
(cd "$root/examples/web" && node build.mjs >/dev/null)
EXAMPLE_PORT=$app_port node "$root/examples/web/serve.mjs" >"$out/app.log" 2>&1 &
bench_track $!
tls_port=$(cluster_free_port $((app_port + 1)))
plain_port=$(cluster_free_port $((tls_port + 1)))
mkdir -p "$out/nginx"
chmod 755 "$out"
nginx_start "$out/nginx" "$port" "$app_port" "$secret" "$tls_port" "$plain_port"
trap 'nginx_stop "$out/nginx"; bench_cleanup' EXIT
# nginx's workers, one per CPU (scripts/lib/nginx.sh): each holds, for each client it answers
# from the cache, the client's socket and the cache file open, so that 10,000 clients on one
# worker need more than the 20,000 descriptors some machines allow
nginx_workers=$(pgrep -P "$(cat "$out/nginx/nginx.pid")" -f "worker process" | tr '\n' ' ')
for _ in $(seq 1 100); do
	[[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$plain_port/v1/shape?table=px_one&offset=-1") == 200 ]] && break
	sleep 0.1
done

shape_requests() {
	curl -s "$SHAPE_SYNC_URL/metrics?secret=$secret" |
		awk '/^shape_sync_http_requests_total\{route="shape"/ { n += $2 } END { print n + 0 }'
}
live_waiters() {
	curl -s "$SHAPE_SYNC_URL/metrics?secret=$secret" | awk '/^shape_sync_live_waiters / { print $2 }'
}
cpu_ms() {	# PID...: user + system time of the whole processes, in ms
	local p
	for p in "$@"; do cat "/proc/$p/stat"; done |
		awk -v hz="$(getconf CLK_TCK)" '{ t += $14 + $15 } END { print t * 1000 / hz }'
}


# run_case WAY CLIENTS RUN: one measurement; prints loadgen's JSON with the counts added
run_case() {
	local way=$1 clients=$2 run=$3 lg i path port_now req0 req1 cpu0 cpu1 ng0 ng1 # case_no is global
	local json="$out/$way-$clients-$run.json"
	# a shape of its own (an always-true where clause that differs per case): clients that
	# began at an earlier case's cached snapshot would first walk that case's answers
	case_no=$((case_no + 1))
	path="/v1/shape?table=px_one&where=id%20%3E%20-$case_no"
	if [[ $way == direct ]]; then
		port_now=$port path+="&secret=$secret"
	else
		port_now=$plain_port
	fi
	# the previous case is over at shape_sync too: nginx's requests for clients that are gone
	# end at their long poll's timeout (5 s here), and would be counted in this case
	for ((i = 0; i < 300; i++)); do
		[[ $(live_waiters) == 0 ]] && break
		sleep 0.1
	done
	sleep 1
	"$loadgen" --port "$port_now" --clients "$clients" --path "$path" --rounds "$COMMITS" \
		--timeout 300 >"$json.lg" 2>/dev/null &
	lg=$!
	bench_track "$lg"
	bench_wait_parked "$json.lg"
	req0=$(shape_requests) cpu0=$(cpu_ms "$worker") ng0=$(cpu_ms $nginx_workers)
	for ((i = 1; i <= COMMITS; i++)); do
		echo "INSERT INTO px_one (mark) VALUES ($mark_sql);"
		sleep "$GAP"
	done | cluster_psql -q >/dev/null
	wait "$lg" || true
	req1=$(shape_requests) cpu1=$(cpu_ms "$worker") ng1=$(cpu_ms $nginx_workers)
	helpers=("${helpers[@]/$lg/}")
	python3 - "$json.lg" "$((req1 - req0))" "$cpu0" "$cpu1" "$ng0" "$ng1" "$COMMITS" <<'PY' >"$json"
import json, sys
d = json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][-1])
commits = int(sys.argv[7])
# requests counted after every client parked: the live requests of the commits, less the
# metrics scrapes' own (route="metrics" is not counted)
d["upstream_per_commit"] = int(sys.argv[2]) / commits
d["origin_cpu_ms_per_commit"] = (float(sys.argv[4]) - float(sys.argv[3])) / commits
d["nginx_cpu_ms_per_commit"] = (float(sys.argv[6]) - float(sys.argv[5])) / commits
print(json.dumps(d))
PY
	cat "$json"
}

case_no=0
run_case direct 100 0 >/dev/null # a warm-up, not reported
run_case nginx 100 0 >/dev/null
rm -f "$out"/*-100-0.json
for ((run = 1; run <= RUNS; run++)); do
	for n in $CLIENTS; do
		if ((run % 2)); then order="direct nginx"; else order="nginx direct"; fi
		for way in $order; do
			run_case "$way" "$n" "$run" >/dev/null
			echo "run $run: $way, $n clients: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["all"], "upstream/commit", d["upstream_per_commit"], "cpu ms/commit", round(d["origin_cpu_ms_per_commit"], 1), "nginx", round(d["nginx_cpu_ms_per_commit"], 1), d["errors"], "slowest per commit", [r["max_ms"] for r in d["rounds"]])' "$out/$way-$n-$run.json")" >&2
		done
	done
done

BENCH_OUT=$out BENCH_PG="$pg_version" BENCH_CLIENTS="$CLIENTS" BENCH_RUNS=$RUNS \
	BENCH_COMMITS=$COMMITS BENCH_GAP=$GAP python3 - "$here/RESULTS.md" <<'PY'
import glob, json, os, statistics, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
from results_section import machine, write_section

out = os.environ["BENCH_OUT"]

def load(way, clients):
    return [json.load(open(f)) for f in sorted(glob.glob(f"{out}/{way}-{clients}-*.json"))]

def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None

def stats(ds):
    return {
        "p50": med([d["all"]["p50_ms"] for d in ds]),
        "p99": med([d["all"]["p99_ms"] for d in ds]),
        "up": med([d["upstream_per_commit"] for d in ds]),
        "cpu": med([d["origin_cpu_ms_per_commit"] for d in ds]),
        "ngx": med([d["nginx_cpu_ms_per_commit"] for d in ds]),
        "samples": sum(d["all"]["samples"] or 0 for d in ds),
        "errors": {k: sum(d["errors"].get(k, 0) for d in ds) for k in ds[0]["errors"]} if ds else {},
    }

def fmt(v, digits=1):
    return "-" if v is None else f"{v:,.{digits}f}"

def ratio(a, b):
    return "-" if a is None or not b else f"{a / b:.2f}x"

rows, notes = [], []
for clients in [int(n) for n in os.environ["BENCH_CLIENTS"].split()]:
    d, n = stats(load("direct", clients)), stats(load("nginx", clients))
    rows.append(f"| {clients:,} | {fmt(d['up'])} | {fmt(n['up'])} | {fmt(d['cpu'])} | {fmt(n['cpu'])} | "
                f"**{ratio(n['cpu'], d['cpu'])}** | {fmt(n['ngx'])} | {fmt(d['p50'])} | {fmt(n['p50'])} | "
                f"{fmt(d['p99'])} | {fmt(n['p99'])} | {d['samples']:,} / {n['samples']:,} |")
    for way, s in (("direct", d), ("nginx", n)):
        bad = {k: v for k, v in s["errors"].items() if v}
        if bad:
            notes.append(f"{clients:,} clients, {way}: loadgen counted {bad}.")
lines = [
    "## Behind nginx",
    "",
    machine(os.environ["BENCH_PG"]),
    "",
    "`bash bench/proxy.sh`: raw long-poll clients of one shape held by `bench/loadgen.c`, straight to "
    "shape_sync and through nginx with `examples/nginx/shape_sync.conf` as documented (auth_request to "
    "the example's server, the secret added by nginx, `proxy_cache_lock`; a plain HTTP/1.1 listener "
    "beside TLS, since loadgen speaks no TLS). "
    f"{os.environ['BENCH_COMMITS']} one-row commits {os.environ['BENCH_GAP']} s apart per case, each "
    "row carrying its commit time; latency is commit to the end of the response at each client. "
    "Upstream requests are the shape requests shape_sync counted while the clients followed the "
    "commits; CPU is user and system time of shape_sync's worker (all its threads) and of nginx's "
    f"workers (one per CPU). Medians over {os.environ['BENCH_RUNS']} runs, the two ways alternating which goes "
    "first. Server, proxy, clients and writer share this machine.",
    "",
    "| clients | requests to shape_sync per commit, direct | through nginx | shape_sync CPU ms per commit, direct | through nginx | nginx / direct | nginx's own CPU ms per commit | median ms, direct | through nginx | p99 ms, direct | through nginx | samples |",
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    *rows,
    "",
    "Through nginx a change reaches most clients 0.3 to 0.5 s late: the requests waiting on the cache lock look for the answer every 500 ms (nginx's fixed interval). That is the price of the collapse: shape_sync answers a few requests per commit instead of one per client, and its CPU per commit stops growing with the clients; nginx's own CPU is about what shape_sync spent direct. A case can still count a few requests that nginx passed on for the previous case's clients after they left; the medians mostly leave those out.",
    "",
    *notes,
]
write_section(sys.argv[1], "proxy", [l for l in lines if l is not None])
PY
