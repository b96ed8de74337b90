// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The in-flight audit's two programs (struct kt_audit_mark, struct
 * kt_audit_fix): an iterator that lists the marks of the sockets holding a
 * slot, and the compare-and-swap that corrects a slot's open count. Neither
 * is attached to a cgroup: the daemon runs them (user/kernel/inflight_audit.c). */
#include "kthrottle.bpf.h"

SEC("iter/bpf_sk_storage_map")
int kt_audit_marks(struct bpf_iter__bpf_sk_storage_map *ctx)
{
	struct kt_sk_slot *m = ctx->value;
	struct kt_audit_mark rec;

	if (!ctx->sk || !m || !KT_READ_ONCE(m->held))
		return 0;
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
