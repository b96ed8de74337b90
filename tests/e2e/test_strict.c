// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Strict limits (rateLimit.strict) across three nodes on one Redis: every
 * admission is a permit from the store's Lua script, on the Redis clock.
 *
 * Three kthrottled "nodes" (each its own pin dir and config) with two member
 * cgroups each: six workers, one per cgroup, each hammering connect() to one
 * loopback TCP server (retry 1 ms after a refusal, bounded in count and
 * time). The server records when each connection arrives. What it proves:
 *   - spacing: consecutive arrivals are at least every - tolerance apart,
 *     tolerance = expireAfter + 5 ms (a permit may be used late within its
 *     window, and armed late by the store round trip; docs/strict.md);
 *     the total over 6 s at one per 300 ms is 20 +- 1; every
 *     worker got at least one permit;
 *   - maxReserved: Redis's own key, read back with TIME while six buckets
 *     contend, is never more than maxReserved + 1 permits ahead of now
 *     (the bound the script keeps), and the nodes report back-offs;
 *   - pessimistic (maxReserved 0): jittered back-off, no worker starves;
 *   - expiry: a permit not used within expireAfter is not usable later (a
 *     connect after its window is refused) and counts as wasted;
 *   - Redis stopped: once the permits issued before are over, nothing is
 *     admitted and status says the store is unreachable (reason closed);
 *     Redis back: permits resume.
 * Skipped without root or redis-server. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
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
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "kt_clusterfx.h"
#include "ktest.h"
#include "redis_proc.h"

#define NODES 3
#define PER_NODE 2
#define WORKERS (NODES * PER_NODE)
#define LIMIT "strict-api"
#define PREFIX "ktstr"
#define MAX_ARRIVALS 4096
#define TOL_EXTRA_MS 5.0 /* the store round trip and wakeups, on top of expireAfter */

struct report {
	unsigned long long ok, refused, errors;
};

static struct fixture {
	bool skip;
	struct rp_proc rp;
	struct ktest_daemon d[NODES];
	bool up[NODES];
	char cg[WORKERS][PATH_MAX];
	int lfd, port;
	pthread_t thr;
	bool thr_on;
	volatile bool stop;
	pthread_mutex_t mu;
	uint64_t at[MAX_ARRIVALS]; /* ktest_now_ns of each accepted connection */
	int n_at;
	pid_t worker[WORKERS];
	int wfd[WORKERS];
} fx;

static void *acceptor(void *arg)
{
	(void)arg;
	while (!fx.stop) {
		struct pollfd p = { .fd = fx.lfd, .events = POLLIN };
		int c;

		if (poll(&p, 1, 50) <= 0)
			continue;
		c = accept4(fx.lfd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			continue;
		uint64_t t = ktest_now_ns();

		pthread_mutex_lock(&fx.mu);
		if (fx.n_at < MAX_ARRIVALS)
			fx.at[fx.n_at++] = t;
		pthread_mutex_unlock(&fx.mu);
		close(c);
	}
	return NULL;
}

static int setup(void **state)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	const char *why = ktest_root_unavailable();

	(void)state;
	memset(&fx, 0, sizeof(fx));
	fx.lfd = -1;
	pthread_mutex_init(&fx.mu, NULL);
	if (why || !ktest_find_prog("redis-server")) {
		print_message("skipping: %s\n", why ? why : "no redis-server");
		fx.skip = true;
		return 0;
	}
	if (rp_start_master(&fx.rp, NULL) != 0)
		return -1;
	for (int w = 0; w < WORKERS; w++) {
		char name[32];

		snprintf(name, sizeof(name), "strict%d", w);
		if (ktest_cgroup_create(name, fx.cg[w], sizeof(fx.cg[w])) != 0)
			return -1;
	}
	fx.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fx.lfd < 0 || bind(fx.lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(fx.lfd, 512) < 0 || getsockname(fx.lfd, (struct sockaddr *)&sa, &sl) < 0)
		return -1;
	fx.port = ntohs(sa.sin_port);
	if (pthread_create(&fx.thr, NULL, acceptor, NULL) != 0)
		return -1;
	fx.thr_on = true;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < NODES; i++)
		ktest_daemon_cleanup(&fx.d[i]);
	for (int w = 0; w < WORKERS; w++)
		ktest_kill_wait(&fx.worker[w]);
	fx.stop = true;
	if (fx.thr_on)
		pthread_join(fx.thr, NULL);
	if (fx.lfd >= 0)
		close(fx.lfd);
	for (int w = 0; w < WORKERS; w++)
		if (fx.cg[w][0])
			ktest_cgroup_destroy(fx.cg[w]);
	if (fx.rp.pid)
		rp_stop(&fx.rp);
	rp_remove_tree(fx.rp.dir);
	return 0;
}

/* The three nodes on a strict limit, started. */
static void nodes_up(int every_ms, int max_reserved, int expire_ms)
{
	for (int i = 0; i < NODES; i++) {
		char *body;

		/* a test that failed midway left its nodes up (the teardown is
		 * the group's): their pins go before new ones are made */
		if (fx.up[i])
			ktest_daemon_cleanup(&fx.d[i]);
		fx.up[i] = false;
		assert_true(asprintf(&body,
				     "node: s%d\n"
				     "tickInterval: 50ms\n"
				     "store:\n"
				     "  redisStore: {mode: single, url: \"redis://127.0.0.1:%d/0\", keyPrefix: " PREFIX "}\n"
				     "limits:\n"
				     "  - name: " LIMIT "\n"
				     "    cgroups: [%s, %s]\n"
				     "    match: {cidrs: [127.0.0.1/32], ports: %d, protocol: tcp}\n"
				     "    unit: connection\n"
				     "    scope: pod\n"
				     "    rateLimit:\n"
				     "      strict: {every: %dms, maxReserved: %d, expireAfter: %dms}\n",
				     i, fx.rp.port, fx.cg[i * PER_NODE], fx.cg[i * PER_NODE + 1], fx.port,
				     every_ms, max_reserved, expire_ms) > 0);
		assert_int_equal(ktest_daemon_up(&fx.d[i], body), 0);
		fx.up[i] = true;
		free(body);
	}
	pthread_mutex_lock(&fx.mu);
	fx.n_at = 0;
	pthread_mutex_unlock(&fx.mu);
}

static void nodes_down(void)
{
	for (int i = 0; i < NODES; i++) {
		ktest_daemon_cleanup(&fx.d[i]);
		fx.up[i] = false;
	}
	/* the next test starts from an empty permit key */
	redisReply *r = rp_command(&fx.rp, "DEL %s", PREFIX ":strict:{" LIMIT "}");

	if (r)
		freeReplyObject(r);
}

/* A worker: connects to the server from its cgroup until `secs` are over
 * (a refusal: 1 ms and again), at most 50,000 attempts. */
static void worker(const char *cg, double secs, int out)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)fx.port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct report r = { 0 };
	uint64_t end = ktest_now_ns() + (uint64_t)(secs * 1e9);

	if (ktest_cgroup_join(cg) != 0)
		_exit(3);
	for (int i = 0; i < 50000 && ktest_now_ns() < end; i++) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

		if (fd < 0)
			_exit(4);
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			r.ok++;
		} else if (errno == EBUSY) {
			r.refused++;
			usleep(1000);
		} else {
			r.errors++;
			usleep(1000);
		}
		close(fd);
	}
	_exit(write(out, &r, sizeof(r)) == sizeof(r) ? 0 : 5);
}

static void workers_start(double secs)
{
	for (int w = 0; w < WORKERS; w++) {
		fx.worker[w] = kt_clusterfx_fork(&fx.wfd[w]);
		if (fx.worker[w] == 0)
			worker(fx.cg[w], secs, fx.wfd[w]);
	}
}

static void workers_wait(struct report r[WORKERS])
{
	for (int w = 0; w < WORKERS; w++) {
		int status = -1;

		memset(&r[w], 0, sizeof(r[w]));
		assert_int_equal(read(fx.wfd[w], &r[w], sizeof(r[w])), (ssize_t)sizeof(r[w]));
		close(fx.wfd[w]);
		assert_int_equal(waitpid(fx.worker[w], &status, 0), fx.worker[w]);
		fx.worker[w] = 0;
		assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		assert_int_equal(r[w].errors, 0);
	}
}

/* the last spacing measured, for the benchmark's row */
static double last_p50, last_p99, last_lo;
static int last_n;

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Arrivals in [from, to) (ktest_now_ns), sorted into out; the count. */
static int arrivals(uint64_t from, uint64_t to, uint64_t *out)
{
	int n = 0;

	pthread_mutex_lock(&fx.mu);
	for (int k = 0; k < fx.n_at; k++)
		if (fx.at[k] >= from && fx.at[k] < to)
			out[n++] = fx.at[k];
	pthread_mutex_unlock(&fx.mu);
	qsort(out, (size_t)n, sizeof(*out), cmp_u64);
	return n;
}

/* Smallest gap between consecutive arrivals, ms (1e9 if fewer than 2);
 * prints the gaps' spread against every_ms. */
static double min_gap_ms(const uint64_t *t, int n, double every_ms, const char *tag)
{
	struct kt_clusterfx_gaps g;

	if (kt_clusterfx_gaps(t, n, every_ms, &g)) {
		last_p50 = g.p50;
		last_p99 = g.p99;
		last_lo = g.lo;
		last_n = n;
		print_message("%s: %d arrivals, smallest gap %.2f ms (every %.0f), gap - every p50 %.2f ms "
			      "p99 %.2f ms\n",
			      tag, n, g.lo, every_ms, last_p50, last_p99);
	}
	return g.lo;
}

static char *status_json(int i)
{
	return ktest_daemon_cmd(&fx.d[i], "status json");
}

static double strict_num(const char *json, const char *field)
{
	double v = -1;

	if (!json || !ktest_json_limit_num(json, LIMIT, field, &v))
		return -1;
	return v;
}

static void test_spacing_three_nodes(void **state)
{
	const int every = 300, expire = 20;
	struct report r[WORKERS];
	uint64_t t[MAX_ARRIVALS], t0;
	double granted = 0, used = 0;
	int n;

	(void)state;
	if (fx.skip)
		skip();
	nodes_up(every, 6, expire);
	t0 = ktest_now_ns();
	workers_start(6.0);
	workers_wait(r);
	ktest_sleep_ms(100);
	n = arrivals(t0, ktest_now_ns(), t);
	double lo = min_gap_ms(t, n, every, "three nodes, 1 per 300 ms");
	for (int w = 0; w < WORKERS; w++) {
		print_message("worker %d (node s%d): %llu admitted, %llu refused\n", w, w / PER_NODE,
			      r[w].ok, r[w].refused);
		assert_true(r[w].ok >= 1); /* nobody starves */
	}
	for (int i = 0; i < NODES; i++) {
		char *js = status_json(i);

		assert_non_null(js);
		granted += strict_num(js, "granted");
		used += strict_num(js, "used");
		assert_true(strict_num(js, "store_ok") == 1);
		free(js);
	}
	print_message("permits granted %.0f, used %.0f\n", granted, used);
	assert_true(n >= 19 && n <= 21);
	assert_true(lo >= every - expire - TOL_EXTRA_MS);
	nodes_down();
}

static void test_max_reserved_bound(void **state)
{
	const int every = 200, maxr = 2, expire = 20;
	struct report r[WORKERS];
	uint64_t t[MAX_ARRIVALS], t0, end;
	long long worst_ahead = 0;
	double backoffs = 0;
	int samples = 0, n;

	(void)state;
	if (fx.skip)
		skip();
	nodes_up(every, maxr, expire);
	t0 = ktest_now_ns();
	workers_start(5.0);
	end = t0 + 5000000000ULL;
	while (ktest_now_ns() < end) {
		/* Redis's own state: the latest permit time against TIME */
		redisReply *tm = rp_command(&fx.rp, "TIME");
		redisReply *v = rp_command(&fx.rp, "GET %s", PREFIX ":strict:{" LIMIT "}");

		if (tm && tm->type == REDIS_REPLY_ARRAY && tm->elements == 2 && v &&
		    v->type == REDIS_REPLY_STRING) {
			long long now_us = atoll(tm->element[0]->str) * 1000000LL + atoll(tm->element[1]->str);
			long long ahead = atoll(v->str) - now_us;

			if (ahead > worst_ahead)
				worst_ahead = ahead;
			samples++;
		}
		if (tm)
			freeReplyObject(tm);
		if (v)
			freeReplyObject(v);
		ktest_sleep_ms(20);
	}
	workers_wait(r);
	n = arrivals(t0, ktest_now_ns(), t);
	double lo = min_gap_ms(t, n, every, "maxReserved 2, 1 per 200 ms");
	for (int i = 0; i < NODES; i++) {
		char *js = status_json(i);

		assert_non_null(js);
		backoffs += strict_num(js, "backoffs");
		free(js);
	}
	print_message("%d samples of the Redis key: at most %.1f ms (%.2f permits) ahead; back-offs %.0f\n",
		      samples, (double)worst_ahead / 1e3, (double)worst_ahead / (every * 1e3), backoffs);
	assert_true(samples > 50);
	/* a reservation is made only while fewer than maxReserved are ahead */
	assert_true(worst_ahead < (long long)(maxr + 1) * every * 1000);
	assert_true(backoffs > 0);
	assert_true(lo >= every - expire - TOL_EXTRA_MS);
	assert_true(n <= 5000 / every + 1);
	nodes_down();
}

static void test_pessimistic_no_starvation(void **state)
{
	const int every = 200, expire = 20;
	const double secs = 9; /* 45 admissions for 6 workers */
	struct report r[WORKERS];
	uint64_t t[MAX_ARRIVALS], t0;
	int n;

	(void)state;
	if (fx.skip)
		skip();
	nodes_up(every, 0, expire);
	t0 = ktest_now_ns();
	workers_start(secs);
	workers_wait(r);
	n = arrivals(t0, ktest_now_ns(), t);
	double lo = min_gap_ms(t, n, every, "pessimistic, 1 per 200 ms");
	for (int w = 0; w < WORKERS; w++) {
		print_message("worker %d: %llu admitted\n", w, r[w].ok);
		assert_true(r[w].ok >= 1);
	}
	assert_true(n <= secs * 1000 / every + 1);
	assert_true(n >= secs * 1000 / every / 3); /* back-offs cost some, not most */
	assert_true(lo >= every - expire - TOL_EXTRA_MS);
	nodes_down();
}

/* One connect from cgroup w; 0 admitted, else the errno. */
static int connect_once(int w)
{
	pid_t pid;
	int status = -1;

	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)fx.port),
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		int fd;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (ktest_cgroup_join(fx.cg[w]) != 0)
			_exit(200);
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			_exit(201);
		_exit(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 ? 0 : errno);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	return WEXITSTATUS(status);
}

static void test_expired_permit_not_used(void **state)
{
	const int every = 300, expire = 30;
	double armed = 0, due_ms = 0, wasted = 0;
	char *js;

	(void)state;
	if (fx.skip)
		skip();
	nodes_up(every, 4, expire);
	/* a refusal: the member wants a permit */
	assert_int_equal(connect_once(0), EBUSY);
	for (int k = 0; k < 100 && armed < 1; k++) {
		ktest_sleep_ms(10);
		js = status_json(0);
		armed = strict_num(js, "armed");
		due_ms = strict_num(js, "next_due_ms");
		free(js);
	}
	assert_true(armed >= 1);
	/* past its window: not usable any more */
	ktest_sleep_ms((int)(due_ms > 0 ? due_ms : 0) + expire + 40);
	assert_int_equal(connect_once(0), EBUSY);
	js = status_json(0);
	wasted = strict_num(js, "wasted");
	free(js);
	print_message("permit due in %.1f ms, window %d ms: a connect after it refused; wasted %.0f\n",
		      due_ms, expire, wasted);
	assert_true(wasted >= 1);
	/* that refusal asked for the next one, which is used in its window */
	for (int k = 0; k < 200; k++) {
		if (connect_once(0) == 0)
			break;
		assert_true(k < 199);
		ktest_sleep_ms(2);
	}
	nodes_down();
}

static void test_store_outage(void **state)
{
	const int every = 200, maxr = 2, expire = 20;
	struct report r[WORKERS];
	uint64_t t[MAX_ARRIVALS], t0;
	char reason[32] = "";
	int during, after, n;

	(void)state;
	if (fx.skip)
		skip();
	nodes_up(every, maxr, expire);
	t0 = ktest_now_ns();
	workers_start(10.0); /* 2 s, 4 s down, 4 s back */
	ktest_sleep_ms(2000);
	assert_int_equal(rp_signal(&fx.rp, SIGKILL), 0); /* the store gone at once */
	uint64_t stopped = ktest_now_ns();
	/* permits issued before the stop may still fall due: at most
	 * maxReserved + 1 every, plus their windows */
	uint64_t quiet = stopped + (uint64_t)((maxr + 1) * every + expire + 100) * 1000000ULL;
	ktest_sleep_ms(4000);
	bool down_seen = true;
	for (int i = 0; i < NODES; i++) {
		char *js = status_json(i);

		down_seen = down_seen && strict_num(js, "store_ok") == 0;
		if (i == 0 && js)
			ktest_json_limit_str(js, LIMIT, "reason", reason, sizeof(reason));
		free(js);
	}
	uint64_t back = ktest_now_ns();
	assert_int_equal(rp_restart(&fx.rp), 0);
	workers_wait(r);
	during = arrivals(quiet, back, t);
	after = arrivals(back + 1500000000ULL, ktest_now_ns(), t);
	n = arrivals(t0, ktest_now_ns(), t);
	double lo = min_gap_ms(t, n, every, "Redis stopped and started again");
	print_message("admitted while Redis was down (after the permits issued before): %d; "
		      "after it was back: %d; last throttle reason on s0: %s\n",
		      during, after, reason);
	assert_true(down_seen);
	assert_int_equal(during, 0);
	assert_string_equal(reason, "closed");
	assert_true(after >= 5);
	assert_true(lo >= every - expire - TOL_EXTRA_MS);
	nodes_down();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_spacing_three_nodes),
		cmocka_unit_test(test_max_reserved_bound),
		cmocka_unit_test(test_pessimistic_no_starvation),
		cmocka_unit_test(test_expired_permit_not_used),
		cmocka_unit_test(test_store_outage),
	};

	const struct CMUnitTest spacing[] = { cmocka_unit_test(test_spacing_three_nodes) };

	/* make bench: the spacing scenario alone, as a table row */
	if (getenv("KT_STRICT_BENCH")) {
		int rc = cmocka_run_group_tests(spacing, setup, teardown);

		printf("\n| strict spacing: 3 nodes x 2 workers, 1 per 300 ms, 6 s | admissions | smallest gap | "
		       "gap - every p50 | p99 | target p99 |\n|---|---|---|---|---|---|\n"
		       "| kernel path (connect), loopback Redis | %d | %.2f ms | %.2f ms | %.2f ms | <= 5 ms |\n",
		       last_n, last_lo, last_p50, last_p99);
		return rc;
	}
	return cmocka_run_group_tests(tests, setup, teardown);
}
