/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The endpoint's HTTP server: one inner epoll fd (the listener and each
 * connection) that the daemon's loop watches. Connections are kept in
 * accept order, so the oldest is the list's head; the limits are in
 * metrics.h. libmicrohttpd could not bound the time to receive a whole
 * request nor evict a connection to admit a new one. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include "control/metrics.h"

#define MAX_CONNS 256
#define MAX_PER_ADDR 64
#define NS_PER_S 1000000000ULL
#define REQUEST_NS (1 * NS_PER_S) /* from accept to the whole request */
#define REPLY_NS (2 * NS_PER_S)   /* to write the reply */
#define LINGER_NS (1 * NS_PER_S)  /* after it, for the peer's close */
#define ACCEPTS_PER_RUN 512       /* the daemon's loop gets its turn */
#define PAUSE_NS (100 * 1000000ULL) /* no fds left: accept again after */

enum conn_state { C_READ, C_WRITE, C_LINGER };

struct conn {
	struct conn *prev, *next; /* accept order */
	int fd;
	enum conn_state st;
	uint64_t deadline_ns;
	unsigned char addr[16]; /* the peer's address (IPv4: first 4 bytes) */
	char *out;
	size_t out_len, out_off;
	size_t in_len;
	char in[KT_HTTP_MAX_REQ];
};

struct kt_metrics {
	int epfd, lfd;
	bool listening;          /* lfd is in epfd */
	uint64_t resume_ns;      /* when not listening: accept again then */
	struct conn *head, *tail;
	int n_conns;
	const struct kt_metrics_route *routes;
	int n;
	void *arg;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

/* ---- the request, parsed without I/O ---- */

static bool is_tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* The request line buf[0..n) (no line end): 0 (GET/HEAD, req set) or a status. */
static int parse_line(const char *buf, size_t n, struct kt_http_req *req)
{
	const char *sp1 = memchr(buf, ' ', n), *sp2, *ver;
	size_t mlen, tlen, vlen;

	if (!sp1 || !(sp2 = memchr(sp1 + 1, ' ', n - (size_t)(sp1 + 1 - buf))))
		return 400;
	mlen = (size_t)(sp1 - buf);
	tlen = (size_t)(sp2 - sp1 - 1);
	ver = sp2 + 1;
	vlen = n - (size_t)(ver - buf);
	if (!mlen || mlen > 16 || !tlen)
		return 400;
	for (size_t i = 0; i < mlen; i++)
		if (buf[i] < 'A' || buf[i] > 'Z')
			return 400;
	for (size_t i = 0; i < tlen; i++)
		if ((unsigned char)sp1[1 + i] <= ' ' || (unsigned char)sp1[1 + i] >= 0x7f)
			return 400;
	if (sp1[1] != '/') /* origin-form only */
		return 400;
	if (vlen != 8 || memcmp(ver, "HTTP/", 5) || ver[6] != '.' || ver[5] < '0' || ver[5] > '9' ||
	    ver[7] < '0' || ver[7] > '9')
		return 400;
	if (ver[5] != '1')
		return 505;
	if (!(mlen == 3 && !memcmp(buf, "GET", 3)) && !(mlen == 4 && !memcmp(buf, "HEAD", 4)))
		return 405;
	req->head = mlen == 4;
	req->path_off = (size_t)(sp1 + 1 - buf);
	req->path_len = strcspn(sp1 + 1, "?# ");
	return 0;
}

/* One header line (no line end): "name: value", no folding. */
static bool header_ok(const char *p, size_t n)
{
	const char *colon = memchr(p, ':', n);

	if (!colon || colon == p)
		return false;
	for (const char *c = p; c < colon; c++)
		if (!is_tchar((unsigned char)*c))
			return false;
	for (const char *c = colon + 1; c < p + n; c++)
		if (((unsigned char)*c < ' ' && *c != '\t') || *c == 0x7f)
			return false;
	return true;
}

int kt_http_parse(const char *buf, size_t len, struct kt_http_req *req)
{
	size_t n = len < KT_HTTP_MAX_REQ ? len : KT_HTTP_MAX_REQ, ll;
	const char *nl = memchr(buf, '\n', n < KT_HTTP_MAX_LINE ? n : KT_HTTP_MAX_LINE), *p;
	int st;

	memset(req, 0, sizeof(*req));
	if (!nl)
		return n >= KT_HTTP_MAX_LINE ? 414 : 0;
	ll = (size_t)(nl - buf);
	if (ll && buf[ll - 1] == '\r')
		ll--;
	if ((st = parse_line(buf, ll, req)))
		return st;
	for (p = nl + 1;; p = nl + 1) {
		nl = memchr(p, '\n', (size_t)(buf + n - p));
		if (!nl)
			break;
		ll = (size_t)(nl - p);
		if (ll && p[ll - 1] == '\r')
			ll--;
		if (!ll) {
			req->len = (size_t)(nl + 1 - buf);
			return 200;
		}
		if (!header_ok(p, ll))
			return 400;
	}
	memset(req, 0, sizeof(*req));
	return n >= KT_HTTP_MAX_REQ ? 431 : 0;
}

/* ---- connections ---- */

static void conn_close(struct kt_metrics *m, struct conn *c)
{
	*(c->prev ? &c->prev->next : &m->head) = c->next;
	*(c->next ? &c->next->prev : &m->tail) = c->prev;
	m->n_conns--;
	close(c->fd); /* leaves epfd too */
	free(c->out);
	free(c);
}

static void conn_watch(struct kt_metrics *m, struct conn *c, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = c };

	epoll_ctl(m->epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

static const char *reason(unsigned status)
{
	switch (status) {
	case 200: return "OK";
	case 400: return "Bad Request";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 414: return "URI Too Long";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 503: return "Service Unavailable";
	case 505: return "HTTP Version Not Supported";
	default: return "Status";
	}
}

static void conn_write(struct kt_metrics *m, struct conn *c, uint64_t now)
{
	while (c->out_off < c->out_len) {
		ssize_t r = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);

		if (r > 0) {
			c->out_off += (size_t)r;
		} else if (r < 0 && errno == EINTR) {
			continue;
		} else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			return;
		} else {
			conn_close(m, c);
			return;
		}
	}
	/* all sent: our FIN after it, then the peer's close (closing with its
	 * unread bytes would reset the connection, maybe before it read ours) */
	free(c->out);
	c->out = NULL;
	shutdown(c->fd, SHUT_WR);
	c->st = C_LINGER;
	c->deadline_ns = now + LINGER_NS;
	conn_watch(m, c, EPOLLIN);
}

/* Answers status for req (200: the route's page); the reply closes. */
static void conn_reply(struct kt_metrics *m, struct conn *c, int status,
		       const struct kt_http_req *req, uint64_t now)
{
	const char *type = "text/plain", *extra = "";
	unsigned st = (unsigned)status;
	char *body = NULL, head[256];
	bool head_only = false;
	int hl;

	if (status == 200) {
		const struct kt_metrics_route *r = NULL;

		head_only = req->head;
		for (int i = 0; i < m->n && !r; i++)
			if (strlen(m->routes[i].path) == req->path_len &&
			    !memcmp(m->routes[i].path, c->in + req->path_off, req->path_len))
				r = &m->routes[i];
		st = r ? 200 : 404;
		body = r ? r->render(m->arg, &st) : strdup("see /metrics\n");
		if (r && body)
			type = r->content_type;
		else if (r)
			st = 500;
	} else if (status == 405) {
		extra = "Allow: GET, HEAD\r\n";
	}
	if (!body) {
		char line[64];

		snprintf(line, sizeof(line), "%s\n", reason(st));
		if (!(body = strdup(line))) {
			conn_close(m, c);
			return;
		}
	}
	size_t blen = strlen(body);

	hl = snprintf(head, sizeof(head),
		      "HTTP/1.1 %u %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
		      "Connection: close\r\n%s\r\n",
		      st, reason(st), type, blen, extra);
	if (hl < 0 || (size_t)hl >= sizeof(head) ||
	    !(c->out = malloc((size_t)hl + (head_only ? 0 : blen)))) {
		free(body);
		conn_close(m, c);
		return;
	}
	memcpy(c->out, head, (size_t)hl);
	if (!head_only)
		memcpy(c->out + hl, body, blen);
	free(body);
	c->out_len = (size_t)hl + (head_only ? 0 : blen);
	c->out_off = 0;
	c->st = C_WRITE;
	c->deadline_ns = now + REPLY_NS;
	conn_watch(m, c, EPOLLOUT);
	conn_write(m, c, now);
}

static void conn_read(struct kt_metrics *m, struct conn *c, uint64_t now)
{
	struct kt_http_req req;
	bool eof = false;
	int st;

	while (c->in_len < sizeof(c->in)) {
		ssize_t r = recv(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len, 0);

		if (r > 0) {
			c->in_len += (size_t)r;
		} else if (r < 0 && errno == EINTR) {
			continue;
		} else {
			eof = !(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
			break;
		}
	}
	st = kt_http_parse(c->in, c->in_len, &req);
	if (st)
		conn_reply(m, c, st, &req, now);
	else if (eof)
		conn_close(m, c); /* gone before its request was whole */
}

static void conn_linger(struct kt_metrics *m, struct conn *c)
{
	char sink[4096];

	for (int i = 0; i < 16; i++) { /* at most 64 KiB a turn */
		ssize_t r = recv(c->fd, sink, sizeof(sink), 0);

		if (r > 0)
			continue;
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
			conn_close(m, c);
		return;
	}
}

/* The oldest connection not writing a reply (of addr if not NULL), else
 * the oldest one (of addr): the one a new connection replaces. */
static struct conn *victim(struct kt_metrics *m, const unsigned char *addr)
{
	struct conn *any = NULL;

	for (struct conn *c = m->head; c; c = c->next) {
		if (addr && memcmp(c->addr, addr, sizeof(c->addr)))
			continue;
		if (c->st != C_WRITE)
			return c;
		if (!any)
			any = c;
	}
	return any;
}

static void peer_key(const struct sockaddr_storage *ss, unsigned char key[16])
{
	memset(key, 0, 16);
	if (ss->ss_family == AF_INET)
		memcpy(key, &((const struct sockaddr_in *)ss)->sin_addr, 4);
	else if (ss->ss_family == AF_INET6)
		memcpy(key, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
}

static void accept_conns(struct kt_metrics *m, uint64_t now)
{
	for (int i = 0; i < ACCEPTS_PER_RUN; i++) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		unsigned char key[16];
		struct epoll_event ev = { .events = EPOLLIN };
		struct conn *c, *v;
		int same = 0;
		int fd = accept4(m->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK) {
				/* out of fds or memory: retry later, not in a busy loop */
				epoll_ctl(m->epfd, EPOLL_CTL_DEL, m->lfd, NULL);
				m->listening = false;
				m->resume_ns = now + PAUSE_NS;
			}
			return;
		}
		peer_key(&ss, key);
		for (c = m->head; c; c = c->next)
			same += !memcmp(c->addr, key, sizeof(key));
		if (same >= MAX_PER_ADDR && (v = victim(m, key)))
			conn_close(m, v);
		if (m->n_conns >= MAX_CONNS && (v = victim(m, NULL)))
			conn_close(m, v);
		c = calloc(1, sizeof(*c));
		ev.data.ptr = c;
		if (!c || epoll_ctl(m->epfd, EPOLL_CTL_ADD, fd, &ev)) {
			free(c);
			close(fd);
			continue;
		}
		c->fd = fd;
		memcpy(c->addr, key, sizeof(key));
		c->st = C_READ;
		c->deadline_ns = now + REQUEST_NS;
		c->prev = m->tail;
		*(m->tail ? &m->tail->next : &m->head) = c;
		m->tail = c;
		m->n_conns++;
		conn_read(m, c, now); /* a real client's request is often here already */
	}
}

int kt_metrics_start(struct kt_metrics **out, const char *addr, int port,
		     const struct kt_metrics_route *routes, int n, void *arg, char *err,
		     size_t errlen)
{
	struct sockaddr_storage ss = { 0 };
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
	struct kt_metrics *m;
	socklen_t sl;
	int one = 1, e;

	*out = NULL;
	if (inet_pton(AF_INET, addr, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
		sl = sizeof(*s4);
	} else if (inet_pton(AF_INET6, addr, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		sl = sizeof(*s6);
	} else {
		snprintf(err, errlen, "metrics: %s is not an IP address", addr);
		return -EINVAL;
	}
	if (!(m = calloc(1, sizeof(*m))))
		return -ENOMEM;
	m->routes = routes;
	m->n = n;
	m->arg = arg;
	m->epfd = epoll_create1(EPOLL_CLOEXEC);
	m->lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (m->epfd < 0 || m->lfd < 0 ||
	    setsockopt(m->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(m->lfd, (struct sockaddr *)&ss, sl) || listen(m->lfd, SOMAXCONN) ||
	    epoll_ctl(m->epfd, EPOLL_CTL_ADD, m->lfd, &ev)) {
		e = errno ? errno : EADDRINUSE;
		if (m->lfd >= 0)
			close(m->lfd);
		if (m->epfd >= 0)
			close(m->epfd);
		free(m);
		snprintf(err, errlen, "metrics: cannot listen on %s port %d: %s", addr, port,
			 strerror(e));
		return -e;
	}
	m->listening = true;
	*out = m;
	return 0;
}

int kt_metrics_fd(const struct kt_metrics *m)
{
	return m->epfd;
}

void kt_metrics_run(struct kt_metrics *m)
{
	struct epoll_event evs[64];
	bool accept_now = false;
	uint64_t now;
	int n;

	if (!m)
		return;
	now = now_ns();
	n = epoll_wait(m->epfd, evs, 64, 0);
	/* connections first: accepting may evict one named in evs */
	for (int i = 0; i < n; i++) {
		struct conn *c = evs[i].data.ptr;

		if (!c) {
			accept_now = true;
		} else if (c->st == C_READ) {
			conn_read(m, c, now);
		} else if (c->st == C_WRITE) {
			if (evs[i].events & (EPOLLERR | EPOLLHUP))
				conn_close(m, c);
			else
				conn_write(m, c, now);
		} else {
			conn_linger(m, c);
		}
	}
	if (!m->listening && now >= m->resume_ns) {
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };

		m->listening = !epoll_ctl(m->epfd, EPOLL_CTL_ADD, m->lfd, &ev);
		accept_now = m->listening;
	}
	if (accept_now)
		accept_conns(m, now);
	for (struct conn *c = m->head, *next; c; c = next) {
		next = c->next;
		if (now >= c->deadline_ns)
			conn_close(m, c);
	}
}

void kt_metrics_stop(struct kt_metrics *m)
{
	if (!m)
		return;
	while (m->head)
		conn_close(m, m->head);
	close(m->lfd);
	close(m->epfd);
	free(m);
}
