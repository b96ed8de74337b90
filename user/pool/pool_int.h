/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Private to user/pool: the pool's state, shared by pool.c (groups,
 * lifecycle, tick, status), pool_hb.c (heartbeat round trips and their
 * answers) and pool_grant.c (what one bucket may admit). Not an API. */
#ifndef KT_POOL_INT_H
#define KT_POOL_INT_H

#include <stdbool.h>
#include <stdint.h>
#include "pool/pool.h"
#include "store/store.h"

#define NS_PER_MS 1000000ULL
#define KT_DEMAND_FLOOR_DIV 10 /* floor = an equal share / this */

enum resume_state {
	RES_OFF = 0, /* resumedRampUp not set */
	RES_WAIT,    /* not read from the store yet */
	RES_FOUND,   /* read, a level is waiting for kt_pool_take_resume */
	RES_DONE,    /* taken, or nothing was saved */
};

struct lim {
	char name[KT_NAME_LEN];
	enum kt_store_kind kind;
	int static_size;
	struct kt_rate_limit_cfg rl;
	uint64_t stale_ns, valid_for_ns;
	uint64_t lease_ns, hold_ns;     /* min(stale, validFor); fallbackFor (0: closed) */
	int max_members;
	double burst;
	enum kt_store_failure on_failure;
	int group;                      /* index in kt_pool.g, -1 for local/static */

	struct kt_pool_view v;
	bool answered, ever_agreed;
	bool unanswered;                /* cluster: its slot failed while others answered */
	uint64_t unanswered_since_ns;
	bool adopted;                   /* a pinned lease continued, no answer yet */
	double adopt_cap;               /* while adopted: no member above this rate, the one
					 * the pinned buckets ran at (< 0: none known) */
	int prev_size;                  /* size of the previous answer (shrink damping) */
	double sent_fallback;           /* per-member fallback in the heartbeat in flight */
	double sent_pool_rate;          /* pool rate it was computed from */
	int floor;                      /* re-sync floor after an outage, 0 none */
	uint64_t floor_until_ns;

	enum resume_state res;
	double res_rate;

	char **ids;                     /* ids sent at the last heartbeat */
	int n_ids;
	bool demand;                    /* share: demand */
	bool weighted;                  /* ... by weight (weightBy): the store keeps the
					 * members' weights (a rate), or the node's (slots) */
	double *grants;                 /* demand: ids[k]'s grant from the last answer, NAN none */
	double *held;                   /* demand: ids[k]'s grant when the size floor began, its
					 * ceiling until the floor ends (take_grants); NAN none */
	bool slots;                     /* unit concurrent on Redis: claims and grants of slots */
	bool slots_demand;              /* ... and share: demand (parts by the nodes' demands) */
	int64_t sent_slots_in_force;    /* the kernel's slots when the heartbeat in flight was built */
	int *id_class;                  /* slots with classes: ids[k]'s class at the last heartbeat */
	/* demand with callers (weightBy/classBy caller), whose dormant members
	 * the store keeps no fallback for: ids[k]'s fallback is held, i.e. it
	 * was sent called (not dormant) in an answered heartbeat. Until then
	 * its bucket has no fallback either. */
	bool dormancy;
	bool *fb_held;
};

/* One heartbeat round trip, built on the loop and run on the store's
 * worker: every string it needs is its own, because a reload may free the
 * pool while it runs. Limit k is the group's lims[k]. */
struct job_lim {
	char name[KT_NAME_LEN];
	bool load_ramp;                 /* resumedRampUp: read the saved level first, */
	double pool_rate;               /* then save max(it, this) with the heartbeat */
	int ramp_ret;
	double ramp_rate;
	char ramp_err[KT_ERR_LEN];
	char **gone;                    /* members to deregister at once */
	int n_gone;
	int leave_ret;
	char leave_err[KT_ERR_LEN];
	int off, n;                     /* this limit's members in mbuf and grants */
};

struct hb_job {
	uint64_t sent_ns;               /* when the round trip was handed over: leases count from it */
	char node[KT_STORE_ID_MAX + 1]; /* this node's name: in-flight limits' claims */
	int n;
	struct job_lim *jl;
	struct kt_pool_req *reqs;
	struct kt_pool_answer *ans;
	struct kt_pool_member *mbuf;
	char **ids;                     /* copies behind mbuf[].id */
	int n_ids;
	double *grants;                 /* demand: the script's grant per mbuf[] entry */
	bool unreachable;               /* the ramp read found no server: nothing else sent */
	int ret;
	char err[KT_ERR_LEN];
	struct kt_store_stats stats;
	struct kt_store_errors errs;
};

struct group {
	struct kt_storeq *q;            /* the store, on its own thread */
	const struct kt_store_cfg *cfg; /* the config's (valid while that config is) */
	char label[300];                /* "redis host:port" or "sentinel master NAME": logs only */
	char host[256];                 /* single mode, for status before a connection */
	int port;
	uint64_t heartbeat_ns, next_ns;
	uint64_t connects;              /* store's connection count at the last answer */
	bool started, failing;
	unsigned logged_kinds;          /* error kinds logged in this episode */
	uint64_t skipped;               /* heartbeats not sent: the previous one still ran */
	int *lims;
	int n;
};

struct kt_pool {
	struct lim *l;
	int n;
	char node[KT_STORE_ID_MAX + 1]; /* this node's name (config node:) */
	struct group *g;
	int n_groups;
	bool started, left, bad_input_logged;
	uint64_t start_ns;
	int evfd;                       /* readable when a store worker finished a round trip */
	/* kt_pool_store_work of the stores earlier pools closed, so the sums
	 * never go back across reloads */
	struct kt_pool_work closed;
};

/* pool.c */
void pool_free_ids(struct lim *l);
void pool_set_phase(struct lim *l, enum kt_pool_phase ph, uint64_t now);
int pool_local_members(struct kt_pool *p, const struct kt_pool_local *lo, int i);

/* pool_hb.c: builds a round trip, runs it on the store's worker, applies its answers */
void pool_heartbeat(struct kt_pool *p, struct group *g, uint64_t now, const struct kt_pool_local *local);
bool pool_finish_job(struct kt_pool *p, struct group *g, struct hb_job *job, uint64_t now);
void pool_free_job(void *arg);
void pool_leave_group(struct kt_pool *p, struct group *g, const struct kt_pool_local *local,
		      bool deregister);

/* pool_grant.c */
void pool_grant_lease(struct lim *l, uint64_t sent);
double pool_member_fallback(const struct lim *l, double pool_rate);
double pool_demand_floor(const struct lim *l, double pool_rate);

#endif
