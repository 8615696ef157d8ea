# shellcheck shell=bash
#
# test/integration/lib.sh: helpers for the integration scripts.
#
# Each script starts a cluster of its own (cluster_start), so that what it
# does to the server (restarts, small memory, no preload) touches no other
# test.  `pass`/`fail` print TAP-like lines; `finish` exits non-zero when
# any check failed.

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../../scripts/lib/cluster.sh
source "$here/../../scripts/lib/cluster.sh"

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

# wait_for SECONDS COMMAND...: retries COMMAND every 0.2 s until it succeeds.
wait_for() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@"; do
		((SECONDS < deadline)) || return 1
		sleep 0.2
	done
}
