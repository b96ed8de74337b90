// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The store's worker queue handed to a new owner (kt_storeq_rebind, what a
 * reload does with a store the new pool keeps): refused while a job runs,
 * a finished job nobody took is freed, and the next job's completion wakes
 * the new owner's eventfd, not the old one's. No Redis: the jobs here never
 * touch the store. */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <cmocka.h>

#include "kt_storefx.h"
#include "store/storeq.h"

static int freed, ran;

static void slow_job(struct kt_store *st, void *job)
{
	(void)st;
	(void)job;
	usleep(100 * 1000);
	ran++;
}

static void free_job(void *job)
{
	(void)job;
	freed++;
}

/* Whether fd becomes readable within ms; drains it. */
static bool woken(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	uint64_t v;

	if (poll(&p, 1, ms) != 1)
		return false;
	return read(fd, &v, sizeof(v)) == (ssize_t)sizeof(v);
}

static void test_rebind(void **state)
{
	struct kt_store_cfg c;
	struct kt_store *st;
	struct kt_storeq *q;
	char err[KT_ERR_LEN];
	int old_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), new_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	int job = 0;

	(void)state;
	assert_true(old_fd >= 0 && new_fd >= 0);
	kt_storefx_cfg_single(&c, 1, "ktq"); /* never dialled */
	assert_int_equal(kt_store_open(&st, &c, err, sizeof(err)), 0);
	assert_int_equal(kt_storeq_open(&q, st, old_fd, err, sizeof(err)), 0);

	/* a job running: the queue stays with its owner */
	assert_int_equal(kt_storeq_post(q, slow_job, &job, free_job), 0);
	assert_int_equal(kt_storeq_rebind(q, new_fd), -EBUSY);
	assert_true(woken(old_fd, 2000));
	/* finished, not taken: handed over, the job freed (its answer was
	 * the old owner's) */
	assert_int_equal(kt_storeq_rebind(q, new_fd), 0);
	assert_int_equal(freed, 1);
	assert_null(kt_storeq_take(q));
	assert_false(kt_storeq_busy(q));
	/* the next job wakes the new owner only */
	assert_int_equal(kt_storeq_post(q, slow_job, &job, free_job), 0);
	assert_true(woken(new_fd, 2000));
	assert_false(woken(old_fd, 50));
	assert_ptr_equal(kt_storeq_take(q), &job);
	assert_int_equal(ran, 2);
	assert_int_equal(freed, 1);
	kt_storeq_close(q);
	close(old_fd);
	close(new_fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rebind),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
