#!/usr/bin/env bash
#
# What a shape keeps of the transactions decoded while its snapshot runs is
# bounded (a quarter of shape_sync.log_memory): a big transaction rotates the
# snapshotting shape with a clear log line, the worker goes on, and the
# client's retry gets every row.  Before, the kept changes grew without
# bound, until an allocation failed inside the commit callback and stopped
# the worker.
#
# A big transaction that committed before the shape was made is in its
# snapshot, even when decoding reaches it only while that snapshot runs:
# nothing of it is kept and the shape is not rotated.  Before, it was kept
# like the others, until the bound rotated the shape (a shape made right
# after a bulk load, while decoding was behind it).
#
# With durable logs, committed transactions past the bound go to a file
# (kept_file.c) instead, and the shape is not rotated: before, a snapshot
# that took long while its table took many changes was rotated, and its
# retry again, for as long as that stayed true.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work
shape_client_init

SHAPE_SYNC_EXTRA_CONF="shape_sync.log_memory = '8MB'
shape_sync.chunk_bytes_threshold = '512kB'
shape_sync.debug_snapshot_gate = 4242
shape_sync.max_snapshot_workers = 1
synchronous_standby_names = 'pending_gate'
synchronous_commit = local" start_cluster_retrying 4600
cluster_psql <<'SQL'
CREATE EXTENSION shape_sync;
CREATE TABLE gate (id int);
SQL
# partitioned NAME: table NAME (id, payload), partitions NAME1 (id under 1000000) and NAME2, all
# logging old rows in full
partitioned() {
	cluster_psql >/dev/null <<SQL
CREATE TABLE $1 (id int PRIMARY KEY, payload text) PARTITION BY RANGE (id);
CREATE TABLE ${1}1 PARTITION OF $1 FOR VALUES FROM (0) TO (1000000);
CREATE TABLE ${1}2 PARTITION OF $1 FOR VALUES FROM (1000000) TO (2000000);
ALTER TABLE $1 REPLICA IDENTITY FULL;
ALTER TABLE ${1}1 REPLICA IDENTITY FULL;
ALTER TABLE ${1}2 REPLICA IDENTITY FULL;
SQL
}
partitioned p
cluster_psql -c "INSERT INTO p VALUES (1, 'one')" >/dev/null
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
read -r _ _ inserts < <(follow p) || true
expect_eq "a new request gets every row" 10001 "$inserts"

# decoding waits behind a commit that waits for a standby that does not exist
PGOPTIONS='-c synchronous_commit=on' cluster_psql -c "INSERT INTO gate VALUES (1)" >"$work/gate.out" 2>&1 &
helpers+=($!)
gate=$!
check "decoding is held behind the gate's commit" wait_for 60 sync_rep_waits 1
rotations=$(grep -c 'changes kept while snapshots are taken exceed' "$SHAPE_SYNC_LOG")
# 4 MB of changes that commit before the shape is made, and that decoding has not reached
cluster_psql -c "INSERT INTO p SELECT g, repeat('y', 400) FROM generate_series(1010000, 1019999) g" >/dev/null
behind=$(cluster_psql -At -c "SELECT pg_current_wal_lsn()")
session_open locker2
echo "BEGIN; LOCK TABLE p1 IN ACCESS EXCLUSIVE MODE; SELECT 'locked';" >&5
wait_for 60 grep -q locked "$work/locker2.out"
where="p&where=$(uri 'id >= 1010000')"
curl -s -m 60 -o /dev/null "$SHAPE_SYNC_URL/v1/shape?table=$where&offset=-1" &
helpers+=($!)
check "the new shape's snapshot waits" wait_for 60 snapshotting
handle=$(cluster_psql -At -c "SELECT handle FROM shape_sync.shapes WHERE state = 'snapshotting'")
cluster_psql -At -c "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'" >/dev/null
decoded() { [[ $(cluster_psql -At -c "SELECT decoded_lsn >= '$behind' FROM shape_sync.decoder") == t ]]; }
check "decoding passes the big transaction while the snapshot waits" wait_for 60 decoded
expect_eq "the shape is still being snapshotted, with its handle" "$handle" \
	"$(cluster_psql -At -c "SELECT handle FROM shape_sync.shapes WHERE state = 'snapshotting'")"
expect_eq "it was not rotated" "$rotations" "$(grep -c 'changes kept while snapshots are taken exceed' "$SHAPE_SYNC_LOG")"
echo "COMMIT;" >&5
read -r got_handle _ inserts < <(follow "$where") || true
expect_eq "a client gets that shape" "$handle" "$got_handle"
expect_eq "with every row once" 10000 "$inserts"

# 3. many transactions that commit while a snapshot runs, more than the bound together and
# not in the snapshot: with durable logs they go to a file, the shape is not rotated, and its
# client gets the snapshot's rows and every one of those changes, once. The snapshot waits
# after its first chunk while this test holds the advisory lock of
# shape_sync.debug_snapshot_gate (a developer option).
partitioned q
cluster_psql -c "INSERT INTO q SELECT g, repeat('s', 400) FROM generate_series(1, 10000) g" >/dev/null
session_open gate_holder
echo "SELECT pg_advisory_lock(4242); SELECT 'held';" >&5
wait_for 60 grep -q held "$work/gate_holder.out"
curl -s -o /dev/null -m 300 "$SHAPE_SYNC_URL/v1/shape?table=q&offset=-1" &
helpers+=($!)
gated() { [[ $(cluster_psql -At -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND mode = 'ShareLock' AND NOT granted") == 1 ]]; }
check "the snapshot of q waits at the gate after its first chunk" wait_for 60 gated
expect_eq "and it is still under way" snapshotting \
	"$(cluster_psql -At -c "SELECT state FROM shape_sync.shapes WHERE relation = '\"public\".\"q\"'")"
q_handle=$(cluster_psql -At -c "SELECT handle FROM shape_sync.shapes WHERE relation = '\"public\".\"q\"'")
rotations=$(grep -c 'changes kept while snapshots are taken exceed' "$SHAPE_SYNC_LOG")
# 40 transactions of 100 kB each (4 MB, twice the bound), some updating or deleting rows of the ones before
for i in $(seq 0 39); do
	from=$((1000000 + i * 250))
	sql="INSERT INTO q SELECT g, repeat('c', 400) FROM generate_series($from, $((from + 249))) g"
	((i % 5 == 4)) && sql="$sql; UPDATE q SET payload = 'updated $i' WHERE id = $((from - 500)); DELETE FROM q WHERE id = $((from - 499))"
	cluster_psql -c "BEGIN" -c "$sql" -c "COMMIT" >/dev/null
done
behind=$(cluster_psql -At -c "SELECT pg_current_wal_lsn()")
check "decoding passes them while the snapshot waits" wait_for 60 decoded
expect_eq "the shape was not rotated" "$rotations" "$(grep -c 'changes kept while snapshots are taken exceed' "$SHAPE_SYNC_LOG")"
kept_on_disk() { _cluster_as_pg ls -l "/proc/$(worker_pid)/fd" 2>/dev/null | grep -q 'pg_shape_sync/kept\..*(deleted)'; }
check "the worker keeps them in an unlinked file of the store" kept_on_disk
echo "SELECT pg_advisory_unlock(4242);" >&5
out=$(sc sync "$work/q.json" --url "$SHAPE_SYNC_URL" --query "table=q" --timeout 300)
expect_eq "a client gets that shape, with no violation (no row twice, no change of a row it lacks)" \
	"up-to-date 200 $q_handle 0" "$out"
sc rows "$work/q.json" id payload >"$work/q.client"
cluster_psql -At -c "SELECT id, payload FROM q ORDER BY id" >"$work/q.table"
check "and exactly the table's rows ($(wc -l <"$work/q.table"))" cmp -s "$work/q.client" "$work/q.table"
no_kept_file() { ! kept_on_disk; }
check "the kept file is gone once the stream took the log over" wait_for 60 no_kept_file
expect_eq "the worker did not restart" "$pid" "$(worker_pid)"
check "no ERROR, FATAL or crash in the log" \
	bash -c '! grep -E "ERROR|FATAL|PANIC|terminated by signal" "$1"' _ "$SHAPE_SYNC_LOG"
finish
