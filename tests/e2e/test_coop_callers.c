// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Callers of a cooperative limit (unit request, weightBy/classBy caller):
 * two kthrottled nodes on one Redis (each its own pin dir on this test's
 * private bpffs, as in test_strict_lib) share limit "api", max 100/s,
 * burst 10, divided by demand. A worker process on each node opens the
 * limit as "api/CALLER" through libkthrottle and calls kthrottle_acquire
 * as fast as it is admitted. What it proves:
 *   - every caller the config names, and the plain "api", is a member on
 *     each node (6 here); one not called on its node yet is dormant and
 *     holds nothing, one called and then idle keeps the floor, a tenth of
 *     an equal share (max / 6 / 10);
 *   - weights {prod: 3, batch: 1}: with both flooding, prod on node 0 gets
 *     75/s and batch on node 1 25/s (within 6/s each, and prod's part 75%
 *     +- 3, over the last 2 s of 4); once prod stops, batch gets all but
 *     prod's floor (>= 95% of max over its last 2 s); every 1 s window of
 *     the two together stays within max + burst; status shows the callers
 *     as members with their weights;
 *   - waking: then the same callers on the other nodes, dormant there, are
 *     first admitted within 2 s (printed: the first call of a caller on a
 *     node waits for its node's heartbeat to ask for it), split 75/25
 *     again in their second second, every window within max + burst;
 *   - classes [critical, batch floor 10%]: with both flooding, critical
 *     gets max - floor and batch its floor (within 6/s each), every 1 s
 *     window within max + burst;
 *   - a caller the config does not name is no limit: -ENOENT, as an
 *     unknown limit; the plain "api" is a member of its own;
 *   - kill -9 of prod's node while both flood: prod's process keeps
 *     charging its pinned bucket, at its fallback once the lease ends;
 *     batch takes the rest (the node's dormant members hold no fallback);
 *     every window within max + burst;
 *   - a reload adds a caller (it opens; an open caller keeps its entry),
 *     removes one (its handles answer -ESTALE, it no longer opens), and a
 *     bad caller name is refused in one line, changing nothing; a
 *     restart keeps a called caller's entry, so it is not dormant again;
 *   - the Python decorator, @kthrottle.throttle("api/prod") on node 0 and
 *     "api/batch" on node 1: 3:1 again, prod's part 75% +- 3.
 * Skipped without root or redis-server (the Python test: without python3
 * -m venv and Debian's wheels). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "kt_clusterfx.h"
#include "kt_daemonfx.h"
#include "kt_libfx.h"
#include "ktest.h"
#include "kthrottle_client.h"
#include "redis_proc.h"

#define NODES 2
#define LIMIT "api"
#define PREFIX "ktcallers"
#define MAX_RATE 100
#define BURST 10
#define TOL 6.0           /* per second, on a measured rate */
#define MEMBERS 6         /* each node: "api", and its two callers */
#define IDLE_FLOOR (MAX_RATE / (double)MEMBERS / 10) /* what a called, idle member keeps */
#define MAX_TIMES 4096    /* admissions a worker reports, at most */

static struct fixture {
	char mnt[64]; /* our bpffs */
	int metrics_port[NODES];
	struct rp_proc rp;
	struct ktest_daemon d[NODES];
	bool up[NODES];
	pid_t kids[NODES];
	int kfd[NODES];
} fx;

static const char *skip_why;

static int group_setup(void **state)
{
	(void)state;
	memset(&fx, 0, sizeof(fx));
	for (int w = 0; w < NODES; w++)
		fx.kfd[w] = -1;
	return kt_libfx_setup("kt-callers", fx.mnt, sizeof(fx.mnt), &fx.rp, &skip_why);
}

static int group_teardown(void **state)
{
	(void)state;
	kt_libfx_teardown(fx.mnt, &fx.rp);
	return 0;
}

/* After each test: the workers it started, the nodes, the pool's keys
 * (the next test starts from an empty store). */
static int teardown(void **state)
{
	(void)state;
	for (int w = 0; w < NODES; w++) {
		if (fx.kids[w] > 0)
			ktest_kill_wait(&fx.kids[w]);
		fx.kids[w] = 0;
		if (fx.kfd[w] >= 0)
			close(fx.kfd[w]);
		fx.kfd[w] = -1;
	}
	for (int i = 0; i < NODES; i++) {
		if (fx.up[i])
			ktest_daemon_cleanup(&fx.d[i]);
		fx.up[i] = false;
	}
	if (fx.rp.pid) {
		redisReply *r = rp_command(&fx.rp, "FLUSHALL");

		if (r)
			freeReplyObject(r);
	}
	return 0;
}

#define NEED_ENV() KTEST_SKIP_IF(skip_why)

/* Node i's config: limit "api" with its callers from `callers` (YAML put
 * in the limit's mapping), written (not started, not reloaded). */
static void node_config(int i, const char *callers)
{
	char body[1024];

	snprintf(body, sizeof(body),
		 "node: callers%d\n"
		 "metrics: 127.0.0.1:%d\n"
		 "tickInterval: 50ms\n"
		 "store:\n"
		 "  heartbeat: 200ms\n"
		 "  redisStore: {mode: single, url: \"redis://127.0.0.1:%d/0\", keyPrefix: " PREFIX "}\n"
		 "limits:\n"
		 "  - name: " LIMIT "\n"
		 "    unit: request\n"
		 "    share: demand\n"
		 "    burst: %d\n"
		 "%s"
		 "    rateLimit: {max: %d}\n",
		 i, fx.metrics_port[i], fx.rp.port, BURST, callers, MAX_RATE);
	assert_int_equal(ktest_daemon_config(&fx.d[i], body), 0);
}

/* The two nodes on limit "api" (node_config), started. */
static void nodes_up(const char *callers)
{
	for (int i = 0; i < NODES; i++) {
		assert_int_equal(ktest_daemon_init(&fx.d[i]), 0);
		fx.up[i] = true;
		snprintf(fx.d[i].pin_dir, sizeof(fx.d[i].pin_dir), "%s/kt%d", fx.mnt, i);
		fx.metrics_port[i] = ktest_free_port(SOCK_STREAM);
		assert_true(fx.metrics_port[i] > 0);
		node_config(i, callers);
		assert_int_equal(ktest_daemon_start_logged(&fx.d[i]), 0);
		/* searchable by the workers, still writable only by root */
		assert_int_equal(chmod(fx.d[i].pin_dir, 0711), 0);
	}
}

/* Node 0's config with weightBy caller and `weights` (a flow mapping),
 * reloaded: its answer must hold `want`, and be one line. */
static void reload_weights(const char *weights, const char *want)
{
	char callers[256], *out;

	snprintf(callers, sizeof(callers), "    weightBy: caller\n    weights: %s\n", weights);
	node_config(0, callers);
	out = ktest_daemon_cmd(&fx.d[0], "reload");
	assert_non_null(out);
	print_message("reload to weights %s: %s", weights, out);
	assert_non_null(strstr(out, want));
	assert_true(!strchr(out, '\n') || !strchr(out, '\n')[1]);
	free(out);
}

/* A worker process: opens `name` on `node`'s pin dir, waits for start,
 * then calls kthrottle_acquire (timeout 100 ms, never past end) until end,
 * writing the CLOCK_BOOTTIME time of each admission to fd. Exit 0, or
 * which step failed. */
static void worker(int node, const char *name, uint64_t start, uint64_t end, int fd)
{
	struct kthrottle *h = NULL;
	int r, n = 0;

	setenv(KTHROTTLE_PIN_DIR_ENV, fx.d[node].pin_dir, 1);
	if (kthrottle_open(name, &h)) {
		fprintf(stderr, "worker %s on node %d: open: %s\n", name, node, kthrottle_last_error());
		_exit(10);
	}
	kt_libfx_sleep_until(start);
	while (n < MAX_TIMES) {
		uint64_t now = kt_libfx_boot_ns(), left;

		if (now >= end)
			break;
		left = end - now;
		r = kthrottle_acquire(h, 1, left < 100000000ull ? left : 100000000ull);
		if (r < 0) {
			fprintf(stderr, "worker %s: acquire %d: %s\n", name, r, kthrottle_last_error());
			_exit(11);
		}
		if (r == 1) {
			uint64_t t = kt_libfx_boot_ns();

			if (write(fd, &t, sizeof(t)) != sizeof(t))
				_exit(12);
			n++;
		}
	}
	kthrottle_close(h);
	_exit(0);
}

struct run {
	uint64_t t[MAX_TIMES];
	int n;
};

/* Workers w = 0..NODES-1 as names[w] on node w, from start for secs[w]
 * seconds; their admission times into runs[w]. A worker's pipe holds
 * ~1,000 records, so the parent reads as they come. */
static void run_workers(const char *const names[NODES], const double secs[NODES], uint64_t start,
			struct run runs[NODES])
{
	uint64_t last_end = 0;

	for (int w = 0; w < NODES; w++) {
		uint64_t end = start + (uint64_t)(secs[w] * 1e9);

		runs[w].n = 0;
		if (end > last_end)
			last_end = end;
		fx.kids[w] = kt_clusterfx_fork(&fx.kfd[w]);
		if (fx.kids[w] == 0)
			worker(w, names[w], start, end, fx.kfd[w]);
		assert_int_equal(fcntl(fx.kfd[w], F_SETFL, O_NONBLOCK), 0);
	}
	for (int open = NODES; open > 0 && kt_libfx_boot_ns() < last_end + 3000000000ull;) {
		open = 0;
		for (int w = 0; w < NODES; w++) {
			uint64_t buf[64];
			ssize_t k;

			if (fx.kfd[w] < 0)
				continue;
			k = read(fx.kfd[w], buf, sizeof(buf));
			if (k == 0) {
				close(fx.kfd[w]);
				fx.kfd[w] = -1;
				continue;
			}
			open++;
			if (k < 0)
				continue; /* EAGAIN: nothing yet */
			assert_int_equal(k % (ssize_t)sizeof(uint64_t), 0);
			for (ssize_t i = 0; i < k / (ssize_t)sizeof(uint64_t) && runs[w].n < MAX_TIMES; i++)
				runs[w].t[runs[w].n++] = buf[i];
		}
		ktest_sleep_ms(10);
	}
	for (int w = 0; w < NODES; w++) {
		int status = -1;

		assert_true(fx.kfd[w] < 0); /* it ended within its bound */
		assert_int_equal(waitpid(fx.kids[w], &status, 0), fx.kids[w]);
		fx.kids[w] = 0;
		if (!WIFEXITED(status) || WEXITSTATUS(status))
			print_message("worker %s: status 0x%x\n", names[w], status);
		assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
}

/* Admissions of r in [from, to) seconds after start, per second. */
static double rate_in(const struct run *r, uint64_t start, double from, double to)
{
	uint64_t a = start + (uint64_t)(from * 1e9), b = start + (uint64_t)(to * 1e9);
	int n = 0;

	for (int i = 0; i < r->n; i++)
		n += r->t[i] >= a && r->t[i] < b;
	return n / (to - from);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The most admissions of all runs together in any 1 s window (printed
 * with where it ends, from start). */
static int worst_window(const struct run runs[NODES], uint64_t start)
{
	static uint64_t all[NODES * MAX_TIMES];
	int n = 0, most = 0;
	uint64_t at = start;

	for (int w = 0; w < NODES; w++)
		for (int i = 0; i < runs[w].n; i++)
			all[n++] = runs[w].t[i];
	qsort(all, (size_t)n, sizeof(*all), cmp_u64);
	for (int i = 0, j = 0; i < n; i++) {
		while (all[i] - all[j] >= 1000000000ull)
			j++;
		if (i - j + 1 > most) {
			most = i - j + 1;
			at = all[i];
		}
	}
	print_message("worst 1 s window: %d, ending %.3f s after start\n", most, (at - start) / 1e9);
	return most;
}

/* Prints the member lines of node i's text status. */
static void print_members(int i)
{
	char *out = ktest_daemon_cmd(&fx.d[i], "status");

	for (char *line = out ? strtok(out, "\n") : NULL; line; line = strtok(NULL, "\n"))
		if (strstr(line, "member ") || strstr(line, "class"))
			print_message("node %d: %s\n", i, line);
	free(out);
}

/* The member `path` of node i's status json: 1 dormant, 0 not, -1 not found. */
static int member_dormant(int i, const char *path)
{
	char *out = ktest_daemon_cmd(&fx.d[i], "status json"), key[96], *at, *end;
	int r = -1;

	snprintf(key, sizeof(key), "\"path\":\"%s\"", path);
	if (out && (at = strstr(out, key)) && (end = strchr(at, '}'))) {
		*end = 0;
		r = strstr(at, "\"dormant\":true") ? 1 : strstr(at, "\"dormant\":false") ? 0 : -1;
	}
	free(out);
	return r;
}

/* Opens name on node 0's pin dir: its return. */
static int try_open(const char *name)
{
	struct kthrottle *h = NULL;
	int r;

	setenv(KTHROTTLE_PIN_DIR_ENV, fx.d[0].pin_dir, 1);
	r = kthrottle_open(name, &h);
	if (!r)
		kthrottle_close(h);
	return r;
}

static void test_weights(void **state)
{
	static struct run runs[NODES];
	const char *const names[NODES] = { LIMIT "/prod", LIMIT "/batch" };
	const double secs[NODES] = { 4, 8 };
	uint64_t start;
	char *out;

	(void)state;
	NEED_ENV();
	nodes_up("    weightBy: caller\n"
		 "    weights: {prod: 3, batch: 1}\n");
	/* the config's callers and the plain name open; others do not */
	assert_int_equal(try_open(LIMIT "/prod"), 0);
	assert_int_equal(try_open(LIMIT), 0);
	assert_int_equal(try_open(LIMIT "/nobody"), -ENOENT);
	print_message("open(\"" LIMIT "/nobody\"): -ENOENT: %s\n", kthrottle_last_error());

	start = kt_libfx_boot_ns() + 300000000ull; /* both handles open by then */
	run_workers(names, secs, start, runs);
	double prod = rate_in(&runs[0], start, 2, 4), batch = rate_in(&runs[1], start, 2, 4);
	double alone = rate_in(&runs[1], start, 6, 8);
	int most = worst_window(runs, start);

	for (int w = 0; w < NODES; w++)
		kt_libfx_print_bins(names[w], runs[w].t, runs[w].n, start, 0.1, 30);
	/* the 4 others are dormant while both flood; prod keeps its floor after */
	const double busy = MAX_RATE, lone = MAX_RATE - IDLE_FLOOR;

	for (int i = 0; i < NODES; i++)
		print_members(i);
	print_message("both flooding, s 2..4: prod (weight 3) %.1f/s, batch (weight 1) %.1f/s "
		      "(want %.1f and %.1f +- %.0f), prod's part %.1f%% (want 75 +- 3)\n",
		      prod, batch, busy * 0.75, busy * 0.25, TOL, prod + batch > 0 ? 100 * prod / (prod + batch) : 0);
	print_message("batch alone, s 6..8: %.1f/s (want >= %.1f); worst 1 s window of both: %d "
		      "(max + burst %d)\n",
		      alone, lone * 0.95, most, MAX_RATE + BURST);
	/* status names the callers while the pool remembers them */
	out = ktest_daemon_cmd(&fx.d[0], "status json");
	assert_non_null(out);
	assert_non_null(strstr(out, "\"weight_by\":\"caller\""));
	assert_non_null(strstr(out, "\"member_id\":\"callers0/request/prod\",\"path\":\"" LIMIT "/prod\""));
	assert_non_null(strstr(out, "\"member_id\":\"callers0/request\",\"path\":\"" LIMIT "\""));
	free(out);
	/* metrics: each caller a member, with its weight */
	char *page = NULL;
	assert_int_equal(ktest_http_get(fx.metrics_port[0], "/metrics", &page), 200);
	assert_non_null(strstr(page, "kthrottle_share{limit=\"" LIMIT "\",member=\"callers0/request/prod\"}"));
	assert_non_null(strstr(page, "kthrottle_weight{limit=\"" LIMIT "\",member=\"callers0/request/prod\"} 3\n"));
	assert_non_null(strstr(page, "kthrottle_demand{limit=\"" LIMIT "\",member=\"callers0/request/batch\"} 0\n"));
	free(page);
	/* batch on node 0 was never called there: dormant; prod was */
	assert_true(member_dormant(0, LIMIT "/batch") == 1);
	assert_true(member_dormant(0, LIMIT "/prod") == 0);
	out = ktest_daemon_cmd(&fx.d[1], "status");
	assert_non_null(out);
	assert_non_null(strstr(out, "(libkthrottle \"" LIMIT "/prod\")"));
	assert_non_null(strstr(strstr(out, "(libkthrottle \"" LIMIT "/prod\")"), "dormant (not called on this node yet"));
	assert_non_null(strstr(out, "(libkthrottle \"" LIMIT "/batch\")"));
	assert_non_null(strstr(out, "weight 1 (value)"));
	free(out);

	/* the busy ones' split: 3:1 within 3% */
	assert_true(prod + batch > 0 && fabs(prod / (prod + batch) - 0.75) <= 0.03);
	assert_true(prod >= busy * 0.75 - TOL && prod <= busy * 0.75 + TOL);
	assert_true(batch >= busy * 0.25 - TOL && batch <= busy * 0.25 + TOL);
	assert_true(alone >= lone * 0.95);
	assert_true(most <= MAX_RATE + BURST);

	/* waking: batch on node 0 and prod on node 1, dormant there */
	const char *const woken[NODES] = { LIMIT "/batch", LIMIT "/prod" };
	const double secs2[NODES] = { 3, 3 };
	double first[NODES];

	start = kt_libfx_boot_ns() + 100000000ull;
	run_workers(woken, secs2, start, runs);
	for (int w = 0; w < NODES; w++) {
		first[w] = runs[w].n ? (double)(runs[w].t[0] - start) / 1e6 : 1e9;
		print_message("%s on node %d (dormant there): first admitted %.0f ms after its first call\n",
			      woken[w], w, first[w]);
	}
	for (int w = 0; w < NODES; w++)
		kt_libfx_print_bins(woken[w], runs[w].t, runs[w].n, start, 0.2, 15);
	batch = rate_in(&runs[0], start, 2, 3);
	prod = rate_in(&runs[1], start, 2, 3);
	most = worst_window(runs, start);
	print_message("woken, s 2..3: prod %.1f/s, batch %.1f/s; worst 1 s window: %d\n", prod, batch, most);
	for (int w = 0; w < NODES; w++)
		assert_true(first[w] <= 2000);
	/* both nodes' earlier callers keep their floors now */
	assert_true(prod + batch > 0 && fabs(prod / (prod + batch) - 0.75) <= 0.05);
	assert_true(prod + batch >= (MAX_RATE - 2 * IDLE_FLOOR) * 0.9);
	assert_true(most <= MAX_RATE + BURST);
}

static void test_classes(void **state)
{
	static struct run runs[NODES];
	const char *const names[NODES] = { LIMIT "/critical", LIMIT "/batch" };
	const double secs[NODES] = { 5, 5 };
	uint64_t start;

	(void)state;
	NEED_ENV();
	nodes_up("    classBy: caller\n"
		 "    classes: [{name: critical}, {name: batch, floor: 10%}]\n");
	assert_int_equal(try_open(LIMIT "/critical"), 0);
	assert_int_equal(try_open(LIMIT "/prod"), -ENOENT);

	start = kt_libfx_boot_ns() + 300000000ull;
	run_workers(names, secs, start, runs);
	double crit = rate_in(&runs[0], start, 3, 5), batch = rate_in(&runs[1], start, 3, 5);
	int most = worst_window(runs, start);
	/* the other members are dormant: they hold nothing */
	const double floor = MAX_RATE * 0.1, want_batch = floor, want_crit = MAX_RATE - floor;

	for (int w = 0; w < NODES; w++)
		kt_libfx_print_bins(names[w], runs[w].t, runs[w].n, start, 0.1, 30);
	for (int i = 0; i < NODES; i++)
		print_members(i);
	print_message("both flooding, s 3..5: critical %.1f/s, batch (class floor %.0f) %.1f/s (want %.1f "
		      "and %.1f +- %.0f); worst 1 s window of both: %d (max + burst %d)\n",
		      crit, floor, batch, want_crit, want_batch, TOL, most, MAX_RATE + BURST);
	assert_true(crit >= want_crit - TOL && crit <= want_crit + TOL);
	assert_true(batch >= want_batch - TOL / 2 && batch <= want_batch + TOL / 2);
	assert_true(most <= MAX_RATE + BURST);
}

/* kill -9 of node 0's daemon while prod (there) and batch (node 1) flood:
 * the prod process keeps charging its pinned bucket, which runs at its
 * share until the lease ends, then at its fallback; once its members
 * lapse (staleAfter heartbeats) the store holds its fallback back (an
 * equal share, onStoreFailure's default; node 0's dormant members have
 * none) and batch takes the rest at node 1's next heartbeats. Every 1 s window of
 * the two stays within max + burst throughout. */
static void test_kill9(void **state)
{
	static struct run runs[NODES];
	const char *const names[NODES] = { LIMIT "/prod", LIMIT "/batch" };
	const double secs[NODES] = { 6, 6 }, kill_at = 2.5;
	uint64_t start;
	pid_t killer;
	int kfd = -1;

	(void)state;
	NEED_ENV();
	nodes_up("    weightBy: caller\n"
		 "    weights: {prod: 3, batch: 1}\n");
	start = kt_libfx_boot_ns() + 300000000ull;
	/* the kill from a child, at its time, while this process reads */
	killer = kt_clusterfx_fork(&kfd);
	if (killer == 0) {
		kt_libfx_sleep_until(start + (uint64_t)(kill_at * 1e9));
		_exit(kill(fx.d[0].pid, SIGKILL) ? 1 : 0);
	}
	run_workers(names, secs, start, runs);
	int status = -1;
	assert_int_equal(waitpid(killer, &status, 0), killer);
	close(kfd);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(ktest_daemon_signal_wait(&fx.d[0], SIGKILL), 128 + SIGKILL);

	for (int w = 0; w < NODES; w++)
		kt_libfx_print_bins(names[w], runs[w].t, runs[w].n, start, 0.5, 12);
	double before_p = rate_in(&runs[0], start, 1.5, 2.5), before_b = rate_in(&runs[1], start, 1.5, 2.5);
	double after_p = rate_in(&runs[0], start, 4.5, 6), after_b = rate_in(&runs[1], start, 4.5, 6);
	int most = worst_window(runs, start);

	print_message("before the kill (s 1.5..2.5): prod %.1f/s, batch %.1f/s; after (s 4.5..6): prod "
		      "(node 0 dead) %.1f/s, batch %.1f/s; worst 1 s window %d (max + burst %d)\n",
		      before_p, before_b, after_p, after_b, most, MAX_RATE + BURST);
	assert_true(fabs(before_p / (before_p + before_b) - 0.75) <= 0.05);
	assert_true(most <= MAX_RATE + BURST);
	/* the dead node's caller at its fallback (an equal share, max / 6);
	 * the store holds back that fallback only (node 0's dormant members'
	 * buckets have none), and batch has the rest */
	const double fallback = MAX_RATE / (double)MEMBERS, rest = MAX_RATE - fallback;

	print_message("want: prod at most its fallback %.1f/s, batch at least 90%% of %.1f/s\n", fallback, rest);
	assert_true(after_p <= fallback + 1);
	assert_true(after_b >= 0.9 * rest);
	assert_true(after_p + after_b <= MAX_RATE + 1);

	/* node 0's dormant batch, past the lease: closed, nothing held for it */
	struct kthrottle *h = NULL;
	uint64_t wait = 0;
	int admitted = 0;

	setenv(KTHROTTLE_PIN_DIR_ENV, fx.d[0].pin_dir, 1);
	assert_int_equal(kthrottle_open(LIMIT "/batch", &h), 0);
	for (int k = 0; k < 20; k++) {
		int r = kthrottle_try_acquire(h, 1, &wait);

		assert_true(r == 0 || r == 1);
		admitted += r;
		ktest_sleep_ms(10);
	}
	kthrottle_close(h);
	print_message("node 0's dormant batch after the kill: %d of 20 admitted over 200 ms\n", admitted);
	assert_int_equal(admitted, 0);
}

/* A reload adds a caller (it opens; an open one keeps its entry), removes
 * one (its handles answer -ESTALE, it no longer opens), and a bad caller
 * name is refused with one line and changes nothing. A restart keeps a
 * called caller's entry and counters: it is not dormant again. */
static void test_reload(void **state)
{
	struct kthrottle *prod = NULL, *batch = NULL;
	uint64_t wait;
	int r;

	(void)state;
	NEED_ENV();
	nodes_up("    weightBy: caller\n"
		 "    weights: {prod: 3}\n");
	setenv(KTHROTTLE_PIN_DIR_ENV, fx.d[0].pin_dir, 1);
	assert_int_equal(kthrottle_open(LIMIT "/prod", &prod), 0);
	assert_int_equal(kthrottle_open(LIMIT "/batch", &batch), -ENOENT);

	reload_weights("{prod: 3, batch: 1}", "ok: reloaded");
	assert_int_equal(kthrottle_open(LIMIT "/batch", &batch), 0);
	r = kthrottle_try_acquire(prod, 1, &wait);
	assert_true(r == 0 || r == 1); /* the same entry, not -ESTALE */
	assert_true(member_dormant(0, LIMIT "/batch") == 1);

	/* a bad caller name: refused, nothing changed */
	reload_weights("{prod: 3, \"b c\": 1}", "is no caller name");
	r = kthrottle_try_acquire(batch, 1, &wait);
	assert_true(r == 0 || r == 1);
	r = kthrottle_try_acquire(prod, 1, &wait);
	assert_true(r == 0 || r == 1);

	/* prod removed: its handle is stale, it no longer opens */
	reload_weights("{batch: 1}", "ok: reloaded");
	assert_int_equal(kthrottle_try_acquire(prod, 1, &wait), -ESTALE);
	kthrottle_close(prod);
	prod = NULL;
	assert_int_equal(kthrottle_open(LIMIT "/prod", &prod), -ENOENT);
	r = kthrottle_try_acquire(batch, 1, &wait);
	assert_true(r == 0 || r == 1);
	assert_true(member_dormant(0, LIMIT "/prod") == -1); /* no longer a member */

	/* a restart keeps the entry and its counters: batch, called, is
	 * not dormant again; its open handle stays valid */
	assert_int_equal(ktest_daemon_signal_wait(&fx.d[0], SIGTERM), 0);
	assert_int_equal(ktest_daemon_start_logged(&fx.d[0]), 0);
	r = kthrottle_try_acquire(batch, 1, &wait);
	assert_true(r == 0 || r == 1);
	kthrottle_close(batch);
	assert_true(member_dormant(0, LIMIT "/batch") == 0);
}

/* argv: limit start_boottime_s secs. Waits for start, then calls the
 * decorated function until start + secs (at most 2,000 calls), printing
 * "RUN <CLOCK_BOOTTIME s>" for each run, "DONE calls=.." last. */
static const char py_script[] =
	"import sys, time\n"
	"import kthrottle\n"
	"LIMIT, START, SECS = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])\n"
	"BOOT = time.CLOCK_BOOTTIME\n"
	"\n"
	"@kthrottle.throttle(LIMIT, max_delay=1.0)\n"
	"def work():\n"
	"    return time.clock_gettime(BOOT)\n"
	"\n"
	"kthrottle.Limit(LIMIT).close()  # the library, the daemon and the caller are there\n"
	"while time.clock_gettime(BOOT) < START:\n"
	"    time.sleep(0.001)\n"
	"calls = 0\n"
	"while calls < 2000 and time.clock_gettime(BOOT) < START + SECS:\n"
	"    calls += 1\n"
	"    t = work()\n"
	"    if t is not None:\n"
	"        print('RUN %.9f' % t, flush=True)\n"
	"print('DONE calls=%d' % calls, flush=True)\n";

/* The Python decorator, @kthrottle.throttle("api/prod") in a process on
 * node 0 and "api/batch" on node 1, both calling as fast as admitted for
 * 4 s: 3:1 (prod's part 75% +- 3) over the last 2 s. */
static void test_python_callers(void **state)
{
	const char *const names[NODES] = { LIMIT "/prod", LIMIT "/batch" };
	const double secs = 4.0;
	char tmp[PATH_MAX], py[PATH_MAX], script[PATH_MAX], start_s[32], secs_s[16];
	static char out[NODES][65536];
	static struct run runs[NODES];
	char *outs[NODES];
	size_t len[NODES] = { 0 };
	uint64_t start;
	const char *why;

	(void)state;
	NEED_ENV();
	assert_int_equal(ktest_tmpdir(tmp, sizeof(tmp)), 0);
	why = kt_libfx_pyenv(tmp, py, sizeof(py));
	snprintf(script, sizeof(script), "%s/callers.py", tmp);
	if (!why)
		assert_int_equal(ktest_write_file(script, py_script), 0);
	if (why) {
		ktest_rmtree(tmp);
		print_message("skipped: %s\n", why);
		skip();
	}

	nodes_up("    weightBy: caller\n"
		 "    weights: {prod: 3, batch: 1}\n");
	ktest_asan_preload(); /* for the python processes: after venv and pip */
	start = kt_libfx_boot_ns() + 2000000000ull; /* interpreters and module loaded by then */
	snprintf(start_s, sizeof(start_s), "%.9f", start / 1e9);
	snprintf(secs_s, sizeof(secs_s), "%g", secs);
	for (int i = 0; i < NODES; i++) {
		fx.kids[i] = kt_libfx_python(py, script, (const char *[]){ names[i], start_s, secs_s, NULL },
					     fx.d[i].pin_dir, &fx.kfd[i]);
		outs[i] = out[i];
	}
	/* read both until EOF, bounded: the window, max_delay, slack */
	int open_fds = kt_libfx_read_all(fx.kfd, NODES, outs, len, sizeof(out[0]),
					 start + (uint64_t)(secs * 1e9) + 20000000000ull);
	ktest_rmtree(tmp);
	assert_int_equal(open_fds, 0);
	for (int i = 0; i < NODES; i++) {
		int status = -1;

		assert_int_equal(waitpid(fx.kids[i], &status, 0), fx.kids[i]);
		fx.kids[i] = 0;
		if (!WIFEXITED(status) || WEXITSTATUS(status) || !strstr(out[i], "DONE calls="))
			print_message("python %s: status 0x%x\n%s", names[i], status, out[i]);
		assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		assert_non_null(strstr(out[i], "DONE calls="));
		runs[i].n = 0;
		for (char *l = out[i]; (l = strstr(l, "RUN ")) && runs[i].n < MAX_TIMES; l += 4)
			runs[i].t[runs[i].n++] = (uint64_t)(strtod(l + 4, NULL) * 1e9 + 0.5);
	}
	double prod = rate_in(&runs[0], start, 2, 4), batch = rate_in(&runs[1], start, 2, 4);
	int most = worst_window(runs, start);

	print_message("python, both flooding, s 2..4: prod %.1f/s, batch %.1f/s, prod's part %.1f%% (want 75 "
		      "+- 3); worst 1 s window %d (max + burst %d)\n",
		      prod, batch, prod + batch > 0 ? 100 * prod / (prod + batch) : 0, most, MAX_RATE + BURST);
	assert_true(prod + batch > 0 && fabs(prod / (prod + batch) - 0.75) <= 0.03);
	assert_true(prod + batch >= MAX_RATE * 0.9);
	assert_true(most <= MAX_RATE + BURST);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_weights, teardown),
		cmocka_unit_test_teardown(test_classes, teardown),
		cmocka_unit_test_teardown(test_kill9, teardown),
		cmocka_unit_test_teardown(test_reload, teardown),
		cmocka_unit_test_teardown(test_python_callers, teardown),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
