/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Reconciles the kernel maps and links with a configuration: limit ids,
 * bucket slots, memberships, classifier and attachments. Existing buckets
 * (adopted after a restart, or kept across a reload) keep their state; only
 * their rate and burst are rewritten. */
#ifndef KT_APPLY_H
#define KT_APPLY_H

#include <stdbool.h>
#include <stdint.h>
#include "bpf_loader.h"
#include "config.h"
#include "pods.h"
#include "policy.h"

struct kt_member_rt {
	char *path;        /* canonical cgroup directory */
	char id[96];       /* stable member id in the store: "<node>:<cgroup id>" */
	uint64_t cgid;
	uint32_t slot;     /* bucket this member's traffic is charged to */
	int entry;         /* the limit's cgroups[] entry (path or pattern) that found it,
			    * or KT_ENTRY_PODS */
	char *pod;         /* found by pods: "namespace/name"; else NULL */
};

#define KT_ENTRY_PODS (-1)
/* Member cgroups (pods) of one limit on the node; past it a cgroup found
 * is left out with a warning. */
#define KT_MAX_MEMBERS_PER_LIMIT 1024
/* A cooperative limit's (unit request) one member: the node itself, no
 * cgroup (path "", cgid 0), id "<node>/request"; its slot is
 * KT_COOP_SLOT0 + its kt_coop entry. */
#define KT_ENTRY_COOP (-2)

struct kt_limit_rt {
	const struct kt_limit_cfg *cfg;
	uint32_t id;
	struct kt_member_rt *members;
	int n_members;
	const char **member_ids; /* members[j].id, as the pool wants them */
	/* bucket rate and burst last written (tokens/s, tokens) */
	double bucket_rate;
	double bucket_burst;
	/* A pod-scope limit with two or more members on the node: its node
	 * bucket, which every member bucket is chained to (KT_BUCKET_CHAINED),
	 * so members joining with tokens of their own never take the node past
	 * its share and burst. Set by kt_plan_apply. */
	bool has_pool;
	uint32_t pool_slot;
	/* Pending directories naming this limit (pending.h), and its join
	 * bucket: pod scope, what a cgroup not classified yet is charged to
	 * (one member's share, chained to the node bucket). Node scope
	 * charges such cgroups to its one bucket. */
	int n_pending_dirs;
	bool has_join;
	uint32_t join_slot;
};

struct kt_plan {
	struct kt_limit_rt *limits;
	int n_limits;
	const char *file; /* the config's file (owned by the config), for errors */
	/* The attach point, resolved when the members were: the canonical
	 * cgroup directory where each hook's program is attached once (NULL:
	 * every outermost member cgroup is attached), its id and config line.
	 * root_mode is the config's attachRoot mode; with KT_ATTACH_AUTO the
	 * root is the deepest common ancestor of what the limits select and
	 * of every member found (so none is ever outside it), or NULL when
	 * that is the cgroup v2 root: root_note then says why (else ""). */
	char *root;
	uint64_t root_cgid;
	int root_line;
	int root_mode; /* enum kt_attach_mode */
	char root_note[256];
	/* With a root: where a pattern's members appear and their children
	 * that cannot match (pending.h) */
	struct kt_pending_dir *pending;
	int n_pending;
	struct kt_outsider *outsiders;
	int n_outsiders;
};

/* Finds the member cgroups of cfg's limits (paths absolute, or relative to
 * the cgroup v2 mount; patterns expanded; the pods of `pods` a limit's
 * selector picks, at their kubelet cgroup directories) and reads their ids.
 * A plain path that does not exist yet is a warning, not an error; so is a
 * selected pod whose directory is not there yet. pods NULL: none known.
 * Touches no BPF state. Errors name file, line and field. */
int kt_plan_resolve(const struct kt_config *cfg, const char *cg_mount,
		    const struct kt_pod_set *pods, struct kt_plan *plan, char *err, size_t errlen);
/* The members of cur's limits (cur resolved from cfg) found now: cgroups
 * that appeared (a pattern's new match, a listed path created), went, or
 * were recreated under the same path (a new id). *changed is false, and
 * *next left empty, when the members are the same; else *next is the plan
 * to apply (kt_plan_apply finds the ids and keeps existing buckets). */
int kt_plan_refresh(const struct kt_plan *cur, const struct kt_config *cfg, const char *cg_mount,
		    const struct kt_pod_set *pods, struct kt_plan *next, bool *changed, char *err,
		    size_t errlen);
/* The directories (absolute) where the pods of `pods` that some limit of
 * cfg selects will have their cgroups: what to watch for while they are
 * missing. *out malloc'd (free each and it); returns the count or -ENOMEM. */
int kt_plan_pod_dirs(const struct kt_config *cfg, const char *cg_mount,
		     const struct kt_pod_set *pods, char ***out);
void kt_plan_free(struct kt_plan *plan);

/* The deepest common ancestor of what cfg's cgroup limits select: their
 * plain paths, the static directory part of their patterns (up to the first
 * component with a wildcard) and, for pods: limits, the kubelet's
 * kubepods.slice and kubepods directories under kubernetes.cgroupRoot (the
 * mount by default) that exist, or cgroupRoot itself when neither does. Lexical (paths need not exist),
 * then up to the nearest directory that exists. out: an absolute path; 0,
 * -ENOENT when no limit selects a cgroup, -ENAMETOOLONG. No BPF. */
int kt_plan_common_root(const struct kt_config *cfg, const char *cg_mount, char *out,
			size_t outlen);

/* Where plan's programs are attached, for status and the log, one line:
 * "/path (auto)", "/path (attachRoot)", "members", "members (auto: WHY)" or,
 * with no cgroup limit, "none". */
void kt_plan_attach_desc(const struct kt_plan *plan, char *buf, size_t len);

/* Every check of kt_plan_apply's plan that needs no kernel state: limit and
 * bucket counts of the plan alone, the classifier (rules per prefix,
 * prefixes), limits per cgroup and member cgroups. kt_plan_apply runs the
 * same code first, so a plan this accepts fails to apply only for the
 * kernel's reasons. Errors are one line naming file, line and limit:
 * "FILE:LINE: limits[I] (NAME): what". No BPF, no root. */
int kt_plan_check(const struct kt_plan *plan, char *err, size_t errlen);

/* Writes the plan into the maps and links. pol[i]: what each bucket of
 * plan->limits[i] may admit; a bucket created here gets it from birth, kept
 * buckets get the new rate (their tokens carry over) and lease. Fills ids
 * and slots. All or nothing: on error the maps, buckets and links are as
 * they were (the plan's ids and slots too). */
int kt_plan_apply(struct kt_bpf *b, struct kt_plan *plan, const struct kt_bucket_policy *pol,
		  char *err, size_t errlen);

/* Distinct bucket slots of a limit (pod scope: one per member; node: one). */
int kt_limit_slots(const struct kt_limit_rt *l, uint32_t *slots, int max);

/* A strict bucket closed: no permit (valid_until in the past, no
 * fallback); interval_fp the hold, or 0 with store_down (reason closed). */
void kt_bucket_strict_close(struct kt_bucket *bk, uint64_t hold_ns, bool store_down);

/* One atomic store of the interval: the bucket's tokens are kept (the queued
 * debt is rescaled to the new rate). */
void kt_bucket_set_rate(struct kt_bpf *b, uint32_t slot, double rate, double burst);
/* The lease part of `pol` (valid_until, fallback_rate, fallback_until). */
void kt_bucket_set_lease(struct kt_bpf *b, uint32_t slot, const struct kt_bucket_policy *pol);

/* Test only: 0 = off; N > 0 = the Nth kernel write of each kt_plan_apply
 * commit (a map update, a bucket store, the link sync) fails with -EIO as if
 * the kernel refused it, so tests can check the rollback. */
extern int kt_apply_fail_step;

#endif
