/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* A member's weight: see weights.h. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "members/groups.h"
#include "members/weights.h"

static const char *const src_names[] = { "none", "value", "default", "invalid" };

const char *kt_weight_src_name(enum kt_weight_src s)
{
	return (unsigned)s < sizeof(src_names) / sizeof(src_names[0]) ? src_names[s] : "?";
}

static int cmp_value(const void *key, const void *e)
{
	return strcmp((const char *)key, ((const struct kt_weight_value *)e)->value);
}

/* A value that is itself the weight: a plain decimal number in range. */
static bool number_weight(const char *s, double *out)
{
	char *end;
	double v;

	if (!*s || strspn(s, "0123456789.") != strlen(s))
		return false;
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || !(v >= KT_WEIGHT_MIN && v <= KT_WEIGHT_MAX))
		return false;
	*out = v;
	return true;
}

/* The value weightBy/classBy (by, key, up) reads for a member: its pod's
 * label, or the component its pattern captured (into buf); NULL: none. */
static const char *member_value(enum kt_weight_by by, const char *key, int up, const struct kt_pod *pod,
				const char *matched, char *buf, size_t len)
{
	if (by == KT_WEIGHT_LABEL && pod)
		return kt_pod_label(pod, key);
	if (by == KT_WEIGHT_ANNOTATION && pod)
		return kt_pod_annotation(pod, key);
	if (by == KT_WEIGHT_CAPTURE && matched && kt_group_path_value(matched, up, buf, len))
		return buf;
	if (by == KT_WEIGHT_CALLER)
		return matched; /* the caller's name; NULL for the plain limit */
	return NULL;
}

int kt_member_class(const struct kt_limit_cfg *lc, const struct kt_pod *pod, const char *matched,
		    const struct kt_limit_cfg *via, enum kt_weight_src *src)
{
	char buf[KT_WEIGHT_VALUE_MAX + 1];
	const char *v;

	*src = KT_WEIGHT_SRC_NONE;
	if (lc->class_by == KT_WEIGHT_NONE || lc->n_classes < 1)
		return 0;
	if (lc->class_by == KT_WEIGHT_CHILD) {
		*src = KT_WEIGHT_SRC_VALUE;
		if (via && via->child_class >= 0 && via->child_class < lc->n_classes)
			return via->child_class;
		*src = KT_WEIGHT_SRC_DEFAULT; /* the parent's own member */
		return lc->n_classes - 1;
	}
	v = member_value(lc->class_by, lc->class_key, lc->class_up, pod, matched, buf, sizeof(buf));
	*src = v ? KT_WEIGHT_SRC_INVALID : KT_WEIGHT_SRC_DEFAULT;
	for (int k = 0; v && k < lc->n_classes; k++) {
		if (!strcmp(lc->classes[k].name, v)) {
			*src = KT_WEIGHT_SRC_VALUE;
			return k;
		}
	}
	/* a caller named for its weight only is of the default class */
	if (lc->class_by == KT_WEIGHT_CALLER)
		*src = KT_WEIGHT_SRC_DEFAULT;
	return lc->default_class >= 0 && lc->default_class < lc->n_classes ? lc->default_class
									     : lc->n_classes - 1;
}

double kt_member_weight(const struct kt_limit_cfg *lc, const struct kt_pod *pod, const char *matched,
			enum kt_weight_src *src)
{
	/* a config built by hand (tests) may leave it 0 */
	double dflt = lc->default_weight > 0 ? lc->default_weight : 1, w;
	char buf[KT_WEIGHT_VALUE_MAX + 1];
	const char *v = NULL;
	const struct kt_weight_value *hit;

	*src = KT_WEIGHT_SRC_NONE;
	if (lc->weight_by == KT_WEIGHT_NONE)
		return 1;
	v = member_value(lc->weight_by, lc->weight_key, lc->weight_up, pod, matched, buf, sizeof(buf));
	if (!v) {
		*src = KT_WEIGHT_SRC_DEFAULT;
		return dflt;
	}
	*src = KT_WEIGHT_SRC_VALUE;
	if (lc->n_weights) {
		hit = bsearch(v, lc->weights, (size_t)lc->n_weights, sizeof(*lc->weights), cmp_value);
		if (hit)
			return hit->weight;
	} else if (number_weight(v, &w)) {
		return w;
	}
	/* a caller named for its class only weighs the default */
	*src = lc->weight_by == KT_WEIGHT_CALLER ? KT_WEIGHT_SRC_DEFAULT : KT_WEIGHT_SRC_INVALID;
	return dflt;
}
