/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* A pod volume as the kubelet makes it, for tests that read pod files the
 * way kthrottled does in a pod (the service-account directory, a ConfigMap
 * volume, a Secret volume).
 *
 * The kubelet writes into a directory of its own (`host`) with its atomic
 * writer:
 *
 *   host/..2026_11_26_13_20_01.123456789/   mode 0755, the files (0644)
 *   host/..data -> ..2026_11_26_13_20_01.123456789
 *   host/<name> -> ..data/<name>            one per file
 *
 * and publishes a new set by writing a new timestamped directory, swapping
 * ..data with a rename of a fresh link over it, adding and removing the
 * per-name links, and removing the old directory. The volume's own
 * directory is mode 0777 for a ConfigMap (an emptyDir on disk) and 1777 for
 * a Secret or the service account (a tmpfs). The container sees it through
 * a read-only bind mount (`pod`): that is the path the daemon is given.
 *
 * The bind mount is made in a private mount namespace of the test process
 * (its children, the daemon among them, share it). Needs root. */
#ifndef KTEST_KVOL_H
#define KTEST_KVOL_H

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

enum ktest_kvol_kind {
	KTEST_KVOL_CONFIGMAP, /* on disk, 0777 */
	KTEST_KVOL_SECRET,    /* tmpfs, 1777: Secret and projected volumes */
};

struct ktest_kvol {
	char host[PATH_MAX]; /* where the "kubelet" writes */
	char pod[PATH_MAX];  /* the read-only view the daemon reads */
	bool mounted;
	unsigned gen;        /* timestamped directories made so far */
};

/* A file in a volume: name (no slash) and its whole content. */
struct ktest_kvol_file {
	const char *name;
	const char *content;
};

/* Makes an empty volume under `parent` (a temp dir): parent/<name>.host
 * and its read-only view parent/<name>. 0, or -1 (printed why). */
int ktest_kvol_create(struct ktest_kvol *v, const char *parent, const char *name,
		      enum ktest_kvol_kind kind);
/* Publishes exactly these n files as the kubelet does (atomic ..data swap);
 * names not given any more disappear. 0 or -1. */
int ktest_kvol_publish(struct ktest_kvol *v, const struct ktest_kvol_file *files, int n);
/* One file's content changed, the others kept: a publish of the whole set. */
int ktest_kvol_update(struct ktest_kvol *v, const char *name, const char *content);
/* The path the daemon is given for `name`: pod/<name> (a static buffer per
 * call site is not needed: written into out). */
const char *ktest_kvol_path(const struct ktest_kvol *v, const char *name, char *out, size_t len);
/* Unmounts the view and removes both trees. Safe on a zeroed struct. */
void ktest_kvol_remove(struct ktest_kvol *v);

#endif
