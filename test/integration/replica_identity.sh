#!/usr/bin/env bash
#
# Clients never cause DDL.  With shape_sync.manage_replica_identity off (the
# default), a table without REPLICA IDENTITY FULL is refused with the exact
# ALTER TABLE to run, and the table is left as it was.  With it on, the worker
# sets it itself, as the table's owner, waiting at most a short lock_timeout:
# behind a long transaction on the table it gives up (503, retry) instead of
# queueing an ACCESS EXCLUSIVE lock that every other query would then wait
# behind; once the transaction ends, the next try succeeds.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

SHAPE_SYNC_MANAGE_REPLICA_IDENTITY=off start_cluster_retrying 4390
cluster_psql <<'SQL'
CREATE EXTENSION shape_sync;
CREATE ROLE app_owner NOLOGIN;
CREATE TABLE t (id int PRIMARY KEY, v text);
INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 100) g;
ALTER TABLE t OWNER TO app_owner;
SQL
url="$SHAPE_SYNC_URL/v1/shape?table=t&offset=-1"
ident() { cluster_psql -At -c "SELECT relreplident FROM pg_class WHERE oid = 't'::regclass"; }

code=$(curl -s -o "$work/body" -w '%{http_code}' "$url")
expect_eq "off: a table without REPLICA IDENTITY FULL is refused with 400" 400 "$code"
expect_match "the answer gives the command to run" \
	'ALTER TABLE [\]"public[\]"\.[\]"t[\]" REPLICA IDENTITY FULL' "$(cat "$work/body")"
expect_eq "the table was not altered" d "$(ident)"
check "no ALTER TABLE was logged" bash -c '! grep -q "set REPLICA IDENTITY FULL" "$1"' _ "$SHAPE_SYNC_LOG"
expect_eq "and no shape was created" 0 "$(cluster_psql -At -c "SELECT count(*) FROM shape_sync.shapes")"

cluster_psql -c "ALTER SYSTEM SET shape_sync.manage_replica_identity = on"
cluster_reload
sleep 1

# a long transaction holds a lock on the table
mkfifo "$work/hold"
(
	exec 3<"$work/hold"
	cluster_psql <<'SQL'
BEGIN;
SELECT count(*) FROM t;
\! cat <&3 >/dev/null
COMMIT;
SQL
) >/dev/null &
holder=$!
helpers+=($holder)
exec 4>"$work/hold"
locked() { [[ $(cluster_psql -At -c "SELECT count(*) FROM pg_locks WHERE relation = 't'::regclass AND mode = 'AccessShareLock' AND granted") -ge 1 ]]; }
check "a long transaction holds a lock on the table" wait_for 60 locked

t0=$(now)
code=$(curl -s -o "$work/body" -w '%{http_code}' -D "$work/headers" --max-time 30 "$url")
t1=$(now)
expect_eq "on, behind a long transaction: 503" 503 "$code"
expect_match "which says the table is in use" 'in use' "$(cat "$work/body")"
expect_match "with retry-after" '^[0-9]+$' "$(header retry-after "$work/headers")"
echo "# answered in $(diff_s "$t0" "$t1") s"
check "answered while the transaction still holds its lock, not after it" locked

# Other queries on the table are not held up meanwhile.  Each new definition
# (another where clause) makes the worker try its ALTER TABLE again; a query
# that comes while an attempt waits for its lock queues behind it, but only
# until the attempt gives up after 100 ms.  Without that timeout, the attempt
# would wait for the long transaction, and every query with it: the queries'
# statement_timeout (10 s, far above 100 ms, so that a busy machine does not reach
# it) would cancel them.
(
	for i in $(seq 1 15); do
		curl -s -o /dev/null --max-time 30 "$url&where=id%3E$i" &
		sleep 0.2
	done
	wait
) &
attempts=$!
helpers+=($attempts)
worst=0
failed=0
for i in $(seq 1 15); do
	q0=$(now)
	cluster_psql -At -c "SET statement_timeout = '10s'" -c "SELECT count(*) FROM t" >/dev/null 2>&1 ||
		failed=$((failed + 1))
	q1=$(now)
	d=$(diff_s "$q0" "$q1")
	if ! le "$d" "$worst"; then worst=$d; fi
	sleep 0.15
done
wait "$attempts" || true
tries=$(grep -c 'The table is in use: REPLICA IDENTITY FULL could not be set within 100 ms' "$SHAPE_SYNC_LOG" || true)
check "the worker tried its ALTER TABLE several times meanwhile ($tries)" test "$tries" -ge 3
expect_eq "no query on the table waited for the transaction (none reached its statement_timeout)" 0 "$failed"
echo "# the slowest query took ${worst} s"
expect_eq "the table is unchanged while the transaction runs" d "$(ident)"

exec 4>&-
wait "$holder" || true
done_holding() { [[ $(cluster_psql -At -c "SELECT count(*) FROM pg_locks WHERE relation = 't'::regclass AND granted AND pid <> pg_backend_pid()") == 0 ]]; }
check "the long transaction ended" wait_for 60 done_holding
served() { [[ $(http_status "$url") == 200 ]]; }
check "once it ended, the shape is served (after the failure is forgotten)" wait_for 30 served
expect_eq "and the table has REPLICA IDENTITY FULL" f "$(ident)"
expect_match "the ALTER TABLE is logged, naming the setting" \
	'shape_sync set REPLICA IDENTITY FULL on table public.t' "$(cat "$SHAPE_SYNC_LOG")"
finish
