// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* A real kthrottled on a kernel that refuses one feature
 * (KT_REFUSE_FEATURES, the loader's test hook: the feature's load fails
 * with EPERM as a kernel's refusal would):
 *   - egress refused: the daemon starts; its connection limit still
 *     refuses connects beyond its burst at a real listener, while all of
 *     a packet limit's datagrams reach their receiver (nothing can enforce
 *     it, and status says so: NOT ENFORCED, kernel_enforced false); no
 *     kt_egress link is pinned; health is ready with warnings naming
 *     egress and the unenforced limit; kthrottle_kernel_feature says 0
 *     for egress, 1 for connect; the log says it once;
 *   - the in-flight audit refused: an in-flight limit of 3 still refuses
 *     the 4th and 5th connection held open; status names inflight_audit
 *     off and the limit as degraded; health warns;
 *   - every object refused: the daemon exits at start with one line
 *     naming the reason (and no BTF hint), leaving no pin directory. */
#include <errno.h>
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

#define REFUSE_ENV "KT_REFUSE_FEATURES"
#define CONNECTS 10
#define DATAGRAMS 40
#define HELD 5

static struct fixture {
	struct ktest_daemon d;
	char cg[PATH_MAX];
	int metrics_port;
} fx;

static int setup(void **state)
{
	int r = kt_daemonfx_setup(&fx, sizeof(fx), &fx.d, "feat", fx.cg, sizeof(fx.cg));

	(void)state;
	fx.metrics_port = ktest_free_port(SOCK_STREAM);
	return r;
}

static int teardown(void **state)
{
	(void)state;
	unsetenv(REFUSE_ENV);
	kt_daemonfx_end(&fx.d, fx.cg);
	return 0;
}

static int bound_socket(int type, int *port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(sa);
	int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    getsockname(fd, (struct sockaddr *)&sa, &l) || (type == SOCK_STREAM && listen(fd, 64))) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	*port = ntohs(sa.sin_port);
	return fd;
}

/* What a child in the member cgroup did: connects to tcp_port (held open
 * when hold), datagrams to udp_port. */
struct seen {
	int connected, refused, other;
	int sent;
};

static void run_child(int tcp_port, int n_connect, bool hold, int udp_port, int n_dgram,
		      struct seen *out)
{
	int p[2], status;
	pid_t pid;

	assert_int_equal(pipe(p), 0);
	pid = kt_daemonfx_fork_bounded();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		struct seen s = { 0 };
		int held[CONNECTS];

		if (ktest_cgroup_join(fx.cg))
			_exit(3);
		sa.sin_port = htons(tcp_port);
		for (int i = 0; i < n_connect && i < CONNECTS; i++) {
			int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

			held[i] = -1;
			if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
				s.connected++;
			else if (errno == EBUSY)
				s.refused++;
			else
				s.other++;
			if (hold)
				held[i] = fd;
			else
				close(fd);
		}
		sa.sin_port = htons(udp_port);
		for (int i = 0; i < n_dgram; i++) {
			int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

			s.sent += sendto(fd, "x", 1, 0, (struct sockaddr *)&sa, sizeof(sa)) == 1;
			close(fd);
		}
		_exit(write(p[1], &s, sizeof(s)) == (ssize_t)sizeof(s) ? 0 : 4);
		(void)held;
	}
	close(p[1]);
	assert_int_equal(read(p[0], out, sizeof(*out)), (ssize_t)sizeof(*out));
	close(p[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Datagrams waiting at fd, read within 1 s of the last. */
static int drain(int fd)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	char buf[64];
	int n = 0;

	while (poll(&pfd, 1, 1000) == 1 && recv(fd, buf, sizeof(buf), 0) >= 0)
		n++;
	return n;
}

static void assert_has(const char *text, const char *what, const char *want)
{
	if (!strstr(text, want))
		fail_msg("no '%s' in %s:\n%s", want, what, text);
}

static char *ctl(const char *cmd, int *rc)
{
	char *out = NULL;

	*rc = ktest_run_bin("kthrottlectl", &out, "--socket", fx.d.socket, cmd, NULL);
	assert_non_null(out);
	return out;
}

static void test_egress_refused(void **state)
{
	char body[2048], *out, *page, links[400];
	int lport, uport, lfd, ufd, rc, got;
	struct seen s;

	(void)state;
	if (ktest_root_unavailable())
		skip();
	lfd = bound_socket(SOCK_STREAM, &lport);
	ufd = bound_socket(SOCK_DGRAM, &uport);
	assert_true(lfd >= 0 && ufd >= 0);
	snprintf(body, sizeof(body),
		 "metrics: 127.0.0.1:%d\n"
		 "limits:\n"
		 "  - {name: conns, cgroups: [%s], unit: connection, burst: 2,\n"
		 "     match: {cidrs: [127.0.0.1/32], ports: %d}, rateLimit: {max: 2}}\n"
		 "  - {name: pkts, cgroups: [%s], unit: packet, burst: 2,\n"
		 "     match: {cidrs: [127.0.0.1/32], ports: %d}, rateLimit: {max: 2}}\n",
		 fx.metrics_port, fx.cg, lport, fx.cg, uport);
	setenv(REFUSE_ENV, "egress", 1);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);

	run_child(lport, CONNECTS, false, uport, DATAGRAMS, &s);
	got = drain(ufd);
	print_message("egress refused: connects %d admitted, %d refused (%d other); datagrams %d of %d arrived\n",
		      s.connected, s.refused, s.other, got, s.sent);
	/* the connection limit holds: its burst and at most one token more */
	assert_true(s.connected >= 2 && s.connected <= 3);
	assert_int_equal(s.refused + s.connected, CONNECTS);
	/* the packet limit cannot: every datagram arrives */
	assert_int_equal(s.sent, DATAGRAMS);
	assert_int_equal(got, DATAGRAMS);

	out = ctl("status", &rc);
	assert_int_equal(rc, 0);
	assert_has(out, "status", "features on: connect sendmsg sock sockops");
	assert_has(out, "status", "off: egress");
	assert_has(out, "status", "  feature egress off: Operation not permitted");
	assert_has(out, "status", "  NOT ENFORCED: the kernel refused feature egress");
	free(out);
	out = ktest_daemon_cmd(&fx.d, "status json");
	assert_non_null(out);
	assert_has(out, "status json", "\"egress\":{\"state\":\"off\",\"why\":\"Operation not permitted");
	assert_has(out, "status json", "\"connect\":{\"state\":\"on\"}");
	assert_true(!strncmp(ktest_json_limit_field(out, "pkts", "kernel_enforced"), "false,", 6));
	assert_true(!strncmp(ktest_json_limit_field(out, "conns", "kernel_enforced"), "true,", 5));
	free(out);

	/* nothing of egress linked; connect is */
	snprintf(links, sizeof(links), "%s/links", fx.d.pin_dir);
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "ls %s | grep -q -- -kt_egress", links);
	assert_int_not_equal(system(cmd), 0);
	snprintf(cmd, sizeof(cmd), "ls %s | grep -q -- -kt_connect4", links);
	assert_int_equal(system(cmd), 0);

	out = ctl("health", &rc);
	print_message("health: %s", out);
	assert_int_equal(rc, 0); /* ready */
	assert_true(!strncmp(out, "ready\nkernel ok\n", 16));
	assert_has(out, "health", "\nwarning kernel feature egress off: Operation not permitted");
	assert_has(out, "health", "\nwarning 1 limit(s) not enforced by this kernel, e.g. pkts\n");
	free(out);

	assert_int_equal(ktest_http_get(fx.metrics_port, "/metrics", &page), 200);
	assert_has(page, "metrics", "\nkthrottle_kernel_feature{feature=\"egress\"} 0\n");
	assert_has(page, "metrics", "\nkthrottle_kernel_feature{feature=\"connect\"} 1\n");
	assert_has(page, "metrics", "\nkthrottle_ready 1\n");
	free(page);

	page = ktest_slurp(fx.d.log);
	assert_non_null(page);
	assert_has(page, "the log", "kernel feature egress off: Operation not permitted");
	assert_null(strstr(strstr(page, "kernel feature egress off") + 1, "kernel feature egress off"));
	free(page);
	close(lfd);
	close(ufd);
}

static void test_audit_refused(void **state)
{
	char body[2048], *out;
	int lport, lfd, rc;
	struct seen s;
	uint64_t until;

	(void)state;
	if (ktest_root_unavailable())
		skip();
	lfd = bound_socket(SOCK_STREAM, &lport);
	assert_true(lfd >= 0);
	snprintf(body, sizeof(body),
		 "limits:\n"
		 "  - name: llm\n"
		 "    cgroups: [%s]\n"
		 "    unit: concurrent\n"
		 "    match: {cidrs: [127.0.0.1/32], ports: %d, protocol: tcp}\n"
		 "    rateLimit: {max: 3}\n",
		 fx.cg, lport);
	setenv(REFUSE_ENV, "inflight_audit", 1);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
	run_child(lport, HELD, true, 0, 0, &s);
	print_message("audit refused: %d held open, %d refused\n", s.connected, s.refused);
	assert_int_equal(s.connected, 3);
	assert_int_equal(s.refused, HELD - 3);

	/* the audit is tried on the first tick with an in-flight limit */
	until = ktest_now_ns() + 5000000000ull;
	do {
		out = ctl("status", &rc);
		if (strstr(out, "off: inflight_audit") || ktest_now_ns() > until)
			break;
		free(out);
		ktest_sleep_ms(100);
	} while (1);
	assert_has(out, "status", "off: inflight_audit");
	assert_has(out, "status", "  degraded: feature inflight_audit off: in-flight open counts are not audited");
	assert_null(strstr(out, "NOT ENFORCED"));
	free(out);
	out = ctl("health", &rc);
	assert_int_equal(rc, 0);
	assert_has(out, "health", "\nwarning kernel feature inflight_audit off: in-flight audit: cannot load its programs");
	assert_null(strstr(out, "not enforced by this kernel"));
	free(out);
	close(lfd);
}

static void test_all_refused(void **state)
{
	char body[1024], *log;
	int code = 0;

	(void)state;
	if (ktest_root_unavailable())
		skip();
	setenv(REFUSE_ENV, "connect,sendmsg,egress,sock,sockops", 1);
	assert_int_equal(ktest_daemon_init(&fx.d), 0);
	assert_int_equal(ktest_daemon_config(&fx.d, kt_daemonfx_ok_body(body, sizeof(body), fx.cg)), 0);
	assert_int_not_equal(ktest_daemon_start(&fx.d, 10000, &code), 0);
	assert_int_not_equal(code, 0);
	log = ktest_slurp(fx.d.log);
	assert_non_null(log);
	print_message("every object refused: %s", log);
	assert_has(log, "the log", "cannot load BPF programs: Operation not permitted");
	assert_null(strstr(log, "BTF"));
	free(log);
	assert_int_not_equal(access(fx.d.pin_dir, F_OK), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_egress_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_audit_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_all_refused, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
