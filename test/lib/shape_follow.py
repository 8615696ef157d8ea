#!/usr/bin/env python3
"""test/lib/shape_follow.py: follows one shape as a strict raw client.

    shape_follow.py --url URL --table T [--where W] [--columns C] --until-id N --ready-file F [--timeout S]

Reads the shape from offset=-1 until up-to-date, writes the rows it has then
to READY-FILE (one JSON object: {"rows": {id: row}}), then follows it live
(long-poll) until a change of the row whose "id" is N arrives.  It applies
every message strictly: an insert of a key it has, or an update or delete of
a key it does not have, is a violation.  A 409 ends the run (the caller's
test decides whether one was allowed).  Prints one JSON object:

    {"rows": {...}, "operations": [[op, id], ...], "violations": [...],
     "status": "done" | "409" | "timeout"}
"""

import argparse
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request


def fetch(url, timeout):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as res:
            return res.status, dict(res.headers), json.loads(res.read() or b"[]")
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--where")
    ap.add_argument("--columns")
    ap.add_argument("--until-id", required=True)
    ap.add_argument("--ready-file", required=True)
    ap.add_argument("--timeout", type=float, default=30)
    args = ap.parse_args()

    base = f"{args.url}/v1/shape?table={urllib.parse.quote(args.table)}"
    if args.where:
        base += f"&where={urllib.parse.quote(args.where)}"
    if args.columns:
        base += f"&columns={urllib.parse.quote(args.columns)}"
    rows, operations, violations = {}, [], []
    offset, handle, live, ready = "-1", None, False, False
    deadline = time.monotonic() + args.timeout
    status = "timeout"
    while time.monotonic() < deadline:
        url = f"{base}&offset={offset}" + (f"&handle={handle}" if handle else "")
        code, headers, body = fetch(url + ("&live=true" if live else ""), 25)
        headers = {k.lower(): v for k, v in headers.items()}
        if code == 409:
            status = "409"
            break
        if code != 200:
            violations.append(f"status {code} for {url}")
            time.sleep(0.2)
            continue
        handle = headers.get("electric-handle", handle)
        offset = headers.get("electric-offset", offset)
        done = False
        for msg in body:
            op = msg.get("headers", {}).get("operation")
            if op is None:
                continue
            key, value = msg["key"], msg.get("value", {})
            row_id = value.get("id") or (rows.get(key) or {}).get("id")
            if ready:
                operations.append([op, row_id])
            if op == "insert":
                if key in rows:
                    violations.append(f"insert of a key already there: {key}")
                rows[key] = value
            elif op == "update":
                if key not in rows:
                    violations.append(f"update of an absent key: {key}")
                rows.setdefault(key, {}).update(value)
            elif op == "delete":
                if key not in rows:
                    violations.append(f"delete of an absent key: {key}")
                rows.pop(key, None)
            if ready and row_id == args.until_id:
                done = True
        if "electric-up-to-date" in headers:
            if not ready:
                ready = True
                with open(args.ready_file, "w") as f:
                    json.dump({"rows": rows}, f)
            live = True
        if done:
            status = "done"
            break
    json.dump({"rows": rows, "operations": operations, "violations": violations,
               "status": status}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
