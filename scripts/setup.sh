#!/usr/bin/env bash
# Installs every Debian package kthrottle needs to build, test and run.
# Idempotent: does nothing when everything is present. Needs root.
set -euo pipefail

# libclang-rt-dev: libFuzzer and the sanitizer runtimes (clang only recommends it)
# python3-*-whl: the wheels an offline pip install of python/ builds with
# (test_python; make install-python)
pkgs=(clang libclang-rt-dev make gcc pkg-config libbpf-dev libelf-dev zlib1g-dev bpftool
      libhiredis-dev libyaml-dev libcmocka-dev redis-server redis-sentinel iproute2
      bind9-dnsutils libmicrohttpd-dev prometheus libcurl4-openssl-dev libjson-c-dev libssl-dev
      openssl podman ca-certificates
      python3 python3-venv python3-pip-whl python3-setuptools-whl python3-wheel-whl)

# node and npm for tests/k8s (offline validation of deploy/kubernetes/); a
# node already installed is kept
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	pkgs+=(nodejs npm)
fi

missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "setup: missing packages: ${missing[*]} (run as root to install)" >&2
		exit 1
	fi
	echo "setup: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	# The packages start system redis instances; kthrottle's tests start
	# their own on free ports and need none of them.
fi

# the Kubernetes schemas and validator the manifest test uses, pinned by
# tests/k8s/package-lock.json
repo=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -d "$repo/tests/k8s/node_modules" ]; then
	echo "setup: npm ci in tests/k8s"
	npm ci --prefix "$repo/tests/k8s" --no-audit --no-fund >/dev/null
fi
