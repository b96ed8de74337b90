// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* One limit of each unit the kernel enforces, on one daemon, each flooded
 * from a process in the member cgroup and counted where the traffic
 * arrives, on loopback:
 *   connection  TCP connects, counted by the listener's accept queue;
 *   datagram    unconnected UDP sendto, counted by the receiver;
 *   packet      a connected UDP socket's sends, counted by the receiver;
 *   byte        one TCP stream, the bytes a reading server got within
 *               FLOOD_S of the first (bound: one 64 KiB GSO packet of
 *               debt more);
 *   concurrent  connections held open, counted by the listener.
 * Each rate unit: what arrived is at most max x the flood's duration +
 * burst, and the limit refused or held back part of the flood. The
 * in-flight limit: at most max connections ever accepted. The bounds
 * hold however slowly the machine runs (the kernel's buckets follow the
 * clock), so the kernel matrix runs this test in every guest, emulated
 * or not. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "kt_daemonfx.h"
#include "ktest.h"

#define RATE 20.0     /* connections, datagrams, packets per second */
#define BURST 5
#define BYTE_RATE 100000.0
#define BYTE_BURST 131072 /* two of loopback's 64 KiB GSO packets */
#define GSO_MAX 65536     /* a packet larger than what is left is admitted as debt */
#define INFLIGHT_MAX 3
#define HELD 6
#define FLOOD_S 2.0
#define FLOOD_MAX 1000000 /* attempts per unit, whatever the speed */

enum { U_CONN, U_DGRAM, U_PKT, U_BYTE, U_INFL, N_UNITS };
static const char *const unit_names[N_UNITS] = { "connection", "datagram", "packet", "byte",
						 "concurrent" };

static struct fixture {
	struct ktest_daemon d;
	char cg[PATH_MAX];
	int fd[N_UNITS];
	int port[N_UNITS];
} fx;

static int bound(int type, int *port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(sa);
	int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0), big = 1 << 20;

	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || getsockname(fd, (struct sockaddr *)&sa, &l) ||
	    (type == SOCK_STREAM && listen(fd, 4096))) {
		close(fd);
		return -1;
	}
	*port = ntohs(sa.sin_port);
	return fd;
}

static int setup(void **state)
{
	(void)state;
	if (kt_daemonfx_setup(&fx, sizeof(fx), &fx.d, "units", fx.cg, sizeof(fx.cg)))
		return -1;
	for (int u = 0; u < N_UNITS; u++) {
		bool tcp = u == U_CONN || u == U_BYTE || u == U_INFL;

		fx.fd[u] = bound(tcp ? SOCK_STREAM : SOCK_DGRAM, &fx.port[u]);
		if (fx.fd[u] < 0)
			return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	for (int u = 0; u < N_UNITS; u++)
		if (fx.fd[u] > 0)
			close(fx.fd[u]);
	kt_daemonfx_end(&fx.d, fx.cg);
	return 0;
}

/* What the flooding child did, per unit. */
struct flood {
	uint64_t attempts[N_UNITS], refused[N_UNITS];
	double secs[N_UNITS];
	uint64_t byte_sent;
	int held;
};

static struct sockaddr_in to(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	return sa;
}

static double since(uint64_t t0)
{
	return (double)(ktest_now_ns() - t0) / 1e9;
}

/* In the member cgroup: each unit's flood in turn, bounded in time and count. */
static void flood_child(struct flood *f)
{
	struct sockaddr_in sa;
	uint64_t t0;
	char buf[1024];
	int fd;

	memset(buf, 'k', sizeof(buf));
	/* connection: a connect a time, closed at once */
	sa = to(fx.port[U_CONN]);
	t0 = ktest_now_ns();
	for (int i = 0; i < FLOOD_MAX && since(t0) < FLOOD_S; i++) {
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		f->attempts[U_CONN]++;
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
			f->refused[U_CONN]++;
		close(fd);
	}
	f->secs[U_CONN] = since(t0);
	/* datagram: unconnected sendto */
	sa = to(fx.port[U_DGRAM]);
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	t0 = ktest_now_ns();
	for (int i = 0; i < FLOOD_MAX && since(t0) < FLOOD_S; i++) {
		f->attempts[U_DGRAM]++;
		if (sendto(fd, buf, 32, 0, (struct sockaddr *)&sa, sizeof(sa)) < 0)
			f->refused[U_DGRAM]++;
	}
	f->secs[U_DGRAM] = since(t0);
	close(fd);
	/* packet: a connected UDP socket's sends (egress) */
	sa = to(fx.port[U_PKT]);
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		t0 = ktest_now_ns();
		for (int i = 0; i < FLOOD_MAX && since(t0) < FLOOD_S; i++) {
			f->attempts[U_PKT]++;
			if (send(fd, buf, 32, 0) < 0)
				f->refused[U_PKT]++;
		}
		f->secs[U_PKT] = since(t0);
	}
	close(fd);
	/* byte: one TCP stream, written without blocking for FLOOD_S */
	sa = to(fx.port[U_BYTE]);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		fcntl(fd, F_SETFL, O_NONBLOCK);
		t0 = ktest_now_ns();
		while (since(t0) < FLOOD_S) {
			ssize_t w = send(fd, buf, sizeof(buf), MSG_NOSIGNAL);

			f->attempts[U_BYTE]++;
			if (w > 0)
				f->byte_sent += (uint64_t)w;
			else
				ktest_sleep_ms(5); /* the send buffer is full: TCP is held */
		}
		f->secs[U_BYTE] = since(t0);
	}
	close(fd);
	/* concurrent: HELD connections kept open until the report is sent */
	sa = to(fx.port[U_INFL]);
	for (int i = 0; i < HELD; i++) {
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		f->attempts[U_INFL]++;
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			f->held++; /* left open: closed when the child exits */
		else
			f->refused[U_INFL]++;
	}
}

/* Connections waiting in a listener's accept queue, each accepted. */
static int accept_all(int lfd)
{
	int n = 0, c;

	fcntl(lfd, F_SETFL, O_NONBLOCK);
	while ((c = accept(lfd, NULL, NULL)) >= 0) {
		n++;
		close(c);
	}
	return n;
}

static int drain(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char b[64];
	int n = 0;

	while (poll(&p, 1, 200) == 1 && recv(fd, b, sizeof(b), MSG_DONTWAIT) >= 0)
		n++;
	return n;
}

/* The byte unit's reading server: accepts one connection and counts what
 * arrives within FLOOD_S of its first byte (TCP still delivers what the
 * client queued after it stopped writing); the count through out. */
static pid_t byte_server(int *out)
{
	int p[2];
	pid_t pid;

	assert_int_equal(pipe(p), 0);
	pid = kt_daemonfx_fork_bounded();
	assert_true(pid >= 0);
	if (pid == 0) {
		uint64_t got = 0, t0 = ktest_now_ns(), first = 0;
		struct pollfd pf = { .fd = fx.fd[U_BYTE], .events = POLLIN };
		char b[65536];
		int c = -1;

		close(p[0]);
		if (poll(&pf, 1, (int)(4 * FLOOD_S * 1000)) == 1)
			c = accept(fx.fd[U_BYTE], NULL, NULL);
		while (c >= 0 && since(t0) < 4 * FLOOD_S) {
			struct pollfd pc = { .fd = c, .events = POLLIN };
			ssize_t r;

			if (poll(&pc, 1, 500) != 1)
				continue;
			r = recv(c, b, sizeof(b), 0);
			if (r <= 0)
				break;
			if (!first)
				first = ktest_now_ns();
			if (since(first) <= FLOOD_S)
				got += (uint64_t)r;
		}
		_exit(write(p[1], &got, sizeof(got)) == (ssize_t)sizeof(got) ? 0 : 4);
	}
	close(p[1]);
	*out = p[0];
	return pid;
}

static void test_every_unit(void **state)
{
	char body[4096];
	struct flood f;
	int p[2], status, bfd;
	pid_t pid, bpid;
	uint64_t got[N_UNITS] = { 0 };

	(void)state;
	if (ktest_root_unavailable())
		skip();
	snprintf(body, sizeof(body),
		 "tickInterval: 100ms\n"
		 "limits:\n"
		 "  - {name: u-conn, cgroups: [%s], unit: connection, burst: %d,\n"
		 "     match: {cidrs: [127.0.0.1/32], ports: %d, protocol: tcp}, rateLimit: {max: %g}}\n"
		 "  - {name: u-dgram, cgroups: [%s], unit: datagram, burst: %d,\n"
		 "     match: {cidrs: [127.0.0.1/32], ports: %d, protocol: udp}, rateLimit: {max: %g}}\n"
		 "  - {name: u-pkt, cgroups: [%s], unit: packet, burst: %d,\n"
		 "     match: {cidrs: [127.0.0.1/32], ports: %d, protocol: udp}, rateLimit: {max: %g}}\n"
		 "  - {name: u-byte, cgroups: [%s], unit: byte, burst: %d,\n"
		 "     match: {cidrs: [127.0.0.1/32], ports: %d, protocol: tcp}, rateLimit: {max: %g}}\n"
		 "  - {name: u-infl, cgroups: [%s], unit: concurrent,\n"
		 "     match: {cidrs: [127.0.0.1/32], ports: %d, protocol: tcp}, rateLimit: {max: %d}}\n",
		 fx.cg, BURST, fx.port[U_CONN], RATE, fx.cg, BURST, fx.port[U_DGRAM], RATE, fx.cg, BURST,
		 fx.port[U_PKT], RATE, fx.cg, BYTE_BURST, fx.port[U_BYTE], BYTE_RATE, fx.cg,
		 fx.port[U_INFL], INFLIGHT_MAX);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);

	bpid = byte_server(&bfd);
	/* both ways: the report, then the parent's close lets the child go */
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p), 0);
	pid = kt_daemonfx_fork_bounded();
	assert_true(pid >= 0);
	if (pid == 0) {
		memset(&f, 0, sizeof(f));
		close(p[0]);
		if (ktest_cgroup_join(fx.cg))
			_exit(3);
		flood_child(&f);
		if (write(p[1], &f, sizeof(f)) != (ssize_t)sizeof(f))
			_exit(4);
		/* the held connections stay open until the parent has counted */
		char c;
		(void)!read(p[1], &c, 1);
		_exit(0);
	}
	assert_int_equal(read(p[0], &f, sizeof(f)), (ssize_t)sizeof(f));
	got[U_CONN] = (uint64_t)accept_all(fx.fd[U_CONN]);
	got[U_DGRAM] = (uint64_t)drain(fx.fd[U_DGRAM]);
	got[U_PKT] = (uint64_t)drain(fx.fd[U_PKT]);
	got[U_INFL] = (uint64_t)accept_all(fx.fd[U_INFL]);
	close(p[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(read(bfd, &got[U_BYTE], sizeof(got[U_BYTE])), (ssize_t)sizeof(got[U_BYTE]));
	close(bfd);
	assert_int_equal(waitpid(bpid, &status, 0), bpid);

	for (int u = 0; u < N_UNITS; u++) {
		double rate = u == U_BYTE ? BYTE_RATE : RATE, burst = u == U_BYTE ? BYTE_BURST : BURST;
		double bound = u == U_INFL   ? INFLIGHT_MAX
			       : u == U_BYTE ? rate * FLOOD_S + burst + GSO_MAX
					     : rate * f.secs[u] + burst;

		print_message("%-10s %6llu arrived of %6llu attempts (%llu refused at the call) in %.2f s; bound %.0f\n",
			      unit_names[u], (unsigned long long)got[u],
			      (unsigned long long)(u == U_BYTE ? f.byte_sent : f.attempts[u]),
			      (unsigned long long)f.refused[u], f.secs[u], bound);
		/* a unit measured on no flood proves nothing */
		assert_true(u == U_INFL || f.secs[u] > 0);
		assert_true(got[u] > 0);
		assert_true((double)got[u] <= bound + (u == U_BYTE ? 0 : 1));
	}
	/* each limit acted: the call was refused, or (bytes) TCP was held
	 * back below what the application wrote */
	assert_true(f.refused[U_CONN] > 0);
	assert_true(f.refused[U_DGRAM] > 0);
	assert_true(f.refused[U_PKT] > 0);
	assert_int_equal(f.held, INFLIGHT_MAX);
	assert_int_equal(f.refused[U_INFL], HELD - INFLIGHT_MAX);
	assert_int_equal(got[U_INFL], INFLIGHT_MAX);
	assert_true(got[U_BYTE] < f.byte_sent);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_every_unit, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
