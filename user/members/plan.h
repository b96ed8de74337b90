/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The plan: a configuration's limits with the member cgroups found for
 * them on this node (resolve.h), and what the kernel layer's apply
 * (user/kernel/apply.h) fills in when it writes them: limit ids, bucket
 * slots, node and join buckets, the rate last written. Types only; nothing
 * here touches BPF state. */
#ifndef KT_PLAN_H
#define KT_PLAN_H

#include <stdbool.h>
#include <stdint.h>
#include "base/config.h"

struct kt_pending_dir; /* pending.h */
struct kt_outsider;

struct kt_member_rt {
	char *path;        /* canonical cgroup directory (KT_ENTRY_COOP: the kt_coop name) */
	char id[112];      /* stable member id in the store: "<node>:<cgroup id>", "<node>/request[/<caller>]" */
	uint64_t cgid;
	uint32_t slot;     /* bucket this member's traffic is charged to */
	int entry;         /* the limit's cgroups[] entry (path or pattern) that found it,
			    * or KT_ENTRY_PODS */
	char *pod;         /* found by pods: "namespace/name"; else NULL */
	double weight;     /* its weight in a share: demand pool (weightBy), else 1 */
	uint8_t weight_src; /* enum kt_weight_src (weights.h): where the weight came from */
	uint8_t klass;     /* its priority class (classBy), an index into the limit's classes */
	int16_t via;       /* KT_ENTRY_CHILD: the limit's child (an index into the plan's
			    * limits) it came through, whose `weight` it shares; else -1 */
	uint8_t class_src; /* enum kt_weight_src: where the class came from */
};

#define KT_ENTRY_PODS (-1)
/* Member cgroups (pods) of one limit on the node; past it a cgroup found
 * is left out with a warning. */
#define KT_MAX_MEMBERS_PER_LIMIT 1024
/* A cooperative limit's (unit request) member: the node itself, no
 * cgroup (cgid 0), id "<node>/request", path the limit's name; with
 * weightBy/classBy caller one more per caller, "<node>/request/CALLER",
 * path "LIMIT/CALLER". The path is its kt_coop entry's name, its slot
 * KT_COOP_SLOT0 + that entry. */
#define KT_ENTRY_COOP (-2)
/* A member of a descendant limit (parent:), counted in this limit's pool
 * and given a bucket here, which the descendant's bucket for the same
 * cgroup is charged up to (kt_up); not in the cgroup's kt_members list. */
#define KT_ENTRY_CHILD (-3)

struct kt_limit_rt {
	const struct kt_limit_cfg *cfg;
	uint32_t id;
	struct kt_member_rt *members;
	int n_members;
	const char **member_ids; /* members[j].id, as the pool wants them */
	double *member_weights;  /* members[j].weight, with weightBy or classBy; else NULL (all 1) */
	int *member_classes;     /* members[j].klass, with classBy; else NULL (all 0) */
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

#endif
