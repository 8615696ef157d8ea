#!/usr/bin/env bash
#
# What a shape keeps of the transactions decoded while its snapshot runs is
# bounded (a quarter of shape_sync.log_memory): a big transaction rotates the
# snapshotting shape with a clear log line, the worker goes on, and the
# client's retry gets every row.  Before, the kept changes grew without
# bound, until an allocation failed inside the commit callback and stopped
# the worker.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

SHAPE_SYNC_EXTRA_CONF="shape_sync.log_memory = '8MB'
shape_sync.max_snapshot_workers = 1" start_cluster_retrying 4600
cluster_psql <<'SQL'
CREATE EXTENSION shape_sync;
CREATE TABLE p (id int PRIMARY KEY, payload text) PARTITION BY RANGE (id);
CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (1000000);
CREATE TABLE p2 PARTITION OF p FOR VALUES FROM (1000000) TO (2000000);
ALTER TABLE p REPLICA IDENTITY FULL;
ALTER TABLE p1 REPLICA IDENTITY FULL;
ALTER TABLE p2 REPLICA IDENTITY FULL;
INSERT INTO p VALUES (1, 'one');
SQL
url="$SHAPE_SYNC_URL/v1/shape?table=p"
pid=$(worker_pid)

# the snapshot waits for a lock on the partition while a big transaction commits
session_open locker
echo "BEGIN; LOCK TABLE p1 IN ACCESS EXCLUSIVE MODE; SELECT 'locked';" >&5
wait_for 60 grep -q locked "$work/locker.out"
curl -s -m 60 -o "$work/first.b" -w '%{http_code}' "$url&offset=-1" >"$work/first.code" &
helpers+=($!)
first=$!
snapshotting() { [[ $(cluster_psql -At -c "SELECT count(*) FROM shape_sync.shapes WHERE state = 'snapshotting'") == 1 ]]; }
check "the shape's snapshot waits" wait_for 60 snapshotting
# a transaction of 4 MB of changes, into the other partition
cluster_psql -c "INSERT INTO p SELECT g, repeat('x', 400) FROM generate_series(1000000, 1009999) g" >/dev/null
rotated() { grep -q 'changes kept while snapshots are taken exceed 2 MB' "$SHAPE_SYNC_LOG"; }
check "the shape is rotated, and the log says why" wait_for 60 rotated
echo "COMMIT;" >&5
wait "$first" || true
expect_match "its waiting client is told to start over (409) or served" '^(409|200)$' "$(cat "$work/first.code")"
body=$(curl -s -m 30 "$url&offset=-1")
expect_eq "a new request gets every row" 10001 "$(grep -o '"operation":"insert"' <<<"$body" | wc -l)"
expect_eq "the worker did not restart" "$pid" "$(worker_pid)"
check "no ERROR, FATAL or crash in the log" \
	bash -c '! grep -E "ERROR|FATAL|PANIC|terminated by signal" "$1"' _ "$SHAPE_SYNC_LOG"
finish
