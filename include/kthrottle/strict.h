/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Strict limits: a bucket that admits only on a permit the store issued.
 * Part of kthrottle.h. */
#ifndef KTHROTTLE_STRICT_H
#define KTHROTTLE_STRICT_H

#include "kthrottle/gcra.h"

/* A strict bucket holding no permit refuses as closed (its window is over,
 * interval 0 in kt_bucket_params), but it is not closed while its
 * interval is set: a permit comes once the daemon sees the demand, i.e.
 * this refusal. So callers are told to ask again this soon, not never. */
#define KT_STRICT_RETRY_NS 5000000ULL
static inline __u64 kt_strict_wait(const struct kt_bucket *b, __u64 wait)
{
	if (wait == ~0ULL && (KT_READ_ONCE(b->flags) & KT_BUCKET_STRICT) && KT_READ_ONCE(b->interval_fp))
		return KT_STRICT_RETRY_NS;
	return wait;
}

#ifndef __bpf__
/*
 * Strict buckets (KT_BUCKET_STRICT). kt_strict_arm hands a bucket whose last
 * permit is spent (tat ahead: it was used) or over (past valid_until) the
 * permit due at `due`: tat first, so while valid_until is still the old one
 * the bucket either stays closed (old window over) or refuses until `due`
 * (old window open, its permit spent: tat = due is still ahead of any
 * earlier admission's window). Then valid_until = due + expire. Either
 * order of the readers' loads sees at most one admission, at or after due,
 * because burst is 1 and the hold (interval) exceeds the window. Never call
 * it while the bucket holds an unspent permit whose window is open: that
 * permit would be moved, not wasted. */
static inline void kt_strict_arm(struct kt_bucket *b, __u64 due, __u64 expire_ns)
{
	__atomic_store_n(&b->fallback_fp, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&b->fallback_until, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&b->tat, due, __ATOMIC_RELEASE);
	__atomic_store_n(&b->valid_until, due + expire_ns, __ATOMIC_RELEASE);
}

/* Whether the permit kt_strict_arm wrote for `due` was used: the one
 * admission moved tat past due (the kernel's CAS is the only other writer). */
static inline int kt_strict_spent(const struct kt_bucket *b, __u64 due)
{
	return __atomic_load_n(&b->tat, __ATOMIC_ACQUIRE) != due;
}

/* The hold of one strict admission: longer than the window, so the window
 * never yields a second one; `every` when that is longer, so a refused
 * caller's retry-after points at the soonest next permit. */
static inline __u64 kt_strict_hold_ns(__u64 every_ns, __u64 expire_ns)
{
	return every_ns > expire_ns ? every_ns : expire_ns + 1000;
}
#endif

#endif /* KTHROTTLE_STRICT_H */
