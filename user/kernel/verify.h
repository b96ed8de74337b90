/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Kernel state verified, not believed: what the daemon committed last to
 * the maps that decide who is limited and by what (kt_members, kt_limits,
 * kt_limit_ext, kt_dests, kt_ports, kt_idle_hooks, each bucket's flags, limit and kt_up
 * link, and kt_gen) is compared with the maps on a short cycle. An entry
 * that differs (a hand edit, a stray writer, a deleted key, a key added)
 * is written back, logged with the map, the key and both values, and
 * counted. Bucket rates and leases are held per tick by bucket.h. Maps
 * the programs write (tat, counters, kt_anc_cache, socket storage) are
 * theirs: a change there can only refuse more, or cost one burst. */
#ifndef KT_VERIFY_H
#define KT_VERIFY_H

#include <stdbool.h>
#include <stdint.h>
#include "kernel/bpf_loader.h"
#include "kernel/classify.h"

/* How often the daemon compares (its tick runs the check when due). */
#define KT_VERIFY_EVERY_NS (1000ULL * 1000000ULL)
/* At most this many fix lines per check: the count says the rest. */
#define KT_VERIFY_LOG_MAX 4

/* The maps checked, in the order status and metrics list them. */
enum kt_verify_map {
	KT_VERIFY_MEMBERS,
	KT_VERIFY_LIMITS,
	KT_VERIFY_LIMIT_EXT,
	KT_VERIFY_DESTS,
	KT_VERIFY_PORTS,
	KT_VERIFY_IDLE_HOOKS,
	KT_VERIFY_BUCKETS, /* a bucket's flags or limit id */
	KT_VERIFY_UP,
	KT_VERIFY_GEN,
	KT_VERIFY_MAPS
};
/* "kt_members", ...: the map's pinned name. */
const char *kt_verify_map_name(enum kt_verify_map m);

struct kt_verify_fixes {
	uint64_t n[KT_VERIFY_MAPS]; /* entries written back, since start */
};
uint64_t kt_verify_fixes_total(const struct kt_verify_fixes *f);

/* What one successful commit left in the maps, by the daemon's own hand. */
struct kt_verify_commit {
	const uint64_t *cgroup_ids; /* kt_members: n keys and their values */
	const struct kt_member_val *vals;
	int n;
	const uint32_t *limit_ids; /* kt_limits: nl ids and their values */
	const struct kt_limit_info *limits;
	const struct kt_limit_ext *exts; /* kt_limit_ext: the same nl ids' */
	int nl;
	const struct kt_dest_entry *dests; /* the whole of kt_dests */
	int nd;
	const struct kt_port_filter *ports; /* KT_HOOK_COUNT filters */
	bool has_idle;                      /* kt_idle_hooks exists (not in older pin dirs) */
	uint32_t idle;
	/* buckets whose flags, limit id and kt_up link are read back now
	 * (kt_buckets slots only: kt_coop entries have flags of their own) */
	const uint32_t *slots;
	int ns;
};

/* After a successful commit: records c. Replaces the last record.
 * -ENOMEM keeps none (nothing is checked until the next commit). */
int kt_verify_note_commit(struct kt_bpf *b, const struct kt_verify_commit *c);
/* Compares the record with the maps, writes back what differs, adds to
 * *fixes. Returns the number written back now. */
int kt_verify_maps(struct kt_bpf *b, struct kt_verify_fixes *fixes);
/* Frees the record (kt_bpf_close). */
void kt_verify_free(struct kt_bpf *b);

#endif
