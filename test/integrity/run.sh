#!/usr/bin/env bash
#
# test/integrity/run.sh [SEED...]: the randomized end-to-end integrity test of live mode.
#
# For each seed (default: one random seed, or $SEED), starts a throwaway cluster of its own
# with a short long-poll timeout and small chunks, so that a short workload exercises
# timeouts and chunk boundaries in the middle of transactions, and runs
# test/integrity/integrity.mjs against it. Prints TAP-like `ok`/`not ok` lines; exits
# non-zero when any check of any seed failed.
#
# Environment passed through to integrity.mjs: SEED, DURATION, RESTART_DURATION, WRITERS,
# INTEGRITY_SSE (0 turns the SSE clients off), INTEGRITY_RESTART, CONVERGE_TIMEOUT, VERBOSE.
# The node modules come from test/http/node_modules (see the header of integrity.mjs); run
# scripts/install-deps.sh first.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=../../scripts/lib/cluster.sh
source "$root/scripts/lib/cluster.sh"

if [[ ! -d $root/test/http/node_modules/@electric-sql/client || ! -d $root/test/http/node_modules/pg ]]; then
	echo "not ok 1 - test/http/node_modules is missing (run scripts/install-deps.sh)"
	exit 1
fi

seeds=("$@")
if ((${#seeds[@]} == 0)); then
	seeds=("${SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}")
fi

export SHAPE_SYNC_EXTRA_CONF="shape_sync.long_poll_timeout = '2s'
shape_sync.chunk_bytes_threshold = '16kB'${SHAPE_SYNC_EXTRA_CONF:+
$SHAPE_SYNC_EXTRA_CONF}"

trap cluster_stop EXIT
failed=()
for seed in "${seeds[@]}"; do
	echo "# === seed $seed"
	# An HTTP port away from the 3000.. range that other clusters pick by default: while
	# PostgreSQL restarts, the port is free for a moment, and another test's cluster_start
	# could take it.
	port=$(cluster_free_port $((5200 + RANDOM % 600))) || port=
	cluster_start "$port" || { echo "not ok - seed $seed: cluster_start failed"; failed+=("$seed"); continue; }
	rc=0
	SEED=$seed timeout -k 10 180 node "$here/integrity.mjs" || rc=$?
	if ((rc != 0)); then
		failed+=("$seed")
		echo "# seed $seed failed (exit $rc); server log, lines with ERROR/WARNING/FATAL/PANIC (last 40):"
		grep -E 'ERROR|WARNING|FATAL|PANIC|TRAP|terminated by signal' "$SHAPE_SYNC_LOG" | tail -n 40 | sed 's/^/#   /' || true
	fi
	if grep -q 'could not start its HTTP server' "$SHAPE_SYNC_LOG"; then
		echo "# environment: after the restart shape_sync could not listen on its HTTP port (taken by"
		echo "# another process meanwhile); the clients talked to that process. This seed's result says"
		echo "# nothing about shape_sync: run it again."
	fi
	if grep -qE 'PANIC|TRAP:|terminated by signal|server process .* was terminated' "$SHAPE_SYNC_LOG"; then
		echo "not ok - seed $seed: the server log shows a crash"
		grep -E 'PANIC|TRAP:|terminated by signal|was terminated' "$SHAPE_SYNC_LOG" | head -n 10 | sed 's/^/#   /'
		failed+=("$seed")
	fi
	cluster_stop
done

if ((${#failed[@]})); then
	echo "# FAILED seeds: ${failed[*]}"
	exit 1
fi
echo "# all seeds passed: ${seeds[*]}"
