#!/usr/bin/env bash
# Runs each test binary given, shows its output, and closes with one summary
# line "N passed, N failed, N skipped" summed over cmocka's per-binary lines.
# A binary that crashes or exits non-zero without a summary counts as a failure.
set -u
passed=0 failed=0 skipped=0 bad_bins=()
for bin in "$@"; do
	[ -x "$bin" ] || continue
	echo "=== $bin"
	out=$(mktemp)
	start=$(date +%s)
	"$bin" 2>&1 | tee "$out"
	rc=${PIPESTATUS[0]}
	p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$out" | awk '{s+=$1} END {print s+0}')
	f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$out" | awk '{s+=$1} END {print s+0}')
	s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$out" | awk '{s+=$1} END {print s+0}')
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
