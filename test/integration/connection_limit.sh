#!/usr/bin/env bash
#
# At shape_sync.max_connections a new client is refused promptly, never left in the listen
# backlog: past the limit, a few more connections are accepted only to be answered 503
# (retry-after, Connection: close) as soon as their request is in, or closed after 2 s
# without one; past those, a new connection is closed unanswered, even with its request in. The limit is logged once, not
# per connection; the connections held at the limit are served as usual, and once they are
# gone every admission slot is free and new clients are served again.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

LIMIT=16    # the smallest shape_sync.max_connections
RESERVE=16  # HTTP_OVER_LIMIT_CONNECTIONS (src/net/http_server.h)
SHAPE_SYNC_EXTRA_CONF="shape_sync.max_connections = $LIMIT
shape_sync.long_poll_timeout = '60s'" start_cluster_retrying 5180
cluster_psql <<'SQL'
CREATE EXTENSION shape_sync;
CREATE TABLE items (id int PRIMARY KEY, v text);
INSERT INTO items VALUES (1, 'one');
SQL
read -r handle offset _ < <(follow items)
live="$SHAPE_SYNC_URL/v1/shape?table=items&handle=$handle&offset=$offset&live=true"

# the limit, held by parked live requests
for ((i = 1; i <= LIMIT; i++)); do
	curl -s -m 90 -o "$work/live$i.b" -w '%{http_code}' "$live" >"$work/live$i.status" &
	helpers+=($!)
done
parked() { [[ $(adm existing in_use) == "$LIMIT" ]]; }
check "$LIMIT live requests are parked" wait_for 60 parked

# one more client: a prompt 503, not a hang
t0=$(now)
code=$(curl -s -m 30 -D "$work/over.h" -o "$work/over.b" -w '%{http_code}' "$SHAPE_SYNC_URL/v1/shape?table=items&offset=-1")
took=$(diff_s "$t0" "$(now)")
expect_eq "a client past the limit gets 503" 503 "$code"
echo "# answered in ${took} s"
# the parked requests hold for long_poll_timeout (60 s): all still parked means that the 503
# did not wait for one of them to end
check "at once: all $LIMIT live requests are still parked" parked
expect_eq "with retry-after" 1 "$(header retry-after "$work/over.h")"
expect_match "and Connection: close" '^close$' "$(header connection "$work/over.h")"
expect_match "saying which limit" 'shape_sync.max_connections.*\(16\)' "$(cat "$work/over.b")"

# more than can be answered: idle connections fill what is accepted past the limit, and the
# one after them is closed at once, unanswered: it sends a request at once, which a
# connection accepted past the limit would get a 503 for; the idle ones are closed after 2 s
# without a request (each waits 60 s at most: a deadline against a hang, not a time target)
python3 - "${SHAPE_SYNC_URL##*:}" "$RESERVE" >"$work/idle.out" <<'PY'
import socket, sys, time
port, reserve = int(sys.argv[1]), int(sys.argv[2])
t_idle = time.time()
idle = [socket.create_connection(("localhost", port)) for _ in range(reserve)]
time.sleep(0.3)
extra = socket.create_connection(("localhost", port))
extra.settimeout(60)
t0 = time.time()
got = b""
try:
    extra.sendall(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n")
    while True:
        b = extra.recv(4096)
        if not b:
            break
        got += b
    state = "closed"
except (ConnectionResetError, BrokenPipeError):
    state = "closed"
except socket.timeout:
    state = "open"
status = got.split(b"\r\n", 1)[0].decode(errors="replace").replace(" ", "_") or "none"
print("extra", state, status, round(time.time() - t0, 2))
closed = 0
for s in idle:
    s.settimeout(max(1, 60 - (time.time() - t_idle)))
    try:
        if s.recv(1) == b"":
            closed += 1
    except ConnectionResetError:
        closed += 1
    except socket.timeout:
        pass
print("idle", closed, round(time.time() - t_idle, 2))
PY
read -r _ state answer took_extra < <(grep '^extra' "$work/idle.out")
echo "# the connection past those was closed after ${took_extra} s"
expect_eq "a connection past those accepted over the limit is closed" closed "$state"
expect_eq "at once, unanswered: not kept as an over-limit connection (a 503) nor served" none "$answer"
read -r _ closed_idle took_idle < <(grep '^idle' "$work/idle.out")
echo "# the idle connections were closed ${took_idle} s after they opened"
expect_eq "idle connections over the limit are closed (after 2 s without a request)" "$RESERVE" "$closed_idle"

for ((i = 0; i < 10; i++)); do http_status "$SHAPE_SYNC_URL/v1/health" >/dev/null; done
expect_eq "the limit is logged once, not per connection" 1 \
	"$(grep -c 'shape_sync.max_connections" (16) was reached' "$SHAPE_SYNC_LOG")"

# the connections held at the limit are served as usual
cluster_psql -c "INSERT INTO items VALUES (2, 'two')" >/dev/null
answered() { for ((i = 1; i <= LIMIT; i++)); do [[ -s $work/live$i.status ]] || return 1; done; }
check "the parked requests are answered" wait_for 60 answered
ok=0
for ((i = 1; i <= LIMIT; i++)); do
	[[ $(cat "$work/live$i.status") == 200 ]] && grep -q '"two"' "$work/live$i.b" && ok=$((ok + 1))
done
expect_eq "each with the new row" "$LIMIT" "$ok"
check "every admission slot is free" wait_for 60 slots_free
expect_eq "and new clients are served again" 200 "$(http_status "$SHAPE_SYNC_URL/v1/shape?table=items&offset=-1")"
check "no crash in the log" bash -c '! grep -E "PANIC|terminated by signal|TRAP:" "$1"' _ "$SHAPE_SYNC_LOG"
finish
