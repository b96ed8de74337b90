// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* In-flight limits in the store (heartbeat.lua's slots) against a real
 * redis-server: nodes claim slots, a grant is never more than the other
 * nodes' claims leave, so the claims (read back after every call) never sum
 * past the pool; a node whose grant shrank keeps its claim while it holds
 * more; a joining node gets only what is free, and all converge to fair
 * shares as connections close; a silent node's claim stays through its
 * lapse and hold, then goes; a hand-edited claim blocks rather than frees;
 * bad requests are refused before anything is sent. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "kt_storefx.h"
#include "redis_proc.h"
#include "store/store.h"

#define PREFIX "ktslots"
#define LIVE KT_POOL_REPORT_LIVE

static redisContext *g_rc; /* reads Redis back */
static struct kt_store *g_s;
static char err[KT_ERR_LEN];

#define ASSERT_OK(expr) RP_ASSERT_OK(expr, err)

/* the shared redis-server (kt_storefx), one store on it and a reader */
static int group_setup(void **state)
{
	struct kt_store_cfg c;

	if (kt_storefx_group_setup(state))
		return -1;
	g_rc = rp_connect(&kfx_master);
	kt_storefx_cfg_single(&c, kfx_master.port, PREFIX);
	return g_rc && !kt_store_open(&g_s, &c, err, sizeof(err)) ? 0 : -1;
}

static int group_teardown(void **state)
{
	kt_store_close(g_s);
	if (g_rc)
		redisFree(g_rc);
	return kt_storefx_group_teardown(state);
}

/* node `node` (members node:m0..node:m<n-1>) heartbeats limit `limit`
 * holding `held`, pool P; its grant, the others' claims in *claimed. */
static double g_weight; /* the next beat's slots_weight (0: none) */

#define NEAR KT_NEAR
/* the next beats' classes (g_nk 0: none), this node's demand and weight in
 * each; the last answer's parts */
static int g_nk;
static bool g_peers;
static double g_floor[KT_STORE_MAX_CLASSES], g_ceiling[KT_STORE_MAX_CLASSES];
static int64_t g_cdem[KT_STORE_MAX_CLASSES];
static double g_cw[KT_STORE_MAX_CLASSES], g_parts[KT_STORE_MAX_CLASSES];

static int64_t beat_full(const char *limit, const char *node, int n, int64_t held, int64_t P,
			 int64_t cap, int64_t demand, uint64_t stale, uint64_t hold, int64_t *claimed)
{
	struct kt_pool_member m[8];
	char ids[8][32];
	struct kt_pool_answer a = { 0 };
	struct kt_pool_req q = { .limit = limit, .members = m, .n_members = n, .stale_ms = stale,
				 .save_ramp = -1, .hold_ms = hold, .slots_node = node,
				 .slots_held = held, .slots_pool = P, .slots_cap = cap,
				 .slots_demand = demand, .slots_weight = g_weight };

	assert_true(n <= 8);
	for (int i = 0; i < n; i++) {
		snprintf(ids[i], sizeof(ids[i]), "%s:m%d", node, i);
		m[i] = (struct kt_pool_member){ .id = ids[i], .reported_size = LIVE };
	}
	q.n_classes = g_nk;
	q.classes_siblings = g_peers;
	for (int k = 0; k < g_nk; k++) {
		q.class_floor[k] = g_floor[k];
		q.class_ceiling[k] = g_ceiling[k];
		q.slots_class_demand[k] = g_cdem[k];
		q.slots_class_weight[k] = g_cw[k];
	}
	ASSERT_OK(kt_store_heartbeat_many(g_s, &q, 1, &a, err, sizeof(err)));
	memcpy(g_parts, a.slots_class_part, sizeof(g_parts));
	if (claimed)
		*claimed = a.slots_claimed;
	return a.slots_grant;
}

static int64_t beat_cap(const char *limit, const char *node, int n, int64_t held, int64_t P,
			int64_t cap, uint64_t stale, uint64_t hold, int64_t *claimed)
{
	return beat_full(limit, node, n, held, P, cap, -1, stale, hold, claimed);
}

static int64_t beat(const char *limit, const char *node, int n, int64_t held, int64_t P,
		    uint64_t stale, uint64_t hold, int64_t *claimed)
{
	return beat_cap(limit, node, n, held, P, -1, stale, hold, claimed);
}

static int64_t beat_dem(const char *limit, const char *node, int64_t held, int64_t P, int64_t demand)
{
	return beat_full(limit, node, 1, held, P, -1, demand, 3000, 5000, NULL);
}

/* The claims read back: their sum, which never passes P. */
static int64_t claims(const char *limit, int64_t P)
{
	redisReply *r = redisCommand(g_rc, "HVALS " PREFIX ":pool:{%s}:claim", limit);
	int64_t sum = 0;

	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_ARRAY);
	for (size_t i = 0; i < r->elements; i++)
		sum += strtoll(r->element[i]->str, NULL, 10);
	freeReplyObject(r);
	if (sum > P)
		fail_msg("limit %s: claims sum to %lld > pool %lld", limit, (long long)sum, (long long)P);
	return sum;
}

static int64_t claim_of(const char *limit, const char *node)
{
	redisReply *r = redisCommand(g_rc, "HGET " PREFIX ":pool:{%s}:claim %s", limit, node);
	int64_t v = -1;

	assert_non_null(r);
	if (r->type == REDIS_REPLY_STRING)
		v = strtoll(r->str, NULL, 10);
	freeReplyObject(r);
	return v;
}

/* Three nodes of one member share 30: 10 each. A fourth joins: it gets
 * only what the others' claims leave, nothing while they hold all 30; as
 * each one's grant shrinks (8, its fair part rounded up) and its
 * connections close, it is given the slots freed, and all four converge
 * with the claims never past 30. */
static void test_join_gets_only_free_slots(void **state)
{
	const char *L = "join";
	const char *nodes[4] = { "n0", "n1", "n2", "n3" };
	int64_t g[4], held[4] = { 0 }, others;

	(void)state;
	for (int i = 0; i < 3; i++) {
		g[i] = beat(L, nodes[i], 1, 0, 30, 3000, 5000, NULL);
		claims(L, 30);
	}
	/* n0 beat alone first (30 of 1 live), then n1 (15 of 2): the first
	 * grants follow who came first, within what is free */
	assert_int_equal(g[0], 30);
	assert_int_equal(g[1], 0); /* n0 claims 30 until its next heartbeat */
	assert_int_equal(g[2], 0);
	/* n0 comes back holding nothing: its fair part of 3 live is 10 */
	g[0] = beat(L, "n0", 1, 0, 30, 3000, 5000, NULL);
	assert_int_equal(g[0], 10);
	g[1] = beat(L, "n1", 1, 0, 30, 3000, 5000, NULL);
	g[2] = beat(L, "n2", 1, 0, 30, 3000, 5000, NULL);
	assert_int_equal(g[1], 10);
	assert_int_equal(g[2], 10);
	assert_int_equal(claims(L, 30), 30);

	/* each fills its 10 */
	for (int i = 0; i < 3; i++) {
		held[i] = 10;
		g[i] = beat(L, nodes[i], 1, held[i], 30, 3000, 5000, NULL);
		assert_int_equal(g[i], 10);
	}
	/* n3 joins: nothing free */
	g[3] = beat(L, "n3", 1, 0, 30, 3000, 5000, &others);
	assert_int_equal(g[3], 0);
	assert_int_equal(others, 30);
	/* the others' fair part is now ceil(30/4) = 8, but they hold 10: their
	 * claims stay at 10 until the connections close */
	for (int i = 0; i < 3; i++) {
		g[i] = beat(L, nodes[i], 1, held[i], 30, 3000, 5000, NULL);
		assert_int_equal(g[i], 8);
		assert_int_equal(claim_of(L, nodes[i]), 10);
	}
	assert_int_equal(beat(L, "n3", 1, 0, 30, 3000, 5000, NULL), 0);
	/* their connections close down to the grant */
	for (int i = 0; i < 3; i++) {
		held[i] = 8;
		g[i] = beat(L, nodes[i], 1, held[i], 30, 3000, 5000, NULL);
		assert_int_equal(claim_of(L, nodes[i]), 8);
		claims(L, 30);
	}
	g[3] = beat(L, "n3", 1, 0, 30, 3000, 5000, NULL);
	assert_int_equal(g[3], 6); /* 30 - 3 x 8 */
	assert_int_equal(claims(L, 30), 30);
}

/* A node's fair part follows its members: 2 of 3 live members, 30 slots:
 * 20; the grant is whole slots; a pool that ramps down shrinks grants but
 * not claims held. */
static void test_members_and_ramp(void **state)
{
	const char *L = "members";

	(void)state;
	assert_int_equal(beat(L, "a", 2, 0, 30, 3000, 5000, NULL), 30); /* alone */
	assert_int_equal(beat(L, "b", 1, 0, 30, 3000, 5000, NULL), 0);
	assert_int_equal(beat(L, "a", 2, 0, 30, 3000, 5000, NULL), 20);
	assert_int_equal(beat(L, "b", 1, 0, 30, 3000, 5000, NULL), 10);
	assert_int_equal(beat(L, "a", 2, 20, 30, 3000, 5000, NULL), 20);
	/* ramp down to 10: a is granted 7 (ceil 20/3... of 10: 6.67 -> 7) but
	 * holds 20 */
	assert_int_equal(beat(L, "a", 2, 20, 10, 3000, 5000, NULL), 0);
	assert_int_equal(claim_of(L, "a"), 20);
	/* b cannot take anything while a holds past the pool */
	assert_int_equal(beat(L, "b", 1, 0, 10, 3000, 5000, NULL), 0);
	assert_int_equal(beat(L, "a", 2, 0, 10, 3000, 5000, NULL), 7);
	assert_int_equal(beat(L, "b", 1, 0, 10, 3000, 5000, NULL), 3);
	claims(L, 10);
}

/* A node that goes silent keeps its claim through stale + hold (its lease
 * and fallback), then it is forgotten and its slots are free. */
static void test_silent_node_claim_held_then_freed(void **state)
{
	const char *L = "silent";
	uint64_t stale = 300, hold = 400;

	(void)state;
	assert_int_equal(beat(L, "x", 1, 0, 10, stale, hold, NULL), 10);
	assert_int_equal(beat(L, "x", 1, 10, 10, stale, hold, NULL), 10);
	usleep(500 * 1000); /* x lapsed (300 ms) but within its hold */
	assert_int_equal(beat(L, "y", 1, 0, 10, stale, hold, NULL), 0);
	assert_int_equal(claim_of(L, "x"), 10);
	usleep(300 * 1000); /* 800 ms > stale + hold */
	assert_int_equal(beat(L, "y", 1, 0, 10, stale, hold, NULL), 10);
	assert_int_equal(claim_of(L, "x"), -1);
	claims(L, 10);
}

/* A claim that is no whole number (a hand edit) counts as the whole pool:
 * it blocks, it never frees; its own node's next heartbeat rewrites it. */
static void test_hand_edited_claim(void **state)
{
	const char *L = "edit";
	redisReply *r;

	(void)state;
	assert_int_equal(beat(L, "p", 1, 0, 10, 3000, 5000, NULL), 10);
	assert_int_equal(beat(L, "p", 1, 0, 10, 3000, 5000, NULL), 10);
	r = redisCommand(g_rc, "HSET " PREFIX ":pool:{%s}:claim p -5", L);
	freeReplyObject(r);
	assert_int_equal(beat(L, "q", 1, 0, 10, 3000, 5000, NULL), 0);
	r = redisCommand(g_rc, "HSET " PREFIX ":pool:{%s}:claim p lots", L);
	freeReplyObject(r);
	assert_int_equal(beat(L, "q", 1, 0, 10, 3000, 5000, NULL), 0);
	assert_int_equal(beat(L, "p", 1, 0, 10, 3000, 5000, NULL), 5);
	assert_int_equal(beat(L, "q", 1, 0, 10, 3000, 5000, NULL), 5);
	claims(L, 10);
}

/* A node that may have lost the store (it caps its grant at what its
 * kernel holds) is recorded at the cap, so the store, come back empty,
 * leaves the rest to the nodes that claim again after it. */
static void test_cap_after_store_loss(void **state)
{
	const char *L = "cap";

	(void)state;
	/* alone in an empty store, a node holding 10 asks with cap 10 */
	assert_int_equal(beat_cap(L, "r0", 1, 10, 30, 10, 3000, 5000, NULL), 10);
	assert_int_equal(claim_of(L, "r0"), 10);
	assert_int_equal(beat_cap(L, "r1", 1, 10, 30, 10, 3000, 5000, NULL), 10);
	assert_int_equal(beat_cap(L, "r2", 1, 10, 30, 10, 3000, 5000, NULL), 10);
	assert_int_equal(claims(L, 30), 30);
	/* cap 0: nothing granted, what it holds still claimed */
	assert_int_equal(beat_cap(L, "r0", 1, 4, 30, 0, 3000, 5000, NULL), 0);
	assert_int_equal(claim_of(L, "r0"), 4);
}

/* share: demand: parts max-min fair over the nodes' demands (at least
 * one slot), still only out of what the others' claims leave. */
static void test_demand_parts(void **state)
{
	const char *L = "demand";

	(void)state;
	/* d0 wants 100, d1 2, d2 nothing: levels 28 / 2 / 1 of 30 */
	assert_int_equal(beat_dem(L, "d0", 0, 30, 100), 30); /* alone */
	assert_int_equal(beat_dem(L, "d1", 0, 30, 2), 0);    /* d0 claims 30 */
	assert_int_equal(beat_dem(L, "d2", 0, 30, 0), 0);
	assert_int_equal(beat_dem(L, "d0", 30, 30, 100), 28);
	assert_int_equal(claim_of(L, "d0"), 30); /* holds 30 until they close */
	assert_int_equal(beat_dem(L, "d0", 28, 30, 100), 28);
	assert_int_equal(beat_dem(L, "d1", 0, 30, 2), 2);
	assert_int_equal(beat_dem(L, "d2", 0, 30, 0), 0); /* its floor of 1: nothing left */
	claims(L, 30);
	/* demand that fits: what is left shared equally: 4 + (30 - 9) / 3 = 11
	 * once every node's new demand is known (a first round tells them) */
	for (int i = 0; i < 3; i++)
		beat_dem(L, (const char *[]){ "d0", "d1", "d2" }[i], 0, 30, 4 - i);
	assert_int_equal(beat_dem(L, "d0", 0, 30, 4), 11);
	assert_int_equal(beat_dem(L, "d1", 0, 30, 3), 10);
	assert_int_equal(beat_dem(L, "d2", 0, 30, 2), 9);
	assert_int_equal(claims(L, 30), 30);
}

/* Weighted parts (weightBy: a node weighs its members' weights summed):
 * 3:1 of 20 when both want more than the pool: 15 and 5; the light one
 * wanting 2 keeps 2 and the heavy one has the rest; with room for all, the
 * leftover by weight. A node that sends no weight weighs 1. */
static void test_weighted_parts(void **state)
{
	const char *L = "wparts";

	(void)state;
	g_weight = 3;
	assert_int_equal(beat_dem(L, "prod", 0, 20, 100), 20); /* alone */
	g_weight = 1;
	assert_int_equal(beat_dem(L, "batch", 0, 20, 100), 0); /* prod claims 20 */
	g_weight = 3;
	assert_int_equal(beat_dem(L, "prod", 15, 20, 100), 15);
	g_weight = 1;
	assert_int_equal(beat_dem(L, "batch", 0, 20, 100), 5);
	assert_int_equal(claims(L, 20), 20);
	/* batch wants 2: it keeps 2, prod may have 18 */
	assert_int_equal(beat_dem(L, "batch", 2, 20, 2), 2);
	g_weight = 3;
	assert_int_equal(beat_dem(L, "prod", 15, 20, 100), 18);
	claims(L, 20);
	/* both fit (4 and 2 of 20): 14 left, 3:1: 4 + 10.5 and 2 + 3.5,
	 * rounded up, and batch's within what prod's claim leaves */
	assert_int_equal(beat_dem(L, "prod", 4, 20, 4), 15);
	g_weight = 0; /* weighs 1, as one that sends none */
	assert_int_equal(beat_dem(L, "batch", 2, 20, 2), 5);
	claims(L, 20);
	/* the store keeps "demand weight", and the demand alone for weight 1 */
	{
		redisReply *r = redisCommand(g_rc, "HGET " PREFIX ":pool:{%s}:sdem prod", L);

		assert_string_equal(r->str, "4 3");
		freeReplyObject(r);
		r = redisCommand(g_rc, "HGET " PREFIX ":pool:{%s}:sdem batch", L);
		assert_string_equal(r->str, "2");
		freeReplyObject(r);
	}
}

/* One node's beat with classes: its demand and weight in each of the two
 * (critical, batch), their sum its demand. */
static int64_t beat_cls(const char *limit, const char *node, int64_t held, int64_t P, int64_t dc,
			double wc, int64_t db, double wb)
{
	g_cdem[0] = dc, g_cw[0] = wc, g_cdem[1] = db, g_cw[1] = wb;
	return beat_full(limit, node, 1, held, P, -1, dc + db, 3000, 5000, NULL);
}

/* In-flight slots by class: critical first, batch keeping a floor of 5 of
 * 20. Critical wanting 30 gets 15, batch its 5; critical wanting 8 keeps
 * 8 and batch has the other 12; a node with members of both classes gets
 * each class's part; as peers (floors kept, then by weight) the split
 * changes accordingly. The claims never pass 20. */
static void test_class_parts(void **state)
{
	const char *L = "cparts";

	(void)state;
	g_nk = 2;
	g_floor[0] = 0, g_ceiling[0] = 20, g_floor[1] = 5, g_ceiling[1] = 20;
	beat_cls(L, "crit", 0, 20, 30, 1, 0, 0);
	beat_cls(L, "bat", 0, 20, 0, 0, 30, 1);
	assert_int_equal(beat_cls(L, "crit", 15, 20, 30, 1, 0, 0), 15);
	NEAR(g_parts[0], 15, 1e-9);
	NEAR(g_parts[1], 0, 1e-9);
	assert_int_equal(beat_cls(L, "bat", 0, 20, 0, 0, 30, 1), 5);
	NEAR(g_parts[1], 5, 1e-9);
	assert_int_equal(claims(L, 20), 20);
	/* critical wants 8: batch gets the rest */
	assert_int_equal(beat_cls(L, "crit", 8, 20, 8, 1, 0, 0), 8);
	assert_int_equal(beat_cls(L, "bat", 5, 20, 0, 0, 30, 1), 12);
	claims(L, 20);
	/* a node of both classes: critical 4 of its own, batch shares 16 with
	 * bat by weight (1:1 between the nodes' batch members): parts 4 + 8;
	 * granted within what the others' claims leave (crit keeps its one
	 * slot, bat its 8) */
	{
		int64_t gb = 0, gm = 0;

		for (int r = 0; r < 4; r++) {
			beat_cls(L, "crit", 0, 20, 0, 0, 0, 0);
			gb = beat_cls(L, "bat", gb, 20, 0, 0, 30, 1);
			gm = beat_cls(L, "mix", gm, 20, 4, 1, 30, 1);
			claims(L, 20);
		}
		NEAR(g_parts[0], 4, 1e-9);
		NEAR(g_parts[1], 8, 1e-9);
		assert_int_equal(gb, 8);
		assert_int_equal(gm, 11);
	}
	/* the store keeps "D W D0:W0,D1:W1" */
	{
		redisReply *r = redisCommand(g_rc, "HGET " PREFIX ":pool:{%s}:sdem mix", L);

		assert_string_equal(r->str, "34 1 4:1,30:1");
		freeReplyObject(r);
	}
	/* peers, floors 12 and 5: critical (1 node) keeps 12 though by weight
	 * (1 of 3 members) it would get less */
	g_peers = true;
	g_floor[0] = 12;
	beat_cls("cpeers", "crit", 0, 20, 30, 1, 0, 0);
	beat_cls("cpeers", "bat", 0, 20, 0, 0, 30, 2);
	beat_cls("cpeers", "crit", 0, 20, 30, 1, 0, 0);
	NEAR(g_parts[0], 12, 1e-9);
	beat_cls("cpeers", "bat", 0, 20, 0, 0, 30, 2);
	NEAR(g_parts[1], 8, 1e-9);
	g_nk = 0;
	g_peers = false;
}

/* Bad requests fail before anything is sent. */
static void test_bad_requests(void **state)
{
	struct kt_pool_member m = { .id = "z:m0", .reported_size = LIVE };
	struct kt_pool_answer a = { 0 };
	struct kt_pool_req q = { .limit = "bad", .members = &m, .n_members = 1, .stale_ms = 3000,
				 .save_ramp = -1, .slots_node = "z", .slots_held = 0, .slots_pool = 10,
				 .slots_cap = -1, .slots_demand = -1 };

	(void)state;
	q.slots_node = "two words";
	assert_int_equal(kt_store_heartbeat_many(g_s, &q, 1, &a, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "in-flight"));
	q.slots_node = "z";
	q.slots_held = -1;
	assert_int_equal(kt_store_heartbeat_many(g_s, &q, 1, &a, err, sizeof(err)), -EINVAL);
	q.slots_held = 0;
	q.slots_pool = KT_STORE_MAX_SLOTS + 1;
	assert_int_equal(kt_store_heartbeat_many(g_s, &q, 1, &a, err, sizeof(err)), -EINVAL);
	q.slots_pool = 10;
	q.slots_cap = -2;
	assert_int_equal(kt_store_heartbeat_many(g_s, &q, 1, &a, err, sizeof(err)), -EINVAL);
	q.slots_cap = -1;
	q.slots_demand = -2;
	assert_int_equal(kt_store_heartbeat_many(g_s, &q, 1, &a, err, sizeof(err)), -EINVAL);
	q.slots_demand = 1;
	q.slots_weight = -1;
	assert_int_equal(kt_store_heartbeat_many(g_s, &q, 1, &a, err, sizeof(err)), -EINVAL);
	q.slots_weight = NAN;
	assert_int_equal(kt_store_heartbeat_many(g_s, &q, 1, &a, err, sizeof(err)), -EINVAL);
	q.slots_weight = 0;
	q.slots_demand = -1;
	q.pool_rate = 5; /* rate demand sharing and slots are exclusive */
	assert_int_equal(kt_store_heartbeat_many(g_s, &q, 1, &a, err, sizeof(err)), -EINVAL);
	redisReply *r = redisCommand(g_rc, "EXISTS " PREFIX ":pool:{bad}:hb");
	assert_int_equal(r->integer, 0);
	freeReplyObject(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_join_gets_only_free_slots),
		cmocka_unit_test(test_weighted_parts),
		cmocka_unit_test(test_class_parts),
		cmocka_unit_test(test_members_and_ramp),
		cmocka_unit_test(test_silent_node_claim_held_then_freed),
		cmocka_unit_test(test_hand_edited_claim),
		cmocka_unit_test(test_cap_after_store_loss),
		cmocka_unit_test(test_demand_parts),
		cmocka_unit_test(test_bad_requests),
	};
	return cmocka_run_group_tests_name("store_slots", tests, group_setup, group_teardown);
}
