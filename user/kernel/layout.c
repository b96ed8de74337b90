/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What the maps and links should hold for a plan: see layout.h. Pure: no
 * BPF call, no kernel state. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/cgroup.h"
#include "kernel/layout.h"
#include "members/pending.h"

/* Is `path` strictly inside directory `dir`? */
static bool path_inside(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	return strncmp(path, dir, n) == 0 && path[n] == '/';
}

/* Appends to each member's kt_members value the limits of the members it is
 * nested in, nearest first, skipping limits it has already: the programs
 * then find every limit that charges a cgroup (or its sub-cgroups) in one
 * list, and a limit on both keeps the nearest member's bucket. */
static int inherit_nested(const struct kt_attach *want, struct kt_member_val *vals, int n,
			  char *err, size_t errlen)
{
	for (int k = 0; k < n; k++) {
		struct kt_member_val *v = &vals[k];
		size_t done_len = SIZE_MAX; /* ancestors longer than this are merged */

		for (;;) {
			int anc = -1;

			/* the nearest (longest path) ancestor not merged yet */
			for (int j = 0; j < n; j++)
				if (path_inside(want[k].path, want[j].path) &&
				    strlen(want[j].path) < done_len &&
				    (anc < 0 || strlen(want[j].path) > strlen(want[anc].path)))
					anc = j;
			if (anc < 0)
				break;
			done_len = strlen(want[anc].path);
			for (uint32_t e = 0; e < vals[anc].own; e++) {
				const struct kt_member_ent *ae = &vals[anc].ents[e];
				uint32_t q;

				for (q = 0; q < v->count; q++)
					if (v->ents[q].limit_id == ae->limit_id)
						break;
				if (q < v->count)
					continue;
				if (v->count == KT_LIMITS_PER_CGROUP) {
					snprintf(err, errlen,
						 "cgroup %s is a member of more than %d limits, counting those of %s, which it is nested in",
						 want[k].path, KT_LIMITS_PER_CGROUP, want[anc].path);
					return -E2BIG;
				}
				v->ents[v->count++] = *ae;
			}
			v->flags |= vals[anc].flags & KT_MEMBER_NO_RAW; /* not the others: they describe the ancestor alone */
		}
	}
	return 0;
}

/* The hooks (bit per enum kt_hook, KT_ATTACH_*) a cgroup limit's members
 * need; 0 for a cooperative limit (no cgroup). */
static unsigned limit_hooks(const struct kt_limit_cfg *lc)
{
	unsigned mask;

	if (lc->unit == KT_UNIT_REQUEST)
		return 0;
	mask = 1u << kt_hook_for_unit(lc->unit);
	/* the datagrams sendmsg cannot see (connected sockets, GSO) are
	 * charged on egress */
	if (lc->unit == KT_UNIT_DATAGRAM)
		mask |= 1u << KT_HOOK_EGRESS;
	/* raw IP sockets would go around the hooks */
	if (!lc->allow_raw_sockets)
		mask |= 1u << KT_ATTACH_SOCK_CREATE;
	/* TCP under a byte limit paces itself (sockops.bpf.c) */
	if (lc->unit == KT_UNIT_BYTE)
		mask |= 1u << KT_ATTACH_SOCKOPS;
	/* a call limit's maxDelay becomes its connections' TCP_USER_TIMEOUT */
	if (lc->unit == KT_UNIT_CALL && lc->max_delay_ms)
		mask |= 1u << KT_ATTACH_SOCKOPS;
	/* an in-flight slot is given back when the socket closes, or when
	 * its TCP state reaches CLOSE first (bpf/lib/inflight.h) */
	if (lc->unit == KT_UNIT_CONCURRENT)
		mask |= 1u << KT_ATTACH_SOCKOPS | 1u << KT_ATTACH_SOCK_RELEASE;
	return mask;
}

static int want_index(const struct kt_attach *want, int n, uint64_t cgid)
{
	for (int k = 0; k < n; k++)
		if (want[k].cgroup_id == cgid)
			return k;
	return -1;
}

/* Appends to pending directory p's list, after its own and inherited
 * entries, a pending entry per limit naming it that a cgroup below it
 * without an entry would be charged under: a pod-scope limit's join bucket,
 * a node-scope limit's one bucket (none without members). A limit the list
 * has already charges such a cgroup anyway. Entries that do not fit are
 * left out (kt_pending_scan warned of directories named by too many). */
static void add_pending(const struct kt_plan *plan, const struct kt_pending_dir *p,
			struct kt_member_val *v)
{
	uint32_t n = 0;

	for (int q = 0; q < p->n_limits; q++) {
		const struct kt_limit_rt *l = &plan->limits[p->limits[q]];
		uint32_t slot, e;

		if (l->has_join)
			slot = l->join_slot;
		else if (l->cfg->scope == KT_SCOPE_NODE && l->n_members > 0)
			slot = l->members[0].slot;
		else
			continue;
		for (e = 0; e < v->count + n; e++)
			if (v->ents[e].limit_id == l->id)
				break;
		if (e < v->count + n || v->count + n == KT_LIMITS_PER_CGROUP)
			continue;
		v->ents[v->count + n++] = (struct kt_member_ent){ .limit_id = l->id, .slot = slot };
	}
	v->flags = (uint16_t)((v->flags & ~(KT_MEMBER_PENDING_MASK << KT_MEMBER_PENDING_SHIFT)) |
			      (n << KT_MEMBER_PENDING_SHIFT));
	if (n && p->no_raw)
		v->flags |= KT_MEMBER_PENDING_NO_RAW;
}

/* Member cgroups of the plan, each with the kt_members value listing its
 * limits (then those inherited from the members it is nested in) and the
 * hooks its limits need. Fails, naming the cgroup, when one is in more
 * limits than a kt_members value holds. */
static int collect_cgroups(const struct kt_plan *plan, struct kt_attach *want,
			   struct kt_member_val *vals, int *n_out, char *err, size_t errlen)
{
	int n = 0, ret;

	for (int i = 0; i < plan->n_limits; i++) {
		if (plan->limits[i].cfg->unit == KT_UNIT_REQUEST)
			continue; /* no cgroup, no hook */
		for (int j = 0; j < plan->limits[i].n_members; j++) {
			const struct kt_member_rt *m = &plan->limits[i].members[j];
			struct kt_member_val *v;
			int k;

			/* a descendant's member: charged up to this limit
			 * through its own limit's bucket, not classified here */
			if (m->entry == KT_ENTRY_CHILD)
				continue;
			k = want_index(want, n, m->cgid);

			if (k < 0) {
				k = n;
				if (n == KT_MAX_MEMBERSHIPS) {
					snprintf(err, errlen, "more than %d member cgroups",
						 KT_MAX_MEMBERSHIPS);
					return -E2BIG;
				}
				want[n] = (struct kt_attach){ .cgroup_id = m->cgid, .path = m->path };
				memset(&vals[n], 0, sizeof(vals[n]));
				n++;
			}
			v = &vals[k];
			if (v->count == KT_LIMITS_PER_CGROUP) {
				snprintf(err, errlen, "cgroup %s is a member of more than %d limits",
					 m->path, KT_LIMITS_PER_CGROUP);
				return -E2BIG;
			}
			v->ents[v->count++] = (struct kt_member_ent){ .limit_id = plan->limits[i].id,
								      .slot = m->slot };
			want[k].hook_mask |= limit_hooks(plan->limits[i].cfg);
			/* raw IP sockets would go around the hooks */
			if (!plan->limits[i].cfg->allow_raw_sockets)
				v->flags |= KT_MEMBER_NO_RAW;
		}
	}
	/* pending directories and outsiders: an entry each, no limits of
	 * their own (an outsider stops the walk up to a pending directory) */
	for (int k = 0; k < plan->n_pending + plan->n_outsiders; k++) {
		bool pend = k < plan->n_pending;
		uint64_t cgid = pend ? plan->pending[k].cgid : plan->outsiders[k - plan->n_pending].cgid;
		const char *path = pend ? plan->pending[k].path : plan->outsiders[k - plan->n_pending].path;

		if (want_index(want, n, cgid) >= 0)
			continue;
		if (n == KT_MAX_MEMBERSHIPS) {
			snprintf(err, errlen, "more than %d member cgroups", KT_MAX_MEMBERSHIPS);
			return -E2BIG;
		}
		want[n] = (struct kt_attach){ .cgroup_id = cgid, .path = path };
		memset(&vals[n], 0, sizeof(vals[n]));
		n++;
	}
	for (int k = 0; k < n; k++) {
		vals[k].own = (uint16_t)vals[k].count;
		if (!vals[k].count)
			vals[k].flags |= KT_MEMBER_NO_OWN;
	}
	*n_out = n;
	ret = inherit_nested(want, vals, n, err, errlen);
	for (int k = 0; !ret && k < plan->n_pending; k++)
		add_pending(plan, &plan->pending[k], &vals[want_index(want, n, plan->pending[k].cgid)]);
	return ret;
}

/* Attach points for the member cgroups. Programs attached to a cgroup also
 * run for its descendants, so a member nested in another member must not get
 * its own attachment: the packet would be decided (and charged) twice. Such
 * members are served by their outermost member ancestor's attachment, which
 * takes on their hooks; the program finds the nested member itself by its
 * own cgroup id. */
static int fold_nested(const struct kt_attach *want, int n, struct kt_attach *out)
{
	int n_out = 0;

	for (int i = 0; i < n; i++) {
		int top = i;

		for (int j = 0; j < n; j++)
			if (path_inside(want[top].path, want[j].path))
				top = j, j = -1; /* restart: find the outermost */
		int k;
		for (k = 0; k < n_out; k++)
			if (out[k].cgroup_id == want[top].cgroup_id)
				break;
		if (k == n_out)
			out[n_out++] = (struct kt_attach){ .cgroup_id = want[top].cgroup_id,
							   .path = want[top].path };
		out[k].hook_mask |= want[i].hook_mask;
	}
	return n_out;
}

/* err = "FILE:LINE: limits[i] (NAME): what": a plan error names the limit
 * as the config wrote it. Returns ret. */
static int limit_err(const struct kt_plan *plan, int i, int ret, char *err, size_t errlen,
		     const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static int limit_err(const struct kt_plan *plan, int i, int ret, char *err, size_t errlen,
		     const char *fmt, ...)
{
	const struct kt_limit_cfg *lc = plan->limits[i].cfg;
	char what[KT_ERR_LEN];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	snprintf(err, errlen, "%s:%d: limits[%d] (%s): %s", plan->file ? plan->file : "config",
		 lc->line, i, lc->name, what);
	return ret;
}

/* A plan-wide check run on the first k limits only, for blame(). */
struct check_ctx {
	const struct kt_plan *plan;
	const struct kt_rule_input *rules;
	struct kt_attach *want;         /* scratch, KT_MAX_MEMBERSHIPS */
	struct kt_member_val *want_vals;
};

static int check_classifier(const struct check_ctx *c, int k, char *err, size_t errlen)
{
	struct kt_classifier cls;
	int ret = kt_classifier_build(c->rules, k, &cls, err, errlen);

	kt_classifier_free(&cls);
	return ret;
}

static int check_members(const struct check_ctx *c, int k, char *err, size_t errlen)
{
	struct kt_plan first = *c->plan;
	int n;

	first.n_limits = k;
	return collect_cgroups(&first, c->want, c->want_vals, &n, err, errlen);
}

/* `check` failed with ret and err on all n limits. The limit to name is the
 * first whose addition makes it fail: limits only add prefixes and
 * memberships, so failure is monotonic in the number taken (in
 * config order) and bisection finds it. The message is that run's. */
static int blame(const struct check_ctx *c,
		 int (*check)(const struct check_ctx *, int, char *, size_t), int n, int ret,
		 char *err, size_t errlen)
{
	char why[KT_ERR_LEN], e[KT_ERR_LEN];
	int lo = 0, hi = n; /* the first lo limits pass, the first hi fail */

	snprintf(why, sizeof(why), "%s", err);
	while (ret != -ENOMEM && hi - lo > 1) {
		int mid = lo + (hi - lo) / 2, r = check(c, mid, e, sizeof(e));

		if (r == -ENOMEM)
			ret = r;
		else if (r)
			hi = mid, snprintf(why, sizeof(why), "%s", e);
		else
			lo = mid;
	}
	if (ret == -ENOMEM) {
		snprintf(err, errlen, "out of memory");
		return ret;
	}
	return limit_err(c->plan, hi - 1, ret, err, errlen, "%s", why);
}

/* With attachRoot, every member must be the root or below it: the programs
 * attached there see no other cgroup, so a member elsewhere would go
 * unenforced. Errors name the limit and the cgroup. */
static int check_root(const struct kt_plan *plan, char *err, size_t errlen)
{
	for (int i = 0; i < plan->n_limits; i++) {
		const struct kt_limit_rt *l = &plan->limits[i];

		if (l->cfg->unit == KT_UNIT_REQUEST)
			continue;
		for (int j = 0; j < l->n_members; j++)
			if (!kt_path_at_or_below(l->members[j].path, plan->root))
				return limit_err(plan, i, -EINVAL, err, errlen,
						 "cgroup %s is not below attachRoot %s (line %d): it would not be limited",
						 l->members[j].path, plan->root, plan->root_line);
	}
	return 0;
}

int kt_plan_layout(const struct kt_plan *plan, struct kt_rule_input *rules,
		   struct kt_classifier *cls, struct kt_attach *want,
		   struct kt_member_val *want_vals, int *n_want, struct kt_attach **attach,
		   int *n_attach, char *err, size_t errlen)
{
	const struct check_ctx c = { plan, rules, want, want_vals };
	int i, slots = 0, coop = 0, ret;

	memset(cls, 0, sizeof(*cls));
	*n_want = *n_attach = 0;
	*attach = NULL;
	if (plan->n_limits > KT_MAX_LIMITS)
		return limit_err(plan, KT_MAX_LIMITS, -E2BIG, err, errlen, "more than %d limits",
				 KT_MAX_LIMITS);
	/* as plan_slots gives them out, before any kernel state counts */
	for (i = 0; i < plan->n_limits; i++) {
		const struct kt_limit_rt *l = &plan->limits[i];

		if (l->cfg->unit == KT_UNIT_REQUEST) {
			if ((coop += l->n_members) > KT_MAX_COOP)
				return limit_err(plan, i, -E2BIG, err, errlen,
						 "more than %d kt_coop entries (limits of unit request and their callers)",
						 KT_MAX_COOP);
			continue;
		}
		slots += l->cfg->scope == KT_SCOPE_NODE ? l->n_members > 0 : l->n_members;
		if (slots > KT_MAX_BUCKETS)
			return limit_err(plan, i, -E2BIG, err, errlen, "more than %d buckets needed",
					 KT_MAX_BUCKETS);
	}
	for (i = 0; i < plan->n_limits; i++) {
		const struct kt_limit_cfg *lc = plan->limits[i].cfg;
		rules[i] = (struct kt_rule_input){
			.limit_id = plan->limits[i].id,
			.unit = lc->unit,
			.proto_mask = lc->match.proto_mask,
			.port_lo = lc->match.port_lo,
			.port_hi = lc->match.port_hi,
			.refuse_errno = (uint16_t)lc->refuse_errno,
			.depth = (uint8_t)lc->depth,
			.cidrs = lc->match.cidrs,
			.n_cidrs = lc->match.n_cidrs,
		};
		if (lc->unit == KT_UNIT_REQUEST) {
			/* a rule that matches nothing: no prefix, no port */
			rules[i].n_cidrs = 0;
			rules[i].port_lo = 1;
			rules[i].port_hi = 0;
		}
	}
	ret = kt_classifier_build(rules, plan->n_limits, cls, err, errlen);
	if (ret)
		return blame(&c, check_classifier, plan->n_limits, ret, err, errlen);
	if (plan->root && (ret = check_root(plan, err, errlen)))
		return ret;
	ret = collect_cgroups(plan, want, want_vals, n_want, err, errlen);
	if (ret)
		return blame(&c, check_members, plan->n_limits, ret, err, errlen);
	*attach = calloc(*n_want + 1, sizeof(**attach));
	if (!*attach) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	if (!plan->root) {
		*n_attach = fold_nested(want, *n_want, *attach);
		return 0;
	}
	/* attachRoot: each hook any limit needs, once, at the root, whether
	 * or not the limit has members yet: a member that joins later is a
	 * kt_members update, no attach */
	(*attach)[0] = (struct kt_attach){ .cgroup_id = plan->root_cgid, .path = plan->root };
	for (i = 0; i < plan->n_limits; i++)
		(*attach)[0].hook_mask |= limit_hooks(plan->limits[i].cfg);
	*n_attach = (*attach)[0].hook_mask != 0;
	return 0;
}

int kt_plan_check(const struct kt_plan *plan, char *err, size_t errlen)
{
	struct kt_rule_input *rules = calloc(plan->n_limits + 1, sizeof(*rules));
	struct kt_attach *want = calloc(KT_MAX_MEMBERSHIPS, sizeof(*want)), *attach = NULL;
	struct kt_member_val *vals = calloc(KT_MAX_MEMBERSHIPS, sizeof(*vals));
	struct kt_limit_rt *limits = calloc(plan->n_limits + 1, sizeof(*limits));
	struct kt_classifier cls = { 0 };
	struct kt_plan numbered = *plan;
	int n_want, n_attach, ret = -ENOMEM;

	if (rules && want && vals && limits) {
		/* the kernel ids are given out at apply: any distinct ones check
		 * the same (memberships are told apart by limit id) */
		memcpy(limits, plan->limits, plan->n_limits * sizeof(*limits));
		for (int i = 0; i < plan->n_limits; i++)
			limits[i].id = (uint32_t)i;
		numbered.limits = limits;
		ret = kt_plan_layout(&numbered, rules, &cls, want, vals, &n_want, &attach, &n_attach,
				  err, errlen);
	} else {
		snprintf(err, errlen, "out of memory");
	}
	free(limits);
	kt_classifier_free(&cls);
	free(attach);
	free(vals);
	free(want);
	free(rules);
	return ret;
}
