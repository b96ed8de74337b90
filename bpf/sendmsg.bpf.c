/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Unit: datagram, for unconnected UDP sockets (the kernel runs these hooks
 * only when sendmsg() carries a destination). Connected UDP is metered by the
 * egress program with unit packet. A refused sendmsg() fails with EBUSY. */
#include "kthrottle.bpf.h"

SEC("cgroup/sendmsg4")
int kt_sendmsg4(struct bpf_sock_addr *ctx)
{
	return kt_sock_addr_verdict(ctx, KT_HOOK_SENDMSG, 0);
}

SEC("cgroup/sendmsg6")
int kt_sendmsg6(struct bpf_sock_addr *ctx)
{
	return kt_sock_addr_verdict(ctx, KT_HOOK_SENDMSG, 1);
}
