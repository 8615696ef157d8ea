#!/usr/bin/env bash
#
# The seeded randomized integrity test of subquery shapes (test/integrity/subquery.mjs): shapes
# on issues whose where clauses read memberships and projects through `IN (SELECT ...)`,
# `NOT IN`, OR/AND with plain conditions and the row form, followed by raw clients that apply
# tags, active_conditions and move events as @tanstack/electric-db-collection does, under
# concurrent random writers on all three tables; at quiescent points between write bursts, and
# then after each of STEPS transactions made one at a time, every client's rows must equal
# PostgreSQL's SELECT of its where clause. See the header of subquery.mjs for what it covers.
#
# test/integration/integrity_subquery.sh [SEED...]: runs each seed on a cluster of its own
# (default: two random seeds, or $SEED alone; about 20 s a seed). Knobs passed through: DURATION
# (s of writes per seed; 12 here, for the time of the README's test command: run longer seeds by
# hand, e.g. DURATION=60 test/integration/integrity_subquery.sh 1 2 3), STEPS (30 here), WRITERS,
# CONVERGE_TIMEOUT, VERBOSE, INTEGRITY_SUBQUERY_SHAPES
# and INTEGRITY_SUBQUERY_SIMPLE (to narrow a failure down), INTEGRITY_SUBQUERY_NO_REFETCH=1 (any
# 409 is a failure). Ports: HTTP from $SHAPE_SYNC_HTTP_PORT_FROM (default 45300), PostgreSQL
# from $SHAPE_SYNC_PG_PORT_FROM (default 48300). INTEGRITY_KEEP_LOG=PATH keeps a failing seed's
# server log as PATH.<seed>.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

root=$(cd "$here/../.." && pwd)
if [[ ! -d $root/test/node_modules/pg ]]; then
	fail "test/node_modules is missing (run scripts/install-deps.sh)"
	finish
fi

seeds=("$@")
if ((${#seeds[@]} == 0)); then
	if [[ -n ${SEED:-} ]]; then
		seeds=("$SEED")
	else
		seeds=("$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')" "$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')")
	fi
fi

export SHAPE_SYNC_PG_PORT_FROM=${SHAPE_SYNC_PG_PORT_FROM:-48300}
export DURATION=${DURATION:-12} STEPS=${STEPS:-30}
# a step waits for every client to be told the transaction's position: a shape it did not
# touch tells its client at the end of its long poll
export SHAPE_SYNC_EXTRA_CONF="shape_sync.long_poll_timeout = '250ms'
shape_sync.chunk_bytes_threshold = '16kB'${SHAPE_SYNC_EXTRA_CONF:+
$SHAPE_SYNC_EXTRA_CONF}"

for seed in "${seeds[@]}"; do
	echo "# === seed $seed (replay: SEED=$seed $0)"
	if ! start_cluster_retrying "${SHAPE_SYNC_HTTP_PORT_FROM:-45300}"; then
		fail "seed $seed: cluster_start failed"
		continue
	fi
	rc=
	started=$SECONDS
	# subquery.mjs prints `ok - ...` / `not ok - ...` lines: numbered here, as they come
	: >"$work/out"
	while IFS= read -r line; do
		case $line in
		'ok - '*) pass "${line#ok - }" ;;
		'not ok - '*)
			fail "${line#not ok - }"
			echo "$line" >>"$work/out"
			;;
		'#subquery.mjs exit '*) rc=${line#\#subquery.mjs exit } ;;
		*) printf '%s\n' "$line" ;;
		esac
	done < <(
		cd "$root/test" && SEED=$seed timeout -k 10 420 node integrity/subquery.mjs 2>&1
		echo "#subquery.mjs exit $?"
	)
	rc=${rc:-1}
	echo "# seed $seed: subquery.mjs exited $rc after $((SECONDS - started)) s"
	if ((rc == 124 || rc == 137)); then
		fail "seed $seed: [HARNESS] subquery.mjs killed after 420 s"
	elif ((rc != 0)) && ! grep -q '^not ok - ' "$work/out"; then
		fail "seed $seed: subquery.mjs exited $rc without a failing check"
	fi
	if ((rc != 0)); then
		echo "# seed $seed: server log lines with ERROR/WARNING/FATAL/PANIC (last 30; writers' expected errors and refusals while recovering left out):"
		grep -E 'ERROR|WARNING|FATAL|PANIC|TRAP' "$SHAPE_SYNC_LOG" |
			grep -vE 'violates foreign key|deadlock detected|lock timeout|duplicate key|in recovery mode|is starting up' |
			tail -n 30 | sed 's/^/#   /' || true
		if [[ -n ${INTEGRITY_KEEP_LOG:-} ]]; then
			cp "$SHAPE_SYNC_LOG" "$INTEGRITY_KEEP_LOG.$seed" && echo "# server log kept in $INTEGRITY_KEEP_LOG.$seed"
		fi
	fi
	crashes=$({
		grep -E 'PANIC|TRAP:|panic at' "$SHAPE_SYNC_LOG" || true
		cluster_crash_check "$SHAPE_SYNC_LOG" || true
	} | head -n 10) || true
	if [[ -n $crashes ]]; then
		fail "seed $seed: [SERVER] the server log shows a crash"
		while IFS= read -r line; do echo "#   $line"; done <<<"$crashes"
	else
		pass "seed $seed: no crash in the server log"
	fi
	cluster_stop
done
finish
