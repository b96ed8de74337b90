/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The heartbeat memo: per limit, what this node sent in its last answered
 * heartbeat (a digest of its members, their reported sizes, stale, hold and
 * fallback rate) and the answer it got. A heartbeat whose request has the
 * same digest sends that answer as `prev`, and the script's steady path
 * (user/store/lua/heartbeat.lua) may reply "prev still holds" after only
 * renewing the members: about 4 Redis commands a limit instead of ~18.
 * The memo is only a hint: the script checks it against the pool (the
 * answer the last full call wrote, each member still live) and takes the
 * full path on any doubt, so a stale or lost memo costs a full call, never
 * a wrong answer. Not thread-safe: one per kt_store. */
#ifndef KT_HBMEMO_H
#define KT_HBMEMO_H

#include <stdint.h>
#include "store/store.h"

struct kt_hbmemo;

/* NULL on allocation failure (the caller then runs without a memo). */
struct kt_hbmemo *kt_hbmemo_new(void);
void kt_hbmemo_free(struct kt_hbmemo *m);
/* What the steady path depends on in q; 0 never (reserved for "none"). */
uint64_t kt_hbmemo_digest(const struct kt_pool_req *q);
/* 1 and *ans (agree, size, live, reserved) when limit's last answered
 * heartbeat had this digest, else 0. */
int kt_hbmemo_get(const struct kt_hbmemo *m, const char *limit, uint64_t digest,
		  struct kt_pool_answer *ans);
/* Everything the memo holds of limit, in one lookup (a heartbeat asks for
 * every limit at every heartbeat). */
struct kt_hbmemo_hit {
	int has;          /* kt_hbmemo_get's answer, into ans */
	struct kt_pool_answer ans;
	uint64_t at_ns;   /* with has: kt_clock_ns() when it was recorded */
	int joined;       /* answered once (since the table was last emptied), however
			   * its calls went since; 1 without a memo: nothing to hold back for */
	int confirmed;    /* its answer came from its last call (set, not doubted) */
	uint64_t asof_ms; /* whatever the digest: the Redis TIME its last answer was
			   * computed at (kt_hbmemo_set's; 0 unknown) */
};
void kt_hbmemo_lookup(const struct kt_hbmemo *m, const char *limit, uint64_t digest,
		      struct kt_hbmemo_hit *hit);
/* Records an answered heartbeat; 0, or -ENOMEM (the limit is then forgotten).
 * digest 0 records the limit as joined with no answer to repeat (one the
 * steady path never takes: a demand or in-flight limit). asof_ms: the
 * Redis TIME the answer was computed at (0 unknown): a change the inbox
 * names from before it is no news (leases: node). */
int kt_hbmemo_set(struct kt_hbmemo *m, const char *limit, uint64_t digest,
		  const struct kt_pool_answer *ans, uint64_t asof_ms);
/* The limit's next heartbeat takes the full path (a failed call, a leave).
 * It stays joined. */
void kt_hbmemo_forget(struct kt_hbmemo *m, const char *limit);
/* The limit's last call failed: its answer stays the steady path's hint
 * (the script checks it, and the call may have run), but it is no longer
 * one this node may repeat without asking (leases: node, "quiet"). */
void kt_hbmemo_doubt(struct kt_hbmemo *m, const char *limit);
/* The limit's members lapsed with this node's lease (leases: node): it is
 * no longer joined, so its next heartbeats send it within the join budget,
 * and its answer is doubted (still the steady path's hint). */
void kt_hbmemo_rejoin(struct kt_hbmemo *m, const char *limit);
/* Entries held (limits seen since the last reset). */
int kt_hbmemo_count(const struct kt_hbmemo *m);

#endif
