/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The daemon's control socket: what its commands answer, and its
 * subscribers told of throttling (the server itself is ctlserver.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/log.h"
#include "control/ctlproto.h"
#include "control/daemon.h"
#include "control/daemon_int.h"
#include "control/report.h"

/* The reply to a parsed command (or parse error), malloc'd; NULL if out of
 * memory. */
static char *command_reply(void *ctx, int cmd)
{
	struct kt_daemon *d = ctx;
	char err[KT_ERR_LEN], *out;

	switch (cmd) {
	case KT_CTL_STATUS:
	case KT_CTL_STATUS_JSON:
		return kt_report_status(d, cmd == KT_CTL_STATUS_JSON);
	case KT_CTL_RELOAD:
		if (kt_daemon_reload(d, err, sizeof(err)) == 0)
			return strdup("ok: reloaded\n");
		return asprintf(&out, "error: %s\n", err) < 0 ? NULL : out;
	case KT_CTL_PING:
		return strdup("ok: pong\n");
	case KT_CTL_HEALTH:
	case KT_CTL_HEALTH_LIVE:
		return kt_report_health(d, cmd == KT_CTL_HEALTH_LIVE, NULL);
	default:
		return strdup(kt_ctl_error_reply(cmd) ? kt_ctl_error_reply(cmd) : "error: bad command\n");
	}
}

static int limit_index(const struct kt_daemon *d, const char *name)
{
	for (int i = 0; i < d->plan.n_limits; i++)
		if (!strcmp(d->plan.limits[i].cfg->name, name))
			return i;
	return -1;
}

static bool has_limit(void *ctx, const char *name)
{
	return limit_index(ctx, name) >= 0;
}

/* Subscribers of limit i: "throttled" at its first refusal after a quiet
 * spell (from an event), "resumed" once no refusal was reported for two
 * ticks (from the tick). */
void kt_daemon_notify_subscribers(struct kt_daemon *d, int i, uint64_t now)
{
	const struct kt_limit_state *s = &d->ls[i];
	bool refusing = s->last_event_ns && now - s->last_event_ns <= 2 * d->cfg.tick_ns;

	kt_ctlserver_notify(&d->ctl, d->plan.limits[i].cfg->name, refusing,
			    kt_report_reason_name(s->last_event_reason), kt_report_retry_ms(s));
}

static void subscribed(void *ctx, const char *name)
{
	struct kt_daemon *d = ctx;
	int i = limit_index(d, name);

	if (i >= 0)
		kt_daemon_notify_subscribers(d, i, kt_clock_ns());
}

const struct kt_ctl_ops kt_daemon_ctl_ops = {
	.command = command_reply,
	.has_limit = has_limit,
	.subscribed = subscribed,
};
