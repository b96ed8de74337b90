/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#include <stdio.h>
#include <string.h>
#include "control/health.h"
#include "base/log.h"

/* A why is one line of a line-based reply. */
static double secs(uint64_t from, uint64_t now)
{
	return now > from ? (double)(now - from) / 1e9 : 0;
}

static void eval_kernel(const struct kt_health_in *in, struct kt_health *h)
{
	h->kernel_ok = false;
	if (!in->bpf_loaded)
		snprintf(h->kernel_why, sizeof(h->kernel_why), "BPF programs not loaded");
	else if (in->unlinked > 0)
		snprintf(h->kernel_why, sizeof(h->kernel_why), "%d member cgroup(s) not attached, e.g. %s",
			 in->unlinked, in->unlinked_path ? in->unlinked_path : "?");
	else if (in->apply_err && in->apply_err[0])
		snprintf(h->kernel_why, sizeof(h->kernel_why), "members not updated: %s",
			 in->apply_err);
	else
		h->kernel_ok = true;
}

static void eval_kube(const struct kt_health_in *in, struct kt_health *h)
{
	const struct kt_kube_status *k = &in->kube;
	const char *err = k->error[0] ? k->error : "no answer yet";

	h->kube_ok = false;
	if (!k->synced)
		snprintf(h->kube_why, sizeof(h->kube_why), "no pod list since the start (%s for %.0fs): %s",
			 kt_kube_state_name(k->state), secs(k->since_ns, in->now_ns), err);
	else if (k->state == KT_KUBE_UNREACHABLE && (k->http_status == 401 || k->http_status == 403))
		/* a refused token or RBAC is no outage to ride out: nothing
		 * new will be attached until someone fixes it */
		snprintf(h->kube_why, sizeof(h->kube_why), "the API refuses this daemon (HTTP %ld): %s",
			 k->http_status, err);
	else if (k->state == KT_KUBE_UNREACHABLE &&
		 in->now_ns > k->since_ns + KT_HEALTH_KUBE_STALE_S * 1000000000ull)
		snprintf(h->kube_why, sizeof(h->kube_why), "unreachable for %.0fs (over %ds): %s",
			 secs(k->since_ns, in->now_ns), KT_HEALTH_KUBE_STALE_S, err);
	else
		h->kube_ok = true;
}

void kt_health_eval(const struct kt_health_in *in, struct kt_health *h)
{
	uint64_t last = in->last_tick_ns ? in->last_tick_ns : in->started_ns;
	uint64_t bound = in->tick_ns * KT_HEALTH_LIVE_TICKS;

	memset(h, 0, sizeof(*h));
	eval_kernel(in, h);
	h->kube_ok = true;
	if (in->uses_kube)
		eval_kube(in, h);
	h->store_ok = !in->uses_store || in->stores_down <= 0;
	if (!h->store_ok)
		snprintf(h->store_why, sizeof(h->store_why), "%s%s",
			 in->store_why ? in->store_why : "",
			 in->stores_down > 1 ? " (and more limits)" : "");
	h->ready = h->kernel_ok && h->kube_ok;
	if (bound < KT_HEALTH_LIVE_MIN_NS)
		bound = KT_HEALTH_LIVE_MIN_NS;
	h->live = in->now_ns <= last + bound;
	if (!h->live)
		snprintf(h->live_why, sizeof(h->live_why), "no tick for %.1fs (bound %.1fs)",
			 secs(last, in->now_ns), (double)bound / 1e9);
	kt_one_line(h->kernel_why, sizeof(h->kernel_why), h->kernel_why);
	kt_one_line(h->kube_why, sizeof(h->kube_why), h->kube_why);
	kt_one_line(h->store_why, sizeof(h->store_why), h->store_why);
}

void kt_health_format(const struct kt_health_in *in, const struct kt_health *h, bool live,
		      char *buf, size_t len)
{
	size_t n = 0;

#define PUT(...)                                                                 \
	do {                                                                     \
		if (n < len) {                                                   \
			int w = snprintf(buf + n, len - n, __VA_ARGS__);         \
			n += w > 0 ? (size_t)w : 0;                              \
		}                                                                \
	} while (0)
	if (!len)
		return;
	buf[0] = 0;
	if (live) {
		if (h->live)
			PUT("live\n");
		else
			PUT("not live %s\n", h->live_why);
		return;
	}
	PUT("%s\n", h->ready ? "ready" : "not ready");
	if (h->kernel_ok)
		PUT("kernel ok\n");
	else
		PUT("kernel fail %s\n", h->kernel_why);
	if (in->uses_kube) {
		if (h->kube_ok)
			PUT("kubernetes ok\n");
		else
			PUT("kubernetes fail %s\n", h->kube_why);
	}
	if (in->uses_store) {
		if (h->store_ok)
			PUT("store ok\n");
		else
			PUT("store down %s\n", h->store_why);
	}
	/* a refused object always; another feature when a limit uses it */
	for (int f = 0; in->feat && f < KT_FEAT_COUNT; f++)
		if (in->feat->f[f].state == KT_FEAT_OFF &&
		    (f < KT_FEAT_N_OBJECTS || (in->feat_used & (1u << f))))
			PUT("warning kernel feature %s off: %s; %s\n", kt_feature_name(f),
			    in->feat->f[f].why, kt_feature_effect(f));
	if (in->unenforced > 0)
		PUT("warning %d limit(s) not enforced by this kernel, e.g. %s\n", in->unenforced,
		    in->unenforced_limit ? in->unenforced_limit : "?");
#undef PUT
}
