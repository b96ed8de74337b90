/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* In-flight limits (unit concurrent): a connect takes a slot of its
 * member's bucket (and of the node bucket it is chained to) while fewer
 * than the share are open; the socket gives it back when it closes. See
 * struct kt_inflight and struct kt_sk_slot. */
#ifndef KT_INFLIGHT_BPF_H
#define KT_INFLIGHT_BPF_H

#include "lib/charge.h"

/* One slot of the bucket in `slot` taken, unless all `cap` are open;
 * returns its kt_inflight entry, or NULL (refused, or no entry). */
static __always_inline struct kt_inflight *kt_slot_take(__u32 slot, __u64 cap)
{
	struct kt_inflight *in = bpf_map_lookup_elem(&kt_inflight, &slot);
	__u64 n;

	if (!in)
		return 0;
	/* add first, then look: two connects racing for the last slot
	 * cannot both see it free */
	n = __sync_fetch_and_add(&in->open, 1);
	if (n >= cap) {
		__sync_fetch_and_add(&in->open, -1);
		return 0;
	}
	if (n + 1 > in->peak)
		in->peak = n + 1; /* racy: a peak, not a count */
	return in;
}

/* The slot taken in `slot` under `epoch` given back (nothing when the
 * slot has had a new owner since, or counts none: a count written by hand
 * or a limit that changed its unit never wraps below 0). */
static __always_inline void kt_slot_give(__u32 slot, __u32 epoch)
{
	struct kt_inflight *in = bpf_map_lookup_elem(&kt_inflight, &slot);

	if (in && KT_READ_ONCE(in->epoch) == epoch && KT_READ_ONCE(in->open))
		__sync_fetch_and_add(&in->open, -1);
}

/*
 * A connect of `sk` classified to an in-flight limit's bucket (cls).
 * KT_ADMIT: a slot is taken and the socket holds it; KT_PASS: the socket
 * already holds one (a connect repeated on it), nothing taken; KT_REFUSE:
 * no slot free (*by: the bucket that had none), or the socket cannot hold
 * a mark (no slot taken that nothing would give back).
 */
static __always_inline int kt_inflight_take(struct bpf_sock *sk, const struct kt_cls *cls,
					    __u64 now, __u32 *by)
{
	struct kt_bucket *b, *p;
	struct kt_inflight *in, *pin = 0;
	struct kt_sk_slot *m;
	__u32 slot = cls->slot, pslot = KT_SLOT_NONE;

	*by = slot;
	if (!sk)
		return KT_REFUSE;
	m = bpf_sk_storage_get(&kt_sk_slot, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!m)
		return KT_REFUSE;
	if (KT_READ_ONCE(m->held))
		return KT_PASS;
	b = bpf_map_lookup_elem(&kt_buckets, &slot);
	if (!b)
		return KT_PASS; /* gone meanwhile: it cannot refuse */
	p = kt_bucket_parent_of(b);
	in = kt_slot_take(slot, kt_slots_in_force(b, now));
	if (!in)
		return KT_REFUSE;
	if (p) {
		pslot = kt_bucket_parent(KT_READ_ONCE(b->flags));
		pin = kt_slot_take(pslot, kt_slots_in_force(p, now));
		if (!pin) {
			__sync_fetch_and_add(&in->open, -1);
			*by = pslot;
			return KT_REFUSE;
		}
	}
	m->slot = slot;
	m->epoch = KT_READ_ONCE(in->epoch);
	m->node_slot = pin ? pslot : KT_SLOT_NONE;
	m->node_epoch = pin ? KT_READ_ONCE(pin->epoch) : 0;
	m->taken_ns = now;
	m->held = 1;
	return KT_ADMIT;
}

/* The slots of a socket's mark given back, if it still holds them: only
 * the caller that takes held from 1 to 0 gives. */
static __always_inline void kt_mark_give(struct kt_sk_slot *m)
{
	if (!m || !KT_READ_ONCE(m->held) || __sync_val_compare_and_swap(&m->held, 1, 0) != 1)
		return;
	kt_slot_give(m->slot, m->epoch);
	if (m->node_slot != KT_SLOT_NONE)
		kt_slot_give(m->node_slot, m->node_epoch);
}

/* The socket's slots given back, if it holds any: from its close and from
 * its TCP state reaching CLOSE, whichever comes first (the other finds
 * nothing held). */
static __always_inline void kt_inflight_give(struct bpf_sock *sk)
{
	if (sk)
		kt_mark_give(bpf_sk_storage_get(&kt_sk_slot, sk, 0, 0));
}

/* Whether the socket holds a slot (its TCP state changes must be seen). */
static __always_inline int kt_inflight_held(struct bpf_sock *sk)
{
	struct kt_sk_slot *m = sk ? bpf_sk_storage_get(&kt_sk_slot, sk, 0, 0) : 0;

	return m && KT_READ_ONCE(m->held);
}

#endif
