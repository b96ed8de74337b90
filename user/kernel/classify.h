/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Builds the kernel classifier (kt_classify LPM entries and kt_ports filters)
 * from the configured limits. Pure: no BPF calls, so it is unit tested. */
#ifndef KT_CLASSIFY_H
#define KT_CLASSIFY_H

#include <stddef.h>
#include <stdint.h>
#include "kthrottle.h"
#include "config.h"

struct kt_rule_input {
	uint32_t limit_id;
	enum kt_unit unit;
	uint8_t proto_mask;
	uint16_t port_lo, port_hi;
	const struct kt_cidr *cidrs;
	int n_cidrs;
};

struct kt_prefix_entry {
	struct kt_prefix_key key;
	struct kt_rule_set set;
};

struct kt_classifier {
	struct kt_prefix_entry *entries;
	int n_entries;
	struct kt_port_filter ports[KT_HOOK_COUNT];
};

enum kt_hook kt_hook_for_unit(enum kt_unit unit);

/* Rules are taken in priority order (config order). Fails with -E2BIG and a
 * message when one prefix would need more than KT_RULES_PER_PREFIX rules or
 * the classifier more than KT_MAX_PREFIXES prefixes. */
int kt_classifier_build(const struct kt_rule_input *rules, int n, struct kt_classifier *out,
			char *err, size_t errlen);
void kt_classifier_free(struct kt_classifier *c);

/* What the BPF path would pick: limit id, or -1 for pass. For tests. */
int kt_classifier_lookup(const struct kt_classifier *c, const uint8_t addr[16], enum kt_hook hook,
			 uint8_t proto, uint16_t port);

#endif
