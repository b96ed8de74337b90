/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Store client in cluster mode against a real 3 master + 3 replica Redis
 * Cluster on loopback: routing by slot, agreement, MOVED after a slot moved,
 * ASK while a slot migrates, NOSCRIPT after SCRIPT FLUSH, and a master
 * failover. Skipped when redis-server/redis-cli cannot make a
 * cluster. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>
#include "kt_storefx.h"
#include "redis_proc.h"
#include "store/store.h"

#define PREFIX "kttest"
#define N_NODES 6
#define N_LIM 3
#define N_ST 3
#define MEMBERS 2
#define STALE_MS 3000

static struct rp_proc g_nodes[N_NODES];
static bool g_have;
static char g_lim[N_LIM][32];
static int g_slot[N_LIM];
static struct kt_store *g_st[N_ST];
static char err[KT_ERR_LEN];
static int g_watch = -1;          /* until_agree: note when this node stops owning g_slot[0] */
static uint64_t g_moved_ms;
static int g_missed[N_LIM];       /* beat: calls that left limit l unanswered */
static uint64_t g_call_max_ms;    /* beat: the slowest heartbeat call */

/* a store call must succeed; else its message (err) is printed */
#define ASSERT_OK(expr) RP_ASSERT_OK(expr, err)

static void cfg_cluster(struct kt_store_cfg *c, const int *ports, int n)
{
	static char host[] = "127.0.0.1";

	memset(c, 0, sizeof(*c));
	c->kind = KT_STORE_REDIS;
	c->line = 9;
	c->redis_mode = KT_REDIS_CLUSTER;
	for (int i = 0; i < n; i++) {
		c->endpoint_host[i] = host;
		c->endpoint_port[i] = ports[i];
	}
	c->n_endpoints = n;
	c->key_prefix = PREFIX;
}

static struct kt_store *open_seeded(int seed)
{
	struct kt_store_cfg c;
	struct kt_store *s;

	cfg_cluster(&c, &g_nodes[seed].port, 1);
	ASSERT_OK(kt_store_open(&s, &c, err, sizeof(err)));
	return s;
}

static int group_setup(void **state)
{
	(void)state;
	if (rp_start_cluster(g_nodes, N_NODES, 1)) {
		fprintf(stderr, "no Redis Cluster here: cluster tests skipped\n");
		return 0;
	}
	g_have = true;
	/* three limit names whose slots three different masters own (asked of
	 * the server, so the client's own CRC16 is checked against it) */
	return kt_storefx_spread_limits(g_nodes, N_NODES, PREFIX, N_LIM, g_lim, g_slot) == N_LIM ? 0 : -1;
}

static int group_teardown(void **state)
{
	(void)state;
	for (int i = 0; i < N_NODES; i++)
		rp_stop(&g_nodes[i]);
	return 0;
}

static int setup(void **state)
{
	(void)state;
	if (!g_have)
		return 0;
	for (int i = 0; i < N_ST; i++)
		g_st[i] = open_seeded(i);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < N_ST; i++) {
		kt_store_close(g_st[i]);
		g_st[i] = NULL;
	}
	return 0;
}

/* One heartbeat of store i for all limits; 1 when every answer is AGREE at
 * N_ST x MEMBERS. */
static int beat(int i, int *rc)
{
	static char ids[N_ST][MEMBERS][32];
	struct kt_pool_member m[MEMBERS];
	struct kt_pool_req q[N_LIM];
	struct kt_pool_answer a[N_LIM];
	uint64_t t0;
	int ok = 1;

	for (int k = 0; k < MEMBERS; k++) {
		snprintf(ids[i][k], sizeof(ids[i][k]), "node%d-m%d", i, k);
		m[k] = (struct kt_pool_member){ .id = ids[i][k], .reported_size = KT_POOL_REPORT_LIVE };
	}
	for (int l = 0; l < N_LIM; l++)
		q[l] = (struct kt_pool_req){ .limit = g_lim[l], .members = m, .n_members = MEMBERS,
					     .stale_ms = STALE_MS, .save_ramp = -1 };
	memset(a, 0, sizeof(a));
	t0 = rp_now_ms();
	*rc = kt_store_heartbeat_many(g_st[i], q, N_LIM, a, err, sizeof(err));
	if (rp_now_ms() - t0 > g_call_max_ms)
		g_call_max_ms = rp_now_ms() - t0;
	for (int l = 0; l < N_LIM; l++)
		g_missed[l] += *rc < 0 || (*rc == KT_STORE_PARTIAL && a[l].status);
	if (*rc)
		return 0;
	for (int l = 0; l < N_LIM; l++)
		ok &= a[l].agree && a[l].size == N_ST * MEMBERS && a[l].live == N_ST * MEMBERS;
	return ok;
}

/* Heartbeats every store each period_ms until all agree on every limit in
 * two rounds running; returns the ms it took, or -1 after limit_ms. */
static long long until_agree(int period_ms, int limit_ms, int *fails)
{
	uint64_t t0 = rp_now_ms();
	int good = 0, rc;

	*fails = 0;
	while (rp_now_ms() - t0 < (uint64_t)limit_ms) {
		int all = 1;

		for (int i = 0; i < N_ST; i++) {
			all &= beat(i, &rc);
			*fails += rc != 0;
		}
		if (g_watch >= 0 && !g_moved_ms) {
			int o = rp_cluster_slot_owner(g_nodes, N_NODES, g_slot[0]);

			if (o >= 0 && o != g_watch)
				g_moved_ms = rp_now_ms();
		}
		if (all && ++good == 2)
			return (long long)(rp_now_ms() - t0);
		if (!all)
			good = 0;
		rp_sleep_ms(period_ms);
	}
	return -1;
}

static void test_agree_three_masters(void **state)
{
	struct kt_store_stats st0, st1;
	char ep[300], key[96];
	int rc, fails;
	long long ms;
	double ramp;

	(void)state;
	if (!g_have)
		skip();
	ms = until_agree(20, 5000, &fails);
	print_message("agreement on %d limits in 3 slots from cold: %lld ms, %d failed calls\n", N_LIM, ms,
		      fails);
	assert_true(ms >= 0);
	assert_int_equal(fails, 0);
	/* each limit's keys live on its slot's master, and only there */
	for (int l = 0; l < N_LIM; l++) {
		int o = rp_cluster_slot_owner(g_nodes, N_NODES, g_slot[l]);

		snprintf(key, sizeof(key), PREFIX ":pool:{%s}:hb", g_lim[l]);
		assert_true(o >= 0);
		assert_int_equal(rp_command_int(&g_nodes[o], -1, "ZCARD %s", key), N_ST * MEMBERS);
		for (int j = 0; j < N_LIM; j++) {
			int oj = rp_cluster_slot_owner(g_nodes, N_NODES, g_slot[j]);
			redisReply *r;

			if (oj == o)
				continue;
			r = rp_command(&g_nodes[oj], "ZCARD %s", key);
			assert_non_null(r);
			assert_int_equal(r->type, REDIS_REPLY_ERROR);
			assert_true(!strncmp(r->str, "MOVED ", 6));
			freeReplyObject(r);
		}
	}
	/* three limits in three slots on three masters: three round trips */
	kt_store_get_stats(g_st[0], &st0);
	assert_int_equal(beat(0, &rc), 1);
	kt_store_get_stats(g_st[0], &st1);
	assert_int_equal(st1.round_trips - st0.round_trips, 3);
	assert_int_equal(st1.commands - st0.commands, 3);
	/* two slots of one master: two EVALSHAs in one pipeline, one round trip */
	{
		struct kt_pool_member m = { .id = "pipe-0", .reported_size = KT_POOL_REPORT_LIVE };
		int o0 = rp_cluster_slot_owner(g_nodes, N_NODES, g_slot[0]);
		char other[32] = "";
		struct kt_pool_req q[2];
		struct kt_pool_answer a[2];
		const char *gone[1] = { "pipe-0" };

		for (int k = 0; k < 1000 && !other[0]; k++) {
			char name[32];
			int sl;

			snprintf(name, sizeof(name), "pipe%d", k);
			snprintf(key, sizeof(key), PREFIX ":pool:{%s}:hb", name);
			sl = rp_cluster_slot(&g_nodes[0], key);
			if (sl != g_slot[0] && rp_cluster_slot_owner(g_nodes, N_NODES, sl) == o0)
				snprintf(other, sizeof(other), "%s", name);
		}
		assert_true(other[0]);
		q[0] = (struct kt_pool_req){ .limit = other, .members = &m, .n_members = 1,
					     .stale_ms = STALE_MS, .save_ramp = -1 };
		q[1] = q[0];
		q[1].limit = g_lim[0];
		kt_store_get_stats(g_st[0], &st0);
		ASSERT_OK(kt_store_heartbeat_many(g_st[0], q, 2, a, err, sizeof(err)));
		kt_store_get_stats(g_st[0], &st1);
		assert_int_equal(st1.round_trips - st0.round_trips, 1);
		assert_int_equal(st1.commands - st0.commands, 2);
		assert_int_equal(a[0].agree, 1);
		assert_int_equal(a[0].size, 1);
		assert_int_equal(a[1].live, N_ST * MEMBERS + 1);
		ASSERT_OK(kt_store_leave(g_st[0], g_lim[0], gone, 1, err, sizeof(err)));
	}
	kt_store_endpoint(g_st[0], ep, sizeof(ep));
	assert_true(!strncmp(ep, "127.0.0.1:", 10));
	assert_true(kt_store_connected(g_st[0]));
	/* the other calls route too */
	ASSERT_OK(kt_store_save_ramp(g_st[1], g_lim[1], 123.5, 60000, err, sizeof(err)));
	ASSERT_OK(kt_store_load_ramp(g_st[2], g_lim[1], &ramp, err, sizeof(err)));
	assert_true(ramp == 123.5);
	ASSERT_OK(kt_store_ping(g_st[2], err, sizeof(err)));
	{
		const char *gone[1] = { "node2-m0" };

		ASSERT_OK(kt_store_leave(g_st[2], g_lim[2], gone, 1, err, sizeof(err)));
	}
	snprintf(key, sizeof(key), PREFIX ":pool:{%s}:hb", g_lim[2]);
	assert_int_equal(rp_command_int(&g_nodes[rp_cluster_slot_owner(g_nodes, N_NODES, g_slot[2])], -1,
					"ZCARD %s", key),
			 N_ST * MEMBERS - 1);
}

static void node_id(const struct rp_proc *p, char *buf, size_t len)
{
	redisReply *r = rp_command(p, "CLUSTER MYID");

	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_STRING);
	snprintf(buf, len, "%s", r->str);
	freeReplyObject(r);
}

static void expect_ok(redisReply *r)
{
	assert_non_null(r);
	if (r->type == REDIS_REPLY_ERROR)
		print_error("%s\n", r->str);
	assert_int_equal(r->type, REDIS_REPLY_STATUS);
	freeReplyObject(r);
}

/* The store learned the map; then an empty slot moves to another master.
 * Its first reply is MOVED, and the call still succeeds. */
static void test_moved(void **state)
{
	struct kt_pool_member m = { .id = "mv-0", .reported_size = KT_POOL_REPORT_LIVE };
	struct kt_pool_answer a;
	struct kt_store_stats st0, st1;
	char name[32], key[96], from_id[64], to_id[64];
	int slot = -1, from = -1, to = -1;

	(void)state;
	if (!g_have)
		skip();
	ASSERT_OK(kt_store_ping(g_st[0], err, sizeof(err))); /* learns the map */
	snprintf(name, sizeof(name), "moving");
	snprintf(key, sizeof(key), PREFIX ":pool:{%s}:hb", name);
	slot = rp_cluster_slot(&g_nodes[0], key);
	from = rp_cluster_slot_owner(g_nodes, N_NODES, slot);
	to = rp_cluster_slot_owner(g_nodes, N_NODES, g_slot[0]);
	if (to == from)
		to = rp_cluster_slot_owner(g_nodes, N_NODES, g_slot[1]);
	assert_true(from >= 0 && to >= 0 && from != to);
	node_id(&g_nodes[from], from_id, sizeof(from_id));
	node_id(&g_nodes[to], to_id, sizeof(to_id));
	expect_ok(rp_command(&g_nodes[to], "CLUSTER SETSLOT %d IMPORTING %s", slot, from_id));
	expect_ok(rp_command(&g_nodes[from], "CLUSTER SETSLOT %d MIGRATING %s", slot, to_id));
	expect_ok(rp_command(&g_nodes[to], "CLUSTER SETSLOT %d NODE %s", slot, to_id));
	expect_ok(rp_command(&g_nodes[from], "CLUSTER SETSLOT %d NODE %s", slot, to_id));
	for (int i = 0; i < N_NODES; i++)
		if (i != from && i != to && g_nodes[i].pid > 0) {
			redisReply *r = rp_command(&g_nodes[i], "CLUSTER SETSLOT %d NODE %s", slot, to_id);

			if (r)
				freeReplyObject(r);
		}
	kt_store_get_stats(g_st[0], &st0);
	ASSERT_OK(kt_store_heartbeat(g_st[0], name, &m, 1, STALE_MS, &a, err, sizeof(err)));
	kt_store_get_stats(g_st[0], &st1);
	assert_int_equal(a.agree, 1);
	assert_int_equal(a.size, 1);
	/* MOVED from the old master, then the answer from the new one */
	assert_int_equal(st1.round_trips - st0.round_trips, 2);
	assert_int_equal(rp_command_int(&g_nodes[to], -1, "ZCARD %s", key), 1);
	/* the next call goes straight to the new master */
	kt_store_get_stats(g_st[0], &st0);
	ASSERT_OK(kt_store_heartbeat(g_st[0], name, &m, 1, STALE_MS, &a, err, sizeof(err)));
	kt_store_get_stats(g_st[0], &st1);
	assert_true(st1.round_trips - st0.round_trips <= 2); /* at most a map refresh + the call */
	kt_store_get_stats(g_st[0], &st0);
	ASSERT_OK(kt_store_heartbeat(g_st[0], name, &m, 1, STALE_MS, &a, err, sizeof(err)));
	kt_store_get_stats(g_st[0], &st1);
	assert_int_equal(st1.round_trips - st0.round_trips, 1);
}

/* A limit name, "<stem><k>", whose slot master `owner` serves and no limit of
 * g_lim uses; its slot in *slot. */
static void name_on(int owner, const char *stem, char *name, size_t len, int *slot)
{
	char key[96];

	for (int k = 0; k < 5000; k++) {
		int sl, l;

		snprintf(name, len, "%s%d", stem, k);
		snprintf(key, sizeof(key), PREFIX ":pool:{%s}:hb", name);
		sl = rp_cluster_slot(&g_nodes[0], key);
		for (l = 0; l < N_LIM && g_slot[l] != sl; l++)
			;
		if (l == N_LIM && rp_cluster_slot_owner(g_nodes, N_NODES, sl) == owner) {
			*slot = sl;
			return;
		}
	}
	fail_msg("no name of stem %s on node %d", stem, owner);
}

/* CLUSTER SETSLOT slot NODE id on every running node (the masters must
 * take it; a replica may refuse). */
static void slot_to(int slot, const char *id)
{
	for (int i = 0; i < N_NODES; i++) {
		redisReply *r;

		if (g_nodes[i].pid <= 0)
			continue;
		r = rp_command(&g_nodes[i], "CLUSTER SETSLOT %d NODE %s", slot, id);
		if (r)
			freeReplyObject(r);
	}
}

/* Integer answer of `cmd key` on p after ASKING on the same connection (an
 * importing node answers keys of the slot only then), or -1. */
static long long asking_int(const struct rp_proc *p, const char *cmd, const char *key)
{
	redisContext *c = rp_connect(p);
	redisReply *r;
	long long v = -1;

	assert_non_null(c);
	r = redisCommand(c, "ASKING");
	if (r)
		freeReplyObject(r);
	r = redisCommand(c, "%s %s", cmd, key);
	if (r && r->type == REDIS_REPLY_INTEGER)
		v = r->integer;
	else if (r && r->type == REDIS_REPLY_ERROR)
		print_message("%s %s on :%d: %s\n", cmd, key, p->port, r->str);
	if (r)
		freeReplyObject(r);
	redisFree(c);
	return v;
}

/* One heartbeat of member id of `name` in demand mode with a ramp save and
 * a fallback rate, so that every key the script names can exist. */
static int beat_full(int st, const char *name, const char *id, uint64_t stale_ms, struct kt_pool_answer *a)
{
	struct kt_pool_member m = { .id = id, .reported_size = KT_POOL_REPORT_LIVE, .demand = 50 };
	double grant = -1;
	struct kt_pool_req q = { .limit = name, .members = &m, .n_members = 1, .stale_ms = stale_ms,
				 .save_ramp = 10, .ramp_ttl_ms = 60000, .hold_ms = 60000,
				 .fallback_rate = 5, .pool_rate = 1000, .floor_rate = 10,
				 .recompute_ms = 0, .grants = &grant };
	int rc;

	memset(a, 0, sizeof(*a));
	rc = kt_store_heartbeat_many(g_st[st], &q, 1, a, err, sizeof(err));
	if (!rc)
		assert_true(grant >= 0 && grant <= 1000);
	return rc;
}

/* One limit's slot is being migrated from master A to master B and A no
 * longer holds any of its keys (MIGRATEd to B): A answers ASK, the store
 * resends to B with ASKING, and the heartbeat runs there.
 *
 * Redis (7.0 getNodeByQuery) serves a multi-key command during a slot
 * migration only when all its keys are on one side: a node that still has
 * some answers TRYAGAIN, and the importing node answers TRYAGAIN to ASKING
 * when any key is missing. The script names 11 keys per limit, so the ASK
 * path can only succeed when all 11 exist (a lapsed member, a ramp save,
 * a fallback rate, demand mode); a fresh limit, or an equal-share one (no
 * grant/dem keys), cannot heartbeat while its slot migrates. That case is
 * run first and only printed. */
static void test_ask_during_migration(void **state)
{
	struct kt_pool_member m = { .id = "ask-0", .reported_size = KT_POOL_REPORT_LIVE };
	struct kt_pool_answer a;
	struct kt_store_stats st0, st1;
	char name[32], fresh[32], key[96], a_id[64], b_id[64];
	const char *argv[8 + 64];
	int slot = -1, fslot = -1, from, to, rc, argc;
	redisReply *r;

	(void)state;
	if (!g_have)
		skip();
	from = rp_cluster_slot_owner(g_nodes, N_NODES, g_slot[0]);
	to = rp_cluster_slot_owner(g_nodes, N_NODES, g_slot[1]);
	assert_true(from >= 0 && to >= 0 && from != to);
	name_on(from, "ask", name, sizeof(name), &slot);
	node_id(&g_nodes[from], a_id, sizeof(a_id));
	node_id(&g_nodes[to], b_id, sizeof(b_id));
	/* every key of the limit on A: "ask-gone" lapses (stale 200 ms) */
	assert_int_equal(beat_full(0, name, "ask-gone", STALE_MS, &a), 0);
	rp_sleep_ms(300);
	ASSERT_OK(beat_full(1, name, "ask-0", 200, &a));
	assert_int_equal(a.live, 1);
	assert_true(a.reserved == 5);
	assert_int_equal(rp_command_int(&g_nodes[from], -1, "CLUSTER COUNTKEYSINSLOT %d", slot), 11);

	/* the slot migrates; its keys move to B */
	expect_ok(rp_command(&g_nodes[to], "CLUSTER SETSLOT %d IMPORTING %s", slot, a_id));
	expect_ok(rp_command(&g_nodes[from], "CLUSTER SETSLOT %d MIGRATING %s", slot, b_id));
	r = rp_command(&g_nodes[from], "CLUSTER GETKEYSINSLOT %d 64", slot);
	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_ARRAY);
	assert_int_equal(r->elements, 11);
	{
		char port[16];

		snprintf(port, sizeof(port), "%d", g_nodes[to].port);
		argc = 0;
		argv[argc++] = "MIGRATE";
		argv[argc++] = "127.0.0.1";
		argv[argc++] = port;
		argv[argc++] = "";
		argv[argc++] = "0";
		argv[argc++] = "5000";
		argv[argc++] = "KEYS";
		for (size_t k = 0; k < r->elements; k++)
			argv[argc++] = r->element[k]->str;
		expect_ok(rp_command_argv(&g_nodes[from], argc, argv));
	}
	freeReplyObject(r);
	assert_int_equal(rp_command_int(&g_nodes[from], -1, "CLUSTER COUNTKEYSINSLOT %d", slot), 0);
	assert_int_equal(rp_command_int(&g_nodes[to], -1, "CLUSTER COUNTKEYSINSLOT %d", slot), 11);

	/* a fresh limit of a migrating slot: A answers ASK, B TRYAGAIN (keys
	 * missing), so the call fails; printed, not asserted (Redis's rule) */
	name_on(from, "askfresh", fresh, sizeof(fresh), &fslot);
	expect_ok(rp_command(&g_nodes[to], "CLUSTER SETSLOT %d IMPORTING %s", fslot, a_id));
	expect_ok(rp_command(&g_nodes[from], "CLUSTER SETSLOT %d MIGRATING %s", fslot, b_id));
	ASSERT_OK(kt_store_ping(g_st[2], err, sizeof(err)));
	kt_store_get_stats(g_st[2], &st0);
	rc = kt_store_heartbeat(g_st[2], fresh, &m, 1, STALE_MS, &a, err, sizeof(err));
	kt_store_get_stats(g_st[2], &st1);
	print_message("fresh limit %s, slot %d migrating :%d -> :%d: rc %d (%s) after %llu round trips "
		      "(Redis: TRYAGAIN from the importing node, keys missing)\n",
		      fresh, fslot, g_nodes[from].port, g_nodes[to].port, rc, rc ? err : "ok",
		      (unsigned long long)(st1.round_trips - st0.round_trips));
	expect_ok(rp_command(&g_nodes[to], "CLUSTER SETSLOT %d STABLE", fslot));
	expect_ok(rp_command(&g_nodes[from], "CLUSTER SETSLOT %d STABLE", fslot));

	/* the limit whose keys all moved: ASK from A, then ASKING + EVALSHA
	 * on B in one round trip; twice (ASK is not remembered) */
	for (int k = 0; k < 2; k++) {
		ASSERT_OK(kt_store_ping(g_st[0], err, sizeof(err))); /* the map: A serves the slot */
		kt_store_get_stats(g_st[0], &st0);
		ASSERT_OK(beat_full(0, name, "ask-0", 200, &a));
		kt_store_get_stats(g_st[0], &st1);
		assert_int_equal(a.agree, 1);
		assert_int_equal(a.size, 1);
		assert_int_equal(a.live, 1);
		assert_true(a.reserved == 5);
		assert_true(a.granted <= 1000 - 5 + 1e-6);
		assert_int_equal(st1.round_trips - st0.round_trips, 2);
		assert_int_equal(st1.commands - st0.commands, 3); /* EVALSHA; ASKING, EVALSHA */
	}
	print_message("limit %s, slot %d migrating :%d -> :%d: heartbeat answered by B after ASK "
		      "(2 round trips, 3 commands)\n", name, slot, g_nodes[from].port, g_nodes[to].port);
	/* the keys are on B only: read there with ASKING; A has none */
	snprintf(key, sizeof(key), PREFIX ":pool:{%s}:hb", name);
	assert_int_equal(asking_int(&g_nodes[to], "ZCARD", key), 1);
	snprintf(key, sizeof(key), PREFIX ":pool:{%s}:lapsed", name);
	assert_int_equal(asking_int(&g_nodes[to], "ZCARD", key), 1);
	snprintf(key, sizeof(key), PREFIX ":pool:{%s}:grant", name);
	assert_int_equal(asking_int(&g_nodes[to], "HLEN", key), 1);
	assert_int_equal(rp_command_int(&g_nodes[from], -1, "CLUSTER COUNTKEYSINSLOT %d", slot), 0);

	/* finish the migration: B owns the slot; MOVED, then straight to B */
	slot_to(slot, b_id);
	assert_int_equal(rp_cluster_wait_ok(g_nodes, N_NODES, 5000), 0);
	assert_int_equal(rp_cluster_slot_owner(g_nodes, N_NODES, slot), to);
	ASSERT_OK(beat_full(0, name, "ask-0", 200, &a));
	assert_int_equal(a.live, 1);
	snprintf(key, sizeof(key), PREFIX ":pool:{%s}:hb", name);
	assert_int_equal(rp_command_int(&g_nodes[to], -1, "ZCARD %s", key), 1);
}

/* The master of a limit's slot loses its scripts (SCRIPT FLUSH): the first
 * EVALSHA answers NOSCRIPT, the store resends the script text (EVAL) to
 * that master only, and the heartbeats after it succeed too (EVAL put the
 * script back in the server's cache). Then every master flushes at once. */
static void test_noscript_after_flush(void **state)
{
	struct kt_store_stats st0, st1;
	int rc, fails, o;

	(void)state;
	if (!g_have)
		skip();
	assert_true(until_agree(20, 5000, &fails) >= 0);
	o = rp_cluster_slot_owner(g_nodes, N_NODES, g_slot[0]);
	assert_true(o >= 0);
	expect_ok(rp_command(&g_nodes[o], "SCRIPT FLUSH"));
	/* three masters, three EVALSHAs; one NOSCRIPT, one EVAL more */
	kt_store_get_stats(g_st[0], &st0);
	assert_int_equal(beat(0, &rc), 1);
	kt_store_get_stats(g_st[0], &st1);
	assert_int_equal(rc, 0);
	print_message("after SCRIPT FLUSH on :%d: %llu round trips, %llu commands\n", g_nodes[o].port,
		      (unsigned long long)(st1.round_trips - st0.round_trips),
		      (unsigned long long)(st1.commands - st0.commands));
	assert_int_equal(st1.round_trips - st0.round_trips, N_LIM + 1);
	assert_int_equal(st1.commands - st0.commands, N_LIM + 1);
	/* the next heartbeats: EVALSHA works again */
	for (int k = 0; k < 2; k++) {
		kt_store_get_stats(g_st[0], &st0);
		assert_int_equal(beat(0, &rc), 1);
		kt_store_get_stats(g_st[0], &st1);
		assert_int_equal(rc, 0);
		assert_int_equal(st1.round_trips - st0.round_trips, N_LIM);
	}
	/* every master flushed: the other stores resend everywhere */
	for (int l = 0; l < N_LIM; l++)
		expect_ok(rp_command(&g_nodes[rp_cluster_slot_owner(g_nodes, N_NODES, g_slot[l])],
				     "SCRIPT FLUSH"));
	for (int i = 1; i < N_ST; i++) {
		kt_store_get_stats(g_st[i], &st0);
		assert_int_equal(beat(i, &rc), 1);
		kt_store_get_stats(g_st[i], &st1);
		assert_int_equal(rc, 0);
		if (i == 1)
			assert_int_equal(st1.commands - st0.commands, 2 * N_LIM);
		assert_int_equal(beat(i, &rc), 1);
		assert_int_equal(rc, 0);
	}
	assert_true(until_agree(20, 5000, &fails) >= 0);
	assert_int_equal(fails, 0);
}

/* SIGKILL the master of limit 0's slot: its replica is promoted and all
 * three nodes agree on every limit again. Meanwhile only limit 0 goes
 * unanswered (KT_STORE_PARTIAL): the limits of the healthy masters are
 * answered on every call, and no call waits long on the dead master. */
static void test_failover(void **state)
{
	int victim, fails, promoted;
	long long ms;
	uint64_t t0;

	(void)state;
	if (!g_have)
		skip();
	/* Redis's default answers CLUSTERDOWN for every slot while any is
	 * unserved (from the master marked failed to the promotion), which no
	 * client can get round; docs/stores.md advises this for kthrottle */
	for (int i = 0; i < N_NODES; i++)
		expect_ok(rp_command(&g_nodes[i], "CONFIG SET cluster-require-full-coverage no"));
	assert_true(until_agree(20, 5000, &fails) >= 0);
	victim = rp_cluster_slot_owner(g_nodes, N_NODES, g_slot[0]);
	assert_true(victim >= 0);
	t0 = rp_now_ms();
	assert_int_equal(rp_signal(&g_nodes[victim], SIGKILL), 0);
	g_watch = victim;
	memset(g_missed, 0, sizeof(g_missed));
	g_call_max_ms = 0;
	ms = until_agree(100, 20000, &fails);
	g_watch = -1;
	print_message("calls that left a limit unanswered: %d (dead master's), %d and %d (healthy "
		      "masters'); slowest call %llu ms\n",
		      g_missed[0], g_missed[1], g_missed[2], (unsigned long long)g_call_max_ms);
	assert_true(g_missed[0] > 0);
	assert_int_equal(g_missed[1], 0);
	assert_int_equal(g_missed[2], 0);
	assert_true(g_call_max_ms < KT_STORE_CALL_BUDGET_MIN_MS / 2);
	promoted = rp_cluster_slot_owner(g_nodes, N_NODES, g_slot[0]);
	print_message("master :%d killed; replica :%d promoted (seen after %lld ms); all %d nodes agree on "
		      "all %d limits again after %lld ms (%d calls not fully answered meanwhile)\n",
		      g_nodes[victim].port, promoted >= 0 ? g_nodes[promoted].port : -1,
		      g_moved_ms ? (long long)(g_moved_ms - t0) : -1LL, N_ST, N_LIM,
		      ms < 0 ? -1 : (long long)(rp_now_ms() - t0), fails);
	if (ms < 0)
		print_error("last error: %s\n", err);
	assert_true(ms >= 0);
	assert_true(promoted >= 0 && promoted != victim);
}

static void test_config_errors(void **state)
{
	struct kt_store_cfg c;
	struct kt_store *s = NULL;
	int port = 7000;

	(void)state;
	cfg_cluster(&c, &port, 0);
	assert_int_equal(kt_store_open(&s, &c, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "store (line 9): cluster: 0 seed addrs, need 1..8");
	cfg_cluster(&c, &port, 1);
	c.db = 3;
	assert_int_equal(kt_store_open(&s, &c, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "store (line 9): cluster: db 3: Redis Cluster has only db 0");
	assert_null(s);
	/* an unreachable seed: a one-line error and DOWN */
	port = rp_free_port();
	cfg_cluster(&c, &port, 1);
	assert_int_equal(kt_store_open(&s, &c, err, sizeof(err)), 0);
	assert_true(kt_store_ping(s, err, sizeof(err)) < 0);
	assert_null(strchr(err, '\n'));
	assert_non_null(strstr(err, "127.0.0.1:"));
	assert_int_equal(kt_store_state(s, NULL, NULL), KT_STORE_DOWN);
	kt_store_close(s);
}

/* a test with the per-test setup and teardown */
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_config_errors),
		T(test_agree_three_masters),
		T(test_moved),
		T(test_ask_during_migration),
		T(test_noscript_after_flush),
		T(test_failover),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
