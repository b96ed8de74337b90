/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The maps every kthrottle program shares: each program object defines
 * them all, pinned by name, so the objects load separately and still share
 * one set of buckets, counters and memberships. Their values are the ABI in
 * include/kthrottle.h. */
#ifndef KT_BPF_MAPS_H
#define KT_BPF_MAPS_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "kthrottle.h"

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

/* See struct kt_limit_ext. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, KT_MAX_LIMITS);
	__type(key, __u32);
	__type(value, struct kt_limit_ext);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_limit_ext SEC(".maps");

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

#endif /* KT_BPF_MAPS_H */
