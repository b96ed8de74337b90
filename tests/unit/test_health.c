// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* health.c's readiness and liveness rules on crafted snapshots. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "control/health.h"

#define S(x) ((uint64_t)(x) * 1000000000ULL)
#define T0 S(86400)

/* A healthy daemon: programs loaded, everything linked, a tick just now. */
static struct kt_health_in base(void)
{
	struct kt_health_in in = { 0 };

	in.now_ns = T0 + S(100);
	in.bpf_loaded = true;
	in.apply_err = "";
	in.started_ns = T0;
	in.last_tick_ns = in.now_ns - 100000000ull;
	in.tick_ns = 100000000ull;
	return in;
}

static struct kt_health_in with_kube(enum kt_kube_state st, bool synced, uint64_t since_ago_s,
				     const char *err)
{
	struct kt_health_in in = base();

	in.uses_kube = true;
	in.kube.state = st;
	in.kube.synced = synced;
	in.kube.since_ns = in.now_ns - S(since_ago_s);
	snprintf(in.kube.error, sizeof(in.kube.error), "%s", err);
	return in;
}

static void reply(const struct kt_health_in *in, bool live, char *buf, size_t len)
{
	struct kt_health h;

	kt_health_eval(in, &h);
	kt_health_format(in, &h, live, buf, len);
}

static void test_all_ok(void **state)
{
	struct kt_health_in in = base();
	struct kt_health h;
	char buf[1024];

	(void)state;
	kt_health_eval(&in, &h);
	assert_true(h.ready);
	assert_true(h.live);
	reply(&in, false, buf, sizeof(buf));
	/* components not in use get no line */
	assert_string_equal(buf, "ready\nkernel ok\n");
	reply(&in, true, buf, sizeof(buf));
	assert_string_equal(buf, "live\n");
}

static void test_kube_never_synced(void **state)
{
	struct kt_health_in in = with_kube(KT_KUBE_UNREACHABLE, false, 1,
					   "cannot read token /nope: No such file or directory");
	struct kt_health h;
	char buf[1024];

	(void)state;
	kt_health_eval(&in, &h);
	assert_false(h.ready);
	assert_false(h.kube_ok);
	assert_true(h.live); /* an API outage never fails liveness */
	reply(&in, false, buf, sizeof(buf));
	assert_non_null(strstr(buf, "not ready\nkernel ok\nkubernetes fail "));
	assert_non_null(strstr(buf, "cannot read token /nope"));
	/* still listing, no error yet: not ready either */
	in = with_kube(KT_KUBE_LISTING, false, 0, "");
	kt_health_eval(&in, &h);
	assert_false(h.ready);
}

static void test_kube_unreachable_bound(void **state)
{
	struct kt_health_in in = with_kube(KT_KUBE_UNREACHABLE, true, KT_HEALTH_KUBE_STALE_S - 1,
					   "connection refused");
	struct kt_health h;
	char buf[1024];

	(void)state;
	kt_health_eval(&in, &h);
	assert_true(h.ready);
	reply(&in, false, buf, sizeof(buf));
	assert_string_equal(buf, "ready\nkernel ok\nkubernetes ok\n");
	in = with_kube(KT_KUBE_UNREACHABLE, true, KT_HEALTH_KUBE_STALE_S + 1, "connection\nrefused");
	kt_health_eval(&in, &h);
	assert_false(h.ready);
	assert_true(h.live);
	reply(&in, false, buf, sizeof(buf));
	assert_true(!strncmp(buf, "not ready\n", 10));
	/* the why stays on its line */
	assert_non_null(strstr(buf, "kubernetes fail unreachable for 61s (over 60s): connection refused\n"));
	/* watching for long is fine */
	in = with_kube(KT_KUBE_WATCHING, true, 3600, "");
	kt_health_eval(&in, &h);
	assert_true(h.ready);
}

/* A refused token or role is not ridden out like an outage: not ready at
 * once, live throughout. */
static void test_kube_refused(void **state)
{
	static const long refusals[] = { 401, 403 };
	struct kt_health h;
	char buf[1024];

	(void)state;
	for (int i = 0; i < 2; i++) {
		struct kt_health_in in = with_kube(KT_KUBE_UNREACHABLE, true, 1,
						   "listing pods: HTTP 401: Unauthorized");

		in.kube.http_status = refusals[i];
		kt_health_eval(&in, &h);
		assert_false(h.ready);
		assert_true(h.live);
		reply(&in, false, buf, sizeof(buf));
		assert_non_null(strstr(buf, "kubernetes fail the API refuses this daemon (HTTP "));
		/* a server error is an outage: ridden out */
		in.kube.http_status = 503;
		kt_health_eval(&in, &h);
		assert_true(h.ready);
	}
}

static void test_store_down_ready(void **state)
{
	struct kt_health_in in = base();
	struct kt_health h;
	char buf[1024];

	(void)state;
	in.uses_store = true;
	reply(&in, false, buf, sizeof(buf));
	assert_string_equal(buf, "ready\nkernel ok\nstore ok\n");
	in.stores_down = 1;
	in.store_why = "limit a: redis 127.0.0.1:6379 not answering for 5.0s";
	kt_health_eval(&in, &h);
	assert_true(h.ready);
	assert_true(h.live);
	assert_false(h.store_ok);
	reply(&in, false, buf, sizeof(buf));
	assert_string_equal(buf, "ready\nkernel ok\nstore down limit a: redis 127.0.0.1:6379 not answering for 5.0s\n");
}

static void test_kernel_fail(void **state)
{
	struct kt_health_in in = base();
	struct kt_health h;
	char buf[1024];

	(void)state;
	in.bpf_loaded = false;
	kt_health_eval(&in, &h);
	assert_false(h.ready);
	assert_false(h.kernel_ok);
	in = base();
	in.unlinked = 2;
	in.unlinked_path = "/sys/fs/cgroup/x";
	reply(&in, false, buf, sizeof(buf));
	assert_string_equal(buf, "not ready\nkernel fail 2 member cgroup(s) not attached, e.g. /sys/fs/cgroup/x\n");
	in = base();
	in.apply_err = "cannot attach programs: Input/output error";
	kt_health_eval(&in, &h);
	assert_false(h.ready);
	assert_true(h.live);
}

static void test_liveness(void **state)
{
	struct kt_health_in in = base();
	struct kt_health h;
	char buf[1024];

	(void)state;
	/* 10 ticks of 100 ms is under the 3 s floor */
	in.last_tick_ns = in.now_ns - S(2);
	kt_health_eval(&in, &h);
	assert_true(h.live);
	in.last_tick_ns = in.now_ns - S(4);
	kt_health_eval(&in, &h);
	assert_false(h.live);
	assert_true(h.ready); /* readiness is about enforcing, not the tick */
	reply(&in, true, buf, sizeof(buf));
	assert_true(!strncmp(buf, "not live no tick for 4.0s", 25));
	/* slow ticks: 10 of them */
	in.tick_ns = S(1);
	in.last_tick_ns = in.now_ns - S(9);
	kt_health_eval(&in, &h);
	assert_true(h.live);
	in.last_tick_ns = in.now_ns - S(11);
	kt_health_eval(&in, &h);
	assert_false(h.live);
	/* before the first tick the start counts */
	in = base();
	in.last_tick_ns = 0;
	in.started_ns = in.now_ns - S(1);
	kt_health_eval(&in, &h);
	assert_true(h.live);
	in.started_ns = in.now_ns - S(5);
	kt_health_eval(&in, &h);
	assert_false(h.live);
}

static void test_truncated(void **state)
{
	struct kt_health_in in = with_kube(KT_KUBE_LISTING, false, 0, "x");
	char buf[12];

	(void)state;
	reply(&in, false, buf, sizeof(buf));
	assert_int_equal(strlen(buf), sizeof(buf) - 1);
	reply(&in, false, buf, 0); /* writes nothing */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_all_ok),
		cmocka_unit_test(test_kube_never_synced),
		cmocka_unit_test(test_kube_unreachable_bound),
		cmocka_unit_test(test_kube_refused),
		cmocka_unit_test(test_store_down_ready),
		cmocka_unit_test(test_kernel_fail),
		cmocka_unit_test(test_liveness),
		cmocka_unit_test(test_truncated),
	};
	return cmocka_run_group_tests_name("health", tests, NULL, NULL);
}
