#!/usr/bin/env bash
# Kernel matrix: boots Debian's own cloud kernels under QEMU and runs the BPF
# test binaries of a build dir in each guest (make kernels; docs/development.md
# "Kernel matrix").
#
#   scripts/kernel-matrix.sh [BUILD]      BUILD: the build dir (default build)
#
# Kernels (KM_KERNELS, default "bookworm bookworm-backports bullseye"):
#   bookworm            the newest linux-image-6.1.0-*-cloud-amd64 the
#                       machine's own apt sources have (bookworm,
#                       bookworm-security), chosen by linux-image-cloud-amd64's
#                       dependency, else the highest version apt-cache search
#                       lists
#   bookworm-backports  the same from bookworm-backports (6.12.x today),
#                       through a private apt config (its own sources list,
#                       lists and cache under BUILD/kernels/apt-bpo; /etc/apt
#                       is not touched), Signed-By debian-archive-keyring
#   bullseye            Debian 11's newest linux-image-5.10.0-*-cloud-amd64,
#                       older than the minimum (6.1): its guest runs only
#                       tests/e2e/test_minimum, which expects kthrottled to
#                       refuse it at start in one line (private apt config
#                       as for backports, under BUILD/kernels/apt-bullseye)
#   <package name>      that linux-image package, from the machine's sources
# The .debs are kept in BUILD/kernels/debs (apt-get download; reused when
# present, and used offline when apt cannot be reached) and unpacked with
# dpkg-deb -x into BUILD/kernels/<version>/.
#
# Each guest: qemu-system-x86_64, -m 2G -smp 2 -nographic, no network
# device, the serial console to BUILD/kernels/<version>.log. KM_ACCEL=auto
# (the default) takes -enable-kvm -cpu host when /dev/kvm is usable (see
# kvm_usable below; a KVM guest that prints nothing in KM_BOOT_TIMEOUT, 60 s,
# is booted again under TCG), else -accel tcg,thread=single -cpu max,-cx16
# (KM_TCG_OPTS, KM_TCG_CPU; why at tcg_cpu below).
# The kernel is the package's vmlinuz; the initramfs is built here: busybox
# (static), the modules the guest needs that the cloud kernels build as
# modules (virtio-pci and virtio-fs for the root on 6.1; veth, dummy,
# sch_ingress, sch_fq, cls_bpf, act_bpf for the traffic tests), their
# dependencies resolved from each module's modinfo "depends" (the package
# ships no modules.dep: depmod makes it at install), and
# scripts/kernel-guest-init.sh as /init. The guest's root is the host's /,
# read-only: Debian's cloud kernels have no 9p, so it is shared over
# virtio-fs by QEMU's virtiofsd serving a read-only bind mount of / made in
# a private mount namespace. Writable dirs are tmpfs in the guest.
#
# In each guest: uname -r, then each test binary through scripts/run-tests.sh
# (KM_TESTS, default: BUILD/tests/bpf/test_progs test_inflight test_xdp and
# any other BUILD/tests/bpf binary built (test_features), then the traffic tests BUILD/tests/e2e/test_daemon (connection, datagram),
# test_escapes (packet, datagram), test_tcp_bytes (byte) and test_inflight
# (concurrent) when they are built and KM_E2E allows: auto (the default)
# under KVM only, 1 always, 0 never; tests/e2e/test_units, one limit of each
# unit with bounds that hold at any speed, and tests/e2e/test_calls_turns,
# calls counted by turns and the retry quantum, unless KM_E2E=0). A binary listed by KM_TESTS but not
# built counts as failed.
#
# Output: each guest's console as it runs, when KM_VERBOSE=1 (else the
# test lines that matter: uname, the verifier instruction counts, what
# arrived per unit in test_units, the calls, retry quantum and user timeout and maxDelay of
# test_calls_turns, cmocka failures), and at the end one table: kernel | test binary | passed |
# failed | skipped | seconds, then each kernel's accelerator, boot time (to
# the first line of the guest's init) and total wall time, then the
# verifier's instruction count of each program on each kernel.
# Exit 1 if any binary failed or any guest did not finish (timeout, panic,
# no KT-GUEST-DONE line), 2 on a usage or setup error.
#
# Timeouts: KM_TEST_TIMEOUT (default 300 s) per binary inside the guest,
# KM_GUEST_TIMEOUT (default: the binaries' sum + 120 s) for the whole qemu
# run, under timeout(1); qemu and virtiofsd are killed by pid if left.
set -uo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
case $build in /*) ;; *) build=$repo/$build ;; esac
[ -d "$build" ] || { echo "kernel-matrix: build dir $build missing (make BUILD=... all tests)" >&2; exit 2; }
build=$(cd "$build" && pwd)
cache=$build/kernels
mkdir -p "$cache/debs"

kernels=${KM_KERNELS:-bookworm bookworm-backports bullseye}
test_tmo=${KM_TEST_TIMEOUT:-300}
verbose=${KM_VERBOSE:-0}

for t in qemu-system-x86_64 dpkg-deb apt-get timeout gzip xz unshare; do
	command -v "$t" >/dev/null || { echo "kernel-matrix: $t missing (scripts/setup.sh installs qemu-system-x86, busybox-static)" >&2; exit 2; }
done
busybox=$(command -v busybox) || busybox=/bin/busybox
if ! [ -x "$busybox" ] || ldd "$busybox" >/dev/null 2>&1; then
	echo "kernel-matrix: a static busybox is needed (apt-get install busybox-static)" >&2
	exit 2
fi
virtiofsd=${KM_VIRTIOFSD:-/usr/lib/qemu/virtiofsd}
[ -x "$virtiofsd" ] || { echo "kernel-matrix: $virtiofsd missing (qemu-system-common ships it)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "kernel-matrix: needs root (virtiofsd serving /, the tests in the guest run as root)" >&2; exit 2; }

if [ -n "${KM_TESTS:-}" ]; then
	read -r -a tests <<<"$KM_TESTS"
else
	# the three always (one not built counts as failed), then any other
	# tests/bpf binary that is built (test_features, ...)
	tests=("$build/tests/bpf/test_progs" "$build/tests/bpf/test_inflight" "$build/tests/bpf/test_xdp")
	for t in "$build"/tests/bpf/test_*; do
		case " ${tests[*]} " in *" $t "*) continue ;; esac
		[ -f "$t" ] && [ -x "$t" ] && tests+=("$t")
	done
fi

tmp=$(mktemp -d /tmp/kt-kernel-matrix-XXXXXX)
qemu_pid= fsd_pid=
cleanup() {
	[ -n "$qemu_pid" ] && kill -9 "$qemu_pid" 2>/dev/null
	[ -n "$fsd_pid" ] && kill "$fsd_pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- kernels: pick, download, unpack
# A private apt config per source (NAME: its dir under BUILD/kernels/apt-NAME
# and its sources list): bookworm-backports, and Debian 11 for a kernel
# older than the minimum. /etc/apt is not touched.
apt_opts() { # apt_opts NAME
	local d=$cache/apt-$1
	echo "-o Dir::Etc::SourceList=$d/sources.list -o Dir::Etc::SourceParts=/dev/null" \
		"-o Dir::State::Lists=$d/lists -o Dir::Cache=$d/cache -o Dir::State::Status=/dev/null" \
		"-o Debug::NoLocking=1"
}
apt_update() { # apt_update NAME SOURCES-LINE...: once per run; keeps the old lists when the mirror is unreachable
	local name=$1 d=$cache/apt-$1
	shift
	[ -f "$tmp/$name-updated" ] && return 0
	mkdir -p "$d/lists/partial" "$d/cache/archives/partial"
	printf '%s\n' "$@" >"$d/sources.list"
	# shellcheck disable=SC2046
	apt-get $(apt_opts "$name") -qq update >"$tmp/$name-update.log" 2>&1 ||
		echo "kernel-matrix: $name update failed (using what is cached): $(tail -1 "$tmp/$name-update.log")" >&2
	touch "$tmp/$name-updated"
}
bpo_opts() { apt_opts bpo; }
bpo_update() {
	apt_update bpo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm-backports main"
}
bullseye_update() {
	apt_update bullseye \
		"deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bullseye main" \
		"deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bullseye-security main"
}
newest_pkg() { # newest_pkg [APT-OPTS...]: the cloud-amd64 image package
	local p
	p=$(apt-cache "$@" depends linux-image-cloud-amd64 2>/dev/null |
		sed -n 's/^ *Depends: \(linux-image-[0-9].*-cloud-amd64\)$/\1/p' | sort -V | tail -1)
	[ -n "$p" ] || p=$(apt-cache "$@" search --names-only '^linux-image-[0-9].*-cloud-amd64$' 2>/dev/null |
		awk '{print $1}' | sort -V | tail -1)
	echo "$p"
}
fetch() { # fetch SPEC: prints the unpacked dir, BUILD/kernels/<version>
	local spec=$1 pkg deb ver dir opts=()
	case $spec in
	bookworm) pkg=$(newest_pkg) ;;
	bookworm-backports)
		bpo_update
		read -r -a opts <<<"$(bpo_opts)"
		pkg=$(newest_pkg "${opts[@]}")
		;;
	bullseye)
		bullseye_update
		read -r -a opts <<<"$(apt_opts bullseye)"
		pkg=$(newest_pkg "${opts[@]}")
		;;
	linux-image-*) pkg=$spec ;;
	*) echo "kernel-matrix: unknown kernel '$spec' (bookworm, bookworm-backports, bullseye or a linux-image package)" >&2; return 1 ;;
	esac
	if [ -z "$pkg" ]; then
		# offline: the newest cached .deb of that series
		case $spec in
		bookworm) deb=$(ls "$cache"/debs/linux-image-6.1.0-*-cloud-amd64_*.deb 2>/dev/null | sort -V | tail -1) ;;
		bookworm-backports) deb=$(ls "$cache"/debs/linux-image-*bpo*.deb "$cache"/debs/linux-image-*+deb12-cloud-amd64_*.deb 2>/dev/null | sort -V | tail -1) ;;
		bullseye) deb=$(ls "$cache"/debs/linux-image-5.10.0-*-cloud-amd64_*.deb 2>/dev/null | sort -V | tail -1) ;;
		esac
		[ -n "${deb:-}" ] || { echo "kernel-matrix: no package found for $spec" >&2; return 1; }
		echo "kernel-matrix: $spec: apt has no candidate, using cached ${deb##*/}" >&2
	else
		deb=$(ls "$cache/debs/${pkg}"_*.deb 2>/dev/null | sort -V | tail -1)
		if [ -z "$deb" ]; then
			echo "kernel-matrix: $spec: downloading $pkg" >&2
			(cd "$cache/debs" && apt-get "${opts[@]}" -qq download "$pkg") >"$tmp/dl.log" 2>&1
			deb=$(ls "$cache/debs/${pkg}"_*.deb 2>/dev/null | sort -V | tail -1)
			[ -n "$deb" ] || { echo "kernel-matrix: download of $pkg failed: $(grep -v '^W:' "$tmp/dl.log" | tail -2)" >&2; return 1; }
		fi
	fi
	ver=$(dpkg-deb -c "$deb" | sed -n 's|.*\./boot/vmlinuz-\(.*\)$|\1|p' | head -1)
	[ -n "$ver" ] || { echo "kernel-matrix: no vmlinuz in ${deb##*/}" >&2; return 1; }
	dir=$cache/$ver
	if [ ! -f "$dir/.unpacked" ] || [ "$(cat "$dir/.unpacked")" != "${deb##*/}" ]; then
		rm -rf "$dir" && mkdir -p "$dir"
		dpkg-deb -x "$deb" "$dir/pkg" || return 1
		echo "${deb##*/}" >"$dir/.unpacked"
	fi
	echo "$dir"
}

# ---- initramfs
root_mods="virtio_pci virtiofs"
test_mods="veth dummy sch_ingress sch_fq cls_bpf act_bpf"
mod_index() { # mod_index MODDIR: "name relpath" for every module file
	local p n
	(cd "$1" && find kernel -name '*.ko*') | while read -r p; do
		n=${p##*/} n=${n%%.ko*}
		echo "${n//-/_} $p"
	done
}
mod_deps() { # mod_deps FILE: the names in its modinfo "depends"
	local f=$1
	case $f in
	*.xz) xz -dc "$f" ;;
	*.zst) zstd -dc "$f" ;;
	*.gz) gzip -dc "$f" ;;
	*) cat "$f" ;;
	esac | tr '\0' '\n' | sed -n 's/^depends=//p' | head -1 | tr ',' ' ' | tr '-' '_'
}
build_initramfs() { # build_initramfs DIR VER: DIR/initramfs.cpio.gz
	local dir=$1 ver=$2 moddir=$1/pkg/lib/modules/$2 ird=$tmp/initramfs-$2 order=() seen=" " m
	rm -rf "$ird" && mkdir -p "$ird/bin" "$ird/dev" "$ird/lib/modules"
	cp "$busybox" "$ird/bin/busybox" && ln -s busybox "$ird/bin/sh"
	cp "$repo/scripts/kernel-guest-init.sh" "$ird/init" && chmod 755 "$ird/init"
	mod_index "$moddir" >"$tmp/index-$ver"
	visit() {
		local n=$1 path d
		case $seen in *" $n "*) return 0 ;; esac
		seen="$seen$n "
		path=$(awk -v n="$n" '$1 == n {print $2; exit}' "$tmp/index-$ver")
		if [ -z "$path" ]; then
			grep -qE "/$n\.ko" <(tr '-' '_' <"$moddir/modules.builtin") ||
				echo "kernel-matrix: $ver: module $n neither built in nor a module (skipped)" >&2
			return 0
		fi
		for d in $(mod_deps "$moddir/$path"); do visit "$d"; done
		order+=("$path")
	}
	for m in $root_mods $test_mods; do visit "$m"; done
	: >"$ird/modules.list"
	for m in ${order[@]+"${order[@]}"}; do
		mkdir -p "$ird/lib/modules/$(dirname "$m")"
		case $m in
		*.xz) xz -dc "$moddir/$m" >"$ird/lib/modules/${m%.xz}"; m=${m%.xz} ;;
		*.zst) zstd -dc "$moddir/$m" >"$ird/lib/modules/${m%.zst}"; m=${m%.zst} ;;
		*.gz) gzip -dc "$moddir/$m" >"$ird/lib/modules/${m%.gz}"; m=${m%.gz} ;;
		*) cp "$moddir/$m" "$ird/lib/modules/$m" ;;
		esac
		echo "$m" >>"$ird/modules.list"
	done
	(cd "$ird" && find . | "$busybox" cpio -o -H newc -R 0:0 2>/dev/null | gzip -1) >"$dir/initramfs.cpio.gz"
	echo "kernel-matrix: $ver: initramfs with ${#order[@]} modules: $(sed 's|.*/||;s|\.ko$||' "$ird/modules.list" | tr '\n' ' ')" >&2
}

# ---- one guest
# KM_ACCEL: auto (default), kvm or tcg. auto takes KVM when /dev/kvm is
# usable for a stock kernel: read-write, not PVM (kvm_pvm, a KVM without
# hardware virtualisation, as in some cloud sandboxes, runs only kernels
# built as PVM guests: SeaBIOS alone crawls, Debian's kernels never print a
# line), and QEMU starts on it. Under KVM a guest that prints nothing of its
# init within KM_BOOT_TIMEOUT (60 s) is retried once under TCG.
accel_mode=${KM_ACCEL:-auto}
kvm_usable() {
	[ -r /dev/kvm ] && [ -w /dev/kvm ] || { kvm_why="/dev/kvm not read-write"; return 1; }
	if [ "$accel_mode" = auto ] && [ -d /sys/module/kvm_pvm ]; then
		kvm_why="the host's KVM is PVM (kvm_pvm): stock kernels do not boot on it"
		return 1
	fi
	return 0
}
kvm_cpu=host
kvm_why=
case $accel_mode in
auto | kvm)
	if kvm_usable; then
		# QEMU 7.2 under a nested KVM can abort at the first vCPU reset:
		# "failed to set MSR 0x10a" (IA32_ARCH_CAPABILITIES, which L0 does
		# not let L1 set). Probe 1 s of firmware; without the MSR if so.
		probe=$( (timeout 1 qemu-system-x86_64 -enable-kvm -cpu host -m 64M -nodefaults -display none \
			-monitor none -serial none </dev/null) 2>&1)
		if grep -q 'failed to set MSR 0x10a' <<<"$probe"; then
			kvm_cpu=host,-arch-capabilities
		elif grep -qi 'error\|failed' <<<"$probe"; then
			kvm_why="qemu -enable-kvm fails: $(head -1 <<<"$probe")"
		fi
	fi
	if [ -n "$kvm_why" ]; then
		[ "$accel_mode" = kvm ] && { echo "kernel-matrix: KM_ACCEL=kvm but $kvm_why" >&2; exit 2; }
		echo "kernel-matrix: KVM not used ($kvm_why): TCG" >&2
		accel_mode=tcg
	else
		accel_mode=kvm
	fi
	;;
tcg) ;;
*) echo "kernel-matrix: KM_ACCEL=$accel_mode: auto, kvm or tcg" >&2; exit 2 ;;
esac
boot_tmo=${KM_BOOT_TIMEOUT:-60}
# TCG's CPU (KM_TCG_CPU): "max" without cx16. QEMU 7.2's TCG CMPXCHG16B
# corrupts the guest here (a double fault in SLUB's this_cpu_cmpxchg16b in
# kmem_cache_alloc within seconds of boot, or a NULL virtio-fs queue later);
# without cx16 the kernel takes its fallback and runs clean.
tcg_cpu=${KM_TCG_CPU:-max,-cx16}
# and one host thread for both vCPUs (KM_TCG_OPTS, default thread=single):
# multi-threaded TCG let a 6.12 guest run a stale translation of kernel text
# being live-patched (an "Oops: int3" in __alloc_pages at a jump label that
# test_progs' attach flipped); one thread has no cross-vCPU window
tcg_opts=${KM_TCG_OPTS-thread=single}
# the traffic tests assert rates within 5%, windows of seconds and a 0.1/s
# bucket not refilling across a daemon restart: under TCG (everything 10-20
# times slower) those margins fail for time alone, so KM_E2E=auto (the
# default) runs them under KVM only; KM_E2E=1 always, 0 never
e2e=${KM_E2E:-auto}
if [ -z "${KM_TESTS:-}" ]; then
	# test_units (one limit of each unit) and test_calls_turns (calls
	# counted by turns, the retry quantum): bounds that hold at any speed,
	# run whenever KM_E2E is not 0, emulated or not
	if [ "$e2e" != 0 ]; then
		for t in test_units test_calls_turns; do
			if [ -x "$build/tests/e2e/$t" ]; then
				tests+=("$build/tests/e2e/$t")
			else
				echo "kernel-matrix: $build/tests/e2e/$t not built: left out (make kernels builds it)" >&2
			fi
		done
	fi
	if [ "$e2e" = 1 ] || { [ "$e2e" = auto ] && [ "$accel_mode" = kvm ]; }; then
		for t in test_daemon test_escapes test_tcp_bytes test_inflight; do
			if [ -x "$build/tests/e2e/$t" ]; then
				tests+=("$build/tests/e2e/$t")
			else
				echo "kernel-matrix: $build/tests/e2e/$t not built: left out (make kernels builds it)" >&2
			fi
		done
	elif [ "$e2e" = auto ]; then
		echo "kernel-matrix: TCG: the timed traffic tests (test_daemon test_escapes test_tcp_bytes test_inflight) left out, their margins assume native speed (KM_E2E=1 runs them)" >&2
	fi
fi
# test_minimum (kthrottled starts, or refuses a kernel below 6.1 in one
# line) in every guest; a kernel below the minimum runs only it
if [ -z "${KM_TESTS:-}" ]; then
	if [ -x "$build/tests/e2e/test_minimum" ]; then
		tests+=("$build/tests/e2e/test_minimum")
	else
		echo "kernel-matrix: $build/tests/e2e/test_minimum not built: left out (make kernels builds it)" >&2
	fi
fi
all_tests=("${tests[@]}")

results=() timing=() bad=0
t_boot= t_total= used_accel=
boot_once() { # boot_once DIR VER ACCEL: 0 ran (whatever the tests did), 3 no init line in boot_tmo (kvm only), 1 no start
	local dir=$1 ver=$2 acc=$3 log=$cache/$2.log sock=$tmp/fs-$2.sock ro=$tmp/ro-$2 start now rc tail_pid= accel
	if [ "$acc" = kvm ]; then accel=(-enable-kvm -cpu "$kvm_cpu"); else accel=(-accel "tcg${tcg_opts:+,$tcg_opts}" -cpu "$tcg_cpu"); fi
	: >"$log"
	rm -f "$sock"
	mkdir -p "$ro"
	# virtiofsd serves a read-only bind of / made in its own mount namespace
	unshare -m --propagation private sh -c '
		mount --rbind / "$1" && mount -o remount,bind,ro "$1" || exit 1
		exec "$2" --socket-path="$3" -o source="$1" -o cache=always -o sandbox=namespace \
			-o no_posix_lock -o no_xattr --thread-pool-size=4' sh "$ro" "$virtiofsd" "$sock" \
		>"$tmp/virtiofsd-$ver.log" 2>&1 &
	fsd_pid=$!
	for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
	if ! [ -S "$sock" ]; then
		echo "kernel-matrix: $ver: virtiofsd did not start: $(tail -3 "$tmp/virtiofsd-$ver.log")" >&2
		kill "$fsd_pid" 2>/dev/null; wait "$fsd_pid" 2>/dev/null; fsd_pid=
		return 1
	fi
	start=$(date +%s.%N)
	timeout -k 5 "$guest_tmo" qemu-system-x86_64 "${accel[@]}" -m 2G -smp 2 -nographic \
		-no-reboot -monitor none -serial "file:$log" -nic none \
		-object memory-backend-memfd,id=mem,size=2G,share=on -numa node,memdev=mem \
		-chardev socket,id=fs0,path="$sock" -device vhost-user-fs-pci,chardev=fs0,tag=hostroot${KM_FS_OPTS:+,$KM_FS_OPTS} \
		-kernel "$dir/pkg/boot/vmlinuz-$ver" -initrd "$dir/initramfs.cpio.gz" \
		-append "console=ttyS0 loglevel=4 panic=-1 rdinit=/init kt.repo=$repo kt.bins=$bins_csv kt.tmo=$test_tmo${KM_GUEST_ENV:+ kt.env=$KM_GUEST_ENV}" \
		</dev/null >"$tmp/qemu-$ver.out" 2>&1 &
	qemu_pid=$!
	if [ "$verbose" = 1 ]; then
		tail -n +1 -f --pid="$qemu_pid" "$log" &
		tail_pid=$!
	fi
	# the boot: until the guest's init prints its first line
	t_boot=
	while kill -0 "$qemu_pid" 2>/dev/null; do
		now=$(date +%s.%N)
		if grep -aq "KT-GUEST-INIT" "$log"; then
			t_boot=$(awk -v a="$start" -v b="$now" 'BEGIN {printf "%.1f", b - a}')
			break
		fi
		if [ "$acc" = kvm ] && awk -v a="$start" -v b="$now" -v t="$boot_tmo" 'BEGIN {exit !(b - a > t)}'; then
			echo "kernel-matrix: $ver: no init line within ${boot_tmo}s under KVM: killing qemu (pid $qemu_pid)" >&2
			kill -9 "$qemu_pid" 2>/dev/null
			break
		fi
		sleep 0.2
	done
	wait "$qemu_pid"
	rc=$?
	qemu_pid=
	[ -n "$tail_pid" ] && { kill "$tail_pid" 2>/dev/null; wait "$tail_pid" 2>/dev/null; }
	kill "$fsd_pid" 2>/dev/null
	wait "$fsd_pid" 2>/dev/null
	fsd_pid=
	rmdir "$ro" 2>/dev/null
	t_total=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
	used_accel=$acc
	if [ -z "$t_boot" ] && [ "$acc" = kvm ]; then
		return 3
	fi
	[ "$rc" -eq 0 ] || echo "kernel-matrix: $ver: qemu exit $rc$([ "$rc" -eq 124 ] && echo " (timeout after ${guest_tmo}s)"): $(tail -3 "$tmp/qemu-$ver.out")" >&2
	return 0
}
run_guest() { # run_guest DIR VER: under KVM, once more under TCG when KVM does not boot
	local rc
	boot_once "$1" "$2" "$accel_mode"
	rc=$?
	if [ "$rc" -eq 3 ]; then
		echo "kernel-matrix: $2: KVM did not boot it ($(tail -2 "$tmp/qemu-$2.out" | tr '\n' ' ')): again under TCG" >&2
		boot_once "$1" "$2" tcg
		rc=$?
		used_accel="tcg (kvm failed)"
	fi
	return "$rc"
}

summarize_guest() { # summarize_guest VER: table rows from its log
	local ver=$1 log=$cache/$1.log line bin rc p f s secs done_rc
	tr -d '\r' <"$log" >"$tmp/log-$ver"
	if [ "$verbose" != 1 ]; then
		grep -aE '^KT-UNAME|verified +[0-9]+ instructions|^(connection|datagram|packet|byte|concurrent) +[0-9]+ arrived|^(retry quantum|one byte a segment|redis PING|TCP_USER_TIMEOUT|maxDelay|fq departures|strict calls|skipped: )|\[  (FAILED|ERROR) +\]|^kt-(init|guest):|^--- |Kernel panic|^\[ *[0-9.]+\] (BUG|WARNING|Oops)|libbpf: prog .*(failed|load)|expected=|BPF program is too large|processed [0-9]+ insns' \
			"$tmp/log-$ver" | sed "s|^|  $ver: |"
	fi
	for bin in "${tests[@]}"; do
		line=$(grep -a "^KT-RESULT $bin " "$tmp/log-$ver" | tail -1)
		if [ -n "$line" ]; then
			read -r _ _ rc p f s secs <<<"$line"
		else
			rc=- p=0 f=1 s=0 secs=-
		fi
		[ "$f" != 0 ] && bad=1
		results+=("$ver|${bin#"$build"/}|$p|$f|$s|$secs")
	done
	done_rc=$(grep -a '^KT-GUEST-DONE ' "$tmp/log-$ver" | tail -1 | awk '{print $2}')
	if [ -z "$done_rc" ]; then
		bad=1
		echo "kernel-matrix: $ver: the guest did not finish (no KT-GUEST-DONE in $log); its last lines:" >&2
		tail -15 "$tmp/log-$ver" | sed 's/^/    /' >&2
	elif [ "$done_rc" = 125 ]; then
		bad=1
	fi
	# boot: from qemu's start to the guest's first line of its own
	timing+=("$ver|$used_accel|${t_boot:-?}|$t_total|${done_rc:-none}")
}

t_total=
for spec in $kernels; do
	if [ "$spec" = bullseye ] && [ -z "${KM_TESTS:-}" ]; then
		tests=("$build/tests/e2e/test_minimum")
	else
		tests=("${all_tests[@]}")
	fi
	guest_tmo=${KM_GUEST_TIMEOUT:-$(( ${#tests[@]} * test_tmo + 120 ))}
	bins_csv=$(IFS=,; echo "${tests[*]}")
	dir=$(fetch "$spec") || { bad=1; results+=("$spec|(kernel not fetched)|0|1|0|-"); continue; }
	ver=${dir##*/}
	build_initramfs "$dir" "$ver" || { bad=1; results+=("$ver|(initramfs failed)|0|1|0|-"); continue; }
	echo "kernel-matrix: $ver: booting ($accel_mode), console in $cache/$ver.log" >&2
	run_guest "$dir" "$ver" || { bad=1; results+=("$ver|(guest not started)|0|1|0|-"); continue; }
	summarize_guest "$ver"
done

echo
printf '%-28s | %-26s | %6s | %6s | %7s | %7s\n' kernel "test binary" passed failed skipped seconds
printf '%s\n' "-----------------------------+----------------------------+--------+--------+---------+--------"
for r in ${results[@]+"${results[@]}"}; do
	IFS='|' read -r k b p f s secs <<<"$r"
	printf '%-28s | %-26s | %6s | %6s | %7s | %7s\n' "$k" "$b" "$p" "$f" "$s" "$secs"
done
echo
printf '%-28s | %-16s | %-8s | %-9s | %s\n' kernel accel "boot (s)" "total (s)" "guest rc"
for r in ${timing[@]+"${timing[@]}"}; do
	IFS='|' read -r k a tb tt g <<<"$r"
	printf '%-28s | %-16s | %-8s | %-9s | %s\n' "$k" "$a" "$tb" "$tt" "$g"
done
# the verifier's instruction counts (test_progs' and test_xdp's
# test_verifier_budget lines), a program a line, a kernel a column
vk=() vp=()
for r in ${timing[@]+"${timing[@]}"}; do vk+=("${r%%|*}"); done
if [ ${#vk[@]} -gt 0 ]; then
	for k in "${vk[@]}"; do
		grep -aoE '^[a-z_0-9]+ +verified +[0-9]+ instructions' "$tmp/log-$k" 2>/dev/null |
			awk -v k="$k" '{print k, $1, $3}'
	done >"$tmp/verified"
	if [ -s "$tmp/verified" ]; then
		echo
		printf '%-16s' "verified insns"
		for k in "${vk[@]}"; do printf ' | %26s' "$k"; done
		echo
		while read -r prog; do
			printf '%-16s' "$prog"
			for k in "${vk[@]}"; do
				printf ' | %26s' "$(awk -v k="$k" -v p="$prog" '$1 == k && $2 == p {v = $3} END {print (v == "" ? "-" : v)}' "$tmp/verified")"
			done
			echo
		done < <(awk '!seen[$2]++ {print $2}' "$tmp/verified")
	fi
fi
if [ "$bad" -ne 0 ]; then
	echo "kernel-matrix: FAILED (a binary failed or a guest did not finish; logs in $cache/)"
	exit 1
fi
echo "kernel-matrix: all passed"
