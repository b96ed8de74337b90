/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The members found anew while the daemon runs: on a cgroup directory
 * event (the inotify watcher), on a pods watcher change, and at the tick's
 * rescan; the watcher's options and its (re)start on a reload; and the
 * plan applied to the kernel, the one way start, reload and refresh change
 * what is attached. */
#ifndef KT_REFRESH_H
#define KT_REFRESH_H

#include <stdbool.h>
#include <stddef.h>
#include "kernel/apply.h"
#include "base/config.h"
#include "control/controller.h"
#include "kube/kubewatch.h"

struct kt_daemon;

/* Finds the members anew (kt_plan_refresh): cgroups that appeared (a
 * pattern's new match, a listed path created or recreated) are attached
 * and join the pool; removed ones (the pod ended) lose their links and
 * buckets and leave the pool at once. All or nothing, through the same
 * apply as a reload. Returns how many members joined or left, or a
 * negative errno (logged once; the members stay as they were). Groups of
 * groupBy limits are the daemon's to look at first (kt_daemon_regroup):
 * this layer never calls back into the daemon. */
int kt_refresh_members(struct kt_daemon *d);
/* What the cgroup watcher should watch: every limit's cgroups entries,
 * absolute, and the directories of the selected pods. */
void kt_refresh_watch_members(struct kt_daemon *d);
/* Applies plan with the bucket policies of ls (kt_plan_apply), all or
 * nothing; logs the attach point when it changed. 0 or -errno (err). */
int kt_refresh_apply_plan(struct kt_daemon *d, struct kt_plan *plan, struct kt_limit_state *ls,
			  char *err, size_t errlen);

/* The pods watcher options cfg asks for, with copies of its limits' pods:
 * selectors (the watcher keeps only the pods they pick); o->api_server ""
 * when no limit selects pods. -EINVAL (err one line) when they cannot be
 * found, -ENOMEM. The caller frees o (kt_kube_opts_free). */
int kt_refresh_kube_opts(const struct kt_config *cfg, struct kt_kube_opts *o, char *err,
			 size_t errlen);
/* At the start: the watcher, and up to 2 s for its first list, so the pods
 * already running are members from the first apply. */
int kt_refresh_start_kube(struct kt_daemon *d, const struct kt_config *cfg, char *err,
			  size_t errlen);
/* Makes the watcher follow o (a reload): started, restarted with new
 * options (or selectors: it lists again), or stopped (o->api_server "").
 * o stays the caller's. */
int kt_refresh_kube_follow(struct kt_daemon *d, const struct kt_kube_opts *o);
/* The watcher published (its fd is ready): d->pods := its set; true when
 * the set changed (members or the directories to watch may have). */
bool kt_refresh_take_pods(struct kt_daemon *d);

#endif
