#!/usr/bin/env bash
#
# The worker keeps no memory for shapes that are gone.  Three rounds make
# 300 one-row shapes and delete them; after each, the worker logs its memory
# contexts (pg_log_backend_memory_contexts).  From the first round to the
# third, neither the registry's context nor the worker's grand total grows:
# each round's shapes gave back what they took.  Before the registry built
# each shape's schema and fingerprint in a temporary context, it left about
# 3 kB per shape in its own (2 MB over these rounds), and before each shape's
# strings had a context of their own, 1 MB stayed on the registry's free lists.
# A last round of 1,500 shapes, more than the registry's hash tables were
# made for, leaves them no larger than before (compact_hash.c).
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

SHAPE_SYNC_EXTRA_CONF="shape_sync.allow_shape_deletion = on
shape_sync.max_shapes = 1600
shape_sync.shape_eviction = none" start_cluster_retrying 4560
cluster_psql -c "CREATE EXTENSION shape_sync" >/dev/null
worker=$(worker_pid)

cat >"$work/shapes.py" <<'PY'
import http.client, sys, threading, urllib.parse
url, table, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
u = urllib.parse.urlsplit(url)
failed = []
def run(part):
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    for k in part:
        conn.request("GET", "/v1/shape?" + urllib.parse.urlencode({"table": table, "offset": "-1", "where": f"id = {k}"}))
        r = conn.getresponse(); r.read()
        handle = r.getheader("electric-handle")
        if r.status != 200 or not handle:
            failed.append(f"make {k}: {r.status}"); continue
        conn.request("DELETE", "/v1/shape?" + urllib.parse.urlencode({"handle": handle}))
        r = conn.getresponse(); r.read()
        if r.status not in (200, 202):
            failed.append(f"delete {k}: {r.status}")
threads = [threading.Thread(target=run, args=(list(range(i + 1, n + 1, 4)),)) for i in range(4)]
for t in threads: t.start()
for t in threads: t.join()
sys.exit("; ".join(failed[:5]) if failed else 0)
PY


declare -a registry total
for round in 1 2 3; do
	cluster_psql -c "CREATE TABLE returned_$round (id int PRIMARY KEY, v text)" \
		-c "INSERT INTO returned_$round SELECT g, 'v' || g FROM generate_series(1, 300) g" >/dev/null
	check "round $round: 300 shapes made and deleted" python3 "$work/shapes.py" "$SHAPE_SYNC_URL" "returned_$round" 300
	gone() { [[ $(cluster_psql -At -c "SELECT count(*) FROM shape_sync.shapes") == 0 ]]; }
	check "round $round: no shape is left" wait_for 60 gone
	cluster_psql -c "SELECT pg_log_backend_memory_contexts($worker)" >/dev/null
	check "round $round: the worker logged its memory contexts" wait_for 60 dumped "$round"
	registry[round]=$(context_bytes "shape_sync registry")
	total[round]=$(context_bytes "Grand total")
	echo "# round $round: registry ${registry[round]} bytes, worker ${total[round]} bytes"
done
check "the registry's context did not grow from the first round to the third" \
	test $((registry[3] - registry[1])) -lt 65536
check "the worker's memory contexts did not grow from the first round to the third" \
	test $((total[3] - total[1])) -lt 131072

# A round past the hash tables' first size (1,024 shapes): dynahash never shrinks, so before
# compact_hash.c the handle and identity tables kept their room for 1,500 shapes once they were
# gone (256 kB and 128 kB, eight times what they had after the rounds of 300); now each is made
# anew when it holds less than an eighth of its peak, and keeps room for those 187 at most.
# (The tables cannot be measured while the shapes are held: the log of memory contexts names
# only the first 100 children of the registry's, and those are the shapes' own.)
handles_before=$(context_bytes "shape_sync shape handles")
identities_before=$(context_bytes "shape_sync shape identities")
cluster_psql -c "CREATE TABLE returned_big (id int PRIMARY KEY, v text)" \
	-c "INSERT INTO returned_big SELECT g, 'v' || g FROM generate_series(1, 1500) g" >/dev/null
cat >"$work/held.py" <<'PY'
import http.client, sys, threading, urllib.parse
url, table, n, mode, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
u = urllib.parse.urlsplit(url)
handles = dict(enumerate(open(path).read().split(), 1)) if mode == "delete" else {}
failed = []
def run(part):
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    for k in part:
        if mode == "delete":
            conn.request("DELETE", "/v1/shape?" + urllib.parse.urlencode({"handle": handles[k]}))
        else:
            conn.request("GET", "/v1/shape?" + urllib.parse.urlencode({"table": table, "offset": "-1", "where": f"id = {k}"}))
        r = conn.getresponse(); r.read()
        if r.status not in (200, 202):
            failed.append(f"{k}: {r.status}")
        elif mode == "make":
            handles[k] = r.getheader("electric-handle")
threads = [threading.Thread(target=run, args=(list(range(i + 1, n + 1, 4)),)) for i in range(4)]
for t in threads: t.start()
for t in threads: t.join()
if mode == "make":
    open(path, "w").write("\n".join(handles[k] for k in range(1, n + 1) if k in handles))
sys.exit("; ".join(failed[:5]) if failed else 0)
PY
check "1,500 shapes made and held at once" python3 "$work/held.py" "$SHAPE_SYNC_URL" returned_big 1500 make "$work/handles"
check "the 1,500 shapes deleted" python3 "$work/held.py" "$SHAPE_SYNC_URL" returned_big 1500 delete "$work/handles"
check "no shape is left after 1,500" wait_for 60 gone
cluster_psql -c "SELECT pg_log_backend_memory_contexts($worker)" >/dev/null
check "the worker logged its memory contexts after 1,500 shapes" wait_for 60 dumped 4
handles_after=$(context_bytes "shape_sync shape handles")
identities_after=$(context_bytes "shape_sync shape identities")
echo "# handle table: $handles_before bytes before, $handles_after after; identity table: $identities_before, $identities_after"
check "the handle table gave back its room for 1,500 shapes" \
	test "$handles_after" -le $((handles_before * 2))
check "the identity table gave back its room for 1,500 shapes" \
	test "$identities_after" -le $((identities_before * 2))
finish
