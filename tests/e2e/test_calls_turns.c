// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Unit call counted by turns, with bounds that hold at any speed (the
 * kernel matrix runs it in every guest, emulated or not): sequential calls
 * on one connection, so every call the clients saw answered is one the
 * kernel admitted inside the client's run, and the limit bounds their
 * number by rate x the run + burst.
 *   test_byte_at_a_time  HTTP/1.1 requests written one byte a segment
 *                        still count one call a call;
 *   test_redis_peer      not HTTP: Redis PINGs on a real redis-server,
 *                        the kernel's count equal to INFO commandstats';
 *   test_retry_quantum   a sequential connection at 2/s, burst 1: how long
 *                        a held call waits for TCP to send it again (the
 *                        quantum of waiting without fq), printed;
 *   test_parent          a call limit under a parent call limit of 4/s:
 *                        the parent's bound holds for the child's calls;
 *   test_app_timeout     a client's own TCP_USER_TIMEOUT ends a held call
 *                        with ETIMEDOUT, and the call is never sent;
 *   test_max_delay       the limit's maxDelay does the same for a client
 *                        that set nothing, and keeps a shorter bound a
 *                        client set itself;
 *   test_strict_calls    rateLimit.strict on calls (a permit from a real
 *                        redis-server per call, every 1 s): the held
 *                        calls go out at TCP's next try inside the
 *                        permit's window, at most one a second;
 *   test_fq_departures   where fq schedules the socket (a network namespace
 *                        made here, fq on its loopback), a call over the
 *                        rate is sent at the time it conforms instead of
 *                        held: none dropped, the bound kept (skips on a
 *                        kernel without fq).
 * The server is tests/tools/kt-httpcall.py (tests/lib/kt_httpfx). */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
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
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "kt_daemonfx.h"
#include "kt_httpfx.h"
#include "ktest.h"
#include "redis_proc.h"

#define RATE 40.0
#define BURST 20
#define RUN_S 3.0
#define MAX_LAT 256

static struct fixture {
	struct ktest_daemon d;
	char cg[PATH_MAX];
	char cg_top[PATH_MAX]; /* test_parent: the parent limit's own member */
	char tmp[PATH_MAX];
	struct kt_httpfx_server server;
	struct rp_proc rp;
} fx;

static int teardown(void **state)
{
	(void)state;
	kt_httpfx_kill(&fx.server);
	rp_stop(&fx.rp);
	kt_daemonfx_end(&fx.d, fx.cg);
	if (fx.cg_top[0])
		ktest_cgroup_destroy(fx.cg_top);
	if (fx.tmp[0])
		ktest_rmtree(fx.tmp);
	return 0;
}

/* A child process in the member cgroup that reports through p[1]: 0 in
 * the child (p[0] closed), its pid in the parent. */
static pid_t member_child(int p[2])
{
	pid_t kid;

	assert_int_equal(pipe(p), 0);
	kid = kt_daemonfx_fork_bounded();
	assert_true(kid >= 0);
	if (kid == 0) {
		close(p[0]);
		if (ktest_cgroup_join(fx.cg))
			_exit(3);
	}
	return kid;
}

/* The limit: rate calls/s to 127.0.0.1 over TCP, any port; `extra`:
 * more keys of the limit ("" or ", key: value"). */
static void daemon_up_with(double rate, int burst, const char *extra)
{
	char body[1024];

	snprintf(body, sizeof(body),
		 "tickInterval: 100ms\n"
		 "limits:\n"
		 "  - {name: calls, cgroups: [%s], unit: call, burst: %d%s,\n"
		 "     match: {cidrs: [127.0.0.1/32]}, rateLimit: {max: %g}}\n",
		 fx.cg, burst, extra, rate);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
}

static void daemon_up(double rate, int burst)
{
	daemon_up_with(rate, burst, "");
}

/* What a sequential client reports: its calls and their latencies. */
struct seq_result {
	int n;
	double elapsed; /* s, from its first send to its last answer */
	double lat_ms[MAX_LAT];
};

/* Sequential HTTP/1.1 calls on one connection, each read in full before
 * the next, for secs; each request written `chunk` bytes a send
 * (TCP_NODELAY: one byte a segment with chunk 1). The result through
 * out_fd. */
static void seq_client(int port, double secs, size_t chunk, int out_fd)
{
	static const char req[] = "GET /b HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n";
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	uint64_t t0 = ktest_now_ns();
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	static struct seq_result res;
	char buf[4096];

	if (fd < 0 || setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) ||
	    connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
		_exit(5);
	while ((double)(ktest_now_ns() - t0) / 1e9 < secs && res.n < 100000) {
		uint64_t c0 = ktest_now_ns();
		size_t got = 0;

		for (size_t i = 0; i < sizeof(req) - 1; i += chunk) {
			size_t len = sizeof(req) - 1 - i < chunk ? sizeof(req) - 1 - i : chunk;

			if (send(fd, req + i, len, MSG_NOSIGNAL) != (ssize_t)len)
				_exit(6);
		}
		/* the answer: headers and the body its Content-Length gives */
		for (;;) {
			ssize_t r = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
			char *end, *cl;

			if (r <= 0)
				_exit(7);
			got += (size_t)r;
			buf[got] = 0;
			end = strstr(buf, "\r\n\r\n");
			cl = strcasestr(buf, "Content-Length:");
			if (end && cl && got >= (size_t)(end + 4 - buf) + (size_t)atoi(cl + 15))
				break;
			if (got >= sizeof(buf) - 1)
				_exit(8);
		}
		if (res.n < MAX_LAT)
			res.lat_ms[res.n] = (double)(ktest_now_ns() - c0) / 1e6;
		res.n++;
	}
	res.elapsed = (double)(ktest_now_ns() - t0) / 1e9;
	_exit(write(out_fd, &res, sizeof(res)) == (ssize_t)sizeof(res) ? 0 : 4);
}

/* What the PING client reports. */
struct ping_result {
	int n;
	double elapsed; /* s, from its first PING to its last PONG */
};

/* Redis's PINGs, one at a time over one connection: PING in, PONG out,
 * sequential; the reply count through out_fd. */
static void ping_client(int port, double secs, int out_fd)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	uint64_t t0 = ktest_now_ns();
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), n = 0;
	char buf[64];
	double elapsed;

	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
		_exit(5);
	while ((double)(ktest_now_ns() - t0) / 1e9 < secs && n < 100000) {
		ssize_t r;

		if (send(fd, "PING\r\n", 6, MSG_NOSIGNAL) != 6)
			_exit(6);
		r = recv(fd, buf, sizeof(buf), 0);
		if (r != 7 || memcmp(buf, "+PONG\r\n", 7))
			_exit(7);
		n++;
	}
	elapsed = (double)(ktest_now_ns() - t0) / 1e9;
	{
		struct ping_result r = { .n = n, .elapsed = elapsed };

		_exit(write(out_fd, &r, sizeof(r)) == (ssize_t)sizeof(r) ? 0 : 4);
	}
}

/* Pings since the server started: INFO commandstats' cmdstat_ping calls. */
static long server_pings(void)
{
	char v[256], *calls;

	if (rp_info_field(&fx.rp, "commandstats", "cmdstat_ping", v, sizeof(v)))
		return 0; /* no PING yet */
	calls = strstr(v, "calls=");
	assert_non_null(calls);
	return atol(calls + 6);
}

/* Not HTTP: Redis's protocol on a real redis-server, counted by turns as
 * well. The server's own count is the truth. */
static void test_redis_peer(void **state)
{
	const struct rp_opts o = { 0 };
	double before, calls, secs = 2.0, elapsed = 0;
	long pings0, pings;
	int p[2], n = -1;
	struct ping_result r;
	pid_t kid;

	(void)state;
	KT_HTTPFX_SKIP_UNLESS_READY();
	if (!ktest_find_prog("redis-server"))
		skip();
	assert_int_equal(rp_start_master(&fx.rp, &o), 0);
	daemon_up(RATE, BURST);
	pings0 = server_pings();
	before = kt_status_num(&fx.d, "calls", "admitted");
	kid = member_child(p);
	if (kid == 0)
		ping_client(fx.rp.port, secs, p[1]);
	kt_child_result(p, &kid, &r, sizeof(r));
	n = r.n;
	elapsed = r.elapsed;
	pings = server_pings() - pings0;
	calls = kt_status_num(&fx.d, "calls", "admitted") - before;
	print_message("redis PING: %d answered in %.2f s, %ld at the server, kernel counted %.0f, "
		      "bound %.0f\n",
		      n, elapsed, pings, calls, RATE * elapsed + BURST);
	assert_true(pings == n);
	assert_true(fabs(calls - pings) <= 1);
	assert_true(pings <= RATE * elapsed + BURST);
	assert_true(pings >= 5);
}

/* seq_client in the member cgroup against the counting server: its
 * result, the server's count and the kernel's. */
static void seq_run(size_t chunk, double secs, struct seq_result *r, double *requests,
		    double *calls)
{
	double before;
	char *srv;
	int p[2];
	pid_t kid;

	kt_httpfx_serve(&fx.server, fx.tmp, "none");
	before = kt_status_num(&fx.d, "calls", "admitted");
	kid = member_child(p);
	if (kid == 0)
		seq_client(fx.server.port, secs, chunk, p[1]);
	kt_child_result(p, &kid, r, sizeof(*r));
	srv = kt_httpfx_stop(&fx.server);
	assert_non_null(srv);
	*requests = kt_httpfx_num(srv, "requests");
	*calls = kt_status_num(&fx.d, "calls", "admitted") - before;
	free(srv);
}

static double elapsed_s(const struct seq_result *r)
{
	return r->elapsed;
}

static void test_byte_at_a_time(void **state)
{
	static struct seq_result r;
	double requests, calls, busy;

	(void)state;
	KT_HTTPFX_SKIP_UNLESS_READY();
	daemon_up(RATE, BURST);
	seq_run(1, RUN_S, &r, &requests, &calls);
	busy = elapsed_s(&r);
	print_message("one byte a segment: %d calls answered, %.0f at the server, kernel counted "
		      "%.0f, in %.2f s of calls (bound %.0f)\n",
		      r.n, requests, calls, busy, RATE * busy + BURST);
	assert_true(r.n <= MAX_LAT);
	assert_true(requests == r.n);
	assert_true(fabs(calls - requests) <= 1);
	/* the calls ran back to back: the bucket bounds them by their time */
	assert_true(requests <= RATE * busy + BURST);
	assert_true(requests >= 5);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* 2/s, burst 1, one connection: after the first, each call is held until
 * its token (500 ms after the last) and sent at TCP's next try. */
static void test_retry_quantum(void **state)
{
	static struct seq_result r;
	double requests, calls, busy, lat[MAX_LAT];
	int n;

	(void)state;
	KT_HTTPFX_SKIP_UNLESS_READY();
	daemon_up(2, 1);
	seq_run(1 << 16, 5.0, &r, &requests, &calls);
	busy = elapsed_s(&r);
	n = r.n < MAX_LAT ? r.n : MAX_LAT;
	memcpy(lat, r.lat_ms, sizeof(double) * (size_t)n);
	qsort(lat, (size_t)n, sizeof(lat[0]), cmp_double);
	print_message("retry quantum at 2/s, burst 1: %d calls in %.2f s (%.2f/s), wait per call "
		      "min %.0f ms, median %.0f ms, max %.0f ms (the ideal: 500 ms); kernel counted "
		      "%.0f, server %.0f\n",
		      r.n, busy, r.n / (busy > 0 ? busy : 1), lat[0], lat[n / 2], lat[n - 1], calls,
		      requests);
	assert_true(requests == r.n);
	assert_true(fabs(calls - requests) <= 1);
	assert_true(requests <= 2 * busy + 1);
	assert_true(requests >= 3);
}

/* parent: a call limit "kid" (100/s, burst 50) on the clients' cgroup,
 * under "top" (4/s, burst 2): every call is charged to both, so top's
 * bound holds for kid's calls. */
static void test_parent(void **state)
{
	static struct seq_result r;
	double requests, calls, busy;
	char body[1024];

	(void)state;
	KT_HTTPFX_SKIP_UNLESS_READY();
	assert_int_equal(ktest_cgroup_create("callturns-top", fx.cg_top, sizeof(fx.cg_top)), 0);
	snprintf(body, sizeof(body),
		 "tickInterval: 100ms\n"
		 "limits:\n"
		 "  - {name: top, cgroups: [%s], unit: call, burst: 2, rateLimit: {max: 4},\n"
		 "     match: {cidrs: [127.0.0.1/32]}}\n"
		 "  - {name: calls, parent: top, cgroups: [%s], unit: call, burst: 50,\n"
		 "     rateLimit: {max: 100}, match: {cidrs: [127.0.0.1/32]}}\n",
		 fx.cg_top, fx.cg);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
	seq_run(1 << 16, RUN_S, &r, &requests, &calls);
	busy = elapsed_s(&r);
	print_message("under a parent of 4/s, burst 2: %d calls in %.2f s (bound %.0f), server %.0f, "
		      "kernel counted %.0f\n",
		      r.n, busy, 4 * busy + 2, requests, calls);
	assert_true(requests == r.n);
	assert_true(fabs(calls - requests) <= 1);
	assert_true(requests <= 4 * busy + 2);
	assert_true(requests >= 3);
}

/* What the user-timeout client reports. */
struct ut_result {
	unsigned seen_ms;  /* TCP_USER_TIMEOUT once connected */
	int first_ok;      /* the first call was answered */
	int err;           /* errno of the held call's wait (0: answered) */
	double waited_ms;  /* from its send to the error */
};

/* One connection with TCP_USER_TIMEOUT ut_ms (0: left alone, as an
 * unmodified client does); with `calls`, a call (answered), then a second
 * the limit holds, and how the wait for its answer ends. */
static void ut_client(int port, unsigned ut_ms, bool calls, int out_fd)
{
	static const char req[] = "GET /u HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n";
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct ut_result res = { 0 };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	struct timeval tv = { .tv_sec = 20 }; /* a bound, far past the user timeout */
	socklen_t len = sizeof(res.seen_ms);
	char buf[4096];
	uint64_t t0;
	ssize_t r;

	if (fd < 0 || setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) ||
	    (ut_ms && setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut_ms, sizeof(ut_ms))) ||
	    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) ||
	    connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    getsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &res.seen_ms, &len))
		_exit(5);
	if (!calls)
		_exit(write(out_fd, &res, sizeof(res)) == (ssize_t)sizeof(res) ? 0 : 4);
	if (send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) != (ssize_t)sizeof(req) - 1)
		_exit(6);
	r = recv(fd, buf, sizeof(buf), 0); /* the answer is one small segment */
	res.first_ok = r > 0 && !memcmp(buf, "HTTP/1.1 200", 12);
	t0 = ktest_now_ns();
	if (send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) != (ssize_t)sizeof(req) - 1)
		_exit(6);
	r = recv(fd, buf, sizeof(buf), 0);
	res.err = r < 0 ? errno : r == 0 ? ECONNRESET : 0;
	res.waited_ms = (double)(ktest_now_ns() - t0) / 1e6;
	_exit(write(out_fd, &res, sizeof(res)) == (ssize_t)sizeof(res) ? 0 : 4);
}

/* ut_client's report, run in the member cgroup. */
static struct ut_result ut_run(unsigned ut_ms, bool calls)
{
	struct ut_result r;
	int p[2];
	pid_t kid = member_child(p);

	if (kid == 0)
		ut_client(fx.server.port, ut_ms, calls, p[1]);
	kt_child_result(p, &kid, &r, sizeof(r));
	return r;
}

/* A connection whose second call the limit holds for 10 s (0.1/s, burst
 * 1), with TCP_USER_TIMEOUT client_ms set by the client (0: none): its
 * bound is bound_ms once connected, the held call ends with ETIMEDOUT about
 * then (at TCP's first try past it: tries come every 500 ms while a call is
 * held; 4 s bounds a loaded machine) and never reaches the server. `what`
 * begins the printed line. */
static struct ut_result held_call_ends(unsigned client_ms, unsigned bound_ms, const char *what)
{
	struct ut_result r;
	double requests, calls, before;
	char *srv;

	kt_httpfx_serve(&fx.server, fx.tmp, "none");
	before = kt_status_num(&fx.d, "calls", "admitted");
	r = ut_run(client_ms, true);
	srv = kt_httpfx_stop(&fx.server);
	assert_non_null(srv);
	requests = kt_httpfx_num(srv, "requests");
	calls = kt_status_num(&fx.d, "calls", "admitted") - before;
	free(srv);
	print_message("%s: TCP_USER_TIMEOUT %u on the connection, a call held for 10 s: first "
		      "answered %d, the held one ended after %.0f ms with %s; server saw %.0f, kernel "
		      "admitted %.0f\n",
		      what, r.seen_ms, r.first_ok, r.waited_ms, strerror(r.err), requests, calls);
	assert_int_equal(r.seen_ms, bound_ms);
	assert_true(r.first_ok);
	assert_int_equal(r.err, ETIMEDOUT);
	assert_true(r.waited_ms >= bound_ms - 50 && r.waited_ms <= bound_ms + 4000);
	assert_true(requests == 1);
	assert_true(calls == 1);
	return r;
}

/* Past the application's own bound: a client that set TCP_USER_TIMEOUT
 * (1.5 s) gets ETIMEDOUT, and the held call is not sent late. */
static void test_app_timeout(void **state)
{
	(void)state;
	KT_HTTPFX_SKIP_UNLESS_READY();
	daemon_up(0.1, 1);
	held_call_ends(1500, 1500, "TCP_USER_TIMEOUT 1500 ms set by the client");
}

/* The limit's own bound: with maxDelay 1.5 s, a client that set nothing
 * finds TCP_USER_TIMEOUT 1500 on its connection, and a call held for 10 s
 * (0.1/s, burst 1) ends with ETIMEDOUT about then, never sent. A client
 * that set a shorter bound keeps it; a longer one is brought down. */
static void test_max_delay(void **state)
{
	const unsigned max_ms = 1500;
	struct ut_result shorter, longer;

	(void)state;
	KT_HTTPFX_SKIP_UNLESS_READY();
	daemon_up_with(0.1, 1, ", maxDelay: 1500ms");
	assert_true(kt_status_num(&fx.d, "calls", "max_delay_ms") == max_ms);
	held_call_ends(0, max_ms, "maxDelay 1500 ms, a client that set nothing");
	kt_httpfx_serve(&fx.server, fx.tmp, "none");
	shorter = ut_run(800, false);
	longer = ut_run(60000, false);
	print_message("maxDelay 1500 ms: a client's own 800 stays %u, its own 60000 becomes %u\n",
		      shorter.seen_ms, longer.seen_ms);
	assert_int_equal(shorter.seen_ms, 800);
	assert_int_equal(longer.seen_ms, max_ms);
}

/* Strict spacing for calls: one call a second through permits from a
 * real redis-server, for a sequential connection that wants far more.
 * Each held call is sent at TCP's first try inside its permit's window
 * (500 ms long, TCP tries every 500 ms), so calls come about a second
 * apart and never more than one a second. */
static void test_strict_calls(void **state)
{
	const struct rp_opts o = { 0 };
	static struct seq_result r;
	double requests, calls, busy, lat[MAX_LAT];
	char body[1024];
	int n;

	(void)state;
	KT_HTTPFX_SKIP_UNLESS_READY();
	if (!ktest_find_prog("redis-server")) {
		print_message("skipped: no redis-server\n");
		skip();
	}
	assert_int_equal(rp_start_master(&fx.rp, &o), 0);
	snprintf(body, sizeof(body),
		 "tickInterval: 100ms\n"
		 "store:\n"
		 "  redisStore: {mode: single, url: \"redis://127.0.0.1:%d/0\"}\n"
		 "limits:\n"
		 "  - {name: calls, cgroups: [%s], unit: call,\n"
		 "     match: {cidrs: [127.0.0.1/32]}, rateLimit: {strict: {every: 1s}}}\n",
		 fx.rp.port, fx.cg);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
	seq_run(1 << 16, 6.0, &r, &requests, &calls);
	busy = elapsed_s(&r);
	n = r.n < MAX_LAT ? r.n : MAX_LAT;
	assert_true(n >= 1);
	memcpy(lat, r.lat_ms, sizeof(double) * (size_t)n);
	qsort(lat, (size_t)n, sizeof(lat[0]), cmp_double);
	print_message("strict calls, every 1 s: %d calls in %.2f s, wait per call min %.0f ms, "
		      "median %.0f ms, max %.0f ms; kernel counted %.0f, server %.0f\n",
		      r.n, busy, lat[0], lat[n / 2], lat[n - 1], calls, requests);
	assert_true(requests == r.n);
	assert_true(fabs(calls - requests) <= 1);
	/* a permit a second: the first at once, then one per second */
	assert_true(requests <= busy / 1.0 + 1);
	assert_true(requests >= 3);
}

/* What the fq run reports. */
struct fq_result {
	int skip;      /* 1: no fq qdisc on this kernel */
	int served;    /* requests the server answered */
	struct seq_result seq;
};

/* Runs program `name` with `args` (NULL-ended), its output dropped: its
 * exit status, -1 if none. */
static int run_quiet(const char *name, char *const args[])
{
	char *argv[16], *out = NULL;
	const char *path = ktest_find_prog(name);
	int n = 0, st;

	if (!path)
		return -1;
	argv[n++] = (char *)path;
	while (args[n - 1] && n < 15) {
		argv[n] = args[n - 1];
		n++;
	}
	argv[n] = NULL;
	st = ktest_run_capture(argv, &out);
	free(out);
	return st;
}

/* An HTTP/1.1 server for one connection on lfd: answers each request
 * (its end: an empty line) at once; how many through out_fd at EOF. */
static void fq_server(int lfd, int out_fd)
{
	static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
	static const char eoh[] = "\r\n\r\n";
	struct timeval tv = { .tv_sec = 30 };
	int c = accept(lfd, NULL, NULL), served = 0;
	size_t matched = 0;
	char buf[4096];
	ssize_t r;

	if (c < 0 || setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)))
		_exit(5);
	while ((r = recv(c, buf, sizeof(buf), 0)) > 0) {
		for (ssize_t i = 0; i < r; i++) {
			matched = buf[i] == eoh[matched] ? matched + 1 : buf[i] == eoh[0];
			if (matched < sizeof(eoh) - 1)
				continue;
			matched = 0;
			served++;
			if (send(c, ok, sizeof(ok) - 1, MSG_NOSIGNAL) != (ssize_t)sizeof(ok) - 1)
				_exit(6);
		}
	}
	_exit(write(out_fd, &served, sizeof(served)) == (ssize_t)sizeof(served) ? 0 : 4);
}

/* In a network namespace of its own with fq on its loopback: a server
 * (outside the member cgroup) and seq_client in it for secs. */
static void fq_run_main(double secs, int out_fd)
{
	char *lo_up[] = { "link", "set", "lo", "up", NULL };
	char *fq[] = { "qdisc", "add", "dev", "lo", "root", "fq", NULL };
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(8080),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	static struct fq_result res;
	int lfd, one = 1, sp[2], cp[2];
	pid_t srv, cli;

	if (unshare(CLONE_NEWNET) || run_quiet("ip", lo_up))
		_exit(9);
	if (run_quiet("tc", fq)) {
		res.skip = 1;
		_exit(write(out_fd, &res, sizeof(res)) == (ssize_t)sizeof(res) ? 0 : 4);
	}
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 4) || pipe(sp) || pipe(cp))
		_exit(10);
	srv = fork();
	if (srv == 0)
		fq_server(lfd, sp[1]);
	cli = fork();
	if (cli == 0) {
		if (ktest_cgroup_join(fx.cg))
			_exit(3);
		seq_client(8080, secs, 1 << 16, cp[1]);
	}
	if (srv < 0 || cli < 0)
		_exit(11);
	close(sp[1]);
	close(cp[1]);
	if (read(cp[0], &res.seq, sizeof(res.seq)) != (ssize_t)sizeof(res.seq) ||
	    read(sp[0], &res.served, sizeof(res.served)) != (ssize_t)sizeof(res.served))
		_exit(12);
	waitpid(cli, NULL, 0);
	waitpid(srv, NULL, 0);
	_exit(write(out_fd, &res, sizeof(res)) == (ssize_t)sizeof(res) ? 0 : 4);
}

/* 2/s, burst 1, one connection, where fq schedules it: each call after
 * the first is sent at the time it conforms (EDT) instead of held, so no
 * call is dropped and each waits its 500 ms, not TCP's next try. */
static void test_fq_departures(void **state)
{
	static struct fq_result r;
	double admitted, throttled, lat[MAX_LAT];
	int p[2], n;
	pid_t kid;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	daemon_up(2, 1);
	admitted = kt_status_num(&fx.d, "calls", "admitted");
	throttled = kt_status_num(&fx.d, "calls", "throttled");
	assert_int_equal(pipe(p), 0);
	kid = kt_daemonfx_fork_bounded();
	assert_true(kid >= 0);
	if (kid == 0) {
		close(p[0]);
		fq_run_main(5.0, p[1]);
	}
	kt_child_result(p, &kid, &r, sizeof(r));
	if (r.skip) {
		print_message("skipped: no fq qdisc on this kernel (tc qdisc add dev lo root fq failed)\n");
		skip();
	}
	admitted = kt_status_num(&fx.d, "calls", "admitted") - admitted;
	throttled = kt_status_num(&fx.d, "calls", "throttled") - throttled;
	n = r.seq.n < MAX_LAT ? r.seq.n : MAX_LAT;
	assert_true(n >= 1);
	memcpy(lat, r.seq.lat_ms, sizeof(double) * (size_t)n);
	qsort(lat, (size_t)n, sizeof(lat[0]), cmp_double);
	print_message("fq departures at 2/s, burst 1: %d calls in %.2f s (%.2f/s), wait per call "
		      "min %.0f ms, median %.0f ms, max %.0f ms (the ideal: 500 ms); server %d, "
		      "kernel admitted %.0f, held %.0f\n",
		      r.seq.n, r.seq.elapsed, r.seq.n / (r.seq.elapsed > 0 ? r.seq.elapsed : 1), lat[0],
		      lat[n / 2], lat[n - 1], r.served, admitted, throttled);
	assert_int_equal(r.served, r.seq.n);
	assert_true(fabs(admitted - r.served) <= 1);
	assert_true(r.served <= 2 * r.seq.elapsed + 1);
	assert_true(r.served >= 3);
	/* every late call was given its departure: none dropped */
	assert_true(throttled == 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_byte_at_a_time, kt_dfx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_redis_peer, kt_dfx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_retry_quantum, kt_dfx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_parent, kt_dfx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_app_timeout, kt_dfx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_max_delay, kt_dfx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_strict_calls, kt_dfx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_fq_departures, kt_dfx_setup, teardown),
	};

	kt_dfx = (struct kt_daemonfx_spec){ .fx = &fx, .len = sizeof(fx), .d = &fx.d,
					    .kid = &fx.server.pid, .cgroup = "callturns", .cg = fx.cg,
					    .tmp = fx.tmp, .tmp_len = sizeof(fx.tmp) };
	return cmocka_run_group_tests(tests, NULL, NULL);
}
