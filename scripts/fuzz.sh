#!/usr/bin/env bash
# Runs one libFuzzer target: scripts/fuzz.sh BIN SECONDS [CORPUS_OUT]
# BIN is .../fuzz_<name>; its seeds are tests/fuzz/corpus/<name>/ and its
# dictionary tests/fuzz/fuzz_<name>.dict if present. The committed seeds are
# only read: new inputs go to CORPUS_OUT (kept, for `make fuzz`) or to a
# temporary directory (removed, for `make test`). Crash inputs are written
# next to BIN as crash-*, leak-*, timeout-*. Ends with a cmocka-style summary
# line so scripts/run-tests.sh counts the run as one test.
set -u
bin=$1 secs=$2 out=${3:-}
src=$(cd "$(dirname "$0")/.." && pwd)
name=$(basename "$bin"); name=${name#fuzz_}
seeds=$src/tests/fuzz/corpus/$name
dict=$src/tests/fuzz/fuzz_$name.dict
tmp=
if [ -z "$out" ]; then
	tmp=$(mktemp -d /tmp/kt-fuzz-"$name"-XXXXXX)
	out=$tmp
fi
mkdir -p "$out"
args=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536
      -print_final_stats=1 -artifact_prefix="$(dirname "$bin")/")
[ -f "$dict" ] && args+=(-dict="$dict")
[ -d "$seeds" ] || { echo "fuzz: no seed corpus $seeds" >&2; seeds=; }
# UBSan reports abort (the objects use -fno-sanitize-recover), so libFuzzer
# records them as crashes with the input that caused them
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
	"$bin" "${args[@]}" "$out" ${seeds:+"$seeds"}
rc=$?
[ -n "$tmp" ] && rm -rf "$tmp"
if [ "$rc" -eq 0 ]; then
	echo "[  PASSED  ] 1 test(s)."
else
	echo "[  FAILED  ] 1 test(s): $bin exited $rc; reproduce with: $bin $(dirname "$bin")/crash-..."
fi
exit "$rc"
