// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* evloop.c: watches on an epoll set, one callback per fd, errors returned
 * and the watch left in a known state; a watch deleted by an earlier
 * callback of the same batch is not called. Pipes stand in for the fds. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <cmocka.h>

#include "base/evloop.h"

struct counted {
	struct kt_watch w;
	int calls;
	uint32_t events;
	int epfd;
	struct counted *victim; /* deleted by this one's callback */
};

static void on_ready(struct kt_watch *w, uint32_t events)
{
	struct counted *c = kt_container_of(w, struct counted, w);

	c->calls++;
	c->events = events;
	if (c->victim)
		kt_watch_del(c->epfd, &c->victim->w);
}

static void test_add_mod_del(void **state)
{
	struct counted c = { 0 };
	int epfd = epoll_create1(EPOLL_CLOEXEC), p[2];

	(void)state;
	assert_true(epfd >= 0);
	assert_int_equal(pipe(p), 0);
	kt_watch_init(&c.w, on_ready, NULL);
	assert_int_equal(c.w.fd, -1);
	/* not registered: mod refuses, del has nothing to do */
	assert_int_equal(kt_watch_mod(epfd, &c.w, EPOLLIN), -ENOENT);
	assert_int_equal(kt_watch_del(epfd, &c.w), 0);
	/* a bad fd is the kernel's error, and the watch stays unregistered */
	assert_int_equal(kt_watch_add(epfd, &c.w, -1, EPOLLIN), -EBADF);
	assert_int_equal(kt_watch_add(-1, &c.w, p[0], EPOLLIN), -EBADF);
	assert_int_equal(c.w.fd, -1);
	assert_int_equal(kt_watch_add(epfd, &c.w, p[0], EPOLLIN), 0);
	assert_int_equal(c.w.fd, p[0]);
	assert_int_equal(kt_watch_add(epfd, &c.w, p[0], EPOLLIN), -EBUSY);
	/* nothing ready: a timeout is 0 */
	assert_int_equal(kt_evloop_wait(epfd, 0), 0);
	assert_int_equal(write(p[1], "x", 1), 1);
	assert_int_equal(kt_evloop_wait(epfd, 100), 1);
	assert_int_equal(c.calls, 1);
	assert_true(c.events & EPOLLIN);
	/* the read end never becomes writable: after mod it is not called */
	assert_int_equal(kt_watch_mod(epfd, &c.w, EPOLLOUT), 0);
	assert_int_equal(kt_evloop_wait(epfd, 0), 0);
	assert_int_equal(c.calls, 1);
	assert_int_equal(kt_watch_del(epfd, &c.w), 0);
	assert_int_equal(c.w.fd, -1);
	assert_int_equal(kt_watch_add(epfd, &c.w, p[0], EPOLLIN), 0);
	close(p[0]);
	/* a closed fd has left the set: the kernel refuses the delete, and
	 * the watch is unregistered all the same */
	assert_int_equal(kt_watch_del(epfd, &c.w), -EBADF);
	assert_int_equal(c.w.fd, -1);
	close(p[1]);
	close(epfd);
}

static void test_deleted_in_batch_not_called(void **state)
{
	struct counted a = { 0 }, b = { 0 };
	int epfd = epoll_create1(EPOLL_CLOEXEC), pa[2], pb[2];

	(void)state;
	assert_true(epfd >= 0);
	assert_int_equal(pipe(pa), 0);
	assert_int_equal(pipe(pb), 0);
	kt_watch_init(&a.w, on_ready, NULL);
	kt_watch_init(&b.w, on_ready, NULL);
	a.epfd = b.epfd = epfd;
	/* whichever runs first deletes the other */
	a.victim = &b;
	b.victim = &a;
	assert_int_equal(kt_watch_add(epfd, &a.w, pa[0], EPOLLIN), 0);
	assert_int_equal(kt_watch_add(epfd, &b.w, pb[0], EPOLLIN), 0);
	assert_int_equal(write(pa[1], "x", 1), 1);
	assert_int_equal(write(pb[1], "x", 1), 1);
	assert_int_equal(kt_evloop_wait(epfd, 100), 2);
	assert_int_equal(a.calls + b.calls, 1);
	close(pa[0]);
	close(pa[1]);
	close(pb[0]);
	close(pb[1]);
	close(epfd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_add_mod_del),
		cmocka_unit_test(test_deleted_in_batch_not_called),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
