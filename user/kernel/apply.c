/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* kt_plan_apply: plan (apply_plan.c: kernel reads only: ids, slots, what
 * each write replaces), commit (every write saved first), rollback. What
 * the maps should hold is layout.c's, how one bucket is written bucket.c's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <bpf/bpf.h>
#include "kernel/apply_int.h"
#include "kernel/verify.h"
#include "kernel/bucket.h"
#include "base/log.h"

int kt_apply_fail_step;

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

		kt_bpf_reset_inflight(a->b, slot);
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
		kt_bpf_reset_inflight(a->b, slot);
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
				kt_coop_publish_as(&a->b->coop[slot - KT_COOP_SLOT0], l->members[j].path,
						   pol->strict_hold_ns << KT_FP_SHIFT, 1, 1);
			} else {
				kt_bucket_make_strict(bk, pol, false);
			}
			s->tat_after = __atomic_load_n(&bk->tat, __ATOMIC_RELAXED);
			return 0;
		}
		if (fresh) {
			kt_coop_publish(&a->b->coop[slot - KT_COOP_SLOT0], l->members[j].path,
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
		kt_bpf_reset_inflight(a->b, slot);
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
/* A limit's kt_limits entry. */
static struct kt_limit_info limit_info_of(const struct kt_limit_rt *l)
{
	const struct kt_limit_cfg *lc = l->cfg;
	struct kt_limit_info li = { .in_use = 1,
				    .unit = lc->unit,
				    .scope = lc->scope,
				    .proto_mask = lc->match.proto_mask,
				    .port_lo = lc->match.port_lo,
				    .port_hi = lc->match.port_hi };

	snprintf(li.name, sizeof(li.name), "%s", lc->name);
	return li;
}

/* A limit's kt_limit_ext entry. */
static struct kt_limit_ext limit_ext_of(const struct kt_limit_rt *l)
{
	return (struct kt_limit_ext){ .max_delay_ms = l->cfg->max_delay_ms };
}

/* After a commit: what verification holds the maps to (verify.h). */
static void note_written(struct apply *a, const struct kt_plan *plan)
{
	uint64_t *ids = calloc(a->n_want ? a->n_want : 1, sizeof(*ids));
	uint32_t *lids = calloc(plan->n_limits ? plan->n_limits : 1, sizeof(*lids));
	struct kt_limit_info *lis = calloc(plan->n_limits ? plan->n_limits : 1, sizeof(*lis));
	struct kt_limit_ext *exts = calloc(plan->n_limits ? plan->n_limits : 1, sizeof(*exts));
	/* every member slot (kt_buckets or kt_coop), and a node and a join
	 * bucket per limit */
	const int cap = KT_MAX_SLOTS + 2 * plan->n_limits;
	uint32_t *slots = calloc((size_t)cap, sizeof(*slots));
	int ret = -ENOMEM, ns = 0;

	if (ids && lids && lis && exts && slots) {
		struct kt_verify_commit c = {
			.cgroup_ids = ids, .vals = a->want_vals, .n = a->n_want,
			.limit_ids = lids, .limits = lis, .exts = exts, .nl = plan->n_limits,
			.dests = a->cls.dests, .nd = a->cls.n_dests, .ports = a->cls.ports,
			.has_idle = a->done_idle, .idle = a->idle,
		};

		for (int i = 0; i < a->n_want; i++)
			ids[i] = a->want[i].cgroup_id;
		for (int i = 0; i < plan->n_limits; i++) {
			const struct kt_limit_rt *l = &plan->limits[i];

			lids[i] = l->id;
			lis[i] = limit_info_of(l);
			exts[i] = limit_ext_of(l);
			ns += kt_limit_slots(l, slots + ns, cap - 2 - ns);
			if (l->has_pool)
				slots[ns++] = l->pool_slot;
			if (l->has_join)
				slots[ns++] = l->join_slot;
		}
		c.slots = slots;
		c.ns = ns;
		ret = kt_verify_note_commit(a->b, &c);
	}
	if (ret)
		kt_warn("out of memory: the maps go unverified until the next change");
	free(ids);
	free(lids);
	free(lis);
	free(exts);
	free(slots);
}

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
		struct kt_limit_info li = limit_info_of(&plan->limits[i]);

		id = plan->limits[i].id;
		if (commit_step(a) || bpf_map_update_elem(b->limits_fd, &id, &li, BPF_ANY) < 0)
			goto map_err;
	}
	for (i = 0; b->limit_ext_fd >= 0 && i < plan->n_limits; i++, a->done_exts++) {
		struct kt_limit_ext ext = limit_ext_of(&plan->limits[i]);

		id = plan->limits[i].id;
		if (commit_step(a) || bpf_map_update_elem(b->limit_ext_fd, &id, &ext, BPF_ANY) < 0)
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
		a->idle = kt_idle_hooks_of(a->cls.ports, KT_HOOK_COUNT);
		if (commit_step(a) || bpf_map_update_elem(b->idle_fd, &zero_key, &a->idle, BPF_ANY) < 0)
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
	kt_bucket_note(a->b, s->slot); /* what verification holds it to now */
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
	for (i = a->done_exts; i-- > 0;) {
		uint32_t id = a->plan->limits[i].id;

		failed += bpf_map_update_elem(b->limit_ext_fd, &id, &a->exts[id], BPF_ANY) < 0;
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
			struct kt_limit_ext no_ext = { 0 };

			bpf_map_update_elem(b->limits_fd, &id, &none, BPF_ANY);
			if (b->limit_ext_fd >= 0)
				bpf_map_update_elem(b->limit_ext_fd, &id, &no_ext, BPF_ANY);
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
	if ((ret = kt_plan_check(plan, err, errlen)) || (ret = kt_apply_plan(a, err, errlen)))
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
	note_written(a, plan);
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
