/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What the daemon tells about itself (report.h): the health replies, and
 * what status and the metrics page share (reasons, retry-after, health and
 * its metrics, groups per template). Status is report_status.c, the
 * metrics page report_metrics.c; all read a const daemon as the loop left
 * it. */
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
#include "store/store.h"
#include "base/strbuf.h"
#include "control/report_int.h"

const char *const kt_report_reason_names[KT_REASON_COUNT] = { "share", "fallback", "closed", "permit", "tag",
							     "shadow", "inflight" };

const char *kt_report_reason_name(uint32_t reason)
{
	return reason < KT_REASON_COUNT ? kt_report_reason_names[reason] : "?";
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

static void health_snap(const struct kt_daemon *d, struct health_snap *s)
{
	struct kt_health_in *in = &s->in;
	uint64_t *ids = NULL;
	int n;

	memset(s, 0, sizeof(*s));
	in->now_ns = kt_clock_ns();
	/* the open fails unless one object loaded; the others' refusals are
	 * warnings, with the limits they leave unenforced */
	in->bpf_loaded = d->bpf.connect || d->bpf.sendmsg || d->bpf.egress || d->bpf.sock ||
			 d->bpf.sockops;
	in->feat = &d->bpf.feat;
	n = kt_bpf_linked_cgroups(&d->bpf, &ids);
	for (int i = 0; i < d->plan.n_limits; i++) {
		const struct kt_limit_rt *l = &d->plan.limits[i];

		if (l->cfg->unit == KT_UNIT_REQUEST)
			continue; /* no cgroup, no link */
		in->feat_used |= kt_unit_needs(l->cfg->unit) |
				 kt_unit_uses(l->cfg->unit, l->cfg->allow_raw_sockets,
					      l->cfg->max_delay_ms != 0);
		if (!kt_features_limit_enforced(&d->bpf.feat, l->cfg)) {
			/* no program to link: counted here, not as unlinked */
			if (!in->unenforced++)
				in->unenforced_limit = l->cfg->name;
			continue;
		}
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

char *kt_report_health(const struct kt_daemon *d, bool live, unsigned *status)
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

void kt_report_health_metrics(const struct kt_daemon *d, struct kt_sbuf *b)
{
	struct health_snap s;

	health_snap(d, &s);
	kt_sb_printf(b, "# HELP kthrottle_ready 1 when every component in use is ready (kthrottlectl health).\n"
		     "# TYPE kthrottle_ready gauge\nkthrottle_ready %d\n"
		     "# HELP kthrottle_component_up 1 when the component is ok (store: answering), by component in use.\n"
		     "# TYPE kthrottle_component_up gauge\n"
		     "kthrottle_component_up{component=\"kernel\"} %d\n",
		  s.h.ready, s.h.kernel_ok);
	if (s.in.uses_kube)
		kt_sb_printf(b, "kthrottle_component_up{component=\"kubernetes\"} %d\n", s.h.kube_ok);
	if (s.in.uses_store)
		kt_sb_printf(b, "kthrottle_component_up{component=\"store\"} %d\n", s.h.store_ok);
	kt_features_metrics(&d->bpf.feat, b);
}

double kt_report_member_rate(const struct kt_daemon *d, const struct kt_member_rt *m)
{
	return d->bpf.buckets && m->slot < KT_MAX_SLOTS && (d->bpf.coop || !kt_slot_is_coop(m->slot))
		       ? kt_rate_from_interval_fp(
				 KT_READ_ONCE(kt_bpf_bucket(&d->bpf, m->slot)->interval_fp))
		       : 0;
}

/* A groupBy template's groups on this node (*other: and the other pool),
 * or -1 for a limit that is no template. */
int kt_report_template_groups(const struct kt_daemon *d, const struct kt_limit_cfg *c, bool *other)
{
	int n;

	*other = false;
	if (!c->group_by)
		return -1;
	n = kt_groups_count(d->groups, c->name, other);
	return n > 0 ? n : 0;
}

/* The last throttle event's retry-after (ms; -1: closed) and age (s). */
double kt_report_retry_ms(const struct kt_limit_state *s)
{
	return s->last_retry_after_ns == ~0ULL ? -1.0 : (double)s->last_retry_after_ns / 1e6;
}
