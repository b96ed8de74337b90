/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Writes to one bucket of the mmapped kt_buckets array (or a kt_coop
 * entry's bucket): its rate, lease, strictness, flags, and a rollback's
 * restore. The programs read and CAS the same memory meanwhile, so each
 * write is ordered so that a decision seeing part old, part new state
 * never admits more than the old or the new state would (comments in
 * bucket.c). Which buckets to write, and when, is apply's (apply.h) and
 * the controller's; this layer only knows one bucket at a time. */
#ifndef KT_BUCKET_H
#define KT_BUCKET_H

#include <stdbool.h>
#include <stdint.h>
#include "kernel/bpf_loader.h"
#include "kthrottle.h"
#include "pool/policy.h"

/* Whole tokens, 1..2^32-1: < 2^32 keeps the kernel's burst multiply
 * division-free. */
uint64_t kt_burst_tokens(double burst);

/* One atomic store of the interval: the bucket's tokens are kept (the queued
 * debt is rescaled to the new rate). */
void kt_bucket_set_rate(struct kt_bpf *b, uint32_t slot, double rate, double burst);
/* Kernel state verified, not believed: kt_bucket_set_rate and
 * kt_bucket_set_lease record what they wrote (and kt_bucket_note what a
 * rollback put back); kt_bucket_verify compares the slot's rate (interval,
 * burst) and lease (valid_until, fallback interval, burst and deadline)
 * with that record and, when something else changed them (a hand edit
 * with bpftool, a stray write), writes the record back (the rate as a rate
 * change, tokens kept; the lease in the order of a lease write). Returns
 * the KT_BUCKET_FIX_* of what was put right, with what the bucket held in
 * *found (those fields only); 0: as written, or nothing recorded. */
#define KT_BUCKET_FIX_RATE 1
#define KT_BUCKET_FIX_LEASE 2
void kt_bucket_note(struct kt_bpf *b, uint32_t slot);
int kt_bucket_verify(struct kt_bpf *b, uint32_t slot, struct kt_bucket *found);
/* The flags that decide whether a bucket of the daemon's enforces: in use,
 * and not shadow unless its limit is (a shadow bit set by hand would let
 * everything pass). Put right and 1 (*found: what it held) when they were
 * not; 0 otherwise, and for kt_coop entries. */
int kt_bucket_verify_flags(struct kt_bpf *b, uint32_t slot, bool shadow, uint32_t *found);
/* The lease part of `pol` (valid_until, fallback_rate, fallback_until). */
void kt_bucket_set_lease(struct kt_bpf *b, uint32_t slot, const struct kt_bucket_policy *pol);

/* A strict bucket closed: no permit (valid_until in the past, no
 * fallback); interval_fp the hold, or 0 with store_down (reason closed). */
void kt_bucket_strict_close(struct kt_bucket *bk, uint64_t hold_ns, bool store_down);
/* A kept or new bucket of a strict limit (pol->strict_hold_ns > 0). One
 * that already was strict keeps its state: an armed permit was issued by
 * the store and stays valid; only the hold follows the config. Else it is
 * closed (kt_bucket_strict_close); a kept one is flagged KT_BUCKET_STRICT
 * here, a fresh one (tat 0) by the caller's kt_bucket_publish. */
void kt_bucket_make_strict(struct kt_bucket *bk, const struct kt_bucket_policy *pol, bool fresh);
/* A kept strict bucket whose limit is ordinary now: no longer strict,
 * before the ordinary rate and lease open it. */
void kt_bucket_unstrict(struct kt_bucket *bk);

/* A slot nothing refers to yet, for limit `limit_id`: full (tat 0), no
 * lease, then pol's rate, burst and lease. Its flags are the caller's to
 * publish, last. */
void kt_bucket_init(struct kt_bpf *b, uint32_t slot, uint32_t limit_id,
		    const struct kt_bucket_policy *pol);
/* A fresh bucket's start other than full: tat as the caller computed it
 * (before its flags are published, so no program has seen it). */
void kt_bucket_set_tat(struct kt_bucket *bk, uint64_t tat);
/* The flags, with release: every field written before is visible to a
 * program that sees them (KT_BUCKET_IN_USE, the chain, strict). */
void kt_bucket_publish(struct kt_bucket *bk, uint32_t flags);

/* A rollback: the bucket put back as `old` was. tat exactly when nothing
 * was charged since our write left it at tat_after, else rescaled back so
 * the charges made meanwhile keep their cost. */
void kt_bucket_restore(struct kt_bucket *bk, const struct kt_bucket *old, uint64_t tat_after,
		       uint64_t now);

#endif
