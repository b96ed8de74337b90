// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The join budget (store.h "The start herd") against a real redis-server:
 * a node with more new limits than its budget sends the first ones and
 * defers the rest (KT_STORE_DEFERRED: nothing sent, no key made, read back
 * from Redis), they all join within a few heartbeats, with both lease
 * modes; a slow round trip halves the budget; limits that failed after
 * joining stay joined. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "ktest.h"
#include "kt_storefx.h"
#include "redis_proc.h"
#include "store/store.h"

#define PREFIX "ktjoin"
#define LIVE KT_POOL_REPORT_LIVE
#define N_LIMITS 1500 /* 2 units each: 3000, joined in 2 heartbeats at best */
#define MAX_BEATS 16  /* to join them all, however slow the machine */

static char err[KT_ERR_LEN];
static char names[N_LIMITS][32], ids[N_LIMITS][32];
static struct kt_pool_member mem[N_LIMITS];
static struct kt_pool_req reqs[N_LIMITS];
static struct kt_pool_answer ans[N_LIMITS];

#define ASSERT_OK(expr) RP_ASSERT_OK(expr, err)

/* timeout_ms: redisStore.timeout (0: follow the latency) */
static struct kt_store *open_node_timeout(const char *node, enum kt_store_leases leases, unsigned timeout_ms)
{
	struct kt_store_cfg c;
	struct kt_store *s;

	kt_storefx_cfg_single(&c, kfx_master.port, PREFIX);
	c.leases = leases;
	c.timeout_ns = timeout_ms * 1000000ULL;
	ASSERT_OK(kt_store_open(&s, &c, err, sizeof(err)));
	kt_storefx_track(s);
	if (leases == KT_LEASES_NODE)
		assert_int_equal(kt_store_set_node(s, node), 0);
	return s;
}

static struct kt_store *open_node(const char *node, enum kt_store_leases leases)
{
	return open_node_timeout(node, leases, 0);
}

/* N_LIMITS limits "<tag>NNNN", each with one member of this node */
static void make_reqs(const char *tag)
{
	for (int i = 0; i < N_LIMITS; i++) {
		snprintf(names[i], sizeof(names[i]), "%s%04d", tag, i);
		snprintf(ids[i], sizeof(ids[i]), "n1:%d", i);
		mem[i] = (struct kt_pool_member){ ids[i], LIVE };
		reqs[i] = (struct kt_pool_req){ .limit = names[i], .members = &mem[i], .n_members = 1,
						.stale_ms = 3000, .save_ramp = -1 };
	}
}

static struct kt_store_stats stats(struct kt_store *s)
{
	struct kt_store_stats st;

	kt_store_get_stats(s, &st);
	return st;
}

/* 1 when limit's heartbeat zset exists in Redis */
static int pool_exists(const char *limit)
{
	redisReply *r = rp_command(&kfx_master, "EXISTS " PREFIX ":pool:{%s}:hb", limit);
	int v;

	assert_non_null(r);
	v = (int)r->integer;
	freeReplyObject(r);
	return v;
}

/* a command on Redis (a literal) that must not fail */
#define redis_do(cmd) redis_ok(rp_command(&kfx_master, cmd))
static void redis_ok(redisReply *r)
{
	assert_non_null(r);
	if (r->type == REDIS_REPLY_ERROR)
		fail_msg("redis: %s", r->str);
	freeReplyObject(r);
}

/* One heartbeat of all the limits: each is answered (1, 1, 1) or deferred,
 * the answered ones first (the caller's order), at most the budget in force
 * before it (units) among those not joined before (joined[i]); the budget
 * after it is that one halved or doubled. Returns how many were deferred. */
static int beat_all(struct kt_store *s, bool *joined)
{
	struct kt_store_stats s0 = stats(s), s1;
	unsigned units = 0;
	int ret, nd = 0;

	ret = kt_store_heartbeat_many(s, reqs, N_LIMITS, ans, err, sizeof(err));
	s1 = stats(s);
	assert_true(ret == 0 || ret == KT_STORE_PARTIAL);
	for (int i = 0; i < N_LIMITS; i++) {
		if (ans[i].status == KT_STORE_DEFERRED) {
			assert_false(joined[i]);
			nd++;
			continue;
		}
		assert_int_equal(ans[i].status, 0);
		ASSERT_ANS(ans[i], 1, 1, 1);
		/* deferred ones come after every limit sent */
		assert_int_equal(nd, 0);
		if (!joined[i])
			units += 1 + 1;
		joined[i] = true;
	}
	assert_int_equal(ret, nd ? KT_STORE_PARTIAL : 0);
	assert_int_equal(s1.hb_deferred - s0.hb_deferred, nd);
	/* at least one limit, and within the budget */
	assert_true(units <= s0.join_budget || units == 2);
	if (nd)
		assert_true(s1.join_budget == s0.join_budget * 2 ||
			    s1.join_budget == (s0.join_budget / 2 > KT_STORE_JOIN_MIN_UNITS ? s0.join_budget / 2
											      : KT_STORE_JOIN_MIN_UNITS));
	print_message("heartbeat: %u units joined, %d deferred, budget %u -> %u\n", units, nd, s0.join_budget,
		      s1.join_budget);
	return nd;
}

/* a node's first heartbeat of N_LIMITS new limits sends the first budget
 * of them; the rest make no key; all join within MAX_BEATS, and after
 * that nothing is deferred */
static void join_all(enum kt_store_leases leases)
{
	struct kt_store *s = open_node("A", leases);
	static bool joined[N_LIMITS];
	int beats = 1, nd;

	memset(joined, 0, sizeof(joined));
	make_reqs(leases == KT_LEASES_NODE ? "n" : "m");
	assert_int_equal(stats(s).join_budget, KT_STORE_JOIN_FIRST_UNITS);
	nd = beat_all(s, joined);
	assert_int_equal(nd, N_LIMITS - KT_STORE_JOIN_FIRST_UNITS / 2);
	assert_int_equal(pool_exists(names[KT_STORE_JOIN_FIRST_UNITS / 2 - 1]), 1);
	assert_int_equal(pool_exists(names[KT_STORE_JOIN_FIRST_UNITS / 2]), 0);
	assert_int_equal(pool_exists(names[N_LIMITS - 1]), 0);
	while (nd && beats < MAX_BEATS) {
		nd = beat_all(s, joined);
		beats++;
	}
	assert_int_equal(nd, 0);
	assert_int_equal(pool_exists(names[N_LIMITS - 1]), 1);
	print_message("%s leases: %d limits joined in %d heartbeats\n", leases == KT_LEASES_NODE ? "node" : "member",
		      N_LIMITS, beats);
	/* joined: the next heartbeat is whole (with node leases, quiet) */
	struct kt_store_stats s0 = stats(s);

	assert_int_equal(beat_all(s, joined), 0);
	if (leases == KT_LEASES_NODE)
		assert_int_equal(stats(s).hb_quiet - s0.hb_quiet, N_LIMITS);
	else
		assert_int_equal(stats(s).hb_steady - s0.hb_steady, N_LIMITS);
}

static void test_member_leases(void **state)
{
	(void)state;
	join_all(KT_LEASES_MEMBER);
}

static void test_node_leases(void **state)
{
	(void)state;
	join_all(KT_LEASES_NODE);
}

/* Redis paused past KT_STORE_JOIN_SLOW_MS during a heartbeat with new
 * limits: the budget is halved */
static void test_slow_store_halves(void **state)
{
	/* a timeout far longer than the pause, which is far longer than
	 * KT_STORE_JOIN_SLOW_MS */
	struct kt_store *s = open_node_timeout("A", KT_LEASES_MEMBER, 5000);
	static bool joined[N_LIMITS];
	int nd;

	(void)state;
	memset(joined, 0, sizeof(joined));
	make_reqs("s");
	ASSERT_OK(kt_store_ping(s, err, sizeof(err)));
	redis_do("CLIENT PAUSE 300 ALL");
	nd = beat_all(s, joined);
	assert_int_equal(nd, N_LIMITS - KT_STORE_JOIN_FIRST_UNITS / 2);
	assert_int_equal(stats(s).join_budget, KT_STORE_JOIN_FIRST_UNITS / 2);
}

/* The limits fail after they joined (the connection killed: a timeout or
 * a failover looks the same): they stay joined, and the next heartbeat
 * answers them all at once, none deferred. */
static void test_failure_keeps_joined(void **state)
{
	struct kt_store *s = open_node("A", KT_LEASES_MEMBER);
	static bool joined[N_LIMITS];
	struct kt_store_stats s0;
	int nd = 1, beats = 0, ret = -1;

	(void)state;
	memset(joined, 0, sizeof(joined));
	make_reqs("r");
	while (nd && beats++ < MAX_BEATS)
		nd = beat_all(s, joined);
	assert_int_equal(nd, 0);
	redis_do("CLIENT KILL TYPE normal");
	s0 = stats(s);
	/* the call that finds the connection dead fails every limit; a failed
	 * call backs off, so the next ones may fail at once for a while */
	for (int i = 0; i < 40 && ret; i++) {
		ret = kt_store_heartbeat_many(s, reqs, N_LIMITS, ans, err, sizeof(err));
		if (ret)
			rp_sleep_ms(50);
	}
	assert_int_equal(ret, 0);
	assert_int_equal(stats(s).hb_deferred - s0.hb_deferred, 0);
	assert_true(stats(s).failures > s0.failures);
	for (int i = 0; i < N_LIMITS; i++)
		ASSERT_ANS(ans[i], 1, 1, 1);
}

static int teardown(void **state)
{
	(void)state;
	kt_storefx_close_all();
	redisReply *r = rp_command(&kfx_master, "FLUSHALL");

	if (r)
		freeReplyObject(r);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_member_leases, teardown),
		cmocka_unit_test_teardown(test_node_leases, teardown),
		cmocka_unit_test_teardown(test_slow_store_halves, teardown),
		cmocka_unit_test_teardown(test_failure_keeps_joined, teardown),
	};

	return cmocka_run_group_tests(tests, kt_storefx_group_setup, kt_storefx_group_teardown);
}
