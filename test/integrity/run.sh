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
# Environment passed through to integrity.mjs: SEED, DURATION and RESTART_DURATION (14 s and
# 7 s here, for the time of the README's test command; every chaos kind still comes in the
# first 10 s of a seed), WRITERS,
# INTEGRITY_SSE (0 turns the SSE clients off), INTEGRITY_RESTART, INTEGRITY_RESTART_MODE
# (fast/immediate/kill; default: drawn from the seed), CONVERGE_TIMEOUT, VERBOSE,
# INTEGRITY_EQUALITY_SHAPES (N more shapes that the equality index routes, one raw client each),
# and the chaos knobs INTEGRITY_CHAOS (0 turns all chaos events off), INTEGRITY_CHAOS_EVENTS
# (kinds and weights, e.g. `truncate,addcol:3`), INTEGRITY_CHAOS_GAP, INTEGRITY_CHAOS_BIG_ROWS
# (see the header of integrity.mjs).
#
# INTEGRITY_COMPACTION_FACTOR (default 0: off) sets shape_sync.compaction_factor; 1.2 is
# aggressive (a log is compacted once it grew by a fifth), so that clients resume from
# offsets before, inside and after compacted parts all the time (integrity_compaction.sh of
# test/integration runs it so).
#
# INTEGRITY_SYNC_STANDBY=1 (default 0): before each seed's test, a physical standby of the
# cluster is made with pg_basebackup (cluster_standby_create of scripts/lib/cluster.sh) and
# named in synchronous_standby_names, and the chaos loop stops it for 0.5-3 s now and then,
# so that commits stall and resume.
#
# A seed fails too when the server log shows a PANIC, a failed assertion or a crash that no
# cluster_expect_crash marker announced (cluster_crash_check of scripts/lib/cluster.sh; the
# SIGKILL of the worker that integrity.mjs's restart phase may do is announced).
# A failing seed prints the lines of the server log with ERROR/WARNING/FATAL/PANIC; each
# failing check of integrity.mjs is classed [DIVERGENCE] (a client's rows differ from
# PostgreSQL's), [SERVER] (another server misbehaviour) or [HARNESS] (the test's own
# machinery). INTEGRITY_KEEP_LOG=PATH keeps a failing seed's server log as PATH.<seed>.
# The node modules come from test/node_modules (see the header of integrity.mjs); run
# scripts/install-deps.sh first.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=../../scripts/lib/cluster.sh
source "$root/scripts/lib/cluster.sh"

# A synchronous standby named integ_standby, for INTEGRITY_SYNC_STANDBY=1; integrity.mjs stops
# and starts it through the exported INTEGRITY_STANDBY_* (cluster_stop stops it at the end).
sync_standby_start() {
	export INTEGRITY_STANDBY_NAME=integ_standby
	cluster_sync_standby_create "$INTEGRITY_STANDBY_NAME" || return 1
	export INTEGRITY_STANDBY_PGDATA=$SHAPE_SYNC_STANDBY_PGDATA INTEGRITY_STANDBY_LOG=$SHAPE_SYNC_STANDBY_PGDATA.log
}

if [[ ! -d $root/test/node_modules/@electric-sql/client || ! -d $root/test/node_modules/pg ]]; then
	echo "not ok 1 - test/node_modules is missing (run scripts/install-deps.sh)"
	exit 1
fi

seeds=("$@")
if ((${#seeds[@]} == 0)); then
	seeds=("${SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}")
fi

export INTEGRITY_COMPACTION_FACTOR=${INTEGRITY_COMPACTION_FACTOR:-0}
export DURATION=${DURATION:-14} RESTART_DURATION=${RESTART_DURATION:-7}
export SHAPE_SYNC_EXTRA_CONF="shape_sync.long_poll_timeout = '2s'
shape_sync.chunk_bytes_threshold = '16kB'
shape_sync.compaction_factor = $INTEGRITY_COMPACTION_FACTOR${SHAPE_SYNC_EXTRA_CONF:+
$SHAPE_SYNC_EXTRA_CONF}"

# With three seeds or more and no INTEGRITY_RESTART_MODE, the seeds take the restart modes in
# turn, so that a run restarts each way at least once (one seed alone draws its mode from itself)
modes=(fast immediate kill)
trap cluster_stop EXIT
failed=()
i=0
for seed in "${seeds[@]}"; do
	if [[ -z ${INTEGRITY_RESTART_MODE:-} ]] && ((${#seeds[@]} >= 3)); then
		mode=${modes[i % 3]}
		echo "# === seed $seed, restart mode $mode (replay: SEED=$seed INTEGRITY_RESTART_MODE=$mode)"
	else
		mode=${INTEGRITY_RESTART_MODE:-}
		echo "# === seed $seed"
	fi
	i=$((i + 1))
	# An HTTP port away from the 3000.. range that other clusters pick by default: while
	# PostgreSQL restarts, the port is free for a moment, and another test's cluster_start
	# could take it.
	port=$(cluster_free_port $((5200 + RANDOM % 600))) || port=
	cluster_start "$port" || { echo "not ok - seed $seed: cluster_start failed"; failed+=("$seed"); continue; }
	if [[ ${INTEGRITY_SYNC_STANDBY:-0} == 1 ]] && ! sync_standby_start; then
		echo "not ok - seed $seed: [HARNESS] the synchronous standby could not be set up"
		failed+=("$seed")
		cluster_stop
		continue
	fi
	rc=0
	SEED=$seed INTEGRITY_RESTART_MODE=$mode timeout -k 10 200 node "$here/integrity.mjs" || rc=$?
	if ((rc != 0)); then
		failed+=("$seed")
		((rc == 124 || rc == 137)) && echo "not ok - seed $seed: [HARNESS] integrity.mjs killed after 200 s"
		# the writers' own failures that chaos causes on purpose are left out (counted)
		noise='relation "integ_[abc]" does not exist|canceling statement due to lock timeout|there is no transaction in progress|duplicate key value violates|deadlock detected|terminating connection due to administrator command'
		echo "# seed $seed failed (exit $rc); server log ($SHAPE_SYNC_LOG), lines with ERROR/WARNING/FATAL/PANIC (last 40;" \
			"$(grep -E 'ERROR|WARNING|FATAL' "$SHAPE_SYNC_LOG" | grep -cE "$noise") lines of writers' expected errors left out):"
		grep -E 'ERROR|WARNING|FATAL|PANIC|TRAP|terminated by signal|panic at' "$SHAPE_SYNC_LOG" | grep -vE "$noise" | tail -n 40 | sed 's/^/#   /' || true
		if [[ -n ${INTEGRITY_STANDBY_LOG:-} && -f $INTEGRITY_STANDBY_LOG ]]; then
			echo "# standby log, lines with ERROR/FATAL/PANIC (last 10):"
			grep -E 'ERROR|FATAL|PANIC' "$INTEGRITY_STANDBY_LOG" | tail -n 10 | sed 's/^/#   /' || true
		fi
		if [[ -n ${INTEGRITY_KEEP_LOG:-} ]]; then
			cp "$SHAPE_SYNC_LOG" "$INTEGRITY_KEEP_LOG.$seed" && echo "# server log kept in $INTEGRITY_KEEP_LOG.$seed"
		fi
	fi
	compactions=$(cluster_psql -At -c "CREATE EXTENSION IF NOT EXISTS shape_sync" \
		-c "SELECT coalesce(sum(compactions), 0) FROM shape_sync.shapes" 2>/dev/null | tail -n 1) || compactions='?'
	echo "# seed $seed: the shapes held at the end were compacted $compactions times in all"
	if grep -q 'could not start its HTTP server' "$SHAPE_SYNC_LOG"; then
		echo "# environment: after the restart shape_sync could not listen on its HTTP port (taken by"
		echo "# another process meanwhile); the clients talked to that process. This seed's result says"
		echo "# nothing about shape_sync: run it again."
	fi
	# a crash: a PANIC or failed assertion, or a process killed by a signal that no
	# cluster_expect_crash marker announced (integrity.mjs marks its SIGKILL of the worker)
	crashes=$({
		grep -E 'PANIC|TRAP:|panic at' "$SHAPE_SYNC_LOG" || true
		cluster_crash_check "$SHAPE_SYNC_LOG" || true
	} | head -n 10) || true
	if [[ -n $crashes ]]; then
		echo "not ok - seed $seed: [SERVER] the server log shows a crash"
		sed 's/^/#   /' <<<"$crashes"
		failed+=("$seed")
	fi
	cluster_stop
done

if ((${#failed[@]})); then
	echo "# FAILED seeds: $(printf '%s\n' "${failed[@]}" | awk '!seen[$0]++' | tr '\n' ' ')"
	exit 1
fi
echo "# all seeds passed: ${seeds[*]}"
