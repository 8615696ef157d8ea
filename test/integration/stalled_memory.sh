#!/usr/bin/env bash
#
# What a stalled client pins (seed 000): a report with loose sanity bounds.
#
# 50 never-reading connections (tiny SO_RCVBUF) ask for a 10 MB snapshot chunk.
# Once they are stalled (before stalled_serve_timeout, 30 s), the script prints
# the worker's own memory before and after (VmRSS less RssShmem, and RssAnon, from
# /proc/<pid>/status: shared memory is the server's, fixed in size) and
# the kernel's socket memory of the HTTP port (ss -tmn: Send-Q and skmem), per
# connection; each must stay under 2 MB, and the kernel send queue under four
# times shape_sync.socket_send_buffer (autotuning would allow megabytes).  Then
# the timeout is lowered by a reload, the 50 are reaped, and two more rounds of
# 50 stalled connections are opened and reaped: RssAnon must not keep growing.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

N=50
SNDBUF_KB=64
SHAPE_SYNC_EXTRA_CONF="shape_sync.stalled_serve_timeout = '30s'
shape_sync.socket_send_buffer = '${SNDBUF_KB}kB'
shape_sync.write_piece_size = '256kB'" start_cluster_retrying 5160
cluster_psql -c 'CREATE EXTENSION shape_sync'
create_big_table 20000

# kb FIELD...: fields of the worker's /proc status, in kB, all from one read of the file (the
# arena's prefault makes RssShmem grow while the test runs: VmRSS and RssShmem read at two
# moments would count that growth as the worker's own)
kb() { awk -v want="$*" 'BEGIN { n = split(want, w, " "); for (i = 1; i <= n; i++) f[w[i] ":"] = i }
	$1 in f { v[f[$1]] = $2 } END { for (i = 1; i <= n; i++) printf "%s%s", v[i], (i < n ? " " : "\n") }' "/proc/$pid/status"; }
# sockets: the server side of the HTTP port, from ss -tmn: "COUNT SENDQ_TOTAL W_TOTAL STATES"
sockets() {
	ss -tmnH "( sport = :$SHAPE_SYNC_HTTP_PORT )" 2>/dev/null | python3 -c '
import re, sys
n = sendq = w = 0
states = {}
for line in sys.stdin:
    f = line.split()
    if f and not line[0].isspace() and not f[0].startswith("skmem"):
        n += 1
        sendq += int(f[2])
        states[f[0]] = states.get(f[0], 0) + 1
    m = re.search(r"skmem:\(([^)]*)\)", line)
    if m:
        w += int(re.search(r"(?:^|,)w(\d+)", m.group(1)).group(1))
print(n, sendq, w, ",".join("%s=%d" % kv for kv in sorted(states.items())) or "-")'
}
# hold NAME: N never-reading connections on the snapshot; waits until they are stalled
hold() {
	start_hold "$1" --path "/v1/shape?table=big&offset=-1" --count "$N" \
		--rcvbuf 4096 --quiet 1.5 --max-seconds 100 --drain-seconds 1
	wait_event "$work/$1.out" stalled 30
}

have_ss=true
command -v ss >/dev/null 2>&1 || have_ss=false

size=$(curl -s --max-time 60 -o /dev/null -w '%{size_download}' "$SHAPE_SYNC_URL/v1/shape?table=big&offset=-1")
echo "# the response is $size bytes"
check "the snapshot chunk is larger than 5 MB" test "$size" -gt 5000000
pid=$(worker_pid)
sleep 1
read -r rss0 anon0 shm0 < <(kb VmRSS RssAnon RssShmem)

check "$N never-reading connections get stalled (no byte moves for 1.5 s)" hold round1
t_stalled=$(now)
expect_eq "all $N hold an admission slot" "$N" "$(in_use existing)"
expect_eq "none is reaped yet (timeout 30 s)" 0 "$(reaped)"
read -r rss1 anon1 shm1 < <(kb VmRSS RssAnon RssShmem)
# the worker's own memory: shared memory (the log arena, which the worker makes resident in
# the background after a start: shape_sync.prefault_log_memory) is the server's, fixed
per_conn_rss=$((((rss1 - shm1) - (rss0 - shm0)) / N))
per_conn_anon=$(((anon1 - anon0) / N))
echo "# worker $pid before: VmRSS ${rss0} kB (RssAnon ${anon0} kB, RssShmem ${shm0} kB)"
echo "# worker with $N stalled: VmRSS ${rss1} kB (RssAnon ${anon1} kB, RssShmem ${shm1} kB)"
echo "# => per stalled connection: VmRSS less RssShmem +${per_conn_rss} kB, RssAnon +${per_conn_anon} kB (write_piece_size 256 kB)"
check "the worker pins less than 2 MB per stalled connection (${per_conn_rss} kB)" test "$per_conn_rss" -lt 2048
if $have_ss; then
	read -r socks sendq wq states < <(sockets)
	echo "# kernel, server side of port $SHAPE_SYNC_HTTP_PORT: $socks sockets ($states), Send-Q total $sendq bytes, skmem w total $wq bytes"
	echo "# => per stalled connection: Send-Q $((sendq / N)) bytes, skmem w (queued) $((wq / N)) bytes (socket_send_buffer ${SNDBUF_KB} kB)"
	expect_eq "ss sees the $N connections" "$N" "$socks"
	check "each kernel send queue is bounded by the socket_send_buffer setting ($((wq / N)) <= $((4 * SNDBUF_KB * 1024)) bytes)" \
		test $((wq / N)) -le $((4 * SNDBUF_KB * 1024))
	total_kb=$((per_conn_rss + wq / N / 1024))
	echo "# => total pinned per stalled connection (worker + kernel): about ${total_kb} kB"
	check "worker plus kernel stay under 2 MB per stalled connection (${total_kb} kB)" test "$total_kb" -lt 2048
else
	echo "# ss is not installed: no kernel socket numbers"
fi

# let them be reaped: lower the timeout by a reload
cluster_psql -c "ALTER SYSTEM SET shape_sync.stalled_serve_timeout = '1s'" -c "SELECT pg_reload_conf()" >/dev/null
t_reload=$(now)
all_reaped() { (($(reaped) >= N)); }
# (bounded generously: stalled_reload.sh checks that a lowered timeout applies at once)
check "the $N stalled serves are reaped" wait_for 40 all_reaped
t_reaped=$(now)
echo "# reaped $(diff_s "$t_reload" "$t_reaped")s after the reload, $(diff_s "$t_stalled" "$t_reaped")s after they were seen stalled"
check "their slots come back" wait_for 60 slots_free
sleep 1
read -r rss2 anon2 < <(kb VmRSS RssAnon)
echo "# worker after the reaps: VmRSS ${rss2} kB (RssAnon ${anon2} kB)"
if $have_ss; then
	read -r socks sendq wq states < <(sockets)
	echo "# kernel after the reaps (clients still connected, not reading): $socks sockets ($states), Send-Q $sendq bytes, skmem w $wq bytes"
fi
stop_hold "$hold_pid" 50

# two more rounds: memory is reused, not accumulated
for round in 2 3; do
	base=$(reaped)
	check "round $round: $N more stalled connections" hold "round$round"
	more_reaped() { (($(reaped) >= base + N)); }
	check "round $round: reaped (timeout now 1 s)" wait_for 60 more_reaped
	check "round $round: slots come back" wait_for 60 slots_free
	sleep 1
	anon_r=$(kb RssAnon)
	echo "# worker after round $round: VmRSS $(kb VmRSS) kB (RssAnon ${anon_r} kB)"
	stop_hold "$hold_pid" 50
done
growth=$((anon_r - anon2))
echo "# RssAnon growth from round 1 to round 3: ${growth} kB"
check "RssAnon does not keep growing over rounds (+${growth} kB, allowed 4096 kB)" test "$growth" -lt 4096
expect_eq "every reap was counted" $((3 * N)) "$(reaped)"
expect_eq "the worker did not restart" "$pid" "$(worker_pid)"
expect_eq "health answers" 200 "$(http_status "$SHAPE_SYNC_URL/v1/health")"
finish
