/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The Redis store's transport for Redis Cluster (KT_REDIS_CLUSTER; store.h,
 * "Cluster mode"): the slot map from CLUSTER SLOTS, one connection per
 * master in use (each with AUTH and SCRIPT LOAD), the jobs for one master
 * pipelined, masters asked one after another. MOVED updates the slot, ASK
 * resends with ASKING, NOSCRIPT resends the script text, a connection
 * failure or CLUSTERDOWN/TRYAGAIN/READONLY/LOADING/MASTERDOWN refreshes the
 * map; at most CL_PASSES passes within the call budget. A master that
 * failed backs off on its own. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "store/store_int.h"

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

struct rt_cluster {
	struct cl_node *cn;       /* CL_MAX_NODES entries: every master met */
	int n_cn;
	int16_t *slot_node;       /* CL_SLOTS entries: index into cn, -1 unknown */
	bool have_map, map_stale; /* stale: refresh before the next command */
	int cl_last;              /* node that answered last (kt_store_endpoint), -1 none */
};

static struct rt_cluster *C(const struct kt_store *s)
{
	return s->tp;
}

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

static void cl_drop(struct kt_store *s, int i)
{
	kt_rconn_close(C(s)->cn[i].c);
	C(s)->cn[i].c = NULL;
}

/* Node i failed: not dialled again before a jittered back-off of its own,
 * so a dead master costs its own limits, not a connect timeout per pass. */
static void cl_node_failed(struct kt_store *s, int i)
{
	struct cl_node *n = &C(s)->cn[i];
	uint64_t d;

	n->backoff_ms = n->backoff_ms ? n->backoff_ms * 2 : KT_STORE_BACKOFF_MIN_MS;
	if (n->backoff_ms > KT_STORE_CLUSTER_BACKOFF_MAX_MS)
		n->backoff_ms = KT_STORE_CLUSTER_BACKOFF_MAX_MS;
	d = n->backoff_ms / 2 + rs_next_rand(s) % (n->backoff_ms / 2 + 1);
	n->retry_ns = rs_mono_ns() + d * 1000000ULL;
}

/* Index of host:port in cn, added if new; -1 when the table is full. */
static int cl_node(struct kt_store *s, const char *host, size_t hlen, int port)
{
	int i;

	if (hlen < 1 || hlen >= sizeof(C(s)->cn[0].host) || port < 1 || port > 65535)
		return -1;
	for (i = 0; i < C(s)->n_cn; i++)
		if (C(s)->cn[i].port == port && strlen(C(s)->cn[i].host) == hlen &&
		    !memcmp(C(s)->cn[i].host, host, hlen))
			return i;
	if (C(s)->n_cn >= CL_MAX_NODES) {
		/* reuse a node that serves no slot */
		for (i = 0; i < C(s)->n_cn; i++) {
			int k;

			for (k = 0; k < CL_SLOTS && C(s)->slot_node[k] != i; k++)
				;
			if (k == CL_SLOTS)
				break;
		}
		if (i == C(s)->n_cn)
			return -1;
		cl_drop(s, i);
	} else {
		i = C(s)->n_cn++;
	}
	memcpy(C(s)->cn[i].host, host, hlen);
	C(s)->cn[i].host[hlen] = 0;
	C(s)->cn[i].port = port;
	C(s)->cn[i].retry_ns = 0;
	C(s)->cn[i].backoff_ms = 0;
	return i;
}

/* Connects node i (AUTH, SCRIPT LOAD: every master has the scripts). */
static int cl_connect(struct kt_store *s, int i, char *err, size_t errlen)
{
	struct cl_node *n = &C(s)->cn[i];
	char where[300];
	int ret;

	if (n->c)
		return 0;
	snprintf(where, sizeof(where), "redis %s:%d", n->host, n->port);
	if (rs_mono_ns() < n->retry_ns) {
		rs_seterr(s, err, errlen, "%s: backing off after a failure (%s)", where, s->last_err);
		return -EAGAIN;
	}
	ret = rs_dial(s, "redis", n->host, n->port, &s->tls_redis, &n->c, err, errlen);
	if (!ret)
		ret = rs_setup_master(s, n->c, where, err, errlen);
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

		if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || !rs_int_in(e->element[0], 0, CL_SLOTS - 1) ||
		    !rs_int_in(e->element[1], e->element[0]->integer, CL_SLOTS - 1))
			return -EPROTO;
		m = e->element[2];
		if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 || m->element[0]->type != REDIS_REPLY_STRING ||
		    !rs_int_in(m->element[1], 1, 65535))
			return -EPROTO;
	}
	for (i = 0; i < CL_SLOTS; i++)
		C(s)->slot_node[i] = -1;
	for (i = 0; i < r->elements; i++) {
		const redisReply *e = r->element[i], *m = e->element[2];
		/* an empty address means "the node you asked" */
		const char *h = m->element[0]->len ? m->element[0]->str : host;
		int k = cl_node(s, h, strlen(h), (int)m->element[1]->integer);

		if (k < 0)
			return -ENOMEM;
		for (long long sl = e->element[0]->integer; sl <= e->element[1]->integer; sl++)
			C(s)->slot_node[sl] = (int16_t)k;
	}
	/* demoted or forgotten masters: their connections are of no use now */
	for (int k = 0; k < C(s)->n_cn; k++) {
		int sl;

		for (sl = 0; sl < CL_SLOTS && C(s)->slot_node[sl] != k; sl++)
			;
		if (sl == CL_SLOTS)
			cl_drop(s, k);
	}
	C(s)->have_map = true;
	C(s)->map_stale = false;
	return 0;
}

/* CLUSTER SLOTS from a connected master, else from each seed in turn. */
static int cl_refresh(struct kt_store *s, char *err, size_t errlen)
{
	const char *argv[2] = { "CLUSTER", "SLOTS" };
	char where[300], host[256];
	int i, ret = -EIO, ncn = C(s)->n_cn;

	for (i = 0; i < ncn + s->n_ep; i++) {
		struct kt_rconn *c = NULL, *tmp = NULL;
		struct rs_cmd cmds[2];
		redisReply *rep[2] = { NULL, NULL };
		int n = 0, port;

		if (i < ncn) {
			if (!(c = C(s)->cn[i].c))
				continue;
			snprintf(host, sizeof(host), "%s", C(s)->cn[i].host);
			port = C(s)->cn[i].port;
		} else {
			snprintf(host, sizeof(host), "%s", s->ep_host[i - ncn]);
			port = s->ep_port[i - ncn];
			if (rs_dial(s, "redis", host, port, &s->tls_redis, &tmp, err, errlen)) {
				ret = -ECONNREFUSED;
				if (rs_mono_ns() + 1000000ULL > s->deadline_ns)
					break;
				continue;
			}
			c = tmp;
			if (s->pass)
				rs_auth_cmd(&cmds[n++], s->user, s->pass);
		}
		snprintf(where, sizeof(where), "redis %s:%d", host, port);
		rs_cmd_set(&cmds[n++], 2, argv[0], argv[1]);
		ret = rs_pipeline(s, c, where, cmds, n, rep, err, errlen);
		if (ret) {
			if (i < ncn)
				cl_drop(s, i);
		} else if (s->pass && i >= ncn && !rs_is_ok(rep[0])) {
			ret = rs_auth_failed(s, where, rep[0], err, errlen);
		} else if (rep[n - 1]->type == REDIS_REPLY_ERROR) {
			char t[200];

			rs_seterr(s, err, errlen, "%s: CLUSTER SLOTS: %s", where,
				  rs_reply_text(rep[n - 1], t, sizeof(t)));
			ret = -EIO;
		} else if ((ret = cl_load_map(s, rep[n - 1], host))) {
			rs_seterr(s, err, errlen, "%s: malformed reply to CLUSTER SLOTS", where);
		}
		rs_free_replies(rep, n);
		kt_rconn_close(tmp);
		if (!ret)
			return 0;
		if (rs_mono_ns() + 1000000ULL > s->deadline_ns)
			break;
	}
	C(s)->map_stale = true;
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
			s->since_ns = rs_mono_ns();
		}
		s->backoff_ms = 0;
		return ret;
	}
	if (ret == -ENOMEM)
		return ret;
	for (int i = 0; i < C(s)->n_cn; i++)
		connected |= C(s)->cn[i].c != NULL;
	if (connected) {
		s->st.failures++;
		if (s->state != KT_STORE_DOWN) {
			s->state = KT_STORE_DOWN;
			s->since_ns = rs_mono_ns();
		}
		s->next_retry_ns = 0;
		return ret;
	}
	snprintf(keep, sizeof(keep), "%s", s->last_err);
	rs_conn_failed(s);
	snprintf(s->last_err, sizeof(s->last_err), "%s", keep);
	return ret;
}

static bool retry_reply(const redisReply *r)
{
	return rs_starts_with(r, "CLUSTERDOWN") || rs_starts_with(r, "TRYAGAIN") ||
	       rs_starts_with(r, "READONLY") || rs_starts_with(r, "LOADING") ||
	       rs_starts_with(r, "MASTERDOWN");
}

/* Runs the jobs: the ones for the same master go in one pipeline (one round
 * trip), masters one after another. MOVED updates that slot (and the map is
 * refreshed at the next call), ASK sends ASKING first, NOSCRIPT resends the
 * text; a connection failure, CLUSTERDOWN, TRYAGAIN, READONLY or LOADING
 * refreshes the map. CL_PASSES passes at most, all within the call budget.
 * Returns 0 with every job's rep set, or the last failure; the jobs that
 * were answered keep their rep either way. */
static int cl_run(struct kt_store *s, struct kt_rjob *jobs, int nj, const char *what, char *err,
		  size_t errlen)
{
	struct kt_rconn_cmd *rc = NULL;
	redisReply **rep = NULL;
	int *who = NULL, pass, ret = 0, fail = -EIO, j, m;
	bool stale = C(s)->map_stale || !C(s)->have_map, answered = false;

	rc = calloc((size_t)nj * 2, sizeof(*rc));
	rep = calloc((size_t)nj * 2, sizeof(*rep));
	who = calloc((size_t)nj * 2, sizeof(*who));
	if (!rc || !rep || !who) {
		rs_seterr(s, err, errlen, "%s: out of memory", what);
		ret = -ENOMEM;
		goto out;
	}
	for (pass = 0; pass < CL_PASSES; pass++) {
		int pending = 0;

		if (stale) {
			int r2 = cl_refresh(s, err, errlen);

			if (r2 && !C(s)->have_map) {
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
		for (m = 0; m < C(s)->n_cn; m++) {
			int n = 0;
			char e[KT_ERR_LEN], eb[KT_ERR_LEN];
			uint64_t dl;

			for (j = 0; j < nj; j++) {
				struct kt_rjob *jb = &jobs[j];

				if (jb->rep || (jb->ask >= 0 ? jb->ask : C(s)->slot_node[jb->slot]) != m)
					continue;
				if (jb->ask >= 0) {
					static const char *asking[1] = { "ASKING" };

					rc[n] = (struct kt_rconn_cmd){ .argc = 1, .argv = asking };
					who[n++] = -1;
				}
				if (jb->script >= 0) {
					jb->a->v[0] = jb->eval ? "EVAL" : "EVALSHA";
					jb->a->len[0] = strlen(jb->a->v[0]);
					jb->a->v[1] = jb->eval ? rs_scripts[jb->script] : s->sha[jb->script];
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
			if (rs_step_deadline(s, &dl)) {
				rs_seterr(s, err, errlen, "redis %s:%d: %s: call budget of %u ms exhausted",
					  C(s)->cn[m].host, C(s)->cn[m].port, what, rs_budget_ms(s));
				ret = -ETIMEDOUT;
				goto out;
			}
			ret = rs_call_many(s, C(s)->cn[m].c, rc, n, dl, rep, e, sizeof(e));
			if (ret) {
				rs_seterr(s, err, errlen, "redis %s:%d: %s: %s", C(s)->cn[m].host,
					  C(s)->cn[m].port, what, rs_conn_errstr(s, ret, e, eb, sizeof(eb)));
				fail = ret;
				cl_drop(s, m);
				stale = true;
				continue;
			}
			for (int k = 0; k < n; k++) {
				struct kt_rjob *jb;
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
				rs_seterr(s, err, errlen, "redis %s:%d: %s: %s", C(s)->cn[m].host,
					  C(s)->cn[m].port, what,
					  rs_reply_text(r, t, sizeof(t)));
				fail = -EIO;
				if (rs_starts_with(r, "MOVED ")) {
					int to = cl_redirect(s, r, 6);

					if (to >= 0)
						C(s)->slot_node[jb->slot] = (int16_t)to;
					else
						stale = true;
					C(s)->map_stale = true; /* a slot moved: others may have too */
				} else if (rs_starts_with(r, "ASK ")) {
					jb->ask = cl_redirect(s, r, 4);
				} else if (jb->script >= 0 && !jb->eval && rs_starts_with(r, "NOSCRIPT")) {
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
			if (!jobs[j].rep && C(s)->slot_node[jobs[j].slot] < 0 && jobs[j].ask < 0) {
				rs_seterr(s, err, errlen, "%s: no master serves slot %d (cluster map)", what,
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
			C(s)->cl_last = jobs[j].node;
		}
out:
	free(rc);
	free(rep);
	free(who);
	return cl_state(s, ret, answered);
}

/* After cl_run: a job's answer is an error reply the script or command gave. */
static int cl_check(struct kt_store *s, const struct kt_rjob *jb, const char *what, char *err,
		    size_t errlen)
{
	char t[200];

	snprintf(s->cur_host, sizeof(s->cur_host), "%s", C(s)->cn[jb->node].host);
	s->cur_port = C(s)->cn[jb->node].port;
	if (jb->rep->type != REDIS_REPLY_ERROR)
		return 0;
	rs_seterr(s, err, errlen, "redis %s:%d: %s: %s", s->cur_host, s->cur_port, what,
		  rs_reply_text(jb->rep, t, sizeof(t)));
	s->hint = rs_reply_kind(jb->rep);
	return rs_starts_with(jb->rep, "NOAUTH") ? -EACCES : -EIO;
}

/* Cluster: a fresh slot map, then PING to every master that serves slots
 * (pipelined per master like any call). */
static int cl_ping(struct kt_store *s, char *err, size_t errlen)
{
	static const char *argv[1] = { "PING" };
	struct args a[CL_MAX_NODES];
	struct kt_rjob jobs[CL_MAX_NODES];
	int nj = 0, ret, sl;

	C(s)->map_stale = true;
	ret = cl_refresh(s, err, errlen);
	if (ret)
		return cl_state(s, ret, false);
	for (int m = 0; !ret && m < C(s)->n_cn; m++) {
		for (sl = 0; sl < CL_SLOTS && C(s)->slot_node[sl] != m; sl++)
			;
		if (sl == CL_SLOTS)
			continue;
		memset(&a[nj], 0, sizeof(a[nj]));
		a[nj].n = 1;
		a[nj].v = argv;
		jobs[nj] = (struct kt_rjob){ .slot = sl, .script = -1, .a = &a[nj], .ask = -1 };
		nj++;
	}
	if (!ret)
		ret = cl_run(s, jobs, nj, "ping", err, errlen);
	for (int j = 0; !ret && j < nj; j++) {
		ret = cl_check(s, &jobs[j], "ping", err, errlen);
		if (!ret && !(jobs[j].rep->type == REDIS_REPLY_STATUS && strcmp(jobs[j].rep->str, "PONG") == 0)) {
			rs_seterr(s, err, errlen, "redis %s:%d: ping: malformed reply", s->cur_host, s->cur_port);
			ret = -EPROTO;
		}
	}
	rs_jobs_free(jobs, nj);
	return ret;
}


/* Connections are per master, made by cl_run as needed: only the back-off. */
static int cluster_begin(struct kt_store *s, uint64_t now, char *err, size_t errlen)
{
	if (s->state == KT_STORE_DOWN && now < s->next_retry_ns)
		return rs_backing_off(s, now, err, errlen);
	return 0;
}

static int cluster_route(const struct kt_store *s, const char *key)
{
	(void)s;
	return key_slot(key);
}

static int cluster_init(struct kt_store *s)
{
	struct rt_cluster *c = calloc(1, sizeof(*c));

	s->tp = c;
	if (!c)
		return -ENOMEM;
	c->cl_last = -1;
	c->cn = calloc(CL_MAX_NODES, sizeof(*c->cn));
	c->slot_node = malloc(CL_SLOTS * sizeof(*c->slot_node));
	if (!c->cn || !c->slot_node)
		return -ENOMEM;
	for (int i = 0; i < CL_SLOTS; i++)
		c->slot_node[i] = -1;
	return 0;
}

static void cluster_close(struct kt_store *s)
{
	if (!s->tp)
		return;
	for (int i = 0; C(s)->cn && i < C(s)->n_cn; i++)
		cl_drop(s, i);
	free(C(s)->cn);
	free(C(s)->slot_node);
	free(s->tp);
	s->tp = NULL;
}

static bool cluster_connected(const struct kt_store *s)
{
	for (int i = 0; i < C(s)->n_cn; i++)
		if (C(s)->cn[i].c)
			return true;
	return false;
}

static bool cluster_endpoint(const struct kt_store *s, char *buf, size_t len)
{
	const struct rt_cluster *c = C(s);

	if (c->cl_last < 0 || !c->cn[c->cl_last].c)
		return false;
	snprintf(buf, len, "%s:%d", c->cn[c->cl_last].host, c->cn[c->cl_last].port);
	return true;
}

const struct kt_rtransport kt_rtrans_cluster = {
	.name = "cluster",
	.backoff_max_ms = KT_STORE_CLUSTER_BACKOFF_MAX_MS,
	.init = cluster_init,
	.close = cluster_close,
	.drop = NULL, /* cl_state goes DOWN only once no master is connected */
	.begin = cluster_begin,
	.route = cluster_route,
	.run = cl_run,
	.check = cl_check,
	.ping = cl_ping,
	.connected = cluster_connected,
	.endpoint = cluster_endpoint,
};
