/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * `make bench`'s end-to-end sections with the real daemon (tests/bench/bench.c
 * runs them), and their helpers (row_text and dsnap_take, which the sendto
 * section uses too):
 *   ramp     end to end: build/kthrottled ramping 50 -> 200/s over
 *            3 s under a saturating kt-load; per-second tracking error
 *   pool     three build/kthrottled "nodes" (own pins, cgroups and
 *            node names) on one redis-server: aggregate accuracy, Redis
 *            commands per node idle vs saturated, convergence after a kill -9
 *            and after a join
 * Their daemons run in pin directories kt-test-<pid>-<n>.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include "ktest.h"
#include "redis_proc.h"
#include "bench.h"

/* ---- helpers for the end-to-end sections (ramp, pool) ---- */

/* A row with a free-form value; target NULL: none. */
void row_text(const char *what, const char *value, const char *target, int met)
{
	struct row *r = row_new(what);

	if (!r)
		return;
	snprintf(r->value, sizeof(r->value), "%s", value);
	if (target) {
		snprintf(r->target, sizeof(r->target), "%s", target);
		row_target(r, met);
	}
}

/* One `status json` answer of a daemon under test, for limit `name` (struct
 * dsnap is in bench.h). */
bool dsnap_take(const struct ktest_daemon *d, const char *name, struct dsnap *s)
{
	char *out = ktest_daemon_cmd(d, "status json");
	double size = 0;
	bool ok;

	memset(s, 0, sizeof(*s));
	ok = out && ktest_json_num(out, "uptime_s", &s->up) &&
	     ktest_json_limit_num(out, name, "pool_rate", &s->pool_rate) &&
	     ktest_json_limit_num(out, name, "admitted", &s->admitted) &&
	     ktest_json_limit_num(out, name, "throttled", &s->throttled) &&
	     ktest_json_limit_num(out, name, "size", &size);
	s->size = (int)size;
	free(out);
	return ok;
}

/* ---- section: ramp tracking with the real daemon ---- */

#define RAMP_SECONDS 6 /* measured: seconds 2..6 (the first holds burst and attach) */

/* The ramp scenario (ktest_ramp_config): min 50/s -> max 200/s over 3 s,
 * burst 5, saturated by kt-load from before the daemon starts. Polling
 * `status json` places the kernel's exact admitted counts on the daemon's
 * uptime clock; per second k after the first, error = |admitted - integral
 * of the ramp| / integral. */
static int ramp_run(struct bench_env *e, const char *mode, double *max_err, double *mean_err)
{
	static struct dsnap s[512];
	struct ktest_daemon d = { .pid = -1 };
	char cg[PATH_MAX] = "", body[2048], modes[64];
	pid_t load = 0;
	int port, n = 0, ret;

	(void)e;
	*max_err = *mean_err = NAN;
	port = ktest_free_port(SOCK_DGRAM);
	ret = ktest_cgroup_create("bench-ramp", cg, sizeof(cg));
	if (ret || port <= 0) {
		fprintf(stderr, "bench: ramp: cannot create a cgroup or find a port\n");
		ret = ret ? ret : -EADDRNOTAVAIL;
		goto out;
	}
	snprintf(modes, sizeof(modes), "%s: {}", mode);
	ret = ktest_ramp_config(body, sizeof(body), cg, port, modes);
	if (ret)
		goto out;
	load = ktest_load_spawn(cg, port, RAMP_SECONDS + 10, 0, NULL); /* killed once measured */
	if (load < 0) {
		ret = load;
		load = 0;
		goto out;
	}
	ktest_sleep_ms(100); /* saturating before the programs attach */
	ret = ktest_daemon_up(&d, body);
	if (ret)
		goto out;
	for (int guard = 0; guard < 1000 && n < (int)(sizeof(s) / sizeof(s[0])); guard++) {
		if (g_stop) {
			ret = -EINTR;
			goto out;
		}
		if (!dsnap_take(&d, "ramp", &s[n])) {
			fprintf(stderr, "bench: ramp: kthrottled stopped answering\n");
			ret = -EIO;
			goto out;
		}
		if (s[n++].up >= RAMP_SECONDS + 0.05)
			break;
		ktest_sleep_ms(50);
	}
	ktest_kill_wait(&load);

	double sum = 0, worst = 0;
	int windows = 0;
	for (int k = 1; k < RAMP_SECONDS; k++) {
		int a = 0, b = 0;

		for (int i = 1; i < n; i++) {
			if (fabs(s[i].up - k) < fabs(s[a].up - k))
				a = i;
			if (fabs(s[i].up - (k + 1)) < fabs(s[b].up - (k + 1)))
				b = i;
		}
		double want = ktest_ramp_integral(s[b].up) - ktest_ramp_integral(s[a].up);
		double got = s[b].admitted - s[a].admitted;
		double err = fabs(got - want) / want;

		sanity(fabs(s[a].up - k) < 0.1 && fabs(s[b].up - (k + 1)) < 0.1,
		       "ramp %s: no status sample near %ds or %ds of uptime", mode, k, k + 1);
		sanity(s[b].throttled > s[a].throttled, "ramp %s: second %d not saturated", mode,
		       k + 1);
		if (getenv("KT_BENCH_VERBOSE"))
			fprintf(stderr, "bench: ramp %s [%.3f, %.3f]s admitted %.0f expected %.1f (%+.2f%%)\n",
				mode, s[a].up, s[b].up, got, want, (got - want) / want * 100);
		sum += err;
		worst = fmax(worst, err);
		windows++;
	}
	sanity(n > 0 && s[n - 1].pool_rate == KTEST_RAMP_MAX,
	       "ramp %s: pool rate %g at the end, not max", mode, n > 0 ? s[n - 1].pool_rate : NAN);
	*max_err = worst * 100;
	*mean_err = sum / windows * 100;
out:
	ktest_kill_wait(&load);
	if (d.dir[0])
		ktest_daemon_cleanup(&d);
	if (cg[0])
		ktest_cgroup_destroy(cg);
	return ret;
}

int bench_ramp(struct bench_env *e)
{
	static const char *const modes[] = { "scheduled", "relaxed" };
	char what[112], val[40];

	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		double mx, mean;
		int ret = ramp_run(e, modes[i], &mx, &mean);

		if (ret)
			return ret;
		snprintf(what, sizeof(what),
			 "ramp e2e, %s 50→200/s over 3 s, saturated: per-second error, max of s 2–%d",
			 modes[i], RAMP_SECONDS);
		snprintf(val, sizeof(val), "%.2f %%", mx);
		row_text(what, val, "≤ 3 %", mx <= 3);
		snprintf(what, sizeof(what),
			 "ramp e2e, %s 50→200/s over 3 s, saturated: per-second error, mean of s 2–%d",
			 modes[i], RAMP_SECONDS);
		snprintf(val, sizeof(val), "%.2f %%", mean);
		row_text(what, val, "≤ 3 %", mean <= 3);
	}
	return 0;
}

/* ---- section: distributed pool, three simulated nodes ---- */

#define POOL_NODES 3
#define POOL_MAX 300.0
#define POOL_HB_S 0.2
#define POOL_STALE 3
#define POOL_WINDOW_S 10.0
#define POOL_IDLE_S 3.0

/* Redis command counts from INFO commandstats: `all` (in-script commands
 * included) and `client` (only what a client can send, never a script:
 * each round trip carries at least one). INFO itself is left out. */
struct redis_counts {
	double all, client;
};

static int redis_counts(const struct rp_proc *rp, struct redis_counts *c)
{
	static const char *const client_only[] = { "evalsha", "eval", "evalsha_ro", "eval_ro",
						   "script", "auth", "hello", "select",
						   "role", "client", "subscribe", "quit" };
	redisReply *r = rp_command(rp, "INFO commandstats");
	char *save = NULL, *line, *copy;

	memset(c, 0, sizeof(*c));
	if (!r || r->type != REDIS_REPLY_STRING) {
		if (r)
			freeReplyObject(r);
		fprintf(stderr, "bench: pool: INFO commandstats failed on port %d\n", rp->port);
		return -EIO;
	}
	copy = strdup(r->str);
	freeReplyObject(r);
	if (!copy)
		return -ENOMEM;
	for (line = strtok_r(copy, "\r\n", &save); line; line = strtok_r(NULL, "\r\n", &save)) {
		char name[64];
		double calls;

		if (sscanf(line, "cmdstat_%63[^:]:calls=%lf", name, &calls) != 2 ||
		    !strcmp(name, "info"))
			continue;
		c->all += calls;
		for (size_t i = 0; i < sizeof(client_only) / sizeof(client_only[0]); i++)
			if (!strcmp(name, client_only[i]))
				c->client += calls;
	}
	free(copy);
	return 0;
}

/* Node `node`'s config. Default burst (max: one second of the share per
 * member), so a sender that loses the CPU for a while on this 2-core box
 * does not lose tokens: the window measures the limiter, not the scheduler. */
static int pool_body(char *buf, size_t len, int redis_port, int node, const char *cg, int port)
{
	return snprintf(buf, len,
			"node: kt-bench-%d-%c\n"
			"tickInterval: 100ms\n"
			"store:\n"
			"  redisStore:\n"
			"    mode: single\n"
			"    url: redis://127.0.0.1:%d/0\n"
			"    keyPrefix: kt-bench-%d\n"
			"  heartbeat: %.0fms\n"
			"  staleAfter: %d\n"
			"  validFor: 2s\n"
			"limits:\n"
			"  - name: pool\n"
			"    cgroups: [%s]\n"
			"    match: {cidrs: [127.0.0.1/32], ports: %d, protocol: udp}\n"
			"    unit: datagram\n"
			"    rateLimit: {max: %.0f}\n",
			getpid(), 'a' + node, redis_port, getpid(), POOL_HB_S * 1000, POOL_STALE, cg,
			port, POOL_MAX) >= (int)len ? -ENAMETOOLONG : 0;
}

/* Seconds from `origin` until every daemon in d[idx[0..n-1]] shows pool size
 * `size`, polled every 10 ms for at most limit_s; NAN on time-out or a daemon
 * not answering. */
static double wait_size(struct ktest_daemon *d, const int *idx, int n, int size, double limit_s,
			uint64_t origin)
{
	uint64_t t0 = now_ns();

	while ((double)(now_ns() - t0) / 1e9 < limit_s && !g_stop) {
		int ok = 0;

		for (int i = 0; i < n; i++) {
			struct dsnap s;
			if (!dsnap_take(&d[idx[i]], "pool", &s))
				return NAN;
			ok += s.size == size;
		}
		if (ok == n)
			return (double)(now_ns() - origin) / 1e9;
		ktest_sleep_ms(10);
	}
	return NAN;
}

int bench_pool(struct bench_env *e)
{
	const double converge_target = (POOL_STALE + 2) * POOL_HB_S;
	struct ktest_daemon d[POOL_NODES + 1];
	char cg[POOL_NODES + 1][PATH_MAX], body[2048], what[112], val[40], tgt[32], name[32];
	pid_t load[POOL_NODES + 1] = { 0 };
	struct rp_proc rp = { 0 };
	struct redis_counts c0, c1, c2, c3;
	struct dsnap a[POOL_NODES], b[POOL_NODES];
	int port, ret, all[POOL_NODES + 1] = { 0, 1, 2, 3 };
	double t, idle_s, sat_s;
	uint64_t t0;

	(void)e;
	memset(cg, 0, sizeof(cg));
	for (int i = 0; i <= POOL_NODES; i++) {
		memset(&d[i], 0, sizeof(d[i]));
		d[i].pid = -1;
	}
	ret = rp_start_master(&rp, NULL);
	if (ret) {
		fprintf(stderr, "bench: pool: cannot start redis-server: %s\n", strerror(-ret));
		goto out;
	}
	port = ktest_free_port(SOCK_DGRAM);
	if (port <= 0) {
		ret = -EADDRNOTAVAIL;
		goto out;
	}
	for (int i = 0; i <= POOL_NODES; i++) {
		snprintf(name, sizeof(name), "bench-pool-%d", i);
		ret = ktest_cgroup_create(name, cg[i], sizeof(cg[i]));
		if (ret) {
			cg[i][0] = 0;
			fprintf(stderr, "bench: pool: cannot create cgroup %s: %s\n", name, strerror(-ret));
			goto out;
		}
	}
	for (int i = 0; i < POOL_NODES; i++) {
		if ((ret = pool_body(body, sizeof(body), rp.port, i, cg[i], port)) ||
		    (ret = ktest_daemon_up(&d[i], body)))
			goto out;
	}
	t = wait_size(d, all, POOL_NODES, POOL_NODES, 5, now_ns());
	if (isnan(t)) {
		fprintf(stderr, "bench: pool: the %d daemons did not agree on size %d in 5 s\n",
			POOL_NODES, POOL_NODES);
		ret = -ETIMEDOUT;
		goto out;
	}

	/* Redis load with no traffic */
	ktest_sleep_ms(2 * (int)(POOL_HB_S * 1000)); /* past any join-time extra round trips */
	t0 = now_ns();
	if ((ret = redis_counts(&rp, &c0)))
		goto out;
	ktest_sleep_ms((int)(POOL_IDLE_S * 1000));
	if ((ret = redis_counts(&rp, &c1)))
		goto out;
	idle_s = (double)(now_ns() - t0) / 1e9;

	/* saturated: every node's member sends flat out */
	for (int i = 0; i < POOL_NODES; i++) {
		load[i] = ktest_load_spawn(cg[i], port, 60, 0, NULL);
		if (load[i] < 0) {
			ret = load[i];
			load[i] = 0;
			goto out;
		}
	}
	ktest_sleep_ms(1000); /* every bucket's burst spent */
	t0 = now_ns();
	if ((ret = redis_counts(&rp, &c2)))
		goto out;
	for (int i = 0; i < POOL_NODES; i++)
		if (!dsnap_take(&d[i], "pool", &a[i])) {
			ret = -EIO;
			goto out;
		}
	for (int k = 0; k < (int)(POOL_WINDOW_S * 10) && !g_stop; k++)
		ktest_sleep_ms(100);
	if (g_stop) {
		ret = -EINTR;
		goto out;
	}
	for (int i = 0; i < POOL_NODES; i++)
		if (!dsnap_take(&d[i], "pool", &b[i])) {
			ret = -EIO;
			goto out;
		}
	if ((ret = redis_counts(&rp, &c3)))
		goto out;
	sat_s = (double)(now_ns() - t0) / 1e9;

	/* each node over its own exact interval (the daemon's uptime clock) */
	double agg = 0, lo = INFINITY, hi = 0;
	for (int i = 0; i < POOL_NODES; i++) {
		double r = (b[i].admitted - a[i].admitted) / (b[i].up - a[i].up);
		agg += r;
		lo = fmin(lo, r);
		hi = fmax(hi, r);
		if (getenv("KT_BENCH_VERBOSE"))
			fprintf(stderr, "bench: pool: node %d admitted %.1f/s over %.3f s\n", i, r,
				b[i].up - a[i].up);
		sanity(b[i].throttled > a[i].throttled, "pool: node %d not saturated", i);
		sanity(a[i].size == POOL_NODES && b[i].size == POOL_NODES,
		       "pool: node %d saw size %d..%d during the window", i, a[i].size, b[i].size);
	}
	double acc = (agg / POOL_MAX - 1) * 100;
	snprintf(what, sizeof(what),
		 "pool: aggregate admitted / max, %d nodes saturated, %.0f s window (max %.0f/s)",
		 POOL_NODES, POOL_WINDOW_S, POOL_MAX);
	snprintf(val, sizeof(val), "%.2f/s (%+.2f %%)", agg, acc);
	row_text(what, val, "within ±2 %", fabs(acc) <= 2);
	snprintf(what, sizeof(what), "pool: per-node admitted rate, min–max of %d (share %.0f/s)",
		 POOL_NODES, POOL_MAX / POOL_NODES);
	snprintf(val, sizeof(val), "%.1f–%.1f /s", lo, hi);
	row_text(what, val, NULL, 0);

	double hb_per_s = 1 / POOL_HB_S;
	double idle_rt = (c1.client - c0.client) / idle_s / POOL_NODES / hb_per_s;
	double sat_rt = (c3.client - c2.client) / sat_s / POOL_NODES / hb_per_s;
	double idle_all = (c1.all - c0.all) / idle_s / POOL_NODES;
	double sat_all = (c3.all - c2.all) / sat_s / POOL_NODES;
	snprintf(what, sizeof(what),
		 "pool: Redis client commands per node per heartbeat (%.0f ms), idle", POOL_HB_S * 1000);
	snprintf(val, sizeof(val), "%.2f", idle_rt);
	row_text(what, val, "≤ 2 round trips", idle_rt <= 2);
	snprintf(what, sizeof(what),
		 "pool: Redis client commands per node per heartbeat (%.0f ms), saturated",
		 POOL_HB_S * 1000);
	snprintf(val, sizeof(val), "%.2f", sat_rt);
	row_text(what, val, "≤ 2 round trips", sat_rt <= 2);
	snprintf(what, sizeof(what),
		 "pool: Redis commands/s per node incl. in-script, saturated vs idle");
	{
		struct row *r = row_new(what);
		if (r) {
			snprintf(r->value, sizeof(r->value), "%.1f /s", sat_all);
			snprintf(r->baseline, sizeof(r->baseline), "%.1f /s", idle_all);
			snprintf(r->delta, sizeof(r->delta), "×%.3f", idle_all > 0 ? sat_all / idle_all : NAN);
			snprintf(r->target, sizeof(r->target), "no growth (≤ ×1.05)");
			row_target(r, sat_all <= idle_all * 1.05 + 0.1);
		}
	}
	sanity(idle_rt > 0.5 && sat_rt > 0.5, "pool: %.2f / %.2f commands per heartbeat: the daemons "
	       "are not heartbeating", idle_rt, sat_rt);

	/* a member dies: kill -9 node 2's daemon (its pinned programs stay);
	 * it lapses after staleAfter heartbeats and the survivors believe the
	 * shrink one answer late (damping), so one heartbeat more than a join */
	const double death_target = converge_target + POOL_HB_S;
	snprintf(tgt, sizeof(tgt), "≤ %.1f s", death_target);
	t0 = now_ns();
	ktest_daemon_signal_wait(&d[POOL_NODES - 1], SIGKILL);
	t = wait_size(d, all, POOL_NODES - 1, POOL_NODES - 1, 5, t0);
	sanity(!isnan(t), "pool: survivors did not shrink to %d within 5 s", POOL_NODES - 1);
	snprintf(what, sizeof(what),
		 "pool: convergence after kill -9 of a node (survivors show size %d; staleAfter %d × %.0f ms)",
		 POOL_NODES - 1, POOL_STALE, POOL_HB_S * 1000);
	snprintf(val, sizeof(val), "%.3f s", t);
	row_text(what, val, tgt, !isnan(t) && t <= death_target);

	/* a member joins: a fresh node with its own cgroup */
	int joined[POOL_NODES] = { 0, 1, POOL_NODES };
	if ((ret = pool_body(body, sizeof(body), rp.port, POOL_NODES, cg[POOL_NODES], port)))
		goto out;
	uint64_t spawn = now_ns();
	if ((ret = ktest_daemon_up(&d[POOL_NODES], body)))
		goto out;
	t0 = now_ns();
	t = wait_size(d, joined, POOL_NODES, POOL_NODES, 5, t0);
	sanity(!isnan(t), "pool: the pool did not grow back to %d within 5 s", POOL_NODES);
	if (getenv("KT_BENCH_VERBOSE"))
		fprintf(stderr, "bench: pool: join converged %.3f s after ready, %.3f s after spawn\n",
			t, t + (double)(t0 - spawn) / 1e9);
	snprintf(what, sizeof(what),
		 "pool: convergence after a node joins (all show size %d; from the joiner's first answer)",
		 POOL_NODES);
	snprintf(val, sizeof(val), "%.3f s", t);
	row_text(what, val, tgt, !isnan(t) && t <= converge_target);
	ret = 0;
out:
	for (int i = 0; i <= POOL_NODES; i++)
		ktest_kill_wait(&load[i]);
	for (int i = 0; i <= POOL_NODES; i++)
		if (d[i].dir[0])
			ktest_daemon_cleanup(&d[i]);
	for (int i = 0; i <= POOL_NODES; i++)
		if (cg[i][0])
			ktest_cgroup_destroy(cg[i]);
	rp_stop(&rp);
	return ret;
}
