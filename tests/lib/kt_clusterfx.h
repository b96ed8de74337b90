/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The cluster fixture of the e2e tests that run several kthrottled nodes
 * (test_cluster, test_faults, test_pool, test_churn, test_strict,
 * test_strict_lib): the nodes' config (a pooled node's YAML, a UDP limit
 * item), their status (one limit's fields, agreement), children forked
 * with a report pipe, paced UDP senders inside the nodes' cgroups, and the
 * loopback receiver's (tests/lib/arrivals) whole measurement. Functions
 * that assert use cmocka (this header includes it). */
#ifndef KT_CLUSTERFX_H
#define KT_CLUSTERFX_H

#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <cmocka.h>

#include "arrivals.h"
#include "ktest.h"

/* ---- the fixture ---- */

/* A cluster test's setup: the fixture (len bytes at fx) zeroed, the n
 * nodes d[] marked not started, and (unless NULL) the senders' pids and
 * report fds marked none (-1). */
void kt_clusterfx_begin(void *fx, size_t len, struct ktest_daemon *d, int n, pid_t *sender,
		       int *sender_fd);
/* The teardown's first step: (unless sender is NULL) each of the n
 * senders killed and reaped, its report fd closed; then each of the n
 * nodes d[] cleaned up if it was prepared. */
void kt_clusterfx_nodes_end(struct ktest_daemon *d, int n, pid_t *sender, int *sender_fd);
/* The teardown's: each of the n nodes' cgroups destroyed if it was made. */
void kt_clusterfx_cgroups_end(char (*cg)[PATH_MAX], int n);

/* ---- children ---- */

/* cmocka: forks a child that dies with this process (PR_SET_PDEATHSIG),
 * stdio flushed first; a pipe carries its report. In the child: 0, *fd the
 * write end. In the parent: the child's pid, *fd the read end. */
pid_t kt_clusterfx_fork(int *fd);
/* cmocka: reads the child's report (len bytes at r) from fd, closes fd and
 * reaps pid (*status: its wait status). True when the whole report came
 * and the child exited 0. */
bool kt_clusterfx_reap(pid_t pid, int fd, void *r, size_t len, int *status);

/* ---- paced senders ---- */

#define KT_CLUSTERFX_PORTS 4

/* What a paced sender was told, per port. */
struct kt_clusterfx_sent {
	unsigned long long ok[KT_CLUSTERFX_PORTS], refused[KT_CLUSTERFX_PORTS],
		errors[KT_CLUSTERFX_PORTS];
};

/* cmocka: a child that, from inside cgroup cg, sends per_s one-byte UDP
 * datagrams a second to 127.0.0.1 ports[0..n) in turn for secs, on absolute
 * CLOCK_MONOTONIC deadlines (sleeping, not spinning: senders, daemons and
 * Redis share few cores); one more than 50 ms behind resumes from now
 * rather than catching up in a rush. Its pid; *fd carries its struct
 * kt_clusterfx_sent (kt_clusterfx_sender_wait). */
pid_t kt_clusterfx_sender_start(const char *cg, const int *ports, int n, double secs, int per_s,
				int *fd);
/* cmocka: waits for the sender *pid (it ends on its own bound) of node
 * `node` and reads its report into r; fails the test if it failed. *pid
 * and *fd are -1 after. Nothing (r zeroed) when *pid is not > 0. False then. */
bool kt_clusterfx_sender_wait(pid_t *pid, int *fd, int node, struct kt_clusterfx_sent *r);

/* ---- config ---- */

/* The store timings every node of a pool test shares. */
struct kt_clusterfx_pool {
	int tick_ms, hb_ms, stale, valid_ms;
};

/* cmocka: node i's YAML (malloc'd): node name n<i>, p's tickInterval and
 * store block on redisStore `store` (a flow mapping), onStoreFailure
 * conservative, then `limits` (YAML list items) under "limits:". */
char *kt_clusterfx_node_yaml(int i, const struct kt_clusterfx_pool *p, const char *store,
			     const char *limits);
/* cmocka: that YAML written as d's config (not started, not reloaded). */
void kt_clusterfx_node_config(struct ktest_daemon *d, int i, const struct kt_clusterfx_pool *p,
			      const char *store, const char *limits);

/* A UDP datagram limit matching 127.0.0.1:port. */
struct kt_clusterfx_limit {
	const char *name;
	const char *cgroups; /* the inside of its cgroups flow list */
	int port;
	const char *scope;   /* NULL: no scope line */
	double burst, max, min;
	const char *rl_extra; /* put inside the rateLimit flow mapping; NULL: nothing */
	const char *rate;    /* if set: what follows "rateLimit:" instead (newline included) */
};

/* cmocka: appends limit l as a YAML list item to the string in buf. */
void kt_clusterfx_add_limit(char *buf, size_t len, const struct kt_clusterfx_limit *l);

/* ---- status ---- */

/* One limit's fields in a node's status json. */
struct kt_clusterfx_lst {
	char phase[24], state[16], endpoint[96];
	double size, live, pool_rate, bucket_rate, burst, max, reserved, fallback_rate,
		lease_left_s, admitted, share;
	uint64_t t_ns; /* when the status was asked for (kt_clusterfx_lst_get) */
};

/* Which fields kt_clusterfx_lst_read found. */
enum {
	KT_LST_PHASE = 1u << 0,
	KT_LST_STATE = 1u << 1,
	KT_LST_ENDPOINT = 1u << 2,
	KT_LST_SIZE = 1u << 3,
	KT_LST_LIVE = 1u << 4,
	KT_LST_POOL_RATE = 1u << 5,
	KT_LST_BUCKET_RATE = 1u << 6,
	KT_LST_BURST = 1u << 7,
	KT_LST_MAX = 1u << 8,
	KT_LST_RESERVED = 1u << 9,
	KT_LST_FALLBACK_RATE = 1u << 10,
	KT_LST_LEASE_LEFT = 1u << 11,
	KT_LST_ADMITTED = 1u << 12,
	KT_LST_SHARE = 1u << 13,
};

/* Limit `limit`'s fields from status json js into s (zeroed first, t_ns
 * kept): the KT_LST_* bits of those it found; the others stay 0. */
unsigned kt_clusterfx_lst_read(const char *js, const char *limit, struct kt_clusterfx_lst *s);
/* d's status asked for now (s->t_ns) and read as kt_clusterfx_lst_read; 0
 * (s zeroed but t_ns) when d does not answer. */
unsigned kt_clusterfx_lst_get(const struct ktest_daemon *d, const char *limit,
			      struct kt_clusterfx_lst *s);
/* Whether s is agreed at `size`: phase "agreed", store "up", size and live
 * `size`. */
bool kt_clusterfx_agreed(const struct kt_clusterfx_lst *s, int size);

/* Node i's (d) log tail and status, as "n<i>", its last `lines` lines. */
void kt_clusterfx_dump_node(const struct ktest_daemon *d, int i, int lines);
/* cmocka: starts node i (d configured) with a 5 s timeout; else says so,
 * calls dump(i) and fails the test. */
void kt_clusterfx_run_node(struct ktest_daemon *d, int i, void (*dump)(int i));
/* cmocka: nodes 0..n-1 (d[0..n), configured) started side by side, each
 * given the same 5 s from the spawn; else as kt_clusterfx_run_node. */
void kt_clusterfx_run_nodes(struct ktest_daemon *d, int n, void (*dump)(int i));

/* ---- the receiver ---- */

/* The spacing of arrivals: the gaps between consecutive times. */
struct kt_clusterfx_gaps {
	double lo;       /* the smallest gap, ms (1e9 with fewer than 2 times) */
	double p50, p99; /* of gap - every, ms */
	double hi;       /* the largest gap, ms */
};

/* cmocka: the gaps of the n sorted times t[] (ns) against one every
 * every_ms into g; false (only g->lo set) with fewer than 2 times. */
bool kt_clusterfx_gaps(const uint64_t *t, int n, double every_ms, struct kt_clusterfx_gaps *g);

/* cmocka: the measurement at receiver a (`name` in the line it prints) is
 * whole: it dropped nothing and saw exactly the sent_ok the senders were
 * told was sent (else it would hide excess). */
void kt_clusterfx_check_measurement(const struct arrivals *a, const char *name,
				    unsigned long long sent_ok);

#endif
