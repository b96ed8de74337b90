#!/usr/bin/env bash
# The README's quickstart: `scripts/quickstart.sh demo` and
# `scripts/quickstart.sh test`. On a bare Debian (debootstrap minbase has
# no make and no compiler) it first installs what is missing from Debian
# (scripts/setup.sh: the demo profile when only demo/all are asked for,
# else everything), then runs make with the given targets.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then
	echo "usage: scripts/quickstart.sh demo|test|bench|... (make targets)" >&2
	exit 2
fi
profile=demo
for t in "$@"; do
	case $t in
	demo | all) ;;
	*) profile=test ;;
	esac
done
scripts/setup.sh "$profile"
exec make "$@"
