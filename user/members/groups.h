/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* groupBy: a limit that is one pool per group (a namespace, a label's
 * value, a matched cgroup's parent directory). The parsed config keeps
 * such a limit as a template; the daemon runs an expanded config in which
 * it is replaced by one instance per group seen on this node, each an
 * ordinary limit named "<template>@<value>" with the template's rate,
 * burst, mode, store and parent, whose members are the template's members
 * of that group. Every node names a group's instance alike, so each
 * group agrees through the store under its own keys.
 *
 * A group is seen while a member has its value; unseen for the template's
 * rateLimit.ttl, it goes (its pool's keys expire in the store). Past
 * maxGroups values on a node, the rest share one instance,
 * "<template>@@other": nothing a template selects is ever unlimited.
 * Reads pods and the cgroup tree, no BPF state. */
#ifndef KT_GROUPS_H
#define KT_GROUPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "base/config.h"
#include "kube/pods.h"

/* Longest group value kept (a namespace or a label value is at most 63). */
#define KT_GROUP_VALUE_MAX 255

/* The name of template's instance for value (NULL: the other pool), in
 * the limit name alphabet plus '@': "<template>@<value>" when the value is
 * in the alphabet and it fits KT_NAME_LEN - 1, else the template's first
 * 17 characters, "@@" and 12 hex digits of a hash of both. */
void kt_group_instance_name(const char *tmpl, const char *value, char out[KT_NAME_LEN]);

/* The group value of pod for template lc (the namespace, or the label's
 * value), NULL when it has none (the label is absent). */
const char *kt_group_pod_value(const struct kt_limit_cfg *lc, const struct kt_pod *pod);
/* The group of a cgroup a pattern matched: the name `up` levels above it
 * (groupBy parent: 1, its parent directory; capture: lc->group_up), into
 * buf; false when it has none or it does not fit. */
bool kt_group_path_value(const char *path, int up, char *buf, size_t len);
/* Whether a member of group value v (NULL: none) is lc's: always for a
 * limit that is no instance; for an instance, the value its group names. */
bool kt_group_takes(const struct kt_limit_cfg *lc, const char *v);

struct kt_groups;

int kt_groups_new(struct kt_groups **out);
void kt_groups_free(struct kt_groups *g);
/* Looks at what src's groupBy limits select now (the pods of `pods`, the
 * cgroups their patterns match under cg_mount) and notes each value seen
 * at now; forgets a value unseen for its template's ttl, and templates src
 * no longer has. Returns 1 when the groups differ from the last
 * kt_groups_expand, 0 when not, -ENOMEM. */
int kt_groups_observe(struct kt_groups *g, const struct kt_config *src, const char *cg_mount,
		      const struct kt_pod_set *pods, uint64_t now);
/* When the next group expires if unseen until then (UINT64_MAX: none). */
uint64_t kt_groups_next_expiry(const struct kt_groups *g);
/* out = src with each groupBy limit replaced by its instances (by value,
 * the other pool last) and the parents renumbered; out->source = src.
 * Free it with kt_config_free before src. 0 or -ENOMEM (out zeroed). */
int kt_groups_expand(struct kt_groups *g, const struct kt_config *src, struct kt_config *out);
/* Groups of template name now: values and whether the other pool is in
 * use (for status); -1 when it has none. */
int kt_groups_count(const struct kt_groups *g, const char *tmpl, bool *other);

#endif
