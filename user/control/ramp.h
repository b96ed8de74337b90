/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Ramp-up controller: the pool rate of one limit, moved from rateLimit.min to
 * rateLimit.max by the configured mode.
 *
 * Pure logic: no I/O, no allocation, no globals, no clock reads. The caller
 * owns the clock (CLOCK_MONOTONIC in the daemon, a fake one in tests) and
 * calls kt_ramp_epoch() once per epoch with what the kernel counters saw.
 *
 * Semantics, with slope = (max - min) / rampUpDuration tokens/s per second and
 * dt = seconds since the previous epoch (or since init), measured from now_ns
 * so a late or irregular epoch moves the rate by exactly its own length:
 *
 *   no ramp      rampUpDuration == 0 or max == min: the rate is max from the
 *                start and no mode changes it.
 *   scheduled    rate += slope * dt in every epoch, traffic or not. Starts at
 *                min (not max on the first call: the reference
 *                implementation's last-refill time started at 0).
 *   relaxed      rate += slope * dt in epochs with calls > 0; an idle epoch
 *                holds the rate, so the ramp stalls and resumes where it was.
 *   onlyIfUsed   rate += slope * dt in epochs with calls > 0 and utilization
 *                >= thresholdPercentage (exactly at the threshold rises);
 *                otherwise holds.
 *   goBackN      epoch with calls: utilization >= threshold -> rate += slope*dt,
 *                below it -> rate -= slope*dt. Epoch without calls: holds
 *                while the idle gap is <= coolDownPeriod; past it, falls by
 *                rampDownPercentage% * slope per second of the gap beyond
 *                coolDownPeriod (only the part of dt past the cool-down
 *                counts, so the total fall over an idle gap G is
 *                rampDown% * slope * (G - coolDown) whatever the epoch
 *                length). The idle gap is measured from the end of the last
 *                epoch that had calls (or from init / the switch to goBackN).
 *
 * The rate is always clamped to [min, max] and is never rounded: fractional
 * rates (and fractional member shares, see kt_share) are kept as doubles.
 *
 * Utilization of an epoch = (1 - tokens left / tokens granted) * 100 =
 * used / granted * 100, clamped to 0..100. An epoch in which nothing was
 * granted (rate 0, e.g. min 0 at start) but calls were refused counts as 100%:
 * there was demand and every granted token (none) was used, so threshold modes
 * cannot stall forever at a zero rate.
 *
 * A clock that goes backwards (now_ns < previous epoch) counts as dt = 0. */
#ifndef KT_RAMP_H
#define KT_RAMP_H

#include <stdint.h>
#include "base/config.h"

struct kt_ramp {
	struct kt_rate_limit_cfg cfg; /* copy of the config in force */
	double lo, hi;            /* effective [min, max] */
	double slope;             /* tokens/s per second; 0 when there is no ramp */
	double rate;              /* current pool rate, tokens/s, in [lo, hi] */
	double last_util_pct;     /* utilization seen at the last epoch, 0 before */
	uint64_t last_ns;         /* time of the last epoch (or init) */
	uint64_t last_call_ns;    /* end of the last epoch with calls (or init) */
};

/* What the daemon saw over one epoch, summed over the limit's local buckets. */
struct kt_epoch_obs {
	uint64_t now_ns;          /* end of the epoch, same clock as init */
	double granted_tokens;    /* tokens the buckets were given this epoch */
	double used_tokens;       /* tokens admitted this epoch */
	uint64_t calls;           /* requests seen, admitted and refused */
	uint64_t refused;         /* requests refused in the latest tick: when > 0
				   * the bucket ran dry, so utilization counts as
				   * 100% (the trailing window may still hold an
				   * idle stretch that would understate demand) */
};

/* Start at min, or at resume_rate when cfg->resumed_ramp_up is set and
 * resume_rate > 0 (get it from kt_ramp_resume_rate), clamped to [min, max].
 * With no ramp (see above) the start is max. cfg must be validated; if
 * min > max anyway the range collapses to max, so max is never exceeded. */
void kt_ramp_init(struct kt_ramp *r, const struct kt_rate_limit_cfg *cfg, uint64_t now_ns,
		  double resume_rate);

/* Close an epoch: record its utilization, move the rate by the mode, and
 * return the new pool rate (tokens/s). O(1), no allocation. */
double kt_ramp_epoch(struct kt_ramp *r, const struct kt_epoch_obs *obs);

/* Live reload: adopt cfg, keep the current rate clamped into the new
 * [min, max] (no restart from min; a config without a ramp jumps to max).
 * The epoch in progress is judged under the new config when it closes.
 * now_ns restarts the goBackN idle clock when the mode changes to goBackN,
 * so idle time spent under another mode does not count as cool-down. */
void kt_ramp_reconfigure(struct kt_ramp *r, const struct kt_rate_limit_cfg *cfg, uint64_t now_ns);

double kt_ramp_rate(const struct kt_ramp *r);
/* (rate - min) / (max - min) * 100; 100 when max == min. */
double kt_ramp_progress_pct(const struct kt_ramp *r);
double kt_ramp_last_utilization_pct(const struct kt_ramp *r);

/* (1 - (granted - used) / granted) * 100 clamped to 0..100; 0 when granted
 * <= 0 or either input is not a number. */
double kt_utilization_pct(double granted, double used);

/* The rate to resume at after a restart: saved_rate when cfg->resumed_ramp_up
 * is set and the restart is within ttl (now_ns - saved_at_ns < ttl_ns, both on
 * one clock), else 0 (start from min). A saved_at_ns in the future also gives
 * 0: the clocks do not match (e.g. CLOCK_MONOTONIC across a reboot). */
double kt_ramp_resume_rate(const struct kt_rate_limit_cfg *cfg, double saved_rate,
			   uint64_t saved_at_ns, uint64_t now_ns);

/* One member's rate: pool_rate / pool_size, unrounded; 0 when pool_size < 1
 * or pool_rate is not a positive number. */
double kt_share(double pool_rate, int pool_size);

#endif
