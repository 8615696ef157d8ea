#!/usr/bin/env bash
# run_tests.sh BUILD "VARIANTS" "TESTS" "FUZZERS" "THREADED_TESTS"
#
# Runs every unit test binary of every build variant (of the tsan variant,
# only THREADED_TESTS: the tests that start threads), then the fuzz corpus
# drivers (ASan build), JOBS binaries at a time (default: the number of
# CPUs; the tests are CPU-bound and independent: each makes its own temporary
# directory and probes for a free port), prints one line per binary in a
# fixed order, and one final line:
#
#	unit: N passed, M failed
#
# N and M count test cases, summed from the "# unit-summary:" line each
# binary prints last.  A binary that exits non-zero although its summary
# reports no failure (a crash, a sanitizer report, a leak found at exit, a
# timeout) counts as one more failed case, and its output is shown.  Exits
# non-zero when M > 0.

BUILD=$1
VARIANTS=$2
TESTS=$3
FUZZERS=$4
THREADED_TESTS=$5
PER_BINARY_TIMEOUT=${PER_BINARY_TIMEOUT:-180}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
if ! [ "$JOBS" -ge 1 ] 2>/dev/null; then
	JOBS=1
fi

ASAN_OPTIONS=halt_on_error=1:detect_leaks=1
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
TSAN_OPTIONS=halt_on_error=1
export ASAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS

start=$(date +%s)
jobs_list=()	# "VARIANT NAME" of each binary, in the order of the report

# run_one VARIANT NAME COMMAND...: runs one binary; writes its report lines to
# NAME.report and "PASSED FAILED CRASHED" to NAME.result next to its log.
run_one() {
	local variant=$1 name=$2 log rc t0 t1 summary p f extra="" crashed=0
	shift 2
	log="$BUILD/$variant/logs/$name.log"
	t0=$(date +%s)
	timeout -k 5 "$PER_BINARY_TIMEOUT" "$@" >"$log" 2>&1
	rc=$?
	# Some kernels place mappings where this TSan runtime does not expect
	# them (high mmap_rnd_bits); retry without address randomization.
	if [ "$variant" = tsan ] && [ $rc -ne 0 ] &&
		grep -q 'ThreadSanitizer: unexpected memory mapping' "$log" &&
		command -v setarch >/dev/null 2>&1; then
		timeout -k 5 "$PER_BINARY_TIMEOUT" setarch "$(uname -m)" -R "$@" >"$log" 2>&1
		rc=$?
	fi
	t1=$(date +%s)
	summary=$(grep '^# unit-summary:' "$log" | tail -n 1)
	p=$(echo "$summary" | sed -n 's/.*passed=\([0-9]*\).*/\1/p')
	f=$(echo "$summary" | sed -n 's/.*failed=\([0-9]*\).*/\1/p')
	p=${p:-0}
	f=${f:-0}
	if { [ $rc -ne 0 ] || [ -z "$summary" ]; } && [ "$f" -eq 0 ]; then
		f=1
		crashed=1
		if [ $rc -eq 0 ]; then
			extra=" exited 0 without its summary line"
		elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
			extra=" TIMED OUT after ${PER_BINARY_TIMEOUT}s"
		elif [ -z "$summary" ]; then
			extra=" CRASHED (exit $rc)"
		else
			extra=" exited $rc after its tests (sanitizer or leak report?)"
		fi
	fi
	{
		printf '  %-8s %-26s %4d passed, %d failed (%ds)%s\n' \
			"[$variant]" "$name" "$p" "$f" $((t1 - t0)) "$extra"
		if [ "$f" -ne 0 ]; then
			echo "---- $log"
			# the failing cases, then the tail of the log (sanitizer reports)
			grep -E '^not ok' "$log"
			tail -n 60 "$log"
			echo "----"
		fi
	} >"$log.report"
	echo "$p $f $crashed" >"$log.result"
}

# start VARIANT NAME COMMAND...: runs one binary in the background, once
# fewer than JOBS are running.
start() {
	mkdir -p "$BUILD/$1/logs"
	rm -f "$BUILD/$1/logs/$2.log.result" "$BUILD/$1/logs/$2.log.report"
	jobs_list+=("$1 $2")
	while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do
		wait -n
	done
	run_one "$@" &
}

for v in $VARIANTS; do
	tests=$TESTS
	if [ "$v" = tsan ]; then
		tests=$THREADED_TESTS
	fi
	for t in $tests; do
		start "$v" "$t" "$BUILD/$v/bin/$t"
	done
done

# every fuzz target's corpus, plus generated inputs, through a plain driver
for fz in $FUZZERS; do
	start asan "$fz" "$BUILD/asan/bin/$fz" "corpus/$fz"
done
wait

passed=0
failed=0
crashed=""
for job in "${jobs_list[@]}"; do
	read -r variant name <<<"$job"
	log="$BUILD/$variant/logs/$name.log"
	if [ ! -f "$log.result" ]; then
		printf '  %-8s %-26s did not report\n' "[$variant]" "$name"
		failed=$((failed + 1))
		crashed="$crashed $variant/$name"
		continue
	fi
	cat "$log.report"
	read -r p f c <"$log.result"
	passed=$((passed + p))
	failed=$((failed + f))
	if [ "$c" -eq 1 ]; then
		crashed="$crashed $variant/$name"
	fi
done

end=$(date +%s)
echo "  check took $((end - start))s ($JOBS at a time)"
if [ -n "$crashed" ]; then
	echo "  binaries that crashed or reported at exit:$crashed"
fi
echo "unit: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
