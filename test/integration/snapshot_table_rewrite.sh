#!/usr/bin/env bash
#
# A snapshot taken while another transaction rewrites the table.  A rewrite (ALTER
# TABLE ... TYPE) writes every row again under its own transaction, and is not
# MVCC-safe: to a snapshot taken before it committed, the new table looks empty, and
# the replication stream carries no change for the rows it moved.  The snapshot
# worker took its snapshot first and locked the table after, so a shape made while
# a rewrite held the table was served empty, for good (seen in the integrity test at
# an "altertype" event: a shape's three clients held 12 of 147 rows).  Now the table
# is locked before the snapshot is taken: the rewrite is waited for and inside it.
#
# The window is made certain: with one snapshot worker, a first job waits for a
# partition that session Y holds, the shape (or subset) of t queues behind it, X
# starts the rewrite of t, Y lets go, and the snapshot of t then waits for X.  The
# same holds for a subset query, whose snapshot is taken the same way.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

SHAPE_SYNC_EXTRA_CONF="shape_sync.max_snapshot_workers = 1" start_cluster_retrying 4800
cluster_psql <<'SQL'
CREATE EXTENSION shape_sync;
CREATE TABLE t (id int PRIMARY KEY, n int, a text);
ALTER TABLE t REPLICA IDENTITY FULL;
INSERT INTO t SELECT g, g, 'row ' || g FROM generate_series(1, 100) g;
CREATE TABLE u (id int PRIMARY KEY, a text) PARTITION BY RANGE (id);
CREATE TABLE u_1 PARTITION OF u FOR VALUES FROM (0) TO (1000);
ALTER TABLE u REPLICA IDENTITY FULL;
ALTER TABLE u_1 REPLICA IDENTITY FULL;
INSERT INTO u VALUES (1, 'a');
CREATE TABLE m (id int PRIMARY KEY);
ALTER TABLE m REPLICA IDENTITY FULL;
SQL
want=$(cluster_psql -At -c "SELECT string_agg(id::text, ',' ORDER BY id) FROM t")

# sessions X and Y read what is written to file descriptors 6 and 7
mkfifo "$work/x" "$work/y"
cluster_psql <"$work/x" >"$work/x.out" 2>&1 &
helpers+=($!)
exec 6>"$work/x"
cluster_psql <"$work/y" >"$work/y.out" 2>&1 &
helpers+=($!)
exec 7>"$work/y"

# waiting_for RELATION [ACTIVITY]: the snapshot worker waits for a lock on RELATION (taking
# a snapshot of kind ACTIVITY: shape or subset)
waiting_for() {
	[[ $(cluster_psql -At -c "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
		WHERE a.backend_type = 'shape_sync snapshot' AND NOT l.granted AND l.relation = '$1'::regclass
		AND a.query LIKE 'taking a ${2:-}%'") == 1 ]]
}
# queued N: N shapes wait for their snapshot
queued() { [[ $(cluster_psql -At -c "SELECT count(*) FROM shape_sync.shapes WHERE state = 'snapshotting'") == "$1" ]]; }
# resolving: a request waits for the main thread
resolving() { [[ $(cluster_psql -At -c "SELECT count(*) FROM shape_sync.connections WHERE state = 'resolving'") == 1 ]]; }
# get NAME URL: GET URL into $work/NAME.{h,b}, again while it answers 503, in the background
get() {
	(
		for _ in $(seq 30); do
			code=$(curl -s -m 60 -D "$work/$1.h" -o "$work/$1.b" -w '%{http_code}' "$2") || true
			[[ $code == 503 ]] || break
			sleep 0.5
		done
		echo "$code" >"$work/$1.code"
	) &
	helpers+=($!)
}
# ids NAME: the ids of the rows in $work/NAME.b (a shape's or a subset's answer), sorted, comma separated
ids() {
	python3 -c 'import json, sys
body = json.load(open(sys.argv[1]))
messages = body["data"] if isinstance(body, dict) else body  # a subset: {metadata, data}
print(",".join(str(i) for i in sorted(int(m["value"]["id"]) for m in messages if "value" in m)))' \
		"$work/$1.b"
}

# rewrite_during NAME URL WHERE TYPE: block the snapshot worker on u_1 (a shape of u
# WHERE), GET URL, rewrite t's column n to TYPE while the request waits, let the worker
# go, commit the rewrite once the snapshot of t waits for it; then the answer is in
# $work/NAME.{h,b,code}
rewrite_during() {
	echo "BEGIN; LOCK TABLE u_1 IN ACCESS EXCLUSIVE MODE;" >&7
	get "u_$1" "$SHAPE_SYNC_URL/v1/shape?table=u&offset=-1&where=$(uri "$3")"
	check "$1: the snapshot worker waits for partition u_1" wait_for 60 waiting_for u_1
	local before
	before=$(cluster_psql -At -c "SELECT count(*) FROM shape_sync.shapes WHERE state = 'snapshotting'")
	get "$1" "$2"
	if [[ $1 == subset ]]; then
		# a subset job is in no view; but the main thread takes requests in the order they
		# came, so once a shape requested after it queues, the subset is resolved and queued
		check "subset: the subset request is being resolved" wait_for 60 resolving
		get marker "$SHAPE_SYNC_URL/v1/shape?table=m&offset=-1"
	fi
	check "$1: a shape queues behind the first job" wait_for 60 queued $((before + 1))
	echo "BEGIN; ALTER TABLE t ALTER n TYPE $4; SELECT 'rewriting $1';" >&6
	check "$1: X rewrites t" wait_for 60 grep -q "rewriting $1" "$work/x.out"
	echo "COMMIT;" >&7
	check "$1: the $1 snapshot of t waits for the rewrite" wait_for 60 waiting_for t "$1"
	echo "COMMIT; SELECT 'rewritten $1';" >&6
	check "$1: the rewrite commits" wait_for 60 grep -q "rewritten $1" "$work/x.out"
	check "$1: answered" wait_for 60 test -s "$work/$1.code"
}

# --- a shape's snapshot --------------------------------------------------------------
rewrite_during shape "$SHAPE_SYNC_URL/v1/shape?table=t&columns=id,a&offset=-1" "id > 0" bigint
expect_eq "the shape's snapshot answers 200" 200 "$(cat "$work/shape.code")"
expect_eq "it holds every row of t, not the empty table a snapshot before the rewrite sees" \
	"$want" "$(ids shape)"

# and the shape stays equal to t as t changes
handle=$(header electric-handle "$work/shape.h")
offset=$(header electric-offset "$work/shape.h")
cluster_psql -c "INSERT INTO t VALUES (101, 101, 'row 101')"
code=$(curl -s -m 60 -o "$work/live.b" -w '%{http_code}' \
	"$SHAPE_SYNC_URL/v1/shape?table=t&columns=id,a&handle=$handle&offset=$offset&live=true")
expect_eq "the live request after it answers 200" 200 "$code"
check "and carries the row inserted after the rewrite" grep -q '"id":"101"' "$work/live.b"

# --- a subset's snapshot --------------------------------------------------------------
want=$(cluster_psql -At -c "SELECT string_agg(id::text, ',' ORDER BY id) FROM t")
# the shape the subset is of exists first, so that what waits for the rewrite is the subset
expect_eq "the subset's shape answers 200" 200 \
	"$(http_status "$SHAPE_SYNC_URL/v1/shape?table=t&columns=id,a&offset=-1&log=changes_only")"
rewrite_during subset \
	"$SHAPE_SYNC_URL/v1/shape?table=t&columns=id,a&offset=-1&log=changes_only&subset__where=$(uri "id > 0")" \
	"id > 1" int
expect_eq "the subset answers 200" 200 "$(cat "$work/subset.code")"
expect_eq "it holds every row of t" "$want" "$(ids subset)"

finish
