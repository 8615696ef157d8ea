#!/usr/bin/env bash
#
# bench/fetch_cost.sh: what Node's fetch costs a long-poll client by itself, with no sync
# server in the way (issue 26's latency target is a ratio to LISTEN/NOTIFY, read by a client
# of a socket). bench/fetch_cost.mjs parks a long-poll on a server that answers it at once
# when told (a child Node process, no database), and times the answer until the client has
# parsed it: with fetch, as bench/latency.mjs's raw client reads, and on a plain socket, as
# its socket client reads. The difference is the client's own share of the raw client's
# commit-to-client latency in bench/durability.sh and bench/run.sh.
#
# Knobs: RUNS (3), COMMITS (500 answers per client and run). Writes the section "The fetch
# client's own cost" of bench/RESULTS.md.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RUNS=${RUNS:-3}
COMMITS=${COMMITS:-500}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
node "$here/fetch_cost.mjs" "$RUNS" "$COMMITS" | tee "$out"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
python3 - "$out" "$here" "$RUNS" "$COMMITS" "$load_before" "$load_after" "$(node --version)" <<'PY'
import json, statistics, sys
out, here, runs, commits, before, after, node = sys.argv[1:8]
sys.path.insert(0, here)
from results_section import machine, write_section
per = [json.loads(line) for line in open(out) if line.startswith("{")]
med = statistics.median
def fig(client, stat):
    return med(p[client][stat] for p in per)
diff = [p["fetch"]["median"] - p["socket"]["median"] for p in per]
lines = [
    "## The fetch client's own cost",
    "",
    f"{machine()} `bash bench/fetch_cost.sh`: medians of {runs} runs of {commits} answers per "
    f"client. Node {node}. Load average before {before}, after {after}; other work on the "
    "machine was not controlled.",
    "",
    "A long-poll is parked on a server that does no work (a child Node process, no database) "
    "and answered at once when told to, with a response shaped like shape_sync's live "
    "responses (their headers, one row and up-to-date); the clock runs from telling it until "
    "the client has parsed the body. The two clients are those of `bench/latency.mjs`: its "
    "raw client reads with `fetch` and `res.text()`, its socket client sends the same request "
    "on a keep-alive socket and parses the response itself. Each run alternates which goes "
    "first.",
    "",
    "| client | median ms | p99 ms |",
    "|---|---:|---:|",
    f"| plain socket (baseline) | {fig('socket', 'median'):.3f} | {fig('socket', 'p99'):.3f} |",
    f"| `fetch` | {fig('fetch', 'median'):.3f} | {fig('fetch', 'p99'):.3f} |",
    f"| `fetch` minus socket, median of the runs' differences | {med(diff):.3f} | |",
    "",
    "Runs (median ms, fetch / socket): " + "; ".join(
        f"{p['fetch']['median']:.3f} / {p['socket']['median']:.3f}" for p in per) + ".",
    "",
    "This difference is the client's alone: no server work is in it. In \"Durable logs: what "
    "the disk costs\" (Commit-to-client latency) the raw `fetch` client and the socket client "
    "read the same responses of the same server, and differ by about as much: the socket "
    "client's ratio to LISTEN/NOTIFY there is the server's (it reads its socket as the NOTIFY "
    "client, node-postgres, reads its own), and the `fetch` client's carries this cost on top.",
]
write_section(f"{here}/RESULTS.md", "fetch_cost", lines)
PY
