#!/usr/bin/python3
# SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
# kt-grpccall: a gRPC server that counts the calls it handled and a client that
# makes N unary calls over one channel (one HTTP/2 connection), so that
# scripts/call-accuracy.sh can compare unit `call` with real gRPC traffic.
# Run with Debian's /usr/bin/python3 (python3-grpcio); no protoc: bytes in/out.

import argparse
import json
import os
import signal
import sys
import threading
import time
from concurrent import futures
from ktcall_common import Parser, bounded_float, bounded_int, write_atomic

PROG = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "kt-grpccall.py"

SERVICE = "kt.Call"
UNARY = "/%s/Do" % SERVICE
STREAM = "/%s/Stream" % SERVICE
SERVE_MAX_DURATION = 600.0
MAX_CALLS = 1_000_000
MAX_CONCURRENCY = 64
CALL_TIMEOUT = 10.0             # seconds per call
CLIENT_START_LIMIT = 45.0       # no call starts later; with CALL_TIMEOUT < 60 s
STREAM_REPLIES = 3              # answers per server-streaming call
REPLY = b"ok\n"


# ---------------------------------------------------------------- options --

def loopback_target(s):
    host, sep, port = s.rpartition(":")
    if not sep or host != "127.0.0.1":
        raise argparse.ArgumentTypeError("want 127.0.0.1:PORT, not %r" % s)
    try:
        p = int(port, 10)
    except ValueError:
        raise argparse.ArgumentTypeError("bad port in %r" % s)
    if not 1 <= p <= 65535:
        raise argparse.ArgumentTypeError("bad port in %r" % s)
    return "127.0.0.1:%d" % p


def read_file(parser, path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        parser.error("cannot read %s: %s" % (path, e.strerror))


def import_grpc():
    try:
        import grpc
    except ImportError:
        sys.stderr.write("%s: error: no grpc module in %s "
                         "(apt-get install python3-grpcio)\n" % (PROG, sys.executable))
        sys.exit(1)
    return grpc


def identity(b):
    return b


# ----------------------------------------------------------------- server --

class Counter:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = 0
        self.peers = set()      # "ipv4:127.0.0.1:PORT": one per connection

    def add(self, context):
        peer = context.peer()
        with self.lock:
            self.requests += 1
            self.peers.add(peer)


def cmd_serve(args, parser):
    if args.tls:
        if not args.cert or not args.key:
            parser.error("--tls needs --cert and --key")
        cert = read_file(parser, args.cert)
        key = read_file(parser, args.key)
    elif args.cert or args.key:
        parser.error("--cert/--key need --tls")
    grpc = import_grpc()

    counter = Counter()

    def do(request, context):
        counter.add(context)
        return REPLY

    def stream(request, context):
        counter.add(context)
        for _ in range(STREAM_REPLIES):
            yield REPLY

    handler = grpc.method_handlers_generic_handler(SERVICE, {
        "Do": grpc.unary_unary_rpc_method_handler(
            do, request_deserializer=identity, response_serializer=identity),
        "Stream": grpc.unary_stream_rpc_method_handler(
            stream, request_deserializer=identity, response_serializer=identity),
    })

    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=MAX_CONCURRENCY + 4),
                         handlers=(handler,),
                         options=(("grpc.so_reuseport", 0),))
    try:
        if args.tls:
            creds = grpc.ssl_server_credentials(((key, cert),))
            port = server.add_secure_port("127.0.0.1:0", creds)
        else:
            port = server.add_insecure_port("127.0.0.1:0")
    except RuntimeError as e:
        sys.stderr.write("%s serve: error: bind: %s\n" % (PROG, e))
        return 1
    if not port:
        sys.stderr.write("%s serve: error: could not bind 127.0.0.1:0\n" % PROG)
        return 1
    server.start()
    try:
        write_atomic(args.port_file, "%d\n" % port)
    except OSError as e:
        sys.stderr.write("%s serve: error: --port-file: %s\n" % (PROG, e))
        server.stop(None)
        return 1

    deadline = time.monotonic() + args.duration
    while not stop.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            break
        stop.wait(min(left, 0.5))
    reason = "signal" if stop.is_set() else "duration"
    server.stop(1.0).wait(5.0)

    with counter.lock:
        summary = {"requests": counter.requests, "connections": len(counter.peers),
                   "port": port, "tls": bool(args.tls), "stop_reason": reason}
    try:
        write_atomic(args.out, json.dumps(summary, sort_keys=True) + "\n")
    except OSError as e:
        sys.stderr.write("%s serve: error: --out: %s\n" % (PROG, e))
        return 1
    return 0


# ----------------------------------------------------------------- client --

def cmd_client(args, parser):
    ca = None
    if args.tls:
        if not args.ca:
            parser.error("--tls needs --ca")
        ca = read_file(parser, args.ca)
    elif args.ca:
        parser.error("--ca needs --tls")
    grpc = import_grpc()

    if args.tls:
        # the certificate must name IP:127.0.0.1 in subjectAltName
        channel = grpc.secure_channel(
            args.url, grpc.ssl_channel_credentials(root_certificates=ca))
    else:
        channel = grpc.insecure_channel(args.url)
    if args.rpc == "stream":
        method = channel.unary_stream(STREAM, request_serializer=identity,
                                      response_deserializer=identity)
    else:
        method = channel.unary_unary(UNARY, request_serializer=identity,
                                     response_deserializer=identity)

    lock = threading.Lock()
    state = {"next": 0, "ok": 0, "errors": 0, "not_started": 0}
    codes = {}
    start_by = time.monotonic() + CLIENT_START_LIMIT
    stop = threading.Event()

    def take():
        with lock:
            if state["next"] >= args.calls:
                return False
            if stop.is_set() or time.monotonic() >= start_by:
                state["not_started"] += 1
                state["next"] += 1
                return False
            state["next"] += 1
            return True

    def worker():
        while take():
            try:
                if args.rpc == "stream":
                    n = sum(1 for _ in method(b"kt", timeout=CALL_TIMEOUT))
                    if n != STREAM_REPLIES:
                        raise ValueError("%d answers" % n)
                else:
                    method(b"kt", timeout=CALL_TIMEOUT)
                with lock:
                    state["ok"] += 1
            except grpc.RpcError as e:
                name = e.code().name if hasattr(e, "code") else "RPC"
                with lock:
                    state["errors"] += 1
                    codes[name] = codes.get(name, 0) + 1
            except Exception as e:      # noqa: BLE001 - reported, not fatal
                with lock:
                    state["errors"] += 1
                    codes[type(e).__name__] = codes.get(type(e).__name__, 0) + 1

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, daemon=True)
               for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.2)
    elapsed = time.monotonic() - t0
    channel.close()

    summary = {"ok": state["ok"], "errors": state["errors"] + state["not_started"],
               "not_started": state["not_started"], "error_codes": codes,
               "calls": args.calls, "concurrency": args.concurrency,
               "rpc": args.rpc, "tls": bool(args.tls), "seconds": round(elapsed, 3)}
    text = json.dumps(summary, sort_keys=True) + "\n"
    try:
        if args.out:
            write_atomic(args.out, text)
        else:
            sys.stdout.write(text)
    except OSError as e:
        sys.stderr.write("%s client: error: --out: %s\n" % (PROG, e))
        return 1
    return 0 if summary["errors"] == 0 else 1


# ------------------------------------------------------------------- main --

def build_parser():
    p = Parser(prog=PROG, description="gRPC server and client (127.0.0.1 only, "
               "bytes in and out, no protoc) for scripts/call-accuracy.sh.")
    sub = p.add_subparsers(dest="cmd", metavar="{serve,client}")
    sub.required = True

    s = sub.add_parser("serve", help="serve %s and %s, count the calls" % (UNARY, STREAM),
                       description="Serve on 127.0.0.1 (port 0) until SIGTERM/SIGINT "
                       "or --duration, then write {\"requests\": N, \"connections\": "
                       "C} to --out (atomically; connections = distinct peers).")
    s.add_argument("--port-file", metavar="F", required=True,
                   help="write the bound port + newline to F (atomically, once serving)")
    s.add_argument("--out", metavar="F", required=True, help="JSON summary file")
    s.add_argument("--duration", metavar="S", required=True,
                   type=bounded_float(0, SERVE_MAX_DURATION),
                   help="stop after S seconds (0 < S <= %g)" % SERVE_MAX_DURATION)
    s.add_argument("--tls", action="store_true", help="serve TLS (needs --cert, --key)")
    s.add_argument("--cert", metavar="C", help="PEM certificate (with --tls)")
    s.add_argument("--key", metavar="K", help="PEM private key (with --tls)")

    c = sub.add_parser("client", help="N calls over one channel",
                       description="Make --calls calls over one channel (one "
                       "HTTP/2 connection), --concurrency of them in flight at "
                       "once (1: each waits for its answer). Timeout %g s per "
                       "call; no call starts after %g s. Writes {\"ok\": N, "
                       "\"errors\": E, ...}; exit 1 if E > 0."
                       % (CALL_TIMEOUT, CLIENT_START_LIMIT))
    c.add_argument("--url", metavar="127.0.0.1:PORT", required=True, type=loopback_target)
    c.add_argument("--tls", action="store_true", help="TLS (needs --ca)")
    c.add_argument("--ca", metavar="C", help="PEM CA/certificate to trust (with --tls); the server's "
                   "certificate must have subjectAltName IP:127.0.0.1")
    c.add_argument("--calls", metavar="N", required=True, type=bounded_int(1, MAX_CALLS),
                   help="calls to make, 1..%d" % MAX_CALLS)
    c.add_argument("--concurrency", metavar="K", type=bounded_int(1, MAX_CONCURRENCY),
                   default=1, help="calls in flight at once, 1..%d (default 1)"
                   % MAX_CONCURRENCY)
    c.add_argument("--rpc", choices=("unary", "stream"), default="unary",
                   help="unary %s (default) or server-streaming %s (%d answers)"
                   % (UNARY, STREAM, STREAM_REPLIES))
    c.add_argument("--out", metavar="F", help="JSON summary file (atomic); default stdout")

    s.set_defaults(func=cmd_serve, subparser=s)
    c.set_defaults(func=cmd_client, subparser=c)
    return p


def main():
    parser = build_parser()
    args = parser.parse_args()
    return args.func(args, args.subparser)


if __name__ == "__main__":
    sys.exit(main())
