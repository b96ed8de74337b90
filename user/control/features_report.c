/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The kernel's features in status and metrics: see features_report.h. */
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include "control/features_report.h"

static const char *state_name(enum kt_feat_state s)
{
	return s == KT_FEAT_ON ? "on" : s == KT_FEAT_OFF ? "off" : "unprobed";
}

void kt_features_status(const struct kt_features *fs, struct kt_sbuf *b, bool json)
{
	struct utsname u;

	if (uname(&u) < 0)
		snprintf(u.release, sizeof(u.release), "?");
	if (json) {
		kt_sb_printf(b, ",\"kernel\":{\"release\":");
		kt_sb_json_str(b, u.release);
		kt_sb_printf(b, ",\"features_off\":%d,\"features\":{", kt_features_off(fs));
		for (int f = 0; f < KT_FEAT_COUNT; f++) {
			const struct kt_feature_state *st = &fs->f[f];

			kt_sb_printf(b, "%s\"%s\":{\"state\":\"%s\"", f ? "," : "", kt_feature_name(f),
				     state_name(st->state));
			if (st->state == KT_FEAT_OFF) {
				kt_sb_printf(b, ",\"why\":");
				kt_sb_json_str(b, st->why);
				kt_sb_printf(b, ",\"effect\":");
				kt_sb_json_str(b, kt_feature_effect(f));
			}
			kt_sb_printf(b, "}");
		}
		kt_sb_printf(b, "}}");
		return;
	}
	/* one line, on and off, then why for each off */
	kt_sb_printf(b, "kernel %s  features on:", u.release);
	for (int f = 0; f < KT_FEAT_COUNT; f++)
		if (fs->f[f].state == KT_FEAT_ON)
			kt_sb_printf(b, " %s", kt_feature_name(f));
	if (kt_features_off(fs)) {
		kt_sb_printf(b, "  off:");
		for (int f = 0; f < KT_FEAT_COUNT; f++)
			if (fs->f[f].state == KT_FEAT_OFF)
				kt_sb_printf(b, " %s", kt_feature_name(f));
	}
	kt_sb_printf(b, "\n");
	for (int f = 0; f < KT_FEAT_COUNT; f++)
		if (fs->f[f].state == KT_FEAT_OFF)
			kt_sb_printf(b, "  feature %s off: %s; %s\n", kt_feature_name(f), fs->f[f].why,
				     kt_feature_effect(f));
}

bool kt_features_limit_enforced(const struct kt_features *fs, const struct kt_limit_cfg *c)
{
	return kt_features_first_off(fs, kt_unit_needs(c->unit)) == KT_FEAT_COUNT;
}

void kt_features_limit_status(const struct kt_features *fs, const struct kt_limit_cfg *c,
			      struct kt_sbuf *b, bool json)
{
	unsigned needs = kt_unit_needs(c->unit),
		 uses = kt_unit_uses(c->unit, c->allow_raw_sockets, c->max_delay_ms != 0);
	bool enforced = kt_features_limit_enforced(fs, c), first = true;

	if (json) {
		kt_sb_printf(b, ",\"kernel_enforced\":%s,\"features_off\":[", enforced ? "true" : "false");
		for (int f = 0; f < KT_FEAT_COUNT; f++)
			if (((needs | uses) & (1u << f)) && fs->f[f].state == KT_FEAT_OFF) {
				kt_sb_printf(b, "%s\"%s\"", first ? "" : ",", kt_feature_name(f));
				first = false;
			}
		kt_sb_printf(b, "]");
		return;
	}
	for (int f = 0; f < KT_FEAT_COUNT; f++) {
		unsigned bit = 1u << f;

		if (!((needs | uses) & bit) || fs->f[f].state != KT_FEAT_OFF)
			continue;
		if (needs & bit)
			kt_sb_printf(b, "  NOT ENFORCED: the kernel refused feature %s (%s)\n",
				     kt_feature_name(f), fs->f[f].why);
		else
			kt_sb_printf(b, "  degraded: feature %s off: %s\n", kt_feature_name(f),
				     kt_feature_effect(f));
	}
}

void kt_features_metrics(const struct kt_features *fs, struct kt_sbuf *b)
{
	kt_sb_printf(b, "# HELP kthrottle_kernel_feature 1 when the kernel took the feature, 0 when it "
			"refused it (kthrottlectl status names why).\n"
			"# TYPE kthrottle_kernel_feature gauge\n");
	for (int f = 0; f < KT_FEAT_COUNT; f++)
		if (fs->f[f].state != KT_FEAT_UNPROBED)
			kt_sb_printf(b, "kthrottle_kernel_feature{feature=\"%s\"} %d\n",
				     kt_feature_name(f), fs->f[f].state == KT_FEAT_ON);
}
