#!/usr/bin/env bash
#
# bench/access.sh: what access control costs a request.
#   1. bench/access_bench.c: nanoseconds per access decision (loopback-only; a secret; a
#      secret and 16 allowed origins), with 1 and 2 threads deciding at once;
#   2. wrk against a throwaway cluster: catch-up requests per second for one small up-to-date
#      response, with the defaults (no secret: loopback checks of peer, Host and Origin) and
#      with a secret and 16 allowed origins (each request carries secret= and an Origin),
#      alternating, RUNS times each; the medians and their ratio.
# Writes the section "Cost of access control" of bench/RESULTS.md.
#
# Knobs: RUNS (5), SECONDS_PER_RUN (5), CONNECTIONS (32), DECISIONS (2000000).
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-5}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}
CONNECTIONS=${CONNECTIONS:-32}
DECISIONS=${DECISIONS:-2000000}
bench_need wrk
bench_init

bench_cc access_bench -I"$root/src/net" -I"$root/src/contract" "$here/access_bench.c" \
	"$root/src/net/access_policy.c" "$root/src/net/client_address.c"
for i in $(seq 1 "$RUNS"); do
	"$out/access_bench" "$DECISIONS" >"$out/micro$i.txt"
done

SHAPE_SYNC_MANAGE_REPLICA_IDENTITY=off bench_cluster_start
cluster_psql -c "CREATE TABLE bench_access (id int PRIMARY KEY, v text)" \
	-c "ALTER TABLE bench_access REPLICA IDENTITY FULL" \
	-c "INSERT INTO bench_access SELECT g, 'v' || g FROM generate_series(1, 10) g" >/dev/null
secret=0123456789abcdef0123456789abcdef
origins=$(for i in $(seq 0 14); do printf 'https://app%d.example.com, ' "$i"; done)https://app.example.com
base="$SHAPE_SYNC_URL/v1/shape?table=bench_access"
handle=$(curl -s -D - -o /dev/null "$base&offset=-1" | bench_header electric-handle)
plain_url="$base&offset=0_0&handle=$handle"
secret_url="$plain_url&secret=$secret"

set_access() {	# on|off
	if [[ $1 == on ]]; then
		cluster_psql -c "ALTER SYSTEM SET shape_sync.secret = '$secret'" \
			-c "ALTER SYSTEM SET shape_sync.cors_allowed_origins = '$origins'" >/dev/null
	else
		cluster_psql -c "ALTER SYSTEM RESET shape_sync.secret" \
			-c "ALTER SYSTEM RESET shape_sync.cors_allowed_origins" >/dev/null
	fi
	cluster_reload
	for _ in $(seq 1 50); do
		code=$(curl -s -o /dev/null -w '%{http_code}' "$plain_url")
		[[ ($1 == on && $code == 401) || ($1 == off && $code == 200) ]] && return 0
		sleep 0.1
	done
	echo "access settings did not apply" >&2
	exit 1
}

run_wrk() {	# name url [header]
	local args=(-t2 -c"$CONNECTIONS" -d"${SECONDS_PER_RUN}s" "$2")
	[[ -n ${3:-} ]] && args+=(-H "$3")
	wrk "${args[@]}" | awk -v n="$1" '/Requests\/sec/ { print n, $2 }'
}

for i in $(seq 1 "$RUNS"); do
	set_access off
	[[ $(curl -s -o /dev/null -w '%{http_code}' -H 'Origin: http://localhost:5173' "$plain_url") == 200 ]]
	run_wrk defaults "$plain_url" 'Origin: http://localhost:5173' >>"$out/wrk.txt"
	set_access on
	[[ $(curl -s -o /dev/null -w '%{http_code}' -H 'Origin: https://app.example.com' "$secret_url") == 200 ]]
	run_wrk secret_origins "$secret_url" 'Origin: https://app.example.com' >>"$out/wrk.txt"
done
cluster_stop

python3 - "$out" "$RUNS" "$here" "$CONNECTIONS" "$SECONDS_PER_RUN" "$pg_version" <<'PY'
import statistics, sys
out, runs, here, conns, secs, pg = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
sys.path.insert(0, here)
from results_section import machine, write_section
micro = {}
for i in range(1, runs + 1):
    for line in open(f"{out}/micro{i}.txt"):
        name, threads, ns = line.split()
        micro.setdefault((name, int(threads)), []).append(float(ns))
wrk = {}
for line in open(f"{out}/wrk.txt"):
    name, rps = line.split()
    wrk.setdefault(name, []).append(float(rps))
m = {k: statistics.median(v) for k, v in micro.items()}
w = {k: statistics.median(v) for k, v in wrk.items()}
per_request_us = 1e6 / w["defaults"]
names = [("loopback_only", "no secret: peer, Host and Origin loopback (the default)"),
         ("secret_any_origin", "a 32-byte secret, any origin"),
         ("secret_16_origins", "a 32-byte secret, an Origin matched against 16 allowed")]
lines = [
    "## Cost of access control",
    "",
    f"{machine(pg)} `bash bench/access.sh`: medians of {runs} runs.",
    "",
    "One access decision (`access_decide`, every shape request makes one), in nanoseconds per decision and thread:",
    "",
    "| rules | 1 thread | 2 threads at once |",
    "|---|---:|---:|",
]
for key, label in names:
    lines.append(f"| {label} | {m[(key, 1)]:.0f} ns | {m[(key, 2)]:.0f} ns |")
lines += [
    "",
    f"Catch-up requests per second (one small up-to-date response, `wrk -t2 -c{conns}`, {secs} s a run, "
    "the two settings alternating in one cluster):",
    "",
    "| settings | requests/s | ratio to the defaults |",
    "|---|---:|---:|",
    f"| defaults (no secret, loopback checks, a loopback Origin) | {w['defaults']:.0f} | 1.00x |",
    f"| a secret and 16 allowed origins (each request carries both) | {w['secret_origins']:.0f} | {w['secret_origins']/w['defaults']:.2f}x |",
    "",
    f"A request costs about {per_request_us:.0f} µs of this machine here, so the decision is "
    f"{100 * m[('secret_16_origins', 1)] / 1000 / per_request_us:.2f}% of it; the requests/s ratio is within the noise of the "
    "machine (wrk, the server and PostgreSQL share the cores). The rules are immutable and read through one "
    "atomic load, so threads that decide at once share no written cache line.",
]
write_section(f"{here}/RESULTS.md", "access", lines)
PY
