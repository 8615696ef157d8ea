#!/usr/bin/env bash
#
# Requests that name tables, schemas or columns that do not exist leave the
# worker's memory flat.  Each failed name lookup leaves a negative entry in
# PostgreSQL's catalog caches (about 235 bytes), which nothing frees on an
# idle database: before the worker emptied those caches after a bound of
# failed resolutions (name_lookup.c), 20,000 such requests grew its
# CacheMemoryContext by about 4.7 MB.  After a warm-up of 10,000 requests,
# 20,000 more with fresh random names (tables, schemas, columns) must leave
# CacheMemoryContext and the worker's grand total within 256 kB of where
# they were.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

start_cluster_retrying "${SHAPE_SYNC_HTTP_PORT_FROM:-4660}"
cluster_psql -c "CREATE EXTENSION shape_sync" \
	-c "CREATE TABLE present (id int PRIMARY KEY, v text)" \
	-c "ALTER TABLE present REPLICA IDENTITY FULL" >/dev/null
worker=$(worker_pid)

cat >"$work/missing.py" <<'PY'
import http.client, os, sys, threading, urllib.parse
url, n, round_ = sys.argv[1], int(sys.argv[2]), sys.argv[3]
u = urllib.parse.urlsplit(url)
failed = []
def query(k):
    name = f"nosuch_{round_}_{k}_{os.urandom(4).hex()}"
    if k % 3 == 0:
        return {"table": name, "offset": "-1"}
    if k % 3 == 1:
        return {"table": f"{name}.present", "offset": "-1"}
    return {"table": "present", "columns": f"id,{name}", "offset": "-1"}
def run(part):
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    for k in part:
        conn.request("GET", "/v1/shape?" + urllib.parse.urlencode(query(k)))
        r = conn.getresponse(); r.read()
        if r.status != 400:
            failed.append(f"{k}: {r.status}")
threads = [threading.Thread(target=run, args=(range(i, n, 4),)) for i in range(4)]
for t in threads: t.start()
for t in threads: t.join()
sys.exit("; ".join(failed[:5]) if failed else 0)
PY


declare -a cache total
for round in 1 2; do
	count=$((round == 1 ? 10000 : 20000))
	check "round $round: $count requests for missing names get 400" \
		python3 "$work/missing.py" "$SHAPE_SYNC_URL" "$count" "$round"
	cluster_psql -c "SELECT pg_log_backend_memory_contexts($worker)" >/dev/null
	check "round $round: the worker logged its memory contexts" wait_for 60 dumped "$round"
	cache[round]=$(context_bytes CacheMemoryContext)
	total[round]=$(context_bytes "Grand total")
	echo "# after round $round: CacheMemoryContext ${cache[round]} bytes, worker ${total[round]} bytes"
done
check "CacheMemoryContext stayed within 256 kB over 20,000 missing names" \
	test $((cache[2] - cache[1])) -lt 262144
check "the worker's memory stayed within 256 kB over 20,000 missing names" \
	test $((total[2] - total[1])) -lt 262144
finish
