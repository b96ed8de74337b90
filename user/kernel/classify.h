/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Builds the kernel classifier (kt_dests LPM entries, the per-limit match
 * written into kt_limits, and the kt_ports filters) from the configured
 * limits. Pure: no BPF calls, so it is unit tested. */
#ifndef KT_CLASSIFY_H
#define KT_CLASSIFY_H

#include <stddef.h>
#include <stdint.h>
#include "kthrottle.h"
#include "base/config.h"

struct kt_rule_input {
	uint32_t limit_id;
	enum kt_unit unit;
	uint8_t proto_mask;
	uint16_t port_lo, port_hi;
	uint16_t refuse_errno; /* 0: KT_REFUSE_ERRNO */
	uint8_t depth;         /* levels above it (parent:): a deeper limit wins a tie */
	const struct kt_cidr *cidrs;
	int n_cidrs;
};

struct kt_dest_entry {
	struct kt_dest_key key;
	struct kt_dest_val val;
};

struct kt_classifier {
	struct kt_dest_entry *dests; /* one per (limit, distinct prefix) */
	int n_dests;
	struct kt_port_filter ports[KT_HOOK_COUNT];
	struct kt_rule_input *rules; /* copies without cidrs, for kt_classifier_lookup */
	int n_rules;
};

/* Rules are taken in priority order (config order). Fails with -E2BIG and a
 * message when the limits have more than KT_MAX_DESTS prefixes in all, or
 * more than 65,535 limits are given. */
int kt_classifier_build(const struct kt_rule_input *rules, int n, struct kt_classifier *out,
			char *err, size_t errlen);
void kt_classifier_free(struct kt_classifier *c);

/* What the BPF path would pick for a cgroup that is a member of every limit
 * (members = NULL), or of the n_members limit ids given: the limit id, or
 * -1 for pass. For tests. */
int kt_classifier_lookup_in(const struct kt_classifier *c, const uint8_t addr[16],
			    enum kt_hook hook, uint8_t proto, uint16_t port,
			    const uint32_t *members, int n_members);
int kt_classifier_lookup(const struct kt_classifier *c, const uint8_t addr[16], enum kt_hook hook,
			 uint8_t proto, uint16_t port);

#endif
