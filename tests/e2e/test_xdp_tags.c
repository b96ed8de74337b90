// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The XDP tag buckets on a real interface: two network namespaces joined by
 * a veth pair (kt-x<pid>a in the server namespace, kt-x<pid>b in the
 * client's), the program attached to the server side through xdp_maps.c
 * with a pinned link. The client sends UDP from three addresses: a paced
 * one (admitted ~ burst + rate x elapsed), one in a burst (admitted ~
 * burst), and an allowlisted one (all of it). The server counts what it
 * receives per source. Namespaces, links and pins are removed in the
 * teardown whatever happened. Needs root and `ip`; skipped otherwise. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "kthrottle.h"
#include "kt_bpffx.h"
#include "ktest.h"
#include "tags/xdp_maps.h"

#define LIM 0
#define RATE 100.0 /* tokens/s */
#define BURST 20
#define SERVER "10.200.77.1"
#define SRC_PACED "10.200.77.2"
#define SRC_BURST "10.200.77.3"
#define SRC_ALLOW "10.200.77.4"
#define PORT 9999

struct fx {
	char ns_s[32], ns_c[32], veth_s[IFNAMSIZ], veth_c[IFNAMSIZ];
	char pin[PATH_MAX];
	struct kt_xdp_tags *t;
	int ifindex; /* of veth_s, in the server namespace */
	bool attached, made;
	int self_ns; /* this process's own network namespace */
	int fds[4];
};

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;
	int rc;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	rc = system(cmd);
	if (rc != 0)
		print_message("command failed (%d): %s\n", rc, cmd);
	return rc;
}

static int enter_ns(const char *name)
{
	char p[64];
	int fd, rc;

	snprintf(p, sizeof(p), "/var/run/netns/%s", name);
	fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	rc = setns(fd, CLONE_NEWNET);
	close(fd);
	return rc < 0 ? -errno : 0;
}

static int fx_setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	int pid = getpid();

	if (!f)
		return -1;
	snprintf(f->ns_s, sizeof(f->ns_s), "kt-x%ds", pid);
	snprintf(f->ns_c, sizeof(f->ns_c), "kt-x%dc", pid);
	snprintf(f->veth_s, sizeof(f->veth_s), "kt-x%da", pid);
	snprintf(f->veth_c, sizeof(f->veth_c), "kt-x%db", pid);
	snprintf(f->pin, sizeof(f->pin), "/sys/fs/bpf/kt-test-%d-xdpe2e", pid);
	f->self_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	for (int i = 0; i < 4; i++)
		f->fds[i] = -1;
	*state = f;
	return f->self_ns < 0 ? -1 : 0;
}

static int fx_teardown(void **state)
{
	struct fx *f = *state;
	for (int i = 0; i < 4; i++)
		if (f->fds[i] >= 0)
			close(f->fds[i]);
	if (f->attached && f->t && enter_ns(f->ns_s) == 0) {
		if (kt_xdp_tags_detach(f->t, f->ifindex) != 0)
			print_error("detach failed\n");
	}
	if (setns(f->self_ns, CLONE_NEWNET) < 0)
		print_error("cannot return to the test's namespace: %s\n", strerror(errno));
	kt_xdp_tags_close(f->t);
	if (f->made) {
		/* deleting a namespace deletes its end of the veth, and so the pair */
		sh("ip netns del %s 2>/dev/null", f->ns_s);
		sh("ip netns del %s 2>/dev/null", f->ns_c);
	}
	kt_bpffx_rm_pins(f->pin);
	close(f->self_ns);
	free(f);
	return 0;
}

static int udp_socket(const char *addr, int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	int big = 4 << 20;

	assert_true(fd >= 0);
	assert_int_equal(inet_pton(AF_INET, addr, &sa.sin_addr), 1);
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

struct counts {
	int paced, burst, allow, other;
};

static void drain(int fd, struct counts *c, int timeout_ms)
{
	struct sockaddr_in from;
	socklen_t fl;
	char buf[64];
	uint32_t a_paced, a_burst, a_allow;
	int i;

	inet_pton(AF_INET, SRC_PACED, &a_paced);
	inet_pton(AF_INET, SRC_BURST, &a_burst);
	inet_pton(AF_INET, SRC_ALLOW, &a_allow);
	for (i = 0; i < 100000; i++) { /* bounded */
		fl = sizeof(from);
		if (recvfrom(fd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &fl) < 0) {
			struct pollfd p = { .fd = fd, .events = POLLIN };

			if (errno != EAGAIN || poll(&p, 1, timeout_ms) <= 0)
				return;
			continue;
		}
		if (from.sin_addr.s_addr == a_paced)
			c->paced++;
		else if (from.sin_addr.s_addr == a_burst)
			c->burst++;
		else if (from.sin_addr.s_addr == a_allow)
			c->allow++;
		else
			c->other++;
	}
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void send_one(int fd)
{
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(PORT) };

	inet_pton(AF_INET, SERVER, &to.sin_addr);
	assert_int_equal(sendto(fd, "x", 1, 0, (struct sockaddr *)&to, sizeof(to)), 1);
}

static void test_xdp_tags_netns(void **state)
{
	struct fx *f = *state;
	struct kt_xdp_tags_stats st;
	struct counts c = { 0 };
	struct timespec gap = { 0, 3 * 1000 * 1000 };
	uint8_t allow[16] = { 0 };
	int srv, cp, cb, ca, i, n_paced = 0, n_allow = 0, n_burst = 0;
	uint64_t t0, t1;
	double elapsed, want;

	KTEST_SKIP_UNLESS_ROOT();
	if (system("ip -V >/dev/null 2>&1") != 0) {
		print_message("skipped: the ip command (iproute2) is missing\n");
		skip();
	}
	f->made = true;
	assert_int_equal(sh("ip netns add %s", f->ns_s), 0);
	assert_int_equal(sh("ip netns add %s", f->ns_c), 0);
	/* no IPv6 on the pair: its neighbour discovery would be charged too */
	assert_int_equal(sh("ip netns exec %s sysctl -qw net.ipv6.conf.default.disable_ipv6=1 "
			    "net.ipv6.conf.all.disable_ipv6=1", f->ns_s), 0);
	assert_int_equal(sh("ip netns exec %s sysctl -qw net.ipv6.conf.default.disable_ipv6=1 "
			    "net.ipv6.conf.all.disable_ipv6=1", f->ns_c), 0);
	assert_int_equal(sh("ip link add %s netns %s type veth peer name %s netns %s", f->veth_s,
			    f->ns_s, f->veth_c, f->ns_c), 0);
	assert_int_equal(sh("ip -n %s addr add %s/24 dev %s && ip -n %s link set %s up && "
			    "ip -n %s link set lo up", f->ns_s, SERVER, f->veth_s, f->ns_s, f->veth_s,
			    f->ns_s), 0);
	assert_int_equal(sh("ip -n %s addr add %s/24 dev %s && ip -n %s addr add %s/24 dev %s && "
			    "ip -n %s addr add %s/24 dev %s && ip -n %s link set %s up", f->ns_c,
			    SRC_PACED, f->veth_c, f->ns_c, SRC_BURST, f->veth_c, f->ns_c, SRC_ALLOW,
			    f->veth_c, f->ns_c, f->veth_c), 0);

	/* the program, attached on the server side (an ifindex is per namespace) */
	assert_int_equal(kt_xdp_tags_open(f->pin, 1024, &f->t), 0);
	assert_int_equal(enter_ns(f->ns_s), 0);
	f->ifindex = (int)if_nametoindex(f->veth_s);
	assert_true(f->ifindex > 0);
	assert_int_equal(kt_xdp_tags_attach(f->t, f->ifindex), 0);
	f->attached = true;
	srv = f->fds[0] = udp_socket(SERVER, PORT);
	assert_int_equal(enter_ns(f->ns_c), 0);
	cp = f->fds[1] = udp_socket(SRC_PACED, 0);
	cb = f->fds[2] = udp_socket(SRC_BURST, 0);
	ca = f->fds[3] = udp_socket(SRC_ALLOW, 0);
	assert_int_equal(setns(f->self_ns, CLONE_NEWNET), 0);

	/* warm up ARP with the interface not yet charged (no entry: passes) */
	send_one(cp);
	send_one(cb);
	send_one(ca);
	drain(srv, &c, 500);
	assert_int_equal(c.paced + c.burst + c.allow, 3);
	memset(&c, 0, sizeof(c));

	assert_int_equal(kt_xdp_tags_set_limit(f->t, LIM, RATE, BURST), 0);
	inet_pton(AF_INET, SRC_ALLOW, allow);
	assert_int_equal(kt_xdp_tags_set_rule(f->t, LIM, 4, allow, 32, 1, 0, 0), 0);
	assert_int_equal(kt_xdp_tags_set_iface(f->t, f->ifindex, LIM, 32, 128), 0);

	/* 300 paced (about 300/s), 100 in a burst at the start, 300 allowlisted */
	t0 = mono_ns();
	for (i = 0; i < 100; i++, n_burst++)
		send_one(cb);
	for (i = 0; i < 300; i++) {
		send_one(cp);
		send_one(ca);
		n_paced++;
		n_allow++;
		drain(srv, &c, 0);
		nanosleep(&gap, NULL);
	}
	t1 = mono_ns();
	drain(srv, &c, 300);

	elapsed = (double)(t1 - t0) / 1e9;
	want = BURST + RATE * elapsed;
	print_message("%.3f s: paced %d of %d (expected %.1f), burst %d of %d, allowlisted %d of %d\n",
		      elapsed, c.paced, n_paced, want, c.burst, n_burst, c.allow, n_allow);
	assert_int_equal(c.other, 0);
	assert_true(c.paced >= (int)(want * 0.9) - 2 && c.paced <= (int)(want * 1.1) + 2);
	assert_true(c.paced < n_paced);
	/* the burst goes out within a few ms: about BURST, a token or two more */
	assert_true(c.burst >= BURST && c.burst <= BURST + 3);
	assert_int_equal(c.allow, n_allow);
	assert_int_equal(kt_xdp_tags_stats(f->t, LIM, &st), 0);
	assert_int_equal(st.admitted, (uint64_t)(c.paced + c.burst));
	assert_int_equal(st.dropped, (uint64_t)(n_paced + n_burst - c.paced - c.burst));
	assert_int_equal(st.buckets, 3);

	/* a restarted daemon: a new handle on the same pins takes the link
	 * over in place; the bucket (refilled to its burst by now) still limits */
	struct kt_xdp_tags *t2 = NULL;
	assert_int_equal(kt_xdp_tags_open(f->pin, 1024, &t2), 0);
	kt_xdp_tags_close(f->t);
	f->t = t2;
	assert_int_equal(enter_ns(f->ns_s), 0);
	assert_int_equal(kt_xdp_tags_attach(f->t, f->ifindex), 0);
	assert_int_equal(setns(f->self_ns, CLONE_NEWNET), 0);
	memset(&c, 0, sizeof(c));
	for (i = 0; i < 40; i++)
		send_one(cb);
	drain(srv, &c, 300);
	assert_true(c.burst >= BURST && c.burst <= BURST + 3);

	/* detach: everything passes again */
	assert_int_equal(enter_ns(f->ns_s), 0);
	assert_int_equal(kt_xdp_tags_detach(f->t, f->ifindex), 0);
	f->attached = false;
	assert_int_equal(setns(f->self_ns, CLONE_NEWNET), 0);
	memset(&c, 0, sizeof(c));
	for (i = 0; i < 30; i++)
		send_one(cb);
	drain(srv, &c, 300);
	assert_int_equal(c.burst, 30);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_xdp_tags_netns, fx_setup, fx_teardown),
	};
	return cmocka_run_group_tests_name("e2e_xdp_tags", tests, NULL, NULL);
}
