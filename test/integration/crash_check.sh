#!/usr/bin/env bash
#
# The crash check of scripts/lib/cluster.sh sees a real crash: a backend killed with SIGSEGV
# makes PostgreSQL restart the instance, and cluster_crash_check reports the signal and the
# restart from the server log; a cluster_expect_crash marker before a kill lets exactly that
# one crash pass, not the next; and cluster_stop writes what it finds to
# SHAPE_SYNC_CRASH_REPORT with a copy of the log. Every kill here is announced in the live log
# (the third is reported on purpose, to a report file of this script's own), so the run-wide
# crash check of scripts/test.sh stays clean; the checker's findings are checked on copies of
# the log with the markers taken out, and on the log itself.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

start_cluster_retrying 4640
log=$SHAPE_SYNC_LOG

# sleeping_backend: starts a backend that sleeps, prints its PID once it runs
sleeping_backend() {
	local pid=
	cluster_psql -c "SELECT pg_sleep(60) /* crash_check */" >/dev/null 2>&1 &
	helpers+=($!)
	for _ in $(seq 1 50); do
		pid=$(cluster_psql -At -c "SELECT pid FROM pg_stat_activity WHERE query LIKE '%pg_sleep(60) /* crash_check */%' AND pid <> pg_backend_pid()")
		[[ -n $pid ]] && break
		sleep 0.2
	done
	printf '%s\n' "$pid"
}
ready_count() { grep -c 'database system is ready to accept connections' "$log" || true; }
# segv PID: kills the backend PID with SIGSEGV and waits until the instance restarted and
# shape_sync serves again
segv() {
	local before
	before=$(ready_count)
	kill -SEGV "$1"
	wait_for 60 bash -c '(($(grep -c "database system is ready to accept connections" "$1") > $2))' _ "$log" "$before" &&
		wait_for 30 bash -c '[[ $(curl -s -o /dev/null -w "%{http_code}" "$1/v1/health") == 200 ]]' _ "$SHAPE_SYNC_URL"
}
# unmarked: the log without the markers, as if no test had said anything
unmarked() { grep -v '^shape_sync-test: expect-crash' "$log" >"$work/unmarked.log" || true; }

# 1. one crash, announced
pid1=$(sleeping_backend)
check "a backend sleeps (PID $pid1)" test -n "$pid1"
cluster_expect_crash "crash_check.sh: SIGSEGV to backend $pid1"
check "SIGSEGV to it: PostgreSQL restarts and shape_sync serves again" segv "$pid1"
unmarked
rc=0
out=$(cluster_crash_check "$work/unmarked.log") || rc=$?
expect_eq "unannounced, the check fails" 1 "$rc"
expect_match "and names the process and the signal" \
	"unmarked\\.log:[0-9]+: .*server process \\(PID $pid1\\) was terminated by signal 11: Segmentation fault" "$out"
expect_match "with what it was running" "DETAIL:  Failed process was running: SELECT pg_sleep\\(60\\)" "$out"
expect_match "and the restart" "LOG:  terminating any other active server processes" "$out"
expect_match "and the reinitialization" "LOG:  all server processes terminated; reinitializing" "$out"
rc=0
out=$(cluster_crash_check "$log") || rc=$?
expect_eq "announced, the check passes" "0 []" "$rc [$out]"

# 2. one marker, two crashes: the second is reported
pid2=$(sleeping_backend)
cluster_expect_crash "crash_check.sh: SIGSEGV to backend $pid2"
check "a second backend killed with SIGSEGV" segv "$pid2"
pid3=$(sleeping_backend)
check "a third one, with no marker of its own" segv "$pid3"
rc=0
out=$(cluster_crash_check "$log") || rc=$?
expect_eq "a marker lets one crash pass, not the next: the check fails" 1 "$rc"
expect_match "on the third backend" "server process \\(PID $pid3\\) was terminated by signal 11" "$out"
expect_eq "and only on it (and its restart)" "1 0 0 2" \
	"$(grep -c "PID $pid3" <<<"$out") $(grep -c "PID $pid2" <<<"$out") $(grep -c "PID $pid1" <<<"$out") $(grep -cE 'terminating any other|reinitializing' <<<"$out")"
unmarked
out=$(cluster_crash_check "$work/unmarked.log") || true
expect_eq "without the markers, all three crashes are reported" 3 "$(grep -c 'was terminated by signal 11' <<<"$out")"

# 3. cluster_stop records the finding in the run's report, with a copy of the log
export SHAPE_SYNC_CRASH_REPORT=$work/crash-report.txt
dir=$(dirname "$log")
cluster_stop 2>"$work/stop.err"
report=$(cat "$SHAPE_SYNC_CRASH_REPORT" 2>/dev/null || true)
expect_match "cluster_stop appends the log and its findings to SHAPE_SYNC_CRASH_REPORT" \
	"^== $log \\(cluster of crash_check\\.sh; the log is kept as $work/crash-${dir##*/}-postgres\\.log\\)" "$report"
expect_match "with the third crash" "PID $pid3\\) was terminated by signal 11" "$report"
check "and keeps a copy of the log" grep -q "PID $pid3) was terminated by signal 11" "$work/crash-${dir##*/}-postgres.log"
expect_match "and says so on stderr" "CRASH CHECK: $log shows a crash" "$(cat "$work/stop.err")"
check "and removes the cluster's temp dir" test ! -e "$dir"
finish
