// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* kthrottle_connect (libkthrottle) against a real kthrottled: a connect()
 * refused by a connection limit is reported as KTHROTTLE_THROTTLED with the
 * limit's name, errno, retry-after and reason; a network error stays a
 * negative errno, even when the limit refuses with that same errno.
 *
 *  - no pin dir (no daemon): plain connect, 0 or -ECONNREFUSED;
 *  - a child in a member cgroup of two limits (5/s, burst 1, constant), one
 *    refusing with the default EBUSY, one with errno: ECONNREFUSED: of 8
 *    back-to-back connects to each listener the first is admitted (0) and
 *    the refused ones answer THROTTLED within 5 ms, with the limit's name,
 *    its errno, 0 < retry-after <= 200 ms (one token at 5/s) + 1 ms, reason
 *    share; a connect to a closed port no limit covers is -ECONNREFUSED,
 *    and so is one to a closed port that a third limit with errno:
 *    ECONNREFUSED covers but does not refuse (its counter is what tells);
 *    the cost of kthrottle_connect over connect is printed (100 each);
 *  - a process outside the member cgroup: all 8 connects succeed;
 *  - uid 65534 in the member cgroup cannot read the pins (0600, root's):
 *    plain connect, the refusals are -EBUSY.
 */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "kt_daemonfx.h"
#include "ktest.h"
#include "kthrottle_client.h"

#define TRIES 8
#define COST_N 100
#define RATE 5.0
#define TOKEN_NS (uint64_t)(1e9 / RATE)
#define SLACK_NS 1000000ULL   /* 1 ms */
/* a refusal answers at once, not after a SYN retry (1 s): within 5 ms
 * (1 ms failed a clean-clone run on a loaded 2-core VM at 1.175 ms) */
#define FAST_NS 5000000ULL

static struct fixture {
	struct ktest_daemon d;
	bool started;
	char cg[256];
	int lfd[2];     /* listeners: limit "conn-busy", limit "conn-refused" */
	int port[2];
	int closed_port; /* nothing listens, no limit covers it */
	int dead_port;   /* nothing listens, limit "conn-dead" (roomy, ECONNREFUSED) covers it */
} fx;

static int listener(int *port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    getsockname(fd, (struct sockaddr *)&sa, &l) || listen(fd, 64)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	*port = ntohs(sa.sin_port);
	return fd;
}

/* kthrottle_connect to 127.0.0.1:port on a new TCP socket; its answer, the
 * time it took. */
static int try_connect(int port, struct kthrottle_refusal *why, uint64_t *ns)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), r;
	uint64_t t0 = ktest_now_ns();

	if (fd < 0)
		return -errno;
	memset(why, 0, sizeof(*why));
	r = kthrottle_connect(fd, (struct sockaddr *)&sa, sizeof(sa), why);
	*ns = ktest_now_ns() - t0;
	close(fd);
	return r;
}

/* What a child saw: TRIES connects to each listener, one to the closed port. */
struct seen {
	int rc[2][TRIES];
	uint64_t ns[2][TRIES];
	struct kthrottle_refusal why[2][TRIES];
	int closed_rc;
	int dead_rc[COST_N];
	uint64_t lib_ns, plain_ns; /* total of COST_N calls each, to dead_port */
};

/* Forks a child that joins cgroup `cg` (NULL: stays where it is), becomes
 * uid `uid` if >= 0, connects and sends back what it saw. */
static void run_child_as(const char *cg, int uid, struct seen *s)
{
	int p[2], status;
	pid_t pid;

	assert_int_equal(pipe(p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct seen c;
		struct kthrottle_refusal w;
		uint64_t ns;

		memset(&c, 0, sizeof(c));
		if (cg && ktest_cgroup_join(cg))
			_exit(3);
		if (uid >= 0 && (setgroups(0, NULL) || setgid(uid) || setuid(uid)))
			_exit(5);
		for (int l = 0; l < 2; l++)
			for (int i = 0; i < TRIES; i++)
				c.rc[l][i] = try_connect(fx.port[l], &c.why[l][i], &c.ns[l][i]);
		c.closed_rc = try_connect(fx.closed_port, &w, &ns);
		for (int i = 0; i < COST_N; i++) {
			struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(fx.dead_port),
						  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
			int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
			uint64_t t0;

			c.dead_rc[i] = try_connect(fx.dead_port, &w, &ns);
			c.lib_ns += ns;
			t0 = ktest_now_ns();
			(void)!connect(fd, (struct sockaddr *)&sa, sizeof(sa));
			c.plain_ns += ktest_now_ns() - t0;
			close(fd);
		}
		_exit(write(p[1], &c, sizeof(c)) == (ssize_t)sizeof(c) ? 0 : 4);
	}
	close(p[1]);
	assert_int_equal(read(p[0], s, sizeof(*s)), (ssize_t)sizeof(*s));
	close(p[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void run_child(const char *cg, struct seen *s)
{
	run_child_as(cg, -1, s);
}

static int setup(void **state)
{
	(void)state;
	memset(&fx, 0, sizeof(fx));
	fx.lfd[0] = listener(&fx.port[0]);
	fx.lfd[1] = listener(&fx.port[1]);
	fx.closed_port = ktest_free_port(SOCK_STREAM);
	do
		fx.dead_port = ktest_free_port(SOCK_STREAM);
	while (fx.dead_port == fx.closed_port);
	if (fx.lfd[0] < 0 || fx.lfd[1] < 0 || fx.closed_port <= 0 || fx.dead_port <= 0 ||
	    fx.closed_port == fx.port[0] || fx.closed_port == fx.port[1] ||
	    fx.dead_port == fx.port[0] || fx.dead_port == fx.port[1])
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (fx.started)
		ktest_daemon_cleanup(&fx.d);
	if (fx.cg[0])
		ktest_cgroup_destroy(fx.cg);
	for (int i = 0; i < 2; i++)
		if (fx.lfd[i] > 0)
			close(fx.lfd[i]);
	unsetenv(KTHROTTLE_PIN_DIR_ENV);
	memset(&fx, 0, sizeof(fx));
	return 0;
}

/* A daemon with the two limits on a fresh cgroup; the library pointed at it. */
static void daemon_up(void)
{
	char body[2048];

	assert_int_equal(ktest_cgroup_create("conn", fx.cg, sizeof(fx.cg)), 0);
	/* rateLimit min defaults to max: constant 5/s from the start */
	snprintf(body, sizeof(body),
		 "limits:\n"
		 "  - {name: conn-busy, cgroups: [%s], unit: connection, burst: 1,\n"
		 "     match: {cidrs: [127.0.0.1/32], ports: %d}, rateLimit: {max: %g}}\n"
		 "  - {name: conn-refused, cgroups: [%s], unit: connection, burst: 1,\n"
		 "     errno: ECONNREFUSED,\n"
		 "     match: {cidrs: [127.0.0.1/32], ports: %d}, rateLimit: {max: %g}}\n"
		 "  - {name: conn-dead, cgroups: [%s], unit: connection, burst: 1000,\n"
		 "     errno: ECONNREFUSED,\n"
		 "     match: {cidrs: [127.0.0.1/32], ports: %d}, rateLimit: {max: 1000}}\n",
		 fx.cg, fx.port[0], RATE, fx.cg, fx.port[1], RATE, fx.cg, fx.dead_port);
	fx.started = true;
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
	setenv(KTHROTTLE_PIN_DIR_ENV, fx.d.pin_dir, 1);
}

/* A limit's field in status json, after a tick has read the counters. */
static double status_num(const char *limit, const char *field)
{
	ktest_sleep_ms(250); /* tickInterval 100ms */
	return kt_status_num(&fx.d, limit, field);
}

/* No pin dir: kthrottle_connect is connect(2). */
static void test_no_daemon(void **state)
{
	struct kthrottle_refusal why;
	uint64_t ns;

	(void)state;
	setenv(KTHROTTLE_PIN_DIR_ENV, "/nonexistent/kthrottle-pins", 1);
	for (int i = 0; i < TRIES; i++)
		assert_int_equal(try_connect(fx.port[0], &why, &ns), 0);
	assert_int_equal(try_connect(fx.closed_port, &why, &ns), -ECONNREFUSED);
	/* not an IP socket address: passed through as well */
	assert_int_equal(kthrottle_connect(-1, NULL, 0, &why), -EBADF);
}

static void test_member_refusals(void **state)
{
	static const char *const names[2] = { "conn-busy", "conn-refused" };
	static const int errs[2] = { EBUSY, ECONNREFUSED };
	struct seen s;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	daemon_up();
	run_child(fx.cg, &s);
	for (int l = 0; l < 2; l++) {
		int admitted = 0, throttled = 0;
		uint64_t max_ns = 0, min_ra = UINT64_MAX, max_ra = 0;

		for (int i = 0; i < TRIES; i++) {
			const struct kthrottle_refusal *w = &s.why[l][i];

			if (s.rc[l][i] == 0) {
				admitted++;
				continue;
			}
			if (s.rc[l][i] != KTHROTTLE_THROTTLED)
				print_message("%s try %d: %d (%s)\n", names[l], i, s.rc[l][i],
					      strerror(-s.rc[l][i]));
			assert_int_equal(s.rc[l][i], KTHROTTLE_THROTTLED);
			throttled++;
			assert_string_equal(w->limit, names[l]);
			assert_int_equal(w->err, errs[l]);
			assert_int_equal(w->reason, 0); /* share */
			assert_true(w->retry_after_ns > 0 && w->retry_after_ns <= TOKEN_NS + SLACK_NS);
			if (s.ns[l][i] > max_ns)
				max_ns = s.ns[l][i];
			if (w->retry_after_ns < min_ra)
				min_ra = w->retry_after_ns;
			if (w->retry_after_ns > max_ra)
				max_ra = w->retry_after_ns;
		}
		print_message("%s (errno %s): %d admitted, %d throttled of %d; slowest refusal %.3f ms; "
			      "retry-after %.1f..%.1f ms (token %.0f ms)\n",
			      names[l], strerror(errs[l]), admitted, throttled, TRIES, max_ns / 1e6,
			      min_ra / 1e6, max_ra / 1e6, TOKEN_NS / 1e6);
		assert_int_equal(s.rc[l][0], 0); /* burst 1: the first passes */
		/* back to back in well under a token interval: burst + at most one */
		assert_true(admitted >= 1 && admitted <= 2);
		assert_true(throttled >= TRIES - 2);
		assert_true(max_ns < FAST_NS);
		/* the kernel's own count agrees with what the library reported */
		assert_int_equal((int)status_num(names[l], "throttled"), throttled);
		assert_int_equal((int)status_num(names[l], "admitted"), admitted);
	}
	/* the same errno as conn-refused's, but from the network: not THROTTLED */
	print_message("closed port: %d\n", s.closed_rc);
	assert_int_equal(s.closed_rc, -ECONNREFUSED);
	/* a limit refusing with ECONNREFUSED covers it, admits, the port is closed */
	for (int i = 0; i < COST_N; i++)
		assert_int_equal(s.dead_rc[i], -ECONNREFUSED);
	/* it did charge them all (library's and plain connects), refused none */
	assert_int_equal((int)status_num("conn-dead", "admitted"), 2 * COST_N);
	assert_int_equal((int)status_num("conn-dead", "throttled"), 0);
	print_message("covered closed port: %d x %d; kthrottle_connect %.1f us vs connect %.1f us "
		      "(mean of %d)\n",
		      COST_N, s.dead_rc[0], s.lib_ns / 1e3 / COST_N, s.plain_ns / 1e3 / COST_N, COST_N);
}

static void test_outside_member(void **state)
{
	struct seen s;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	daemon_up();
	run_child(NULL, &s); /* stays in the test's own cgroup, no member */
	for (int l = 0; l < 2; l++)
		for (int i = 0; i < TRIES; i++)
			assert_int_equal(s.rc[l][i], 0);
	assert_int_equal(s.closed_rc, -ECONNREFUSED);
	print_message("outside the member cgroup: %d of %d connects admitted, closed port %d\n",
		      2 * TRIES, 2 * TRIES, s.closed_rc);
}

/* Pins this process may not read: kthrottle_connect is plain connect. */
static void test_unreadable_pins(void **state)
{
	struct seen s;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	daemon_up();
	run_child_as(fx.cg, 65534, &s);
	assert_int_equal(s.rc[0][0], 0);
	for (int i = 2; i < TRIES; i++)
		assert_int_equal(s.rc[0][i], -EBUSY);
	assert_int_equal(s.closed_rc, -ECONNREFUSED);
	print_message("uid 65534: conn-busy answers %d then %d (plain errno)\n", s.rc[0][0],
		      s.rc[0][TRIES - 1]);
}

/* The Python module's connect(): RateLimited (an OSError with the limit's
 * errno) for kthrottle's refusals, with the limit, retry-after and reason;
 * ConnectionRefusedError for the network's; a socket with a timeout too.
 * Run from the source tree (PYTHONPATH) with Debian's python3, in the
 * member cgroup. */
static const char py_connect[] =
	"import errno, socket, sys, kthrottle\n"
	"busy, refused, closed = (int(a) for a in sys.argv[1:4])\n"
	"def attempt(port, timeout=None):\n"
	"    s = socket.socket()\n"
	"    s.settimeout(timeout)\n"
	"    try:\n"
	"        kthrottle.connect(s, ('127.0.0.1', port))\n"
	"        return None\n"
	"    except Exception as e:\n"
	"        return e\n"
	"    finally:\n"
	"        s.close()\n"
	"got = [attempt(busy) for _ in range(6)]\n"
	"assert got[0] is None, got[0]\n"
	"for e in got[1:]:\n"
	"    assert isinstance(e, kthrottle.RateLimited), repr(e)\n"
	"    assert isinstance(e, OSError) and e.errno == errno.EBUSY, e.errno\n"
	"    assert e.limit == 'conn-busy' and e.reason == 'share', (e.limit, e.reason)\n"
	"    assert 0 < e.retry_after <= 0.201, e.retry_after\n"
	"print('busy:', got[1])\n"
	"e = attempt(closed)\n"
	"assert type(e) is ConnectionRefusedError, repr(e)\n"
	"print('closed port:', repr(e))\n"
	"got = [attempt(refused, 2.0) for _ in range(3)]\n"
	"assert got[0] is None, got[0]\n"
	"for e in got[1:]:\n"
	"    assert isinstance(e, kthrottle.RateLimited) and e.errno == errno.ECONNREFUSED, repr(e)\n"
	"print('with a timeout:', got[1])\n";

static void test_python_connect(void **state)
{
	char repo[PATH_MAX], pypath[PATH_MAX], lib[PATH_MAX], a[3][16];
	int p[2], status;
	char out[4096];
	ssize_t n, len = 0;
	pid_t pid;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(access("/usr/bin/python3", X_OK), 0);
	daemon_up();
	snprintf(repo, sizeof(repo), "%s", ktest_build_dir());
	assert_non_null(strrchr(repo, '/'));
	*strrchr(repo, '/') = 0;
	snprintf(pypath, sizeof(pypath), "%s/python", repo);
	snprintf(lib, sizeof(lib), "%s/libkthrottle.so.0", ktest_build_dir());
	snprintf(a[0], sizeof(a[0]), "%d", fx.port[0]);
	snprintf(a[1], sizeof(a[1]), "%d", fx.port[1]);
	snprintf(a[2], sizeof(a[2]), "%d", fx.closed_port);
	assert_int_equal(pipe(p), 0);
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(p[0]);
		dup2(p[1], 1);
		dup2(p[1], 2);
		if (ktest_cgroup_join(fx.cg))
			_exit(3);
		setenv("PYTHONPATH", pypath, 1);
		setenv("KTHROTTLE_LIB", lib, 1);
		ktest_asan_preload();
		execl("/usr/bin/python3", "python3", "-c", py_connect, a[0], a[1], a[2],
		      (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	while (len < (ssize_t)sizeof(out) - 1 && (n = read(p[0], out + len, sizeof(out) - 1 - len)) > 0)
		len += n;
	out[len] = 0;
	close(p[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	print_message("%s", out);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* a test with the per-test setup and teardown */
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

/* A kid limit (roomy) under a parent (5/s, burst 1), both on the member
 * cgroup: the refusals are the parent's, and kthrottle_connect says so,
 * with the parent's retry-after; the kid's bucket took nothing for them. */
static void test_parent_refusals(void **state)
{
	char body[2048];
	struct seen s;
	int throttled = 0;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(ktest_cgroup_create("conn", fx.cg, sizeof(fx.cg)), 0);
	snprintf(body, sizeof(body),
		 "limits:\n"
		 "  - {name: conn-top, cgroups: [%s], unit: connection, burst: 1,\n"
		 "     match: {cidrs: [127.0.0.1/32], ports: %d}, rateLimit: {max: %g}}\n"
		 "  - {name: conn-kid, parent: conn-top, cgroups: [%s], unit: connection, burst: 100,\n"
		 "     match: {cidrs: [127.0.0.1/32], ports: %d}, rateLimit: {max: 1000}}\n"
		 "  - {name: conn-dead, cgroups: [%s], unit: connection, burst: 1000,\n"
		 "     errno: ECONNREFUSED,\n"
		 "     match: {cidrs: [127.0.0.1/32], ports: %d}, rateLimit: {max: 1000}}\n",
		 fx.cg, fx.port[1], RATE, fx.cg, fx.port[0], fx.cg, fx.dead_port);
	fx.started = true;
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
	setenv(KTHROTTLE_PIN_DIR_ENV, fx.d.pin_dir, 1);
	run_child(fx.cg, &s);
	for (int i = 0; i < TRIES; i++) {
		const struct kthrottle_refusal *w = &s.why[0][i];

		if (s.rc[0][i] == 0)
			continue;
		assert_int_equal(s.rc[0][i], KTHROTTLE_THROTTLED);
		throttled++;
		assert_string_equal(w->limit, "conn-top");
		assert_int_equal(w->err, EBUSY);
		assert_true(w->retry_after_ns > 0 && w->retry_after_ns <= TOKEN_NS + SLACK_NS);
	}
	print_message("kid's connects: %d of %d refused by conn-top\n", throttled, TRIES);
	assert_true(throttled >= TRIES - 2);
	assert_int_equal((int)status_num("conn-kid", "throttled"), throttled);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_no_daemon),
		T(test_member_refusals),
		T(test_outside_member),
		T(test_unreadable_pins),
		T(test_python_connect),
		T(test_parent_refusals),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
