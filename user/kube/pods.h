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
#define KT_POD_MAX_ANNOTATIONS 16 /* of KT_ANNOTATION_PREFIX, the only ones kept */

struct kt_pod {
	char uid[40];             /* 8-4-4-4-12 hex */
	char ns[64];
	char name[254];
	char qos[16];             /* Guaranteed, Burstable, BestEffort; "" if not yet known */
	char *label_keys[KT_POD_MAX_LABELS];
	char *label_values[KT_POD_MAX_LABELS];
	int n_labels;
	/* its annotations under KT_ANNOTATION_PREFIX (weightBy/classBy) */
	char *annot_keys[KT_POD_MAX_ANNOTATIONS];
	char *annot_values[KT_POD_MAX_ANNOTATIONS];
	int n_annots;
};

/* A pod of this node that no limit's selector picks, kept by what finds
 * its cgroup alone (56 bytes, not a kt_pod's 1.4 kB and labels): the
 * daemon then knows its cgroup is a pod's no selector picks (free), not one
 * the API has not told of yet (charged as unclassified, pending.c). */
struct kt_pod_ref {
	char uid[40];
	char qos[16];
};

struct kt_pod_set {
	struct kt_pod *pods;      /* the pods some selector picks */
	int n;
	int cap;
	struct kt_pod_ref *others; /* the node's other pods (the watcher's selectors) */
	int n_others;
	int cap_others;
	/* The API has listed this node's pods: a pod cgroup the set does not
	 * know is one the API has not told of yet, not one it never will. */
	bool synced;
};

/* Adds or replaces (same uid) a copy of p; -ENOMEM. */
int kt_pod_set_put(struct kt_pod_set *s, const struct kt_pod *p);
/* Removes the pod with that uid, selected or not; true if it was there. */
bool kt_pod_set_remove(struct kt_pod_set *s, const char *uid);
/* Adds or replaces (same uid) an unselected pod, and removes a selected
 * one of that uid: 1 when the set changed, 0 when it had it so, -ENOMEM. */
int kt_pod_set_put_other(struct kt_pod_set *s, const char *uid, const char *qos);
/* Appends an unselected pod without looking for its uid (a list's, built
 * fresh), -ENOMEM; kt_pod_set_dedup_others after the list. */
int kt_pod_set_append_other(struct kt_pod_set *s, const char *uid, const char *qos);
/* Drops the unselected pods whose uid comes twice (a pod a list served
 * twice, or also selected), keeping one. */
void kt_pod_set_dedup_others(struct kt_pod_set *s);
/* Removes the unselected pod of that uid; true if it was there. */
bool kt_pod_set_remove_other(struct kt_pod_set *s, const char *uid);
const struct kt_pod *kt_pod_set_find(const struct kt_pod_set *s, const char *uid);
/* dst = a deep copy of src (dst's old contents freed); -ENOMEM leaves dst
 * empty. */
int kt_pod_set_copy(struct kt_pod_set *dst, const struct kt_pod_set *src);
void kt_pod_set_clear(struct kt_pod_set *s);
/* The labels and annotations of p are freed; p itself is the caller's. */
void kt_pod_free_labels(struct kt_pod *p);
/* Sets a label (copies both strings); -ENOMEM, -E2BIG past KT_POD_MAX_LABELS. */
int kt_pod_add_label(struct kt_pod *p, const char *key, const char *value);
const char *kt_pod_label(const struct kt_pod *p, const char *key); /* NULL: absent */
/* The same for an annotation (-E2BIG past KT_POD_MAX_ANNOTATIONS). */
int kt_pod_add_annotation(struct kt_pod *p, const char *key, const char *value);
const char *kt_pod_annotation(const struct kt_pod *p, const char *key);

/* True when the pod is in the selector's namespace (if one is set) and every
 * requirement holds, as a Kubernetes label selector: In (the label is present
 * with one of the values), NotIn (absent, or present with none of them),
 * Exists, DoesNotExist. No requirement: every pod of the namespace. */
bool kt_pod_selected(const struct kt_pod_selector *sel, const struct kt_pod *p);
/* The same question of a pod not decoded yet (the watcher asks it before
 * copying anything): its namespace, and its labels through label(ctx, key),
 * NULL for an absent one. */
bool kt_pod_selected_by(const struct kt_pod_selector *sel, const char *ns,
			const char *(*label)(void *ctx, const char *key), void *ctx);
/* Same namespace and requirements, in the same order. */
bool kt_pod_selector_equal(const struct kt_pod_selector *a, const struct kt_pod_selector *b);
/* dst = a deep copy of src; -ENOMEM leaves dst empty. */
int kt_pod_selector_copy(struct kt_pod_selector *dst, const struct kt_pod_selector *src);
/* A copy is freed with kt_pod_selector_free (base/config.h). */

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
/* The same for an unselected pod. */
int kt_pod_ref_cgroup_paths(const char *root, const struct kt_pod_ref *r, char (*paths)[PATH_MAX],
			    int max);

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
