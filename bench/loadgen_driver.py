"""Driving bench/build/loadgen from a benchmark's Python part.

start() runs one loadgen and returns once all its clients are parked
(it printed "ready"); report() reads the JSON report it prints at the end.
track() lists a process in $BENCH_PIDS, so that bench/lib.sh's bench_cleanup
ends it by its id if the benchmark stops before it does. sockets() counts a
process's open sockets.
Shared by bench/storm.sh and bench/bystanders.sh.
"""
import json
import os
import subprocess
import time


def track(p, path):
    """Appends "PID PATH" of process p (started from the executable PATH) to $BENCH_PIDS."""
    pids = os.environ.get("BENCH_PIDS")
    if pids:
        with open(pids, "a") as f:
            f.write(f"{p.pid} {os.path.realpath(path)}\n")


def start(loadgen, port, clients, path, extra, out_file, threads="1", timeout=300):
    """A running loadgen (stdin a pipe, for "drop") and its output file, once every client parked."""
    f = open(out_file, "w+")
    p = subprocess.Popen([loadgen, "--port", str(port), "--clients", str(clients), "--path", path,
                          "--threads", str(threads), "--timeout", "600", *extra],
                         stdout=f, stderr=subprocess.DEVNULL, stdin=subprocess.PIPE, text=True)
    track(p, loadgen)
    deadline = time.time() + timeout
    while time.time() < deadline:
        f.seek(0)
        if f.read().startswith("ready"):
            return p, f
        if p.poll() is not None:
            break
        time.sleep(0.05)
    raise SystemExit(f"{out_file}: the clients did not all park")


def report(f):
    """The last JSON line loadgen printed."""
    f.seek(0)
    return json.loads([line for line in f.read().splitlines() if line.startswith("{")][-1])


def sockets(pid):
    """The process's open sockets (the worker also holds log files, which come and go)."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return n
