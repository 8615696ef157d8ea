#!/usr/bin/env bash
#
# The worker's life cycle: SIGHUP applies reloadable GUCs, a terminated
# worker comes back (and restores the shapes it held from disk: old handles go on),
# and a fast shutdown stops it cleanly.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
trap cluster_stop EXIT

cluster_start "$(cluster_free_port 4300)"
cluster_psql <<'SQL'
CREATE TABLE t (id int PRIMARY KEY, v text);
INSERT INTO t VALUES (1, 'a');
SQL
url="$SHAPE_SYNC_URL/v1/shape?table=t"

handle=$(curl -s -D - -o /dev/null "$url&offset=-1" | tr -d '\r' | sed -n 's/^electric-handle: //Ip')
check "a shape is created" test -n "$handle"
cc=$(curl -s -D - -o /dev/null "$url&offset=0_0&handle=$handle" | tr -d '\r' | sed -n 's/^cache-control: //Ip')
expect_eq "catch-up cache-control uses the defaults" "public, max-age=60, stale-while-revalidate=300" "$cc"

cluster_psql -c "ALTER SYSTEM SET shape_sync.cache_max_age = 7" -c "ALTER SYSTEM SET shape_sync.cache_stale_age = 9"
cluster_reload
new_cc() {
	[[ $(curl -s -D - -o /dev/null "$url&offset=0_0&handle=$handle" | tr -d '\r' |
		sed -n 's/^cache-control: //Ip') == "public, max-age=7, stale-while-revalidate=9" ]]
}
check "SIGHUP applies shape_sync.cache_max_age and cache_stale_age" wait_for 60 new_cc

pid=$(worker_pid)
cluster_psql -At -c "SELECT pg_terminate_backend($pid)" >/dev/null
back() { local p; p=$(worker_pid); [[ -n $p && $p != "$pid" ]] && [[ $(http_status "$SHAPE_SYNC_URL/v1/health") == 200 ]]; }
check "a terminated worker is restarted and serves again" wait_for 60 back
expect_match "its exit is logged as a clean shutdown" 'shape_sync shutting down' "$(cat "$SHAPE_SYNC_LOG")"
expect_eq "the old handle is served after the restart (the shape was restored)" 200 \
	"$(http_status "$url&offset=0_0&handle=$handle")"

# pg_ctl -w fails when the server is not down within its -t (60 s): a hang, not a slow machine
fast_stop() {
	if [[ $(id -u) -eq 0 ]]; then
		runuser -u shapesync -- "$SHAPE_SYNC_PG_BINDIR/pg_ctl" -D "$SHAPE_SYNC_PGDATA" -m fast -w -t 60 stop >/dev/null
	else
		"$SHAPE_SYNC_PG_BINDIR/pg_ctl" -D "$SHAPE_SYNC_PGDATA" -m fast -w -t 60 stop >/dev/null
	fi
}
t0=$(now)
check "a fast shutdown completes (pg_ctl -w -t 60)" fast_stop
echo "# the fast shutdown took $(diff_s "$t0" "$(now)") s"
log=$(cat "$SHAPE_SYNC_LOG")
check "no crash, PANIC or FATAL from the worker in the log" \
	bash -c '! grep -E "PANIC|terminated by signal|was terminated|TRAP:|FATAL:.*shape_sync" "$1"' _ "$SHAPE_SYNC_LOG"
expect_match "the server shut down" 'database system is shut down' "$log"
finish
