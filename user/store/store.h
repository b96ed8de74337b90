/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Redis store client for the distributed pool (kt_rconn: plain TCP or TLS,
 * each call blocking its caller with short deadlines). The daemon never calls
 * it from its event loop: each store runs on a worker thread of its own
 * (storeq.h), once per heartbeat; the request path never touches it.
 *
 * Keys (P = store.keyPrefix, default "kthrottle"; L = limit name). Every key
 * of a limit carries the Redis Cluster hash tag {L}, so all of a limit's
 * keys are in one slot, CRC16(L) mod 16384 (cluster mode, below):
 *   P:pool:{L}:hb      sorted set  live member id -> last heartbeat, Redis TIME in ms
 *   P:pool:{L}:lapsed  sorted set  lapsed (held) member id -> last heartbeat
 *   P:pool:{L}:size    hash        live member id -> pool size it reported
 *   P:pool:{L}:fb      hash        member id -> fallback rate its kernel buckets
 *                                  run at once its lease lapsed (tokens/s)
 *   P:pool:{L}:ramp    string      ramp level (tokens/s, "%.17g") for resumedRampUp
 * and the counters the heartbeat answers from without reading the pool:
 *   P:pool:{L}:counted hash        live member id -> size bucket it is counted
 *                                  in ("x": invalid or missing size)
 *   P:pool:{L}:hist    hash        size -> live members counted at that size
 *   P:pool:{L}:sizes   sorted set  the sizes in hist (score = size)
 *   P:pool:{L}:meta    hash        n live, ns live with a size, bad live with
 *                                  an invalid size, nl lapsed, res their
 *                                  fallback rates summed ("%.17g")
 * and, for limits that share by demand (pool_rate > 0, see below):
 *   P:pool:{L}:grant   hash        live member id -> rate it was granted ("%.17g")
 *   P:pool:{L}:dem     sorted set  live member id -> effective demand max(demand, floor)
 *                                  per unit of its weight, e / w
 *   P:pool:{L}:wt      hash        live member id -> its weight, when not 1
 *                                  ("W", or "W K" with its priority class K)
 *   P:pool:{L}:dc0..dc7 sorted sets with priority classes: dem by class
 *   meta also holds gs (grants summed), sd (effective demands summed), sw
 *   (the weights of dem's members summed), with classes cd (each class's
 *   demand and weight summed), cls (each class's cached level) and ck (the
 *   class count dc was built for), and
 *   the cached water level: lvl ("-1" none), lt (TIME ms it was computed),
 *   lp (the divided rate it was computed for)
 * and, for in-flight limits (unit concurrent, slots_node set, below):
 *   P:pool:{L}:claim   hash        node name -> the slots it may hold until its
 *                                  next heartbeat: max(what it holds, its grant)
 *   P:pool:{L}:seen    sorted set  node name -> its last heartbeat (TIME ms);
 *                                  silent for stale + hold: forgotten, claim too
 *   P:pool:{L}:sdem    hash        node name -> its demand (share: demand): "D",
 *                                  "D W" (its weight), "D W D0:W0,..." (per class)
 * All but ramp get PEXPIRE KT_STORE_EXPIRE_FACTOR x (stale + hold) on a
 * heartbeat that may have made one of them (a new member, field or
 * element), whose TTL is shorter, or once a third of the TTL set has run
 * (meta's exp: when it runs out), so they vanish once every member is gone,
 * 2/3 of the TTL or more after the last heartbeat; ramp is SET with PX
 * ttl. A call costs O(this node's members + members that just lapsed or
 * died + log pool). The counters are checked against the key sizes (O(1))
 * on every full call (below); if someone else changed the keys (hand edit,
 * eviction) they are rebuilt from hb, lapsed, size and fb once (O(pool)). A
 * hand edit of an existing member's size field is not seen until that
 * member's next heartbeat overwrites it.
 *
 * Steady path: in equal share, a limit whose members, sizes, stale, hold
 * and fallback rate are those of this node's last answered heartbeat
 * (hbmemo.h) sends that answer along (`prev`). If the last full call wrote
 * the same answer into meta (ans, only while nothing is lapsed), its due
 * time (at most stale_ms later, and before the TTLs' refresh) has not come,
 * no live member is due to lapse, hb still holds as many members, and each
 * of this node's members is still live, the script renews the members
 * (ZADD XX) and answers 1: "prev holds" -- 4 commands a limit instead of
 * ~18. When meta's ans is not prev (another node changed the pool) but
 * this node's members store the sizes a full call would write, the same
 * checks answer ans itself ("catching up", hb_caught_up): the nodes told
 * of an agreement reached learn it without the full path. When they store
 * other sizes (another node joined, or lapsed: the live count moved), each
 * with a valid counted bucket, the path writes their sizes and buckets,
 * answers anew from the sizes' largest, and writes that into ans, telling
 * the holders when it changed ("acknowledging", hb_acked): what the full
 * call would do there, in about 10 commands instead of about 40, so a
 * death or a join that every holder of thousands of groups must
 * acknowledge costs Redis a fraction of what it did. Anything else runs
 * the full call, which every other change to the pool goes through
 * (joins, lapses, leaves, reserves) and which rewrites ans, so an answer
 * is never older than the pool's last change; hand edits of the counters
 * are found by the next full call, within stale_ms.
 *
 * Consensus: each heartbeat is one round trip per node covering all of its
 * limits (kt_store_heartbeat_many; one per master in cluster mode): EVALSHAs
 * of at most 128 units each (a limit counts 1 plus its members), so no
 * script holds Redis for long, pipelined (cluster: also one per slot).
 * Per limit the script, with redis.call('TIME') as its only clock:
 *   1. ZADD hb now id for every local member (a lapsed one returns to live);
 *   2. a member whose heartbeat is older than stale_ms has lapsed (its
 *      lease ended): it moves from hb to lapsed and leaves size, and for
 *      hold_ms more its fallback rate is added to the answer's `reserved`;
 *      older than stale_ms + hold_ms it is removed from lapsed and fb;
 *   3. HSET size id reported_size for every local member, where
 *      KT_POOL_REPORT_LIVE (0) stores the live count just computed;
 *   4. answers AGREE(size) when every live member's stored size is the same
 *      and equals the live count, else DISAGREE with
 *      size = max(largest stored size, live count).
 * Caller's rule: act on ans.size (on DISAGREE the larger, conservative
 * figure) and report KT_POOL_REPORT_LIVE, i.e. what the pool looks like now.
 * Every node's next heartbeat then stores the new live count, so after a join
 * or a graceful leave every node sees AGREE within 2 of its heartbeats, and
 * after a death within stale_ms + 2 heartbeats, shrinking as well as growing.
 * (Reporting the previous ans.live, the "report the answer", also
 * converges but needs one heartbeat more.)
 *
 * Node leases (redisStore.leases: node; kt_store_set_node names the node;
 * not with a cluster). Above, every node sends every limit at every
 * heartbeat to renew its members' leases: the store's work follows nodes x
 * limits. With node leases the work follows the nodes and the changes:
 *   - node.lua, first in every heartbeat's pipeline, renews the node's one
 *     lease (P:nodes: node -> TIME ms) and reads its inbox (P:node:{NODE}:
 *     feed: limit -> TIME ms of the change) since its last read; a change
 *     goes to the inbox of each node holding the limit (P:pool:{L}:nodes,
 *     kept by the full path) but the one making it, and, as "LIMIT NODE",
 *     to the fleet's feed P:feed (operators, and the previous release's
 *     readers), so a node reads only its own limits' news;
 *   - the node's members are stamped KT_STORE_QUIET_HORIZON_MS ahead, so
 *     they never lapse by their own heartbeat while the node lives, and a
 *     full call records them in the node's index (P:node:{NODE}:limits:
 *     limit -> its member ids there);
 *   - a limit is sent only when its request differs from the one its last
 *     answer was sent for, that answer had a reserve, the inbox names it (a
 *     change by another node: a full call whose answer differs from the one
 *     meta held, or a leave, tells the holders; a change this node made is no
 *     news), its quiet time (KT_STORE_QUIET_REFRESH_MS, less up to a
 *     quarter by name) has passed, or node.lua found the node's own lease
 *     lapsed or the server was reached anew: then every limit goes (an
 *     inbox that cannot say makes every limit news). Unsent, a limit is answered its last answer ("quiet"),
 *     as the steady path would; node.lua's success vouches for the lease;
 *   - node.lua finds a node whose lease is older than stale_ms (at most 16
 *     a call: whichever node calls next), gives each of its members the
 *     lease's time as heartbeat (so the next full call lapses them as in 2.
 *     above), takes it out of its limits' holders, tells the others and
 *     forgets it;
 *   - the limits the inbox names go in a second round trip of the same
 *     heartbeat, so a death is found within stale_ms + 1 heartbeat and a
 *     join or a leave within 1, as with member leases.
 * Nodes with member leases tell the holders too, so a pool switching
 * between the two hears every change; they never lapse a quiet node's
 * members (stamped ahead). A hand edit or an eviction of a quiet limit's
 * keys is found when a node sends it (its quiet time at most; a join
 * that finds the pool gone tells the holders, and sizes stay conservative
 * until then: DISAGREE takes the larger). Keys then live at least
 * KT_STORE_QUIET_TTL_MS.
 *
 * Demand sharing (share: demand; pool_rate > 0 in the request). The size
 * agreement above is unchanged; only the division of the agreed rate
 * differs. The script divides P = max(0, pool_rate - reserved) (reserved as
 * answered by the same call) weighted max-min fairly: with e_i =
 * max(demand_i, floor_rate) and w_i the member's weight (1 unless set), the
 * water level lvl is the largest value with sum_i min(e_i, w_i lvl) <= P,
 * and member i's target is min(e_i, w_i lvl): a member that wants less than
 * its weighted share keeps what it wants, and the rest goes to the others
 * in proportion to their weights. When sum e_i <= P there is no level (lvl =
 * +inf, answered as INFINITY) and the leftover minus one floor_rate is
 * added to every target in proportion to its weight (measured
 * demand tends to lag real appetite; the floor kept back lets a newcomer
 * start at once). Safety: the sum of the grants stored in Redis never
 * exceeds P: a member's grant shrinks to its target at once, but grows only
 * to min(target, grant + (P - sum of grants)), i.e. into headroom already
 * freed; a member seen for the first time starts at min(floor, target,
 * headroom), which is 0 while the pool is saturated: the others shrink to
 * their new targets at their next heartbeat, and the newcomer grows at its
 * own next one. A calling node's shrinking members are handled before its
 * growing ones. So a member that becomes busy reaches its fair share within
 * two of its heartbeats plus one of each member that must give way, and a
 * lowered pool rate (or a grown reserve) is honoured within one heartbeat of
 * every member (a drop of at most 1% within recompute_ms more, see Cost;
 * ans.granted > P until then: the caller may report it).
 * With priority classes (n_classes) the division is per class first: the
 * classes in order, each its demand up to its ceiling while what the
 * classes after it are owed of their floors stays free, what is left when
 * all fit by weight up to the ceilings; then weighted max-min within each
 * class. With classes_siblings the classes are peers instead: class k gets
 * clamp(W_k x lambda, min(floor_k, D_k), min(D_k, ceiling_k)) (W_k, D_k
 * its weights and demands summed), lambda such that they sum to P. A
 * class's level within it is walked over its own sorted set (dc0..dc7),
 * cached in meta (cls) under the level's rules (a demand moving by more
 * than a tenth of an equal share, P by 1%, recompute_ms).
 * Provided each node runs each member at exactly its last grant until its
 * next heartbeat (and at most stale_ms), the members' rates sum to <= P.
 * Lapse, death and leave drop the member's grant from the sum.
 * Cost: lvl comes from walking dem from both ends at once (from the bottom:
 * the remaining rate over the remaining count; from the top: with sd, the
 * rate left once the k largest are capped), so a computation reads
 * O(min(members below lvl, members above lvl)) entries plus O(log pool) per
 * chunk. It is cached in meta and recomputed when older than recompute_ms,
 * when P moved by more than 1% (a ramp: every call while it climbs faster;
 * nodes whose ramp levels differ slightly do not thrash it), when the
 * member set of dem changed, or when a call moved
 * a member's min(e, lvl) by more than a tenth of an equal share; otherwise a
 * call costs O(own members + log pool) as in equal mode (1,000 nodes x 10
 * members, 1 in 7 saturated: ~170 us per call with the level cached, ~1.9 ms
 * for a call that walks it; test_store_demand). The sums gs and sd
 * are kept incrementally, recomputed exactly while at most 64 members share
 * by demand and by every rebuild; gs is clamped at >= 0 and reset to 0 when
 * no member shares by demand. Members heartbeating with pool_rate 0 leave
 * grant and dem (mixing both modes on one limit is not meant to happen).
 *
 * Connection: opened lazily by the first call. A call blocks at most its
 * budget (each connect or command step at most the step timeout; both
 * above). On a connection-level error the connection is dropped,
 * the store goes DOWN, and calls fail fast with -EAGAIN until the next retry
 * time (capped, jittered exponential back-off). Sentinel mode asks each
 * endpoint in turn (starting with the one that answered last) for the master,
 * checks ROLE, and re-resolves after any connection error, a READONLY reply,
 * or a +switch-master event: a second connection to the sentinel stays
 * subscribed to it and is polled (without blocking) at the start of each
 * call, so the store moves to a new master at its next call.
 *
 * Cluster mode (KT_REDIS_CLUSTER; cfg endpoint_host/port are the seeds, db
 * must be 0): the slot map comes from CLUSTER SLOTS asked of a connected
 * master or else of each seed in turn; one connection per master in use,
 * each set up with AUTH and SCRIPT LOAD. A heartbeat groups its limits by
 * slot and sends one EVALSHA per slot and 128 units (limits in one slot may
 * share one; limits in different slots never do: CROSSSLOT); the EVALSHAs for one master go
 * in one pipeline, masters are asked one after another. round_trips thus
 * grows by the number of masters involved (at most the number of slots).
 * leave, save_ramp and load_ramp go to their limit's master; ping
 * refreshes the map and PINGs every master. A reply MOVED updates that
 * slot (and the whole map is refreshed at the next call), ASK resends with
 * ASKING to the node named, NOSCRIPT resends the script text; a connection
 * failure, CLUSTERDOWN, TRYAGAIN, READONLY, LOADING or MASTERDOWN refreshes
 * the map; at most 3 passes per call, all within the call's budget,
 * which is how a promoted replica is followed. A slot left unanswered fails
 * only its own limits (KT_STORE_PARTIAL); the store goes DOWN with the
 * usual back-off only when no slot was answered. A master whose connection
 * failed is not dialled again for a back-off of its own (100 ms doubling to
 * 1 s, jittered), so while it is down a call costs the healthy masters'
 * round trips and a map refresh, not a connect timeout per pass.
 * kt_store_endpoint names the master that answered last.
 *
 * TLS: redis_tls (or rediss://) for the master, sentinel_tls for the
 * sentinels: ca_cert (NULL: the system store), optional cert + key (mutual
 * TLS), insecure_skip_verify; the host connected to is the SNI name and the
 * name (or IP) the certificate must carry. A TLS failure is a connection-level
 * failure like any other (DOWN, back-off), e.g. "redis: TLS handshake with
 * 127.0.0.1:6390 failed: certificate verify failed (...)". Never clear text.
 *
 * Errors (negative errno, err filled with one line naming the server and the
 * step; passwords never appear): -EINVAL bad argument, -EAGAIN backing off, -ETIMEDOUT, -ECONNREFUSED/-ECONNRESET/... connection,
 * -EACCES authentication, -ENOENT sentinel does not know the master, -EROFS
 * the server is not a master, -EIO Redis error reply (e.g. WRONGTYPE),
 * -EPROTO malformed reply or TLS failure, -ENOMEM.
 *
 * TLS writes use write(2), so a peer reset raises SIGPIPE: kt_store_open
 * sets SIGPIPE to SIG_IGN if it is still SIG_DFL. Not thread-safe: one
 * kt_store per thread. */
#ifndef KT_STORE_H
#define KT_STORE_H

#include <stddef.h>
#include <stdint.h>
#include "base/config.h"

/* The step timeout (one connect, or one command's round trip) follows the
 * store's latency unless redisStore.timeout fixes it: 4 x the p99 of the
 * last KT_STORE_RTT_WINDOW answered round trips, at least
 * KT_STORE_TIMEOUT_FLOOR_MS, at most KT_STORE_TIMEOUT_CAP_MS; before the
 * first answer KT_STORE_TIMEOUT_FIRST_MS, so a store across zones answers
 * the first connect. Each step that timed out in a row multiplies it by
 * KT_STORE_TIMEOUT_BACKOFF (up to the cap): a store that became much
 * slower at once is waited for at the next try, and one answer puts it
 * back to 4 x p99. A
 * call's budget (connect, setup and command together) is 3 steps, at least
 * KT_STORE_CALL_BUDGET_MIN_MS. Leases count from the heartbeat's send time,
 * so a slow answer shortens a lease but never stretches one. */
#define KT_STORE_TIMEOUT_FLOOR_MS 200
#define KT_STORE_TIMEOUT_FIRST_MS 1000
#define KT_STORE_TIMEOUT_CAP_MS 2000
#define KT_STORE_TIMEOUT_RTT_FACTOR 4
#define KT_STORE_TIMEOUT_BACKOFF 4
#define KT_STORE_RTT_WINDOW 64
#define KT_STORE_CALL_STEPS 3
#define KT_STORE_CALL_BUDGET_MIN_MS 1000
/* the longest a call can take under any timeout */
#define KT_STORE_CALL_BUDGET_MAX_MS (KT_STORE_CALL_STEPS * KT_STORE_TIMEOUT_MAX_MS)
#define KT_STORE_BACKOFF_MIN_MS 100   /* first retry after a failure... */
#define KT_STORE_BACKOFF_MAX_MS 5000  /* ...doubling up to this; each delay jittered in [d/2, d] */
#define KT_STORE_CLUSTER_BACKOFF_MAX_MS 1000 /* ...or this in cluster mode (failovers are routine) */
#define KT_STORE_EXPIRE_FACTOR 3      /* pool keys expire after this many (stale + hold) windows */
#define KT_STORE_MAX_POOL 1000000     /* reported sizes are 1..this */
#define KT_STORE_MAX_WEIGHT 1000000   /* a member's weight is in (0, this] */
#define KT_STORE_MAX_NODE_WEIGHT 1e12 /* a node's (its members' summed) */
#define KT_STORE_MAX_CLASSES 8        /* priority classes of one limit */
/* leases: node (see "Node leases" above): a limit unchanged is still sent
 * once per KT_STORE_QUIET_REFRESH_MS (less up to a quarter, by its name,
 * so a node's limits do not all come due at once); its members'
 * heartbeats are stamped KT_STORE_QUIET_HORIZON_MS ahead, so they outlive
 * the quiet time with room; its keys live at least KT_STORE_QUIET_TTL_MS; the feed keeps a
 * change KT_STORE_FEED_KEEP_MS and names at most KT_STORE_FEED_MAX limits
 * (more: every limit is news). */
/* A heartbeat's scripts hold at most this many units, a limit counting 1
 * plus its members (a limit alone may be more): store_redis.c. */
#define KT_STORE_SCRIPT_UNITS 128
/* The start herd: a limit this node has not had answered yet (its first
 * heartbeat) takes the full path, the costliest (tens of microseconds of
 * Redis a limit and a member). When a fleet starts, that is every limit of
 * every node in the same second, which can queue Redis past every timeout,
 * and no node is answered. So a heartbeat sends at most its join budget of
 * such limits, in units (1 + members, as for scripts; at least one limit,
 * whatever its size); the rest are KT_STORE_DEFERRED to the next. The
 * budget starts unbounded (a start Redis takes costs no heartbeat); a
 * heartbeat whose new limits failed, or came back later than
 * KT_STORE_JOIN_SLOW_MS, sets it to half what it sent (at least
 * KT_STORE_JOIN_MIN_UNITS), and one that came back in time and left some
 * doubles it. A limit answered once stays joined whatever its calls do next
 * (a timeout does not put it back in the queue). A deferred limit keeps
 * what it had: nothing before its first answer. The budget is per kt_store
 * (a daemon has one per store it talks to). */
#define KT_STORE_JOIN_MIN_UNITS 16
#define KT_STORE_JOIN_MAX_UNITS (1 << 24)
#define KT_STORE_JOIN_FIRST_UNITS KT_STORE_JOIN_MAX_UNITS
#define KT_STORE_JOIN_SLOW_MS 100
/* The news budget (leases: node): the limits the inbox names, and those
 * whose last call failed, go in the second round trip within a budget of
 * units adapted as the join budget (unbounded at first, half of what went
 * when the heartbeat's first round trip or the second came back later than
 * KT_STORE_JOIN_SLOW_MS or failed, doubled when quick with some left).
 * Those left are answered their last answer, as quiet limits are, which is
 * safe: until a node acknowledges a change (a join, a death, a leave) the
 * others act on the larger, conservative size; they are doubted, so the
 * next heartbeats send them. A fleet acknowledging 10,000 groups' joins at
 * once thus queues Redis no deeper than it can answer in time, leases stay
 * renewed, and acknowledgements of several joins of one group meet in one
 * call. A quick round trip with news left sets the budget to what would
 * have fitted in KT_STORE_JOIN_SLOW_MS at its pace, 2 to 8 times the last
 * (after a burst the news is mostly answers to catch up with). A change the inbox names from before the
 * Redis TIME of the node's last answer for the limit (heartbeat.lua
 * answers its own; hbmemo keeps it) is in that answer: no news. A
 * heartbeat without news brings the budget down to
 * KT_STORE_NEWS_IDLE_UNITS (as TCP restarts its window after idle): a
 * budget grown on cheap answers to catch up with would otherwise send the
 * next burst of full calls (a death: every survivor at once) in one go.
 * A lapsed lease (node.lua: held 0) sends every quiet limit, as a join:
 * its members lapsed, each limit must join again. These go within what
 * the join budget leaves after the heartbeat's own joins; the rest are
 * KT_STORE_DEFERRED and join at the next heartbeats (the node runs them
 * out on their lease, then on the fallback, as during an outage). */
#define KT_STORE_NEWS_IDLE_UNITS 256
/* A limit whose answer holds a reserve (lapsed members held for hold_ms)
 * stays quiet for hold_ms at most after that answer: the reserve came with
 * the lapse, so no node sends the limit again before the first of the
 * lapsed is due to be forgotten, and the first to send it after that
 * forgets them in a full call and tells the others (news, whatever their
 * quiet time); until a node hears it runs on the reserve, which is
 * conservative. Sent every heartbeat instead, every holder of every group
 * a death touched paid a call a heartbeat for the whole hold (60 s by
 * default). */
#define KT_STORE_QUIET_REFRESH_MS 600000ULL
#define KT_STORE_QUIET_HORIZON_MS (2 * KT_STORE_QUIET_REFRESH_MS)
#define KT_STORE_QUIET_TTL_MS (3 * KT_STORE_QUIET_REFRESH_MS)
#define KT_STORE_FEED_KEEP_MS 60000ULL
#define KT_STORE_FEED_MAX 1000
#define KT_STORE_ID_MAX 255           /* member id: 1..this bytes of '!'..'~' */
#define KT_STORE_PREFIX_MAX 64        /* keyPrefix: 1..this bytes of '!'..'~' */
#define KT_STORE_STALE_MAX_MS (24ULL * 3600 * 1000)

struct kt_store;

enum kt_store_state {
	KT_STORE_IDLE = 0, /* never connected yet, no failure either */
	KT_STORE_UP,       /* the last heartbeat was answered as expected */
	KT_STORE_DOWN,     /* last attempt failed; backing off */
	KT_STORE_FAILING,  /* connected, but the last call was answered with an error
			    * or a reply it could not use (kt_store_get_errors says which) */
};

/* What a failed call ran into. */
enum kt_store_err_kind {
	KT_SERR_NONE = 0,
	KT_SERR_CONNECT,   /* connect refused/reset/closed, no master known */
	KT_SERR_AUTH,      /* AUTH refused, NOAUTH */
	KT_SERR_TLS,       /* handshake or verification */
	KT_SERR_TIMEOUT,   /* a step or the call budget */
	KT_SERR_PROTOCOL,  /* unparseable reply, or one of an unexpected shape */
	KT_SERR_WRONGTYPE, /* WRONGTYPE (a pool key of another type), or a reply of the wrong type */
	KT_SERR_ERR,       /* any other error reply (-ERR ...) */
	KT_SERR_NOSCRIPT,  /* NOSCRIPT even after the script was sent again */
	KT_SERR_OVERSIZED, /* a reply claiming more than KT_RCONN_MAX_BULK / _MAX_ELEMENTS */
	KT_SERR_KINDS
};

/* An episode starts with a failed call and ends when a heartbeat is answered. */
struct kt_store_errors {
	enum kt_store_err_kind kind;   /* the last failure's, NONE if there never was one */
	char text[KT_ERR_LEN];         /* its one-line message (no passwords) */
	uint64_t since_ns;             /* kt clock, first failure of the current episode; 0: none */
	uint64_t last_ns;              /* kt clock, the last failure */
	unsigned episode_kinds;        /* 1 << kind for each kind seen in the current episode */
	uint64_t count[KT_SERR_KINDS]; /* failed calls per kind, since open */
};

#define KT_POOL_REPORT_LIVE 0
/* A member's demand: dormant, a cooperative limit's caller not called on
 * its node since it was published. It holds no floor (a member with demand
 * 0 keeps a tenth of an equal share): callers named in the config but not
 * run on a node leave the pool to those that run. */
#define KT_POOL_DEMAND_DORMANT (-1.0)

struct kt_pool_member {
	const char *id;    /* stable: node name + cgroup identity; unique within a request */
	int reported_size; /* KT_POOL_REPORT_LIVE, or an explicit size 1..KT_STORE_MAX_POOL */
	double demand;     /* tokens/s admitted + refused over the last epoch, 0..1e15, or
			    * KT_POOL_DEMAND_DORMANT; read only when the request's pool_rate > 0 */
	double weight;     /* share: demand: its weight, (0, KT_STORE_MAX_WEIGHT]; 0 (unset)
			    * weighs 1 */
	int klass;         /* with the request's n_classes: its priority class,
			    * 0 (the first) .. n_classes - 1 */
};

struct kt_pool_req {
	const char *limit;                     /* limit name, [A-Za-z0-9_.-], 1..KT_NAME_LEN-1 */
	const struct kt_pool_member *members;  /* this node's members of the limit */
	int n_members;                         /* may be 0: only read the answer */
	uint64_t stale_ms;                     /* 1..KT_STORE_STALE_MAX_MS */
	double save_ramp;                      /* >= 0: also SET the ramp key (PX ramp_ttl_ms); < 0: no */
	uint64_t ramp_ttl_ms;                  /* >= 1 when save_ramp >= 0 */
	uint64_t hold_ms;                      /* 0..KT_STORE_STALE_MAX_MS: lapsed members reserved this long */
	double fallback_rate;                  /* >= 0: each member's rate once its lease lapsed */
	/* Demand sharing (all zero: equal share, nothing below is read or written). */
	double pool_rate;                      /* 0..1e15; > 0: divide this (minus reserved) by demand */
	double floor_rate;                     /* 0..1e15: each member's effective demand is at least this */
	uint64_t recompute_ms;                 /* 0..KT_STORE_STALE_MAX_MS: water level cached this long
						* (e.g. half the heartbeat period; 0: every call) */
	bool weighted;                         /* the limit shares by weight: members' weights are
						* sent and kept (the wt key); else every member
						* weighs 1 and wt is never named */
	/* Priority classes (weighted, or an in-flight limit's; 0: none): the divided rate goes
	 * to the classes in order, each taking its demand up to its ceiling
	 * while the floors owed to the classes after it (each its floor or
	 * its demand, the smaller) stay free; within a class, weighted
	 * max-min. Rates in tokens/s, floor <= ceiling. */
	int n_classes;                         /* 0, or 2..KT_STORE_MAX_CLASSES */
	bool classes_siblings;                 /* instead the classes are peers (a parent's
						* children): each gets min(its floor, its demand),
						* and above that they share weighted max-min up to
						* their ceilings */
	double class_floor[KT_STORE_MAX_CLASSES];
	double class_ceiling[KT_STORE_MAX_CLASSES];
	double *grants;                        /* out, n_members entries when pool_rate > 0: the rate
						* members[i] may run at until its next heartbeat */
	/* In-flight limits (unit concurrent; slots_node NULL: not one). The
	 * script grants this node whole slots: at most its members' part of
	 * slots_pool (rounded up), at most what the other nodes' claims leave;
	 * and records max(slots_held, grant) as this node's claim. */
	const char *slots_node;                /* this node's name, 1..KT_STORE_ID_MAX printable */
	int64_t slots_held;                    /* 0..KT_STORE_MAX_SLOTS: what the node may hold now:
						* its open connections or its slots in force, the larger */
	int64_t slots_pool;                    /* 0..KT_STORE_MAX_SLOTS: the pool's slots now (the ramp) */
	int64_t slots_cap;                     /* -1, or 0..KT_STORE_MAX_SLOTS: grant no more than this */
	int64_t slots_demand;                  /* -1: equal parts; else 0..KT_STORE_MAX_SLOTS, this node's
						* demand (share: demand): the nodes' parts are
						* max-min fair over their demands */
	double slots_weight;                   /* with slots_demand: 0, or this node's weight (its
						* members' summed, weightBy), up to
						* KT_STORE_MAX_NODE_WEIGHT: the parts are then
						* weighted max-min fair (a node that sends none
						* weighs 1) */
	/* with n_classes (share: demand): this node's demand and weight per
	 * class (its members of that class); the slots go to the classes as
	 * rates do (in order, or peers), then weighted max-min over the
	 * nodes within each class. slots_demand is their sum. */
	int64_t slots_class_demand[KT_STORE_MAX_CLASSES];
	double slots_class_weight[KT_STORE_MAX_CLASSES];
};
#define KT_STORE_MAX_SLOTS 1000000000LL

struct kt_pool_answer {
	int agree; /* 1 AGREE, 0 DISAGREE */
	int size;  /* agreed size, or max(largest reported, live); 0 only if live == 0 */
	int live;  /* live members of the limit across all nodes */
	double reserved; /* sum of the fallback rates of lapsed, still-held members */
	/* Filled only when the request's pool_rate > 0 (left alone otherwise). */
	double granted;  /* sum of all live members' grants after this call */
	double level;    /* water level lvl, INFINITY when every member gets its demand; per
			  * unit of weight (a member's share is at most weight x level) */
	double weights;  /* the weights of the members sharing by demand, summed (their
			  * count when none has a weight) */
	/* with the request's n_classes: each class's part of the divided
	 * rate, and its members' weights summed */
	double class_part[KT_STORE_MAX_CLASSES];
	double class_weights[KT_STORE_MAX_CLASSES];
	/* Filled only for an in-flight request (slots_node set). */
	int64_t slots_grant;   /* whole slots this node may fill until its next heartbeat */
	int64_t slots_claimed; /* the other nodes' claims summed */
	/* with n_classes: this node's part of the slots per class (before
	 * rounding and the others' claims), to split slots_grant by */
	double slots_class_part[KT_STORE_MAX_CLASSES];
	/* 0: answered. Only after KT_STORE_PARTIAL: -errno, this limit's
	 * slot went unanswered (cluster mode), or KT_STORE_DEFERRED, this
	 * limit waits for the join budget; nothing above was written. */
	int status;
};

/* kt_store_heartbeat_many's return when some limits were answered and some
 * were not (a cluster's master down, or limits deferred by the join
 * budget): each answer's status says which. */
#define KT_STORE_PARTIAL 1
/* An answer's status: a limit not answered yet (its first heartbeat)
 * that this heartbeat left for the next one,
 * the join budget being spent ("The start herd"). Nothing was sent for it. */
#define KT_STORE_DEFERRED 2

/* Round-trip latency, and the timeouts it sets (kt_store_get_stats). */
struct kt_store_latency {
	unsigned samples;     /* answered round trips in the window, 0..KT_STORE_RTT_WINDOW */
	uint64_t p50_us, p99_us; /* of those; 0 without samples */
	unsigned timeout_ms;  /* the step timeout in force now */
	unsigned budget_ms;   /* a call's budget now */
	bool fixed;           /* redisStore.timeout set it */
};

struct kt_store_stats {
	uint64_t round_trips; /* request/reply exchanges (a pipeline counts once) */
	uint64_t commands;    /* Redis commands sent */
	uint64_t connects;    /* successful connection setups */
	uint64_t failures;    /* connection-level failures (each starts or extends DOWN) */
	uint64_t hb_steady;   /* limits a heartbeat answered "unchanged" (the steady path) */
	uint64_t hb_caught_up; /* of those, answered the pool's newer answer (catching up) */
	uint64_t hb_acked;     /* of those, wrote this node's new sizes and answered (acknowledging) */
	uint64_t hb_full;     /* limits a heartbeat answered in full */
	uint64_t script_commands; /* Redis commands the heartbeat scripts ran, as they answer */
	uint64_t hb_scripts;  /* heartbeat scripts sent (EVALSHA), HB_SCRIPT_UNITS at most each */
	uint64_t hb_quiet;    /* leases: node: limits not sent, answered from the last answer */
	uint64_t hb_deferred; /* limits left for a later heartbeat by the join budget (new, or rejoining) */
	unsigned join_budget; /* units of limits not answered yet the next heartbeat may send */
	unsigned news_budget; /* leases: node: units of news the next second round trip may send */
	uint64_t hb_postponed; /* leases: node: news left for a later heartbeat by the news budget */
	uint64_t feed_changes; /* leases: node: limits the change feed named */
	uint64_t feed_resyncs; /* leases: node: heartbeats that sent every limit (lease lapsed, feed lost) */
	uint64_t feed_at_ns;  /* leases: node: kt_clock_ns() when the feed was last read; 0: never */
	uint64_t bytes_sent, bytes_received; /* of commands and replies */
	uint64_t timeouts;    /* steps that ran out of time */
	struct kt_store_latency lat;
};

/* Validates and copies cfg (kind must be KT_STORE_REDIS); does not connect.
 * TLS files are checked now (-EIO: unreadable, not PEM, key not matching the
 * certificate) and read again at every connect. */
int kt_store_open(struct kt_store **out, const struct kt_store_cfg *cfg, char *err, size_t errlen);
void kt_store_close(struct kt_store *s);
/* The node's name for its lease (leases: node; 1..KT_STORE_ID_MAX
 * characters, printable, no space). 0 or -EINVAL. Before the first
 * heartbeat: with leases: node a heartbeat without one fails -EINVAL. */
int kt_store_set_node(struct kt_store *s, const char *node);

/* One round trip for all limits of this node (cluster: one per master
 * involved). ans[i] answers reqs[i]. Returns 0 (every ans[i].status 0),
 * -errno (nothing answered), or in cluster mode KT_STORE_PARTIAL: the
 * limits of a master that is down or failing over go unanswered (status
 * < 0, err names the failure) while the others are answered, so one dead
 * master does not cost every limit its lease. */
int kt_store_heartbeat_many(struct kt_store *s, const struct kt_pool_req *reqs, int n,
			    struct kt_pool_answer *ans, char *err, size_t errlen);
/* Convenience: one limit, no ramp save. */
int kt_store_heartbeat(struct kt_store *s, const char *limit, const struct kt_pool_member *m, int n,
		       uint64_t stale_ms, struct kt_pool_answer *ans, char *err, size_t errlen);
/* Graceful deregistration: removes ids (live or lapsed) at once. */
int kt_store_leave(struct kt_store *s, const char *limit, const char *const *ids, int n, char *err,
		   size_t errlen);
/* SET P:pool:{L}:ramp rate PX ttl_ms (last writer wins). */
int kt_store_save_ramp(struct kt_store *s, const char *limit, double rate, uint64_t ttl_ms, char *err,
		       size_t errlen);
/* *rate = saved level, or -1 when there is none (never saved or expired). */
int kt_store_load_ramp(struct kt_store *s, const char *limit, double *rate, char *err, size_t errlen);
/*
 * Strict limits: permits issued on the Redis clock. One key per
 * limit, P:strict:{L}, a string: the time of the latest permit issued, Redis
 * TIME in microseconds. One EVALSHA asks for n permits at once (a node's
 * members of the limit that have demand); the script takes them one after
 * the other with redis.call('TIME') as its only clock (now), each as
 * follows (docs/strict.md):
 *   next = last + every
 *   now >= next                 -> last = now, granted, wait 0
 *   floor(max(0, last - now) / every) < max_reserved
 *                               -> last = next, granted, wait next - now
 *   else                        -> not granted, back off: wait until a
 *       reservation can be made, (last - max_reserved x every + 1) - now,
 *       or with max_reserved 0 until next: next - now
 * So consecutive permits are >= every apart, at most max_reserved are
 * reserved ahead of now, and the key never goes backwards. The key gets
 * PEXPIRE (last - now + every) + 1 s after each call, so it disappears only
 * when it no longer constrains anyone. A value that is not a decimal integer
 * (a hand edit) counts as a permit issued at the call's now: the next one is
 * every later, never sooner. A value far ahead is never clamped (it may hold
 * reservations made under a larger maxReserved): it only delays.
 */
struct kt_permit {
	int granted;       /* 1: a permit due wait_us after Redis's now; 0: back off wait_us */
	uint64_t wait_us;
};
struct kt_permit_answer {
	uint64_t now_us;   /* Redis TIME of the call, microseconds */
	uint64_t ahead_us; /* after the call: last permit time - now, 0 if not ahead;
			    * reserved permits = ahead_us / every_us (status) */
};
/* n 1..KT_STORE_MAX_PERMITS; every_us 1000..86400e6; max_reserved
 * 0..100000. out[0..n) in order. 0 or -errno as the other calls (cluster:
 * routed to the limit's master like leave). */
#define KT_STORE_MAX_PERMITS 1024
int kt_store_permits(struct kt_store *s, const char *limit, uint64_t every_us, int max_reserved, int n,
		     struct kt_permit *out, struct kt_permit_answer *ans, char *err, size_t errlen);

/*
 * Tag exchange: the hit counts a node served for a tag limit
 * since its last report, to the other nodes of the same limit, through the
 * Redis stream <prefix>:tags:{<limit>} (one entry per chunk, fields n = node
 * and h = chunk; trimmed to keep_ms on Redis's clock, the key expiring
 * 2 x keep_ms after the last report). One EVALSHA writes this node's chunks
 * and reads up to KT_STORE_TAG_READ_MAX entries written after *last_id by
 * the other nodes, in stream order: fn gets each entry's chunk. last_id is
 * advanced past what was read (own entries included); "" (the first call)
 * reads nothing and starts after the newest entry. *more = 1: call again,
 * there may be more. The chunk format is the caller's (user/tags/exchange.c).
 * 0 or -errno as the other calls; the reply is checked whole before fn
 * runs, so a malformed one (-EPROTO) hands out nothing and keeps last_id.
 * Cluster: routed to the limit's master, like permits.
 */
#define KT_STORE_TAG_ID_MAX 48
#define KT_STORE_TAG_CHUNK_MAX (64 * 1024)
#define KT_STORE_TAG_MAX_CHUNKS 1024
#define KT_STORE_TAG_READ_MAX 1024
typedef void (*kt_store_tag_fn)(void *ctx, const char *chunk, size_t len);
int kt_store_tag_exchange(struct kt_store *s, const char *limit, const char *node, uint64_t keep_ms,
			  const char *const *chunks, const size_t *chunk_lens, int n_chunks,
			  char last_id[KT_STORE_TAG_ID_MAX], kt_store_tag_fn fn, void *ctx, int *more,
			  char *err, size_t errlen);

/* Connects if needed and sends PING. */
int kt_store_ping(struct kt_store *s, char *err, size_t errlen);

/* since_ns: CLOCK_MONOTONIC time the current state began (0 for IDLE);
 * next_retry_ns: when DOWN, the earliest time the next call will try again. */
enum kt_store_state kt_store_state(const struct kt_store *s, uint64_t *since_ns, uint64_t *next_retry_ns);
int kt_store_connected(const struct kt_store *s);
const char *kt_store_state_name(enum kt_store_state st);
/* "host:port" of the server in use (the resolved master in sentinel mode,
 * the master that answered last in cluster mode), "" when not connected.
 * Returns buf. */
const char *kt_store_endpoint(const struct kt_store *s, char *buf, size_t len);
/* Last error message (no passwords), "" if none. */
const char *kt_store_last_error(const struct kt_store *s);
void kt_store_get_stats(const struct kt_store *s, struct kt_store_stats *st);
void kt_store_get_errors(const struct kt_store *s, struct kt_store_errors *e);
/* "connect", "auth", "tls", "timeout", "protocol", "wrongtype", "err",
 * "noscript", "oversized" ("none" for NONE). */
const char *kt_store_err_kind_name(enum kt_store_err_kind k);

#endif
