/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* cgroup/sock_create: a raw IP socket (SOCK_RAW, AF_INET/AF_INET6) would
 * send around the connect and sendmsg hooks, so a cgroup that is a member
 * of a limit that does not allow them (KT_MEMBER_NO_RAW, the default) cannot
 * create one: socket() fails with EPERM. Its packets would still meet the
 * egress hook (packet and byte limits); AF_PACKET sockets meet no cgroup
 * hook at all and are out of reach here (docs/getting-started.md). Processes in sub-cgroups
 * of a member are found through their ancestors, as elsewhere. */
#include "kthrottle.bpf.h"

#define AF_INET 2
#define AF_INET6 10
#define SOCK_RAW 3

SEC("cgroup/sock_create")
int kt_sock_create(struct bpf_sock *sk)
{
	if (sk->type != SOCK_RAW || (sk->family != AF_INET && sk->family != AF_INET6))
		return 1;
	/* the list of the cgroup or its nearest member ancestor carries the
	 * flags of every limit it is charged under */
	struct kt_anc found;
	struct kt_member_val *v = kt_member_list(sk, 0, bpf_get_current_cgroup_id(),
						 kt_generation(), &found);

	return v && (v->flags & KT_MEMBER_NO_RAW) ? 0 : 1;
}

/* cgroup/sock_release: a socket closed (close(), its process killed, its
 * last reference gone) gives back the in-flight slot it holds, if any.
 * Runs for the sockets of member cgroups of in-flight limits. */
SEC("cgroup/sock_release")
int kt_sock_release(struct bpf_sock *sk)
{
	kt_inflight_give(sk);
	return 1;
}
