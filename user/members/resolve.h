/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Member resolution: which cgroups on this node each limit of a
 * configuration applies to (plain paths, glob patterns, the pods a label
 * selector picks), the attach root above them, and the pending directories
 * where a pattern's members appear (pending.h). Reads the cgroup
 * filesystem only: no BPF state, so it sits above the kernel layer, whose
 * apply (user/kernel/apply.h) writes the plan made here. */
#ifndef KT_RESOLVE_H
#define KT_RESOLVE_H

#include <stdbool.h>
#include <stddef.h>
#include "base/config.h"
#include "members/plan.h"
#include "kube/pods.h"

/* Finds the member cgroups of cfg's limits (paths absolute, or relative to
 * the cgroup v2 mount; patterns expanded; the pods of `pods` a limit's
 * selector picks, at their kubelet cgroup directories) and reads their ids.
 * A plain path that does not exist yet is a warning, not an error; so is a
 * selected pod whose directory is not there yet. pods NULL: none known.
 * Touches no BPF state. Errors name file, line and field. */
int kt_plan_resolve(const struct kt_config *cfg, const char *cg_mount,
		    const struct kt_pod_set *pods, struct kt_plan *plan, char *err, size_t errlen);
/* The members of cur's limits (cur resolved from cfg) found now: cgroups
 * that appeared (a pattern's new match, a listed path created), went, or
 * were recreated under the same path (a new id). *changed is false, and
 * *next left empty, when the members are the same; else *next is the plan
 * to apply (kt_plan_apply finds the ids and keeps existing buckets). */
int kt_plan_refresh(const struct kt_plan *cur, const struct kt_config *cfg, const char *cg_mount,
		    const struct kt_pod_set *pods, struct kt_plan *next, bool *changed, char *err,
		    size_t errlen);
/* The directories (absolute) where the pods of `pods` will have their
 * cgroups, every pod when some limit of cfg has a pods: selector: what to
 * watch for while they are missing (a selected pod's mkdir makes it a
 * member; another's makes it an outsider, free, when its tier directory is
 * a pending one: pending.h). *out malloc'd (free each and it); returns the count or -ENOMEM. */
int kt_plan_pod_dirs(const struct kt_config *cfg, const char *cg_mount,
		     const struct kt_pod_set *pods, char ***out);
void kt_plan_free(struct kt_plan *plan);

/* The deepest common ancestor of what cfg's cgroup limits select: their
 * plain paths, the static directory part of their patterns (up to the first
 * component with a wildcard) and, for pods: limits, the kubelet's
 * kubepods.slice and kubepods directories under kubernetes.cgroupRoot (the
 * mount by default) that exist, or cgroupRoot itself when neither does. Lexical (paths need not exist),
 * then up to the nearest directory that exists. out: an absolute path; 0,
 * -ENOENT when no limit selects a cgroup, -ENAMETOOLONG. No BPF. */
int kt_plan_common_root(const struct kt_config *cfg, const char *cg_mount, char *out,
			size_t outlen);

/* Where plan's programs are attached, for status and the log, one line:
 * "/path (auto)", "/path (attachRoot)", "members", "members (auto: WHY)" or,
 * with no cgroup limit, "none". */
void kt_plan_attach_desc(const struct kt_plan *plan, char *buf, size_t len);

#endif
