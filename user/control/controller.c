/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The controller: everything a limit's policy does over time, per limit and
 * per tick. Read the counters (per-slot baselines), advance the ramp, let
 * the pool agree (a store round trip when a heartbeat is due), decide the
 * bucket policy (kt_pool_bucket_policy: share, burst, lease, fallback),
 * write the rate and then the lease into the kernel, and pin what a
 * restarted daemon continues from (kt_leases). It sees only struct kt_ctl,
 * the part of the daemon it reads and writes; the event loop, control
 * socket and lifecycle are daemon.c's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <bpf/bpf.h>
#include "kernel/bucket.h"
#include "kernel/bpf_loader.h"
#include "control/controller.h"
#include "control/inflight_report.h"
#include "base/log.h"
#include "control/strict.h"


/* Members one bucket serves: pod scope one, node scope all local ones. */
static int bucket_served(const struct kt_limit_rt *l)
{
	return l->cfg->scope == KT_SCOPE_NODE ? (l->n_members > 0 ? l->n_members : 1) : 1;
}

/* The limit's policy (share, burst, lease, fallback) from the pool: one
 * owner, kt_pool_bucket_policy. */
static bool by_demand(const struct kt_limit_rt *l)
{
	/* an in-flight limit's demand divides slots between nodes in the
	 * store; each member's share is then as in equal */
	return l->cfg->share == KT_SHARE_DEMAND && l->cfg->unit != KT_UNIT_CONCURRENT;
}

/* ... unless it has classes: the node's slots are split between its
 * members by class (kt_pool_members_policy), each bucket its own */
static bool slots_by_class(const struct kt_limit_rt *l)
{
	return l->cfg->share == KT_SHARE_DEMAND && l->cfg->unit == KT_UNIT_CONCURRENT &&
	       l->cfg->class_by != KT_WEIGHT_NONE && l->cfg->scope == KT_SCOPE_POD;
}

/* The members bucket k of limit l serves: pod scope its own, node scope all. */
static const char *const *slot_ids(const struct kt_limit_rt *l, int k, int *n)
{
	if (l->cfg->scope == KT_SCOPE_NODE || l->n_members < 1) {
		*n = l->n_members;
		return l->member_ids;
	}
	*n = 1;
	return &l->member_ids[k];
}

/* share: demand: the ids of a bucket whose member was not answered for
 * yet (an id with no grant: the floor) */
static const char *const unanswered_ids[] = { "" };

static void slot_policy(struct kt_pool *pool, int i, const struct kt_limit_rt *l,
			const struct kt_limit_state *s, int k, struct kt_bucket_policy *pol)
{
	int n;
	const char *const *ids = slot_ids(l, k, &n);

	if (n < 1 || !ids) { /* no member yet: what a new one gets from birth */
		ids = unanswered_ids;
		n = 1;
	}
	kt_pool_members_policy(pool, i, s->pool_rate, ids, n, pol);
	if (l->cfg->unit == KT_UNIT_CONCURRENT)
		kt_slots_policy(pol, true); /* the rate above is a slot count */
}

/* A member joining on this node raises the node's share at once, while the
 * other nodes shrink theirs only after their next heartbeats. For three
 * heartbeats after a join the node bucket keeps the share it had (or less),
 * so the joiner is paid out of this node's share, never on top of the pool.
 * Without a shared store no other node counts: nothing to hold. */
static void hold_node_share(const struct kt_limit_rt *l, struct kt_limit_state *s,
			    struct kt_bucket_policy *node, uint64_t now)
{
	if (l->cfg->store.kind == KT_STORE_REDIS && s->node_members_seen > 0 &&
	    l->n_members > s->node_members_seen) {
		if ((int64_t)(now - s->node_hold_until) >= 0) {
			s->node_hold_rate = s->node_rate_decided;
			s->node_hold_burst = s->node_burst_decided;
		}
		s->node_hold_until = now + 3 * l->cfg->store.heartbeat_ns;
	}
	s->node_members_seen = l->n_members;
	if ((int64_t)(now - s->node_hold_until) < 0) {
		if (node->rate > s->node_hold_rate) {
			node->fallback_rate = node->rate > 0 ? node->fallback_rate * s->node_hold_rate / node->rate
							     : node->fallback_rate;
			node->rate = s->node_hold_rate;
		}
		if (node->burst > s->node_hold_burst && s->node_hold_burst >= 1)
			node->burst = s->node_hold_burst;
	}
	s->node_rate_decided = node->rate;
	s->node_burst_decided = node->burst;
}

/* share: demand: each bucket its own grant, into s->slot_pol. Out of
 * memory, every bucket gets s->pol (the floor) until a later decide. */
static void decide_slots(struct kt_pool *pool, int i, const struct kt_limit_rt *l,
			 struct kt_limit_state *s)
{
	uint32_t slots[KT_MAX_MEMBERS_PER_LIMIT];
	int n = kt_limit_slots(l, slots, KT_MAX_MEMBERS_PER_LIMIT);
	double rate_sum = 0, burst_sum = 0;

	if (n < 1)
		return;
	if (n > s->slot_pol_cap) {
		struct kt_bucket_policy *grown = realloc(s->slot_pol, (size_t)n * sizeof(*grown));

		if (!grown)
			return;
		s->slot_pol = grown;
		s->slot_pol_cap = n;
	}
	for (int k = 0; k < n; k++) {
		slot_policy(pool, i, l, s, k, &s->slot_pol[k]);
		rate_sum += s->slot_pol[k].rate;
		burst_sum += s->slot_pol[k].burst;
	}
	s->n_slot_pol = n;
	/* the mean, so bucket_rate x buckets is this node's total, as with
	 * equal shares (utilization and status read it so); status shows
	 * each member's own rate */
	s->bucket_rate = rate_sum / n;
	s->bucket_burst = burst_sum / n;
}

/* Bucket k's policy as decided: its own by demand, else the limit's. */
static const struct kt_bucket_policy *decided(const struct kt_limit_state *s, int k)
{
	return k < s->n_slot_pol ? &s->slot_pol[k] : &s->pol;
}

void kt_ctl_decide(struct kt_pool *pool, int i, const struct kt_limit_rt *l,
		   struct kt_limit_state *s, uint64_t now)
{
	const struct kt_pool_view *v = kt_pool_view(pool, i);
	const struct kt_strict_cfg *st = &l->cfg->rl.strict;

	s->pool_size = v->size;
	if (st->on) {
		/* the strict controller owns these buckets: apply only makes
		 * them strict and closed */
		s->pol = (struct kt_bucket_policy){
			.rate = 1e9 / (double)st->every_ns,
			.burst = 1,
			.strict_hold_ns = kt_strict_hold_ns(st->every_ns, st->expire_ns),
		};
	} else if (by_demand(l)) {
		/* a bucket born now runs at the floor; kt_ctl_write_rates
		 * gives each member its own grant */
		kt_pool_members_policy(pool, i, s->pool_rate, unanswered_ids, 1, &s->pol);
	} else {
		kt_pool_bucket_policy(pool, i, s->pool_rate, bucket_served(l), &s->pol);
	}
	if (!st->on && l->cfg->scope == KT_SCOPE_POD) {
		/* the node bucket the members are chained to: all of them
		 * together, with the node's burst (never one token each) */
		struct kt_bucket_policy node;

		if (by_demand(l))
			kt_pool_members_policy(pool, i, s->pool_rate, l->member_ids, l->n_members,
					       &node);
		else
			kt_pool_bucket_policy(pool, i, s->pool_rate, l->n_members, &node);
		hold_node_share(l, s, &node, now);
		s->pol.node_rate = node.rate;
		s->pol.node_burst = node.burst;
		s->pol.node_fallback_rate = node.fallback_rate;
		s->pol.node_fallback_burst = node.fallback_burst;
	}
	/* in-flight limits: the rates above are slot counts */
	if (l->cfg->unit == KT_UNIT_CONCURRENT)
		kt_slots_policy(&s->pol, l->cfg->scope == KT_SCOPE_POD);
	s->bucket_rate = s->pol.rate;
	s->bucket_burst = s->pol.burst;
	s->fallback_rate = s->pol.fallback_rate;
	kt_node_policy(&s->pol, l->n_members, &s->node_pol);
	s->n_slot_pol = 0;
	if (!st->on && (by_demand(l) || slots_by_class(l)))
		decide_slots(pool, i, l, s);
}

void kt_ctl_write_rates(struct kt_ctl *c, int i)
{
	struct kt_limit_rt *l = &c->plan->limits[i];
	const struct kt_limit_state *s = &c->ls[i];
	uint32_t slots[KT_MAX_MEMBERS_PER_LIMIT];
	int n = kt_limit_slots(l, slots, KT_MAX_MEMBERS_PER_LIMIT);

	l->bucket_rate = s->bucket_rate;
	l->bucket_burst = s->bucket_burst;
	if (l->cfg->rl.strict.on)
		return; /* strict.c arms these buckets; a rate would open them */
	/* by demand each member its own grant (idempotent when unchanged) */
	for (int k = 0; k < n; k++)
		kt_bucket_set_rate(c->bpf, slots[k], decided(s, k)->rate, decided(s, k)->burst);
	if (l->has_pool)
		kt_bucket_set_rate(c->bpf, l->pool_slot, s->node_pol.rate, s->node_pol.burst);
}

/* The lease follows the last store answer, never the tick: a daemon that
 * cannot renew it (store down, connection frozen, daemon dead) lets it run
 * out in the kernel exactly when the other nodes stop counting it. */
void kt_ctl_write_lease(struct kt_ctl *c, int i)
{
	struct kt_limit_rt *l = &c->plan->limits[i];
	const struct kt_limit_state *s = &c->ls[i];
	uint32_t slots[KT_MAX_MEMBERS_PER_LIMIT];
	int n = kt_limit_slots(l, slots, KT_MAX_MEMBERS_PER_LIMIT);

	if (l->cfg->rl.strict.on)
		return; /* permits, not leases */
	/* by demand the fallback burst follows each member's own rate */
	for (int k = 0; k < n; k++)
		kt_bucket_set_lease(c->bpf, slots[k], decided(s, k));
	if (l->has_pool)
		kt_bucket_set_lease(c->bpf, l->pool_slot, &s->node_pol);
}

/* Pins what a restarted daemon continues from: the pool's lease and size,
 * and the ramp level (resumedRampUp without a store). */
void kt_ctl_pin(struct kt_ctl *c, int i, uint64_t now)
{
	const struct kt_limit_rt *l = &c->plan->limits[i];
	struct kt_limit_state *s = &c->ls[i];
	struct kt_lease_key key = { 0 };
	struct kt_lease val;

	kt_pool_lease(c->pool, i, &val);
	val.ramp_urate = s->pool_rate > 0 && isfinite(s->pool_rate) ? (uint64_t)(s->pool_rate * 1e6) : 0;
	val.ramp_saved_ns = now;
	snprintf(key.name, sizeof(key.name), "%s", l->cfg->name);
	if (bpf_map_update_elem(c->bpf->leases_fd, &key, &val, BPF_ANY) == 0) {
		s->pinned_lease = val.lease_until;
		s->pinned_ns = now;
	}
}

/* A restart continues the lease the previous daemon pinned, and, with
 * resumedRampUp, its ramp level if saved within ttl. */
void kt_ctl_start_limit(struct kt_ctl *c, int i, uint64_t now)
{
	const struct kt_limit_rt *l = &c->plan->limits[i];
	struct kt_limit_state *s = &c->ls[i];
	struct kt_lease_key key = { 0 };
	struct kt_lease val;
	double level;

	kt_ctl_init_state(s, l, now);
	snprintf(key.name, sizeof(key.name), "%s", l->cfg->name);
	if (bpf_map_lookup_elem(c->bpf->leases_fd, &key, &val) < 0)
		return;
	/* the lease is checked against the buckets the same daemon wrote */
	kt_pool_adopt(c->pool, i, &val,
		      kt_bpf_limit_member_rate(c->bpf, l->cfg->name, l->n_members), now);
	if (l->cfg->unit == KT_UNIT_CONCURRENT)
		kt_pool_adopt_slots(c->pool, i, kt_bpf_limit_slots(c->bpf, l->cfg->name, now));
	level = (double)val.ramp_urate / 1e6;
	if (l->cfg->rl.resumed_ramp_up && val.ramp_saved_ns && val.ramp_saved_ns <= now &&
	    now - val.ramp_saved_ns <= l->cfg->rl.ttl_ns && level > s->pool_rate) {
		kt_ramp_init(&s->ramp, &l->cfg->rl, now, level);
		s->pool_rate = kt_ramp_rate(&s->ramp);
		kt_info("limit %s: resuming ramp at %.3f/s (pinned %.1f s ago)", l->cfg->name,
			s->pool_rate, (double)(now - val.ramp_saved_ns) / 1e9);
	}
}

/* Leases of limits the plan no longer has. */
void kt_ctl_drop_stale_pins(struct kt_ctl *c)
{
	struct kt_lease_key key, next, *gone = calloc(KT_MAX_LIMITS, sizeof(*gone));
	int n = 0, i;

	if (!gone)
		return;
	if (bpf_map_get_next_key(c->bpf->leases_fd, NULL, &next) == 0) {
		do {
			key = next;
			key.name[KT_NAME_LEN - 1] = 0;
			for (i = 0; i < c->plan->n_limits; i++)
				if (!strcmp(c->plan->limits[i].cfg->name, key.name))
					break;
			if (i == c->plan->n_limits && n < KT_MAX_LIMITS)
				gone[n++] = next;
			key = next;
		} while (bpf_map_get_next_key(c->bpf->leases_fd, &key, &next) == 0);
	}
	for (i = 0; i < n; i++)
		bpf_map_delete_elem(c->bpf->leases_fd, &gone[i]);
	free(gone);
}

void kt_ctl_free_states(struct kt_limit_state *ls, int n)
{
	for (int i = 0; ls && i < n; i++) {
		free(ls[i].slot_pol);
		ls[i].slot_pol = NULL;
		ls[i].n_slot_pol = ls[i].slot_pol_cap = 0;
	}
}

void kt_ctl_init_state(struct kt_limit_state *s, const struct kt_limit_rt *l, uint64_t now)
{
	memset(s, 0, sizeof(*s));
	kt_ramp_init(&s->ramp, &l->cfg->rl, now, 0);
	s->pool_rate = kt_ramp_rate(&s->ramp);
}

#define KT_DEMAND_HEADROOM 1.1

static double slot_demand(const struct kt_ctl *c, uint32_t slot, uint64_t now)
{
	const struct kt_slot_base *b = &c->slot_base[slot];
	uint64_t calls = b->last.admitted + b->last.throttled;
	double running = 0;

	/* the running epoch, once it is a tick old, and the last ~100 ms: a
	 * member that turns busy is reported at its next heartbeat at its new
	 * rate, not an epoch later nor diluted by the idle part of the epoch;
	 * the last whole epoch keeps a bursty member from shrinking between
	 * its bursts */
	if (now > b->epoch_ns && now - b->epoch_ns >= c->tick_ns && calls >= b->epoch_calls)
		running = (double)(calls - b->epoch_calls) * 1e9 / (double)(now - b->epoch_ns);
	running = running > b->demand ? running : b->demand;
	running = running > b->recent ? running : b->recent;
	/* headroom: a member that sends steadily at its grant must not be
	 * throttled by its own jitter (a grant is what it reported, no more) */
	return running > 0 ? running * KT_DEMAND_HEADROOM + 1 : 0;
}

bool kt_ctl_member_dormant(const struct kt_ctl *c, const struct kt_limit_rt *l, int j)
{
	const struct kt_member_rt *m = &l->members[j];
	const struct kt_slot_base *b;

	if (l->cfg->n_callers < 1 || m->entry != KT_ENTRY_COOP || m->slot >= KT_MAX_SLOTS)
		return false;
	b = &c->slot_base[m->slot];
	return b->last.admitted + b->last.throttled == 0;
}

void kt_ctl_fill_demand(struct kt_ctl *c, struct kt_pool_local *local, uint64_t now)
{
	int i, j, total = 0, off = 0;

	for (i = 0; i < c->plan->n_limits; i++)
		if (c->plan->limits[i].cfg->share == KT_SHARE_DEMAND)
			total += c->plan->limits[i].n_members;
	if (total > c->demand_cap) {
		double *nb = realloc(c->demand_buf, (size_t)total * sizeof(*nb));

		if (!nb)
			return; /* reported as 0 this heartbeat: the floor */
		c->demand_buf = nb;
		c->demand_cap = total;
	}
	for (i = 0; i < c->plan->n_limits; i++) {
		const struct kt_limit_rt *l = &c->plan->limits[i];
		uint32_t slots[KT_MAX_MEMBERS_PER_LIMIT];
		int nb = kt_limit_slots(l, slots, KT_MAX_MEMBERS_PER_LIMIT);

		if (l->cfg->share != KT_SHARE_DEMAND || l->n_members < 1 || nb < 1)
			continue;
		for (j = 0; j < l->n_members; j++) {
			/* node scope: one bucket for all, its demand split evenly */
			c->demand_buf[off + j] =
				l->cfg->scope == KT_SCOPE_NODE
					? slot_demand(c, slots[0], now) / l->n_members
					: (j < nb ? slot_demand(c, slots[j], now) : 0);
			if (kt_ctl_member_dormant(c, l, j))
				c->demand_buf[off + j] = KT_POOL_DEMAND_DORMANT;
		}
		local[i].member_demand = &c->demand_buf[off];
		off += l->n_members;
	}
}

double kt_ctl_member_weight(const struct kt_plan *plan, const struct kt_pool *pool, int i, int j)
{
	const struct kt_member_rt *m = &plan->limits[i].members[j];

	if (m->entry == KT_ENTRY_CHILD && m->via >= 0 && m->via < plan->n_limits &&
	    plan->limits[m->via].cfg->weight > 0) {
		const struct kt_pool_view *v = kt_pool_view(pool, m->via);

		return plan->limits[m->via].cfg->weight / (v && v->size > 0 ? v->size : 1);
	}
	return m->weight > 0 ? m->weight : 1;
}

void kt_ctl_fill_child_weights(struct kt_ctl *c, struct kt_pool_local *local)
{
	int total = 0, off = 0;

	for (int i = 0; i < c->plan->n_limits; i++)
		if (c->plan->limits[i].cfg->child_weights)
			total += c->plan->limits[i].n_members;
	if (!total)
		return;
	if (total > c->weight_cap) {
		double *nb = realloc(c->weight_buf, (size_t)total * sizeof(*nb));

		if (!nb)
			return; /* the plan's own weights this heartbeat */
		c->weight_buf = nb;
		c->weight_cap = total;
	}
	for (int i = 0; i < c->plan->n_limits; i++) {
		const struct kt_limit_rt *l = &c->plan->limits[i];

		if (!l->cfg->child_weights)
			continue;
		for (int j = 0; j < l->n_members; j++)
			c->weight_buf[off + j] = kt_ctl_member_weight(c->plan, c->pool, i, j);
		local[i].member_weight = &c->weight_buf[off];
		off += l->n_members;
	}
}

/* An in-flight limit with classes: each class's demand on this node, what
 * its members hold open plus what their slots refused in the last whole
 * second (at `mark` the second turns). */
static void fill_slot_classes(struct kt_ctl *c, int i, struct kt_pool_local *lo, bool mark, uint64_t now)
{
	const struct kt_limit_rt *l = &c->plan->limits[i];
	struct kt_limit_state *s = &c->ls[i];
	uint64_t open[KT_STORE_MAX_CLASSES] = { 0 }, thr[KT_STORE_MAX_CLASSES] = { 0 };
	int n = l->cfg->n_classes;

	for (int j = 0; j < l->n_members; j++) {
		int k = l->member_classes[j];
		struct kt_inflight_view v;

		if (k < 0 || k >= n || l->members[j].slot >= KT_MAX_SLOTS)
			continue;
		thr[k] += c->slot_base[l->members[j].slot].last.throttled;
		kt_inflight_member(c->bpf, l, j, now, &v);
		open[k] += v.open;
	}
	for (int k = 0; k < n; k++) {
		if (mark) {
			/* a member gone takes its counts along: never below 0 */
			s->cls_refused_last[k] = s->slots_refused_ns && thr[k] >= s->cls_refused_at[k]
							 ? thr[k] - s->cls_refused_at[k]
							 : 0;
			s->cls_refused_at[k] = thr[k];
		}
		lo->slots_class_demand[k] = (int64_t)(open[k] + s->cls_refused_last[k]);
	}
	lo->n_slot_classes = n;
}

void kt_ctl_fill_slots(struct kt_ctl *c, struct kt_pool_local *local, uint64_t now)
{
	for (int i = 0; i < c->plan->n_limits; i++) {
		const struct kt_limit_rt *l = &c->plan->limits[i];
		struct kt_limit_state *s = &c->ls[i];

		if (l->cfg->unit != KT_UNIT_CONCURRENT)
			continue; /* -1s from kt_ctl_fill_pool_local */
		/* what this tick read from the kernel (kt_ctl_tick) */
		local[i].slots_in_force = (int64_t)s->inflight_slots;
		local[i].slots_held = (int64_t)(s->inflight_open > s->inflight_slots ? s->inflight_open
										   : s->inflight_slots);
		/* demand: what is open plus what was refused in the last second */
		bool mark = !s->slots_refused_ns || now - s->slots_refused_ns >= 1000000000ULL;

		if (l->cfg->share == KT_SHARE_DEMAND && l->member_classes && l->cfg->n_classes >= 2 &&
		    l->cfg->n_classes <= KT_STORE_MAX_CLASSES)
			fill_slot_classes(c, i, &local[i], mark, now);
		if (mark) {
			s->slots_refused_last = s->slots_refused_ns ? s->total_throttled - s->slots_refused_at : 0;
			s->slots_refused_at = s->total_throttled;
			s->slots_refused_ns = now;
		}
		local[i].slots_demand = (int64_t)(s->inflight_open + s->slots_refused_last);
	}
}

void kt_ctl_fill_pool_local(const struct kt_plan *plan, const struct kt_limit_state *ls,
			    struct kt_pool_local *local)
{
	for (int i = 0; i < plan->n_limits; i++)
		local[i] = (struct kt_pool_local){
			.cfg = plan->limits[i].cfg,
			.member_ids = plan->limits[i].member_ids,
			.member_weight = plan->limits[i].member_weights,
			.member_class = plan->limits[i].member_classes,
			.n_members = plan->limits[i].n_members,
			.pool_rate = ls[i].pool_rate,
			.slots_held = -1,
			.slots_in_force = -1,
			.slots_demand = -1,
		};
}

/* ---- controller ---- */

/* Per-slot baselines: the controller's totals only ever grow by what each
 * slot admitted since it was last read, so a member that leaves (its slot's
 * counts vanish from the sum) or a slot reused and zeroed never makes the
 * totals go backwards, and utilization stays true under churn. A slot seen
 * for the first time, or now owned by another limit, starts from its
 * current counts. */
static uint64_t grown(uint64_t cur, uint64_t last)
{
	return cur >= last ? cur - last : cur; /* below: zeroed for a new member */
}

static void account_slot(struct kt_ctl *ctl, struct kt_limit_state *s, uint32_t limit_id,
			 uint32_t slot, const struct kt_counters *c,
			 const struct kt_shadow_counters *sh, uint64_t now)
{
	struct kt_slot_base *b = &ctl->slot_base[slot];
	uint64_t calls = c->admitted + c->throttled;

	if (b->owner != limit_id + 1) {
		b->owner = limit_id + 1;
		b->last = *c;
		b->last_shadow = *sh;
		b->epoch_ns = b->recent_ns = now;
		b->epoch_calls = b->recent_calls = calls;
		b->demand = b->recent = 0;
		return;
	}
	if (now - b->recent_ns >= KT_DEMAND_RECENT_NS) {
		b->recent = (double)(calls >= b->recent_calls ? calls - b->recent_calls : calls) * 1e9 /
			    (double)(now - b->recent_ns);
		b->recent_ns = now;
		b->recent_calls = calls;
	}
	if (now - b->epoch_ns >= ctl->epoch_ns) {
		b->demand = (double)(calls >= b->epoch_calls ? calls - b->epoch_calls : calls) * 1e9 /
			    (double)(now - b->epoch_ns);
		b->epoch_ns = now;
		b->epoch_calls = calls;
	}
	s->total_admitted += grown(c->admitted, b->last.admitted);
	s->total_throttled += grown(c->throttled, b->last.throttled);
	s->total_admitted_bytes += grown(c->admitted_bytes, b->last.admitted_bytes);
	s->total_would_refuse += grown(sh->refused, b->last_shadow.refused);
	s->total_would_refuse_bytes += grown(sh->refused_bytes, b->last_shadow.refused_bytes);
	b->last = *c;
	b->last_shadow = *sh;
}

/* a - b, or 0 (counts read at different moments) */
static uint64_t less(uint64_t a, uint64_t b)
{
	return a > b ? a - b : 0;
}

void kt_ctl_read_counters(struct kt_ctl *ctl, int i, uint64_t now)
{
	struct kt_limit_rt *l = &ctl->plan->limits[i];
	struct kt_limit_state *s = &ctl->ls[i];
	uint32_t slots[KT_MAX_MEMBERS_PER_LIMIT];
	int n = kt_limit_slots(l, slots, KT_MAX_MEMBERS_PER_LIMIT);
	struct kt_counters c;
	struct kt_shadow_counters sh = { 0 };

	/* once shadow, always read: a flip back to enforcing still counts
	 * what the last tick in shadow let pass */
	s->shadow_watch |= l->cfg->shadow;
	for (int k = 0; k < n; k++) {
		if (kt_bpf_read_counters(ctl->bpf, slots[k], &c) ||
		    (s->shadow_watch && kt_bpf_read_shadow(ctl->bpf, slots[k], &sh)))
			continue;
		account_slot(ctl, s, l->id, slots[k], &c, &sh, now);
	}
}

void kt_ctl_peek_counters(const struct kt_ctl *ctl, int i, struct kt_limit_counts *out)
{
	const struct kt_limit_rt *l = &ctl->plan->limits[i];
	bool shadow = ctl->ls[i].shadow_watch || l->cfg->shadow;
	uint32_t slots[KT_MAX_MEMBERS_PER_LIMIT];
	int n = kt_limit_slots(l, slots, KT_MAX_MEMBERS_PER_LIMIT);
	struct kt_counters c;
	struct kt_shadow_counters sh = { 0 };

	memset(out, 0, sizeof(*out));
	for (int k = 0; k < n; k++) {
		if (kt_bpf_read_counters(ctl->bpf, slots[k], &c) ||
		    (shadow && kt_bpf_read_shadow(ctl->bpf, slots[k], &sh)))
			continue;
		out->admitted += c.admitted;
		out->throttled += c.throttled;
		out->admitted_bytes += c.admitted_bytes;
		out->throttled_bytes += c.throttled_bytes;
		out->would_refuse += sh.refused;
		out->would_refuse_bytes += sh.refused_bytes;
	}
}

static const struct kt_sample *sample_at(const struct kt_limit_state *s, int back)
{
	int idx = (s->hist_head - 1 - back + s->hist_cap) % s->hist_cap;

	return &s->hist[idx];
}

#define KT_HIST_MARGIN 8 /* samples beyond one epoch of ticks */

int kt_ctl_hist_cap(uint64_t epoch_ns, uint64_t tick_ns)
{
	uint64_t n = tick_ns ? epoch_ns / tick_ns + KT_HIST_MARGIN : KT_HISTORY;

	return n < KT_HISTORY ? (int)n : KT_HISTORY;
}

void kt_ctl_hist_rehome(struct kt_limit_state *s, struct kt_sample *ring, int cap)
{
	int keep = s->hist_cap ? s->hist_len : 0;

	if (keep > cap)
		keep = cap;

	/* oldest first: ring[0] is the oldest kept, ring[keep - 1] the newest */
	for (int k = 0; k < keep; k++)
		ring[keep - 1 - k] = *sample_at(s, k);
	s->hist = ring;
	s->hist_cap = cap;
	s->hist_len = keep;
	s->hist_head = keep % cap;
}

/* Kernel state verified, not believed: each of limit i's buckets (members,
 * node and join buckets) holds the rate, burst and lease the daemon wrote,
 * or is put back (a hand edit, a stray write). Logged at most every
 * KT_FIX_LOG_NS per limit; every fix counted. Strict buckets are the
 * strict controller's, armed and closed by permits: not checked here. */
#define KT_FIX_LOG_NS (10ULL * 1000000000ULL)
static void verify_buckets(struct kt_ctl *c, int i, uint64_t now)
{
	const struct kt_limit_rt *l = &c->plan->limits[i];
	struct kt_limit_state *s = &c->ls[i];
	uint32_t slots[KT_MAX_MEMBERS_PER_LIMIT + 2];
	const struct kt_bucket_written *w;
	struct kt_bucket found;
	int n;

	if (l->cfg->rl.strict.on)
		return;
	n = kt_limit_slots(l, slots, KT_MAX_MEMBERS_PER_LIMIT);
	if (l->has_pool)
		slots[n++] = l->pool_slot;
	if (l->has_join)
		slots[n++] = l->join_slot;
	for (int k = 0; k < n; k++) {
		const char *kind = kt_slot_is_coop(slots[k]) ? "kt_coop entry" : "kt_buckets slot";
		uint32_t flags, idx = kt_slot_is_coop(slots[k]) ? slots[k] - KT_COOP_SLOT0 : slots[k];
		int what;

		if (kt_bucket_verify_flags(c->bpf, slots[k], l->cfg->shadow, &flags) &&
		    ++s->kernel_fixes &&
		    (!s->kernel_fix_logged_ns || now - s->kernel_fix_logged_ns >= KT_FIX_LOG_NS)) {
			s->kernel_fix_logged_ns = now;
			kt_warn("limit %s: kt_buckets slot %u held flags %#x (%s): written back to in use%s",
				l->cfg->name, slots[k], flags,
				!(flags & KT_BUCKET_IN_USE) ? "not in use" : "shadow",
				l->cfg->shadow ? "" : ", enforcing");
		}
		if (!(what = kt_bucket_verify(c->bpf, slots[k], &found)))
			continue;
		s->kernel_fixes++;
		if (s->kernel_fix_logged_ns && now - s->kernel_fix_logged_ns < KT_FIX_LOG_NS)
			continue;
		s->kernel_fix_logged_ns = now;
		w = &c->bpf->written[slots[k]];
		if (what & KT_BUCKET_FIX_RATE)
			kt_warn("limit %s: %s %u held interval_fp %llu burst %llu, not the %llu and %llu "
				"the daemon wrote: written back (%llu fixes so far)",
				l->cfg->name, kind, idx, (unsigned long long)found.interval_fp,
				(unsigned long long)found.burst, (unsigned long long)w->interval_fp,
				(unsigned long long)w->burst, (unsigned long long)s->kernel_fixes);
		if (what & KT_BUCKET_FIX_LEASE)
			kt_warn("limit %s: %s %u held the lease valid_until %llu fallback_fp %llu "
				"fallback_burst %llu fallback_until %llu, not the %llu, %llu, %llu and %llu "
				"the daemon wrote: written back (%llu fixes so far)",
				l->cfg->name, kind, idx, (unsigned long long)found.valid_until,
				(unsigned long long)found.fallback_fp, (unsigned long long)found.fallback_burst,
				(unsigned long long)found.fallback_until, (unsigned long long)w->valid_until,
				(unsigned long long)w->fallback_fp, (unsigned long long)w->fallback_burst,
				(unsigned long long)w->fallback_until, (unsigned long long)s->kernel_fixes);
	}
}

void kt_ctl_tick(struct kt_ctl *c, uint64_t now)
{
	for (int i = 0; i < c->plan->n_limits; i++) {
		struct kt_limit_rt *l = &c->plan->limits[i];
		struct kt_limit_state *s = &c->ls[i];
		struct kt_sample cur = { .ts_ns = now };
		const struct kt_sample *prev = NULL, *old;
		uint32_t slots[KT_MAX_MEMBERS_PER_LIMIT];
		int nb = kt_limit_slots(l, slots, KT_MAX_MEMBERS_PER_LIMIT);
		struct kt_epoch_obs obs;
		int back;

		kt_ctl_read_counters(c, i, now);
		verify_buckets(c, i, now);
		/* a shadow limit's ramp and agreement see what enforcing would
		 * have done: what it let pass as refused, not as used */
		cur.used = l->cfg->unit == KT_UNIT_BYTE
				   ? less(s->total_admitted_bytes, s->total_would_refuse_bytes)
				   : less(s->total_admitted, s->total_would_refuse);
		cur.calls = s->total_admitted + s->total_throttled;
		cur.refused = s->total_throttled + s->total_would_refuse;
		if (l->cfg->unit == KT_UNIT_CONCURRENT) {
			struct kt_inflight_view v;

			kt_inflight_node(c->bpf, l, now, &v);
			s->inflight_open = v.open;
			s->inflight_slots = v.slots;
		}
		if (s->hist_len > 0) {
			prev = sample_at(s, 0);
			cur.granted = prev->granted +
				      s->bucket_rate * nb * (double)(now - prev->ts_ns) / 1e9;
			if (l->cfg->unit == KT_UNIT_CONCURRENT) {
				double dt = (double)(now - prev->ts_ns) / 1e9;

				cur.slots_used = prev->slots_used + (double)s->inflight_open * dt;
				cur.slots_granted = prev->slots_granted + (double)s->inflight_slots * dt;
			}
		}
		if (!s->hist_cap)
			continue; /* no ring (cannot happen once started) */
		s->hist[s->hist_head] = cur;
		s->hist_head = (s->hist_head + 1) % s->hist_cap;
		if (s->hist_len < s->hist_cap)
			s->hist_len++;
		if (!prev)
			continue;

		/* trailing epoch: the oldest sample no older than one epoch */
		for (back = 1; back < s->hist_len - 1; back++)
			if (now - sample_at(s, back + 1)->ts_ns > c->epoch_ns)
				break;
		old = sample_at(s, back < s->hist_len ? back : s->hist_len - 1);
		double win = (double)(now - old->ts_ns) / 1e9;
		obs = (struct kt_epoch_obs){
			.now_ns = now,
			.granted_tokens = cur.granted - old->granted,
			.used_tokens = (double)(cur.used - old->used),
			/* the ramp advances only in ticks that saw traffic */
			.calls = cur.calls - prev->calls,
			.refused = cur.refused - prev->refused,
		};
		if (win > 0)
			s->epoch_used_rate = obs.used_tokens / win;
		/* in-flight: the ramp's used is the slots held, not the
		 * connects made */
		if (l->cfg->unit == KT_UNIT_CONCURRENT) {
			obs.granted_tokens = cur.slots_granted - old->slots_granted;
			obs.used_tokens = cur.slots_used - old->slots_used;
		}
		s->pool_rate = kt_ramp_epoch(&s->ramp, &obs);
	}

	/* agreement: answers that came back are applied, and a heartbeat is
	 * handed to the store's worker when due (never waited for here) */
	kt_ctl_fill_pool_local(c->plan, c->ls, c->pool_local);
	kt_ctl_fill_demand(c, c->pool_local, now);
	kt_ctl_fill_child_weights(c, c->pool_local);
	kt_ctl_fill_slots(c, c->pool_local, now);
	kt_pool_tick(c->pool, now, c->pool_local, c->plan->n_limits);
	kt_ctl_apply_pool(c, now);
}

/* Policy from the pool's current view into the kernel: after every tick, and
 * whenever a store answer arrives between ticks. */
void kt_ctl_apply_pool(struct kt_ctl *c, uint64_t now)
{
	for (int i = 0; i < c->plan->n_limits; i++) {
		struct kt_limit_rt *l = &c->plan->limits[i];
		struct kt_limit_state *s = &c->ls[i];
		double resume, before = s->bucket_rate, burst_before = s->bucket_burst;

		if (l->cfg->rl.strict.on)
			continue; /* permits, not shares: strict.c writes these buckets */

		/* resumedRampUp: the level saved before a restart, once */
		if (kt_pool_take_resume(c->pool, i, &resume) && resume > s->pool_rate) {
			kt_ramp_init(&s->ramp, &l->cfg->rl, now, resume);
			s->pool_rate = kt_ramp_rate(&s->ramp);
			kt_info("limit %s: resuming ramp at %.3f/s", l->cfg->name, s->pool_rate);
		}
		uint64_t lease_before = s->pol.valid_until, fb_before = s->pol.fallback_until;
		double fbr_before = s->pol.fallback_rate, fbb_before = s->pol.fallback_burst;
		/* the node bucket's own: an in-flight limit's node slots may move
		 * while each member's (rounded up) does not */
		double node_before = s->pol.node_burst, node_fbb_before = s->pol.node_fallback_burst;

		kt_ctl_decide(c->pool, i, l, s, now);
		/* rate before lease: either order of the two is safe alone, and
		 * this one never pairs a new lease with the old, larger rate;
		 * by demand every member's grant may move: write them all */
		if (by_demand(l) || slots_by_class(l) || fabs(s->bucket_rate - before) > 1e-9 * before ||
		    s->bucket_burst != burst_before || s->pol.node_burst != node_before)
			kt_ctl_write_rates(c, i);
		if (by_demand(l) || s->pol.valid_until != lease_before ||
		    s->pol.fallback_until != fb_before || s->pol.fallback_rate != fbr_before ||
		    (l->cfg->unit == KT_UNIT_CONCURRENT &&
		     (s->pol.fallback_burst != fbb_before ||
		      s->pol.node_fallback_burst != node_fbb_before)))
			kt_ctl_write_lease(c, i);
		if (s->pinned_lease != s->pol.valid_until || now - s->pinned_ns >= c->epoch_ns)
			kt_ctl_pin(c, i, now);
	}
}

void kt_ctl_free(struct kt_ctl *c)
{
	free(c->demand_buf);
	c->demand_buf = NULL;
	c->demand_cap = 0;
	free(c->weight_buf);
	c->weight_buf = NULL;
	c->weight_cap = 0;
}
