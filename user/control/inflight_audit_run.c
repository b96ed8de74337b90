// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The daemon's in-flight audit: see inflight_audit_run.h. */
#include <string.h>
#include "base/log.h"
#include "control/inflight_audit_run.h"
#include "control/inflight_report.h"

/* The in-flight limit whose bucket is in slot, and whose: "node" or the
 * member's id. */
static const char *limit_of(const struct kt_plan *plan, uint32_t slot, const char **whose)
{
	for (int i = 0; i < plan->n_limits; i++) {
		const struct kt_limit_rt *l = &plan->limits[i];

		if (l->cfg->unit != KT_UNIT_CONCURRENT)
			continue;
		if (l->has_pool && l->pool_slot == slot) {
			*whose = "the node";
			return l->cfg->name;
		}
		for (int j = 0; j < l->n_members; j++)
			if (l->members[j].slot == slot) {
				*whose = l->members[j].id;
				return l->cfg->name;
			}
	}
	*whose = "no member";
	return "(none)";
}

struct fixed_ctx {
	struct kt_audit_run *r;
	const struct kt_plan *plan;
};

static void on_fixed(void *arg, uint32_t slot, uint64_t from, uint64_t to)
{
	struct fixed_ctx *c = arg;
	const char *whose, *name = limit_of(c->plan, slot, &whose);

	c->r->corrections++;
	kt_warn("limit %s: in-flight count of %s corrected from %llu to %llu, the sockets holding "
		"its slots (%s)", name, whose, (unsigned long long)from, (unsigned long long)to,
		to < from ? "some closed where no program of this node saw it"
			  : "the count was written lower by hand");
}

void kt_audit_run_tick(struct kt_audit_run *r, const struct kt_plan *plan, const char *pin_dir,
		       struct kt_features *feat, uint64_t now)
{
	struct fixed_ctx c = { r, plan };
	char err[512];

	if (!kt_plan_has_inflight(plan)) {
		if (r->loaded)
			kt_inflight_audit_close(&r->a);
		r->loaded = false;
		return;
	}
	if (r->load_failed || now - r->last_ns < KT_AUDIT_INTERVAL_NS)
		return;
	r->last_ns = now;
	if (!r->loaded) {
		if (kt_inflight_audit_open(&r->a, pin_dir, err, sizeof(err)) != 0) {
			kt_warn("kernel feature %s off: %s; open counts are not audited (a close no program sees stays counted)",
				kt_feature_name(KT_FEAT_AUDIT), err);
			kt_features_set(feat, KT_FEAT_AUDIT, false, err);
			r->load_failed = true;
			return;
		}
		kt_features_set(feat, KT_FEAT_AUDIT, true, NULL);
		r->loaded = true;
	}
	if (kt_inflight_audit_run(&r->a, on_fixed, &c, err, sizeof(err)) < 0)
		kt_warn("%s", err);
}

void kt_audit_run_reset(struct kt_audit_run *r)
{
	r->load_failed = false;
}

void kt_audit_run_close(struct kt_audit_run *r)
{
	if (r->loaded)
		kt_inflight_audit_close(&r->a);
	r->loaded = false;
}
