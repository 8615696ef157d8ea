#!/usr/bin/env bash
#
# Clients that stop reading are reaped (seed 000).
#
# 1. Three live long-poll clients on raw sockets that never read (tiny
#    SO_RCVBUF) are parked at the end of a shape's log, with one SSE stream
#    (live_sse=true) beside them.  A transaction of about 10 MB for that shape
#    wakes them with responses far larger than the socket buffers.  Every serve is closed (not
#    before stalled_serve_timeout, and within a slack of several times it, so that a busy
#    machine's late timer passes while a deadline that never fires fails), each reap logs a WARNING naming the shape and the
#    client, shape_sync.stalled_serves_reaped() counts them, the admission slots
#    come back, the clients got a truncated body, and new requests are served.
# 2. The same for a snapshot: three never-reading clients ask for offset=-1 on a
#    large table that has no shape yet.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

TIMEOUT_S=2
SLACK_S=$((TIMEOUT_S * 5 + 10))
ROWS=20000 # x 512 bytes of payload: about 10 MB of messages

SHAPE_SYNC_EXTRA_CONF="shape_sync.stalled_serve_timeout = '${TIMEOUT_S}s'
shape_sync.long_poll_timeout = '30s'
shape_sync.socket_send_buffer = '64kB'" start_cluster_retrying 5110
cluster_psql <<'SQL'
CREATE EXTENSION shape_sync;
CREATE TABLE items (id int PRIMARY KEY, payload text);
INSERT INTO items VALUES (0, 'seed');
SQL
create_big_table "$ROWS"

# check_reaped WHAT FILE HANDLE REAPED_BEFORE COUNT: the helper's COUNT
# connections were reaped in time, logged and counted
check_reaped() {
	local what=$1 out=$2 handle=$3 before=$4 count=$5 t_recv t_reaped=
	check "$what: every connection receives the start of its response" wait_event "$out" receiving 60
	t_recv=$(j "$out" receiving 'd["t"]')
	all_reaped() { (($(reaped) >= before + count)); }
	if wait_for $((TIMEOUT_S + SLACK_S + 10)) all_reaped; then
		t_reaped=$(now)
		local took
		took=$(diff_s "$t_recv" "$t_reaped")
		echo "# $what: reaped ${took}s after the response started (timeout ${TIMEOUT_S}s)"
		check "$what: all $count are reaped within timeout + ${SLACK_S}s (took ${took}s)" le "$took" $((TIMEOUT_S + SLACK_S))
		check "$what: none is reaped before the timeout (took ${took}s)" le "$(awk -v t=$TIMEOUT_S 'BEGIN { print t - 0.3 }')" "$took"
	else
		fail "$what: stalled_serves_reaped() reached $(reaped), expected $((before + count)) within $((TIMEOUT_S + SLACK_S + 10))s"
	fi
	expect_eq "$what: the clients received nothing more once stalled" "stalled" "$(j "$out" stalled 'd["event"]' 2>/dev/null || echo none)"

	local port ports logged=0
	ports=$(j "$out" connected '" ".join(map(str, d["ports"]))')
	check "$what: a WARNING names the shape and each client" wait_for 60 stall_warned "$handle" "$ports"
	for port in $ports; do
		local ms
		ms=$(stall_ms "$handle" "$port")
		if ((ms >= TIMEOUT_S * 1000 && ms <= (TIMEOUT_S + SLACK_S) * 1000)); then
			logged=$((logged + 1))
		else
			echo "# port $port: WARNING says ${ms:-no} ms"
		fi
	done
	expect_eq "$what: each WARNING reports a stall between the timeout and timeout + slack" "$count" "$logged"
	check "$what: the admission slots come back" wait_for 60 slots_free
}

pid_before=$(worker_pid)

# ---------------------------------------------------------------- 1. live long-polls
read -r handle offset _ < <(follow items) || true
check "the items shape is created" test -n "$handle"
live_path="/v1/shape?table=items&handle=$handle&offset=$offset&live=true"
start_hold live --path "$live_path" --path "$live_path" --path "$live_path" \
	--path "$live_path&live_sse=true" --count 4 --rcvbuf 4096 \
	--quiet 1 --max-seconds 60 --drain-seconds 3
parked() { [[ $(in_use existing) == 4 ]]; }
check "three long-polls and an SSE stream are parked (existing in_use = 4)" wait_for 60 parked
reaped_before=$(reaped)

cluster_psql -c "INSERT INTO items SELECT g, repeat(md5(g::text), 16) FROM generate_series(1, $ROWS) g"
check_reaped "live" "$work/live.out" "$handle" "$reaped_before" 4
expect_eq "stalled_serves_reaped() counts the four live reaps" $((reaped_before + 4)) "$(reaped)"

stop_hold "$hold_pid" 100
expect_eq "each live client got a 200 whose body was cut short" "[200, 200, 200, 200] [false, false, false, false]" \
	"$(j "$work/live.out" "done" '[c["status"] for c in d["conns"]]') $(j "$work/live.out" "done" '[c["complete"] for c in d["conns"]]')"

# new requests are served: the change, live and catch-up
b=$work/b
status=$(curl -s --max-time 30 -o "$b" -w '%{http_code}' "$SHAPE_SYNC_URL$live_path")
expect_eq "a new live request at the same offset gets the change at once" 200 "$status"
check "its body is complete JSON" python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$b"
read -r _ _ inserts < <(follow items) || inserts=0
expect_eq "a client reading the shape from scratch gets every row" $((ROWS + 1)) "$inserts"

# ---------------------------------------------------------------- 2. a snapshot
reaped_before=$(reaped)
start_hold snap --path "/v1/shape?table=big&offset=-1" --count 3 --rcvbuf 4096 \
	--quiet 1 --max-seconds 60 --drain-seconds 3
check "three never-reading clients ask for the big table's snapshot" wait_event "$work/snap.out" connected 60
big_handle=$(curl -s --max-time 30 -D - -o /dev/null "$SHAPE_SYNC_URL/v1/shape?table=big&offset=-1" | tr -d '\r' |
	sed -n 's/^electric-handle: //Ip')
check "the big shape exists" test -n "$big_handle"
check_reaped "snapshot" "$work/snap.out" "$big_handle" "$reaped_before" 3
expect_eq "stalled_serves_reaped() counts the three snapshot reaps" $((reaped_before + 3)) "$(reaped)"
stop_hold "$hold_pid" 100
expect_eq "each snapshot client got a 200 whose body was cut short" "[200, 200, 200] [false, false, false]" \
	"$(j "$work/snap.out" "done" '[c["status"] for c in d["conns"]]') $(j "$work/snap.out" "done" '[c["complete"] for c in d["conns"]]')"
read -r _ _ inserts < <(follow big) || inserts=0
expect_eq "a client reading the big shape gets every row" "$ROWS" "$inserts"

expect_eq "the worker did not restart" "$pid_before" "$(worker_pid)"
expect_eq "health still answers" 200 "$(http_status "$SHAPE_SYNC_URL/v1/health")"
expect_eq "no other serve was reaped" $((reaped_before + 3)) "$(reaped)"

# the reaps in GET /metrics and shape_sync.metrics, the same count as stalled_serves_reaped()
metric_text=$(curl -s --max-time 10 "$SHAPE_SYNC_URL/metrics")
expect_eq "GET /metrics counts every reap" "$(reaped)" \
	"$(sed -n 's/^shape_sync_reaped_connections_total{reason="stalled_write"} //p' <<<"$metric_text")"
expect_eq "shape_sync.metrics counts every reap" "$(reaped)" \
	"$(cluster_psql -At -c "SELECT value::bigint FROM shape_sync.metrics
		WHERE name = 'shape_sync_reaped_connections_total' AND labels = '{\"reason\": \"stalled_write\"}'")"
check "promtool accepts GET /metrics after the reaps" promtool check metrics <<<"$metric_text"
finish
