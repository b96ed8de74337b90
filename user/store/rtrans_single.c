/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The Redis store's transport for one server (KT_REDIS_SINGLE) or the
 * master a set of Sentinels names (KT_REDIS_SENTINEL): one connection,
 * opened by the first call after a failure (store_int.h, store.h). Sentinel
 * mode asks each sentinel in turn (starting with the one that answered
 * last) for the master, checks ROLE, and re-resolves after a connection
 * error, a READONLY/NOAUTH/MASTERDOWN/LOADING reply, or a +switch-master
 * event seen on a second connection kept subscribed to a sentinel. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include "store/store_int.h"

struct rt_single {
	struct kt_rconn *c;    /* the master, NULL when not connected */
	struct kt_rconn *sub;  /* sentinel mode: subscribed to +switch-master, or NULL */
	bool switched;         /* sub saw +switch-master for our master */
	uint64_t sub_retry_ns; /* earliest time to subscribe again after losing sub */
};

static struct rt_single *P(const struct kt_store *s)
{
	return s->tp;
}

static void drop_conn(struct kt_store *s)
{
	kt_rconn_close(P(s)->c);
	P(s)->c = NULL;
	s->cur_host[0] = 0;
	s->cur_port = 0;
}

/* Asks one sentinel for the master's address. */
static int ask_sentinel(struct kt_store *s, int idx, char *host, size_t hostlen, int *port, char *err,
			size_t errlen)
{
	struct kt_rconn *c = NULL;
	redisReply *rep[2] = { NULL, NULL }, *r;
	struct rs_cmd cmds[2];
	char where[300], t[200], *end;
	int n = 0, ret;
	long v;

	snprintf(where, sizeof(where), "sentinel %s:%d", s->ep_host[idx], s->ep_port[idx]);
	ret = rs_dial(s, "sentinel", s->ep_host[idx], s->ep_port[idx], &s->tls_sentinel, &c, err, errlen);
	if (ret)
		return ret;
	if (s->s_pass)
		rs_auth_cmd(&cmds[n++], s->s_user, s->s_pass);
	rs_cmd_set(&cmds[n++], 3, "SENTINEL", "get-master-addr-by-name", s->master_name);
	ret = rs_pipeline(s, c, where, cmds, n, rep, err, errlen);
	if (ret)
		goto out;
	if (s->s_pass && !rs_is_ok(rep[0])) {
		ret = rs_auth_failed(s, where, rep[0], err, errlen);
		goto out;
	}
	r = rep[n - 1];
	ret = -EPROTO;
	if (r->type == REDIS_REPLY_NIL) {
		rs_seterr(s, err, errlen, "%s: does not know master '%s'", where, s->master_name);
		ret = -ENOENT;
		goto out;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		rs_seterr(s, err, errlen, "%s: SENTINEL get-master-addr-by-name: %s", where,
			  rs_reply_text(r, t, sizeof(t)));
		ret = rs_starts_with(r, "NOAUTH") ? -EACCES : -EIO;
		goto out;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
	    r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING ||
	    r->element[0]->len >= hostlen || !rs_valid_host(r->element[0]->str)) {
		rs_seterr(s, err, errlen, "%s: malformed reply to SENTINEL get-master-addr-by-name", where);
		goto out;
	}
	errno = 0;
	v = strtol(r->element[1]->str, &end, 10);
	if (errno || *end || end == r->element[1]->str || v < 1 || v > 65535) {
		rs_seterr(s, err, errlen, "%s: malformed master port in SENTINEL reply", where);
		goto out;
	}
	memcpy(host, r->element[0]->str, r->element[0]->len + 1);
	*port = (int)v;
	ret = 0;
out:
	rs_free_replies(rep, 2);
	kt_rconn_close(c);
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
				rs_seterr(s, err, errlen, "no sentinel of %d answered for master '%s'; last: %s",
					  s->n_ep, s->master_name, last);
			}
			return ret;
		}
	} else {
		snprintf(host, sizeof(host), "%s", s->host);
		port = s->port;
	}
	snprintf(where, sizeof(where), "redis %s:%d", host, port);
	ret = rs_dial(s, "redis", host, port, &s->tls_redis, &c, err, errlen);
	if (!ret)
		ret = rs_setup_master(s, c, where, err, errlen);
	if (ret) {
		kt_rconn_close(c);
		/* the sentinel that named this master may be stale: start elsewhere next time */
		if (s->mode == KT_REDIS_SENTINEL)
			s->ep_next = (s->ep_next + 1) % s->n_ep;
		return ret;
	}
	P(s)->c = c;
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
	kt_rconn_close(P(s)->sub);
	P(s)->sub = NULL;
	P(s)->switched = false;
	P(s)->sub_retry_ns = rs_mono_ns() + KT_STORE_BACKOFF_MAX_MS * 1000000ULL;
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
		P(s)->switched = true;
}

static void subscribe(struct kt_store *s)
{
	redisReply *rep[2] = { NULL, NULL }, *r;
	struct kt_rconn *c = NULL;
	struct rs_cmd cmds[2];
	char where[300];
	int n = 0, idx = s->ep_next;

	snprintf(where, sizeof(where), "sentinel %s:%d", s->ep_host[idx], s->ep_port[idx]);
	if (rs_dial(s, "sentinel", s->ep_host[idx], s->ep_port[idx], &s->tls_sentinel, &c, NULL, 0))
		goto fail;
	/* Before SUBSCRIBE: a message may follow its confirmation in the same read. */
	kt_rconn_set_push(c, on_message, s);
	if (s->s_pass)
		rs_auth_cmd(&cmds[n++], s->s_user, s->s_pass);
	rs_cmd_set(&cmds[n++], 2, "SUBSCRIBE", "+switch-master");
	if (rs_pipeline(s, c, where, cmds, n, rep, NULL, 0))
		goto fail;
	r = rep[n - 1];
	if ((s->s_pass && !rs_is_ok(rep[0])) || r->type != REDIS_REPLY_ARRAY || r->elements != 3)
		goto fail;
	rs_free_replies(rep, n);
	P(s)->sub = c;
	return;
fail:
	rs_free_replies(rep, n);
	kt_rconn_close(c);
	drop_sub(s);
	s->ep_next = (idx + 1) % s->n_ep; /* try another sentinel next time */
}

/* Reads whatever the subscription has received, without blocking. */
static bool master_switched(struct kt_store *s)
{
	bool sw;

	/* A few rounds at most: handle() drains what is readable each time. */
	for (int i = 0; P(s)->sub && !P(s)->switched && i < 4; i++) {
		struct pollfd p = { .fd = kt_rconn_fd(P(s)->sub), .events = POLLIN };
		uint32_t ev = 0;

		if (poll(&p, 1, 0) != 1)
			break;
		if (p.revents & POLLIN)
			ev |= EPOLLIN;
		if (p.revents & (POLLERR | POLLHUP))
			ev |= EPOLLIN | EPOLLERR;
		if (kt_rconn_handle(P(s)->sub, ev, rs_mono_ns())) {
			sw = P(s)->switched;
			drop_sub(s);
			return sw;
		}
	}
	sw = P(s)->switched;
	P(s)->switched = false;
	return sw;
}


/* Classifies an error reply. Replies that mean "wrong server now" (failover,
 * restart, lost auth) drop the connection so the next call re-resolves. */
static int error_reply(struct kt_store *s, const redisReply *r, const char *what, char *err,
		       size_t errlen)
{
	char t[200];
	int ret = -EIO;
	bool drop = false;

	if (rs_starts_with(r, "READONLY")) {
		ret = -EROFS;
		drop = true;
	} else if (rs_starts_with(r, "NOAUTH")) {
		ret = -EACCES;
		drop = true;
	} else if (rs_starts_with(r, "MASTERDOWN") || rs_starts_with(r, "LOADING")) {
		drop = true;
	}
	rs_seterr(s, err, errlen, "redis %s:%d: %s: %s", s->cur_host, s->cur_port, what,
		  rs_reply_text(r, t, sizeof(t)));
	s->hint = rs_reply_kind(r);
	if (drop)
		rs_conn_failed(s);
	return ret;
}


/* Start of an operation: follow a switched master, connect if needed,
 * honour the back-off. */
static int single_begin(struct kt_store *s, uint64_t now, char *err, size_t errlen)
{
	int ret;

	if (P(s)->c && master_switched(s))
		drop_conn(s); /* not a failure: resolve the new master right now */
	if (P(s)->c) {
		if (s->mode == KT_REDIS_SENTINEL && !P(s)->sub && now >= P(s)->sub_retry_ns)
			subscribe(s);
		return 0;
	}
	if (s->state == KT_STORE_DOWN && now < s->next_retry_ns)
		return rs_backing_off(s, now, err, errlen);
	ret = connect_store(s, err, errlen);
	if (ret) {
		rs_conn_failed(s);
		return ret;
	}
	s->st.connects++;
	if (s->mode == KT_REDIS_SENTINEL && !P(s)->sub)
		subscribe(s);
	if (s->state != KT_STORE_UP) {
		s->state = KT_STORE_UP;
		s->since_ns = rs_mono_ns();
	}
	s->backoff_ms = 0;
	return 0;
}

/* The jobs in one pipeline on the one connection: scripts as EVALSHA; those
 * the server lost (restart, SCRIPT FLUSH) sent again as EVAL in a second
 * one. An I/O failure drops the connection and ends the run. */
static int single_run(struct kt_store *s, struct kt_rjob *jobs, int nj, const char *what, char *err,
		      size_t errlen)
{
	struct kt_rconn_cmd *rc = calloc((size_t)nj, sizeof(*rc));
	redisReply **rep = calloc((size_t)nj, sizeof(*rep));
	int *who = calloc((size_t)nj, sizeof(*who));
	char e[KT_ERR_LEN], eb[KT_ERR_LEN];
	int ret = 0;

	if (!rc || !rep || !who) {
		ret = -ENOMEM;
		goto out;
	}
	for (int pass = 0; pass < 2 && !ret; pass++) {
		uint64_t dl;
		int n = 0;

		for (int j = 0; j < nj; j++) {
			struct kt_rjob *jb = &jobs[j];
			struct args *a = jb->a;

			if (jb->rep || (pass && !jb->eval))
				continue;
			if (jb->script >= 0) {
				a->v[0] = jb->eval ? "EVAL" : "EVALSHA";
				a->len[0] = strlen(a->v[0]);
				a->v[1] = jb->eval ? rs_scripts[jb->script] : s->sha[jb->script];
				a->len[1] = strlen(a->v[1]);
			}
			rc[n] = (struct kt_rconn_cmd){ .argc = a->n, .argv = a->v, .argvlen = a->len };
			who[n++] = j;
		}
		if (!n)
			break;
		if (rs_step_deadline(s, &dl)) {
			rs_seterr(s, err, errlen, "redis %s:%d: %s: call budget of %u ms exhausted", s->cur_host,
				  s->cur_port, what, rs_budget_ms(s));
			rs_conn_failed(s);
			ret = -ETIMEDOUT;
			break;
		}
		ret = rs_call_many(s, P(s)->c, rc, n, dl, rep, e, sizeof(e));
		if (ret) {
			rs_seterr(s, err, errlen, "redis %s:%d: %s: %s", s->cur_host, s->cur_port, what,
				  rs_conn_errstr(s, ret, e, eb, sizeof(eb)));
			rs_conn_failed(s);
			break;
		}
		for (int k = 0; k < n; k++) {
			struct kt_rjob *jb = &jobs[who[k]];

			if (!pass && jb->script >= 0 && rep[k]->type == REDIS_REPLY_ERROR &&
			    rs_starts_with(rep[k], "NOSCRIPT")) {
				freeReplyObject(rep[k]);
				jb->eval = true;
			} else {
				jb->rep = rep[k];
			}
			rep[k] = NULL;
		}
	}
out:
	if (ret == -ENOMEM)
		rs_seterr(s, err, errlen, "%s: out of memory", what);
	free(rc);
	free(rep);
	free(who);
	return ret;
}

static int single_check(struct kt_store *s, const struct kt_rjob *jb, const char *what, char *err,
			size_t errlen)
{
	if (jb->rep->type != REDIS_REPLY_ERROR)
		return 0;
	return error_reply(s, jb->rep, what, err, errlen);
}

static int single_ping(struct kt_store *s, char *err, size_t errlen)
{
	static const char *argv[1] = { "PING" };
	struct args a = { .n = 1, .cap = 1, .v = argv };
	struct kt_rjob jb = { .script = -1, .a = &a, .ask = -1 };
	int ret;

	ret = single_run(s, &jb, 1, "ping", err, errlen);
	if (!ret)
		ret = single_check(s, &jb, "ping", err, errlen);
	if (!ret)
		ret = rs_check_pong(s, jb.rep, err, errlen);
	rs_jobs_free(&jb, 1);
	return ret;
}

static int single_route(const struct kt_store *s, const char *key)
{
	(void)s;
	(void)key;
	return 0;
}

static int single_init(struct kt_store *s)
{
	s->tp = calloc(1, sizeof(struct rt_single));
	return s->tp ? 0 : -ENOMEM;
}

static void single_close(struct kt_store *s)
{
	if (!s->tp)
		return;
	drop_conn(s);
	kt_rconn_close(P(s)->sub);
	free(s->tp);
	s->tp = NULL;
}

static bool single_connected(const struct kt_store *s)
{
	return P(s)->c != NULL;
}

static bool single_endpoint(const struct kt_store *s, char *buf, size_t len)
{
	if (!P(s)->c)
		return false;
	snprintf(buf, len, "%s:%d", s->cur_host, s->cur_port);
	return true;
}

const struct kt_rtransport kt_rtrans_single = {
	.name = "single",
	.backoff_max_ms = KT_STORE_BACKOFF_MAX_MS,
	.init = single_init,
	.close = single_close,
	.drop = drop_conn,
	.begin = single_begin,
	.route = single_route,
	.run = single_run,
	.check = single_check,
	.ping = single_ping,
	.connected = single_connected,
	.endpoint = single_endpoint,
};
