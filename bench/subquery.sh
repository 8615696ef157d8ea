#!/usr/bin/env bash
#
# bench/subquery.sh: shapes with subqueries (docs/subqueries.md), three measurements, each
# against a baseline of the same run:
#
# 1. Decoding with 10,000 per-user membership shapes
#      project_id IN (SELECT project_id FROM bench_members WHERE user_id = $1), $1 = 0..N-1
#    (user k is a member of project k), against one equality shape `project_id = 0`, and
#    against N equality shapes `project_id = k`, each on a table of its own. COMMITS one-row
#    INSERT transactions (project_id = id % N: each matches one membership shape, as with the
#    N equality shapes; on the one shape's table project_id = 0: each matches it) are written
#    behind the gate of bench/lib.sh, which holds the worker;
#    the time from the gate's release until shape_sync.decoder shows the writes decoded (the
#    server's clock, as bench/routing.sh measures it). Target of issue 27: the membership
#    shapes within 3x the time of one equality shape. Also the worker's memory for the N
#    membership shapes against the N equality shapes: what its memory contexts hold
#    (pg_log_backend_memory_contexts' grand total, used), and its private memory (RssAnon, which
#    also keeps what the allocator does not give back).
# 2. Latency of a move-in (bench/subquery_latency.mjs): from an inner-table commit to the row
#    it moves into a membership shape at a raw long-poll client, against a plain insert's time
#    to the same client, interleaved. Target: at most 2x.
# 3. Memory per inner value: what the worker's memory contexts hold before and after one shape
#    whose subquery selects VALUES distinct values (bench_big_members), against the same shape
#    made first with a subquery of one value (the stream's own cost).
#    Then the memory per row a nested select keeps: a shape whose nested select reads VALUES
#    projects (bench_nest_big) of a team the user is not in, against the same over one project.
# Writes the section "Subqueries" of bench/RESULTS.md.
#
# Knobs: RUNS (5), COMMITS (200000), SHAPES (10000), SAMPLES (40, of each kind per latency
# run), VALUES (100000), DURABLE_LOGS (on; off writes the section "Subqueries, shape logs in
# memory only" instead: what decoding costs without the shapes' files).
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-5}
COMMITS=${COMMITS:-200000}
SHAPES=${SHAPES:-10000}
SAMPLES=${SAMPLES:-40}
VALUES=${VALUES:-100000}
DURABLE_LOGS=${DURABLE_LOGS:-on}
bench_init
bench_need_node_modules

SHAPE_SYNC_MANAGE_REPLICA_IDENTITY=off SHAPE_SYNC_EXTRA_CONF="synchronous_standby_names = 'bench_gate'
synchronous_commit = local
max_wal_size = '8GB'
shape_sync.max_shapes = $((3 * SHAPES + 100))
shape_sync.log_memory = '2GB'
shape_sync.shape_eviction = none
shape_sync.shape_idle_timeout = 0
shape_sync.subquery_max_values = $((VALUES + 1))
shape_sync.max_concurrent_initial = 1000
shape_sync.durable_logs = $DURABLE_LOGS" bench_cluster_start
worker=$(bench_worker_pid)
cluster_psql <<SQL >/dev/null
CREATE EXTENSION shape_sync;
CREATE TABLE bench_gate_t (id serial PRIMARY KEY);
CREATE TABLE bench_members (id serial PRIMARY KEY, user_id int, project_id int);
ALTER TABLE bench_members REPLICA IDENTITY FULL;
INSERT INTO bench_members (user_id, project_id) SELECT g, g FROM generate_series(0, $SHAPES - 1) g;
CREATE INDEX ON bench_members (user_id);
CREATE TABLE bench_big_members (id serial PRIMARY KEY, user_id int, project_id int);
ALTER TABLE bench_big_members REPLICA IDENTITY FULL;
INSERT INTO bench_big_members (user_id, project_id) SELECT 1, g FROM generate_series(1, $VALUES) g;
INSERT INTO bench_big_members (user_id, project_id) VALUES (2, 1);
CREATE INDEX ON bench_big_members (user_id);
CREATE TABLE bench_nest_teams (id serial PRIMARY KEY, user_id int, team_id int);
ALTER TABLE bench_nest_teams REPLICA IDENTITY FULL;
INSERT INTO bench_nest_teams (user_id, team_id) VALUES (1, 1);
CREATE TABLE bench_nest_small (id int PRIMARY KEY, team_id int);
ALTER TABLE bench_nest_small REPLICA IDENTITY FULL;
INSERT INTO bench_nest_small VALUES (1, 2);
CREATE TABLE bench_nest_big (id int PRIMARY KEY, team_id int);
ALTER TABLE bench_nest_big REPLICA IDENTITY FULL;
INSERT INTO bench_nest_big SELECT g, 2 FROM generate_series(1, $VALUES) g;
CREATE PROCEDURE bench_sub_write(tbl regclass, first int, n int, projects int) LANGUAGE plpgsql AS \$\$
BEGIN
	FOR i IN first..first + n - 1 LOOP
		EXECUTE format('INSERT INTO %s VALUES (\$1, \$2, \$3)', tbl) USING i, i % projects, 'v' || i;
		COMMIT;
	END LOOP;
END \$\$;
CREATE FUNCTION bench_sub_decoded(lsn pg_lsn) RETURNS double precision LANGUAGE plpgsql AS \$\$
BEGIN
	WHILE (SELECT decoded_lsn FROM shape_sync.decoder) < lsn LOOP
		PERFORM pg_sleep(0.001);
	END LOOP;
	RETURN extract(epoch FROM clock_timestamp());
END \$\$;
SQL

# the bytes the worker's memory contexts use (logged by pg_log_backend_memory_contexts)
ctx_used() {
	local before
	before=$(grep -c 'Grand total' "$SHAPE_SYNC_LOG" || true)
	cluster_psql -c "SELECT pg_log_backend_memory_contexts($worker)" >/dev/null
	for _ in $(seq 1 100); do
		(($(grep -c 'Grand total' "$SHAPE_SYNC_LOG" || true) > before)) && break
		sleep 0.1
	done
	grep 'Grand total' "$SHAPE_SYNC_LOG" | tail -1 | sed 's/.*; \([0-9]*\) used$/\1/'
}

# ---------------------------------------------------------------- 1. decoding
make_table() { cluster_psql -c "CREATE TABLE $1 (id int PRIMARY KEY, project_id int, v text) WITH (autovacuum_enabled = off)" \
	-c "ALTER TABLE $1 REPLICA IDENTITY FULL" >/dev/null; }
wait_ready() {	# TABLE N
	local ready
	for _ in $(seq 1 1200); do
		ready=$(cluster_psql -At -c "SELECT count(*) FILTER (WHERE state = 'ready') FROM shape_sync.shapes WHERE relation = '\"public\".\"$1\"'")
		((ready == $2)) && return 0
		sleep 0.5
	done
	echo "$1: $ready of $2 shapes ready" >&2
	exit 1
}
make_table bench_eq1
make_table bench_eqn
make_table bench_sub
echo "project_id = 0" | python3 "$here/make_shapes.py" "$SHAPE_SYNC_URL" bench_eq1
wait_ready bench_eq1 1
rss0=$(bench_rss_anon_kb "$worker")
ctx0=$(ctx_used)
seq 0 $((SHAPES - 1)) | sed 's/^/project_id = /' | python3 "$here/make_shapes.py" "$SHAPE_SYNC_URL" bench_eqn
wait_ready bench_eqn "$SHAPES"
rss1=$(bench_rss_anon_kb "$worker")
ctx1=$(ctx_used)
seq 0 $((SHAPES - 1)) | sed 's/^/project_id IN (SELECT project_id FROM bench_members WHERE user_id = $1)\t/' |
	python3 "$here/make_shapes.py" "$SHAPE_SYNC_URL" bench_sub
wait_ready bench_sub "$SHAPES"
rss2=$(bench_rss_anon_kb "$worker")
ctx2=$(ctx_used)
routed=$(cluster_psql -At -c "SELECT count(*) FROM shape_sync.shapes WHERE relation = '\"public\".\"bench_sub\"' AND routed_by = 'project_id'")
echo "# $SHAPES membership shapes ready, $routed routed by project_id" >&2

measure() {	# NAME TABLE PROJECTS RUN
	local first=$(($4 * COMMITS + 1)) end t0 t1
	gate_hold bench_gate_t
	cluster_psql -c "SET synchronous_commit = off" -c "CALL bench_sub_write('$2', $first, $((COMMITS - 1)), $3)" \
		-c "SET synchronous_commit = local" \
		-c "INSERT INTO $2 VALUES ($((first + COMMITS - 1)), $(((first + COMMITS - 1) % $3)), 'last')" >/dev/null
	end=$(cluster_psql -At -c "SELECT pg_current_wal_insert_lsn()")
	gate_release
	read -r _ t0 <"$out/released"
	t1=$(cluster_psql -At -c "SELECT bench_sub_decoded('$end')")
	helpers=()
	echo "$1|$4|$(elapsed "$t0" "$t1")"
}
# the one equality shape's table gets project 0 only: every change matches it, as every
# change matches one of the others
for run in $(seq 1 "$RUNS"); do
	order=("eq1|bench_eq1|1" "eqn|bench_eqn|$SHAPES" "sub|bench_sub|$SHAPES")
	((run % 2 == 0)) && order=("sub|bench_sub|$SHAPES" "eqn|bench_eqn|$SHAPES" "eq1|bench_eq1|1")
	for s in "${order[@]}"; do
		IFS='|' read -r name table projects <<<"$s"
		measure "$name" "$table" "$projects" "$run" | tee -a "$out/decode.txt" >&2
	done
done
moved=$(cluster_psql -At -c "SELECT coalesce(sum(changes), 0) FROM shape_sync.shapes WHERE relation = '\"public\".\"bench_sub\"'")
rotations=$(curl -s "$SHAPE_SYNC_URL/metrics" | awk '$1 ~ /^shape_sync_shape_rotations_total/ { s += $2 } END { print s + 0 }')

# ---------------------------------------------------------------- 2. latency
for run in $(seq 1 "$RUNS"); do
	SAMPLES=$SAMPLES node "$here/subquery_latency.mjs" | tee -a "$out/latency.txt" >&2
done

# ---------------------------------------------------------------- 3. memory per value
make_table bench_big
where_big='project_id IN (SELECT project_id FROM bench_big_members WHERE user_id = $1)'
printf '%s\t2\n' "$where_big" | python3 "$here/make_shapes.py" "$SHAPE_SYNC_URL" bench_big
wait_ready bench_big 1
ctx3=$(ctx_used)
printf '%s\t1\n' "$where_big" | python3 "$here/make_shapes.py" "$SHAPE_SYNC_URL" bench_big
wait_ready bench_big 2
ctx4=$(ctx_used)
# ... and per row a nested select keeps: projects of a team the user is not in (kept, no value)
where_nest='project_id IN (SELECT id FROM %s WHERE team_id IN (SELECT team_id FROM bench_nest_teams WHERE user_id = $1))'
printf "$where_nest\t1\n" bench_nest_small | python3 "$here/make_shapes.py" "$SHAPE_SYNC_URL" bench_big
wait_ready bench_big 3
ctx5=$(ctx_used)
printf "$where_nest\t1\n" bench_nest_big | python3 "$here/make_shapes.py" "$SHAPE_SYNC_URL" bench_big
wait_ready bench_big 4
ctx6=$(ctx_used)
values_held=$(curl -s "$SHAPE_SYNC_URL/metrics" | awk '$1 == "shape_sync_subquery_values" { print $2 }')
cluster_stop

python3 - "$out" "$RUNS" "$COMMITS" "$SHAPES" "$VALUES" "$here" "$pg_version" "$rss0 $rss1 $rss2 $ctx0 $ctx1 $ctx2 $ctx3 $ctx4 $ctx5 $ctx6" \
	"$routed" "$moved" "$rotations" "$values_held" "$SAMPLES" "$DURABLE_LOGS" <<'PY'
import json, statistics, sys
out, runs, commits, shapes, values, here, pg, rss = sys.argv[1:9]
routed, moved, rotations, values_held, samples, durable = sys.argv[9:15]
runs, commits, shapes, values = int(runs), int(commits), int(shapes), int(values)
rss0, rss1, rss2, ctx0, ctx1, ctx2, ctx3, ctx4, ctx5, ctx6 = (int(x) for x in rss.split())
sys.path.insert(0, here)
from results_section import machine, write_section
t = {}
for line in open(f"{out}/decode.txt"):
    name, run, secs = line.strip().split("|")
    t.setdefault(name, []).append(float(secs))
med = statistics.median
eq1, eqn, sub = med(t["eq1"]), med(t["eqn"]), med(t["sub"])
lat = [json.loads(line) for line in open(f"{out}/latency.txt")]
plain = med([x["plain"]["median"] for x in lat])
move = med([x["move_in"]["median"] for x in lat])
plain90 = med([x["plain"]["p90"] for x in lat])
move90 = med([x["move_in"]["p90"] for x in lat])
per_value = (ctx4 - ctx3) / values
memory_only = durable == "off"
lines = [
    "## Subqueries" + (", shape logs in memory only" if memory_only else ""),
    "",
    f"{machine(pg)} `{'DURABLE_LOGS=off ' if memory_only else ''}bash bench/subquery.sh`: medians of {runs} runs"
    + (" with `shape_sync.durable_logs = off`: the same as the section above without the shapes' files." if memory_only else "."),
    "",
    f"**Decoding.** {commits:,} one-row `INSERT` transactions decoded as a backlog (the gate of `bench/lib.sh`), "
    f"on a table with {shapes:,} per-user shapes `project_id IN (SELECT project_id FROM members WHERE user_id = $1)` "
    f"(user k a member of project k: each change matches one), against one equality shape `project_id = 0` that "
    f"every change matches, and against {shapes:,} equality shapes `project_id = k` (each change matches one), "
    "each on a table of its own: each change is appended to one shape's log in all three.",
    "",
    "| shapes on the table | seconds | changes/s | time vs 1 equality shape |",
    "|---|---:|---:|---:|",
    f"| 1 with `project_id = 0` | {eq1:.2f} | {commits / eq1:,.0f} | 1.00x |",
    f"| {shapes:,} with `project_id = k` | {eqn:.2f} | {commits / eqn:,.0f} | {eqn / eq1:.2f}x |",
    f"| {shapes:,} membership shapes | {sub:.2f} | {commits / sub:,.0f} | {sub / eq1:.2f}x |",
    "",
    f"Target: {shapes:,} membership shapes within 3x the time of one equality shape: {sub / eq1:.2f}x, "
    f"{'met' if sub / eq1 <= 3 else 'not met'}. {routed} of the {shapes:,} were routed by `project_id` "
    f"(through their sets' values); their logs received {int(moved):,} changes in all; shapes rotated during the "
    f"whole benchmark: {rotations}.",
    "",
    f"Memory of the worker for the shapes: what its memory contexts use grew by {(ctx1 - ctx0) / 2**20:.1f} MB "
    f"for the {shapes:,} equality shapes ({(ctx1 - ctx0) / shapes:,.0f} bytes each) and by "
    f"{(ctx2 - ctx1) / 2**20:.1f} MB for the {shapes:,} membership shapes ({(ctx2 - ctx1) / shapes:,.0f} bytes each, "
    f"their one-value sets and routes included); its private memory (RssAnon, with what the allocator keeps) "
    f"grew by {(rss1 - rss0) / 1024:.1f} MB and {(rss2 - rss1) / 1024:.1f} MB.",
    "",
    f"**Move-in latency** (`bench/subquery_latency.mjs`, {samples} samples of each kind per run, interleaved): "
    "from the `COMMIT` of a membership that brings one row into the shape to that row at a raw long-poll client "
    "(a `move-in` event, then the row read by its own query), against a plain insert's time to the same client.",
    "",
    "| change | median ms | p90 ms |",
    "|---|---:|---:|",
    f"| plain insert | {plain:.2f} | {plain90:.2f} |",
    f"| move-in | {move:.2f} | {move90:.2f} |",
    "",
    f"Ratio of the medians: {move / plain:.2f}x (target at most 2x: {'met' if move / plain <= 2 else 'not met'}). "
    "Runs (plain/move-in medians, ms): " + "; ".join(f"{x['plain']['median']:.2f}/{x['move_in']['median']:.2f}" for x in lat) + ".",
    "",
    f"**Memory per inner value.** One shape whose subquery selects {values:,} distinct values, made after the same "
    f"shape with a subquery of one value: what the worker's memory contexts use grew by {(ctx4 - ctx3) / 2**20:.1f} MB, "
    f"{per_value:.0f} bytes per value (its entry in the table of values, its text, and the shape's filing under it "
    "in the routing index). "
    f"`shape_sync_subquery_values` showed {values_held}.",
    "",
    f"**Memory per kept row of a nested select.** One shape whose nested select "
    f"(`project_id IN (SELECT id FROM projects WHERE team_id IN (SELECT ...))`) reads {values:,} projects of a team "
    "the user is not in, made after the same shape over a table of one project: what the worker's memory contexts use "
    f"grew by {(ctx6 - ctx5) / 2**20:.1f} MB, {(ctx6 - ctx5) / values:.0f} bytes per kept row (its two columns as text "
    "and as a tuple, its entry in the set's rows and in the index of its compared value).",
]
write_section(f"{here}/RESULTS.md", "subqueries_memory_only" if memory_only else "subqueries", lines)
PY
