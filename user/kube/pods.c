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
}

int kt_pod_add_label(struct kt_pod *p, const char *key, const char *value)
{
	char *k, *v;

	for (int i = 0; i < p->n_labels; i++)
		if (!strcmp(p->label_keys[i], key)) {
			if (!(v = strdup(value)))
				return -ENOMEM;
			free(p->label_values[i]);
			p->label_values[i] = v;
			return 0;
		}
	if (p->n_labels == KT_POD_MAX_LABELS)
		return -E2BIG;
	k = strdup(key);
	v = strdup(value);
	if (!k || !v) {
		free(k);
		free(v);
		return -ENOMEM;
	}
	p->label_keys[p->n_labels] = k;
	p->label_values[p->n_labels] = v;
	p->n_labels++;
	return 0;
}

const char *kt_pod_label(const struct kt_pod *p, const char *key)
{
	for (int i = 0; i < p->n_labels; i++)
		if (!strcmp(p->label_keys[i], key))
			return p->label_values[i];
	return NULL;
}

/* dst = p with its own copies of the labels. */
static int pod_copy(struct kt_pod *dst, const struct kt_pod *p)
{
	*dst = *p;
	dst->n_labels = 0;
	for (int i = 0; i < p->n_labels; i++)
		if (kt_pod_add_label(dst, p->label_keys[i], p->label_values[i])) {
			kt_pod_free_labels(dst);
			return -ENOMEM;
		}
	return 0;
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

bool kt_pod_set_remove(struct kt_pod_set *s, const char *uid)
{
	int i = find(s, uid);

	if (i < 0)
		return false;
	kt_pod_free_labels(&s->pods[i]);
	s->pods[i] = s->pods[--s->n];
	return true;
}

void kt_pod_set_clear(struct kt_pod_set *s)
{
	for (int i = 0; i < s->n; i++)
		kt_pod_free_labels(&s->pods[i]);
	free(s->pods);
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

bool kt_pod_selected(const struct kt_pod_selector *sel, const struct kt_pod *p)
{
	if (!sel->set)
		return false;
	if (sel->namespace && strcmp(sel->namespace, p->ns))
		return false;
	for (int i = 0; i < sel->n_reqs; i++) {
		const struct kt_label_req *r = &sel->reqs[i];
		const char *v = kt_pod_label(p, r->key);
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
