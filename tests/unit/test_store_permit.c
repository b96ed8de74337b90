/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* kt_store_permits (strict limits, docs/strict.md) against a real redis-server on
 * a free loopback port. Every expected wait is computed from the answered
 * now_us, so the checks are exact however long a call takes. */
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
#include <cmocka.h>
#include "kt_storefx.h"
#include "redis_proc.h"
#include "store/store.h"

#define PREFIX "kttest"
#define SEC 1000000ULL

static char err[KT_ERR_LEN];

#define ASSERT_OK(expr) RP_ASSERT_OK(expr, err)

static struct kt_store *open_port(int port)
{
	struct kt_store_cfg c;
	struct kt_store *s;

	kt_storefx_cfg_single(&c, port, PREFIX);
	ASSERT_OK(kt_store_open(&s, &c, err, sizeof(err)));
	return kt_storefx_track(s);
}

static struct kt_permit_answer take(struct kt_store *s, const char *limit, uint64_t every, int maxr, int n,
				    struct kt_permit *out)
{
	struct kt_permit_answer a;

	ASSERT_OK(kt_store_permits(s, limit, every, maxr, n, out, &a, err, sizeof(err)));
	return a;
}

/* The key's value, -1 when it does not exist. */
static long long key_value(const char *limit)
{
	redisReply *r = rp_command(&kfx_master, "GET " PREFIX ":strict:{%s}", limit);
	long long v = -1;

	assert_non_null(r);
	if (r->type == REDIS_REPLY_STRING)
		v = strtoll(r->str, NULL, 10);
	else
		assert_int_equal(r->type, REDIS_REPLY_NIL);
	freeReplyObject(r);
	return v;
}

static void set_value(const char *limit, const char *v)
{
	redisReply *r = rp_command(&kfx_master, "SET " PREFIX ":strict:{%s} %s", limit, v);

	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_STATUS);
	freeReplyObject(r);
}

static long long pttl(const char *limit)
{
	return rp_command_int(&kfx_master, -3, "PTTL " PREFIX ":strict:{%s}", limit);
}

#define ASSERT_PERMIT(p, g, w)                                                     \
	do {                                                                       \
		assert_int_equal((p).granted, (g));                                \
		assert_int_equal((p).wait_us, (w));                                \
	} while (0)

/* ---- the permit rule ---- */

/* One permit per call, maxReserved 2: the first is due now, the next ones
 * every apart on the Redis clock. Reservations are counted as
 * floor((last - now) / every), so once any time has passed since the first
 * call, a fourth permit still fits (3 every ahead, minus that time, floors
 * to 2); the call after it is refused and backs off until one reservation
 * has become due: (last - 2 every + 1) - now. */
static void test_reserve_then_back_off(void **state)
{
	struct kt_store *s = open_port(kfx_master.port);
	const uint64_t E = 10 * SEC;
	struct kt_permit_answer a[6];
	struct kt_permit p[6];
	uint64_t last;
	int k;

	(void)state;
	a[0] = take(s, "seq", E, 2, 1, &p[0]);
	ASSERT_PERMIT(p[0], 1, 0);
	assert_int_equal(a[0].ahead_us, 0);
	assert_int_equal(key_value("seq"), a[0].now_us);
	last = a[0].now_us;
	for (k = 1; k < 6; k++) {
		a[k] = take(s, "seq", E, 2, 1, &p[k]);
		assert_true(a[k].now_us >= a[k - 1].now_us);
		if (!p[k].granted)
			break;
		/* every later than the previous permit, wait counted from this now */
		assert_int_equal(p[k].wait_us, last + E - a[k].now_us);
		last += E;
		assert_int_equal(a[k].ahead_us, last - a[k].now_us);
		assert_int_equal(key_value("seq"), last);
	}
	/* calls 2 and 3 are always granted (~every, ~2 every); the refusal comes
	 * at the 4th only if the Redis clock did not move since the 1st */
	assert_true(k >= 3 && k <= 4);
	assert_int_equal(p[k].granted, 0);
	assert_true((last - a[k].now_us) / E >= 2);
	assert_int_equal(p[k].wait_us, last - 2 * E + 1 - a[k].now_us);
	assert_int_equal(a[k].ahead_us, last - a[k].now_us);
	/* a refusal leaves the key alone: the latest permit, first now + k - 1 every */
	assert_int_equal(key_value("seq"), a[0].now_us + (uint64_t)(k - 1) * E);
	print_message("maxReserved 2, one per call: %d granted, then back off %llu us\n", k,
		      (unsigned long long)p[k].wait_us);
}

/* n permits in one call share one now: exactly every apart up to the bound
 * (maxReserved reserved ahead: floor(ahead / every) < maxReserved), then
 * back-offs that all wait the same. */
static void test_batch(void **state)
{
	struct kt_store *s = open_port(kfx_master.port);
	const uint64_t E = 5 * SEC;
	struct kt_permit_answer a, b;
	struct kt_permit p[8];
	int i;

	(void)state;
	a = take(s, "batch", E, 2, 5, p);
	for (i = 0; i < 3; i++)
		ASSERT_PERMIT(p[i], 1, (uint64_t)i * E);
	/* last = now + 2 every: one more reservation fits 1 us later */
	ASSERT_PERMIT(p[3], 0, 1);
	ASSERT_PERMIT(p[4], 0, 1);
	assert_int_equal(a.ahead_us, 2 * E);
	assert_int_equal(key_value("batch"), a.now_us + 2 * E);

	/* a second batch continues from the key: one more fits (time moved on) */
	b = take(s, "batch", E, 2, 3, p);
	ASSERT_PERMIT(p[0], 1, a.now_us + 3 * E - b.now_us);
	assert_int_equal(p[1].granted, 0);
	assert_int_equal(p[1].wait_us, a.now_us + 3 * E - 2 * E + 1 - b.now_us);
	ASSERT_PERMIT(p[2], 0, p[1].wait_us);
	assert_int_equal(b.ahead_us, p[0].wait_us);

	/* a larger bound: 6 granted every apart, then 2 refusals */
	a = take(s, "batch5", SEC, 5, 8, p);
	for (i = 0; i < 6; i++)
		ASSERT_PERMIT(p[i], 1, (uint64_t)i * SEC);
	for (; i < 8; i++)
		ASSERT_PERMIT(p[i], 0, 1);
	assert_int_equal(key_value("batch5"), a.now_us + 5 * SEC);

	/* the largest batch */
	{
		static struct kt_permit big[KT_STORE_MAX_PERMITS];

		a = take(s, "big", 1000, 100000, KT_STORE_MAX_PERMITS, big);
		for (i = 0; i < KT_STORE_MAX_PERMITS; i++)
			ASSERT_PERMIT(big[i], 1, (uint64_t)i * 1000);
		assert_int_equal(a.ahead_us, (KT_STORE_MAX_PERMITS - 1) * 1000);
	}
}

/* maxReserved 0: nothing ahead of now, a refusal waits until next. */
static void test_no_reservation(void **state)
{
	struct kt_store *s = open_port(kfx_master.port);
	const uint64_t E = 10 * SEC;
	struct kt_permit_answer a, b;
	struct kt_permit p[3];

	(void)state;
	a = take(s, "zero", E, 0, 1, p);
	ASSERT_PERMIT(p[0], 1, 0);
	b = take(s, "zero", E, 0, 3, p);
	for (int i = 0; i < 3; i++)
		ASSERT_PERMIT(p[i], 0, a.now_us + E - b.now_us);
	assert_int_equal(b.ahead_us, 0);
	assert_int_equal(key_value("zero"), a.now_us);
}

/* Once more than every has passed, the next permit is due at once. */
static void test_after_sleep(void **state)
{
	struct kt_store *s = open_port(kfx_master.port);
	const uint64_t E = 20000; /* 20 ms */
	struct kt_permit_answer a, b;
	struct kt_permit p[3];

	(void)state;
	a = take(s, "idle", E, 0, 1, p);
	ASSERT_PERMIT(p[0], 1, 0);
	rp_sleep_ms(30);
	b = take(s, "idle", E, 0, 2, p);
	assert_true(b.now_us > a.now_us + E);
	ASSERT_PERMIT(p[0], 1, 0);
	ASSERT_PERMIT(p[1], 0, E);
	assert_int_equal(key_value("idle"), b.now_us);

	/* reservations made ahead are used up by waiting too */
	a = take(s, "idle2", E, 2, 3, p);
	assert_int_equal(a.ahead_us, 2 * E);
	rp_sleep_ms(70);
	b = take(s, "idle2", E, 2, 1, p);
	assert_true(b.now_us > a.now_us + 3 * E);
	ASSERT_PERMIT(p[0], 1, 0);
	assert_int_equal(b.ahead_us, 0);
}

/* PEXPIRE (last - now + every) + 1 s, so the key outlives every constraint. */
static void test_expiry(void **state)
{
	struct kt_store *s = open_port(kfx_master.port);
	struct kt_permit_answer a, b;
	struct kt_permit p[3];
	long long t, want;

	(void)state;
	a = take(s, "ttl", 10 * SEC, 2, 3, p); /* last = now + 20 s */
	t = pttl("ttl");
	assert_true(t > 30500 && t <= 31000);
	/* one more fits (time moved on), then a refusal: from that last, counted
	 * from the new now */
	b = take(s, "ttl", 10 * SEC, 2, 2, p);
	assert_int_equal(p[0].granted, 1);
	assert_int_equal(p[1].granted, 0);
	want = (long long)((a.now_us + 40 * SEC - b.now_us + 999) / 1000) + 1000;
	t = pttl("ttl");
	assert_true(t > want - 500 && t <= want);

	/* sub-millisecond remainders round up */
	take(s, "ttl2", 1500, 0, 1, p); /* last = now */
	t = pttl("ttl2");
	assert_true(t > 500 && t <= 1002);
	/* gone once nothing constrains: the next is then due at once */
	rp_sleep_ms(1100);
	assert_int_equal(key_value("ttl2"), -1);
	take(s, "ttl2", 1500, 0, 1, p);
	ASSERT_PERMIT(p[0], 1, 0);
}

/* A hand-written value that is not a decimal integer counts as a permit
 * issued at the call's now; a far-ahead one is kept, never clamped. */
static void test_bad_values(void **state)
{
	/* "-5": TIME is never negative, so it is a hand edit, not a past permit */
	static const char *const bad[] = { "abc", "-5", "+5", "12.5", "1e15", "", "0x10", " 12", "12 ",
					   "18014398509481984", "99999999999999999999" };
	struct kt_store *s = open_port(kfx_master.port);
	const uint64_t E = 10 * SEC;
	struct kt_permit_answer a, b;
	struct kt_permit p[2];
	redisReply *r;
	char v[32];

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		set_value("hand", bad[i]);
		a = take(s, "hand", E, 1, 2, p);
		ASSERT_PERMIT(p[0], 1, E);
		ASSERT_PERMIT(p[1], 0, 1); /* (last - 1 every + 1) - now */
		assert_int_equal(key_value("hand"), a.now_us + E);
	}
	/* maxReserved 0: refused, and the key now holds that permit at now, so
	 * the next call counts from the first call's now, not its own */
	set_value("hand0", "garbage");
	a = take(s, "hand0", E, 0, 1, p);
	ASSERT_PERMIT(p[0], 0, E);
	assert_int_equal(key_value("hand0"), a.now_us);
	b = take(s, "hand0", E, 0, 1, p);
	ASSERT_PERMIT(p[0], 0, a.now_us + E - b.now_us);

	/* a valid value far ahead only delays; a long-past one grants now */
	a = take(s, "ahead", E, 0, 1, p);
	snprintf(v, sizeof(v), "%llu", (unsigned long long)(a.now_us + 1000 * E));
	set_value("ahead", v);
	b = take(s, "ahead", E, 3, 1, p);
	ASSERT_PERMIT(p[0], 0, a.now_us + 1000 * E - 3 * E + 1 - b.now_us);
	assert_int_equal(b.ahead_us, a.now_us + 1000 * E - b.now_us);
	assert_int_equal(key_value("ahead"), a.now_us + 1000 * E);
	set_value("ahead", "1");
	take(s, "ahead", E, 3, 1, p);
	ASSERT_PERMIT(p[0], 1, 0);

	/* the wrong type is a Redis error: -EIO, the key untouched */
	r = rp_command(&kfx_master, "HSET " PREFIX ":strict:{hash} f v");
	assert_non_null(r);
	freeReplyObject(r);
	assert_int_equal(kt_store_permits(s, "hash", E, 1, 1, p, &a, err, sizeof(err)), -EIO);
	assert_non_null(strstr(err, "WRONGTYPE"));
	assert_non_null(strstr(err, "permits"));
	assert_true(kt_store_connected(s));
	assert_int_equal(rp_command_int(&kfx_master, -1, "HLEN " PREFIX ":strict:{hash}"), 1);
	/* and the store still works */
	take(s, "hash2", E, 1, 1, p);
	ASSERT_PERMIT(p[0], 1, 0);
}

static void test_invalid_args(void **state)
{
	struct kt_store *s = open_port(kfx_master.port);
	struct kt_permit p[2];
	struct kt_permit_answer a = { 7, 7 };
	struct kt_store_stats st;
	static const struct {
		const char *limit;
		uint64_t every;
		int maxr, n;
	} bad[] = {
		{ "ok", SEC, 1, 0 },
		{ "ok", SEC, 1, -1 },
		{ "ok", SEC, 1, KT_STORE_MAX_PERMITS + 1 },
		{ "ok", 999, 1, 1 },
		{ "ok", 0, 1, 1 },
		{ "ok", 86400 * SEC + 1, 1, 1 },
		{ "ok", SEC, -1, 1 },
		{ "ok", SEC, 100001, 1 },
		{ "bad name", SEC, 1, 1 },
		{ "a{b}", SEC, 1, 1 },
		{ "", SEC, 1, 1 },
		{ NULL, SEC, 1, 1 },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int ret = kt_store_permits(s, bad[i].limit, bad[i].every, bad[i].maxr, bad[i].n, p, &a, err,
					   sizeof(err));

		if (ret != -EINVAL)
			fail_msg("case %zu: %d (%s)", i, ret, err);
		assert_non_null(strstr(err, "permits"));
	}
	assert_int_equal(kt_store_permits(s, "ok", SEC, 1, 1, NULL, &a, err, sizeof(err)), -EINVAL);
	assert_int_equal(kt_store_permits(s, "ok", SEC, 1, 1, p, NULL, err, sizeof(err)), -EINVAL);
	assert_int_equal(a.now_us, 7);
	kt_store_get_stats(s, &st);
	assert_int_equal(st.round_trips, 0); /* nothing was sent */

	/* the bounds themselves are valid */
	take(s, "edge", 1000, 0, 1, p);
	take(s, "edge2", 86400 * SEC, 100000, 1, p);
	ASSERT_PERMIT(p[0], 1, 0);
	take(s, "edge2", 86400 * SEC, 100000, 1, p);
	assert_int_equal(p[0].granted, 1);
	kt_store_get_stats(s, &st);
	assert_int_equal(st.round_trips, 5); /* connection setup (2) + 3 EVALSHA */
}

/* The server dies: connection errors, then back-off, never a crash; and it
 * works again once the server is back. */
static void test_store_down(void **state)
{
	struct rp_proc *p = &kfx_procs[0];
	struct kt_permit_answer a;
	struct kt_permit pm[4];
	struct kt_store *s;
	uint64_t t0;
	int ret;

	(void)state;
	ASSERT_OK(rp_start_master(p, NULL));
	s = open_port(p->port);
	take(s, "down", SEC, 2, 4, pm);
	ASSERT_OK(rp_signal(p, SIGKILL));
	ret = kt_store_permits(s, "down", SEC, 2, 4, pm, &a, err, sizeof(err));
	assert_true(ret == -ECONNRESET || ret == -EPIPE || ret == -ECONNREFUSED);
	assert_int_equal(kt_store_state(s, NULL, NULL), KT_STORE_DOWN);
	ret = kt_store_permits(s, "down", SEC, 2, 4, pm, &a, err, sizeof(err));
	assert_int_equal(ret, -EAGAIN);
	t0 = rp_now_ms();
	do {
		rp_sleep_ms(20);
		ret = kt_store_permits(s, "down", SEC, 2, 4, pm, &a, err, sizeof(err));
	} while (ret == -EAGAIN && rp_now_ms() - t0 < 2000);
	assert_int_equal(ret, -ECONNREFUSED);

	/* back, empty: the first permit is due at once (scripts loaded again) */
	ASSERT_OK(rp_restart(p));
	t0 = rp_now_ms();
	do {
		rp_sleep_ms(50);
		ret = kt_store_permits(s, "down", SEC, 2, 4, pm, &a, err, sizeof(err));
	} while (ret == -EAGAIN && rp_now_ms() - t0 < 8000);
	ASSERT_OK(ret);
	ASSERT_PERMIT(pm[0], 1, 0);
	ASSERT_PERMIT(pm[2], 1, 2 * SEC);
	assert_int_equal(pm[3].granted, 0);
}

/* SCRIPT FLUSH: the next call falls back to EVAL and still answers. */
static void test_noscript(void **state)
{
	struct kt_store *s = open_port(kfx_master.port);
	struct kt_permit p[3];
	redisReply *r;
	char v[256];

	(void)state;
	take(s, "flush", SEC, 1, 1, p);
	r = rp_command(&kfx_master, "SCRIPT FLUSH");
	assert_non_null(r);
	freeReplyObject(r);
	take(s, "flush", SEC, 1, 3, p);
	assert_int_equal(rp_info_field(&kfx_master, "commandstats", "cmdstat_eval", v, sizeof(v)), 0);
	assert_int_equal(p[0].granted, 1);
	assert_int_equal(p[1].granted, 1);
	assert_int_equal(p[2].granted, 0);
}

/* Cluster mode: each limit's call goes to the master of its slot ({L},
 * shared with the pool keys), which has the script loaded at connect and
 * gets it again after SCRIPT FLUSH. */
static void test_cluster(void **state)
{
	static char host[] = "127.0.0.1";
	struct kt_permit_answer a;
	struct kt_store_cfg c;
	struct kt_permit p[3];
	struct kt_store *s;
	bool owner_seen[3] = { false };
	int owners = 0;

	(void)state;
	if (rp_start_cluster(kfx_procs, 3, 0)) {
		print_message("no Redis Cluster here: skipped\n");
		skip();
	}
	memset(&c, 0, sizeof(c));
	c.kind = KT_STORE_REDIS;
	c.line = 9;
	c.redis_mode = KT_REDIS_CLUSTER;
	c.endpoint_host[0] = host;
	c.endpoint_port[0] = kfx_procs[1].port;
	c.n_endpoints = 1;
	c.key_prefix = PREFIX;
	ASSERT_OK(kt_store_open(&s, &c, err, sizeof(err)));
	kt_storefx_track(s);
	for (int k = 0; k < 12; k++) {
		char name[16], key[64];
		int o;
		redisReply *r;

		snprintf(name, sizeof(name), "cl%d", k);
		snprintf(key, sizeof(key), PREFIX ":strict:{%s}", name);
		o = rp_cluster_slot_owner(kfx_procs, 3, rp_cluster_slot(&kfx_procs[0], key));
		assert_true(o >= 0 && o < 3);
		owners += !owner_seen[o];
		owner_seen[o] = true;
		if (k == 11) {
			/* the owner lost its scripts: NOSCRIPT, then EVAL */
			r = rp_command(&kfx_procs[o], "SCRIPT FLUSH");
			assert_non_null(r);
			freeReplyObject(r);
		}
		ASSERT_OK(kt_store_permits(s, name, 10 * SEC, 1, 3, p, &a, err, sizeof(err)));
		ASSERT_PERMIT(p[0], 1, 0);
		ASSERT_PERMIT(p[1], 1, 10 * SEC);
		ASSERT_PERMIT(p[2], 0, 1);
		r = rp_command(&kfx_procs[o], "GET %s", key);
		assert_non_null(r);
		assert_int_equal(r->type, REDIS_REPLY_STRING);
		assert_int_equal(strtoull(r->str, NULL, 10), a.now_us + 10 * SEC);
		freeReplyObject(r);
	}
	assert_true(owners >= 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_reserve_then_back_off, kt_storefx_teardown),
		cmocka_unit_test_teardown(test_batch, kt_storefx_teardown),
		cmocka_unit_test_teardown(test_no_reservation, kt_storefx_teardown),
		cmocka_unit_test_teardown(test_after_sleep, kt_storefx_teardown),
		cmocka_unit_test_teardown(test_expiry, kt_storefx_teardown),
		cmocka_unit_test_teardown(test_bad_values, kt_storefx_teardown),
		cmocka_unit_test_teardown(test_invalid_args, kt_storefx_teardown),
		cmocka_unit_test_teardown(test_store_down, kt_storefx_teardown),
		cmocka_unit_test_teardown(test_noscript, kt_storefx_teardown),
		cmocka_unit_test_teardown(test_cluster, kt_storefx_teardown),
	};

	return cmocka_run_group_tests(tests, kt_storefx_group_setup, kt_storefx_group_teardown);
}
