/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The query server (query.h): the line protocol over a Unix stream
 * socket and, optionally, TCP. One epoll set (level-triggered) holds the
 * listeners and every connection; kt_query_run takes one batch of ready
 * events with a zero timeout and serves it. Every socket is non-blocking;
 * nothing here waits.
 *
 * The protocol, exactly:
 *  - Every '\n' the client sends gets exactly one answer, "OK\n" or "NO\n",
 *    in the order the lines arrived; nothing else is ever sent.
 *  - One trailing '\r' before the '\n' is removed (telnet, CRLF clients);
 *    only one: "a\r\r\n" asks about the tag "a\r".
 *  - A tag is 1..KT_TAG_MAX_LEN (255) bytes of anything but NUL and '\n'.
 *    decide() is called once per such tag, in order: 1 answers "OK\n",
 *    anything else "NO\n".
 *  - Bad lines are answered "NO\n" without calling decide(), and counted in
 *    stats.bad_lines (and in stats.no):
 *      * an empty line ("\n" or "\r\n");
 *      * a line with a NUL byte anywhere;
 *      * an over-long line (more than 255 bytes once the '\r' is removed).
 *        Its bytes are not buffered: once it is known to be too long the
 *        rest of it is skipped as it arrives, up to its '\n', which is then
 *        answered "NO\n" once (a 1 MiB line costs one answer and no memory),
 *        and the next line is read normally: the stream stays in sync.
 *  - A line is answered when its '\n' arrives, never before. A connection
 *    that ends mid-line (EOF or reset) has that partial line dropped,
 *    unanswered and undecided.
 *  - Half close: a client that sends its lines and then shuts down its
 *    writing side (shutdown(SHUT_WR), `printf 'a\n' | nc -U`) still gets
 *    every answer; the connection is closed once they are written. A client
 *    that closed entirely (EPOLLHUP) or errored is closed at once, with
 *    whatever it had not read.
 *  - Fairness: a connection is read at most QUERY_READ_BUDGET (64 KiB) per
 *    kt_query_run; the epoll set is level-triggered, so what is left is
 *    served on a later run, after the other ready clients.
 *  - Answers are written with one writev per connection per run (the
 *    leftover of earlier runs, then this run's answers). What the socket
 *    does not take is kept per connection, at most QUERY_OUT_CAP (192 KiB =
 *    3 x the read budget: a read can never produce more than 3 bytes per
 *    byte). A read is never larger than a third of the room left, so the cap
 *    holds exactly. A client that stops reading its answers: once more than
 *    half the cap is waiting, the server stops reading from it (EPOLLIN off,
 *    EPOLLOUT on) until it drains below half; its own writes then block or
 *    fail with EAGAIN. Other clients are not affected. The leftover buffer
 *    is allocated only while something is waiting and freed once drained.
 *  - Limits, so that no local process can make a fail-safe client's
 *    queries fail (and so switch throttling off for everyone):
 *      * idle_ms (0 = KT_QUERY_IDLE_MS, 30 s): a connection that sent no
 *        complete line for that long is closed (stats.evicted_idle). Its
 *        answers draining (a write taking some of its backlog) counts as
 *        activity. Connections sit in one list, least recently active first
 *        (moved to the end at most once per run), so the sweep each run
 *        costs O(1) plus what it closes; a timerfd in the epoll set wakes
 *        the loop for the oldest one's deadline.
 *      * max_per_peer (0 = max(64, max_clients / 8)) connections per peer:
 *        per uid (SO_PEERCRED at accept, root included) on the Unix socket,
 *        per source address on TCP (IPv4 and v4-mapped IPv6 alike). One
 *        more closes that peer's least recently active connection, never
 *        the new one (stats.evicted_peer_cap).
 *      * max_clients (0 = 4096) at once: one more closes the least recently
 *        active connection of the peer holding the most (ties: the longest
 *        idle), never the new one (stats.evicted_full). O(peers).
 *    Closed connections are freed at the end of the run (events of that
 *    batch may still point at them).
 *  - When the process is out of file descriptors (EMFILE/ENFILE) a spare
 *    descriptor kept for the purpose is released to accept the pending
 *    connection and close it (stats.refused, as are allocation failures),
 *    so a full table does not spin the loop. Each run accepts until EAGAIN,
 *    at most QUERY_ACCEPT_MAX connections per listener.
 *  - Unix socket: mode 0666 (pods reach it through a hostPath). The parent
 *    directory must exist (the daemon creates it): if not, open fails with
 *    -ENOENT and says so. A path something already exists at: if it is not
 *    a socket, -EEXIST (never removed); if it is a socket a server answers
 *    on (connect succeeds or its backlog is full), -EADDRINUSE; if connect
 *    is refused (a dead server's leftover), it is unlinked and bound again;
 *    any other connect error (EACCES...) is returned as is, path untouched.
 *    kt_query_close unlinks the path only if it is still the socket this
 *    server bound (same st_dev and st_ino), never one another process put
 *    there since.
 *  - TCP: tcp_addr an IPv4 or IPv6 literal ("::1" or "[::1]"), NULL =
 *    127.0.0.1; SO_REUSEADDR; TCP_NODELAY on every connection.
 *  - At least one listener is required (-EINVAL otherwise).
 *  - stats.ok / stats.no count answers produced (queued for the client),
 *    bad lines included in no.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <sys/un.h>

#include "kthrottle.h"
#include "tags/qline.h"
#include "tags/query.h"

#define QUERY_READ_BUDGET (64 * 1024)            /* per connection per run */
#define QUERY_OUT_CAP (3 * QUERY_READ_BUDGET)    /* answers waiting, per connection */
#define QUERY_RESUME_AT (QUERY_OUT_CAP / 2)      /* read again below this */
#define QUERY_EVENTS 256                         /* events per run */
#define QUERY_ACCEPT_MAX 4096                    /* accepts per listener per run */
#define QUERY_DEFAULT_MAX_CLIENTS 4096
#define QUERY_MIN_PER_PEER 64
#define QUERY_PEER_BUCKETS 1024                  /* power of two */

enum { QK_UNIX, QK_TCP, QK_CONN, QK_TIMER, QK_DEAD };

struct qitem {
	int kind;
	int fd;
};

/* Who holds connections: a uid on the Unix socket, a source address (IPv4
 * as v4-mapped IPv6) on TCP. Compared with memcmp: no padding. */
struct qkey {
	uint32_t kind;
	uint32_t uid;
	uint8_t addr[16];
};

struct qconn;

struct qpeer {
	struct qkey key;
	struct qpeer *hnext;             /* hash chain */
	struct qpeer *prev, *next;       /* every peer, for the largest holder */
	struct qconn *old, *new;         /* its connections, least recently active first */
	unsigned n;
};

struct qconn {
	struct qitem it;                 /* first: epoll data points here */
	struct qconn *gprev, *gnext;     /* every connection, least recently active first */
	struct qconn *pprev, *pnext;     /* its peer's, same order */
	struct qpeer *peer;
	uint64_t active_ns;              /* last complete line, accept, or drain progress */
	uint32_t events;                 /* registered in epoll */
	bool eof;                        /* peer shut its writing side */
	bool tcp;
	struct kt_qline ls;              /* the line being read */
	char *pend;                      /* answers the socket did not take */
	size_t pend_off, pend_len, pend_cap;
};

struct kt_query {
	int ep;
	struct qitem lun, ltcp, timer;
	int spare;                       /* /dev/null, released on EMFILE */
	kt_query_decide_fn decide;
	void *ctx;
	unsigned max_clients, max_per_peer;
	uint64_t idle_ns;
	uint64_t now;                    /* this run's CLOCK_MONOTONIC, ns */
	bool timer_armed;
	bool bound;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	dev_t dev;
	ino_t ino;
	struct qconn *old, *new;         /* every connection, least recently active first */
	struct qconn *dead;              /* closed this run, freed at its end (events may
					  * still point at them) */
	struct qpeer *peers;
	struct qpeer *pbuck[QUERY_PEER_BUCKETS];
	struct kt_query_stats st;
	char rbuf[QUERY_READ_BUDGET];
	char obuf[QUERY_OUT_CAP];
};

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* ---- peers ---- */

static unsigned key_hash(const struct qkey *k)
{
	const uint8_t *b = (const uint8_t *)k;
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < sizeof(*k); i++)
		h = (h ^ b[i]) * 16777619u;
	return h & (QUERY_PEER_BUCKETS - 1);
}

static struct qpeer *peer_get(struct kt_query *q, const struct qkey *k)
{
	unsigned h = key_hash(k);
	struct qpeer *p;

	for (p = q->pbuck[h]; p; p = p->hnext)
		if (!memcmp(&p->key, k, sizeof(*k)))
			return p;
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->key = *k;
	p->hnext = q->pbuck[h];
	q->pbuck[h] = p;
	p->next = q->peers;
	if (q->peers)
		q->peers->prev = p;
	q->peers = p;
	q->st.peers++;
	return p;
}

static void peer_put(struct kt_query *q, struct qpeer *p)
{
	struct qpeer **pp;

	if (p->n)
		return;
	for (pp = &q->pbuck[key_hash(&p->key)]; *pp != p; pp = &(*pp)->hnext)
		;
	*pp = p->hnext;
	if (p->prev)
		p->prev->next = p->next;
	else
		q->peers = p->next;
	if (p->next)
		p->next->prev = p->prev;
	q->st.peers--;
	free(p);
}

/* ---- the two activity lists (global and per peer), O(1) each ---- */

static void lists_unlink(struct kt_query *q, struct qconn *c)
{
	struct qpeer *p = c->peer;

	if (c->gprev)
		c->gprev->gnext = c->gnext;
	else
		q->old = c->gnext;
	if (c->gnext)
		c->gnext->gprev = c->gprev;
	else
		q->new = c->gprev;
	if (c->pprev)
		c->pprev->pnext = c->pnext;
	else
		p->old = c->pnext;
	if (c->pnext)
		c->pnext->pprev = c->pprev;
	else
		p->new = c->pprev;
	c->gprev = c->gnext = c->pprev = c->pnext = NULL;
}

static void lists_append(struct kt_query *q, struct qconn *c)
{
	struct qpeer *p = c->peer;

	c->gprev = q->new;
	c->gnext = NULL;
	if (q->new)
		q->new->gnext = c;
	else
		q->old = c;
	q->new = c;
	c->pprev = p->new;
	c->pnext = NULL;
	if (p->new)
		p->new->pnext = c;
	else
		p->old = c;
	p->new = c;
}

/* c did something that is not idling: the newest of both lists. */
static void touch(struct kt_query *q, struct qconn *c)
{
	c->active_ns = q->now;
	if (q->new != c || c->peer->new != c) {
		lists_unlink(q, c);
		lists_append(q, c);
	}
}

/* The fd and the lists go now; the memory at the end of the run. */
static void conn_close(struct kt_query *q, struct qconn *c)
{
	struct qpeer *p = c->peer;

	epoll_ctl(q->ep, EPOLL_CTL_DEL, c->it.fd, NULL);
	close(c->it.fd);
	c->it.fd = -1;
	c->it.kind = QK_DEAD;
	lists_unlink(q, c);
	p->n--;
	peer_put(q, p);
	c->peer = NULL;
	free(c->pend);
	c->pend = NULL;
	c->gnext = q->dead;
	q->dead = c;
	q->st.clients--;
}

static void free_dead(struct kt_query *q)
{
	while (q->dead) {
		struct qconn *c = q->dead;

		q->dead = c->gnext;
		free(c);
	}
}

/* Closes what sent no complete line for idle_ns (oldest first: stops at the
 * first that did) and arms the timer for the next candidate. */
static void sweep_idle(struct kt_query *q)
{
	while (q->old && q->now - q->old->active_ns >= q->idle_ns) {
		conn_close(q, q->old);
		q->st.evicted_idle++;
	}
	if (q->old && !q->timer_armed && q->timer.fd >= 0) {
		uint64_t at = q->old->active_ns + q->idle_ns;
		struct itimerspec its = { .it_value = { .tv_sec = at / 1000000000ULL,
							.tv_nsec = at % 1000000000ULL } };

		/* fires early if that one got busy meanwhile: a no-op sweep, re-armed */
		if (!timerfd_settime(q->timer.fd, TFD_TIMER_ABSTIME, &its, NULL))
			q->timer_armed = true;
	}
}

/* Appends to c's leftover buffer; the caller keeps pend_len <= QUERY_OUT_CAP. */
static int pend_add(struct qconn *c, const char *p, size_t n)
{
	if (!n)
		return 0;
	if (c->pend_off + c->pend_len + n > c->pend_cap) {
		if (c->pend_off) {
			memmove(c->pend, c->pend + c->pend_off, c->pend_len);
			c->pend_off = 0;
		}
		if (c->pend_len + n > c->pend_cap) {
			size_t cap = c->pend_cap ? c->pend_cap : 4096;
			char *np;

			while (cap < c->pend_len + n)
				cap *= 2;
			if (cap > QUERY_OUT_CAP)
				cap = QUERY_OUT_CAP;
			np = realloc(c->pend, cap);
			if (!np)
				return -ENOMEM;
			c->pend = np;
			c->pend_cap = cap;
		}
	}
	memcpy(c->pend + c->pend_off + c->pend_len, p, n);
	c->pend_len += n;
	return 0;
}

/* Writes the leftover and then out[0..olen) in one call; keeps what the
 * socket did not take. 0, or -1: the connection is gone. */
static int conn_flush(struct kt_query *q, struct qconn *c, const char *out, size_t olen)
{
	struct iovec iov[2];
	struct msghdr mh = { .msg_iov = iov };
	ssize_t r;
	size_t w, k;

	if (c->pend_len) {
		iov[mh.msg_iovlen].iov_base = c->pend + c->pend_off;
		iov[mh.msg_iovlen++].iov_len = c->pend_len;
	}
	if (olen) {
		iov[mh.msg_iovlen].iov_base = (void *)out;
		iov[mh.msg_iovlen++].iov_len = olen;
	}
	if (!mh.msg_iovlen)
		return 0;
	do
		r = sendmsg(c->it.fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (r < 0 && errno == EINTR);
	if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
		return -1;
	w = r < 0 ? 0 : (size_t)r;
	k = w < c->pend_len ? w : c->pend_len;
	if (k)
		touch(q, c); /* draining a backlog is not idling */
	c->pend_off += k;
	c->pend_len -= k;
	w -= k;
	if (!c->pend_len) {
		c->pend_off = 0;
		if (w == olen && c->pend) { /* drained: give the memory back */
			free(c->pend);
			c->pend = NULL;
			c->pend_cap = 0;
		}
	}
	if (pend_add(c, out + w, olen - w))
		return -1;
	return 0;
}

static void conn_serve(struct kt_query *q, struct qconn *c, uint32_t ev)
{
	size_t got = 0, olen = 0;
	uint32_t want;

	if (ev & (EPOLLERR | EPOLLHUP)) {
		conn_close(q, c); /* the peer can read nothing any more */
		return;
	}
	if ((ev & EPOLLIN) && !c->eof && c->pend_len <= QUERY_RESUME_AT) {
		for (;;) {
			size_t room = QUERY_OUT_CAP - c->pend_len - olen;
			size_t n = room / 3;
			ssize_t r;

			if (n > QUERY_READ_BUDGET - got)
				n = QUERY_READ_BUDGET - got;
			if (!n)
				break;
			r = read(c->it.fd, q->rbuf, n);
			if (r > 0) {
				struct kt_qline_counts cnt = { 0 };

				got += r;
				olen += kt_qline_parse(&c->ls, q->rbuf, r, q->obuf + olen,
						       q->decide, q->ctx, &cnt);
				q->st.ok += cnt.ok;
				q->st.no += cnt.no;
				q->st.bad_lines += cnt.bad;
				if ((size_t)r < n)
					break; /* drained for now (level-triggered) */
				continue;
			}
			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
				break;
			if (r < 0) {
				conn_close(q, c);
				return;
			}
			c->eof = true; /* EOF: a partial line is dropped */
			c->ls.llen = 0;
			c->ls.discard = false;
			break;
		}
	}
	if (olen)
		touch(q, c); /* a complete line: one move per run, not per line */
	if (conn_flush(q, c, q->obuf, olen)) {
		conn_close(q, c);
		return;
	}
	if (c->eof && !c->pend_len) {
		conn_close(q, c);
		return;
	}
	want = 0;
	if (!c->eof && c->pend_len <= QUERY_RESUME_AT)
		want |= EPOLLIN;
	if (c->pend_len)
		want |= EPOLLOUT;
	if (want != c->events) {
		struct epoll_event e = { .events = want, .data.ptr = c };

		if (epoll_ctl(q->ep, EPOLL_CTL_MOD, c->it.fd, &e)) {
			conn_close(q, c);
			return;
		}
		c->events = want;
	}
}

/* The key of an accepted connection: its uid (Unix) or source address. */
static void peer_key(int fd, int kind, const struct sockaddr_storage *ss, struct qkey *k)
{
	memset(k, 0, sizeof(*k));
	k->kind = kind;
	if (kind == QK_UNIX) {
		struct ucred uc;
		socklen_t l = sizeof(uc);

		/* unknown: one shared bucket, capped like any uid */
		k->uid = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &l) ? (uint32_t)-1 : uc.uid;
	} else if (ss->ss_family == AF_INET) {
		k->addr[10] = k->addr[11] = 0xff;
		memcpy(k->addr + 12, &((const struct sockaddr_in *)ss)->sin_addr, 4);
	} else if (ss->ss_family == AF_INET6) {
		memcpy(k->addr, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
	}
}

/* The server is over max_clients with c just added: the least recently
 * active connection of the peer holding the most (ties: the one idle the
 * longest), never c itself. O(peers). */
static struct qconn *full_victim(struct kt_query *q, struct qconn *c)
{
	struct qpeer *best = NULL, *p;

	for (p = q->peers; p; p = p->next) {
		if (p->old == c)
			continue; /* c is all this peer holds */
		if (!best || p->n > best->n ||
		    (p->n == best->n && p->old->active_ns < best->old->active_ns))
			best = p;
	}
	if (!best)
		return NULL;
	return best->old != c ? best->old : c->pnext;
}

static void accept_all(struct kt_query *q, struct qitem *l)
{
	int i;

	for (i = 0; i < QUERY_ACCEPT_MAX; i++) {
		struct sockaddr_storage ss = { 0 };
		socklen_t sl = sizeof(ss);
		struct epoll_event e;
		struct qconn *c;
		struct qpeer *p;
		struct qkey k;
		int fd = accept4(l->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if ((errno == EMFILE || errno == ENFILE) && q->spare >= 0) {
				close(q->spare);
				fd = accept(l->fd, NULL, NULL);
				if (fd >= 0) {
					close(fd);
					q->st.refused++;
				}
				q->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
				if (fd >= 0)
					continue;
			}
			return; /* EAGAIN, or nothing to do about it now */
		}
		peer_key(fd, l->kind, &ss, &k);
		if (!(c = calloc(1, sizeof(*c))) || !(p = peer_get(q, &k))) {
			free(c);
			close(fd);
			q->st.refused++;
			continue;
		}
		c->it.kind = QK_CONN;
		c->it.fd = fd;
		c->tcp = l->kind == QK_TCP;
		if (c->tcp) {
			int one = 1;

			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		}
		c->events = EPOLLIN;
		e.events = EPOLLIN;
		e.data.ptr = c;
		if (epoll_ctl(q->ep, EPOLL_CTL_ADD, fd, &e)) {
			close(fd);
			free(c);
			peer_put(q, p);
			q->st.refused++;
			continue;
		}
		c->peer = p;
		c->active_ns = q->now;
		lists_append(q, c);
		p->n++;
		q->st.clients++;
		q->st.accepted++;
		/* Make room by closing someone else's idlest connection, never by
		 * refusing the newcomer: one local process holding every slot
		 * must not turn a fail-safe client's answers into failures. */
		if (p->n > q->max_per_peer) {
			conn_close(q, p->old); /* not c: c is p's newest and p->n >= 2 */
			q->st.evicted_peer_cap++;
		}
		if (q->st.clients > q->max_clients) {
			struct qconn *v = full_victim(q, c);

			if (v) {
				conn_close(q, v);
				q->st.evicted_full++;
			}
		}
	}
}

void kt_query_run(struct kt_query *q)
{
	struct epoll_event ev[QUERY_EVENTS];
	int n, i;

	if (!q)
		return;
	do
		n = epoll_wait(q->ep, ev, QUERY_EVENTS, 0);
	while (n < 0 && errno == EINTR);
	q->now = mono_ns();
	for (i = 0; i < n; i++) {
		struct qitem *it = ev[i].data.ptr;
		uint64_t v;

		if (it->kind == QK_CONN)
			conn_serve(q, (struct qconn *)it, ev[i].events);
		else if (it->kind == QK_TIMER) {
			while (read(it->fd, &v, sizeof(v)) > 0)
				;
			q->timer_armed = false;
		} else if (it->kind != QK_DEAD)
			accept_all(q, it);
	}
	sweep_idle(q);
	free_dead(q);
}

static int add_listener(struct kt_query *q, struct qitem *l, char *err, size_t errlen,
			const char *what)
{
	struct epoll_event e = { .events = EPOLLIN, .data.ptr = l };

	if (listen(l->fd, 4096) || epoll_ctl(q->ep, EPOLL_CTL_ADD, l->fd, &e)) {
		int ret = -errno;

		snprintf(err, errlen, "query socket %s: listen: %s", what, strerror(-ret));
		return ret;
	}
	return 0;
}

static int open_unix(struct kt_query *q, const char *path, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int ret, fd;

	if (!*path || strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "query socket %s: path empty or longer than %zu bytes", path,
			 sizeof(sa.sun_path) - 1);
		return -ENAMETOOLONG;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (!lstat(path, &st)) {
		if (!S_ISSOCK(st.st_mode)) {
			snprintf(err, errlen, "query socket %s: exists and is not a socket", path);
			return -EEXIST;
		}
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			ret = -errno;
			snprintf(err, errlen, "query socket %s: socket: %s", path, strerror(-ret));
			return ret;
		}
		ret = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ? errno : 0;
		close(fd);
		if (ret == ECONNREFUSED) {
			if (unlink(path) && errno != ENOENT) {
				ret = -errno;
				snprintf(err, errlen, "query socket %s: cannot remove stale socket: %s",
					 path, strerror(-ret));
				return ret;
			}
		} else if (!ret || ret == EAGAIN || ret == EINPROGRESS) {
			snprintf(err, errlen, "query socket %s: another server answers on it (%s)",
				 path, ret ? "its backlog is full" : "connected");
			return -EADDRINUSE;
		} else if (ret != ENOENT) { /* gone meanwhile: just bind */
			snprintf(err, errlen, "query socket %s: cannot tell whether a server "
				 "answers on it: connect: %s", path, strerror(ret));
			return -ret;
		}
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		ret = -errno;
		snprintf(err, errlen, "query socket %s: socket: %s", path, strerror(-ret));
		return ret;
	}
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		ret = -errno;
		close(fd);
		snprintf(err, errlen, "query socket %s: bind: %s%s", path, strerror(-ret),
			 ret == -ENOENT ? " (its directory does not exist)" : "");
		return ret;
	}
	q->lun.fd = fd;
	if (stat(path, &st) || chmod(path, 0666)) {
		ret = -errno;
		snprintf(err, errlen, "query socket %s: chmod 0666: %s", path, strerror(-ret));
		unlink(path);
		return ret;
	}
	q->bound = true;
	q->dev = st.st_dev;
	q->ino = st.st_ino;
	snprintf(q->path, sizeof(q->path), "%s", path);
	return add_listener(q, &q->lun, err, errlen, path);
}

static int open_tcp(struct kt_query *q, const char *addr, int port, char *err, size_t errlen)
{
	struct sockaddr_storage ss = { 0 };
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
	char a[INET6_ADDRSTRLEN + 2], what[INET6_ADDRSTRLEN + 16];
	socklen_t sl;
	size_t n;
	int fd, one = 1, ret;

	if (!addr)
		addr = "127.0.0.1";
	n = strlen(addr);
	if (n >= 2 && addr[0] == '[' && addr[n - 1] == ']' && n - 2 < sizeof(a)) {
		memcpy(a, addr + 1, n - 2);
		a[n - 2] = 0;
	} else {
		snprintf(a, sizeof(a), "%s", addr);
	}
	if (port < 1 || port > 65535) {
		snprintf(err, errlen, "query TCP port %d: not 1..65535", port);
		return -EINVAL;
	}
	if (inet_pton(AF_INET, a, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons(port);
		sl = sizeof(*s4);
		snprintf(what, sizeof(what), "%s:%d", a, port);
	} else if (inet_pton(AF_INET6, a, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		sl = sizeof(*s6);
		snprintf(what, sizeof(what), "[%s]:%d", a, port);
	} else {
		snprintf(err, errlen, "query TCP address '%s': not an IPv4 or IPv6 literal", addr);
		return -EINVAL;
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		ret = -errno;
		snprintf(err, errlen, "query socket %s: socket: %s", what, strerror(-ret));
		return ret;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, sl)) {
		ret = -errno;
		close(fd);
		snprintf(err, errlen, "query socket %s: bind: %s", what, strerror(-ret));
		return ret;
	}
	q->ltcp.fd = fd;
	return add_listener(q, &q->ltcp, err, errlen, what);
}

int kt_query_open(const struct kt_query_opts *o, kt_query_decide_fn decide, void *ctx,
		  struct kt_query **out, char *err, size_t errlen)
{
	struct kt_query *q;
	int ret;

	*out = NULL;
	if (errlen)
		*err = 0;
	if (!o || !decide || (!o->socket_path && !o->tcp_port)) {
		snprintf(err, errlen, "query server: no decide callback or no listener (socket path "
				      "or TCP port) given");
		return -EINVAL;
	}
	q = calloc(1, sizeof(*q));
	if (!q) {
		snprintf(err, errlen, "query server: out of memory");
		return -ENOMEM;
	}
	q->lun = (struct qitem){ QK_UNIX, -1 };
	q->ltcp = (struct qitem){ QK_TCP, -1 };
	q->timer = (struct qitem){ QK_TIMER, -1 };
	q->decide = decide;
	q->ctx = ctx;
	q->max_clients = o->max_clients ? o->max_clients : QUERY_DEFAULT_MAX_CLIENTS;
	q->max_per_peer = o->max_per_peer ? o->max_per_peer : q->max_clients / 8;
	if (!o->max_per_peer && q->max_per_peer < QUERY_MIN_PER_PEER)
		q->max_per_peer = QUERY_MIN_PER_PEER;
	q->idle_ns = (uint64_t)(o->idle_ms ? o->idle_ms : KT_QUERY_IDLE_MS) * 1000000ULL;
	q->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	q->ep = epoll_create1(EPOLL_CLOEXEC);
	if (q->ep < 0) {
		ret = -errno;
		snprintf(err, errlen, "query server: epoll_create1: %s", strerror(-ret));
		goto fail;
	}
	q->timer.fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (q->timer.fd < 0 ||
	    epoll_ctl(q->ep, EPOLL_CTL_ADD, q->timer.fd,
		      &(struct epoll_event){ .events = EPOLLIN, .data.ptr = &q->timer })) {
		ret = -errno;
		snprintf(err, errlen, "query server: idle timer: %s", strerror(-ret));
		goto fail;
	}
	if (o->socket_path && (ret = open_unix(q, o->socket_path, err, errlen)))
		goto fail;
	if (o->tcp_port && (ret = open_tcp(q, o->tcp_addr, o->tcp_port, err, errlen)))
		goto fail;
	*out = q;
	return 0;
fail:
	kt_query_close(q);
	return ret;
}

int kt_query_fd(const struct kt_query *q)
{
	return q ? q->ep : -1;
}

void kt_query_get_stats(const struct kt_query *q, struct kt_query_stats *s)
{
	if (q)
		*s = q->st;
	else
		memset(s, 0, sizeof(*s));
}

void kt_query_close(struct kt_query *q)
{
	struct stat st;

	if (!q)
		return;
	while (q->old)
		conn_close(q, q->old);
	free_dead(q);
	if (q->lun.fd >= 0)
		close(q->lun.fd);
	if (q->ltcp.fd >= 0)
		close(q->ltcp.fd);
	if (q->bound && !lstat(q->path, &st) && S_ISSOCK(st.st_mode) && st.st_dev == q->dev &&
	    st.st_ino == q->ino)
		unlink(q->path);
	if (q->ep >= 0)
		close(q->ep);
	if (q->spare >= 0)
		close(q->spare);
	if (q->timer.fd >= 0)
		close(q->timer.fd);
	free(q);
}
