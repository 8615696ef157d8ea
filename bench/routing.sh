#!/usr/bin/env bash
#
# bench/routing.sh: decoding with many shapes on one table, changes routed through the
# equality index (src/pg/worker/equality_index.c), against test_decoding on the same WAL.
#
# For each scenario a table (id int PRIMARY KEY, tenant int, v text) gets its shapes:
#   0           none;
#   1           one shape without a where clause: every change matches it;
#   N           N shapes `tenant = k`, k = 0..N-1 (each change matches one);
#   N+R ranges  the N equality shapes and R shapes `tenant BETWEEN a AND a + 9`, evaluated on
#               every change;
#   N unrouted  N shapes `tenant + 0 = k`: the same rows, a clause the index cannot route, so
#               each change evaluates all N (the cost the index removes, measured in this run).
# Then, RUNS times per scenario, COMMITS one-row INSERT transactions (tenant = id % N) are
# written behind the gate of bench/lib.sh, which holds the worker at a commit still in
# progress, with a test_decoding slot created just before them:
#   baseline    the server's time of SELECT count(*) FROM pg_logical_slot_get_changes(...)
#               over those commits, while the worker is still held;
#   shape_sync  from the gate's release (the server's clock) until shape_sync.decoder shows
#               a decoded position at or past the end of the writes (polled every millisecond
#               by a function on the server), and the shapes' logs hold every change that
#               matched them (shape_sync.shapes.changes).
# Reports the medians: changes/s of each, their ratio, the cost per change, and the time
# against the one-shape scenario (the targets of issue 12: 1,000 equality shapes within 2x of
# one shape, 10,000 and 100,000 within 3x).  Writes the section "Decoding with many shapes"
# of bench/RESULTS.md.
#
# Knobs: RUNS (3), COMMITS (300000), SHAPE_COUNTS (the equality scenarios: "1000 10000"),
# RANGES (10, with the first of SHAPE_COUNTS), UNROUTED (1000; 0 leaves it out).
# 100,000 shapes (SHAPE_COUNTS="1000 10000 100000") take one 8 kB block of log memory each
# (800 MB; LOG_MEMORY, default 3GB, holds them).  bench/RESULTS.md was made with 11GB, when
# a small shape took 96 kB.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}
COMMITS=${COMMITS:-300000}
SHAPE_COUNTS=${SHAPE_COUNTS:-"1000 10000"}
RANGES=${RANGES:-10}
UNROUTED=${UNROUTED:-1000}
LOG_MEMORY=${LOG_MEMORY:-3GB}
bench_init

max_shapes=$((UNROUTED + RANGES + 10))
for n in $SHAPE_COUNTS; do max_shapes=$((max_shapes + 2 * n)); done

SHAPE_SYNC_MANAGE_REPLICA_IDENTITY=off SHAPE_SYNC_EXTRA_CONF="synchronous_standby_names = 'bench_gate'
synchronous_commit = local
max_wal_size = '8GB'
shape_sync.max_shapes = $max_shapes
shape_sync.log_memory = '$LOG_MEMORY'
shape_sync.shape_eviction = none
shape_sync.shape_idle_timeout = 0
shape_sync.max_concurrent_initial = 1000" bench_cluster_start
cluster_psql <<'SQL' >/dev/null
CREATE TABLE bench_route_gate (id serial PRIMARY KEY);
CREATE PROCEDURE bench_route_write(tbl regclass, first int, n int, tenants int) LANGUAGE plpgsql AS $$
BEGIN
	FOR i IN first..first + n - 1 LOOP
		EXECUTE format('INSERT INTO %s VALUES ($1, $2, $3)', tbl) USING i, i % tenants, 'v' || i;
		COMMIT;
	END LOOP;
END $$;
-- the server's clock once the worker has decoded up to `lsn`
CREATE FUNCTION bench_route_decoded(lsn pg_lsn) RETURNS double precision LANGUAGE plpgsql AS $$
BEGIN
	WHILE (SELECT decoded_lsn FROM shape_sync.decoder) < lsn LOOP
		PERFORM pg_sleep(0.001);
	END LOOP;
	RETURN extract(epoch FROM clock_timestamp());
END $$;
SQL
cluster_psql -c "CREATE EXTENSION shape_sync" >/dev/null


scenarios=()	# name table tenants expected_matches_per_change
make_scenario() {	# name tenants (where clauses on stdin)
	local table="bench_route_$((${#scenarios[@]} + 1))" n
	cluster_psql -c "CREATE TABLE $table (id int PRIMARY KEY, tenant int, v text) WITH (autovacuum_enabled = off)" \
		-c "ALTER TABLE $table REPLICA IDENTITY FULL" >/dev/null
	cat >"$out/wheres"
	n=$(wc -l <"$out/wheres")
	if ((n > 0)); then
		python3 "$here/make_shapes.py" "$SHAPE_SYNC_URL" "$table" <"$out/wheres"
	fi
	local ready
	for _ in $(seq 1 600); do
		ready=$(cluster_psql -At -c "SELECT count(*) FILTER (WHERE state = 'ready') FROM shape_sync.shapes WHERE relation = '\"public\".\"$table\"'")
		((ready == n)) && break
		sleep 0.5
	done
	((ready == n)) || { echo "$1: $ready of $n shapes ready" >&2; exit 1; }
	scenarios+=("$1|$table|$2")
	echo "# $1: $n shapes ready" >&2
}

equality() { seq 0 $(($1 - 1)) | sed "s/^/$2/"; }
ranges() {	# N: RANGES clauses over the N tenants
	for ((r = 0; r < RANGES; r++)); do
		a=$((r * $1 / RANGES))
		echo "tenant BETWEEN $a AND $((a + 9))"
	done
}
# (not through a pipe: make_scenario adds to scenarios)
make_scenario "0" 1 </dev/null
make_scenario "1" 1 < <(echo "")
first=1
for n in $SHAPE_COUNTS; do
	make_scenario "$n" "$n" < <(equality "$n" "tenant = ")
	if ((first && RANGES > 0)); then
		make_scenario "$n+$RANGES ranges" "$n" < <(equality "$n" "tenant = "; ranges "$n")
	fi
	first=0
done
if ((UNROUTED > 0)); then
	make_scenario "$UNROUTED unrouted" "$UNROUTED" < <(equality "$UNROUTED" "tenant + 0 = ")
fi
routed=$(cluster_psql -At -c "SELECT count(*) FROM shape_sync.shapes WHERE routed_by = 'tenant'")
echo "# $routed shapes routed by tenant" >&2

changes_of() { cluster_psql -At -c "SELECT coalesce(sum(changes), 0) FROM shape_sync.shapes WHERE relation = '\"public\".\"$1\"'"; }

measure() {	# name table tenants run
	local table=$2 first=$(($4 * COMMITS + 1)) res n base c0 c1 end t0 t1
	cluster_psql -c "SELECT pg_create_logical_replication_slot('bench_route', 'test_decoding')" >/dev/null
	gate_hold bench_route_gate
	cluster_psql -c "SET synchronous_commit = off" -c "CALL bench_route_write('$table', $first, $((COMMITS - 1)), $3)" \
		-c "SET synchronous_commit = local" \
		-c "INSERT INTO $table VALUES ($((first + COMMITS - 1)), $(((first + COMMITS - 1) % $3)), 'last')" >/dev/null
	end=$(cluster_psql -At -c "SELECT pg_current_wal_insert_lsn()")
	res=$(cluster_psql -At -F ' ' -c "SELECT count(*), extract(epoch FROM clock_timestamp() - statement_timestamp()) FROM pg_logical_slot_get_changes('bench_route', NULL, NULL)")
	read -r n base <<<"$res"
	((n >= 3 * COMMITS)) || { echo "test_decoding returned $n rows for $COMMITS commits" >&2; exit 1; }
	cluster_psql -c "SELECT pg_drop_replication_slot('bench_route')" >/dev/null
	c0=$(changes_of "$table")
	gate_release
	read -r _ t0 <"$out/released"
	t1=$(cluster_psql -At -c "SELECT bench_route_decoded('$end')")
	helpers=()
	c1=$(changes_of "$table")
	echo "$1|$4|$base|$(elapsed "$t0" "$t1")|$((c1 - c0))"
}

for run in $(seq 1 "$RUNS"); do
	order=("${scenarios[@]}")
	if ((run % 2 == 0)); then	# the other order every other run
		order=()
		for ((i = ${#scenarios[@]} - 1; i >= 0; i--)); do order+=("${scenarios[i]}"); done
	fi
	for s in "${order[@]}"; do
		IFS='|' read -r name table tenants <<<"$s"
		measure "$name" "$table" "$tenants" "$run" | tee -a "$out/runs.txt" >&2
	done
done
cluster_stop

python3 - "$out/runs.txt" "$RUNS" "$COMMITS" "$RANGES" "$here" "$pg_version" \
	"SHAPE_COUNTS=\"$SHAPE_COUNTS\" LOG_MEMORY=$LOG_MEMORY" <<'PY'
import statistics, sys
runs_file, runs, commits, ranges, here, pg, knobs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6], sys.argv[7]
sys.path.insert(0, here)
from results_section import machine, write_section
order, base, mine, matched = [], {}, {}, {}
for line in open(runs_file):
    name, run, b, m, c = line.strip().split("|")
    if name not in base:
        order.append(name)
    base.setdefault(name, []).append(float(b))
    mine.setdefault(name, []).append(float(m))
    matched.setdefault(name, []).append(int(c))
med = lambda xs: statistics.median(xs)
one = med(mine["1"])
lines = [
    "## Decoding with many shapes",
    "",
    f"{machine(pg)} `{knobs} bash bench/routing.sh`: medians of {runs} runs.",
    "",
    f"{commits} one-row `INSERT` transactions on a table with the shapes of each row (`tenant = id % N`), "
    "decoded as a backlog (the gate of `bench/lib.sh` holds the worker while they are written), by shape_sync "
    "(from the release until `shape_sync.decoder` shows the end of the writes decoded, every matching change in "
    "its shape's log) and, on the same WAL, by `test_decoding` through `pg_logical_slot_get_changes` "
    "(the server's time of the query). \"time vs 1 shape\" is shape_sync's time against one shape "
    "that every change matches: the cost of the shapes a change does not match.",
    "",
    "| shapes on the table | shape_sync changes/s | test_decoding changes/s | ratio | µs per change | time vs 1 shape | changes appended |",
    "|---|---:|---:|---:|---:|---:|---:|",
]
labels = {"0": "none", "1": "1, no where clause (matches every row)"}
for name in order:
    m, b = med(mine[name]), med(base[name])
    label = labels.get(name)
    if label is None:
        if name.endswith("unrouted"):
            label = f"{name.split()[0]} with `tenant + 0 = k` (not routable: each evaluated)"
        elif "ranges" in name:
            n = name.split("+")[0]
            label = f"{n} with `tenant = k` and {ranges} with `tenant BETWEEN a AND a + 9`"
        else:
            label = f"{name} with `tenant = k`"
    lines.append(f"| {label} | {commits / m:,.0f} | {commits / b:,.0f} | {b / m:.2f}x | {m * 1e6 / commits:.2f} | "
                 f"{m / one:.2f}x | {med(matched[name]):,} |")
targets = []
for name in order:
    if name.isdigit() and int(name) >= 1000:
        limit = 2 if int(name) == 1000 else 3
        ratio = med(mine[name]) / one
        targets.append(f"{int(name):,} equality shapes {ratio:.2f}x the time of one shape "
                       f"(target at most {limit}x: {'met' if ratio <= limit else 'not met'})")
if targets:
    lines += ["", "Targets: " + "; ".join(targets) + "."]
short = [f"{n} run {i + 1} ({c:,} of {max(matched[n]):,})" for n in order
         for i, c in enumerate(matched[n]) if c < max(matched[n])]
if short:
    lines += ["", "Runs in which fewer changes reached the logs than in the others (shapes were "
              "rotated, typically because `shape_sync.log_memory` ran out): " + "; ".join(short) + "."]
lines += [
    "",
    "Runs (seconds, shape_sync / test_decoding): " + "; ".join(
        f"{n}: " + ", ".join(f"{a:.3f}/{b:.3f}" for a, b in zip(mine[n], base[n])) for n in order) + ".",
]
write_section(f"{here}/RESULTS.md", "routing", lines)
PY
