#!/usr/bin/env bash
#
# When shape_sync.log_memory runs out, a new shape's snapshot waits while the
# least recently read shapes without live clients are evicted (409 for their
# clients), instead of failing with 503 while idle shapes hold the memory; a
# shape with a parked live request is passed over.  With durable logs off: with them, shapes
# give their logs back to their files before any is evicted (durable_big_shape.sh).
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

SHAPE_SYNC_EXTRA_CONF="shape_sync.log_memory = '4MB'
shape_sync.durable_logs = off
shape_sync.long_poll_timeout = 60s" start_cluster_retrying 4560
cluster_psql <<'SQL'
CREATE EXTENSION shape_sync;
CREATE TABLE big (id int PRIMARY KEY, payload text);
ALTER TABLE big REPLICA IDENTITY FULL;
INSERT INTO big SELECT g, repeat(md5(g::text), 32) FROM generate_series(1, 1000) g;
SQL
url="$SHAPE_SYNC_URL/v1/shape?table=big"
# make_shape NAME WHERE: requests a shape (where "id <> K" is about 1.1 MB of log); the status
# in $code, its handle and offset in $NAME_h and $NAME_o
make_shape() {
	local h=$work/$1.h
	code=$(curl -s -D "$h" -o "$work/$1.b" -w '%{http_code}' "$url&where=$(uri "$2")&offset=-1")
	printf -v "$1_h" '%s' "$(header electric-handle "$h")"
	printf -v "$1_o" '%s' "$(header electric-offset "$h")"
}
status_of() { curl -s -o /dev/null -w '%{http_code}' "$url&where=$(uri "$2")&handle=$3&offset=$4"; }
held() { cluster_psql -At -c "SELECT count(*) FROM shape_sync.shapes WHERE handle = '$1'"; }

make_shape a 'id <> 1'
expect_eq "shape a is made" 200 "$code"
make_shape b 'id <> 2'
expect_eq "shape b is made" 200 "$code"
make_shape c 'id <> 3'
expect_eq "shape c is made" 200 "$code"
free_mb=$(cluster_psql -At -c "SELECT free_bytes / 1048576 FROM shape_sync.log_memory_usage()")
check "they leave less log memory free than the next shape needs (${free_mb} MB)" test "$free_mb" -lt 1

# b gets a parked live request; then a is read, so that b is the least recently read
curl -s -o "$work/live.b" -w '%{http_code}' "$url&where=$(uri 'id <> 2')&handle=$b_h&offset=$b_o&live=true" \
	>"$work/live.code" &
helpers+=($!)
live_pid=$!
sleep 0.5
expect_eq "a is read again" 200 "$(status_of a 'id <> 1' "$a_h" "$a_o")"

make_shape d 'id <= 700'
expect_eq "a new shape d (0.8 MB) is served although the memory was full" 200 "$code"
expect_eq "b, with its parked live request, was kept" 1 "$(held "$b_h")"
expect_eq "c, the least recently read without live clients, was evicted" 0 "$(held "$c_h")"
expect_eq "a, read recently, was kept" 1 "$(held "$a_h")"
# (this makes c anew, which evicts a in turn)
expect_eq "c's clients get 409 must-refetch" 409 "$(status_of c 'id <> 3' "$c_h" "$c_o")"
cluster_psql -c "UPDATE big SET payload = 'changed' WHERE id = 7" >/dev/null
wait "$live_pid" || true
expect_eq "b's live request is answered" 200 "$(cat "$work/live.code")"
expect_match "with the change" '"payload":"changed"' "$(cat "$work/live.b")"
check "no WARNING, ERROR or crash in the log" \
	bash -c '! grep -E "WARNING|ERROR|FATAL|PANIC|terminated by signal" "$1"' _ "$SHAPE_SYNC_LOG"
finish
