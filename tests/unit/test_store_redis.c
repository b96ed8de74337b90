/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Store client against real redis-server / redis-sentinel processes on free
 * loopback ports, plus a fake server for replies Redis would never send. */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
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
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <cmocka.h>
#include "fakeredis.h"
#include "kt_storefx.h"
#include "ktest.h"
#include "redis_proc.h"
#include "relay.h"
#include "store/store.h"

#define PREFIX "kttest"
#define LIVE KT_POOL_REPORT_LIVE

static struct rp_proc g_procs[4];  /* per-test servers, stopped by teardown */
static char err[KT_ERR_LEN];

/* a store call must succeed; else its message (err) is printed */
#define ASSERT_OK(expr) RP_ASSERT_OK(expr, err)

static void cfg_single(struct kt_store_cfg *c, int port)
{
	kt_storefx_cfg_single(c, port, PREFIX);
}

static struct kt_store *open_cfg(const struct kt_store_cfg *c)
{
	struct kt_store *s;

	ASSERT_OK(kt_store_open(&s, c, err, sizeof(err)));
	return kt_storefx_track(s);
}

static struct kt_store *open_single(int port, const char *user, const char *pass, int db)
{
	struct kt_store_cfg c;

	cfg_single(&c, port);
	c.redis_auth.username = (char *)user;
	c.redis_auth.password = (char *)pass;
	c.db = db;
	return open_cfg(&c);
}

static struct kt_pool_answer beat(struct kt_store *s, const char *limit, const char *id, int size,
				  uint64_t stale_ms)
{
	struct kt_pool_member m = { id, size };
	struct kt_pool_answer a = { -1, -1, -1 };

	ASSERT_OK(kt_store_heartbeat(s, limit, &m, 1, stale_ms, &a, err, sizeof(err)));
	assert_true(a.size >= a.live);
	return a;
}

static void key(char *buf, size_t len, const char *limit, const char *suffix)
{
	snprintf(buf, len, PREFIX ":pool:{%s}:%s", limit, suffix);
}

/* 1 if id is in the zset suffix of limit, 0 if not. */
static int in_zset(const char *limit, const char *suffix, const char *id)
{
	char k[128];
	redisReply *r;
	int ret;

	key(k, sizeof(k), limit, suffix);
	r = rp_command(&kfx_master, "ZSCORE %s %s", k, id);
	assert_non_null(r);
	ret = r->type == REDIS_REPLY_STRING;
	freeReplyObject(r);
	return ret;
}

/* live: heartbeat in hb */
static int in_hb(const char *limit, const char *id)
{
	return in_zset(limit, "hb", id);
}

/* lapsed: out of hb, fallback rate still held */
static int in_lapsed(const char *limit, const char *id)
{
	return in_zset(limit, "lapsed", id);
}

static int in_size(const char *limit, const char *id)
{
	char k[128];

	key(k, sizeof(k), limit, "size");
	return (int)rp_command_int(&kfx_master, -1, "HEXISTS %s %s", k, id);
}

static long long server_time_ms(const struct rp_proc *p)
{
	long long t = rp_time_ms(p);

	assert_true(t > 0);
	return t;
}

static long long cmd_calls(const struct rp_proc *p, const char *cmd)
{
	char field[64], v[256];

	snprintf(field, sizeof(field), "cmdstat_%s", cmd);
	if (rp_info_field(p, "commandstats", field, v, sizeof(v)))
		return 0;
	assert_memory_equal(v, "calls=", 6);
	return atoll(v + 6);
}

/* the fake server (tests/lib/fakeredis.h) serves canned replies to check
 * reply validation */
static struct ktest_fakeredis g_fake;

/* ---- fixtures ---- */

static int teardown(void **state)
{
	(void)state;
	kt_storefx_close_all();
	ktest_fakeredis_stop(&g_fake);
	kt_storefx_stop_all(g_procs, sizeof(g_procs) / sizeof(g_procs[0]));
	return 0;
}

/* ---- agreement ---- */

static void test_agree_one(void **state)
{
	struct kt_store *s = open_single(kfx_master.port, NULL, NULL, 0);
	struct kt_pool_answer a;
	uint64_t since, next;
	char ep[64], want[64];

	(void)state;
	/* lazy: nothing happened yet */
	assert_int_equal(kt_store_state(s, &since, &next), KT_STORE_IDLE);
	assert_int_equal(since, 0);
	assert_false(kt_store_connected(s));
	a = beat(s, "one", "n1/a", LIVE, 3000);
	ASSERT_ANS(a, 1, 1, 1);
	assert_int_equal(kt_store_state(s, &since, &next), KT_STORE_UP);
	assert_true(since > 0);
	assert_true(kt_store_connected(s));
	snprintf(want, sizeof(want), "127.0.0.1:%d", kfx_master.port);
	assert_string_equal(kt_store_endpoint(s, ep, sizeof(ep)), want);
	/* explicit size 1 agrees too */
	a = beat(s, "one", "n1/a", 1, 3000);
	ASSERT_ANS(a, 1, 1, 1);
}

static void test_agree_three_members_one_node(void **state)
{
	struct kt_store *s = open_single(kfx_master.port, NULL, NULL, 0);
	struct kt_pool_member m[3] = { { "n1/a", LIVE }, { "n1/b", LIVE }, { "n1/c", LIVE } };
	struct kt_pool_answer a;

	(void)state;
	ASSERT_OK(kt_store_heartbeat(s, "three", m, 3, 3000, &a, err, sizeof(err)));
	ASSERT_ANS(a, 1, 3, 3);
	for (int i = 0; i < 3; i++)
		m[i].reported_size = 3;
	ASSERT_OK(kt_store_heartbeat(s, "three", m, 3, 3000, &a, err, sizeof(err)));
	ASSERT_ANS(a, 1, 3, 3);
	/* one member saying 2 breaks agreement: the larger size wins */
	m[1].reported_size = 2;
	ASSERT_OK(kt_store_heartbeat(s, "three", m, 3, 3000, &a, err, sizeof(err)));
	ASSERT_ANS(a, 0, 3, 3);
}

/* The agreement rule (docs/stores.md, "How agreement works"): nodes report
 * the previous answer's live count. */
static void test_disagree_then_converge(void **state)
{
	struct kt_store *A = open_single(kfx_master.port, NULL, NULL, 0);
	struct kt_store *B = open_single(kfx_master.port, NULL, NULL, 0);
	struct kt_pool_answer a;

	(void)state;
	a = beat(A, "dis", "A", 2, 3000);
	ASSERT_ANS(a, 0, 2, 1); /* alone, but says 2: no agreement */
	a = beat(B, "dis", "B", 5, 3000);
	ASSERT_ANS(a, 0, 5, 2); /* largest reported wins */
	a = beat(A, "dis", "A", a.live, 3000);
	ASSERT_ANS(a, 0, 5, 2);
	a = beat(B, "dis", "B", a.live, 3000);
	ASSERT_ANS(a, 1, 2, 2);
	a = beat(A, "dis", "A", a.live, 3000);
	ASSERT_ANS(a, 1, 2, 2);
}

/* Joins with KT_POOL_REPORT_LIVE: every node agrees within 2 of its heartbeats. */
static void test_join_report_live(void **state)
{
	struct kt_store *s[3];
	const char *ids[3] = { "A", "B", "C" };
	struct kt_pool_answer a;

	(void)state;
	for (int i = 0; i < 3; i++)
		s[i] = open_single(kfx_master.port, NULL, NULL, 0);
	a = beat(s[0], "join", ids[0], LIVE, 3000);
	ASSERT_ANS(a, 1, 1, 1);
	a = beat(s[1], "join", ids[1], LIVE, 3000);
	ASSERT_ANS(a, 0, 2, 2); /* A still says 1 */
	a = beat(s[2], "join", ids[2], LIVE, 3000);
	ASSERT_ANS(a, 0, 3, 3);
	a = beat(s[0], "join", ids[0], LIVE, 3000);
	ASSERT_ANS(a, 0, 3, 3); /* B still says 2 */
	a = beat(s[1], "join", ids[1], LIVE, 3000);
	ASSERT_ANS(a, 1, 3, 3);
	a = beat(s[2], "join", ids[2], LIVE, 3000);
	ASSERT_ANS(a, 1, 3, 3);
	a = beat(s[0], "join", ids[0], LIVE, 3000);
	ASSERT_ANS(a, 1, 3, 3);
}

/* A member that stops heartbeating is pruned after stale_ms; the pool shrinks
 * within stale + 2 heartbeats and its entries vanish from both keys. */
static void test_stale_shrink(void **state)
{
	const uint64_t stale = 300, hb = 100;
	struct kt_store *s[3];
	const char *ids[3] = { "sA", "sB", "sC" };
	struct kt_pool_answer a[3];
	uint64_t t0, elapsed = 0;
	int round, i;

	(void)state;
	for (i = 0; i < 3; i++)
		s[i] = open_single(kfx_master.port, NULL, NULL, 0);
	for (round = 0; round < 3; round++)
		for (i = 0; i < 3; i++)
			a[i] = beat(s[i], "stale", ids[i], LIVE, stale);
	for (i = 0; i < 3; i++)
		ASSERT_ANS(a[i], 1, 3, 3);
	/* C dies now */
	t0 = rp_now_ms();
	for (round = 0; round < 20; round++) {
		rp_sleep_ms((int)hb);
		a[0] = beat(s[0], "stale", ids[0], LIVE, stale);
		a[1] = beat(s[1], "stale", ids[1], LIVE, stale);
		if (round == 0)
			assert_int_equal(a[0].live, 3); /* not pruned before stale_ms */
		assert_true(a[0].size >= 2 && a[1].size >= 2);
		if (a[0].agree && a[0].size == 2 && a[1].agree && a[1].size == 2) {
			elapsed = rp_now_ms() - t0;
			break;
		}
	}
	assert_true(elapsed > 0);
	if (elapsed > stale + 2 * hb + 150)
		fail_msg("shrink took %llu ms, stale %llu + 2 x %llu", (unsigned long long)elapsed,
			 (unsigned long long)stale, (unsigned long long)hb);
	assert_int_equal(in_hb("stale", "sC"), 0);
	assert_int_equal(in_size("stale", "sC"), 0);
	assert_int_equal(in_hb("stale", "sA"), 1);
	assert_int_equal(in_size("stale", "sA"), 1);
}

/* Leases: a member silent for stale_ms lapses (out of the live count at
 * once) but its fallback rate stays reserved for hold_ms more, because its
 * kernel buckets may still admit that much; then it is forgotten. */
static void test_lapsed_member_reserved(void **state)
{
	const uint64_t stale = 200, hold = 600;
	struct kt_store *s[2];
	struct kt_pool_member ma = { "rA", LIVE }, mb = { "rB", LIVE };
	struct kt_pool_req q = { .limit = "lapse", .n_members = 1, .stale_ms = stale,
				 .save_ramp = -1, .hold_ms = hold };
	struct kt_pool_answer a;
	uint64_t t0;
	bool saw_reserved = false;

	(void)state;
	s[0] = open_single(kfx_master.port, NULL, NULL, 0);
	s[1] = open_single(kfx_master.port, NULL, NULL, 0);
	q.members = &ma;
	q.fallback_rate = 2.5;
	ASSERT_OK(kt_store_heartbeat_many(s[0], &q, 1, &a, err, sizeof(err)));
	q.members = &mb;
	q.fallback_rate = 0.25;
	ASSERT_OK(kt_store_heartbeat_many(s[1], &q, 1, &a, err, sizeof(err)));
	ASSERT_ANS(a, 0, 2, 2);
	assert_true(a.reserved == 0);
	/* A goes silent; B keeps beating */
	t0 = rp_now_ms();
	for (int round = 0; round < 40 && rp_now_ms() - t0 < 2000; round++) {
		uint64_t age;

		rp_sleep_ms(50);
		age = rp_now_ms() - t0;
		ASSERT_OK(kt_store_heartbeat_many(s[1], &q, 1, &a, err, sizeof(err)));
		if (age < stale - 20) {
			assert_int_equal(a.live, 2);
			assert_true(a.reserved == 0);
		} else if (age > stale + 20 && age < stale + hold - 20) {
			/* lapsed: not live, its fallback held */
			assert_int_equal(a.live, 1);
			assert_true(a.reserved == 2.5);
			assert_int_equal(in_hb("lapse", "rA"), 0);
			assert_int_equal(in_lapsed("lapse", "rA"), 1);
			assert_int_equal(in_size("lapse", "rA"), 0);
			saw_reserved = true;
		} else if (age > stale + hold + 20) {
			assert_int_equal(a.live, 1);
			assert_true(a.reserved == 0);
			assert_int_equal(in_hb("lapse", "rA"), 0);
			assert_int_equal(in_lapsed("lapse", "rA"), 0);
			break;
		}
	}
	assert_true(saw_reserved);
	assert_true(rp_now_ms() - t0 > stale + hold);
}

static void test_leave_shrinks(void **state)
{
	struct kt_store *A = open_single(kfx_master.port, NULL, NULL, 0);
	struct kt_store *B = open_single(kfx_master.port, NULL, NULL, 0);
	struct kt_pool_member am[2] = { { "A/1", LIVE }, { "A/2", LIVE } };
	const char *gone[2] = { "A/2", "never-joined" };
	struct kt_pool_answer a;

	(void)state;
	ASSERT_OK(kt_store_heartbeat(A, "leave", am, 2, 5000, &a, err, sizeof(err)));
	a = beat(B, "leave", "B/1", LIVE, 5000);
	ASSERT_ANS(a, 0, 3, 3);
	ASSERT_OK(kt_store_heartbeat(A, "leave", am, 2, 5000, &a, err, sizeof(err)));
	ASSERT_ANS(a, 1, 3, 3);

	ASSERT_OK(kt_store_leave(A, "leave", gone, 2, err, sizeof(err)));
	assert_int_equal(in_hb("leave", "A/2"), 0);
	assert_int_equal(in_size("leave", "A/2"), 0);
	/* first heartbeat of each node after the leave: B (which still says 3) blocks A */
	ASSERT_OK(kt_store_heartbeat(A, "leave", am, 1, 5000, &a, err, sizeof(err)));
	ASSERT_ANS(a, 0, 3, 2);
	a = beat(B, "leave", "B/1", LIVE, 5000);
	ASSERT_ANS(a, 1, 2, 2);
	ASSERT_OK(kt_store_heartbeat(A, "leave", am, 1, 5000, &a, err, sizeof(err)));
	ASSERT_ANS(a, 1, 2, 2);
	/* leaving with no ids is a no-op */
	ASSERT_OK(kt_store_leave(A, "leave", NULL, 0, err, sizeof(err)));
}

/* Heartbeats are stamped with the server's TIME: a member stamped an hour
 * ago (by the server's clock) is pruned; ours carries the server time. */
static void test_server_time(void **state)
{
	struct kt_store *s = open_single(kfx_master.port, NULL, NULL, 0);
	char hbk[128], szk[128];
	long long t = server_time_ms(&kfx_master), score;
	struct kt_pool_answer a;
	redisReply *r;

	(void)state;
	key(hbk, sizeof(hbk), "time", "hb");
	key(szk, sizeof(szk), "time", "size");
	assert_int_equal(rp_command_int(&kfx_master, -1, "ZADD %s %lld ghost", hbk, t - 3600 * 1000), 1);
	assert_int_equal(rp_command_int(&kfx_master, -1, "HSET %s ghost 2", szk), 1);
	a = beat(s, "time", "real", LIVE, 10000);
	ASSERT_ANS(a, 1, 1, 1);
	assert_int_equal(in_hb("time", "ghost"), 0);
	assert_int_equal(in_size("time", "ghost"), 0);
	r = rp_command(&kfx_master, "ZSCORE %s real", hbk);
	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_STRING);
	score = atoll(r->str);
	freeReplyObject(r);
	assert_true(score >= t && score <= server_time_ms(&kfx_master));
}

static void test_keys_expire(void **state)
{
	struct kt_store *s = open_single(kfx_master.port, NULL, NULL, 0);
	char hbk[128], szk[128];
	long long pttl;

	(void)state;
	key(hbk, sizeof(hbk), "ttl", "hb");
	key(szk, sizeof(szk), "ttl", "size");
	beat(s, "ttl", "m", LIVE, 2000);
	pttl = rp_command_int(&kfx_master, -9, "PTTL %s", hbk);
	assert_true(pttl > 5000 && pttl <= 6000); /* KT_STORE_EXPIRE_FACTOR x stale */
	pttl = rp_command_int(&kfx_master, -9, "PTTL %s", szk);
	assert_true(pttl > 5000 && pttl <= 6000);
	/* once nobody heartbeats, everything disappears on its own */
	beat(s, "ttl", "m", LIVE, 100);
	rp_sleep_ms(450);
	assert_int_equal(rp_command_int(&kfx_master, -1, "EXISTS %s %s", hbk, szk), 0);
}

/* The TTLs are set when a heartbeat may have made a key (a new member)
 * and once a third of them has run, not on every heartbeat; every key of
 * the limit has one after every call. */
static void test_keys_ttl_refresh(void **state)
{
	static const char *const suffixes[] = { "hb", "size", "counted", "hist", "sizes", "meta" };
	struct kt_store *s = open_single(kfx_master.port, NULL, NULL, 0);
	char hbk[128], k[128];
	long long first, later, grown;

	(void)state;
	key(hbk, sizeof(hbk), "ttl3", "hb");
	beat(s, "ttl3", "m", LIVE, 1000); /* TTL 3 s */
	first = rp_command_int(&kfx_master, -9, "PTTL %s", hbk);
	assert_in_range(first, 2900, 3000);
	rp_sleep_ms(300);
	beat(s, "ttl3", "m", LIVE, 1000); /* nothing new: left as it was */
	later = rp_command_int(&kfx_master, -9, "PTTL %s", hbk);
	assert_true(later < first - 200);
	beat(s, "ttl3", "m2", LIVE, 1000); /* a new member: set again */
	grown = rp_command_int(&kfx_master, -9, "PTTL %s", hbk);
	assert_in_range(grown, 2900, 3000);
	for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
		key(k, sizeof(k), "ttl3", suffixes[i]);
		assert_in_range(rp_command_int(&kfx_master, -9, "PTTL %s", k), 2800, 3000);
	}
	/* a third run: set again at the next heartbeat */
	rp_sleep_ms(1100);
	beat(s, "ttl3", "m", LIVE, 1000);
	assert_in_range(rp_command_int(&kfx_master, -9, "PTTL %s", hbk), 2900, 3000);
}

static void test_ramp(void **state)
{
	struct kt_store *s = open_single(kfx_master.port, NULL, NULL, 0);
	struct kt_pool_member m = { "r1", LIVE };
	struct kt_pool_req q = {
		.limit = "ramp2", .members = &m, .n_members = 1, .stale_ms = 3000,
		.save_ramp = 7.25, .ramp_ttl_ms = 5000,
	};
	struct kt_pool_answer a;
	char k[128];
	double rate;
	redisReply *r;

	(void)state;
	ASSERT_OK(kt_store_load_ramp(s, "ramp", &rate, err, sizeof(err)));
	assert_true(rate < 0);
	ASSERT_OK(kt_store_save_ramp(s, "ramp", 42.5, 400, err, sizeof(err)));
	ASSERT_OK(kt_store_load_ramp(s, "ramp", &rate, err, sizeof(err)));
	assert_true(rate == 42.5);
	key(k, sizeof(k), "ramp", "ramp");
	assert_in_range(rp_command_int(&kfx_master, -9, "PTTL %s", k), 1, 400);
	/* fractional rates survive the round trip exactly */
	ASSERT_OK(kt_store_save_ramp(s, "ramp", 0.1 + 0.2, 150, err, sizeof(err)));
	ASSERT_OK(kt_store_load_ramp(s, "ramp", &rate, err, sizeof(err)));
	assert_true(rate == 0.1 + 0.2);
	rp_sleep_ms(300);
	ASSERT_OK(kt_store_load_ramp(s, "ramp", &rate, err, sizeof(err)));
	assert_true(rate < 0); /* expired */

	/* saved by the heartbeat itself, in the same round trip */
	ASSERT_OK(kt_store_heartbeat_many(s, &q, 1, &a, err, sizeof(err)));
	ASSERT_ANS(a, 1, 1, 1);
	key(k, sizeof(k), "ramp2", "ramp");
	r = rp_command(&kfx_master, "GET %s", k);
	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_STRING);
	assert_string_equal(r->str, "7.25");
	freeReplyObject(r);
	assert_in_range(rp_command_int(&kfx_master, -9, "PTTL %s", k), 4000, 5000);

	/* values written by someone else are validated */
	key(k, sizeof(k), "rampbad", "ramp");
	const char *bad[] = { "abc", "nan", "-3", "1e400", "5x", "" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *argv[3] = { "SET", k, bad[i] };

		r = rp_command_argv(&kfx_master, 3, argv);
		assert_non_null(r);
		freeReplyObject(r);
		rate = 1;
		assert_int_equal(kt_store_load_ramp(s, "rampbad", &rate, err, sizeof(err)), -EPROTO);
		assert_true(rate < 0);
		assert_non_null(strstr(err, "malformed value"));
	}
	assert_int_equal(rp_command_int(&kfx_master, -1, "DEL %s", k), 1);
	assert_int_equal(rp_command_int(&kfx_master, -1, "HSET %s f 1", k), 1);
	assert_int_equal(kt_store_load_ramp(s, "rampbad", &rate, err, sizeof(err)), -EIO);
	assert_non_null(strstr(err, "WRONGTYPE"));
	assert_true(kt_store_connected(s));
}

/* All limits of a node in one EVALSHA. */
static void test_many_one_round_trip(void **state)
{
	struct kt_store *s = open_single(kfx_master.port, NULL, NULL, 0);
	struct kt_pool_member m1[1] = { { "x", LIVE } }, m2[2] = { { "y", LIVE }, { "z", 4 } };
	struct kt_pool_req q[3] = {
		{ .limit = "many.1", .members = m1, .n_members = 1, .stale_ms = 3000, .save_ramp = -1 },
		{ .limit = "many.2", .members = m2, .n_members = 2, .stale_ms = 3000, .save_ramp = -1 },
		{ .limit = "many-3", .members = NULL, .n_members = 0, .stale_ms = 3000, .save_ramp = -1 },
	};
	struct kt_pool_answer a[3];
	struct kt_store_stats st0, st1;
	long long calls0;

	(void)state;
	ASSERT_OK(kt_store_ping(s, err, sizeof(err))); /* connection setup out of the way */
	kt_store_get_stats(s, &st0);
	calls0 = cmd_calls(&kfx_master, "evalsha");
	ASSERT_OK(kt_store_heartbeat_many(s, q, 3, a, err, sizeof(err)));
	ASSERT_ANS(a[0], 1, 1, 1);
	ASSERT_ANS(a[1], 0, 4, 2);
	ASSERT_ANS(a[2], 0, 0, 0); /* nobody there, nothing created */
	kt_store_get_stats(s, &st1);
	assert_int_equal(cmd_calls(&kfx_master, "evalsha"), calls0 + 1);
	assert_int_equal(st1.round_trips - st0.round_trips, 1);
	assert_int_equal(st1.commands - st0.commands, 1);
	assert_int_equal(rp_command_int(&kfx_master, -1, "EXISTS " PREFIX ":pool:{many-3}:hb"), 0);
}

/* A node with many limits sends them in scripts of at most 128 units (a
 * limit 1, a member 1; a limit alone may be more), so no script holds
 * Redis for long, still in one round trip; the steady path works across
 * them. */
static void test_many_bounded_scripts(void **state)
{
	enum { SMALL = 300, BIG = 200 };
	struct kt_store *s = open_single(kfx_master.port, NULL, NULL, 0);
	static struct kt_pool_member one[SMALL], big[BIG];
	static char names[SMALL + 1][32], ids[SMALL + BIG][32];
	static struct kt_pool_req q[SMALL + 1];
	static struct kt_pool_answer a[SMALL + 1];
	struct kt_store_stats st0, st1;
	long long calls0;
	int i;

	(void)state;
	for (i = 0; i <= SMALL; i++) {
		snprintf(names[i], sizeof(names[i]), "chunk%03d", i);
		q[i] = (struct kt_pool_req){ .limit = names[i], .n_members = 1, .stale_ms = 3000, .save_ramp = -1 };
		if (i < SMALL) {
			snprintf(ids[i], sizeof(ids[i]), "n1:%d", i);
			one[i] = (struct kt_pool_member){ ids[i], LIVE };
			q[i].members = &one[i];
		}
	}
	for (i = 0; i < BIG; i++) {
		snprintf(ids[SMALL + i], sizeof(ids[0]), "n1:big%d", i);
		big[i] = (struct kt_pool_member){ ids[SMALL + i], LIVE };
	}
	/* 150 small limits (2 units each: scripts of 64, 64, 22), the big one
	 * alone (201 units), 150 small again */
	memmove(&q[151], &q[150], 150 * sizeof(q[0]));
	q[150] = (struct kt_pool_req){ .limit = names[SMALL], .members = big, .n_members = BIG, .stale_ms = 3000,
				       .save_ramp = -1 };
	ASSERT_OK(kt_store_ping(s, err, sizeof(err)));
	/* 801 units: more than the join budget lets a node's first heartbeat
	 * send (store.h "The start herd"); joined within a few */
	int ret = KT_STORE_PARTIAL;

	for (int beats = 0; ret == KT_STORE_PARTIAL && beats < 10; beats++)
		ret = kt_store_heartbeat_many(s, q, SMALL + 1, a, err, sizeof(err));
	ASSERT_OK(ret);
	for (int round = 0; round < 2; round++) {
		kt_store_get_stats(s, &st0);
		calls0 = cmd_calls(&kfx_master, "evalsha");
		ASSERT_OK(kt_store_heartbeat_many(s, q, SMALL + 1, a, err, sizeof(err)));
		kt_store_get_stats(s, &st1);
		for (i = 0; i <= SMALL; i++) {
			if (i == 150)
				ASSERT_ANS(a[i], 1, BIG, BIG);
			else
				ASSERT_ANS(a[i], 1, 1, 1);
		}
		assert_int_equal(cmd_calls(&kfx_master, "evalsha") - calls0, 7);
		assert_int_equal(st1.hb_scripts - st0.hb_scripts, 7);
		assert_int_equal(st1.round_trips - st0.round_trips, 1);
		/* joined, and nothing changes: all steady */
		assert_int_equal(st1.hb_steady - st0.hb_steady, SMALL + 1);
		assert_int_equal(st1.hb_full - st0.hb_full, 0);
	}
	/* the server lost the script: all 7 sent again as EVAL, in one more
	 * round trip */
	redisReply *r = rp_command(&kfx_master, "SCRIPT FLUSH");

	assert_non_null(r);
	freeReplyObject(r);
	kt_store_get_stats(s, &st0);
	calls0 = cmd_calls(&kfx_master, "eval");
	ASSERT_OK(kt_store_heartbeat_many(s, q, SMALL + 1, a, err, sizeof(err)));
	kt_store_get_stats(s, &st1);
	ASSERT_ANS(a[SMALL], 1, 1, 1);
	assert_int_equal(cmd_calls(&kfx_master, "eval") - calls0, 7);
	assert_int_equal(st1.round_trips - st0.round_trips, 2);
	assert_int_equal(st1.hb_steady - st0.hb_steady, SMALL + 1);
}

/* After SCRIPT FLUSH (or a restart) the script is sent again with EVAL. */
static void test_noscript_fallback(void **state)
{
	struct kt_store *s = open_single(kfx_master.port, NULL, NULL, 0);
	struct kt_pool_answer a;
	long long evals;
	redisReply *r;

	(void)state;
	beat(s, "flush", "f", LIVE, 3000);
	r = rp_command(&kfx_master, "SCRIPT FLUSH");
	assert_non_null(r);
	freeReplyObject(r);
	evals = cmd_calls(&kfx_master, "eval");
	a = beat(s, "flush", "f", LIVE, 3000);
	ASSERT_ANS(a, 1, 1, 1);
	assert_int_equal(cmd_calls(&kfx_master, "eval"), evals + 1);
	a = beat(s, "flush", "f", LIVE, 3000); /* EVAL cached it again: back to EVALSHA */
	ASSERT_ANS(a, 1, 1, 1);
	assert_int_equal(cmd_calls(&kfx_master, "eval"), evals + 1);
}

/* Data written by hand: orphans are cleaned, garbage sizes disagree, a key of
 * the wrong type is an error on that call only. */
static void test_bad_data(void **state)
{
	struct kt_store *s = open_single(kfx_master.port, NULL, NULL, 0);
	char hbk[128], szk[128];
	struct kt_pool_member m = { "ok", LIVE };
	struct kt_pool_answer a;

	(void)state;
	key(hbk, sizeof(hbk), "bad", "hb");
	key(szk, sizeof(szk), "bad", "size");
	assert_int_equal(rp_command_int(&kfx_master, -1, "HSET %s orphan 4", szk), 1);
	a = beat(s, "bad", "ok", LIVE, 60000);
	ASSERT_ANS(a, 1, 1, 1);
	assert_int_equal(in_size("bad", "orphan"), 0);

	const char *garbage[] = { "abc", "1e300", "2.5", "-1", "0" };
	for (size_t i = 0; i < sizeof(garbage) / sizeof(garbage[0]); i++) {
		assert_in_range(rp_command_int(&kfx_master, -1, "ZADD %s %lld weird", hbk,
					       server_time_ms(&kfx_master)), 0, 1);
		assert_in_range(rp_command_int(&kfx_master, -1, "HSET %s weird %s", szk, garbage[i]), 0, 1);
		a = beat(s, "bad", "ok", LIVE, 60000);
		ASSERT_ANS(a, 0, 2, 2);
	}
	/* a live member that never wrote a size */
	assert_int_equal(rp_command_int(&kfx_master, -1, "HDEL %s weird", szk), 1);
	a = beat(s, "bad", "ok", LIVE, 60000);
	ASSERT_ANS(a, 0, 2, 2);

	assert_int_equal(rp_command_int(&kfx_master, -1, "DEL " PREFIX ":pool:{wrong}:hb"), 0);
	redisReply *r = rp_command(&kfx_master, "SET " PREFIX ":pool:{wrong}:hb x");
	assert_non_null(r);
	freeReplyObject(r);
	assert_int_equal(kt_store_heartbeat(s, "wrong", &m, 1, 3000, &a, err, sizeof(err)), -EIO);
	assert_non_null(strstr(err, "WRONGTYPE"));
	assert_non_null(strstr(err, "heartbeat"));
	assert_true(kt_store_connected(s)); /* the server is fine: no reconnect */
	/* ...but the store is not up: a heartbeat went unanswered */
	struct kt_store_errors e;
	kt_store_get_errors(s, &e);
	assert_int_equal(e.kind, KT_SERR_WRONGTYPE);
	assert_int_equal(e.count[KT_SERR_WRONGTYPE], 1);
	assert_true(e.since_ns > 0 && strstr(e.text, "WRONGTYPE"));
	assert_int_equal(kt_store_state(s, NULL, NULL), KT_STORE_FAILING);
	a = beat(s, "bad", "ok", LIVE, 60000);
	assert_int_equal(a.live, 2);
	kt_store_get_errors(s, &e);
	assert_int_equal(kt_store_state(s, NULL, NULL), KT_STORE_UP);
	assert_true(e.since_ns == 0 && e.episode_kinds == 0); /* the episode ended */
	assert_int_equal(e.kind, KT_SERR_WRONGTYPE);         /* the last error is kept */
}

/* Each failure is named by its kind; a connection that answers with errors
 * is failing, an oversized claim drops it before the body is read. */
/* The kind of the failed heartbeat on s (waiting out a back-off). */
static enum kt_store_err_kind failed_kind(struct kt_store *s)
{
	struct kt_pool_member m = { "m", LIVE };
	struct kt_store_errors e;
	struct kt_pool_answer a;
	uint64_t t0 = rp_now_ms();
	int ret;

	while ((ret = kt_store_heartbeat(s, "t", &m, 1, 3000, &a, err, sizeof(err))) == -EAGAIN &&
	       rp_now_ms() - t0 < 3000)
		rp_sleep_ms(20);
	assert_int_not_equal(ret, 0);
	kt_store_get_errors(s, &e);
	print_message("%s: %s\n", kt_store_err_kind_name(e.kind), e.text);
	assert_string_equal(e.text, err);
	assert_int_equal(e.count[e.kind], 1);
	return e.kind;
}

/* The transport's kinds: nothing listening, a wrong password, a server
 * that never answers, TLS spoken to a plain port. */
static void test_error_kinds_transport(void **state)
{
	struct rp_opts o = { .password = "right-pass" };
	struct kt_store_cfg c;
	struct rp_proc locked;
	struct kt_store *s;

	(void)state;
	s = open_single(rp_free_port(), NULL, NULL, 0);
	assert_int_equal(failed_kind(s), KT_SERR_CONNECT);
	assert_int_equal(rp_start_master(&locked, &o), 0);
	s = open_single(locked.port, NULL, "wrong-pass", 0);
	assert_int_equal(failed_kind(s), KT_SERR_AUTH);
	assert_null(strstr(err, "wrong-pass"));
	rp_stop(&locked);
	assert_int_equal(ktest_fakeredis_start(&g_fake), 0);
	ktest_fakeredis_set(&g_fake, ""); /* never answers */
	s = open_single(g_fake.port, NULL, NULL, 0);
	assert_int_equal(failed_kind(s), KT_SERR_TIMEOUT);
	cfg_single(&c, g_fake.port);
	c.redis_tls.enabled = true;
	c.redis_tls.insecure_skip_verify = true;
	s = open_cfg(&c);
	assert_int_equal(failed_kind(s), KT_SERR_TLS);
}

static void test_error_kinds(void **state)
{
	static const struct {
		const char *reply;
		enum kt_store_err_kind kind;
		int ret;
	} cases[] = {
		{ "-NOSCRIPT No matching script. Please use EVAL.\r\n", KT_SERR_NOSCRIPT, -EIO },
		{ "-ERR something odd\r\n", KT_SERR_ERR, -EIO },
		{ "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
		  KT_SERR_WRONGTYPE, -EIO },
		{ ":1\r\n", KT_SERR_WRONGTYPE, -EPROTO },
		{ "*1\r\n*3\r\n:0\r\n:1\r\n:1\r\n", KT_SERR_PROTOCOL, -EPROTO },
		{ "$1000000000\r\nxx", KT_SERR_OVERSIZED, -EMSGSIZE },
		{ "*1\r\n*2000000000\r\n", KT_SERR_OVERSIZED, -EMSGSIZE },
	};
	struct kt_pool_member m = { "m", LIVE };
	struct kt_store_errors e;
	struct kt_pool_answer a;
	struct kt_store *s;
	unsigned seen = 0;

	(void)state;
	assert_int_equal(ktest_fakeredis_start(&g_fake), 0);
	s = open_single(g_fake.port, NULL, NULL, 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t t0 = rp_now_ms();
		int ret;

		ktest_fakeredis_set(&g_fake, cases[i].reply);
		/* after an oversized reply the store backs off: bounded wait */
		while ((ret = kt_store_heartbeat(s, "fake", &m, 1, 3000, &a, err, sizeof(err))) == -EAGAIN &&
		       rp_now_ms() - t0 < 2000)
			rp_sleep_ms(20);
		if (ret != cases[i].ret)
			fail_msg("case %zu: %d, not %d (%s)", i, ret, cases[i].ret, err);
		kt_store_get_errors(s, &e);
		if (e.kind != cases[i].kind)
			fail_msg("case %zu: kind %s, not %s (%s)", i, kt_store_err_kind_name(e.kind),
				 kt_store_err_kind_name(cases[i].kind), e.text);
		assert_string_equal(e.text, err);
		seen |= 1u << cases[i].kind;
		assert_int_equal(e.episode_kinds, seen);
		assert_int_equal(kt_store_state(s, NULL, NULL),
				 cases[i].kind == KT_SERR_OVERSIZED ? KT_STORE_DOWN : KT_STORE_FAILING);
	}
	assert_non_null(strstr(e.text, "oversized reply"));
	assert_int_equal(e.count[KT_SERR_OVERSIZED], 2);
	assert_int_equal(e.count[KT_SERR_WRONGTYPE], 2);
	assert_int_equal(e.count[KT_SERR_NOSCRIPT], 1);
	assert_string_equal(kt_store_err_kind_name(KT_SERR_NOSCRIPT), "noscript");
	/* an answered heartbeat ends the episode */
	ktest_fakeredis_set(&g_fake, "*3\r\n*4\r\n:0\r\n:4\r\n:2\r\n$3\r\n1.5\r\n:7\r\n:1700000000000\r\n");
	uint64_t t0 = rp_now_ms();
	int ret;
	while ((ret = kt_store_heartbeat(s, "fake", &m, 1, 3000, &a, err, sizeof(err))) == -EAGAIN &&
	       rp_now_ms() - t0 < 2000)
		rp_sleep_ms(20);
	ASSERT_OK(ret);
	kt_store_get_errors(s, &e);
	assert_true(e.since_ns == 0 && e.episode_kinds == 0);
	assert_int_equal(kt_store_state(s, NULL, NULL), KT_STORE_UP);
}

/* ---- incremental counters ---- */

static redisReply *cmd(const char *fmt, ...)
{
	va_list ap;
	redisReply *r;
	redisContext *c = rp_connect(&kfx_master);
	char buf[512];

	assert_non_null(c);
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	r = redisCommand(c, buf);
	redisFree(c);
	assert_non_null(r);
	return r;
}

/* A stored size as the script judges it: 1..KT_STORE_MAX_POOL, or 0 when invalid. */
static int size_value(const char *v)
{
	char *end;
	double x;

	if (!v || !*v)
		return 0;
	x = strtod(v, &end);
	if (*end || !isfinite(x) || x < 1 || x > KT_STORE_MAX_POOL || x != floor(x))
		return 0;
	return (int)x;
}

static double hget_num(const char *limit, const char *suffix, const char *field)
{
	char k[128];
	redisReply *r;
	double v = -1;

	key(k, sizeof(k), limit, suffix);
	r = cmd("HGET %s %s", k, field);
	if (r->type == REDIS_REPLY_STRING)
		v = strtod(r->str, NULL);
	freeReplyObject(r);
	return v;
}

/* Recomputes the pool of limit from hb, size, lapsed and fb the way the old
 * full-scan script did, and checks the counters and the answer a (just
 * returned; nothing changes between calls) against it. */
static void check_counters(const char *limit, const struct kt_pool_answer *a)
{
	char k[128];
	redisReply *hb, *lp;
	int n = 0, ns = 0, bad = 0, hi = 0, nv = 0, vals[64], cnt[64];
	double res = 0;

	key(k, sizeof(k), limit, "hb");
	hb = cmd("ZRANGE %s 0 -1", k);
	for (size_t i = 0; i < hb->elements; i++) {
		char sk[128];
		redisReply *r;
		int v, j;

		key(sk, sizeof(sk), limit, "size");
		r = cmd("HGET %s %s", sk, hb->element[i]->str);
		n++;
		ns += r->type == REDIS_REPLY_STRING;
		v = size_value(r->type == REDIS_REPLY_STRING ? r->str : NULL);
		freeReplyObject(r);
		if (!v) {
			bad++;
			continue;
		}
		for (j = 0; j < nv && vals[j] != v; j++)
			;
		if (j == nv) {
			assert_true(nv < 64);
			vals[nv] = v;
			cnt[nv++] = 0;
		}
		cnt[j]++;
		if (v > hi)
			hi = v;
	}
	freeReplyObject(hb);
	key(k, sizeof(k), limit, "lapsed");
	lp = cmd("ZRANGE %s 0 -1", k);
	for (size_t i = 0; i < lp->elements; i++) {
		double f = hget_num(limit, "fb", lp->element[i]->str);

		if (f >= 0)
			res += f;
	}
	/* the counters */
	assert_int_equal((int)hget_num(limit, "meta", "n") * (n > 0 || lp->elements > 0), n);
	if (n + (int)lp->elements > 0) {
		assert_int_equal((int)hget_num(limit, "meta", "ns"), ns);
		assert_int_equal((int)hget_num(limit, "meta", "bad"), bad);
		assert_int_equal((int)hget_num(limit, "meta", "nl"), (int)lp->elements);
		assert_true(fabs(hget_num(limit, "meta", "res") - res) < 1e-9);
	}
	freeReplyObject(lp);
	key(k, sizeof(k), limit, "hist");
	assert_int_equal(rp_command_int(&kfx_master, -1, "HLEN %s", k), nv);
	for (int j = 0; j < nv; j++) {
		char f[16];

		snprintf(f, sizeof(f), "%d", vals[j]);
		assert_int_equal((int)hget_num(limit, "hist", f), cnt[j]);
	}
	key(k, sizeof(k), limit, "sizes");
	assert_int_equal(rp_command_int(&kfx_master, -1, "ZCARD %s", k), nv);
	key(k, sizeof(k), limit, "counted");
	assert_int_equal(rp_command_int(&kfx_master, -1, "HLEN %s", k), n);
	/* the answer, by the old rules */
	assert_int_equal(a->live, n);
	assert_int_equal(a->size, hi > n ? hi : n);
	assert_int_equal(a->agree, bad == 0 && nv == 1 && hi == n);
	assert_true(fabs(a->reserved - res) < 1e-9);
}

/* One member's heartbeat with a hold and a fallback rate. */
static struct kt_pool_answer beat_hold(struct kt_store *s, const char *limit, const char *id, int size,
				       uint64_t stale, uint64_t hold, double fb)
{
	struct kt_pool_member m = { id, size };
	struct kt_pool_req q = { .limit = limit, .members = &m, .n_members = 1, .stale_ms = stale,
				 .save_ramp = -1, .hold_ms = hold, .fallback_rate = fb };
	struct kt_pool_answer a;

	ASSERT_OK(kt_store_heartbeat_many(s, &q, 1, &a, err, sizeof(err)));
	return a;
}

/* The same, then the counters checked against a full recount. */
static struct kt_pool_answer beat_fb(struct kt_store *s, const char *limit, const char *id, int size,
				     uint64_t stale, uint64_t hold, double fb)
{
	struct kt_pool_answer a = beat_hold(s, limit, id, size, stale, hold, fb);

	check_counters(limit, &a);
	return a;
}

/* Join, size changes, lapse, return from lapse, hold expiry, leave (live and
 * lapsed), an invalid size written by hand: after every call the counters
 * match a full recount and the answer is the full-scan answer. */
static void test_counters_exact(void **state)
{
	const uint64_t stale = 300, hold = 400;
	struct kt_store *s = open_single(kfx_master.port, NULL, NULL, 0);
	const char *ids[4] = { "cA", "cB", "cC", "cD" };
	const double fb[4] = { 1.5, 0.25, 2, 0.125 };
	const char *gone[1];
	struct kt_pool_answer a;
	char hbk[128], szk[128];

	(void)state;
	for (int r = 0; r < 3; r++) /* join, then converge */
		for (int i = 0; i < 4; i++)
			beat_fb(s, "cnt", ids[i], LIVE, stale, hold, fb[i]);
	a = beat_fb(s, "cnt", "cA", LIVE, stale, hold, fb[0]);
	ASSERT_ANS(a, 1, 4, 4);
	/* size changes: explicit sizes, then back */
	beat_fb(s, "cnt", "cB", 7, stale, hold, fb[1]);
	beat_fb(s, "cnt", "cC", 7, stale, hold, fb[2]);
	a = beat_fb(s, "cnt", "cB", 5, stale, hold, fb[1]);
	ASSERT_ANS(a, 0, 7, 4);
	for (int i = 0; i < 4; i++)
		a = beat_fb(s, "cnt", ids[i], LIVE, stale, hold, fb[i]);
	ASSERT_ANS(a, 1, 4, 4);
	/* cC and cD go silent: they lapse, their fallback held */
	for (int r = 0; r < 5; r++) {
		rp_sleep_ms(90);
		beat_fb(s, "cnt", "cA", LIVE, stale, hold, fb[0]);
		a = beat_fb(s, "cnt", "cB", LIVE, stale, hold, fb[1]);
	}
	assert_int_equal(a.live, 2);
	assert_true(a.reserved == 2.125);
	assert_int_equal(in_lapsed("cnt", "cC"), 1);
	/* cC comes back from lapse; cD leaves while lapsed */
	a = beat_fb(s, "cnt", "cC", LIVE, stale, hold, fb[2]);
	ASSERT_ANS(a, 0, 3, 3);
	assert_true(a.reserved == 0.125);
	gone[0] = "cD";
	ASSERT_OK(kt_store_leave(s, "cnt", gone, 1, err, sizeof(err)));
	a = beat_fb(s, "cnt", "cA", LIVE, stale, hold, fb[0]);
	assert_true(a.reserved == 0);
	/* cC lapses again and its hold runs out */
	for (int r = 0; r < 10; r++) {
		rp_sleep_ms(100);
		beat_fb(s, "cnt", "cA", LIVE, stale, hold, fb[0]);
		a = beat_fb(s, "cnt", "cB", LIVE, stale, hold, fb[1]);
	}
	ASSERT_ANS(a, 1, 2, 2);
	assert_true(a.reserved == 0);
	assert_int_equal(in_lapsed("cnt", "cC"), 0);
	/* a live member leaves */
	gone[0] = "cB";
	ASSERT_OK(kt_store_leave(s, "cnt", gone, 1, err, sizeof(err)));
	a = beat_fb(s, "cnt", "cA", LIVE, stale, hold, fb[0]);
	ASSERT_ANS(a, 1, 1, 1);
	/* an invalid size written by hand for a new member, then a valid one */
	key(hbk, sizeof(hbk), "cnt", "hb");
	key(szk, sizeof(szk), "cnt", "size");
	assert_int_equal(rp_command_int(&kfx_master, -1, "ZADD %s %lld hand", hbk, server_time_ms(&kfx_master)), 1);
	assert_int_equal(rp_command_int(&kfx_master, -1, "HSET %s hand 2.5", szk), 1);
	a = beat_fb(s, "cnt", "cA", LIVE, stale, hold, fb[0]);
	ASSERT_ANS(a, 0, 2, 2);
	assert_int_equal((int)hget_num("cnt", "meta", "bad"), 1);
	a = beat_fb(s, "cnt", "hand", 2, stale, hold, 0); /* cA already says 2 */
	ASSERT_ANS(a, 1, 2, 2);
	assert_int_equal((int)hget_num("cnt", "meta", "bad"), 0);
}

/* Counters changed behind the script's back are noticed by the O(1) guard
 * and rebuilt: the next answer is right whatever was corrupted. */
static void test_rebuild_guard(void **state)
{
	struct kt_store *s = open_single(kfx_master.port, NULL, NULL, 0);
	const char *corrupt[] = {
		"HSET %s n 7",          /* meta: wrong live count */
		"HSET %s bad 1",        /* meta: a member counted invalid twice */
		"HSET %s nl 2",         /* meta: lapsed count */
		"HSET %s res -5",       /* meta: reserved below 0 */
		"DEL %s",               /* meta evicted */
		"HINCRBY %s 3 5",       /* hist: a count off */
		"DEL %s",               /* hist evicted */
		"ZADD %s 9 9",          /* sizes: a value nobody reported */
		"DEL %s",               /* counted evicted */
		"ZADD %s 1 ghost",      /* lapsed: someone nobody counted */
	};
	const char *where[] = { "meta", "meta", "meta", "meta", "meta", "hist", "hist", "sizes", "counted",
				"lapsed" };
	struct kt_pool_answer a;
	char k[128];

	(void)state;
	for (int r = 0; r < 2; r++)
		for (int i = 0; i < 3; i++) {
			char id[8];

			snprintf(id, sizeof(id), "g%d", i);
			a = beat_fb(s, "guard", id, LIVE, 60000, 60000, 1);
		}
	ASSERT_ANS(a, 1, 3, 3);
	for (size_t i = 0; i < sizeof(corrupt) / sizeof(corrupt[0]); i++) {
		/* a store of its own: no memo, so the call takes the full path,
		 * which checks the counters (the steady path leaves that to the
		 * next full call: test_steady_path) */
		struct kt_store_cfg c;
		struct kt_store *once;
		redisReply *r;

		cfg_single(&c, kfx_master.port);
		ASSERT_OK(kt_store_open(&once, &c, err, sizeof(err)));

		key(k, sizeof(k), "guard", where[i]);
		r = cmd(corrupt[i], k);
		freeReplyObject(r);
		a = beat_fb(once, "guard", "g0", LIVE, 60000, 60000, 1); /* checks the counters too */
		ASSERT_ANS(a, 1, 3, 3);
		assert_true(a.reserved == 0);
		kt_store_close(once);
	}
	/* a live member removed by hand (hb and size): the pool shrinks at once */
	key(k, sizeof(k), "guard", "hb");
	assert_int_equal(rp_command_int(&kfx_master, -1, "ZREM %s g2", k), 1);
	a = beat_fb(s, "guard", "g0", LIVE, 60000, 60000, 1);
	ASSERT_ANS(a, 0, 3, 2);
}

/* The steady path: a node whose members, sizes and fallback rate have not
 * changed is answered "as before" after renewing its members, without the
 * full path's reads (load's HLENs); every change to the pool still reaches
 * it at its next heartbeat (a join, a lapse); a hand edit of the counters is
 * rebuilt by the next full call, within stale_ms. */
static void test_steady_path(void **state)
{
	const uint64_t stale = 400, hold = 0;
	struct kt_store *na = open_single(kfx_master.port, NULL, NULL, 0);
	struct kt_store *nb = open_single(kfx_master.port, NULL, NULL, 0);
	struct kt_store *nc = open_single(kfx_master.port, NULL, NULL, 0);
	struct kt_pool_answer a;
	char k[128];
	redisReply *r;

	(void)state;
	for (int i = 0; i < 3; i++) {
		beat_fb(na, "steady", "A", LIVE, stale, hold, 2);
		a = beat_fb(nb, "steady", "B", LIVE, stale, hold, 2);
	}
	ASSERT_ANS(a, 1, 2, 2);
	struct kt_store_stats st, st0;

	kt_store_get_stats(na, &st0);
	r = rp_command(&kfx_master, "CONFIG RESETSTAT");
	freeReplyObject(r);
	for (int i = 0; i < 4; i++) {
		rp_sleep_ms(20);
		a = beat_hold(na, "steady", "A", LIVE, stale, hold, 2);
		ASSERT_ANS(a, 1, 2, 2);
	}
	assert_int_equal(cmd_calls(&kfx_master, "evalsha"), 4);
	assert_int_equal(cmd_calls(&kfx_master, "hlen"), 0); /* no full path */
	assert_int_equal(cmd_calls(&kfx_master, "zadd"), 4);  /* A renewed each time */
	/* the script's own count of its commands is Redis's: TIME, HMGET,
	 * ZRANGEBYSCORE, ZCARD and ZADD a steady call */
	kt_store_get_stats(na, &st);
	{
		long long redis = 0;

		for (const char *const *c = (const char *const[]){ "time", "hmget", "zrangebyscore", "zcard", "zadd",
								    "zscore", NULL };
		     *c; c++)
			redis += cmd_calls(&kfx_master, *c);
		assert_int_equal((long long)(st.script_commands - st0.script_commands), redis);
		assert_int_equal(redis, 20);
	}
	assert_true(st.bytes_sent - st0.bytes_sent > 4 * 100); /* keys and ARGV of 4 calls */
	assert_true(st.bytes_received - st0.bytes_received >= 4 * 4); /* ":1\r\n" at least */

	/* A's join was full; its second round acknowledged B's join on the
	 * steady path (its size written), its third steady, then the four
	 * above */
	assert_int_equal(st.hb_full, 1);
	assert_int_equal(st.hb_steady, 6);
	assert_int_equal(st.hb_acked, 1);
	/* a join reaches A at its next heartbeat */
	a = beat_fb(nc, "steady", "C", LIVE, stale, hold, 2);
	assert_int_equal(a.live, 3);
	a = beat_fb(na, "steady", "A", LIVE, stale, hold, 2);
	ASSERT_ANS(a, 0, 3, 3);
	beat_fb(nb, "steady", "B", LIVE, stale, hold, 2);
	a = beat_fb(nc, "steady", "C", LIVE, stale, hold, 2);
	ASSERT_ANS(a, 1, 3, 3);
	/* B goes silent: A and C see it lapse once its lease is over */
	uint64_t t0 = ktest_now_ns();
	do {
		rp_sleep_ms(50);
		beat_fb(nc, "steady", "C", LIVE, stale, hold, 2);
		a = beat_fb(na, "steady", "A", LIVE, stale, hold, 2);
	} while (a.live == 3 && ktest_now_ns() - t0 < 2000000000ULL);
	assert_int_equal(a.live, 2);
	assert_true(ktest_now_ns() - t0 >= (stale - 60) * 1000000ULL);
	assert_true(ktest_now_ns() - t0 < (stale + 200) * 1000000ULL);
	/* counters edited by hand: the answer stays right meanwhile, and the
	 * first full call, within stale_ms, rebuilds them */
	key(k, sizeof(k), "steady", "meta");
	assert_int_equal(rp_command_int(&kfx_master, -1, "HSET %s n 9", k), 0);
	t0 = ktest_now_ns();
	while (ktest_now_ns() - t0 < (stale + 100) * 1000000ULL) {
		rp_sleep_ms(50);
		a = beat_hold(nc, "steady", "C", LIVE, stale, hold, 2);
		ASSERT_ANS(a, 1, 2, 2);
		a = beat_hold(na, "steady", "A", LIVE, stale, hold, 2);
		ASSERT_ANS(a, 1, 2, 2);
	}
	a = beat_fb(na, "steady", "A", LIVE, stale, hold, 2); /* and checks the counters */
	ASSERT_ANS(a, 1, 2, 2);
}

/* A death held for hold_ms (its fallback reserved): the steady path
 * answers it too. After C lapses, one full call lapses it, the others
 * acknowledge or catch up, and until C is forgotten A and B are answered
 * on the steady path with the reserve (read against a full recount); when
 * the first lapsed member is due to be forgotten the full path runs once
 * and the reserve goes. Before, every heartbeat of every node took the
 * full path for the whole hold (60 s by default). A reserve in meta's ans
 * that is no rate (a hand edit) sends the call to the full path. */
static void test_steady_reserve(void **state)
{
	const uint64_t stale = 400, hold = 1200;
	struct kt_store *ns[3] = { open_single(kfx_master.port, NULL, NULL, 0),
				   open_single(kfx_master.port, NULL, NULL, 0),
				   open_single(kfx_master.port, NULL, NULL, 0) };
	const char *ids[3] = { "rA", "rB", "rC" };
	struct kt_store_stats st1[2];
	struct kt_pool_answer a[2];
	uint64_t t0, lapsed_ns = 0, forgot_ns = 0, full = 0, steady = 0;
	char k[128];

	(void)state;
	for (int i = 0; i < 3; i++)
		for (int x = 0; x < 3; x++)
			a[x % 2] = beat_fb(ns[x], "resv", ids[x], LIVE, stale, hold, 2);
	ASSERT_ANS(a[0], 1, 3, 3);
	/* C falls silent: A and B heartbeat every 50 ms */
	t0 = ktest_now_ns();
	while (ktest_now_ns() - t0 < (stale + hold + 1500) * 1000000ULL && !forgot_ns) {
		rp_sleep_ms(50);
		for (int x = 0; x < 2; x++)
			a[x] = beat_fb(ns[x], "resv", ids[x], LIVE, stale, hold, 2);
		if (!lapsed_ns && a[0].live == 2 && a[1].live == 2 && a[0].agree && a[1].agree) {
			lapsed_ns = ktest_now_ns();
			for (int x = 0; x < 2; x++)
				kt_store_get_stats(ns[x], &st1[x]);
		}
		if (lapsed_ns) {
			for (int x = 0; x < 2; x++)
				assert_true(a[x].reserved == 2 || a[x].reserved == 0);
			if (a[0].reserved == 0 && a[1].reserved == 0)
				forgot_ns = ktest_now_ns();
		}
	}
	assert_true(lapsed_ns && forgot_ns);
	for (int x = 0; x < 2; x++) {
		struct kt_store_stats now;

		kt_store_get_stats(ns[x], &now);
		full += now.hb_full - st1[x].hb_full;
		steady += now.hb_steady - st1[x].hb_steady;
		ASSERT_ANS(a[x], 1, 2, 2);
	}
	print_message("C held %.0f ms after A and B agreed without it: %llu full calls, %llu steady\n",
		      (double)(forgot_ns - lapsed_ns) / 1e6, (unsigned long long)full, (unsigned long long)steady);
	/* the forgetting, and the counters' checks every stale_ms (member
	 * leases), each by the first node past due: every call was full */
	assert_true(full <= hold / stale + 2);
	assert_true(steady >= 10);

	/* the reserve again (D lapses), then a hand edit of it */
	struct kt_store *nd = open_single(kfx_master.port, NULL, NULL, 0);

	beat_fb(nd, "resv", "rD", LIVE, stale, hold, 2);
	t0 = ktest_now_ns();
	do {
		rp_sleep_ms(50);
		for (int x = 0; x < 2; x++)
			a[x] = beat_fb(ns[x], "resv", ids[x], LIVE, stale, hold, 2);
	} while (!(a[0].reserved == 2 && a[1].reserved == 2 && a[0].agree && a[1].agree) &&
		 ktest_now_ns() - t0 < 3000000000ULL);
	ASSERT_ANS(a[0], 1, 2, 2);
	assert_true(a[0].reserved == 2);
	key(k, sizeof(k), "resv", "meta");
	for (const char *const *g = (const char *const[]){ "1 2 2 nan", "1 2 2 -2", "1 2 2 2x", "1 2 2 1e99", NULL };
	     *g; g++) {
		struct kt_store_stats b0, b1;

		/* one argument, spaces and all */
		assert_int_equal(rp_command_int(&kfx_master, -1, "HSET %s ans %s", k, *g), 0);
		kt_store_get_stats(ns[0], &b0);
		a[0] = beat_fb(ns[0], "resv", ids[0], LIVE, stale, hold, 2);
		kt_store_get_stats(ns[0], &b1);
		ASSERT_ANS(a[0], 1, 2, 2);
		assert_true(a[0].reserved == 2);
		if (b1.hb_full - b0.hb_full != 1)
			fail_msg("'%s': full %llu, steady %llu", *g, (unsigned long long)(b1.hb_full - b0.hb_full),
				 (unsigned long long)(b1.hb_steady - b0.hb_steady));
	}
}

/* Redis's own time per heartbeat script call (usec_per_call of evalsha) when
 * one node of `nodes`, each with 10 members on one limit, heartbeats. */
static double hb_cost_us(struct kt_store *s, const char *limit, int nodes)
{
	struct kt_pool_member m[10];
	char ids[10][32], v[256];
	struct kt_pool_answer a;
	const int calls = 200;
	redisReply *r;
	double us;

	/* the pool: every node heartbeats twice (the second time all agree) */
	for (int round = 0; round < 2; round++) {
		for (int n = 0; n < nodes; n++) {
			for (int j = 0; j < 10; j++) {
				snprintf(ids[j], sizeof(ids[j]), "node%04d/m%d", n, j);
				m[j].id = ids[j];
				m[j].reported_size = LIVE;
			}
			ASSERT_OK(kt_store_heartbeat(s, limit, m, 10, 600000, &a, err, sizeof(err)));
		}
	}
	ASSERT_ANS(a, 1, nodes * 10, nodes * 10);
	r = rp_command(&kfx_master, "CONFIG RESETSTAT");
	assert_non_null(r);
	freeReplyObject(r);
	for (int c = 0; c < calls; c++) {
		int n = (c * 7) % nodes;

		for (int j = 0; j < 10; j++)
			snprintf(ids[j], sizeof(ids[j]), "node%04d/m%d", n, j);
		ASSERT_OK(kt_store_heartbeat(s, limit, m, 10, 600000, &a, err, sizeof(err)));
	}
	ASSERT_ANS(a, 1, nodes * 10, nodes * 10);
	assert_int_equal(rp_info_field(&kfx_master, "commandstats", "cmdstat_evalsha", v, sizeof(v)), 0);
	assert_non_null(strstr(v, "calls=200,"));
	assert_non_null(strstr(v, "usec_per_call="));
	us = strtod(strstr(v, "usec_per_call=") + 14, NULL);
	print_message("%d nodes x 10 members: heartbeat script %.1f us per call (%s)\n", nodes, us, v);
	return us;
}

/* The script's cost follows this node's members, not the pool: the old full
 * scan took ~3.7 ms per call at 1,000 nodes x 10 members. */
static void test_heartbeat_cost(void **state)
{
	struct kt_store *s = open_single(kfx_master.port, NULL, NULL, 0);
	double small, big;

	(void)state;
	/* the least of three runs each, interleaved: a mean over 200 calls
	 * takes a preemption by another test's process whole (one run read
	 * 309 us at 1,000 nodes, the next three 75-92) */
	small = big = 1e9;
	for (int run = 0; run < 3; run++) {
		double us = hb_cost_us(s, "cost100", 100);

		small = us < small ? us : small;
		us = hb_cost_us(s, "cost1000", 1000);
		big = us < big ? us : big;
	}
	if (big >= 1000)
		fail_msg("1,000 nodes: %.1f us per call, want < 1 ms", big);
	if (big >= 3 * small)
		fail_msg("cost grew from %.1f us (100 nodes) to %.1f us (1,000 nodes)", small, big);
}

static void test_invalid_args(void **state)
{
	struct kt_store_cfg c;
	struct kt_store *s;
	struct kt_pool_member m = { "ok", LIVE };
	struct kt_pool_answer a;
	struct kt_store_stats st;
	double rate;
	char longid[KT_STORE_ID_MAX + 2];

	(void)state;
	cfg_single(&c, 0);
	assert_int_equal(kt_store_open(&s, &c, err, sizeof(err)), -EINVAL);
	assert_null(s);
	assert_non_null(strstr(err, "line 7"));
	cfg_single(&c, 6379);
	c.host = NULL;
	assert_int_equal(kt_store_open(&s, &c, err, sizeof(err)), -EINVAL);
	cfg_single(&c, 6379);
	c.key_prefix = "has space";
	assert_int_equal(kt_store_open(&s, &c, err, sizeof(err)), -EINVAL);
	cfg_single(&c, 6379);
	c.redis_auth.username = "u";
	assert_int_equal(kt_store_open(&s, &c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "without a password"));
	cfg_single(&c, 6379);
	c.kind = KT_STORE_STATIC;
	assert_int_equal(kt_store_open(&s, &c, err, sizeof(err)), -EINVAL);
	cfg_single(&c, 6379);
	c.redis_mode = KT_REDIS_SENTINEL;
	assert_int_equal(kt_store_open(&s, &c, err, sizeof(err)), -EINVAL); /* no endpoints */
	c.n_endpoints = 1;
	c.endpoint_host[0] = "127.0.0.1";
	c.endpoint_port[0] = 26379;
	assert_int_equal(kt_store_open(&s, &c, err, sizeof(err)), -EINVAL); /* no master_name */

	/* bad arguments are refused before any I/O (the port is never used) */
	s = open_single(1, NULL, NULL, 0);
	assert_int_equal(kt_store_heartbeat(s, "a b", &m, 1, 3000, &a, err, sizeof(err)), -EINVAL);
	assert_int_equal(kt_store_heartbeat(s, "", &m, 1, 3000, &a, err, sizeof(err)), -EINVAL);
	assert_int_equal(kt_store_heartbeat(s, "0123456789012345678901234567890123", &m, 1, 3000, &a,
					    err, sizeof(err)), -EINVAL);
	assert_int_equal(kt_store_heartbeat(s, "l", &m, 1, 0, &a, err, sizeof(err)), -EINVAL);
	assert_int_equal(kt_store_heartbeat(s, "l", &m, -1, 3000, &a, err, sizeof(err)), -EINVAL);
	m.reported_size = -1;
	assert_int_equal(kt_store_heartbeat(s, "l", &m, 1, 3000, &a, err, sizeof(err)), -EINVAL);
	m.reported_size = KT_STORE_MAX_POOL + 1;
	assert_int_equal(kt_store_heartbeat(s, "l", &m, 1, 3000, &a, err, sizeof(err)), -EINVAL);
	m.reported_size = 1;
	m.id = "with space";
	assert_int_equal(kt_store_heartbeat(s, "l", &m, 1, 3000, &a, err, sizeof(err)), -EINVAL);
	memset(longid, 'x', sizeof(longid) - 1);
	longid[sizeof(longid) - 1] = 0;
	m.id = longid;
	assert_int_equal(kt_store_heartbeat(s, "l", &m, 1, 3000, &a, err, sizeof(err)), -EINVAL);
	m.id = "";
	assert_int_equal(kt_store_heartbeat(s, "l", &m, 1, 3000, &a, err, sizeof(err)), -EINVAL);
	assert_int_equal(kt_store_save_ramp(s, "l", -1, 1000, err, sizeof(err)), -EINVAL);
	assert_int_equal(kt_store_save_ramp(s, "l", NAN, 1000, err, sizeof(err)), -EINVAL);
	assert_int_equal(kt_store_save_ramp(s, "l", 1, 0, err, sizeof(err)), -EINVAL);
	assert_int_equal(kt_store_load_ramp(s, "l/x", &rate, err, sizeof(err)), -EINVAL);
	kt_store_get_stats(s, &st);
	assert_int_equal(st.round_trips, 0);
	assert_int_equal(kt_store_state(s, NULL, NULL), KT_STORE_IDLE);
}

/* TLS is no longer refused; the files are checked at open (test_store_tls.c
 * covers connections). */
static void test_tls_config_checked(void **state)
{
	struct kt_store_cfg c;
	struct kt_store *s = (struct kt_store *)&c; /* any non-NULL: open must reset it */

	(void)state;
	cfg_single(&c, kfx_master.port);
	c.redis_tls.enabled = true; /* rediss:// alone: the system CA store */
	ASSERT_OK(kt_store_open(&s, &c, err, sizeof(err)));
	assert_non_null(s);
	kt_store_close(s);
	s = (struct kt_store *)&c;
	c.redis_tls.ca_cert = (char *)"/nonexistent/kt-ca.pem";
	assert_int_equal(kt_store_open(&s, &c, err, sizeof(err)), -EIO);
	assert_null(s);
	assert_non_null(strstr(err, "redis_tls: cannot open /nonexistent/kt-ca.pem"));
	cfg_single(&c, kfx_master.port);
	c.redis_mode = KT_REDIS_SENTINEL;
	c.n_endpoints = 1;
	c.endpoint_host[0] = "127.0.0.1";
	c.endpoint_port[0] = kfx_master.port;
	c.master_name = "m";
	c.sentinel_tls.enabled = true;
	c.sentinel_tls.ca_cert = (char *)"/nonexistent/kt-ca.pem";
	assert_int_equal(kt_store_open(&s, &c, err, sizeof(err)), -EIO);
	assert_non_null(strstr(err, "sentinel_tls"));
}

static void test_auth_and_db(void **state)
{
	static const char pw[] = "s3cret-Pw";
	struct rp_opts o = { .password = pw };
	struct rp_proc *p = &g_procs[0];
	struct kt_store *s;
	struct kt_pool_answer a;
	struct kt_pool_member m = { "m", LIVE };
	redisContext *c;
	redisReply *r;

	(void)state;
	ASSERT_OK(rp_start_master(p, &o));

	s = open_single(p->port, NULL, pw, 0);
	ASSERT_OK(kt_store_ping(s, err, sizeof(err)));

	s = open_single(p->port, NULL, "wrong-Pw-123", 0);
	assert_int_equal(kt_store_heartbeat(s, "auth", &m, 1, 3000, &a, err, sizeof(err)), -EACCES);
	assert_non_null(strstr(err, "authentication failed"));
	assert_null(strstr(err, "wrong-Pw-123"));
	assert_null(strstr(kt_store_last_error(s), "wrong-Pw-123"));
	assert_null(strstr(err, pw));
	assert_int_equal(kt_store_state(s, NULL, NULL), KT_STORE_DOWN);

	s = open_single(p->port, NULL, NULL, 0);
	assert_int_equal(kt_store_ping(s, err, sizeof(err)), -EACCES);
	assert_non_null(strstr(err, "NOAUTH"));

	/* Redis 6 ACL user */
	r = rp_command(p, "ACL SETUSER alice on >alice-Pw ~* +@all");
	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_STATUS);
	freeReplyObject(r);
	s = open_single(p->port, "alice", "alice-Pw", 0);
	a = beat(s, "acl", "m", LIVE, 3000);
	ASSERT_ANS(a, 1, 1, 1);
	s = open_single(p->port, "alice", "alice-wrong", 0);
	assert_int_equal(kt_store_ping(s, err, sizeof(err)), -EACCES);
	assert_null(strstr(err, "alice-wrong"));

	/* SELECT db */
	s = open_single(p->port, NULL, pw, 2);
	beat(s, "db", "m", LIVE, 3000);
	c = rp_connect(p);
	assert_non_null(c);
	r = redisCommand(c, "SELECT 2");
	freeReplyObject(r);
	r = redisCommand(c, "EXISTS " PREFIX ":pool:{db}:hb");
	assert_int_equal(r->integer, 1);
	freeReplyObject(r);
	redisFree(c);
	assert_int_equal(rp_command_int(p, -1, "EXISTS " PREFIX ":pool:{db}:hb"), 0);
	s = open_single(p->port, NULL, pw, 99);
	assert_int_equal(kt_store_ping(s, err, sizeof(err)), -EIO);
	assert_non_null(strstr(err, "SELECT 99"));
}

/* Sleeps until the store's next retry time; returns how long that was (ms). */
static uint64_t sleep_until_retry(struct kt_store *s, uint64_t *since)
{
	uint64_t next, now_ns;
	struct timespec ts;

	assert_int_equal(kt_store_state(s, since, &next), KT_STORE_DOWN);
	clock_gettime(CLOCK_BOOTTIME, &ts);
	now_ns = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
	if (next <= now_ns)
		return 0;
	rp_sleep_ms((int)((next - now_ns) / 1000000 + 1));
	return (next - now_ns) / 1000000;
}

/* A frozen server: the call fails within the timeout, later calls fail fast
 * while backing off (capped, jittered), and the store recovers on SIGCONT. */
static void test_sigstop_timeout_and_backoff(void **state)
{
	struct rp_proc *p = &g_procs[0];
	struct kt_store *s;
	struct kt_pool_member m = { "m", LIVE };
	struct kt_pool_answer a;
	uint64_t t0, el, since, since0, next, d, lo = KT_STORE_BACKOFF_MIN_MS, i;
	struct kt_store_stats st;
	int ret;

	(void)state;
	ASSERT_OK(rp_start_master(p, NULL));
	s = open_single(p->port, NULL, NULL, 0);
	beat(s, "stop", "m", LIVE, 3000);
	ASSERT_OK(rp_signal(p, SIGSTOP));

	t0 = rp_now_ms();
	ret = kt_store_heartbeat(s, "stop", &m, 1, 3000, &a, err, sizeof(err));
	el = rp_now_ms() - t0;
	assert_int_equal(ret, -ETIMEDOUT);
	assert_non_null(strstr(err, "timed out"));
	assert_in_range(el, KT_STORE_TIMEOUT_FLOOR_MS - 20, KT_STORE_TIMEOUT_FLOOR_MS + 300);
	assert_int_equal(kt_store_state(s, &since0, &next), KT_STORE_DOWN);
	assert_false(kt_store_connected(s));
	assert_true(next > since0);

	/* while backing off: immediate failure, no I/O */
	t0 = rp_now_ms();
	assert_int_equal(kt_store_heartbeat(s, "stop", &m, 1, 3000, &a, err, sizeof(err)), -EAGAIN);
	assert_true(rp_now_ms() - t0 < 50);
	assert_non_null(strstr(err, "next retry"));

	/* each retry (connect works: the kernel accepts; the reply never comes)
	 * doubles the delay, jittered into [d/2, d] */
	for (i = 0; i < 3; i++) {
		d = sleep_until_retry(s, &since);
		assert_int_equal(since, since0); /* DOWN since the first failure */
		ret = kt_store_heartbeat(s, "stop", &m, 1, 3000, &a, err, sizeof(err));
		assert_int_equal(ret, -ETIMEDOUT);
		assert_in_range(d, lo / 2 > 60 ? lo / 2 - 60 : 0, lo); /* the delay before this retry */
		lo *= 2;
	}
	d = sleep_until_retry(s, &since);
	assert_in_range(d, lo / 2 > 60 ? lo / 2 - 60 : 0, lo);
	kt_store_get_stats(s, &st);
	assert_int_equal(st.failures, 4);

	ASSERT_OK(rp_signal(p, SIGCONT));
	t0 = rp_now_ms();
	do {
		rp_sleep_ms(50);
		ret = kt_store_heartbeat(s, "stop", &m, 1, 3000, &a, err, sizeof(err));
	} while (ret == -EAGAIN && rp_now_ms() - t0 < 3000);
	ASSERT_OK(ret);
	ASSERT_ANS(a, 1, 1, 1);
	assert_int_equal(kt_store_state(s, &since, NULL), KT_STORE_UP);
	assert_true(since > since0);

	/* killed: the open connection breaks, then connect is refused */
	ASSERT_OK(rp_signal(p, SIGKILL));
	ret = kt_store_heartbeat(s, "stop", &m, 1, 3000, &a, err, sizeof(err));
	assert_true(ret == -ECONNRESET || ret == -EPIPE);
	t0 = rp_now_ms();
	do {
		rp_sleep_ms(20);
		ret = kt_store_ping(s, err, sizeof(err));
	} while (ret == -EAGAIN && rp_now_ms() - t0 < 2000);
	assert_int_equal(ret, -ECONNREFUSED);
	assert_non_null(strstr(err, "connect"));

	/* back on the same port (empty): the pool is rebuilt by the next heartbeat */
	ASSERT_OK(rp_restart(p));
	t0 = rp_now_ms();
	do {
		rp_sleep_ms(50);
		ret = kt_store_heartbeat(s, "stop", &m, 1, 3000, &a, err, sizeof(err));
	} while (ret == -EAGAIN && rp_now_ms() - t0 < 6000);
	ASSERT_OK(ret);
	ASSERT_ANS(a, 1, 1, 1);
}

struct bad_case {
	const char *reply;
	const char *what; /* expected in err */
};

static void test_malformed_replies(void **state)
{
	/* answers are {agree, size, live, reserved}; R is a good reserved */
#define R "$1\r\n0\r\n"
	static const struct bad_case hb[] = {
		{ ":1\r\n", "expected 1 answers" },
		{ "*-1\r\n", "expected 1 answers" },
		{ "*2\r\n*4\r\n:1\r\n:1\r\n:1\r\n" R "*4\r\n:1\r\n:1\r\n:1\r\n" R, "expected 1 answers" },
		{ "*3\r\n:1\r\n:3\r\n:1700000000000\r\n", "\"unchanged\" without a previous answer" },
		{ "*3\r\n$5\r\n1 1 1\r\n:3\r\n:1700000000000\r\n", "catch up with without a previous one" },
		{ "*3\r\n:2\r\n:3\r\n:1700000000000\r\n", "not an array of 4" },
		{ "*3\r\n*3\r\n:0\r\n:1\r\n:1\r\n:3\r\n:1700000000000\r\n", "not an array of 4" },
		{ "*3\r\n*5\r\n:0\r\n:1\r\n:1\r\n" R ":1\r\n:3\r\n:1700000000000\r\n", "not an array of 4" },
		{ "*3\r\n*4\r\n$1\r\n1\r\n:1\r\n:1\r\n" R ":3\r\n:1700000000000\r\n", "not an integer" },
		{ "*3\r\n*4\r\n:2\r\n:1\r\n:1\r\n" R ":3\r\n:1700000000000\r\n", "not an integer" },
		{ "*3\r\n*4\r\n:0\r\n:99999999999\r\n:1\r\n" R ":3\r\n:1700000000000\r\n", "not an integer" },
		{ "*3\r\n*4\r\n:0\r\n:-1\r\n:1\r\n" R ":3\r\n:1700000000000\r\n", "not an integer" },
		{ "*3\r\n*4\r\n:0\r\n:1\r\n:2\r\n" R ":3\r\n:1700000000000\r\n", "size below live" },
		{ "*3\r\n*4\r\n:1\r\n:5\r\n:3\r\n" R ":3\r\n:1700000000000\r\n", "AGREE on a size" },
		{ "*3\r\n*4\r\n:0\r\n:0\r\n:0\r\n" R ":3\r\n:1700000000000\r\n", "no live member" },
		{ "*3\r\n*4\r\n*0\r\n:1\r\n:1\r\n" R ":3\r\n:1700000000000\r\n", "not an integer" },
		{ "*3\r\n*4\r\n:0\r\n:1\r\n:1\r\n:0\r\n:3\r\n:1700000000000\r\n", "reserved rate" },
		{ "*3\r\n*4\r\n:0\r\n:1\r\n:1\r\n$3\r\nnan\r\n:3\r\n:1700000000000\r\n", "reserved rate" },
		{ "*3\r\n*4\r\n:0\r\n:1\r\n:1\r\n$2\r\n-1\r\n:3\r\n:1700000000000\r\n", "reserved rate" },
		{ "*3\r\n*4\r\n:0\r\n:1\r\n:1\r\n$3\r\n1x5\r\n:3\r\n:1700000000000\r\n", "reserved rate" },
		{ "+OK\r\n", "expected 1 answers" },
		/* after the answers, the count of commands the script ran and its TIME */
		{ "*1\r\n*4\r\n:0\r\n:1\r\n:1\r\n" R, "expected 1 answers, a count and a time" },
		{ "*2\r\n*4\r\n:0\r\n:1\r\n:1\r\n" R ":3\r\n", "expected 1 answers, a count and a time" },
		{ "*3\r\n*4\r\n:0\r\n:1\r\n:1\r\n" R ":-1\r\n:1700000000000\r\n", "expected 1 answers, a count and a time" },
		{ "*3\r\n*4\r\n:0\r\n:1\r\n:1\r\n" R "$1\r\n3\r\n:1700000000000\r\n", "expected 1 answers, a count and a time" },
		{ "*3\r\n*4\r\n:0\r\n:1\r\n:1\r\n" R ":3\r\n:0\r\n", "expected 1 answers, a count and a time" },
	};
#undef R
	static const char *const ramp[] = { "$3\r\nabc\r\n", "$3\r\nnan\r\n", "$4\r\n-1.5\r\n",
					    ":5\r\n", "*0\r\n", "$0\r\n\r\n" };
#define P_NOW ":1700000000000000\r\n"
	static const char *const permits[] = {
		":1\r\n",
		"*-1\r\n",
		"*4\r\n" P_NOW ":0\r\n:1\r\n:0\r\n",                                  /* count */
		"*7\r\n" P_NOW ":0\r\n:1\r\n:0\r\n:0\r\n:5\r\n:0\r\n",                  /* count */
		"*6\r\n$16\r\n1700000000000000\r\n:0\r\n:1\r\n:0\r\n:0\r\n:5\r\n",    /* type */
		"*6\r\n" P_NOW ":0\r\n*0\r\n:0\r\n:0\r\n:5\r\n",                         /* type */
		"*6\r\n" P_NOW ":0\r\n:1\r\n:0\r\n:0\r\n$1\r\n5\r\n",                    /* type */
		"*6\r\n:0\r\n:0\r\n:1\r\n:0\r\n:0\r\n:5\r\n",                           /* now 0 */
		"*6\r\n:9007199254740992\r\n:0\r\n:1\r\n:0\r\n:0\r\n:5\r\n",            /* now >= 2^53 */
		"*6\r\n" P_NOW ":-1\r\n:1\r\n:0\r\n:0\r\n:5\r\n",                         /* ahead < 0 */
		"*6\r\n" P_NOW ":0\r\n:2\r\n:0\r\n:0\r\n:5\r\n",                          /* granted 2 */
		"*6\r\n" P_NOW ":0\r\n:1\r\n:-1\r\n:0\r\n:5\r\n",                         /* wait < 0 */
		"*6\r\n" P_NOW ":0\r\n:1\r\n:0\r\n:0\r\n:18014398509481984\r\n",          /* wait >= 2^54 */
		"*6\r\n" P_NOW ":0\r\n:1\r\n:0\r\n:0\r\n:0\r\n",                          /* refused, wait 0 */
		"*6\r\n" P_NOW ":0\r\n:0\r\n:5\r\n:1\r\n:1000005\r\n",                    /* grant after refusal */
		"*6\r\n" P_NOW ":999999\r\n:1\r\n:0\r\n:1\r\n:999999\r\n",                /* not every apart */
		"*6\r\n" P_NOW ":0\r\n:1\r\n:2000001\r\n:0\r\n:5\r\n",                    /* past the bound */
		"*6\r\n" P_NOW ":0\r\n:0\r\n:5\r\n:0\r\n:6\r\n",                          /* refusals differ */
		"*6\r\n" P_NOW ":5\r\n:1\r\n:0\r\n:0\r\n:5\r\n",                          /* ahead != last wait */
		"+OK\r\n",
	};
#undef P_NOW
	struct kt_permit pm[2];
	struct kt_permit_answer pa;
	struct kt_pool_member m = { "m", LIVE };
	struct kt_pool_answer a;
	struct kt_store_cfg c;
	struct kt_store *s;
	double rate;
	const char *ids[1] = { "m" };
	char last[128];

	(void)state;
	assert_int_equal(ktest_fakeredis_start(&g_fake), 0);

	/* a bad SHA from SCRIPT LOAD fails the connection setup */
	ktest_fakeredis_set_sha(&g_fake, "$3\r\nxyz\r\n");
	s = open_single(g_fake.port, NULL, NULL, 0);
	assert_int_equal(kt_store_ping(s, err, sizeof(err)), -EPROTO);
	assert_non_null(strstr(err, "SCRIPT LOAD"));
	{
		char sha[128];

		snprintf(sha, sizeof(sha), "$40\r\n%s\r\n",
		 "0123456789abcdef0123456789abcdef01234567");
		ktest_fakeredis_set_sha(&g_fake, sha);
	}

	s = open_single(g_fake.port, NULL, NULL, 0);
	/* the fake itself works: a well-formed answer is accepted */
	ktest_fakeredis_set(&g_fake, "*3\r\n*4\r\n:0\r\n:4\r\n:2\r\n$3\r\n1.5\r\n:7\r\n:1700000000000\r\n");
	/* another limit: "fake" has no answer to repeat (the cases below) */
	ASSERT_OK(kt_store_heartbeat(s, "fake-ok", &m, 1, 3000, &a, err, sizeof(err)));
	ASSERT_ANS(a, 0, 4, 2);
	ktest_fakeredis_last(&g_fake, last, sizeof(last));
	assert_true(a.reserved == 1.5);
	/* EVALSHA sha 11 (hb, size, ramp, fb, lapsed, counted, hist, sizes, meta, grant, dem
	 * keys; a weighted limit has wt, an in-flight limit claim, seen and sdem too) +
	 * the call's 4 (feed, index, horizon, least TTL: leases: node's) + stale, n,
	 * ramp, ttl, hold, fb, pool rate, floor, recompute, prev, slots, weighted
	 * + one (id, size) */
	assert_string_equal(last, "EVALSHA 11 32");
	for (size_t i = 0; i < sizeof(hb) / sizeof(hb[0]); i++) {
		ktest_fakeredis_set(&g_fake, hb[i].reply);
		a.agree = 7;
		assert_int_equal(kt_store_heartbeat(s, "fake", &m, 1, 3000, &a, err, sizeof(err)), -EPROTO);
		if (!strstr(err, hb[i].what))
			fail_msg("case %zu: '%s' not in '%s'", i, hb[i].what, err);
		assert_int_equal(a.agree, 7); /* answer untouched */
		assert_true(kt_store_connected(s));
	}
	for (size_t i = 0; i < sizeof(ramp) / sizeof(ramp[0]); i++) {
		ktest_fakeredis_set(&g_fake, ramp[i]);
		assert_int_equal(kt_store_load_ramp(s, "fake", &rate, err, sizeof(err)), -EPROTO);
		assert_true(rate < 0);
	}
	ktest_fakeredis_set(&g_fake, "$4\r\n2.50\r\n");
	ASSERT_OK(kt_store_load_ramp(s, "fake", &rate, err, sizeof(err)));
	assert_true(rate == 2.5);
	ktest_fakeredis_set(&g_fake, "+QUEUED\r\n");
	assert_int_equal(kt_store_save_ramp(s, "fake", 1, 1000, err, sizeof(err)), -EPROTO);
	ktest_fakeredis_set(&g_fake, ":5\r\n");
	assert_int_equal(kt_store_leave(s, "fake", ids, 1, err, sizeof(err)), -EPROTO);
	ktest_fakeredis_set(&g_fake, "-ERR something odd\r\n");
	assert_int_equal(kt_store_leave(s, "fake", ids, 1, err, sizeof(err)), -EIO);
	assert_non_null(strstr(err, "something odd"));
	/* permits, 2 asked (every 1 s, maxReserved 1): {now, ahead, g1, w1, g2, w2} */
	ktest_fakeredis_set(&g_fake, "*6\r\n:1700000000000000\r\n:1000000\r\n:1\r\n:0\r\n:1\r\n:1000000\r\n");
	ASSERT_OK(kt_store_permits(s, "fake", 1000000, 1, 2, pm, &pa, err, sizeof(err)));
	assert_true(pa.now_us == 1700000000000000ULL && pa.ahead_us == 1000000);
	assert_true(pm[0].granted == 1 && pm[0].wait_us == 0 && pm[1].granted == 1 && pm[1].wait_us == 1000000);
	ktest_fakeredis_last(&g_fake, last, sizeof(last));
	assert_string_equal(last, "EVALSHA 1 7");
	for (size_t i = 0; i < sizeof(permits) / sizeof(permits[0]); i++) {
		ktest_fakeredis_set(&g_fake, permits[i]);
		pa.now_us = 7;
		pm[0].wait_us = 7;
		if (kt_store_permits(s, "fake", 1000000, 1, 2, pm, &pa, err, sizeof(err)) != -EPROTO)
			fail_msg("permit case %zu: not -EPROTO (%s)", i, err);
		assert_non_null(strstr(err, "permits: malformed reply"));
		assert_true(pa.now_us == 7 && pm[0].wait_us == 7); /* answer untouched */
	}
	/* READONLY means a failover happened: drop and back off */
	ktest_fakeredis_set(&g_fake, "-READONLY You can't write against a read only replica.\r\n");
	assert_int_equal(kt_store_heartbeat(s, "fake", &m, 1, 3000, &a, err, sizeof(err)), -EROFS);
	assert_false(kt_store_connected(s));

	/* not RESP at all: hiredis' protocol error, connection dropped */
	s = open_single(g_fake.port, NULL, NULL, 0);
	ASSERT_OK(kt_store_ping(s, err, sizeof(err)));
	ktest_fakeredis_set(&g_fake, "hello\r\n");
	assert_int_equal(kt_store_heartbeat(s, "fake", &m, 1, 3000, &a, err, sizeof(err)), -EPROTO);
	assert_int_equal(kt_store_state(s, NULL, NULL), KT_STORE_DOWN);

	/* a sentinel naming an impossible port */
	memset(&c, 0, sizeof(c));
	c.kind = KT_STORE_REDIS;
	c.redis_mode = KT_REDIS_SENTINEL;
	c.n_endpoints = 1;
	c.endpoint_host[0] = "127.0.0.1";
	c.endpoint_port[0] = g_fake.port;
	c.master_name = "mm";
	s = open_cfg(&c);
	ktest_fakeredis_set(&g_fake, "*2\r\n$9\r\n127.0.0.1\r\n$5\r\n99999\r\n");
	assert_int_equal(kt_store_ping(s, err, sizeof(err)), -EPROTO);
	assert_non_null(strstr(err, "malformed master port"));
}

/* master + replica + one sentinel, all with passwords; the first sentinel
 * endpoint is dead. SENTINEL FAILOVER: the store follows the new master. */
static void test_sentinel_failover(void **state)
{
	static const char mpw[] = "m-Passw0rd", spw[] = "s-Passw0rd";
	struct rp_opts mo = { .password = mpw }, so = { .password = spw };
	struct rp_proc *M = &g_procs[0], *R = &g_procs[1], *S = &g_procs[2];
	struct kt_store_cfg c;
	struct kt_store *s, *bad;
	struct kt_pool_answer a;
	struct kt_pool_member m = { "sm", LIVE };
	char ep[64], want[64];
	uint64_t t0;
	redisReply *r;
	int ret;

	(void)state;
	ASSERT_OK(rp_start_master(M, &mo));
	ASSERT_OK(rp_start_replica(R, M, &mo));
	ASSERT_OK(rp_start_sentinel(S, M, "ktm", 1, 1000, &so));

	memset(&c, 0, sizeof(c));
	c.kind = KT_STORE_REDIS;
	c.redis_mode = KT_REDIS_SENTINEL;
	c.n_endpoints = 2;
	c.endpoint_host[0] = "127.0.0.1";
	c.endpoint_port[0] = rp_free_port(); /* nobody listens */
	c.endpoint_host[1] = "127.0.0.1";
	c.endpoint_port[1] = S->port;
	c.master_name = "ktm";
	c.redis_auth.password = (char *)mpw;
	c.sentinel_auth.password = (char *)spw;
	c.key_prefix = PREFIX;
	s = open_cfg(&c);
	a = beat(s, "sent", "sm", LIVE, 5000);
	ASSERT_ANS(a, 1, 1, 1);
	snprintf(want, sizeof(want), "127.0.0.1:%d", M->port);
	assert_string_equal(kt_store_endpoint(s, ep, sizeof(ep)), want);

	c.master_name = "nope";
	bad = open_cfg(&c);
	assert_int_equal(kt_store_ping(bad, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "does not know master 'nope'"));
	assert_non_null(strstr(err, "no sentinel of 2 answered"));
	c.master_name = "ktm";
	c.sentinel_auth.password = "not-the-Pw";
	bad = open_cfg(&c);
	assert_int_equal(kt_store_ping(bad, err, sizeof(err)), -EACCES);
	assert_null(strstr(err, "not-the-Pw"));

	ASSERT_OK(rp_sentinel_wait_replicas(S, "ktm", 1, 15000));
	ASSERT_OK(rp_sentinel_failover(S, "ktm", R->port));
	/* the old master still takes writes until the sentinel demotes it (up to
	 * 10 s later): the store must move on the +switch-master event, at once */
	snprintf(want, sizeof(want), "127.0.0.1:%d", R->port);
	t0 = rp_now_ms();
	for (;;) {
		ret = kt_store_heartbeat(s, "sent", &m, 1, 5000, &a, err, sizeof(err));
		if (!ret && strcmp(kt_store_endpoint(s, ep, sizeof(ep)), want) == 0)
			break;
		if (rp_now_ms() - t0 > 1000)
			fail_msg("store did not follow the failover: %d %s (at %s)", ret, err, ep);
		rp_sleep_ms(50);
	}
	ASSERT_ANS(a, 1, 1, 1);
	r = rp_command(R, "ZSCORE " PREFIX ":pool:{sent}:hb sm");
	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_STRING);
	freeReplyObject(r);
}

/* ---- timeouts that follow the latency ---- */

static struct relay g_relay;

static int teardown_relay(void **state)
{
	relay_stop(&g_relay);
	return teardown(state);
}

/* A store 300 ms away one way (600 ms a round trip, beyond the old fixed
 * 200 ms): the automatic timeout waits for it, measures it and follows it;
 * a fixed redisStore.timeout of 100 ms fails and says which timeout it was;
 * a store that becomes slower is waited for again after one timed-out step. */
static void test_latency_timeouts(void **state)
{
	struct kt_store_cfg c;
	struct kt_store *s, *fixed;
	struct kt_store_stats st;
	struct kt_pool_member m = { "far", LIVE };
	struct kt_pool_answer a;
	uint64_t t0, el, since;
	int ret;

	(void)state;
	assert_int_equal(relay_start(&g_relay, kfx_master.port), 0);
	assert_int_equal(relay_set_delay(&g_relay, 300), 0);

	s = open_single(g_relay.port, NULL, NULL, 0);
	kt_store_get_stats(s, &st);
	assert_int_equal(st.lat.samples, 0);
	assert_int_equal(st.lat.timeout_ms, KT_STORE_TIMEOUT_FIRST_MS);
	assert_false(st.lat.fixed);
	t0 = rp_now_ms();
	/* setup and heartbeat: 3 round trips (AUTH/PING, then the scripts:
	 * SCRIPT LOAD waits for the first's answer), the setup's 21 KB of
	 * SCRIPT LOAD taking 1.5 through the relay's 16 KB buffer */
	a = beat(s, "far", "far", LIVE, 10000);
	el = rp_now_ms() - t0;
	assert_int_equal(a.size, 1);
	kt_store_get_stats(s, &st);
	print_message("300 ms one way: first heartbeat %llu ms; p50 %.1f ms p99 %.1f ms over %u, "
		      "timeout %u ms, budget %u ms\n", (unsigned long long)el, st.lat.p50_us / 1e3,
		      st.lat.p99_us / 1e3, st.lat.samples, st.lat.timeout_ms, st.lat.budget_ms);
	assert_true(el >= 1800);
	assert_int_equal(st.lat.samples, 3);
	assert_in_range(st.lat.p50_us, 600000, 1500000);
	assert_in_range(st.lat.p99_us, 600000, 1500000);
	/* 4 x p99 > the cap */
	assert_int_equal(st.lat.timeout_ms, KT_STORE_TIMEOUT_CAP_MS);
	assert_int_equal(st.lat.budget_ms, KT_STORE_CALL_STEPS * KT_STORE_TIMEOUT_CAP_MS);
	t0 = rp_now_ms();
	a = beat(s, "far", "far", LIVE, 10000);
	el = rp_now_ms() - t0;
	kt_store_get_stats(s, &st);
	print_message("second heartbeat %llu ms, %llu round trips so far, p99 %.1f ms\n",
		      (unsigned long long)el, (unsigned long long)st.round_trips, st.lat.p99_us / 1e3);
	assert_int_equal(a.size, 1);
	assert_int_equal(kt_store_state(s, &since, NULL), KT_STORE_UP);

	/* the same store with a fixed timeout shorter than its round trip */
	cfg_single(&c, g_relay.port);
	c.timeout_ns = 100 * 1000000ULL;
	fixed = open_cfg(&c);
	t0 = rp_now_ms();
	ret = kt_store_heartbeat(fixed, "far", &m, 1, 10000, &a, err, sizeof(err));
	el = rp_now_ms() - t0;
	print_message("timeout: 100ms: %s after %llu ms\n", err, (unsigned long long)el);
	assert_int_equal(ret, -ETIMEDOUT);
	assert_non_null(strstr(err, "timed out after 100 ms (redisStore.timeout)"));
	assert_in_range(el, 90, 1000);
	kt_store_get_stats(fixed, &st);
	assert_true(st.lat.fixed);
	assert_int_equal(st.lat.timeout_ms, 100);
	assert_int_equal(st.lat.budget_ms, KT_STORE_CALL_BUDGET_MIN_MS);
	assert_int_equal(st.timeouts, 1);

	/* near, then 150 ms away: the first step times out at the floor, the
	 * next waits 4 times as long and is answered */
	assert_int_equal(relay_set_delay(&g_relay, 0), 0);
	s = open_single(g_relay.port, NULL, NULL, 0);
	for (int i = 0; i < 3; i++)
		beat(s, "far", "far", LIVE, 10000);
	kt_store_get_stats(s, &st);
	assert_int_equal(st.lat.timeout_ms, KT_STORE_TIMEOUT_FLOOR_MS);
	assert_int_equal(relay_set_delay(&g_relay, 150), 0);
	ret = kt_store_heartbeat(s, "far", &m, 1, 10000, &a, err, sizeof(err));
	print_message("near, then 150 ms away: %s\n", err);
	assert_int_equal(ret, -ETIMEDOUT);
	assert_non_null(strstr(err, "timed out after 200 ms (auto timeout"));
	kt_store_get_stats(s, &st);
	assert_int_equal(st.lat.timeout_ms, KT_STORE_TIMEOUT_BACKOFF * KT_STORE_TIMEOUT_FLOOR_MS);
	for (int i = 0; i < 50 && kt_store_state(s, NULL, NULL) == KT_STORE_DOWN; i++) {
		rp_sleep_ms(100);
		ret = kt_store_heartbeat(s, "far", &m, 1, 10000, &a, err, sizeof(err));
	}
	ASSERT_OK(ret);
	kt_store_get_stats(s, &st);
	print_message("answered again: p99 %.1f ms, timeout %u ms\n", st.lat.p99_us / 1e3,
		      st.lat.timeout_ms);
	assert_int_equal(kt_store_state(s, NULL, NULL), KT_STORE_UP);
	/* the window still holds the near samples: p99 is the far one */
	assert_in_range(st.lat.p99_us, 300000, 1500000);
	assert_in_range(st.lat.timeout_ms, 1200, KT_STORE_TIMEOUT_CAP_MS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_agree_one, teardown),
		cmocka_unit_test_teardown(test_agree_three_members_one_node, teardown),
		cmocka_unit_test_teardown(test_disagree_then_converge, teardown),
		cmocka_unit_test_teardown(test_join_report_live, teardown),
		cmocka_unit_test_teardown(test_stale_shrink, teardown),
		cmocka_unit_test_teardown(test_lapsed_member_reserved, teardown),
		cmocka_unit_test_teardown(test_leave_shrinks, teardown),
		cmocka_unit_test_teardown(test_server_time, teardown),
		cmocka_unit_test_teardown(test_keys_expire, teardown),
		cmocka_unit_test_teardown(test_keys_ttl_refresh, teardown),
		cmocka_unit_test_teardown(test_ramp, teardown),
		cmocka_unit_test_teardown(test_many_one_round_trip, teardown),
		cmocka_unit_test_teardown(test_noscript_fallback, teardown),
		cmocka_unit_test_teardown(test_bad_data, teardown),
		cmocka_unit_test_teardown(test_counters_exact, teardown),
		cmocka_unit_test_teardown(test_rebuild_guard, teardown),
		cmocka_unit_test_teardown(test_steady_path, teardown),
		cmocka_unit_test_teardown(test_steady_reserve, teardown),
		cmocka_unit_test_teardown(test_heartbeat_cost, teardown),
		cmocka_unit_test_teardown(test_invalid_args, teardown),
		cmocka_unit_test_teardown(test_tls_config_checked, teardown),
		cmocka_unit_test_teardown(test_auth_and_db, teardown),
		cmocka_unit_test_teardown(test_sigstop_timeout_and_backoff, teardown),
		cmocka_unit_test_teardown(test_malformed_replies, teardown),
		cmocka_unit_test_teardown(test_error_kinds, teardown),
		cmocka_unit_test_teardown(test_error_kinds_transport, teardown),
		cmocka_unit_test_teardown(test_sentinel_failover, teardown),
		cmocka_unit_test_teardown(test_latency_timeouts, teardown_relay),
		cmocka_unit_test_teardown(test_many_bounded_scripts, teardown),
	};

	if (getenv("KT_TEST_FILTER"))
		cmocka_set_test_filter(getenv("KT_TEST_FILTER"));
	return cmocka_run_group_tests(tests, kt_storefx_group_setup, kt_storefx_group_teardown);
}
