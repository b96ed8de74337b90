// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Distributed pool: several kt_pool objects ("nodes") against one real
 * redis-server. Scripted scenarios use an injected clock with a 1 s heartbeat
 * (Redis prunes by its own TIME, 3 s windows, never reached by the fast
 * loops); the death and store-loss scenarios use the real clock with a
 * 100 ms heartbeat. No BPF, no root. KT_TEST_VERBOSE=1 shows the pool's log. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "kernel/apply.h"
#include "kernel/bpf_loader.h"
#include "base/config.h"
#include "control/controller.h"
#include "base/log.h"
#include "pool/pool.h"
#include "redis_proc.h"
#include "store/store.h"

#define MS 1000000ULL
#define SEC 1000000000ULL
#define T0 (5000 * SEC) /* fake clock origin */
#define MAXL 4
#define MAXM 16
#define MAX_RATE 90.0
#define MIN_RATE 9.0
#define EPS 1e-9

static struct rp_proc redis;

#define assert_near(a, b)                                                                   \
	do {                                                                                 \
		double a_ = (a), b_ = (b);                                                   \
		if (!(fabs(a_ - b_) <= EPS * (1 + fabs(b_))))                                \
			fail_msg("%s = %.17g, want %.17g", #a, a_, b_);                      \
	} while (0)

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * SEC + (uint64_t)ts.tv_nsec;
}

/* ---- nodes ---- */

struct node {
	struct kt_config cfg;
	struct kt_pool *p;
	char idbuf[MAXL][MAXM][48];
	const char *ids[MAXL][MAXM];
	struct kt_pool_local loc[MAXL];
};

/* `store` is the top-level store body (indented 2), `limits` the limits list. */
static char *yaml(const char *node, const char *store, const char *limits)
{
	char *s;

	assert_true(asprintf(&s, "node: %s\nstore:\n%slimits:\n%s", node, store, limits) > 0);
	return s;
}

/* Single redis at the test server, with heartbeat, validFor, policy. */
static char *redis_store(const char *hb, const char *valid_for, const char *policy)
{
	char *s;

	assert_true(asprintf(&s,
			     "  redisStore:\n"
			     "    mode: single\n"
			     "    url: redis://127.0.0.1:%d\n"
			     "  heartbeat: %s\n"
			     "  staleAfter: 3\n"
			     "  validFor: %s\n"
			     "  onStoreFailure: %s\n",
			     redis.port, hb, valid_for, policy) > 0);
	return s;
}

#define LIMIT(name, rl) "  - name: " name "\n    cgroups: [x]\n    unit: connection\n    rateLimit: " rl "\n"
#define RL_PLAIN "{max: 90, min: 9, rampUpDuration: 10s}"

static void node_open(struct node *n, const char *node_name, const char *y, int members)
{
	char err[KT_ERR_LEN];
	int i, j, ret;

	memset(n, 0, sizeof(*n));
	ret = kt_config_parse("pool.yaml", y, strlen(y), &n->cfg, err, sizeof(err));
	if (ret)
		fail_msg("config: %s", err);
	assert_true(n->cfg.n_limits <= MAXL);
	ret = kt_pool_create(&n->p, &n->cfg, err, sizeof(err));
	if (ret)
		fail_msg("kt_pool_create: %s", err);
	for (i = 0; i < n->cfg.n_limits; i++) {
		for (j = 0; j < MAXM; j++) {
			snprintf(n->idbuf[i][j], sizeof(n->idbuf[i][j]), "%s/%s/m%d", node_name,
				 n->cfg.limits[i].name, j);
			n->ids[i][j] = n->idbuf[i][j];
		}
		n->loc[i].cfg = &n->cfg.limits[i];
		n->loc[i].member_ids = n->ids[i];
		n->loc[i].n_members = members;
		n->loc[i].pool_rate = n->cfg.limits[i].rl.max;
	}
}

static void node_new(struct node *n, const char *node_name, const char *store, const char *limits,
		     int members)
{
	char *y = yaml(node_name, store, limits);

	node_open(n, node_name, y, members);
	free(y);
}

static void node_close(struct node *n)
{
	kt_pool_destroy(n->p);
	n->p = NULL;
	kt_config_free(&n->cfg);
}

/* A tick, and its round trip applied as if it came back at once (the
 * worker thread's answer is awaited, at most 5 s). */
static void tick(struct node *n, uint64_t now)
{
	kt_pool_tick(n->p, now, n->loc, n->cfg.n_limits);
	kt_pool_wait(n->p, now, 5000000000ULL);
}

static const struct kt_pool_view *view(const struct node *n, int i)
{
	const struct kt_pool_view *v = kt_pool_view(n->p, i);

	assert_non_null(v);
	return v;
}

/* Rate of one member's bucket of limit i at the node's pool rate. */
static double rate1(const struct node *n, int i)
{
	return kt_pool_bucket_rate(n->p, i, n->loc[i].pool_rate, 1);
}

/* Rate of all the node's members of limit i. */
static double node_rate(const struct node *n, int i)
{
	return kt_pool_bucket_rate(n->p, i, n->loc[i].pool_rate, n->loc[i].n_members);
}

static void expect(const struct node *n, int i, enum kt_pool_phase ph, int size)
{
	const struct kt_pool_view *v = view(n, i);

	if (v->phase != ph || v->size != size)
		fail_msg("limit %d: phase %s size %d, want %s size %d (live %d)", i,
			 kt_pool_phase_name(v->phase), v->size, kt_pool_phase_name(ph), size, v->live);
}

/* Each of ns[0..k) agreed on limit 0 at size members, MAX_RATE / size each. */
static void expect_all_agreed(struct node **ns, int k, int size)
{
	for (int i = 0; i < k; i++) {
		expect(ns[i], 0, KT_POOL_AGREED, size);
		assert_near(rate1(ns[i], 0), MAX_RATE / size);
	}
}

/* node_close on each of ns[0..k). */
static void close_nodes(struct node **ns, int k)
{
	for (int i = 0; i < k; i++)
		node_close(ns[i]);
}

/* The sum of the rates of members that are not joining never exceeds max; a
 * joiner adds at most its min/size until the others' next heartbeat. */
static void check_sum(struct node **ns, int k, int lim)
{
	double settled = 0, joining = 0;

	for (int i = 0; i < k; i++) {
		double r = node_rate(ns[i], lim);

		if (!view(ns[i], lim)->phase_since_ns)
			continue; /* not started yet */

		if (view(ns[i], lim)->phase == KT_POOL_JOINING)
			joining += r;
		else
			settled += r;
	}
	if (settled > MAX_RATE + 1e-6 || joining > MIN_RATE + 1e-6)
		fail_msg("sum of rates: settled %.6g (max %g), joining %.6g (min %g)", settled, MAX_RATE,
			 joining, MIN_RATE);
}

static void round_all(struct node **ns, int k, uint64_t now)
{
	for (int i = 0; i < k; i++) {
		tick(ns[i], now);
		check_sum(ns, k, 0);
	}
}

static char *redis_get(const char *key)
{
	redisReply *r = rp_command(&redis, "GET %s", key);
	char *s = NULL;

	assert_non_null(r);
	if (r->type == REDIS_REPLY_STRING)
		s = strdup(r->str);
	freeReplyObject(r);
	return s;
}

/* ---- scripted scenarios (injected clock) ---- */

/* Three nodes agree on 3 within 2 heartbeats of the last join; a fourth joins
 * at min/4 while the others still run at max/3, they drop to max/4 at their
 * next heartbeat, then everyone agrees on 4. */
static void test_converge_and_join(void **state)
{
	struct node a, b, c, d;
	struct node *ns[4] = { &a, &b, &c, &d };
	char *st = redis_store("1s", "10s", "conservative");
	uint64_t now = T0;

	(void)state;
	node_new(&a, "a", st, LIMIT("api", RL_PLAIN), 1);
	node_new(&b, "b", st, LIMIT("api", RL_PLAIN), 1);
	node_new(&c, "c", st, LIMIT("api", RL_PLAIN), 1);
	node_new(&d, "d", st, LIMIT("api", RL_PLAIN), 1);

	/* before any heartbeat: joining, size unknown (never "alone"): nothing */
	expect(&a, 0, KT_POOL_JOINING, 0);
	assert_true(rate1(&a, 0) == 0);
	assert_string_equal(kt_pool_store_state(a.p, 0, NULL, NULL, 0), "idle");

	/* round 1: each joins; a is alone and agrees on 1 */
	round_all(ns, 3, now);
	expect(&a, 0, KT_POOL_AGREED, 1);
	expect(&b, 0, KT_POOL_JOINING, 2);
	expect(&c, 0, KT_POOL_JOINING, 3);
	assert_near(rate1(&a, 0), MAX_RATE);
	assert_near(rate1(&b, 0), MIN_RATE / 2);
	assert_near(rate1(&c, 0), MIN_RATE / 3);
	assert_int_equal(view(&c, 0)->live, 3);
	assert_int_equal(view(&c, 0)->last_answer_ns, now);

	/* rounds 2 and 3: everyone on 3 */
	now += SEC;
	round_all(ns, 3, now);
	expect(&a, 0, KT_POOL_DISAGREED, 3);
	expect(&b, 0, KT_POOL_AGREED, 3);
	expect(&c, 0, KT_POOL_AGREED, 3);
	now += SEC;
	round_all(ns, 3, now);
	for (int i = 0; i < 3; i++) {
		expect(ns[i], 0, KT_POOL_AGREED, 3);
		assert_near(rate1(ns[i], 0), MAX_RATE / 3);
		assert_true(view(ns[i], 0)->agree);
	}
	assert_string_equal(kt_pool_store_state(a.p, 0, NULL, NULL, 0), "up");

	/* d joins: min/4 for itself, the others still at max/3 until they beat */
	now += SEC;
	tick(&d, now);
	check_sum(ns, 4, 0);
	expect(&d, 0, KT_POOL_JOINING, 4);
	assert_near(rate1(&d, 0), MIN_RATE / 4);
	assert_near(rate1(&a, 0), MAX_RATE / 3);
	/* a pool rate below min is not raised while joining */
	assert_near(kt_pool_bucket_rate(d.p, 0, 2.0, 1), 2.0 / 4);

	for (int i = 0; i < 3; i++) {
		tick(ns[i], now);
		check_sum(ns, 4, 0);
		assert_int_equal(view(ns[i], 0)->size, 4);
		assert_near(rate1(ns[i], 0), MAX_RATE / 4);
	}
	expect(&a, 0, KT_POOL_DISAGREED, 4);
	expect(&c, 0, KT_POOL_AGREED, 4);

	now += SEC;
	tick(&d, now);
	round_all(ns, 3, now);
	check_sum(ns, 4, 0);
	expect_all_agreed(ns, 4, 4);
	close_nodes(ns, 4);
	free(st);
}

/* A graceful leave and a detached member both shrink the pool within 2
 * heartbeats, and their ids are gone from Redis at once. */
static void test_leave_and_detach(void **state)
{
	struct node a, b, c;
	struct node *ns[3] = { &a, &b, &c };
	char *st = redis_store("1s", "10s", "conservative");
	uint64_t now = T0, rt;
	int r;

	(void)state;
	node_new(&a, "a", st, LIMIT("api", RL_PLAIN), 2);
	node_new(&b, "b", st, LIMIT("api", RL_PLAIN), 1);
	node_new(&c, "c", st, LIMIT("api", RL_PLAIN), 1);
	for (r = 0; r < 3; r++, now += SEC)
		round_all(ns, 3, now);
	for (int i = 0; i < 3; i++)
		expect(ns[i], 0, KT_POOL_AGREED, 4);
	assert_near(rate1(&a, 0), MAX_RATE / 4);
	assert_near(node_rate(&a, 0), MAX_RATE / 2);
	assert_int_equal(rp_command_int(&redis, -1, "ZCARD kthrottle:pool:{api}:hb"), 4);

	/* c stops gracefully: deregistered at once, no more heartbeats after */
	kt_pool_leave(c.p, c.loc, 1, true);
	assert_int_equal(rp_command_int(&redis, -1, "ZCARD kthrottle:pool:{api}:hb"), 3);
	rt = kt_pool_round_trips(c.p);
	tick(&c, now + 10 * SEC);
	assert_int_equal(kt_pool_round_trips(c.p), rt);

	tick(&a, now);
	tick(&b, now);
	assert_int_equal(view(&a, 0)->size, 4); /* still DISAGREE with the larger size */
	/* b's store agrees on 3 at once, but a shrink is believed one answer late */
	expect(&b, 0, KT_POOL_DISAGREED, 4);
	now += SEC;
	tick(&a, now);
	tick(&b, now);
	expect(&a, 0, KT_POOL_DISAGREED, 4); /* its first answer of 3, damped */
	expect(&b, 0, KT_POOL_AGREED, 3);
	now += SEC;
	tick(&a, now);
	tick(&b, now);
	expect(&a, 0, KT_POOL_AGREED, 3);
	expect(&b, 0, KT_POOL_AGREED, 3);
	assert_near(rate1(&b, 0), MAX_RATE / 3);

	/* a's member m1 goes away (cgroup detached): a lists m0 only */
	a.loc[0].n_members = 1;
	now += SEC;
	tick(&a, now);
	assert_int_equal(rp_command_int(&redis, -1, "ZCARD kthrottle:pool:{api}:hb"), 2);
	tick(&b, now);
	for (r = 0; r < 2; r++) { /* the shrink, believed one answer late */
		now += SEC;
		tick(&a, now);
		tick(&b, now);
	}
	expect(&a, 0, KT_POOL_AGREED, 2);
	expect(&b, 0, KT_POOL_AGREED, 2);
	assert_near(rate1(&a, 0), MAX_RATE / 2);

	close_nodes(ns, 3);
	free(st);
}

/* Handover: a daemon that starts before any store answer continues the
 * pinned lease (size, share, reserve) instead of guessing; never longer than
 * its own config would grant from now; a lapsed pin means the fallback. The
 * first answer then takes over. */
static void test_adopt_pinned_lease(void **state)
{
	struct node a;
	char *st = redis_store("1s", "10s", "conservative");
	struct kt_lease pin = { .size = 3, .agreed = 1, .fallback_urate = 3000000,
				.reserved_urate = 0 };
	struct kt_bucket_policy pol;
	struct kt_lease out;

	(void)state;
	node_new(&a, "a", st, LIMIT("api", RL_PLAIN), 1);
	assert_false(kt_pool_lease(a.p, 0, &out)); /* nothing known yet */
	pin.lease_until = T0 + 2 * SEC;
	pin.fallback_until = T0 + 62 * SEC;
	kt_pool_adopt(a.p, 0, &pin, -1, T0);
	expect(&a, 0, KT_POOL_AGREED, 3);
	assert_near(rate1(&a, 0), MAX_RATE / 3);
	kt_pool_bucket_policy(a.p, 0, MAX_RATE, 1, &pol);
	assert_near(pol.rate, MAX_RATE / 3);
	assert_int_equal(pol.valid_until, T0 + 2 * SEC);
	assert_int_equal(pol.fallback_until, T0 + 62 * SEC);
	assert_near(pol.fallback_rate, 3.0);
	assert_true(kt_pool_lease(a.p, 0, &out));
	assert_int_equal(out.size, 3);
	assert_int_equal(out.lease_until, T0 + 2 * SEC);
	/* the store restarted empty while this daemon was down: its first
	 * answer says alone, but the pinned size stays a floor while the
	 * others reconnect */
	tick(&a, T0 + 100 * MS);
	assert_int_equal(view(&a, 0)->live, 1);
	expect(&a, 0, KT_POOL_DISAGREED, 3);
	assert_near(rate1(&a, 0), MAX_RATE / 3);
	tick(&a, T0 + 1100 * MS);
	expect(&a, 0, KT_POOL_DISAGREED, 3);
	node_close(&a);

	/* a pinned lease longer than this config grants (staleAfter 3 x 1 s) */
	node_new(&a, "a", st, LIMIT("api", RL_PLAIN), 1);
	pin.lease_until = T0 + 100 * SEC;
	kt_pool_adopt(a.p, 0, &pin, -1, T0);
	assert_int_equal(view(&a, 0)->lease_until_ns, T0 + 3 * SEC);
	node_close(&a);

	/* a lapsed one: the fallback on the pinned size, held by the others */
	node_new(&a, "a", st, LIMIT("api", RL_PLAIN), 1);
	pin.lease_until = T0 - SEC;
	kt_pool_adopt(a.p, 0, &pin, -1, T0);
	expect(&a, 0, KT_POOL_STORE_LOST, 3);
	assert_near(rate1(&a, 0), MIN_RATE / 3);
	node_close(&a);

	/* a pinned size written wrong (1 where the pool is 3): not believed
	 * beyond the rate the pinned buckets ran at, share and fallback alike,
	 * until the store answers */
	node_new(&a, "a", st, LIMIT("api", RL_PLAIN), 1);
	pin.size = 1;
	pin.lease_until = T0 + 2 * SEC;
	pin.fallback_urate = (uint64_t)(MAX_RATE * 1e6);
	kt_pool_adopt(a.p, 0, &pin, MAX_RATE / 3, T0);
	expect(&a, 0, KT_POOL_AGREED, 1);
	assert_near(rate1(&a, 0), MAX_RATE / 3);
	kt_pool_bucket_policy(a.p, 0, MAX_RATE, 1, &pol);
	assert_near(pol.rate, MAX_RATE / 3);
	assert_near(pol.fallback_rate, MAX_RATE / 3);
	/* below the cap, the lease decides */
	node_close(&a);
	node_new(&a, "a", st, LIMIT("api", RL_PLAIN), 1);
	pin.size = 4;
	kt_pool_adopt(a.p, 0, &pin, MAX_RATE / 3, T0);
	assert_near(rate1(&a, 0), MAX_RATE / 4);
	node_close(&a);
	pin.fallback_urate = 3000000;

	/* garbage is ignored: unknown stays unknown */
	node_new(&a, "a", st, LIMIT("api", RL_PLAIN), 1);
	pin.size = 0;
	pin.lease_until = T0 + SEC;
	kt_pool_adopt(a.p, 0, &pin, -1, T0);
	expect(&a, 0, KT_POOL_JOINING, 0);
	assert_true(rate1(&a, 0) == 0);
	node_close(&a);
	free(st);
}

/* A store whose clock jumps forward (or a failover to a server whose clock
 * is ahead) makes the other members look gone to the first node that
 * heartbeats; they re-register at their next heartbeat. The shrink is
 * believed one answer late, so the first node never acts on it. Simulated
 * by dropping the others' entries, which is what the script would do. */
static void test_sudden_shrink_damped(void **state)
{
	struct node a, b, c;
	struct node *ns[3] = { &a, &b, &c };
	char *st = redis_store("1s", "10s", "conservative");
	uint64_t now = T0;

	(void)state;
	node_new(&a, "a", st, LIMIT("api", RL_PLAIN), 1);
	node_new(&b, "b", st, LIMIT("api", RL_PLAIN), 1);
	node_new(&c, "c", st, LIMIT("api", RL_PLAIN), 1);
	for (int r = 0; r < 3; r++, now += SEC)
		round_all(ns, 3, now);
	expect(&a, 0, KT_POOL_AGREED, 3);
	rp_command_int(&redis, -1, "ZREM kthrottle:pool:{api}:hb b/api/m0 c/api/m0");
	rp_command_int(&redis, -1, "HDEL kthrottle:pool:{api}:size b/api/m0 c/api/m0");
	tick(&a, now);
	assert_int_equal(view(&a, 0)->live, 1); /* the store says alone... */
	expect(&a, 0, KT_POOL_DISAGREED, 3);    /* ...a keeps 3 for this answer */
	assert_near(rate1(&a, 0), MAX_RATE / 3);
	/* the others heartbeat again within the heartbeat */
	tick(&b, now);
	tick(&c, now);
	now += SEC;
	round_all(ns, 3, now);
	now += SEC;
	round_all(ns, 3, now);
	expect_all_agreed(ns, 3, 3);
	close_nodes(ns, 3);
	free(st);
}

/* One store per distinct store config: a heartbeat is one round trip per
 * store whatever the number of limits and members, none between heartbeats;
 * grouped limits each get their own answer. */
static void test_round_trips(void **state)
{
	struct node a;
	char *st = redis_store("1s", "10s", "conservative"), *other, *limits;
	uint64_t now = T0, rt;
	int i, k;

	(void)state;
	/* limit "o": same server, other keyPrefix and policy -> a second store */
	assert_true(asprintf(&other,
			     "      store:\n"
			     "        redisStore: {mode: single, url: \"redis://127.0.0.1:%d\", keyPrefix: other}\n"
			     "        heartbeat: 1s\n"
			     "        validFor: 10s\n",
			     redis.port) > 0);
	/* limit "s": its own store block equal to the top-level one except the
	 * failure policy -> shares the first store */
	assert_true(asprintf(&limits,
			     LIMIT("l1", RL_PLAIN) LIMIT("l2", "{max: 90, resumedRampUp: true}")
			     "  - name: s\n    cgroups: [x]\n    unit: connection\n    rateLimit:\n"
			     "      max: 90\n"
			     "      store:\n"
			     "        redisStore: {mode: single, url: \"redis://127.0.0.1:%d\"}\n"
			     "        heartbeat: 1s\n"
			     "        validFor: 10s\n"
			     "        onStoreFailure: open\n"
			     "  - name: o\n    cgroups: [x]\n    unit: connection\n    rateLimit:\n"
			     "      max: 90\n%s",
			     redis.port, other) > 0);
	node_new(&a, "a", st, limits, 10);
	tick(&a, now); /* connects, reads the saved ramp of l2, first heartbeat */
	for (i = 0; i < 4; i++)
		expect(&a, i, KT_POOL_AGREED, 10);
	for (k = 1; k <= 5; k++) {
		rt = kt_pool_round_trips(a.p);
		for (i = 1; i < 10; i++)
			tick(&a, now + (uint64_t)i * 100 * MS); /* not due */
		assert_int_equal(kt_pool_round_trips(a.p), rt);
		now += SEC;
		tick(&a, now);
		assert_int_equal(kt_pool_round_trips(a.p) - rt, 2);
	}
	/* each limit gets its own answer: a member more in l1 only */
	a.loc[0].n_members = 11;
	now += SEC;
	tick(&a, now);
	expect(&a, 0, KT_POOL_AGREED, 11);
	expect(&a, 1, KT_POOL_AGREED, 10);
	expect(&a, 3, KT_POOL_AGREED, 10);
	assert_int_equal(rp_command_int(&redis, -1, "ZCARD other:pool:{o}:hb"), 10);
	node_close(&a);
	free(other);
	free(limits);
	free(st);
}

/* resumedRampUp: the level is saved with every heartbeat (PX ttl), a new
 * pool takes it once, a leave saves the last level, and after ttl there is
 * nothing to resume. */
static void test_resume(void **state)
{
	struct node a;
	char *st = redis_store("1s", "10s", "conservative"), *v;
	const char *lim = LIMIT("api", "{max: 90, min: 9, rampUpDuration: 10s, resumedRampUp: true, ttl: 1s}");
	uint64_t now = T0;
	long long pttl;
	double rate = -1;

	(void)state;
	node_new(&a, "a", st, lim, 1);
	assert_false(kt_pool_take_resume(a.p, 0, &rate)); /* nothing read yet */
	a.loc[0].pool_rate = 42.5;
	tick(&a, now);
	assert_false(kt_pool_take_resume(a.p, 0, &rate)); /* nothing was saved */
	v = redis_get("kthrottle:pool:{api}:ramp");
	assert_non_null(v);
	assert_string_equal(v, "42.5");
	free(v);
	pttl = rp_command_int(&redis, -1, "PTTL kthrottle:pool:{api}:ramp");
	assert_true(pttl > 0 && pttl <= 1000);
	node_close(&a); /* crash: no leave */

	/* restart within ttl: resumes at the saved level, once; the level stays
	 * saved until it is taken even though the new pool runs at min */
	node_new(&a, "a", st, lim, 1);
	a.loc[0].pool_rate = MIN_RATE;
	tick(&a, now);
	v = redis_get("kthrottle:pool:{api}:ramp");
	assert_string_equal(v, "42.5");
	free(v);
	assert_true(kt_pool_take_resume(a.p, 0, &rate));
	assert_near(rate, 42.5);
	assert_false(kt_pool_take_resume(a.p, 0, &rate));
	a.loc[0].pool_rate = 60;
	now += SEC;
	tick(&a, now);
	v = redis_get("kthrottle:pool:{api}:ramp");
	assert_string_equal(v, "60");
	free(v);

	/* graceful stop saves the last level and deregisters */
	a.loc[0].pool_rate = 61.25;
	kt_pool_leave(a.p, a.loc, 1, true);
	v = redis_get("kthrottle:pool:{api}:ramp");
	assert_string_equal(v, "61.25");
	free(v);
	assert_int_equal(rp_command_int(&redis, -1, "ZCARD kthrottle:pool:{api}:hb"), 0);
	node_close(&a);

	/* after ttl: nothing */
	rp_sleep_ms(1100);
	node_new(&a, "a", st, lim, 1);
	tick(&a, now);
	assert_false(kt_pool_take_resume(a.p, 0, &rate));
	node_close(&a);
	free(st);
}

/* local: size = this node's members; static: max(poolSize, members); both
 * always agreed, no store, no round trips, never lost. */
static void test_local_static(void **state)
{
	struct node a;
	char *y;
	uint64_t since = 1;
	char ep[64] = "x";
	double rate;

	(void)state;
	y = yaml("a", "  static: {poolSize: 5}\n",
		 LIMIT("loc", "{max: 90, min: 9, store: {}}") LIMIT("st", RL_PLAIN));
	node_open(&a, "a", y, 3);
	free(y);
	assert_int_equal(a.cfg.limits[0].store.kind, KT_STORE_LOCAL);
	assert_int_equal(a.cfg.limits[1].store.kind, KT_STORE_STATIC);
	expect(&a, 1, KT_POOL_AGREED, 5); /* before the first tick too */
	tick(&a, T0);
	expect(&a, 0, KT_POOL_AGREED, 3);
	expect(&a, 1, KT_POOL_AGREED, 5);
	assert_near(rate1(&a, 0), MAX_RATE / 3);
	assert_near(node_rate(&a, 0), MAX_RATE);
	assert_near(rate1(&a, 1), MAX_RATE / 5);
	assert_near(node_rate(&a, 1), MAX_RATE * 3 / 5);
	a.loc[1].n_members = 7;
	tick(&a, T0 + 3600 * SEC);
	expect(&a, 1, KT_POOL_AGREED, 7);
	expect(&a, 0, KT_POOL_AGREED, 3);
	assert_near(rate1(&a, 1), MAX_RATE / 7);
	a.loc[0].n_members = 0;
	tick(&a, T0 + 7200 * SEC);
	expect(&a, 0, KT_POOL_AGREED, 1);
	assert_string_equal(kt_pool_store_state(a.p, 0, &since, ep, sizeof(ep)), "none");
	assert_int_equal(since, 0);
	assert_string_equal(ep, "");
	assert_int_equal(kt_pool_round_trips(a.p), 0);
	assert_false(kt_pool_take_resume(a.p, 0, &rate));
	kt_pool_leave(a.p, a.loc, 2, true);
	node_close(&a);
}

/* kt_pool_bucket_rate's edges and bad tick input. */
static void test_rate_edges(void **state)
{
	struct node a;
	char *y = yaml("a", "  static: {poolSize: 4}\n", LIMIT("st", RL_PLAIN));

	(void)state;
	node_open(&a, "a", y, 2);
	free(y);
	tick(&a, T0);
	assert_near(kt_pool_bucket_rate(a.p, 0, 90, 0), 0);
	assert_near(kt_pool_bucket_rate(a.p, 0, 90, -1), 0);
	assert_near(kt_pool_bucket_rate(a.p, 0, NAN, 1), 0);
	assert_near(kt_pool_bucket_rate(a.p, 0, -5, 1), 0);
	assert_near(kt_pool_bucket_rate(a.p, 1, 90, 1), 0);
	assert_near(kt_pool_bucket_rate(a.p, -1, 90, 1), 0);
	assert_near(kt_pool_bucket_rate(a.p, 0, 90, 9), 90); /* served capped at the pool size */
	assert_near(kt_pool_bucket_rate(a.p, 0, 0.5, 1), 0.125); /* fractional, not floored */
	assert_null(kt_pool_view(a.p, 1));
	assert_null(kt_pool_view(a.p, -1));
	/* a tick with the wrong number of limits is refused, the view unchanged */
	a.loc[0].n_members = 9;
	kt_pool_tick(a.p, T0 + SEC, a.loc, 2);
	kt_pool_tick(a.p, T0 + SEC, NULL, 1);
	expect(&a, 0, KT_POOL_AGREED, 4);
	node_close(&a);
}

/* An unreadable TLS file is refused at create, not at every connect. */
static void test_create_errors(void **state)
{
	struct kt_config cfg;
	struct kt_pool *p = (struct kt_pool *)&cfg;
	char err[KT_ERR_LEN], *y, *st;
	int ret;

	(void)state;
	assert_true(asprintf(&st,
			     "  redisStore:\n    mode: single\n    url: redis://127.0.0.1:%d\n"
			     "    redis_tls: {ca_cert_secret: /ca}\n",
			     redis.port) > 0);
	y = yaml("a", st, LIMIT("api", RL_PLAIN));
	ret = kt_config_parse("pool.yaml", y, strlen(y), &cfg, err, sizeof(err));
	if (ret)
		fail_msg("config: %s", err);
	assert_int_equal(kt_pool_create(&p, &cfg, err, sizeof(err)), -EIO);
	assert_null(p);
	/* at the key's own line; FILE:LINE says where, so no "limit api: " */
#define WANT "pool.yaml:6: store.redisStore.redis_tls.ca_cert_secret: cannot open /ca: "
	assert_int_equal(strncmp(err, WANT, strlen(WANT)), 0);
#undef WANT
	kt_config_free(&cfg);
	free(y);
	free(st);
}

/* A store that never answered: joining at min over this node's members
 * until validFor after the first tick, then each policy. */
static void test_never_answered(void **state)
{
	struct node a;
	char *st, *limits;
	int port = rp_free_port(), i;
	char ep[64];

	(void)state;
	assert_true(port > 0);
	assert_true(asprintf(&st,
			     "  redisStore:\n    mode: single\n    url: redis://127.0.0.1:%d\n"
			     "  heartbeat: 100ms\n  validFor: 1s\n",
			     port) > 0);
	assert_true(asprintf(&limits,
			     LIMIT("cons", RL_PLAIN) "%s%s",
			     "  - name: open\n    cgroups: [x]\n    unit: connection\n    rateLimit:\n"
			     "      max: 90\n      min: 9\n      rampUpDuration: 10s\n      store:\n"
			     "        redisStore: {mode: single, url: \"redis://127.0.0.1:PORT\"}\n"
			     "        heartbeat: 100ms\n        validFor: 1s\n        onStoreFailure: open\n",
			     "  - name: closed\n    cgroups: [x]\n    unit: connection\n    rateLimit:\n"
			     "      max: 90\n      min: 9\n      rampUpDuration: 10s\n      store:\n"
			     "        redisStore: {mode: single, url: \"redis://127.0.0.1:PORT\"}\n"
			     "        heartbeat: 100ms\n        validFor: 1s\n        onStoreFailure: closed\n") > 0);
	/* substitute the port (asprintf above keeps the YAML readable) */
	for (char *q; (q = strstr(limits, "PORT"));) {
		char *n;

		*q = 0;
		assert_true(asprintf(&n, "%s%d%s", limits, port, q + 4) > 0);
		free(limits);
		limits = n;
	}
	/* unknown is not alone: no answer, nothing adopted, no maxMembers:
	 * the size is unknown and nothing is granted, whatever the policy */
	node_new(&a, "a", st, limits, 2);
	for (i = 0; i <= 2; i++) {
		tick(&a, T0 + (uint64_t)i * 100 * MS);
		for (int k = 0; k < 3; k++) {
			expect(&a, k, KT_POOL_JOINING, 0);
			assert_true(rate1(&a, k) == 0);
		}
	}
	assert_string_equal(kt_pool_store_state(a.p, 0, NULL, ep, sizeof(ep)), "down");
	{
		char want[64];

		snprintf(want, sizeof(want), "127.0.0.1:%d", port);
		assert_string_equal(ep, want);
	}
	/* the start-up lease (staleAfter 3 x 100 ms) runs out */
	tick(&a, T0 + 400 * MS);
	for (i = 0; i < 3; i++) {
		expect(&a, i, KT_POOL_STORE_LOST, 0);
		assert_int_equal(view(&a, i)->phase_since_ns, T0 + 400 * MS);
		assert_int_equal(view(&a, i)->last_answer_ns, 0);
		assert_true(rate1(&a, i) == 0);
	}
	node_close(&a);
	free(st);

	/* maxMembers bounds the unknown size: min / maxMembers per member until
	 * the start-up lease ends, then the policy on that size */
	assert_true(asprintf(&st,
			     "  redisStore:\n    mode: single\n    url: redis://127.0.0.1:%d\n"
			     "  heartbeat: 100ms\n  validFor: 1s\n  maxMembers: 4\n",
			     port) > 0);
	node_new(&a, "a", st, LIMIT("cons", RL_PLAIN), 2);
	tick(&a, T0);
	expect(&a, 0, KT_POOL_JOINING, 4);
	assert_near(rate1(&a, 0), MIN_RATE / 4);
	assert_near(node_rate(&a, 0), MIN_RATE / 2);
	tick(&a, T0 + 400 * MS);
	expect(&a, 0, KT_POOL_STORE_LOST, 4);
	assert_near(rate1(&a, 0), MIN_RATE / 4); /* conservative */
	assert_false(view(&a, 0)->closed);
	/* fallbackFor (60 s) after the lease: closed, as the kernel is */
	tick(&a, T0 + 400 * MS + 60 * SEC);
	assert_true(view(&a, 0)->closed);
	assert_true(rate1(&a, 0) == 0);
	node_close(&a);
	free(limits);
	free(st);
}

/* Redis killed and restarted empty: the first node back sees itself alone
 * but keeps the size it had until the others re-register, so the sum of
 * rates stays within max; then agreement returns. */
static void test_redis_restart(void **state)
{
	struct node a, b;
	struct node *ns[2] = { &a, &b };
	char *st = redis_store("1s", "10s", "conservative");
	uint64_t now = T0, last;
	int r;

	(void)state;
	node_new(&a, "a", st, LIMIT("api", RL_PLAIN), 1);
	node_new(&b, "b", st, LIMIT("api", RL_PLAIN), 1);
	for (r = 0; r < 3; r++, now += SEC)
		round_all(ns, 2, now);
	expect(&a, 0, KT_POOL_AGREED, 2);
	expect(&b, 0, KT_POOL_AGREED, 2);
	last = view(&a, 0)->last_answer_ns;

	assert_int_equal(rp_restart(&redis), 0);
	/* the old connection fails: views hold */
	round_all(ns, 2, now);
	expect(&a, 0, KT_POOL_AGREED, 2);
	assert_int_equal(view(&a, 0)->last_answer_ns, last);
	assert_string_equal(kt_pool_store_state(a.p, 0, NULL, NULL, 0), "down");
	rp_sleep_ms(KT_STORE_BACKOFF_MIN_MS + 20); /* past the first back-off */

	now += SEC;
	tick(&a, now);
	assert_int_equal(view(&a, 0)->last_answer_ns, now);
	assert_int_equal(view(&a, 0)->live, 1);
	expect(&a, 0, KT_POOL_DISAGREED, 2);
	assert_near(rate1(&a, 0), MAX_RATE / 2);
	tick(&b, now);
	check_sum(ns, 2, 0);
	expect(&b, 0, KT_POOL_DISAGREED, 2); /* a reported 1 */
	now += SEC;
	round_all(ns, 2, now);
	expect(&a, 0, KT_POOL_AGREED, 2);
	expect(&b, 0, KT_POOL_AGREED, 2);
	node_close(&a);
	node_close(&b);
	free(st);
}

/* share: demand after the store came back empty: the node that reconnects
 * first is offered the whole pool (the other node, still in its back-off,
 * is unknown to the new store but runs on its grant), so for the floor
 * period its member does not grow above its grant from before; afterwards
 * it takes what the store grants. */
static double member_rate(const struct node *n, int i)
{
	struct kt_bucket_policy pol;

	kt_pool_members_policy(n->p, i, MAX_RATE, n->ids[i], 1, &pol);
	return pol.rate;
}

static void test_demand_store_reborn_held(void **state)
{
	struct node a, b;
	char *st = redis_store("1s", "10s", "conservative");
	const double busy[1] = { 80 };
	uint64_t now = T0, until;
	double before, worst = 0;
	int r;

	(void)state;
	node_new(&a, "a", st,
		 "  - name: api\n    cgroups: [x]\n    unit: connection\n    share: demand\n"
		 "    rateLimit: {max: 90}\n",
		 1);
	node_new(&b, "b", st,
		 "  - name: api\n    cgroups: [x]\n    unit: connection\n    share: demand\n"
		 "    rateLimit: {max: 90}\n",
		 1);
	a.loc[0].member_demand = busy;
	b.loc[0].member_demand = busy;
	for (r = 0; r < 5; r++, now += SEC) {
		tick(&a, now);
		tick(&b, now);
	}
	before = member_rate(&a, 0);
	assert_near(before, MAX_RATE / 2);
	assert_near(member_rate(&b, 0), MAX_RATE / 2);

	assert_int_equal(rp_restart(&redis), 0);
	tick(&a, now); /* the old connections fail */
	tick(&b, now);
	rp_sleep_ms(KT_STORE_BACKOFF_MIN_MS + 20);
	/* a alone talks to the new, empty store; b stays silent (backing off) */
	until = now + (KT_STORE_BACKOFF_MAX_MS * MS) + 3 * SEC;
	for (now += SEC; now < until; now += SEC) {
		tick(&a, now);
		if (member_rate(&a, 0) > worst)
			worst = member_rate(&a, 0);
	}
	print_message("a's member after the store came back empty: at most %.3f/s (%.3f/s before)\n",
		      worst, before);
	assert_true(worst <= before + EPS);
	assert_near(worst, before); /* held, not starved */
	for (r = 0; r < 3; r++, now += SEC)
		tick(&a, now);
	print_message("a's member once the floor ended: %.3f/s\n", member_rate(&a, 0));
	assert_true(member_rate(&a, 0) > before + 10); /* b is gone: a takes its demand */
	node_close(&a);
	node_close(&b);
	free(st);
}

/* ---- real-time scenarios (100 ms heartbeat) ---- */

#define HB_MS 100
#define STALE 3

static void tick_real(struct node **ns, int k)
{
	uint64_t now = mono_ns();

	for (int i = 0; i < k; i++)
		tick(ns[i], now);
}

static bool all_agreed(struct node **ns, int k, int n_limits, int size)
{
	for (int i = 0; i < k; i++)
		for (int l = 0; l < n_limits; l++)
			if (view(ns[i], l)->phase != KT_POOL_AGREED || view(ns[i], l)->size != size)
				return false;
	return true;
}

static void wait_agreed(struct node **ns, int k, int n_limits, int size, int timeout_ms)
{
	uint64_t end = mono_ns() + (uint64_t)timeout_ms * MS;

	while (!all_agreed(ns, k, n_limits, size)) {
		if (mono_ns() > end)
			fail_msg("no agreement on %d within %d ms", size, timeout_ms);
		tick_real(ns, k);
		rp_sleep_ms(5);
	}
}

/* A node that stops heartbeating (dies) is pruned after staleAfter
 * heartbeats; the survivors agree on the smaller pool within staleAfter + 2
 * heartbeats of its last heartbeat, and not before staleAfter. */
static void test_death(void **state)
{
	struct node a, b, c;
	struct node *ns[3] = { &a, &b, &c };
	char *st = redis_store("100ms", "1s", "conservative");
	uint64_t t_dead, rt, elapsed;

	(void)state;
	node_new(&a, "a", st, LIMIT("api", RL_PLAIN), 1);
	node_new(&b, "b", st, LIMIT("api", RL_PLAIN), 1);
	node_new(&c, "c", st, LIMIT("api", RL_PLAIN), 1);
	wait_agreed(ns, 3, 1, 3, 3000);

	/* let c heartbeat once more, then stop ticking it */
	rt = kt_pool_round_trips(c.p);
	do {
		rp_sleep_ms(2);
		t_dead = mono_ns();
		tick_real(ns, 3);
	} while (kt_pool_round_trips(c.p) == rt);

	while (!all_agreed(ns, 2, 1, 2)) {
		elapsed = mono_ns() - t_dead;
		if (elapsed > (uint64_t)(STALE + 3) * HB_MS * MS + 150 * MS)
			fail_msg("survivors did not agree on 2 within %llu ms (a %s %d, b %s %d)",
				 (unsigned long long)(elapsed / MS), kt_pool_phase_name(view(&a, 0)->phase),
				 view(&a, 0)->size, kt_pool_phase_name(view(&b, 0)->phase), view(&b, 0)->size);
		/* never below the true pool before c is stale */
		assert_true(view(&a, 0)->size >= 2 && view(&b, 0)->size >= 2);
		if (view(&a, 0)->size == 2 || view(&b, 0)->size == 2)
			assert_true(elapsed >= (uint64_t)STALE * HB_MS * MS);
		tick_real(ns, 2);
		rp_sleep_ms(5);
	}
	elapsed = mono_ns() - t_dead;
	assert_true(elapsed >= (uint64_t)STALE * HB_MS * MS);
	/* c's kernel may still admit its fallback (min / 3) until fallbackFor
	 * ends: the survivors hold that back, so the sum never passes max */
	assert_near(view(&a, 0)->reserved, MIN_RATE / 3);
	assert_near(rate1(&a, 0), (MAX_RATE - MIN_RATE / 3) / 2);
	assert_near(rate1(&b, 0), (MAX_RATE - MIN_RATE / 3) / 2);
	assert_true(2 * rate1(&a, 0) + MIN_RATE / 3 <= MAX_RATE + 1e-9);
	fprintf(stderr, "# death: survivors agreed after %llu ms (bound %d ms)\n",
		(unsigned long long)(elapsed / MS), (STALE + 3) * HB_MS);
	close_nodes(ns, 3);
	free(st);
}

static char *policy_limit(const char *name, const char *policy)
{
	char *s;

	assert_true(asprintf(&s,
			     "  - name: %s\n    cgroups: [x]\n    unit: connection\n    rateLimit:\n"
			     "      max: 90\n      min: 9\n      rampUpDuration: 10s\n      store:\n"
			     "        redisStore: {mode: single, url: \"redis://127.0.0.1:%d\"}\n"
			     "        heartbeat: 100ms\n        validFor: 1s\n        onStoreFailure: %s\n",
			     name, redis.port, policy) > 0);
	return s;
}

/* Sum over both nodes of limit l stays within max. */
static void check_pair(struct node **ns, int n_limits)
{
	for (int l = 0; l < n_limits; l++) {
		double s = node_rate(ns[0], l) + node_rate(ns[1], l);

		if (s > MAX_RATE + 1e-6)
			fail_msg("limit %d: rates sum to %g > %g (a %s %d, b %s %d)", l, s, MAX_RATE,
				 kt_pool_phase_name(view(ns[0], l)->phase), view(ns[0], l)->size,
				 kt_pool_phase_name(view(ns[1], l)->phase), view(ns[1], l)->size);
	}
}

/* Redis stopped (SIGSTOP): the views hold until validFor after the last
 * answer, then each policy applies; after SIGCONT the first node back keeps
 * the old size as a floor while alone, and agreement returns. */
static void test_store_lost(void **state)
{
	struct node a, b;
	struct node *ns[2] = { &a, &b };
	char *st = redis_store("100ms", "1s", "conservative");
	char *l0 = policy_limit("cons", "conservative"), *l1 = policy_limit("open", "open"),
	     *l2 = policy_limit("closed", "closed"), *limits;
	const double lost_rate[3] = { MIN_RATE / 2, MAX_RATE / 2, 0 };
	uint64_t last[2], end, since = 0, t_back;
	bool all_lost;
	int i, l;

	(void)state;
	assert_true(asprintf(&limits, "%s%s%s", l0, l1, l2) > 0);
	node_new(&a, "a", st, limits, 1);
	node_new(&b, "b", st, limits, 1);
	wait_agreed(ns, 2, 3, 2, 3000);

	assert_int_equal(rp_signal(&redis, SIGSTOP), 0);
	for (i = 0; i < 2; i++)
		last[i] = view(ns[i], 0)->last_answer_ns;
	end = mono_ns() + 5 * SEC;
	do {
		assert_true(mono_ns() < end);
		tick_real(ns, 2);
		check_pair(ns, 3);
		all_lost = true;
		for (i = 0; i < 2; i++) {
			for (l = 0; l < 3; l++) {
				const struct kt_pool_view *v = view(ns[i], l);

				assert_int_equal(v->last_answer_ns, last[i]);
				assert_int_equal(v->size, 2);
				if (v->phase == KT_POOL_STORE_LOST) {
					/* the lease: staleAfter x heartbeat from the last answer */
					assert_true(v->phase_since_ns - last[i] > (uint64_t)STALE * HB_MS * MS);
					assert_near(rate1(ns[i], l), lost_rate[l]);
				} else {
					/* held until the lease ends (ticks may block on the store) */
					assert_true(v->phase == KT_POOL_AGREED);
					assert_near(rate1(ns[i], l), MAX_RATE / 2);
					all_lost = false;
				}
			}
		}
		rp_sleep_ms(10);
	} while (!all_lost);
	for (i = 0; i < 2; i++)
		assert_true(view(ns[i], 0)->phase_since_ns - last[i] <
			    (uint64_t)STALE * HB_MS * MS + 1500 * MS);
	assert_string_equal(kt_pool_store_state(a.p, 0, &since, NULL, 0), "down");
	assert_true(since > 0);

	/* back: a alone first. Redis runs the heartbeats that were buffered in
	 * its sockets when it resumes, so wait until they are stale too; then a
	 * sees live 1 but keeps the size it had */
	assert_int_equal(rp_signal(&redis, SIGCONT), 0);
	t_back = mono_ns();
	rp_sleep_ms((STALE + 1) * HB_MS);
	while (view(&a, 0)->last_answer_ns == last[0]) {
		assert_true(mono_ns() - t_back < 7 * SEC);
		tick(&a, mono_ns());
		check_pair(ns, 3);
		rp_sleep_ms(10);
	}
	for (l = 0; l < 3; l++) {
		assert_int_equal(view(&a, l)->live, 1);
		expect(&a, l, KT_POOL_DISAGREED, 2);
		/* b has lapsed: its fallback is held back from a's share */
		assert_near(view(&a, l)->reserved, lost_rate[l]);
		assert_near(rate1(&a, l), (MAX_RATE - lost_rate[l]) / 2);
	}
	end = mono_ns() + 8 * SEC;
	while (!all_agreed(ns, 2, 3, 2)) {
		assert_true(mono_ns() < end);
		tick_real(ns, 2);
		check_pair(ns, 3);
		rp_sleep_ms(5);
	}
	assert_string_equal(kt_pool_store_state(a.p, 0, NULL, NULL, 0), "up");
	fprintf(stderr, "# store lost: agreement back %llu ms after SIGCONT\n",
		(unsigned long long)((mono_ns() - t_back) / MS));
	node_close(&a);
	node_close(&b);
	free(limits);
	free(l0);
	free(l1);
	free(l2);
	free(st);
}

/* ---- fixtures ---- */

static int group_setup(void **state)
{
	(void)state;
	kt_log_init("test_pool", getenv("KT_TEST_VERBOSE") ? KT_LOG_DEBUG : KT_LOG_ERROR);
	if (rp_start_master(&redis, NULL)) {
		fprintf(stderr, "cannot start redis-server\n");
		return -1;
	}
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	rp_stop(&redis);
	return 0;
}

static int flush(void **state)
{
	redisReply *r;

	(void)state;
	r = rp_command(&redis, "FLUSHALL");
	if (!r)
		return -1;
	freeReplyObject(r);
	return 0;
}

/* A pod joining on node a raises a's node share only once the other
 * nodes can have shrunk theirs: the controller holds a's node bucket (all
 * its members' share together) at what it was for three heartbeats after
 * the join, so the nodes' shares never add up to more than max, and then
 * gives a its share of the larger pool. */
static void test_join_held_until_others_shrink(void **state)
{
	struct node a, b;
	struct node *ns[2] = { &a, &b };
	char *st = redis_store("100ms", "1s", "conservative");
	struct kt_limit_rt la = { 0 };
	struct kt_limit_state sa = { 0 };
	double worst = 0;

	(void)state;
	node_new(&a, "a", st, LIMIT("api", "{max: 90}"), 1);
	node_new(&b, "b", st, LIMIT("api", "{max: 90}"), 1);
	wait_agreed(ns, 2, 1, 2, 3000);
	la.cfg = &a.cfg.limits[0];
	la.member_ids = a.ids[0];
	la.n_members = 1;
	sa.pool_rate = 90;
	kt_ctl_decide(a.p, 0, &la, &sa, kt_clock_ns());
	assert_near(sa.pol.node_rate, 45);

	/* a second pod on a: a's own view already gives its node 2 shares */
	la.n_members = 2;
	a.loc[0].n_members = 2;
	uint64_t joined = mono_ns(), end = joined + 1500 * MS;
	bool grew = false;

	while (mono_ns() < end) {
		kt_ctl_decide(a.p, 0, &la, &sa, kt_clock_ns());
		double sum = sa.pol.node_rate + kt_pool_bucket_rate(b.p, 0, 90, 1);

		if (sum > worst)
			worst = sum;
		if (sa.pol.node_rate > 45 + 1e-9 && mono_ns() - joined < 300 * MS)
			fail_msg("node a at %.3f/s %.0f ms after the join, before the hold ended",
				 sa.pol.node_rate, (mono_ns() - joined) / 1e6);
		grew |= fabs(sa.pol.node_rate - 60) < 1e-6;
		tick_real(ns, 2);
		rp_sleep_ms(5);
	}
	print_message("node shares summed to at most %.3f/s of 90; a's node bucket %.3f/s at the end\n",
		      worst, sa.pol.node_rate);
	assert_true(worst <= 90 + 1e-6);
	assert_true(grew);
	assert_near(sa.pol.node_rate, 60);
	node_close(&a);
	node_close(&b);
	free(st);
}

/* What the writers put in a bucket (tat is the kernel's). */
static void written(const struct kt_bpf *bpf, uint32_t slot, uint64_t out[6])
{
	const struct kt_bucket *bk = &bpf->buckets[slot];

	out[0] = bk->interval_fp;
	out[1] = bk->burst;
	out[2] = bk->valid_until;
	out[3] = bk->fallback_fp;
	out[4] = bk->fallback_burst;
	out[5] = bk->fallback_until;
}

/* The controller decides once: kt_ctl_write_rates and kt_ctl_write_lease
 * write what kt_ctl_decide left in the limit's state, each member its own
 * grant by demand and the node bucket its sum, and recompute nothing: the
 * pool's grants and the ramp moving after the decide change no write
 * until the next decide. */
static void test_writers_write_the_decision(void **state)
{
	struct node a;
	char *st = redis_store("1s", "10s", "conservative");
	const double demand[2] = { 20, 60 }, moved[2] = { 60, 20 };
	struct kt_member_rt members[2] = { { .slot = 0 }, { .slot = 1 } };
	struct kt_limit_rt la = { .members = members, .n_members = 2, .has_pool = true, .pool_slot = 2 };
	struct kt_plan plan = { .limits = &la, .n_limits = 1 };
	struct kt_limit_state sa = { .pool_rate = MAX_RATE };
	struct kt_bpf bpf = { .buckets = calloc(4, sizeof(struct kt_bucket)) };
	struct kt_ctl c = { .plan = &plan, .ls = &sa, .bpf = &bpf };
	uint64_t first[3][6], again[3][6], now = T0;

	(void)state;
	assert_non_null(bpf.buckets);
	node_new(&a, "a", st,
		 "  - name: api\n    cgroups: [x]\n    unit: connection\n    share: demand\n"
		 "    rateLimit: {max: 90}\n",
		 2);
	a.loc[0].member_demand = demand;
	for (int r = 0; r < 5; r++, now += SEC)
		tick(&a, now);
	la.cfg = &a.cfg.limits[0];
	la.member_ids = a.ids[0];
	c.pool = a.p;
	kt_ctl_decide(a.p, 0, &la, &sa, now);
	assert_int_equal(sa.n_slot_pol, 2);
	kt_ctl_write_rates(&c, 0);
	kt_ctl_write_lease(&c, 0);
	for (uint32_t k = 0; k < 3; k++)
		written(&bpf, k, first[k]);
	/* the members' own grants, not one share: the test sees which is which */
	assert_true(first[0][0] != first[1][0]);
	assert_true(first[0][2] != 0); /* a lease from the store */

	/* the grants swap and the ramp moves; the writers still write the decision */
	a.loc[0].member_demand = moved;
	for (int r = 0; r < 5; r++, now += SEC)
		tick(&a, now);
	sa.pool_rate = MAX_RATE / 2;
	kt_ctl_write_rates(&c, 0);
	kt_ctl_write_lease(&c, 0);
	kt_ctl_write_rates(&c, 0);
	for (uint32_t k = 0; k < 3; k++) {
		written(&bpf, k, again[k]);
		assert_memory_equal(first[k], again[k], sizeof(first[k]));
		assert_int_equal(bpf.written[k].interval_fp, first[k][0]);
	}

	/* the next decide takes them in */
	kt_ctl_decide(a.p, 0, &la, &sa, now);
	kt_ctl_write_rates(&c, 0);
	written(&bpf, 0, again[0]);
	assert_true(again[0][0] != first[0][0]);

	kt_ctl_free_states(&sa, 1);
	assert_null(sa.slot_pol);
	free(bpf.written);
	free(bpf.buckets);
	node_close(&a);
	free(st);
}

/* The join budget (store.h "The start herd"): two limits of BIG members
 * each, whose first heartbeat times out (Redis's writes paused past the
 * step's timeout): the budget becomes half of what was sent, one limit.
 * The next heartbeat answers one and defers the other, which stays
 * joining, grants nothing (no maxMembers), makes no key and is not taken
 * for a store failure; the one after answers it. */
#define BIG 600
static void test_join_budget_defers(void **state)
{
	static char idb[2][BIG][32];
	static const char *ids[2][BIG];
	struct node a;
	struct kt_pool_work w;
	char *st = redis_store("1s", "10s", "conservative"), *limits;
	uint64_t now = T0;

	(void)state;
	assert_true(asprintf(&limits, "%s%s", LIMIT("big0", RL_PLAIN), LIMIT("big1", RL_PLAIN)) > 0);
	node_new(&a, "a", st, limits, 1);
	for (int i = 0; i < 2; i++) {
		for (int j = 0; j < BIG; j++) {
			snprintf(idb[i][j], sizeof(idb[i][j]), "a/big%d/m%d", i, j);
			ids[i][j] = idb[i][j];
		}
		a.loc[i].member_ids = ids[i];
		a.loc[i].n_members = BIG;
	}
	/* writes (the heartbeat scripts) paused longer than a step's timeout
	 * after the connection's setup (KT_STORE_TIMEOUT_FLOOR_MS: the setup
	 * is answered at once) */
	assert_int_equal(rp_command_int(&redis, -1, "CLIENT PAUSE 600 WRITE"), -1);
	tick(&a, now);
	expect(&a, 0, KT_POOL_JOINING, 0);
	expect(&a, 1, KT_POOL_JOINING, 0);
	/* the pause over, and the back-off after the failure */
	rp_sleep_ms(700);
	now += SEC;
	tick(&a, now);
	expect(&a, 0, KT_POOL_AGREED, BIG);
	expect(&a, 1, KT_POOL_JOINING, 0);
	assert_true(rate1(&a, 1) == 0);
	assert_string_equal(kt_pool_store_state(a.p, 1, NULL, NULL, 0), "up");
	kt_pool_store_work(a.p, &w);
	assert_int_equal(w.deferred, 1);
	assert_int_equal(rp_command_int(&redis, -1, "EXISTS kthrottle:pool:{big1}:hb"), 0);
	now += SEC;
	tick(&a, now);
	expect(&a, 1, KT_POOL_AGREED, BIG);
	assert_near(rate1(&a, 1), MAX_RATE / BIG);
	assert_int_equal(rp_command_int(&redis, -1, "ZCARD kthrottle:pool:{big1}:hb"), BIG);
	kt_pool_store_work(a.p, &w);
	assert_int_equal(w.deferred, 1);
	node_close(&a);
	free(limits);
	free(st);
}

#define T(f) cmocka_unit_test_setup(f, flush)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_converge_and_join),
		T(test_leave_and_detach),
		T(test_round_trips),
		T(test_resume),
		T(test_local_static),
		T(test_rate_edges),
		T(test_create_errors),
		T(test_never_answered),
		T(test_redis_restart),
		T(test_demand_store_reborn_held),
		T(test_death),
		T(test_store_lost),
		T(test_adopt_pinned_lease),
		T(test_sudden_shrink_damped),
		T(test_join_held_until_others_shrink),
		T(test_writers_write_the_decision),
		T(test_join_budget_defers),
	};
	return cmocka_run_group_tests_name("pool", tests, group_setup, group_teardown);
}
