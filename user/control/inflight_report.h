/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* In-flight limits (unit concurrent) in status and metrics: the sockets
 * open now, the slots in force, the peak, per node and per member, read
 * from kt_inflight and the buckets' lease as the kernel applies it. */
#ifndef KT_INFLIGHT_REPORT_H
#define KT_INFLIGHT_REPORT_H

#include <stdbool.h>
#include <stdint.h>
#include "base/strbuf.h"
#include "kernel/bpf_loader.h"
#include "members/plan.h"

/* One bucket's in-flight numbers. */
struct kt_inflight_view {
	uint64_t open;  /* sockets holding a slot */
	uint64_t slots; /* slots in force now (the lease's phase) */
	uint64_t peak;  /* the most open at once since the slot's bucket was made */
};

/* Whether the plan has an in-flight limit (unit concurrent). */
bool kt_plan_has_inflight(const struct kt_plan *plan);

/* The node's: its node bucket (pod scope), else its one bucket (node
 * scope). */
void kt_inflight_node(const struct kt_bpf *bpf, const struct kt_limit_rt *l, uint64_t now,
		      struct kt_inflight_view *out);
/* Member j's own bucket. */
void kt_inflight_member(const struct kt_bpf *bpf, const struct kt_limit_rt *l, int j, uint64_t now,
			struct kt_inflight_view *out);

/* Status: "inflight":{...}, (JSON, with its trailing comma) or a line. */
void kt_inflight_status(const struct kt_bpf *bpf, const struct kt_limit_rt *l, struct kt_sbuf *b,
			bool json, uint64_t now);
/* Metrics: the kthrottle_inflight* families for the plan's in-flight
 * limits (nothing when it has none); corrections: the audit's since the
 * start (kthrottle_inflight_corrections_total). */
void kt_inflight_metrics(const struct kt_bpf *bpf, const struct kt_plan *plan,
			 uint64_t corrections, struct kt_sbuf *b, uint64_t now);

#endif
