/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Internals of the Redis store (store.h); no other module includes this.
 *
 *   store_redis.c     the operations (heartbeat, leave, ramp, permits, tag
 *                     exchange, ping), their arguments and replies, error
 *                     kinds and the store's state; the Lua scripts
 *   store_open.c      kt_store_open/kt_store_close: configuration checks
 *   store_conn.c      what every transport shares: messages (passwords
 *                     scrubbed), back-off, deadlines, dialling a server,
 *                     pipelines, AUTH/SELECT/ROLE/SCRIPT LOAD, argv building
 *   rtrans_single.c   transport for one server, or the master a Sentinel
 *                     names (discovery, +switch-master subscription)
 *   rtrans_cluster.c  transport for Redis Cluster: slot map, one connection
 *                     per master, MOVED/ASK/NOSCRIPT/CLUSTERDOWN handling
 *
 * The operations never ask which transport they run on: they build jobs
 * (a script or a plain command, with the route of the keys it touches) and
 * hand them to s->t (struct kt_rtransport below).
 */
#ifndef KT_STORE_INT_H
#define KT_STORE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <hiredis/hiredis.h>
#include "kthrottle.h"
#include "base/config.h"
#include "store/hbmemo.h"
#include "store/rconn.h"
#include "store/store.h"

enum { SCRIPT_HB, SCRIPT_LEAVE, SCRIPT_PERMIT, SCRIPT_TAGS, SCRIPT_NODE, N_SCRIPTS };
/* The scripts' texts (store_redis.c, from user/store/lua/), by SCRIPT_*. */
extern const char *const rs_scripts[N_SCRIPTS];

/* A redis_tls / sentinel_tls block: file paths as configured. */
struct tls_opt {
	bool on;
	char *ca, *cert, *key;
	bool skip_verify;
};

struct kt_rtransport;

struct kt_store {
	const struct kt_rtransport *t; /* single/sentinel or cluster */
	void *tp;                    /* the transport's own state (connections, slot map) */
	enum kt_redis_mode mode;
	char *host;
	int port;
	int db;
	char *user, *pass;
	char *pass_file;             /* passwordFile: read again at each connect */
	char *ep_host[KT_MAX_ENDPOINTS]; /* sentinels, or cluster seeds */
	int ep_port[KT_MAX_ENDPOINTS];
	int n_ep;
	int ep_next;                 /* sentinel asked first at the next resolution */
	char *master_name;
	char *s_user, *s_pass;
	char *s_pass_file;
	char *prefix;
	struct tls_opt tls_redis, tls_sentinel;

	/* The server that answered last, named in the operations' messages. */
	char cur_host[256];
	int cur_port;
	char sha[N_SCRIPTS][41];

	enum kt_store_state state;
	uint64_t since_ns, next_retry_ns;
	uint64_t backoff_ms;         /* last back-off delay before jitter, 0 after success */
	uint64_t deadline_ns;        /* of the call in progress */
	uint64_t rng;
	char last_err[KT_ERR_LEN];
	struct kt_store_stats st;
	enum kt_store_err_kind hint; /* set by the failure being reported, else from the errno */
	struct kt_store_errors errs;
	struct kt_hbmemo *memo;      /* last answered heartbeat per limit (made at the first one) */
	/* leases: node (store.h "Node leases") */
	enum kt_store_leases leases;
	char *node;                  /* kt_store_set_node */
	uint64_t feed_since;         /* node.lua's last `now` (Redis ms); 0: send every limit */
	uint64_t feed_epoch;         /* server_epoch when feed_since was set: another server
				      * (a restart, a failover) may have lost changes */
	uint64_t server_epoch;       /* counts the servers reached: + 1 at each connection
				      * setup whose run_id differs from the last (or is unknown) */
	char run_id[41];             /* INFO server's run_id at the last setup; "" unknown */

	/* latency (store.h: the step timeout) */
	unsigned fixed_timeout_ms;   /* redisStore.timeout, 0: follow the latency */
	uint32_t rtt_us[KT_STORE_RTT_WINDOW]; /* answered round trips, a ring */
	unsigned rtt_n, rtt_next;
	unsigned timeouts_in_row;    /* steps timed out since the last answer */
	unsigned step_ms;            /* the timeout of the step in progress */
};

/* ---- argument vectors (binary-safe) ---- */

struct args {
	int n, cap;
	const char **v;
	size_t *len;
	char **owned;
	int n_owned;
	bool oom;
};

int rs_args_init(struct args *a, int cap);
void rs_args_free(struct args *a);
void rs_arg_ref(struct args *a, const char *p);
__attribute__((format(printf, 2, 3))) void rs_arg_fmt(struct args *a, const char *fmt, ...);

/* ---- the transport interface ---- */

/* One command for the server that holds some keys: a script (argv[0..1]
 * are left free and set by the transport: EVALSHA sha, or EVAL text once
 * the server lost the script) or a plain command. */
struct kt_rjob {
	int slot;        /* the keys' route: kt_rtransport.route() of one of them */
	int script;      /* SCRIPT_*, or -1: a plain command */
	struct args *a;
	redisReply *rep; /* out: the answer, an error reply included (check() classifies it) */
	/* the transport's own bookkeeping; start them false, -1, 0 */
	bool eval;       /* the server lost the script: send its text */
	int ask;         /* cluster: ASK target for the next try, -1 none */
	int node;        /* cluster: who answered */
};

struct kt_rtransport {
	const char *name;
	uint64_t backoff_max_ms; /* cap of the store's back-off when it goes DOWN */
	/* After kt_store_open copied the configuration: the transport's state
	 * in s->tp. 0 or -ENOMEM. */
	int (*init)(struct kt_store *s);
	/* Closes every connection and frees s->tp. */
	void (*close)(struct kt_store *s);
	/* A connection-level failure took the store DOWN: drop what is
	 * connected (NULL: nothing to drop). */
	void (*drop)(struct kt_store *s);
	/* Start of an operation at now (s->deadline_ns is set): connect if
	 * the transport connects up front, honour the back-off (-EAGAIN). */
	int (*begin)(struct kt_store *s, uint64_t now, char *err, size_t errlen);
	/* The route of key: jobs whose keys share a route may be one script
	 * call (cluster: the hash slot; single: always 0). */
	int (*route)(const struct kt_store *s, const char *key);
	/* Runs the jobs (those for one server pipelined where it can), with
	 * redirects and retries as the transport knows them. Returns 0 with
	 * every job's rep set, or the last failure (err, last_err say it); the
	 * jobs that were answered keep their rep either way. */
	int (*run)(struct kt_store *s, struct kt_rjob *jobs, int nj, const char *what, char *err,
		   size_t errlen);
	/* After run, for an answered job: sets cur_host/cur_port to the server
	 * that answered and classifies an error reply (-EIO, -EACCES, ...;
	 * s->hint), 0 when it is not one. */
	int (*check)(struct kt_store *s, const struct kt_rjob *jb, const char *what, char *err,
		     size_t errlen);
	/* PING where it matters (single: the server; cluster: a fresh slot map
	 * and every master). */
	int (*ping)(struct kt_store *s, char *err, size_t errlen);
	bool (*connected)(const struct kt_store *s);
	/* "host:port" of the server in use into buf; false when there is none. */
	bool (*endpoint)(const struct kt_store *s, char *buf, size_t len);
};

extern const struct kt_rtransport kt_rtrans_single;  /* KT_REDIS_SINGLE and KT_REDIS_SENTINEL */
extern const struct kt_rtransport kt_rtrans_cluster; /* KT_REDIS_CLUSTER */

void rs_jobs_free(struct kt_rjob *jobs, int nj);
/* One job: t->run, then t->check. *out: the reply (never an error reply,
 * the caller frees it) when 0 is returned. */
int rs_run_one(struct kt_store *s, struct kt_rjob *jb, const char *what, redisReply **out, char *err,
	       size_t errlen);

/* ---- shared by the transports (store_conn.c) ---- */

static inline uint64_t rs_mono_ns(void)
{
	return kt_clock_ns();
}

/* Every message goes through here: passwords are scrubbed; also last_err. */
__attribute__((format(printf, 4, 5)))
void rs_seterr(struct kt_store *s, char *err, size_t errlen, const char *fmt, ...);
/* Redis error text, one line, bounded. */
const char *rs_reply_text(const redisReply *r, char *buf, size_t len);
bool rs_starts_with(const redisReply *r, const char *prefix);
enum kt_store_err_kind rs_reply_kind(const redisReply *r);
bool rs_int_in(const redisReply *r, long long lo, long long hi);
bool rs_is_ok(const redisReply *r);
bool rs_valid_token(const char *t, size_t max);
bool rs_valid_host(const char *h);
void rs_free_secret(char *p);

uint64_t rs_next_rand(struct kt_store *s);
/* A connection-level failure: drop (t->drop), go DOWN, schedule the next
 * attempt (capped at t->backoff_max_ms). */
void rs_conn_failed(struct kt_store *s);
/* The -EAGAIN of a store DOWN and backing off, err saying so. */
int rs_backing_off(struct kt_store *s, uint64_t now, char *err, size_t errlen);
/* The pct-th percentile of the latency window (nearest rank), 0 if empty. */
uint64_t rs_rtt_pct_us(const struct kt_store *s, unsigned pct);
/* The step timeout and the call budget in force (store.h). */
unsigned rs_step_timeout_ms(const struct kt_store *s);
unsigned rs_budget_ms(const struct kt_store *s);
/* Deadline of the next step: the step timeout capped by the call budget. */
int rs_step_deadline(struct kt_store *s, uint64_t *dl);
/* n commands in one round trip on c, timed: an answer is a latency sample,
 * a timeout lengthens the next step's (store.h). kt_rconn_call_many's
 * contract otherwise. */
int rs_call_many(struct kt_store *s, struct kt_rconn *c, const struct kt_rconn_cmd *cmds, int n,
		 uint64_t dl, redisReply **rep, char *e, size_t elen);
/* The message for a failed step, in buf; rconn's text names the peer and the step. */
const char *rs_conn_errstr(const struct kt_store *s, int ret, const char *rconn_err, char *buf,
			   size_t len);
/* Connects (TCP, then the TLS handshake under t) within one step. */
int rs_dial(struct kt_store *s, const char *role, const char *host, int port, const struct tls_opt *t,
	    struct kt_rconn **out, char *err, size_t errlen);

struct rs_cmd {
	int argc;
	const char *argv[4];
};
void rs_cmd_set(struct rs_cmd *k, int argc, ...);
void rs_free_replies(redisReply **rep, int n);
/* n commands (at most 4 + N_SCRIPTS) in one write, n replies. 0, or a
 * negative errno for an I/O failure (the caller drops c). */
int rs_pipeline(struct kt_store *s, struct kt_rconn *c, const char *where, struct rs_cmd *cmds, int n,
		redisReply **rep, char *err, size_t errlen);
/* AUTH [user] password, as a pipelined command. */
void rs_auth_cmd(struct rs_cmd *k, const char *user, const char *pass);
int rs_auth_failed(struct kt_store *s, const char *where, const redisReply *r, char *err, size_t errlen);
/* AUTH, SELECT, ROLE (sentinel mode) and SCRIPT LOAD, in one round trip. */
int rs_setup_master(struct kt_store *s, struct kt_rconn *c, const char *where, char *err, size_t errlen);
/* The reply to PING is PONG, else -EPROTO naming cur_host. */
int rs_check_pong(struct kt_store *s, const redisReply *r, char *err, size_t errlen);

#endif
