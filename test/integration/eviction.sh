#!/usr/bin/env bash
#
# Shapes are given back: a loop of distinct where clauses cannot make the
# server refuse new shapes (one client creates few shapes a minute, and what
# it made is the least recently read, so it goes first), a shape with a
# parked live client outlives idle ones, evicted shapes answer 409
# must-refetch, idle shapes are dropped after shape_sync.shape_idle_timeout
# (their files too), and with shape_eviction = none a full server answers 503 with retry-after.
# Before: with max_shapes = 8, nine distinct shapes made every later new
# shape answer 503 for as long as the server ran.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

SHAPE_SYNC_EXTRA_CONF="shape_sync.max_shapes = 8
shape_sync.max_new_shapes_per_client = 6
shape_sync.long_poll_timeout = 60s" start_cluster_retrying 4540
cluster_psql <<'SQL'
CREATE EXTENSION shape_sync;
CREATE TABLE t (id int PRIMARY KEY, v text);
ALTER TABLE t REPLICA IDENTITY FULL;
INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 100) g;
SQL
base="http://127.0.0.1:${SHAPE_SYNC_URL##*:}/v1/shape?table=t"
# get FROM WHERE [QUERY]: status of a request (QUERY, or offset=-1) from address FROM;
# headers in $work/h, body in $work/b
get() {
	curl -s --interface "$1" -D "$work/h" -o "$work/b" -w '%{http_code}' \
		"$base&where=$(uri "$2")${3:-&offset=-1}"
}
shapes() { cluster_psql -At -c "SELECT count(*) FROM shape_sync.shapes"; }

# a legitimate client (127.0.0.2) with a live request parked on its shape
expect_eq "the legitimate client's shape is served" 200 "$(get 127.0.0.2 'id <= 10')"
legit=$(header electric-handle "$work/h")
legit_offset=$(header electric-offset "$work/h")
curl -s --interface 127.0.0.2 -o "$work/live.b" -w '%{http_code}' \
	"$base&where=$(uri 'id <= 10')&handle=$legit&offset=$legit_offset&live=true" \
	>"$work/live.code" &
helpers+=($!)
live_pid=$!
parked() { [[ $(cluster_psql -At -c "SELECT readers FROM shape_sync.shapes WHERE handle = '$legit'") != "" ]]; }
check "its live request is parked" wait_for 60 parked

# the loop: 20 distinct where clauses from 127.0.0.1
codes=()
for i in $(seq 1 20); do
	codes+=("$(get 127.0.0.1 "id = $i")")
	[[ $i == 1 ]] && { first=$(header electric-handle "$work/h"); first_offset=$(header electric-offset "$work/h"); }
	[[ ${codes[-1]} == 503 ]] && { retry=$(header retry-after "$work/h"); body=$(cat "$work/b"); }
done
expect_eq "the loop gets its first 6 shapes" "200 200 200 200 200 200" "${codes[*]:0:6}"
expect_eq "and 503 for the next 14" 14 "$(printf '%s\n' "${codes[@]:6}" | grep -c 503)"
check "with a retry-after of at most a minute" test "${retry:-0}" -ge 1 -a "${retry:-0}" -le 61
expect_match "naming the limit" 'max_new_shapes_per_client' "$body"

# other clients still get new shapes: the loop's shapes make room
for i in 1 2 3; do
	expect_eq "new shape $i of another client is served while the server is full" 200 \
		"$(get 127.0.0.3 "v = 'v$i$i'")"
done
expect_eq "the server holds at most max_shapes shapes" 8 "$(shapes)"
expect_eq "the live client's shape was kept" 200 \
	"$(curl -s --interface 127.0.0.2 -o /dev/null -w '%{http_code}' \
		"$base&where=$(uri 'id <= 10')&handle=$legit&offset=$legit_offset")"
expect_eq "the loop's oldest shape was evicted" 0 \
	"$(cluster_psql -At -c "SELECT count(*) FROM shape_sync.shapes WHERE handle = '$first'")"
expect_eq "its clients get 409 must-refetch" 409 \
	"$(get 127.0.0.5 'id = 1' "&handle=$first&offset=$first_offset")"
expect_match "with a must-refetch control message" 'must-refetch' "$(cat "$work/b")"
expect_match "a LOG line says shapes were evicted" 'evicted [0-9]+ least recently read shapes? to make room' \
	"$(cat "$SHAPE_SYNC_LOG")"

# last_read_at moves when a shape is read; it is kept to the second (shape_table_note_read
# writes it at most once a second), so the read comes more than a second after the last one
before=$(cluster_psql -At -c "SELECT last_read_at FROM shape_sync.shapes WHERE handle = '$legit'")
sleep 1.1
get 127.0.0.2 'id <= 10' "&handle=$legit&offset=$legit_offset" >/dev/null
after=$(cluster_psql -At -c "SELECT last_read_at FROM shape_sync.shapes WHERE handle = '$legit'")
check "shape_sync.shapes.last_read_at moves when the shape is read" \
	test "$(cluster_psql -At -c "SELECT '$after'::timestamptz > '$before'::timestamptz")" = t

# with eviction off, a full server refuses new shapes with 503 and retry-after
cluster_psql -c "ALTER SYSTEM SET shape_sync.shape_eviction = 'none'" >/dev/null
cluster_reload
sleep 1
expect_eq "shape_eviction = none: a new shape on a full server gets 503" 503 "$(get 127.0.0.4 "v = 'none'")"
check "with retry-after" test -n "$(header retry-after "$work/h")"
expect_match "naming max_shapes" 'max_shapes' "$(cat "$work/b")"

# idle shapes go after shape_idle_timeout; the one with a parked live request stays
# shape files are named by handle (<handle>.shape, <handle>.<n>.log): only the one left keeps any
others_files() { ls "$SHAPE_SYNC_PGDATA/pg_shape_sync" | grep -E '^[0-9]+-[0-9]+\.' | grep -v "^$legit\." || true; }
has_other_files() { [[ -n $(others_files) ]]; }
check "other shapes have files too" wait_for 60 has_other_files
cluster_psql -c "ALTER SYSTEM SET shape_sync.shape_idle_timeout = '2s'" >/dev/null
cluster_reload
only_live_left() { [[ $(shapes) == 1 ]]; }
check "idle shapes are dropped after shape_idle_timeout" wait_for 60 only_live_left
expect_eq "the one left is the shape with the parked live request" "$legit" \
	"$(cluster_psql -At -c "SELECT handle FROM shape_sync.shapes")"
no_other_files() { [[ -z $(others_files) ]]; }
check "the dropped shapes' files are removed" wait_for 60 no_other_files
check "the one left keeps its files" bash -c "ls '$SHAPE_SYNC_PGDATA/pg_shape_sync' | grep -q '^$legit\.'"
cluster_psql -c "INSERT INTO t VALUES (0, 'zero')" >/dev/null
wait "$live_pid" || true
expect_eq "its live request is answered with the change" 200 "$(cat "$work/live.code")"
expect_match "which it receives" '"id":"0"' "$(cat "$work/live.b")"
check "no WARNING, ERROR or crash in the log" \
	bash -c '! grep -E "WARNING|ERROR|FATAL|PANIC|terminated by signal" "$1"' _ "$SHAPE_SYNC_LOG"
finish
