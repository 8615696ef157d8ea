#!/usr/bin/env bash
#
# shape_sync.stalled_serve_timeout is reloadable (seed 000): a reload applies to
# serves that are stalled already, not only to writes started after it.
#
# 1. Lowering: three never-reading clients stall on a snapshot under a 120 s
#    timeout; the timeout is lowered to 1 s by ALTER SYSTEM + pg_reload_conf().
#    They must be reaped within the new timeout + slack of the reload, far before
#    the old timeout (an operator lowers it because stalled serves pile up now),
#    and each WARNING must report how long the write really made no progress (at
#    least the time it was stalled before the reload, less than the old
#    timeout), not the new timeout.
# 2. Disabling: with 0 the deadline thread stops reaping, also for writes that
#    were armed before (under 10 s); set again to 15 s, a write already stalled
#    for longer (20 s) is reaped at once: before 15 s have passed, which a
#    deadline armed anew at the reload could not do.
# The slack is generous (the new timeout x 5 + 10 s): a busy machine's late timer
# passes, a reload that does not reach the stalled serves fails.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

OLD_S=120
SLACK_S=15
SHAPE_SYNC_EXTRA_CONF="shape_sync.stalled_serve_timeout = '${OLD_S}s'
shape_sync.socket_send_buffer = '64kB'" start_cluster_retrying 5170
cluster_psql -c 'CREATE EXTENSION shape_sync'
create_big_table 20000

want_timeout=
applied() { [[ $(cluster_psql -At -c "SHOW shape_sync.stalled_serve_timeout") == "$want_timeout" ]]; }
set_timeout() {
	want_timeout=$1
	cluster_psql -c "ALTER SYSTEM SET shape_sync.stalled_serve_timeout = '$1'" -c "SELECT pg_reload_conf()" >/dev/null
	wait_for 60 applied
}
# hold NAME: three never-reading connections on the snapshot; waits until they are stalled
hold() {
	start_hold "$1" --path "/v1/shape?table=big&offset=-1" --count 3 \
		--rcvbuf 4096 --quiet 1 --max-seconds 100 --drain-seconds 1
	wait_event "$work/$1.out" stalled 60
}

handle=$(curl -s --max-time 60 -D - -o /dev/null "$SHAPE_SYNC_URL/v1/shape?table=big&offset=-1" | tr -d '\r' |
	sed -n 's/^electric-handle: //Ip')
check "the big shape exists" test -n "$handle"

# ------------------------------------------------------------ 1. lowering
check "three clients stall under a ${OLD_S} s timeout" hold lower
t_first=$(j "$work/lower.out" receiving 'd["t"]')
sleep 2
expect_eq "none is reaped yet" 0 "$(reaped)"
check "the timeout is lowered to 1 s by a reload" set_timeout 1s
t_reload=$(now)
stalled_for=$(diff_s "$t_first" "$t_reload")
three() { (($(reaped) >= 3)); }
if wait_for 60 three; then
	took=$(diff_s "$t_reload" "$(now)")
	echo "# reaped ${took}s after the reload (they had been stalled ${stalled_for}s before it)"
	check "serves stalled before the reload are reaped within the new timeout + ${SLACK_S}s of it (took ${took}s)" \
		le "$took" $((1 + SLACK_S))
else
	fail "the three stalled serves were not reaped within 60 s of the reload"
fi
ports=$(j "$work/lower.out" connected '" ".join(map(str, d["ports"]))')
warned() {
	local p
	for p in $ports; do
		grep -Eq "closed a stalled serve of shape $handle to [^ ]*:$p: " "$SHAPE_SYNC_LOG" || return 1
	done
}
check "each reap is logged" wait_for 60 warned
# (the stalled piece was handed over a little after the first bytes arrived)
min_ms=$(awk -v s="$stalled_for" 'BEGIN { printf "%d", s * 1000 - 500 }')
for p in $ports; do
	ms=$(stall_ms "$handle" "$p")
	check "the WARNING for port $p reports the real stall (${ms} ms, at least ${min_ms} ms)" test "${ms:-0}" -ge "$min_ms"
	check "and was reaped under the new timeout, not the old one (${ms} ms < ${OLD_S} s)" test "${ms:-0}" -lt $((OLD_S * 1000))
done
stop_hold "$hold_pid" 50

# ------------------------------------------------------------ 2. disabling
check "the timeout is set to 10 s" set_timeout 10s
base=$(reaped)
check "three clients stall" hold disable
check "the check is disabled (0) before their deadline" set_timeout 0
sleep 20
expect_eq "with 0, no serve is reaped, also one armed before the reload" "$base" "$(reaped)"
t_on=$(now)
check "the timeout is set to 15 s (they have been stalled over 20 s)" set_timeout 15s
again() { (($(reaped) >= base + 3)); }
if wait_for 60 again; then
	took=$(diff_s "$t_on" "$(now)")
	# a deadline armed anew at the reload fires 15 s after it at the earliest
	check "writes already past the new timeout are reaped at once, not 15 s after the reload (took ${took}s)" \
		awk -v t="$took" 'BEGIN { exit !(t < 15) }'
else
	fail "the stalled serves were not reaped after the check was enabled again"
fi
stop_hold "$hold_pid" 50
finish
