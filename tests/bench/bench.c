/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * `make bench`: what a decision costs, printed as a markdown table. Not a
 * test: targets are reported in the `ok` column, and the exit code is
 * non-zero only when a measurement is not credible (a sanity check failed:
 * wrong verdicts, counters that do not add up) or the setup failed.
 *
 * Sections (one function each, registered in `sections[]` at the bottom;
 * add rows for later work, e.g. the distributed pool, by adding one), one
 * file per section or pair, whose header says what it measures:
 *   skb, xdp        the cgroup_skb egress and XDP tag decisions via
 *                   BPF_PROG_TEST_RUN (bench_bpf.c)
 *   connect, audit  real connect() calls; the in-flight audit's pass
 *                   (bench_connect.c)
 *   gcra, tick      the GCRA decision in userspace; the controller tick
 *                   (bench_ctl.c)
 *   ramp, pool      end to end with build/kthrottled: ramp tracking; three
 *                   nodes on one redis-server (bench_daemon.c)
 *   sendto          UDP sendto() against nftables, then at scale
 *                   (bench_sendto.c)
 *   kube            a pod list's cost per pod in the Kubernetes watcher
 *                   (bench_kube.c)
 * This file: the results table, the environment, the fixture the skb,
 * connect and gcra sections share (struct bench_env), and the driver;
 * bench.h is what the files share.
 *
 * Everything runs in its own pin directory (/sys/fs/bpf/kt-bench-<pid>, or
 * kt-test-<pid>-<n> for the daemons the ramp and pool sections start) and
 * its own cgroups; all of it is removed at exit, also on SIGINT/SIGTERM.
 * Only pids started here are ever signalled.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/stat.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "kernel/apply.h"
#include "kernel/bpf_loader.h"
#include "kernel/bucket.h"
#include "base/cgroup.h"
#include "members/resolve.h"
#include "base/config.h"
#include "ktest.h"
#include "kthrottle.h"
#include "bench_empty.skel.h"
#include "bench.h"

volatile sig_atomic_t g_stop;
int g_quick;
static int g_sanity_failures;

static void on_signal(int sig)
{
	(void)sig;
	g_stop = 1;
}

int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

double median(const double *v, int n)
{
	double s[64];

	if (n <= 0 || n > 64)
		return NAN;
	memcpy(s, v, (size_t)n * sizeof(*v));
	qsort(s, (size_t)n, sizeof(*s), cmp_double);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/* A failed sanity check means the numbers next to it are not to be trusted. */
void sanity(int ok, const char *fmt, ...)
{
	va_list ap;

	if (ok)
		return;
	g_sanity_failures++;
	fprintf(stderr, "bench: SANITY CHECK FAILED: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* Pin to one CPU (when there are several): the connect worker and the
 * listener on different CPUs measure far steadier than wherever they land. */
void pin_cpu(int which)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	cpu_set_t set;

	if (n < 2)
		return;
	CPU_ZERO(&set);
	CPU_SET(which == 0 ? 0 : (int)(n - 1), &set);
	sched_setaffinity(0, sizeof(set), &set);
}

/* ---- results table ---- */

struct row g_rows[MAX_ROWS];
int g_nrows;
static int g_targets, g_targets_met;

struct row *row_new(const char *what)
{
	struct row *r;

	if (g_nrows == MAX_ROWS) {
		fprintf(stderr, "bench: more than %d rows; dropping '%s'\n", MAX_ROWS, what);
		return NULL;
	}
	r = &g_rows[g_nrows++];
	snprintf(r->what, sizeof(r->what), "%s", what);
	strcpy(r->value, "—");
	strcpy(r->baseline, "—");
	strcpy(r->delta, "—");
	strcpy(r->target, "—");
	strcpy(r->ok, "—");
	return r;
}

void row_target(struct row *r, int met)
{
	g_targets++;
	g_targets_met += met;
	strcpy(r->ok, met ? "yes" : "NO");
}

/* value and baseline in ns; delta = value - baseline against a max delta
 * (NAN: no target). */
void row_ns_delta(const char *what, double value, double base, double delta,
			 double max_delta)
{
	struct row *r = row_new(what);

	if (!r)
		return;
	snprintf(r->value, sizeof(r->value), "%.1f ns", value);
	snprintf(r->baseline, sizeof(r->baseline), "%.1f ns", base);
	snprintf(r->delta, sizeof(r->delta), "%+.1f ns", delta);
	if (!isnan(max_delta)) {
		snprintf(r->target, sizeof(r->target), "≤ +%.0f ns", max_delta);
		row_target(r, delta <= max_delta);
	}
}

/* Long operations (µs): delta is the median of paired per-round deltas,
 * shown as a ratio to the baseline and in ns. With a baseline the value
 * shown is baseline + delta, so value, baseline and ratio agree: the
 * median of the raw values comes from the same rounds but not in pairs, and
 * on a noisy machine can even sit below the baseline while every pair says
 * more. */
void row_ns_ratio(const char *what, double value, double base, double delta)
{
	struct row *r = row_new(what);

	if (!r)
		return;
	snprintf(r->value, sizeof(r->value), "%.0f ns", isnan(base) ? value : base + delta);
	if (!isnan(base)) {
		snprintf(r->baseline, sizeof(r->baseline), "%.0f ns", base);
		snprintf(r->delta, sizeof(r->delta), "×%.3f (%+.0f ns)", 1 + delta / base, delta);
	}
}

void row_us_per_limit(const char *what, double us, double max_us)
{
	struct row *r = row_new(what);

	if (!r)
		return;
	snprintf(r->value, sizeof(r->value), "%.3f µs/limit", us);
	snprintf(r->target, sizeof(r->target), "≤ %.0f µs/limit", max_us);
	row_target(r, us <= max_us);
}

static void print_table(void)
{
	printf("\n| measurement | value | baseline | delta / ratio | target | ok |\n");
	printf("|---|---:|---:|---:|---|---|\n");
	for (int i = 0; i < g_nrows; i++) {
		const struct row *r = &g_rows[i];
		printf("| %s | %s | %s | %s | %s | %s |\n", r->what, r->value, r->baseline, r->delta,
		       r->target, r->ok);
	}
	printf("\ntargets met: %d/%d; sanity checks failed: %d\n", g_targets_met, g_targets,
	       g_sanity_failures);
}

/* ---- environment ---- */

void read_first_line(const char *path, char *out, size_t len)
{
	FILE *f = fopen(path, "r");

	snprintf(out, len, "?");
	if (!f)
		return;
	if (fgets(out, (int)len, f))
		out[strcspn(out, "\n")] = 0;
	fclose(f);
}

static void print_env(void)
{
	char cpu[128] = "?", line[256], jit[16], stats[16], clk[32];
	struct utsname u;
	FILE *f = fopen("/proc/cpuinfo", "r");

	if (f) {
		while (fgets(line, sizeof(line), f)) {
			char *colon = strchr(line, ':');
			if (!strncmp(line, "model name", 10) && colon) {
				snprintf(cpu, sizeof(cpu), "%s", colon + 2);
				cpu[strcspn(cpu, "\n")] = 0;
				break;
			}
		}
		fclose(f);
	}
	read_first_line("/proc/sys/net/core/bpf_jit_enable", jit, sizeof(jit));
	read_first_line("/proc/sys/kernel/bpf_stats_enabled", stats, sizeof(stats));
	read_first_line("/sys/devices/system/clocksource/clocksource0/current_clocksource", clk,
			sizeof(clk));
	uname(&u);
	printf("## kthrottle benchmark\n\n");
	printf("- kernel: %s %s (%s)\n", u.sysname, u.release, u.machine);
	printf("- cpu: %s; nproc: %ld online\n", cpu, sysconf(_SC_NPROCESSORS_ONLN));
	printf("- libbpf %u.%u; bpf_jit_enable=%s; bpf_stats_enabled=%s; clocksource=%s\n",
	       libbpf_major_version(), libbpf_minor_version(), jit, stats, clk);
	printf("- mode: %s\n", g_quick ? "quick (fewer rounds: numbers noisier)" : "full");
	fflush(stdout);
}

/* ---- the programs a cgroup runs (sendto and calls sections) ---- */

int cgroup_progs(const char *cgroup, enum bpf_attach_type at, int *fds, int max, int *n)
{
	__u32 ids[16], cnt = max < 16 ? (__u32)max : 16, flags = 0;
	int cgfd = open(cgroup, O_RDONLY | O_DIRECTORY | O_CLOEXEC), ret = 0;

	*n = 0;
	if (cgfd < 0)
		return -errno;
	if (bpf_prog_query(cgfd, at, BPF_F_QUERY_EFFECTIVE, &flags, ids, &cnt) < 0)
		ret = -errno;
	for (__u32 i = 0; !ret && i < cnt; i++) {
		int fd = bpf_prog_get_fd_by_id(ids[i]);

		if (fd < 0)
			ret = -errno;
		else
			fds[(*n)++] = fd;
	}
	close(cgfd);
	return ret;
}

void progs_run_stats(const int *fds, int n, uint64_t *ns, uint64_t *cnt)
{
	*ns = *cnt = 0;
	for (int i = 0; i < n; i++) {
		struct bpf_prog_info info = { 0 };
		__u32 len = sizeof(info);

		if (bpf_obj_get_info_by_fd(fds[i], &info, &len) == 0) {
			*ns += info.run_time_ns;
			*cnt += info.run_cnt;
		}
	}
}

/* ---- shared fixture for the skb, connect and gcra sections ---- */

static void v4_cidr(struct kt_cidr *c, const char *addr, int plen)
{
	memset(c, 0, sizeof(*c));
	c->addr[10] = 0xff;
	c->addr[11] = 0xff;
	inet_pton(AF_INET, addr, c->addr + 12);
	c->prefixlen = (uint8_t)(96 + plen);
}

/* Frees n limits made by limit_cfg, and their array. */
void free_limit_cfgs(struct kt_limit_cfg *limits, int n)
{
	for (int i = 0; limits && i < n; i++)
		free(limits[i].cgroups);
	free(limits);
}

/* A limit as the config parser would produce it; rate and burst are set per
 * measurement with kt_bucket_set_rate. */
void limit_cfg(struct kt_limit_cfg *lc, const char *name, enum kt_unit unit,
		      const char *addr, int plen, uint16_t port, char *cgroup)
{
	memset(lc, 0, sizeof(*lc));
	snprintf(lc->name, sizeof(lc->name), "%s", name);
	/* the list only (free_limit_cfgs): the path is the caller's */
	lc->cgroups = calloc(1, sizeof(*lc->cgroups));
	if (!lc->cgroups) {
		fprintf(stderr, "bench: out of memory\n");
		exit(1);
	}
	lc->cgroups[0] = cgroup;
	lc->n_cgroups = 1;
	v4_cidr(&lc->match.cidrs[0], addr, plen);
	lc->match.n_cidrs = 1;
	lc->match.port_lo = lc->match.port_hi = port;
	lc->match.proto_mask = KT_PROTO_TCP | KT_PROTO_UDP;
	lc->unit = unit;
	lc->scope = KT_SCOPE_POD;
	lc->burst = 1000;
	lc->rl.max = lc->rl.min = 1000;
	lc->rl.mode = KT_MODE_RELAXED;
	lc->rl.threshold_pct = 50;
	lc->rl.ramp_down_pct = 50;
	lc->rl.cool_down_ns = 5000000000ull;
	lc->rl.ttl_ns = 180000000000ull;
	lc->store.kind = KT_STORE_LOCAL;
}

/* The test-run socket's membership: skb-match alone, or (full) a whole
 * kt_members list, the seven skb-wide limits first and skb-match last, all
 * covering the packet: the most LPM lookups one packet can cost. */
int set_self_members(struct bench_env *e, bool full)
{
	uint64_t ids[2] = { e->self_cgid, 0 };
	struct kt_member_val v = { 0 };

	if (full)
		for (int i = LIM_SKB_WIDE; i < N_LIMITS; i++)
			v.ents[v.count++] = (struct kt_member_ent){ .limit_id = e->limit_id[i],
								    .slot = e->slot[i] };
	v.ents[v.count++] = (struct kt_member_ent){ .limit_id = e->limit_id[LIM_SKB_MATCH],
						    .slot = e->slot[LIM_SKB_MATCH] };
	v.own = (__u16)v.count;
	for (int i = 0; i < 2; i++) {
		struct kt_member_key k = { .cgroup_id = ids[i] };

		if (bpf_map_update_elem(e->bpf.members_fd, &k, &v, BPF_ANY) < 0) {
			int ret = -errno;
			fprintf(stderr, "bench: kt_members update: %s\n", strerror(-ret));
			return ret;
		}
	}
	/* as the daemon does after every membership change: the programs'
	 * cached lists are stale from here */
	kt_bpf_bump_gen(&e->bpf);
	return 0;
}

void set_bucket(struct bench_env *e, uint32_t slot, enum bucket_state s)
{
	switch (s) {
	case B_HUGE: /* 1e12 tokens/s, a deep burst: every decision admits */
		kt_bucket_set_rate(&e->bpf, slot, 1e12, 1e9);
		/* A rate change keeps the debt (tat) an exhausted round left,
		 * by design; the bench refills the bucket so it admits now. */
		__atomic_store_n(&e->bpf.buckets[slot].tat, 0, __ATOMIC_RELAXED);
		break;
	case B_EXHAUSTED: /* one token per 1000 s: after the first, all refuse */
		kt_bucket_set_rate(&e->bpf, slot, 1e-3, 1);
		break;
	case B_CLOSED:
		kt_bucket_set_rate(&e->bpf, slot, 0, 1);
		break;
	case B_NONE:
		break;
	}
}

int read_counters(struct bench_env *e, uint32_t slot, struct kt_counters *c)
{
	int ret = kt_bpf_read_counters(&e->bpf, slot, c);

	sanity(ret == 0, "reading counters of slot %u: %s", slot, strerror(-ret));
	return ret;
}

/* This process's cgroup v2 id (what a test-run skb's socket carries). */
static uint64_t self_cgroup_id(const char *mount, char *dir, size_t dirlen)
{
	char line[PATH_MAX], path[PATH_MAX * 2];
	uint64_t id = 0;
	FILE *f = fopen("/proc/self/cgroup", "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "0::", 3))
			continue;
		line[strcspn(line, "\n")] = 0;
		snprintf(path, sizeof(path), "%s%s", mount, line + 3);
		snprintf(dir, dirlen, "%s", path);
		if (kt_cgroup_id(path, &id))
			id = 0;
		break;
	}
	fclose(f);
	return id;
}

static int listen_loopback(uint16_t *port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int one = 1;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 4096) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	*port = ntohs(sa.sin_port);
	return fd;
}

/* Accepts and closes until killed; dies with the parent. */
static void listener_main(const int *fds, int n, pid_t parent)
{
	struct pollfd p[3];

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(0);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	pin_cpu(1);
	for (int i = 0; i < n; i++)
		p[i] = (struct pollfd){ .fd = fds[i], .events = POLLIN };
	for (;;) {
		if (poll(p, (nfds_t)n, -1) < 0 && errno != EINTR)
			_exit(1);
		for (int i = 0; i < n; i++) {
			int c;
			while ((c = accept4(fds[i], NULL, NULL, SOCK_CLOEXEC)) >= 0)
				close(c);
		}
	}
}

static void env_free(struct bench_env *e)
{
	char err[KT_ERR_LEN];

	ktest_kill_wait(&e->listener);
	for (int i = 0; i < 3; i++)
		if (e->lfd[i] >= 0)
			close(e->lfd[i]);
	e->lfd[0] = e->lfd[1] = e->lfd[2] = -1;
	bpf_link__destroy(e->empty_link); /* not pinned: destroying detaches */
	e->empty_link = NULL;
	kt_bench_empty__destroy(e->empty);
	e->empty = NULL;
	if (e->bpf_open) {
		kt_bpf_close(&e->bpf);
		e->bpf_open = false;
	}
	if (e->pin_dir[0] && kt_bpf_cleanup(e->pin_dir, err, sizeof(err)))
		fprintf(stderr, "bench: cleanup: %s\n", err);
	e->pin_dir[0] = 0;
	kt_plan_free(&e->plan);
	free_limit_cfgs(e->cfg.limits, e->cfg.n_limits);
	e->cfg.limits = NULL;
	const char *cgs[] = { e->cg_nest[2], e->cg_nest[1], e->cg_nest[0], e->cg_skb,
			      e->cg_plain,   e->cg_empty,   e->cg_kt };
	for (size_t i = 0; i < sizeof(cgs) / sizeof(cgs[0]); i++)
		if (cgs[i][0])
			ktest_cgroup_destroy(cgs[i]);
	e->cg_nest[0][0] = e->cg_nest[1][0] = e->cg_nest[2][0] = 0;
	e->cg_skb[0] = e->cg_plain[0] = e->cg_empty[0] = e->cg_kt[0] = 0;
}

static int env_setup(struct bench_env *e)
{
	char err[KT_ERR_LEN];
	static struct kt_bucket_policy pol[N_LIMITS];
	int ret, cgfd;

	memset(e, 0, sizeof(*e));
	e->lfd[0] = e->lfd[1] = e->lfd[2] = -1;
	ret = kt_cgroup2_mount(e->cg_mount, sizeof(e->cg_mount), NULL);
	if (ret) {
		fprintf(stderr, "bench: no cgroup v2 mount in /proc/mounts\n");
		return ret;
	}
	e->self_cgid = self_cgroup_id(e->cg_mount, e->self_cg, sizeof(e->self_cg));
	if ((ret = ktest_cgroup_create("bench-skb", e->cg_skb, sizeof(e->cg_skb))) ||
	    (ret = ktest_cgroup_create("bench-plain", e->cg_plain, sizeof(e->cg_plain))) ||
	    (ret = ktest_cgroup_create("bench-empty", e->cg_empty, sizeof(e->cg_empty))) ||
	    (ret = ktest_cgroup_create("bench-kt", e->cg_kt, sizeof(e->cg_kt))) ||
	    (ret = ktest_cgroup_create("bench-nest", e->cg_nest[0], sizeof(e->cg_nest[0])))) {
		fprintf(stderr, "bench: cannot create test cgroups under %s: %s\n", e->cg_mount,
			strerror(-ret));
		return ret;
	}
	for (int i = 1; i < 3; i++) {
		snprintf(e->cg_nest[i], sizeof(e->cg_nest[i]), "%s/%s", e->cg_nest[i - 1],
			 i == 1 ? "a" : "b");
		if (mkdir(e->cg_nest[i], 0755) < 0 && errno != EEXIST) {
			ret = -errno;
			fprintf(stderr, "bench: %s: %s\n", e->cg_nest[i], strerror(-ret));
			e->cg_nest[i][0] = 0;
			return ret;
		}
	}
	for (int i = 0; i < 3; i++) {
		e->lfd[i] = listen_loopback(&e->lport[i]);
		if (e->lfd[i] < 0) {
			ret = e->lfd[i];
			fprintf(stderr, "bench: cannot listen on 127.0.0.1: %s\n", strerror(-ret));
			return ret;
		}
	}
	ret = ktest_free_port(SOCK_STREAM);
	if (ret <= 0) {
		fprintf(stderr, "bench: cannot find a free loopback port\n");
		return -EADDRNOTAVAIL;
	}
	e->refuse_port = (uint16_t)ret;

	snprintf(e->cfg_name, sizeof(e->cfg_name), "bench");
	e->cfg.file = e->cfg_name;
	e->cfg.node_name = e->cfg_name;
	e->cfg.epoch_ns = 1000000000ull;
	e->cfg.tick_ns = 100000000ull;
	e->cfg.limits = calloc(N_LIMITS, sizeof(*e->cfg.limits));
	if (!e->cfg.limits)
		return -ENOMEM;
	e->cfg.n_limits = N_LIMITS;
	limit_cfg(&e->cfg.limits[LIM_SKB_MATCH], "skb-match", KT_UNIT_PACKET, "10.0.0.0", 8,
		  SKB_PORT_MATCH, e->cg_skb);
	limit_cfg(&e->cfg.limits[LIM_SKB_NOMEMBER], "skb-nomember", KT_UNIT_PACKET, "10.0.0.0", 8,
		  SKB_PORT_NOMEMBER, e->cg_skb);
	limit_cfg(&e->cfg.limits[LIM_CONN_MATCH], "conn-match", KT_UNIT_CONNECTION, "127.0.0.0", 8,
		  e->lport[0], e->cg_kt);
	limit_cfg(&e->cfg.limits[LIM_CONN_REFUSE], "conn-refuse", KT_UNIT_CONNECTION, "127.0.0.0",
		  8, e->refuse_port, e->cg_kt);
	limit_cfg(&e->cfg.limits[LIM_CONN_INFLIGHT], "conn-inflight", KT_UNIT_CONCURRENT,
		  "127.0.0.0", 8, e->lport[2], e->cg_kt);
	limit_cfg(&e->cfg.limits[LIM_USER], "user-gcra", KT_UNIT_PACKET, "198.51.100.0", 24, 1,
		  e->cg_skb);
	for (int i = LIM_SKB_WIDE; i < N_LIMITS; i++) {
		char name[16];

		snprintf(name, sizeof(name), "skb-wide%d", i - LIM_SKB_WIDE);
		limit_cfg(&e->cfg.limits[i], name, KT_UNIT_PACKET, "0.0.0.0", 0, SKB_PORT_MATCH,
			  e->cg_plain);
	}

	ret = kt_plan_resolve(&e->cfg, e->cg_mount, NULL, &e->plan, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "bench: %s\n", err);
		return ret;
	}
	snprintf(e->pin_dir, sizeof(e->pin_dir), "/sys/fs/bpf/kt-bench-%d", getpid());
	ret = kt_bpf_open(&e->bpf, e->pin_dir, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "bench: %s\n", err);
		e->pin_dir[0] = 0; /* kt_bpf_open removed what it created */
		return ret;
	}
	e->bpf_open = true;
	for (int i = 0; i < N_LIMITS; i++) {
		pol[i] = (struct kt_bucket_policy){ .rate = 1000, .burst = 1000 };
	}
	ret = kt_plan_apply(&e->bpf, &e->plan, pol, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "bench: %s\n", err);
		return ret;
	}
	for (int i = 0; i < N_LIMITS; i++) {
		e->slot[i] = e->plan.limits[i].members[0].slot;
		e->limit_id[i] = e->plan.limits[i].id;
	}

	/* BPF_PROG_TEST_RUN gives the skb a dummy socket charged to the
	 * caller's cgroup, so bpf_skb_cgroup_id() is this process's cgroup id
	 * (checked on 6.18: a member key of 0 is never hit). Kernels that run
	 * it without a socket see 0: both are members of the matched limit, so
	 * the matched case finds its bucket on the first lookup, as traffic
	 * from a member cgroup does. */
	if (e->self_cgid == 0) {
		fprintf(stderr, "bench: cannot read this process's cgroup v2 id from /proc/self/cgroup\n");
		return -ENOENT;
	}
	if ((ret = set_self_members(e, false)))
		return ret;

	e->empty = kt_bench_empty__open_and_load();
	if (!e->empty) {
		ret = -errno ? -errno : -EINVAL;
		fprintf(stderr, "bench: cannot load bench_empty programs: %s\n", strerror(-ret));
		return ret;
	}
	cgfd = open(e->cg_empty, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cgfd < 0) {
		ret = -errno;
		fprintf(stderr, "bench: %s: %s\n", e->cg_empty, strerror(-ret));
		return ret;
	}
	e->empty_link = bpf_program__attach_cgroup(e->empty->progs.empty_connect4, cgfd);
	close(cgfd);
	if (!e->empty_link) {
		ret = -errno;
		fprintf(stderr, "bench: cannot attach empty_connect4 to %s: %s\n", e->cg_empty,
			strerror(-ret));
		return ret;
	}

	e->listener = fork();
	if (e->listener < 0) {
		ret = -errno;
		e->listener = 0;
		fprintf(stderr, "bench: fork: %s\n", strerror(-ret));
		return ret;
	}
	if (e->listener == 0)
		listener_main(e->lfd, 3, getppid());
	return 0;
}

/* ---- driver ---- */

struct section {
	const char *name;
	const char *what;
	int (*run)(struct bench_env *e);
};

/* Later work adds its sections here (its function in a file of its own,
 * declared in bench.h). A section adds rows with
 * row_ns_delta / row_ns_ratio / row_us_per_limit / row_text (or row_new for
 * another shape) and reports doubtful numbers with sanity(). */
static const struct section sections[] = {
	{ "skb", "cgroup_skb egress decision (BPF_PROG_TEST_RUN)", bench_skb },
	{ "xdp", "XDP tag decision (BPF_PROG_TEST_RUN)", bench_xdp },
	{ "connect", "connect() through real sockets", bench_connect },
	{ "audit", "the in-flight audit's pass", bench_audit },
	{ "gcra", "GCRA in userspace on the mmapped bucket", bench_gcra_user },
	{ "tick", "controller tick cost", bench_tick },
	{ "ramp", "ramp tracking with the real daemon", bench_ramp },
	{ "pool", "distributed pool: 3 daemons, one redis-server", bench_pool },
	{ "sendto", "UDP sendto() against nftables", bench_sendto },
	{ "calls", "unit call: wrk through kthrottle vs an nginx limit_req proxy", bench_calls },
	{ "kube", "a pod list's cost per pod (decode, keep, copy, memory)", bench_kube },
};
#define N_SECTIONS (int)(sizeof(sections) / sizeof(sections[0]))

static void usage(FILE *f)
{
	fprintf(f, "usage: bench [--quick] [--only SECTION[,SECTION...]]\n  sections:");
	for (int i = 0; i < N_SECTIONS; i++)
		fprintf(f, " %s", sections[i].name);
	fprintf(f, "\n");
}

static int parse_only(const char *arg, bool *want)
{
	char *dup = strdup(arg), *save = NULL, *tok;
	int ret = 0;

	if (!dup)
		return -ENOMEM;
	for (int i = 0; i < N_SECTIONS; i++)
		want[i] = false;
	for (tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		int i;
		for (i = 0; i < N_SECTIONS; i++)
			if (!strcmp(tok, sections[i].name))
				break;
		if (i == N_SECTIONS) {
			fprintf(stderr, "bench: --only: unknown section '%s'\n", tok);
			ret = -EINVAL;
			break;
		}
		want[i] = true;
	}
	free(dup);
	return ret;
}

int main(int argc, char **argv)
{
	bool want[N_SECTIONS];
	struct bench_env env;
	struct sigaction sa = { .sa_handler = on_signal };
	const char *why;
	uint64_t t0 = now_ns();
	int ret = 0, failed_sections = 0;

	for (int i = 0; i < N_SECTIONS; i++)
		want[i] = true;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick")) {
			g_quick = 1;
		} else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
			if (parse_only(argv[++i], want)) {
				usage(stderr);
				return 2;
			}
		} else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		} else {
			fprintf(stderr, "bench: unknown argument '%s'\n", argv[i]);
			usage(stderr);
			return 2;
		}
	}
	why = ktest_root_unavailable();
	if (why) {
		fprintf(stderr, "bench: cannot run: %s\n", why);
		return 1;
	}
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	libbpf_set_print(NULL);

	print_env();
	ret = env_setup(&env);
	if (ret) {
		env_free(&env);
		return 1;
	}
	for (int i = 0; i < N_SECTIONS && !g_stop; i++) {
		if (!want[i])
			continue;
		uint64_t s0 = now_ns();
		fprintf(stderr, "bench: %s ...\n", sections[i].what);
		ret = sections[i].run(&env);
		fprintf(stderr, "bench: %s: %s in %.1f s\n", sections[i].name,
			ret ? strerror(-ret) : "done", (double)(now_ns() - s0) / 1e9);
		failed_sections += ret != 0;
	}
	env_free(&env);
	print_table();
	printf("total time %.1f s\n", (double)(now_ns() - t0) / 1e9);
	if (g_stop) {
		fprintf(stderr, "bench: interrupted\n");
		return 1;
	}
	return failed_sections || g_sanity_failures ? 1 : 0;
}
