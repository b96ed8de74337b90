/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The pods on this node as the Kubernetes API last described them, and the
 * two pure questions the daemon asks of each: does a limit's selector pick
 * it (kt_pod_selected), and where is its cgroup (kt_pod_cgroup_paths).
 * No I/O here: the watcher (kubewatch.h) fills a kt_pod_set, apply.c reads
 * one. */
#ifndef KT_PODS_H
#define KT_PODS_H

#include <stdbool.h>
#include <limits.h>
#include <stddef.h>
#include "base/config.h"

#define KT_POD_MAX_LABELS 64

struct kt_pod {
	char uid[40];             /* 8-4-4-4-12 hex */
	char ns[64];
	char name[254];
	char qos[16];             /* Guaranteed, Burstable, BestEffort; "" if not yet known */
	char *label_keys[KT_POD_MAX_LABELS];
	char *label_values[KT_POD_MAX_LABELS];
	int n_labels;
};

struct kt_pod_set {
	struct kt_pod *pods;
	int n;
	int cap;
	/* The API has listed this node's pods: a pod cgroup the set does not
	 * know is one the API has not told of yet, not one it never will. */
	bool synced;
};

/* Adds or replaces (same uid) a copy of p; -ENOMEM. */
int kt_pod_set_put(struct kt_pod_set *s, const struct kt_pod *p);
/* Removes the pod with that uid; true if it was there. */
bool kt_pod_set_remove(struct kt_pod_set *s, const char *uid);
const struct kt_pod *kt_pod_set_find(const struct kt_pod_set *s, const char *uid);
/* dst = a deep copy of src (dst's old contents freed); -ENOMEM leaves dst
 * empty. */
int kt_pod_set_copy(struct kt_pod_set *dst, const struct kt_pod_set *src);
void kt_pod_set_clear(struct kt_pod_set *s);
/* The labels of p are freed; p itself is the caller's. */
void kt_pod_free_labels(struct kt_pod *p);
/* Sets a label (copies both strings); -ENOMEM, -E2BIG past KT_POD_MAX_LABELS. */
int kt_pod_add_label(struct kt_pod *p, const char *key, const char *value);
const char *kt_pod_label(const struct kt_pod *p, const char *key); /* NULL: absent */

/* True when the pod is in the selector's namespace (if one is set) and every
 * requirement holds, as a Kubernetes label selector: In (the label is present
 * with one of the values), NotIn (absent, or present with none of them),
 * Exists, DoesNotExist. No requirement: every pod of the namespace. */
bool kt_pod_selected(const struct kt_pod_selector *sel, const struct kt_pod *p);

/* The directories where the kubelet puts the pod's cgroup, relative to the
 * cgroup v2 mount, below `root` ("" or NULL: the mount itself), for both
 * cgroup drivers:
 *   systemd:  kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid, '-' -> '_'>.slice
 *             (Guaranteed: kubepods.slice/kubepods-pod<uid_>.slice)
 *   cgroupfs: kubepods/<qos>/pod<uid>   (Guaranteed: kubepods/pod<uid>)
 * qos lower-cased (burstable, besteffort). An unknown QoS class (the API has
 * not set status.qosClass yet) gives the candidates of all three. Writes at
 * most max paths; returns how many (-ENAMETOOLONG past PATH_MAX), or -EINVAL for a uid
 * that is not a Kubernetes UID (the cgroup name is built from it). */
int kt_pod_cgroup_paths(const char *root, const struct kt_pod *p, char (*paths)[PATH_MAX], int max);

/* The directories where the kubelet makes pod cgroups, relative to the
 * cgroup v2 mount, below `root` as for kt_pod_cgroup_paths: the QoS tiers
 * of both drivers (kubepods.slice, its burstable and besteffort slices;
 * kubepods, kubepods/burstable, kubepods/besteffort). Every pod cgroup is a
 * child of one of them. Writes KT_POD_TIER_DIRS paths; -ENAMETOOLONG. */
#define KT_POD_TIER_DIRS 6
int kt_pod_tier_dirs(const char *root, char (*paths)[PATH_MAX]);

/* True for 8-4-4-4-12 lower-case hex. */
bool kt_pod_uid_ok(const char *uid);

#endif
