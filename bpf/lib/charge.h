/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Charging a classified request: the member's bucket, the node bucket it
 * is chained to, the parents it is charged up to (kt_up), shadow limits,
 * and the counters. */
#ifndef KT_BPF_CHARGE_H
#define KT_BPF_CHARGE_H

#include "lib/maps.h"

/* The node bucket `b` is chained to (KT_BUCKET_CHAINED), or NULL. A parent
 * that is no node bucket of the same limit (a slot written by hand, or
 * reused) is ignored: the member's own bucket still decides. */
static __always_inline struct kt_bucket *kt_bucket_parent_of(const struct kt_bucket *b)
{
	__u32 slot = kt_bucket_parent(KT_READ_ONCE(b->flags));
	struct kt_bucket *p;

	if (slot == KT_SLOT_NONE)
		return 0;
	p = bpf_map_lookup_elem(&kt_buckets, &slot);
	if (!p || (KT_READ_ONCE(p->flags) & (KT_BUCKET_IN_USE | KT_BUCKET_POOL)) !=
			  (KT_BUCKET_IN_USE | KT_BUCKET_POOL) ||
	    KT_READ_ONCE(p->limit_id) != KT_READ_ONCE(b->limit_id))
		return 0;
	return p;
}

/* A refusal by a shadow limit's bucket: counted in kt_shadow, passed. */
static __always_inline int kt_shadow_pass(__u32 slot, __u64 bytes, __u64 units)
{
	struct kt_shadow_counters *s = bpf_map_lookup_elem(&kt_shadow, &slot);

	if (s) {
		s->refused += units;
		s->refused_bytes += bytes;
	} else {
		struct kt_shadow_counters first = { .refused = units, .refused_bytes = bytes };

		bpf_map_update_elem(&kt_shadow, &slot, &first, BPF_NOEXIST);
	}
	return KT_ADMIT_SHADOW;
}

/*
 * The levels above a call's own limit (parent:, KT_BUCKET_UP). Each step is
 * a global function: the verifier checks a global function once per
 * program, with unknown arguments, and its callers see only its return
 * value. Inlined, the three levels' GCRA paths multiplied each other and
 * cost every program load ~100k more verified instructions.
 */

/* The slot one level up from `slot`: kt_up's entry when its bucket is
 * flagged KT_BUCKET_UP and the bucket there is in use; else KT_SLOT_NONE. */
__noinline __u32 kt_level_up(__u32 slot)
{
	struct kt_bucket *b = bpf_map_lookup_elem(&kt_buckets, &slot), *ub;
	__u32 *next, s;

	if (!b || !(KT_READ_ONCE(b->flags) & KT_BUCKET_UP))
		return KT_SLOT_NONE;
	next = bpf_map_lookup_elem(&kt_up, &slot);
	if (!next)
		return KT_SLOT_NONE;
	s = *next;
	ub = bpf_map_lookup_elem(&kt_buckets, &s);
	if (!ub || !(KT_READ_ONCE(ub->flags) & KT_BUCKET_IN_USE))
		return KT_SLOT_NONE;
	return s;
}

/* One level's decision on the bucket in `slot` and the node bucket it is
 * chained to: KT_ADMIT, KT_REFUSE (*wait_ns set), or KT_ADMIT_SHADOW (a
 * shadow limit's refusal, to be passed; the caller counts it). */
__noinline int kt_level_decide(__u32 slot, __u64 now, __u64 cost, __u64 *wait_ns)
{
	struct kt_bucket *b = bpf_map_lookup_elem(&kt_buckets, &slot);
	__u64 w = 0;

	if (!b || !wait_ns)
		return KT_ADMIT; /* gone meanwhile: it cannot refuse */
	if (kt_gcra_decide_chained(b, kt_bucket_parent_of(b), now, cost, &w) == KT_ADMIT)
		return KT_ADMIT;
	*wait_ns = w;
	return (KT_READ_ONCE(b->flags) & KT_BUCKET_SHADOW) ? KT_ADMIT_SHADOW : KT_REFUSE;
}

/* A shadow level's refusal counted in kt_shadow. */
__noinline int kt_level_shadow(__u32 slot, __u64 bytes, __u64 units)
{
	return kt_shadow_pass(slot, bytes, units);
}

/* Gives back `cost` to the bucket in `slot` and the node bucket it is
 * chained to: a level that admitted a call a level above refused. */
__noinline int kt_level_refund(__u32 slot, __u64 now, __u64 cost)
{
	struct kt_bucket *b = bpf_map_lookup_elem(&kt_buckets, &slot), *p;

	if (!b)
		return 0;
	p = kt_bucket_parent_of(b);
	kt_gcra_refund(b, now, cost);
	if (p)
		kt_gcra_refund(p, now, cost);
	return 0;
}

/* The call counted in the counters of the level in `slot`. */
__noinline int kt_level_count(__u32 slot, __u64 units, __u64 bytes, int refused)
{
	struct kt_counters *c = bpf_map_lookup_elem(&kt_counters, &slot);

	if (!c)
		return 0;
	if (refused) {
		c->throttled += units;
		c->throttled_bytes += bytes;
	} else {
		c->admitted += units;
		c->admitted_bytes += bytes;
	}
	return 0;
}

/* One call's charge of the levels above its own limit (kt_charge_up). */
struct kt_up_req {
	__u64 now, cost, units, bytes;
	__u64 wait_ns;  /* out: the wait of the level that refused */
	__u32 slot;     /* in: the call's own bucket */
	__u32 by;       /* out: the level that refused, or shadow-refused */
	__s32 verdict;  /* in: the own level's, KT_ADMIT or KT_ADMIT_SHADOW */
	__u32 took;     /* in: the own level took its tokens (not a shadow pass) */
};

/* The levels above r->slot's limit: KT_ADMIT when all admit,
 * KT_ADMIT_SHADOW when only shadow limits refused, else KT_REFUSE with
 * every level below given its tokens back, so a refused call costs no
 * level anything. Counts each level's outcome in its counters (the own
 * level's are the caller's): admitted at every level, or refused at the
 * level that refused. Only calls of a limit with a parent run it. */
__noinline int kt_charge_up(struct kt_up_req *r)
{
	__u32 lv[KT_MAX_LEVELS - 1] = {}, cur, refused = 0, took = 0, n = 0;
	int verdict, i;

	if (!r)
		return KT_REFUSE;
	cur = r->slot;
	verdict = r->verdict;
	for (i = 0; i < KT_MAX_LEVELS - 1; i++) {
		__u64 w = 0;
		__u32 up = kt_level_up(cur);
		int v;

		if (up == KT_SLOT_NONE)
			break;
		lv[i] = up;
		n = i + 1;
		v = kt_level_decide(up, r->now, r->cost, &w);
		if (v == KT_ADMIT) {
			took |= 1u << i;
		} else if (v == KT_ADMIT_SHADOW) {
			kt_level_shadow(up, r->bytes, r->units);
			if (verdict == KT_ADMIT) {
				verdict = KT_ADMIT_SHADOW;
				r->by = up;
				r->wait_ns = w;
			}
		} else {
			refused = 1;
			r->by = up;
			r->wait_ns = w;
			break;
		}
		cur = up;
	}
	if (refused) {
		for (i = 0; i < KT_MAX_LEVELS - 1; i++)
			if (took & (1u << i))
				kt_level_refund(lv[i], r->now, r->cost);
		if (r->took)
			kt_level_refund(r->slot, r->now, r->cost);
		kt_level_count(r->by, r->units, r->bytes, 1);
		return KT_REFUSE;
	}
	for (i = 0; i < KT_MAX_LEVELS - 1; i++)
		if ((__u32)i < n)
			kt_level_count(lv[i], r->units, r->bytes, 0);
	return verdict;
}

/*
 * Charge the bucket `cls` names at `now` (and the node bucket it is chained
 * to): `bytes` for unit byte, else
 * `units` (packets or datagrams this call carries: a GSO send carries
 * many). Per-CPU counters count the outcome. KT_ADMIT, KT_REFUSE (with
 * *wait_ns), KT_ADMIT_SHADOW (a shadow limit's refusal, passed: counted
 * admitted here, refused in kt_shadow) or KT_PASS when the slot cannot be
 * read. A limit with a parent charges every level up (kt_charge_up).
 * *by: the bucket whose refusal (or shadow refusal) decided, for events.
 */
static __always_inline int kt_charge(const struct kt_cls *cls, __u64 now, __u64 bytes,
				     __u64 units, __u64 *wait_ns, __u32 *by)
{
	__u32 slot = cls->slot;
	struct kt_bucket *b = bpf_map_lookup_elem(&kt_buckets, &slot);
	struct kt_counters *c = bpf_map_lookup_elem(&kt_counters, &slot);
	struct kt_bucket *parent;
	int verdict;

	*wait_ns = 0;
	*by = slot;
	if (!b || !c)
		return KT_PASS;
	parent = kt_bucket_parent_of(b);
	/* the same decision twice over: units == 1 is the hot case (one call,
	 * one datagram), and a constant cost lets the inlined GCRA fold away
	 * its multiply by the cost there */
	if (cls->unit == KT_UNIT_BYTE)
		verdict = kt_gcra_decide_chained(b, parent, now, bytes, wait_ns);
	else if (units == 1)
		verdict = kt_gcra_decide_chained(b, parent, now, 1, wait_ns);
	else
		verdict = kt_gcra_decide_chained(b, parent, now, units, wait_ns);
	/* Per-CPU counters, in the limit's tokens (a GSO send counts each
	 * datagram): plain adds, no atomics on the hot path. */
	if (verdict == KT_REFUSE && (KT_READ_ONCE(b->flags) & KT_BUCKET_SHADOW))
		verdict = kt_level_shadow(slot, bytes, units);
	if (verdict != KT_REFUSE && (KT_READ_ONCE(b->flags) & KT_BUCKET_UP)) {
		struct kt_up_req r = { .now = now, .cost = cls->unit == KT_UNIT_BYTE ? bytes : units,
				       .units = units, .bytes = bytes, .slot = slot, .by = slot,
				       .verdict = verdict, .took = verdict == KT_ADMIT };

		verdict = kt_charge_up(&r);
		if (verdict != KT_ADMIT) {
			*wait_ns = r.wait_ns;
			*by = r.by;
		}
	}
	if (verdict != KT_REFUSE) {
		c->admitted += units;
		c->admitted_bytes += bytes;
	} else {
		c->throttled += units;
		c->throttled_bytes += bytes;
	}
	return verdict;
}

#endif /* KT_BPF_CHARGE_H */
