/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The strict controller: the limits with rateLimit.strict. Every
 * admission is a permit issued by the store's Lua script on the Redis clock
 * (kt_store_permits), consecutive permits at least `every` apart across all
 * nodes. The kernel (or libkthrottle on a kt_coop entry) still decides each
 * request: a strict bucket admits nothing unless the daemon armed a permit
 * in it (kt_strict_arm: tat = the permit's time, a window of expireAfter),
 * and then exactly one request, at or after that time.
 *
 * Per bucket (a member's, or the node's with scope node) one permit at a
 * time: the daemon asks for one only while the bucket has demand (a refusal
 * seen since its last permit was spent or expired: kernel throttle events,
 * or the refused counters at each tick and, for cooperative limits, every
 * few ms), and asks again once the permit is spent or its window is over.
 * All of a limit's requests go in one EVALSHA, on a store connection and
 * worker thread of the limit's own (storeq.h), never on the loop.
 *
 * Local time of a permit: the answer's wait added to when the answer came
 * back, so a permit is never early on this node (Redis's now lies between
 * the request and the answer); it may be late by the round trip.
 *
 * Store unreachable: nothing new is armed, and buckets without a permit are
 * closed with interval 0 (refusals then say reason "closed", status says
 * why); a permit already armed was issued and stays usable in its window.
 * Back-off answers (maxReserved reached) are retried after the wait the
 * script gave plus random jitter (up to every/2 with maxReserved 0, every/8
 * otherwise), so no bucket starves.
 *
 * Restart and reload: the state is in the kernel. A bucket whose window is
 * still open is adopted as armed (due = valid_until - expireAfter). */
#ifndef KT_STRICT_H
#define KT_STRICT_H

#include <stdbool.h>
#include <stdint.h>
#include "kernel/apply.h"
#include "kernel/bpf_loader.h"

struct kt_strict;

/* Per limit, for status and metrics. */
struct kt_strict_stat {
	bool strict;               /* the limit is strict (else the rest is zero) */
	uint64_t every_ns, expire_ns;
	int max_reserved;
	uint64_t granted, used, wasted, backoffs, store_errors;
	double reserved;           /* permits reserved ahead cluster-wide: (next permit time - now) / every, as of the last answer */
	int waiting;               /* buckets with demand and no permit due yet */
	int armed;                 /* buckets holding a permit (due or pending) */
	uint64_t next_due_ns;      /* kt clock of the soonest armed permit, 0 none */
	bool store_down;           /* the last call failed: nothing is admitted */
	uint64_t last_answer_ns;   /* kt clock, 0 never */
	char last_error[256];
};

/* The strict limits of plan (*out NULL when there are none). Opens one
 * store and worker per strict limit (no I/O yet); errors are the config's
 * (a store it cannot use) or the system's. No bucket yet: kt_strict_sync
 * after the plan is applied. */
int kt_strict_create(struct kt_strict **out, const struct kt_plan *plan, struct kt_bpf *bpf, char *err,
		     size_t errlen);
void kt_strict_destroy(struct kt_strict *st);
/* After every apply of plan (start, reload, members changed): buckets follow
 * plan's slots; those known keep their state, the others are adopted from
 * the kernel (a window still open is a permit armed). */
void kt_strict_sync(struct kt_strict *st, const struct kt_plan *plan);
/* Reload: the totals (granted, used, wasted...) of the limits old had too. */
void kt_strict_inherit(struct kt_strict *st, const struct kt_strict *old);
/* An fd (epoll of its own) readable when kt_strict_run is due. */
int kt_strict_fd(const struct kt_strict *st);
/* Takes store answers, arms permits, accounts spent and expired ones, asks
 * for new ones, and sets its timer for the next thing to do. */
void kt_strict_run(struct kt_strict *st, uint64_t now);
/* Each controller tick: the refused counters as the demand signal (events
 * are sampled and may be lost), then kt_strict_run. */
void kt_strict_tick(struct kt_strict *st, uint64_t now);
/* A kernel throttle event for slot at ts (kt clock). True when it is news
 * (demand where there was none, or a refusal after an armed permit's time:
 * it is spent): call kt_strict_run once the events are read. */
bool kt_strict_refused(struct kt_strict *st, uint32_t slot, uint64_t ts);
/* Limit index i of the plan it was made from. */
void kt_strict_get(const struct kt_strict *st, int i, uint64_t now, struct kt_strict_stat *out);

#endif
