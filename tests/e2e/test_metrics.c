// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The Prometheus endpoint (`metrics: 127.0.0.1:PORT`): a real daemon with
 * a connection limit and real refused connects from a member cgroup, then
 *   - GET /metrics: the kthrottle_ families, per member counters equal to
 *     the kernel's (status json reads the same per-CPU counters), events by
 *     reason, seconds throttled; other paths 404;
 *   - Debian's real prometheus server scraping it every second: the same
 *     admitted total comes back from its query API, and up == 1. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "ktest.h"

#define PROMETHEUS "/usr/bin/prometheus"

static struct fixture {
	struct ktest_daemon d;
	char cg[PATH_MAX];
	char tmp[PATH_MAX];
	pid_t prom;
} fx;

static int setup(void **state)
{
	(void)state;
	memset(&fx, 0, sizeof(fx));
	fx.d.pid = -1;
	fx.prom = -1;
	if (ktest_root_unavailable())
		return 0;
	if (ktest_cgroup_create("metrics", fx.cg, sizeof(fx.cg)) || ktest_tmpdir(fx.tmp, sizeof(fx.tmp)))
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	ktest_kill_wait(&fx.prom);
	if (fx.d.dir[0])
		ktest_daemon_cleanup(&fx.d);
	if (fx.cg[0])
		ktest_cgroup_destroy(fx.cg);
	if (fx.tmp[0])
		ktest_rmtree(fx.tmp);
	return 0;
}

/* Runs Debian's prometheus scraping 127.0.0.1:target every second; its
 * web port in *web. */
static void start_prometheus(int target, int *web)
{
	char cfgpath[PATH_MAX + 32], data[PATH_MAX + 32], conf[512], listen[64], cfgarg[PATH_MAX + 64],
		dataarg[PATH_MAX + 64];
	pid_t parent = getpid();

	*web = ktest_free_port(SOCK_STREAM);
	assert_true(*web > 0);
	snprintf(cfgpath, sizeof(cfgpath), "%s/prometheus.yml", fx.tmp);
	snprintf(data, sizeof(data), "%s/tsdb", fx.tmp);
	snprintf(conf, sizeof(conf),
		 "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
		 "scrape_configs:\n"
		 "  - job_name: kthrottle\n"
		 "    static_configs: [{targets: ['127.0.0.1:%d']}]\n",
		 target);
	assert_int_equal(ktest_write_file(cfgpath, conf), 0);
	snprintf(listen, sizeof(listen), "--web.listen-address=127.0.0.1:%d", *web);
	snprintf(cfgarg, sizeof(cfgarg), "--config.file=%s", cfgpath);
	snprintf(dataarg, sizeof(dataarg), "--storage.tsdb.path=%s", data);
	fflush(NULL);
	fx.prom = fork();
	assert_true(fx.prom >= 0);
	if (fx.prom == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		freopen("/dev/null", "w", stdout);
		freopen("/dev/null", "w", stderr);
		execl(PROMETHEUS, PROMETHEUS, cfgarg, dataarg, listen, (char *)NULL);
		_exit(127);
	}
}

/* A one-sample instant query's value from prometheus; false until it has one. */
static bool prom_query(int web, const char *query_escaped, double *v)
{
	char path[512], *body = NULL;
	const char *val;
	bool ok = false;

	snprintf(path, sizeof(path), "/api/v1/query?query=%s", query_escaped);
	if (ktest_http_get(web, path, &body) == 200 && body && (val = strstr(body, "\"value\":[")) &&
	    (val = strchr(val, ','))) {
		*v = atof(val + 2); /* ,"<number>" */
		ok = strstr(body, "\"status\":\"success\"") != NULL;
	}
	free(body);
	return ok;
}

static void test_metrics(void **state)
{
	int mport = ktest_free_port(SOCK_STREAM), port = ktest_free_port(SOCK_STREAM), web;
	char body[1024], series[256], *page = NULL, *st;
	double admitted, throttled, m_adm, m_thr, events, tsec, v;
	struct ktest_load r;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_true(mport > 0 && port > 0 && mport != port);
	snprintf(body, sizeof(body),
		 "metrics: 127.0.0.1:%d\n"
		 "limits:\n"
		 "  - {name: m, cgroups: [%s], unit: connection, burst: 2,\n"
		 "     match: {cidrs: [127.0.0.1/32], ports: %d}, rateLimit: {max: 4}}\n",
		 mport, fx.cg, port);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
	assert_int_equal(ktest_load(fx.cg, "tcp", "127.0.0.1", port, 0.5, &r), 0);
	ktest_sleep_ms(250); /* two ticks: the controller's totals catch up */

	assert_int_equal(ktest_http_get(mport, "/metrics", &page), 200);
	assert_non_null(page);
	st = ktest_daemon_cmd(&fx.d, "status json");
	assert_non_null(st);
	assert_true(ktest_metric_sample(page, "kthrottle_admitted_total{limit=\"m\"}", &admitted));
	assert_true(ktest_metric_sample(page, "kthrottle_throttled_total{limit=\"m\"}", &throttled));
	assert_true(ktest_metric_sample(page, "kthrottle_throttle_events_total{limit=\"m\",reason=\"share\"}", &events));
	assert_true(ktest_metric_sample(page, "kthrottle_throttled_seconds_total{limit=\"m\"}", &tsec));
	const char *member = strstr(st, "\"member_id\":\"");
	assert_non_null(member);
	char id[96];
	assert_int_equal(sscanf(member + strlen("\"member_id\":\""), "%95[^\"]", id), 1);
	snprintf(series, sizeof(series), "kthrottle_member_admitted_total{limit=\"m\",member=\"%s\"}", id);
	assert_true(ktest_metric_sample(page, series, &m_adm));
	snprintf(series, sizeof(series), "kthrottle_member_throttled_total{limit=\"m\",member=\"%s\"}", id);
	assert_true(ktest_metric_sample(page, series, &m_thr));
	/* the kernel's per-CPU counters, as status reads them */
	const char *madm = strstr(member, "\"admitted\":"), *mthr = strstr(member, "\"throttled\":");
	assert_non_null(madm);
	assert_non_null(mthr);
	double k_adm = atof(madm + 11), k_thr = atof(mthr + 12);
	print_message("kt-load: %llu admitted (%llu ok + %llu ECONNREFUSED), %llu refused; metrics: "
		      "admitted %.0f throttled %.0f, member %.0f/%.0f (kernel %.0f / %.0f), events %.0f, "
		      "throttled %.1f s\n",
		      r.ok + r.errors, r.ok, r.errors, r.refused, admitted, throttled, m_adm, m_thr,
		      k_adm, k_thr, events, tsec);
	assert_true(m_adm == k_adm);
	assert_true(m_thr == k_thr);
	assert_true(admitted == (double)(r.ok + r.errors));
	assert_true(throttled == (double)r.refused);
	assert_true(events >= 1 && events <= throttled);
	assert_true(tsec >= 0.1 && tsec <= 1.0);
	free(st);
	free(page);
	page = NULL;
	assert_int_equal(ktest_http_get(mport, "/other", &page), 404);
	free(page);

	if (access(PROMETHEUS, X_OK) != 0) {
		print_message("%s missing (scripts/setup.sh installs prometheus)\n", PROMETHEUS);
		fail();
	}
	start_prometheus(mport, &web);
	bool got = false, up = false;
	for (int i = 0; i < 300 && !(got && up); i++) {
		ktest_sleep_ms(100);
		got = prom_query(web, "kthrottle_admitted_total%7Blimit%3D%22m%22%7D", &v) &&
		      v == admitted;
		double u;
		up = prom_query(web, "up%7Bjob%3D%22kthrottle%22%7D", &u) && u == 1;
	}
	print_message("prometheus: kthrottle_admitted_total{limit=\"m\"} = %.0f, up %s\n", v,
		      up ? "1" : "not 1");
	assert_true(got);
	assert_true(up);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_metrics, setup, teardown),
	};

	alarm(90);
	return cmocka_run_group_tests_name("e2e_metrics", tests, NULL, NULL);
}
