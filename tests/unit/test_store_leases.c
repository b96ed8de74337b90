// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* redisStore.leases: node against a real redis-server (store.h "Node
 * leases"): a node renews one lease and sends a limit only when it or its
 * pool changed; a join, a graceful leave and a death still reach the
 * quiet nodes through the change feed within a heartbeat or two; a node
 * whose own lease lapsed sends everything again; a node with member leases
 * in the same pool never lapses a quiet node's members; the keys are read
 * back from Redis. */
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

#define PREFIX "ktlease"
#define LIVE KT_POOL_REPORT_LIVE
#define STALE 400 /* ms: the lease */

static char err[KT_ERR_LEN];

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

/* node s heartbeats limit with its one member id */
static struct kt_pool_answer beat(struct kt_store *s, const char *limit, const char *id)
{
	struct kt_pool_member m = { id, LIVE };
	struct kt_pool_req q = { .limit = limit, .members = &m, .n_members = 1, .stale_ms = STALE,
				 .save_ramp = -1 };
	struct kt_pool_answer a = { -1, -1, -1 };

	ASSERT_OK(kt_store_heartbeat_many(s, &q, 1, &a, err, sizeof(err)));
	return a;
}

/* beat, but a node whose connection was killed reconnects first (a failed
 * call backs off: up to about a second) */
static struct kt_pool_answer beat_again(struct kt_store *s, const char *limit, const char *id)
{
	struct kt_pool_member m = { id, LIVE };
	struct kt_pool_req q = { .limit = limit, .members = &m, .n_members = 1, .stale_ms = STALE,
				 .save_ramp = -1 };
	struct kt_pool_answer a = { .status = -1 };

	for (int i = 0; i < 40 && kt_store_heartbeat_many(s, &q, 1, &a, err, sizeof(err)); i++)
		rp_sleep_ms(50);
	assert_int_equal(a.status, 0);
	return a;
}

/* The feed is read from the millisecond of the last read on, that one
 * included: a change made in that very millisecond is named again by the
 * next read (the limit is sent once more, harmless), and on a fast machine
 * a whole agreement fits in one millisecond. Before counting quiet
 * heartbeats the tests let node s read the feed once more after that
 * millisecond: its next read starts past every change made so far. */
static void settle(struct kt_store *s, const char *limit, const char *id)
{
	struct kt_pool_member m = { id, LIVE };
	struct kt_pool_req q = { .limit = limit, .members = &m, .n_members = 1, .stale_ms = STALE,
				 .save_ramp = -1 };
	struct kt_pool_answer a = { -1, -1, -1 };

	rp_sleep_ms(3);
	ASSERT_OK(kt_store_heartbeat_many(s, &q, 1, &a, err, sizeof(err)));
}

static struct kt_store_stats stats(struct kt_store *s)
{
	struct kt_store_stats st;

	kt_store_get_stats(s, &st);
	return st;
}

/* a sorted set's score, a hash field, read back: -1 when not there */
static long long zscore(const char *key, const char *member)
{
	return rp_command_num(&kfx_master, -1, "ZSCORE %s %s", key, member);
}

static long long hget(const char *key, const char *field)
{
	return rp_command_num(&kfx_master, -1, "HGET %s %s", key, field);
}

/* nodes a and b heartbeat limit (members A:1, B:1) until they agree, then
 * a's next heartbeat is quiet: it sends node.lua alone */
static void agree_then_quiet(struct kt_store *na, struct kt_store *nb, const char *limit)
{
	struct kt_store_stats s0;
	struct kt_pool_answer a;

	for (int i = 0; i < 3; i++) {
		beat(na, limit, "A:1");
		beat(nb, limit, "B:1");
	}
	a = beat(na, limit, "A:1");
	ASSERT_ANS(a, 1, 2, 2);
	settle(na, limit, "A:1");
	s0 = stats(na);
	a = beat(na, limit, "A:1");
	ASSERT_ANS(a, 1, 2, 2);
	struct kt_store_stats s1 = stats(na);

	if (s1.hb_quiet - s0.hb_quiet != 1)
		fail_msg("not quiet: feed named %llu, resyncs %llu, full %llu, steady %llu",
			 (unsigned long long)(s1.feed_changes - s0.feed_changes),
			 (unsigned long long)(s1.feed_resyncs - s0.feed_resyncs),
			 (unsigned long long)(s1.hb_full - s0.hb_full),
			 (unsigned long long)(s1.hb_steady - s0.hb_steady));
}

/* Two nodes agree, then go quiet: their heartbeats send node.lua alone. A
 * third joins: the feed names the limit, both send it in a second round
 * trip of the same heartbeat and see the join. */
static void test_quiet_and_join(void **state)
{
	struct kt_store *na = open_node("A", KT_LEASES_NODE), *nb = open_node("B", KT_LEASES_NODE);
	struct kt_store *nc = open_node("C", KT_LEASES_NODE);
	struct kt_store_stats s0, s1;
	struct kt_pool_answer a;

	(void)state;
	for (int i = 0; i < 2; i++) {
		beat(na, "q", "A:1");
		a = beat(nb, "q", "B:1");
	}
	ASSERT_ANS(a, 1, 2, 2);
	a = beat(na, "q", "A:1");
	ASSERT_ANS(a, 1, 2, 2);
	/* the members are stamped ahead of TIME (the horizon), the nodes
	 * hold their leases, the index names their members */
	long long t_ms = zscore(PREFIX ":nodes", "A");
	long long hb = zscore(PREFIX ":pool:{q}:hb", "A:1");

	assert_true(t_ms > 0);
	assert_true(hb > t_ms + (long long)KT_STORE_QUIET_HORIZON_MS - 5000);
	redisReply *r = rp_command(&kfx_master, "HGET " PREFIX ":node:{A}:limits q");

	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_STRING);
	assert_string_equal(r->str, "A:1");
	freeReplyObject(r);

	/* a node's own change comes back to it once through the feed */
	beat(nb, "q", "B:1");
	beat(na, "q", "A:1");
	beat(nb, "q", "B:1");
	settle(na, "q", "A:1");
	s0 = stats(na);
	for (int i = 0; i < 5; i++) {
		a = beat(na, "q", "A:1");
		ASSERT_ANS(a, 1, 2, 2);
		beat(nb, "q", "B:1");
	}
	s1 = stats(na);
	assert_int_equal(s1.hb_quiet - s0.hb_quiet, 5);
	assert_int_equal(s1.hb_scripts - s0.hb_scripts, 0); /* node.lua only */
	assert_int_equal(s1.round_trips - s0.round_trips, 5);

	/* C joins: A and B hear it at their next heartbeat */
	a = beat(nc, "q", "C:1");
	assert_int_equal(a.live, 3);
	s0 = stats(na);
	a = beat(na, "q", "A:1");
	s1 = stats(na);
	ASSERT_ANS(a, 0, 3, 3);
	assert_int_equal(s1.round_trips - s0.round_trips, 2);
	assert_int_equal(s1.hb_quiet - s0.hb_quiet, 0);
	assert_true(s1.feed_changes > s0.feed_changes);
	beat(nb, "q", "B:1");
	beat(nc, "q", "C:1");
	a = beat(na, "q", "A:1");
	ASSERT_ANS(a, 1, 3, 3);
	a = beat(nb, "q", "B:1");
	ASSERT_ANS(a, 1, 3, 3);

	/* C leaves gracefully: the others hear it at once */
	const char *ids[1] = { "C:1" };

	ASSERT_OK(kt_store_leave(nc, "q", ids, 1, err, sizeof(err)));
	a = beat(na, "q", "A:1");
	assert_int_equal(a.live, 2);
	a = beat(nb, "q", "B:1");
	assert_int_equal(a.live, 2);
}

/* A node reads the changes of its own limits only (its inbox): the
 * limit's holders are the nodes with members there; a change made by one
 * reaches the others' inboxes and nobody else's. After the last
 * acknowledgement of a join the nodes that hear of the agreement catch up
 * on the steady path, without a full call. More changes a second than
 * the feed may name (KT_STORE_FEED_MAX), all in limits a node does not
 * hold, leave that node quiet: before inboxes, it sent every limit. */
static void test_inbox_and_catch_up(void **state)
{
	struct kt_store *na = open_node("A", KT_LEASES_NODE), *nb = open_node("B", KT_LEASES_NODE);
	/* D joins 1,050 limits in one heartbeat: a timeout they fit in on a
	 * loaded machine (the first, from no latency yet, is 200 ms) */
	struct kt_store *nc = open_node("C", KT_LEASES_NODE), *nd = open_node_timeout("D", KT_LEASES_NODE, 5000);
	struct kt_store_stats s0, s1;
	struct kt_pool_answer a;

	(void)state;
	agree_then_quiet(na, nb, "x");
	beat(nc, "y", "C:1");
	settle(nc, "y", "C:1");
	assert_int_equal(rp_command_int(&kfx_master, -1, "SCARD " PREFIX ":pool:{x}:nodes"), 2);
	assert_int_equal(rp_command_int(&kfx_master, -1, "SISMEMBER " PREFIX ":pool:{x}:nodes A"), 1);
	assert_int_equal(rp_command_int(&kfx_master, -1, "SISMEMBER " PREFIX ":pool:{x}:nodes C"), 0);

	/* D joins x: A's and B's inboxes name it, C's does not */
	a = beat(nd, "x", "D:1");
	ASSERT_ANS(a, 0, 3, 3);
	assert_true(zscore(PREFIX ":node:{A}:feed", "x") > 0);
	assert_true(zscore(PREFIX ":node:{B}:feed", "x") > 0);
	assert_int_equal(zscore(PREFIX ":node:{C}:feed", "x"), -1);
	assert_int_equal(zscore(PREFIX ":node:{D}:feed", "x"), -1); /* its own change */
	s0 = stats(nc);
	beat(nc, "y", "C:1");
	s1 = stats(nc);
	assert_int_equal(s1.hb_quiet - s0.hb_quiet, 1);
	assert_int_equal(s1.feed_changes - s0.feed_changes, 0);

	/* A and B acknowledge on the steady path (their sizes written, read
	 * back): B's makes the agreement, which reaches A and D; they catch
	 * up, none of them with a full call */
	s0 = stats(na);
	a = beat(na, "x", "A:1");
	s1 = stats(na);
	ASSERT_ANS(a, 0, 3, 3);
	assert_int_equal(s1.hb_full - s0.hb_full, 0);
	assert_int_equal(s1.hb_acked - s0.hb_acked, 1);
	assert_int_equal(hget(PREFIX ":pool:{x}:size", "A:1"), 3);
	assert_int_equal(hget(PREFIX ":pool:{x}:counted", "A:1"), 3);
	assert_int_equal(hget(PREFIX ":pool:{x}:hist", "2"), 1);
	s0 = stats(nb);
	a = beat(nb, "x", "B:1");
	s1 = stats(nb);
	ASSERT_ANS(a, 1, 3, 3);
	assert_int_equal(s1.hb_full - s0.hb_full, 0);
	assert_int_equal(s1.hb_acked - s0.hb_acked, 1);
	assert_int_equal(hget(PREFIX ":pool:{x}:hist", "3"), 3);
	assert_int_equal(rp_command_int(&kfx_master, -1, "HEXISTS " PREFIX ":pool:{x}:hist 2"), 0);
	assert_int_equal(rp_command_int(&kfx_master, -1, "ZCARD " PREFIX ":pool:{x}:sizes"), 1);
	s0 = stats(na);
	a = beat(na, "x", "A:1");
	s1 = stats(na);
	ASSERT_ANS(a, 1, 3, 3);
	assert_int_equal(s1.hb_full - s0.hb_full, 0);
	assert_int_equal(s1.hb_caught_up - s0.hb_caught_up, 1);
	s0 = stats(nd);
	a = beat(nd, "x", "D:1");
	s1 = stats(nd);
	ASSERT_ANS(a, 1, 3, 3);
	assert_int_equal(s1.hb_caught_up - s0.hb_caught_up, 1);

	/* D joins more limits in one heartbeat than the feed may name: the
	 * fleet's feed has them all, C (holding none of them) stays quiet */
	enum { MANY = KT_STORE_FEED_MAX + 50 };
	static struct kt_pool_req qs[MANY];
	static struct kt_pool_answer as[MANY];
	static char names[MANY][16];
	struct kt_pool_member m = { "D:1", LIVE };

	for (int i = 0; i < MANY; i++) {
		snprintf(names[i], sizeof(names[i]), "z%d", i);
		qs[i] = (struct kt_pool_req){ .limit = names[i], .members = &m, .n_members = 1,
					      .stale_ms = STALE, .save_ramp = -1 };
	}
	ASSERT_OK(kt_store_heartbeat_many(nd, qs, MANY, as, err, sizeof(err)));
	assert_true(rp_command_int(&kfx_master, -1, "ZCARD " PREFIX ":feed") > KT_STORE_FEED_MAX);
	s0 = stats(nc);
	a = beat(nc, "y", "C:1");
	s1 = stats(nc);
	ASSERT_ANS(a, 1, 1, 1);
	assert_int_equal(s1.feed_resyncs - s0.feed_resyncs, 0);
	assert_int_equal(s1.hb_quiet - s0.hb_quiet, 1);

	/* D leaves x gracefully: the others hear it, D is no holder now */
	const char *ids[1] = { "D:1" };

	ASSERT_OK(kt_store_leave(nd, "x", ids, 1, err, sizeof(err)));
	assert_int_equal(rp_command_int(&kfx_master, -1, "SISMEMBER " PREFIX ":pool:{x}:nodes D"), 0);
	a = beat(na, "x", "A:1");
	assert_int_equal(a.live, 2);
}

/* B dies (stops heartbeating): its lease lapses after STALE; the next
 * node.lua finds it, re-stamps B's member with the lease's time and puts
 * the limit in the feed; A's next heartbeat sends the limit and sees B
 * gone. Then A's own lease lapses (A silent past STALE while C runs): A's
 * next heartbeat sends every limit again. */
static void test_death_and_own_lapse(void **state)
{
	struct kt_store *na = open_node("A", KT_LEASES_NODE), *nb = open_node("B", KT_LEASES_NODE);
	struct kt_store *nc = open_node("C", KT_LEASES_NODE);
	struct kt_store_stats s0, s1;
	struct kt_pool_answer a;
	uint64_t t0, took_ms;

	(void)state;
	agree_then_quiet(na, nb, "d");

	/* B dies now; A heartbeats every 100 ms */
	t0 = ktest_now_ns();
	do {
		rp_sleep_ms(100);
		a = beat(na, "d", "A:1");
		took_ms = (ktest_now_ns() - t0) / 1000000;
	} while (a.live != 1 && took_ms < 5 * STALE);
	assert_int_equal(a.live, 1);
	print_message("B's death seen by A after %llu ms (lease %d ms)\n", (unsigned long long)took_ms, STALE);
	assert_true(took_ms >= STALE - 100);
	assert_true(took_ms <= STALE + 300);
	/* B is out of the leases, its index, its inbox and the holders */
	assert_int_equal(rp_command_int(&kfx_master, -1, "EXISTS " PREFIX ":node:{B}:limits"), 0);
	assert_int_equal(rp_command_int(&kfx_master, -1, "EXISTS " PREFIX ":node:{B}:feed"), 0);
	assert_int_equal(rp_command_int(&kfx_master, -1, "SISMEMBER " PREFIX ":pool:{d}:nodes B"), 0);
	assert_int_equal(rp_command_int(&kfx_master, -1, "SISMEMBER " PREFIX ":pool:{d}:nodes A"), 1);
	assert_int_equal(zscore(PREFIX ":nodes", "B"), -1);
	a = beat(na, "d", "A:1");
	ASSERT_ANS(a, 1, 1, 1);

	/* A falls silent past its lease while C heartbeats (and finds it) */
	beat(nc, "other", "C:1");
	rp_sleep_ms(STALE + 150);
	beat(nc, "other", "C:1");
	assert_int_equal(rp_command_int(&kfx_master, -1, "EXISTS " PREFIX ":node:{A}:limits"), 0);
	s0 = stats(na);
	a = beat(na, "d", "A:1");
	s1 = stats(na);
	ASSERT_ANS(a, 1, 1, 1);
	assert_int_equal(s1.feed_resyncs - s0.feed_resyncs, 1);
	assert_int_equal(s1.hb_quiet - s0.hb_quiet, 0);
	/* and its index is back */
	assert_int_equal(rp_command_int(&kfx_master, -1, "EXISTS " PREFIX ":node:{A}:limits"), 1);
}

/* A death acknowledged: after C dies the first survivor to call lapses
 * it (the full path), the other acknowledges on the steady path (its
 * member's size, bucket and the answer written, read back), and the
 * agreement that makes reaches the first, which catches up: one full call
 * a limit. A and B heartbeat both limits every 50 ms meanwhile, as
 * daemons do; which of them finds the death first is the race's. A
 * counted bucket removed by hand sends an acknowledgement (of a join) to
 * the full path, which rebuilds the counters. */
static void test_death_acknowledged(void **state)
{
	struct kt_store *ns[2] = { open_node("A", KT_LEASES_NODE), open_node("B", KT_LEASES_NODE) };
	struct kt_store *nc = open_node("C", KT_LEASES_NODE), *nd = open_node("D", KT_LEASES_NODE);
	const char *lims[2] = { "k", "h" }, *ids[2] = { "A:1", "B:1" };
	struct kt_pool_member mem[2] = { { "A:1", LIVE }, { "B:1", LIVE } };
	struct kt_pool_req q[2][2];
	struct kt_pool_answer ans[2][2];
	struct kt_store_stats s0[2], s1[2];
	uint64_t full = 0, acked = 0, caught = 0;
	bool done = false;

	(void)state;
	for (int l = 0; l < 2; l++) {
		for (int i = 0; i < 3; i++) {
			beat(ns[0], lims[l], "A:1");
			beat(ns[1], lims[l], "B:1");
			beat(nc, lims[l], "C:1");
		}
		ASSERT_ANS(beat(ns[0], lims[l], "A:1"), 1, 3, 3);
	}
	for (int x = 0; x < 2; x++) {
		for (int l = 0; l < 2; l++)
			q[x][l] = (struct kt_pool_req){ .limit = lims[l], .members = &mem[x], .n_members = 1,
							.stale_ms = STALE, .save_ramp = -1 };
		s0[x] = stats(ns[x]);
	}
	/* C dies */
	for (int t = 0; t < 40 && !done; t++) {
		rp_sleep_ms(50);
		done = true;
		for (int x = 0; x < 2; x++) {
			ASSERT_OK(kt_store_heartbeat_many(ns[x], q[x], 2, ans[x], err, sizeof(err)));
			for (int l = 0; l < 2; l++)
				done &= ans[x][l].agree == 1 && ans[x][l].live == 2;
		}
	}
	assert_true(done);
	for (int x = 0; x < 2; x++) {
		s1[x] = stats(ns[x]);
		full += s1[x].hb_full - s0[x].hb_full;
		acked += s1[x].hb_acked - s0[x].hb_acked;
		caught += s1[x].hb_caught_up - s0[x].hb_caught_up;
		for (int l = 0; l < 2; l++) {
			char key[64];

			ASSERT_ANS(ans[x][l], 1, 2, 2);
			snprintf(key, sizeof(key), PREFIX ":pool:{%s}:size", lims[l]);
			assert_int_equal(hget(key, ids[x]), 2);
			snprintf(key, sizeof(key), PREFIX ":pool:{%s}:counted", lims[l]);
			assert_int_equal(hget(key, ids[x]), 2);
		}
	}
	print_message("C's death: %llu full calls, %llu acknowledged, %llu caught up\n", (unsigned long long)full,
		      (unsigned long long)acked, (unsigned long long)caught);
	assert_int_equal(full, 2);
	assert_int_equal(acked, 2);
	assert_int_equal(caught, 2);
	for (int l = 0; l < 2; l++) {
		char key[64];

		snprintf(key, sizeof(key), PREFIX ":pool:{%s}:hist", lims[l]);
		assert_int_equal(hget(key, "2"), 2);
		assert_int_equal(hget(key, "3"), -1);
	}

	/* D joins h; a hand edit removes A's counted bucket: its
	 * acknowledgement goes to the full path, which rebuilds */
	ASSERT_ANS(beat(nd, "h", "D:1"), 0, 3, 3);
	assert_int_equal(rp_command_int(&kfx_master, -1, "HDEL " PREFIX ":pool:{h}:counted A:1"), 1);
	s0[0] = stats(ns[0]);
	ASSERT_ANS(beat(ns[0], "h", "A:1"), 0, 3, 3);
	s1[0] = stats(ns[0]);
	assert_int_equal(s1[0].hb_acked - s0[0].hb_acked, 0);
	assert_int_equal(s1[0].hb_full - s0[0].hb_full, 1);
	assert_int_equal(hget(PREFIX ":pool:{h}:counted", "A:1"), 3);
	assert_int_equal(hget(PREFIX ":pool:{h}:hist", "3"), 2);
	/* B's, with its bucket, on the steady path makes the agreement */
	s0[1] = stats(ns[1]);
	ASSERT_ANS(beat(ns[1], "h", "B:1"), 1, 3, 3);
	s1[1] = stats(ns[1]);
	assert_int_equal(s1[1].hb_acked - s0[1].hb_acked, 1);
}

/* A death held for hold_ms (its members' fallback reserved): the
 * survivors' answers carry the reserve, and each stays quiet through the
 * hold instead of sending the limit every heartbeat; once the hold is
 * over the first to send it forgets the dead and the other hears of it:
 * the reserve drops for both. */
static void test_reserve_quiet(void **state)
{
	enum { HOLD = 1200 };
	struct kt_store *ns[3] = { open_node("A", KT_LEASES_NODE), open_node("B", KT_LEASES_NODE),
				   open_node("C", KT_LEASES_NODE) };
	struct kt_pool_member mem[3] = { { "A:1", LIVE }, { "B:1", LIVE }, { "C:1", LIVE } };
	struct kt_pool_req q[3];
	struct kt_pool_answer a[3];
	struct kt_store_stats s0[2], s1[2];
	uint64_t t0, t_held = 0, t_gone = 0, sent = 0, quiet = 0;

	(void)state;
	for (int x = 0; x < 3; x++)
		q[x] = (struct kt_pool_req){ .limit = "rq", .members = &mem[x], .n_members = 1, .stale_ms = STALE,
					     .save_ramp = -1, .hold_ms = HOLD, .fallback_rate = 2 };
	for (int i = 0; i < 3; i++)
		for (int x = 0; x < 3; x++)
			ASSERT_OK(kt_store_heartbeat_many(ns[x], &q[x], 1, &a[x], err, sizeof(err)));
	ASSERT_ANS(a[2], 1, 3, 3);
	/* C dies; A and B heartbeat every 50 ms */
	t0 = ktest_now_ns();
	while (!t_gone && ktest_now_ns() - t0 < (STALE + 3 * HOLD) * 1000000ULL) {
		rp_sleep_ms(50);
		for (int x = 0; x < 2; x++)
			ASSERT_OK(kt_store_heartbeat_many(ns[x], &q[x], 1, &a[x], err, sizeof(err)));
		if (!t_held && a[0].agree && a[1].agree && a[0].live == 2 && a[1].live == 2) {
			assert_true(a[0].reserved == 2 && a[1].reserved == 2);
			t_held = ktest_now_ns();
			for (int x = 0; x < 2; x++)
				s0[x] = stats(ns[x]);
		}
		if (t_held && a[0].reserved == 0 && a[1].reserved == 0)
			t_gone = ktest_now_ns();
	}
	assert_true(t_held && t_gone);
	for (int x = 0; x < 2; x++) {
		s1[x] = stats(ns[x]);
		ASSERT_ANS(a[x], 1, 2, 2);
		quiet += s1[x].hb_quiet - s0[x].hb_quiet;
		sent += (s1[x].hb_full - s0[x].hb_full) + (s1[x].hb_steady - s0[x].hb_steady);
	}
	print_message("the reserve held %.0f ms after the survivors agreed (hold %d ms): %llu quiet, %llu sent\n",
		      (double)(t_gone - t_held) / 1e6, HOLD, (unsigned long long)quiet, (unsigned long long)sent);
	assert_true(t_gone - t_held <= 2ULL * HOLD * 1000000ULL);
	/* the hold's end, and its news: every heartbeat was sent before */
	assert_true(quiet >= 4 * sent);
}

/* A node dead with more limits than one node.lua call takes on (its
 * DEAD_CALLS bound: no script holds Redis for long): the first call
 * lapses some of them and leaves the node in the leases with the rest of
 * its index, the next calls finish it, and every limit of the survivor
 * sees the death. */
static void test_death_of_a_big_node(void **state)
{
	/* a lease longer than a heartbeat of BIG limits on a loaded machine */
	enum { BIG = 6000, BIG_STALE = 2000 };
	/* thousands of joins in one heartbeat: a timeout they fit in */
	struct kt_store *na = open_node_timeout("A", KT_LEASES_NODE, 5000);
	struct kt_store *nb = open_node_timeout("B", KT_LEASES_NODE, 5000);
	struct kt_pool_req *qa = calloc(BIG, sizeof(*qa)), *qb = calloc(BIG, sizeof(*qb));
	struct kt_pool_answer *as = calloc(BIG, sizeof(*as));
	char (*names)[16] = calloc(BIG, sizeof(*names));
	struct kt_pool_member ma = { "A:1", LIVE }, mb = { "B:1", LIVE };
	long long left;
	int live1 = 0;

	(void)state;
	assert_true(qa && qb && as && names);
	for (int i = 0; i < BIG; i++) {
		snprintf(names[i], sizeof(names[i]), "big%d", i);
		qa[i] = (struct kt_pool_req){ .limit = names[i], .members = &ma, .n_members = 1,
					      .stale_ms = BIG_STALE, .save_ramp = -1 };
		qb[i] = qa[i];
		qb[i].members = &mb;
	}
	for (int k = 0; k < 3; k++) {
		assert_true(kt_store_heartbeat_many(na, qa, BIG, as, err, sizeof(err)) >= 0);
		assert_true(kt_store_heartbeat_many(nb, qb, BIG, as, err, sizeof(err)) >= 0);
	}
	assert_int_equal(rp_command_int(&kfx_master, -1, "HLEN " PREFIX ":node:{B}:limits"), BIG);
	/* B dies; after its lease, A's next heartbeat finds it */
	rp_sleep_ms(BIG_STALE + 100);
	assert_true(kt_store_heartbeat_many(na, qa, BIG, as, err, sizeof(err)) >= 0);
	left = rp_command_int(&kfx_master, -1, "HLEN " PREFIX ":node:{B}:limits");
	print_message("the first call took on %lld of B's %d limits\n", BIG - left, BIG);
	assert_true(left > 0 && left < BIG);
	assert_true(zscore(PREFIX ":nodes", "B") > 0);
	for (int k = 0; k < 20 && live1 < BIG; k++) {
		int ret = kt_store_heartbeat_many(na, qa, BIG, as, err, sizeof(err));

		assert_true(ret == 0 || ret == KT_STORE_PARTIAL);
		live1 = 0;
		for (int i = 0; i < BIG; i++)
			live1 += !as[i].status && as[i].live == 1;
	}
	assert_int_equal(live1, BIG);
	assert_int_equal(rp_command_int(&kfx_master, -1, "EXISTS " PREFIX ":node:{B}:limits"), 0);
	assert_int_equal(zscore(PREFIX ":nodes", "B"), -1);
	free(qa);
	free(qb);
	free(as);
	free(names);
}

/* A node with member leases (one whose config has not switched yet) in the
 * same pool: its full calls never lapse a quiet node's members (they are
 * stamped ahead), it counts them live, and its changes reach the quiet
 * node through the feed. */
static void test_mixed_with_member_leases(void **state)
{
	struct kt_store *na = open_node("A", KT_LEASES_NODE), *nd = open_node("D", KT_LEASES_MEMBER);
	struct kt_pool_answer a;

	(void)state;
	for (int i = 0; i < 3; i++) {
		beat(na, "m", "A:1");
		beat(nd, "m", "D:1");
	}
	a = beat(na, "m", "A:1");
	ASSERT_ANS(a, 1, 2, 2);
	/* A stays quiet for three leases while D heartbeats */
	for (int i = 0; i < 12; i++) {
		rp_sleep_ms(100);
		a = beat(nd, "m", "D:1");
		ASSERT_ANS(a, 1, 2, 2);
		if (i % 3 == 0) /* within its lease */
			beat(na, "m", "A:1");
	}
	assert_true(stats(na).hb_quiet >= 2);
	/* a node with member leases writes the feed too: its join reaches
	 * the quiet node at its next heartbeat */
	struct kt_store *ne = open_node("E", KT_LEASES_MEMBER);

	a = beat(ne, "m", "E:1");
	assert_int_equal(a.live, 3);
	a = beat(na, "m", "A:1");
	ASSERT_ANS(a, 0, 3, 3);
}

/* Keys of the feed and the leases turned into strings by hand never stop
 * a heartbeat: the key is dropped and made again (the feed at the next
 * change, the leases at once: every node sends every limit, its lease being
 * gone; a node's index at its next full call). */
static void test_hand_edits(void **state)
{
	struct kt_store *na = open_node("A", KT_LEASES_NODE), *nb = open_node("B", KT_LEASES_NODE);
	struct kt_store_stats s0;
	struct kt_pool_answer a;
	static const char *const keys[] = { PREFIX ":feed", PREFIX ":node:{A}:feed", PREFIX ":nodes",
					    PREFIX ":node:{A}:limits" };
	static const char *const types[] = { "zset", "zset", "zset", "hash" };
	enum { INDEX = 3 };

	(void)state;
	agree_then_quiet(na, nb, "h");
	for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
		redisReply *r;

		kt_storefx_do("SET %s garbage", keys[k]);
		s0 = stats(na);
		a = beat(na, "h", "A:1");
		assert_int_equal(a.live, 2);
		a = beat(nb, "h", "B:1");
		assert_int_equal(a.live, 2);
		a = beat(na, "h", "A:1");
		ASSERT_ANS(a, 1, 2, 2);
		/* the index is written again by the node's next full call */
		if (k == INDEX) {
			a = beat(na, "h", "A:2");
			assert_int_equal(a.live, 3);
			a = beat(na, "h", "A:1");
			assert_int_equal(a.live, 3);
		}
		r = rp_command(&kfx_master, "TYPE %s", keys[k]);
		assert_non_null(r);
		/* the feeds are made again by the next change */
		if (strcmp(r->str, "none") || k > 1)
			assert_string_equal(r->str, types[k]);
		freeReplyObject(r);
		print_message("%s: %llu resyncs, %llu quiet\n", keys[k],
			      (unsigned long long)(stats(na).feed_resyncs - s0.feed_resyncs),
			      (unsigned long long)(stats(na).hb_quiet - s0.hb_quiet));
	}

	/* an answer the full path could not have written, met by a node
	 * catching up: the full path runs and writes the true one */
	a = beat(nb, "h", "B:2");
	assert_int_equal(a.live, 4);
	kt_storefx_do("HSET " PREFIX ":pool:{h}:meta ans %s", "garbage");
	s0 = stats(na);
	a = beat(na, "h", "A:1");
	ASSERT_ANS(a, 0, 4, 4);
	assert_int_equal(stats(na).hb_full - s0.hb_full, 1);
	assert_int_equal(stats(na).hb_caught_up - s0.hb_caught_up, 0);

	/* the holders made a string: the next change drops it (nobody hears
	 * of that change: a quiet node learns of it at its quiet time), and
	 * the node making it is a holder again */
	struct kt_store *nc = open_node("C", KT_LEASES_NODE);

	kt_storefx_do("SET " PREFIX ":pool:{h}:nodes garbage");
	a = beat(nc, "h", "C:1");
	assert_int_equal(a.live, 5);
	assert_int_equal(rp_command_int(&kfx_master, -1, "SISMEMBER " PREFIX ":pool:{h}:nodes C"), 1);
}

/* SCRIPT LOAD calls the server counted (INFO commandstats) */
static long long script_loads(void)
{
	char v[256];

	if (rp_info_field(&kfx_master, "commandstats", "cmdstat_script|load", v, sizeof(v)))
		return 0;
	assert_memory_equal(v, "calls=", 6);
	return atoll(v + 6);
}

/* A connection lost to the same server (killed here; a timeout closes it
 * too) loses nothing: the node reconnects without loading its scripts
 * again, reads the feed on from where it was, and sends only the limits
 * of the failed call (their answers checked by the steady path), then is
 * quiet again. The server's data lost (FLUSHALL): the lease is gone, every
 * node sends everything and the pool is whole again at once. Another
 * server (a restart: a new run_id; a failover looks the same) may have
 * lost the last changes: every limit is sent once, the scripts loaded. */
static void test_store_reached_anew(void **state)
{
	struct kt_store *na = open_node("A", KT_LEASES_NODE), *nb = open_node("B", KT_LEASES_NODE);
	struct kt_store_stats s0, s1;
	struct kt_pool_answer a;
	long long loads;

	(void)state;
	agree_then_quiet(na, nb, "r");

	kt_storefx_do("CLIENT KILL TYPE normal");
	s0 = stats(na);
	loads = script_loads();
	/* the first call finds the connection dead (an error), the next
	 * connects again */
	a = beat_again(na, "r", "A:1");
	s1 = stats(na);
	assert_true(s1.connects > s0.connects);
	assert_int_equal(a.status, 0);
	ASSERT_ANS(a, 1, 2, 2);
	assert_int_equal(s1.feed_resyncs - s0.feed_resyncs, 0);
	assert_int_equal(s1.hb_full - s0.hb_full, 0);
	assert_int_equal(s1.hb_steady - s0.hb_steady, 1);
	assert_int_equal(script_loads(), loads);
	settle(na, "r", "A:1");
	s0 = stats(na);
	a = beat(na, "r", "A:1");
	ASSERT_ANS(a, 1, 2, 2);
	assert_int_equal(stats(na).hb_quiet - s0.hb_quiet, 1);

	kt_storefx_do("FLUSHALL");
	s0 = stats(na);
	a = beat(na, "r", "A:1");
	s1 = stats(na);
	assert_int_equal(s1.feed_resyncs - s0.feed_resyncs, 1);
	assert_int_equal(a.live, 1); /* B not back yet */
	a = beat_again(nb, "r", "B:1");
	assert_int_equal(a.live, 2);
	beat(na, "r", "A:1");
	a = beat(nb, "r", "B:1");
	ASSERT_ANS(a, 1, 2, 2);
	a = beat(na, "r", "A:1");
	ASSERT_ANS(a, 1, 2, 2);

	assert_int_equal(rp_restart(&kfx_master), 0);
	s0 = stats(na);
	a = beat_again(na, "r", "A:1");
	s1 = stats(na);
	assert_int_equal(s1.feed_resyncs - s0.feed_resyncs, 1);
	assert_int_equal(a.live, 1);
	assert_true(script_loads() >= 1);
	a = beat_again(nb, "r", "B:1");
	assert_int_equal(a.live, 2);
}

/* Bad input changes nothing: a node name with a space, leases: node in
 * cluster mode, a heartbeat before the name is set. */
static void test_refused(void **state)
{
	struct kt_store_cfg c;
	struct kt_store *s;
	struct kt_pool_member m = { "X:1", LIVE };
	struct kt_pool_req q = { .limit = "x", .members = &m, .n_members = 1, .stale_ms = STALE, .save_ramp = -1 };
	struct kt_pool_answer a;

	(void)state;
	kt_storefx_cfg_single(&c, kfx_master.port, PREFIX);
	c.leases = KT_LEASES_NODE;
	ASSERT_OK(kt_store_open(&s, &c, err, sizeof(err)));
	kt_storefx_track(s);
	assert_int_equal(kt_store_heartbeat_many(s, &q, 1, &a, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "leases: node needs this node's name"));
	assert_int_equal(kt_store_set_node(s, "a b"), -EINVAL);
	assert_int_equal(kt_store_set_node(s, ""), -EINVAL);
	assert_int_equal(rp_command_int(&kfx_master, -1, "EXISTS " PREFIX ":nodes"), 0);
	c.redis_mode = KT_REDIS_CLUSTER;
	c.endpoint_host[0] = (char *)"127.0.0.1";
	c.endpoint_port[0] = kfx_master.port;
	c.n_endpoints = 1;
	assert_int_equal(kt_store_open(&s, &c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "leases: node is not available with mode: cluster"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_quiet_and_join, kt_storefx_flush_teardown),
		cmocka_unit_test_teardown(test_inbox_and_catch_up, kt_storefx_flush_teardown),
		cmocka_unit_test_teardown(test_death_and_own_lapse, kt_storefx_flush_teardown),
		cmocka_unit_test_teardown(test_death_acknowledged, kt_storefx_flush_teardown),
		cmocka_unit_test_teardown(test_reserve_quiet, kt_storefx_flush_teardown),
		cmocka_unit_test_teardown(test_death_of_a_big_node, kt_storefx_flush_teardown),
		cmocka_unit_test_teardown(test_mixed_with_member_leases, kt_storefx_flush_teardown),
		cmocka_unit_test_teardown(test_hand_edits, kt_storefx_flush_teardown),
		cmocka_unit_test_teardown(test_store_reached_anew, kt_storefx_flush_teardown),
		cmocka_unit_test_teardown(test_refused, kt_storefx_flush_teardown),
	};

	return cmocka_run_group_tests(tests, kt_storefx_group_setup, kt_storefx_group_teardown);
}
