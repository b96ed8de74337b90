/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Writes to one bucket: see bucket.h. */
#include <math.h>
#include <stdlib.h>
#include "kernel/bucket.h"

uint64_t kt_burst_tokens(double burst)
{
	return burst < 1 ? 1 : burst > 4294967295.0 ? 4294967295ULL : (uint64_t)ceil(burst);
}

/* Records what slot's rate fields were set to (kt_bucket_verify). Out of
 * memory, the slot goes unverified. */
static void note(struct kt_bpf *b, uint32_t slot, uint64_t interval_fp, uint64_t burst)
{
	if (slot >= KT_MAX_SLOTS ||
	    (!b->written && !(b->written = calloc(KT_MAX_SLOTS, sizeof(*b->written)))))
		return;
	b->written[slot] = (struct kt_bucket_written){ .interval_fp = interval_fp, .burst = burst };
}

void kt_bucket_set_rate(struct kt_bpf *b, uint32_t slot, double rate, double burst)
{
	struct kt_bucket *bk = kt_bpf_bucket(b, slot);
	uint64_t tokens = kt_burst_tokens(burst), interval = kt_interval_fp_from_rate(rate);

	/* burst first: a decision that sees the new burst with the old
	 * interval errs by at most the burst difference, once */
	__atomic_store_n(&bk->burst, tokens, __ATOMIC_RELAXED);
	kt_bucket_rescale(bk, kt_clock_ns(), interval);
	note(b, slot, interval, tokens);
}

void kt_bucket_note(struct kt_bpf *b, uint32_t slot)
{
	const struct kt_bucket *bk = kt_bpf_bucket(b, slot);

	note(b, slot, __atomic_load_n(&bk->interval_fp, __ATOMIC_RELAXED),
	     __atomic_load_n(&bk->burst, __ATOMIC_RELAXED));
}

int kt_bucket_verify(struct kt_bpf *b, uint32_t slot, struct kt_bucket_written *found)
{
	const struct kt_bucket_written *w;
	struct kt_bucket *bk;

	if (!b->written || slot >= KT_MAX_SLOTS || !(w = &b->written[slot])->burst)
		return 0;
	bk = kt_bpf_bucket(b, slot);
	found->interval_fp = __atomic_load_n(&bk->interval_fp, __ATOMIC_RELAXED);
	found->burst = __atomic_load_n(&bk->burst, __ATOMIC_RELAXED);
	if (found->interval_fp == w->interval_fp && found->burst == w->burst)
		return 0;
	/* as a rate change: burst first, then the interval, tokens kept */
	__atomic_store_n(&bk->burst, w->burst, __ATOMIC_RELAXED);
	kt_bucket_rescale(bk, kt_clock_ns(), w->interval_fp);
	return 1;
}

int kt_bucket_verify_flags(struct kt_bpf *b, uint32_t slot, bool shadow, uint32_t *found)
{
	struct kt_bucket *bk;
	uint32_t want;

	if (!b->buckets || slot >= KT_MAX_BUCKETS)
		return 0;
	bk = &b->buckets[slot];
	*found = __atomic_load_n(&bk->flags, __ATOMIC_ACQUIRE);
	want = *found | KT_BUCKET_IN_USE;
	if (!shadow)
		want &= ~KT_BUCKET_SHADOW;
	if (want == *found)
		return 0;
	__atomic_store_n(&bk->flags, want, __ATOMIC_RELEASE);
	return 1;
}

/* Each write must be safe with the others still old. A lease that moves
 * forward: fallback first, so the later deadline never arms a stale
 * fallback. A lease cut short: the deadline first, so the old, longer one
 * never meets the new fallback. */
static void store_lease(struct kt_bucket *bk, uint64_t valid_until, uint64_t fb_fp,
			uint64_t fb_burst, uint64_t fb_until)
{
	uint64_t old_until = __atomic_load_n(&bk->valid_until, __ATOMIC_RELAXED);

	if (!valid_until || (old_until && valid_until >= old_until)) {
		__atomic_store_n(&bk->fallback_fp, fb_fp, __ATOMIC_RELAXED);
		__atomic_store_n(&bk->fallback_burst, fb_burst, __ATOMIC_RELAXED);
		__atomic_store_n(&bk->fallback_until, fb_until, __ATOMIC_RELAXED);
		__atomic_store_n(&bk->valid_until, valid_until, __ATOMIC_RELEASE);
	} else {
		__atomic_store_n(&bk->valid_until, valid_until, __ATOMIC_RELEASE);
		__atomic_store_n(&bk->fallback_until, fb_until, __ATOMIC_RELAXED);
		__atomic_store_n(&bk->fallback_burst, fb_burst, __ATOMIC_RELAXED);
		__atomic_store_n(&bk->fallback_fp, fb_fp, __ATOMIC_RELAXED);
	}
}

void kt_bucket_set_lease(struct kt_bpf *b, uint32_t slot, const struct kt_bucket_policy *pol)
{
	store_lease(kt_bpf_bucket(b, slot), pol->valid_until, kt_interval_fp_from_rate(pol->fallback_rate),
		    kt_burst_tokens(pol->fallback_burst), pol->fallback_until);
}

void kt_bucket_strict_close(struct kt_bucket *bk, uint64_t hold_ns, bool store_down)
{
	/* the window first: from here on the bucket admits nothing whatever
	 * tat and the interval say */
	__atomic_store_n(&bk->fallback_fp, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&bk->fallback_until, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&bk->valid_until, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&bk->burst, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&bk->fallback_burst, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&bk->interval_fp, store_down ? 0 : hold_ns << KT_FP_SHIFT, __ATOMIC_RELEASE);
}

void kt_bucket_make_strict(struct kt_bucket *bk, const struct kt_bucket_policy *pol, bool fresh)
{
	uint32_t flags = __atomic_load_n(&bk->flags, __ATOMIC_ACQUIRE);

	if (!fresh && (flags & KT_BUCKET_STRICT)) {
		if (__atomic_load_n(&bk->interval_fp, __ATOMIC_RELAXED))
			__atomic_store_n(&bk->interval_fp, pol->strict_hold_ns << KT_FP_SHIFT,
					 __ATOMIC_RELEASE);
		return;
	}
	kt_bucket_strict_close(bk, pol->strict_hold_ns, false);
	if (fresh)
		bk->tat = 0;
	if (!fresh)
		__atomic_store_n(&bk->flags, flags | KT_BUCKET_STRICT, __ATOMIC_RELEASE);
}

void kt_bucket_unstrict(struct kt_bucket *bk)
{
	uint32_t flags = __atomic_load_n(&bk->flags, __ATOMIC_ACQUIRE);

	if (flags & KT_BUCKET_STRICT) {
		__atomic_store_n(&bk->tat, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&bk->flags, flags & ~KT_BUCKET_STRICT, __ATOMIC_RELEASE);
	}
}

void kt_bucket_init(struct kt_bpf *b, uint32_t slot, uint32_t limit_id,
		    const struct kt_bucket_policy *pol)
{
	struct kt_bucket *bk = kt_bpf_bucket(b, slot);

	bk->limit_id = limit_id;
	bk->valid_until = 0;
	bk->tat = 0; /* full burst available */
	kt_bucket_set_rate(b, slot, pol->rate, pol->burst);
	kt_bucket_set_lease(b, slot, pol); /* a finite lease from birth */
}

void kt_bucket_set_tat(struct kt_bucket *bk, uint64_t tat)
{
	bk->tat = tat;
}

void kt_bucket_publish(struct kt_bucket *bk, uint32_t flags)
{
	__atomic_store_n(&bk->flags, flags, __ATOMIC_RELEASE);
}

void kt_bucket_restore(struct kt_bucket *bk, const struct kt_bucket *o, uint64_t tat_after,
		       uint64_t now)
{
	__atomic_store_n(&bk->burst, o->burst, __ATOMIC_RELAXED);
	if (__sync_bool_compare_and_swap(&bk->tat, tat_after, o->tat))
		__atomic_store_n(&bk->interval_fp, o->interval_fp, __ATOMIC_RELEASE);
	else
		kt_bucket_rescale(bk, now, o->interval_fp);
	store_lease(bk, o->valid_until, o->fallback_fp, o->fallback_burst, o->fallback_until);
	__atomic_store_n(&bk->limit_id, o->limit_id, __ATOMIC_RELAXED);
	__atomic_store_n(&bk->flags, o->flags, __ATOMIC_RELEASE);
}
