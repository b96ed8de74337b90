// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Query-tag buckets (user/tags/tagtab.c) with an injected clock. The first
 * test is the tag limits' worked example (docs/tags.md), step by step: burst 10, rate 1/s, two
 * nodes A and B, 17 requests split 9/8, two more to A, the exchange at t=5,
 * then the example's table of bucket values at t=5.1, 5.2, 6, 7, 8, 9. Our buckets
 * refill continuously, so between whole seconds they hold fractions the
 * table rounds (A is 0.1 at t=0.2, not 0): each value is asserted exactly
 * and against the table's integer rounded. The rest: the harvest (counts,
 * zeroing, nothing lost to eviction or a failed report), max_tags, idle
 * expiry (never of a tag in debt), a reload that keeps each tag's tokens,
 * and bad tags. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "kthrottle.h"
#include "tags/tagtab.h"

#define S(x) ((uint64_t)((x) * 1e9 + 0.5))
#define BASE S(1000) /* the kt clock is never near 0 */
#define T(x) (BASE + S(x))

struct report {
	char tag[64][KT_TAG_MAX_LEN + 1];
	uint64_t hits[64];
	int n;
};

static void collect(void *ctx, const char *tag, size_t len, uint64_t hits)
{
	struct report *r = ctx;

	assert_true(r->n < 64);
	memcpy(r->tag[r->n], tag, len);
	r->tag[r->n][len] = 0;
	r->hits[r->n++] = hits;
}

static uint64_t hits_of(const struct report *r, const char *tag)
{
	for (int i = 0; i < r->n; i++)
		if (!strcmp(r->tag[i], tag))
			return r->hits[i];
	return 0;
}

static struct kt_tagtab *mk(double rate, uint64_t burst, uint32_t max_tags, uint64_t idle)
{
	struct kt_tagtab_opts o = { .rate = rate, .burst = burst, .max_tags = max_tags,
				    .idle_expiry_ns = idle };
	struct kt_tagtab *t;

	assert_int_equal(kt_tagtab_new(&o, &t), 0);
	return t;
}

static int take(struct kt_tagtab *t, const char *tag, uint64_t now)
{
	return kt_tagtab_take(t, tag, strlen(tag), now);
}

static double tokens(struct kt_tagtab *t, const char *tag, uint64_t now)
{
	return kt_tagtab_tokens(t, tag, strlen(tag), now);
}

/* exact value, and the example table's integer */
static void expect(struct kt_tagtab *t, const char *tag, double when, double exact, int table)
{
	double v = tokens(t, tag, T(when));

	if (fabs(v - exact) > 1e-6 || lround(v) != table)
		fail_msg("t=%.1f: bucket %.6f, want %.6f (table %d)", when, v, exact, table);
}

static void test_seed_004_worked_example(void **state)
{
	(void)state;
	struct kt_tagtab *a = mk(1.0, 10, 1024, S(300)), *b = mk(1.0, 10, 1024, S(300));
	struct report ra = { 0 }, rb = { 0 };
	int i;

	expect(a, "C", 0, 10, 10);
	expect(b, "C", 0, 10, 10);
	/* t=0.1: 17 requests, 9 to A and 8 to B: all served */
	for (i = 0; i < 9; i++)
		assert_int_equal(take(a, "C", T(0.1)), KT_ADMIT);
	for (i = 0; i < 8; i++)
		assert_int_equal(take(b, "C", T(0.1)), KT_ADMIT);
	expect(a, "C", 0.1, 1, 1);
	expect(b, "C", 0.1, 2, 2);
	/* t=0.2: two more, both to A: the first served, the second refused */
	assert_int_equal(take(a, "C", T(0.2)), KT_ADMIT);
	assert_int_equal(take(a, "C", T(0.2)), KT_REFUSE);
	expect(a, "C", 0.2, 0.1, 0);
	expect(b, "C", 0.2, 2.1, 2);
	/* A's other clients, as in the worked example */
	for (i = 0; i < 2; i++)
		take(a, "204.112.101.1", T(1));
	for (i = 0; i < 4; i++)
		take(a, "212.132.96.2", T(2));
	take(a, "196.44.2.71", T(3));
	/* t=5: the exchange. A served C 10 times, B 8 times */
	kt_tagtab_harvest(a, collect, &ra);
	kt_tagtab_harvest(b, collect, &rb);
	assert_int_equal(ra.n, 4);
	assert_int_equal(hits_of(&ra, "C"), 10);
	assert_int_equal(hits_of(&ra, "204.112.101.1"), 2);
	assert_int_equal(hits_of(&ra, "212.132.96.2"), 4);
	assert_int_equal(hits_of(&ra, "196.44.2.71"), 1);
	assert_int_equal(rb.n, 1);
	assert_int_equal(hits_of(&rb, "C"), 8);
	for (i = 0; i < rb.n; i++)
		kt_tagtab_debit(a, rb.tag[i], strlen(rb.tag[i]), rb.hits[i], T(5));
	for (i = 0; i < ra.n; i++)
		kt_tagtab_debit(b, ra.tag[i], strlen(ra.tag[i]), ra.hits[i], T(5));
	/* t=5.1: -8+5 on both: both up to date with C's global count */
	expect(a, "C", 5.1, -3, -3);
	expect(b, "C", 5.1, -3, -3);
	/* t=5.2: two more requests, denied by both */
	assert_int_equal(take(a, "C", T(5.2)), KT_REFUSE);
	assert_int_equal(take(b, "C", T(5.2)), KT_REFUSE);
	expect(a, "C", 5.2, -2.9, -3);
	expect(b, "C", 5.2, -2.9, -3);
	/* t=6..9: C backs off while the buckets refill */
	expect(a, "C", 6, -2.1, -2);
	expect(b, "C", 6, -2.1, -2);
	expect(a, "C", 7, -1.1, -1);
	expect(b, "C", 7, -1.1, -1);
	expect(a, "C", 8, -0.1, 0);
	expect(b, "C", 8, -0.1, 0);
	expect(a, "C", 9, 0.9, 1);
	expect(b, "C", 9, 0.9, 1);
	/* "C can finally make another request": the first whole token is
	 * there at 9.1 on both nodes, not a moment before */
	assert_int_equal(take(a, "C", T(9.09)), KT_REFUSE);
	assert_int_equal(take(b, "C", T(9.09)), KT_REFUSE);
	assert_int_equal(take(a, "C", T(9.1)), KT_ADMIT);
	assert_int_equal(take(b, "C", T(9.1)), KT_ADMIT);
	/* refused queries are not hits: the next report has just these two */
	memset(&ra, 0, sizeof(ra));
	kt_tagtab_harvest(a, collect, &ra);
	assert_int_equal(ra.n, 1);
	assert_int_equal(hits_of(&ra, "C"), 1);
	/* and remote hits are not reported back */
	memset(&rb, 0, sizeof(rb));
	kt_tagtab_harvest(b, collect, &rb);
	assert_int_equal(hits_of(&rb, "204.112.101.1"), 0);
	kt_tagtab_free(a);
	kt_tagtab_free(b);
}

/* The long-run rate holds however the requests are spread: a client sending
 * as fast as it may to two nodes, alternately, exchanging every second, is
 * served burst + rate x time, give or take what one report interval can
 * hide (each node's unreported share of a second's refill). */
static void test_alternating_client_long_run(void **state)
{
	(void)state;
	const double rate = 5;
	const uint64_t burst = 10;
	struct kt_tagtab *n[2] = { mk(rate, burst, 64, S(300)), mk(rate, burst, 64, S(300)) };
	uint64_t served = 0;

	for (int ms = 0; ms < 60000; ms += 10) {
		/* one query every 10 ms to each node */
		for (int k = 0; k < 2; k++)
			if (take(n[k], "client", T(ms / 1000.0)) == KT_ADMIT)
				served++;
		if (ms % 1000 == 999 - 9) {
			struct report r[2];

			memset(r, 0, sizeof(r));

			for (int k = 0; k < 2; k++)
				kt_tagtab_harvest(n[k], collect, &r[k]);
			for (int k = 0; k < 2; k++)
				for (int i = 0; i < r[!k].n; i++)
					kt_tagtab_debit(n[k], r[!k].tag[i], strlen(r[!k].tag[i]),
							r[!k].hits[i], T(ms / 1000.0));
		}
	}
	double want = burst + rate * 60;
	/* one interval's refill on the other node is the most either can run
	 * ahead: rate x 1 s, plus its burst at the start */
	if (served > want + rate * 1 + burst || served < want - rate * 1)
		fail_msg("served %llu in 60 s, want %.0f", (unsigned long long)served, want);
	kt_tagtab_free(n[0]);
	kt_tagtab_free(n[1]);
}

static void test_max_tags_evicts_lru_keeps_hits(void **state)
{
	(void)state;
	struct kt_tagtab *t = mk(1, 2, 3, S(300));
	struct kt_tagtab_stats st;
	struct report r = { 0 };

	assert_int_equal(take(t, "a", T(0)), KT_ADMIT);
	assert_int_equal(take(t, "b", T(0)), KT_ADMIT);
	assert_int_equal(take(t, "c", T(0)), KT_ADMIT);
	assert_int_equal(take(t, "a", T(0)), KT_ADMIT); /* a is now the most recent */
	assert_int_equal(take(t, "d", T(0)), KT_ADMIT); /* evicts b */
	kt_tagtab_stats(t, &st);
	assert_int_equal(st.tags, 3);
	assert_int_equal(st.evicted, 1);
	assert_true(tokens(t, "a", T(0)) == 0);
	assert_true(tokens(t, "b", T(0)) == 2); /* forgotten: full again */
	/* b's hit was not reported yet: it still is */
	kt_tagtab_harvest(t, collect, &r);
	assert_int_equal(r.n, 4);
	assert_int_equal(hits_of(&r, "a"), 2);
	assert_int_equal(hits_of(&r, "b"), 1);
	assert_int_equal(hits_of(&r, "d"), 1);
	memset(&r, 0, sizeof(r));
	assert_int_equal(kt_tagtab_harvest(t, collect, &r), 0);
	kt_tagtab_free(t);
}

static void test_unharvest_carries_hits(void **state)
{
	(void)state;
	struct kt_tagtab *t = mk(1, 5, 8, S(300));
	struct report r = { 0 };

	take(t, "x", T(0));
	take(t, "x", T(0));
	kt_tagtab_harvest(t, collect, &r);
	assert_int_equal(hits_of(&r, "x"), 2);
	/* the report failed: put them back, plus a new hit meanwhile */
	kt_tagtab_unharvest(t, "x", 1, 2);
	kt_tagtab_unharvest(t, "gone", 4, 3); /* a tag forgotten since */
	take(t, "x", T(0.5));
	memset(&r, 0, sizeof(r));
	kt_tagtab_harvest(t, collect, &r);
	assert_int_equal(r.n, 2);
	assert_int_equal(hits_of(&r, "x"), 3);
	assert_int_equal(hits_of(&r, "gone"), 3);
	kt_tagtab_free(t);
}

static void test_idle_expiry_never_forgets_debt(void **state)
{
	(void)state;
	struct kt_tagtab *t = mk(1, 2, 16, S(10));
	struct kt_tagtab_stats st;

	take(t, "idle", T(0));
	kt_tagtab_debit(t, "debtor", 6, 100, T(0)); /* 98 tokens short until t=100 */
	take(t, "busy", T(0));
	assert_int_equal(kt_tagtab_expire(t, T(5)), 0);
	take(t, "busy", T(20));
	/* idle: full at t=1, forgotten from t=11; debtor full only at t=100 */
	assert_int_equal(kt_tagtab_expire(t, T(20)), 1);
	assert_true(tokens(t, "debtor", T(20)) < -70);
	assert_int_equal(kt_tagtab_expire(t, T(109)), 1); /* busy: full since 21 */
	assert_true(tokens(t, "debtor", T(109)) == 2);
	kt_tagtab_stats(t, &st);
	assert_int_equal(st.tags, 1);
	assert_int_equal(kt_tagtab_expire(t, T(111)), 1);
	kt_tagtab_stats(t, &st);
	assert_int_equal(st.tags, 0);
	assert_int_equal(st.expired, 3);
	kt_tagtab_free(t);
}

static void test_reconfigure_keeps_tokens(void **state)
{
	(void)state;
	struct kt_tagtab *t = mk(1, 10, 16, S(300));
	struct kt_tagtab_opts o = { .rate = 4, .burst = 20, .max_tags = 16,
				    .idle_expiry_ns = S(300) };

	kt_tagtab_debit(t, "c", 1, 15, T(0)); /* -5 */
	assert_true(fabs(tokens(t, "c", T(0)) + 5) < 1e-9);
	assert_int_equal(kt_tagtab_reconfigure(t, &o, T(0)), 0);
	/* 15 tokens short at 4/s: 3.75 s; the burst is now 20 */
	assert_true(fabs(tokens(t, "c", T(0)) - 5) < 1e-6);
	assert_true(fabs(tokens(t, "c", T(1)) - 9) < 1e-6);
	o.rate = 0;
	assert_int_equal(kt_tagtab_reconfigure(t, &o, T(1)), -EINVAL);
	assert_true(fabs(tokens(t, "c", T(1)) - 9) < 1e-6); /* unchanged */
	kt_tagtab_free(t);
}

static void test_bad_tags_and_opts(void **state)
{
	(void)state;
	struct kt_tagtab *t = mk(1, 1, 4, S(1));
	struct kt_tagtab_opts bad = { .rate = 1, .burst = 0, .max_tags = 1, .idle_expiry_ns = 1 };
	struct kt_tagtab *u;
	char big[KT_TAG_MAX_LEN + 2];
	struct kt_tagtab_stats st;

	memset(big, 'x', sizeof(big));
	assert_int_equal(kt_tagtab_take(t, "", 0, T(0)), KT_REFUSE);
	assert_int_equal(kt_tagtab_take(t, big, KT_TAG_MAX_LEN + 1, T(0)), KT_REFUSE);
	assert_int_equal(kt_tagtab_take(t, big, KT_TAG_MAX_LEN, T(0)), KT_ADMIT);
	kt_tagtab_stats(t, &st);
	assert_int_equal(st.tags, 1);
	assert_int_equal(st.refused, 2);
	assert_int_equal(kt_tagtab_new(&bad, &u), -EINVAL);
	bad.burst = 1;
	bad.rate = NAN;
	assert_int_equal(kt_tagtab_new(&bad, &u), -EINVAL);
	bad.rate = 1;
	bad.max_tags = 0;
	assert_int_equal(kt_tagtab_new(&bad, &u), -EINVAL);
	kt_tagtab_free(t);
}

/* Many tags: every one keeps its own bucket and the chains hold. */
static void test_many_tags(void **state)
{
	(void)state;
	struct kt_tagtab *t = mk(1, 1, 100000, S(300));
	char tag[32];
	struct kt_tagtab_stats st;

	for (int i = 0; i < 100000; i++) {
		int n = snprintf(tag, sizeof(tag), "client-%d", i);

		assert_int_equal(kt_tagtab_take(t, tag, (size_t)n, T(0)), KT_ADMIT);
	}
	for (int i = 0; i < 100000; i += 997) {
		int n = snprintf(tag, sizeof(tag), "client-%d", i);

		assert_int_equal(kt_tagtab_take(t, tag, (size_t)n, T(0)), KT_REFUSE);
	}
	kt_tagtab_stats(t, &st);
	assert_int_equal(st.tags, 100000);
	assert_int_equal(st.evicted, 0);
	kt_tagtab_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_seed_004_worked_example),
		cmocka_unit_test(test_alternating_client_long_run),
		cmocka_unit_test(test_max_tags_evicts_lru_keeps_hits),
		cmocka_unit_test(test_unharvest_carries_hits),
		cmocka_unit_test(test_idle_expiry_never_forgets_debt),
		cmocka_unit_test(test_reconfigure_keeps_tokens),
		cmocka_unit_test(test_bad_tags_and_opts),
		cmocka_unit_test(test_many_tags),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
