#!/usr/bin/env bash
#
# A trickling client is reaped (seed 000): it reads a few bytes at a time, so
# data moves on its connection in every timeout window and an idle timeout (or a
# send timeout that only fires on a fully blocked write) would never catch it,
# but it is far below the contract (about one socket buffer plus one write piece
# per stalled_serve_timeout), so its serve must be closed: within a slack of several
# times the timeout (a busy machine's late timer passes, a trickle that evades the
# deadline for the client's 60 s fails).
#
# Two clients read a 10 MB snapshot chunk:
#   A reads 100 bytes per second (tiny SO_RCVBUF);
#   B reads 100 bytes every 100 ms through the smallest SO_RCVBUF, so the
#     kernel-level byte count of its connection (TCP_INFO bytes_received)
#     grows many times a second: the test checks that it grew in every
#     timeout window until the reap.
# Both must be reaped within timeout + slack, logged and counted, their slots
# released, and the server keeps serving.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

TIMEOUT_S=2
SLACK_S=$((TIMEOUT_S * 5 + 10))
ROWS=20000

SHAPE_SYNC_EXTRA_CONF="shape_sync.stalled_serve_timeout = '${TIMEOUT_S}s'
shape_sync.socket_send_buffer = '64kB'" start_cluster_retrying 5130
cluster_psql -c 'CREATE EXTENSION shape_sync'
create_big_table "$ROWS"

path="/v1/shape?table=big&offset=-1"
hdrs=$(curl -s --max-time 60 -D - -o "$work/full" "$SHAPE_SYNC_URL$path" | tr -d '\r')
handle=$(sed -n 's/^electric-handle: //Ip' <<<"$hdrs")
size=$(stat -c %s "$work/full")
echo "# the first chunk is $size bytes"
check "the snapshot is ready and its first chunk is large (> 5 MB)" test "$size" -gt 5000000
pid_before=$(worker_pid)

python3 "$stall_client" trickle --url "$SHAPE_SYNC_URL" --path "$path" --rcvbuf 4096 --read 100 --interval 1 \
	--stop-file "$work/stop" --max-seconds 60 >"$work/a.out" &
helpers+=($!)
python3 "$stall_client" trickle --url "$SHAPE_SYNC_URL" --path "$path" --rcvbuf 1 --read 100 --interval 0.1 \
	--stop-file "$work/stop" --max-seconds 60 >"$work/b.out" &
helpers+=($!)
connected() { [[ -n $(j "$work/a.out" connected 'd["t"]' 2>/dev/null) && -n $(j "$work/b.out" connected 'd["t"]' 2>/dev/null) ]]; }
check "both trickling clients are connected" wait_for 60 connected
t_start=$(j "$work/a.out" connected 'd["t"]')
t_b=$(j "$work/b.out" connected 'd["t"]')
le "$t_start" "$t_b" || t_start=$t_b

both_reaped() { (($(reaped) >= 2)); }
if wait_for $((TIMEOUT_S + SLACK_S + 10)) both_reaped; then
	t_reaped=$(now)
	took=$(diff_s "$t_start" "$t_reaped")
	echo "# both reaped ${took}s after the later one connected (timeout ${TIMEOUT_S}s)"
	check "both trickling serves are reaped within timeout + ${SLACK_S}s (took ${took}s)" le "$took" $((TIMEOUT_S + SLACK_S))
else
	t_reaped=$(now)
	fail "stalled_serves_reaped() is $(reaped) after $((TIMEOUT_S + SLACK_S + 10))s: a trickling client evades the deadline"
fi
touch "$work/stop"
done_both() { [[ -n $(j "$work/a.out" "done" 'd["t0"]' 2>/dev/null) && -n $(j "$work/b.out" "done" 'd["t0"]' 2>/dev/null) ]]; }
check "the clients stop" wait_for 60 done_both

# B's connection moved data at the TCP level in every timeout window up to the reap (B
# reads every 0.1 s: only a machine that stops it for the whole timeout leaves a longer gap)
gaps=$(python3 "$stall_client" json "$work/b.out" "done" "
(lambda t_reap: (lambda pts: '%d %.2f' % (len(pts), max(b[0] - a[0] for a, b in zip(pts, pts[1:])) if len(pts) > 1 else 99))(
  [s for i, s in enumerate(d['samples']) if s[0] <= t_reap and (i == 0 or s[2] > d['samples'][i - 1][2])]
))($t_reaped - d['t0'] - 0.5)")
read -r increases max_gap <<<"$gaps"
echo "# client B: TCP bytes_received grew $increases times before the reap; the longest gap was ${max_gap}s"
check "client B's connection made TCP-level progress in every timeout window before the reap (longest gap ${max_gap}s, timeout ${TIMEOUT_S}s)" \
	awk -v g="$max_gap" -v t="$TIMEOUT_S" 'BEGIN { exit !(g < t) }'
check "client B read something in every timeout window (${increases} increases)" test "$increases" -ge "$TIMEOUT_S"
echo "# client A read $(j "$work/a.out" "done" 'd["read"]') bytes, client B $(j "$work/b.out" "done" 'd["read"]') bytes"

ports=$(for f in a b; do j "$work/$f.out" connected 'd["port"]'; done)
check "a WARNING names the shape and each trickling client" wait_for 60 stall_warned "$handle" "$ports"
expect_eq "stalled_serves_reaped() counts exactly the two" 2 "$(reaped)"
check "the admission slots come back" wait_for 60 slots_free
status=$(curl -s --max-time 60 -o "$work/again" -w '%{http_code}' "$SHAPE_SYNC_URL$path")
expect_eq "a new request is served" 200 "$status"
check "with the same complete chunk" cmp -s "$work/full" "$work/again"
expect_eq "the worker did not restart" "$pid_before" "$(worker_pid)"
finish
