// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Config changes apply themselves: a real kthrottled whose
 * --config is a ConfigMap volume as a pod sees it (tests/lib/kvol.h), under
 * flat-out UDP load from a test cgroup to a loopback receiver
 * (tests/lib/arrivals.h), no SIGHUP anywhere:
 *   - a swap from 20/s to 60/s shows at the receiver within 5 s;
 *   - a swap to an invalid config (an unknown key) keeps 60/s; status names
 *     the error with file and line, state "rejected"; metrics
 *     kthrottle_config_ok 0; the log has the rejection once, also after an
 *     identical republish;
 *   - a swap back to a valid config (20/s) is applied: config_ok 1. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <cmocka.h>

#include "arrivals.h"
#include "kt_daemonfx.h"
#include "ktest.h"
#include "kvol.h"
#include "control/cfgwatch.h"

#define NAME "kthrottled.yaml"
#define BURST 5

static struct fixture {
	struct ktest_daemon d;
	struct ktest_kvol v;
	struct arrivals arr;
	char cg[PATH_MAX], tmp[256];
	int mport;
	pid_t load;
} fx;

static int teardown(void **state)
{
	(void)state;
	ktest_kill_wait(&fx.load);
	ktest_daemon_cleanup(&fx.d);
	arrivals_stop(&fx.arr);
	ktest_kvol_remove(&fx.v);
	kt_daemonfx_group_cg_end(fx.cg);
	if (fx.tmp[0])
		ktest_rmtree(fx.tmp);
	return 0;
}

/* The whole config text for max/s; `extra` goes into the limit. */
static char *config_text(double max, const char *extra)
{
	char body[2048];

	snprintf(body, sizeof(body),
		 "tickInterval: 100ms\n"
		 "metrics: 127.0.0.1:%d\n"
		 "limits:\n"
		 "  - name: cw\n"
		 "    cgroups: [%s]\n"
		 "    match: {cidrs: [127.0.0.1/32], ports: %d, protocol: udp}\n"
		 "    unit: datagram\n"
		 "    burst: %d\n"
		 "%s"
		 "    rateLimit: {max: %g}\n",
		 fx.mport, fx.cg, fx.arr.port, BURST, extra ? extra : "", max);
	char *t = ktest_daemon_config_text(&fx.d, body);

	assert_non_null(t);
	return t;
}

static void publish(const char *text)
{
	assert_int_equal(ktest_kvol_update(&fx.v, NAME, text), 0);
}

/* GET /metrics: the value of sample `name`, or -1. */
static double metric(const char *name)
{
	char *page = NULL;
	double v = -1;

	assert_int_equal(ktest_http_get(fx.mport, "/metrics", &page), 200);
	if (!ktest_metric_sample(page, name, &v))
		v = -1;
	free(page);
	return v;
}

/* status json's "config" object (up to its last key), malloc'd. */
static char *config_json(void)
{
	char *out = ktest_daemon_cmd(&fx.d, "status json"), *c, *end, *r;

	assert_non_null(out);
	c = strstr(out, "\"config\":{");
	assert_non_null(c);
	end = strstr(c, "\"auto\":");
	assert_non_null(end);
	end = strchr(end, '}');
	assert_non_null(end);
	r = strndup(c, (size_t)(end - c + 1));
	free(out);
	return r;
}

static bool config_state_is(const char *state)
{
	char want[64], *c = config_json();
	bool yes;

	snprintf(want, sizeof(want), "\"state\":\"%s\"", state);
	yes = strstr(c, want) != NULL;
	free(c);
	return yes;
}

static int count_str(const char *hay, const char *needle)
{
	int n = 0;

	for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

static int rejections_logged(void)
{
	char *log = ktest_slurp(fx.d.log);
	int n = count_str(log, "rejected, keeping the running configuration");

	free(log);
	return n;
}

/* Datagrams per second at the receiver over [from, to). */
static double rate(double from, double to)
{
	double r = (double)arrivals_sum(&fx.arr, from, to) / (to - from);

	print_message("  %.1f..%.1fs: %.1f/s\n", from, to, r);
	return r;
}

static void sleep_until(double t_s)
{
	double d = t_s - arrivals_now_s(&fx.arr);

	if (d > 0)
		ktest_sleep_ms((int)(d * 1000));
}

/* When after t0 the receiver first sees more than `above`/s over half a
 * second; -1 if not by limit_s. */
static double changed_at(double t0, double above, double limit_s)
{
	for (double t = t0; t + 0.5 <= t0 + limit_s + 1e-9; t += ARRIVALS_BIN_MS / 1000.0)
		if ((double)arrivals_sum(&fx.arr, t, t + 0.5) > above * 0.5)
			return t + 0.5 - t0;
	return -1;
}

static void expect_near(const char *what, double got, double want)
{
	print_message("%s: %.1f/s, want %.0f +- %.1f\n", what, got, want, 0.1 * want + 2);
	assert_true(got >= want * 0.9 - 2 && got <= want * 1.1 + 2);
}

static void test_configmap_changes_apply(void **state)
{
	char path[PATH_MAX], want[PATH_MAX + 32], *text, *c;
	double t_swap, t_bad, t_back, dt, v;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(arrivals_start(&fx.arr), 0);
	fx.mport = ktest_free_port(SOCK_STREAM);
	assert_true(fx.mport > 0);
	assert_int_equal(ktest_kvol_create(&fx.v, fx.tmp, "config", KTEST_KVOL_CONFIGMAP), 0);
	assert_int_equal(ktest_daemon_init(&fx.d), 0);
	ktest_kvol_path(&fx.v, NAME, path, sizeof(path));
	snprintf(fx.d.config, sizeof(fx.d.config), "%s", path);
	text = config_text(20, NULL);
	publish(text);
	free(text);
	assert_int_equal(ktest_daemon_start_logged(&fx.d), 0);
	assert_true(config_state_is("applied"));
	assert_true(metric("kthrottle_config_ok") == 1);

	fx.load = ktest_load_spawn(fx.cg, fx.arr.port, 30, 0, NULL);
	assert_true(fx.load > 0);
	double t0 = arrivals_now_s(&fx.arr);

	/* 20/s */
	sleep_until(t0 + 3);
	expect_near("before", rate(t0 + 1, t0 + 3), 20);

	/* the kubelet swaps ..data to 60/s: no signal, no kthrottlectl */
	text = config_text(60, NULL);
	t_swap = arrivals_now_s(&fx.arr);
	publish(text);
	free(text);
	sleep_until(t_swap + 5);
	dt = changed_at(t_swap, 40, 5);
	print_message("60/s swapped in at %.2fs: the receiver's rate changed %.2fs after it\n", t_swap,
		      dt);
	assert_true(dt > 0 && dt <= 5);
	expect_near("after the swap", rate(t_swap + 2, t_swap + 5), 60);
	assert_true(config_state_is("applied"));

	/* an unknown key on a line of its own: rejected, 60/s kept */
	text = config_text(200, "    bogusKey: 1\n");
	int line = 1;

	for (const char *p = text; (p = strstr(p, "\n")) && strncmp(p + 1, "    bogusKey", 12); p++)
		line++;
	line++; /* the line after that newline */
	t_bad = arrivals_now_s(&fx.arr);
	publish(text);
	for (int i = 0; i < 50 && !config_state_is("rejected"); i++)
		ktest_sleep_ms(100);
	print_message("invalid config at %.2fs: rejected after %.2fs\n", t_bad,
		      arrivals_now_s(&fx.arr) - t_bad);
	c = config_json();
	print_message("status: %s\n", c);
	snprintf(want, sizeof(want), "%s:%d:", path, line);
	assert_non_null(strstr(c, "\"state\":\"rejected\""));
	assert_non_null(strstr(c, want));
	assert_non_null(strstr(c, "bogusKey"));
	assert_null(strstr(c, "\"rejected_since\":null"));
	assert_non_null(strstr(c, "\"auto\":true"));
	assert_non_null(strstr(c, "\"reload_failures\":1"));
	free(c);
	assert_true(metric("kthrottle_config_ok") == 0);
	assert_true(metric("kthrottle_config_reload_failures_total") == 1);
	assert_int_equal(rejections_logged(), 1);
	c = ktest_daemon_cmd(&fx.d, "status");
	assert_non_null(c);
	assert_non_null(strstr(c, ": rejected since "));
	free(c);
	sleep_until(t_bad + 4);
	expect_near("invalid config on disk", rate(t_bad + 1, t_bad + 4), 60);

	/* the same bad content republished: not tried again */
	publish(text);
	free(text);
	ktest_sleep_ms(KT_CFGWATCH_DEBOUNCE_MS + 1500);
	assert_int_equal(rejections_logged(), 1);
	assert_true(metric("kthrottle_config_reload_failures_total") == 1);
	assert_true(config_state_is("rejected"));

	/* a valid config again: applied, 20/s */
	text = config_text(20, NULL);
	t_back = arrivals_now_s(&fx.arr);
	publish(text);
	free(text);
	for (int i = 0; i < 50 && !config_state_is("applied"); i++)
		ktest_sleep_ms(100);
	print_message("valid config at %.2fs: applied after %.2fs\n", t_back,
		      arrivals_now_s(&fx.arr) - t_back);
	assert_true(config_state_is("applied"));
	assert_true(arrivals_now_s(&fx.arr) - t_back <= 5);
	v = metric("kthrottle_config_ok");
	assert_true(v == 1);
	sleep_until(t_back + 4);
	expect_near("back to 20/s", rate(t_back + 2, t_back + 4), 20);
	assert_int_equal(rejections_logged(), 1);
	assert_int_equal(arrivals_drops(&fx.arr), 0);
	/* the automatic reloads are logged as such: the two applied */
	char *log = ktest_slurp(fx.d.log);

	for (char *l = strtok(log, "\n"); l; l = strtok(NULL, "\n"))
		if (strstr(l, "config") || strstr(l, "reloaded"))
			print_message("log: %s\n", l);
	free(log);
	log = ktest_slurp(fx.d.log);
	assert_int_equal(count_str(log, "(changed on disk)"), 2);
	free(log);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_configmap_changes_apply, kt_dfx_setup,
						teardown),
	};

	kt_dfx = (struct kt_daemonfx_spec){
		.fx = &fx, .len = sizeof(fx), .d = &fx.d, .kid = &fx.load,
		.cgroup = "cfgwatch", .cg = fx.cg, .tmp = fx.tmp, .tmp_len = sizeof(fx.tmp)
	};
	return cmocka_run_group_tests_name("e2e_cfgwatch", tests, NULL, NULL);
}
