// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* kthrottle_tagq: the client of a tag limit's query server (the line
 * protocol; include/kthrottle_client.h has the contract).
 *
 * One persistent non-blocking stream connection per handle, opened on the
 * first query (and again on the first query after a failure whose back-off
 * has ended). A query is tag + '\n' out and exactly three bytes back, all
 * within one deadline of timeout_ms, waited for with poll(). Anything else
 * (no server, refused, slow, a reply that is not "OK\n" or "NO\n") answers
 * "serve", drops the connection (the stream may be out of step) and backs
 * off: 100 ms, doubled per consecutive failure up to 5 s, jittered. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "kthrottle.h"
#include "kthrottle_client.h"
#include "libkthrottle_int.h"

#define KT_API __attribute__((visibility("default")))

#define TAGQ_BACKOFF_MIN_NS 100000000ULL  /* 100 ms after the first failure ... */
#define TAGQ_BACKOFF_MAX_NS 5000000000ULL /* ... doubling up to 5 s */

struct kthrottle_tagq {
	int fd;                       /* the connection; -1: none */
	int err;                      /* kthrottle_tagq_last_error */
	uint32_t timeout_ms;
	uint32_t fails;               /* consecutive unanswered queries */
	uint64_t retry_at_ns;         /* CLOCK_MONOTONIC: back-off ends */
	uint64_t rng;                 /* jitter (xorshift) */
	struct sockaddr_storage addr;
	socklen_t addr_len;
	char where[128];              /* for messages */
};

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static uint64_t rng_next(struct kthrottle_tagq *q)
{
	uint64_t x = q->rng;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return q->rng = x;
}

/* "/path", "A.B.C.D:PORT" or "[V6]:PORT" into q->addr. 0 or -EINVAL. */
static int parse_where(struct kthrottle_tagq *q, const char *where)
{
	char host[INET6_ADDRSTRLEN + 1];
	const char *colon, *h = where;
	size_t hlen;
	char *end;
	long port;

	if (where[0] == '/') {
		struct sockaddr_un *sa = (struct sockaddr_un *)&q->addr;
		size_t len = strlen(where);

		if (len >= sizeof(sa->sun_path))
			return kt_lib_fail(EINVAL, "tag query socket %s: longer than %zu bytes", where,
					   sizeof(sa->sun_path) - 1);
		sa->sun_family = AF_UNIX;
		memcpy(sa->sun_path, where, len + 1);
		q->addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + 1);
		return 0;
	}
	colon = strrchr(where, ':');
	if (!colon)
		return kt_lib_fail(EINVAL, "tag query address '%s': not /PATH, HOST:PORT or [V6]:PORT",
				   where);
	hlen = (size_t)(colon - where);
	if (where[0] == '[') {
		if (hlen < 2 || where[hlen - 1] != ']')
			return kt_lib_fail(EINVAL, "tag query address '%s': an IPv6 host is [ADDR]:PORT",
					   where);
		h = where + 1;
		hlen -= 2;
	}
	if (!hlen || hlen >= sizeof(host))
		return kt_lib_fail(EINVAL, "tag query address '%s': no host", where);
	memcpy(host, h, hlen);
	host[hlen] = 0;
	errno = 0;
	port = strtol(colon + 1, &end, 10);
	if (!colon[1] || *end || errno || port < 1 || port > 65535)
		return kt_lib_fail(EINVAL, "tag query address '%s': port is not 1..65535", where);
	if (where[0] == '[') {
		struct sockaddr_in6 *sa = (struct sockaddr_in6 *)&q->addr;

		sa->sin6_family = AF_INET6;
		sa->sin6_port = htons((uint16_t)port);
		if (inet_pton(AF_INET6, host, &sa->sin6_addr) != 1)
			return kt_lib_fail(EINVAL, "tag query address '%s': '%s' is not an IPv6 address",
					   where, host);
		q->addr_len = sizeof(*sa);
	} else {
		struct sockaddr_in *sa = (struct sockaddr_in *)&q->addr;

		sa->sin_family = AF_INET;
		sa->sin_port = htons((uint16_t)port);
		if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
			return kt_lib_fail(EINVAL,
					   "tag query address '%s': '%s' is not an IPv4 address (IPv6: [ADDR]:PORT; no host names)",
					   where, host);
		q->addr_len = sizeof(*sa);
	}
	return 0;
}

KT_API int kthrottle_tagq_open(const char *where, uint32_t timeout_ms, struct kthrottle_tagq **out)
{
	struct kthrottle_tagq *q;
	int ret;

	if (!out)
		return kt_lib_fail(EINVAL, "kthrottle_tagq_open: no handle to return");
	*out = NULL;
	if (!where)
		where = KTHROTTLE_TAGQ_DEFAULT_SOCKET;
	if (!*where)
		return kt_lib_fail(EINVAL, "kthrottle_tagq_open: empty address");
	if (timeout_ms < 1 || timeout_ms > KTHROTTLE_TAGQ_MAX_TIMEOUT_MS)
		return kt_lib_fail(EINVAL, "kthrottle_tagq_open: timeout %u ms is not 1..%u", timeout_ms,
				   KTHROTTLE_TAGQ_MAX_TIMEOUT_MS);
	q = calloc(1, sizeof(*q));
	if (!q)
		return kt_lib_fail(ENOMEM, "kthrottle_tagq_open");
	q->fd = -1;
	q->timeout_ms = timeout_ms;
	ret = parse_where(q, where);
	if (ret) {
		free(q);
		return ret;
	}
	snprintf(q->where, sizeof(q->where), "%s", where);
	q->rng = mono_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)q;
	if (!q->rng)
		q->rng = 1;
	*out = q;
	return 0;
}

/* Waits for `events` on q->fd until deadline. 0 ready, or a positive errno
 * (ETIMEDOUT). */
static int wait_fd(struct kthrottle_tagq *q, short events, uint64_t deadline)
{
	for (;;) {
		struct pollfd p = { .fd = q->fd, .events = events };
		uint64_t now = mono_ns();
		int r, ms;

		if (now >= deadline)
			return ETIMEDOUT;
		/* round up: never spin on a sub-millisecond remainder */
		ms = (int)((deadline - now + 999999) / 1000000);
		r = poll(&p, 1, ms);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return errno;
		if (r > 0)
			return 0; /* ready, or an error the next call reports */
	}
}

/* Connects within the deadline. 0 or a positive errno. */
static int do_connect(struct kthrottle_tagq *q, uint64_t deadline)
{
	int fam = q->addr.ss_family, err, r;
	socklen_t len = sizeof(err);

	q->fd = socket(fam, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (q->fd < 0)
		return errno;
	if (fam != AF_UNIX) {
		int one = 1;
		/* one small line per query: do not wait to coalesce */
		setsockopt(q->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	do
		r = connect(q->fd, (struct sockaddr *)&q->addr, q->addr_len);
	while (r < 0 && errno == EINTR);
	if (r == 0)
		return 0;
	/* a Unix listener with a full backlog says EAGAIN at once: as slow */
	if (errno == EAGAIN)
		return ETIMEDOUT;
	if (errno != EINPROGRESS)
		return errno;
	err = wait_fd(q, POLLOUT, deadline);
	if (err)
		return err;
	if (getsockopt(q->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		return errno;
	return err;
}

/* Sends buf whole within the deadline. 0 or a positive errno. */
static int send_all(struct kthrottle_tagq *q, const char *buf, size_t len, uint64_t deadline)
{
	size_t off = 0;

	while (off < len) {
		ssize_t w = send(q->fd, buf + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (w > 0) {
			off += (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno != EAGAIN)
			return errno;
		int err = wait_fd(q, POLLOUT, deadline);
		if (err)
			return err;
	}
	return 0;
}

/* Reads exactly 3 bytes within the deadline. 0 or a positive errno
 * (ECONNRESET when the server closes first). */
static int recv_reply(struct kthrottle_tagq *q, char reply[3], uint64_t deadline)
{
	size_t got = 0;

	while (got < 3) {
		ssize_t r = recv(q->fd, reply + got, 3 - got, MSG_DONTWAIT);

		if (r > 0) {
			got += (size_t)r;
			continue;
		}
		if (r == 0)
			return ECONNRESET;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return errno;
		int err = wait_fd(q, POLLIN, deadline);
		if (err)
			return err;
	}
	return 0;
}

/* An unanswered query: drop the connection, back off, serve. */
static int unanswered(struct kthrottle_tagq *q, int err, const char *what)
{
	uint64_t b = TAGQ_BACKOFF_MAX_NS;

	if (q->fd >= 0) {
		close(q->fd);
		q->fd = -1;
	}
	if (q->fails < 32)
		q->fails++;
	if (q->fails <= 6) /* 100 ms << 6 > 5 s */
		b = TAGQ_BACKOFF_MIN_NS << (q->fails - 1);
	if (b > TAGQ_BACKOFF_MAX_NS)
		b = TAGQ_BACKOFF_MAX_NS;
	/* jitter: between 3/4 and all of it, so clients that failed together
	 * do not all come back together */
	b -= rng_next(q) % (b / 4 + 1);
	q->retry_at_ns = mono_ns() + b;
	q->err = err;
	kt_lib_fail(err, "tag query server %s: %s (serving; next try in %llu ms)", q->where, what,
		    (unsigned long long)(b / 1000000));
	return 1;
}

KT_API int kthrottle_tagq_check(struct kthrottle_tagq *q, const char *tag, size_t len)
{
	char buf[KT_TAG_MAX_LEN + 1], reply[3];
	uint64_t now, deadline;
	int err;

	if (!q)
		return 1;
	if (!tag || !len || len > KT_TAG_MAX_LEN || memchr(tag, '\n', len) || memchr(tag, 0, len)) {
		/* nothing sent: the stream stays in step; no back-off either */
		q->err = EINVAL;
		kt_lib_fail(EINVAL, "tag query: a tag is 1..%d bytes without '\\n' or NUL (serving)",
			    KT_TAG_MAX_LEN);
		return 1;
	}
	now = mono_ns();
	if (q->fails && now < q->retry_at_ns) {
		q->err = EAGAIN;
		return 1;
	}
	deadline = now + (uint64_t)q->timeout_ms * 1000000ULL;
	if (q->fd < 0) {
		err = do_connect(q, deadline);
		if (err)
			return unanswered(q, err, "cannot connect");
	}
	memcpy(buf, tag, len);
	buf[len] = '\n';
	err = send_all(q, buf, len + 1, deadline);
	if (err)
		return unanswered(q, err, "cannot send the tag");
	err = recv_reply(q, reply, deadline);
	if (err)
		return unanswered(q, err, err == ETIMEDOUT ? "no answer in time" : "no answer");
	if (memcmp(reply, "OK\n", 3) && memcmp(reply, "NO\n", 3))
		return unanswered(q, EPROTO, "a reply that is not \"OK\" or \"NO\"");
	q->fails = 0;
	q->err = 0;
	return reply[0] == 'O';
}

KT_API int kthrottle_tagq_last_error(const struct kthrottle_tagq *q)
{
	return q ? q->err : EINVAL;
}

KT_API void kthrottle_tagq_close(struct kthrottle_tagq *q)
{
	if (!q)
		return;
	if (q->fd >= 0)
		close(q->fd);
	free(q);
}
