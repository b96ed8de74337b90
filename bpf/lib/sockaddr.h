/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The connect and sendmsg hooks' decision: classify the destination of a
 * sock_addr call (remembered per socket in kt_sk_sa), then charge it or
 * take an in-flight slot, refusing with the limit's errno. */
#ifndef KT_BPF_SOCKADDR_H
#define KT_BPF_SOCKADDR_H

#include "lib/charge.h"
#include "lib/classify.h"
#include "lib/events.h"
#include "lib/inflight.h"

/* A connect to an in-flight limit: a slot taken, or refused at once with
 * the limit's errno (no retry time: a slot frees when a socket closes). */
static __always_inline int kt_inflight_verdict(struct bpf_sock *sk, const struct kt_cls *cls,
					       __u64 cgid, __u32 hook, __u64 now)
{
	__u32 slot = cls->slot, by;
	struct kt_counters *c = bpf_map_lookup_elem(&kt_counters, &slot);
	int verdict = kt_inflight_take(sk, cls, now, &by);

	if (verdict == KT_PASS)
		return 1;
	if (verdict == KT_ADMIT) {
		if (c)
			c->admitted++;
		return 1;
	}
	if (c)
		c->throttled++;
	kt_emit_event(by, cgid, hook, 0, now, KT_EV_INFLIGHT);
	bpf_set_retval(-(int)(cls->refuse_errno ? cls->refuse_errno : KT_REFUSE_ERRNO));
	return 0;
}

/* connect and sendmsg hooks: classify the destination of a sock_addr call
 * and refuse it with the limit's errno, at once, when its bucket is empty.
 * A repeat of the socket's last call (same destination, cgroup, hook and
 * classifier generation) takes its decision from kt_sk_sa. */
static __always_inline int kt_sock_addr_verdict(struct bpf_sock_addr *ctx, __u32 hook, int v6)
{
	__u8 proto = ctx->protocol == IPPROTO_TCP ? KT_PROTO_TCP
		     : ctx->protocol == IPPROTO_UDP ? KT_PROTO_UDP : 0;
	struct bpf_sock *sk = ctx->sk;
	__u32 addr[4];
	struct kt_sk_sa *sc;
	struct kt_cls cls;
	__u64 gen, cgid, now, wait_ns;
	__u32 by;
	__u16 port;
	int verdict;

	if (!proto)
		return 1;
	port = bpf_ntohs(ctx->user_port);
	if (!kt_port_may_match(hook, port))
		return 1;
	if (v6) {
		addr[0] = ctx->user_ip6[0];
		addr[1] = ctx->user_ip6[1];
		addr[2] = ctx->user_ip6[2];
		addr[3] = ctx->user_ip6[3];
	} else {
		kt_addr_v4(addr, ctx->user_ip4);
	}
	gen = kt_generation();
	cgid = bpf_get_current_cgroup_id();
	sc = sk ? bpf_sk_storage_get(&kt_sk_sa, sk, 0, 0) : 0;
	if (sc && gen && sc->gen == gen && sc->cgid == cgid && sc->port == port &&
	    sc->proto == proto && sc->hook == hook && sc->addr[3] == addr[3] &&
	    sc->addr[2] == addr[2] && sc->addr[1] == addr[1] && sc->addr[0] == addr[0]) {
		cls = sc->cls;
	} else {
		struct kt_cls_req rq = { .cgid = cgid, .gen = gen, .hook = hook, .proto = proto,
					 .port = port };

		__builtin_memcpy(rq.addr, addr, sizeof(rq.addr));
		kt_classify(ctx, 0, &rq, &cls);
		/* an in-flight limit's socket connects once and keeps its own
		 * mark (kt_sk_slot): no decision to remember, no second
		 * storage to allocate */
		if (!sc && sk && cls.unit != KT_UNIT_CONCURRENT)
			sc = bpf_sk_storage_get(&kt_sk_sa, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
		if (sc) {
			sc->gen = gen;
			sc->cgid = cgid;
			__builtin_memcpy(sc->addr, addr, sizeof(sc->addr));
			sc->port = port;
			sc->proto = proto;
			sc->hook = (__u8)hook;
			sc->cls = cls;
		}
	}
	if (cls.slot == KT_SLOT_NONE)
		return 1;
	now = bpf_ktime_get_boot_ns();
	if (cls.unit == KT_UNIT_CONCURRENT)
		return kt_inflight_verdict(sk, &cls, cgid, hook, now);
	verdict = kt_charge(&cls, now, 1, 1, &wait_ns, &by);
	if (verdict != KT_REFUSE) {
		if (verdict == KT_ADMIT_SHADOW)
			kt_emit_event(by, cgid, hook, wait_ns, now, KT_EV_SHADOW);
		return 1;
	}
	kt_emit_event(by, cgid, hook, wait_ns, now, KT_EV_BUCKET);
	bpf_set_retval(-(int)(cls.refuse_errno ? cls.refuse_errno : KT_REFUSE_ERRNO));
	return 0;
}

#endif /* KT_BPF_SOCKADDR_H */
