/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Baselines for `make bench`: programs of the same types that do nothing,
 * and one that only reads the clock. */
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

/* Only the clock read kt_egress does per matched packet: the difference to
 * empty_egress is what bpf_ktime_get_boot_ns() adds to a decision. */
SEC("cgroup_skb/egress")
int clock_egress(struct __sk_buff *skb)
{
	__u64 ts = bpf_ktime_get_boot_ns();

	/* always 1 (pass); the helper call stays even where clang folds this */
	return (ts & 1) | 1;
}

/* The baseline of the XDP tag decision (xdp.bpf.c): a program that passes. */
SEC("xdp")
int empty_xdp(struct xdp_md *ctx)
{
	return XDP_PASS;
}

/* Only the clock read kt_xdp_tags does per charged packet (the coarse
 * clock, see kt_xdp_now). */
SEC("xdp")
int clock_xdp(struct xdp_md *ctx)
{
	__u64 ts = bpf_ktime_get_coarse_ns();

	/* always XDP_PASS (2); the helper call stays */
	return (ts & 0) | XDP_PASS;
}
