/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Units packet and byte, on every IP packet a cgroup's sockets send; unit
 * call, on the turns of TCP conversations (lib/call.h); and
 * the datagrams the sendmsg hooks cannot see: those of connected UDP
 * sockets, and all but the first of a GSO send (UDP_SEGMENT).
 *
 * A GSO or TSO packet is charged once per segment it becomes on the wire.
 * A refused packet is dropped (the sender's call fails with EPERM); for TCP
 * the verdict also asks the stack to back off (congestion notification)
 * instead of blindly retransmitting.
 *
 * TCP whose socket the fq qdisc schedules is paced instead (EDT): a packet
 * the bucket cannot take now is given the departure time at which it
 * conforms (skb->tstamp, which fq honours) and charged for then, up to
 * KT_PACE_HORIZON_NS ahead; past that it is dropped as above. A drop stalls
 * the TCP sender until its next ACK or a probe timer (200 ms or more), so
 * with a small burst dropping holds it far below the rate; pacing holds it
 * at the rate. Sockets fq does
 * not schedule (loopback, another qdisc) keep the drop: a timestamp nobody
 * honours would let the packet out at once. So that they rarely meet it,
 * the bucket of a byte limit is recorded per TCP socket (kt_sk_pace), and
 * the sockops program paces the socket itself just below that rate (TCP
 * internal pacing, which needs no fq).
 *
 * Nothing that carries TCP or UDP passes uncharged for want of parsing:
 * IPv6 extension headers are walked up to KT_IPV6_EXT_MAX; a later fragment
 * (no ports), an ESP payload, a truncated or longer header chain is charged
 * against every port range (and, when the protocol is unknown, both
 * protocols) of the limits covering its destination. */
#include "kthrottle.bpf.h"
#include "pace.bpf.h"
#include "lib/net.h"
#include "lib/edt.h"
#include "lib/call.h"


#define KT_IPV6_EXT_MAX 8 /* extension headers walked; beyond: charged as unknown */

/* cgroup_skb verdicts: bit 0 = pass, bit 1 = congestion notification. */
#define SKB_DROP 0
#define SKB_PASS 1
#define SKB_DROP_CN 2

#define KT_SOCK_DGRAM 2 /* SOCK_DGRAM: vmlinux.h has no socket type macros */

#define KT_PROTO_ANY (KT_PROTO_TCP | KT_PROTO_UDP)

/* What the parsers find, packed as (proto mask << 32) | port: proto 0 is
 * not TCP or UDP (pass). They are global functions so the verifier checks
 * each once, on its own: walking a header chain inline would multiply the
 * states of the classification that follows by every path through it. */
#define KT_L4(proto, port) (((__u64)(proto) << 32) | (port))

static __always_inline __u8 kt_proto_of(__u8 l4proto)
{
	return l4proto == IPPROTO_TCP ? KT_PROTO_TCP : l4proto == IPPROTO_UDP ? KT_PROTO_UDP : 0;
}

/* Deepest offset of a transport header read directly from the linear head:
 * IPv4 with options is at most 60 bytes, IPv6 with a few extension headers
 * fits too; deeper ones take bpf_skb_load_bytes. The bound is what lets the
 * verifier check a variable offset. */
#define KT_DIRECT_L4_OFF_MAX 120

/* Destination port of the TCP/UDP header at `off`, or KT_PORT_ANY when it
 * cannot be read (it sits at offset 2 in both). */
static __always_inline __u32 kt_port_at(struct __sk_buff *skb, __u32 off)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	__u16 port, *p;

	/* the common case, in the linear head: direct access */
	if (off <= KT_DIRECT_L4_OFF_MAX) {
		p = data + off + 2;
		if ((void *)(p + 1) <= data_end)
			return bpf_ntohs(*p);
	}
	if (bpf_skb_load_bytes(skb, off + 2, &port, sizeof(port)) < 0)
		return KT_PORT_ANY;
	return bpf_ntohs(port);
}

/* IPv6: walk the extension headers to the transport header. */
__noinline __u64 kt_parse_v6(struct __sk_buff *skb, __u32 nexthdr)
{
	__u32 off = sizeof(struct ipv6hdr);
	__u8 hdr[8], p;
	int i;

	for (i = 0; i < KT_IPV6_EXT_MAX; i++) {
		switch (nexthdr) {
		case IPPROTO_TCP:
		case IPPROTO_UDP:
			return KT_L4(kt_proto_of(nexthdr), kt_port_at(skb, off));
		case NEXTHDR_HOP:
		case NEXTHDR_ROUTING:
		case NEXTHDR_DEST:
			if (bpf_skb_load_bytes(skb, off, hdr, 2) < 0)
				goto unknown;
			nexthdr = hdr[0];
			off += kt_ipv6_opt_len(hdr[1]);
			break;
		case NEXTHDR_AUTH:
			if (bpf_skb_load_bytes(skb, off, hdr, 2) < 0)
				goto unknown;
			nexthdr = hdr[0];
			off += kt_ah_hdr_len(hdr[1]);
			break;
		case NEXTHDR_FRAGMENT:
			if (bpf_skb_load_bytes(skb, off, hdr, KT_IP6_FRAG_HDR_LEN) < 0)
				goto unknown;
			/* a later fragment carries no ports */
			if (((hdr[2] << 8) | hdr[3]) & KT_IP6_FRAG_OFFSET_MASK) {
				p = kt_proto_of(hdr[0]);
				if (!p && (hdr[0] == NEXTHDR_ESP || hdr[0] == NEXTHDR_AUTH))
					p = KT_PROTO_ANY;
				return KT_L4(p, KT_PORT_ANY);
			}
			nexthdr = hdr[0];
			off += KT_IP6_FRAG_HDR_LEN;
			break;
		case NEXTHDR_ESP:
			goto unknown; /* encrypted: the ports are not ours to read */
		default:
			return 0; /* ICMPv6, no next header, ...: not TCP or UDP */
		}
	}
unknown:
	return KT_L4(KT_PROTO_ANY, KT_PORT_ANY);
}

/* IPv4: options are in ihl; a later fragment has no ports; one AH header is
 * walked; ESP is charged as unknown. */
__noinline __u64 kt_parse_v4(struct __sk_buff *skb, __u32 ihl, __u32 proto, __u32 frag_off)
{
	__u32 off = kt_ipv4_hdr_len(ihl);
	__u8 hdr[2], p;

	if (frag_off & KT_IP_OFFSET_MASK) {
		p = kt_proto_of(proto);
		if (!p && (proto == NEXTHDR_ESP || proto == NEXTHDR_AUTH))
			p = KT_PROTO_ANY;
		return KT_L4(p, KT_PORT_ANY);
	}
	if (proto == NEXTHDR_AUTH) {
		if (bpf_skb_load_bytes(skb, off, hdr, 2) < 0)
			return KT_L4(KT_PROTO_ANY, KT_PORT_ANY);
		proto = hdr[0];
		off += kt_ah_hdr_len(hdr[1]);
	}
	if (proto == NEXTHDR_ESP)
		return KT_L4(KT_PROTO_ANY, KT_PORT_ANY);
	p = kt_proto_of(proto);
	return p ? KT_L4(p, kt_port_at(skb, off)) : 0;
}

/* Did the sendmsg hook already charge this packet's first datagram? It
 * runs for unconnected UDP sockets only (a connected or raw one is charged
 * here in full). `sk` is the packet's full socket, or NULL. */
static __always_inline int kt_sendmsg_charged(struct bpf_sock *sk)
{
	return sk && sk->type == KT_SOCK_DGRAM && sk->protocol == IPPROTO_UDP &&
	       sk->state != BPF_TCP_ESTABLISHED;
}

/* A GSO send refused here after sendmsg charged its first datagram: that
 * token goes back, and the counters say the send was refused. */
static __always_inline void kt_refund_first(__u32 slot, __u64 now)
{
	struct kt_bucket *b = bpf_map_lookup_elem(&kt_buckets, &slot);
	struct kt_counters *c = bpf_map_lookup_elem(&kt_counters, &slot);

	if (b) {
		struct kt_bucket *parent = kt_bucket_parent_of(b);

		kt_gcra_refund(b, now, 1);
		if (parent)
			kt_gcra_refund(parent, now, 1);
	}
	if (c && c->admitted) {
		c->admitted--;
		c->throttled++;
	}
}

/* Misses of an unconnected UDP socket's kt_sk_eg entry before it is
 * replaced: such a socket may alternate between destinations, and each
 * replacement frees and allocates the entry. */
#define KT_EG_REPLACE_MISSES 16

static __always_inline int kt_eg_hit(const struct kt_sk_eg *e, __u64 gen, const __u32 *addr,
				     __u32 port, __u8 proto)
{
	return e->gen == gen && e->port == port && e->proto == proto && e->addr[3] == addr[3] &&
	       e->addr[2] == addr[2] && e->addr[1] == addr[1] && e->addr[0] == addr[0];
}

/* kt_classify for a packet. A global function, so the verifier checks the
 * walk over the cgroup's limits once, not once per path through egress. */
__noinline int kt_classify_pkt(struct __sk_buff *skb, const struct kt_cls_req *rq,
			       struct kt_cls *out)
{
	if (!rq || !out)
		return 0;
	kt_classify(skb, 1, rq, out);
	return out->slot != KT_SLOT_NONE;
}

/* Publishes `nv`, the decisions for a destination of the packet's socket
 * (struct kt_sk_eg: replaced whole, never written in place). A global
 * function: the verifier checks it once. */
__noinline int kt_eg_store(struct __sk_buff *skb, const struct kt_sk_eg *nv)
{
	struct bpf_sock *sk = skb->sk;
	struct kt_sk_eg *old, val;

	if (!sk || !nv)
		return 0;
	sk = bpf_sk_fullsock(sk);
	if (!sk)
		return 0;
	old = bpf_sk_storage_get(&kt_sk_eg, sk, 0, 0);
	if (old) {
		/* a stale generation is useless: replace it; a live one of
		 * another destination (an unconnected socket's) only after
		 * repeated misses */
		if (old->gen == nv->gen && sk->state != BPF_TCP_ESTABLISHED &&
		    ++old->misses < KT_EG_REPLACE_MISSES)
			return 0;
		bpf_sk_storage_delete(&kt_sk_eg, sk);
	}
	/* the initial value goes through the stack: a global function's
	 * pointer argument is plain memory, which 6.1's verifier refuses as a
	 * helper's map-value argument (6.6 and later take any memory) */
	val = *nv;
	return bpf_sk_storage_get(&kt_sk_eg, sk, &val, BPF_SK_STORAGE_GET_F_CREATE) != 0;
}

/* Records `slot` as the bucket of the packet's TCP socket when it is a
 * byte limit's, for sockops to pace the socket by. A global function, so
 * the verifier checks it once, not once per path through classification.
 * One storage lookup when nothing changed (the common case). */
__noinline int kt_note_pace(struct __sk_buff *skb, __u32 slot)
{
	struct bpf_sock *sk = skb->sk;
	struct kt_limit_info *li;
	struct kt_sk_pace *ps;
	struct kt_bucket *b;
	__u32 id;

	if (!sk)
		return 0;
	sk = bpf_sk_fullsock(sk);
	if (!sk || sk->protocol != IPPROTO_TCP)
		return 0;
	ps = bpf_sk_storage_get(&kt_sk_pace, sk, 0, 0);
	if (ps && ps->slot == slot)
		return 0;
	b = bpf_map_lookup_elem(&kt_buckets, &slot);
	if (!b)
		return 0;
	id = b->limit_id;
	li = bpf_map_lookup_elem(&kt_limits, &id);
	if (!li || li->unit != KT_UNIT_BYTE) {
		if (ps)
			ps->slot = KT_SLOT_NONE; /* another unit now: sockops unpaces it */
		return 0;
	}
	if (!ps)
		ps = bpf_sk_storage_get(&kt_sk_pace, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!ps)
		return 0;
	ps->slot = slot;
	return 1;
}

SEC("cgroup_skb/egress")
int kt_egress(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct kt_cls pkt = { .slot = KT_SLOT_NONE }, dgram = { .slot = KT_SLOT_NONE };
	__u64 wait_ns, segs, dgrams, l4, gen, now = 0;
	struct bpf_sock *sk = skb->sk;
	struct kt_sk_eg *ec;
	int charged, want_pkt, want_dgram, verdict, any_port;
	__u32 by;
	__u32 addr[4], lport;
	__u16 port;
	__u8 proto;

	if (sk)
		sk = bpf_sk_fullsock(sk);
	segs = skb->gso_segs > 1 ? skb->gso_segs : 1;
	charged = kt_sendmsg_charged(sk);
	/* The common datagram: sendmsg decided it, and no packet or byte
	 * limit exists to read it for. */
	if (segs == 1 && charged && kt_hook_idle(KT_HOOK_EGRESS))
		return SKB_PASS;
	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = data;

		if ((void *)(ip + 1) > data_end)
			return SKB_PASS;
		kt_addr_v4(addr, ip->daddr);
		l4 = kt_parse_v4(skb, ip->ihl, ip->protocol, bpf_ntohs(ip->frag_off));
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = data;

		if ((void *)(ip6 + 1) > data_end)
			return SKB_PASS;
		__builtin_memcpy(addr, &ip6->daddr, 16);
		l4 = kt_parse_v6(skb, ip6->nexthdr);
	} else {
		return SKB_PASS;
	}
	proto = (__u8)(l4 >> 32) & KT_PROTO_ANY;
	any_port = (__u32)l4 >= KT_PORT_ANY;
	port = (__u16)l4;
	lport = any_port ? KT_PORT_ANY : port;
	if (!proto)
		return SKB_PASS;

	dgrams = !(proto & KT_PROTO_UDP) ? 0 : charged ? segs - 1 : segs;
	/* the port filters first: traffic to ports no limit covers, and the
	 * datagrams sendmsg already charged, stop here */
	want_pkt = any_port || kt_port_may_match(KT_HOOK_EGRESS, port);
	want_dgram = dgrams && (any_port || kt_port_may_match(KT_HOOK_SENDMSG, port));
	if (!want_pkt && !want_dgram)
		return SKB_PASS;

	/* One decision per destination and generation: a socket's later
	 * packets find it in kt_sk_eg. The socket's cgroup never changes. */
	gen = kt_generation();
	ec = sk ? bpf_sk_storage_get(&kt_sk_eg, sk, 0, 0) : 0;
	if (ec && gen && kt_eg_hit(ec, gen, addr, lport, proto)) {
		pkt = ec->pkt;
		dgram = ec->dgram;
	} else {
		struct kt_cls_req rq = { .cgid = bpf_skb_cgroup_id(skb), .gen = gen,
					 .hook = KT_HOOK_EGRESS, .proto = proto, .port = port,
					 .any_port = any_port };

		__builtin_memcpy(rq.addr, addr, sizeof(rq.addr));
		/* to be cached, both decisions, whatever this packet needs */
		if (want_pkt || sk)
			kt_classify_pkt(skb, &rq, &pkt);
		if ((proto & KT_PROTO_UDP) && (want_dgram || sk)) {
			rq.hook = KT_HOOK_SENDMSG;
			rq.proto = KT_PROTO_UDP;
			kt_classify_pkt(skb, &rq, &dgram);
		}
		if (sk && gen) {
			struct kt_sk_eg nv = { .gen = gen, .port = lport, .proto = proto,
					       .pkt = pkt, .dgram = dgram };

			__builtin_memcpy(nv.addr, addr, sizeof(nv.addr));
			kt_eg_store(skb, &nv);
		}
	}

	if (want_pkt && pkt.slot != KT_SLOT_NONE && pkt.unit == KT_UNIT_CALL) {
		verdict = kt_call_charge(skb, &pkt);
		if (verdict != KT_CALL_PASS)
			return verdict == KT_CALL_DROP_CN ? SKB_DROP_CN : SKB_DROP;
	} else if (want_pkt && pkt.slot != KT_SLOT_NONE) {
		now = bpf_ktime_get_boot_ns();
		verdict = kt_charge(&pkt, now, skb->len, segs, &wait_ns, &by);
		if (proto == KT_PROTO_TCP && verdict != KT_PASS) {
			kt_note_pace(skb, pkt.slot);
			if (kt_fq_paces(skb)) {
				if (verdict == KT_REFUSE && kt_pace(skb, &pkt, segs, now))
					return SKB_PASS;
				/* admitted now: never before a packet of the same
				 * limit paced earlier (fq would send it first, out
				 * of order) */
				if (verdict == KT_ADMIT)
					kt_depart_at(skb, bpf_ktime_get_ns());
			}
		}
		if (verdict == KT_REFUSE) {
			kt_emit_event(by, bpf_skb_cgroup_id(skb), KT_HOOK_EGRESS, wait_ns, now, KT_EV_BUCKET);
			return proto == KT_PROTO_TCP ? SKB_DROP_CN : SKB_DROP;
		}
		if (verdict == KT_ADMIT_SHADOW)
			kt_emit_event(by, bpf_skb_cgroup_id(skb), KT_HOOK_EGRESS, wait_ns, now, KT_EV_SHADOW);
	}
	if (want_dgram && dgram.slot != KT_SLOT_NONE) {
		if (!now)
			now = bpf_ktime_get_boot_ns();
		verdict = kt_charge(&dgram, now, skb->len, dgrams, &wait_ns, &by);
		if (verdict == KT_REFUSE) {
			if (charged)
				kt_refund_first(dgram.slot, now);
			kt_emit_event(by, bpf_skb_cgroup_id(skb), KT_HOOK_SENDMSG, wait_ns, now, KT_EV_BUCKET);
			return SKB_DROP;
		}
		if (verdict == KT_ADMIT_SHADOW)
			kt_emit_event(by, bpf_skb_cgroup_id(skb), KT_HOOK_SENDMSG, wait_ns, now, KT_EV_SHADOW);
	}
	return SKB_PASS;
}
