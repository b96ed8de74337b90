/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Glob matches found once per resolution (globcache.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "base/cgwatch.h"
#include "members/globcache.h"

struct glob_entry {
	char *pattern;
	char **paths;
	int n; /* count, or -errno */
	/* per level up, built on first use: the paths' keys, sorted */
	struct kt_glob_key *index[KT_GLOB_UP_LEVELS];
};

struct kt_glob_cache {
	struct glob_entry *e;
	int n, cap;
	/* a result the cache had no room for, freed at the next such or the end */
	char **spare;
	int n_spare;
};

struct kt_glob_cache *kt_glob_cache_new(void)
{
	return calloc(1, sizeof(struct kt_glob_cache));
}

int kt_glob_cached(struct kt_glob_cache *c, const char *pattern, char ***paths)
{
	struct glob_entry *g;
	char *copy;
	int n;

	*paths = NULL;
	for (int i = 0; i < c->n; i++)
		if (!strcmp(c->e[i].pattern, pattern)) {
			*paths = c->e[i].paths;
			return c->e[i].n;
		}
	n = kt_cgroup_glob(pattern, paths);
	if (c->n == c->cap) {
		int cap = c->cap ? 2 * c->cap : 8;
		struct glob_entry *e = realloc(c->e, (size_t)cap * sizeof(*e));

		if (!e)
			goto uncached;
		c->e = e;
		c->cap = cap;
	}
	if (!(copy = strdup(pattern)))
		goto uncached;
	g = &c->e[c->n++];
	memset(g, 0, sizeof(*g));
	g->pattern = copy;
	g->paths = *paths;
	g->n = n;
	return n;
uncached:
	/* kept until the next miss or the free, so the caller never frees */
	kt_cgroup_glob_free(c->spare, c->n_spare);
	c->spare = *paths;
	c->n_spare = n > 0 ? n : 0;
	return n;
}

const char *kt_glob_key_of(const char *p, int up, size_t *len)
{
	size_t end = strlen(p), start = 0;

	for (int level = 0; level <= up; level++) {
		while (end > 1 && p[end - 1] == '/')
			end--;
		start = end;
		while (start > 0 && p[start - 1] != '/')
			start--;
		if (level < up)
			end = start;
	}
	*len = end > start ? end - start : 0;
	return p + start;
}

static int key_cmp(const char *a, size_t al, const char *b, size_t bl)
{
	int c = memcmp(a, b, al < bl ? al : bl);

	return c ? c : (al > bl) - (al < bl);
}

static int by_key(const void *x, const void *y)
{
	const struct kt_glob_key *a = x, *b = y;

	return key_cmp(a->key, a->len, b->key, b->len);
}

int kt_glob_cached_by(struct kt_glob_cache *c, const char *pattern, int by, const char *value,
		      const struct kt_glob_key **first)
{
	char **paths;
	int n, lo, hi;
	struct glob_entry *g = NULL;
	struct kt_glob_key *ix;
	size_t vl = strlen(value);

	*first = NULL;
	if (by < 0 || by >= KT_GLOB_UP_LEVELS)
		return -EINVAL;
	n = kt_glob_cached(c, pattern, &paths);
	if (n <= 0)
		return n;
	for (int i = 0; i < c->n && !g; i++)
		if (c->e[i].paths == paths)
			g = &c->e[i];
	if (!g)
		return -ENOMEM; /* the cache had no room for it */
	if (!g->index[by]) {
		if (!(g->index[by] = calloc((size_t)n, sizeof(*g->index[by]))))
			return -ENOMEM;
		for (int i = 0; i < n; i++) {
			g->index[by][i].key = kt_glob_key_of(paths[i], by, &g->index[by][i].len);
			g->index[by][i].idx = i;
		}
		qsort(g->index[by], (size_t)n, sizeof(*g->index[by]), by_key);
	}
	ix = g->index[by];
	/* the first key >= value, then the first > value */
	lo = 0, hi = n;
	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;

		if (key_cmp(ix[mid].key, ix[mid].len, value, vl) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (hi = lo; hi < n && !key_cmp(ix[hi].key, ix[hi].len, value, vl); hi++)
		;
	*first = ix + lo;
	return hi - lo;
}

void kt_glob_cache_free(struct kt_glob_cache *c)
{
	if (!c)
		return;
	for (int i = 0; i < c->n; i++) {
		for (int by = 0; by < KT_GLOB_UP_LEVELS; by++)
			free(c->e[i].index[by]);
		free(c->e[i].pattern);
		kt_cgroup_glob_free(c->e[i].paths, c->e[i].n > 0 ? c->e[i].n : 0);
	}
	free(c->e);
	kt_cgroup_glob_free(c->spare, c->n_spare);
	free(c);
}
