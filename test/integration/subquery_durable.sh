#!/usr/bin/env bash
#
# Shapes with subqueries across restarts (test/integrity/subquery_durable.mjs does the
# clients' side): their value sets are kept on disk with their logs, so that after a fast
# restart, an immediate stop, a SIGKILL of the worker and an immediate stop that leaves bytes
# past the value sets file's durable length, each shape is restored with its handle, its
# clients go on at their (handle, offset) with 200, and the moves committed before, around and
# after the stop reach them exactly once: every client's rows equal the SELECT of its where
# clause (one-level IN and NOT IN sharing a set, a nested select with kept rows, an OR with a
# plain condition, a set with no value, a plain shape beside them), and the metrics count as
# many sets, values and kept rows as before the stop. A shape whose move-in is in flight is
# left out of the manifest, and its client alone gets 409 after a stop; a value sets file
# that is missing drops the shapes with subqueries only, and says so; a domain CHECK of an
# untrusted owner added to a nested select's table while its shape is kept keeps the shape from
# being restored, and never runs as the worker's role.
#
# The Node script calls this script back for what needs the cluster: `--restart MODE` (fast,
# immediate, sigkill, junk-tail, drop-sets) and `--listed` (the manifest's durable_lsn and the
# handles it lists, on one line). SUBQUERY_DURABLE_KEEP_LOG=PATH keeps the server log as PATH.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"

serving() { [[ $(http_status "$SHAPE_SYNC_URL/v1/health") == 200 ]]; }
restored_lines() { grep -c "shape_sync restored [0-9]* of [0-9]* shapes from disk" "$SHAPE_SYNC_LOG" || true; }
more_restored() { (($(restored_lines) > $1)); }
ready_lines() { grep -c 'database system is ready to accept connections' "$SHAPE_SYNC_LOG" || true; }
more_ready() { (($(ready_lines) > $1)); }
pg_ctl_as_pg() { _cluster_as_pg "$SHAPE_SYNC_PG_BINDIR/pg_ctl" -D "$SHAPE_SYNC_PGDATA" "$@" >/dev/null; }
store() { printf '%s/pg_shape_sync' "$SHAPE_SYNC_PGDATA"; }

# The callbacks: the cluster's variables come from the environment of the Node script.
if [[ ${1:-} == --listed ]]; then
	# the manifest's durable_lsn, then the handles it lists
	_cluster_as_pg cat "$(store)/manifest" 2>/dev/null |
		"$py" "$here/shape_client.py" manifest - \
			'" ".join([str(m["header"]["durable_lsn"])] + [s["handle"] for s in m["shapes"]])' ||
		true
	exit 0
fi
if [[ ${1:-} == --restart ]]; then
	before=$(restored_lines)
	lines=$(wc -l <"$SHAPE_SYNC_LOG")
	case $2 in
	fast) cluster_restart ;;
	immediate | drop-sets | junk-tail)
		pg_ctl_as_pg -m immediate -w -t 60 stop
		if [[ $2 == drop-sets ]]; then
			_cluster_as_pg bash -c 'rm -f "$1"/sets.*' _ "$(store)"
		elif [[ $2 == junk-tail ]]; then
			# bytes past the length the manifest names, as a round whose manifest never came
			# leaves them: not read
			gen=$(_cluster_as_pg cat "$(store)/manifest" |
				"$py" "$here/shape_client.py" manifest - 'm["header"]["sets_generation"]')
			_cluster_as_pg bash -c 'head -c 300 /dev/urandom >>"$1/sets.$2"' _ "$(store)" "$gen"
		fi
		pg_ctl_as_pg -l "$SHAPE_SYNC_LOG" -w -t 60 start
		;;
	sigkill)
		pid=$(worker_pid)
		ready=$(ready_lines)
		cluster_expect_crash "subquery_durable.sh: SIGKILL to the shape_sync worker $pid"
		kill -KILL "$pid"
		wait_for 90 more_ready "$ready"
		;;
	*)
		echo "unknown restart mode $2" >&2
		exit 2
		;;
	esac
	wait_for 90 serving
	wait_for 90 more_restored "$before"
	# what this start said about the stored shapes, for the Node script to check
	tail -n +$((lines + 1)) "$SHAPE_SYNC_LOG" |
		grep -E "shape_sync restored [0-9]+ of [0-9]+ shapes|is not restored|cannot read back the value sets" |
		sed 's/^/# log: /' || true
	exit 0
fi

init_work
root=$(cd "$here/../.." && pwd)
if [[ ! -d $root/test/node_modules/pg ]]; then
	fail "test/node_modules is missing (run scripts/install-deps.sh)"
	finish
fi
# a move-in's query held by a lock waits for the stop, not for its timeout (a failed one rotates)
export SHAPE_SYNC_EXTRA_CONF="shape_sync.long_poll_timeout = '500ms'
shape_sync.subset_statement_timeout = '5min'"
start_cluster_retrying 4760
export _SHAPE_SYNC_CLUSTER_DIR SUBQUERY_DURABLE_CALLBACK="$here/../integration/$(basename "$0")"

rc=
while IFS= read -r line; do
	case $line in
	'ok - '*) pass "${line#ok - }" ;;
	'not ok - '*) fail "${line#not ok - }" ;;
	'#subquery_durable.mjs exit '*) rc=${line#\#subquery_durable.mjs exit } ;;
	*) printf '%s\n' "$line" ;;
	esac
done < <(
	cd "$root/test" && timeout -k 10 600 node integrity/subquery_durable.mjs 2>&1
	echo "#subquery_durable.mjs exit $?"
)
if [[ ${rc:-1} != 0 ]]; then
	fail "subquery_durable.mjs exited ${rc:-?}"
fi
if [[ -n ${SUBQUERY_DURABLE_KEEP_LOG:-} ]]; then
	cp "$SHAPE_SYNC_LOG" "$SUBQUERY_DURABLE_KEEP_LOG" && echo "# server log kept in $SUBQUERY_DURABLE_KEEP_LOG"
fi
check "no PANIC or assertion failure in the server log" \
	bash -c '! grep -E "PANIC|TRAP:" "$1"' _ "$SHAPE_SYNC_LOG"
finish
