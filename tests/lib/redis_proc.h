/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Test helper: real redis-server and redis-sentinel processes on free
 * loopback ports, each in its own temp dir. Only the pids started here are
 * ever signalled; children also get PR_SET_PDEATHSIG so a crashed test
 * leaves nothing running. Set KT_KEEP_REDIS_DIRS=1 to keep the dirs (logs). */
#ifndef KT_REDIS_PROC_H
#define KT_REDIS_PROC_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <hiredis/hiredis.h>

struct rp_opts {
	const char *password;   /* requirepass; NULL: none */
	const char *extra_conf; /* appended to the config file verbatim; NULL: none */
	int port;               /* this port (e.g. 6379 in a test's own netns); 0: a free one */
};

struct rp_proc {
	pid_t pid;              /* 0 when not running */
	int port;
	bool sentinel;
	char bin[16];           /* redis-server or redis-sentinel */
	char dir[64];           /* temp dir: config, log, data */
	char password[128];     /* used by rp_connect/rp_command; "" for none */
};

/* A port that was free on 127.0.0.1 a moment ago (starters retry on a race). */
int rp_free_port(void);
/* Starts redis-server and waits until it answers PING. Returns 0 or -errno. */
int rp_start_master(struct rp_proc *p, const struct rp_opts *o);
/* Starts a replica of master (masterauth = master's password) and waits until
 * its replication link is up. */
int rp_start_replica(struct rp_proc *p, const struct rp_proc *master, const struct rp_opts *o);
/* Starts redis-sentinel monitoring master as `name` with quorum and
 * down-after-milliseconds (auth-pass = master's password; o->password is the
 * sentinel's own requirepass). Waits until it answers PING. */
int rp_start_sentinel(struct rp_proc *p, const struct rp_proc *master, const char *name, int quorum,
		      int down_after_ms, const struct rp_opts *o);
/* SIGTERM (after SIGCONT in case it is stopped), SIGKILL after 3 s, reap,
 * remove the dir. Safe on a zeroed or already stopped struct. */
int rp_stop(struct rp_proc *p);
/* SIGKILL if running, then start again on the same port, dir and config
 * (data is not persisted: a restarted server is empty). Waits for PING. */
int rp_restart(struct rp_proc *p);
/* kill(p->pid, sig): SIGSTOP, SIGCONT, SIGKILL... (SIGKILL also reaps). */
int rp_signal(struct rp_proc *p, int sig);

/* New connection (1 s timeouts) authenticated with p->password; NULL on failure. */
redisContext *rp_connect(const struct rp_proc *p);
/* One command on a fresh connection; NULL on connection failure. Free with freeReplyObject. */
redisReply *rp_command(const struct rp_proc *p, const char *fmt, ...);
/* Same, argv form (binary-safe). */
redisReply *rp_command_argv(const struct rp_proc *p, int argc, const char **argv);
/* Integer reply of a command, or `fallback` if the reply is not an integer. */
long long rp_command_int(const struct rp_proc *p, long long fallback, const char *fmt, ...);
/* A string reply read as a whole number (ZSCORE, HGET), or `fallback` if
 * the reply is not a string (none: a missing member or field). */
long long rp_command_num(const struct rp_proc *p, long long fallback, const char *fmt, ...);
/* The server's TIME in ms (the scripts' clock), or -1 on failure. */
long long rp_time_ms(const struct rp_proc *p);
/* Value of `field` in INFO `section` ("replication", "commandstats", ...)
 * copied into buf. Returns 0 or -ENOENT / -EIO. */
int rp_info_field(const struct rp_proc *p, const char *section, const char *field, char *buf, size_t len);
/* Waits until the sentinel knows at least n replicas of `name` that are not
 * flagged down/disconnected. Returns 0 or -ETIMEDOUT. */
int rp_sentinel_wait_replicas(const struct rp_proc *s, const char *name, int n, int timeout_ms);
/* Port of the master the sentinel currently names, or -1. */
int rp_sentinel_master_port(const struct rp_proc *s, const char *name);
/* SENTINEL FAILOVER `name`, retried until the sentinel takes it (up to 10 s),
 * then waits until it names the master on new_port (up to 20 s more).
 * Returns 0, -EIO (no answer) or -ETIMEDOUT. */
int rp_sentinel_failover(const struct rp_proc *s, const char *name, int new_port);
/* Removes a test's directory tree and empties `dir`, unless
 * KT_KEEP_REDIS_DIRS=1 (then it says on stderr which directory it kept). */
void rp_remove_tree(char *dir);

/* Redis Cluster: starts n redis-server --cluster-enabled nodes (node
 * timeout 1000 ms, an explicit bus port each), joins them with `redis-cli
 * --cluster create ... --cluster-replicas replicas --cluster-yes` and waits
 * until every node says cluster_state:ok. On failure every node is stopped.
 * Returns 0, -EIO (redis-cli failed: no cluster support) or -ETIMEDOUT. */
int rp_start_cluster(struct rp_proc *nodes, int n, int replicas);
/* Waits until every running node says cluster_state:ok. */
int rp_cluster_wait_ok(const struct rp_proc *nodes, int n, int timeout_ms);
/* Index of the node that the first running node answering CLUSTER SLOTS
 * names as master of slot, or -1. */
int rp_cluster_slot_owner(const struct rp_proc *nodes, int n, int slot);
/* CLUSTER KEYSLOT key asked of p, or -1. */
int rp_cluster_slot(const struct rp_proc *p, const char *key);

void rp_sleep_ms(int ms);

/* Milliseconds on CLOCK_BOOTTIME (the daemon's clock) for test timings. */
uint64_t rp_now_ms(void);

/* cmocka: `expr` (a store call returning 0 or -errno) must succeed; else the
 * call, its result and errbuf (the store's one-line message) are printed. */
#define RP_ASSERT_OK(expr, errbuf)                                                 \
	do {                                                                       \
		int r_ = (expr);                                                   \
		if (r_)                                                            \
			print_error("%s = %d: %s\n", #expr, r_, errbuf);           \
		assert_int_equal(r_, 0);                                           \
	} while (0)

#endif
