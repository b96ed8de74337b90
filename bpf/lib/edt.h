/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Departure times (EDT): a TCP packet whose socket the fq qdisc schedules
 * can be given the time it conforms at (skb->tstamp, which fq honours)
 * instead of being dropped. Used by the egress program for packet and
 * byte limits, and for the turn starts of call limits (lib/call.h). */
#ifndef KT_BPF_EDT_H
#define KT_BPF_EDT_H

#include "lib/charge.h"

/* Whether fq schedules this TCP packet's socket: fq marks a socket whose
 * packets it queues SK_PACING_FQ (and then honours skb->tstamp); TCP then
 * leaves pacing to it. Anything else (no full TCP socket, another qdisc,
 * loopback's none) is not known to honour a departure time. */
static __always_inline int kt_fq_paces(struct __sk_buff *skb)
{
	struct bpf_sock *sk = skb->sk;
	struct tcp_sock *tp;

	if (!sk)
		return 0;
	tp = bpf_skc_to_tcp_sock(sk);
	return tp && tp->inet_conn.icsk_inet.sk.sk_pacing_status == SK_PACING_FQ;
}

/* Departure no earlier than `at` (CLOCK_MONOTONIC ns, the clock of
 * skb->tstamp for TCP and of fq), nor than the one TCP set itself. */
static __always_inline void kt_depart_at(struct __sk_buff *skb, __u64 at)
{
	if ((__s64)(at - skb->tstamp) > 0)
		skb->tstamp = at;
}

/* A TCP packet refused by the bucket `cls` names: pace it instead when
 * its departure lies within the horizon. Charges the bucket (in the
 * limit's unit) at `now` and moves the packet from the throttled counters
 * kt_charge wrote to the admitted ones. 1 if paced, 0 to drop. */
static __always_inline int kt_pace(struct __sk_buff *skb, const struct kt_cls *cls, __u64 segs,
				   __u64 now)
{
	__u32 slot = cls->slot;
	struct kt_bucket *b = bpf_map_lookup_elem(&kt_buckets, &slot);
	struct kt_counters *c = bpf_map_lookup_elem(&kt_counters, &slot);
	struct kt_bucket *parent;
	__u64 wait, parent_wait, cost, mono;

	/* a limit with a parent is not paced: its levels above decide too */
	if (!b || !c || (KT_READ_ONCE(b->flags) & KT_BUCKET_UP))
		return 0;
	cost = cls->unit == KT_UNIT_BYTE ? skb->len : segs;
	mono = bpf_ktime_get_ns(); /* the clock of skb->tstamp */
	if (kt_gcra_pace(b, now, cost, KT_PACE_HORIZON_NS, &wait) != KT_ADMIT)
		return 0;
	/* a chained member's packet departs when both buckets allow it */
	parent = kt_bucket_parent_of(b);
	if (parent) {
		if (kt_gcra_pace(parent, now, cost, KT_PACE_HORIZON_NS, &parent_wait) != KT_ADMIT) {
			kt_gcra_refund(b, now, cost);
			return 0;
		}
		if (parent_wait > wait)
			wait = parent_wait;
	}
	kt_depart_at(skb, mono + wait);
	if (c->throttled >= segs)
		c->throttled -= segs;
	if (c->throttled_bytes >= skb->len)
		c->throttled_bytes -= skb->len;
	c->admitted += segs;
	c->admitted_bytes += skb->len;
	return 1;
}

#endif /* KT_BPF_EDT_H */
