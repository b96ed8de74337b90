// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Fault matrix for the pool's promise: over every one-second window, the
 * total a limit admits across all nodes is at most max + the pool's burst (a
 * join may add one member's share for one heartbeat).
 *
 * Cases (each a cmocka test, 3 nodes agreed through one redis-server unless
 * said otherwise):
 *   a. test_steady_state       no fault, 3 s (sanity)
 *   b. test_kill9              kill -9 of n2 while its pod keeps sending, 6 s
 *   c. test_sigterm_restart    SIGTERM n2, restart it 1 s later, 6 s
 *   d. test_frozen_store_link  n2's relay to Redis frozen for 8 s; n0 and n1
 *                              still reach Redis
 *   e. test_join               n3 joins the agreed 3-node pool (allowance:
 *                              one share, max/4, for one heartbeat)
 *   f. test_wrong_password     Redis with requirepass; n2 is given a wrong
 *                              password, n0 and n1 the right one, 3 s
 *   g. test_sigterm_restart_late  SIGTERM n2, restart it 5 s later (past its
 *                              600 ms lease: its buckets run at the fallback,
 *                              n0 and n1 hold that back; then it rejoins), 9 s
 *   h. test_restart_in_redis_outage  Redis killed; n2 restarted 1 s into the
 *                              outage; Redis back (empty) 4 s after that, 9 s
 *   i. test_sentinel_failover  master + replica + sentinel, no relays; the
 *                              master is killed, the sentinel promotes the
 *                              replica, every node must follow and agree
 *   j. test_rejected_reload    n1 is given an unknown key, then a cgroup that
 *                              is no cgroup (kthrottlectl reload, SIGHUP):
 *                              both rejected, status and kernel bucket as
 *                              before, n1 still admits its share, 4 s
 *   k. test_reload_lowers_max  max 300 -> 150 (min too) reloaded on every
 *                              node: every window <= 330, and from the last
 *                              reply + 2 heartbeats on <= 150 + burst, 5 s
 *   l. test_redis_sigstop      redis-server stopped (SIGSTOP) for 5 s under
 *                              load: status answers in < 10 ms and no
 *                              tick is late by a tick (store I/O is off
 *                              the loop), every window holds, agreement after
 *                              SIGCONT, 9 s
 *   m. test_share_demand       share: demand with demands 1000/20/0: >= 95%
 *                              of max, the 20/s member never throttled,
 *                              the busy one at its share within two
 *                              heartbeats (+ ticks), then two saturated
 *                              members equal within 2%
 *
 *   n. test_restart_lease_{size,fallback,deadline}  n2 killed (-9), its
 *                              pinned kt_leases entry rewritten (size 1 with
 *                              a deadline an hour away, a fallback of the
 *                              whole pool rate, the deadline alone),
 *                              restarted with its store unreachable, 5 s
 *
 * How it is measured: every node's cgroup has a paced sender (~1000
 * datagrams/s, far above its share) to one UDP port; what the limit admitted
 * is what arrives there (tests/lib/arrivals: 100 ms bins, kernel receive
 * timestamps, worst one-second window sliding by 100 ms). The receiver must
 * not drop (checked) and must have seen exactly what the senders were told
 * was sent (checked), else the measurement would undercount. Every window
 * from the first datagram to the end of the observation is asserted, so the
 * initial bursts count against the burst allowance.
 *
 * Each daemon reaches Redis through its own relay (tests/lib/relay), so one
 * node's store link can be frozen while the others keep theirs.
 *
 * Config (the patterns of test_pool.c): store redis single, heartbeat 200 ms,
 * staleAfter 3, validFor 2 s, onStoreFailure conservative, tickInterval
 * 50 ms; limit "shared": unit datagram, scope pod, max 300, min 300 (no
 * ramp: the limit is flat), burst 30.
 *
 * Some cases fail on today's code (the daemon is being changed so that they
 * hold); the assertions say what the promise is, not what the code does.
 * About 110 s in all. KT_TEST_FILTER=test_join runs one case.
 *
 * KT_FAULT_TABLE=<file>: each case appends one line per asserted range,
 * "case<TAB>worst window<TAB>max + burst<TAB>max" (the join's own allowance
 * is not in the bound column); scripts/fault-table.sh turns it into the
 * table `make bench` prints. A line is written before the bound is
 * asserted, so a broken promise shows in the table too. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
#include <bpf/bpf.h>
#include <cmocka.h>

#include "kthrottle.h"

#include "arrivals.h"
#include "kt_clusterfx.h"
#include "kt_daemonfx.h"
#include "ktest.h"
#include "redis_proc.h"
#include "relay.h"

#define HB_MS 200
#define TICK_MS 50
#define STALE 3
#define VALID_MS 2000
#define PREFIX "ktflt"
#define LIMIT "shared"

#define MAX 300.0
#define BURST 30.0
#define PROMISE (MAX + BURST)

#define SEND_PER_S 1000
#define NODES 4
#define PASSWORD "kt-right-pw"

static struct fixture {
	struct ktest_daemon d[NODES];
	char cg[NODES][PATH_MAX];
	char store[NODES][256];  /* node i's redisStore flow mapping */
	struct relay relay[NODES];
	struct rp_proc rp;       /* the master */
	struct rp_proc replica, sentinel; /* test_sentinel_failover only */
	struct arrivals arr;
	pid_t sender[NODES];
	int sender_fd[NODES];
	const char *redis_pw;   /* what redis-server requires; NULL: nothing */
	const char *limit_extra; /* appended to every node's limit; NULL: nothing */
	int rate[NODES];        /* node i's sender, datagrams/s; 0: SEND_PER_S */
	unsigned long long sent[NODES], refused[NODES]; /* what senders_wait read */
} fx;

static const struct kt_clusterfx_pool pool = { TICK_MS, HB_MS, STALE, VALID_MS };

/* ---- nodes ---- */

/* Node i's kernel bucket for the limit (its one member's slot, from its
 * status), read from the pinned map. */
static bool kernel_bucket(int i, struct kt_bucket *b)
{
	char *js = ktest_daemon_cmd(&fx.d[i], "status json"), path[400];
	const char *p;
	unsigned slot = 0;
	bool ok;
	int fd;

	if (!js)
		return false;
	p = strstr(js, "\"slot\":");
	ok = p && sscanf(p + 7, "%u", &slot) == 1;
	free(js);
	if (!ok)
		return false;
	snprintf(path, sizeof(path), "%s/kt_buckets", fx.d[i].pin_dir);
	fd = bpf_obj_get(path);
	if (fd < 0)
		return false;
	ok = bpf_map_lookup_elem(fd, &slot, b) == 0;
	close(fd);
	return ok;
}

static void dump_node(int i)
{
	struct kt_bucket b;
	char name[16];

	if (!fx.d[i].dir[0])
		return;
	snprintf(name, sizeof(name), "n%d", i);
	ktest_daemon_dump(&fx.d[i], name, 3000);
	if (fx.d[i].pid > 0 && kernel_bucket(i, &b)) {
		int64_t now = (int64_t)kt_clock_ns();

		print_message("--- n%d kernel bucket: rate %.6g/s burst %llu, lease %+.3fs, fallback "
			      "%.6g/s burst %llu until %+.3fs, tat %+.3fs\n", i,
			      b.interval_fp ? 65536e9 / (double)b.interval_fp : 0.0,
			      (unsigned long long)b.burst,
			      b.valid_until ? ((int64_t)b.valid_until - now) / 1e9 : 0.0,
			      b.fallback_fp ? 65536e9 / (double)b.fallback_fp : 0.0,
			      (unsigned long long)b.fallback_burst,
			      b.fallback_until ? ((int64_t)b.fallback_until - now) / 1e9 : 0.0,
			      ((int64_t)b.tat - now) / 1e9);
	}
}

/* Node i's view of the limit; false unless it runs and shows the phase,
 * store state, size, live and bucket rate (the other fields, not in every
 * state of every version, are best effort). */
static bool lstatus(int i, struct kt_clusterfx_lst *s)
{
	const unsigned need = KT_LST_PHASE | KT_LST_STATE | KT_LST_SIZE | KT_LST_LIVE |
			      KT_LST_BUCKET_RATE;

	memset(s, 0, sizeof(*s));
	if (fx.d[i].pid <= 0)
		return false;
	return (kt_clusterfx_lst_get(&fx.d[i], LIMIT, s) & need) == need;
}

/* One line per node: what each believes at the end of a case. */
static void print_nodes(const char *when)
{
	for (int i = 0; i < NODES; i++) {
		struct kt_clusterfx_lst s;

		if (!fx.d[i].dir[0])
			continue;
		if (lstatus(i, &s))
			print_message("%s: n%d phase %s store %s %s size %.0f live %.0f bucket_rate "
				      "%.6g reserved %.6g fallback_rate %.6g lease_left %.2fs\n",
				      when, i, s.phase, s.state, s.endpoint, s.size, s.live,
				      s.bucket_rate, s.reserved, s.fallback_rate, s.lease_left_s);
		else
			print_message("%s: n%d not running or no status\n", when, i);
	}
}

/* Node i's config: store fx.store[i], max (and min) `max`, on `cgroup`
 * (NULL: fx.cg[i]); `limit_extra` is appended to the limit verbatim (NULL:
 * nothing). Written, not reloaded. */
static void write_node_config(int i, double max, const char *cgroup, const char *limit_extra)
{
	const struct kt_clusterfx_limit l = { .name = LIMIT, .cgroups = cgroup ? cgroup : fx.cg[i],
					      .port = fx.arr.port, .scope = "pod", .burst = BURST,
					      .max = max, .min = max };
	char lim[PATH_MAX + 1024] = "";

	kt_clusterfx_add_limit(lim, sizeof(lim), &l);
	snprintf(lim + strlen(lim), sizeof(lim) - strlen(lim), "%s",
		 limit_extra ? limit_extra : fx.limit_extra ? fx.limit_extra : "");
	kt_clusterfx_node_config(&fx.d[i], i, &pool, fx.store[i], lim);
}

/* Node i on store `store` (a redisStore flow mapping): its cgroup and
 * config. Not started. */
static void prepare_node_store(int i, const char *store)
{
	char name[16];

	snprintf(name, sizeof(name), "flt%d", i);
	assert_int_equal(ktest_cgroup_create(name, fx.cg[i], sizeof(fx.cg[i])), 0);
	snprintf(fx.store[i], sizeof(fx.store[i]), "%s", store);
	assert_int_equal(ktest_daemon_init(&fx.d[i]), 0);
	write_node_config(i, MAX, NULL, NULL);
}

/* Node i: its cgroup, its relay to Redis, its config; `pw` goes into its
 * Redis URL (NULL: none). Not started. */
static void prepare_node(int i, const char *pw)
{
	char store[256];

	assert_int_equal(relay_start(&fx.relay[i], fx.rp.port), 0);
	snprintf(store, sizeof(store),
		 "{mode: single, url: \"redis://%s%s%s127.0.0.1:%d/0\", keyPrefix: " PREFIX "}",
		 pw ? ":" : "", pw ? pw : "", pw ? "@" : "", fx.relay[i].port);
	prepare_node_store(i, store);
}

static void run_node(int i)
{
	kt_clusterfx_run_node(&fx.d[i], i, dump_node);
}

/* Polls until nodes[] all show the limit agreed at `size`, store up, and
 * (if `endpoint` is not NULL) on that endpoint. Milliseconds it took, or -1
 * after timeout_ms. With `trace`, prints every change of a node's view
 * (phase, store state, size, live, bucket rate) on the arrivals clock. */
static double await_agreed(const int *nodes, int n, int size, const char *endpoint,
			   int timeout_ms, const char *trace)
{
	uint64_t t0 = ktest_now_ns();
	struct kt_clusterfx_lst last[NODES];

	memset(last, 0, sizeof(last));
	for (;;) {
		int good = 0;

		for (int k = 0; k < n; k++) {
			struct kt_clusterfx_lst s;
			bool up = lstatus(nodes[k], &s);

			if (trace && up &&
			    (strcmp(s.phase, last[k].phase) || strcmp(s.state, last[k].state) ||
			     s.size != last[k].size || s.live != last[k].live ||
			     s.bucket_rate != last[k].bucket_rate)) {
				print_message("%s: t=%.2fs n%d phase %s store %s size %.0f live %.0f "
					      "bucket_rate %.6g reserved %.6g\n", trace,
					      arrivals_now_s(&fx.arr), nodes[k], s.phase, s.state, s.size,
					      s.live, s.bucket_rate, s.reserved);
				last[k] = s;
			}
			if (up && kt_clusterfx_agreed(&s, size) &&
			    (!endpoint || !strcmp(s.endpoint, endpoint)))
				good++;
		}
		if (good == n)
			return (double)(ktest_now_ns() - t0) / 1e6;
		if (ktest_now_ns() - t0 > (uint64_t)timeout_ms * 1000000ull)
			return -1;
		ktest_sleep_ms(20);
	}
}

/* Polls until nodes[] all show the limit agreed at `size`, store up. */
static void wait_agreed(const int *nodes, int n, int size, int timeout_ms)
{
	if (await_agreed(nodes, n, size, NULL, timeout_ms, NULL) < 0) {
		print_message("no agreement on size %d within %d ms\n", size, timeout_ms);
		for (int k = 0; k < n; k++)
			dump_node(nodes[k]);
		fail();
	}
}

/* Redis (with requirepass `pw` if not NULL), the receiver, and nodes 0..n-1
 * agreed. */
static void start_pool(int n, const char *pw)
{
	static const int all[] = { 0, 1, 2, 3 };
	const struct rp_opts o = { .password = pw };

	fx.redis_pw = pw;
	assert_int_equal(rp_start_master(&fx.rp, &o), 0);
	assert_int_equal(arrivals_start(&fx.arr), 0);
	for (int i = 0; i < n; i++)
		prepare_node(i, pw);
	/* started side by side (their BPF loads overlap) */
	kt_clusterfx_run_nodes(fx.d, n, dump_node);
	/* n joins, each agreed within 2 heartbeats; generous */
	wait_agreed(all, n, n, 5000);
}

/* ---- senders ---- */

/* Node i's paced sender: fx.rate[i] (0: SEND_PER_S) datagrams/s from inside
 * its cgroup to the receiver for `secs` (kt_clusterfx_sender_start). */
static void sender_start(int i, double secs)
{
	assert_true(fx.sender[i] <= 0);
	fx.sender[i] = kt_clusterfx_sender_start(fx.cg[i], &fx.arr.port, 1, secs,
						 fx.rate[i] > 0 ? fx.rate[i] : SEND_PER_S,
						 &fx.sender_fd[i]);
}

/* Senders 0..n-1 started for `secs`; the arrivals time they start at. */
static double senders_start(int n, double secs)
{
	double t0 = arrivals_now_s(&fx.arr);

	for (int i = 0; i < n; i++)
		sender_start(i, secs);
	return t0;
}

/* Waits for every running sender; sum of what they were told was sent. */
static unsigned long long senders_wait(void)
{
	unsigned long long ok = 0;

	for (int i = 0; i < NODES; i++) {
		struct kt_clusterfx_sent r;

		/* the sender's own bound ends it */
		if (!kt_clusterfx_sender_wait(&fx.sender[i], &fx.sender_fd[i], i, &r))
			continue;
		print_message("sender n%d: ok=%llu refused=%llu errors=%llu\n", i, r.ok[0],
			      r.refused[0], r.errors[0]);
		assert_int_equal(r.errors[0], 0);
		fx.sent[i] = r.ok[0];
		fx.refused[i] = r.refused[0];
		ok += r.ok[0];
	}
	return ok;
}

/* ---- the promise ---- */

/* One line of the KT_FAULT_TABLE file (if set): "case, worst, max + burst,
 * max". A file that cannot be written is reported, not fatal. */
static void table_line(const char *label, unsigned long worst, double max)
{
	const char *path = getenv("KT_FAULT_TABLE");
	FILE *f;

	if (!path || !*path)
		return;
	f = fopen(path, "a");
	if (!f) {
		print_message("KT_FAULT_TABLE %s: %s\n", path, strerror(errno));
		return;
	}
	fprintf(f, "%s\t%lu\t%.0f\t%g\n", label, worst, max + BURST, max);
	fclose(f);
}

/* The measurement itself is whole: the receiver dropped nothing and saw
 * exactly what the senders were told was sent (else it would hide excess). */
static void check_measurement(const char *name, unsigned long long sent_ok)
{
	ktest_sleep_ms(50); /* the receiver drains what is queued */
	kt_clusterfx_check_measurement(&fx.arr, name, sent_ok);
}

/* Every one-second window of [from_s, to_s) (arrivals time) must hold at
 * most `bound`. Prints the seconds, the worst window and when it started
 * (also relative to `fault_s`, < 0: none), and writes the table line
 * (`label`, `max`: the limit's max in force in that range) before asserting.
 * check_measurement first. */
static void check_range(const char *name, const char *label, double from_s, double to_s,
			double fault_s, double bound, double max)
{
	unsigned long worst;
	double at;

	arrivals_print(&fx.arr, name, from_s, to_s);
	worst = arrivals_worst_window(&fx.arr, from_s, to_s, &at);
	if (fault_s >= 0)
		print_message("%s: worst one-second window %lu (bound %.0f) starting at t=%.1fs, "
			      "%+.2fs from the start of sending, %+.2fs from the fault\n",
			      name, worst, bound, at, at - from_s, at - fault_s);
	else
		print_message("%s: worst one-second window %lu (bound %.0f) starting at t=%.1fs, "
			      "%+.2fs from the start of sending\n", name, worst, bound, at, at - from_s);
	table_line(label, worst, max);
	if ((double)worst > bound) {
		print_message("%s: PROMISE BROKEN: %lu admitted in the second from t=%.1fs, bound "
			      "%.0f\n", name, worst, at, bound);
		for (int i = 0; i < NODES; i++)
			if (fx.d[i].dir[0])
				dump_node(i);
	}
	assert_true((double)worst <= bound);
}

/* The measurement, then every window of [from_s, to_s) against `bound`, for
 * a limit whose max is MAX throughout. */
static void check_windows(const char *name, const char *label, double from_s, double to_s,
			  double fault_s, unsigned long long sent_ok, double bound)
{
	check_measurement(name, sent_ok);
	print_nodes(name);
	check_range(name, label, from_s, to_s, fault_s, bound, MAX);
}

/* ---- fixtures ---- */

static int setup(void **state)
{
	(void)state;
	kt_clusterfx_begin(&fx, sizeof(fx), fx.d, NODES, fx.sender, fx.sender_fd);
	for (int i = 0; i < NODES; i++)
		fx.relay[i].ctl = -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	kt_clusterfx_nodes_end(fx.d, NODES, fx.sender, fx.sender_fd);
	for (int i = 0; i < NODES; i++)
		relay_stop(&fx.relay[i]);
	rp_stop(&fx.sentinel);
	rp_stop(&fx.replica);
	rp_stop(&fx.rp);
	arrivals_stop(&fx.arr);
	kt_clusterfx_cgroups_end(fx.cg, NODES);
	return 0;
}

/* Sleeps until `t_s` on the arrivals clock (bounded by the caller's times). */
static void sleep_until(double t_s)
{
	double d = t_s - arrivals_now_s(&fx.arr);

	if (d > 0)
		ktest_sleep_ms((int)(d * 1000));
}

/* ---- cases ---- */

/* a. No fault: the sanity check of the harness and of today's pool. */
static void test_steady_state(void **state)
{
	const double secs = 3;
	double t0;
	unsigned long long ok;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_pool(3, NULL);
	t0 = senders_start(3, secs);
	ok = senders_wait();
	check_windows("steady", "steady state", t0, t0 + secs, -1, ok, PROMISE);
}

/* b. kill -9 of n2 one second in; its pod keeps sending on whatever the
 * kernel still holds, while n0 and n1 prune it and take its share. */
static void test_kill9(void **state)
{
	const double pre = 1, post = 5;
	double t0;
	unsigned long long ok;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_pool(3, NULL);
	t0 = senders_start(3, pre + post);
	sleep_until(t0 + pre);
	print_message("kill -9 n2 at t=%.2fs\n", arrivals_now_s(&fx.arr));
	assert_int_equal(ktest_daemon_signal_wait(&fx.d[2], SIGKILL), 128 + SIGKILL);
	ok = senders_wait();
	check_windows("kill9", "kill -9 of a daemon, its pod still sending", t0, t0 + pre + post,
		      t0 + pre, ok, PROMISE);
}

/* c. SIGTERM n2 one second in (it leaves gracefully), start it again one
 * second later on the same config and pins; its pod sends throughout. */
static void test_sigterm_restart(void **state)
{
	const double pre = 1, post = 5;
	double t0;
	unsigned long long ok;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_pool(3, NULL);
	t0 = senders_start(3, pre + post);
	sleep_until(t0 + pre);
	print_message("SIGTERM n2 at t=%.2fs\n", arrivals_now_s(&fx.arr));
	assert_int_equal(ktest_daemon_signal_wait(&fx.d[2], SIGTERM), 0);
	sleep_until(t0 + pre + 1);
	print_message("restarting n2 at t=%.2fs\n", arrivals_now_s(&fx.arr));
	run_node(2);
	print_message("n2 answers again at t=%.2fs\n", arrivals_now_s(&fx.arr));
	ok = senders_wait();
	check_windows("sigterm", "SIGTERM, restart after 1 s", t0, t0 + pre + post, t0 + pre, ok,
		      PROMISE);
}

/* d. n2's link to Redis hangs for 8 s (bytes stop, connections stay open,
 * its calls time out) while n0 and n1 keep heartbeating. */
static void test_frozen_store_link(void **state)
{
	const double pre = 1, frozen = 8;
	double t0;
	unsigned long long ok;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_pool(3, NULL);
	t0 = senders_start(3, pre + frozen);
	sleep_until(t0 + pre);
	print_message("freezing n2's relay at t=%.2fs\n", arrivals_now_s(&fx.arr));
	assert_int_equal(relay_freeze(&fx.relay[2]), 0);
	ok = senders_wait();
	print_message("thawing n2's relay at t=%.2fs\n", arrivals_now_s(&fx.arr));
	assert_int_equal(relay_thaw(&fx.relay[2]), 0);
	check_windows("frozen", "one node's Redis connection frozen for 8 s", t0, t0 + pre + frozen,
		      t0 + pre, ok, PROMISE);
}

/* e. n3 joins while n0..n2 are agreed and saturated; its pod starts sending
 * as soon as its daemon answers. Allowance: one member's share (max/4) for
 * one heartbeat, on top of max + burst. */
static void test_join(void **state)
{
	const double pre = 1, post = 3.5;
	const double bound = PROMISE + MAX / 4 * HB_MS / 1000.0;
	double t0, t_join;
	unsigned long long ok;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_pool(3, NULL);
	prepare_node(3, NULL);
	t0 = senders_start(3, pre + post);
	sleep_until(t0 + pre);
	t_join = arrivals_now_s(&fx.arr);
	print_message("starting n3 at t=%.2fs\n", t_join);
	run_node(3);
	print_message("n3 answers at t=%.2fs\n", arrivals_now_s(&fx.arr));
	sender_start(3, t0 + pre + post - arrivals_now_s(&fx.arr));
	ok = senders_wait();
	check_windows("join", "a fourth node joins", t0, t0 + pre + post, t_join, ok, bound);
}

/* f. Redis requires a password; n2 is configured with a wrong one (n0 and n1
 * with the right one): n2 never reaches the store. Its pod sends too. */
static void test_wrong_password(void **state)
{
	static const int good[] = { 0, 1 };
	const double secs = 3;
	double t0;
	unsigned long long ok;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_pool(2, PASSWORD);
	prepare_node(2, "kt-wrong-pw");
	run_node(2);
	ktest_sleep_ms(2 * HB_MS); /* n2 has tried the store */
	wait_agreed(good, 2, 2, 2000);
	t0 = senders_start(3, secs);
	ok = senders_wait();
	check_windows("wrongpw", "a node with a wrong Redis password", t0, t0 + secs, -1, ok,
		      PROMISE);
}

/* g. SIGTERM n2 one second in and start it again 5 s later: past its lease
 * (3 x 200 ms), so its buckets run at the fallback (min / 3 = 100/s) for the
 * rest of the gap while n0 and n1 hold that back from their shares; on the
 * restart it adopts the expired pinned lease and rejoins under the same
 * member id. Its pod sends throughout. */
static void test_sigterm_restart_late(void **state)
{
	static const int all[] = { 0, 1, 2 };
	const double pre = 1, down = 5, post = 3;
	double t0, agreed_ms;
	unsigned long long ok;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_pool(3, NULL);
	t0 = senders_start(3, pre + down + post);
	sleep_until(t0 + pre);
	print_message("SIGTERM n2 at t=%.2fs\n", arrivals_now_s(&fx.arr));
	assert_int_equal(ktest_daemon_signal_wait(&fx.d[2], SIGTERM), 0);
	sleep_until(t0 + pre + down / 2);
	print_nodes("sigterm5, n2 down"); /* n0 and n1 hold n2's fallback back */
	sleep_until(t0 + pre + down);
	print_message("restarting n2 at t=%.2fs\n", arrivals_now_s(&fx.arr));
	run_node(2);
	print_message("n2 answers again at t=%.2fs\n", arrivals_now_s(&fx.arr));
	agreed_ms = await_agreed(all, 3, 3, NULL, (int)(post * 1000), "sigterm5");
	print_message("sigterm5: all three agreed on 3 again %.0f ms after n2 answered (-1: not "
		      "within %.0f s)\n", agreed_ms, post);
	ok = senders_wait();
	check_windows("sigterm5", "SIGTERM, restart after 5 s (past the lease)", t0,
		      t0 + pre + down + post, t0 + pre, ok, PROMISE);
	if (agreed_ms < 0)
		for (int i = 0; i < 3; i++)
			dump_node(i);
	assert_true(agreed_ms >= 0); /* it rejoined */
}

/* h. Redis killed one second in (everything it held is lost); one second
 * into the outage n2 is restarted (SIGTERM, start: it has only its pinned
 * lease and no store); Redis comes back, empty, 4 s after that. Every pod
 * sends throughout; the nodes must agree on 3 again afterwards. */
static void test_restart_in_redis_outage(void **state)
{
	static const int all[] = { 0, 1, 2 };
	const double pre = 1, restart_after = 1, outage_after = 4, post = 3;
	const double secs = pre + restart_after + outage_after + post;
	double t0, t_kill, t_restart, t_back, agreed_ms;
	unsigned long long ok;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_pool(3, NULL);
	t0 = senders_start(3, secs);
	sleep_until(t0 + pre);
	t_kill = arrivals_now_s(&fx.arr);
	print_message("kill -9 redis-server at t=%.2fs\n", t_kill);
	assert_int_equal(rp_signal(&fx.rp, SIGKILL), 0);
	sleep_until(t_kill + restart_after);
	print_message("SIGTERM n2 at t=%.2fs\n", arrivals_now_s(&fx.arr));
	assert_int_equal(ktest_daemon_signal_wait(&fx.d[2], SIGTERM), 0);
	run_node(2);
	t_restart = arrivals_now_s(&fx.arr);
	print_message("n2 answers again at t=%.2fs (Redis still down)\n", t_restart);
	ktest_sleep_ms(2 * HB_MS);
	print_nodes("redisdown, n2 restarted");
	sleep_until(t_restart + outage_after);
	assert_int_equal(rp_restart(&fx.rp), 0);
	t_back = arrivals_now_s(&fx.arr);
	print_message("redis-server back (empty) at t=%.2fs\n", t_back);
	/* reconnect back-off is capped at 5 s */
	agreed_ms = await_agreed(all, 3, 3, NULL, 8000, "redisdown");
	print_message("redisdown: all three agreed on 3 again %.0f ms after Redis came back (-1: "
		      "not within 8 s)\n", agreed_ms);
	ok = senders_wait();
	check_windows("redisdown", "daemon restarted during a Redis outage (Redis back empty)", t0,
		      t0 + secs, t_kill, ok, PROMISE);
	if (agreed_ms < 0)
		for (int i = 0; i < 3; i++)
			dump_node(i);
	assert_true(agreed_ms >= 0);
}

/* n. A restart that finds its pinned lease written wrong (by hand, an older
 * version, a bit flip) while its store is unreachable: n2 is killed (-9,
 * pins kept), one field of its kt_leases entry is rewritten, its relay to
 * Redis frozen, and it is started again. The lease is not believed beyond
 * what the pinned buckets vouch for, so every window holds: a size of 1
 * would otherwise run n2 at the whole pool rate, a fallback of the whole
 * pool rate would do so after the lease, and a far deadline is cut to
 * what this config grants. */
enum lease_field { LEASE_SIZE, LEASE_FALLBACK, LEASE_DEADLINE };

static void corrupt_lease(int node, enum lease_field f)
{
	struct kt_lease_key key = { 0 };
	struct kt_lease v;
	char path[400];
	int fd;

	snprintf(path, sizeof(path), "%s/kt_leases", fx.d[node].pin_dir);
	fd = bpf_obj_get(path);
	assert_true(fd >= 0);
	snprintf(key.name, sizeof(key.name), "%s", LIMIT);
	assert_int_equal(bpf_map_lookup_elem(fd, &key, &v), 0);
	print_message("n%d's pinned lease: size %u, fallback %.3f/s, lease %+.2fs\n", node, v.size,
		      v.fallback_urate / 1e6, ((int64_t)v.lease_until - (int64_t)kt_clock_ns()) / 1e9);
	if (f == LEASE_SIZE) {
		/* and live: a lapsed pin is run on its fallback anyway */
		v.size = 1;
		v.lease_until = kt_clock_ns() + 3600 * 1000000000ULL;
	} else if (f == LEASE_FALLBACK)
		v.fallback_urate = (uint64_t)(MAX * 1e6);
	else
		v.lease_until = kt_clock_ns() + 3600 * 1000000000ULL;
	assert_int_equal(bpf_map_update_elem(fd, &key, &v, BPF_EXIST), 0);
	close(fd);
}

static void restart_on_corrupt_lease(enum lease_field f, const char *name, const char *label)
{
	const double pre = 1, post = 4;
	double t0, t_kill;
	unsigned long long ok;

	KTEST_SKIP_UNLESS_ROOT();
	start_pool(3, NULL);
	t0 = senders_start(3, pre + post);
	sleep_until(t0 + pre);
	t_kill = arrivals_now_s(&fx.arr);
	assert_int_equal(ktest_daemon_signal_wait(&fx.d[2], SIGKILL), 128 + SIGKILL);
	corrupt_lease(2, f);
	assert_int_equal(relay_freeze(&fx.relay[2]), 0);
	run_node(2);
	print_message("%s: n2 killed at t=%.2fs, answers again at t=%.2fs on the rewritten lease, "
		      "its store unreachable\n", name, t_kill, arrivals_now_s(&fx.arr));
	ok = senders_wait();
	assert_int_equal(relay_thaw(&fx.relay[2]), 0);
	check_windows(name, label, t0, t0 + pre + post, t_kill, ok, PROMISE);
}

static void test_restart_lease_size(void **state)
{
	(void)state;
	restart_on_corrupt_lease(LEASE_SIZE, "leasesize", "restart on a pinned lease of size 1");
}

static void test_restart_lease_fallback(void **state)
{
	(void)state;
	restart_on_corrupt_lease(LEASE_FALLBACK, "leasefallback",
				 "restart on a pinned fallback of the whole pool rate");
}

static void test_restart_lease_deadline(void **state)
{
	(void)state;
	restart_on_corrupt_lease(LEASE_DEADLINE, "leasedeadline",
				 "restart on a pinned lease an hour long");
}

/* i. Sentinel: master + replica + one sentinel (quorum 1, down after 1 s);
 * the nodes find the master through the sentinel (no relays). The master
 * is killed one second in; the sentinel promotes the replica and every node
 * must follow it and agree on 3 again. Every pod sends throughout. */
static void test_sentinel_failover(void **state)
{
	static const int all[] = { 0, 1, 2 };
	/* Redis 7 waits repl-diskless-sync-delay (5 s) before a full sync */
	const struct rp_opts now = { .extra_conf = "repl-diskless-sync-delay 0" };
	/* all follow and agree 3.5-3.6 s after the kill (measured): 3 s more seen */
	const double pre = 1, post = 6.5;
	char store[256], want[64];
	double t0, t_kill, promoted_ms = -1, followed_ms;
	uint64_t k0;
	unsigned long long ok;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(rp_start_master(&fx.rp, &now), 0);
	assert_int_equal(rp_start_replica(&fx.replica, &fx.rp, &now), 0);
	assert_int_equal(rp_start_sentinel(&fx.sentinel, &fx.rp, "ktf", 1, 1000, NULL), 0);
	assert_int_equal(arrivals_start(&fx.arr), 0);
	snprintf(store, sizeof(store),
		 "{mode: sentinel, sentinel: {endpoints: [\"127.0.0.1:%d\"], master_name: ktf}, "
		 "keyPrefix: " PREFIX "}",
		 fx.sentinel.port);
	for (int i = 0; i < 3; i++) {
		prepare_node_store(i, store);
		run_node(i);
	}
	wait_agreed(all, 3, 3, 5000);
	/* the sentinel must know the replica, or it has nothing to promote */
	assert_int_equal(rp_sentinel_wait_replicas(&fx.sentinel, "ktf", 1, 10000), 0);

	t0 = senders_start(3, pre + post);
	sleep_until(t0 + pre);
	t_kill = arrivals_now_s(&fx.arr);
	print_message("kill -9 the master (port %d) at t=%.2fs\n", fx.rp.port, t_kill);
	k0 = ktest_now_ns();
	assert_int_equal(rp_signal(&fx.rp, SIGKILL), 0);
	while (ktest_now_ns() - k0 < 8000000000ull) {
		if (rp_sentinel_master_port(&fx.sentinel, "ktf") == fx.replica.port) {
			promoted_ms = (double)(ktest_now_ns() - k0) / 1e6;
			break;
		}
		ktest_sleep_ms(50);
	}
	print_message("sentinel: replica (port %d) promoted %.0f ms after the kill (-1: not within "
		      "8 s)\n", fx.replica.port, promoted_ms);
	snprintf(want, sizeof(want), "127.0.0.1:%d", fx.replica.port);
	followed_ms = -1;
	if (promoted_ms >= 0) {
		/* until the senders stop, and a little past (bounded) */
		int left = (int)((t_kill + post - arrivals_now_s(&fx.arr)) * 1000) + 3000;

		followed_ms = await_agreed(all, 3, 3, want, left > 0 ? left : 0, "sentinel");
		if (followed_ms >= 0)
			followed_ms = (double)(ktest_now_ns() - k0) / 1e6;
	}
	print_message("sentinel: all three on %s and agreed on 3 %.0f ms after the kill (-1: "
		      "not)\n", want, followed_ms);
	ok = senders_wait();
	check_windows("sentinel", "Sentinel failover (master killed)", t0, t0 + pre + post, t_kill,
		      ok, PROMISE);
	if (followed_ms < 0)
		for (int i = 0; i < 3; i++)
			dump_node(i);
	assert_true(promoted_ms >= 0);
	assert_true(followed_ms >= 0);
}

/* ---- reloads ---- */

/* A top-level or limit-level number from node i's status; NAN if absent. */
static double status_num(int i, bool top, const char *field)
{
	double v;

	return kt_daemonfx_status_num(&fx.d[i], top ? NULL : LIMIT, field, &v) ? v : NAN;
}

static int count_str(const char *s, const char *what)
{
	int n = 0;

	for (const char *p = s; (p = strstr(p, what)); p += strlen(what))
		n++;
	return n;
}

/* j. n1 is given a config with an unknown key (kthrottlectl reload), then
 * one whose cgroup path is no cgroup (SIGHUP), under load. Both are rejected:
 * its status (max, bucket rate, reload count) and its kernel bucket (rate,
 * burst, fallback) are as before, it still admits its share, and every
 * window holds. */
static void test_rejected_reload(void **state)
{
	const double secs = 4;
	struct kt_bucket kb0, kb1;
	struct kt_clusterfx_lst s0, s1;
	char nocg[PATH_MAX], *out = NULL, *log;
	double t0, t_fault, reloads0, reloads1, a0, a1, rate;
	uint64_t n0, n1;
	unsigned long long ok;
	int rc;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_pool(3, NULL);
	t0 = senders_start(3, secs);
	sleep_until(t0 + 0.5);
	assert_true(lstatus(1, &s0));
	assert_true(kernel_bucket(1, &kb0));
	reloads0 = status_num(1, true, "reloads");
	print_message("badreload: n1 before: max %g bucket_rate %.6g reloads %g interval_fp %llu "
		      "burst %llu fallback_fp %llu\n", s0.max, s0.bucket_rate, reloads0,
		      (unsigned long long)kb0.interval_fp, (unsigned long long)kb0.burst,
		      (unsigned long long)kb0.fallback_fp);

	/* an unknown key, through the CLI */
	write_node_config(1, MAX / 2, NULL, "    bogusKey: 1\n");
	t_fault = arrivals_now_s(&fx.arr);
	rc = ktest_run_bin("kthrottlectl", &out, "-s", fx.d[1].socket, "reload", NULL);
	print_message("badreload: kthrottlectl reload (unknown key) at t=%.2fs: exit %d: %s", t_fault,
		      rc, out ? out : "(null)\n");
	assert_int_equal(rc, 1);
	assert_non_null(out);
	assert_true(!strncmp(out, "error:", 6));
	assert_non_null(strstr(out, "bogusKey"));
	free(out);
	out = NULL;

	/* a cgroup path that is no cgroup (a missing one would only warn),
	 * through SIGHUP */
	sleep_until(t0 + 1.5);
	snprintf(nocg, sizeof(nocg), "%s", "/tmp");
	write_node_config(1, MAX / 2, nocg, NULL);
	print_message("badreload: SIGHUP n1 (not a cgroup) at t=%.2fs\n", arrivals_now_s(&fx.arr));
	assert_int_equal(kill(fx.d[1].pid, SIGHUP), 0);
	ktest_sleep_ms(300);
	assert_int_equal(waitpid(fx.d[1].pid, NULL, WNOHANG), 0);
	log = ktest_slurp(fx.d[1].log);
	print_message("badreload: n1 logged \"rejected, keeping the running configuration\" %d times\n",
		      count_str(log, "rejected, keeping the running configuration"));
	assert_int_equal(count_str(log, "rejected, keeping the running configuration"), 2);
	free(log);

	/* as before, and the kernel still enforces the old share */
	sleep_until(t0 + 2);
	assert_true(lstatus(1, &s1));
	assert_true(kernel_bucket(1, &kb1));
	reloads1 = status_num(1, true, "reloads");
	print_message("badreload: n1 after: max %g bucket_rate %.6g reloads %g interval_fp %llu "
		      "burst %llu fallback_fp %llu\n", s1.max, s1.bucket_rate, reloads1,
		      (unsigned long long)kb1.interval_fp, (unsigned long long)kb1.burst,
		      (unsigned long long)kb1.fallback_fp);
	assert_true(s1.max == s0.max);
	assert_true(s1.max == MAX);
	assert_true(s1.bucket_rate == s0.bucket_rate);
	assert_true(reloads1 == reloads0);
	assert_int_equal(kb1.interval_fp, kb0.interval_fp);
	assert_int_equal(kb1.burst, kb0.burst);
	assert_int_equal(kb1.fallback_fp, kb0.fallback_fp);
	assert_int_equal(kb1.fallback_burst, kb0.fallback_burst);
	assert_int_equal(kb1.limit_id, kb0.limit_id);
	assert_int_equal(kb1.flags, kb0.flags);
	a0 = status_num(1, false, "admitted");
	n0 = ktest_now_ns();
	ktest_sleep_ms(1000);
	a1 = status_num(1, false, "admitted");
	n1 = ktest_now_ns();
	rate = (a1 - a0) / ((double)(n1 - n0) / 1e9);
	print_message("badreload: n1 admitted %.1f/s after the rejected reloads (share %.6g)\n",
		      rate, s1.bucket_rate);
	assert_true(fabs(rate - s1.bucket_rate) <= 0.15 * s1.bucket_rate);

	ok = senders_wait();
	check_windows("badreload", "rejected reloads on one node (unknown key, not a cgroup)", t0,
		      t0 + secs, t_fault, ok, PROMISE);
}

/* k. max (and min) 300 -> 150 reloaded on every node under load (the three
 * `reload` commands back to back). Every window holds max + burst of the old
 * config; from the last reply + 2 heartbeats on, every window holds the new
 * max + burst. */
static void test_reload_lowers_max(void **state)
{
	const double pre = 2, post = 3, low = MAX / 2;
	double t0, t_r0, t_r1, from;
	unsigned long long ok;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_pool(3, NULL);
	t0 = senders_start(3, pre + post);
	for (int i = 0; i < 3; i++)
		write_node_config(i, low, NULL, NULL);
	sleep_until(t0 + pre);
	t_r0 = arrivals_now_s(&fx.arr);
	for (int i = 0; i < 3; i++) {
		char *r = ktest_daemon_cmd(&fx.d[i], "reload");

		print_message("lower: n%d reload at t=%.2fs: %s", i, arrivals_now_s(&fx.arr),
			      r ? r : "(no reply)\n");
		assert_non_null(r);
		assert_true(!strncmp(r, "ok", 2));
		free(r);
	}
	t_r1 = arrivals_now_s(&fx.arr);
	print_message("lower: reloads from t=%.2fs to t=%.2fs\n", t_r0, t_r1);
	ok = senders_wait();
	check_measurement("lower", ok);
	print_nodes("lower");
	for (int i = 0; i < 3; i++)
		assert_true(status_num(i, false, "max") == low);
	check_range("lower", "reload max 300 -> 150 on every node: every window", t0, t0 + pre + post,
		    t_r0, PROMISE, MAX);
	/* whole bins from the last reply + 2 heartbeats */
	from = ceil((t_r1 + 2.0 * HB_MS / 1000) * 1000.0 / ARRIVALS_BIN_MS - 1e-9) *
	       ARRIVALS_BIN_MS / 1000.0;
	check_range("lower-after", "reload max 300 -> 150: from the reload + 2 heartbeats", from,
		    t0 + pre + post, t_r1, low + BURST, low);
}

/* l. Redis stops answering (SIGSTOP: connections stay open, nothing comes
 * back) for 5 s while every node is saturated. The store's round trips run
 * on their own thread, so the daemons' loops never wait for them: status
 * answers within STATUS_BOUND_MS throughout, no tick runs a tick late or is
 * skipped (a blocking heartbeat would hold it 200 ms to 1 s), the leases run out in the kernel (conservative
 * fallback) and every window holds; after SIGCONT the pool agrees again. */
/* a quarter of the shortest hold a blocking heartbeat would cause (200 ms):
 * a loaded 2-core VM answered one status of 414 in 20.9 ms, an idle one
 * in 2.3-9.3 ms (10 ms, the bound before, failed a clean-clone run) */
#define STATUS_BOUND_MS 50.0
static void test_redis_sigstop(void **state)
{
	static const int all[] = { 0, 1, 2 };
	const double pre = 1, stopped = 5, post = 3;
	double t0, t_stop, t_cont, worst_ms = 0, agree_ms;
	unsigned long long ok;
	int polls = 0;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_pool(3, NULL);
	t0 = senders_start(3, pre + stopped + post);
	sleep_until(t0 + pre);
	t_stop = arrivals_now_s(&fx.arr);
	print_message("sigstop: redis-server stopped at t=%.2fs\n", t_stop);
	assert_int_equal(rp_signal(&fx.rp, SIGSTOP), 0);
	/* status of every node, round robin, for the whole stop */
	while (arrivals_now_s(&fx.arr) < t_stop + stopped) {
		for (int i = 0; i < 3; i++) {
			uint64_t a = ktest_now_ns();
			char *js = ktest_daemon_cmd(&fx.d[i], "status json");
			double ms = (double)(ktest_now_ns() - a) / 1e6;

			assert_non_null(js);
			assert_non_null(strstr(js, "\"limits\""));
			free(js);
			if (ms > worst_ms)
				worst_ms = ms;
			polls++;
		}
		ktest_sleep_ms(30);
	}
	print_nodes("sigstop (stopped)");
	for (int i = 0; i < 3; i++) {
		struct kt_clusterfx_lst s;

		/* the leases ran out: the kernel runs the fallback by itself */
		assert_true(lstatus(i, &s));
		assert_string_equal(s.phase, "store-lost");
	}
	t_cont = arrivals_now_s(&fx.arr);
	assert_int_equal(rp_signal(&fx.rp, SIGCONT), 0);
	print_message("sigstop: SIGCONT at t=%.2fs; status took at most %.2f ms over %d calls "
		      "(bound %.0f ms)\n", t_cont, worst_ms, polls, STATUS_BOUND_MS);
	agree_ms = await_agreed(all, 3, 3, NULL, 5000, NULL);
	print_message("sigstop: agreed again %.0f ms after SIGCONT\n", agree_ms);
	ok = senders_wait();
	for (int i = 0; i < 3; i++) {
		double late = status_num(i, true, "tick_late_max_ms");
		double missed = status_num(i, true, "ticks_missed");

		print_message("sigstop: n%d latest tick %.2f ms late, %.0f ticks missed (tick %d ms)\n",
			      i, late, missed, TICK_MS);
		if (!(late < TICK_MS) || missed != 0)
			dump_node(i);
		assert_true(late < TICK_MS);
		assert_true(missed == 0);
	}
	assert_true(agree_ms >= 0);
	assert_true(worst_ms < STATUS_BOUND_MS);
	check_windows("sigstop", "redis-server stopped (SIGSTOP) for 5 s", t0,
		      t0 + pre + stopped + post, t_stop, ok, PROMISE);
}

/* m. share: demand. n0 sends 1000/s, n1 20/s, n2 nothing: after the
 * grants settle the limit runs at >= 95% of max in aggregate (n2 keeps only
 * its floor, a tenth of an equal share), n1 is never throttled, and every
 * window holds max + burst throughout. Then n0 and n1 both saturated get
 * equal shares within 2%. */
static void test_share_demand(void **state)
{
	const double pre = 1, settle = 2, measure = 4;
	double t0, t1, got, grow_s;
	unsigned long long ok;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	fx.limit_extra = "    share: demand\n";
	fx.rate[0] = 1000;
	fx.rate[1] = 20;
	start_pool(3, NULL);
	/* the steady 20/s member first; the greedy one arrives a second later */
	t0 = arrivals_now_s(&fx.arr);
	sender_start(1, pre + settle + measure);
	sleep_until(t0 + pre);
	t1 = arrivals_now_s(&fx.arr);
	sender_start(0, settle + measure);
	/* how fast the newly busy member grows: its bucket's rate, polled */
	{
		double rate_at[128], when[128], final;
		int n = 0, k;
		struct kt_clusterfx_lst st;

		while (arrivals_now_s(&fx.arr) < t1 + settle && n < 128) {
			rate_at[n] = lstatus(0, &st) ? st.bucket_rate : -1;
			when[n++] = arrivals_now_s(&fx.arr) - t1;
			ktest_sleep_ms(20);
		}
		final = lstatus(0, &st) ? st.bucket_rate : -1;
		for (k = 0; k < n && rate_at[k] < 0.9 * final; k++)
			;
		grow_s = k < n ? when[k] : settle;
		print_message("demand: n0 busy from idle reached 90%% of its share (%.1f/s) in about %.2f s "
			      "(%d polls)\n", final, grow_s, n);
		/* two of its heartbeats (0.4 s: the first grows into the floor
		 * kept free while the others shrink, the second to the share),
		 * plus the 100 ms demand window, a tick to see it and a tick to
		 * write the grant, and the poll */
		assert_true(grow_s <= 0.4 + 0.1 + 2 * 0.05 + 0.2);
	}
	ok = senders_wait();
	print_nodes("demand");
	check_measurement("demand", ok);
	got = (double)arrivals_sum(&fx.arr, t1 + settle, t1 + settle + measure) / measure;
	print_message("demand: %.1f/s admitted in aggregate after %.0f s (%.1f%% of max %.0f); n1 "
		      "(20/s) refused %llu of %llu\n", got, settle, 100 * got / MAX, MAX,
		      fx.refused[1], fx.sent[1] + fx.refused[1]);
	check_range("demand", "share: demand, demands 1000/20/0", t0, t1 + settle + measure, -1,
		    PROMISE, MAX);
	assert_true(got >= 0.95 * MAX);
	assert_int_equal(fx.refused[1], 0);

	/* both saturated: equal shares once settled (n1 grows into what n0
	 * gives back, so the first heartbeats are not equal) */
	fx.rate[1] = 1000;
	t0 = arrivals_now_s(&fx.arr);
	sender_start(0, settle + measure);
	sender_start(1, settle + measure);
	sleep_until(t0 + settle + measure / 2);
	{
		struct kt_clusterfx_lst s0, s1, s2;

		assert_true(lstatus(0, &s0) && lstatus(1, &s1) && lstatus(2, &s2));
		print_message("demand: saturated shares n0 %.2f/s, n1 %.2f/s, idle n2 %.2f/s\n",
			      s0.bucket_rate, s1.bucket_rate, s2.bucket_rate);
		assert_true(fabs(s0.bucket_rate - s1.bucket_rate) <=
			    0.02 * fmax(s0.bucket_rate, s1.bucket_rate));
		assert_true(s0.bucket_rate + s1.bucket_rate + s2.bucket_rate <= MAX + 1e-6);
		assert_true(s0.bucket_rate + s1.bucket_rate >= 0.9 * MAX);
	}
	/* status shows the member's own kernel rate and its measured demand */
	{
		char *js = ktest_daemon_cmd(&fx.d[0], "status json");
		const char *m = js ? strstr(js, "\"cgroups\":[") : NULL;
		double rate = -1, demand = -1;

		assert_non_null(m);
		assert_true(ktest_json_num(m, "rate", &rate) && ktest_json_num(m, "demand", &demand));
		print_message("demand: n0's member in status: rate %.2f/s, demand %.1f/s\n", rate, demand);
		assert_true(fabs(rate - 145) <= 0.02 * 145);
		assert_true(demand >= 800 && demand <= 1200); /* its sender's ~1000/s */
		free(js);
	}
	/* the receiver counts both phases */
	ok += senders_wait();
	check_measurement("demand-saturated", ok);
	check_range("demand-saturated", "share: demand, two saturated members", t0,
		    t0 + settle + measure, -1, PROMISE, MAX);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_steady_state, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kill9, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sigterm_restart, setup, teardown),
		cmocka_unit_test_setup_teardown(test_frozen_store_link, setup, teardown),
		cmocka_unit_test_setup_teardown(test_join, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wrong_password, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sigterm_restart_late, setup, teardown),
		cmocka_unit_test_setup_teardown(test_restart_in_redis_outage, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sentinel_failover, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rejected_reload, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reload_lowers_max, setup, teardown),
		cmocka_unit_test_setup_teardown(test_redis_sigstop, setup, teardown),
		cmocka_unit_test_setup_teardown(test_share_demand, setup, teardown),
		cmocka_unit_test_setup_teardown(test_restart_lease_size, setup, teardown),
		cmocka_unit_test_setup_teardown(test_restart_lease_fallback, setup, teardown),
		cmocka_unit_test_setup_teardown(test_restart_lease_deadline, setup, teardown),
	};

	if (getenv("KT_TEST_FILTER"))
		cmocka_set_test_filter(getenv("KT_TEST_FILTER"));
	return cmocka_run_group_tests_name("e2e_faults", tests, NULL, NULL);
}
