// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Store errors are named where an operator looks: a pool key turned into a
 * string is "wrongtype" in status (failing, not up), in metrics, and once in
 * the log per episode; ghost members above maxMembers show as an anomaly.
 * The kinds a real Redis cannot be made to send (NOSCRIPT that persists, an
 * oversized claim, -ERR) come from the fake Redis of tests/lib/fakeredis.h:
 * each is named in status within a heartbeat or two, counted in metrics,
 * and logged once in the episode. */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <cmocka.h>
#include <hiredis/hiredis.h>
#include "fakeredis.h"
#include "kt_daemonfx.h"
#include "ktest.h"
#include "redis_proc.h"

static struct {
	struct ktest_daemon d;
	struct rp_proc rp;
	struct ktest_fakeredis fake;
	char cg[PATH_MAX];
	int metrics_port;
} fx;

static int teardown(void **state)
{
	(void)state;
	kt_daemonfx_end_rp(&fx.d, fx.cg, &fx.rp);
	ktest_fakeredis_stop(&fx.fake);
	return 0;
}

/* Status JSON once it contains `needle`, within ms (NULL: never). */
static char *status_until(const char *needle, int ms)
{
	uint64_t t0 = rp_now_ms();

	for (;;) {
		char *out = ktest_daemon_cmd(&fx.d, "status json");

		if (out && strstr(out, needle))
			return out;
		if (rp_now_ms() - t0 > (uint64_t)ms) {
			print_message("no '%s' in: %s\n", needle, out ? out : "(none)");
			free(out);
			return NULL;
		}
		free(out);
		rp_sleep_ms(50);
	}
}

static int count(const char *hay, const char *needle)
{
	int n = 0;

	for (const char *p = hay; (p = strstr(p, needle)); p++)
		n++;
	return n;
}

static void test_wrongtype_and_over_max(void **state)
{
	char body[1024], *out, *page, *log;
	redisReply *r;
	double v;

	(void)state;
	if (ktest_root_unavailable())
		skip();
	assert_int_equal(rp_start_master(&fx.rp, NULL), 0);
	assert_int_equal(ktest_redis_limit_body(body, sizeof(body), "r", fx.metrics_port, fx.cg,
						fx.rp.port, "maxMembers: 3, "), 0);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
	out = status_until("\"state\":\"up\"", 5000);
	assert_non_null(out);
	assert_non_null(strstr(out, "\"anomaly\":null"));
	free(out);
	/* a heartbeat whose request and pool did not change takes the
	 * script's steady path: the first ones are full, the later steady */
	rp_sleep_ms(1000);
	assert_int_equal(ktest_http_get(fx.metrics_port, "/metrics", &page), 200);
	assert_true(ktest_metric_sample(page, "kthrottle_store_heartbeat_limits_total{path=\"full\"}", &v));
	assert_true(v >= 1);
	assert_true(ktest_metric_sample(page, "kthrottle_store_heartbeat_limits_total{path=\"steady\"}", &v));
	print_message("steady heartbeats after 1 s: %.0f\n", v);
	assert_true(v >= 1);
	/* the store's work: the scripts' commands as Redis ran them, round
	 * trips, bytes both ways */
	{
		double cmds, rts, sent, recv;

		assert_true(ktest_metric_sample(page, "kthrottle_store_script_commands_total", &cmds));
		assert_true(ktest_metric_sample(page, "kthrottle_store_round_trips_total", &rts));
		assert_true(ktest_metric_sample(page, "kthrottle_store_bytes_total{direction=\"sent\"}", &sent));
		assert_true(ktest_metric_sample(page, "kthrottle_store_bytes_total{direction=\"received\"}", &recv));
		print_message("store work after 1 s: %.0f script commands, %.0f round trips, %.0f B sent, %.0f B read\n",
			      cmds, rts, sent, recv);
		assert_true(cmds >= 4 * v && rts >= v && sent > 100 * v && recv > 0);
	}
	free(page);

	/* ghosts: live far into the future, each reporting size 8 */
	for (int i = 0; i < 5; i++) {
		assert_in_range(rp_command_int(&fx.rp, -1, "ZADD kthrottle:pool:{r}:hb 99999999999999 ghost%d", i),
				0, 1);
		assert_in_range(rp_command_int(&fx.rp, -1, "HSET kthrottle:pool:{r}:size ghost%d 8", i), 0, 1);
	}
	out = status_until("\"kind\":\"over_max_members\"", 3000);
	assert_non_null(out);
	assert_non_null(strstr(out, "\"max_members\":3"));
	free(out);
	out = ktest_daemon_cmd(&fx.d, "status");
	assert_non_null(out);
	assert_non_null(strstr(out, "above maxMembers 3"));
	free(out);

	/* the pool key turned into a string */
	assert_int_equal(rp_command_int(&fx.rp, -1, "DEL kthrottle:pool:{r}:hb"), 1);
	r = rp_command(&fx.rp, "SET kthrottle:pool:{r}:hb x");
	assert_non_null(r);
	freeReplyObject(r);
	out = status_until("\"kind\":\"wrongtype\"", 3000);
	assert_non_null(out);
	assert_non_null(strstr(out, "\"state\":\"failing\""));
	assert_non_null(strstr(out, "WRONGTYPE"));
	free(out);
	kt_cmd_has(&fx.d, "status", "store failing (wrongtype since ");
	rp_sleep_ms(1000); /* five more heartbeats fail the same way */
	assert_int_equal(ktest_http_get(fx.metrics_port, "/metrics", &page), 200);
	assert_true(ktest_metric_sample(page, "kthrottle_store_errors_total{limit=\"r\",kind=\"wrongtype\"}", &v));
	assert_true(v >= 5);
	assert_true(ktest_metric_sample(page, "kthrottle_store_errors_total{limit=\"r\",kind=\"noscript\"}", &v));
	assert_true(v == 0);
	free(page);
	log = ktest_slurp(fx.d.log);
	assert_int_equal(count(log, "store error (wrongtype)"), 1);
	free(log);

	/* repaired: up again, the episode over; a new one logs again */
	assert_int_equal(rp_command_int(&fx.rp, -1, "DEL kthrottle:pool:{r}:hb"), 1);
	out = status_until("\"since_s\":null", 3000);
	assert_non_null(out);
	assert_non_null(strstr(out, "\"state\":\"up\""));
	free(out);
	r = rp_command(&fx.rp, "SET kthrottle:pool:{r}:hb x");
	assert_non_null(r);
	freeReplyObject(r);
	out = status_until("\"state\":\"failing\"", 3000);
	assert_non_null(out);
	free(out);
	rp_sleep_ms(300); /* the log line is written by the loop, after the worker's snapshot */
	log = ktest_slurp(fx.d.log);
	assert_int_equal(count(log, "store error (wrongtype)"), 2);
	free(log);
}

/* NOSCRIPT forever, a bulk header claiming 1 GB, -ERR: each named in
 * status (kind and text) while it lasts, counted, logged once. */
static void test_fake_redis_kinds(void **state)
{
	static const struct {
		const char *reply, *kind, *text;
	} cases[] = {
		{ "-NOSCRIPT No matching script. Please use EVAL.\r\n", "noscript", "NOSCRIPT" },
		{ "$1000000000\r\n", "oversized", "" },
		{ "-ERR something odd\r\n", "err", "something odd" },
	};
	char body[1024], want[64], series[128], *out, *page, *log;
	double v;

	(void)state;
	if (ktest_root_unavailable())
		skip();
	assert_int_equal(ktest_fakeredis_start(&fx.fake), 0);
	assert_int_equal(ktest_redis_limit_body(body, sizeof(body), "f", fx.metrics_port, fx.cg,
						fx.fake.port, ""), 0);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t t0 = rp_now_ms();

		ktest_fakeredis_set(&fx.fake, cases[i].reply);
		snprintf(want, sizeof(want), "\"kind\":\"%s\"", cases[i].kind);
		out = status_until(want, 3000);
		assert_non_null(out);
		print_message("%s named in %llu ms\n", cases[i].kind,
			      (unsigned long long)(rp_now_ms() - t0));
		assert_non_null(strstr(out, cases[i].text));
		assert_null(strstr(out, "\"state\":\"up\""));
		free(out);
		rp_sleep_ms(500); /* a few more heartbeats fail the same way */
		assert_int_equal(ktest_http_get(fx.metrics_port, "/metrics", &page), 200);
		snprintf(series, sizeof(series), "kthrottle_store_errors_total{limit=\"f\",kind=\"%s\"}",
			 cases[i].kind);
		assert_true(ktest_metric_sample(page, series, &v));
		assert_true(v >= 2);
		free(page);
	}
	rp_sleep_ms(300);
	log = ktest_slurp(fx.d.log);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(want, sizeof(want), "store error (%s)", cases[i].kind);
		if (count(log, want) != 1)
			print_message("log:\n%s", log);
		assert_int_equal(count(log, want), 1);
	}
	free(log);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_wrongtype_and_over_max, kt_dfx_setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_fake_redis_kinds, kt_dfx_setup, teardown),
	};

	kt_dfx = (struct kt_daemonfx_spec){
		.fx = &fx, .len = sizeof(fx), .d = &fx.d,
		.cgroup = "storeerr", .cg = fx.cg, .metrics_port = &fx.metrics_port
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
