/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* sockops: TCP sockets of a `byte` limit pace themselves to its rate, and
 * a TCP socket holding an in-flight slot (unit concurrent) gives it back
 * when its state reaches CLOSE (bpf/lib/inflight.h).
 *
 * The egress program drops a TCP packet its byte bucket cannot take, and a
 * drop stalls the sender until its next ACK or a probe timer (200 ms or
 * more): with a small burst an upload then gets a fraction of the rate.
 * Instead, the socket is given SO_MAX_PACING_RATE just below the bucket's
 * rate. TCP then paces itself with a timer (internal pacing, no fq qdisc
 * needed) and sizes its TSO packets to about 1 ms of data, so the packets
 * reach egress at a rate the bucket admits and are not dropped.
 *
 * Which bucket: the egress program records, in the socket's kt_sk_pace
 * storage, the slot of the byte-unit bucket it charged the socket's packets
 * to (the SYN already, for a connecting socket). This program sets the rate
 * when the connection is established and refreshes it on RTT samples, at
 * most every KT_PACE_REFRESH_NS per socket, so a rate the daemon changes is
 * picked up within about an RTT. The rate is KT_PACE_PERCENT of the
 * bucket's (the bucket counts IP and TCP headers, pacing counts payload),
 * split evenly between the paced sockets charging the same bucket
 * (kt_pace_socks, counted here and uncounted when the socket closes).
 * The egress program still enforces the limit: pacing only keeps TCP from
 * running into it.
 *
 * A connection of a call limit with maxDelay gets it as TCP_USER_TIMEOUT
 * when it is established (kt_call_bound): a call the egress program holds
 * that long ends the connection with ETIMEDOUT, an error the application
 * sees, instead of waiting on. */
#include "kthrottle.bpf.h"
#include "pace.bpf.h"

#define SOL_SOCKET 1
#define SO_MAX_PACING_RATE 47
#define SOL_TCP 6
#define TCP_USER_TIMEOUT 18
#define TCP_BPF_IW 1001            /* initial cwnd, before any data is sent */
#define TCP_BPF_SNDCWND_CLAMP 1002 /* cwnd clamp (and ssthresh) */
#define KT_TCP_INFINITE_SSTHRESH 0x7fffffff
#define KT_HDR_ROOM 72   /* IPv6 + TCP with timestamps: what a segment adds to skb->len */
#define KT_MIN_CWND 4    /* below this, delayed ACKs would stall the socket */
#define KT_GSO_MAX 65536 /* largest TSO packet TCP builds */
/* an MSS when the socket has none yet: Ethernet's 1500 less IPv4, TCP and
 * the timestamp option */
#define KT_MSS_DEFAULT 1448

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, KT_MAX_BUCKETS);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_pace_socks SEC(".maps");

/* Takes the socket out of its slot's count. */
static __always_inline void kt_uncount(struct kt_sk_pace *ps)
{
	__u32 s = ps->counted_slot;
	__u32 *n;

	if (!(ps->flags & KT_SK_PACE_COUNTED))
		return;
	ps->flags &= ~KT_SK_PACE_COUNTED;
	n = bpf_map_lookup_elem(&kt_pace_socks, &s);
	if (n && *n)
		__sync_fetch_and_add(n, -1);
}

/* Paced sockets sharing `slot`, this one counted in. */
static __always_inline __u32 kt_count(struct kt_sk_pace *ps, __u32 slot)
{
	__u32 *n;

	if (!(ps->flags & KT_SK_PACE_COUNTED) || ps->counted_slot != slot) {
		kt_uncount(ps);
		n = bpf_map_lookup_elem(&kt_pace_socks, &slot);
		if (!n)
			return 1;
		__sync_fetch_and_add(n, 1);
		ps->counted_slot = slot;
		ps->flags |= KT_SK_PACE_COUNTED;
	}
	n = bpf_map_lookup_elem(&kt_pace_socks, &slot);
	/* a count that lost a race (or a leak) must not stop the socket */
	return n && *n && *n < 65536 ? *n : 1;
}

/* SO_MAX_PACING_RATE's "unlimited", and kt_slot_rate's answer for a slot
 * that is no (longer a) byte limit's */
#define KT_RATE_UNPACED 0xffffffffu

/* The pacing rate, bytes/s, for one of `nsocks` sockets on `slot`: 0 to
 * leave the socket as it is (bucket closed: egress drops anyway),
 * KT_RATE_UNPACED when the slot is no (longer a) byte limit's, or a shadow
 * limit's (it lets everything pass, so nothing is to be paced). */
static __always_inline __u32 kt_slot_rate(__u32 slot, __u64 now, __u32 nsocks, __u64 *burst)
{
	struct kt_bucket *b = bpf_map_lookup_elem(&kt_buckets, &slot);
	struct kt_limit_info *li;
	__u64 interval, rate;
	__u32 id;

	if (!b || (b->flags & (KT_BUCKET_IN_USE | KT_BUCKET_SHADOW)) != KT_BUCKET_IN_USE)
		return KT_RATE_UNPACED;
	id = b->limit_id;
	li = bpf_map_lookup_elem(&kt_limits, &id);
	if (!li || !li->in_use || li->unit != KT_UNIT_BYTE)
		return KT_RATE_UNPACED;
	interval = kt_bucket_params(b, now, burst);
	if (!interval)
		return 0;
	/* tokens/s = 1e9 ns x 2^16 / Q48.16 interval; 6.6e13 / interval
	 * cannot overflow the percentage multiply */
	rate = (1000000000ULL << KT_FP_SHIFT) / interval;
	rate = rate * KT_PACE_PERCENT / 100;
	rate /= nsocks;
	if (rate < KT_PACE_MIN_RATE)
		rate = KT_PACE_MIN_RATE;
	if (rate > KT_RATE_UNPACED - 1)
		rate = KT_RATE_UNPACED - 1; /* one more would mean unlimited */
	return (__u32)rate;
}

static __always_inline void kt_set_rate(struct bpf_sock_ops *skops, struct kt_sk_pace *ps,
					__u32 rate)
{
	int v = (int)rate;

	if (bpf_setsockopt(skops, SOL_SOCKET, SO_MAX_PACING_RATE, &v, sizeof(v)) == 0)
		ps->rate = rate == KT_RATE_UNPACED ? 0 : rate;
}

/*
 * The cwnd clamp that keeps the socket's packets within half its share of
 * the burst, 0 for none needed. Pacing alone is not enough: below about
 * 1 ms of RTT, TSO autosizing (tcp_tso_rtt_log) builds packets of up to
 * 64 KiB whatever the pacing rate, and a packet larger than the burst
 * conforms only to a full bucket, so the least timer jitter gets it
 * dropped. A TSO packet never holds more segments than cwnd allows, so the
 * clamp bounds it. It never limits the rate itself: it is at least twice
 * the segments the rate needs per RTT (when that is more than half the
 * burst, the burst is too small for the path and drops remain).
 */
static __always_inline __u32 kt_cwnd_clamp(struct bpf_sock_ops *skops, __u32 rate, __u64 burst,
					   __u32 nsocks)
{
	__u64 mss = skops->mss_cache, seg, c, bdp;
	__u64 srtt_us = skops->srtt_us >> 3;

	if (!mss || mss > 65535)
		mss = KT_MSS_DEFAULT;
	seg = mss + KT_HDR_ROOM;
	if (burst / nsocks / 2 >= KT_GSO_MAX + seg)
		return 0; /* half the burst takes the largest TSO packet */
	c = burst / nsocks / 2 / seg;
	/* segments per RTT at the paced rate, twice, rounded up */
	bdp = ((__u64)rate * srtt_us * 2 / 1000000 + mss - 1) / mss;
	if (c < bdp)
		c = bdp;
	if (c < KT_MIN_CWND)
		c = KT_MIN_CWND;
	if (c * mss >= KT_GSO_MAX)
		return 0;
	return (__u32)c;
}

static __always_inline void kt_set_clamp(struct bpf_sock_ops *skops, struct kt_sk_pace *ps,
					 __u32 clamp, int start)
{
	int v = clamp ? (int)clamp : KT_TCP_INFINITE_SSTHRESH;

	if (clamp == ps->cwnd_clamp)
		return;
	if (bpf_setsockopt(skops, SOL_TCP, TCP_BPF_SNDCWND_CLAMP, &v, sizeof(v)) == 0)
		ps->cwnd_clamp = clamp;
	/* the initial window is already set: bring it down too, while no
	 * data has left (the first packets are never paced) */
	if (start && clamp && skops->snd_cwnd > clamp)
		bpf_setsockopt(skops, SOL_TCP, TCP_BPF_IW, &v, sizeof(v));
}

/* Sets or refreshes the socket's pacing from its bucket; force: whatever
 * the time since the last refresh (at establishment). */
static __always_inline void kt_refresh(struct bpf_sock_ops *skops, int force)
{
	struct bpf_sock *sk = skops->sk;
	struct kt_sk_pace *ps;
	__u32 slot, rate, nsocks = 1;
	__u64 now, burst = 0;

	if (!sk)
		return;
	ps = bpf_sk_storage_get(&kt_sk_pace, sk, 0, 0);
	if (!ps)
		return; /* egress never charged it to a byte limit */
	now = bpf_ktime_get_boot_ns();
	if (!force && ps->checked_ns && now - ps->checked_ns < KT_PACE_REFRESH_NS)
		return;
	ps->checked_ns = now;
	slot = ps->slot;
	if (slot < KT_MAX_BUCKETS) {
		nsocks = kt_count(ps, slot);
		rate = kt_slot_rate(slot, now, nsocks, &burst);
	} else {
		rate = KT_RATE_UNPACED;
	}
	if (rate == KT_RATE_UNPACED) {
		/* no byte limit charges it (any more): unpaced, uncounted */
		kt_uncount(ps);
		if (ps->rate)
			kt_set_rate(skops, ps, KT_RATE_UNPACED);
		kt_set_clamp(skops, ps, 0, 0);
		return;
	}
	if (!rate)
		return;
	if (rate != ps->rate)
		kt_set_rate(skops, ps, rate);
	kt_set_clamp(skops, ps, kt_cwnd_clamp(skops, rate, burst, nsocks), force);
}

/* An established connection of a call limit with maxDelay: that is its
 * TCP_USER_TIMEOUT, unless the application has set a shorter one. The
 * egress program classified the SYN already (kt_sk_eg): its limit is
 * known here without classifying again. A connection established before
 * the limit had maxDelay keeps what it has. */
static __always_inline void kt_call_bound(struct bpf_sock_ops *skops)
{
	struct bpf_sock *sk = skops->sk;
	struct kt_limit_ext *ext;
	struct kt_sk_eg *ec;
	struct kt_bucket *b;
	int cur = 0, want;
	__u32 slot, id;

	if (!sk)
		return;
	ec = bpf_sk_storage_get(&kt_sk_eg, sk, 0, 0);
	if (!ec || ec->pkt.unit != KT_UNIT_CALL)
		return;
	slot = ec->pkt.slot;
	b = bpf_map_lookup_elem(&kt_buckets, &slot);
	if (!b || !(b->flags & KT_BUCKET_IN_USE))
		return;
	id = b->limit_id;
	ext = bpf_map_lookup_elem(&kt_limit_ext, &id);
	if (!ext || !ext->max_delay_ms || ext->max_delay_ms > KT_MAX_DELAY_MS_MAX)
		return;
	want = (int)ext->max_delay_ms;
	if (bpf_getsockopt(skops, SOL_TCP, TCP_USER_TIMEOUT, &cur, sizeof(cur)) == 0 && cur > 0 &&
	    cur <= want)
		return;
	bpf_setsockopt(skops, SOL_TCP, TCP_USER_TIMEOUT, &want, sizeof(want));
}

SEC("sockops")
int kt_sockops(struct bpf_sock_ops *skops)
{
	struct kt_sk_pace *ps;
	struct bpf_sock *sk;

	switch (skops->op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
		kt_call_bound(skops);
		/* fall through */
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		/* RTT samples to refresh the rate on (and to start pacing a
		 * socket egress charges only from now on: an accepted one),
		 * state changes to uncount it when it closes */
		bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags |
							 BPF_SOCK_OPS_RTT_CB_FLAG |
							 BPF_SOCK_OPS_STATE_CB_FLAG);
		kt_refresh(skops, 1);
		break;
	case BPF_SOCK_OPS_RTT_CB:
		kt_refresh(skops, 0);
		break;
	case BPF_SOCK_OPS_TCP_CONNECT_CB:
		/* a socket holding an in-flight slot: its state changes, so
		 * that a connect that fails (refused, reset, timed out) gives
		 * the slot back while the application still holds the fd */
		if (kt_inflight_held(skops->sk))
			bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags |
								 BPF_SOCK_OPS_STATE_CB_FLAG);
		break;
	case BPF_SOCK_OPS_STATE_CB:
		if (skops->args[1] != BPF_TCP_CLOSE)
			break;
		sk = skops->sk;
		if (!sk)
			break;
		kt_inflight_give(sk);
		ps = bpf_sk_storage_get(&kt_sk_pace, sk, 0, 0);
		if (ps)
			kt_uncount(ps);
		break;
	}
	return 1;
}
