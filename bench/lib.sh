# shellcheck shell=bash
#
# bench/lib.sh: the set-up every benchmark shares. A bench script starts with
#
#   set -euo pipefail
#   # shellcheck source=bench/lib.sh
#   source "$(dirname "$0")/lib.sh"
#   bench_init
#
# Sourcing sets here (the bench/ folder) and root (the repository) and sources
# scripts/lib/cluster.sh (cluster_start, cluster_psql, cluster_stop, ...).
# bench_init makes the scratch folder $out, empties the list helpers (background PIDs the
# script started) and traps EXIT with bench_cleanup, which ends those processes by their ids,
# stops the cluster (if one runs) and removes $out. The functions:
#
#   bench_init                       $out, helpers, the EXIT trap (above)
#   bench_track PID...               adds background processes to helpers
#   bench_cleanup                    (the EXIT trap) kill each helper and each process listed in
#                                    $BENCH_PIDS, cluster_stop, rm -rf $out
#   bench_tools                      builds bench/build/{loadgen,floor_server,metrics_bench}
#   bench_cc NAME SOURCE... [FLAGS]  cc -O2 -Wall -Wextra -Werror -pthread into $out/NAME
#   bench_fd_limit                   raises the open-file limit to the hard limit
#   bench_need TOOL...               fails unless each tool is on PATH (or in /usr/sbin, which
#                                    it then adds to PATH)
#   bench_need_node_modules          fails unless test/node_modules holds the client and pg
#   bench_cluster_start              cluster_start on a free HTTP port, quiet; sets pg_version.
#                                    Settings through SHAPE_SYNC_EXTRA_CONF and the other knobs
#                                    of cluster.sh, as a prefix: SHAPE_SYNC_EXTRA_CONF=... bench_cluster_start
#   bench_worker_pid                 the pid of the shape_sync background worker
#   bench_free_port                  a TCP port nothing listens on, above the cluster's HTTP port
#   bench_rss_anon_kb PID            the private resident memory (RssAnon) of PID, in kB
#   bench_cpu_ns PID                 CPU time of PID's main thread, in ns (schedstat)
#   bench_wait_parked FILE           until bench/loadgen printed "ready" into FILE
#   bench_header NAME                reads HTTP headers (curl -D -) on stdin, prints NAME's value
#   elapsed A B                      B - A, seconds with 6 decimals
#
# Processes are ended by their ids, never by name: other clusters and benchmarks may run on
# the same machine. A process that a benchmark's Python part starts (bench/loadgen_driver.py,
# the floor server of bench/storm.sh) is listed in $BENCH_PIDS as "PID PATH", and
# bench_cleanup kills it only while /proc/PID/exe is still PATH.
#
# The gate: to time decoding alone, a commit that waits for a synchronous standby that does
# not exist (the cluster runs with synchronous_standby_names = 'bench_gate' and
# synchronous_commit = local) stays in progress at its commit record, where the worker stops
# (src/pg/worker/decoder.c, dec_commit_still_running), while the commits to time are written behind
# it with synchronous_commit = off or local, which do not wait.  gate_release cancels the
# wait; the end of that commit wakes the worker.
#   gate_hold TABLE / gate_release / gate_waits (below)

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=scripts/lib/cluster.sh
source "$root/scripts/lib/cluster.sh"

bench_init() {
	out=$(mktemp -d)
	helpers=()
	export BENCH_PIDS=$out/pids
	trap bench_cleanup EXIT
}

bench_track() { helpers+=("$@"); }

bench_cleanup() {
	local p path
	for p in "${helpers[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	if [[ -n ${out:-} && -f $out/pids ]]; then
		while read -r p path; do
			if [[ $p =~ ^[0-9]+$ && $(readlink "/proc/$p/exe" 2>/dev/null) == "$path" ]]; then
				kill "$p" 2>/dev/null || true
			fi
		done <"$out/pids"
	fi
	cluster_stop
	[[ -n ${out:-} ]] && rm -rf "$out"
	return 0
}

bench_tools() { make -s -f "$here/Makefile.tools" >/dev/null; }

bench_cc() {	# NAME SOURCE... [FLAGS]
	local name=$1
	shift
	cc -O2 -Wall -Wextra -Werror -pthread "$@" -o "$out/$name"
}

bench_fd_limit() { ulimit -n "$(ulimit -Hn)"; }

bench_need() {
	local tool
	for tool in "$@"; do
		if ! command -v "$tool" >/dev/null 2>&1; then
			if [[ -x /usr/sbin/$tool ]]; then
				[[ :$PATH: == *:/usr/sbin:* ]] || PATH=$PATH:/usr/sbin
			else
				echo "$tool is missing: SHAPE_SYNC_BENCH=1 scripts/install-deps.sh" >&2
				exit 1
			fi
		fi
	done
}

bench_need_node_modules() {
	if [[ ! -d $root/test/node_modules/@electric-sql/client || ! -d $root/test/node_modules/pg ]]; then
		echo "test/node_modules is missing (run scripts/install-deps.sh)" >&2
		exit 1
	fi
}

bench_cluster_start() {
	cluster_start "" >/dev/null
	# shellcheck disable=SC2034	# the caller's
	pg_version=$(cluster_psql -At -c 'SELECT version()')
}

bench_worker_pid() {
	cluster_psql -At -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'shape_sync'"
}

bench_free_port() { cluster_free_port $((SHAPE_SYNC_HTTP_PORT + 1)); }

bench_rss_anon_kb() { awk '/^RssAnon:/ { print $2 }' "/proc/$1/status"; }

bench_cpu_ns() { cut -d' ' -f1 "/proc/$1/task/$1/schedstat"; }

# bench_wait_parked FILE: until bench/loadgen printed "ready" into FILE (every client parked);
# fails after 2 minutes
bench_wait_parked() {
	local i
	for ((i = 0; i < 1200; i++)); do
		grep -q '^ready' "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "the clients did not all park: $(tail -c 300 "$1")" >&2
	return 1
}

bench_header() { tr -d '\r' | sed -n "s/^$1: //Ip"; }

elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.6f", b - a }'; }

gate_waits() {
	[[ $(cluster_psql -At -c "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'") == 1 ]]
}

gate_hold() {	# TABLE: inserts its DEFAULT VALUES in a commit that waits for 'bench_gate'
	PGOPTIONS='-c synchronous_commit=on' cluster_psql -c "INSERT INTO $1 DEFAULT VALUES" \
		>"$out/gate.log" 2>&1 &
	gate_pid=$!
	helpers+=("$gate_pid")
	for _ in $(seq 1 100); do
		gate_waits && return 0
		sleep 0.1
	done
	echo "the gate's commit does not wait" >&2
	exit 1
}

gate_release() {	# ends the wait; writes the server's clock just after it to $out/released
	cluster_psql -At -F ' ' -c "SELECT pg_cancel_backend(pid), extract(epoch FROM clock_timestamp()) FROM pg_stat_activity WHERE wait_event = 'SyncRep'" \
		>"$out/released"
	[[ $(cut -d' ' -f1 "$out/released") == t ]] || { echo "the gate's wait was not cancelled" >&2; exit 1; }
	wait "$gate_pid" || true	# its commit ends, and wakes the worker (shape_sync_xact_callback)
}
