/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * `make bench`'s userspace sections (tests/bench/bench.c runs them):
 *   gcra     the GCRA decision in userspace on the mmapped bucket
 *   tick     controller tick cost per limit (ramp math alone; full tick)
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernel/apply.h"
#include "kernel/bpf_loader.h"
#include "members/resolve.h"
#include "base/config.h"
#include "control/controller.h"
#include "ktest.h"
#include "kthrottle.h"
#include "control/ramp.h"
#include "bench.h"

/* ---- section: GCRA in userspace on the mmapped bucket ---- */

int bench_gcra_user(struct bench_env *e)
{
	const int rounds = g_quick ? 3 : 5;
	const long n = g_quick ? 500000 : 2000000;
	struct kt_bucket *bk = &e->bpf.buckets[e->slot[LIM_USER]];
	double clk[16], adm[16], ref[16], d_adm[16], d_ref[16];

	for (int r = 0; r < rounds; r++) {
		volatile __u64 sink = 0;
		long admitted = 0, refused = 0;
		__u64 wait;
		uint64_t t0, t1;

		if (g_stop)
			return -EINTR;
		t0 = now_ns();
		for (long i = 0; i < n; i++)
			sink += now_ns();
		t1 = now_ns();
		clk[r] = (double)(t1 - t0) / (double)n;

		set_bucket(e, e->slot[LIM_USER], B_HUGE);
		t0 = now_ns();
		for (long i = 0; i < n; i++)
			admitted += kt_gcra_decide(bk, now_ns(), 1, &wait) == KT_ADMIT;
		t1 = now_ns();
		adm[r] = (double)(t1 - t0) / (double)n;

		set_bucket(e, e->slot[LIM_USER], B_EXHAUSTED);
		t0 = now_ns();
		for (long i = 0; i < n; i++)
			refused += kt_gcra_decide(bk, now_ns(), 1, &wait) == KT_REFUSE;
		t1 = now_ns();
		ref[r] = (double)(t1 - t0) / (double)n;

		d_adm[r] = adm[r] - clk[r];
		d_ref[r] = ref[r] - clk[r];
		(void)sink;
		sanity(admitted == n, "userspace GCRA: %ld of %ld admitted at a huge rate", admitted,
		       n);
		sanity(refused >= n - 1, "userspace GCRA: %ld of %ld refused on an exhausted bucket",
		       refused, n);
	}
	double b = median(clk, rounds);
	row_ns_delta("userspace GCRA on mmapped bucket + clock_gettime, admitted", median(adm, rounds),
		     b, median(d_adm, rounds), NAN);
	row_ns_delta("userspace GCRA on mmapped bucket + clock_gettime, refused", median(ref, rounds),
		     b, median(d_ref, rounds), NAN);
	return 0;
}

/* ---- section: controller tick cost ---- */

static void ramp_cfg(struct kt_rate_limit_cfg *rl, int i)
{
	static const enum kt_mode modes[] = { KT_MODE_SCHEDULED, KT_MODE_RELAXED,
					      KT_MODE_ONLY_IF_USED, KT_MODE_GO_BACK_N };

	memset(rl, 0, sizeof(*rl));
	rl->min = 10;
	rl->max = 1e6;
	/* long enough that no limit reaches max in the run: every tick moves
	 * the rate and rewrites the buckets (the expensive case) */
	rl->ramp_up_ns = 1000000ull * 1000000000ull;
	rl->mode = modes[i % 4];
	rl->threshold_pct = 50;
	rl->cool_down_ns = 5000000000ull;
	rl->ramp_down_pct = 50;
	rl->ttl_ns = 180000000000ull;
}

/* kt_ramp_epoch alone, per limit, as a tick over n limits calls it. */
static double ramp_only_us(int nlimits, long total_calls)
{
	struct kt_ramp *r = calloc((size_t)nlimits, sizeof(*r));
	struct kt_rate_limit_cfg rl;
	long ticks = total_calls / nlimits;
	uint64_t t = 1000000000ull, t0, t1;
	volatile double sink = 0;

	if (!r)
		return NAN;
	for (int i = 0; i < nlimits; i++) {
		ramp_cfg(&rl, i);
		kt_ramp_init(&r[i], &rl, t, 0);
	}
	t0 = now_ns();
	for (long k = 0; k < ticks; k++) {
		t += 100000000ull;
		for (int i = 0; i < nlimits; i++) {
			struct kt_epoch_obs obs = {
				.now_ns = t,
				.granted_tokens = r[i].rate * 0.1,
				.used_tokens = r[i].rate * 0.1 * (k & 1 ? 0.7 : 0.3),
				.calls = (uint64_t)(k & 3),
			};
			sink += kt_ramp_epoch(&r[i], &obs);
		}
	}
	t1 = now_ns();
	(void)sink;
	free(r);
	return (double)(t1 - t0) / 1e3 / (double)(ticks * nlimits);
}

/* Member cgroups for the full tick: one cgroup is in at most
 * KT_LIMITS_PER_CGROUP limits, so KT_MAX_LIMITS limits need this many. */
#define TICK_CGROUPS ((KT_MAX_LIMITS + KT_LIMITS_PER_CGROUP - 1) / KT_LIMITS_PER_CGROUP)

/* What the full tick needs, built by hand as the daemon builds it: the
 * controller's context and what it points at. */
struct tick_rig {
	struct kt_config cfg;
	struct kt_plan plan;
	struct kt_bpf bpf;
	struct kt_limit_state *ls;
	struct kt_sample *hist_pool;
	struct kt_pool *pool;
	struct kt_pool_local *pool_local;
	struct kt_slot_base *slot_base;
	struct kt_ctl ctl;
};

/* kt_ctl_tick with n limits in real maps: counter reads, ramp, bucket
 * writes. Returns µs per limit per tick, or NAN. */
static double full_tick_us(struct tick_rig *r, const char *cg_mount, char (*cgroups)[PATH_MAX],
			   int nlimits, long total_calls)
{
	char err[KT_ERR_LEN], name[16];
	struct kt_bucket_policy *pol = NULL;
	double us = NAN;
	long ticks = total_calls / nlimits;
	uint64_t t, t0, t1;
	int ret;

	if (ticks < 20)
		ticks = 20;
	r->cfg.limits = calloc((size_t)nlimits, sizeof(*r->cfg.limits));
	pol = calloc((size_t)nlimits, sizeof(*pol));
	const int hist_cap = kt_ctl_hist_cap(1000000000ull, 100000000ull); /* as ticked below */

	r->ls = calloc((size_t)nlimits, sizeof(*r->ls));
	r->hist_pool = calloc((size_t)nlimits * hist_cap, sizeof(*r->hist_pool));
	if (!r->cfg.limits || !pol || !r->ls || !r->hist_pool)
		goto out;
	r->cfg.n_limits = nlimits;
	for (int i = 0; i < nlimits; i++) {
		struct kt_limit_cfg *lc = &r->cfg.limits[i];
		char addr[32];

		snprintf(name, sizeof(name), "tick-%d", i);
		snprintf(addr, sizeof(addr), "10.%d.%d.0", i / 256, i % 256);
		limit_cfg(lc, name, KT_UNIT_PACKET, addr, 24, 0, cgroups[i / KT_LIMITS_PER_CGROUP]);
		lc->match.port_hi = 65535;
		ramp_cfg(&lc->rl, i);
		lc->burst = 100;
	}
	ret = kt_plan_resolve(&r->cfg, cg_mount, NULL, &r->plan, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "bench: tick: %s\n", err);
		goto out;
	}
	/* the tick consults the pool (local store here: no round trips) */
	r->pool_local = calloc((size_t)nlimits, sizeof(*r->pool_local));
	r->slot_base = calloc(KT_MAX_BUCKETS, sizeof(*r->slot_base));
	ret = r->pool_local && r->slot_base ? kt_pool_create(&r->pool, &r->cfg, err, sizeof(err))
					    : -ENOMEM;
	if (ret) {
		fprintf(stderr, "bench: tick: %s\n", ret == -ENOMEM ? "out of memory" : err);
		goto out;
	}
	t = now_ns();
	for (int i = 0; i < nlimits; i++) {
		struct kt_limit_state *s = &r->ls[i];

		/* as the daemon starts a limit: at min, one member */
		kt_ramp_init(&s->ramp, &r->cfg.limits[i].rl, t, 0);
		s->pool_rate = kt_ramp_rate(&s->ramp);
		s->pool_size = 1;
		s->bucket_rate = pol[i].rate = s->pool_rate;
		s->bucket_burst = pol[i].burst = r->cfg.limits[i].burst;
		kt_ctl_hist_rehome(s, r->hist_pool + (size_t)i * hist_cap, hist_cap);
	}
	ret = kt_plan_apply(&r->bpf, &r->plan, pol, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "bench: tick: %s\n", err);
		goto out;
	}
	r->ctl = (struct kt_ctl){
		.tick_ns = r->cfg.tick_ns,
		.epoch_ns = r->cfg.epoch_ns,
		.plan = &r->plan,
		.ls = r->ls,
		.pool = r->pool,
		.pool_local = r->pool_local,
		.bpf = &r->bpf,
		.slot_base = r->slot_base,
	};
	/* fill the trailing epoch first: 100 ms ticks on an injected clock */
	for (int k = 0; k < 12; k++)
		kt_ctl_tick(&r->ctl, t += 100000000ull);
	double first = r->ls[0].pool_rate;
	t0 = now_ns();
	for (long k = 0; k < ticks; k++)
		kt_ctl_tick(&r->ctl, t += 100000000ull);
	t1 = now_ns();
	us = (double)(t1 - t0) / 1e3 / (double)(ticks * nlimits);

	/* the scheduled limit (0) must have ramped, and the map must hold
	 * exactly what the controller last wrote */
	struct kt_bucket *bk = &r->bpf.buckets[r->plan.limits[0].members[0].slot];
	sanity(r->ls[0].pool_rate > first, "tick: scheduled ramp did not advance (%g -> %g)", first,
	       r->ls[0].pool_rate);
	sanity(bk->interval_fp == kt_interval_fp_from_rate(r->ls[0].bucket_rate),
	       "tick: bucket interval %llu is not the controller's rate %g",
	       (unsigned long long)bk->interval_fp, r->ls[0].bucket_rate);
out:
	kt_ctl_free(&r->ctl);
	r->ctl = (struct kt_ctl){ 0 };
	kt_pool_destroy(r->pool);
	r->pool = NULL;
	free(r->pool_local);
	r->pool_local = NULL;
	free(r->slot_base);
	r->slot_base = NULL;
	kt_plan_free(&r->plan);
	free_limit_cfgs(r->cfg.limits, r->cfg.n_limits);
	r->cfg.limits = NULL;
	r->cfg.n_limits = 0;
	kt_ctl_free_states(r->ls, nlimits);
	free(r->ls);
	r->ls = NULL;
	free(r->hist_pool);
	r->hist_pool = NULL;
	free(pol);
	return us;
}

int bench_tick(struct bench_env *e)
{
	static const int ramp_n[] = { 1, 100, 1000 };
	static const int full_n[] = { 1, 100, 1000 };
	const long ramp_calls = g_quick ? 200000 : 2000000;
	const long full_calls = g_quick ? 5000 : 40000;
	char err[KT_ERR_LEN], pin_dir[PATH_MAX], what[112];
	char (*cgs)[PATH_MAX] = calloc(TICK_CGROUPS, sizeof(*cgs));
	struct tick_rig *r = calloc(1, sizeof(*r));
	int ret = 0;

	pin_dir[0] = 0;
	if (!r || !cgs) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < sizeof(ramp_n) / sizeof(ramp_n[0]); i++) {
		if (g_stop) {
			ret = -EINTR;
			goto out;
		}
		double us = ramp_only_us(ramp_n[i], ramp_calls);
		snprintf(what, sizeof(what), "controller: kt_ramp_epoch only, %d limit%s", ramp_n[i],
			 ramp_n[i] > 1 ? "s" : "");
		sanity(!isnan(us), "%s: out of memory", what);
		row_us_per_limit(what, us, 5);
	}

	/* The full tick needs its own maps: a plan of N limits replaces the
	 * fixture's. KT_MAX_LIMITS bounds N. */
	for (int i = 0; i < TICK_CGROUPS; i++) {
		char name[32];

		snprintf(name, sizeof(name), "bench-tick-%d", i);
		ret = ktest_cgroup_create(name, cgs[i], sizeof(cgs[i]));
		if (ret) {
			fprintf(stderr, "bench: cannot create tick cgroup: %s\n", strerror(-ret));
			cgs[i][0] = 0;
			goto out;
		}
	}
	snprintf(pin_dir, sizeof(pin_dir), "%s-tick", e->pin_dir);
	ret = kt_bpf_open(&r->bpf, pin_dir, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "bench: tick: %s\n", err);
		pin_dir[0] = 0;
		goto out;
	}
	r->cfg.file = e->cfg_name;
	r->cfg.node_name = e->cfg_name;
	r->cfg.epoch_ns = 1000000000ull;
	r->cfg.tick_ns = 100000000ull;
	for (size_t i = 0; i < sizeof(full_n) / sizeof(full_n[0]); i++) {
		if (g_stop) {
			ret = -EINTR;
			break;
		}
		double us = full_tick_us(r, e->cg_mount, cgs, full_n[i], full_calls);
		snprintf(what, sizeof(what), "controller: full kt_ctl_tick (counters, ramp, bucket writes), %d limit%s",
			 full_n[i], full_n[i] > 1 ? "s" : "");
		if (isnan(us)) {
			ret = -EIO;
			break;
		}
		row_us_per_limit(what, us, 5);
	}
	kt_bpf_close(&r->bpf);
out:
	if (pin_dir[0] && kt_bpf_cleanup(pin_dir, err, sizeof(err)))
		fprintf(stderr, "bench: cleanup: %s\n", err);
	/* after cleanup: the pinned links no longer hold the cgroups */
	for (int i = 0; cgs && i < TICK_CGROUPS && cgs[i][0]; i++)
		ktest_cgroup_destroy(cgs[i]);
	free(cgs);
	free(r);
	return ret;
}
