/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Member resolution: see resolve.h. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "base/cgroup.h"
#include "base/cgwatch.h"
#include "base/log.h"
#include "members/globcache.h"
#include "members/groups.h"
#include "members/pending.h"
#include "members/resolve.h"
#include "members/weights.h"

/* Adds cgroup `real` (id cgid), found by entry j of limit i (as pod, or
 * as the path `matched` a pattern matched), to `l`'s members unless it is
 * there already (two entries or spellings of one cgroup are one member).
 * Its bucket slot is kt_plan_apply's to find. */
static int add_member(const struct kt_config *cfg, struct kt_limit_rt *l, int *cap,
		      const char *real, uint64_t cgid, int j, const struct kt_pod *pod,
		      const char *matched, int via)
{
	enum kt_weight_src src;

	struct kt_member_rt *m;

	for (int k = 0; k < l->n_members; k++)
		if (l->members[k].cgid == cgid)
			return 0;
	if (l->n_members == KT_MAX_MEMBERS_PER_LIMIT) {
		kt_warn("limit %s: more than %d member cgroups: %s is not limited", l->cfg->name,
			KT_MAX_MEMBERS_PER_LIMIT, real);
		return 0;
	}
	if (l->n_members == *cap) {
		int grow = *cap ? 2 * *cap : 4;
		struct kt_member_rt *g = realloc(l->members, (size_t)grow * sizeof(*g));

		if (!g)
			return -ENOMEM;
		l->members = g;
		*cap = grow;
	}
	m = &l->members[l->n_members];
	memset(m, 0, sizeof(*m));
	m->path = strdup(real);
	if (!m->path)
		return -ENOMEM;
	if (pod && asprintf(&m->pod, "%s/%s", pod->ns, pod->name) < 0) {
		free(m->path);
		return -ENOMEM;
	}
	m->cgid = cgid;
	m->entry = j;
	m->weight = kt_member_weight(l->cfg, pod, matched, &src);
	m->weight_src = (uint8_t)src;
	m->klass = (uint8_t)kt_member_class(l->cfg, pod, matched,
					    via >= 0 && via < cfg->n_limits ? &cfg->limits[via] : NULL, &src);
	m->class_src = (uint8_t)src;
	m->via = (int16_t)via;
	m->slot = UINT32_MAX;
	/* the cgroup id is stable for the cgroup's life, which is the
	 * member's life: a recreated pod is a new member */
	snprintf(m->id, sizeof(m->id), "%s:%llu", cfg->node_name, (unsigned long long)cgid);
	l->n_members++;
	return 0;
}

/* A cooperative limit's members: the node, whatever the processes using
 * it, as one member (the plain name), and with weightBy/classBy caller
 * one more per caller, "LIMIT/CALLER" ("<node>/request/CALLER" in the
 * pool). Their path is the kt_coop entry's name. */
static int coop_members(const struct kt_config *cfg, const struct kt_limit_cfg *lc, struct kt_limit_rt *l)
{
	int n = 1 + lc->n_callers;

	if (!(l->members = calloc((size_t)n, sizeof(*l->members))))
		return -ENOMEM;
	for (int j = 0; j < n; j++) {
		struct kt_member_rt *m = &l->members[j];
		const char *caller = j ? lc->callers[j - 1] : NULL;
		enum kt_weight_src src;

		l->n_members++; /* freed with the plan, path or not */
		if (!caller)
			m->path = strdup(lc->name);
		else if (asprintf(&m->path, "%s/%s", lc->name, caller) < 0)
			m->path = NULL;
		if (!m->path)
			return -ENOMEM;
		m->entry = KT_ENTRY_COOP;
		m->slot = UINT32_MAX;
		m->via = -1;
		m->weight = kt_member_weight(lc, NULL, caller, &src);
		m->weight_src = (uint8_t)src;
		m->klass = (uint8_t)kt_member_class(lc, NULL, caller, NULL, &src);
		m->class_src = (uint8_t)src;
		snprintf(m->id, sizeof(m->id), "%s/request%s%s", cfg->node_name, caller ? "/" : "",
			 caller ? caller : "");
	}
	return 0;
}

/* The pods a groupBy template selects, by group value: built once per
 * resolution for each template, so each of its 1,000 groups finds its pods
 * in a bsearch instead of asking every pod. */
struct pod_value {
	const char *val; /* the pod's group value */
	int pod;         /* its index in the pod set */
};
struct pod_index {
	bool built;
	int n;
	struct pod_value *e; /* sorted by value */
};

/* Everything a resolution pass builds once: the globs and, per template
 * of the parsed config (group_of - 1), its pod index. */
struct pass {
	struct kt_glob_cache *globs;
	struct pod_index *by_tmpl;
	int n_tmpl;
};

static int by_value(const void *x, const void *y)
{
	return strcmp(((const struct pod_value *)x)->val, ((const struct pod_value *)y)->val);
}

/* Template lc's pods with a value, sorted by it. */
static int build_pod_index(struct pod_index *ix, const struct kt_limit_cfg *lc,
			   const struct kt_pod_set *pods)
{
	if (!(ix->e = calloc((size_t)pods->n + 1, sizeof(*ix->e))))
		return -ENOMEM;
	for (int p = 0; p < pods->n; p++) {
		const char *v;

		if (kt_pod_selected(&lc->pods, &pods->pods[p]) &&
		    (v = kt_group_pod_value(lc, &pods->pods[p])))
			ix->e[ix->n++] = (struct pod_value){ v, p };
	}
	qsort(ix->e, (size_t)ix->n, sizeof(*ix->e), by_value);
	ix->built = true;
	return 0;
}

static void pass_free(struct pass *ps)
{
	for (int t = 0; ps->by_tmpl && t < ps->n_tmpl; t++)
		free(ps->by_tmpl[t].e);
	free(ps->by_tmpl);
	kt_glob_cache_free(ps->globs);
	memset(ps, 0, sizeof(*ps));
}

/* The members limit i's pods selector picks among `pods`: each pod whose
 * cgroup directory exists under one of the kubelet's layouts. One that is
 * not there yet (the kubelet creates it after the API lists the pod) joins
 * at the rescan its mkdir triggers. A group's instance looks its value up
 * in its template's pod index. */
static int pod_members(const struct kt_config *cfg, int i, const char *cg_mount,
		       const struct kt_pod_set *pods, struct pass *ps, struct kt_limit_rt *l,
		       int *cap)
{
	const struct kt_limit_cfg *lc = &cfg->limits[i];
	char cands[6][PATH_MAX], real[PATH_MAX], why[KT_ERR_LEN];
	struct pod_index *ix = NULL;
	uint64_t cgid;
	int ret, lo = 0, hi;

	if (!lc->pods.set || !pods)
		return 0;
	hi = pods->n;
	if (lc->group_of && lc->group_of <= ps->n_tmpl) {
		ix = &ps->by_tmpl[lc->group_of - 1];
		if (!ix->built && (ret = build_pod_index(ix, lc, pods)))
			return ret;
		hi = ix->n;
		if (lc->group_value) { /* the range of its value */
			int a = 0, b = ix->n;

			while (a < b) {
				int mid = a + (b - a) / 2;

				if (strcmp(ix->e[mid].val, lc->group_value) < 0)
					a = mid + 1;
				else
					b = mid;
			}
			for (lo = hi = a; hi < ix->n && !strcmp(ix->e[hi].val, lc->group_value); hi++)
				;
		}
	}
	for (int q = lo; q < hi; q++) {
		const struct kt_pod *pod = &pods->pods[ix ? ix->e[q].pod : q];
		int n;

		if (ix ? !kt_group_takes(lc, ix->e[q].val)
		       : !kt_pod_selected(&lc->pods, pod) ||
				 !kt_group_takes(lc, kt_group_pod_value(lc, pod)))
			continue;
		n = kt_pod_cgroup_paths(cfg->kube.cgroup_root, pod, cands, 6);
		for (int k = 0; k < n; k++) {
			if (kt_cgroup_resolve(cands[k], cg_mount, real, sizeof(real), why, sizeof(why)) ||
			    kt_cgroup_id(real, &cgid))
				continue;
			if ((ret = add_member(cfg, l, cap, real, cgid, KT_ENTRY_PODS, pod, NULL, -1)))
				return ret;
			break;
		}
	}
	return 0;
}

/* Appends the directories of one pod (cands[0..c)) to v; -ENOMEM. */
static int push_pod_dirs(char ***v, int *n, int *cap, const char *cg_mount,
			 char (*cands)[PATH_MAX], int c)
{
	for (int k = 0; k < c; k++) {
		if (*n == *cap) {
			int ncap = *cap ? 2 * *cap : 16;
			char **g = realloc(*v, (size_t)ncap * sizeof(*g));

			if (!g)
				return -ENOMEM;
			*v = g;
			*cap = ncap;
		}
		if (asprintf(&(*v)[*n], "%s/%s", cg_mount, cands[k]) < 0)
			return -ENOMEM;
		(*n)++;
	}
	return 0;
}

int kt_plan_pod_dirs(const struct kt_config *cfg, const char *cg_mount,
		     const struct kt_pod_set *pods, char ***out)
{
	char cands[6][PATH_MAX];
	char **v = NULL;
	int n = 0, cap = 0, ret = 0;
	bool wanted = false;

	*out = NULL;
	if (cfg->source) /* the pods of groups still to come too */
		cfg = cfg->source;
	for (int i = 0; i < cfg->n_limits && !wanted; i++)
		wanted = cfg->limits[i].pods.set;
	if (!wanted || !pods)
		return 0;
	/* the unselected pods' too: their mkdir wakes the rescan that frees
	 * them from a join bucket (pending.h) */
	for (int p = 0; p < pods->n && !ret; p++)
		ret = push_pod_dirs(&v, &n, &cap, cg_mount, cands,
				    kt_pod_cgroup_paths(cfg->kube.cgroup_root, &pods->pods[p], cands, 6));
	for (int p = 0; p < pods->n_others && !ret; p++)
		ret = push_pod_dirs(&v, &n, &cap, cg_mount, cands,
				    kt_pod_ref_cgroup_paths(cfg->kube.cgroup_root, &pods->others[p],
							    cands, 6));
	if (ret) {
		while (n)
			free(v[--n]);
		free(v);
		return -ENOMEM;
	}
	*out = v;
	return n;
}

/* The members limit i's cgroups entries name now: each plain path that
 * exists, and every cgroup v2 directory a pattern matches. A missing plain
 * path is no error (it joins when it appears; `quiet` keeps a rescan from
 * repeating the warning); a plain path that exists but is no cgroup v2
 * directory is, with the file, line and field. */
static int limit_members(const struct kt_config *cfg, int i, const char *cg_mount,
			 const struct kt_pod_set *pods, bool quiet, struct pass *ps,
			 struct kt_limit_rt *l, char *err, size_t errlen)
{
	struct kt_glob_cache *globs = ps->globs;
	const struct kt_limit_cfg *lc = &cfg->limits[i];
	char real[PATH_MAX], why[KT_ERR_LEN], full[PATH_MAX];
	int cap = 0, ret;
	uint64_t cgid;

	if (lc->unit == KT_UNIT_REQUEST)
		return coop_members(cfg, lc, l);

	for (int j = 0; j < lc->n_cgroups; j++) {
		const char *entry = lc->cgroups[j];

		if (kt_path_is_pattern(entry)) {
			char **paths = NULL;
			int n;

			if (entry[0] == '/')
				snprintf(full, sizeof(full), "%s", entry);
			else
				snprintf(full, sizeof(full), "%s/%s", cg_mount ? cg_mount : "", entry);
			const struct kt_glob_key *only = NULL;

			n = kt_glob_cached(globs, full, &paths); /* the cache's */
			/* a group's instance: the matches in its group's directory,
			 * found in the pattern's index by that directory's name */
			if (n > 0 && lc->group_of && lc->group_value)
				n = kt_glob_cached_by(globs, full, lc->group_up, lc->group_value, &only);
			if (n < 0) {
				snprintf(err, errlen, "%s:%d: limits[%d].cgroups[%d]: %s: %s", cfg->file,
					 lc->cgroup_lines[j], i, j, entry, strerror(-n));
				return n;
			}
			for (int q = 0; q < n; q++) {
				char group[KT_GROUP_VALUE_MAX + 1];
				int k = only ? only[q].idx : q;

				/* the other pool's members: the values no group names */
				if (lc->group_other &&
				    !kt_group_takes(lc, kt_group_path_value(paths[k], lc->group_up, group,
									    sizeof(group))
								? group
								: NULL))
					continue;
				/* a match that is no cgroup (a file the glob
				 * cannot tell apart, a race with rmdir) is skipped */
				if (kt_cgroup_resolve(paths[k], cg_mount, real, sizeof(real), why,
						      sizeof(why)) ||
				    kt_cgroup_id(real, &cgid))
					continue;
				if ((ret = add_member(cfg, l, &cap, real, cgid, j, NULL, paths[k], -1)))
					return ret;
			}
			continue;
		}
		ret = kt_cgroup_resolve(entry, cg_mount, real, sizeof(real), why, sizeof(why));
		if (ret == -ENOENT) {
			if (!quiet)
				kt_warn("%s:%d: limits[%d].cgroups[%d]: %s does not exist (yet): limit %s applies to it when it appears",
					cfg->file, lc->cgroup_lines[j], i, j, entry, lc->name);
			continue;
		}
		if (!ret) {
			ret = kt_cgroup_id(real, &cgid);
			if (ret == -ENOENT)
				continue; /* removed in between: as missing */
			if (ret)
				snprintf(why, sizeof(why), "%s: cannot read cgroup id: %s", real,
					 strerror(-ret));
		}
		if (ret) {
			snprintf(err, errlen, "%s:%d: limits[%d].cgroups[%d]: %s", cfg->file,
				 lc->cgroup_lines[j], i, j, why);
			return ret;
		}
		if ((ret = add_member(cfg, l, &cap, real, cgid, j, NULL, NULL, -1)))
			return ret;
	}
	return pod_members(cfg, i, cg_mount, pods, ps, l, &cap);
}

/* A kt_members value lists at most KT_LIMITS_PER_CGROUP limits: a cgroup
 * named by a plain path in more is a config error (`strict`); one a
 * pattern found, or one that appeared after the start, stays out of the
 * limits past the eighth, with a warning. */
static int cap_memberships(const struct kt_config *cfg, struct kt_plan *plan, bool strict,
			   char *err, size_t errlen)
{
	for (int i = 0; i < plan->n_limits; i++) {
		struct kt_limit_rt *l = &plan->limits[i];
		int kept = 0;

		if (l->cfg->unit == KT_UNIT_REQUEST)
			continue; /* no cgroup */
		for (int j = 0; j < l->n_members; j++) {
			struct kt_member_rt *m = &l->members[j];
			const struct kt_limit_cfg *lc = &cfg->limits[i];
			int dup = 0;

			for (int k = 0; k < i; k++)
				for (int q = 0; q < plan->limits[k].n_members; q++)
					dup += plan->limits[k].cfg->unit != KT_UNIT_REQUEST &&
					       plan->limits[k].members[q].cgid == m->cgid;
			if (dup < KT_LIMITS_PER_CGROUP) {
				l->members[kept++] = *m;
				continue;
			}
			if (strict && m->entry != KT_ENTRY_PODS &&
			    !kt_path_is_pattern(lc->cgroups[m->entry])) {
				snprintf(err, errlen,
					 "%s:%d: limits[%d].cgroups[%d]: %s is already a member of %d limits, the most one cgroup may join",
					 cfg->file, lc->cgroup_lines[m->entry], i, m->entry, m->path,
					 KT_LIMITS_PER_CGROUP);
				return -E2BIG;
			}
			kt_warn("limit %s: %s is already a member of %d limits, the most one cgroup may join: not limited by this one",
				lc->name, m->path, KT_LIMITS_PER_CGROUP);
			free(m->path);
			free(m->pod);
		}
		l->n_members = kept;
	}
	return 0;
}

/* parent: every member of a limit is a member of each of its ancestors
 * too (KT_ENTRY_CHILD), so each level's pool counts its whole subtree and
 * has a bucket for the cgroup that the level below is charged up to. A
 * cgroup that is an ancestor's own member already stays as it is. */
static int inherit_members(const struct kt_config *cfg, struct kt_plan *plan)
{
	int *cap = calloc((size_t)plan->n_limits + 1, sizeof(*cap));
	int ret = 0;

	if (!cap)
		return -ENOMEM;
	for (int i = 0; i < plan->n_limits; i++)
		cap[i] = plan->limits[i].n_members;
	for (int i = 0; i < plan->n_limits && !ret; i++) {
		struct kt_limit_rt *l = &plan->limits[i];

		for (int j = 0; j < l->n_members && !ret; j++) {
			const struct kt_member_rt *m = &l->members[j];

			if (m->entry == KT_ENTRY_CHILD || m->entry == KT_ENTRY_COOP)
				continue;
			/* add_member keeps an ancestor's own member as it is; l
			 * is never an ancestor of itself (no cycles), so m stays */
			/* via: the child of each ancestor it comes through */
			for (int a = kt_cfg_parent(l->cfg), via = i; a >= 0 && !ret;
			     via = a, a = kt_cfg_parent(&cfg->limits[a]))
				ret = add_member(cfg, &plan->limits[a], &cap[a], m->path, m->cgid,
						 KT_ENTRY_CHILD, NULL, NULL, via);
		}
	}
	free(cap);
	return ret;
}

static int member_ids(struct kt_plan *plan)
{
	for (int i = 0; i < plan->n_limits; i++) {
		struct kt_limit_rt *l = &plan->limits[i];

		free(l->member_ids);
		free(l->member_weights);
		free(l->member_classes);
		l->member_weights = NULL;
		l->member_classes = NULL;
		l->member_ids = calloc(l->n_members + 1, sizeof(*l->member_ids));
		if (!l->member_ids)
			return -ENOMEM;
		for (int j = 0; j < l->n_members; j++)
			l->member_ids[j] = l->members[j].id;
		if (l->cfg->class_by != KT_WEIGHT_NONE) {
			if (!(l->member_classes = calloc(l->n_members + 1, sizeof(*l->member_classes))))
				return -ENOMEM;
			for (int j = 0; j < l->n_members; j++)
				l->member_classes[j] = l->members[j].klass;
		}
		if (l->cfg->weight_by == KT_WEIGHT_NONE && l->cfg->class_by == KT_WEIGHT_NONE)
			continue;
		if (!(l->member_weights = calloc(l->n_members + 1, sizeof(*l->member_weights))))
			return -ENOMEM;
		for (int j = 0; j < l->n_members; j++)
			l->member_weights[j] = l->members[j].weight;
	}
	return 0;
}

/* cfg's attachRoot as a cgroup: it exists, is a cgroup v2 directory, and is
 * the mount or below it. Errors "FILE:LINE: attachRoot: what". */
static int resolve_root(const struct kt_config *cfg, const char *cg_mount, struct kt_plan *plan,
			char *err, size_t errlen)
{
	char real[PATH_MAX], why[KT_ERR_LEN];
	int ret;

	ret = kt_cgroup_resolve(cfg->attach_root, cg_mount, real, sizeof(real), why, sizeof(why));
	if (!ret && cg_mount && !kt_path_at_or_below(real, cg_mount)) {
		snprintf(why, sizeof(why), "%s: not below the cgroup v2 mount %s", real, cg_mount);
		ret = -EINVAL;
	}
	if (!ret && (ret = kt_cgroup_id(real, &plan->root_cgid)))
		snprintf(why, sizeof(why), "%s: cannot read cgroup id: %s", real, strerror(-ret));
	if (ret) {
		snprintf(err, errlen, "%s:%d: attachRoot: %s", cfg->file, cfg->attach_root_line, why);
		return ret;
	}
	plan->root_line = cfg->attach_root_line;
	plan->root = strdup(real);
	return plan->root ? 0 : -ENOMEM;
}

/* Leaves out of l the members a rescan found outside plan->root: the
 * programs attached at the root never see them. */
static void drop_outside_root(struct kt_plan *plan, struct kt_limit_rt *l)
{
	int kept = 0;

	if (l->cfg->unit == KT_UNIT_REQUEST)
		return;
	for (int j = 0; j < l->n_members; j++) {
		struct kt_member_rt *m = &l->members[j];

		if (kt_path_at_or_below(m->path, plan->root)) {
			l->members[kept++] = *m;
			continue;
		}
		kt_warn("limit %s: %s is not below attachRoot %s: not limited", l->cfg->name,
			m->path, plan->root);
		free(m->path);
		free(m->pod);
	}
	l->n_members = kept;
}

static void common_dir(char *acc, const char *p);

/* attachRoot auto: the deepest common ancestor of what the limits select
 * (kt_plan_common_root) and of every member found now, so that a member
 * the config's paths would not predict still has the programs above it.
 * Per-member attachment (plan->root NULL, root_note saying why) when that
 * is the cgroup v2 root: attached there, every process of the host would
 * pass the programs. Fails only for memory. */
static int auto_root(const struct kt_config *cfg, const char *cg_mount, struct kt_plan *plan)
{
	char dir[PATH_MAX], real[PATH_MAX], mnt[PATH_MAX], why[KT_ERR_LEN];
	int ret = kt_plan_common_root(cfg, cg_mount, dir, sizeof(dir));

	if (ret == -ENOENT)
		return 0; /* no cgroup limit: nothing to attach */
	if (!ret && !cg_mount)
		ret = -ENOENT;
	if (ret) {
		snprintf(plan->root_note, sizeof(plan->root_note),
			 "no common ancestor of the limits' cgroups: %s",
			 cg_mount ? strerror(-ret) : "no cgroup v2 mount");
		return 0;
	}
	if (!realpath(cg_mount, mnt))
		snprintf(mnt, sizeof(mnt), "%s", cg_mount);
	if (kt_cgroup_resolve(dir, cg_mount, real, sizeof(real), why, sizeof(why))) {
		snprintf(plan->root_note, sizeof(plan->root_note), "%s", why);
		return 0;
	}
	for (int i = 0; i < plan->n_limits; i++) {
		const struct kt_limit_rt *l = &plan->limits[i];

		if (l->cfg->unit == KT_UNIT_REQUEST)
			continue;
		for (int j = 0; j < l->n_members; j++)
			if (!kt_path_at_or_below(l->members[j].path, real))
				common_dir(real, l->members[j].path);
	}
	if (!strcmp(real, mnt) || !kt_path_at_or_below(real, mnt)) {
		snprintf(plan->root_note, sizeof(plan->root_note),
			 "the limits' cgroups have no common ancestor below the cgroup v2 root %s",
			 mnt);
		return 0;
	}
	if ((ret = kt_cgroup_id(real, &plan->root_cgid))) {
		snprintf(plan->root_note, sizeof(plan->root_note), "%s: cannot read cgroup id: %s",
			 real, strerror(-ret));
		plan->root_cgid = 0;
		return 0;
	}
	plan->root = strdup(real);
	return plan->root ? 0 : -ENOMEM;
}

void kt_plan_attach_desc(const struct kt_plan *plan, char *buf, size_t len)
{
	bool any = false;

	for (int i = 0; i < plan->n_limits && !any; i++)
		any = plan->limits[i].cfg->unit != KT_UNIT_REQUEST;
	if (!any)
		snprintf(buf, len, "none");
	else if (plan->root)
		snprintf(buf, len, "%s (%s)", plan->root,
			 plan->root_mode == KT_ATTACH_PATH ? "attachRoot" : "auto");
	else if (plan->root_note[0])
		snprintf(buf, len, "members (auto: %s)", plan->root_note);
	else
		snprintf(buf, len, "members");
}

/* The plan for cfg with the members found now. A rescan (not a start or a
 * reload) is quiet about missing paths and never fails on a cgroup in too
 * many limits. Limit ids and slots are kt_plan_apply's to find. */
static int plan_members(const struct kt_config *cfg, const char *cg_mount,
			const struct kt_pod_set *pods, bool rescan, struct kt_plan *plan, char *err,
			size_t errlen)
{
	struct pass ps = { kt_glob_cache_new(), NULL, cfg->source ? cfg->source->n_limits : 0 };
	int ret = -ENOMEM;

	memset(plan, 0, sizeof(*plan));
	plan->limits = calloc(cfg->n_limits + 1, sizeof(*plan->limits));
	ps.by_tmpl = calloc((size_t)ps.n_tmpl + 1, sizeof(*ps.by_tmpl));
	if (!plan->limits || !ps.globs || !ps.by_tmpl)
		goto fail;
	plan->n_limits = cfg->n_limits;
	plan->file = cfg->file;
	plan->root_mode = cfg->attach_mode;
	if (cfg->attach_mode == KT_ATTACH_PATH &&
	    (ret = resolve_root(cfg, cg_mount, plan, err, errlen)))
		goto fail;
	for (int i = 0; i < cfg->n_limits; i++) {
		struct kt_limit_rt *l = &plan->limits[i];

		l->cfg = &cfg->limits[i];
		ret = limit_members(cfg, i, cg_mount, pods, rescan, &ps, l, err, errlen);
		if (ret)
			goto fail;
		/* a rescan's new member outside attachRoot is left out (the
		 * start and reload refuse one: kt_plan_check) */
		if (rescan && plan->root)
			drop_outside_root(plan, l);
	}
	ret = cap_memberships(cfg, plan, !rescan, err, errlen);
	if (!ret)
		ret = inherit_members(cfg, plan);
	/* auto: a root above every member, or per member */
	if (!ret && cfg->attach_mode == KT_ATTACH_AUTO)
		ret = auto_root(cfg, cg_mount, plan);
	if (!ret)
		ret = member_ids(plan);
	if (!ret)
		ret = kt_pending_scan(cfg, cg_mount, ps.globs, pods, plan);
	pass_free(&ps);
	if (!ret)
		return 0;
fail:
	if (ret == -ENOMEM)
		snprintf(err, errlen, "out of memory");
	pass_free(&ps);
	kt_plan_free(plan);
	return ret;
}

int kt_plan_resolve(const struct kt_config *cfg, const char *cg_mount,
		    const struct kt_pod_set *pods, struct kt_plan *plan, char *err, size_t errlen)
{
	return plan_members(cfg, cg_mount, pods, false, plan, err, errlen);
}

int kt_plan_refresh(const struct kt_plan *cur, const struct kt_config *cfg, const char *cg_mount,
		    const struct kt_pod_set *pods, struct kt_plan *next, bool *changed, char *err,
		    size_t errlen)
{
	int ret = plan_members(cfg, cg_mount, pods, true, next, err, errlen);

	*changed = false;
	if (ret)
		return ret;
	/* the root recreated: a new cgroup to attach to */
	*changed = cur->root_cgid != next->root_cgid;
	for (int i = 0; i < cur->n_limits && !*changed; i++) {
		const struct kt_limit_rt *a = &cur->limits[i], *b = &next->limits[i];

		*changed = a->n_members != b->n_members;
		/* a relabelled pod may weigh something else (weightBy) */
		for (int j = 0; j < a->n_members && !*changed; j++)
			*changed = a->members[j].cgid != b->members[j].cgid ||
				   a->members[j].weight != b->members[j].weight ||
				   a->members[j].weight_src != b->members[j].weight_src ||
				   a->members[j].klass != b->members[j].klass ||
				   a->members[j].class_src != b->members[j].class_src;
	}
	/* a pending directory or an outsider came or went */
	if (!*changed)
		*changed = !kt_pending_same(cur, next);
	if (!*changed)
		kt_plan_free(next);
	return 0;
}

void kt_plan_free(struct kt_plan *plan)
{
	for (int i = 0; i < plan->n_limits; i++) {
		for (int j = 0; j < plan->limits[i].n_members; j++) {
			free(plan->limits[i].members[j].path);
			free(plan->limits[i].members[j].pod);
		}
		free(plan->limits[i].members);
		free(plan->limits[i].member_ids);
		free(plan->limits[i].member_weights);
		free(plan->limits[i].member_classes);
	}
	kt_pending_free(plan);
	free(plan->limits);
	free(plan->root);
	memset(plan, 0, sizeof(*plan));
}

/* Lexically the longest common directory of `acc` and `p` (both absolute,
 * one slash between components, no trailing slash but for "/"), in acc. */
static void common_dir(char *acc, const char *p)
{
	size_t i = 0, last = 0;

	while (acc[i] && acc[i] == p[i]) {
		if (acc[i] == '/')
			last = i;
		i++;
	}
	if (!acc[i] && (p[i] == '/' || !p[i]))
		return; /* acc is p or a directory above it */
	if (!p[i] && acc[i] == '/') {
		acc[i] = 0; /* p is a directory above acc */
		return;
	}
	if (!acc[i] && i && acc[i - 1] == '/')
		return;
	acc[last ? last : 1] = 0;
}

/* `in` made absolute (relative: under mount), with one slash between
 * components, "." dropped and no trailing slash; a pattern cut to the
 * directory before its first wildcard component. */
static int selected_dir(const char *in, const char *mount, char *out, size_t outlen)
{
	char buf[PATH_MAX], *o = out, *wild;
	const char *s;

	if (snprintf(buf, sizeof(buf), "%s%s%s", in[0] == '/' ? "" : (mount ? mount : ""),
		     in[0] == '/' ? "" : "/", in) >= (int)sizeof(buf) ||
	    strlen(buf) >= outlen)
		return -ENAMETOOLONG;
	if ((wild = strpbrk(buf, "*?["))) {
		*wild = 0;
		if ((wild = strrchr(buf, '/')))
			wild[1] = 0;
	}
	for (s = buf; *s;) {
		const char *e;

		while (*s == '/')
			s++;
		if (!*s)
			break;
		e = strchrnul(s, '/');
		if (!(e - s == 1 && *s == '.')) {
			*o++ = '/';
			memcpy(o, s, (size_t)(e - s));
			o += e - s;
		}
		s = e;
	}
	if (o == out)
		*o++ = '/';
	*o = 0;
	return 0;
}

int kt_plan_common_root(const struct kt_config *cfg, const char *cg_mount, char *out,
			size_t outlen)
{
	char acc[PATH_MAX] = "", dir[PATH_MAX];
	struct stat st;
	bool any = false;
	int ret;

	/* what every limit selects, a groupBy limit's groups still to come too:
	 * the root stays where it is as groups come and go */
	if (cfg->source)
		cfg = cfg->source;
	for (int i = 0; i < cfg->n_limits; i++) {
		const struct kt_limit_cfg *lc = &cfg->limits[i];
		int kube_dirs = 0;

		if (lc->unit == KT_UNIT_REQUEST)
			continue;
		for (int j = 0; j <= lc->n_cgroups + 2; j++) {
			const char *e = j < lc->n_cgroups ? lc->cgroups[j] : NULL;
			char kp[PATH_MAX];

			/* after the paths: a pods: selector's cgroup root, the
			 * kubelet's kubepods.slice and kubepods there (those that
			 * exist; neither: the cgroup root itself) */
			if (j >= lc->n_cgroups && lc->pods.set) {
				/* relative to the mount, as kt_pod_cgroup_paths has it */
				const char *kr = cfg->kube.cgroup_root ? cfg->kube.cgroup_root : "";
				int k = j - lc->n_cgroups;

				while (*kr == '/')
					kr++;
				if (!*kr)
					kr = ".";

				if (k < 2) {
					snprintf(kp, sizeof(kp), "%s/%s", kr,
						 k ? "kubepods" : "kubepods.slice");
					if (selected_dir(kp, cg_mount, dir, sizeof(dir)) ||
					    stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
						continue;
					kube_dirs++;
					e = kp;
				} else if (!kube_dirs) {
					e = kr;
				}
			}
			if (!e)
				continue;
			if ((ret = selected_dir(e, cg_mount, dir, sizeof(dir))))
				return ret;
			if (!any)
				snprintf(acc, sizeof(acc), "%s", dir);
			else
				common_dir(acc, dir);
			any = true;
		}
	}
	if (!any)
		return -ENOENT;
	/* above the mount (a path elsewhere) is no cgroup: the mount */
	if (cg_mount && !kt_path_at_or_below(acc, cg_mount))
		snprintf(acc, sizeof(acc), "%s", cg_mount);
	/* a path not created yet: its nearest existing ancestor */
	while (stat(acc, &st) < 0 || !S_ISDIR(st.st_mode)) {
		char *slash = strrchr(acc, '/');

		if (!slash || slash == acc) {
			snprintf(acc, sizeof(acc), "/");
			break;
		}
		*slash = 0;
	}
	if (strlen(acc) >= outlen)
		return -ENAMETOOLONG;
	strcpy(out, acc);
	return 0;
}
