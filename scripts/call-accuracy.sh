#!/usr/bin/env bash
# SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
# call-accuracy: how exactly unit `call` counts HTTP calls made by unmodified
# load generators and libraries. A shadow limit (enforce: false, huge max,
# so nothing is held back) on a private member cgroup counts turns on
# 127.0.0.1; a private nginx (outside that cgroup) serves plain HTTP/1.1,
# TLS 1.2 only, TLS 1.3 only and TLS + HTTP/2 and logs every request; a
# private gRPC server (tests/tools/kt-grpccall.py, also outside) counts the
# gRPC calls it handled. Each client runs inside the member cgroup, and one
# row compares the requests the server logged for the run with the calls the
# kernel counted (the limit's `admitted`, before and after) and the
# connections the server saw.
#
#   sudo scripts/call-accuracy.sh        (from the repository root, after make)
#
# Needs root, bpffs, a cgroup v2 mount, nginx, openssl, curl, ab
# (apache2-utils), wrk, h2load (nghttp2-client) and /usr/bin/python3 with
# httpx (python3-httpx); the gRPC rows also need python3-grpcio, and are
# skipped (with a line saying so) without it. Every load is bounded (counts,
# durations, timeout 30); only 127.0.0.1 is used. Everything it creates (temp
# dir, cgroup, pin dir, nginx, gRPC server, kthrottled) is removed on exit.
# Exit 0 when every client ran cleanly.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
DAEMON=$ROOT/build/kthrottled
CTL=$ROOT/build/kthrottlectl
PY=/usr/bin/python3
HTTPCALL=$ROOT/tests/tools/kt-httpcall.py
GRPCCALL=$ROOT/tests/tools/kt-grpccall.py
NGINX=/usr/sbin/nginx

die() { echo "call-accuracy: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root"
for b in "$DAEMON" "$CTL"; do [ -x "$b" ] || die "$b not built (make)"; done
for b in "$NGINX" openssl curl ab wrk h2load ss "$PY"; do
	command -v "$b" >/dev/null || die "$b missing"
done
"$PY" -c 'import httpx' 2>/dev/null || die "$PY lacks httpx (apt-get install python3-httpx)"
HAVE_GRPC=1
"$PY" -c 'import grpc' 2>/dev/null || HAVE_GRPC=0
CG2=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)
[ -n "$CG2" ] || die "no cgroup2 mount in /proc/mounts"
if ! awk '$2 == "/sys/fs/bpf" && $3 == "bpf" { f = 1 } END { exit !f }' /proc/mounts; then
	mount -t bpf bpf /sys/fs/bpf || die "cannot mount bpffs at /sys/fs/bpf"
fi

TMP=$(mktemp -d /tmp/kt-acc.XXXXXX)
ID=${TMP##*.}
PIN=/sys/fs/bpf/kt-acc-$ID
CG=$CG2/kt-acc-$ID
SOCK=$TMP/kthrottled.sock
NGINX_PID='' DAEMON_PID='' GRPC_PID=''

stop_pid() { # PID: TERM, wait up to 5 s, then KILL
	local pid=$1 _
	kill -TERM "$pid" 2>/dev/null || return 0
	for _ in $(seq 50); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

cleanup() {
	local rc=$? p
	set +e
	trap - EXIT INT TERM
	[ -n "$GRPC_PID" ] && stop_pid "$GRPC_PID"
	[ -n "$NGINX_PID" ] && stop_pid "$NGINX_PID"
	[ -n "$DAEMON_PID" ] && stop_pid "$DAEMON_PID"
	if [ -d "$PIN" ]; then
		"$DAEMON" --cleanup --pin-dir "$PIN" >"$TMP/cleanup.log" 2>&1 ||
			{ echo "call-accuracy: kthrottled --cleanup failed:" >&2; cat "$TMP/cleanup.log" >&2; rc=1; }
	fi
	if [ -d "$CG" ]; then
		# a client that outlived its timeout: kill what is left in the cgroup
		while read -r p; do kill -KILL "$p" 2>/dev/null; done <"$CG/cgroup.procs"
		for p in $(seq 20); do rmdir "$CG" 2>/dev/null && break; sleep 0.1; done
		[ -d "$CG" ] && { echo "call-accuracy: could not remove $CG" >&2; rc=1; }
	fi
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 130 ] && [ "$rc" -ne 143 ] && [ -s "$TMP/daemon.log" ]; then
		echo "call-accuracy: kthrottled log (tail):" >&2
		tail -n 20 "$TMP/daemon.log" >&2
	fi
	rm -rf "$TMP"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- setup --

# (gRPC checks the name: it wants 127.0.0.1 in subjectAltName, not just CN)
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 \
	-addext subjectAltName=IP:127.0.0.1 -keyout "$TMP/key.pem" -out "$TMP/cert.pem" \
	>/dev/null 2>&1 || die "openssl req failed"

# four free ports: bound to 127.0.0.1:0 by the kernel, then released
read -r P_PLAIN P_TLS12 P_TLS13 P_H2 < <("$PY" -c '
import socket
ss = [socket.socket() for _ in range(4)]
for s in ss:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')

mkdir "$CG"
cat >"$TMP/kthrottled.yaml" <<EOF
tickInterval: 100ms
pinDir: $PIN
socket: $SOCK
limits:
  - {name: calls, cgroups: [$CG], unit: call, burst: 1000000, enforce: false,
     match: {cidrs: [127.0.0.1/32]}, rateLimit: {max: 1000000}}
EOF
"$DAEMON" --config "$TMP/kthrottled.yaml" >"$TMP/daemon.log" 2>&1 &
DAEMON_PID=$!

mkdir -p "$TMP/logs"
cat >"$TMP/nginx.conf" <<EOF
worker_processes 2;
pid $TMP/nginx.pid;
error_log $TMP/logs/error.log warn;
events { worker_connections 256; }
http {
    log_format kt '\$server_port \$connection \$connection_requests \$status "\$request"';
    access_log $TMP/logs/access.log kt;
    default_type text/plain;
    keepalive_requests 100000;
    keepalive_timeout 60s;
    client_body_temp_path $TMP/body;
    proxy_temp_path $TMP/proxy;
    fastcgi_temp_path $TMP/fastcgi;
    uwsgi_temp_path $TMP/uwsgi;
    scgi_temp_path $TMP/scgi;
    ssl_certificate $TMP/cert.pem;
    ssl_certificate_key $TMP/key.pem;
    server { listen 127.0.0.1:$P_PLAIN; location / { return 200 "ok"; } }
    server { listen 127.0.0.1:$P_TLS12 ssl; ssl_protocols TLSv1.2;
             location / { return 200 "ok"; } }
    server { listen 127.0.0.1:$P_TLS13 ssl; ssl_protocols TLSv1.3;
             location / { return 200 "ok"; } }
    server { listen 127.0.0.1:$P_H2 ssl http2; ssl_protocols TLSv1.2 TLSv1.3;
             location / { return 200 "ok"; } }
}
EOF
"$NGINX" -p "$TMP" -e "$TMP/logs/error.log" -c "$TMP/nginx.conf" -g 'daemon off;' \
	>"$TMP/nginx.out" 2>&1 &
NGINX_PID=$!

ready=0
for _ in $(seq 100); do
	kill -0 "$DAEMON_PID" 2>/dev/null || { cat "$TMP/daemon.log" >&2; die "kthrottled exited"; }
	kill -0 "$NGINX_PID" 2>/dev/null || { cat "$TMP/nginx.out" "$TMP/logs/error.log" >&2; die "nginx exited"; }
	listening=$(ss -Hltn | awk -v a="$P_PLAIN $P_TLS12 $P_TLS13 $P_H2" '
		BEGIN { n = split(a, p, " "); for (i = 1; i <= n; i++) want["127.0.0.1:" p[i]] = 1 }
		$4 in want { c++ } END { print c + 0 }')
	if [ "$listening" -eq 4 ] && "$CTL" -s "$SOCK" health >/dev/null 2>&1; then
		ready=1
		break
	fi
	sleep 0.1
done
[ "$ready" -eq 1 ] || { cat "$TMP/daemon.log" >&2; die "kthrottled or nginx not ready in 10 s"; }

# ---------------------------------------------------------------- runs --

admitted() { # the limit's calls counted so far
	"$CTL" -s "$SOCK" status --json | "$PY" -c '
import json, sys
d = json.load(sys.stdin)
ls = d["limits"] if isinstance(d, dict) else d
print(next(int(l["admitted"]) for l in ls if l["name"] == "calls"))'
}

log_lines() { wc -l <"$TMP/logs/access.log"; }

# requests and distinct connections nginx logged on PORT after line FROM
nginx_count() {
	tail -n "+$(( $2 + 1 ))" "$TMP/logs/access.log" | awk -v port="$1" '
		$1 == port { n++; if (!($2 in c)) { c[$2] = 1; k++ } }
		END { print n + 0, k + 0 }'
}

settle() { # admitted no longer moving (the status is refreshed every tick)
	local a b _
	a=$(admitted)
	for _ in $(seq 30); do
		sleep 0.3
		b=$(admitted)
		[ "$a" = "$b" ] && break
		a=$b
	done
	[ "$a" = "$b" ] || die "admitted still moving after 9 s"
	echo "$b"
}

# run CMD... inside the member cgroup, output to $TMP/out, bounded by 30 s
in_cgroup() {
	(echo "$BASHPID" >"$CG/cgroup.procs" && exec timeout 30 "$@") >"$TMP/out" 2>&1
}

ROWS=()
FAILED=0
row() { # CLIENT PROTOCOL PORT CLIENT_CONNS CMD...
	local client=$1 proto=$2 port=$3 cconns=$4 before from after reqs conns rc=0
	shift 4
	before=$(settle)
	from=$(log_lines)
	in_cgroup "$@" || rc=$?
	sleep 0.2 # nginx logs a request when its response is done
	after=$(settle)
	read -r reqs conns < <(nginx_count "$port" "$from")
	if [ "$rc" -ne 0 ] || [ "$reqs" -eq 0 ]; then
		echo "call-accuracy: $client $proto failed (exit $rc, $reqs requests):" >&2
		tail -n 15 "$TMP/out" >&2
		FAILED=1
	fi
	if [ "$cconns" = parse ]; then
		cconns=$(client_conns "$client")
	fi
	cp "$TMP/out" "$TMP/out.$client.$port"
	ROWS+=("$client|$proto|$reqs|$(( after - before ))|$conns|$cconns")
}

# a gRPC row: a fresh kt-grpccall.py server outside the cgroup for this row
# only, CALLS unary calls over one channel from inside it, K in flight at once
grpc_row() { # CLIENT PROTOCOL plain|tls K CALLS
	local client=$1 proto=$2 tls=$3 k=$4 calls=$5 before after reqs conns rc=0 _
	local sargs=() cargs=()
	if [ "$tls" = tls ]; then
		sargs=(--tls --cert "$TMP/cert.pem" --key "$TMP/key.pem")
		cargs=(--tls --ca "$TMP/cert.pem")
	fi
	rm -f "$TMP/grpc.port" "$TMP/grpc.json" "$TMP/grpc.client.json"
	"$PY" "$GRPCCALL" serve --port-file "$TMP/grpc.port" --out "$TMP/grpc.json" \
		--duration 120 "${sargs[@]}" >"$TMP/grpc.serve.log" 2>&1 &
	GRPC_PID=$!
	for _ in $(seq 100); do
		[ -s "$TMP/grpc.port" ] && break
		kill -0 "$GRPC_PID" 2>/dev/null || break
		sleep 0.1
	done
	[ -s "$TMP/grpc.port" ] || { cat "$TMP/grpc.serve.log" >&2; die "gRPC server not ready in 10 s"; }
	before=$(settle)
	in_cgroup "$PY" "$GRPCCALL" client --url "$H:$(cat "$TMP/grpc.port")" "${cargs[@]}" \
		--calls "$calls" --concurrency "$k" --out "$TMP/grpc.client.json" || rc=$?
	after=$(settle)
	stop_pid "$GRPC_PID"
	GRPC_PID=''
	if [ -s "$TMP/grpc.json" ]; then
		read -r reqs conns < <("$PY" -c '
import json, sys
d = json.load(open(sys.argv[1]))
print(d["requests"], d["connections"])' "$TMP/grpc.json")
	else
		reqs=0 conns=0
		echo "call-accuracy: $client $proto: the gRPC server wrote no summary:" >&2
		tail -n 15 "$TMP/grpc.serve.log" >&2
	fi
	if [ "$rc" -ne 0 ] || [ "$reqs" -ne "$calls" ]; then
		echo "call-accuracy: $client $proto failed (exit $rc, $reqs of $calls requests):" >&2
		cat "$TMP/grpc.client.json" >&2 2>/dev/null
		tail -n 15 "$TMP/out" >&2
		FAILED=1
	fi
	ROWS+=("$client|$proto|$reqs|$(( after - before ))|$conns|-")
}

# connections as the client reports them, from $TMP/out
client_conns() {
	case $1 in
	curl) awk '/^KTC / { s += $2 } END { print s + 0 }' "$TMP/out" ;;
	python-httpx) "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["connects"])' "$TMP/out" ;;
	*) echo - ;;
	esac
}

curl_args() { # URL: 30 transfers of URL on one command line, one connect count each
	local _
	CURL=(curl -sS -k --http1.1 --max-time 20 -w 'KTC %{num_connects}\n')
	for _ in $(seq 30); do CURL+=(-o /dev/null "$1"); done
}

H=127.0.0.1
curl_args "http://$H:$P_PLAIN/"
row curl "HTTP/1.1" "$P_PLAIN" parse "${CURL[@]}"
curl_args "https://$H:$P_TLS13/"
row curl "HTTP/1.1 TLS 1.3" "$P_TLS13" parse "${CURL[@]}" --tlsv1.3

row "ab -k" "HTTP/1.1" "$P_PLAIN" - ab -k -n 2000 -c 4 -s 20 "http://$H:$P_PLAIN/"
row "ab -k" "HTTP/1.1 TLS 1.2" "$P_TLS12" - ab -k -n 2000 -c 4 -s 20 -f TLS1.2 "https://$H:$P_TLS12/"

row wrk "HTTP/1.1" "$P_PLAIN" 8 wrk -t2 -c8 -d3s "http://$H:$P_PLAIN/"
row wrk "HTTP/1.1 TLS 1.3" "$P_TLS13" 8 wrk -t2 -c8 -d3s "https://$H:$P_TLS13/"

row "h2load -m 10" "HTTP/2 TLS" "$P_H2" 4 h2load -n 2000 -c 4 -m 10 "https://$H:$P_H2/"
row "h2load -m 1" "HTTP/2 TLS" "$P_H2" 4 h2load -n 2000 -c 4 -m 1 "https://$H:$P_H2/"

row python-httpx "HTTP/1.1 TLS 1.3" "$P_TLS13" parse \
	"$PY" "$HTTPCALL" client --lib httpx --url "https://$H:$P_TLS13/" --conns 4 --duration 2

SKIPPED=()
if [ "$HAVE_GRPC" -eq 1 ]; then
	for k in 1 10; do
		grpc_row "grpc (python3-grpcio), $k in flight" "HTTP/2 (gRPC), plain" plain "$k" 1000
	done
	for k in 1 10; do
		grpc_row "grpc (python3-grpcio), $k in flight" "HTTP/2 (gRPC), TLS" tls "$k" 1000
	done
else
	SKIPPED+=("grpc (python3-grpcio): skipped, $PY has no grpc module (apt-get install python3-grpcio)")
fi

# ---------------------------------------------------------------- table --

echo
echo "| client | protocol | requests at nginx | calls counted by the kernel | counted/requests | connections (nginx) | connections (client) |"
echo "|---|---|---:|---:|---:|---:|---:|"
for r in "${ROWS[@]}"; do
	IFS='|' read -r c p n k cn cc <<<"$r"
	printf '| %s | %s | %d | %d | %s | %d | %s |\n' "$c" "$p" "$n" "$k" \
		"$(awk -v k="$k" -v n="$n" 'BEGIN { if (n > 0) printf "%.3f", k / n; else print "-" }')" "$cn" "$cc"
done
echo
for s in ${SKIPPED[@]+"${SKIPPED[@]}"}; do echo "call-accuracy: $s"; done
[ "$FAILED" -eq 0 ] || die "a client failed (see above)"
