// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Ramp-up end-to-end: the real daemon on a real cgroup, a UDP
 * datagram limit min 50/s -> max 200/s over rampUpDuration 3 s, burst 5,
 * tickInterval 100 ms, epoch 1 s, and kt-load sending real datagrams.
 *
 * Measurement: the test polls `status json` every 50 ms. Each answer carries
 * the daemon's uptime and the kernel's exact admitted/throttled counters read
 * at that instant, so admitted counts are placed on the daemon's own clock,
 * the one its ramp runs on (the ramp starts at min at uptime 0). The expected
 * count over [a, b] is the integral of r(u) = min(max, min + slope*u) over it.
 *
 * Tolerance per one-second window after the first: +-max(8%, 5 tokens). The
 * controller writes a new rate each tick, so the admitted rate lags the ideal
 * ramp by half a tick on average: slope x 0.05 s = 2.5 tokens per second
 * (1.4-2% of the windows on the ramp). The first second is left out: it holds
 * the burst and the program load before enforcement starts. */
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
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "kt_daemonfx.h"
#include "ktest.h"

#define MIN_RATE KTEST_RAMP_MIN /* 50/s */
#define MAX_RATE KTEST_RAMP_MAX /* 200/s */
#define RAMP_S KTEST_RAMP_S     /* 3 s */
#define SLOPE ((MAX_RATE - MIN_RATE) / RAMP_S) /* 50 tokens/s per second */
#define POLL_MS 50
#define MAX_SNAPS 400

static struct fixture {
	struct ktest_daemon d;
	char cg[PATH_MAX];
	pid_t load_pid;
	int port;
} fx;

struct snap {
	double up;                      /* daemon uptime, s */
	double pool_rate, progress, util;
	unsigned long long admitted, throttled;
	char mode[32];
};

/* One status answer; false if the daemon did not answer or a field is missing. */
static bool snap_take(struct snap *s)
{
	char *out = ktest_daemon_cmd(&fx.d, "status json");
	double adm, thr;
	bool ok = false;

	memset(s, 0, sizeof(*s));
	if (!out)
		return false;
	if (ktest_json_num(out, "uptime_s", &s->up) &&
	    ktest_json_limit_num(out, "ramp", "pool_rate", &s->pool_rate) &&
	    ktest_json_limit_num(out, "ramp", "ramp_progress_pct", &s->progress) &&
	    ktest_json_limit_num(out, "ramp", "utilization_pct", &s->util) &&
	    ktest_json_limit_num(out, "ramp", "admitted", &adm) &&
	    ktest_json_limit_num(out, "ramp", "throttled", &thr) &&
	    ktest_json_limit_str(out, "ramp", "mode", s->mode, sizeof(s->mode))) {
		s->admitted = (unsigned long long)adm;
		s->throttled = (unsigned long long)thr;
		ok = true;
	}
	free(out);
	return ok;
}

static struct snap snap_now(void)
{
	struct snap s;

	assert_true(snap_take(&s));
	return s;
}

/* Polls until the daemon's uptime reaches up_end; returns the count. */
static int poll_until(double up_end, struct snap *s, int max)
{
	int n = 0;

	for (int guard = 0; guard < 100000 / POLL_MS && n < max; guard++) {
		if (!snap_take(&s[n]))
			fail_msg("daemon stopped answering");
		if (s[n++].up >= up_end)
			break;
		ktest_sleep_ms(POLL_MS);
	}
	return n;
}

static double ramp_rate(double u)
{
	double r = MIN_RATE + SLOPE * (u > 0 ? u : 0);

	return r < MAX_RATE ? r : MAX_RATE;
}

static int nearest(const struct snap *s, int n, double u)
{
	int best = 0;

	for (int i = 1; i < n; i++)
		if (fabs(s[i].up - u) < fabs(s[best].up - u))
			best = i;
	return best;
}

/* ---- config and processes ---- */

/* The test cgroup and the UDP port the limit matches. */
static void prepare(void)
{
	assert_int_equal(ktest_cgroup_create("ramp", fx.cg, sizeof(fx.cg)), 0);
	fx.port = ktest_free_port(SOCK_DGRAM);
	assert_true(fx.port > 0);
}

static void start_daemon(const char *modes)
{
	char body[2048];

	if (!fx.cg[0])
		prepare();
	assert_int_equal(ktest_ramp_config(body, sizeof(body), fx.cg, fx.port, modes), 0);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
}

/* kt-load in fx.cg in the background (output discarded), flat out. */
static void load_bg(double secs)
{
	fx.load_pid = ktest_load_spawn(fx.cg, fx.port, secs, 0, NULL);
	assert_true(fx.load_pid > 0);
}

static void load_stop(void)
{
	ktest_kill_wait(&fx.load_pid);
}

/* kt-load in fx.cg, synchronously; rate 0 = flat out. */
static void load_run(double secs, double rate, struct ktest_load *r)
{
	char rt[32];
	char *const extra[] = { "--rate", rt, NULL };

	snprintf(rt, sizeof(rt), "%.3f", rate);
	assert_int_equal(ktest_load_args(fx.cg, "udp", "127.0.0.1", fx.port, secs, extra, r), 0);
	print_message("kt-load %.1fs rate %s: ok=%llu refused=%llu errors=%llu elapsed=%.3f\n", secs,
		      rate > 0 ? rt : "max", r->ok, r->refused, r->errors, r->elapsed);
	assert_int_equal(r->errors, 0);
}

/* ---- fixtures ---- */

static int teardown(void **state)
{
	(void)state;
	load_stop();
	kt_daemonfx_end(&fx.d, fx.cg);
	return 0;
}

/* ---- tests ---- */

/* Saturating from before the daemon starts: each second after the first
 * admits the integral of the ramp, then max per second; status agrees. */
static void ramp_tracks(const char *modes, const char *mode_name)
{
	static struct snap s[MAX_SNAPS];
	const double end = 6.05;
	int n;

	prepare();
	load_bg(20); /* killed once measured */
	ktest_sleep_ms(100); /* saturating before the programs attach */
	start_daemon(modes);
	n = poll_until(end, s, MAX_SNAPS);
	load_stop();
	assert_true(n > 2 * (int)end);
	assert_true(s[n - 1].up >= end - 0.01);

	for (int k = 1; k + 1 <= (int)end; k++) {
		int a = nearest(s, n, k), b = nearest(s, n, k + 1);
		double want = ktest_ramp_integral(s[b].up) - ktest_ramp_integral(s[a].up);
		double got = (double)(s[b].admitted - s[a].admitted);
		double tol = fmax(0.08 * want, 5);

		print_message("%s [%.3f, %.3f]s: admitted %.0f, expected %.1f +- %.1f (%+.2f%%), "
			      "throttled %llu, pool_rate %.2f -> %.2f\n",
			      mode_name, s[a].up, s[b].up, got, want, tol, (got - want) / want * 100,
			      s[b].throttled - s[a].throttled, s[a].pool_rate, s[b].pool_rate);
		/* a sample within one poll of each boundary, and saturated throughout */
		assert_true(fabs(s[a].up - k) < 0.1 && fabs(s[b].up - (k + 1)) < 0.1);
		assert_true(s[b].throttled > s[a].throttled);
		assert_true(fabs(got - want) <= tol);
	}

	/* status while ramping: mode, pool rate on the ideal ramp (at most one
	 * tick behind), progress consistent with the rate */
	for (int i = 0; i < n; i++) {
		/* uptime_s is printed to the ms: +-0.5 ms of ramp either side */
		double lo = ramp_rate(s[i].up - 0.1 - 0.03 - 0.0005),
		       hi = ramp_rate(s[i].up + 0.0005) + 0.01;

		assert_string_equal(s[i].mode, mode_name);
		if (s[i].pool_rate < lo - 0.01 || s[i].pool_rate > hi) {
			print_message("uptime %.3f: pool_rate %.3f outside [%.3f, %.3f]\n", s[i].up,
				      s[i].pool_rate, lo, hi);
			fail();
		}
		assert_true(fabs(s[i].progress - (s[i].pool_rate - MIN_RATE) /
							 (MAX_RATE - MIN_RATE) * 100) <= 0.02);
	}
	/* held at max, fully used */
	const struct snap *last = &s[n - 1];
	print_message("final: pool_rate %.2f progress %.2f%% utilization %.2f%%\n", last->pool_rate,
		      last->progress, last->util);
	assert_true(last->pool_rate == MAX_RATE);
	assert_true(last->progress == 100);
	assert_true(last->util >= 90);
}

static void test_scheduled_ramp_tracks(void **state)
{
	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	ramp_tracks("scheduled: {}", "scheduled");
}

static void test_relaxed_ramp_tracks(void **state)
{
	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	ramp_tracks("relaxed: {}", "relaxed");
}

/* Relaxed: no traffic, no rise; load 1 s rises ~slope; an idle 2 s gap
 * holds the rate; loading again resumes from there. */
static void test_relaxed_idle_gap_stalls(void **state)
{
	struct ktest_load l;
	struct snap a, b, c, d;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_daemon("relaxed: {}");
	ktest_sleep_ms(500);
	a = snap_now();
	print_message("idle from start: pool_rate %.2f at %.2fs\n", a.pool_rate, a.up);
	assert_true(a.pool_rate == MIN_RATE);
	assert_string_equal(a.mode, "relaxed");

	load_run(1.0, 0, &l);
	assert_true(l.refused > 0);
	ktest_sleep_ms(300); /* the tick that saw the last calls has run */
	b = snap_now();
	ktest_sleep_ms(1700);
	c = snap_now();
	print_message("after load: %.2f at %.2fs; after the idle gap: %.2f at %.2fs\n", b.pool_rate,
		      b.up, c.pool_rate, c.up);
	/* ~1 s of busy ticks (+ one partial): slope x 1.0..1.1 */
	assert_true(b.pool_rate - MIN_RATE >= 0.8 * SLOPE && b.pool_rate - MIN_RATE <= 1.25 * SLOPE);
	assert_true(fabs(c.pool_rate - b.pool_rate) <= 0.01); /* stalled */
	assert_true(c.progress == b.progress);

	load_run(1.0, 0, &l);
	ktest_sleep_ms(300);
	d = snap_now();
	print_message("after the second load: %.2f at %.2fs (%.2f%%)\n", d.pool_rate, d.up, d.progress);
	/* resumed from where it stalled, not from min and not by the gap */
	assert_true(d.pool_rate - c.pool_rate >= 0.8 * SLOPE &&
		    d.pool_rate - c.pool_rate <= 1.25 * SLOPE);
}

/* goBackN (threshold 50, coolDownPeriod 1 s, rampDown 50%): rises under
 * saturation; after the load stops it holds through the cool-down, then
 * falls by 50% of the slope per second, never below min. */
static void test_gobackn_falls_after_cooldown(void **state)
{
	struct ktest_load l;
	struct snap a, b, c;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_daemon("goBackN: {thresholdPercentage: 50, coolDownPeriod: 1s, rampDownPercentage: 50}");
	load_run(2.0, 0, &l);
	assert_true(l.refused > 0);
	ktest_sleep_ms(250);
	a = snap_now();
	ktest_sleep_ms(500);
	b = snap_now();
	ktest_sleep_ms(1700);
	c = snap_now();
	print_message("goBackN: stop+0.25s %.2f (util %.1f%%), +0.75s %.2f, +2.45s %.2f (%.2f%%)\n",
		      a.pool_rate, a.util, b.pool_rate, c.pool_rate, c.progress);
	assert_string_equal(a.mode, "goBackN");
	assert_true(a.pool_rate >= MIN_RATE + 1.5 * SLOPE); /* rose under load */
	assert_true(fabs(b.pool_rate - a.pool_rate) <= 0.01); /* cool-down: holds */
	/* the fall: 50% x slope per second past the cool-down, which ends 1 s
	 * after the last tick with calls (0..0.1 s after the stop): 1.35-1.45 s
	 * x 25/s in c, within a tick */
	double fall = a.pool_rate - c.pool_rate;
	assert_true(fall >= 0.5 * SLOPE * 1.2 && fall <= 0.5 * SLOPE * 1.6);
	assert_true(c.pool_rate >= MIN_RATE);
}

/* onlyIfUsed (threshold 50): traffic at 10/s uses 20% of min's 50/s, so the
 * rate holds at min; saturating traffic then makes it rise. */
static void test_only_if_used_low_traffic_holds(void **state)
{
	struct ktest_load l;
	struct snap a, b;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_daemon("onlyIfUsed: {thresholdPercentage: 50}");
	load_run(2.5, 10, &l);
	assert_int_equal(l.refused, 0);
	a = snap_now();
	print_message("onlyIfUsed at 10/s: pool_rate %.2f utilization %.1f%% at %.2fs\n", a.pool_rate,
		      a.util, a.up);
	assert_string_equal(a.mode, "onlyIfUsed");
	assert_true(a.pool_rate == MIN_RATE);
	assert_true(a.progress == 0);
	assert_true(a.util >= 10 && a.util <= 30); /* 10/s of 50/s */

	load_run(1.5, 0, &l);
	assert_true(l.refused > 0);
	b = snap_now();
	print_message("onlyIfUsed saturated: pool_rate %.2f utilization %.1f%% at %.2fs\n",
		      b.pool_rate, b.util, b.up);
	/* the trailing epoch crosses 50% after ~0.5 s: then ~1 s of rise */
	assert_true(b.pool_rate >= MIN_RATE + 0.5 * SLOPE);
	assert_true(b.util >= 90);
}

/* resumedRampUp without a store: the ramp level is pinned with the kernel
 * state, so a restart within ttl resumes it instead of starting at min;
 * without resumedRampUp a restart starts at min. */
static void restart_resumes(bool resumed)
{
	char body[2048], more[64];
	struct snap a, b;

	KTEST_SKIP_UNLESS_ROOT();
	prepare();
	/* the ramp without a burst line */
	snprintf(more, sizeof(more), "      resumedRampUp: %s\n      ttl: 60s\n",
		 resumed ? "true" : "false");
	assert_int_equal(ktest_ramp_config_with(body, sizeof(body), fx.cg, fx.port, "scheduled: {}",
						-1, more),
			 0);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
	ktest_sleep_ms(1500); /* scheduled: rises with or without traffic */
	a = snap_now();
	assert_true(a.pool_rate > MIN_RATE + 0.8 * SLOPE);
	assert_int_equal(ktest_daemon_signal_wait(&fx.d, SIGTERM), 0);
	assert_int_equal(ktest_daemon_start_logged(&fx.d), 0);
	b = snap_now();
	print_message("resumedRampUp %s: %.2f/s before the restart, %.2f/s %.2fs after\n",
		      resumed ? "true" : "false", a.pool_rate, b.pool_rate, b.up);
	if (resumed)
		assert_true(b.pool_rate >= a.pool_rate && b.pool_rate <= MAX_RATE);
	else
		assert_true(b.pool_rate < MIN_RATE + SLOPE * (b.up + 0.2));
}

static void test_restart_resumes_ramp_without_store(void **state)
{
	(void)state;
	restart_resumes(true);
}

static void test_restart_without_resume_starts_at_min(void **state)
{
	(void)state;
	restart_resumes(false);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_scheduled_ramp_tracks, kt_dfx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_relaxed_ramp_tracks, kt_dfx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_relaxed_idle_gap_stalls, kt_dfx_setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_gobackn_falls_after_cooldown, kt_dfx_setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_only_if_used_low_traffic_holds, kt_dfx_setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_restart_resumes_ramp_without_store,
						kt_dfx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_restart_without_resume_starts_at_min,
						kt_dfx_setup, teardown),
	};

	kt_dfx = (struct kt_daemonfx_spec){
		.fx = &fx, .len = sizeof(fx), .d = &fx.d, .kid = &fx.load_pid
	};
	return cmocka_run_group_tests_name("e2e_ramp", tests, NULL, NULL);
}
