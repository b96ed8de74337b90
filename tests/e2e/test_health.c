// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Probes that tell the truth: a real daemon asked by `kthrottlectl health
 * [--live]` and over HTTP (/healthz, /livez, the gauges on /metrics):
 *   - a local limit: ready and live; its links removed behind its back:
 *     not ready, kernel fail, still live;
 *   - a redis-store limit whose redis-server is killed: still ready and
 *     live, "store down", kthrottle_component_up{component="store"} 0;
 *   - a pods: limit whose token cannot be read: not ready naming the token,
 *     /healthz 503, but live (/livez 200). */
#include <dirent.h>
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

#include "kt_daemonfx.h"
#include "ktest.h"
#include "redis_proc.h"

static struct fixture {
	struct ktest_daemon d;
	struct rp_proc rp;
	char cg[PATH_MAX];
	char tmp[PATH_MAX];
	int metrics_port;
} fx;

static int teardown(void **state)
{
	(void)state;
	kt_daemonfx_end_rp(&fx.d, fx.cg, &fx.rp);
	if (fx.tmp[0])
		ktest_rmtree(fx.tmp);
	return 0;
}

/* `kthrottlectl health [--live]`: exit status, output in *out. */
static int ctl_health(bool live, char **out)
{
	if (live)
		return ktest_run_bin("kthrottlectl", out, "--socket", fx.d.socket, "health", "--live",
				     NULL);
	return ktest_run_bin("kthrottlectl", out, "--socket", fx.d.socket, "health", NULL);
}

/* Asks `health` until its output holds want (up to timeout_ms): the last
 * exit status, output in *out. */
static int health_until(const char *want, int timeout_ms, char **out)
{
	uint64_t until = ktest_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	int rc;

	for (;;) {
		rc = ctl_health(false, out);
		if (strstr(*out, want) || ktest_now_ns() > until)
			return rc;
		free(*out);
		ktest_sleep_ms(100);
	}
}

static void assert_gauge(const char *page, const char *line)
{
	if (!strstr(page, line))
		fail_msg("no '%s' in the metrics page", line);
}

static void assert_live(void)
{
	char *out, *body;

	assert_int_equal(ctl_health(true, &out), 0);
	assert_string_equal(out, "live\n");
	free(out);
	assert_int_equal(ktest_http_get(fx.metrics_port, "/livez", &body), 200);
	assert_string_equal(body, "live\n");
	free(body);
}

static void test_local_limit(void **state)
{
	char body[1024], links[400], path[700], *out, *page;
	struct dirent *de;
	DIR *dir;

	(void)state;
	if (ktest_root_unavailable())
		skip();
	snprintf(body, sizeof(body),
		 "metrics: 127.0.0.1:%d\n"
		 "limits:\n"
		 "  - {name: l, cgroups: [%s], unit: connection,\n"
		 "     match: {cidrs: [127.0.0.1/32], ports: 9}, rateLimit: {max: 100}}\n",
		 fx.metrics_port, fx.cg);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);

	assert_int_equal(ctl_health(false, &out), 0);
	assert_string_equal(out, "ready\nkernel ok\n");
	free(out);
	assert_live();
	assert_int_equal(ktest_http_get(fx.metrics_port, "/healthz", &page), 200);
	assert_string_equal(page, "ready\nkernel ok\n");
	free(page);
	assert_int_equal(ktest_http_get(fx.metrics_port, "/metrics", &page), 200);
	assert_gauge(page, "\nkthrottle_ready 1\n");
	assert_gauge(page, "\nkthrottle_component_up{component=\"kernel\"} 1\n");
	assert_null(strstr(page, "component=\"store\""));
	assert_null(strstr(page, "component=\"kubernetes\""));
	free(page);

	/* the links go (as a careless cleanup would do): nothing is enforced
	 * any more, and the probe says so */
	snprintf(links, sizeof(links), "%s/links", fx.d.pin_dir);
	dir = opendir(links);
	assert_non_null(dir);
	while ((de = readdir(dir)))
		if (de->d_name[0] != '.') {
			snprintf(path, sizeof(path), "%s/%s", links, de->d_name);
			assert_int_equal(unlink(path), 0);
		}
	closedir(dir);
	assert_int_equal(ctl_health(false, &out), 1);
	assert_true(!strncmp(out, "not ready\nkernel fail 1 member cgroup(s) not attached", 53));
	assert_non_null(strstr(out, fx.cg));
	free(out);
	assert_int_equal(ktest_http_get(fx.metrics_port, "/healthz", &page), 503);
	free(page);
	assert_live();
	assert_int_equal(ktest_http_get(fx.metrics_port, "/metrics", &page), 200);
	assert_gauge(page, "\nkthrottle_ready 0\n");
	assert_gauge(page, "\nkthrottle_component_up{component=\"kernel\"} 0\n");
	free(page);
}

static void test_store_down_stays_ready(void **state)
{
	char body[1024], *out, *page;
	int rc;

	(void)state;
	if (ktest_root_unavailable())
		skip();
	assert_int_equal(rp_start_master(&fx.rp, NULL), 0);
	assert_int_equal(ktest_redis_limit_body(body, sizeof(body), "r", fx.metrics_port, fx.cg,
						fx.rp.port, ""), 0);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
	rc = health_until("store ok", 5000, &out);
	assert_int_equal(rc, 0);
	assert_string_equal(out, "ready\nkernel ok\nstore ok\n");
	free(out);

	assert_int_equal(rp_stop(&fx.rp), 0);
	rc = health_until("store down", 10000, &out);
	print_message("after the store went: %s", out);
	assert_int_equal(rc, 0); /* still ready */
	assert_true(!strncmp(out, "ready\nkernel ok\nstore down limit r: redis ", 42));
	free(out);
	assert_live();
	assert_int_equal(ktest_http_get(fx.metrics_port, "/healthz", &page), 200);
	free(page);
	assert_int_equal(ktest_http_get(fx.metrics_port, "/metrics", &page), 200);
	assert_gauge(page, "\nkthrottle_ready 1\n");
	assert_gauge(page, "\nkthrottle_component_up{component=\"kernel\"} 1\n");
	assert_gauge(page, "\nkthrottle_component_up{component=\"store\"} 0\n");
	free(page);
}

static void test_kube_token_missing(void **state)
{
	char body[2048], *out, *page;
	int api = ktest_free_port(SOCK_STREAM); /* nothing listens there */

	(void)state;
	if (ktest_root_unavailable())
		skip();
	assert_true(api > 0);
	snprintf(body, sizeof(body),
		 "metrics: 127.0.0.1:%d\n"
		 "kubernetes:\n"
		 "  apiServer: https://127.0.0.1:%d\n"
		 "  tokenFile: %s/no-token\n"
		 "  caFile: %s/no-ca.pem\n"
		 "  nodeName: node-h\n"
		 "limits:\n"
		 "  - name: p\n"
		 "    pods: {namespace: workers}\n"
		 "    match: {cidrs: [127.0.0.1/32], ports: 9}\n"
		 "    unit: connection\n"
		 "    rateLimit: {max: 100}\n",
		 fx.metrics_port, api, fx.tmp, fx.tmp);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);

	assert_int_equal(ctl_health(false, &out), 1);
	print_message("%s", out);
	assert_true(!strncmp(out, "not ready\nkernel ok\nkubernetes fail ", 36));
	assert_non_null(strstr(out, "no-token"));
	assert_int_equal(ktest_count_lines(out), 3);
	free(out);
	assert_live();
	assert_int_equal(ktest_http_get(fx.metrics_port, "/healthz", &page), 503);
	assert_true(!strncmp(page, "not ready\n", 10));
	free(page);
	assert_int_equal(ktest_http_get(fx.metrics_port, "/metrics", &page), 200);
	assert_gauge(page, "\nkthrottle_ready 0\n");
	assert_gauge(page, "\nkthrottle_component_up{component=\"kubernetes\"} 0\n");
	assert_gauge(page, "\nkthrottle_component_up{component=\"kernel\"} 1\n");
	free(page);
}

/* No daemon: exit 1 at once, never a reading of the pinned maps. */
static void test_no_daemon(void **state)
{
	char *out;

	(void)state;
	if (ktest_root_unavailable())
		skip();
	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "--socket", "/nonexistent/kt.sock",
				       "health", NULL),
			 1);
	assert_true(ktest_is_one_line(out));
	free(out);
	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "health", "extra", NULL), 2);
	free(out);
	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "status", "--live", NULL), 2);
	assert_true(ktest_is_one_line(out));
	free(out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_local_limit, kt_dfx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_down_stays_ready, kt_dfx_setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_kube_token_missing, kt_dfx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_daemon, kt_dfx_setup, teardown),
	};
	kt_dfx = (struct kt_daemonfx_spec){
		.fx = &fx, .len = sizeof(fx), .d = &fx.d,
		.cgroup = "health", .cg = fx.cg, .tmp = fx.tmp, .tmp_len = sizeof(fx.tmp),
		.metrics_port = &fx.metrics_port
	};
	return cmocka_run_group_tests_name("health", tests, NULL, NULL);
}
