// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The join budget (store.h "The start herd") against a real redis-server:
 * a node alone joins all its new limits at once; after a first heartbeat
 * that timed out it sends half of them and defers the rest
 * (KT_STORE_DEFERRED: nothing sent, no key made, read back from Redis),
 * and they all join within a few heartbeats, with both lease modes; a
 * slow round trip halves the budget; limits that failed after joining stay
 * joined; a queueing Redis halves the news a quiet node acknowledges; a
 * node whose lease lapsed joins again within its budget. */
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
#define N_LIMITS 1500 /* 2 units each: 3000 */
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
	/* doubled when quick and some were left; else half what was sent
	 * when slow; else as it was */
	unsigned half = (units < s0.join_budget ? units : s0.join_budget) / 2;

	if (half < KT_STORE_JOIN_MIN_UNITS)
		half = KT_STORE_JOIN_MIN_UNITS;
	if (units)
		assert_true(s1.join_budget == (nd ? s0.join_budget * 2 : s0.join_budget) || s1.join_budget == half);
	print_message("heartbeat: %u units joined, %d deferred, budget %u -> %u\n", units, nd, s0.join_budget,
		      s1.join_budget);
	return nd;
}

/* A node alone with N_LIMITS new limits joins them all in its first
 * heartbeat: a start Redis takes costs nothing. */
static void test_first_heartbeat_unbounded(void **state)
{
	struct kt_store *s = open_node("A", KT_LEASES_MEMBER);
	static bool joined[N_LIMITS];

	(void)state;
	memset(joined, 0, sizeof(joined));
	make_reqs("u");
	assert_int_equal(stats(s).join_budget, KT_STORE_JOIN_FIRST_UNITS);
	assert_int_equal(beat_all(s, joined), 0);
	assert_int_equal(pool_exists(names[N_LIMITS - 1]), 1);
}

/* The herd in small: a first heartbeat that times out (Redis paused past
 * a fixed 300 ms timeout) joins nothing and halves the budget to half of
 * what it sent; the next sends that much, defers the rest (no key made,
 * read back), and they all join within MAX_BEATS; then nothing is
 * deferred, and with node leases the node is quiet. */
static void herd(enum kt_store_leases leases)
{
	/* a timeout the pause outlasts, and the joins after it never */
	struct kt_store *s = open_node_timeout("A", leases, 300);
	static bool joined[N_LIMITS];
	int beats = 0, nd, ret = 0;
	const unsigned half = N_LIMITS * 2 / 2;

	memset(joined, 0, sizeof(joined));
	make_reqs(leases == KT_LEASES_NODE ? "n" : "m");
	ASSERT_OK(kt_store_ping(s, err, sizeof(err)));
	kt_storefx_do("CLIENT PAUSE 800 ALL");
	ret = kt_store_heartbeat_many(s, reqs, N_LIMITS, ans, err, sizeof(err));
	assert_true(ret < 0);
	assert_int_equal(stats(s).join_budget, half);
	/* the pause over, and the back-off after the failure (at most 100 ms) */
	rp_sleep_ms(700);
	nd = beat_all(s, joined);
	assert_int_equal(nd, N_LIMITS - half / 2);
	assert_int_equal(pool_exists(names[half / 2 - 1]), 1);
	assert_int_equal(pool_exists(names[half / 2]), 0);
	assert_int_equal(pool_exists(names[N_LIMITS - 1]), 0);
	while (nd && ++beats < MAX_BEATS)
		nd = beat_all(s, joined);
	assert_int_equal(nd, 0);
	assert_int_equal(pool_exists(names[N_LIMITS - 1]), 1);
	print_message("%s leases: %d limits joined in %d heartbeats after the failed one\n",
		      leases == KT_LEASES_NODE ? "node" : "member", N_LIMITS, beats + 1);
	/* joined: the next heartbeat is whole (with node leases, quiet) */
	struct kt_store_stats s0 = stats(s);

	assert_int_equal(beat_all(s, joined), 0);
	if (leases == KT_LEASES_NODE)
		assert_true(stats(s).hb_quiet - s0.hb_quiet >= N_LIMITS - 1);
	else
		assert_int_equal(stats(s).hb_steady - s0.hb_steady, N_LIMITS);
}

static void test_herd_member_leases(void **state)
{
	(void)state;
	herd(KT_LEASES_MEMBER);
}

static void test_herd_node_leases(void **state)
{
	(void)state;
	herd(KT_LEASES_NODE);
}

/* Redis paused past KT_STORE_JOIN_SLOW_MS (not past the timeout) during
 * a heartbeat with new limits: all are answered, and the budget is half
 * of what was sent; the next new limits go under it. */
static void test_slow_store_halves(void **state)
{
	/* a timeout far longer than the pause, which is far longer than
	 * KT_STORE_JOIN_SLOW_MS */
	struct kt_store *s = open_node_timeout("A", KT_LEASES_MEMBER, 5000);
	static bool joined[N_LIMITS];

	(void)state;
	memset(joined, 0, sizeof(joined));
	make_reqs("s");
	for (int i = N_LIMITS / 2; i < N_LIMITS; i++)
		joined[i] = true; /* not sent in the first heartbeat */
	ASSERT_OK(kt_store_ping(s, err, sizeof(err)));
	kt_storefx_do("CLIENT PAUSE 300 ALL");
	ASSERT_OK(kt_store_heartbeat_many(s, reqs, N_LIMITS / 2, ans, err, sizeof(err)));
	assert_int_equal(stats(s).join_budget, N_LIMITS / 2);
	for (int i = 0; i < N_LIMITS; i++)
		joined[i] = i < N_LIMITS / 2;
	/* the other half, new: a quarter of the limits in the budget */
	assert_int_equal(beat_all(s, joined), N_LIMITS / 2 - N_LIMITS / 4);
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
	kt_storefx_do("CLIENT KILL TYPE normal");
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

/* The news budget (store.h): node A quiet on N_LIMITS limits, B joins them
 * all (more than A's inbox may name: every limit is news, not "send every
 * limit"), and A's next heartbeat finds Redis queueing (paused past
 * KT_STORE_JOIN_SLOW_MS, not past the timeout): it acknowledges half the
 * news (the budget: half of what there was) and answers the rest their last
 * answer, its size in Redis left as it was (read back); the next
 * heartbeats send the rest, and all agree. */
static void test_news_budget(void **state)
{
	struct kt_store *na = open_node_timeout("A", KT_LEASES_NODE, 5000);
	struct kt_store *nb = open_node_timeout("B", KT_LEASES_NODE, 5000);
	static struct kt_pool_member bmem[N_LIMITS];
	static struct kt_pool_req breqs[N_LIMITS];
	static char bids[N_LIMITS][32];
	static bool joined[N_LIMITS];
	struct kt_store_stats s0, s1;
	int n_new = 0, beats = 0, nd = 1;

	(void)state;
	memset(joined, 0, sizeof(joined));
	make_reqs("w");
	while (nd && beats++ < MAX_BEATS)
		nd = beat_all(na, joined);
	assert_int_equal(nd, 0);
	for (int i = 0; i < N_LIMITS; i++) {
		snprintf(bids[i], sizeof(bids[i]), "n2:%d", i);
		bmem[i] = (struct kt_pool_member){ bids[i], LIVE };
		breqs[i] = reqs[i];
		breqs[i].members = &bmem[i];
	}
	for (beats = 0, nd = 1; nd && beats < MAX_BEATS; beats++) {
		int ret = kt_store_heartbeat_many(nb, breqs, N_LIMITS, ans, err, sizeof(err));

		assert_true(ret == 0 || ret == KT_STORE_PARTIAL);
		nd = 0;
		for (int i = 0; i < N_LIMITS; i++)
			nd += ans[i].status == KT_STORE_DEFERRED;
	}
	assert_int_equal(nd, 0);

	kt_storefx_do("CLIENT PAUSE 300 ALL");
	s0 = stats(na);
	ASSERT_OK(kt_store_heartbeat_many(na, reqs, N_LIMITS, ans, err, sizeof(err)));
	s1 = stats(na);
	for (int i = 0; i < N_LIMITS; i++) {
		assert_int_equal(ans[i].status, 0);
		if (ans[i].live == 2) {
			ASSERT_ANS(ans[i], 1, 2, 2);
			n_new++;
		} else {
			ASSERT_ANS(ans[i], 1, 1, 1);
			redisReply *r = rp_command(&kfx_master, "HGET " PREFIX ":pool:{%s}:size %s", names[i], ids[i]);

			assert_non_null(r);
			assert_string_equal(r->str, "1");
			freeReplyObject(r);
		}
	}
	print_message("slow first round trip: %d limits acknowledged, %llu postponed, budget %u\n", n_new,
		      (unsigned long long)(s1.hb_postponed - s0.hb_postponed), s1.news_budget);
	assert_int_equal(n_new, N_LIMITS / 2);
	assert_int_equal(s1.hb_postponed - s0.hb_postponed, N_LIMITS / 2);
	for (beats = 0; n_new < N_LIMITS && beats < MAX_BEATS; beats++) {
		ASSERT_OK(kt_store_heartbeat_many(na, reqs, N_LIMITS, ans, err, sizeof(err)));
		n_new = 0;
		for (int i = 0; i < N_LIMITS; i++)
			n_new += ans[i].live == 2;
	}
	assert_int_equal(n_new, N_LIMITS);
}

/* leases: node. A node whose own lease lapsed (another node's node.lua
 * found it silent and lapsed its members) joins its limits again within
 * its join budget: after a slow first heartbeat the budget is half of
 * what it sent, so the rejoin sends half of the limits (their members
 * live again, read back) and defers the rest (their members still lapsed
 * in Redis), which join at the next heartbeats. Before, every limit went
 * at once, and at fleet size the rejoins of many nodes queued Redis past
 * the leases of the rest. A heartbeat without news brings the news budget
 * down to KT_STORE_NEWS_IDLE_UNITS. */
static void test_lapsed_lease_rejoins(void **state)
{
	enum { STALE = 400 };
	struct kt_store *na = open_node_timeout("A", KT_LEASES_NODE, 5000);
	struct kt_store *nb = open_node_timeout("B", KT_LEASES_NODE, 5000);
	struct kt_pool_member bm = { "B:1", LIVE };
	struct kt_pool_req bq = { .limit = "other", .members = &bm, .n_members = 1, .stale_ms = STALE,
				  .save_ramp = -1 };
	struct kt_pool_answer ba;
	struct kt_store_stats s0, s1;
	int ret, nd = 0, live = 0, beats;
	long long now_ms, lapsed = 0;

	(void)state;
	make_reqs("l");
	for (int i = 0; i < N_LIMITS; i++)
		reqs[i].stale_ms = STALE;
	ASSERT_OK(kt_store_ping(na, err, sizeof(err)));
	kt_storefx_do("CLIENT PAUSE 300 ALL");
	ASSERT_OK(kt_store_heartbeat_many(na, reqs, N_LIMITS, ans, err, sizeof(err)));
	assert_int_equal(stats(na).join_budget, N_LIMITS); /* half of 2 x N_LIMITS units */
	/* quiet: no news, and the news budget as after idle */
	ASSERT_OK(kt_store_heartbeat_many(na, reqs, N_LIMITS, ans, err, sizeof(err)));
	assert_true(stats(na).news_budget <= KT_STORE_NEWS_IDLE_UNITS);

	/* A falls silent past its lease; B's heartbeats find it (a node.lua
	 * call takes on DEAD_CALLS commands of a dead node's limits) */
	rp_sleep_ms(STALE + 150);
	for (beats = 0; beats < 8; beats++) {
		ASSERT_OK(kt_store_heartbeat_many(nb, &bq, 1, &ba, err, sizeof(err)));
		if (!rp_command_int(&kfx_master, -1, "EXISTS " PREFIX ":node:{A}:limits"))
			break;
	}
	assert_int_equal(rp_command_int(&kfx_master, -1, "EXISTS " PREFIX ":node:{A}:limits"), 0);

	s0 = stats(na);
	ret = kt_store_heartbeat_many(na, reqs, N_LIMITS, ans, err, sizeof(err));
	s1 = stats(na);
	assert_int_equal(ret, KT_STORE_PARTIAL);
	assert_int_equal(s1.feed_resyncs - s0.feed_resyncs, 1);
	now_ms = rp_time_ms(&kfx_master);
	assert_true(now_ms > 0);
	for (int i = 0; i < N_LIMITS; i++) {
		long long hb = rp_command_num(&kfx_master, -1, "ZSCORE " PREFIX ":pool:{%s}:hb %s", names[i], ids[i]);

		if (ans[i].status == KT_STORE_DEFERRED) {
			nd++;
			/* not sent: its member is as the death left it */
			lapsed += hb < now_ms - STALE;
		} else {
			assert_int_equal(ans[i].status, 0);
			ASSERT_ANS(ans[i], 1, 1, 1);
			live += hb > now_ms;
		}
	}
	print_message("a lapsed lease: %d limits joined again, %d deferred (%lld still lapsed), budget %u\n",
		      N_LIMITS - nd, nd, lapsed, s0.join_budget);
	assert_int_equal(nd, N_LIMITS / 2);
	assert_int_equal(lapsed, nd);
	assert_int_equal(live, N_LIMITS - nd);
	assert_int_equal(s1.hb_deferred - s0.hb_deferred, nd);
	/* the rest join at the next heartbeats, the lease held meanwhile */
	for (beats = 0; nd && beats < MAX_BEATS; beats++) {
		ret = kt_store_heartbeat_many(na, reqs, N_LIMITS, ans, err, sizeof(err));
		assert_true(ret == 0 || ret == KT_STORE_PARTIAL);
		nd = 0;
		for (int i = 0; i < N_LIMITS; i++) {
			nd += ans[i].status == KT_STORE_DEFERRED;
			if (!ans[i].status)
				ASSERT_ANS(ans[i], 1, 1, 1);
		}
	}
	assert_int_equal(nd, 0);
	assert_int_equal(rp_command_int(&kfx_master, -1, "HLEN " PREFIX ":node:{A}:limits"), N_LIMITS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_first_heartbeat_unbounded, kt_storefx_flush_teardown),
		cmocka_unit_test_teardown(test_herd_member_leases, kt_storefx_flush_teardown),
		cmocka_unit_test_teardown(test_herd_node_leases, kt_storefx_flush_teardown),
		cmocka_unit_test_teardown(test_slow_store_halves, kt_storefx_flush_teardown),
		cmocka_unit_test_teardown(test_failure_keeps_joined, kt_storefx_flush_teardown),
		cmocka_unit_test_teardown(test_news_budget, kt_storefx_flush_teardown),
		cmocka_unit_test_teardown(test_lapsed_lease_rejoins, kt_storefx_flush_teardown),
	};

	return cmocka_run_group_tests(tests, kt_storefx_group_setup, kt_storefx_group_teardown);
}
