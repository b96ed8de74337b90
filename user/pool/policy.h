/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What one bucket may admit, as the pool decides it (pool.h) and the kernel
 * layer writes it (user/kernel/apply.h, bucket.h). Plain numbers: this
 * header includes nothing of the kernel layer, so the layers above and
 * below it can both use it. */
#ifndef KT_POLICY_H
#define KT_POLICY_H

#include <stdbool.h>
#include <stdint.h>

/* What one bucket of a limit may admit: its share while the lease holds,
 * then the fallback, then nothing (see struct kt_bucket). Times are kt clock
 * ns; valid_until 0 = no lease (local and static stores). */
struct kt_bucket_policy {
	double rate;           /* tokens/s: the share (pod scope: one member's; node: the node's) */
	double burst;          /* tokens */
	uint64_t valid_until;
	double fallback_rate;  /* tokens/s after valid_until; 0 = closed */
	double fallback_burst; /* tokens after valid_until (burst x fallback / rate) */
	uint64_t fallback_until; /* 0 = the fallback never ends */
	/* > 0: a strict limit (rateLimit.strict): the bucket is
	 * KT_BUCKET_STRICT with burst 1 and this hold per admission, and
	 * apply never opens it: a new one starts closed, a kept strict one is
	 * left as it is (a permit armed in it stays valid), a kept ordinary
	 * one is closed. Only the strict controller (strict.h) arms permits.
	 * The fields above are then unused. */
	uint64_t strict_hold_ns;
	/* The node bucket's (kt_limit_rt.has_pool): the node's whole share,
	 * all its members together. node_burst 0: the member's times the
	 * number of members (see kt_node_policy). */
	double node_rate;
	double node_burst;
	double node_fallback_rate;
	double node_fallback_burst;
};

/* The policy of the node bucket of a limit with `n` members on the node,
 * whose member policy is `pol`. Pure. */
void kt_node_policy(const struct kt_bucket_policy *pol, int n, struct kt_bucket_policy *out);

/* In-flight limits (unit concurrent): a policy whose rates are slot
 * counts, written as a slot bucket holds them (struct kt_inflight): burst
 * the whole slots, rate 1 while there is one (0: closed), and the same for
 * the fallback and the node bucket's fields. Shares round down, so the
 * nodes' shares never sum past max; with member_up a member's rounds up
 * (a pod scope member, whose node bucket bounds the sum). Pure. */
void kt_slots_policy(struct kt_bucket_policy *pol, bool member_up);

#endif
