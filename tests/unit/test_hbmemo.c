// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The heartbeat memo (user/store/hbmemo.c): what the steady path may send as
 * prev. Each field of the request the script's answer depends on changes
 * the digest; an answer with a reserve is never repeated; forget, growth
 * and the reset at the table's bound. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "kthrottle.h"
#include "store/hbmemo.h"

static struct kt_pool_member two[2] = { { "node-a/pod1", KT_POOL_REPORT_LIVE, 0 },
					{ "node-a/pod2", KT_POOL_REPORT_LIVE, 0 } };

static struct kt_pool_req req(void)
{
	return (struct kt_pool_req){ .limit = "api", .members = two, .n_members = 2, .stale_ms = 3000,
				     .save_ramp = -1, .hold_ms = 3000, .fallback_rate = 2.5 };
}

static void test_digest_fields(void **state)
{
	struct kt_pool_member other[2] = { two[0], two[1] };
	struct kt_pool_req q = req(), v;
	uint64_t d = kt_hbmemo_digest(&q);

	(void)state;
	assert_int_not_equal(d, 0);
	v = req();
	assert_int_equal(kt_hbmemo_digest(&v), d); /* a pure function of the request */
	v.ramp_ttl_ms = 5;                          /* the ramp is written either way */
	v.save_ramp = 3;
	assert_int_equal(kt_hbmemo_digest(&v), d);
	v = req();
	v.stale_ms = 3001;
	assert_int_not_equal(kt_hbmemo_digest(&v), d);
	v = req();
	v.hold_ms = 0;
	assert_int_not_equal(kt_hbmemo_digest(&v), d);
	v = req();
	v.fallback_rate = 2.5000001;
	assert_int_not_equal(kt_hbmemo_digest(&v), d);
	v = req();
	v.n_members = 1;
	assert_int_not_equal(kt_hbmemo_digest(&v), d);
	v = req();
	v.members = other;
	other[1].reported_size = 7;
	assert_int_not_equal(kt_hbmemo_digest(&v), d);
	other[1].reported_size = KT_POOL_REPORT_LIVE;
	other[1].id = "node-a/pod3";
	assert_int_not_equal(kt_hbmemo_digest(&v), d);
	/* the same ids split differently are another request */
	struct kt_pool_member ab[1] = { { "node-a/pod1node-a/pod2", KT_POOL_REPORT_LIVE, 0 } };
	v = req();
	v.members = ab;
	v.n_members = 1;
	assert_int_not_equal(kt_hbmemo_digest(&v), d);
}

static void test_get_set_forget(void **state)
{
	struct kt_hbmemo *m = kt_hbmemo_new();
	struct kt_pool_req q = req();
	uint64_t d = kt_hbmemo_digest(&q);
	struct kt_pool_answer a = { .agree = 1, .size = 6, .live = 6 }, got;

	(void)state;
	assert_non_null(m);
	assert_int_equal(kt_hbmemo_get(m, "api", d, &got), 0);
	assert_int_equal(kt_hbmemo_set(m, "api", d, &a, 0), 0);
	assert_int_equal(kt_hbmemo_get(m, "api", d, &got), 1);
	assert_int_equal(got.agree, 1);
	assert_int_equal(got.size, 6);
	assert_int_equal(got.live, 6);
	assert_true(got.reserved == 0);
	assert_int_equal(kt_hbmemo_get(m, "api", d + 1, &got), 0); /* the request changed */
	assert_int_equal(kt_hbmemo_get(m, "apj", d, &got), 0);     /* another limit */
	/* an answer that reserved something is repeated with its reserve
	 * (lapsed members held: the steady path answers it too) */
	a.reserved = 0.5;
	assert_int_equal(kt_hbmemo_set(m, "api", d, &a, 0), 0);
	assert_int_equal(kt_hbmemo_get(m, "api", d, &got), 1);
	assert_true(got.reserved == 0.5);
	a.reserved = 0;
	assert_int_equal(kt_hbmemo_set(m, "api", d, &a, 0), 0);
	kt_hbmemo_forget(m, "api");
	assert_int_equal(kt_hbmemo_get(m, "api", d, &got), 0);
	kt_hbmemo_forget(m, "never-seen");
	assert_int_equal(kt_hbmemo_count(m), 1);
	/* joined stays after forget and doubt; doubt unconfirms but keeps the
	 * answer (the steady path's hint); the next set confirms */
	struct kt_hbmemo_hit h;

	kt_hbmemo_lookup(m, "api", d, &h);
	assert_true(h.joined && h.confirmed && !h.has);
	assert_int_equal(kt_hbmemo_set(m, "api", d, &a, 0), 0);
	kt_hbmemo_doubt(m, "api");
	kt_hbmemo_lookup(m, "api", d, &h);
	assert_true(h.joined && !h.confirmed && h.has);
	assert_int_equal(h.ans.size, 6);
	assert_int_equal(kt_hbmemo_set(m, "api", d, &a, 0), 0);
	kt_hbmemo_lookup(m, "api", d, &h);
	assert_true(h.confirmed && h.at_ns > 0);
	/* the Redis TIME of the answer: unknown until told, kept through a
	 * doubt and whatever the digest, unknown again at the next set */
	assert_int_equal(h.asof_ms, 0);
	assert_int_equal(kt_hbmemo_set(m, "api", d, &a, 1700000000123ULL), 0);
	kt_hbmemo_doubt(m, "api");
	kt_hbmemo_lookup(m, "api", d + 1, &h);
	assert_true(h.asof_ms == 1700000000123ULL && !h.has);
	assert_int_equal(kt_hbmemo_set(m, "api", d, &a, 0), 0);
	kt_hbmemo_lookup(m, "api", d, &h);
	assert_int_equal(h.asof_ms, 0);
	/* a lapsed lease: no longer joined nor confirmed, the answer still
	 * the hint; the next set joins it again */
	kt_hbmemo_rejoin(m, "api");
	kt_hbmemo_lookup(m, "api", d, &h);
	assert_true(!h.joined && !h.confirmed && h.has);
	assert_int_equal(kt_hbmemo_set(m, "api", d, &a, 0), 0);
	kt_hbmemo_lookup(m, "api", d, &h);
	assert_true(h.joined && h.confirmed);
	kt_hbmemo_rejoin(m, "never-seen");
	kt_hbmemo_rejoin(NULL, "api");
	kt_hbmemo_lookup(m, "never-seen", d, &h);
	assert_true(!h.joined && !h.confirmed && !h.has && !h.asof_ms);
	kt_hbmemo_lookup(NULL, "api", d, &h); /* no memo: nothing held back */
	assert_true(h.joined && !h.has);
	kt_hbmemo_doubt(NULL, "api");
	/* a NULL memo (allocation failed) answers nothing and takes nothing */
	assert_int_equal(kt_hbmemo_get(NULL, "api", d, &got), 0);
	assert_int_equal(kt_hbmemo_set(NULL, "api", d, &a, 0), 0);
	kt_hbmemo_forget(NULL, "api");
	kt_hbmemo_free(m);
}

/* Past its bound the table starts over: every limit still answers right
 * (the last ones set are found, none is found with a wrong answer). */
static void test_growth_and_reset(void **state)
{
	struct kt_hbmemo *m = kt_hbmemo_new();
	const int n = 2 * KT_MAX_LIMITS + 1000;
	struct kt_pool_answer a = { 0 }, got;
	char name[KT_NAME_LEN];
	int found = 0;

	(void)state;
	for (int i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "api@g%06d", i);
		a.live = a.size = i % 1000 + 1;
		assert_int_equal(kt_hbmemo_set(m, name, (uint64_t)i + 1, &a, 0), 0);
		assert_true(kt_hbmemo_count(m) <= 2 * KT_MAX_LIMITS);
	}
	for (int i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "api@g%06d", i);
		if (kt_hbmemo_get(m, name, (uint64_t)i + 1, &got)) {
			assert_int_equal(got.live, i % 1000 + 1);
			found++;
		}
	}
	assert_int_equal(found, kt_hbmemo_count(m));
	assert_true(found >= 1000); /* the names set after the reset */
	snprintf(name, sizeof(name), "api@g%06d", n - 1);
	assert_int_equal(kt_hbmemo_get(m, name, (uint64_t)n, &got), 1);
	kt_hbmemo_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_digest_fields),
		cmocka_unit_test(test_get_set_forget),
		cmocka_unit_test(test_growth_and_reset),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
