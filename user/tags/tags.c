// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Tag limits: query servers, query-tag buckets and the hit exchange, on one
 * epoll set the daemon watches (tags.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <arpa/inet.h>

#include "kernel/bpf_loader.h" /* kt_mkdir_p */
#include "kthrottle.h"
#include "base/log.h"
#include "store/store.h"
#include "store/storeq.h"
#include "tags/tags.h"
#include "tags/xdp_maps.h"
#include "tags/tags_int.h"


static void free_job(void *p)
{
	struct xjob *j = p;

	if (!j)
		return;
	for (int i = 0; i < j->n_chunks; i++)
		free(j->chunks[i]);
	free(j->chunks);
	free(j->lens);
	free(j->in);
	free(j);
}

static void job_in(void *ctx, const char *chunk, size_t len)
{
	struct xjob *j = ctx;

	if (j->in_len + len + 1 > j->in_cap) {
		size_t cap = (j->in_cap ? j->in_cap * 2 : 4096);
		char *p;

		while (cap < j->in_len + len + 1)
			cap *= 2;
		p = realloc(j->in, cap);
		if (!p) {
			j->in_oom = true;
			return;
		}
		j->in = p;
		j->in_cap = cap;
	}
	memcpy(j->in + j->in_len, chunk, len);
	j->in_len += len;
	if (len && chunk[len - 1] != '\n')
		j->in[j->in_len++] = '\n'; /* a chunk's last line always ends */
	j->in_entries++;
}

static void run_job(struct kt_store *s, void *p)
{
	struct xjob *j = p;

	j->ret = kt_store_tag_exchange(s, j->limit, j->node, j->keep_ms, (const char *const *)j->chunks,
				       j->lens, j->n_chunks, j->last_id, job_in, j, &j->more, j->err,
				       sizeof(j->err));
}

/* ---- report lines ---- */

struct builder {
	struct xjob *j;
	struct tlimit *l;
	bool full;
};

/* Appends "<kind> <hits> <tag>\n" to the job's last chunk, or a new one;
 * false once KT_STORE_TAG_MAX_CHUNKS are full (the caller keeps the hits
 * for the next report). */
static bool append(struct builder *b, char kind, const char *tag, size_t len, uint64_t hits)
{
	struct xjob *j = b->j;
	char head[32];
	int hn = snprintf(head, sizeof(head), "%c %llu ", kind, (unsigned long long)hits);
	size_t need = (size_t)hn + len + 1;

	if (!b->full && (j->n_chunks == 0 || j->lens[j->n_chunks - 1] + need > KT_STORE_TAG_CHUNK_MAX)) {
		char *c = j->n_chunks < KT_STORE_TAG_MAX_CHUNKS ? malloc(KT_STORE_TAG_CHUNK_MAX) : NULL;

		if (!c) {
			b->full = true;
		} else {
			j->chunks[j->n_chunks] = c;
			j->lens[j->n_chunks++] = 0;
		}
	}
	if (b->full)
		return false;
	char *c = j->chunks[j->n_chunks - 1] + j->lens[j->n_chunks - 1];
	memcpy(c, head, (size_t)hn);
	memcpy(c + hn, tag, len);
	c[hn + len] = '\n';
	j->lens[j->n_chunks - 1] += need;
	b->l->st.tags_sent++;
	return true;
}

static void add_line(void *ctx, const char *tag, size_t len, uint64_t hits)
{
	struct builder *b = ctx;

	if (!append(b, 'q', tag, len, hits))
		kt_tagtab_unharvest(b->l->tab, tag, len, hits);
}

/* ---- XDP source tags: a key as report text, "<address>/<prefix>" ---- */

static void key_text(const struct kt_tag_key *k, char *buf, size_t len)
{
	char a[INET6_ADDRSTRLEN];

	inet_ntop(k->family == 4 ? AF_INET : AF_INET6, k->addr, a, sizeof(a));
	snprintf(buf, len, "%s/%u", a, k->prefix_len);
}

static bool key_parse(const char *p, size_t n, uint32_t xid, struct kt_tag_key *k)
{
	char buf[INET6_ADDRSTRLEN + 8], *slash, *end;
	unsigned long len;

	if (n >= sizeof(buf))
		return false;
	memcpy(buf, p, n);
	buf[n] = 0;
	slash = strchr(buf, '/');
	if (!slash)
		return false;
	*slash = 0;
	memset(k, 0, sizeof(*k));
	k->tag_limit = xid;
	if (inet_pton(AF_INET, buf, k->addr) == 1)
		k->family = 4;
	else if (inet_pton(AF_INET6, buf, k->addr) == 1)
		k->family = 6;
	else
		return false;
	errno = 0;
	len = strtoul(slash + 1, &end, 10);
	if (errno || *end || end == slash + 1 || len > (k->family == 4 ? 32u : 128u))
		return false;
	k->prefix_len = (uint8_t)len;
	/* masked, as the program keys it */
	for (unsigned i = 0; i < 16; i++) {
		unsigned bits = i * 8 >= len ? 0 : len - i * 8 >= 8 ? 8 : len - i * 8;

		k->addr[i] &= (uint8_t)(0xff00u >> bits);
	}
	return true;
}

static void xh_add(struct tlimit *l, const struct kt_tag_key *k, uint64_t hits)
{
	if (l->n_xh == l->cap_xh) {
		size_t cap = l->cap_xh ? l->cap_xh * 2 : 256;
		struct xhit *p = realloc(l->xh, cap * sizeof(*p));

		if (!p)
			return; /* lost to ENOMEM: the other nodes undercount these */
		l->xh = p;
		l->cap_xh = cap;
	}
	l->xh[l->n_xh].key = *k;
	l->xh[l->n_xh++].hits = hits;
}

static void xdp_collect(void *ctx, const struct kt_tag_key *key, uint64_t hits)
{
	struct kt_tags *t = ctx;

	for (int i = 0; i < t->n; i++)
		if (t->l[i].cfg.xdp && t->l[i].xid == key->tag_limit)
			xh_add(&t->l[i], key, hits);
}

/* One report line, as parsed by next_line. */
struct rline {
	bool ok;         /* "<q|x> <hits> <tag>"; else the rest is unset */
	char kind;
	uint64_t hits;
	const char *tag;
	size_t tag_len;
};

/* The line at *p (up to '\n' or end) into *r; advances *p past it. False
 * once *p reaches end. */
static bool next_line(const char **p, const char *end, struct rline *r)
{
	const char *s = *p, *nl;
	size_t n, i = 2, d = 0;
	uint64_t h = 0;

	if (s >= end)
		return false;
	nl = memchr(s, '\n', (size_t)(end - s));
	n = nl ? (size_t)(nl - s) : (size_t)(end - s);
	*p = s + n + 1;
	r->ok = false;
	if (n < 5 || (s[0] != 'q' && s[0] != 'x') || s[1] != ' ')
		return true;
	for (; i < n && s[i] >= '0' && s[i] <= '9' && d < 13; i++, d++)
		h = h * 10 + (uint64_t)(s[i] - '0');
	if (!d || i >= n || s[i] != ' ' || h == 0 || h > HITS_MAX)
		return true;
	i++;
	if (n - i < 1 || n - i > KT_TAG_MAX_LEN || memchr(s + i, 0, n - i))
		return true;
	*r = (struct rline){ .ok = true, .kind = s[0], .hits = h, .tag = s + i, .tag_len = n - i };
	return true;
}

/* The other nodes' hits: a token each from our buckets. */
static void apply_remote(struct kt_tags *t, struct tlimit *l, const char *buf, size_t len, uint64_t now)
{
	const char *p = buf, *end = buf + len;
	struct kt_tag_key keys[64];
	uint64_t hits_of[64];
	size_t nk = 0;
	struct rline r;

	while (next_line(&p, end, &r)) {
		if (!r.ok) {
			l->st.bad_remote++;
		} else if (r.kind == 'q') {
			kt_tagtab_debit(l->tab, r.tag, r.tag_len, r.hits, now);
			l->st.remote_tags++;
		} else if (!l->cfg.xdp || !t->xdp) {
			l->st.remote_tags++; /* a source this node does not see */
		} else if (!key_parse(r.tag, r.tag_len, l->xid, &keys[nk])) {
			l->st.bad_remote++;
		} else {
			l->st.remote_tags++;
			l->st.xdp_remote_hits += r.hits;
			hits_of[nk++] = r.hits;
			if (nk == sizeof(keys) / sizeof(keys[0])) {
				kt_xdp_tags_debit(t->xdp, keys, hits_of, nk);
				nk = 0;
			}
		}
	}
	if (nk)
		kt_xdp_tags_debit(t->xdp, keys, hits_of, nk);
}

/* A failed report: its hits go back, to be carried by the next one. */
static void put_back(struct tlimit *l, const struct xjob *j)
{
	for (int c = 0; c < j->n_chunks; c++) {
		const char *p = j->chunks[c], *end = p + j->lens[c];
		struct kt_tag_key k;
		struct rline r;

		while (next_line(&p, end, &r)) {
			if (r.ok && r.kind == 'q')
				kt_tagtab_unharvest(l->tab, r.tag, r.tag_len, r.hits);
			else if (r.ok && key_parse(r.tag, r.tag_len, l->xid, &k))
				xh_add(l, &k, r.hits);
		}
	}
}

/* ---- the query servers' decisions ---- */

static int decide(void *ctx, const char *tag, size_t len)
{
	struct tlimit *l = ctx;

	return kt_tagtab_take(l->tab, tag, len, kt_clock_ns()) == KT_ADMIT;
}

/* ---- lifecycle ---- */

static struct kt_tagtab_opts tab_opts(const struct kt_tag_limit_cfg *c)
{
	return (struct kt_tagtab_opts){ .rate = c->rate, .burst = c->burst, .max_tags = c->max_tags,
					.idle_expiry_ns = c->idle_expiry_ns };
}

static int open_query(struct tlimit *l, char *err, size_t errlen)
{
	struct kt_query_opts o = { .socket_path = l->cfg.query_socket,
				   .tcp_addr = l->cfg.query_port ? l->cfg.query_addr : NULL,
				   .tcp_port = l->cfg.query_port };
	char e[256];
	int ret;

	if (!l->cfg.query)
		return 0;
	if (o.socket_path) {
		/* the socket's directory, as for the control socket */
		char dir[PATH_MAX], *slash;

		snprintf(dir, sizeof(dir), "%s", o.socket_path);
		slash = strrchr(dir, '/');
		if (slash && slash != dir) {
			*slash = 0;
			if ((ret = kt_mkdir_p(dir, 0755))) {
				snprintf(err, errlen, "tag limit %s (line %d): query: cannot create %s: %s",
					 l->cfg.name, l->cfg.line, dir, strerror(-ret));
				return ret;
			}
		}
	}
	ret = kt_query_open(&o, decide, l, &l->query, e, sizeof(e));
	if (ret)
		snprintf(err, errlen, "tag limit %s (line %d): query: %s", l->cfg.name, l->cfg.line, e);
	return ret;
}

static void close_limit(struct tlimit *l)
{
	if (l->q)
		kt_storeq_close(l->q); /* a job in flight finishes on its own */
	if (l->evfd >= 0)
		close(l->evfd);
	kt_query_close(l->query);
	kt_tagtab_free(l->tab);
	free(l->cfg.query_socket);
	free(l->xh);
	memset(l, 0, sizeof(*l));
	l->evfd = -1;
}

void kt_tags_destroy(struct kt_tags *t)
{
	if (!t)
		return;
	for (int i = 0; i < t->n; i++)
		close_limit(&t->l[i]);
	free(t->l);
	kt_xdp_tags_close(t->xdp); /* pins stay: enforcement goes on */
	if (t->timerfd >= 0)
		close(t->timerfd);
	if (t->epfd >= 0)
		close(t->epfd);
	free(t);
}

static int watch(struct kt_tags *t, int fd, uint32_t what)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = what };

	return epoll_ctl(t->epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

/* The parts of limit i that are not carried over from an older one: its
 * store worker (when the store is redis) and, if `query`, its listeners. */
static int open_limit(struct kt_tags *t, int i, const struct kt_config *cfg, bool query, char *err,
		      size_t errlen)
{
	struct tlimit *l = &t->l[i];
	struct kt_store *store;
	int ret;

	if (query && (ret = open_query(l, err, errlen)))
		return ret;
	if (cfg->store.kind == KT_STORE_REDIS) {
		l->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (l->evfd < 0) {
			ret = -errno;
			snprintf(err, errlen, "tag limit %s: eventfd: %s", l->cfg.name, strerror(-ret));
			return ret;
		}
		if ((ret = kt_store_open(&store, &cfg->store, err, errlen)))
			return ret;
		if ((ret = kt_storeq_open(&l->q, store, l->evfd, err, errlen)))
			return ret;
		l->st.exchange = true;
	}
	return 0;
}

static int make_set(struct kt_tags **out, const struct kt_config *cfg, char *err, size_t errlen)
{
	struct kt_tags *t = calloc(1, sizeof(*t));

	*out = NULL;
	if (!t || !(t->l = calloc((size_t)cfg->n_tags, sizeof(*t->l)))) {
		free(t);
		snprintf(err, errlen, "tags: out of memory");
		return -ENOMEM;
	}
	t->n = cfg->n_tags;
	for (int i = 0; i < t->n; i++)
		t->l[i].evfd = -1;
	snprintf(t->node, sizeof(t->node), "%s", cfg->node_name ? cfg->node_name : "node");
	snprintf(t->xdp_pin, sizeof(t->xdp_pin), "%s/" KT_TAGS_PIN_SUBDIR, cfg->pin_dir);
	t->timerfd = timerfd_create(CLOCK_BOOTTIME, TFD_CLOEXEC | TFD_NONBLOCK);
	t->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (t->timerfd < 0 || t->epfd < 0 || watch(t, t->timerfd, EV_TIMER)) {
		snprintf(err, errlen, "tags: %s", strerror(errno));
		kt_tags_destroy(t);
		return -errno;
	}
	*out = t;
	return 0;
}

static int copy_cfg(struct tlimit *l, const struct kt_tag_limit_cfg *c, char *err, size_t errlen)
{
	l->cfg = *c;
	l->cfg.query_socket = c->query_socket ? strdup(c->query_socket) : NULL;
	if (c->query_socket && !l->cfg.query_socket) {
		snprintf(err, errlen, "tags: out of memory");
		return -ENOMEM;
	}
	snprintf(l->st.name, sizeof(l->st.name), "%s", c->name);
	l->st.rate = c->rate;
	l->st.burst = c->burst;
	l->st.report_ns = c->report_ns;
	return 0;
}

/* Registers what limit i has on the epoll set. */
static int watch_limit(struct kt_tags *t, int i, char *err, size_t errlen)
{
	struct tlimit *l = &t->l[i];
	int ret = 0;

	if (l->query)
		ret = watch(t, kt_query_fd(l->query), EV_QUERY(i));
	if (!ret && l->evfd >= 0)
		ret = watch(t, l->evfd, EV_STORE(i));
	if (ret)
		snprintf(err, errlen, "tag limit %s: epoll: %s", l->cfg.name, strerror(-ret));
	return ret;
}

static void arm_timer(struct kt_tags *t, uint64_t now);


int kt_tags_create(struct kt_tags **out, const struct kt_config *cfg, char *err, size_t errlen)
{
	struct kt_tags *t;
	uint64_t now = kt_clock_ns();
	int ret;

	*out = NULL;
	if (!cfg->n_tags)
		return 0;
	if ((ret = make_set(&t, cfg, err, errlen)))
		return ret;
	for (int i = 0; i < t->n; i++) {
		struct tlimit *l = &t->l[i];
		struct kt_tagtab_opts o;

		if ((ret = copy_cfg(l, &cfg->tags[i], err, errlen)))
			goto fail;
		o = tab_opts(&l->cfg);
		if ((ret = kt_tagtab_new(&o, &l->tab))) {
			snprintf(err, errlen, "tag limit %s: %s", l->cfg.name, strerror(-ret));
			goto fail;
		}
		if ((ret = open_limit(t, i, cfg, true, err, errlen)) || (ret = watch_limit(t, i, err, errlen)))
			goto fail;
		l->next_report_ns = now; /* the first exchange finds the stream's end */
		l->next_expire_ns = now + l->cfg.idle_expiry_ns / 4;
		l->xid = (uint32_t)i;
	}
	if ((ret = kt_tags_xdp_start(t, cfg, err, errlen)))
		goto fail;
	arm_timer(t, now);
	*out = t;
	return 0;
fail:
	kt_tags_destroy(t);
	return ret;
}

static int find_old(const struct kt_tags *old, const char *name)
{
	for (int i = 0; old && i < old->n; i++)
		if (!strcmp(old->l[i].cfg.name, name))
			return i;
	return -1;
}

static bool same_listeners(const struct kt_tag_limit_cfg *a, const struct kt_tag_limit_cfg *b)
{
	return a->query == b->query && a->query_port == b->query_port &&
	       !strcmp(a->query_addr, b->query_addr) &&
	       !strcmp(a->query_socket ? a->query_socket : "", b->query_socket ? b->query_socket : "");
}


int kt_tags_reload(struct kt_tags **out, struct kt_tags *old, const struct kt_config *cfg, char *err,
		   size_t errlen)
{
	struct kt_tags *t;
	uint64_t now = kt_clock_ns();
	int ret, i;

	*out = NULL;
	if (!cfg->n_tags) {
		kt_tags_destroy(old);
		return 0;
	}
	if ((ret = make_set(&t, cfg, err, errlen)))
		return ret;
	/* first everything that can fail, without touching old: new tables,
	 * store workers, listeners of new tag limits. A kept limit whose
	 * listeners changed is rebound in the commit below, after its old
	 * listeners close (they may hold the same path or port). */
	for (i = 0; i < t->n; i++) {
		struct tlimit *l = &t->l[i];
		int k = find_old(old, cfg->tags[i].name);
		struct kt_tagtab_opts o;

		if ((ret = copy_cfg(l, &cfg->tags[i], err, errlen)))
			goto fail;
		o = tab_opts(&l->cfg);
		if (k < 0 && (ret = kt_tagtab_new(&o, &l->tab))) {
			snprintf(err, errlen, "tag limit %s: %s", l->cfg.name, strerror(-ret));
			goto fail;
		}
		if ((ret = open_limit(t, i, cfg, k < 0, err, errlen)))
			goto fail;
		l->xid = k >= 0 ? old->l[k].xid : UINT32_MAX;
	}
	/* XDP ids: a kept limit keeps its id (its buckets), a new one takes
	 * the lowest free */
	for (i = 0; i < t->n; i++) {
		/* first an id no old limit had (its buckets may still be there),
		 * then any id no new limit has */
		for (int pass = 0; pass < 2 && t->l[i].xid == UINT32_MAX; pass++) {
			for (uint32_t id = 0; id < KT_MAX_TAG_LIMITS && t->l[i].xid == UINT32_MAX; id++) {
				bool used = false;

				for (int m = 0; m < t->n && !used; m++)
					used = t->l[m].xid == id;
				for (int m = 0; pass == 0 && old && m < old->n && !used; m++)
					used = old->l[m].xid == id;
				if (!used)
					t->l[i].xid = id;
			}
		}
	}
	if (kt_tags_xdp_total(cfg) && (ret = kt_tags_resolve_ifaces(t, err, errlen)))
		goto fail;
	if (kt_tags_xdp_total(cfg) && !(old && old->xdp) && (ret = kt_tags_xdp_open(t, cfg, err, errlen)))
		goto fail;
	/* commit: move tables, listeners and stream positions over */
	for (i = 0; i < t->n; i++) {
		struct tlimit *l = &t->l[i];
		int k = find_old(old, cfg->tags[i].name);
		struct kt_tagtab_opts o = tab_opts(&l->cfg);

		l->next_report_ns = now + l->cfg.report_ns;
		l->next_expire_ns = now + l->cfg.idle_expiry_ns / 4;
		if (k < 0) {
			l->next_report_ns = now;
			continue;
		}
		struct tlimit *ol = &old->l[k];
		l->xh = ol->xh;
		l->n_xh = ol->n_xh;
		l->cap_xh = ol->cap_xh;
		ol->xh = NULL;
		ol->n_xh = ol->cap_xh = 0;
		memcpy(l->last_id, ol->last_id, sizeof(l->last_id));
		struct kt_tag_stat keep = l->st;
		l->st = ol->st;
		l->st.rate = keep.rate;
		l->st.burst = keep.burst;
		l->st.report_ns = keep.report_ns;
		l->st.exchange = keep.exchange;
		l->tab = ol->tab;
		ol->tab = NULL;
		kt_tagtab_reconfigure(l->tab, &o, now); /* validated by the config */
		if (same_listeners(&ol->cfg, &l->cfg)) {
			l->query = ol->query;
		} else {
			char e[KT_ERR_LEN];

			kt_query_close(ol->query);
			if (open_query(l, e, sizeof(e))) {
				kt_warn("reload: %s: its queries are not answered", e);
				snprintf(l->st.last_error, sizeof(l->st.last_error), "%s", e);
			}
		}
		ol->query = NULL;
		if (ol->in_flight && ol->q) {
			/* the report in flight ends with old's worker: wait for it a
			 * moment so its hits are not lost (store calls are bounded) */
			if (kt_storeq_wait(ol->q, 2000ULL * 1000000ULL) == 0) {
				struct xjob *j = kt_storeq_take(ol->q);

				if (j && j->ret) {
					put_back(l, j);
				} else if (j) {
					memcpy(l->last_id, j->last_id, sizeof(l->last_id));
					if (j->in && !j->in_oom)
						apply_remote(t, l, j->in, j->in_len, now);
				}
				free_job(j);
			}
			ol->in_flight = false;
		}
	}
	kt_tags_xdp_reload(t, old, cfg);
	for (i = 0; i < t->n; i++)
		if ((ret = watch_limit(t, i, err, errlen)))
			break; /* epoll_ctl on fds we own: only ENOMEM; run without */
	kt_tags_destroy(old);
	arm_timer(t, now);
	*out = t;
	return 0;
fail:
	kt_tags_destroy(t);
	return ret;
}

int kt_tags_fd(const struct kt_tags *t)
{
	return t ? t->epfd : -1;
}

/* ---- running ---- */

static void take_answer(struct kt_tags *t, struct tlimit *l, uint64_t now)
{
	struct xjob *j;
	uint64_t v;

	while (read(l->evfd, &v, sizeof(v)) > 0)
		;
	j = kt_storeq_take(l->q);
	if (!j)
		return;
	l->in_flight = false;
	if (j->ret || j->in_oom) {
		if (l->st.store_ok || !l->st.report_errors)
			kt_warn("tag limit %s: exchange failed, throttling on this node's counts: %s",
				l->cfg.name, j->ret ? j->err : "out of memory");
		l->st.store_ok = false;
		l->st.report_errors++;
		snprintf(l->st.last_error, sizeof(l->st.last_error), "%s",
			 j->ret ? j->err : "out of memory");
		put_back(l, j);
		uint64_t retry = now + (l->cfg.report_ns < RETRY_NS ? l->cfg.report_ns : RETRY_NS);
		if ((int64_t)(retry - l->next_report_ns) < 0)
			l->next_report_ns = retry;
		free_job(j);
		return;
	}
	if (!l->st.store_ok && l->st.report_errors)
		kt_info("tag limit %s: exchange resumed", l->cfg.name);
	l->st.store_ok = true;
	l->st.reports++;
	l->st.last_ok_ns = now;
	l->st.remote_entries += (uint64_t)j->in_entries;
	memcpy(l->last_id, j->last_id, sizeof(l->last_id));
	if (j->in)
		apply_remote(t, l, j->in, j->in_len, now);
	if (j->more)
		l->next_report_ns = now; /* read on at once */
	free_job(j);
}

static void post_report(struct kt_tags *t, struct tlimit *l, uint64_t now)
{
	struct xjob *j = calloc(1, sizeof(*j));
	struct builder b = { .j = j, .l = l };

	if (j) {
		j->chunks = calloc(KT_STORE_TAG_MAX_CHUNKS, sizeof(*j->chunks));
		j->lens = calloc(KT_STORE_TAG_MAX_CHUNKS, sizeof(*j->lens));
	}
	if (!j || !j->chunks || !j->lens) {
		free_job(j);
		l->next_report_ns = now + l->cfg.report_ns;
		return;
	}
	snprintf(j->limit, sizeof(j->limit), "%s", l->cfg.name);
	snprintf(j->node, sizeof(j->node), "%s", t->node);
	memcpy(j->last_id, l->last_id, sizeof(j->last_id));
	j->keep_ms = l->cfg.report_ns / 1000000ULL * 10;
	if (j->keep_ms < KEEP_MIN_MS)
		j->keep_ms = KEEP_MIN_MS;
	kt_tagtab_harvest(l->tab, add_line, &b);
	if (t->xdp && l->cfg.xdp) {
		size_t k = 0;

		kt_xdp_tags_harvest(t->xdp, xdp_collect, t); /* every limit's: each keeps its own */
		for (; k < l->n_xh; k++) {
			char text[INET6_ADDRSTRLEN + 8];

			key_text(&l->xh[k].key, text, sizeof(text));
			if (!append(&b, 'x', text, strlen(text), l->xh[k].hits))
				break;
			l->st.xdp_hits_sent += l->xh[k].hits;
		}
		if (k) /* xh may still be NULL: nothing harvested yet */
			memmove(l->xh, l->xh + k, (l->n_xh - k) * sizeof(*l->xh));
		l->n_xh -= k;
	}
	if (kt_storeq_post(l->q, run_job, j, free_job) == 0) {
		l->in_flight = true;
	} else {
		put_back(l, j);
		free_job(j);
	}
	l->next_report_ns = now + l->cfg.report_ns;
}

static void arm_timer(struct kt_tags *t, uint64_t now)
{
	uint64_t at = 0;
	struct itimerspec its = { 0 };

	for (int i = 0; i < t->n; i++) {
		struct tlimit *l = &t->l[i];

		if (l->q && !l->in_flight && (!at || (int64_t)(l->next_report_ns - at) < 0))
			at = l->next_report_ns;
		if (!at || (int64_t)(l->next_expire_ns - at) < 0)
			at = l->next_expire_ns;
	}
	if (!at)
		return;
	if ((int64_t)(at - now) <= 0)
		at = now + 1;
	its.it_value.tv_sec = (time_t)(at / 1000000000ULL);
	its.it_value.tv_nsec = (long)(at % 1000000000ULL);
	timerfd_settime(t->timerfd, TFD_TIMER_ABSTIME, &its, NULL);
}

void kt_tags_run(struct kt_tags *t, uint64_t now)
{
	struct epoll_event ev[16];
	int n, i;
	uint64_t v;

	n = epoll_wait(t->epfd, ev, 16, 0);
	for (i = 0; i < n; i++) {
		uint32_t w = ev[i].data.u32;

		if (w == EV_TIMER) {
			while (read(t->timerfd, &v, sizeof(v)) > 0)
				;
		} else if ((int)(w >> 1) < t->n) {
			struct tlimit *l = &t->l[w >> 1];

			if (w & 1)
				take_answer(t, l, now);
			else
				kt_query_run(l->query);
		}
	}
	for (i = 0; i < t->n; i++) {
		struct tlimit *l = &t->l[i];

		if (l->q && !l->in_flight && (int64_t)(now - l->next_report_ns) >= 0)
			post_report(t, l, now);
		if ((int64_t)(now - l->next_expire_ns) >= 0) {
			kt_tagtab_expire(l->tab, now);
			l->next_expire_ns = now + l->cfg.idle_expiry_ns / 4;
		}
	}
	arm_timer(t, now);
}

int kt_tags_count(const struct kt_tags *t)
{
	return t ? t->n : 0;
}

void kt_tags_get(const struct kt_tags *t, int i, struct kt_tag_stat *out)
{
	const struct tlimit *l = &t->l[i];

	*out = l->st;
	kt_tagtab_stats(l->tab, &out->tab);
	memset(&out->query, 0, sizeof(out->query));
	if (l->query)
		kt_query_get_stats(l->query, &out->query);
	out->xdp = l->cfg.xdp;
	if (t->xdp && l->cfg.xdp) {
		struct kt_xdp_tags_stats xs;

		if (kt_xdp_tags_stats(t->xdp, l->xid, &xs) == 0) {
			out->xdp_buckets = xs.buckets;
			out->xdp_admitted = xs.admitted;
			out->xdp_dropped = xs.dropped;
		}
	}
}

int kt_tags_take(struct kt_tags *t, int i, const char *tag, size_t len, uint64_t now)
{
	return kt_tagtab_take(t->l[i].tab, tag, len, now);
}
