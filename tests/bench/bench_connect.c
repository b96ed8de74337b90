/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * `make bench`'s sections on real sockets (tests/bench/bench.c runs them):
 *   connect  real connect() calls from a process in a test cgroup, with no
 *            program, an empty one and kthrottle's connect4
 *   audit    the daemon's in-flight audit (kernel/inflight_audit.c): one
 *            pass with no socket holding a slot and with 10,000 holding one
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "kernel/bpf_loader.h"
#include "kernel/inflight_audit.h"
#include "ktest.h"
#include "kthrottle.h"
#include "connect.skel.h"
#include "sock.skel.h"
#include "sockops.skel.h"
#include "bench.h"

/* ---- section: connect() through real sockets ---- */

struct conn_result {
	long n, ok, refused, errors;
	int last_errno;
	double median_ns; /* of the connect() syscalls alone */
	double mean_ns;
	double close_median_ns; /* of the close() calls */
};

/* n connects from a child that joined `cgroup`; SO_LINGER 0 closes with a
 * reset, so no TIME_WAIT piles up and ephemeral ports never run out. */
static void connect_child(const char *cgroup, uint16_t port, long n, int out_fd, pid_t parent)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };
	struct conn_result r = { 0 };
	uint64_t spent = 0, start;
	double *per = calloc((size_t)n, sizeof(*per)), *per_close = calloc((size_t)n, sizeof(*per));
	long i;
	int ret;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(1);
	pin_cpu(0);
	ret = per && per_close ? ktest_cgroup_join(cgroup) : -ENOMEM;
	if (ret) {
		r.errors = 1;
		r.last_errno = -ret;
		goto out;
	}
	start = now_ns();
	for (i = 0; i < n; i++) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		uint64_t t0;
		int rc, e;

		if (fd < 0) {
			r.errors++;
			r.last_errno = errno;
			break;
		}
		setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		t0 = now_ns();
		rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
		e = errno;
		per[i] = (double)(now_ns() - t0);
		spent += (uint64_t)per[i];
		if (rc == 0)
			r.ok++;
		else if (e == KT_REFUSE_ERRNO)
			r.refused++;
		else {
			r.errors++;
			r.last_errno = e;
		}
		t0 = now_ns();
		close(fd);
		per_close[i] = (double)(now_ns() - t0);
		/* bounded in time too: a stalled listener must not hang the bench */
		if ((i & 255) == 255 && now_ns() - start > 15000000000ull) {
			i++;
			break;
		}
	}
	r.n = i;
	r.mean_ns = i ? (double)spent / (double)i : NAN;
	if (i) {
		qsort(per, (size_t)i, sizeof(*per), cmp_double);
		r.median_ns = per[i / 2];
		qsort(per_close, (size_t)i, sizeof(*per_close), cmp_double);
		r.close_median_ns = per_close[i / 2];
	}
out:
	free(per);
	free(per_close);
	if (write(out_fd, &r, sizeof(r)) != (ssize_t)sizeof(r))
		_exit(1);
	_exit(0);
}

/* A measuring child of the bench (it joins `cgroup` and _exits): its
 * result struct, len bytes, back through a pipe. 0 or -errno. */
typedef void (*bench_child_fn)(const char *cgroup, uint16_t port, long n, int out_fd, pid_t parent);

static int run_child(bench_child_fn child, const char *cgroup, uint16_t port, long n, void *res,
		     size_t len)
{
	int p[2], status;
	ssize_t got = 0;
	pid_t pid;

	memset(res, 0, len);
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		int e = errno;
		close(p[0]);
		close(p[1]);
		return -e;
	}
	if (pid == 0) {
		close(p[0]);
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		child(cgroup, port, n, p[1], getppid());
	}
	close(p[1]);
	while (got < (ssize_t)len) {
		ssize_t r = read(p[0], (char *)res + got, len - (size_t)got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += r;
	}
	close(p[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return got == (ssize_t)len ? 0 : -EIO;
}

static int run_connects(const char *cgroup, uint16_t port, long n, struct conn_result *res)
{
	return run_child(connect_child, cgroup, port, n, res, sizeof(*res));
}

/* Run time, ns, summed over the programs (bpf_enable_stats must be on). */
static uint64_t progs_run_ns(const int *fds, int n)
{
	uint64_t ns, cnt;

	progs_run_stats(fds, n, &ns, &cnt);
	return ns;
}

struct conn_mode {
	const char *what;
	const char *cgroup;
	uint16_t port;
	int expect_refused; /* every connect fails with KT_REFUSE_ERRNO */
};

int bench_connect(struct bench_env *e)
{
	enum { M_PLAIN, M_EMPTY, M_MATCH, M_UNMATCH, M_REFUSE, M_INFLIGHT, NM };
	const struct conn_mode modes[NM] = {
		[M_PLAIN] = { "connect() (i) no program attached", e->cg_plain, e->lport[0], 0 },
		[M_EMPTY] = { "connect() empty connect4 program attached", e->cg_empty, e->lport[0], 0 },
		[M_MATCH] = { "connect() (ii) kthrottle, matched limit, admitted", e->cg_kt,
			      e->lport[0], 0 },
		[M_UNMATCH] = { "connect() (iii) kthrottle, limit on another port", e->cg_kt,
				e->lport[1], 0 },
		[M_REFUSE] = { "connect() kthrottle, refused (rate closed; fails EBUSY)", e->cg_kt,
			       e->refuse_port, 1 },
		[M_INFLIGHT] = { "connect() kthrottle, in-flight limit, slot taken", e->cg_kt,
				 e->lport[2], 0 },
	};
	const int rounds = g_quick ? 3 : 10;
	const long n = g_quick ? 1000 : 2000;
	double ns[NM][16], mean[NM][16], delta[NM][16], cl[NM][16], cl_delta[NM][16], bpf[NM][16];
	/* the programs a connection of cg_kt meets: connect4, sockops (its
	 * state callbacks) and sock_release, attached for the in-flight limit */
	const int fds[3] = { bpf_program__fd(e->bpf.connect->progs.kt_connect4),
			     bpf_program__fd(e->bpf.sockops->progs.kt_sockops),
			     bpf_program__fd(e->bpf.sock->progs.kt_sock_release) };
	int stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
	struct kt_counters m0, m1, r0, r1;
	long sum_ok[NM] = { 0 }, sum_refused[NM] = { 0 };
	int ret;

	set_bucket(e, e->slot[LIM_CONN_MATCH], B_HUGE);
	set_bucket(e, e->slot[LIM_CONN_REFUSE], B_CLOSED);
	if (read_counters(e, e->slot[LIM_CONN_MATCH], &m0) ||
	    read_counters(e, e->slot[LIM_CONN_REFUSE], &r0))
		return -EIO;
	for (int r = 0; r < rounds; r++) {
		/* rotate the order so no mode always runs first or last */
		for (int k = 0; k < NM; k++) {
			int m = (k + r) % NM;
			struct conn_result res;
			uint64_t run0 = progs_run_ns(fds, 3);

			if (g_stop)
				return -EINTR;
			ret = run_connects(modes[m].cgroup, modes[m].port, n, &res);
			bpf[m][r] = res.n ? (double)(progs_run_ns(fds, 3) - run0) / (double)res.n : NAN;
			if (getenv("KT_BENCH_VERBOSE"))
				fprintf(stderr, "bench: connect round %d %s: BPF %.0f ns per connection\n", r,
					modes[m].what, bpf[m][r]);
			if (ret) {
				fprintf(stderr, "bench: connect worker: %s\n", strerror(-ret));
				return ret;
			}
			sanity(res.errors == 0 && res.n == n, "%s: %ld of %ld done, %ld errors (last: %s)",
			       modes[m].what, res.n, n, res.errors, strerror(res.last_errno));
			sanity(modes[m].expect_refused ? res.refused == res.n : res.refused == 0,
			       "%s: %ld of %ld refused", modes[m].what, res.refused, res.n);
			ns[m][r] = res.median_ns;
			mean[m][r] = res.mean_ns;
			cl[m][r] = res.close_median_ns;
			sum_ok[m] += res.ok;
			sum_refused[m] += res.refused;
		}
		for (int m = 0; m < NM; m++) {
			delta[m][r] = ns[m][r] - ns[M_PLAIN][r];
			cl_delta[m][r] = cl[m][r] - cl[M_PLAIN][r];
		}
		if (getenv("KT_BENCH_VERBOSE"))
			fprintf(stderr,
				"bench: connect round %d median (mean) ns: plain %.0f (%.0f) empty %.0f (%.0f) "
				"match %.0f (%.0f) unmatch %.0f (%.0f) refuse %.0f (%.0f)\n",
				r, ns[0][r], mean[0][r], ns[1][r], mean[1][r], ns[2][r], mean[2][r],
				ns[3][r], mean[3][r], ns[4][r], mean[4][r]);
	}
	if (read_counters(e, e->slot[LIM_CONN_MATCH], &m1) ||
	    read_counters(e, e->slot[LIM_CONN_REFUSE], &r1))
		return -EIO;
	sanity(m1.admitted - m0.admitted == (__u64)sum_ok[M_MATCH] && m1.throttled == m0.throttled,
	       "matched limit counted %llu admitted, %llu throttled; %ld connects were made",
	       (unsigned long long)(m1.admitted - m0.admitted),
	       (unsigned long long)(m1.throttled - m0.throttled), sum_ok[M_MATCH]);
	sanity(r1.throttled - r0.throttled == (__u64)sum_refused[M_REFUSE] &&
		       r1.admitted == r0.admitted,
	       "closed limit counted %llu throttled, %llu admitted; %ld connects were refused",
	       (unsigned long long)(r1.throttled - r0.throttled),
	       (unsigned long long)(r1.admitted - r0.admitted), sum_refused[M_REFUSE]);

	/* every in-flight connect gave its slot back on close */
	struct kt_inflight in;

	sanity(kt_bpf_read_inflight(&e->bpf, e->slot[LIM_CONN_INFLIGHT], &in) == 0 && in.open == 0 &&
		       in.peak == 1,
	       "in-flight limit: %llu still open after all closed (peak %llu, want 1)",
	       (unsigned long long)in.open, (unsigned long long)in.peak);

	double base = median(ns[M_PLAIN], rounds);
	for (int m = 0; m < NM; m++) {
		char what[112];
		snprintf(what, sizeof(what), "%s (median of %ld calls)", modes[m].what, n * rounds);
		row_ns_ratio(what, median(ns[m], rounds), m == M_PLAIN ? NAN : base,
			     median(delta[m], rounds));
	}
	/* the in-flight path against a connection rate limit's, in the same
	 * rounds: the programs' own time per connection (bpf_stats: connect4,
	 * and the sockops and sock_release runs the connection causes), and
	 * the connect() call itself */
	{
		double b_in = median(bpf[M_INFLIGHT], rounds), b_rate = median(bpf[M_MATCH], rounds),
		       ratio[16];

		/* the ratio of each round's pair: both ran back to back */
		for (int k = 0; k < rounds; k++)
			ratio[k] = bpf[M_INFLIGHT][k] / bpf[M_MATCH][k];
		double c_in = median(ns[M_INFLIGHT], rounds), c_rate = median(ns[M_MATCH], rounds);
		struct row *r = row_new("in-flight vs connection rate limit: BPF time per connection (connect4 + sockops + sock_release, bpf_stats; ratio: median of the rounds' pairs)");

		if (r && stats_fd >= 0) {
			snprintf(r->value, sizeof(r->value), "%.0f ns", b_in);
			snprintf(r->baseline, sizeof(r->baseline), "%.0f ns", b_rate);
			snprintf(r->delta, sizeof(r->delta), "×%.2f", median(ratio, rounds));
			snprintf(r->target, sizeof(r->target), "≤ ×1.2");
			row_target(r, median(ratio, rounds) <= 1.2);
		} else if (r) {
			snprintf(r->value, sizeof(r->value), "skipped (bpf_enable_stats failed)");
		}
		r = row_new("in-flight vs connection rate limit: connect() call, median");
		if (r) {
			snprintf(r->value, sizeof(r->value), "%.0f ns", c_in);
			snprintf(r->baseline, sizeof(r->baseline), "%.0f ns", c_rate);
			/* no target: a ~10 µs syscall whose rounds vary by 30% here */
			snprintf(r->delta, sizeof(r->delta), "×%.3f", c_rate > 0 ? c_in / c_rate : NAN);
		}
		if (stats_fd >= 0)
			close(stats_fd);
		row_ns_ratio("close() of a socket holding an in-flight slot (slot given back)",
			     median(cl[M_INFLIGHT], rounds), median(cl[M_PLAIN], rounds),
			     median(cl_delta[M_INFLIGHT], rounds));
	}
	return 0;
}

/* ---- section: the in-flight audit's pass ---- */

#define AUDIT_SOCKETS 10000
#define AUDIT_PASSES 21

/* In cgroup cg: AUDIT_SOCKETS connects to port (the in-flight limit's), each
 * socket kept; writes how many were admitted, then waits to be killed. */
static void audit_holder(const char *cgroup, uint16_t port, int out_fd, pid_t parent)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct rlimit rl = { AUDIT_SOCKETS + 1024, AUDIT_SOCKETS + 1024 }; /* and the fds inherited */
	int got = 0;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent || setrlimit(RLIMIT_NOFILE, &rl) < 0 ||
	    ktest_cgroup_join(cgroup) != 0)
		_exit(1);
	for (int i = 0; i < AUDIT_SOCKETS; i++) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		int ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;

		if (!ok && getenv("KT_BENCH_VERBOSE"))
			fprintf(stderr, "bench: audit holder: connect %d: %s\n", i, strerror(errno));
		got += ok;
	}
	if (write(out_fd, &got, sizeof(got)) != sizeof(got))
		_exit(2);
	for (;;)
		pause();
}

/* The median time of AUDIT_PASSES audits, in µs; *fixed: what they corrected. */
static double audit_pass_us(struct kt_inflight_audit *a, int *fixed)
{
	double us[AUDIT_PASSES];
	char err[256];

	for (int i = 0; i < AUDIT_PASSES; i++) {
		uint64_t t0 = now_ns();
		int r = kt_inflight_audit_run(a, NULL, NULL, err, sizeof(err));

		us[i] = (double)(now_ns() - t0) / 1e3;
		sanity(r >= 0, "audit pass: %s", err);
		*fixed += r > 0 ? r : 0;
	}
	return median(us, AUDIT_PASSES);
}

/* What the daemon's once-a-second audit of in-flight counts costs: a pass
 * with no socket holding a slot (two batch reads of kt_inflight and an
 * empty iteration) and with AUDIT_SOCKETS holding one each. */
int bench_audit(struct bench_env *e)
{
	uint32_t slot = e->slot[LIM_CONN_INFLIGHT];
	struct kt_inflight_audit a;
	struct kt_inflight in;
	int p[2], got = 0, fixed = 0, ret;
	double base, held;
	char err[256];
	pid_t pid;

	const struct kt_limit_rt *l = &e->plan.limits[LIM_CONN_INFLIGHT];

	/* slots for all: the member's bucket and the node bucket it is
	 * chained to (pod scope) */
	set_bucket(e, slot, B_HUGE);
	if (l->has_pool)
		set_bucket(e, l->pool_slot, B_HUGE);
	ret = kt_inflight_audit_open(&a, e->pin_dir, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "bench: %s\n", err);
		return ret;
	}
	base = audit_pass_us(&a, &fixed);
	if (pipe2(p, O_CLOEXEC) < 0) {
		ret = -errno;
		goto out;
	}
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		ret = -errno;
		close(p[0]);
		close(p[1]);
		goto out;
	}
	if (pid == 0) {
		close(p[0]);
		audit_holder(e->cg_kt, e->lport[2], p[1], getppid());
	}
	close(p[1]);
	if (read(p[0], &got, sizeof(got)) != sizeof(got))
		got = -1;
	close(p[0]);
	held = audit_pass_us(&a, &fixed);
	sanity(kt_bpf_read_inflight(&e->bpf, slot, &in) == 0 && (int)in.open == got,
	       "audit: %llu open, the holder made %d", (unsigned long long)in.open, got);
	kill(pid, SIGKILL);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
	sanity(got == AUDIT_SOCKETS, "audit: the holder made %d of %d connections", got,
	       AUDIT_SOCKETS);
	sanity(fixed == 0, "audit: %d counts corrected where none was wrong", fixed);

	struct row *r = row_new("in-flight audit pass (once a second in the daemon), no socket holding a slot");

	if (r)
		snprintf(r->value, sizeof(r->value), "%.0f µs", base);
	r = row_new("in-flight audit pass, 10,000 sockets holding slots (target: 1% of a core)");
	if (r) {
		snprintf(r->value, sizeof(r->value), "%.0f µs", held);
		snprintf(r->baseline, sizeof(r->baseline), "%.0f µs", base);
		snprintf(r->delta, sizeof(r->delta), "%+.0f ns per socket",
			 (held - base) * 1e3 / AUDIT_SOCKETS);
		snprintf(r->target, sizeof(r->target), "≤ 10,000 µs");
		row_target(r, held <= 10000);
	}
	ret = 0;
out:
	kt_inflight_audit_close(&a);
	return ret;
}
