// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* A TCP byte limit reaches its rate whatever the burst (pacing).
 *
 * A network namespace and a veth pair made here (nothing leaves the host),
 * a TCP server listening at the namespace end. A member cgroup of a 1 MB/s
 * byte limit (real kthrottled) uploads to it for UPLOAD_S; the server counts
 * what arrives in that window. Asserted for bursts of 16 KiB to 1 MiB:
 *   - received >= 90% of rate x window (a dropping limit got 8-64%: every
 *     drop stalled TCP until a probe timer of 200 ms or more);
 *   - received <= rate x window + burst + one MSS (never above the limit).
 * Retransmits (the client's TCP_INFO tcpi_total_retrans) are printed.
 *
 * Twice: without fq on the device (veth's default noqueue, which ignores
 * skb->tstamp; the sockops program has TCP pace itself, SO_MAX_PACING_RATE)
 * and, when the kernel has CONFIG_NET_SCH_FQ, with fq on the host end (fq
 * paces at the same capped rate, and the egress program's EDT path holds
 * back what still comes early). The fq variants skip without fq. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
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
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "kt_daemonfx.h"
#include "ktest.h"

#define RATE 1000000.0 /* bytes/s */
#define UPLOAD_S 3.0   /* the server's counting window */
#define SEND_S 3.5     /* the client sends a little longer than that */
#define PORT 5201
#define MSS_SLACK 1500.0

static char ns_name[64], veth_h[16], veth_n[16], ip_h[32], ip_n[32];
static bool net_up, fq_ok;
static pid_t server_pid = -1;
static int result_fd = -1; /* server -> test: one struct srv_result per connection */

struct srv_result {
	uint64_t bytes;
	double secs; /* the window actually counted */
};

static struct fixture {
	struct ktest_daemon d;
	bool d_used;
	char cg[PATH_MAX];
	pid_t client;
} fx;

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Runs a command (argv[0] looked up in PATH) quietly; its exit status. */
static int cmd(const char *first, ...)
{
	char *argv[24];
	va_list ap;
	int n = 0, st;
	pid_t pid;

	argv[n++] = (char *)first;
	va_start(ap, first);
	while (n < 23 && (argv[n] = va_arg(ap, char *)))
		n++;
	va_end(ap);
	argv[n] = NULL;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		int fd = open("/dev/null", O_WRONLY);

		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		alarm(30);
		execvp(argv[0], argv);
		_exit(127);
	}
	if (waitpid(pid, &st, 0) < 0)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void net_down(void)
{
	/* deleting the namespace takes its veth end, and so the pair */
	if (ns_name[0]) {
		cmd("ip", "link", "del", veth_h, NULL);
		cmd("ip", "netns", "del", ns_name, NULL);
	}
	net_up = false;
}

/* The server, inside the namespace: for each connection, counts the bytes
 * that arrive in the UPLOAD_S after accept, then closes it. */
static void server_main(int lfd, int out)
{
	for (int conn = 0; conn < 64; conn++) {
		struct srv_result r = { 0 };
		static char buf[1 << 16];
		uint64_t t0, end, last;
		int c = accept(lfd, NULL, NULL);

		if (c < 0)
			continue;
		t0 = mono_ns();
		last = t0;
		end = t0 + (uint64_t)(UPLOAD_S * 1e9);
		for (int spins = 0; spins < 1000000; spins++) {
			uint64_t now = mono_ns();
			struct pollfd p = { .fd = c, .events = POLLIN };
			ssize_t n;

			if (now >= end)
				break;
			if (poll(&p, 1, (int)((end - now) / 1000000 + 1)) <= 0)
				continue;
			if (mono_ns() >= end)
				break;
			n = read(c, buf, sizeof(buf));
			if (n <= 0)
				break;
			r.bytes += (uint64_t)n;
			last = mono_ns();
		}
		r.secs = (double)(last - t0) / 1e9;
		close(c);
		if (write(out, &r, sizeof(r)) != (ssize_t)sizeof(r))
			_exit(1);
	}
	_exit(0);
}

static int group_setup(void **state)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(PORT) };
	int p[2], ready[2], lfd, one = 1, nsfd;
	char path[128], ok;
	unsigned sub = (unsigned)getpid() % 250;

	(void)state;
	if (ktest_root_unavailable())
		return 0;
	snprintf(ns_name, sizeof(ns_name), "kt-edt-%d", getpid());
	snprintf(veth_h, sizeof(veth_h), "kte%dh", getpid() % 10000000);
	snprintf(veth_n, sizeof(veth_n), "kte%dn", getpid() % 10000000);
	snprintf(ip_h, sizeof(ip_h), "10.213.%u.1", sub);
	snprintf(ip_n, sizeof(ip_n), "10.213.%u.2", sub);
	char cidr_h[40], cidr_n[40];
	snprintf(cidr_h, sizeof(cidr_h), "%s/30", ip_h);
	snprintf(cidr_n, sizeof(cidr_n), "%s/30", ip_n);
	if (cmd("ip", "netns", "add", ns_name, NULL) ||
	    cmd("ip", "link", "add", veth_h, "type", "veth", "peer", "name", veth_n, "netns",
		ns_name, NULL) ||
	    cmd("ip", "addr", "add", cidr_h, "dev", veth_h, NULL) ||
	    cmd("ip", "link", "set", veth_h, "up", NULL) ||
	    cmd("ip", "-n", ns_name, "addr", "add", cidr_n, "dev", veth_n, NULL) ||
	    cmd("ip", "-n", ns_name, "link", "set", veth_n, "up", NULL) ||
	    cmd("ip", "-n", ns_name, "link", "set", "lo", "up", NULL)) {
		fprintf(stderr, "cannot set up namespace %s and veth %s\n", ns_name, veth_h);
		net_down();
		return -1;
	}
	net_up = true;
	/* a kernel without CONFIG_NET_SCH_FQ has no fq: its variants skip */
	fq_ok = cmd("tc", "qdisc", "add", "dev", veth_h, "root", "fq", NULL) == 0;
	if (!fq_ok)
		fprintf(stderr, "no fq qdisc on this kernel: the fq variants skip\n");

	/* the server: listening (in the namespace) before the first connect */
	if (pipe2(p, O_CLOEXEC) || pipe2(ready, O_CLOEXEC))
		return -1;
	server_pid = kt_daemonfx_fork_bounded();
	if (server_pid < 0)
		return -1;
	if (server_pid == 0) {
		snprintf(path, sizeof(path), "/run/netns/%s", ns_name);
		nsfd = open(path, O_RDONLY);
		if (nsfd < 0 || setns(nsfd, CLONE_NEWNET) < 0)
			_exit(2);
		if (inet_pton(AF_INET, ip_n, &sa.sin_addr) != 1)
			_exit(2);
		lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 16) < 0)
			_exit(3);
		ok = 1;
		if (write(ready[1], &ok, 1) != 1)
			_exit(4);
		server_main(lfd, p[1]);
	}
	close(p[1]);
	close(ready[1]);
	result_fd = p[0];
	struct pollfd pr = { .fd = ready[0], .events = POLLIN };
	if (poll(&pr, 1, 10000) != 1 || read(ready[0], &ok, 1) != 1) {
		close(ready[0]);
		fprintf(stderr, "server in %s did not start\n", ns_name);
		return -1;
	}
	close(ready[0]);
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	ktest_kill_wait(&server_pid);
	if (result_fd >= 0)
		close(result_fd);
	result_fd = -1;
	if (ns_name[0])
		net_down();
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	ktest_kill_wait(&fx.client);
	if (fx.d_used)
		ktest_daemon_cleanup(&fx.d);
	if (fx.cg[0])
		ktest_cgroup_destroy(fx.cg);
	memset(&fx, 0, sizeof(fx));
	fx.client = -1;
	return 0;
}

static int setup(void **state)
{
	(void)state;
	memset(&fx, 0, sizeof(fx));
	fx.client = -1;
	return 0;
}

static bool has_fq(void)
{
	char *argv[] = { "/sbin/tc", "qdisc", "show", "dev", veth_h, NULL }, *out = NULL;
	bool fq;

	ktest_run_capture(argv, &out);
	fq = out && strstr(out, "qdisc fq ");
	free(out);
	return fq;
}

struct client_result {
	uint64_t sent;
	uint32_t total_retrans;
	int err;
};

/* A child in the cgroup uploads for SEND_S, then reports. */
static void upload(const char *cg, struct client_result *res)
{
	int p[2], st;

	memset(res, 0, sizeof(*res));
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	fx.client = fork();
	assert_true(fx.client >= 0);
	if (fx.client == 0) {
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(PORT) };
		struct timeval tv = { .tv_sec = 0, .tv_usec = 200000 };
		struct client_result r = { 0 };
		static char buf[1 << 16];
		struct tcp_info ti;
		socklen_t tl = sizeof(ti);
		uint64_t end;
		int fd;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		alarm(30);
		/* join first: the socket is charged to the cgroup it is made in */
		if (ktest_cgroup_join(cg) != 0)
			_exit(3);
		inet_pton(AF_INET, ip_n, &sa.sin_addr);
		fd = socket(AF_INET, SOCK_STREAM, 0);
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			r.err = errno;
		} else {
			end = mono_ns() + (uint64_t)(SEND_S * 1e9);
			memset(buf, 'k', sizeof(buf));
			for (int i = 0; i < 1000000 && mono_ns() < end; i++) {
				ssize_t n = send(fd, buf, sizeof(buf), MSG_NOSIGNAL);

				if (n > 0)
					r.sent += (uint64_t)n;
				else if (n < 0 && (errno == ECONNRESET || errno == EPIPE))
					break; /* the server's window is over */
				else if (n < 0 && errno != EAGAIN && errno != EINTR) {
					r.err = errno;
					break;
				}
			}
			memset(&ti, 0, sizeof(ti));
			if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0)
				r.total_retrans = ti.tcpi_total_retrans;
		}
		if (write(p[1], &r, sizeof(r)) != (ssize_t)sizeof(r))
			_exit(4);
		_exit(0);
	}
	close(p[1]);
	struct pollfd pf = { .fd = p[0], .events = POLLIN };
	assert_int_equal(poll(&pf, 1, 20000), 1);
	assert_int_equal(read(p[0], res, sizeof(*res)), (ssize_t)sizeof(*res));
	close(p[0]);
	assert_int_equal(waitpid(fx.client, &st, 0), fx.client);
	fx.client = -1;
}

/* One upload under a byte limit of `burst`, with fq on the device or
 * without (the fq variant skips on a kernel without fq). */
static void run_burst(double burst, bool with_fq)
{
	char body[1024], name[32];
	struct client_result c;
	struct srv_result s;

	KTEST_SKIP_UNLESS_ROOT();
	assert_true(net_up);
	if (with_fq && !fq_ok) {
		print_message("skipped: no fq qdisc on this kernel (CONFIG_NET_SCH_FQ)\n");
		skip();
	}
	if (!with_fq && has_fq())
		assert_int_equal(cmd("tc", "qdisc", "del", "dev", veth_h, "root", NULL), 0);
	assert_true(has_fq() == with_fq);
	snprintf(name, sizeof(name), "tcpb%.0f", burst);
	assert_int_equal(ktest_cgroup_create(name, fx.cg, sizeof(fx.cg)), 0);
	snprintf(body, sizeof(body),
		 "limits:\n"
		 "  - name: tcp-bytes\n"
		 "    cgroups: [%s]\n"
		 "    match: {cidrs: [%s/32], ports: %d, protocol: tcp}\n"
		 "    unit: byte\n"
		 "    burst: %.0f\n"
		 "    rateLimit: {max: %.0f}\n",
		 fx.cg, ip_n, PORT, burst, RATE);
	fx.d_used = true;
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);

	upload(fx.cg, &c);
	struct pollfd pf = { .fd = result_fd, .events = POLLIN };
	assert_int_equal(poll(&pf, 1, 20000), 1);
	assert_int_equal(read(result_fd, &s, sizeof(s)), (ssize_t)sizeof(s));

	double rate = (double)s.bytes / UPLOAD_S;
	double cap = RATE * UPLOAD_S + burst + MSS_SLACK;
	print_message("burst %7.0f B, fq %s: received %llu B in %.3f s (last byte at %.3f s) = "
		      "%.3f MB/s (%.1f%% of the rate; cap %.0f B), sent %llu B, retransmits %u, "
		      "client err %d\n",
		      burst, has_fq() ? "yes" : "no", (unsigned long long)s.bytes, UPLOAD_S, s.secs,
		      rate / 1e6, 100.0 * rate / RATE, cap, (unsigned long long)c.sent,
		      c.total_retrans, c.err);
	assert_int_equal(c.err, 0);
	assert_true((double)s.bytes <= cap);
	assert_true(rate >= 0.9 * RATE);
}

static void test_fq_burst_16k(void **state)
{
	(void)state;
	run_burst(16384, true);
}

static void test_fq_burst_64k(void **state)
{
	(void)state;
	run_burst(65536, true);
}

static void test_fq_burst_128k(void **state)
{
	(void)state;
	run_burst(131072, true);
}

static void test_fq_burst_1m(void **state)
{
	(void)state;
	run_burst(1048576, true);
}

/* Without fq: last, as they take fq off the device. */
static void test_nofq_burst_16k(void **state)
{
	(void)state;
	run_burst(16384, false);
}

static void test_nofq_burst_64k(void **state)
{
	(void)state;
	run_burst(65536, false);
}

static void test_nofq_burst_128k(void **state)
{
	(void)state;
	run_burst(131072, false);
}

static void test_nofq_burst_1m(void **state)
{
	(void)state;
	run_burst(1048576, false);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_fq_burst_16k, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fq_burst_64k, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fq_burst_128k, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fq_burst_1m, setup, teardown),
		cmocka_unit_test_setup_teardown(test_nofq_burst_16k, setup, teardown),
		cmocka_unit_test_setup_teardown(test_nofq_burst_64k, setup, teardown),
		cmocka_unit_test_setup_teardown(test_nofq_burst_128k, setup, teardown),
		cmocka_unit_test_setup_teardown(test_nofq_burst_1m, setup, teardown),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
