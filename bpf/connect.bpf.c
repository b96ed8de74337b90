/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Unit: connection. A refused connect() fails at once with EBUSY. */
#include "kthrottle.bpf.h"

static __always_inline int kt_connect(struct bpf_sock_addr *ctx, const __u8 *addr)
{
	__u8 proto = ctx->protocol == IPPROTO_TCP ? KT_PROTO_TCP
		     : ctx->protocol == IPPROTO_UDP ? KT_PROTO_UDP : 0;
	__u16 port = bpf_ntohs(ctx->user_port);
	__u64 wait_ns;

	if (!proto)
		return 1;
	if (kt_classify_and_decide(ctx, 0, KT_HOOK_CONNECT, proto, addr, port,
				   bpf_get_current_cgroup_id(), 1, &wait_ns) != KT_REFUSE)
		return 1;
	bpf_set_retval(-KT_REFUSE_ERRNO);
	return 0;
}

SEC("cgroup/connect4")
int kt_connect4(struct bpf_sock_addr *ctx)
{
	__u8 addr[16];

	kt_v4_mapped(addr, ctx->user_ip4);
	return kt_connect(ctx, addr);
}

SEC("cgroup/connect6")
int kt_connect6(struct bpf_sock_addr *ctx)
{
	__u32 addr[4];

	addr[0] = ctx->user_ip6[0];
	addr[1] = ctx->user_ip6[1];
	addr[2] = ctx->user_ip6[2];
	addr[3] = ctx->user_ip6[3];
	return kt_connect(ctx, (const __u8 *)addr);
}
