/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Heartbeats: the round trip built on the loop from one tick's view
 * (pool_heartbeat), run on the store's worker thread (run_job), and its
 * answers turned into phases, sizes and leases when it comes back
 * (pool_finish_job, apply_answer); member ids tracked between round trips,
 * saved ramp levels, and the last round trip at exit (pool_leave_group).
 * See pool.c for the choices these follow. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/log.h"
#include "pool/pool_int.h"
#include "store/storeq.h"

static uint64_t since(uint64_t now, uint64_t t)
{
	return now > t ? now - t : 0;
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
		for (int k = 0; l->held && k < l->n_ids; k++)
			l->held[k] = l->grants[k];
	}
	if (l->floor && now >= l->floor_until_ns)
		l->floor = 0;
	if (l->slots) {
		/* while the floor holds the store may have come back empty and
		 * not know the claims of nodes still in their back-off: no more
		 * than the kernel held when the heartbeat was sent */
		int64_t g = a->slots_grant;

		if (l->floor && l->sent_slots_in_force >= 0 && g > l->sent_slots_in_force)
			g = l->sent_slots_in_force;
		l->v.slots_grant = g;
		l->v.slots_claimed = a->slots_claimed;
	}

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
	l->v.last_answer_sent_ns = sent;
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
	l->v.fallback_member = pool_member_fallback(l, l->sent_pool_rate);
	if (l->v.fallback_member > l->sent_fallback)
		l->v.fallback_member = l->sent_fallback;
	l->v.closed = false;
	pool_grant_lease(l, sent);
	if (ph == l->v.phase && ph == KT_POOL_AGREED && size != old)
		kt_info("pool: limit %s: agreed size %d -> %d", l->name, old, size);
	pool_set_phase(l, ph, now);
}

/* share: demand. While the size floor of a gap, a reconnect or a restart
 * holds (apply_answer), the store may have come back empty: it no longer
 * counts the grants that nodes still in their back-off run on, so the
 * headroom it offers is not free. A member then runs at no more than it
 * was granted when the floor began (held; or the floor rate an unanswered
 * member runs at), as an equal share keeps the larger size meanwhile, and
 * at no more than the store grants either, so the store's sum stays an
 * upper bound of what runs. By the floor's end every node has had its
 * back-off and a heartbeat to register again. */
static void take_grants(struct lim *l, const double *got)
{
	double unanswered = pool_demand_floor(l, l->sent_pool_rate);

	for (int j = 0; j < l->n_ids; j++) {
		double cap = l->held && isfinite(l->held[j]) ? l->held[j] : unanswered;

		l->grants[j] = l->floor && got[j] > cap ? cap : got[j];
	}
}

static bool has_id(const char *const *ids, int n, const char *id)
{
	for (int i = 0; i < n; i++)
		if (ids[i] && strcmp(ids[i], id) == 0)
			return true;
	return false;
}

/* Remembers the ids sent; the ones that disappeared go into the job to be
 * deregistered at once. */
static void sync_ids(struct lim *l, struct job_lim *jl, const char *const *ids, int n)
{
	double *grants = NULL, *held = NULL;
	bool *fb_held = NULL;
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
		if (l->demand && (!(grants = calloc((size_t)n, sizeof(*grants))) ||
				  !(held = calloc((size_t)n, sizeof(*held)))))
			goto oom;
		if (l->dormancy && !(fb_held = calloc((size_t)n, sizeof(*fb_held))))
			goto oom;
		/* a member keeps its grant (and the fallback the store holds for
		 * it); a new one has none until answered */
		for (i = 0; grants && i < n; i++) {
			int k;

			grants[i] = held[i] = NAN;
			for (k = 0; k < l->n_ids; k++)
				if (l->ids[k] && !strcmp(l->ids[k], ids[i])) {
					grants[i] = l->grants[k];
					held[i] = l->held ? l->held[k] : NAN;
					if (fb_held)
						fb_held[i] = l->fb_held && l->fb_held[k];
					break;
				}
		}
	}
	pool_free_ids(l);
	l->ids = keep;
	l->grants = grants;
	l->held = held;
	l->fb_held = fb_held;
	l->n_ids = n;
	return;
oom:
	/* forget rather than half-remember; the next heartbeat retries */
	if (keep)
		for (i = 0; i < n; i++)
			free(keep[i]);
	free(keep);
	free(grants);
	free(held);
	free(fb_held);
	pool_free_ids(l);
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

/* Whole ms for the store, never 0 */
static uint64_t ms_of(uint64_t ns)
{
	uint64_t ms = ns / NS_PER_MS;

	return ms ? ms : 1;
}

void pool_free_job(void *arg)
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

	if (d == KT_POOL_DEMAND_DORMANT)
		return d;
	return isfinite(d) && d > 0 ? (d < 1e15 ? d : 1e15) : 0;
}

/* a weight the store takes, else 1 (resolve.c and the controller computed
 * it in range; a child's weight over its pool size may be below
 * KT_WEIGHT_MIN) */
static double weight_of(const struct kt_pool_local *lo, int j)
{
	double w = lo->member_weight ? lo->member_weight[j] : 1;

	return w > 0 && w <= KT_WEIGHT_MAX ? w : 1;
}

_Static_assert(KT_CLASSES_MAX <= KT_STORE_MAX_CLASSES, "every class a config allows fits a request");

/* a class the request names (resolve.c computed it in range), else 0 */
static int class_of(const struct kt_pool_local *lo, int j)
{
	int k = lo->member_class ? lo->member_class[j] : 0;

	return lo->cfg && k >= 0 && k < lo->cfg->n_classes ? k : 0;
}

/* The limit's priority classes into q (their floors and ceilings, tokens/s
 * or slots, and whether they are peers); false when it has none. */
static bool request_classes(const struct kt_pool_local *lo, struct kt_pool_req *q)
{
	if (!lo->cfg || lo->cfg->class_by == KT_WEIGHT_NONE || lo->cfg->n_classes < 2 ||
	    lo->cfg->n_classes > KT_STORE_MAX_CLASSES)
		return false;
	q->n_classes = lo->cfg->n_classes;
	q->classes_siblings = lo->cfg->classes_siblings;
	for (int k = 0; k < q->n_classes; k++) {
		q->class_floor[k] = lo->cfg->classes[k].floor;
		q->class_ceiling[k] = lo->cfg->classes[k].ceiling;
	}
	return true;
}

/* An in-flight limit's part of the request (heartbeat.lua's slots): the
 * node, what it holds, the pool's slots, the cap while the store may have
 * lost the claims, and its demand. */
static void slots_request(const struct group *g, struct lim *l, const struct kt_pool_local *lo,
			  const char *node, struct kt_pool_req *q)
{
	double pool = isfinite(lo->pool_rate) && lo->pool_rate > 0 ? floor(lo->pool_rate + 1e-9) : 0;

	q->slots_node = node;
	/* unknown (not read from the kernel): what it was granted */
	q->slots_held = lo->slots_held >= 0 ? lo->slots_held
		      : l->v.slots_grant > 0 ? l->v.slots_grant : 0;
	if (q->slots_held > KT_STORE_MAX_SLOTS)
		q->slots_held = KT_STORE_MAX_SLOTS;
	q->slots_pool = pool < (double)KT_STORE_MAX_SLOTS ? (int64_t)pool : KT_STORE_MAX_SLOTS;
	l->sent_slots_in_force = lo->slots_in_force;
	/* the store may have lost the claims (a gap, a failing store, a
	 * restart): take no more than the kernel holds, so the claim recorded
	 * is what this node runs on */
	q->slots_cap = (l->floor || l->adopted || g->failing) && lo->slots_in_force >= 0
			       ? lo->slots_in_force
			       : -1;
	q->slots_demand = !l->slots_demand ? -1
			  : lo->slots_demand < 0 ? 0
			  : lo->slots_demand > KT_STORE_MAX_SLOTS ? KT_STORE_MAX_SLOTS
								: lo->slots_demand;
	/* weightBy: the node weighs what its members weigh together */
	q->slots_weight = 0;
	if (l->slots_demand && l->weighted && lo->member_weight) {
		for (int j = 0; j < lo->n_members; j++)
			q->slots_weight += weight_of(lo, j);
		if (q->slots_weight > KT_STORE_MAX_NODE_WEIGHT)
			q->slots_weight = KT_STORE_MAX_NODE_WEIGHT;
	}
	/* classBy: the slots go to the classes first; the node tells its
	 * demand and weight in each */
	if (l->slots_demand && lo->cfg && lo->member_class && lo->n_slot_classes == lo->cfg->n_classes &&
	    request_classes(lo, q)) {
		for (int k = 0; k < q->n_classes; k++) {
			q->slots_class_weight[k] = 0;
			q->slots_class_demand[k] = lo->slots_class_demand[k] < 0 ? 0
						   : lo->slots_class_demand[k] > KT_STORE_MAX_SLOTS
							   ? KT_STORE_MAX_SLOTS
							   : lo->slots_class_demand[k];
		}
		for (int j = 0; j < lo->n_members; j++) {
			double *w = &q->slots_class_weight[class_of(lo, j)];

			*w += weight_of(lo, j);
			if (*w > KT_STORE_MAX_NODE_WEIGHT)
				*w = KT_STORE_MAX_NODE_WEIGHT;
		}
	}
}

/* Builds the round trip from this tick's view and hands it to the worker. */
void pool_heartbeat(struct kt_pool *p, struct group *g, uint64_t now, const struct kt_pool_local *local)
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
		total += pool_local_members(p, &local[g->lims[k]], g->lims[k]);
	job = calloc(1, sizeof(*job));
	if (!job)
		goto oom;
	job->sent_ns = now;
	snprintf(job->node, sizeof(job->node), "%s", p->node);
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
		int n = pool_local_members(p, lo, i);
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
			job->mbuf[off + j].weight = weight_of(lo, j);
			job->mbuf[off + j].klass = class_of(lo, j);
		}
		jl->off = off;
		jl->n = n;
		/* an in-flight limit's members' classes, to split its grant by */
		if (l->slots && lo->member_class && lo->cfg && lo->cfg->class_by != KT_WEIGHT_NONE &&
		    n == l->n_ids) {
			int *ic = realloc(l->id_class, (size_t)(n ? n : 1) * sizeof(*ic));

			if (ic) {
				l->id_class = ic;
				for (j = 0; j < n; j++)
					ic[j] = class_of(lo, j);
			}
		} else if (l->id_class) {
			free(l->id_class);
			l->id_class = NULL;
		}
		if (l->demand && isfinite(lo->pool_rate) && lo->pool_rate > 0) {
			/* the script divides the pool rate less what lapsed members hold */
			q->pool_rate = lo->pool_rate;
			q->floor_rate = pool_demand_floor(l, lo->pool_rate);
			q->recompute_ms = g->heartbeat_ns / NS_PER_MS / 2;
			q->grants = &job->grants[off];
			q->weighted = l->weighted;
			if (l->weighted)
				request_classes(lo, q);
		}
		q->limit = jl->name;
		q->members = n ? &job->mbuf[off] : NULL;
		q->n_members = n;
		q->stale_ms = ms_of(l->stale_ns);
		/* while the saved level is being read nothing overwrites it */
		q->save_ramp = save_level(l, lo->pool_rate);
		q->ramp_ttl_ms = ms_of(l->rl.ttl_ns);
		q->hold_ms = l->hold_ns / NS_PER_MS;
		l->sent_fallback = pool_member_fallback(l, lo->pool_rate);
		l->sent_pool_rate = lo->pool_rate;
		q->fallback_rate = l->sent_fallback;
		if (l->slots && job->node[0])
			slots_request(g, l, lo, job->node, q);
		off += n;
	}
	if (kt_storeq_post(g->q, run_job, job, pool_free_job) == 0)
		return;
	g->skipped++;
	pool_free_job(job);
	return;
oom:
	pool_free_job(job);
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
bool pool_finish_job(struct kt_pool *p, struct group *g, struct hb_job *job, uint64_t now)
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

		/* left for the next heartbeat by the join budget (store.h "The
		 * start herd"): nothing was sent, nothing changes */
		if (job->ret == KT_STORE_PARTIAL && job->ans[k].status == KT_STORE_DEFERRED)
			continue;
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
		if (l->demand && l->grants && job->reqs[k].grants && job->jl[k].n == l->n_ids) {
			take_grants(l, &job->grants[job->jl[k].off]);
			/* the store now holds a fallback for each member sent called */
			for (int j = 0; l->fb_held && j < l->n_ids; j++)
				l->fb_held[j] = job->mbuf[job->jl[k].off + j].demand != KT_POOL_DEMAND_DORMANT;
		}
		if (job->reqs[k].slots_node) {
			l->v.slots_classes = job->reqs[k].n_classes;
			for (int c = 0; c < job->reqs[k].n_classes; c++)
				l->v.slots_class_part[c] = job->ans[k].slots_class_part[c];
		}
		if (job->reqs[k].pool_rate > 0) {
			l->v.share_weights = job->ans[k].weights;
			l->v.share_divided = job->reqs[k].pool_rate - job->ans[k].reserved;
			l->v.share_classes = job->reqs[k].n_classes;
			for (int c = 0; c < job->reqs[k].n_classes; c++) {
				l->v.share_class_part[c] = job->ans[k].class_part[c];
				l->v.share_class_weights[c] = job->ans[k].class_weights[c];
			}
		}
	}
	return true;
}

void pool_leave_group(struct kt_pool *p, struct group *g, const struct kt_pool_local *local,
			bool deregister)
{
	struct kt_pool_req *reqs = NULL;
	struct kt_pool_answer *ans = NULL;
	struct kt_store *st;
	struct kt_storeq_snap sn;
	char e[KT_ERR_LEN];
	const char **ids = NULL;
	int k, j, n, nq = 0, ret;

	/* the stop path may block, bounded: first the round trip in flight,
	 * whose budget follows the store's latency */
	kt_storeq_snapshot(g->q, &sn);
	if (kt_storeq_wait(g->q, (sn.stats.lat.budget_ms + 500ULL) * NS_PER_MS) ||
	    !(st = kt_storeq_store(g->q))) {
		kt_warn("pool: %s: a heartbeat is still waiting for the store; not saving at exit",
			g->label);
		return;
	}
	pool_free_job(kt_storeq_take(g->q));
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
		reqs[nq] = (struct kt_pool_req){ .limit = l->name, .stale_ms = ms_of(l->stale_ns),
						     .save_ramp = lvl, .ramp_ttl_ms = ms_of(l->rl.ttl_ns) };
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
		int m = local ? pool_local_members(p, &local[g->lims[k]], g->lims[k]) : 0;

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
