/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * kthrottle: types shared by the BPF programs and userspace, and the decision
 * math. Everything here compiles both with `clang -target bpf` and on the host,
 * so the unit tests exercise the exact arithmetic the kernel runs.
 *
 * Every struct has fixed-width fields, explicit padding and a size assertion:
 * the layout is an ABI between the programs, the daemon, kthrottlectl and
 * whatever an operator writes by hand with bpftool.
 */
#ifndef KTHROTTLE_H
#define KTHROTTLE_H

#ifndef __bpf__
#include <linux/types.h>
#include <time.h>
#endif

#define KT_NAME_LEN 32
/* The tables are sized for a cluster's worth of limits on one node (most
 * with no member here) and a thousand pods in one limit. Per-CPU memory:
 * kt_counters, KT_MAX_BUCKETS x 32 bytes (512 KiB a CPU). */
#define KT_MAX_LIMITS 16384      /* limit ids 0..KT_MAX_LIMITS-1 */
#define KT_MAX_BUCKETS 16384     /* bucket slots, shared by all limits */
#define KT_MAX_MEMBERSHIPS 16384 /* member cgroups (kt_members entries) */
#define KT_LIMITS_PER_CGROUP 8   /* limits one cgroup may be a member of */
#define KT_MAX_DESTS 65536       /* (limit, destination prefix) pairs in kt_dests */
#define KT_MAX_CGROUP_DEPTH 16   /* ancestor levels searched for nested cgroups */
#define KT_ANC_CACHE_SIZE 65536  /* sub-cgroups whose nearest member is remembered */
#define KT_CAS_RETRIES 8         /* bounded; contention past this refuses */
#define KT_MAX_LEVELS 4          /* a limit and its ancestors (parent:) charged together */

/* Fixed point for the token interval: Q48.16 nanoseconds per token. Lets one
 * 64-bit word express 0.1 tokens/s (1e10 ns) as well as 10 GB/s of bytes
 * (0.1 ns per byte) without integer starvation. */
#define KT_FP_SHIFT 16
#define KT_FP_ONE (1ULL << KT_FP_SHIFT)

/* errno a refused connect() or sendmsg() fails with (visible to the caller at
 * once, instead of a timeout). EBUSY: the resource exists but is busy now. */
#define KT_REFUSE_ERRNO 16 /* EBUSY */

enum kt_unit {
	KT_UNIT_CONNECTION = 0, /* cgroup/connect4, connect6 */
	KT_UNIT_DATAGRAM = 1,   /* cgroup/sendmsg4, sendmsg6 (unconnected UDP) */
	KT_UNIT_PACKET = 2,     /* cgroup_skb/egress */
	KT_UNIT_BYTE = 3,       /* cgroup_skb/egress, cost = skb->len */
	KT_UNIT_REQUEST = 4,    /* no hook: cooperative, kt_coop through libkthrottle */
	/* in-flight: connects admitted while fewer than the share are open
	 * (struct kt_inflight), the slot given back when the socket closes */
	KT_UNIT_CONCURRENT = 5,
	KT_UNIT_COUNT
};

/* Which program a rule is for: one class per hook family. */
enum kt_hook {
	KT_HOOK_CONNECT = 0,
	KT_HOOK_SENDMSG = 1,
	KT_HOOK_EGRESS = 2,
	KT_HOOK_COUNT
};
/* The hook that decides a unit (datagrams the sendmsg hooks cannot see are
 * charged on egress, but under the sendmsg hook's rules). */
static inline enum kt_hook kt_hook_for_unit(__u32 unit)
{
	return unit == KT_UNIT_CONNECTION || unit == KT_UNIT_CONCURRENT ? KT_HOOK_CONNECT
	       : unit == KT_UNIT_DATAGRAM ? KT_HOOK_SENDMSG
					  : KT_HOOK_EGRESS;
}

/* Attach points beyond the classified hooks (bits in an attachment's hook
 * mask, after the enum's): cgroup/sock_create refuses raw sockets. Not a
 * kt_hook, so the pinned per-hook maps keep their size. */
#define KT_ATTACH_SOCK_CREATE KT_HOOK_COUNT
/* sockops: paces TCP sockets of byte limits (struct kt_sk_pace). */
#define KT_ATTACH_SOCKOPS (KT_HOOK_COUNT + 1)
/* cgroup/sock_release: gives back the in-flight slot of a closed socket */
#define KT_ATTACH_SOCK_RELEASE (KT_HOOK_COUNT + 2)

enum kt_scope {
	KT_SCOPE_POD = 0,  /* one bucket per (limit, attached cgroup) */
	KT_SCOPE_NODE = 1, /* one bucket per limit, shared by its cgroups */
};

#define KT_PROTO_TCP (1u << 0)
#define KT_PROTO_UDP (1u << 1)

/* Outcome of classification plus decision. */
enum kt_verdict {
	KT_PASS = 0,   /* no limit matched: not counted */
	KT_ADMIT = 1,
	KT_REFUSE = 2,
	/* refused by a shadow limit's bucket (KT_BUCKET_SHADOW): passed, and
	 * counted in kt_shadow as what enforcing would have refused */
	KT_ADMIT_SHADOW = 3,
};

/* kt_buckets (array, mmapable): one per (limit, member) or (limit, node).
 * One cache line each, so CPUs charging different buckets never contend. */
struct kt_bucket {
	__u64 tat;         /* theoretical arrival time, kt clock ns (CLOCK_BOOTTIME) */
	__u64 interval_fp; /* Q48.16 ns per token; 0 = closed, refuse all */
	__u64 burst;       /* tokens that may pass back to back */
	/* Lease: the share in interval_fp holds until valid_until, the moment
	 * the other nodes stop counting it (set from the last store answer,
	 * never from the daemon's tick). Past it the bucket runs at
	 * fallback_fp, the store-failure rate the other nodes keep reserving,
	 * until fallback_until; past that it is closed. The kernel applies
	 * this by itself, so a dead or cut-off daemon cannot overspend.
	 * valid_until 0 = valid forever; fallback_until 0 = fallback forever. */
	__u64 valid_until;
	__u64 fallback_fp; /* Q48.16 interval after valid_until; 0 = closed */
	__u32 limit_id;
	__u32 flags;       /* KT_BUCKET_* */
	__u64 fallback_until;
	/* Burst during the fallback, in tokens; 0 = burst. The daemon sets it
	 * to burst x fallback rate / rate, so the tolerance in ns (burst x
	 * interval) does not grow at the switch: the debt queued in tat at the
	 * share's rate is not rescaled by the kernel, and a longer tolerance
	 * would hand out burst x (1 - fallback/rate) tokens for free. */
	__u64 fallback_burst;
};
#define KT_BUCKET_IN_USE (1u << 0)
#define KT_BUCKET_NODE (1u << 1) /* node scope: shared by all the limit's cgroups */
/* A strict limit's bucket (rateLimit.strict): it admits one request per
 * permit the daemon got from the store and nothing else. burst is 1 and
 * interval_fp the hold (longer than expireAfter), so one admission puts tat
 * past the window; a permit due at D is written as tat = D, valid_until =
 * D + expireAfter, no fallback (kt_strict_arm). Refusals say
 * KT_REASON_PERMIT, or KT_REASON_CLOSED when interval_fp is 0: the daemon
 * closed it because the store is unreachable. */
#define KT_BUCKET_STRICT (1u << 2)
/* A pod-scope member's bucket chained to its limit's node bucket (the
 * slot in bits 16..31, KT_BUCKET_PARENT_SHIFT): an admission takes a token
 * from both, and a refusal by the node bucket gives the member's back. The
 * node bucket holds the node's whole share (the members' rates and bursts
 * summed), so however many members join, each with its starting tokens, the
 * node never admits more than its share plus its burst. */
#define KT_BUCKET_CHAINED (1u << 3)
/* The node bucket of a pod-scope limit that members are chained to; the
 * programs never classify to it and it counts nothing itself. */
#define KT_BUCKET_POOL (1u << 4)
/* A pod-scope limit's join bucket: what a cgroup below a pending directory
 * is charged to until the daemon has classified it (kt_member_pending);
 * chained to the node bucket. */
#define KT_BUCKET_JOIN (1u << 5)
/* A shadow limit's bucket (enforce: false): decided as always, but what it
 * refuses passes (KT_ADMIT_SHADOW), counted as admitted in kt_counters and
 * as would-refuse in kt_shadow, with a KT_REASON_SHADOW event. Refusing
 * charges no tokens, so the bucket runs exactly as an enforcing one. */
#define KT_BUCKET_SHADOW (1u << 6)
/* A bucket whose limit has a parent (parent:): what it admits is charged
 * to the bucket kt_up names too, the same member's bucket one level up,
 * and so on up to KT_MAX_LEVELS levels; a refusal at any level refuses the
 * call and gives back what the levels below took. */
#define KT_BUCKET_UP (1u << 7)
#define KT_BUCKET_PARENT_SHIFT 16
_Static_assert(sizeof(struct kt_bucket) == 64, "kt_bucket layout");
_Static_assert(KT_MAX_BUCKETS <= (1u << (32 - KT_BUCKET_PARENT_SHIFT)), "parent slot fits in flags");

/* flags of a member bucket chained to `parent` (KT_BUCKET_CHAINED), or not
 * chained (parent KT_SLOT_NONE); the other bits of `flags` kept. */
static inline __u32 kt_bucket_chain_flags(__u32 flags, __u32 parent)
{
	flags &= ~(KT_BUCKET_CHAINED | (0xffffu << KT_BUCKET_PARENT_SHIFT));
	if (parent < KT_MAX_BUCKETS)
		flags |= KT_BUCKET_CHAINED | (parent << KT_BUCKET_PARENT_SHIFT);
	return flags;
}

/* The node bucket a member bucket's flags chain it to; KT_SLOT_NONE if none. */
static inline __u32 kt_bucket_parent(__u32 flags)
{
	return (flags & KT_BUCKET_CHAINED) ? flags >> KT_BUCKET_PARENT_SHIFT : 0xffffffffu;
}

/* kt_counters (per-CPU array, same index as kt_buckets). */
struct kt_counters {
	__u64 admitted;
	__u64 throttled;
	__u64 admitted_bytes;
	__u64 throttled_bytes;
};
_Static_assert(sizeof(struct kt_counters) == 32, "kt_counters layout");

/* kt_shadow (per-CPU hash, slot -> counts, entries made on first use): what
 * a shadow limit's bucket (KT_BUCKET_SHADOW) refused but let pass. Apart
 * from kt_counters so enforcing limits pay nothing for it; the daemon
 * deletes a slot's entry when it gives the slot to a new bucket. */
struct kt_shadow_counters {
	__u64 refused;       /* in the limit's tokens, as kt_counters.throttled */
	__u64 refused_bytes;
};
_Static_assert(sizeof(struct kt_shadow_counters) == 16, "kt_shadow_counters layout");

/* kt_members (hash): cgroup id -> the limits the cgroup is a member of and
 * the bucket each charges. One 8-byte-key lookup per packet, whatever the
 * number of candidate rules. Userspace writes a cgroup's whole list in one
 * update, so a program sees the old list or the new one, never a mix. */
struct kt_member_key {
	__u64 cgroup_id;
};
_Static_assert(sizeof(struct kt_member_key) == 8, "kt_member_key layout");

struct kt_member_ent {
	__u32 limit_id;
	__u32 slot; /* index into kt_buckets / kt_counters */
};

struct kt_member_val {
	/* entries in use, at most KT_LIMITS_PER_CGROUP: first the cgroup's
	 * own limits, then those of the member cgroups it is nested in
	 * (nearest first), so one lookup finds every limit that may charge
	 * the cgroup and its sub-cgroups without walking further up */
	__u32 count;
	__u16 flags; /* KT_MEMBER_* */
	__u16 own;   /* ents[0..own) are the cgroup's own; 0 (older daemons): all */
	struct kt_member_ent ents[KT_LIMITS_PER_CGROUP];
};
/* A limit of this cgroup does not allow raw IP sockets (they would bypass
 * its connection and datagram hooks): socket(SOCK_RAW) fails with EPERM. */
#define KT_MEMBER_NO_RAW (1u << 0)

/* A directory where a pattern's members appear (a "pending directory")
 * lists, after its own entries, ents[count .. count + pending): a cgroup
 * below it with no kt_members entry of its own, one the daemon has not
 * classified yet, is charged under these too (each a limit's join bucket),
 * so a new pod is limited from its first packet. The directory's own
 * processes are not. The pending count is in flags bits 8..11. */
#define KT_MEMBER_PENDING_SHIFT 8
#define KT_MEMBER_PENDING_MASK 0xfu
/* ... and such an unclassified cgroup may not open raw IP sockets */
#define KT_MEMBER_PENDING_NO_RAW (1u << 1)

/* Pending entries of `v` (0 if the count would not fit). */
static inline __u32 kt_member_pending(const struct kt_member_val *v)
{
	__u32 p = ((__u32)v->flags >> KT_MEMBER_PENDING_SHIFT) & KT_MEMBER_PENDING_MASK;

	return v->count <= KT_LIMITS_PER_CGROUP && p <= KT_LIMITS_PER_CGROUP - v->count ? p : 0;
}

/* The cgroup is no member itself (a pending directory, an outsider): its
 * entries, if any, are inherited or pending. */
#define KT_MEMBER_NO_OWN (1u << 2)

/* Entries of `v` that are the cgroup's own memberships. */
static inline __u32 kt_member_own(const struct kt_member_val *v)
{
	if (v->flags & KT_MEMBER_NO_OWN)
		return 0;
	return v->own && v->own <= v->count ? v->own : v->count;
}
_Static_assert(sizeof(struct kt_member_val) == 8 + 8 * KT_LIMITS_PER_CGROUP, "kt_member_val layout");

/* Destinations of a hook's traffic are 16-byte addresses; IPv4 is
 * v4-mapped (::ffff:a.b.c.d, prefix + 96) so one trie serves both
 * families. The programs build one per packet, prefixlen 128. */
struct kt_prefix_key {
	__u32 prefixlen;
	__u8 addr[16];
};
_Static_assert(sizeof(struct kt_prefix_key) == 20, "kt_prefix_key layout");

/* kt_anc_cache (LRU hash, cgroup id -> struct kt_anc): for every cgroup a
 * program has seen, a copy of the kt_members list that decides for it (its
 * own, or its nearest member ancestor's: a container below a pod), so a
 * nested cgroup costs the same one lookup as a member instead of a walk up
 * to KT_MAX_CGROUP_DEPTH levels. Whoever writes kt_members must bump kt_gen
 * afterwards for the change to take effect (kt_bpf_bump_gen). Valid while
 * `gen` equals kt_gen[0], which the daemon increments after every change
 * of kt_members: a program reads the generation before it walks, so an
 * entry computed from a list that was being replaced is stale as soon as
 * the replacement is complete. Written by the programs only. */
struct kt_anc {
	__u64 gen;    /* kt_gen[0] when it was found */
	__u64 member; /* cgroup id of the member deciding (itself or its nearest member ancestor); 0 = none */
	struct kt_member_val list; /* its list then */
};
_Static_assert(sizeof(struct kt_anc) == 16 + sizeof(struct kt_member_val), "kt_anc layout");

/* kt_dests (LPM trie): (limit, destination prefix) -> the limit covers it.
 * Keyed by the limit first (its id is the key's first 32 bits, so
 * prefixlen = 32 + the prefix's length in the 128-bit space), a lookup
 * answers "does this limit cover this address, and how specifically" for
 * one limit, whatever the number of limits on the same prefixes: a cgroup's
 * packet looks up only its own (at most KT_LIMITS_PER_CGROUP) limits. */
struct kt_dest_key {
	__u32 prefixlen; /* KT_DEST_ID_BITS + prefix length */
	__u32 limit_id;
	__u8 addr[16];
};
#define KT_DEST_ID_BITS 32u   /* the limit id ahead of the address in kt_dest_key */
#define KT_DEST_ADDR_BITS 128u /* the address, v4-mapped for IPv4 */
/* a lookup key's prefixlen: the limit and the whole address */
#define KT_DEST_KEY_BITS (KT_DEST_ID_BITS + KT_DEST_ADDR_BITS)
_Static_assert(sizeof(struct kt_dest_key) == 24, "kt_dest_key layout");

/* Of the limits that cover a packet, the deepest in a hierarchy wins (a
 * child over its ancestors: its calls are charged up to them anyway), then
 * the most specific prefix, then the first in the config: priority =
 * depth << 32 | prefixlen << 16 | (0xffff - order). */
struct kt_dest_val {
	__u16 prefixlen;    /* of the matched prefix, 0..128 (v4-mapped) */
	__u16 order;        /* the limit's index in the config */
	__u16 refuse_errno; /* a refused connect/sendmsg fails with it; 0: KT_REFUSE_ERRNO */
	__u16 depth;        /* levels above the limit (parent:), 0 for a root */
};
_Static_assert(sizeof(struct kt_dest_val) == 8, "kt_dest_val layout");

static inline __u64 kt_dest_priority(const struct kt_dest_val *v)
{
	return ((__u64)v->depth << 32) | ((__u32)v->prefixlen << 16) | (0xffffu - v->order);
}

/* kt_idle_hooks (array, one __u32): bit h (enum kt_hook) set says no limit
 * on the node uses hook h, so its program may let a packet go without
 * reading it (egress: a datagram the sendmsg hook already decided). A zero
 * mask (a fresh map) lets nothing go unread. Written with kt_ports
 * (kt_idle_hooks_of). */

/* kt_ports (array, KT_HOOK_COUNT entries): destination ports any rule of the
 * hook covers. Unmatched traffic stops here after one inlined array load. */
struct kt_port_filter {
	__u64 bits[65536 / 64];
};
_Static_assert(sizeof(struct kt_port_filter) == 8192, "kt_port_filter layout");

/* kt_limits (array, KT_MAX_LIMITS): names and settings, so a restarted daemon
 * maps limit names back to the ids the pinned buckets use; and the match of
 * each limit the programs check before its kt_dests lookup. */
struct kt_limit_info {
	char name[KT_NAME_LEN];
	__u8 in_use;
	__u8 unit;
	__u8 scope;
	/* what the limit matches besides its kt_dests prefixes */
	__u8 proto_mask; /* KT_PROTO_* */
	__u16 port_lo;   /* destination ports, host order, inclusive */
	__u16 port_hi;
};
_Static_assert(sizeof(struct kt_limit_info) == 40, "kt_limit_info layout");

/* kt_leases (hash, limit name -> state): what a limit's pool last agreed,
 * kept by the kernel so a daemon that restarts (a rolling update, a crash)
 * continues the same lease instead of guessing. Written by the daemon after
 * every store answer; never read by the programs. Rates are in
 * micro-tokens/s so bpftool prints them readably. */
struct kt_lease_key {
	char name[KT_NAME_LEN];
};
_Static_assert(sizeof(struct kt_lease_key) == 32, "kt_lease_key layout");

struct kt_lease {
	__u64 lease_until;    /* kt clock ns: the share holds until then; 0 = no lease yet */
	__u64 fallback_until; /* kt clock ns: then the fallback ends too; 0 = never */
	__u64 fallback_urate; /* per-member fallback rate the store was told */
	__u64 reserved_urate; /* lapsed members' fallback the pool reserves */
	__u64 ramp_urate;     /* ramp level (pool rate), for a restart within ttl */
	__u64 ramp_saved_ns;  /* kt clock ns the ramp level was written, 0 = never */
	__u32 size;           /* pool size of the last store answer, 0 = none */
	__u32 agreed;         /* 1: that answer was AGREE */
};
_Static_assert(sizeof(struct kt_lease) == 56, "kt_lease layout");

/* kt_events (ring buffer, pinned): throttle events, for the daemon to tell
 * which limit refused whom, why, and for how long. Sampled: each CPU emits
 * at most one per KT_EVENT_GAP_NS (the counters count every refusal), so a
 * flood of refusals costs a per-CPU time check, not a ring write each. */
#define KT_EVENTS_BYTES (256 * 1024)
#define KT_EVENT_GAP_NS 1000000ULL

/* Why a bucket refused. */
enum kt_reason {
	KT_REASON_SHARE = 0,    /* the member's share (and burst) used up */
	KT_REASON_FALLBACK = 1, /* lease lapsed: the onStoreFailure rate used up */
	KT_REASON_CLOSED = 2,   /* rate 0: closed by the policy, or its fallback ended */
	KT_REASON_PERMIT = 3,   /* strict limit: no permit due now (the next one's wait, if any) */
	KT_REASON_TAG = 4,      /* tag limit (XDP source or query tag): the tag's bucket is empty */
	KT_REASON_SHADOW = 5,   /* shadow limit (enforce: false): would refuse, let pass */
	KT_REASON_INFLIGHT = 6, /* in-flight limit: the share's slots are all open (no retry time) */
	KT_REASON_COUNT
};

struct kt_event {
	__u64 ts_ns;          /* kt clock ns */
	__u64 cgroup_id;      /* the caller's cgroup (a member or below one) */
	__u64 retry_after_ns; /* until the same request would conform; ~0: closed */
	__u32 limit_id;
	__u32 slot;
	__u8 hook;            /* enum kt_hook */
	__u8 reason;          /* enum kt_reason */
	__u8 pad[6];
};
_Static_assert(sizeof(struct kt_event) == 40, "kt_event layout");

/*
 * In-flight limits (unit concurrent). A bucket of such a limit counts
 * slots, not tokens: while its lease holds it admits a connect when fewer
 * than `burst` sockets are open, after valid_until fewer than
 * fallback_burst (fallback_fp 0: none), after fallback_until none;
 * interval_fp is only open (non-zero) or closed (0) and tat is unused
 * (kt_slots_in_force). The open count is kt_inflight's, same index.
 * A pod-scope member's bucket chained to its node bucket takes a slot of
 * both. A connect that finds no slot free fails at once with the limit's
 * errno; nothing is killed when a share shrinks below what is open.
 *
 * kt_inflight (array, KT_MAX_BUCKETS, BPF_F_MMAPABLE, pinned): per bucket slot, the
 * sockets holding one of its slots. The programs add and subtract it
 * atomically; the daemon only zeroes it and bumps epoch when it gives the
 * slot to a new bucket, so a socket admitted under the slot's previous
 * owner gives nothing back to the new one.
 */
struct kt_inflight {
	__u64 open;  /* sockets holding a slot now */
	__u64 peak;  /* the most open at once since the slot was given to its bucket (a racy max) */
	__u32 epoch; /* the slot's owner: bumped when the slot is reused */
	__u32 pad;
	__u64 pad2;
};
_Static_assert(sizeof(struct kt_inflight) == 32, "kt_inflight layout");

/* kt_sk_slot (socket storage): the slots a socket holds, given back once
 * by whichever comes first of its close (cgroup/sock_release) and its TCP
 * state reaching CLOSE (a reset, a refused or timed-out connect; sockops):
 * each takes `held` from 1 to 0 atomically, so only one gives back. A
 * socket holds at most one slot of one limit: a second connect() on it
 * (EALREADY, EISCONN, a UDP socket connected anew) takes nothing. */
struct kt_sk_slot {
	__u32 slot;       /* member bucket */
	__u32 epoch;      /* kt_inflight[slot].epoch when taken */
	__u32 node_slot;  /* node bucket also charged; KT_SLOT_NONE: none */
	__u32 node_epoch;
	__u64 held;       /* 1 while the slots above are held */
	__u64 taken_ns;   /* boot-time ns of the connect that took them (the audit's age) */
};
_Static_assert(sizeof(struct kt_sk_slot) == 32, "kt_sk_slot layout");

/* A socket holding a slot that is still not connected this long after its
 * connect took it (a connect that failed before TCP: no route; a UDP socket
 * disconnected) gives it back at the next audit. */
#define KT_AUDIT_UNCONNECTED_NS 1000000000ull

/* The in-flight audit (bpf/audit.bpf.c). A close is seen only by programs
 * attached at or above the socket's cgroup, so a socket closed after its
 * cgroup left every attach point keeps its slot counted. The daemon counts
 * the marks of live sockets now and then and corrects a count that differs
 * from them in several audits in a row.
 *
 * kt_audit_mark: what the iterator (iter/bpf_sk_storage_map over kt_sk_slot)
 * writes to its seq file for each socket holding a slot. */
struct kt_audit_mark {
	__u32 slot;       /* as struct kt_sk_slot */
	__u32 epoch;
	__u32 node_slot;
	__u32 node_epoch;
};
_Static_assert(sizeof(struct kt_audit_mark) == 16, "kt_audit_mark layout");

/* A correction (SEC("syscall") kt_audit_fix, run with BPF_PROG_TEST_RUN):
 * kt_inflight[slot].open set from `expect` to `want` in one compare and
 * swap, only while the slot still has `epoch` and the count is still
 * `expect` (userspace cannot write a map value atomically). It returns 1
 * when it wrote, else 0. */
struct kt_audit_fix {
	__u32 slot;
	__u32 epoch;
	__u64 expect;
	__u64 want;
};
_Static_assert(sizeof(struct kt_audit_fix) == 24, "kt_audit_fix layout");

/* kt_sk_pace (socket storage, pinned): per TCP socket, the byte-unit bucket
 * its packets were last charged to, so the sockops program can pace the
 * socket itself (SO_MAX_PACING_RATE, TCP's internal pacing: no fq needed)
 * just below that bucket's rate instead of letting the egress program drop
 * it. The egress program writes `slot` (and creates the entry); the sockops
 * program owns the other fields. Never written by userspace. */
struct kt_sk_pace {
	__u32 slot;         /* bucket slot last charged; KT_SLOT_NONE: none */
	__u32 flags;        /* KT_SK_PACE_* */
	__u32 counted_slot; /* slot whose kt_pace_socks count holds this socket */
	__u32 rate;         /* SO_MAX_PACING_RATE last set, bytes/s; 0 = never */
	__u64 checked_ns;   /* kt clock ns of the last refresh */
	__u32 cwnd_clamp;   /* TCP_BPF_SNDCWND_CLAMP last set, segments; 0 = never */
	__u32 pad;
};
#define KT_SK_PACE_COUNTED (1u << 0) /* counted in kt_pace_socks[counted_slot] */
_Static_assert(sizeof(struct kt_sk_pace) == 32, "kt_sk_pace layout");

/* What classification decided for one destination: the bucket that takes
 * it, and what charging, pacing, refunds and events need of its limit. */
struct kt_cls {
	__u32 slot;         /* kt_buckets index; KT_SLOT_NONE: no limit takes it (pass) */
	__u16 refuse_errno; /* as kt_dest_val's */
	__u8 unit;          /* enum kt_unit of the limit */
	__u8 pad;
};
#define KT_SLOT_NONE 0xffffffffu
_Static_assert(sizeof(struct kt_cls) == 8, "kt_cls layout");

/* kt_sk_sa (socket storage): the last decision of the connect and sendmsg
 * hooks on a socket, so repeated sends to one destination cost one storage
 * lookup instead of the member list, the limits and the prefix trie. Valid
 * while gen equals kt_gen[0] (every change of the classifier maps bumps it)
 * and the rest of the key matches. Those hooks run under the socket lock,
 * so one writer at a time updates it in place. Written by the programs only. */
struct kt_sk_sa {
	__u64 gen;
	__u64 cgid;       /* the sending task's cgroup */
	__u32 addr[4];    /* destination, v4-mapped for IPv4 */
	__u16 port;       /* host order */
	__u8 proto;       /* KT_PROTO_* */
	__u8 hook;        /* enum kt_hook */
	struct kt_cls cls;
	__u32 pad;
};
_Static_assert(sizeof(struct kt_sk_sa) == 48, "kt_sk_sa layout");

/* kt_sk_eg (socket storage): the egress program's last decisions for a
 * socket's packets to one destination (the socket's cgroup never changes).
 * Egress runs on several CPUs at once for one socket, so an entry is never
 * written after it is published: a new decision replaces the entry whole
 * (delete, then create with the value), and a reader sees the old or the
 * new one, never a mix. `misses` is only a hint for when to replace. */
struct kt_sk_eg {
	__u64 gen;
	__u32 addr[4];
	__u32 port;       /* host order, or KT_PORT_ANY (no readable port) */
	__u8 proto;       /* KT_PROTO_* of the packet */
	__u8 pad[3];
	struct kt_cls pkt;   /* unit packet or byte (the egress hook's limits) */
	struct kt_cls dgram; /* unit datagram, for what the sendmsg hooks cannot see */
	__u32 misses;     /* lookups since creation that did not match it */
	__u32 pad2;
};
_Static_assert(sizeof(struct kt_sk_eg) == 56, "kt_sk_eg layout");

/* kt_pace_socks (array, KT_MAX_BUCKETS x __u32, pinned): paced TCP sockets
 * per bucket slot, so sockets sharing a bucket split its rate. */
#define KT_PACE_REFRESH_NS (10ULL * 1000000ULL) /* at most one refresh per socket per 10 ms */
#define KT_PACE_PERCENT 95 /* pace payload at 95% of the bucket: skb->len counts headers */
#define KT_PACE_MIN_RATE 1024u /* bytes/s: never pace a socket slower than this */

static inline int kt_port_filter_test(const struct kt_port_filter *f, __u16 port)
{
	return (f->bits[port >> 6] >> (port & 63)) & 1;
}

#ifndef __bpf__
/* The kt_idle_hooks mask for the port filters of hooks 0..n_hooks-1. */
static inline __u32 kt_idle_hooks_of(const struct kt_port_filter *filters, int n_hooks)
{
	__u32 mask = 0;

	for (int h = 0; h < n_hooks; h++) {
		__u64 any = 0;

		for (unsigned w = 0; w < sizeof(filters[h].bits) / sizeof(filters[h].bits[0]); w++)
			any |= filters[h].bits[w];
		if (!any)
			mask |= 1u << h;
	}
	return mask;
}
#endif

/* Q48.16 interval for a rate in tokens per second; 0 for rate <= 0 (closed).
 * Host only: BPF has no floating point. Rounds up so the enforced rate never
 * exceeds the requested one. */
#ifndef __bpf__
/* The one clock of kthrottle: CLOCK_BOOTTIME, which bpf_ktime_get_boot_ns()
 * reads in the programs. Unlike CLOCK_MONOTONIC it keeps counting while the
 * machine is suspended or the VM paused, so no deadline (a lease, a
 * fallback) is stretched by a pause the other nodes did not share. */
static inline __u64 kt_clock_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (__u64)ts.tv_sec * 1000000000ull + (__u64)ts.tv_nsec;
}

static inline __u64 kt_interval_fp_from_rate(double tokens_per_sec)
{
	if (!(tokens_per_sec > 0))
		return 0;
	double fp = 1e9 * (double)KT_FP_ONE / tokens_per_sec;
	if (fp >= 18446744073709549568.0) /* largest double below 2^64 */
		return ~0ULL;
	__u64 v = (__u64)fp;
	if ((double)v < fp)
		v++;
	return v ? v : 1;
}

static inline double kt_rate_from_interval_fp(__u64 interval_fp)
{
	return interval_fp ? 1e9 * (double)KT_FP_ONE / (double)interval_fp : 0.0;
}
#endif

/* a * b, saturating at ~0, with no divide on the hot path: a few 32-bit
 * partial products (BPF has no 128-bit multiply). */
static inline __u64 kt_mul_sat(__u64 a, __u64 b)
{
	__u64 hi, lo, r;

	if (a >> 32) {
		if (b >> 32)
			return ~0ULL; /* both >= 2^32 */
		__u64 t = a;
		a = b;
		b = t;
	}
	hi = a * (b >> 32);
	if (hi >> 32)
		return ~0ULL;
	lo = a * (b & 0xffffffffULL);
	r = (hi << 32) + lo;
	return r < lo ? ~0ULL : r;
}

#define KT_NS_CAP (~0ULL >> KT_FP_SHIFT) /* 2^48 ns, about 78 hours */

/* ns that `tokens` tokens take at `interval_fp`, rounded up; saturates near
 * 2^48 ns (78 hours), far beyond any burst tolerance, so an overflowing cost
 * can never conform. */
static inline __u64 kt_tokens_to_ns(__u64 tokens, __u64 interval_fp)
{
	__u64 p = kt_mul_sat(tokens, interval_fp);

	if (p > ~0ULL - (KT_FP_ONE - 1))
		return KT_NS_CAP;
	return (p + (KT_FP_ONE - 1)) >> KT_FP_SHIFT;
}

#ifdef __bpf__
#define KT_READ_ONCE(x) (*(volatile __typeof__(x) *)&(x))
#else
#define KT_READ_ONCE(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#endif

/* The interval and burst in force at `now`: the share while the lease
 * holds, then the fallback, then closed (interval 0). */
static inline __u64 kt_bucket_params(const struct kt_bucket *b, __u64 now, __u64 *burst)
{
	__u64 until = KT_READ_ONCE(b->valid_until);
	__u64 fb_until, fb_burst;

	*burst = KT_READ_ONCE(b->burst);
	if (!until || (__s64)(now - until) <= 0)
		return KT_READ_ONCE(b->interval_fp);
	fb_until = KT_READ_ONCE(b->fallback_until);
	if (fb_until && (__s64)(now - fb_until) > 0)
		return 0;
	fb_burst = KT_READ_ONCE(b->fallback_burst);
	if (fb_burst && fb_burst < *burst)
		*burst = fb_burst;
	return KT_READ_ONCE(b->fallback_fp);
}

/* In-flight limits: the slots `b` grants at `now` (see struct kt_inflight). */
static inline __u64 kt_slots_in_force(const struct kt_bucket *b, __u64 now)
{
	__u64 slots, open = kt_bucket_params(b, now, &slots);

	return open ? slots : 0;
}

/* Why `b` refuses at `now` (enum kt_reason), as kt_bucket_params decides
 * what is in force. */
static inline __u32 kt_bucket_reason(const struct kt_bucket *b, __u64 now)
{
	__u64 burst, interval = kt_bucket_params(b, now, &burst);
	__u64 until = KT_READ_ONCE(b->valid_until);

	if (KT_READ_ONCE(b->flags) & KT_BUCKET_STRICT)
		return KT_READ_ONCE(b->interval_fp) ? KT_REASON_PERMIT : KT_REASON_CLOSED;
	if (!interval)
		return KT_REASON_CLOSED;
	return until && (__s64)(now - until) > 0 ? KT_REASON_FALLBACK : KT_REASON_SHARE;
}

/* The tolerance (ns a bucket may run ahead of now) for a request of `cost`
 * tokens, and *cost_ns, its price. Every charge rounds up to a whole ns, so
 * the tolerance must hold burst/cost whole charges or the rounding eats the
 * burst (3/s with burst 2 would pass 1). Capped like kt_tokens_to_ns. */
static inline __u64 kt_gcra_tolerance(__u64 interval, __u64 burst, __u64 cost, __u64 *cost_ns)
{
	__u64 tau;

	if (cost == 1) {
		/* the common unit (connection, datagram, packet): no divide */
		*cost_ns = interval > ~0ULL - (KT_FP_ONE - 1) ? KT_NS_CAP
							      : (interval + (KT_FP_ONE - 1)) >> KT_FP_SHIFT;
		tau = kt_mul_sat(burst, *cost_ns);
	} else {
		*cost_ns = kt_tokens_to_ns(cost, interval);
		tau = kt_tokens_to_ns(burst, interval);
		if (cost && cost <= burst) {
			__u64 whole = kt_mul_sat(burst / cost, *cost_ns);

			if (whole > tau)
				tau = whole;
		}
	}
	return tau > KT_NS_CAP ? KT_NS_CAP : tau;
}

/*
 * GCRA: the bucket is one theoretical arrival time (tat). A request of `cost`
 * tokens conforms when, after charging it, tat is no further than the burst
 * tolerance (burst tokens worth of ns) ahead of now. Charging is a
 * compare-and-swap on tat, so concurrent CPUs never lose or double-spend a
 * token; on persistent contention it refuses, which errs below the limit.
 *
 * A single request larger than the whole burst (a 64 KiB GSO packet against a
 * small byte bucket) is admitted only when the bucket is full, and its excess
 * is carried as debt, so large units are never starved and the long-run rate
 * still holds.
 *
 * Time comparisons use signed differences, so the math stays correct across a
 * wrap of the 64-bit clock.
 *
 * Returns KT_ADMIT or KT_REFUSE; *wait_ns is how long until the same request
 * would conform (0 when admitted).
 */
static inline int kt_gcra_decide(struct kt_bucket *b, __u64 now, __u64 cost, __u64 *wait_ns)
{
	__u64 burst;
	__u64 interval = kt_bucket_params(b, now, &burst);
	__u64 cost_ns, tau;
	int i;

	*wait_ns = 0;
	if (interval == 0) {
		*wait_ns = ~0ULL;
		return KT_REFUSE;
	}
	tau = kt_gcra_tolerance(interval, burst, cost, &cost_ns);

	for (i = 0; i < KT_CAS_RETRIES; i++) {
		__u64 tat = KT_READ_ONCE(b->tat);
		__u64 base = (__s64)(tat - now) > 0 ? tat : now;
		__u64 ahead = base - now; /* debt already queued, ns */

		if (cost_ns > tau) {
			if (ahead > 0) {
				*wait_ns = ahead;
				return KT_REFUSE;
			}
		} else if (ahead > tau - cost_ns) {
			*wait_ns = ahead - (tau - cost_ns);
			return KT_REFUSE;
		}
		if (__sync_val_compare_and_swap(&b->tat, tat, base + cost_ns) == tat)
			return KT_ADMIT;
	}
	return KT_REFUSE;
}

/*
 * EDT pacing: the egress program's alternative to refusing a TCP packet
 * whose socket is scheduled by the fq qdisc (which sends every packet at its
 * skb->tstamp, "earliest departure time"). Instead of "conforms now or not",
 * it answers *when* the request conforms and charges the bucket as if it had
 * been admitted at that moment, so the departures it hands out follow GCRA
 * exactly: the same burst, the same long-run rate, and departures in the
 * order the requests came. A refused TCP packet costs the sender a
 * retransmit timeout; a delayed one only a longer RTT, and TCP Small Queues
 * keeps each socket's queue short, so the sender is slowed to the rate.
 *
 * The departure is at most horizon_ns away: past that the debt is too large
 * to queue (a sender fq does not actually pace, a flood of sockets) and the
 * request is refused, charging nothing, as kt_gcra_decide would.
 *
 * Returns KT_ADMIT with *wait_ns = ns from now until the departure (0: now),
 * or KT_REFUSE with *wait_ns = the wait that was too long (~0 when closed).
 */
#define KT_PACE_HORIZON_NS (2ULL * 1000000000ULL)

static inline int kt_gcra_pace(struct kt_bucket *b, __u64 now, __u64 cost, __u64 horizon_ns,
			       __u64 *wait_ns)
{
	__u64 burst;
	__u64 interval = kt_bucket_params(b, now, &burst);
	__u64 cost_ns, tau;
	int i;

	*wait_ns = ~0ULL;
	if (interval == 0)
		return KT_REFUSE;
	tau = kt_gcra_tolerance(interval, burst, cost, &cost_ns);

	for (i = 0; i < KT_CAS_RETRIES; i++) {
		__u64 tat = KT_READ_ONCE(b->tat);
		__u64 base = (__s64)(tat - now) > 0 ? tat : now;
		__u64 ahead = base - now;
		__u64 wait;

		/* At now + wait the request conforms: an oversize one once the
		 * debt is gone, any other once the debt left is tau - cost_ns.
		 * Then max(tat, departure) = base, so tat becomes
		 * base + cost_ns, as kt_gcra_decide would make it then. */
		if (cost_ns > tau)
			wait = ahead;
		else
			wait = ahead > tau - cost_ns ? ahead - (tau - cost_ns) : 0;
		if (wait > horizon_ns) {
			*wait_ns = wait;
			return KT_REFUSE;
		}
		if (__sync_val_compare_and_swap(&b->tat, tat, base + cost_ns) == tat) {
			*wait_ns = wait;
			return KT_ADMIT;
		}
	}
	return KT_REFUSE;
}

/* Gives back `tokens` a decision took (a send refused later on the same
 * path, whose first token the sendmsg hook had charged): without it a bucket
 * that single-token charges keep draining never fills enough for a
 * many-token one. Never more than was taken, so never above the burst. */
static inline void kt_gcra_refund(struct kt_bucket *b, __u64 now, __u64 tokens)
{
	__u64 burst, interval = kt_bucket_params(b, now, &burst);
	__u64 back = kt_tokens_to_ns(tokens, interval);
	int i;

	if (!interval)
		return;
	for (i = 0; i < KT_CAS_RETRIES; i++) {
		__u64 tat = KT_READ_ONCE(b->tat);

		if ((__s64)(tat - now) <= 0)
			return; /* full: nothing of ours is queued */
		if (__sync_val_compare_and_swap(&b->tat, tat, tat - back) == tat)
			return;
	}
}

/* kt_gcra_decide on a member bucket and then on the node bucket it is
 * chained to (`parent`, NULL: none): admitted only if both admit. When the
 * node bucket refuses, the member's token goes back, so a refused request
 * costs the member nothing, and *wait_ns is the node bucket's. */
static inline int kt_gcra_decide_chained(struct kt_bucket *b, struct kt_bucket *parent, __u64 now,
					 __u64 cost, __u64 *wait_ns)
{
	int verdict = kt_gcra_decide(b, now, cost, wait_ns);

	if (verdict != KT_ADMIT || !parent)
		return verdict;
	if (kt_gcra_decide(parent, now, cost, wait_ns) == KT_ADMIT)
		return KT_ADMIT;
	kt_gcra_refund(b, now, cost);
	return KT_REFUSE;
}

/* Whole tokens a bucket holds at `now` (for status and utilization). */
static inline __u64 kt_gcra_tokens_left(const struct kt_bucket *b, __u64 now)
{
	__u64 burst;
	__u64 interval = kt_bucket_params(b, now, &burst);
	__u64 tat = KT_READ_ONCE(b->tat);
	__u64 tau, ahead;

	if (interval == 0)
		return 0;
	tau = kt_tokens_to_ns(burst, interval);
	ahead = (__s64)(tat - now) > 0 ? tat - now : 0;
	if (ahead >= tau)
		return 0;
	/* (tau - ahead) ns / (interval_fp / 2^16) ns per token */
	__u64 left_ns = tau - ahead;
	if (left_ns > (~0ULL >> KT_FP_SHIFT))
		return burst;
	__u64 tokens = (left_ns << KT_FP_SHIFT) / interval;
	return tokens > burst ? burst : tokens;
}

/*
 * Tag limits: a leaky bucket per throttling tag (a source address
 * prefix at XDP, or an application's string asked over the query socket),
 * `burst` tokens refilled at `rate` per second. Each node decides alone and
 * reports the hits it served every reportInterval; the other nodes take a
 * token for each remote hit, so a bucket may go below zero and then stays
 * shut until it refills: a client's long-run rate is the rate however a load
 * balancer spreads it. The bucket is one tat, as GCRA: tokens =
 * (burst x interval - (max(tat, now) - now)) / interval, and a remote hit
 * moves tat one interval further.
 */
#define KT_MAX_TAG_LIMITS 64
#define KT_TAG_MAX_LEN 255 /* bytes of a query tag; a longer line is answered NO */

/* One decision for a tag: KT_ADMIT (a token taken) or KT_REFUSE, with
 * *wait_ns until one token is there. interval_fp 0 refuses everything. */
static inline int kt_tag_take(__u64 *tat, __u64 now, __u64 interval_fp, __u64 burst,
			      __u64 *wait_ns)
{
	__u64 cost_ns, tau;
	int i;

	*wait_ns = 0;
	if (!interval_fp || !burst) {
		*wait_ns = ~0ULL;
		return KT_REFUSE;
	}
	tau = kt_gcra_tolerance(interval_fp, burst, 1, &cost_ns);
	for (i = 0; i < KT_CAS_RETRIES; i++) {
		__u64 old = KT_READ_ONCE(*tat);
		__u64 base = (__s64)(old - now) > 0 ? old : now;
		__u64 ahead = base - now;

		if (ahead > tau - cost_ns) {
			*wait_ns = ahead - (tau - cost_ns);
			return KT_REFUSE;
		}
		if (__sync_val_compare_and_swap(tat, old, base + cost_ns) == old)
			return KT_ADMIT;
	}
	return KT_REFUSE;
}

/* Remote hits: `hits` tokens taken at `now`, below zero if need be. The debt
 * saturates near 2^48 ns (78 hours), as every cost does. */
static inline void kt_tag_debit(__u64 *tat, __u64 now, __u64 interval_fp, __u64 hits)
{
	__u64 cost_ns, add;
	int i;

	if (!interval_fp || !hits)
		return;
	kt_gcra_tolerance(interval_fp, 1, 1, &cost_ns);
	add = kt_mul_sat(hits, cost_ns);
	if (add > KT_NS_CAP)
		add = KT_NS_CAP;
	for (i = 0; i < KT_CAS_RETRIES; i++) {
		__u64 old = KT_READ_ONCE(*tat);
		__u64 base = (__s64)(old - now) > 0 ? old : now;

		if (base - now > KT_NS_CAP - add)
			add = KT_NS_CAP - (base - now); /* saturate the debt */
		if (__sync_val_compare_and_swap(tat, old, base + add) == old)
			return;
	}
}

#ifndef __bpf__
/* The bucket's value in tokens at `now`, fractional and possibly negative
 * (the design's table): for status and tests. */
static inline double kt_tag_tokens(__u64 tat, __u64 now, __u64 interval_fp, __u64 burst)
{
	__u64 cost_ns, tau = kt_gcra_tolerance(interval_fp, burst, 1, &cost_ns);
	__u64 ahead = (__s64)(tat - now) > 0 ? tat - now : 0;

	if (!interval_fp || !cost_ns)
		return 0;
	return ((double)tau - (double)ahead) / (double)cost_ns;
}
#endif

/* XDP source tags. kt_tag_buckets (LRU hash, maxTags entries summed over the
 * tag limits): one bucket per (tag limit, source prefix). The source address
 * is masked to the limit's prefix length (addr bytes past it are zero; IPv4
 * in addr[0..3]). */
struct kt_tag_key {
	__u32 tag_limit;   /* index of the tag limit, < KT_MAX_TAG_LIMITS */
	__u8 family;       /* 4 or 6 */
	__u8 prefix_len;   /* bits of addr that count */
	__u16 pad;
	__u8 addr[16];
};
_Static_assert(sizeof(struct kt_tag_key) == 24, "kt_tag_key layout");

/* The policy is copied into the bucket when it is made (the limit's rate,
 * or an override's; allowlisted prefixes get KT_TAG_ALLOW), so a packet costs
 * one hash lookup. The daemon rewrites interval_fp/burst/flags in place on a
 * reload. hits counts admissions since the daemon last harvested them for
 * the exchange, the one counter an admission adds to: KT_TAG_OP_HARVEST
 * adds what it takes from hits to admitted, so the total admitted is
 * admitted + hits (exact between harvests; a reader racing a harvest may be
 * off by that harvest for one read). dropped is a total. (An older build's
 * program added to admitted itself: while one is still attached to pins a
 * newer daemon harvests, in an upgrade before the links are switched, its
 * admissions count twice in admitted.) */
struct kt_tag_bucket {
	__u64 tat;         /* kt clock ns (CLOCK_BOOTTIME) */
	__u64 interval_fp; /* Q48.16 ns per token; 0 = refuse all */
	__u64 burst;
	__u64 hits;        /* admitted, not yet reported */
	__u64 admitted;    /* admitted and harvested: + hits = all admitted */
	__u64 dropped;
	__u64 last_seen;   /* CLOCK_MONOTONIC_COARSE ns of the last packet (xdp.bpf.c) */
	__u32 flags;       /* KT_TAG_* */
	__u32 pad;
};
#define KT_TAG_ALLOW (1u << 0) /* allowlisted: passes untouched, not counted */
_Static_assert(sizeof(struct kt_tag_bucket) == 64, "kt_tag_bucket layout");

/*
 * The rest of the XDP tag maps (bpf/xdp.bpf.c, pinned by name in the pin
 * dir the daemon gives user/tags/xdp_maps.c):
 *
 * kt_xdp_ifaces (hash, KT_MAX_XDP_IFACES): ifindex -> struct kt_xdp_iface,
 *   the tag limit whose buckets an interface's ingress is charged to and the
 *   prefix lengths a source is masked to. An interface not in it passes
 *   everything. Daemon writes, program reads.
 * kt_xdp_ifslot (array, KT_XDP_IFSLOTS, BPF_F_MMAPABLE): the same entries
 *   indexed by ifindex, KT_XDP_IFACE_SET in flags, for every ifindex below
 *   KT_XDP_IFSLOTS: the program reads the config there with no hash lookup
 *   (inlined array access) and reads kt_xdp_ifaces only for larger ones.
 *   kt_xdp_ifaces stays the record (what an older daemon reads and writes):
 *   the daemon writes both, and rebuilds the slots from it on every open.
 * kt_tag_policy (array, KT_MAX_TAG_LIMITS): the limit's default policy
 *   (struct kt_tag_policy with KT_TAG_POLICY_IN_USE); a limit not in use
 *   passes everything.
 * kt_tag_rules (LPM trie, KT_MAX_TAG_RULES): struct kt_tag_rule_key ->
 *   struct kt_tag_policy, allowlisted prefixes (KT_TAG_ALLOW) and per-CIDR
 *   overrides. Looked up only when a bucket is made, with the bucket's
 *   masked address and prefix (so a rule narrower than the interface's
 *   prefix never matches); the bucket then caches the policy. A rule change
 *   reaches existing buckets only through KT_TAG_OP_SET.
 * kt_tag_notify (ring buffer): a struct kt_tag_key each time a bucket's
 *   hits goes 0 -> 1 (the first admission since the last harvest), so a
 *   harvest costs the tags seen, not the map size. A full ring adds to
 *   kt_xdp_stats.notify_lost: the daemon then scans the whole map once.
 * kt_xdp_stats (array, 1 entry): struct kt_xdp_stats, atomic adds.
 * kt_tag_ops (array, BPF_F_MMAPABLE, KT_TAG_OPS_BATCH, not pinned): the
 *   daemon's batch of bucket operations (struct kt_tag_op) for the
 *   kt_tag_run_ops program (SEC("syscall"), run with BPF_PROG_TEST_RUN and a
 *   struct kt_tag_ops_ctx): userspace cannot do atomics on hash values. A
 *   sleepable program cannot read an LPM trie (6.18 refuses the load), so
 *   the daemon resolves the policy of a bucket an op must make.
 */
#define KT_MAX_XDP_IFACES 256
#define KT_XDP_IFSLOTS 4096 /* ifindexes with a kt_xdp_ifslot entry: 0..4095 */
#define KT_MAX_TAG_RULES 16384
#define KT_TAG_OPS_BATCH 256

struct kt_xdp_iface {
	__u32 tag_limit; /* < KT_MAX_TAG_LIMITS */
	__u8 prefix_v4;  /* 0..32: bits of an IPv4 source that make the tag */
	__u8 prefix_v6;  /* 0..128 */
	__u16 flags;     /* KT_XDP_IFACE_SET in a kt_xdp_ifslot entry in use; else 0 */
};
#define KT_XDP_IFACE_SET (1u << 0)
_Static_assert(sizeof(struct kt_xdp_iface) == 8, "kt_xdp_iface layout");

/* A tag limit's default (kt_tag_policy) or a rule's (kt_tag_rules): what a
 * new bucket copies. interval_fp 0 or burst 0 refuses everything. */
struct kt_tag_policy {
	__u64 interval_fp; /* Q48.16 ns per token */
	__u64 burst;
	__u32 flags;       /* KT_TAG_ALLOW; KT_TAG_POLICY_IN_USE in kt_tag_policy */
	__u32 pad;
};
#define KT_TAG_POLICY_IN_USE (1u << 1)
_Static_assert(sizeof(struct kt_tag_policy) == 24, "kt_tag_policy layout");

/* LPM key: prefixlen counts bits of tag_limit (32), family and pad (32),
 * then of addr: 64 + the CIDR's length. addr as in kt_tag_key. */
struct kt_tag_rule_key {
	__u32 prefixlen;
	__u32 tag_limit;
	__u8 family;       /* 4 or 6 */
	__u8 pad[3];
	__u8 addr[16];
};
#define KT_TAG_RULE_BITS 64 /* prefixlen of a rule that matches the whole family */
_Static_assert(sizeof(struct kt_tag_rule_key) == 28, "kt_tag_rule_key layout");

struct kt_xdp_stats {
	__u64 notify_lost;  /* kt_tag_notify records that did not fit */
	__u64 malformed;    /* IP frames dropped with a truncated header */
	__u64 no_bucket;    /* passed: a bucket could not be made (map full of new keys) */
	__u64 pad;
};
_Static_assert(sizeof(struct kt_xdp_stats) == 32, "kt_xdp_stats layout");

/* One bucket operation of a batch (kt_tag_ops). The program sets result. */
enum kt_tag_op_kind {
	KT_TAG_OP_NONE = 0,
	KT_TAG_OP_HARVEST = 1, /* hits <- the bucket's hits, zeroed (one atomic exchange),
				* and added to its admitted */
	KT_TAG_OP_DEBIT = 2,   /* kt_tag_debit(hits) on the bucket's tat. An absent
				* bucket is KT_TAG_OP_ABSENT, unless flags has
				* KT_TAG_OP_MAKE: then it is made full with
				* interval_fp/burst/flags (the policy the XDP
				* program would give it: the caller looks it up,
				* the program cannot read the LPM trie) and
				* debited */
	KT_TAG_OP_SET = 3,     /* interval_fp/burst/flags rewritten in place; the
				* debt in tat is rescaled to the same tokens at the
				* new rate. An absent bucket stays absent. */
};
enum kt_tag_op_result {
	KT_TAG_OP_DONE = 0,
	KT_TAG_OP_ABSENT = 1, /* no such bucket (harvest, set; debit: no policy) */
	KT_TAG_OP_FAILED = 2, /* the bucket could not be made, or a bad op */
};
struct kt_tag_op {
	struct kt_tag_key key;
	__u64 hits;        /* debit: remote hits; harvest: out */
	__u64 interval_fp; /* set; debit with KT_TAG_OP_MAKE */
	__u64 burst;       /* set; debit with KT_TAG_OP_MAKE */
	__u32 flags;       /* KT_TAG_ALLOW or 0; debit: | KT_TAG_OP_MAKE */
	__u16 op;          /* enum kt_tag_op_kind */
	__u16 result;      /* out: enum kt_tag_op_result */
};
_Static_assert(sizeof(struct kt_tag_op) == 56, "kt_tag_op layout");
#define KT_TAG_OP_MAKE (1u << 31) /* debit: make an absent bucket with this policy */

/* BPF_PROG_TEST_RUN ctx of kt_tag_run_ops: ops 0..count-1 of kt_tag_ops. */
struct kt_tag_ops_ctx {
	__u32 count;  /* <= KT_TAG_OPS_BATCH */
	__u32 done;   /* out: ops run */
	/* the caller's CLOCK_MONOTONIC_COARSE, the tag buckets' clock (this
	 * program type cannot read it); 0: the kernel's precise monotonic */
	__u64 now_ns;
};
_Static_assert(sizeof(struct kt_tag_ops_ctx) == 16, "kt_tag_ops_ctx layout");

/* A bucket's rate changed on a reload: the debt ahead of now (ns at
 * old_fp) as ns at new_fp, the same tokens (within 2^-16 of one), capped at
 * KT_NS_CAP. Integer only (it runs in BPF). */
static inline __u64 kt_tag_rescale_ahead(__u64 ahead, __u64 old_fp, __u64 new_fp)
{
	__u64 whole, rem_ns, old_ns, frac16, out;

	if (!old_fp || !new_fp || !ahead)
		return ahead;
	if (ahead > KT_NS_CAP)
		ahead = KT_NS_CAP;
	whole = (ahead << KT_FP_SHIFT) / old_fp; /* whole tokens of debt */
	rem_ns = ahead - (kt_mul_sat(whole, old_fp) >> KT_FP_SHIFT);
	old_ns = old_fp >> KT_FP_SHIFT;
	frac16 = old_ns && rem_ns < old_ns ? (rem_ns << KT_FP_SHIFT) / old_ns : 0;
	out = kt_mul_sat(whole, new_fp) >> KT_FP_SHIFT;
	out += (frac16 * (new_fp >> KT_FP_SHIFT)) >> KT_FP_SHIFT;
	return out > KT_NS_CAP ? KT_NS_CAP : out;
}

#ifndef __bpf__
/*
 * Change a bucket's rate without losing or gaining tokens: the debt queued
 * in tat (ns at the old rate) is rescaled to the same number of tokens at the
 * new rate, so a rate rise takes effect at once instead of after the old
 * debt drains, and a fall does not hand out a fresh allowance. The interval
 * itself is still one atomic store; a decision that runs between the two
 * writes errs by at most one request.
 */
static inline void kt_bucket_rescale(struct kt_bucket *b, __u64 now, __u64 new_interval_fp)
{
	__u64 old_interval = __atomic_load_n(&b->interval_fp, __ATOMIC_RELAXED);
	int i;

	if (old_interval && new_interval_fp && old_interval != new_interval_fp) {
		for (i = 0; i < KT_CAS_RETRIES; i++) {
			__u64 tat = __atomic_load_n(&b->tat, __ATOMIC_RELAXED);
			if ((__s64)(tat - now) <= 0)
				break; /* bucket full: nothing queued to rescale */
			long double scaled =
				(long double)(tat - now) * new_interval_fp / old_interval;
			__u64 ahead = scaled > 4e18L ? 4000000000000000000ULL : (__u64)scaled;
			if (__sync_bool_compare_and_swap(&b->tat, tat, now + ahead))
				break;
		}
	}
	__atomic_store_n(&b->interval_fp, new_interval_fp, __ATOMIC_RELEASE);
}
#endif

/* A strict bucket holding no permit refuses as closed (its window is over,
 * interval 0 in kt_bucket_params), but it is not closed while its
 * interval is set: a permit comes once the daemon sees the demand, i.e.
 * this refusal. So callers are told to ask again this soon, not never. */
#define KT_STRICT_RETRY_NS 5000000ULL
static inline __u64 kt_strict_wait(const struct kt_bucket *b, __u64 wait)
{
	if (wait == ~0ULL && (KT_READ_ONCE(b->flags) & KT_BUCKET_STRICT) && KT_READ_ONCE(b->interval_fp))
		return KT_STRICT_RETRY_NS;
	return wait;
}

#ifndef __bpf__
/*
 * Strict buckets (KT_BUCKET_STRICT). kt_strict_arm hands a bucket whose last
 * permit is spent (tat ahead: it was used) or over (past valid_until) the
 * permit due at `due`: tat first, so while valid_until is still the old one
 * the bucket either stays closed (old window over) or refuses until `due`
 * (old window open, its permit spent: tat = due is still ahead of any
 * earlier admission's window). Then valid_until = due + expire. Either
 * order of the readers' loads sees at most one admission, at or after due,
 * because burst is 1 and the hold (interval) exceeds the window. Never call
 * it while the bucket holds an unspent permit whose window is open: that
 * permit would be moved, not wasted. */
static inline void kt_strict_arm(struct kt_bucket *b, __u64 due, __u64 expire_ns)
{
	__atomic_store_n(&b->fallback_fp, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&b->fallback_until, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&b->tat, due, __ATOMIC_RELEASE);
	__atomic_store_n(&b->valid_until, due + expire_ns, __ATOMIC_RELEASE);
}

/* Whether the permit kt_strict_arm wrote for `due` was used: the one
 * admission moved tat past due (the kernel's CAS is the only other writer). */
static inline int kt_strict_spent(const struct kt_bucket *b, __u64 due)
{
	return __atomic_load_n(&b->tat, __ATOMIC_ACQUIRE) != due;
}

/* The hold of one strict admission: longer than the window, so the window
 * never yields a second one; `every` when that is longer, so a refused
 * caller's retry-after points at the soonest next permit. */
static inline __u64 kt_strict_hold_ns(__u64 every_ns, __u64 expire_ns)
{
	return every_ns > expire_ns ? every_ns : expire_ns + 1000;
}
#endif

/*
 * Cooperative limits (unit `request`): no kernel hook enforces them; the
 * application asks libkthrottle before each request, and the library runs
 * kt_gcra_decide above on a memory-mapped entry of kt_coop, with no syscall.
 *
 * kt_coop (array, BPF_F_MMAPABLE, KT_MAX_COOP entries, pinned as
 * <pinDir>/kt_coop): one entry per cooperative limit on this node. Two cache
 * lines: the bucket (charged by every caller) in the first, the identity and
 * the counters in the second.
 *
 * Who writes what:
 *  - the daemon: name, flags, gen (the identity, see the protocol below), and
 *    the bucket's rate fields (interval_fp, burst, valid_until, fallback_*),
 *    each an aligned 8-byte store, a rate change through kt_bucket_rescale,
 *    as for kt_buckets. It never writes tat or the counters of a live entry.
 *  - callers (libkthrottle): bucket.tat, only by compare-and-swap in
 *    kt_gcra_decide; admitted and refused, only by atomic add (tokens, i.e.
 *    the n of try_acquire, not calls). The daemon reads the counters as
 *    monotonic totals (deltas per tick give utilization and demand).
 *
 * Identity protocol (a seqcount): gen is even when the entry is stable, odd
 * while the daemon rewrites it. To publish or retire an entry the daemon
 * makes gen odd, clears KT_COOP_IN_USE, writes the name, the bucket (tat 0:
 * full) and zeroes the counters, then makes gen even (release) and, to
 * publish, sets KT_COOP_IN_USE (release): kt_coop_publish, kt_coop_retire.
 * A reader matches an entry only if gen is even and non-zero, the flag is
 * set, the name is equal and gen reads the same again afterwards; it keeps
 * that gen, and an entry whose gen has changed since is no longer its limit
 * (libkthrottle answers -ESTALE). Entry 0 is as usable as any other.
 */
#define KT_MAX_COOP 256

struct kt_coop {
	struct kt_bucket bucket; /* GCRA state: rates by the daemon, tat by callers */
	char name[KT_NAME_LEN];  /* NUL-terminated limit name; daemon */
	__u32 gen;               /* seqcount: odd while being rewritten; daemon */
	__u32 flags;             /* KT_COOP_*; daemon */
	__u64 admitted;          /* tokens admitted; callers, atomic add */
	__u64 refused;           /* tokens refused; callers, atomic add */
	__u64 last_wait;         /* retry-after ns of the latest refusal (~0: closed); callers */
};
#define KT_COOP_IN_USE (1u << 0)
_Static_assert(sizeof(struct kt_coop) == 128, "kt_coop layout");
_Static_assert(__builtin_offsetof(struct kt_coop, name) == 64, "kt_coop: bucket alone in line 0");

/* Whether a request of `cost` tokens would conform at `now`, without
 * charging anything: kt_gcra_decide's test, for status (is_throttled) and
 * for read-only mappings. KT_ADMIT or KT_REFUSE; *wait_ns as kt_gcra_decide
 * sets it (~0 when closed). */
static inline int kt_gcra_peek(const struct kt_bucket *b, __u64 now, __u64 cost, __u64 *wait_ns)
{
	__u64 burst;
	__u64 interval = kt_bucket_params(b, now, &burst);
	__u64 cost_ns, tau, tat, base, ahead;

	*wait_ns = 0;
	if (interval == 0) {
		*wait_ns = ~0ULL;
		return KT_REFUSE;
	}
	tau = kt_gcra_tolerance(interval, burst, cost, &cost_ns);
	tat = KT_READ_ONCE(b->tat);
	base = (__s64)(tat - now) > 0 ? tat : now;
	ahead = base - now;
	if (cost_ns > tau) {
		if (ahead > 0) {
			*wait_ns = ahead;
			return KT_REFUSE;
		}
	} else if (ahead > tau - cost_ns) {
		*wait_ns = ahead - (tau - cost_ns);
		return KT_REFUSE;
	}
	return KT_ADMIT;
}

#ifndef __bpf__
/* The daemon's half of the identity protocol above, on a writable mapping
 * (or a copy written with bpf_map_update_elem before anyone maps it). */
/* strict: the bucket is published KT_BUCKET_STRICT and closed (no permit:
 * valid_until in the past, no fallback), so no caller is ever admitted
 * before the daemon arms a permit. */
static inline void kt_coop_publish_as(struct kt_coop *e, const char *name, __u64 interval_fp,
				      __u64 burst, int strict)
{
	__u32 gen = __atomic_load_n(&e->gen, __ATOMIC_RELAXED);
	unsigned i;

	gen |= 1; /* odd: being rewritten */
	__atomic_store_n(&e->gen, gen, __ATOMIC_RELAXED);
	__atomic_store_n(&e->flags, 0, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	for (i = 0; i < KT_NAME_LEN; i++)
		e->name[i] = 0;
	for (i = 0; i < KT_NAME_LEN - 1 && name[i]; i++)
		e->name[i] = name[i];
	__atomic_store_n(&e->bucket.tat, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&e->bucket.interval_fp, interval_fp, __ATOMIC_RELAXED);
	__atomic_store_n(&e->bucket.burst, burst, __ATOMIC_RELAXED);
	__atomic_store_n(&e->bucket.valid_until, strict ? 1 : 0, __ATOMIC_RELAXED);
	__atomic_store_n(&e->bucket.fallback_fp, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&e->bucket.fallback_until, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&e->bucket.fallback_burst, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&e->bucket.limit_id, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&e->bucket.flags, KT_BUCKET_IN_USE | (strict ? KT_BUCKET_STRICT : 0),
			 __ATOMIC_RELAXED);
	__atomic_store_n(&e->admitted, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&e->refused, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&e->gen, gen + 1, __ATOMIC_RELEASE); /* even, never 0 */
	__atomic_store_n(&e->flags, KT_COOP_IN_USE, __ATOMIC_RELEASE);
}

static inline void kt_coop_publish(struct kt_coop *e, const char *name, __u64 interval_fp,
				   __u64 burst)
{
	kt_coop_publish_as(e, name, interval_fp, burst, 0);
}

/* The reader's half: the entry's gen if it is a stable, in-use entry named
 * name[0..len) (len < KT_NAME_LEN), else 0 (see the protocol above). */
static inline __u32 kt_coop_match(const struct kt_coop *e, const char *name, unsigned long len)
{
	__u32 gen = __atomic_load_n(&e->gen, __ATOMIC_ACQUIRE);
	char buf[KT_NAME_LEN];
	unsigned long i;

	if (!gen || (gen & 1) || !(__atomic_load_n(&e->flags, __ATOMIC_ACQUIRE) & KT_COOP_IN_USE) ||
	    len >= KT_NAME_LEN)
		return 0;
	for (i = 0; i < KT_NAME_LEN; i++)
		buf[i] = __atomic_load_n(&e->name[i], __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if (__atomic_load_n(&e->gen, __ATOMIC_RELAXED) != gen)
		return 0; /* rewritten while we read */
	for (i = 0; i < len; i++)
		if (buf[i] != name[i])
			return 0;
	return buf[len] ? 0 : gen;
}

/* Takes an entry out of use: holders of its old gen get -ESTALE. */
static inline void kt_coop_retire(struct kt_coop *e)
{
	__u32 gen = __atomic_load_n(&e->gen, __ATOMIC_RELAXED) | 1;

	__atomic_store_n(&e->gen, gen, __ATOMIC_RELAXED);
	__atomic_store_n(&e->flags, 0, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	__atomic_store_n(&e->name[0], 0, __ATOMIC_RELAXED);
	__atomic_store_n(&e->bucket.interval_fp, 0, __ATOMIC_RELAXED); /* closed */
	__atomic_store_n(&e->gen, gen + 1, __ATOMIC_RELEASE);
}
#endif

#endif /* KTHROTTLE_H */
