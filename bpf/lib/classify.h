/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The destination of a call or packet to the limit that decides it: the
 * port filter in front, the v4-mapped address form, and kt_classify over
 * the deciding member's limits and their kt_dests prefixes. */
#ifndef KT_BPF_CLASSIFY_H
#define KT_BPF_CLASSIFY_H

#include <bpf/bpf_endian.h>
#include "lib/members.h"

/* Cheapest possible exit for traffic no rule of this hook could match: one
 * inlined array lookup and a bit test. */
static __always_inline int kt_port_may_match(__u32 hook, __u16 port)
{
	struct kt_port_filter *f = bpf_map_lookup_elem(&kt_ports, &hook);

	return f && kt_port_filter_test(f, port);
}

/* IPv4 destination as v4-mapped address words (::ffff:a.b.c.d). */
static __always_inline void kt_addr_v4(__u32 *w, __u32 addr_be)
{
	w[0] = 0;
	w[1] = 0;
	w[2] = bpf_htonl(0xffff);
	w[3] = addr_be;
}

/* A destination port the program could not read (a later fragment, a
 * header it cannot walk): such traffic matches every port range, so it is
 * charged, never passed. Callers pass it as any_port. */
#define KT_PORT_ANY 0x10000u

/* What kt_classify needs of a call or packet: its full-length destination
 * (v4-mapped for IPv4), the port in host order (ignored with any_port), a
 * KT_PROTO_* mask, the hook, and the cgroup and generation it is decided
 * for. One struct: a global function takes at most five arguments. */
struct kt_cls_req {
	__u32 addr[4];
	__u64 cgid;
	__u64 gen;
	__u32 hook;
	__u32 proto;
	__u32 port;
	__u32 any_port;
};

/*
 * Classify a destination: of the limits in the cgroup's list
 * (kt_member_list) whose hook, protocol and port match and whose kt_dests
 * prefixes cover the destination, the one with the most specific prefix,
 * then the first in the config. At most KT_LIMITS_PER_CGROUP lookups,
 * whatever the number of limits on the node. Fills *out (slot KT_SLOT_NONE:
 * pass). The port filter (kt_ports) is only a shortcut in front of this:
 * the limits' own port ranges decide here.
 */
static __always_inline void kt_classify(void *ctx, int is_skb, const struct kt_cls_req *req,
					struct kt_cls *out)
{
	__u8 proto = (__u8)req->proto;
	__u16 port = (__u16)req->port;
	struct kt_member_val *v;
	struct kt_dest_key dk;
	struct kt_anc found;
	__u64 best_prio = 0;
	int i;

	out->slot = KT_SLOT_NONE;
	out->refuse_errno = 0;
	out->unit = 0;
	out->pad = 0;
	v = kt_member_list(ctx, is_skb, req->cgid, req->gen, &found);
	if (!v)
		return;

	dk.prefixlen = KT_DEST_KEY_BITS;
	__builtin_memcpy(dk.addr, req->addr, 16);
	for (i = 0; i < KT_LIMITS_PER_CGROUP; i++) {
		struct kt_limit_info *li;
		struct kt_dest_val *d;
		__u32 id;
		__u64 prio;

		if (i >= v->count)
			break;
		id = v->ents[i].limit_id;
		li = bpf_map_lookup_elem(&kt_limits, &id);
		if (!li || kt_hook_for_unit(li->unit) != req->hook || !(li->proto_mask & proto) ||
		    (!req->any_port && (port < li->port_lo || port > li->port_hi)))
			continue;
		dk.limit_id = id;
		d = bpf_map_lookup_elem(&kt_dests, &dk);
		if (!d)
			continue;
		prio = kt_dest_priority(d);
		if (prio > best_prio) {
			best_prio = prio;
			out->slot = v->ents[i].slot;
			out->unit = li->unit;
			out->refuse_errno = d->refuse_errno;
		}
	}
}

#endif /* KT_BPF_CLASSIFY_H */
