#!/usr/bin/env bash
#
# A transaction of a million rows is replayed whole at its commit, for seconds. Meanwhile the
# worker serves new shapes (resolved under the replay's catalog, registry.c; before, they
# waited for the end of the replay), those shapes go on correctly after it (the replayed
# transaction is in their snapshot, not in their log), a request the replay cannot answer
# gets its answer after it; and the worker obeys SIGTERM in the middle of the replay
# (the replay hook of decoder.c), and once back it serves the table's shapes.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

start_cluster_retrying 4640
cluster_psql <<'SQL'
CREATE EXTENSION shape_sync;
CREATE TABLE big (id int PRIMARY KEY, payload text);
ALTER TABLE big REPLICA IDENTITY FULL;
INSERT INTO big VALUES (0, 'first');
CREATE TABLE other (id int PRIMARY KEY, v text);
ALTER TABLE other REPLICA IDENTITY FULL;
INSERT INTO other VALUES (1, 'a'), (2, 'b'), (3, 'c');
CREATE SCHEMA guarded;
CREATE TABLE guarded.t (id int PRIMARY KEY);
ALTER TABLE guarded.t REPLICA IDENTITY FULL;
INSERT INTO guarded.t VALUES (1), (2);
-- a role of its own, whose privileges the test takes away
CREATE ROLE reader NOLOGIN;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader;
GRANT USAGE ON SCHEMA guarded TO reader;
GRANT SELECT ON guarded.t TO reader;
ALTER SYSTEM SET shape_sync.role = 'reader';
-- the replay may take longer than the lag warning's 10 s on a busy machine; that warning is
-- decoder_lag.sh's business, and this test wants no other warning in the log
ALTER SYSTEM SET shape_sync.decoder_lag_warning = 0;
SELECT pg_reload_conf();
SQL
served_as_reader() { [[ $(http_status "$SHAPE_SYNC_URL/v1/shape?table=guarded.t&offset=-1&where=$(python3 -c 'import urllib.parse; print(urllib.parse.quote("id = 0"))')") == 200 ]]; }
check "shapes are read as the role" wait_for 60 served_as_reader
url="$SHAPE_SYNC_URL/v1/shape?table=big"
expect_eq "the table's shape is served" 200 "$(http_status "$url&offset=-1")"
pid=$(worker_pid)
q() { python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1]))' "$1"; }

# the worker replays a transaction read back from its spill files (logical_decoding_work_mem is
# 1MB here), waiting on ReorderBufferRead: wait for that, then run the SQL statements $1
wait_for_replay() {
	cluster_psql -At <<SQL
DO \$\$
BEGIN
	FOR i IN 1..4000 LOOP
		PERFORM pg_stat_clear_snapshot();
		IF EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $pid AND wait_event = 'ReorderBufferRead') THEN
			${1:-}
			RETURN;
		END IF;
		PERFORM pg_sleep(0.002);
	END LOOP;
	RAISE EXCEPTION 'the replay was never seen';
END
\$\$;
SQL
}

# --- new shapes during the replay
cluster_psql -c "INSERT INTO big SELECT g, md5(g::text) FROM generate_series(1, 1000000) g" >/dev/null
committed=$(cluster_psql -At -c "SELECT pg_current_wal_lsn()")
# after the big transaction, the role loses the schema; the catalog the replay reads is older
cluster_psql -c "REVOKE USAGE ON SCHEMA guarded FROM reader" >/dev/null
wait_for_replay
# 1 while the worker has not yet confirmed its slot past the big transaction's commit
replay_going_on() { cluster_psql -At -c "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'shape_sync_%' AND confirmed_flush_lsn < '$committed'"; }
# a where clause naming no column: validation fails, under the replay's catalog as under the
# current one; that answer waits for the current catalog
curl -s -m 60 -o "$work/bad.json" -w '%{http_code}' "$url&offset=-1&where=$(q 'nosuch = 1')" >"$work/bad.code" &
bad=$!
t0=$(now)
curl -s -m 60 -D "$work/other.h" -o "$work/other.json" "$SHAPE_SYNC_URL/v1/shape?table=other&offset=-1"
took_other=$(diff_s "$t0" "$(now)")
during_other=$(replay_going_on)
# another session locks that table until the replay is over: the check of the shape against the
# current catalog waits for the lock (before, the shape was rotated for it, and a shape's own
# snapshot worker setting REPLICA IDENTITY FULL did the same to fresh shapes in CI)
cluster_psql -At >"$work/lock.out" <<SQL &
BEGIN;
LOCK TABLE other IN ACCESS EXCLUSIVE MODE;
SELECT 'locked while replaying: ' || count(*) FROM pg_replication_slots
	WHERE slot_name LIKE 'shape_sync_%' AND confirmed_flush_lsn < '$committed';
DO \$\$
BEGIN
	FOR i IN 1..3000 LOOP
		PERFORM pg_stat_clear_snapshot();
		EXIT WHEN NOT EXISTS (SELECT 1 FROM pg_replication_slots
			WHERE slot_name LIKE 'shape_sync_%' AND confirmed_flush_lsn < '$committed');
		PERFORM pg_sleep(0.01);
	END LOOP;
	PERFORM pg_sleep(0.5);
END
\$\$;
COMMIT;
SQL
locker=$!
t0=$(now)
curl -s -m 60 -D "$work/small.h" -o "$work/small.json" "$url&offset=-1&where=$(q 'id <= 10')"
took_small=$(diff_s "$t0" "$(now)")
during_small=$(replay_going_on)
guarded=$(curl -s -m 60 -w ' %{http_code}' "$SHAPE_SYNC_URL/v1/shape?table=guarded.t&offset=-1")
# the worker confirms its slot's position after the batch that replays the transaction
replaying=$(replay_going_on)
# answered while the replay goes on, not behind it (curl waits 60 s at most; the times are for
# the reader: time targets are bench/big_transaction.sh's)
echo "# a new shape on another table took ${took_other} s, one on the replayed table ${took_small} s"
expect_eq "a new shape on another table is served while the replay goes on" 1 "$during_other"
expect_eq "with its rows" 3 "$(grep -o '"operation":"insert"' "$work/other.json" | wc -l)"
expect_eq "a new shape on the replayed table too" 1 "$during_small"
expect_eq "with the replayed transaction's rows" 11 "$(grep -o '"operation":"insert"' "$work/small.json" | wc -l)"
expect_eq "the replay was still going on (the slot is confirmed below its commit)" 1 "$replaying"
expect_match "a table the current catalog refuses to the role is refused by its snapshot, not served" \
	'cannot be served: Role .*reader.* has no USAGE privilege on the schema.* 403$' "$guarded"
wait "$bad"
wait "$locker"
expect_eq "the table was locked while the replay went on" "locked while replaying: 1" "$(grep locked "$work/lock.out")"
expect_eq "a request the replay's catalog could not answer is answered after it" 400 "$(cat "$work/bad.code")"
expect_match "with the validation error" 'nosuch' "$(cat "$work/bad.json")"

# after the replay, the shapes made during it go on from their snapshots: the replayed
# transaction is not in their logs again, later ones are
live_after() {	# url-of-shape headers-file -> the body of a live request from its end
	local handle offset
	handle=$(header electric-handle "$2")
	offset=$(header electric-offset "$2")
	curl -s -m 30 "$1&handle=$handle&offset=$offset&live=true"
}
cluster_psql -c "INSERT INTO other VALUES (4, 'd'); UPDATE big SET payload = 'changed' WHERE id = 5" >/dev/null
body=$(live_after "$SHAPE_SYNC_URL/v1/shape?table=other" "$work/other.h")
expect_match "the other table's shape gets a later insert" '"operation":"insert"' "$body"
expect_eq "and only it" 1 "$(grep -o '"operation":' <<<"$body" | wc -l)"
body=$(live_after "$url&where=$(q 'id <= 10')" "$work/small.h")
expect_match "the replayed table's shape gets a later update" '"operation":"update"' "$body"
expect_eq "and nothing of the replayed transaction" 0 "$(grep -o '"operation":"insert"' <<<"$body" | wc -l)"
check "no other warning in the log" bash -c '! grep -E "WARNING|ERROR" "$1" | grep -v -E "nosuch|guarded"' _ "$SHAPE_SYNC_LOG"

# --- a rotation in a replayed transaction: the 409s name the new shape
# Two live requests wait on a shape of table rot. One transaction truncates rot, then inserts a
# 200,000 rows: the shape is rotated when the replay reaches the TRUNCATE, its requests are
# woken once the replay is over (with the other shapes whose logs changed), and both get a 409
# that names the same new shape: the first makes it, the second finds it made.
cluster_psql >/dev/null <<'SQL'
CREATE TABLE rot (id int PRIMARY KEY, v text);
ALTER TABLE rot REPLICA IDENTITY FULL;
INSERT INTO rot VALUES (1, 'a');
GRANT SELECT ON rot TO reader;
SQL
rot_url="$SHAPE_SYNC_URL/v1/shape?table=rot"
curl -s -m 60 -D "$work/rot.h" -o /dev/null "$rot_url&offset=-1"
rot_handle=$(header electric-handle "$work/rot.h")
rot_pids=()
for n in 1 2; do
	curl -s -m 60 -D "$work/rot$n.h" -o "$work/rot$n.json" \
		"$rot_url&handle=$rot_handle&offset=$(header electric-offset "$work/rot.h")&live=true" &
	rot_pids+=($!)
	helpers+=($!)
done
rot_parked() { [[ $(cluster_psql -At -c "SELECT count(*) FROM shape_sync.connections WHERE handle = '$rot_handle' AND state = 'waiting'") == 2 ]]; }
check "two live requests wait on rot's shape" wait_for 30 rot_parked
cluster_psql -c "BEGIN; TRUNCATE rot; INSERT INTO big SELECT g, md5(g::text) FROM generate_series(3000001, 3200000) g; COMMIT" >/dev/null
rot_answered() { ! kill -0 "${rot_pids[0]}" 2>/dev/null && ! kill -0 "${rot_pids[1]}" 2>/dev/null; }
check "both are answered" wait_for 120 rot_answered
for n in 1 2; do
	expect_match "request $n: 409 must-refetch" '^HTTP/1.1 409' "$(head -n 1 "$work/rot$n.h")"
	new_rot=$(header electric-handle "$work/rot$n.h")
	check "request $n: the 409 names a new shape" test -n "$new_rot" -a "$new_rot" != "$rot_handle"
done
expect_eq "both name the same one" "$(header electric-handle "$work/rot1.h")" "$(header electric-handle "$work/rot2.h")"
code=$(curl -s -m 60 -D "$work/rot3.h" -o "$work/rot3.json" -w '%{http_code}' "$rot_url&offset=-1&handle=$(header electric-handle "$work/rot1.h")")
expect_eq "the shape named is served" "200 $(header electric-handle "$work/rot1.h")" "$code $(header electric-handle "$work/rot3.h")"
expect_eq "empty, as the table is" 0 "$(grep -o '"operation":"insert"' "$work/rot3.json" | wc -l)"

# --- SIGTERM during a replay

cluster_psql -c "INSERT INTO big SELECT g, md5(g::text) FROM generate_series(1000001, 2000000) g" >/dev/null
# once the replay is under way, a request for an existing shape (it waits for the end of the
# replay), then SIGTERM
wait_for_replay >/dev/null
curl -s -m 60 -o "$work/deferred.json" -w '%{http_code}' \
	"$SHAPE_SYNC_URL/v1/shape?table=other&handle=$(header electric-handle "$work/other.h")&offset=$(header electric-offset "$work/other.h")" \
	>"$work/deferred.code" &
deferred=$!
sleep 0.5	# for it to be queued behind the replay
cluster_psql -c "SELECT pg_terminate_backend($pid)" >"$work/term.out"
t0=$(now)
gone() { [[ $(cluster_psql -At -c "SELECT count(*) FROM pg_stat_activity WHERE pid = $pid") == 0 ]]; }
check "the worker exits" wait_for 30 gone
echo "# the worker exited $(diff_s "$t0" "$(now)") s after SIGTERM"
expect_match "it was stopped in the middle of the replay, not after it" 'shape_sync shutting down during the replay of a transaction' \
	"$(cat "$SHAPE_SYNC_LOG")"
back() { local p; p=$(worker_pid); [[ -n $p && $p != "$pid" ]] && [[ $(http_status "$SHAPE_SYNC_URL/v1/health") == 200 ]]; }
check "it comes back" wait_for 30 back
wait "$deferred" || true
expect_eq "the request that waited for the replay gets 503, not 409 (its shape is kept)" 503 \
	"$(cat "$work/deferred.code")"
# (while it skips the WAL written before it started it answers 503, retry-after 1)
rows_back() { [[ $(curl -s -m 60 "$url&offset=-1&where=$(q 'id <= 10')" | grep -o '"operation":"insert"' | wc -l) == 11 ]]; }
check "and serves the table's shapes with their rows" wait_for 30 rows_back
check "no crash in the log" bash -c '! grep -E "PANIC|terminated by signal|TRAP:" "$1"' _ "$SHAPE_SYNC_LOG"
finish
