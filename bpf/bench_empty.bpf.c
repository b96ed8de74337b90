/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Baselines for `make bench`: programs of the same types that do nothing. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("cgroup_skb/egress")
int empty_egress(struct __sk_buff *skb)
{
	return 1;
}

SEC("cgroup/connect4")
int empty_connect4(struct bpf_sock_addr *ctx)
{
	return 1;
}
