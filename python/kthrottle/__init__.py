# SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
"""kthrottle's cooperative limits (``unit: request``) from Python.

A thin ctypes layer over libkthrottle (``include/kthrottle_client.h``): the
decision is the library's, made on the limit's bucket that kthrottled
publishes in its pinned ``kt_coop`` map and every process on the node shares.

    from kthrottle import throttle, should_throttle

    @throttle("api")                  # returns None when throttled
    def call(): ...

    @throttle("api", max_delay=0.5)   # waits up to 0.5 s for a token, then None
    def patient_call(): ...

    should_throttle("api")  # True: throttled (nothing charged);
                            # False: a token was taken, go ahead

    with TagQuery(timeout_ms=50) as q:  # a tag limit's query server
        if q.check(client_ip): ...      # True: serve (or unanswered), False: throttle

    with slot("llm", timeout=5):      # an in-flight limit's slot while inside
        ...                           # (given back on exit, and by the kernel
                                      # if the process dies)

    @throttle("llm", concurrency=1)   # runs holding 1 slot; None if none frees
    def ask(prompt): ...              # within max_delay (default 0)

The library is ``$KTHROTTLE_LIB`` if set, else ``libkthrottle.so.0`` from the
dynamic linker's path; it is loaded on first use, so importing never fails.
The pin directory is ``$KTHROTTLE_PIN_DIR`` (default /sys/fs/bpf/kthrottle).
A missing library, daemon or limit raises :class:`Error`: never a silent
"not throttled".
"""

import ctypes
import ctypes.util
import errno as _errno
import functools
import inspect
import math
import numbers
import operator
import os
import select
import socket as _socket
import struct
import threading
import time

__all__ = ["Error", "Limit", "RateLimited", "TagQuery", "connect", "slot", "throttle",
           "should_throttle"]
__version__ = "0.1.0"

LIB_ENV = "KTHROTTLE_LIB"
_UINT64_MAX = 2**64 - 1
_MAX_TOKENS = 2**63 - 1
_NAME_MAX = 31
_CONFIG_KEYS = ("cost", "max_delay")


class Error(Exception):
    """A libkthrottle failure.

    ``errno`` is the positive errno value (ENOENT: no such limit or no
    kthrottled publishing in the pin dir; EACCES/EPERM: the pins are not
    reachable; ELIBACC: libkthrottle could not be loaded), ``text`` the
    library's one-line explanation, ``limit`` the limit's name (or None).
    """

    def __init__(self, err, text, limit=None):
        self.errno = err
        self.text = text
        self.limit = limit
        msg = text if limit is None else "kthrottle limit '%s': %s" % (limit, text)
        super().__init__(msg)


class RateLimited(ConnectionError):
    """A connect() refused by a kthrottle connection limit (not the network).

    An ``OSError`` with the errno the limit fails connects with, so code
    that catches ``OSError`` still sees it; ``limit`` is the refusing
    limit's name, ``retry_after`` the seconds until it admits again
    (``math.inf``: closed), ``reason`` "share", "fallback", "closed", "permit" (a strict limit: no permit due now) or "inflight" (an in-flight limit's slots are all held: ``retry_after`` 0, a slot frees when one of them closes).
    """

    def __init__(self, err, limit, retry_after, reason):
        self.limit = limit
        self.retry_after = retry_after
        self.reason = reason
        super().__init__(err, "throttled by kthrottle limit '%s' (%s), retry after %.3f s"
                         % (limit, reason, retry_after))


class _Refusal(ctypes.Structure):
    _fields_ = [("limit", ctypes.c_char * 32), ("retry_after_ns", ctypes.c_uint64),
                ("reason", ctypes.c_uint32), ("err", ctypes.c_int)]


_REASONS = ("share", "fallback", "closed", "permit", "tag", "shadow", "inflight")


# --- the library -----------------------------------------------------------

_lib = None
_lib_error = None
_lib_lock = threading.Lock()


def _candidates():
    path = os.environ.get(LIB_ENV)
    if path:
        return [(LIB_ENV + "=" + path, path)]
    # the soname first: the ABI this module was written for
    out = [("libkthrottle.so.0", "libkthrottle.so.0")]
    found = ctypes.util.find_library("kthrottle")
    if found and found != "libkthrottle.so.0":
        out.append(("find_library('kthrottle') = " + found, found))
    return out


def _dlopen():
    tried = []
    for what, path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s: %s" % (what, e))
            continue
        c_u64, c_u64p = ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64)
        lib.kthrottle_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
        lib.kthrottle_open.restype = ctypes.c_int
        lib.kthrottle_try_acquire.argtypes = [ctypes.c_void_p, c_u64, c_u64p]
        lib.kthrottle_try_acquire.restype = ctypes.c_int
        lib.kthrottle_acquire.argtypes = [ctypes.c_void_p, c_u64, c_u64]
        lib.kthrottle_acquire.restype = ctypes.c_int
        lib.kthrottle_is_throttled.argtypes = [ctypes.c_void_p, c_u64p]
        lib.kthrottle_is_throttled.restype = ctypes.c_int
        lib.kthrottle_close.argtypes = [ctypes.c_void_p]
        lib.kthrottle_close.restype = None
        lib.kthrottle_connect.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32,
                                          ctypes.POINTER(_Refusal)]
        lib.kthrottle_connect.restype = ctypes.c_int
        lib.kthrottle_last_error.argtypes = []
        lib.kthrottle_last_error.restype = ctypes.c_char_p
        if hasattr(lib, "kthrottle_slot_acquire"):  # a library older than in-flight slots lacks them
            lib.kthrottle_slot_acquire.argtypes = [ctypes.c_char_p, c_u64]
            lib.kthrottle_slot_acquire.restype = ctypes.c_int
            lib.kthrottle_slot_release.argtypes = [ctypes.c_int]
            lib.kthrottle_slot_release.restype = ctypes.c_int
        if hasattr(lib, "kthrottle_tagq_open"):  # a library older than TagQuery lacks them
            lib.kthrottle_tagq_open.argtypes = [ctypes.c_char_p, ctypes.c_uint32,
                                                ctypes.POINTER(ctypes.c_void_p)]
            lib.kthrottle_tagq_open.restype = ctypes.c_int
            lib.kthrottle_tagq_check.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
            lib.kthrottle_tagq_check.restype = ctypes.c_int
            lib.kthrottle_tagq_last_error.argtypes = [ctypes.c_void_p]
            lib.kthrottle_tagq_last_error.restype = ctypes.c_int
            lib.kthrottle_tagq_close.argtypes = [ctypes.c_void_p]
            lib.kthrottle_tagq_close.restype = None
        return lib
    raise Error(_errno.ELIBACC, "cannot load libkthrottle (tried " + "; ".join(tried) +
                "); install it or set " + LIB_ENV)


def _load():
    """The loaded library; the first failure is remembered and raised again."""
    global _lib, _lib_error
    if _lib is not None:
        return _lib
    with _lib_lock:
        if _lib is None and _lib_error is None:
            try:
                _lib = _dlopen()
            except Error as e:
                _lib_error = e
        if _lib is None:
            raise Error(_lib_error.errno, _lib_error.text)
        return _lib


# --- argument checks ---------------------------------------------------------

def _check_name(name):
    if not isinstance(name, str):
        raise TypeError("kthrottle: the limit must be its name (a str), not %s%s" % (
            type(name).__name__,
            ": use @throttle(\"name\")" if callable(name) else ""))
    # the daemon's names: 1..31 bytes, no NUL (a longer one never matches)
    if not name or "\0" in name or len(name.encode()) > _NAME_MAX:
        raise ValueError("kthrottle: bad limit name %r (1..%d bytes, no NUL)" % (name, _NAME_MAX))
    return name


def _check_tokens(what, n):
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError("kthrottle: %s must be an int, not %s" % (what, type(n).__name__))
    if not 1 <= n <= _MAX_TOKENS:
        raise ValueError("kthrottle: %s must be >= 1, not %r" % (what, n))
    return int(n)


def _check_seconds(what, s):
    if isinstance(s, bool) or not isinstance(s, numbers.Real):
        raise TypeError("kthrottle: %s must be a number of seconds, not %s" % (
            what, type(s).__name__))
    s = float(s)
    if not (s >= 0 and math.isfinite(s)):
        raise ValueError("kthrottle: %s must be >= 0 seconds and finite, not %r" % (what, s))
    return min(int(s * 1e9), _UINT64_MAX)


def _parse_config(config, keys=_CONFIG_KEYS):
    """(cost, max_delay in ns) from should_throttle's/throttle's keywords."""
    for key in config:
        if key not in keys:
            raise TypeError("kthrottle: unknown config key %r (supported: %s)" % (
                key, ", ".join(keys)))
    cost = _check_tokens("cost", config.get("cost", 1))
    delay_ns = _check_seconds("max_delay", config.get("max_delay", 0))
    return cost, delay_ns


def _seconds(ns):
    return math.inf if ns == _UINT64_MAX else ns / 1e9


# --- handles -----------------------------------------------------------------

class Limit:
    """An open cooperative limit.

    name: the limit's name in the config, or "LIMIT/CALLER" ("api/prod")
    for a caller of a limit with weightBy/classBy caller (its own bucket,
    weight and class); a caller the config does not name is an unknown
    limit (Error, ENOENT).

    Any number of threads may use one Limit at once; close() must be the
    last call on it. A limit that a daemon reload removed or replaced is
    reopened once by name (the library's -ESTALE); if that fails, Error.
    Usable as a context manager (closes on exit).
    """

    def __init__(self, name):
        self._h = None
        self.name = _check_name(name)
        self._lib = _load()
        self._lock = threading.Lock()
        self._stale = []  # replaced handles: another thread may still be in them
        self._h = self._open()

    def _error(self, r):
        text = self._lib.kthrottle_last_error()  # per thread: ours, just set
        text = text.decode(errors="replace") if text else os.strerror(-r)
        if r == -_errno.EINVAL:  # a request that can never pass (cost over the burst)
            return ValueError("kthrottle limit '%s': %s" % (self.name, text))
        return Error(-r, text, self.name)

    def _open(self):
        h = ctypes.c_void_p()
        r = self._lib.kthrottle_open(self.name.encode(), ctypes.byref(h))
        if r < 0:
            raise self._error(r)
        return h.value

    def _call(self, op):
        h = self._h
        if h is None:
            raise Error(_errno.EBADF, "closed", self.name)
        r = op(h)
        if r == -_errno.ESTALE:
            with self._lock:
                if self._h == h:
                    new = self._open()
                    self._stale.append(h)
                    self._h = new
                h = self._h
            r = op(h)
        if r < 0:
            raise self._error(r)
        return r

    def _try_ns(self, n):
        """try_acquire: (admitted, retry-after ns)."""
        wait = ctypes.c_uint64(0)
        lib = self._lib
        r = self._call(lambda h: lib.kthrottle_try_acquire(h, n, ctypes.byref(wait)))
        return r == 1, wait.value

    def _acquire_ns(self, n, timeout_ns):
        lib = self._lib
        return self._call(lambda h: lib.kthrottle_acquire(h, n, timeout_ns)) == 1

    def try_acquire(self, n=1):
        """Takes n tokens if the limit has them now (no wait, no syscall).

        Returns (True, 0.0) when admitted, else (False, retry_after): the
        seconds until the same request would conform at the current rate
        (math.inf when the limit is closed); nothing is charged then.
        n: an int >= 1 (TypeError for a bool or float, ValueError below 1 or
        over the limit's burst, which would never be admitted).
        """
        ok, ns = self._try_ns(_check_tokens("n", n))
        return (True, 0.0) if ok else (False, _seconds(ns))

    def acquire(self, n=1, timeout=None):
        """Waits up to timeout seconds (None: for as long as it takes) for n
        tokens; True when taken, False on timeout (nothing charged). n as
        for try_acquire; timeout: a real >= 0 (TypeError, ValueError for a
        negative, NaN or infinite one: use None to wait for ever)."""
        n = _check_tokens("n", n)
        if timeout is not None:
            return self._acquire_ns(n, _check_seconds("timeout", timeout))
        while not self._acquire_ns(n, 10**9):  # 1 s at a time: signals get handled
            pass
        return True

    def is_throttled(self):
        """(throttled, seconds): whether a 1-token request would be refused
        now, and for how long (math.inf: closed; 0.0 when not). Charges
        nothing."""
        wait = ctypes.c_uint64(0)
        lib = self._lib
        r = self._call(lambda h: lib.kthrottle_is_throttled(h, ctypes.byref(wait)))
        return (True, _seconds(wait.value)) if r == 1 else (False, 0.0)

    def close(self):
        """Unmaps the limit; calls after this raise Error (EBADF)."""
        lock = getattr(self, "_lock", None)
        if lock is None:
            return
        with lock:
            for h in self._stale + [self._h]:
                if h is not None:
                    self._lib.kthrottle_close(h)
            self._stale = []
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        return "<kthrottle.Limit %r%s>" % (self.name, "" if self._h else " closed")


# Per process (a forked child opens its own; the parent's would work too)
# and per limit name.
_cache = {}
_cache_lock = threading.Lock()


def _after_fork_in_child():
    global _cache_lock, _lib_lock
    # another thread may have held them at fork time
    _cache_lock = threading.Lock()
    _lib_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _limit(name):
    key = (os.getpid(), name)
    lim = _cache.get(key)
    if lim is None:
        with _cache_lock:
            lim = _cache.get(key)
            if lim is None:
                lim = Limit(name)  # Error is not cached: a later call retries
                _cache[key] = lim
    return lim


def _should(name, cost, delay_ns):
    lim = _limit(name)
    if delay_ns:
        return not lim._acquire_ns(cost, delay_ns)
    return not lim._try_ns(cost)[0]


def should_throttle(limit, **config):
    """True when limit `limit` refuses now (nothing charged); False when it
    admitted: `cost` tokens (default 1) were taken, go ahead.

    config: max_delay=seconds (default 0) waits up to that long for the
    tokens first; cost=int >= 1. Unknown keys raise TypeError, bad values
    TypeError (a bool, a float cost, a str) or ValueError (cost < 1, a
    negative, NaN or infinite max_delay, a name empty, over 31 bytes or
    holding NUL); a cost over the limit's burst, which could never pass,
    ValueError; no daemon or no such limit raises Error.
    """
    cost, delay_ns = _parse_config(config)
    return _should(_check_name(limit), cost, delay_ns)


# --- in-flight slots ---------------------------------------------------------

class slot:
    """A slot of in-flight limit `limit` (``unit: concurrent``, its match
    covering UDP, this process's cgroup a member) held while inside::

        with kthrottle.slot("llm", timeout=5):
            ...

    The slot is a connected UDP socket the kernel counts (nothing is sent on
    it), so it is given back on exit from the block, on close(), and by the
    kernel if the process dies, kill -9 included. Entering waits up to
    `timeout` seconds (default 0: only a slot free now) and raises
    :class:`RateLimited` (``reason`` "inflight", ``retry_after`` 0) when none
    freed; a process outside the limit, or a limit that is not in flight,
    raises :class:`Error`.
    """

    def __init__(self, limit, timeout=0):
        self.limit = _check_name(limit)
        self._timeout_ns = _check_seconds("timeout", timeout)
        self._fd = -1

    def acquire(self):
        lib = _load()
        if not hasattr(lib, "kthrottle_slot_acquire"):
            raise Error(_errno.ENOSYS, "this libkthrottle has no in-flight slots", self.limit)
        if self._fd >= 0:
            raise Error(_errno.EALREADY, "this slot is held already", self.limit)
        r = lib.kthrottle_slot_acquire(self.limit.encode(), self._timeout_ns)
        if r in (-_errno.ETIMEDOUT, -_errno.EBUSY):
            raise RateLimited(_errno.EBUSY, self.limit, 0.0, "inflight")
        if r < 0:
            raise Error(-r, (lib.kthrottle_last_error() or b"").decode(errors="replace"),
                        self.limit)
        self._fd = r

    def release(self):
        fd, self._fd = self._fd, -1
        if fd >= 0:
            _load().kthrottle_slot_release(fd)

    close = release

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()

    def __del__(self):
        try:
            self.release()
        except Exception:
            pass

    def __repr__(self):
        return "kthrottle.slot(%r, held=%s)" % (self.limit, self._fd >= 0)


def _run_holding(name, n, delay_ns, fn, args, kwargs):
    """fn(*args, **kwargs) while holding n slots of name; None, and nothing
    held, when they cannot all be had within delay_ns."""
    held = []
    deadline = time.monotonic_ns() + delay_ns
    try:
        for _ in range(n):
            s = slot(name)
            s._timeout_ns = max(0, deadline - time.monotonic_ns())
            try:
                s.acquire()
            except RateLimited:
                return None
            held.append(s)
        return fn(*args, **kwargs)
    finally:
        for s in held:
            s.release()


def throttle(limit, **config):
    """Decorator: the function runs when should_throttle(limit, **config)
    says go ahead, else the call returns None without running it.

    With concurrency=N (an in-flight limit, ``unit: concurrent``) the
    function runs holding N of its slots instead, waiting up to max_delay
    (default 0) for them; None, and nothing held, when they do not all
    free in time.

    limit may be "LIMIT/CALLER" ("api/prod"), a caller of a limit with
    weightBy/classBy caller, as for Limit.

    The config is checked here, the limit opened on the first call (so
    decorating needs no daemon). Coroutine functions are refused: waiting
    for max_delay would block the event loop.
    """
    name = _check_name(limit)
    if "concurrency" in config:
        if "cost" in config:
            raise TypeError("kthrottle: concurrency and cost do not go together "
                            "(an in-flight limit counts slots held, not tokens)")
        n = _check_tokens("concurrency", config["concurrency"])
        _, delay_ns = _parse_config({k: v for k, v in config.items() if k != "concurrency"})
    else:
        n = 0
        cost, delay_ns = _parse_config(config, _CONFIG_KEYS + ("concurrency",))

    def decorate(fn):
        if not callable(fn):
            raise TypeError("kthrottle: throttle(...) decorates a function, not %s"
                            % type(fn).__name__)
        if inspect.iscoroutinefunction(fn):
            raise TypeError("kthrottle: throttle() does not wrap coroutine functions; "
                            "use should_throttle()")

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if n:
                return _run_holding(name, n, delay_ns, fn, args, kwargs)
            if _should(name, cost, delay_ns):
                return None
            return fn(*args, **kwargs)
        return wrapper
    return decorate


# --- connections -------------------------------------------------------------

def _check_address(family, address):
    """(host, port, flowinfo, scope_id) checked as socket.connect checks them:
    the same exception types, and no port wrapped modulo 65536."""
    if not isinstance(address, tuple):
        raise TypeError("%s address must be tuple, not %s" % (
            "AF_INET" if family == _socket.AF_INET else "AF_INET6", type(address).__name__))
    if family == _socket.AF_INET and len(address) != 2:
        raise TypeError("AF_INET address must be a pair (host, port)")
    if family == _socket.AF_INET6 and not 2 <= len(address) <= 4:
        raise TypeError("AF_INET6 address must be a tuple (host, port[, flowinfo[, scopeid]])")
    host, port = address[0], address[1]
    if not isinstance(host, (str, bytes, bytearray)):
        raise TypeError("str, bytes or bytearray expected, not %s" % type(host).__name__)
    if isinstance(host, str):
        host.encode("idna")  # UnicodeError for what socket cannot encode either
    host = host if isinstance(host, str) else bytes(host).decode("ascii")
    if "\0" in host:
        raise TypeError("host name must not contain null character")
    port = operator.index(port)  # TypeError for a float or a str, as socket
    if not 0 <= port <= 0xffff:
        raise OverflowError("connect(): port must be 0-65535.")
    flow = operator.index(address[2]) if len(address) > 2 else 0
    if not 0 <= flow <= 0xfffff:
        raise OverflowError("connect(): flowinfo must be 0-1048575.")
    # socket wraps a scope_id modulo 2**32; refused here rather than wrapped
    scope = operator.index(address[3]) if len(address) > 3 else 0
    if not 0 <= scope <= 0xffffffff:
        raise OverflowError("connect(): scope_id must be 0-4294967295.")
    return host, port, flow, scope


def _sockaddr(sock, address):
    """struct sockaddr_in/in6 bytes for a (host, port[, flow, scope]) tuple."""
    if sock.family not in (_socket.AF_INET, _socket.AF_INET6):
        raise ValueError("kthrottle.connect: an AF_INET or AF_INET6 socket is needed")
    host, port, flow, scope = _check_address(sock.family, address)
    # the host alone: a port given to getaddrinfo would be wrapped, not refused
    if host == "<broadcast>" and sock.family == _socket.AF_INET:
        host = "255.255.255.255"  # socket's spelling of INADDR_BROADCAST
    # "" is the wildcard address, as for socket
    infos = _socket.getaddrinfo(host or None, None, sock.family, sock.type, 0,
                                0 if host else _socket.AI_PASSIVE)
    sa = infos[0][4]
    if sock.family == _socket.AF_INET:
        return struct.pack("=H", _socket.AF_INET) + struct.pack("!H", port) + \
            _socket.inet_pton(_socket.AF_INET, sa[0]) + bytes(8)
    if len(address) <= 3:
        scope = sa[3]  # from a "%eth0" suffix, as socket does
    return struct.pack("=H", _socket.AF_INET6) + struct.pack("!HI", port, flow) + \
        _socket.inet_pton(_socket.AF_INET6, sa[0].split("%")[0]) + struct.pack("=I", scope)


def connect(sock, address):
    """``sock.connect(address)`` that tells kthrottle's refusal apart.

    Raises :class:`RateLimited` when a kthrottle connection limit refused
    the connection (the library finds the limit through the pinned maps,
    read-only), and the usual ``OSError`` for anything else. A socket with
    a timeout waits for the connection as ``socket.connect`` does. Without
    a daemon or readable pins it is a plain connect. A bad address raises
    what ``socket.connect`` raises: TypeError (not a tuple, a wrong length,
    a non-int port, a host not str/bytes), OverflowError (a port out of
    0..65535, a flowinfo out of 0..1048575; also a scope_id out of 32 bits,
    which socket would wrap), socket.gaierror (a host that does not resolve).
    """
    sa = _sockaddr(sock, address)  # socket's own errors first, library or not
    lib = _load()
    why = _Refusal()
    r = lib.kthrottle_connect(sock.fileno(), sa, len(sa), ctypes.byref(why))
    if r == 1:  # KTHROTTLE_THROTTLED
        retry = math.inf if why.retry_after_ns == _UINT64_MAX else why.retry_after_ns / 1e9
        reason = _REASONS[why.reason] if why.reason < len(_REASONS) else str(why.reason)
        raise RateLimited(why.err, why.limit.decode(errors="replace"), retry, reason)
    if r == 0:
        return
    err = -r
    timeout = sock.gettimeout()
    if err == _errno.EINPROGRESS and timeout != 0.0:
        # the socket has a timeout (Python made the fd non-blocking): wait
        # for the handshake like socket.connect
        _, w, _ = select.select([], [sock], [], timeout)
        if not w:
            raise TimeoutError(_errno.ETIMEDOUT, "timed out")
        err = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_ERROR)
        if not err:
            return
    raise OSError(err, os.strerror(err))


# --- tag queries ---------------------------------------------------------------

class TagQuery:
    """A client of a tag limit's query server (the line protocol),
    over libkthrottle's kthrottle_tagq.

    ``where``: a Unix socket path, "A.B.C.D:PORT", "[V6]:PORT", or None for
    /run/kthrottle/query.sock; ``timeout_ms``: each query's deadline,
    1..10000. Opening does not connect: an absent server is no error here.

    ``check(tag)`` is True (serve) or False (throttle). Fail-safe: a query
    the server does not answer in time (no server, refused, slow, a bad
    reply) is True, and for a back-off (100 ms doubling to 5 s) the next
    checks are True without asking; a tag that cannot be sent (empty, over
    255 bytes, holding a newline or NUL) is True too. ``last_error`` says
    why the last check was not answered (a positive errno: ETIMEDOUT,
    ECONNREFUSED, ENOENT, EPROTO, EINVAL, EAGAIN while backing off), 0 when
    it was. One connection: threads sharing a TagQuery take turns (a
    lock); a forked child should open its own. A context manager.
    """

    def __init__(self, where=None, timeout_ms=100):
        self._h = None
        self._lock = threading.Lock()
        self._err = 0
        if where is not None and not isinstance(where, str):
            raise TypeError("kthrottle: where must be a str or None, not %s" % type(where).__name__)
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, numbers.Integral):
            raise TypeError("kthrottle: timeout_ms must be an int, not %s" % type(timeout_ms).__name__)
        if not 1 <= timeout_ms <= 10000:
            raise ValueError("kthrottle: timeout_ms must be 1..10000, not %r" % (timeout_ms,))
        self.where = where
        self._lib = _load()
        if not hasattr(self._lib, "kthrottle_tagq_open"):
            raise Error(_errno.ELIBACC, "this libkthrottle has no kthrottle_tagq_* (too old)")
        h = ctypes.c_void_p()
        r = self._lib.kthrottle_tagq_open(None if where is None else where.encode(),
                                          int(timeout_ms), ctypes.byref(h))
        if r < 0:
            text = self._lib.kthrottle_last_error()
            text = text.decode(errors="replace") if text else os.strerror(-r)
            if r == -_errno.EINVAL:
                raise ValueError("kthrottle: " + text)
            raise Error(-r, text)
        self._h = h.value

    @classmethod
    def open(cls, where=None, timeout_ms=100):
        """The same as TagQuery(where, timeout_ms)."""
        return cls(where, timeout_ms)

    def check(self, tag):
        """True: serve (answered OK, or unanswered: fail-safe); False: throttle."""
        if isinstance(tag, str):
            tag = tag.encode()
        elif not isinstance(tag, (bytes, bytearray, memoryview)):
            raise TypeError("kthrottle: a tag is a str or bytes, not %s" % type(tag).__name__)
        tag = bytes(tag)
        with self._lock:
            if self._h is None:
                raise Error(_errno.EBADF, "closed")
            r = self._lib.kthrottle_tagq_check(self._h, tag, len(tag))
            self._err = self._lib.kthrottle_tagq_last_error(self._h)
        return r != 0

    @property
    def last_error(self):
        """Why the last check was not answered (positive errno), 0 if it was."""
        return self._err

    def close(self):
        """Closes the connection; check() raises Error (EBADF) after this."""
        lock = getattr(self, "_lock", None)
        if lock is None:
            return
        with lock:
            if self._h is not None:
                self._lib.kthrottle_tagq_close(self._h)
                self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        return "<kthrottle.TagQuery %s%s>" % (self.where or "/run/kthrottle/query.sock",
                                               "" if self._h else " closed")
