/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Private to the config parser (config*.c): the walk's context, the YAML
 * walker's helpers (config_yaml.c) and each section's entry points. Every
 * error is one line "FILE:LINE: FIELD: what is wrong", made by fail(). */
#ifndef KT_CONFIG_INT_H
#define KT_CONFIG_INT_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <yaml.h>

#include "base/config.h"
#include "base/config_keys.h"

#define FIELD_LEN 200            /* longest field path we print */
#define MAX_PATH_BYTES 4095
#define MAX_RATE 1e12
#define NS_PER_MS 1000000ULL
#define NS_PER_SEC 1000000000ULL
#define NAME_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-"

#define NAME_OF(tab, i) ((unsigned)(i) < sizeof(tab) / sizeof(tab[0]) ? tab[i] : "?")

struct ctx {
	const char *file;
	const struct kt_config_env *env;
	yaml_document_t *doc;
	char *err;
	size_t errlen;
	void *limit_names; /* tsearch trees of the names parsed so far */
	void *tag_names;
};

/* A variable of the config's environment (NULL when unset). */
static inline const char *cfg_getenv(struct ctx *c, const char *name)
{
	return c->env->getenv(name, c->env->arg);
}

/* ---- errors ----------------------------------------------------------- */

static inline int line_of(const yaml_node_t *n)
{
	return n ? (int)n->start_mark.line + 1 : 1;
}

/* Fills c->err with "FILE:LINE: FIELD: message" (LINE of n) and returns code. */
__attribute__((format(printf, 5, 6)))
int kt_cfg_fail_code(struct ctx *c, int code, const yaml_node_t *n, const char *field,
		     const char *fmt, ...);

#define fail(c, n, field, ...) kt_cfg_fail_code(c, -EINVAL, n, field, __VA_ARGS__)
#define oom(c, n, field) kt_cfg_fail_code(c, -ENOMEM, n, field, "out of memory")

/* A value shown in an error: short, printable, one line. Returned by value so
 * it can be used inline; it lives until the end of the full expression. */
struct shown {
	char s[52];
};

static inline struct shown show_str(const char *v)
{
	struct shown out;
	size_t i, n = 0;

	for (i = 0; v[i] && n < sizeof(out.s) - 4; i++)
		out.s[n++] = (v[i] >= 0x20 && v[i] < 0x7f) ? v[i] : '?';
	if (v[i])
		out.s[n++] = '.', out.s[n++] = '.', out.s[n++] = '.';
	out.s[n] = '\0';
	return out;
}

static inline const char *kind_of(const yaml_node_t *n)
{
	switch (n->type) {
	case YAML_MAPPING_NODE: return "a mapping";
	case YAML_SEQUENCE_NODE: return "a list";
	default: return "a scalar";
	}
}

/* Field paths: "limits[0].rateLimit.max". */
static inline const char *join(char *buf, const char *parent, const char *key)
{
	struct shown k = show_str(key);

	if (parent && *parent)
		snprintf(buf, FIELD_LEN, "%s.%s", parent, k.s);
	else
		snprintf(buf, FIELD_LEN, "%s", k.s);
	return buf;
}

static inline const char *index_of(char *buf, const char *parent, int i)
{
	snprintf(buf, FIELD_LEN, "%s[%d]", parent, i);
	return buf;
}

/* ---- node access ------------------------------------------------------ */

static inline yaml_node_t *node_at(struct ctx *c, int id)
{
	return yaml_document_get_node(c->doc, id);
}

static inline const char *sval(const yaml_node_t *n)
{
	return (const char *)n->data.scalar.value;
}

/* YAML null: an absent value, "~" or "null". An empty block reads as null,
 * so "modes: {scheduled: }" and "store:" behave like their {} forms. */
static inline bool is_null(const yaml_node_t *n)
{
	const char *v;

	if (!n || n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return false;
	v = sval(n);
	return !*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") ||
	       !strcmp(v, "NULL");
}

/* Value of `key`, or NULL when absent. Call kt_cfg_check_map first. */
static inline yaml_node_t *map_get(struct ctx *c, yaml_node_t *n, const char *key)
{
	yaml_node_pair_t *p;

	if (!n || n->type != YAML_MAPPING_NODE)
		return NULL;
	for (p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
		yaml_node_t *k = node_at(c, p->key);

		if (k && k->type == YAML_SCALAR_NODE && !strcmp(sval(k), key))
			return node_at(c, p->value);
	}
	return NULL;
}

/* The mapping's key set must be a subset of `keys` (NULL-terminated; NULL:
 * any key, for maps of user names), with no key given twice. A null node is
 * an empty mapping. */
int kt_cfg_check_map(struct ctx *c, yaml_node_t *n, const char *field, const char *const *keys);
/* "FIELD.KEY: required but missing", at parent. */
int kt_cfg_missing(struct ctx *c, yaml_node_t *parent, const char *field, const char *key);

/* A field that takes one value or a list of them ("cidrs: 10.0.0.0/8" or
 * "cidrs: [...]"). kt_cfg_list_open refuses anything else ("expected WHAT,
 * got ...") and an empty list (`empty`, the message); a null value is one
 * item when `null_is_item` (its own check then refuses it), else refused as
 * "got nothing". Then kt_cfg_list_next gives each item and its field path,
 * FIELD[i] in a list and FIELD for the one value, and NULL after the last. */
struct kt_cfg_list {
	yaml_node_t *v;
	const char *field;
	int n, i;
};
int kt_cfg_list_open(struct ctx *c, yaml_node_t *v, const char *field, const char *what,
		     bool null_is_item, const char *empty, struct kt_cfg_list *l);
yaml_node_t *kt_cfg_list_next(struct ctx *c, struct kt_cfg_list *l, char item[FIELD_LEN]);

/* The `name` of a list element (mapping n at `field`): required, 1..31 of
 * NAME_CHARS, unique in its list; copied into `out`, the element's name.
 * The list is elements of `size` bytes from `base`, each with its line (an
 * int) at `line_off`; `names` is the tsearch tree of the names so far (a
 * scan of the earlier ones would take 50 M compares for 10,000 limits);
 * `list` names the list in the message ("limits"). */
struct kt_cfg_names {
	const char *list;
	const void *base;
	size_t size, line_off;
	void **names;
};
int kt_cfg_get_name(struct ctx *c, yaml_node_t *n, const char *field,
		    const struct kt_cfg_names *nl, char out[KT_NAME_LEN]);
/* The index of the entry named `name` in a tree kt_cfg_get_name filled
 * (entries of `size` bytes from `base`, the name first), -1 if none. */
int kt_cfg_name_index(void *const *names, const void *base, size_t size, const char *name);

/* ---- scalars ---------------------------------------------------------- */

/* A non-null scalar with no embedded NUL. `what` names the expected type. */
int kt_cfg_get_scalar(struct ctx *c, yaml_node_t *v, const char *field, const char *what,
		      const char **out);
bool kt_cfg_has_control(const char *s);
/* A non-empty string of at most maxlen bytes, no control character; malloc'd. */
int kt_cfg_get_str(struct ctx *c, yaml_node_t *v, const char *field, size_t maxlen, char **out);
/* The same, and absolute (starts with '/'). */
int kt_cfg_get_abs_path(struct ctx *c, yaml_node_t *v, const char *field, size_t maxlen,
			char **out);
/* A decimal number in [lo, hi]; `above_lo` makes the lower bound exclusive. */
int kt_cfg_get_number_in(struct ctx *c, yaml_node_t *v, const char *field, double lo,
			 bool above_lo, double hi, double *out);
int kt_cfg_get_int(struct ctx *c, yaml_node_t *v, const char *field, long long lo, long long hi,
		   long long *out);
int kt_cfg_get_bool(struct ctx *c, yaml_node_t *v, const char *field, bool *out);
/* One of names[0..n): its index. */
int kt_cfg_get_enum(struct ctx *c, yaml_node_t *v, const char *field, const char *const *names,
		    size_t n, int *out);
/* kt_parse_duration, in [lo, hi]. */
int kt_cfg_get_duration(struct ctx *c, yaml_node_t *v, const char *field, uint64_t lo,
			uint64_t hi, uint64_t *out);
/* "1500ms" style for messages: the largest unit that divides evenly. */
struct shown kt_cfg_fmt_dur(uint64_t ns);
/* "ADDR:PORT" or "[V6]:PORT" with an IP literal; with `local`, "PORT" and
 * ":PORT" alone mean 127.0.0.1; `eg` is the example in the message. */
int kt_cfg_get_addr_port(struct ctx *c, yaml_node_t *v, const char *field, const char *eg,
			 bool local, char *addr, size_t addrlen, int *out_port);
/* A cgroup path must not climb out of the cgroup2 mount it is resolved in. */
bool kt_cfg_has_dotdot(const char *p);

/* ---- files (config.c) ------------------------------------------------- */

/* Reads a whole config or secret file of at most `cap` bytes under the
 * volume rule (volfile.h); `what` names the cap in the message. */
int kt_cfg_read_capped(const char *path, size_t cap, const char *what, char **out,
		       size_t *outlen, const char **stage, char *why, size_t whylen);

/* ---- sections ---------------------------------------------------------- */

/* config_store.c: a store block into *s, already defaulted by
 * kt_cfg_store_defaults; kt_cfg_store_copy gives a limit its own copy of
 * the top-level store. */
int kt_cfg_store_defaults(struct kt_store_cfg *s);
int kt_cfg_store_copy(struct kt_store_cfg *dst, const struct kt_store_cfg *src);
void kt_cfg_store_free(struct kt_store_cfg *s);
int kt_cfg_parse_store(struct ctx *c, yaml_node_t *n, const char *field, struct kt_store_cfg *s);

/* config_limits.c: limits[idx] (cfg->store is the default store). */
/* parent: each limit's parent found by name (written before or after it),
 * of the same unit, and the chains free of cycles, KT_MAX_LEVELS deep at
 * most; sets parent and depth. After every limit is parsed. */
int kt_cfg_link_parents(struct ctx *c, yaml_node_t *limits, struct kt_config *cfg);
int kt_cfg_parse_limit(struct ctx *c, yaml_node_t *n, const char *field, struct kt_config *cfg,
		       int idx);
void kt_cfg_limit_free(struct kt_limit_cfg *l);

/* config_pods.c: a limit's pods: selector. */
int kt_cfg_parse_pods(struct ctx *c, yaml_node_t *n, const char *field,
		      struct kt_pod_selector *ps);
/* groupBy: "namespace", "label:KEY" or "parent" into l (group_by, group_label, group_line). */
int kt_cfg_parse_group_by(struct ctx *c, yaml_node_t *v, const char *field, struct kt_limit_cfg *l);
/* A label key ([prefix/]name), a capture name (1..63 of A-Z a-z 0-9 _). */
bool kt_cfg_label_key_ok(const char *k);
bool kt_cfg_capture_name_ok(const char *s);
/* {name} in cgroups[j] of l, once, as a whole component, `*up` components
 * from the end (*up < 0: any, then set; else it must be that many): it
 * becomes *. v and field are what a failure names. */
int kt_cfg_take_capture(struct ctx *c, yaml_node_t *v, const char *field, struct kt_limit_cfg *l,
			int j, const char *name, int *up);

/* config_weights.c: weightBy, weights and defaultWeight of a limit whose
 * cgroups:, pods:, unit, share and groupBy are parsed; l->default_weight
 * is 1 without them. */
int kt_cfg_parse_weights(struct ctx *c, yaml_node_t *n, const char *field, struct kt_limit_cfg *l);
void kt_cfg_weights_free(struct kt_limit_cfg *l);
/* floor on children: their parents' classes (after kt_cfg_link_parents) */
int kt_cfg_link_floors(struct ctx *c, yaml_node_t *limits, struct kt_config *cfg);

/* config_tags.c: tags[idx] (after the top level: socket and metrics are set). */
int kt_cfg_parse_tag(struct ctx *c, yaml_node_t *n, const char *field, struct kt_config *cfg,
		     int idx, int metrics_line);

#endif
