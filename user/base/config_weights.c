/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Shares by importance, a limit's keys for them (config.h): weightBy,
 * weights and defaultWeight (where each member's weight in the weighted
 * max-min division of a share: demand pool comes from), classBy, classes
 * and defaultClass (its priority class), weight (what a child weighs in
 * its parent's pool; the parent is checked in kt_cfg_link_parents) and
 * floor (what a child can always use of it: kt_cfg_link_floors). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "base/config_int.h"
#include "base/config_keys.h"

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

static int parse_weight_by(struct ctx *c, yaml_node_t *n, const char *field, struct kt_limit_cfg *l);

/* label:KEY or capture:NAME (weightBy, classBy) into *by and *key; a
 * capture's {NAME} taken out of the patterns (*up), unless `same_up` >= 0:
 * the other key's capture of the same name, already taken. */
static int parse_by(struct ctx *c, yaml_node_t *v, const char *sub, const char *what,
		    struct kt_limit_cfg *l, enum kt_weight_by *by, char **key, int *up, int same_up)
{
	const char *s;
	int err;

	if ((err = kt_cfg_get_scalar(c, v, sub, "label:KEY, annotation:KEY, capture:NAME or caller", &s)))
		return err;
	/* a cooperative limit has no pod or cgroup to read: its callers name
	 * themselves when they open it */
	if (!strcmp(s, "caller")) {
		if (l->unit != KT_UNIT_REQUEST)
			return fail(c, v, sub,
				    "caller applies to unit request only (the name an application opens the limit by; this limit's unit is %s: label:KEY, annotation:KEY or capture:NAME)",
				    kt_unit_name(l->unit));
		*by = KT_WEIGHT_CALLER;
	} else if (l->unit == KT_UNIT_REQUEST) {
		return fail(c, v, sub,
			    "\"%s\": unit request has no pod or cgroup to read; its callers name their %s themselves: caller (kthrottle_open(\"LIMIT/CALLER\"))",
			    show_str(s).s, what);
	} else if (!strncmp(s, "annotation:", 11)) {
		size_t np = strlen(KT_ANNOTATION_PREFIX);

		if (strncmp(s + 11, KT_ANNOTATION_PREFIX, np) || !kt_cfg_label_key_ok(s + 11))
			return fail(c, v, sub,
				    "\"%s\" is no annotation key this reads (" KT_ANNOTATION_PREFIX "NAME: NAME 1..63 of A-Z a-z 0-9 . _ -, starting and ending alphanumeric; only these are kept)",
				    show_str(s + 11).s);
		*by = KT_WEIGHT_ANNOTATION;
	} else if (!strncmp(s, "label:", 6)) {
		if (!kt_cfg_label_key_ok(s + 6))
			return fail(c, v, sub,
				    "\"%s\" is no label key ([prefix/]name: name 1..63 of A-Z a-z 0-9 . _ -, starting and ending alphanumeric)",
				    show_str(s + 6).s);
		*by = KT_WEIGHT_LABEL;
	} else if (!strncmp(s, "capture:", 8)) {
		if (!kt_cfg_capture_name_ok(s + 8))
			return fail(c, v, sub,
				    "\"%s\" is no capture name (1..63 of A-Z a-z 0-9 _, written {NAME} in the patterns)",
				    show_str(s + 8).s);
		*by = KT_WEIGHT_CAPTURE;
	} else {
		return fail(c, v, sub,
			    "\"%s\" is not one of label:KEY or annotation:KEY (pods:), capture:NAME (cgroups: patterns) or caller (unit request)",
			    show_str(s).s);
	}
	if (!(*key = strdup(*by == KT_WEIGHT_CALLER ? s : strchr(s, ':') + 1)))
		return oom(c, v, sub);
	/* weights and classes divide a pool by demand: equal shares have nothing to divide */
	if (l->share != KT_SHARE_DEMAND)
		return fail(c, v, sub,
			    "needs share: demand (%s divide the pool among the members that want it; this limit shares equally)",
			    what);
	if (*by == KT_WEIGHT_CALLER)
		return 0;
	if ((*by == KT_WEIGHT_LABEL || *by == KT_WEIGHT_ANNOTATION) && (!l->pods.set || l->n_cgroups))
		return fail(c, v, sub, "%s:%s needs pods: and no cgroups: (cgroups: patterns by capture:NAME)",
			    *by == KT_WEIGHT_LABEL ? "label" : "annotation", *key);
	if (*by == KT_WEIGHT_CAPTURE) {
		if (l->pods.set || !l->n_cgroups)
			return fail(c, v, sub,
				    "capture:%s reads the cgroups a pattern matches: needs cgroups: patterns and no pods: (pods by label:KEY)",
				    *key);
		if (l->group_by == KT_GROUP_CAPTURE && !strcmp(l->group_label, *key))
			return fail(c, v, sub, "capture:%s is groupBy's too: each group would have one value",
				    *key);
		if (same_up >= 0) {
			*up = same_up;
			return 0;
		}
		*up = -1;
		for (int j = 0; j < l->n_cgroups; j++)
			if ((err = kt_cfg_take_capture(c, v, sub, l, j, *key, up)))
				return err;
	}
	return 0;
}

/* Whether v is written "N%": then *pct is N, or -1 when N is no number in
 * 0..100. */
static bool percent_of(yaml_node_t *v, double *pct)
{
	const char *s = v->type == YAML_SCALAR_NODE ? sval(v) : NULL;
	char *end;

	if (!s || !*s || s[strlen(s) - 1] != '%')
		return false;
	*pct = strtod(s, &end);
	if (end != s + strlen(s) - 1 || !(*pct >= 0 && *pct <= 100))
		*pct = -1;
	return true;
}

/* A class's floor or ceiling: tokens/s, or "N%" of rateLimit.max. */
static int get_class_rate(struct ctx *c, yaml_node_t *v, const char *field, double max, double *out)
{
	double pct;
	int err;

	if (percent_of(v, &pct)) {
		if (pct < 0)
			return fail(c, v, field, "\"%s\" is no percentage of max (0%%..100%%)", show_str(sval(v)).s);
		*out = max * pct / 100;
		return 0;
	}
	if ((err = kt_cfg_get_number_in(c, v, field, 0, false, max, out)))
		return err;
	return 0;
}

/* classes: [{name, floor, ceiling}, ...], the most important first. */
static int parse_classes(struct ctx *c, yaml_node_t *v, const char *field, struct kt_limit_cfg *l)
{
	char item[FIELD_LEN], sub[FIELD_LEN];
	struct kt_cfg_list it;
	yaml_node_t *e, *x;
	double floors = 0;
	const char *s;
	int err;

	if ((err = kt_cfg_list_open(c, v, field, "a list of classes", false, "give 2..8 classes", &it)))
		return err;
	if (it.n < 2 || it.n > KT_CLASSES_MAX)
		return fail(c, v, field, "%d classes: give 2..%d, the most important first", it.n, KT_CLASSES_MAX);
	while ((e = kt_cfg_list_next(c, &it, item))) {
		struct kt_share_class *k = &l->classes[l->n_classes];

		if (e->type != YAML_MAPPING_NODE)
			return fail(c, e, item, "expected a mapping {name, floor, ceiling}, got %s", kind_of(e));
		if ((err = kt_cfg_check_map(c, e, item, kt_cfg_keys_class)))
			return err;
		if (!(x = map_get(c, e, "name")))
			return kt_cfg_missing(c, e, item, "name");
		if ((err = kt_cfg_get_scalar(c, x, join(sub, item, "name"), "a class name", &s)))
			return err;
		if (!*s || strlen(s) > 63 || kt_cfg_has_control(s) || strchr(s, ' '))
			return fail(c, x, sub, "\"%s\" is no class name (1..63 printable, no spaces)", show_str(s).s);
		for (int q = 0; q < l->n_classes; q++)
			if (!strcmp(l->classes[q].name, s))
				return fail(c, x, sub, "\"%s\" is listed twice (first at line %d)", show_str(s).s,
					    l->classes[q].line);
		if (!(k->name = strdup(s)))
			return oom(c, x, sub);
		k->line = line_of(e);
		l->n_classes++;
		k->ceiling = l->rl.max;
		if ((x = map_get(c, e, "floor")) &&
		    (err = get_class_rate(c, x, join(sub, item, "floor"), l->rl.max, &k->floor)))
			return err;
		if ((x = map_get(c, e, "ceiling")) &&
		    (err = get_class_rate(c, x, join(sub, item, "ceiling"), l->rl.max, &k->ceiling)))
			return err;
		if (k->ceiling < k->floor)
			return fail(c, x ? x : e, item, "ceiling %g is below the floor %g", k->ceiling, k->floor);
		floors += k->floor;
		if (floors > l->rl.max * (1 + 1e-12))
			return fail(c, e, item, "the floors sum to %g, above rateLimit.max %g", floors, l->rl.max);
	}
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A caller is opened as "LIMIT/CALLER", a kt_coop entry's name. */
static int check_caller(struct ctx *c, yaml_node_t *v, const char *field, const struct kt_limit_cfg *l,
			const char *caller)
{
	if (strspn(caller, NAME_CHARS) != strlen(caller))
		return fail(c, v, field, "\"%s\" is no caller name (1..%zu of A-Z a-z 0-9 _ . -)",
			    show_str(caller).s, KT_NAME_LEN - 2 - strlen(l->name));
	if (strlen(l->name) + 1 + strlen(caller) >= KT_NAME_LEN)
		return fail(c, v, field,
			    "\"%s/%s\" is longer than %d characters, the most a cooperative limit's name may be (a shorter limit or caller name)",
			    l->name, caller, KT_NAME_LEN - 1);
	return 0;
}

/* weightBy/classBy caller: the names callers may use, the weights'
 * values and the classes' names, each checked where it is written. */
static int collect_callers(struct ctx *c, yaml_node_t *n, const char *field, struct kt_limit_cfg *l)
{
	yaml_node_t *ws = map_get(c, n, "weights"), *cs = map_get(c, n, "classes");
	char sub[FIELD_LEN], item[FIELD_LEN], list[FIELD_LEN];
	int err, k = 0;

	if (l->weight_by != KT_WEIGHT_CALLER && l->class_by != KT_WEIGHT_CALLER)
		return 0;
	if (!(l->callers = calloc((size_t)(l->n_weights + l->n_classes), sizeof(*l->callers))))
		return oom(c, n, field);
	if (l->weight_by == KT_WEIGHT_CALLER)
		for (yaml_node_pair_t *p = ws->data.mapping.pairs.start; p < ws->data.mapping.pairs.top; p++) {
			yaml_node_t *key = node_at(c, p->key);

			join(sub, join(item, field, "weights"), sval(key));
			if ((err = check_caller(c, key, sub, l, sval(key))))
				return err;
		}
	for (int q = 0; q < l->n_weights && l->weight_by == KT_WEIGHT_CALLER; q++)
		l->callers[l->n_callers++] = l->weights[q].value;
	if (l->class_by == KT_WEIGHT_CALLER) {
		for (yaml_node_item_t *e = cs->data.sequence.items.start; e < cs->data.sequence.items.top;
		     e++, k++) {
			yaml_node_t *name = map_get(c, node_at(c, *e), "name");
			bool seen = false;

			join(sub, index_of(item, join(list, field, "classes"), k), "name");
			if ((err = check_caller(c, name, sub, l, sval(name))))
				return err;
			for (int q = 0; q < l->n_callers; q++)
				seen |= !strcmp(l->callers[q], sval(name));
			if (!seen)
				l->callers[l->n_callers++] = l->classes[k].name;
		}
	}
	if (l->n_callers > KT_CALLERS_MAX)
		return fail(c, n, join(sub, field, l->class_by == KT_WEIGHT_CALLER ? "classBy" : "weightBy"),
			    "%d callers: at most %d a limit (each is a pool member on every node)", l->n_callers,
			    KT_CALLERS_MAX);
	qsort(l->callers, (size_t)l->n_callers, sizeof(*l->callers), cmp_str);
	/* each caller on each node its own bucket, as each pod of a pod-scope
	 * limit: the pool is divided between them */
	l->scope = KT_SCOPE_POD;
	return 0;
}

int kt_cfg_parse_weights(struct ctx *c, yaml_node_t *n, const char *field, struct kt_limit_cfg *l)
{
	yaml_node_t *cb, *cs = map_get(c, n, "classes"), *dc = map_get(c, n, "defaultClass");
	char sub[FIELD_LEN];
	int err;

	l->default_class = -1;
	l->child_class = -1;
	l->floor_pct = -1;
	if ((err = parse_weight_by(c, n, field, l)))
		return err;
	if ((cb = map_get(c, n, "floor"))) {
		join(sub, field, "floor");
		if (!l->parent_name[0])
			return fail(c, cb, sub, "needs parent: (what this limit can always use of its parent's rate)");
		if (l->group_by)
			return fail(c, cb, sub, "not on a groupBy limit: each group is a pool of its own");
		/* N% of the parent's max, known once all limits are parsed */
		if (percent_of(cb, &l->floor_pct)) {
			if (l->floor_pct < 0)
				return fail(c, cb, sub, "\"%s\" is no percentage of the parent's max (0%%..100%%)",
					    show_str(sval(cb)).s);
		} else if ((err = kt_cfg_get_number_in(c, cb, sub, 0, false, l->rl.max, &l->floor))) {
			return err;
		}
		l->floor_at_line = line_of(cb);
	}
	/* weight: this limit's in its parent's pool (the parent is checked
	 * once all limits are parsed, kt_cfg_link_parents) */
	if ((cb = map_get(c, n, "weight"))) {
		join(sub, field, "weight");
		if (!l->parent_name[0])
			return fail(c, cb, sub, "needs parent: (what this limit weighs in its parent's pool)");
		if ((err = get_weight(c, cb, sub, &l->weight)))
			return err;
		l->weight_at_line = line_of(cb);
	}
	cb = map_get(c, n, "classBy");
	if (!cb) {
		if (cs || dc)
			return fail(c, cs ? cs : dc, join(sub, field, cs ? "classes" : "defaultClass"),
				    "needs classBy (where a member's class comes from)");
		return collect_callers(c, n, field, l);
	}
	join(sub, field, "classBy");
	l->class_line = line_of(cb);
	if ((err = parse_by(c, cb, sub, "classes", l, &l->class_by, &l->class_key, &l->class_up,
			    l->weight_by == KT_WEIGHT_CAPTURE && l->weight_key &&
					    !strncmp(sval(cb), "capture:", 8) &&
					    !strcmp(sval(cb) + 8, l->weight_key)
				    ? l->weight_up
				    : -1)))
		return err;
	if (!cs)
		return kt_cfg_missing(c, n, field, "classes");
	if ((err = parse_classes(c, cs, join(sub, field, "classes"), l)))
		return err;
	l->default_class = l->n_classes - 1;
	if (dc) {
		const char *s;

		join(sub, field, "defaultClass");
		if ((err = kt_cfg_get_scalar(c, dc, sub, "a class name", &s)))
			return err;
		l->default_class = -1;
		for (int k = 0; k < l->n_classes; k++)
			if (!strcmp(l->classes[k].name, s))
				l->default_class = k;
		if (l->default_class < 0)
			return fail(c, dc, sub, "\"%s\" is no class of this limit", show_str(s).s);
	}
	return collect_callers(c, n, field, l);
}

static int parse_weight_by(struct ctx *c, yaml_node_t *n, const char *field, struct kt_limit_cfg *l)
{
	yaml_node_t *by = map_get(c, n, "weightBy"), *ws = map_get(c, n, "weights"),
		    *dw = map_get(c, n, "defaultWeight");
	char sub[FIELD_LEN];
	int err;

	l->default_weight = 1;
	if (!by) {
		if (ws || dw)
			return fail(c, ws ? ws : dw, join(sub, field, ws ? "weights" : "defaultWeight"),
				    "needs weightBy (where a member's weight comes from)");
		return 0;
	}
	join(sub, field, "weightBy");
	l->weight_line = line_of(by);
	if ((err = parse_by(c, by, sub, "weights", l, &l->weight_by, &l->weight_key, &l->weight_up, -1)))
		return err;
	if (ws && (err = parse_values(c, ws, join(sub, field, "weights"), l)))
		return err;
	if (l->weight_by == KT_WEIGHT_CALLER && !ws)
		return fail(c, by, sub,
			    "caller needs weights: {CALLER: WEIGHT, ...} (the names callers may open the limit by, LIMIT/CALLER)");
	if (dw && (err = get_weight(c, dw, join(sub, field, "defaultWeight"), &l->default_weight)))
		return err;
	return 0;
}

/* A parent some of whose children have floor: its classes are its
 * children in order, each its floor and its rateLimit.max (the ceiling),
 * then one for the parent's own members (floor 0); they share the divided
 * rate by weight above their floors (classes_siblings), not in order. */
int kt_cfg_link_floors(struct ctx *c, yaml_node_t *limits, struct kt_config *cfg)
{
	char sub[FIELD_LEN];

	for (int i = 0; i < cfg->n_limits; i++) {
		struct kt_limit_cfg *l = &cfg->limits[i], *p;
		yaml_node_t *at;

		if (!l->floor_at_line)
			continue;
		p = &cfg->limits[kt_cfg_parent(l)];
		at = map_get(c, node_at(c, limits->data.sequence.items.start[i]), "floor");
		snprintf(sub, sizeof(sub), "limits[%d].floor", i);
		if (p->share != KT_SHARE_DEMAND)
			return fail(c, at, sub,
				    "its parent %s (line %d) shares equally: give it share: demand for its children to keep floors in it",
				    p->name, p->line);
		if (p->class_by != KT_WEIGHT_NONE && p->class_by != KT_WEIGHT_CHILD)
			return fail(c, at, sub,
				    "its parent %s (line %d) has classBy: a parent's classes are either its own or its children",
				    p->name, p->line);
		if (l->floor_pct >= 0)
			l->floor = p->rl.max * l->floor_pct / 100;
		if (l->floor > l->rl.max * (1 + 1e-12))
			return fail(c, at, sub, "%g is above this limit's rateLimit.max %g, its ceiling in %s", l->floor,
				    l->rl.max, p->name);
		if (p->class_by == KT_WEIGHT_CHILD)
			continue; /* its classes are made already */
		/* the parent's classes: every child, then its own members */
		p->class_by = KT_WEIGHT_CHILD;
		p->classes_siblings = true;
		p->class_line = l->floor_at_line;
		for (int j = 0; j < cfg->n_limits; j++) {
			struct kt_limit_cfg *k = &cfg->limits[j];

			if (kt_cfg_parent(k) != kt_cfg_parent(l))
				continue;
			if (p->n_classes >= KT_CLASSES_MAX - 1)
				return fail(c, at, sub,
					    "%s has more than %d children: a parent whose children keep floors has at most %d",
					    p->name, KT_CLASSES_MAX - 1, KT_CLASSES_MAX - 1);
			k->child_class = p->n_classes;
			p->classes[p->n_classes] = (struct kt_share_class){
				.name = strdup(k->name),
				.ceiling = k->rl.max < p->rl.max ? k->rl.max : p->rl.max,
				.line = k->line,
			};
			if (!p->classes[p->n_classes++].name)
				return oom(c, at, sub);
		}
		p->classes[p->n_classes] = (struct kt_share_class){
			.name = strdup(p->name), .ceiling = p->rl.max, .line = p->line };
		if (!p->classes[p->n_classes++].name)
			return oom(c, at, sub);
		p->default_class = p->n_classes - 1;
	}
	/* the floors, now that every child's is known */
	for (int i = 0; i < cfg->n_limits; i++) {
		struct kt_limit_cfg *l = &cfg->limits[i], *p;
		double floors = 0;

		if (!l->floor_at_line)
			continue;
		p = &cfg->limits[kt_cfg_parent(l)];
		p->classes[l->child_class].floor = l->floor;
		for (int k = 0; k < p->n_classes; k++)
			floors += p->classes[k].floor;
		if (floors > p->rl.max * (1 + 1e-12)) {
			snprintf(sub, sizeof(sub), "limits[%d].floor", i);
			return fail(c, map_get(c, node_at(c, limits->data.sequence.items.start[i]), "floor"), sub,
				    "the floors of %s's children sum to %g, above its rateLimit.max %g", p->name,
				    floors, p->rl.max);
		}
	}
	return 0;
}

void kt_cfg_weights_free(struct kt_limit_cfg *l)
{
	free(l->callers);
	l->callers = NULL;
	l->n_callers = 0;
	for (int k = 0; k < l->n_classes; k++)
		free(l->classes[k].name);
	free(l->class_key);
	l->class_key = NULL;
	l->n_classes = 0;
	for (int i = 0; i < l->n_weights; i++)
		free(l->weights[i].value);
	free(l->weights);
	free(l->weight_key);
	l->weights = NULL;
	l->weight_key = NULL;
	l->n_weights = 0;
}
