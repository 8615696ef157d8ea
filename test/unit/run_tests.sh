#!/bin/sh
# run_tests.sh BUILD "VARIANTS" "TESTS" "FUZZERS"
#
# Runs every unit test binary of every build variant, then the fuzz corpus
# drivers (ASan build), and prints one final line:
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
PER_BINARY_TIMEOUT=${PER_BINARY_TIMEOUT:-180}

ASAN_OPTIONS=halt_on_error=1:detect_leaks=1
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
TSAN_OPTIONS=halt_on_error=1
export ASAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS

passed=0
failed=0
crashed=""
start=$(date +%s)

# run_one VARIANT NAME COMMAND...
run_one() {
	variant=$1
	name=$2
	shift 2
	log="$BUILD/$variant/logs/$name.log"
	mkdir -p "$BUILD/$variant/logs"
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
	extra=""
	if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
		f=1
		if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
			extra=" TIMED OUT after ${PER_BINARY_TIMEOUT}s"
		elif [ -z "$summary" ]; then
			extra=" CRASHED (exit $rc)"
		else
			extra=" exited $rc after its tests (sanitizer or leak report?)"
		fi
		crashed="$crashed $variant/$name"
	fi
	passed=$((passed + p))
	failed=$((failed + f))
	printf '  %-8s %-26s %4d passed, %d failed (%ds)%s\n' \
		"[$variant]" "$name" "$p" "$f" $((t1 - t0)) "$extra"
	if [ "$f" -ne 0 ]; then
		echo "---- $log"
		# the failing cases, then the tail of the log (sanitizer reports)
		grep -E '^not ok' "$log"
		tail -n 60 "$log"
		echo "----"
	fi
}

for v in $VARIANTS; do
	for t in $TESTS; do
		run_one "$v" "$t" "$BUILD/$v/bin/$t"
	done
done

# every fuzz target's corpus, plus generated inputs, through a plain driver
for fz in $FUZZERS; do
	run_one asan "$fz" "$BUILD/asan/bin/$fz" "corpus/$fz"
done

end=$(date +%s)
echo "  check took $((end - start))s"
if [ -n "$crashed" ]; then
	echo "  binaries that crashed or reported at exit:$crashed"
fi
echo "unit: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
