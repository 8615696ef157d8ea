#!/usr/bin/env python3
"""test/lib/shape_client.py: a shape client whose state outlives it, and a reader of the
store's manifest, for the durable-log scripts (durable_restart.sh, durable_purge.sh,
durable_crash.sh).

    shape_client.py sync STATE [--url URL --query Q [--log off]] [--until FIELD=VALUE]
                        [--timeout S]
        Goes on from the (handle, offset) kept in STATE (a JSON file; without one, from
        offset=-1 with URL and Q, say "table=t&where=id%20%3C%3D%20100"; with --log off, the
        changes are applied but not kept for `count`, so that a long-lived client's state
        stays small), request after request, until up-to-date; with --until, then live
        (live=true) until a change whose value has FIELD=VALUE arrives.  Every change is
        applied by its "key" (insert, update merged into the row, delete); an insert of a key
        it has, or an update or delete of one it lacks, is a violation.  A 4xx (409
        must-refetch, 403...) ends the run and leaves the state as it was (handle and offset
        kept); a 5xx, a refused connection or a response cut short (the server went away in
        its middle) is tried again.  Keeps in STATE as "last" a JSON object {"status":
        "up-to-date" | "found" | "timeout" | the 4xx status, "statuses": [...], "handles":
        [...], "changes": N, "violations": [...]} and prints it as one line: the status, the
        HTTP statuses seen (sorted, without repeats, comma-separated; a failed request as
        "error:" and the exception's name), the electric-handle values seen (in order; "-"
        when none) and the number of violations, say "up-to-date 200 1234-5678 0".
    shape_client.py get STATE EXPR       prints EXPR (Python, over the state `d`)
    shape_client.py count STATE FIELD VALUE
        the changes (of every run) whose value has FIELD=VALUE
    shape_client.py rows STATE COLUMN...
        the rows, sorted by their first column as a number, one a line, the columns'
        values joined by "|" (NULL as nothing), as `psql -At` prints them
    shape_client.py manifest FILE|- [EXPR ARG...]
        the manifest as JSON (magic, version, payload, header, shapes, deltas, torn_bytes:
        the deltas appended to it applied), or EXPR (Python, over the manifest `m` and the
        ARGs `a`); exits 1 when the file is empty or absent
    shape_client.py fnv FILE|-           whether the manifest's first frame (the whole
                                         manifest) ends in the FNV-1a 64 of its bytes
                                         from 8 on: "ok" or "bad"
"""

import http.client
import json
import os
import struct
import sys
import time
import urllib.error
import urllib.request


def load(path):
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return None


def save(path, d):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(d, f)
    os.replace(tmp, path)


def fetch(url, timeout):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as res:
            headers = {k.lower(): v for k, v in res.headers.items()}
            return res.status, headers, json.loads(res.read() or b"[]")
    except urllib.error.HTTPError as err:
        headers = {k.lower(): v for k, v in err.headers.items()}
        return err.code, headers, None


def sync(args):
    path = args[0]
    opts = dict(zip(args[1::2], args[2::2]))
    d = load(path)
    if d is None:
        d = {"url": opts["--url"], "query": opts["--query"], "handle": None, "offset": "-1",
             "rows": {}, "log": [], "keep_log": opts.get("--log", "on") != "off"}
    until = opts.get("--until")
    field, value = until.split("=", 1) if until else (None, None)
    deadline = time.monotonic() + float(opts.get("--timeout", "60"))
    last = {"status": "timeout", "statuses": [], "handles": [], "changes": 0, "violations": []}
    up_to_date = found = False
    while time.monotonic() < deadline:
        live = up_to_date and until is not None
        url = f"{d['url']}/v1/shape?{d['query']}&offset={d['offset']}"
        if d["handle"]:
            url += f"&handle={d['handle']}"
        if live:
            url += "&live=true"
        try:
            code, headers, body = fetch(url, 30)
        except (OSError, http.client.HTTPException, ValueError) as err:
            # the server is not there (yet), or went away in the middle of a response (a body
            # cut short, JSON that does not parse): nothing of it was applied, so the same
            # request is made again
            last["statuses"].append(f"error:{type(err).__name__}")
            time.sleep(0.2)
            continue
        last["statuses"].append(code)
        if "electric-handle" in headers and headers["electric-handle"] not in last["handles"]:
            last["handles"].append(headers["electric-handle"])
        if 400 <= code < 500:  # 409 (must refetch), 403, 400...: the end of this client
            last["status"] = str(code)
            break
        if code != 200:
            time.sleep(0.2)
            continue
        d["handle"] = headers.get("electric-handle", d["handle"])
        d["offset"] = headers.get("electric-offset", d["offset"])
        for msg in body:
            op = msg.get("headers", {}).get("operation")
            if op is None:
                continue
            key, val = msg["key"], msg.get("value", {})
            if d.get("keep_log", True):
                d["log"].append([op, key, val])
            last["changes"] += 1
            rows = d["rows"]
            if op == "insert":
                if key in rows:
                    last["violations"].append(f"insert of a key it has: {key}")
                rows[key] = dict(val)
            elif op == "update":
                if key not in rows:
                    last["violations"].append(f"update of a key it lacks: {key}")
                rows.setdefault(key, {}).update(val)
            elif op == "delete":
                if key not in rows:
                    last["violations"].append(f"delete of a key it lacks: {key}")
                rows.pop(key, None)
            if field is not None and val.get(field) == value:
                found = True
        if "electric-up-to-date" in headers:
            up_to_date = True
            if until is None:
                last["status"] = "up-to-date"
                break
            if found:
                last["status"] = "found"
                break
    d["last"] = last
    save(path, d)
    print(last["status"], ",".join(sorted(set(map(str, last["statuses"])))),
          ",".join(last["handles"]) or "-", len(last["violations"]))


def read_bytes(name):
    if name == "-":
        return sys.stdin.buffer.read()
    with open(name, "rb") as f:
        return f.read()


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def str(self):
        n = self.take("I")
        if n == 0xFFFFFFFF:
            return None
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s


def frame_end(data, pos, magic):
    """The end of the whole, unchanged frame with that magic at pos, or None."""
    if len(data) - pos < 24 or data[pos:pos + 8] != magic:
        return None
    end = pos + 24 + struct.unpack_from("<I", data, pos + 12)[0]
    if end > len(data) or struct.unpack_from("<Q", data, end - 8)[0] != fnv_of(data[pos + 8:end - 8]):
        return None
    return end


def manifest(name, expr=None, *args):
    """The manifest with the deltas appended to it applied (log_manifest.c has the format)."""
    data = read_bytes(name)
    if len(data) < 24:  # no manifest (yet)
        sys.exit(1)
    r = Reader(data)
    r.pos = 8
    out = {"magic": data[:8].decode(errors="replace"), "version": r.take("I"),
           "payload": r.take("I")}

    def header():
        return {"system_id": r.take("Q"), "timeline": r.take("I"),
                "database_oid": r.take("I"), "slot": r.str(), "fsync_policy": r.take("I"),
                "boot_id": r.str(), "durable_lsn": r.take("Q"),
                "sets_generation": r.take("I"), "sets_length": r.take("Q")}

    def extent(old_chunks):
        s = {"handle": r.str(), "generation": r.take("I"), "length": r.take("Q"),
             "last": [r.take("Q"), r.take("Q")], "chunks": list(old_chunks)}
        for _ in range(r.take("I") - len(old_chunks)):
            s["chunks"].append([r.take("Q"), r.take("Q"), r.take("Q"), r.take("Q")])
        return s

    out["header"] = header()
    shapes = {}
    for _ in range(r.take("I")):
        s = extent([])
        shapes[s["handle"]] = s
    pos, out["deltas"], out["torn_bytes"] = 24 + out["payload"], 0, 0
    while pos < len(data):
        end = frame_end(data, pos, b"SSYNCDLT")
        if end is None:
            out["torn_bytes"] = len(data) - pos
            break
        r.pos = pos + 16
        out["header"] = header()
        for _ in range(r.take("I")):
            del shapes[r.str()]
        for _ in range(r.take("I")):
            first = r.take("I")
            save = r.pos
            handle = r.str()
            r.pos = save
            s = extent(shapes[handle]["chunks"][:first] if first else [])
            shapes[s["handle"]] = s
        out["deltas"] += 1
        pos = end
    out["shapes"] = list(shapes.values())
    if expr is not None:
        print(eval(expr, {"m": out, "a": list(args)}))  # noqa: S307 (the test's own)
        return
    json.dump(out, sys.stdout)
    print()


def fnv_of(data):
    h = 14695981039346656037
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def fnv(name):
    """Whether the manifest's first frame (the whole manifest) ends in its checksum."""
    data = read_bytes(name)
    end = min(len(data), 24 + struct.unpack_from("<I", data, 12)[0])
    print("ok" if struct.unpack_from("<Q", data, end - 8)[0] == fnv_of(data[8:end - 8]) else "bad")


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "sync":
        sync(args)
    elif cmd == "get":
        d = load(args[0])
        print(eval(args[1], {"d": d}))  # noqa: S307 (the test's own expressions)
    elif cmd == "count":
        d = load(args[0])
        print(sum(1 for _, _, val in d["log"] if val.get(args[1]) == args[2]))
    elif cmd == "rows":
        d = load(args[0])
        cols = args[1:]
        rows = sorted(d["rows"].values(), key=lambda v: int(v[cols[0]]))
        for v in rows:
            print("|".join("" if v.get(c) is None else str(v[c]) for c in cols))
    elif cmd == "manifest":
        manifest(*args)
    elif cmd == "fnv":
        fnv(args[0])
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
