/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Throttle events to the daemon (kt_events), sampled: at most one per
 * millisecond per CPU. */
#ifndef KT_BPF_EVENTS_H
#define KT_BPF_EVENTS_H

#include "lib/maps.h"

/* Event reasons besides the bucket's own (kt_bucket_reason) */
#define KT_EV_BUCKET 0 /* why the bucket refuses */
#define KT_EV_SHADOW 1 /* a shadow limit would have refused */
#define KT_EV_INFLIGHT 2 /* an in-flight limit's slots are all open */

/* A sampled throttle event (struct kt_event) for a request finally
 * refused by the bucket in `slot` (never for one pacing admits later);
 * `why` a KT_EV_*. */
static __always_inline void kt_emit_event(__u32 slot, __u64 cgid, __u32 hook, __u64 wait_ns,
					  __u64 now, int why)
{
	struct kt_bucket *b = bpf_map_lookup_elem(&kt_buckets, &slot);
	struct kt_event *e;
	__u32 zero = 0;
	__u64 *last;

	last = bpf_map_lookup_elem(&kt_ev_gate, &zero);
	if (!b || !last || now - *last < KT_EVENT_GAP_NS)
		return;
	*last = now;
	e = bpf_ringbuf_reserve(&kt_events, sizeof(*e), 0);
	if (!e)
		return; /* the daemon is behind: the counters still count */
	e->ts_ns = now;
	e->cgroup_id = cgid;
	e->retry_after_ns = wait_ns;
	e->limit_id = b->limit_id;
	e->slot = slot;
	e->hook = (__u8)hook;
	e->reason = why == KT_EV_SHADOW	    ? KT_REASON_SHADOW
		    : why == KT_EV_INFLIGHT && kt_slots_in_force(b, now) ? KT_REASON_INFLIGHT
									  : (__u8)kt_bucket_reason(b, now);
	__builtin_memset(e->pad, 0, sizeof(e->pad));
	bpf_ringbuf_submit(e, 0);
}

#endif /* KT_BPF_EVENTS_H */
