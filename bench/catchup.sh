#!/usr/bin/env bash
#
# bench/catchup.sh: catch-up requests against nginx serving the same bytes (issue 10, item 3).
# A client catching up asks for a chunk many others fetched before: a known handle and offset,
# not live. wrk, with CONNS keep-alive connections, fetches one such chunk over and over from
# shape_sync, and the same bytes as a static file from nginx (the baseline, same run, same
# machine, its defaults but for logging off and keep-alive unbounded). Two sizes: a chunk of
# about 1 kB (shape_sync.chunk_bytes_threshold = 1kB when its shape was made) and one of
# about 10 MB (the default threshold). RUNS runs, alternating which server goes first;
# reports the median requests per second of each and their ratio. Writes the section
# "Catch-up against nginx" of bench/RESULTS.md.
#
# With DISK=1, the big chunk is one that lives only in its shape's data file (durable logs,
# docs/storage.md): shape_sync.log_memory is 16 MB, the big table five times that, so its
# snapshot's first chunks leave memory as it is taken; the script checks that the chunk it
# fetches lies below what memory can hold (shape_sync.log_memory_usage()) and writes the
# section "Catch-up of a chunk on disk against nginx" instead (SIZES is "big").
#
# Needs nginx and wrk: SHAPE_SYNC_BENCH=1 scripts/install-deps.sh installs them.
# Knobs: RUNS (3), DURATION (5 s per wrk run of the small chunk), BIG_DURATION (20 s per run
# of the big one: at 1,000 connections each takes seconds to get one), CONNS ("100 1000"),
# WRK_THREADS (2), SIZES ("small big"), SERVER_CONF (postgresql.conf lines added to the
# cluster's, to compare settings such as shape_sync.write_piece_size), DISK (0). About 5
# minutes.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}
DURATION=${DURATION:-5}
BIG_DURATION=${BIG_DURATION:-20}
CONNS=${CONNS:-100 1000}
WRK_THREADS=${WRK_THREADS:-2}
SIZES=${SIZES:-small big}
SERVER_CONF=${SERVER_CONF:-}
DISK=${DISK:-0}
big_rows=130000
if ((DISK)); then
	SIZES=big
	big_rows=260000
	SERVER_CONF="shape_sync.log_memory = '16MB'
$SERVER_CONF"
fi
bench_need nginx wrk
bench_init
chmod 755 "$out"
bench_fd_limit

SHAPE_SYNC_EXTRA_CONF="shape_sync.max_connections = 3000
shape_sync.max_concurrent_existing = 3000
shape_sync.chunk_bytes_threshold = '1kB'
$SERVER_CONF" bench_cluster_start
cluster_psql -q <<SQL
CREATE EXTENSION shape_sync;
CREATE TABLE catchup_small (id int PRIMARY KEY, payload text NOT NULL);
ALTER TABLE catchup_small REPLICA IDENTITY FULL;
INSERT INTO catchup_small SELECT g, repeat(md5(g::text), 4) FROM generate_series(1, 40) g;
CREATE TABLE catchup_big (id int PRIMARY KEY, payload text NOT NULL);
ALTER TABLE catchup_big REPLICA IDENTITY FULL;
INSERT INTO catchup_big SELECT g, repeat(md5(g::text), 4) FROM generate_series(1, $big_rows) g;
SQL

# second_chunk TABLE NAME: the URL of its shape's second chunk, whose body goes to $out/www/NAME
mkdir -p "$out/www"
second_chunk() {
	local url="$SHAPE_SYNC_URL/v1/shape?table=$1" h handle offset i code
	for ((i = 0; i < 100; i++)); do
		if ! h=$(curl -sS -D - -o /dev/null "$url&offset=-1" | tr -d '\r'); then
			echo "first chunk of $1: curl failed (above), asking again" >&2
		fi
		grep -q '^HTTP/1.1 200' <<<"$h" && break
		sleep 0.2
	done
	handle=$(sed -n 's/^electric-handle: //Ip' <<<"$h")
	offset=$(sed -n 's/^electric-offset: //Ip' <<<"$h")
	url="$url&handle=$handle&offset=$offset"
	# a 503 (its snapshot still going, memory full for a moment) is answered again, as a
	# client would; anything else that is not a 200 ends the run
	for ((i = 0; i < 100; i++)); do
		code=$(curl -sS -o "$out/www/$2" -w '%{http_code}' "$url") || code="curl failed (above)"
		[[ $code == 200 ]] && break
		echo "second chunk of $1: HTTP $code: $(head -c 300 "$out/www/$2")" >&2
		[[ $code == 503 ]] || return 1
		sleep 0.2
	done
	[[ $code == 200 ]] || return 1
	echo "$url"
}
small_url=$(second_chunk catchup_small small.json) || { echo "no second chunk of catchup_small" >&2; exit 1; }
cluster_psql -q -c "ALTER SYSTEM SET shape_sync.chunk_bytes_threshold = '10MB'" -c "SELECT pg_reload_conf()" >/dev/null
sleep 0.5
big_url=$(second_chunk catchup_big big.json) || { echo "no second chunk of catchup_big" >&2; exit 1; }
small_bytes=$(stat -c %s "$out/www/small.json")
big_bytes=$(stat -c %s "$out/www/big.json")
if ((DISK)); then
	# memory holds at most its used bytes of the log, the newest ones (a log leaves memory
	# from its start): the second chunk ends within 2.2 bodies of the start
	read -r log_bytes used < <(cluster_psql -At -F' ' -c "SELECT s.log_bytes, m.total_bytes - m.free_bytes
		FROM shape_sync.shapes s, shape_sync.log_memory_usage() m WHERE s.relation LIKE '%catchup_big%'")
	if ((log_bytes - used < big_bytes * 22 / 10)); then
		echo "the second chunk of catchup_big may still be in memory ($log_bytes bytes of log, $used in memory)" >&2
		exit 1
	fi
	echo "catchup_big: $log_bytes bytes of log, $used bytes of memory in use: its second chunk is on disk only" >&2
fi

nginx_port=$(bench_free_port)
cat >"$out/nginx.conf" <<CONF
daemon off;
worker_processes auto;
pid $out/nginx.pid;
error_log $out/nginx.err warn;
events { worker_connections 8192; }
http {
	access_log off;
	sendfile on;
	tcp_nopush on;
	keepalive_requests 100000000;
	keepalive_timeout 120s;
	default_type application/json;
	client_body_temp_path $out/tmp; proxy_temp_path $out/tmp; fastcgi_temp_path $out/tmp;
	uwsgi_temp_path $out/tmp; scgi_temp_path $out/tmp;
	server { listen 127.0.0.1:$nginx_port; root $out/www; }
}
CONF
mkdir -p "$out/tmp"
nginx -c "$out/nginx.conf" -p "$out" &
bench_track $!
for _ in $(seq 1 50); do curl -sf -o /dev/null "http://127.0.0.1:$nginx_port/small.json" && break; sleep 0.1; done
cmp -s <(curl -s "http://127.0.0.1:$nginx_port/small.json") <(curl -s "$small_url") ||
	{ echo "nginx and shape_sync do not serve the same bytes" >&2; exit 1; }

# wrk_rps URL CONNS SECONDS: requests per second (and non-2xx count) of one wrk run
wrk_rps() {
	local res
	res=$(wrk -t"$WRK_THREADS" -c"$2" -d"${3}s" --timeout 60s "$1" 2>&1)
	echo "$(awk '/^Requests\/sec:/ { print $2 }' <<<"$res") $(awk '/Non-2xx/ { print $NF }' <<<"$res")"
}

: >"$out/results"
for ((run = 1; run <= RUNS; run++)); do
	for size in $SIZES; do
		if [[ $size == small ]]; then sh_url=$small_url secs=$DURATION; else sh_url=$big_url secs=$BIG_DURATION; fi
		ng_url="http://127.0.0.1:$nginx_port/$size.json"
		for conns in $CONNS; do
			if ((run % 2)); then order="nginx shape_sync"; else order="shape_sync nginx"; fi
			for server in $order; do
				if [[ $server == nginx ]]; then u=$ng_url; else u=$sh_url; fi
				read -r rps bad < <(wrk_rps "$u" "$conns" "$secs")
				echo "$size $conns $server $run $rps ${bad:-0}" >>"$out/results"
				echo "run $run: $size, $conns connections, $server: $rps requests/s, non-2xx ${bad:-0}" >&2
			done
		done
	done
done

BENCH_DISK=$DISK BENCH_LOG_BYTES=${log_bytes:-0} BENCH_USED=${used:-0} \
	BENCH_PG="$pg_version" BENCH_SMALL=$small_bytes BENCH_BIG=$big_bytes BENCH_RUNS=$RUNS \
	BENCH_DURATION=$DURATION BENCH_BIG_DURATION=$BIG_DURATION BENCH_THREADS=$WRK_THREADS BENCH_CONF="$SERVER_CONF" \
	python3 - "$here/RESULTS.md" "$out/results" <<'PY'
import collections, os, statistics, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
from results_section import machine, write_section

rows = collections.defaultdict(list)
bad = collections.Counter()
for line in open(sys.argv[2]):
    size, conns, server, run, rps, nbad = line.split()
    rows[(size, int(conns), server)].append(float(rps))
    bad[(size, int(conns), server)] += int(nbad)
E = os.environ
sizes = {"small": int(E["BENCH_SMALL"]), "big": int(E["BENCH_BIG"])}
table = []
for size in ("small", "big"):
    for conns in sorted({k[1] for k in rows if k[0] == size}):
        s = statistics.median(rows[(size, conns, "shape_sync")])
        n = statistics.median(rows[(size, conns, "nginx")])
        label = f"{sizes[size] / 1024:.1f} kB" if size == "small" else f"{sizes[size] / 1048576:.1f} MB"
        table.append(f"| {label} | {conns:,} | {s:,.0f} | {n:,.0f} | **{s / n:.2f}x** | "
                     f"{bad[(size, conns, 'shape_sync')]} |")
disk = E["BENCH_DISK"] == "1"
lines = [
    "## Catch-up of a chunk on disk against nginx" if disk else "## Catch-up against nginx",
    "",
    machine(E["BENCH_PG"]),
    "",
    *([f"`DISK=1 bash bench/catchup.sh`: the chunk lives only in its shape's data file: `shape_sync.log_memory` "
       f"is 16 MB, the shape's log {int(E['BENCH_LOG_BYTES']) / 1048576:.0f} MB, of which at most "
       f"{int(E['BENCH_USED']) / 1048576:.0f} MB (the newest) are in memory; it is read from the page cache "
       "64 kB at a time, while nginx sends its file with sendfile. Otherwise as below.", ""] if disk else []),
    "`bash bench/catchup.sh`: wrk "
    f"({E['BENCH_THREADS']} threads, {E['BENCH_DURATION']} s a run for the small chunk and "
    f"{E['BENCH_BIG_DURATION']} s for the big one) fetches one catch-up chunk (a known handle "
    "and offset, not live) over and over on keep-alive connections, from shape_sync and, as a static "
    "file with the same bytes, from nginx (its defaults, logging off, keep-alive unbounded; the "
    "baseline, same run). Requests per second, medians over "
    f"{E['BENCH_RUNS']} runs, alternating which server goes first. Server and wrk share this machine.",
    "",
    "| response | connections | shape_sync req/s | nginx req/s | ratio | shape_sync non-2xx |",
    "|---|---:|---:|---:|---:|---:|",
    *table,
]
if E["BENCH_CONF"].strip():
    lines += ["", "shape_sync ran with: " + "; ".join(f"`{l.strip()}`" for l in E["BENCH_CONF"].splitlines() if l.strip()) + "."]
if disk:
    lines += ["", "Target (issue 26): at least 1.0x nginx."]
write_section(sys.argv[1], "catchup_disk" if disk else "catchup", lines)
PY
