/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The daemon's event loop: its watches, one callback per fd (signals, the
 * tick, throttle events, the metrics endpoint, cgroup and pod changes,
 * store answers, strict permits, tag limits, the config file), and what
 * runs at each tick. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/epoll.h>
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

/* A throttle event from the kernel: counted under its limit, by reason. */
static int on_event(void *ctx, void *data, size_t len)
{
	struct kt_daemon *d = ctx;
	const struct kt_event *e = data;

	if (len < sizeof(*e) || e->reason >= KT_REASON_COUNT)
		return 0; /* not ours to trust: skip it */
	for (int i = 0; i < d->plan.n_limits; i++) {
		struct kt_limit_state *s = &d->ls[i];

		if (d->plan.limits[i].id != e->limit_id)
			continue;
		s->events[e->reason]++;
		/* a shadow limit refused nobody: its callers are not throttled */
		if (e->reason == KT_REASON_SHADOW)
			break;
		if ((e->reason == KT_REASON_PERMIT || e->reason == KT_REASON_CLOSED) &&
		    kt_strict_refused(d->strict, e->slot, e->ts_ns))
			d->strict_kick = true;
		s->last_event_ns = e->ts_ns;
		/* a strict bucket waiting for a permit is not closed */
		s->last_retry_after_ns = e->reason == KT_REASON_PERMIT && e->retry_after_ns == ~0ULL
						 ? KT_STRICT_RETRY_NS
						 : e->retry_after_ns;
		s->last_event_reason = e->reason;
		kt_daemon_notify_subscribers(d, i, kt_clock_ns());
		break;
	}
	return 0;
}

/* Cooperative limits (unit request) have no program to emit events: the
 * library counts its refusals in the kt_coop entry and leaves the latest
 * one's retry-after there. So a tick in which that count grew is one event
 * (sampled once per tick, as the kernel samples per ms), with that
 * retry-after and the reason the entry's bucket gives now. */
static void coop_event(struct kt_daemon *d, int i, uint64_t now)
{
	const struct kt_limit_rt *l = &d->plan.limits[i];
	struct kt_limit_state *s = &d->ls[i];
	const struct kt_bucket *b;
	uint32_t slot;
	__u64 wait = 0;
	int j;

	if (l->cfg->unit != KT_UNIT_REQUEST || !l->n_members ||
	    s->total_throttled == s->throttled_seen || !d->bpf.coop)
		return;
	/* with callers, one whose entry refuses now (else the plain one) */
	for (j = l->n_members - 1; j > 0; j--)
		if (kt_slot_is_coop(l->members[j].slot) &&
		    kt_gcra_peek(kt_bpf_bucket(&d->bpf, l->members[j].slot), now, 1, &wait) == KT_REFUSE)
			break;
	if (!kt_slot_is_coop(slot = l->members[j].slot))
		return;
	b = kt_bpf_bucket(&d->bpf, slot);
	wait = __atomic_load_n(&d->bpf.coop[slot - KT_COOP_SLOT0].last_wait, __ATOMIC_RELAXED);
	s->last_event_reason = kt_bucket_reason(b, now);
	s->last_retry_after_ns = s->last_event_reason == KT_REASON_CLOSED ? ~0ULL : wait;
	s->last_event_ns = now;
	s->events[s->last_event_reason]++;
}

/* Takes w out of the loop before its owner closes the fd (a reload
 * replaces it); a refusal is logged, the close removes it all the same. */
void kt_daemon_unwatch(struct kt_daemon *d, struct kt_watch *w, const char *what)
{
	int ret = kt_watch_del(d->epfd, w);

	if (ret)
		kt_warn("cannot stop watching %s: %s", what, strerror(-ret));
}

/* Watches fd (a store answer eventfd, the strict controller's or the tag
 * limits' epoll set; -1: none) with w: what it does is also done at the
 * tick or not at all (fallback), so a failure is logged and the daemon runs
 * on without it. */
static void watch_optional(struct kt_daemon *d, struct kt_watch *w, int fd, const char *what,
			   const char *fallback)
{
	int ret = fd >= 0 ? kt_watch_add(d->epfd, w, fd, EPOLLIN) : 0;

	if (ret)
		kt_warn("cannot watch %s: %s; %s", what, strerror(-ret), fallback);
}

/* Store answers wake the loop (w_pool); a reload swaps the pool's eventfd. */
void kt_daemon_watch_pool(struct kt_daemon *d)
{
	watch_optional(d, &d->w_pool, kt_pool_fd(d->pool), "the store's answers",
		       "they are applied at each tick");
}

/* The strict controller's timer and store answers (w_strict). */
void kt_daemon_watch_strict(struct kt_daemon *d)
{
	watch_optional(d, &d->w_strict, kt_strict_fd(d->strict), "the strict limits' timer",
		       "permits follow the tick");
}

/* The tag limits' query servers, timer and store answers (w_tags). */
void kt_daemon_watch_tags(struct kt_daemon *d)
{
	watch_optional(d, &d->w_tags, kt_tags_fd(d->tags), "the tag limits", "queries go unanswered");
}

/* At the start, a watch the daemon cannot do without: its failure is the
 * start's (err one line). */
static int watch_required(struct kt_daemon *d, struct kt_watch *w, int fd, const char *what,
			  char *err, size_t errlen)
{
	int ret = kt_watch_add(d->epfd, w, fd, EPOLLIN);

	if (ret)
		snprintf(err, errlen, "cannot set up event loop: cannot watch %s: %s", what,
			 strerror(-ret));
	return ret;
}

int kt_daemon_setup_loop(struct kt_daemon *d, char *err, size_t errlen)
{
	struct itimerspec its = { 0 };
	sigset_t mask;
	int ret;

	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);
	d->sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	d->timerfd = timerfd_create(CLOCK_BOOTTIME, TFD_CLOEXEC | TFD_NONBLOCK);
	d->epfd = epoll_create1(EPOLL_CLOEXEC);
	d->ctl.epfd = d->epfd; /* where the control socket's connections go */
	if (d->sigfd < 0 || d->timerfd < 0 || d->epfd < 0) {
		snprintf(err, errlen, "cannot set up event loop: %s", strerror(errno));
		return -errno;
	}
	its.it_interval.tv_sec = d->cfg.tick_ns / 1000000000ull;
	its.it_interval.tv_nsec = d->cfg.tick_ns % 1000000000ull;
	its.it_value = its.it_interval;
	if (timerfd_settime(d->timerfd, 0, &its, NULL) < 0) {
		ret = -errno;
		snprintf(err, errlen, "cannot set up event loop: cannot arm the tick timer: %s",
			 strerror(-ret));
		return ret;
	}
	if ((ret = watch_required(d, &d->w_sig, d->sigfd, "signals", err, errlen)) ||
	    (ret = watch_required(d, &d->w_tick, d->timerfd, "the tick timer", err, errlen)) ||
	    (ret = watch_required(d, &d->ctl.w_listen, d->ctl.listenfd, "the control socket", err,
				  errlen)))
		return ret;
	if (d->kube &&
	    (ret = watch_required(d, &d->w_kube, kt_kube_fd(d->kube), "the pods watcher", err, errlen)))
		return ret;
	if (d->cfg.metrics_port) {
		const struct kt_metrics_route *routes;
		int n_routes = kt_report_http_routes(&routes);
		int mret = kt_metrics_start(&d->metrics, d->cfg.metrics_addr, d->cfg.metrics_port,
					    routes, n_routes, d, err, errlen);

		if (mret)
			return mret;
		ret = watch_required(d, &d->w_metrics, kt_metrics_fd(d->metrics), "the metrics endpoint",
				     err, errlen);
		if (ret) {
			kt_metrics_stop(d->metrics);
			d->metrics = NULL;
			return ret;
		}
	}
	if (d->bpf.events_fd >= 0) {
		d->events = ring_buffer__new(d->bpf.events_fd, on_event, d, NULL);
		ret = d->events ? kt_watch_add(d->epfd, &d->w_events, ring_buffer__epoll_fd(d->events),
					       EPOLLIN)
				: -errno;
		if (ret) {
			kt_warn("cannot read throttle events: %s", strerror(-ret));
			ring_buffer__free(d->events);
			d->events = NULL;
		}
	}
	kt_daemon_watch_pool(d);
	kt_daemon_watch_strict(d);
	kt_daemon_watch_tags(d);
	/* without inotify (no instances left) the tick rescans instead */
	int wret = kt_cgwatch_open(&d->cgwatch, KT_CGWATCH_MAX);

	if (wret == 0 && (wret = kt_watch_add(d->epfd, &d->w_cgwatch, kt_cgwatch_fd(d->cgwatch),
					      EPOLLIN)))
		kt_cgwatch_close(d->cgwatch);
	if (wret) {
		kt_warn("cannot watch cgroup directories (inotify): %s; rescanning every tick",
			strerror(-wret));
		d->cgwatch = NULL;
	}
	return 0;
}

void kt_daemon_tick(struct kt_daemon *d, uint64_t now)
{
	kt_ctl_tick(&d->controller, now);
	/* memberships and limits as committed: a second's cycle, a lookup per
	 * entry, off the hot path */
	if (now - d->last_verify_ns >= KT_VERIFY_EVERY_NS) {
		d->last_verify_ns = now;
		kt_verify_maps(&d->bpf, &d->map_fixes);
	}
	d->ticks++;
}

/* Members found anew. New groups (or gone ones) change the limits first:
 * applied as a reload, which finds every member anew. What
 * kt_refresh_members returns, or 1 after a regroup. */
static int rescan(struct kt_daemon *d)
{
	if (kt_daemon_regroup(d) > 0)
		return 1;
	return kt_refresh_members(d);
}

/* Counts the throttle events the kernel has queued (on_event): the only
 * place they are read. The ring's watch calls it as they come (the kernel
 * wakes the loop once the reader has caught up), and so does each tick, so
 * status, metrics and subscribers are never more than a tick behind even
 * if a wake-up was missed. Status and metrics only read the counts. */
static void consume_events(struct kt_daemon *d)
{
	if (!d->events)
		return;
	ring_buffer__consume(d->events);
	if (d->strict_kick) {
		/* a member wants a permit now, not at the tick */
		d->strict_kick = false;
		kt_strict_run(d->strict, kt_clock_ns());
	}
}

/* How late the tick ran: what a blocked loop would show first. */
static void note_tick(struct kt_daemon *d, uint64_t now, uint64_t expirations)
{
	if (d->last_tick_ns && now > d->last_tick_ns + d->cfg.tick_ns) {
		uint64_t late = now - d->last_tick_ns - d->cfg.tick_ns;

		if (late > d->tick_late_max_ns)
			d->tick_late_max_ns = late;
	}
	if (expirations > 1)
		d->ticks_missed += expirations - 1;
	d->last_tick_ns = now;
}

/* ---- the loop's watches: one callback per fd ---- */

/* SIGTERM/SIGINT stop, SIGHUP reloads. */
static void on_signal(struct kt_watch *w, uint32_t events)
{
	struct kt_daemon *d = w->ctx;
	struct signalfd_siginfo si;
	char err[KT_ERR_LEN];

	(void)events;
	while (read(d->sigfd, &si, sizeof(si)) == sizeof(si)) {
		if (si.ssi_signo == SIGHUP)
			kt_daemon_reload(d, err, sizeof(err));
		else
			d->running = false;
	}
}

/* The controller tick and what runs with it. */
static void on_tick(struct kt_watch *w, uint32_t events)
{
	struct kt_daemon *d = w->ctx;
	uint64_t expirations, now;

	(void)events;
	if (read(d->timerfd, &expirations, sizeof(expirations)) <= 0)
		return;
	consume_events(d);
	now = kt_clock_ns();
	note_tick(d, now, expirations);
	kt_daemon_tick(d, now);
	kt_audit_run_tick(&d->audit, &d->plan, d->bpf.pin_dir, &d->bpf.feat, now);
	kt_strict_tick(d->strict, now);
	kt_ctlserver_expire(&d->ctl, now);
	for (int k = 0; k < d->plan.n_limits; k++) {
		struct kt_limit_state *ls = &d->ls[k];

		coop_event(d, k, now);
		kt_daemon_notify_subscribers(d, k, now);
		if (ls->total_throttled != ls->throttled_seen)
			ls->throttled_ns += d->cfg.tick_ns;
		ls->throttled_seen = ls->total_throttled;
	}
	kt_metrics_run(d->metrics); /* its timeouts */
	/* the safety net under the watcher: every epoch, or every tick while
	 * it cannot watch */
	if (!d->cgwatch || d->cgwatch_err || now - d->last_prune_ns >= d->cfg.epoch_ns) {
		rescan(d);
		d->last_prune_ns = now;
	} else if (now >= kt_groups_next_expiry(d->groups)) {
		kt_daemon_regroup(d); /* a group unseen for its ttl goes */
	}
}

/* Throttle events from the kernel's ring buffer. */
static void on_events(struct kt_watch *w, uint32_t events)
{
	(void)events;
	consume_events(w->ctx);
}

static void on_metrics(struct kt_watch *w, uint32_t events)
{
	struct kt_daemon *d = w->ctx;

	(void)events;
	kt_metrics_run(d->metrics);
}

/* A directory came or went where a member may be. */
static void on_cgwatch(struct kt_watch *w, uint32_t events)
{
	struct kt_daemon *d = w->ctx;

	(void)events;
	if (kt_cgwatch_drain(d->cgwatch))
		rescan(d);
}

/* The pods watcher published: members, and the pod directories to
 * watch, may have changed. */
static void on_kube(struct kt_watch *w, uint32_t events)
{
	struct kt_daemon *d = w->ctx;

	(void)events;
	if (!kt_refresh_take_pods(d))
		return;
	/* a change of members re-arms the watches itself; else the pods'
	 * directories may still have changed */
	if (rescan(d) <= 0)
		kt_refresh_watch_members(d);
}

/* A store answer between ticks: act on it now. */
static void on_pool(struct kt_watch *w, uint32_t events)
{
	struct kt_daemon *d = w->ctx;
	uint64_t now = kt_clock_ns();

	(void)events;
	if (kt_pool_poll(d->pool, now))
		kt_ctl_apply_pool(&d->controller, now);
}

static void on_strict(struct kt_watch *w, uint32_t events)
{
	struct kt_daemon *d = w->ctx;

	(void)events;
	kt_strict_run(d->strict, kt_clock_ns());
}

static void on_tags(struct kt_watch *w, uint32_t events)
{
	struct kt_daemon *d = w->ctx;

	(void)events;
	kt_tags_run(d->tags, kt_clock_ns());
}

/* The config file's content changed (debounced). */
static void on_config(struct kt_watch *w, uint32_t events)
{
	struct kt_daemon *d = w->ctx;
	char err[KT_ERR_LEN];

	(void)events;
	if (kt_cfgwatch_run(d->cfw))
		kt_daemon_reload_changed(d, err, sizeof(err));
}

/* Every watch unregistered, with its callback; kt_daemon_start's first
 * step, so that a failed start or a stop finds none registered (the control
 * socket's, kt_ctlserver_init, just before). */
void kt_daemon_init_watches(struct kt_daemon *d)
{
	kt_watch_init(&d->w_sig, on_signal, d);
	kt_watch_init(&d->w_tick, on_tick, d);
	kt_watch_init(&d->w_events, on_events, d);
	kt_watch_init(&d->w_metrics, on_metrics, d);
	kt_watch_init(&d->w_cgwatch, on_cgwatch, d);
	kt_watch_init(&d->w_kube, on_kube, d);
	kt_watch_init(&d->w_pool, on_pool, d);
	kt_watch_init(&d->w_strict, on_strict, d);
	kt_watch_init(&d->w_tags, on_tags, d);
	kt_watch_init(&d->w_cfw, on_config, d);
}

int kt_daemon_run(struct kt_daemon *d)
{
	while (d->running) {
		int n = kt_evloop_wait(d->epfd, -1);

		if (n < 0) {
			kt_err("epoll_wait: %s", strerror(-n));
			return KT_EXIT_RUNTIME;
		}
	}
	return KT_EXIT_OK;
}
