#!/usr/bin/env bash
# kthrottle demo on the embedded default (no store): creates the cgroup
# "kthrottle-demo", starts kthrottled with examples/demo.yaml, floods UDP from
# a process inside the cgroup and shows the admitted rate live, then from a
# process outside it (untouched). Cleans up everything it made.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}
CONF=examples/demo.yaml
DURATION=${DEMO_SECONDS:-8}

[ "$(id -u)" -eq 0 ] || { echo "demo: run as root (BPF and cgroups)" >&2; exit 1; }
cg2=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)
[ -n "$cg2" ] || { echo "demo: no cgroup v2 mount in /proc/mounts" >&2; exit 1; }
CG="$cg2/kthrottle-demo"
PIN=$(sed -n 's/^pinDir: *//p' $CONF)
SOCK=$(sed -n 's/^socket: *//p' $CONF)
mkdir -p "$CG"
LOG=$(mktemp)
daemon=""
cleanup() {
	[ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null || true
	"$B/kthrottled" --cleanup --pin-dir "$PIN" >/dev/null 2>&1 || true
	rmdir "$CG" 2>/dev/null || true
	rm -f "$LOG"
}
trap cleanup EXIT

"$B/kthrottled" --config $CONF >"$LOG" 2>&1 &
daemon=$!
for _ in $(seq 100); do
	"$B/kthrottlectl" -s "$SOCK" status >/dev/null 2>&1 && break
	kill -0 $daemon 2>/dev/null || { cat "$LOG"; exit 1; }
	sleep 0.05
done
cat "$LOG"
echo
echo "== limit: $(sed -n 's/^ *max: *//p' $CONF | head -1) datagrams/s to UDP ports 9000-9100 from cgroup $CG"
echo "== flooding 127.0.0.1:9000 from inside the cgroup for ${DURATION}s; live view:"
"$B/tools/kt-load" --cgroup "$CG" --mode udp --addr 127.0.0.1 --port 9000 --duration "$DURATION" >"$LOG.in" &
load=$!
"$B/kthrottlectl" -p "$PIN" watch --interval 1 --count "$DURATION"
wait $load
echo "== inside the cgroup:  $(cat "$LOG.in")   (refused sends failed with EBUSY)"
rm -f "$LOG.in"
echo "== same flood from outside the cgroup for 1s (not limited):"
echo "   $("$B/tools/kt-load" --mode udp --addr 127.0.0.1 --port 9000 --duration 1)"
echo
"$B/kthrottlectl" -s "$SOCK" status
