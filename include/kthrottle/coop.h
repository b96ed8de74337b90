/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Cooperative limits (unit request): the memory-mapped kt_coop entries the
 * library decides on, and their publication protocol. Part of kthrottle.h. */
#ifndef KTHROTTLE_COOP_H
#define KTHROTTLE_COOP_H

#include "kthrottle/gcra.h"

/*
 * Cooperative limits (unit `request`): no kernel hook enforces them; the
 * application asks libkthrottle before each request, and the library runs
 * kt_gcra_decide above on a memory-mapped entry of kt_coop, with no syscall.
 *
 * kt_coop (array, BPF_F_MMAPABLE, KT_MAX_COOP entries, pinned as
 * <pinDir>/kt_coop): one entry per cooperative limit on this node. Two cache
 * lines: the bucket (charged by every caller) in the first, the identity and
 * the counters in the second.
 *
 * Who writes what:
 *  - the daemon: name, flags, gen (the identity, see the protocol below), and
 *    the bucket's rate fields (interval_fp, burst, valid_until, fallback_*),
 *    each an aligned 8-byte store, a rate change through kt_bucket_rescale,
 *    as for kt_buckets. It never writes tat or the counters of a live entry.
 *  - callers (libkthrottle): bucket.tat, only by compare-and-swap in
 *    kt_gcra_decide; admitted and refused, only by atomic add (tokens, i.e.
 *    the n of try_acquire, not calls). The daemon reads the counters as
 *    monotonic totals (deltas per tick give utilization and demand).
 *
 * Identity protocol (a seqcount): gen is even when the entry is stable, odd
 * while the daemon rewrites it. To publish or retire an entry the daemon
 * makes gen odd, clears KT_COOP_IN_USE, writes the name, the bucket (tat 0:
 * full) and zeroes the counters, then makes gen even (release) and, to
 * publish, sets KT_COOP_IN_USE (release): kt_coop_publish, kt_coop_retire.
 * A reader matches an entry only if gen is even and non-zero, the flag is
 * set, the name is equal and gen reads the same again afterwards; it keeps
 * that gen, and an entry whose gen has changed since is no longer its limit
 * (libkthrottle answers -ESTALE). Entry 0 is as usable as any other.
 */
#define KT_MAX_COOP 256

struct kt_coop {
	struct kt_bucket bucket; /* GCRA state: rates by the daemon, tat by callers */
	char name[KT_NAME_LEN];  /* NUL-terminated limit name; daemon */
	__u32 gen;               /* seqcount: odd while being rewritten; daemon */
	__u32 flags;             /* KT_COOP_*; daemon */
	__u64 admitted;          /* tokens admitted; callers, atomic add */
	__u64 refused;           /* tokens refused; callers, atomic add */
	__u64 last_wait;         /* retry-after ns of the latest refusal (~0: closed); callers */
};
#define KT_COOP_IN_USE (1u << 0)
_Static_assert(sizeof(struct kt_coop) == 128, "kt_coop layout");
_Static_assert(__builtin_offsetof(struct kt_coop, name) == 64, "kt_coop: bucket alone in line 0");

/* Whether a request of `cost` tokens would conform at `now`, without
 * charging anything: kt_gcra_decide's test, for status (is_throttled) and
 * for read-only mappings. KT_ADMIT or KT_REFUSE; *wait_ns as kt_gcra_decide
 * sets it (~0 when closed). */
static inline int kt_gcra_peek(const struct kt_bucket *b, __u64 now, __u64 cost, __u64 *wait_ns)
{
	__u64 burst;
	__u64 interval = kt_bucket_params(b, now, &burst);
	__u64 cost_ns, tau, tat, base, ahead;

	*wait_ns = 0;
	if (interval == 0) {
		*wait_ns = ~0ULL;
		return KT_REFUSE;
	}
	tau = kt_gcra_tolerance(interval, burst, cost, &cost_ns);
	tat = KT_READ_ONCE(b->tat);
	base = (__s64)(tat - now) > 0 ? tat : now;
	ahead = base - now;
	if (cost_ns > tau) {
		if (ahead > 0) {
			*wait_ns = ahead;
			return KT_REFUSE;
		}
	} else if (ahead > tau - cost_ns) {
		*wait_ns = ahead - (tau - cost_ns);
		return KT_REFUSE;
	}
	return KT_ADMIT;
}

#ifndef __bpf__
/* The daemon's half of the identity protocol above, on a writable mapping
 * (or a copy written with bpf_map_update_elem before anyone maps it). */
/* strict: the bucket is published KT_BUCKET_STRICT and closed (no permit:
 * valid_until in the past, no fallback), so no caller is ever admitted
 * before the daemon arms a permit. */
static inline void kt_coop_publish_as(struct kt_coop *e, const char *name, __u64 interval_fp,
				      __u64 burst, int strict)
{
	__u32 gen = __atomic_load_n(&e->gen, __ATOMIC_RELAXED);
	unsigned i;

	gen |= 1; /* odd: being rewritten */
	__atomic_store_n(&e->gen, gen, __ATOMIC_RELAXED);
	__atomic_store_n(&e->flags, 0, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	for (i = 0; i < KT_NAME_LEN; i++)
		e->name[i] = 0;
	for (i = 0; i < KT_NAME_LEN - 1 && name[i]; i++)
		e->name[i] = name[i];
	__atomic_store_n(&e->bucket.tat, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&e->bucket.interval_fp, interval_fp, __ATOMIC_RELAXED);
	__atomic_store_n(&e->bucket.burst, burst, __ATOMIC_RELAXED);
	__atomic_store_n(&e->bucket.valid_until, strict ? 1 : 0, __ATOMIC_RELAXED);
	__atomic_store_n(&e->bucket.fallback_fp, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&e->bucket.fallback_until, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&e->bucket.fallback_burst, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&e->bucket.limit_id, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&e->bucket.flags, KT_BUCKET_IN_USE | (strict ? KT_BUCKET_STRICT : 0),
			 __ATOMIC_RELAXED);
	__atomic_store_n(&e->admitted, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&e->refused, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&e->gen, gen + 1, __ATOMIC_RELEASE); /* even, never 0 */
	__atomic_store_n(&e->flags, KT_COOP_IN_USE, __ATOMIC_RELEASE);
}

static inline void kt_coop_publish(struct kt_coop *e, const char *name, __u64 interval_fp,
				   __u64 burst)
{
	kt_coop_publish_as(e, name, interval_fp, burst, 0);
}

/* The reader's half: the entry's gen if it is a stable, in-use entry named
 * name[0..len) (len < KT_NAME_LEN), else 0 (see the protocol above). */
static inline __u32 kt_coop_match(const struct kt_coop *e, const char *name, unsigned long len)
{
	__u32 gen = __atomic_load_n(&e->gen, __ATOMIC_ACQUIRE);
	char buf[KT_NAME_LEN];
	unsigned long i;

	if (!gen || (gen & 1) || !(__atomic_load_n(&e->flags, __ATOMIC_ACQUIRE) & KT_COOP_IN_USE) ||
	    len >= KT_NAME_LEN)
		return 0;
	for (i = 0; i < KT_NAME_LEN; i++)
		buf[i] = __atomic_load_n(&e->name[i], __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if (__atomic_load_n(&e->gen, __ATOMIC_RELAXED) != gen)
		return 0; /* rewritten while we read */
	for (i = 0; i < len; i++)
		if (buf[i] != name[i])
			return 0;
	return buf[len] ? 0 : gen;
}

/* Takes an entry out of use: holders of its old gen get -ESTALE. */
static inline void kt_coop_retire(struct kt_coop *e)
{
	__u32 gen = __atomic_load_n(&e->gen, __ATOMIC_RELAXED) | 1;

	__atomic_store_n(&e->gen, gen, __ATOMIC_RELAXED);
	__atomic_store_n(&e->flags, 0, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	__atomic_store_n(&e->name[0], 0, __ATOMIC_RELAXED);
	__atomic_store_n(&e->bucket.interval_fp, 0, __ATOMIC_RELAXED); /* closed */
	__atomic_store_n(&e->gen, gen + 1, __ATOMIC_RELEASE);
}
#endif

#endif /* KTHROTTLE_COOP_H */
