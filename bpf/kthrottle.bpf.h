/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Maps and the classify-then-decide path shared by every kthrottle program.
 * Each program object defines the same maps, pinned by name, so the objects
 * load separately and still share one set of buckets. */
#ifndef KTHROTTLE_BPF_H
#define KTHROTTLE_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "kthrottle.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, KT_MAX_BUCKETS);
	__type(key, __u32);
	__type(value, struct kt_bucket);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_buckets SEC(".maps");

/* Cooperative limits (unit request): no program reads it; the daemon and
 * libkthrottle share it through mmap. See struct kt_coop. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, KT_MAX_COOP);
	__type(key, __u32);
	__type(value, struct kt_coop);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_coop SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, KT_MAX_BUCKETS);
	__type(key, __u32);
	__type(value, struct kt_counters);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_counters SEC(".maps");

/* kt_up: bucket slot -> the slot one level up (KT_BUCKET_UP), the same
 * member's bucket in the parent limit; read only for flagged buckets. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, KT_MAX_BUCKETS);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_up SEC(".maps");

/* See struct kt_shadow_counters: only shadow limits' refusals touch it. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, KT_MAX_BUCKETS);
	__type(key, __u32);
	__type(value, struct kt_shadow_counters);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_shadow SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KT_MAX_MEMBERSHIPS);
	__type(key, __u64); /* struct kt_member_key */
	__type(value, struct kt_member_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_members SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, KT_MAX_DESTS);
	__type(key, struct kt_dest_key);
	__type(value, struct kt_dest_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_dests SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, KT_HOOK_COUNT);
	__type(key, __u32);
	__type(value, struct kt_port_filter);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, KT_MAX_LIMITS);
	__type(key, __u32);
	__type(value, struct kt_limit_info);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_limits SEC(".maps");

/* Throttle events: see struct kt_event. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, KT_EVENTS_BYTES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_events SEC(".maps");

/* Per CPU: when it last emitted an event (the sampling gate; each object
 * has its own, which only loosens the gate by the number of programs). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} kt_ev_gate SEC(".maps");

/* See struct kt_anc. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, KT_ANC_CACHE_SIZE);
	__type(key, __u64);
	__type(value, struct kt_anc);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_anc_cache SEC(".maps");

/* kt_gen[0]: the generation of kt_members (struct kt_anc). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_gen SEC(".maps");

/* Userspace-only (the programs never read it): see struct kt_lease. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KT_MAX_LIMITS);
	__type(key, struct kt_lease_key);
	__type(value, struct kt_lease);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_leases SEC(".maps");

/* See kt_idle_hooks_of in kthrottle.h. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_idle_hooks SEC(".maps");

/* Whether no limit on the node uses `hook` (kt_idle_hooks). */
static __always_inline int kt_hook_idle(__u32 hook)
{
	__u32 zero = 0, *mask = bpf_map_lookup_elem(&kt_idle_hooks, &zero);

	return mask && (*mask >> hook) & 1;
}

/* See struct kt_sk_sa and struct kt_sk_eg. */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct kt_sk_sa);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_sk_sa SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct kt_sk_eg);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_sk_eg SEC(".maps");

/* See struct kt_inflight and struct kt_sk_slot (in-flight limits). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE); /* the audit reads every count each second */
	__uint(max_entries, KT_MAX_BUCKETS);
	__type(key, __u32);
	__type(value, struct kt_inflight);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct kt_sk_slot);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_sk_slot SEC(".maps");

/* Cheapest possible exit for traffic no rule of this hook could match: one
 * inlined array lookup and a bit test. */
static __always_inline int kt_port_may_match(__u32 hook, __u16 port)
{
	struct kt_port_filter *f = bpf_map_lookup_elem(&kt_ports, &hook);

	return f && kt_port_filter_test(f, port);
}

/* kt_gen[0], read before anything it validates (see struct kt_anc); 0 if
 * the map cannot be read, which no cache entry holds as valid. */
static __always_inline __u64 kt_generation(void)
{
	__u32 zero = 0;
	__u64 *gen = bpf_map_lookup_elem(&kt_gen, &zero);

	return gen ? *gen | (1ULL << 63) : 0;
}

/* The kt_members list that decides for `cgid`: its own, or that of its
 * nearest ancestor that is a member (processes in a pod's container
 * sub-cgroups count against the pod). A member's list already holds the
 * limits of the members it is nested in, so the first found is complete.
 * The answer is cached per cgroup id, members included, so a sub-cgroup and
 * its member cost the same one LRU lookup once warm (on Kubernetes every
 * process runs in a container below its pod: the nested case is the normal
 * one). `ctx` is the program context for the ancestor helper; `gen` is
 * kt_generation(), read before. */
static __always_inline struct kt_member_val *kt_member_list(void *ctx, int is_skb, __u64 cgid,
							     __u64 gen, struct kt_anc *found)
{
	struct kt_member_val *v;
	struct kt_anc *c;
	int level;

	if (!gen)
		return 0;
	c = bpf_map_lookup_elem(&kt_anc_cache, &cgid);
	if (c && c->gen == gen)
		return c->member ? &c->list : 0;
	__builtin_memset(found, 0, sizeof(*found));
	found->gen = gen;
	v = bpf_map_lookup_elem(&kt_members, &cgid);
	if (v) {
		found->member = cgid;
		__builtin_memcpy(&found->list, v, sizeof(found->list));
	}
	for (level = KT_MAX_CGROUP_DEPTH - 1; !v && level >= 1; level--) {
		__u64 anc = is_skb ? bpf_skb_ancestor_cgroup_id(ctx, level)
				   : bpf_get_current_ancestor_cgroup_id(level);
		if (!anc || anc == cgid)
			continue;
		v = bpf_map_lookup_elem(&kt_members, &anc);
		if (v) {
			/* below a pending directory without an entry of its
			 * own: not classified yet, so its join buckets too */
			found->member = anc;
			__builtin_memcpy(&found->list, v, sizeof(found->list));
			found->list.count += kt_member_pending(v);
			if (v->flags & KT_MEMBER_PENDING_NO_RAW)
				found->list.flags |= KT_MEMBER_NO_RAW;
		}
	}
	bpf_map_update_elem(&kt_anc_cache, &cgid, found, BPF_ANY);
	return v ? &found->list : 0;
}

/* IPv4 destination as v4-mapped address words (::ffff:a.b.c.d). */
static __always_inline void kt_addr_v4(__u32 *w, __u32 addr_be)
{
	w[0] = 0;
	w[1] = 0;
	w[2] = bpf_htonl(0xffff);
	w[3] = addr_be;
}

/* A destination port the program could not read (a later fragment, a
 * header it cannot walk): such traffic matches every port range, so it is
 * charged, never passed. Callers pass it as any_port. */
#define KT_PORT_ANY 0x10000u

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

/*
 * Classify a destination: of the limits in the cgroup's list
 * (kt_member_list) whose hook, protocol and port match and whose kt_dests
 * prefixes cover the destination, the one with the most specific prefix,
 * then the first in the config. At most KT_LIMITS_PER_CGROUP lookups,
 * whatever the number of limits on the node. `addr` is the full-length
 * destination (v4-mapped for IPv4); port in host order (ignored with
 * any_port); proto a KT_PROTO_* mask. Fills *out (slot KT_SLOT_NONE: pass).
 * The port filter (kt_ports) is only a shortcut in front of this: the
 * limits' own port ranges decide here.
 */
static __always_inline void kt_classify(void *ctx, int is_skb, __u32 hook, __u8 proto,
					const __u32 *addr, __u16 port, int any_port, __u64 cgid,
					__u64 gen, struct kt_cls *out)
{
	struct kt_member_val *v;
	struct kt_dest_key dk;
	struct kt_anc found;
	__u64 best_prio = 0;
	int i;

	out->slot = KT_SLOT_NONE;
	out->refuse_errno = 0;
	out->unit = 0;
	out->pad = 0;
	v = kt_member_list(ctx, is_skb, cgid, gen, &found);
	if (!v)
		return;

	dk.prefixlen = 32 + 128;
	__builtin_memcpy(dk.addr, addr, 16);
	for (i = 0; i < KT_LIMITS_PER_CGROUP; i++) {
		struct kt_limit_info *li;
		struct kt_dest_val *d;
		__u32 id;
		__u64 prio;

		if (i >= v->count)
			break;
		id = v->ents[i].limit_id;
		li = bpf_map_lookup_elem(&kt_limits, &id);
		if (!li || kt_hook_for_unit(li->unit) != hook || !(li->proto_mask & proto) ||
		    (!any_port && (port < li->port_lo || port > li->port_hi)))
			continue;
		dk.limit_id = id;
		d = bpf_map_lookup_elem(&kt_dests, &dk);
		if (!d)
			continue;
		prio = kt_dest_priority(d);
		if (prio > best_prio) {
			best_prio = prio;
			out->slot = v->ents[i].slot;
			out->unit = li->unit;
			out->refuse_errno = d->refuse_errno;
		}
	}
}

/* The node bucket `b` is chained to (KT_BUCKET_CHAINED), or NULL. A parent
 * that is no node bucket of the same limit (a slot written by hand, or
 * reused) is ignored: the member's own bucket still decides. */
static __always_inline struct kt_bucket *kt_bucket_parent_of(const struct kt_bucket *b)
{
	__u32 slot = kt_bucket_parent(KT_READ_ONCE(b->flags));
	struct kt_bucket *p;

	if (slot == KT_SLOT_NONE)
		return 0;
	p = bpf_map_lookup_elem(&kt_buckets, &slot);
	if (!p || (KT_READ_ONCE(p->flags) & (KT_BUCKET_IN_USE | KT_BUCKET_POOL)) !=
			  (KT_BUCKET_IN_USE | KT_BUCKET_POOL) ||
	    KT_READ_ONCE(p->limit_id) != KT_READ_ONCE(b->limit_id))
		return 0;
	return p;
}

/* A refusal by a shadow limit's bucket: counted in kt_shadow, passed. */
static __always_inline int kt_shadow_pass(__u32 slot, __u64 bytes, __u64 units)
{
	struct kt_shadow_counters *s = bpf_map_lookup_elem(&kt_shadow, &slot);

	if (s) {
		s->refused += units;
		s->refused_bytes += bytes;
	} else {
		struct kt_shadow_counters first = { .refused = units, .refused_bytes = bytes };

		bpf_map_update_elem(&kt_shadow, &slot, &first, BPF_NOEXIST);
	}
	return KT_ADMIT_SHADOW;
}

/*
 * The levels above a call's own limit (parent:, KT_BUCKET_UP). Each step is
 * a global function: the verifier checks a global function once per
 * program, with unknown arguments, and its callers see only its return
 * value. Inlined, the three levels' GCRA paths multiplied each other and
 * cost every program load ~100k more verified instructions.
 */

/* The slot one level up from `slot`: kt_up's entry when its bucket is
 * flagged KT_BUCKET_UP and the bucket there is in use; else KT_SLOT_NONE. */
__noinline __u32 kt_level_up(__u32 slot)
{
	struct kt_bucket *b = bpf_map_lookup_elem(&kt_buckets, &slot), *ub;
	__u32 *next, s;

	if (!b || !(KT_READ_ONCE(b->flags) & KT_BUCKET_UP))
		return KT_SLOT_NONE;
	next = bpf_map_lookup_elem(&kt_up, &slot);
	if (!next)
		return KT_SLOT_NONE;
	s = *next;
	ub = bpf_map_lookup_elem(&kt_buckets, &s);
	if (!ub || !(KT_READ_ONCE(ub->flags) & KT_BUCKET_IN_USE))
		return KT_SLOT_NONE;
	return s;
}

/* One level's decision on the bucket in `slot` and the node bucket it is
 * chained to: KT_ADMIT, KT_REFUSE (*wait_ns set), or KT_ADMIT_SHADOW (a
 * shadow limit's refusal, to be passed; the caller counts it). */
__noinline int kt_level_decide(__u32 slot, __u64 now, __u64 cost, __u64 *wait_ns)
{
	struct kt_bucket *b = bpf_map_lookup_elem(&kt_buckets, &slot);
	__u64 w = 0;

	if (!b || !wait_ns)
		return KT_ADMIT; /* gone meanwhile: it cannot refuse */
	if (kt_gcra_decide_chained(b, kt_bucket_parent_of(b), now, cost, &w) == KT_ADMIT)
		return KT_ADMIT;
	*wait_ns = w;
	return (KT_READ_ONCE(b->flags) & KT_BUCKET_SHADOW) ? KT_ADMIT_SHADOW : KT_REFUSE;
}

/* A shadow level's refusal counted in kt_shadow. */
__noinline int kt_level_shadow(__u32 slot, __u64 bytes, __u64 units)
{
	return kt_shadow_pass(slot, bytes, units);
}

/* Gives back `cost` to the bucket in `slot` and the node bucket it is
 * chained to: a level that admitted a call a level above refused. */
__noinline int kt_level_refund(__u32 slot, __u64 now, __u64 cost)
{
	struct kt_bucket *b = bpf_map_lookup_elem(&kt_buckets, &slot), *p;

	if (!b)
		return 0;
	p = kt_bucket_parent_of(b);
	kt_gcra_refund(b, now, cost);
	if (p)
		kt_gcra_refund(p, now, cost);
	return 0;
}

/* The call counted in the counters of the level in `slot`. */
__noinline int kt_level_count(__u32 slot, __u64 units, __u64 bytes, int refused)
{
	struct kt_counters *c = bpf_map_lookup_elem(&kt_counters, &slot);

	if (!c)
		return 0;
	if (refused) {
		c->throttled += units;
		c->throttled_bytes += bytes;
	} else {
		c->admitted += units;
		c->admitted_bytes += bytes;
	}
	return 0;
}

/* One call's charge of the levels above its own limit (kt_charge_up). */
struct kt_up_req {
	__u64 now, cost, units, bytes;
	__u64 wait_ns;  /* out: the wait of the level that refused */
	__u32 slot;     /* in: the call's own bucket */
	__u32 by;       /* out: the level that refused, or shadow-refused */
	__s32 verdict;  /* in: the own level's, KT_ADMIT or KT_ADMIT_SHADOW */
	__u32 took;     /* in: the own level took its tokens (not a shadow pass) */
};

/* The levels above r->slot's limit: KT_ADMIT when all admit,
 * KT_ADMIT_SHADOW when only shadow limits refused, else KT_REFUSE with
 * every level below given its tokens back, so a refused call costs no
 * level anything. Counts each level's outcome in its counters (the own
 * level's are the caller's): admitted at every level, or refused at the
 * level that refused. Only calls of a limit with a parent run it. */
__noinline int kt_charge_up(struct kt_up_req *r)
{
	__u32 lv[KT_MAX_LEVELS - 1] = {}, cur, refused = 0, took = 0, n = 0;
	int verdict, i;

	if (!r)
		return KT_REFUSE;
	cur = r->slot;
	verdict = r->verdict;
	for (i = 0; i < KT_MAX_LEVELS - 1; i++) {
		__u64 w = 0;
		__u32 up = kt_level_up(cur);
		int v;

		if (up == KT_SLOT_NONE)
			break;
		lv[i] = up;
		n = i + 1;
		v = kt_level_decide(up, r->now, r->cost, &w);
		if (v == KT_ADMIT) {
			took |= 1u << i;
		} else if (v == KT_ADMIT_SHADOW) {
			kt_level_shadow(up, r->bytes, r->units);
			if (verdict == KT_ADMIT) {
				verdict = KT_ADMIT_SHADOW;
				r->by = up;
				r->wait_ns = w;
			}
		} else {
			refused = 1;
			r->by = up;
			r->wait_ns = w;
			break;
		}
		cur = up;
	}
	if (refused) {
		for (i = 0; i < KT_MAX_LEVELS - 1; i++)
			if (took & (1u << i))
				kt_level_refund(lv[i], r->now, r->cost);
		if (r->took)
			kt_level_refund(r->slot, r->now, r->cost);
		kt_level_count(r->by, r->units, r->bytes, 1);
		return KT_REFUSE;
	}
	for (i = 0; i < KT_MAX_LEVELS - 1; i++)
		if ((__u32)i < n)
			kt_level_count(lv[i], r->units, r->bytes, 0);
	return verdict;
}

/*
 * Charge the bucket `cls` names at `now` (and the node bucket it is chained
 * to): `bytes` for unit byte, else
 * `units` (packets or datagrams this call carries: a GSO send carries
 * many). Per-CPU counters count the outcome. KT_ADMIT, KT_REFUSE (with
 * *wait_ns), KT_ADMIT_SHADOW (a shadow limit's refusal, passed: counted
 * admitted here, refused in kt_shadow) or KT_PASS when the slot cannot be
 * read. A limit with a parent charges every level up (kt_charge_up).
 * *by: the bucket whose refusal (or shadow refusal) decided, for events.
 */
static __always_inline int kt_charge(const struct kt_cls *cls, __u64 now, __u64 bytes,
				     __u64 units, __u64 *wait_ns, __u32 *by)
{
	__u32 slot = cls->slot;
	struct kt_bucket *b = bpf_map_lookup_elem(&kt_buckets, &slot);
	struct kt_counters *c = bpf_map_lookup_elem(&kt_counters, &slot);
	struct kt_bucket *parent;
	int verdict;

	*wait_ns = 0;
	*by = slot;
	if (!b || !c)
		return KT_PASS;
	parent = kt_bucket_parent_of(b);
	if (cls->unit == KT_UNIT_BYTE)
		verdict = kt_gcra_decide_chained(b, parent, now, bytes, wait_ns);
	else if (units == 1)
		verdict = kt_gcra_decide_chained(b, parent, now, 1, wait_ns);
	else
		verdict = kt_gcra_decide_chained(b, parent, now, units, wait_ns);
	/* Per-CPU counters, in the limit's tokens (a GSO send counts each
	 * datagram): plain adds, no atomics on the hot path. */
	if (verdict == KT_REFUSE && (KT_READ_ONCE(b->flags) & KT_BUCKET_SHADOW))
		verdict = kt_level_shadow(slot, bytes, units);
	if (verdict != KT_REFUSE && (KT_READ_ONCE(b->flags) & KT_BUCKET_UP)) {
		struct kt_up_req r = { .now = now, .cost = cls->unit == KT_UNIT_BYTE ? bytes : units,
				       .units = units, .bytes = bytes, .slot = slot, .by = slot,
				       .verdict = verdict, .took = verdict == KT_ADMIT };

		verdict = kt_charge_up(&r);
		if (verdict != KT_ADMIT) {
			*wait_ns = r.wait_ns;
			*by = r.by;
		}
	}
	if (verdict != KT_REFUSE) {
		c->admitted += units;
		c->admitted_bytes += bytes;
	} else {
		c->throttled += units;
		c->throttled_bytes += bytes;
	}
	return verdict;
}

#include "inflight.bpf.h"

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
		kt_classify(ctx, 0, hook, proto, addr, port, 0, cgid, gen, &cls);
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

#endif /* KTHROTTLE_BPF_H */
