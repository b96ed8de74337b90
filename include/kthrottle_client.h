/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * libkthrottle: kthrottle limits as applications see them.
 *
 * Two kinds of handle:
 *
 *  - A cooperative limit (unit `request`: no kernel hook enforces it) is
 *    opened by name with kthrottle_open(). The application asks before each
 *    request: kthrottle_try_acquire() runs the kernel's own GCRA decision
 *    (kt_gcra_decide of include/kthrottle.h, the code the BPF programs run)
 *    on the limit's entry of the pinned map kt_coop, which the library
 *    maps shared (BPF_F_MMAPABLE). The fast path makes no syscall: the clock
 *    is CLOCK_BOOTTIME, extrapolated from the TSC where the kernel's
 *    clocksource is tsc (else through the vDSO; KTHROTTLE_CLOCK=vdso
 *    forces that), the charge a compare-and-swap on
 *    the mapped bucket, the counters the daemon reads atomic adds. Every
 *    process and thread that opens the same limit on this node shares one
 *    bucket; the daemon sets its rate (the node's share of the pool).
 *
 *  - A kernel-enforced bucket (connections, datagrams, packets, bytes) is
 *    opened read-only with kthrottle_open_member(): the library opens the
 *    pinned kt_buckets with BPF_F_RDONLY only, so nothing reached through
 *    the library can raise the application's own budget: the kernel refuses
 *    writes through that descriptor (map update EPERM, mmap PROT_WRITE
 *    EACCES). Kernels up to at least 6.18 do not memory-map a read-only map
 *    descriptor at all (mmap EINVAL), so each kthrottle_is_throttled() on
 *    such a handle is one bpf(BPF_MAP_LOOKUP_ELEM) syscall; the library
 *    maps it PROT_READ instead where the kernel allows that. Such a handle
 *    answers kthrottle_is_throttled() only. The protection depends on the
 *    application not being able to open kt_buckets for writing itself:
 *    BPF_OBJ_GET needs no capability on 6.18, the pin file's mode decides
 *    (kt_buckets readable, never writable, by the application's uid).
 *
 * And kthrottle_connect(), connect(2) that tells a refusal by a kernel
 * connection limit (KTHROTTLE_THROTTLED, with the limit and a retry-after)
 * from a network error; no handle, read-only maps only.
 *
 * The pinned maps are found in $KTHROTTLE_PIN_DIR, by default
 * /sys/fs/bpf/kthrottle (the daemon's pinDir). Opening needs the right to
 * reach the pin files (bpffs permissions) and to bpf(BPF_OBJ_GET) them.
 *
 * Errors are negative errno values. After a failed kthrottle_open*() (and
 * any other failure), kthrottle_last_error() gives a one-line text naming
 * what failed (per thread).
 *
 * Threads: a handle may be used by any number of threads at once, except
 * kthrottle_close(), which must be the last call on it. After fork() the
 * child may keep using its parent's handles (the mapping is shared).
 *
 * Limits are re-published by the daemon when a config reload removes or
 * replaces them; a handle then answers -ESTALE and should be reopened.
 */
#ifndef KTHROTTLE_CLIENT_H
#define KTHROTTLE_CLIENT_H

#include <stdint.h>
#include <sys/socket.h>

#ifdef __cplusplus
extern "C" {
#endif

struct kthrottle; /* opaque */

#define KTHROTTLE_PIN_DIR_ENV "KTHROTTLE_PIN_DIR"
#define KTHROTTLE_PIN_DIR_DEFAULT "/sys/fs/bpf/kthrottle"

/* Opens the cooperative limit `limit` (its name in the config). For a limit
 * with weightBy: caller or classBy: caller the name may be "LIMIT/CALLER"
 * ("api/prod"): caller CALLER's own bucket, with its weight and class; the
 * plain "LIMIT" is the callers' default. 0 and *out, or -ENOENT (no pinned
 * kt_coop in the pin dir, or no limit or caller of that name),
 * -ENAMETOOLONG, -EACCES/-EPERM (not allowed to open the map), ... */
int kthrottle_open(const char *limit, struct kthrottle **out);

/* Opens bucket `slot` of the kernel-enforced buckets (kt_buckets), read-only.
 * Such a handle answers kthrottle_is_throttled(); the acquire calls answer
 * -EPERM. -ERANGE for a slot past the map. */
int kthrottle_open_member(uint32_t slot, struct kthrottle **out);

/* Asks for n (>= 1) tokens now. 1: admitted (charged). 0: refused, nothing
 * charged, and *retry_after_ns (if not NULL) says when the same request would
 * conform at the current rate: UINT64_MAX when the limit is closed (rate 0),
 * 0 after losing a compare-and-swap race too often (retry at once). A strict
 * limit (rateLimit.strict) admits one request per permit: the time until
 * the armed permit, or 5 ms (ask again) while none is armed yet, since the
 * refusal itself is what makes the daemon ask for one. Negative errno:
 * -EINVAL (n == 0; n over the limit's burst, never admitted; n > 1 on a
 * strict limit), -ESTALE (limit removed or
 * replaced), -EPERM (read-only handle). No syscall. */
int kthrottle_try_acquire(struct kthrottle *h, uint64_t n, uint64_t *retry_after_ns);

/* Like try_acquire, but waits until admitted or timeout_ns has passed:
 * sleeps the retry-after plus a random jitter (so waiters refused together
 * do not wake together), never past the timeout, and re-checks at least
 * every 100 ms (a rate the daemon raises is seen). 1: admitted, 0: timed
 * out (nothing charged), negative errno as try_acquire. timeout_ns 0 is one
 * try_acquire. */
int kthrottle_acquire(struct kthrottle *h, uint64_t n, uint64_t timeout_ns);

/* Whether the limit refuses a 1-token request right now (no tokens left),
 * without charging anything. 1: throttled, *for_ns (if not NULL) the time
 * until it would admit again (UINT64_MAX: closed); 0: not throttled
 * (*for_ns = 0); negative errno. For a kernel bucket this is what its BPF
 * program would answer this member's next connection, datagram or packet. */
int kthrottle_is_throttled(struct kthrottle *h, uint64_t *for_ns);

/* Unmaps and closes; NULL is allowed. */
void kthrottle_close(struct kthrottle *h);

/* Why kthrottle refused a connect(): see kthrottle_connect. */
struct kthrottle_refusal {
	char limit[32];          /* the refusing limit's name (NUL-terminated) */
	uint64_t retry_after_ns; /* until its bucket would admit the next one; UINT64_MAX:
				  * closed; 0 if it already would when looked at */
	uint32_t reason;         /* 0 share used up, 1 fallback rate used up (lease
				  * lapsed), 2 closed (rate 0; a strict limit's store
				  * unreachable), 3 permit (a strict limit: no permit
				  * due now), 6 inflight (an in-flight limit's slots are
				  * all held: retry_after_ns is 0, a slot frees when one
				  * of those connections closes): enum kt_reason */
	int err;                 /* the errno connect() failed with (the limit's errno:) */
};

/* kthrottle_connect's answer for a connect refused by a kthrottle limit
 * (positive, so it cannot be mistaken for 0 or a negative errno). */
#define KTHROTTLE_THROTTLED 1

/* connect(2) that tells a kthrottle refusal (a rate limit: retry after
 * why->retry_after_ns) from a network error. 0: connected. KTHROTTLE_THROTTLED:
 * a connection limit of this process's cgroup refused it, *why (if not NULL)
 * says which and for how long; errno is set to why->err. Negative errno:
 * connect failed for another reason, or is under way (-EINPROGRESS on a
 * non-blocking socket), exactly as connect would (errno set too).
 *
 * How: the cgroup's kt_members list (its own, else its nearest member
 * ancestor's, as the BPF program finds it) gives the connection limits that
 * cover the destination (kt_limits, kt_dests); their per-CPU throttled
 * counters (kt_counters) are read before and after the connect. A refusal
 * is a failed connect whose errno is the covering limit's errno: and whose
 * bucket's throttled count rose meanwhile. Every map is opened read-only
 * (BPF_F_RDONLY), once per process (reopened if the pins are replaced).
 * Cost over connect(): reading /proc/self/cgroup, a handle lookup and a
 * kt_members lookup per cgroup level up to the member, one kt_limits and
 * kt_dests lookup per limit of the member, and, only if a limit covers the
 * destination, two per-CPU counter reads (and one bucket read on failure).
 *
 * Anything that keeps the library from deciding makes it plain connect:
 * no pinned maps (no daemon), pins this process may not read (the daemon
 * pins them mode 0600: root only, unless the operator grants read access),
 * a socket that is not TCP or UDP over IPv4/IPv6, no cgroup v2. A succeeded
 * connect is never reported as failed. Known limit: another thread or
 * process of the same cgroup refused by the same bucket at the same moment
 * while this connect failed on its own with that same errno is reported as
 * a refusal (the counters are per bucket, not per call). */
int kthrottle_connect(int fd, const struct sockaddr *addr, socklen_t len,
		      struct kthrottle_refusal *why);

/* In-flight slots for requests (an in-flight limit, unit concurrent, whose
 * match covers UDP; this process's cgroup one of its members): the slot is
 * a connected UDP socket the kernel counts while it is open, so it is
 * given back when its descriptor closes in any way, kthrottle_slot_release,
 * exit or kill -9 included. Nothing is ever sent on it; it shares the
 * limit's slots with the connections the limit counts.
 *
 * kthrottle_slot_acquire: the slot's descriptor (>= 0), waiting up to
 * timeout_ns for one to free (looked at again after 1 ms, then doubling up
 * to 8 ms: nothing announces a close); -ETIMEDOUT when none freed in time,
 * -EBUSY when timeout_ns is 0 and none is free, -EPERM when this process's
 * cgroup is not a member of the limit, -EINVAL when it is no in-flight
 * limit covering UDP, or another -errno (kthrottle_last_error() says).
 * kthrottle_slot_release: closes it; 0 or -errno. */
int kthrottle_slot_acquire(const char *limit, uint64_t timeout_ns);
int kthrottle_slot_release(int slot);

/*
 * Tag queries: ask a tag limit's query server (kthrottled's
 * `tags: ... query:`) whether to serve a request with throttling tag `tag`
 * (a client address, an API key: any string). The protocol is one line out
 * (the tag and '\n') and exactly "OK\n" (serve) or "NO\n" (throttle) back,
 * on a persistent connection.
 *
 * Fail-safe: a query the server does not answer within
 * timeout_ms (no socket, refused, a slow or hung server, a reply that is
 * not exactly "OK\n" or "NO\n", a tag that cannot be sent) answers 1
 * (serve), never an error: the application goes on serving when the
 * throttler is down. Such a failure drops the connection and backs off:
 * for the next 100 ms (doubled per consecutive failure, up to 5 s; each
 * jittered down by up to a quarter) kthrottle_tagq_check answers 1 at once
 * without trying (last error EAGAIN); the first call after that reconnects.
 * One answered query ends the back-off. kthrottle_tagq_last_error() says
 * why the last call was not answered, kthrottle_last_error() (this thread)
 * names the failure in a line.
 *
 * Threads: a handle is one connection with no lock; use one handle per
 * thread (or serialize the calls). Not to be shared across fork() either:
 * the child would read its parent's replies.
 */
struct kthrottle_tagq; /* opaque */

#define KTHROTTLE_TAGQ_DEFAULT_SOCKET "/run/kthrottle/query.sock"
#define KTHROTTLE_TAGQ_MAX_TIMEOUT_MS 10000

/* where: a Unix socket path (starts with '/'), "A.B.C.D:PORT" (IPv4
 * literal), "[V6]:PORT" (IPv6 literal; no host names: no DNS on this
 * path), or NULL for KTHROTTLE_TAGQ_DEFAULT_SOCKET. timeout_ms: the
 * deadline of each query, connecting included, 1..10000 (keep it
 * short; a local server answers in microseconds). Does not connect (the
 * first check does), so an absent server is no error here: 0 and *out, or
 * -EINVAL (bad address or timeout), -ENOMEM. */
int kthrottle_tagq_open(const char *where, uint32_t timeout_ms, struct kthrottle_tagq **out);

/* Should the request tagged `tag` (len bytes, no NUL needed) be served?
 * 1: serve ("OK", or unanswered: see above), 0: throttle ("NO"). Never
 * negative. A tag that is empty, longer than 255 bytes (KT_TAG_MAX_LEN) or
 * holds '\n' or NUL is not sent (it would put the stream out of step):
 * 1, last error EINVAL, no back-off. Blocks at most timeout_ms; a call in
 * back-off makes no syscall but clock_gettime. */
int kthrottle_tagq_check(struct kthrottle_tagq *q, const char *tag, size_t len);

/* Why the last kthrottle_tagq_check served without an answer, as a positive
 * errno; 0 when it was answered. ETIMEDOUT (no connection or no answer in
 * time), ECONNREFUSED/ENOENT (no server), ECONNRESET (the server closed),
 * EPROTO (a reply other than "OK\n"/"NO\n"), EINVAL (bad tag), EAGAIN
 * (backing off after an earlier failure: not tried). */
int kthrottle_tagq_last_error(const struct kthrottle_tagq *q);

/* Closes the connection and frees; NULL is allowed. */
void kthrottle_tagq_close(struct kthrottle_tagq *q);

/* One line about the last failure in this thread ("" if none). */
const char *kthrottle_last_error(void);

#ifdef __cplusplus
}
#endif

#endif
