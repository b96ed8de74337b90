// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* kt_plan_apply's first half, the plan (apply_int.h): limit ids by name,
 * the kernel's maps as they are (kept members, and through kt_up the
 * ancestors' buckets kept with them), bucket slots kept or new, node and
 * join buckets, and the new maps' contents matched with the old. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <bpf/bpf.h>
#include "kernel/apply_int.h"
#include "kernel/bucket.h"
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
 * node's whole share) or a join bucket. An in-flight limit's from its
 * first member: a socket counts in the node bucket from its connect to its
 * close, so one made later would not know the sockets open before it. */
static bool wants_node_bucket(const struct kt_limit_rt *l, const struct kt_bucket_policy *pol)
{
	int first = l->cfg->unit == KT_UNIT_CONCURRENT ? 1 : 2;

	return chainable(l, pol) && (l->n_members >= first || wants_join_bucket(l, pol));
}


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


static int find_existing(const struct old_member *old, int n, uint64_t cgid, uint32_t limit_id)
{
	for (int i = 0; i < n; i++)
		if (old[i].cgid == cgid && old[i].limit_id == limit_id)
			return (int)old[i].slot;
	return -1;
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
	if ((ret = kt_bpf_read_limit_exts(a->b, a->exts))) {
		snprintf(err, errlen, "cannot read kt_limit_ext: %s", strerror(-ret));
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

		/* a cooperative member's entry is found by its name (path) */
		for (j = 0; l->cfg->unit == KT_UNIT_REQUEST && j < l->n_members; j++) {
			int s = plan_coop(a, l->members[j].path);

			if (s < 0) {
				if (s == -ENODEV)
					snprintf(err, errlen, "no kt_coop map");
				else
					snprintf(err, errlen,
						 "more than %d kt_coop entries (limits of unit request and their callers)",
						 KT_MAX_COOP);
				return s;
			}
			l->members[j].slot = (uint32_t)s;
		}
		if (l->cfg->unit == KT_UNIT_REQUEST)
			continue;
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

int kt_apply_plan(struct apply *a, char *err, size_t errlen)
{
	int ret;

	if ((ret = plan_ids(a, err, errlen)) || (ret = read_maps(a, err, errlen)) ||
	    (ret = plan_slots(a, err, errlen)) || (ret = plan_rest(a, err, errlen)))
		return ret;
	return 0;
}
