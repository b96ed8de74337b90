/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* A limit's weightBy, weights and defaultWeight (config.h): where each
 * member's weight in the weighted max-min division of a share: demand pool
 * comes from. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "base/config_int.h"

static int cmp_value(const void *a, const void *b)
{
	return strcmp(((const struct kt_weight_value *)a)->value,
		      ((const struct kt_weight_value *)b)->value);
}

/* a weight: a number KT_WEIGHT_MIN..KT_WEIGHT_MAX (zero, negative, NaN and
 * inf are refused by the range) */
static int get_weight(struct ctx *c, yaml_node_t *v, const char *field, double *out)
{
	return kt_cfg_get_number_in(c, v, field, KT_WEIGHT_MIN, false, KT_WEIGHT_MAX, out);
}

/* weights: {VALUE: WEIGHT, ...}: at most KT_WEIGHTS_MAX values, each a
 * non-empty string of at most KT_WEIGHT_VALUE_MAX characters, once. */
static int parse_values(struct ctx *c, yaml_node_t *v, const char *field, struct kt_limit_cfg *l)
{
	char item[FIELD_LEN];
	size_t n;
	int err;

	if (v->type != YAML_MAPPING_NODE)
		return fail(c, v, field, "expected a mapping of values to weights ({prod: 3, batch: 1}), got %s",
			    kind_of(v));
	n = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
	if (n < 1 || n > KT_WEIGHTS_MAX)
		return fail(c, v, field, "%zu values: give 1..%d", n, KT_WEIGHTS_MAX);
	if (!(l->weights = calloc(n, sizeof(*l->weights))))
		return oom(c, v, field);
	for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
		yaml_node_t *k = node_at(c, p->key), *w = node_at(c, p->value);
		struct kt_weight_value *e = &l->weights[l->n_weights];
		const char *s;

		if ((err = kt_cfg_get_scalar(c, k, field, "a value (a label value or a captured name)", &s)))
			return err;
		if (!*s || strlen(s) > KT_WEIGHT_VALUE_MAX || kt_cfg_has_control(s))
			return fail(c, k, field, "\"%s\" is no value (1..%d printable characters)", show_str(s).s,
				    KT_WEIGHT_VALUE_MAX);
		join(item, field, s);
		if (!(e->value = strdup(s)))
			return oom(c, k, field);
		l->n_weights++;
		if ((err = get_weight(c, w, item, &e->weight)))
			return err;
		for (int q = 0; q < l->n_weights - 1; q++)
			if (!strcmp(l->weights[q].value, s))
				return fail(c, k, item, "listed twice");
	}
	qsort(l->weights, (size_t)l->n_weights, sizeof(*l->weights), cmp_value);
	return 0;
}

int kt_cfg_parse_weights(struct ctx *c, yaml_node_t *n, const char *field, struct kt_limit_cfg *l)
{
	yaml_node_t *by = map_get(c, n, "weightBy"), *ws = map_get(c, n, "weights"),
		    *dw = map_get(c, n, "defaultWeight");
	char sub[FIELD_LEN];
	const char *s;
	int err;

	l->default_weight = 1;
	if (!by) {
		if (ws || dw)
			return fail(c, ws ? ws : dw, join(sub, field, ws ? "weights" : "defaultWeight"),
				    "needs weightBy (where a member's weight comes from)");
		return 0;
	}
	join(sub, field, "weightBy");
	if ((err = kt_cfg_get_scalar(c, by, sub, "label:KEY or capture:NAME", &s)))
		return err;
	l->weight_line = line_of(by);
	if (!strncmp(s, "label:", 6)) {
		if (!kt_cfg_label_key_ok(s + 6))
			return fail(c, by, sub,
				    "\"%s\" is no label key ([prefix/]name: name 1..63 of A-Z a-z 0-9 . _ -, starting and ending alphanumeric)",
				    show_str(s + 6).s);
		l->weight_by = KT_WEIGHT_LABEL;
	} else if (!strncmp(s, "capture:", 8)) {
		if (!kt_cfg_capture_name_ok(s + 8))
			return fail(c, by, sub,
				    "\"%s\" is no capture name (1..63 of A-Z a-z 0-9 _, written {NAME} in the patterns)",
				    show_str(s + 8).s);
		l->weight_by = KT_WEIGHT_CAPTURE;
	} else {
		return fail(c, by, sub, "\"%s\" is not one of label:KEY (pods:) or capture:NAME (cgroups: patterns)",
			    show_str(s).s);
	}
	if (!(l->weight_key = strdup(strchr(s, ':') + 1)))
		return oom(c, by, sub);
	/* weights divide a pool by demand: equal shares have nothing to weigh */
	if (l->share != KT_SHARE_DEMAND)
		return fail(c, by, sub,
			    "needs share: demand (weights divide the pool among the members that want it; this limit shares equally)");
	if (l->unit == KT_UNIT_REQUEST)
		return fail(c, by, sub,
			    "not allowed with unit request (a cooperative limit has one member per node: the node)");
	if (l->weight_by == KT_WEIGHT_LABEL && (!l->pods.set || l->n_cgroups))
		return fail(c, by, sub, "label:%s weighs pods: needs pods: and no cgroups: (weigh cgroups: patterns by capture:NAME)",
			    l->weight_key);
	if (l->weight_by == KT_WEIGHT_CAPTURE) {
		if (l->pods.set || !l->n_cgroups)
			return fail(c, by, sub,
				    "capture:%s weighs the cgroups a pattern matches: needs cgroups: patterns and no pods: (weigh pods by label:KEY)",
				    l->weight_key);
		if (l->group_by == KT_GROUP_CAPTURE && !strcmp(l->group_label, l->weight_key))
			return fail(c, by, sub, "capture:%s is groupBy's too: each group would be one weight",
				    l->weight_key);
		l->weight_up = -1;
		for (int j = 0; j < l->n_cgroups; j++)
			if ((err = kt_cfg_take_capture(c, by, sub, l, j, l->weight_key, &l->weight_up)))
				return err;
	}
	if (ws && (err = parse_values(c, ws, join(sub, field, "weights"), l)))
		return err;
	if (dw && (err = get_weight(c, dw, join(sub, field, "defaultWeight"), &l->default_weight)))
		return err;
	return 0;
}

void kt_cfg_weights_free(struct kt_limit_cfg *l)
{
	for (int i = 0; i < l->n_weights; i++)
		free(l->weights[i].value);
	free(l->weights);
	free(l->weight_key);
	l->weights = NULL;
	l->weight_key = NULL;
	l->n_weights = 0;
}
