/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#include <errno.h>
#include <sys/epoll.h>
#include "base/evloop.h"

/* ready fds taken per epoll_wait; the rest wait for the next call */
#define KT_EVLOOP_BATCH 8

void kt_watch_init(struct kt_watch *w, kt_watch_fn *fn, void *ctx)
{
	w->fd = -1;
	w->fn = fn;
	w->ctx = ctx;
}

int kt_watch_add(int epfd, struct kt_watch *w, int fd, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = w };

	if (w->fd >= 0)
		return -EBUSY;
	if (fd < 0)
		return -EBADF;
	if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
		return -errno;
	w->fd = fd;
	return 0;
}

int kt_watch_mod(int epfd, struct kt_watch *w, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = w };

	if (w->fd < 0)
		return -ENOENT;
	if (epoll_ctl(epfd, EPOLL_CTL_MOD, w->fd, &ev) < 0)
		return -errno;
	return 0;
}

int kt_watch_del(int epfd, struct kt_watch *w)
{
	int fd = w->fd;

	if (fd < 0)
		return 0;
	w->fd = -1;
	if (epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL) < 0)
		return -errno;
	return 0;
}

int kt_evloop_wait(int epfd, int timeout_ms)
{
	struct epoll_event evs[KT_EVLOOP_BATCH];
	int n = epoll_wait(epfd, evs, KT_EVLOOP_BATCH, timeout_ms);

	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	for (int i = 0; i < n; i++) {
		struct kt_watch *w = evs[i].data.ptr;

		if (w->fd >= 0)
			w->fn(w, evs[i].events);
	}
	return n;
}
