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

void kt_glob_cache_free(struct kt_glob_cache *c)
{
	if (!c)
		return;
	for (int i = 0; i < c->n; i++) {
		free(c->e[i].pattern);
		kt_cgroup_glob_free(c->e[i].paths, c->e[i].n > 0 ? c->e[i].n : 0);
	}
	free(c->e);
	kt_cgroup_glob_free(c->spare, c->n_spare);
	free(c);
}
