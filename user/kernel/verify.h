/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Kernel state verified, not believed: the kt_members and kt_limits
 * entries the daemon committed last are compared with the maps on a short
 * cycle, and an entry that differs (a hand edit, a stray writer, a deleted
 * key) is written back, logged with the map, the key and both values, and
 * counted. Bucket rates are held the same way by bucket.h. Entries the
 * daemon did not write are not its to judge. */
#ifndef KT_VERIFY_H
#define KT_VERIFY_H

#include <stdint.h>
#include "kernel/bpf_loader.h"

/* How often the daemon compares (its tick runs the check when due). */
#define KT_VERIFY_EVERY_NS (1000ULL * 1000000ULL)
/* At most this many fix lines per check: the count says the rest. */
#define KT_VERIFY_LOG_MAX 4

struct kt_verify_fixes {
	uint64_t members; /* kt_members entries written back, since start */
	uint64_t limits;  /* kt_limits entries written back */
};

/* After a successful commit: what the maps now hold, by the daemon's own
 * hand (n member entries; the limits' ids and values). Replaces the last
 * record. -ENOMEM keeps none (nothing is checked until the next commit). */
int kt_verify_note_commit(struct kt_bpf *b, const uint64_t *cgroup_ids,
			  const struct kt_member_val *vals, int n, const uint32_t *limit_ids,
			  const struct kt_limit_info *limits, int nl);
/* Compares the record with the maps, writes back what differs, adds to
 * *fixes. Returns the number written back now. */
int kt_verify_maps(struct kt_bpf *b, struct kt_verify_fixes *fixes);
/* Frees the record (kt_bpf_close). */
void kt_verify_free(struct kt_bpf *b);

#endif
