#!/usr/bin/env bash
#
# bench/run.sh: every benchmark, one command.
#   1. commit-to-client latency of shape_sync against LISTEN/NOTIFY, on a throwaway cluster
#      (scripts/lib/cluster.sh, default shape_sync settings): bench/latency.json and the
#      section "Commit-to-client latency" of bench/RESULTS.md;
#   2. bench/deadline.sh: the per-write cost of the stall deadline against two alternatives,
#      the section "Per-write cost of the stall deadline" of bench/RESULTS.md;
#   3. bench/access.sh: the cost of access control per request, the section "Cost of access
#      control" of bench/RESULTS.md;
#   4. bench/decode.sh: the cost of the where clause's evaluation deadline per decoded match,
#      the section "Cost of the where clause's evaluation deadline" of bench/RESULTS.md;
#   5. bench/commits.sh: decoding many one-row transactions against test_decoding, as a backlog
#      and while they are written, quiet and with catch-up requests interleaved, the section
#      "Decoding many small transactions" of bench/RESULTS.md;
#   6. bench/locate.sh: locating a client's offset in a 10 MB open tail, with the position
#      index against the scan it replaced, the section "Locating an offset in the open tail"
#      of bench/RESULTS.md;
#   7. bench/compaction.sh: the memory of one hot shape over time with compaction and without,
#      the section "Memory of a hot shape";
#   8. bench/big_transaction.sh: a new shape requested during the replay of a 1M-row
#      transaction, the section "A new shape during a big transaction";
#   9. bench/recovery.sh: 1,000 live clients on 100 shapes coming back after a restart of
#      PostgreSQL, the section "Recovery after a restart";
#  10. bench/fanout.sh: one commit woken at 100 to 10,000 parked live clients (and 10,000
#      over 1,000 shapes) against an epoll floor server, and memory per connection, the
#      section "Fan-out to many live clients";
#  11. bench/bystanders.sh: 100 live clients woken beside 0, 1,000 and 10,000 clients parked
#      on other shapes, the section "Bystanders: parked clients of other shapes";
#  12. bench/storm.sh: disconnect storms of 1,000 and 10,000 parked clients, the section
#      "Disconnect storms";
#  13. bench/catchup.sh: catch-up requests against nginx serving the same bytes, the
#      section "Catch-up against nginx" (needs nginx and wrk: SHAPE_SYNC_BENCH=1
#      scripts/install-deps.sh);
#  14. bench/metrics.sh: an increment of a hot counter and histogram from 1 to 8 threads,
#      striped against one shared atomic and a mutex, the section "Striped metrics";
#  15. bench/routing.sh: decoding with 0, 1, 1,000 and 10,000 shapes on a table (equality
#      shapes routed by the index, a few range shapes, 1,000 unroutable ones) against
#      test_decoding, the section "Decoding with many shapes";
#  16. bench/create.sh: 1,000 and 3,650 concurrent new shapes against the same requests for
#      existing ones, the section "Shapes created at scale";
#  17. bench/shape_memory.sh: log and worker memory of 10,000 one-row shapes, and what their
#      deletion gives back, the section "Memory of small shapes";
#  18. bench/initial_sync.sh: the first and second client of a 1M-row table against COPY,
#      the section "Initial sync against COPY";
#  19. bench/subset.sh: subset snapshots of one row, a page and 100,000 rows against the
#      same SELECT, the section "Subset snapshots against SELECT";
#  20. bench/durability.sh: durable shape logs against the in-memory path, the section
#      "Durable logs: what the disk costs";
#  21. bench/manifest_rounds.sh: the flush rounds beside 10,000 idle durable shapes against
#      10, the section "Flush rounds beside many idle shapes";
#  22. bench/burst.sh: 170 MB of log decoded at once with 64 MB of log memory against 1 GB,
#      the section "More than the log memory at once";
#  23. bench/fetch_cost.sh: a long-poll read with fetch against a plain socket, from a server
#      that does no work, the section "The fetch client's own cost".
# Other sections of bench/RESULTS.md are kept.
#
# Knobs (environment): RUNS (3), COMMITS (500 measured commits per run), WARMUP (20),
# THREADS (client worker threads; default min(4, CPUs)), SCENARIOS (comma list of notify,
# raw-1, client-1, raw-100, sock-100, client-100). About 60 minutes with the defaults.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
bench_need_node_modules
bench_init
cluster_start ""

export BENCH_JSON=$here/latency.json
BENCH_LOAD_BEFORE=$(cut -d" " -f1-3 /proc/loadavg)
export BENCH_LOAD_BEFORE
rc=0
node "$here/latency.mjs" || rc=$?

# machine facts for the report
BENCH_NPROC=$(nproc)
export BENCH_NPROC
BENCH_FREE=$(free -h)
export BENCH_FREE
BENCH_CPU=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
export BENCH_CPU
BENCH_PG=$(cluster_psql -At -c 'SELECT version()')
export BENCH_PG
BENCH_LOAD_AFTER=$(cut -d" " -f1-3 /proc/loadavg)
export BENCH_LOAD_AFTER
BENCH_DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
export BENCH_DATE
BENCH_CONF=$(cluster_psql -At -c "SELECT string_agg(name || ' = ' || setting || coalesce(unit, ''), ', ' ORDER BY name) FROM pg_settings WHERE name IN ('shape_sync.long_poll_timeout', 'shape_sync.http_threads', 'shape_sync.chunk_bytes_threshold', 'synchronous_commit', 'fsync', 'wal_level')")
export BENCH_CONF
node "$here/report.mjs" "$BENCH_JSON" "$here/RESULTS.md"
cluster_stop
bash "$here/deadline.sh" >/dev/null || rc=$?
bash "$here/access.sh" >/dev/null || rc=$?
bash "$here/decode.sh" >/dev/null || rc=$?
bash "$here/commits.sh" >/dev/null || rc=$?
bash "$here/locate.sh" >/dev/null || rc=$?
bash "$here/compaction.sh" >/dev/null || rc=$?
bash "$here/big_transaction.sh" >/dev/null || rc=$?
bash "$here/recovery.sh" >/dev/null || rc=$?
bash "$here/fanout.sh" >/dev/null || rc=$?
bash "$here/bystanders.sh" >/dev/null || rc=$?
bash "$here/storm.sh" >/dev/null || rc=$?
bash "$here/catchup.sh" >/dev/null || rc=$?
bash "$here/metrics.sh" >/dev/null || rc=$?
RUNS=3 COMMITS=300000 bash "$here/routing.sh" >/dev/null || rc=$?
RUNS=3 bash "$here/create.sh" >/dev/null || rc=$?
RUNS=3 bash "$here/shape_memory.sh" >/dev/null || rc=$?
RUNS=3 bash "$here/initial_sync.sh" >/dev/null || rc=$?
RUNS=3 bash "$here/subset.sh" >/dev/null || rc=$?
RUNS=3 bash "$here/durability.sh" >/dev/null || rc=$?
RUNS=3 bash "$here/manifest_rounds.sh" >/dev/null || rc=$?
RUNS=3 bash "$here/burst.sh" >/dev/null || rc=$?
RUNS=3 bash "$here/fetch_cost.sh" >/dev/null || rc=$?
echo "wrote $here/RESULTS.md"
exit "$rc"
