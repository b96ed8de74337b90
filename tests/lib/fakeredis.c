// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "fakeredis.h"

#define CONN_BUF (1 << 16)

struct conn {
	int fd;
	size_t len;
	char buf[CONN_BUF];
};

static bool stopping(struct ktest_fakeredis *f)
{
	bool s;

	pthread_mutex_lock(&f->mu);
	s = f->stop;
	pthread_mutex_unlock(&f->mu);
	return s;
}

/* Parses one "*N\r\n$L\r\n...": bytes used, 0 if incomplete, -1 if junk. */
static long parse_cmd(const char *b, size_t len, char *name, size_t nlen, int *argc, char *arg2,
		      size_t alen)
{
	const char *p = b, *end = b + len, *nl;
	long n, l;

	if (len < 1)
		return 0;
	if (*p != '*')
		return -1;
	nl = memchr(p, '\n', (size_t)(end - p));
	if (!nl)
		return 0;
	n = atol(p + 1);
	p = nl + 1;
	*argc = (int)n;
	for (long i = 0; i < n; i++) {
		if (p >= end)
			return 0;
		if (*p != '$')
			return -1;
		nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl)
			return 0;
		l = atol(p + 1);
		p = nl + 1;
		if (l < 0 || end - p < l + 2)
			return l < 0 ? -1 : 0;
		if (i == 0 || i == 2) {
			char *dst = i == 0 ? name : arg2;
			size_t cap = i == 0 ? nlen : alen, k = (size_t)l < cap - 1 ? (size_t)l : cap - 1;

			memcpy(dst, p, k);
			dst[k] = 0;
		}
		p += l + 2;
	}
	return p - b;
}

/* Answers every complete command in c's buffer; false: close it. */
static bool serve(struct ktest_fakeredis *f, struct conn *c)
{
	for (;;) {
		char name[32] = "", arg2[32] = "";
		const char *out;
		int argc = 0;
		long used = parse_cmd(c->buf, c->len, name, sizeof(name), &argc, arg2, sizeof(arg2));
		bool ok;

		if (used <= 0)
			return used == 0 && c->len < CONN_BUF;
		memmove(c->buf, c->buf + used, c->len - (size_t)used);
		c->len -= (size_t)used;
		pthread_mutex_lock(&f->mu);
		if (!strcasecmp(name, "SCRIPT"))
			out = f->sha_reply;
		else if (!strcasecmp(name, "PING"))
			out = "+PONG\r\n";
		else if (!strcasecmp(name, "AUTH") || !strcasecmp(name, "SELECT"))
			out = "+OK\r\n";
		else
			out = f->reply;
		snprintf(f->last_cmd, sizeof(f->last_cmd), "%s", name);
		snprintf(f->last_arg2, sizeof(f->last_arg2), "%s", arg2);
		f->last_argc = argc;
		f->answered++;
		ok = write(c->fd, out, strlen(out)) == (ssize_t)strlen(out);
		pthread_mutex_unlock(&f->mu);
		if (!ok)
			return false;
	}
}

static void *run(void *arg)
{
	struct ktest_fakeredis *f = arg;
	struct conn *cs = calloc(KTEST_FAKEREDIS_CONNS, sizeof(*cs));
	struct pollfd pfd[KTEST_FAKEREDIS_CONNS + 1];

	if (!cs)
		return NULL;
	for (int i = 0; i < KTEST_FAKEREDIS_CONNS; i++)
		cs[i].fd = -1;
	while (!stopping(f)) {
		pfd[0] = (struct pollfd){ .fd = f->lfd, .events = POLLIN };
		for (int i = 0; i < KTEST_FAKEREDIS_CONNS; i++)
			pfd[i + 1] = (struct pollfd){ .fd = cs[i].fd, .events = POLLIN };
		if (poll(pfd, KTEST_FAKEREDIS_CONNS + 1, 100) <= 0)
			continue;
		if (pfd[0].revents & POLLIN) {
			int c = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC), i;

			for (i = 0; c >= 0 && i < KTEST_FAKEREDIS_CONNS && cs[i].fd >= 0; i++)
				;
			if (c >= 0 && i == KTEST_FAKEREDIS_CONNS)
				close(c); /* full: as a server at maxclients */
			else if (c >= 0)
				cs[i] = (struct conn){ .fd = c, .len = 0 };
		}
		for (int i = 0; i < KTEST_FAKEREDIS_CONNS; i++) {
			struct conn *c = &cs[i];
			ssize_t n;

			if (c->fd < 0 || !(pfd[i + 1].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			n = read(c->fd, c->buf + c->len, CONN_BUF - c->len);
			if (n <= 0 || (c->len += (size_t)n, !serve(f, c))) {
				close(c->fd);
				c->fd = -1;
			}
		}
	}
	for (int i = 0; i < KTEST_FAKEREDIS_CONNS; i++)
		if (cs[i].fd >= 0)
			close(cs[i].fd);
	free(cs);
	return NULL;
}

int ktest_fakeredis_start(struct ktest_fakeredis *f)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);

	memset(f, 0, sizeof(*f));
	pthread_mutex_init(&f->mu, NULL);
	f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (f->lfd < 0 || bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    getsockname(f->lfd, (struct sockaddr *)&sa, &sl) || listen(f->lfd, 8)) {
		fprintf(stderr, "fakeredis: cannot listen: %s\n", strerror(errno));
		if (f->lfd >= 0)
			close(f->lfd);
		f->lfd = -1;
		return -1;
	}
	f->port = ntohs(sa.sin_port);
	snprintf(f->sha_reply, sizeof(f->sha_reply), "$40\r\n%s\r\n",
		 "0123456789abcdef0123456789abcdef01234567");
	snprintf(f->reply, sizeof(f->reply), "-ERR unset\r\n");
	if (pthread_create(&f->th, NULL, run, f)) {
		close(f->lfd);
		f->lfd = -1;
		return -1;
	}
	f->running = true;
	return 0;
}

void ktest_fakeredis_stop(struct ktest_fakeredis *f)
{
	if (!f->running)
		return;
	pthread_mutex_lock(&f->mu);
	f->stop = true;
	pthread_mutex_unlock(&f->mu);
	pthread_join(f->th, NULL);
	close(f->lfd);
	f->lfd = -1;
	f->running = false;
}

void ktest_fakeredis_set(struct ktest_fakeredis *f, const char *reply)
{
	pthread_mutex_lock(&f->mu);
	snprintf(f->reply, sizeof(f->reply), "%s", reply);
	pthread_mutex_unlock(&f->mu);
}

void ktest_fakeredis_set_sha(struct ktest_fakeredis *f, const char *reply)
{
	pthread_mutex_lock(&f->mu);
	snprintf(f->sha_reply, sizeof(f->sha_reply), "%s", reply);
	pthread_mutex_unlock(&f->mu);
}

void ktest_fakeredis_last(struct ktest_fakeredis *f, char *out, size_t len)
{
	pthread_mutex_lock(&f->mu);
	snprintf(out, len, "%s %s %d", f->last_cmd, f->last_arg2, f->last_argc);
	pthread_mutex_unlock(&f->mu);
}
