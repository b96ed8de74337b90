/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The store fixture of the unit tests of the Redis store: the redis-server
 * a group of tests shares, the stores a test opens (closed by its
 * teardown) and the config of a single server. kt_storefx_track asserts
 * with cmocka (this header includes it); the rest is in kt_storefx.c. */
#ifndef KT_STOREFX_H
#define KT_STOREFX_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "redis_proc.h"
#include "store/store.h"

/* The redis-server of a group of tests: kt_storefx_group_setup starts it,
 * kt_storefx_group_teardown stops it (cmocka group fixtures). */
extern struct rp_proc kfx_master;
int kt_storefx_group_setup(void **state);
int kt_storefx_group_teardown(void **state);

/* cmocka: x within tol of want, else fails naming x. */
#define KT_NEAR(x, want, tol)                                                        \
	do {                                                                         \
		double x_ = (x), w_ = (want);                                        \
		if (fabs(x_ - w_) > (tol))                                           \
			fail_msg("%s = %.6g, want %.6g +- %g", #x, x_, w_, (double)(tol)); \
	} while (0)

/* c: a single Redis at 127.0.0.1:port, config line 7, key prefix `prefix`. */
void kt_storefx_cfg_single(struct kt_store_cfg *c, int port, const char *prefix);

/* Keeps s for kt_storefx_close_all; false when it already keeps
 * KT_STOREFX_STORES. */
#define KT_STOREFX_STORES 8
bool kt_storefx_keep(struct kt_store *s);
/* Closes every store kept (a test's teardown). */
void kt_storefx_close_all(void);
/* rp_stop on each of procs[0..n) (the servers a test started). */
void kt_storefx_stop_all(struct rp_proc *procs, size_t n);

/* cmocka: s kept for the teardown, or the test fails. */
static inline struct kt_store *kt_storefx_track(struct kt_store *s)
{
	if (!kt_storefx_keep(s))
		fail_msg("too many stores in one test");
	return s;
}

/* The servers a test starts itself, stopped by kt_storefx_teardown. */
#define KT_STOREFX_PROCS 4
extern struct rp_proc kfx_procs[KT_STOREFX_PROCS];
/* cmocka teardown: kt_storefx_close_all, then kt_storefx_stop_all(kfx_procs). */
int kt_storefx_teardown(void **state);

/* cmocka: a command on kfx_master (hiredis's format) answered, and not
 * with an error; else the test fails naming it. */
void kt_storefx_do(const char *fmt, ...);

/* cmocka teardown: kt_storefx_close_all, then FLUSHALL on kfx_master (the
 * tests of a group share its data otherwise). */
int kt_storefx_flush_teardown(void **state);

/* Limit names lim<k> (k below 1000) whose keys prefix:pool:{name}:hb fall in
 * slots that n different masters of nodes[0..nnodes) own, as the servers say
 * (CLUSTER KEYSLOT, CLUSTER SLOTS): names[i] and slots[i]. Returns how many
 * it found, n when enough (n at most KT_STOREFX_SPREAD). */
#define KT_STOREFX_SPREAD 16
int kt_storefx_spread_limits(const struct rp_proc *nodes, int nnodes, const char *prefix, int n,
			     char names[][32], int *slots);

/* A heartbeat's answer is (agree, size, live). */
#define ASSERT_ANS(a, ag, sz, lv)                                                  \
	do {                                                                       \
		assert_int_equal((a).agree, (ag));                                 \
		assert_int_equal((a).size, (sz));                                  \
		assert_int_equal((a).live, (lv));                                  \
	} while (0)

#endif
