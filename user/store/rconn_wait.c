/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* A non-blocking Redis connection used blocking: a poll loop over
 * kt_rconn_handle until a deadline (rconn.h). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include "kthrottle.h"
#include "store/rconn.h"
#include "store/rconn_int.h"

/* ---- blocking use ---- */

static short to_poll(uint32_t ev)
{
	return (short)(((ev & EPOLLIN) ? POLLIN : 0) | ((ev & EPOLLOUT) ? POLLOUT : 0));
}

static uint32_t from_poll(short rev)
{
	return ((rev & POLLIN) ? EPOLLIN : 0) | ((rev & POLLOUT) ? EPOLLOUT : 0) |
	       ((rev & POLLERR) ? EPOLLERR : 0) | ((rev & POLLHUP) ? EPOLLHUP : 0);
}

/* Drives c with poll() until done(arg), failure, or deadline_ns (own limit,
 * 0: none). Returns 0 (done), the conn's negative errno, -ETIMEDOUT (own
 * deadline; the conn is untouched) or a poll() error. */
static int drive(struct kt_rconn *c, bool (*done)(const struct kt_rconn *, void *), void *arg,
		 uint64_t deadline_ns)
{
	for (;;) {
		struct pollfd pfd;
		uint64_t now, dl;
		int n, timeout = -1;

		if (done(c, arg))
			return 0;
		if (c->st == KT_RCONN_FAILED)
			return c->err_code;
		now = kt_clock_ns();
		if (deadline_ns && now >= deadline_ns) {
			/* The conn's own deadlines (usually the same) say more. */
			kt_rconn_handle(c, 0, now);
			if (done(c, arg))
				return 0;
			return c->st == KT_RCONN_FAILED ? c->err_code : -ETIMEDOUT;
		}
		dl = kt_rconn_deadline(c);
		if (deadline_ns && (!dl || deadline_ns < dl))
			dl = deadline_ns;
		if (dl) {
			/* Round up: waking a little early would only spin. */
			uint64_t ms = dl > now ? (dl - now + 999999) / 1000000 : 0;

			timeout = ms > INT32_MAX ? INT32_MAX : (int)ms;
		}
		pfd = (struct pollfd){ .fd = c->fd, .events = to_poll(kt_rconn_events(c)) };
		n = poll(&pfd, 1, timeout);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		/* revents 0 after a timeout: handle() applies the conn's deadlines. */
		kt_rconn_handle(c, n > 0 ? from_poll(pfd.revents) : 0, kt_clock_ns());
	}
}

static bool is_ready(const struct kt_rconn *c, void *arg)
{
	(void)arg;
	return c->st == KT_RCONN_READY;
}

int kt_rconn_open_wait(struct kt_rconn *c, uint64_t deadline_ns, char *err, size_t errlen)
{
	int ret = drive(c, is_ready, NULL, deadline_ns);

	kt_rconn_set_err(err, errlen, "%s", "");
	if (!ret)
		return 0;
	if (c->st == KT_RCONN_FAILED)
		kt_rconn_set_err(err, errlen, "%s", c->err);
	else if (ret == -ETIMEDOUT)
		kt_rconn_set_err(err, errlen, "%s %s timed out after %llu ms",
			c->st == KT_RCONN_HANDSHAKING ? "TLS handshake with" : "connect to", c->where,
			(unsigned long long)((kt_clock_ns() - c->opened_ns) / 1000000));
	else
		kt_rconn_set_err(err, errlen, "waiting for %s failed: %s", c->where, strerror(-ret));
	return ret;
}

struct slots {
	struct sync_slot *s;
	int n;
};

static bool all_done(const struct kt_rconn *c, void *arg)
{
	const struct slots *sl = arg;

	(void)c;
	for (int i = 0; i < sl->n; i++)
		if (!sl->s[i].done)
			return false;
	return true;
}

int kt_rconn_call_many(struct kt_rconn *c, const struct kt_rconn_cmd *cmds, int n, uint64_t deadline_ns,
		       redisReply **replies, char *err, size_t errlen)
{
	struct slots sl = { .n = 0 };
	int i, ret = 0;

	kt_rconn_set_err(err, errlen, "%s", "");
	if (!c || !cmds || !replies || n < 1) {
		kt_rconn_set_err(err, errlen, "redis call: no commands");
		return -EINVAL;
	}
	for (i = 0; i < n; i++)
		replies[i] = NULL;
	if (c->closing || c->st == KT_RCONN_FAILED) {
		kt_rconn_set_err(err, errlen, "%s", c->st == KT_RCONN_FAILED ? c->err : "closed");
		return c->err_code ? c->err_code : -ENOTCONN;
	}
	sl.s = calloc((size_t)n, sizeof(*sl.s));
	if (!sl.s) {
		kt_rconn_set_err(err, errlen, "redis call to %s: out of memory", c->where);
		return -ENOMEM;
	}
	for (i = 0; i < n && !ret; i++) {
		ret = kt_rconn_command_argv(c, cmds[i].argc, cmds[i].argv, cmds[i].argvlen, kt_rconn_sync_cb,
					    &sl.s[i], deadline_ns);
		if (!ret)
			sl.n = i + 1;
	}
	if (!ret)
		ret = drive(c, all_done, &sl, deadline_ns);
	/* A slot is also done when the conn failed under it: no reply then. */
	for (i = 0; !ret && i < sl.n; i++)
		if (!sl.s[i].reply)
			ret = c->err_code ? c->err_code : -EIO;
	/* The slots live on this call: nothing may still point to them. The
	 * conn cannot skip a reply, so a half-answered pipeline ends it. */
	if (ret && !all_done(c, &sl))
		kt_rconn_fail(c, ret, "redis call to %s failed: %s", c->where,
		     ret == -ETIMEDOUT ? "no reply in time" : strerror(-ret));
	if (ret) {
		for (i = 0; i < sl.n; i++)
			if (sl.s[i].reply)
				freeReplyObject(sl.s[i].reply);
		if (c->st == KT_RCONN_FAILED) {
			kt_rconn_set_err(err, errlen, "%s", c->err);
			ret = c->err_code;
		} else {
			kt_rconn_set_err(err, errlen, "redis call to %s: %s", c->where, strerror(-ret));
		}
	} else {
		for (i = 0; i < n; i++)
			replies[i] = sl.s[i].reply;
	}
	free(sl.s);
	return ret;
}

redisReply *kt_rconn_call(struct kt_rconn *c, int argc, const char **argv, const size_t *argvlen,
			  uint64_t deadline_ns, char *err, size_t errlen)
{
	struct kt_rconn_cmd cmd = { .argc = argc, .argv = argv, .argvlen = argvlen };
	redisReply *r = NULL;

	return kt_rconn_call_many(c, &cmd, 1, deadline_ns, &r, err, errlen) ? NULL : r;
}
