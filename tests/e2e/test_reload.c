// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Live reload end-to-end: SIGHUP and `kthrottlectl reload` change
 * a limit under saturating load; the admitted rate follows within two ticks
 * (tickInterval 100 ms) with no burst above the new limit; a config with an
 * error is rejected and the old one kept; limits added and removed attach
 * and detach cleanly.
 *
 * kt-load reports its admitted count every 0.1 s. Tolerance on a window's
 * admitted count: +-(5% + 2) of rate x window, as in test_daemon.c. The
 * report clock starts a few ms after the fork measured here, so windows that
 * must lie after a reload start at the first report boundary after it. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "kt_daemonfx.h"
#include "ktest.h"

#define TICK_S 0.1
#define PERIOD_S 0.1 /* kt-load --report */
/* Explicit and fixed, so only the rate changes; large, so that a rate change
 * that mishandles the queued debt shows: keeping tat in ns as is hands out
 * BURST x (1 - new/old) free tokens on a fall and stalls BURST x (1/old -
 * 1/new) s on a rise (750 ms for 100 -> 400/s, far beyond two ticks). */
#define BURST 100.0

static struct fixture {
	struct ktest_daemon d;
	char cg[2][PATH_MAX];
	pid_t load_pid;
} fx;

static bool attached(const char *cg)
{
	char *out = NULL;
	bool yes;

	assert_int_equal(ktest_bpftool_cgroup_show(cg, &out), 0);
	yes = ktest_lists_kthrottle_prog(out);
	free(out);
	return yes;
}

static const char *limit_yaml(char *buf, size_t len, const char *name, const char *cg, int port,
			      double max)
{
	snprintf(buf, len,
		 "  - name: %s\n"
		 "    cgroups: [%s]\n"
		 "    match: {cidrs: [127.0.0.1/32], ports: %d, protocol: udp}\n"
		 "    unit: datagram\n"
		 "    burst: %.0f\n"
		 "    rateLimit: {max: %g}\n",
		 name, cg, port, BURST, max);
	return buf;
}

static void start_daemon(const char *limits)
{
	assert_int_equal(ktest_daemon_init(&fx.d), 0);
	kt_write_limits(&fx.d, limits);
	assert_int_equal(ktest_daemon_start_logged(&fx.d), 0);
}

static double since_s(uint64_t t0)
{
	return (double)(ktest_now_ns() - t0) / 1e9;
}

/* ---- kt-load in the background, reporting every PERIOD_S ---- */

#define MAX_PERIODS 200
struct series {
	int n;
	double end[MAX_PERIODS];              /* period end, s after kt-load's start */
	unsigned long long ok[MAX_PERIODS];
	unsigned long long total_ok, total_refused, errors;
	double elapsed;
};

static int bg_fd = -1;

static uint64_t bg_start(const char *cg, int port, double secs)
{
	uint64_t t0 = ktest_now_ns();

	fx.load_pid = ktest_load_spawn(cg, port, secs, PERIOD_S, &bg_fd);
	assert_true(fx.load_pid > 0);
	return t0;
}

static void bg_finish(struct series *s)
{
	size_t len = 0, cap = 1 << 16;
	char *buf = calloc(1, cap), *line, *save = NULL;
	int status;
	ssize_t r;

	assert_non_null(buf);
	while ((r = read(bg_fd, buf + len, cap - 1 - len)) > 0)
		len += (size_t)r;
	close(bg_fd);
	bg_fd = -1;
	assert_int_equal(waitpid(fx.load_pid, &status, 0), fx.load_pid);
	fx.load_pid = -1;
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	memset(s, 0, sizeof(*s));
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		struct ktest_load sum;
		double t;
		unsigned long long ok, ref;

		if (sscanf(line, "t=%lf ok=%llu refused=%llu", &t, &ok, &ref) == 3 &&
		    s->n < MAX_PERIODS) {
			s->end[s->n] = t;
			s->ok[s->n++] = ok;
		} else if (ktest_load_parse(line, &sum)) {
			s->total_ok = sum.ok;
			s->total_refused = sum.refused;
			s->errors = sum.errors;
			s->elapsed = sum.elapsed;
		}
	}
	free(buf);
	assert_int_equal(s->errors, 0);
	assert_true(s->total_refused > 0); /* saturating throughout */
}

/* Admitted in the whole periods inside [from, to]; *span gets their length. */
static unsigned long long window(const struct series *s, double from, double to, double *span)
{
	unsigned long long sum = 0;

	*span = 0;
	for (int i = 0; i < s->n; i++) {
		double start = s->end[i] - PERIOD_S;
		if (start >= from - 1e-6 && s->end[i] <= to + 1e-6) {
			sum += s->ok[i];
			*span += PERIOD_S;
		}
	}
	return sum;
}

static void assert_rate(const char *what, unsigned long long got, double rate, double span)
{
	double want = rate * span, tol = 0.05 * want + 2;

	print_message("%s: %llu admitted in %.1fs, expected %.1f +- %.1f (%.0f/s)\n", what, got,
		      span, want, tol, rate);
	assert_true(span > 0.25);
	assert_true((double)got >= want - tol && (double)got <= want + tol);
}

static void print_series(const struct series *s, double reload_at)
{
	print_message("per %.1fs (reload at ~%.2fs):", PERIOD_S, reload_at);
	for (int i = 0; i < s->n; i++)
		print_message(" %llu", s->ok[i]);
	print_message("\n");
}

/* next report boundary at or after t */
static double boundary_after(double t)
{
	double b = PERIOD_S;

	while (b < t - 1e-9)
		b += PERIOD_S;
	return b;
}

/* ---- fixtures ---- */

static int teardown(void **state)
{
	(void)state;
	ktest_kill_wait(&fx.load_pid);
	if (bg_fd >= 0)
		close(bg_fd);
	bg_fd = -1;
	kt_daemonfx_end(&fx.d, fx.cg[0]);
	kt_daemonfx_group_cg_end(fx.cg[1]);
	return 0;
}

/* ---- tests ---- */

/* Lower max 400 -> 100 with `kthrottlectl reload` under load. The bucket
 * is empty when the rate drops, so after the reply nothing beyond the new
 * rate may pass: no burst above the new limit. */
static void test_reload_lowers_rate_without_burst(void **state)
{
	char lim[1024], *out = NULL;
	struct series s;
	int port;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(ktest_cgroup_create("reload-low", fx.cg[0], sizeof(fx.cg[0])), 0);
	port = ktest_free_port(SOCK_DGRAM);
	start_daemon(limit_yaml(lim, sizeof(lim), "rl", fx.cg[0], port, 400));
	assert_int_equal(ktest_bpftool_cgroup_show(fx.cg[0], &out), 0);
	char *links_before = out;

	uint64_t t0 = bg_start(fx.cg[0], port, 3.0);
	ktest_sleep_ms(1200);
	kt_write_limits(&fx.d, limit_yaml(lim, sizeof(lim), "rl", fx.cg[0], port, 100));
	double sent = since_s(t0);
	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-s", fx.d.socket, "reload", NULL), 0);
	double replied = since_s(t0);
	assert_non_null(strstr(out, "ok"));
	free(out);
	bg_finish(&s);
	print_series(&s, sent);

	unsigned long long got;
	double span, b = boundary_after(replied);
	/* before: from 0.3 s (the initial burst is spent) to the reload */
	got = window(&s, 0.3, sent - 0.05, &span);
	assert_rate("before reload", got, 400, span);
	/* within two ticks of the reload the admitted rate is the new one */
	double settled = boundary_after(sent + 2 * TICK_S);
	got = window(&s, settled, 10, &span);
	assert_rate("after reload", got, 100, span);
	/* no burst: from the first boundary after the reply to the end, at
	 * most the new rate (the bucket was empty when the rate changed) */
	unsigned long long after = window(&s, b, 10, &span);
	print_message("from %.1fs: %llu admitted, new-rate bound %.1f\n", b, after,
		      100 * span + 0.05 * 100 * span + 2);
	assert_true((double)after <= 100 * span * 1.05 + 2);
	/* Exact GCRA bound over the whole run: at most BURST + 400/s until the
	 * reload took effect (no later than the reply) + 100/s after it. */
	double bound = BURST + 400 * replied + 100 * (s.elapsed - replied) + 2;
	print_message("whole run: %llu admitted, bound %.1f\n", s.total_ok, bound);
	assert_true((double)s.total_ok <= bound);

	assert_true(kt_status_num(&fx.d, "rl", "max") == 100);
	assert_true(kt_status_num(&fx.d, "rl", "bucket_rate") == 100);
	/* no detach: the same links (same ids) before and after */
	assert_int_equal(ktest_bpftool_cgroup_show(fx.cg[0], &out), 0);
	assert_string_equal(out, links_before);
	free(out);
	free(links_before);
}

/* Raise max 100 -> 400 with SIGHUP under load: the new rate within two
 * ticks, and no burst above it. */
static void test_sighup_raises_rate_within_two_ticks(void **state)
{
	char lim[1024], *log;
	struct series s;
	int port;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(ktest_cgroup_create("reload-high", fx.cg[0], sizeof(fx.cg[0])), 0);
	port = ktest_free_port(SOCK_DGRAM);
	start_daemon(limit_yaml(lim, sizeof(lim), "rh", fx.cg[0], port, 100));

	uint64_t t0 = bg_start(fx.cg[0], port, 3.0);
	ktest_sleep_ms(1200);
	kt_write_limits(&fx.d, limit_yaml(lim, sizeof(lim), "rh", fx.cg[0], port, 400));
	double sent = since_s(t0);
	assert_int_equal(kill(fx.d.pid, SIGHUP), 0);
	bg_finish(&s);
	print_series(&s, sent);

	unsigned long long got;
	double span;
	got = window(&s, 0.6, sent - 0.05, &span);
	assert_rate("before SIGHUP", got, 100, span);
	double settled = boundary_after(sent + 2 * TICK_S);
	got = window(&s, settled, 10, &span);
	assert_rate("after SIGHUP", got, 400, span);
	/* no burst: from the signal on, at most the new rate (+ tolerance) */
	double b = boundary_after(sent);
	unsigned long long after = window(&s, b, 10, &span);
	assert_true((double)after <= 400 * span * 1.05 + 2);
	/* Exact bound over the whole run: BURST + 100/s until the signal
	 * (less 50 ms for kt-load's later clock start) + 400/s after it. */
	double bound = BURST + 100 * (sent - 0.05) + 400 * (s.elapsed - sent + 0.05) + 2;
	print_message("whole run: %llu admitted, bound %.1f\n", s.total_ok, bound);
	assert_true((double)s.total_ok <= bound);

	log = ktest_slurp(fx.d.log);
	assert_non_null(strstr(log, "reloaded"));
	free(log);
	assert_true(kt_status_num(&fx.d, "rh", "max") == 400);
}

/* A broken config is rejected with its file:line, through the CLI and
 * through SIGHUP, and the running one stays in force. */
static void test_bad_reload_keeps_old_config(void **state)
{
	char lim[1024], bad[1400], *out = NULL, *log;
	struct ktest_load l;
	int port;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(ktest_cgroup_create("reload-bad", fx.cg[0], sizeof(fx.cg[0])), 0);
	port = ktest_free_port(SOCK_DGRAM);
	start_daemon(limit_yaml(lim, sizeof(lim), "rb", fx.cg[0], port, 200));

	snprintf(bad, sizeof(bad), "%s    bogusKey: 1\n", limit_yaml(lim, sizeof(lim), "rb",
								     fx.cg[0], port, 50));
	kt_write_limits(&fx.d, bad);
	/* the offending line: the last one of the file */
	char *cfg = ktest_slurp(fx.d.config), want[600];
	int lines = 0;
	for (char *p = cfg; *p; p++)
		lines += *p == '\n';
	free(cfg);
	snprintf(want, sizeof(want), "%s:%d:", fx.d.config, lines);

	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-s", fx.d.socket, "reload", NULL), 1);
	print_message("reload reply: %s", out);
	assert_true(!strncmp(out, "error:", 6));
	assert_non_null(strstr(out, want));
	assert_non_null(strstr(out, "bogusKey"));
	assert_null(strchr(out, '\n') ? strchr(strchr(out, '\n') + 1, '\n') : NULL);
	free(out);

	assert_int_equal(kill(fx.d.pid, SIGHUP), 0);
	ktest_sleep_ms(300);
	assert_int_equal(waitpid(fx.d.pid, NULL, WNOHANG), 0);
	log = ktest_slurp(fx.d.log);
	assert_non_null(strstr(log, "rejected, keeping the running configuration"));
	free(log);

	/* old config in force: max 200 */
	assert_true(kt_status_num(&fx.d, "rb", "max") == 200);
	assert_true(kt_status_num(&fx.d, "rb", "bucket_rate") == 200);
	ktest_sleep_ms(250); /* full bucket */
	assert_int_equal(ktest_load(fx.cg[0], "udp", "127.0.0.1", port, 1.0, &l), 0);
	double want_ok = 200 * l.elapsed + BURST;
	print_message("after rejected reload: ok=%llu expected %.1f\n", l.ok, want_ok);
	assert_true(l.refused > 0);
	assert_true(fabs((double)l.ok - want_ok) <= 0.05 * want_ok + 2);
}

/* Adding a limit attaches to its cgroup; removing one detaches from it,
 * and the remaining limit keeps its bucket. */
static void test_reload_adds_and_removes_limits(void **state)
{
	char la[1024], lb[1024], both[2100], *out = NULL;
	struct ktest_load l;
	int pa, pb;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(ktest_cgroup_create("reload-a", fx.cg[0], sizeof(fx.cg[0])), 0);
	assert_int_equal(ktest_cgroup_create("reload-b", fx.cg[1], sizeof(fx.cg[1])), 0);
	pa = ktest_free_port(SOCK_DGRAM);
	pb = ktest_free_port(SOCK_DGRAM);
	if (pb == pa)
		pb = pa < 65535 ? pa + 1 : pa - 1;
	limit_yaml(la, sizeof(la), "ra", fx.cg[0], pa, 200);
	/* rb: one token per 10 s, to see that its bucket survives a reload */
	snprintf(lb, sizeof(lb),
		 "  - name: rb\n"
		 "    cgroups: [%s]\n"
		 "    match: {cidrs: [127.0.0.1/32], ports: %d, protocol: udp}\n"
		 "    unit: datagram\n"
		 "    burst: 3\n"
		 "    rateLimit: {max: 0.1}\n",
		 fx.cg[1], pb);
	start_daemon(la);
	assert_true(attached(fx.cg[0]));
	assert_false(attached(fx.cg[1]));

	snprintf(both, sizeof(both), "%s%s", la, lb);
	kt_write_limits(&fx.d, both);
	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-s", fx.d.socket, "reload", NULL), 0);
	free(out);
	assert_true(attached(fx.cg[0]));
	assert_true(attached(fx.cg[1]));
	assert_int_equal(ktest_load(fx.cg[1], "udp", "127.0.0.1", pb, 0.2, &l), 0);
	assert_int_equal(l.ok, 3); /* the new limit enforces: burst 3 */
	assert_true(l.refused > 0);

	kt_write_limits(&fx.d, lb);
	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-s", fx.d.socket, "reload", NULL), 0);
	free(out);
	assert_false(attached(fx.cg[0]));
	assert_true(attached(fx.cg[1]));
	/* ra is gone: its cgroup is untouched */
	assert_int_equal(ktest_load(fx.cg[0], "udp", "127.0.0.1", pa, 0.3, &l), 0);
	assert_int_equal(l.refused, 0);
	assert_true(l.ok > 10 * (200 * 0.3 + BURST));
	/* rb kept its (empty) bucket across the reload */
	assert_int_equal(ktest_load(fx.cg[1], "udp", "127.0.0.1", pb, 0.1, &l), 0);
	assert_int_equal(l.ok, 0);
	assert_true(l.refused > 0);

	char *st = ktest_daemon_cmd(&fx.d, "status json");
	assert_non_null(st);
	assert_null(strstr(st, "\"name\":\"ra\""));
	assert_non_null(strstr(st, "\"name\":\"rb\""));
	free(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_reload_lowers_rate_without_burst, kt_dfx_setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_sighup_raises_rate_within_two_ticks,
						kt_dfx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_reload_keeps_old_config, kt_dfx_setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_reload_adds_and_removes_limits, kt_dfx_setup,
						teardown),
	};

	kt_dfx = (struct kt_daemonfx_spec){
		.fx = &fx, .len = sizeof(fx), .d = &fx.d, .kid = &fx.load_pid
	};
	return cmocka_run_group_tests_name("e2e_reload", tests, NULL, NULL);
}
