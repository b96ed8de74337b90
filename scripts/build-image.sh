#!/usr/bin/env bash
# SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
# Builds the kthrottle container image offline, with podman:
#   scripts/build-image.sh [BUILD_DIR] [TAG]      (defaults: build kthrottle:latest)
# The root filesystem is staged in a temp dir from BUILD_DIR's kthrottled and
# kthrottlectl (stripped of debug info) plus the shared libraries they load
# (their ldd closure), each of which must belong to an installed Debian
# package (dpkg -S), plus Debian's CA bundle when ca-certificates is
# installed. deploy/image/Containerfile is FROM scratch: nothing is pulled.
# The packages and versions go into /usr/share/kthrottle/packages.txt and the
# label io.kthrottle.debian-packages. Podman's usual environment applies
# (CONTAINERS_STORAGE_CONF, CONTAINERS_CONF); PODMAN overrides the command.
set -euo pipefail

die() { echo "build-image.sh: $*" >&2; exit 1; }

BUILD_DIR=${1:-build}
TAG=${2:-kthrottle:latest}
PODMAN=${PODMAN:-podman}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CONTAINERFILE=$REPO/deploy/image/Containerfile

command -v "$PODMAN" >/dev/null || die "$PODMAN not found: install Debian's podman (apt-get install podman)"
command -v dpkg-query >/dev/null || die "dpkg-query not found: the image is staged from Debian packages"
command -v ldd >/dev/null || die "ldd not found (Debian package libc-bin)"
[ -f "$CONTAINERFILE" ] || die "$CONTAINERFILE missing"
for b in kthrottled kthrottlectl; do
	[ -x "$BUILD_DIR/$b" ] || die "$BUILD_DIR/$b not built: run make BUILD=$BUILD_DIR first"
done

CTX=$(mktemp -d /tmp/kthrottle-image.XXXXXX)
trap 'rm -rf "$CTX"' EXIT
ROOT=$CTX/rootfs
MANIFEST=$CTX/packages.tsv # package<TAB>version<TAB>file in the image
mkdir -p "$ROOT"/usr/sbin "$ROOT"/usr/bin "$ROOT"/usr/share/kthrottle "$ROOT"/tmp
chmod 1777 "$ROOT"/tmp
: >"$MANIFEST"

# The /usr-merge alias of a path (/lib/x -> /usr/lib/x and back): dpkg knows
# each file under the one name its package ships it as.
alias_of() {
	case $1 in
	/usr/bin/* | /usr/sbin/* | /usr/lib/* | /usr/lib64/* | /usr/lib32/*) echo "${1#/usr}" ;;
	/bin/* | /sbin/* | /lib/* | /lib64/* | /lib32/*) echo "/usr$1" ;;
	*) echo "$1" ;;
	esac
}

# "package version" of the installed package owning $1 (tried as given, as
# its resolved file, and their /usr-merge aliases); fails if none does.
owner_of() {
	local real cand pkg
	real=$(readlink -f "$1")
	for cand in "$1" "$(alias_of "$1")" "$real" "$(alias_of "$real")"; do
		pkg=$(dpkg-query -S "$cand" 2>/dev/null | grep -v '^diversion' | head -n1 | sed 's/: .*//; s/,.*//') || true
		if [ -n "$pkg" ]; then
			echo "$pkg $(dpkg-query -W -f='${Version}' "$pkg")"
			return 0
		fi
	done
	return 1
}

# Copies host file $1 (symlinks followed) to $2 in the rootfs and records
# which package it came from.
stage_lib() {
	local src=$1 dst=$2 pv
	pv=$(owner_of "$src") || die "$src (needed by the binaries) belongs to no installed Debian package"
	mkdir -p "$ROOT$(dirname "$dst")"
	cp -L --preserve=mode "$src" "$ROOT$dst"
	printf '%s\t%s\t%s\n' "${pv% *}" "${pv#* }" "$dst" >>"$MANIFEST"
}

# The ldd closure of both binaries: "name => /path (addr)" and the loader's
# "/path (addr)"; the vDSO has no file.
libs=$(ldd "$BUILD_DIR/kthrottled" && ldd "$BUILD_DIR/kthrottlectl") || die "ldd failed on the binaries in $BUILD_DIR"
missing=$(awk '/=> not found/ { print $1 }' <<<"$libs" | sort -u | tr '\n' ' ')
[ -z "$missing" ] || die "libraries not found on this machine: $missing"
mapfile -t paths < <(awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && $2 ~ /^\(/ { print $1 }' <<<"$libs" | sort -u)
[ "${#paths[@]}" -gt 0 ] || die "ldd listed no libraries for $BUILD_DIR/kthrottled"

# Each library goes to its directory's resolved path (/lib -> /usr/lib on a
# merged-/usr system) under the name the loader asks for; the top-level
# symlinks (lib, lib64) are recreated as the host has them.
for p in "${paths[@]}"; do
	top=/$(cut -d/ -f2 <<<"$p")
	if [ -L "$top" ] && [ ! -e "$ROOT$top" ] && [ ! -L "$ROOT$top" ]; then
		ln -s "$(readlink "$top")" "$ROOT$top"
	fi
	stage_lib "$p" "$(readlink -f "$(dirname "$p")")/$(basename "$p")"
done

# Only the files the daemon reads: the CA bundle for TLS endpoints and a
# kubernetes.caFile naming it (generated from ca-certificates' certs).
CA=/etc/ssl/certs/ca-certificates.crt
ca_status=$(dpkg-query -W -f='${Status}' ca-certificates 2>/dev/null) || ca_status=
if [ -r "$CA" ] && [ "$ca_status" = "install ok installed" ]; then
	mkdir -p "$ROOT/etc/ssl/certs"
	cp -L --preserve=mode "$CA" "$ROOT$CA"
	printf '%s\t%s\t%s\n' ca-certificates "$(dpkg-query -W -f='${Version}' ca-certificates)" \
		"$CA (update-ca-certificates)" >>"$MANIFEST"
fi

# The binaries, without debug info (a third of their size); the BPF objects
# are embedded data and stay whole.
cp "$BUILD_DIR/kthrottled" "$ROOT/usr/sbin/kthrottled"
cp "$BUILD_DIR/kthrottlectl" "$ROOT/usr/bin/kthrottlectl"
if command -v strip >/dev/null; then
	strip --strip-debug "$ROOT/usr/sbin/kthrottled" "$ROOT/usr/bin/kthrottlectl"
fi
version=$("$BUILD_DIR/kthrottled" --version 2>/dev/null | head -n1) || version=unknown

{
	echo "# kthrottle container image: where its files come from"
	echo "# $version, built in $(readlink -f "$BUILD_DIR"): /usr/sbin/kthrottled /usr/bin/kthrottlectl"
	echo "# Debian packages (package version file):"
	sort "$MANIFEST" | tr '\t' ' '
} >"$ROOT/usr/share/kthrottle/packages.txt"
pkgs=$(cut -f1,2 "$MANIFEST" | sort -u | tr '\t' '=' | paste -sd' ')

"$PODMAN" build --quiet --pull=never --network=none -f "$CONTAINERFILE" \
	--label "io.kthrottle.debian-packages=$pkgs" --label "io.kthrottle.version=$version" \
	--iidfile "$CTX/iid" -t "$TAG" "$CTX" >/dev/null || die "podman build of $TAG failed"
id=$(cat "$CTX/iid")
size=$("$PODMAN" image inspect --format '{{.Size}}' "$id")
echo "image $TAG id ${id#sha256:} size $size bytes ($((size / 1024)) KiB): $(wc -l <"$MANIFEST") files from $(wc -w <<<"$pkgs") Debian packages"
echo "packages: $pkgs"
