#!/usr/bin/env bash
#
# shape_sync.prefault_log_memory makes the log memory resident in the
# background (src/pg/worker/worker.c, slog_arena_prefault), so that first snapshots
# do not pay the kernel's first touch of each page.  A cluster with 256 MB of
# log memory starts with the setting off: the worker's resident shared memory
# stays far below 256 MB, also after a shape is made.  Turned on by a reload,
# the worker makes all of it resident within seconds, and shapes made before
# and after read back whole (the prefault changes no byte of a block in use).  A cluster
# with more log memory than half of what the machine has available is left alone.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

SHAPE_SYNC_EXTRA_CONF="shape_sync.log_memory = '256MB'
shape_sync.prefault_log_memory = off" start_cluster_retrying 4600
cluster_psql -c "CREATE EXTENSION shape_sync" \
	-c "CREATE TABLE prefault (id int PRIMARY KEY, v text)" \
	-c "INSERT INTO prefault SELECT g, repeat('x', 100) FROM generate_series(1, 20000) g" >/dev/null
worker=$(worker_pid)

resident_kb() { awk '/^RssShmem:/ { print $2 }' "/proc/$worker/status"; }

# rows_of WHERE: the rows of the shape, read from offset -1 to up-to-date, whose values are whole
cat >"$work/rows_of.py" <<'PY'
import http.client, json, sys, urllib.parse
url, where = sys.argv[1], sys.argv[2]
u = urllib.parse.urlsplit(url)
conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
q = {"table": "prefault", "offset": "-1", "where": where}
rows = {}
while True:
    conn.request("GET", "/v1/shape?" + urllib.parse.urlencode(q))
    r = conn.getresponse()
    body = r.read()
    if r.status != 200:
        sys.exit(f"status {r.status}: {body[:200]!r}")
    for m in json.loads(body):
        if "key" in m and m["value"]["v"] == "x" * 100:
            rows[m["value"]["id"]] = True
    if r.getheader("electric-up-to-date") is not None:
        break
    q["handle"], q["offset"] = r.getheader("electric-handle"), r.getheader("electric-offset")
print(len(rows))
PY
rows_of() { python3 "$work/rows_of.py" "$SHAPE_SYNC_URL" "$1"; }

sleep 2
check "off: a shape of 20,000 rows reads back whole" test "$(rows_of 'id > 0')" = 20000
kb=$(resident_kb)
check "off: the worker's resident shared memory stays below 128 MB ($kb kB)" test "$kb" -lt 131072

cluster_psql -c "ALTER SYSTEM SET shape_sync.prefault_log_memory = on" >/dev/null
cluster_reload
all_resident() { (($(resident_kb) >= 256 * 1024)); }
check "on, after a reload: all 256 MB become resident" wait_for 30 all_resident
check "on: the shape made before reads back whole" test "$(rows_of 'id > 0')" = 20000
check "on: a new shape reads back whole" test "$(rows_of 'id > 10000')" = 10000
cluster_stop

# More log memory than half of what the machine has available: not made resident (each
# start of the worker would have the kernel kill a process), and the log says why.
avail_mb=$(awk '/^MemAvailable:/ { print int($2 / 1024) }' /proc/meminfo)
big_mb=$((avail_mb * 6 / 10))
SHAPE_SYNC_EXTRA_CONF="shape_sync.log_memory = '${big_mb}MB'" start_cluster_retrying 4600
worker=$(worker_pid)
refused() { grep -q "shape_sync does not make its log memory resident ahead of use" "$SHAPE_SYNC_LOG"; }
check "log memory of ${big_mb} MB of ${avail_mb} MB available: the log says it is not made resident" wait_for 60 refused
kb=$(resident_kb)
check "and the worker's resident shared memory stays small ($kb kB)" test "$kb" -lt 131072
finish
