/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The controller owns each limit's policy over time (see controller.c):
 * counters, ramp, agreement, bucket policy, kernel writes and pins. */
#ifndef KT_CONTROLLER_H
#define KT_CONTROLLER_H

#include <stdint.h>
#include "kernel/apply.h"
#include "kthrottle.h"
#include "pool/pool.h"
#include "control/ramp.h"

#define KT_HISTORY (KT_EPOCH_TICKS_MAX + 2) /* per-tick samples: one epoch */

struct kt_sample {
	uint64_t ts_ns;
	uint64_t used;      /* admitted tokens (bytes for unit byte), cumulative */
	uint64_t calls;     /* admitted + throttled requests, cumulative */
	uint64_t refused;   /* throttled requests, cumulative */
	double granted;     /* tokens granted since start, cumulative */
	/* in-flight limits: the node's open connections and its slots in
	 * force, integrated over time (slot-seconds), cumulative: what the
	 * ramp's modes read as used and granted */
	double slots_used, slots_granted;
};


/* Controller state of one limit, index-aligned with plan.limits. */
struct kt_limit_state {
	struct kt_ramp ramp;
	double pool_rate;          /* tokens/s for the whole pool (ramp output) */
	int pool_size;             /* members sharing the pool */
	double bucket_rate;        /* last written per-bucket rate */
	double bucket_burst;
	double fallback_rate;      /* kernel's rate once the lease lapses */
	struct kt_bucket_policy pol; /* last computed: share, burst, lease */
	/* what kt_ctl_decide left for the writers, which only write it:
	 * the node bucket's policy, and with share: demand each bucket's own
	 * (slot k of kt_limit_slots; n_slot_pol of them, the array grown to
	 * at most KT_MAX_MEMBERS_PER_LIMIT and released by
	 * kt_ctl_free_states) */
	struct kt_bucket_policy node_pol;
	struct kt_bucket_policy *slot_pol;
	int n_slot_pol, slot_pol_cap;
	uint64_t pinned_lease;     /* lease_until last written to kt_leases */
	uint64_t pinned_ns;        /* when */
	/* ring of the last ticks, hist_cap samples (kt_ctl_hist_cap) in the
	 * daemon's hist_pool: one epoch of ticks, not KT_HISTORY, so that
	 * 10,000 limits take megabytes, not half a gigabyte */
	struct kt_sample *hist;
	int hist_cap, hist_len, hist_head;
	double epoch_used_rate;    /* admitted tokens/s over the trailing epoch */
	/* what the limit's slots admitted and refused since start, summed
	 * from per-slot growth: never goes backwards when members leave */
	uint64_t total_admitted, total_throttled, total_admitted_bytes;
	/* in-flight, share: demand: refusals in the last whole second
	 * (total_throttled at slots_refused_ns was slots_refused_at) */
	uint64_t slots_refused_at, slots_refused_ns, slots_refused_last;
	/* the same per priority class (classBy): its members' slots' refusals
	 * summed at slots_refused_ns, and in the last whole second */
	uint64_t cls_refused_at[KT_STORE_MAX_CLASSES], cls_refused_last[KT_STORE_MAX_CLASSES];
	/* in-flight: the node's open connections and slots in force, read
	 * from the kernel once a tick (kt_ctl_tick) for the ramp and the
	 * heartbeat's claim */
	uint64_t inflight_open, inflight_slots;
	/* shadow (enforce: false): what the slots refused and let pass since
	 * start (within total_admitted), read while the limit is or was a
	 * shadow one in this run (shadow_watch) */
	uint64_t total_would_refuse, total_would_refuse_bytes;
	bool shadow_watch;
	/* rate fields of this limit's buckets found changed in kt_buckets
	 * and written back (kt_bucket_verify), and when that was last logged */
	uint64_t kernel_fixes, kernel_fix_logged_ns;
	/* throttle events from the kernel (sampled, see struct kt_event) */
	uint64_t events[KT_REASON_COUNT];
	uint64_t last_event_ns, last_retry_after_ns;
	uint32_t last_event_reason;
	/* ticks in which the limit refused something, as ns (for metrics) */
	uint64_t throttled_seen, throttled_ns;
	/* the node bucket's share held after a join (hold_node_share) */
	int node_members_seen;
	double node_rate_decided, node_burst_decided;
	double node_hold_rate, node_hold_burst;
	uint64_t node_hold_until;
};

/* Last counts read from one bucket slot, and the limit (id + 1, 0 = none)
 * they were read for. */
struct kt_slot_base {
	uint32_t owner;
	struct kt_counters last;
	struct kt_shadow_counters last_shadow;
	/* share: demand: admitted + refused per second, over the last whole
	 * epoch (demand) and the one running since epoch_ns (calls at its start) */
	uint64_t epoch_ns, epoch_calls;
	double demand;
	/* and over the last completed window of >= KT_DEMAND_RECENT_NS */
	uint64_t recent_ns, recent_calls;
	double recent;
};
#define KT_DEMAND_RECENT_NS (100ULL * 1000000ULL)

struct kt_bpf;

/* What the controller reads and writes, and nothing else of the daemon. The
 * owner (the daemon, the benchmark) keeps the pointers current: after start,
 * and after a reload swaps the plan's state, pool and scratch. */
struct kt_ctl {
	uint64_t tick_ns, epoch_ns;       /* the config's timing */
	struct kt_plan *plan;             /* the limits */
	struct kt_limit_state *ls;        /* index-aligned with plan->limits */
	struct kt_pool *pool;             /* agreement: views, leases, heartbeats */
	struct kt_pool_local *pool_local; /* scratch, index-aligned with plan->limits */
	struct kt_bpf *bpf;               /* the buckets, counters and kt_leases */
	struct kt_slot_base *slot_base;   /* KT_MAX_SLOTS counter baselines */
	/* its own: share: demand: every member's demand, scratch for the pool
	 * (kt_ctl_free releases it) */
	double *demand_buf;
	int demand_cap;
	/* ... and with children that have a `weight`: every member's weight in
	 * the parent's pool, scratch (kt_ctl_fill_child_weights) */
	double *weight_buf;
	int weight_cap;
};

/* A limit's fresh state at `now`: the ramp at min. s must hold nothing to
 * release (zeroed, or released by kt_ctl_free_states). */
void kt_ctl_init_state(struct kt_limit_state *s, const struct kt_limit_rt *l, uint64_t now);
/* Releases what ls[0..n) own (their per-slot policies), not ls itself. */
void kt_ctl_free_states(struct kt_limit_state *ls, int n);
/* Samples a limit keeps: one epoch of ticks and a margin for ticks that
 * come late (at most KT_HISTORY). */
int kt_ctl_hist_cap(uint64_t epoch_ns, uint64_t tick_ns);
/* Copies s's newest samples (up to cap) into ring, which s uses from then
 * on; the ring it had is left as it was (its owner frees it). */
void kt_ctl_hist_rehome(struct kt_limit_state *s, struct kt_sample *ring, int cap);
/* Fresh state, then what the previous daemon pinned for this limit: its
 * pool lease (kt_pool_adopt) and, with resumedRampUp, its ramp level. */
void kt_ctl_start_limit(struct kt_ctl *c, int i, uint64_t now);
/* The bucket policy of limit i from the pool's view (kt_pool_bucket_policy),
 * at `now` (a join's hold on the node share runs out by it): every bucket's,
 * into s, once; the writers below only write what it left there. */
void kt_ctl_decide(struct kt_pool *pool, int i, const struct kt_limit_rt *l,
		   struct kt_limit_state *s, uint64_t now);
/* Rate and burst, then the lease, into every bucket of limit i, as the
 * last kt_ctl_decide of c->ls[i] (for the same plan) decided them. */
void kt_ctl_write_rates(struct kt_ctl *c, int i);
void kt_ctl_write_lease(struct kt_ctl *c, int i);
/* kt_leases: pin limit i's state; drop entries of limits no longer configured. */
void kt_ctl_pin(struct kt_ctl *c, int i, uint64_t now);
void kt_ctl_drop_stale_pins(struct kt_ctl *c);
/* What the pool is told about each limit of `plan` (members, ramp level). */
/* share: demand: each member's demand (admitted + refused per second: the
 * larger of the last whole epoch's and the running one's, so a member that
 * turns busy is reported at once) into local[i].member_demand; a dormant
 * caller's is KT_POOL_DEMAND_DORMANT. */
void kt_ctl_fill_demand(struct kt_ctl *c, struct kt_pool_local *local, uint64_t now);
/* Member j of limit l (weightBy/classBy caller) is dormant: its kt_coop
 * entry has admitted and refused nothing since it was published, so the
 * pool keeps no floor for it. */
bool kt_ctl_member_dormant(const struct kt_ctl *c, const struct kt_limit_rt *l, int j);
/* A parent whose children have a `weight`: each member it has through
 * such a child weighs that weight over the child's pool size (so the
 * child's members weigh its weight together, on all nodes), the others
 * what they weigh by the parent's own weightBy (or 1). Sets
 * local[i].member_weight for those parents; weights kept while the
 * buffer cannot grow. */
void kt_ctl_fill_child_weights(struct kt_ctl *c, struct kt_pool_local *local);
/* The weight member j of limit i has in its pool: a child's weight: over
 * its pool size when it comes through such a child, else its own (1 when
 * unset). Reads only. */
double kt_ctl_member_weight(const struct kt_plan *plan, const struct kt_pool *pool, int i, int j);
/* In-flight limits: each one's open count and slots in force on this node,
 * as this tick read them from the kernel, and its demand, into local (what
 * its heartbeat claims). */
void kt_ctl_fill_slots(struct kt_ctl *c, struct kt_pool_local *local, uint64_t now);
void kt_ctl_fill_pool_local(const struct kt_plan *plan, const struct kt_limit_state *ls,
			    struct kt_pool_local *local);
/* The tick's read of limit i's counters at `now`: each slot's growth into
 * the limit's totals (utilization) and the slot's demand windows. Only a
 * tick calls it: a read moves the windows. */
void kt_ctl_read_counters(struct kt_ctl *c, int i, uint64_t now);

/* What limit i's slots hold now, summed; read from the kernel, nothing
 * written (status, probes: a look between ticks changes no demand). */
struct kt_limit_counts {
	uint64_t admitted, throttled, admitted_bytes, throttled_bytes;
	uint64_t would_refuse, would_refuse_bytes; /* shadow */
};
void kt_ctl_peek_counters(const struct kt_ctl *c, int i, struct kt_limit_counts *out);
/* One controller tick at `now` (the daemon counts its ticks; exposed for
 * tests and the benchmark). */
void kt_ctl_tick(struct kt_ctl *c, uint64_t now);
/* Decide and write every limit's policy from the pool's view (the second
 * half of a tick; also run when a store answer arrives between ticks). */
void kt_ctl_apply_pool(struct kt_ctl *c, uint64_t now);
/* Releases what the controller owns (its demand scratch); not the pointers. */
void kt_ctl_free(struct kt_ctl *c);

#endif
