/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * `make bench`: what a decision costs, printed as a markdown table. Not a
 * test: targets are reported in the `ok` column, and the exit code is
 * non-zero only when a measurement is not credible (a sanity check failed:
 * wrong verdicts, counters that do not add up) or the setup failed.
 *
 * Sections (one function each, registered in `sections[]` at the bottom;
 * add rows for later work, e.g. the distributed pool, by adding one):
 *   xdp      XDP tag decision (bpf/xdp.bpf.c, through xdp_maps.c in its own
 *            pin dir kt-bench-<pid>-xdp) next to an XDP_PASS program, paired
 *            run by run: a bucket that admits (deep burst) and one that
 *            refuses
 *   skb      cgroup_skb egress decision via BPF_PROG_TEST_RUN, next to an
 *            empty cgroup_skb program, paired run by run; and a program that
 *            only reads the clock, to show that part of the matched cost
 *   connect  real connect() calls from a process in a test cgroup, with no
 *            program, an empty one and kthrottle's connect4
 *   audit    the daemon's in-flight audit (kernel/inflight_audit.c): one
 *            pass with no socket holding a slot and with 10,000 holding one
 *   gcra     the GCRA decision in userspace on the mmapped bucket
 *   tick     controller tick cost per limit (ramp math alone; full tick)
 *   ramp     end to end: build/kthrottled ramping 50 -> 200/s over
 *            3 s under a saturating kt-load; per-second tracking error
 *   pool     three build/kthrottled "nodes" (own pins, cgroups and
 *            node names) on one redis-server: aggregate accuracy, Redis
 *            commands per node idle vs saturated, convergence after a kill -9
 *            and after a join
 *   sendto   unconnected UDP sendto() to 127.0.0.1 from a test
 *            cgroup: no filter, empty sendmsg4 + egress programs,
 *            build/kthrottled (admitted, refused, unmatched) and, when nft is
 *            installed, an nftables limit rule and a 1,000-cgroup verdict map
 *            (tables kt_bench_<pid>_*, each in its worker's own network
 *            namespace, always deleted); one long-lived worker per mode,
 *            short chunks paired with the baseline chunks around them; senders
 *            1 and 4 cgroups below kthrottle's member; and the programs' own
 *            time per run from BPF run-time statistics; then a second daemon
 *            with 1,000 limits on one destination (a member cgroup each), a
 *            1-limit comparison and 1 limit with 1,000 pods (st_scale)
 *
 * Everything runs in its own pin directory (/sys/fs/bpf/kt-bench-<pid>, or
 * kt-test-<pid>-<n> for the daemons the ramp and pool sections start) and
 * its own cgroups; all of it is removed at exit, also on SIGINT/SIGTERM.
 * Only pids started here are ever signalled.
 */
#include <dirent.h>
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
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "kernel/apply.h"
#include "kernel/bpf_loader.h"
#include "kernel/inflight_audit.h"
#include "kernel/bucket.h"
#include "base/cgroup.h"
#include "members/resolve.h"
#include "base/config.h"
#include "control/controller.h"
#include "kt_bpffx.h"
#include "ktest.h"
#include "kthrottle.h"
#include "control/ramp.h"
#include "redis_proc.h"
#include "bench_empty.skel.h"
#include "connect.skel.h"
#include "egress.skel.h"
#include "sock.skel.h"
#include "sockops.skel.h"
#include "tags/xdp_maps.h"

static volatile sig_atomic_t g_stop;
static int g_quick;
static int g_sanity_failures;

static void on_signal(int sig)
{
	(void)sig;
	g_stop = 1;
}

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(const double *v, int n)
{
	double s[64];

	if (n <= 0 || n > 64)
		return NAN;
	memcpy(s, v, (size_t)n * sizeof(*v));
	qsort(s, (size_t)n, sizeof(*s), cmp_double);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/* A failed sanity check means the numbers next to it are not to be trusted. */
static void sanity(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sanity(int ok, const char *fmt, ...)
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
static void pin_cpu(int which)
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

#define MAX_ROWS 96

struct row {
	char what[160];
	char value[64];
	char baseline[40];
	char delta[40];
	char target[32];
	char ok[8];
};

static struct row g_rows[MAX_ROWS];
static int g_nrows, g_targets, g_targets_met;

static struct row *row_new(const char *what)
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

static void row_target(struct row *r, int met)
{
	g_targets++;
	g_targets_met += met;
	strcpy(r->ok, met ? "yes" : "NO");
}

/* value and baseline in ns; delta = value - baseline against a max delta
 * (NAN: no target). */
static void row_ns_delta(const char *what, double value, double base, double delta,
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
static void row_ns_ratio(const char *what, double value, double base, double delta)
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

static void row_us_per_limit(const char *what, double us, double max_us)
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

static void read_first_line(const char *path, char *out, size_t len)
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

/* ---- shared fixture for the skb, connect and gcra sections ---- */

enum {
	LIM_SKB_MATCH,    /* egress, 10.0.0.0/8 port SKB_PORT_MATCH; member: test-run socket */
	LIM_SKB_NOMEMBER, /* egress, 10.0.0.0/8 port SKB_PORT_NOMEMBER; no test-run member */
	LIM_CONN_MATCH,   /* connect, 127.0.0.0/8 port lport[0]; member cg_kt */
	LIM_CONN_REFUSE,  /* connect, 127.0.0.0/8 port refuse_port; member cg_kt */
	LIM_CONN_INFLIGHT, /* unit concurrent, 127.0.0.0/8 port lport[2]; member cg_kt */
	LIM_USER,         /* egress, 198.51.100.0/24: a bucket only userspace touches */
	LIM_SKB_WIDE,     /* 7 limits: egress, 0.0.0.0/0 port SKB_PORT_MATCH; member cg_plain */
	N_LIMITS = LIM_SKB_WIDE + KT_LIMITS_PER_CGROUP - 1
};

#define SKB_PORT_MATCH 5000
#define SKB_PORT_NOMEMBER 5001
#define SKB_PORT_NORULE 5002

struct bench_env {
	char cg_mount[PATH_MAX];
	char pin_dir[PATH_MAX];
	char cg_skb[PATH_MAX], cg_plain[PATH_MAX], cg_empty[PATH_MAX], cg_kt[PATH_MAX];
	/* bench-nest, bench-nest/a, bench-nest/a/b: the member and the
	 * sub-cgroups one and two levels below it, for rows (g) and (h) */
	char cg_nest[3][PATH_MAX];
	char self_cg[PATH_MAX]; /* this process's cgroup directory, to go back to */
	uint64_t self_cgid;
	char cfg_name[16];
	struct kt_config cfg; /* built here, not parsed: only limits[] is allocated */
	struct kt_plan plan;
	struct kt_bpf bpf;
	bool bpf_open;
	struct kt_bench_empty *empty;
	struct bpf_link *empty_link; /* empty_connect4 on cg_empty, not pinned */
	int lfd[3];                  /* loopback listeners: [0] limited port, [1] unlimited,
				      * [2] the in-flight limit's */
	uint16_t lport[3];
	uint16_t refuse_port;
	pid_t listener;
	uint32_t slot[N_LIMITS];
	uint32_t limit_id[N_LIMITS];
};

static void v4_cidr(struct kt_cidr *c, const char *addr, int plen)
{
	memset(c, 0, sizeof(*c));
	c->addr[10] = 0xff;
	c->addr[11] = 0xff;
	inet_pton(AF_INET, addr, c->addr + 12);
	c->prefixlen = (uint8_t)(96 + plen);
}

/* Frees n limits made by limit_cfg, and their array. */
static void free_limit_cfgs(struct kt_limit_cfg *limits, int n)
{
	for (int i = 0; limits && i < n; i++)
		free(limits[i].cgroups);
	free(limits);
}

/* A limit as the config parser would produce it; rate and burst are set per
 * measurement with kt_bucket_set_rate. */
static void limit_cfg(struct kt_limit_cfg *lc, const char *name, enum kt_unit unit,
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
static int set_self_members(struct bench_env *e, bool full)
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

/* Rows (g), (h): this process moves `levels` (1 or 2) below bench-nest,
 * which becomes the member skb-match charges (a test-run skb's socket is
 * made in the caller's cgroup); 0 moves it back and drops that member. */
static int set_nest(struct bench_env *e, int levels)
{
	struct kt_member_key k = { 0 };
	struct kt_member_val v = { .count = 1, .own = 1 };
	char procs[PATH_MAX + 16];
	uint64_t id;
	int ret;

	if (kt_cgroup_id(e->cg_nest[0], &id))
		return -ENOENT;
	k.cgroup_id = id;
	v.ents[0] = (struct kt_member_ent){ .limit_id = e->limit_id[LIM_SKB_MATCH],
					    .slot = e->slot[LIM_SKB_MATCH] };
	if (levels && bpf_map_update_elem(e->bpf.members_fd, &k, &v, BPF_ANY) < 0)
		return -errno;
	snprintf(procs, sizeof(procs), "%s/cgroup.procs", levels ? e->cg_nest[levels] : e->self_cg);
	ret = ktest_write_file(procs, "0");
	if (ret) {
		fprintf(stderr, "bench: cannot move into %s: %s\n", procs, strerror(-ret));
		return ret;
	}
	if (!levels)
		bpf_map_delete_elem(e->bpf.members_fd, &k);
	kt_bpf_bump_gen(&e->bpf);
	return 0;
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

static void print_prog_size(const char *name, int fd)
{
	struct bpf_prog_info info = { 0 };
	__u32 len = sizeof(info);

	if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0)
		printf("- %s: %u bytes translated, %u bytes JITed\n", name, info.xlated_prog_len,
		       info.jited_prog_len);
}

/* ---- section: cgroup_skb decision via BPF_PROG_TEST_RUN ---- */

/* 14-byte Ethernet header + IPv4 + UDP + payload. The test run strips the
 * Ethernet header for cgroup_skb, as the egress hook sees L3. */
struct bench_pkt {
	uint8_t eth[14];
	uint8_t ip[20];
	uint8_t udp[8];
	uint8_t payload[18];
} __attribute__((packed));

static void make_pkt(struct bench_pkt *p, const char *daddr, uint16_t dport)
{
	uint32_t src = htonl(0x0a000001), dst;
	uint16_t v;

	memset(p, 0, sizeof(*p));
	p->eth[12] = 0x08; /* ETH_P_IP */
	p->ip[0] = 0x45;
	v = htons(sizeof(*p) - 14);
	memcpy(p->ip + 2, &v, 2);
	p->ip[8] = 64;
	p->ip[9] = IPPROTO_UDP;
	inet_pton(AF_INET, daddr, &dst);
	memcpy(p->ip + 12, &src, 4);
	memcpy(p->ip + 16, &dst, 4);
	v = htons(40000);
	memcpy(p->udp, &v, 2);
	v = htons(dport);
	memcpy(p->udp + 2, &v, 2);
	v = htons(8 + sizeof(p->payload));
	memcpy(p->udp + 4, &v, 2);
}

static int test_run(int fd, const struct bench_pkt *pkt, int repeat, double *ns, __u32 *retval)
{
	LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = pkt, .data_size_in = sizeof(*pkt),
		    .repeat = repeat);

	if (bpf_prog_test_run_opts(fd, &o) < 0)
		return -errno;
	*ns = o.duration;
	*retval = o.retval;
	return 0;
}

enum bucket_state { B_NONE, B_HUGE, B_EXHAUSTED, B_CLOSED };

static void set_bucket(struct bench_env *e, uint32_t slot, enum bucket_state s)
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

static int read_counters(struct bench_env *e, uint32_t slot, struct kt_counters *c)
{
	int ret = kt_bpf_read_counters(&e->bpf, slot, c);

	sanity(ret == 0, "reading counters of slot %u: %s", slot, strerror(-ret));
	return ret;
}

enum expect_count { C_NONE, C_ADMIT, C_REFUSE };

struct skb_case {
	const char *what;
	const char *daddr;
	uint16_t dport;
	enum bucket_state bucket;
	__u32 want_retval;
	enum expect_count count;
	double max_delta;
	bool full_list; /* the cgroup in 8 limits that all cover the packet */
	int nest;       /* the sending cgroup 1 or 2 levels below the member */
};

static int bench_skb(struct bench_env *e)
{
	static const struct skb_case cases[] = {
		{ "egress (a) matched, admitted", "10.1.2.3", SKB_PORT_MATCH, B_HUGE, 1, C_ADMIT, 60 },
		{ "egress (b) matched, refused (bucket exhausted)", "10.1.2.3", SKB_PORT_MATCH,
		  B_EXHAUSTED, 0, C_REFUSE, 60 },
		{ "egress (b') matched, refused (rate closed)", "10.1.2.3", SKB_PORT_MATCH, B_CLOSED, 0,
		  C_REFUSE, 60 },
		{ "egress (c) unmatched: port in no rule", "10.1.2.3", SKB_PORT_NORULE, B_HUGE, 1,
		  C_NONE, 15 },
		{ "egress (d) port of a limit the cgroup is not in", "10.1.2.3",
		  SKB_PORT_NOMEMBER, B_HUGE, 1, C_NONE, 60 },
		{ "egress (e) unmatched: port in a rule, address in no prefix", "192.0.2.1",
		  SKB_PORT_MATCH, B_HUGE, 1, C_NONE, 15 },
		{ "egress (f) matched, the cgroup's 8 limits all cover it", "10.1.2.3",
		  SKB_PORT_MATCH, B_HUGE, 1, C_ADMIT, 240, true },
		/* the nearest member is cached per cgroup, members included:
		 * the same one LRU lookup as (a) once warm */
		{ "egress (g) matched, sender 1 level below the member", "10.1.2.3",
		  SKB_PORT_MATCH, B_HUGE, 1, C_ADMIT, 70, false, 1 },
		{ "egress (h) matched, sender 2 levels below the member", "10.1.2.3",
		  SKB_PORT_MATCH, B_HUGE, 1, C_ADMIT, 70, false, 2 },
	};
	enum { NC = sizeof(cases) / sizeof(cases[0]) };
	const int rounds = g_quick ? 3 : 7;
	const int repeat = g_quick ? 500000 : 2000000;
	int kt_fd = bpf_program__fd(e->bpf.egress->progs.kt_egress);
	int empty_fd = bpf_program__fd(e->empty->progs.empty_egress);
	int clock_fd = bpf_program__fd(e->empty->progs.clock_egress);
	double val[NC][16], base[NC * 16], delta[NC][16], clk_val[16], clk_delta[16];
	uint32_t slot = e->slot[LIM_SKB_MATCH];
	struct bench_pkt pkts[NC], empty_pkt;
	int nbase = 0, ret;

	print_prog_size("kt_egress", kt_fd);
	print_prog_size("empty_egress", empty_fd);
	print_prog_size("clock_egress", clock_fd);
	fflush(stdout);
	make_pkt(&empty_pkt, "10.1.2.3", SKB_PORT_MATCH);
	for (int c = 0; c < NC; c++)
		make_pkt(&pkts[c], cases[c].daddr, cases[c].dport);

	for (int r = 0; r < rounds; r++) {
		for (int c = 0; c < NC; c++) {
			struct kt_counters before, after;
			struct kt_counters nb_before, nb_after;
			double ns_empty, ns_kt;
			__u32 rv;

			if (g_stop)
				return -EINTR;
			set_bucket(e, slot, cases[c].bucket);
			if (cases[c].full_list && (ret = set_self_members(e, true)))
				return ret;
			if (cases[c].nest && (ret = set_nest(e, cases[c].nest)))
				return ret;
			if (read_counters(e, slot, &before) ||
			    read_counters(e, e->slot[LIM_SKB_NOMEMBER], &nb_before))
				return -EIO;
			/* paired: the empty program right before, same packet size */
			ret = test_run(empty_fd, &empty_pkt, repeat, &ns_empty, &rv);
			if (!ret)
				ret = test_run(kt_fd, &pkts[c], repeat, &ns_kt, &rv);
			if (ret) {
				fprintf(stderr, "bench: BPF_PROG_TEST_RUN: %s\n", strerror(-ret));
				return ret;
			}
			if (cases[c].full_list && !ret)
				ret = set_self_members(e, false);
			if (cases[c].nest && !ret)
				ret = set_nest(e, 0);
			base[nbase++] = ns_empty;
			val[c][r] = ns_kt;
			delta[c][r] = ns_kt - ns_empty;
			sanity(rv == cases[c].want_retval, "%s: program returned %u, expected %u",
			       cases[c].what, rv, cases[c].want_retval);
			if (read_counters(e, slot, &after) ||
			    read_counters(e, e->slot[LIM_SKB_NOMEMBER], &nb_after))
				return -EIO;
			__u64 adm = after.admitted - before.admitted;
			__u64 thr = after.throttled - before.throttled;
			switch (cases[c].count) {
			case C_ADMIT:
				sanity(adm == (__u64)repeat && thr == 0,
				       "%s: counted %llu admitted, %llu throttled of %d runs",
				       cases[c].what, (unsigned long long)adm,
				       (unsigned long long)thr, repeat);
				break;
			case C_REFUSE:
				/* an exhausted bucket may admit the first run of the first round */
				sanity(adm + thr == (__u64)repeat && thr + 1 >= (__u64)repeat,
				       "%s: counted %llu admitted, %llu throttled of %d runs",
				       cases[c].what, (unsigned long long)adm,
				       (unsigned long long)thr, repeat);
				break;
			case C_NONE:
				sanity(adm == 0 && thr == 0 &&
					       nb_after.admitted == nb_before.admitted &&
					       nb_after.throttled == nb_before.throttled,
				       "%s: unmatched traffic was counted", cases[c].what);
				break;
			}
		}
		/* the clock read alone, paired with the empty program likewise */
		double ns_empty, ns_clk;
		__u32 rv;

		ret = test_run(empty_fd, &empty_pkt, repeat, &ns_empty, &rv);
		if (!ret)
			ret = test_run(clock_fd, &empty_pkt, repeat, &ns_clk, &rv);
		if (ret) {
			fprintf(stderr, "bench: BPF_PROG_TEST_RUN: %s\n", strerror(-ret));
			return ret;
		}
		sanity(rv == 1, "clock_egress returned %u, expected 1", rv);
		clk_val[r] = ns_clk;
		clk_delta[r] = ns_clk - ns_empty;
	}
	double b = median(base, nbase);
	for (int c = 0; c < NC; c++)
		row_ns_delta(cases[c].what, median(val[c], rounds), b, median(delta[c], rounds),
			     cases[c].max_delta);
	row_ns_delta("egress: clock read only (bpf_ktime_get_ns)", median(clk_val, rounds), b,
		     median(clk_delta, rounds), NAN);
	/* the target for nesting: a sender below a member within
	 * 10 ns of the member itself, per round (g) or (h) minus (a) */
	for (int c = 0; c < NC; c++) {
		double nd[16];
		char what[96];

		if (!cases[c].nest)
			continue;
		for (int r = 0; r < rounds; r++)
			nd[r] = delta[c][r] - delta[0][r];
		snprintf(what, sizeof(what), "egress (%c) - (a): %d level%s below a member vs the member",
			 cases[c].nest == 1 ? 'g' : 'h', cases[c].nest, cases[c].nest == 1 ? "" : "s");
		row_ns_delta(what, median(val[c], rounds), median(val[0], rounds),
			     median(nd, rounds), 10);
	}
	return 0;
}

/* ---- section: XDP tag decision via BPF_PROG_TEST_RUN ---- */

#define XDP_LIM 1
#define XDP_PASS_RV 2
#define XDP_DROP_RV 1

static int bench_xdp(struct bench_env *e)
{
	static const struct {
		const char *what;
		uint32_t saddr; /* host order */
		__u32 want_retval;
	} cases[] = {
		{ "xdp tag decision, bucket admitting (deep burst)", 0x0a000001, XDP_PASS_RV },
		{ "xdp tag decision, bucket refusing", 0x0a000002, XDP_DROP_RV },
	};
	enum { NC = sizeof(cases) / sizeof(cases[0]) };
	const int rounds = g_quick ? 3 : 7;
	const int repeat = g_quick ? 500000 : 2000000;
	int empty_fd = bpf_program__fd(e->empty->progs.empty_xdp);
	double val[NC][16], base[NC * 16], delta[NC][16];
	struct kt_xdp_tags *t = NULL;
	struct bench_pkt pkts[NC];
	char pin[PATH_MAX];
	uint8_t slow[16] = { 10, 0, 0, 2 };
	int nbase = 0, ret, kt_fd, lo = (int)if_nametoindex("lo");

	snprintf(pin, sizeof(pin), "/sys/fs/bpf/kt-bench-%d-xdp", getpid());
	ret = kt_xdp_tags_open(pin, 65536, &t);
	if (ret) {
		fprintf(stderr, "bench: cannot load the XDP tag programs: %s\n", strerror(-ret));
		goto out;
	}
	/* test runs arrive on lo; 1e9 tokens/s with a burst of 1e9 admits
	 * every run, the /32 override of one token per 1000 s refuses */
	if ((ret = kt_xdp_tags_set_iface(t, lo, XDP_LIM, 32, 128)) ||
	    (ret = kt_xdp_tags_set_limit(t, XDP_LIM, 1e9, 1000000000ull)) ||
	    (ret = kt_xdp_tags_set_rule(t, XDP_LIM, 4, slow, 32, 0, 1e-3, 1))) {
		fprintf(stderr, "bench: cannot program the XDP tag maps: %s\n", strerror(-ret));
		goto out;
	}
	kt_fd = kt_xdp_tags_prog_fd(t);
	print_prog_size("kt_xdp_tags", kt_fd);
	print_prog_size("empty_xdp", empty_fd);
	fflush(stdout);
	for (int c = 0; c < NC; c++) {
		uint32_t src = htonl(cases[c].saddr);

		make_pkt(&pkts[c], "192.0.2.1", 53);
		memcpy(pkts[c].ip + 12, &src, 4);
	}
	for (int r = 0; r < rounds; r++) {
		for (int c = 0; c < NC; c++) {
			struct kt_xdp_tags_stats before, after;
			double ns_empty, ns_kt;
			__u32 rv;

			if (g_stop) {
				ret = -EINTR;
				goto out;
			}
			if ((ret = kt_xdp_tags_stats(t, XDP_LIM, &before)))
				goto out;
			ret = test_run(empty_fd, &pkts[c], repeat, &ns_empty, &rv);
			if (!ret)
				sanity(rv == XDP_PASS_RV, "empty_xdp returned %u", rv);
			if (!ret)
				ret = test_run(kt_fd, &pkts[c], repeat, &ns_kt, &rv);
			if (ret) {
				fprintf(stderr, "bench: BPF_PROG_TEST_RUN: %s\n", strerror(-ret));
				goto out;
			}
			if ((ret = kt_xdp_tags_stats(t, XDP_LIM, &after)))
				goto out;
			base[nbase++] = ns_empty;
			val[c][r] = ns_kt;
			delta[c][r] = ns_kt - ns_empty;
			sanity(rv == cases[c].want_retval, "%s: program returned %u, expected %u",
			       cases[c].what, rv, cases[c].want_retval);
			__u64 adm = after.admitted - before.admitted;
			__u64 drp = after.dropped - before.dropped;
			if (cases[c].want_retval == XDP_PASS_RV)
				sanity(adm == (__u64)repeat && drp == 0,
				       "%s: counted %llu admitted, %llu dropped of %d runs",
				       cases[c].what, (unsigned long long)adm,
				       (unsigned long long)drp, repeat);
			else
				/* the first run of the first round takes the one token */
				sanity(adm + drp == (__u64)repeat && drp + 1 >= (__u64)repeat,
				       "%s: counted %llu admitted, %llu dropped of %d runs",
				       cases[c].what, (unsigned long long)adm,
				       (unsigned long long)drp, repeat);
		}
	}
	/* the clock read alone, paired with the empty program likewise */
	int clock_fd = bpf_program__fd(e->empty->progs.clock_xdp);
	double clk_val[16], clk_delta[16];
	for (int r = 0; r < rounds; r++) {
		double ns_empty, ns_clk;
		__u32 rv;

		ret = test_run(empty_fd, &pkts[0], repeat, &ns_empty, &rv);
		if (!ret)
			ret = test_run(clock_fd, &pkts[0], repeat, &ns_clk, &rv);
		if (ret) {
			fprintf(stderr, "bench: BPF_PROG_TEST_RUN: %s\n", strerror(-ret));
			goto out;
		}
		sanity(rv == XDP_PASS_RV, "clock_xdp returned %u", rv);
		clk_val[r] = ns_clk;
		clk_delta[r] = ns_clk - ns_empty;
	}
	double b = median(base, nbase);
	for (int c = 0; c < NC; c++)
		row_ns_delta(cases[c].what, median(val[c], rounds), b, median(delta[c], rounds), 60);
	row_ns_delta("xdp: clock read only (bpf_ktime_get_coarse_ns)", median(clk_val, rounds), b,
		     median(clk_delta, rounds), NAN);
	ret = 0;
out:
	kt_xdp_tags_close(t);
	kt_bpffx_rm_pins(pin);
	return ret;
}


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
	uint64_t ns = 0;

	for (int i = 0; i < n; i++) {
		struct bpf_prog_info info = { 0 };
		__u32 len = sizeof(info);

		if (bpf_obj_get_info_by_fd(fds[i], &info, &len) == 0)
			ns += info.run_time_ns;
	}
	return ns;
}

struct conn_mode {
	const char *what;
	const char *cgroup;
	uint16_t port;
	int expect_refused; /* every connect fails with KT_REFUSE_ERRNO */
};

static int bench_connect(struct bench_env *e)
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
static int bench_audit(struct bench_env *e)
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

/* ---- section: GCRA in userspace on the mmapped bucket ---- */

static int bench_gcra_user(struct bench_env *e)
{
	const int rounds = g_quick ? 3 : 5;
	const long n = g_quick ? 500000 : 2000000;
	struct kt_bucket *bk = &e->bpf.buckets[e->slot[LIM_USER]];
	double clk[16], adm[16], ref[16], d_adm[16], d_ref[16];

	for (int r = 0; r < rounds; r++) {
		volatile __u64 sink = 0;
		long admitted = 0, refused = 0;
		__u64 wait;
		uint64_t t0, t1;

		if (g_stop)
			return -EINTR;
		t0 = now_ns();
		for (long i = 0; i < n; i++)
			sink += now_ns();
		t1 = now_ns();
		clk[r] = (double)(t1 - t0) / (double)n;

		set_bucket(e, e->slot[LIM_USER], B_HUGE);
		t0 = now_ns();
		for (long i = 0; i < n; i++)
			admitted += kt_gcra_decide(bk, now_ns(), 1, &wait) == KT_ADMIT;
		t1 = now_ns();
		adm[r] = (double)(t1 - t0) / (double)n;

		set_bucket(e, e->slot[LIM_USER], B_EXHAUSTED);
		t0 = now_ns();
		for (long i = 0; i < n; i++)
			refused += kt_gcra_decide(bk, now_ns(), 1, &wait) == KT_REFUSE;
		t1 = now_ns();
		ref[r] = (double)(t1 - t0) / (double)n;

		d_adm[r] = adm[r] - clk[r];
		d_ref[r] = ref[r] - clk[r];
		(void)sink;
		sanity(admitted == n, "userspace GCRA: %ld of %ld admitted at a huge rate", admitted,
		       n);
		sanity(refused >= n - 1, "userspace GCRA: %ld of %ld refused on an exhausted bucket",
		       refused, n);
	}
	double b = median(clk, rounds);
	row_ns_delta("userspace GCRA on mmapped bucket + clock_gettime, admitted", median(adm, rounds),
		     b, median(d_adm, rounds), NAN);
	row_ns_delta("userspace GCRA on mmapped bucket + clock_gettime, refused", median(ref, rounds),
		     b, median(d_ref, rounds), NAN);
	return 0;
}

/* ---- section: controller tick cost ---- */

static void ramp_cfg(struct kt_rate_limit_cfg *rl, int i)
{
	static const enum kt_mode modes[] = { KT_MODE_SCHEDULED, KT_MODE_RELAXED,
					      KT_MODE_ONLY_IF_USED, KT_MODE_GO_BACK_N };

	memset(rl, 0, sizeof(*rl));
	rl->min = 10;
	rl->max = 1e6;
	/* long enough that no limit reaches max in the run: every tick moves
	 * the rate and rewrites the buckets (the expensive case) */
	rl->ramp_up_ns = 1000000ull * 1000000000ull;
	rl->mode = modes[i % 4];
	rl->threshold_pct = 50;
	rl->cool_down_ns = 5000000000ull;
	rl->ramp_down_pct = 50;
	rl->ttl_ns = 180000000000ull;
}

/* kt_ramp_epoch alone, per limit, as a tick over n limits calls it. */
static double ramp_only_us(int nlimits, long total_calls)
{
	struct kt_ramp *r = calloc((size_t)nlimits, sizeof(*r));
	struct kt_rate_limit_cfg rl;
	long ticks = total_calls / nlimits;
	uint64_t t = 1000000000ull, t0, t1;
	volatile double sink = 0;

	if (!r)
		return NAN;
	for (int i = 0; i < nlimits; i++) {
		ramp_cfg(&rl, i);
		kt_ramp_init(&r[i], &rl, t, 0);
	}
	t0 = now_ns();
	for (long k = 0; k < ticks; k++) {
		t += 100000000ull;
		for (int i = 0; i < nlimits; i++) {
			struct kt_epoch_obs obs = {
				.now_ns = t,
				.granted_tokens = r[i].rate * 0.1,
				.used_tokens = r[i].rate * 0.1 * (k & 1 ? 0.7 : 0.3),
				.calls = (uint64_t)(k & 3),
			};
			sink += kt_ramp_epoch(&r[i], &obs);
		}
	}
	t1 = now_ns();
	(void)sink;
	free(r);
	return (double)(t1 - t0) / 1e3 / (double)(ticks * nlimits);
}

/* Member cgroups for the full tick: one cgroup is in at most
 * KT_LIMITS_PER_CGROUP limits, so KT_MAX_LIMITS limits need this many. */
#define TICK_CGROUPS ((KT_MAX_LIMITS + KT_LIMITS_PER_CGROUP - 1) / KT_LIMITS_PER_CGROUP)

/* What the full tick needs, built by hand as the daemon builds it: the
 * controller's context and what it points at. */
struct tick_rig {
	struct kt_config cfg;
	struct kt_plan plan;
	struct kt_bpf bpf;
	struct kt_limit_state *ls;
	struct kt_sample *hist_pool;
	struct kt_pool *pool;
	struct kt_pool_local *pool_local;
	struct kt_slot_base *slot_base;
	struct kt_ctl ctl;
};

/* kt_ctl_tick with n limits in real maps: counter reads, ramp, bucket
 * writes. Returns µs per limit per tick, or NAN. */
static double full_tick_us(struct tick_rig *r, const char *cg_mount, char (*cgroups)[PATH_MAX],
			   int nlimits, long total_calls)
{
	char err[KT_ERR_LEN], name[16];
	struct kt_bucket_policy *pol = NULL;
	double us = NAN;
	long ticks = total_calls / nlimits;
	uint64_t t, t0, t1;
	int ret;

	if (ticks < 20)
		ticks = 20;
	r->cfg.limits = calloc((size_t)nlimits, sizeof(*r->cfg.limits));
	pol = calloc((size_t)nlimits, sizeof(*pol));
	const int hist_cap = kt_ctl_hist_cap(1000000000ull, 100000000ull); /* as ticked below */

	r->ls = calloc((size_t)nlimits, sizeof(*r->ls));
	r->hist_pool = calloc((size_t)nlimits * hist_cap, sizeof(*r->hist_pool));
	if (!r->cfg.limits || !pol || !r->ls || !r->hist_pool)
		goto out;
	r->cfg.n_limits = nlimits;
	for (int i = 0; i < nlimits; i++) {
		struct kt_limit_cfg *lc = &r->cfg.limits[i];
		char addr[32];

		snprintf(name, sizeof(name), "tick-%d", i);
		snprintf(addr, sizeof(addr), "10.%d.%d.0", i / 256, i % 256);
		limit_cfg(lc, name, KT_UNIT_PACKET, addr, 24, 0, cgroups[i / KT_LIMITS_PER_CGROUP]);
		lc->match.port_hi = 65535;
		ramp_cfg(&lc->rl, i);
		lc->burst = 100;
	}
	ret = kt_plan_resolve(&r->cfg, cg_mount, NULL, &r->plan, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "bench: tick: %s\n", err);
		goto out;
	}
	/* the tick consults the pool (local store here: no round trips) */
	r->pool_local = calloc((size_t)nlimits, sizeof(*r->pool_local));
	r->slot_base = calloc(KT_MAX_BUCKETS, sizeof(*r->slot_base));
	ret = r->pool_local && r->slot_base ? kt_pool_create(&r->pool, &r->cfg, err, sizeof(err))
					    : -ENOMEM;
	if (ret) {
		fprintf(stderr, "bench: tick: %s\n", ret == -ENOMEM ? "out of memory" : err);
		goto out;
	}
	t = now_ns();
	for (int i = 0; i < nlimits; i++) {
		struct kt_limit_state *s = &r->ls[i];

		/* as the daemon starts a limit: at min, one member */
		kt_ramp_init(&s->ramp, &r->cfg.limits[i].rl, t, 0);
		s->pool_rate = kt_ramp_rate(&s->ramp);
		s->pool_size = 1;
		s->bucket_rate = pol[i].rate = s->pool_rate;
		s->bucket_burst = pol[i].burst = r->cfg.limits[i].burst;
		kt_ctl_hist_rehome(s, r->hist_pool + (size_t)i * hist_cap, hist_cap);
	}
	ret = kt_plan_apply(&r->bpf, &r->plan, pol, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "bench: tick: %s\n", err);
		goto out;
	}
	r->ctl = (struct kt_ctl){
		.tick_ns = r->cfg.tick_ns,
		.epoch_ns = r->cfg.epoch_ns,
		.plan = &r->plan,
		.ls = r->ls,
		.pool = r->pool,
		.pool_local = r->pool_local,
		.bpf = &r->bpf,
		.slot_base = r->slot_base,
	};
	/* fill the trailing epoch first: 100 ms ticks on an injected clock */
	for (int k = 0; k < 12; k++)
		kt_ctl_tick(&r->ctl, t += 100000000ull);
	double first = r->ls[0].pool_rate;
	t0 = now_ns();
	for (long k = 0; k < ticks; k++)
		kt_ctl_tick(&r->ctl, t += 100000000ull);
	t1 = now_ns();
	us = (double)(t1 - t0) / 1e3 / (double)(ticks * nlimits);

	/* the scheduled limit (0) must have ramped, and the map must hold
	 * exactly what the controller last wrote */
	struct kt_bucket *bk = &r->bpf.buckets[r->plan.limits[0].members[0].slot];
	sanity(r->ls[0].pool_rate > first, "tick: scheduled ramp did not advance (%g -> %g)", first,
	       r->ls[0].pool_rate);
	sanity(bk->interval_fp == kt_interval_fp_from_rate(r->ls[0].bucket_rate),
	       "tick: bucket interval %llu is not the controller's rate %g",
	       (unsigned long long)bk->interval_fp, r->ls[0].bucket_rate);
out:
	kt_ctl_free(&r->ctl);
	r->ctl = (struct kt_ctl){ 0 };
	kt_pool_destroy(r->pool);
	r->pool = NULL;
	free(r->pool_local);
	r->pool_local = NULL;
	free(r->slot_base);
	r->slot_base = NULL;
	kt_plan_free(&r->plan);
	free_limit_cfgs(r->cfg.limits, r->cfg.n_limits);
	r->cfg.limits = NULL;
	r->cfg.n_limits = 0;
	free(r->ls);
	r->ls = NULL;
	free(r->hist_pool);
	r->hist_pool = NULL;
	free(pol);
	return us;
}

static int bench_tick(struct bench_env *e)
{
	static const int ramp_n[] = { 1, 100, 1000 };
	static const int full_n[] = { 1, 100, 1000 };
	const long ramp_calls = g_quick ? 200000 : 2000000;
	const long full_calls = g_quick ? 5000 : 40000;
	char err[KT_ERR_LEN], pin_dir[PATH_MAX], what[112];
	char (*cgs)[PATH_MAX] = calloc(TICK_CGROUPS, sizeof(*cgs));
	struct tick_rig *r = calloc(1, sizeof(*r));
	int ret = 0;

	pin_dir[0] = 0;
	if (!r || !cgs) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < sizeof(ramp_n) / sizeof(ramp_n[0]); i++) {
		if (g_stop) {
			ret = -EINTR;
			goto out;
		}
		double us = ramp_only_us(ramp_n[i], ramp_calls);
		snprintf(what, sizeof(what), "controller: kt_ramp_epoch only, %d limit%s", ramp_n[i],
			 ramp_n[i] > 1 ? "s" : "");
		sanity(!isnan(us), "%s: out of memory", what);
		row_us_per_limit(what, us, 5);
	}

	/* The full tick needs its own maps: a plan of N limits replaces the
	 * fixture's. KT_MAX_LIMITS bounds N. */
	for (int i = 0; i < TICK_CGROUPS; i++) {
		char name[32];

		snprintf(name, sizeof(name), "bench-tick-%d", i);
		ret = ktest_cgroup_create(name, cgs[i], sizeof(cgs[i]));
		if (ret) {
			fprintf(stderr, "bench: cannot create tick cgroup: %s\n", strerror(-ret));
			cgs[i][0] = 0;
			goto out;
		}
	}
	snprintf(pin_dir, sizeof(pin_dir), "%s-tick", e->pin_dir);
	ret = kt_bpf_open(&r->bpf, pin_dir, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "bench: tick: %s\n", err);
		pin_dir[0] = 0;
		goto out;
	}
	r->cfg.file = e->cfg_name;
	r->cfg.node_name = e->cfg_name;
	r->cfg.epoch_ns = 1000000000ull;
	r->cfg.tick_ns = 100000000ull;
	for (size_t i = 0; i < sizeof(full_n) / sizeof(full_n[0]); i++) {
		if (g_stop) {
			ret = -EINTR;
			break;
		}
		double us = full_tick_us(r, e->cg_mount, cgs, full_n[i], full_calls);
		snprintf(what, sizeof(what), "controller: full kt_ctl_tick (counters, ramp, bucket writes), %d limit%s",
			 full_n[i], full_n[i] > 1 ? "s" : "");
		if (isnan(us)) {
			ret = -EIO;
			break;
		}
		row_us_per_limit(what, us, 5);
	}
	kt_bpf_close(&r->bpf);
out:
	if (pin_dir[0] && kt_bpf_cleanup(pin_dir, err, sizeof(err)))
		fprintf(stderr, "bench: cleanup: %s\n", err);
	/* after cleanup: the pinned links no longer hold the cgroups */
	for (int i = 0; cgs && i < TICK_CGROUPS && cgs[i][0]; i++)
		ktest_cgroup_destroy(cgs[i]);
	free(cgs);
	free(r);
	return ret;
}

/* ---- helpers for the end-to-end sections (ramp, pool) ---- */

/* A row with a free-form value; target NULL: none. */
static void row_text(const char *what, const char *value, const char *target, int met)
{
	struct row *r = row_new(what);

	if (!r)
		return;
	snprintf(r->value, sizeof(r->value), "%s", value);
	if (target) {
		snprintf(r->target, sizeof(r->target), "%s", target);
		row_target(r, met);
	}
}

/* One `status json` answer of a daemon under test, for limit `name`. */
struct dsnap {
	double up;               /* daemon uptime: the clock its ramp runs on */
	double pool_rate;
	double admitted, throttled;
	int size;                /* agreed pool size */
};

static bool dsnap_take(const struct ktest_daemon *d, const char *name, struct dsnap *s)
{
	char *out = ktest_daemon_cmd(d, "status json");
	double size = 0;
	bool ok;

	memset(s, 0, sizeof(*s));
	ok = out && ktest_json_num(out, "uptime_s", &s->up) &&
	     ktest_json_limit_num(out, name, "pool_rate", &s->pool_rate) &&
	     ktest_json_limit_num(out, name, "admitted", &s->admitted) &&
	     ktest_json_limit_num(out, name, "throttled", &s->throttled) &&
	     ktest_json_limit_num(out, name, "size", &size);
	s->size = (int)size;
	free(out);
	return ok;
}

/* ---- section: ramp tracking with the real daemon ---- */

#define RAMP_SECONDS 6 /* measured: seconds 2..6 (the first holds burst and attach) */

/* The ramp scenario (ktest_ramp_config): min 50/s -> max 200/s over 3 s,
 * burst 5, saturated by kt-load from before the daemon starts. Polling
 * `status json` places the kernel's exact admitted counts on the daemon's
 * uptime clock; per second k after the first, error = |admitted - integral
 * of the ramp| / integral. */
static int ramp_run(struct bench_env *e, const char *mode, double *max_err, double *mean_err)
{
	static struct dsnap s[512];
	struct ktest_daemon d = { .pid = -1 };
	char cg[PATH_MAX] = "", body[2048], modes[64];
	pid_t load = 0;
	int port, n = 0, ret;

	(void)e;
	*max_err = *mean_err = NAN;
	port = ktest_free_port(SOCK_DGRAM);
	ret = ktest_cgroup_create("bench-ramp", cg, sizeof(cg));
	if (ret || port <= 0) {
		fprintf(stderr, "bench: ramp: cannot create a cgroup or find a port\n");
		ret = ret ? ret : -EADDRNOTAVAIL;
		goto out;
	}
	snprintf(modes, sizeof(modes), "%s: {}", mode);
	ret = ktest_ramp_config(body, sizeof(body), cg, port, modes);
	if (ret)
		goto out;
	load = ktest_load_spawn(cg, port, RAMP_SECONDS + 10, 0, NULL); /* killed once measured */
	if (load < 0) {
		ret = load;
		load = 0;
		goto out;
	}
	ktest_sleep_ms(100); /* saturating before the programs attach */
	ret = ktest_daemon_up(&d, body);
	if (ret)
		goto out;
	for (int guard = 0; guard < 1000 && n < (int)(sizeof(s) / sizeof(s[0])); guard++) {
		if (g_stop) {
			ret = -EINTR;
			goto out;
		}
		if (!dsnap_take(&d, "ramp", &s[n])) {
			fprintf(stderr, "bench: ramp: kthrottled stopped answering\n");
			ret = -EIO;
			goto out;
		}
		if (s[n++].up >= RAMP_SECONDS + 0.05)
			break;
		ktest_sleep_ms(50);
	}
	ktest_kill_wait(&load);

	double sum = 0, worst = 0;
	int windows = 0;
	for (int k = 1; k < RAMP_SECONDS; k++) {
		int a = 0, b = 0;

		for (int i = 1; i < n; i++) {
			if (fabs(s[i].up - k) < fabs(s[a].up - k))
				a = i;
			if (fabs(s[i].up - (k + 1)) < fabs(s[b].up - (k + 1)))
				b = i;
		}
		double want = ktest_ramp_integral(s[b].up) - ktest_ramp_integral(s[a].up);
		double got = s[b].admitted - s[a].admitted;
		double err = fabs(got - want) / want;

		sanity(fabs(s[a].up - k) < 0.1 && fabs(s[b].up - (k + 1)) < 0.1,
		       "ramp %s: no status sample near %ds or %ds of uptime", mode, k, k + 1);
		sanity(s[b].throttled > s[a].throttled, "ramp %s: second %d not saturated", mode,
		       k + 1);
		if (getenv("KT_BENCH_VERBOSE"))
			fprintf(stderr, "bench: ramp %s [%.3f, %.3f]s admitted %.0f expected %.1f (%+.2f%%)\n",
				mode, s[a].up, s[b].up, got, want, (got - want) / want * 100);
		sum += err;
		worst = fmax(worst, err);
		windows++;
	}
	sanity(n > 0 && s[n - 1].pool_rate == KTEST_RAMP_MAX,
	       "ramp %s: pool rate %g at the end, not max", mode, n > 0 ? s[n - 1].pool_rate : NAN);
	*max_err = worst * 100;
	*mean_err = sum / windows * 100;
out:
	ktest_kill_wait(&load);
	if (d.dir[0])
		ktest_daemon_cleanup(&d);
	if (cg[0])
		ktest_cgroup_destroy(cg);
	return ret;
}

static int bench_ramp(struct bench_env *e)
{
	static const char *const modes[] = { "scheduled", "relaxed" };
	char what[112], val[40];

	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		double mx, mean;
		int ret = ramp_run(e, modes[i], &mx, &mean);

		if (ret)
			return ret;
		snprintf(what, sizeof(what),
			 "ramp e2e, %s 50→200/s over 3 s, saturated: per-second error, max of s 2–%d",
			 modes[i], RAMP_SECONDS);
		snprintf(val, sizeof(val), "%.2f %%", mx);
		row_text(what, val, "≤ 3 %", mx <= 3);
		snprintf(what, sizeof(what),
			 "ramp e2e, %s 50→200/s over 3 s, saturated: per-second error, mean of s 2–%d",
			 modes[i], RAMP_SECONDS);
		snprintf(val, sizeof(val), "%.2f %%", mean);
		row_text(what, val, "≤ 3 %", mean <= 3);
	}
	return 0;
}

/* ---- section: distributed pool, three simulated nodes ---- */

#define POOL_NODES 3
#define POOL_MAX 300.0
#define POOL_HB_S 0.2
#define POOL_STALE 3
#define POOL_WINDOW_S 10.0
#define POOL_IDLE_S 3.0

/* Redis command counts from INFO commandstats: `all` (in-script commands
 * included) and `client` (only what a client can send, never a script:
 * each round trip carries at least one). INFO itself is left out. */
struct redis_counts {
	double all, client;
};

static int redis_counts(const struct rp_proc *rp, struct redis_counts *c)
{
	static const char *const client_only[] = { "evalsha", "eval", "evalsha_ro", "eval_ro",
						   "script", "auth", "hello", "select",
						   "role", "client", "subscribe", "quit" };
	redisReply *r = rp_command(rp, "INFO commandstats");
	char *save = NULL, *line, *copy;

	memset(c, 0, sizeof(*c));
	if (!r || r->type != REDIS_REPLY_STRING) {
		if (r)
			freeReplyObject(r);
		fprintf(stderr, "bench: pool: INFO commandstats failed on port %d\n", rp->port);
		return -EIO;
	}
	copy = strdup(r->str);
	freeReplyObject(r);
	if (!copy)
		return -ENOMEM;
	for (line = strtok_r(copy, "\r\n", &save); line; line = strtok_r(NULL, "\r\n", &save)) {
		char name[64];
		double calls;

		if (sscanf(line, "cmdstat_%63[^:]:calls=%lf", name, &calls) != 2 ||
		    !strcmp(name, "info"))
			continue;
		c->all += calls;
		for (size_t i = 0; i < sizeof(client_only) / sizeof(client_only[0]); i++)
			if (!strcmp(name, client_only[i]))
				c->client += calls;
	}
	free(copy);
	return 0;
}

/* Node `node`'s config. Default burst (max: one second of the share per
 * member), so a sender that loses the CPU for a while on this 2-core box
 * does not lose tokens: the window measures the limiter, not the scheduler. */
static int pool_body(char *buf, size_t len, int redis_port, int node, const char *cg, int port)
{
	return snprintf(buf, len,
			"node: kt-bench-%d-%c\n"
			"tickInterval: 100ms\n"
			"store:\n"
			"  redisStore:\n"
			"    mode: single\n"
			"    url: redis://127.0.0.1:%d/0\n"
			"    keyPrefix: kt-bench-%d\n"
			"  heartbeat: %.0fms\n"
			"  staleAfter: %d\n"
			"  validFor: 2s\n"
			"limits:\n"
			"  - name: pool\n"
			"    cgroups: [%s]\n"
			"    match: {cidrs: [127.0.0.1/32], ports: %d, protocol: udp}\n"
			"    unit: datagram\n"
			"    rateLimit: {max: %.0f}\n",
			getpid(), 'a' + node, redis_port, getpid(), POOL_HB_S * 1000, POOL_STALE, cg,
			port, POOL_MAX) >= (int)len ? -ENAMETOOLONG : 0;
}

/* Seconds from `origin` until every daemon in d[idx[0..n-1]] shows pool size
 * `size`, polled every 10 ms for at most limit_s; NAN on time-out or a daemon
 * not answering. */
static double wait_size(struct ktest_daemon *d, const int *idx, int n, int size, double limit_s,
			uint64_t origin)
{
	uint64_t t0 = now_ns();

	while ((double)(now_ns() - t0) / 1e9 < limit_s && !g_stop) {
		int ok = 0;

		for (int i = 0; i < n; i++) {
			struct dsnap s;
			if (!dsnap_take(&d[idx[i]], "pool", &s))
				return NAN;
			ok += s.size == size;
		}
		if (ok == n)
			return (double)(now_ns() - origin) / 1e9;
		ktest_sleep_ms(10);
	}
	return NAN;
}

static int bench_pool(struct bench_env *e)
{
	const double converge_target = (POOL_STALE + 2) * POOL_HB_S;
	struct ktest_daemon d[POOL_NODES + 1];
	char cg[POOL_NODES + 1][PATH_MAX], body[2048], what[112], val[40], tgt[32], name[32];
	pid_t load[POOL_NODES + 1] = { 0 };
	struct rp_proc rp = { 0 };
	struct redis_counts c0, c1, c2, c3;
	struct dsnap a[POOL_NODES], b[POOL_NODES];
	int port, ret, all[POOL_NODES + 1] = { 0, 1, 2, 3 };
	double t, idle_s, sat_s;
	uint64_t t0;

	(void)e;
	memset(cg, 0, sizeof(cg));
	for (int i = 0; i <= POOL_NODES; i++) {
		memset(&d[i], 0, sizeof(d[i]));
		d[i].pid = -1;
	}
	ret = rp_start_master(&rp, NULL);
	if (ret) {
		fprintf(stderr, "bench: pool: cannot start redis-server: %s\n", strerror(-ret));
		goto out;
	}
	port = ktest_free_port(SOCK_DGRAM);
	if (port <= 0) {
		ret = -EADDRNOTAVAIL;
		goto out;
	}
	for (int i = 0; i <= POOL_NODES; i++) {
		snprintf(name, sizeof(name), "bench-pool-%d", i);
		ret = ktest_cgroup_create(name, cg[i], sizeof(cg[i]));
		if (ret) {
			cg[i][0] = 0;
			fprintf(stderr, "bench: pool: cannot create cgroup %s: %s\n", name, strerror(-ret));
			goto out;
		}
	}
	for (int i = 0; i < POOL_NODES; i++) {
		if ((ret = pool_body(body, sizeof(body), rp.port, i, cg[i], port)) ||
		    (ret = ktest_daemon_up(&d[i], body)))
			goto out;
	}
	t = wait_size(d, all, POOL_NODES, POOL_NODES, 5, now_ns());
	if (isnan(t)) {
		fprintf(stderr, "bench: pool: the %d daemons did not agree on size %d in 5 s\n",
			POOL_NODES, POOL_NODES);
		ret = -ETIMEDOUT;
		goto out;
	}

	/* Redis load with no traffic */
	ktest_sleep_ms(2 * (int)(POOL_HB_S * 1000)); /* past any join-time extra round trips */
	t0 = now_ns();
	if ((ret = redis_counts(&rp, &c0)))
		goto out;
	ktest_sleep_ms((int)(POOL_IDLE_S * 1000));
	if ((ret = redis_counts(&rp, &c1)))
		goto out;
	idle_s = (double)(now_ns() - t0) / 1e9;

	/* saturated: every node's member sends flat out */
	for (int i = 0; i < POOL_NODES; i++) {
		load[i] = ktest_load_spawn(cg[i], port, 60, 0, NULL);
		if (load[i] < 0) {
			ret = load[i];
			load[i] = 0;
			goto out;
		}
	}
	ktest_sleep_ms(1000); /* every bucket's burst spent */
	t0 = now_ns();
	if ((ret = redis_counts(&rp, &c2)))
		goto out;
	for (int i = 0; i < POOL_NODES; i++)
		if (!dsnap_take(&d[i], "pool", &a[i])) {
			ret = -EIO;
			goto out;
		}
	for (int k = 0; k < (int)(POOL_WINDOW_S * 10) && !g_stop; k++)
		ktest_sleep_ms(100);
	if (g_stop) {
		ret = -EINTR;
		goto out;
	}
	for (int i = 0; i < POOL_NODES; i++)
		if (!dsnap_take(&d[i], "pool", &b[i])) {
			ret = -EIO;
			goto out;
		}
	if ((ret = redis_counts(&rp, &c3)))
		goto out;
	sat_s = (double)(now_ns() - t0) / 1e9;

	/* each node over its own exact interval (the daemon's uptime clock) */
	double agg = 0, lo = INFINITY, hi = 0;
	for (int i = 0; i < POOL_NODES; i++) {
		double r = (b[i].admitted - a[i].admitted) / (b[i].up - a[i].up);
		agg += r;
		lo = fmin(lo, r);
		hi = fmax(hi, r);
		if (getenv("KT_BENCH_VERBOSE"))
			fprintf(stderr, "bench: pool: node %d admitted %.1f/s over %.3f s\n", i, r,
				b[i].up - a[i].up);
		sanity(b[i].throttled > a[i].throttled, "pool: node %d not saturated", i);
		sanity(a[i].size == POOL_NODES && b[i].size == POOL_NODES,
		       "pool: node %d saw size %d..%d during the window", i, a[i].size, b[i].size);
	}
	double acc = (agg / POOL_MAX - 1) * 100;
	snprintf(what, sizeof(what),
		 "pool: aggregate admitted / max, %d nodes saturated, %.0f s window (max %.0f/s)",
		 POOL_NODES, POOL_WINDOW_S, POOL_MAX);
	snprintf(val, sizeof(val), "%.2f/s (%+.2f %%)", agg, acc);
	row_text(what, val, "within ±2 %", fabs(acc) <= 2);
	snprintf(what, sizeof(what), "pool: per-node admitted rate, min–max of %d (share %.0f/s)",
		 POOL_NODES, POOL_MAX / POOL_NODES);
	snprintf(val, sizeof(val), "%.1f–%.1f /s", lo, hi);
	row_text(what, val, NULL, 0);

	double hb_per_s = 1 / POOL_HB_S;
	double idle_rt = (c1.client - c0.client) / idle_s / POOL_NODES / hb_per_s;
	double sat_rt = (c3.client - c2.client) / sat_s / POOL_NODES / hb_per_s;
	double idle_all = (c1.all - c0.all) / idle_s / POOL_NODES;
	double sat_all = (c3.all - c2.all) / sat_s / POOL_NODES;
	snprintf(what, sizeof(what),
		 "pool: Redis client commands per node per heartbeat (%.0f ms), idle", POOL_HB_S * 1000);
	snprintf(val, sizeof(val), "%.2f", idle_rt);
	row_text(what, val, "≤ 2 round trips", idle_rt <= 2);
	snprintf(what, sizeof(what),
		 "pool: Redis client commands per node per heartbeat (%.0f ms), saturated",
		 POOL_HB_S * 1000);
	snprintf(val, sizeof(val), "%.2f", sat_rt);
	row_text(what, val, "≤ 2 round trips", sat_rt <= 2);
	snprintf(what, sizeof(what),
		 "pool: Redis commands/s per node incl. in-script, saturated vs idle");
	{
		struct row *r = row_new(what);
		if (r) {
			snprintf(r->value, sizeof(r->value), "%.1f /s", sat_all);
			snprintf(r->baseline, sizeof(r->baseline), "%.1f /s", idle_all);
			snprintf(r->delta, sizeof(r->delta), "×%.3f", idle_all > 0 ? sat_all / idle_all : NAN);
			snprintf(r->target, sizeof(r->target), "no growth (≤ ×1.05)");
			row_target(r, sat_all <= idle_all * 1.05 + 0.1);
		}
	}
	sanity(idle_rt > 0.5 && sat_rt > 0.5, "pool: %.2f / %.2f commands per heartbeat: the daemons "
	       "are not heartbeating", idle_rt, sat_rt);

	/* a member dies: kill -9 node 2's daemon (its pinned programs stay);
	 * it lapses after staleAfter heartbeats and the survivors believe the
	 * shrink one answer late (damping), so one heartbeat more than a join */
	const double death_target = converge_target + POOL_HB_S;
	snprintf(tgt, sizeof(tgt), "≤ %.1f s", death_target);
	t0 = now_ns();
	ktest_daemon_signal_wait(&d[POOL_NODES - 1], SIGKILL);
	t = wait_size(d, all, POOL_NODES - 1, POOL_NODES - 1, 5, t0);
	sanity(!isnan(t), "pool: survivors did not shrink to %d within 5 s", POOL_NODES - 1);
	snprintf(what, sizeof(what),
		 "pool: convergence after kill -9 of a node (survivors show size %d; staleAfter %d × %.0f ms)",
		 POOL_NODES - 1, POOL_STALE, POOL_HB_S * 1000);
	snprintf(val, sizeof(val), "%.3f s", t);
	row_text(what, val, tgt, !isnan(t) && t <= death_target);

	/* a member joins: a fresh node with its own cgroup */
	int joined[POOL_NODES] = { 0, 1, POOL_NODES };
	if ((ret = pool_body(body, sizeof(body), rp.port, POOL_NODES, cg[POOL_NODES], port)))
		goto out;
	uint64_t spawn = now_ns();
	if ((ret = ktest_daemon_up(&d[POOL_NODES], body)))
		goto out;
	t0 = now_ns();
	t = wait_size(d, joined, POOL_NODES, POOL_NODES, 5, t0);
	sanity(!isnan(t), "pool: the pool did not grow back to %d within 5 s", POOL_NODES);
	if (getenv("KT_BENCH_VERBOSE"))
		fprintf(stderr, "bench: pool: join converged %.3f s after ready, %.3f s after spawn\n",
			t, t + (double)(t0 - spawn) / 1e9);
	snprintf(what, sizeof(what),
		 "pool: convergence after a node joins (all show size %d; from the joiner's first answer)",
		 POOL_NODES);
	snprintf(val, sizeof(val), "%.3f s", t);
	row_text(what, val, tgt, !isnan(t) && t <= converge_target);
	ret = 0;
out:
	for (int i = 0; i <= POOL_NODES; i++)
		ktest_kill_wait(&load[i]);
	for (int i = 0; i <= POOL_NODES; i++)
		if (d[i].dir[0])
			ktest_daemon_cleanup(&d[i]);
	for (int i = 0; i <= POOL_NODES; i++)
		if (cg[i][0])
			ktest_cgroup_destroy(cg[i]);
	rp_stop(&rp);
	return ret;
}

/* ---- driver ---- */

/* ---- section: UDP sendto() against nftables ---- */

/* What a user comparing kthrottle with nftables sees: the cost of one
 * unconnected UDP sendto() to 127.0.0.1 from a process in a test cgroup,
 * with nothing, empty programs, kthrottled's programs, or nft rules in the
 * way. The machine's speed drifts over seconds, more than the overheads
 * measured, so one long-lived worker per mode (in its cgroup, socket bound
 * and warm) is driven over pipes in short chunks, and every mode's chunk is
 * paired with the mean of the baseline chunks run just before and just after
 * it; a row's delta is the median of those paired deltas over many rounds
 * (± half their interquartile range).
 *
 * Every worker sends in a network namespace of its own (with only lo up, and
 * its receiver bound with the smallest receive buffer and never read, so the
 * datagrams are dropped at a full socket: no ICMP). An nft table hooks the
 * output path of its whole namespace, so each nft mode's table is loaded in
 * its worker's namespace only, for the whole run: no other mode pays for it
 * (the kernel's switch for a hook is global, but elsewhere it costs a test
 * of an empty hook list; measured: the baseline row with and without a
 * table loaded). The other
 * modes get namespaces too, so every sender has the same stack around it
 * (only lo, no host rules); cgroup programs do not care about namespaces.
 * All cgroups are children of kt-test-<pid>-sendto (level 2, which the nft
 * rules name). */

#define ST_FILLERS 999      /* + the sender's cgroup: a 1,000-entry verdict map */
#define ST_CHUNK 3000       /* calls per measured chunk: 3-6 ms */
#define ST_CHUNK_QUICK 2000
#define ST_ROUNDS 60        /* rounds of one chunk per mode, each between baseline chunks */
#define ST_ROUNDS_QUICK 15
#define ST_MAX_ROUNDS 64    /* median() takes at most 64 values */
#define ST_SUBS 9           /* slices per chunk, timed one by one */
#define ST_WARMUP 2000      /* calls before the first measured chunk */
#define ST_TABLE_CYCLES 24  /* baseline chunk pairs with / without an nft table loaded */
#define ST_PORT 9000        /* in the workers' own namespaces: any port is free */
#define ST_PORT_REFUSE 9001
#define ST_PORT_UNMATCH 9002

enum { ST_BASE, ST_CONTROL, ST_EMPTY, ST_KT_ADMIT, ST_KT_REFUSE, ST_KT_UNMATCH, ST_NFT_LIMIT,
       ST_NFT_VMAP, ST_NEST1, ST_NEST4, ST_KT_OTHER, ST_N };

struct st_result {
	long n, errors, refused;
	int last_errno;
	double ns_per_call; /* of the median slice */
};

/* A measuring worker: it runs `n` calls per command (n <= 0: exit) and
 * answers with a struct st_result. */
struct st_worker {
	pid_t pid;
	int cmd, res; /* pipe ends: commands to it, results from it */
	int netns;    /* its network namespace, for nft */
	long sent;    /* calls made, warm-up included */
};

static int st_lo_up(void)
{
	struct ifreq ifr = { 0 };
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), ret = 0;

	if (fd < 0)
		return -errno;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) < 0)
		ret = -errno;
	ifr.ifr_flags |= IFF_UP;
	if (!ret && ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
		ret = -errno;
	close(fd);
	return ret;
}

/* A UDP receiver on 127.0.0.1:port that is never read: the smallest buffer
 * the kernel allows fills at once and every later datagram is dropped there. */
static int st_receiver(uint16_t port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int one = 1;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

/* n calls, timed in ST_SUBS slices; r->ns_per_call is the median slice's:
 * a slice in which another task had the CPU is dropped, not averaged in. */
static void st_send(int fd, const struct sockaddr_in *sa, long n, struct st_result *r)
{
	double slice[ST_SUBS];
	char byte = 'x';
	long done = 0;

	for (int s = 0; s < ST_SUBS; s++) {
		long k = (n * (s + 1)) / ST_SUBS - done;
		uint64_t t0 = now_ns();

		for (long i = 0; i < k; i++) {
			if (sendto(fd, &byte, 1, 0, (const struct sockaddr *)sa, sizeof(*sa)) == 1)
				continue;
			if (errno == KT_REFUSE_ERRNO) {
				r->refused++;
			} else {
				r->errors++;
				r->last_errno = errno;
			}
		}
		slice[s] = k ? (double)(now_ns() - t0) / (double)k : NAN;
		done += k;
	}
	r->ns_per_call = median(slice, ST_SUBS);
	r->n = n;
}

static void st_worker_main(const char *cgroup, uint16_t port, int cmd, int res)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct st_result r = { 0 };
	long n;
	int fd = -1, rfd, ret;

	pin_cpu(0);
	ret = unshare(CLONE_NEWNET) < 0 ? -errno : st_lo_up();
	/* the receiver before joining: its socket stays in the bench's cgroup,
	 * where no program of the sender's cgroup runs for it */
	rfd = ret ? ret : st_receiver(port);
	ret = rfd < 0 ? rfd : ktest_cgroup_join(cgroup);
	if (!ret)
		fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		r.errors = 1;
		r.last_errno = ret ? -ret : errno;
	} else {
		/* the first send binds the socket; the rest warm caches and
		 * branch predictors; a refused mode's first one or two pass */
		st_send(fd, &sa, ST_WARMUP, &r);
	}
	if (write(res, &r, sizeof(r)) != (ssize_t)sizeof(r) || fd < 0)
		_exit(1);
	while (read(cmd, &n, sizeof(n)) == (ssize_t)sizeof(n) && n > 0) {
		memset(&r, 0, sizeof(r));
		st_send(fd, &sa, n, &r);
		if (write(res, &r, sizeof(r)) != (ssize_t)sizeof(r))
			break;
	}
	_exit(0);
}

static int st_read_result(int fd, struct st_result *r)
{
	size_t got = 0;

	while (got < sizeof(*r)) {
		ssize_t n = read(fd, (char *)r + got, sizeof(*r) - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -EIO;
		got += (size_t)n;
	}
	return 0;
}

static void st_worker_stop(struct st_worker *w)
{
	int status;

	long stop = 0;

	if (w->netns >= 0)
		close(w->netns);
	/* told, not left to see EOF: later workers hold copies of this pipe */
	if (w->cmd >= 0 && write(w->cmd, &stop, sizeof(stop)) != (ssize_t)sizeof(stop) &&
	    w->pid > 0)
		kill(w->pid, SIGKILL);
	if (w->cmd >= 0)
		close(w->cmd);
	if (w->res >= 0)
		close(w->res);
	if (w->pid > 0)
		while (waitpid(w->pid, &status, 0) < 0 && errno == EINTR)
			;
	w->pid = -1;
	w->cmd = w->res = w->netns = -1;
}

/* Starts a worker in `cgroup` sending to 127.0.0.1:port and waits for its
 * warm-up; *warm is that result. 0 or -errno. */
static int st_worker_start(struct st_worker *w, const char *cgroup, uint16_t port,
			   struct st_result *warm)
{
	int c[2], r[2], ret;
	char ns[64];

	w->pid = -1;
	w->cmd = w->res = w->netns = -1;
	if (pipe2(c, O_CLOEXEC) < 0)
		return -errno;
	if (pipe2(r, O_CLOEXEC) < 0) {
		ret = -errno;
		close(c[0]);
		close(c[1]);
		return ret;
	}
	fflush(NULL);
	w->pid = fork();
	if (w->pid == 0) {
		pid_t parent = getppid();

		close(c[1]);
		close(r[0]);
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		st_worker_main(cgroup, port, c[0], r[1]);
	}
	ret = w->pid < 0 ? -errno : 0;
	close(c[0]);
	close(r[1]);
	w->cmd = c[1];
	w->res = r[0];
	if (ret) {
		st_worker_stop(w);
		return ret;
	}
	ret = st_read_result(w->res, warm);
	if (!ret && warm->errors && warm->n == 0)
		ret = -warm->last_errno;
	w->sent = warm->n;
	snprintf(ns, sizeof(ns), "/proc/%d/ns/net", w->pid);
	if (!ret && (w->netns = open(ns, O_RDONLY | O_CLOEXEC)) < 0)
		ret = -errno;
	if (ret) {
		fprintf(stderr, "bench: sendto: worker in %s: %s\n", cgroup, strerror(-ret));
		st_worker_stop(w);
	}
	return ret;
}

static int st_chunk(struct st_worker *w, long n, struct st_result *r)
{
	if (write(w->cmd, &n, sizeof(n)) != (ssize_t)sizeof(n) || st_read_result(w->res, r))
		return -EIO;
	w->sent += r->n;
	return 0;
}

/* r0 = 1; exit: what running any one program at that hook costs. */
static int st_empty_prog(enum bpf_prog_type type, enum bpf_attach_type at)
{
	const struct bpf_insn insns[] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 1 },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	LIBBPF_OPTS(bpf_prog_load_opts, o, .expected_attach_type = at);

	return bpf_prog_load(type, "kt_st_empty", "GPL", insns, 2, &o);
}

/* nft -f / nft delete table, in network namespace `netns`; quiet unless it
 * fails (a delete of a table that is not there is no failure). The bench
 * itself steps into the namespace and back: nft inherits it. */
static int st_nft(int netns, const char *nft, const char *a1, const char *a2, const char *a3,
		  const char *a4)
{
	char *argv[] = { (char *)nft, (char *)a1, (char *)a2, (char *)a3, (char *)a4, NULL };
	char *out = NULL;
	int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC), rc;

	if (self < 0 || setns(netns, CLONE_NEWNET) < 0) {
		rc = -errno;
		fprintf(stderr, "bench: sendto: cannot enter a worker's netns: %s\n", strerror(-rc));
		if (self >= 0)
			close(self);
		return rc;
	}
	rc = ktest_run_capture(argv, &out);
	if (setns(self, CLONE_NEWNET) < 0) {
		/* nothing after this could be trusted to run where it should */
		fprintf(stderr, "bench: sendto: cannot return to the bench's netns: %s\n",
			strerror(errno));
		_exit(1);
	}
	close(self);
	if (rc && strcmp(a1, "delete"))
		fprintf(stderr, "bench: sendto: nft %s %s: exit %d: %s", a1, a2, rc, out ? out : "");
	free(out);
	return rc ? -EIO : 0;
}

/* The two rulesets, written to files that `nft -f` loads. limit: UDP to
 * ST_PORT from sockets in the sender's cgroup, through one token bucket that
 * never runs out (1e9/s) - the shape of kthrottle's admitted path: cgroup +
 * port + bucket. vmap: the same, with the cgroup looked up in a 1,000-entry
 * verdict map, each entry jumping to its own chain with its own limit - one
 * limit per tenant. */
static int st_write_rules(const char *path, const char *table, const char *cgrel,
			  const char *parent_rel, bool vmap, const char *verdict)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return -errno;
	fprintf(f, "table inet %s {\n", table);
	if (!vmap) {
		fprintf(f, "  chain out {\n    type filter hook output priority 0; policy accept;\n"
			   "    udp dport %u socket cgroupv2 level 2 \"%s\" %s;\n  }\n}\n",
			ST_PORT, cgrel, verdict);
	} else {
		for (int i = 0; i <= ST_FILLERS; i++)
			fprintf(f, "  chain t%d { %s; }\n", i, verdict);
		fprintf(f, "  chain out {\n    type filter hook output priority 0; policy accept;\n"
			   "    udp dport %u socket cgroupv2 level 2 vmap {\n      \"%s\" : jump t0",
			ST_PORT, cgrel);
		for (int i = 1; i <= ST_FILLERS; i++)
			fprintf(f, ",\n      \"%s/f%d\" : jump t%d", parent_rel, i, i);
		fprintf(f, "\n    };\n  }\n}\n");
	}
	return fclose(f) ? -EIO : 0;
}

/* Half the interquartile range of v: how far a paired delta typically
 * strays from the median, shown next to it. */
static double st_half_iqr(const double *v, int n)
{
	double s[ST_MAX_ROUNDS];

	if (n < 4 || n > ST_MAX_ROUNDS)
		return NAN;
	memcpy(s, v, (size_t)n * sizeof(*v));
	qsort(s, (size_t)n, sizeof(*s), cmp_double);
	return (s[(3 * n) / 4] - s[n / 4]) / 2;
}

static double st_ns(const struct st_result *r)
{
	return r->n ? r->ns_per_call : NAN;
}

/* Whether the baseline moves when an nft table is loaded in another
 * namespace: baseline chunks alternately with and without the limit table in
 * the nft worker's namespace, paired. Each nft run is followed by one chunk
 * that is not kept: the nft process itself evicts caches. Median of (with -
 * without), or NAN. */
static double st_table_check(struct st_worker *base, struct st_worker *nftw, const char *nft,
			     const char *rules, const char *table, long chunk)
{
	double d[ST_TABLE_CYCLES];
	struct st_result r;
	bool ok = true;
	int n = 0;

	for (int c = 0; c < ST_TABLE_CYCLES && !g_stop; c++) {
		double v[2]; /* without, with */

		/* alternate which comes first, so a steady drift cancels */
		for (int k = 0; k < 2; k++) {
			int with = (k + c) % 2;

			/* an nft run before either, so both follow one */
			if (with)
				ok = ok && st_nft(nftw->netns, nft, "-f", rules, NULL, NULL) == 0;
			else
				st_nft(nftw->netns, nft, "delete", "table", "inet", table);
			ok = ok && st_chunk(base, chunk, &r) == 0 && st_chunk(base, chunk, &r) == 0;
			v[with] = st_ns(&r);
		}
		if (!ok)
			break;
		d[n++] = v[1] - v[0];
		if (getenv("KT_BENCH_VERBOSE"))
			fprintf(stderr, "bench: sendto table check %d: without %.0f with %.0f ns/call\n", c,
				v[0], v[1]);
	}
	st_nft(nftw->netns, nft, "delete", "table", "inet", table);
	return ok && n ? median(d, n) : NAN;
}

/* The second view: in-kernel time per program run from BPF run-time
 * statistics (bpf_enable_stats), read before and after each chunk of a mode:
 * no scheduling, syscall or receive path in it, so it is far steadier than
 * the sendto() timings. Stats add a fixed cost to every run (two clock
 * reads), the same for an empty program: kthrottle − empty removes it. */

#define ST_STATS_ROUNDS 30
#define ST_STATS_ROUNDS_QUICK 5
#define ST_MAX_PROGS 8 /* per hook a cgroup's sender runs */
_Static_assert(ST_ROUNDS <= ST_MAX_ROUNDS && ST_STATS_ROUNDS <= ST_MAX_ROUNDS,
	       "rounds are kept in arrays of ST_MAX_ROUNDS");

enum { ST_HOOK_SENDMSG, ST_HOOK_EGRESS, ST_N_HOOKS };

struct st_progs {
	int n;
	int fd[ST_MAX_PROGS];
};

/* The programs that run for a sender in `cgroup` at hook `at` (its own and
 * its ancestors'), as fds in *p. 0 or -errno. */
static int st_query(const char *cgroup, enum bpf_attach_type at, struct st_progs *p)
{
	__u32 ids[ST_MAX_PROGS], cnt = ST_MAX_PROGS, flags = 0;
	int cgfd = open(cgroup, O_RDONLY | O_DIRECTORY | O_CLOEXEC), ret = 0;

	if (cgfd < 0)
		return -errno;
	if (bpf_prog_query(cgfd, at, BPF_F_QUERY_EFFECTIVE, &flags, ids, &cnt) < 0)
		ret = -errno;
	for (__u32 i = 0; !ret && i < cnt; i++) {
		int fd = bpf_prog_get_fd_by_id(ids[i]);

		if (fd < 0)
			ret = -errno;
		else
			p->fd[p->n++] = fd;
	}
	close(cgfd);
	return ret;
}

/* Run time and run count summed over the programs in p. */
static void st_prog_stats(const struct st_progs *p, uint64_t *ns, uint64_t *cnt)
{
	*ns = *cnt = 0;
	for (int i = 0; i < p->n; i++) {
		struct bpf_prog_info info = { 0 };
		__u32 len = sizeof(info);

		if (bpf_obj_get_info_by_fd(p->fd[i], &info, &len) == 0) {
			*ns += info.run_time_ns;
			*cnt += info.run_cnt;
		}
	}
}

/* One chunk of worker w with stats read around it: ns per run of the
 * programs at each hook (NAN: none ran) and their ns per call together. */
static int st_stats_chunk(struct st_worker *w, const struct st_progs *progs, long n,
			  double run[ST_N_HOOKS], double *per_call)
{
	uint64_t t0[ST_N_HOOKS], c0[ST_N_HOOKS], t1, c1;
	struct st_result res;
	int ret;

	for (int h = 0; h < ST_N_HOOKS; h++)
		st_prog_stats(&progs[h], &t0[h], &c0[h]);
	ret = st_chunk(w, n, &res);
	if (ret)
		return ret;
	*per_call = 0;
	for (int h = 0; h < ST_N_HOOKS; h++) {
		st_prog_stats(&progs[h], &t1, &c1);
		run[h] = c1 > c0[h] ? (double)(t1 - t0[h]) / (double)(c1 - c0[h]) : NAN;
		*per_call += (double)(t1 - t0[h]) / (double)n;
		/* every sendto() ran the sendmsg4 programs */
		sanity(h != ST_HOOK_SENDMSG || c1 - c0[h] >= (uint64_t)n,
		       "sendto: sendmsg4 programs ran %llu times for %ld calls",
		       (unsigned long long)(c1 - c0[h]), n);
	}
	sanity(res.n == n && res.errors == 0, "sendto: bpf_stats chunk: %ld of %ld sent, %ld errors",
	       res.n, n, res.errors);
	return 0;
}

/* A row of the bpf_stats view: value (ns) against a baseline (ns), the delta
 * the median of the per-chunk paired differences; base NAN: value only. */
static void row_stat(const char *what, double value, double base, double delta)
{
	struct row *r = row_new(what);

	if (!r)
		return;
	snprintf(r->value, sizeof(r->value), "%.1f ns", value);
	if (!isnan(base)) {
		snprintf(r->baseline, sizeof(r->baseline), "%.1f ns", base);
		snprintf(r->delta, sizeof(r->delta), "%+.1f ns", delta);
	}
}

/* ---- sendto, second phase: the admitted cost at scale ----
 *
 * After the main rounds, with the first daemon stopped (one daemon on k at a
 * time), a second daemon runs, twice: with 1,000 and with 10,000 limits
 * (ST_SCALE_LIMITS[]):
 *   - limits l0..l<n-1>, all on the same destination (127.0.0.1, ST_PORT,
 *     udp, datagram); the first ST_SCALE_MEMBERS each have their own member
 *     cgroup k/p<i> (the sender is in the last one); the rest name a cgroup
 *     that does not exist on this node (k/elsewhere<i>: limits whose pods
 *     run on other nodes), so they only fill the tables;
 *   - one limit `one` on a destination no other limit covers (ST_PORT_ONE),
 *     member k/one: the 1-limit comparison, in the same daemon and run;
 *   - one pod-scope limit `pods` (ST_PORT_PODS) whose member cgroups are the
 *     ST_SCALE_PODS cgroups k/q<i> (a glob; a bucket each, chained to the
 *     limit's node bucket; the sender is in the last one);
 *   - a hierarchy of three limits h0 <- h1 <- h2 (parent:) on ST_PORT_HIER,
 *     all three on member k/h, the sender: each call is charged to all
 *     three levels (the target: at most about 2x one level).
 * Each mode's chunk is paired with the baseline chunks around it as in the
 * main rounds, and n limits − 1 limit is the median of the paired
 * per-round differences. */

static const int ST_SCALE_LIMITS[] = { 1000, 10000 };
#define ST_SCALE_RUNS (int)(sizeof(ST_SCALE_LIMITS) / sizeof(ST_SCALE_LIMITS[0]))
#define ST_SCALE_MAX_LIMITS 10000
#define ST_SCALE_MEMBERS 1000 /* limits with a member cgroup on this node */
#define ST_SCALE_PODS 1000
#define ST_PORT_ONE 9003
#define ST_PORT_PODS 9004
#define ST_PORT_HIER 9005
#define ST_HIER_MAX_RATIO 2.0 /* target: a call charged to 3 levels within 2x one level */
#define ST_SCALE_FLAT_NS 10.0 /* target: 1,000s of limits or pods within ±10 ns of 1 limit */
_Static_assert(ST_SCALE_MAX_LIMITS + 2 <= KT_MAX_LIMITS, "the scale phase's limits fit the tables");
_Static_assert(ST_SCALE_PODS <= KT_MAX_MEMBERS_PER_LIMIT, "one limit holds the scale phase's pods");
_Static_assert(ST_SCALE_MEMBERS + ST_SCALE_PODS + 3 <= KT_MAX_BUCKETS,
	       "the scale phase's pod-scope buckets fit the tables");
_Static_assert(ST_SCALE_MEMBERS + ST_SCALE_PODS + 1 <= KT_MAX_MEMBERSHIPS,
	       "the scale phase's members fit the tables");

enum { SC_MANY, SC_ONE, SC_PODS, SC_HIER, SC_N };

/* Appends to a malloc'd buffer of fixed size; false once it would overflow. */
static bool st_cat(char *buf, size_t cap, size_t *len, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static bool st_cat(char *buf, size_t cap, size_t *len, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (*len >= cap)
		return false;
	va_start(ap, fmt);
	n = vsnprintf(buf + *len, cap - *len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= cap - *len) {
		*len = cap;
		return false;
	}
	*len += (size_t)n;
	return true;
}

static char *st_scale_yaml(const char *kdir, int n_limits)
{
	/* one limit's text is under 256 bytes plus its cgroup path */
	size_t cap = (size_t)(n_limits + 2) * (256 + strlen(kdir)) + 1024, len = 0;
	char *y = malloc(cap);
	bool ok;

	if (!y)
		return NULL;
	/* 1 s ticks: the controller's per-limit work stays out of the timings */
	ok = st_cat(y, cap, &len, "tickInterval: 1s\nlimits:\n");
	for (int i = 0; ok && i < n_limits; i++)
		ok = st_cat(y, cap, &len,
			    "  - name: l%d\n"
			    "    cgroups: [%s/%s%d]\n"
			    "    match: {cidrs: [127.0.0.1/32], ports: %u, protocol: udp}\n"
			    "    unit: datagram\n"
			    "    rateLimit: {max: 1000000000}\n",
			    i, kdir, i < ST_SCALE_MEMBERS ? "p" : "elsewhere", i, ST_PORT);
	ok = ok && st_cat(y, cap, &len,
			  "  - name: one\n"
			  "    cgroups: [%s/one]\n"
			  "    match: {cidrs: [127.0.0.1/32], ports: %u, protocol: udp}\n"
			  "    unit: datagram\n"
			  "    rateLimit: {max: 1000000000}\n"
			  /* pod scope: the pool rate divides by the pods */
			  "  - name: pods\n"
			  "    cgroups: [\"%s/q*\"]\n"
			  "    match: {cidrs: [127.0.0.1/32], ports: %u, protocol: udp}\n"
			  "    unit: datagram\n"
			  "    scope: pod\n"
			  "    rateLimit: {max: 1000000000000}\n",
			  kdir, ST_PORT_ONE, kdir, ST_PORT_PODS);
	/* three levels, all on the sender's cgroup: the deepest classifies */
	for (int h = 0; ok && h < 3; h++)
		ok = st_cat(y, cap, &len,
			    "  - name: h%d\n"
			    "    cgroups: [%s/h]\n"
			    "    match: {cidrs: [127.0.0.1/32], ports: %u, protocol: udp}\n"
			    "    unit: datagram\n"
			    "%s%s%s"
			    "    rateLimit: {max: 1000000000}\n",
			    h, kdir, ST_PORT_HIER, h ? "    parent: h" : "", h ? (h == 1 ? "0" : "1") : "",
			    h ? "\n" : "");
	if (!ok) {
		fprintf(stderr, "bench: sendto: the scale config does not fit %zu bytes\n", cap);
		free(y);
		return NULL;
	}
	return y;
}

/* The second phase; `base` is the main rounds' baseline worker, kdir the
 * cgroup k. Everything it creates it removes, also on failure or SIGINT. */
static int st_scale(const char *kdir, struct st_worker *base, long chunk, int rounds, int srounds,
		    int n_limits)
{
	static const char *const sc_name[SC_N] = { "l999", "one", "pods", "h2" };
	char sc_tag[SC_N][48], nl[16];
	struct ktest_daemon d = { .pid = -1 };
	struct st_worker w[SC_N];
	struct dsnap s0[SC_N], s1[SC_N];
	char cg[SC_N][PATH_MAX + 16], p[PATH_MAX + 16], *yaml = NULL;
	double ns[SC_N][ST_MAX_ROUNDS] = { { 0 } }, delta[SC_N][ST_MAX_ROUNDS] = { { 0 } };
	double base_ns[ST_MAX_ROUNDS] = { 0 }, minus_one[SC_N][ST_MAX_ROUNDS] = { { 0 } };
	double kt_call[SC_N][ST_MAX_ROUNDS] = { { 0 } }, kt_minus_one[SC_N][ST_MAX_ROUNDS] = { { 0 } };
	struct st_progs progs[ST_N_HOOKS] = { 0 };
	const enum bpf_attach_type hook_at[ST_N_HOOKS] = { BPF_CGROUP_UDP4_SENDMSG,
							   BPF_CGROUP_INET_EGRESS };
	static const uint16_t port[SC_N] = { ST_PORT, ST_PORT_ONE, ST_PORT_PODS, ST_PORT_HIER };
	int np = 0, nq = 0, ret = 0, code = -1, stats_fd = -1;
	bool one_made = false, hier_made = false;
	double start_s = NAN, ready_s = NAN;
	uint64_t t0;

	snprintf(nl, sizeof(nl), "%d,%03d", n_limits / 1000, n_limits % 1000);
	snprintf(sc_tag[SC_MANY], sizeof(sc_tag[SC_MANY]), "%s limits", nl);
	snprintf(sc_tag[SC_ONE], sizeof(sc_tag[SC_ONE]), "1 limit");
	snprintf(sc_tag[SC_PODS], sizeof(sc_tag[SC_PODS]), "%d,%03d pods (%s limits)",
		 ST_SCALE_PODS / 1000, ST_SCALE_PODS % 1000, nl);
	snprintf(sc_tag[SC_HIER], sizeof(sc_tag[SC_HIER]), "3 levels (parent:, %s limits)", nl);
	for (int m = 0; m < SC_N; m++)
		w[m] = (struct st_worker){ .pid = -1, .cmd = -1, .res = -1, .netns = -1 };
	snprintf(cg[SC_ONE], sizeof(cg[SC_ONE]), "%s/one", kdir);
	snprintf(cg[SC_MANY], sizeof(cg[SC_MANY]), "%s/p%d", kdir, ST_SCALE_MEMBERS - 1);
	snprintf(cg[SC_PODS], sizeof(cg[SC_PODS]), "%s/q%d", kdir, ST_SCALE_PODS - 1);
	snprintf(cg[SC_HIER], sizeof(cg[SC_HIER]), "%s/h", kdir);
	if (mkdir(cg[SC_ONE], 0755) < 0 && errno != EEXIST) {
		ret = -errno;
		fprintf(stderr, "bench: sendto: %s: %s\n", cg[SC_ONE], strerror(-ret));
		goto out;
	}
	one_made = true;
	if (mkdir(cg[SC_HIER], 0755) < 0 && errno != EEXIST) {
		ret = -errno;
		fprintf(stderr, "bench: sendto: %s: %s\n", cg[SC_HIER], strerror(-ret));
		goto out;
	}
	hier_made = true;
	for (; np < ST_SCALE_MEMBERS && !g_stop; np++) {
		snprintf(p, sizeof(p), "%s/p%d", kdir, np);
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
			break;
	}
	for (; np == ST_SCALE_MEMBERS && nq < ST_SCALE_PODS && !g_stop; nq++) {
		snprintf(p, sizeof(p), "%s/q%d", kdir, nq);
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
			break;
	}
	if (g_stop) {
		ret = -EINTR;
		goto out;
	}
	if (np < ST_SCALE_MEMBERS || nq < ST_SCALE_PODS) {
		ret = -errno;
		fprintf(stderr, "bench: sendto: %s: %s\n", p, strerror(-ret));
		goto out;
	}

	yaml = st_scale_yaml(kdir, n_limits);
	if (!yaml) {
		ret = -ENOMEM;
		goto out;
	}
	if (ktest_daemon_init(&d) || ktest_daemon_config(&d, yaml)) {
		fprintf(stderr, "bench: sendto: cannot write the scale config\n");
		ret = -EIO;
		goto out;
	}
	/* start: until the control socket answers and the pod limit counts
	 * all its members */
	t0 = now_ns();
	if (ktest_daemon_start(&d, 120000, &code)) {
		char *log = ktest_slurp(d.log);

		fprintf(stderr, "bench: sendto: kthrottled with %d limits did not start (exit %d):\n%s",
			n_limits + 2, code, log ? log : "");
		free(log);
		ret = -EIO;
		goto out;
	}
	start_s = (double)(now_ns() - t0) / 1e9;
	for (int i = 0; i < 3000 && !g_stop; i++) {
		if (dsnap_take(&d, "pods", &s0[SC_PODS]) && s0[SC_PODS].size == ST_SCALE_PODS)
			break;
		ktest_sleep_ms(10);
	}
	ready_s = (double)(now_ns() - t0) / 1e9;
	for (int m = 0; m < SC_N; m++)
		if (!dsnap_take(&d, sc_name[m], &s0[m])) {
			fprintf(stderr, "bench: sendto: no status for limit %s\n", sc_name[m]);
			ret = -EIO;
			goto out;
		}
	sanity(s0[SC_PODS].size == ST_SCALE_PODS, "sendto: limit pods has %d members, want %d",
	       s0[SC_PODS].size, ST_SCALE_PODS);

	for (int m = 0; m < SC_N; m++) {
		struct st_result warm;

		if ((ret = st_worker_start(&w[m], cg[m], port[m], &warm)))
			goto out;
	}

	for (int r = 0; r < rounds; r++) {
		struct st_result res;
		double before, after;

		if ((ret = st_chunk(base, chunk, &res)))
			goto out;
		before = st_ns(&res);
		base_ns[r] = before / (SC_N + 1);
		for (int k = 0; k < SC_N; k++) {
			int m = (k + r) % SC_N;

			if (g_stop) {
				ret = -EINTR;
				goto out;
			}
			if ((ret = st_chunk(&w[m], chunk, &res)))
				goto out;
			sanity(res.n == chunk && res.errors == 0 && res.refused == 0,
			       "sendto: %s: %ld of %ld sent, %ld errors (last: %s), %ld refused",
			       sc_tag[m], res.n, chunk, res.errors, strerror(res.last_errno),
			       res.refused);
			ns[m][r] = st_ns(&res);
			if ((ret = st_chunk(base, chunk, &res)))
				goto out;
			after = st_ns(&res);
			delta[m][r] = ns[m][r] - (before + after) / 2;
			base_ns[r] += after / (SC_N + 1);
			before = after;
		}
		for (int m = 0; m < SC_N; m++)
			minus_one[m][r] = delta[m][r] - delta[SC_ONE][r];
		if (getenv("KT_BENCH_VERBOSE"))
			fprintf(stderr, "bench: sendto scale round %d: base %.0f, %s %+.0f, "
				"1 limit %+.0f, %s %+.0f ns/call\n", r, base_ns[r], sc_tag[SC_MANY],
				delta[SC_MANY][r], delta[SC_ONE][r], sc_tag[SC_PODS], delta[SC_PODS][r]);
	}

	/* bpf_stats: the same programs (attached at k) run for all three, so
	 * each chunk reads them around itself; 1-limit chunks around the others */
	for (int h = 0; h < ST_N_HOOKS; h++)
		if ((ret = st_query(cg[SC_MANY], hook_at[h], &progs[h])))
			goto out;
	stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
	for (int r = 0; stats_fd >= 0 && r < srounds; r++) {
		double run[ST_N_HOOKS], one_before, one_after;

		if ((ret = st_stats_chunk(&w[SC_ONE], progs, chunk, run, &one_before)))
			goto out;
		kt_call[SC_ONE][r] = one_before / SC_N;
		for (int k = 0; k < SC_N - 1; k++) {
			static const int others[SC_N - 1] = { SC_MANY, SC_PODS, SC_HIER };
			int m = others[(k + r) % (SC_N - 1)];

			if (g_stop) {
				ret = -EINTR;
				goto out;
			}
			if ((ret = st_stats_chunk(&w[m], progs, chunk, run, &kt_call[m][r])) ||
			    (ret = st_stats_chunk(&w[SC_ONE], progs, chunk, run, &one_after)))
				goto out;
			kt_minus_one[m][r] = kt_call[m][r] - (one_before + one_after) / 2;
			kt_call[SC_ONE][r] += one_after / SC_N;
			one_before = one_after;
		}
	}

	/* every datagram the senders sent was matched and admitted by its limit */
	for (int m = 0; m < SC_N; m++) {
		if (!dsnap_take(&d, sc_name[m], &s1[m])) {
			ret = -EIO;
			goto out;
		}
		sanity(s1[m].admitted - s0[m].admitted == (double)w[m].sent,
		       "sendto: limit %s counted %.0f admitted; its sender sent %ld", sc_name[m],
		       s1[m].admitted - s0[m].admitted, w[m].sent);
	}

	{
		char v[40], wh[200], row_what[SC_N][160];
		double b = median(base_ns, rounds);

		snprintf(row_what[SC_MANY], sizeof(row_what[SC_MANY]),
			 "sendto() kthrottle admitted, %s limits on one destination (%d with a member here)",
			 nl, ST_SCALE_MEMBERS);
		snprintf(row_what[SC_ONE], sizeof(row_what[SC_ONE]),
			 "sendto() kthrottle admitted, 1 limit on its destination (same daemon, %s limits)",
			 nl);
		snprintf(row_what[SC_PODS], sizeof(row_what[SC_PODS]),
			 "sendto() kthrottle admitted, 1 limit with %d pods (pod scope; same daemon, %s limits)",
			 ST_SCALE_PODS, nl);
		snprintf(row_what[SC_HIER], sizeof(row_what[SC_HIER]),
			 "sendto() kthrottle admitted, charged to 3 levels (parent:; same daemon, %s limits)",
			 nl);
		snprintf(v, sizeof(v), "%.1f s", start_s);
		snprintf(wh, sizeof(wh),
			 "daemon start with %s limits, %d member cgroups and 1 limit with %d pods: "
			 "until its control socket answers", nl, ST_SCALE_MEMBERS, ST_SCALE_PODS);
		row_text(wh, v, NULL, 0);
		snprintf(v, sizeof(v), "%.1f s", ready_s);
		snprintf(wh, sizeof(wh), "daemon start as above (%s limits): until `status` shows the %d pods",
			 nl, ST_SCALE_PODS);
		row_text(wh, v, NULL, 0);
		for (int m = 0; m < SC_N; m++) {
			double ov = median(delta[m], rounds);

			snprintf(wh, sizeof(wh), "%s (%d chunks of %ld calls)", row_what[m], rounds,
				 chunk);
			row_ns_ratio(wh, median(ns[m], rounds), b, ov);
			if (g_nrows) {
				struct row *row = &g_rows[g_nrows - 1];

				snprintf(row->delta, sizeof(row->delta), "×%.3f (%+.0f ± %.0f ns)",
					 1 + ov / b, ov, st_half_iqr(delta[m], rounds));
			}
		}
		for (int m = 0; m < SC_N; m++) {
			struct row *row;
			double dd;

			if (m == SC_ONE || m == SC_HIER)
				continue; /* the hierarchy's target is a ratio, below */
			dd = median(minus_one[m], rounds);
			snprintf(wh, sizeof(wh), "sendto() admitted: %s − 1 limit (median of paired rounds)",
				 sc_tag[m]);
			row = row_new(wh);
			if (!row)
				continue;
			snprintf(row->value, sizeof(row->value), "%+.1f ± %.1f ns", dd,
				 st_half_iqr(minus_one[m], rounds));
			snprintf(row->target, sizeof(row->target), "within ±%.0f ns", ST_SCALE_FLAT_NS);
			row_target(row, fabs(dd) <= ST_SCALE_FLAT_NS);
		}
		if (stats_fd < 0) {
			row_text("bpf_stats: kthrottle programs at scale", "skipped (bpf_enable_stats failed)",
				 NULL, 0);
		} else {
			for (int m = 0; m < SC_N; m++) {
				if (m == SC_ONE)
					continue;
				snprintf(wh, sizeof(wh),
					 "bpf_stats: kthrottle programs (sendmsg4 + egress), ns per "
					 "sendto: %s vs 1 limit (%d rounds)",
					 sc_tag[m], srounds);
				row_stat(wh, median(kt_call[m], srounds), median(kt_call[SC_ONE], srounds),
					 median(kt_minus_one[m], srounds));
				if (m == SC_HIER && g_nrows) {
					struct row *row = &g_rows[g_nrows - 1];
					double one = median(kt_call[SC_ONE], srounds),
					       ratio = one > 0 ? median(kt_call[m], srounds) / one : NAN;

					snprintf(row->delta, sizeof(row->delta), "×%.2f", ratio);
					snprintf(row->target, sizeof(row->target), "≤ %.0f× 1 level",
						 ST_HIER_MAX_RATIO);
					row_target(row, ratio <= ST_HIER_MAX_RATIO);
					continue;
				}
				/* the view that resolves 10 ns: sendto() timings stray more */
				if (g_nrows) {
					struct row *row = &g_rows[g_nrows - 1];

					snprintf(row->target, sizeof(row->target), "within ±%.0f ns",
						 ST_SCALE_FLAT_NS);
					row_target(row, fabs(median(kt_minus_one[m], srounds)) <=
								ST_SCALE_FLAT_NS);
				}
			}
		}
	}
	ret = 0;
out:
	if (stats_fd >= 0)
		close(stats_fd);
	for (int h = 0; h < ST_N_HOOKS; h++)
		for (int k = 0; k < progs[h].n; k++)
			close(progs[h].fd[k]);
	for (int m = 0; m < SC_N; m++)
		st_worker_stop(&w[m]);
	if (d.dir[0])
		ktest_daemon_cleanup(&d);
	free(yaml);
	/* in the reverse order of creation */
	while (nq > 0) {
		snprintf(p, sizeof(p), "%s/q%d", kdir, --nq);
		ktest_cgroup_destroy(p);
	}
	while (np > 0) {
		snprintf(p, sizeof(p), "%s/p%d", kdir, --np);
		ktest_cgroup_destroy(p);
	}
	if (one_made)
		ktest_cgroup_destroy(cg[SC_ONE]);
	if (hier_made)
		ktest_cgroup_destroy(cg[SC_HIER]);
	return ret;
}

static int bench_sendto(struct bench_env *e)
{
	static const char *const what[ST_N] = {
		[ST_BASE] = "sendto() no program, no nft rules",
		[ST_CONTROL] = "sendto() no program, a second such worker (noise floor)",
		[ST_EMPTY] = "sendto() empty sendmsg4 + empty egress program attached",
		[ST_KT_ADMIT] = "sendto() kthrottle, matched limit, admitted",
		[ST_KT_REFUSE] = "sendto() kthrottle, refused (max 1/s; fails EBUSY)",
		[ST_KT_UNMATCH] = "sendto() kthrottle, limit on another port",
		[ST_NFT_LIMIT] = "sendto() nftables cgroupv2 + dport `limit` rule, under rate",
		[ST_NFT_VMAP] = "sendto() nftables 1,000-cgroup vmap, each to a `limit` chain",
		[ST_NEST1] = "sendto() kthrottle, admitted, nested depth 1 (1 cgroup below the member)",
		[ST_NEST4] = "sendto() kthrottle, admitted, nested depth 4 (4 cgroups below the member)",
		[ST_KT_OTHER] = "sendto() kthrottle, a non-member cgroup below the attach point",
	};
	static const char *const tag[ST_N] = {
		[ST_BASE] = "base",       [ST_CONTROL] = "control",     [ST_EMPTY] = "empty",
		[ST_KT_ADMIT] = "admitted", [ST_KT_REFUSE] = "refused", [ST_KT_UNMATCH] = "unmatched",
		[ST_NFT_LIMIT] = "nft-limit", [ST_NFT_VMAP] = "nft-vmap", [ST_NEST1] = "nested depth 1",
		[ST_NEST4] = "nested depth 4", [ST_KT_OTHER] = "non-member",
	};
	/* created in this order, removed in the reverse. kthrottle's cgroups
	 * share the parent k, which the daemon attaches to (attachRoot auto:
	 * their deepest common ancestor): base, empty and nft are outside it */
	static const char *const sub[] = { "base",	  "empty",    "nft",
					   "k",		  "k/kt",     "k/ktr",
					   "k/other",	  "k/kt/d1",  "k/kt/d1/d2",
					   "k/kt/d1/d2/d3", "k/kt/d1/d2/d3/d4" };
	enum { SUB_BASE, SUB_EMPTY, SUB_NFT, SUB_K, SUB_KT, SUB_KTR, SUB_OTHER,
	       SUB_D1,	 SUB_D2,    SUB_D3,  SUB_D4, N_SUB };
	static const int sub_of[ST_N] = {
		[ST_BASE] = SUB_BASE,    [ST_CONTROL] = SUB_BASE,   [ST_EMPTY] = SUB_EMPTY,
		[ST_KT_ADMIT] = SUB_KT,  [ST_KT_REFUSE] = SUB_KTR,  [ST_KT_UNMATCH] = SUB_KT,
		[ST_NFT_LIMIT] = SUB_NFT, [ST_NFT_VMAP] = SUB_NFT, [ST_NEST1] = SUB_D1,
		[ST_NEST4] = SUB_D4,     [ST_KT_OTHER] = SUB_OTHER,
	};
	const int rounds = g_quick ? ST_ROUNDS_QUICK : ST_ROUNDS;
	const long chunk = g_quick ? ST_CHUNK_QUICK : ST_CHUNK;
	const char *nft = ktest_find_prog("nft");
	char parent[PATH_MAX] = "", cgrel[PATH_MAX], parent_rel[PATH_MAX];
	char body[2048], table[2][64], rules[2][64] = { "", "" }, subcg[N_SUB][PATH_MAX];
	int empty_fd[ST_N_HOOKS] = { -1, -1 }, cgfd = -1, nfill = 0, nmodes = 0, ret;
	bool empty_attached[ST_N_HOOKS] = { false, false }, have_nft = nft != NULL;
	bool tables_loaded = false;
	struct ktest_daemon d = { .pid = -1 };
	struct st_worker w[ST_N];
	double ns[ST_N][ST_MAX_ROUNDS] = { { 0 } }, delta[ST_N][ST_MAX_ROUNDS] = { { 0 } };
	double table_moves = NAN;
	int order[ST_N];
	/* bpf_stats view: the modes with programs, per chunk; the empty one first */
	static const int st_prog_modes[] = { ST_EMPTY,      ST_KT_ADMIT, ST_KT_REFUSE,
					     ST_KT_UNMATCH, ST_NEST1,    ST_NEST4,
					     ST_KT_OTHER };
	enum { N_PM = sizeof(st_prog_modes) / sizeof(st_prog_modes[0]) };
	const int srounds = g_quick ? ST_STATS_ROUNDS_QUICK : ST_STATS_ROUNDS;
	const enum bpf_attach_type hook_at[ST_N_HOOKS] = { BPF_CGROUP_UDP4_SENDMSG,
							   BPF_CGROUP_INET_EGRESS };
	struct st_progs progs[N_PM][ST_N_HOOKS];
	double per_run[N_PM][ST_N_HOOKS][ST_MAX_ROUNDS], per_call[N_PM][ST_MAX_ROUNDS];
	double kt_minus_empty[N_PM][ST_MAX_ROUNDS];
	int stats_fd = -1;
	bool have_stats = false;
	char stats_was[16];
	struct dsnap snap0, snap1;

	(void)e;
	memset(subcg, 0, sizeof(subcg));
	memset(progs, 0, sizeof(progs));
	read_first_line("/proc/sys/kernel/bpf_stats_enabled", stats_was, sizeof(stats_was));
	for (int m = 0; m < ST_N; m++)
		w[m] = (struct st_worker){ .pid = -1, .cmd = -1, .res = -1, .netns = -1 };
	snprintf(table[0], sizeof(table[0]), "kt_bench_%d_limit", getpid());
	snprintf(table[1], sizeof(table[1]), "kt_bench_%d_vmap", getpid());
	ret = ktest_cgroup_create("sendto", parent, sizeof(parent));
	if (ret) {
		fprintf(stderr, "bench: sendto: cannot create a cgroup: %s\n", strerror(-ret));
		parent[0] = 0;
		goto out;
	}
	for (int i = 0; i < N_SUB; i++) {
		snprintf(subcg[i], sizeof(subcg[i]), "%s/%s", parent, sub[i]);
		if (mkdir(subcg[i], 0755) < 0 && errno != EEXIST) {
			ret = -errno;
			fprintf(stderr, "bench: sendto: %s: %s\n", subcg[i], strerror(-ret));
			goto out;
		}
	}

	/* empty programs at both hooks kthrottle runs a datagram through */
	cgfd = open(subcg[SUB_EMPTY], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	for (int i = 0; i < ST_N_HOOKS; i++) {
		empty_fd[i] = st_empty_prog(i == ST_HOOK_EGRESS ? BPF_PROG_TYPE_CGROUP_SKB :
								  BPF_PROG_TYPE_CGROUP_SOCK_ADDR,
					    hook_at[i]);
		if (empty_fd[i] < 0 || cgfd < 0 ||
		    bpf_prog_attach(empty_fd[i], cgfd, hook_at[i], 0) < 0) {
			ret = -errno;
			fprintf(stderr, "bench: sendto: cannot load/attach an empty program: %s\n",
				strerror(-ret));
			goto out;
		}
		empty_attached[i] = true;
	}

	/* admitted: a bucket far above any rate reached; refused: 1/s, burst 1 */
	snprintf(body, sizeof(body),
		 "tickInterval: 100ms\n"
		 "limits:\n"
		 "  - name: admit\n"
		 "    cgroups: [%s]\n"
		 "    match: {cidrs: [127.0.0.1/32], ports: %u, protocol: udp}\n"
		 "    unit: datagram\n"
		 "    rateLimit: {max: 1000000000}\n"
		 "  - name: refuse\n"
		 "    cgroups: [%s]\n"
		 "    match: {cidrs: [127.0.0.1/32], ports: %u, protocol: udp}\n"
		 "    unit: datagram\n"
		 "    burst: 1\n"
		 "    rateLimit: {max: 1}\n",
		 subcg[SUB_KT], ST_PORT, subcg[SUB_KTR], ST_PORT_REFUSE);
	ret = ktest_daemon_up(&d, body);
	if (ret || !dsnap_take(&d, "admit", &snap0)) {
		ret = ret ? ret : -EIO;
		goto out;
	}
	/* the programs sit at k only: the baseline and the peers run none
	 * of them, and k's other cgroups get theirs from k */
	{
		struct st_progs at_base = { 0 }, at_other = { 0 };

		ret = st_query(subcg[SUB_BASE], BPF_CGROUP_UDP4_SENDMSG, &at_base);
		if (!ret)
			ret = st_query(subcg[SUB_OTHER], BPF_CGROUP_UDP4_SENDMSG, &at_other);
		for (int k = 0; k < at_base.n; k++)
			close(at_base.fd[k]);
		for (int k = 0; k < at_other.n; k++)
			close(at_other.fd[k]);
		if (ret)
			goto out;
		sanity(at_base.n == 0 && at_other.n == 1,
		       "sendto: sendmsg4 programs: %d on the baseline's cgroup (want 0), %d on a non-member below k (want 1)",
		       at_base.n, at_other.n);
	}

	for (int m = 0; m < ST_N; m++) {
		uint16_t p = m == ST_KT_REFUSE ? ST_PORT_REFUSE : m == ST_KT_UNMATCH ? ST_PORT_UNMATCH :
						  ST_PORT;
		struct st_result warm;

		if ((m == ST_NFT_LIMIT || m == ST_NFT_VMAP) && !have_nft)
			continue;
		ret = st_worker_start(&w[m], subcg[sub_of[m]], p, &warm);
		if (ret)
			goto out;
		if (m != ST_BASE)
			order[nmodes++] = m;
	}

	if (have_nft) {
		/* nft names cgroups by path under /sys/fs/cgroup (on a hybrid host
		 * the v2 tree is /sys/fs/cgroup/unified); level counts from the v2
		 * root, where kt-test-<pid>-sendto is level 1 */
		static const char sys_cg[] = "/sys/fs/cgroup/";

		if (strncmp(parent, sys_cg, strlen(sys_cg))) {
			fprintf(stderr, "bench: sendto: %s is not under %s: nft cannot name it\n",
				parent, sys_cg);
			ret = -ENOTSUP;
			goto out;
		}
		snprintf(parent_rel, sizeof(parent_rel), "%s", parent + strlen(sys_cg));
		snprintf(cgrel, sizeof(cgrel), "%s/nft", parent_rel);
		for (nfill = 0; nfill < ST_FILLERS; nfill++) {
			char p[PATH_MAX + 16];

			snprintf(p, sizeof(p), "%s/f%d", parent, nfill + 1);
			if (mkdir(p, 0755) < 0 && errno != EEXIST) {
				ret = -errno;
				fprintf(stderr, "bench: sendto: %s: %s\n", p, strerror(-ret));
				goto out;
			}
		}
		for (int i = 0; i < 2; i++) {
			struct st_worker *nw = &w[ST_NFT_LIMIT + i];
			struct st_result chk;
			int fd;

			snprintf(rules[i], sizeof(rules[i]), "/tmp/kt-bench-%d-nft%d.XXXXXX", getpid(), i);
			fd = mkstemp(rules[i]);
			if (fd < 0) {
				ret = -errno;
				rules[i][0] = 0;
				goto out;
			}
			close(fd);
			/* first with drop: proves the rule matches the sender */
			ret = st_write_rules(rules[i], table[i], cgrel, parent_rel, i == 1, "drop");
			if (ret || (ret = st_nft(nw->netns, nft, "-f", rules[i], NULL, NULL)))
				goto out;
			ret = st_chunk(nw, 10, &chk);
			st_nft(nw->netns, nft, "delete", "table", "inet", table[i]);
			if (ret)
				goto out;
			sanity(chk.errors == 10 && chk.last_errno == EPERM,
			       "sendto: nft %s rule with drop did not drop (%ld of 10 failed, last: %s)",
			       i ? "vmap" : "limit", chk.errors, strerror(chk.last_errno));
			ret = st_write_rules(rules[i], table[i], cgrel, parent_rel, i == 1,
					     "limit rate over 1000000000/second drop");
			if (ret)
				goto out;
		}
		table_moves = st_table_check(&w[ST_BASE], &w[ST_NFT_LIMIT], nft, rules[0], table[0],
					     chunk);
		/* from here on for the whole run, each in its worker's namespace */
		for (int i = 0; i < 2; i++)
			if ((ret = st_nft(w[ST_NFT_LIMIT + i].netns, nft, "-f", rules[i], NULL, NULL)))
				goto out;
		tables_loaded = true;
	}

	for (int r = 0; r < rounds; r++) {
		struct st_result res;
		double before, after;

		/* base, mode, base, mode, ..., base; the order rotates so no mode
		 * always runs first or last */
		if ((ret = st_chunk(&w[ST_BASE], chunk, &res)))
			goto out;
		before = st_ns(&res);
		ns[ST_BASE][r] = before / (nmodes + 1);
		for (int k = 0; k < nmodes; k++) {
			int m = order[(k + r) % nmodes];

			if (g_stop) {
				ret = -EINTR;
				goto out;
			}
			if ((ret = st_chunk(&w[m], chunk, &res)))
				goto out;
			sanity(res.n == chunk && res.errors == 0,
			       "%s: %ld of %ld sent, %ld errors (last: %s)", what[m], res.n, chunk,
			       res.errors, strerror(res.last_errno));
			/* burst 1 at 1/s: at most one or two per chunk get through */
			sanity(m == ST_KT_REFUSE ? res.refused >= chunk - 2 : res.refused == 0,
			       "%s: %ld of %ld refused", what[m], res.refused, chunk);
			ns[m][r] = st_ns(&res);
			if ((ret = st_chunk(&w[ST_BASE], chunk, &res)))
				goto out;
			after = st_ns(&res);
			sanity(res.errors == 0 && res.refused == 0, "%s: %ld errors, %ld refused",
			       what[ST_BASE], res.errors, res.refused);
			delta[m][r] = ns[m][r] - (before + after) / 2;
			ns[ST_BASE][r] += after / (nmodes + 1);
			before = after;
		}
		if (getenv("KT_BENCH_VERBOSE")) {
			fprintf(stderr, "bench: sendto round %d ns/call: base %.0f", r, ns[ST_BASE][r]);
			for (int k = 0; k < nmodes; k++)
				fprintf(stderr, ", %s %+.0f", tag[order[k]], delta[order[k]][r]);
			fputc('\n', stderr);
		}
	}

	/* the bpf_stats view: chunks of the modes with programs, stats on */
	for (int i = 0; i < N_PM; i++)
		for (int h = 0; h < ST_N_HOOKS; h++)
			if ((ret = st_query(subcg[sub_of[st_prog_modes[i]]], hook_at[h], &progs[i][h]))) {
				fprintf(stderr, "bench: sendto: cannot list the programs of %s: %s\n",
					what[st_prog_modes[i]], strerror(-ret));
				goto out;
			}
	stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
	have_stats = stats_fd >= 0;
	if (!have_stats)
		fprintf(stderr, "bench: sendto: cannot enable bpf_stats: %s; no rows from it\n",
			strerror(errno));
	/* as the timed rounds: empty, mode, empty, mode, ..., empty, each
	 * kthrottle chunk paired with the empty chunks around it */
	for (int r = 0; have_stats && r < srounds; r++) {
		double e_before, e_run[ST_N_HOOKS] = { 0 };

		if ((ret = st_stats_chunk(&w[ST_EMPTY], progs[0], chunk, e_run, &e_before)))
			goto out;
		for (int h = 0; h < ST_N_HOOKS; h++)
			per_run[0][h][r] = e_run[h] / N_PM;
		per_call[0][r] = e_before / N_PM;
		for (int k = 0; k < N_PM - 1; k++) {
			int i = 1 + (k + r) % (N_PM - 1), m = st_prog_modes[i];
			double run[ST_N_HOOKS], e_after;

			if (g_stop) {
				ret = -EINTR;
				goto out;
			}
			if ((ret = st_stats_chunk(&w[m], progs[i], chunk, run, &per_call[i][r])))
				goto out;
			for (int h = 0; h < ST_N_HOOKS; h++)
				per_run[i][h][r] = run[h];
			if ((ret = st_stats_chunk(&w[ST_EMPTY], progs[0], chunk, run, &e_after)))
				goto out;
			for (int h = 0; h < ST_N_HOOKS; h++)
				per_run[0][h][r] += run[h] / N_PM;
			per_call[0][r] += e_after / N_PM;
			kt_minus_empty[i][r] = per_call[i][r] - (e_before + e_after) / 2;
			e_before = e_after;
		}
	}
	if (have_stats)
		close(stats_fd);
	stats_fd = -1;

	/* the limit counted every datagram of its member's and the nested
	 * senders: the nested ones were matched, not passed as unmatched */
	if (!dsnap_take(&d, "admit", &snap1)) {
		ret = -EIO;
		goto out;
	}
	{
		long sent = w[ST_KT_ADMIT].sent + w[ST_NEST1].sent + w[ST_NEST4].sent;

		sanity(snap1.admitted - snap0.admitted == (double)sent,
		       "sendto: limit admit counted %.0f admitted; its member and nested senders sent %ld",
		       snap1.admitted - snap0.admitted, sent);
	}

	double base = median(ns[ST_BASE], rounds), ov[ST_N];
	for (int m = 0; m < ST_N; m++)
		ov[m] = median(delta[m], rounds);
	for (int m = 0; m < ST_N; m++) {
		char wh[112];

		snprintf(wh, sizeof(wh), "%s (%d chunks of %ld calls)", what[m], rounds, chunk);
		if ((m == ST_NFT_LIMIT || m == ST_NFT_VMAP) && !have_nft) {
			row_text(wh, "skipped (nft not installed)", NULL, 0);
			continue;
		}
		row_ns_ratio(wh, median(ns[m], rounds), m == ST_BASE ? NAN : base, ov[m]);
		if (m != ST_BASE && g_nrows) {
			struct row *row = &g_rows[g_nrows - 1];

			snprintf(row->delta, sizeof(row->delta), "×%.3f (%+.0f ± %.0f ns)",
				 1 + ov[m] / base, ov[m], st_half_iqr(delta[m], rounds));
		}
		if (m == ST_KT_ADMIT && have_nft && g_nrows) {
			/* the target: admitted ≤ ½ nftables' overhead; where empty
			 * programs alone cost more than that, ≤ empty + 60 ns and
			 * below nftables */
			struct row *row = &g_rows[g_nrows - 1];
			double half = ov[ST_NFT_LIMIT] / 2;

			if (!(ov[ST_NFT_LIMIT] > 0)) {
				/* no measurable nft overhead: nothing to judge against */
				snprintf(row->target, sizeof(row->target), "nft overhead ≤ 0");
			} else if (ov[ST_EMPTY] <= half) {
				snprintf(row->target, sizeof(row->target), "≤ ½ nft: +%.0f ns", half);
				row_target(row, ov[m] <= half);
			} else {
				snprintf(row->target, sizeof(row->target), "≤ empty+60: +%.0f ns, < nft",
					 ov[ST_EMPTY] + 60);
				row_target(row, ov[m] <= ov[ST_EMPTY] + 60 &&
							ov[m] < ov[ST_NFT_LIMIT]);
			}
		}
	}
	if (have_nft) {
		char v[40];

		snprintf(v, sizeof(v), "%+.1f ns", table_moves);
		row_text("sendto() baseline with an nft table loaded in another netns − without "
			 "(median of paired chunks)", v, NULL, 0);
		snprintf(v, sizeof(v), "%.2f", ov[ST_KT_ADMIT] / ov[ST_NFT_LIMIT]);
		row_text("sendto() overhead ratio: kthrottle admitted / nftables limit", v, NULL, 0);
		snprintf(v, sizeof(v), "%.2f", ov[ST_KT_ADMIT] / ov[ST_NFT_VMAP]);
		row_text("sendto() overhead ratio: kthrottle admitted / nftables 1,000-cgroup vmap", v,
			 NULL, 0);
	} else {
		row_text("sendto() overhead ratio: kthrottle admitted / nftables limit",
			 "skipped (nft not installed)", NULL, 0);
	}
	/* on when the sysctl or another process's stats fd has it on */
	row_text("sendto() timed rounds: kernel.bpf_stats_enabled (on: two clock reads more per "
		 "program run)", !strcmp(stats_was, "0") ? "off" : !strcmp(stats_was, "1") ? "on" : "?",
		 NULL, 0);

	if (!have_stats) {
		row_text("bpf_stats: programs' own time per run", "skipped (bpf_enable_stats failed)",
			 NULL, 0);
	} else {
		static const char *const hook_name[ST_N_HOOKS] = { "sendmsg4", "egress" };
		char wh[112];

		for (int h = 0; h < ST_N_HOOKS; h++) {
			snprintf(wh, sizeof(wh), "bpf_stats: empty %s program, ns per run (%d rounds)",
				 h ? "cgroup_skb egress" : "sendmsg4", srounds);
			row_stat(wh, median(per_run[0][h], srounds), NAN, NAN);
		}
		for (int h = 0; h < ST_N_HOOKS; h++) {
			snprintf(wh, sizeof(wh), "bpf_stats: kthrottle %s program, admitted, ns per run",
				 hook_name[h]);
			row_stat(wh, median(per_run[1][h], srounds), median(per_run[0][h], srounds),
				 median(per_run[1][h], srounds) - median(per_run[0][h], srounds));
		}
		for (int i = 1; i < N_PM; i++) {
			int m = st_prog_modes[i];

			snprintf(wh, sizeof(wh),
				 "bpf_stats: kthrottle − empty programs (sendmsg4 + egress), ns per "
				 "sendto: %s",
				 tag[m]);
			row_stat(wh, median(per_call[i], srounds), median(per_call[0], srounds),
				 median(kt_minus_empty[i], srounds));
		}
	}

	/* the second phase: one daemon on k at a time */
	ktest_daemon_cleanup(&d);
	for (int r = 0; !ret && r < ST_SCALE_RUNS; r++)
		ret = st_scale(subcg[SUB_K], &w[ST_BASE], chunk, rounds, srounds, ST_SCALE_LIMITS[r]);
	if (ret)
		goto out;
	ret = 0;
out:
	/* never leave a table behind, also on failure or interruption (a
	 * worker's namespace, and so its table, also goes when it exits) */
	for (int i = 0; have_nft && i < 2; i++)
		if (w[ST_NFT_LIMIT + i].netns >= 0 && (tables_loaded || ret))
			st_nft(w[ST_NFT_LIMIT + i].netns, nft, "delete", "table", "inet", table[i]);
	if (stats_fd >= 0)
		close(stats_fd);
	for (int i = 0; i < N_PM; i++)
		for (int h = 0; h < ST_N_HOOKS; h++)
			for (int k = 0; k < progs[i][h].n; k++)
				close(progs[i][h].fd[k]);
	for (int m = 0; m < ST_N; m++)
		st_worker_stop(&w[m]);
	for (int i = 0; i < 2; i++)
		if (rules[i][0])
			unlink(rules[i]);
	if (d.dir[0])
		ktest_daemon_cleanup(&d);
	for (int i = 0; i < ST_N_HOOKS; i++) {
		if (empty_attached[i])
			bpf_prog_detach2(empty_fd[i], cgfd, hook_at[i]);
		if (empty_fd[i] >= 0)
			close(empty_fd[i]);
	}
	if (cgfd >= 0)
		close(cgfd);
	if (parent[0]) {
		for (int i = 0; i < nfill; i++) {
			char p[PATH_MAX + 16];

			snprintf(p, sizeof(p), "%s/f%d", parent, i + 1);
			rmdir(p);
		}
		for (int i = N_SUB - 1; i >= 0; i--)
			if (subcg[i][0])
				ktest_cgroup_destroy(subcg[i]);
		ktest_cgroup_destroy(parent);
	}
	return ret;
}

struct section {
	const char *name;
	const char *what;
	int (*run)(struct bench_env *e);
};

/* Later work adds its sections here. A section adds rows with
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
