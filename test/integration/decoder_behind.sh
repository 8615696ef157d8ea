#!/usr/bin/env bash
#
# A shape made while decoding is behind must not be rotated by what its own
# snapshot already has.  A stopped synchronous standby holds a commit (B),
# and with it the decoder, while other sessions (synchronous_commit = local)
# create a table and fill it, change another table's columns, and truncate a
# third.  Shapes on the three tables are made and read now, with all of that
# in their snapshots.  Then the standby starts and the decoder reads those
# events after the shapes exist.  Before the fix the TRUNCATE rotated its
# shape (409).  And a shape whose snapshot is still queued (the one snapshot
# worker waits for a table another session holds locked) while decoding
# passes its new table's creation must not be rotated because the table is
# not yet REPLICA IDENTITY FULL: its snapshot worker sets that.  Before the
# fix it was; under CI's load that race made a brand new shape answer 503
# "Failed to create shape".
#
# Decoding behind the catalog must read the catalog as it was, though the
# worker also reads it as it is now (to make shapes): a table's TOASTed update,
# then a rewrite of the table (ALTER COLUMN TYPE, a new TOAST table), then a
# new shape on it made while decoding has not reached either; a shape of the
# table's other columns must get the update, whole, and stay.  Before the fix
# the worker's relation cache kept the table as it is now, with its new TOAST
# table, and decoding the older update failed ("could not open toast relation")
# at every start of the worker, for good.
#
# Shapes are read as a role of their own (shape_sync.role), which is granted
# SELECT on a table only after the transaction that created and filled it: the
# privileges as of that transaction, which the shape's snapshot has, must not
# rotate the shape (the commit's privilege check did, before the fix).
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

# follow_shape NAME [TABLE [WHERE [COLUMNS]]]
follow_shape() {
	python3 "$here/shape_follow.py" --url "$SHAPE_SYNC_URL" --table "${2:-$1}" ${3:+--where "$3"} ${4:+--columns "$4"} \
		--until-id 100 --ready-file "$work/$1.ready" --timeout 60 >"$work/$1.json" &
	helpers+=($!)
	eval "follow_$1=$!"
}
snapshotting() {
	[[ $(cluster_psql -At -c "SELECT count(*) FROM shape_sync.shapes WHERE state = 'snapshotting'") == "$1" ]]
}

SHAPE_SYNC_EXTRA_CONF="shape_sync.max_snapshot_workers = 1" start_cluster_retrying 4490
cluster_psql <<'SQL'
CREATE EXTENSION shape_sync;
CREATE TABLE slow (id int PRIMARY KEY, v text) PARTITION BY RANGE (id);
CREATE TABLE slow_part PARTITION OF slow FOR VALUES FROM (MINVALUE) TO (MAXVALUE);
ALTER TABLE slow REPLICA IDENTITY FULL;
ALTER TABLE slow_part REPLICA IDENTITY FULL;
INSERT INTO slow VALUES (1, 'one');
CREATE ROLE behind_reader;
CREATE TABLE hold (id int PRIMARY KEY);
CREATE TABLE toasty (id int PRIMARY KEY, m int, v text);
ALTER TABLE toasty REPLICA IDENTITY FULL;
INSERT INTO toasty SELECT g, g, 'small' FROM generate_series(1, 3) g;
CREATE TABLE wide (id int PRIMARY KEY, v text);
ALTER TABLE wide REPLICA IDENTITY FULL;
INSERT INTO wide VALUES (1, 'one');
CREATE TABLE emptied (id int PRIMARY KEY, v text);
ALTER TABLE emptied REPLICA IDENTITY FULL;
INSERT INTO emptied VALUES (1, 'gone'), (2, 'gone');
GRANT SELECT ON ALL TABLES IN SCHEMA public TO behind_reader;
ALTER SYSTEM SET shape_sync.role = 'behind_reader';
SQL
cluster_reload

check "a synchronous standby made with pg_basebackup starts" cluster_sync_standby_create standby1
follow_shape toasty_before toasty "" id,v
check "a shape on toasty is read before decoding stops" wait_for 30 test -s "$work/toasty_before.ready"
check "the standby stops" cluster_standby_stop

# B: its commit waits for the standby, and decoding waits at it
check "B's commit waits for the standby" commit_behind_standby "INSERT INTO hold VALUES (1)"

# the events, committed locally behind B
PGOPTIONS='-c synchronous_commit=local' cluster_psql -v ON_ERROR_STOP=1 <<'SQL'
CREATE TABLE fresh (id int PRIMARY KEY, v text);
INSERT INTO fresh VALUES (1, 'one'), (2, 'two');
INSERT INTO wide VALUES (2, 'before the new column');
ALTER TABLE wide ADD COLUMN w int;
UPDATE wide SET w = id;
TRUNCATE emptied;
INSERT INTO emptied VALUES (3, 'after the truncate');
CREATE TABLE queued (id int PRIMARY KEY, v text);
INSERT INTO queued VALUES (1, 'one');
GRANT SELECT ON fresh, queued TO behind_reader;
BEGIN;
CREATE TABLE granted (id int PRIMARY KEY, v text);
ALTER TABLE granted REPLICA IDENTITY FULL;
INSERT INTO granted VALUES (1, 'one');
COMMIT;
GRANT SELECT ON granted TO behind_reader;
UPDATE toasty SET v = (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 300) g) WHERE id = 2;
ALTER TABLE toasty ALTER COLUMN m TYPE bigint;
SQL
worker_before=$(worker_pid)
check "B is still in progress" sync_rep_waits 1

# the shapes, made and read now
for t in fresh wide emptied granted; do follow_shape "$t"; done
follow_shape toasty_after toasty "id > 0"
for t in fresh wide emptied granted toasty_after; do
	check "the snapshot of $t is read" wait_for 30 test -s "$work/$t.ready"
done

# L holds slow's partition locked: making the shape on slow reads only its
# catalog, but its snapshot waits, and queued's behind it
session_open l
echo "BEGIN; LOCK TABLE slow_part IN ACCESS EXCLUSIVE MODE;" >&5
l_locks() {
	[[ $(cluster_psql -At -c "SELECT count(*) FROM pg_locks WHERE relation = 'slow_part'::regclass AND mode = 'AccessExclusiveLock' AND granted") == 1 ]]
}
check "L holds slow_part locked" wait_for 60 l_locks
follow_shape slow
check "slow's snapshot waits" wait_for 60 snapshotting 1
follow_shape queued
check "queued's snapshot waits behind it" wait_for 60 snapshotting 2

check "the standby starts again" cluster_standby_start
check "B's commit returns" wait_for 30 bash -c "! kill -0 $waiting_pid 2>/dev/null"
lsn=$(cluster_psql -At -c "SELECT pg_current_wal_insert_lsn()")
decoded() {
	[[ $(cluster_psql -At -c "SELECT bool_and(confirmed_flush_lsn >= '$lsn') FROM pg_replication_slots WHERE slot_name LIKE 'shape_sync%'") == t ]]
}
check "decoding passed queued's creation while its snapshot waits" wait_for 30 decoded
check "queued's snapshot still waits" snapshotting 2
echo "COMMIT;" >&5
for t in slow queued; do
	check "the snapshot of $t is read" wait_for 30 test -s "$work/$t.ready"
done

for t in fresh wide emptied slow queued toasty granted; do
	cluster_psql -c "INSERT INTO $t (id, v) VALUES (100, 'marker')"
done
wait "$follow_fresh" "$follow_wide" "$follow_emptied" "$follow_slow" "$follow_queued" "$follow_granted" \
	"$follow_toasty_before" "$follow_toasty_after" || true

field() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$work/$1.json" "$2"; }
for t in fresh wide emptied slow queued granted toasty_after; do
	expect_eq "$t: the shape was not rotated, and its client reached the marker" done "$(field $t 'd["status"]')"
	expect_eq "$t: the live changes are the marker alone" "[['insert', '100']]" "$(field $t 'd["operations"]')"
	expect_eq "$t: the client ends with the rows of the table" \
		"$(cluster_psql -At -c "SELECT string_agg(id::text, ' ' ORDER BY id) FROM ${t%_after}")" \
		"$(field $t '" ".join(sorted((r["id"] for r in d["rows"].values()), key=int))')"
done
expect_eq "toasty_before (id, v): the TOASTed update came, then the marker" \
	"done [['update', '2'], ['insert', '100']]" "$(field toasty_before 'd["status"] + " " + str(d["operations"])')"
expect_eq "toasty_before: with the whole new value" \
	"$(cluster_psql -At -c "SELECT md5(v) FROM toasty WHERE id = 2")" \
	"$(field toasty_before '__import__("hashlib").md5(d["rows"]["\"public\".\"toasty\"/\"2\""]["v"].encode()).hexdigest()')"
expect_eq "decoding never failed" 0 "$(grep -c 'ERROR' "$SHAPE_SYNC_LOG" || true)"
expect_eq "it is the same worker" "$worker_before" "$(worker_pid)"
expect_eq "no shape was rotated" 0 "$(grep -c 'will be rotated' "$SHAPE_SYNC_LOG" || true)"
finish
