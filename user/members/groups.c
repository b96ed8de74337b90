/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* groupBy: the groups seen and the expanded config (groups.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/cgwatch.h"
#include "base/log.h"
#include "members/globcache.h"
#include "members/groups.h"

/* The template's characters kept in a hashed instance name: with "@@" and
 * 12 hex digits it is KT_NAME_LEN - 1 long. */
#define HASHED_PREFIX (KT_NAME_LEN - 1 - 2 - 12)
_Static_assert(HASHED_PREFIX > 0, "room for a template prefix");
/* groups appearing at once that are logged one by one; the rest, counted */
#define LOG_APPEARING 8

struct group_value {
	char *value;
	bool present;     /* it had a member at the last observation */
	uint64_t seen_ns; /* then; once absent, the first observation without one */
};

/* The groups of one template, by value (strcmp order). */
struct group_tmpl {
	char name[KT_NAME_LEN];
	struct group_value *v;
	int n, cap;
	bool other;          /* some value past maxGroups is in use */
	bool other_present;
	uint64_t other_seen_ns; /* as group_value's seen_ns */
	uint64_t ttl_ns;
	bool live;           /* still a template of the config last observed */
};

struct kt_groups {
	struct group_tmpl *t;
	int n, cap;
	bool dirty;           /* changed since the last expand */
};

static bool name_char(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       ch == '_' || ch == '.' || ch == '-';
}

static uint64_t fnv1a(uint64_t h, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 1099511628211ULL;
	}
	return h;
}

void kt_group_instance_name(const char *tmpl, const char *value, char out[KT_NAME_LEN])
{
	size_t tl = strlen(tmpl), vl = value ? strlen(value) : 0;
	bool plain = value && vl > 0;
	uint64_t h;

	for (size_t i = 0; plain && i < vl; i++)
		plain = name_char(value[i]);
	if (plain && tl + 1 + vl < KT_NAME_LEN) {
		snprintf(out, KT_NAME_LEN, "%s@%s", tmpl, value);
		return;
	}
	if (!value && tl + strlen("@@other") < KT_NAME_LEN) {
		snprintf(out, KT_NAME_LEN, "%s@@other", tmpl);
		return;
	}
	/* the whole template name and value, so templates sharing a prefix
	 * still differ; "\1" stands for the other pool, which no value is */
	h = fnv1a(14695981039346656037ULL, tmpl, tl);
	h = fnv1a(h, "@", 1);
	h = value ? fnv1a(h, value, vl) : fnv1a(h, "\1", 1);
	snprintf(out, KT_NAME_LEN, "%.*s@@%012llx", HASHED_PREFIX, tmpl,
		 (unsigned long long)(h & 0xffffffffffffULL));
}

const char *kt_group_pod_value(const struct kt_limit_cfg *lc, const struct kt_pod *pod)
{
	if (lc->group_by == KT_GROUP_NAMESPACE)
		return pod->ns;
	if (lc->group_by == KT_GROUP_LABEL)
		return kt_pod_label(pod, lc->group_label);
	return NULL;
}

bool kt_group_path_value(const char *path, int up, char *buf, size_t len)
{
	size_t n;
	const char *v = kt_glob_key_of(path, up, &n);

	if (!n || n >= len)
		return false;
	memcpy(buf, v, n);
	buf[n] = '\0';
	return true;
}

static int cmp_strp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

bool kt_group_takes(const struct kt_limit_cfg *lc, const char *v)
{
	if (!lc->group_of)
		return true;
	if (!v)
		return false;
	if (lc->group_other)
		return !lc->n_group_known ||
		       !bsearch(&v, lc->group_known, (size_t)lc->n_group_known,
				sizeof(*lc->group_known), cmp_strp);
	return !strcmp(v, lc->group_value);
}

int kt_groups_new(struct kt_groups **out)
{
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

static void tmpl_clear(struct group_tmpl *t)
{
	for (int i = 0; i < t->n; i++)
		free(t->v[i].value);
	free(t->v);
	t->v = NULL;
	t->n = t->cap = 0;
}

void kt_groups_free(struct kt_groups *g)
{
	if (!g)
		return;
	for (int i = 0; i < g->n; i++)
		tmpl_clear(&g->t[i]);
	free(g->t);
	free(g);
}

static struct group_tmpl *find_tmpl(const struct kt_groups *g, const char *name)
{
	for (int i = 0; i < g->n; i++)
		if (!strcmp(g->t[i].name, name))
			return &g->t[i];
	return NULL;
}

static struct group_tmpl *add_tmpl(struct kt_groups *g, const char *name)
{
	if (g->n == g->cap) {
		int cap = g->cap ? 2 * g->cap : 4;
		struct group_tmpl *t = realloc(g->t, (size_t)cap * sizeof(*t));

		if (!t)
			return NULL;
		g->t = t;
		g->cap = cap;
	}
	memset(&g->t[g->n], 0, sizeof(g->t[g->n]));
	snprintf(g->t[g->n].name, KT_NAME_LEN, "%s", name);
	return &g->t[g->n++];
}

/* A growable list of borrowed strings. */
struct strs {
	const char **v;
	int n, cap;
	char **owned; /* what a glob returned, freed with the list */
	int n_owned, cap_owned;
};

static int strs_push(struct strs *s, const char *v)
{
	if (!v || strlen(v) > KT_GROUP_VALUE_MAX)
		return 0;
	if (s->n == s->cap) {
		int cap = s->cap ? 2 * s->cap : 16;
		const char **g = realloc(s->v, (size_t)cap * sizeof(*g));

		if (!g)
			return -ENOMEM;
		s->v = g;
		s->cap = cap;
	}
	s->v[s->n++] = v;
	return 0;
}

static int strs_own(struct strs *s, char *v)
{
	if (!v)
		return -ENOMEM;
	if (s->n_owned == s->cap_owned) {
		int cap = s->cap_owned ? 2 * s->cap_owned : 16;
		char **g = realloc(s->owned, (size_t)cap * sizeof(*g));

		if (!g) {
			free(v);
			return -ENOMEM;
		}
		s->owned = g;
		s->cap_owned = cap;
	}
	s->owned[s->n_owned++] = v;
	return strs_push(s, v);
}

static void strs_free(struct strs *s)
{
	for (int i = 0; i < s->n_owned; i++)
		free(s->owned[i]);
	free(s->owned);
	free(s->v);
}

/* The values lc's members have now, sorted, each once. */
static int present_values(const struct kt_limit_cfg *lc, const char *cg_mount,
			  const struct kt_pod_set *pods, struct strs *out)
{
	char full[PATH_MAX], val[KT_GROUP_VALUE_MAX + 1];
	int ret = 0, k = 0;

	if (kt_group_by_path(lc->group_by)) {
		for (int j = 0; j < lc->n_cgroups && !ret; j++) {
			const char *e = lc->cgroups[j];
			char **paths = NULL;
			int n;

			snprintf(full, sizeof(full), "%s%s%s", e[0] == '/' ? "" : cg_mount ? cg_mount : "",
				 e[0] == '/' ? "" : "/", e);
			n = kt_cgroup_glob(full, &paths);
			if (n < 0) /* resolve reports a bad pattern with its line */
				continue;
			for (int m = 0; m < n && !ret; m++)
				if (kt_group_path_value(paths[m], lc->group_up, val, sizeof(val)))
					ret = strs_own(out, strdup(val));
			kt_cgroup_glob_free(paths, n);
		}
	} else {
		for (int p = 0; pods && p < pods->n && !ret; p++)
			if (kt_pod_selected(&lc->pods, &pods->pods[p]))
				ret = strs_push(out, kt_group_pod_value(lc, &pods->pods[p]));
	}
	if (ret)
		return ret;
	if (out->n > 1)
		qsort(out->v, (size_t)out->n, sizeof(*out->v), cmp_strp);
	for (int i = 0; i < out->n; i++)
		if (!k || strcmp(out->v[i], out->v[k - 1]))
			out->v[k++] = out->v[i];
	out->n = k;
	return 0;
}

/* The index of value v in t, or where it would go (as -1 - index). */
static int find_value(const struct group_tmpl *t, const char *v)
{
	int lo = 0, hi = t->n;

	while (lo < hi) {
		int mid = lo + (hi - lo) / 2, c = strcmp(t->v[mid].value, v);

		if (!c)
			return mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1 - lo;
}

static int insert_value(struct group_tmpl *t, int at, const char *v, uint64_t now)
{
	char *copy;

	if (t->n == t->cap) {
		int cap = t->cap ? 2 * t->cap : 8;
		struct group_value *g = realloc(t->v, (size_t)cap * sizeof(*g));

		if (!g)
			return -ENOMEM;
		t->v = g;
		t->cap = cap;
	}
	if (!(copy = strdup(v)))
		return -ENOMEM;
	memmove(&t->v[at + 1], &t->v[at], (size_t)(t->n - at) * sizeof(*t->v));
	t->v[at] = (struct group_value){ copy, true, now };
	t->n++;
	return 0;
}

/* Notes the values of template lc present at now; forgets those unseen
 * for its ttl. Sets g->dirty on a change. */
static int observe_tmpl(struct kt_groups *g, struct group_tmpl *t, const struct kt_limit_cfg *lc,
			const char *cg_mount, const struct kt_pod_set *pods, uint64_t now)
{
	struct strs present = { 0 };
	int ret = present_values(lc, cg_mount, pods, &present), kept = 0;

	bool other_now = false;
	int appeared = 0;

	t->ttl_ns = lc->rl.ttl_ns;
	/* absent unless found below; a value absent since the last observation
	 * only (it may have had members until just now) counts from now */
	for (int i = 0; i < t->n; i++) {
		if (t->v[i].present)
			t->v[i].seen_ns = now;
		t->v[i].present = false;
	}
	for (int i = 0; i < present.n && !ret; i++) {
		int at = find_value(t, present.v[i]);

		if (at >= 0) {
			t->v[at].present = true;
			t->v[at].seen_ns = now;
		} else if (t->n < lc->max_groups) {
			if (!(ret = insert_value(t, -1 - at, present.v[i], now))) {
				/* a start with 1,000 groups logs a few, then a count */
				if (++appeared <= LOG_APPEARING)
					kt_info("limit %s: group %s appears", lc->name, present.v[i]);
				g->dirty = true;
			}
		} else {
			if (!t->other)
				kt_warn("limit %s: more than maxGroups %d groups on this node: group %s and the ones after it share the pool %s@@other",
					lc->name, lc->max_groups, present.v[i], lc->name);
			g->dirty |= !t->other;
			t->other = true;
			other_now = true;
		}
	}
	if (t->other && (other_now || t->other_present))
		t->other_seen_ns = now;
	t->other_present = other_now;
	strs_free(&present);
	if (appeared > LOG_APPEARING)
		kt_info("limit %s: %d more groups appear (%d in all)", lc->name,
			appeared - LOG_APPEARING, t->n);
	if (ret)
		return ret;
	for (int i = 0; i < t->n; i++) {
		struct group_value *v = &t->v[i];

		if (!v->present && v->seen_ns == now)
			kt_info("limit %s: group %s has no member on this node: its pool goes after ttl %llu ms unless one comes",
				lc->name, v->value, (unsigned long long)(t->ttl_ns / 1000000));
		if (!v->present && now - v->seen_ns >= t->ttl_ns) {
			kt_info("limit %s: group %s has had no member for ttl %llu ms: its pool goes",
				lc->name, v->value, (unsigned long long)(t->ttl_ns / 1000000));
			free(v->value);
			g->dirty = true;
			continue;
		}
		t->v[kept++] = *v;
	}
	t->n = kept;
	if (t->other && !t->other_present && now - t->other_seen_ns >= t->ttl_ns) {
		t->other = false;
		g->dirty = true;
	}
	return 0;
}

int kt_groups_observe(struct kt_groups *g, const struct kt_config *src, const char *cg_mount,
		      const struct kt_pod_set *pods, uint64_t now)
{
	int kept = 0, ret = 0;

	for (int i = 0; i < g->n; i++)
		g->t[i].live = false;
	for (int i = 0; i < src->n_limits && !ret; i++) {
		const struct kt_limit_cfg *lc = &src->limits[i];
		struct group_tmpl *t;

		if (!lc->group_by)
			continue;
		if (!(t = find_tmpl(g, lc->name)) && !(t = add_tmpl(g, lc->name)))
			return -ENOMEM;
		t->live = true;
		ret = observe_tmpl(g, t, lc, cg_mount, pods, now);
	}
	if (ret)
		return ret;
	for (int i = 0; i < g->n; i++) {
		if (g->t[i].live) {
			g->t[kept++] = g->t[i];
			continue;
		}
		g->dirty |= g->t[i].n > 0 || g->t[i].other;
		tmpl_clear(&g->t[i]);
	}
	g->n = kept;
	return g->dirty ? 1 : 0;
}

uint64_t kt_groups_next_expiry(const struct kt_groups *g)
{
	uint64_t next = UINT64_MAX;

	for (int i = 0; i < g->n; i++) {
		const struct group_tmpl *t = &g->t[i];

		/* only a group without members runs out */
		for (int k = 0; k < t->n; k++)
			if (!t->v[k].present && t->v[k].seen_ns + t->ttl_ns < next)
				next = t->v[k].seen_ns + t->ttl_ns;
		if (t->other && !t->other_present && t->other_seen_ns + t->ttl_ns < next)
			next = t->other_seen_ns + t->ttl_ns;
	}
	return next;
}

int kt_groups_count(const struct kt_groups *g, const char *tmpl, bool *other)
{
	const struct group_tmpl *t = g ? find_tmpl(g, tmpl) : NULL;

	if (other)
		*other = t && t->other;
	return t ? t->n : -1;
}

/* How many instances template lc has: its values up to maxGroups, and the
 * other pool when a value is past it. */
static int n_instances(const struct group_tmpl *t, const struct kt_limit_cfg *lc, int *n_values)
{
	*n_values = t ? (t->n < lc->max_groups ? t->n : lc->max_groups) : 0;
	return *n_values + (t && (t->other || t->n > *n_values) ? 1 : 0);
}

int kt_groups_expand(struct kt_groups *g, const struct kt_config *src, struct kt_config *out)
{
	struct kt_limit_cfg *lim;
	int *at = calloc((size_t)src->n_limits + 1, sizeof(*at));
	int n = 0, k = 0, nv;

	*out = *src;
	out->source = src;
	out->limits = NULL;
	out->n_limits = 0;
	if (!at)
		goto oom;
	for (int i = 0; i < src->n_limits; i++)
		n += src->limits[i].group_by
			     ? n_instances(find_tmpl(g, src->limits[i].name), &src->limits[i], &nv)
			     : 1;
	if (!(lim = calloc((size_t)n + 1, sizeof(*lim))))
		goto oom;
	out->limits = lim;
	for (int i = 0; i < src->n_limits; i++) {
		const struct kt_limit_cfg *lc = &src->limits[i];
		const struct group_tmpl *t;
		int first = k, inst;

		at[i] = k;
		if (!lc->group_by) {
			lim[k++] = *lc;
			continue;
		}
		t = find_tmpl(g, lc->name);
		inst = n_instances(t, lc, &nv);
		for (int v = 0; v < inst; v++, k++) {
			struct kt_limit_cfg *l = &lim[k];

			*l = *lc;
			l->group_of = i + 1;
			out->n_limits = k + 1; /* the instances so far, for kt_config_free */
			if (v < nv) {
				if (!(l->group_value = strdup(t->v[v].value)))
					goto oom;
				kt_group_instance_name(lc->name, l->group_value, l->name);
				continue;
			}
			/* the other pool: every value none of the others names */
			const char **known = calloc((size_t)nv + 1, sizeof(*known));

			if (!known)
				goto oom;
			for (int q = 0; q < nv; q++)
				known[q] = lim[first + q].group_value;
			l->group_other = true;
			l->group_known = known;
			l->n_group_known = nv;
			kt_group_instance_name(lc->name, NULL, l->name);
		}
		out->n_limits = k;
	}
	out->n_limits = k;
	/* a parent is never a groupBy limit (the config refuses it) */
	for (int i = 0; i < k; i++)
		if (lim[i].parent > 0)
			lim[i].parent = at[lim[i].parent - 1] + 1;
	free(at);
	g->dirty = false;
	return 0;
oom:
	free(at);
	kt_config_free(out);
	return -ENOMEM;
}
