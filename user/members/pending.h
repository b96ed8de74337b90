/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Cgroups the daemon has not classified yet.
 *
 * With an attach root the programs already run for a pod the moment its
 * cgroup exists, but it is a member only once the daemon has found it. In
 * between it would send unlimited. So the directories where a pattern's
 * members appear ("pending directories": the pattern's wildcard-free prefix
 * and every directory matching a proper prefix of its components) get a
 * kt_members entry whose pending entries (kt_member_pending) charge any
 * cgroup below them without an entry of its own to the limit's join bucket,
 * which is chained to the limit's node bucket: a new pod is limited from its
 * first packet, within the node's share. The children of a pending directory
 * that cannot match ("outsiders") get an entry of their own, so they are
 * never charged; a new one is charged until the daemon, woken by the cgroup
 * watcher on that directory, has seen it.
 *
 * A pods: selector's members appear in the kubelet's tier directories
 * (kubepods.slice and its QoS slices, or kubepods and its QoS directories),
 * and a pod cgroup's name says nothing of its labels. So, once the API has
 * listed the node's pods, those directories are pending directories of
 * every pods: limit, and the outsiders there are the cgroups of the pods
 * the API has told of (a selected one's member entry comes first): a pod
 * is charged from its first packet whichever comes first, its mkdir or its
 * API event, and an unselected one is free from the rescan that follows. */
#ifndef KT_PENDING_H
#define KT_PENDING_H

#include <stdbool.h>
#include <stdint.h>

#include "kthrottle.h"

struct kt_config;
struct kt_plan;

/* A pending directory and the limits (plan indices) whose patterns name it. */
struct kt_pending_dir {
	char *path;
	uint64_t cgid;
	int n_limits;
	int limits[KT_LIMITS_PER_CGROUP];
	bool no_raw; /* one of them does not allow raw IP sockets */
};

/* A child of a pending directory that no pattern there can match. */
struct kt_outsider {
	char *path;
	uint64_t cgid;
};

/* At most this many pending directories and outsiders in a plan: the rest
 * of kt_members is for members. */
#define KT_MAX_PENDING_ENTRIES (KT_MAX_MEMBERSHIPS / 4)

/* Fills plan->pending and plan->outsiders (and each limit's n_pending_dirs)
 * for the pattern entries of cfg's limits that may charge a join bucket:
 * cgroup limits that are not strict, below plan->root (none without one),
 * and for their pods: selectors when `pods` is synced (the kubelet's tier
 * directories under kubernetes.cgroupRoot; not for groupBy limits, as an
 * unknown pod's group is unknown).
 * A groupBy parent instance names only its own group's directories (where
 * its members appear); a new group's first cgroup is found by the cgroup
 * watcher. cg_mount resolves relative patterns; globs (globcache.h) holds
 * the matches found once per pass. Directories that vanish meanwhile are
 * skipped. Returns 0 or -ENOMEM. */
struct kt_glob_cache;
struct kt_pod_set;
int kt_pending_scan(const struct kt_config *cfg, const char *cg_mount,
		    struct kt_glob_cache *globs, const struct kt_pod_set *pods,
		    struct kt_plan *plan);

/* Whether a and b have the same pending directories (and limits) and
 * outsiders: if not, a refresh must apply. */
bool kt_pending_same(const struct kt_plan *a, const struct kt_plan *b);

void kt_pending_free(struct kt_plan *plan);

#endif
