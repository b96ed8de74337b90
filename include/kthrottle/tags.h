/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Tag limits: the tag buckets' arithmetic and the XDP tag maps' ABI (keys,
 * buckets, interfaces, policies, rules, statistics, the ops the daemon
 * runs in the kernel). Part of kthrottle.h. */
#ifndef KTHROTTLE_TAGS_H
#define KTHROTTLE_TAGS_H

#include "kthrottle/gcra.h"

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

#endif /* KTHROTTLE_TAGS_H */
