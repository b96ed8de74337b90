/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* `status` (report.h), a table or JSON: the node, its config, attach
 * point, kernel features and pods watcher, then each limit with its pool,
 * store, node and join buckets and members. */
#include <errno.h>
#include <limits.h>
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
#include "members/weights.h"
#include "store/store.h"
#include "base/strbuf.h"
#include "control/report_int.h"

/* Seconds until `until` (kt clock): -1 for no deadline, 0 once passed. */
static double left_s(uint64_t until, uint64_t now)
{
	if (!until)
		return -1;
	return until > now ? (double)(until - now) / 1e9 : 0;
}

/* The store's last error (JSON members of "store", or a text line) and the
 * maxMembers anomaly. */
static void store_error_status(const struct kt_pool *pool, struct kt_sbuf *b, int i, bool json,
			       uint64_t now)
{
	const struct kt_pool_view *v = kt_pool_view(pool, i);
	uint64_t since = 0;
	char ep[300];
	const char *st = kt_pool_store_state(pool, i, &since, ep, sizeof(ep));
	struct kt_store_errors e;
	double age;

	kt_pool_store_errors(pool, i, &e);
	age = e.since_ns && now > e.since_ns ? (double)(now - e.since_ns) / 1e9 : 0;
	if (json) {
		if (e.kind == KT_SERR_NONE) {
			kt_sb_printf(b, ",\"last_error\":null");
		} else {
			kt_sb_printf(b, ",\"last_error\":{\"kind\":\"%s\",\"text\":",
				  kt_store_err_kind_name(e.kind));
			kt_sb_json_str(b, e.text);
			if (e.since_ns)
				kt_sb_printf(b, ",\"since_s\":%.3f", age);
			else
				kt_sb_printf(b, ",\"since_s\":null"); /* the episode is over */
			kt_sb_printf(b, ",\"count\":%llu}", (unsigned long long)e.count[e.kind]);
		}
		if (v && v->over_max)
			kt_sb_printf(b, ",\"anomaly\":{\"kind\":\"over_max_members\",\"size\":%d,"
				     "\"max_members\":%d}",
				  v->over_max, v->max_members);
		else
			kt_sb_printf(b, ",\"anomaly\":null");
		return;
	}
	if (e.kind != KT_SERR_NONE && e.since_ns)
		kt_sb_printf(b, "  store %s (%s since %.1fs, %llu so far: %s)\n",
			  strcmp(st, "up") ? st : "errors", kt_store_err_kind_name(e.kind), age,
			  (unsigned long long)e.count[e.kind], e.text);
	if (v && v->over_max)
		kt_sb_printf(b, "  store anomaly: pool size %d above maxMembers %d (acted on: shares shrink)\n",
			  v->over_max, v->max_members);
}

/* The store's round trips and the timeout they set: JSON members of
 * "store", or a text line, and a warning once p99 passes half the timeout
 * (a fixed timeout, or the automatic one at its cap): past it heartbeats
 * fail and the pool falls back although the store answers. */
static void store_latency_status(const struct kt_pool *pool, struct kt_sbuf *b, int i, bool json)
{
	struct kt_store_latency t;
	bool near;

	kt_pool_store_latency(pool, i, &t);
	near = t.samples && t.p99_us * 2 > (uint64_t)t.timeout_ms * 1000;
	if (json) {
		kt_sb_printf(b, ",\"latency\":{\"samples\":%u,\"p50_ms\":%.3f,\"p99_ms\":%.3f,"
			     "\"timeout_ms\":%u,\"timeout\":\"%s\",\"call_budget_ms\":%u,"
			     "\"near_timeout\":%s}",
			     t.samples, t.p50_us / 1e3, t.p99_us / 1e3, t.timeout_ms,
			     t.fixed ? "fixed" : "auto", t.budget_ms, near ? "true" : "false");
		return;
	}
	if (t.samples)
		kt_sb_printf(b, "  store round trips p50 %.1f ms p99 %.1f ms (last %u); timeout %u ms (%s)\n",
			     t.p50_us / 1e3, t.p99_us / 1e3, t.samples, t.timeout_ms,
			     t.fixed ? "redisStore.timeout" : "auto");
	else
		kt_sb_printf(b, "  store round trips: none answered yet; timeout %u ms (%s)\n",
			     t.timeout_ms, t.fixed ? "redisStore.timeout" : "auto");
	if (near)
		kt_sb_printf(b, "  store warning: p99 round trip %.0f ms is over half the %u ms timeout%s\n",
			     t.p99_us / 1e3, t.timeout_ms,
			     t.fixed ? ": raise redisStore.timeout, or remove it to follow the latency"
				     : " (the automatic one's cap): move the store closer");
}

/* redisStore.leases, and with leases: node how long ago the change feed
 * was read (a node hears of other nodes' changes at most that late). */
static void store_leases_status(const struct kt_pool *pool, struct kt_sbuf *b, const struct kt_limit_cfg *c,
				int i, bool json, uint64_t now)
{
	bool node = c->store.leases == KT_LEASES_NODE;
	uint64_t at = node ? kt_pool_store_feed_at(pool, i) : 0;
	double age = at && now > at ? (double)(now - at) / 1e9 : at ? 0.0 : -1.0;

	if (json) {
		kt_sb_printf(b, ",\"leases\":\"%s\"", node ? "node" : "member");
		if (node && age >= 0)
			kt_sb_printf(b, ",\"feed_age_s\":%.3f", age);
		else if (node)
			kt_sb_printf(b, ",\"feed_age_s\":null");
		return;
	}
	if (!node)
		return;
	if (age >= 0)
		kt_sb_printf(b, "  store leases node: change feed read %.1fs ago\n", age);
	else
		kt_sb_printf(b, "  store leases node: change feed not read yet\n");
}

/* How long the store has been in state st: "up" only as far as the last
 * answered heartbeat vouches for it, i.e. until it was sent (a daemon
 * stopped for a while has not seen the store since, even if an answer it
 * was waiting for came in meanwhile), any other state until now. */
static double store_state_age_s(const char *st, uint64_t since, const struct kt_pool_view *v,
				uint64_t now)
{
	uint64_t until = now;

	if (!strcmp(st, "up") && v && v->last_answer_sent_ns && v->last_answer_sent_ns < now)
		until = v->last_answer_sent_ns;
	return since && until > since ? (double)(until - since) / 1e9 : 0.0;
}

static double last_event_age_s(const struct kt_limit_state *s, uint64_t now)
{
	return now > s->last_event_ns ? (double)(now - s->last_event_ns) / 1e9 : 0.0;
}

/* "pattern", "path" or "pods": what found member m. */
/* weightBy or classBy as written: "label:KEY" or "capture:NAME" */
static const char *weight_by_text(enum kt_weight_by by, const char *key, char *buf, size_t len)
{
	if (by == KT_WEIGHT_CHILD || by == KT_WEIGHT_CALLER)
		snprintf(buf, len, by == KT_WEIGHT_CHILD ? "child" : "caller");
	else
		snprintf(buf, len, "%s:%s",
			 by == KT_WEIGHT_LABEL ? "label" : by == KT_WEIGHT_ANNOTATION ? "annotation" : "capture",
			 key ? key : "");
	return buf;
}

static const char *found_by(const struct kt_limit_cfg *c, const struct kt_member_rt *m)
{
	if (m->entry == KT_ENTRY_PODS)
		return "pods";
	if (m->entry == KT_ENTRY_COOP)
		return "libkthrottle";
	if (m->entry == KT_ENTRY_CHILD)
		return "child";
	return kt_path_is_pattern(c->cgroups[m->entry]) ? "pattern" : "path";
}

/* The entry that found m: the cgroups entry, or the pod "namespace/name". */
static const char *found_entry(const struct kt_limit_cfg *c, const struct kt_member_rt *m)
{
	if (m->entry == KT_ENTRY_COOP)
		return "kt_coop"; /* its entry: slot - KT_COOP_SLOT0 */
	if (m->entry == KT_ENTRY_CHILD)
		return "a limit below"; /* a member of a descendant (parent:) */
	return m->entry == KT_ENTRY_PODS ? m->pod : c->cgroups[m->entry];
}

/* The pods watcher's state: one line of text, or a "kubernetes" member of
 * the status object. */
static void kube_status(struct kt_kube *kube, const struct kt_pod_set *pods, struct kt_sbuf *b,
			bool json, uint64_t now)
{
	struct kt_kube_status st;

	if (!kube)
		return;
	kt_kube_status(kube, &st);
	if (json) {
		kt_sb_printf(b, ",\"kubernetes\":{\"api_server\":");
		kt_sb_json_str(b, kt_kube_options(kube)->api_server);
		kt_sb_printf(b, ",\"node\":");
		kt_sb_json_str(b, kt_kube_options(kube)->node_name);
		kt_sb_printf(b, ",\"state\":\"%s\",\"synced\":%s,\"since_s\":%.3f,\"pods\":%d,"
			     "\"resource_version\":",
			  kt_kube_state_name(st.state), st.synced ? "true" : "false",
			  now > st.since_ns ? (double)(now - st.since_ns) / 1e9 : 0.0, pods->n);
		kt_sb_json_str(b, st.resource_version);
		kt_sb_printf(b, ",\"lists\":%lu,\"watches\":%lu,\"relists\":%lu,\"skipped\":%lu,"
			     "\"unselected\":%d,\"http_status\":%ld,\"error\":",
			  st.lists, st.watches, st.relists, st.skipped, pods->n_others,
			  st.http_status);
		kt_sb_json_str(b, st.error);
		kt_sb_printf(b, "}");
		return;
	}
	kt_sb_printf(b, "kubernetes %s  node %s  %s for %.1fs  %d selected pod(s) on this node%s, %d unselected  (lists %lu, watches %lu, relists %lu)\n",
		  kt_kube_options(kube)->api_server, kt_kube_options(kube)->node_name,
		  kt_kube_state_name(st.state),
		  now > st.since_ns ? (double)(now - st.since_ns) / 1e9 : 0.0, pods->n,
		  st.state == KT_KUBE_UNREACHABLE ? " (the last known)" : "", pods->n_others,
		  st.lists, st.watches, st.relists);
	if (st.error[0])
		kt_sb_printf(b, "  kubernetes error: %s\n", st.error);
}

/* The groupBy limits of the parsed config: how many groups each has on
 * this node (a template with none yet shows too). JSON: a "groups" array
 * after "limits"; text: a line each after the limits. */
static void groups_status(const struct kt_daemon *d, struct kt_sbuf *b, bool json)
{
	bool first = true;

	if (json)
		kt_sb_printf(b, ",\"groups\":[");
	for (int i = 0; i < d->src.n_limits; i++) {
		const struct kt_limit_cfg *c = &d->src.limits[i];
		bool other;
		int n = kt_report_template_groups(d, c, &other);

		if (n < 0)
			continue;
		if (json) {
			kt_sb_printf(b, "%s{\"limit\":", first ? "" : ",");
			kt_sb_json_str(b, c->name);
			kt_sb_printf(b, ",\"by\":\"%s\",\"label\":", kt_group_by_name(c->group_by));
			if (c->group_label)
				kt_sb_json_str(b, c->group_label);
			else
				kt_sb_printf(b, "null");
			kt_sb_printf(b, ",\"groups\":%d,\"max_groups\":%d,\"other\":%s}", n,
				     c->max_groups, other ? "true" : "false");
		} else {
			char on[KT_NAME_LEN] = "";

			if (other)
				kt_group_instance_name(c->name, NULL, on);
			kt_sb_printf(b, "groups of %s (groupBy %s%s%s): %d of maxGroups %d%s%s\n", c->name,
				     kt_group_by_name(c->group_by), c->group_label ? ":" : "",
				     c->group_label ? c->group_label : "", n, c->max_groups,
				     other ? ", the values past it in " : "", on);
		}
		first = false;
	}
	if (json)
		kt_sb_printf(b, "]");
}

/* The tag limits: their buckets, query servers and exchange.
 * JSON: a "tags" array after "limits"; text: a table after the limits. */
static void tags_status(const struct kt_tags *tags, struct kt_sbuf *b, bool json, uint64_t now)
{
	int n = kt_tags_count(tags);

	if (json)
		kt_sb_printf(b, ",\"tags\":[");
	else if (n)
		kt_sb_printf(b, "%-16s %10s %8s %10s %12s %12s %12s %9s %s\n", "TAG_LIMIT", "RATE/s", "BURST",
			  "TAGS", "ADMITTED", "REFUSED", "REMOTE_HITS", "CLIENTS", "EXCHANGE");
	for (int i = 0; i < n; i++) {
		struct kt_tag_stat t;
		double age = -1;

		kt_tags_get(tags, i, &t);
		if (t.last_ok_ns && now > t.last_ok_ns)
			age = (double)(now - t.last_ok_ns) / 1e9;
		if (json) {
			kt_sb_printf(b, "%s{\"name\":", i ? "," : "");
			kt_sb_json_str(b, t.name);
			kt_sb_printf(b,
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
			kt_sb_json_str(b, t.last_error);
			kt_sb_printf(b, "}");
			if (t.xdp)
				kt_sb_printf(b,
					  ",\"xdp\":{\"interfaces\":%d,\"buckets\":%llu,\"passed\":%llu,"
					  "\"dropped\":%llu,\"hits_sent\":%llu,\"remote_hits\":%llu}",
					  t.ifaces, (unsigned long long)t.xdp_buckets,
					  (unsigned long long)t.xdp_admitted, (unsigned long long)t.xdp_dropped,
					  (unsigned long long)t.xdp_hits_sent,
					  (unsigned long long)t.xdp_remote_hits);
			kt_sb_printf(b, "}");
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
			kt_sb_printf(b, "%-16s %10.3f %8llu %10llu %12llu %12llu %12llu %9llu %s\n", t.name,
				  t.rate, (unsigned long long)t.burst, (unsigned long long)t.tab.tags,
				  (unsigned long long)t.tab.admitted, (unsigned long long)t.tab.refused,
				  (unsigned long long)t.tab.remote_hits, (unsigned long long)t.query.clients,
				  ex);
			if (t.xdp)
				kt_sb_printf(b, "  xdp on %d interface(s): %llu sources, passed %llu, dropped %llu, remote hits %llu\n",
					  t.ifaces, (unsigned long long)t.xdp_buckets,
					  (unsigned long long)t.xdp_admitted, (unsigned long long)t.xdp_dropped,
					  (unsigned long long)t.xdp_remote_hits);
		}
	}
	if (json)
		kt_sb_printf(b, "]");
}

/* A strict limit's permits (nothing for other limits): the reserved
 * permits, what was granted, used and wasted, who waits, and whether the
 * store answers (if not, nothing is admitted). */
static void strict_status(const struct kt_strict *strict, struct kt_sbuf *b, int i, bool json,
			  uint64_t now)
{
	struct kt_strict_stat t;

	kt_strict_get(strict, i, now, &t);
	if (!t.strict)
		return;
	if (json) {
		kt_sb_printf(b,
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
		kt_sb_json_str(b, t.last_error);
		kt_sb_printf(b, "},");
		return;
	}
	kt_sb_printf(b,
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
static void config_status(const struct kt_daemon *d, struct kt_sbuf *b, bool json)
{
	char at[32];

	if (json) {
		kt_sb_printf(b, ",\"config\":{\"path\":");
		kt_sb_json_str(b, d->config_path);
		kt_sb_printf(b, ",\"state\":\"%s\",\"error\":", d->cfg_rejected ? "rejected" : "applied");
		kt_sb_json_str(b, d->cfg_rejected ? d->cfg_error : "");
		if (d->cfg_rejected)
			kt_sb_printf(b, ",\"rejected_since\":%lld", (long long)d->cfg_rejected_since);
		else
			kt_sb_printf(b, ",\"rejected_since\":null");
		kt_sb_printf(b, ",\"applied_at\":%lld,\"reloads\":%llu,\"reload_failures\":%llu,\"auto\":%s}",
			  (long long)d->cfg_applied_at, (unsigned long long)d->reloads,
			  (unsigned long long)d->reload_failures, d->cfw ? "true" : "false");
		return;
	}
	if (d->cfg_rejected) {
		utc_time(d->cfg_rejected_since, at, sizeof(at));
		kt_sb_printf(b, "config %s: rejected since %s: %s\n", d->config_path, at, d->cfg_error);
		return;
	}
	utc_time(d->cfg_applied_at, at, sizeof(at));
	kt_sb_printf(b, "config %s: applied %s (%llu reloads, %llu rejected; %s)\n", d->config_path, at,
		  (unsigned long long)d->reloads, (unsigned long long)d->reload_failures,
		  d->cfw ? "changes apply themselves" : "not watched: reload by hand");
}

/* A limit's node bucket (KT_BUCKET_POOL) and join bucket (KT_BUCKET_JOIN),
 * as the kernel has them at `now`: the rate and burst in force (the
 * lease's, the fallback's, or 0 when closed; kt_bucket_params) and the whole
 * tokens left; the join bucket's counters are what cgroups not classified
 * yet sent since it was made. Operators see whether the node as a whole, or
 * pods the daemon has not found yet, are what refuses. */
static void node_join_status(const struct kt_bpf *bpf, struct kt_sbuf *b, const struct kt_limit_rt *l,
			     bool json, uint64_t now)
{
	const struct kt_bucket *bk;
	struct kt_counters jc = { 0 };
	__u64 burst, interval;

	if (!bpf->buckets)
		return;
	if (l->has_pool && l->pool_slot < KT_MAX_BUCKETS) {
		bk = &bpf->buckets[l->pool_slot];
		interval = kt_bucket_params(bk, now, &burst);
		if (json)
			kt_sb_printf(b, "\"node_bucket\":{\"slot\":%u,\"rate\":%.6g,\"burst\":%llu,\"tokens\":%llu},",
				  l->pool_slot, kt_rate_from_interval_fp(interval), (unsigned long long)burst,
				  (unsigned long long)kt_gcra_tokens_left(bk, now));
		else
			kt_sb_printf(b, "  node bucket %u  rate %.3f/s  burst %llu  tokens %llu  (all members together)\n",
				  l->pool_slot, kt_rate_from_interval_fp(interval), (unsigned long long)burst,
				  (unsigned long long)kt_gcra_tokens_left(bk, now));
	}
	if (l->has_join && l->join_slot < KT_MAX_BUCKETS) {
		bk = &bpf->buckets[l->join_slot];
		interval = kt_bucket_params(bk, now, &burst);
		kt_bpf_read_counters(bpf, l->join_slot, &jc);
		if (json)
			kt_sb_printf(b, "\"join_bucket\":{\"slot\":%u,\"rate\":%.6g,\"burst\":%llu,\"tokens\":%llu,"
				     "\"admitted\":%llu,\"throttled\":%llu},",
				  l->join_slot, kt_rate_from_interval_fp(interval), (unsigned long long)burst,
				  (unsigned long long)kt_gcra_tokens_left(bk, now),
				  (unsigned long long)jc.admitted, (unsigned long long)jc.throttled);
		else
			kt_sb_printf(b, "  join bucket %u  rate %.3f/s  tokens %llu  unclassified cgroups: admitted %llu  throttled %llu\n",
				  l->join_slot, kt_rate_from_interval_fp(interval),
				  (unsigned long long)kt_gcra_tokens_left(bk, now),
				  (unsigned long long)jc.admitted, (unsigned long long)jc.throttled);
	}
}

char *kt_report_status(const struct kt_daemon *d, bool json)
{
	struct kt_sbuf b = { 0 };
	uint64_t now = kt_clock_ns();
	int i, j, name_w = 16; /* the LIMIT column: a group's name is longer */
	char wb[340];          /* weightBy: "capture:" or "label:" and a label key */

	for (i = 0; i < d->plan.n_limits; i++)
		if ((int)strlen(d->plan.limits[i].cfg->name) > name_w)
			name_w = (int)strlen(d->plan.limits[i].cfg->name);

	if (json) {
		kt_sb_printf(&b, "{\"node\":");
		kt_sb_json_str(&b, d->cfg.node_name);
		kt_sb_printf(&b, ",\"pin_dir\":");
		kt_sb_json_str(&b, d->bpf.pin_dir);
		kt_sb_printf(&b, ",\"attach\":");
		kt_sb_json_str(&b, d->attach_desc);
		kt_sb_printf(&b, ",\"uptime_s\":%.3f,\"ticks\":%llu,\"tick_late_max_ms\":%.3f,"
			     "\"ticks_missed\":%llu,\"reloads\":%llu",
			  (double)(now - d->started_ns) / 1e9, (unsigned long long)d->ticks,
			  (double)d->tick_late_max_ns / 1e6, (unsigned long long)d->ticks_missed,
			  (unsigned long long)d->reloads);
		kt_sb_printf(&b, ",\"kernel_map_fixes\":{");
		for (int m = 0; m < KT_VERIFY_MAPS; m++)
			kt_sb_printf(&b, "%s\"%s\":%llu", m ? "," : "", kt_verify_map_name(m),
				     (unsigned long long)d->map_fixes.n[m]);
		kt_sb_printf(&b, "}");
		config_status(d, &b, true);
		kt_features_status(&d->bpf.feat, &b, true);
		kube_status(d->kube, &d->pods, &b, true, now);
		kt_sb_printf(&b, ",\"limits\":[");
	} else {
		kt_sb_printf(&b, "node %s  pins %s  up %.0fs  latest tick %.1fms late\n", d->cfg.node_name,
			  d->bpf.pin_dir, (double)(now - d->started_ns) / 1e9,
			  (double)d->tick_late_max_ns / 1e6);
		config_status(d, &b, false);
		kt_sb_printf(&b, "attach %s\n", d->attach_desc);
		kt_features_status(&d->bpf.feat, &b, false);
		if (kt_verify_fixes_total(&d->map_fixes)) {
			const char *sep = "";

			kt_sb_printf(&b, "kernel state: entries found changed and written back:");
			for (int m = 0; m < KT_VERIFY_MAPS; m++, sep = ",")
				if (d->map_fixes.n[m])
					kt_sb_printf(&b, "%s %s %llu", sep, kt_verify_map_name(m),
						     (unsigned long long)d->map_fixes.n[m]);
			kt_sb_printf(&b, "\n");
		}
		kube_status(d->kube, &d->pods, &b, false, now);
		if (d->plan.n_limits) /* a node may have tag limits only */
			kt_sb_printf(&b, "%-*s %-10s %-5s %-10s %12s %12s %6s %6s %12s %8s %12s %12s %10s\n",
			  name_w, "LIMIT", "UNIT", "SCOPE", "MODE", "POOL_RATE/s", "MAX/s", "RAMP%",
			  "UTIL%", "BUCKET_RATE", "BURST", "ADMITTED", "THROTTLED", "ADMIT/s");
	}
	for (i = 0; i < d->plan.n_limits; i++) {
		const struct kt_limit_rt *l = &d->plan.limits[i];
		const struct kt_limit_state *s = &d->ls[i];
		const struct kt_limit_cfg *c = l->cfg;
		struct kt_limit_counts k;

		/* a look, not a read: the demand windows are the tick's */
		kt_ctl_peek_counters(&d->controller, i, &k);
		if (json) {
			kt_sb_printf(&b, "%s{\"name\":", i ? "," : "");
			kt_sb_json_str(&b, c->name);
			const struct kt_pool_view *v = kt_pool_view(d->pool, i);
			uint64_t st_since = 0;
			char ep[300] = "";
			const char *st = kt_pool_store_state(d->pool, i, &st_since, ep, sizeof(ep));

			kt_sb_printf(&b,
				  ",\"id\":%u,\"unit\":\"%s\",\"scope\":\"%s\",\"mode\":\"%s\","
				  "\"pool_rate\":%.6g,\"min\":%.6g,\"max\":%.6g,\"ramp_progress_pct\":%.2f,"
				  "\"utilization_pct\":%.2f,\"bucket_rate\":%.6g,\"burst\":%.6g,"
				  "\"fallback_rate\":%.6g,\"admitted\":%llu,\"throttled\":%llu,"
				  "\"admitted_bytes\":%llu,\"throttled_bytes\":%llu,"
				  "\"admitted_per_s\":%.3f,\"enforce\":%s,\"would_refuse\":%llu,"
				  "\"would_refuse_bytes\":%llu,\"kernel_state_fixes\":%llu,",
				  l->id, kt_unit_name(c->unit), kt_scope_name(c->scope),
				  kt_mode_name(c->rl.mode), s->pool_rate, c->rl.min, c->rl.max,
				  kt_ramp_progress_pct(&s->ramp), kt_ramp_last_utilization_pct(&s->ramp),
				  s->bucket_rate, s->bucket_burst, s->fallback_rate,
				  (unsigned long long)k.admitted, (unsigned long long)k.throttled,
				  (unsigned long long)k.admitted_bytes,
				  (unsigned long long)k.throttled_bytes, s->epoch_used_rate,
				  c->shadow ? "false" : "true", (unsigned long long)k.would_refuse,
				  (unsigned long long)k.would_refuse_bytes,
				  (unsigned long long)s->kernel_fixes);
			kt_sb_printf(&b, "\"parent\":");
			if (kt_cfg_parent(c) >= 0)
				kt_sb_json_str(&b, d->cfg.limits[kt_cfg_parent(c)].name);
			else
				kt_sb_printf(&b, "null");
			if (c->unit == KT_UNIT_CALL)
				kt_sb_printf(&b, ",\"max_delay_ms\":%u", c->max_delay_ms);
			if (c->weight > 0)
				kt_sb_printf(&b, ",\"weight\":%.6g", c->weight);
			if (c->weight_by != KT_WEIGHT_NONE) {
				kt_sb_printf(&b, ",\"weight_by\":");
				kt_sb_json_str(&b, weight_by_text(c->weight_by, c->weight_key, wb, sizeof(wb)));
				kt_sb_printf(&b, ",\"default_weight\":%.6g", c->default_weight);
			}
			if (c->class_by != KT_WEIGHT_NONE) {
				kt_sb_printf(&b, ",\"class_by\":");
				kt_sb_json_str(&b, weight_by_text(c->class_by, c->class_key, wb, sizeof(wb)));
				kt_sb_printf(&b, ",\"classes_peers\":%s,\"classes\":[",
					     c->classes_siblings ? "true" : "false");
				for (int k = 0; k < c->n_classes; k++) {
					kt_sb_printf(&b, "%s{\"name\":", k ? "," : "");
					kt_sb_json_str(&b, c->classes[k].name);
					kt_sb_printf(&b, ",\"floor\":%.6g,\"ceiling\":%.6g,\"default\":%s",
						     c->classes[k].floor, c->classes[k].ceiling,
						     k == c->default_class ? "true" : "false");
					/* the store's last division: the class's part, its weights;
					 * in-flight: this node's part of the slots */
					if (v && v->share_classes == c->n_classes)
						kt_sb_printf(&b, ",\"part\":%.6g,\"weights\":%.6g",
							     v->share_class_part[k], v->share_class_weights[k]);
					else if (v && v->slots_classes == c->n_classes)
						kt_sb_printf(&b, ",\"node_part\":%.6g", v->slots_class_part[k]);
					kt_sb_printf(&b, "}");
				}
				kt_sb_printf(&b, "]");
			}
			kt_features_limit_status(&d->bpf.feat, c, &b, true);
			/* a groupBy limit's group: its template and value (null:
			 * the pool of the values past maxGroups) */
			if (c->group_of) {
				kt_sb_printf(&b, ",\"group\":{\"limit\":");
				kt_sb_json_str(&b, d->src.limits[c->group_of - 1].name);
				kt_sb_printf(&b, ",\"by\":\"%s\",\"value\":", kt_group_by_name(c->group_by));
				if (c->group_other)
					kt_sb_printf(&b, "null");
				else
					kt_sb_json_str(&b, c->group_value);
				kt_sb_printf(&b, "}");
			}
			kt_sb_printf(&b, ",");
			kt_sb_printf(&b, "\"store\":{\"kind\":\"%s\",\"state\":\"%s\",\"since_s\":%.3f,\"endpoint\":",
				  kt_store_kind_name(c->store.kind), st,
				  store_state_age_s(st, st_since, v, now));
			kt_sb_json_str(&b, ep);
			store_error_status(d->pool, &b, i, true, now);
			if (c->store.kind == KT_STORE_REDIS) {
				store_latency_status(d->pool, &b, i, true);
				store_leases_status(d->pool, &b, c, i, true, now);
			}
			kt_sb_printf(&b,
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
			kt_sb_printf(&b,
				  "\"throttle_events\":{\"share\":%llu,\"fallback\":%llu,\"closed\":%llu,"
				  "\"permit\":%llu,\"shadow\":%llu,\"inflight\":%llu},",
				  (unsigned long long)s->events[KT_REASON_SHARE],
				  (unsigned long long)s->events[KT_REASON_FALLBACK],
				  (unsigned long long)s->events[KT_REASON_CLOSED],
				  (unsigned long long)s->events[KT_REASON_PERMIT],
				  (unsigned long long)s->events[KT_REASON_SHADOW],
				  (unsigned long long)s->events[KT_REASON_INFLIGHT]);
			strict_status(d->strict, &b, i, true, now);
			if (s->last_event_ns)
				kt_sb_printf(&b,
					  "\"last_throttle\":{\"reason\":\"%s\",\"retry_after_ms\":%.3f,"
					  "\"age_s\":%.3f},",
					  kt_report_reason_names[s->last_event_reason],
					  kt_report_retry_ms(s), last_event_age_s(s, now));
			node_join_status(&d->bpf, &b, l, true, now);
			kt_inflight_status(&d->bpf, l, &b, true, now);
			kt_sb_printf(&b, "\"cgroups\":[");
		} else {
			kt_sb_printf(&b,
				  "%-*s %-10s %-5s %-10s %12.3f %12.3f %6.1f %6.1f %12.3f %8.0f %12llu %12llu %10.1f\n",
				  name_w, c->name, kt_unit_name(c->unit), kt_scope_name(c->scope),
				  kt_mode_name(c->rl.mode), s->pool_rate, c->rl.max,
				  kt_ramp_progress_pct(&s->ramp), kt_ramp_last_utilization_pct(&s->ramp),
				  s->bucket_rate, s->bucket_burst, (unsigned long long)k.admitted,
				  (unsigned long long)k.throttled, s->epoch_used_rate);
			const struct kt_pool_view *v = kt_pool_view(d->pool, i);
			uint64_t st_since = 0;
			char ep[300] = "";
			const char *st = kt_pool_store_state(d->pool, i, &st_since, ep, sizeof(ep));
			if (s->last_event_ns)
				kt_sb_printf(&b,
					  "  throttle events: share %llu  fallback %llu  closed %llu  permit %llu  (last: %s, retry after %.1f ms, %.1fs ago)\n",
					  (unsigned long long)s->events[KT_REASON_SHARE],
					  (unsigned long long)s->events[KT_REASON_FALLBACK],
					  (unsigned long long)s->events[KT_REASON_CLOSED],
					  (unsigned long long)s->events[KT_REASON_PERMIT],
					  kt_report_reason_names[s->last_event_reason],
					  kt_report_retry_ms(s), last_event_age_s(s, now));
			if (c->group_of)
				kt_sb_printf(&b, "  group %s of %s (groupBy %s)\n",
					     c->group_other ? "(every value past maxGroups)" : c->group_value,
					     d->src.limits[c->group_of - 1].name, kt_group_by_name(c->group_by));
			if (kt_cfg_parent(c) >= 0)
				kt_sb_printf(&b, "  parent %s: every call is charged to it too%s\n",
					     d->cfg.limits[kt_cfg_parent(c)].name,
					     c->weight > 0 ? "; its members weigh this limit's weight together there"
							   : "");
			if (c->weight > 0)
				kt_sb_printf(&b, "  weight %g in the parent's pool\n", c->weight);
			if (c->max_delay_ms)
				kt_sb_printf(&b, "  maxDelay %u ms: a call held longer ends its connection (ETIMEDOUT)\n",
					     c->max_delay_ms);
			if (c->weight_by != KT_WEIGHT_NONE)
				kt_sb_printf(&b, "  weightBy %s: shares weighted max-min fair (defaultWeight %g)\n",
					     weight_by_text(c->weight_by, c->weight_key, wb, sizeof(wb)),
					     c->default_weight);
			if (c->class_by != KT_WEIGHT_NONE) {
				if (c->classes_siblings)
					kt_sb_printf(&b, "  children keep their floors, share by weight above them:");
				else
					kt_sb_printf(&b, "  classBy %s, first served first:",
						     weight_by_text(c->class_by, c->class_key, wb, sizeof(wb)));
				for (int k = 0; k < c->n_classes; k++) {
					kt_sb_printf(&b, " %s (floor %g/s, ceiling %g/s%s", c->classes[k].name,
						     c->classes[k].floor, c->classes[k].ceiling,
						     k == c->default_class ? ", default" : "");
					if (v && v->share_classes == c->n_classes)
						kt_sb_printf(&b, ", given %.6g/s", v->share_class_part[k]);
					kt_sb_printf(&b, ")");
				}
				kt_sb_printf(&b, "\n");
			}
			if (c->shadow || k.would_refuse)
				kt_sb_printf(&b, "  %s: would have refused %llu (let pass; %llu shadow events)\n",
					     c->shadow ? "shadow, enforce: false" : "was shadow",
					     (unsigned long long)k.would_refuse,
					     (unsigned long long)s->events[KT_REASON_SHADOW]);
			kt_features_limit_status(&d->bpf.feat, c, &b, false);
			if (s->kernel_fixes)
				kt_sb_printf(&b, "  kernel state: %llu bucket rate fields found changed and written back\n",
					     (unsigned long long)s->kernel_fixes);
			strict_status(d->strict, &b, i, false, now);
			if (c->rl.strict.on)
				goto members; /* no pool: the strict line says it all */
			kt_sb_printf(&b, "  store %s%s%s  pool %s size %d live %d  share %.3f/s",
				  kt_store_kind_name(c->store.kind), ep[0] ? " " : "", ep,
				  kt_pool_phase_name(v->phase), v->size, v->live,
				  kt_pool_bucket_rate(d->pool, i, s->pool_rate, 1));
			if (c->store.kind == KT_STORE_REDIS) {
				if (st_since && now > st_since)
					kt_sb_printf(&b, " (store %s for %.1fs", st,
						     store_state_age_s(st, st_since, v, now));
				else
					kt_sb_printf(&b, " (store %s", st);
				if (v->last_answer_ns && now > v->last_answer_ns)
					kt_sb_printf(&b, ", last heartbeat %.1fs ago",
						  (double)(now - v->last_answer_ns) / 1e9);
				else
					kt_sb_printf(&b, ", no answer yet");
				if (v->lease_until_ns > now)
					kt_sb_printf(&b, ", lease %.1fs left)", left_s(v->lease_until_ns, now));
				else
					kt_sb_printf(&b, ", lease expired)");
				if (v->reserved > 0)
					kt_sb_printf(&b, "  held for lapsed members %.3f/s", v->reserved);
			}
			kt_sb_printf(&b, "\n");
			if (c->store.kind == KT_STORE_REDIS) {
				store_error_status(d->pool, &b, i, false, now);
				store_latency_status(d->pool, &b, i, false);
				store_leases_status(d->pool, &b, c, i, false, now);
			}
			node_join_status(&d->bpf, &b, l, false, now);
			kt_inflight_status(&d->bpf, l, &b, false, now);
		}
members:
		for (j = 0; j < l->n_members; j++) {
			const struct kt_member_rt *m = &l->members[j];
			struct kt_counters mc = { 0 };
			double rate;

			kt_bpf_read_counters(&d->bpf, m->slot, &mc);
			rate = kt_report_member_rate(d, m);
			if (json) {
				kt_sb_printf(&b, "%s{\"member_id\":", j ? "," : "");
				kt_sb_json_str(&b, m->id);
				kt_sb_printf(&b, ",\"path\":");
				kt_sb_json_str(&b, m->path);
				/* how it was found: the config's entry */
				kt_sb_printf(&b, ",\"found_by\":\"%s\",\"entry\":", found_by(c, m));
				kt_sb_json_str(&b, found_entry(c, m));
				kt_sb_printf(&b,
					  ",\"cgroup_id\":%llu,\"slot\":%u,\"admitted\":%llu,\"throttled\":%llu,"
					  "\"rate\":%.6g",
					  (unsigned long long)m->cgid, m->slot,
					  (unsigned long long)mc.admitted,
					  (unsigned long long)mc.throttled, rate);
				if (c->share == KT_SHARE_DEMAND)
					kt_sb_printf(&b, ",\"demand\":%.6g", d->slot_base[m->slot].demand);
				if (c->n_callers > 0)
					kt_sb_printf(&b, ",\"dormant\":%s",
						     kt_ctl_member_dormant(&d->controller, l, j) ? "true" : "false");
				if (c->weight_by != KT_WEIGHT_NONE)
					kt_sb_printf(&b, ",\"weight\":%.6g,\"weight_from\":\"%s\"", m->weight,
						     kt_weight_src_name(m->weight_src));
				if (c->class_by != KT_WEIGHT_NONE && m->klass < c->n_classes) {
					kt_sb_printf(&b, ",\"class\":");
					kt_sb_json_str(&b, c->classes[m->klass].name);
					kt_sb_printf(&b, ",\"class_from\":\"%s\"",
						     kt_weight_src_name(m->class_src));
				}
				kt_sb_printf(&b, "}");
			} else {
				if (m->entry == KT_ENTRY_COOP)
					kt_sb_printf(&b, "  member %s  (libkthrottle \"%s\")  kt_coop entry %u  rate %.3f/s",
						  m->id, m->path, m->slot - KT_COOP_SLOT0, rate);
				else
					kt_sb_printf(&b, "  member %s  cgroup %s  (%s %s)  bucket %u%s  rate %.3f/s",
						  m->id, m->path, found_by(c, m), found_entry(c, m),
						  m->slot, c->scope == KT_SCOPE_NODE ? " (shared)" : "",
						  rate);
				if (c->share == KT_SHARE_DEMAND)
					kt_sb_printf(&b, "  demand %.3f/s", d->slot_base[m->slot].demand);
				if (kt_ctl_member_dormant(&d->controller, l, j))
					kt_sb_printf(&b, "  dormant (not called on this node yet: holds no share)");
				if (c->weight_by != KT_WEIGHT_NONE)
					kt_sb_printf(&b, "  weight %g (%s)", m->weight,
						     kt_weight_src_name(m->weight_src));
				if (c->class_by != KT_WEIGHT_NONE && m->klass < c->n_classes)
					kt_sb_printf(&b, "  class %s (%s)", c->classes[m->klass].name,
						     kt_weight_src_name(m->class_src));
				kt_sb_printf(&b, "  admitted %llu  throttled %llu\n",
					  (unsigned long long)mc.admitted, (unsigned long long)mc.throttled);
			}
		}
		if (json)
			kt_sb_printf(&b, "]}");
	}
	if (json)
		kt_sb_printf(&b, "]");
	groups_status(d, &b, json);
	tags_status(d->tags, &b, json, now);
	if (json)
		kt_sb_printf(&b, "}\n");
	return kt_sb_take(&b);
}
