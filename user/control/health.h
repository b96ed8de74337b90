/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Readiness and liveness of kthrottled from a narrow snapshot of what the
 * daemon knows (no I/O), for the control command `health`, the metrics
 * endpoint's /healthz and /livez, and the kthrottle_ready and
 * kthrottle_component_up gauges.
 *
 * Ready when every component in use is:
 *   kernel      the BPF programs are loaded, every member cgroup of the plan
 *               has a pinned link (on itself, or on a member ancestor that
 *               serves it) and the last member update was applied.
 *   kubernetes  (some limit selects pods:) the watcher has listed pods since
 *               this daemon started, the API does not refuse it (its last
 *               answer is no 401 or 403), and it has not been unreachable
 *               for more than KT_HEALTH_KUBE_STALE_S.
 *   store       (some limit uses redis) reported, never a reason for not
 *               ready: without it the kernel enforces onStoreFailure, and a
 *               restart would not bring the store back.
 * A kernel feature that is off (kernel/features.h) is a warning line, and
 * so is a limit it leaves unenforced: a restart would get the same answer.
 * Live when a tick ran within KT_HEALTH_LIVE_TICKS ticks, and at least
 * KT_HEALTH_LIVE_MIN_NS (the loop answered the question). Store and API
 * outages never make it not live. */
#ifndef KT_HEALTH_H
#define KT_HEALTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "kernel/features.h"
#include "kube/kubewatch.h"

#define KT_HEALTH_KUBE_STALE_S 60
#define KT_HEALTH_LIVE_TICKS 10
#define KT_HEALTH_LIVE_MIN_NS 3000000000ull

struct kt_health_in {
	uint64_t now_ns;             /* kt_clock_ns */
	/* kernel */
	bool bpf_loaded;
	int unlinked;                /* member cgroups with no link serving them */
	const char *unlinked_path;   /* one of them */
	const char *apply_err;       /* the last member update's error; "" or NULL: none */
	/* what the kernel refused (NULL: nothing known): warnings, never a
	 * reason for not ready, since a restart on the same kernel gets the
	 * same answer; limits it leaves unenforced are not counted unlinked */
	const struct kt_features *feat;
	unsigned feat_used;          /* features the plan's limits need or use (bits) */
	int unenforced;              /* limits the kernel cannot enforce */
	const char *unenforced_limit; /* one of them */
	/* liveness */
	uint64_t started_ns;
	uint64_t last_tick_ns;       /* 0: no tick yet */
	uint64_t tick_ns;
	/* kubernetes, when uses_kube */
	bool uses_kube;
	struct kt_kube_status kube;
	/* store, when uses_store */
	bool uses_store;
	int stores_down;             /* limits whose redis store is down */
	const char *store_why;       /* about one of them */
};

struct kt_health {
	bool ready, live;
	bool kernel_ok, kube_ok, store_ok;
	char kernel_why[256], kube_why[300], store_why[256], live_why[128];
};

void kt_health_eval(const struct kt_health_in *in, struct kt_health *h);
/* The `health` reply: "ready" or "not ready", then one line per component
 * in use ("kernel ok", "kubernetes fail WHY", "store down WHY"), then a
 * "warning ..." line per kernel feature off and one for unenforced limits. The
 * `health live` reply: "live" or "not live WHY". Truncated to len. */
void kt_health_format(const struct kt_health_in *in, const struct kt_health *h, bool live,
		      char *buf, size_t len);

#endif
