// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* A limit's pods: block, a Kubernetes label selector over the pods on this
 * node, and the Kubernetes name rules (kt_dns_name_ok). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/config_int.h"

static const char *const label_op_names[] = { "In", "NotIn", "Exists", "DoesNotExist" };

const char *kt_label_op_name(enum kt_label_op op) { return NAME_OF(label_op_names, op); }

static bool alnum(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
}

/* A label name or value as Kubernetes validates it: at most 63 of
 * [A-Za-z0-9._-], starting and ending alphanumeric (a value may be empty). */
static bool label_name_ok(const char *s, size_t n, bool empty_ok)
{
	if (!n)
		return empty_ok;
	if (n > 63 || !alnum(s[0]) || !alnum(s[n - 1]))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!alnum(s[i]) && s[i] != '.' && s[i] != '_' && s[i] != '-')
			return false;
	return true;
}

bool kt_dns_name_ok(const char *s, size_t n, bool label)
{
	size_t start = 0;

	if (!n || n > (label ? 63 : 253))
		return false;
	for (size_t i = 0; i <= n; i++) {
		char ch = i < n ? s[i] : '.';

		if (ch == '.') {
			if (label && i < n)
				return false;
			if (i == start || s[start] == '-' || s[i - 1] == '-' || i - start > 63)
				return false;
			start = i + 1;
		} else if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-')) {
			return false;
		}
	}
	return true;
}

bool kt_cfg_label_key_ok(const char *k)
{
	const char *slash = strchr(k, '/');

	if (!slash)
		return label_name_ok(k, strlen(k), false);
	return kt_dns_name_ok(k, (size_t)(slash - k), false) &&
	       label_name_ok(slash + 1, strlen(slash + 1), false);
}

static int get_label_key(struct ctx *c, yaml_node_t *v, const char *field, char **out)
{
	int err = kt_cfg_get_str(c, v, field, 317, out);

	if (!err && !kt_cfg_label_key_ok(*out))
		return fail(c, v, field,
			    "\"%s\" is not a label key ([prefix/]name: name 1..63 of A-Z a-z 0-9 . _ -, starting and ending alphanumeric)",
			    show_str(*out).s);
	return err;
}

static int get_label_value(struct ctx *c, yaml_node_t *v, const char *field, char **out)
{
	const char *s;
	int err;

	/* an empty value is a valid label value: `key: ""` */
	if (v->type == YAML_SCALAR_NODE && !is_null(v) && !*sval(v))
		s = "";
	else if ((err = kt_cfg_get_scalar(c, v, field, "a label value", &s)))
		return err;
	if (!label_name_ok(s, strlen(s), true))
		return fail(c, v, field,
			    "\"%s\" is not a label value (0..63 of A-Z a-z 0-9 . _ -, starting and ending alphanumeric)",
			    show_str(s).s);
	*out = strdup(s);
	return *out ? 0 : oom(c, v, field);
}

static struct kt_label_req *new_req(struct ctx *c, yaml_node_t *v, const char *field,
				    struct kt_pod_selector *ps)
{
	if (ps->n_reqs == KT_MAX_LABEL_REQS) {
		fail(c, v, field, "at most %d labels and expressions per selector", KT_MAX_LABEL_REQS);
		return NULL;
	}
	return &ps->reqs[ps->n_reqs++];
}

static int parse_label_expr(struct ctx *c, yaml_node_t *n, const char *field,
			    struct kt_pod_selector *ps)
{
	static const char *const keys[] = { "key", "operator", "values", NULL };
	char sub[FIELD_LEN], item[FIELD_LEN];
	struct kt_label_req *r;
	yaml_node_t *v, *vals;
	int e, err;

	if (n->type != YAML_MAPPING_NODE)
		return fail(c, n, field, "expected a mapping {key, operator, values}, got %s",
			    kind_of(n));
	if ((err = kt_cfg_check_map(c, n, field, keys)))
		return err;
	if (!(r = new_req(c, n, field, ps)))
		return -EINVAL;
	if (!(v = map_get(c, n, "key")))
		return kt_cfg_missing(c, n, field, "key");
	if ((err = get_label_key(c, v, join(sub, field, "key"), &r->key)))
		return err;
	if (!(v = map_get(c, n, "operator")))
		return kt_cfg_missing(c, n, field, "operator");
	if ((err = kt_cfg_get_enum(c, v, join(sub, field, "operator"), label_op_names, 4, &e)))
		return err;
	r->op = (enum kt_label_op)e;
	vals = map_get(c, n, "values");
	join(sub, field, "values");
	if (r->op == KT_LABEL_EXISTS || r->op == KT_LABEL_DOES_NOT_EXIST) {
		if (vals && !(vals->type == YAML_SEQUENCE_NODE &&
			      vals->data.sequence.items.start == vals->data.sequence.items.top))
			return fail(c, vals, sub, "must be empty for operator %s", label_op_names[e]);
		return 0;
	}
	if (!vals)
		return fail(c, n, sub, "required for operator %s", label_op_names[e]);
	if (vals->type != YAML_SEQUENCE_NODE)
		return fail(c, vals, sub, "expected a list of label values, got %s", kind_of(vals));
	if (vals->data.sequence.items.start == vals->data.sequence.items.top)
		return fail(c, vals, sub, "needs at least one value for operator %s",
			    label_op_names[e]);
	for (yaml_node_item_t *it = vals->data.sequence.items.start;
	     it < vals->data.sequence.items.top; it++) {
		if (r->n_values == KT_MAX_LABEL_VALUES)
			return fail(c, vals, sub, "at most %d values", KT_MAX_LABEL_VALUES);
		index_of(item, sub, r->n_values);
		if ((err = get_label_value(c, node_at(c, *it), item, &r->values[r->n_values])))
			return err;
		r->n_values++;
	}
	return 0;
}

/* pods: {namespace: NS, labels: {K: V}, matchExpressions: [{key, operator,
 * values}]}: every part optional, all must hold (as a Kubernetes selector). */
int kt_cfg_parse_pods(struct ctx *c, yaml_node_t *n, const char *field, struct kt_pod_selector *ps)
{
	static const char *const keys[] = { "namespace", "labels", "matchExpressions", NULL };
	char sub[FIELD_LEN], item[FIELD_LEN];
	yaml_node_t *v;
	int err;

	if (n->type != YAML_MAPPING_NODE)
		return fail(c, n, field, "expected a mapping {namespace, labels, matchExpressions}, got %s",
			    kind_of(n));
	if ((err = kt_cfg_check_map(c, n, field, keys)))
		return err;
	ps->set = true;
	ps->line = line_of(n);
	if ((v = map_get(c, n, "namespace"))) {
		join(sub, field, "namespace");
		if ((err = kt_cfg_get_str(c, v, sub, 63, &ps->namespace)))
			return err;
		if (!kt_dns_name_ok(ps->namespace, strlen(ps->namespace), true))
			return fail(c, v, sub,
				    "\"%s\" is not a namespace name (1..63 of a-z 0-9 -, starting and ending alphanumeric)",
				    show_str(ps->namespace).s);
	}
	if ((v = map_get(c, n, "labels"))) {
		join(sub, field, "labels");
		if (v->type != YAML_MAPPING_NODE)
			return fail(c, v, sub, "expected a mapping of label keys to values, got %s",
				    kind_of(v));
		if ((err = kt_cfg_check_map(c, v, sub, NULL)))
			return err;
		for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top;
		     p++) {
			yaml_node_t *k = node_at(c, p->key);
			struct kt_label_req *r = new_req(c, k, sub, ps);

			if (!r)
				return -EINVAL;
			r->op = KT_LABEL_IN;
			if ((err = get_label_key(c, k, sub, &r->key)))
				return err;
			join(item, sub, r->key);
			if ((err = get_label_value(c, node_at(c, p->value), item, &r->values[0])))
				return err;
			r->n_values = 1;
		}
	}
	if ((v = map_get(c, n, "matchExpressions"))) {
		join(sub, field, "matchExpressions");
		if (v->type != YAML_SEQUENCE_NODE)
			return fail(c, v, sub, "expected a list of expressions, got %s", kind_of(v));
		for (yaml_node_item_t *it = v->data.sequence.items.start;
		     it < v->data.sequence.items.top; it++) {
			index_of(item, sub, (int)(it - v->data.sequence.items.start));
			if ((err = parse_label_expr(c, node_at(c, *it), item, ps)))
				return err;
		}
	}
	return 0;
}

void kt_pod_selector_free(struct kt_pod_selector *ps)
{
	free(ps->namespace);
	for (int i = 0; i < ps->n_reqs; i++) {
		free(ps->reqs[i].key);
		for (int j = 0; j < ps->reqs[i].n_values; j++)
			free(ps->reqs[i].values[j]);
	}
	memset(ps, 0, sizeof(*ps));
}

static const char *const group_by_names[] = { "", "namespace", "label", "parent", "capture" };

const char *kt_group_by_name(enum kt_group_by g) { return NAME_OF(group_by_names, g); }

bool kt_cfg_capture_name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n < 1 || n > 63)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '_')
			return false;
	return true;
}

int kt_cfg_parse_group_by(struct ctx *c, yaml_node_t *v, const char *field, struct kt_limit_cfg *l)
{
	const char *s;
	int err = kt_cfg_get_scalar(c, v, field, "namespace, label:KEY, parent or capture:NAME", &s);

	if (err)
		return err;
	l->group_line = line_of(v);
	if (!strcmp(s, "namespace")) {
		l->group_by = KT_GROUP_NAMESPACE;
	} else if (!strcmp(s, "parent")) {
		l->group_by = KT_GROUP_PARENT;
	} else if (!strncmp(s, "label:", 6)) {
		if (!kt_cfg_label_key_ok(s + 6))
			return fail(c, v, field,
				    "\"%s\" is no label key ([prefix/]name: name 1..63 of A-Z a-z 0-9 . _ -, starting and ending alphanumeric)",
				    show_str(s + 6).s);
		l->group_by = KT_GROUP_LABEL;
		if (!(l->group_label = strdup(s + 6)))
			return oom(c, v, field);
	} else if (!strncmp(s, "capture:", 8)) {
		if (!kt_cfg_capture_name_ok(s + 8))
			return fail(c, v, field,
				    "\"%s\" is no capture name (1..63 of A-Z a-z 0-9 _, written {NAME} in the patterns)",
				    show_str(s + 8).s);
		l->group_by = KT_GROUP_CAPTURE;
		if (!(l->group_label = strdup(s + 8)))
			return oom(c, v, field);
	} else {
		return fail(c, v, field,
			    "\"%s\" is not one of namespace, label:KEY (pods:), parent or capture:NAME (cgroups: patterns)",
			    show_str(s).s);
	}
	return 0;
}

bool kt_config_uses_pods(const struct kt_config *cfg)
{
	if (cfg->source) /* a groupBy limit with no group yet selects pods too */
		cfg = cfg->source;
	for (int i = 0; i < cfg->n_limits; i++)
		if (cfg->limits[i].pods.set)
			return true;
	return false;
}
