/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Pool membership and agreement: see pool.h for the contract and store.h for
 * the consensus script. This file builds the pool and its store groups,
 * decides when to talk to the store (kt_pool_tick) and reports status;
 * pool_hb.c runs the round trips and turns answers into phases and sizes,
 * pool_grant.c turns a view into bucket rates and applies validFor and
 * onStoreFailure; pool_int.h holds the state they share.
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
#include "base/log.h"
#include "pool/pool_int.h"
#include "store/storeq.h"

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
	    a->timeout_ns != b->timeout_ns || a->leases != b->leases || strcmp(prefix_of(a), prefix_of(b)) != 0)
		return false;
	for (i = 0; i < a->n_endpoints && i < KT_MAX_ENDPOINTS; i++)
		if (!str_eq(a->endpoint_host[i], b->endpoint_host[i]) ||
		    a->endpoint_port[i] != b->endpoint_port[i])
			return false;
	return true;
}

/* ---- create / destroy ---- */

void pool_free_ids(struct lim *l)
{
	for (int i = 0; i < l->n_ids; i++)
		free(l->ids[i]);
	free(l->ids);
	free(l->grants);
	free(l->held);
	free(l->id_class);
	free(l->fb_held);
	l->id_class = NULL;
	l->fb_held = NULL;
	l->ids = NULL;
	l->grants = NULL;
	l->held = NULL;
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
		pool_free_ids(&p->l[i]);
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
	/* leases: node: the lease is the node's, under its name */
	if (!ret && s->leases == KT_LEASES_NODE && (ret = kt_store_set_node(st, p->node))) {
		snprintf(e, sizeof(e), "leases: node needs a node name of 1..%d printable characters, not \"%s\"",
			 KT_STORE_ID_MAX, p->node);
		kt_store_close(st);
	}
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
	g->cfg = s;
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
	snprintf(p->node, sizeof(p->node), "%s", cfg->node_name ? cfg->node_name : "");
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
		l->slots = lc->unit == KT_UNIT_CONCURRENT && s->kind == KT_STORE_REDIS;
		/* in-flight: the store divides slots by the nodes' demands (slots_demand);
		 * the rate grants per member (demand) are for rates */
		l->demand = lc->share == KT_SHARE_DEMAND && s->kind == KT_STORE_REDIS && !l->slots;
		l->dormancy = l->demand && lc->n_callers > 0;
		l->slots_demand = lc->share == KT_SHARE_DEMAND && l->slots;
		l->weighted = (l->demand || l->slots_demand) &&
			      (lc->weight_by != KT_WEIGHT_NONE || lc->class_by != KT_WEIGHT_NONE ||
			       lc->child_weights);
		l->v.slots_grant = -1;
		l->sent_slots_in_force = -1;
		l->v.size = 1;
		l->v.live = 1;
		if (lc->rl.strict.on)
			/* no pool: each admission is a permit from the store
			 * (strict.c), so there is no share to agree on */
			l->kind = KT_STORE_LOCAL;
		switch (l->kind) {
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

void pool_set_phase(struct lim *l, enum kt_pool_phase ph, uint64_t now)
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

/* Members of local[i] usable this tick (0 on malformed input, logged once). */
int pool_local_members(struct kt_pool *p, const struct kt_pool_local *lo, int i)
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

/* ---- poll / tick ---- */

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
			changed |= pool_finish_job(p, g, job, now);
		pool_free_job(job);
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
		int m = pool_local_members(p, &local[i], i);

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
			pool_grant_lease(l, now);
			l->v.fallback_member = pool_member_fallback(l, local[i].pool_rate);
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
			pool_heartbeat(p, g, now, local);
		}
		/* the lease runs out whatever the reason: store down, a frozen
		 * connection, or this daemon blocked */
		for (i = 0; i < g->n; i++) {
			struct lim *l = &p->l[g->lims[i]];

			if (l->v.phase != KT_POOL_STORE_LOST && now > l->v.lease_until_ns)
				pool_set_phase(l, KT_POOL_STORE_LOST, now);
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

/* ---- leave ---- */

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
		pool_leave_group(p, &p->g[k], local, deregister);
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

/* Limit i's store's counts (a snapshot); zero without a store. */
static void store_stats(const struct kt_pool *p, int i, struct kt_store_stats *out)
{
	struct kt_storeq_snap sn;

	memset(out, 0, sizeof(*out));
	if (!p || i < 0 || i >= p->n || p->l[i].group < 0)
		return;
	kt_storeq_snapshot(p->g[p->l[i].group].q, &sn);
	*out = sn.stats;
}

void kt_pool_store_latency(const struct kt_pool *p, int i, struct kt_store_latency *out)
{
	struct kt_store_stats st;

	store_stats(p, i, &st);
	*out = st.lat;
}

uint64_t kt_pool_store_feed_at(const struct kt_pool *p, int i)
{
	struct kt_store_stats st;

	store_stats(p, i, &st);
	return st.feed_at_ns;
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
		l->held = calloc((size_t)o->n_ids, sizeof(*l->held));
		l->fb_held = l->dormancy ? calloc((size_t)o->n_ids, sizeof(*l->fb_held)) : NULL;
		for (int k = 0; l->ids && l->grants && l->held && k < o->n_ids; k++) {
			if (!(l->ids[k] = strdup(o->ids[k])))
				break;
			l->grants[k] = o->grants ? o->grants[k] : NAN;
			l->held[k] = o->held ? o->held[k] : NAN;
			if (l->fb_held)
				l->fb_held[k] = o->fb_held && o->fb_held[k];
			l->n_ids = k + 1;
		}
		if (!l->ids || !l->grants || !l->held || l->n_ids != o->n_ids || (l->dormancy && !l->fb_held))
			pool_free_ids(l); /* out of memory: floors until the next answer */
	}
	/* resumedRampUp happens once per process, not per reload */
	if (l->res != RES_OFF)
		l->res = RES_DONE;
}

/* a store's counts into w */
static void work_add(struct kt_pool_work *w, const struct kt_store_stats *st)
{
	w->steady += st->hb_steady;
	w->full += st->hb_full;
	w->round_trips += st->round_trips;
	w->script_commands += st->script_commands;
	w->scripts += st->hb_scripts;
	w->quiet += st->hb_quiet;
	w->deferred += st->hb_deferred;
	w->postponed += st->hb_postponed;
	w->feed_changes += st->feed_changes;
	w->feed_resyncs += st->feed_resyncs;
	w->bytes_sent += st->bytes_sent;
	w->bytes_received += st->bytes_received;
}

void kt_pool_take_stores(struct kt_pool *p, struct kt_pool *old)
{
	struct kt_storeq_snap sn;
	bool *taken;

	if (!p || !old)
		return;
	p->closed = old->closed;
	if (!old->n_groups || !(taken = calloc((size_t)old->n_groups, sizeof(*taken))))
		return;
	for (int i = 0; i < p->n_groups; i++) {
		struct group *g = &p->g[i];

		for (int j = 0; j < old->n_groups; j++) {
			struct group *og = &old->g[j];
			struct kt_storeq *q;

			if (taken[j] || !g->cfg || !og->cfg || !same_store(g->cfg, og->cfg))
				continue;
			/* a round trip is a millisecond or two: worth a wait of
			 * one command's timeout, not a slow store's whole call
			 * (that one finishes with old) */
			kt_storeq_wait(og->q, KT_POOL_HANDOVER_WAIT_MS * NS_PER_MS);
			if (kt_storeq_rebind(og->q, p->evfd))
				continue;
			/* the new pool's unused queue goes with the old pool */
			q = g->q;
			g->q = og->q;
			og->q = q;
			g->connects = og->connects;
			g->failing = og->failing;
			g->logged_kinds = og->logged_kinds;
			taken[j] = true;
			break;
		}
	}
	/* the stores that stay with old close with it: their counts carry on */
	for (int j = 0; j < old->n_groups; j++) {
		if (taken[j])
			continue;
		kt_storeq_snapshot(old->g[j].q, &sn);
		work_add(&p->closed, &sn.stats);
	}
	free(taken);
}

void kt_pool_store_work(const struct kt_pool *p, struct kt_pool_work *w)
{
	struct kt_storeq_snap sn;

	*w = p ? p->closed : (struct kt_pool_work){ 0 };
	for (int k = 0; p && k < p->n_groups; k++) {
		kt_storeq_snapshot(p->g[k].q, &sn);
		work_add(w, &sn.stats);
	}
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
