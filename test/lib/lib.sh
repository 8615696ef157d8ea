# shellcheck shell=bash
#
# test/lib/lib.sh: helpers for the integration scripts (test/integration/*.sh).
#
# Each script starts a cluster of its own (cluster_start), so that what it
# does to the server (restarts, small memory, no preload) touches no other
# test.  `pass`/`fail` print TAP-like lines; `finish` exits non-zero when
# any check failed.

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../../scripts/lib/cluster.sh
source "$here/../../scripts/lib/cluster.sh"

# A version manager's python3 (pyenv's shim) takes a third of a second to start, and the
# scripts start python3 hundreds of times (subset_load.sh spent a minute so): the interpreter
# it stands for goes first on PATH, and is `py`.
py=$(python3 -c 'import sys; print(sys.executable)')
PATH=$(dirname "$py"):$PATH

_checks=0
_failures=0

pass() { _checks=$((_checks + 1)); printf 'ok %d - %s\n' "$_checks" "$*"; }
fail() { _checks=$((_checks + 1)); _failures=$((_failures + 1)); printf 'not ok %d - %s\n' "$_checks" "$*"; }

# check DESCRIPTION COMMAND...: passes when COMMAND succeeds.
check() {
	local what=$1
	shift
	if "$@"; then pass "$what"; else fail "$what"; fi
}

# expect_eq DESCRIPTION EXPECTED ACTUAL
expect_eq() {
	if [[ $2 == "$3" ]]; then pass "$1"; else fail "$1: expected [$2], got [$3]"; fi
}

# expect_match DESCRIPTION REGEX ACTUAL
expect_match() {
	if [[ $3 =~ $2 ]]; then pass "$1"; else fail "$1: [$3] does not match /$2/"; fi
}

finish() {
	printf '1..%d\n' "$_checks"
	if ((_failures > 0)); then
		printf '# %d of %d checks failed\n' "$_failures" "$_checks"
		[[ -n ${SHAPE_SYNC_LOG:-} && -f $SHAPE_SYNC_LOG ]] && tail -n 40 "$SHAPE_SYNC_LOG"
		exit 1
	fi
	exit 0
}

# http_status URL: prints the status code of a GET.
http_status() { curl -s -o /dev/null -w '%{http_code}' "$1"; }

# worker_pid: the shape_sync worker's PID, or empty.
worker_pid() {
	cluster_psql -At -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'shape_sync'"
}

# wait_for SECONDS COMMAND...: retries COMMAND every 0.2 s until it succeeds; fails after
# SECONDS.  SECONDS is a deadline against a hang, not a time target: the tests run on busy
# machines, so it is generous (60 s where the server should take well under a second).
wait_for() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@"; do
		((SECONDS < deadline)) || return 1
		sleep 0.2
	done
}

# wait_decoded [SECONDS]: waits until shape_sync's slots have decoded past what is committed
# now.  A client that syncs an existing shape stops at its first up-to-date, which may come
# before the worker has decoded a commit made just before: wait for it first.
wait_decoded() {
	local lsn
	lsn=$(cluster_psql -At -c "SELECT pg_current_wal_insert_lsn()")
	cluster_psql -q -c "SELECT txid_current()" >/dev/null	# a commit past it, to confirm
	wait_for "${1:-60}" decoded_past "$lsn"
}
decoded_past() {
	[[ $(cluster_psql -At -c "SELECT bool_and(confirmed_flush_lsn >= '$1') FROM pg_replication_slots WHERE plugin = 'shape_sync'") == t ]]
}

# ---------------------------------------------------------------- shared setup
#
# What the stalled_* and admission_* scripts have in common: a cluster started
# with retries, a scratch folder with background helpers, the big table, and
# the helpers that read shapes, the admission view and stall_client.py output.

stall_client=$here/stall_client.py

# start_cluster_retrying BASE_PORT: cluster_start on a free port from BASE_PORT; another cluster may take it first, so up to three tries
start_cluster_retrying() {
	local _
	for _ in 1 2 3; do
		cluster_start "$(cluster_free_port "$1")" && return 0
		cluster_stop
		sleep 1
	done
	return 1
}

# init_work: a scratch folder $work and a list $helpers of background PIDs, both cleaned up (with the cluster) on exit
init_work() {
	work=$(mktemp -d)
	helpers=()
	trap cleanup_work EXIT
}

# session_open NAME: a psql session that reads what is written to file descriptor 5
# (a fifo $work/NAME; its output in $work/NAME.out), for transactions kept open
session_open() {
	mkfifo "$work/$1"
	cluster_psql <"$work/$1" >"$work/$1.out" 2>&1 &
	helpers+=($!)
	exec 5>"$work/$1"
}

# sync_rep_waits N: N sessions wait for the synchronous standby to confirm their commit
sync_rep_waits() {
	[[ $(cluster_psql -At -c "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'") == "$1" ]]
}

# commit_behind_standby SQL: runs SQL in the background ($waiting_pid) and returns once its
# commit waits for the (stopped) synchronous standby, 10 s at most
commit_behind_standby() {
	cluster_psql -c "$1" >"$work/waiting.out" 2>&1 &
	waiting_pid=$!
	helpers+=($waiting_pid)
	wait_for 60 sync_rep_waits 1
}

# cleanup_work: kills the helpers, stops the cluster, removes $work
cleanup_work() {
	local p
	for p in "${helpers[@]}"; do kill "$p" 2>/dev/null || true; done
	cluster_stop
	rm -rf "$work"
}

# create_big_table ROWS: table big (id, payload) with ROWS rows of 512 bytes of payload
create_big_table() {
	cluster_psql -c "CREATE TABLE big (id int PRIMARY KEY, payload text)" \
		-c "INSERT INTO big SELECT g, repeat(md5(g::text), 16) FROM generate_series(1, $1) g"
}

# now: the time in seconds, with nanoseconds
now() { date +%s.%N; }
# diff_s A B: B - A, in seconds with two decimals
diff_s() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
# le A B: A <= B (numbers with decimals)
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }

# j FILE EVENT EXPR: a value from a stall_client.py report (see its `json` command)
j() { python3 "$stall_client" json "$@"; }
# wait_event FILE EVENT SECONDS: waits until the report in FILE has EVENT
wait_event() { wait_for "$3" j "$1" "$2" 'd["event"]' >/dev/null 2>&1; }

# reaped: shape_sync.stalled_serves_reaped()
reaped() { cluster_psql -At -c 'SELECT shape_sync.stalled_serves_reaped()'; }
# adm KIND COLUMN: a column of shape_sync.admission for KIND (initial or existing)
adm() { cluster_psql -At -c "SELECT $2 FROM shape_sync.admission WHERE kind = '$1'"; }
# in_use KIND: admitted requests of KIND right now
in_use() { adm "$1" in_use; }
# slots_free: no request of either kind holds an admission slot
slots_free() { [[ $(in_use initial) == 0 && $(in_use existing) == 0 ]]; }

# header NAME FILE: the last value of header NAME in a curl -D dump
header() { tr -d '\r' <"$2" | sed -n "s/^$1: //Ip" | tail -n 1; }

# follow TABLE: reads a shape from offset=-1 until up-to-date; prints
# "HANDLE OFFSET INSERTS" (the offset to go live from)
follow() {
	local url="$SHAPE_SYNC_URL/v1/shape?table=$1" offset=-1 handle='' inserts=0 n h=$work/follow.h b=$work/follow.b
	for ((n = 0; n < 50; n++)); do
		curl -sf --max-time 30 -D "$h" -o "$b" "$url&offset=$offset${handle:+&handle=$handle}" || return 1
		handle=$(header electric-handle "$h")
		offset=$(header electric-offset "$h")
		inserts=$((inserts + $({ grep -o '"operation":"insert"' "$b" || true; } | wc -l)))
		if [[ -n $(header electric-up-to-date "$h") ]]; then
			echo "$handle $offset $inserts"
			return 0
		fi
	done
	return 1
}

# start_hold NAME ARGS...: `stall_client.py hold ARGS` in the background, its report in $work/NAME.out, its PID in $hold_pid; it stops when $work/stop appears
start_hold() {
	local name=$1
	shift
	rm -f "$work/stop"
	python3 "$stall_client" hold --url "$SHAPE_SYNC_URL" --stop-file "$work/stop" "$@" >"$work/$name.out" &
	helpers+=($!)
	# shellcheck disable=SC2034 # the callers' to stop or wait for
	hold_pid=$!
}

# stop_hold PID TENTHS: creates $work/stop, gives the helper TENTHS tenths of a second to finish its report, then kills it
stop_hold() {
	local i
	touch "$work/stop"
	for ((i = 0; i < $2; i++)); do
		kill -0 "$1" 2>/dev/null || break
		sleep 0.1
	done
	kill "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
	rm -f "$work/stop"
}

# stall_warned HANDLE PORTS: each client port has a WARNING that a stalled serve of shape HANDLE to it was closed
stall_warned() {
	local p
	for p in $2; do
		grep -Eq "WARNING: .*closed a stalled serve of shape $1 to [^ ]*:$p: a write made no progress for [0-9]+ ms" \
			"$SHAPE_SYNC_LOG" || return 1
	done
}

# stall_ms HANDLE PORT: the milliseconds without progress that the last such WARNING for PORT reports (0 when none)
stall_ms() {
	grep -Eo "closed a stalled serve of shape $1 to [^ ]*:$2: a write made no progress for [0-9]+ ms" \
		"$SHAPE_SYNC_LOG" | grep -Eo '[0-9]+ ms$' | grep -Eo '[0-9]+' | tail -n 1 || echo 0
}

# uri TEXT: TEXT percent-encoded for a query string.
# sc ARGS...: test/lib/shape_client.py (the durable_*.sh scripts); shape_client_init: nothing
# more to do (`py` is set above), kept for the scripts that call it
shape_client_init() { :; }
sc() { "$py" "$here/shape_client.py" "$@"; }

uri() { python3 -c "import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1]))" "$1"; }

# The worker's memory, from the dumps pg_log_backend_memory_contexts($worker) writes to the
# server log ($worker: its PID).  context_bytes NAME: the newest dump's bytes of one context
# ("Grand total" for the whole worker); dumps: how many dumps the log holds; dumped N: at least N.
context_bytes() {
	grep "\[$worker\] LOG: .*$1: [0-9]* \(bytes\|total\)" "$SHAPE_SYNC_LOG" | tail -n 1 |
		sed "s/.*$1: \([0-9]*\) .*/\1/"
}
dumps() { grep -c "\[$worker\] LOG:  Grand total" "$SHAPE_SYNC_LOG" || true; }
dumped() { (($(dumps) >= $1)); }
