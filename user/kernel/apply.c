/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* kt_plan_apply: plan (kernel reads only: ids, slots, what each write
 * replaces), commit (every write saved first), rollback. What the maps
 * should hold is layout.c's, how one bucket is written bucket.c's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <bpf/bpf.h>
#include "kernel/apply.h"
#include "kernel/bucket.h"
#include "kernel/classify.h"
#include "kernel/layout.h"
#include "base/log.h"

int kt_limit_slots(const struct kt_limit_rt *l, uint32_t *slots, int max)
{
	int n = l->n_members < max ? l->n_members : max;

	/* apply gives pod-scope members a slot each, node-scope ones one slot */
	if (n > 0 && l->cfg->scope == KT_SCOPE_NODE)
		n = 1;
	for (int j = 0; j < n; j++)
		slots[j] = l->members[j].slot;
	return n;
}

/* Whether limit l's buckets may be chained at all: pod scope (node scope
 * shares one bucket already), not cooperative (no kernel bucket) and not
 * strict (a permit is one request anyway). */
static bool chainable(const struct kt_limit_rt *l, const struct kt_bucket_policy *pol)
{
	return l->cfg->scope == KT_SCOPE_POD && l->cfg->unit != KT_UNIT_REQUEST &&
	       !pol->strict_hold_ns;
}

/* Whether limit l gets a join bucket: chainable, with pending directories
 * (a node-scope limit charges new cgroups to its one bucket). */
static bool wants_join_bucket(const struct kt_limit_rt *l, const struct kt_bucket_policy *pol)
{
	return chainable(l, pol) && l->n_pending_dirs > 0;
}

/* Whether limit l gets a node bucket its members are chained to:
 * chainable, with two or more members here (one member's bucket is the
 * node's whole share) or a join bucket. */
static bool wants_node_bucket(const struct kt_limit_rt *l, const struct kt_bucket_policy *pol)
{
	return chainable(l, pol) && (l->n_members >= 2 || wants_join_bucket(l, pol));
}

/* slot_state: 0 free, 1 kept from before, 2 newly allocated; kt_buckets
 * slots, then kt_coop entries from KT_COOP_SLOT0 */
struct slot_alloc {
	unsigned char state[KT_MAX_SLOTS];
	int next;
};

/* Picks a free slot; only the plan's state records it until the commit. */
static int alloc_slot(struct slot_alloc *a, const struct kt_bpf *b)
{
	for (; a->next < KT_MAX_BUCKETS; a->next++) {
		int s = a->next;
		/* skip slots referenced by a membership we are about to keep,
		 * and buckets still marked in use by something we do not know */
		if (a->state[s] || (b->buckets[s].flags & KT_BUCKET_IN_USE))
			continue;
		a->state[s] = 2;
		return a->next++;
	}
	return -1;
}

/* One (cgroup, limit) -> slot membership found in kt_members. */
struct old_member {
	uint64_t cgid;
	uint32_t limit_id, slot;
};

static int find_existing(const struct old_member *old, int n, uint64_t cgid, uint32_t limit_id)
{
	for (int i = 0; i < n; i++)
		if (old[i].cgid == cgid && old[i].limit_id == limit_id)
			return (int)old[i].slot;
	return -1;
}

/* A bucket slot the commit wrote, as it was before. */
struct saved_slot {
	uint32_t slot;
	bool fresh;               /* newly allocated: its counters were zeroed too */
	struct kt_bucket old;
	uint64_t tat_after;       /* tat right after our write */
	struct kt_counters *ctrs; /* fresh: the old per-CPU counters */
	bool up_written;          /* kt_up[slot] was written: old_up puts it back */
	uint32_t old_up;
};

/* One apply: the kernel state it read, the plan it computed, and what its
 * commit wrote so far. */
struct apply {
	struct kt_bpf *b;
	struct kt_plan *plan;
	const struct kt_bucket_policy *pol;
	/* before */
	struct kt_limit_info infos[KT_MAX_LIMITS];
	struct kt_member_key *old_keys;
	struct kt_member_val *old_vals;
	int n_old_keys;
	struct old_member *old;
	int n_old;
	struct kt_dest_entry *old_dests;
	int n_old_dests;
	struct kt_port_filter old_ports[KT_HOOK_COUNT];
	__u32 old_idle; /* kt_idle_hooks before */
	/* the plan */
	bool id_used[KT_MAX_LIMITS];
	/* by plan index: a pod-scope limit that keeps buckets, whose new
	 * buckets start with one heartbeat of their share (see commit_slot) */
	bool born_empty[KT_MAX_LIMITS];
	struct slot_alloc sa;
	struct kt_rule_input *rules;
	struct kt_classifier cls;
	struct kt_attach *want;
	struct kt_member_val *want_vals;
	int n_want;
	int *want_old;         /* old_keys index of want[i]; -1: a new key */
	int *dest_old;         /* old_dests index of cls.dests[i]; -1: a new entry */
	bool *old_key_kept, *old_dest_kept;
	struct kt_attach *attach;
	int n_attach;
	struct kt_counters *zero;
	/* the commit */
	int steps;
	uint16_t saved_idx[KT_MAX_SLOTS]; /* 1 + index into saved; 0: untouched */
	struct saved_slot *saved;
	int n_saved, n_fresh;
	struct kt_counters *ctrs;
	int done_limits, done_members, done_dests, done_ports;
	bool done_idle;
};

int kt_apply_fail_step;

static const __u32 zero_key; /* of the one-entry arrays */

/* Counts a commit's kernel writes; the injected one fails as the kernel
 * refusing it would. */
static int commit_step(struct apply *a)
{
	if (++a->steps == kt_apply_fail_step && kt_apply_fail_step > 0) {
		errno = EIO;
		return -EIO;
	}
	return 0;
}

/* Limit ids: names already pinned keep their id. */
struct id_by_name {
	char name[KT_NAME_LEN + 1];
	uint32_t id;
};

static int cmp_id_by_name(const void *x, const void *y)
{
	return strcmp(((const struct id_by_name *)x)->name, ((const struct id_by_name *)y)->name);
}

static int plan_ids(struct apply *a, char *err, size_t errlen)
{
	struct kt_plan *plan = a->plan;
	struct id_by_name *pinned, key;
	uint32_t id, next_free = 0;
	int i, n_pinned = 0, ret;

	if ((ret = kt_bpf_read_limits(a->b, a->infos))) {
		snprintf(err, errlen, "cannot read kt_limits: %s", strerror(-ret));
		return ret;
	}
	/* the pinned names, sorted: a plan of n limits finds its ids in
	 * n log(ids) compares, not n x KT_MAX_LIMITS */
	pinned = calloc(KT_MAX_LIMITS, sizeof(*pinned));
	if (!pinned) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (id = 0; id < KT_MAX_LIMITS; id++) {
		if (!a->infos[id].in_use)
			continue;
		/* a pinned name need not be terminated */
		memcpy(pinned[n_pinned].name, a->infos[id].name, KT_NAME_LEN);
		pinned[n_pinned++].id = id;
	}
	qsort(pinned, (size_t)n_pinned, sizeof(*pinned), cmp_id_by_name);
	for (i = 0; i < plan->n_limits; i++) {
		const struct id_by_name *hit;

		plan->limits[i].id = UINT32_MAX;
		snprintf(key.name, sizeof(key.name), "%s", plan->limits[i].cfg->name);
		hit = bsearch(&key, pinned, (size_t)n_pinned, sizeof(*pinned), cmp_id_by_name);
		if (hit) {
			plan->limits[i].id = hit->id;
			a->id_used[hit->id] = true;
		}
	}
	free(pinned);
	for (i = 0; i < plan->n_limits; i++) {
		if (plan->limits[i].id != UINT32_MAX)
			continue;
		for (id = next_free; id < KT_MAX_LIMITS; id++)
			if (!a->id_used[id] && !a->infos[id].in_use)
				break;
		if (id == KT_MAX_LIMITS) {
			snprintf(err, errlen, "more than %d limits", KT_MAX_LIMITS);
			return -E2BIG;
		}
		plan->limits[i].id = id;
		a->id_used[id] = true;
		next_free = id + 1;
	}
	return 0;
}

/* The buckets above `slot` (KT_BUCKET_UP, kt_up) as old members of their
 * limits for cgroup cgid: an ancestor's bucket for a descendant's member
 * is in no kt_members list, and is kept through this link. */
static void old_levels_up(struct apply *a, uint64_t cgid, uint32_t slot)
{
	for (int lv = 1; lv < KT_MAX_LEVELS && a->b->up_fd >= 0; lv++) {
		const struct kt_bucket *bk = kt_bpf_bucket(a->b, slot);
		uint32_t up;

		if (!(__atomic_load_n(&bk->flags, __ATOMIC_ACQUIRE) & KT_BUCKET_UP) ||
		    bpf_map_lookup_elem(a->b->up_fd, &slot, &up) < 0 || up >= KT_MAX_BUCKETS ||
		    a->n_old == KT_MAX_MEMBERSHIPS * KT_LIMITS_PER_CGROUP)
			return;
		bk = kt_bpf_bucket(a->b, up);
		if (!(__atomic_load_n(&bk->flags, __ATOMIC_ACQUIRE) & KT_BUCKET_IN_USE))
			return;
		a->old[a->n_old++] = (struct old_member){ .cgid = cgid, .limit_id = bk->limit_id,
							  .slot = up };
		slot = up;
	}
}

/* Current kt_members, kt_dests and kt_ports: what the plan keeps and
 * what a rollback puts back. */
static int read_maps(struct apply *a, char *err, size_t errlen)
{
	struct kt_member_key key, next;
	struct kt_dest_key dk, dnext;
	struct kt_bpf *b = a->b;
	int ret;

	if (bpf_map_get_next_key(b->members_fd, NULL, &next) == 0) {
		do {
			struct kt_member_val *val = &a->old_vals[a->n_old_keys];

			key = next;
			if (a->n_old_keys == KT_MAX_MEMBERSHIPS ||
			    bpf_map_lookup_elem(b->members_fd, &key, val) < 0)
				continue;
			a->old_keys[a->n_old_keys++] = key;
			/* own memberships only: an inherited entry is the
			 * ancestor's bucket, kept through the ancestor */
			for (uint32_t e = 0; e < kt_member_own(val) && e < KT_LIMITS_PER_CGROUP; e++)
				if (val->ents[e].slot < KT_MAX_BUCKETS &&
				    a->n_old < KT_MAX_MEMBERSHIPS * KT_LIMITS_PER_CGROUP) {
					a->old[a->n_old++] = (struct old_member){
						.cgid = key.cgroup_id,
						.limit_id = val->ents[e].limit_id,
						.slot = val->ents[e].slot,
					};
					old_levels_up(a, key.cgroup_id, val->ents[e].slot);
				}
		} while (bpf_map_get_next_key(b->members_fd, &key, &next) == 0);
	}
	if (bpf_map_get_next_key(b->dests_fd, NULL, &dnext) == 0) {
		do {
			struct kt_dest_entry *e = &a->old_dests[a->n_old_dests];

			dk = dnext;
			/* an existing key's exact entry is its longest match */
			if (a->n_old_dests == KT_MAX_DESTS ||
			    bpf_map_lookup_elem(b->dests_fd, &dk, &e->val) < 0)
				continue;
			e->key = dk;
			a->n_old_dests++;
		} while (bpf_map_get_next_key(b->dests_fd, &dk, &dnext) == 0);
	}
	for (uint32_t h = 0; h < KT_HOOK_COUNT; h++) {
		if (bpf_map_lookup_elem(b->ports_fd, &h, &a->old_ports[h]) < 0) {
			ret = -errno;
			snprintf(err, errlen, "cannot read kt_ports: %s", strerror(-ret));
			return ret;
		}
	}
	a->old_idle = 0;
	if (b->idle_fd >= 0 && bpf_map_lookup_elem(b->idle_fd, &zero_key, &a->old_idle) < 0) {
		ret = -errno;
		snprintf(err, errlen, "cannot read kt_idle_hooks: %s", strerror(-ret));
		return ret;
	}
	return 0;
}

/* A cooperative limit's kt_coop entry: the one published under its name
 * (kept, with its tat, across reloads and restarts), else a free one. */
static int plan_coop(struct apply *a, const char *name)
{
	const struct kt_coop *coop = a->b->coop;
	uint32_t i;

	if (!coop)
		return -ENODEV;
	for (i = 0; i < KT_MAX_COOP; i++) {
		if (a->sa.state[KT_COOP_SLOT0 + i] || !kt_coop_match(&coop[i], name, strlen(name)))
			continue;
		a->sa.state[KT_COOP_SLOT0 + i] = 1;
		return (int)(KT_COOP_SLOT0 + i);
	}
	for (i = 0; i < KT_MAX_COOP; i++) {
		if (a->sa.state[KT_COOP_SLOT0 + i] ||
		    (__atomic_load_n(&coop[i].flags, __ATOMIC_ACQUIRE) & KT_COOP_IN_USE))
			continue;
		a->sa.state[KT_COOP_SLOT0 + i] = 2;
		return (int)(KT_COOP_SLOT0 + i);
	}
	return -E2BIG;
}

/* `kept` (a slot, or -1 for none) claimed as kept, else a free slot
 * allocated, into *slot; false when none is free. */
static bool keep_or_alloc(struct apply *a, int kept, uint32_t *slot)
{
	if (kept >= 0)
		a->sa.state[kept] = 1;
	else if ((kept = alloc_slot(&a->sa, a->b)) < 0) /* state 2: new */
		return false;
	*slot = (uint32_t)kept;
	return true;
}

/* Node buckets (wants_node_bucket): the limit's existing one is kept, so its
 * tokens carry over; else a free slot. */
static int plan_node_buckets(struct apply *a, char *err, size_t errlen)
{
	/* by limit id: its node and join buckets as the kernel has them; -1 */
	int *node_of = malloc(2 * KT_MAX_LIMITS * sizeof(*node_of));
	int *join_of = node_of + KT_MAX_LIMITS;
	struct kt_plan *plan = a->plan;
	struct kt_bpf *b = a->b;
	int i;

	if (!node_of) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (i = 0; i < KT_MAX_LIMITS; i++)
		node_of[i] = join_of[i] = -1;
	for (uint32_t s = 0; s < KT_MAX_BUCKETS; s++) {
		uint32_t flags = __atomic_load_n(&b->buckets[s].flags, __ATOMIC_ACQUIRE);
		uint32_t id = b->buckets[s].limit_id;

		if (!(flags & KT_BUCKET_IN_USE) || id >= KT_MAX_LIMITS || a->sa.state[s])
			continue;
		if (flags & KT_BUCKET_POOL)
			node_of[id] = (int)s;
		else if (flags & KT_BUCKET_JOIN)
			join_of[id] = (int)s;
	}
	for (i = 0; i < plan->n_limits; i++) {
		struct kt_limit_rt *l = &plan->limits[i];

		l->has_pool = l->has_join = false;
		l->pool_slot = l->join_slot = 0;
		if (wants_node_bucket(l, &a->pol[i]) &&
		    !(l->has_pool = keep_or_alloc(a, node_of[l->id], &l->pool_slot)))
			goto full;
		if (wants_join_bucket(l, &a->pol[i]) &&
		    !(l->has_join = keep_or_alloc(a, join_of[l->id], &l->join_slot)))
			goto full;
	}
	free(node_of);
	return 0;
full:
	free(node_of);
	snprintf(err, errlen, "more than %d buckets needed", KT_MAX_BUCKETS);
	return -E2BIG;
}

/* Bucket slots: existing memberships are kept when the same (cgroup, limit)
 * with the same scope is wanted again, so their tokens carry over; the rest
 * get free slots. */
static int plan_slots(struct apply *a, char *err, size_t errlen)
{
	struct kt_plan *plan = a->plan;
	struct kt_bpf *b = a->b;

	for (int i = 0; i < plan->n_limits; i++) {
		struct kt_limit_rt *l = &plan->limits[i];
		bool node = l->cfg->scope == KT_SCOPE_NODE;
		int shared = -1, j;

		if (l->cfg->unit == KT_UNIT_REQUEST) {
			int s = plan_coop(a, l->cfg->name);

			if (s < 0) {
				if (s == -ENODEV)
					snprintf(err, errlen, "no kt_coop map");
				else
					snprintf(err, errlen, "more than %d limits of unit request",
						 KT_MAX_COOP);
				return s;
			}
			l->members[0].slot = (uint32_t)s;
			continue;
		}
		for (j = 0; j < l->n_members; j++) {
			int s = find_existing(a->old, a->n_old, l->members[j].cgid, l->id);
			if (s >= 0 && (b->buckets[s].flags & KT_BUCKET_NODE) == (node ? KT_BUCKET_NODE : 0) &&
			    b->buckets[s].limit_id == l->id && (!node || shared < 0 || shared == s) &&
			    (node || a->sa.state[s] == 0)) {
				l->members[j].slot = (uint32_t)s;
				a->sa.state[s] = 1;
				a->born_empty[i] = !node;
				if (node)
					shared = s;
			} else {
				l->members[j].slot = UINT32_MAX;
			}
		}
		for (j = 0; j < l->n_members; j++) {
			if (l->members[j].slot != UINT32_MAX)
				continue;
			if (node && shared >= 0) {
				l->members[j].slot = (uint32_t)shared;
				continue;
			}
			int s = alloc_slot(&a->sa, b);
			if (s < 0) {
				snprintf(err, errlen, "more than %d buckets needed", KT_MAX_BUCKETS);
				return -E2BIG;
			}
			l->members[j].slot = (uint32_t)s;
			if (node)
				shared = s;
		}
	}
	return plan_node_buckets(a, err, errlen);
}

static int dest_cmp(const void *x, const void *y)
{
	return memcmp(&((const struct kt_dest_entry *)x)->key,
		      &((const struct kt_dest_entry *)y)->key, sizeof(struct kt_dest_key));
}

/* Classifier, memberships and attachments, with what each replaces. */
static int plan_rest(struct apply *a, char *err, size_t errlen)
{
	int i, j, ret;

	ret = kt_plan_layout(a->plan, a->rules, &a->cls, a->want, a->want_vals, &a->n_want,
			     &a->attach, &a->n_attach, err, errlen);
	if (ret)
		return ret;

	a->dest_old = calloc(a->cls.n_dests + 1, sizeof(*a->dest_old));
	if (!a->dest_old)
		return -ENOMEM;
	/* sorted, so 16k entries pair up in n log n */
	qsort(a->old_dests, a->n_old_dests, sizeof(*a->old_dests), dest_cmp);
	for (i = 0; i < a->cls.n_dests; i++) {
		const struct kt_dest_entry *o =
			bsearch(&a->cls.dests[i], a->old_dests, a->n_old_dests,
				sizeof(*a->old_dests), dest_cmp);

		a->dest_old[i] = o ? (int)(o - a->old_dests) : -1;
		if (o)
			a->old_dest_kept[o - a->old_dests] = true;
	}
	for (i = 0; i < a->n_want; i++) {
		a->want_old[i] = -1;
		for (j = 0; j < a->n_old_keys; j++)
			if (a->old_keys[j].cgroup_id == a->want[i].cgroup_id) {
				a->want_old[i] = j;
				a->old_key_kept[j] = true;
				break;
			}
	}
	return 0;
}

/* Saves what bucket `slot` holds before the commit writes it, with its
 * per-CPU counters when `fresh` (the write zeroes them), so a rollback can
 * put both back. */
static int save_slot(struct apply *a, uint32_t slot, bool fresh, struct saved_slot **out)
{
	struct kt_bucket *bk = kt_bpf_bucket(a->b, slot);
	struct saved_slot *s = &a->saved[a->n_saved];

	*s = (struct saved_slot){ .slot = slot, .fresh = fresh, .old = *bk };
	s->old.tat = __atomic_load_n(&bk->tat, __ATOMIC_RELAXED); /* the kernel CASes it */
	s->tat_after = s->old.tat;
	if (fresh) {
		s->ctrs = a->ctrs + (size_t)a->n_fresh * a->b->ncpus;
		if (bpf_map_lookup_elem(a->b->counters_fd, &slot, s->ctrs) < 0)
			return -errno;
		a->n_fresh++;
	}
	a->saved_idx[slot] = (uint16_t)++a->n_saved;
	*out = s;
	return 0;
}

/* A member bucket's flags: chained to its limit's node bucket, or not;
 * shadow (enforce: false), or not. */
static uint32_t member_flags(const struct kt_limit_rt *l, uint32_t flags)
{
	flags &= ~KT_BUCKET_SHADOW;
	if (l->cfg->shadow)
		flags |= KT_BUCKET_SHADOW;
	return kt_bucket_chain_flags(flags, l->has_pool ? l->pool_slot : KT_SLOT_NONE);
}

/* The bucket one level up from limit l's bucket in `slot` (parent:): the
 * parent limit's bucket for the same cgroup as l's member m; KT_SLOT_NONE
 * without a parent. */
static uint32_t up_slot(const struct apply *a, const struct kt_limit_rt *l,
			const struct kt_member_rt *m)
{
	const struct kt_limit_rt *p;

	if (kt_cfg_parent(l->cfg) < 0)
		return KT_SLOT_NONE;
	p = &a->plan->limits[kt_cfg_parent(l->cfg)];
	for (int j = 0; j < p->n_members; j++)
		if (p->members[j].cgid == m->cgid)
			return p->members[j].slot;
	return KT_SLOT_NONE;
}

/* The level up from limit l's join bucket: its parent's node bucket (which
 * bounds the node's share), else its join bucket, else its one bucket;
 * KT_SLOT_NONE without a parent. */
static uint32_t join_up_slot(const struct apply *a, const struct kt_limit_rt *l)
{
	const struct kt_limit_rt *p;

	if (kt_cfg_parent(l->cfg) < 0)
		return KT_SLOT_NONE;
	p = &a->plan->limits[kt_cfg_parent(l->cfg)];
	if (p->has_pool)
		return p->pool_slot;
	if (p->has_join)
		return p->join_slot;
	return p->n_members > 0 ? p->members[0].slot : KT_SLOT_NONE;
}

/* `flags` with KT_BUCKET_UP when slot's level up is `up`, after kt_up[slot]
 * names it (saved in s for a rollback); without, when there is none. The
 * parent's bucket may be published after this one: the programs charge
 * up only to a bucket in use. */
static int up_flags(struct apply *a, struct saved_slot *s, uint32_t slot, uint32_t up,
		    uint32_t *flags)
{
	*flags &= ~KT_BUCKET_UP;
	if (up >= KT_MAX_BUCKETS)
		return 0;
	if (a->b->up_fd < 0)
		return -EOPNOTSUPP; /* a pin directory of an older version */
	if (!s->up_written) {
		if (bpf_map_lookup_elem(a->b->up_fd, &slot, &s->old_up) < 0)
			return -errno;
		s->up_written = true;
	}
	if (commit_step(a) || bpf_map_update_elem(a->b->up_fd, &slot, &up, BPF_ANY) < 0)
		return -errno;
	*flags |= KT_BUCKET_UP;
	return 0;
}

/* Tokens limit i's kept member buckets hold together at `now`. */
static double kept_tokens(struct apply *a, int i, uint64_t now)
{
	const struct kt_limit_rt *l = &a->plan->limits[i];
	double sum = 0;

	for (int j = 0; j < l->n_members; j++) {
		uint32_t s = l->members[j].slot;

		if (s < KT_MAX_BUCKETS && a->sa.state[s] == 1)
			sum += (double)kt_gcra_tokens_left(kt_bpf_bucket(a->b, s), now);
	}
	return sum;
}

/* Writes limit i's node bucket, first saving what it held. A new one
 * starts with what the limit's kept members hold together (none kept: a
 * full burst, as new members start), so chaining them adds no tokens. */
static int commit_node_bucket(struct apply *a, int i)
{
	const struct kt_limit_rt *l = &a->plan->limits[i];
	uint32_t slot = l->pool_slot;
	struct kt_bucket *bk = kt_bpf_bucket(a->b, slot);
	struct saved_slot *s;
	struct kt_bucket_policy pol;
	int ret;

	kt_node_policy(&a->pol[i], l->n_members, &pol);
	/* never fresh in the saved sense: the programs count nothing here,
	 * so there are no counters to put back */
	if ((ret = save_slot(a, slot, false, &s)))
		return ret;
	if (commit_step(a))
		return -errno;
	if (a->sa.state[slot] == 2) {
		uint64_t now = kt_clock_ns(), tat = 0;

		kt_bucket_init(a->b, slot, l->id, &pol);
		if (a->born_empty[i]) {
			uint64_t interval = bk->interval_fp,
				 tau = kt_tokens_to_ns(bk->burst, interval),
				 have = kt_tokens_to_ns((__u64)kept_tokens(a, i, now), interval);

			tat = have < tau ? now + (tau - have) : 0;
		}
		kt_bucket_set_tat(bk, tat);
		kt_bucket_publish(bk, KT_BUCKET_IN_USE | KT_BUCKET_POOL);
	} else {
		kt_bucket_set_rate(a->b, slot, pol.rate, pol.burst);
		kt_bucket_set_lease(a->b, slot, &pol);
	}
	s->tat_after = __atomic_load_n(&bk->tat, __ATOMIC_RELAXED);
	return 0;
}

/* Writes limit i's join bucket (one member's share, chained to the node
 * bucket), first saving what it held. A new one starts full: the node
 * bucket bounds what it adds. */
static int commit_join_bucket(struct apply *a, int i)
{
	const struct kt_limit_rt *l = &a->plan->limits[i];
	const struct kt_bucket_policy *pol = &a->pol[i];
	uint32_t slot = l->join_slot, flags;
	struct kt_bucket *bk = kt_bpf_bucket(a->b, slot);
	bool fresh = a->sa.state[slot] == 2;
	struct saved_slot *s;
	int ret;

	/* it counts what unclassified cgroups send: fresh counters */
	if ((ret = save_slot(a, slot, fresh, &s)))
		return ret;
	if (commit_step(a))
		return -errno;
	if (fresh) {
		if (commit_step(a) ||
		    bpf_map_update_elem(a->b->counters_fd, &slot, a->zero, BPF_ANY) < 0)
			return -errno;
		kt_bpf_reset_shadow(a->b, slot);
		kt_bucket_init(a->b, slot, l->id, pol);
	} else {
		kt_bucket_set_rate(a->b, slot, pol->rate, pol->burst);
		kt_bucket_set_lease(a->b, slot, pol);
	}
	flags = member_flags(l, KT_BUCKET_IN_USE | KT_BUCKET_JOIN);
	if ((ret = up_flags(a, s, slot, join_up_slot(a, l), &flags)))
		return ret;
	kt_bucket_publish(bk, flags);
	s->tat_after = __atomic_load_n(&bk->tat, __ATOMIC_RELAXED);
	return 0;
}

/* Writes one bucket slot of limit i (its member j's), first saving what
 * it held. */
static int commit_slot(struct apply *a, uint32_t slot, int i, int j)
{
	const struct kt_limit_rt *l = &a->plan->limits[i];
	uint32_t up = up_slot(a, l, &l->members[j]), flags;
	const struct kt_bucket_policy *pol = &a->pol[i];
	struct kt_bucket *bk = kt_bpf_bucket(a->b, slot);
	struct saved_slot *s = &a->saved[a->n_saved];
	bool fresh = a->sa.state[slot] == 2;
	int ret;

	if (kt_slot_is_coop(slot)) {
		*s = (struct saved_slot){ .slot = slot, .fresh = fresh, .old = *bk };
		s->old.tat = __atomic_load_n(&bk->tat, __ATOMIC_RELAXED);
		s->tat_after = s->old.tat;
		/* a cooperative limit: published (a full bucket) or kept; the
		 * callers' tat and counters are theirs */
		a->saved_idx[slot] = (uint16_t)++a->n_saved;
		if (commit_step(a))
			return -errno;
		if (pol->strict_hold_ns) {
			if (fresh) {
				kt_coop_publish_as(&a->b->coop[slot - KT_COOP_SLOT0], l->cfg->name,
						   pol->strict_hold_ns << KT_FP_SHIFT, 1, 1);
			} else {
				kt_bucket_make_strict(bk, pol, false);
			}
			s->tat_after = __atomic_load_n(&bk->tat, __ATOMIC_RELAXED);
			return 0;
		}
		if (fresh) {
			kt_coop_publish(&a->b->coop[slot - KT_COOP_SLOT0], l->cfg->name,
					kt_interval_fp_from_rate(pol->rate), kt_burst_tokens(pol->burst));
		} else {
			kt_bucket_unstrict(bk);
			kt_bucket_set_rate(a->b, slot, pol->rate, pol->burst);
		}
		kt_bucket_set_lease(a->b, slot, pol);
		s->tat_after = __atomic_load_n(&bk->tat, __ATOMIC_RELAXED);
		return 0;
	}
	if ((ret = save_slot(a, slot, fresh, &s)))
		return ret;
	if (fresh) {
		unsigned flags = KT_BUCKET_IN_USE |
				 (l->cfg->scope == KT_SCOPE_NODE ? KT_BUCKET_NODE : 0);

		if (commit_step(a) ||
		    bpf_map_update_elem(a->b->counters_fd, &slot, a->zero, BPF_ANY) < 0)
			return -errno;
		kt_bpf_reset_shadow(a->b, slot);
		if (commit_step(a))
			return -errno;
		if (pol->strict_hold_ns) {
			/* closed until the strict controller arms a permit */
			bk->limit_id = l->id;
			kt_bucket_make_strict(bk, pol, true);
			kt_bucket_publish(bk, flags | KT_BUCKET_STRICT);
			s->tat_after = __atomic_load_n(&bk->tat, __ATOMIC_RELAXED);
			return 0;
		}
		kt_bucket_init(a->b, slot, l->id, pol);
		/* A member joining a limit that already has members on this
		 * node (a new pod of a pattern) starts with its share for one
		 * heartbeat, not a full burst: a fair start next to members
		 * that have used theirs. What it may add to the node is
		 * bounded by the node bucket it is chained to, not by this.
		 * The first members of a limit (a start, a new limit) start
		 * full. Invisible until the membership is written, below. */
		if (a->born_empty[i]) {
			uint64_t tau = kt_tokens_to_ns(bk->burst, bk->interval_fp),
				 credit = l->cfg->store.heartbeat_ns;

			kt_bucket_set_tat(bk, kt_clock_ns() + (tau > credit ? tau - credit : 0));
		}
		flags = member_flags(l, flags);
		if ((ret = up_flags(a, s, slot, up, &flags)))
			return ret;
		kt_bucket_publish(bk, flags);
	} else {
		if (commit_step(a))
			return -errno;
		if (pol->strict_hold_ns) {
			kt_bucket_make_strict(bk, pol, false);
		} else {
			kt_bucket_unstrict(bk);
			kt_bucket_set_rate(a->b, slot, pol->rate, pol->burst);
			kt_bucket_set_lease(a->b, slot, pol);
		}
		/* the chain, enforce and parent changed by a reload take
		 * effect on the kept bucket: its tokens stay */
		flags = member_flags(l, __atomic_load_n(&bk->flags, __ATOMIC_ACQUIRE));
		if ((ret = up_flags(a, s, slot, up, &flags)))
			return ret;
		kt_bucket_publish(bk, flags);
	}
	s->tat_after = __atomic_load_n(&bk->tat, __ATOMIC_RELAXED);
	return 0;
}

/* Writes the plan, saving what each write replaces. Links last: once they
 * are in sync the new configuration is in force and nothing is undone. */
static int commit(struct apply *a, char *err, size_t errlen)
{
	struct kt_plan *plan = a->plan;
	struct kt_bpf *b = a->b;
	struct kt_member_key key;
	uint32_t id;
	int i, j, ret;

	/* Buckets, then names, then memberships, then rules: when a rule
	 * becomes visible its buckets are already in place. Node buckets
	 * before the members that chain to them. */
	for (i = 0; i < plan->n_limits; i++)
		if ((plan->limits[i].has_pool && (ret = commit_node_bucket(a, i))) ||
		    (plan->limits[i].has_join && (ret = commit_join_bucket(a, i))))
			goto fail;
	for (i = 0; i < plan->n_limits; i++)
		for (j = 0; j < plan->limits[i].n_members; j++) {
			uint32_t s = plan->limits[i].members[j].slot;

			if (!a->saved_idx[s] && (ret = commit_slot(a, s, i, j)))
				goto fail;
		}
	for (i = 0; i < plan->n_limits; i++, a->done_limits++) {
		const struct kt_limit_cfg *lc = plan->limits[i].cfg;
		struct kt_limit_info li = { .in_use = 1,
					    .unit = lc->unit,
					    .scope = lc->scope,
					    .proto_mask = lc->match.proto_mask,
					    .port_lo = lc->match.port_lo,
					    .port_hi = lc->match.port_hi };
		snprintf(li.name, sizeof(li.name), "%s", plan->limits[i].cfg->name);
		id = plan->limits[i].id;
		if (commit_step(a) || bpf_map_update_elem(b->limits_fd, &id, &li, BPF_ANY) < 0)
			goto map_err;
	}
	/* one update per cgroup replaces its whole list at once */
	for (i = 0; i < a->n_want; i++, a->done_members++) {
		key = (struct kt_member_key){ .cgroup_id = a->want[i].cgroup_id };
		if (commit_step(a) ||
		    bpf_map_update_elem(b->members_fd, &key, &a->want_vals[i], BPF_ANY) < 0)
			goto map_err;
	}
	for (i = 0; i < a->cls.n_dests; i++, a->done_dests++)
		if (commit_step(a) || bpf_map_update_elem(b->dests_fd, &a->cls.dests[i].key,
							  &a->cls.dests[i].val, BPF_ANY) < 0)
			goto map_err;
	for (id = 0; id < KT_HOOK_COUNT; id++, a->done_ports++)
		if (commit_step(a) || bpf_map_update_elem(b->ports_fd, &id, &a->cls.ports[id], BPF_ANY) < 0)
			goto map_err;
	if (b->idle_fd >= 0) {
		__u32 idle = kt_idle_hooks_of(a->cls.ports, KT_HOOK_COUNT);

		if (commit_step(a) || bpf_map_update_elem(b->idle_fd, &zero_key, &idle, BPF_ANY) < 0)
			goto map_err;
		a->done_idle = true;
	}

	/* Attachments: every outermost member cgroup gets the hooks its own
	 * and its nested members' limits need (with attachRoot: the root gets
	 * every hook the limits need), the rest are detached. New links are
	 * made before old ones go. On failure kt_bpf_sync_links has left
	 * every link as it was. */
	if (commit_step(a)) {
		snprintf(err, errlen, "cannot attach programs: %s", strerror(EIO));
		return -EIO;
	}
	return kt_bpf_sync_links(b, a->attach, a->n_attach, err, errlen);

map_err:
	ret = errno ? -errno : -EIO;
fail:
	snprintf(err, errlen, "cannot update kernel maps: %s", strerror(-ret));
	return ret;
}

/* Puts a slot back as saved: tat exactly when nothing was charged since our
 * write, else rescaled back so the charges made meanwhile keep their cost. */
static int restore_slot(struct apply *a, const struct saved_slot *s, uint64_t now)
{
	if (kt_slot_is_coop(s->slot) && s->fresh) {
		kt_coop_retire(&a->b->coop[s->slot - KT_COOP_SLOT0]);
		return 0;
	}

	kt_bucket_restore(kt_bpf_bucket(a->b, s->slot), &s->old, s->tat_after, now);
	if (s->up_written && bpf_map_update_elem(a->b->up_fd, &s->slot, &s->old_up, BPF_ANY) < 0)
		return 1;
	if (s->fresh && bpf_map_update_elem(a->b->counters_fd, &s->slot, s->ctrs, BPF_ANY) < 0)
		return 1;
	return 0;
}

/* Undoes a failed commit, newest write first, so no rule or membership
 * ever points at a bucket that is already put back. */
static void rollback(struct apply *a)
{
	struct kt_bpf *b = a->b;
	uint64_t now = kt_clock_ns();
	struct kt_member_key key;
	int failed = 0, i;

	if (a->done_idle)
		failed += bpf_map_update_elem(b->idle_fd, &zero_key, &a->old_idle, BPF_ANY) < 0;
	for (uint32_t h = (uint32_t)a->done_ports; h-- > 0;)
		failed += bpf_map_update_elem(b->ports_fd, &h, &a->old_ports[h], BPF_ANY) < 0;
	for (i = a->done_dests; i-- > 0;) {
		const struct kt_dest_key *dk = &a->cls.dests[i].key;

		if (a->dest_old[i] >= 0)
			failed += bpf_map_update_elem(b->dests_fd, dk, &a->old_dests[a->dest_old[i]].val,
						      BPF_ANY) < 0;
		else
			failed += bpf_map_delete_elem(b->dests_fd, dk) < 0;
	}
	for (i = a->done_members; i-- > 0;) {
		key = (struct kt_member_key){ .cgroup_id = a->want[i].cgroup_id };
		if (a->want_old[i] >= 0)
			failed += bpf_map_update_elem(b->members_fd, &key, &a->old_vals[a->want_old[i]],
						      BPF_ANY) < 0;
		else
			failed += bpf_map_delete_elem(b->members_fd, &key) < 0;
	}
	for (i = a->done_limits; i-- > 0;) {
		uint32_t id = a->plan->limits[i].id;

		failed += bpf_map_update_elem(b->limits_fd, &id, &a->infos[id], BPF_ANY) < 0;
	}
	for (i = a->n_saved; i-- > 0;)
		failed += restore_slot(a, &a->saved[i], now);
	if (failed)
		kt_err("rollback of a failed apply: %d kernel map writes failed too", failed);
}

/* After the commit: drop what the plan no longer has (stale prefixes,
 * memberships, buckets and names; the link sync detached the surplus
 * links). A failure here leaves only entries nothing refers to, and the
 * next apply retries. */
static void drop_stale(struct apply *a)
{
	struct kt_bpf *b = a->b;
	int i;

	for (i = 0; i < a->n_old_dests; i++)
		if (!a->old_dest_kept[i])
			bpf_map_delete_elem(b->dests_fd, &a->old_dests[i].key);
	for (i = 0; i < a->n_old_keys; i++)
		if (!a->old_key_kept[i])
			bpf_map_delete_elem(b->members_fd, &a->old_keys[i]);
	for (uint32_t s = 0; s < KT_MAX_BUCKETS; s++)
		if (!a->sa.state[s] && (b->buckets[s].flags & KT_BUCKET_IN_USE))
			kt_bucket_publish(&b->buckets[s], 0);
	/* cooperative limits gone: their callers get -ESTALE */
	for (uint32_t i = 0; b->coop && i < KT_MAX_COOP; i++)
		if (!a->sa.state[KT_COOP_SLOT0 + i] &&
		    (__atomic_load_n(&b->coop[i].flags, __ATOMIC_ACQUIRE) & KT_COOP_IN_USE))
			kt_coop_retire(&b->coop[i]);
	for (uint32_t id = 0; id < KT_MAX_LIMITS; id++) {
		if (a->infos[id].in_use && !a->id_used[id]) {
			struct kt_limit_info none = { 0 };
			bpf_map_update_elem(b->limits_fd, &id, &none, BPF_ANY);
		}
	}
}

/* Plan (kernel reads only), commit (every write saved first), and on a
 * failed write a rollback to the maps as they were. */
int kt_plan_apply(struct kt_bpf *b, struct kt_plan *plan, const struct kt_bucket_policy *pol,
		  char *err, size_t errlen)
{
	struct apply *a = calloc(1, sizeof(*a));
	uint32_t *ids = NULL, *slots = NULL; /* the plan as given, for a failure to restore */
	struct kt_limit_rt *given = NULL;
	int n_members = 0, n_fresh = 0, ret, i, j, k;

	if (!a)
		goto nomem;
	a->b = b;
	a->plan = plan;
	a->pol = pol;
	for (i = 0; i < plan->n_limits; i++)
		n_members += plan->limits[i].n_members;
	ids = calloc(plan->n_limits + 1, sizeof(*ids));
	slots = calloc(n_members + 1, sizeof(*slots));
	given = calloc(plan->n_limits + 1, sizeof(*given));
	a->old_keys = calloc(KT_MAX_MEMBERSHIPS, sizeof(*a->old_keys));
	a->old_vals = calloc(KT_MAX_MEMBERSHIPS, sizeof(*a->old_vals));
	a->old_key_kept = calloc(KT_MAX_MEMBERSHIPS, sizeof(*a->old_key_kept));
	a->old = calloc(KT_MAX_MEMBERSHIPS * KT_LIMITS_PER_CGROUP, sizeof(*a->old));
	a->old_dests = calloc(KT_MAX_DESTS, sizeof(*a->old_dests));
	a->old_dest_kept = calloc(KT_MAX_DESTS, sizeof(*a->old_dest_kept));
	a->want = calloc(KT_MAX_MEMBERSHIPS, sizeof(*a->want));
	a->want_vals = calloc(KT_MAX_MEMBERSHIPS, sizeof(*a->want_vals));
	a->want_old = calloc(KT_MAX_MEMBERSHIPS, sizeof(*a->want_old));
	a->rules = calloc(plan->n_limits + 1, sizeof(*a->rules));
	a->zero = calloc(b->ncpus, sizeof(*a->zero));
	a->saved = calloc(KT_MAX_SLOTS, sizeof(*a->saved));
	if (!ids || !slots || !given || !a->old_keys || !a->old_vals || !a->old_key_kept || !a->old ||
	    !a->old_dests || !a->old_dest_kept || !a->want || !a->want_vals || !a->want_old ||
	    !a->rules || !a->zero || !a->saved)
		goto nomem;
	for (i = 0, k = 0; i < plan->n_limits; i++) {
		given[i] = plan->limits[i];
		ids[i] = plan->limits[i].id;
		for (j = 0; j < plan->limits[i].n_members; j++)
			slots[k++] = plan->limits[i].members[j].slot;
	}

	/* Plan: the kernel is only read, so any error leaves it untouched.
	 * The config's own errors first, named as --check names them. */
	if ((ret = kt_plan_check(plan, err, errlen)) || (ret = plan_ids(a, err, errlen)) ||
	    (ret = read_maps(a, err, errlen)) || (ret = plan_slots(a, err, errlen)) ||
	    (ret = plan_rest(a, err, errlen)))
		goto out;
	for (i = 0; i < KT_MAX_BUCKETS; i++)
		n_fresh += a->sa.state[i] == 2;
	a->ctrs = calloc((size_t)n_fresh * b->ncpus + 1, sizeof(*a->ctrs));
	if (!a->ctrs)
		goto nomem;

	ret = commit(a, err, errlen);
	if (ret)
		rollback(a);
	else
		drop_stale(a);
	/* after the lists are final, never before: see struct kt_anc */
	kt_bpf_bump_gen(b);
	if (ret)
		goto out;
	for (i = 0; i < plan->n_limits; i++) {
		plan->limits[i].bucket_rate = pol[i].rate;
		plan->limits[i].bucket_burst = pol[i].burst;
	}
	goto out;

nomem:
	ret = -ENOMEM;
	snprintf(err, errlen, "out of memory");
out:
	if (ret && ids && slots && given)
		for (i = 0, k = 0; i < plan->n_limits; i++) {
			plan->limits[i].id = ids[i];
			plan->limits[i].has_pool = given[i].has_pool;
			plan->limits[i].pool_slot = given[i].pool_slot;
			for (j = 0; j < plan->limits[i].n_members; j++)
				plan->limits[i].members[j].slot = slots[k++];
		}
	if (a) {
		kt_classifier_free(&a->cls);
		free(a->old_keys);
		free(a->old_vals);
		free(a->old_key_kept);
		free(a->old);
		free(a->old_dests);
		free(a->old_dest_kept);
		free(a->want);
		free(a->want_vals);
		free(a->want_old);
		free(a->rules);
		free(a->dest_old);
		free(a->attach);
		free(a->zero);
		free(a->saved);
		free(a->ctrs);
		free(a);
	}
	free(ids);
	free(slots);
	free(given);
	return ret;
}
