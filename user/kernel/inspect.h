/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Reads the pinned kernel state directly (no daemon needed): limits, their
 * member cgroups, bucket rates and counters. Used by kthrottlectl when the
 * daemon is down, by `kthrottlectl watch`, and by tests. */
#ifndef KT_INSPECT_H
#define KT_INSPECT_H

#include <stdbool.h>
#include <stdint.h>
#include "kernel/bpf_loader.h"
#include "kthrottle.h"

#define KT_INSPECT_MAX_MEMBERS 64

struct kt_kmember {
	uint64_t cgroup_id;
	uint32_t slot;
	double rate;     /* tokens/s its bucket grants now */
	bool fallback_active; /* the daemon stopped refreshing: store-failure rate */
	uint64_t burst;
	struct kt_counters counters;
};

struct kt_klimit {
	uint32_t id;
	struct kt_limit_info info;
	struct kt_kmember members[KT_INSPECT_MAX_MEMBERS];
	int n_members;
	struct kt_counters total; /* over distinct buckets */
};

/* Allocate zeroed (calloc); free with kt_kstate_free. */
struct kt_kstate {
	struct kt_klimit *limits; /* n_limits of them, grown as read */
	int n_limits;
	int cap;
};

/* b: opened with kt_bpf_open_pinned. Replaces what st held. */
int kt_inspect_read(const struct kt_bpf *b, struct kt_kstate *st);
void kt_kstate_free(struct kt_kstate *st);
const struct kt_klimit *kt_inspect_find(const struct kt_kstate *st, const char *name);

#endif
