/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The daemon's side of the in-flight audit (kernel/inflight_audit.h): run
 * every KT_AUDIT_INTERVAL_NS while the plan has an in-flight limit, each
 * correction logged naming its limit and counted for status and metrics. */
#ifndef KT_INFLIGHT_AUDIT_RUN_H
#define KT_INFLIGHT_AUDIT_RUN_H

#include <stdbool.h>
#include <stdint.h>
#include "kernel/features.h"
#include "kernel/inflight_audit.h"
#include "members/plan.h"

struct kt_audit_run {
	struct kt_inflight_audit a;
	bool loaded;       /* a holds the programs */
	bool load_failed;  /* logged once; not tried again until a reload */
	uint64_t last_ns;  /* the last audit */
	uint64_t corrections; /* since the daemon started */
};

/* Audits when one is due and the plan has an in-flight limit (loading the
 * programs the first time; dropping them once it has none). Whether the
 * kernel took them is recorded in feat (KT_FEAT_AUDIT). */
void kt_audit_run_tick(struct kt_audit_run *r, const struct kt_plan *plan, const char *pin_dir,
		       struct kt_features *feat, uint64_t now);
/* After a reload: a load that failed is tried again. */
void kt_audit_run_reset(struct kt_audit_run *r);
void kt_audit_run_close(struct kt_audit_run *r);

#endif
