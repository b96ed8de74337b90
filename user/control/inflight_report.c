// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* In-flight limits in status and metrics: see inflight_report.h. */
#include <stdlib.h>
#include <string.h>
#include "control/inflight_report.h"

static void view_of(const struct kt_bpf *bpf, uint32_t slot, uint64_t now,
		    struct kt_inflight_view *out)
{
	struct kt_inflight in;

	memset(out, 0, sizeof(*out));
	if (slot >= KT_MAX_BUCKETS || !bpf->buckets || kt_bpf_read_inflight(bpf, slot, &in) < 0)
		return;
	out->open = in.open;
	out->peak = in.peak;
	out->slots = kt_slots_in_force(&bpf->buckets[slot], now);
}

bool kt_plan_has_inflight(const struct kt_plan *plan)
{
	for (int i = 0; i < plan->n_limits; i++)
		if (plan->limits[i].cfg->unit == KT_UNIT_CONCURRENT)
			return true;
	return false;
}

void kt_inflight_node(const struct kt_bpf *bpf, const struct kt_limit_rt *l, uint64_t now,
		      struct kt_inflight_view *out)
{
	/* pod scope: the node bucket every member is chained to (from the
	 * first member on); node scope: the one bucket all members charge */
	if (l->has_pool)
		view_of(bpf, l->pool_slot, now, out);
	else if (l->n_members > 0)
		view_of(bpf, l->members[0].slot, now, out);
	else
		memset(out, 0, sizeof(*out));
}

void kt_inflight_member(const struct kt_bpf *bpf, const struct kt_limit_rt *l, int j, uint64_t now,
			struct kt_inflight_view *out)
{
	view_of(bpf, l->members[j].slot, now, out);
}

void kt_inflight_status(const struct kt_bpf *bpf, const struct kt_limit_rt *l, struct kt_sbuf *b,
			bool json, uint64_t now)
{
	struct kt_inflight_view n, m;

	if (l->cfg->unit != KT_UNIT_CONCURRENT)
		return;
	kt_inflight_node(bpf, l, now, &n);
	if (!json) {
		kt_sb_printf(b, "  in flight: %llu open of %llu slots on this node (peak %llu)\n",
			     (unsigned long long)n.open, (unsigned long long)n.slots,
			     (unsigned long long)n.peak);
		for (int j = 0; j < l->n_members; j++) {
			kt_inflight_member(bpf, l, j, now, &m);
			kt_sb_printf(b, "    member %s  %llu open of %llu  peak %llu\n", l->members[j].id,
				     (unsigned long long)m.open, (unsigned long long)m.slots,
				     (unsigned long long)m.peak);
		}
		return;
	}
	kt_sb_printf(b, "\"inflight\":{\"open\":%llu,\"slots\":%llu,\"peak\":%llu,\"members\":[",
		     (unsigned long long)n.open, (unsigned long long)n.slots, (unsigned long long)n.peak);
	for (int j = 0; j < l->n_members; j++) {
		kt_inflight_member(bpf, l, j, now, &m);
		kt_sb_printf(b, "%s{\"member_id\":", j ? "," : "");
		kt_sb_json_str(b, l->members[j].id);
		kt_sb_printf(b, ",\"open\":%llu,\"slots\":%llu,\"peak\":%llu}", (unsigned long long)m.open,
			     (unsigned long long)m.slots, (unsigned long long)m.peak);
	}
	kt_sb_printf(b, "]},");
}

void kt_inflight_metrics(const struct kt_bpf *bpf, const struct kt_plan *plan,
			 uint64_t corrections, struct kt_sbuf *b, uint64_t now)
{
	static const struct {
		const char *name, *help;
	} fam[] = {
		{ "inflight", "Connections holding a slot of the in-flight limit on this node." },
		{ "inflight_limit", "Slots this node's share of the in-flight limit grants now." },
		{ "inflight_peak", "The most connections open at once on this node." },
	};
	struct kt_inflight_view *views;

	if (!kt_plan_has_inflight(plan) || !(views = calloc((size_t)plan->n_limits, sizeof(*views))))
		return;
	/* each limit's node view read once for the three families */
	for (int i = 0; i < plan->n_limits; i++)
		if (plan->limits[i].cfg->unit == KT_UNIT_CONCURRENT)
			kt_inflight_node(bpf, &plan->limits[i], now, &views[i]);
	for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
		kt_sb_printf(b, "# HELP kthrottle_%s %s\n# TYPE kthrottle_%s gauge\n", fam[f].name,
			     fam[f].help, fam[f].name);
		for (int i = 0; i < plan->n_limits; i++) {
			const struct kt_inflight_view *n = &views[i];

			if (plan->limits[i].cfg->unit != KT_UNIT_CONCURRENT)
				continue;
			kt_sb_printf(b, "kthrottle_%s{limit=\"%s\"} %llu\n", fam[f].name,
				     plan->limits[i].cfg->name,
				     (unsigned long long)(f == 0 ? n->open : f == 1 ? n->slots : n->peak));
		}
	}
	free(views);
	kt_sb_printf(b, "# HELP kthrottle_member_inflight Connections of one member cgroup holding a slot.\n"
			"# TYPE kthrottle_member_inflight gauge\n");
	for (int i = 0; i < plan->n_limits; i++) {
		const struct kt_limit_rt *l = &plan->limits[i];

		for (int j = 0; l->cfg->unit == KT_UNIT_CONCURRENT && j < l->n_members; j++) {
			struct kt_inflight_view m;

			kt_inflight_member(bpf, l, j, now, &m);
			kt_sb_printf(b, "kthrottle_member_inflight{limit=\"%s\",member=\"%s\"} %llu\n",
				     l->cfg->name, l->members[j].id, (unsigned long long)m.open);
		}
	}
	kt_sb_printf(b, "# HELP kthrottle_inflight_corrections_total Open counts the audit set to the "
			"sockets holding their slots (closes no program saw, counts written by hand).\n"
			"# TYPE kthrottle_inflight_corrections_total counter\n"
			"kthrottle_inflight_corrections_total %llu\n",
		     (unsigned long long)corrections);
}
