#!/usr/bin/env bash
#
# A slow client that keeps draining is never reaped (seed 000, the guard test).
#
# One response of about 16 MB (a single snapshot chunk: chunk_bytes_threshold is
# 32MB) is read at about 1 MB/s (64 KiB, then 60 ms of sleep) through a fixed
# 256 KiB SO_RCVBUF (no autotuning that would soak up the response), so it spans many
# stalled_serve_timeout windows of 2 s, and single writes to the socket take
# longer than a moment.  The serve must not be reaped: the client gets every byte
# (the chunked body ends properly and its JSON array holds every row), no
# WARNING is logged and stalled_serves_reaped() stays at 0.  A deadline that
# timed whole responses, or each write call regardless of progress, fails here.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

TIMEOUT_S=2
ROWS=25000 # x 512 bytes of payload: about 16 MB

SHAPE_SYNC_EXTRA_CONF="shape_sync.stalled_serve_timeout = '${TIMEOUT_S}s'
shape_sync.chunk_bytes_threshold = '32MB'
shape_sync.socket_send_buffer = '64kB'" start_cluster_retrying 5120
cluster_psql -c 'CREATE EXTENSION shape_sync'
create_big_table "$ROWS"

# the shape exists and its snapshot is done: the slow read is of one whole chunk
size=$(curl -s --max-time 60 -o /dev/null -w '%{size_download}' "$SHAPE_SYNC_URL/v1/shape?table=big&offset=-1")
echo "# the first chunk is $size bytes"
check "the first chunk is one response of more than 15 MB" test "$size" -gt 15000000

python3 "$stall_client" slow --url "$SHAPE_SYNC_URL" --path "/v1/shape?table=big&offset=-1" \
	--rcvbuf 262144 --read 65536 --sleep 0.06 --max-seconds 90 >"$work/slow.out"
echo "# slow reader: $(j "$work/slow.out" "" '{k: d[k] for k in ("body_bytes", "seconds", "rate_kb_s", "reads", "max_buffered_ahead")}')"
secs=$(j "$work/slow.out" "" 'int(d["seconds"])')
check "the read spans many timeout windows (${secs}s, at least 5 windows)" test "$secs" -ge $((5 * TIMEOUT_S))
expect_eq "the response is a 200" 200 "$(j "$work/slow.out" "" 'd["status"]')"
expect_eq "the chunked body is complete (not cut short)" true "$(j "$work/slow.out" "" 'd["complete"]')"
expect_eq "no transfer or parse error" null "$(j "$work/slow.out" "" 'd["error"]')"
expect_eq "every byte arrived" "$size" "$(j "$work/slow.out" "" 'd["body_bytes"]')"
expect_eq "the JSON array holds every row once" "$ROWS $ROWS 1 $ROWS" \
	"$(j "$work/slow.out" "" '"%s %s %s %s" % (d.get("inserts"), d.get("distinct_ids"), d.get("min_id"), d.get("max_id"))')"
expect_eq "and ends with snapshot-end" '["snapshot-end"]' "$(j "$work/slow.out" "" 'd.get("controls")')"
ahead=$(j "$work/slow.out" "" 'd["max_buffered_ahead"]')
check "the client's kernel buffer never held more than 1 MB unread (${ahead} bytes): the server waited on it" \
	test "$ahead" -lt 1048576
expect_eq "stalled_serves_reaped() stays at 0" 0 "$(reaped)"
check "no stalled-serve WARNING is logged" bash -c '! grep -q "closed a stalled serve" "$1"' _ "$SHAPE_SYNC_LOG"
finish
