#!/usr/bin/python3
# SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
# kt-httpcall: keep-alive HTTP server and clients for the call-unit e2e tests,
# which must count HTTP *calls* where they arrive: at a real server that stamps
# each request line, sent by unmodified libraries over a few reused connections.
# Run with Debian's /usr/bin/python3 (python3-requests, python3-httpx).

import http.client
import importlib.util
import http.server
import json
import math
import os
import select
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
from ktcall_common import Parser, bounded_float, bounded_int, finite_float, write_atomic

PROG = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "kt-httpcall.py"

SERVE_MAX_DURATION = 600.0
CLIENT_MAX_DURATION = 120.0
MAX_CONNS = 64
MAX_TIMEOUT = 120.0
MAX_CALLS_CAP = 10_000_000      # --max-calls upper bound
CURL_DEFAULT_URLS = 2000        # URLs per curl process without --max-calls
CURL_MAX_URLS = 20000           # keeps the argument list well under ARG_MAX
MAX_BODY = 1 << 20              # largest POST body the server reads
HANDLER_IDLE_TIMEOUT = 60.0     # server drops a connection idle this long
RESPONSE_BODY = b"ok\n"
REQUEST_BODY = b"kt-httpcall\n"
CURL_MARK = b"KTCALL"           # starts each curl -w line


# ---------------------------------------------------------------- options --

def emit_summary(path, summary):
    text = json.dumps(summary, indent=1, sort_keys=True) + "\n"
    if path:
        write_atomic(path, text)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()


# ----------------------------------------------------------------- server --

def max_window(times, width=1.0):
    """Largest number of sorted timestamps in any half-open window [t, t+width).

    A window holding the most points can always be slid right until its left
    edge hits a point, so windows starting at each timestamp suffice; the
    right pointer only moves forward (two-pointer sweep, O(n))."""
    best = 0
    j = 0
    n = len(times)
    for i in range(n):
        if j < i:
            j = i
        edge = times[i] + width
        while j < n and times[j] < edge:
            j += 1
        if j - i > best:
            best = j - i
    return best


def per_second_bins(times, start):
    if not times:
        return []
    bins = [0] * (int(times[-1] - start) + 1)
    for t in times:
        bins[int(t - start)] += 1
    return bins


class Recorder:
    def __init__(self):
        self.lock = threading.Lock()
        self.times = []
        self.connections = 0
        self.tls_failures = 0

    def request(self, t):
        with self.lock:
            self.times.append(t)

    def connection(self):
        with self.lock:
            self.connections += 1

    def tls_failure(self):
        with self.lock:
            self.tls_failures += 1

    def snapshot(self):
        with self.lock:
            return sorted(self.times), self.connections, self.tls_failures


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"       # keep-alive
    server_version = "kt-httpcall"
    sys_version = ""
    timeout = HANDLER_IDLE_TIMEOUT
    # Buffer the whole response (handle_one_request() flushes it after each
    # call) and set TCP_NODELAY: a header write followed by a small body write
    # would otherwise meet the client's delayed ACK and add ~40 ms per call.
    wbufsize = -1
    disable_nagle_algorithm = True

    def log_message(self, format, *args):   # no per-request logging
        pass

    def parse_request(self):
        # handle_one_request() has just read the request line: stamp it now,
        # before the headers are parsed.
        self._kt_t = time.monotonic()
        return super().parse_request()

    def _answer(self):
        self.server.recorder.request(self._kt_t)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(RESPONSE_BODY)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(RESPONSE_BODY)

    def do_GET(self):
        self._answer()

    def do_HEAD(self):
        self._answer()

    def do_POST(self):
        te = self.headers.get("Transfer-Encoding")
        cl = self.headers.get("Content-Length", "0")
        try:
            n = int(cl, 10)
        except ValueError:
            n = -1
        if te or n < 0 or n > MAX_BODY:
            self.close_connection = True
            self.send_error(411 if te else 413)
            return
        left = n
        while left > 0:
            chunk = self.rfile.read(min(left, 65536))
            if not chunk:
                self.close_connection = True
                return
            left -= len(chunk)
        self._answer()


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr, recorder, tls_ctx):
        self.recorder = recorder
        self.tls_ctx = tls_ctx
        super().__init__(addr, Handler)

    def get_request(self):
        conn, addr = super().get_request()
        self.recorder.connection()
        return conn, addr

    def finish_request(self, request, client_address):
        # Runs in the connection's own thread: the TLS handshake happens here,
        # not in the accept loop.
        if self.tls_ctx is not None:
            try:
                request.settimeout(HANDLER_IDLE_TIMEOUT)
                request = self.tls_ctx.wrap_socket(request, server_side=True)
            except (OSError, ssl.SSLError):
                self.recorder.tls_failure()
                try:
                    request.close()
                except OSError:
                    pass
                return
        try:
            super().finish_request(request, client_address)
        finally:
            if request is not None and self.tls_ctx is not None:
                try:
                    request.close()
                except OSError:
                    pass

    def handle_error(self, request, client_address):
        pass    # a client going away mid-call is not worth a traceback


def tls_server_context(version, cert, key):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    v = ssl.TLSVersion.TLSv1_2 if version == "1.2" else ssl.TLSVersion.TLSv1_3
    ctx.minimum_version = v
    ctx.maximum_version = v
    ctx.load_cert_chain(cert, key)
    return ctx


def cmd_serve(args, parser):
    if args.tls != "none":
        if not args.cert or not args.key:
            parser.error("--tls %s needs --cert and --key" % args.tls)
        for p in (args.cert, args.key):
            if not os.path.isfile(p):
                parser.error("no such file: %s" % p)
    elif args.cert or args.key:
        parser.error("--cert/--key need --tls 1.2 or 1.3")

    tls_ctx = None
    if args.tls != "none":
        try:
            tls_ctx = tls_server_context(args.tls, args.cert, args.key)
        except (OSError, ssl.SSLError, ValueError) as e:
            sys.stderr.write("%s serve: error: TLS setup: %s\n" % (PROG, e))
            return 1

    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    recorder = Recorder()
    try:
        server = Server(("127.0.0.1", 0), recorder, tls_ctx)
    except OSError as e:
        sys.stderr.write("%s serve: error: bind/listen: %s\n" % (PROG, e))
        return 1
    port = server.server_address[1]
    started = time.monotonic()
    deadline = started + args.duration

    # Listening already (the constructor bound and listened): publish the port.
    if args.port_file:
        try:
            write_atomic(args.port_file, "%d\n" % port)
        except OSError as e:
            sys.stderr.write("%s serve: error: --port-file: %s\n" % (PROG, e))
            server.server_close()
            return 1

    loop = threading.Thread(target=server.serve_forever,
                            kwargs={"poll_interval": 0.1}, daemon=True)
    loop.start()

    reason = "duration"
    while not stop.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            break
        stop.wait(min(left, 0.5))
    if stop.is_set():
        reason = "signal"
    stopped = time.monotonic()

    server.shutdown()           # accept loop exits; daemon handler threads die with us
    server.server_close()

    times, connections, tls_failures = recorder.snapshot()
    if args.window_from is not None:
        considered = [t for t in times if t >= args.window_from]
    else:
        considered = times
    summary = {
        "requests": len(times),
        "connections": connections,
        "first": times[0] if times else None,
        "last": times[-1] if times else None,
        "max_window": max_window(considered),
        "per_second": per_second_bins(considered,
                                      considered[0] if considered else 0.0),
        "per_second_start": considered[0] if considered else None,
        "window_from": args.window_from,
        "window_requests": len(considered),
        "tls": args.tls,
        "tls_failures": tls_failures,
        "port": port,
        "started": started,
        "stopped": stopped,
        "stop_reason": reason,
    }
    if args.times:
        summary["times"] = times
    try:
        emit_summary(args.out, summary)
    except OSError as e:
        sys.stderr.write("%s serve: error: --out: %s\n" % (PROG, e))
        return 1
    return 0


# ----------------------------------------------------------------- client --

class Stats:
    """Per-thread results; merged by the main thread under its lock."""

    def __init__(self):
        self.lock = threading.Lock()
        self.ok = 0
        self.errors = 0
        self.error_kinds = {}
        self.connects = 0
        self.lat_ms = []
        self.curl_exhausted = False
        self.curl_killed = False
        self.done = False

    def add_ok(self, ms):
        with self.lock:
            self.ok += 1
            self.lat_ms.append(ms)

    def add_error(self, kind):
        with self.lock:
            self.errors += 1
            self.error_kinds[kind] = self.error_kinds.get(kind, 0) + 1

    def add_connects(self, n):
        with self.lock:
            self.connects += n


class Pacer:
    """At most `interval` seconds between call starts of one thread (no burst
    catch-up after a slow call); None = flat out."""

    def __init__(self, interval, phase, stop, deadline):
        self.interval = interval
        self.stop = stop
        self.deadline = deadline
        self.next = time.monotonic() + (phase if interval else 0.0)

    def wait(self):
        """False when the thread must stop instead of calling."""
        if self.stop.is_set():
            return False
        if self.interval is None:
            return time.monotonic() < self.deadline
        now = time.monotonic()
        if self.next > now:
            if self.next >= self.deadline:
                return False
            self.stop.wait(self.next - now)
            if self.stop.is_set():
                return False
            now = time.monotonic()
        if now >= self.deadline:
            return False
        self.next = max(self.next, now) + self.interval
        return True


def insecure_client_context():
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def run_httpclient(cfg, stats, pacer):
    u = cfg["url"]
    host, port = u.hostname, u.port
    target = u.path or "/"
    if u.query:
        target += "?" + u.query
    if u.scheme == "https":
        conn = http.client.HTTPSConnection(host, port, timeout=cfg["timeout"],
                                           context=insecure_client_context())
    else:
        conn = http.client.HTTPConnection(host, port, timeout=cfg["timeout"])
    # Count TCP connections made (the first call's, and after a close or an
    # error): HTTPConnection.connect() makes its socket with
    # self._create_connection (socket.create_connection); count its successes.
    create = conn._create_connection

    def counted_create(*a, **kw):
        sock = create(*a, **kw)
        stats.add_connects(1)
        return sock

    conn._create_connection = counted_create
    body = REQUEST_BODY if cfg["method"] == "POST" else None
    calls = 0
    try:
        while calls < cfg["max_calls"] and pacer.wait():
            calls += 1
            t0 = time.monotonic()
            try:
                conn.request(cfg["method"], target, body=body)
                resp = conn.getresponse()
                resp.read()
                status = resp.status
                if resp.will_close:
                    conn.close()
            except Exception as e:
                conn.close()
                stats.add_error(type(e).__name__)
                continue
            if 200 <= status < 300:
                stats.add_ok((time.monotonic() - t0) * 1000.0)
            else:
                stats.add_error("HTTP_%d" % status)
    finally:
        conn.close()


_tls_counter = threading.local()


def _install_urllib3_connect_counter():
    """Count TCP connects that urllib3 (under requests) makes, per thread."""
    import urllib3.connection
    cls = urllib3.connection.HTTPConnection
    if getattr(cls, "_kt_counted", False):
        return
    orig = cls._new_conn

    def counted_new_conn(self):
        sock = orig(self)
        _tls_counter.n = getattr(_tls_counter, "n", 0) + 1
        return sock

    cls._new_conn = counted_new_conn
    cls._kt_counted = True


def run_requests(cfg, stats, pacer):
    import requests
    import urllib3
    urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    _install_urllib3_connect_counter()
    _tls_counter.n = 0
    url = cfg["url"].geturl()
    data = REQUEST_BODY if cfg["method"] == "POST" else None
    calls = 0
    with requests.Session() as s:
        s.trust_env = False     # no proxies from the environment
        s.verify = False
        while calls < cfg["max_calls"] and pacer.wait():
            calls += 1
            before = _tls_counter.n
            t0 = time.monotonic()
            try:
                r = s.request(cfg["method"], url, data=data, timeout=cfg["timeout"])
                r.content
                status = r.status_code
            except Exception as e:
                stats.add_connects(_tls_counter.n - before)
                stats.add_error(type(e).__name__)
                continue
            stats.add_connects(_tls_counter.n - before)
            if 200 <= status < 300:
                stats.add_ok((time.monotonic() - t0) * 1000.0)
            else:
                stats.add_error("HTTP_%d" % status)


def run_httpx(cfg, stats, pacer):
    import httpx
    url = cfg["url"].geturl()
    content = REQUEST_BODY if cfg["method"] == "POST" else None
    connects = [0]

    def trace(event, info):     # httpcore trace extension
        if event == "connection.connect_tcp.complete":
            connects[0] += 1

    calls = 0
    with httpx.Client(http2=False, verify=False, trust_env=False,
                      timeout=cfg["timeout"]) as c:
        while calls < cfg["max_calls"] and pacer.wait():
            calls += 1
            before = connects[0]
            t0 = time.monotonic()
            try:
                r = c.request(cfg["method"], url, content=content,
                              extensions={"trace": trace})
                status = r.status_code
            except Exception as e:
                stats.add_connects(connects[0] - before)
                stats.add_error(type(e).__name__)
                continue
            stats.add_connects(connects[0] - before)
            if 200 <= status < 300:
                stats.add_ok((time.monotonic() - t0) * 1000.0)
            else:
                stats.add_error("HTTP_%d" % status)


def run_curl(cfg, stats, pacer, procs, procs_lock):
    n = min(cfg["max_calls"], CURL_MAX_URLS) if cfg["max_calls_given"] \
        else CURL_DEFAULT_URLS
    url = cfg["url"].geturl()
    argv = ["curl", "-s", "-k", "--noproxy", "*", "--http1.1",
            "--max-time", "%g" % cfg["timeout"],
            # one line per transfer, to stderr: unbuffered, so a line is
            # there as soon as its call completes (stdout would sit in
            # curl's stdio buffer until it fills or curl exits)
            "-w", "%{stderr}" + CURL_MARK.decode() + " %{time_total} %{http_code} "
            "%{num_connects} %{exitcode}\\n"]
    if cfg["method"] == "POST":
        argv += ["--data-binary", REQUEST_BODY.decode()]
    if pacer.interval is not None:
        # curl's own pacing: transfers per hour, integer
        argv += ["--rate", "%d/h" % max(1, round(3600.0 / pacer.interval))]
    for _ in range(n):
        argv += ["-o", "/dev/null", url]

    # honour the pacer's phase / the stop flag before starting
    if pacer.stop.is_set():
        return
    if pacer.interval is not None and pacer.next > time.monotonic():
        pacer.stop.wait(max(0.0, min(pacer.next, pacer.deadline) - time.monotonic()))
    if pacer.stop.is_set() or time.monotonic() >= pacer.deadline:
        return
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                close_fds=True)
    except OSError as e:
        stats.add_error(type(e).__name__)
        return
    with procs_lock:
        procs.append(proc)
    fd = proc.stderr.fileno()
    buf = b""
    lines = 0
    try:
        while lines < n:
            if pacer.stop.is_set():
                break
            left = pacer.deadline - time.monotonic()
            if left <= 0:
                break
            r, _, _ = select.select([fd], [], [], min(left, 0.2))
            if not r:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:       # EOF: curl is done
                break
            buf += chunk
            lines += take_curl_lines(buf, stats)
            buf = buf[buf.rfind(b"\n") + 1:]
    finally:
        if lines >= n:              # all URLs done: curl is exiting by itself
            try:
                proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
        if proc.poll() is None:
            # At the duration (or on a signal) curl may be in the middle of a
            # call that the server has already counted: say so in the summary.
            proc.kill()             # our own child, by its pid
            stats.curl_killed = True
        proc.wait()
        # curl is gone: the pipe still holds the lines of calls that completed
        # before the kill; take them (bounded: EOF comes, curl had no child).
        for _ in range(4096):
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
            lines += take_curl_lines(buf, stats)
            buf = buf[buf.rfind(b"\n") + 1:]
        proc.stderr.close()
    # A line still incomplete in buf is a call we do not count.
    if lines >= n and time.monotonic() < pacer.deadline and not pacer.stop.is_set():
        stats.curl_exhausted = True


def take_curl_lines(buf, stats):
    """Parse the complete lines in buf; the caller keeps the incomplete tail."""
    n = 0
    for line in buf.split(b"\n")[:-1]:
        if parse_curl_line(line, stats):
            n += 1
    return n


def parse_curl_line(line, stats):
    """One -w line per completed transfer; False for other stderr text."""
    if not line.startswith(CURL_MARK + b" "):
        return False
    parts = line.decode("ascii", "replace").split()
    try:
        total_s = float(parts[1])
        code = int(parts[2])
        nconn = int(parts[3])
        exitcode = int(parts[4])
    except (IndexError, ValueError):
        stats.add_error("curl_bad_line")
        return True
    stats.add_connects(nconn)
    if exitcode != 0:
        stats.add_error("curl_exit_%d" % exitcode)
    elif 200 <= code < 300:
        stats.add_ok(total_s * 1000.0)
    else:
        stats.add_error("HTTP_%d" % code)
    return True


def percentile(sorted_vals, p):
    if not sorted_vals:
        return None
    k = max(1, math.ceil(p / 100.0 * len(sorted_vals)))     # nearest rank
    return sorted_vals[k - 1]


def cmd_client(args, parser):
    u = urllib.parse.urlsplit(args.url)
    if u.scheme not in ("http", "https"):
        parser.error("--url must be http:// or https://")
    try:
        port = u.port
    except ValueError:
        parser.error("--url has a bad port")
    if not u.hostname or port is None:
        parser.error("--url needs a host and a port, e.g. http://127.0.0.1:8080/")

    if args.lib in ("requests", "httpx") and importlib.util.find_spec(args.lib) is None:
        sys.stderr.write("%s client: error: python module '%s' missing (use "
                         "/usr/bin/python3 with python3-%s)\n" % (PROG, args.lib, args.lib))
        return 2
    elif args.lib == "curl":
        if not any(os.access(os.path.join(d, "curl"), os.X_OK)
                   for d in os.environ.get("PATH", "/usr/bin:/bin").split(":") if d):
            sys.stderr.write("%s client: error: curl not found in PATH\n" % PROG)
            return 2

    cfg = {
        "url": u,
        "method": args.method,
        "timeout": args.timeout,
        "max_calls": args.max_calls if args.max_calls is not None else MAX_CALLS_CAP,
        "max_calls_given": args.max_calls is not None,
    }
    interval = (args.conns / args.rate) if args.rate else None

    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    procs = []
    procs_lock = threading.Lock()
    stats = [Stats() for _ in range(args.conns)]
    runner = {"http.client": run_httpclient, "requests": run_requests,
              "httpx": run_httpx, "curl": run_curl}[args.lib]

    start = time.monotonic()
    deadline = start + args.duration
    hard_deadline = deadline + args.timeout + 3.0

    def body(i):
        phase = (interval * i / args.conns) if interval else 0.0
        pacer = Pacer(interval, phase, stop, deadline)
        try:
            if args.lib == "curl":
                runner(cfg, stats[i], pacer, procs, procs_lock)
            else:
                runner(cfg, stats[i], pacer)
        except Exception as e:      # keep the summary even if a thread dies
            stats[i].add_error("thread_" + type(e).__name__)
        finally:
            stats[i].done = True

    threads = [threading.Thread(target=body, args=(i,), daemon=True,
                                name="conn%d" % i) for i in range(args.conns)]
    for t in threads:
        t.start()
    for t in threads:
        left = hard_deadline - time.monotonic()
        if left > 0:
            t.join(left)
    end = time.monotonic()
    unfinished = sum(1 for t in threads if t.is_alive())
    with procs_lock:
        for p in procs:
            if p.poll() is None:
                p.kill()

    ok = errors = connects = 0
    kinds = {}
    lat = []
    per_conn = []
    exhausted = killed = 0
    for s in stats:
        with s.lock:
            ok += s.ok
            errors += s.errors
            connects += s.connects
            for k, v in s.error_kinds.items():
                kinds[k] = kinds.get(k, 0) + v
            lat.extend(s.lat_ms)
            per_conn.append(s.ok)
            exhausted += 1 if s.curl_exhausted else 0
            killed += 1 if s.curl_killed else 0
    lat.sort()
    elapsed = end - start
    summary = {
        "lib": args.lib,
        "url": args.url,
        "method": args.method,
        "conns": args.conns,
        "ok": ok,
        "errors": errors,
        "error_kinds": kinds,
        "connects": connects,
        "p50_ms": percentile(lat, 50),
        "p99_ms": percentile(lat, 99),
        "max_ms": lat[-1] if lat else None,
        "start": start,
        "end": end,
        "calls_per_s": (ok / elapsed) if elapsed > 0 else None,
        "per_conn_ok": per_conn,
        "unfinished_threads": unfinished,
        "rate": args.rate,
    }
    if args.lib == "curl":
        # threads whose curl ran out of URLs before the duration
        summary["curl_exhausted"] = exhausted
        # curl processes killed at the duration: each may have had one call
        # in flight that the server counted but this summary does not
        summary["curl_killed"] = killed
    try:
        emit_summary(args.out, summary)
    except OSError as e:
        sys.stderr.write("%s client: error: --out: %s\n" % (PROG, e))
        return 1
    sys.stdout.flush()
    # Daemon threads stuck in a call past the hard deadline must not delay exit.
    os._exit(0)


# ------------------------------------------------------------------- main --

def build_parser():
    p = Parser(prog=PROG, description="HTTP keep-alive server and clients that "
               "count calls for the call-unit end-to-end tests.")
    sub = p.add_subparsers(dest="cmd", metavar="{serve,client}")
    sub.required = True

    s = sub.add_parser("serve", help="keep-alive HTTP(S) server on 127.0.0.1 "
                       "that timestamps every request",
                       description="Serve on 127.0.0.1 (port 0) and count calls "
                       "per 1 s window; stop on SIGTERM/SIGINT or after "
                       "--duration and write a JSON summary.")
    s.add_argument("--port-file", metavar="F",
                   help="write the bound port + newline to F (atomically, once listening)")
    s.add_argument("--out", metavar="F",
                   help="JSON summary file (atomic); default stdout")
    s.add_argument("--duration", metavar="S", required=True,
                   type=bounded_float(0, SERVE_MAX_DURATION),
                   help="stop after S seconds (0 < S <= %g)" % SERVE_MAX_DURATION)
    s.add_argument("--tls", choices=("none", "1.2", "1.3"), default="none",
                   help="TLS pinned to exactly this version (default none)")
    s.add_argument("--cert", metavar="C", help="PEM certificate (with --tls)")
    s.add_argument("--key", metavar="K", help="PEM private key (with --tls)")
    s.add_argument("--window-from", metavar="T", type=finite_float,
                   help="max_window/per_second count only requests at or after "
                   "CLOCK_MONOTONIC time T (default: all)")
    s.add_argument("--times", action="store_true",
                   help="include every request timestamp in the summary")

    c = sub.add_parser("client", help="make HTTP calls over N keep-alive "
                       "connections with one client library",
                       description="N threads, each with one keep-alive "
                       "session/connection, call --url back to back for "
                       "--duration seconds and write a JSON summary. curl: one "
                       "curl process per thread, killed at the duration; a call "
                       "it had in flight may be counted by the server but not "
                       "here (curl_killed says how many processes were killed).")
    c.add_argument("--lib", required=True,
                   choices=("http.client", "requests", "httpx", "curl"))
    c.add_argument("--url", required=True, metavar="URL",
                   help="http:// or https:// (certificate not verified)")
    c.add_argument("--conns", metavar="N", type=bounded_int(1, MAX_CONNS), default=1,
                   help="parallel keep-alive connections, 1..%d (default 1)" % MAX_CONNS)
    c.add_argument("--duration", metavar="S", required=True,
                   type=bounded_float(0, CLIENT_MAX_DURATION),
                   help="start no call after S seconds (0 < S <= %g)" % CLIENT_MAX_DURATION)
    c.add_argument("--max-calls", metavar="N", type=bounded_int(1, MAX_CALLS_CAP),
                   help="at most N calls per connection (curl: at most %d)" % CURL_MAX_URLS)
    c.add_argument("--timeout", metavar="T", type=bounded_float(0, MAX_TIMEOUT),
                   default=10.0, help="seconds per call (default 10)")
    c.add_argument("--out", metavar="F",
                   help="JSON summary file (atomic); default stdout")
    c.add_argument("--rate", metavar="R", type=bounded_float(0, 1e6),
                   help="aim for at most R calls/s in total (default flat out)")
    c.add_argument("--method", choices=("GET", "POST"), default="GET",
                   help="HTTP method (POST sends a small body; default GET)")
    s.set_defaults(func=cmd_serve, subparser=s)
    c.set_defaults(func=cmd_client, subparser=c)
    return p


def main():
    parser = build_parser()
    args = parser.parse_args()
    return args.func(args, args.subparser)


if __name__ == "__main__":
    sys.exit(main())
