/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* weightBy, classBy: a member's weight in its limit's weighted max-min
 * share and its priority class, from its pod's label or the component of
 * its cgroup a pattern captured (config.h, struct kt_limit_cfg). Reads
 * only what it is given. */
#ifndef KT_WEIGHTS_H
#define KT_WEIGHTS_H

#include "base/config.h"
#include "kube/pods.h"

/* Where a member's weight came from, for status. */
enum kt_weight_src {
	KT_WEIGHT_SRC_NONE = 0, /* the limit has no weightBy: 1 */
	KT_WEIGHT_SRC_VALUE,    /* its value: named in weights, or a number */
	KT_WEIGHT_SRC_DEFAULT,  /* no value: defaultWeight */
	KT_WEIGHT_SRC_INVALID,  /* a value weights does not name, or no number in range: defaultWeight */
};

/* The weight of a member of lc found as `pod` (pods:) or by a pattern
 * matching `matched` (cgroups:), either NULL; for weightBy caller (unit
 * request), `matched` is the caller's name (NULL: the plain limit). *src
 * says which rule gave it. */
double kt_member_weight(const struct kt_limit_cfg *lc, const struct kt_pod *pod, const char *matched,
			enum kt_weight_src *src);
const char *kt_weight_src_name(enum kt_weight_src s);
/* The class (index into lc->classes) of a member found as for
 * kt_member_weight: the one its value names, else lc->default_class (*src
 * KT_WEIGHT_SRC_DEFAULT without a value, _INVALID with one naming none);
 * 0 when the limit has no classes. For a parent whose classes are its
 * children (KT_WEIGHT_CHILD), the class of `via`, the child the member
 * comes through (NULL: the parent's own member, the last class). */
int kt_member_class(const struct kt_limit_cfg *lc, const struct kt_pod *pod, const char *matched,
		    const struct kt_limit_cfg *via, enum kt_weight_src *src);

#endif
