"""Makes or deletes one-row shapes (`id = k`, k = FIRST..LAST) of a table, 8 requests at a time.

    python3 bench/shapes.py URL TABLE FIRST LAST make HANDLES    # writes their handles, in order
    python3 bench/shapes.py URL TABLE FIRST LAST delete HANDLES  # deletes the handles make wrote

Exits non-zero with the first failures (a status other than 200 or 202).
"""
import http.client
import sys
import threading
import urllib.parse

url, table, first, last, mode, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
u = urllib.parse.urlsplit(url)
keys = list(range(first, last + 1))
handles = open(path).read().split() if mode == "delete" else []
made = [None] * len(keys)
failed = []


def worker(part):
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    for i in part:
        if mode == "make":
            q = {"table": table, "offset": "-1", "where": f"id = {keys[i]}"}
            conn.request("GET", "/v1/shape?" + urllib.parse.urlencode(q))
        else:
            conn.request("DELETE", "/v1/shape?" + urllib.parse.urlencode({"handle": handles[i]}))
        r = conn.getresponse()
        r.read()
        if r.status not in (200, 202):
            failed.append(f"{keys[i]}: {r.status}")
        elif mode == "make":
            made[i] = r.getheader("electric-handle")


threads = [threading.Thread(target=worker, args=(list(range(i, len(keys), 8)),)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
if failed:
    sys.exit("; ".join(failed[:5]))
if mode == "make":
    open(path, "w").write("\n".join(made))
