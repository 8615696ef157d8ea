#!/usr/bin/env bash
#
# A transaction of several hundred thousand rows is replayed whole at its commit, for
# seconds: meanwhile the worker still obeys SIGTERM (within about a second, through the
# replay hook of decoder.c; before, it finished the replay first), and once back it serves
# the table's shape with every row.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
init_work

start_cluster_retrying 4640
cluster_psql <<'SQL'
CREATE EXTENSION shape_sync;
CREATE TABLE big (id int PRIMARY KEY, payload text);
ALTER TABLE big REPLICA IDENTITY FULL;
INSERT INTO big VALUES (0, 'first');
SQL
url="$SHAPE_SYNC_URL/v1/shape?table=big"
expect_eq "the table's shape is served" 200 "$(http_status "$url&offset=-1")"
pid=$(worker_pid)

cluster_psql -c "INSERT INTO big SELECT g, md5(g::text) FROM generate_series(1, 600000) g" >/dev/null
sleep 0.3
t0=$(now)
cluster_psql -At -c "SELECT pg_terminate_backend($pid)" >/dev/null
gone() { [[ $(cluster_psql -At -c "SELECT count(*) FROM pg_stat_activity WHERE pid = $pid") == 0 ]]; }
check "the worker exits" wait_for 30 gone
took=$(diff_s "$t0" "$(now)")
expect_match "it was stopped in the middle of the replay" 'shape_sync shutting down during the replay of a transaction' \
	"$(cat "$SHAPE_SYNC_LOG")"
check "within 1 s of SIGTERM (${took} s; the replay takes longer)" le "$took" 1
back() { local p; p=$(worker_pid); [[ -n $p && $p != "$pid" ]] && [[ $(http_status "$SHAPE_SYNC_URL/v1/health") == 200 ]]; }
check "it comes back" wait_for 30 back
body=$(python3 - "$url" <<'PY'
import json, sys, urllib.request
url = sys.argv[1]
offset, handle, n = "-1", None, 0
for _ in range(1000):
    q = f"{url}&offset={offset}" + (f"&handle={handle}" if handle else "")
    with urllib.request.urlopen(q, timeout=60) as r:
        handle, offset = r.headers["electric-handle"], r.headers["electric-offset"]
        n += sum(1 for m in json.load(r) if m.get("headers", {}).get("operation") == "insert")
        if r.headers.get("electric-up-to-date") is not None:
            break
print(n)
PY
)
expect_eq "and serves the shape with every row" 600001 "$body"
check "no crash in the log" bash -c '! grep -E "PANIC|terminated by signal|TRAP:" "$1"' _ "$SHAPE_SYNC_LOG"
finish
