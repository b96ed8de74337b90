/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Units: packet and byte, on every IP packet a cgroup's sockets send.
 * A refused packet is dropped; for TCP the verdict also asks the stack to
 * back off (congestion notification) instead of blindly retransmitting. */
#include "kthrottle.bpf.h"

#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD

/* cgroup_skb verdicts: bit 0 = pass, bit 1 = congestion notification. */
#define SKB_DROP 0
#define SKB_PASS 1
#define SKB_DROP_CN 2

SEC("cgroup_skb/egress")
int kt_egress(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct kt_prefix_key key;
	__u8 l4proto, proto;
	__u16 port = 0;
	void *l4;
	__u64 wait_ns;
	int verdict;

	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = data;

		if ((void *)(ip + 1) > data_end)
			return SKB_PASS;
		kt_key_v4(&key, ip->daddr);
		l4proto = ip->protocol;
		/* Later fragments carry no ports: they count under port 0. */
		l4 = (ip->frag_off & bpf_htons(0x1fff)) ? 0 : (void *)ip + ip->ihl * 4;
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = data;

		if ((void *)(ip6 + 1) > data_end)
			return SKB_PASS;
		key.prefixlen = 128;
		__builtin_memcpy(key.addr, &ip6->daddr, 16);
		/* Extension headers are not walked: such packets count under port 0. */
		l4proto = ip6->nexthdr;
		l4 = (void *)(ip6 + 1);
	} else {
		return SKB_PASS;
	}

	if (l4proto == IPPROTO_TCP)
		proto = KT_PROTO_TCP;
	else if (l4proto == IPPROTO_UDP)
		proto = KT_PROTO_UDP;
	else
		return SKB_PASS;

	/* dest port sits at offset 2 in both TCP and UDP headers */
	if (l4 && l4 + 4 <= data_end)
		port = bpf_ntohs(*(__u16 *)(l4 + 2));

	verdict = kt_classify_and_decide(skb, 1, KT_HOOK_EGRESS, proto, &key, port,
					 bpf_skb_cgroup_id(skb), skb->len, &wait_ns);
	if (verdict != KT_REFUSE)
		return SKB_PASS;
	return proto == KT_PROTO_TCP ? SKB_DROP_CN : SKB_DROP;
}
