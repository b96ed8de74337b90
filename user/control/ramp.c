// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Ramp-up controller; the semantics are documented in ramp.h. */
#include <math.h>
#include <stdbool.h>
#include "control/ramp.h"

/* Percentage points of slack when comparing a utilization with a threshold,
 * so that used/granted computed in floating point (e.g. 0.3/0.6) still counts
 * as exactly at the threshold. */
#define UTIL_EPS 1e-9
/* Fraction of [min, max] within which the rate snaps to an end, so summing
 * many slope*dt steps lands exactly on max (progress shows 100, not 99.99..). */
#define SNAP_FRAC 1e-12

static bool has_ramp(const struct kt_ramp *r)
{
	return r->slope > 0;
}

static void set_cfg(struct kt_ramp *r, const struct kt_rate_limit_cfg *cfg)
{
	r->cfg = *cfg;
	/* `x > 0 ? x : 0` also maps NaN to 0. */
	double hi = cfg->max > 0 ? cfg->max : 0;
	double lo = cfg->min > 0 ? cfg->min : 0;
	if (lo > hi)
		lo = hi; /* invalid config: never exceed max */
	r->lo = lo;
	r->hi = hi;
	r->slope = 0;
	if (cfg->ramp_up_ns > 0 && hi > lo) {
		r->slope = (hi - lo) / ((double)cfg->ramp_up_ns / 1e9);
		if (!(r->slope > 0) || isinf(r->slope))
			r->slope = 0; /* range too small for the duration: no ramp */
	}
}

static double clamp_rate(const struct kt_ramp *r, double v)
{
	if (!(v > r->lo)) /* also NaN */
		return r->lo;
	if (v >= r->hi)
		return r->hi;
	double snap = (r->hi - r->lo) * SNAP_FRAC;
	if (r->hi - v <= snap)
		return r->hi;
	if (v - r->lo <= snap)
		return r->lo;
	return v;
}

static double clamp_pct(double v)
{
	if (!(v > 0))
		return 0;
	return v > 100 ? 100 : v;
}

double kt_utilization_pct(double granted, double used)
{
	if (!(granted > 0) || isnan(used))
		return 0;
	return clamp_pct((1.0 - (granted - used) / granted) * 100.0);
}

void kt_ramp_init(struct kt_ramp *r, const struct kt_rate_limit_cfg *cfg, uint64_t now_ns,
		  double resume_rate)
{
	set_cfg(r, cfg);
	r->last_util_pct = 0;
	r->last_ns = now_ns;
	r->last_call_ns = now_ns;
	if (!has_ramp(r))
		r->rate = r->hi;
	else if (cfg->resumed_ramp_up && resume_rate > 0)
		r->rate = clamp_rate(r, resume_rate);
	else
		r->rate = r->lo;
}

/* Seconds of [from, to] that lie after the idle gap starting at idle_since
 * exceeded cool_down_ns. */
static double past_cool_down_s(uint64_t idle_since, uint64_t cool_down_ns, uint64_t from,
			       uint64_t to)
{
	uint64_t cool_end = idle_since + cool_down_ns;
	if (cool_end < idle_since)
		return 0; /* saturates: cool-down never ends */
	if (to <= cool_end)
		return 0;
	if (from < cool_end)
		from = cool_end;
	return (double)(to - from) / 1e9;
}

double kt_ramp_epoch(struct kt_ramp *r, const struct kt_epoch_obs *obs)
{
	uint64_t prev_ns = r->last_ns;
	double dt = 0;
	if (obs->now_ns > prev_ns) {
		dt = (double)(obs->now_ns - prev_ns) / 1e9;
		r->last_ns = obs->now_ns;
	}

	bool busy = obs->calls > 0;
	double util;
	if ((obs->granted_tokens <= 0 && busy) || obs->refused > 0)
		/* demand met an empty (or closed) bucket: every granted token was
		 * used, whatever an epoch window still holding idle time says */
		util = 100;
	else
		util = kt_utilization_pct(obs->granted_tokens, obs->used_tokens);
	r->last_util_pct = util;

	uint64_t idle_since = r->last_call_ns;
	if (busy)
		r->last_call_ns = r->last_ns;

	if (!has_ramp(r)) {
		r->rate = r->hi;
		return r->rate;
	}

	double step = r->slope * dt;
	bool above = util + UTIL_EPS >= r->cfg.threshold_pct;
	double delta = 0;
	switch (r->cfg.mode) {
	case KT_MODE_SCHEDULED:
		delta = step;
		break;
	case KT_MODE_ONLY_IF_USED:
		delta = busy && above ? step : 0;
		break;
	case KT_MODE_GO_BACK_N:
		if (busy) {
			delta = above ? step : -step;
		} else {
			double s = past_cool_down_s(idle_since, r->cfg.cool_down_ns, prev_ns,
						    r->last_ns);
			delta = -clamp_pct(r->cfg.ramp_down_pct) / 100.0 * r->slope * s;
		}
		break;
	case KT_MODE_RELAXED:
	default: /* unknown modes are rejected by config; behave as the default */
		delta = busy ? step : 0;
		break;
	}
	r->rate = clamp_rate(r, r->rate + delta);
	return r->rate;
}

void kt_ramp_reconfigure(struct kt_ramp *r, const struct kt_rate_limit_cfg *cfg, uint64_t now_ns)
{
	enum kt_mode old_mode = r->cfg.mode;
	set_cfg(r, cfg);
	if (cfg->mode == KT_MODE_GO_BACK_N && old_mode != KT_MODE_GO_BACK_N &&
	    now_ns > r->last_call_ns)
		r->last_call_ns = now_ns;
	r->rate = has_ramp(r) ? clamp_rate(r, r->rate) : r->hi;
}

double kt_ramp_rate(const struct kt_ramp *r)
{
	return r->rate;
}

double kt_ramp_progress_pct(const struct kt_ramp *r)
{
	if (!(r->hi > r->lo))
		return 100;
	return clamp_pct((r->rate - r->lo) / (r->hi - r->lo) * 100.0);
}

double kt_ramp_last_utilization_pct(const struct kt_ramp *r)
{
	return r->last_util_pct;
}

double kt_ramp_resume_rate(const struct kt_rate_limit_cfg *cfg, double saved_rate,
			   uint64_t saved_at_ns, uint64_t now_ns)
{
	if (!cfg->resumed_ramp_up || !(saved_rate > 0) || isinf(saved_rate))
		return 0;
	if (now_ns < saved_at_ns || now_ns - saved_at_ns >= cfg->ttl_ns)
		return 0;
	return saved_rate;
}

double kt_share(double pool_rate, int pool_size)
{
	if (pool_size < 1 || !(pool_rate > 0))
		return 0;
	return pool_rate / pool_size;
}
