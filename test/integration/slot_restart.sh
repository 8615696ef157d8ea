#!/usr/bin/env bash
#
# The worker's replication slot across restarts: WAL written while the worker
# was away is skipped, not decoded for shapes that no longer exist (before, every
# transaction since the slot's position went through the reorder buffer and the
# plugin before live service resumed); a slot invalidated by
# max_slot_wal_keep_size is replaced, and the stored shape logs, which needed the
# WAL it lost, are discarded (their clients get 409); a slot an earlier
# shape_sync.database left behind is dropped.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

SHAPE_SYNC_EXTRA_CONF="max_slot_wal_keep_size = '64MB'" start_cluster_retrying 4580
cluster_psql <<'SQL'
CREATE EXTENSION shape_sync;
CREATE TABLE t (id int PRIMARY KEY, v text);
ALTER TABLE t REPLICA IDENTITY FULL;
INSERT INTO t VALUES (1, 'one');
SQL
url="$SHAPE_SYNC_URL/v1/shape?table=t"
slot=$(cluster_psql -At -c "SELECT slot_name FROM pg_replication_slots WHERE plugin = 'shape_sync'")
check "the worker has its slot" test -n "$slot"
serving() { [[ $(http_status "$SHAPE_SYNC_URL/v1/health") == 200 ]]; }

# 1. WAL written while the worker is away is skipped
cluster_psql -c "ALTER SYSTEM SET shared_preload_libraries = 'plpgsql'" >/dev/null
cluster_restart
for i in $(seq 1 40); do
	cluster_psql -c "INSERT INTO t SELECT g, 'x' FROM generate_series($((i * 1000)), $((i * 1000 + 49))) g" \
		-c "UPDATE t SET v = 'y' WHERE id = 1" >/dev/null
done
cluster_psql -c "SELECT pg_stat_reset_replication_slot('$slot')" >/dev/null
cluster_psql -c "ALTER SYSTEM RESET shared_preload_libraries" >/dev/null
cluster_restart
check "the worker serves again" wait_for 60 serving
expect_match "it says it skips the WAL written meanwhile" 'shape_sync skips the WAL from' "$(cat "$SHAPE_SYNC_LOG")"
skipped() { grep -q 'shape_sync skipped [0-9]* kB of WAL' "$SHAPE_SYNC_LOG"; }
check "and when it is done" wait_for 60 skipped
txns=$(cluster_psql -At -c "SELECT coalesce(total_txns, 0) FROM pg_stat_replication_slots WHERE slot_name = '$slot'")
check "none of the 80 transactions written meanwhile was decoded ($txns decoded)" test "$txns" -lt 10
body=$(curl -s "$url&offset=-1")
expect_eq "a new shape has every row" 2001 "$(grep -o '"operation":"insert"' <<<"$body" | wc -l)"
handle=$(curl -s -D - -o /dev/null "$url&offset=-1" | tr -d '\r' | sed -n 's/^electric-handle: //Ip')
offset=$(curl -s -D - -o /dev/null "$url&offset=-1&handle=$handle" | tr -d '\r' | sed -n 's/^electric-offset: //Ip')
curl -s -m 20 -o "$work/live.b" "$url&handle=$handle&offset=$offset&live=true" &
helpers+=($!)
live=$!
sleep 0.5
cluster_psql -c "UPDATE t SET v = 'after' WHERE id = 1" >/dev/null
wait "$live" || true
expect_match "a change made after the restart arrives live" '"v":"after"' "$(cat "$work/live.b")"

# 2. a slot invalidated by max_slot_wal_keep_size is replaced
cluster_psql -c "ALTER SYSTEM SET shared_preload_libraries = 'plpgsql'" >/dev/null
cluster_restart
for i in 1 2 3 4 5 6; do
	cluster_psql -c "INSERT INTO t VALUES (100000 + $i, 'w')" -c "SELECT pg_switch_wal()" >/dev/null
done
cluster_psql -c "CHECKPOINT" >/dev/null
expect_eq "the slot was invalidated while the worker was away" lost \
	"$(cluster_psql -At -c "SELECT wal_status FROM pg_replication_slots WHERE slot_name = '$slot'")"
cluster_psql -c "ALTER SYSTEM RESET shared_preload_libraries" >/dev/null
cluster_restart
check "the worker serves again" wait_for 60 serving
expect_match "it says it replaces the slot" "replaces its replication slot \"$slot\", which was invalidated" \
	"$(cat "$SHAPE_SYNC_LOG")"
expect_eq "the new slot is usable" reserved \
	"$(cluster_psql -At -c "SELECT wal_status FROM pg_replication_slots WHERE slot_name = '$slot'")"
# the stored logs need the WAL the old slot lost: they go, and their clients start over
expect_match "it discards the stored shape logs, and says why" \
	"shape_sync discards its stored shape logs: replication slot \"$slot\" was made again" "$(cat "$SHAPE_SYNC_LOG")"
expect_eq "a client of the shape made before gets 409" 409 "$(http_status "$url&handle=$handle&offset=$offset")"
files_gone() { ! ls "$SHAPE_SYNC_PGDATA/pg_shape_sync" | grep -q "^$handle"; }
check "that shape's files are removed" wait_for 60 files_gone
expect_eq "and shapes are served" 200 "$(http_status "$url&offset=-1")"

# 3. a slot an earlier shape_sync.database left is dropped
cluster_psql -c "CREATE DATABASE other" >/dev/null
cluster_psql -c "ALTER SYSTEM SET shape_sync.database = 'other'" >/dev/null
cluster_restart
check "the worker serves database other" wait_for 60 serving
gone() { [[ $(cluster_psql -At -c "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '$slot'") == 0 ]]; }
check "the slot of database postgres is dropped" wait_for 60 gone
expect_match "and that is logged" "dropped replication slot \"$slot\" of another database" "$(cat "$SHAPE_SYNC_LOG")"
expect_eq "the worker has its own slot for database other" 1 \
	"$(cluster_psql -At -c "SELECT count(*) FROM pg_replication_slots s JOIN pg_database d ON d.oid = s.datoid WHERE d.datname = 'other' AND s.plugin = 'shape_sync'")"
check "no ERROR, FATAL or crash from the worker" \
	bash -c '! grep -E "ERROR|FATAL.*shape_sync|PANIC|terminated by signal" "$1"' _ "$SHAPE_SYNC_LOG"
finish
