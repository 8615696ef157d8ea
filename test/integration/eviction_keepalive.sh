#!/usr/bin/env bash
#
# A shape read on a keep-alive connection is served without the main thread once the
# connection has resolved it (src/net/resolved_shapes.c), and eviction still counts those
# reads: with max_shapes = 4, a client that keeps reading shape A on one connection keeps
# it, and new shapes evict the shapes nobody reads, least recently read first. (Before
# eviction looked at those reads, A kept the place on the list its first request gave it,
# and was the first to go.) The reads also show as shape_sync.shapes.last_read_at.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

SHAPE_SYNC_EXTRA_CONF="shape_sync.max_shapes = 4
shape_sync.max_new_shapes_per_client = 0" start_cluster_retrying 4560
cluster_psql <<'SQL'
CREATE EXTENSION shape_sync;
CREATE TABLE t (id int PRIMARY KEY, v text);
ALTER TABLE t REPLICA IDENTITY FULL;
INSERT INTO t SELECT g, chr(96 + g) FROM generate_series(1, 8) g;
SQL
port=${SHAPE_SYNC_URL##*:}
base="$SHAPE_SYNC_URL/v1/shape?table=t"
# new WHERE: makes the shape of `where WHERE`, read to its end; prints its handle
new() {
	local h
	h=$(curl -sf -D - -o /dev/null "$base&offset=-1&where=$(uri "$1")" | tr -d '\r' |
		sed -n 's/^electric-handle: //Ip')
	echo "$h"
}
present() { cluster_psql -At -c "SELECT count(*) FROM shape_sync.shapes WHERE handle = '$1'"; }

# A, read every 200 ms on one keep-alive connection for 6 s
python3 - "$port" "$(uri "v = 'a'")" >"$work/reader.out" <<'PY' &
import http.client, sys, time
conn = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
path = f"/v1/shape?table=t&where={sys.argv[2]}"
conn.request("GET", path + "&offset=-1")
r = conn.getresponse()
r.read()
handle, offset = r.getheader("electric-handle"), r.getheader("electric-offset")
print("handle", handle, flush=True)
statuses = {}
end = time.time() + 6
while time.time() < end:
    conn.request("GET", f"{path}&handle={handle}&offset={offset}")
    r = conn.getresponse()
    r.read()
    statuses[r.status] = statuses.get(r.status, 0) + 1
    time.sleep(0.2)
print("statuses", " ".join(f"{k}:{v}" for k, v in sorted(statuses.items())), flush=True)
PY
reader=$!
helpers+=("$reader")
has_handle() { grep -qs '^handle ' "$work/reader.out"; }
check "the reader has shape A" wait_for 60 has_handle
a=$(awk '/^handle/ { print $2 }' "$work/reader.out")
b=$(new "v = 'b'")
c=$(new "v = 'c'")
d=$(new "v = 'd'")
expect_eq "the server holds its 4 shapes" 4 "$(cluster_psql -At -c 'SELECT count(*) FROM shape_sync.shapes')"
sleep 2 # A's reads since are noted in its slot (once a second at most)
a_read=$(cluster_psql -At -c "SELECT last_read_at > now() - interval '1.5 s' FROM shape_sync.shapes WHERE handle = '$a'")
expect_eq "A's last_read_at moves with the reads on its connection" t "$a_read"
e=$(new "v = 'e'")
f=$(new "v = 'f'")
check "two new shapes are made" test -n "$e" -a -n "$f"
expect_eq "A, read all along, is kept" 1 "$(present "$a")"
expect_eq "B, the least recently read, went" 0 "$(present "$b")"
expect_eq "C went next" 0 "$(present "$c")"
expect_eq "D stays" 1 "$(present "$d")"
wait "$reader" || true
expect_eq "A's reader was served all along (no 409)" "statuses 200" \
	"$(grep '^statuses' "$work/reader.out" | sed 's/:[0-9]*//')"
check "no WARNING, ERROR or crash in the log" \
	bash -c '! grep -E "WARNING|ERROR|FATAL|PANIC|terminated by signal" "$1"' _ "$SHAPE_SYNC_LOG"
finish
