/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Pool membership and agreement: see pool.h for the contract and store.h for
 * the consensus script. This file decides when to talk to the store, turns
 * answers into phases and sizes, and applies validFor and onStoreFailure.
 *
 * Choices beyond pool.h:
 * - Members report KT_POOL_REPORT_LIVE (store.h's caller rule): converges one
 *   heartbeat sooner than echoing the previous answer.
 * - Limits whose stores connect to the same place (kind, mode, addresses,
 *   auth, TLS, db, keyPrefix, heartbeat) share one kt_store, so a heartbeat
 *   is one round trip per store whatever the number of limits and members.
 *   staleAfter, validFor and onStoreFailure stay per limit.
 * - Members that vanish from local[i].member_ids between two heartbeats are
 *   deregistered at once (kt_store_leave), so a detached cgroup shrinks the
 *   pool within 2 heartbeats instead of staleAfter + 2.
 * - After an outage longer than the stale window every member has been
 *   pruned, and after a reconnection the server may be a restarted or
 *   promoted one that lost the membership: either way the first node back
 *   sees a pool of itself alone. To keep the sum of shares under max while
 *   the others reconnect (their back-off may be up to
 *   KT_STORE_BACKOFF_MAX_MS), the size before the gap is kept as a floor for
 *   that long plus 3 heartbeats (phase DISAGREED while it binds). A genuine
 *   shrink during the gap is delayed by as much; a growth is not.
 * - Leases: an answer to a heartbeat sent at t grants
 *   the share until t + min(staleAfter x heartbeat, validFor) on our clock,
 *   which is no later than the store stops counting us (it stamps the
 *   heartbeat with its TIME, after t). Past the lease the phase is
 *   STORE_LOST whatever the daemon is doing, and the kernel switches by
 *   itself. Each heartbeat tells the store our per-member fallback rate; a
 *   lapsed member's fallback stays reserved for fallbackFor, and the kernel
 *   closes its buckets when that ends.
 * - Unknown is not alone: before the first answer the size is the adopted
 *   (pinned) one, else maxMembers, else unknown (0), and an unknown size
 *   grants nothing.
 * - A shrink is taken one answer late (the larger of the last two answers),
 *   so a store clock that jumps forward, or a failover to a server whose
 *   clock differs, cannot make every other member look dead at once.
 * - resumedRampUp: the ramp key is read once, on the first heartbeat, before
 *   anything is written to it; until then nothing is saved, and while a found
 *   level has not been taken the saved level is max(it, pool_rate), so an
 *   early crash does not lose it. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include "log.h"
#include "pool.h"
#include "store.h"
#include "storeq.h"

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
	double *grants;                 /* demand: ids[k]'s grant from the last answer, NAN none */
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
	struct group *g;
	int n_groups;
	bool started, left, bad_input_logged;
	uint64_t start_ns;
	int evfd;                       /* readable when a store worker finished a round trip */
};

const char *kt_pool_phase_name(enum kt_pool_phase ph)
{
	switch (ph) {
	case KT_POOL_AGREED:
		return "agreed";
	case KT_POOL_DISAGREED:
		return "disagreed";
	case KT_POOL_JOINING:
		return "joining";
	case KT_POOL_STORE_LOST:
		return "store-lost";
	}
	return "?";
}

/* ---- store grouping ---- */

static bool str_eq(const char *a, const char *b)
{
	if (!a || !b)
		return a == b;
	return strcmp(a, b) == 0;
}

static bool auth_eq(const struct kt_auth_cfg *a, const struct kt_auth_cfg *b)
{
	return str_eq(a->username, b->username) && str_eq(a->password, b->password);
}

static bool tls_eq(const struct kt_tls_cfg *a, const struct kt_tls_cfg *b)
{
	return a->enabled == b->enabled && str_eq(a->ca_cert, b->ca_cert) && str_eq(a->cert, b->cert) &&
	       str_eq(a->key, b->key) && a->insecure_skip_verify == b->insecure_skip_verify;
}

static const char *prefix_of(const struct kt_store_cfg *s)
{
	return s->key_prefix ? s->key_prefix : "kthrottle";
}

/* Same server, same keys, same cadence: one connection and one request. */
static bool same_store(const struct kt_store_cfg *a, const struct kt_store_cfg *b)
{
	int i;

	if (a->kind != b->kind || a->redis_mode != b->redis_mode || !str_eq(a->host, b->host) ||
	    a->port != b->port || a->db != b->db || !auth_eq(&a->redis_auth, &b->redis_auth) ||
	    !tls_eq(&a->redis_tls, &b->redis_tls) || a->n_endpoints != b->n_endpoints ||
	    !str_eq(a->master_name, b->master_name) || !auth_eq(&a->sentinel_auth, &b->sentinel_auth) ||
	    !tls_eq(&a->sentinel_tls, &b->sentinel_tls) || a->heartbeat_ns != b->heartbeat_ns ||
	    strcmp(prefix_of(a), prefix_of(b)) != 0)
		return false;
	for (i = 0; i < a->n_endpoints && i < KT_MAX_ENDPOINTS; i++)
		if (!str_eq(a->endpoint_host[i], b->endpoint_host[i]) ||
		    a->endpoint_port[i] != b->endpoint_port[i])
			return false;
	return true;
}

/* ---- create / destroy ---- */

static void free_ids(struct lim *l)
{
	for (int i = 0; i < l->n_ids; i++)
		free(l->ids[i]);
	free(l->ids);
	free(l->grants);
	l->ids = NULL;
	l->grants = NULL;
	l->n_ids = 0;
}

void kt_pool_destroy(struct kt_pool *p)
{
	int i;

	if (!p)
		return;
	for (i = 0; i < p->n_groups; i++) {
		struct group *g = &p->g[i];

		kt_storeq_close(g->q);
		free(g->lims);
	}
	for (i = 0; i < p->n; i++)
		free_ids(&p->l[i]);
	if (p->evfd >= 0)
		close(p->evfd);
	free(p->g);
	free(p->l);
	free(p);
}

static int new_group(struct kt_pool *p, const struct kt_store_cfg *s, const char *limit, int n_limits,
		     char *err, size_t errlen)
{
	struct group *g = &p->g[p->n_groups];
	struct kt_store *st;
	char e[KT_ERR_LEN];
	int ret;

	g->lims = calloc((size_t)n_limits, sizeof(*g->lims));
	/* counted before the store opens so destroy frees the arrays on any failure */
	p->n_groups++;
	if (!g->lims) {
		snprintf(err, errlen, "pool: limit %s: out of memory", limit);
		return -ENOMEM;
	}
	if (p->evfd < 0) {
		p->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (p->evfd < 0) {
			ret = -errno;
			snprintf(err, errlen, "pool: eventfd: %s", strerror(errno));
			return ret;
		}
	}
	ret = kt_store_open(&st, s, e, sizeof(e));
	if (!ret)
		ret = kt_storeq_open(&g->q, st, p->evfd, e, sizeof(e));
	if (ret) {
		size_t fl = s->file ? strlen(s->file) : 0;

		/* "FILE:LINE: FIELD: ..." already says where; the limit is noise */
		if (fl && !strncmp(e, s->file, fl) && e[fl] == ':')
			snprintf(err, errlen, "%s", e);
		else
			snprintf(err, errlen, "limit %s: %s", limit, e);
		return ret;
	}
	g->heartbeat_ns = s->heartbeat_ns;
	if (s->redis_mode == KT_REDIS_SENTINEL) {
		snprintf(g->label, sizeof(g->label), "sentinel master %s", s->master_name);
	} else {
		snprintf(g->host, sizeof(g->host), "%s", s->host);
		g->port = s->port;
		snprintf(g->label, sizeof(g->label), "redis %s:%d", s->host, s->port);
	}
	return 0;
}

int kt_pool_create(struct kt_pool **out, const struct kt_config *cfg, char *err, size_t errlen)
{
	struct kt_pool *p = NULL;
	int ret, i, j;

	*out = NULL;
	/* 0 limits: a node with tag limits only */
	if (!cfg || (cfg->n_limits && !cfg->limits) || cfg->n_limits < 0 || cfg->n_limits > KT_MAX_LIMITS) {
		snprintf(err, errlen, "pool: config has %d limits, need 0..%d", cfg ? cfg->n_limits : 0,
			 KT_MAX_LIMITS);
		return -EINVAL;
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		goto oom;
	p->evfd = -1;
	p->l = calloc((size_t)cfg->n_limits + 1, sizeof(*p->l));
	p->g = calloc((size_t)cfg->n_limits + 1, sizeof(*p->g));
	if (!p->l || !p->g)
		goto oom;
	p->n = cfg->n_limits;
	for (i = 0; i < p->n; i++) {
		const struct kt_limit_cfg *lc = &cfg->limits[i];
		const struct kt_store_cfg *s = &lc->store;
		struct lim *l = &p->l[i];

		snprintf(l->name, sizeof(l->name), "%s", lc->name);
		l->kind = s->kind;
		l->rl = lc->rl;
		l->static_size = s->static_pool_size;
		l->valid_for_ns = s->valid_for_ns;
		l->on_failure = s->on_failure;
		l->stale_ns = (uint64_t)(s->stale_after > 0 ? s->stale_after : 1) * s->heartbeat_ns;
		l->lease_ns = l->valid_for_ns < l->stale_ns ? l->valid_for_ns : l->stale_ns;
		l->hold_ns = s->on_failure == KT_FAIL_CLOSED ? 0 : s->fallback_for_ns;
		l->max_members = s->max_members;
		l->burst = lc->burst;
		l->group = -1;
		l->demand = lc->share == KT_SHARE_DEMAND && s->kind == KT_STORE_REDIS;
		l->v.size = 1;
		l->v.live = 1;
		if (lc->rl.strict.on) {
			/* no pool: each admission is a permit from the store
			 * (strict.c), so there is no share to agree on */
			l->kind = KT_STORE_LOCAL;
			l->v.phase = KT_POOL_AGREED;
			l->v.agree = true;
			continue;
		}
		switch (s->kind) {
		case KT_STORE_LOCAL:
			l->v.phase = KT_POOL_AGREED;
			l->v.agree = true;
			continue;
		case KT_STORE_STATIC:
			if (s->static_pool_size < 1) {
				snprintf(err, errlen, "limit %s: store (line %d): static poolSize %d must be >= 1",
					 l->name, s->line, s->static_pool_size);
				ret = -EINVAL;
				goto fail;
			}
			l->v.phase = KT_POOL_AGREED;
			l->v.agree = true;
			l->v.size = l->v.live = s->static_pool_size;
			continue;
		case KT_STORE_REDIS:
			break;
		default:
			snprintf(err, errlen, "limit %s: store (line %d): unknown store kind %d", l->name,
				 s->line, (int)s->kind);
			ret = -EINVAL;
			goto fail;
		}
		if (s->heartbeat_ns < NS_PER_MS || s->valid_for_ns <= s->heartbeat_ns) {
			snprintf(err, errlen,
				 "limit %s: store (line %d): heartbeat must be >= 1ms and shorter than validFor",
				 l->name, s->line);
			ret = -EINVAL;
			goto fail;
		}
		l->v.phase = KT_POOL_JOINING;
		l->v.agree = false;
		l->v.live = 0; /* nothing seen yet */
		l->v.size = l->max_members; /* never "alone": unknown (0) unless bounded */
		l->v.max_members = l->max_members;
		l->res = lc->rl.resumed_ramp_up ? RES_WAIT : RES_OFF;
		for (j = 0; j < p->n_groups; j++)
			if (same_store(&cfg->limits[p->g[j].lims[0]].store, s))
				break;
		if (j == p->n_groups) {
			ret = new_group(p, s, l->name, p->n, err, errlen);
			if (ret)
				goto fail;
		}
		l->group = j;
		p->g[j].lims[p->g[j].n++] = i;
	}
	*out = p;
	return 0;
oom:
	snprintf(err, errlen, "pool: out of memory");
	ret = -ENOMEM;
fail:
	kt_pool_destroy(p);
	return ret;
}

/* ---- views ---- */

static void set_phase(struct lim *l, enum kt_pool_phase ph, uint64_t now)
{
	if (l->v.phase == ph)
		return;
	if (ph == KT_POOL_STORE_LOST)
		kt_warn("pool: limit %s: lease ran out (no store answer for %.1f s): "
			"onStoreFailure %s applies (last size %d)",
			l->name, (double)l->lease_ns / 1e9, kt_store_failure_name(l->on_failure),
			l->v.size);
	else
		kt_info("pool: limit %s: %s -> %s, size %d (live %d)", l->name,
			kt_pool_phase_name(l->v.phase), kt_pool_phase_name(ph), l->v.size, l->v.live);
	l->v.phase = ph;
	l->v.phase_since_ns = now;
}

static uint64_t since(uint64_t now, uint64_t t)
{
	return now > t ? now - t : 0;
}

static double member_fallback(const struct lim *l, double pool_rate);

/* The lease an answer to a heartbeat sent at `sent` grants. */
static void grant_lease(struct lim *l, uint64_t sent)
{
	l->v.lease_until_ns = sent + l->lease_ns;
	/* open never ends its fallback: the one policy that may exceed max */
	l->v.fallback_until_ns = l->on_failure == KT_FAIL_OPEN ? 0 : l->v.lease_until_ns + l->hold_ns;
}

static void apply_answer(struct kt_pool *p, struct lim *l, const struct kt_pool_answer *a, uint64_t now,
			 uint64_t sent, bool reconnected)
{
	const struct group *g = &p->g[l->group];
	enum kt_pool_phase ph;
	int size, raw, old = l->v.size;
	bool agree;

	/* the membership may have been lost: pruned during a long gap, or a new
	 * server; a restarted daemon that continued a pinned lease does not know
	 * how long its gap was, and the store may have restarted empty */
	if ((l->answered && (reconnected || since(now, l->v.last_answer_ns) > l->stale_ns)) ||
	    (l->adopted && l->v.size > 1)) {
		l->floor = l->v.size;
		l->floor_until_ns = now + KT_STORE_BACKOFF_MAX_MS * NS_PER_MS + 3 * g->heartbeat_ns;
	}
	if (l->floor && now >= l->floor_until_ns)
		l->floor = 0;

	raw = size = a->size > 1 ? a->size : 1;
	/* a shrink is believed one answer late (acting on the larger size
	 * meanwhile, as in DISAGREE) */
	if ((l->answered || l->adopted) && l->prev_size > size)
		size = l->prev_size;
	l->prev_size = raw;
	agree = a->agree && size == raw;
	if (agree) {
		l->ever_agreed = true;
		ph = KT_POOL_AGREED;
	} else {
		ph = l->ever_agreed ? KT_POOL_DISAGREED : KT_POOL_JOINING;
	}
	if (l->floor > size) {
		size = l->floor;
		if (ph == KT_POOL_AGREED)
			ph = KT_POOL_DISAGREED;
	}
	l->answered = true;
	l->adopted = false;
	l->v.agree = agree;
	l->v.live = a->live;
	l->v.size = size;
	l->v.reserved = a->reserved;
	l->v.last_answer_ns = now;
	/* a size above maxMembers is an anomaly (a misconfiguration, or a
	 * writer to the store inflating the pool): acted on, since that only
	 * shrinks shares, and named */
	if (l->max_members > 0 && raw > l->max_members) {
		if (!l->v.over_max)
			kt_warn("pool: limit %s: the store answered size %d, above maxMembers %d: "
				"acting on it (shares shrink), check the store's keys",
				l->name, raw, l->max_members);
		l->v.over_max = raw;
	} else if (l->v.over_max) {
		kt_info("pool: limit %s: size %d within maxMembers %d again", l->name, raw, l->max_members);
		l->v.over_max = 0;
	}
	/* the store reserves what we told it; the kernel may run at less when
	 * the answer grew the pool (never at more) */
	l->v.fallback_member = member_fallback(l, l->sent_pool_rate);
	if (l->v.fallback_member > l->sent_fallback)
		l->v.fallback_member = l->sent_fallback;
	l->v.closed = false;
	grant_lease(l, sent);
	if (ph == l->v.phase && ph == KT_POOL_AGREED && size != old)
		kt_info("pool: limit %s: agreed size %d -> %d", l->name, old, size);
	set_phase(l, ph, now);
}

/* ---- heartbeat ---- */

static bool has_id(const char *const *ids, int n, const char *id)
{
	for (int i = 0; i < n; i++)
		if (ids[i] && strcmp(ids[i], id) == 0)
			return true;
	return false;
}

/* Members of local[i] usable this tick (0 on malformed input, logged once). */
static int local_members(struct kt_pool *p, const struct kt_pool_local *lo, int i)
{
	int n = lo->n_members;

	if (n == 0)
		return 0;
	if (n < 0 || n > KT_STORE_MAX_POOL || !lo->member_ids) {
		if (!p->bad_input_logged)
			kt_err("pool: limit %s: %d member ids given (ids %s)", p->l[i].name, n,
			       lo->member_ids ? "set" : "NULL");
		p->bad_input_logged = true;
		return 0;
	}
	return n;
}

/* Remembers the ids sent; the ones that disappeared go into the job to be
 * deregistered at once. */
static void sync_ids(struct lim *l, struct job_lim *jl, const char *const *ids, int n)
{
	double *grants = NULL;
	char **keep = NULL;
	int i;
	bool same = n == l->n_ids;

	for (i = 0; same && i < n; i++)
		same = strcmp(ids[i], l->ids[i]) == 0;
	if (same)
		return;
	if (l->n_ids) {
		jl->gone = calloc((size_t)l->n_ids, sizeof(*jl->gone));
		if (!jl->gone)
			goto oom;
		for (i = 0; i < l->n_ids; i++)
			if (!has_id(ids, n, l->ids[i])) {
				/* the job takes the copy over */
				jl->gone[jl->n_gone++] = l->ids[i];
				l->ids[i] = NULL;
			}
	}
	if (n) {
		keep = calloc((size_t)n, sizeof(*keep));
		if (!keep)
			goto oom;
		for (i = 0; i < n; i++)
			if (!(keep[i] = strdup(ids[i])))
				goto oom;
		if (l->demand && !(grants = calloc((size_t)n, sizeof(*grants))))
			goto oom;
		/* a member keeps its grant; a new one has none until answered */
		for (i = 0; grants && i < n; i++) {
			int k;

			grants[i] = NAN;
			for (k = 0; k < l->n_ids; k++)
				if (l->ids[k] && !strcmp(l->ids[k], ids[i])) {
					grants[i] = l->grants[k];
					break;
				}
		}
	}
	free_ids(l);
	l->ids = keep;
	l->grants = grants;
	l->n_ids = n;
	return;
oom:
	/* forget rather than half-remember; the next heartbeat retries */
	if (keep)
		for (i = 0; i < n; i++)
			free(keep[i]);
	free(keep);
	free(grants);
	free_ids(l);
	kt_err("pool: limit %s: out of memory tracking member ids", l->name);
}

/* The saved ramp levels the job read (before anything wrote to them). */
static void take_resumes(struct kt_pool *p, struct group *g, const struct hb_job *job)
{
	for (int k = 0; k < g->n; k++) {
		struct lim *l = &p->l[g->lims[k]];
		const struct job_lim *jl = &job->jl[k];

		if (!jl->load_ramp || l->res != RES_WAIT)
			continue;
		if (jl->ramp_ret) {
			/* the server answered but the value is unusable: start from min, overwrite it */
			kt_warn("pool: limit %s: saved ramp level ignored: %s", l->name, jl->ramp_err);
			l->res = RES_DONE;
		} else if (jl->ramp_rate >= 0) {
			kt_info("pool: limit %s: resuming the ramp at %g (saved within ttl)", l->name,
				jl->ramp_rate);
			l->res = RES_FOUND;
			l->res_rate = jl->ramp_rate;
		} else {
			l->res = RES_DONE;
		}
	}
}

static double save_level(const struct lim *l, double pool_rate)
{
	if (l->res == RES_OFF || l->res == RES_WAIT || !isfinite(pool_rate) || pool_rate < 0)
		return -1;
	if (l->res == RES_FOUND && l->res_rate > pool_rate)
		return l->res_rate;
	return pool_rate;
}

static uint64_t stale_ms(const struct lim *l)
{
	uint64_t ms = l->stale_ns / NS_PER_MS;

	return ms ? ms : 1;
}

static uint64_t ttl_ms(const struct lim *l)
{
	uint64_t ms = l->rl.ttl_ns / NS_PER_MS;

	return ms ? ms : 1;
}

/* The share left for live members once lapsed members' fallback is held. */
static double available(const struct lim *l, double pool_rate)
{
	double avail = pool_rate - l->v.reserved;

	return avail > 0 ? avail : 0;
}

/* Per-member rate of this node's buckets once the lease lapses (what the
 * store is told to reserve for them). Unknown size: nothing. */
static double member_fallback(const struct lim *l, double pool_rate)
{
	if (l->v.size < 1 || !isfinite(pool_rate) || pool_rate <= 0)
		return 0;
	switch (l->on_failure) {
	case KT_FAIL_CONSERVATIVE:
		return l->rl.min > 0 ? l->rl.min / l->v.size : 0;
	case KT_FAIL_OPEN:
		return available(l, pool_rate) / l->v.size;
	case KT_FAIL_CLOSED:
		break;
	}
	return 0;
}

static void free_job(void *arg)
{
	struct hb_job *job = arg;
	int i, k;

	if (!job)
		return;
	for (k = 0; job->jl && k < job->n; k++) {
		for (i = 0; i < job->jl[k].n_gone; i++)
			free(job->jl[k].gone[i]);
		free(job->jl[k].gone);
	}
	for (i = 0; i < job->n_ids; i++)
		free(job->ids[i]);
	free(job->ids);
	free(job->grants);
	free(job->jl);
	free(job->reqs);
	free(job->ans);
	free(job->mbuf);
	free(job);
}

/* On the store's worker thread: nothing here may touch the pool. */
static void run_job(struct kt_store *st, void *arg)
{
	struct hb_job *job = arg;
	int k;

	for (k = 0; k < job->n; k++) {
		struct job_lim *jl = &job->jl[k];

		if (!jl->load_ramp)
			continue;
		jl->ramp_ret = kt_store_load_ramp(st, jl->name, &jl->ramp_rate, jl->ramp_err,
						  sizeof(jl->ramp_err));
		if (jl->ramp_ret && !kt_store_connected(st)) {
			job->unreachable = true;
			snprintf(job->err, sizeof(job->err), "%s", jl->ramp_err);
			goto out;
		}
		/* read before written, as save_level does once the pool knows:
		 * a level found and not yet taken is kept, an unusable one is
		 * overwritten */
		if (isfinite(jl->pool_rate) && jl->pool_rate >= 0)
			job->reqs[k].save_ramp = !jl->ramp_ret && jl->ramp_rate > jl->pool_rate ?
							 jl->ramp_rate : jl->pool_rate;
	}
	for (k = 0; k < job->n; k++) {
		struct job_lim *jl = &job->jl[k];

		if (jl->n_gone)
			jl->leave_ret = kt_store_leave(st, jl->name, (const char *const *)jl->gone,
						       jl->n_gone, jl->leave_err, sizeof(jl->leave_err));
	}
	job->ret = kt_store_heartbeat_many(st, job->reqs, job->n, job->ans, job->err, sizeof(job->err));
out:
	kt_store_get_stats(st, &job->stats);
	kt_store_get_errors(st, &job->errs);
}

static double demand_of(const struct kt_pool_local *lo, int j)
{
	double d = lo->member_demand ? lo->member_demand[j] : 0;

	return isfinite(d) && d > 0 ? (d < 1e15 ? d : 1e15) : 0;
}

/* share: demand: what an idle member keeps so it can start (a tenth of an
 * equal share); it grows past it once its demand is reported. */
static double demand_floor(const struct lim *l, double pool_rate)
{
	int size = l->v.size > 0 ? l->v.size : (l->v.live > 0 ? l->v.live : 1);

	return available(l, pool_rate) / size / KT_DEMAND_FLOOR_DIV;
}

/* Builds the round trip from this tick's view and hands it to the worker. */
static void heartbeat(struct kt_pool *p, struct group *g, uint64_t now, const struct kt_pool_local *local)
{
	struct hb_job *job;
	int k, j, total = 0, off = 0;

	if (kt_storeq_busy(g->q)) {
		/* the last round trip has not come back: never queue behind a
		 * slow store; the leases it would renew run out meanwhile */
		g->skipped++;
		kt_debug("pool: %s: heartbeat skipped, the previous one is still in flight", g->label);
		return;
	}
	for (k = 0; k < g->n; k++)
		total += local_members(p, &local[g->lims[k]], g->lims[k]);
	job = calloc(1, sizeof(*job));
	if (!job)
		goto oom;
	job->sent_ns = now;
	job->n = g->n;
	job->jl = calloc((size_t)g->n, sizeof(*job->jl));
	job->reqs = calloc((size_t)g->n, sizeof(*job->reqs));
	job->ans = calloc((size_t)g->n, sizeof(*job->ans));
	job->mbuf = calloc((size_t)total + 1, sizeof(*job->mbuf));
	job->ids = calloc((size_t)total + 1, sizeof(*job->ids));
	job->grants = calloc((size_t)total + 1, sizeof(*job->grants));
	if (!job->jl || !job->reqs || !job->ans || !job->mbuf || !job->ids || !job->grants)
		goto oom;
	for (k = 0; k < g->n; k++) {
		int i = g->lims[k];
		struct lim *l = &p->l[i];
		const struct kt_pool_local *lo = &local[i];
		int n = local_members(p, lo, i);
		struct kt_pool_req *q = &job->reqs[k];
		struct job_lim *jl = &job->jl[k];

		snprintf(jl->name, sizeof(jl->name), "%s", l->name);
		jl->load_ramp = l->res == RES_WAIT;
		jl->pool_rate = lo->pool_rate;
		sync_ids(l, jl, lo->member_ids, n);
		for (j = 0; j < n; j++) {
			if (!(job->ids[job->n_ids] = strdup(lo->member_ids[j])))
				goto oom;
			job->mbuf[off + j].id = job->ids[job->n_ids++];
			job->mbuf[off + j].reported_size = KT_POOL_REPORT_LIVE;
			job->mbuf[off + j].demand = demand_of(lo, j);
		}
		jl->off = off;
		jl->n = n;
		if (l->demand && isfinite(lo->pool_rate) && lo->pool_rate > 0) {
			/* the script divides the pool rate less what lapsed members hold */
			q->pool_rate = lo->pool_rate;
			q->floor_rate = demand_floor(l, lo->pool_rate);
			q->recompute_ms = g->heartbeat_ns / NS_PER_MS / 2;
			q->grants = &job->grants[off];
		}
		q->limit = jl->name;
		q->members = n ? &job->mbuf[off] : NULL;
		q->n_members = n;
		q->stale_ms = stale_ms(l);
		/* while the saved level is being read nothing overwrites it */
		q->save_ramp = save_level(l, lo->pool_rate);
		q->ramp_ttl_ms = ttl_ms(l);
		q->hold_ms = l->hold_ns / NS_PER_MS;
		l->sent_fallback = member_fallback(l, lo->pool_rate);
		l->sent_pool_rate = lo->pool_rate;
		q->fallback_rate = l->sent_fallback;
		off += n;
	}
	if (kt_storeq_post(g->q, run_job, job, free_job) == 0)
		return;
	g->skipped++;
	free_job(job);
	return;
oom:
	free_job(job);
	kt_err("pool: %s: out of memory building a heartbeat", g->label);
}

/* Each kind of store error once per episode (it ends when a heartbeat is
 * answered), so a wrong-type key is named even when the episode began with
 * a timeout. */
static void log_errors(struct group *g, const struct hb_job *job)
{
	const struct kt_store_errors *e = &job->errs;

	if (!e->since_ns) {
		g->logged_kinds = 0;
		return;
	}
	if (e->kind == KT_SERR_NONE || (g->logged_kinds & (1u << e->kind)))
		return;
	g->logged_kinds |= 1u << e->kind;
	kt_warn("pool: %s: store error (%s), keeping the last view for validFor: %s", g->label,
		kt_store_err_kind_name(e->kind), e->text);
}

/* A round trip came back: answers, saved ramp levels, deregistrations. */
static bool finish_job(struct kt_pool *p, struct group *g, struct hb_job *job, uint64_t now)
{
	bool reconnected;
	int k;

	log_errors(g, job);
	if (job->unreachable) {
		if (!g->failing)
			kt_warn("pool: %s: reading saved ramp levels: %s", g->label, job->err);
		g->failing = true;
		return false;
	}
	take_resumes(p, g, job);
	for (k = 0; k < g->n; k++) {
		const struct job_lim *jl = &job->jl[k];

		if (!jl->n_gone)
			continue;
		if (jl->leave_ret)
			kt_debug("pool: limit %s: deregistering %d members: %s (they expire instead)",
				 jl->name, jl->n_gone, jl->leave_err);
		else
			kt_info("pool: limit %s: %d members left", jl->name, jl->n_gone);
	}
	if (job->ret && job->ret != KT_STORE_PARTIAL) {
		g->failing = true; /* log_errors named it */
		return false;
	}
	if (g->failing)
		kt_info("pool: %s: store answers again", g->label);
	g->failing = false;
	reconnected = g->connects && job->stats.connects != g->connects;
	g->connects = job->stats.connects;
	for (k = 0; k < g->n; k++) {
		struct lim *l = &p->l[g->lims[k]];

		/* cluster: a master down fails its own limits only; theirs run
		 * out their lease as if the whole store were gone */
		if (job->ret == KT_STORE_PARTIAL && job->ans[k].status) {
			if (!l->unanswered) {
				kt_warn("pool: limit %s: its slot went unanswered, keeping the last view for "
					"validFor: %s",
					l->name, job->err);
				l->unanswered_since_ns = now;
			}
			l->unanswered = true;
			continue;
		}
		if (l->unanswered)
			kt_info("pool: limit %s: its slot answers again", l->name);
		l->unanswered = false;
		apply_answer(p, l, &job->ans[k], now, job->sent_ns, reconnected);
		/* ids are what this job sent: sync_ids runs only when one is posted */
		if (l->demand && l->grants && job->reqs[k].grants && job->jl[k].n == l->n_ids)
			for (int j = 0; j < l->n_ids; j++)
				l->grants[j] = job->grants[job->jl[k].off + j];
	}
	return true;
}

bool kt_pool_poll(struct kt_pool *p, uint64_t now)
{
	bool changed = false;
	uint64_t cnt;

	if (!p)
		return false;
	if (p->evfd >= 0 && read(p->evfd, &cnt, sizeof(cnt)) < 0 && errno != EAGAIN)
		kt_debug("pool: reading the store eventfd: %s", strerror(errno));
	for (int k = 0; k < p->n_groups; k++) {
		struct group *g = &p->g[k];
		struct hb_job *job = kt_storeq_take(g->q);

		if (!job)
			continue;
		if (!p->left)
			changed |= finish_job(p, g, job, now);
		free_job(job);
	}
	return changed;
}

int kt_pool_fd(const struct kt_pool *p)
{
	return p ? p->evfd : -1;
}

bool kt_pool_wait(struct kt_pool *p, uint64_t now, uint64_t timeout_ns)
{
	if (!p)
		return false;
	for (int k = 0; k < p->n_groups; k++)
		kt_storeq_wait(p->g[k].q, timeout_ns);
	return kt_pool_poll(p, now);
}

/* Is `local` index-aligned with the pool's limits? (logged once if not) */
static bool local_ok(struct kt_pool *p, const struct kt_pool_local *local, int n)
{
	if (!local || n != p->n) {
		if (!p->bad_input_logged)
			kt_err("pool: tick with %d limits, the pool has %d", local ? n : -1, p->n);
		p->bad_input_logged = true;
		return false;
	}
	for (int i = 0; i < n; i++) {
		if (local[i].cfg && strcmp(local[i].cfg->name, p->l[i].name) != 0) {
			if (!p->bad_input_logged)
				kt_err("pool: tick: limit %d is '%s', the pool has '%s'", i,
				       local[i].cfg->name, p->l[i].name);
			p->bad_input_logged = true;
			return false;
		}
	}
	return true;
}

/* Local and static sizes follow this node's members at once. */
static void count_members(struct kt_pool *p, const struct kt_pool_local *local)
{
	for (int i = 0; i < p->n; i++) {
		struct lim *l = &p->l[i];
		int m = local_members(p, &local[i], i);

		if (m < 1)
			m = 1;
		if (l->kind == KT_STORE_LOCAL)
			l->v.size = l->v.live = m;
		else if (l->kind == KT_STORE_STATIC)
			l->v.size = l->v.live = m > l->static_size ? m : l->static_size;
	}
}

void kt_pool_members(struct kt_pool *p, const struct kt_pool_local *local, int n)
{
	if (p && !p->left && local_ok(p, local, n))
		count_members(p, local);
}

void kt_pool_tick(struct kt_pool *p, uint64_t now, const struct kt_pool_local *local, int n)
{
	int i, k;

	if (!p || p->left || !local_ok(p, local, n))
		return;
	/* answers that came back since the last event (kt_pool_fd) */
	kt_pool_poll(p, now);
	if (!p->started) {
		p->started = true;
		p->start_ns = now;
		for (i = 0; i < p->n; i++)
			p->l[i].v.phase_since_ns = now;
	}
	count_members(p, local);
	for (i = 0; i < p->n; i++) {
		struct lim *l = &p->l[i];

		if (l->kind == KT_STORE_REDIS && !l->answered && !l->adopted && !l->v.lease_until_ns) {
			/* maxMembers stands in for an answer from start-up, its
			 * bound standing in for the reserve; an unknown size
			 * grants nothing anyway */
			grant_lease(l, now);
			l->v.fallback_member = member_fallback(l, local[i].pool_rate);
		}
	}
	for (k = 0; k < p->n_groups; k++) {
		struct group *g = &p->g[k];

		/* a clock that jumped back must not postpone heartbeats for long */
		if (!g->started || now >= g->next_ns || g->next_ns - now > g->heartbeat_ns) {
			g->next_ns = g->started ? g->next_ns + g->heartbeat_ns : now + g->heartbeat_ns;
			if (g->next_ns <= now || g->next_ns - now > g->heartbeat_ns)
				g->next_ns = now + g->heartbeat_ns;
			g->started = true;
			heartbeat(p, g, now, local);
		}
		/* the lease runs out whatever the reason: store down, a frozen
		 * connection, or this daemon blocked */
		for (i = 0; i < g->n; i++) {
			struct lim *l = &p->l[g->lims[i]];

			if (l->v.phase != KT_POOL_STORE_LOST && now > l->v.lease_until_ns)
				set_phase(l, KT_POOL_STORE_LOST, now);
			if (l->v.phase == KT_POOL_STORE_LOST && !l->v.closed && l->v.fallback_until_ns &&
			    now > l->v.fallback_until_ns) {
				l->v.closed = true;
				kt_warn("pool: limit %s: fallbackFor ran out: closed until the store answers",
					l->name);
			}
		}
	}
}

const struct kt_pool_view *kt_pool_view(const struct kt_pool *p, int i)
{
	if (!p || i < 0 || i >= p->n)
		return NULL;
	return &p->l[i].v;
}

double kt_pool_bucket_rate(const struct kt_pool *p, int i, double pool_rate, int served)
{
	const struct lim *l;
	enum kt_pool_phase ph;
	int size;

	if (!p || i < 0 || i >= p->n || served < 1 || !isfinite(pool_rate) || pool_rate <= 0)
		return 0;
	l = &p->l[i];
	if (l->v.size < 1)
		return 0; /* unknown is not alone */
	size = l->v.size;
	/* a stale view can be smaller than this node's own members: never hand out
	 * more than the pool rate */
	if (served > size)
		served = size;
	ph = l->v.phase;
	/* past the lease: exactly what the kernel does, the fallback the store
	 * holds for us, then closed */
	if (ph == KT_POOL_STORE_LOST)
		return l->v.closed ? 0 : l->v.fallback_member * served;
	pool_rate = l->kind == KT_STORE_REDIS ? available(l, pool_rate) : pool_rate;
	if (ph == KT_POOL_JOINING && l->rl.min < pool_rate)
		pool_rate = l->rl.min > 0 ? l->rl.min : 0;
	return pool_rate * served / size;
}

void kt_pool_bucket_policy(const struct kt_pool *p, int i, double pool_rate, int served,
			   struct kt_bucket_policy *out)
{
	const struct lim *l;
	int size;

	memset(out, 0, sizeof(*out));
	out->burst = 1;
	if (!p || i < 0 || i >= p->n || served < 1)
		return;
	l = &p->l[i];
	size = l->v.size;
	if (served > size && size > 0)
		served = size;
	out->rate = kt_pool_bucket_rate(p, i, pool_rate, served);
	if (size > 0)
		out->burst = l->burst * served / size;
	if (out->burst < 1)
		out->burst = 1;
	if (l->kind != KT_STORE_REDIS)
		return; /* no lease: the rate holds until the daemon changes it */
	out->valid_until = l->v.lease_until_ns;
	out->fallback_until = l->v.fallback_until_ns;
	/* exactly what the store reserves for us (told with the heartbeat) */
	out->fallback_rate = l->v.fallback_member * served;
	/* the burst scales with the rate, so the tolerance in ns does not grow
	 * at the switch and free tokens (see struct kt_bucket) */
	out->fallback_burst = out->rate > 0 && out->fallback_rate < out->rate
				      ? out->burst * out->fallback_rate / out->rate
				      : out->burst;
	/* no lease yet: the kernel must not run ahead of one */
	if (!out->valid_until)
		out->rate = out->fallback_rate = 0;
}

/* share: demand: one member's rate (see kt_pool_members_policy). */
static double member_rate(const struct lim *l, const char *id, double pool_rate)
{
	double floor_rate, joining;

	if (l->v.size < 1 || !isfinite(pool_rate) || pool_rate <= 0)
		return 0;
	if (l->v.phase == KT_POOL_STORE_LOST)
		return l->v.closed ? 0 : l->v.fallback_member;
	for (int k = 0; l->grants && k < l->n_ids; k++)
		if (!strcmp(l->ids[k], id) && isfinite(l->grants[k]))
			return l->grants[k];
	/* not answered for yet: the floor, no more than an equal joiner */
	floor_rate = demand_floor(l, pool_rate);
	joining = (l->rl.min < available(l, pool_rate) ? l->rl.min : available(l, pool_rate)) /
		  l->v.size;
	return l->v.phase == KT_POOL_JOINING && joining < floor_rate ? joining : floor_rate;
}

void kt_pool_members_policy(const struct kt_pool *p, int i, double pool_rate, const char *const *ids,
			    int n, struct kt_bucket_policy *out)
{
	const struct lim *l;
	double rate = 0, avail;

	kt_pool_bucket_policy(p, i, pool_rate, n, out);
	if (!p || i < 0 || i >= p->n || n < 1 || !p->l[i].demand || !ids)
		return;
	l = &p->l[i];
	for (int k = 0; k < n; k++)
		rate += ids[k] ? member_rate(l, ids[k], pool_rate) : 0;
	avail = available(l, pool_rate);
	out->rate = rate;
	/* the burst follows the share, as an equal share's does */
	out->burst = avail > 0 ? l->burst * rate / avail : 1;
	if (out->burst < 1)
		out->burst = 1;
	out->fallback_burst = out->rate > 0 && out->fallback_rate < out->rate
				      ? out->burst * out->fallback_rate / out->rate
				      : out->burst;
	if (!out->valid_until)
		out->rate = out->fallback_rate = 0;
}

void kt_pool_adopt(struct kt_pool *p, int i, const struct kt_lease *pin, uint64_t now)
{
	struct lim *l;

	if (!p || !pin || i < 0 || i >= p->n)
		return;
	l = &p->l[i];
	if (l->kind != KT_STORE_REDIS || l->answered || !pin->size || !pin->lease_until ||
	    pin->size > KT_STORE_MAX_POOL)
		return;
	l->adopted = true;
	l->ever_agreed = pin->agreed != 0;
	l->v.size = l->prev_size = (int)pin->size;
	l->v.agree = pin->agreed != 0;
	l->v.reserved = (double)pin->reserved_urate / 1e6;
	l->v.fallback_member = (double)pin->fallback_urate / 1e6;
	/* never longer than this config would have granted from now */
	l->v.lease_until_ns = pin->lease_until < now + l->lease_ns ? pin->lease_until : now + l->lease_ns;
	l->v.fallback_until_ns = pin->fallback_until;
	if (l->on_failure == KT_FAIL_CLOSED)
		l->v.fallback_member = 0;
	set_phase(l, now > l->v.lease_until_ns ? KT_POOL_STORE_LOST
			: pin->agreed ? KT_POOL_AGREED : KT_POOL_DISAGREED, now);
	kt_info("pool: limit %s: continuing the pinned lease: size %u, %.1f s left", l->name, pin->size,
		now < l->v.lease_until_ns ? (double)(l->v.lease_until_ns - now) / 1e9 : 0.0);
}

static uint64_t to_urate(double r)
{
	return r > 0 && isfinite(r) ? (uint64_t)(r * 1e6) : 0;
}

bool kt_pool_lease(const struct kt_pool *p, int i, struct kt_lease *out)
{
	const struct lim *l;

	memset(out, 0, sizeof(*out));
	if (!p || i < 0 || i >= p->n)
		return false;
	l = &p->l[i];
	if (l->kind != KT_STORE_REDIS || !(l->answered || l->adopted) || l->v.size < 1)
		return false;
	out->lease_until = l->v.lease_until_ns;
	out->fallback_until = l->v.fallback_until_ns;
	out->fallback_urate = to_urate(l->v.fallback_member);
	out->reserved_urate = to_urate(l->v.reserved);
	out->size = (uint32_t)l->v.size;
	out->agreed = l->v.phase == KT_POOL_AGREED;
	return true;
}

bool kt_pool_take_resume(struct kt_pool *p, int i, double *rate)
{
	if (!p || i < 0 || i >= p->n || p->l[i].res != RES_FOUND)
		return false;
	*rate = p->l[i].res_rate;
	p->l[i].res = RES_DONE;
	return true;
}

/* ---- leave ---- */

static void leave_group(struct kt_pool *p, struct group *g, const struct kt_pool_local *local,
			bool deregister)
{
	struct kt_pool_req *reqs = NULL;
	struct kt_pool_answer *ans = NULL;
	struct kt_store *st;
	char e[KT_ERR_LEN];
	const char **ids = NULL;
	int k, j, n, nq = 0, ret;

	/* the stop path may block, bounded: first the round trip in flight */
	if (kt_storeq_wait(g->q, (KT_STORE_CALL_BUDGET_MS + 500) * NS_PER_MS) ||
	    !(st = kt_storeq_store(g->q))) {
		kt_warn("pool: %s: a heartbeat is still waiting for the store; not saving at exit",
			g->label);
		return;
	}
	free_job(kt_storeq_take(g->q));
	reqs = calloc((size_t)g->n, sizeof(*reqs));
	ans = calloc((size_t)g->n, sizeof(*ans));
	if (!reqs || !ans) {
		kt_err("pool: %s: out of memory leaving", g->label);
		goto out;
	}

	/* ramp levels first, all limits in one round trip (no members: nothing re-registers) */
	for (k = 0; k < g->n; k++) {
		struct lim *l = &p->l[g->lims[k]];
		double lvl = local ? save_level(l, local[g->lims[k]].pool_rate) : -1;

		if (lvl < 0)
			continue;
		reqs[nq] = (struct kt_pool_req){ .limit = l->name, .stale_ms = stale_ms(l),
						     .save_ramp = lvl, .ramp_ttl_ms = ttl_ms(l) };
		nq++;
	}
	if (nq) {
		ret = kt_store_heartbeat_many(st, reqs, nq, ans, e, sizeof(e));
		if (ret) {
			kt_warn("pool: %s: saving ramp levels at exit: %s", g->label, e);
			if (!kt_store_connected(st))
				goto out;
		}
	}
	if (!deregister)
		goto out;
	for (k = 0; k < g->n; k++) {
		struct lim *l = &p->l[g->lims[k]];
		int m = local ? local_members(p, &local[g->lims[k]], g->lims[k]) : 0;

		ids = calloc((size_t)(m + l->n_ids) + 1, sizeof(*ids));
		if (!ids) {
			kt_err("pool: limit %s: out of memory leaving", l->name);
			goto out;
		}
		n = 0;
		for (j = 0; j < m; j++)
			ids[n++] = local[g->lims[k]].member_ids[j];
		for (j = 0; j < l->n_ids; j++)
			if (!has_id(ids, n, l->ids[j]))
				ids[n++] = l->ids[j];
		ret = n ? kt_store_leave(st, l->name, ids, n, e, sizeof(e)) : 0;
		free(ids);
		if (ret) {
			kt_warn("pool: limit %s: deregistering at exit: %s (members expire instead)",
				l->name, e);
			if (!kt_store_connected(st))
				goto out; /* bounded: no more waiting on a dead store */
		}
	}
out:
	free(reqs);
	free(ans);
	kt_storeq_resnap(g->q);
}

void kt_pool_leave(struct kt_pool *p, const struct kt_pool_local *local, int n, bool deregister)
{
	if (!p || p->left)
		return;
	if (local && n != p->n) {
		kt_err("pool: leave with %d limits, the pool has %d; deregistering known members only", n,
		       p->n);
		local = NULL;
	}
	for (int k = 0; k < p->n_groups; k++)
		leave_group(p, &p->g[k], local, deregister);
	p->left = true;
}

/* ---- status ---- */

const char *kt_pool_store_state(const struct kt_pool *p, int i, uint64_t *since_ns, char *endpoint,
				size_t len)
{
	const struct group *g;
	struct kt_storeq_snap sn;

	if (since_ns)
		*since_ns = 0;
	if (endpoint && len)
		endpoint[0] = 0;
	if (!p || i < 0 || i >= p->n || p->l[i].group < 0)
		return "none";
	g = &p->g[p->l[i].group];
	kt_storeq_snapshot(g->q, &sn);
	if (since_ns)
		*since_ns = sn.since_ns;
	if (endpoint && len) {
		snprintf(endpoint, len, "%s", sn.endpoint);
		if (!endpoint[0] && g->host[0])
			snprintf(endpoint, len, "%s:%d", g->host, g->port);
	}
	/* cluster: the store answers, but not for this limit's slot */
	if (p->l[i].unanswered && sn.state == KT_STORE_UP) {
		if (since_ns)
			*since_ns = p->l[i].unanswered_since_ns;
		return kt_store_state_name(KT_STORE_DOWN);
	}
	return kt_store_state_name(sn.state);
}

void kt_pool_store_errors(const struct kt_pool *p, int i, struct kt_store_errors *out)
{
	struct kt_storeq_snap sn;

	memset(out, 0, sizeof(*out));
	if (!p || i < 0 || i >= p->n || p->l[i].group < 0)
		return;
	kt_storeq_snapshot(p->g[p->l[i].group].q, &sn);
	*out = sn.errors;
}

void kt_pool_inherit(struct kt_pool *p, int i, const struct kt_pool *old, int j)
{
	struct lim *l, *o;

	if (!p || !old || i < 0 || i >= p->n || j < 0 || j >= old->n)
		return;
	l = &p->l[i];
	o = &old->l[j];
	if (l->kind != KT_STORE_REDIS || o->kind != KT_STORE_REDIS)
		return;
	l->v = o->v;
	l->v.max_members = l->max_members; /* the new config's */
	l->answered = o->answered;
	l->adopted = o->adopted;
	l->prev_size = o->prev_size;
	l->ever_agreed = o->ever_agreed;
	l->floor = o->floor;
	l->floor_until_ns = o->floor_until_ns;
	/* demand: the members keep their grants across a reload */
	if (l->demand && o->demand && o->n_ids > 0 && !l->n_ids) {
		l->ids = calloc((size_t)o->n_ids, sizeof(*l->ids));
		l->grants = calloc((size_t)o->n_ids, sizeof(*l->grants));
		for (int k = 0; l->ids && l->grants && k < o->n_ids; k++) {
			if (!(l->ids[k] = strdup(o->ids[k])))
				break;
			l->grants[k] = o->grants ? o->grants[k] : NAN;
			l->n_ids = k + 1;
		}
		if (!l->ids || !l->grants || l->n_ids != o->n_ids)
			free_ids(l); /* out of memory: floors until the next answer */
	}
	/* resumedRampUp happens once per process, not per reload */
	if (l->res != RES_OFF)
		l->res = RES_DONE;
}

uint64_t kt_pool_round_trips(const struct kt_pool *p)
{
	struct kt_storeq_snap sn;
	uint64_t sum = 0;

	if (!p)
		return 0;
	for (int k = 0; k < p->n_groups; k++) {
		kt_storeq_snapshot(p->g[k].q, &sn);
		sum += sn.stats.round_trips;
	}
	return sum;
}
