/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Link and network header numbers the packet parsers share: vmlinux.h
 * has the kernel's structs but not the uapi macros. */
#ifndef KT_BPF_NET_H
#define KT_BPF_NET_H

#include "vmlinux.h"

/* EtherTypes */
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_P_8021Q 0x8100  /* VLAN tag */
#define ETH_P_8021AD 0x88A8 /* QinQ outer tag */

/* IPv6 next headers that are extension headers (and ESP) */
#define NEXTHDR_HOP 0
#define NEXTHDR_ROUTING 43
#define NEXTHDR_FRAGMENT 44
#define NEXTHDR_ESP 50
#define NEXTHDR_AUTH 51
#define NEXTHDR_NONE 59
#define NEXTHDR_DEST 60

/* IPv4 frag_off (host order): the fragment offset, non-zero in a later
 * fragment */
#define KT_IP_OFFSET_MASK 0x1fff
/* IPv6 fragment header bytes 2..3 (host order): the offset, in its top 13
 * bits */
#define KT_IP6_FRAG_OFFSET_MASK 0xfff8
#define KT_IP6_FRAG_HDR_LEN 8

/* address widths */
#define KT_IPV4_BITS 32
#define KT_IPV6_BITS 128

/* Header lengths from their length fields */
static __always_inline __u32 kt_ipv4_hdr_len(__u32 ihl)
{
	return ihl * 4; /* 32-bit words */
}

/* hop-by-hop, routing, destination options: 8-byte units, the first not
 * counted */
static __always_inline __u32 kt_ipv6_opt_len(__u8 hdrlen)
{
	return ((__u32)hdrlen + 1) * 8;
}

/* AH (both families): 32-bit words, minus 2 */
static __always_inline __u32 kt_ah_hdr_len(__u8 payload_len)
{
	return ((__u32)payload_len + 2) * 4;
}

#endif /* KT_BPF_NET_H */
