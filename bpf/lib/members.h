/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Which member decides for a cgroup: the classifier's generation and the
 * ancestor walk over kt_members, cached per cgroup in kt_anc_cache. */
#ifndef KT_BPF_MEMBERS_H
#define KT_BPF_MEMBERS_H

#include "lib/maps.h"

/* kt_gen[0], read before anything it validates (see struct kt_anc); 0 if
 * the map cannot be read, which no cache entry holds as valid. */
static __always_inline __u64 kt_generation(void)
{
	__u32 zero = 0;
	__u64 *gen = bpf_map_lookup_elem(&kt_gen, &zero);

	return gen ? *gen | (1ULL << 63) : 0;
}

/* The kt_members list that decides for `cgid`: its own, or that of its
 * nearest ancestor that is a member (processes in a pod's container
 * sub-cgroups count against the pod). A member's list already holds the
 * limits of the members it is nested in, so the first found is complete.
 * The answer is cached per cgroup id, members included, so a sub-cgroup and
 * its member cost the same one LRU lookup once warm (on Kubernetes every
 * process runs in a container below its pod: the nested case is the normal
 * one). `ctx` is the program context for the ancestor helper; `gen` is
 * kt_generation(), read before. */
static __always_inline struct kt_member_val *kt_member_list(void *ctx, int is_skb, __u64 cgid,
							     __u64 gen, struct kt_anc *found)
{
	struct kt_member_val *v;
	struct kt_anc *c;
	int level;

	if (!gen)
		return 0;
	c = bpf_map_lookup_elem(&kt_anc_cache, &cgid);
	if (c && c->gen == gen)
		return c->member ? &c->list : 0;
	__builtin_memset(found, 0, sizeof(*found));
	found->gen = gen;
	v = bpf_map_lookup_elem(&kt_members, &cgid);
	if (v) {
		found->member = cgid;
		__builtin_memcpy(&found->list, v, sizeof(found->list));
	}
	for (level = KT_MAX_CGROUP_DEPTH - 1; !v && level >= 1; level--) {
		__u64 anc = is_skb ? bpf_skb_ancestor_cgroup_id(ctx, level)
				   : bpf_get_current_ancestor_cgroup_id(level);
		if (!anc || anc == cgid)
			continue;
		v = bpf_map_lookup_elem(&kt_members, &anc);
		if (v) {
			/* below a pending directory without an entry of its
			 * own: not classified yet, so its join buckets too */
			found->member = anc;
			__builtin_memcpy(&found->list, v, sizeof(found->list));
			found->list.count += kt_member_pending(v);
			if (v->flags & KT_MEMBER_PENDING_NO_RAW)
				found->list.flags |= KT_MEMBER_NO_RAW;
		}
	}
	bpf_map_update_elem(&kt_anc_cache, &cgid, found, BPF_ANY);
	return v ? &found->list : 0;
}

#endif /* KT_BPF_MEMBERS_H */
