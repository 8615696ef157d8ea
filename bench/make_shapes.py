#!/usr/bin/env python3
"""bench/make_shapes.py URL TABLE: makes the shapes of TABLE on the server at URL, 8 requests at
a time, one where clause per line of stdin (an empty line: no where clause), each a GET of its
first snapshot answer, retried on 503; exits non-zero naming the first failures.  A line may
end with a tab and the value of params[1] (bench/subquery.sh)."""
import http.client, sys, threading, urllib.parse
url, table = sys.argv[1], sys.argv[2]
wheres = [line.rstrip("\n") for line in sys.stdin]
u = urllib.parse.urlsplit(url)
failed = []
def worker(part):
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    for w in part:
        w, _, params = w.partition("\t")
        q = {"table": table, "offset": "-1"}
        if w:
            q["where"] = w
        if params:
            q["params[1]"] = params
        while True:
            conn.request("GET", "/v1/shape?" + urllib.parse.urlencode(q))
            r = conn.getresponse()
            body = r.read()
            if r.status == 503:
                import time
                time.sleep(float(r.getheader("retry-after") or 1))
                continue
            if r.status != 200:
                failed.append(f"{w}: {r.status} {body[:200]!r}")
            break
threads = [threading.Thread(target=worker, args=(wheres[i::8],)) for i in range(8)]
for t in threads: t.start()
for t in threads: t.join()
if failed:
    sys.exit("\n".join(failed[:5]))
