#!/usr/bin/env bash
#
# DROP EXTENSION shape_sync, committed in the served database, lets go of every shape: their
# files leave pg_shape_sync, the manifest lists no shape, their clients get 409, the metric
# counts cause="extension_dropped", and the server goes on serving (a new shape is made, and
# survives a restart). A drop that is rolled back (whole, or to a savepoint), and one in
# another database, change nothing: both clients go on at their offsets.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work
shape_client_init

start_cluster_retrying 4750
cluster_psql >/dev/null <<'SQL'
CREATE EXTENSION shape_sync;
CREATE TABLE t (id int PRIMARY KEY, v text);
INSERT INTO t SELECT g, 'r' || g FROM generate_series(1, 1000) g;
CREATE DATABASE other;
SQL
cluster_psql -d other -c "CREATE EXTENSION shape_sync" >/dev/null

store() { _cluster_as_pg ls "$SHAPE_SYNC_PGDATA/pg_shape_sync"; }
manifest() { _cluster_as_pg cat "$SHAPE_SYNC_PGDATA/pg_shape_sync/manifest" 2>/dev/null | sc manifest - "$@"; }
metric() { curl -s "$SHAPE_SYNC_URL/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
serving() { [[ $(http_status "$SHAPE_SYNC_URL/v1/health") == 200 ]]; }
declare -A handle
for k in 0 1; do
	out=$(sc sync "$work/s$k.json" --url "$SHAPE_SYNC_URL" --query "table=t&where=$(uri "id % 2 = $k")")
	handle[$k]=$(cut -d' ' -f3 <<<"$out")
	expect_match "shape $k is read whole (${handle[$k]})" '^up-to-date 200 [0-9]+-[0-9]+ 0$' "$out"
done
both_listed() { [[ $(manifest 'len(m["shapes"])') == 2 ]]; }
check "both shapes are in the manifest" wait_for 30 both_listed
expect_eq "each has its files" "2 2" \
	"$(store | grep -c "^${handle[0]}\.") $(store | grep -c "^${handle[1]}\.")"

# write N: a change to each shape, so that a client that goes on has something to read
write() { cluster_psql -q -c "UPDATE t SET v = v || '$1' WHERE id IN (1, 2)"; }
goes_on() {
	local k
	for k in 0 1; do
		expect_eq "$1: shape $k goes on at its offset" "up-to-date 200 ${handle[$k]} 0" \
			"$(sc sync "$work/s$k.json")"
	done
}

cluster_psql -q <<'SQL'
BEGIN;
DROP EXTENSION shape_sync;
ROLLBACK;
SQL
write a
goes_on "a drop rolled back"
cluster_psql -q <<'SQL'
BEGIN;
SAVEPOINT s;
DROP EXTENSION shape_sync;
ROLLBACK TO SAVEPOINT s;
COMMIT;
SQL
write b
goes_on "a drop rolled back to a savepoint"
cluster_psql -d other -q -c "DROP EXTENSION shape_sync"
write c
goes_on "a drop in another database"
expect_eq "none of them counted" "0" "$(metric 'shape_sync_shape_rotations_total{cause="extension_dropped"}')"

# committed inside a subtransaction that is released: it counts
cluster_psql -q <<'SQL'
BEGIN;
SAVEPOINT s;
DROP EXTENSION shape_sync;
RELEASE SAVEPOINT s;
COMMIT;
SQL
rotated() { [[ $(metric 'shape_sync_shape_rotations_total{cause="extension_dropped"}') == 2 ]]; }
check "once committed, both shapes are rotated for it" wait_for 30 rotated
no_files() { ! store | grep -q -e "^${handle[0]}\." -e "^${handle[1]}\."; }
check "their files are removed" wait_for 30 no_files
none_listed() { [[ $(manifest 'len(m["shapes"])') == 0 ]]; }
check "the manifest lists no shape" wait_for 30 none_listed
for k in 0 1; do
	expect_eq "shape $k's client gets 409" "409" "$(sc sync "$work/s$k.json" | cut -d' ' -f1)"
done
check "the log says why, once" \
	bash -c '[[ $(grep -c "dropped every shape (2): extension \"shape_sync\" was dropped" "$1") == 1 ]]' _ "$SHAPE_SYNC_LOG"

out=$(sc sync "$work/new.json" --url "$SHAPE_SYNC_URL" --query "table=t&where=$(uri "id <= 10")")
new=$(cut -d' ' -f3 <<<"$out")
expect_match "the server goes on serving: a new shape ($new)" '^up-to-date 200 [0-9]+-[0-9]+ 0$' "$out"
new_listed() { [[ $(manifest '[s["handle"] for s in m["shapes"]].count(a[0])' "$new") == 1 ]]; }
check "and it is stored" wait_for 30 new_listed
cluster_restart
check "after a restart shape_sync serves again" wait_for 90 serving
write d
expect_eq "the new shape survives the restart" "up-to-date 200 $new 0" "$(sc sync "$work/new.json")"

check "no ERROR, PANIC or WARNING from shape_sync" \
	bash -c '! grep -E "PANIC|TRAP:|(ERROR|WARNING):.*shape" "$1"' _ "$SHAPE_SYNC_LOG"
out=$(cluster_crash_check "$SHAPE_SYNC_LOG") || true
expect_eq "no crash" "" "$out"
finish
