#!/usr/bin/env bash
#
# Every wait has a deadline, against the real server: a client that trickles its
# request headers is closed after shape_sync.request_header_timeout while others are
# served, and a request whose snapshot cannot finish gets 503 with retry-after after
# shape_sync.snapshot_wait_timeout, holding no admission slot afterwards; the snapshot
# goes on and a retry is served.  Each deadline fires not before its timeout (1 s) and
# within a generous slack (the timeout x 5 + 10 s), far below what an idle timeout or no
# deadline gives (the trickle runs 30 s; the lock stays).
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

SHAPE_SYNC_EXTRA_CONF="shape_sync.request_header_timeout = '1s'
shape_sync.snapshot_wait_timeout = '1s'" start_cluster_retrying 4620
cluster_psql <<'SQL'
CREATE EXTENSION shape_sync;
CREATE TABLE p (id int PRIMARY KEY, v text) PARTITION BY RANGE (id);
CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (100);
ALTER TABLE p REPLICA IDENTITY FULL;
ALTER TABLE p1 REPLICA IDENTITY FULL;
INSERT INTO p VALUES (1, 'one');
SQL
port=${SHAPE_SYNC_URL##*:}

# 1. slow headers: one byte every 200 ms, never finishing
python3 - "$port" >"$work/slow.out" <<'PY' &
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
start = time.monotonic()
closed = None
for b in b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"a" * 100:
    try:
        s.send(bytes([b]))
        s.settimeout(0.2)
        if s.recv(1) == b"":
            closed = time.monotonic() - start
            break
    except socket.timeout:
        pass
    except OSError:
        closed = time.monotonic() - start
        break
print("closed" if closed is not None else "open", round(closed or 0, 2))
PY
helpers+=($!)
slow=$!
sleep 0.5
expect_eq "another client is served meanwhile" 200 "$(http_status "$SHAPE_SYNC_URL/v1/health")"
wait "$slow" || true
read -r state after <"$work/slow.out"
expect_eq "the trickling client is closed" closed "$state"
check "after about the timeout (${after} s)" le 0.9 "$after"
check "and within timeout x 5 + 10 s, long before the trickle ends (30 s)" le "$after" 15

# 2. a snapshot that cannot finish: the request gets 503 + retry-after
session_open locker
echo "BEGIN; LOCK TABLE p1 IN ACCESS EXCLUSIVE MODE; SELECT 'locked';" >&5
wait_for 60 grep -q locked "$work/locker.out"
t0=$(now)
code=$(curl -s -m 60 -D "$work/h" -o "$work/b" -w '%{http_code}' "$SHAPE_SYNC_URL/v1/shape?table=p&offset=-1")
took=$(diff_s "$t0" "$(now)")
expect_eq "a request waiting for a blocked snapshot gets 503" 503 "$code"
check "after about snapshot_wait_timeout (${took} s)" le 0.9 "$took"
check "and within timeout x 5 + 10 s" le "$took" 15
check "with retry-after" test -n "$(header retry-after "$work/h")"
expect_match "naming the setting" 'snapshot_wait_timeout' "$(cat "$work/b")"
check "it holds no admission slot afterwards" wait_for 60 slots_free
expect_eq "the snapshot goes on" snapshotting "$(cluster_psql -At -c "SELECT state FROM shape_sync.shapes")"
echo "COMMIT;" >&5
ready() { [[ $(cluster_psql -At -c "SELECT state FROM shape_sync.shapes") == ready ]]; }
check "and finishes once the lock is gone" wait_for 60 ready
expect_eq "a retry is served" 200 "$(http_status "$SHAPE_SYNC_URL/v1/shape?table=p&offset=-1")"
check "no ERROR or crash in the log" \
	bash -c '! grep -E "ERROR|FATAL|PANIC|terminated by signal" "$1"' _ "$SHAPE_SYNC_LOG"
finish
