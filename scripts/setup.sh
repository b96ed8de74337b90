#!/usr/bin/env bash
# Installs the Debian packages kthrottle needs, as listed in scripts/deps.txt:
#   scripts/setup.sh demo   build and run: make all, make demo
#   scripts/setup.sh [test] everything: also make test, bench, fuzz (the
#                           default; .ci/run and make deps use it)
# Idempotent: does nothing when everything is present. Needs root to install.
set -euo pipefail

profile=${1:-test}
case $profile in
demo | test) ;;
*) echo "usage: scripts/setup.sh [demo|test]" >&2; exit 2 ;;
esac
repo=$(cd "$(dirname "$0")/.." && pwd)

pkgs=()
while read -r prof pkg _; do
	case $prof in
	demo) ;;
	test) [ "$profile" = test ] || continue ;;
	*) continue ;; # comments and blank lines
	esac
	# a node and npm already on PATH (e.g. NodeSource's) are kept
	if [ "$pkg" = nodejs ] || [ "$pkg" = npm ]; then
		command -v node >/dev/null && command -v npm >/dev/null && continue
	fi
	pkgs+=("$pkg")
done <"$repo/scripts/deps.txt"

missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "setup: missing packages: ${missing[*]} (run as root to install)" >&2
		exit 1
	fi
	echo "setup ($profile): installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	# The packages start system redis instances; kthrottle's tests start
	# their own on free ports and need none of them.
fi

# the Kubernetes schemas and validator the manifest test uses, pinned by
# tests/k8s/package-lock.json (the npm registry is needed only here)
if [ "$profile" = test ] && [ ! -d "$repo/tests/k8s/node_modules" ]; then
	echo "setup: npm ci in tests/k8s"
	npm ci --prefix "$repo/tests/k8s" --no-audit --no-fund >/dev/null
fi
