/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Unit: datagram, for unconnected UDP sockets (the kernel runs these hooks
 * only when sendmsg() carries a destination). Connected UDP is metered by the
 * egress program with unit packet. A refused sendmsg() fails with EBUSY. */
#include "kthrottle.bpf.h"

static __always_inline int kt_sendmsg(struct bpf_sock_addr *ctx, const __u8 *addr)
{
	__u16 port = bpf_ntohs(ctx->user_port);
	__u64 wait_ns;

	if (kt_classify_and_decide(ctx, 0, KT_HOOK_SENDMSG, KT_PROTO_UDP, addr, port,
				   bpf_get_current_cgroup_id(), 1, &wait_ns) != KT_REFUSE)
		return 1;
	bpf_set_retval(-KT_REFUSE_ERRNO);
	return 0;
}

SEC("cgroup/sendmsg4")
int kt_sendmsg4(struct bpf_sock_addr *ctx)
{
	__u8 addr[16];

	kt_v4_mapped(addr, ctx->user_ip4);
	return kt_sendmsg(ctx, addr);
}

SEC("cgroup/sendmsg6")
int kt_sendmsg6(struct bpf_sock_addr *ctx)
{
	__u32 addr[4];

	addr[0] = ctx->user_ip6[0];
	addr[1] = ctx->user_ip6[1];
	addr[2] = ctx->user_ip6[2];
	addr[3] = ctx->user_ip6[3];
	return kt_sendmsg(ctx, (const __u8 *)addr);
}
