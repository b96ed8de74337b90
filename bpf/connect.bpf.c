/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Unit: connection (TCP connects, and connect() on UDP sockets). A refused
 * connect() fails at once with EBUSY instead of timing out. */
#include "kthrottle.bpf.h"

SEC("cgroup/connect4")
int kt_connect4(struct bpf_sock_addr *ctx)
{
	return kt_sock_addr_verdict(ctx, KT_HOOK_CONNECT, 0);
}

SEC("cgroup/connect6")
int kt_connect6(struct bpf_sock_addr *ctx)
{
	return kt_sock_addr_verdict(ctx, KT_HOOK_CONNECT, 1);
}
