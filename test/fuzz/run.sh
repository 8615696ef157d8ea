#!/usr/bin/env bash
#
# test/fuzz/run.sh: the HTTP fuzz stage (scripts/test.sh runs it as stage fuzz).
#
# Starts a throwaway cluster of its own (a crash of the fuzz restarts that instance, not the
# one the other stages use), creates the fuzzer's tables (node http_fuzz.mjs --setup-sql),
# makes shape_sync.role a role that may not read fz_items.secret, shortens the long-poll
# timeout to 1 s (live requests answer quickly), allows DELETE, keeps a writer committing a
# change to each table every half second (so that the fuzzed where clauses are also matched
# against changes), and runs test/fuzz/http_fuzz.mjs against it. Then the crash check of
# scripts/lib/cluster.sh on the live server log: any process killed by a signal, or a restart,
# fails the stage even when every answer looked right.
#
# Prints the fuzzer's lines, then "fuzz: seed S, N requests, F failures" (F counts a crash in
# the log as one more); exits non-zero when anything failed.
#
# Environment: those of http_fuzz.mjs (SHAPE_SYNC_FUZZ_SEED, SHAPE_SYNC_FUZZ_REQUESTS,
# SHAPE_SYNC_FUZZ_CONCURRENCY, SHAPE_SYNC_FUZZ_TIMEOUT_MS, SHAPE_SYNC_FUZZ_ONLY), and
# SHAPE_SYNC_FUZZ_OUT: a folder for the failing requests' bytes and, on a failure, the server
# log (fuzz-postgres.log). Port and PostgreSQL knobs as for scripts/lib/cluster.sh.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=../../scripts/lib/cluster.sh
source "$root/scripts/lib/cluster.sh"

writer_pid=
cleanup() {
	if [[ -n $writer_pid ]]; then
		kill "$writer_pid" 2>/dev/null || true
		wait "$writer_pid" 2>/dev/null || true
	fi
	cluster_stop
}
trap cleanup EXIT

export SHAPE_SYNC_EXTRA_CONF="shape_sync.long_poll_timeout = '1s'
shape_sync.allow_shape_deletion = on${SHAPE_SYNC_EXTRA_CONF:+
$SHAPE_SYNC_EXTRA_CONF}"
started=0
for _ in 1 2 3; do
	if cluster_start "$(cluster_free_port "${SHAPE_SYNC_HTTP_PORT_FROM:-4700}")"; then
		started=1
		break
	fi
	cluster_stop
	sleep 1
done
if ((!started)); then
	echo "not ok - the fuzz cluster did not start"
	echo "fuzz: seed -, 0 requests, 1 failures"
	exit 1
fi

node "$here/http_fuzz.mjs" --setup-sql | cluster_psql >/dev/null
cluster_psql -c "ALTER SYSTEM SET shape_sync.role = 'fz_reader'" >/dev/null
cluster_reload

# the writer: a change to each table every half second
(
	i=0
	while :; do
		i=$((i + 1))
		cluster_psql -c "UPDATE fz_items SET title = 'w$i', n = n + 1 WHERE id = $((i % 300 + 1))" \
			-c "INSERT INTO fz_nopk VALUES ($((i % 50)), 'w$i')" \
			-c "UPDATE \"Fz Quoted\" SET \"weird col\" = 'w$i' WHERE \"Id\" = $((i % 50 + 1))" \
			>/dev/null 2>&1 || true
		sleep 0.5
	done
) &
writer_pid=$!

rc=0
node "$here/http_fuzz.mjs" | tee "${TMPDIR:-/tmp}/shape_sync_fuzz.$$.out" || rc=$?
summary=$(grep -E '^http_fuzz: seed ' "${TMPDIR:-/tmp}/shape_sync_fuzz.$$.out" | tail -n 1 || true)
rm -f "${TMPDIR:-/tmp}/shape_sync_fuzz.$$.out"

# after a crash, PostgreSQL may still be recovering: a fast shutdown then waits (see
# cluster_stop), so give it up to 30 s to serve again before the check and the stop
for _ in $(seq 1 150); do
	[[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$SHAPE_SYNC_URL/v1/health") == 200 ]] && break
	sleep 0.2
done

crashed=0
if ! findings=$(cluster_crash_check "$SHAPE_SYNC_LOG"); then
	crashed=1
	echo "not ok - the server log shows a crash or a restart during the fuzz:"
	while IFS= read -r line; do printf '#   %s\n' "$line"; done <<<"$findings"
else
	echo "ok - the server log shows no crash and no restart"
fi
if ((rc != 0 || crashed)) && [[ -n ${SHAPE_SYNC_FUZZ_OUT:-} ]]; then
	mkdir -p "$SHAPE_SYNC_FUZZ_OUT"
	cp "$SHAPE_SYNC_LOG" "$SHAPE_SYNC_FUZZ_OUT/fuzz-postgres.log" && echo "# server log kept in $SHAPE_SYNC_FUZZ_OUT/fuzz-postgres.log"
fi
if [[ $summary =~ ^http_fuzz:\ seed\ ([0-9]+),\ ([0-9]+)\ requests,\ ([0-9]+)\ failures$ ]]; then
	echo "fuzz: seed ${BASH_REMATCH[1]}, ${BASH_REMATCH[2]} requests, $((BASH_REMATCH[3] + crashed)) failures"
else
	echo "fuzz: seed -, 0 requests, 1 failures"
	rc=1
fi
((rc == 0 && !crashed))
