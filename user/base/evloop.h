/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* One callback per fd on an epoll set: a struct kt_watch is registered with
 * its own address as the event's data, and the loop calls w->fn(w, events)
 * for each ready fd. No table, no tags: whoever owns the fd owns its watch
 * (embedded where the fd lives, so it outlives its registration) and reaches
 * its own state through ctx, or through the enclosing struct
 * (kt_container_of) when one ctx serves many watches.
 *
 * Every call returns 0 or -errno and leaves the watch in a known state, so
 * the caller decides what a failure means: a start-up error, or a
 * connection closed at run time. Nothing here logs. */
#ifndef KT_EVLOOP_H
#define KT_EVLOOP_H

#include <stddef.h>
#include <stdint.h>

#define kt_container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

struct kt_watch;
typedef void kt_watch_fn(struct kt_watch *w, uint32_t events);

struct kt_watch {
	int fd;         /* registered in the set; -1: not registered */
	kt_watch_fn *fn;
	void *ctx;
};

/* An unregistered watch that will call fn with ctx. */
void kt_watch_init(struct kt_watch *w, kt_watch_fn *fn, void *ctx);
/* Registers fd for events (EPOLLIN, EPOLLOUT...). The watch must not be
 * registered already (-EBUSY). On failure w->fd stays -1. */
int kt_watch_add(int epfd, struct kt_watch *w, int fd, uint32_t events);
/* Changes what a registered watch waits for (-ENOENT when it is not
 * registered); on failure it stays registered for what it was. */
int kt_watch_mod(int epfd, struct kt_watch *w, uint32_t events);
/* Unregisters the watch, before its fd is closed (a closed fd has already
 * left the set: delete first). Not registered: nothing to do, 0. The watch
 * is unregistered afterwards even when the kernel refused (it is never
 * called again); the error says the set may still hold the fd until it is
 * closed. */
int kt_watch_del(int epfd, struct kt_watch *w);

/* Waits up to timeout_ms (-1: forever) and calls each ready watch, in the
 * kernel's order, with its events. A watch deleted by an earlier callback
 * of the same batch is not called. Returns how many fds were ready (0 on
 * timeout or EINTR) or -errno when epoll_wait fails. */
int kt_evloop_wait(int epfd, int timeout_ms);

#endif
