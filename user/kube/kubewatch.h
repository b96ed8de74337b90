/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Follows the pods of one node in the Kubernetes API that some limit's
 * pods: selector picks: list (in pages of 500; a pod of another node, from
 * a server ignoring the field selector, or one no selector picks, is dropped
 * before its labels are copied; one answer is read up to 16 MiB), then watch from
 * the list's resourceVersion (bookmarks kept, 410 Gone answered by a relist,
 * dropped streams resumed with jittered back-off, or after the server's
 * Retry-After on a 429/503, capped at 8 s), over HTTPS with a bearer token
 * (libcurl), events decoded with json-c. The token and the CA are read at
 * every request under the volume rule (volfile.h), so the kubelet's
 * rotations of either are followed.
 *
 * The HTTP work runs on a thread of its own so that a slow or unreachable
 * API server never holds the daemon's loop. The thread keeps its working
 * set and publishes a copy after each change; the loop takes it with
 * kt_kube_snapshot when kt_kube_fd becomes readable. With the API
 * unreachable the last set is kept (pods do not vanish because the API did)
 * and the status says so. */
#ifndef KT_KUBEWATCH_H
#define KT_KUBEWATCH_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include "base/config.h"
#include "kube/pods.h"

#define KT_KUBE_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

struct kt_kube_opts {
	char api_server[520];     /* https://HOST[:PORT], no trailing '/' */
	char token_file[PATH_MAX];
	char ca_file[PATH_MAX];
	char node_name[254];
	/* The pods: selectors of the config's limits (deep copies, owned,
	 * duplicates once): a pod of this node that none selects is dropped as
	 * it is decoded, so the watcher's memory follows the selected pods. A
	 * change of them changes the options, and a restarted watcher lists
	 * again. None (options made by hand): every pod is kept. */
	struct kt_pod_selector *sels;
	int n_sels;
};

/* The options from the kubernetes: block, each missing one from the pod's
 * environment: KUBERNETES_SERVICE_HOST/_PORT, the service account's token
 * and ca.crt, NODE_NAME. -EINVAL with one line naming what is missing. */
int kt_kube_resolve_opts(const struct kt_kube_cfg *k, struct kt_kube_opts *o, char *err,
			 size_t errlen);

/* o->sels = copies of the pods: selectors of cfg's limits (of the parsed
 * config an expanded one came from: a groupBy template with no group yet
 * selects pods too). -ENOMEM leaves none. */
int kt_kube_opts_selectors(struct kt_kube_opts *o, const struct kt_config *cfg);
/* Same server, files, node and selectors. */
bool kt_kube_opts_equal(const struct kt_kube_opts *a, const struct kt_kube_opts *b);
/* dst = a deep copy of src; -ENOMEM leaves dst without selectors. */
int kt_kube_opts_copy(struct kt_kube_opts *dst, const struct kt_kube_opts *src);
/* Frees the selectors (o stays usable, with none). */
void kt_kube_opts_free(struct kt_kube_opts *o);

enum kt_kube_state {
	KT_KUBE_LISTING = 0,      /* no answer yet since the start */
	KT_KUBE_WATCHING,         /* listed; the watch stream is open or being reopened */
	KT_KUBE_UNREACHABLE,      /* the last request failed: the last set is kept */
};

struct kt_kube_status {
	enum kt_kube_state state;
	bool synced;              /* a list has succeeded: the set is the API's */
	uint64_t since_ns;        /* kt_clock_ns when state was entered */
	char error[256];          /* the last failure, one line ("" if none since the last success) */
	long http_status;         /* its HTTP status (401/403: refused, not an outage); 0 if none
				   * or not an HTTP answer (transport, token or CA file) */
	char resource_version[64];
	unsigned long lists, watches, relists, skipped; /* skipped: objects refused as malformed */
};

const char *kt_kube_state_name(enum kt_kube_state s); /* "listing", "watching", "unreachable" */

struct kt_kube;

/* Starts the watcher thread. Returns 0 or -errno (err says why). */
int kt_kube_start(const struct kt_kube_opts *o, struct kt_kube **out, char *err, size_t errlen);
/* An eventfd, readable when the pod set or the state changed: call
 * kt_kube_snapshot (which also clears it). */
int kt_kube_fd(const struct kt_kube *k);
/* dst = the published set; returns true when it differs from the previous
 * snapshot's (a new version was published since). -ENOMEM keeps dst. */
int kt_kube_snapshot(struct kt_kube *k, struct kt_pod_set *dst, bool *changed);
void kt_kube_status(struct kt_kube *k, struct kt_kube_status *st);
const struct kt_kube_opts *kt_kube_options(const struct kt_kube *k);
/* Stops the thread (an open request is aborted at once) and frees k. */
void kt_kube_stop(struct kt_kube *k);

/* Exposed for tests: whether the watcher with options o keeps one Pod
 * object (json text) of its node: 1 kept, 0 dropped as unselected, -EINVAL
 * not JSON. */
int kt_kube_pod_kept(const struct kt_kube_opts *o, const char *json);

/* Exposed for tests and the bench: the items of one PodList page (json
 * text) into set as the watcher keeps them (kt_pod_set_dedup_others after
 * the last page); *skipped counts the malformed. 0, -EINVAL (not a
 * PodList), -ENOMEM. */
int kt_kube_decode_list(const struct kt_kube_opts *o, const char *json, struct kt_pod_set *set,
			unsigned long *skipped);

/* Exposed for tests: decode one Pod object (json text) the way the watcher
 * does; 0, or -EINVAL with why (a missing or malformed field). */
int kt_kube_parse_pod(const char *json, struct kt_pod *p, char *node, size_t nodelen, char *why,
		      size_t whylen);

#endif
