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
