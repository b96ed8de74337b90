#!/usr/bin/env bash
# Runs the fault matrix (tests/e2e/test_faults, root) with KT_FAULT_TABLE set
# and prints its markdown table: one row per asserted range, the worst
# one-second window against max + burst. Part of `make bench`.
#   scripts/fault-table.sh [path/to/test_faults]   (default build/tests/e2e/test_faults)
# The test's own output goes to a temp log; if it fails, its failure lines
# are printed and the log is kept. Exit status is the test's. Extra
# environment (KT_TEST_FILTER=...) passes through.
set -u
bin=${1:-build/tests/e2e/test_faults}
if [ ! -x "$bin" ]; then
	echo "fault-table: $bin not built" >&2
	exit 2
fi
dir=$(mktemp -d /tmp/kt-fault-table.XXXXXX) || exit 1
table="$dir/table.tsv" log="$dir/test_faults.log"
: >"$table"
echo
echo "Fault matrix ($bin, about 2 minutes):"
echo
start=$(date +%s)
KT_FAULT_TABLE="$table" timeout 600 "$bin" >"$log" 2>&1
rc=$?
awk -F'\t' '
BEGIN {
	print "| case | worst 1-s window | max + burst | over max + burst (%) | target |"
	print "|---|---:|---:|---:|---|"
}
NF >= 4 {
	over = ($2 - $3) / $3 * 100
	if (over < 0)
		over = 0
	printf "| %s | %d | %d | %.1f | 0 (join: one share) |\n", $1, $2, $3, over
}' "$table"
echo
echo "(windows slide by 100 ms; $(( $(date +%s) - start )) s)"
if [ "$rc" -ne 0 ]; then
	echo "fault-table: test_faults failed (exit $rc):" >&2
	grep -E 'PROMISE BROKEN|\[ +(ERROR|FAILED|LINE) +\]' "$log" | head -n 40 >&2
	echo "fault-table: full log kept in $dir" >&2
	exit "$rc"
fi
rm -rf "$dir"
