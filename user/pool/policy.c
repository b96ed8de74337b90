/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* A bucket policy's arithmetic: see policy.h. */
#include "pool/policy.h"

void kt_node_policy(const struct kt_bucket_policy *pol, int n, struct kt_bucket_policy *out)
{
	*out = *pol;
	if (pol->node_burst > 0) {
		out->rate = pol->node_rate;
		out->burst = pol->node_burst;
		out->fallback_rate = pol->node_fallback_rate;
		out->fallback_burst = pol->node_fallback_burst;
		return;
	}
	out->rate *= n;
	out->burst *= n;
	out->fallback_rate *= n;
	out->fallback_burst *= n;
}

#include <math.h>

/* Whole slots in a share of `v` slots: down for a share that must hold
 * exactly, up for a member whose node bucket bounds the sum. The epsilon
 * keeps 30 / 3 x 3 from becoming 9.999.. and so 9. */
static double whole_slots(double v, bool up)
{
	if (!(v > 0) || !isfinite(v))
		return 0;
	return up ? ceil(v - 1e-9) : floor(v + 1e-9);
}

void kt_slots_policy(struct kt_bucket_policy *pol, bool member_up)
{
	double s = whole_slots(pol->rate, member_up), f = whole_slots(pol->fallback_rate, member_up);
	double ns = whole_slots(pol->node_rate, false), nf = whole_slots(pol->node_fallback_rate, false);

	pol->rate = s >= 1 ? 1 : 0;
	pol->burst = s >= 1 ? s : 1;
	pol->fallback_rate = f >= 1 ? 1 : 0;
	pol->fallback_burst = f >= 1 ? f : 0;
	if (pol->node_burst > 0) {
		/* node_burst > 0 says the node fields are set (kt_node_policy) */
		pol->node_rate = ns >= 1 ? 1 : 0;
		pol->node_burst = ns >= 1 ? ns : 1;
		pol->node_fallback_rate = nf >= 1 ? 1 : 0;
		pol->node_fallback_burst = nf >= 1 ? nf : 0;
	}
}
