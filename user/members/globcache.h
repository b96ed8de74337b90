/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The matches of each glob pattern found once per resolution: the groups of
 * a groupBy limit share their template's patterns, so a node with 1,000
 * groups expands each pattern once, not 1,000 times. */
#ifndef KT_GLOBCACHE_H
#define KT_GLOBCACHE_H

#include <stddef.h>
#include "base/config.h"

struct kt_glob_cache;

/* A cache for one pass; NULL when out of memory. */
struct kt_glob_cache *kt_glob_cache_new(void);
/* kt_cgroup_glob(pattern): the count (or -errno) and *paths, owned by the
 * cache (valid until kt_glob_cache_free; do not free them). */
int kt_glob_cached(struct kt_glob_cache *c, const char *pattern, char ***paths);
/* A match's key `up` levels above it: its own name (KT_GLOB_BY_NAME), its
 * parent directory's (KT_GLOB_BY_PARENT), ... up to KT_GLOB_UP_LEVELS - 1:
 * key[0..len) (len 0: none), and its index into kt_glob_cached(pattern)'s
 * paths. */
#define KT_GLOB_BY_NAME 0
#define KT_GLOB_BY_PARENT 1
#define KT_GLOB_UP_LEVELS (KT_GROUP_UP_MAX + 1)
struct kt_glob_key {
	const char *key;
	size_t len;
	int idx;
};
/* Path p's key `up` levels above it (points into p). */
const char *kt_glob_key_of(const char *p, int up, size_t *len);
/* The matches of pattern whose key `up` levels above is value: *first
 * (owned by the cache) and the count, or -errno (-EINVAL: up out of
 * range). An index per pattern and level is built once, so each of 1,000
 * groups finds its matches in a bsearch, not a pass over all. */
int kt_glob_cached_by(struct kt_glob_cache *c, const char *pattern, int up, const char *value,
		      const struct kt_glob_key **first);
void kt_glob_cache_free(struct kt_glob_cache *c);

#endif
