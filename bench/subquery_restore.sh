#!/usr/bin/env bash
#
# bench/subquery_restore.sh: shapes with subqueries across restarts (docs/subqueries.md,
# "Across restarts"), against plain shapes in the same run:
#
# 1. Restore time. SHAPES equality shapes `project_id = k` on one table are made and listed
#    in the manifest; PostgreSQL is restarted (fast) RUNS times, and each start logs
#    `shape_sync restored N of N shapes from disk in T ms`. Then SHAPES per-user membership
#    shapes `project_id IN (SELECT project_id FROM bench_members WHERE user_id = $1)` (one
#    value each, so SHAPES value sets) are added on another table, and the restarts are
#    repeated: what the membership shapes add to the restore, per shape, against an equality
#    shape's share (their sets built from the value sets file, no query).
# 2. The value sets file: its size with the SHAPES one-value sets (bytes per set), and what it
#    grows by when one shape whose subquery selects VALUES values is listed (bytes per value),
#    against the values' bytes as text.
# 3. What a round appends for changed values: CHANGES memberships of that big set moved to
#    other projects in one transaction (each a value leaving and one entering), against the
#    bytes of the same values as text.
# Writes the section "Subqueries across restarts" of bench/RESULTS.md.
#
# Knobs: RUNS (5), SHAPES (10000), VALUES (100000), CHANGES (10000).
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-5}
SHAPES=${SHAPES:-10000}
VALUES=${VALUES:-100000}
CHANGES=${CHANGES:-10000}
bench_init

SHAPE_SYNC_MANAGE_REPLICA_IDENTITY=off SHAPE_SYNC_EXTRA_CONF="shape_sync.max_shapes = $((2 * SHAPES + 100))
shape_sync.log_memory = '2GB'
shape_sync.shape_eviction = none
shape_sync.shape_idle_timeout = 0
shape_sync.subquery_max_values = $((VALUES + 1))
shape_sync.max_concurrent_initial = 1000" bench_cluster_start
cluster_psql <<SQL >/dev/null
CREATE EXTENSION shape_sync;
CREATE TABLE bench_eq (id int PRIMARY KEY, project_id int, v text);
ALTER TABLE bench_eq REPLICA IDENTITY FULL;
CREATE TABLE bench_sub (id int PRIMARY KEY, project_id int, v text);
ALTER TABLE bench_sub REPLICA IDENTITY FULL;
CREATE TABLE bench_members (id serial PRIMARY KEY, user_id int, project_id int);
ALTER TABLE bench_members REPLICA IDENTITY FULL;
INSERT INTO bench_members (user_id, project_id) SELECT g, g FROM generate_series(0, $SHAPES - 1) g;
CREATE INDEX ON bench_members (user_id);
CREATE TABLE bench_big_members (id serial PRIMARY KEY, user_id int, project_id int);
ALTER TABLE bench_big_members REPLICA IDENTITY FULL;
INSERT INTO bench_big_members (user_id, project_id) SELECT 1, g FROM generate_series(1, $VALUES) g;
CREATE INDEX ON bench_big_members (user_id);
SQL

store="$SHAPE_SYNC_PGDATA/pg_shape_sync"
manifest() { _cluster_as_pg cat "$store/manifest" 2>/dev/null | python3 "$root/test/lib/shape_client.py" manifest - "$1" 2>/dev/null; }
listed() { manifest 'len(m["shapes"])' || echo 0; }
# the bytes of the value sets file that the manifest names
sets_bytes() { manifest 'm["header"]["sets_length"]'; }
wait_listed() {	# N
	for _ in $(seq 1 1200); do
		(($(listed) >= $1)) && return 0
		sleep 0.5
	done
	echo "the manifest lists $(listed) of $1 shapes" >&2
	exit 1
}
restore_ms() {	# N: one fast restart; prints the ms of the start's "restored N of N"
	local before
	before=$(grep -c "shape_sync restored" "$SHAPE_SYNC_LOG" || true)
	cluster_restart
	for _ in $(seq 1 600); do
		(($(grep -c "shape_sync restored" "$SHAPE_SYNC_LOG" || true) > before)) && break
		sleep 0.1
	done
	grep "shape_sync restored" "$SHAPE_SYNC_LOG" | tail -n 1 |
		sed -n "s/.*restored $1 of $1 shapes from disk in \([0-9]*\) ms.*/\1/p" | grep . ||
		{ grep "shape_sync restored\|is not restored" "$SHAPE_SYNC_LOG" | tail -n 3 >&2; exit 1; }
}

# ------------------------------------------------------------- 1. restore time
seq 0 $((SHAPES - 1)) | sed 's/^/project_id = /' | python3 "$here/make_shapes.py" "$SHAPE_SYNC_URL" bench_eq
wait_listed "$SHAPES"
for run in $(seq 1 "$RUNS"); do
	echo "eq|$run|$(restore_ms "$SHAPES")" | tee -a "$out/restore.txt" >&2
done
seq 0 $((SHAPES - 1)) | sed 's/^/project_id IN (SELECT project_id FROM bench_members WHERE user_id = $1)\t/' |
	python3 "$here/make_shapes.py" "$SHAPE_SYNC_URL" bench_sub
wait_listed $((2 * SHAPES))
for run in $(seq 1 "$RUNS"); do
	echo "both|$run|$(restore_ms $((2 * SHAPES)))" | tee -a "$out/restore.txt" >&2
done

# ------------------------------------------------------------- 2. the file
wait_listed $((2 * SHAPES))
sleep 3	# the first round after the start wrote the file whole
small=$(sets_bytes)
printf '%s\t1\n' 'project_id IN (SELECT project_id FROM bench_big_members WHERE user_id = $1)' |
	python3 "$here/make_shapes.py" "$SHAPE_SYNC_URL" bench_sub
wait_listed $((2 * SHAPES + 1))
sleep 2
big=$(sets_bytes)
text_bytes=$(cluster_psql -At -c "SELECT sum(length(project_id::text)) FROM bench_big_members")

# ------------------------------------------------------------- 3. a round's appends
cluster_psql -c "UPDATE bench_big_members SET project_id = project_id + $VALUES WHERE id <= $CHANGES" >/dev/null
sleep 3
moved=$(sets_bytes)
moved_text=$(cluster_psql -At -c "SELECT sum(length(project_id::text)) + sum(length((project_id - $VALUES)::text)) FROM bench_big_members WHERE id <= $CHANGES")
rotations=$(curl -s "$SHAPE_SYNC_URL/metrics" | awk '$1 ~ /^shape_sync_shape_rotations_total/ { s += $2 } END { print s + 0 }')
cluster_stop

python3 - "$out" "$RUNS" "$SHAPES" "$VALUES" "$CHANGES" "$here" "$pg_version" \
	"$small $big $text_bytes $moved $moved_text $rotations" <<'PY'
import statistics, sys
out, runs, shapes, values, changes, here, pg, nums = sys.argv[1:9]
runs, shapes, values, changes = int(runs), int(shapes), int(values), int(changes)
small, big, text_bytes, moved, moved_text, rotations = (int(x) for x in nums.split())
sys.path.insert(0, here)
from results_section import machine, write_section
t = {}
for line in open(f"{out}/restore.txt"):
    name, run, ms = line.strip().split("|")
    t.setdefault(name, []).append(int(ms))
med = statistics.median
eq, both = med(t["eq"]), med(t["both"])
sub = both - eq
lines = [
    "## Subqueries across restarts",
    "",
    f"{machine(pg)} `bash bench/subquery_restore.sh`: medians of {runs} fast restarts each.",
    "",
    f"**Restore.** {shapes:,} equality shapes `project_id = k`, then the same with {shapes:,} per-user membership "
    "shapes `project_id IN (SELECT project_id FROM members WHERE user_id = $1)` beside them (one value each: "
    f"{shapes:,} value sets, built from the value sets file at start, no query), as the start's "
    "`shape_sync restored N of N shapes from disk in T ms` says.",
    "",
    "| shapes listed | restore ms | per shape |",
    "|---|---:|---:|",
    f"| {shapes:,} equality | {eq:.0f} | {eq * 1000 / shapes:.0f} µs |",
    f"| {shapes:,} equality + {shapes:,} membership | {both:.0f} | |",
    f"| what the membership shapes add | {sub:.0f} | {sub * 1000 / shapes:.0f} µs ({sub / eq:.2f}x an equality shape) |",
    "",
    "Runs (ms): equality " + ", ".join(str(x) for x in t["eq"]) + "; both " + ", ".join(str(x) for x in t["both"]) + ".",
    "",
    f"**The value sets file.** With the {shapes:,} one-value sets: {small / 2**20:.2f} MB, {small / shapes:.0f} bytes per set "
    f"(its select's text, columns and one value). One shape whose subquery selects {values:,} values added "
    f"{(big - small) / 2**20:.2f} MB, {(big - small) / values:.1f} bytes per value, against {text_bytes / values:.1f} bytes "
    "of each value's text.",
    "",
    f"**A round's appends.** {changes:,} memberships of that set moved to other projects in one transaction "
    f"({changes:,} values leaving, {changes:,} entering): the file grew by {(moved - big) / 2**10:.0f} kB, "
    f"{(moved - big) / (2 * changes):.1f} bytes per changed value, against {moved_text / (2 * changes):.1f} bytes of "
    f"text; nothing else of the file was written. Shapes rotated during the benchmark: {rotations}.",
]
write_section(f"{here}/RESULTS.md", "subqueries_restore", lines)
PY
