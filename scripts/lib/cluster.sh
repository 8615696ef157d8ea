# shellcheck shell=bash
#
# scripts/lib/cluster.sh: a throwaway PostgreSQL 15 cluster that preloads shape_sync.
#
# Source this file, then:
#
#   trap cluster_stop EXIT          # always tear the cluster down, also on Ctrl-C
#   cluster_start [HTTP_PORT]       # HTTP_PORT: fixed port, or empty to pick a free one from 3000 up
#   cluster_psql -c 'SELECT 1'      # psql -X -q -v ON_ERROR_STOP=1 against the cluster
#   cluster_reload                  # pg_ctl reload (SIGHUP GUCs)
#   cluster_stop                    # pg_ctl stop -m fast, remove the temp dir; safe to call twice
#   cluster_standby_create NAME     # a physical standby of the cluster (pg_basebackup), started,
#                                   # streaming as application_name NAME; not yet synchronous:
#                                   # set synchronous_standby_names = 'NAME' for that
#   cluster_standby_stop / cluster_standby_start   # stop it (commits that wait for it stall) and
#                                   # start it again; cluster_stop stops it too
#   cluster_sync_standby_create NAME  # cluster_standby_create, then synchronous_standby_names =
#                                   # 'NAME' and a wait (30 s at most) until it is the sync one
#   cluster_expect_crash [REASON]   # before a test kills a server process on purpose: the crash
#                                   # check lets the next crash of the cluster pass (see below)
#   cluster_crash_check LOG...      # prints the crashes a server log shows; fails when any
#
# The cluster lives in a fresh temp dir under /tmp: data in DIR/data, server log in
# DIR/postgres.log, the Unix socket in DIR itself (listen_addresses='' so PostgreSQL opens no
# TCP port; the shape_sync worker listens on HTTP_PORT on localhost). initdb refuses to run as
# root, so as root the server runs as the system user `shapesync` (created when missing).
#
# cluster_start exports:
#   PGHOST PGPORT PGUSER=postgres PGDATABASE=postgres   libpq: psql, pg_regress, pg_prove, node pg
#   SHAPE_SYNC_URL=http://localhost:HTTP_PORT             the Shape API
#   SHAPE_SYNC_HTTP_PORT                                  HTTP_PORT alone
#   SHAPE_SYNC_PGDATA  SHAPE_SYNC_LOG  SHAPE_SYNC_PG_BINDIR
# A child process (a test script) that sources this file may call cluster_reload on the
# parent's cluster through these, or cluster_start a second cluster of its own.
#
# Knobs (environment, read by cluster_start):
#   SHAPE_SYNC_EXTRA_CONF      extra postgresql.conf lines, newline separated, appended last
#                              (so they override the defaults below)
#   SHAPE_SYNC_PRELOAD         shared_preload_libraries (default shape_sync; '' for a plain
#                              cluster, for debugging the harness itself)
#   SHAPE_SYNC_HEALTH_TIMEOUT  seconds to wait for GET /v1/health to answer 200 (default 30;
#                              0 skips the wait)
#   SHAPE_SYNC_MANAGE_REPLICA_IDENTITY  shape_sync.manage_replica_identity (default on: the
#                              tests create tables as they go and let the worker set
#                              REPLICA IDENTITY FULL; the demo uses off, the server's default)
#   PG_CONFIG / PG_BINDIR      which PostgreSQL to use (default: pg_config on PATH)
#   SHAPE_SYNC_CRASH_REPORT    a file for the crash check of a whole test run (scripts/test.sh
#                              exports it), read by cluster_start and cluster_stop: see below
#
# The crash check. A server process that dies by a signal (or exits with a code other than 0
# or 1) makes the postmaster restart the whole instance; the tests see at most a few refused
# connections, so the server log is the place to look. cluster_crash_check LOG... prints, for
# each log, the lines (FILE:LINE: text) that show
#   - a process "(PID n) was terminated by signal" / "by exception" / "exited with exit code"
#     2 or more (with the DETAIL line that follows, which names what it was running), and
#   - an instance restart: "terminating any other active server processes",
#     "all server processes terminated; reinitializing",
# and fails when there is any. cluster_expect_crash appends a marker line to the cluster's log
# (shape_sync-test: expect-crash: REASON): each marker lets exactly one crash after it pass,
# with the restart lines that follow it up to "database system is ready to accept connections"
# (or "is shut down"); a second crash, or any crash with no marker left, is still reported.
# The lines are matched after "[PID] LOG:  ", so this file sets log_line_prefix to PostgreSQL's
# default, '%m [%p] ', whatever SHAPE_SYNC_EXTRA_CONF says.
#
# cluster_stop runs the check on the cluster's log and its standby's, after the server stopped
# (so a crash while shutting down counts) and before it deletes the temp dir. It also counts as a
# crash a postmaster found dead with its postmaster.pid still there (unless a marker is left
# unused). (Not a fast shutdown that times out: PostgreSQL 15 itself does when the request
# comes while it recovers from a crash, which the check reports anyway.) What it finds goes to stderr and,
# with SHAPE_SYNC_CRASH_REPORT set, is appended to that file (a "== LOG" line, then the lines),
# with a copy of each such log next to it (crash-<dir>-postgres.log). cluster_start appends its
# temp dir to SHAPE_SYNC_CRASH_REPORT.clusters, so that cluster_crash_check_leftovers (run by
# scripts/test.sh at the end) checks the logs of clusters that no cluster_stop removed, still
# running or not. cluster_stop never fails because of a crash: the test run does (stage
# crash-check of scripts/test.sh).

SHAPE_SYNC_PG_OS_USER=${SHAPE_SYNC_PG_OS_USER:-shapesync}

_cluster_say() { printf '[cluster] %s\n' "$*" >&2; }

_cluster_bindir() {
	if [[ -n ${PG_BINDIR:-} ]]; then
		printf '%s\n' "$PG_BINDIR"
	else
		"${PG_CONFIG:-pg_config}" --bindir
	fi
}

# Runs a command as the OS user that owns the cluster, from / so that a private working
# directory (say /root) does not get in the way.
_cluster_as_pg() {
	if [[ $(id -u) -eq 0 ]]; then
		(cd / && runuser -u "$SHAPE_SYNC_PG_OS_USER" -- "$@")
	else
		(cd / && "$@")
	fi
}

# Succeeds when something listens on TCP port $1 (any address, IPv4 or IPv6).
cluster_port_in_use() {
	local port=$1
	if command -v ss >/dev/null 2>&1; then
		[[ -n $(ss -Htln "sport = :$port" 2>/dev/null) ]]
	else
		(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null ||
			(exec 3<>"/dev/tcp/::1/$port") 2>/dev/null
	fi
}

# Prints the first port from $1 upward on which nothing listens. Where scripts run side by side
# (SHAPE_SYNC_PORT_LANES=N, SHAPE_SYNC_PORT_LANE=0..N-1, see scripts/test.sh), each takes only the
# ports whose remainder by N is its lane: two of them never pick the same free port before
# either listens on it.
cluster_free_port() {
	local port=$1 last=$(($1 + 1000)) lanes=${SHAPE_SYNC_PORT_LANES:-1} lane=${SHAPE_SYNC_PORT_LANE:-0}
	while ((port < last)); do
		if ((port % lanes == lane)) && ! cluster_port_in_use "$port"; then
			printf '%s\n' "$port"
			return 0
		fi
		port=$((port + 1))
	done
	_cluster_say "no free TCP port in $1..$last"
	return 1
}

# _cluster_postmaster_alive [DATA]: the postmaster of DATA (default $SHAPE_SYNC_PGDATA) runs
_cluster_postmaster_alive() {
	local data=${1:-$SHAPE_SYNC_PGDATA} pid
	[[ -r $data/postmaster.pid ]] || return 1
	pid=$(head -n 1 "$data/postmaster.pid" 2>/dev/null) || return 1
	[[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null
}

_cluster_fail() {
	_cluster_say "$*"
	if [[ -n ${SHAPE_SYNC_LOG:-} && -f $SHAPE_SYNC_LOG ]]; then
		_cluster_say "last lines of $SHAPE_SYNC_LOG:"
		tail -n 60 "$SHAPE_SYNC_LOG" >&2 || true
	fi
	return 1
}

cluster_start() {
	local want_http_port=${1:-}
	local bindir dir data pgport http_port line code deadline

	if [[ -n ${_SHAPE_SYNC_CLUSTER_DIR:-} ]]; then
		_cluster_say "a cluster is already running in $_SHAPE_SYNC_CLUSTER_DIR"
		return 1
	fi

	bindir=$(_cluster_bindir) || { _cluster_say "pg_config not found (run scripts/install-deps.sh)"; return 1; }
	[[ -x $bindir/initdb && -x $bindir/pg_ctl ]] ||
		{ _cluster_say "no initdb/pg_ctl in $bindir (is postgresql-15 installed?)"; return 1; }
	command -v curl >/dev/null 2>&1 || { _cluster_say "curl is missing"; return 1; }

	if [[ $(id -u) -eq 0 ]] && ! id -u "$SHAPE_SYNC_PG_OS_USER" >/dev/null 2>&1; then
		_cluster_say "creating system user $SHAPE_SYNC_PG_OS_USER to run PostgreSQL (initdb refuses root)"
		useradd --system --create-home --shell /bin/bash "$SHAPE_SYNC_PG_OS_USER" || return 1
	fi

	# Under /tmp, not $TMPDIR: the PostgreSQL user must reach it, and a Unix socket path
	# must stay under 108 bytes.
	# (Every step checks its status: callers run this in `if`, where set -e does not apply.)
	dir=$(mktemp -d /tmp/shape_sync.XXXXXXXX) || return 1
	_SHAPE_SYNC_CLUSTER_DIR=$dir  # not exported: a child may run a cluster of its own
	if [[ -n ${SHAPE_SYNC_CRASH_REPORT:-} ]]; then
		printf '%s\t%s\n' "$dir" "$0" >>"$SHAPE_SYNC_CRASH_REPORT.clusters" || return 1
	fi
	export SHAPE_SYNC_PG_BINDIR=$bindir
	chmod 755 "$dir" || return 1
	if [[ $(id -u) -eq 0 ]]; then
		chown "$SHAPE_SYNC_PG_OS_USER:" "$dir" || return 1
	fi
	data=$dir/data
	export SHAPE_SYNC_PGDATA=$data
	export SHAPE_SYNC_LOG=$dir/postgres.log

	if ! _cluster_as_pg "$bindir/initdb" -D "$data" -U postgres -A trust --no-sync -E UTF8 \
		--locale=C.UTF-8 >"$dir/initdb.log" 2>&1; then
		_cluster_say "initdb with --locale=C.UTF-8 failed; retrying with --locale=C"
		_cluster_as_pg rm -rf "$data"
		if ! _cluster_as_pg "$bindir/initdb" -D "$data" -U postgres -A trust --no-sync -E UTF8 \
			--locale=C >"$dir/initdb.log" 2>&1; then
			cat "$dir/initdb.log" >&2
			_cluster_say "initdb failed"
			return 1
		fi
	fi

	pgport=$(cluster_free_port "${SHAPE_SYNC_PG_PORT_FROM:-55432}") || return 1
	if [[ -n $want_http_port ]]; then
		if cluster_port_in_use "$want_http_port"; then
			_cluster_say "HTTP port $want_http_port is already in use"
			return 1
		fi
		http_port=$want_http_port
	else
		http_port=$(cluster_free_port "${SHAPE_SYNC_HTTP_PORT_FROM:-3000}") || return 1
	fi

	{
		printf '\n# --- added by scripts/lib/cluster.sh ---\n'
		printf "listen_addresses = ''\n"
		printf "unix_socket_directories = '%s'\n" "$dir"
		printf 'port = %s\n' "$pgport"
		printf "shared_preload_libraries = '%s'\n" "${SHAPE_SYNC_PRELOAD-shape_sync}"
		printf 'wal_level = logical\n'
		printf 'max_replication_slots = 10\n'
		printf 'max_wal_senders = 10\n'
		printf 'max_worker_processes = 32\n'
		# PREPARE TRANSACTION works, and transactions over 1 MB spill to disk in the
		# reorder buffer, so that tests reach both paths with small workloads
		printf 'max_prepared_transactions = 10\n'
		printf 'logical_decoding_work_mem = 1MB\n'
		printf 'shape_sync.port = %s\n' "$http_port"
		printf "shape_sync.listen_addresses = 'localhost'\n"
		printf "shape_sync.database = 'postgres'\n"
		printf "shape_sync.log_memory = '256MB'\n"
		printf 'shape_sync.manage_replica_identity = %s\n' "${SHAPE_SYNC_MANAGE_REPLICA_IDENTITY:-on}"
		# every client of a test (and of this throwaway cluster) comes from one address
		printf 'shape_sync.max_new_shapes_per_client = 0\n'
		printf 'log_min_messages = info\n'
		printf 'logging_collector = off\n'
		if [[ -n ${SHAPE_SYNC_EXTRA_CONF:-} ]]; then
			printf '# --- SHAPE_SYNC_EXTRA_CONF ---\n'
			while IFS= read -r line; do
				printf '%s\n' "$line"
			done <<<"$SHAPE_SYNC_EXTRA_CONF"
		fi
		# last: the crash check reads lines in this form
		printf "log_line_prefix = '%%m [%%p] '\n"
	} | _cluster_as_pg tee -a "$data/postgresql.conf" >/dev/null || return 1

	_cluster_say "starting PostgreSQL in $dir (socket port $pgport, HTTP port $http_port)"
	if ! _cluster_as_pg "$bindir/pg_ctl" -D "$data" -l "$SHAPE_SYNC_LOG" -w -t 60 start >"$dir/pg_ctl.log" 2>&1; then
		cat "$dir/pg_ctl.log" >&2
		_cluster_fail "pg_ctl start failed"
		return 1
	fi

	export PGHOST=$dir PGPORT=$pgport PGUSER=postgres PGDATABASE=postgres
	export SHAPE_SYNC_HTTP_PORT=$http_port
	export SHAPE_SYNC_URL=http://localhost:$http_port

	if [[ ${SHAPE_SYNC_HEALTH_TIMEOUT:-30} == 0 ]]; then
		return 0
	fi
	deadline=$((SECONDS + ${SHAPE_SYNC_HEALTH_TIMEOUT:-30}))
	while :; do
		code=$(curl -sS -o "$dir/health.json" -w '%{http_code}' --max-time 2 \
			"$SHAPE_SYNC_URL/v1/health" 2>/dev/null) || code=000
		if [[ $code == 200 ]]; then
			_cluster_say "shape_sync is up: $SHAPE_SYNC_URL/v1/health -> $(head -c 200 "$dir/health.json")"
			return 0
		fi
		if ! _cluster_postmaster_alive; then
			_cluster_fail "PostgreSQL exited while waiting for $SHAPE_SYNC_URL/v1/health"
			return 1
		fi
		if ((SECONDS >= deadline)); then
			_cluster_fail "timed out after ${SHAPE_SYNC_HEALTH_TIMEOUT:-30}s waiting for" \
				"$SHAPE_SYNC_URL/v1/health to answer 200 (last status: $code)"
			return 1
		fi
		sleep 0.2
	done
}

cluster_psql() {
	"${SHAPE_SYNC_PG_BINDIR:-$(_cluster_bindir)}/psql" -X -q -v ON_ERROR_STOP=1 "$@"
}

cluster_reload() {
	[[ -n ${SHAPE_SYNC_PGDATA:-} ]] || { _cluster_say "no cluster running"; return 1; }
	_cluster_as_pg "$SHAPE_SYNC_PG_BINDIR/pg_ctl" -D "$SHAPE_SYNC_PGDATA" reload >/dev/null
}

# The standby lives in DIR/standby, with its socket in DIR and its log in DIR/standby.log.
cluster_standby_create() {
	local name=$1 dir=${_SHAPE_SYNC_CLUSTER_DIR:-} port
	[[ -n $dir ]] || { _cluster_say "no cluster running"; return 1; }
	port=$((PGPORT + 1))  # its socket file, next to the primary's in DIR (no TCP port)
	_cluster_as_pg "$SHAPE_SYNC_PG_BINDIR/pg_basebackup" -h "$PGHOST" -p "$PGPORT" -U postgres \
		-D "$dir/standby" -R -X stream --no-sync --checkpoint=fast >"$dir/basebackup.log" 2>&1 ||
		{ cat "$dir/basebackup.log" >&2; _cluster_say "pg_basebackup failed"; return 1; }
	{
		printf '\n# --- the standby (scripts/lib/cluster.sh) ---\n'
		printf 'port = %s\n' "$port"
		printf "shared_preload_libraries = ''\n"
		# after the primary_conninfo of pg_basebackup -R, so that this one counts
		printf "primary_conninfo = 'host=%s port=%s user=postgres application_name=%s'\n" \
			"$PGHOST" "$PGPORT" "$name"
	} | _cluster_as_pg tee -a "$dir/standby/postgresql.auto.conf" >/dev/null || return 1
	export SHAPE_SYNC_STANDBY_PGDATA=$dir/standby SHAPE_SYNC_STANDBY_PORT=$port
	cluster_standby_start
}

cluster_sync_standby_create() {
	local name=$1 _
	cluster_standby_create "$name" || return 1
	cluster_psql -c "ALTER SYSTEM SET synchronous_standby_names = '$name'" || return 1
	cluster_reload || return 1
	for _ in $(seq 1 150); do
		[[ $(cluster_psql -At -c "SELECT sync_state FROM pg_stat_replication WHERE application_name = '$name'") == sync ]] &&
			return 0
		sleep 0.2
	done
	_cluster_say "standby $name is not synchronous after 30 s"
	return 1
}

cluster_standby_start() {
	_cluster_as_pg "$SHAPE_SYNC_PG_BINDIR/pg_ctl" -D "$SHAPE_SYNC_STANDBY_PGDATA" \
		-l "$SHAPE_SYNC_STANDBY_PGDATA.log" -w -t 60 start >/dev/null
}

cluster_standby_stop() {
	_cluster_as_pg "$SHAPE_SYNC_PG_BINDIR/pg_ctl" -D "$SHAPE_SYNC_STANDBY_PGDATA" -m fast -w -t 60 \
		stop >/dev/null
}

# --- the crash check (see the header) ---

# _cluster_crash_scan LOG: the lines of LOG that show a crash or a restart no marker allows, as
# "LINE: text", then "left N": the markers no crash used. Exits 1 when it printed a finding.
_cluster_crash_scan() {
	awk '
	BEGIN { allow = 0; episode = 0; found = 0; detail = 0 }
	detail && /\] DETAIL:  / { print FNR ": " $0; detail = 0; next }
	{ detail = 0 }
	/^shape_sync-test: expect-crash/ { allow++; next }
	/\[[0-9]+\] LOG:  ([0-9A-Z][0-9A-Z][0-9A-Z][0-9A-Z][0-9A-Z]: )?[A-Za-z ]+( "[^"]*")? \(PID [0-9]+\) (was terminated by (signal|exception)|exited with exit code ([2-9]|[1-9][0-9]+))/ {
		if (allow > 0 && !episode) { allow--; episode = 1; next }
		print FNR ": " $0; found = 1; detail = 1; next
	}
	/\[[0-9]+\] LOG:  ([0-9A-Z][0-9A-Z][0-9A-Z][0-9A-Z][0-9A-Z]: )?(terminating any other active server processes|all server processes terminated; reinitializing)/ {
		if (episode) next
		print FNR ": " $0; found = 1; next
	}
	/\[[0-9]+\] LOG:  ([0-9A-Z][0-9A-Z][0-9A-Z][0-9A-Z][0-9A-Z]: )?database system is (ready to accept|shut down)/ { episode = 0 }
	END { print "left " allow; exit found }
	' "$1"
}

# cluster_crash_check LOG...: prints FILE:LINE: text for each crash or unasked-for restart the
# logs show (a missing LOG is skipped); fails when there is any.
cluster_crash_check() {
	local log out rc=0
	for log in "$@"; do
		[[ -f $log ]] || continue
		if ! out=$(_cluster_crash_scan "$log"); then
			sed '$d' <<<"$out" | sed "s|^|$log:|"
			rc=1
		fi
	done
	return "$rc"
}

# cluster_expect_crash [REASON]: the next crash of the running cluster (one process dying by a
# signal, and the restart that follows) is a test's own doing, not a finding.
cluster_expect_crash() {
	[[ -n ${SHAPE_SYNC_LOG:-} && -f $SHAPE_SYNC_LOG ]] || { _cluster_say "no cluster running"; return 1; }
	printf 'shape_sync-test: expect-crash: %s\n' "${*:-(no reason given)}" >>"$SHAPE_SYNC_LOG"
}

_cluster_indent() {
	local line
	while IFS= read -r line; do printf '    %s\n' "$line"; done <<<"$1"
}

# _cluster_crash_record DIR [DEAD] [WHO]: runs the crash check on DIR's logs; DEAD: the
# postmaster was found dead (a finding unless a marker is left); WHO: the script that started
# the cluster (default: this one). Reports on stderr and in $SHAPE_SYNC_CRASH_REPORT, with a
# copy of the log next to it.
_cluster_crash_record() {
	local dir=$1 dead=${2:-} who=${3:-$0} log out left findings keep
	for log in "$dir/postgres.log" "$dir/standby.log"; do
		[[ -f $log ]] || continue
		out=$(_cluster_crash_scan "$log") || true
		left=${out##*left }
		findings=$(sed '$d' <<<"$out")
		if [[ $log == */postgres.log && -n $dead ]] && ((left == 0)); then
			findings+=${findings:+$'\n'}"(after the test) $dead"
		fi
		[[ -n $findings ]] || continue
		_cluster_say "CRASH CHECK: $log shows a crash or a restart that no test asked for:"
		_cluster_indent "$findings" >&2
		if [[ -n ${SHAPE_SYNC_CRASH_REPORT:-} ]]; then
			keep=$(dirname "$SHAPE_SYNC_CRASH_REPORT")/crash-$(basename "$dir")-$(basename "$log")
			cp "$log" "$keep" 2>/dev/null || keep="(could not copy it)"
			{
				printf '== %s (cluster of %s; the log is kept as %s)\n' "$log" "${who##*/}" "$keep"
				_cluster_indent "$findings"
			} >>"$SHAPE_SYNC_CRASH_REPORT"
		fi
	done
}

# cluster_crash_check_leftovers: the crash check of every cluster started under this
# SHAPE_SYNC_CRASH_REPORT whose temp dir no cluster_stop removed (its server may still run).
cluster_crash_check_leftovers() {
	local list=${SHAPE_SYNC_CRASH_REPORT:-}.clusters dir who dead
	[[ -n ${SHAPE_SYNC_CRASH_REPORT:-} && -f $list ]] || return 0
	while IFS=$'\t' read -r dir who; do
		[[ -d $dir && $dir != "${_SHAPE_SYNC_CLUSTER_DIR:-}" ]] || continue
		dead=
		if _cluster_postmaster_alive "$dir/data"; then
			_cluster_say "the cluster in $dir (started by $who) was never stopped and still runs"
		elif [[ -f $dir/data/postmaster.pid ]]; then
			dead="the postmaster is gone and its postmaster.pid is still there: it died without a shutdown"
		fi
		_cluster_crash_record "$dir" "$dead" "$who"
	done <"$list"
}

cluster_stop() {
	local dir=${_SHAPE_SYNC_CLUSTER_DIR:-} pid dead=''
	[[ -n $dir ]] || return 0
	if [[ -f $dir/standby/postmaster.pid ]]; then
		_cluster_as_pg "$SHAPE_SYNC_PG_BINDIR/pg_ctl" -D "$dir/standby" -m immediate -w -t 30 stop \
			>/dev/null 2>&1 || true
	fi
	if [[ -f $dir/data/postmaster.pid ]] && ! _cluster_postmaster_alive "$dir/data"; then
		dead="the postmaster is gone and its postmaster.pid is still there: it died without a shutdown"
	elif [[ -f $dir/data/postmaster.pid ]]; then
		if ! _cluster_as_pg "$SHAPE_SYNC_PG_BINDIR/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop \
			>/dev/null 2>&1; then
			_cluster_say "fast shutdown failed; stopping immediately"
			_cluster_as_pg "$SHAPE_SYNC_PG_BINDIR/pg_ctl" -D "$dir/data" -m immediate -w -t 30 stop \
				>/dev/null 2>&1 || true
			pid=$(head -n 1 "$dir/data/postmaster.pid" 2>/dev/null) || pid=
			if [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
				kill -KILL "$pid" 2>/dev/null || true
			fi
		fi
	fi
	_cluster_crash_record "$dir" "$dead"
	rm -rf "$dir"
	unset _SHAPE_SYNC_CLUSTER_DIR SHAPE_SYNC_PGDATA SHAPE_SYNC_LOG SHAPE_SYNC_URL SHAPE_SYNC_HTTP_PORT
	unset SHAPE_SYNC_STANDBY_PGDATA SHAPE_SYNC_STANDBY_PORT
	unset PGHOST PGPORT PGDATABASE
	return 0
}

# cluster_restart: a fast restart of the primary (after ALTER SYSTEM of a restart-only setting)
cluster_restart() {
	[[ -n ${SHAPE_SYNC_PGDATA:-} ]] || { _cluster_say "no cluster running"; return 1; }
	_cluster_as_pg "$SHAPE_SYNC_PG_BINDIR/pg_ctl" -D "$SHAPE_SYNC_PGDATA" -l "$SHAPE_SYNC_LOG" -m fast \
		-w -t 60 restart >/dev/null
}
