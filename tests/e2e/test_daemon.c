// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* End-to-end with the real daemon: a test cgroup, build/kthrottled on a temp
 * config, kt-load inside (and outside) the cgroup sending real UDP datagrams
 * and making real TCP connects to a loopback listener started here.
 *
 * Tolerance for a saturating sender: admitted = rate x elapsed + burst within
 * +-(5% + 2). GCRA admits the burst at once and then one token every 1/rate,
 * so the only slack is scheduling jitter at both ends of kt-load's run and the
 * fork/exec skew between two concurrent senders. Kernel counters are exact, so
 * status output is compared with kt-load's own counts for equality. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "kt_daemonfx.h"
#include "ktest.h"

#define UDP_MAX 200.0
#define UDP_BURST 20.0
#define TCP_MAX 100.0
#define TCP_BURST 10.0
#define LOAD_S 2.5

/* Per-test resources, released by the teardown even when an assert fails. */
#define MAX_DAEMONS 2
#define MAX_CGROUPS 3
static struct fixture {
	struct ktest_daemon d[MAX_DAEMONS];
	char cg[MAX_CGROUPS][PATH_MAX];
} fx;

/* Group-wide: a loopback TCP listener that accepts and closes. */
static pid_t server_pid = -1;
static int tcp_port = -1;

static void assert_admitted(const char *what, unsigned long long ok, double rate, double secs,
			    double burst)
{
	double want = rate * secs + burst, tol = 0.05 * want + 2;

	print_message("%s: admitted %llu, expected %.1f +- %.1f (rate %.1f/s x %.3fs + burst %.0f)\n",
		      what, ok, want, tol, rate, secs, burst);
	assert_true((double)ok >= want - tol && (double)ok <= want + tol);
}

/* Value in column `col` (a header name) of the table row starting with
 * `name`; the header is the line that contains "LIMIT". */
static bool table_value(const char *text, const char *name, const char *col,
			unsigned long long *v)
{
	char *copy = strdup(text), *save = NULL, *line;
	int col_idx = -1;
	bool found = false;

	for (line = strtok_r(copy, "\n", &save); line && !found; line = strtok_r(NULL, "\n", &save)) {
		char *s2 = NULL, *tok;
		int i = 0;

		if (!strncmp(line, "LIMIT", 5)) {
			for (tok = strtok_r(line, " ", &s2); tok; tok = strtok_r(NULL, " ", &s2), i++)
				if (!strcmp(tok, col))
					col_idx = i;
			continue;
		}
		if (col_idx < 0 || strncmp(line, name, strlen(name)) || line[strlen(name)] != ' ')
			continue;
		for (tok = strtok_r(line, " ", &s2); tok; tok = strtok_r(NULL, " ", &s2), i++)
			if (i == col_idx) {
				*v = strtoull(tok, NULL, 10);
				found = true;
			}
	}
	free(copy);
	return found;
}

static struct ktest_daemon *new_daemon(int i, const char *body)
{
	struct ktest_daemon *d = &fx.d[i];

	assert_int_equal(ktest_daemon_init(d), 0);
	assert_int_equal(ktest_daemon_config(d, body), 0);
	return d;
}

static void start_daemon(struct ktest_daemon *d)
{
	assert_int_equal(ktest_daemon_start_logged(d), 0);
}

static const char *new_cgroup(int i, const char *name)
{
	assert_int_equal(ktest_cgroup_create(name, fx.cg[i], sizeof(fx.cg[i])), 0);
	return fx.cg[i];
}

static void load(const char *cg, const char *mode, int port, double secs, struct ktest_load *r)
{
	assert_int_equal(ktest_load(cg, mode, "127.0.0.1", port, secs, r), 0);
	print_message("kt-load %s %s:%d %.2fs in %s: ok=%llu refused=%llu errors=%llu elapsed=%.3f\n",
		      mode, "127.0.0.1", port, secs, cg ? cg : "(outside)", r->ok, r->refused,
		      r->errors, r->elapsed);
	assert_int_equal(r->errors, 0);
}

struct load_job {
	const char *cg, *mode;
	int port;
	double secs;
	struct ktest_load res;
	int rc;
};

static void *load_thread(void *arg)
{
	struct load_job *j = arg;

	j->rc = ktest_load(j->cg, j->mode, "127.0.0.1", j->port, j->secs, &j->res);
	return NULL;
}

/* Two kt-load runs at once. */
static void load_pair(struct load_job *a, struct load_job *b)
{
	pthread_t ta, tb;

	assert_int_equal(pthread_create(&ta, NULL, load_thread, a), 0);
	assert_int_equal(pthread_create(&tb, NULL, load_thread, b), 0);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	assert_int_equal(a->rc, 0);
	assert_int_equal(b->rc, 0);
	print_message("pair: %s ok=%llu refused=%llu %.3fs | %s ok=%llu refused=%llu %.3fs\n", a->cg,
		      a->res.ok, a->res.refused, a->res.elapsed, b->cg, b->res.ok, b->res.refused,
		      b->res.elapsed);
	assert_int_equal(a->res.errors, 0);
	assert_int_equal(b->res.errors, 0);
}

/* A child in `cg` makes `n` back-to-back calls (sendto or connect) and
 * reports how the refused ones failed and how long the slowest took. */
struct probe {
	unsigned long long ok, ebusy, other;
	double max_refused_us, avg_refused_us;
};

static double mono_us(void)
{
	return (double)ktest_now_ns() / 1e3;
}

static void probe_calls(const char *cg, bool tcp, int port, int n, struct probe *out)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int p[2], status;
	pid_t pid;

	memset(out, 0, sizeof(*out));
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct probe r = { 0 };
		double sum = 0;
		int ufd;

		/* join first: cgroup programs run for the cgroup a socket was
		 * created in, not the caller's current one */
		if (ktest_cgroup_join(cg) != 0)
			_exit(3);
		ufd = socket(AF_INET, SOCK_DGRAM, 0);
		for (int i = 0; i < n; i++) {
			int fd = tcp ? socket(AF_INET, SOCK_STREAM, 0) : ufd, rc, e;
			double t0 = mono_us(), dt;

			rc = tcp ? connect(fd, (struct sockaddr *)&sa, sizeof(sa))
				 : (int)sendto(fd, "x", 1, 0, (struct sockaddr *)&sa, sizeof(sa));
			e = errno;
			dt = mono_us() - t0;
			if (tcp)
				close(fd);
			if (rc >= 0) {
				r.ok++;
			} else if (e == EBUSY) {
				r.ebusy++;
				sum += dt;
				if (dt > r.max_refused_us)
					r.max_refused_us = dt;
			} else {
				r.other++;
			}
		}
		r.avg_refused_us = r.ebusy ? sum / (double)r.ebusy : 0;
		_exit(write(p[1], &r, sizeof(r)) == sizeof(r) ? 0 : 4);
	}
	close(p[1]);
	assert_int_equal(read(p[0], out, sizeof(*out)), sizeof(*out));
	close(p[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	print_message("probe %s: ok=%llu ebusy=%llu other=%llu refused avg %.1fus max %.1fus\n",
		      tcp ? "connect" : "sendto", out->ok, out->ebusy, out->other,
		      out->avg_refused_us, out->max_refused_us);
}

/* ---- configs ---- */

/* A config whose first limit is `name`: UDP datagrams from cg to
 * 127.0.0.1:port at UDP_MAX/s, burst UDP_BURST (what assert_admitted
 * checks); more limits can be appended with kt_cat. */
static void udp_body(char *buf, size_t len, const char *name, const char *cg, int port)
{
	buf[0] = 0;
	kt_cat(buf, len,
	       "limits:\n"
	       "  - name: %s\n"
	       "    cgroups: [%s]\n"
	       "    match: {cidrs: [127.0.0.1/32], ports: %d, protocol: udp}\n"
	       "    unit: datagram\n"
	       "    burst: %.0f\n"
	       "    rateLimit: {max: %.0f}\n",
	       name, cg, port, UDP_BURST, UDP_MAX);
}

/* ---- fixtures ---- */

static int group_setup(void **state)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd, one = 1;

	(void)state;
	if (ktest_root_unavailable())
		return 0;
	tcp_port = ktest_free_port(SOCK_STREAM);
	if (tcp_port <= 0)
		return -1;
	sa.sin_port = htons((uint16_t)tcp_port);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	/* listening before the fork: no start-up race with the first connect */
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 4096) < 0)
		return -1;
	server_pid = kt_daemonfx_fork_bounded();
	if (server_pid < 0)
		return -1;
	if (server_pid == 0) {
		for (;;) {
			int c = accept(fd, NULL, NULL);
			if (c >= 0)
				close(c);
		}
	}
	close(fd);
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	ktest_kill_wait(&server_pid);
	return 0;
}

static int setup(void **state)
{
	(void)state;
	memset(&fx, 0, sizeof(fx));
	for (int i = 0; i < MAX_DAEMONS; i++)
		fx.d[i].pid = -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < MAX_DAEMONS; i++)
		if (fx.d[i].dir[0])
			ktest_daemon_cleanup(&fx.d[i]);
	for (int i = 0; i < MAX_CGROUPS; i++)
		if (fx.cg[i][0])
			ktest_cgroup_destroy(fx.cg[i]);
	return 0;
}

/* ---- tests ---- */

/* A UDP datagram limit and a TCP connection limit on one cgroup: a
 * saturating sender inside gets rate x time + burst, refusals fail at once
 * with EBUSY, a sender outside is untouched, and both status forms report
 * exactly what kt-load counted. */
static void test_enforce_inside_not_outside(void **state)
{
	struct ktest_load u, t, uo, to;
	struct probe pu, pt;
	char body[2048], *out = NULL;
	unsigned long long v;
	double dv;
	int udp_port;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	const char *cg = new_cgroup(0, "enforce");
	udp_port = ktest_free_port(SOCK_DGRAM);
	udp_body(body, sizeof(body), "e2e-udp", cg, udp_port);
	kt_cat(body, sizeof(body),
	       "  - name: e2e-tcp\n"
	       "    cgroups: [%s]\n"
	       "    match: {cidrs: [127.0.0.1/32], ports: %d, protocol: tcp}\n"
	       "    unit: connection\n"
	       "    burst: %.0f\n"
	       "    rateLimit: {max: %.0f}\n",
	       cg, tcp_port, TCP_BURST, TCP_MAX);
	struct ktest_daemon *d = new_daemon(0, body);
	start_daemon(d);

	load(cg, "udp", udp_port, LOAD_S, &u);
	assert_true(u.refused > 0);
	assert_admitted("udp inside", u.ok, UDP_MAX, u.elapsed, UDP_BURST);
	load(cg, "tcp", tcp_port, LOAD_S, &t);
	assert_true(t.refused > 0);
	assert_admitted("tcp inside", t.ok, TCP_MAX, t.elapsed, TCP_BURST);

	/* Refused calls fail with EBUSY at once: microseconds, not a
	 * retransmit timeout (>= 1 s for a dropped SYN). The buckets are empty
	 * now, so almost every call is refused. Average < 200 us, worst < 100 ms
	 * (one preemption on this 2-core machine). */
	probe_calls(cg, false, udp_port, 2000, &pu);
	probe_calls(cg, true, tcp_port, 500, &pt);
	assert_int_equal(pu.other, 0);
	assert_int_equal(pt.other, 0);
	assert_true(pu.ebusy >= 1900 && pt.ebusy >= 400);
	assert_true(pu.avg_refused_us < 200 && pu.max_refused_us < 100000);
	assert_true(pt.avg_refused_us < 200 && pt.max_refused_us < 100000);

	/* Outside the cgroup: far above the limit, nothing refused. The TCP run
	 * is short to stay clear of ephemeral-port exhaustion (TIME_WAIT). */
	load(NULL, "udp", udp_port, 0.5, &uo);
	assert_int_equal(uo.refused, 0);
	assert_true(uo.ok > 10 * (UDP_MAX * uo.elapsed + UDP_BURST));
	{
		/* at most 1000 connects: each leaves a TIME_WAIT behind */
		char *const max1000[] = { "--max", "1000", NULL };
		assert_int_equal(ktest_load_args(NULL, "tcp", "127.0.0.1", tcp_port, 2, max1000, &to),
				 0);
		print_message("kt-load tcp outside, 1000 connects: ok=%llu refused=%llu errors=%llu "
			      "elapsed=%.3f\n", to.ok, to.refused, to.errors, to.elapsed);
		assert_int_equal(to.ok, 1000);
		assert_int_equal(to.refused, 0);
		/* 1000 in well under the 9.9 s the limit would need */
		assert_true(to.elapsed < 1000 / TCP_MAX - 1);
	}

	/* status: limit names, the cgroup path, exact counts */
	unsigned long long udp_adm = u.ok + pu.ok, udp_thr = u.refused + pu.ebusy;
	unsigned long long tcp_adm = t.ok + pt.ok, tcp_thr = t.refused + pt.ebusy;
	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-s", d->socket, "status", NULL), 0);
	print_message("%s", out);
	assert_non_null(strstr(out, cg));
	assert_true(table_value(out, "e2e-udp", "ADMITTED", &v));
	assert_int_equal(v, udp_adm);
	assert_true(table_value(out, "e2e-udp", "THROTTLED", &v));
	assert_int_equal(v, udp_thr);
	assert_true(table_value(out, "e2e-tcp", "ADMITTED", &v));
	assert_int_equal(v, tcp_adm);
	assert_true(table_value(out, "e2e-tcp", "THROTTLED", &v));
	assert_int_equal(v, tcp_thr);
	free(out);

	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-s", d->socket, "status", "--json",
				       NULL), 0);
	assert_true(out[0] == '{');
	assert_non_null(strstr(out, "\"path\":\""));
	assert_non_null(strstr(out, cg));
	assert_true(ktest_json_limit_num(out, "e2e-udp", "admitted", &dv));
	assert_int_equal((unsigned long long)dv, udp_adm);
	assert_true(ktest_json_limit_num(out, "e2e-udp", "throttled", &dv));
	assert_int_equal((unsigned long long)dv, udp_thr);
	assert_true(ktest_json_limit_num(out, "e2e-udp", "bucket_rate", &dv));
	assert_true(dv == UDP_MAX);
	assert_true(ktest_json_limit_num(out, "e2e-udp", "burst", &dv));
	assert_true(dv == UDP_BURST);
	assert_true(ktest_json_limit_num(out, "e2e-tcp", "admitted", &dv));
	assert_int_equal((unsigned long long)dv, tcp_adm);
	assert_true(ktest_json_limit_num(out, "e2e-tcp", "throttled", &dv));
	assert_int_equal((unsigned long long)dv, tcp_thr);
	free(out);
}

/* Two cgroups in one limit. Pod scope: a bucket each with max/2 and
 * burst/2 (the pool split between its members). Node scope: one shared
 * bucket of max and burst in total. */
static void test_scope_pod_vs_node(void **state)
{
	char body[2048], *out = NULL;
	int pod_port, node_port;
	double dv;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	const char *a = new_cgroup(0, "scope-a"), *b = new_cgroup(1, "scope-b");
	pod_port = ktest_free_port(SOCK_DGRAM);
	node_port = ktest_free_port(SOCK_DGRAM);
	if (node_port == pod_port)
		node_port = pod_port + 1 <= 65535 ? pod_port + 1 : pod_port - 1;
	snprintf(body, sizeof(body),
		 "limits:\n"
		 "  - name: e2e-pod\n"
		 "    cgroups: [%s, %s]\n"
		 "    match: {cidrs: [127.0.0.1/32], ports: %d, protocol: udp}\n"
		 "    unit: datagram\n"
		 "    scope: pod\n"
		 "    burst: %.0f\n"
		 "    rateLimit: {max: %.0f}\n"
		 "  - name: e2e-node\n"
		 "    cgroups: [%s, %s]\n"
		 "    match: {cidrs: [127.0.0.1/32], ports: %d, protocol: udp}\n"
		 "    unit: datagram\n"
		 "    scope: node\n"
		 "    burst: %.0f\n"
		 "    rateLimit: {max: %.0f}\n",
		 a, b, pod_port, UDP_BURST, UDP_MAX, a, b, node_port, UDP_BURST, UDP_MAX);
	struct ktest_daemon *d = new_daemon(0, body);
	start_daemon(d);

	struct load_job pa = { a, "udp", pod_port, 2.0 }, pb = { b, "udp", pod_port, 2.0 };
	load_pair(&pa, &pb);
	assert_true(pa.res.refused > 0 && pb.res.refused > 0);
	assert_admitted("pod scope, cgroup a", pa.res.ok, UDP_MAX / 2, pa.res.elapsed, UDP_BURST / 2);
	assert_admitted("pod scope, cgroup b", pb.res.ok, UDP_MAX / 2, pb.res.elapsed, UDP_BURST / 2);

	struct load_job na = { a, "udp", node_port, 2.0 }, nb = { b, "udp", node_port, 2.0 };
	load_pair(&na, &nb);
	assert_true(na.res.refused > 0 && nb.res.refused > 0);
	assert_true(na.res.ok > 0 && nb.res.ok > 0);
	double span = na.res.elapsed > nb.res.elapsed ? na.res.elapsed : nb.res.elapsed;
	/* one bucket for both: the sum holds max, not 2 x max */
	assert_admitted("node scope, a + b", na.res.ok + nb.res.ok, UDP_MAX, span, UDP_BURST);

	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-s", d->socket, "status", "--json",
				       NULL), 0);
	assert_true(ktest_json_limit_num(out, "e2e-pod", "bucket_rate", &dv));
	assert_true(dv == UDP_MAX / 2);
	assert_true(ktest_json_limit_num(out, "e2e-pod", "burst", &dv));
	assert_true(dv == UDP_BURST / 2);
	assert_true(ktest_json_limit_num(out, "e2e-pod", "admitted", &dv));
	assert_int_equal((unsigned long long)dv, pa.res.ok + pb.res.ok);
	assert_true(ktest_json_limit_num(out, "e2e-node", "bucket_rate", &dv));
	assert_true(dv == UDP_MAX);
	assert_true(ktest_json_limit_num(out, "e2e-node", "burst", &dv));
	assert_true(dv == UDP_BURST);
	free(out);
}

/* kill -9: the pinned programs keep enforcing; kthrottlectl falls back to
 * the pinned maps; a restarted daemon adopts the buckets (an exhausted one
 * stays exhausted) and the counters. */
static void test_kill9_enforces_and_restart_adopts(void **state)
{
	struct ktest_load l1, l2, s1, s2, l3;
	char body[2048], *out = NULL, *log;
	unsigned long long v;
	size_t log_len;
	int port, slow_port;
	double dv;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	const char *cg = new_cgroup(0, "adopt");
	port = ktest_free_port(SOCK_DGRAM);
	slow_port = ktest_free_port(SOCK_DGRAM);
	if (slow_port == port)
		slow_port = port + 1 <= 65535 ? port + 1 : port - 1;
	/* e2e-slow: one token per 10 s, so within this test its bucket only
	 * refills if something resets it */
	udp_body(body, sizeof(body), "e2e-adopt", cg, port);
	kt_cat(body, sizeof(body),
	       "  - name: e2e-slow\n"
	       "    cgroups: [%s]\n"
	       "    match: {cidrs: [127.0.0.1/32], ports: %d, protocol: udp}\n"
	       "    unit: datagram\n"
	       "    burst: 3\n"
	       "    rateLimit: {max: 0.1}\n",
	       cg, slow_port);
	struct ktest_daemon *d = new_daemon(0, body);
	start_daemon(d);

	load(cg, "udp", port, 1.0, &l1);
	assert_admitted("before kill", l1.ok, UDP_MAX, l1.elapsed, UDP_BURST);
	load(cg, "udp", slow_port, 0.2, &s1);
	assert_int_equal(s1.ok, 3); /* the whole burst, nothing more */
	assert_true(s1.refused > 0);

	assert_int_equal(ktest_daemon_signal_wait(d, SIGKILL), 128 + SIGKILL);
	ktest_sleep_ms(150); /* let the e2e-adopt bucket refill its burst */
	load(cg, "udp", port, 1.5, &l2);
	assert_true(l2.refused > 0);
	assert_admitted("daemon killed", l2.ok, UDP_MAX, l2.elapsed, UDP_BURST);

	/* no daemon: status from the pinned maps */
	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-s", d->socket, "-p", d->pin_dir,
				       "status", NULL), 0);
	print_message("%s", out);
	assert_non_null(strstr(out, "daemon not running"));
	assert_true(table_value(out, "e2e-adopt", "ADMITTED", &v));
	assert_int_equal(v, l1.ok + l2.ok);
	assert_true(table_value(out, "e2e-slow", "ADMITTED", &v));
	assert_int_equal(v, 3);
	free(out);
	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-s", d->socket, "-p", d->pin_dir,
				       "status", "--json", NULL), 0);
	assert_non_null(strstr(out, "\"daemon\":false"));
	assert_true(ktest_json_limit_num(out, "e2e-adopt", "admitted", &dv));
	assert_int_equal((unsigned long long)dv, l1.ok + l2.ok);
	assert_true(ktest_json_limit_num(out, "e2e-adopt", "throttled", &dv));
	assert_int_equal((unsigned long long)dv, l1.refused + l2.refused);
	{
		char idbuf[64];
		snprintf(idbuf, sizeof(idbuf), "\"cgroup_id\":%llu",
			 (unsigned long long)ktest_cgroup_id(cg));
		assert_non_null(strstr(out, idbuf));
	}
	free(out);

	/* restart on the same config: adopted, not reset */
	log = ktest_slurp(d->log);
	log_len = strlen(log);
	free(log);
	start_daemon(d);
	load(cg, "udp", slow_port, 0.1, &s2);
	assert_int_equal(s2.ok, 0); /* a fresh bucket would admit 3 */
	assert_true(s2.refused > 0);
	log = ktest_slurp(d->log);
	print_message("log after restart: %s", log + log_len);
	assert_non_null(strstr(log + log_len, "adopted"));
	free(log);

	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-s", d->socket, "status", "--json",
				       NULL), 0);
	assert_non_null(strstr(out, "\"uptime_s\"")); /* answered by the daemon */
	assert_true(ktest_json_limit_num(out, "e2e-adopt", "admitted", &dv));
	assert_int_equal((unsigned long long)dv, l1.ok + l2.ok);
	assert_true(ktest_json_limit_num(out, "e2e-slow", "admitted", &dv));
	assert_int_equal((unsigned long long)dv, 3);
	assert_true(ktest_json_limit_num(out, "e2e-slow", "throttled", &dv));
	assert_int_equal((unsigned long long)dv, s1.refused + s2.refused);
	free(out);

	/* and the adopting daemon enforces as before */
	ktest_sleep_ms(150);
	load(cg, "udp", port, 1.0, &l3);
	assert_admitted("after restart", l3.ok, UDP_MAX, l3.elapsed, UDP_BURST);
}

/* SIGTERM: exit 0, programs stay attached and enforcing; --cleanup removes
 * every pin and link. */
static void test_sigterm_keeps_enforcing_cleanup_removes(void **state)
{
	struct ktest_load l1, l2;
	char body[1024], *out = NULL, *log;
	int port;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	const char *cg = new_cgroup(0, "term");
	port = ktest_free_port(SOCK_DGRAM);
	udp_body(body, sizeof(body), "e2e-term", cg, port);
	struct ktest_daemon *d = new_daemon(0, body);
	start_daemon(d);

	assert_int_equal(ktest_daemon_signal_wait(d, SIGTERM), 0);
	assert_int_not_equal(access(d->socket, F_OK), 0); /* socket removed */
	assert_int_equal(access(d->pin_dir, F_OK), 0);
	log = ktest_slurp(d->log);
	assert_non_null(strstr(log, "stay attached"));
	free(log);
	assert_int_equal(ktest_bpftool_cgroup_show(cg, &out), 0);
	assert_true(ktest_lists_kthrottle_prog(out));
	free(out);

	load(cg, "udp", port, 1.0, &l1);
	assert_true(l1.refused > 0);
	assert_admitted("after SIGTERM", l1.ok, UDP_MAX, l1.elapsed, UDP_BURST);

	assert_int_equal(ktest_run_bin("kthrottled", &out, "--cleanup", "--pin-dir", d->pin_dir, NULL),
			 0);
	free(out);
	assert_int_not_equal(access(d->pin_dir, F_OK), 0);
	assert_int_equal(ktest_bpftool_cgroup_show(cg, &out), 0);
	print_message("bpftool cgroup show after cleanup: [%s]\n", out);
	assert_false(ktest_lists_kthrottle_prog(out));
	assert_null(strstr(out, "sendmsg")); /* nothing of ours left on the cgroup */
	free(out);

	load(cg, "udp", port, 0.3, &l2);
	assert_int_equal(l2.refused, 0);
	assert_true(l2.ok > 10 * (UDP_MAX * l2.elapsed + UDP_BURST));
}

/* The state a start killed after pinning its maps but before attaching its
 * programs leaves: the maps of a stopped daemon with its links' pins
 * removed (unpinning a link nothing else holds detaches it). Without a
 * daemon, status says nothing is enforced and exits 1, health fails, and
 * datagrams indeed pass unthrottled; the next start completes over the
 * leftovers and enforces. */
static void test_interrupted_start_not_enforcing(void **state)
{
	struct ktest_load l1, l2;
	char body[1024], links[PATH_MAX], *out = NULL, *dirlist = NULL;
	int port, removed = 0;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	const char *cg = new_cgroup(0, "interrupted");
	port = ktest_free_port(SOCK_DGRAM);
	udp_body(body, sizeof(body), "e2e-half", cg, port);
	struct ktest_daemon *d = new_daemon(0, body);
	start_daemon(d);
	assert_int_equal(ktest_daemon_signal_wait(d, SIGTERM), 0);

	snprintf(links, sizeof(links), "%s/links", d->pin_dir);
	{
		char *const ls[] = { "/bin/ls", "-1", links, NULL };

		assert_int_equal(ktest_run_capture(ls, &dirlist), 0);
	}
	for (char *save = NULL, *name = strtok_r(dirlist, "\n", &save); name;
	     name = strtok_r(NULL, "\n", &save)) {
		char p[PATH_MAX * 2];

		snprintf(p, sizeof(p), "%s/%s", links, name);
		assert_int_equal(unlink(p), 0);
		removed++;
	}
	free(dirlist);
	assert_true(removed > 0);
	assert_int_equal(ktest_bpftool_cgroup_show(cg, &out), 0);
	assert_false(ktest_lists_kthrottle_prog(out));
	free(out);
	assert_int_equal(access(d->pin_dir, F_OK), 0); /* the maps are still pinned */

	/* truly not enforcing: far above the limit, nothing refused */
	load(cg, "udp", port, 0.3, &l1);
	assert_int_equal(l1.refused, 0);
	assert_true(l1.ok > 10 * (UDP_MAX * l1.elapsed + UDP_BURST));

	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-s", d->socket, "-p", d->pin_dir,
				       "status", NULL), 1);
	print_message("%s", out);
	assert_non_null(strstr(out, "not enforcing: programs missing"));
	assert_non_null(strstr(out, "interrupted start"));
	assert_null(strstr(out, "still enforcing"));
	assert_non_null(strstr(out, "no program attached: not enforced"));
	free(out);
	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-s", d->socket, "-p", d->pin_dir,
				       "status", "--json", NULL), 1);
	assert_non_null(strstr(out, "\"enforcing\":false"));
	assert_non_null(strstr(out, "\"attached\":false"));
	free(out);
	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-s", d->socket, "health", NULL), 1);
	print_message("health: %s", out);
	free(out);

	/* the next start completes over the leftovers and enforces */
	start_daemon(d);
	assert_int_equal(ktest_bpftool_cgroup_show(cg, &out), 0);
	assert_true(ktest_lists_kthrottle_prog(out));
	free(out);
	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-s", d->socket, "health", NULL), 0);
	free(out);
	load(cg, "udp", port, 1.0, &l2);
	assert_true(l2.refused > 0);
	assert_admitted("after the completed start", l2.ok, UDP_MAX, l2.elapsed, UDP_BURST);

	/* and once it is gone again, status says the programs enforce */
	assert_int_equal(ktest_daemon_signal_wait(d, SIGKILL), 128 + SIGKILL);
	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-s", d->socket, "-p", d->pin_dir,
				       "status", "--json", NULL), 0);
	assert_non_null(strstr(out, "\"enforcing\":true"));
	assert_non_null(strstr(out, "\"attached\":true"));
	free(out);
}

/* Whether dir holds an entry whose name starts with prefix. */
static bool dir_has_prefix(const char *dir, const char *prefix)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	bool found = false;

	if (!d)
		return false;
	while (!found && (e = readdir(d)))
		found = !strncmp(e->d_name, prefix, strlen(prefix));
	closedir(d);
	return found;
}

/* kill -9 at each point of a start (as an out-of-memory kill would): at
 * fractions of a measured whole start, from before anything is pinned to
 * after the programs are attached. Each time, `kthrottlectl status` tells
 * the truth: it says enforcing (exit 0) exactly when a program is attached
 * to the cgroup, and "not enforcing: programs missing" when maps were left
 * without one; then the next start completes over what was left and
 * enforces at a real sender. */
static void test_killed_at_each_point_of_start(void **state)
{
	static const double at[] = { 0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95, 1.1 };
	struct ktest_load l;
	char body[1024], *out = NULL;
	int port, code, states[3] = { 0 };
	uint64_t t0;
	double whole_ms;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	const char *cg = new_cgroup(0, "killedstart");
	port = ktest_free_port(SOCK_DGRAM);
	udp_body(body, sizeof(body), "e2e-killed", cg, port);
	struct ktest_daemon *d = new_daemon(0, body);
	/* a whole start, measured, then undone */
	t0 = ktest_now_ns();
	start_daemon(d);
	whole_ms = (ktest_now_ns() - t0) / 1e6;
	assert_int_equal(ktest_daemon_signal_wait(d, SIGTERM), 0);
	assert_int_equal(ktest_run_bin("kthrottled", &out, "--cleanup", "--pin-dir", d->pin_dir, NULL), 0);
	free(out);
	print_message("a whole start: %.0f ms\n", whole_ms);

	for (size_t k = 0; k < sizeof(at) / sizeof(at[0]); k++) {
		bool attached, says_enforcing;

		assert_int_equal(ktest_daemon_spawn_flag(d, NULL), 0);
		if (at[k] > 1) /* past its end, whatever the machine's load: once it answers */
			assert_int_equal(ktest_daemon_await(d, 10000, NULL), 0);
		else
			ktest_sleep_ms((int)(at[k] * whole_ms));
		assert_int_equal(ktest_daemon_signal_wait(d, SIGKILL), 128 + SIGKILL);
		assert_int_equal(ktest_bpftool_cgroup_show(cg, &out), 0);
		attached = ktest_lists_kthrottle_prog(out);
		free(out);
		code = ktest_run_bin("kthrottlectl", &out, "-s", d->socket, "-p", d->pin_dir, "status",
				     NULL);
		says_enforcing = code == 0;
		print_message("killed %.0f ms in (%.0f%%): program attached %s; status exit %d: %.*s\n",
			      at[k] * whole_ms, at[k] * 100, attached ? "yes" : "no", code,
			      (int)strcspn(out, "\n"), out);
		assert_true(says_enforcing == attached);
		/* maps left, all or some: said, never "no state" */
		if (!attached && access(d->pin_dir, F_OK) == 0 && dir_has_prefix(d->pin_dir, "kt_"))
			assert_non_null(strstr(out, "not enforcing: programs missing"));
		assert_null(strstr(out, attached ? "not enforcing" : "still enforcing"));
		states[attached ? 2 : dir_has_prefix(d->pin_dir, "kt_") ? 1 : 0]++;
		free(out);

		/* the next start completes and enforces */
		start_daemon(d);
		load(cg, "udp", port, 0.5, &l);
		assert_true(l.refused > 0);
		assert_admitted("after a start killed half-way", l.ok, UDP_MAX, l.elapsed, UDP_BURST);
		assert_int_equal(ktest_daemon_signal_wait(d, SIGTERM), 0);
		assert_int_equal(ktest_run_bin("kthrottled", &out, "--cleanup", "--pin-dir", d->pin_dir,
					       NULL), 0);
		free(out);
	}
	print_message("kills that left: nothing pinned %d, pins without a program %d, a program "
		      "attached %d\n", states[0], states[1], states[2]);
	/* the points spanned the start: at least its end was reached */
	assert_true(states[2] > 0);
}

/* Under an RLIMIT_NOFILE (soft and hard) below what a start needs: one
 * line naming the limit and what is needed, exit 1, and nothing pinned or
 * attached behind it. */
static void test_out_of_fds_says_so(void **state)
{
	char body[1024], bin[PATH_MAX], *out = NULL;
	const char *prlimit = ktest_find_prog("prlimit");
	int port;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	KTEST_SKIP_IF(prlimit ? NULL : "no prlimit (util-linux)");
	const char *cg = new_cgroup(0, "nofile");
	port = ktest_free_port(SOCK_DGRAM);
	udp_body(body, sizeof(body), "e2e-nofile", cg, port);
	struct ktest_daemon *d = new_daemon(0, body);
	snprintf(bin, sizeof(bin), "%s/kthrottled", ktest_build_dir());
	{
		char *const argv[] = { (char *)prlimit, "--nofile=64:64", bin, "--config", d->config,
				       NULL };

		assert_int_equal(ktest_run_capture(argv, &out), 1);
	}
	assert_true(ktest_is_one_line(out));
	assert_non_null(strstr(out, "out of file descriptors (RLIMIT_NOFILE 64)"));
	assert_non_null(strstr(out, "1 limit(s) need about "));
	assert_non_null(strstr(out, "LimitNOFILE="));
	assert_null(strstr(out, "BTF"));
	free(out);
	assert_int_not_equal(access(d->pin_dir, F_OK), 0);
	assert_int_equal(ktest_bpftool_cgroup_show(cg, &out), 0);
	assert_false(ktest_lists_kthrottle_prog(out));
	free(out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_enforce_inside_not_outside, setup, teardown),
		cmocka_unit_test_setup_teardown(test_scope_pod_vs_node, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kill9_enforces_and_restart_adopts, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_sigterm_keeps_enforcing_cleanup_removes, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_interrupted_start_not_enforcing, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_out_of_fds_says_so, setup, teardown),
		cmocka_unit_test_setup_teardown(test_killed_at_each_point_of_start, setup, teardown),
	};
	if (getenv("KT_TEST_FILTER"))
		cmocka_set_test_filter(getenv("KT_TEST_FILTER"));

	return cmocka_run_group_tests_name("e2e_daemon", tests, group_setup, group_teardown);
}
