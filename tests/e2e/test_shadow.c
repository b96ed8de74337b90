// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Shadow mode (`enforce: false`) end to end, with a real daemon, member
 * cgroups sending real datagrams and loopback receivers counting what
 * arrives:
 *   - a shadow limit and its enforcing twin (same rate, burst and load, in
 *     the same run): every datagram of the shadow limit arrives, and what it
 *     reports it would have refused equals what the twin refused, within
 *     2%; its events say reason "shadow", and nothing of it reads as
 *     throttled;
 *   - a reload flips enforce on the same bucket (its slot and its tokens
 *     kept): enforcing holds at once, and flipping back lets all pass. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "kt_daemonfx.h"
#include "kt_udpfx.h"
#include "ktest.h"

#define RATE 50.0  /* tokens/s of both limits */
#define BURST 10.0
#define OFFER "200" /* datagrams/s each sender offers */
#define SEND_S 2.0

static struct fixture {
	struct ktest_daemon d;
	char cg[2][PATH_MAX];
	int rx[2];
} fx = { .rx = { -1, -1 } };

static int setup(void **state)
{
	(void)state;
	if (!kt_daemonfx_begin(&fx, sizeof(fx), &fx.d))
		return 0;
	fx.rx[0] = fx.rx[1] = -1;
	return ktest_cgroup_create("shadow-twin", fx.cg[0], sizeof(fx.cg[0])) ||
			       ktest_cgroup_create("shadow", fx.cg[1], sizeof(fx.cg[1]))
		       ? -1
		       : 0;
}

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < 2; i++)
		if (fx.rx[i] >= 0)
			close(fx.rx[i]);
	kt_daemonfx_end(&fx.d, fx.cg[0]);
	if (fx.cg[1][0])
		ktest_cgroup_destroy(fx.cg[1]);
	return 0;
}

/* One limit of the test, on cgroup cg and 127.0.0.1:port. */
static int limit_yaml(char *buf, size_t len, const char *name, const char *cg, int port,
		      const char *enforce)
{
	return snprintf(buf, len,
			"  - name: %s\n"
			"    cgroups: [%s]\n"
			"    match: {cidrs: [127.0.0.1/32], ports: %d, protocol: udp}\n"
			"    unit: datagram\n"
			"    burst: %.0f\n"
			"    enforce: %s\n"
			"    rateLimit: {max: %g}\n",
			name, cg, port, BURST, enforce, RATE);
}

static void test_shadow_matches_enforcing_twin(void **state)
{
	struct ktest_load res[2];
	unsigned long long got[2];
	double twin_refused, shadow_would, shadow_throttled, twin_would, tol;
	char body[2048], *st;
	int port[2], n, mport = ktest_free_port(SOCK_STREAM);
	double metric;
	char *page = NULL;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	fx.rx[0] = kt_udpfx_receiver(&port[0]);
	fx.rx[1] = kt_udpfx_receiver(&port[1]);
	assert_true(mport > 0);
	n = snprintf(body, sizeof(body), "tickInterval: 100ms\nmetrics: 127.0.0.1:%d\nlimits:\n",
		     mport);
	n += limit_yaml(body + n, sizeof(body) - n, "twin", fx.cg[0], port[0], "true");
	limit_yaml(body + n, sizeof(body) - n, "shade", fx.cg[1], port[1], "false");
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);

	{
		const char *const cgs[2] = { fx.cg[0], fx.cg[1] };
		char *const extra[] = { "--rate", OFFER, NULL };

		/* both at once, OFFER datagrams/s each for SEND_S */
		kt_udpfx_load_all(2, cgs, port, SEND_S, extra, res);
	}
	ktest_sleep_ms(50);
	got[0] = kt_udpfx_drain(fx.rx[0]);
	got[1] = kt_udpfx_drain(fx.rx[1]);
	st = ktest_daemon_cmd(&fx.d, "status json");
	assert_non_null(st);
	assert_true(ktest_json_limit_num(st, "twin", "throttled", &twin_refused));
	assert_true(ktest_json_limit_num(st, "twin", "would_refuse", &twin_would));
	assert_true(ktest_json_limit_num(st, "shade", "would_refuse", &shadow_would));
	assert_true(ktest_json_limit_num(st, "shade", "throttled", &shadow_throttled));
	print_message("twin: sent %llu refused %llu arrived %llu (status throttled %.0f); "
		      "shadow: sent %llu refused %llu arrived %llu, would_refuse %.0f, events shadow %.0f\n",
		      res[0].ok, res[0].refused, got[0], twin_refused, res[1].ok, res[1].refused,
		      got[1], shadow_would, kt_daemonfx_events(st, "shade", "shadow"));

	/* the twin enforced: about SEND_S x (200 - 50) refused */
	assert_true(res[0].refused > 200);
	assert_true(twin_refused == (double)res[0].refused);
	assert_int_equal(got[0], res[0].ok);
	/* the shadow limit refused nothing: every datagram arrived */
	assert_int_equal(res[1].refused, 0);
	assert_int_equal(res[1].errors, 0);
	assert_int_equal(got[1], res[1].ok);
	assert_true(shadow_throttled == 0);
	assert_true(twin_would == 0);
	/* and it would have refused what the twin refused: same bucket, same load */
	tol = 0.02 * twin_refused;
	assert_true(fabs(shadow_would - twin_refused) <= tol);
	/* shadow events, and none that says its callers are throttled */
	assert_true(kt_daemonfx_events(st, "shade", "shadow") >= 1);
	assert_true(kt_daemonfx_events(st, "shade", "share") == 0);
	assert_null(ktest_json_limit_field(st, "shade", "last_throttle"));
	assert_non_null(strstr(ktest_json_limit_field(st, "shade", "enforce"), "false"));
	free(st);
	/* Prometheus: the shadow refusals, and no refusal, once a tick has
	 * counted them */
	ktest_sleep_ms(250);
	assert_int_equal(ktest_http_get(mport, "/metrics", &page), 200);
	assert_true(ktest_metric_sample(page, "kthrottle_shadow_refused_total{limit=\"shade\"}", &metric));
	assert_true(metric == shadow_would);
	assert_true(ktest_metric_sample(page, "kthrottle_throttled_total{limit=\"shade\"}", &metric));
	assert_true(metric == 0);
	assert_true(ktest_metric_sample(page, "kthrottle_shadow_refused_total{limit=\"twin\"}", &metric));
	assert_true(metric == 0);
	assert_true(ktest_metric_sample(page, "kthrottle_throttle_events_total{limit=\"shade\",reason=\"shadow\"}", &metric));
	assert_true(metric >= 1);
	free(page);
}

/* The slot of limit `name`'s first member bucket, from status json. */
static double first_slot(const char *name)
{
	char *st = ktest_daemon_cmd(&fx.d, "status json");
	const char *cg;
	double slot = -1;

	assert_non_null(st);
	cg = ktest_json_limit_field(st, name, "cgroups");
	assert_non_null(cg);
	cg = strstr(cg, "\"slot\":");
	assert_non_null(cg);
	slot = atof(cg + strlen("\"slot\":"));
	free(st);
	return slot;
}

/* kt-load flat out from cg[0] for secs: its result. */
static struct ktest_load flood(int port, double secs)
{
	struct ktest_load r;

	assert_int_equal(ktest_load(fx.cg[0], "udp", "127.0.0.1", port, secs, &r), 0);
	return r;
}

static void reload_with(int port, const char *enforce)
{
	char body[1024], *out = NULL;
	int n = snprintf(body, sizeof(body), "tickInterval: 100ms\nlimits:\n");

	limit_yaml(body + n, sizeof(body) - n, "flip", fx.cg[0], port, enforce);
	assert_int_equal(ktest_daemon_config(&fx.d, body), 0);
	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-s", fx.d.socket, "reload", NULL), 0);
	free(out);
}

static void test_reload_flips_enforce_on_the_same_bucket(void **state)
{
	struct ktest_load a, b, c;
	double slot0, would;
	uint64_t t0, t1;
	char body[1024];
	int port, n;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	fx.rx[0] = kt_udpfx_receiver(&port);
	n = snprintf(body, sizeof(body), "tickInterval: 100ms\nlimits:\n");
	limit_yaml(body + n, sizeof(body) - n, "flip", fx.cg[0], port, "false");
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
	slot0 = first_slot("flip");

	/* shadow: a flood passes whole, and empties the bucket as it would */
	a = flood(port, 0.3);
	assert_int_equal(a.refused, 0);
	assert_true(kt_daemonfx_status_num(&fx.d, "flip", "would_refuse", &would));
	assert_true(would >= (double)a.ok - BURST - RATE * 0.3 - RATE * 0.2);

	/* enforcing at once, on the same slot, with the tokens the flood left */
	t0 = ktest_now_ns();
	reload_with(port, "true");
	b = flood(port, 0.3);
	t1 = ktest_now_ns();
	print_message("shadow flood: ok %llu (would_refuse %.0f); enforcing after reload: ok %llu refused %llu in %.2fs\n",
		      a.ok, would, b.ok, b.refused, (double)(t1 - t0) / 1e9);
	assert_true(b.refused > 0);
	/* no fresh burst: only what refilled since the shadow flood emptied it */
	assert_true((double)b.ok <= RATE * (double)(t1 - t0) / 1e9 + RATE * 0.1 + 2);
	assert_true(first_slot("flip") == slot0);

	/* and back to shadow: everything passes again */
	reload_with(port, "false");
	c = flood(port, 0.3);
	assert_int_equal(c.refused, 0);
	assert_true(c.ok > 0);
	assert_true(first_slot("flip") == slot0);
	kt_udpfx_drain(fx.rx[0]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_shadow_matches_enforcing_twin, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reload_flips_enforce_on_the_same_bucket, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
