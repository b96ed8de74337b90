// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The in-flight audit's two programs (struct kt_audit_mark, struct
 * kt_audit_fix): an iterator that lists the marks of the sockets holding a
 * slot (and gives back those of sockets that never connected), and the
 * compare-and-swap that corrects a slot's open count. Neither is attached
 * to a cgroup: the daemon runs them (user/kernel/inflight_audit.c). */
#include "kthrottle.bpf.h"

#define KT_TCP_CLOSE 7 /* sk_state: neither connected nor connecting */

/* Each socket holding a slot: a socket still not connected
 * KT_AUDIT_UNCONNECTED_NS after its connect took the slot gives it back
 * (its connect failed before TCP, no route; a UDP socket disconnected; no
 * state change would ever tell); every other one's mark is listed. */
SEC("iter/bpf_sk_storage_map")
int kt_audit_marks(struct bpf_iter__bpf_sk_storage_map *ctx)
{
	struct sock *sk = ctx->sk;
	struct kt_sk_slot *m;
	struct kt_audit_mark rec;

	if (!sk || !ctx->value)
		return 0;
	/* the storage as a map value: what the connect hooks and releases
	 * compare-and-swap */
	m = bpf_sk_storage_get(&kt_sk_slot, sk, 0, 0);
	if (!m || !KT_READ_ONCE(m->held))
		return 0;
	if (sk->__sk_common.skc_state == KT_TCP_CLOSE &&
	    bpf_ktime_get_boot_ns() - KT_READ_ONCE(m->taken_ns) > KT_AUDIT_UNCONNECTED_NS) {
		kt_mark_give(m);
		return 0;
	}
	rec.slot = m->slot;
	rec.epoch = m->epoch;
	rec.node_slot = m->node_slot;
	rec.node_epoch = m->node_epoch;
	bpf_seq_write(ctx->meta->seq, &rec, sizeof(rec));
	return 0;
}

SEC("syscall")
int kt_audit_fix(struct kt_audit_fix *fix)
{
	__u32 slot = fix->slot;
	struct kt_inflight *in = bpf_map_lookup_elem(&kt_inflight, &slot);

	if (!in || KT_READ_ONCE(in->epoch) != fix->epoch)
		return 0;
	return __sync_val_compare_and_swap(&in->open, fix->expect, fix->want) == fix->expect;
}
