/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The state of one kt_plan_apply, shared by its two halves: planning
 * (apply_plan.c: kernel reads only) and committing (apply.c: every write
 * saved first, rollback). Not for use outside user/kernel/apply*.c. */
#ifndef KT_APPLY_INT_H
#define KT_APPLY_INT_H

#include <stdbool.h>
#include <stdint.h>
#include "kernel/apply.h"
#include "kernel/classify.h"
#include "kernel/layout.h"

static const __u32 zero_key; /* of the one-entry arrays */

/* slot_state: 0 free, 1 kept from before, 2 newly allocated; kt_buckets
 * slots, then kt_coop entries from KT_COOP_SLOT0 */
struct slot_alloc {
	unsigned char state[KT_MAX_SLOTS];
	int next;
};

/* One (cgroup, limit) -> slot membership found in kt_members. */
struct old_member {
	uint64_t cgid;
	uint32_t limit_id, slot;
};

/* A bucket slot the commit wrote, as it was before. */
struct saved_slot {
	uint32_t slot;
	bool fresh;               /* newly allocated: its counters were zeroed too */
	struct kt_bucket old;
	uint64_t tat_after;       /* tat right after our write */
	struct kt_counters *ctrs; /* fresh: the old per-CPU counters */
	bool up_written;          /* kt_up[slot] was written: old_up puts it back */
	uint32_t old_up;
};

/* One apply: the kernel state it read, the plan it computed, and what its
 * commit wrote so far. */
struct apply {
	struct kt_bpf *b;
	struct kt_plan *plan;
	const struct kt_bucket_policy *pol;
	/* before */
	struct kt_limit_info infos[KT_MAX_LIMITS];
	struct kt_limit_ext exts[KT_MAX_LIMITS];
	struct kt_member_key *old_keys;
	struct kt_member_val *old_vals;
	int n_old_keys;
	struct old_member *old;
	int n_old;
	struct kt_dest_entry *old_dests;
	int n_old_dests;
	struct kt_port_filter old_ports[KT_HOOK_COUNT];
	__u32 old_idle; /* kt_idle_hooks before */
	/* the plan */
	bool id_used[KT_MAX_LIMITS];
	/* by plan index: a pod-scope limit that keeps buckets, whose new
	 * buckets start with one heartbeat of their share (see commit_slot) */
	bool born_empty[KT_MAX_LIMITS];
	struct slot_alloc sa;
	struct kt_rule_input *rules;
	struct kt_classifier cls;
	struct kt_attach *want;
	struct kt_member_val *want_vals;
	int n_want;
	int *want_old;         /* old_keys index of want[i]; -1: a new key */
	int *dest_old;         /* old_dests index of cls.dests[i]; -1: a new entry */
	bool *old_key_kept, *old_dest_kept;
	struct kt_attach *attach;
	int n_attach;
	struct kt_counters *zero;
	/* the commit */
	int steps;
	uint16_t saved_idx[KT_MAX_SLOTS]; /* 1 + index into saved; 0: untouched */
	struct saved_slot *saved;
	int n_saved, n_fresh;
	struct kt_counters *ctrs;
	int done_limits, done_exts, done_members, done_dests, done_ports;
	bool done_idle;
	__u32 idle; /* the kt_idle_hooks mask written, with done_idle */
};

/* Plan: limit ids, what the maps hold now, bucket slots (kept or new), and
 * what the maps should hold (layout.c), each new entry matched with the one
 * it replaces. Reads the kernel only: any error leaves it untouched. */
int kt_apply_plan(struct apply *a, char *err, size_t errlen);

#endif
