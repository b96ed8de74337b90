#!/bin/sh
# What runs inside a scripts/kernel-matrix.sh guest, in two stages.
#
#   init  (no argument, as /init of the initramfs, busybox sh, PID 1): loads
#         the modules listed in /modules.list (the virtio-fs root's and the
#         traffic tests', in dependency order), mounts the host's root
#         read-only over virtio-fs (tag hostroot) at /newroot with fresh
#         proc, sys, devtmpfs, devpts, tmpfs (/tmp /run /var/tmp /root
#         /dev/shm), bpffs, cgroup2, debugfs and tracefs over it, brings up
#         lo, chroots in and runs this file again with "run" (bash, the
#         host's), then powers off. A guest never writes to the host.
#   run   (in the chroot): prints uname -r, runs each test binary through
#         scripts/run-tests.sh under its own timeout, and after each prints
#         one machine line for the host:
#           KT-RESULT <binary> <rc> <passed> <failed> <skipped> <seconds>
#         then "KT-GUEST-DONE <rc>".
#
# Parameters come on the kernel command line:
#   kt.repo=DIR     the checkout (scripts/run-tests.sh is found there)
#   kt.bins=A,B,..  test binaries (absolute paths), run in this order
#   kt.tmo=S        seconds each binary may take (default 300)
#   kt.env=K=V,..   extra environment for the tests (no spaces)

if [ "${1:-}" != run ]; then
	# ---- stage 1: PID 1 in the initramfs
	/bin/busybox --install -s /bin
	export PATH=/bin
	mkdir -p /proc /sys /dev /newroot
	mount -t proc proc /proc
	mount -t sysfs sysfs /sys
	mount -t devtmpfs devtmpfs /dev 2>/dev/null
	exec </dev/console >/dev/console 2>&1
	echo "KT-GUEST-INIT $(uname -r)"
	# the kernel's own boot time, to the first line of init
	echo "KT-BOOT-UPTIME $(cut -d' ' -f1 /proc/uptime)"
	repo=
	for w in $(cat /proc/cmdline); do
		case $w in kt.repo=*) repo=${w#kt.repo=} ;; esac
	done
	while read -r m; do
		[ -n "$m" ] || continue
		insmod "/lib/modules/$m" 2>/tmp-insmod.err ||
			grep -q 'File exists' /tmp-insmod.err ||
			echo "kt-init: insmod $m: $(cat /tmp-insmod.err)"
	done </modules.list
	fail() {
		echo "kt-init: $*"
		echo "KT-GUEST-DONE 125"
		poweroff -f
		echo o >/proc/sysrq-trigger
		sleep 10
	}
	mount -t virtiofs -o ro hostroot /newroot || fail "mount of the host root (virtiofs hostroot) failed"
	r=/newroot
	mount -t proc proc $r/proc || fail "proc"
	mount -t sysfs sysfs $r/sys || fail "sysfs"
	mount -t devtmpfs devtmpfs $r/dev || fail "devtmpfs"
	mkdir -p $r/dev/pts $r/dev/shm
	mount -t devpts -o newinstance,ptmxmode=0666 devpts $r/dev/pts
	mount -t tmpfs -o mode=1777 tmpfs $r/dev/shm
	# a checkout under a dir that gets a tmpfs (CI may clone into /tmp) is
	# held by a bind mount first and put back on top of the tmpfs
	keep=
	for d in tmp var/tmp run root; do
		case $repo in /$d/*)
			mkdir -p /keep && mount -o bind "$r$repo" /keep || fail "bind of $repo"
			keep=$repo ;;
		esac
	done
	for d in tmp var/tmp; do mount -t tmpfs -o mode=1777 tmpfs $r/$d || fail "tmpfs /$d"; done
	for d in run root; do mount -t tmpfs -o mode=755 tmpfs $r/$d || fail "tmpfs /$d"; done
	if [ -n "$keep" ]; then
		mkdir -p "$r$keep" && mount -o bind /keep "$r$keep" || fail "bind of $keep back"
	fi
	mount -t bpf bpffs $r/sys/fs/bpf || fail "bpffs"
	# the host's /sys/fs/cgroup is not seen (a fresh sysfs): cgroup2 alone
	mount -t cgroup2 cgroup2 $r/sys/fs/cgroup || fail "cgroup2"
	mount -t debugfs debugfs $r/sys/kernel/debug 2>/dev/null
	mount -t tracefs tracefs $r/sys/kernel/tracing 2>/dev/null
	# controllers for the children of the root (what systemd would enable)
	for c in $(cat $r/sys/fs/cgroup/cgroup.controllers); do
		echo "+$c" >$r/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
	done
	ip link set lo up
	hostname kt-guest
	[ -x "$r$repo/scripts/kernel-guest-init.sh" ] || fail "$repo/scripts/kernel-guest-init.sh not in the host root"
	chroot $r /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		HOME=/root TERM=dumb /bin/bash "$repo/scripts/kernel-guest-init.sh" run
	echo "KT-GUEST-DONE $?"
	sync
	poweroff -f
	echo o >/proc/sysrq-trigger
	sleep 10
	exit 0
fi

# ---- stage 2: in the host's root (bash)
set -u
repo= bins= tmo=300 extra=
for w in $(cat /proc/cmdline); do
	case $w in
	kt.repo=*) repo=${w#kt.repo=} ;;
	kt.bins=*) bins=${w#kt.bins=} ;;
	kt.tmo=*) tmo=${w#kt.tmo=} ;;
	kt.env=*) extra=${w#kt.env=} ;;
	esac
done
IFS=, read -r -a envs <<<"$extra"
for kv in "${envs[@]}"; do [ -n "$kv" ] && export "${kv?}"; done
echo "KT-UNAME $(uname -r)"
echo "KT-CMDLINE $(cat /proc/cmdline)"
cd /tmp || exit 1
worst=0
IFS=, read -r -a list <<<"$bins"
for bin in "${list[@]}"; do
	if [ ! -x "$bin" ]; then
		echo "KT-RESULT $bin 127 0 1 0 0"
		worst=1
		continue
	fi
	start=$(date +%s)
	# timeout kills the whole group (run-tests.sh, the binary, its children)
	timeout -k 10 "$tmo" "$repo/scripts/run-tests.sh" "$bin" 2>&1 | tee /tmp/kt-guest.out
	rc=${PIPESTATUS[0]}
	secs=$(($(date +%s) - start))
	line=$(grep -E "^--- $bin: rc=" /tmp/kt-guest.out | tail -1)
	if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] || [ -z "$line" ]; then
		echo "kt-guest: $bin did not finish within ${tmo}s (rc=$rc)"
		p=$(grep -oE '\[ +OK +\]' /tmp/kt-guest.out | wc -l)
		echo "KT-RESULT $bin $rc $p 1 0 $secs"
		worst=1
		continue
	fi
	p=$(sed -E 's/.* passed=([0-9]+).*/\1/' <<<"$line")
	f=$(sed -E 's/.* failed=([0-9]+).*/\1/' <<<"$line")
	s=$(sed -E 's/.* skipped=([0-9]+).*/\1/' <<<"$line")
	echo "KT-RESULT $bin $rc $p $f $s $secs"
	[ "$f" -gt 0 ] && worst=1
done
exit $worst
