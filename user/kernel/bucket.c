/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Writes to one bucket: see bucket.h. */
#include <math.h>
#include <stdlib.h>
#include "kernel/bucket.h"

uint64_t kt_burst_tokens(double burst)
{
	return burst < 1 ? 1 : burst > 4294967295.0 ? 4294967295ULL : (uint64_t)ceil(burst);
}

/* The record of slot (kt_bucket_verify), allocated at the first write;
 * NULL out of memory: the slot goes unverified. */
static struct kt_bucket_written *record(struct kt_bpf *b, uint32_t slot)
{
	if (slot >= KT_MAX_SLOTS ||
	    (!b->written && !(b->written = calloc(KT_MAX_SLOTS, sizeof(*b->written)))))
		return NULL;
	return &b->written[slot];
}

static void note_rate(struct kt_bpf *b, uint32_t slot, uint64_t interval_fp, uint64_t burst)
{
	struct kt_bucket_written *w = record(b, slot);

	if (w) {
		w->interval_fp = interval_fp;
		w->burst = burst;
	}
}

static void note_lease(struct kt_bpf *b, uint32_t slot, uint64_t valid_until, uint64_t fb_fp,
		       uint64_t fb_burst, uint64_t fb_until)
{
	struct kt_bucket_written *w = record(b, slot);

	if (w) {
		w->valid_until = valid_until;
		w->fallback_fp = fb_fp;
		w->fallback_burst = fb_burst;
		w->fallback_until = fb_until;
		w->lease = true;
	}
}

void kt_bucket_set_rate(struct kt_bpf *b, uint32_t slot, double rate, double burst)
{
	struct kt_bucket *bk = kt_bpf_bucket(b, slot);
	uint64_t tokens = kt_burst_tokens(burst), interval = kt_interval_fp_from_rate(rate);

	/* burst first: a decision that sees the new burst with the old
	 * interval errs by at most the burst difference, once */
	__atomic_store_n(&bk->burst, tokens, __ATOMIC_RELAXED);
	kt_bucket_rescale(bk, kt_clock_ns(), interval);
	note_rate(b, slot, interval, tokens);
}

void kt_bucket_note(struct kt_bpf *b, uint32_t slot)
{
	const struct kt_bucket *bk = kt_bpf_bucket(b, slot);

	note_rate(b, slot, __atomic_load_n(&bk->interval_fp, __ATOMIC_RELAXED),
		  __atomic_load_n(&bk->burst, __ATOMIC_RELAXED));
	note_lease(b, slot, __atomic_load_n(&bk->valid_until, __ATOMIC_RELAXED),
		   __atomic_load_n(&bk->fallback_fp, __ATOMIC_RELAXED),
		   __atomic_load_n(&bk->fallback_burst, __ATOMIC_RELAXED),
		   __atomic_load_n(&bk->fallback_until, __ATOMIC_RELAXED));
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

int kt_bucket_verify(struct kt_bpf *b, uint32_t slot, struct kt_bucket *found)
{
	const struct kt_bucket_written *w;
	struct kt_bucket *bk;
	int what = 0;

	if (!b->written || slot >= KT_MAX_SLOTS)
		return 0;
	w = &b->written[slot];
	bk = kt_bpf_bucket(b, slot);
	found->interval_fp = __atomic_load_n(&bk->interval_fp, __ATOMIC_RELAXED);
	found->burst = __atomic_load_n(&bk->burst, __ATOMIC_RELAXED);
	found->valid_until = __atomic_load_n(&bk->valid_until, __ATOMIC_RELAXED);
	found->fallback_fp = __atomic_load_n(&bk->fallback_fp, __ATOMIC_RELAXED);
	found->fallback_burst = __atomic_load_n(&bk->fallback_burst, __ATOMIC_RELAXED);
	found->fallback_until = __atomic_load_n(&bk->fallback_until, __ATOMIC_RELAXED);
	if (w->burst && (found->interval_fp != w->interval_fp || found->burst != w->burst)) {
		/* as a rate change: burst first, then the interval, tokens kept */
		__atomic_store_n(&bk->burst, w->burst, __ATOMIC_RELAXED);
		kt_bucket_rescale(bk, kt_clock_ns(), w->interval_fp);
		what |= KT_BUCKET_FIX_RATE;
	}
	if (w->lease && (found->valid_until != w->valid_until || found->fallback_fp != w->fallback_fp ||
			 found->fallback_burst != w->fallback_burst ||
			 found->fallback_until != w->fallback_until)) {
		/* a deadline moved out: the fallback first; moved in: itself first */
		store_lease(bk, w->valid_until, w->fallback_fp, w->fallback_burst, w->fallback_until);
		what |= KT_BUCKET_FIX_LEASE;
	}
	return what;
}

void kt_bucket_set_lease(struct kt_bpf *b, uint32_t slot, const struct kt_bucket_policy *pol)
{
	uint64_t fb_fp = kt_interval_fp_from_rate(pol->fallback_rate),
		 fb_burst = kt_burst_tokens(pol->fallback_burst);

	store_lease(kt_bpf_bucket(b, slot), pol->valid_until, fb_fp, fb_burst, pol->fallback_until);
	note_lease(b, slot, pol->valid_until, fb_fp, fb_burst, pol->fallback_until);
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
