/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* kthrottled: one event loop (epoll over a signalfd, a timerfd, the control
 * socket and the fds of its parts, each a struct kt_watch with its own
 * callback, see evloop.h) that owns the kernel state, runs the controller
 * tick and answers kthrottlectl. Here: start, run, reload, stop and the
 * loop's callbacks; the control socket's server is ctlserver.h, status and
 * metrics report.h, members found anew and the pods watcher refresh.h. */
#ifndef KT_DAEMON_H
#define KT_DAEMON_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include "kernel/apply.h"
#include "kernel/bpf_loader.h"
#include "kernel/verify.h"
#include "control/cfgwatch.h"
#include "base/config.h"
#include "control/controller.h"
#include "control/ctlserver.h"
#include "control/inflight_audit_run.h"
#include "base/evloop.h"
#include "kube/kubewatch.h"
#include "pool/pool.h"
#include "control/ramp.h"
#include "control/strict.h"
#include "tags/tags.h"

#define KT_DEFAULT_SOCKET "/run/kthrottle/kthrottled.sock"

/* File descriptors a start needs, measured (docs/operations.md,
 * "Resources"): 140 of the daemon's own once started, whatever the number
 * of cgroup limits, members and pods (113 of them the five objects' maps:
 * links are pinned and closed), the smallest RLIMIT_NOFILE that starts
 * being about that; the rest is headroom for the 16 control clients, the
 * stores' connections, strict and tag limits and the Kubernetes watch: 177
 * with one of each and 16 clients (tests/e2e/test_resources.c holds them
 * all at this limit). */
#define KT_START_FDS 192
struct ring_buffer;

struct kt_groups;

struct kt_daemon {
	/* the config file as parsed (src), and what runs: src with each
	 * groupBy limit replaced by its groups' instances (members/groups.h),
	 * borrowing from src */
	struct kt_config src;
	struct kt_config cfg;
	struct kt_groups *groups;  /* the groups seen, by template */
	struct kt_plan plan;
	struct kt_limit_state *ls;
	struct kt_sample *hist_pool; /* the limits' tick rings (ls[i].hist) */
	struct kt_pool *pool;
	struct kt_pool_local *pool_local; /* scratch, index-aligned with plan.limits */
	struct kt_bpf bpf;
	char cg_mount[PATH_MAX];
	char config_path[PATH_MAX];
	int epfd, sigfd, timerfd;
	/* the loop's watches, one per fd (the control socket's are in ctl) */
	struct kt_watch w_sig, w_tick, w_events, w_metrics, w_cgwatch, w_kube,
		w_pool, w_strict, w_tags, w_cfw;
	struct kt_ctlserver ctl;   /* the control socket: listener, clients, subscribers */
	bool running;
	bool detach_on_exit;
	uint64_t started_ns;
	uint64_t ticks;
	uint64_t last_tick_ns;     /* when the last tick ran */
	uint64_t tick_late_max_ns; /* the latest a tick ran after its time, since the start */
	uint64_t ticks_missed;     /* timer expirations the loop was too late to run */
	uint64_t reloads, reload_failures;
	uint64_t last_prune_ns;    /* last periodic member rescan */
	uint64_t member_changes;   /* members that joined or left since the start */
	uint64_t last_verify_ns;   /* last check of kt_members and kt_limits (verify.h) */
	struct kt_verify_fixes map_fixes; /* their entries written back since the start */
	struct kt_cgwatch *cgwatch; /* inotify on the members' directories; NULL: none */
	struct ring_buffer *events; /* kt_events consumer; NULL: an older pin directory */
	struct kt_metrics *metrics; /* the Prometheus endpoint; NULL: off */
	int cgwatch_err;           /* last kt_cgwatch_set error, 0 = watching */
	char refresh_err[KT_ERR_LEN]; /* last rescan error, logged once */
	char regroup_err[KT_ERR_LEN]; /* last error applying new groups, logged once */
	char attach_desc[PATH_MAX + 300]; /* the plan's attach point, logged when it changes */
	struct kt_slot_base *slot_base; /* KT_MAX_SLOTS, the controller's counter baselines */
	/* the controller's view of the above (plan, ls, pool, pool_local, bpf,
	 * slot_base, the config's timing), rebound whenever one of them moves */
	struct kt_ctl controller;
	struct kt_kube *kube;      /* the pods watcher while some limit selects pods; else NULL */
	struct kt_pod_set pods;    /* the pods on this node as last taken from it */
	struct kt_strict *strict;  /* the strict limits' permits; NULL: none */
	bool strict_kick;          /* an event was news to it: run it after the batch */
	struct kt_tags *tags;      /* the tag limits (query servers, exchange); NULL: none */
	struct kt_audit_run audit; /* the in-flight limits' open counts checked against their sockets */
	/* the config file: watched so a change applies itself (w_cfw), and
	 * the outcome of the last reload for status and metrics */
	struct kt_cfgwatch *cfw;   /* NULL: reloads by SIGHUP or kthrottlectl only */
	unsigned char cfg_bad[KT_CONFIG_DIGEST_LEN]; /* the content rejected, while cfg_rejected */
	bool cfg_rejected;         /* the content last tried was rejected: on disk, not running */
	int64_t cfg_applied_at;    /* unix s: the running config was loaded */
	int64_t cfg_rejected_since; /* unix s: the first rejection of the content rejected */
	char cfg_error[KT_ERR_LEN]; /* why, one line */
};

/* Exit codes */
#define KT_EXIT_OK 0
#define KT_EXIT_RUNTIME 1
#define KT_EXIT_CONFIG 2

/* Loads config and starts enforcing; returns a KT_EXIT_* code on failure
 * with the error printed, leaving nothing attached or pinned that it made. */
int kt_daemon_start(struct kt_daemon *d, const char *config_path, bool detach_on_exit);
/* Runs until SIGTERM/SIGINT; returns the exit code. */
int kt_daemon_run(struct kt_daemon *d);
void kt_daemon_stop(struct kt_daemon *d);

/* Re-read the config; on error keep the running one (recorded for status
 * and metrics, logged). Unconditional (SIGHUP, kthrottlectl reload); the
 * watcher then compares with what it read. 0 or negative errno. */
int kt_daemon_reload(struct kt_daemon *d, char *err, size_t errlen);
/* The groups of the groupBy limits looked at anew (members, pods, ttls):
 * when they changed, the running config is expanded again and applied as
 * a reload of the same file applies. 1 when it was, 0 when nothing
 * changed, or a negative errno (logged; the limits stay as they were). */
int kt_daemon_regroup(struct kt_daemon *d);

#endif
