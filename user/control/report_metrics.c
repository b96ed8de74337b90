/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The Prometheus page (report.h): every family kthrottle_*, one at a time
 * as the text format wants, and the metrics endpoint's routes. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "base/cgroup.h"
#include "base/cgwatch.h"
#include "control/daemon.h"
#include "control/features_report.h"
#include "control/health.h"
#include "control/inflight_report.h"
#include "control/report.h"
#include "members/groups.h"
#include "store/store.h"
#include "base/strbuf.h"
#include "control/report_int.h"

static void tag_metrics(const struct kt_tags *tags, struct kt_sbuf *b);
static void family_head(struct kt_sbuf *b, const char *name, const char *type, const char *help);

/* share: demand limits on Redis, per member: kthrottle_share (the rate its
 * bucket runs at: node scope, the node's one bucket), kthrottle_demand,
 * kthrottle_weight (weightBy only) and kthrottle_borrowed: its share above
 * its guaranteed part, the divided rate x weight / the weights summed
 * (the store's last answer), which members that want less leave to it;
 * with classes, what its class would get were every member busy
 * (class_entitled) x weight / the class's weights. */

/* Each class's part of `divided` were every member of every class busy:
 * in order, each up to its ceiling while the floors of the classes after
 * it stay free; or, peers, clamp(W_k l, floor, ceiling) filling divided.
 * Classes without members (no weights) get nothing. */
static void class_entitled(const struct kt_limit_cfg *c, const struct kt_pool_view *v, double *e)
{
	int n = v->share_classes;
	double rem = v->share_divided, lo = 0, hi = 0, sum = 0;

	if (!c->classes_siblings) {
		for (int k = 0; k < n; k++) {
			double owed = 0;

			for (int j = k + 1; j < n; j++)
				owed += v->share_class_weights[j] > 0 ? c->classes[j].floor : 0;
			e[k] = v->share_class_weights[k] > 0 ? fmax(0, fmin(c->classes[k].ceiling, rem - owed)) : 0;
			rem -= e[k];
		}
		return;
	}
	for (int k = 0; k < n; k++) {
		if (v->share_class_weights[k] > 0) {
			sum += c->classes[k].floor;
			hi = fmax(hi, c->classes[k].ceiling / v->share_class_weights[k]);
		}
	}
	for (int it = 0; it < 60; it++) {
		double mid = (lo + hi) / 2, s = 0;

		for (int k = 0; k < n; k++)
			if (v->share_class_weights[k] > 0)
				s += fmin(c->classes[k].ceiling,
					  fmax(c->classes[k].floor, v->share_class_weights[k] * mid));
		if (s <= rem)
			lo = mid;
		else
			hi = mid;
	}
	for (int k = 0; k < n; k++)
		e[k] = v->share_class_weights[k] <= 0 ? 0
		       : sum >= rem && sum > 0 ? c->classes[k].floor * rem / sum
					       : fmin(c->classes[k].ceiling,
						      fmax(c->classes[k].floor, v->share_class_weights[k] * lo));
}

static void share_metrics(const struct kt_daemon *d, struct kt_sbuf *b)
{
	static const char *const fam[4][2] = {
		{ "share", "Rate a member of a share: demand limit runs at now (tokens/s; node scope: the node's one bucket)." },
		{ "demand", "Demand a member of a share: demand limit reports (admitted + refused per second, with headroom)." },
		{ "weight", "A member's weight in its limit's weighted max-min share (weightBy)." },
		{ "borrowed", "Rate a member runs at above its guaranteed part of the pool (what it would get were every member busy: the divided rate x its weight / the weights summed; with classes, its class's part of it x its weight / the class's weights): what members wanting less leave to it." },
	};

	for (int f = 0; f < 4; f++) {
		bool head = false;

		for (int i = 0; i < d->plan.n_limits; i++) {
			const struct kt_limit_rt *l = &d->plan.limits[i];
			const struct kt_pool_view *v = kt_pool_view(d->pool, i);
			double entitled[KT_STORE_MAX_CLASSES] = { 0 };
			bool classes = v && v->share_classes > 0 && v->share_classes == l->cfg->n_classes;

			if (l->cfg->share != KT_SHARE_DEMAND || l->cfg->unit == KT_UNIT_CONCURRENT ||
			    (f == 2 && l->cfg->weight_by == KT_WEIGHT_NONE))
				continue;
			if (!head)
				family_head(b, fam[f][0], "gauge", fam[f][1]);
			head = true;
			if (f == 3 && classes)
				class_entitled(l->cfg, v, entitled);
			for (int j = 0; j < l->n_members; j++) {
				const struct kt_member_rt *m = &l->members[j];
				double rate = kt_report_member_rate(d, m), x;

				if (f == 0)
					x = rate;
				else if (f == 1)
					x = m->slot < KT_MAX_SLOTS ? d->slot_base[m->slot].demand : 0;
				else if (f == 2)
					x = m->weight;
				else if (classes && m->klass < v->share_classes)
					x = v->share_class_weights[m->klass] > 0
						    ? rate - entitled[m->klass] * kt_ctl_member_weight(&d->plan, d->pool, i, j) /
								     v->share_class_weights[m->klass]
						    : 0;
				else if (v && v->share_weights > 0 && v->share_divided > 0)
					x = rate - v->share_divided * kt_ctl_member_weight(&d->plan, d->pool, i, j) / v->share_weights;
				else
					x = 0;
				kt_sb_printf(b, "kthrottle_%s{limit=\"%s\",member=\"%s\"} %.6g\n", fam[f][0],
					     l->cfg->name, m->id, x > 0 ? x : 0);
			}
		}
	}
}

/* kthrottle_store_errors_total{limit,kind}: failed store calls by kind;
 * kthrottle_store_heartbeat_limits_total{path}: the script's steady path
 * against its full one, over all stores;
 * kthrottle_store_rtt_seconds{limit,quantile}, kthrottle_store_timeout_seconds{limit}:
 * the store's latency and the timeout it sets;
 * kthrottle_store_pool_over_max{limit}: the answered size above maxMembers. */
static void store_error_metrics(const struct kt_plan *plan, const struct kt_pool *pool,
				struct kt_sbuf *b)
{
	kt_sb_printf(b, "# HELP kthrottle_store_errors_total Failed store calls by kind of error.\n"
		     "# TYPE kthrottle_store_errors_total counter\n");
	for (int i = 0; i < plan->n_limits; i++) {
		struct kt_store_errors e;

		if (plan->limits[i].cfg->store.kind != KT_STORE_REDIS)
			continue;
		kt_pool_store_errors(pool, i, &e);
		for (int k = KT_SERR_NONE + 1; k < KT_SERR_KINDS; k++)
			kt_sb_printf(b, "kthrottle_store_errors_total{limit=\"%s\",kind=\"%s\"} %llu\n",
				  plan->limits[i].cfg->name, kt_store_err_kind_name(k),
				  (unsigned long long)e.count[k]);
	}
	struct kt_pool_work w;

	kt_pool_store_work(pool, &w);
	kt_sb_printf(b, "# HELP kthrottle_store_heartbeat_limits_total Limits the store's heartbeats answered, by the script's path: "
		     "steady (unchanged since the node's last heartbeat: a few commands), full, or quiet "
		     "(leases: node: not sent, nothing changed).\n"
		     "# TYPE kthrottle_store_heartbeat_limits_total counter\n"
		     "kthrottle_store_heartbeat_limits_total{path=\"steady\"} %llu\n"
		     "kthrottle_store_heartbeat_limits_total{path=\"full\"} %llu\n"
		     "kthrottle_store_heartbeat_limits_total{path=\"quiet\"} %llu\n"
		     "# HELP kthrottle_store_feed_changes_total Limits the node's inbox named as changed by another node "
		     "(leases: node): each sent again, at once or within the news budget.\n"
		     "# TYPE kthrottle_store_feed_changes_total counter\n"
		     "kthrottle_store_feed_changes_total %llu\n"
		     "# HELP kthrottle_store_feed_resyncs_total Heartbeats that sent every limit (leases: node): the "
		     "node's lease had lapsed, the inbox could not say, or another server was reached (a restart, a failover).\n"
		     "# TYPE kthrottle_store_feed_resyncs_total counter\n"
		     "kthrottle_store_feed_resyncs_total %llu\n"
		     "# HELP kthrottle_store_deferred_limits_total Limits a heartbeat left for the next one: not "
		     "answered yet (new, or joining again after the node's lease lapsed) and over the join budget, as at a fleet's start.\n"
		     "# TYPE kthrottle_store_deferred_limits_total counter\n"
		     "kthrottle_store_deferred_limits_total %llu\n"
		     "# HELP kthrottle_store_postponed_limits_total Limits another node changed that a heartbeat "
		     "answered as before and left for a later one (leases: node): over the news budget, Redis queueing.\n"
		     "# TYPE kthrottle_store_postponed_limits_total counter\n"
		     "kthrottle_store_postponed_limits_total %llu\n",
		     (unsigned long long)w.steady, (unsigned long long)w.full, (unsigned long long)w.quiet,
		     (unsigned long long)w.feed_changes, (unsigned long long)w.feed_resyncs,
		     (unsigned long long)w.deferred, (unsigned long long)w.postponed);
	kt_sb_printf(b, "# HELP kthrottle_store_round_trips_total Round trips to the stores (a pipeline counts once).\n"
		     "# TYPE kthrottle_store_round_trips_total counter\n"
		     "kthrottle_store_round_trips_total %llu\n"
		     "# HELP kthrottle_store_scripts_total Heartbeat scripts sent (EVALSHA): at most 128 units each, "
		     "a limit counting 1 plus its members, pipelined.\n"
		     "# TYPE kthrottle_store_scripts_total counter\n"
		     "kthrottle_store_scripts_total %llu\n"
		     "# HELP kthrottle_store_script_commands_total Redis commands the heartbeat scripts ran, as they count them: "
		     "the store's work for this node.\n"
		     "# TYPE kthrottle_store_script_commands_total counter\n"
		     "kthrottle_store_script_commands_total %llu\n"
		     "# HELP kthrottle_store_bytes_total Bytes of commands sent to and replies read from the stores.\n"
		     "# TYPE kthrottle_store_bytes_total counter\n"
		     "kthrottle_store_bytes_total{direction=\"sent\"} %llu\n"
		     "kthrottle_store_bytes_total{direction=\"received\"} %llu\n",
		     (unsigned long long)w.round_trips, (unsigned long long)w.scripts,
		     (unsigned long long)w.script_commands,
		     (unsigned long long)w.bytes_sent, (unsigned long long)w.bytes_received);
	kt_sb_printf(b, "# HELP kthrottle_store_rtt_seconds Store round trips answered, over the last %d: p50 and p99.\n"
		     "# TYPE kthrottle_store_rtt_seconds gauge\n", KT_STORE_RTT_WINDOW);
	for (int i = 0; i < plan->n_limits; i++) {
		struct kt_store_latency t;

		if (plan->limits[i].cfg->store.kind != KT_STORE_REDIS)
			continue;
		kt_pool_store_latency(pool, i, &t);
		if (!t.samples)
			continue; /* no figure rather than a 0 that reads as fast */
		kt_sb_printf(b, "kthrottle_store_rtt_seconds{limit=\"%s\",quantile=\"0.5\"} %.6f\n"
			     "kthrottle_store_rtt_seconds{limit=\"%s\",quantile=\"0.99\"} %.6f\n",
			     plan->limits[i].cfg->name, t.p50_us / 1e6, plan->limits[i].cfg->name,
			     t.p99_us / 1e6);
	}
	kt_sb_printf(b, "# HELP kthrottle_store_timeout_seconds The store's step timeout in force (redisStore.timeout, or the automatic one).\n"
		     "# TYPE kthrottle_store_timeout_seconds gauge\n");
	for (int i = 0; i < plan->n_limits; i++) {
		struct kt_store_latency t;

		if (plan->limits[i].cfg->store.kind != KT_STORE_REDIS)
			continue;
		kt_pool_store_latency(pool, i, &t);
		kt_sb_printf(b, "kthrottle_store_timeout_seconds{limit=\"%s\"} %.3f\n",
			     plan->limits[i].cfg->name, t.timeout_ms / 1e3);
	}
	kt_sb_printf(b, "# HELP kthrottle_store_pool_over_max Pool size the store answered above maxMembers (0: none).\n"
		     "# TYPE kthrottle_store_pool_over_max gauge\n");
	for (int i = 0; i < plan->n_limits; i++) {
		const struct kt_pool_view *v = kt_pool_view(pool, i);

		if (plan->limits[i].cfg->store.kind == KT_STORE_REDIS && v)
			kt_sb_printf(b, "kthrottle_store_pool_over_max{limit=\"%s\"} %d\n",
				  plan->limits[i].cfg->name, v->over_max);
	}
}

/* Strict limits' permits: reserved ahead cluster-wide, waiting
 * buckets, and what became of this node's permits. Only strict limits. */
static void strict_metrics(const struct kt_plan *plan, const struct kt_strict *strict,
			   struct kt_sbuf *b, uint64_t now)
{
	static const char *const outcome[] = { "granted", "used", "wasted", "backoff" };
	struct kt_strict_stat t;

	if (!strict)
		return;
	kt_sb_printf(b, "# HELP kthrottle_strict_reserved_permits Permits reserved ahead of now across all nodes, as of this node's last answer: (next permit time - now) / every.\n"
		     "# TYPE kthrottle_strict_reserved_permits gauge\n");
	for (int i = 0; i < plan->n_limits; i++) {
		kt_strict_get(strict, i, now, &t);
		if (t.strict)
			kt_sb_printf(b, "kthrottle_strict_reserved_permits{limit=\"%s\"} %.6g\n",
				  plan->limits[i].cfg->name, t.reserved);
	}
	kt_sb_printf(b, "# HELP kthrottle_strict_waiting Buckets of this node waiting for a permit.\n"
		     "# TYPE kthrottle_strict_waiting gauge\n");
	for (int i = 0; i < plan->n_limits; i++) {
		kt_strict_get(strict, i, now, &t);
		if (t.strict)
			kt_sb_printf(b, "kthrottle_strict_waiting{limit=\"%s\"} %d\n", plan->limits[i].cfg->name,
				  t.waiting);
	}
	kt_sb_printf(b, "# HELP kthrottle_strict_store_ok 0 while the store does not answer: a strict limit then admits nothing.\n"
		     "# TYPE kthrottle_strict_store_ok gauge\n");
	for (int i = 0; i < plan->n_limits; i++) {
		kt_strict_get(strict, i, now, &t);
		if (t.strict)
			kt_sb_printf(b, "kthrottle_strict_store_ok{limit=\"%s\"} %d\n", plan->limits[i].cfg->name,
				  !t.store_down);
	}
	kt_sb_printf(b, "# HELP kthrottle_strict_permits_total This node's permits: granted by the store, used, wasted (unused within expireAfter), and back-off answers.\n"
		     "# TYPE kthrottle_strict_permits_total counter\n");
	for (int i = 0; i < plan->n_limits; i++) {
		kt_strict_get(strict, i, now, &t);
		if (!t.strict)
			continue;
		uint64_t v[] = { t.granted, t.used, t.wasted, t.backoffs };

		for (int k = 0; k < 4; k++)
			kt_sb_printf(b, "kthrottle_strict_permits_total{limit=\"%s\",outcome=\"%s\"} %llu\n",
				  plan->limits[i].cfg->name, outcome[k], (unsigned long long)v[k]);
	}
}

/* A metric family's HELP and TYPE lines (name without the kthrottle_
 * prefix). */
static void family_head(struct kt_sbuf *b, const char *name, const char *type, const char *help)
{
	kt_sb_printf(b, "# HELP kthrottle_%s %s\n# TYPE kthrottle_%s %s\n", name, help, name, type);
}

/* A bucket slot's admitted (which 0) or throttled (1) tokens, 0 if unread. */
static uint64_t slot_count(const struct kt_daemon *d, uint32_t slot, int which)
{
	struct kt_counters c = { 0 };

	kt_bpf_read_counters(&d->bpf, slot, &c);
	return which ? c.throttled : c.admitted;
}

/* The per-limit families: one sample per limit, its value from value(). */
struct limit_family {
	const char *name, *type, *help;
	double (*value)(const struct kt_daemon *d, int i);
};

static double fam_limit_max(const struct kt_daemon *d, int i) { return d->plan.limits[i].cfg->rl.max; }
static double fam_pool_rate(const struct kt_daemon *d, int i) { return d->ls[i].pool_rate; }
static double fam_share(const struct kt_daemon *d, int i) { return d->ls[i].bucket_rate; }
static double fam_pool_size(const struct kt_daemon *d, int i) { return kt_pool_view(d->pool, i)->size; }
static double fam_pool_agreed(const struct kt_daemon *d, int i)
{
	return kt_pool_view(d->pool, i)->phase == KT_POOL_AGREED;
}
static double fam_members(const struct kt_daemon *d, int i) { return d->plan.limits[i].n_members; }
static double fam_admitted(const struct kt_daemon *d, int i) { return (double)d->ls[i].total_admitted; }
static double fam_throttled(const struct kt_daemon *d, int i) { return (double)d->ls[i].total_throttled; }
static double fam_throttled_s(const struct kt_daemon *d, int i) { return (double)d->ls[i].throttled_ns / 1e9; }
static double fam_shadow(const struct kt_daemon *d, int i) { return (double)d->ls[i].total_would_refuse; }
static double fam_fixes(const struct kt_daemon *d, int i) { return (double)d->ls[i].kernel_fixes; }

static const struct limit_family limit_families[] = {
	{ "limit_max", "gauge", "The limit's max, tokens/s (pool, all nodes).", fam_limit_max },
	{ "pool_rate", "gauge", "The pool's rate now (the ramp), tokens/s.", fam_pool_rate },
	{ "share", "gauge", "What one bucket of this node may admit now, tokens/s.", fam_share },
	{ "pool_size", "gauge", "Members sharing the pool (0: unknown).", fam_pool_size },
	{ "pool_agreed", "gauge", "1 when the store's last answer agreed on the size.", fam_pool_agreed },
	{ "members", "gauge", "This node's member cgroups.", fam_members },
	{ "admitted_total", "counter", "Tokens admitted on this node.", fam_admitted },
	{ "throttled_total", "counter", "Tokens refused on this node.", fam_throttled },
	{ "throttled_seconds_total", "counter", "Ticks in which the limit refused anything, in seconds.",
	  fam_throttled_s },
	{ "shadow_refused_total", "counter",
	  "Tokens a shadow limit (enforce: false) would have refused and let pass (within admitted_total).",
	  fam_shadow },
	{ "kernel_state_fixes_total", "counter",
	  "Rate fields of the limit's buckets found changed in kt_buckets (or kt_coop) and written back.",
	  fam_fixes },
};

char *kt_report_metrics(const struct kt_daemon *d)
{
	struct kt_sbuf b = { 0 };
	uint64_t now = kt_clock_ns();

	kt_sb_printf(&b, "# HELP kthrottle_up 1 while kthrottled runs.\n# TYPE kthrottle_up gauge\n"
		      "kthrottle_up 1\n"
		      "# TYPE kthrottle_reloads_total counter\nkthrottle_reloads_total %llu\n"
		      "# TYPE kthrottle_uptime_seconds gauge\nkthrottle_uptime_seconds %.3f\n"
		      "# HELP kthrottle_config_ok 1 when the config file's content is what runs, 0 while a rejected content is on disk.\n"
		      "# TYPE kthrottle_config_ok gauge\nkthrottle_config_ok %d\n"
		      "# HELP kthrottle_config_reload_failures_total Reloads rejected (the running configuration kept).\n"
		      "# TYPE kthrottle_config_reload_failures_total counter\n"
		      "kthrottle_config_reload_failures_total %llu\n",
		  (unsigned long long)d->reloads, (double)(now - d->started_ns) / 1e9,
		  d->cfg_rejected ? 0 : 1, (unsigned long long)d->reload_failures);
	kt_sb_printf(&b, "# HELP kthrottle_kernel_map_fixes_total Entries of the maps that decide who is limited and by what, found changed, missing or added and written back.\n"
		      "# TYPE kthrottle_kernel_map_fixes_total counter\n");
	for (int m = 0; m < KT_VERIFY_MAPS; m++)
		kt_sb_printf(&b, "kthrottle_kernel_map_fixes_total{map=\"%s\"} %llu\n",
			     kt_verify_map_name(m), (unsigned long long)d->map_fixes.n[m]);
	kt_report_health_metrics(d, &b);
	/* one family at a time, as the text format wants */
	for (size_t f = 0; f < sizeof(limit_families) / sizeof(limit_families[0]); f++) {
		const struct limit_family *fam = &limit_families[f];

		family_head(&b, fam->name, fam->type, fam->help);
		for (int i = 0; i < d->plan.n_limits; i++)
			kt_sb_printf(&b, "kthrottle_%s{limit=\"%s\"} %.17g\n", fam->name,
				     d->plan.limits[i].cfg->name, fam->value(d, i));
	}
	kt_sb_printf(&b, "# HELP kthrottle_throttle_events_total Throttle events (sampled: at most one per CPU per ms) by reason.\n"
		      "# TYPE kthrottle_throttle_events_total counter\n");
	for (int i = 0; i < d->plan.n_limits; i++)
		for (int r = 0; r < KT_REASON_COUNT; r++)
			kt_sb_printf(&b, "kthrottle_throttle_events_total{limit=\"%s\",reason=\"%s\"} %llu\n",
				  d->plan.limits[i].cfg->name, kt_report_reason_names[r],
				  (unsigned long long)d->ls[i].events[r]);
	strict_metrics(&d->plan, d->strict, &b, now);
	kt_inflight_metrics(&d->bpf, &d->plan, d->audit.corrections, &b, now);
	tag_metrics(d->tags, &b);
	kt_sb_printf(&b, "# HELP kthrottle_store_state 1 for the state the limit's store is in.\n"
		      "# TYPE kthrottle_store_state gauge\n");
	for (int i = 0; i < d->plan.n_limits; i++) {
		uint64_t since = 0;
		char ep[300];

		kt_sb_printf(&b, "kthrottle_store_state{limit=\"%s\",state=\"%s\"} 1\n",
			  d->plan.limits[i].cfg->name,
			  kt_pool_store_state(d->pool, i, &since, ep, sizeof(ep)));
	}
	store_error_metrics(&d->plan, d->pool, &b);
	/* the kernel's counters of each member's bucket, and of each join
	 * bucket: what cgroups below a pattern's directory, or pod cgroups in
	 * the kubelet's directories, sent before the daemon classified them */
	for (int k = 0; k < 2; k++) {
		const char *kind = k ? "throttled" : "admitted";
		char name[64];

		snprintf(name, sizeof(name), "member_%s_total", kind);
		family_head(&b, name, "counter", k ? "Tokens refused for one member cgroup (its bucket's counters)."
						   : "Tokens admitted for one member cgroup (its bucket's counters).");
		for (int i = 0; i < d->plan.n_limits; i++) {
			const struct kt_limit_rt *l = &d->plan.limits[i];

			for (int j = 0; j < l->n_members; j++)
				kt_sb_printf(&b, "kthrottle_%s{limit=\"%s\",member=\"%s\"} %llu\n", name,
					     l->cfg->name, l->members[j].id,
					     (unsigned long long)slot_count(d, l->members[j].slot, k));
		}
	}
	for (int k = 0; k < 2; k++) {
		const char *kind = k ? "throttled" : "admitted";
		char name[64];

		snprintf(name, sizeof(name), "unclassified_%s_total", kind);
		family_head(&b, name, "counter",
			    k ? "Tokens the limit's join bucket refused: cgroups not classified yet (below a pattern's directory, or pods a pods: selector may pick)."
			      : "Tokens the limit's join bucket admitted: cgroups not classified yet (below a pattern's directory, or pods a pods: selector may pick).");
		for (int i = 0; i < d->plan.n_limits; i++) {
			const struct kt_limit_rt *l = &d->plan.limits[i];

			if (l->has_join)
				kt_sb_printf(&b, "kthrottle_%s{limit=\"%s\"} %llu\n", name, l->cfg->name,
					     (unsigned long long)slot_count(d, l->join_slot, k));
		}
	}
	share_metrics(d, &b);
	/* groupBy: each limit's groups on this node, the bound of its series */
	bool any_group = false;

	for (int i = 0; i < d->src.n_limits; i++) {
		const struct kt_limit_cfg *c = &d->src.limits[i];
		bool other;
		int n = kt_report_template_groups(d, c, &other);

		if (n < 0)
			continue;
		if (!any_group)
			kt_sb_printf(&b, "# HELP kthrottle_groups Groups a groupBy limit has on this node (each a limit of its own, NAME@VALUE; at most maxGroups, then NAME@@other).\n"
				     "# TYPE kthrottle_groups gauge\n");
		any_group = true;
		kt_sb_printf(&b, "kthrottle_groups{limit=\"%s\"} %d\n", c->name, n + (other ? 1 : 0));
	}
	return kt_sb_take(&b);
}

static char *render_metrics(void *arg, unsigned *status)
{
	(void)status;
	return kt_report_metrics(arg);
}

static char *render_healthz(void *arg, unsigned *status)
{
	return kt_report_health(arg, false, status);
}

static char *render_livez(void *arg, unsigned *status)
{
	return kt_report_health(arg, true, status);
}

static const struct kt_metrics_route http_routes[] = {
	{ "/metrics", "text/plain; version=0.0.4", render_metrics },
	{ "/healthz", "text/plain", render_healthz },
	{ "/livez", "text/plain", render_livez },
};

int kt_report_http_routes(const struct kt_metrics_route **routes)
{
	*routes = http_routes;
	return (int)(sizeof(http_routes) / sizeof(http_routes[0]));
}

/* Tag limits: decisions, tags known, remote hits, and whether the exchange
 * works. */
static void tag_metrics(const struct kt_tags *tags, struct kt_sbuf *b)
{
	int n = kt_tags_count(tags);
	struct kt_tag_stat t;

	if (!n)
		return;
	kt_sb_printf(b, "# HELP kthrottle_tag_decisions_total Query-tag decisions of this node by verdict.\n"
		     "# TYPE kthrottle_tag_decisions_total counter\n");
	for (int i = 0; i < n; i++) {
		kt_tags_get(tags, i, &t);
		kt_sb_printf(b, "kthrottle_tag_decisions_total{tag_limit=\"%s\",verdict=\"admitted\"} %llu\n"
			     "kthrottle_tag_decisions_total{tag_limit=\"%s\",verdict=\"refused\"} %llu\n",
			  t.name, (unsigned long long)t.tab.admitted, t.name,
			  (unsigned long long)t.tab.refused);
	}
	kt_sb_printf(b, "# HELP kthrottle_tag_remote_hits_total Hits other nodes reported, taken from this node's buckets.\n"
		     "# TYPE kthrottle_tag_remote_hits_total counter\n");
	for (int i = 0; i < n; i++) {
		kt_tags_get(tags, i, &t);
		kt_sb_printf(b, "kthrottle_tag_remote_hits_total{tag_limit=\"%s\"} %llu\n", t.name,
			  (unsigned long long)t.tab.remote_hits);
	}
	kt_sb_printf(b, "# HELP kthrottle_tag_tags Tags this node keeps a bucket for.\n"
		     "# TYPE kthrottle_tag_tags gauge\n");
	for (int i = 0; i < n; i++) {
		kt_tags_get(tags, i, &t);
		kt_sb_printf(b, "kthrottle_tag_tags{tag_limit=\"%s\"} %llu\n", t.name,
			  (unsigned long long)t.tab.tags);
	}
	kt_sb_printf(b, "# HELP kthrottle_tag_exchange_ok 1 while the last exchange of hit counts succeeded (0 also without a redis store).\n"
		     "# TYPE kthrottle_tag_exchange_ok gauge\n");
	for (int i = 0; i < n; i++) {
		kt_tags_get(tags, i, &t);
		kt_sb_printf(b, "kthrottle_tag_exchange_ok{tag_limit=\"%s\"} %d\n", t.name,
			  t.exchange && t.store_ok);
	}
}
