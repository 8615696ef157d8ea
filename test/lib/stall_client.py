#!/usr/bin/env python3
"""
test/lib/stall_client.py: raw-socket HTTP clients for the stalled-client
and admission tests (stalled_*.sh, admission_*.sh).  Standard library only.

Subcommands (each prints JSON, one object per line, and exits within its bounds):

  hold     N connections that send a GET and never read (tiny SO_RCVBUF).  Prints
           {"event":"connected","ports":[..]} once the requests are sent,
           {"event":"receiving",...} once every connection has received bytes,
           {"event":"stalled",...} once no connection has received anything for
           --quiet seconds, then waits for --stop-file (or --max-seconds), drains
           what it can in --drain-seconds and prints {"event":"done","conns":[..]}:
           per connection the status, bytes, whether the server closed (eof) and
           whether the chunked body was complete (--save-body PATH: each complete body to
           PATH.<index>).
  slow     One GET read at a steady rate (--read bytes, then --sleep seconds);
           parses the whole chunked body as JSON and reports what it holds.
  trickle  One GET read a few bytes at a time (--read bytes every --interval);
           reports the TCP-level bytes received (TCP_INFO) after every read, so
           the caller can check that data moved in every timeout window.
  json     FILE EVENT EXPR: evaluates the Python expression EXPR on `d`, the last
           line of FILE whose "event" is EVENT ("" for the last line); prints it.
  aborts   --total requests with --concurrency workers, each aborted at a random
           point (mid-snapshot, mid-long-poll, mid-SSE, before the request is
           complete), some with an RST (SO_LINGER 0).

Every request is HTTP/1.1 without "Connection: close", so the server answers with
chunked transfer encoding and a truncated body is told apart from a complete one.
"""
import argparse
import json
import os
import random
import socket
import struct
import sys
import threading
import time
import urllib.parse

TCP_INFO_LEN = 232
TCPI_BYTES_RECEIVED = 128  # offset of tcpi_bytes_received in struct tcp_info


def emit(obj):
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()


def split_url(url):
    u = urllib.parse.urlsplit(url)
    return u.hostname or "localhost", u.port or 80


def open_conn(host, port, rcvbuf=0, timeout=5.0):
    """A connected TCP socket; SO_RCVBUF is set before connect so the window is small from the start."""
    last = None
    for family, kind, proto, _, addr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        s = socket.socket(family, kind, proto)
        try:
            if rcvbuf:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            s.settimeout(timeout)
            s.connect(addr)
            return s
        except OSError as e:
            last = e
            s.close()
    raise last or OSError("cannot connect to %s:%d" % (host, port))


def request_bytes(host, port, path):
    return ("GET %s HTTP/1.1\r\nHost: %s:%d\r\nUser-Agent: stall_client\r\nAccept: */*\r\n\r\n"
            % (path, host, port)).encode()


def bytes_received(s):
    """The TCP-level bytes this socket has received (acknowledged), read or not."""
    try:
        info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_LEN)
        return struct.unpack_from("Q", info, TCPI_BYTES_RECEIVED)[0]
    except OSError:
        return -1


def rst_close(s):
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


class Response:
    """Incremental HTTP/1.1 response parser (status, headers, chunked or sized body)."""

    def __init__(self, keep_body=False):
        self.buf = b""
        self.status = None
        self.headers = {}
        self.head_done = False
        self.chunked = False
        self.length = None
        self.body_bytes = 0
        self.complete = False
        self.keep_body = keep_body
        self.body = []
        self.chunk_left = 0
        self.state = "size"  # chunked: size, data, data_crlf, trailer
        self.error = None

    def feed(self, data):
        if self.complete or self.error:
            return
        self.buf += data
        if not self.head_done:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1").split("\r\n")
            self.buf = self.buf[end + 4:]
            try:
                self.status = int(head[0].split(" ")[1])
            except (IndexError, ValueError):
                self.error = "bad status line %r" % head[0]
                return
            for line in head[1:]:
                k, _, v = line.partition(":")
                self.headers[k.strip().lower()] = v.strip()
            self.head_done = True
            self.chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
            if "content-length" in self.headers:
                self.length = int(self.headers["content-length"])
            if not self.chunked and self.length == 0:
                self.complete = True
        if self.chunked:
            self._chunked()
        elif self.length is not None:
            self._take(self.buf)
            self.buf = b""
            if self.body_bytes >= self.length:
                self.complete = True
        else:
            self._take(self.buf)
            self.buf = b""

    def _take(self, data):
        self.body_bytes += len(data)
        if self.keep_body and data:
            self.body.append(data)

    def _chunked(self):
        while True:
            if self.state == "size":
                nl = self.buf.find(b"\r\n")
                if nl < 0:
                    return
                try:
                    self.chunk_left = int(self.buf[:nl].split(b";")[0], 16)
                except ValueError:
                    self.error = "bad chunk size %r" % self.buf[:nl][:40]
                    return
                self.buf = self.buf[nl + 2:]
                self.state = "data" if self.chunk_left > 0 else "trailer"
            elif self.state == "data":
                if not self.buf:
                    return
                take = self.buf[:self.chunk_left]
                self._take(take)
                self.buf = self.buf[len(take):]
                self.chunk_left -= len(take)
                if self.chunk_left == 0:
                    self.state = "data_crlf"
            elif self.state == "data_crlf":
                if len(self.buf) < 2:
                    return
                if self.buf[:2] != b"\r\n":
                    self.error = "missing CRLF after a chunk"
                    return
                self.buf = self.buf[2:]
                self.state = "size"
            else:  # trailer: lines until an empty one
                nl = self.buf.find(b"\r\n")
                if nl < 0:
                    return
                line = self.buf[:nl]
                self.buf = self.buf[nl + 2:]
                if line == b"":
                    self.complete = True
                    return

    def text(self):
        return b"".join(self.body).decode("utf-8")


# ---------------------------------------------------------------- hold


def cmd_hold(a):
    host, port = split_url(a.url)
    paths = a.path
    conns = []
    for i in range(a.count):
        s = open_conn(host, port, rcvbuf=a.rcvbuf)
        s.sendall(request_bytes(host, port, paths[i % len(paths)]))
        conns.append(s)
    ports = [s.getsockname()[1] for s in conns]
    emit({"event": "connected", "ports": ports, "t": time.time()})

    start = time.time()
    first = [None] * len(conns)
    last_change = time.time()
    last = [0] * len(conns)
    said_receiving = said_stalled = False
    while time.time() - start < a.max_seconds:
        now = time.time()
        for i, s in enumerate(conns):
            got = bytes_received(s)
            if got > 0 and first[i] is None:
                first[i] = now
            if got != last[i]:
                last[i] = got
                last_change = now
        if not said_receiving and all(f is not None for f in first):
            said_receiving = True
            emit({"event": "receiving", "t": max(first), "first": first, "received": last})
        if said_receiving and not said_stalled and now - last_change >= a.quiet:
            said_stalled = True
            emit({"event": "stalled", "t": now, "since": last_change, "received": last})
        if a.stop_file and os.path.exists(a.stop_file):
            break
        time.sleep(0.05)

    # drain: what the server sent, and whether it ended the body or the connection
    out = []
    deadline = time.time() + a.drain_seconds
    for i, s in enumerate(conns):
        r = Response(keep_body=bool(a.save_body))
        eof = False
        err = None
        s.setblocking(True)
        while time.time() < deadline and not r.complete and not r.error:
            s.settimeout(max(0.01, min(0.5, deadline - time.time())))
            try:
                data = s.recv(1 << 20)
            except socket.timeout:
                continue
            except OSError as e:
                err = str(e)
                break
            if not data:
                eof = True
                break
            r.feed(data)
        if a.save_body and r.complete:
            with open("%s.%d" % (a.save_body, i), "wb") as f:
                f.write(b"".join(r.body))
        out.append({"port": ports[i], "status": r.status, "received": last[i],
                    "body_bytes": r.body_bytes, "complete": r.complete, "eof": eof,
                    "error": err or r.error, "first_byte": first[i]})
        if a.rst_every and i % a.rst_every == 0:
            rst_close(s)
        else:
            s.close()
    emit({"event": "done", "conns": out})


# ---------------------------------------------------------------- slow


def cmd_slow(a):
    host, port = split_url(a.url)
    s = open_conn(host, port, rcvbuf=a.rcvbuf)
    s.sendall(request_bytes(host, port, a.path[0]))
    r = Response(keep_body=True)
    start = time.time()
    eof = False
    err = None
    reads = 0
    total_read = 0
    ahead = 0  # the most the kernel had received beyond what was read
    while not r.complete and not r.error:
        if time.time() - start > a.max_seconds:
            err = "gave up after %.0f s" % a.max_seconds
            break
        s.settimeout(10)
        try:
            data = s.recv(a.read)
        except OSError as e:
            err = str(e)
            break
        if not data:
            eof = True
            break
        reads += 1
        total_read += len(data)
        ahead = max(ahead, bytes_received(s) - total_read)
        r.feed(data)
        if r.head_done and not r.complete:
            time.sleep(a.sleep)
    elapsed = time.time() - start
    res = {"status": r.status, "body_bytes": r.body_bytes, "complete": r.complete, "eof": eof,
           "error": err or r.error, "seconds": round(elapsed, 2), "reads": reads, "max_buffered_ahead": ahead,
           "rate_kb_s": round(r.body_bytes / 1024 / elapsed, 1) if elapsed > 0 else None,
           "handle": r.headers.get("electric-handle"), "offset": r.headers.get("electric-offset")}
    if r.complete:
        try:
            msgs = json.loads(r.text())
            ids = [int(m["value"]["id"]) for m in msgs if m.get("headers", {}).get("operation") == "insert"]
            res.update({"messages": len(msgs), "inserts": len(ids), "distinct_ids": len(set(ids)),
                        "min_id": min(ids) if ids else None, "max_id": max(ids) if ids else None,
                        "controls": [m["headers"].get("control") for m in msgs if "control" in m.get("headers", {})]})
        except (ValueError, KeyError, TypeError) as e:
            res["error"] = "body is not the expected JSON array: %s" % e
    s.close()
    emit(res)


# ---------------------------------------------------------------- trickle


def cmd_trickle(a):
    host, port = split_url(a.url)
    s = open_conn(host, port, rcvbuf=a.rcvbuf)
    s.sendall(request_bytes(host, port, a.path[0]))
    emit({"event": "connected", "port": s.getsockname()[1], "t": time.time()})
    start = time.time()
    read_total = 0
    eof = False
    err = None
    samples = []
    while time.time() - start < a.max_seconds:
        if a.stop_file and os.path.exists(a.stop_file):
            break
        s.settimeout(a.interval)
        try:
            data = s.recv(a.read)
            if not data:
                eof = True
                break
            read_total += len(data)
        except socket.timeout:
            pass
        except OSError as e:
            err = str(e)
            break
        samples.append([round(time.time() - start, 2), read_total, bytes_received(s)])
        time.sleep(a.interval)
    s.close()
    emit({"event": "done", "t0": start, "read": read_total, "eof": eof, "error": err, "samples": samples})


# ---------------------------------------------------------------- aborts


def cmd_aborts(a):
    host, port = split_url(a.url)
    kinds = [k.split("=") for k in a.kind]  # name=weight
    paths = dict(p.split("=", 1) for p in a.kind_path)
    names = [k for k, _ in kinds]
    weights = [float(w) for _, w in kinds]
    rnd = random.Random(a.seed)
    plan = [(rnd.choices(names, weights)[0], rnd.random() < a.rst, rnd.random(), rnd.randrange(1 << 30))
            for _ in range(a.total)]
    lock = threading.Lock()
    next_i = [0]
    stats = {"statuses": {}, "by_kind": {}, "by_kind_status": {}, "errors": {}, "rst": 0, "done": 0}

    def count(d, k):
        d[k] = d.get(k, 0) + 1

    def one(kind, rst, frac, salt):
        path = paths[kind].replace("{n}", str(salt % a.new_shapes))
        s = open_conn(host, port, timeout=10)
        status = None
        try:
            req = request_bytes(host, port, path)
            if kind == "partial":
                s.sendall(req[:int(len(req) * frac)])
                time.sleep(frac * 0.05)
                return "partial"
            s.sendall(req)
            r = Response()
            if kind in ("long_poll", "sse"):
                # park, then leave at a random moment (most while parked)
                time.sleep(frac * a.park_ms / 1000.0)
                s.settimeout(0.0)
                try:
                    r.feed(s.recv(65536))
                except (BlockingIOError, socket.timeout):
                    pass
                status = r.status
            elif kind == "new_shape":
                time.sleep(frac * 0.05)  # anywhere from resolution to the first bytes
                s.settimeout(0.0)
                try:
                    r.feed(s.recv(65536))
                except (BlockingIOError, socket.timeout):
                    pass
                status = r.status
            else:  # a snapshot: read a random amount, then leave
                want = int(frac * a.read_max)
                s.settimeout(10)
                got = 0
                while got < want and not r.complete:
                    data = s.recv(min(65536, want - got))
                    if not data:
                        break
                    got += len(data)
                    r.feed(data)
                status = r.status
        finally:
            if rst:
                rst_close(s)
            else:
                s.close()
        return status

    def worker():
        while True:
            with lock:
                i = next_i[0]
                if i >= len(plan):
                    return
                next_i[0] += 1
            kind, rst, frac, salt = plan[i]
            try:
                status = one(kind, rst, frac, salt)
                err = None
            except OSError as e:
                status, err = None, type(e).__name__
            with lock:
                count(stats["by_kind"], kind)
                count(stats["statuses"], str(status))
                count(stats["by_kind_status"], "%s:%s" % (kind, status))
                if err:
                    count(stats["errors"], err)
                if rst:
                    stats["rst"] += 1
                stats["done"] += 1

    t0 = time.time()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(a.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(a.max_seconds)
    stats["seconds"] = round(time.time() - t0, 2)
    stats["t_end"] = time.time()
    emit(stats)


def cmd_json(argv):
    path, event, expr = argv
    rows = []
    with open(path) as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
    d = next((r for r in reversed(rows) if event in ("", r.get("event"))), None)
    if d is None:
        sys.exit(1)
    v = eval(expr, {"d": d, "len": len, "all": all, "any": any, "min": min, "max": max, "sum": sum, "sorted": sorted})
    print(json.dumps(v) if isinstance(v, (list, dict, bool)) or v is None else v)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "json":
        cmd_json(sys.argv[2:])
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", required=True, help="base URL, e.g. http://localhost:3000")
    common.add_argument("--path", action="append", default=[], help="request path (repeatable; hold cycles through them)")
    common.add_argument("--rcvbuf", type=int, default=0, help="SO_RCVBUF before connect (0: kernel default)")
    common.add_argument("--max-seconds", type=float, default=60)
    common.add_argument("--stop-file", default=None)

    h = sub.add_parser("hold", parents=[common])
    h.add_argument("--count", type=int, default=1)
    h.add_argument("--quiet", type=float, default=1.0, help="seconds without new bytes that count as stalled")
    h.add_argument("--drain-seconds", type=float, default=3.0)
    h.add_argument("--rst-every", type=int, default=0, help="close every Nth connection with an RST (0: none)")
    h.add_argument("--save-body", default=None, help="write each complete body to PATH.<connection index>")

    sl = sub.add_parser("slow", parents=[common])
    sl.add_argument("--read", type=int, default=65536)
    sl.add_argument("--sleep", type=float, default=0.06)

    t = sub.add_parser("trickle", parents=[common])
    t.add_argument("--read", type=int, default=100)
    t.add_argument("--interval", type=float, default=1.0)

    ab = sub.add_parser("aborts", parents=[common])
    ab.add_argument("--total", type=int, default=2000)
    ab.add_argument("--concurrency", type=int, default=50)
    ab.add_argument("--kind", action="append", required=True, help="name=weight")
    ab.add_argument("--kind-path", action="append", required=True, help="name=path ({n}: a small number)")
    ab.add_argument("--new-shapes", type=int, default=20, help="how many distinct {n}")
    ab.add_argument("--rst", type=float, default=0.15, help="share of closes that are RSTs")
    ab.add_argument("--read-max", type=int, default=262144)
    ab.add_argument("--park-ms", type=float, default=300)
    ab.add_argument("--seed", type=int, default=1)

    a = p.parse_args()
    {"hold": cmd_hold, "slow": cmd_slow, "trickle": cmd_trickle, "aborts": cmd_aborts}[a.cmd](a)


if __name__ == "__main__":
    main()
