#!/usr/bin/env bash
#
# The life of shapes with subqueries (docs/subqueries.md, "Lifecycle"):
#  - shapes of one inner select share one value set; the set goes with its last shape
#    (shape_sync_subquery_value_sets, shape_sync_subquery_values);
#  - a shape is rotated (409) when a table its subquery reads changes under it: a column it
#    reads dropped, a TRUNCATE, the role's SELECT revoked, the table dropped; plain shapes and
#    shapes on other sets go on;
#  - an update of an inner row that keeps its value moves nothing (no event, no 409);
#  - subquery shapes are kept on disk as plain shapes are, their value sets in the value sets
#    file, and after a restart both go on from their offsets (subquery_durable.sh follows
#    their moves across restarts);
#  - a nested shape has a set per select, and its middle select keeps the rows its inner
#    select decides (shape_sync_subquery_kept_rows); all go with the shape.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

start_cluster_retrying 4460
cluster_psql <<'SQL'
CREATE EXTENSION shape_sync;
CREATE ROLE reader NOLOGIN;
CREATE TABLE members (id int PRIMARY KEY, user_id int, project_id int, note text);
CREATE TABLE issues (id int PRIMARY KEY, project_id int, title text);
ALTER TABLE members REPLICA IDENTITY FULL;
ALTER TABLE issues REPLICA IDENTITY FULL;
INSERT INTO members VALUES (1, 1, 1, 'a'), (2, 1, 2, 'b'), (3, 2, 3, 'c'), (4, 3, 1, 'd');
INSERT INTO issues SELECT g, g % 4, 'i' || g FROM generate_series(1, 40) g;
GRANT SELECT ON members, issues TO reader;
ALTER SYSTEM SET shape_sync.role = 'reader';
ALTER SYSTEM SET shape_sync.allow_shape_deletion = on;
SQL
cluster_reload
metric() { curl -s "$SHAPE_SYNC_URL/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
where_of() { uri "project_id IN (SELECT project_id FROM members WHERE user_id = $1)"; }
base="$SHAPE_SYNC_URL/v1/shape?table=issues"

# new_shape WHERE: the shape's handle and offset after its snapshot, as "HANDLE OFFSET"
new_shape() {
	local url="$base&offset=-1${1:+&where=$1}"
	curl -s -D "$work/h" -o "$work/b" "$url"
	while [[ $(header electric-up-to-date "$work/h") == "" ]]; do
		curl -s -D "$work/h" -o "$work/b" \
			"$base&offset=$(header electric-offset "$work/h")&handle=$(header electric-handle "$work/h")${1:+&where=$1}"
	done
	echo "$(header electric-handle "$work/h") $(header electric-offset "$work/h")"
}
# status WHERE HANDLE OFFSET: the status of a catch-up request at that offset
status_at() { http_status "$base&offset=$3&handle=$2${1:+&where=$1}"; }

w1=$(where_of 1)
w2=$(where_of 2)
read -r h1 o1 < <(new_shape "$w1")
read -r h1b o1b < <(new_shape "$w1&columns=id,project_id")
read -r h2 o2 < <(new_shape "$w2")
read -r hp op < <(new_shape "")
expect_eq "two shapes of user 1's select and one of user 2's: two value sets" 2 "$(metric shape_sync_subquery_value_sets)"
expect_eq "holding user 1's two projects and user 2's one" 3 "$(metric shape_sync_subquery_values)"

# an inner update that keeps the value moves nothing
cluster_psql -c "UPDATE members SET note = 'changed' WHERE id = 1"
marker() { cluster_psql -c "UPDATE issues SET title = title || '.' WHERE id = 1"; }
marker
arrived() { curl -s "$base&offset=$o1&handle=$h1&where=$w1" | grep -q '"title":"i1\.'; }
check "a later change reaches the shape" wait_for 30 arrived
body=$(curl -s "$base&offset=$o1&handle=$h1&where=$w1")
check "an update of a member's note moved nothing" bash -c '! grep -q "\"event\"" <<<"$1"' _ "$body"
expect_eq "and rotated nothing" 0 "$(metric 'shape_sync_shape_rotations_total{cause="move_in"}')"

# DELETE /v1/shape of one of user 1's shapes: the set stays for the other
expect_eq "deleting one of user 1's shapes" 202 \
	"$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$base&handle=$h1b&where=$w1&columns=id,project_id")"
gone_one() { [[ $(metric shape_sync_subquery_value_sets) == 2 ]]; }
check "user 1's set stays with its other shape" wait_for 30 gone_one

# A column the subquery reads is dropped: the shapes on members rotate (their definition no
# longer validates: a request for them is a 400 now), the plain shape goes on.
table_changed() { metric 'shape_sync_shape_rotations_total{cause="table_changed"}'; }
before=$(table_changed)
cluster_psql -c "ALTER TABLE members DROP COLUMN user_id CASCADE"
rotated_n() { [[ $(table_changed) -ge $(($1 + $2)) ]]; }
check "dropping a column a subquery reads rotates both users' shapes" wait_for 60 rotated_n "$before" 2
expect_eq "which are refused now, their where clause naming a dropped column" 400 "$(status_at "$w1" "$h1" "$o1")"
expect_eq "the plain shape goes on" 200 "$(status_at "" "$hp" "$op")"
sets_gone() { [[ $(metric shape_sync_subquery_value_sets) == 0 && $(metric shape_sync_subquery_values) == 0 ]]; }
check "the sets go with their shapes" wait_for 60 sets_gone
rotated() { [[ $(status_at "$1" "$2" "$3") == 409 ]]; }

# TRUNCATE of the inner table
cluster_psql -c "ALTER TABLE members ADD COLUMN user_id int" -c "UPDATE members SET user_id = id % 3 + 1"
read -r h1 o1 < <(new_shape "$w1")
cluster_psql -c "TRUNCATE members"
check "a TRUNCATE of the inner table rotates the shape" wait_for 60 rotated "$w1" "$h1" "$o1"

# the role loses SELECT on the inner table
cluster_psql -c "INSERT INTO members (id, user_id, project_id, note) VALUES (1, 1, 1, 'a'), (2, 2, 2, 'b')"
read -r h1 o1 < <(new_shape "$w1")
before=$(table_changed)
cluster_psql -c "REVOKE SELECT ON members FROM reader"
check "a REVOKE on the inner table rotates the shape" wait_for 60 rotated_n "$before" 1
expect_eq "which is refused while the role may not read the inner table" 403 "$(status_at "$w1" "$h1" "$o1")"
cluster_psql -c "GRANT SELECT ON members TO reader"

# the inner table is dropped
read -r h1 o1 < <(new_shape "$w1")
before=$(table_changed)
cluster_psql -c "DROP TABLE members"
check "dropping the inner table rotates the shape" wait_for 60 rotated_n "$before" 1
expect_eq "which is refused now" 400 "$(status_at "$w1" "$h1" "$o1")"

# a restart: subquery shapes are kept on disk as plain shapes are, with their value sets
cluster_psql <<'SQL'
CREATE TABLE members (id int PRIMARY KEY, user_id int, project_id int, note text);
ALTER TABLE members REPLICA IDENTITY FULL;
GRANT SELECT ON members TO reader;
INSERT INTO members VALUES (1, 1, 1, 'a'), (2, 1, 2, 'b');
SQL
read -r h1 o1 < <(new_shape "$w1")
read -r hp op < <(new_shape "")
# the bytes of the shape's data file, or 0
data_bytes() { _cluster_as_pg stat -c %s "$SHAPE_SYNC_PGDATA/pg_shape_sync/$1.1.log" 2>/dev/null || echo 0; }
has_shape_file() { _cluster_as_pg test -f "$SHAPE_SYNC_PGDATA/pg_shape_sync/$1.shape"; }
has_sets_file() { _cluster_as_pg bash -c 'ls "$1"/sets.* >/dev/null 2>&1' _ "$SHAPE_SYNC_PGDATA/pg_shape_sync"; }
sq_bytes=$(data_bytes "$h1") plain_bytes=$(data_bytes "$hp")
cluster_psql -c "INSERT INTO issues SELECT 1000 + g, 1, 'r' || g FROM generate_series(1, 20) g" >/dev/null
# the files are written by the rounds that follow (one a second)
grew() { (($(data_bytes "$1") > $2)); }
check "the plain shape is kept on disk: its shape file" wait_for 30 has_shape_file "$hp"
check "and its data file took the changes" wait_for 30 grew "$hp" "$plain_bytes"
check "the subquery shape is too: its shape file" wait_for 30 has_shape_file "$h1"
check "and its data file took the changes" wait_for 30 grew "$h1" "$sq_bytes"
check "its value set is in the value sets file" wait_for 30 has_sets_file
cluster_restart
up() { [[ $(http_status "$SHAPE_SYNC_URL/v1/health") == 200 ]]; }
check "the server is back" wait_for 60 up
expect_eq "after a restart the plain shape goes on from its offset" 200 "$(status_at "" "$hp" "$op")"
expect_eq "and so does the subquery shape" 200 "$(status_at "$w1" "$h1" "$o1")"

# nested: a set for each level, and the rows the middle level keeps; all go with the shape
cluster_psql <<'SQL'
CREATE TABLE projects (id int PRIMARY KEY, team int);
ALTER TABLE projects REPLICA IDENTITY FULL;
INSERT INTO projects SELECT g, g % 3 FROM generate_series(1, 30) g;
GRANT SELECT ON projects TO reader;
SQL
sets_before=$(metric shape_sync_subquery_value_sets)
wn=$(uri "project_id IN (SELECT id FROM projects WHERE team IN (SELECT project_id FROM members WHERE user_id = 1))")
read -r hn on < <(new_shape "$wn")
expect_eq "a nested shape: a set for each of its two selects" $((sets_before + 2)) "$(metric shape_sync_subquery_value_sets)"
expect_eq "the middle select keeps the 30 projects its inner select decides" 30 "$(metric shape_sync_subquery_kept_rows)"
cluster_psql -c "DELETE FROM projects WHERE id > 20"
kept_20() { [[ $(metric shape_sync_subquery_kept_rows) == 20 ]]; }
check "deleted rows are no longer kept" wait_for 30 kept_20
expect_eq "deleting the nested shape" 202 "$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$base&handle=$hn&where=$wn")"
nested_gone() { [[ $(metric shape_sync_subquery_value_sets) == "$sets_before" && $(metric shape_sync_subquery_kept_rows) == 0 ]]; }
check "its sets and kept rows go with it" wait_for 30 nested_gone

finish
