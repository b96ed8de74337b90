/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The one GCRA of kthrottle, for the programs, the daemon and the library:
 * the clock, rates as Q48.16 intervals, a bucket's parameters at a time
 * (lease, fallback), the decision, pacing, refunds, the chained decision
 * against a node bucket, tokens left, and a rate change that keeps the
 * tokens (host). Part of kthrottle.h. */
#ifndef KTHROTTLE_GCRA_H
#define KTHROTTLE_GCRA_H

#include "kthrottle/abi.h"

/* Q48.16 interval for a rate in tokens per second; 0 for rate <= 0 (closed).
 * Host only: BPF has no floating point. Rounds up so the enforced rate never
 * exceeds the requested one. */
#ifndef __bpf__
/* The one clock of kthrottle: CLOCK_BOOTTIME, which bpf_ktime_get_boot_ns()
 * reads in the programs. Unlike CLOCK_MONOTONIC it keeps counting while the
 * machine is suspended or the VM paused, so no deadline (a lease, a
 * fallback) is stretched by a pause the other nodes did not share. */
static inline __u64 kt_clock_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (__u64)ts.tv_sec * 1000000000ull + (__u64)ts.tv_nsec;
}

static inline __u64 kt_interval_fp_from_rate(double tokens_per_sec)
{
	if (!(tokens_per_sec > 0))
		return 0;
	double fp = 1e9 * (double)KT_FP_ONE / tokens_per_sec;
	if (fp >= 18446744073709549568.0) /* largest double below 2^64 */
		return ~0ULL;
	__u64 v = (__u64)fp;
	if ((double)v < fp)
		v++;
	return v ? v : 1;
}

static inline double kt_rate_from_interval_fp(__u64 interval_fp)
{
	return interval_fp ? 1e9 * (double)KT_FP_ONE / (double)interval_fp : 0.0;
}
#endif

/* a * b, saturating at ~0, with no divide on the hot path: a few 32-bit
 * partial products (BPF has no 128-bit multiply). */
static inline __u64 kt_mul_sat(__u64 a, __u64 b)
{
	__u64 hi, lo, r;

	if (a >> 32) {
		if (b >> 32)
			return ~0ULL; /* both >= 2^32 */
		__u64 t = a;
		a = b;
		b = t;
	}
	hi = a * (b >> 32);
	if (hi >> 32)
		return ~0ULL;
	lo = a * (b & 0xffffffffULL);
	r = (hi << 32) + lo;
	return r < lo ? ~0ULL : r;
}

#define KT_NS_CAP (~0ULL >> KT_FP_SHIFT) /* 2^48 ns, about 78 hours */

/* ns that `tokens` tokens take at `interval_fp`, rounded up; saturates near
 * 2^48 ns (78 hours), far beyond any burst tolerance, so an overflowing cost
 * can never conform. */
static inline __u64 kt_tokens_to_ns(__u64 tokens, __u64 interval_fp)
{
	__u64 p = kt_mul_sat(tokens, interval_fp);

	if (p > ~0ULL - (KT_FP_ONE - 1))
		return KT_NS_CAP;
	return (p + (KT_FP_ONE - 1)) >> KT_FP_SHIFT;
}

#ifdef __bpf__
#define KT_READ_ONCE(x) (*(volatile __typeof__(x) *)&(x))
#else
#define KT_READ_ONCE(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#endif

/* The interval and burst in force at `now`: the share while the lease
 * holds, then the fallback, then closed (interval 0). */
static inline __u64 kt_bucket_params(const struct kt_bucket *b, __u64 now, __u64 *burst)
{
	__u64 until = KT_READ_ONCE(b->valid_until);
	__u64 fb_until, fb_burst;

	*burst = KT_READ_ONCE(b->burst);
	if (!until || (__s64)(now - until) <= 0)
		return KT_READ_ONCE(b->interval_fp);
	fb_until = KT_READ_ONCE(b->fallback_until);
	if (fb_until && (__s64)(now - fb_until) > 0)
		return 0;
	fb_burst = KT_READ_ONCE(b->fallback_burst);
	if (fb_burst && fb_burst < *burst)
		*burst = fb_burst;
	return KT_READ_ONCE(b->fallback_fp);
}

/* In-flight limits: the slots `b` grants at `now` (see struct kt_inflight). */
static inline __u64 kt_slots_in_force(const struct kt_bucket *b, __u64 now)
{
	__u64 slots, open = kt_bucket_params(b, now, &slots);

	return open ? slots : 0;
}

/* Why `b` refuses at `now` (enum kt_reason), as kt_bucket_params decides
 * what is in force. */
static inline __u32 kt_bucket_reason(const struct kt_bucket *b, __u64 now)
{
	__u64 burst, interval = kt_bucket_params(b, now, &burst);
	__u64 until = KT_READ_ONCE(b->valid_until);

	if (KT_READ_ONCE(b->flags) & KT_BUCKET_STRICT)
		return KT_READ_ONCE(b->interval_fp) ? KT_REASON_PERMIT : KT_REASON_CLOSED;
	if (!interval)
		return KT_REASON_CLOSED;
	return until && (__s64)(now - until) > 0 ? KT_REASON_FALLBACK : KT_REASON_SHARE;
}

/* The tolerance (ns a bucket may run ahead of now) for a request of `cost`
 * tokens, and *cost_ns, its price. Every charge rounds up to a whole ns, so
 * the tolerance must hold burst/cost whole charges or the rounding eats the
 * burst (3/s with burst 2 would pass 1). Capped like kt_tokens_to_ns. */
static inline __u64 kt_gcra_tolerance(__u64 interval, __u64 burst, __u64 cost, __u64 *cost_ns)
{
	__u64 tau;

	if (cost == 1) {
		/* the common unit (connection, datagram, packet): no divide */
		*cost_ns = interval > ~0ULL - (KT_FP_ONE - 1) ? KT_NS_CAP
							      : (interval + (KT_FP_ONE - 1)) >> KT_FP_SHIFT;
		tau = kt_mul_sat(burst, *cost_ns);
	} else {
		*cost_ns = kt_tokens_to_ns(cost, interval);
		tau = kt_tokens_to_ns(burst, interval);
		if (cost && cost <= burst) {
			__u64 whole = kt_mul_sat(burst / cost, *cost_ns);

			if (whole > tau)
				tau = whole;
		}
	}
	return tau > KT_NS_CAP ? KT_NS_CAP : tau;
}

/*
 * GCRA: the bucket is one theoretical arrival time (tat). A request of `cost`
 * tokens conforms when, after charging it, tat is no further than the burst
 * tolerance (burst tokens worth of ns) ahead of now. Charging is a
 * compare-and-swap on tat, so concurrent CPUs never lose or double-spend a
 * token; on persistent contention it refuses, which errs below the limit.
 *
 * A single request larger than the whole burst (a 64 KiB GSO packet against a
 * small byte bucket) is admitted only when the bucket is full, and its excess
 * is carried as debt, so large units are never starved and the long-run rate
 * still holds.
 *
 * Time comparisons use signed differences, so the math stays correct across a
 * wrap of the 64-bit clock.
 *
 * Returns KT_ADMIT or KT_REFUSE; *wait_ns is how long until the same request
 * would conform (0 when admitted).
 */
static inline int kt_gcra_decide(struct kt_bucket *b, __u64 now, __u64 cost, __u64 *wait_ns)
{
	__u64 burst;
	__u64 interval = kt_bucket_params(b, now, &burst);
	__u64 cost_ns, tau;
	int i;

	*wait_ns = 0;
	if (interval == 0) {
		*wait_ns = ~0ULL;
		return KT_REFUSE;
	}
	tau = kt_gcra_tolerance(interval, burst, cost, &cost_ns);

	for (i = 0; i < KT_CAS_RETRIES; i++) {
		__u64 tat = KT_READ_ONCE(b->tat);
		__u64 base = (__s64)(tat - now) > 0 ? tat : now;
		__u64 ahead = base - now; /* debt already queued, ns */

		if (cost_ns > tau) {
			if (ahead > 0) {
				*wait_ns = ahead;
				return KT_REFUSE;
			}
		} else if (ahead > tau - cost_ns) {
			*wait_ns = ahead - (tau - cost_ns);
			return KT_REFUSE;
		}
		if (__sync_val_compare_and_swap(&b->tat, tat, base + cost_ns) == tat)
			return KT_ADMIT;
	}
	return KT_REFUSE;
}

/*
 * EDT pacing: the egress program's alternative to refusing a TCP packet
 * whose socket is scheduled by the fq qdisc (which sends every packet at its
 * skb->tstamp, "earliest departure time"). Instead of "conforms now or not",
 * it answers *when* the request conforms and charges the bucket as if it had
 * been admitted at that moment, so the departures it hands out follow GCRA
 * exactly: the same burst, the same long-run rate, and departures in the
 * order the requests came. A refused TCP packet costs the sender a
 * retransmit timeout; a delayed one only a longer RTT, and TCP Small Queues
 * keeps each socket's queue short, so the sender is slowed to the rate.
 *
 * The departure is at most horizon_ns away: past that the debt is too large
 * to queue (a sender fq does not actually pace, a flood of sockets) and the
 * request is refused, charging nothing, as kt_gcra_decide would.
 *
 * Returns KT_ADMIT with *wait_ns = ns from now until the departure (0: now),
 * or KT_REFUSE with *wait_ns = the wait that was too long (~0 when closed).
 */
#define KT_PACE_HORIZON_NS (2ULL * 1000000000ULL)

static inline int kt_gcra_pace(struct kt_bucket *b, __u64 now, __u64 cost, __u64 horizon_ns,
			       __u64 *wait_ns)
{
	__u64 burst;
	__u64 interval = kt_bucket_params(b, now, &burst);
	__u64 cost_ns, tau;
	int i;

	*wait_ns = ~0ULL;
	if (interval == 0)
		return KT_REFUSE;
	tau = kt_gcra_tolerance(interval, burst, cost, &cost_ns);

	for (i = 0; i < KT_CAS_RETRIES; i++) {
		__u64 tat = KT_READ_ONCE(b->tat);
		__u64 base = (__s64)(tat - now) > 0 ? tat : now;
		__u64 ahead = base - now;
		__u64 wait;

		/* At now + wait the request conforms: an oversize one once the
		 * debt is gone, any other once the debt left is tau - cost_ns.
		 * Then max(tat, departure) = base, so tat becomes
		 * base + cost_ns, as kt_gcra_decide would make it then. */
		if (cost_ns > tau)
			wait = ahead;
		else
			wait = ahead > tau - cost_ns ? ahead - (tau - cost_ns) : 0;
		if (wait > horizon_ns) {
			*wait_ns = wait;
			return KT_REFUSE;
		}
		if (__sync_val_compare_and_swap(&b->tat, tat, base + cost_ns) == tat) {
			*wait_ns = wait;
			return KT_ADMIT;
		}
	}
	return KT_REFUSE;
}

/* Gives back `tokens` a decision took (a send refused later on the same
 * path, whose first token the sendmsg hook had charged): without it a bucket
 * that single-token charges keep draining never fills enough for a
 * many-token one. Never more than was taken, so never above the burst. */
static inline void kt_gcra_refund(struct kt_bucket *b, __u64 now, __u64 tokens)
{
	__u64 burst, interval = kt_bucket_params(b, now, &burst);
	__u64 back = kt_tokens_to_ns(tokens, interval);
	int i;

	if (!interval)
		return;
	for (i = 0; i < KT_CAS_RETRIES; i++) {
		__u64 tat = KT_READ_ONCE(b->tat);

		if ((__s64)(tat - now) <= 0)
			return; /* full: nothing of ours is queued */
		if (__sync_val_compare_and_swap(&b->tat, tat, tat - back) == tat)
			return;
	}
}

/* kt_gcra_decide on a member bucket and then on the node bucket it is
 * chained to (`parent`, NULL: none): admitted only if both admit. When the
 * node bucket refuses, the member's token goes back, so a refused request
 * costs the member nothing, and *wait_ns is the node bucket's. */
static inline int kt_gcra_decide_chained(struct kt_bucket *b, struct kt_bucket *parent, __u64 now,
					 __u64 cost, __u64 *wait_ns)
{
	int verdict = kt_gcra_decide(b, now, cost, wait_ns);

	if (verdict != KT_ADMIT || !parent)
		return verdict;
	if (kt_gcra_decide(parent, now, cost, wait_ns) == KT_ADMIT)
		return KT_ADMIT;
	kt_gcra_refund(b, now, cost);
	return KT_REFUSE;
}

/* Whole tokens a bucket holds at `now` (for status and utilization). */
static inline __u64 kt_gcra_tokens_left(const struct kt_bucket *b, __u64 now)
{
	__u64 burst;
	__u64 interval = kt_bucket_params(b, now, &burst);
	__u64 tat = KT_READ_ONCE(b->tat);
	__u64 tau, ahead;

	if (interval == 0)
		return 0;
	tau = kt_tokens_to_ns(burst, interval);
	ahead = (__s64)(tat - now) > 0 ? tat - now : 0;
	if (ahead >= tau)
		return 0;
	/* (tau - ahead) ns / (interval_fp / 2^16) ns per token */
	__u64 left_ns = tau - ahead;
	if (left_ns > (~0ULL >> KT_FP_SHIFT))
		return burst;
	__u64 tokens = (left_ns << KT_FP_SHIFT) / interval;
	return tokens > burst ? burst : tokens;
}


#ifndef __bpf__
/*
 * Change a bucket's rate without losing or gaining tokens: the debt queued
 * in tat (ns at the old rate) is rescaled to the same number of tokens at the
 * new rate, so a rate rise takes effect at once instead of after the old
 * debt drains, and a fall does not hand out a fresh allowance. The interval
 * itself is still one atomic store; a decision that runs between the two
 * writes errs by at most one request.
 */
static inline void kt_bucket_rescale(struct kt_bucket *b, __u64 now, __u64 new_interval_fp)
{
	__u64 old_interval = __atomic_load_n(&b->interval_fp, __ATOMIC_RELAXED);
	int i;

	if (old_interval && new_interval_fp && old_interval != new_interval_fp) {
		for (i = 0; i < KT_CAS_RETRIES; i++) {
			__u64 tat = __atomic_load_n(&b->tat, __ATOMIC_RELAXED);
			if ((__s64)(tat - now) <= 0)
				break; /* bucket full: nothing queued to rescale */
			long double scaled =
				(long double)(tat - now) * new_interval_fp / old_interval;
			__u64 ahead = scaled > 4e18L ? 4000000000000000000ULL : (__u64)scaled;
			if (__sync_bool_compare_and_swap(&b->tat, tat, now + ahead))
				break;
		}
	}
	__atomic_store_n(&b->interval_fp, new_interval_fp, __ATOMIC_RELEASE);
}
#endif

#endif /* KTHROTTLE_GCRA_H */
