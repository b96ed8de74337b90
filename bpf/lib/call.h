/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Unit call: the calls a TCP socket sends, counted on egress as turns of
 * the conversation (struct kt_sk_call), whatever the protocol above TCP.
 *
 * A turn's first segment is charged; the rest of the turn, retransmissions,
 * pure ACKs and a connection's TLS handshake flights pass uncharged. A
 * refused turn start is dropped: the transmit fails, TCP leaves the data
 * queued (snd_nxt does not move, nothing after it is sent) and sends it
 * again by itself, from its probe timer (200 ms first) or at the
 * application's next write; this program then decides it again. The
 * application sees a call that waits, never an error, and nothing is sent
 * twice or out of order. The first probes are dropped with congestion
 * notification, the later ones plainly (kt_call_quick_retry). Where the
 * fq qdisc schedules the socket, a refused turn start is sent instead at
 * the time it conforms (EDT, lib/edt.h), and the socket's later segments
 * no earlier (kt_sk_depart). Only the egress object declares the maps
 * (pinned by name). */
#ifndef KT_BPF_CALL_H
#define KT_BPF_CALL_H

#include "lib/charge.h"
#include "lib/edt.h"
#include "lib/events.h"
#include "lib/net.h"

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct kt_sk_call);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_sk_call SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct kt_sk_depart);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_sk_depart SEC(".maps");

#define KT_TCP_HDR_MIN 20
#define KT_IPV4_HDR_MIN 20
#define KT_IPV4_HDR_MAX 60 /* ihl 15 */
#define KT_IPV6_HDR_LEN 40

/* seq a comes after seq b, modulo 2^32 */
static __always_inline int kt_seq_after(__u32 a, __u32 b)
{
	return (__s32)(a - b) > 0;
}

/* Where a TCP segment stands, read from the packet. */
struct kt_tcp_seg {
	__u32 seq, ack;
	__u32 payload_off; /* from the network header */
	__u32 payload_len;
};

/* The TCP header of an IP packet, or -1 when it cannot be found (IPv6
 * extension headers, IPv4 fragments, a truncated header): such a packet's
 * turn is unknown and charged as a call. */
static __always_inline int kt_tcp_seg_read(struct __sk_buff *skb, struct kt_tcp_seg *s)
{
	__u8 ip[KT_IPV4_HDR_MIN], th[KT_TCP_HDR_MIN];
	__u32 l4off, hdr;

	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		if (bpf_skb_load_bytes(skb, 0, ip, sizeof(ip)) < 0)
			return -1;
		/* protocol at byte 9; fragment offset in bytes 6-7 */
		if (ip[9] != IPPROTO_TCP || (((ip[6] << 8) | ip[7]) & KT_IP_OFFSET_MASK))
			return -1;
		l4off = kt_ipv4_hdr_len(ip[0] & 0xf);
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		/* next header at byte 6 */
		if (bpf_skb_load_bytes(skb, 6, ip, 1) < 0 || ip[0] != IPPROTO_TCP)
			return -1;
		l4off = KT_IPV6_HDR_LEN;
	} else {
		return -1;
	}
	if (l4off < KT_IPV4_HDR_MIN || l4off > KT_IPV4_HDR_MAX ||
	    bpf_skb_load_bytes(skb, l4off, th, sizeof(th)) < 0)
		return -1;
	s->seq = ((__u32)th[4] << 24) | ((__u32)th[5] << 16) | ((__u32)th[6] << 8) | th[7];
	s->ack = ((__u32)th[8] << 24) | ((__u32)th[9] << 16) | ((__u32)th[10] << 8) | th[11];
	hdr = (th[12] >> 4) * 4; /* data offset, in 32-bit words */
	if (hdr < KT_TCP_HDR_MIN)
		return -1;
	s->payload_off = l4off + hdr;
	/* skb->len, not the IP length: a TSO packet's covers all its segments */
	s->payload_len = skb->len > s->payload_off ? skb->len - s->payload_off : 0;
	return 0;
}

#define KT_CALL_NONE 0 /* no call starts in this segment: pass it uncharged */
#define KT_CALL_TURN 1 /* a call starts here: charge it */

/* Is this TCP segment a call's start? Updates the socket's state for
 * everything but a turn start, which kt_call_passed records once admitted
 * (so a refused one stays a turn start when TCP sends it again). A global
 * function, like kt_call_passed: its header buffers stay off the stack of
 * kt_call_charge, whose calls down to the levels above a limit would
 * otherwise pass 6.1's 512 bytes for a chain of frames. */
__noinline int kt_call_turn(struct __sk_buff *skb, struct kt_tcp_seg *s)
{
	struct bpf_sock *sk = skb->sk;
	struct kt_sk_call *st;
	__u32 end;
	__u8 first;

	if (!s)
		return KT_CALL_TURN;
	if (kt_tcp_seg_read(skb, s) < 0)
		return KT_CALL_TURN;
	if (!s->payload_len)
		return KT_CALL_NONE; /* SYN, pure ACK, FIN, RST */
	if (sk)
		sk = bpf_sk_fullsock(sk);
	if (!sk)
		return KT_CALL_TURN;
	st = bpf_sk_storage_get(&kt_sk_call, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st)
		return KT_CALL_TURN; /* no state, no memory of turns: charge */
	end = s->seq + s->payload_len;
	if (st->flags & KT_SK_CALL_SEEN) {
		if (!kt_seq_after(end, st->next_seq))
			return KT_CALL_NONE; /* sent before: a retransmission */
		if (s->ack == st->last_ack && !(st->flags & KT_SK_CALL_HANDSHAKE)) {
			st->next_seq = end; /* the peer said nothing since: same turn */
			return KT_CALL_NONE;
		}
	}
	/* a new turn: a TLS handshake flight early in the connection is no call */
	if (st->turns < KT_CALL_HANDSHAKE_TURNS &&
	    bpf_skb_load_bytes(skb, s->payload_off, &first, 1) == 0 &&
	    (first == KT_TLS_HANDSHAKE_RECORD || first == KT_TLS_CCS_RECORD)) {
		st->next_seq = end;
		st->last_ack = s->ack;
		st->turns++;
		st->flags |= KT_SK_CALL_SEEN | KT_SK_CALL_HANDSHAKE;
		return KT_CALL_NONE;
	}
	return KT_CALL_TURN;
}

/* A turn start admitted: the rest of it, and its retransmissions, pass. */
__noinline int kt_call_passed(struct __sk_buff *skb, const struct kt_tcp_seg *s)
{
	struct bpf_sock *sk = skb->sk;
	struct kt_sk_call *st;

	if (!s)
		return 0;
	if (sk)
		sk = bpf_sk_fullsock(sk);
	if (!sk || !s->payload_len)
		return 0;
	st = bpf_sk_storage_get(&kt_sk_call, sk, 0, 0);
	if (!st)
		return 0;
	st->next_seq = s->seq + s->payload_len;
	st->last_ack = s->ack;
	st->turns++;
	st->flags = (st->flags | KT_SK_CALL_SEEN) & ~KT_SK_CALL_HANDSHAKE;
	return 1;
}

/* How a held turn start is dropped. With congestion notification TCP
 * takes the failed send for local congestion: it tries again after
 * TCP_RESOURCE_PROBE_INTERVAL (500 ms) without backing off, but it still
 * counts the probe, and it ends the connection after tcp_retries2 (15)
 * failed probes in a row. A plain drop backs off (400 ms, 800 ms, ...,
 * 120 s), so reaching 15 takes minutes. So the first
 * KT_CALL_QUICK_PROBES probes of a held call are quick, the rest back
 * off: waits up to ~1.7 s cost no backoff, and no wait breaks the
 * connection. */
#define KT_CALL_QUICK_PROBES 4
#define KT_CALL_PASS 1
#define KT_CALL_DROP 0
#define KT_CALL_DROP_CN 2

static __always_inline int kt_call_quick_retry(struct __sk_buff *skb)
{
	struct bpf_sock *sk = skb->sk;
	struct tcp_sock *tp;

	if (!sk)
		return 0;
	tp = bpf_skc_to_tcp_sock(sk);
	return tp && tp->inet_conn.icsk_probes_out < KT_CALL_QUICK_PROBES;
}

/* A payload segment of a socket the fq qdisc schedules: never before the
 * socket's last turn start sent late; with `sent_late`, this one is such
 * a start, and its departure becomes the socket's floor. A global
 * function, so its lookups stay off kt_call_charge's stack. */
__noinline int kt_call_depart(struct __sk_buff *skb, int sent_late)
{
	struct bpf_sock *sk = skb->sk;
	struct kt_sk_depart *d;

	if (!kt_fq_paces(skb))
		return 0;
	if (sk)
		sk = bpf_sk_fullsock(sk);
	if (!sk)
		return 0;
	d = bpf_sk_storage_get(&kt_sk_depart, sk, 0, sent_late ? BPF_SK_STORAGE_GET_F_CREATE : 0);
	if (!d)
		return 0;
	kt_depart_at(skb, d->not_before_ns);
	if (sent_late)
		d->not_before_ns = skb->tstamp;
	return 1;
}

/* A refused turn start of a socket fq schedules: sent at the time it
 * conforms (EDT) instead of held, when that is within the horizon, and
 * the socket's later segments no earlier. 1 if so. A global function,
 * like kt_call_depart: kt_egress's deepest chain of frames runs through
 * kt_call_charge, and 6.1 allows that chain 512 bytes of stack. */
__noinline int kt_call_send_late(struct __sk_buff *skb, const struct kt_cls *cls)
{
	if (!cls || !kt_fq_paces(skb) || !kt_pace(skb, cls, 1, bpf_ktime_get_boot_ns()))
		return 0;
	kt_call_depart(skb, 1);
	return 1;
}

/* A TCP packet of a call limit (the bucket `cls` names): charged one call
 * when it starts a turn. KT_CALL_PASS, or KT_CALL_DROP or KT_CALL_DROP_CN
 * to hold it (TCP sends it again). A global function: the verifier checks
 * it, and the GCRA it inlines, once, apart from the paths of packet and
 * byte limits. */
__noinline int kt_call_charge(struct __sk_buff *skb, const struct kt_cls *cls)
{
	struct kt_tcp_seg s = {};
	__u64 wait_ns, now;
	int verdict;
	__u32 by;

	if (!cls)
		return KT_CALL_PASS;
	if (kt_call_turn(skb, &s) == KT_CALL_NONE) {
		/* the rest of a turn, a retransmission: not before its start */
		if (s.payload_len)
			kt_call_depart(skb, 0);
		return KT_CALL_PASS;
	}
	now = bpf_ktime_get_boot_ns();
	verdict = kt_charge(cls, now, skb->len, 1, &wait_ns, &by);
	/* No value in a register lives across the global calls below, each
	 * of which would add a spill slot to this frame, which has none to
	 * spare on 6.1: the clock is read again where it is needed after. */
	if (verdict == KT_REFUSE) {
		if (kt_call_send_late(skb, cls)) {
			kt_call_passed(skb, &s);
			return KT_CALL_PASS;
		}
		kt_emit_event(by, bpf_skb_cgroup_id(skb), KT_HOOK_EGRESS, wait_ns,
			      bpf_ktime_get_boot_ns(), KT_EV_BUCKET);
		return kt_call_quick_retry(skb) ? KT_CALL_DROP_CN : KT_CALL_DROP;
	}
	if (verdict == KT_ADMIT_SHADOW)
		kt_emit_event(by, bpf_skb_cgroup_id(skb), KT_HOOK_EGRESS, wait_ns, now, KT_EV_SHADOW);
	kt_call_depart(skb, 0);
	kt_call_passed(skb, &s);
	return KT_CALL_PASS;
}

#endif /* KT_BPF_CALL_H */
