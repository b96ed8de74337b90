// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* End-to-end distributed pool: several build/kthrottled processes on this
 * machine, each with its own node name, pin dir and cgroup, act as the nodes
 * of one limit agreed through a real redis-server (or redis-sentinel) that
 * the test starts on a free loopback port. Paced senders (see bg_start) flood
 * UDP from inside the cgroups; what the kernel admitted is read from the
 * daemons' counters (status json) or from the senders' own counts.
 *
 * Timings are short so the file runs in well under 90 s: heartbeat 200 ms,
 * staleAfter 3, validFor 2 s, tickInterval 50 ms. Limit: max 300/s, min
 * 60/s, burst 30 unless a test says otherwise; three nodes get 100/s and a
 * burst of 10 each.
 *
 * Tolerances:
 * - Rates from counters: deltas over a window that starts after a warm-up,
 *   with every sender saturated, so no burst is in the window. GCRA admits
 *   exactly one token per interval; +-5% covers the window edges and the
 *   skew between status reads (a few ms).
 * - Sender counts from a fresh (full) bucket: rate x elapsed + burst within
 *   +-(5% + 3).
 * - Time bounds are the protocol's bound (in heartbeats) plus two ticks
 *   (heartbeats are due on ticks) plus 100-150 ms for status polling and
 *   scheduling on this 2-core machine; each assertion says which.
 * - Configured rates (status bucket_rate) are exact and compared exactly. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <cmocka.h>

#include "kt_clusterfx.h"
#include "ktest.h"
#include "store/store.h"
#include "redis_proc.h"

#define HB_MS 200
#define TICK_MS 50
#define STALE 3
#define VALID_MS 2000
#define PREFIX "kte2e"

#define MAX 300.0
#define MIN 60.0
#define BURST 30.0
#define RES (MIN / 3) /* a lapsed member's conservative fallback, held back by the others */

#define MAX_NODES 4
#define MAX_LOADS 8

/* Per-test resources, released by the teardown even when an assert fails. */
static struct fixture {
	struct ktest_daemon d[MAX_NODES];
	char cg[MAX_NODES][PATH_MAX];
	struct rp_proc rp[3];   /* [0] master, [1] replica, [2] sentinel */
	pid_t loads[MAX_LOADS]; /* senders in flight */
	char redis_block[256];  /* the redisStore flow mapping every node uses */
} fx;

static const struct kt_clusterfx_pool pool = { TICK_MS, HB_MS, STALE, VALID_MS };

static double ms_since(uint64_t t0)
{
	return (double)(ktest_now_ns() - t0) / 1e6;
}

/* Last part of a node's log and its status, for a failing assertion. */
static void dump_node(int i)
{
	char name[16];

	snprintf(name, sizeof(name), "node n%d", i);
	ktest_daemon_dump(&fx.d[i], name, 2500);
}

/* ---- config ---- */

static bool g_node_leases; /* the next test's nodes run redisStore.leases: node */

static void use_single_redis(const struct rp_proc *r)
{
	snprintf(fx.redis_block, sizeof(fx.redis_block),
		 "{mode: single, url: \"redis://127.0.0.1:%d/0\", keyPrefix: " PREFIX "%s}", r->port,
		 g_node_leases ? ", leases: node" : "");
}

static void use_sentinel(const struct rp_proc *s, const char *master)
{
	snprintf(fx.redis_block, sizeof(fx.redis_block),
		 "{mode: sentinel, sentinel: {endpoints: [\"127.0.0.1:%d\"], master_name: %s}, "
		 "keyPrefix: " PREFIX "}",
		 s->port, master);
}

/* Appends one UDP datagram limit on `cg` to buf; rl_extra goes inside the
 * rateLimit flow mapping (", rampUpDuration: 4s", ", store: {...}"). */
static void add_limit(char *buf, size_t len, const char *name, const char *cg, int port, double max,
		      double min, double burst, const char *rl_extra)
{
	kt_clusterfx_add_limit(buf, len,
			       &(struct kt_clusterfx_limit){ .name = name, .cgroups = cg, .port = port,
							     .burst = burst, .max = max, .min = min,
							     .rl_extra = rl_extra });
}

/* A per-limit store block on the nodes' Redis with its own failure policy. */
static void store_extra(char *buf, size_t len, const char *policy)
{
	snprintf(buf, len,
		 ", store: {redisStore: %s, heartbeat: %dms, staleAfter: %d, validFor: %dms, "
		 "onStoreFailure: %s}",
		 fx.redis_block, HB_MS, VALID_MS / HB_MS, VALID_MS, policy);
}

static void write_node_config(int i, const char *limits)
{
	assert_int_equal(ktest_daemon_init(&fx.d[i]), 0);
	kt_clusterfx_node_config(&fx.d[i], i, &pool, fx.redis_block, limits);
}

static void run_node(int i)
{
	kt_clusterfx_run_node(&fx.d[i], i, dump_node);
}

static void start_node(int i, const char *limits)
{
	write_node_config(i, limits);
	run_node(i);
}

static const char *new_cgroup(int i, const char *name)
{
	assert_int_equal(ktest_cgroup_create(name, fx.cg[i], sizeof(fx.cg[i])), 0);
	return fx.cg[i];
}

static int udp_port(void)
{
	int p = ktest_free_port(SOCK_DGRAM);

	assert_true(p > 0);
	return p;
}

/* ---- status json ---- */

/* One limit's status on node i, every field of struct kt_clusterfx_lst
 * but max, reserved and lease_left_s (false if the daemon did not answer or
 * one is missing). */
static bool lstatus(int i, const char *limit, struct kt_clusterfx_lst *s)
{
	const unsigned need = KT_LST_PHASE | KT_LST_STATE | KT_LST_ENDPOINT | KT_LST_SIZE |
			      KT_LST_LIVE | KT_LST_POOL_RATE | KT_LST_BUCKET_RATE | KT_LST_BURST |
			      KT_LST_FALLBACK_RATE | KT_LST_ADMITTED | KT_LST_SHARE;
	char *js;
	bool ok;

	memset(s, 0, sizeof(*s));
	s->t_ns = ktest_now_ns();
	js = ktest_daemon_cmd(&fx.d[i], "status json");
	if (!js)
		return false;
	ok = (kt_clusterfx_lst_read(js, limit, s) & need) == need;
	if (!ok)
		print_message("node n%d: cannot parse limit %s in status: %s\n", i, limit, js);
	free(js);
	return ok;
}

static void must_status(int i, const char *limit, struct kt_clusterfx_lst *s)
{
	if (!lstatus(i, limit, s)) {
		dump_node(i);
		fail();
	}
}

static bool near(double got, double want, double tol)
{
	return fabs(got - want) <= tol;
}

/* Exact configured rate (status prints %.6g). */
static void assert_rate(int i, const char *limit, const char *what, double got, double want)
{
	if (!near(got, want, 1e-6 * (want > 1 ? want : 1))) {
		print_message("node n%d limit %s: %s %.6g, expected %.6g\n", i, limit, what, got, want);
		fail();
	}
}

/* Polls nodes[] until each shows `limit` agreed at `size` with its store up
 * (a node answers status only between ticks, so "up" and the phase come from
 * the same heartbeat). Returns ms since t0, or -1 after timeout_ms (dumping
 * the nodes). */
static double wait_agreed(uint64_t t0, const int *nodes, int n, const char *limit, int size,
			  int timeout_ms)
{
	for (;;) {
		int good = 0;

		for (int k = 0; k < n; k++) {
			struct kt_clusterfx_lst s;

			if (lstatus(nodes[k], limit, &s) && kt_clusterfx_agreed(&s, size))
				good++;
		}
		if (good == n)
			return ms_since(t0);
		if (ms_since(t0) > timeout_ms) {
			print_message("limit %s: no agreement on size %d within %d ms\n", limit, size,
				      timeout_ms);
			for (int k = 0; k < n; k++)
				dump_node(nodes[k]);
			return -1;
		}
		ktest_sleep_ms(10);
	}
}

/* ---- senders in the background ---- */

/* A paced UDP sender inside cgroup `cg`: one sendto every PACE_US, sleeping
 * in between, for `secs`; it reports like kt-load (ok, refused = EBUSY,
 * errors, elapsed) through a pipe. Not kt-load: kt-load spins, and on this
 * 2-core machine (shared with other test runs) spinning senders starve each
 * other for longer than a bucket's burst lasts (100 ms at 100/s with burst
 * 10) and lose tokens, so a rate would read low for reasons that have
 * nothing to do with the pool. A sleeper is woken within far less than that
 * and still tries ~30 times per token at 150/s: its bucket stays saturated. */
#define PACE_US 200

struct bg {
	pid_t pid;
	int fd;
	const char *what;
};

static void sender(const char *cg, int port, double secs, int out)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct timespec pace = { 0, PACE_US * 1000L };
	struct ktest_load r = { 0 };
	uint64_t t0, end;
	int fd;

	/* join first: the cgroup programs see the cgroup a socket was made in */
	if (ktest_cgroup_join(cg) != 0)
		_exit(3);
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		_exit(4);
	t0 = ktest_now_ns();
	end = t0 + (uint64_t)(secs * 1e9);
	while (ktest_now_ns() < end) {
		if (sendto(fd, "x", 1, 0, (struct sockaddr *)&sa, sizeof(sa)) >= 0)
			r.ok++;
		else if (errno == EBUSY)
			r.refused++;
		else
			r.errors++;
		nanosleep(&pace, NULL);
	}
	r.elapsed = (double)(ktest_now_ns() - t0) / 1e9;
	_exit(write(out, &r, sizeof(r)) == sizeof(r) ? 0 : 5);
}

static void bg_start(struct bg *b, const char *what, const char *cg, int port, double secs)
{
	int slot;

	for (slot = 0; slot < MAX_LOADS && fx.loads[slot] > 0; slot++)
		;
	assert_true(slot < MAX_LOADS);
	b->pid = kt_clusterfx_fork(&b->fd);
	if (b->pid == 0)
		sender(cg, port, secs, b->fd);
	fx.loads[slot] = b->pid;
	b->what = what;
}

static void bg_wait(struct bg *b, struct ktest_load *r)
{
	int status = -1;
	bool ok = kt_clusterfx_reap(b->pid, b->fd, r, sizeof(*r), &status);

	for (int i = 0; i < MAX_LOADS; i++)
		if (fx.loads[i] == b->pid)
			fx.loads[i] = 0;
	if (!ok) {
		print_message("sender %s failed (status 0x%x)\n", b->what, status);
		fail();
	}
	print_message("sender %s: ok=%llu refused=%llu errors=%llu elapsed=%.3f\n", b->what, r->ok,
		      r->refused, r->errors, r->elapsed);
	assert_int_equal(r->errors, 0);
}

static void assert_admitted(const char *what, unsigned long long ok, double rate, double secs,
			    double burst)
{
	double want = rate * secs + burst, tol = 0.05 * want + 3;

	print_message("%s: admitted %llu, expected %.1f +- %.1f (%.1f/s x %.3fs + burst %.0f)\n", what,
		      ok, want, tol, rate, secs, burst);
	assert_true(near((double)ok, want, tol));
}

/* Admitted per second on node i between window_open and window_rate. */
struct window {
	double a0;
	uint64_t t0;
};

static void window_open(int i, const char *limit, struct window *w)
{
	struct kt_clusterfx_lst s;

	must_status(i, limit, &s);
	w->a0 = s.admitted;
	w->t0 = s.t_ns;
}

static double window_rate(int i, const char *limit, const struct window *w)
{
	struct kt_clusterfx_lst s;

	must_status(i, limit, &s);
	return (s.admitted - w->a0) / ((double)(s.t_ns - w->t0) / 1e9);
}

/* ---- Redis ---- */

static void start_redis(void)
{
	assert_int_equal(rp_start_master(&fx.rp[0], NULL), 0);
	use_single_redis(&fx.rp[0]);
}

static void member_id(int node, char *buf, size_t len)
{
	snprintf(buf, len, "n%d:%llu", node, (unsigned long long)ktest_cgroup_id(fx.cg[node]));
}

/* The hb sorted set of `limit` holds exactly the members of nodes[]. */
static void expect_members(const struct rp_proc *r, const char *limit, const int *nodes, int n)
{
	redisReply *rep = rp_command(r, "ZRANGE " PREFIX ":pool:{%s}:hb 0 -1", limit);
	char id[96];

	assert_non_null(rep);
	assert_int_equal(rep->type, REDIS_REPLY_ARRAY);
	for (size_t j = 0; j < rep->elements; j++)
		print_message("%s hb member: %s\n", limit, rep->element[j]->str);
	assert_int_equal(rep->elements, (size_t)n);
	for (int k = 0; k < n; k++) {
		bool found = false;

		member_id(nodes[k], id, sizeof(id));
		for (size_t j = 0; j < rep->elements; j++)
			found |= rep->element[j]->type == REDIS_REPLY_STRING &&
				 !strcmp(rep->element[j]->str, id);
		if (!found)
			print_message("member %s missing from %s:pool:{%s}:hb\n", id, PREFIX, limit);
		assert_true(found);
	}
	freeReplyObject(rep);
}

static long long evalsha_calls(const struct rp_proc *r)
{
	char buf[256];
	unsigned long long calls = 0;

	if (rp_info_field(r, "commandstats", "cmdstat_evalsha", buf, sizeof(buf)))
		return 0; /* none yet */
	assert_int_equal(sscanf(buf, "calls=%llu", &calls), 1);
	return (long long)calls;
}

/* ---- fixtures ---- */

static int setup(void **state)
{
	(void)state;
	kt_clusterfx_begin(&fx, sizeof(fx), fx.d, MAX_NODES, NULL, NULL);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < MAX_LOADS; i++)
		ktest_kill_wait(&fx.loads[i]);
	kt_clusterfx_nodes_end(fx.d, MAX_NODES, NULL, NULL);
	kt_clusterfx_cgroups_end(fx.cg, MAX_NODES);
	for (int i = 2; i >= 0; i--)
		rp_stop(&fx.rp[i]);
	return 0;
}

/* Nodes 0..n-1, each on its own cgroup, one limit "shared" on a free UDP
 * port; that port. */
static int start_pool_nodes(int n, const char *prefix)
{
	static const int all[] = { 0, 1, 2, 3 };
	int port = udp_port();

	for (int i = 0; i < n; i++) {
		char name[32], lim[1024] = "";

		snprintf(name, sizeof(name), "%s%d", prefix, i);
		add_limit(lim, sizeof(lim), "shared", new_cgroup(i, name), port, MAX, MIN, BURST, NULL);
		write_node_config(i, lim);
	}
	/* started side by side (their BPF loads overlap) */
	kt_clusterfx_run_nodes(fx.d, n, dump_node);
	/* bound: n joins, each agreed within 2 heartbeats */
	assert_true(wait_agreed(ktest_now_ns(), all, n, "shared", n, 5000) >= 0);
	/* started side by side, a node may have agreed on the answer to a
	 * heartbeat whose fallback rate (what the store reserves for it once
	 * it lapses) it computed from an earlier size: one more heartbeat and
	 * every node has reported the agreed one */
	ktest_sleep_ms(HB_MS + 2 * TICK_MS);
	return port;
}

/* ---- tests ---- */

/* Three nodes, all saturated: the aggregate is max (+-5%), each gets max/3. */
static void test_three_nodes_share_max(void **state)
{
	static const int nodes[] = { 0, 1, 2 };
	struct bg b[3];
	struct ktest_load r[3];
	struct window w[3];
	double rate[3], sum = 0;
	char ep[64];
	int port;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_redis();
	port = start_pool_nodes(3, "share");

	snprintf(ep, sizeof(ep), "127.0.0.1:%d", fx.rp[0].port);
	for (int i = 0; i < 3; i++) {
		struct kt_clusterfx_lst s;

		must_status(i, "shared", &s);
		assert_string_equal(s.state, "up");
		assert_string_equal(s.endpoint, ep);
		assert_rate(i, "shared", "bucket_rate", s.bucket_rate, MAX / 3);
		assert_rate(i, "shared", "share", s.share, MAX / 3);
		assert_rate(i, "shared", "burst", s.burst, BURST / 3);
		assert_rate(i, "shared", "pool_rate", s.pool_rate, MAX);
	}
	expect_members(&fx.rp[0], "shared", nodes, 3);

	for (int i = 0; i < 3; i++)
		bg_start(&b[i], i == 0 ? "n0" : i == 1 ? "n1" : "n2", fx.cg[i], port, 4.5);
	ktest_sleep_ms(500); /* warm-up: the bursts are spent */
	for (int i = 0; i < 3; i++)
		window_open(i, "shared", &w[i]);
	ktest_sleep_ms(3500);
	for (int i = 0; i < 3; i++) {
		rate[i] = window_rate(i, "shared", &w[i]);
		sum += rate[i];
	}
	for (int i = 0; i < 3; i++)
		bg_wait(&b[i], &r[i]);
	print_message("admitted/s: n0 %.1f n1 %.1f n2 %.1f, aggregate %.1f (max %.0f)\n", rate[0],
		      rate[1], rate[2], sum, MAX);
	for (int i = 0; i < 3; i++) {
		assert_true(r[i].refused > 0); /* saturated */
		assert_true(near(rate[i], MAX / 3, 0.05 * MAX / 3));
	}
	assert_true(near(sum, MAX, 0.05 * MAX));
}

/* kill -9 one node: the survivors prune it and agree on 2 within
 * staleAfter + 2 heartbeats and get max/2 each; the dead node's kernel
 * buckets fall to the conservative rate min / 3 once their validity lapses. */
static void kill9_survivors_take_over(void)
{
	static const int surv[] = { 0, 1 };
	struct bg b[3];
	struct ktest_load r[3];
	struct window w[2];
	double rate[2], ms;
	uint64_t t_kill;
	int port;

	KTEST_SKIP_UNLESS_ROOT();
	start_redis();
	port = start_pool_nodes(3, "kill");
	if (g_node_leases) {
		char *js = ktest_daemon_cmd(&fx.d[0], "status json");

		/* one lease a node; status says so and reads the feed */
		assert_non_null(js);
		assert_non_null(strstr(js, "\"leases\":\"node\",\"feed_age_s\":0."));
		free(js);
		assert_int_equal(rp_command_int(&fx.rp[0], -1, "ZCARD " PREFIX ":nodes"), 3);
	}

	t_kill = ktest_now_ns();
	assert_int_equal(ktest_daemon_signal_wait(&fx.d[2], SIGKILL), 128 + SIGKILL);
	ms = wait_agreed(t_kill, surv, 2, "shared", 2, 4000);
	/* (staleAfter + 3) heartbeats from the dead node's last heartbeat (which
	 * was before the kill; the shrink is believed one answer late), + 2
	 * ticks + 100 ms polling/scheduling */
	print_message("survivors agreed on 2 after %.0f ms (bound %d ms)\n", ms,
		      (STALE + 3) * HB_MS + 2 * TICK_MS + 100);
	assert_true(ms >= 0 && ms <= (STALE + 3) * HB_MS + 2 * TICK_MS + 100);
	/* the dead node's kernel may still admit its fallback (min / 3) for
	 * fallbackFor: the survivors hold that back */
	for (int i = 0; i < 2; i++) {
		struct kt_clusterfx_lst s;

		must_status(i, "shared", &s);
		assert_rate(i, "shared", "bucket_rate", s.bucket_rate, (MAX - MIN / 3) / 2);
	}
	/* the dead member lapsed: moved from hb to lapsed (held), out of the live sizes */
	assert_int_equal(rp_command_int(&fx.rp[0], -1, "ZCARD " PREFIX ":pool:{shared}:hb"), 2);
	assert_int_equal(rp_command_int(&fx.rp[0], -1, "ZCARD " PREFIX ":pool:{shared}:lapsed"), 1);
	assert_int_equal(rp_command_int(&fx.rp[0], -1, "HLEN " PREFIX ":pool:{shared}:size"), 2);
	/* leases: node: the dead node's lease was found lapsed and removed */
	if (g_node_leases)
		assert_int_equal(rp_command_int(&fx.rp[0], -1, "ZCARD " PREFIX ":nodes"), 2);

	/* the dead node's lease ran out staleAfter heartbeats after its last
	 * heartbeat, before the kill */
	while (ms_since(t_kill) < STALE * HB_MS + 2 * TICK_MS)
		ktest_sleep_ms(10);
	bg_start(&b[0], "survivor n0", fx.cg[0], port, 3.0);
	bg_start(&b[1], "survivor n1", fx.cg[1], port, 3.0);
	bg_start(&b[2], "dead n2", fx.cg[2], port, 2.5);
	ktest_sleep_ms(500);
	for (int i = 0; i < 2; i++)
		window_open(i, "shared", &w[i]);
	ktest_sleep_ms(2000);
	for (int i = 0; i < 2; i++)
		rate[i] = window_rate(i, "shared", &w[i]);
	for (int i = 0; i < 3; i++)
		bg_wait(&b[i], &r[i]);
	print_message("survivors admitted/s: n0 %.1f n1 %.1f (expected %.0f each)\n", rate[0],
		      rate[1], (MAX - MIN / 3) / 2);
	for (int i = 0; i < 2; i++)
		assert_true(near(rate[i], (MAX - MIN / 3) / 2, 0.05 * MAX / 2));
	/* with the dead node's fallback, the pool is exactly max */
	assert_true(near(rate[0] + rate[1] + MIN / 3, MAX, 0.05 * MAX));
	/* conservative: rateLimit.min x 1 / last size 3, the burst scaled
	 * with the rate (30 / 3 x 20 / 100) */
	assert_true(r[2].refused > 0);
	assert_admitted("dead node n2 (conservative)", r[2].ok, MIN / 3, r[2].elapsed,
			BURST / 3 * MIN / MAX);
}

static void test_kill9_survivors_take_over(void **state)
{
	(void)state;
	g_node_leases = false;
	kill9_survivors_take_over();
}

/* The same with redisStore.leases: node: the nodes send their limit only
 * when it changed; the dead node's lease is found lapsed by the next
 * survivor's heartbeat, which puts the limit in the change feed. Same
 * bound, same rates. */
static void test_kill9_node_leases(void **state)
{
	(void)state;
	g_node_leases = true;
	kill9_survivors_take_over();
	g_node_leases = false;
}

/* SIGTERM one node: its members stay in the pool (a rolling restart would
 * renew them); its kernel runs out the lease at the share, then the
 * conservative fallback, which the survivors hold back once it lapsed. Then
 * a new node joins while the others are saturated: the sum of the members'
 * rates exceeds max by at most one share, for at most one heartbeat. */
static void graceful_stop_and_join(void)
{
	static const int surv[] = { 0, 1 }, after[] = { 0, 1, 3 };
	enum { ROUNDS = 40 };
	struct {
		uint64_t t;
		double rate_sum, adm[3];
		uint64_t ta[3];
	} rd[ROUNDS];
	struct bg b[3];
	struct ktest_load r[3];
	char lim[1024] = "";
	double ms, joiner_burst = BURST / 3;
	uint64_t t0, t_started;
	int port, nr = 0;

	KTEST_SKIP_UNLESS_ROOT();
	start_redis();
	port = start_pool_nodes(3, "join");

	/* graceful stop */
	t0 = ktest_now_ns();
	assert_int_equal(ktest_daemon_signal_wait(&fx.d[2], SIGTERM), 0);
	bg_start(&b[2], "stopped n2", fx.cg[2], port, 0.6);
	ms = wait_agreed(t0, surv, 2, "shared", 2, 3000);
	/* staleAfter + 3 heartbeats (lapse, then the damped shrink), + 2 ticks
	 * + 150 ms (exit, polling) */
	print_message("pool shrank to 2 after %.0f ms (bound %d ms)\n", ms,
		      (STALE + 3) * HB_MS + 2 * TICK_MS + 150);
	assert_true(ms >= 0 && ms <= (STALE + 3) * HB_MS + 2 * TICK_MS + 150);
	bg_wait(&b[2], &r[2]);
	/* never above its share (100/s) while its lease runs, then min/3 */
	assert_true(r[2].refused > 0);
	print_message("stopped node n2 admitted %llu in %.2f s (share %.0f/s, burst %.0f)\n",
		      (unsigned long long)r[2].ok, r[2].elapsed, MAX / 3, BURST / 3);
	/* +5% for the sender's clock against the kernel's, as elsewhere here */
	assert_true((double)r[2].ok <= MAX / 3 * r[2].elapsed * 1.05 + BURST / 3 + 2);
	/* n2 lapsed, not deregistered: held in lapsed, out of the live count */
	for (int i = 0; i < 2; i++) {
		struct kt_clusterfx_lst s;

		must_status(i, "shared", &s);
		assert_rate(i, "shared", "bucket_rate", s.bucket_rate, (MAX - RES) / 2);
	}

	/* join: n0 and n1 saturated at 150/s each, n3 starts. The senders
	 * outlast the observation (2.2 s after the joiner started) even when
	 * starting the joiner is slow (sanitizer builds) */
	bg_start(&b[0], "n0", fx.cg[0], port, 5.0);
	bg_start(&b[1], "n1", fx.cg[1], port, 5.0);
	ktest_sleep_ms(400);
	add_limit(lim, sizeof(lim), "shared", new_cgroup(3, "join3"), port, MAX, MIN, BURST, NULL);
	write_node_config(3, lim);
	/* round 0: before the joiner exists */
	memset(rd, 0, sizeof(rd));
	for (int k = 0; k < 2; k++) {
		struct kt_clusterfx_lst s;

		must_status(after[k], "shared", &s);
		rd[0].rate_sum += s.bucket_rate;
		rd[0].adm[k] = s.admitted;
		rd[0].ta[k] = s.t_ns;
	}
	rd[0].t = rd[0].ta[0];
	rd[0].ta[2] = rd[0].t;
	nr = 1;
	run_node(3);
	t_started = ktest_now_ns();
	bg_start(&b[2], "joiner n3", fx.cg[3], port, 2.4);
	while (nr < ROUNDS && ms_since(t_started) < 2200) {
		ktest_sleep_ms(100);
		rd[nr].t = ktest_now_ns();
		for (int k = 0; k < 3; k++) {
			struct kt_clusterfx_lst s;

			must_status(after[k], "shared", &s);
			rd[nr].rate_sum += s.bucket_rate;
			rd[nr].adm[k] = s.admitted;
			rd[nr].ta[k] = s.t_ns;
		}
		nr++;
	}
	for (int i = 0; i < 3; i++)
		bg_wait(&b[i], &r[i]);

	/* The joiner registered before run_node returned (its first heartbeat is
	 * in its start-up, before its socket answers; until that round trip its
	 * bucket holds min/1, but nothing sends in its cgroup yet). n0 and n1
	 * see size 3 at their next heartbeat, <= one heartbeat + tick later.
	 * Until then the sum is 150 + 150 + min/3 (the joiner at min/size):
	 * above max by min/3, less than one share (100). Bound checked: every
	 * sample <= max + one share; samples later than a heartbeat + 2 ticks
	 * + 50 ms (status latency) after the start <= max. */
	double late_from = HB_MS + 2 * TICK_MS + 50, late_adm = 0, late_t = 0;
	int first_late = -1;

	for (int j = 0; j < nr; j++) {
		double at = j ? (double)(rd[j].t - t_started) / 1e6 : -1;

		print_message("join round %2d at %6.0f ms: sum of bucket rates %.1f, admitted "
			      "%.0f %.0f %.0f\n", j, at, rd[j].rate_sum, rd[j].adm[0], rd[j].adm[1],
			      rd[j].adm[2]);
		assert_true(rd[j].rate_sum <= MAX + MAX / 3 + 1e-6);
		if (at > late_from)
			assert_true(rd[j].rate_sum <= MAX + 1e-6);
		if (j == 0)
			continue;
		/* counters per ~100 ms: at most (max + one share) x dt, + the
		 * joiner's initial burst in the interval it starts, + 3 tokens
		 * for the skew between the three status reads */
		double dt = 0, d = 0, bound;

		for (int k = 0; k < 3; k++) {
			double dtk = (double)(rd[j].ta[k] - rd[j - 1].ta[k]) / 1e9;

			if (dtk > dt)
				dt = dtk;
			d += rd[j].adm[k] - rd[j - 1].adm[k];
		}
		bound = (MAX + MAX / 3) * dt + (rd[j - 1].adm[2] == 0 ? joiner_burst : 0) + 3;
		if (d > bound)
			print_message("round %d: admitted %.0f in %.3f s > bound %.1f\n", j, d, dt,
				      bound);
		assert_true(d <= bound);
		if (at > 3 * HB_MS + 2 * TICK_MS) {
			if (first_late < 0)
				first_late = j - 1;
			late_adm += d;
		}
	}
	assert_true(first_late >= 1 && nr - 1 - first_late >= 5);
	late_t = (double)(rd[nr - 1].t - rd[first_late].t) / 1e9;
	/* once agreed, the three saturated members admit max between them,
	 * less the stopped node's fallback, still held back */
	print_message("after the join settled: %.0f admitted in %.3f s = %.1f/s (max %.0f - %.0f held)\n",
		      late_adm, late_t, late_adm / late_t, MAX, RES);
	assert_true(near(late_adm, (MAX - RES) * late_t, 0.05 * MAX * late_t + 3));
	/* and over the whole join: max x T + the joiner's burst + min/3 for one
	 * heartbeat and two ticks, +2% + 3 */
	{
		double t = (double)(rd[nr - 1].t - rd[0].t) / 1e9, tot = 0;

		for (int k = 0; k < 3; k++)
			tot += rd[nr - 1].adm[k] - rd[0].adm[k];
		print_message("whole join: %.0f admitted in %.3f s (max x T = %.0f)\n", tot, t,
			      MAX * t);
		assert_true(tot <= MAX * t * 1.02 + joiner_burst + MIN / 3 * (HB_MS + 2 * TICK_MS) / 1e3 + 3);
		assert_true(tot >= MAX * t * 0.9);
	}
	assert_true(wait_agreed(ktest_now_ns(), after, 3, "shared", 3, 1000) >= 0);
	for (int k = 0; k < 3; k++) {
		struct kt_clusterfx_lst s;

		must_status(after[k], "shared", &s);
		assert_rate(after[k], "shared", "bucket_rate", s.bucket_rate, (MAX - RES) / 3);
	}
}

static void test_graceful_stop_and_join(void **state)
{
	(void)state;
	g_node_leases = false;
	graceful_stop_and_join();
}

/* The same with redisStore.leases: node: the quiet nodes hear the join
 * through the change feed at their next heartbeat, so the bound holds. */
static void test_graceful_join_node_leases(void **state)
{
	(void)state;
	g_node_leases = true;
	graceful_stop_and_join();
	g_node_leases = false;
}

/* Node 0 holds each of the three limits `names` at `share` with its store
 * down and its phase still agreed. */
static void expect_store_down(const char *const names[3], double share)
{
	for (int k = 0; k < 3; k++) {
		struct kt_clusterfx_lst s;

		must_status(0, names[k], &s);
		assert_string_equal(s.state, "down");
		assert_string_equal(s.phase, "agreed");
		assert_rate(0, names[k], "bucket_rate", s.bucket_rate, share);
	}
}

/* Redis stops answering (SIGSTOP): the last share holds until validFor,
 * then each limit's onStoreFailure applies (conservative, open, closed).
 * SIGCONT: agreement returns. Redis killed: the share holds; restarted
 * (empty): agreement returns and the members re-register. */
static void test_store_failure_policies(void **state)
{
	static const char *const names[3] = { "cons", "open", "closed" };
	static const char *const policies[3] = { "conservative", "open", "closed" };
	static const int nodes[] = { 0, 1 };
	const double max = 200, min = 40, burst = 20, share = max / 2;
	const double lost_rate[3] = { min / 2, share, 0 };
	struct bg b[3];
	struct ktest_load r[3];
	int ports[3];
	uint64_t t0;
	double ms, t_lost[2] = { -1, -1 };

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_redis();
	for (int k = 0; k < 3; k++) {
		bool dup;

		do { /* three distinct ports, one per limit */
			ports[k] = udp_port();
			dup = false;
			for (int j = 0; j < k; j++)
				dup |= ports[j] == ports[k];
		} while (dup);
	}
	for (int i = 0; i < 2; i++) {
		char lim[4096] = "", extra[512], name[16];

		snprintf(name, sizeof(name), "fail%d", i);
		new_cgroup(i, name);
		for (int k = 0; k < 3; k++) {
			store_extra(extra, sizeof(extra), policies[k]);
			add_limit(lim, sizeof(lim), names[k], fx.cg[i], ports[k], max, min, burst, extra);
		}
		start_node(i, lim);
	}
	for (int k = 0; k < 3; k++)
		assert_true(wait_agreed(ktest_now_ns(), nodes, 2, names[k], 2, 5000) >= 0);

	/* Redis frozen: connections hang, every call times out */
	t0 = ktest_now_ns();
	assert_int_equal(rp_signal(&fx.rp[0], SIGSTOP), 0);
	ktest_sleep_ms(150);
	for (int k = 0; k < 3; k++)
		bg_start(&b[k], names[k], fx.cg[0], ports[k], 1.0);
	for (int k = 0; k < 3; k++)
		bg_wait(&b[k], &r[k]);
	/* the last share, for every policy; the kernel validity must not lapse
	 * while the daemon waits on the store */
	for (int k = 0; k < 3; k++)
		assert_admitted(names[k], r[k].ok, share, r[k].elapsed, burst / 2);
	print_message("store frozen for %.0f ms\n", ms_since(t0));
	assert_true(ms_since(t0) < VALID_MS - HB_MS - TICK_MS); /* else the test was too slow */
	expect_store_down(names, share);

	/* validFor after the last answer (<= one heartbeat + tick before the
	 * stop): store-lost, not earlier; later by at most a tick and a store
	 * call's budget (1 s) */
	while ((t_lost[0] < 0 || t_lost[1] < 0) && ms_since(t0) < VALID_MS + 2500) {
		for (int i = 0; i < 2; i++) {
			struct kt_clusterfx_lst s;
			int lost = 0;

			for (int k = 0; k < 3 && t_lost[i] < 0; k++)
				if (lstatus(i, names[k], &s) && !strcmp(s.phase, "store-lost"))
					lost++;
			if (lost == 3)
				t_lost[i] = ms_since(t0);
		}
		ktest_sleep_ms(10);
	}
	for (int i = 0; i < 2; i++) {
		print_message("n%d: store-lost after %.0f ms (validFor %d ms)\n", i, t_lost[i],
			      VALID_MS);
		if (t_lost[i] < 0)
			dump_node(i);
		assert_true(t_lost[i] >= VALID_MS - HB_MS - TICK_MS - 50);
		assert_true(t_lost[i] <= VALID_MS + 1000 + TICK_MS + 150);
	}
	for (int i = 0; i < 2; i++)
		for (int k = 0; k < 3; k++) {
			struct kt_clusterfx_lst s;

			must_status(i, names[k], &s);
			assert_string_equal(s.phase, "store-lost");
			assert_rate(i, names[k], "bucket_rate", s.bucket_rate, lost_rate[k]);
			assert_rate(i, names[k], "fallback_rate", s.fallback_rate, lost_rate[k]);
		}
	for (int k = 0; k < 3; k++)
		bg_start(&b[k], names[k], fx.cg[0], ports[k], 1.5);
	for (int k = 0; k < 3; k++)
		bg_wait(&b[k], &r[k]);
	/* conservative: min / last size; open: the last share; closed: nothing */
	/* the fallback's burst scales with its rate: 10 x 20 / 100 */
	assert_admitted("cons (store lost)", r[0].ok, min / 2, r[0].elapsed, burst / 2 * min / max);
	assert_admitted("open (store lost)", r[1].ok, share, r[1].elapsed, burst / 2);
	assert_int_equal(r[2].ok, 0);
	assert_true(r[2].refused > 0);

	/* Redis answers again: agreement returns within the capped back-off
	 * (5 s) + the re-sync floor's few heartbeats */
	t0 = ktest_now_ns();
	assert_int_equal(rp_signal(&fx.rp[0], SIGCONT), 0);
	for (int k = 0; k < 3; k++) {
		ms = wait_agreed(t0, nodes, 2, names[k], 2, 9000);
		print_message("%s: agreed again %.0f ms after SIGCONT\n", names[k], ms);
		assert_true(ms >= 0);
	}
	for (int i = 0; i < 2; i++)
		for (int k = 0; k < 3; k++) {
			struct kt_clusterfx_lst s;

			must_status(i, names[k], &s);
			assert_string_equal(s.state, "up");
			assert_rate(i, names[k], "bucket_rate", s.bucket_rate, share);
		}

	/* the first answer after SIGCONT may be to a heartbeat sent during the
	 * freeze, its lease counted from then: wait for a fresh one, so the
	 * share below runs on a whole lease */
	for (int tries = 0; tries < 100; tries++) {
		bool fresh = true;

		for (int i = 0; i < 2; i++)
			for (int k = 0; k < 3; k++) {
				struct kt_clusterfx_lst s;

				must_status(i, names[k], &s);
				fresh &= s.lease_left_s * 1000 >= VALID_MS - 3 * HB_MS;
			}
		if (fresh)
			break;
		ktest_sleep_ms(20);
	}
	/* Redis killed: refused connections, the share holds within validFor */
	assert_int_equal(rp_signal(&fx.rp[0], SIGKILL), 0);
	ktest_sleep_ms(800);
	expect_store_down(names, share);
	/* restarted empty on the same port: the members register again */
	t0 = ktest_now_ns();
	assert_int_equal(rp_restart(&fx.rp[0]), 0);
	for (int k = 0; k < 3; k++) {
		ms = wait_agreed(t0, nodes, 2, names[k], 2, 9000);
		print_message("%s: agreed again %.0f ms after the restart\n", names[k], ms);
		assert_true(ms >= 0);
		expect_members(&fx.rp[0], names[k], nodes, 2);
	}
}

/* Sentinel: the daemons find the master through the sentinel, and after a
 * failover they follow the promoted replica and agree again. */
static void test_sentinel_failover(void **state)
{
	static const int nodes[] = { 0, 1 };
	char want[64];
	redisReply *rep;
	uint64_t t0;
	double ms = -1;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	/* Redis 7 waits repl-diskless-sync-delay (5 s) before a full sync, as
	 * long as rp_start_replica waits for the link: sync at once */
	const struct rp_opts now = { .extra_conf = "repl-diskless-sync-delay 0" };

	assert_int_equal(rp_start_master(&fx.rp[0], &now), 0);
	assert_int_equal(rp_start_replica(&fx.rp[1], &fx.rp[0], &now), 0);
	assert_int_equal(rp_start_sentinel(&fx.rp[2], &fx.rp[0], "ktm", 1, 2000, NULL), 0);
	use_sentinel(&fx.rp[2], "ktm");
	start_pool_nodes(2, "sent");

	snprintf(want, sizeof(want), "127.0.0.1:%d", fx.rp[0].port);
	for (int i = 0; i < 2; i++) {
		struct kt_clusterfx_lst s;

		must_status(i, "shared", &s);
		assert_string_equal(s.endpoint, want);
		assert_string_equal(s.state, "up");
	}
	expect_members(&fx.rp[0], "shared", nodes, 2);

	assert_int_equal(rp_sentinel_wait_replicas(&fx.rp[2], "ktm", 1, 10000), 0);
	rep = rp_command(&fx.rp[2], "SENTINEL FAILOVER ktm");
	assert_non_null(rep);
	if (rep->type != REDIS_REPLY_STATUS)
		print_message("SENTINEL FAILOVER: %s\n", rep->str ? rep->str : "?");
	assert_int_equal(rep->type, REDIS_REPLY_STATUS);
	freeReplyObject(rep);
	t0 = ktest_now_ns();
	while (rp_sentinel_master_port(&fx.rp[2], "ktm") != fx.rp[1].port && ms_since(t0) < 15000)
		ktest_sleep_ms(50);
	assert_int_equal(rp_sentinel_master_port(&fx.rp[2], "ktm"), fx.rp[1].port);
	print_message("sentinel promoted port %d after %.0f ms\n", fx.rp[1].port, ms_since(t0));

	/* both nodes on the new master, agreed on 2 */
	snprintf(want, sizeof(want), "127.0.0.1:%d", fx.rp[1].port);
	while (ms_since(t0) < 20000) {
		int good = 0;

		for (int i = 0; i < 2; i++) {
			struct kt_clusterfx_lst s;

			if (lstatus(i, "shared", &s) && !strcmp(s.endpoint, want) &&
			    !strcmp(s.phase, "agreed") && s.size == 2 && !strcmp(s.state, "up"))
				good++;
		}
		if (good == 2) {
			ms = ms_since(t0);
			break;
		}
		ktest_sleep_ms(20);
	}
	print_message("daemons on the new master %s and agreed %.0f ms after the failover began\n",
		      want, ms);
	if (ms < 0) {
		dump_node(0);
		dump_node(1);
	}
	assert_true(ms >= 0);
	/* they heartbeat on the new master: the members are there, fresh */
	ktest_sleep_ms(2 * HB_MS);
	expect_members(&fx.rp[1], "shared", nodes, 2);
	assert_true(wait_agreed(ktest_now_ns(), nodes, 2, "shared", 2, 1000) >= 0);
	for (int i = 0; i < 2; i++) {
		struct kt_clusterfx_lst s;

		must_status(i, "shared", &s);
		assert_rate(i, "shared", "bucket_rate", s.bucket_rate, MAX / 2);
	}
}

/* resumedRampUp: the ramp level is saved in Redis (every heartbeat, so a
 * crash counts); a restart within ttl resumes it, one after ttl starts at
 * min. min 50, max 250, 4 s ramp (50/s per s while there is traffic). */
static void test_resumed_ramp_up(void **state)
{
	const double min = 50, max = 250;
	const int ttl_ms = 3000;
	const char *key = PREFIX ":pool:{ramp}:ramp";
	char lim[1024] = "";
	struct bg b;
	struct ktest_load r;
	struct kt_clusterfx_lst s;
	redisReply *rep;
	double level, saved;
	long long pttl;
	int port;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_redis();
	port = udp_port();
	add_limit(lim, sizeof(lim), "ramp", new_cgroup(0, "ramp"), port, max, min, 25,
		  ", rampUpDuration: 4s, modes: {relaxed: {}}, resumedRampUp: true, ttl: 3s");
	start_node(0, lim);
	must_status(0, "ramp", &s);
	assert_rate(0, "ramp", "pool_rate", s.pool_rate, min);

	/* 3.4 s of traffic: ~50 + 50 x 3.4 = 220; relaxed holds it once idle */
	bg_start(&b, "ramp", fx.cg[0], port, 3.4);
	bg_wait(&b, &r);
	ktest_sleep_ms(2 * HB_MS + TICK_MS); /* a heartbeat has saved the idle level */
	must_status(0, "ramp", &s);
	level = s.pool_rate;
	print_message("ramp level reached: %.2f/s\n", level);
	assert_true(level >= 150 && level < max);

	/* crash: the level saved by the last heartbeat survives */
	assert_int_equal(ktest_daemon_signal_wait(&fx.d[0], SIGKILL), 128 + SIGKILL);
	rep = rp_command(&fx.rp[0], "GET %s", key);
	assert_non_null(rep);
	assert_int_equal(rep->type, REDIS_REPLY_STRING);
	saved = strtod(rep->str, NULL);
	freeReplyObject(rep);
	pttl = rp_command_int(&fx.rp[0], -3, "PTTL %s", key);
	print_message("saved %s = %.3f, pttl %lld ms\n", key, saved, pttl);
	assert_true(near(saved, level, 0.005 * level));
	assert_true(pttl > 0 && pttl <= ttl_ms);

	/* restart within ttl: resumes at the saved level, not at min */
	run_node(0);
	must_status(0, "ramp", &s);
	print_message("restart within ttl: pool_rate %.2f/s\n", s.pool_rate);
	assert_true(near(s.pool_rate, level, 0.01 * level));

	/* graceful stop saves again; after ttl the key is gone and a restart
	 * starts at min */
	assert_int_equal(ktest_daemon_signal_wait(&fx.d[0], SIGTERM), 0);
	pttl = rp_command_int(&fx.rp[0], -3, "PTTL %s", key);
	assert_true(pttl > ttl_ms - 500 && pttl <= ttl_ms);
	ktest_sleep_ms(ttl_ms + 300);
	assert_int_equal(rp_command_int(&fx.rp[0], -1, "EXISTS %s", key), 0);
	run_node(0);
	must_status(0, "ramp", &s);
	print_message("restart after ttl: pool_rate %.2f/s\n", s.pool_rate);
	assert_rate(0, "ramp", "pool_rate", s.pool_rate, min);
}

/* The Redis keys as documented: hb sorted set of live member ids scored with
 * Redis TIME in ms, size hash of reported sizes, both expiring; one EVALSHA
 * per node per heartbeat whatever the traffic; a graceful stop removes the
 * node's entries at once and nothing is left when all are gone. */
static void test_redis_keys(void **state)
{
	static const int nodes[] = { 0, 1 };
	const char *hb = PREFIX ":pool:{shared}:hb", *sz = PREFIX ":pool:{shared}:size";
	redisReply *rep, *tm;
	long long now_ms, pttl, c0, c1, c2, c3;
	struct bg b;
	struct ktest_load r;
	char id[96];
	int port;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_redis();
	port = start_pool_nodes(2, "keys");
	expect_members(&fx.rp[0], "shared", nodes, 2);

	/* scores: Redis TIME in ms, fresh within a heartbeat + tick + slack */
	tm = rp_command(&fx.rp[0], "TIME");
	assert_non_null(tm);
	assert_int_equal(tm->type, REDIS_REPLY_ARRAY);
	now_ms = atoll(tm->element[0]->str) * 1000 + atoll(tm->element[1]->str) / 1000;
	freeReplyObject(tm);
	for (int i = 0; i < 2; i++) {
		member_id(i, id, sizeof(id));
		rep = rp_command(&fx.rp[0], "ZSCORE %s %s", hb, id);
		assert_non_null(rep);
		assert_int_equal(rep->type, REDIS_REPLY_STRING);
		print_message("ZSCORE %s %s = %s (TIME %lld ms)\n", hb, id, rep->str, now_ms);
		assert_true(llabs(now_ms - atoll(rep->str)) <= HB_MS + TICK_MS + 200);
		freeReplyObject(rep);
		rep = rp_command(&fx.rp[0], "HGET %s %s", sz, id);
		assert_non_null(rep);
		assert_int_equal(rep->type, REDIS_REPLY_STRING);
		assert_string_equal(rep->str, "2");
		freeReplyObject(rep);
	}
	assert_int_equal(rp_command_int(&fx.rp[0], -1, "HLEN %s", sz), 2);
	/* expiry: KT_STORE_EXPIRE_FACTOR (3) stale windows, refreshed each heartbeat */
	for (int k = 0; k < 2; k++) {
		pttl = rp_command_int(&fx.rp[0], -3, "PTTL %s", k ? sz : hb);
		print_message("PTTL %s = %lld\n", k ? sz : hb, pttl);
		/* 3 x (stale window + fallbackFor, default 60 s) */
		assert_true(pttl > 0 && pttl <= 3 * (STALE * HB_MS + 60000));
	}
	/* no ramp key without resumedRampUp */
	assert_int_equal(rp_command_int(&fx.rp[0], -1, "EXISTS " PREFIX ":pool:{shared}:ramp"), 0);

	/* one EVALSHA per node per heartbeat, idle and saturated alike: 2 nodes
	 * x 2 s / 200 ms = 20, +-1 heartbeat per node at the window edges and
	 * tick jitter (15..24) */
	c0 = evalsha_calls(&fx.rp[0]);
	ktest_sleep_ms(2000);
	c1 = evalsha_calls(&fx.rp[0]);
	bg_start(&b, "n0 during the count", fx.cg[0], port, 2.3);
	ktest_sleep_ms(100);
	c2 = evalsha_calls(&fx.rp[0]);
	ktest_sleep_ms(2000);
	c3 = evalsha_calls(&fx.rp[0]);
	bg_wait(&b, &r);
	print_message("EVALSHA per 2 s: idle %lld, saturated %lld (the sender made %llu calls)\n",
		      c1 - c0, c3 - c2, r.ok + r.refused);
	assert_true(r.refused > 0);
	assert_true(c1 - c0 >= 15 && c1 - c0 <= 24);
	assert_true(c3 - c2 >= 15 && c3 - c2 <= 24);

	/* stop: n1's member stays (a rolling restart would renew it), lapses
	 * after the stale window (out of hb and size, held in lapsed) */
	assert_int_equal(ktest_daemon_signal_wait(&fx.d[1], SIGTERM), 0);
	member_id(1, id, sizeof(id));
	ktest_sleep_ms((STALE + 2) * HB_MS);
	assert_int_equal(rp_command_int(&fx.rp[0], -1, "HEXISTS %s %s", sz, id), 0);
	assert_true(rp_command_int(&fx.rp[0], -1, "ZRANK %s %s", hb, id) < 0);
	assert_true(rp_command_int(&fx.rp[0], -1, "ZRANK " PREFIX ":pool:{shared}:lapsed %s", id) >= 0);
	/* the last one out: nothing with the prefix outlives its expiry */
	assert_int_equal(ktest_daemon_signal_wait(&fx.d[0], SIGTERM), 0);
	rep = rp_command(&fx.rp[0], "KEYS " PREFIX ":*");
	assert_non_null(rep);
	assert_int_equal(rep->type, REDIS_REPLY_ARRAY);
	for (size_t j = 0; j < rep->elements; j++) {
		pttl = rp_command_int(&fx.rp[0], -3, "PTTL %s", rep->element[j]->str);
		print_message("left until expiry: %s (PTTL %lld)\n", rep->element[j]->str, pttl);
		assert_true(pttl > 0 && pttl <= 3 * (STALE * HB_MS + 60000));
	}
	freeReplyObject(rep);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_three_nodes_share_max, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kill9_survivors_take_over, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kill9_node_leases, setup, teardown),
		cmocka_unit_test_setup_teardown(test_graceful_stop_and_join, setup, teardown),
		cmocka_unit_test_setup_teardown(test_graceful_join_node_leases, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_failure_policies, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sentinel_failover, setup, teardown),
		cmocka_unit_test_setup_teardown(test_resumed_ramp_up, setup, teardown),
		cmocka_unit_test_setup_teardown(test_redis_keys, setup, teardown),
	};

	/* KT_TEST_FILTER=test_sentinel* runs a subset */
	if (getenv("KT_TEST_FILTER"))
		cmocka_set_test_filter(getenv("KT_TEST_FILTER"));
	return cmocka_run_group_tests_name("e2e_pool", tests, NULL, NULL);
}
