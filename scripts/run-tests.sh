#!/usr/bin/env bash
# Runs each test binary given, shows its output, and closes with one summary
# line "N passed, N failed, N skipped" summed over cmocka's per-binary lines.
# A binary that crashes or exits non-zero without a summary counts as a failure.
# A libFuzzer target (.../fuzz/fuzz_<name>) runs through scripts/fuzz.sh over
# its seed corpus plus FUZZ_TEST_SECONDS (default 6; make test: 2) of fuzzing: one test.
#
# Host-only binaries (tests/unit/*, fuzz/*) need no root-wide state (each
# makes its own temp dirs, ports and redis-servers) and measure nothing
# against the clock that another process could skew by more than their
# margins, so they run TEST_JOBS at a time (default: the CPU count + 1, at
# most 3), before the rest. So do the root binaries in `shared_ok` below:
# they assert no rate, window, latency or deadline (so CPU contention cannot
# fail them), and everything they touch is their own (temp dirs, a
# /sys/fs/bpf/kt-test-<pid>-* pin dir, kt-test-<pid>-* cgroups: no port, no
# cgroup v2 root or shared cgroup, no sysctl, no netns):
#   test_install  make install/uninstall into a temp DESTDIR, --help, --check
#   test_apply    kt_plan_apply's rollback against its own maps and cgroups
# Everything else (BPF, daemons, cgroups, timed windows) runs one at a time,
# alone. Outputs are shown whole, in order.
set -u
here=$(dirname "$0")
passed=0 failed=0 skipped=0 bad_bins=()
# one more than the CPUs, at most 3: most of them wait on sockets, timers
# and redis-servers, not on a CPU
jobs=${TEST_JOBS:-$(($(nproc 2>/dev/null || echo 1) + 1))}
[ "$jobs" -gt 3 ] && jobs=3
[ "$jobs" -lt 1 ] && jobs=1
tmp=$(mktemp -d /tmp/kt-run-tests-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

count() { # count KIND FILE: sum of "[  KIND  ] N test(s)" summaries
	grep -oE "\[ +$1 +\] [0-9]+ test" "$2" | grep -oE '[0-9]+' | awk '{s+=$1} END {print s+0}'
}
cmd_of() { # the command that runs binary $1
	case "$1" in
	*/fuzz/fuzz_*) echo "$here/fuzz.sh" "$1" "${FUZZ_TEST_SECONDS:-6}" ;;
	*) echo "$1" ;;
	esac
}
run_one() { # run_one BIN OUT: runs BIN, output to OUT, "rc seconds" to OUT.rc
	local start rc
	start=$(date +%s)
	# shellcheck disable=SC2046 # the command is words without spaces
	$(cmd_of "$1") >"$2" 2>&1
	rc=$?
	echo "$rc $(( $(date +%s) - start ))" >"$2.rc"
}
tally() { # tally BIN OUT: counts OUT's summaries, prints the closing line
	local bin=$1 out=$2 rc secs p f s
	read -r rc secs <"$out.rc"
	# cmocka writes these to stderr and the rest to stdout: a line may be
	# joined with another, so match anywhere in the line
	p=$(count PASSED "$out") f=$(count FAILED "$out") s=$(count SKIPPED "$out")
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		f=1 # crashed or failed outside a test
	fi
	passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
	[ "$f" -gt 0 ] && bad_bins+=("$bin")
	echo "--- $bin: rc=$rc passed=$p failed=$f skipped=$s (${secs}s)"
}

host=() shared_ok=() alone=()
for bin in "$@"; do
	[ -x "$bin" ] || continue
	case "$bin" in
	*/tests/unit/* | */fuzz/fuzz_*) host+=("$bin") ;;
	*/tests/e2e/test_install | */tests/e2e/test_apply) shared_ok+=("$bin") ;;
	*) alone+=("$bin") ;;
	esac
done
# the shared_ok ones first: they take longest, the short ones fill around them
host=(${shared_ok[@]+"${shared_ok[@]}"} ${host[@]+"${host[@]}"})

# host-only binaries, `jobs` at a time (a slot is refilled as soon as any
# finishes); each shown, in order, once it and those before it are done
i=0 shown=0 running=0
while [ "$shown" -lt "${#host[@]}" ]; do
	while [ "$i" -lt "${#host[@]}" ] && [ "$running" -lt "$jobs" ]; do
		run_one "${host[$i]}" "$tmp/$i" &
		i=$((i + 1)) running=$((running + 1))
	done
	if [ "$running" -gt 0 ]; then
		wait -n
		running=$((running - 1))
	fi
	while [ "$shown" -lt "$i" ] && [ -f "$tmp/$shown.rc" ]; do
		echo "=== ${host[$shown]}"
		cat "$tmp/$shown"
		tally "${host[$shown]}" "$tmp/$shown"
		shown=$((shown + 1))
	done
done

for bin in "${alone[@]}"; do
	echo "=== $bin"
	out="$tmp/alone"
	start=$(date +%s)
	# shellcheck disable=SC2046
	$(cmd_of "$bin") 2>&1 | tee "$out"
	echo "${PIPESTATUS[0]} $(( $(date +%s) - start ))" >"$out.rc"
	tally "$bin" "$out"
done
[ ${#bad_bins[@]} -gt 0 ] && echo "failing: ${bad_bins[*]}"
echo "${passed} passed, ${failed} failed, ${skipped} skipped"
[ "$failed" -eq 0 ]
