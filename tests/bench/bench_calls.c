/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * `make bench` section calls (tests/bench/bench.c runs it): unit `call` on
 * HTTP/1.1 keep-alive traffic over loopback, with the machine's own tools,
 * side by side in one run:
 *   upstream  a private Debian nginx (own prefix in a temp dir, `daemon
 *             off;`, in a cgroup of its own that no limit names) answering
 *             `return 200 "ok";` on 127.0.0.1, keepalive_requests 1000000, no
 *             access log; a second port serves stub_status, whose `requests`
 *             counter is the upstream's own count of the calls it got
 *   proxy     a second private nginx in front of it (keep-alive upstream),
 *             one port each: no limit_req; limit_req never delaying
 *             (1000000r/s); limit_req rate=200r/s burst=40 (delaying, 429
 *             beyond the burst); the same with nodelay
 *   kthrottle build/kthrottled with three limits on the upstream port: a
 *             call limit that never holds (max and burst 1e6), the same as
 *             a packet limit, and a call limit at 200/s, burst 40; each on
 *             a member cgroup of its own
 * Each row is one `wrk -t1 -c4 -d3s --latency` (Requests/sec, the 50% and
 * 99% lines; non-2xx and socket errors); the admitted-vs-plain pair runs
 * twice in ABBA order. wrk and the upstream share the last CPU (pin_cpu(1)):
 * on this 2-core VM that keeps the pair far closer than letting them land
 * anywhere, and on two CPUs apart every request pays a cross-CPU wakeup
 * (half the throughput); the proxy is not pinned. KT_BENCH_VERBOSE=1 prints
 * each run's figures, KT_BENCH_WRK=1 wrk's own output. Then, if bpf_enable_stats works, the egress
 * program's ns per run (run_time_ns / run_cnt of the programs a member's
 * socket meets at egress) under the call limit and the packet limit, both
 * admitting, and under the call limit at 200/s.
 * Without /usr/sbin/nginx or wrk the section prints why and adds nothing.
 * Every process it starts is stopped by pid (nginx TERM then KILL, and any
 * nginx worker left in its cgroup KILLed), the daemon stopped and its pins
 * removed, the cgroups and the temp dir removed. About 40 s.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <bpf/bpf.h>
#include "kt_nginx.h"
#include "ktest.h"
#include "bench.h"

#define CL_NGINX "/usr/sbin/nginx"
#define CL_RATE 200
#define CL_BURST 40
#define CL_CONNS 4
#define CL_RUN_S 3
#define CL_MAX_PROGS 8

/* One wrk run and what the upstream and the kernel saw during it. */
struct cl_run {
	double rps, p50_us, p99_us, dur_s;
	double reqs, non2xx, sock_errs;
	double up_reqs;            /* requests the upstream's stub_status counted */
	double adm, thr;           /* the limit's admitted and throttled (kthrottle rows) */
	double bpf_ns, bpf_runs;   /* egress programs' run time and runs (stats on) */
};

struct cl_ctx {
	char tmp[PATH_MAX];
	char cg_member[PATH_MAX], cg_pkt[PATH_MAX], cg_rate[PATH_MAX], cg_plain[PATH_MAX],
		cg_ngx[PATH_MAX];
	struct ktest_daemon d;
	pid_t up, px;
	int p_up, p_status, p_px0, p_pxhi, p_pxlim, p_pxnd;
	int stats_fd;
};

/* ---- processes ---- */

/* argv in cgroup cg (NULL: this one), pinned as pin_cpu(cpu) does (cpu < 0:
 * not pinned), stdout and stderr to out_fd (or to the file out_path), dying
 * with this process. The pid or -errno. */
static pid_t cl_spawn(char *const argv[], const char *cg, int cpu, int out_fd,
		      const char *out_path)
{
	pid_t parent = getpid(), pid = fork();

	if (pid < 0)
		return -errno;
	if (pid == 0) {
		int fd = out_fd;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGPIPE, SIG_DFL);
		if (cg && ktest_cgroup_join(cg))
			_exit(126);
		if (cpu >= 0)
			pin_cpu(cpu);
		if (out_path)
			fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0)
			fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
		dup2(fd, 1);
		dup2(fd, 2);
		execv(argv[0], argv);
		_exit(127);
	}
	return pid;
}

/* TERM, up to 3 s to go (nginx's master stops its workers), then KILL. */
static void cl_stop(pid_t *pid)
{
	if (*pid <= 0)
		return;
	kill(*pid, SIGTERM);
	for (int i = 0; i < 300; i++) {
		if (waitpid(*pid, NULL, WNOHANG) == *pid) {
			*pid = -1;
			return;
		}
		ktest_sleep_ms(10);
	}
	ktest_kill_wait(pid);
}

/* KILL whatever of ours is still in cgroup cg (nginx workers whose master
 * was killed): the pids listed in its cgroup.procs, all started here. */
static void cl_sweep(const char *cg)
{
	char path[PATH_MAX + 16], line[32];
	FILE *f;

	snprintf(path, sizeof(path), "%s/cgroup.procs", cg);
	f = fopen(path, "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		long p = strtol(line, NULL, 10);

		if (p > 1 && p != getpid())
			kill((pid_t)p, SIGKILL);
	}
	fclose(f);
}

/* A private nginx: conf (the part after the common head) in dir/<name>,
 * started `daemon off;` in cg_ngx (pinned as pin_cpu(cpu); < 0: not);
 * waits until every port in ports[] (0 ends it) accepts. 0 or -errno;
 * *pid is set as soon as it runs. */
static int cl_nginx(struct cl_ctx *c, const char *name, const char *http, const int *ports,
		    int cpu, pid_t *pid)
{
	char dir[PATH_MAX], conf[PATH_MAX + 32], out[PATH_MAX + 32], elog[PATH_MAX + 32];
	char *all = NULL;
	int ret;

	snprintf(dir, sizeof(dir), "%s/%s", c->tmp, name);
	if (mkdir(dir, 0755) < 0)
		return -errno;
	snprintf(out, sizeof(out), "%s/nginx.out", dir);
	snprintf(elog, sizeof(elog), "%s/error.log", dir);
	if (asprintf(&all, "    access_log off;\n%s", http) < 0)
		return -ENOMEM;
	ret = kt_nginx_conf(dir, all, conf, sizeof(conf));
	free(all);
	if (ret)
		return ret;
	char *argv[] = { CL_NGINX, "-p", dir, "-c", conf, "-e", elog, "-g", "daemon off;", NULL };
	*pid = cl_spawn(argv, c->cg_ngx, cpu, -1, out);
	if (*pid < 0) {
		ret = *pid;
		*pid = -1;
		return ret;
	}
	for (int i = 0; i < 500; i++) {
		int up = 0, n = 0;

		if (waitpid(*pid, NULL, WNOHANG) == *pid) {
			char *o = ktest_slurp(out), *l = ktest_slurp(elog);

			fprintf(stderr, "bench: calls: nginx %s exited:\n%s%s", name, o, l);
			free(o);
			free(l);
			*pid = -1;
			return -EIO;
		}
		for (n = 0; ports[n]; n++)
			up += ktest_port_open(ports[n]);
		if (up == n)
			return 0;
		ktest_sleep_ms(10);
	}
	fprintf(stderr, "bench: calls: nginx %s not listening in 5 s\n", name);
	return -ETIMEDOUT;
}

/* ---- measurements ---- */

/* The upstream's stub_status `requests` (NAN if unreadable). Each read is
 * itself one request. */
static double cl_up_requests(const struct cl_ctx *c)
{
	char *body = NULL, *p;
	unsigned long acc, hnd, req;
	double v = NAN;

	if (ktest_http_get(c->p_status, "/", &body) == 200 && (p = strstr(body, "requests")) &&
	    sscanf(p + 8, " %lu %lu %lu", &acc, &hnd, &req) == 3)
		v = (double)req;
	free(body);
	return v;
}

/* A wrk time ("69.00us", "1.20ms", "2.00s", "1.00m") in µs; NAN if not one. */
static double cl_wrk_us(const char *s)
{
	char unit[8] = "";
	double v;

	if (sscanf(s, "%lf%7s", &v, unit) != 2)
		return NAN;
	if (!strcmp(unit, "us"))
		return v;
	if (!strcmp(unit, "ms"))
		return v * 1e3;
	if (!strcmp(unit, "s"))
		return v * 1e6;
	if (!strcmp(unit, "m"))
		return v * 60e6;
	return NAN;
}

static double cl_after(const char *out, const char *key)
{
	const char *p = strstr(out, key);

	return p ? strtod(p + strlen(key), NULL) : 0;
}

/* wrk's output into r; false if the numbers are not there. */
static bool cl_wrk_parse(const char *out, struct cl_run *r)
{
	const char *p;
	double a, b, cc, d;

	r->rps = cl_after(out, "Requests/sec:");
	r->p50_us = r->p99_us = NAN;
	if ((p = strstr(out, "  50%")))
		r->p50_us = cl_wrk_us(p + 5);
	if ((p = strstr(out, "  99%")))
		r->p99_us = cl_wrk_us(p + 5);
	r->non2xx = cl_after(out, "Non-2xx or 3xx responses:");
	r->sock_errs = 0;
	if ((p = strstr(out, "Socket errors:")) &&
	    sscanf(p, "Socket errors: connect %lf, read %lf, write %lf, timeout %lf", &a, &b, &cc,
		   &d) == 4)
		r->sock_errs = a + b + cc + d;
	r->reqs = r->dur_s = 0;
	if ((p = strstr(out, " requests in "))) {
		const char *q = p;

		while (q > out && q[-1] != '\n')
			q--;
		r->reqs = strtod(q, NULL);
		r->dur_s = strtod(p + strlen(" requests in "), NULL);
	}
	return r->rps > 0 && r->dur_s > 0 && !isnan(r->p50_us) && !isnan(r->p99_us);
}

/* bpf_stats of the egress programs fds[0..n) as doubles */
static void cl_prog_stats(const int *fds, int n, double *ns, double *cnt)
{
	uint64_t t, c;

	progs_run_stats(fds, n, &t, &c);
	*ns = (double)t;
	*cnt = (double)c;
}

/* The kernel's admitted and throttled for limit `name`, from status json. */
static bool cl_counts(const struct cl_ctx *c, const char *name, double *adm, double *thr)
{
	char *out = ktest_daemon_cmd(&c->d, "status json");
	bool ok = out && ktest_json_limit_num(out, name, "admitted", adm) &&
		  ktest_json_limit_num(out, name, "throttled", thr);

	free(out);
	return ok;
}

/* One wrk run from cgroup cg to 127.0.0.1:port; limit: the kthrottle limit
 * whose counters to read around it (NULL: none); stats: read the egress
 * programs of cg around it. 0 or -errno. */
static int cl_wrk(struct cl_ctx *c, const char *label, const char *cg, int port,
		  const char *limit, bool stats, struct cl_run *r)
{
	char url[64], dur[16], conns[16], buf[8192];
	char *argv[] = { "/usr/bin/wrk", "-t1", conns, dur, "--latency", "--timeout", "10s", url,
			 NULL };
	int p[2], fds[CL_MAX_PROGS], nfds = 0, ret = 0;
	double up0, a0 = 0, t0 = 0, ns0 = 0, cnt0 = 0;
	size_t len = 0;
	pid_t pid;
	uint64_t deadline;

	memset(r, 0, sizeof(*r));
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/", port);
	snprintf(dur, sizeof(dur), "-d%ds", CL_RUN_S);
	snprintf(conns, sizeof(conns), "-c%d", CL_CONNS);
	if (stats && (ret = cgroup_progs(cg, BPF_CGROUP_INET_EGRESS, fds, CL_MAX_PROGS, &nfds)))
		goto out;
	if (limit && !cl_counts(c, limit, &a0, &t0)) {
		fprintf(stderr, "bench: calls: no status for limit %s\n", limit);
		ret = -EIO;
		goto out;
	}
	up0 = cl_up_requests(c);
	if (stats)
		cl_prog_stats(fds, nfds, &ns0, &cnt0);
	if (pipe2(p, O_CLOEXEC) < 0) {
		ret = -errno;
		goto out;
	}
	pid = cl_spawn(argv, cg, 1, p[1], NULL);
	close(p[1]);
	if (pid < 0) {
		close(p[0]);
		ret = pid;
		goto out;
	}
	deadline = now_ns() + (uint64_t)(CL_RUN_S + 15) * 1000000000ull;
	for (;;) {
		struct pollfd pf = { .fd = p[0], .events = POLLIN };
		int64_t left = ((int64_t)deadline - (int64_t)now_ns()) / 1000000;
		ssize_t n;
		int pr = 0;

		if (left > 0 && !g_stop) {
			pr = poll(&pf, 1, (int)left);
			if (pr < 0 && errno == EINTR)
				continue;
		}
		if (pr <= 0) {
			fprintf(stderr, "bench: calls: wrk %s did not finish\n", label);
			ret = g_stop ? -EINTR : -ETIMEDOUT;
			break;
		}
		n = read(p[0], buf + len, sizeof(buf) - 1 - len);
		if (n <= 0)
			break;
		len += (size_t)n;
		if (len == sizeof(buf) - 1)
			break;
	}
	buf[len] = 0;
	close(p[0]);
	/* before anything held at the end (unit call) reaches the upstream */
	r->up_reqs = cl_up_requests(c) - up0 - 1;
	if (stats) {
		double ns1, cnt1;

		cl_prog_stats(fds, nfds, &ns1, &cnt1);
		r->bpf_ns = ns1 - ns0;
		r->bpf_runs = cnt1 - cnt0;
	}
	ktest_kill_wait(&pid);
	if (ret)
		goto out;
	if (!cl_wrk_parse(buf, r)) {
		fprintf(stderr, "bench: calls: wrk %s: cannot read its output:\n%s\n", label, buf);
		ret = -EIO;
		goto out;
	}
	if (limit) {
		double a1, t1;

		ktest_sleep_ms(300); /* the status is refreshed every tick (100 ms) */
		if (!cl_counts(c, limit, &a1, &t1)) {
			ret = -EIO;
			goto out;
		}
		r->adm = a1 - a0;
		r->thr = t1 - t0;
	}
	if (getenv("KT_BENCH_WRK")) /* wrk's own output too */
		fprintf(stderr, "bench: calls %s: wrk said:\n%s", label, buf);
	if (getenv("KT_BENCH_VERBOSE"))
		fprintf(stderr,
			"bench: calls %s: %.0f req/s p50 %.1f µs p99 %.1f µs; %.0f requests, upstream "
			"%.0f, non-2xx %.0f, socket errors %.0f; admitted %.0f throttled %.0f; bpf %.0f ns "
			"in %.0f runs\n",
			label, r->rps, r->p50_us, r->p99_us, r->reqs, r->up_reqs, r->non2xx,
			r->sock_errs, r->adm, r->thr, r->bpf_ns, r->bpf_runs);
out:
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	return ret;
}

/* ---- rows ---- */

static void cl_fmt_us(char *buf, size_t len, double us)
{
	if (us >= 1e5)
		snprintf(buf, len, "%.0f ms", us / 1e3);
	else if (us >= 1e3)
		snprintf(buf, len, "%.2f ms", us / 1e3);
	else
		snprintf(buf, len, "%.1f µs", us);
}

/* value "p50 X / p99 Y" against a baseline run's, delta the p50 ratio. */
static struct row *cl_row_lat(const char *what, const struct cl_run *v, const struct cl_run *b)
{
	struct row *r = row_new(what);
	char x[24], y[24];

	if (!r)
		return NULL;
	cl_fmt_us(x, sizeof(x), v->p50_us);
	cl_fmt_us(y, sizeof(y), v->p99_us);
	snprintf(r->value, sizeof(r->value), "p50 %s / p99 %s", x, y);
	if (b) {
		cl_fmt_us(x, sizeof(x), b->p50_us);
		cl_fmt_us(y, sizeof(y), b->p99_us);
		snprintf(r->baseline, sizeof(r->baseline), "%s / %s", x, y);
		snprintf(r->delta, sizeof(r->delta), "p50 ×%.3f, p99 ×%.3f", v->p50_us / b->p50_us,
			 v->p99_us / b->p99_us);
	}
	return r;
}

/* A limited run: calls/s at the upstream, latency and errors. */
static void cl_row_limited(const char *what, const struct cl_run *v, double bound)
{
	struct row *r = row_new(what);
	char x[24], y[24];
	double rate = v->up_reqs / v->dur_s;

	if (!r)
		return;
	cl_fmt_us(x, sizeof(x), v->p50_us);
	cl_fmt_us(y, sizeof(y), v->p99_us);
	snprintf(r->value, sizeof(r->value), "%.1f /s; p50 %s / p99 %s", rate, x, y);
	snprintf(r->delta, sizeof(r->delta), "%.0f non-2xx, %.0f sock err", v->non2xx,
		 v->sock_errs);
	snprintf(r->target, sizeof(r->target), "≤ %.1f /s, ≥ %d /s", bound, (int)(CL_RATE * 0.95));
	row_target(r, rate <= bound && rate >= CL_RATE * 0.95);
}

static double cl_mean2(double a, double b)
{
	return (a + b) / 2;
}

/* The mean of two runs' figures (rates and percentiles alike). */
static void cl_avg(struct cl_run *o, const struct cl_run *x, const struct cl_run *y)
{
	*o = *x;
	o->rps = cl_mean2(x->rps, y->rps);
	o->p50_us = cl_mean2(x->p50_us, y->p50_us);
	o->p99_us = cl_mean2(x->p99_us, y->p99_us);
	o->reqs = x->reqs + y->reqs;
	o->up_reqs = x->up_reqs + y->up_reqs;
	o->adm = x->adm + y->adm;
	o->thr = x->thr + y->thr;
	o->non2xx = x->non2xx + y->non2xx;
	o->sock_errs = x->sock_errs + y->sock_errs;
}

static void cl_row_bpf(const char *what, const struct cl_run *v, const struct cl_run *b)
{
	struct row *r = row_new(what);
	double ns = v->bpf_runs > 0 ? v->bpf_ns / v->bpf_runs : NAN;

	if (!r)
		return;
	snprintf(r->value, sizeof(r->value), "%.1f ns/run (%.2f runs, %.0f ns per call)", ns,
		 v->up_reqs > 0 ? v->bpf_runs / v->up_reqs : NAN,
		 v->up_reqs > 0 ? v->bpf_ns / v->up_reqs : NAN);
	if (b) {
		double bns = b->bpf_runs > 0 ? b->bpf_ns / b->bpf_runs : NAN;

		snprintf(r->baseline, sizeof(r->baseline), "%.1f ns/run", bns);
		snprintf(r->delta, sizeof(r->delta), "%+.1f ns", ns - bns);
	}
}

/* ---- the section ---- */

static int cl_setup(struct cl_ctx *c)
{
	char body[4096], http[4096];
	int ret, ports[6];

	/* six distinct free ports */
	for (int i = 0; i < 6; i++) {
		int tries = 0;

	again:
		ports[i] = ktest_free_port(SOCK_STREAM);
		if (ports[i] <= 0)
			return -EADDRNOTAVAIL;
		for (int j = 0; j < i; j++)
			if (ports[j] == ports[i] && ++tries < 20)
				goto again;
	}
	c->p_up = ports[0];
	c->p_status = ports[1];
	c->p_px0 = ports[2];
	c->p_pxhi = ports[3];
	c->p_pxlim = ports[4];
	c->p_pxnd = ports[5];
	if ((ret = ktest_tmpdir(c->tmp, sizeof(c->tmp)))) {
		c->tmp[0] = 0;
		return ret;
	}
	chmod(c->tmp, 0755);
	const struct {
		const char *name;
		char *path;
	} cgs[] = { { "calls-member", c->cg_member }, { "calls-pkt", c->cg_pkt },
		    { "calls-rate", c->cg_rate },     { "calls-plain", c->cg_plain },
		    { "calls-nginx", c->cg_ngx } };
	for (size_t i = 0; i < sizeof(cgs) / sizeof(cgs[0]); i++) {
		ret = ktest_cgroup_create(cgs[i].name, cgs[i].path, PATH_MAX);
		if (ret) {
			cgs[i].path[0] = 0;
			fprintf(stderr, "bench: calls: cannot create cgroup %s: %s\n", cgs[i].name,
				strerror(-ret));
			return ret;
		}
	}

	snprintf(http, sizeof(http),
		 "    server { listen 127.0.0.1:%d; location / { return 200 \"ok\"; } }\n"
		 "    server { listen 127.0.0.1:%d; location / { stub_status; } }\n",
		 c->p_up, c->p_status);
	if ((ret = cl_nginx(c, "upstream", http, (int[]){ c->p_up, c->p_status, 0 }, 1, &c->up)))
		return ret;
	snprintf(http, sizeof(http),
		 "    limit_req_zone $server_port zone=hi:1m rate=1000000r/s;\n"
		 "    limit_req_zone $server_port zone=lim:1m rate=%dr/s;\n"
		 "    limit_req_zone $server_port zone=nd:1m rate=%dr/s;\n"
		 "    limit_req_status 429;\n"
		 "    upstream up { server 127.0.0.1:%d; keepalive 16; keepalive_requests 1000000; }\n"
		 "    proxy_http_version 1.1;\n"
		 "    proxy_set_header Connection \"\";\n"
		 "    server { listen 127.0.0.1:%d; location / { proxy_pass http://up; } }\n"
		 "    server { listen 127.0.0.1:%d; location / { limit_req zone=hi burst=1000000;"
		 " proxy_pass http://up; } }\n"
		 "    server { listen 127.0.0.1:%d; location / { limit_req zone=lim burst=%d;"
		 " proxy_pass http://up; } }\n"
		 "    server { listen 127.0.0.1:%d; location / { limit_req zone=nd burst=%d nodelay;"
		 " proxy_pass http://up; } }\n",
		 CL_RATE, CL_RATE, c->p_up, c->p_px0, c->p_pxhi, c->p_pxlim, CL_BURST, c->p_pxnd,
		 CL_BURST);
	if ((ret = cl_nginx(c, "proxy", http,
			    (int[]){ c->p_px0, c->p_pxhi, c->p_pxlim, c->p_pxnd, 0 }, -1,
			    &c->px)))
		return ret;

	snprintf(body, sizeof(body),
		 "tickInterval: 100ms\n"
		 "limits:\n"
		 "  - {name: member, cgroups: [%s], unit: call, burst: 1000000,\n"
		 "     match: {cidrs: [127.0.0.1/32], ports: %d}, rateLimit: {max: 1000000}}\n"
		 "  - {name: pkt, cgroups: [%s], unit: packet, burst: 1000000,\n"
		 "     match: {cidrs: [127.0.0.1/32], ports: %d}, rateLimit: {max: 1000000}}\n"
		 "  - {name: rate, cgroups: [%s], unit: call, burst: %d,\n"
		 "     match: {cidrs: [127.0.0.1/32], ports: %d}, rateLimit: {max: %d}}\n",
		 c->cg_member, c->p_up, c->cg_pkt, c->p_up, c->cg_rate, CL_BURST, c->p_up, CL_RATE);
	return ktest_daemon_up(&c->d, body);
}

static void cl_teardown(struct cl_ctx *c)
{
	cl_stop(&c->px);
	cl_stop(&c->up);
	if (c->cg_ngx[0])
		cl_sweep(c->cg_ngx);
	if (c->d.dir[0])
		ktest_daemon_cleanup(&c->d);
	if (c->stats_fd >= 0)
		close(c->stats_fd);
	const char *cgs[] = { c->cg_member, c->cg_pkt, c->cg_rate, c->cg_plain, c->cg_ngx };
	for (size_t i = 0; i < sizeof(cgs) / sizeof(cgs[0]); i++)
		if (cgs[i][0])
			ktest_cgroup_destroy(cgs[i]);
	if (c->tmp[0])
		ktest_rmtree(c->tmp);
}

int bench_calls(struct bench_env *e)
{
	static struct cl_ctx c;
	struct cl_run b1, a1, a2, b2, a, b, px0, pxhi, pxlim, pxnd, kc, sc, sp;
	char what[160], x[40];
	const double bound = (CL_RATE * CL_RUN_S + CL_BURST + CL_CONNS) / (double)CL_RUN_S;
	int ret;

	(void)e;
	if (access(CL_NGINX, X_OK) || access("/usr/bin/wrk", X_OK)) {
		printf("- calls: skipped: needs %s and /usr/bin/wrk (apt-get install nginx-light wrk)\n",
		       CL_NGINX);
		fprintf(stderr, "bench: calls: skipped: %s or /usr/bin/wrk missing\n", CL_NGINX);
		return 0;
	}
	memset(&c, 0, sizeof(c));
	c.d.pid = c.up = c.px = c.stats_fd = -1;
	if ((ret = cl_setup(&c)))
		goto out;

	/* (b)/(a): ABBA, plain then member, both straight to the upstream */
	if ((ret = cl_wrk(&c, "plain 1", c.cg_plain, c.p_up, NULL, false, &b1)) ||
	    (ret = cl_wrk(&c, "member 1", c.cg_member, c.p_up, "member", false, &a1)) ||
	    (ret = cl_wrk(&c, "member 2", c.cg_member, c.p_up, "member", false, &a2)) ||
	    (ret = cl_wrk(&c, "plain 2", c.cg_plain, c.p_up, NULL, false, &b2)))
		goto out;
	/* (d): the proxy, from the plain cgroup */
	if ((ret = cl_wrk(&c, "proxy", c.cg_plain, c.p_px0, NULL, false, &px0)) ||
	    (ret = cl_wrk(&c, "proxy hi", c.cg_plain, c.p_pxhi, NULL, false, &pxhi)) ||
	    (ret = cl_wrk(&c, "proxy limit_req", c.cg_plain, c.p_pxlim, NULL, false, &pxlim)) ||
	    (ret = cl_wrk(&c, "proxy nodelay", c.cg_plain, c.p_pxnd, NULL, false, &pxnd)))
		goto out;
	/* (e): BPF run time, stats on from here */
	c.stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
	bool stats = c.stats_fd >= 0;
	if (stats && ((ret = cl_wrk(&c, "member stats", c.cg_member, c.p_up, "member", true, &sc)) ||
		      (ret = cl_wrk(&c, "packet stats", c.cg_pkt, c.p_up, "pkt", true, &sp))))
		goto out;
	/* (c) last: its held calls reach the upstream after wrk has gone */
	if ((ret = cl_wrk(&c, "call limit", c.cg_rate, c.p_up, "rate", stats, &kc)))
		goto out;

	cl_avg(&a, &a1, &a2);
	cl_avg(&b, &b1, &b2);
	struct cl_run *runs[] = { &b1, &a1, &a2, &b2, &px0, &pxhi, &sc, &sp };
	for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
		if ((runs[i] == &sc || runs[i] == &sp) && !stats)
			continue;
		sanity(runs[i]->non2xx == 0 && runs[i]->sock_errs == 0 && runs[i]->up_reqs > 0,
		       "calls: an unlimited run saw %.0f non-2xx, %.0f socket errors, %.0f requests "
		       "upstream", runs[i]->non2xx, runs[i]->sock_errs, runs[i]->up_reqs);
	}
	/* every call of the member made it upstream and was counted once */
	sanity(fabs(a.adm - a.up_reqs) <= 2 * CL_CONNS && a.thr == 0,
	       "calls: the never-holding call limit counted %.0f admitted, %.0f held; the upstream "
	       "got %.0f", a.adm, a.thr, a.up_reqs);
	sanity(kc.thr > 0 && kc.non2xx == 0,
	       "calls: the 200/s call limit held %.0f times, %.0f non-2xx", kc.thr, kc.non2xx);

	/* (a) vs (b) */
	snprintf(what, sizeof(what),
		 "calls (a) wrk -c%d straight to nginx, member of a call limit that never holds, vs "
		 "(b) plain cgroup: latency, mean of 2 runs each (ABBA)", CL_CONNS);
	struct row *r = cl_row_lat(what, &a, &b);
	if (r) {
		double ratio = a.p50_us / b.p50_us;

		snprintf(r->target, sizeof(r->target), "p50 within 1 %%");
		row_target(r, fabs(ratio - 1) <= 0.01);
	}
	snprintf(what, sizeof(what), "calls (a) vs (b): requests/s, mean of 2 runs each");
	r = row_new(what);
	if (r) {
		snprintf(r->value, sizeof(r->value), "%.0f /s", a.rps);
		snprintf(r->baseline, sizeof(r->baseline), "%.0f /s", b.rps);
		snprintf(r->delta, sizeof(r->delta), "×%.3f", a.rps / b.rps);
	}

	/* the proxy's added latency against kthrottle's, admitted */
	cl_row_lat("calls (d0) through nginx proxy_pass, no limit_req, vs (b)", &px0, &b);
	r = cl_row_lat("calls (d1) through nginx proxy_pass + limit_req 1000000r/s (never delays), "
		       "vs (b)", &pxhi, &b);
	{
		double kt = a.p50_us - b.p50_us, px = pxhi.p50_us - b.p50_us;

		r = row_new("calls: added p50 latency, kthrottle call limit admitting (a−b) vs nginx "
			    "proxy + limit_req never delaying (d1−b)");
		if (r) {
			snprintf(r->value, sizeof(r->value), "%+.1f µs", kt);
			snprintf(r->baseline, sizeof(r->baseline), "%+.1f µs", px);
			if (kt > 0)
				snprintf(r->delta, sizeof(r->delta), "proxy ×%.0f", px / kt);
			else
				snprintf(r->delta, sizeof(r->delta), "kt ≤ 0 (below noise)");
			snprintf(r->target, sizeof(r->target), "kt ≤ proxy / 10");
			row_target(r, kt * 10 <= px);
		}
	}

	/* limited at the same rate */
	snprintf(what, sizeof(what),
		 "calls (c) kthrottle call limit %d/s burst %d: calls/s at the upstream, latency",
		 CL_RATE, CL_BURST);
	cl_row_limited(what, &kc, bound);
	if (getenv("KT_BENCH_VERBOSE"))
		fprintf(stderr, "bench: calls (c): held %.0f times, admitted %.0f\n", kc.thr, kc.adm);
	snprintf(what, sizeof(what),
		 "calls (d2) nginx proxy limit_req rate=%dr/s burst=%d (delays): calls/s at the "
		 "upstream, latency", CL_RATE, CL_BURST);
	cl_row_limited(what, &pxlim, bound);
	snprintf(what, sizeof(what),
		 "calls (d3) nginx proxy limit_req rate=%dr/s burst=%d nodelay (429 beyond): calls/s "
		 "at the upstream, latency", CL_RATE, CL_BURST);
	cl_row_limited(what, &pxnd, bound);
	/* a refusing proxy answers 429 fast: its latency is not a held call's */
	snprintf(x, sizeof(x), "%.0f of %.0f got 429", pxnd.non2xx, pxnd.reqs);
	if (g_nrows > 0)
		snprintf(g_rows[g_nrows - 1].delta, sizeof(g_rows[g_nrows - 1].delta), "%s", x);

	/* (e) */
	if (stats) {
		cl_row_bpf("calls (e) egress program (bpf_stats), call limit admitting; baseline: "
			   "packet limit admitting, same traffic", &sc, &sp);
		cl_row_bpf("calls (e) egress program (bpf_stats), packet limit admitting", &sp, NULL);
		cl_row_bpf("calls (e) egress program (bpf_stats), call limit at 200/s holding (runs "
			   "include the held segments' retries)", &kc, &sc);
	} else {
		char why[96];

		snprintf(why, sizeof(why), "skipped: bpf_enable_stats: %s", strerror(errno));
		row_text("calls (e) egress program ns per run (bpf_stats)", why, NULL, 0);
	}
	ret = 0;
out:
	cl_teardown(&c);
	return ret;
}
