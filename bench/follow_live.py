#!/usr/bin/env python3
"""bench/follow_live.py URL TABLE HANDLE OFFSET LAST: a live client of one shape, for the
benchmarks that time how long a change takes to reach it (big_transaction.sh, burst.sh).

Long-polls (live=true) from HANDLE and OFFSET on one keep-alive connection until a response
holds the row whose id is LAST, then prints the time (epoch seconds, microseconds) at which
it read that response; on any status but 200 it prints "status N" instead and stops.
"""
import http.client
import sys
import time
import urllib.parse

url, table, handle, offset, last = sys.argv[1:6]
u = urllib.parse.urlsplit(url)
conn = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
mark = f'"id":"{last}"'.encode()
while True:
    conn.request("GET", f"/v1/shape?table={table}&handle={handle}&offset={offset}&live=true")
    response = conn.getresponse()
    body = response.read()
    if response.status != 200:
        print(f"status {response.status}")
        break
    offset = response.getheader("electric-offset")
    if mark in body:
        print(f"{time.time():.6f}")
        break
