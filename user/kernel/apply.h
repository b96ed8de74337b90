/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Reconciles the kernel maps and links with a configuration's plan (its
 * members resolved by user/members/resolve.h): limit ids, bucket slots,
 * memberships, classifier and attachments. Existing buckets
 * (adopted after a restart, or kept across a reload) keep their state; only
 * their rate and burst are rewritten. */
#ifndef KT_APPLY_H
#define KT_APPLY_H

#include <stdbool.h>
#include <stdint.h>
#include "kernel/bpf_loader.h"
#include "base/config.h"
#include "kernel/layout.h" /* kt_plan_check, which kt_plan_apply runs first */
#include "members/plan.h"
#include "pool/policy.h"

/* Writes the plan into the maps and links. pol[i]: what each bucket of
 * plan->limits[i] may admit; a bucket created here gets it from birth, kept
 * buckets get the new rate (their tokens carry over) and lease. Fills ids
 * and slots. All or nothing: on error the maps, buckets and links are as
 * they were (the plan's ids and slots too). */
int kt_plan_apply(struct kt_bpf *b, struct kt_plan *plan, const struct kt_bucket_policy *pol,
		  char *err, size_t errlen);

/* Distinct bucket slots of a limit (pod scope: one per member; node: one). */
int kt_limit_slots(const struct kt_limit_rt *l, uint32_t *slots, int max);

/* Test only: 0 = off; N > 0 = the Nth kernel write of each kt_plan_apply
 * commit (a map update, a bucket store, the link sync) fails with -EIO as if
 * the kernel refused it, so tests can check the rollback. */
extern int kt_apply_fail_step;

#endif
