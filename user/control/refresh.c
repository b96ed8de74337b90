/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Members found anew (refresh.h): cgroup and pod events, the rescan, the
 * pods watcher's options, and the plan applied. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include "base/cgwatch.h"
#include "control/daemon.h"
#include "base/log.h"
#include "control/refresh.h"
#include "members/resolve.h"

/* The watcher options cfg asks for, with its limits' pods: selectors;
 * o->api_server "" when no limit selects pods. -EINVAL (err one line) when
 * they cannot be found, -ENOMEM. kt_kube_opts_free(o) after. */
int kt_refresh_kube_opts(const struct kt_config *cfg, struct kt_kube_opts *o, char *err,
			 size_t errlen)
{
	int ret;

	memset(o, 0, sizeof(*o));
	if (!kt_config_uses_pods(cfg))
		return 0;
	ret = kt_kube_resolve_opts(&cfg->kube, o, err, errlen);
	if (!ret && (ret = kt_kube_opts_selectors(o, cfg)))
		snprintf(err, errlen, "kubernetes: out of memory");
	return ret;
}

/* Makes the watcher follow o: started, restarted with new options (a
 * change of the selectors too: the new watcher lists again, so pods a
 * widened selector picks appear), or stopped (o->api_server ""). The last
 * known pods stay until the new watcher lists; with no watcher there are
 * none. */
int kt_refresh_kube_follow(struct kt_daemon *d, const struct kt_kube_opts *o)
{
	char err[KT_ERR_LEN];
	int ret;

	if (d->kube && kt_kube_opts_equal(kt_kube_options(d->kube), o))
		return 0;
	if (d->kube) {
		int wret = kt_watch_del(d->epfd, &d->w_kube);

		if (wret) /* the stop closes it all the same */
			kt_warn("cannot stop watching %s: %s", "the pods watcher", strerror(-wret));
		kt_kube_stop(d->kube);
		d->kube = NULL;
	}
	if (!o->api_server[0]) {
		kt_pod_set_clear(&d->pods);
		return 0;
	}
	ret = kt_kube_start(o, &d->kube, err, sizeof(err));
	if (ret) {
		kt_err("%s", err);
		return ret;
	}
	ret = kt_watch_add(d->epfd, &d->w_kube, kt_kube_fd(d->kube), EPOLLIN);
	if (ret) {
		/* unwatched it would never deliver: as if it had not started */
		kt_err("kubernetes: cannot watch the pods watcher: %s; pods are not followed",
		       strerror(-ret));
		kt_kube_stop(d->kube);
		d->kube = NULL;
		return ret;
	}
	return 0;
}

/* At the start: the watcher, and up to 2 s for its first list, so the
 * pods already running are members from the first apply (an API that does
 * not answer by then is followed in the background). */
int kt_refresh_start_kube(struct kt_daemon *d, const struct kt_config *cfg, char *err,
			  size_t errlen)
{
	struct kt_kube_opts o;
	struct kt_kube_status st;
	bool changed;
	uint64_t until = kt_clock_ns() + 2000000000ull;
	int ret = kt_refresh_kube_opts(cfg, &o, err, errlen);

	if (!ret && o.api_server[0])
		ret = kt_kube_start(&o, &d->kube, err, errlen);
	kt_kube_opts_free(&o);
	if (ret || !d->kube)
		return ret;
	do {
		struct pollfd p = { .fd = kt_kube_fd(d->kube), .events = POLLIN };

		poll(&p, 1, 50);
		kt_kube_status(d->kube, &st);
	} while (!st.synced && st.state != KT_KUBE_UNREACHABLE && kt_clock_ns() < until);
	if (!st.synced)
		kt_warn("kubernetes: no pod list from %s yet%s%s: pods join when it answers",
			kt_kube_options(d->kube)->api_server, st.error[0] ? ": " : "", st.error);
	return kt_kube_snapshot(d->kube, &d->pods, &changed);
}

bool kt_refresh_take_pods(struct kt_daemon *d)
{
	bool changed = false;

	return d->kube && !kt_kube_snapshot(d->kube, &d->pods, &changed) && changed;
}

int kt_refresh_apply_plan(struct kt_daemon *d, struct kt_plan *plan, struct kt_limit_state *ls,
			  char *err, size_t errlen)
{
	struct kt_bucket_policy *pol = calloc(plan->n_limits, sizeof(*pol));
	int ret;

	if (!pol)
		return -ENOMEM;
	for (int i = 0; i < plan->n_limits; i++)
		pol[i] = ls[i].pol;
	ret = kt_plan_apply(&d->bpf, plan, pol, err, errlen);
	free(pol);
	if (!ret) {
		char desc[sizeof(d->attach_desc)];

		/* once per change of the attach point, not at every rescan */
		kt_plan_attach_desc(plan, desc, sizeof(desc));
		if (strcmp(desc, d->attach_desc)) {
			if (plan->root)
				kt_info("programs attached once per hook at %s", desc);
			else if (plan->root_note[0])
				kt_info("programs attached on each member cgroup (attachRoot auto: %s)",
					plan->root_note);
			else if (strcmp(desc, "none"))
				kt_info("programs attached on each member cgroup (attachRoot: members)");
			snprintf(d->attach_desc, sizeof(d->attach_desc), "%s", desc);
		}
	}
	return ret;
}

/* What the watcher should watch: every limit's cgroups entries, absolute,
 * and the directories of the known pods (the kubelet makes them after
 * the API lists the pod). */
void kt_refresh_watch_members(struct kt_daemon *d)
{
	const char **paths;
	char (*abs)[PATH_MAX];
	char **pod_dirs = NULL;
	/* the parsed config's entries: a groupBy limit's patterns while it
	 * has no group too */
	const struct kt_config *cfg = &d->src;
	int n = 0, n_pod = kt_plan_pod_dirs(cfg, d->cg_mount, &d->pods, &pod_dirs), ret;

	if (!d->cgwatch || n_pod < 0) {
		for (int k = 0; k < n_pod; k++)
			free(pod_dirs[k]);
		free(pod_dirs);
		return;
	}
	for (int i = 0; i < cfg->n_limits; i++)
		n += cfg->limits[i].n_cgroups;
	paths = calloc(n + n_pod + 1, sizeof(*paths));
	abs = calloc(n + 1, sizeof(*abs));
	if (paths && abs) {
		n = 0;
		for (int i = 0; i < cfg->n_limits; i++)
			for (int j = 0; j < cfg->limits[i].n_cgroups; j++) {
				const char *e = cfg->limits[i].cgroups[j];

				snprintf(abs[n], PATH_MAX, "%s%s%s", e[0] == '/' ? "" : d->cg_mount,
					 e[0] == '/' ? "" : "/", e);
				paths[n] = abs[n];
				n++;
			}
		for (int k = 0; k < n_pod; k++)
			paths[n++] = pod_dirs[k];
		ret = kt_cgwatch_set(d->cgwatch, paths, n);
		if (ret && ret != d->cgwatch_err)
			kt_warn("watching the member cgroups' directories: %s (rescanned every tick instead)",
				strerror(-ret));
		d->cgwatch_err = ret;
	}
	free(paths);
	free(abs);
	for (int k = 0; k < n_pod; k++)
		free(pod_dirs[k]);
	free(pod_dirs);
}

/* Logs each member of `a` that `b` lacks, as joining (a is the new plan)
 * or leaving; how many. */
static int log_missing(const struct kt_limit_rt *a, const struct kt_limit_rt *b, bool joins)
{
	int n = 0;

	for (int j = 0; j < a->n_members; j++) {
		int k = 0;

		while (k < b->n_members && b->members[k].cgid != a->members[j].cgid)
			k++;
		if (k == b->n_members) {
			const struct kt_member_rt *m = &a->members[j];

			if (joins && m->pod)
				kt_info("limit %s: pod %s (cgroup %s) joins as member %s", a->cfg->name,
					m->pod, m->path, m->id);
			else if (joins)
				kt_info("limit %s: cgroup %s joins as member %s", a->cfg->name,
					m->path, m->id);
			else if (m->pod)
				kt_info("limit %s: pod %s is no longer selected or gone: member %s leaves the pool",
					a->cfg->name, m->pod, m->id);
			else
				kt_info("limit %s: cgroup %s is gone: member %s leaves the pool",
					a->cfg->name, m->path, m->id);
			n++;
		}
	}
	return n;
}

int kt_refresh_members(struct kt_daemon *d)
{
	char err[KT_ERR_LEN];
	struct kt_plan next;
	bool changed;
	int moved = 0, ret;
	uint64_t now = kt_clock_ns();

	ret = kt_plan_refresh(&d->plan, &d->cfg, d->cg_mount, &d->pods, &next, &changed, err,
			      sizeof(err));
	if (ret) {
		if (strcmp(err, d->refresh_err))
			kt_err("finding member cgroups: %s", err);
		snprintf(d->refresh_err, sizeof(d->refresh_err), "%s", err);
		return ret;
	}
	if (!changed)
		return 0;
	for (int i = 0; i < d->plan.n_limits; i++) {
		const struct kt_limit_rt *o = &d->plan.limits[i], *n = &next.limits[i];

		moved += log_missing(o, n, false) + log_missing(n, o, true);
	}
	/* the pool counts the new members before any bucket is written (else
	 * each would get the whole pool until the next tick); the ids that
	 * vanished are deregistered at its next tick */
	kt_ctl_fill_pool_local(&next, d->ls, d->pool_local);
	kt_pool_members(d->pool, d->pool_local, next.n_limits);
	for (int i = 0; i < next.n_limits; i++)
		kt_ctl_decide(d->pool, i, &next.limits[i], &d->ls[i], now);
	ret = kt_refresh_apply_plan(d, &next, d->ls, err, sizeof(err));
	if (ret) {
		/* all or nothing: the kernel is as it was, and so is the plan;
		 * the next rescan tries again */
		if (strcmp(err, d->refresh_err))
			kt_err("updating members: %s (keeping the members as they were)", err);
		snprintf(d->refresh_err, sizeof(d->refresh_err), "%s", err);
		kt_plan_free(&next);
		for (int i = 0; i < d->plan.n_limits; i++)
			kt_ctl_decide(d->pool, i, &d->plan.limits[i], &d->ls[i], now);
		return ret;
	}
	d->refresh_err[0] = 0;
	kt_plan_free(&d->plan);
	d->plan = next;
	for (int i = 0; i < d->plan.n_limits; i++) {
		kt_ctl_write_rates(&d->controller, i);
		kt_ctl_write_lease(&d->controller, i);
	}
	kt_strict_sync(d->strict, &d->plan);
	d->member_changes += moved;
	kt_refresh_watch_members(d);
	return moved;
}
