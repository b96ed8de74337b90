// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Fault matrix for the pool's promise: over every one-second window, the
 * total a limit admits across all nodes is at most max + the pool's burst (a
 * join may add one member's share for one heartbeat).
 *
 * Cases (each a cmocka test, 3 nodes agreed through one redis-server unless
 * said otherwise):
 *   a. test_steady_state       no fault, 5 s (sanity)
 *   b. test_kill9              kill -9 of n2 while its pod keeps sending, 8 s
 *   c. test_sigterm_restart    SIGTERM n2, restart it 1 s later, 8 s
 *   d. test_frozen_store_link  n2's relay to Redis frozen for 8 s; n0 and n1
 *                              still reach Redis
 *   e. test_join               n3 joins the agreed 3-node pool (allowance:
 *                              one share, max/4, for one heartbeat)
 *   f. test_wrong_password     Redis with requirepass; n2 is given a wrong
 *                              password, n0 and n1 the right one, 5 s
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
 * About 60 s in all. KT_TEST_FILTER=test_join runs one case. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "arrivals.h"
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
	struct relay relay[NODES];
	struct rp_proc rp;
	struct arrivals arr;
	pid_t sender[NODES];
	int sender_fd[NODES];
	const char *redis_pw;   /* what redis-server requires; NULL: nothing */
} fx;

/* ---- nodes ---- */

static void dump_node(int i)
{
	char *log, *st;
	size_t n;

	if (!fx.d[i].dir[0])
		return;
	log = ktest_slurp(fx.d[i].log);
	n = strlen(log);
	print_message("--- n%d log (tail):\n%s\n", i, log + (n > 2000 ? n - 2000 : 0));
	free(log);
	st = fx.d[i].pid > 0 ? ktest_daemon_cmd(&fx.d[i], "status json") : NULL;
	print_message("--- n%d status: %s\n", i, st ? st : "(not running)");
	free(st);
}

struct lst {
	char phase[24], state[16];
	double size, live, bucket_rate;
};

static bool lstatus(int i, struct lst *s)
{
	char *js;
	bool ok;

	memset(s, 0, sizeof(*s));
	if (fx.d[i].pid <= 0)
		return false;
	js = ktest_daemon_cmd(&fx.d[i], "status json");
	if (!js)
		return false;
	ok = ktest_json_limit_str(js, LIMIT, "phase", s->phase, sizeof(s->phase)) &&
	     ktest_json_limit_str(js, LIMIT, "state", s->state, sizeof(s->state)) &&
	     ktest_json_limit_num(js, LIMIT, "size", &s->size) &&
	     ktest_json_limit_num(js, LIMIT, "live", &s->live) &&
	     ktest_json_limit_num(js, LIMIT, "bucket_rate", &s->bucket_rate);
	free(js);
	return ok;
}

/* One line per node: what each believes at the end of a case. */
static void print_nodes(const char *when)
{
	for (int i = 0; i < NODES; i++) {
		struct lst s;

		if (!fx.d[i].dir[0])
			continue;
		if (lstatus(i, &s))
			print_message("%s: n%d phase %s store %s size %.0f live %.0f bucket_rate %.6g\n",
				      when, i, s.phase, s.state, s.size, s.live, s.bucket_rate);
		else
			print_message("%s: n%d not running or no status\n", when, i);
	}
}

/* Node i: its cgroup, its relay to Redis, its config; `pw` goes into its
 * Redis URL (NULL: none). Not started. */
static void prepare_node(int i, const char *pw)
{
	char name[16], url[160], *body;

	snprintf(name, sizeof(name), "flt%d", i);
	assert_int_equal(ktest_cgroup_create(name, fx.cg[i], sizeof(fx.cg[i])), 0);
	assert_int_equal(relay_start(&fx.relay[i], fx.rp.port), 0);
	snprintf(url, sizeof(url), "redis://%s%s%s127.0.0.1:%d/0", pw ? ":" : "", pw ? pw : "",
		 pw ? "@" : "", fx.relay[i].port);
	assert_true(asprintf(&body,
			     "node: n%d\n"
			     "tickInterval: %dms\n"
			     "store:\n"
			     "  redisStore: {mode: single, url: \"%s\", keyPrefix: " PREFIX "}\n"
			     "  heartbeat: %dms\n"
			     "  staleAfter: %d\n"
			     "  validFor: %dms\n"
			     "  onStoreFailure: conservative\n"
			     "limits:\n"
			     "  - name: " LIMIT "\n"
			     "    cgroups: [%s]\n"
			     "    match: {cidrs: [127.0.0.1/32], ports: %d, protocol: udp}\n"
			     "    unit: datagram\n"
			     "    scope: pod\n"
			     "    burst: %g\n"
			     "    rateLimit: {max: %g, min: %g}\n",
			     i, TICK_MS, url, HB_MS, STALE, VALID_MS, fx.cg[i], fx.arr.port, BURST, MAX,
			     MAX) > 0);
	assert_int_equal(ktest_daemon_init(&fx.d[i]), 0);
	assert_int_equal(ktest_daemon_config(&fx.d[i], body), 0);
	free(body);
}

static void run_node(int i)
{
	int code = -1;

	if (ktest_daemon_start(&fx.d[i], 5000, &code) != 0) {
		print_message("kthrottled n%d did not start (exit %d)\n", i, code);
		dump_node(i);
		fail();
	}
}

/* Polls until nodes[] all show the limit agreed at `size`, store up. */
static void wait_agreed(const int *nodes, int n, int size, int timeout_ms)
{
	uint64_t t0 = ktest_now_ns();

	for (;;) {
		int good = 0;

		for (int k = 0; k < n; k++) {
			struct lst s;

			if (lstatus(nodes[k], &s) && !strcmp(s.phase, "agreed") &&
			    !strcmp(s.state, "up") && s.size == size && s.live == size)
				good++;
		}
		if (good == n)
			return;
		if (ktest_now_ns() - t0 > (uint64_t)timeout_ms * 1000000ull) {
			print_message("no agreement on size %d within %d ms\n", size, timeout_ms);
			for (int k = 0; k < n; k++)
				dump_node(nodes[k]);
			fail();
		}
		ktest_sleep_ms(20);
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
	for (int i = 0; i < n; i++) {
		prepare_node(i, pw);
		run_node(i);
	}
	/* n sequential joins, each agreed within 2 heartbeats; generous */
	wait_agreed(all, n, n, 5000);
}

/* ---- senders ---- */

struct send_report {
	unsigned long long ok, refused, errors;
};

/* ~SEND_PER_S datagrams/s from inside cgroup `cg` for `secs`, on absolute
 * deadlines (sleeping, not spinning: 4 senders, 4 daemons and Redis share 2
 * cores). A sender that falls behind does not catch up in a rush. Reports
 * through `out`. */
static void sender(const char *cg, int port, double secs, int out)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	const long step_ns = 1000000000L / SEND_PER_S;
	const unsigned long long max_ops = (unsigned long long)(secs * SEND_PER_S * 2) + 10;
	struct send_report r = { 0 };
	struct timespec next, now;
	uint64_t end;
	int fd;

	/* join first: the cgroup programs see the cgroup a socket was made in */
	if (ktest_cgroup_join(cg) != 0)
		_exit(3);
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		_exit(4);
	end = ktest_now_ns() + (uint64_t)(secs * 1e9);
	clock_gettime(CLOCK_MONOTONIC, &next);
	for (unsigned long long i = 0; i < max_ops && ktest_now_ns() < end; i++) {
		if (sendto(fd, "x", 1, 0, (struct sockaddr *)&sa, sizeof(sa)) >= 0)
			r.ok++;
		else if (errno == EBUSY)
			r.refused++;
		else
			r.errors++;
		next.tv_nsec += step_ns;
		if (next.tv_nsec >= 1000000000L) {
			next.tv_sec++;
			next.tv_nsec -= 1000000000L;
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec > next.tv_sec + 1 ||
		    (now.tv_sec - next.tv_sec) * 1000000000L + (now.tv_nsec - next.tv_nsec) > 50000000L)
			next = now; /* > 50 ms behind: resume from now */
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
	}
	_exit(write(out, &r, sizeof(r)) == sizeof(r) ? 0 : 5);
}

static void sender_start(int i, double secs)
{
	pid_t parent = getpid();
	int p[2];

	assert_true(fx.sender[i] <= 0);
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	fflush(NULL);
	fx.sender[i] = fork();
	assert_true(fx.sender[i] >= 0);
	if (fx.sender[i] == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(126);
		close(p[0]);
		sender(fx.cg[i], fx.arr.port, secs, p[1]);
	}
	close(p[1]);
	fx.sender_fd[i] = p[0];
}

/* Waits for every running sender; sum of what they were told was sent. */
static unsigned long long senders_wait(void)
{
	unsigned long long ok = 0;

	for (int i = 0; i < NODES; i++) {
		struct send_report r = { 0 };
		ssize_t n;
		int status = -1;

		if (fx.sender[i] <= 0)
			continue;
		n = read(fx.sender_fd[i], &r, sizeof(r)); /* the sender's own bound ends it */
		close(fx.sender_fd[i]);
		fx.sender_fd[i] = -1;
		assert_int_equal(waitpid(fx.sender[i], &status, 0), fx.sender[i]);
		fx.sender[i] = -1;
		if (n != (ssize_t)sizeof(r) || !WIFEXITED(status) || WEXITSTATUS(status)) {
			print_message("sender in n%d's cgroup failed (status 0x%x)\n", i, status);
			fail();
		}
		print_message("sender n%d: ok=%llu refused=%llu errors=%llu\n", i, r.ok, r.refused,
			      r.errors);
		assert_int_equal(r.errors, 0);
		ok += r.ok;
	}
	return ok;
}

/* ---- the promise ---- */

/* Every one-second window of [from_s, to_s) (arrivals time) must hold at
 * most `bound`. Prints the seconds, the worst window and when it started
 * (also relative to `fault_s`, < 0: none), after checking the measurement
 * itself is whole. */
static void check_windows(const char *name, double from_s, double to_s, double fault_s,
			  unsigned long long sent_ok, double bound)
{
	unsigned long worst;
	double at;

	ktest_sleep_ms(50); /* the receiver drains what is queued */
	arrivals_print(&fx.arr, name, from_s, to_s);
	worst = arrivals_worst_window(&fx.arr, from_s, to_s, &at);
	if (fault_s >= 0)
		print_message("%s: worst one-second window %lu (bound %.0f) starting at t=%.1fs, "
			      "%+.2fs from the start of sending, %+.2fs from the fault\n",
			      name, worst, bound, at, at - from_s, at - fault_s);
	else
		print_message("%s: worst one-second window %lu (bound %.0f) starting at t=%.1fs, "
			      "%+.2fs from the start of sending\n", name, worst, bound, at, at - from_s);
	print_message("%s: arrived %llu, senders sent %llu, receiver drops %llu\n", name,
		      arrivals_total(&fx.arr), sent_ok, arrivals_drops(&fx.arr));
	print_nodes(name);
	/* a receiver that missed datagrams would hide excess */
	assert_int_equal(arrivals_drops(&fx.arr), 0);
	assert_int_equal(arrivals_total(&fx.arr), sent_ok);
	if ((double)worst > bound) {
		print_message("%s: PROMISE BROKEN: %lu admitted in the second from t=%.1fs, bound "
			      "%.0f\n", name, worst, at, bound);
		for (int i = 0; i < NODES; i++)
			if (fx.d[i].dir[0])
				dump_node(i);
	}
	assert_true((double)worst <= bound);
}

/* ---- fixtures ---- */

static int setup(void **state)
{
	(void)state;
	memset(&fx, 0, sizeof(fx));
	for (int i = 0; i < NODES; i++) {
		fx.d[i].pid = -1;
		fx.sender[i] = -1;
		fx.sender_fd[i] = -1;
		fx.relay[i].ctl = -1;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < NODES; i++) {
		ktest_kill_wait(&fx.sender[i]);
		if (fx.sender_fd[i] >= 0)
			close(fx.sender_fd[i]);
	}
	for (int i = 0; i < NODES; i++)
		if (fx.d[i].dir[0])
			ktest_daemon_cleanup(&fx.d[i]);
	for (int i = 0; i < NODES; i++)
		relay_stop(&fx.relay[i]);
	rp_stop(&fx.rp);
	arrivals_stop(&fx.arr);
	for (int i = 0; i < NODES; i++)
		if (fx.cg[i][0])
			ktest_cgroup_destroy(fx.cg[i]);
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
	const double secs = 5;
	double t0;
	unsigned long long ok;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_pool(3, NULL);
	t0 = arrivals_now_s(&fx.arr);
	for (int i = 0; i < 3; i++)
		sender_start(i, secs);
	ok = senders_wait();
	check_windows("steady", t0, t0 + secs, -1, ok, PROMISE);
}

/* b. kill -9 of n2 one second in; its pod keeps sending on whatever the
 * kernel still holds, while n0 and n1 prune it and take its share. */
static void test_kill9(void **state)
{
	const double pre = 1, post = 8;
	double t0;
	unsigned long long ok;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_pool(3, NULL);
	t0 = arrivals_now_s(&fx.arr);
	for (int i = 0; i < 3; i++)
		sender_start(i, pre + post);
	sleep_until(t0 + pre);
	print_message("kill -9 n2 at t=%.2fs\n", arrivals_now_s(&fx.arr));
	assert_int_equal(ktest_daemon_signal_wait(&fx.d[2], SIGKILL), 128 + SIGKILL);
	ok = senders_wait();
	check_windows("kill9", t0, t0 + pre + post, t0 + pre, ok, PROMISE);
}

/* c. SIGTERM n2 one second in (it leaves gracefully), start it again one
 * second later on the same config and pins; its pod sends throughout. */
static void test_sigterm_restart(void **state)
{
	const double pre = 1, post = 8;
	double t0;
	unsigned long long ok;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_pool(3, NULL);
	t0 = arrivals_now_s(&fx.arr);
	for (int i = 0; i < 3; i++)
		sender_start(i, pre + post);
	sleep_until(t0 + pre);
	print_message("SIGTERM n2 at t=%.2fs\n", arrivals_now_s(&fx.arr));
	assert_int_equal(ktest_daemon_signal_wait(&fx.d[2], SIGTERM), 0);
	sleep_until(t0 + pre + 1);
	print_message("restarting n2 at t=%.2fs\n", arrivals_now_s(&fx.arr));
	run_node(2);
	print_message("n2 answers again at t=%.2fs\n", arrivals_now_s(&fx.arr));
	ok = senders_wait();
	check_windows("sigterm", t0, t0 + pre + post, t0 + pre, ok, PROMISE);
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
	t0 = arrivals_now_s(&fx.arr);
	for (int i = 0; i < 3; i++)
		sender_start(i, pre + frozen);
	sleep_until(t0 + pre);
	print_message("freezing n2's relay at t=%.2fs\n", arrivals_now_s(&fx.arr));
	assert_int_equal(relay_freeze(&fx.relay[2]), 0);
	ok = senders_wait();
	print_message("thawing n2's relay at t=%.2fs\n", arrivals_now_s(&fx.arr));
	assert_int_equal(relay_thaw(&fx.relay[2]), 0);
	check_windows("frozen", t0, t0 + pre + frozen, t0 + pre, ok, PROMISE);
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
	t0 = arrivals_now_s(&fx.arr);
	for (int i = 0; i < 3; i++)
		sender_start(i, pre + post);
	sleep_until(t0 + pre);
	t_join = arrivals_now_s(&fx.arr);
	print_message("starting n3 at t=%.2fs\n", t_join);
	run_node(3);
	print_message("n3 answers at t=%.2fs\n", arrivals_now_s(&fx.arr));
	sender_start(3, t0 + pre + post - arrivals_now_s(&fx.arr));
	ok = senders_wait();
	check_windows("join", t0, t0 + pre + post, t_join, ok, bound);
}

/* f. Redis requires a password; n2 is configured with a wrong one (n0 and n1
 * with the right one): n2 never reaches the store. Its pod sends too. */
static void test_wrong_password(void **state)
{
	static const int good[] = { 0, 1 };
	const double secs = 5;
	double t0;
	unsigned long long ok;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_pool(2, PASSWORD);
	prepare_node(2, "kt-wrong-pw");
	run_node(2);
	ktest_sleep_ms(2 * HB_MS); /* n2 has tried the store */
	wait_agreed(good, 2, 2, 2000);
	t0 = arrivals_now_s(&fx.arr);
	for (int i = 0; i < 3; i++)
		sender_start(i, secs);
	ok = senders_wait();
	check_windows("wrongpw", t0, t0 + secs, -1, ok, PROMISE);
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
	};

	if (getenv("KT_TEST_FILTER"))
		cmocka_set_test_filter(getenv("KT_TEST_FILTER"));
	return cmocka_run_group_tests_name("e2e_faults", tests, NULL, NULL);
}
