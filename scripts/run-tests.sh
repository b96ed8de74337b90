#!/usr/bin/env bash
# Runs each test binary given, shows its output, and closes with one summary
# line "N passed, N failed, N skipped" summed over cmocka's per-binary lines.
# A binary that crashes or exits non-zero without a summary counts as a failure.
# A libFuzzer target (.../fuzz/fuzz_<name>) runs through scripts/fuzz.sh over
# its seed corpus plus FUZZ_TEST_SECONDS (default 6) of fuzzing: one test.
set -u
here=$(dirname "$0")
passed=0 failed=0 skipped=0 bad_bins=()
count() { # count KIND FILE: sum of "[  KIND  ] N test(s)" summaries
	grep -oE "\[ +$1 +\] [0-9]+ test" "$2" | grep -oE '[0-9]+' | awk '{s+=$1} END {print s+0}'
}
for bin in "$@"; do
	[ -x "$bin" ] || continue
	echo "=== $bin"
	out=$(mktemp)
	start=$(date +%s)
	case "$bin" in
	*/fuzz/fuzz_*) cmd=("$here/fuzz.sh" "$bin" "${FUZZ_TEST_SECONDS:-6}") ;;
	*) cmd=("$bin") ;;
	esac
	"${cmd[@]}" 2>&1 | tee "$out"
	rc=${PIPESTATUS[0]}
	# cmocka writes these to stderr and the rest to stdout: a line may be
	# joined with another, so match anywhere in the line
	p=$(count PASSED "$out") f=$(count FAILED "$out") s=$(count SKIPPED "$out")
	rm -f "$out"
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		f=1 # crashed or failed outside a test
	fi
	passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
	[ "$f" -gt 0 ] && bad_bins+=("$bin")
	echo "--- $bin: rc=$rc passed=$p failed=$f skipped=$s ($(( $(date +%s) - start ))s)"
done
[ ${#bad_bins[@]} -gt 0 ] && echo "failing: ${bad_bins[*]}"
echo "${passed} passed, ${failed} failed, ${skipped} skipped"
[ "$failed" -eq 0 ]
