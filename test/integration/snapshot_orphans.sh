#!/usr/bin/env bash
#
# A snapshot whose shape is dropped while it runs is stopped, quietly, and
# cannot make the dropped shape ready again; its worker goes back to the pool
# and takes the next job; a new request for the same definition gets a new
# shape.  (Before: the worker stayed blocked on the table's lock for as long
# as the lock was held, holding its pin and its worker slot, and a late
# finish stored READY over the retired state.)
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

SHAPE_SYNC_EXTRA_CONF="shape_sync.allow_shape_deletion = on" start_cluster_retrying 4520
cluster_psql <<'SQL'
CREATE EXTENSION shape_sync;
CREATE TABLE t (id int PRIMARY KEY, v text) PARTITION BY RANGE (id);
CREATE TABLE t1 PARTITION OF t FOR VALUES FROM (0) TO (100);
ALTER TABLE t REPLICA IDENTITY FULL;
ALTER TABLE t1 REPLICA IDENTITY FULL;
INSERT INTO t VALUES (1, 'a');
SQL
url="$SHAPE_SYNC_URL/v1/shape?table=t"
snapshots_waiting() {	# snapshot workers waiting for a lock
	cluster_psql -At -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'shape_sync snapshot' AND wait_event_type = 'Lock'"
}
blocked_snapshot() { [[ $(snapshots_waiting) == 1 ]]; }
no_blocked_snapshot() { [[ $(snapshots_waiting) == 0 ]]; }

# a session holds the partition, so that the snapshot's scan waits for its lock (the
# request itself locks only the partitioned table)
session_open locker
echo "BEGIN; LOCK TABLE t1 IN ACCESS EXCLUSIVE MODE; SELECT 'locked';" >&5
wait_for 60 grep -q locked "$work/locker.out"
curl -s -m 30 -D "$work/first.h" -o "$work/first.json" "$url&offset=-1" &
first=$!
helpers+=($first)
check "the snapshot worker waits for the lock" wait_for 60 blocked_snapshot
# The client that asked leaves: a client still waiting when the shape goes would get a 409
# naming a new shape of the definition, made for it, whose snapshot waits for the lock too.
kill "$first" 2>/dev/null || true
wait "$first" 2>/dev/null || true
sleep 1
check "and keeps waiting when its client has left" blocked_snapshot
handle=$(cluster_psql -At -c "SELECT handle FROM shape_sync.shapes")
check "the shape is snapshotting" test -n "$handle"

expect_eq "DELETE drops the shape" 202 "$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$SHAPE_SYNC_URL/v1/shape?handle=$handle")"
check "its snapshot stops while the lock is still held" wait_for 60 no_blocked_snapshot
expect_eq "its worker stays, in the pool" 1 \
	"$(cluster_psql -At -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'shape_sync snapshot'")"
echo "COMMIT;" >&5

code=$(curl -s -o "$work/second.json" -D "$work/second.h" -w '%{http_code}' "$url&offset=-1")
expect_eq "a new request for the definition is served" 200 "$code"
new=$(header electric-handle "$work/second.h")
expect_eq "by the same worker: the pool did not grow" 1 \
	"$(cluster_psql -At -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'shape_sync snapshot'")"
check "by a new shape" test -n "$new" -a "$new" != "$handle"
expect_match "with the table's row" '"id":"1"' "$(cat "$work/second.json")"
expect_eq "the dropped shape is not held any more" 1 \
	"$(cluster_psql -At -c "SELECT count(*) FROM shape_sync.shapes")"
check "the stop is quiet: no ERROR or FATAL from the snapshot worker" \
	bash -c '! grep -E "ERROR|FATAL|WARNING" "$1"' _ "$SHAPE_SYNC_LOG"
finish
