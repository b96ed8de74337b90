// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Pending directories and outsiders: see pending.h. */
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "members/plan.h"
#include "base/cgroup.h"
#include "base/cgwatch.h"
#include "base/config.h"
#include "base/log.h"
#include "members/globcache.h"
#include "members/groups.h"
#include "members/pending.h"
#include "kube/pods.h"

/* Components of a pattern at most this deep are followed. */
#define MAX_COMPONENTS 64

/* A pending directory as one pattern names it: the component a child must
 * match there to be a member or a deeper pending directory. */
struct dir_rec {
	char *path;
	int limit;
	const char *next; /* points into the pattern's split copy; NULL: a
			   * kubelet tier directory of a pods: selector, where any
			   * child may be a pod the API has not told of yet */
};

struct scan {
	struct dir_rec *recs;
	int n_recs, cap_recs;
	bool truncated;
};

static int add_rec(struct scan *sc, const char *path, int limit, const char *next)
{
	if (sc->n_recs == sc->cap_recs) {
		int cap = sc->cap_recs ? sc->cap_recs * 2 : 16;
		struct dir_rec *r = realloc(sc->recs, (size_t)cap * sizeof(*r));

		if (!r)
			return -ENOMEM;
		sc->recs = r;
		sc->cap_recs = cap;
	}
	if (!(sc->recs[sc->n_recs].path = strdup(path)))
		return -ENOMEM;
	sc->recs[sc->n_recs].limit = limit;
	sc->recs[sc->n_recs].next = next;
	sc->n_recs++;
	return 0;
}

/* "/" + comp[0..j) joined, in out. */
static int join_prefix(char *const *comp, int j, char *out, size_t len)
{
	size_t o = 0;

	out[0] = '/';
	out[1] = 0;
	for (int c = 0; c < j; c++) {
		int w = snprintf(out + o, len - o, "/%s", comp[c]);

		if (w < 0 || (size_t)w >= len - o)
			return -ENAMETOOLONG;
		o += (size_t)w;
	}
	return 0;
}

/* The pending directories of one absolute pattern of limit `li`: for each
 * depth from the first wildcard component on (but the last), the existing
 * directories matching the components above it. `copy` is the pattern's
 * split storage, kept alive by the caller while the records point into it. */
static int scan_pattern(struct scan *sc, int li, const struct kt_limit_cfg *lc, char *copy,
			const char *root, struct kt_glob_cache *globs)
{
	char *comp[MAX_COMPONENTS], *save = NULL, prefix[PATH_MAX];
	int n = 0, first = -1, ret = 0;

	for (char *t = strtok_r(copy, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
		if (!strcmp(t, "."))
			continue;
		if (n == MAX_COMPONENTS)
			return 0;
		if (first < 0 && kt_path_is_pattern(t))
			first = n;
		comp[n++] = t;
	}
	if (first < 0)
		return 0;
	bool group_dirs = lc->group_of && kt_group_by_path(lc->group_by);

	for (int j = first; j < n && !ret; j++) {
		/* the group's name in a directory of comp[0..j): that many levels up */
		int level = j - n + lc->group_up;
		char **paths = NULL;
		int m;

		/* a group's members appear in its own directories only: those
		 * at or below the directory named after the group */
		if (group_dirs && level < 0)
			continue;
		if (join_prefix(comp, j, prefix, sizeof(prefix)))
			return 0;
		/* a plain path: itself, if a directory; the cache's */
		const struct kt_glob_key *only = NULL;

		m = kt_glob_cached(globs, prefix, &paths);
		/* a group's own directories: by name in the pattern's index */
		if (m > 0 && group_dirs && lc->group_value)
			m = kt_glob_cached_by(globs, prefix, level, lc->group_value, &only);
		if (m < 0)
			return m == -ENOMEM ? m : 0;
		for (int q = 0; q < m && !ret; q++) {
			int k = only ? only[q].idx : q;
			char group[KT_GROUP_VALUE_MAX + 1];

			if (group_dirs && !only &&
			    !kt_group_takes(lc, kt_group_path_value(paths[k], level, group, sizeof(group))
							? group
							: NULL))
				continue;
			if (kt_path_at_or_below(paths[k], root))
				ret = add_rec(sc, paths[k], li, comp[j]);
		}
	}
	return ret;
}

/* The records by path, then limit: a directory's records are adjacent
 * (1,000 groups' directories are found by bsearch, not by a scan each). */
static int by_path(const void *x, const void *y)
{
	const struct dir_rec *a = x, *b = y;
	int c = strcmp(a->path, b->path);

	return c ? c : (a->limit > b->limit) - (a->limit < b->limit);
}

/* The first record of directory dir (sc->recs sorted), or n_recs. */
static int first_rec(const struct scan *sc, const char *dir)
{
	int lo = 0, hi = sc->n_recs;

	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;

		if (strcmp(sc->recs[mid].path, dir) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Whether `name`, a child of pending directory `dir`, can match a pattern
 * naming that directory (as a member or a deeper pending directory). */
static bool child_may_match(const struct scan *sc, const char *dir, const char *name)
{
	for (int r = first_rec(sc, dir); r < sc->n_recs && !strcmp(sc->recs[r].path, dir); r++)
		if (!sc->recs[r].next || !fnmatch(sc->recs[r].next, name, FNM_PERIOD))
			return true;
	return false;
}

/* Whether dir is a kubelet tier directory some pods: selector charges. */
static bool is_pod_tier(const struct scan *sc, const char *dir)
{
	for (int r = first_rec(sc, dir); r < sc->n_recs && !strcmp(sc->recs[r].path, dir); r++)
		if (!sc->recs[r].next)
			return true;
	return false;
}

static int add_outsiders(const struct scan *sc, struct kt_plan *plan, const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[PATH_MAX];
	struct stat st;

	if (!d)
		return 0; /* gone meanwhile: nothing below it to classify */
	while ((e = readdir(d))) {
		uint64_t cgid;

		if (e->d_name[0] == '.' || child_may_match(sc, dir, e->d_name))
			continue;
		if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= (int)sizeof(path) ||
		    lstat(path, &st) || !S_ISDIR(st.st_mode) || kt_cgroup_id(path, &cgid))
			continue;
		if (plan->n_pending + plan->n_outsiders >= KT_MAX_PENDING_ENTRIES) {
			closedir(d);
			return -E2BIG;
		}
		struct kt_outsider *o = &plan->outsiders[plan->n_outsiders];

		if (!(o->path = strdup(path))) {
			closedir(d);
			return -ENOMEM;
		}
		o->cgid = cgid;
		plan->n_outsiders++;
	}
	closedir(d);
	return 0;
}

static int by_cgid(const void *x, const void *y)
{
	uint64_t a = ((const struct kt_outsider *)x)->cgid, b = ((const struct kt_outsider *)y)->cgid;

	return (a > b) - (a < b);
}

/* Whether limit cfg->limits[i] may charge a join bucket. */
static bool limit_has_joiners(const struct kt_limit_cfg *lc)
{
	return lc->unit != KT_UNIT_REQUEST && !lc->rl.strict.on;
}

/* Whether limit lc's pods: selector charges the pod cgroups the daemon
 * cannot classify yet: the API has listed the node's pods (before that,
 * every pod would be unknown, selected or not), and no groupBy (an unknown
 * pod's group is unknown too). */
static bool pods_have_joiners(const struct kt_limit_cfg *lc, const struct kt_pod_set *pods)
{
	return lc->pods.set && pods && pods->synced && lc->group_by == KT_GROUP_NONE &&
	       !lc->group_of && limit_has_joiners(lc);
}

/* The kubelet's tier directories (pods.h) that exist at or below root, as
 * pending directories of pods: limit li. */
static int scan_pod_tiers(struct scan *sc, int li, const struct kt_config *cfg,
			  const char *cg_mount, const char *root)
{
	char tiers[KT_POD_TIER_DIRS][PATH_MAX], full[PATH_MAX];
	struct stat st;
	int n = kt_pod_tier_dirs(cfg->kube.cgroup_root, tiers), ret = 0;

	for (int t = 0; t < n && !ret; t++) {
		if (snprintf(full, sizeof(full), "%s/%s", cg_mount ? cg_mount : "", tiers[t]) >=
			    (int)sizeof(full) ||
		    lstat(full, &st) || !S_ISDIR(st.st_mode) || !kt_path_at_or_below(full, root))
			continue;
		ret = add_rec(sc, full, li, NULL);
	}
	return ret;
}

/* The cgroup of one known pod (its candidate paths cands[0..n)), if it is
 * in a tier directory: an outsider. */
static int add_pod_outsider(const struct scan *sc, const char *cg_mount, char (*cands)[PATH_MAX],
			    int n, struct kt_plan *plan)
{
	char full[PATH_MAX];

	for (int k = 0; k < n; k++) {
		char *slash;
		uint64_t cgid;
		bool tier;

		if (snprintf(full, sizeof(full), "%s/%s", cg_mount ? cg_mount : "", cands[k]) >=
		    (int)sizeof(full) || !(slash = strrchr(full, '/')))
			continue;
		*slash = '\0';
		tier = is_pod_tier(sc, full);
		*slash = '/';
		if (!tier || kt_cgroup_id(full, &cgid))
			continue;
		if (plan->n_pending + plan->n_outsiders >= KT_MAX_PENDING_ENTRIES)
			return -E2BIG;
		struct kt_outsider *o = &plan->outsiders[plan->n_outsiders];

		if (!(o->path = strdup(full)))
			return -ENOMEM;
		o->cgid = cgid;
		plan->n_outsiders++;
	}
	return 0;
}

/* The cgroups of the pods the API has told of, in a tier directory: each
 * has an entry of its own, a member's, or else an outsider's (a pod no
 * selector there picks is free from the rescan its mkdir wakes; the
 * watcher keeps the pods no selector picks by uid and QoS, in others). An
 * unknown child stays unclassified, charged, until the API tells of its
 * pod. */
static int add_pod_outsiders(const struct scan *sc, const struct kt_config *cfg,
			     const char *cg_mount, const struct kt_pod_set *pods,
			     struct kt_plan *plan)
{
	char cands[6][PATH_MAX];
	int ret = 0;

	for (int p = 0; p < pods->n && !ret; p++)
		ret = add_pod_outsider(sc, cg_mount, cands,
				       kt_pod_cgroup_paths(cfg->kube.cgroup_root, &pods->pods[p],
							   cands, 6),
				       plan);
	for (int p = 0; p < pods->n_others && !ret; p++)
		ret = add_pod_outsider(sc, cg_mount, cands,
				       kt_pod_ref_cgroup_paths(cfg->kube.cgroup_root,
							       &pods->others[p], cands, 6),
				       plan);
	return ret;
}

int kt_pending_scan(const struct kt_config *cfg, const char *cg_mount,
		    struct kt_glob_cache *globs, const struct kt_pod_set *pods,
		    struct kt_plan *plan)
{
	bool any_pods = false;
	struct scan sc = { 0 };
	char **copies;
	int n_copies = 0, n_entries = 0, ret = 0;

	for (int i = 0; i < cfg->n_limits; i++)
		n_entries += cfg->limits[i].n_cgroups;
	copies = calloc((size_t)n_entries + 1, sizeof(*copies));
	if (!copies)
		return -ENOMEM;
	for (int i = 0; plan->root && i < cfg->n_limits && !ret; i++) {
		const struct kt_limit_cfg *lc = &cfg->limits[i];

		if (pods_have_joiners(lc, pods)) {
			ret = scan_pod_tiers(&sc, i, cfg, cg_mount, plan->root);
			any_pods = true;
		}
		if (!limit_has_joiners(lc))
			continue;
		for (int j = 0; j < lc->n_cgroups && !ret; j++) {
			const char *entry = lc->cgroups[j];
			char full[PATH_MAX];

			if (!kt_path_is_pattern(entry))
				continue;
			if (snprintf(full, sizeof(full), "%s%s%s",
				     entry[0] == '/' ? "" : (cg_mount ? cg_mount : ""),
				     entry[0] == '/' ? "" : "/", entry) >= (int)sizeof(full))
				continue;
			if (!(copies[n_copies] = strdup(full))) {
				ret = -ENOMEM;
				break;
			}
			ret = scan_pattern(&sc, i, lc, copies[n_copies++], plan->root, globs);
		}
	}
	plan->pending = calloc(KT_MAX_PENDING_ENTRIES + 1, sizeof(*plan->pending));
	plan->outsiders = calloc(KT_MAX_PENDING_ENTRIES + 1, sizeof(*plan->outsiders));
	if (!plan->pending || !plan->outsiders)
		ret = -ENOMEM;
	/* one entry per directory, with every limit naming it: the records
	 * sorted, a directory's are adjacent */
	if (sc.n_recs > 1)
		qsort(sc.recs, (size_t)sc.n_recs, sizeof(*sc.recs), by_path);
	for (int r = 0; r < sc.n_recs && !ret; r++) {
		const struct kt_limit_cfg *lc = &cfg->limits[sc.recs[r].limit];
		int k = plan->n_pending && !strcmp(plan->pending[plan->n_pending - 1].path,
						     sc.recs[r].path)
				? plan->n_pending - 1
				: -1;
		struct kt_pending_dir *p;
		uint64_t cgid;

		if (k < 0) {
			if (kt_cgroup_id(sc.recs[r].path, &cgid))
				continue; /* gone meanwhile */
			if (plan->n_pending >= KT_MAX_PENDING_ENTRIES) {
				sc.truncated = true;
				break;
			}
			if (!(plan->pending[plan->n_pending].path = strdup(sc.recs[r].path))) {
				ret = -ENOMEM;
				break;
			}
			k = plan->n_pending++;
			plan->pending[k].cgid = cgid;
		}
		p = &plan->pending[k];
		bool have = false;

		for (int q = 0; q < p->n_limits; q++)
			have |= p->limits[q] == sc.recs[r].limit;
		if (have)
			continue;
		if (p->n_limits == KT_LIMITS_PER_CGROUP) {
			sc.truncated = true;
			continue;
		}
		p->limits[p->n_limits++] = sc.recs[r].limit;
		p->no_raw |= !lc->allow_raw_sockets;
		plan->limits[sc.recs[r].limit].n_pending_dirs++;
	}
	for (int k = 0; k < plan->n_pending && !ret; k++) {
		ret = add_outsiders(&sc, plan, plan->pending[k].path);
		if (ret == -E2BIG) {
			sc.truncated = true;
			ret = 0;
			break;
		}
	}
	if (!ret && any_pods && !sc.truncated) {
		ret = add_pod_outsiders(&sc, cfg, cg_mount, pods, plan);
		if (ret == -E2BIG) {
			sc.truncated = true;
			ret = 0;
		}
	}
	/* an order that does not depend on readdir's, for kt_pending_same */
	if (plan->outsiders)
		qsort(plan->outsiders, (size_t)plan->n_outsiders, sizeof(*plan->outsiders), by_cgid);
	if (sc.truncated)
		kt_warn("more than %d directories where patterns' members appear, or limits naming one: "
			"new cgroups in the rest are limited only once the daemon has found them",
			KT_MAX_PENDING_ENTRIES);
	for (int r = 0; r < sc.n_recs; r++)
		free(sc.recs[r].path);
	free(sc.recs);
	for (int c = 0; c < n_copies; c++)
		free(copies[c]);
	free(copies);
	return ret;
}

bool kt_pending_same(const struct kt_plan *a, const struct kt_plan *b)
{
	if (a->n_pending != b->n_pending || a->n_outsiders != b->n_outsiders)
		return false;
	for (int k = 0; k < a->n_pending; k++) {
		const struct kt_pending_dir *p = &a->pending[k], *q = &b->pending[k];

		if (p->cgid != q->cgid || p->n_limits != q->n_limits ||
		    memcmp(p->limits, q->limits, sizeof(p->limits[0]) * (size_t)p->n_limits))
			return false;
	}
	for (int k = 0; k < a->n_outsiders; k++)
		if (a->outsiders[k].cgid != b->outsiders[k].cgid)
			return false;
	return true;
}

void kt_pending_free(struct kt_plan *plan)
{
	for (int k = 0; plan->pending && k < plan->n_pending; k++)
		free(plan->pending[k].path);
	for (int k = 0; plan->outsiders && k < plan->n_outsiders; k++)
		free(plan->outsiders[k].path);
	free(plan->pending);
	free(plan->outsiders);
	plan->pending = NULL;
	plan->outsiders = NULL;
	plan->n_pending = plan->n_outsiders = 0;
}
