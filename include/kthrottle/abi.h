/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The maps' ABI: limits and tables sized, hooks and units, and every
 * struct a map holds (buckets, counters, memberships, destinations,
 * leases, events, in-flight slots, per-socket storage), each with its size
 * asserted. Part of kthrottle.h. */
#ifndef KTHROTTLE_ABI_H
#define KTHROTTLE_ABI_H

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
	/* calls on TCP, counted by the egress hook as turns of the
	 * conversation (struct kt_sk_call); a held call waits in the socket */
	KT_UNIT_CALL = 6,
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

/* kt_limit_ext (array, KT_MAX_LIMITS, pinned): what a limit sets that
 * kt_limit_info, a fixed pinned layout, has no room for. Written by the
 * daemon beside kt_limits; read by the sockops program. A zero entry is a
 * limit with none of it. */
struct kt_limit_ext {
	/* unit call: how long a held call may wait, ms; 0 = until admitted.
	 * The sockops program makes it the TCP_USER_TIMEOUT of the limit's
	 * connections (unless the application set a shorter one), so TCP
	 * ends a connection whose call waited that long (ETIMEDOUT) */
	__u32 max_delay_ms;
	__u32 reserved[3]; /* zero */
};
_Static_assert(sizeof(struct kt_limit_ext) == 16, "kt_limit_ext layout");
/* maxDelay's range: 1 s (TCP probes a held call every 500 ms) to 24 h */
#define KT_MAX_DELAY_MS_MIN 1000u
#define KT_MAX_DELAY_MS_MAX (24u * 3600u * 1000u)

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

/* kt_sk_call (socket storage, pinned): per TCP socket of a call limit, where
 * its conversation stands. A call is a turn: the first payload the socket
 * sends after the peer sent it payload (the ack_seq it sends has moved since
 * its last payload), or its first payload. A segment wholly below next_seq
 * is a retransmission; one with the same ack_seq is the rest of a turn. A
 * refused turn start is dropped without touching this state, so TCP's retry
 * of it (same seq, same ack_seq) is decided again. TCP transmits a socket's
 * segments under its lock, so one writer at a time updates it in place.
 * Written by the egress program only. */
struct kt_sk_call {
	__u32 next_seq;  /* seq after the last payload byte passed */
	__u32 last_ack;  /* ack_seq of the turn last passed */
	__u32 turns;     /* turns passed (calls and handshake flights) */
	__u32 flags;     /* KT_SK_CALL_* */
};
#define KT_SK_CALL_SEEN (1u << 0) /* next_seq and last_ack hold a payload's */
/* The last turn was a TLS handshake flight: the next payload starts a
 * turn even if the peer said nothing since (a TLS 1.3 client sends its
 * first request right after its Finished, before the server's tickets) */
#define KT_SK_CALL_HANDSHAKE (1u << 1)
/* Turns whose first byte starts a TLS handshake (0x16) or change-cipher-
 * spec (0x14) record are no calls among a connection's first
 * KT_CALL_HANDSHAKE_TURNS turns: a TLS 1.2 client sends two such flights
 * (ClientHello; key exchange and Finished), a TLS 1.3 client its
 * ClientHello and, in middlebox-compatible mode as OpenSSL and Go send it,
 * change-cipher-spec before its Finished. Later such turns are calls, so a
 * member cannot make its calls free by starting them with those bytes. */
#define KT_CALL_HANDSHAKE_TURNS 2
#define KT_TLS_HANDSHAKE_RECORD 0x16
#define KT_TLS_CCS_RECORD 0x14
_Static_assert(sizeof(struct kt_sk_call) == 16, "kt_sk_call layout");

/* kt_sk_depart (socket storage, pinned): per TCP socket of a call limit
 * that the fq qdisc schedules, the departure time given to its last turn
 * start sent late (EDT) instead of held. No later payload segment of the
 * socket departs before it, so neither the rest of that turn nor a
 * retransmission of it overtakes the turn's start. Written by the egress
 * program only. */
struct kt_sk_depart {
	__u64 not_before_ns; /* CLOCK_MONOTONIC, the clock of skb->tstamp */
};
_Static_assert(sizeof(struct kt_sk_depart) == 8, "kt_sk_depart layout");

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
	struct kt_cls pkt;   /* unit packet, byte or call (the egress hook's limits) */
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

#endif /* KTHROTTLE_ABI_H */
