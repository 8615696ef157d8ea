#!/usr/bin/env bash
#
# A keep-alive connection's requests for the shape it resolved before are served on its HTTP
# thread (src/net/resolved_shapes.c), but never past a change of what that resolution depends
# on. Here shape_sync.role is changed (by reload) to a role that may not read the table,
# while another session holds the table locked, so that the shape's own recheck cannot run
# and the shape is not rotated yet: the client's next requests go to the main thread again,
# which cannot look at the locked table (503, retry) and, once the lock is gone, refuses the
# new role (403), as it would have without the reuse. Before the catalog epoch, the reused
# resolution went on serving the log, read as the old role, for as long as the lock was held.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work
cleanup() {
	exec 7>&- 2>/dev/null || true
	cleanup_work
}
trap cleanup EXIT

start_cluster_retrying 4580
cluster_psql <<'SQL'
CREATE EXTENSION shape_sync;
CREATE TABLE t (id int PRIMARY KEY, v text);
ALTER TABLE t REPLICA IDENTITY FULL;
INSERT INTO t VALUES (1, 'one');
CREATE ROLE reader NOLOGIN;
GRANT SELECT ON t TO reader;
CREATE ROLE nobody NOLOGIN;
ALTER SYSTEM SET shape_sync.role = 'reader';
SELECT pg_reload_conf();
SQL
port=${SHAPE_SYNC_URL##*:}
as_reader() { [[ $(http_status "$SHAPE_SYNC_URL/v1/shape?table=t&offset=-1") == 200 ]]; }
check "the shape is served as reader" wait_for 60 as_reader

# the client: one keep-alive connection, a catch-up request every 50 ms, each logged with
# its time and status; it stops when $work/stop appears
python3 - "$port" "$work/stop" >"$work/client.out" <<'PY' &
import http.client, os, sys, time
conn = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=30)
conn.request("GET", "/v1/shape?table=t&offset=-1")
r = conn.getresponse()
r.read()
path = f"/v1/shape?table=t&handle={r.getheader('electric-handle')}&offset={r.getheader('electric-offset')}"
print("ready", flush=True)
while not os.path.exists(sys.argv[2]):
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        r.read()
        print(f"{time.time():.3f} {r.status}", flush=True)
    except (http.client.HTTPException, OSError):
        conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=30)
        print(f"{time.time():.3f} reconnect", flush=True)
    time.sleep(0.05)
PY
helpers+=($!)
client_ready() { grep -qs '^ready' "$work/client.out"; }
check "the client follows the shape" wait_for 60 client_ready
sleep 1

# another session locks the table and keeps it locked
mkfifo "$work/lock.fifo"
cluster_psql <"$work/lock.fifo" >"$work/lock.out" 2>&1 &
helpers+=($!)
exec 7>"$work/lock.fifo"
echo "BEGIN; LOCK TABLE t IN ACCESS EXCLUSIVE MODE; SELECT 'locked';" >&7
locked() { grep -q locked "$work/lock.out"; }
check "another session holds the table locked" wait_for 60 locked

# the role changes to one that may not read it
cluster_psql -c "ALTER SYSTEM SET shape_sync.role = 'nobody'" -c "SELECT pg_reload_conf()" >/dev/null
changed=$(date +%s.%N)
sleep 8
echo "COMMIT;" >&7
exec 7>&-
unlocked=$(date +%s.%N)
sleep 2
touch "$work/stop"
sleep 0.5

# what the client got: 200 before the change; after it, no 200 once the worker has
# taken the reload in (a moment; 5 s allowed, for a busy machine), 403 once the lock is gone
before=$(awk -v c="$changed" '$1 < c && $2 == 200' "$work/client.out" | wc -l)
served_after=$(awk -v c="$changed" '$1 > c + 5 && $2 == 200' "$work/client.out" | wc -l)
refused_after=$(awk -v u="$unlocked" '$1 > u + 1 && $2 == 403' "$work/client.out" | wc -l)
check "the client was served before the change ($before requests)" test "$before" -gt 5
expect_eq "no request was served from the kept resolution after the role changed" 0 "$served_after"
check "once the lock is gone, the new role is refused (403: $refused_after)" test "$refused_after" -gt 0
echo "# after the change: $(awk -v c="$changed" '$1 > c { print $2 }' "$work/client.out" | sort | uniq -c | tr -s ' \n' ' ')"
check "no crash in the log" bash -c '! grep -E "PANIC|terminated by signal|TRAP:" "$1"' _ "$SHAPE_SYNC_LOG"
finish
