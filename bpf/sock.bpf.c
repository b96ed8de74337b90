/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* cgroup/sock_create: a raw IP socket (SOCK_RAW, AF_INET/AF_INET6) would
 * send around the connect and sendmsg hooks, so a cgroup that is a member
 * of a limit that does not allow them (KT_MEMBER_NO_RAW, the default) cannot
 * create one: socket() fails with EPERM. Its packets would still meet the
 * egress hook (packet and byte limits); AF_PACKET sockets meet no cgroup
 * hook at all and are out of reach here (README). Processes in sub-cgroups
 * of a member are found through their ancestors, as elsewhere. */
#include "kthrottle.bpf.h"

#define AF_INET 2
#define AF_INET6 10
#define SOCK_RAW 3

/* KT_MEMBER_NO_RAW on the cgroup or its nearest member ancestor. */
static __always_inline int kt_raw_denied(__u64 cgid)
{
	struct kt_member_val *v = bpf_map_lookup_elem(&kt_members, &cgid);
	int level;

	if (v)
		return v->flags & KT_MEMBER_NO_RAW;
	for (level = KT_MAX_CGROUP_DEPTH - 1; level >= 1; level--) {
		__u64 anc = bpf_get_current_ancestor_cgroup_id(level);

		if (!anc || anc == cgid)
			continue;
		v = bpf_map_lookup_elem(&kt_members, &anc);
		if (v)
			return v->flags & KT_MEMBER_NO_RAW;
	}
	return 0;
}

SEC("cgroup/sock_create")
int kt_sock_create(struct bpf_sock *sk)
{
	if (sk->type != SOCK_RAW || (sk->family != AF_INET && sk->family != AF_INET6))
		return 1;
	return kt_raw_denied(bpf_get_current_cgroup_id()) ? 0 : 1;
}
