#!/usr/bin/env bash
#
# scripts/test.sh: build shape_sync and run every test suite; what CI runs (.ci/run).
#
#   1. scripts/install-deps.sh
#   2. make clean && make (warnings are errors), make install (sudo when not root)
#   3. stages, each counting tests passed/failed; a failing stage does not stop the others:
#        layout       scripts/check-layout.sh (the include graph between the floors and files)
#                     and scripts/check-docs.sh (links and the settings table of the docs)
#        unit         make -C test/unit check              (no PostgreSQL server needed)
#        regress      make installcheck (pg_regress)       against a throwaway cluster
#        tap          pg_prove test/tap/*.sql              in a fresh database tap_tests
#        http         node --test test/http/               with the cluster's env exported
#        integration  every test/integration/*.sh, one test each (one not executable fails), in
#                     lanes side by side (SHAPE_SYNC_INTEGRATION_LANES, default 2)
#        fuzz         test/fuzz/run.sh: a seeded, bounded HTTP fuzz (test/fuzz/http_fuzz.mjs) of a
#                     cluster of its own; its seed is printed (SHAPE_SYNC_FUZZ_SEED repeats it)
#        package      test/package/deb.sh: the Debian package built (dpkg-buildpackage), installed,
#                     tested against (installcheck, the upgrade from 0.1.0) and removed; last,
#                     since it replaces the installed extension
#   4. stop the cluster, then stage crash-check: the server log of every cluster any stage
#      started (this script's, each integration script's, the fuzz's, standbys too) must show no
#      process killed by a signal and no restart that no test asked for (cluster_expect_crash);
#      see "The crash check" in scripts/lib/cluster.sh. The last line printed is
#      "N passed, M failed".
#
# Exits non-zero when anything failed or when no test ran. Logs land in log/ (git-ignored):
# one per stage, plus postgres.log, the server log of the run, crash-check.txt (what the crash
# check found) with a copy of each such server log (crash-*.log), and fuzz/ (the requests the
# fuzz failed on, and its server log when it failed).
#
# Environment: PG_CONFIG (which PostgreSQL), SHAPE_SYNC_SKIP_APT=1 (see install-deps.sh),
# SHAPE_SYNC_EXTRA_CONF (extra postgresql.conf lines, see scripts/lib/cluster.sh),
# SHAPE_SYNC_FUZZ_SEED and SHAPE_SYNC_FUZZ_REQUESTS (see test/fuzz/http_fuzz.mjs).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# shellcheck source=scripts/lib/cluster.sh
source "$ROOT/scripts/lib/cluster.sh"

PG_CONFIG=${PG_CONFIG:-pg_config}
export PG_CONFIG
LOG_DIR=$ROOT/log
SUDO=()
if [[ $(id -u) -ne 0 ]]; then
	SUDO=(sudo)
fi

TOTAL_PASSED=0
TOTAL_FAILED=0
SUMMARY=()  # one line per stage
FAILURE_LINES=()  # what explains a failure (CI shows only the output's end), printed before the summary
STAGE_PID=

say() { printf '\n==> %s\n' "$*"; }

# record STAGE PASSED FAILED [NOTE]
record() {
	TOTAL_PASSED=$((TOTAL_PASSED + $2))
	TOTAL_FAILED=$((TOTAL_FAILED + $3))
	SUMMARY+=("$(printf '%-12s %4d passed, %4d failed%s' "$1" "$2" "$3" "${4:+  ($4)}")")
}

skip() {
	SUMMARY+=("$(printf '%-12s skipped: %s' "$1" "$2")")
	printf 'skipped: %s\n' "$2"
}

# run_logged LOG LIMIT_S CMD...: runs CMD with its output shown and saved to LOG, killed (with
# everything it started) after LIMIT_S seconds. Returns CMD's status (124: timed out).
run_logged() {
	local log=$1 limit=$2 fd tee_pid rc=0 i
	shift 2
	exec {fd}> >(tee "$log")
	tee_pid=$!
	# timeout puts the command in its own process group and kills that whole group.
	timeout -k 15 "$limit" "$@" </dev/null >&"$fd" 2>&1 &
	STAGE_PID=$!
	wait "$STAGE_PID" || rc=$?
	STAGE_PID=
	exec {fd}>&-
	# Let tee drain; a stray grandchild still holding the pipe must not hang the run.
	for ((i = 0; i < 100; i++)); do
		kill -0 "$tee_pid" 2>/dev/null || break
		sleep 0.1
	done
	kill "$tee_pid" 2>/dev/null || true
	wait "$tee_pid" 2>/dev/null || true
	if ((rc == 124)); then
		printf '!! timed out after %ss: %s\n' "$limit" "$*" | tee -a "$log"
	fi
	return "$rc"
}

# last_match REGEX FILE: the last line of FILE matching the extended REGEX, or nothing.
last_match() {
	grep -E -- "$1" "$2" 2>/dev/null | tail -n 1 || true
}

# shellcheck disable=SC2317  # trap handlers: reached through trap
on_signal() {
	trap - INT TERM
	printf '\n!! interrupted\n' >&2
	if [[ -n $STAGE_PID ]]; then
		# shellcheck disable=SC2086  # one pid, or the integration lanes' pids
		kill -TERM $STAGE_PID 2>/dev/null || true
	fi
	exit "$1"
}

# shellcheck disable=SC2317
on_exit() {
	local rc=$?
	cluster_stop
	exit "$rc"
}

trap on_exit EXIT
trap 'on_signal 130' INT
trap 'on_signal 143' TERM

# --- dependencies and build -----------------------------------------------------------------

say "installing dependencies"
bash "$ROOT/scripts/install-deps.sh"

say "building (make clean && make)"
BUILD_OK=1
# PGXS's clean removes log/ too, so the logs of this run start after it.
make clean || BUILD_OK=0
rm -rf "$LOG_DIR"
mkdir -p "$LOG_DIR"
# every cluster_start and cluster_stop of the run, in this process and its children, reports here
export SHAPE_SYNC_CRASH_REPORT=$LOG_DIR/crash-check.txt
if ((BUILD_OK)) && ! run_logged "$LOG_DIR/build.log" 900 make; then
	BUILD_OK=0
fi
if ((BUILD_OK)); then
	say "installing (make install)"
	if ! "${SUDO[@]}" make install PG_CONFIG="$(command -v "$PG_CONFIG")" 2>&1 | tee -a "$LOG_DIR/build.log"; then
		BUILD_OK=0
	fi
fi
if ((BUILD_OK)); then
	SUMMARY+=("$(printf '%-12s ok' build)")
else
	record build 0 1 "build or install failed, see log/build.log"
fi

# --- the layout of the source and the documentation's links ------------------------------------

say "stage layout: scripts/check-layout.sh, scripts/check-docs.sh"
layout_passed=0
layout_failed=0
for check in check-layout check-docs; do
	if run_logged "$LOG_DIR/$check.log" 120 bash "$ROOT/scripts/$check.sh"; then
		layout_passed=$((layout_passed + 1))
	else
		layout_failed=$((layout_failed + 1))
		tail -20 "$LOG_DIR/$check.log"
	fi
done
record layout "$layout_passed" "$layout_failed"

# --- a. C unit tests --------------------------------------------------------------------------

say "stage unit: make -C test/unit check"
if [[ ! -f test/unit/Makefile ]]; then
	echo "test/unit/Makefile does not exist"
	record unit 0 1 "test/unit/Makefile missing"
else
	rc=0
	run_logged "$LOG_DIR/unit.log" 900 make -C test/unit check || rc=$?
	line=$(last_match 'unit: [0-9]+ passed, [0-9]+ failed' "$LOG_DIR/unit.log")
	if [[ $line =~ unit:\ ([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then
		p=${BASH_REMATCH[1]} f=${BASH_REMATCH[2]}
		if ((rc != 0 && f == 0)); then
			record unit "$p" 1 "make exited $rc"
		else
			record unit "$p" "$f"
		fi
	else
		record unit 0 1 "no 'unit: N passed, M failed' line; make exited $rc"
	fi
fi

# --- b. the cluster -------------------------------------------------------------------------

CLUSTER_OK=0
if ((BUILD_OK)); then
	say "starting a throwaway cluster with shape_sync preloaded"
	if cluster_start ""; then
		CLUSTER_OK=1
		printf 'PGHOST=%s PGPORT=%s SHAPE_SYNC_URL=%s\n' "$PGHOST" "$PGPORT" "$SHAPE_SYNC_URL"
	else
		record cluster 0 1 "cluster_start failed"
	fi
fi

cluster_needed() {
	if ((CLUSTER_OK)); then
		return 0
	fi
	skip "$1" "no cluster (build or cluster start failed)"
	return 1
}

# --- c. pg_regress --------------------------------------------------------------------------

say "stage regress: make installcheck"
shopt -s nullglob
regress_sql=(sql/*.sql)
shopt -u nullglob
if ((${#regress_sql[@]} == 0)); then
	skip regress "no sql/*.sql"
elif cluster_needed regress; then
	rm -f regression.diffs regression.out
	rc=0
	run_logged "$LOG_DIR/regress.log" 900 make installcheck PG_CONFIG="$PG_CONFIG" \
		PGHOST="$PGHOST" PGPORT="$PGPORT" PGUSER=postgres || rc=$?
	log=$LOG_DIR/regress.log
	# Per-test lines (PG 15): "test foo ... ok  12 ms", "     foo ... FAILED  30 ms".
	p=$(grep -cE '\.\.\. +ok( |$)' "$log" || true)
	f=$(grep -cE '\.\.\. +FAILED( |$)' "$log" || true)
	# The summary, when present, is authoritative: "All 5 tests passed." / "2 of 5 tests failed."
	if [[ $(last_match 'All [0-9]+ tests passed' "$log") =~ All\ ([0-9]+)\ tests ]]; then
		p=${BASH_REMATCH[1]} f=0
	elif [[ $(last_match '[0-9]+ of [0-9]+ tests failed' "$log") =~ ([0-9]+)\ of\ ([0-9]+)\ tests ]]; then
		f=${BASH_REMATCH[1]} p=$((BASH_REMATCH[2] - BASH_REMATCH[1]))
	fi
	if ((rc != 0 && f == 0)); then
		record regress "$p" 1 "make installcheck exited $rc"
	else
		record regress "$p" "$f"
	fi
	if [[ -f regression.diffs ]]; then
		cp regression.diffs "$LOG_DIR/regression.diffs"
		if ((rc != 0 || f != 0)); then
			echo "--- regression.diffs (first 400 lines; all in log/regression.diffs) ---"
			head -n 400 regression.diffs
		fi
	fi
fi

# --- d. pgTAP -------------------------------------------------------------------------------

say "stage tap: pg_prove test/tap/*.sql"
shopt -s nullglob
tap_files=(test/tap/*.sql)
shopt -u nullglob
if ((${#tap_files[@]} == 0)); then
	skip tap "no test/tap/*.sql"
elif cluster_needed tap; then
	rc=0
	{
		cluster_psql -d postgres -c 'DROP DATABASE IF EXISTS tap_tests' &&
			cluster_psql -d postgres -c 'CREATE DATABASE tap_tests' &&
			cluster_psql -d tap_tests -c 'CREATE EXTENSION pgtap'
	} >"$LOG_DIR/tap-setup.log" 2>&1 || rc=$?
	if ((rc != 0)); then
		cat "$LOG_DIR/tap-setup.log"
		record tap 0 1 "could not create database tap_tests with pgtap"
	else
		run_logged "$LOG_DIR/tap.log" 600 pg_prove --psql-bin "$SHAPE_SYNC_PG_BINDIR/psql" \
			-h "$PGHOST" -p "$PGPORT" -U postgres -d tap_tests "${tap_files[@]}" || rc=$?
		log=$LOG_DIR/tap.log
		t=0 f=0
		if [[ $(last_match '^Files=[0-9]+, Tests=[0-9]+' "$log") =~ Tests=([0-9]+) ]]; then
			t=${BASH_REMATCH[1]}
		fi
		# Summary report lines: "test/tap/x.sql (Wstat: 0 Tests: 30 Failed: 2)"
		while read -r n; do
			f=$((f + n))
		done < <(grep -oE 'Tests: [0-9]+ Failed: [0-9]+\)' "$log" | grep -oE '[0-9]+\)$' | tr -d ')' || true)
		result=$(last_match '^Result: ' "$log")
		if [[ $result != "Result: PASS" || $rc -ne 0 ]] && ((f == 0)); then
			f=1
		fi
		p=$((t > f ? t - f : 0))
		record tap "$p" "$f" "${result:-no Result line}"
	fi
fi

# --- e. HTTP tests (node) -------------------------------------------------------------------

say "stage http: node --test test/http/"
if [[ ! -d test/http ]] || [[ -z $(find test/http -type f \
	\( -name '*.js' -o -name '*.mjs' -o -name '*.cjs' \) -print 2>/dev/null | head -n 1) ]]; then
	skip http "no JavaScript files in test/http"
elif cluster_needed http; then
	rc=0
	run_logged "$LOG_DIR/http.log" 1800 node --test --test-concurrency=1 --test-reporter=tap \
		test/http/ || rc=$?
	log=$LOG_DIR/http.log
	p=0 f=0 c=0
	[[ $(last_match '^# pass [0-9]+$' "$log") =~ ([0-9]+)$ ]] && p=${BASH_REMATCH[1]}
	[[ $(last_match '^# fail [0-9]+$' "$log") =~ ([0-9]+)$ ]] && f=${BASH_REMATCH[1]}
	[[ $(last_match '^# cancelled [0-9]+$' "$log") =~ ([0-9]+)$ ]] && c=${BASH_REMATCH[1]}
	f=$((f + c))
	note=
	if ((c)); then
		note="$c cancelled"
	fi
	if ((rc != 0 && f == 0)); then
		record http "$p" 1 "node exited $rc"
		# Every test passed, yet node failed: its own diagnostics say why (an error raised
		# after a test ended, a file that exited non-zero). CI shows only the end of the output.
		FAILURE_LINES+=("http: node exited $rc with no failed test; its diagnostics and last lines:")
		mapfile -t -O "${#FAILURE_LINES[@]}" FAILURE_LINES < <(
			grep -nE '^# (Error|Warning)|^not ok|failureType|exitCode: [1-9]|signal: .?SIG|FATAL|heap out of memory' "$log" | tail -n 20
			tail -n 8 "$log")
	else
		record http "$p" "$f" "$note"
		if ((f)); then
			# CI shows only the end of the output: name each failed test and the lines under it
			FAILURE_LINES+=("http: $f failed; each failed test and what node said about it:")
			mapfile -t -O "${#FAILURE_LINES[@]}" FAILURE_LINES < <(
				grep -nE -A14 '^ *not ok ' "$log" | head -n 60)
		fi
	fi
fi

# --- f. integration scripts -----------------------------------------------------------------

# Each script starts clusters of its own, so they run side by side in lanes (2 by default: the
# machines have 2 cores; SHAPE_SYNC_INTEGRATION_LANES=1 runs them one after another). A lane takes
# the next script from the queue file; the ports each lane may pick are its own (see
# cluster_free_port in scripts/lib/cluster.sh).
INTEGRATION_LANES=${SHAPE_SYNC_INTEGRATION_LANES:-2}
if ! [[ $INTEGRATION_LANES =~ ^[1-9][0-9]*$ ]]; then
	echo "SHAPE_SYNC_INTEGRATION_LANES must be a positive number, not '$INTEGRATION_LANES'" >&2
	exit 2
fi
INTEGRATION_FIRST=(test/integration/integrity.sh test/integration/durable_big_shape.sh
	test/integration/durable_burst.sh test/integration/integrity_subquery.sh
	test/integration/integrity_standby.sh test/integration/durable_journal.sh
	test/integration/subquery_durable.sh)

# queue_take QUEUE: prints and removes the first line of QUEUE; fails when it is empty.
queue_take() {
	local queue=$1 first
	{
		flock 9
		first=$(head -n 1 "$queue")
		[[ -n $first ]] || return 1
		sed -i 1d "$queue"
		printf '%s\n' "$first"
	} 9>"$queue.lock"
}

# integration_lane LANE QUEUE RESULTS: runs scripts from QUEUE until it is empty, each with its
# output in log/integration-NAME.log, shown whole (under a lock) once it ends; appends
# "STATUS SCRIPT" to RESULTS for each.
integration_lane() {
	local lane=$1 queue=$2 results=$3 script name log rc pid=
	trap '[[ -n $pid ]] && kill -TERM "$pid" 2>/dev/null; exit 143' TERM INT
	export SHAPE_SYNC_PORT_LANES=$INTEGRATION_LANES SHAPE_SYNC_PORT_LANE=$lane
	while script=$(queue_take "$queue"); do
		name=$(basename "$script" .sh)
		log=$LOG_DIR/integration-$name.log
		rc=0
		if [[ ! -x $script ]]; then
			# a test that is never run cannot fail: that is a failure
			echo "FAILED: $script is not executable (chmod +x), so it was not run" >"$log"
			rc=126
		else
			# timeout puts the script in its own process group and kills that whole group
			timeout -k 15 900 "$script" </dev/null >"$log" 2>&1 &
			pid=$!
			wait "$pid" || rc=$?
			pid=
			if ((rc == 124)); then
				echo "!! timed out after 900s: $script" >>"$log"
			fi
		fi
		{
			flock 9
			echo "--- $script (lane $lane)"
			cat "$log"
			[[ -s $log && -n $(tail -c 1 "$log") ]] && echo  # output that did not end with a newline
			if ((rc == 0)); then echo "ok: $script"; else echo "FAILED ($rc): $script"; fi
			echo "$rc $script" >>"$results"
		} 9>"$results.lock"
	done
}

say "stage integration: test/integration/*.sh"
shopt -s nullglob
integration=(test/integration/*.sh)
shopt -u nullglob
if ((${#integration[@]} == 0)); then
	skip integration "no test/integration/*.sh"
elif cluster_needed integration; then
	p=0 f=0
	queue=$LOG_DIR/integration.queue results=$LOG_DIR/integration.results
	: >"$results"
	# The longest first, so that the lanes end together; then the rest in name order.
	for script in "${INTEGRATION_FIRST[@]}" "${integration[@]}"; do
		[[ -e $script ]] && printf '%s\n' "$script"
	done | awk '!seen[$0]++' >"$queue"
	echo "$INTEGRATION_LANES lanes (SHAPE_SYNC_INTEGRATION_LANES); each script's output follows when it ends"
	lane_pids=()
	for ((lane = 0; lane < INTEGRATION_LANES; lane++)); do
		integration_lane "$lane" "$queue" "$results" &
		lane_pids+=($!)
	done
	STAGE_PID=${lane_pids[*]}
	wait "${lane_pids[@]}" || true
	STAGE_PID=
	while read -r rc script; do
		if ((rc == 0)); then
			p=$((p + 1))
			continue
		fi
		f=$((f + 1))
		name=$(basename "$script" .sh)
		# CI shows only the end of the output: name the script and what it said last
		FAILURE_LINES+=("integration: $script exited $rc; the lines that name a failure, then its last lines:")
		mapfile -t -O "${#FAILURE_LINES[@]}" FAILURE_LINES < <(
			grep -nE 'FAIL|not ok|ERROR|FATAL|PANIC|Assert|timed out|mismatch|differ' \
				"$LOG_DIR/integration-$name.log" | head -n 12
			tail -n 15 "$LOG_DIR/integration-$name.log")
	done <"$results"
	if (($(wc -l <"$results") + $(grep -c . "$queue" || true) != ${#integration[@]})); then
		f=$((f + 1))
		FAILURE_LINES+=("integration: not every script ran (see log/integration.results)")
	fi
	record integration "$p" "$f"
fi

# --- g. HTTP fuzz -----------------------------------------------------------------------------

say "stage fuzz: test/fuzz/run.sh"
if [[ ! -x test/fuzz/run.sh ]]; then
	skip fuzz "no executable test/fuzz/run.sh"
elif ((!BUILD_OK)); then
	skip fuzz "the build failed"
else
	rc=0
	SHAPE_SYNC_FUZZ_OUT=$LOG_DIR/fuzz run_logged "$LOG_DIR/fuzz.log" 600 test/fuzz/run.sh || rc=$?
	line=$(last_match '^fuzz: seed ' "$LOG_DIR/fuzz.log")
	if [[ $line =~ ^fuzz:\ seed\ ([0-9]+),\ ([0-9]+)\ requests,\ ([0-9]+)\ failures ]]; then
		s=${BASH_REMATCH[1]} n=${BASH_REMATCH[2]} f=${BASH_REMATCH[3]}
		if ((rc != 0 && f == 0)); then
			f=1
		fi
		note="seed $s, $n requests"
		if ((f > 0)); then
			note+="; SHAPE_SYNC_FUZZ_SEED=$s repeats it, see log/fuzz.log"
		fi
		record fuzz "$((f > 0 ? 0 : 1))" "$f" "$note"
	else
		record fuzz 0 1 "no 'fuzz: seed S, N requests, F failures' line; run.sh exited $rc"
	fi
fi

# --- teardown and summary -------------------------------------------------------------------

if [[ -n ${SHAPE_SYNC_LOG:-} && -f $SHAPE_SYNC_LOG ]]; then
	cp "$SHAPE_SYNC_LOG" "$LOG_DIR/postgres.log" 2>/dev/null || true
	if ((TOTAL_FAILED)); then
		say "server log, last 40 lines (all of it in log/postgres.log)"
		tail -n 40 "$SHAPE_SYNC_LOG" || true
	fi
fi
cluster_stop

# --- package: the Debian package, built, installed, tested and removed -------------------------
# Last of the stages that use a server: it replaces the installed extension with the package's,
# then removes it and puts this build back (test/package/deb.sh).

say "stage package: test/package/deb.sh"
if ((!BUILD_OK)); then
	skip package "the build failed"
else
	rc=0
	run_logged "$LOG_DIR/package.log" 900 test/package/deb.sh || rc=$?
	p=$(grep -cE '^ok [0-9]+ ' "$LOG_DIR/package.log" || true)
	f=$(grep -cE '^not ok [0-9]+ ' "$LOG_DIR/package.log" || true)
	if ((rc != 0 && f == 0)); then
		f=1
	fi
	record package "$p" "$f"
	if ((f)); then
		FAILURE_LINES+=("package: test/package/deb.sh exited $rc; its failed checks, then its last lines:")
		mapfile -t -O "${#FAILURE_LINES[@]}" FAILURE_LINES < <(
			grep -nE '^not ok ' "$LOG_DIR/package.log" | head -n 12
			tail -n 15 "$LOG_DIR/package.log")
	fi
fi

# --- h. the crash check of every server log -------------------------------------------------

say "stage crash-check: the server logs of every cluster of the run"
cluster_crash_check_leftovers
clusters=$(wc -l <"$SHAPE_SYNC_CRASH_REPORT.clusters" 2>/dev/null || echo 0)
if [[ -s $SHAPE_SYNC_CRASH_REPORT ]]; then
	cat "$SHAPE_SYNC_CRASH_REPORT"
	record crash-check 0 "$(grep -c '^== ' "$SHAPE_SYNC_CRASH_REPORT")" \
		"a process killed by a signal or an unasked-for restart, see log/crash-check.txt"
else
	echo "no crash and no restart in the logs of $clusters clusters"
	record crash-check 1 0 "$clusters clusters"
fi

if ((${#FAILURE_LINES[@]})); then
	say "what explains the failures"
	printf '%s\n' "${FAILURE_LINES[@]}"
fi

say "summary"
printf '%s\n' "${SUMMARY[@]}"
if ((TOTAL_PASSED + TOTAL_FAILED == 0)); then
	echo "no test ran"
fi
echo
printf '%d passed, %d failed\n' "$TOTAL_PASSED" "$TOTAL_FAILED"
if ((TOTAL_FAILED != 0 || TOTAL_PASSED == 0)); then
	exit 1
fi
exit 0
