#!/usr/bin/env bash
#
# A decoding batch that brings more than shape_sync.log_memory must not rotate a shape whose
# log is on disk.  What a log gains went to its file, and left memory, only between decoding
# batches, and a transaction is published only at its commit: a batch of many small
# transactions, or one large transaction, filled the arena first, and the shape was rotated
# ("the shape log memory is full", 409), though its file could have taken it all.  Seen in
# the clean-clone CI in durable_compaction.sh.  Now a batch ends at a commit once memory runs
# short and logs on disk grew in it, and while a transaction is replayed and memory runs
# short, the logs it appends to are written to their files ahead of the commit and leave
# memory.  Made certain here: a stopped synchronous standby holds one commit (B),
# and with it the decoder, while another session (synchronous_commit = local) commits 8,000
# one-row transactions of 1 kB, twice the log memory, into one shape and then into eight;
# then the standby starts and the decoder reads them all at once.  Then one transaction of
# 8 MB, a restart, and the worker killed in the middle of the replay of one of 40 MB: what
# was written ahead of a commit is cut off at start, and nothing is lost or doubled.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work
shape_client_init

SHAPE_SYNC_EXTRA_CONF="shape_sync.log_memory = '4MB'
shape_sync.chunk_bytes_threshold = '128kB'
shape_sync.compaction_factor = 0" start_cluster_retrying 4810
cluster_psql <<'SQL'
CREATE EXTENSION shape_sync;
CREATE TABLE w (id int PRIMARY KEY, v text);
INSERT INTO w SELECT g, repeat('a', 1000) FROM generate_series(1, 300) g;
CREATE TABLE hold (id int);
SQL
q="table=w"
# converges WHAT MARKER: the early client follows the shape live to the change that sets v to
# MARKER, on its first handle, with no violation, and equals the table; a new client reads
# the shape from the start on the same handle and equals it too; no shape was rotated
converges() {
	local want
	sc sync "$work/early.json" --until "v=$2" --timeout 120 || true
	expect_eq "$1: the early client follows to the last change" found \
		"$(sc get "$work/early.json" 'd["last"]["status"]')"
	expect_eq "$1: with no 409, on the same handle" "$handle" \
		"$(sc get "$work/early.json" '",".join(d["last"]["handles"])')"
	expect_eq "$1: and no violation" 0 "$(sc get "$work/early.json" 'len(d["last"]["violations"])')"
	want=$(cluster_psql -At -c "SELECT id || '|' || v FROM w ORDER BY id")
	expect_eq "$1: the early client equals the table" "$want" "$(sc rows "$work/early.json" id v)"
	rm -f "$work/late.json"
	check "$1: a new client reads the shape from the start" \
		sc sync "$work/late.json" --url "$SHAPE_SYNC_URL" --query "$q"
	expect_eq "$1: on the same handle" "$handle" "$(sc get "$work/late.json" 'd["handle"]')"
	expect_eq "$1: and equals the table" "$want" "$(sc rows "$work/late.json" id v)"
	expect_eq "$1: no shape was rotated" 0 "$({ grep -c "will be rotated" "$SHAPE_SYNC_LOG" || true; })"
}
check "a client reads the shape to its end" sc sync "$work/early.json" --url "$SHAPE_SYNC_URL" --query "$q"
handle=$(sc get "$work/early.json" 'd["handle"]')

check "a synchronous standby made with pg_basebackup starts" cluster_sync_standby_create standby1
check "the standby stops" cluster_standby_stop
check "B's commit waits for the standby, and decoding waits at it" \
	commit_behind_standby "INSERT INTO hold VALUES (1)"
cluster_psql -q <<'SQL'
SET synchronous_commit = local;
DO $$
BEGIN
	FOR i IN 301..8300 LOOP
		INSERT INTO w VALUES (i, repeat(chr(98 + i % 20), 1000));
		COMMIT;
	END LOOP;
END
$$;
UPDATE w SET v = 'last' WHERE id = 1;
SQL
held=$(cluster_psql -At -c "SELECT pg_wal_lsn_diff(pg_current_wal_flush_lsn(), confirmed_flush_lsn) FROM pg_replication_slots WHERE slot_name LIKE 'shape_sync_%'")
check "the WAL held back is larger than the log memory ($held bytes)" test "$held" -gt $((4 << 20))
check "the standby starts again" cluster_standby_start
no_sync_waits() { sync_rep_waits 0; }
check "B commits" wait_for 60 no_sync_waits

converges "burst" last
disk=$(_cluster_as_pg sh -c "cat '$SHAPE_SYNC_PGDATA'/pg_shape_sync/*.log | wc -c")
check "the log is on disk, larger than the log memory ($disk bytes)" test "$disk" -gt $((4 << 20))

# --- a burst over eight shapes ----------------------------------------------------------------
# What a transaction appends is written ahead of its commit for the logs it touches only; the
# others' published bytes leave memory once the batch ends, which now happens at a commit when
# memory runs short.  8,000 one-row transactions, each into one of eight tables, decoded at once.
cluster_psql -q <<'SQL'
SELECT format('CREATE TABLE b%s (id int PRIMARY KEY, v text)', k) FROM generate_series(1, 8) k \gexec
SQL
for k in 1 2 3 4 5 6 7 8; do
	sc sync "$work/b$k.json" --url "$SHAPE_SYNC_URL" --query "table=b$k" >/dev/null
done
check "the standby stops" cluster_standby_stop
check "B's commit waits for the standby" commit_behind_standby "INSERT INTO hold VALUES (3)"
cluster_psql -q <<'SQL'
SET synchronous_commit = local;
DO $$
BEGIN
	FOR i IN 1..8000 LOOP
		EXECUTE format('INSERT INTO b%s VALUES (%s, %L)', 1 + i % 8, i, repeat(chr(98 + i % 20), 1000));
		COMMIT;
	END LOOP;
END
$$;
SELECT format('INSERT INTO b%s VALUES (0, %L)', k, 'done') FROM generate_series(1, 8) k \gexec
SQL
check "the standby starts again" cluster_standby_start
check "B commits" wait_for 60 no_sync_waits
all_equal=0
for k in 1 2 3 4 5 6 7 8; do
	before_handle=$(sc get "$work/b$k.json" 'd["handle"]')
	sc sync "$work/b$k.json" --until v=done --timeout 120 >/dev/null || true
	[[ $(sc get "$work/b$k.json" 'd["last"]["status"]') == found &&
		$(sc get "$work/b$k.json" '",".join(d["last"]["handles"])') == "$before_handle" &&
		$(sc rows "$work/b$k.json" id v) == $(cluster_psql -At -c "SELECT id || '|' || v FROM b$k ORDER BY id") ]] &&
		all_equal=$((all_equal + 1))
done
expect_eq "eight shapes: each client followed to its last change on its handle and equals its table" 8 "$all_equal"
expect_eq "eight shapes: no shape was rotated" 0 "$({ grep -c "will be rotated" "$SHAPE_SYNC_LOG" || true; })"

# --- one transaction larger than the log memory --------------------------------------------
# Replayed whole at its commit, it is published only then; so what it appended goes to the
# file, and leaves memory, ahead of the commit, once memory runs short.  A small transaction
# just before it, decoded in the same batch, is published but not yet in the file then.
check "the standby stops" cluster_standby_stop
check "B's commit waits for the standby" commit_behind_standby "INSERT INTO hold VALUES (2)"
cluster_psql -q -c "SET synchronous_commit = local" -c "UPDATE w SET v = 'small' WHERE id = 2" \
	-c "INSERT INTO w SELECT g, repeat(chr(98 + g % 20), 1000) FROM generate_series(10001, 18000) g" \
	-c "UPDATE w SET v = 'big' WHERE id = 1"
check "the standby starts again" cluster_standby_start
check "B commits" wait_for 60 no_sync_waits
converges "one transaction" big
want=$(cluster_psql -At -c "SELECT id || '|' || v FROM w ORDER BY id")

# --- and after a restart --------------------------------------------------------------------
cluster_psql -q -c "SELECT pg_sleep(1.5)" # a round (log_fsync = batch: about a second)
check "PostgreSQL restarts" cluster_restart
check "the early client resumes with no 409" sc sync "$work/early.json" --timeout 60
expect_eq "on the same handle" "$handle" "$(sc get "$work/early.json" '",".join(d["last"]["handles"])')"
expect_eq "and equals the table" "$want" "$(sc rows "$work/early.json" id v)"

# --- the worker killed while a transaction larger than memory is replayed -------------------
# What was written ahead of a commit is past the length the manifest lists: a start cuts it
# off, and decoding gives the transaction again.  A replay runs at some 200 MB/s, so the
# kill (SIGKILL to the worker: PostgreSQL restarts the instance) comes from a busy loop that
# reads the file's size (the test runs as root or as the cluster's owner) once it grew 4 MB.
cluster_psql -q -c "SELECT pg_sleep(1.5)" # a round: the file is listed whole
data=$(echo "$SHAPE_SYNC_PGDATA"/pg_shape_sync/"$handle".*.log)
before=$(stat -c %s "$data")
pid=$(worker_pid)
cluster_expect_crash "durable_burst.sh: SIGKILL to the shape_sync worker $pid during a replay"
cluster_psql -q -c "BEGIN" -c "INSERT INTO w SELECT g, repeat(chr(98 + g % 20), 1000) FROM generate_series(20001, 60000) g" \
	-c "UPDATE w SET v = 'huge' WHERE id = 1" -c "COMMIT" >/dev/null 2>&1 &
helpers+=($!)
for ((i = 0; i < 50000; i++)); do
	(($(stat -c %s "$data") > before + (4 << 20))) && break
done
kill -KILL "$pid"
stopped_at=$(stat -c %s "$data")
healthy() { [[ $(http_status "$SHAPE_SYNC_URL/v1/health") == 200 ]]; }
check "the server serves again" wait_for 60 healthy
converges "killed in a replay" huge
final=$(stat -c %s "$data")
# the whole transaction is about 44 MB of log: killed 4 MB or more short of it, it was being
# replayed (the file holds all of it once the commit is published)
check "the kill came in the middle of the replay ($((stopped_at - before)) of $((final - before)) bytes written)" \
	test "$stopped_at" -lt $((final - (4 << 20)))
finish
