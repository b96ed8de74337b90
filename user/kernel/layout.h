/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What the kernel maps and links should hold for a plan, computed from the
 * plan alone: the classifier's rules, each member cgroup's kt_members value
 * (its limits, those inherited from the members it is nested in, pending
 * entries), the hooks each needs and where they are attached; and the
 * checks on all of it, each error naming the limit to blame. Pure: no BPF
 * call, no root, so `kthrottled --check` runs it as a start would.
 * apply.c (kt_plan_apply) then writes what this computed. */
#ifndef KT_LAYOUT_H
#define KT_LAYOUT_H

#include <stddef.h>
#include "kernel/bpf_loader.h"
#include "kernel/classify.h"
#include "members/plan.h"

/* Every check of kt_plan_apply's plan that needs no kernel state: limit and
 * bucket counts of the plan alone, the classifier (rules per prefix,
 * prefixes), limits per cgroup and member cgroups. kt_plan_apply runs the
 * same code first, so a plan this accepts fails to apply only for the
 * kernel's reasons. Errors are one line naming file, line and limit:
 * "FILE:LINE: limits[I] (NAME): what". No BPF, no root. */
int kt_plan_check(const struct kt_plan *plan, char *err, size_t errlen);

/* kt_plan_check's work, with what it computed: the part of the plan that
 * needs only the config and the cgroup ids: limit and bucket counts, the classifier (rules[] filled here), the kt_members
 * values (want, want_vals: KT_MAX_MEMBERSHIPS each) and the attach points
 * (*attach allocated here). kt_plan_check and kt_plan_apply both run it, so
 * --check and a start cannot disagree on it. */
int kt_plan_layout(const struct kt_plan *plan, struct kt_rule_input *rules,
		   struct kt_classifier *cls, struct kt_attach *want,
		   struct kt_member_val *want_vals, int *n_want, struct kt_attach **attach,
		   int *n_attach, char *err, size_t errlen);

#endif
