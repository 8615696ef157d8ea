# shellcheck shell=bash
#
# bench/lib.sh: what several benchmarks share.
#
# The gate: to time decoding alone, a commit that waits for a synchronous standby that does
# not exist (the cluster runs with synchronous_standby_names = 'bench_gate' and
# synchronous_commit = local) stays in progress at its commit record, where the worker stops
# (src/pg/decoder.c, dec_commit_still_running), while the commits to time are written behind
# it with synchronous_commit = off or local, which do not wait.  gate_release cancels the
# wait; the end of that commit wakes the worker.  The callers keep $out (a scratch folder)
# and helpers (background PIDs they kill on exit).

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
