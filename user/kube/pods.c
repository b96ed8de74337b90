/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kube/pods.h"

void kt_pod_free_labels(struct kt_pod *p)
{
	for (int i = 0; i < p->n_labels; i++) {
		free(p->label_keys[i]);
		free(p->label_values[i]);
	}
	p->n_labels = 0;
	for (int i = 0; i < p->n_annots; i++) {
		free(p->annot_keys[i]);
		free(p->annot_values[i]);
	}
	p->n_annots = 0;
}

/* key = value in the pairs keys/values (*n of at most max), copied. */
static int pair_set(char **keys, char **values, int *n, int max, const char *key, const char *value)
{
	char *k, *v;

	for (int i = 0; i < *n; i++)
		if (!strcmp(keys[i], key)) {
			if (!(v = strdup(value)))
				return -ENOMEM;
			free(values[i]);
			values[i] = v;
			return 0;
		}
	if (*n == max)
		return -E2BIG;
	k = strdup(key);
	v = strdup(value);
	if (!k || !v) {
		free(k);
		free(v);
		return -ENOMEM;
	}
	keys[*n] = k;
	values[*n] = v;
	(*n)++;
	return 0;
}

static const char *pair_get(char *const *keys, char *const *values, int n, const char *key)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(keys[i], key))
			return values[i];
	return NULL;
}

int kt_pod_add_label(struct kt_pod *p, const char *key, const char *value)
{
	return pair_set(p->label_keys, p->label_values, &p->n_labels, KT_POD_MAX_LABELS, key, value);
}

const char *kt_pod_label(const struct kt_pod *p, const char *key)
{
	return pair_get(p->label_keys, p->label_values, p->n_labels, key);
}

int kt_pod_add_annotation(struct kt_pod *p, const char *key, const char *value)
{
	return pair_set(p->annot_keys, p->annot_values, &p->n_annots, KT_POD_MAX_ANNOTATIONS, key, value);
}

const char *kt_pod_annotation(const struct kt_pod *p, const char *key)
{
	return pair_get(p->annot_keys, p->annot_values, p->n_annots, key);
}

/* dst = p with its own copies of the labels and annotations. */
static int pod_copy(struct kt_pod *dst, const struct kt_pod *p)
{
	*dst = *p;
	dst->n_labels = dst->n_annots = 0;
	for (int i = 0; i < p->n_labels; i++)
		if (kt_pod_add_label(dst, p->label_keys[i], p->label_values[i]))
			goto oom;
	for (int i = 0; i < p->n_annots; i++)
		if (kt_pod_add_annotation(dst, p->annot_keys[i], p->annot_values[i]))
			goto oom;
	return 0;
oom:
	kt_pod_free_labels(dst);
	return -ENOMEM;
}

static int find(const struct kt_pod_set *s, const char *uid)
{
	for (int i = 0; i < s->n; i++)
		if (!strcmp(s->pods[i].uid, uid))
			return i;
	return -1;
}

const struct kt_pod *kt_pod_set_find(const struct kt_pod_set *s, const char *uid)
{
	int i = find(s, uid);

	return i < 0 ? NULL : &s->pods[i];
}

int kt_pod_set_put(struct kt_pod_set *s, const struct kt_pod *p)
{
	struct kt_pod copy;
	int i = find(s, p->uid);

	if (pod_copy(&copy, p))
		return -ENOMEM;
	if (i >= 0) {
		kt_pod_free_labels(&s->pods[i]);
		s->pods[i] = copy;
		return 0;
	}
	if (s->n == s->cap) {
		int cap = s->cap ? 2 * s->cap : 16;
		struct kt_pod *g = realloc(s->pods, (size_t)cap * sizeof(*g));

		if (!g) {
			kt_pod_free_labels(&copy);
			return -ENOMEM;
		}
		s->pods = g;
		s->cap = cap;
	}
	s->pods[s->n++] = copy;
	return 0;
}

static int find_other(const struct kt_pod_set *s, const char *uid)
{
	for (int i = 0; i < s->n_others; i++)
		if (!strcmp(s->others[i].uid, uid))
			return i;
	return -1;
}

bool kt_pod_set_remove_other(struct kt_pod_set *s, const char *uid)
{
	int i = find_other(s, uid);

	if (i < 0)
		return false;
	s->others[i] = s->others[--s->n_others];
	return true;
}

bool kt_pod_set_remove(struct kt_pod_set *s, const char *uid)
{
	int i = find(s, uid);
	bool other = kt_pod_set_remove_other(s, uid);

	if (i < 0)
		return other;
	kt_pod_free_labels(&s->pods[i]);
	s->pods[i] = s->pods[--s->n];
	return true;
}

int kt_pod_set_append_other(struct kt_pod_set *s, const char *uid, const char *qos)
{
	struct kt_pod_ref *r;

	if (s->n_others == s->cap_others) {
		int cap = s->cap_others ? 2 * s->cap_others : 64;
		struct kt_pod_ref *g = realloc(s->others, (size_t)cap * sizeof(*g));

		if (!g)
			return -ENOMEM;
		s->others = g;
		s->cap_others = cap;
	}
	r = &s->others[s->n_others++];
	memset(r, 0, sizeof(*r));
	snprintf(r->uid, sizeof(r->uid), "%s", uid);
	snprintf(r->qos, sizeof(r->qos), "%s", qos ? qos : "");
	return 0;
}

int kt_pod_set_put_other(struct kt_pod_set *s, const char *uid, const char *qos)
{
	int i = find(s, uid), o = find_other(s, uid);
	bool changed = false;

	if (i >= 0) {
		kt_pod_free_labels(&s->pods[i]);
		s->pods[i] = s->pods[--s->n];
		changed = true;
	}
	if (o >= 0) {
		if (!strcmp(s->others[o].qos, qos ? qos : ""))
			return changed;
		snprintf(s->others[o].qos, sizeof(s->others[o].qos), "%s", qos ? qos : "");
		return 1;
	}
	return kt_pod_set_append_other(s, uid, qos) ? -ENOMEM : 1;
}

static int by_uid(const void *x, const void *y)
{
	return strcmp(((const struct kt_pod_ref *)x)->uid, ((const struct kt_pod_ref *)y)->uid);
}

void kt_pod_set_dedup_others(struct kt_pod_set *s)
{
	int n = 0;

	if (!s->n_others)
		return;
	qsort(s->others, (size_t)s->n_others, sizeof(*s->others), by_uid);
	/* a selected pod's uid marked, found by bisection: not a search of
	 * the selected set for each of the others */
	for (int i = 0; i < s->n; i++) {
		struct kt_pod_ref key, *r;

		memcpy(key.uid, s->pods[i].uid, sizeof(key.uid));
		r = bsearch(&key, s->others, (size_t)s->n_others, sizeof(*s->others), by_uid);
		for (; r && r > s->others && !strcmp(r[-1].uid, key.uid); r--)
			;
		for (; r && r < s->others + s->n_others && !strcmp(r->uid, key.uid); r++)
			r->uid[0] = '\0';
	}
	for (int i = 0; i < s->n_others; i++)
		if (s->others[i].uid[0] && (!n || strcmp(s->others[n - 1].uid, s->others[i].uid)))
			s->others[n++] = s->others[i];
	s->n_others = n;
}

void kt_pod_set_clear(struct kt_pod_set *s)
{
	for (int i = 0; i < s->n; i++)
		kt_pod_free_labels(&s->pods[i]);
	free(s->pods);
	free(s->others);
	memset(s, 0, sizeof(*s));
}

int kt_pod_set_copy(struct kt_pod_set *dst, const struct kt_pod_set *src)
{
	kt_pod_set_clear(dst);
	/* src's uids are distinct (put keeps them so): copied in one pass,
	 * not put one by one (a search each) */
	if (src->n) {
		dst->pods = malloc((size_t)src->n * sizeof(*dst->pods));
		if (!dst->pods)
			return -ENOMEM;
		dst->cap = src->n;
		for (; dst->n < src->n; dst->n++)
			if (pod_copy(&dst->pods[dst->n], &src->pods[dst->n])) {
				kt_pod_set_clear(dst);
				return -ENOMEM;
			}
	}
	if (src->n_others) {
		dst->others = malloc((size_t)src->n_others * sizeof(*dst->others));
		if (!dst->others) {
			kt_pod_set_clear(dst);
			return -ENOMEM;
		}
		memcpy(dst->others, src->others, (size_t)src->n_others * sizeof(*dst->others));
		dst->n_others = dst->cap_others = src->n_others;
	}
	dst->synced = src->synced;
	return 0;
}

static bool in_values(const struct kt_label_req *r, const char *v)
{
	for (int i = 0; i < r->n_values; i++)
		if (!strcmp(r->values[i], v))
			return true;
	return false;
}

bool kt_pod_selected_by(const struct kt_pod_selector *sel, const char *ns,
			const char *(*label)(void *ctx, const char *key), void *ctx)
{
	if (!sel->set)
		return false;
	if (sel->namespace && (!ns || strcmp(sel->namespace, ns)))
		return false;
	for (int i = 0; i < sel->n_reqs; i++) {
		const struct kt_label_req *r = &sel->reqs[i];
		const char *v = label(ctx, r->key);
		bool ok;

		switch (r->op) {
		case KT_LABEL_IN: ok = v && in_values(r, v); break;
		case KT_LABEL_NOT_IN: ok = !v || !in_values(r, v); break;
		case KT_LABEL_EXISTS: ok = v != NULL; break;
		default: ok = v == NULL; break;
		}
		if (!ok)
			return false;
	}
	return true;
}

static const char *pod_label(void *ctx, const char *key)
{
	return kt_pod_label(ctx, key);
}

bool kt_pod_selected(const struct kt_pod_selector *sel, const struct kt_pod *p)
{
	return kt_pod_selected_by(sel, p->ns, pod_label, (void *)p);
}

static bool str_eq(const char *a, const char *b)
{
	return a == b || (a && b && !strcmp(a, b));
}

bool kt_pod_selector_equal(const struct kt_pod_selector *a, const struct kt_pod_selector *b)
{
	if (a->set != b->set || !str_eq(a->namespace, b->namespace) || a->n_reqs != b->n_reqs)
		return false;
	for (int i = 0; i < a->n_reqs; i++) {
		const struct kt_label_req *x = &a->reqs[i], *y = &b->reqs[i];

		if (x->op != y->op || !str_eq(x->key, y->key) || x->n_values != y->n_values)
			return false;
		for (int j = 0; j < x->n_values; j++)
			if (!str_eq(x->values[j], y->values[j]))
				return false;
	}
	return true;
}

/* strdup of NULL is NULL, not a failure */
static bool dup_opt(char **dst, const char *src)
{
	*dst = src ? strdup(src) : NULL;
	return !src || *dst;
}

int kt_pod_selector_copy(struct kt_pod_selector *dst, const struct kt_pod_selector *src)
{
	memset(dst, 0, sizeof(*dst));
	dst->set = src->set;
	dst->line = src->line;
	if (!dup_opt(&dst->namespace, src->namespace))
		return -ENOMEM;
	for (int i = 0; i < src->n_reqs && i < KT_MAX_LABEL_REQS; i++) {
		const struct kt_label_req *r = &src->reqs[i];
		struct kt_label_req *c = &dst->reqs[i];

		dst->n_reqs++;
		c->op = r->op;
		if (!dup_opt(&c->key, r->key))
			goto nomem;
		for (int j = 0; j < r->n_values && j < KT_MAX_LABEL_VALUES; j++) {
			c->n_values++;
			if (!dup_opt(&c->values[j], r->values[j]))
				goto nomem;
		}
	}
	return 0;
nomem:
	kt_pod_selector_free(dst);
	return -ENOMEM;
}

bool kt_pod_uid_ok(const char *uid)
{
	static const int groups[] = { 8, 4, 4, 4, 12 };
	const char *s = uid;

	for (int g = 0; g < 5; g++) {
		for (int i = 0; i < groups[g]; i++, s++)
			if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
				return false;
		if (*s != (g < 4 ? '-' : '\0'))
			return false;
		s++;
	}
	return true;
}

/* "" or "root/" (no leading '/'), the prefix of the kubelet's directories. */
static void root_prefix(const char *root, char *pre, size_t len)
{
	if (root && *root)
		snprintf(pre, len, "%s%s", root[0] == '/' ? root + 1 : root,
			 root[strlen(root) - 1] == '/' ? "" : "/");
	else
		pre[0] = '\0';
}

int kt_pod_tier_dirs(const char *root, char (*paths)[PATH_MAX])
{
	static const char *const tiers[KT_POD_TIER_DIRS] = {
		"kubepods.slice",
		"kubepods.slice/kubepods-burstable.slice",
		"kubepods.slice/kubepods-besteffort.slice",
		"kubepods",
		"kubepods/burstable",
		"kubepods/besteffort",
	};
	char pre[PATH_MAX];

	root_prefix(root, pre, sizeof(pre));
	for (int t = 0; t < KT_POD_TIER_DIRS; t++)
		if (snprintf(paths[t], PATH_MAX, "%s%s", pre, tiers[t]) >= PATH_MAX)
			return -ENAMETOOLONG;
	return KT_POD_TIER_DIRS;
}

int kt_pod_cgroup_paths(const char *root, const struct kt_pod *p, char (*paths)[PATH_MAX], int max)
{
	struct kt_pod_ref r;

	memcpy(r.uid, p->uid, sizeof(r.uid));
	memcpy(r.qos, p->qos, sizeof(r.qos));
	return kt_pod_ref_cgroup_paths(root, &r, paths, max);
}

int kt_pod_ref_cgroup_paths(const char *root, const struct kt_pod_ref *p, char (*paths)[PATH_MAX],
			    int max)
{
	/* qos class -> the kubelet's directory word; "" = Guaranteed (no tier) */
	static const struct { const char *cls, *word; } tiers[] = {
		{ "Guaranteed", "" }, { "Burstable", "burstable" }, { "BestEffort", "besteffort" },
	};
	char uid_[sizeof(p->uid)], pre[PATH_MAX];
	int n = 0;

	if (!kt_pod_uid_ok(p->uid))
		return -EINVAL;
	/* systemd slice names cannot hold '-' inside a unit's own part */
	snprintf(uid_, sizeof(uid_), "%s", p->uid);
	for (char *c = uid_; *c; c++)
		if (*c == '-')
			*c = '_';
	root_prefix(root, pre, sizeof(pre));
	for (size_t t = 0; t < sizeof(tiers) / sizeof(tiers[0]); t++) {
		const char *w = tiers[t].word;
		int a, b;

		if (p->qos[0] && strcmp(p->qos, tiers[t].cls))
			continue;
		if (n + 2 > max)
			break;
		if (*w) {
			a = snprintf(paths[n], PATH_MAX, "%skubepods.slice/kubepods-%s.slice/kubepods-%s-pod%s.slice",
				     pre, w, w, uid_);
			b = snprintf(paths[n + 1], PATH_MAX, "%skubepods/%s/pod%s", pre, w, p->uid);
		} else {
			a = snprintf(paths[n], PATH_MAX, "%skubepods.slice/kubepods-pod%s.slice", pre, uid_);
			b = snprintf(paths[n + 1], PATH_MAX, "%skubepods/pod%s", pre, p->uid);
		}
		if (a >= PATH_MAX || b >= PATH_MAX)
			return -ENAMETOOLONG;
		n += 2;
	}
	return n;
}
