/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* kt-storesim: N simulated nodes x M members against one real redis-server,
 * each node a kt_store of its own heartbeating one limit through
 * kt_store_heartbeat_many exactly as the daemon's pool does. Measures the
 * heartbeat script's server time (SLOWLOG with a 0 threshold: Redis's own
 * per-command timing), the client round trip, Redis CPU, round trips per
 * heartbeat, and how long the pool takes to AGREE at start and after K nodes
 * die at once. Exit 0: every target met; 1: a target missed; 2: bad input or
 * setup failure.
 * Requests carry hold_ms 0 and fallback_rate 0: the dead leave the answer as
 * soon as they lapse, which is what the agreement bound is about
 * (--hold-ms H: hold_ms H and fallback_rate 1, so a death holds a reserve
 * for H ms, as onStoreFailure's fallbackFor does in the daemon; the Redis
 * CPU of the kill phase then shows what the hold costs). Redis 7
 * slow-logs the commands a script calls as well, so the slow log is drained
 * every 100 ms and its extra cost is kept out of the CPU figure (see main).
 * With --redis the server's slow log settings are restored at the end, but
 * its slow log is left empty.
 * --share demand: every heartbeat also shares POOL_RATE by demand (pool_rate,
 * floor_rate = pool_rate / pool size / 10, recompute_ms = heartbeat / 2);
 * member k of the pool asks 20 equal shares when k % 7 == 0 (saturated) and
 * 0.1..0.68 of one otherwise, each jittering by 1% from call to call (as in
 * tests/unit/test_store_demand.c). Every answer's `granted` must stay within
 * pool_rate - reserved (+ 1e-6) and every grant finite and >= 0; the grants
 * stored in Redis are summed at the end of the steady state and once the
 * survivors agree after the kill.
 * --share weighted: --share demand on a weighted limit (every request
 * `weighted`, issue 43): the same demands, pool rate and checks, and member
 * k of the pool weighs 3 when k % 4 == 0, else 1 (pool weight 1.5 x N x M).
 * Saturated members are capped at weight x level (20 equal shares is more
 * than 3 x level), so at the end of the steady state the mean grant of the
 * saturated members of weight 3 must be 3x that of those of weight 1, within
 * 5%; only answers whose level caps the member (3 or 1 x level < demand)
 * count, and neither mean may be empty.
 * --share classes: --share weighted (the same weights, demands, pool rate
 * and grant checks) plus 2 priority classes on every request: class 0
 * ("critical") the members k with k % 5 == 0, class 1 ("batch") the others;
 * floors 0 and 10% of POOL_RATE, both ceilings POOL_RATE. The 3:1 ratio is
 * not checked (the level answered is not a class's). At the end of the
 * steady state the grants, demands and weights stored in Redis are read
 * and it must hold that: (a) the grants stored sum to at most POOL_RATE (as
 * in the other modes); (b) when the critical class's total demand (the
 * simulator's, at its +1% jitter peak) is below POOL_RATE - batch's floor,
 * every saturated critical member (k % 7 == 0 and k % 5 == 0) holds its
 * full demand as stored, within CLASS_TOL (a demand moves by 1% from call
 * to call while the pool is all granted, and a rise can only take headroom
 * that others have freed); otherwise (b) does not apply and is said so;
 * (c) batch's grants summed are at least min(its floor, its demand) x 0.99.
 * A member with no grant or demand stored (not joined, or lapsed) is in no
 * sum and is counted; a saturated critical one counts as short.
 * Both classes' demand and grant totals are printed.
 * --groups G [--groups-total T]: groupBy at the store level. Each node
 * heartbeats G limits "sim@gNNNNN" instead of one, every one with the same M
 * members, all in ONE kt_store_heartbeat_many call per heartbeat (the
 * daemon's one round trip per node per interval). Node i takes the G groups
 * (floor(i x T / N) + k) mod T, k < G, so each of the T groups is on about
 * N x G / T nodes (every one on at least one: G >= ceil(T / N) is required).
 * A node agrees when EVERY one of its groups answers AGREE at that group's
 * size: the live nodes having the group x M. The script's server time is
 * per script, i.e. for the limits of one script (a call's limits go in
 * scripts of at most KT_STORE_SCRIPT_UNITS units, a limit counting 1 + M);
 * its 1 ms target is applied per limit (the script's p99 / its limits) and
 * the per-script figure is printed beside it. Not with
 * --share demand or weighted (refused). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>
#include <hiredis/hiredis.h>
#include "redis_proc.h"
#include "store/store.h"

#define LIMIT_NAME "sim"
#define ID_LEN 48
#define SCRIPT_P99_TARGET_US 1000
#define MAX_THREADS 64
#define NS_PER_MS 1000000ULL
#define POOL_RATE 10000.0 /* --share demand: tokens/s shared by the whole pool */
#define GRANT_EPS 1e-6
#define WEIGHT_HEAVY 3.0  /* --share weighted: member k's weight when k % 4 == 0, else 1 */
#define RATIO_TOL 0.05    /* --share weighted: saturated heavy / light mean grants, 3 +- 5% */
#define CLASS_BATCH_FLOOR (0.1 * POOL_RATE) /* --share classes: class 1's floor */
#define CLASS_TOL 0.03    /* --share classes: a saturated critical grant >= its demand x (1 - this) */

/* GAP: between the measured window and the kill, while the slow log is read */
enum phase { PH_START, PH_STEADY, PH_GAP, PH_KILL, PH_STOP, PH_COUNT };

struct opts {
	int nodes, members, heartbeat_ms, stale_after, duration_s, kill, threads;
	char redis_host[256];
	int redis_port; /* 0: start our own redis-server */
	bool json;
	bool trace;     /* a line per heartbeat of nodes 0 and N / 2 on stderr */
	bool demand;    /* --share demand or weighted */
	bool weighted;  /* --share weighted or classes */
	bool classes;   /* --share classes */
	int groups, groups_total; /* --groups, --groups-total (1, 1: one limit "sim") */
	bool grouped;   /* either given: limits "sim@gNNNNN" */
	bool node_leases; /* --leases node: redisStore.leases: node */
	int hold_ms;      /* --hold-ms: a dead member's fallback held that long */
};

struct node {
	struct kt_store *st;
	struct kt_pool_member *members;
	char *ids;
	double *grants;    /* --share demand: out array of the last answer */
	struct kt_pool_req *reqs;    /* --groups of them, one call */
	struct kt_pool_answer *ans;
	int *grp;          /* reqs[k] is group grp[k] */
	bool ok[PH_COUNT]; /* last answer in that phase was AGREE at the phase's target */
};

/* grows by doubling; samples in microseconds */
struct samples {
	uint64_t *v;
	size_t n, cap;
};

struct worker {
	pthread_t tid;
	int index;
	/* owned by the worker until joined */
	struct samples lateness_us;  /* every heartbeat: start - due */
	struct samples steady_late_us; /* the same, steady-state heartbeats only */
	struct samples rtt_us;       /* steady-state heartbeats: the call's duration */
	uint64_t steady_hb, steady_rt, steady_not_agree, errors;
	uint64_t steady_cmds, steady_bytes; /* the scripts' commands, bytes both ways */
	uint64_t steady_quiet, steady_limits; /* limits not sent (leases: node), and all */
	uint64_t deferred;           /* every phase: limits left for a later heartbeat (join budget) */
	uint64_t postponed, caught_up, acked; /* every phase: news left for later (news budget); answers caught
					* up; acknowledged on the steady path */
	/* --share demand, every answer: granted > pool_rate - reserved + eps,
	 * or a grant not finite or < 0; the largest `granted` answered */
	uint64_t grant_violations;
	double granted_max;
	/* --share demand, steady state: grants summed and counted, saturated
	 * members and the others */
	double grant_sat, grant_small;
	uint64_t n_sat, n_small;
	/* --share weighted, steady state: saturated members capped by the
	 * answer's level, by weight (3, 1), summed and counted; saturated ones
	 * the level did not cap; the answers' weights, smallest and largest */
	double grant_heavy, grant_light;
	uint64_t n_heavy, n_light, n_uncapped;
	double weights_min, weights_max;
	bool weights_seen;
	char first_error[KT_ERR_LEN];
	char first_violation[160];
};

static struct opts g_o;
static struct node *g_nodes;
static uint64_t g_t0_ns;
static _Atomic int g_phase = PH_START;
static atomic_bool g_time_rtt; /* the client-side half of the steady state */
/* when a victim's last heartbeat returned: one in flight as the kill is
 * announced still lands, so the death is complete only then */
static _Atomic uint64_t g_victims_last_ns;
static atomic_int g_n_ok[PH_COUNT];
static _Atomic uint64_t g_reached_ns[PH_COUNT]; /* when n_ok last reached the phase's expected count */
static volatile sig_atomic_t g_interrupted;
/* per group: its limit name, the nodes having it and the victims among them */
static char (*g_grp_name)[KT_NAME_LEN];
static int *g_grp_nodes, *g_grp_victims;

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void sleep_until_ns(uint64_t t)
{
	struct timespec ts = { .tv_sec = (time_t)(t / 1000000000ULL), .tv_nsec = (long)(t % 1000000000ULL) };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR && !g_interrupted)
		;
}

static void on_signal(int sig)
{
	(void)sig;
	g_interrupted = 1;
}

static int push(struct samples *s, uint64_t v)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 1024;
		uint64_t *p = realloc(s->v, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		s->v = p;
		s->cap = cap;
	}
	s->v[s->n++] = v;
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* nearest rank on a sorted array; 0 when empty */
static uint64_t pct(const struct samples *s, double p)
{
	size_t k;

	if (!s->n)
		return 0;
	k = (size_t)ceil(p * (double)s->n);
	return s->v[k ? k - 1 : 0];
}

/* K victims spread evenly over the node indices, so they are spread over
 * the heartbeat period too */
static bool is_victim(int i)
{
	long long n = g_o.nodes, k = g_o.kill;

	return (i + 1) * k / n > i * k / n;
}

static int expected_ok(int ph)
{
	return ph == PH_KILL ? g_o.nodes - g_o.kill : g_o.nodes;
}

/* the size group g must agree at in phase ph: its live nodes x M */
static int target_size(int g, int ph)
{
	return (g_grp_nodes[g] - (ph == PH_KILL ? g_grp_victims[g] : 0)) * g_o.members;
}

/* the k-th group of node i */
static int group_of(int i, int k)
{
	return (int)(((long long)i * g_o.groups_total / g_o.nodes + k) % g_o.groups_total);
}

/* --share demand: one equal share of the whole pool, and the floor */
static double equal_share(void)
{
	return POOL_RATE / ((double)g_o.nodes * g_o.members);
}

static double floor_rate(void)
{
	return equal_share() / 10;
}

static bool saturated(int node, int j)
{
	return ((long long)node * g_o.members + j) % 7 == 0;
}

/* --share weighted: member k of the pool weighs 3 when k % 4 == 0, else 1 */
static double weight_of(int node, int j)
{
	return ((long long)node * g_o.members + j) % 4 == 0 ? WEIGHT_HEAVY : 1.0;
}

/* --share weighted: the weights of the whole pool, summed */
static double pool_weight(void)
{
	long long n = (long long)g_o.nodes * g_o.members, heavy = (n + 3) / 4;

	return (double)heavy * WEIGHT_HEAVY + (double)(n - heavy);
}

static const char *share_name(void)
{
	return g_o.classes ? "classes" : g_o.weighted ? "weighted" : g_o.demand ? "demand" : "equal";
}

/* --share classes: member k of the pool is critical (class 0) when k % 5 == 0 */
static bool critical(int node, int j)
{
	return ((long long)node * g_o.members + j) % 5 == 0;
}

/* member j of node i at round r: 20 equal shares when saturated, else
 * 0.1..0.68 of one; +-1% from call to call */
static double demand_of(int i, int j, uint64_t r)
{
	long long k = (long long)i * g_o.members + j;
	double d = saturated(i, j) ? 20 : (5 + k % 30) / 50.0;

	return d * equal_share() * (1 + 0.01 * (double)((long long)((r + (uint64_t)k) % 3) - 1));
}

static void note_answer(struct node *nd, int ph, bool ok, uint64_t now)
{
	if (ok == nd->ok[ph])
		return;
	nd->ok[ph] = ok;
	if (!ok) {
		atomic_fetch_sub(&g_n_ok[ph], 1);
		return;
	}
	if (atomic_fetch_add(&g_n_ok[ph], 1) + 1 == expected_ok(ph))
		atomic_store(&g_reached_ns[ph], now);
}

/* --trace: one heartbeat of node i */
static void trace(int i, uint64_t round, uint64_t start, uint64_t end, int ret, const struct kt_store_stats *b,
		  const struct kt_store_stats *a)
{
	fprintf(stderr,
		"node %d hb %llu at %.2f s: ret %d in %.0f ms; full %llu steady %llu (caught up %llu, acked %llu) quiet %llu "
		"deferred %llu postponed %llu; news %llu resync %llu; timeouts %llu; budgets join %u news %u\n",
		i, (unsigned long long)round, (double)(start - g_t0_ns) / 1e9, ret, (double)(end - start) / 1e6,
		(unsigned long long)(a->hb_full - b->hb_full), (unsigned long long)(a->hb_steady - b->hb_steady),
		(unsigned long long)(a->hb_caught_up - b->hb_caught_up), (unsigned long long)(a->hb_acked - b->hb_acked),
		(unsigned long long)(a->hb_quiet - b->hb_quiet),
		(unsigned long long)(a->hb_deferred - b->hb_deferred),
		(unsigned long long)(a->hb_postponed - b->hb_postponed),
		(unsigned long long)(a->feed_changes - b->feed_changes),
		(unsigned long long)(a->feed_resyncs - b->feed_resyncs), (unsigned long long)(a->timeouts - b->timeouts),
		a->join_budget, a->news_budget);
}

/* Owns nodes i with i % threads == index; node i is due at
 * t0 + round x H + i x H / N, so the whole fleet's heartbeats are spread
 * evenly over the period. A late heartbeat still runs (nothing is skipped),
 * so lateness shows up in the figures instead of hiding. */
static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint64_t period_ns = (uint64_t)g_o.heartbeat_ms * NS_PER_MS;
	char err[KT_ERR_LEN];

	for (uint64_t round = 0;; round++) {
		for (int i = w->index; i < g_o.nodes; i += g_o.threads) {
			struct node *nd = &g_nodes[i];
			uint64_t due = g_t0_ns + round * period_ns + (uint64_t)i * period_ns / (uint64_t)g_o.nodes;
			struct kt_store_stats before, after;
			struct kt_pool_req *qs = nd->reqs, *q0 = &nd->reqs[0];
			struct kt_pool_answer *as = nd->ans, *a0 = &nd->ans[0];
			uint64_t start, end, not_agree = 0;
			int ph, ret;

			if (g_o.demand) { /* one limit only (parse_args) */
				q0->pool_rate = POOL_RATE;
				q0->floor_rate = floor_rate();
				q0->recompute_ms = (uint64_t)g_o.heartbeat_ms / 2;
				q0->grants = nd->grants;
				for (int j = 0; j < g_o.members; j++) {
					nd->members[j].demand = demand_of(i, j, round);
					nd->grants[j] = NAN;
				}
			}
			sleep_until_ns(due);
			ph = atomic_load(&g_phase);
			if (ph == PH_STOP || g_interrupted)
				return NULL;
			if (ph == PH_KILL && is_victim(i))
				continue; /* dead: stops heartbeating, never deregisters */
			start = mono_ns();
			kt_store_get_stats(nd->st, &before);
			ret = kt_store_heartbeat_many(nd->st, qs, g_o.groups, as, err, sizeof(err));
			end = mono_ns();
			kt_store_get_stats(nd->st, &after);
			w->deferred += after.hb_deferred - before.hb_deferred;
			w->postponed += after.hb_postponed - before.hb_postponed;
			w->caught_up += after.hb_caught_up - before.hb_caught_up;
			w->acked += after.hb_acked - before.hb_acked;
			if (g_o.trace && (i == 0 || i == g_o.nodes / 2))
				trace(i, round, start, end, ret, &before, &after);
			if (push(&w->lateness_us, start > due ? (start - due) / 1000 : 0))
				return NULL;
			if (ph == PH_STEADY && push(&w->steady_late_us, start > due ? (start - due) / 1000 : 0))
				return NULL;
			/* limits left for the next heartbeat by the join budget
			 * (at the start) are not agreed yet, and no error */
			if (ret == KT_STORE_PARTIAL) {
				int k = 0;

				while (k < g_o.groups && (!as[k].status || as[k].status == KT_STORE_DEFERRED))
					k++;
				if (k == g_o.groups)
					ret = 0;
				else
					snprintf(err, sizeof(err), "limit %s: status %d", qs[k].limit, as[k].status);
			}
			if (ret) {
				if (!w->errors++)
					snprintf(w->first_error, sizeof(w->first_error), "node %d: %s", i, err);
				note_answer(nd, ph, false, end);
				continue;
			}
			if (is_victim(i)) {
				uint64_t prev = atomic_load(&g_victims_last_ns);

				while (prev < end && !atomic_compare_exchange_weak(&g_victims_last_ns, &prev, end))
					;
			}
			/* every group at its own size */
			for (int k = 0; k < g_o.groups; k++)
				not_agree += as[k].status || !(as[k].agree && as[k].size == target_size(nd->grp[k], ph));
			note_answer(nd, ph, !not_agree, end);
			if (g_o.demand) {
				bool bad = !(a0->granted <= q0->pool_rate - a0->reserved + GRANT_EPS);

				for (int j = 0; j < g_o.members; j++)
					bad |= !isfinite(nd->grants[j]) || nd->grants[j] < 0;
				if (bad && !w->grant_violations++)
					snprintf(w->first_violation, sizeof(w->first_violation),
						 "node %d: granted %.17g, reserved %.17g, pool_rate %.17g, grant[0] %.17g",
						 i, a0->granted, a0->reserved, q0->pool_rate, nd->grants[0]);
				if (a0->granted > w->granted_max)
					w->granted_max = a0->granted;
				if (ph == PH_STEADY)
					for (int j = 0; j < g_o.members; j++) {
						if (saturated(i, j)) {
							w->grant_sat += nd->grants[j];
							w->n_sat++;
						} else {
							w->grant_small += nd->grants[j];
							w->n_small++;
						}
					}
				if (ph == PH_STEADY && g_o.weighted && !g_o.classes) {
					if (!w->weights_seen || a0->weights < w->weights_min)
						w->weights_min = a0->weights;
					if (!w->weights_seen || a0->weights > w->weights_max)
						w->weights_max = a0->weights;
					w->weights_seen = true;
					for (int j = 0; j < g_o.members; j++) {
						double wt = nd->members[j].weight;

						if (!saturated(i, j))
							continue;
						if (!(isfinite(a0->level) && wt * a0->level < nd->members[j].demand)) {
							w->n_uncapped++;
						} else if (wt == WEIGHT_HEAVY) {
							w->grant_heavy += nd->grants[j];
							w->n_heavy++;
						} else {
							w->grant_light += nd->grants[j];
							w->n_light++;
						}
					}
				}
			}
			if (ph == PH_STEADY) {
				w->steady_hb++;
				w->steady_rt += after.round_trips - before.round_trips;
				w->steady_cmds += after.script_commands - before.script_commands;
				w->steady_quiet += after.hb_quiet - before.hb_quiet;
				w->steady_limits += (uint64_t)g_o.groups;
				w->steady_bytes += after.bytes_sent - before.bytes_sent + after.bytes_received -
						   before.bytes_received;
				w->steady_not_agree += not_agree;
				if (atomic_load(&g_time_rtt) && push(&w->rtt_us, (end - start) / 1000))
					return NULL;
			}
		}
	}
}

/* ---- arguments ---- */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kt-storesim [--nodes N] [--members M] [--heartbeat-ms H] [--stale-after K]\n"
		"                   [--duration S] [--kill K] [--threads T] [--redis HOST:PORT]\n"
		"                   [--share equal|demand|weighted|classes] [--groups G [--groups-total T]]\n"
		"                   [--json]\n"
		"  --nodes N         simulated nodes, one store connection each (default 1000)\n"
		"  --members M       members per node (default 10)\n"
		"  --heartbeat-ms H  heartbeat period (default 1000)\n"
		"  --stale-after K   heartbeats before a silent member lapses (default 3)\n"
		"  --duration S      seconds of steady state measured (default 10)\n"
		"  --kill K          nodes that die at once after the steady state (default 100)\n"
		"  --threads T       driver threads, each owning every T-th node (default 4)\n"
		"  --redis HOST:PORT use this server (default: start a redis-server of our own);\n"
		"                    its slow log settings are restored, its slow log emptied\n"
		"  --share S         equal (default): the pool size only; demand: every heartbeat\n"
		"                    also shares 10000/s by demand (1 member in 7 saturated);\n"
		"                    weighted: demand on a weighted limit, member k of the pool\n"
		"                    weighing 3 when k %% 4 == 0, else 1; the saturated members'\n"
		"                    mean grants must be 3:1 by weight (within 5%%); classes:\n"
		"                    weighted plus 2 priority classes, critical (k %% 5 == 0) and\n"
		"                    batch (floor 10%% of the pool, ceilings the pool); at the end\n"
		"                    of the steady state the grants stored sum to <= the pool,\n"
		"                    every saturated critical member holds its demand (within\n"
		"                    3%%) when critical's demand is below the pool less batch's\n"
		"                    floor, and batch holds >= min(floor, its demand) x 0.99\n"
		"  --groups G        limits per node, \"sim@gNNNNN\", all in one heartbeat call\n"
		"                    (default 1: the one limit \"sim\"); not with --share demand,\n"
		"                    weighted or classes\n"
		"  --groups-total T  distinct groups across the nodes (default G); node i has\n"
		"                    groups (i x T / N + k) mod T, k < G; needs G >= T / N\n"
		"  --leases L        member (default) or node: redisStore.leases; node: one\n"
		"                    lease a node, and a limit sent only when it changed\n"
		"  --hold-ms H       a dead member's fallback (rate 1) is held H ms after it\n"
		"                    lapses (default 0), as fallbackFor does; the kill phase's\n"
		"                    Redis CPU is then measured over staleAfter + 5 heartbeats\n"
		"                    + H (without: from the kill to the agreement)\n"
		"  --json            one JSON object instead of the table\n"
		"  --trace           a line on stderr per heartbeat of node 0 and node N/2: how its\n"
		"                    limits went (full, steady, caught up, quiet, deferred,\n"
		"                    postponed), the inbox's news, timeouts and both budgets\n"
		"Exit: 0 all targets met, 1 a target missed, 2 bad input or setup failure.\n");
}

static int parse_int(const char *name, const char *s, long lo, long hi, int *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi) {
		fprintf(stderr, "kt-storesim: --%s: '%s' is not an integer in %ld..%ld\n", name, s, lo, hi);
		return -1;
	}
	*out = (int)v;
	return 0;
}

static int parse_redis(const char *s)
{
	const char *colon = strrchr(s, ':');
	size_t hl = colon ? (size_t)(colon - s) : 0;

	if (!colon || !hl || hl >= sizeof(g_o.redis_host)) {
		fprintf(stderr, "kt-storesim: --redis: '%s' is not HOST:PORT\n", s);
		return -1;
	}
	memcpy(g_o.redis_host, s, hl);
	g_o.redis_host[hl] = 0;
	return parse_int("redis (port)", colon + 1, 1, 65535, &g_o.redis_port);
}

static int parse_args(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "nodes", required_argument, NULL, 'n' },
		{ "members", required_argument, NULL, 'm' },
		{ "heartbeat-ms", required_argument, NULL, 'H' },
		{ "stale-after", required_argument, NULL, 's' },
		{ "duration", required_argument, NULL, 'd' },
		{ "kill", required_argument, NULL, 'k' },
		{ "threads", required_argument, NULL, 't' },
		{ "redis", required_argument, NULL, 'r' },
		{ "share", required_argument, NULL, 'S' },
		{ "groups", required_argument, NULL, 'g' },
		{ "groups-total", required_argument, NULL, 'G' },
		{ "leases", required_argument, NULL, 'L' },
		{ "hold-ms", required_argument, NULL, 'D' },
		{ "json", no_argument, NULL, 'j' },
		{ "trace", no_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int c, kill_given = 0, threads_given = 0, total_given = 0;

	g_o = (struct opts){ .nodes = 1000, .members = 10, .heartbeat_ms = 1000, .stale_after = 3,
			     .duration_s = 10, .kill = 100, .threads = 4, .groups = 1, .groups_total = 1 };
	opterr = 0;
	while ((c = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
		int r = 0;

		switch (c) {
		case 'n': r = parse_int("nodes", optarg, 1, 100000, &g_o.nodes); break;
		case 'm': r = parse_int("members", optarg, 1, 10000, &g_o.members); break;
		case 'H': r = parse_int("heartbeat-ms", optarg, 10, 600000, &g_o.heartbeat_ms); break;
		case 's': r = parse_int("stale-after", optarg, 1, 1000, &g_o.stale_after); break;
		case 'd': r = parse_int("duration", optarg, 1, 86400, &g_o.duration_s); break;
		case 'k': r = parse_int("kill", optarg, 0, 100000, &g_o.kill); kill_given = 1; break;
		case 't': r = parse_int("threads", optarg, 1, MAX_THREADS, &g_o.threads); threads_given = 1; break;
		case 'r': r = parse_redis(optarg); break;
		case 'S':
			if (!strcmp(optarg, "demand") || !strcmp(optarg, "equal") || !strcmp(optarg, "weighted") ||
			    !strcmp(optarg, "classes")) {
				g_o.demand = optarg[0] == 'd' || optarg[0] == 'w' || optarg[0] == 'c';
				g_o.weighted = optarg[0] == 'w' || optarg[0] == 'c';
				g_o.classes = optarg[0] == 'c';
			} else {
				fprintf(stderr, "kt-storesim: --share: '%s' is not equal, demand, weighted or classes\n",
					optarg);
				r = -1;
			}
			break;
		case 'g': r = parse_int("groups", optarg, 1, KT_MAX_LIMITS, &g_o.groups); g_o.grouped = true; break;
		case 'G':
			r = parse_int("groups-total", optarg, 1, 100000, &g_o.groups_total);
			g_o.grouped = true;
			total_given = 1;
			break;
		case 'L':
			if (!strcmp(optarg, "node") || !strcmp(optarg, "member")) {
				g_o.node_leases = optarg[0] == 'n';
			} else {
				fprintf(stderr, "kt-storesim: --leases: '%s' is not member or node\n", optarg);
				r = -1;
			}
			break;
		case 'D': r = parse_int("hold-ms", optarg, 0, 600000, &g_o.hold_ms); break;
		case 'j': g_o.json = true; break;
		case 'T': g_o.trace = true; break;
		case 'h': usage(stdout); exit(0);
		default:
			if (optopt)
				fprintf(stderr, "kt-storesim: %s needs a value (see --help)\n", argv[optind - 1]);
			else
				fprintf(stderr, "kt-storesim: unknown option '%s' (see --help)\n", argv[optind - 1]);
			return -1;
		}
		if (r)
			return -1;
	}
	if (optind < argc) {
		fprintf(stderr, "kt-storesim: unexpected argument '%s' (see --help)\n", argv[optind]);
		return -1;
	}
	/* the default kill (100) is 10% of the default fleet; scale it down for small fleets */
	if (!kill_given && g_o.kill >= g_o.nodes)
		g_o.kill = g_o.nodes / 10;
	if (g_o.kill >= g_o.nodes) {
		fprintf(stderr, "kt-storesim: --kill: %d must leave at least one of the %d nodes alive\n",
			g_o.kill, g_o.nodes);
		return -1;
	}
	if ((long long)g_o.nodes * g_o.members > KT_STORE_MAX_POOL) {
		fprintf(stderr, "kt-storesim: --nodes x --members: %lld exceeds the largest pool (%d)\n",
			(long long)g_o.nodes * g_o.members, KT_STORE_MAX_POOL);
		return -1;
	}
	if ((uint64_t)g_o.stale_after * (uint64_t)g_o.heartbeat_ms > KT_STORE_STALE_MAX_MS) {
		fprintf(stderr, "kt-storesim: --stale-after x --heartbeat-ms exceeds %llu ms\n",
			(unsigned long long)KT_STORE_STALE_MAX_MS);
		return -1;
	}
	if (!total_given)
		g_o.groups_total = g_o.groups;
	if (g_o.groups > g_o.groups_total) {
		fprintf(stderr, "kt-storesim: --groups: %d is more than the %d groups in all (--groups-total)\n",
			g_o.groups, g_o.groups_total);
		return -1;
	}
	/* the starts i x T / N are at most ceil(T / N) apart */
	if ((long long)g_o.groups * g_o.nodes < g_o.groups_total ||
	    g_o.groups < (g_o.groups_total + g_o.nodes - 1) / g_o.nodes) {
		fprintf(stderr, "kt-storesim: --groups-total: %d groups over %d nodes need --groups >= %d\n",
			g_o.groups_total, g_o.nodes, (g_o.groups_total + g_o.nodes - 1) / g_o.nodes);
		return -1;
	}
	if (g_o.grouped && g_o.demand) {
		fprintf(stderr, "kt-storesim: --share %s: one limit per node only, "
				"not with --groups/--groups-total\n", share_name());
		return -1;
	}
	if (g_o.threads > g_o.nodes) {
		if (threads_given) {
			fprintf(stderr, "kt-storesim: --threads: %d is more than the %d nodes\n", g_o.threads,
				g_o.nodes);
			return -1;
		}
		g_o.threads = g_o.nodes;
	}
	return 0;
}

/* ---- the server ---- */

static redisContext *admin_connect(void)
{
	struct timeval tv = { .tv_sec = 5 };
	redisContext *c = redisConnectWithTimeout(g_o.redis_host, g_o.redis_port, tv);

	if (!c || c->err) {
		fprintf(stderr, "kt-storesim: --redis: cannot connect to %s:%d: %s\n", g_o.redis_host,
			g_o.redis_port, c ? c->errstr : "out of memory");
		if (c)
			redisFree(c);
		return NULL;
	}
	redisSetTimeout(c, tv);
	return c;
}

/* redisCommand that must not fail: a string-ish reply copied into buf (may be NULL) */
static int admin_cmd(redisContext *c, char *buf, size_t len, const char *fmt, ...)
{
	redisReply *r;
	va_list ap;
	int ret = 0;

	va_start(ap, fmt);
	r = redisvCommand(c, fmt, ap);
	va_end(ap);
	if (!r) {
		fprintf(stderr, "kt-storesim: redis: %s\n", c->errstr);
		return -EIO;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		fprintf(stderr, "kt-storesim: redis: %s: %s\n", fmt, r->str);
		ret = -EIO;
	} else if (buf && len) {
		const redisReply *s = r;

		if (r->type == REDIS_REPLY_ARRAY && r->elements == 2) /* CONFIG GET name -> [name, value] */
			s = r->element[1];
		snprintf(buf, len, "%s",
			 s->type == REDIS_REPLY_STRING || s->type == REDIS_REPLY_STATUS ? s->str : "");
	}
	freeReplyObject(r);
	return ret;
}

static int redis_cpu_s(redisContext *c, double *cpu)
{
	redisReply *r = redisCommand(c, "INFO cpu");
	const char *p;
	double sys = -1, user = -1;

	if (!r || r->type != REDIS_REPLY_STRING) {
		if (r)
			freeReplyObject(r);
		fprintf(stderr, "kt-storesim: redis: INFO cpu failed\n");
		return -EIO;
	}
	if ((p = strstr(r->str, "used_cpu_sys:")))
		sys = strtod(p + strlen("used_cpu_sys:"), NULL);
	if ((p = strstr(r->str, "used_cpu_user:")))
		user = strtod(p + strlen("used_cpu_user:"), NULL);
	freeReplyObject(r);
	if (sys < 0 || user < 0) {
		fprintf(stderr, "kt-storesim: redis: INFO cpu has no used_cpu_sys/used_cpu_user\n");
		return -EIO;
	}
	*cpu = sys + user;
	return 0;
}

/* Moves the slow log into `out`: the durations (us, Redis's own timing of
 * the command) of the heartbeat scripts. With the threshold at 0 the log
 * also holds every command the scripts call, so it is drained often; GET
 * and RESET run in one transaction so no entry falls between them. */
static int slowlog_drain(redisContext *c, struct samples *out)
{
	redisReply *r = NULL, *log;
	int ret = -EIO;

	redisAppendCommand(c, "MULTI");
	redisAppendCommand(c, "SLOWLOG GET -1");
	redisAppendCommand(c, "SLOWLOG RESET");
	redisAppendCommand(c, "EXEC");
	for (int i = 0; i < 4; i++) {
		if (r)
			freeReplyObject(r);
		r = NULL;
		if (redisGetReply(c, (void **)&r) != REDIS_OK) {
			fprintf(stderr, "kt-storesim: redis: SLOWLOG GET: %s\n", c->errstr);
			return -EIO;
		}
	}
	if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
	    r->element[0]->type != REDIS_REPLY_ARRAY) {
		fprintf(stderr, "kt-storesim: redis: SLOWLOG GET failed\n");
		goto out;
	}
	log = r->element[0];
	for (size_t i = 0; i < log->elements; i++) {
		const redisReply *e = log->element[i], *args;

		if (e->type != REDIS_REPLY_ARRAY || e->elements < 4)
			continue;
		args = e->element[3];
		if (args->type != REDIS_REPLY_ARRAY || !args->elements ||
		    args->element[0]->type != REDIS_REPLY_STRING)
			continue;
		if (strcasecmp(args->element[0]->str, "EVALSHA") && strcasecmp(args->element[0]->str, "EVAL"))
			continue;
		if (push(out, (uint64_t)e->element[2]->integer)) {
			ret = -ENOMEM;
			goto out;
		}
	}
	ret = 0;
out:
	if (r)
		freeReplyObject(r);
	return ret;
}

/* --share demand: the grants stored in Redis for the limit, summed */
static int grant_sum_stored(redisContext *c, const char *prefix, double *sum, size_t *n)
{
	redisReply *r = redisCommand(c, "HVALS %s:pool:{%s}:grant", prefix, LIMIT_NAME);

	if (!r || r->type != REDIS_REPLY_ARRAY) {
		fprintf(stderr, "kt-storesim: redis: HVALS grant failed%s%s\n", r ? "" : ": ",
			r ? "" : c->errstr);
		if (r)
			freeReplyObject(r);
		return -EIO;
	}
	*sum = 0;
	for (size_t i = 0; i < r->elements; i++)
		*sum += r->element[i]->type == REDIS_REPLY_STRING ? strtod(r->element[i]->str, NULL) : NAN;
	*n = r->elements;
	freeReplyObject(r);
	return 0;
}

/* this process's CPU (all threads), seconds */
static double self_cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static int raise_nofile(int need)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return -errno;
	if (rl.rlim_cur >= (rlim_t)need)
		return 0;
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < (rlim_t)need) {
		fprintf(stderr, "kt-storesim: --nodes: %d needs %d open files, the hard limit is %llu\n",
			g_o.nodes, need, (unsigned long long)rl.rlim_max);
		return -EMFILE;
	}
	rl.rlim_cur = (rlim_t)need;
	if (setrlimit(RLIMIT_NOFILE, &rl)) {
		fprintf(stderr, "kt-storesim: --nodes: cannot raise the open file limit to %d: %s\n", need,
			strerror(errno));
		return -errno;
	}
	return 0;
}

/* ---- nodes ---- */

static int open_nodes(const char *prefix)
{
	struct kt_store_cfg cfg = {
		.kind = KT_STORE_REDIS,
		.redis_mode = KT_REDIS_SINGLE,
		.host = g_o.redis_host,
		.port = g_o.redis_port,
		.key_prefix = (char *)prefix,
		.leases = g_o.node_leases ? KT_LEASES_NODE : KT_LEASES_MEMBER,
	};
	char err[KT_ERR_LEN];

	g_nodes = calloc((size_t)g_o.nodes, sizeof(*g_nodes));
	g_grp_name = calloc((size_t)g_o.groups_total, sizeof(*g_grp_name));
	g_grp_nodes = calloc((size_t)g_o.groups_total, sizeof(*g_grp_nodes));
	g_grp_victims = calloc((size_t)g_o.groups_total, sizeof(*g_grp_victims));
	if (!g_nodes || !g_grp_name || !g_grp_nodes || !g_grp_victims)
		return -ENOMEM;
	for (int g = 0; g < g_o.groups_total; g++) {
		if (g_o.grouped)
			snprintf(g_grp_name[g], sizeof(g_grp_name[g]), "%s@g%05d", LIMIT_NAME, g);
		else
			snprintf(g_grp_name[g], sizeof(g_grp_name[g]), "%s", LIMIT_NAME);
	}
	for (int i = 0; i < g_o.nodes; i++) {
		struct node *nd = &g_nodes[i];
		int ret;

		nd->members = calloc((size_t)g_o.members, sizeof(*nd->members));
		nd->ids = calloc((size_t)g_o.members, ID_LEN);
		nd->grants = calloc((size_t)g_o.members, sizeof(*nd->grants));
		nd->reqs = calloc((size_t)g_o.groups, sizeof(*nd->reqs));
		nd->ans = calloc((size_t)g_o.groups, sizeof(*nd->ans));
		nd->grp = calloc((size_t)g_o.groups, sizeof(*nd->grp));
		if (!nd->members || !nd->ids || !nd->grants || !nd->reqs || !nd->ans || !nd->grp)
			return -ENOMEM;
		/* the same members in every group of the node, as a pod is in one
		 * group of each limit it matches */
		for (int k = 0; k < g_o.groups; k++) {
			int g = group_of(i, k);

			nd->grp[k] = g;
			g_grp_nodes[g]++;
			g_grp_victims[g] += is_victim(i);
			nd->reqs[k] = (struct kt_pool_req){
				.limit = g_grp_name[g],
				.members = nd->members,
				.n_members = g_o.members,
				.stale_ms = (uint64_t)g_o.stale_after * (uint64_t)g_o.heartbeat_ms,
				.save_ramp = -1,
				.hold_ms = (uint64_t)g_o.hold_ms,
				.fallback_rate = g_o.hold_ms ? 1 : 0,
				.weighted = g_o.weighted,
			};
			if (g_o.classes) {
				nd->reqs[k].n_classes = 2;
				nd->reqs[k].class_floor[0] = 0;
				nd->reqs[k].class_ceiling[0] = POOL_RATE;
				nd->reqs[k].class_floor[1] = CLASS_BATCH_FLOOR;
				nd->reqs[k].class_ceiling[1] = POOL_RATE;
			}
		}
		for (int j = 0; j < g_o.members; j++) {
			char *id = nd->ids + (size_t)j * ID_LEN;

			snprintf(id, ID_LEN, "node%04d/m%d", i, j);
			nd->members[j] = (struct kt_pool_member){ .id = id, .reported_size = KT_POOL_REPORT_LIVE };
			if (g_o.weighted)
				nd->members[j].weight = weight_of(i, j);
			if (g_o.classes)
				nd->members[j].klass = critical(i, j) ? 0 : 1;
		}
		ret = kt_store_open(&nd->st, &cfg, err, sizeof(err));
		if (!ret && g_o.node_leases) {
			char name[16];

			snprintf(name, sizeof(name), "node%04d", i);
			ret = kt_store_set_node(nd->st, name);
		}
		/* connect now: connection setup is not part of what is measured */
		if (!ret)
			ret = kt_store_ping(nd->st, err, sizeof(err));
		if (ret) {
			fprintf(stderr, "kt-storesim: node %d: %s\n", i, err);
			return ret;
		}
	}
	return 0;
}

static void close_nodes(void)
{
	if (!g_nodes)
		return;
	for (int i = 0; i < g_o.nodes; i++) {
		kt_store_close(g_nodes[i].st);
		free(g_nodes[i].members);
		free(g_nodes[i].ids);
		free(g_nodes[i].grants);
		free(g_nodes[i].reqs);
		free(g_nodes[i].ans);
		free(g_nodes[i].grp);
	}
	free(g_nodes);
	g_nodes = NULL;
}

/* Waits until every node expected in `ph` answers AGREE at its target;
 * the moment the last one did, or 0 on timeout. */
static uint64_t wait_agreement(int ph, uint64_t timeout_ms)
{
	uint64_t deadline = mono_ns() + timeout_ms * NS_PER_MS;

	while (mono_ns() < deadline && !g_interrupted) {
		if (atomic_load(&g_n_ok[ph]) == expected_ok(ph))
			return atomic_load(&g_reached_ns[ph]);
		sleep_until_ns(mono_ns() + NS_PER_MS);
	}
	return 0;
}

static double ms_between(uint64_t from, uint64_t to)
{
	return to > from ? (double)(to - from) / 1e6 : 0;
}

static int merge(struct samples *dst, const struct samples *src)
{
	for (size_t i = 0; i < src->n; i++)
		if (push(dst, src->v[i]))
			return -ENOMEM;
	return 0;
}

struct class_sums {
	double crit_granted, batch_granted, crit_demand, batch_demand, sat_min_ratio;
	size_t n_crit, n_batch, n_sat_crit, n_sat_short, n_unknown;
	size_t n_missing; /* members with no grant or no demand stored (not joined, or lapsed) */
};

/* --share classes: member k of the pool from its id "nodeIIII/mJ"; -1 if not ours */
static long long member_index(const char *id)
{
	int i, j;

	if (sscanf(id, "node%d/m%d", &i, &j) != 2 || i < 0 || i >= g_o.nodes || j < 0 || j >= g_o.members)
		return -1;
	return (long long)i * g_o.members + j;
}

/* --share classes: grant, dem and wt as stored, per class. A member's
 * demand is its dem score x its weight (wt: "W" or "W K"; none: 1). */
static int class_sums_stored(redisContext *c, const char *prefix, struct class_sums *o)
{
	size_t n = (size_t)g_o.nodes * (size_t)g_o.members;
	double *grant = malloc(n * sizeof(*grant)), *dem = malloc(n * sizeof(*dem)), *wt = malloc(n * sizeof(*wt));
	redisReply *r[3] = { NULL, NULL, NULL };
	int ret = -EIO;

	*o = (struct class_sums){ .sat_min_ratio = INFINITY };
	if (!grant || !dem || !wt) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t k = 0; k < n; k++) {
		grant[k] = dem[k] = NAN;
		wt[k] = 1;
	}
	r[0] = redisCommand(c, "HGETALL %s:pool:{%s}:grant", prefix, LIMIT_NAME);
	r[1] = redisCommand(c, "ZRANGE %s:pool:{%s}:dem 0 -1 WITHSCORES", prefix, LIMIT_NAME);
	r[2] = redisCommand(c, "HGETALL %s:pool:{%s}:wt", prefix, LIMIT_NAME);
	for (int t = 0; t < 3; t++) {
		if (!r[t] || r[t]->type != REDIS_REPLY_ARRAY || r[t]->elements % 2) {
			fprintf(stderr, "kt-storesim: redis: reading grant, dem and wt failed%s%s\n",
				r[t] ? "" : ": ", r[t] ? "" : c->errstr);
			goto out;
		}
		for (size_t e = 0; e + 1 < r[t]->elements; e += 2) {
			const redisReply *id = r[t]->element[e], *v = r[t]->element[e + 1];
			long long k = id->type == REDIS_REPLY_STRING ? member_index(id->str) : -1;
			double x = v->type == REDIS_REPLY_STRING ? strtod(v->str, NULL) : NAN;

			if (k < 0) {
				o->n_unknown++;
				continue;
			}
			if (t == 0)
				grant[k] = x;
			else if (t == 1)
				dem[k] = x;
			else
				wt[k] = x; /* "W K": strtod stops at the space */
		}
	}
	for (size_t k = 0; k < n; k++) {
		int i = (int)(k / (size_t)g_o.members), j = (int)(k % (size_t)g_o.members);
		double d = dem[k] * wt[k];

		if (!isfinite(grant[k]) || !isfinite(d)) { /* short, and in no sum */
			o->n_missing++;
			if (critical(i, j) && saturated(i, j)) {
				o->n_sat_crit++;
				o->n_sat_short++;
			}
			continue;
		}
		if (critical(i, j)) {
			o->crit_granted += grant[k];
			o->crit_demand += d;
			o->n_crit++;
			if (saturated(i, j)) {
				double ratio = grant[k] / d;

				o->n_sat_crit++;
				if (!(ratio >= 1 - CLASS_TOL))
					o->n_sat_short++;
				if (!(ratio >= o->sat_min_ratio))
					o->sat_min_ratio = ratio;
			}
		} else {
			o->batch_granted += grant[k];
			o->batch_demand += d;
			o->n_batch++;
		}
	}
	ret = 0;
out:
	for (int t = 0; t < 3; t++)
		if (r[t])
			freeReplyObject(r[t]);
	free(grant);
	free(dem);
	free(wt);
	return ret;
}

/* --share classes: the most the critical class's demands sent sum to (each
 * at its +1% jitter peak, floor_rate at least, as the script counts them) */
static double crit_demand_sent_max(void)
{
	double sum = 0;

	for (int i = 0; i < g_o.nodes; i++)
		for (int j = 0; j < g_o.members; j++) {
			long long k = (long long)i * g_o.members + j;
			double d = saturated(i, j) ? 20 : (5 + k % 30) / 50.0;

			if (critical(i, j))
				sum += fmax(d * equal_share() * 1.01, floor_rate());
		}
	return sum;
}

struct results {
	uint64_t heartbeats, round_trips, not_agree, errors, cmds, bytes, quiet, limits, deferred;
	uint64_t postponed, caught_up, acked;
	struct samples script_us, rtt_us, lateness_us, steady_late_us;
	double rt_per_hb, cpu_pct, self_cpu_pct, window_s;
	double kill_cpu_pct, kill_window_s; /* Redis CPU from the kill on */
	double agree_start_ms, agree_kill_ms, bound_ms;
	/* --share demand */
	uint64_t grant_violations, answers;
	double granted_max, mean_sat, mean_small;
	double stored_sum, stored_sum_kill; /* end of steady state; survivors agreed after the kill */
	size_t stored_n, stored_n_kill;
	/* --share weighted: saturated members' mean grants by weight (capped by
	 * the level), their ratio, the samples, saturated answers not capped,
	 * the answers' weights summed (smallest, largest) */
	double mean_heavy, mean_light, ratio, weights_min, weights_max;
	uint64_t n_heavy, n_light, n_uncapped;
	bool ok_ratio;
	/* --share classes, from Redis at the end of the steady state: each
	 * class's grants and demands (as stored: max(demand, floor_rate))
	 * summed; the critical demand the simulator sends at most (+1%);
	 * saturated critical members: counted, short of demand x (1 - CLASS_TOL),
	 * their smallest grant / demand */
	struct class_sums cs;
	double crit_sent_max;
	bool crit_fits, ok_crit, ok_batch;
	char first_error[KT_ERR_LEN];
	char first_violation[160];
	bool ok_script, ok_rt, ok_kill, ok_start, ok_steady, ok_grants;
	int grp_min, grp_max; /* --groups: the fewest and most nodes a group is on */
};

static void row(const char *figure, const char *measured, const char *target, const char *verdict)
{
	printf("| %-48s | %-27s | %-20s | %-6s |\n", figure, measured, target, verdict);
}

static const char *verdict(bool ok)
{
	return ok ? "ok" : "MISSED";
}

/* Limits in one heartbeat script: a node's groups go in scripts of at most
 * KT_STORE_SCRIPT_UNITS units, a limit counting 1 plus its members. */
static double per_script(void)
{
	int n = KT_STORE_SCRIPT_UNITS / (1 + g_o.members);

	return n < 1 ? 1 : n > g_o.groups ? g_o.groups : n;
}

static void print_table(const struct results *r)
{
	double H = g_o.heartbeat_ms;
	char m[64], t[64];

	if (g_o.grouped)
		printf("kt-storesim: %d nodes x %d groups x %d members, heartbeat %d ms, staleAfter %d, "
		       "%d s steady, kill %d, %d threads\n"
		       "groups: %d in all, \"%s@g00000\".., each on %d..%d nodes (pool %d..%d); "
		       "a node's %d in one heartbeat call\n",
		       g_o.nodes, g_o.groups, g_o.members, g_o.heartbeat_ms, g_o.stale_after, g_o.duration_s,
		       g_o.kill, g_o.threads, g_o.groups_total, LIMIT_NAME, r->grp_min, r->grp_max,
		       r->grp_min * g_o.members, r->grp_max * g_o.members, g_o.groups);
	else
		printf("kt-storesim: %d nodes x %d members (pool %d), heartbeat %d ms, staleAfter %d, "
		       "%d s steady, kill %d, %d threads\n",
		       g_o.nodes, g_o.members, g_o.nodes * g_o.members, g_o.heartbeat_ms, g_o.stale_after,
		       g_o.duration_s, g_o.kill, g_o.threads);
	if (g_o.hold_ms)
		printf("hold: a dead member's fallback (1/s) is held %d ms after it lapses\n", g_o.hold_ms);
	if (g_o.demand)
		printf("share: %s (pool_rate %.0f/s, floor_rate %.3g/s, recompute %d ms; equal share "
		       "%.3g/s, 1 member in 7 asks 20 of them, the others 0.1..0.68 of one)\n",
		       share_name(), POOL_RATE, floor_rate(), g_o.heartbeat_ms / 2,
		       equal_share());
	if (g_o.weighted)
		printf("weights: member k of the pool weighs %.0f when k %% 4 == 0, else 1 (%.0f in all)\n",
		       WEIGHT_HEAVY, pool_weight());
	if (g_o.classes)
		printf("classes: critical (k %% 5 == 0) floor 0, batch floor %.0f/s, ceilings %.0f/s\n",
		       CLASS_BATCH_FLOOR, POOL_RATE);
	if (!g_o.demand)
		printf("share: equal\n");
	row("figure", "measured", "target", "");
	printf("|%.50s|%.29s|%.22s|%.8s|\n", "--------------------------------------------------",
	       "-----------------------------", "----------------------", "--------");
	snprintf(m, sizeof(m), "%.3f / %.3f ms", (double)pct(&r->lateness_us, .5) / 1e3,
		 (double)pct(&r->lateness_us, .99) / 1e3);
	row("heartbeat lateness p50 / p99 (simulation)", m, "", "");
	snprintf(m, sizeof(m), "%.3f / %.3f ms", (double)pct(&r->steady_late_us, .5) / 1e3,
		 (double)pct(&r->steady_late_us, .99) / 1e3);
	row("  the same, steady-state heartbeats only", m, "", "");
	snprintf(m, sizeof(m), "%llu / %llu us", (unsigned long long)pct(&r->script_us, .5),
		 (unsigned long long)pct(&r->script_us, .99));
	if (!g_o.grouped) {
		row("heartbeat script on the server p50 / p99", m, "p99 < 1000 us", verdict(r->ok_script));
	} else {
		row("heartbeat script on the server p50 / p99 (call)", m, "", "");
		snprintf(m, sizeof(m), "%.1f / %.1f us", (double)pct(&r->script_us, .5) / per_script(),
			 (double)pct(&r->script_us, .99) / per_script());
		row("  per limit (a script's / its limits) p50 / p99", m, "p99 < 1000 us", verdict(r->ok_script));
	}
	snprintf(m, sizeof(m), "%llu / %llu us", (unsigned long long)pct(&r->rtt_us, .5),
		 (unsigned long long)pct(&r->rtt_us, .99));
	row("heartbeat round trip (client) p50 / p99", m, "", "");
	snprintf(m, sizeof(m), "%.1f %%", r->cpu_pct);
	row("Redis CPU (one core = 100 %)", m, "", "");
	snprintf(m, sizeof(m), "%.1f %%", r->self_cpu_pct);
	row("kt-storesim's own CPU (all threads)", m, "", "");
	snprintf(m, sizeof(m), "%.3f", r->rt_per_hb);
	row("round trips per node per heartbeat", m, "<= 1", verdict(r->ok_rt));
	/* the store's work (issue: it should follow the nodes, not nodes x
	 * groups): what the scripts ran and the bytes, per node heartbeat */
	snprintf(m, sizeof(m), "%.1f / %.0f B",
		 r->heartbeats ? (double)r->cmds / (double)r->heartbeats : 0,
		 r->heartbeats ? (double)r->bytes / (double)r->heartbeats : 0);
	row("Redis commands / bytes per node heartbeat", m, "", "");
	snprintf(m, sizeof(m), "%.1f of %.1f", r->heartbeats ? (double)(r->limits - r->quiet) / (double)r->heartbeats : 0,
		 r->heartbeats ? (double)r->limits / (double)r->heartbeats : 0);
	row(g_o.node_leases ? "limits sent per node heartbeat (leases: node)" : "limits sent per node heartbeat", m,
	    "", "");
	snprintf(m, sizeof(m), "%llu / %llu", (unsigned long long)r->not_agree, (unsigned long long)r->errors);
	row(g_o.grouped ? "steady group answers not AGREE at size / errors"
			: "steady answers not AGREE at N x M / errors",
	    m, "0 / 0", verdict(r->ok_steady));
	if (r->agree_start_ms >= 0)
		snprintf(m, sizeof(m), "%.0f ms (%.2f heartbeats)", r->agree_start_ms, r->agree_start_ms / H);
	else
		snprintf(m, sizeof(m), "never");
	row(g_o.grouped ? "every group AGREE at its size after the start" : "all AGREE at N x M after the start",
	    m, "", verdict(r->ok_start));
	snprintf(m, sizeof(m), "%llu", (unsigned long long)r->deferred);
	row("limits deferred by the join budget (all nodes)", m, "", "");
	if (g_o.node_leases) {
		snprintf(m, sizeof(m), "%llu / %llu / %llu", (unsigned long long)r->postponed,
			 (unsigned long long)r->caught_up, (unsigned long long)r->acked);
		row("news postponed / answers caught up / acknowledged", m, "", "");
	}
	if (r->agree_kill_ms >= 0)
		snprintf(m, sizeof(m), "%.0f ms (%.2f heartbeats)", r->agree_kill_ms, r->agree_kill_ms / H);
	else
		snprintf(m, sizeof(m), "never");
	snprintf(t, sizeof(t), "<= %.0f ms (%d hb)", r->bound_ms, g_o.stale_after + 2);
	row(g_o.grouped ? "every group AGREE at survivors x M after kill"
			: "all survivors AGREE at (N-K) x M after the kill",
	    m, t, verdict(r->ok_kill));
	snprintf(m, sizeof(m), "%.1f %% over %.1f s", r->kill_cpu_pct, r->kill_window_s);
	row(g_o.hold_ms ? "Redis CPU from the kill (through the hold)" : "Redis CPU from the kill", m, "", "");
	if (g_o.demand) {
		snprintf(m, sizeof(m), "%llu of %llu", (unsigned long long)r->grant_violations,
			 (unsigned long long)r->answers);
		row("answers granted > pool_rate - reserved", m, "0", verdict(!r->grant_violations));
		snprintf(m, sizeof(m), "%.6f /s", r->granted_max);
		snprintf(t, sizeof(t), "<= %.0f /s", POOL_RATE);
		row("largest granted answered", m, t, verdict(r->granted_max <= POOL_RATE + GRANT_EPS));
		snprintf(m, sizeof(m), "%.3f / %.3f /s", r->stored_sum, r->stored_sum_kill);
		row("grants stored, summed: steady / after the kill", m, t,
		    verdict(r->stored_sum <= POOL_RATE + GRANT_EPS && r->stored_sum_kill <= POOL_RATE + GRANT_EPS));
		snprintf(m, sizeof(m), "%.3g / %.3g /s", r->mean_sat, r->mean_small);
		snprintf(t, sizeof(t), "equal share %.3g /s", equal_share());
		row("mean grant (steady): saturated / the others", m, t, "");
	}
	if (g_o.classes) {
		snprintf(m, sizeof(m), "%.1f /s", r->crit_sent_max);
		snprintf(t, sizeof(t), "pool - floor %.0f", POOL_RATE - CLASS_BATCH_FLOOR);
		row("critical demand sent, at most (+1%)", m, t, r->crit_fits ? "fits" : "over");
		snprintf(m, sizeof(m), "%.1f / %.1f /s", r->cs.crit_demand, r->cs.batch_demand);
		row("demand stored (steady end): critical / batch", m, "", "");
		snprintf(m, sizeof(m), "%.1f / %.1f /s", r->cs.crit_granted, r->cs.batch_granted);
		row("granted stored (steady end): critical / batch", m, "", "");
		snprintf(m, sizeof(m), "%zu", r->cs.n_missing);
		row("  members with no grant or demand stored", m, "", "");
		snprintf(m, sizeof(m), "%zu short of %zu, min %.4f", r->cs.n_sat_short, r->cs.n_sat_crit,
			 r->cs.sat_min_ratio);
		snprintf(t, sizeof(t), "0 (>= %.2f x demand)", 1 - CLASS_TOL);
		row("saturated critical: grant / demand", m, r->crit_fits ? t : "n/a (over)",
		    r->crit_fits ? verdict(r->ok_crit) : "n/a");
		snprintf(m, sizeof(m), "%.1f /s", r->cs.batch_granted);
		snprintf(t, sizeof(t), ">= %.1f /s", fmin(CLASS_BATCH_FLOOR, r->cs.batch_demand) * 0.99);
		row("batch granted, summed (steady end)", m, t, verdict(r->ok_batch));
	}
	if (g_o.weighted && !g_o.classes) {
		snprintf(m, sizeof(m), "%.0f..%.0f", r->weights_min, r->weights_max);
		snprintf(t, sizeof(t), "%.0f", pool_weight());
		row("answers' weights (steady), smallest..largest", m, t, "");
		snprintf(m, sizeof(m), "%.3g / %.3g /s", r->mean_heavy, r->mean_light);
		row("mean grant, saturated capped: weight 3 / 1", m, "", "");
		snprintf(m, sizeof(m), "%.4f (%llu / %llu)", r->ratio, (unsigned long long)r->n_heavy,
			 (unsigned long long)r->n_light);
		snprintf(t, sizeof(t), "%.0f +- %.0f %%", WEIGHT_HEAVY, RATIO_TOL * 100);
		row("  their ratio (samples: weight 3 / 1)", m, t, verdict(r->ok_ratio));
		snprintf(m, sizeof(m), "%llu", (unsigned long long)r->n_uncapped);
		row("  saturated answers the level did not cap", m, "", "");
	}
	printf("(%llu steady heartbeats over %.1f s: script timings from the first half (%zu), CPU and\n"
	       " client round trips from the second; lateness over all %zu heartbeats of the run)\n",
	       (unsigned long long)r->heartbeats, r->window_s, r->script_us.n, r->lateness_us.n);
	if (r->first_error[0])
		printf("first error: %s\n", r->first_error);
	if (r->first_violation[0])
		printf("first grant violation: %s\n", r->first_violation);
}

static void print_json(const struct results *r, bool pass)
{
	printf("{\"nodes\":%d,\"members\":%d,\"heartbeat_ms\":%d,\"stale_after\":%d,\"duration_s\":%d,"
	       "\"kill\":%d,\"threads\":%d,"
	       "\"steady_heartbeats\":%llu,\"steady_window_s\":%.3f,\"script_samples\":%zu,"
	       "\"lateness_p50_ms\":%.3f,\"lateness_p99_ms\":%.3f,\"lateness_max_ms\":%.3f,"
	       "\"lateness_steady_p99_ms\":%.3f,"
	       "\"script_p50_us\":%llu,\"script_p99_us\":%llu,\"script_p999_us\":%llu,\"script_max_us\":%llu,"
	       "\"rtt_p50_us\":%llu,\"rtt_p99_us\":%llu,"
	       "\"redis_cpu_pct\":%.2f,\"self_cpu_pct\":%.2f,\"round_trips_per_heartbeat\":%.4f,"
	       "\"commands_per_heartbeat\":%.2f,\"bytes_per_heartbeat\":%.1f,\"leases\":\"%s\","
	       "\"limits_sent_per_heartbeat\":%.2f,"
	       "\"steady_not_agree\":%llu,\"errors\":%llu,"
	       "\"agree_start_ms\":%.1f,\"agree_after_kill_ms\":%.1f,\"agree_after_kill_hb\":%.3f,"
	       "\"agree_bound_ms\":%.0f,\"agree_bound_hb\":%d,"
	       "\"ok_script\":%d,\"ok_round_trips\":%d,\"ok_kill\":%d,\"ok_start\":%d,\"ok_steady\":%d,"
	       "\"deferred\":%llu,\"postponed\":%llu,\"caught_up\":%llu,\"acked\":%llu,"
	       "\"hold_ms\":%d,\"kill_cpu_pct\":%.2f,\"kill_window_s\":%.1f,\"pass\":%d,",
	       g_o.nodes, g_o.members, g_o.heartbeat_ms, g_o.stale_after, g_o.duration_s, g_o.kill,
	       g_o.threads, (unsigned long long)r->heartbeats, r->window_s, r->script_us.n,
	       (double)pct(&r->lateness_us, .5) / 1e3, (double)pct(&r->lateness_us, .99) / 1e3,
	       (double)pct(&r->lateness_us, 1) / 1e3, (double)pct(&r->steady_late_us, .99) / 1e3,
	       (unsigned long long)pct(&r->script_us, .5),
	       (unsigned long long)pct(&r->script_us, .99), (unsigned long long)pct(&r->script_us, .999),
	       (unsigned long long)pct(&r->script_us, 1), (unsigned long long)pct(&r->rtt_us, .5),
	       (unsigned long long)pct(&r->rtt_us, .99), r->cpu_pct, r->self_cpu_pct, r->rt_per_hb,
	       r->heartbeats ? (double)r->cmds / (double)r->heartbeats : 0.0,
	       r->heartbeats ? (double)r->bytes / (double)r->heartbeats : 0.0,
	       g_o.node_leases ? "node" : "member",
	       r->heartbeats ? (double)(r->limits - r->quiet) / (double)r->heartbeats : 0.0,
	       (unsigned long long)r->not_agree, (unsigned long long)r->errors, r->agree_start_ms,
	       r->agree_kill_ms, r->agree_kill_ms >= 0 ? r->agree_kill_ms / g_o.heartbeat_ms : -1.0,
	       r->bound_ms, g_o.stale_after + 2, r->ok_script, r->ok_rt, r->ok_kill, r->ok_start,
	       r->ok_steady, (unsigned long long)r->deferred, (unsigned long long)r->postponed,
	       (unsigned long long)r->caught_up, (unsigned long long)r->acked, g_o.hold_ms, r->kill_cpu_pct,
	       r->kill_window_s, pass);
	if (g_o.grouped)
		printf("\"groups\":%d,\"groups_total\":%d,\"group_nodes_min\":%d,\"group_nodes_max\":%d,"
		       "\"script_per_limit_p50_us\":%.2f,\"script_per_limit_p99_us\":%.2f,",
		       g_o.groups, g_o.groups_total, r->grp_min, r->grp_max,
		       (double)pct(&r->script_us, .5) / per_script(), (double)pct(&r->script_us, .99) / per_script());
	if (g_o.classes)
		printf("\"batch_floor\":%.1f,\"crit_demand_sent_max\":%.6f,\"crit_fits\":%d,"
		       "\"crit_demand_stored\":%.6f,\"batch_demand_stored\":%.6f,"
		       "\"crit_granted_stored\":%.6f,\"batch_granted_stored\":%.6f,"
		       "\"sat_crit\":%zu,\"sat_crit_short\":%zu,\"sat_crit_min_ratio\":%.6f,"
		       "\"class_members_missing\":%zu,\"ok_crit\":%d,\"ok_batch\":%d,",
		       CLASS_BATCH_FLOOR, r->crit_sent_max, r->crit_fits, r->cs.crit_demand, r->cs.batch_demand,
		       r->cs.crit_granted, r->cs.batch_granted, r->cs.n_sat_crit, r->cs.n_sat_short,
		       r->cs.sat_min_ratio, r->cs.n_missing, r->ok_crit, r->ok_batch);
	if (g_o.weighted && !g_o.classes)
		printf("\"weights_min\":%.17g,\"weights_max\":%.17g,\"pool_weight\":%.17g,"
		       "\"grant_mean_saturated_w3\":%.6g,\"grant_mean_saturated_w1\":%.6g,"
		       "\"grant_ratio_w3_w1\":%.6g,\"samples_w3\":%llu,\"samples_w1\":%llu,"
		       "\"saturated_uncapped\":%llu,\"ok_ratio\":%d,",
		       r->weights_min, r->weights_max, pool_weight(), r->mean_heavy, r->mean_light, r->ratio,
		       (unsigned long long)r->n_heavy, (unsigned long long)r->n_light,
		       (unsigned long long)r->n_uncapped, r->ok_ratio);
	if (g_o.demand)
		printf("\"share\":\"%s\",\"pool_rate\":%.1f,\"floor_rate\":%.17g,\"recompute_ms\":%d,"
		       "\"answers\":%llu,\"grant_violations\":%llu,\"granted_max\":%.6f,"
		       "\"grant_sum_stored\":%.6f,\"grants_stored\":%zu,"
		       "\"grant_sum_stored_after_kill\":%.6f,\"grants_stored_after_kill\":%zu,"
		       "\"grant_mean_saturated\":%.6g,\"grant_mean_other\":%.6g,\"ok_grants\":%d}\n",
		       share_name(), POOL_RATE, floor_rate(), g_o.heartbeat_ms / 2,
		       (unsigned long long)r->answers,
		       (unsigned long long)r->grant_violations, r->granted_max, r->stored_sum, r->stored_n,
		       r->stored_sum_kill, r->stored_n_kill, r->mean_sat, r->mean_small, r->ok_grants);
	else
		printf("\"share\":\"equal\"}\n");
}

int main(int argc, char **argv)
{
	struct rp_proc own = { 0 };
	struct worker workers[MAX_THREADS] = { 0 };
	struct results r = { .agree_start_ms = -1, .agree_kill_ms = -1 };
	char prefix[64], old_slower[32] = "", old_maxlen[32] = "";
	redisContext *admin = NULL;
	double cpu0 = 0, cpu1 = 0, self0 = 0, self1 = 0, kcpu0 = 0, kcpu1 = 0;
	uint64_t t_steady, t_cpu, t_end, t_kill = 0, t_agree, half_ns, n_sat = 0, n_small = 0;
	int started = 0, rc = 2;
	bool pass, weights_seen = false;

	if (parse_args(argc, argv))
		return 2;
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	/* one connection per node, plus ours; our redis-server inherits the
	 * limit and needs one per client as well */
	if (raise_nofile(g_o.nodes + 256))
		return 2;
	if (!g_o.redis_port) {
		char conf[128];
		struct rp_opts ro = { .extra_conf = conf };
		int ret;

		/* no snapshots: a fork mid-window would skew CPU and latency */
		snprintf(conf, sizeof(conf), "save \"\"\nappendonly no\nmaxclients %d", g_o.nodes + 128);
		ret = rp_start_master(&own, &ro);
		if (ret) {
			fprintf(stderr, "kt-storesim: cannot start redis-server: %s\n", strerror(-ret));
			return 2;
		}
		snprintf(g_o.redis_host, sizeof(g_o.redis_host), "127.0.0.1");
		g_o.redis_port = own.port;
	}
	/* a prefix of our own, so a shared server's other keys are never touched */
	snprintf(prefix, sizeof(prefix), "ktsim-%d", (int)getpid());
	admin = admin_connect();
	if (!admin)
		goto out;
	if (admin_cmd(admin, old_slower, sizeof(old_slower), "CONFIG GET slowlog-log-slower-than") ||
	    admin_cmd(admin, old_maxlen, sizeof(old_maxlen), "CONFIG GET slowlog-max-len"))
		goto out;
	if (open_nodes(prefix))
		goto out;

	g_t0_ns = mono_ns() + 50 * NS_PER_MS;
	for (int t = 0; t < g_o.threads; t++) {
		workers[t].index = t;
		if (pthread_create(&workers[t].tid, NULL, worker_main, &workers[t])) {
			fprintf(stderr, "kt-storesim: --threads: cannot start thread %d\n", t);
			atomic_store(&g_phase, PH_STOP);
			goto join;
		}
		started++;
	}
	/* every node joins within one period and stores N x M at its next
	 * heartbeat: 2 periods; a fleet whose start Redis takes seconds to
	 * serve (100 nodes x 1000 groups) needs tens; plus slack before
	 * calling it failed */
	t_agree = wait_agreement(PH_START, 40 * (uint64_t)g_o.heartbeat_ms + 5000);
	r.agree_start_ms = t_agree ? ms_between(g_t0_ns, t_agree) : -1;
	if (g_interrupted)
		goto stop;

	/* Steady state, first half: the script's server time. Logging every
	 * command costs Redis CPU of its own, so CPU and the client round trip
	 * are measured in the second half, with the slow log back as it was. */
	if (admin_cmd(admin, NULL, 0, "CONFIG SET slowlog-max-len 1000000") ||
	    admin_cmd(admin, NULL, 0, "SLOWLOG RESET") ||
	    admin_cmd(admin, NULL, 0, "CONFIG SET slowlog-log-slower-than 0"))
		goto stop;
	t_steady = mono_ns();
	atomic_store(&g_phase, PH_STEADY);
	half_ns = (uint64_t)g_o.duration_s * 500000000ULL;
	while (mono_ns() < t_steady + half_ns && !g_interrupted) {
		sleep_until_ns(mono_ns() + 100 * NS_PER_MS);
		if (slowlog_drain(admin, &r.script_us))
			goto stop;
	}
	if (admin_cmd(admin, NULL, 0, "CONFIG SET slowlog-log-slower-than %s", old_slower[0] ? old_slower : "10000") ||
	    slowlog_drain(admin, &r.script_us) || redis_cpu_s(admin, &cpu0))
		goto stop;
	self0 = self_cpu_s();
	t_cpu = mono_ns();
	atomic_store(&g_time_rtt, true);
	sleep_until_ns(t_steady + 2 * half_ns);
	if (g_interrupted || redis_cpu_s(admin, &cpu1))
		goto stop;
	self1 = self_cpu_s();
	t_end = mono_ns();
	if (g_o.demand && grant_sum_stored(admin, prefix, &r.stored_sum, &r.stored_n))
		goto stop;
	if (g_o.classes && class_sums_stored(admin, prefix, &r.cs))
		goto stop;
	atomic_store(&g_time_rtt, false);
	atomic_store(&g_phase, PH_GAP);
	/* the mass death: victims stop at their next due time, without leaving */
	if (redis_cpu_s(admin, &kcpu0))
		goto stop;
	atomic_store(&g_phase, PH_KILL);
	t_kill = mono_ns();
	r.window_s = (double)(t_end - t_steady) / 1e9;
	r.cpu_pct = (cpu1 - cpu0) / ((double)(t_end - t_cpu) / 1e9) * 100;
	r.self_cpu_pct = (self1 - self0) / ((double)(t_end - t_cpu) / 1e9) * 100;
	r.bound_ms = (double)(g_o.stale_after + 2) * g_o.heartbeat_ms;
	t_agree = wait_agreement(PH_KILL, 3 * (uint64_t)r.bound_ms + 5000);
	/* what the death costs Redis: the detection and the agreement, and with
	 * --hold-ms the hold and its end (without, the run ends as it agrees) */
	{
		uint64_t w = ((uint64_t)(g_o.stale_after + 5) * (uint64_t)g_o.heartbeat_ms + (uint64_t)g_o.hold_ms) *
			     NS_PER_MS;

		if (!g_interrupted && g_o.hold_ms)
			sleep_until_ns(t_kill + w);
		if (g_interrupted || redis_cpu_s(admin, &kcpu1))
			goto stop;
		r.kill_window_s = (double)(mono_ns() - t_kill) / 1e9;
		r.kill_cpu_pct = (kcpu1 - kcpu0) / r.kill_window_s * 100;
	}
	if (g_o.demand && grant_sum_stored(admin, prefix, &r.stored_sum_kill, &r.stored_n_kill))
		goto stop;
	rc = 0;
stop:
	atomic_store(&g_phase, PH_STOP);
join:
	for (int t = 0; t < started; t++)
		pthread_join(workers[t].tid, NULL);
	if (!rc) {
		uint64_t t_death = t_kill > g_victims_last_ns ? t_kill : g_victims_last_ns;

		r.agree_kill_ms = t_agree ? ms_between(t_death, t_agree) : -1;
	}
	if (rc || g_interrupted) {
		if (g_interrupted)
			fprintf(stderr, "kt-storesim: interrupted\n");
		rc = 2;
		goto out;
	}
	for (int t = 0; t < started; t++) {
		struct worker *w = &workers[t];

		r.heartbeats += w->steady_hb;
		r.round_trips += w->steady_rt;
		r.cmds += w->steady_cmds;
		r.quiet += w->steady_quiet;
		r.limits += w->steady_limits;
		r.bytes += w->steady_bytes;
		r.not_agree += w->steady_not_agree;
		r.errors += w->errors;
		r.deferred += w->deferred;
		r.postponed += w->postponed;
		r.caught_up += w->caught_up;
		r.acked += w->acked;
		if (!r.first_error[0] && w->first_error[0])
			snprintf(r.first_error, sizeof(r.first_error), "%s", w->first_error);
		r.grant_violations += w->grant_violations;
		r.answers += w->lateness_us.n - w->errors;
		if (w->granted_max > r.granted_max)
			r.granted_max = w->granted_max;
		r.mean_sat += w->grant_sat;
		r.mean_small += w->grant_small;
		n_sat += w->n_sat;
		n_small += w->n_small;
		r.mean_heavy += w->grant_heavy;
		r.mean_light += w->grant_light;
		r.n_heavy += w->n_heavy;
		r.n_light += w->n_light;
		r.n_uncapped += w->n_uncapped;
		if (w->weights_seen && (!weights_seen || w->weights_min < r.weights_min))
			r.weights_min = w->weights_min;
		if (w->weights_seen && (!weights_seen || w->weights_max > r.weights_max))
			r.weights_max = w->weights_max;
		weights_seen |= w->weights_seen;
		if (!r.first_violation[0] && w->first_violation[0])
			snprintf(r.first_violation, sizeof(r.first_violation), "%s", w->first_violation);
		if (merge(&r.rtt_us, &w->rtt_us) || merge(&r.lateness_us, &w->lateness_us) ||
		    merge(&r.steady_late_us, &w->steady_late_us)) {
			fprintf(stderr, "kt-storesim: out of memory\n");
			goto out;
		}
	}
	qsort(r.script_us.v, r.script_us.n, sizeof(uint64_t), cmp_u64);
	qsort(r.rtt_us.v, r.rtt_us.n, sizeof(uint64_t), cmp_u64);
	qsort(r.lateness_us.v, r.lateness_us.n, sizeof(uint64_t), cmp_u64);
	qsort(r.steady_late_us.v, r.steady_late_us.n, sizeof(uint64_t), cmp_u64);
	r.rt_per_hb = r.heartbeats ? (double)r.round_trips / (double)r.heartbeats : 0;
	r.mean_sat = n_sat ? r.mean_sat / (double)n_sat : 0;
	r.mean_small = n_small ? r.mean_small / (double)n_small : 0;
	/* the stored sums may not be NaN (a grant that is not a number) */
	r.ok_grants = !g_o.demand ||
		      (!r.grant_violations && r.granted_max <= POOL_RATE + GRANT_EPS &&
		       r.stored_sum <= POOL_RATE + GRANT_EPS && r.stored_sum_kill <= POOL_RATE + GRANT_EPS &&
		       r.stored_n == (size_t)g_o.nodes * (size_t)g_o.members);
	/* --share weighted: 3:1 within 5%, from capped samples of both weights */
	r.mean_heavy = r.n_heavy ? r.mean_heavy / (double)r.n_heavy : 0;
	r.mean_light = r.n_light ? r.mean_light / (double)r.n_light : 0;
	r.ratio = r.mean_light > 0 ? r.mean_heavy / r.mean_light : 0;
	r.ok_ratio = !g_o.weighted || g_o.classes || (r.n_heavy && r.n_light && fabs(r.ratio / WEIGHT_HEAVY - 1) <= RATIO_TOL);
	/* --share classes: (b) when critical's demand fits beside batch's
	 * floor, every saturated critical member holds its demand; (c) batch
	 * holds min(its floor, its demand) x 0.99 */
	r.crit_sent_max = g_o.classes ? crit_demand_sent_max() : 0;
	r.crit_fits = r.crit_sent_max < POOL_RATE - CLASS_BATCH_FLOOR;
	r.ok_crit = !g_o.classes || !r.crit_fits || (r.cs.n_sat_crit && !r.cs.n_sat_short);
	if (!isfinite(r.cs.sat_min_ratio)) /* none stored: JSON has no inf */
		r.cs.sat_min_ratio = -1;
	r.ok_batch = !g_o.classes ||
		     r.cs.batch_granted >= fmin(CLASS_BATCH_FLOOR, r.cs.batch_demand) * 0.99;
	/* per limit: one call carries --groups of them (1: per call, as before) */
	r.ok_script = r.script_us.n && (double)pct(&r.script_us, .99) / per_script() < SCRIPT_P99_TARGET_US;
	r.grp_min = INT32_MAX;
	for (int g = 0; g < g_o.groups_total; g++) {
		if (g_grp_nodes[g] < r.grp_min)
			r.grp_min = g_grp_nodes[g];
		if (g_grp_nodes[g] > r.grp_max)
			r.grp_max = g_grp_nodes[g];
	}
	r.ok_rt = r.heartbeats && r.rt_per_hb <= 1.0;
	r.ok_start = r.agree_start_ms >= 0;
	r.ok_kill = r.agree_kill_ms >= 0 && r.agree_kill_ms <= r.bound_ms;
	r.ok_steady = !r.not_agree && !r.errors;
	pass = r.ok_script && r.ok_rt && r.ok_start && r.ok_kill && r.ok_steady && r.ok_grants && r.ok_ratio &&
	       r.ok_crit && r.ok_batch;
	if (g_o.json)
		print_json(&r, pass);
	else
		print_table(&r);
	rc = pass ? 0 : 1;
out:
	for (int t = 0; t < MAX_THREADS; t++) {
		free(workers[t].rtt_us.v);
		free(workers[t].lateness_us.v);
		free(workers[t].steady_late_us.v);
	}
	free(r.script_us.v);
	free(r.rtt_us.v);
	free(r.lateness_us.v);
	free(r.steady_late_us.v);
	close_nodes();
	/* leave a shared server as we found it (after Ctrl-C our own server
	 * has had the signal too, and a shared one is left to its TTLs) */
	if (admin && !g_interrupted) {
		if (old_maxlen[0])
			admin_cmd(admin, NULL, 0, "CONFIG SET slowlog-max-len %s", old_maxlen);
		if (old_slower[0])
			admin_cmd(admin, NULL, 0, "CONFIG SET slowlog-log-slower-than %s", old_slower);
		admin_cmd(admin, NULL, 0, "SLOWLOG RESET");
		static const char *const keys[] = { "hb",   "size",  "ramp", "fb",    "lapsed",
						    "counted", "hist", "sizes", "meta", "grant",
						    "dem",  "claim", "seen", "wt" };
		/* wt: a weighted limit's only (the others never name it) */
		size_t nk = sizeof(keys) / sizeof(keys[0]) - !g_o.weighted;

		/* every group's keys, pipelined a group at a time */
		for (int g = 0; g_grp_name && g < g_o.groups_total && !admin->err; g++) {
			for (size_t k = 0; k < nk; k++)
				redisAppendCommand(admin, "DEL %s:pool:{%s}:%s", prefix, g_grp_name[g], keys[k]);
			for (size_t k = 0; k < nk; k++) {
				redisReply *rr = NULL;

				if (redisGetReply(admin, (void **)&rr) != REDIS_OK)
					break;
				freeReplyObject(rr);
			}
		}
	}
	free(g_grp_name);
	free(g_grp_nodes);
	free(g_grp_victims);
	if (admin)
		redisFree(admin);
	rp_stop(&own);
	return rc;
}
