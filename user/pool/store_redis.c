/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Redis store client: see store.h for keys, consensus and failure handling. */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "kthrottle.h"
#include <unistd.h>
#include <sys/epoll.h>
#include <hiredis/hiredis.h>
#include "rconn.h"
#include "store.h"

#define STR_(x) #x
#define STR(x) STR_(x)

/* Per limit the scripts take these KEYS, all under the hash tag {L} (store.h):
 * hb, size, ramp, fb, lapsed, counted, hist, sizes, meta, grant, dem. */
#define N_KEYS 11
static const char *const key_names[N_KEYS] = {
	"hb", "size", "ramp", "fb", "lapsed", "counted", "hist", "sizes", "meta", "grant", "dem",
};

/* The scripts, one file each in user/pool/lua/ (what each does, its KEYS and
 * ARGV are in its header comment): heartbeat.lua and leave.lua include
 * common.lua, the counters they share. The build turns them into the
 * KT_LUA_* string macros of $(BUILD)/gen/kt_lua.h (scripts/lua-embed.sh:
 * comments dropped; it asserts that the numbers marked --[[N_KEYS]],
 * --[[KT_STORE_MAX_POOL]] and --[[KT_STORE_EXPIRE_FACTOR]] there are these
 * constants). */
#include "kt_lua.h"

static const char hb_script[] = KT_LUA_HEARTBEAT;
static const char leave_script[] = KT_LUA_LEAVE;
static const char permit_script[] = KT_LUA_PERMIT;
static const char tags_script[] = KT_LUA_TAGS;

enum { SCRIPT_HB, SCRIPT_LEAVE, SCRIPT_PERMIT, SCRIPT_TAGS, N_SCRIPTS };
static const char *const scripts[N_SCRIPTS] = { hb_script, leave_script, permit_script, tags_script };

#define CL_SLOTS 16384
#define CL_MAX_NODES 256
#define CL_PASSES 3 /* first try, then at most two retries after a redirect or a refresh */

struct cl_node {
	char host[256];
	int port;
	struct kt_rconn *c; /* NULL when not connected */
	uint64_t retry_ns;   /* not dialled before this (CLOCK_MONOTONIC) after a failure */
	uint64_t backoff_ms; /* its last back-off before jitter, 0 after a success */
};

/* A redis_tls / sentinel_tls block: file paths as configured. */
struct tls_opt {
	bool on;
	char *ca, *cert, *key;
	bool skip_verify;
};

struct kt_store {
	enum kt_redis_mode mode;
	char *host;
	int port;
	int db;
	char *user, *pass;
	char *pass_file;             /* passwordFile: read again at each connect */
	char *ep_host[KT_MAX_ENDPOINTS];
	int ep_port[KT_MAX_ENDPOINTS];
	int n_ep;
	int ep_next;                 /* sentinel asked first at the next resolution */
	char *master_name;
	char *s_user, *s_pass;
	char *s_pass_file;
	char *prefix;
	struct tls_opt tls_redis, tls_sentinel;

	/* Used synchronously (kt_rconn_call_many), so calls block as before. */
	struct kt_rconn *c;          /* NULL when not connected */
	struct kt_rconn *sub;        /* sentinel mode: subscribed to +switch-master, or NULL */
	bool switched;               /* sub saw +switch-master for our master */
	uint64_t sub_retry_ns;       /* earliest time to subscribe again after losing sub */
	char cur_host[256];
	int cur_port;
	char sha[N_SCRIPTS][41];
	/* cluster mode (s->c stays NULL): every master met, and the slot map */
	struct cl_node *cn;          /* CL_MAX_NODES entries */
	int n_cn;
	int16_t *slot_node;          /* CL_SLOTS entries: index into cn, -1 unknown */
	bool have_map, map_stale;    /* stale: refresh before the next command */
	int cl_last;                 /* node that answered last (kt_store_endpoint), -1 none */

	enum kt_store_state state;
	uint64_t since_ns, next_retry_ns;
	uint64_t backoff_ms;         /* last back-off delay before jitter, 0 after success */
	uint64_t deadline_ns;        /* of the call in progress */
	uint64_t rng;
	char last_err[KT_ERR_LEN];
	struct kt_store_stats st;
	enum kt_store_err_kind hint; /* set by the failure being reported, else from the errno */
	struct kt_store_errors errs;
};

static uint64_t mono_ns(void)
{
	return kt_clock_ns();
}

/* ---- errors: every message goes through here so passwords are scrubbed ---- */

/* Defence in depth: no message is built from a password, but Redis error text
 * is echoed, so any occurrence is masked. Shorter secrets would mangle
 * ordinary words and are not worth hiding. */
static void scrub(char *buf, const char *secret)
{
	size_t sl;
	char *p;

	if (!secret || (sl = strlen(secret)) < 4)
		return;
	while ((p = strstr(buf, secret))) {
		memcpy(p, "***", 3);
		memmove(p + 3, p + sl, strlen(p + sl) + 1);
	}
}

__attribute__((format(printf, 4, 5)))
static void seterr(struct kt_store *s, char *err, size_t errlen, const char *fmt, ...)
{
	char buf[KT_ERR_LEN];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	scrub(buf, s->pass);
	scrub(buf, s->s_pass);
	snprintf(s->last_err, sizeof(s->last_err), "%s", buf);
	if (err && errlen)
		snprintf(err, errlen, "%s", buf);
}

/* Redis error text, one line, bounded (it is echoed into our messages). */
static const char *reply_text(const redisReply *r, char *buf, size_t len)
{
	size_t i, n = r->str ? r->len : 0;

	if (n >= len)
		n = len - 1;
	for (i = 0; i < n; i++)
		buf[i] = (r->str[i] >= 0x20 && r->str[i] < 0x7f) ? r->str[i] : '?';
	buf[n] = 0;
	return buf;
}

static bool starts_with(const redisReply *r, const char *prefix)
{
	size_t n = strlen(prefix);

	return r->str && r->len >= n && memcmp(r->str, prefix, n) == 0;
}

/* The kind an error reply names (the code may follow a script's prefix). */
static enum kt_store_err_kind reply_kind(const redisReply *r)
{
	char t[200];

	reply_text(r, t, sizeof(t));
	if (starts_with(r, "NOAUTH") || starts_with(r, "WRONGPASS"))
		return KT_SERR_AUTH;
	if (strstr(t, "WRONGTYPE"))
		return KT_SERR_WRONGTYPE;
	if (starts_with(r, "NOSCRIPT"))
		return KT_SERR_NOSCRIPT;
	return KT_SERR_ERR;
}

static bool is_cluster(const struct kt_store *s)
{
	return s->mode == KT_REDIS_CLUSTER;
}

static bool int_in(const redisReply *r, long long lo, long long hi)
{
	return r->type == REDIS_REPLY_INTEGER && r->integer >= lo && r->integer <= hi;
}

/* ---- validation ---- */

static bool valid_limit(const char *l)
{
	size_t n;

	if (!l)
		return false;
	n = strlen(l);
	if (n < 1 || n >= KT_NAME_LEN)
		return false;
	for (size_t i = 0; i < n; i++) {
		char ch = l[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
		      ch == '_' || ch == '.' || ch == '-'))
			return false;
	}
	return true;
}

static bool valid_token(const char *t, size_t max)
{
	size_t n;

	if (!t)
		return false;
	n = strlen(t);
	if (n < 1 || n > max)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)t[i] < 0x21 || (unsigned char)t[i] > 0x7e)
			return false;
	return true;
}

static bool valid_host(const char *h)
{
	return valid_token(h, 253);
}

/* ---- connection state ---- */

static uint64_t next_rand(struct kt_store *s)
{
	/* xorshift64*: jitter only, no need for quality */
	s->rng ^= s->rng >> 12;
	s->rng ^= s->rng << 25;
	s->rng ^= s->rng >> 27;
	return s->rng * 2685821657736338717ULL;
}

static void drop_conn(struct kt_store *s)
{
	kt_rconn_close(s->c);
	s->c = NULL;
	s->cur_host[0] = 0;
	s->cur_port = 0;
}

/* A connection-level failure: drop, go DOWN, schedule the next attempt. */
static void conn_failed(struct kt_store *s)
{
	uint64_t now = mono_ns(), d;

	drop_conn(s);
	s->st.failures++;
	if (s->state != KT_STORE_DOWN) {
		s->state = KT_STORE_DOWN;
		s->since_ns = now;
	}
	s->backoff_ms = s->backoff_ms ? s->backoff_ms * 2 : KT_STORE_BACKOFF_MIN_MS;
	if (s->backoff_ms > KT_STORE_BACKOFF_MAX_MS)
		s->backoff_ms = KT_STORE_BACKOFF_MAX_MS;
	/* a cluster failover is routine and over in a few node timeouts: retry
	 * it at least once a second rather than sleep through the promotion */
	if (s->mode == KT_REDIS_CLUSTER && s->backoff_ms > KT_STORE_CLUSTER_BACKOFF_MAX_MS)
		s->backoff_ms = KT_STORE_CLUSTER_BACKOFF_MAX_MS;
	d = s->backoff_ms / 2 + next_rand(s) % (s->backoff_ms / 2 + 1);
	s->next_retry_ns = now + d * 1000000ULL;
}

/* Deadline of the next step: the per-step timeout capped by the call budget. */
static int step_deadline(struct kt_store *s, uint64_t *dl)
{
	uint64_t now = mono_ns(), step = now + KT_STORE_TIMEOUT_MS * 1000000ULL;

	if (now + 1000000ULL > s->deadline_ns)
		return -ETIMEDOUT;
	*dl = step < s->deadline_ns ? step : s->deadline_ns;
	return 0;
}

/* The message for a failed step; rconn's text names the peer and the step. */
static const char *conn_errstr(int ret, const char *rconn_err)
{
	if (ret == -ETIMEDOUT && !strstr(rconn_err, "TLS"))
		return "timed out after " STR(KT_STORE_TIMEOUT_MS) " ms";
	if (ret == -ECONNRESET && !strstr(rconn_err, "TLS"))
		return "server closed the connection";
	return rconn_err[0] ? rconn_err : strerror(-ret);
}

static void free_secret(char *p);

/* A rotated Secret is used from the next connect on. One that cannot be
 * read (removed, or refused by the volume rule) leaves the last good
 * password: AUTH then says whether the server still takes it. */
static void refresh_secret(char **pass, const char *file)
{
	char why[160], *fresh;

	if (!file || kt_config_read_secret(file, &fresh, why, sizeof(why)))
		return;
	if (*pass && !strcmp(*pass, fresh)) {
		free_secret(fresh);
		return;
	}
	free_secret(*pass);
	*pass = fresh;
}

/* Connects (TCP, then the TLS handshake under t) within one step. */
static int dial(struct kt_store *s, const char *role, const char *host, int port,
		const struct tls_opt *t, struct kt_rconn **out, char *err, size_t errlen)
{
	struct kt_rconn_opts o = {
		.host = host, .port = port, .tls = t->on, .ca_file = t->ca, .cert_file = t->cert,
		.key_file = t->key, .insecure_skip_verify = t->skip_verify,
		.server_name = NULL, /* the host: SNI for names, IP SAN check for literals */
	};
	char e[KT_ERR_LEN];
	struct kt_rconn *c = NULL;
	int ret;

	if (step_deadline(s, &o.connect_deadline_ns)) {
		seterr(s, err, errlen, "%s %s:%d: connect: call budget of %d ms exhausted", role, host,
		       port, KT_STORE_CALL_BUDGET_MS);
		return -ETIMEDOUT;
	}
	refresh_secret(&s->pass, s->pass_file);
	refresh_secret(&s->s_pass, s->s_pass_file);
	ret = kt_rconn_open(&o, &c, e, sizeof(e));
	if (!ret)
		ret = kt_rconn_open_wait(c, o.connect_deadline_ns, e, sizeof(e));
	if (ret) {
		/* rconn's line already says "connect to h:p failed: ..." */
		if (ret == -ETIMEDOUT && !strstr(e, "TLS"))
			seterr(s, err, errlen, "%s %s:%d: connect: timed out after %d ms", role, host, port,
			       KT_STORE_TIMEOUT_MS);
		else
			seterr(s, err, errlen, "%s: %s", role, e);
		kt_rconn_close(c);
		return ret;
	}
	*out = c;
	return 0;
}

struct cmd {
	int argc;
	const char *argv[4];
};

static void cmd_set(struct cmd *k, int argc, ...)
{
	va_list ap;
	int i;

	va_start(ap, argc);
	k->argc = argc;
	for (i = 0; i < argc; i++)
		k->argv[i] = va_arg(ap, const char *);
	va_end(ap);
}

static void free_replies(redisReply **rep, int n)
{
	for (int i = 0; i < n; i++)
		if (rep[i])
			freeReplyObject(rep[i]);
}

/* Sends n commands in one write and reads n replies (errors replies included).
 * Returns 0, or a negative errno for an I/O failure (the caller drops c). */
static int pipeline(struct kt_store *s, struct kt_rconn *c, const char *where, struct cmd *cmds,
		    int n, redisReply **rep, char *err, size_t errlen)
{
	struct kt_rconn_cmd rc[3 + N_SCRIPTS];
	char e[KT_ERR_LEN];
	uint64_t dl;
	int i, ret;

	for (i = 0; i < n; i++)
		rep[i] = NULL;
	if (step_deadline(s, &dl)) {
		seterr(s, err, errlen, "%s: call budget of %d ms exhausted", where,
		       KT_STORE_CALL_BUDGET_MS);
		return -ETIMEDOUT;
	}
	for (i = 0; i < n; i++)
		rc[i] = (struct kt_rconn_cmd){ .argc = cmds[i].argc, .argv = cmds[i].argv };
	s->st.round_trips++;
	s->st.commands += (uint64_t)n;
	ret = kt_rconn_call_many(c, rc, n, dl, rep, e, sizeof(e));
	if (ret)
		seterr(s, err, errlen, "%s: %s", where, conn_errstr(ret, e));
	return ret;
}

static bool is_ok(const redisReply *r)
{
	return r->type == REDIS_REPLY_STATUS && r->len == 2 && memcmp(r->str, "OK", 2) == 0;
}

/* AUTH [user] password, as a pipelined command. */
static void auth_cmd(struct cmd *k, const char *user, const char *pass)
{
	if (user)
		cmd_set(k, 3, "AUTH", user, pass);
	else
		cmd_set(k, 2, "AUTH", pass);
}

static int auth_failed(struct kt_store *s, const char *where, const redisReply *r, char *err,
		       size_t errlen)
{
	char t[200];

	seterr(s, err, errlen, "%s: authentication failed: %s", where, reply_text(r, t, sizeof(t)));
	return -EACCES;
}

/* Asks one sentinel for the master's address. */
static int ask_sentinel(struct kt_store *s, int idx, char *host, size_t hostlen, int *port, char *err,
			size_t errlen)
{
	struct kt_rconn *c = NULL;
	redisReply *rep[2] = { NULL, NULL }, *r;
	struct cmd cmds[2];
	char where[300], t[200], *end;
	int n = 0, ret;
	long v;

	snprintf(where, sizeof(where), "sentinel %s:%d", s->ep_host[idx], s->ep_port[idx]);
	ret = dial(s, "sentinel", s->ep_host[idx], s->ep_port[idx], &s->tls_sentinel, &c, err, errlen);
	if (ret)
		return ret;
	if (s->s_pass)
		auth_cmd(&cmds[n++], s->s_user, s->s_pass);
	cmd_set(&cmds[n++], 3, "SENTINEL", "get-master-addr-by-name", s->master_name);
	ret = pipeline(s, c, where, cmds, n, rep, err, errlen);
	if (ret)
		goto out;
	if (s->s_pass && !is_ok(rep[0])) {
		ret = auth_failed(s, where, rep[0], err, errlen);
		goto out;
	}
	r = rep[n - 1];
	ret = -EPROTO;
	if (r->type == REDIS_REPLY_NIL) {
		seterr(s, err, errlen, "%s: does not know master '%s'", where, s->master_name);
		ret = -ENOENT;
		goto out;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		seterr(s, err, errlen, "%s: SENTINEL get-master-addr-by-name: %s", where,
		       reply_text(r, t, sizeof(t)));
		ret = starts_with(r, "NOAUTH") ? -EACCES : -EIO;
		goto out;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
	    r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING ||
	    r->element[0]->len >= hostlen || !valid_host(r->element[0]->str)) {
		seterr(s, err, errlen, "%s: malformed reply to SENTINEL get-master-addr-by-name", where);
		goto out;
	}
	errno = 0;
	v = strtol(r->element[1]->str, &end, 10);
	if (errno || *end || end == r->element[1]->str || v < 1 || v > 65535) {
		seterr(s, err, errlen, "%s: malformed master port in SENTINEL reply", where);
		goto out;
	}
	memcpy(host, r->element[0]->str, r->element[0]->len + 1);
	*port = (int)v;
	ret = 0;
out:
	free_replies(rep, 2);
	kt_rconn_close(c);
	return ret;
}

static bool is_sha(const redisReply *r)
{
	if (r->type != REDIS_REPLY_STRING || r->len != 40)
		return false;
	for (int i = 0; i < 40; i++)
		if (!((r->str[i] >= '0' && r->str[i] <= '9') || (r->str[i] >= 'a' && r->str[i] <= 'f')))
			return false;
	return true;
}

/* AUTH, SELECT, ROLE (sentinel mode) and SCRIPT LOAD, in one round trip. */
static int setup_master(struct kt_store *s, struct kt_rconn *c, const char *where, char *err,
			size_t errlen)
{
	struct cmd cmds[3 + N_SCRIPTS];
	redisReply *rep[3 + N_SCRIPTS], *r;
	int n = 0, i_auth = -1, i_sel = -1, i_role = -1, i_scr, i, ret;
	char db[16], t[200];

	if (s->pass) {
		i_auth = n;
		auth_cmd(&cmds[n++], s->user, s->pass);
	}
	if (s->db) {
		snprintf(db, sizeof(db), "%d", s->db);
		i_sel = n;
		cmd_set(&cmds[n++], 2, "SELECT", db);
	}
	if (s->mode == KT_REDIS_SENTINEL) {
		i_role = n;
		cmd_set(&cmds[n++], 1, "ROLE");
	}
	i_scr = n;
	for (i = 0; i < N_SCRIPTS; i++)
		cmd_set(&cmds[n++], 3, "SCRIPT", "LOAD", scripts[i]);
	ret = pipeline(s, c, where, cmds, n, rep, err, errlen);
	if (ret)
		return ret;
	if (i_auth >= 0 && !is_ok(rep[i_auth])) {
		ret = auth_failed(s, where, rep[i_auth], err, errlen);
		goto out;
	}
	if (i_sel >= 0 && !is_ok(rep[i_sel])) {
		seterr(s, err, errlen, "%s: SELECT %d: %s", where, s->db,
		       rep[i_sel]->type == REDIS_REPLY_ERROR ? reply_text(rep[i_sel], t, sizeof(t))
							    : "unexpected reply");
		ret = -EIO;
		goto out;
	}
	if (i_role >= 0) {
		r = rep[i_role];
		if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
		    r->element[0]->type != REDIS_REPLY_STRING) {
			seterr(s, err, errlen, "%s: malformed reply to ROLE", where);
			ret = -EPROTO;
			goto out;
		}
		if (strcmp(r->element[0]->str, "master") != 0) {
			seterr(s, err, errlen, "%s: not a master (ROLE: %s); failover in progress?", where,
			       reply_text(r->element[0], t, sizeof(t)));
			ret = -EROFS;
			goto out;
		}
	}
	for (i = 0; i < N_SCRIPTS; i++) {
		r = rep[i_scr + i];
		if (r->type == REDIS_REPLY_ERROR) {
			seterr(s, err, errlen, "%s: SCRIPT LOAD: %s%s", where, reply_text(r, t, sizeof(t)),
			       starts_with(r, "NOAUTH") ? " (configure a password)" : "");
			ret = starts_with(r, "NOAUTH") ? -EACCES : -EIO;
			goto out;
		}
		if (!is_sha(r)) {
			seterr(s, err, errlen, "%s: malformed reply to SCRIPT LOAD", where);
			ret = -EPROTO;
			goto out;
		}
		memcpy(s->sha[i], r->str, 41);
	}
out:
	free_replies(rep, n);
	return ret;
}

static int connect_store(struct kt_store *s, char *err, size_t errlen)
{
	char host[256], where[300];
	struct kt_rconn *c = NULL;
	int port = 0, ret, i;

	if (s->mode == KT_REDIS_SENTINEL) {
		ret = -EIO;
		for (i = 0; i < s->n_ep; i++) {
			int idx = (s->ep_next + i) % s->n_ep;

			ret = ask_sentinel(s, idx, host, sizeof(host), &port, err, errlen);
			if (!ret) {
				s->ep_next = idx;
				break;
			}
		}
		if (ret) {
			if (s->n_ep > 1) {
				char last[KT_ERR_LEN];

				snprintf(last, sizeof(last), "%s", s->last_err);
				seterr(s, err, errlen, "no sentinel of %d answered for master '%s'; last: %s",
				       s->n_ep, s->master_name, last);
			}
			return ret;
		}
	} else {
		snprintf(host, sizeof(host), "%s", s->host);
		port = s->port;
	}
	snprintf(where, sizeof(where), "redis %s:%d", host, port);
	ret = dial(s, "redis", host, port, &s->tls_redis, &c, err, errlen);
	if (!ret)
		ret = setup_master(s, c, where, err, errlen);
	if (ret) {
		kt_rconn_close(c);
		/* the sentinel that named this master may be stale: start elsewhere next time */
		if (s->mode == KT_REDIS_SENTINEL)
			s->ep_next = (s->ep_next + 1) % s->n_ep;
		return ret;
	}
	s->c = c;
	snprintf(s->cur_host, sizeof(s->cur_host), "%s", host);
	s->cur_port = port;
	return 0;
}

/* Sentinel mode keeps a second connection to a sentinel subscribed to
 * +switch-master: the old master keeps accepting writes after a failover
 * until the sentinels demote it (they poll it only every 10 s), so waiting
 * for READONLY alone would split the pool for that long. */
static void drop_sub(struct kt_store *s)
{
	kt_rconn_close(s->sub);
	s->sub = NULL;
	s->switched = false;
	s->sub_retry_ns = mono_ns() + KT_STORE_BACKOFF_MAX_MS * 1000000ULL;
}

static bool is_switch(const struct kt_store *s, const redisReply *r)
{
	size_t nl = strlen(s->master_name);
	const redisReply *m;

	if (r->type != REDIS_REPLY_ARRAY || r->elements != 3)
		return false;
	m = r->element[2];
	/* "message" "+switch-master" "<name> <old ip> <old port> <new ip> <new port>" */
	return m->type == REDIS_REPLY_STRING && m->len > nl && memcmp(m->str, s->master_name, nl) == 0 &&
	       m->str[nl] == ' ';
}

/* Messages published to the subscription (replies with no command pending). */
static void on_message(void *cbdata, redisReply *r, const char *err)
{
	struct kt_store *s = cbdata;

	if (r && !err && is_switch(s, r))
		s->switched = true;
}

static void subscribe(struct kt_store *s)
{
	redisReply *rep[2] = { NULL, NULL }, *r;
	struct kt_rconn *c = NULL;
	struct cmd cmds[2];
	char where[300];
	int n = 0, idx = s->ep_next;

	snprintf(where, sizeof(where), "sentinel %s:%d", s->ep_host[idx], s->ep_port[idx]);
	if (dial(s, "sentinel", s->ep_host[idx], s->ep_port[idx], &s->tls_sentinel, &c, NULL, 0))
		goto fail;
	/* Before SUBSCRIBE: a message may follow its confirmation in the same read. */
	kt_rconn_set_push(c, on_message, s);
	if (s->s_pass)
		auth_cmd(&cmds[n++], s->s_user, s->s_pass);
	cmd_set(&cmds[n++], 2, "SUBSCRIBE", "+switch-master");
	if (pipeline(s, c, where, cmds, n, rep, NULL, 0))
		goto fail;
	r = rep[n - 1];
	if ((s->s_pass && !is_ok(rep[0])) || r->type != REDIS_REPLY_ARRAY || r->elements != 3)
		goto fail;
	free_replies(rep, n);
	s->sub = c;
	return;
fail:
	free_replies(rep, n);
	kt_rconn_close(c);
	drop_sub(s);
	s->ep_next = (idx + 1) % s->n_ep; /* try another sentinel next time */
}

/* Reads whatever the subscription has received, without blocking. */
static bool master_switched(struct kt_store *s)
{
	bool sw;

	/* A few rounds at most: handle() drains what is readable each time. */
	for (int i = 0; s->sub && !s->switched && i < 4; i++) {
		struct pollfd p = { .fd = kt_rconn_fd(s->sub), .events = POLLIN };
		uint32_t ev = 0;

		if (poll(&p, 1, 0) != 1)
			break;
		if (p.revents & POLLIN)
			ev |= EPOLLIN;
		if (p.revents & (POLLERR | POLLHUP))
			ev |= EPOLLIN | EPOLLERR;
		if (kt_rconn_handle(s->sub, ev, mono_ns())) {
			sw = s->switched;
			drop_sub(s);
			return sw;
		}
	}
	sw = s->switched;
	s->switched = false;
	return sw;
}

/* Start of every public call: set the budget, connect if needed, honour back-off. */
static int begin(struct kt_store *s, char *err, size_t errlen)
{
	uint64_t now = mono_ns();
	int ret;

	s->deadline_ns = now + KT_STORE_CALL_BUDGET_MS * 1000000ULL;
	if (is_cluster(s)) {
		/* connections are per master, made by cl_run as needed */
		if (s->state == KT_STORE_DOWN && now < s->next_retry_ns)
			goto backoff;
		return 0;
	}
	if (s->c && master_switched(s))
		drop_conn(s); /* not a failure: resolve the new master right now */
	if (s->c) {
		if (s->mode == KT_REDIS_SENTINEL && !s->sub && now >= s->sub_retry_ns)
			subscribe(s);
		return 0;
	}
	if (s->state == KT_STORE_DOWN && now < s->next_retry_ns) {
backoff:
		if (err && errlen)
			snprintf(err, errlen, "store down for %.1f s, next retry in %llu ms; last error: %s",
				 (double)(now - s->since_ns) / 1e9,
				 (unsigned long long)((s->next_retry_ns - now + 999999) / 1000000),
				 s->last_err);
		return -EAGAIN;
	}
	ret = connect_store(s, err, errlen);
	if (ret) {
		conn_failed(s);
		return ret;
	}
	s->st.connects++;
	if (s->mode == KT_REDIS_SENTINEL && !s->sub)
		subscribe(s);
	if (s->state != KT_STORE_UP) {
		s->state = KT_STORE_UP;
		s->since_ns = mono_ns();
	}
	s->backoff_ms = 0;
	return 0;
}

/* One command on the connection. I/O failures drop it. Error replies are
 * returned to the caller in *out (with 0) for classification. */
static int roundtrip(struct kt_store *s, int argc, const char **argv, const size_t *len,
		     const char *what, redisReply **out, char *err, size_t errlen)
{
	struct kt_rconn_cmd cmd = { .argc = argc, .argv = argv, .argvlen = len };
	char e[KT_ERR_LEN];
	uint64_t dl;
	int ret;

	*out = NULL;
	if (step_deadline(s, &dl)) {
		seterr(s, err, errlen, "redis %s:%d: %s: call budget of %d ms exhausted", s->cur_host,
		       s->cur_port, what, KT_STORE_CALL_BUDGET_MS);
		conn_failed(s);
		return -ETIMEDOUT;
	}
	s->st.round_trips++;
	s->st.commands++;
	ret = kt_rconn_call_many(s->c, &cmd, 1, dl, out, e, sizeof(e));
	if (ret) {
		seterr(s, err, errlen, "redis %s:%d: %s: %s", s->cur_host, s->cur_port, what,
		       conn_errstr(ret, e));
		conn_failed(s);
		return ret;
	}
	return 0;
}

/* Classifies an error reply. Replies that mean "wrong server now" (failover,
 * restart, lost auth) drop the connection so the next call re-resolves. */
static int error_reply(struct kt_store *s, const redisReply *r, const char *what, char *err,
		       size_t errlen)
{
	char t[200];
	int ret = -EIO;
	bool drop = false;

	if (starts_with(r, "READONLY")) {
		ret = -EROFS;
		drop = true;
	} else if (starts_with(r, "NOAUTH")) {
		ret = -EACCES;
		drop = true;
	} else if (starts_with(r, "MASTERDOWN") || starts_with(r, "LOADING")) {
		drop = true;
	}
	seterr(s, err, errlen, "redis %s:%d: %s: %s", s->cur_host, s->cur_port, what,
	       reply_text(r, t, sizeof(t)));
	s->hint = reply_kind(r);
	if (drop)
		conn_failed(s);
	return ret;
}

/* ---- argument vectors ---- */

struct args {
	int n, cap;
	const char **v;
	size_t *len;
	char **owned;
	int n_owned;
	bool oom;
};

static int args_init(struct args *a, int cap)
{
	memset(a, 0, sizeof(*a));
	a->cap = cap;
	a->v = calloc((size_t)cap, sizeof(*a->v));
	a->len = calloc((size_t)cap, sizeof(*a->len));
	a->owned = calloc((size_t)cap, sizeof(*a->owned));
	return a->v && a->len && a->owned ? 0 : -ENOMEM;
}

static void args_free(struct args *a)
{
	for (int i = 0; i < a->n_owned; i++)
		free(a->owned[i]);
	free(a->v);
	free(a->len);
	free(a->owned);
}

static void arg_ref(struct args *a, const char *p)
{
	if (a->n >= a->cap) {
		a->oom = true;
		return;
	}
	a->v[a->n] = p;
	a->len[a->n++] = strlen(p);
}

__attribute__((format(printf, 2, 3)))
static void arg_fmt(struct args *a, const char *fmt, ...)
{
	va_list ap;
	char *p;
	int len;

	va_start(ap, fmt);
	len = vasprintf(&p, fmt, ap);
	va_end(ap);
	if (len < 0 || a->n >= a->cap) {
		if (len >= 0)
			free(p);
		a->oom = true;
		return;
	}
	a->owned[a->n_owned++] = p;
	a->v[a->n] = p;
	a->len[a->n++] = (size_t)len;
}

/* The N_KEYS keys of one limit, in the scripts' order. */
static void arg_keys(struct args *a, const char *prefix, const char *limit)
{
	for (int k = 0; k < N_KEYS; k++)
		arg_fmt(a, "%s:pool:{%s}:%s", prefix, limit, key_names[k]);
}

/* EVALSHA, falling back to EVAL when the server lost the script (restart,
 * SCRIPT FLUSH). argv[0..1] are reserved for the command and script. */
static int run_script(struct kt_store *s, int script, struct args *a, const char *what,
		      redisReply **out, char *err, size_t errlen)
{
	redisReply *r;
	int ret;

	a->v[0] = "EVALSHA";
	a->len[0] = 7;
	a->v[1] = s->sha[script];
	a->len[1] = 40;
	ret = roundtrip(s, a->n, a->v, a->len, what, &r, err, errlen);
	if (ret)
		return ret;
	if (r->type == REDIS_REPLY_ERROR && starts_with(r, "NOSCRIPT")) {
		freeReplyObject(r);
		a->v[0] = "EVAL";
		a->len[0] = 4;
		a->v[1] = scripts[script];
		a->len[1] = strlen(scripts[script]);
		ret = roundtrip(s, a->n, a->v, a->len, what, &r, err, errlen);
		if (ret)
			return ret;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		ret = error_reply(s, r, what, err, errlen);
		freeReplyObject(r);
		return ret;
	}
	*out = r;
	return 0;
}

/* ---- Redis Cluster ---- */

/* CRC16-CCITT (XMODEM: poly 0x1021, init 0), the checksum Redis Cluster
 * hashes keys with; "123456789" gives 0x31c3. */
static uint16_t crc16(const char *p, size_t n)
{
	uint16_t crc = 0;

	for (size_t i = 0; i < n; i++) {
		crc ^= (uint16_t)((unsigned char)p[i] << 8);
		for (int b = 0; b < 8; b++)
			crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
	}
	return crc;
}

/* Redis's rule: the text between the first '{' and the next '}' when it is
 * not empty, else the whole key. */
static int key_slot(const char *key)
{
	const char *o = strchr(key, '{'), *c = o ? strchr(o + 1, '}') : NULL;

	if (o && c && c > o + 1)
		return crc16(o + 1, (size_t)(c - o - 1)) & (CL_SLOTS - 1);
	return crc16(key, strlen(key)) & (CL_SLOTS - 1);
}

static int limit_slot(const struct kt_store *s, const char *limit)
{
	char key[KT_STORE_PREFIX_MAX + KT_NAME_LEN + 16];

	snprintf(key, sizeof(key), "%s:pool:{%s}:hb", s->prefix, limit);
	return key_slot(key);
}

static void cl_drop(struct kt_store *s, int i)
{
	kt_rconn_close(s->cn[i].c);
	s->cn[i].c = NULL;
}

/* Node i failed: not dialled again before a jittered back-off of its own,
 * so a dead master costs its own limits, not a connect timeout per pass. */
static void cl_node_failed(struct kt_store *s, int i)
{
	struct cl_node *n = &s->cn[i];
	uint64_t d;

	n->backoff_ms = n->backoff_ms ? n->backoff_ms * 2 : KT_STORE_BACKOFF_MIN_MS;
	if (n->backoff_ms > KT_STORE_CLUSTER_BACKOFF_MAX_MS)
		n->backoff_ms = KT_STORE_CLUSTER_BACKOFF_MAX_MS;
	d = n->backoff_ms / 2 + next_rand(s) % (n->backoff_ms / 2 + 1);
	n->retry_ns = mono_ns() + d * 1000000ULL;
}

/* Index of host:port in cn, added if new; -1 when the table is full. */
static int cl_node(struct kt_store *s, const char *host, size_t hlen, int port)
{
	int i;

	if (hlen < 1 || hlen >= sizeof(s->cn[0].host) || port < 1 || port > 65535)
		return -1;
	for (i = 0; i < s->n_cn; i++)
		if (s->cn[i].port == port && strlen(s->cn[i].host) == hlen && !memcmp(s->cn[i].host, host, hlen))
			return i;
	if (s->n_cn >= CL_MAX_NODES) {
		/* reuse a node that serves no slot */
		for (i = 0; i < s->n_cn; i++) {
			int k;

			for (k = 0; k < CL_SLOTS && s->slot_node[k] != i; k++)
				;
			if (k == CL_SLOTS)
				break;
		}
		if (i == s->n_cn)
			return -1;
		cl_drop(s, i);
	} else {
		i = s->n_cn++;
	}
	memcpy(s->cn[i].host, host, hlen);
	s->cn[i].host[hlen] = 0;
	s->cn[i].port = port;
	s->cn[i].retry_ns = 0;
	s->cn[i].backoff_ms = 0;
	return i;
}

/* Connects node i (AUTH, SCRIPT LOAD: every master has the scripts). */
static int cl_connect(struct kt_store *s, int i, char *err, size_t errlen)
{
	struct cl_node *n = &s->cn[i];
	char where[300];
	int ret;

	if (n->c)
		return 0;
	snprintf(where, sizeof(where), "redis %s:%d", n->host, n->port);
	if (mono_ns() < n->retry_ns) {
		seterr(s, err, errlen, "%s: backing off after a failure (%s)", where, s->last_err);
		return -EAGAIN;
	}
	ret = dial(s, "redis", n->host, n->port, &s->tls_redis, &n->c, err, errlen);
	if (!ret)
		ret = setup_master(s, n->c, where, err, errlen);
	if (ret) {
		cl_drop(s, i);
		cl_node_failed(s, i);
		return ret;
	}
	n->backoff_ms = 0;
	s->st.connects++;
	return 0;
}

/* "MOVED 3999 127.0.0.1:6381" / "ASK ...": the node named, or -1. */
static int cl_redirect(struct kt_store *s, const redisReply *r, int skip)
{
	const char *p = r->str + skip, *end = r->str + r->len, *colon = NULL, *sp;
	long port;
	char *e;

	sp = memchr(p, ' ', (size_t)(end - p));
	if (!sp)
		return -1;
	p = sp + 1;
	for (const char *q = p; q < end; q++)
		if (*q == ':')
			colon = q;
	if (!colon || colon == end - 1)
		return -1;
	errno = 0;
	port = strtol(colon + 1, &e, 10);
	if (errno || e != end || port < 1 || port > 65535)
		return -1;
	return cl_node(s, p, (size_t)(colon - p), (int)port);
}

/* Fills the slot map from one CLUSTER SLOTS reply asked of host. */
static int cl_load_map(struct kt_store *s, const redisReply *r, const char *host)
{
	size_t i;

	if (r->type != REDIS_REPLY_ARRAY || r->elements == 0)
		return -EPROTO;
	for (i = 0; i < r->elements; i++) {
		const redisReply *e = r->element[i], *m;

		if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || !int_in(e->element[0], 0, CL_SLOTS - 1) ||
		    !int_in(e->element[1], e->element[0]->integer, CL_SLOTS - 1))
			return -EPROTO;
		m = e->element[2];
		if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 || m->element[0]->type != REDIS_REPLY_STRING ||
		    !int_in(m->element[1], 1, 65535))
			return -EPROTO;
	}
	for (i = 0; i < CL_SLOTS; i++)
		s->slot_node[i] = -1;
	for (i = 0; i < r->elements; i++) {
		const redisReply *e = r->element[i], *m = e->element[2];
		/* an empty address means "the node you asked" */
		const char *h = m->element[0]->len ? m->element[0]->str : host;
		int k = cl_node(s, h, strlen(h), (int)m->element[1]->integer);

		if (k < 0)
			return -ENOMEM;
		for (long long sl = e->element[0]->integer; sl <= e->element[1]->integer; sl++)
			s->slot_node[sl] = (int16_t)k;
	}
	/* demoted or forgotten masters: their connections are of no use now */
	for (int k = 0; k < s->n_cn; k++) {
		int sl;

		for (sl = 0; sl < CL_SLOTS && s->slot_node[sl] != k; sl++)
			;
		if (sl == CL_SLOTS)
			cl_drop(s, k);
	}
	s->have_map = true;
	s->map_stale = false;
	return 0;
}

/* CLUSTER SLOTS from a connected master, else from each seed in turn. */
static int cl_refresh(struct kt_store *s, char *err, size_t errlen)
{
	const char *argv[2] = { "CLUSTER", "SLOTS" };
	char where[300], host[256];
	int i, ret = -EIO, ncn = s->n_cn;

	for (i = 0; i < ncn + s->n_ep; i++) {
		struct kt_rconn *c = NULL, *tmp = NULL;
		struct cmd cmds[2];
		redisReply *rep[2] = { NULL, NULL };
		int n = 0, port;

		if (i < ncn) {
			if (!(c = s->cn[i].c))
				continue;
			snprintf(host, sizeof(host), "%s", s->cn[i].host);
			port = s->cn[i].port;
		} else {
			snprintf(host, sizeof(host), "%s", s->ep_host[i - ncn]);
			port = s->ep_port[i - ncn];
			if (dial(s, "redis", host, port, &s->tls_redis, &tmp, err, errlen)) {
				ret = -ECONNREFUSED;
				if (mono_ns() + 1000000ULL > s->deadline_ns)
					break;
				continue;
			}
			c = tmp;
			if (s->pass)
				auth_cmd(&cmds[n++], s->user, s->pass);
		}
		snprintf(where, sizeof(where), "redis %s:%d", host, port);
		cmd_set(&cmds[n++], 2, argv[0], argv[1]);
		ret = pipeline(s, c, where, cmds, n, rep, err, errlen);
		if (ret) {
			if (i < ncn)
				cl_drop(s, i);
		} else if (s->pass && i >= ncn && !is_ok(rep[0])) {
			ret = auth_failed(s, where, rep[0], err, errlen);
		} else if (rep[n - 1]->type == REDIS_REPLY_ERROR) {
			char t[200];

			seterr(s, err, errlen, "%s: CLUSTER SLOTS: %s", where, reply_text(rep[n - 1], t, sizeof(t)));
			ret = -EIO;
		} else if ((ret = cl_load_map(s, rep[n - 1], host))) {
			seterr(s, err, errlen, "%s: malformed reply to CLUSTER SLOTS", where);
		}
		free_replies(rep, n);
		kt_rconn_close(tmp);
		if (!ret)
			return 0;
		if (mono_ns() + 1000000ULL > s->deadline_ns)
			break;
	}
	s->map_stale = true;
	return ret;
}

/* The store's state after the cluster was asked: up while any slot was
 * answered (the unanswered limits are the caller's to fail, see
 * KT_STORE_PARTIAL; their master backs off on its own, cl_node_failed).
 * Down when nothing was answered; the whole store backs off only when no
 * master is connected either, so one dead master's slot (a single-slot
 * leave or ramp call, say) never holds back the others' heartbeats. */
static int cl_state(struct kt_store *s, int ret, bool some_answered)
{
	bool connected = false;
	char keep[KT_ERR_LEN];

	if (!ret || some_answered) {
		if (s->state != KT_STORE_UP) {
			s->state = KT_STORE_UP;
			s->since_ns = mono_ns();
		}
		s->backoff_ms = 0;
		return ret;
	}
	if (ret == -ENOMEM)
		return ret;
	for (int i = 0; i < s->n_cn; i++)
		connected |= s->cn[i].c != NULL;
	if (connected) {
		s->st.failures++;
		if (s->state != KT_STORE_DOWN) {
			s->state = KT_STORE_DOWN;
			s->since_ns = mono_ns();
		}
		s->next_retry_ns = 0;
		return ret;
	}
	snprintf(keep, sizeof(keep), "%s", s->last_err);
	conn_failed(s);
	snprintf(s->last_err, sizeof(s->last_err), "%s", keep);
	return ret;
}

/* One command for the master of a slot: a script (argv[0..1] set here to
 * EVALSHA sha, or EVAL text after NOSCRIPT) or a plain command. */
struct cl_job {
	int slot;
	int script;       /* SCRIPT_*, or -1: a plain command */
	struct args *a;
	bool eval;        /* the server lost the script: send its text */
	int ask;          /* ASK target for the next try, -1 none */
	int node;         /* who answered */
	redisReply *rep;  /* the answer (an error reply that is not a redirect included) */
};

static bool retry_reply(const redisReply *r)
{
	return starts_with(r, "CLUSTERDOWN") || starts_with(r, "TRYAGAIN") || starts_with(r, "READONLY") ||
	       starts_with(r, "LOADING") || starts_with(r, "MASTERDOWN");
}

/* Runs the jobs: the ones for the same master go in one pipeline (one round
 * trip), masters one after another. MOVED updates that slot (and the map is
 * refreshed at the next call), ASK sends ASKING first, NOSCRIPT resends the
 * text; a connection failure, CLUSTERDOWN, TRYAGAIN, READONLY or LOADING
 * refreshes the map. CL_PASSES passes at most, all within the call budget.
 * Returns 0 with every job's rep set, or the last failure; the jobs that
 * were answered keep their rep either way. */
static int cl_run(struct kt_store *s, struct cl_job *jobs, int nj, const char *what, char *err,
		  size_t errlen)
{
	struct kt_rconn_cmd *rc = NULL;
	redisReply **rep = NULL;
	int *who = NULL, pass, ret = 0, fail = -EIO, j, m;
	bool stale = s->map_stale || !s->have_map, answered = false;

	rc = calloc((size_t)nj * 2, sizeof(*rc));
	rep = calloc((size_t)nj * 2, sizeof(*rep));
	who = calloc((size_t)nj * 2, sizeof(*who));
	if (!rc || !rep || !who) {
		seterr(s, err, errlen, "%s: out of memory", what);
		ret = -ENOMEM;
		goto out;
	}
	for (pass = 0; pass < CL_PASSES; pass++) {
		int pending = 0;

		if (stale) {
			int r2 = cl_refresh(s, err, errlen);

			if (r2 && !s->have_map) {
				ret = r2;
				goto out;
			}
			stale = false;
		}
		for (j = 0; j < nj; j++)
			pending += !jobs[j].rep;
		if (!pending)
			break;
		ret = -EIO;
		for (m = 0; m < s->n_cn; m++) {
			int n = 0;
			char e[KT_ERR_LEN];
			uint64_t dl;

			for (j = 0; j < nj; j++) {
				struct cl_job *jb = &jobs[j];

				if (jb->rep || (jb->ask >= 0 ? jb->ask : s->slot_node[jb->slot]) != m)
					continue;
				if (jb->ask >= 0) {
					static const char *asking[1] = { "ASKING" };

					rc[n] = (struct kt_rconn_cmd){ .argc = 1, .argv = asking };
					who[n++] = -1;
				}
				if (jb->script >= 0) {
					jb->a->v[0] = jb->eval ? "EVAL" : "EVALSHA";
					jb->a->len[0] = strlen(jb->a->v[0]);
					jb->a->v[1] = jb->eval ? scripts[jb->script] : s->sha[jb->script];
					jb->a->len[1] = strlen(jb->a->v[1]);
				}
				rc[n] = (struct kt_rconn_cmd){ .argc = jb->a->n, .argv = jb->a->v,
							       .argvlen = jb->a->len };
				who[n++] = j;
			}
			if (!n)
				continue;
			if ((ret = cl_connect(s, m, err, errlen))) {
				fail = ret;
				stale = true;
				continue;
			}
			if (step_deadline(s, &dl)) {
				seterr(s, err, errlen, "redis %s:%d: %s: call budget of %d ms exhausted",
				       s->cn[m].host, s->cn[m].port, what, KT_STORE_CALL_BUDGET_MS);
				ret = -ETIMEDOUT;
				goto out;
			}
			s->st.round_trips++;
			s->st.commands += (uint64_t)n;
			ret = kt_rconn_call_many(s->cn[m].c, rc, n, dl, rep, e, sizeof(e));
			if (ret) {
				seterr(s, err, errlen, "redis %s:%d: %s: %s", s->cn[m].host, s->cn[m].port, what,
				       conn_errstr(ret, e));
				fail = ret;
				cl_drop(s, m);
				stale = true;
				continue;
			}
			for (int k = 0; k < n; k++) {
				struct cl_job *jb;
				redisReply *r = rep[k];
				char t[200];

				rep[k] = NULL;
				if (who[k] < 0) {
					freeReplyObject(r);
					continue;
				}
				jb = &jobs[who[k]];
				jb->ask = -1;
				jb->node = m;
				if (r->type != REDIS_REPLY_ERROR) {
					jb->rep = r;
					continue;
				}
				seterr(s, err, errlen, "redis %s:%d: %s: %s", s->cn[m].host, s->cn[m].port, what,
				       reply_text(r, t, sizeof(t)));
				fail = -EIO;
				if (starts_with(r, "MOVED ")) {
					int to = cl_redirect(s, r, 6);

					if (to >= 0)
						s->slot_node[jb->slot] = (int16_t)to;
					else
						stale = true;
					s->map_stale = true; /* a slot moved: others may have too */
				} else if (starts_with(r, "ASK ")) {
					jb->ask = cl_redirect(s, r, 4);
				} else if (jb->script >= 0 && !jb->eval && starts_with(r, "NOSCRIPT")) {
					jb->eval = true;
				} else if (retry_reply(r)) {
					stale = true;
				} else {
					jb->rep = r; /* the caller's to classify */
					continue;
				}
				freeReplyObject(r);
			}
		}
		for (j = 0; j < nj; j++)
			if (!jobs[j].rep && s->slot_node[jobs[j].slot] < 0 && jobs[j].ask < 0) {
				seterr(s, err, errlen, "%s: no master serves slot %d (cluster map)", what,
				       jobs[j].slot);
				fail = -EIO;
				stale = true;
			}
		ret = 0;
		for (j = 0; j < nj; j++)
			if (!jobs[j].rep)
				ret = -EIO;
		if (!ret)
			break;
	}
	if (ret)
		ret = fail; /* the last failure's errno; its text is in last_err */
	for (j = 0; j < nj; j++)
		if (jobs[j].rep) {
			answered = true;
			s->cl_last = jobs[j].node;
		}
out:
	free(rc);
	free(rep);
	free(who);
	return cl_state(s, ret, answered);
}

static void cl_jobs_free(struct cl_job *jobs, int nj)
{
	for (int j = 0; j < nj; j++)
		if (jobs[j].rep)
			freeReplyObject(jobs[j].rep);
}

/* After cl_run: a job's answer is an error reply the script or command gave. */
static int cl_check(struct kt_store *s, const struct cl_job *jb, const char *what, char *err,
		    size_t errlen)
{
	char t[200];

	snprintf(s->cur_host, sizeof(s->cur_host), "%s", s->cn[jb->node].host);
	s->cur_port = s->cn[jb->node].port;
	if (jb->rep->type != REDIS_REPLY_ERROR)
		return 0;
	seterr(s, err, errlen, "redis %s:%d: %s: %s", s->cur_host, s->cur_port, what,
	       reply_text(jb->rep, t, sizeof(t)));
	s->hint = reply_kind(jb->rep);
	return starts_with(jb->rep, "NOAUTH") ? -EACCES : -EIO;
}

/* One plain command for the master of slot; *out is never an error reply. */
static int cl_simple(struct kt_store *s, int slot, int argc, const char **argv, const char *what,
		     redisReply **out, char *err, size_t errlen)
{
	struct args a = { 0 };
	struct cl_job jb = { .slot = slot, .script = -1, .a = &a, .ask = -1 };
	int ret;

	*out = NULL;
	if (args_init(&a, argc)) {
		args_free(&a);
		seterr(s, err, errlen, "%s: out of memory", what);
		return -ENOMEM;
	}
	for (int i = 0; i < argc; i++)
		arg_ref(&a, argv[i]);
	ret = cl_run(s, &jb, 1, what, err, errlen);
	if (!ret)
		ret = cl_check(s, &jb, what, err, errlen);
	if (!ret) {
		*out = jb.rep;
		jb.rep = NULL;
	}
	cl_jobs_free(&jb, 1);
	args_free(&a);
	return ret;
}

/* ---- public API ---- */

static void free_secret(char *p)
{
	if (p) {
		explicit_bzero(p, strlen(p));
		free(p);
	}
}

static void tls_opt_free(struct tls_opt *t)
{
	free(t->ca);
	free(t->cert);
	free(t->key);
}

void kt_store_close(struct kt_store *s)
{
	if (!s)
		return;
	drop_conn(s);
	kt_rconn_close(s->sub);
	for (int i = 0; s->cn && i < s->n_cn; i++)
		cl_drop(s, i);
	free(s->cn);
	free(s->slot_node);
	free(s->host);
	free(s->user);
	free_secret(s->pass);
	free(s->pass_file);
	for (int i = 0; i < s->n_ep; i++)
		free(s->ep_host[i]);
	free(s->master_name);
	free(s->s_user);
	free_secret(s->s_pass);
	free(s->s_pass_file);
	free(s->prefix);
	tls_opt_free(&s->tls_redis);
	tls_opt_free(&s->tls_sentinel);
	free(s);
}

static int dup_str(char **dst, const char *src)
{
	if (!src) {
		*dst = NULL;
		return 0;
	}
	*dst = strdup(src);
	return *dst ? 0 : -ENOMEM;
}

static int check_auth(const struct kt_auth_cfg *a, const char *what, int line, char *err, size_t errlen)
{
	if (a->username && !a->password) {
		snprintf(err, errlen, "store (line %d): %s: username given without a password", line, what);
		return -EINVAL;
	}
	if (a->username && !valid_token(a->username, 255)) {
		snprintf(err, errlen, "store (line %d): %s: username must be 1..255 printable characters",
			 line, what);
		return -EINVAL;
	}
	if (a->password && (!*a->password || strlen(a->password) > 4096)) {
		snprintf(err, errlen, "store (line %d): %s: password must be 1..4096 bytes", line, what);
		return -EINVAL;
	}
	return 0;
}

/* The files are read again at every connect (renewed certificates are
 * picked up); this catches a wrong path or a bad PEM at start instead of as
 * an endless series of failed connects. A file at fault is reported at the
 * line of its own key, as the parser reports passwordFile. */
static int check_tls(const struct kt_store_cfg *cfg, const struct kt_tls_cfg *t, const char *what,
		     char *err, size_t errlen)
{
	struct kt_rconn_opts o = {
		.host = "localhost", .port = 1, .tls = true, .ca_file = t->ca_cert, .cert_file = t->cert,
		.key_file = t->key, .insecure_skip_verify = t->insecure_skip_verify,
	};
	char e[KT_ERR_LEN];
	const char *msg = e, *p, *bad = NULL, *key = NULL;
	int ret, line = 0;

	if (!t->enabled)
		return 0;
	ret = kt_rconn_tls_check(&o, &bad, e, sizeof(e));
	if (!ret)
		return 0;
	/* "TLS setup for localhost:1: cannot read ...": the placeholder peer goes */
	if (!strncmp(e, "TLS setup for ", 14) && (p = strstr(e, ": ")))
		msg = p + 2;
	else if (!strncmp(e, "TLS for ", 8) && (p = strstr(e, ": ")))
		msg = p + 2;
	if (bad && bad == t->ca_cert)
		key = "ca_cert_secret", line = t->ca_cert_line;
	else if (bad && bad == t->cert)
		key = "cert_secret", line = t->cert_line;
	else if (bad && bad == t->key)
		key = "key_secret", line = t->key_line;
	if (line > 0 && cfg->file)
		snprintf(err, errlen, "%s:%d: %s.%s: %s", cfg->file, line,
			 t->field ? t->field : what, key, msg);
	else
		snprintf(err, errlen, "store (line %d): %s: %s", cfg->line, what, msg);
	return ret;
}

static int tls_opt_dup(struct tls_opt *d, const struct kt_tls_cfg *t)
{
	d->on = t->enabled;
	d->skip_verify = t->insecure_skip_verify;
	return dup_str(&d->ca, t->ca_cert) || dup_str(&d->cert, t->cert) || dup_str(&d->key, t->key)
		       ? -ENOMEM
		       : 0;
}

int kt_store_open(struct kt_store **out, const struct kt_store_cfg *cfg, char *err, size_t errlen)
{
	struct kt_store *s = NULL;
	struct sigaction sa;
	const char *prefix;
	int ret, i;

	*out = NULL;
	if (cfg->kind != KT_STORE_REDIS) {
		snprintf(err, errlen, "store (line %d): not a redisStore", cfg->line);
		return -EINVAL;
	}
	prefix = cfg->key_prefix ? cfg->key_prefix : "kthrottle";
	if (!valid_token(prefix, KT_STORE_PREFIX_MAX)) {
		snprintf(err, errlen, "store (line %d): keyPrefix must be 1..%d printable characters without spaces",
			 cfg->line, KT_STORE_PREFIX_MAX);
		return -EINVAL;
	}
	if (cfg->db < 0) {
		snprintf(err, errlen, "store (line %d): db %d is negative", cfg->line, cfg->db);
		return -EINVAL;
	}
	ret = check_auth(&cfg->redis_auth, "redis_auth", cfg->line, err, errlen);
	if (ret)
		return ret;
	if (cfg->redis_mode == KT_REDIS_SINGLE) {
		if (!valid_host(cfg->host) || cfg->port < 1 || cfg->port > 65535) {
			snprintf(err, errlen, "store (line %d): url: host missing or port %d out of 1..65535",
				 cfg->line, cfg->port);
			return -EINVAL;
		}
	} else if (cfg->redis_mode == KT_REDIS_CLUSTER) {
		if (cfg->n_endpoints < 1 || cfg->n_endpoints > KT_MAX_ENDPOINTS) {
			snprintf(err, errlen, "store (line %d): cluster: %d seed addrs, need 1..%d", cfg->line,
				 cfg->n_endpoints, KT_MAX_ENDPOINTS);
			return -EINVAL;
		}
		for (i = 0; i < cfg->n_endpoints; i++) {
			if (!valid_host(cfg->endpoint_host[i]) || cfg->endpoint_port[i] < 1 ||
			    cfg->endpoint_port[i] > 65535) {
				snprintf(err, errlen, "store (line %d): cluster: addrs entry %d: bad host or port",
					 cfg->line, i + 1);
				return -EINVAL;
			}
		}
		if (cfg->db != 0) {
			snprintf(err, errlen, "store (line %d): cluster: db %d: Redis Cluster has only db 0",
				 cfg->line, cfg->db);
			return -EINVAL;
		}
	} else if (cfg->redis_mode == KT_REDIS_SENTINEL) {
		if (cfg->n_endpoints < 1 || cfg->n_endpoints > KT_MAX_ENDPOINTS) {
			snprintf(err, errlen, "store (line %d): sentinel: %d endpoints, need 1..%d", cfg->line,
				 cfg->n_endpoints, KT_MAX_ENDPOINTS);
			return -EINVAL;
		}
		for (i = 0; i < cfg->n_endpoints; i++) {
			if (!valid_host(cfg->endpoint_host[i]) || cfg->endpoint_port[i] < 1 ||
			    cfg->endpoint_port[i] > 65535) {
				snprintf(err, errlen, "store (line %d): sentinel: endpoint %d: bad host or port",
					 cfg->line, i + 1);
				return -EINVAL;
			}
		}
		if (!valid_token(cfg->master_name, 255)) {
			snprintf(err, errlen, "store (line %d): sentinel: master_name missing or not printable",
				 cfg->line);
			return -EINVAL;
		}
		ret = check_auth(&cfg->sentinel_auth, "sentinel_auth", cfg->line, err, errlen);
		if (ret)
			return ret;
		ret = check_tls(cfg, &cfg->sentinel_tls, "sentinel_tls", err, errlen);
		if (ret)
			return ret;
	} else {
		snprintf(err, errlen, "store (line %d): unknown redis mode %d", cfg->line, (int)cfg->redis_mode);
		return -EINVAL;
	}
	ret = check_tls(cfg, &cfg->redis_tls, "redis_tls", err, errlen);
	if (ret)
		return ret;

	s = calloc(1, sizeof(*s));
	if (!s)
		goto oom;
	s->mode = cfg->redis_mode;
	s->port = cfg->port;
	s->db = cfg->db;
	if (dup_str(&s->prefix, prefix) || dup_str(&s->user, cfg->redis_auth.username) ||
	    dup_str(&s->pass, cfg->redis_auth.password) ||
	    dup_str(&s->pass_file, cfg->redis_auth.password_file) ||
	    tls_opt_dup(&s->tls_redis, &cfg->redis_tls))
		goto oom;
	if (s->mode == KT_REDIS_SINGLE) {
		if (dup_str(&s->host, cfg->host))
			goto oom;
	} else {
		for (i = 0; i < cfg->n_endpoints; i++) {
			if (dup_str(&s->ep_host[i], cfg->endpoint_host[i]))
				goto oom;
			s->ep_port[i] = cfg->endpoint_port[i];
			s->n_ep = i + 1;
		}
	}
	s->cl_last = -1;
	if (s->mode == KT_REDIS_CLUSTER) {
		s->cn = calloc(CL_MAX_NODES, sizeof(*s->cn));
		s->slot_node = malloc(CL_SLOTS * sizeof(*s->slot_node));
		if (!s->cn || !s->slot_node)
			goto oom;
		for (i = 0; i < CL_SLOTS; i++)
			s->slot_node[i] = -1;
	} else if (s->mode == KT_REDIS_SENTINEL) {
		if (dup_str(&s->master_name, cfg->master_name) ||
		    dup_str(&s->s_user, cfg->sentinel_auth.username) ||
		    dup_str(&s->s_pass, cfg->sentinel_auth.password) ||
		    dup_str(&s->s_pass_file, cfg->sentinel_auth.password_file) ||
		    tls_opt_dup(&s->tls_sentinel, &cfg->sentinel_tls))
			goto oom;
	}
	s->rng = mono_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)s;
	if (!s->rng)
		s->rng = 1;
	/* TLS writes use write(2) (rconn.h): a reset peer must not kill the daemon */
	if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL)
		signal(SIGPIPE, SIG_IGN);
	*out = s;
	return 0;
oom:
	kt_store_close(s);
	snprintf(err, errlen, "store (line %d): out of memory", cfg->line);
	return -ENOMEM;
}

static int check_req(struct kt_store *s, const struct kt_pool_req *q, int idx, char *err, size_t errlen)
{
	if (!valid_limit(q->limit)) {
		seterr(s, err, errlen, "heartbeat: request %d: invalid limit name", idx);
		return -EINVAL;
	}
	if (q->n_members < 0 || q->n_members > KT_STORE_MAX_POOL || (q->n_members && !q->members)) {
		seterr(s, err, errlen, "heartbeat: limit %s: bad member count %d", q->limit, q->n_members);
		return -EINVAL;
	}
	if (q->stale_ms < 1 || q->stale_ms > KT_STORE_STALE_MAX_MS) {
		seterr(s, err, errlen, "heartbeat: limit %s: stale_ms %llu out of 1..%llu", q->limit,
		       (unsigned long long)q->stale_ms, (unsigned long long)KT_STORE_STALE_MAX_MS);
		return -EINVAL;
	}
	if (q->hold_ms > KT_STORE_STALE_MAX_MS || !isfinite(q->fallback_rate) || q->fallback_rate < 0 ||
	    q->fallback_rate > 1e15) {
		seterr(s, err, errlen, "heartbeat: limit %s: hold %llu ms or fallback rate %g out of range",
		       q->limit, (unsigned long long)q->hold_ms, q->fallback_rate);
		return -EINVAL;
	}
	if (!isfinite(q->pool_rate) || q->pool_rate < 0 || q->pool_rate > 1e15 || !isfinite(q->floor_rate) ||
	    q->floor_rate < 0 || q->floor_rate > 1e15 || q->recompute_ms > KT_STORE_STALE_MAX_MS ||
	    (q->pool_rate > 0 && q->n_members > 0 && !q->grants)) {
		seterr(s, err, errlen, "heartbeat: limit %s: pool rate %g, floor %g, recompute %llu ms or grants "
		       "out of range", q->limit, q->pool_rate, q->floor_rate,
		       (unsigned long long)q->recompute_ms);
		return -EINVAL;
	}
	if (q->save_ramp >= 0 &&
	    (!isfinite(q->save_ramp) || q->save_ramp > 1e15 || q->ramp_ttl_ms < 1 ||
	     q->ramp_ttl_ms > KT_STORE_STALE_MAX_MS * 365)) {
		seterr(s, err, errlen, "heartbeat: limit %s: ramp %g or ttl %llu ms out of range", q->limit,
		       q->save_ramp, (unsigned long long)q->ramp_ttl_ms);
		return -EINVAL;
	}
	for (int i = 0; i < q->n_members; i++) {
		const struct kt_pool_member *m = &q->members[i];

		if (!valid_token(m->id, KT_STORE_ID_MAX)) {
			seterr(s, err, errlen, "heartbeat: limit %s: member %d: id must be 1..%d printable characters",
			       q->limit, i, KT_STORE_ID_MAX);
			return -EINVAL;
		}
		if (m->reported_size < 0 || m->reported_size > KT_STORE_MAX_POOL) {
			seterr(s, err, errlen, "heartbeat: limit %s: member %s: reported size %d out of 0..%d",
			       q->limit, m->id, m->reported_size, KT_STORE_MAX_POOL);
			return -EINVAL;
		}
		if (q->pool_rate > 0 && (!isfinite(m->demand) || m->demand < 0 || m->demand > 1e15)) {
			seterr(s, err, errlen, "heartbeat: limit %s: member %s: demand %g out of 0..1e15",
			       q->limit, m->id, m->demand);
			return -EINVAL;
		}
	}
	return 0;
}

/* A rate the script formatted with %.17g. */
static bool parse_rate(const redisReply *r, double *out)
{
	char *end;
	double v;

	if (r->type != REDIS_REPLY_STRING || r->len < 1 || r->len > 40)
		return false;
	errno = 0;
	v = strtod(r->str, &end);
	if (errno || end != r->str + r->len || !isfinite(v) || v < 0 || v > 1e15)
		return false;
	*out = v;
	return true;
}

/* The demand part of an answer: granted, level, one grant per member. The
 * grants are written only once all of them parsed. */
static const char *parse_share(const redisReply *e, const struct kt_pool_req *q, struct kt_pool_answer *a)
{
	const redisReply *g = e->element[6];
	double lvl;
	char *end;

	if (!parse_rate(e->element[4], &a->granted))
		return "granted rate not a finite number >= 0";
	if (e->element[5]->type != REDIS_REPLY_STRING || e->element[5]->len > 40)
		return "level not a number";
	errno = 0;
	lvl = strtod(e->element[5]->str, &end);
	if (errno || end != e->element[5]->str + e->element[5]->len || !isfinite(lvl) ||
	    (lvl < 0 && lvl != -1) || lvl > 1e15)
		return "level not a number";
	a->level = lvl < 0 ? INFINITY : lvl;
	if (g->type != REDIS_REPLY_ARRAY || g->elements != (size_t)q->n_members)
		return "grants not an array of one per member";
	for (size_t j = 0; j < g->elements; j++) {
		double v;

		if (!parse_rate(g->element[j], &v))
			return "grant not a finite number >= 0";
	}
	for (size_t j = 0; j < g->elements; j++)
		parse_rate(g->element[j], &q->grants[j]);
	return NULL;
}

static int parse_answers(struct kt_store *s, const redisReply *r, const struct kt_pool_req *reqs, int n,
			 struct kt_pool_answer *ans, char *err, size_t errlen)
{
	const char *why = NULL;
	int i;

	if (r->type != REDIS_REPLY_ARRAY || r->elements != (size_t)n) {
		seterr(s, err, errlen, "redis %s:%d: heartbeat: malformed reply: expected %d answers",
		       s->cur_host, s->cur_port, n);
		if (r->type != REDIS_REPLY_ARRAY)
			s->hint = KT_SERR_WRONGTYPE;
		return -EPROTO;
	}
	for (i = 0; i < n && !why; i++) {
		const redisReply *e = r->element[i];
		const struct kt_pool_req *q = &reqs[i];
		size_t want = q->pool_rate > 0 ? 7 : 4;
		struct kt_pool_answer a = ans[i];

		if (e->type != REDIS_REPLY_ARRAY || e->elements != want) {
			why = want == 4 ? "not an array of 4" : "not an array of 7";
			if (e->type != REDIS_REPLY_ARRAY)
				s->hint = KT_SERR_WRONGTYPE;
		} else if (!int_in(e->element[0], 0, 1) || !int_in(e->element[1], 0, KT_STORE_MAX_POOL) ||
			   !int_in(e->element[2], 0, KT_STORE_MAX_POOL)) {
			why = "field not an integer in range";
		} else {
			a.agree = (int)e->element[0]->integer;
			a.size = (int)e->element[1]->integer;
			a.live = (int)e->element[2]->integer;
			if (a.size < a.live)
				why = "size below live count";
			else if (a.agree && (a.size != a.live || a.live < 1))
				why = "AGREE on a size other than the live count";
			else if (reqs[i].n_members > 0 && a.live < 1)
				why = "no live member right after a heartbeat";
			else if (!parse_rate(e->element[3], &a.reserved))
				why = "reserved rate not a finite number >= 0";
			else if (want == 7)
				why = parse_share(e, q, &a);
			if (!why) {
				a.status = 0;
				ans[i] = a;
			}
		}
	}
	if (why) {
		seterr(s, err, errlen, "redis %s:%d: heartbeat: malformed reply for limit %s: %s",
		       s->cur_host, s->cur_port, reqs[i - 1].limit, why);
		return -EPROTO;
	}
	return 0;
}

/* EVALSHA's arguments for reqs (argv[0..1] left for the command and sha). */
static int build_hb(struct kt_store *s, const struct kt_pool_req *reqs, int n, struct args *a)
{
	int i, j, cap = 3;

	for (i = 0; i < n; i++)
		cap += N_KEYS + 9 + 3 * reqs[i].n_members;
	if (args_init(a, cap))
		return -ENOMEM;
	a->n = 2; /* EVALSHA sha */
	arg_fmt(a, "%d", N_KEYS * n);
	for (i = 0; i < n; i++)
		arg_keys(a, s->prefix, reqs[i].limit);
	for (i = 0; i < n; i++) {
		const struct kt_pool_req *q = &reqs[i];

		arg_fmt(a, "%llu", (unsigned long long)q->stale_ms);
		arg_fmt(a, "%d", q->n_members);
		if (q->save_ramp >= 0) {
			arg_fmt(a, "%.17g", q->save_ramp);
			arg_fmt(a, "%llu", (unsigned long long)q->ramp_ttl_ms);
		} else {
			arg_ref(a, "");
			arg_ref(a, "0");
		}
		arg_fmt(a, "%llu", (unsigned long long)q->hold_ms);
		if (q->fallback_rate > 0)
			arg_fmt(a, "%.17g", q->fallback_rate);
		else
			arg_ref(a, "0");
		if (q->pool_rate > 0) {
			arg_fmt(a, "%.17g", q->pool_rate);
			arg_fmt(a, "%.17g", q->floor_rate);
			arg_fmt(a, "%llu", (unsigned long long)q->recompute_ms);
		} else {
			arg_ref(a, "0");
			arg_ref(a, "0");
			arg_ref(a, "0");
		}
		for (j = 0; j < q->n_members; j++) {
			arg_ref(a, q->members[j].id);
			arg_fmt(a, "%d", q->members[j].reported_size);
			if (q->pool_rate > 0)
				arg_fmt(a, "%.17g", q->members[j].demand);
		}
	}
	return a->oom ? -ENOMEM : 0;
}

/* Cluster: limits grouped by slot, one EVALSHA per slot (a script may only
 * touch one slot), the groups of one master pipelined. */
static int cl_heartbeat(struct kt_store *s, const struct kt_pool_req *reqs, int n,
			struct kt_pool_answer *ans, char *err, size_t errlen)
{
	struct kt_pool_req *sub = calloc((size_t)n, sizeof(*sub));
	struct kt_pool_answer *sa = calloc((size_t)n, sizeof(*sa));
	struct cl_job *jobs = calloc((size_t)n, sizeof(*jobs));
	struct args *as = calloc((size_t)n, sizeof(*as));
	int *ord = calloc((size_t)n, sizeof(*ord)), *slot = calloc((size_t)n, sizeof(*slot));
	int *first = calloc((size_t)n + 1, sizeof(*first));
	int i, k, g, nj = 0, ret = 0, failed = 0, first_fail = 0;
	char e[KT_ERR_LEN];

	if (!sub || !sa || !jobs || !as || !ord || !slot || !first) {
		ret = -ENOMEM;
		goto out;
	}
	for (i = 0; i < n; i++) {
		slot[i] = limit_slot(s, reqs[i].limit);
		/* insertion sort by slot, stable: n <= KT_MAX_LIMITS */
		for (k = i; k > 0 && slot[ord[k - 1]] > slot[i]; k--)
			ord[k] = ord[k - 1];
		ord[k] = i;
	}
	for (i = 0; i < n; i++) {
		sub[i] = reqs[ord[i]];
		sa[i] = ans[ord[i]];
		if (i == 0 || slot[ord[i]] != slot[ord[i - 1]]) {
			first[nj] = i;
			jobs[nj] = (struct cl_job){ .slot = slot[ord[i]], .script = SCRIPT_HB, .a = &as[nj],
						    .ask = -1 };
			nj++;
		}
	}
	first[nj] = n;
	for (g = 0; g < nj; g++)
		if ((ret = build_hb(s, sub + first[g], first[g + 1] - first[g], &as[g])))
			goto out;
	ret = cl_run(s, jobs, nj, "heartbeat", err, errlen);
	if (ret == -ENOMEM)
		goto out;
	/* each slot stands alone: a master down (or a bad reply from one)
	 * fails only the limits it serves */
	for (g = 0; g < nj; g++) {
		int r = jobs[g].rep ? cl_check(s, &jobs[g], "heartbeat", e, sizeof(e)) : (ret ? ret : -EIO);

		if (jobs[g].rep && !r)
			r = parse_answers(s, jobs[g].rep, sub + first[g], first[g + 1] - first[g], sa + first[g],
					  e, sizeof(e));
		if (r) {
			if (!jobs[g].rep)
				snprintf(e, sizeof(e), "%s", s->last_err);
			if (!failed++)
				snprintf(err, errlen, "%s", e);
			first_fail = first_fail ? first_fail : r;
		}
		for (i = first[g]; i < first[g + 1]; i++)
			sa[i].status = r;
	}
	for (i = 0; i < n; i++)
		if (!sa[i].status)
			ans[ord[i]] = sa[i];
		else
			ans[ord[i]].status = sa[i].status;
	ret = !failed ? 0 : failed == nj ? first_fail : KT_STORE_PARTIAL;
out:
	if (ret == -ENOMEM)
		seterr(s, err, errlen, "heartbeat: out of memory");
	if (jobs)
		cl_jobs_free(jobs, nj);
	for (g = 0; as && g < nj; g++)
		args_free(&as[g]);
	free(sub);
	free(sa);
	free(jobs);
	free(as);
	free(ord);
	free(slot);
	free(first);
	return ret;
}

static int do_heartbeat_many(struct kt_store *s, const struct kt_pool_req *reqs, int n,
			    struct kt_pool_answer *ans, char *err, size_t errlen)
{
	struct args a = { 0 };
	redisReply *r = NULL;
	int i, ret;

	if (n < 1 || n > KT_MAX_LIMITS || !reqs || !ans) {
		seterr(s, err, errlen, "heartbeat: %d limits, need 1..%d", n, KT_MAX_LIMITS);
		return -EINVAL;
	}
	for (i = 0; i < n; i++) {
		ret = check_req(s, &reqs[i], i, err, errlen);
		if (ret)
			return ret;
	}
	ret = begin(s, err, errlen);
	if (ret)
		return ret;
	if (is_cluster(s))
		return cl_heartbeat(s, reqs, n, ans, err, errlen);
	ret = build_hb(s, reqs, n, &a);
	if (ret)
		goto oom;
	ret = run_script(s, SCRIPT_HB, &a, "heartbeat", &r, err, errlen);
	if (!ret)
		ret = parse_answers(s, r, reqs, n, ans, err, errlen);
	goto out;
oom:
	seterr(s, err, errlen, "heartbeat: out of memory");
	ret = -ENOMEM;
out:
	if (r)
		freeReplyObject(r);
	args_free(&a);
	return ret;
}

int kt_store_heartbeat(struct kt_store *s, const char *limit, const struct kt_pool_member *m, int n,
		       uint64_t stale_ms, struct kt_pool_answer *ans, char *err, size_t errlen)
{
	struct kt_pool_req q = {
		.limit = limit, .members = m, .n_members = n, .stale_ms = stale_ms, .save_ramp = -1,
	};

	return kt_store_heartbeat_many(s, &q, 1, ans, err, errlen);
}

/* One script on one limit's keys: routed to the limit's master in cluster
 * mode. *out: the reply (never an error reply) when 0 is returned. */
static int limit_script(struct kt_store *s, int script, const char *limit, struct args *a,
			const char *what, redisReply **out, char *err, size_t errlen)
{
	struct cl_job jb = { .slot = limit_slot(s, limit), .script = script, .a = a, .ask = -1 };
	int ret;

	*out = NULL;
	if (!is_cluster(s))
		return run_script(s, script, a, what, out, err, errlen);
	ret = cl_run(s, &jb, 1, what, err, errlen);
	if (!ret)
		ret = cl_check(s, &jb, what, err, errlen);
	if (ret && jb.rep)
		freeReplyObject(jb.rep);
	else
		*out = jb.rep;
	return ret;
}

static int do_leave(struct kt_store *s, const char *limit, const char *const *ids, int n, char *err,
		   size_t errlen)
{
	struct args a = { 0 };
	redisReply *r = NULL;
	int i, ret;

	if (!valid_limit(limit) || n < 0 || n > KT_STORE_MAX_POOL || (n && !ids)) {
		seterr(s, err, errlen, "leave: invalid limit name or %d ids", n);
		return -EINVAL;
	}
	for (i = 0; i < n; i++) {
		if (!valid_token(ids[i], KT_STORE_ID_MAX)) {
			seterr(s, err, errlen, "leave: limit %s: id %d must be 1..%d printable characters",
			       limit, i, KT_STORE_ID_MAX);
			return -EINVAL;
		}
	}
	if (n == 0)
		return 0;
	ret = begin(s, err, errlen);
	if (ret)
		return ret;
	ret = args_init(&a, 3 + N_KEYS + n);
	if (ret)
		goto oom;
	a.n = 2;
	arg_fmt(&a, "%d", N_KEYS);
	arg_keys(&a, s->prefix, limit);
	for (i = 0; i < n; i++)
		arg_ref(&a, ids[i]);
	if (a.oom)
		goto oom;
	ret = limit_script(s, SCRIPT_LEAVE, limit, &a, "leave", &r, err, errlen);
	if (!ret && !int_in(r, 0, n)) {
		seterr(s, err, errlen, "redis %s:%d: leave: malformed reply", s->cur_host, s->cur_port);
		ret = -EPROTO;
	}
	goto out;
oom:
	seterr(s, err, errlen, "leave: out of memory");
	ret = -ENOMEM;
out:
	if (r)
		freeReplyObject(r);
	args_free(&a);
	return ret;
}

/* Every microsecond figure the permit script can answer is below this (see
 * permit_script); now is below 2^53. */
#define PERMIT_MAX_US (1ULL << 54)

/* The permit script's reply, checked against the rule it follows: the
 * grants come first and are every apart (after a first one that may be due
 * at once), the refusals that follow all wait the same, and ahead_us is the
 * last grant's wait. out and ans are written only when all of it holds. */
static bool parse_permits(const redisReply *r, uint64_t every_us, int max_reserved, int n,
			  struct kt_permit *out, struct kt_permit_answer *ans)
{
	uint64_t max_grant_wait = ((uint64_t)max_reserved + 1) * every_us, now, ahead, w, prev = 0;
	int granted = 0;

	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 + 2 * (size_t)n)
		return false;
	for (size_t i = 0; i < r->elements; i++)
		if (!int_in(r->element[i], 0, (long long)PERMIT_MAX_US - 1))
			return false;
	now = (uint64_t)r->element[0]->integer;
	ahead = (uint64_t)r->element[1]->integer;
	if (now == 0 || now >= PERMIT_MAX_US / 2)
		return false;
	for (int i = 0; i < n; i++) {
		long long g = r->element[2 + 2 * i]->integer;

		w = (uint64_t)r->element[3 + 2 * i]->integer;
		if (g == 1) {
			if (granted < i || w > max_grant_wait || (i > 0 && w != prev + every_us))
				return false;
			granted++;
		} else if (g != 0 || w == 0 || (i > granted && w != prev)) {
			return false;
		}
		prev = w;
	}
	if (granted && ahead != (uint64_t)r->element[1 + 2 * granted]->integer)
		return false;
	for (int i = 0; i < n; i++)
		out[i] = (struct kt_permit){ .granted = (int)r->element[2 + 2 * i]->integer,
					     .wait_us = (uint64_t)r->element[3 + 2 * i]->integer };
	ans->now_us = now;
	ans->ahead_us = ahead;
	return true;
}

static int do_permits(struct kt_store *s, const char *limit, uint64_t every_us, int max_reserved, int n,
		     struct kt_permit *out, struct kt_permit_answer *ans, char *err, size_t errlen)
{
	struct args a = { 0 };
	redisReply *r = NULL;
	int ret;

	if (!valid_limit(limit) || every_us < 1000 || every_us > 86400ULL * 1000000 || max_reserved < 0 ||
	    max_reserved > 100000 || n < 1 || n > KT_STORE_MAX_PERMITS || !out || !ans) {
		seterr(s, err, errlen,
		       "permits: invalid limit name, every %llu us (1000..86400e6), max reserved %d "
		       "(0..100000) or %d permits (1..%d)",
		       (unsigned long long)every_us, max_reserved, n, KT_STORE_MAX_PERMITS);
		return -EINVAL;
	}
	ret = begin(s, err, errlen);
	if (ret)
		return ret;
	ret = args_init(&a, 7); /* EVALSHA sha 1 key every max_reserved n */
	if (ret)
		goto oom;
	a.n = 2;
	arg_ref(&a, "1");
	arg_fmt(&a, "%s:strict:{%s}", s->prefix, limit);
	arg_fmt(&a, "%llu", (unsigned long long)every_us);
	arg_fmt(&a, "%d", max_reserved);
	arg_fmt(&a, "%d", n);
	if (a.oom)
		goto oom;
	ret = limit_script(s, SCRIPT_PERMIT, limit, &a, "permits", &r, err, errlen);
	if (!ret && !parse_permits(r, every_us, max_reserved, n, out, ans)) {
		seterr(s, err, errlen, "redis %s:%d: permits: malformed reply", s->cur_host, s->cur_port);
		ret = -EPROTO;
	}
	goto out;
oom:
	seterr(s, err, errlen, "permits: out of memory");
	ret = -ENOMEM;
out:
	if (r)
		freeReplyObject(r);
	args_free(&a);
	return ret;
}

/* "ms-seq", as Redis writes stream ids */
static bool stream_id_ok(const char *p, size_t n)
{
	size_t i = 0, d;

	if (n == 0 || n >= KT_STORE_TAG_ID_MAX)
		return false;
	for (d = 0; i < n && p[i] >= '0' && p[i] <= '9'; i++)
		d++;
	if (!d || i >= n || p[i++] != '-')
		return false;
	for (d = 0; i < n && p[i] >= '0' && p[i] <= '9'; i++)
		d++;
	return d && i == n;
}

static int do_tag_exchange(struct kt_store *s, const char *limit, const char *node, uint64_t keep_ms,
			  const char *const *chunks, const size_t *chunk_lens, int n_chunks,
			  char last_id[KT_STORE_TAG_ID_MAX], kt_store_tag_fn fn, void *ctx, int *more,
			  char *err, size_t errlen)
{
	struct args a = { 0 };
	redisReply *r = NULL;
	int ret, i;

	if (!valid_limit(limit) || !node || !valid_token(node, KT_STORE_ID_MAX) || keep_ms < 1000 ||
	    keep_ms > 86400000ULL || n_chunks < 0 || n_chunks > KT_STORE_TAG_MAX_CHUNKS ||
	    (n_chunks && (!chunks || !chunk_lens)) || !last_id || !fn || !more ||
	    (last_id[0] && !stream_id_ok(last_id, strnlen(last_id, KT_STORE_TAG_ID_MAX)))) {
		seterr(s, err, errlen,
		       "tag exchange: invalid limit name, node, retention %llu ms (1000..86400000), "
		       "%d chunks (0..%d) or last id",
		       (unsigned long long)keep_ms, n_chunks, KT_STORE_TAG_MAX_CHUNKS);
		return -EINVAL;
	}
	for (i = 0; i < n_chunks; i++) {
		if (!chunks[i] || chunk_lens[i] == 0 || chunk_lens[i] > KT_STORE_TAG_CHUNK_MAX) {
			seterr(s, err, errlen, "tag exchange: chunk %d: 1..%d bytes", i,
			       KT_STORE_TAG_CHUNK_MAX);
			return -EINVAL;
		}
	}
	*more = 0;
	ret = begin(s, err, errlen);
	if (ret)
		return ret;
	ret = args_init(&a, 8 + n_chunks); /* EVALSHA sha 1 key node last keep count chunks */
	if (ret)
		goto oom;
	a.n = 2;
	arg_ref(&a, "1");
	arg_fmt(&a, "%s:tags:{%s}", s->prefix, limit);
	arg_ref(&a, node);
	arg_ref(&a, last_id);
	arg_fmt(&a, "%llu", (unsigned long long)keep_ms);
	arg_fmt(&a, "%d", KT_STORE_TAG_READ_MAX);
	if (a.oom)
		goto oom;
	for (i = 0; i < n_chunks; i++) {
		a.v[a.n] = chunks[i];
		a.len[a.n++] = chunk_lens[i];
	}
	ret = limit_script(s, SCRIPT_TAGS, limit, &a, "tag exchange", &r, err, errlen);
	if (ret)
		goto out;
	if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
	    r->elements > 2 + (size_t)KT_STORE_TAG_READ_MAX ||
	    r->element[0]->type != REDIS_REPLY_STRING ||
	    !stream_id_ok(r->element[0]->str, r->element[0]->len) || !int_in(r->element[1], 0, 1)) {
		seterr(s, err, errlen, "redis %s:%d: tag exchange: malformed reply", s->cur_host, s->cur_port);
		ret = -EPROTO;
		goto out;
	}
	for (i = 2; i < (int)r->elements; i++) {
		if (r->element[i]->type != REDIS_REPLY_STRING) {
			seterr(s, err, errlen, "redis %s:%d: tag exchange: entry %d is not a string",
			       s->cur_host, s->cur_port, i - 2);
			ret = -EPROTO;
			goto out;
		}
	}
	for (i = 2; i < (int)r->elements; i++)
		fn(ctx, r->element[i]->str, r->element[i]->len);
	memcpy(last_id, r->element[0]->str, r->element[0]->len);
	last_id[r->element[0]->len] = 0;
	*more = (int)r->element[1]->integer;
	goto out;
oom:
	seterr(s, err, errlen, "tag exchange: out of memory");
	ret = -ENOMEM;
out:
	if (r)
		freeReplyObject(r);
	args_free(&a);
	return ret;
}

/* One plain command with a classified reply; *out is never an error reply. */
static int simple(struct kt_store *s, int argc, const char **argv, const char *what, redisReply **out,
		  char *err, size_t errlen)
{
	size_t len[8];
	int ret;

	for (int i = 0; i < argc; i++)
		len[i] = strlen(argv[i]);
	ret = roundtrip(s, argc, argv, len, what, out, err, errlen);
	if (ret)
		return ret;
	if ((*out)->type == REDIS_REPLY_ERROR) {
		ret = error_reply(s, *out, what, err, errlen);
		freeReplyObject(*out);
		*out = NULL;
	}
	return ret;
}

static int do_save_ramp(struct kt_store *s, const char *limit, double rate, uint64_t ttl_ms, char *err,
		       size_t errlen)
{
	char key[KT_STORE_PREFIX_MAX + KT_NAME_LEN + 16], val[32], ttl[24];
	const char *argv[5] = { "SET", key, val, "PX", ttl };
	redisReply *r = NULL;
	int ret;

	if (!valid_limit(limit) || !isfinite(rate) || rate < 0 || rate > 1e15 || ttl_ms < 1 ||
	    ttl_ms > KT_STORE_STALE_MAX_MS * 365) {
		seterr(s, err, errlen, "save ramp: invalid limit name, rate %g or ttl %llu ms", rate,
		       (unsigned long long)ttl_ms);
		return -EINVAL;
	}
	ret = begin(s, err, errlen);
	if (ret)
		return ret;
	snprintf(key, sizeof(key), "%s:pool:{%s}:ramp", s->prefix, limit);
	snprintf(val, sizeof(val), "%.17g", rate);
	snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)ttl_ms);
	ret = is_cluster(s) ? cl_simple(s, key_slot(key), 5, argv, "save ramp", &r, err, errlen)
			    : simple(s, 5, argv, "save ramp", &r, err, errlen);
	if (!ret && !is_ok(r)) {
		seterr(s, err, errlen, "redis %s:%d: save ramp: malformed reply to SET", s->cur_host,
		       s->cur_port);
		ret = -EPROTO;
	}
	if (r)
		freeReplyObject(r);
	return ret;
}

static int do_load_ramp(struct kt_store *s, const char *limit, double *rate, char *err, size_t errlen)
{
	char key[KT_STORE_PREFIX_MAX + KT_NAME_LEN + 16], *end;
	const char *argv[2] = { "GET", key };
	redisReply *r = NULL;
	double v;
	int ret;

	*rate = -1;
	if (!valid_limit(limit)) {
		seterr(s, err, errlen, "load ramp: invalid limit name");
		return -EINVAL;
	}
	ret = begin(s, err, errlen);
	if (ret)
		return ret;
	snprintf(key, sizeof(key), "%s:pool:{%s}:ramp", s->prefix, limit);
	ret = is_cluster(s) ? cl_simple(s, key_slot(key), 2, argv, "load ramp", &r, err, errlen)
			    : simple(s, 2, argv, "load ramp", &r, err, errlen);
	if (ret)
		return ret;
	if (r->type == REDIS_REPLY_NIL)
		goto out;
	ret = -EPROTO;
	if (r->type != REDIS_REPLY_STRING || r->len == 0 || r->len > 31 || strlen(r->str) != r->len)
		goto bad;
	errno = 0;
	v = strtod(r->str, &end);
	if (errno || *end || !isfinite(v) || v < 0 || v > 1e15)
		goto bad;
	*rate = v;
	ret = 0;
	goto out;
bad:
	seterr(s, err, errlen, "redis %s:%d: load ramp: malformed value in %s", s->cur_host, s->cur_port,
	       key);
out:
	freeReplyObject(r);
	return ret;
}

/* Cluster: a fresh slot map, then PING to every master that serves slots
 * (pipelined per master like any call). */
static int cl_ping(struct kt_store *s, char *err, size_t errlen)
{
	static const char *argv[1] = { "PING" };
	struct args a[CL_MAX_NODES];
	struct cl_job jobs[CL_MAX_NODES];
	int nj = 0, ret, sl;

	s->map_stale = true;
	ret = cl_refresh(s, err, errlen);
	if (ret)
		return cl_state(s, ret, false);
	for (int m = 0; !ret && m < s->n_cn; m++) {
		for (sl = 0; sl < CL_SLOTS && s->slot_node[sl] != m; sl++)
			;
		if (sl == CL_SLOTS)
			continue;
		memset(&a[nj], 0, sizeof(a[nj]));
		a[nj].n = 1;
		a[nj].v = argv;
		jobs[nj] = (struct cl_job){ .slot = sl, .script = -1, .a = &a[nj], .ask = -1 };
		nj++;
	}
	if (!ret)
		ret = cl_run(s, jobs, nj, "ping", err, errlen);
	for (int j = 0; !ret && j < nj; j++) {
		ret = cl_check(s, &jobs[j], "ping", err, errlen);
		if (!ret && !(jobs[j].rep->type == REDIS_REPLY_STATUS && strcmp(jobs[j].rep->str, "PONG") == 0)) {
			seterr(s, err, errlen, "redis %s:%d: ping: malformed reply", s->cur_host, s->cur_port);
			ret = -EPROTO;
		}
	}
	cl_jobs_free(jobs, nj);
	return ret;
}

static int do_ping(struct kt_store *s, char *err, size_t errlen)
{
	const char *argv[1] = { "PING" };
	redisReply *r = NULL;
	int ret;

	ret = begin(s, err, errlen);
	if (ret)
		return ret;
	if (is_cluster(s))
		return cl_ping(s, err, errlen);
	ret = simple(s, 1, argv, "ping", &r, err, errlen);
	if (!ret && !(r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0)) {
		seterr(s, err, errlen, "redis %s:%d: ping: malformed reply", s->cur_host, s->cur_port);
		ret = -EPROTO;
	}
	if (r)
		freeReplyObject(r);
	return ret;
}

enum kt_store_state kt_store_state(const struct kt_store *s, uint64_t *since_ns, uint64_t *next_retry_ns)
{
	if (since_ns)
		*since_ns = s->state == KT_STORE_IDLE ? 0 : s->since_ns;
	if (next_retry_ns)
		*next_retry_ns = s->state == KT_STORE_DOWN ? s->next_retry_ns : 0;
	return s->state;
}

int kt_store_connected(const struct kt_store *s)
{
	for (int i = 0; is_cluster(s) && i < s->n_cn; i++)
		if (s->cn[i].c)
			return 1;
	return s->c != NULL;
}

const char *kt_store_state_name(enum kt_store_state st)
{
	switch (st) {
	case KT_STORE_IDLE:
		return "idle";
	case KT_STORE_UP:
		return "up";
	case KT_STORE_DOWN:
		return "down";
	case KT_STORE_FAILING:
		return "failing";
	}
	return "?";
}

const char *kt_store_endpoint(const struct kt_store *s, char *buf, size_t len)
{
	if (is_cluster(s) && s->cl_last >= 0 && s->cn[s->cl_last].c)
		snprintf(buf, len, "%s:%d", s->cn[s->cl_last].host, s->cn[s->cl_last].port);
	else if (s->c)
		snprintf(buf, len, "%s:%d", s->cur_host, s->cur_port);
	else if (len)
		buf[0] = 0;
	return buf;
}

const char *kt_store_last_error(const struct kt_store *s)
{
	return s->last_err;
}

void kt_store_get_stats(const struct kt_store *s, struct kt_store_stats *st)
{
	*st = s->st;
}

/* ---- errors by kind; the public calls ---- */

static enum kt_store_err_kind kind_of(const struct kt_store *s, int ret)
{
	if (strstr(s->last_err, "oversized"))
		return KT_SERR_OVERSIZED; /* rconn's bound, whatever errno carried it */
	if (s->hint)
		return s->hint;
	if (ret == -EACCES)
		return KT_SERR_AUTH;
	if (strstr(s->last_err, "TLS"))
		return KT_SERR_TLS;
	switch (ret) {
	case -ETIMEDOUT:
		return KT_SERR_TIMEOUT;
	case -EMSGSIZE:
		return KT_SERR_OVERSIZED;
	case -EPROTO:
		return KT_SERR_PROTOCOL;
	case -EIO:
	case -EROFS:
		return KT_SERR_ERR;
	default:
		return KT_SERR_CONNECT;
	}
}

/* Every public call ends here. Only an answered heartbeat ends an episode
 * and makes the store UP; a connection that answers with errors is FAILING. */
static int track(struct kt_store *s, int ret, bool heartbeat)
{
	struct kt_store_errors *e = &s->errs;
	uint64_t now = mono_ns();
	enum kt_store_err_kind k;

	if (ret == 0) {
		if (heartbeat) {
			e->since_ns = 0;
			e->episode_kinds = 0;
			if (s->state != KT_STORE_UP) {
				s->state = KT_STORE_UP;
				s->since_ns = now;
			}
		}
		return ret;
	}
	/* backing off, a caller's mistake, or out of memory: nothing new was asked */
	if (ret == -EAGAIN || ret == -EINVAL || ret == -ENOMEM)
		return ret;
	k = kind_of(s, ret);
	e->kind = k;
	snprintf(e->text, sizeof(e->text), "%s", s->last_err);
	e->count[k]++;
	e->last_ns = now;
	if (!e->since_ns)
		e->since_ns = now;
	e->episode_kinds |= 1u << k;
	if (ret < 0 && (s->state == KT_STORE_UP || s->state == KT_STORE_IDLE)) {
		s->state = KT_STORE_FAILING;
		s->since_ns = now;
	}
	return ret;
}

int kt_store_heartbeat_many(struct kt_store *s, const struct kt_pool_req *reqs, int n,
			    struct kt_pool_answer *ans, char *err, size_t errlen)
{
	s->hint = KT_SERR_NONE;
	return track(s, do_heartbeat_many(s, reqs, n, ans, err, errlen), true);
}

int kt_store_leave(struct kt_store *s, const char *limit, const char *const *ids, int n, char *err,
		   size_t errlen)
{
	s->hint = KT_SERR_NONE;
	return track(s, do_leave(s, limit, ids, n, err, errlen), false);
}

int kt_store_save_ramp(struct kt_store *s, const char *limit, double rate, uint64_t ttl_ms, char *err,
		       size_t errlen)
{
	s->hint = KT_SERR_NONE;
	return track(s, do_save_ramp(s, limit, rate, ttl_ms, err, errlen), false);
}

int kt_store_load_ramp(struct kt_store *s, const char *limit, double *rate, char *err, size_t errlen)
{
	s->hint = KT_SERR_NONE;
	return track(s, do_load_ramp(s, limit, rate, err, errlen), false);
}

int kt_store_permits(struct kt_store *s, const char *limit, uint64_t every_us, int max_reserved, int n,
		     struct kt_permit *out, struct kt_permit_answer *ans, char *err, size_t errlen)
{
	s->hint = KT_SERR_NONE;
	return track(s, do_permits(s, limit, every_us, max_reserved, n, out, ans, err, errlen), false);
}

int kt_store_tag_exchange(struct kt_store *s, const char *limit, const char *node, uint64_t keep_ms,
			  const char *const *chunks, const size_t *chunk_lens, int n_chunks,
			  char last_id[KT_STORE_TAG_ID_MAX], kt_store_tag_fn fn, void *ctx, int *more,
			  char *err, size_t errlen)
{
	s->hint = KT_SERR_NONE;
	return track(s, do_tag_exchange(s, limit, node, keep_ms, chunks, chunk_lens, n_chunks, last_id, fn,
					ctx, more, err, errlen),
		     false);
}

int kt_store_ping(struct kt_store *s, char *err, size_t errlen)
{
	s->hint = KT_SERR_NONE;
	return track(s, do_ping(s, err, errlen), false);
}

void kt_store_get_errors(const struct kt_store *s, struct kt_store_errors *e)
{
	*e = s->errs;
}

const char *kt_store_err_kind_name(enum kt_store_err_kind k)
{
	static const char *const names[KT_SERR_KINDS] = {
		"none", "connect", "auth", "tls", "timeout", "protocol", "wrongtype", "err", "noscript",
		"oversized",
	};

	return k >= 0 && k < KT_SERR_KINDS ? names[k] : "?";
}
