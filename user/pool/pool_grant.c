/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What one bucket may admit, from the pool's view of its limit: the share
 * of the pool rate (equal, or per member under share: demand), the burst,
 * the lease and the fallback past it (onStoreFailure), and the pinned
 * lease kept across a restart. */
#include <math.h>
#include <string.h>
#include "base/log.h"
#include "pool/pool_int.h"

/* The lease an answer to a heartbeat sent at `sent` grants. */
void pool_grant_lease(struct lim *l, uint64_t sent)
{
	l->v.lease_until_ns = sent + l->lease_ns;
	/* open never ends its fallback: the one policy that may exceed max */
	l->v.fallback_until_ns = l->on_failure == KT_FAIL_OPEN ? 0 : l->v.lease_until_ns + l->hold_ns;
}

/* The share left for live members once lapsed members' fallback is held. */
static double available(const struct lim *l, double pool_rate)
{
	double avail = pool_rate - l->v.reserved;

	return avail > 0 ? avail : 0;
}

/* Per-member rate of this node's buckets once the lease lapses (what the
 * store is told to reserve for them). Unknown size: nothing. */
double pool_member_fallback(const struct lim *l, double pool_rate)
{
	/* in-flight: a lapsed node's claim is its reserve (heartbeat.lua) */
	if (l->slots || l->v.size < 1 || !isfinite(pool_rate) || pool_rate <= 0)
		return 0;
	switch (l->on_failure) {
	case KT_FAIL_CONSERVATIVE:
		return l->rl.min > 0 ? l->rl.min / l->v.size : 0;
	case KT_FAIL_OPEN:
		return available(l, pool_rate) / l->v.size;
	case KT_FAIL_CLOSED:
		break;
	}
	return 0;
}

/* share: demand: what an idle member keeps so it can start (a tenth of an
 * equal share); it grows past it once its demand is reported. */
double pool_demand_floor(const struct lim *l, double pool_rate)
{
	int size = l->v.size > 0 ? l->v.size : (l->v.live > 0 ? l->v.live : 1);

	return available(l, pool_rate) / size / KT_DEMAND_FLOOR_DIV;
}

/* In-flight limits on Redis: the store grants this node whole slots
 * (heartbeat.lua's slots); a bucket serving `served` of the members the
 * heartbeat named gets their part of the grant (the node bucket, all of
 * them: the grant; a member joined since: nothing more than the grant).
 * Past the lease the same, until the fallback ends: the store keeps the
 * node's claim that long (onStoreFailure closed: nothing). */
static double slots_rate(const struct lim *l, enum kt_pool_phase ph, int served)
{
	int nloc = l->n_ids > 0 ? l->n_ids : 1;

	if (l->v.slots_grant <= 0 ||
	    (ph == KT_POOL_STORE_LOST && (l->v.closed || l->on_failure == KT_FAIL_CLOSED)))
		return 0;
	return (double)l->v.slots_grant * (served < nloc ? served : nloc) / nloc;
}

/* An adopted lease is checked against the buckets the previous daemon
 * wrote: until the store answers, no member runs above the rate those ran
 * at, so a pinned size or fallback written wrong (by hand, an older
 * version, a bit flip) cannot raise a share. */
static double adopt_capped(const struct lim *l, double rate, int served)
{
	if (l->adopted && l->adopt_cap >= 0 && rate > l->adopt_cap * served)
		return l->adopt_cap * served;
	return rate;
}

double kt_pool_bucket_rate(const struct kt_pool *p, int i, double pool_rate, int served)
{
	const struct lim *l;
	enum kt_pool_phase ph;
	int size;

	if (!p || i < 0 || i >= p->n || served < 1 || !isfinite(pool_rate) || pool_rate <= 0)
		return 0;
	l = &p->l[i];
	if (l->v.size < 1)
		return 0; /* unknown is not alone */
	size = l->v.size;
	/* a stale view can be smaller than this node's own members: never hand out
	 * more than the pool rate */
	if (served > size)
		served = size;
	ph = l->v.phase;
	if (l->slots)
		return slots_rate(l, ph, served);
	/* past the lease: exactly what the kernel does, the fallback the store
	 * holds for us, then closed */
	if (ph == KT_POOL_STORE_LOST)
		return l->v.closed ? 0 : adopt_capped(l, l->v.fallback_member * served, served);
	pool_rate = l->kind == KT_STORE_REDIS ? available(l, pool_rate) : pool_rate;
	if (ph == KT_POOL_JOINING && l->rl.min < pool_rate)
		pool_rate = l->rl.min > 0 ? l->rl.min : 0;
	return adopt_capped(l, pool_rate * served / size, served);
}

/* The end of a leased policy, once rate, burst and fallback rate are set. */
static void lease_tail(struct kt_bucket_policy *out)
{
	/* the burst scales with the rate, so the tolerance in ns does not grow
	 * at the switch and free tokens (see struct kt_bucket) */
	out->fallback_burst = out->rate > 0 && out->fallback_rate < out->rate
				      ? out->burst * out->fallback_rate / out->rate
				      : out->burst;
	/* no lease yet: the kernel must not run ahead of one */
	if (!out->valid_until)
		out->rate = out->fallback_rate = 0;
}

void kt_pool_bucket_policy(const struct kt_pool *p, int i, double pool_rate, int served,
			   struct kt_bucket_policy *out)
{
	const struct lim *l;
	int size;

	memset(out, 0, sizeof(*out));
	out->burst = 1;
	if (!p || i < 0 || i >= p->n || served < 1)
		return;
	l = &p->l[i];
	size = l->v.size;
	if (served > size && size > 0)
		served = size;
	out->rate = kt_pool_bucket_rate(p, i, pool_rate, served);
	if (size > 0)
		out->burst = l->burst * served / size;
	if (out->burst < 1)
		out->burst = 1;
	if (l->kind != KT_STORE_REDIS)
		return; /* no lease: the rate holds until the daemon changes it */
	out->valid_until = l->v.lease_until_ns;
	out->fallback_until = l->v.fallback_until_ns;
	/* exactly what the store reserves for us (told with the heartbeat);
	 * in-flight: the node's claim, kept for the fallback's length */
	out->fallback_rate = l->slots ? (l->on_failure == KT_FAIL_CLOSED ? 0 : out->rate)
				      : adopt_capped(l, l->v.fallback_member * served, served);
	lease_tail(out);
}

/* share: demand: where id is among the ids sent, -1 nowhere. */
static int id_at(const struct lim *l, const char *id)
{
	for (int k = 0; k < l->n_ids; k++)
		if (l->ids[k] && !strcmp(l->ids[k], id))
			return k;
	return -1;
}

/* share: demand: one member's fallback rate, what the store holds for it:
 * with callers, none for one not yet answered for as called (dormant). */
static double member_fallback(const struct lim *l, const char *id)
{
	int k;

	if (!l->dormancy)
		return l->v.fallback_member;
	k = id_at(l, id);
	return l->fb_held && k >= 0 && l->fb_held[k] ? l->v.fallback_member : 0;
}

/* share: demand: one member's rate (see kt_pool_members_policy). */
static double member_rate(const struct lim *l, const char *id, double pool_rate)
{
	double floor_rate, joining;
	int k;

	if (l->v.size < 1 || !isfinite(pool_rate) || pool_rate <= 0)
		return 0;
	if (l->v.phase == KT_POOL_STORE_LOST)
		return l->v.closed ? 0 : member_fallback(l, id);
	if (l->grants && (k = id_at(l, id)) >= 0 && isfinite(l->grants[k]))
		return l->grants[k];
	/* not answered for yet: the floor, no more than an equal joiner */
	floor_rate = pool_demand_floor(l, pool_rate);
	joining = (l->rl.min < available(l, pool_rate) ? l->rl.min : available(l, pool_rate)) /
		  l->v.size;
	return l->v.phase == KT_POOL_JOINING && joining < floor_rate ? joining : floor_rate;
}

/* In-flight slots with classes: a bucket serving ids gets, for each, its
 * class's part of what the node may hold (the grant, as the phase has it)
 * over that class's members here. Without parts (no answer with classes
 * yet, or all 0) the equal split stands. */
static void slots_by_class(const struct kt_pool *p, int i, double pool_rate, const char *const *ids, int n,
			   struct kt_bucket_policy *out)
{
	const struct lim *l = &p->l[i];
	int cnt[KT_STORE_MAX_CLASSES] = { 0 }, nc = l->v.slots_classes;
	double whole, sum = 0, rate = 0;

	if (nc <= 0 || nc > KT_STORE_MAX_CLASSES || !l->id_class || l->n_ids < 1)
		return;
	for (int k = 0; k < nc; k++)
		sum += l->v.slots_class_part[k];
	if (!(sum > 0))
		return;
	for (int j = 0; j < l->n_ids; j++)
		if (l->id_class[j] >= 0 && l->id_class[j] < nc)
			cnt[l->id_class[j]]++;
	whole = kt_pool_bucket_rate(p, i, pool_rate, l->n_ids);
	for (int m = 0; m < n; m++) {
		int j = 0;

		while (j < l->n_ids && !(ids[m] && l->ids[j] && !strcmp(l->ids[j], ids[m])))
			j++;
		if (j == l->n_ids) {
			/* joined since the last heartbeat: an equal part until the
			 * next one names it (the node bucket bounds it) */
			rate += whole / l->n_ids;
		} else if (l->id_class[j] >= 0 && l->id_class[j] < nc && cnt[l->id_class[j]] > 0) {
			rate += whole * l->v.slots_class_part[l->id_class[j]] / sum / cnt[l->id_class[j]];
		}
	}
	out->rate = rate;
}

void kt_pool_members_policy(const struct kt_pool *p, int i, double pool_rate, const char *const *ids,
			    int n, struct kt_bucket_policy *out)
{
	const struct lim *l;
	double rate = 0, avail;

	kt_pool_bucket_policy(p, i, pool_rate, n, out);
	if (!p || i < 0 || i >= p->n || n < 1 || !ids)
		return;
	if (p->l[i].slots) {
		slots_by_class(p, i, pool_rate, ids, n, out);
		return;
	}
	if (!p->l[i].demand)
		return;
	l = &p->l[i];
	for (int k = 0; k < n; k++)
		rate += ids[k] ? member_rate(l, ids[k], pool_rate) : 0;
	if (l->dormancy) {
		double fb = 0;

		for (int k = 0; k < n; k++)
			fb += ids[k] ? member_fallback(l, ids[k]) : 0;
		if (fb < out->fallback_rate)
			out->fallback_rate = fb;
	}
	avail = available(l, pool_rate);
	out->rate = rate;
	/* the burst follows the share, as an equal share's does */
	out->burst = avail > 0 ? l->burst * rate / avail : 1;
	if (out->burst < 1)
		out->burst = 1;
	lease_tail(out);
}

void kt_pool_adopt(struct kt_pool *p, int i, const struct kt_lease *pin, double member_rate,
		   uint64_t now)
{
	struct lim *l;

	if (!p || !pin || i < 0 || i >= p->n)
		return;
	l = &p->l[i];
	if (l->kind != KT_STORE_REDIS || l->answered || !pin->size || !pin->lease_until ||
	    pin->size > KT_STORE_MAX_POOL)
		return;
	l->adopted = true;
	l->adopt_cap = isfinite(member_rate) ? member_rate : -1;
	l->ever_agreed = pin->agreed != 0;
	l->v.size = l->prev_size = (int)pin->size;
	l->v.agree = pin->agreed != 0;
	l->v.reserved = (double)pin->reserved_urate / 1e6;
	l->v.fallback_member = (double)pin->fallback_urate / 1e6;
	/* never longer than this config would have granted from now */
	l->v.lease_until_ns = pin->lease_until < now + l->lease_ns ? pin->lease_until : now + l->lease_ns;
	l->v.fallback_until_ns = pin->fallback_until;
	if (l->on_failure == KT_FAIL_CLOSED)
		l->v.fallback_member = 0;
	pool_set_phase(l, now > l->v.lease_until_ns ? KT_POOL_STORE_LOST
			: pin->agreed ? KT_POOL_AGREED : KT_POOL_DISAGREED, now);
	kt_info("pool: limit %s: continuing the pinned lease: size %u, %.1f s left%s", l->name, pin->size,
		now < l->v.lease_until_ns ? (double)(l->v.lease_until_ns - now) / 1e9 : 0.0,
		l->adopt_cap >= 0 ? ", no member above the pinned buckets' rate" : "");
}

void kt_pool_adopt_slots(struct kt_pool *p, int i, int64_t slots)
{
	struct lim *l;

	if (!p || i < 0 || i >= p->n || slots < 0)
		return;
	l = &p->l[i];
	if (!l->slots || l->answered || !l->adopted)
		return;
	l->v.slots_grant = slots;
	l->sent_slots_in_force = slots;
	kt_info("pool: limit %s: continuing on the %lld slots the node bucket holds", l->name,
		(long long)slots);
}

static uint64_t to_urate(double r)
{
	return r > 0 && isfinite(r) ? (uint64_t)(r * 1e6) : 0;
}

bool kt_pool_lease(const struct kt_pool *p, int i, struct kt_lease *out)
{
	const struct lim *l;

	memset(out, 0, sizeof(*out));
	if (!p || i < 0 || i >= p->n)
		return false;
	l = &p->l[i];
	if (l->kind != KT_STORE_REDIS || !(l->answered || l->adopted) || l->v.size < 1)
		return false;
	out->lease_until = l->v.lease_until_ns;
	out->fallback_until = l->v.fallback_until_ns;
	out->fallback_urate = to_urate(l->v.fallback_member);
	out->reserved_urate = to_urate(l->v.reserved);
	out->size = (uint32_t)l->v.size;
	out->agreed = l->v.phase == KT_POOL_AGREED;
	return true;
}

bool kt_pool_take_resume(struct kt_pool *p, int i, double *rate)
{
	if (!p || i < 0 || i >= p->n || p->l[i].res != RES_FOUND)
		return false;
	*rate = p->l[i].res_rate;
	p->l[i].res = RES_DONE;
	return true;
}
