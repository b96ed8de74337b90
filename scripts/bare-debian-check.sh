#!/usr/bin/env bash
# Checks the README's `scripts/quickstart.sh demo` on a bare Debian: a
# debootstrap --variant=minbase bookworm chroot, the committed tree (git
# archive HEAD) copied into it, the npm registry unreachable. Afterwards
# build/kthrottled must exist and nodejs, npm, podman and prometheus must not
# be installed (the demo profile installs none of them). Run by hand as root
# (minutes: a debootstrap, then a compiler from the mirror):
#   scripts/bare-debian-check.sh
# MIRROR overrides the host's Debian mirror; KEEP=1 keeps the chroot.
set -euo pipefail

die() { echo "bare-debian-check: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "run as root (debootstrap, chroot, mounts, BPF)"
repo=$(cd "$(dirname "$0")/.." && pwd)
start=$(date +%s)

# The first URI the host's apt sources use for suite $1 (deb822 .sources
# and one-line .list files): only Debian's own mirror is assumed reachable.
host_uri() {
	{
		for f in /etc/apt/sources.list.d/*.sources; do
			if [ -f "$f" ]; then cat "$f"; echo; fi
		done
	} | awk -v want="$1" 'BEGIN { RS = "" } {
		uri = ""; ok = 0; n = split($0, line, "\n")
		for (i = 1; i <= n; i++) {
			if (line[i] ~ /^URIs:/) { split(line[i], f, " "); uri = f[2] }
			if (line[i] ~ /^Suites:/) { m = split(line[i], s, " "); for (j = 2; j <= m; j++) if (s[j] == want) ok = 1 }
		}
		if (ok && uri != "") { print uri; exit }
	}'
	cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
		awk -v want="$1" '$1 == "deb" { i = 2
			if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } # [options]
			if ($(i + 1) == want) { print $i; exit } }' || true
}
mirror=${MIRROR:-$(host_uri bookworm | head -n1)}
security=$(host_uri bookworm-security | head -n1)
[ -n "$mirror" ] || die "no bookworm mirror in the host's apt sources (set MIRROR)"

if ! command -v debootstrap >/dev/null; then
	echo "== installing debootstrap on the host"
	apt-get install -y -qq debootstrap >/dev/null
fi

root=$(mktemp -d /var/tmp/kt-bare-debian.XXXXXX)
chmod 755 "$root" # apt's _apt user downloads into it
mounts=()
cleanup() {
	local rc=$? i
	for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
		umount "${mounts[i]}" 2>/dev/null || umount -l "${mounts[i]}" || true
	done
	# never delete through a mount that is still there (the host's /dev, /sys)
	if grep -q " $root/" /proc/mounts; then
		echo "bare-debian-check: mounts left under $root, not removed:" >&2
		grep " $root/" /proc/mounts >&2
	elif [ "${KEEP:-0}" = 1 ]; then
		echo "bare-debian-check: chroot kept in $root"
	else
		rm -rf --one-file-system "$root"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mnt() { # mnt TARGET MOUNT-ARGS...: mounts and remembers TARGET for cleanup
	local target=$1
	shift
	mount "$@" "$target"
	mounts+=("$target")
}

echo "== debootstrap --variant=minbase bookworm $root ($mirror)"
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.debootstrap.log" 2>&1 ||
	{ tail -n 20 "$root.debootstrap.log" >&2; rm -f "$root.debootstrap.log"; die "debootstrap failed"; }
rm -f "$root.debootstrap.log"
{
	echo "deb $mirror bookworm main"
	echo "deb $mirror bookworm-updates main"
	[ -z "$security" ] || echo "deb $security bookworm-security main"
} >"$root/etc/apt/sources.list"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# no services started by package scripts inside the chroot
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"

# What the demo needs from the kernel: /proc, /sys (BTF for vmlinux.h), the
# host's cgroup2 hierarchy at /sys/fs/cgroup (demo.sh finds it in
# /proc/mounts), a bpffs of the chroot's own for the pins, /dev (bound, not
# recursively: the host's /dev/pts stays out).
cg2=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)
[ -n "$cg2" ] || die "no cgroup2 mount on the host"
mnt "$root/proc" -t proc proc
mnt "$root/sys" -t sysfs sysfs
mnt "$root/sys/fs/cgroup" --bind "$cg2"
mnt "$root/sys/fs/bpf" -t bpf -o mode=0700 bpf
mnt "$root/dev" --bind /dev
mnt "$root/dev/pts" -t devpts -o newinstance,ptmxmode=0666 devpts # apt's log

echo "== git archive HEAD ($(git -C "$repo" rev-parse --short HEAD)) -> /root/kthrottle"
mkdir -p "$root/root/kthrottle"
git -C "$repo" archive HEAD | tar -x -C "$root/root/kthrottle"

echo "== scripts/quickstart.sh demo (npm registry: http://127.0.0.1:9/, unreachable)"
rc=0
chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	HOME=/root LANG=C.UTF-8 npm_config_registry=http://127.0.0.1:9/ \
	/bin/bash -c 'cd /root/kthrottle && scripts/quickstart.sh demo' || rc=$?
echo "== quickstart exit $rc"

fail=0
for p in nodejs npm podman prometheus; do
	if chroot "$root" dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		echo "FAIL: $p installed by the demo profile"
		fail=1
	fi
done
for c in node npm; do
	if chroot "$root" /bin/sh -c "command -v $c" >/dev/null; then
		echo "FAIL: $c on PATH in the chroot"
		fail=1
	fi
done
[ -x "$root/root/kthrottle/build/kthrottled" ] || { echo "FAIL: build/kthrottled not built"; fail=1; }
[ "$rc" -eq 0 ] || { echo "FAIL: scripts/quickstart.sh demo exited $rc"; fail=1; }
echo "== installed in the chroot: $(chroot "$root" dpkg-query -W -f='${db:Status-Abbrev}\n' | grep -c '^ii') packages; $(( $(date +%s) - start )) s"
[ "$fail" -eq 0 ] || die "FAILED"
echo "bare-debian-check: OK (demo built and ran; no nodejs, npm, podman, prometheus)"
