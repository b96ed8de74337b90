/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Pool membership and agreement for every limit (the distributed pool).
 *
 * The daemon owns one struct kt_pool built from the config. Every controller
 * tick it calls kt_pool_tick(); when a heartbeat is due the pool hands one
 * store round trip per distinct store (all limits on that store in one
 * request) to that store's worker thread, and updates each limit's view
 * when the answer comes back (kt_pool_poll). The daemon then asks
 * kt_pool_bucket_rate() what to write into each bucket. Nothing here is on
 * the request path: the kernel decides with whatever rate was last written.
 *
 * Store kinds:
 *   local   size = this node's members; always agreed.
 *   static  size = max(poolSize, this node's members); always agreed.
 *   redis   the consensus through kt_store_heartbeat_many (store.h).
 */
#ifndef KT_POOL_H
#define KT_POOL_H

#include <stdbool.h>
#include <stdint.h>
#include "base/config.h"
#include "kthrottle.h"
#include "pool/policy.h"
#include "store/store.h"

enum kt_pool_phase {
	KT_POOL_AGREED = 0,   /* last answer AGREE (or local/static) */
	KT_POOL_DISAGREED,    /* last answer DISAGREE: act on the larger size */
	KT_POOL_JOINING,      /* no AGREE seen since start: run at min / size */
	KT_POOL_STORE_LOST,   /* the lease ran out: onStoreFailure applies */
};

/* What the daemon tells the pool about one limit each tick. */
struct kt_pool_local {
	const struct kt_limit_cfg *cfg;
	const char *const *member_ids; /* stable ids of this node's members */
	const double *member_demand;   /* share: demand: admitted + refused per second, each; NULL: 0 */
	const double *member_weight;   /* share: demand with weightBy: each one's weight; NULL: 1 */
	const int *member_class;       /* ... with classBy: each one's class; NULL: 0 */
	int n_members;
	double pool_rate;              /* current ramp level, saved for resumedRampUp */
	/* in-flight limits (unit concurrent) on Redis: what this node may
	 * hold now (its open connections or its slots in force, the larger)
	 * and its slots in force; read from the kernel each tick */
	int64_t slots_held;
	int64_t slots_in_force;
	int64_t slots_demand;          /* share: demand: open plus refusals of the last second */
	/* ... per priority class (classBy: n_slot_classes of them, else 0) */
	int n_slot_classes;
	int64_t slots_class_demand[KT_STORE_MAX_CLASSES];
};

/* The pool's view of one limit. */
struct kt_pool_view {
	enum kt_pool_phase phase;
	int size;                  /* members sharing the pool; 0 = unknown (no answer, nothing adopted) */
	int live;                  /* live members seen by the store (redis), else size */
	bool agree;                /* last answer */
	uint64_t last_answer_ns;   /* kt clock of the last store answer, 0 never */
	uint64_t last_answer_sent_ns; /* when the heartbeat it answered was sent: the store
				       * was up then, whenever the answer came */
	uint64_t phase_since_ns;
	/* Redis only: the lease granted by the last answer, on the kt clock:
	 * from when the heartbeat was sent plus min(staleAfter x heartbeat,
	 * validFor), never later than the store stops counting this node. */
	uint64_t lease_until_ns;
	uint64_t fallback_until_ns; /* the fallback ends (0 = never: open) */
	double reserved;           /* fallback rates of lapsed members, held for them */
	double fallback_member;    /* per-member fallback rate the store was told */
	bool closed;               /* past fallback_until too: nothing admitted */
	/* Store trust: the last answer's size was above maxMembers (that size,
	 * 0 none). It is acted on (fail closed: shares only shrink), not capped. */
	int over_max;
	int max_members;           /* maxMembers, 0 unset */
	/* In-flight limits on Redis: the whole slots this node was granted by
	 * the last answer (-1: none yet) and the other nodes' claims then. */
	int64_t slots_grant;
	int64_t slots_claimed;
	/* ... with classes: this node's part of the slots per class, to split
	 * slots_grant between its members by class (slots_classes 0: none) */
	int slots_classes;
	double slots_class_part[KT_STORE_MAX_CLASSES];
	/* share: demand on Redis, from the last answer (0s before one): the
	 * rate divided (the pool rate less what lapsed members hold) and the
	 * weights of the members sharing summed: a member's guaranteed part
	 * is share_divided x weight / share_weights, and what it runs at
	 * above that it borrows from members that want less. */
	double share_divided;
	double share_weights;
	/* with priority classes (or a parent's children as peers), per class:
	 * the part of share_divided it was given and its members' weights
	 * summed, so a member's guaranteed part is its class's part x weight /
	 * the class's weights (share_classes 0: none) */
	int share_classes;
	double share_class_part[KT_STORE_MAX_CLASSES];
	double share_class_weights[KT_STORE_MAX_CLASSES];
};

struct kt_pool;

/* n limits, index-aligned with cfg->limits. node: this node's name. Does not
 * block on any store (connections are lazy). */
int kt_pool_create(struct kt_pool **out, const struct kt_config *cfg, char *err, size_t errlen);
/* Heartbeats when due (per store every store.heartbeat), applies answers and
 * validity deadlines. `local` is index-aligned with the config's limits. */
void kt_pool_tick(struct kt_pool *p, uint64_t now_ns, const struct kt_pool_local *local, int n);
/* Store I/O never runs on the caller's thread: each store has a worker
 * (storeq.h) and kt_pool_tick only hands it a heartbeat when one is due (and
 * none is in flight). The answer is applied by the next kt_pool_poll, called
 * when kt_pool_fd is readable and at the start of every kt_pool_tick; the
 * lease counts from when the heartbeat was handed over.
 * kt_pool_fd: an eventfd, -1 when no limit is on Redis.
 * kt_pool_poll: applies every finished round trip; true if any view changed
 * (the caller then recomputes the bucket policies).
 * kt_pool_wait: blocks until no round trip is in flight (at most timeout_ns
 * per store), then polls: for tests, tools and the stop path, never the loop. */
int kt_pool_fd(const struct kt_pool *p);
bool kt_pool_poll(struct kt_pool *p, uint64_t now_ns);
bool kt_pool_wait(struct kt_pool *p, uint64_t now_ns, uint64_t timeout_ns);

/* This node's members, before any policy is computed from a new pool (start,
 * reload): local and static sizes follow at once, so no bucket is ever
 * written with a size that does not count its siblings. No store I/O. */
void kt_pool_members(struct kt_pool *p, const struct kt_pool_local *local, int n);
const struct kt_pool_view *kt_pool_view(const struct kt_pool *p, int limit_idx);

/* Rate of one bucket serving `served` members of limit i, where avail =
 * pool_rate - reserved (the fallback of lapsed members), never below 0:
 *   AGREED/DISAGREED: avail * served / size
 *   JOINING:          min(avail, rateLimit.min) * served / size
 *   STORE_LOST:       the fallback the store holds for us (told with the
 *                     last answered heartbeat): conservative: rateLimit.min
 *                     * served / last size; open: the last share; closed:
 *                     0; and 0 once fallbackFor ran out too.
 *   size unknown:     0 (no answer yet, nothing adopted, no maxMembers).
 * Pure function of the view and config. */
double kt_pool_bucket_rate(const struct kt_pool *p, int limit_idx, double pool_rate, int served);

/* Everything one bucket serving `served` members may admit: the share, the
 * burst (burst * served / size, at least 1), and the lease the kernel
 * enforces by itself (valid_until, fallback rate, fallback_until). The one
 * place a limit's policy is decided. */
void kt_pool_bucket_policy(const struct kt_pool *p, int limit_idx, double pool_rate, int served,
			   struct kt_bucket_policy *out);

/* The policy of one bucket serving the members `ids` (pod scope: one; node
 * scope: all of this node's). equal: kt_pool_bucket_policy with served = n.
 * share: demand: the sum of each member's grant from the last answer (the
 * store divides the pool max-min fairly by reported demand and lets a grant
 * grow only into headroom already free, so the grants never sum past the
 * pool rate); a member not answered for yet runs at the floor (a tenth of an
 * equal share, no more than an equal joiner); the burst follows the rate;
 * past the lease the fallback as in equal. */
void kt_pool_members_policy(const struct kt_pool *p, int i, double pool_rate, const char *const *ids,
			    int n, struct kt_bucket_policy *out);

/* Handover: a daemon that starts before its first store answer continues
 * the lease the previous one left pinned (size, lease, reserve), instead of
 * guessing the size. Not believed beyond what the pinned buckets vouch
 * for: until the first answer no member runs above member_rate, the
 * largest rate they ran at (kt_bpf_limit_member_rate; < 0: unknown, no
 * cap). The lease never runs longer than this config grants from now.
 * Ignored once an answer came, or for local/static. */
void kt_pool_adopt(struct kt_pool *p, int limit_idx, const struct kt_lease *pinned,
		   double member_rate, uint64_t now);
/* In-flight limits on Redis: before the first store answer a restarted
 * daemon runs on the slots its node bucket still holds (kt_bpf_limit_slots;
 * < 0: none), as it continues a pinned lease; the size floor then caps the
 * first grants at it. Ignored once an answer came, or for other limits. */
void kt_pool_adopt_slots(struct kt_pool *p, int limit_idx, int64_t slots);
/* The state to pin for limit i (redis: after every answer). False when
 * there is nothing to pin (local/static, or no answer and nothing adopted). */
bool kt_pool_lease(const struct kt_pool *p, int limit_idx, struct kt_lease *out);

/* resumedRampUp: the saved ramp level found in the store for limit i, once
 * (returns true and fills *rate the first time it is available, then false). */
bool kt_pool_take_resume(struct kt_pool *p, int limit_idx, double *rate);

/* Stop: save ramp levels (resumedRampUp), one round trip per store, bounded
 * by the store timeouts. With `deregister` (the programs are being
 * detached) also remove every local member from the pool at once; without
 * it the members stay, and their lease runs out in the kernel unless the
 * next daemon renews it (a rolling restart changes nothing). */
void kt_pool_leave(struct kt_pool *p, const struct kt_pool_local *local, int n, bool deregister);
void kt_pool_destroy(struct kt_pool *p);

/* Store state for status: "none" (local/static), "idle", "up", "down";
 * since_ns: when that state began; endpoint "host:port" or "". */
const char *kt_pool_store_state(const struct kt_pool *p, int limit_idx, uint64_t *since_ns,
				char *endpoint, size_t len);
struct kt_store_errors;
/* The errors of limit i's store (kind NONE for local/static). */
void kt_pool_store_errors(const struct kt_pool *p, int limit_idx, struct kt_store_errors *out);
/* Limit i's store latency and the timeouts in force (zeroed without a
 * Redis store). */
void kt_pool_store_latency(const struct kt_pool *p, int i, struct kt_store_latency *out);
/* The stores' work, summed over the pool's stores since the daemon started
 * (a store handed over by a reload keeps counting, one closed by it is
 * kept): limits their heartbeats answered by the script's steady path and
 * in full, or not sent (leases: node), round trips, the heartbeat scripts
 * sent and the Redis commands they ran, the bytes of commands and replies,
 * and the inbox's news (limits named, postponed, heartbeats that sent all). */
struct kt_pool_work {
	uint64_t steady, full, quiet; /* quiet: leases: node, not sent */
	uint64_t deferred;            /* left for a later heartbeat by the join budget */
	uint64_t postponed;           /* news answered as before, sent later: the news budget */
	uint64_t feed_changes, feed_resyncs;
	uint64_t round_trips, scripts, script_commands;
	uint64_t bytes_sent, bytes_received;
};
void kt_pool_store_work(const struct kt_pool *p, struct kt_pool_work *w);
/* leases: node: kt_clock_ns() when limit i's store last read the change
 * feed; 0: never (or not on Redis). */
uint64_t kt_pool_store_feed_at(const struct kt_pool *p, int i);
/* Reload: limit i of the new pool continues limit j of the old one (same
 * name, both on Redis): it keeps the agreed view instead of rejoining. */
void kt_pool_inherit(struct kt_pool *p, int i, const struct kt_pool *old, int j);
/* A reload's commit, before old is destroyed: each of p's stores that old
 * also has (same server, keys and cadence) and that is idle, or becomes
 * idle within KT_POOL_HANDOVER_WAIT_MS, is handed over with its connection
 * and its heartbeat memo, so a reload (a group appearing, say) neither
 * reconnects nor loses the steady path; a store with a slower round trip
 * in flight is left to finish with old (and the new pool connects anew).
 * An answer old had not taken yet is dropped. */
#define KT_POOL_HANDOVER_WAIT_MS 200
void kt_pool_take_stores(struct kt_pool *p, struct kt_pool *old);

/* Redis round trips made so far by all stores (for the benchmark). */
uint64_t kt_pool_round_trips(const struct kt_pool *p);
/* "agreed", "disagreed", "joining", "store-lost" (status and logs). */
const char *kt_pool_phase_name(enum kt_pool_phase ph);

#endif
