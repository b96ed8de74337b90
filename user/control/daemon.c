/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "cgroup.h"
#include "cgwatch.h"
#include "ctlproto.h"
#include "daemon.h"
#include "health.h"
#include "log.h"
#include "metrics.h"
#include "resolve.h"
#include "store.h"

/* ---- control socket ---- */

struct sbuf {
	char *p;
	size_t len, cap;
	int oom;
};

static void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->oom)
		return;
	for (;;) {
		size_t room = b->cap - b->len;
		va_start(ap, fmt);
		n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? room : 0, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->oom = 1;
			return;
		}
		if (b->p && (size_t)n < room) {
			b->len += n;
			return;
		}
		size_t cap = (b->cap + n + 1) * 2;
		char *np = realloc(b->p, cap);
		if (!np) {
			b->oom = 1;
			return;
		}
		b->p = np;
		b->cap = cap;
	}
}

static void sb_json_str(struct sbuf *b, const char *s)
{
	sb_printf(b, "\"");
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			sb_printf(b, "\\%c", c);
		else if (c < 0x20)
			sb_printf(b, "\\u%04x", c);
		else
			sb_printf(b, "%c", c);
	}
	sb_printf(b, "\"");
}


/* Seconds until `until` (kt clock): -1 for no deadline, 0 once passed. */
static double left_s(uint64_t until, uint64_t now)
{
	if (!until)
		return -1;
	return until > now ? (double)(until - now) / 1e9 : 0;
}

static const char *const reason_names[KT_REASON_COUNT] = { "share", "fallback", "closed", "permit", "tag" };

/* Strict limits' permits: reserved ahead cluster-wide, waiting
 * buckets, and what became of this node's permits. Only strict limits. */
static void tag_metrics(struct kt_daemon *d, struct sbuf *b);

/* kthrottle_store_errors_total{limit,kind}: failed store calls by kind;
 * kthrottle_store_pool_over_max{limit}: the answered size above maxMembers. */
static void store_error_metrics(struct kt_daemon *d, struct sbuf *b)
{
	sb_printf(b, "# HELP kthrottle_store_errors_total Failed store calls by kind of error.\n"
		     "# TYPE kthrottle_store_errors_total counter\n");
	for (int i = 0; i < d->plan.n_limits; i++) {
		struct kt_store_errors e;

		if (d->plan.limits[i].cfg->store.kind != KT_STORE_REDIS)
			continue;
		kt_pool_store_errors(d->pool, i, &e);
		for (int k = KT_SERR_NONE + 1; k < KT_SERR_KINDS; k++)
			sb_printf(b, "kthrottle_store_errors_total{limit=\"%s\",kind=\"%s\"} %llu\n",
				  d->plan.limits[i].cfg->name, kt_store_err_kind_name(k),
				  (unsigned long long)e.count[k]);
	}
	sb_printf(b, "# HELP kthrottle_store_pool_over_max Pool size the store answered above maxMembers (0: none).\n"
		     "# TYPE kthrottle_store_pool_over_max gauge\n");
	for (int i = 0; i < d->plan.n_limits; i++) {
		const struct kt_pool_view *v = kt_pool_view(d->pool, i);

		if (d->plan.limits[i].cfg->store.kind == KT_STORE_REDIS && v)
			sb_printf(b, "kthrottle_store_pool_over_max{limit=\"%s\"} %d\n",
				  d->plan.limits[i].cfg->name, v->over_max);
	}
}

/* The store's last error (JSON members of "store", or a text line) and the
 * maxMembers anomaly. */
static void store_error_status(struct kt_daemon *d, struct sbuf *b, int i, bool json, uint64_t now)
{
	const struct kt_pool_view *v = kt_pool_view(d->pool, i);
	uint64_t since = 0;
	char ep[300];
	const char *st = kt_pool_store_state(d->pool, i, &since, ep, sizeof(ep));
	struct kt_store_errors e;
	double age;

	kt_pool_store_errors(d->pool, i, &e);
	age = e.since_ns && now > e.since_ns ? (double)(now - e.since_ns) / 1e9 : 0;
	if (json) {
		if (e.kind == KT_SERR_NONE) {
			sb_printf(b, ",\"last_error\":null");
		} else {
			sb_printf(b, ",\"last_error\":{\"kind\":\"%s\",\"text\":",
				  kt_store_err_kind_name(e.kind));
			sb_json_str(b, e.text);
			if (e.since_ns)
				sb_printf(b, ",\"since_s\":%.3f", age);
			else
				sb_printf(b, ",\"since_s\":null"); /* the episode is over */
			sb_printf(b, ",\"count\":%llu}", (unsigned long long)e.count[e.kind]);
		}
		if (v && v->over_max)
			sb_printf(b, ",\"anomaly\":{\"kind\":\"over_max_members\",\"size\":%d,"
				     "\"max_members\":%d}",
				  v->over_max, v->max_members);
		else
			sb_printf(b, ",\"anomaly\":null");
		return;
	}
	if (e.kind != KT_SERR_NONE && e.since_ns)
		sb_printf(b, "  store %s (%s since %.1fs, %llu so far: %s)\n",
			  strcmp(st, "up") ? st : "errors", kt_store_err_kind_name(e.kind), age,
			  (unsigned long long)e.count[e.kind], e.text);
	if (v && v->over_max)
		sb_printf(b, "  store anomaly: pool size %d above maxMembers %d (acted on: shares shrink)\n",
			  v->over_max, v->max_members);
}

static void strict_metrics(struct kt_daemon *d, struct sbuf *b, uint64_t now)
{
	static const char *const outcome[] = { "granted", "used", "wasted", "backoff" };
	struct kt_strict_stat t;

	if (!d->strict)
		return;
	sb_printf(b, "# HELP kthrottle_strict_reserved_permits Permits reserved ahead of now across all nodes, as of this node's last answer: (next permit time - now) / every.\n"
		     "# TYPE kthrottle_strict_reserved_permits gauge\n");
	for (int i = 0; i < d->plan.n_limits; i++) {
		kt_strict_get(d->strict, i, now, &t);
		if (t.strict)
			sb_printf(b, "kthrottle_strict_reserved_permits{limit=\"%s\"} %.6g\n",
				  d->plan.limits[i].cfg->name, t.reserved);
	}
	sb_printf(b, "# HELP kthrottle_strict_waiting Buckets of this node waiting for a permit.\n"
		     "# TYPE kthrottle_strict_waiting gauge\n");
	for (int i = 0; i < d->plan.n_limits; i++) {
		kt_strict_get(d->strict, i, now, &t);
		if (t.strict)
			sb_printf(b, "kthrottle_strict_waiting{limit=\"%s\"} %d\n", d->plan.limits[i].cfg->name,
				  t.waiting);
	}
	sb_printf(b, "# HELP kthrottle_strict_store_ok 0 while the store does not answer: a strict limit then admits nothing.\n"
		     "# TYPE kthrottle_strict_store_ok gauge\n");
	for (int i = 0; i < d->plan.n_limits; i++) {
		kt_strict_get(d->strict, i, now, &t);
		if (t.strict)
			sb_printf(b, "kthrottle_strict_store_ok{limit=\"%s\"} %d\n", d->plan.limits[i].cfg->name,
				  !t.store_down);
	}
	sb_printf(b, "# HELP kthrottle_strict_permits_total This node's permits: granted by the store, used, wasted (unused within expireAfter), and back-off answers.\n"
		     "# TYPE kthrottle_strict_permits_total counter\n");
	for (int i = 0; i < d->plan.n_limits; i++) {
		kt_strict_get(d->strict, i, now, &t);
		if (!t.strict)
			continue;
		uint64_t v[] = { t.granted, t.used, t.wasted, t.backoffs };

		for (int k = 0; k < 4; k++)
			sb_printf(b, "kthrottle_strict_permits_total{limit=\"%s\",outcome=\"%s\"} %llu\n",
				  d->plan.limits[i].cfg->name, outcome[k], (unsigned long long)v[k]);
	}
}

/* ---- health (rules in health.h) ---- */

struct health_snap {
	struct kt_health_in in;
	struct kt_health h;
	char store_why[400];
};

static int cmp_cgid(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static bool cg_linked(const uint64_t *ids, int n, uint64_t id)
{
	return n > 0 && bsearch(&id, ids, (size_t)n, sizeof(*ids), cmp_cgid);
}

/* Apply attaches a nested member's programs to its outermost member
 * ancestor only: a link on the cgroup or on any ancestor serves it. */
static bool member_linked(const struct kt_daemon *d, const struct kt_member_rt *m,
			  const uint64_t *ids, int n)
{
	size_t root = strlen(d->cg_mount);
	char p[PATH_MAX], *slash;
	uint64_t id;

	if (cg_linked(ids, n, m->cgid))
		return true;
	snprintf(p, sizeof(p), "%s", m->path);
	while ((slash = strrchr(p, '/')) && (size_t)(slash - p) >= root) {
		*slash = 0;
		if (!kt_cgroup_id(p, &id) && cg_linked(ids, n, id))
			return true;
	}
	return false;
}

static void health_snap(struct kt_daemon *d, struct health_snap *s)
{
	struct kt_health_in *in = &s->in;
	uint64_t *ids = NULL;
	int n;

	memset(s, 0, sizeof(*s));
	in->now_ns = kt_clock_ns();
	in->bpf_loaded = d->bpf.connect && d->bpf.sendmsg && d->bpf.egress && d->bpf.sock &&
			 d->bpf.sockops;
	n = kt_bpf_linked_cgroups(&d->bpf, &ids);
	for (int i = 0; i < d->plan.n_limits; i++) {
		const struct kt_limit_rt *l = &d->plan.limits[i];

		if (l->cfg->unit == KT_UNIT_REQUEST)
			continue; /* no cgroup, no link */
		for (int j = 0; j < l->n_members; j++) {
			if (n >= 0 && member_linked(d, &l->members[j], ids, n))
				continue;
			if (!in->unlinked++)
				in->unlinked_path = l->members[j].path;
		}
		if (l->cfg->store.kind == KT_STORE_REDIS) {
			uint64_t since = 0;
			char ep[300];
			const char *st = kt_pool_store_state(d->pool, i, &since, ep, sizeof(ep));

			in->uses_store = true;
			if ((!strcmp(st, "down") || !strcmp(st, "failing")) && !in->stores_down++)
				snprintf(s->store_why, sizeof(s->store_why),
					 "limit %s: redis %s %s for %.1fs", l->cfg->name, ep[0] ? ep : "?",
					 st[0] == 'd' ? "not answering" : "answering with errors",
					 since && in->now_ns > since ? (double)(in->now_ns - since) / 1e9 : 0);
		}
	}
	free(ids);
	in->store_why = s->store_why;
	in->apply_err = d->refresh_err;
	in->started_ns = d->started_ns;
	in->last_tick_ns = d->last_tick_ns;
	in->tick_ns = d->cfg.tick_ns;
	in->uses_kube = kt_config_uses_pods(&d->cfg);
	if (d->kube) {
		kt_kube_status(d->kube, &in->kube);
	} else if (in->uses_kube) {
		in->kube.state = KT_KUBE_UNREACHABLE;
		in->kube.since_ns = d->started_ns;
		snprintf(in->kube.error, sizeof(in->kube.error), "the pods watcher is not running");
	}
	kt_health_eval(in, &s->h);
}

/* The `health` (live: `health live`) reply, malloc'd. */
static char *health_reply(struct kt_daemon *d, bool live, unsigned *status)
{
	struct health_snap s;
	char *out = malloc(2048);

	health_snap(d, &s);
	if (status)
		*status = (live ? s.h.live : s.h.ready) ? 200 : 503;
	if (out)
		kt_health_format(&s.in, &s.h, live, out, 2048);
	return out;
}

static void health_metrics(struct kt_daemon *d, struct sbuf *b)
{
	struct health_snap s;

	health_snap(d, &s);
	sb_printf(b, "# HELP kthrottle_ready 1 when every component in use is ready (kthrottlectl health).\n"
		     "# TYPE kthrottle_ready gauge\nkthrottle_ready %d\n"
		     "# HELP kthrottle_component_up 1 when the component is ok (store: answering), by component in use.\n"
		     "# TYPE kthrottle_component_up gauge\n"
		     "kthrottle_component_up{component=\"kernel\"} %d\n",
		  s.h.ready, s.h.kernel_ok);
	if (s.in.uses_kube)
		sb_printf(b, "kthrottle_component_up{component=\"kubernetes\"} %d\n", s.h.kube_ok);
	if (s.in.uses_store)
		sb_printf(b, "kthrottle_component_up{component=\"store\"} %d\n", s.h.store_ok);
}

char *kt_daemon_metrics(struct kt_daemon *d)
{
	struct sbuf b = { 0 };
	uint64_t now = kt_clock_ns();

	if (d->events)
		ring_buffer__consume(d->events);
	sb_printf(&b, "# HELP kthrottle_up 1 while kthrottled runs.\n# TYPE kthrottle_up gauge\n"
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
	health_metrics(d, &b);
	/* one family at a time, as the text format wants */
	static const struct {
		const char *name, *type, *help;
	} fam[] = {
		{ "limit_max", "gauge", "The limit's max, tokens/s (pool, all nodes)." },
		{ "pool_rate", "gauge", "The pool's rate now (the ramp), tokens/s." },
		{ "share", "gauge", "What one bucket of this node may admit now, tokens/s." },
		{ "pool_size", "gauge", "Members sharing the pool (0: unknown)." },
		{ "pool_agreed", "gauge", "1 when the store's last answer agreed on the size." },
		{ "members", "gauge", "This node's member cgroups." },
		{ "admitted_total", "counter", "Tokens admitted on this node." },
		{ "throttled_total", "counter", "Tokens refused on this node." },
		{ "throttled_seconds_total", "counter", "Ticks in which the limit refused anything, in seconds." },
	};
	for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
		sb_printf(&b, "# HELP kthrottle_%s %s\n# TYPE kthrottle_%s %s\n", fam[f].name,
			  fam[f].help, fam[f].name, fam[f].type);
		for (int i = 0; i < d->plan.n_limits; i++) {
			const struct kt_limit_rt *l = &d->plan.limits[i];
			const struct kt_limit_state *s = &d->ls[i];
			const struct kt_pool_view *v = kt_pool_view(d->pool, i);
			double val;

			switch (f) {
			case 0: val = l->cfg->rl.max; break;
			case 1: val = s->pool_rate; break;
			case 2: val = s->bucket_rate; break;
			case 3: val = v->size; break;
			case 4: val = v->phase == KT_POOL_AGREED; break;
			case 5: val = l->n_members; break;
			case 6: val = (double)s->total_admitted; break;
			case 7: val = (double)s->total_throttled; break;
			default: val = (double)s->throttled_ns / 1e9; break;
			}
			sb_printf(&b, "kthrottle_%s{limit=\"%s\"} %.17g\n", fam[f].name, l->cfg->name, val);
		}
	}
	sb_printf(&b, "# HELP kthrottle_throttle_events_total Throttle events (sampled: at most one per CPU per ms) by reason.\n"
		      "# TYPE kthrottle_throttle_events_total counter\n");
	for (int i = 0; i < d->plan.n_limits; i++)
		for (int r = 0; r < KT_REASON_COUNT; r++)
			sb_printf(&b, "kthrottle_throttle_events_total{limit=\"%s\",reason=\"%s\"} %llu\n",
				  d->plan.limits[i].cfg->name, reason_names[r],
				  (unsigned long long)d->ls[i].events[r]);
	strict_metrics(d, &b, now);
	tag_metrics(d, &b);
	sb_printf(&b, "# HELP kthrottle_store_state 1 for the state the limit's store is in.\n"
		      "# TYPE kthrottle_store_state gauge\n");
	for (int i = 0; i < d->plan.n_limits; i++) {
		uint64_t since = 0;
		char ep[300];

		sb_printf(&b, "kthrottle_store_state{limit=\"%s\",state=\"%s\"} 1\n",
			  d->plan.limits[i].cfg->name,
			  kt_pool_store_state(d->pool, i, &since, ep, sizeof(ep)));
	}
	store_error_metrics(d, &b);
	for (int k = 0; k < 2; k++) {
		sb_printf(&b, "# HELP kthrottle_member_%s_total Tokens %s for one member cgroup (its bucket's counters).\n"
			      "# TYPE kthrottle_member_%s_total counter\n",
			  k ? "throttled" : "admitted", k ? "refused" : "admitted",
			  k ? "throttled" : "admitted");
		for (int i = 0; i < d->plan.n_limits; i++) {
			const struct kt_limit_rt *l = &d->plan.limits[i];

			for (int j = 0; j < l->n_members; j++) {
				struct kt_counters mc = { 0 };

				kt_bpf_read_counters(&d->bpf, l->members[j].slot, &mc);
				sb_printf(&b, "kthrottle_member_%s_total{limit=\"%s\",member=\"%s\"} %llu\n",
					  k ? "throttled" : "admitted", l->cfg->name, l->members[j].id,
					  (unsigned long long)(k ? mc.throttled : mc.admitted));
			}
		}
	}
	/* the join bucket's counters: what cgroups below a pattern's
	 * directory sent before the daemon classified them (limits with one) */
	for (int k = 0; k < 2; k++) {
		sb_printf(&b, "# HELP kthrottle_unclassified_%s_total Tokens the limit's join bucket %s: cgroups below a pattern's directory not classified yet.\n"
			      "# TYPE kthrottle_unclassified_%s_total counter\n",
			  k ? "throttled" : "admitted", k ? "refused" : "admitted",
			  k ? "throttled" : "admitted");
		for (int i = 0; i < d->plan.n_limits; i++) {
			const struct kt_limit_rt *l = &d->plan.limits[i];
			struct kt_counters jc = { 0 };

			if (!l->has_join)
				continue;
			kt_bpf_read_counters(&d->bpf, l->join_slot, &jc);
			sb_printf(&b, "kthrottle_unclassified_%s_total{limit=\"%s\"} %llu\n",
				  k ? "throttled" : "admitted", l->cfg->name,
				  (unsigned long long)(k ? jc.throttled : jc.admitted));
		}
	}
	if (b.oom) {
		free(b.p);
		return NULL;
	}
	return b.p;
}

static char *render_metrics(void *arg, unsigned *status)
{
	(void)status;
	return kt_daemon_metrics(arg);
}

static char *render_healthz(void *arg, unsigned *status)
{
	return health_reply(arg, false, status);
}

static char *render_livez(void *arg, unsigned *status)
{
	return health_reply(arg, true, status);
}

static const struct kt_metrics_route http_routes[] = {
	{ "/metrics", "text/plain; version=0.0.4", render_metrics },
	{ "/healthz", "text/plain", render_healthz },
	{ "/livez", "text/plain", render_livez },
};

/* The last throttle event's retry-after (ms; -1: closed) and age (s). */
static double last_retry_ms(const struct kt_limit_state *s)
{
	return s->last_retry_after_ns == ~0ULL ? -1.0 : (double)s->last_retry_after_ns / 1e6;
}

static double last_event_age_s(const struct kt_limit_state *s, uint64_t now)
{
	return now > s->last_event_ns ? (double)(now - s->last_event_ns) / 1e9 : 0.0;
}

/* "pattern", "path" or "pods": what found member m. */
static const char *found_by(const struct kt_limit_cfg *c, const struct kt_member_rt *m)
{
	if (m->entry == KT_ENTRY_PODS)
		return "pods";
	if (m->entry == KT_ENTRY_COOP)
		return "libkthrottle";
	return kt_path_is_pattern(c->cgroups[m->entry]) ? "pattern" : "path";
}

/* The entry that found m: the cgroups entry, or the pod "namespace/name". */
static const char *found_entry(const struct kt_limit_cfg *c, const struct kt_member_rt *m)
{
	if (m->entry == KT_ENTRY_COOP)
		return "kt_coop"; /* its entry: slot - KT_COOP_SLOT0 */
	return m->entry == KT_ENTRY_PODS ? m->pod : c->cgroups[m->entry];
}

/* The pods watcher's state: one line of text, or a "kubernetes" member of
 * the status object. */
static void kube_status(struct kt_daemon *d, struct sbuf *b, bool json, uint64_t now)
{
	struct kt_kube_status st;

	if (!d->kube)
		return;
	kt_kube_status(d->kube, &st);
	if (json) {
		sb_printf(b, ",\"kubernetes\":{\"api_server\":");
		sb_json_str(b, kt_kube_options(d->kube)->api_server);
		sb_printf(b, ",\"node\":");
		sb_json_str(b, kt_kube_options(d->kube)->node_name);
		sb_printf(b, ",\"state\":\"%s\",\"synced\":%s,\"since_s\":%.3f,\"pods\":%d,"
			     "\"resource_version\":",
			  kt_kube_state_name(st.state), st.synced ? "true" : "false",
			  now > st.since_ns ? (double)(now - st.since_ns) / 1e9 : 0.0, d->pods.n);
		sb_json_str(b, st.resource_version);
		sb_printf(b, ",\"lists\":%lu,\"watches\":%lu,\"relists\":%lu,\"skipped\":%lu,"
			     "\"http_status\":%ld,\"error\":",
			  st.lists, st.watches, st.relists, st.skipped, st.http_status);
		sb_json_str(b, st.error);
		sb_printf(b, "}");
		return;
	}
	sb_printf(b, "kubernetes %s  node %s  %s for %.1fs  %d pod(s) on this node%s  (lists %lu, watches %lu, relists %lu)\n",
		  kt_kube_options(d->kube)->api_server, kt_kube_options(d->kube)->node_name,
		  kt_kube_state_name(st.state),
		  now > st.since_ns ? (double)(now - st.since_ns) / 1e9 : 0.0, d->pods.n,
		  st.state == KT_KUBE_UNREACHABLE ? ", the last known" : "", st.lists, st.watches,
		  st.relists);
	if (st.error[0])
		sb_printf(b, "  kubernetes error: %s\n", st.error);
}

/* The tag limits: their buckets, query servers and exchange.
 * JSON: a "tags" array after "limits"; text: a table after the limits. */
static void tags_status(struct kt_daemon *d, struct sbuf *b, bool json, uint64_t now)
{
	int n = kt_tags_count(d->tags);

	if (json)
		sb_printf(b, ",\"tags\":[");
	else if (n)
		sb_printf(b, "%-16s %10s %8s %10s %12s %12s %12s %9s %s\n", "TAG_LIMIT", "RATE/s", "BURST",
			  "TAGS", "ADMITTED", "REFUSED", "REMOTE_HITS", "CLIENTS", "EXCHANGE");
	for (int i = 0; i < n; i++) {
		struct kt_tag_stat t;
		double age = -1;

		kt_tags_get(d->tags, i, &t);
		if (t.last_ok_ns && now > t.last_ok_ns)
			age = (double)(now - t.last_ok_ns) / 1e9;
		if (json) {
			sb_printf(b, "%s{\"name\":", i ? "," : "");
			sb_json_str(b, t.name);
			sb_printf(b,
				  ",\"rate\":%.6g,\"burst\":%llu,\"report_interval_ms\":%.3f,\"tags\":%llu,"
				  "\"admitted\":%llu,\"refused\":%llu,\"remote_hits\":%llu,\"evicted\":%llu,"
				  "\"expired\":%llu,\"query\":{\"ok\":%llu,\"no\":%llu,\"bad_lines\":%llu,"
				  "\"clients\":%llu,\"accepted\":%llu,\"clients_refused\":%llu,\"peers\":%llu,"
				  "\"evicted_idle\":%llu,\"evicted_peer_cap\":%llu,\"evicted_full\":%llu},"
				  "\"exchange\":{\"store\":\"%s\",\"store_ok\":%s,\"reports\":%llu,"
				  "\"errors\":%llu,\"tags_sent\":%llu,\"entries_read\":%llu,"
				  "\"remote_tags\":%llu,\"bad_remote\":%llu,\"last_ok_age_s\":%.3f,"
				  "\"last_error\":",
				  t.rate, (unsigned long long)t.burst, (double)t.report_ns / 1e6,
				  (unsigned long long)t.tab.tags, (unsigned long long)t.tab.admitted,
				  (unsigned long long)t.tab.refused, (unsigned long long)t.tab.remote_hits,
				  (unsigned long long)t.tab.evicted, (unsigned long long)t.tab.expired,
				  (unsigned long long)t.query.ok, (unsigned long long)t.query.no,
				  (unsigned long long)t.query.bad_lines, (unsigned long long)t.query.clients,
				  (unsigned long long)t.query.accepted, (unsigned long long)t.query.refused,
				  (unsigned long long)t.query.peers, (unsigned long long)t.query.evicted_idle,
				  (unsigned long long)t.query.evicted_peer_cap,
				  (unsigned long long)t.query.evicted_full,
				  t.exchange ? "redis" : "none", t.exchange && t.store_ok ? "true" : "false",
				  (unsigned long long)t.reports, (unsigned long long)t.report_errors,
				  (unsigned long long)t.tags_sent, (unsigned long long)t.remote_entries,
				  (unsigned long long)t.remote_tags, (unsigned long long)t.bad_remote, age);
			sb_json_str(b, t.last_error);
			sb_printf(b, "}");
			if (t.xdp)
				sb_printf(b,
					  ",\"xdp\":{\"interfaces\":%d,\"buckets\":%llu,\"passed\":%llu,"
					  "\"dropped\":%llu,\"hits_sent\":%llu,\"remote_hits\":%llu}",
					  t.ifaces, (unsigned long long)t.xdp_buckets,
					  (unsigned long long)t.xdp_admitted, (unsigned long long)t.xdp_dropped,
					  (unsigned long long)t.xdp_hits_sent,
					  (unsigned long long)t.xdp_remote_hits);
			sb_printf(b, "}");
		} else {
			char ex[400];

			if (!t.exchange)
				snprintf(ex, sizeof(ex), "none (local to this node)");
			else if (t.store_ok)
				snprintf(ex, sizeof(ex), "ok, last %.1fs ago", age);
			else if (t.report_errors)
				snprintf(ex, sizeof(ex), "FAILING (local counts only): %s", t.last_error);
			else
				snprintf(ex, sizeof(ex), "starting");
			sb_printf(b, "%-16s %10.3f %8llu %10llu %12llu %12llu %12llu %9llu %s\n", t.name,
				  t.rate, (unsigned long long)t.burst, (unsigned long long)t.tab.tags,
				  (unsigned long long)t.tab.admitted, (unsigned long long)t.tab.refused,
				  (unsigned long long)t.tab.remote_hits, (unsigned long long)t.query.clients,
				  ex);
			if (t.xdp)
				sb_printf(b, "  xdp on %d interface(s): %llu sources, passed %llu, dropped %llu, remote hits %llu\n",
					  t.ifaces, (unsigned long long)t.xdp_buckets,
					  (unsigned long long)t.xdp_admitted, (unsigned long long)t.xdp_dropped,
					  (unsigned long long)t.xdp_remote_hits);
		}
	}
	if (json)
		sb_printf(b, "]");
}

/* Tag limits: decisions, tags known, remote hits, and whether the exchange
 * works. */
static void tag_metrics(struct kt_daemon *d, struct sbuf *b)
{
	int n = kt_tags_count(d->tags);
	struct kt_tag_stat t;

	if (!n)
		return;
	sb_printf(b, "# HELP kthrottle_tag_decisions_total Query-tag decisions of this node by verdict.\n"
		     "# TYPE kthrottle_tag_decisions_total counter\n");
	for (int i = 0; i < n; i++) {
		kt_tags_get(d->tags, i, &t);
		sb_printf(b, "kthrottle_tag_decisions_total{tag_limit=\"%s\",verdict=\"admitted\"} %llu\n"
			     "kthrottle_tag_decisions_total{tag_limit=\"%s\",verdict=\"refused\"} %llu\n",
			  t.name, (unsigned long long)t.tab.admitted, t.name,
			  (unsigned long long)t.tab.refused);
	}
	sb_printf(b, "# HELP kthrottle_tag_remote_hits_total Hits other nodes reported, taken from this node's buckets.\n"
		     "# TYPE kthrottle_tag_remote_hits_total counter\n");
	for (int i = 0; i < n; i++) {
		kt_tags_get(d->tags, i, &t);
		sb_printf(b, "kthrottle_tag_remote_hits_total{tag_limit=\"%s\"} %llu\n", t.name,
			  (unsigned long long)t.tab.remote_hits);
	}
	sb_printf(b, "# HELP kthrottle_tag_tags Tags this node keeps a bucket for.\n"
		     "# TYPE kthrottle_tag_tags gauge\n");
	for (int i = 0; i < n; i++) {
		kt_tags_get(d->tags, i, &t);
		sb_printf(b, "kthrottle_tag_tags{tag_limit=\"%s\"} %llu\n", t.name,
			  (unsigned long long)t.tab.tags);
	}
	sb_printf(b, "# HELP kthrottle_tag_exchange_ok 1 while the last exchange of hit counts succeeded (0 also without a redis store).\n"
		     "# TYPE kthrottle_tag_exchange_ok gauge\n");
	for (int i = 0; i < n; i++) {
		kt_tags_get(d->tags, i, &t);
		sb_printf(b, "kthrottle_tag_exchange_ok{tag_limit=\"%s\"} %d\n", t.name,
			  t.exchange && t.store_ok);
	}
}

/* A strict limit's permits (nothing for other limits): the reserved
 * permits, what was granted, used and wasted, who waits, and whether the
 * store answers (if not, nothing is admitted). */
static void strict_status(struct kt_daemon *d, struct sbuf *b, int i, bool json, uint64_t now)
{
	struct kt_strict_stat t;

	kt_strict_get(d->strict, i, now, &t);
	if (!t.strict)
		return;
	if (json) {
		sb_printf(b,
			  "\"strict\":{\"every_ms\":%.3f,\"max_reserved\":%d,\"expire_after_ms\":%.3f,"
			  "\"store_ok\":%s,\"reserved_permits\":%.3f,\"waiting\":%d,\"armed\":%d,"
			  "\"next_due_ms\":%.3f,\"granted\":%llu,\"used\":%llu,\"wasted\":%llu,"
			  "\"backoffs\":%llu,\"store_errors\":%llu,\"last_error\":",
			  (double)t.every_ns / 1e6, t.max_reserved, (double)t.expire_ns / 1e6,
			  t.store_down ? "false" : "true", t.reserved, t.waiting, t.armed,
			  t.next_due_ns ? ((double)t.next_due_ns - (double)now) / 1e6 : 0.0,
			  (unsigned long long)t.granted, (unsigned long long)t.used,
			  (unsigned long long)t.wasted, (unsigned long long)t.backoffs,
			  (unsigned long long)t.store_errors);
		sb_json_str(b, t.last_error);
		sb_printf(b, "},");
		return;
	}
	sb_printf(b,
		  "  strict every %.1fms (maxReserved %d, expireAfter %.1fms)  reserved %.1f  waiting %d  "
		  "permits granted %llu used %llu wasted %llu  back-offs %llu%s%s\n",
		  (double)t.every_ns / 1e6, t.max_reserved, (double)t.expire_ns / 1e6, t.reserved, t.waiting,
		  (unsigned long long)t.granted, (unsigned long long)t.used, (unsigned long long)t.wasted,
		  (unsigned long long)t.backoffs,
		  t.store_down ? "  STORE UNREACHABLE, admitting nothing: " : "", t.store_down ? t.last_error : "");
}

static void utc_time(int64_t t, char *out, size_t len)
{
	struct tm tm;
	time_t tt = (time_t)t;

	if (!gmtime_r(&tt, &tm) || !strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm))
		snprintf(out, len, "%lld", (long long)t);
}

/* The config file: applied or rejected (since when, why), reload counts. */
static void config_status(const struct kt_daemon *d, struct sbuf *b, bool json)
{
	char at[32];

	if (json) {
		sb_printf(b, ",\"config\":{\"path\":");
		sb_json_str(b, d->config_path);
		sb_printf(b, ",\"state\":\"%s\",\"error\":", d->cfg_rejected ? "rejected" : "applied");
		sb_json_str(b, d->cfg_rejected ? d->cfg_error : "");
		if (d->cfg_rejected)
			sb_printf(b, ",\"rejected_since\":%lld", (long long)d->cfg_rejected_since);
		else
			sb_printf(b, ",\"rejected_since\":null");
		sb_printf(b, ",\"applied_at\":%lld,\"reloads\":%llu,\"reload_failures\":%llu,\"auto\":%s}",
			  (long long)d->cfg_applied_at, (unsigned long long)d->reloads,
			  (unsigned long long)d->reload_failures, d->cfw ? "true" : "false");
		return;
	}
	if (d->cfg_rejected) {
		utc_time(d->cfg_rejected_since, at, sizeof(at));
		sb_printf(b, "config %s: rejected since %s: %s\n", d->config_path, at, d->cfg_error);
		return;
	}
	utc_time(d->cfg_applied_at, at, sizeof(at));
	sb_printf(b, "config %s: applied %s (%llu reloads, %llu rejected; %s)\n", d->config_path, at,
		  (unsigned long long)d->reloads, (unsigned long long)d->reload_failures,
		  d->cfw ? "changes apply themselves" : "not watched: reload by hand");
}

/* A limit's node bucket (KT_BUCKET_POOL) and join bucket (KT_BUCKET_JOIN),
 * as the kernel has them at `now`: the rate and burst in force (the
 * lease's, the fallback's, or 0 when closed; kt_bucket_params) and the whole
 * tokens left; the join bucket's counters are what cgroups not classified
 * yet sent since it was made. Operators see whether the node as a whole, or
 * pods the daemon has not found yet, are what refuses. */
static void node_join_status(struct kt_daemon *d, struct sbuf *b, const struct kt_limit_rt *l,
			     bool json, uint64_t now)
{
	const struct kt_bucket *bk;
	struct kt_counters jc = { 0 };
	__u64 burst, interval;

	if (!d->bpf.buckets)
		return;
	if (l->has_pool && l->pool_slot < KT_MAX_BUCKETS) {
		bk = &d->bpf.buckets[l->pool_slot];
		interval = kt_bucket_params(bk, now, &burst);
		if (json)
			sb_printf(b, "\"node_bucket\":{\"slot\":%u,\"rate\":%.6g,\"burst\":%llu,\"tokens\":%llu},",
				  l->pool_slot, kt_rate_from_interval_fp(interval), (unsigned long long)burst,
				  (unsigned long long)kt_gcra_tokens_left(bk, now));
		else
			sb_printf(b, "  node bucket %u  rate %.3f/s  burst %llu  tokens %llu  (all members together)\n",
				  l->pool_slot, kt_rate_from_interval_fp(interval), (unsigned long long)burst,
				  (unsigned long long)kt_gcra_tokens_left(bk, now));
	}
	if (l->has_join && l->join_slot < KT_MAX_BUCKETS) {
		bk = &d->bpf.buckets[l->join_slot];
		interval = kt_bucket_params(bk, now, &burst);
		kt_bpf_read_counters(&d->bpf, l->join_slot, &jc);
		if (json)
			sb_printf(b, "\"join_bucket\":{\"slot\":%u,\"rate\":%.6g,\"burst\":%llu,\"tokens\":%llu,"
				     "\"admitted\":%llu,\"throttled\":%llu},",
				  l->join_slot, kt_rate_from_interval_fp(interval), (unsigned long long)burst,
				  (unsigned long long)kt_gcra_tokens_left(bk, now),
				  (unsigned long long)jc.admitted, (unsigned long long)jc.throttled);
		else
			sb_printf(b, "  join bucket %u  rate %.3f/s  tokens %llu  unclassified cgroups: admitted %llu  throttled %llu\n",
				  l->join_slot, kt_rate_from_interval_fp(interval),
				  (unsigned long long)kt_gcra_tokens_left(bk, now),
				  (unsigned long long)jc.admitted, (unsigned long long)jc.throttled);
	}
}

char *kt_daemon_status(struct kt_daemon *d, bool json)
{
	struct sbuf b = { 0 };
	uint64_t now = kt_clock_ns();
	int i, j;

	/* the events the loop has not read yet count too */
	if (d->events)
		ring_buffer__consume(d->events);

	if (json) {
		sb_printf(&b, "{\"node\":");
		sb_json_str(&b, d->cfg.node_name);
		sb_printf(&b, ",\"pin_dir\":");
		sb_json_str(&b, d->bpf.pin_dir);
		sb_printf(&b, ",\"attach\":");
		sb_json_str(&b, d->attach_desc);
		sb_printf(&b, ",\"uptime_s\":%.3f,\"ticks\":%llu,\"tick_late_max_ms\":%.3f,"
			     "\"ticks_missed\":%llu,\"reloads\":%llu",
			  (double)(now - d->started_ns) / 1e9, (unsigned long long)d->ticks,
			  (double)d->tick_late_max_ns / 1e6, (unsigned long long)d->ticks_missed,
			  (unsigned long long)d->reloads);
		config_status(d, &b, true);
		kube_status(d, &b, true, now);
		sb_printf(&b, ",\"limits\":[");
	} else {
		sb_printf(&b, "node %s  pins %s  up %.0fs  latest tick %.1fms late\n", d->cfg.node_name,
			  d->bpf.pin_dir, (double)(now - d->started_ns) / 1e9,
			  (double)d->tick_late_max_ns / 1e6);
		config_status(d, &b, false);
		sb_printf(&b, "attach %s\n", d->attach_desc);
		kube_status(d, &b, false, now);
		if (d->plan.n_limits) /* a node may have tag limits only */
			sb_printf(&b, "%-16s %-10s %-5s %-10s %12s %12s %6s %6s %12s %8s %12s %12s %10s\n",
			  "LIMIT", "UNIT", "SCOPE", "MODE", "POOL_RATE/s", "MAX/s", "RAMP%",
			  "UTIL%", "BUCKET_RATE", "BURST", "ADMITTED", "THROTTLED", "ADMIT/s");
	}
	for (i = 0; i < d->plan.n_limits; i++) {
		const struct kt_limit_rt *l = &d->plan.limits[i];
		struct kt_limit_state *s = &d->ls[i];
		const struct kt_limit_cfg *c = l->cfg;

		kt_ctl_read_counters(d, i);
		if (json) {
			sb_printf(&b, "%s{\"name\":", i ? "," : "");
			sb_json_str(&b, c->name);
			const struct kt_pool_view *v = kt_pool_view(d->pool, i);
			uint64_t st_since = 0;
			char ep[300] = "";
			const char *st = kt_pool_store_state(d->pool, i, &st_since, ep, sizeof(ep));

			sb_printf(&b,
				  ",\"id\":%u,\"unit\":\"%s\",\"scope\":\"%s\",\"mode\":\"%s\","
				  "\"pool_rate\":%.6g,\"min\":%.6g,\"max\":%.6g,\"ramp_progress_pct\":%.2f,"
				  "\"utilization_pct\":%.2f,\"bucket_rate\":%.6g,\"burst\":%.6g,"
				  "\"fallback_rate\":%.6g,\"admitted\":%llu,\"throttled\":%llu,"
				  "\"admitted_bytes\":%llu,\"throttled_bytes\":%llu,"
				  "\"admitted_per_s\":%.3f,",
				  l->id, kt_unit_name(c->unit), kt_scope_name(c->scope),
				  kt_mode_name(c->rl.mode), s->pool_rate, c->rl.min, c->rl.max,
				  kt_ramp_progress_pct(&s->ramp), kt_ramp_last_utilization_pct(&s->ramp),
				  s->bucket_rate, s->bucket_burst, s->fallback_rate,
				  (unsigned long long)s->admitted, (unsigned long long)s->throttled,
				  (unsigned long long)s->admitted_bytes,
				  (unsigned long long)s->throttled_bytes, s->epoch_used_rate);
			sb_printf(&b, "\"store\":{\"kind\":\"%s\",\"state\":\"%s\",\"since_s\":%.3f,\"endpoint\":",
				  kt_store_kind_name(c->store.kind), st,
				  st_since && now > st_since ? (double)(now - st_since) / 1e9 : 0.0);
			sb_json_str(&b, ep);
			store_error_status(d, &b, i, true, now);
			sb_printf(&b,
				  "},\"pool\":{\"phase\":\"%s\",\"size\":%d,\"live\":%d,\"agree\":%s,"
				  "\"share\":%.6g,\"reserved\":%.6g,\"last_heartbeat_age_s\":%.3f,"
				  "\"lease_left_s\":%.3f,\"fallback_left_s\":%.3f},",
				  kt_pool_phase_name(v->phase), v->size, v->live, v->agree ? "true" : "false",
				  kt_pool_bucket_rate(d->pool, i, s->pool_rate, 1), v->reserved,
				  v->last_answer_ns && now > v->last_answer_ns
					  ? (double)(now - v->last_answer_ns) / 1e9
					  : -1.0,
				  left_s(v->lease_until_ns, now), left_s(v->fallback_until_ns, now));
			/* after "pool": readers that take the first "share" key of a
			 * limit get the pool's */
			sb_printf(&b,
				  "\"throttle_events\":{\"share\":%llu,\"fallback\":%llu,\"closed\":%llu,"
				  "\"permit\":%llu},",
				  (unsigned long long)s->events[KT_REASON_SHARE],
				  (unsigned long long)s->events[KT_REASON_FALLBACK],
				  (unsigned long long)s->events[KT_REASON_CLOSED],
				  (unsigned long long)s->events[KT_REASON_PERMIT]);
			strict_status(d, &b, i, true, now);
			if (s->last_event_ns)
				sb_printf(&b,
					  "\"last_throttle\":{\"reason\":\"%s\",\"retry_after_ms\":%.3f,"
					  "\"age_s\":%.3f},",
					  reason_names[s->last_event_reason],
					  last_retry_ms(s), last_event_age_s(s, now));
			node_join_status(d, &b, l, true, now);
			sb_printf(&b, "\"cgroups\":[");
		} else {
			sb_printf(&b,
				  "%-16s %-10s %-5s %-10s %12.3f %12.3f %6.1f %6.1f %12.3f %8.0f %12llu %12llu %10.1f\n",
				  c->name, kt_unit_name(c->unit), kt_scope_name(c->scope),
				  kt_mode_name(c->rl.mode), s->pool_rate, c->rl.max,
				  kt_ramp_progress_pct(&s->ramp), kt_ramp_last_utilization_pct(&s->ramp),
				  s->bucket_rate, s->bucket_burst, (unsigned long long)s->admitted,
				  (unsigned long long)s->throttled, s->epoch_used_rate);
			const struct kt_pool_view *v = kt_pool_view(d->pool, i);
			uint64_t st_since = 0;
			char ep[300] = "";
			const char *st = kt_pool_store_state(d->pool, i, &st_since, ep, sizeof(ep));
			if (s->last_event_ns)
				sb_printf(&b,
					  "  throttle events: share %llu  fallback %llu  closed %llu  permit %llu  (last: %s, retry after %.1f ms, %.1fs ago)\n",
					  (unsigned long long)s->events[KT_REASON_SHARE],
					  (unsigned long long)s->events[KT_REASON_FALLBACK],
					  (unsigned long long)s->events[KT_REASON_CLOSED],
					  (unsigned long long)s->events[KT_REASON_PERMIT],
					  reason_names[s->last_event_reason],
					  last_retry_ms(s), last_event_age_s(s, now));
			strict_status(d, &b, i, false, now);
			if (c->rl.strict.on)
				goto members; /* no pool: the strict line says it all */
			sb_printf(&b, "  store %s%s%s  pool %s size %d live %d  share %.3f/s",
				  kt_store_kind_name(c->store.kind), ep[0] ? " " : "", ep,
				  kt_pool_phase_name(v->phase), v->size, v->live,
				  kt_pool_bucket_rate(d->pool, i, s->pool_rate, 1));
			if (c->store.kind == KT_STORE_REDIS) {
				if (st_since && now > st_since)
					sb_printf(&b, " (store %s for %.1fs", st, (double)(now - st_since) / 1e9);
				else
					sb_printf(&b, " (store %s", st);
				if (v->last_answer_ns && now > v->last_answer_ns)
					sb_printf(&b, ", last heartbeat %.1fs ago",
						  (double)(now - v->last_answer_ns) / 1e9);
				else
					sb_printf(&b, ", no answer yet");
				if (v->lease_until_ns > now)
					sb_printf(&b, ", lease %.1fs left)", left_s(v->lease_until_ns, now));
				else
					sb_printf(&b, ", lease expired)");
				if (v->reserved > 0)
					sb_printf(&b, "  held for lapsed members %.3f/s", v->reserved);
			}
			sb_printf(&b, "\n");
			if (c->store.kind == KT_STORE_REDIS)
				store_error_status(d, &b, i, false, now);
			node_join_status(d, &b, l, false, now);
		}
members:
		for (j = 0; j < l->n_members; j++) {
			const struct kt_member_rt *m = &l->members[j];
			struct kt_counters mc = { 0 };
			double rate;

			kt_bpf_read_counters(&d->bpf, m->slot, &mc);
			/* the rate the kernel runs this member's bucket at now */
			rate = d->bpf.buckets && m->slot < KT_MAX_SLOTS &&
					       (d->bpf.coop || !kt_slot_is_coop(m->slot))
				       ? kt_rate_from_interval_fp(KT_READ_ONCE(
						 kt_bpf_bucket(&d->bpf, m->slot)->interval_fp))
				       : 0;
			if (json) {
				sb_printf(&b, "%s{\"member_id\":", j ? "," : "");
				sb_json_str(&b, m->id);
				sb_printf(&b, ",\"path\":");
				sb_json_str(&b, m->path);
				/* how it was found: the config's entry */
				sb_printf(&b, ",\"found_by\":\"%s\",\"entry\":", found_by(c, m));
				sb_json_str(&b, found_entry(c, m));
				sb_printf(&b,
					  ",\"cgroup_id\":%llu,\"slot\":%u,\"admitted\":%llu,\"throttled\":%llu,"
					  "\"rate\":%.6g",
					  (unsigned long long)m->cgid, m->slot,
					  (unsigned long long)mc.admitted,
					  (unsigned long long)mc.throttled, rate);
				if (c->share == KT_SHARE_DEMAND)
					sb_printf(&b, ",\"demand\":%.6g", d->slot_base[m->slot].demand);
				sb_printf(&b, "}");
			} else {
				if (m->entry == KT_ENTRY_COOP)
					sb_printf(&b, "  member %s  (libkthrottle)  kt_coop entry %u  rate %.3f/s",
						  m->id, m->slot - KT_COOP_SLOT0, rate);
				else
					sb_printf(&b, "  member %s  cgroup %s  (%s %s)  bucket %u%s  rate %.3f/s",
						  m->id, m->path, found_by(c, m), found_entry(c, m),
						  m->slot, c->scope == KT_SCOPE_NODE ? " (shared)" : "",
						  rate);
				if (c->share == KT_SHARE_DEMAND)
					sb_printf(&b, "  demand %.3f/s", d->slot_base[m->slot].demand);
				sb_printf(&b, "  admitted %llu  throttled %llu\n",
					  (unsigned long long)mc.admitted, (unsigned long long)mc.throttled);
			}
		}
		if (json)
			sb_printf(&b, "]}");
	}
	if (json)
		sb_printf(&b, "]");
	tags_status(d, &b, json, now);
	if (json)
		sb_printf(&b, "}\n");
	if (b.oom) {
		free(b.p);
		return NULL;
	}
	return b.p;
}

/* A client slot reads its command line, then writes the reply. Replies are
 * queued (struct kt_client.out) and sent non-blocking as the socket drains
 * (EPOLLOUT); a client that has not taken all of it KT_CLIENT_TIMEOUT_NS
 * after it was queued is dropped, so a client that never reads cannot stall
 * the loop. */

_Static_assert(sizeof(((struct kt_client *)0)->buf) >= KT_CTL_MAX_LINE,
	       "a client's buffer holds a whole command line");

static struct kt_client_out *client_out(struct kt_daemon *d, struct kt_client *c)
{
	(void)d;
	return &c->out;
}

static void client_close(struct kt_daemon *d, struct kt_client *c)
{
	struct kt_client_out *o = client_out(d, c);
	int ret = kt_watch_del(d->epfd, &c->w);

	if (ret) /* the close below takes it out of the set all the same */
		kt_warn("control socket: cannot unwatch a client connection: %s", strerror(-ret));
	close(c->fd);
	c->fd = -1;
	c->len = 0;
	c->subscribed = c->throttled = false;
	free(o->p);
	o->p = NULL;
	o->len = o->off = 0;
}

/* What the client's watch waits for changed (ret from kt_watch_mod): on a
 * failure the loop would no longer serve it, so it is dropped. */
static void client_watch(struct kt_daemon *d, struct kt_client *c, uint32_t events)
{
	int ret = kt_watch_mod(d->epfd, &c->w, events);

	if (ret) {
		kt_warn("control socket: cannot watch a client connection: %s; closing it",
			strerror(-ret));
		client_close(d, c);
	}
}

/* Best effort and never blocking: a last word to a client being dropped. */
static void client_say(struct kt_client *c, const char *s)
{
	ssize_t r = send(c->fd, s, strlen(s), MSG_NOSIGNAL | MSG_DONTWAIT);

	(void)r;
}

/* Sends what the socket takes now; closes once all is sent or on error. */
static void client_flush(struct kt_daemon *d, struct kt_client *c)
{
	struct kt_client_out *o = client_out(d, c);

	while (o->off < o->len) {
		ssize_t w = send(c->fd, o->p + o->off, o->len - o->off, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return; /* EPOLLOUT resumes */
		if (w <= 0)
			break; /* client gone */
		o->off += (size_t)w;
	}
	if (c->subscribed && o->off == o->len) {
		/* all sent: wait for the next line, and notice a hang-up */
		free(o->p);
		o->p = NULL;
		o->len = o->off = 0;
		client_watch(d, c, EPOLLIN);
		return;
	}
	client_close(d, c);
}

/* Queues a line to a subscriber, never waiting on it: one that lets
 * KT_SUB_BACKLOG_MAX bytes pile up is dropped. */
static void subscriber_say(struct kt_daemon *d, struct kt_client *c, const char *line)
{
	struct kt_client_out *o = client_out(d, c);
	size_t n = strlen(line);
	char *p;

	if (o->len - o->off + n > KT_SUB_BACKLOG_MAX || !(p = realloc(o->p, o->len + n + 1))) {
		client_close(d, c);
		return;
	}
	if (o->off == o->len)
		c->since_ns = kt_clock_ns();
	memcpy(p + o->len, line, n + 1);
	o->p = p;
	o->len += n;
	client_flush(d, c);
	if (c->fd >= 0 && o->p)
		client_watch(d, c, EPOLLIN | EPOLLOUT);
}

/* Subscribers of limit i: "throttled" at its first refusal after a quiet
 * spell (from an event), "resumed" once no refusal was reported for two
 * ticks (from the tick). */
static void notify_subscribers(struct kt_daemon *d, int i, uint64_t now)
{
	const struct kt_limit_state *s = &d->ls[i];
	const char *name = d->plan.limits[i].cfg->name;
	bool refusing = s->last_event_ns && now - s->last_event_ns <= 2 * d->cfg.tick_ns;
	char line[160];

	for (int k = 0; k < KT_MAX_CLIENTS; k++) {
		struct kt_client *c = &d->clients[k];

		if (c->fd < 0 || !c->subscribed || strcmp(c->sub_limit, name) || c->throttled == refusing)
			continue;
		if (refusing)
			snprintf(line, sizeof(line), "throttled %s reason=%s retry_after_ms=%.3f\n", name,
				 reason_names[s->last_event_reason], last_retry_ms(s));
		else
			snprintf(line, sizeof(line), "resumed %s\n", name);
		c->throttled = refusing;
		subscriber_say(d, c, line);
	}
}

/* Queues `out` (malloc'd, taken over; NULL: out of memory) as the reply. */
static void client_reply(struct kt_daemon *d, struct kt_client *c, char *out)
{
	struct kt_client_out *o = client_out(d, c);

	if (!out) {
		client_say(c, "error: out of memory\n");
		client_close(d, c);
		return;
	}
	o->p = out;
	o->len = strlen(out);
	o->off = 0;
	c->since_ns = kt_clock_ns(); /* the drain deadline counts from here */
	client_flush(d, c);
	/* what did not fit waits for EPOLLOUT; nothing more is read (one
	 * command per connection) */
	if (c->fd >= 0)
		client_watch(d, c, EPOLLOUT);
}

/* The reply to a parsed command (or parse error), malloc'd; NULL if out of
 * memory. */
static char *command_reply(struct kt_daemon *d, int cmd)
{
	char err[KT_ERR_LEN], *out;

	switch (cmd) {
	case KT_CTL_STATUS:
	case KT_CTL_STATUS_JSON:
		return kt_daemon_status(d, cmd == KT_CTL_STATUS_JSON);
	case KT_CTL_RELOAD:
		if (kt_daemon_reload(d, err, sizeof(err)) == 0)
			return strdup("ok: reloaded\n");
		return asprintf(&out, "error: %s\n", err) < 0 ? NULL : out;
	case KT_CTL_PING:
		return strdup("ok: pong\n");
	case KT_CTL_HEALTH:
	case KT_CTL_HEALTH_LIVE:
		return health_reply(d, cmd == KT_CTL_HEALTH_LIVE, NULL);
	default:
		return strdup(kt_ctl_error_reply(cmd) ? kt_ctl_error_reply(cmd) : "error: bad command\n");
	}
}

/* "subscribe NAME": the connection becomes a subscriber of limit NAME. */
static void client_subscribe(struct kt_daemon *d, struct kt_client *c)
{
	char name[KT_NAME_LEN], line[96];
	int subs = 0, i;

	kt_ctl_subscribe_name(c->buf, name, sizeof(name));
	for (i = 0; i < d->plan.n_limits; i++)
		if (!strcmp(d->plan.limits[i].cfg->name, name))
			break;
	for (int k = 0; k < KT_MAX_CLIENTS; k++)
		subs += d->clients[k].fd >= 0 && d->clients[k].subscribed;
	if (i == d->plan.n_limits || subs >= KT_MAX_SUBSCRIBERS) {
		char *msg = NULL;

		if (i < d->plan.n_limits)
			msg = strdup("error: too many subscribers\n");
		else if (asprintf(&msg, "error: no limit named %s\n", name) < 0)
			msg = NULL;
		client_reply(d, c, msg);
		return;
	}
	c->subscribed = true;
	c->throttled = false;
	snprintf(c->sub_limit, sizeof(c->sub_limit), "%s", name);
	snprintf(line, sizeof(line), "ok: subscribed %s\n", name);
	subscriber_say(d, c, line);
	if (c->fd >= 0)
		notify_subscribers(d, i, kt_clock_ns()); /* already refusing: say so */
}

static void client_readable(struct kt_daemon *d, struct kt_client *c)
{
	ssize_t r;
	int cmd;

	if (c->subscribed) {
		char sink[256];

		/* a subscriber says nothing more; EOF is its hang-up */
		r = read(c->fd, sink, sizeof(sink));
		if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
			client_close(d, c);
		return;
	}
	r = read(c->fd, c->buf + c->len, sizeof(c->buf) - c->len);
	if (r <= 0) {
		if (r < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		client_close(d, c);
		return;
	}
	c->len += (size_t)r;
	cmd = kt_ctl_parse(c->buf, c->len);
	if (cmd == KT_CTL_SUBSCRIBE)
		client_subscribe(d, c);
	else if (cmd != KT_CTL_INCOMPLETE)
		client_reply(d, c, command_reply(d, cmd));
}

/* A slot holds a client that has not sent its line yet or has not taken its
 * reply yet. Past the timeout it is stuck, idle or not reading: it must not
 * keep others out of the daemon. */
static void expire_clients(struct kt_daemon *d, uint64_t now)
{
	for (int i = 0; i < KT_MAX_CLIENTS; i++) {
		struct kt_client *c = &d->clients[i];

		/* a subscriber waits as long as it likes, but does not leave
		 * lines unread for longer than the timeout */
		if (c->fd >= 0 && c->subscribed && !client_out(d, c)->p)
			continue;
		if (c->fd >= 0 && now - c->since_ns > KT_CLIENT_TIMEOUT_NS) {
			if (!client_out(d, c)->p)
				client_say(c, "error: timed out waiting for a command line\n");
			client_close(d, c);
		}
	}
}

/* A client's watch: its reply drains, or its line (or hang-up) comes in. */
static void on_client(struct kt_watch *w, uint32_t events)
{
	struct kt_client *c = kt_container_of(w, struct kt_client, w);
	struct kt_daemon *d = w->ctx;

	(void)events;
	if (c->fd >= 0 && client_out(d, c)->p)
		client_flush(d, c);
	else if (c->fd >= 0)
		client_readable(d, c);
}

static void accept_client(struct kt_daemon *d)
{
	int fd = accept4(d->listenfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	int i, ret;

	if (fd < 0)
		return;
	for (i = 0; i < KT_MAX_CLIENTS; i++)
		if (d->clients[i].fd < 0)
			break;
	if (i == KT_MAX_CLIENTS) {
		/* full of slow clients: the oldest makes room, since a live
		 * client sends its line right after connecting and reads its
		 * reply right after that (subscribers, at most half, stay) */
		i = -1;
		for (int k = 0; k < KT_MAX_CLIENTS; k++)
			if (!d->clients[k].subscribed &&
			    (i < 0 || d->clients[k].since_ns < d->clients[i].since_ns))
				i = k;
		if (i < 0)
			i = 0;
		if (!client_out(d, &d->clients[i])->p)
			client_say(&d->clients[i], "error: too many clients, dropped while waiting for a command line\n");
		client_close(d, &d->clients[i]);
	}
	d->clients[i].fd = fd;
	d->clients[i].len = 0;
	d->clients[i].since_ns = kt_clock_ns();
	ret = kt_watch_add(d->epfd, &d->clients[i].w, fd, EPOLLIN);
	if (ret) {
		kt_warn("control socket: cannot watch a new client connection: %s; closing it",
			strerror(-ret));
		client_close(d, &d->clients[i]);
	}
}

/* The directory the socket lives in, created when missing. */
static int mkdir_parent(const char *path)
{
	char buf[PATH_MAX];
	char *slash;

	snprintf(buf, sizeof(buf), "%s", path);
	slash = strrchr(buf, '/');
	if (!slash || slash == buf)
		return 0;
	*slash = 0;
	return kt_mkdir_p(buf, 0755);
}

/* Whether a socket file has a listener: 0 if connecting is refused (stale),
 * -EADDRINUSE if it answers or its backlog is full, else -errno. Never
 * blocks on a busy listener. */
static int socket_in_use(const struct sockaddr_un *sa)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), ret = 0;

	if (fd < 0)
		return -errno;
	if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0 || errno == EAGAIN ||
	    errno == EINPROGRESS)
		ret = -EADDRINUSE;
	else if (errno != ECONNREFUSED)
		ret = -errno;
	close(fd);
	return ret;
}

static int open_control_socket(struct kt_daemon *d, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	const char *path = d->cfg.socket_path;
	int fd, ret;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "socket path %s: longer than %zu bytes", path,
			 sizeof(sa.sun_path) - 1);
		return -ENAMETOOLONG;
	}
	strcpy(sa.sun_path, path);
	/* Only a stale socket is ever removed: whatever else is at the path
	 * (the config file, a symlink, a directory) is someone's file. */
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			snprintf(err, errlen, "socket path %s exists and is not a socket: not replacing it",
				 path);
			return -EEXIST;
		}
		ret = socket_in_use(&sa);
		if (ret == -EADDRINUSE) {
			snprintf(err, errlen, "another kthrottled is running on %s", path);
			return ret;
		}
		if (ret) {
			snprintf(err, errlen, "socket path %s: cannot tell whether it is in use: %s", path,
				 strerror(-ret));
			return ret;
		}
		if (unlink(path) < 0 && errno != ENOENT) {
			ret = -errno;
			snprintf(err, errlen, "cannot remove stale socket %s: %s", path, strerror(-ret));
			return ret;
		}
	} else if (errno != ENOENT) {
		ret = -errno;
		snprintf(err, errlen, "socket path %s: %s", path, strerror(-ret));
		return ret;
	} else {
		ret = mkdir_parent(path);
		if (ret) {
			snprintf(err, errlen, "cannot create directory for %s: %s", path, strerror(-ret));
			return ret;
		}
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 16) < 0) {
		ret = -errno;
		snprintf(err, errlen, "cannot listen on %s: %s", path, strerror(-ret));
		if (fd >= 0)
			close(fd);
		return ret;
	}
	chmod(path, 0600);
	d->listenfd = fd;
	return 0;
}

/* ---- lifecycle ---- */

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
		if ((e->reason == KT_REASON_PERMIT || e->reason == KT_REASON_CLOSED) &&
		    kt_strict_refused(d->strict, e->slot, e->ts_ns))
			d->strict_kick = true;
		s->last_event_ns = e->ts_ns;
		/* a strict bucket waiting for a permit is not closed */
		s->last_retry_after_ns = e->reason == KT_REASON_PERMIT && e->retry_after_ns == ~0ULL
						 ? KT_STRICT_RETRY_NS
						 : e->retry_after_ns;
		s->last_event_reason = e->reason;
		notify_subscribers(d, i, kt_clock_ns());
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
	__u64 wait = 0;

	if (l->cfg->unit != KT_UNIT_REQUEST || !l->n_members ||
	    s->total_throttled == s->throttled_seen || !d->bpf.coop ||
	    !kt_slot_is_coop(l->members[0].slot))
		return;
	b = kt_bpf_bucket(&d->bpf, l->members[0].slot);
	wait = __atomic_load_n(&d->bpf.coop[l->members[0].slot - KT_COOP_SLOT0].last_wait,
			       __ATOMIC_RELAXED);
	s->last_event_reason = kt_bucket_reason(b, now);
	s->last_retry_after_ns = s->last_event_reason == KT_REASON_CLOSED ? ~0ULL : wait;
	s->last_event_ns = now;
	s->events[s->last_event_reason]++;
}

/* Takes w out of the loop before its owner closes the fd (a reload
 * replaces it); a refusal is logged, the close removes it all the same. */
static void unwatch(struct kt_daemon *d, struct kt_watch *w, const char *what)
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
static void watch_pool(struct kt_daemon *d)
{
	watch_optional(d, &d->w_pool, kt_pool_fd(d->pool), "the store's answers",
		       "they are applied at each tick");
}

/* The strict controller's timer and store answers (w_strict). */
static void watch_strict(struct kt_daemon *d)
{
	watch_optional(d, &d->w_strict, kt_strict_fd(d->strict), "the strict limits' timer",
		       "permits follow the tick");
}

/* The tag limits' query servers, timer and store answers (w_tags). */
static void watch_tags(struct kt_daemon *d)
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

static void init_watches(struct kt_daemon *d);

static int setup_loop(struct kt_daemon *d, char *err, size_t errlen)
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
	    (ret = watch_required(d, &d->w_listen, d->listenfd, "the control socket", err, errlen)))
		return ret;
	if (d->kube &&
	    (ret = watch_required(d, &d->w_kube, kt_kube_fd(d->kube), "the pods watcher", err, errlen)))
		return ret;
	if (d->cfg.metrics_port) {
		int mret = kt_metrics_start(&d->metrics, d->cfg.metrics_addr, d->cfg.metrics_port,
					    http_routes, (int)(sizeof(http_routes) / sizeof(http_routes[0])),
					    d, err, errlen);

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
	watch_pool(d);
	watch_strict(d);
	watch_tags(d);
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

static void watch_members(struct kt_daemon *d);

/* The watcher options cfg asks for; o->api_server "" when no limit selects
 * pods. -EINVAL (err one line) when they cannot be found. */
static int kube_opts_for(const struct kt_config *cfg, struct kt_kube_opts *o, char *err,
			 size_t errlen)
{
	memset(o, 0, sizeof(*o));
	if (!kt_config_uses_pods(cfg))
		return 0;
	return kt_kube_resolve_opts(&cfg->kube, o, err, errlen);
}

/* Makes the watcher follow o: started, restarted with new options, or
 * stopped (o->api_server ""). The last known pods stay until the new
 * watcher lists; with no watcher there are none. */
static int kube_follow(struct kt_daemon *d, const struct kt_kube_opts *o)
{
	char err[KT_ERR_LEN];
	int ret;

	if (d->kube && !memcmp(kt_kube_options(d->kube), o, sizeof(*o)))
		return 0;
	if (d->kube) {
		unwatch(d, &d->w_kube, "the pods watcher");
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
static int start_kube(struct kt_daemon *d, const struct kt_config *cfg, char *err, size_t errlen)
{
	struct kt_kube_opts o;
	struct kt_kube_status st;
	bool changed;
	uint64_t until = kt_clock_ns() + 2000000000ull;
	int ret = kube_opts_for(cfg, &o, err, errlen);

	if (ret || !o.api_server[0])
		return ret;
	ret = kt_kube_start(&o, &d->kube, err, errlen);
	if (ret)
		return ret;
	do {
		struct pollfd p = { .fd = kt_kube_fd(d->kube), .events = POLLIN };

		poll(&p, 1, 50);
		kt_kube_status(d->kube, &st);
	} while (!st.synced && st.state != KT_KUBE_UNREACHABLE && kt_clock_ns() < until);
	if (!st.synced)
		kt_warn("kubernetes: no pod list from %s yet%s%s: pods join when it answers",
			o.api_server, st.error[0] ? ": " : "", st.error);
	return kt_kube_snapshot(d->kube, &d->pods, &changed);
}

/* The watcher published: take its set; pods selected or gone, or their
 * directories to watch, may have changed. */
static void kube_changed(struct kt_daemon *d)
{
	bool changed = false;

	if (!d->kube || kt_kube_snapshot(d->kube, &d->pods, &changed) || !changed)
		return;
	/* a change of members re-arms the watches itself; else the selected
	 * pods' directories may still have changed */
	if (kt_daemon_refresh_members(d) <= 0)
		watch_members(d);
}

static int apply_plan(struct kt_daemon *d, struct kt_plan *plan, struct kt_limit_state *ls,
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
 * and the directories of the selected pods (the kubelet makes them after
 * the API lists the pod). */
static void watch_members(struct kt_daemon *d)
{
	const char **paths;
	char (*abs)[PATH_MAX];
	char **pod_dirs = NULL;
	int n = 0, n_pod = kt_plan_pod_dirs(&d->cfg, d->cg_mount, &d->pods, &pod_dirs), ret;

	if (!d->cgwatch || n_pod < 0) {
		for (int k = 0; k < n_pod; k++)
			free(pod_dirs[k]);
		free(pod_dirs);
		return;
	}
	for (int i = 0; i < d->cfg.n_limits; i++)
		n += d->cfg.limits[i].n_cgroups;
	paths = calloc(n + n_pod + 1, sizeof(*paths));
	abs = calloc(n + 1, sizeof(*abs));
	if (paths && abs) {
		n = 0;
		for (int i = 0; i < d->cfg.n_limits; i++)
			for (int j = 0; j < d->cfg.limits[i].n_cgroups; j++) {
				const char *e = d->cfg.limits[i].cgroups[j];

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

int kt_daemon_refresh_members(struct kt_daemon *d)
{
	char err[KT_ERR_LEN];
	struct kt_plan next;
	bool changed;
	int moved = 0, ret;

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
		kt_ctl_decide(d->pool, i, &next.limits[i], &d->ls[i]);
	ret = apply_plan(d, &next, d->ls, err, sizeof(err));
	if (ret) {
		/* all or nothing: the kernel is as it was, and so is the plan;
		 * the next rescan tries again */
		if (strcmp(err, d->refresh_err))
			kt_err("updating members: %s (keeping the members as they were)", err);
		snprintf(d->refresh_err, sizeof(d->refresh_err), "%s", err);
		kt_plan_free(&next);
		for (int i = 0; i < d->plan.n_limits; i++)
			kt_ctl_decide(d->pool, i, &d->plan.limits[i], &d->ls[i]);
		return ret;
	}
	d->refresh_err[0] = 0;
	kt_plan_free(&d->plan);
	d->plan = next;
	for (int i = 0; i < d->plan.n_limits; i++) {
		kt_ctl_write_rates(d, i);
		kt_ctl_write_lease(d, i);
	}
	kt_strict_sync(d->strict, &d->plan);
	d->member_changes += moved;
	watch_members(d);
	return moved;
}

int kt_daemon_start(struct kt_daemon *d, const char *config_path, bool detach_on_exit)
{
	char err[KT_ERR_LEN];
	uint64_t now;
	int ret, i;

	memset(d, 0, sizeof(*d));
	d->epfd = d->sigfd = d->timerfd = d->listenfd = -1;
	for (i = 0; i < KT_MAX_CLIENTS; i++)
		d->clients[i].fd = -1;
	init_watches(d);
	d->detach_on_exit = detach_on_exit;
	snprintf(d->config_path, sizeof(d->config_path), "%s", config_path);

	unsigned char digest[KT_CONFIG_DIGEST_LEN];

	ret = kt_config_load_digest(config_path, &d->cfg, digest, err, sizeof(err));
	if (ret) {
		kt_err("%s", err);
		return KT_EXIT_CONFIG;
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
	ret = start_kube(d, &d->cfg, err, sizeof(err));
	if (ret) {
		kt_err("%s", err);
		ret = ret == -EINVAL ? KT_EXIT_CONFIG : KT_EXIT_RUNTIME;
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
	ret = open_control_socket(d, err, sizeof(err));
	if (ret) {
		kt_err("%s", err);
		ret = KT_EXIT_RUNTIME;
		goto fail_pool;
	}
	ret = kt_bpf_open_locked(&d->bpf, d->cfg.pin_dir, err, sizeof(err));
	if (ret) {
		kt_err("%s", err);
		ret = KT_EXIT_RUNTIME;
		goto fail_sock;
	}
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
	now = kt_clock_ns();
	for (i = 0; i < d->plan.n_limits; i++) {
		kt_ctl_start_limit(d, i, now);
		kt_ctl_hist_rehome(&d->ls[i], d->hist_pool + (size_t)i * hist_cap, hist_cap);
	}
	/* sizes count every member before any bucket is written */
	kt_ctl_fill_pool_local(&d->plan, d->ls, d->pool_local);
	kt_pool_members(d->pool, d->pool_local, d->plan.n_limits);
	for (i = 0; i < d->plan.n_limits; i++)
		kt_ctl_decide(d->pool, i, &d->plan.limits[i], &d->ls[i]);
	ret = kt_strict_create(&d->strict, &d->plan, &d->bpf, err, sizeof(err));
	if (ret) {
		kt_err("%s", err);
		ret = ret == -EINVAL ? KT_EXIT_CONFIG : KT_EXIT_RUNTIME;
		goto fail_bpf;
	}
	ret = apply_plan(d, &d->plan, d->ls, err, sizeof(err));
	if (ret) {
		kt_err("%s", err);
		ret = KT_EXIT_RUNTIME;
		goto fail_bpf;
	}
	kt_strict_sync(d->strict, &d->plan);
	kt_ctl_drop_stale_pins(d);
	ret = kt_tags_create(&d->tags, &d->cfg, err, sizeof(err));
	if (ret) {
		kt_err("%s", err);
		ret = ret == -EINVAL || ret == -EADDRINUSE || ret == -ENODEV ? KT_EXIT_CONFIG
									   : KT_EXIT_RUNTIME;
		goto fail_bpf;
	}
	ret = setup_loop(d, err, sizeof(err));
	if (ret) {
		kt_err("%s", err);
		ret = KT_EXIT_RUNTIME;
		goto fail_bpf;
	}
	watch_members(d);
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
	free(d->ls);
	d->ls = NULL;
	free(d->hist_pool);
	d->hist_pool = NULL;
	free(d->pool_local);
	d->pool_local = NULL;
	free(d->slot_base);
	free(d->demand_buf);
	d->demand_buf = NULL;
	d->slot_base = NULL;
fail_sock:
	if (d->listenfd >= 0) {
		close(d->listenfd);
		unlink(d->cfg.socket_path);
	}
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
	if (d->epfd >= 0)
		close(d->epfd);
	if (d->sigfd >= 0)
		close(d->sigfd);
	if (d->timerfd >= 0)
		close(d->timerfd);
	return ret;
}

/* The reload itself; digest gets what it read (or failed to). */
static int cmp_limit_rt_name(const void *x, const void *y)
{
	return strcmp((*(const struct kt_limit_rt *const *)x)->cfg->name,
		      (*(const struct kt_limit_rt *const *)y)->cfg->name);
}

static int reload_config(struct kt_daemon *d, unsigned char digest[KT_CONFIG_DIGEST_LEN],
			 const char *how, char *err, size_t errlen)
{
	struct kt_config ncfg;
	struct kt_plan nplan;
	struct kt_limit_state *nls = NULL;
	struct kt_sample *nhist = NULL;
	const struct kt_limit_rt **old_by_name = NULL;
	struct kt_pool_local *nlocal = NULL;
	struct kt_pool *npool = NULL;
	struct kt_strict *nstrict = NULL;
	struct kt_kube_opts kopts;
	uint64_t now = kt_clock_ns();
	int ret, i, j, hist_cap;

	ret = kt_config_load_digest(d->config_path, &ncfg, digest, err, errlen);
	if (ret)
		goto failed;
	if (strcmp(ncfg.pin_dir, d->cfg.pin_dir) || strcmp(ncfg.socket_path, d->cfg.socket_path) ||
	    strcmp(ncfg.metrics_addr, d->cfg.metrics_addr) || ncfg.metrics_port != d->cfg.metrics_port) {
		snprintf(err, errlen,
			 "%s: pinDir, socket and metrics cannot change on reload (restart kthrottled)",
			 d->config_path);
		kt_config_free(&ncfg);
		ret = -EINVAL;
		goto failed;
	}
	ret = kube_opts_for(&ncfg, &kopts, err, errlen);
	if (!ret)
		ret = kt_plan_resolve(&ncfg, d->cg_mount, &d->pods, &nplan, err, errlen);
	if (ret) {
		kt_config_free(&ncfg);
		goto failed;
	}
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
		kt_ctl_decide(npool, i, &nplan.limits[i], &nls[i]);
	ret = kt_strict_create(&nstrict, &nplan, &d->bpf, err, errlen);
	if (ret)
		goto failed_plan;
	/* tag limits last among the checks: a reload that binds a new query
	 * socket and then fails would have to unbind it again */
	struct kt_tags *ntags = NULL;

	unwatch(d, &d->w_tags, "the tag limits"); /* a reload closes the old set's fd */
	ret = kt_tags_reload(&ntags, d->tags, &ncfg, err, errlen);
	if (ret) {
		watch_tags(d); /* the old set runs on */
		goto failed_plan;
	}
	d->tags = ntags; /* the old set is consumed: kept tags carry over */
	watch_tags(d);
	ret = apply_plan(d, &nplan, nls, err, errlen);
	if (ret)
		goto failed_plan; /* the old limits' rates are rewritten on the next tick */
	/* permits the old one has in flight are never armed (wasted, never
	 * doubled); the ones armed in the kernel are adopted */
	kt_strict_inherit(nstrict, d->strict);
	unwatch(d, &d->w_strict, "the strict limits' timer");
	kt_strict_destroy(d->strict);
	d->strict = nstrict;
	nstrict = NULL;
	/* Members the new plan dropped simply stop heartbeating and expire.
	 * A round trip the old pool has in flight finishes on its own. */
	unwatch(d, &d->w_pool, "the store's answers");
	kt_pool_destroy(d->pool);
	kt_plan_free(&d->plan);
	kt_config_free(&d->cfg);
	free(d->ls);
	free(d->hist_pool);
	free(d->pool_local);
	d->cfg = ncfg;
	d->plan = nplan;
	d->ls = nls;
	d->hist_pool = nhist;
	d->pool = npool;
	d->pool_local = nlocal;
	watch_pool(d);
	for (i = 0; i < d->plan.n_limits; i++) {
		kt_ctl_write_rates(d, i);
		kt_ctl_write_lease(d, i);
	}
	kt_strict_sync(d->strict, &d->plan);
	watch_strict(d);
	kt_ctl_drop_stale_pins(d);
	kube_follow(d, &kopts);
	watch_members(d);
	d->reloads++;
	kt_info("reloaded %s%s: %d limit(s), %d tag limit(s)", d->config_path, how,
		d->plan.n_limits, kt_tags_count(d->tags));
	return 0;
failed_plan:
	free(old_by_name);
	kt_strict_destroy(nstrict);
	kt_pool_destroy(npool);
	free(nls);
	free(nhist);
	free(nlocal);
	kt_plan_free(&nplan);
	kt_config_free(&ncfg);
failed:
	return ret;
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
	now = kt_clock_ns();
	note_tick(d, now, expirations);
	kt_daemon_tick(d, now);
	kt_strict_tick(d->strict, now);
	expire_clients(d, now);
	for (int k = 0; k < d->plan.n_limits; k++) {
		struct kt_limit_state *ls = &d->ls[k];

		coop_event(d, k, now);
		notify_subscribers(d, k, now);
		if (ls->total_throttled != ls->throttled_seen)
			ls->throttled_ns += d->cfg.tick_ns;
		ls->throttled_seen = ls->total_throttled;
	}
	kt_metrics_run(d->metrics); /* its timeouts */
	/* the safety net under the watcher: every epoch, or every tick while
	 * it cannot watch */
	if (!d->cgwatch || d->cgwatch_err || now - d->last_prune_ns >= d->cfg.epoch_ns) {
		kt_daemon_refresh_members(d);
		d->last_prune_ns = now;
	}
}

static void on_listen(struct kt_watch *w, uint32_t events)
{
	(void)events;
	accept_client(w->ctx);
}

/* Throttle events from the kernel's ring buffer. */
static void on_events(struct kt_watch *w, uint32_t events)
{
	struct kt_daemon *d = w->ctx;

	(void)events;
	ring_buffer__consume(d->events);
	if (d->strict_kick) {
		/* a member wants a permit now, not at the tick */
		d->strict_kick = false;
		kt_strict_run(d->strict, kt_clock_ns());
	}
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
		kt_daemon_refresh_members(d);
}

static void on_kube(struct kt_watch *w, uint32_t events)
{
	(void)events;
	kube_changed(w->ctx);
}

/* A store answer between ticks: act on it now. */
static void on_pool(struct kt_watch *w, uint32_t events)
{
	struct kt_daemon *d = w->ctx;
	uint64_t now = kt_clock_ns();

	(void)events;
	if (kt_pool_poll(d->pool, now))
		kt_ctl_apply_pool(d, now);
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
		reload(d, true, err, sizeof(err));
}

/* Every watch unregistered, with its callback; kt_daemon_start's first
 * step, so that a failed start or a stop finds none registered. */
static void init_watches(struct kt_daemon *d)
{
	kt_watch_init(&d->w_sig, on_signal, d);
	kt_watch_init(&d->w_tick, on_tick, d);
	kt_watch_init(&d->w_listen, on_listen, d);
	kt_watch_init(&d->w_events, on_events, d);
	kt_watch_init(&d->w_metrics, on_metrics, d);
	kt_watch_init(&d->w_cgwatch, on_cgwatch, d);
	kt_watch_init(&d->w_kube, on_kube, d);
	kt_watch_init(&d->w_pool, on_pool, d);
	kt_watch_init(&d->w_strict, on_strict, d);
	kt_watch_init(&d->w_tags, on_tags, d);
	kt_watch_init(&d->w_cfw, on_config, d);
	for (int i = 0; i < KT_MAX_CLIENTS; i++)
		kt_watch_init(&d->clients[i].w, on_client, d);
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

void kt_daemon_stop(struct kt_daemon *d)
{
	char err[KT_ERR_LEN];
	char pin_dir[PATH_MAX];

	snprintf(pin_dir, sizeof(pin_dir), "%s", d->bpf.pin_dir);
	for (int i = 0; i < KT_MAX_CLIENTS; i++) {
		if (d->clients[i].fd >= 0)
			close(d->clients[i].fd);
		free(d->clients[i].out.p);
	}
	/* A stop changes nothing the other nodes count: this node's members
	 * stay in the pool and the kernel runs their lease out (then the
	 * fallback, then closes), unless the next daemon renews it first (a
	 * rolling restart). Only --detach-on-exit, which removes the programs,
	 * deregisters the members at once. */
	kt_ctl_fill_pool_local(&d->plan, d->ls, d->pool_local);
	kt_pool_leave(d->pool, d->pool_local, d->plan.n_limits, d->detach_on_exit);
	if (!d->detach_on_exit)
		for (int i = 0; i < d->plan.n_limits; i++)
			kt_ctl_pin(d, i, kt_clock_ns());
	kt_pool_destroy(d->pool);
	d->pool = NULL;
	kt_strict_destroy(d->strict);
	d->strict = NULL;
	kt_tags_destroy(d->tags); /* unreported hits are lost with the node, as its own traffic */
	d->tags = NULL;
	free(d->pool_local);
	d->pool_local = NULL;
	kt_bpf_close(&d->bpf);
	if (d->detach_on_exit) {
		if (kt_bpf_cleanup(pin_dir, err, sizeof(err)))
			kt_err("%s", err);
		else
			kt_info("detached and removed pins in %s", pin_dir);
	} else {
		kt_info("exiting; programs stay attached and enforcing from %s", pin_dir);
	}
	if (d->listenfd >= 0) {
		close(d->listenfd);
		unlink(d->cfg.socket_path);
	}
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
	free(d->ls);
	free(d->hist_pool);
	d->hist_pool = NULL;
	free(d->slot_base);
	free(d->demand_buf);
	d->demand_buf = NULL;
	kt_plan_free(&d->plan);
	kt_config_free(&d->cfg);
}
