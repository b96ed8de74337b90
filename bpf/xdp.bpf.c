/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Tag limits at XDP: a leaky bucket per source prefix on an
 * interface's ingress, and the daemon's operations on those buckets.
 *
 * kt_xdp_tags: Ethernet (one 802.1Q/802.1ad tag at most), the IPv4 or IPv6
 * source masked to the interface's prefix length is the tag. A frame that
 * is not IP passes; an IP frame whose header is cut short is dropped (a
 * header that cannot be parsed is charged, not passed). One LRU hash lookup
 * per packet once the bucket exists: the bucket carries its policy; the
 * interface's config is an array slot (kt_xdp_ifslot) for ifindex <
 * KT_XDP_IFSLOTS, a hash lookup (kt_xdp_ifaces) only above.
 *
 * kt_tag_run_ops: the daemon's batch of harvest / debit / set operations
 * (struct kt_tag_op in kt_tag_ops), run by BPF_PROG_TEST_RUN. Userspace
 * cannot do atomic operations on hash map values; this program does them
 * in place. It is SEC("syscall") (sleepable, run with no packet): on this
 * kernel (6.18) a sleepable program may use array, hash, LRU hash and ring
 * buffer maps, but one that references the LPM trie is refused at load
 * ("Sleepable programs can only use array, hash, ringbuf and local storage
 * maps"). So it never reads kt_tag_rules: a debit whose bucket is absent
 * answers KT_TAG_OP_ABSENT, and the daemon sends it again with the policy
 * it looked up itself (KT_TAG_OP_MAKE), see struct kt_tag_op.
 *
 * The maps are described in include/kthrottle.h ("XDP tag maps"). This
 * object does not include kthrottle.bpf.h: it shares no map with the cgroup
 * programs, and loads on its own (user/tags/xdp_maps.c). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "kthrottle.h"
#include "lib/net.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";


struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KT_MAX_XDP_IFACES);
	__type(key, __u32);
	__type(value, struct kt_xdp_iface);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_xdp_ifaces SEC(".maps");

/* kt_xdp_ifaces by index for ifindex < KT_XDP_IFSLOTS: no hash per packet */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, KT_XDP_IFSLOTS);
	__type(key, __u32);
	__type(value, struct kt_xdp_iface);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_xdp_ifslot SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, KT_MAX_TAG_LIMITS);
	__type(key, __u32);
	__type(value, struct kt_tag_policy);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_tag_policy SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, KT_MAX_TAG_RULES);
	__type(key, struct kt_tag_rule_key);
	__type(value, struct kt_tag_policy);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_tag_rules SEC(".maps");

/* max_entries: maxTags, set by userspace before load */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct kt_tag_key);
	__type(value, struct kt_tag_bucket);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_tag_buckets SEC(".maps");

/* max_entries: sized by userspace from maxTags before load */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_tag_notify SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kt_xdp_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_xdp_stats SEC(".maps");

/* Per loaded object, not pinned: the batch of the process that loaded it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, KT_TAG_OPS_BATCH);
	__type(key, __u32);
	__type(value, struct kt_tag_op);
} kt_tag_ops SEC(".maps");

/* The tag buckets' clock: the kernel's coarse monotonic clock, read from
 * the last tick (CLOCK_MONOTONIC_COARSE; 4 ms steps at HZ=250). A precise
 * read costs about 37 ns here, most of the decision; a tag's count is only
 * kept to a report interval (500 ms and more) across nodes, and a bucket on
 * a clock that lags by up to a tick admits at most rate x tick more in any
 * window. The programs here are the only readers and writers of these
 * buckets' tat, so all of them use this clock (kt_tag_run_ops gets it from
 * the daemon, struct kt_tag_ops_ctx). */
static __always_inline __u64 kt_xdp_now(void)
{
	return bpf_ktime_get_coarse_ns();
}

static __always_inline struct kt_xdp_stats *kt_stats(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&kt_xdp_stats, &zero);
}

/* The policy a new bucket for `key` copies: the most specific rule covering
 * its prefix, else the limit's default. 0 when the limit is not in use. */
static __always_inline int kt_tag_policy_for(const struct kt_tag_key *key,
					     struct kt_tag_policy *out)
{
	struct kt_tag_rule_key rk;
	struct kt_tag_policy *p;
	__u32 lim = key->tag_limit;

	rk.prefixlen = KT_TAG_RULE_BITS + key->prefix_len;
	rk.tag_limit = key->tag_limit;
	rk.family = key->family;
	rk.pad[0] = rk.pad[1] = rk.pad[2] = 0;
	__builtin_memcpy(rk.addr, key->addr, sizeof(rk.addr));
	p = bpf_map_lookup_elem(&kt_tag_policy, &lim);
	if (!p || !(p->flags & KT_TAG_POLICY_IN_USE))
		return 0;
	*out = *p;
	p = bpf_map_lookup_elem(&kt_tag_rules, &rk);
	if (p) {
		out->interval_fp = p->interval_fp;
		out->burst = p->burst;
		out->flags = p->flags;
	}
	return 1;
}

/* A full bucket for `key` with policy `pol`, made if absent (another CPU
 * may make it first: either way the one in the map is returned). NULL when
 * the map cannot take it. */
static __always_inline struct kt_tag_bucket *kt_tag_bucket_make(const struct kt_tag_key *key,
								 const struct kt_tag_policy *pol)
{
	struct kt_tag_bucket nb = {
		.tat = 0, /* full: tat at or before now */
		.interval_fp = pol->interval_fp,
		.burst = pol->burst,
		.flags = pol->flags & KT_TAG_ALLOW,
	};

	bpf_map_update_elem(&kt_tag_buckets, key, &nb, BPF_NOEXIST);
	return bpf_map_lookup_elem(&kt_tag_buckets, key);
}

/* Source address masked to `bits` (of 32 per word; words in network order). */
static __always_inline __u32 kt_mask_word(__u32 w, int bits)
{
	if (bits >= 32)
		return w;
	if (bits <= 0)
		return 0;
	return w & bpf_htonl(~0u << (32 - bits));
}

/* Two 32-bit words as the 64 bits that hold them in this order in memory. */
static __always_inline __u64 kt_pair(__u32 first, __u32 second)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return first | (__u64)second << 32;
#else
	return (__u64)first << 32 | second;
#endif
}

/* The bytes b0, b1, 0, 0 in memory, as a 32-bit word (kt_tag_key's family,
 * prefix_len, pad). */
static __always_inline __u32 kt_bytes2(__u8 b0, __u8 b1)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return b0 | (__u32)b1 << 8;
#else
	return (__u32)b0 << 24 | (__u32)b1 << 16;
#endif
}
_Static_assert(__builtin_offsetof(struct kt_tag_key, family) == 4 &&
	       __builtin_offsetof(struct kt_tag_key, addr) == 8, "kt_tag_key words");

SEC("xdp")
int kt_xdp_tags(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct kt_xdp_iface *ifc, cfg;
	struct kt_tag_bucket *b;
	struct kt_xdp_stats *st;
	union {
		struct kt_tag_key k;
		__u64 q[3];
	} key;
	__u32 ifindex = ctx->ingress_ifindex;
	__u64 now, wait_ns, raw;
	__u16 proto;
	void *l3;

	if ((void *)(eth + 1) > data_end)
		return XDP_PASS; /* not even Ethernet: nothing to charge */
	proto = eth->h_proto;
	l3 = eth + 1;
	if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD)) {
		struct vlan_hdr *vh = l3;

		if ((void *)(vh + 1) > data_end)
			return XDP_PASS;
		proto = vh->h_vlan_encapsulated_proto;
		l3 = vh + 1;
	}
	if (proto != bpf_htons(ETH_P_IP) && proto != bpf_htons(ETH_P_IPV6))
		return XDP_PASS;
	if (ifindex < KT_XDP_IFSLOTS) {
		ifc = bpf_map_lookup_elem(&kt_xdp_ifslot, &ifindex);
		if (!ifc)
			return XDP_PASS;
		/* one load: the daemon rewrites a slot in place, never torn */
		raw = KT_READ_ONCE(*(__u64 *)ifc);
		__builtin_memcpy(&cfg, &raw, sizeof(cfg));
		if (!(cfg.flags & KT_XDP_IFACE_SET))
			return XDP_PASS;
	} else {
		ifc = bpf_map_lookup_elem(&kt_xdp_ifaces, &ifindex);
		if (!ifc)
			return XDP_PASS;
		cfg = *ifc;
	}

	/* the key in three 64-bit stores, the words the hash then reads */
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = l3;
		int bits = cfg.prefix_v4 > KT_IPV4_BITS ? KT_IPV4_BITS : cfg.prefix_v4;

		if ((void *)(ip + 1) > data_end)
			goto malformed;
		key.q[0] = kt_pair(cfg.tag_limit, kt_bytes2(4, bits));
		key.q[1] = kt_pair(kt_mask_word(ip->saddr, bits), 0);
		key.q[2] = 0;
	} else {
		struct ipv6hdr *ip6 = l3;
		int bits = cfg.prefix_v6 > KT_IPV6_BITS ? KT_IPV6_BITS : cfg.prefix_v6;
		__u32 *s;

		if ((void *)(ip6 + 1) > data_end)
			goto malformed;
		s = (__u32 *)&ip6->saddr;
		key.q[0] = kt_pair(cfg.tag_limit, kt_bytes2(6, bits));
		key.q[1] = kt_pair(kt_mask_word(s[0], bits), kt_mask_word(s[1], bits - 32));
		key.q[2] = kt_pair(kt_mask_word(s[2], bits - 64), kt_mask_word(s[3], bits - 96));
	}

	b = bpf_map_lookup_elem(&kt_tag_buckets, &key);
	if (!b) {
		struct kt_tag_policy pol;

		if (!kt_tag_policy_for(&key.k, &pol))
			return XDP_PASS; /* the limit is not in use */
		b = kt_tag_bucket_make(&key.k, &pol);
		if (!b) {
			st = kt_stats();
			if (st)
				__sync_fetch_and_add(&st->no_bucket, 1);
			return XDP_PASS;
		}
	}
	if (b->flags & KT_TAG_ALLOW)
		return XDP_PASS;
	now = kt_xdp_now();
	if (kt_tag_take(&b->tat, now, b->interval_fp, b->burst, &wait_ns) != KT_ADMIT) {
		__sync_fetch_and_add(&b->dropped, 1);
		return XDP_DROP;
	}
	b->last_seen = now;
	/* the one counter an admission adds to (admitted is hits harvested,
	 * added by KT_TAG_OP_HARVEST); the first admission since the last
	 * harvest tells the daemon the key */
	if (__sync_fetch_and_add(&b->hits, 1) == 0 &&
	    bpf_ringbuf_output(&kt_tag_notify, &key.k, sizeof(key.k), 0) < 0) {
		st = kt_stats();
		if (st)
			__sync_fetch_and_add(&st->notify_lost, 1);
	}
	return XDP_PASS;

malformed:
	st = kt_stats();
	if (st)
		__sync_fetch_and_add(&st->malformed, 1);
	return XDP_DROP;
}

/* ---- the daemon's bucket operations ---- */

static __always_inline void kt_op_set(struct kt_tag_op *op, struct kt_tag_bucket *b, __u64 now)
{
	__u64 old_fp = b->interval_fp;
	int i;

	if (old_fp && op->interval_fp && old_fp != op->interval_fp) {
		for (i = 0; i < KT_CAS_RETRIES; i++) {
			__u64 tat = KT_READ_ONCE(b->tat);
			__u64 ahead;

			if ((__s64)(tat - now) <= 0)
				break; /* full: nothing queued to rescale */
			ahead = kt_tag_rescale_ahead(tat - now, old_fp, op->interval_fp);
			if (__sync_val_compare_and_swap(&b->tat, tat, now + ahead) == tat)
				break;
		}
	}
	b->interval_fp = op->interval_fp;
	b->burst = op->burst;
	b->flags = op->flags & KT_TAG_ALLOW;
}

struct kt_ops_run {
	__u32 done;
	__u64 now;
};

static long kt_op_one(__u32 i, void *arg)
{
	struct kt_ops_run *run = arg;
	struct kt_tag_policy pol;
	struct kt_tag_bucket *b;
	struct kt_tag_op *op;
	__u64 now;

	op = bpf_map_lookup_elem(&kt_tag_ops, &i);
	if (!op)
		return 1;
	run->done = i + 1;
	now = run->now;
	b = bpf_map_lookup_elem(&kt_tag_buckets, &op->key);
	op->result = KT_TAG_OP_DONE;
	switch (op->op) {
	case KT_TAG_OP_HARVEST:
		op->hits = b ? __sync_lock_test_and_set(&b->hits, 0) : 0;
		if (!b)
			op->result = KT_TAG_OP_ABSENT;
		else if (op->hits)
			__sync_fetch_and_add(&b->admitted, op->hits); /* the total moves, kept */
		break;
	case KT_TAG_OP_DEBIT:
		if (!b) {
			if (!(op->flags & KT_TAG_OP_MAKE)) {
				op->result = KT_TAG_OP_ABSENT;
				break;
			}
			pol.interval_fp = op->interval_fp;
			pol.burst = op->burst;
			pol.flags = op->flags;
			b = kt_tag_bucket_make(&op->key, &pol);
			if (!b) {
				op->result = KT_TAG_OP_FAILED;
				break;
			}
		}
		if (!(b->flags & KT_TAG_ALLOW))
			kt_tag_debit(&b->tat, now, b->interval_fp, op->hits);
		break;
	case KT_TAG_OP_SET:
		if (b)
			kt_op_set(op, b, now);
		else
			op->result = KT_TAG_OP_ABSENT;
		break;
	default:
		op->result = KT_TAG_OP_FAILED;
		break;
	}
	return 0;
}

SEC("syscall")
int kt_tag_run_ops(struct kt_tag_ops_ctx *ctx)
{
	__u32 n = ctx->count;
	/* this program type may not read the coarse clock: the caller gives
	 * it; else the precise monotonic clock, the same clock up to a tick
	 * further on (a debit lands at most a tick later than the packets') */
	struct kt_ops_run run = { .now = ctx->now_ns ? ctx->now_ns : bpf_ktime_get_ns() };

	if (n > KT_TAG_OPS_BATCH)
		n = KT_TAG_OPS_BATCH;
	bpf_loop(n, kt_op_one, &run, 0);
	ctx->done = run.done;
	return 0;
}
