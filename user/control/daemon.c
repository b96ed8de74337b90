/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The daemon's lifecycle: start, reload (and the groups of groupBy limits
 * applied as one), stop. Its loop is daemon_loop.c, its control socket's
 * replies daemon_cmd.c. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "base/cgroup.h"
#include "base/cgwatch.h"
#include "control/ctlproto.h"
#include "control/daemon.h"
#include "members/groups.h"
#include "base/log.h"
#include "control/metrics.h"
#include "control/refresh.h"
#include "control/report.h"
#include "members/resolve.h"
#include "store/store.h"
#include "control/daemon_int.h"

/* The controller's view of the daemon: after start allocates and after a
 * reload swaps (plan, cfg and bpf are d's own, so only their content moves). */
void kt_daemon_bind_controller(struct kt_daemon *d)
{
	struct kt_ctl *c = &d->controller;

	c->tick_ns = d->cfg.tick_ns;
	c->epoch_ns = d->cfg.epoch_ns;
	c->plan = &d->plan;
	c->ls = d->ls;
	c->pool = d->pool;
	c->pool_local = d->pool_local;
	c->bpf = &d->bpf;
	c->slot_base = d->slot_base;
}

/* The one-line error of a start out of fds (ret -EMFILE or -ENFILE): the
 * limit hit and what the start needs. False for any other ret. */
static bool out_of_fds(int ret, int n_limits)
{
	struct rlimit rl;

	if (ret != -EMFILE && ret != -ENFILE)
		return false;
	if (ret == -ENFILE) {
		kt_err("out of file descriptors system-wide (ENFILE: fs.file-max); %d limit(s) need about %d",
		       n_limits, KT_START_FDS);
		return true;
	}
	getrlimit(RLIMIT_NOFILE, &rl);
	kt_err("out of file descriptors (RLIMIT_NOFILE %llu); %d limit(s) need about %d: raise it (ulimit -n / LimitNOFILE=)",
	       (unsigned long long)rl.rlim_cur, n_limits, KT_START_FDS);
	return true;
}

/* A start step's error: the fd message when it ran out of fds, else err. */
static void start_err(const struct kt_daemon *d, int ret, const char *err)
{
	if (!out_of_fds(ret, d->plan.n_limits))
		kt_err("%s", err);
}

/* The soft RLIMIT_NOFILE raised to the hard one (as systemd-era daemons
 * do); -EMFILE when even the hard limit is below what a start needs, before
 * anything is pinned or attached. */
static int fds_enough(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return 0;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			getrlimit(RLIMIT_NOFILE, &rl);
	}
	return rl.rlim_cur < KT_START_FDS ? -EMFILE : 0;
}

int kt_daemon_start(struct kt_daemon *d, const char *config_path, bool detach_on_exit)
{
	char err[KT_ERR_LEN];
	uint64_t now;
	int ret, i;

	memset(d, 0, sizeof(*d));
	d->epfd = d->sigfd = d->timerfd = -1;
	kt_ctlserver_init(&d->ctl, &kt_daemon_ctl_ops, d);
	kt_daemon_init_watches(d);
	d->detach_on_exit = detach_on_exit;
	snprintf(d->config_path, sizeof(d->config_path), "%s", config_path);

	unsigned char digest[KT_CONFIG_DIGEST_LEN];

	ret = kt_config_load_digest(config_path, &d->src, digest, err, sizeof(err));
	if (ret) {
		kt_err("%s", err);
		return KT_EXIT_CONFIG;
	}
	if (kt_groups_new(&d->groups)) {
		kt_err("out of memory");
		ret = KT_EXIT_RUNTIME;
		goto fail_cfg;
	}
	if (geteuid() != 0) {
		kt_err("must run as root (needs CAP_BPF, CAP_NET_ADMIN and CAP_SYS_ADMIN to load and attach BPF programs)");
		ret = KT_EXIT_RUNTIME;
		goto fail_cfg;
	}
	if (access("/sys/kernel/btf/vmlinux", R_OK) != 0) {
		kt_err("no BPF support: /sys/kernel/btf/vmlinux is missing (kernel needs CONFIG_BPF_SYSCALL and CONFIG_DEBUG_INFO_BTF)");
		ret = KT_EXIT_RUNTIME;
		goto fail_cfg;
	}
	ret = kt_cgroup2_mount(d->cg_mount, sizeof(d->cg_mount), NULL);
	if (ret) {
		kt_err("no cgroup v2 mount found in /proc/mounts (mount -t cgroup2 none /sys/fs/cgroup)");
		ret = KT_EXIT_RUNTIME;
		goto fail_cfg;
	}
	ret = kt_refresh_start_kube(d, &d->src, err, sizeof(err));
	if (ret) {
		kt_err("%s", err);
		ret = ret == -EINVAL ? KT_EXIT_CONFIG : KT_EXIT_RUNTIME;
		goto fail_cfg;
	}
	/* the groups the members on this node have now */
	if (kt_groups_observe(d->groups, &d->src, d->cg_mount, &d->pods, kt_clock_ns()) < 0 ||
	    kt_groups_expand(d->groups, &d->src, &d->cfg)) {
		kt_err("out of memory");
		ret = KT_EXIT_RUNTIME;
		goto fail_cfg;
	}
	ret = kt_plan_resolve(&d->cfg, d->cg_mount, &d->pods, &d->plan, err, sizeof(err));
	if (ret) {
		kt_err("%s", err);
		ret = KT_EXIT_CONFIG;
		goto fail_cfg;
	}
	/* the pool only validates its store settings here: all but running
	 * out of memory is the config's fault */
	ret = kt_pool_create(&d->pool, &d->cfg, err, sizeof(err));
	if (ret) {
		kt_err("%s", err);
		ret = ret == -ENOMEM ? KT_EXIT_RUNTIME : KT_EXIT_CONFIG;
		goto fail_plan;
	}
	/* the plan's own limits, as --check runs them, before the kernel */
	ret = kt_plan_check(&d->plan, err, sizeof(err));
	if (ret) {
		kt_err("%s", err);
		ret = ret == -ENOMEM ? KT_EXIT_RUNTIME : KT_EXIT_CONFIG;
		goto fail_pool;
	}
	ret = fds_enough();
	if (ret) {
		out_of_fds(ret, d->plan.n_limits);
		ret = KT_EXIT_RUNTIME;
		goto fail_pool;
	}
	ret = kt_ctlserver_listen(&d->ctl, d->cfg.socket_path, err, sizeof(err));
	if (ret) {
		start_err(d, ret, err);
		ret = KT_EXIT_RUNTIME;
		goto fail_pool;
	}
	ret = kt_bpf_open_locked(&d->bpf, d->cfg.pin_dir, err, sizeof(err));
	if (ret) {
		start_err(d, ret, err);
		ret = KT_EXIT_RUNTIME;
		goto fail_sock;
	}
	/* once, at start: what the kernel refused, and what that turns off */
	for (int f = 0; f < KT_FEAT_COUNT; f++)
		if (d->bpf.feat.f[f].state == KT_FEAT_OFF)
			kt_warn("kernel feature %s off: %s; %s", kt_feature_name(f),
				d->bpf.feat.f[f].why, kt_feature_effect(f));
	int hist_cap = kt_ctl_hist_cap(d->cfg.epoch_ns, d->cfg.tick_ns);

	d->ls = calloc(d->plan.n_limits ? d->plan.n_limits : 1, sizeof(*d->ls));
	d->hist_pool = calloc((size_t)(d->plan.n_limits ? d->plan.n_limits : 1) * hist_cap,
			      sizeof(*d->hist_pool));
	d->pool_local = calloc(d->plan.n_limits ? d->plan.n_limits : 1, sizeof(*d->pool_local));
	d->slot_base = calloc(KT_MAX_SLOTS, sizeof(*d->slot_base));
	if (!d->ls || !d->hist_pool || !d->pool_local || !d->slot_base) {
		ret = KT_EXIT_RUNTIME;
		goto fail_bpf;
	}
	kt_daemon_bind_controller(d);
	now = kt_clock_ns();
	for (i = 0; i < d->plan.n_limits; i++) {
		kt_ctl_start_limit(&d->controller, i, now);
		kt_ctl_hist_rehome(&d->ls[i], d->hist_pool + (size_t)i * hist_cap, hist_cap);
	}
	/* sizes count every member before any bucket is written */
	kt_ctl_fill_pool_local(&d->plan, d->ls, d->pool_local);
	kt_pool_members(d->pool, d->pool_local, d->plan.n_limits);
	for (i = 0; i < d->plan.n_limits; i++)
		kt_ctl_decide(d->pool, i, &d->plan.limits[i], &d->ls[i], now);
	ret = kt_strict_create(&d->strict, &d->plan, &d->bpf, err, sizeof(err));
	if (ret) {
		start_err(d, ret, err);
		ret = ret == -EINVAL ? KT_EXIT_CONFIG : KT_EXIT_RUNTIME;
		goto fail_bpf;
	}
	ret = kt_refresh_apply_plan(d, &d->plan, d->ls, err, sizeof(err));
	if (ret) {
		start_err(d, ret, err);
		ret = KT_EXIT_RUNTIME;
		goto fail_bpf;
	}
	kt_strict_sync(d->strict, &d->plan);
	kt_ctl_drop_stale_pins(&d->controller);
	ret = kt_tags_create(&d->tags, &d->cfg, err, sizeof(err));
	if (ret) {
		start_err(d, ret, err);
		ret = ret == -EINVAL || ret == -EADDRINUSE || ret == -ENODEV ? KT_EXIT_CONFIG
									   : KT_EXIT_RUNTIME;
		goto fail_bpf;
	}
	ret = kt_daemon_setup_loop(d, err, sizeof(err));
	if (ret) {
		start_err(d, ret, err);
		ret = KT_EXIT_RUNTIME;
		goto fail_bpf;
	}
	kt_refresh_watch_members(d);
	/* changes to the file apply themselves from the content loaded here */
	if (kt_cfgwatch_open(&d->cfw, d->config_path, digest, 0, 0, err, sizeof(err))) {
		kt_warn("%s; reload with SIGHUP or kthrottlectl reload", err);
	} else if ((ret = kt_watch_add(d->epfd, &d->w_cfw, kt_cfgwatch_fd(d->cfw), EPOLLIN))) {
		/* unwatched, it would never tell: status says not watched */
		kt_warn("cannot watch the config file: %s; reload by hand", strerror(-ret));
		kt_cfgwatch_close(d->cfw);
		d->cfw = NULL;
	}
	d->cfg_applied_at = time(NULL);
	d->started_ns = now;
	d->running = true;
	kt_daemon_tick(d, now); /* first sample */
	kt_info("%s %d limit(s) and %d tag limit(s) on node %s, pins in %s, control socket %s",
		d->bpf.adopted ? "adopted pinned state;" : "enforcing", d->plan.n_limits,
		kt_tags_count(d->tags),
		d->cfg.node_name, d->cfg.pin_dir, d->cfg.socket_path);
	return KT_EXIT_OK;

fail_bpf:
	kt_tags_destroy(d->tags);
	d->tags = NULL;
	kt_strict_destroy(d->strict);
	d->strict = NULL;
	{
		bool fresh = !d->bpf.adopted;
		kt_bpf_close(&d->bpf);
		/* a first start that failed leaves nothing behind */
		if (fresh)
			kt_bpf_cleanup(d->cfg.pin_dir, err, sizeof(err));
	}
	kt_ctl_free_states(d->ls, d->plan.n_limits);
	free(d->ls);
	d->ls = NULL;
	free(d->hist_pool);
	d->hist_pool = NULL;
	free(d->pool_local);
	d->pool_local = NULL;
	free(d->slot_base);
	d->slot_base = NULL;
	kt_ctl_free(&d->controller);
	d->controller = (struct kt_ctl){ 0 };
fail_sock:
	kt_ctlserver_close(&d->ctl, d->cfg.socket_path);
fail_pool:
	kt_pool_destroy(d->pool);
	d->pool = NULL;
fail_plan:
	kt_plan_free(&d->plan);
fail_cfg:
	kt_kube_stop(d->kube);
	d->kube = NULL;
	kt_pod_set_clear(&d->pods);
	kt_config_free(&d->cfg);
	kt_config_free(&d->src);
	kt_groups_free(d->groups);
	d->groups = NULL;
	if (d->epfd >= 0)
		close(d->epfd);
	if (d->sigfd >= 0)
		close(d->sigfd);
	if (d->timerfd >= 0)
		close(d->timerfd);
	return ret;
}

static int cmp_limit_rt_name(const void *x, const void *y)
{
	return strcmp((*(const struct kt_limit_rt *const *)x)->cfg->name,
		      (*(const struct kt_limit_rt *const *)y)->cfg->name);
}

/* Makes ncfg (expanded from nsrc, or, nsrc NULL, from the running src:
 * the groups changed) the running config, all or nothing: the new plan
 * applied, kept limits with their state, pool and buckets. Consumes ncfg
 * and nsrc, applied or not. */
static int switch_config(struct kt_daemon *d, struct kt_config *nsrc, struct kt_config ncfg,
			 const char *how, char *err, size_t errlen)
{
	struct kt_plan nplan;
	struct kt_limit_state *nls = NULL;
	struct kt_sample *nhist = NULL;
	const struct kt_limit_rt **old_by_name = NULL;
	struct kt_pool_local *nlocal = NULL;
	struct kt_pool *npool = NULL;
	struct kt_strict *nstrict = NULL;
	struct kt_kube_opts kopts = { 0 };
	uint64_t now = kt_clock_ns();
	int ret, i, j, hist_cap;

	if (strcmp(ncfg.pin_dir, d->cfg.pin_dir) || strcmp(ncfg.socket_path, d->cfg.socket_path) ||
	    strcmp(ncfg.metrics_addr, d->cfg.metrics_addr) || ncfg.metrics_port != d->cfg.metrics_port) {
		snprintf(err, errlen,
			 "%s: pinDir, socket and metrics cannot change on reload (restart kthrottled)",
			 d->config_path);
		ret = -EINVAL;
		goto failed;
	}
	ret = kt_refresh_kube_opts(&ncfg, &kopts, err, errlen);
	if (!ret)
		ret = kt_plan_resolve(&ncfg, d->cg_mount, &d->pods, &nplan, err, errlen);
	if (ret)
		goto failed;
	ret = kt_pool_create(&npool, &ncfg, err, errlen);
	if (!ret)
		ret = kt_plan_check(&nplan, err, errlen);
	if (ret)
		goto failed_plan;
	nls = calloc(nplan.n_limits ? nplan.n_limits : 1, sizeof(*nls));
	nlocal = calloc(nplan.n_limits ? nplan.n_limits : 1, sizeof(*nlocal));
	if (!nls || !nlocal) {
		ret = -ENOMEM;
		goto failed_plan;
	}
	/* the old limits by name, sorted: 10,000 limits find theirs in a
	 * bsearch each, not a scan */
	old_by_name = calloc(d->plan.n_limits ? d->plan.n_limits : 1, sizeof(*old_by_name));
	if (!old_by_name) {
		ret = -ENOMEM;
		goto failed_plan;
	}
	for (j = 0; j < d->plan.n_limits; j++)
		old_by_name[j] = &d->plan.limits[j];
	qsort(old_by_name, (size_t)d->plan.n_limits, sizeof(*old_by_name), cmp_limit_rt_name);
	for (i = 0; i < nplan.n_limits; i++) {
		const struct kt_limit_rt *nl = &nplan.limits[i], *const *hit;

		hit = bsearch(&nl, old_by_name, (size_t)d->plan.n_limits, sizeof(*old_by_name),
			      cmp_limit_rt_name);
		j = hit ? (int)(*hit - d->plan.limits) : d->plan.n_limits;
		if (j < d->plan.n_limits) {
			/* keep the ramp level, history and agreed pool: no restart
			 * from min, no rejoin */
			nls[i] = d->ls[j];
			/* the old state keeps its array until the reload commits */
			nls[i].slot_pol = NULL;
			nls[i].n_slot_pol = nls[i].slot_pol_cap = 0;
			kt_ramp_reconfigure(&nls[i].ramp, &nl->cfg->rl, now);
			nls[i].pool_rate = kt_ramp_rate(&nls[i].ramp);
			kt_pool_inherit(npool, i, d->pool, j);
		} else {
			kt_ctl_init_state(&nls[i], nl, now);
		}
	}
	free(old_by_name);
	old_by_name = NULL;
	/* the kept limits' samples are copied: the old rings stay the old
	 * states' until the reload commits */
	hist_cap = kt_ctl_hist_cap(ncfg.epoch_ns, ncfg.tick_ns);
	nhist = calloc((size_t)(nplan.n_limits ? nplan.n_limits : 1) * hist_cap, sizeof(*nhist));
	if (!nhist) {
		ret = -ENOMEM;
		goto failed_plan;
	}
	for (i = 0; i < nplan.n_limits; i++)
		kt_ctl_hist_rehome(&nls[i], nhist + (size_t)i * hist_cap, hist_cap);
	/* the new pool counts every member of the new plan before any bucket
	 * is written (else each would get the whole pool until the next tick) */
	kt_ctl_fill_pool_local(&nplan, nls, nlocal);
	kt_pool_members(npool, nlocal, nplan.n_limits);
	for (i = 0; i < nplan.n_limits; i++)
		kt_ctl_decide(npool, i, &nplan.limits[i], &nls[i], now);
	ret = kt_strict_create(&nstrict, &nplan, &d->bpf, err, errlen);
	if (ret)
		goto failed_plan;
	/* tag limits last among the checks: a reload that binds a new query
	 * socket and then fails would have to unbind it again (new groups
	 * leave them as they are) */
	if (nsrc) {
		struct kt_tags *ntags = NULL;

		kt_daemon_unwatch(d, &d->w_tags, "the tag limits"); /* a reload closes the old set's fd */
		ret = kt_tags_reload(&ntags, d->tags, &ncfg, err, errlen);
		if (ret) {
			kt_daemon_watch_tags(d); /* the old set runs on */
			goto failed_plan;
		}
		d->tags = ntags; /* the old set is consumed: kept tags carry over */
		kt_daemon_watch_tags(d);
	}
	ret = kt_refresh_apply_plan(d, &nplan, nls, err, errlen);
	if (ret)
		goto failed_plan; /* the old limits' rates are rewritten on the next tick */
	/* permits the old one has in flight are never armed (wasted, never
	 * doubled); the ones armed in the kernel are adopted */
	kt_strict_inherit(nstrict, d->strict);
	kt_daemon_unwatch(d, &d->w_strict, "the strict limits' timer");
	kt_strict_destroy(d->strict);
	d->strict = nstrict;
	nstrict = NULL;
	/* Members the new plan dropped simply stop heartbeating and expire.
	 * A round trip the old pool has in flight finishes on its own. */
	kt_daemon_unwatch(d, &d->w_pool, "the store's answers");
	kt_pool_take_stores(npool, d->pool);
	kt_pool_destroy(d->pool);
	kt_ctl_free_states(d->ls, d->plan.n_limits);
	kt_plan_free(&d->plan);
	kt_config_free(&d->cfg);
	if (nsrc) {
		kt_config_free(&d->src);
		d->src = *nsrc;
		memset(nsrc, 0, sizeof(*nsrc));
	}
	free(d->ls);
	free(d->hist_pool);
	free(d->pool_local);
	d->cfg = ncfg;
	d->cfg.source = &d->src; /* ncfg was made from *nsrc, now d->src */
	d->plan = nplan;
	d->ls = nls;
	d->hist_pool = nhist;
	d->pool = npool;
	d->pool_local = nlocal;
	kt_daemon_bind_controller(d);
	kt_daemon_watch_pool(d);
	for (i = 0; i < d->plan.n_limits; i++) {
		kt_ctl_write_rates(&d->controller, i);
		kt_ctl_write_lease(&d->controller, i);
	}
	kt_strict_sync(d->strict, &d->plan);
	kt_daemon_watch_strict(d);
	kt_ctl_drop_stale_pins(&d->controller);
	kt_refresh_kube_follow(d, &kopts);
	kt_kube_opts_free(&kopts);
	kt_refresh_watch_members(d);
	if (nsrc) {
		d->reloads++;
		kt_audit_run_reset(&d->audit);
		kt_info("reloaded %s%s: %d limit(s), %d tag limit(s)", d->config_path, how,
			d->plan.n_limits, kt_tags_count(d->tags));
	} else {
		kt_info("groups changed: %d limit(s)", d->plan.n_limits);
	}
	return 0;
failed_plan:
	free(old_by_name);
	kt_strict_destroy(nstrict);
	kt_pool_destroy(npool);
	kt_ctl_free_states(nls, nplan.n_limits);
	free(nls);
	free(nhist);
	free(nlocal);
	kt_plan_free(&nplan);
failed:
	kt_kube_opts_free(&kopts);
	kt_config_free(&ncfg);
	kt_config_free(nsrc);
	return ret;
}

/* The reload itself; digest gets what it read (or failed to). */
static int reload_config(struct kt_daemon *d, unsigned char digest[KT_CONFIG_DIGEST_LEN],
			 const char *how, char *err, size_t errlen)
{
	struct kt_config nsrc, ncfg;
	int ret = kt_config_load_digest(d->config_path, &nsrc, digest, err, errlen);

	if (ret)
		return ret;
	if (kt_groups_observe(d->groups, &nsrc, d->cg_mount, &d->pods, kt_clock_ns()) < 0 ||
	    kt_groups_expand(d->groups, &nsrc, &ncfg)) {
		kt_config_free(&nsrc);
		snprintf(err, errlen, "%s: out of memory", d->config_path);
		return -ENOMEM;
	}
	return switch_config(d, &nsrc, ncfg, how, err, errlen);
}

int kt_daemon_regroup(struct kt_daemon *d)
{
	struct kt_config ncfg;
	char err[KT_ERR_LEN];
	int ret = kt_groups_observe(d->groups, &d->src, d->cg_mount, &d->pods, kt_clock_ns());

	if (ret <= 0)
		return ret;
	ret = kt_groups_expand(d->groups, &d->src, &ncfg);
	if (!ret)
		ret = switch_config(d, NULL, ncfg, "", err, sizeof(err));
	else
		snprintf(err, sizeof(err), "out of memory");
	if (ret) {
		/* tried again at every rescan: said once per error */
		if (strcmp(err, d->regroup_err))
			kt_err("applying the groups of groupBy limits: %s (keeping the limits as they were)",
			       err);
		snprintf(d->regroup_err, sizeof(d->regroup_err), "%s", err);
		return ret;
	}
	d->regroup_err[0] = '\0';
	return 1;
}

/* A reload and its outcome: the watcher's last tried content, and applied
 * or rejected (since the first rejection of this content) for status. */
static int reload(struct kt_daemon *d, bool automatic, char *err, size_t errlen)
{
	unsigned char digest[KT_CONFIG_DIGEST_LEN] = { 0 };
	int ret = reload_config(d, digest, automatic ? " (changed on disk)" : "", err, errlen);

	kt_cfgwatch_tried(d->cfw, digest);
	if (!ret) {
		d->cfg_rejected = false;
		d->cfg_error[0] = '\0';
		d->cfg_rejected_since = 0;
		d->cfg_applied_at = time(NULL);
		return 0;
	}
	d->reload_failures++;
	if (!d->cfg_rejected || memcmp(digest, d->cfg_bad, sizeof(digest))) {
		d->cfg_rejected_since = time(NULL);
		memcpy(d->cfg_bad, digest, sizeof(digest));
	}
	d->cfg_rejected = true;
	snprintf(d->cfg_error, sizeof(d->cfg_error), "%s", err);
	kt_err("config %s rejected, keeping the running configuration: %s", d->config_path, err);
	return ret;
}

int kt_daemon_reload(struct kt_daemon *d, char *err, size_t errlen)
{
	return reload(d, false, err, errlen);
}

int kt_daemon_reload_changed(struct kt_daemon *d, char *err, size_t errlen)
{
	return reload(d, true, err, errlen);
}

void kt_daemon_stop(struct kt_daemon *d)
{
	char err[KT_ERR_LEN];
	char pin_dir[PATH_MAX];

	snprintf(pin_dir, sizeof(pin_dir), "%s", d->bpf.pin_dir);
	kt_ctlserver_drop_clients(&d->ctl);
	/* A stop changes nothing the other nodes count: this node's members
	 * stay in the pool and the kernel runs their lease out (then the
	 * fallback, then closes), unless the next daemon renews it first (a
	 * rolling restart). Only --detach-on-exit, which removes the programs,
	 * deregisters the members at once. */
	kt_ctl_fill_pool_local(&d->plan, d->ls, d->pool_local);
	kt_pool_leave(d->pool, d->pool_local, d->plan.n_limits, d->detach_on_exit);
	if (!d->detach_on_exit)
		for (int i = 0; i < d->plan.n_limits; i++)
			kt_ctl_pin(&d->controller, i, kt_clock_ns());
	kt_pool_destroy(d->pool);
	d->pool = NULL;
	kt_strict_destroy(d->strict);
	d->strict = NULL;
	kt_tags_destroy(d->tags); /* unreported hits are lost with the node, as its own traffic */
	d->tags = NULL;
	free(d->pool_local);
	d->pool_local = NULL;
	kt_audit_run_close(&d->audit);
	kt_bpf_close(&d->bpf);
	if (d->detach_on_exit) {
		if (kt_bpf_cleanup(pin_dir, err, sizeof(err)))
			kt_err("%s", err);
		else
			kt_info("detached and removed pins in %s", pin_dir);
	} else {
		kt_info("exiting; programs stay attached and enforcing from %s", pin_dir);
	}
	kt_ctlserver_close(&d->ctl, d->cfg.socket_path);
	close(d->epfd);
	close(d->sigfd);
	close(d->timerfd);
	if (d->cgwatch)
		kt_cgwatch_close(d->cgwatch);
	d->cgwatch = NULL;
	kt_cfgwatch_close(d->cfw);
	d->cfw = NULL;
	kt_kube_stop(d->kube);
	d->kube = NULL;
	kt_pod_set_clear(&d->pods);
	ring_buffer__free(d->events);
	d->events = NULL;
	kt_metrics_stop(d->metrics);
	d->metrics = NULL;
	kt_ctl_free_states(d->ls, d->plan.n_limits);
	free(d->ls);
	free(d->hist_pool);
	d->hist_pool = NULL;
	free(d->slot_base);
	kt_ctl_free(&d->controller);
	d->controller = (struct kt_ctl){ 0 };
	kt_plan_free(&d->plan);
	kt_config_free(&d->cfg);
	kt_config_free(&d->src);
	kt_groups_free(d->groups);
	d->groups = NULL;
}
