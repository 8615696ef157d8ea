#!/usr/bin/env bash
#
# shape_sync.stalled_serve_timeout is reloadable (seed 000): a reload applies to
# serves that are stalled already, not only to writes started after it.
#
# 1. Lowering: three never-reading clients stall on a snapshot under a 30 s
#    timeout; the timeout is lowered to 1 s by ALTER SYSTEM + pg_reload_conf().
#    They must be reaped within the new timeout + slack of the reload (an
#    operator lowers it because stalled serves pile up now), and each WARNING
#    must report how long the write really made no progress (at least the time
#    it was stalled before the reload), not the new timeout.
# 2. Disabling: with 0 the deadline thread stops reaping, also for writes that
#    were armed before; set again, a write already past the new timeout is
#    reaped at once.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

SLACK_S=3
SHAPE_SYNC_EXTRA_CONF="shape_sync.stalled_serve_timeout = '30s'
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
		--rcvbuf 4096 --quiet 1 --max-seconds 90 --drain-seconds 1
	wait_event "$work/$1.out" stalled 60
}

handle=$(curl -s --max-time 60 -D - -o /dev/null "$SHAPE_SYNC_URL/v1/shape?table=big&offset=-1" | tr -d '\r' |
	sed -n 's/^electric-handle: //Ip')
check "the big shape exists" test -n "$handle"

# ------------------------------------------------------------ 1. lowering
check "three clients stall under a 30 s timeout" hold lower
t_first=$(j "$work/lower.out" receiving 'd["t"]')
sleep 2
expect_eq "none is reaped yet" 0 "$(reaped)"
check "the timeout is lowered to 1 s by a reload" set_timeout 1s
t_reload=$(now)
stalled_for=$(diff_s "$t_first" "$t_reload")
three() { (($(reaped) >= 3)); }
if wait_for 35 three; then
	took=$(diff_s "$t_reload" "$(now)")
	echo "# reaped ${took}s after the reload (they had been stalled ${stalled_for}s before it)"
	check "serves stalled before the reload are reaped within the new timeout + ${SLACK_S}s of it (took ${took}s)" \
		le "$took" $((1 + SLACK_S))
else
	fail "the three stalled serves were not reaped within 35 s of the reload"
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
done
stop_hold "$hold_pid" 50

# ------------------------------------------------------------ 2. disabling
check "the timeout is set to 4 s" set_timeout 4s
base=$(reaped)
check "three clients stall" hold disable
check "the check is disabled (0) before their deadline" set_timeout 0
sleep 6
expect_eq "with 0, no serve is reaped, also one armed before the reload" "$base" "$(reaped)"
check "the timeout is set to 1 s again" set_timeout 1s
t_on=$(now)
again() { (($(reaped) >= base + 3)); }
if wait_for 60 again; then
	took=$(diff_s "$t_on" "$(now)")
	check "writes already past the new timeout are reaped at once (took ${took}s)" le "$took" 2
else
	fail "the stalled serves were not reaped after the check was enabled again"
fi
stop_hold "$hold_pid" 50
finish
