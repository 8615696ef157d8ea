#!/usr/bin/env bash
#
# Synchronous replication: a commit record is flushed, and could be decoded,
# before its transaction leaves the proc array; with synchronous_standby_names
# set, for as long as the standby takes to confirm it.  A real standby made
# with pg_basebackup is stopped, so that a commit (B) waits for it.  Meanwhile
# a transaction A that began before B commits locally, so that A is visible and
# B, with the newer xid, is not: B's commit record comes first in the WAL, and
# B's xid is at or past the snapshot's xmax.  A shape created now takes its
# snapshot with A and without B.  Then the standby starts, B finishes, and the
# client must get B's row exactly once (before the fix it never came: the
# stream had passed B's commit before the shape existed), and never A's row a
# second time (before the fix it came twice: stitching stopped checking
# visibility at B, the first transaction at or past xmax, though A's commit
# comes after it).
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

start_cluster_retrying 4460
cluster_psql <<'SQL'
CREATE TABLE t (id int PRIMARY KEY, v text);
ALTER TABLE t REPLICA IDENTITY FULL;
INSERT INTO t VALUES (1, 'one'), (2, 'two');
SQL

check "a synchronous standby made with pg_basebackup starts" cluster_sync_standby_create standby1
check "the standby stops" cluster_standby_stop

# A: a transaction with an xid, kept open
session_open a
echo "BEGIN; INSERT INTO t VALUES (200, 'A, committed locally before the shape');" >&5
a_open() {
	[[ $(cluster_psql -At -c "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction' AND backend_xid IS NOT NULL") == 1 ]]
}
check "A holds an xid" wait_for 60 a_open

# B: a newer xid; its commit waits for the standby
check "B's commit waits for the standby" commit_behind_standby "INSERT INTO t VALUES (100, 'B, waiting for the standby')"

echo "SET LOCAL synchronous_commit = local; COMMIT;" >&5
a_done() { [[ $(cluster_psql -At -c "SELECT count(*) FROM t WHERE id = 200") == 1 ]]; }
check "A committed (locally) after B's commit record" wait_for 60 a_done
check "B is still in progress" sync_rep_waits 1

# the shape, created now
python3 "$here/shape_follow.py" --url "$SHAPE_SYNC_URL" --table t --until-id 300 \
	--ready-file "$work/ready.json" --timeout 60 >"$work/follow.json" &
follower=$!
helpers+=($follower)
check "the shape's snapshot is read" wait_for 30 test -s "$work/ready.json"
expect_eq "the snapshot has A's row and not B's" '1 2 200' \
	"$(python3 -c 'import json,sys; print(" ".join(sorted((r["id"] for r in json.load(open(sys.argv[1]))["rows"].values()), key=int)))' "$work/ready.json")"

check "the standby starts again" cluster_standby_start
check "B's commit returns" wait_for 30 bash -c "! kill -0 $waiting_pid 2>/dev/null"
cluster_psql -c "INSERT INTO t VALUES (300, 'marker')"
wait "$follower" || true

result=$(cat "$work/follow.json")
field() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$work/follow.json" "$1"; }
expect_eq "the client followed the shape to the marker" done "$(field 'd["status"]')"
expect_eq "no strict-apply violation (an insert of A's row again would be one)" '[]' "$(field 'd["violations"]')"
expect_eq "the live changes are B's insert, once, then the marker" "[['insert', '100'], ['insert', '300']]" \
	"$(field 'd["operations"]')"
expect_eq "the client ends with the rows of the table" \
	"$(cluster_psql -At -c "SELECT string_agg(id::text, ' ' ORDER BY id) FROM t")" \
	"$(field '" ".join(sorted((r["id"] for r in d["rows"].values()), key=int))')"
[[ $_failures == 0 ]] || echo "# client: $result"
finish
