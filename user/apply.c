/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <time.h>
#include <bpf/bpf.h>
#include "apply.h"
#include "cgroup.h"
#include "classify.h"
#include "log.h"

int kt_plan_resolve(const struct kt_config *cfg, const char *cg_mount, struct kt_plan *plan,
		    char *err, size_t errlen)
{
	char real[PATH_MAX], why[KT_ERR_LEN];
	int i, j, ret;

	memset(plan, 0, sizeof(*plan));
	plan->limits = calloc(cfg->n_limits, sizeof(*plan->limits));
	if (!plan->limits)
		return -ENOMEM;
	plan->n_limits = cfg->n_limits;
	for (i = 0; i < cfg->n_limits; i++) {
		const struct kt_limit_cfg *lc = &cfg->limits[i];
		struct kt_limit_rt *l = &plan->limits[i];

		l->cfg = lc;
		l->members = calloc(lc->n_cgroups, sizeof(*l->members));
		if (!l->members) {
			ret = -ENOMEM;
			goto fail;
		}
		for (j = 0; j < lc->n_cgroups; j++) {
			struct kt_member_rt *m = &l->members[l->n_members];
			int k, dup = 0;

			ret = kt_cgroup_resolve(lc->cgroups[j], cg_mount, real, sizeof(real), why,
						sizeof(why));
			if (!ret) {
				ret = kt_cgroup_id(real, &m->cgid);
				if (ret)
					snprintf(why, sizeof(why), "%s: cannot read cgroup id: %s",
						 real, strerror(-ret));
			}
			if (ret) {
				snprintf(err, errlen, "%s:%d: limits[%d].cgroups[%d]: %s", cfg->file,
					 lc->cgroup_lines[j], i, j, why);
				goto fail;
			}
			/* two spellings of one cgroup are one member */
			for (k = 0; k < l->n_members; k++)
				dup |= l->members[k].cgid == m->cgid;
			if (dup)
				continue;
			/* a kt_members value lists at most KT_LIMITS_PER_CGROUP limits */
			for (k = 0, dup = 0; k < i; k++)
				for (int q = 0; q < plan->limits[k].n_members; q++)
					dup += plan->limits[k].members[q].cgid == m->cgid;
			if (dup >= KT_LIMITS_PER_CGROUP) {
				snprintf(err, errlen,
					 "%s:%d: limits[%d].cgroups[%d]: %s is already a member of %d limits, the most one cgroup may join",
					 cfg->file, lc->cgroup_lines[j], i, j, real, KT_LIMITS_PER_CGROUP);
				ret = -E2BIG;
				goto fail;
			}
			m->path = strdup(real);
			if (!m->path) {
				ret = -ENOMEM;
				goto fail;
			}
			/* the cgroup id is stable for the cgroup's life, which is
			 * the member's life: a recreated pod is a new member */
			snprintf(m->id, sizeof(m->id), "%s:%llu", cfg->node_name,
				 (unsigned long long)m->cgid);
			l->n_members++;
		}
		l->member_ids = calloc(l->n_members + 1, sizeof(*l->member_ids));
		if (!l->member_ids) {
			ret = -ENOMEM;
			goto fail;
		}
		for (j = 0; j < l->n_members; j++)
			l->member_ids[j] = l->members[j].id;
	}
	return 0;
fail:
	kt_plan_free(plan);
	return ret;
}

void kt_plan_free(struct kt_plan *plan)
{
	for (int i = 0; i < plan->n_limits; i++) {
		for (int j = 0; j < plan->limits[i].n_members; j++)
			free(plan->limits[i].members[j].path);
		free(plan->limits[i].members);
		free(plan->limits[i].member_ids);
	}
	free(plan->limits);
	memset(plan, 0, sizeof(*plan));
}

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

void kt_bucket_set_rate(struct kt_bpf *b, uint32_t slot, double rate, double burst)
{
	struct kt_bucket *bk = &b->buckets[slot];
	/* < 2^32 keeps the kernel's burst multiply division-free */
	__u64 burst_tokens = burst < 1 ? 1 : burst > 4294967295.0 ? 4294967295ULL : (__u64)ceil(burst);
	struct timespec ts;

	/* burst first: a decision that sees the new burst with the old
	 * interval errs by at most the burst difference, once */
	__atomic_store_n(&bk->burst, burst_tokens, __ATOMIC_RELAXED);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	kt_bucket_rescale(bk, (__u64)ts.tv_sec * 1000000000ull + (__u64)ts.tv_nsec,
			  kt_interval_fp_from_rate(rate));
}

void kt_bucket_set_validity(struct kt_bpf *b, uint32_t slot, uint64_t valid_until,
			    double fallback_rate)
{
	struct kt_bucket *bk = &b->buckets[slot];

	/* fallback first, so the deadline never arms a stale fallback */
	__atomic_store_n(&bk->fallback_fp, kt_interval_fp_from_rate(fallback_rate),
			 __ATOMIC_RELAXED);
	__atomic_store_n(&bk->valid_until, valid_until, __ATOMIC_RELEASE);
}

/* slot_state: 0 free, 1 kept from before, 2 newly allocated */
struct slot_alloc {
	unsigned char state[KT_MAX_BUCKETS];
	int next;
};

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

/* Member cgroups of the plan, each with the kt_members value listing its
 * limits and the hooks its limits need. Fails, naming the cgroup, when one
 * is in more limits than a kt_members value holds. */
static int collect_cgroups(const struct kt_plan *plan, struct kt_attach *want,
			   struct kt_member_val *vals, int *n_out, char *err, size_t errlen)
{
	int n = 0;

	for (int i = 0; i < plan->n_limits; i++) {
		for (int j = 0; j < plan->limits[i].n_members; j++) {
			const struct kt_member_rt *m = &plan->limits[i].members[j];
			struct kt_member_val *v;
			int k;

			for (k = 0; k < n; k++)
				if (want[k].cgroup_id == m->cgid)
					break;
			if (k == n) {
				if (n == KT_MAX_MEMBERSHIPS) {
					snprintf(err, errlen, "more than %d member cgroups",
						 KT_MAX_MEMBERSHIPS);
					return -E2BIG;
				}
				want[n] = (struct kt_attach){ .cgroup_id = m->cgid, .path = m->path };
				memset(&vals[n], 0, sizeof(vals[n]));
				n++;
			}
			v = &vals[k];
			if (v->count == KT_LIMITS_PER_CGROUP) {
				snprintf(err, errlen, "cgroup %s is a member of more than %d limits",
					 m->path, KT_LIMITS_PER_CGROUP);
				return -E2BIG;
			}
			v->ents[v->count++] = (struct kt_member_ent){ .limit_id = plan->limits[i].id,
								      .slot = m->slot };
			want[k].hook_mask |= 1u << kt_hook_for_unit(plan->limits[i].cfg->unit);
		}
	}
	*n_out = n;
	return 0;
}

/* Is `path` strictly inside directory `dir`? */
static bool path_inside(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	return strncmp(path, dir, n) == 0 && path[n] == '/';
}

/* Attach points for the member cgroups. Programs attached to a cgroup also
 * run for its descendants, so a member nested in another member must not get
 * its own attachment: the packet would be decided (and charged) twice. Such
 * members are served by their outermost member ancestor's attachment, which
 * takes on their hooks; the program finds the nested member itself by its
 * own cgroup id. */
static int fold_nested(const struct kt_attach *want, int n, struct kt_attach *out)
{
	int n_out = 0;

	for (int i = 0; i < n; i++) {
		int top = i;

		for (int j = 0; j < n; j++)
			if (path_inside(want[top].path, want[j].path))
				top = j, j = -1; /* restart: find the outermost */
		int k;
		for (k = 0; k < n_out; k++)
			if (out[k].cgroup_id == want[top].cgroup_id)
				break;
		if (k == n_out)
			out[n_out++] = (struct kt_attach){ .cgroup_id = want[top].cgroup_id,
							   .path = want[top].path };
		out[k].hook_mask |= want[i].hook_mask;
	}
	return n_out;
}

static void init_bucket(struct kt_bpf *b, uint32_t slot, uint32_t limit_id, unsigned flags,
			double rate, double burst)
{
	struct kt_counters *zero = calloc(b->ncpus, sizeof(*zero));
	struct kt_bucket *bk = &b->buckets[slot];

	if (zero) {
		bpf_map_update_elem(b->counters_fd, &slot, zero, BPF_ANY);
		free(zero);
	}
	bk->tat = 0; /* full burst available */
	bk->valid_until = 0;
	bk->fallback_fp = 0;
	bk->limit_id = limit_id;
	kt_bucket_set_rate(b, slot, rate, burst);
	__atomic_store_n(&bk->flags, flags, __ATOMIC_RELEASE);
}

int kt_plan_apply(struct kt_bpf *b, struct kt_plan *plan, const double *rates,
		  const double *bursts, char *err, size_t errlen)
{
	struct kt_limit_info infos[KT_MAX_LIMITS];
	struct kt_member_key *old_keys = NULL, key, next;
	struct kt_member_val *want_vals = NULL, val;
	struct old_member *old = NULL;
	struct kt_rule_input *rules = NULL;
	struct kt_classifier cls = { 0 };
	struct kt_attach *want = NULL, *attach = NULL;
	struct slot_alloc *sa = NULL;
	bool id_used[KT_MAX_LIMITS] = { 0 };
	int n_old = 0, n_old_keys = 0, n_want = 0, i, j, ret = 0;
	uint32_t id;

	sa = calloc(1, sizeof(*sa));
	old_keys = calloc(KT_MAX_MEMBERSHIPS, sizeof(*old_keys));
	old = calloc(KT_MAX_MEMBERSHIPS * KT_LIMITS_PER_CGROUP, sizeof(*old));
	want = calloc(KT_MAX_MEMBERSHIPS, sizeof(*want));
	want_vals = calloc(KT_MAX_MEMBERSHIPS, sizeof(*want_vals));
	rules = calloc(plan->n_limits + 1, sizeof(*rules));
	if (!sa || !old_keys || !old || !want || !want_vals || !rules) {
		ret = -ENOMEM;
		goto out;
	}

	/* Limit ids: names already pinned keep their id. */
	for (id = 0; id < KT_MAX_LIMITS; id++) {
		if (bpf_map_lookup_elem(b->limits_fd, &id, &infos[id]) < 0) {
			ret = -errno;
			snprintf(err, errlen, "cannot read kt_limits: %s", strerror(-ret));
			goto out;
		}
		infos[id].name[KT_NAME_LEN - 1] = 0;
	}
	for (i = 0; i < plan->n_limits; i++) {
		plan->limits[i].id = UINT32_MAX;
		for (id = 0; id < KT_MAX_LIMITS; id++)
			if (infos[id].in_use && !strcmp(infos[id].name, plan->limits[i].cfg->name)) {
				plan->limits[i].id = id;
				id_used[id] = true;
			}
	}
	for (i = 0; i < plan->n_limits; i++) {
		if (plan->limits[i].id != UINT32_MAX)
			continue;
		for (id = 0; id < KT_MAX_LIMITS; id++)
			if (!id_used[id] && !infos[id].in_use)
				break;
		if (id == KT_MAX_LIMITS) {
			snprintf(err, errlen, "more than %d limits", KT_MAX_LIMITS);
			ret = -E2BIG;
			goto out;
		}
		plan->limits[i].id = id;
		id_used[id] = true;
	}

	/* Existing memberships: kept when the same (cgroup, limit) with the
	 * same scope is wanted again, so its bucket's tokens carry over. */
	if (bpf_map_get_next_key(b->members_fd, NULL, &next) == 0) {
		do {
			key = next;
			if (n_old_keys == KT_MAX_MEMBERSHIPS ||
			    bpf_map_lookup_elem(b->members_fd, &key, &val) < 0)
				continue;
			old_keys[n_old_keys++] = key;
			for (uint32_t e = 0; e < val.count && e < KT_LIMITS_PER_CGROUP; e++)
				if (val.ents[e].slot < KT_MAX_BUCKETS)
					old[n_old++] = (struct old_member){
						.cgid = key.cgroup_id,
						.limit_id = val.ents[e].limit_id,
						.slot = val.ents[e].slot,
					};
		} while (bpf_map_get_next_key(b->members_fd, &key, &next) == 0);
	}

	for (i = 0; i < plan->n_limits; i++) {
		struct kt_limit_rt *l = &plan->limits[i];
		bool node = l->cfg->scope == KT_SCOPE_NODE;
		unsigned flags = KT_BUCKET_IN_USE | (node ? KT_BUCKET_NODE : 0);
		int shared = -1;

		for (j = 0; j < l->n_members; j++) {
			int s = find_existing(old, n_old, l->members[j].cgid, l->id);
			if (s >= 0 && (b->buckets[s].flags & KT_BUCKET_NODE) == (node ? KT_BUCKET_NODE : 0) &&
			    b->buckets[s].limit_id == l->id && (!node || shared < 0 || shared == s) &&
			    (node || sa->state[s] == 0)) {
				l->members[j].slot = (uint32_t)s;
				sa->state[s] = 1;
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
			int s = alloc_slot(sa, b);
			if (s < 0) {
				snprintf(err, errlen, "more than %d buckets needed", KT_MAX_BUCKETS);
				ret = -E2BIG;
				goto out;
			}
			l->members[j].slot = (uint32_t)s;
			if (node)
				shared = s;
			init_bucket(b, (uint32_t)s, l->id, flags, rates[i], bursts[i]);
		}
		for (j = 0; j < l->n_members; j++)
			if (sa->state[l->members[j].slot] == 1)
				kt_bucket_set_rate(b, l->members[j].slot, rates[i], bursts[i]);
		l->bucket_rate = rates[i];
		l->bucket_burst = bursts[i];
	}

	/* Classifier, checked before anything below is written. */
	for (i = 0; i < plan->n_limits; i++) {
		const struct kt_limit_cfg *lc = plan->limits[i].cfg;
		rules[i] = (struct kt_rule_input){
			.limit_id = plan->limits[i].id,
			.unit = lc->unit,
			.proto_mask = lc->match.proto_mask,
			.port_lo = lc->match.port_lo,
			.port_hi = lc->match.port_hi,
			.cidrs = lc->match.cidrs,
			.n_cidrs = lc->match.n_cidrs,
		};
	}
	ret = kt_classifier_build(rules, plan->n_limits, &cls, err, errlen);
	if (ret)
		goto out;
	ret = collect_cgroups(plan, want, want_vals, &n_want, err, errlen);
	if (ret)
		goto out;

	/* Names, then memberships, then rules: when a rule becomes visible
	 * its buckets are already in place. */
	for (i = 0; i < plan->n_limits; i++) {
		struct kt_limit_info li = { .in_use = 1, .unit = plan->limits[i].cfg->unit,
					    .scope = plan->limits[i].cfg->scope };
		snprintf(li.name, sizeof(li.name), "%s", plan->limits[i].cfg->name);
		id = plan->limits[i].id;
		if (bpf_map_update_elem(b->limits_fd, &id, &li, BPF_ANY) < 0)
			goto map_err;
	}
	/* one update per cgroup replaces its whole list at once */
	for (i = 0; i < n_want; i++) {
		key = (struct kt_member_key){ .cgroup_id = want[i].cgroup_id };
		if (bpf_map_update_elem(b->members_fd, &key, &want_vals[i], BPF_ANY) < 0)
			goto map_err;
	}
	for (i = 0; i < cls.n_entries; i++)
		if (bpf_map_update_elem(b->classify_fd, &cls.entries[i].key, &cls.entries[i].set,
					BPF_ANY) < 0)
			goto map_err;
	for (id = 0; id < KT_HOOK_COUNT; id++)
		if (bpf_map_update_elem(b->ports_fd, &id, &cls.ports[id], BPF_ANY) < 0)
			goto map_err;

	/* Attachments: every outermost member cgroup gets the hooks its own
	 * and its nested members' limits need. */
	attach = calloc(n_want + 1, sizeof(*attach));
	if (!attach) {
		ret = -ENOMEM;
		goto out;
	}
	ret = kt_bpf_sync_links(b, attach, fold_nested(want, n_want, attach), err, errlen);
	if (ret)
		goto out;

	/* Drop what the plan no longer has: stale prefixes, memberships,
	 * buckets and names. */
	{
		struct kt_prefix_key pk, pnext;
		struct kt_prefix_key *stale = calloc(KT_MAX_PREFIXES, sizeof(*stale));
		int n_stale = 0;

		if (stale && bpf_map_get_next_key(b->classify_fd, NULL, &pnext) == 0) {
			do {
				pk = pnext;
				for (i = 0; i < cls.n_entries; i++)
					if (!memcmp(&cls.entries[i].key, &pk, sizeof(pk)))
						break;
				if (i == cls.n_entries && n_stale < KT_MAX_PREFIXES)
					stale[n_stale++] = pk;
			} while (bpf_map_get_next_key(b->classify_fd, &pk, &pnext) == 0);
		}
		for (i = 0; i < n_stale; i++)
			bpf_map_delete_elem(b->classify_fd, &stale[i]);
		free(stale);
	}
	for (i = 0; i < n_old_keys; i++) {
		for (j = 0; j < n_want; j++)
			if (want[j].cgroup_id == old_keys[i].cgroup_id)
				break;
		if (j == n_want)
			bpf_map_delete_elem(b->members_fd, &old_keys[i]);
	}
	for (uint32_t s = 0; s < KT_MAX_BUCKETS; s++)
		if (!sa->state[s] && (b->buckets[s].flags & KT_BUCKET_IN_USE))
			__atomic_store_n(&b->buckets[s].flags, 0, __ATOMIC_RELEASE);
	for (id = 0; id < KT_MAX_LIMITS; id++) {
		if (infos[id].in_use && !id_used[id]) {
			struct kt_limit_info none = { 0 };
			bpf_map_update_elem(b->limits_fd, &id, &none, BPF_ANY);
		}
	}
	ret = 0;
	goto out;

map_err:
	ret = -errno;
	snprintf(err, errlen, "cannot update kernel maps: %s", strerror(-ret));
out:
	kt_classifier_free(&cls);
	free(want);
	free(attach);
	free(rules);
	free(old_keys);
	free(old);
	free(want_vals);
	free(sa);
	return ret;
}
