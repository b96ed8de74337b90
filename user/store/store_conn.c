/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What the Redis store's transports share (store_int.h): messages with
 * passwords scrubbed, back-off, step deadlines, dialling a server, pipelines,
 * the setup of a master connection, argument vectors. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "store/store_int.h"

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

void rs_seterr(struct kt_store *s, char *err, size_t errlen, const char *fmt, ...)
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
const char *rs_reply_text(const redisReply *r, char *buf, size_t len)
{
	size_t i, n = r->str ? r->len : 0;

	if (n >= len)
		n = len - 1;
	for (i = 0; i < n; i++)
		buf[i] = (r->str[i] >= 0x20 && r->str[i] < 0x7f) ? r->str[i] : '?';
	buf[n] = 0;
	return buf;
}

bool rs_starts_with(const redisReply *r, const char *prefix)
{
	size_t n = strlen(prefix);

	return r->str && r->len >= n && memcmp(r->str, prefix, n) == 0;
}

/* The kind an error reply names (the code may follow a script's prefix). */
enum kt_store_err_kind rs_reply_kind(const redisReply *r)
{
	char t[200];

	rs_reply_text(r, t, sizeof(t));
	if (rs_starts_with(r, "NOAUTH") || rs_starts_with(r, "WRONGPASS"))
		return KT_SERR_AUTH;
	if (strstr(t, "WRONGTYPE"))
		return KT_SERR_WRONGTYPE;
	if (rs_starts_with(r, "NOSCRIPT"))
		return KT_SERR_NOSCRIPT;
	return KT_SERR_ERR;
}

bool rs_int_in(const redisReply *r, long long lo, long long hi)
{
	return r->type == REDIS_REPLY_INTEGER && r->integer >= lo && r->integer <= hi;
}

bool rs_valid_token(const char *t, size_t max)
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

bool rs_valid_host(const char *h)
{
	return rs_valid_token(h, 253);
}

/* ---- connection state ---- */

uint64_t rs_next_rand(struct kt_store *s)
{
	/* xorshift64*: jitter only, no need for quality */
	s->rng ^= s->rng >> 12;
	s->rng ^= s->rng << 25;
	s->rng ^= s->rng >> 27;
	return s->rng * 2685821657736338717ULL;
}

void rs_conn_failed(struct kt_store *s)
{
	uint64_t now = rs_mono_ns(), d;

	if (s->t->drop)
		s->t->drop(s);
	s->cur_host[0] = 0;
	s->cur_port = 0;
	s->st.failures++;
	if (s->state != KT_STORE_DOWN) {
		s->state = KT_STORE_DOWN;
		s->since_ns = now;
	}
	s->backoff_ms = s->backoff_ms ? s->backoff_ms * 2 : KT_STORE_BACKOFF_MIN_MS;
	/* KT_STORE_BACKOFF_MAX_MS, or in cluster mode KT_STORE_CLUSTER_BACKOFF_MAX_MS:
	 * a cluster failover is routine and over in a few node timeouts, so it is
	 * retried at least once a second rather than slept through */
	if (s->backoff_ms > s->t->backoff_max_ms)
		s->backoff_ms = s->t->backoff_max_ms;
	d = s->backoff_ms / 2 + rs_next_rand(s) % (s->backoff_ms / 2 + 1);
	s->next_retry_ns = now + d * 1000000ULL;
}

int rs_backing_off(struct kt_store *s, uint64_t now, char *err, size_t errlen)
{
	if (err && errlen)
		snprintf(err, errlen, "store down for %.1f s, next retry in %llu ms; last error: %s",
			 (double)(now - s->since_ns) / 1e9,
			 (unsigned long long)((s->next_retry_ns - now + 999999) / 1000000), s->last_err);
	return -EAGAIN;
}

uint64_t rs_rtt_pct_us(const struct kt_store *s, unsigned pct)
{
	uint32_t v[KT_STORE_RTT_WINDOW], x;
	unsigned i, j, n = s->rtt_n;

	if (!n)
		return 0;
	/* at most 64 samples, after a call: an insertion sort is cheap */
	for (i = 0; i < n; i++) {
		x = s->rtt_us[i];
		for (j = i; j > 0 && v[j - 1] > x; j--)
			v[j] = v[j - 1];
		v[j] = x;
	}
	return v[(n * pct + 99) / 100 - 1]; /* the nearest rank */
}

unsigned rs_step_timeout_ms(const struct kt_store *s)
{
	uint64_t t;
	unsigned i;

	if (s->fixed_timeout_ms)
		return s->fixed_timeout_ms;
	if (!s->rtt_n) {
		t = KT_STORE_TIMEOUT_FIRST_MS;
	} else {
		t = (rs_rtt_pct_us(s, 99) * KT_STORE_TIMEOUT_RTT_FACTOR + 999) / 1000;
		if (t < KT_STORE_TIMEOUT_FLOOR_MS)
			t = KT_STORE_TIMEOUT_FLOOR_MS;
	}
	for (i = 0; i < s->timeouts_in_row && t < KT_STORE_TIMEOUT_CAP_MS; i++)
		t *= KT_STORE_TIMEOUT_BACKOFF;
	return t < KT_STORE_TIMEOUT_CAP_MS ? (unsigned)t : KT_STORE_TIMEOUT_CAP_MS;
}

unsigned rs_budget_ms(const struct kt_store *s)
{
	unsigned b = KT_STORE_CALL_STEPS * rs_step_timeout_ms(s);

	return b > KT_STORE_CALL_BUDGET_MIN_MS ? b : KT_STORE_CALL_BUDGET_MIN_MS;
}

/* Deadline of the next step: the step timeout capped by the call budget. */
int rs_step_deadline(struct kt_store *s, uint64_t *dl)
{
	uint64_t now = rs_mono_ns(), step;

	s->step_ms = rs_step_timeout_ms(s);
	step = now + s->step_ms * 1000000ULL;
	if (now + 1000000ULL > s->deadline_ns)
		return -ETIMEDOUT;
	*dl = step < s->deadline_ns ? step : s->deadline_ns;
	return 0;
}

/* A step's outcome, for the next step's timeout. */
static void rs_step_done(struct kt_store *s, int ret, uint64_t t0)
{
	uint64_t us;

	if (ret == -ETIMEDOUT) {
		s->st.timeouts++;
		if (s->timeouts_in_row < 16)
			s->timeouts_in_row++;
		return;
	}
	if (ret)
		return;
	s->timeouts_in_row = 0;
	us = (rs_mono_ns() - t0) / 1000;
	s->rtt_us[s->rtt_next] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
	s->rtt_next = (s->rtt_next + 1) % KT_STORE_RTT_WINDOW;
	if (s->rtt_n < KT_STORE_RTT_WINDOW)
		s->rtt_n++;
}

int rs_call_many(struct kt_store *s, struct kt_rconn *c, const struct kt_rconn_cmd *cmds, int n,
		 uint64_t dl, redisReply **rep, char *e, size_t elen)
{
	uint64_t t0 = rs_mono_ns(), out0, in0, out1, in1;
	int ret;

	s->st.round_trips++;
	s->st.commands += (uint64_t)n;
	kt_rconn_bytes(c, &out0, &in0);
	ret = kt_rconn_call_many(c, cmds, n, dl, rep, e, elen);
	kt_rconn_bytes(c, &out1, &in1);
	s->st.bytes_sent += out1 - out0;
	s->st.bytes_received += in1 - in0;
	rs_step_done(s, ret, t0);
	return ret;
}

/* How the timeout in force was set, for messages. */
static const char *timeout_origin(const struct kt_store *s)
{
	return s->fixed_timeout_ms ? "redisStore.timeout" : "auto timeout, from the latency";
}

/* The message for a failed step; rconn's text names the peer and the step. */
const char *rs_conn_errstr(const struct kt_store *s, int ret, const char *rconn_err, char *buf,
			   size_t len)
{
	if (ret == -ETIMEDOUT && !strstr(rconn_err, "TLS")) {
		snprintf(buf, len, "timed out after %u ms (%s)", s->step_ms, timeout_origin(s));
		return buf;
	}
	if (ret == -ECONNRESET && !strstr(rconn_err, "TLS"))
		return "server closed the connection";
	return rconn_err[0] ? rconn_err : strerror(-ret);
}


/* A rotated Secret is used from the next connect on. One that cannot be
 * read (removed, or refused by the volume rule) leaves the last good
 * password: AUTH then says whether the server still takes it. */
static void refresh_secret(char **pass, const char *file)
{
	char why[160], *fresh;

	if (!file || kt_config_read_secret(file, &fresh, why, sizeof(why)))
		return;
	if (*pass && !strcmp(*pass, fresh)) {
		rs_free_secret(fresh);
		return;
	}
	rs_free_secret(*pass);
	*pass = fresh;
}

/* Connects (TCP, then the TLS handshake under t) within one step. */
int rs_dial(struct kt_store *s, const char *role, const char *host, int port,
		const struct tls_opt *t, struct kt_rconn **out, char *err, size_t errlen)
{
	struct kt_rconn_opts o = {
		.host = host, .port = port, .tls = t->on, .ca_file = t->ca, .cert_file = t->cert,
		.key_file = t->key, .insecure_skip_verify = t->skip_verify,
		.server_name = NULL, /* the host: SNI for names, IP SAN check for literals */
	};
	char e[KT_ERR_LEN];
	struct kt_rconn *c = NULL;
	uint64_t t0;
	int ret;

	if (rs_step_deadline(s, &o.connect_deadline_ns)) {
		rs_seterr(s, err, errlen, "%s %s:%d: connect: call budget of %u ms exhausted", role, host,
			  port, rs_budget_ms(s));
		return -ETIMEDOUT;
	}
	refresh_secret(&s->pass, s->pass_file);
	refresh_secret(&s->s_pass, s->s_pass_file);
	t0 = rs_mono_ns();
	ret = kt_rconn_open(&o, &c, e, sizeof(e));
	if (!ret)
		ret = kt_rconn_open_wait(c, o.connect_deadline_ns, e, sizeof(e));
	if (ret == -ETIMEDOUT)
		rs_step_done(s, ret, t0); /* a connect is no latency sample: TLS takes more trips */
	if (ret) {
		/* rconn's line already says "connect to h:p failed: ..." */
		if (ret == -ETIMEDOUT && !strstr(e, "TLS"))
			rs_seterr(s, err, errlen, "%s %s:%d: connect: timed out after %u ms (%s)", role,
				  host, port, s->step_ms, timeout_origin(s));
		else
			rs_seterr(s, err, errlen, "%s: %s", role, e);
		kt_rconn_close(c);
		return ret;
	}
	*out = c;
	return 0;
}

void rs_cmd_set(struct rs_cmd *k, int argc, ...)
{
	va_list ap;
	int i;

	va_start(ap, argc);
	k->argc = argc;
	for (i = 0; i < argc; i++)
		k->argv[i] = va_arg(ap, const char *);
	va_end(ap);
}

void rs_free_replies(redisReply **rep, int n)
{
	for (int i = 0; i < n; i++)
		if (rep[i])
			freeReplyObject(rep[i]);
}

/* Sends n commands in one write and reads n replies (errors replies included).
 * Returns 0, or a negative errno for an I/O failure (the caller drops c). */
int rs_pipeline(struct kt_store *s, struct kt_rconn *c, const char *where, struct rs_cmd *cmds,
		    int n, redisReply **rep, char *err, size_t errlen)
{
	struct kt_rconn_cmd rc[4 + N_SCRIPTS];
	char e[KT_ERR_LEN], eb[KT_ERR_LEN];
	uint64_t dl;
	int i, ret;

	for (i = 0; i < n; i++)
		rep[i] = NULL;
	if (rs_step_deadline(s, &dl)) {
		rs_seterr(s, err, errlen, "%s: call budget of %u ms exhausted", where, rs_budget_ms(s));
		return -ETIMEDOUT;
	}
	for (i = 0; i < n; i++)
		rc[i] = (struct kt_rconn_cmd){ .argc = cmds[i].argc, .argv = cmds[i].argv };
	ret = rs_call_many(s, c, rc, n, dl, rep, e, sizeof(e));
	if (ret)
		rs_seterr(s, err, errlen, "%s: %s", where, rs_conn_errstr(s, ret, e, eb, sizeof(eb)));
	return ret;
}

bool rs_is_ok(const redisReply *r)
{
	return r->type == REDIS_REPLY_STATUS && r->len == 2 && memcmp(r->str, "OK", 2) == 0;
}

/* AUTH [user] password, as a pipelined command. */
void rs_auth_cmd(struct rs_cmd *k, const char *user, const char *pass)
{
	if (user)
		rs_cmd_set(k, 3, "AUTH", user, pass);
	else
		rs_cmd_set(k, 2, "AUTH", pass);
}

int rs_auth_failed(struct kt_store *s, const char *where, const redisReply *r, char *err,
		       size_t errlen)
{
	char t[200];

	rs_seterr(s, err, errlen, "%s: authentication failed: %s", where, rs_reply_text(r, t, sizeof(t)));
	return -EACCES;
}

/* p starts with 40 lowercase hex digits (a SHA1, a run_id) */
static bool hex40(const char *p)
{
	for (int i = 0; i < 40; i++)
		if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
			return false;
	return true;
}

static bool rs_is_sha(const redisReply *r)
{
	return r->type == REDIS_REPLY_STRING && r->len == 40 && hex40(r->str);
}

/* The run_id in an INFO server reply into id (41 bytes), else "". */
static void info_run_id(const redisReply *r, char *id)
{
	const char *p;

	id[0] = 0;
	if (r->type != REDIS_REPLY_STRING || !r->str || !(p = strstr(r->str, "\nrun_id:")) ||
	    !hex40(p += strlen("\nrun_id:")))
		return;
	memcpy(id, p, 40);
	id[40] = 0;
}

/* AUTH, SELECT, ROLE (sentinel mode), PING and INFO server in one round
 * trip; then, authenticated, SCRIPT LOAD in a second. Redis closes a
 * connection that is not authenticated yet on a bulk string over 16 KiB,
 * so a script sent with a wrong or missing password would read as a reset
 * instead of what the server said; PING says NOAUTH when the server wants
 * a password and none was configured. INFO's run_id says whether this is
 * the server of the last connection (a reconnect after a timeout: its
 * scripts are loaded, it lost nothing) or another one (a restart, a
 * failover: server_epoch counts it, and the scripts are loaded). An INFO
 * that fails (renamed, refused) only means "another one". In cluster mode
 * every setup counts as another one (one store, many masters). */
int rs_setup_master(struct kt_store *s, struct kt_rconn *c, const char *where, char *err,
			size_t errlen)
{
	struct rs_cmd cmds[5 + N_SCRIPTS];
	redisReply *rep[5 + N_SCRIPTS], *r;
	int n = 0, i_auth = -1, i_sel = -1, i_role = -1, i_ping, i_info, i, ret;
	char db[16], t[200], id[41];

	if (s->pass) {
		i_auth = n;
		rs_auth_cmd(&cmds[n++], s->user, s->pass);
	}
	if (s->db) {
		snprintf(db, sizeof(db), "%d", s->db);
		i_sel = n;
		rs_cmd_set(&cmds[n++], 2, "SELECT", db);
	}
	if (s->mode == KT_REDIS_SENTINEL) {
		i_role = n;
		rs_cmd_set(&cmds[n++], 1, "ROLE");
	}
	i_ping = n;
	rs_cmd_set(&cmds[n++], 1, "PING");
	i_info = n;
	rs_cmd_set(&cmds[n++], 2, "INFO", "server");
	ret = rs_pipeline(s, c, where, cmds, n, rep, err, errlen);
	if (ret)
		return ret;
	if (i_auth >= 0 && !rs_is_ok(rep[i_auth])) {
		ret = rs_auth_failed(s, where, rep[i_auth], err, errlen);
		goto out;
	}
	if (i_sel >= 0 && !rs_is_ok(rep[i_sel])) {
		rs_seterr(s, err, errlen, "%s: SELECT %d: %s", where, s->db,
			  rep[i_sel]->type == REDIS_REPLY_ERROR ? rs_reply_text(rep[i_sel], t, sizeof(t))
							    : "unexpected reply");
		ret = -EIO;
		goto out;
	}
	if (i_role >= 0) {
		r = rep[i_role];
		if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
		    r->element[0]->type != REDIS_REPLY_STRING) {
			rs_seterr(s, err, errlen, "%s: malformed reply to ROLE", where);
			ret = -EPROTO;
			goto out;
		}
		if (strcmp(r->element[0]->str, "master") != 0) {
			rs_seterr(s, err, errlen, "%s: not a master (ROLE: %s); failover in progress?", where,
				  rs_reply_text(r->element[0], t, sizeof(t)));
			ret = -EROFS;
			goto out;
		}
	}
	r = rep[i_ping];
	if (r->type == REDIS_REPLY_ERROR) {
		rs_seterr(s, err, errlen, "%s: PING: %s%s", where, rs_reply_text(r, t, sizeof(t)),
			  rs_starts_with(r, "NOAUTH") ? " (configure a password)" : "");
		ret = rs_starts_with(r, "NOAUTH") ? -EACCES : -EIO;
		goto out;
	}
	info_run_id(rep[i_info], id);
	rs_free_replies(rep, n);
	n = 0;
	if (id[0] && !strcmp(id, s->run_id) && s->sha[0][0])
		return 0; /* the same server: its scripts are loaded (NOSCRIPT: EVAL) */
	s->server_epoch++;
	/* cluster: kept "", so no setup finds the same server */
	snprintf(s->run_id, sizeof(s->run_id), "%s", s->mode != KT_REDIS_CLUSTER ? id : "");
	for (i = 0; i < N_SCRIPTS; i++)
		rs_cmd_set(&cmds[n++], 3, "SCRIPT", "LOAD", rs_scripts[i]);
	ret = rs_pipeline(s, c, where, cmds, n, rep, err, errlen);
	if (ret)
		return ret;
	for (i = 0; i < N_SCRIPTS; i++) {
		r = rep[i];
		if (r->type == REDIS_REPLY_ERROR) {
			rs_seterr(s, err, errlen, "%s: SCRIPT LOAD: %s%s", where, rs_reply_text(r, t, sizeof(t)),
				  rs_starts_with(r, "NOAUTH") ? " (configure a password)" : "");
			ret = rs_starts_with(r, "NOAUTH") ? -EACCES : -EIO;
			goto out;
		}
		if (!rs_is_sha(r)) {
			rs_seterr(s, err, errlen, "%s: malformed reply to SCRIPT LOAD", where);
			ret = -EPROTO;
			goto out;
		}
		memcpy(s->sha[i], r->str, 41);
	}
out:
	rs_free_replies(rep, n);
	return ret;
}

/* ---- argument vectors ---- */

int rs_args_init(struct args *a, int cap)
{
	memset(a, 0, sizeof(*a));
	a->cap = cap;
	a->v = calloc((size_t)cap, sizeof(*a->v));
	a->len = calloc((size_t)cap, sizeof(*a->len));
	a->owned = calloc((size_t)cap, sizeof(*a->owned));
	return a->v && a->len && a->owned ? 0 : -ENOMEM;
}

void rs_args_free(struct args *a)
{
	for (int i = 0; i < a->n_owned; i++)
		free(a->owned[i]);
	free(a->v);
	free(a->len);
	free(a->owned);
}

void rs_arg_ref(struct args *a, const char *p)
{
	if (a->n >= a->cap) {
		a->oom = true;
		return;
	}
	a->v[a->n] = p;
	a->len[a->n++] = strlen(p);
}

void rs_arg_fmt(struct args *a, const char *fmt, ...)
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

void rs_free_secret(char *p)
{
	if (p) {
		explicit_bzero(p, strlen(p));
		free(p);
	}
}


int rs_check_pong(struct kt_store *s, const redisReply *r, char *err, size_t errlen)
{
	if (r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0)
		return 0;
	rs_seterr(s, err, errlen, "redis %s:%d: ping: malformed reply", s->cur_host, s->cur_port);
	return -EPROTO;
}

void rs_jobs_free(struct kt_rjob *jobs, int nj)
{
	for (int j = 0; j < nj; j++)
		if (jobs[j].rep)
			freeReplyObject(jobs[j].rep);
}

int rs_run_one(struct kt_store *s, struct kt_rjob *jb, const char *what, redisReply **out, char *err,
	       size_t errlen)
{
	int ret;

	*out = NULL;
	ret = s->t->run(s, jb, 1, what, err, errlen);
	if (!ret)
		ret = s->t->check(s, jb, what, err, errlen);
	if (!ret) {
		*out = jb->rep;
		jb->rep = NULL;
	}
	rs_jobs_free(jb, 1);
	return ret;
}
