/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * What the files of `make bench` (tests/bench/) share. bench.c holds the
 * results table, the environment, the fixture and the driver; each other
 * file holds one section or a pair, entered through bench_<name>(), which
 * bench.c's sections[] runs in order on one struct bench_env.
 */
#ifndef KT_BENCH_H
#define KT_BENCH_H

#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <sys/types.h>
#include <linux/bpf.h>
#include "base/config.h"
#include "kernel/bpf_loader.h"
#include "members/plan.h"
#include "kthrottle.h"

struct bpf_link;
struct kt_bench_empty;
struct ktest_daemon;

/* ---- run state (bench.c) ---- */

/* Set on SIGINT/SIGTERM: sections stop early, everything is still removed. */
extern volatile sig_atomic_t g_stop;
/* --quick: fewer rounds (numbers noisier). */
extern int g_quick;

/* CLOCK_BOOTTIME in ns. Inline, as it was in the one file: the timed loops
 * call it between the calls they measure. */
static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- statistics and helpers (bench.c) ---- */

/* qsort() order of doubles. */
int cmp_double(const void *a, const void *b);
/* Median of n <= 64 values (NAN otherwise); v is left as it was. */
double median(const double *v, int n);
/* A failed sanity check (!ok) means the numbers next to it are not to be
 * trusted: counted (the exit code is 1) and printed. */
void sanity(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Pin to CPU 0 (which 0) or the last one, when there are several. */
void pin_cpu(int which);
/* The first line of a file, without its newline; "?" if unreadable. */
void read_first_line(const char *path, char *out, size_t len);

/* ---- results table (bench.c), printed after all sections ---- */

#define MAX_ROWS 96

struct row {
	char what[160];
	char value[64];
	char baseline[40];
	char delta[40];
	char target[32];
	char ok[8];
};

/* The rows so far; a section may adjust the row it just added
 * (&g_rows[g_nrows - 1]). */
extern struct row g_rows[MAX_ROWS];
extern int g_nrows;

/* A row with every column "—"; NULL when the table is full. */
struct row *row_new(const char *what);
/* Sets r's ok column and counts the target (met or not). */
void row_target(struct row *r, int met);
/* value and baseline in ns; delta = value - baseline against a max delta
 * (NAN: no target). */
void row_ns_delta(const char *what, double value, double base, double delta, double max_delta);
/* Long operations: value (base + the median paired delta when there is a
 * baseline), baseline, and delta as a ratio and in ns. */
void row_ns_ratio(const char *what, double value, double base, double delta);
/* µs per limit against a maximum. */
void row_us_per_limit(const char *what, double us, double max_us);

/* ---- shared fixture for the skb, connect and gcra sections (bench.c) ---- */

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

/* What set_bucket makes of a limit's bucket before a measurement. */
enum bucket_state { B_NONE, B_HUGE, B_EXHAUSTED, B_CLOSED };

/* Frees n limits made by limit_cfg, and their array. */
void free_limit_cfgs(struct kt_limit_cfg *limits, int n);
/* A limit as the config parser would produce it (cgroup: its one member). */
void limit_cfg(struct kt_limit_cfg *lc, const char *name, enum kt_unit unit, const char *addr,
	       int plen, uint16_t port, char *cgroup);
/* The test-run socket's membership: skb-match alone, or (full) the seven
 * skb-wide limits and skb-match. 0 or -errno. */
int set_self_members(struct bench_env *e, bool full);
void set_bucket(struct bench_env *e, uint32_t slot, enum bucket_state s);
/* kt_bpf_read_counters, a failure counted as a failed sanity check. */
int read_counters(struct bench_env *e, uint32_t slot, struct kt_counters *c);

/* ---- helpers for the end-to-end sections (bench_daemon.c; sendto uses
 * them too) ---- */

/* A row with a free-form value; target NULL: none. */
void row_text(const char *what, const char *value, const char *target, int met);

/* One `status json` answer of a daemon under test, for limit `name`. */
struct dsnap {
	double up;               /* daemon uptime: the clock its ramp runs on */
	double pool_rate;
	double admitted, throttled;
	int size;                /* agreed pool size */
};

/* d's `status json` into s; false if it did not answer or lacks a field. */
bool dsnap_take(const struct ktest_daemon *d, const char *name, struct dsnap *s);

/* ---- the sections, in the order bench.c's sections[] runs them; each
 * returns 0 or -errno (a setup failure), adds rows and reports doubtful
 * numbers with sanity() ---- */

/* The programs that run for a process in `cgroup` at hook `at` (its own
 * and its ancestors'): at most max of them as fds into fds, their number
 * in *n. 0 or -errno. */
int cgroup_progs(const char *cgroup, enum bpf_attach_type at, int *fds, int max, int *n);
/* Run time and run count (bpf_stats) summed over the programs fds[0..n). */
void progs_run_stats(const int *fds, int n, uint64_t *ns, uint64_t *cnt);

int bench_skb(struct bench_env *e);       /* bench_bpf.c */
int bench_xdp(struct bench_env *e);       /* bench_bpf.c */
int bench_connect(struct bench_env *e);   /* bench_connect.c */
int bench_audit(struct bench_env *e);     /* bench_connect.c */
int bench_gcra_user(struct bench_env *e); /* bench_ctl.c */
int bench_tick(struct bench_env *e);      /* bench_ctl.c */
int bench_ramp(struct bench_env *e);      /* bench_daemon.c */
int bench_pool(struct bench_env *e);      /* bench_daemon.c */
int bench_sendto(struct bench_env *e);    /* bench_sendto.c */
int bench_calls(struct bench_env *e);     /* bench_calls.c */
int bench_kube(struct bench_env *e);      /* bench_kube.c */

#endif
