/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The XDP tag buckets (bpf/xdp.bpf.c) from the daemon's side: load and pin
 * the program's maps, attach it to interfaces with pinned links, program
 * the policies, and the exchange's two halves: harvest the hits served here
 * and debit the hits other nodes served. Maps and their contracts are in
 * include/kthrottle.h ("XDP tag maps").
 *
 * Every function returns 0 or a negative errno and logs its failure
 * (kt_err, with strerror). Not thread safe: the daemon's one loop owns the
 * handle. Addresses are struct kt_tag_key's: family 4 or 6, addr in network
 * order (IPv4 in addr[0..3]). */
#ifndef KT_XDP_MAPS_H
#define KT_XDP_MAPS_H

#include <stddef.h>
#include <stdint.h>
#include "kthrottle.h"

struct kt_xdp_tags;

/* Opens and loads bpf/xdp.bpf.c with kt_tag_buckets sized max_tags (>= 1)
 * and the notification ring sized from it, pinning the maps by name in
 * pin_dir (made if absent; on bpffs). Maps already pinned there are
 * reused, so a restarted daemon keeps the buckets, policies and links (a
 * pinned kt_tag_buckets of another size fails the load: -EINVAL, with
 * libbpf's reason at debug level). *out is freed with kt_xdp_tags_close. */
int kt_xdp_tags_open(const char *pin_dir, uint32_t max_tags, struct kt_xdp_tags **out);
/* Frees the handle; pins (maps, links) stay and enforcement goes on. NULL ok. */
void kt_xdp_tags_close(struct kt_xdp_tags *t);

/* The XDP program's fd, for tests and benchmarks (BPF_PROG_TEST_RUN). */
int kt_xdp_tags_prog_fd(const struct kt_xdp_tags *t);

/* Attaches the program to ifindex (native XDP if the driver has it, else
 * generic) through a bpf_link pinned as <pin_dir>/kt_xdp_link_<ifindex>, so
 * it outlives the daemon. An existing pin is kept and switched to this
 * handle's program in place (no gap). The interface also needs an entry
 * (kt_xdp_tags_set_iface) to be charged. */
int kt_xdp_tags_attach(struct kt_xdp_tags *t, int ifindex);
/* Detaches the program from ifindex and removes the pin; -ENOENT if this
 * pin dir has no link for it. */
int kt_xdp_tags_detach(struct kt_xdp_tags *t, int ifindex);

/* ifindex's ingress is charged to tag limit `tag_limit`, sources masked to
 * prefix_v4 (0..32) / prefix_v6 (0..128) bits. -EINVAL otherwise. */
int kt_xdp_tags_set_iface(struct kt_xdp_tags *t, int ifindex, uint32_t tag_limit,
			  uint8_t prefix_v4, uint8_t prefix_v6);
/* ifindex passes everything again (its buckets stay until the LRU evicts
 * them). -ENOENT if it had no entry. */
int kt_xdp_tags_del_iface(struct kt_xdp_tags *t, int ifindex);

/* The default policy of tag limit `tag_limit` (< KT_MAX_TAG_LIMITS): rate in
 * tokens/s (> 0), burst (>= 1). Only new buckets see it; a reload rewrites
 * the existing ones with kt_xdp_tags_set_buckets. */
int kt_xdp_tags_set_limit(struct kt_xdp_tags *t, uint32_t tag_limit, double rate, uint64_t burst);
/* The limit is not in use: its new sources pass and are not counted. */
int kt_xdp_tags_clear_limit(struct kt_xdp_tags *t, uint32_t tag_limit);
/* A rule for sources of `tag_limit` in family/addr/prefix_len (addr bytes
 * past prefix_len are ignored): allow (passes, not counted: rate and burst
 * ignored) or its own rate and burst. It applies to buckets whose prefix
 * (the interface's prefix length) lies inside the rule's CIDR. */
int kt_xdp_tags_set_rule(struct kt_xdp_tags *t, uint32_t tag_limit, uint8_t family,
			 const uint8_t addr[16], uint8_t prefix_len, int allow, double rate,
			 uint64_t burst);
int kt_xdp_tags_del_rule(struct kt_xdp_tags *t, uint32_t tag_limit, uint8_t family,
			 const uint8_t addr[16], uint8_t prefix_len);
/* The policy a new bucket for `key` gets (rule, then limit default), as the
 * program computes it: 0 and *out, or -ENOENT when the limit is not in use. */
int kt_xdp_tags_policy_of(struct kt_xdp_tags *t, const struct kt_tag_key *key,
			  struct kt_tag_policy *out);
/* A reload: every existing bucket of tag_limit (all limits: UINT32_MAX) is
 * given the policy a new one would get now, in place, its debt rescaled to
 * the same tokens at the new rate. Scans the whole map. Returns the number
 * of buckets rewritten, or a negative errno. */
int kt_xdp_tags_set_buckets(struct kt_xdp_tags *t, uint32_t tag_limit);

/* Hands each bucket that admitted packets since the last harvest to `fn`
 * with its hit count, zeroing the count atomically (a packet admitted
 * meanwhile counts in the next harvest, never in both and never lost).
 * Costs the number of such buckets (the notification ring); after lost
 * notifications (a full ring) it scans the whole map once. Returns the
 * number of buckets handed over, or a negative errno. */
typedef void (*kt_xdp_tags_hit_fn)(void *ctx, const struct kt_tag_key *key, uint64_t hits);
int kt_xdp_tags_harvest(struct kt_xdp_tags *t, kt_xdp_tags_hit_fn fn, void *ctx);

/* Remote hits: hits[i] tokens taken from keys[i]'s bucket now, below zero
 * if need be (kt_tag_debit). An absent bucket is made full with its policy
 * first; keys of a limit not in use and allowlisted buckets are skipped.
 * Remote hits are never harvested back. Returns the number of keys whose
 * bucket was found or made (allowlisted ones included, though not debited),
 * or a negative errno. */
int kt_xdp_tags_debit(struct kt_xdp_tags *t, const struct kt_tag_key *keys, const uint64_t *hits,
		      size_t n);

struct kt_xdp_tags_stats {
	uint64_t buckets;   /* in kt_tag_buckets for this limit (allowlisted ones too) */
	uint64_t admitted;  /* totals of those buckets (evicted ones are gone) */
	uint64_t dropped;
};
/* Sums over the buckets of tag_limit (scans the map). */
int kt_xdp_tags_stats(struct kt_xdp_tags *t, uint32_t tag_limit, struct kt_xdp_tags_stats *out);
/* kt_xdp_stats: lost notifications, malformed drops, buckets not made. */
int kt_xdp_tags_global_stats(struct kt_xdp_tags *t, struct kt_xdp_stats *out);

#endif
