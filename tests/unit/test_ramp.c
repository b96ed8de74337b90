// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Ramp-up controller: table-driven scenarios on an injected clock. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kthrottle.h"
#include "control/ramp.h"

#define EPS 1e-9
#define MS(x) ((uint64_t)(x) * 1000000ULL)
/* Days of uptime: a controller that measures its first interval from time 0
 * (the reference implementation's scheduled-mode defect) jumps to max. */
#define T0 (3ULL * 86400ULL * 1000000000ULL)

#define CFGX(mn, mx, ramp_ms, md, thr, cool_ms, rd)                                        \
	{ .max = (mx), .min = (mn), .ramp_up_ns = MS(ramp_ms), .mode = (md),                 \
	  .threshold_pct = (thr), .cool_down_ns = MS(cool_ms), .ramp_down_pct = (rd),        \
	  .resumed_ramp_up = false, .ttl_ns = MS(180000) }
#define CFG(mn, mx, ramp_ms, md) CFGX(mn, mx, ramp_ms, md, 50, 5000, 50)

struct step {
	uint64_t at_ms;           /* epoch end, ms after T0 */
	uint64_t calls;
	double granted, used;
	double want;              /* pool rate after the epoch */
};

/* An epoch with `calls` requests, `granted` tokens given, `used` admitted. */
#define OBS(at, c, g, u, w) { (at), (c), (g), (u), (w) }
#define IDLE(at, w) OBS(at, 0, 0, 0, w)
#define SAT(at, w) OBS(at, 100, 100, 100, w)   /* saturated: 100% used */
#define USE(at, g, u, w) OBS(at, 10, g, u, w) /* traffic with a given use */

#define MAX_STEPS 24
struct scenario {
	struct kt_rate_limit_cfg cfg;
	double start;
	int n;
	struct step steps[MAX_STEPS];
};

#define SC(cfg_, start_, ...)                                                               \
	{ .cfg = cfg_, .start = (start_),                                                    \
	  .n = sizeof((struct step[]){ __VA_ARGS__ }) / sizeof(struct step),                 \
	  .steps = { __VA_ARGS__ } }

/* scheduled: slope 50/s from 50 to 200, traffic irrelevant, then holds. */
static const struct scenario sc_scheduled_shape =
	SC(CFG(50, 200, 3000, KT_MODE_SCHEDULED), 50,
	   IDLE(1000, 100), IDLE(2000, 150), SAT(2500, 175), IDLE(3000, 200), IDLE(4000, 200),
	   SAT(10000, 200));

/* A defect of the reference implementation: scheduled jumped straight to
 * max on the first call. */
static const struct scenario sc_scheduled_first_call_no_jump =
	SC(CFG(10, 100, 9000, KT_MODE_SCHEDULED), 10,
	   SAT(100, 11), SAT(1000, 20));

/* Late and irregular epochs move the rate by their real length. */
static const struct scenario sc_scheduled_irregular =
	SC(CFG(10, 110, 10000, KT_MODE_SCHEDULED), 10,
	   IDLE(250, 12.5), IDLE(2000, 30), IDLE(2100, 31), IDLE(5600, 66), IDLE(20000, 110));

/* A clock going backwards counts as no time; the next epoch is measured from
 * the latest time seen. */
static const struct scenario sc_clock_backwards =
	SC(CFG(10, 110, 10000, KT_MODE_SCHEDULED), 10,
	   IDLE(2000, 30), IDLE(1000, 30), IDLE(2000, 30), IDLE(3000, 40));

/* relaxed: rises with any traffic (even 1% use), stalls while idle, resumes. */
static const struct scenario sc_relaxed_stall_resume =
	SC(CFG(50, 200, 3000, KT_MODE_RELAXED), 50,
	   SAT(1000, 100), IDLE(2000, 100), IDLE(3000, 100), OBS(4000, 1, 100, 1, 150),
	   SAT(5000, 200), SAT(6000, 200));

/* relaxed: idle from start-up, then the first traffic rises by one epoch only. */
static const struct scenario sc_relaxed_idle_start =
	SC(CFG(10, 110, 10000, KT_MODE_RELAXED), 10,
	   IDLE(1000, 10), IDLE(2000, 10), IDLE(3000, 10), SAT(4000, 20), IDLE(60000, 20),
	   SAT(60500, 25));

/* Fractional range: max=2, min=1; clamped at max. */
static const struct scenario sc_relaxed_fractional_clamp =
	SC(CFG(1, 2, 1000, KT_MODE_RELAXED), 1,
	   SAT(250, 1.25), SAT(500, 1.5), SAT(5000, 2), SAT(6000, 2));

/* Fractional min and max: no rounding anywhere. */
static const struct scenario sc_scheduled_fractional =
	SC(CFG(0.25, 0.75, 1000, KT_MODE_SCHEDULED), 0.25,
	   IDLE(500, 0.5), IDLE(600, 0.55), IDLE(1000, 0.75));

/* onlyIfUsed 50%: exactly at the threshold rises, just below holds, idle
 * holds, a half epoch rises by half a step, over-use (burst) counts as 100%. */
static const struct scenario sc_only_if_used_threshold =
	SC(CFG(10, 110, 10000, KT_MODE_ONLY_IF_USED), 10,
	   USE(1000, 10, 10, 20), USE(2000, 20, 9.99, 20), USE(3000, 20, 10, 30),
	   IDLE(4000, 30), USE(5000, 30, 30, 40), USE(5500, 15, 15, 45),
	   USE(6500, 10, 25, 55));

/* onlyIfUsed 10%: 0.06/0.6 is 9.99999999999998% in doubles; it is the
 * threshold and must rise. */
static const struct scenario sc_only_if_used_float_boundary =
	SC(CFGX(10, 110, 10000, KT_MODE_ONLY_IF_USED, 10, 5000, 50), 10,
	   USE(1000, 0.6, 0.06, 20), USE(2000, 0.6, 0.0599, 20));

/* onlyIfUsed 0%: any call rises, even with nothing used; idle still holds. */
static const struct scenario sc_only_if_used_zero_threshold =
	SC(CFGX(10, 110, 10000, KT_MODE_ONLY_IF_USED, 0, 5000, 50), 10,
	   USE(1000, 10, 0, 20), IDLE(2000, 20), USE(3000, 10, 0, 30));

/* min 0: the bucket grants nothing, refused calls count as full use, so the
 * ramp cannot stall at zero forever. */
static const struct scenario sc_only_if_used_closed_bucket =
	SC(CFG(0, 10, 10000, KT_MODE_ONLY_IF_USED), 0,
	   OBS(1000, 5, 0, 0, 1), IDLE(2000, 1), OBS(3000, 5, 1, 1, 2));

/* goBackN 50% / 5 s / 50%: rise, fall by slope below threshold, hold during
 * cool-down (a gap of exactly 5 s is not "more than"), then fall by 50% of
 * slope per second past it down to min, then rise again. */
static const struct scenario sc_go_back_n_shape =
	SC(CFG(10, 110, 10000, KT_MODE_GO_BACK_N), 10,
	   USE(1000, 10, 10, 20), USE(2000, 20, 20, 30), USE(3000, 30, 6, 20),
	   USE(4000, 20, 12, 30), IDLE(5000, 30), IDLE(6000, 30), IDLE(7000, 30),
	   IDLE(8000, 30), IDLE(9000, 30), IDLE(10000, 25), IDLE(11000, 20), IDLE(12000, 15),
	   IDLE(13000, 10), IDLE(14000, 10), USE(15000, 10, 10, 20));

/* goBackN below threshold: never under min; exactly at threshold rises; a
 * half-second epoch falls half a step. */
static const struct scenario sc_go_back_n_floor =
	SC(CFG(10, 110, 10000, KT_MODE_GO_BACK_N), 10,
	   USE(1000, 10, 1, 10), USE(2000, 10, 4.99, 10), USE(3000, 10, 5, 20),
	   USE(3500, 10, 0.5, 15));

/* goBackN: one late idle epoch covering 7.5 s falls only for the 2.5 s past
 * the cool-down; an epoch straddling the cool-down end counts its tail. */
static const struct scenario sc_go_back_n_late_idle =
	SC(CFG(10, 110, 10000, KT_MODE_GO_BACK_N), 10,
	   SAT(1000, 20), SAT(2000, 30), SAT(3000, 40), IDLE(10500, 27.5), IDLE(11000, 25),
	   SAT(11500, 30));
static const struct scenario sc_go_back_n_straddle =
	SC(CFG(10, 110, 10000, KT_MODE_GO_BACK_N), 10,
	   SAT(1000, 20), SAT(2000, 30), SAT(3000, 40), IDLE(4000, 40), IDLE(8500, 37.5),
	   IDLE(9000, 35));

/* goBackN rampDownPercentage 100 and a 2 s cool-down; then 0 (never falls). */
static const struct scenario sc_go_back_n_full_ramp_down =
	SC(CFGX(10, 110, 10000, KT_MODE_GO_BACK_N, 50, 2000, 100), 10,
	   SAT(1000, 20), SAT(2000, 30), IDLE(4000, 30), IDLE(5000, 20));
static const struct scenario sc_go_back_n_no_ramp_down =
	SC(CFGX(10, 110, 10000, KT_MODE_GO_BACK_N, 50, 2000, 0), 10,
	   SAT(1000, 20), SAT(2000, 30), IDLE(60000, 30));

/* goBackN idle from start-up past the cool-down stays at min. */
static const struct scenario sc_go_back_n_idle_start =
	SC(CFG(10, 110, 10000, KT_MODE_GO_BACK_N), 10,
	   IDLE(6000, 10), IDLE(7000, 10), SAT(8000, 20));

/* rampUpDuration 0: no ramp, max from the start in every mode. */
static const struct scenario sc_no_ramp_go_back_n =
	SC(CFG(50, 200, 0, KT_MODE_GO_BACK_N), 200,
	   USE(1000, 200, 1, 200), IDLE(60000, 200));
static const struct scenario sc_no_ramp_scheduled =
	SC(CFG(50, 200, 0, KT_MODE_SCHEDULED), 200, IDLE(1000, 200));
/* max == min: nothing to ramp. */
static const struct scenario sc_min_eq_max =
	SC(CFG(100, 100, 5000, KT_MODE_SCHEDULED), 100, IDLE(1000, 100), SAT(2000, 100));
/* Invalid min > max (config rejects it): never above max. */
static const struct scenario sc_min_above_max =
	SC(CFG(300, 200, 5000, KT_MODE_SCHEDULED), 200, IDLE(1000, 200));

static void run_scenario(void **state)
{
	const struct scenario *sc = *state;
	struct kt_ramp r;

	kt_ramp_init(&r, &sc->cfg, T0, 0);
	if (fabs(kt_ramp_rate(&r) - sc->start) > EPS)
		fail_msg("start rate %.12g, want %.12g", kt_ramp_rate(&r), sc->start);
	for (int i = 0; i < sc->n; i++) {
		const struct step *s = &sc->steps[i];
		struct kt_epoch_obs obs = {
			.now_ns = T0 + MS(s->at_ms),
			.granted_tokens = s->granted,
			.used_tokens = s->used,
			.calls = s->calls,
		};
		double got = kt_ramp_epoch(&r, &obs);
		if (fabs(got - s->want) > EPS)
			fail_msg("step %d (t=%llums calls=%llu granted=%g used=%g): rate %.12g, want %.12g",
				 i, (unsigned long long)s->at_ms, (unsigned long long)s->calls,
				 s->granted, s->used, got, s->want);
		assert_true(kt_ramp_rate(&r) == got);
		assert_true(got >= r.lo && got <= r.hi);
	}
}

#define SCENARIO(x) \
	{ .name = #x, .test_func = run_scenario, .initial_state = (void *)&sc_##x }

static void test_utilization_pct(void **state)
{
	(void)state;
	static const struct { double granted, used, want; } t[] = {
		{ 100, 50, 50 }, { 100, 0, 0 }, { 100, 100, 100 }, { 100, 150, 100 },
		{ 100, -5, 0 },  { 0, 10, 0 },  { -1, 10, 0 },     { 0.5, 0.125, 25 },
		{ NAN, 1, 0 },   { 1, NAN, 0 },
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		double got = kt_utilization_pct(t[i].granted, t[i].used);
		if (fabs(got - t[i].want) > EPS)
			fail_msg("row %zu: utilization(%g, %g) = %g, want %g", i, t[i].granted,
				 t[i].used, got, t[i].want);
	}
}

static void test_epoch_records_utilization(void **state)
{
	(void)state;
	struct kt_rate_limit_cfg cfg = CFG(10, 110, 10000, KT_MODE_RELAXED);
	struct kt_ramp r;
	kt_ramp_init(&r, &cfg, T0, 0);
	assert_true(kt_ramp_last_utilization_pct(&r) == 0);
	kt_ramp_epoch(&r, &(struct kt_epoch_obs){ T0 + MS(1000), 40, 10, 3 });
	assert_float_equal(kt_ramp_last_utilization_pct(&r), 25, EPS);
	kt_ramp_epoch(&r, &(struct kt_epoch_obs){ T0 + MS(2000), 0, 0, 7 });
	assert_float_equal(kt_ramp_last_utilization_pct(&r), 100, EPS);
	kt_ramp_epoch(&r, &(struct kt_epoch_obs){ T0 + MS(3000), 0, 0, 0 });
	assert_float_equal(kt_ramp_last_utilization_pct(&r), 0, EPS);
}

/* A tick with refused calls proves the bucket ran dry: threshold modes must
 * see full use even while the trailing window still holds an idle stretch
 * (low window utilization), instead of holding (onlyIfUsed) or falling
 * (goBackN) under saturating load. */
static void test_refusals_count_as_full_use(void **state)
{
	(void)state;
	struct kt_rate_limit_cfg only = CFG(50, 150, 1000, KT_MODE_ONLY_IF_USED);
	struct kt_rate_limit_cfg gbn = CFGX(50, 150, 1000, KT_MODE_GO_BACK_N, 50, 1000, 50);
	struct kt_ramp r;

	kt_ramp_init(&r, &only, T0, 0);
	/* window 20% used, but this tick refused calls: rises by slope*dt */
	kt_ramp_epoch(&r, &(struct kt_epoch_obs){ .now_ns = T0 + MS(100), .granted_tokens = 50,
						.used_tokens = 10, .calls = 30, .refused = 5 });
	assert_float_equal(kt_ramp_last_utilization_pct(&r), 100, EPS);
	assert_float_equal(kt_ramp_rate(&r), 60, 1e-6);
	/* same window without refusals: holds */
	kt_ramp_epoch(&r, &(struct kt_epoch_obs){ .now_ns = T0 + MS(200), .granted_tokens = 50,
						.used_tokens = 10, .calls = 30, .refused = 0 });
	assert_float_equal(kt_ramp_rate(&r), 60, 1e-6);

	kt_ramp_init(&r, &gbn, T0, 100);
	r.rate = 100;
	kt_ramp_epoch(&r, &(struct kt_epoch_obs){ .now_ns = T0 + MS(100), .granted_tokens = 50,
						.used_tokens = 10, .calls = 30, .refused = 5 });
	assert_float_equal(kt_ramp_rate(&r), 110, 1e-6); /* rises, not falls */
}

static void test_progress(void **state)
{
	(void)state;
	struct kt_rate_limit_cfg cfg = CFG(50, 200, 3000, KT_MODE_SCHEDULED);
	struct kt_ramp r;
	kt_ramp_init(&r, &cfg, T0, 0);
	assert_float_equal(kt_ramp_progress_pct(&r), 0, EPS);
	kt_ramp_epoch(&r, &(struct kt_epoch_obs){ .now_ns = T0 + MS(1500) });
	assert_float_equal(kt_ramp_progress_pct(&r), 50, EPS);
	kt_ramp_epoch(&r, &(struct kt_epoch_obs){ .now_ns = T0 + MS(3000) });
	assert_true(kt_ramp_progress_pct(&r) == 100);

	/* 30 epochs of slope 1/3 * 0.1 s sum to 0.9999999999999999 in doubles;
	 * the ramp must still end exactly at max (status shows 100%). */
	struct kt_rate_limit_cfg thirds = CFG(0, 1, 3000, KT_MODE_SCHEDULED);
	kt_ramp_init(&r, &thirds, T0, 0);
	for (int i = 1; i <= 29; i++)
		kt_ramp_epoch(&r, &(struct kt_epoch_obs){ .now_ns = T0 + MS(100 * i) });
	assert_true(kt_ramp_rate(&r) < 1);
	kt_ramp_epoch(&r, &(struct kt_epoch_obs){ .now_ns = T0 + MS(3000) });
	assert_true(kt_ramp_rate(&r) == 1);
	assert_true(kt_ramp_progress_pct(&r) == 100);

	struct kt_rate_limit_cfg flat = CFG(100, 100, 3000, KT_MODE_SCHEDULED);
	kt_ramp_init(&r, &flat, T0, 0);
	assert_true(kt_ramp_progress_pct(&r) == 100);
	struct kt_rate_limit_cfg no_ramp = CFG(50, 200, 0, KT_MODE_RELAXED);
	kt_ramp_init(&r, &no_ramp, T0, 0);
	assert_true(kt_ramp_progress_pct(&r) == 100);
}

static void test_resume_init(void **state)
{
	(void)state;
	static const struct { bool flag; double resume, want; } t[] = {
		{ true, 150, 150 },   /* resumes at the level reached */
		{ true, 500, 200 },   /* clamped to max */
		{ true, 10, 50 },     /* clamped to min */
		{ true, 0, 50 },      /* nothing saved: min */
		{ true, -3, 50 },
		{ true, NAN, 50 },
		{ false, 150, 50 },   /* resumedRampUp off: always min */
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct kt_rate_limit_cfg cfg = CFG(50, 200, 3000, KT_MODE_SCHEDULED);
		cfg.resumed_ramp_up = t[i].flag;
		struct kt_ramp r;
		kt_ramp_init(&r, &cfg, T0, t[i].resume);
		if (fabs(kt_ramp_rate(&r) - t[i].want) > EPS)
			fail_msg("row %zu: start %g, want %g", i, kt_ramp_rate(&r), t[i].want);
	}
	/* The ramp continues from the resumed level, measured from init. */
	struct kt_rate_limit_cfg cfg = CFG(50, 200, 3000, KT_MODE_SCHEDULED);
	cfg.resumed_ramp_up = true;
	struct kt_ramp r;
	kt_ramp_init(&r, &cfg, T0, 150);
	assert_float_equal(kt_ramp_epoch(&r, &(struct kt_epoch_obs){ .now_ns = T0 + MS(500) }),
			   175, EPS);
}

static void test_resume_rate_ttl(void **state)
{
	(void)state;
	struct kt_rate_limit_cfg cfg = CFG(50, 200, 3000, KT_MODE_RELAXED);
	cfg.resumed_ramp_up = true; /* ttl 180 s */
	assert_float_equal(kt_ramp_resume_rate(&cfg, 180, T0, T0 + MS(10000)), 180, EPS);
	assert_float_equal(kt_ramp_resume_rate(&cfg, 180, T0, T0), 180, EPS);
	assert_float_equal(kt_ramp_resume_rate(&cfg, 180, T0, T0 + MS(179999)), 180, EPS);
	assert_true(kt_ramp_resume_rate(&cfg, 180, T0, T0 + MS(180000)) == 0); /* not < ttl */
	assert_true(kt_ramp_resume_rate(&cfg, 180, T0 + MS(1), T0) == 0);     /* future stamp */
	assert_true(kt_ramp_resume_rate(&cfg, 0, T0, T0 + MS(1)) == 0);
	assert_true(kt_ramp_resume_rate(&cfg, INFINITY, T0, T0 + MS(1)) == 0);
	cfg.resumed_ramp_up = false;
	assert_true(kt_ramp_resume_rate(&cfg, 180, T0, T0 + MS(1)) == 0);
}

/* Reload keeps the level (clamped into the new range), never restarts from
 * min, and the next epoch uses the new slope. */
static void test_reconfigure_keeps_level(void **state)
{
	(void)state;
	struct kt_rate_limit_cfg cfg = CFG(10, 110, 10000, KT_MODE_RELAXED);
	struct kt_ramp r;
	kt_ramp_init(&r, &cfg, T0, 0);
	kt_ramp_epoch(&r, &(struct kt_epoch_obs){ T0 + MS(4000), 100, 100, 100 });
	assert_float_equal(kt_ramp_rate(&r), 50, EPS);

	struct kt_rate_limit_cfg wider = CFG(10, 210, 10000, KT_MODE_RELAXED); /* slope 20 */
	kt_ramp_reconfigure(&r, &wider, T0 + MS(4500));
	assert_float_equal(kt_ramp_rate(&r), 50, EPS);
	assert_float_equal(kt_ramp_progress_pct(&r), 20, EPS);
	assert_float_equal(kt_ramp_epoch(&r, &(struct kt_epoch_obs){ T0 + MS(5000), 1, 1, 1 }),
			   70, EPS);

	struct kt_rate_limit_cfg lower = CFG(10, 40, 10000, KT_MODE_RELAXED);
	kt_ramp_reconfigure(&r, &lower, T0 + MS(5000));
	assert_float_equal(kt_ramp_rate(&r), 40, EPS);

	struct kt_rate_limit_cfg higher_min = CFG(60, 100, 10000, KT_MODE_RELAXED);
	kt_ramp_reconfigure(&r, &higher_min, T0 + MS(5000));
	assert_float_equal(kt_ramp_rate(&r), 60, EPS);

	struct kt_rate_limit_cfg no_ramp = CFG(60, 300, 0, KT_MODE_RELAXED);
	kt_ramp_reconfigure(&r, &no_ramp, T0 + MS(5000));
	assert_float_equal(kt_ramp_rate(&r), 300, EPS);

	/* Adding a ramp to a limit running at max keeps it at max. */
	struct kt_rate_limit_cfg ramp_again = CFG(60, 300, 10000, KT_MODE_SCHEDULED);
	kt_ramp_reconfigure(&r, &ramp_again, T0 + MS(5000));
	assert_float_equal(kt_ramp_rate(&r), 300, EPS);
}

/* Switching to goBackN starts its idle clock at the reload, so a long idle
 * period under relaxed is not punished at once. */
static void test_reconfigure_go_back_n_idle_clock(void **state)
{
	(void)state;
	struct kt_rate_limit_cfg relaxed = CFG(10, 110, 10000, KT_MODE_RELAXED);
	struct kt_ramp r;
	kt_ramp_init(&r, &relaxed, T0, 0);
	kt_ramp_epoch(&r, &(struct kt_epoch_obs){ T0 + MS(5000), 100, 100, 100 });
	for (int s = 6; s <= 60; s++)
		kt_ramp_epoch(&r, &(struct kt_epoch_obs){ .now_ns = T0 + MS(1000 * s) });
	assert_float_equal(kt_ramp_rate(&r), 60, EPS);

	struct kt_rate_limit_cfg gbn = CFG(10, 110, 10000, KT_MODE_GO_BACK_N);
	kt_ramp_reconfigure(&r, &gbn, T0 + MS(60000));
	assert_float_equal(kt_ramp_epoch(&r, &(struct kt_epoch_obs){ .now_ns = T0 + MS(61000) }),
			   60, EPS);
	assert_float_equal(kt_ramp_epoch(&r, &(struct kt_epoch_obs){ .now_ns = T0 + MS(65000) }),
			   60, EPS);
	/* 6 s after the reload: 1 s past the cool-down, 50% of slope 10. */
	assert_float_equal(kt_ramp_epoch(&r, &(struct kt_epoch_obs){ .now_ns = T0 + MS(66000) }),
			   55, EPS);

	/* A reload that keeps goBackN does not reset its idle clock. */
	kt_ramp_reconfigure(&r, &gbn, T0 + MS(66000));
	assert_float_equal(kt_ramp_epoch(&r, &(struct kt_epoch_obs){ .now_ns = T0 + MS(67000) }),
			   50, EPS);
}

/* A defect of the reference implementation: max=2, min=1 over 2 members
 * floored to 0 tokens per member. Every member's share must be fractional and reach the kernel as a
 * finite interval, from start-up to max. */
static void test_fractional_share_not_floored(void **state)
{
	(void)state;
	struct kt_rate_limit_cfg cfg = CFG(1, 2, 10000, KT_MODE_SCHEDULED);
	struct kt_ramp r;
	kt_ramp_init(&r, &cfg, T0, 0);
	static const struct { uint64_t at_ms; double member; } t[] = {
		{ 0, 0.5 }, { 1000, 0.55 }, { 2500, 0.625 }, { 10000, 1.0 }, { 20000, 1.0 },
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		if (t[i].at_ms)
			kt_ramp_epoch(&r, &(struct kt_epoch_obs){ .now_ns = T0 + MS(t[i].at_ms) });
		double member = kt_share(kt_ramp_rate(&r), 2);
		if (fabs(member - t[i].member) > EPS)
			fail_msg("t=%llums: member rate %g, want %g", (unsigned long long)t[i].at_ms,
				 member, t[i].member);
		__u64 ival = kt_interval_fp_from_rate(member);
		assert_true(ival != 0);
		/* Interval rounds up: the enforced rate is at most the share, and
		 * within 1e-6 relative of it. */
		double enforced = kt_rate_from_interval_fp(ival);
		assert_true(enforced <= member);
		assert_true(enforced > member * (1 - 1e-6));
	}
}

static void test_share(void **state)
{
	(void)state;
	assert_float_equal(kt_share(2, 2), 1, EPS);
	assert_float_equal(kt_share(1, 3), 1.0 / 3, EPS);
	assert_float_equal(kt_share(100, 1), 100, EPS);
	assert_true(kt_share(100, 0) == 0);
	assert_true(kt_share(100, -1) == 0);
	assert_true(kt_share(0, 4) == 0);
	assert_true(kt_share(-5, 4) == 0);
	assert_true(kt_share(NAN, 4) == 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		SCENARIO(scheduled_shape),
		SCENARIO(scheduled_first_call_no_jump),
		SCENARIO(scheduled_irregular),
		SCENARIO(clock_backwards),
		SCENARIO(relaxed_stall_resume),
		SCENARIO(relaxed_idle_start),
		SCENARIO(relaxed_fractional_clamp),
		SCENARIO(scheduled_fractional),
		SCENARIO(only_if_used_threshold),
		SCENARIO(only_if_used_float_boundary),
		SCENARIO(only_if_used_zero_threshold),
		SCENARIO(only_if_used_closed_bucket),
		SCENARIO(go_back_n_shape),
		SCENARIO(go_back_n_floor),
		SCENARIO(go_back_n_late_idle),
		SCENARIO(go_back_n_straddle),
		SCENARIO(go_back_n_full_ramp_down),
		SCENARIO(go_back_n_no_ramp_down),
		SCENARIO(go_back_n_idle_start),
		SCENARIO(no_ramp_go_back_n),
		SCENARIO(no_ramp_scheduled),
		SCENARIO(min_eq_max),
		SCENARIO(min_above_max),
		cmocka_unit_test(test_utilization_pct),
		cmocka_unit_test(test_epoch_records_utilization),
		cmocka_unit_test(test_refusals_count_as_full_use),
		cmocka_unit_test(test_progress),
		cmocka_unit_test(test_resume_init),
		cmocka_unit_test(test_resume_rate_ttl),
		cmocka_unit_test(test_reconfigure_keeps_level),
		cmocka_unit_test(test_reconfigure_go_back_n_idle_clock),
		cmocka_unit_test(test_fractional_share_not_floored),
		cmocka_unit_test(test_share),
	};
	return cmocka_run_group_tests_name("ramp", tests, NULL, NULL);
}
