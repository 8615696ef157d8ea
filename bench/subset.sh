#!/usr/bin/env bash
#
# bench/subset.sh: subset snapshots (issue 13) against the equivalent SELECT.  A table of
# ROWS rows (id int, a int, b text of 80 characters, an index on a) and a changes_only shape
# over it; bench/subset.mjs times, RUNS times, sequential subset requests of one row, of a
# page of 100 rows and of 100,000 rows, each against the same SELECT (row_to_json) over a
# node-postgres connection that stays open.  A subset request goes through the HTTP thread,
# the main thread (the shape, its handle) and a snapshot worker (the query, in a REPEATABLE
# READ transaction of its own), so its fixed cost is what the ratio shows; the rows cost
# what the encoder costs.  Reports medians and ratios; writes the section "Subset
# snapshots against SELECT" of bench/RESULTS.md.
#
# Knobs: RUNS (3), ROWS (1000000), N (200 requests a case and run).
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}
ROWS=${ROWS:-1000000}
bench_init

SHAPE_SYNC_EXTRA_CONF="shape_sync.log_memory = '1GB'" bench_cluster_start
cluster_psql -c "CREATE EXTENSION shape_sync" \
	-c "CREATE TABLE bench_subset (id int PRIMARY KEY, a int, b text)" \
	-c "INSERT INTO bench_subset SELECT g, g % 1000, repeat(md5(g::text), 3)::char(80) FROM generate_series(1, $ROWS) g" \
	-c "CREATE INDEX ON bench_subset (a)" \
	-c "ALTER TABLE bench_subset REPLICA IDENTITY FULL" -c "VACUUM ANALYZE bench_subset" >/dev/null

for _ in $(seq 1 "$RUNS"); do
	node "$here/subset.mjs"
done | tee "$out/runs.txt" >&2
cluster_stop

python3 - "$out/runs.txt" "$RUNS" "$ROWS" "$here" "$pg_version" <<'PY'
import statistics, sys
runs_file, runs, rows, here, pg = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
sys.path.insert(0, here)
from results_section import machine, write_section
t = {}
for line in open(runs_file):
    name, sub, sql, n = line.split()
    t.setdefault(name, []).append((float(sub), float(sql), int(n)))
names = {"point": "one row by key (`id = $1`)",
         "page": "a page: `a = $1 ORDER BY id LIMIT 100`",
         "bulk": "`id <= 100000 ORDER BY id`"}
lines = [
    "## Subset snapshots against SELECT",
    "",
    f"{machine(pg)} `bash bench/subset.sh`: medians of {runs} runs, each the median of its requests.",
    "",
    f"A table of {rows:,} rows of about 100 bytes and a `changes_only` shape over it. Sequential subset "
    "requests over one keep-alive connection, against the same query as `SELECT row_to_json(t)` over a "
    "node-postgres connection that stays open; neither side parses the JSON it gets (subset rows are "
    "counted in the body, json values stay text). The server, PostgreSQL and the client share the machine.",
    "",
    "| subset | rows | shape_sync ms | SELECT ms | ratio (SELECT / shape_sync) |",
    "|---|---:|---:|---:|---:|",
]
for k in ["point", "page", "bulk"]:
    sub = statistics.median(x[0] for x in t[k])
    sql = statistics.median(x[1] for x in t[k])
    lines.append(f"| {names[k]} | {t[k][0][2]:,} | {sub * 1000:.2f} | {sql * 1000:.2f} | {sql / sub:.2f}x |")
lines += ["", "Runs (ms, shape_sync/SELECT): " + "; ".join(
    f"{k} " + ", ".join(f"{a * 1000:.2f}/{b * 1000:.2f}" for a, b, _ in v) for k, v in t.items()) + "."]
write_section(f"{here}/RESULTS.md", "subset", lines)
PY
