// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* kt-fakekube: a fake Kubernetes API server for testing the daemon's pod
 * client. It serves the real API's pod list and watch wire format over TLS
 * on 127.0.0.1, requires a bearer token, and keeps its pods in memory; the
 * test changes them through stdin and sees the results on open watches.
 *
 * Usage: kt-fakekube --cert CERT.pem --key KEY.pem --token TOKEN [--port N]
 *   Port 0 or absent picks a free port. Prints "ready PORT" once listening.
 *   Bad arguments: one line on stderr, exit 2. EOF on stdin or SIGTERM:
 *   clean shutdown, exit 0.
 *
 * HTTP (GET only; everything else is a Status object as the real server's):
 *   no "Authorization: Bearer TOKEN"           401 Unauthorized
 *   /api/v1/pods, /api/v1/namespaces/NS/pods   PodList, or a watch stream
 *                                              with watch=1|true
 *   anything else                              404 NotFound
 *   fieldSelector: comma-separated spec.nodeName=V (or ==V) terms; other
 *     fields are a 400 like the real server's (or parsed and then ignored
 *     after "ignore fieldsel on", as by a proxy that drops it).
 *     labelSelector is IGNORED: the client filters labels itself.
 *   list paging: limit=N gives at most N items and, when more remain,
 *     metadata.continue (opaque to the client; here "RV:INDEX") and
 *     remainingItemCount; continue=TOKEN gives the next page, at the list's
 *     resourceVersion. Pages are cut from the current pods, not a snapshot.
 *     A token older than the compaction floor (or one of the next N after
 *     "expire-continue N") is an HTTP 410 Expired, as the real server's.
 *     "ignore limit on" sends everything in one answer.
 *   watch: resourceVersion absent/"0" starts with ADDED for every matching
 *     pod; otherwise the history after it is replayed (a version newer than
 *     the current one is accepted and gets only the changes after it). A
 *     version below the compaction floor gets an ERROR 410 "Expired" event
 *     and the stream ends (or an HTTP 410, see gone-http). timeoutSeconds=S
 *     ends the stream cleanly after S seconds (0/absent: never).
 *     allowWatchBookmarks=true enables BOOKMARK events. Pods changing node
 *     are ADDED/DELETED for a watch whose field selector they enter/leave,
 *     as in the real server.
 *   Resource versions are one global counter, starting at 1, bumped by every
 *   change.
 *
 * Stdin: one command per line; each is applied (and its events queued to
 * open watches) before the reply "ok" or "error WHAT" is printed, so the
 * test can read the reply to synchronize. NODE "-" means unscheduled.
 *   add NS NAME UID NODE QOS [k=v,...|-]   new pod (QOS Guaranteed|Burstable|
 *                                          BestEffort), phase Running
 *   labels UID [k=v,...|-]    replace labels             MODIFIED
 *   annotations UID [k=v,...|-]  replace annotations     MODIFIED
 *   move UID NODE             change spec.nodeName       per field selector
 *   phase UID PHASE           change status.phase        MODIFIED
 *   delete UID                                           DELETED
 *   bookmark                  BOOKMARK at the current version to watches
 *                             that allowed them
 *   compact                   compaction floor := current version; every
 *                             open watch gets ERROR 410 and ends
 *   gone-http on|off          too-old watches get HTTP 410 instead of an
 *                             ERROR event (default off)
 *   drop                      break every open watch stream (no final chunk)
 *   down / up                 stop the server (connections refused, streams
 *                             broken) / listen again on the same port
 *   stats                     "lists=N watches=M open=K unauthorized=U
 *                             failed=F" then "ok": list and watch requests
 *                             answered (after auth and path checks), watch
 *                             streams open right now, requests refused with
 *                             401, requests answered by "fail"
 *   token NEW                 from now on only NEW is accepted: the old token
 *                             gets 401 Unauthorized, as an expired one does
 *   fail CODE SECS N          the next N list or watch requests (after auth
 *                             and path checks) get HTTP CODE (400..599) and a
 *                             Status whose message spans two lines, with
 *                             "Retry-After: SECS" when SECS >= 0
 *   times                     "times T1 T2 ..." then "ok": the arrival times
 *                             (CLOCK_MONOTONIC ms) of the last up to 16
 *                             requests of any kind, oldest first
 *   filler N [NODE]           N more pods of other nodes (node-f0..node-f99),
 *                             namespace filler, app=filler, made when served:
 *                             in lists and watches from version 0, never
 *                             changed, not in the history; with NODE every
 *                             filler pod is on NODE instead
 *   ignore fieldsel|limit on|off   serve as if the parameter were absent
 *   expire-continue N         the next N list requests with a continue
 *                             token get HTTP 410 Expired
 *   (stats also counts "pages=P": list requests with a continue token)
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <json-c/json.h>
#include <microhttpd.h>

struct pod {
	char ns[64], name[254], uid[128], node[254], qos[16], phase[32];
	char labels[1024]; /* "k=v,k=v", validated on input */
	char annots[1024]; /* the same, metadata.annotations */
	unsigned long long rv;
};

/* One change in the history. A watch decides per its field selector what
 * the change looks like to it, so both the old and the new state are kept. */
struct event {
	struct event *next;
	unsigned long long rv;
	bool has_prev, has_cur;
	struct pod prev, cur;
};

struct line {
	struct line *next;
	size_t len;
	char s[];
};

struct filter {
	bool any_ns, any_node;
	char ns[64], node[254];
};

struct watch {
	struct watch *next;
	struct filter f;
	bool bookmarks;
	bool listed;  /* on g.watches (counts as open) */
	bool drop;    /* break the stream */
	bool ending;  /* end cleanly once the queue is drained */
	bool has_deadline;
	struct timespec deadline;
	unsigned long long last_rv;
	struct line *head, *tail, *cur;
	size_t off;
	struct MHD_Connection *conn;
};

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cond; /* broadcast whenever any watch has news */
	struct pod *pods;
	size_t npods, cap;
	struct event *hist, *hist_tail;
	struct watch *watches;
	unsigned long long rv, floor;
	unsigned long lists, nwatches, open, unauthorized, failed;
	bool gone_http, down;
	char token[4096];
	int fail_code, fail_secs; /* "fail": the next fail_n requests */
	unsigned long fail_n;
	unsigned long long times[16]; /* arrival ms, a ring: ntimes in all */
	unsigned long ntimes;
	size_t filler;                /* pods made when served, after pods[] */
	char filler_node[254];        /* their node; "" for node-f0..node-f99 */
	bool ignore_fieldsel, ignore_limit;
	unsigned long expire_continue, pages;
} g = { .mu = PTHREAD_MUTEX_INITIALIZER, .rv = 1 };

static void *xmalloc(size_t n)
{
	void *p = calloc(1, n);
	if (!p) {
		fprintf(stderr, "kt-fakekube: out of memory\n");
		abort();
	}
	return p;
}

static void now_mono(struct timespec *ts)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
}

static bool ts_before(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

static bool parse_ull(const char *s, unsigned long long *out)
{
	char *end;
	if (!s || !*s || *s == '-' || *s == '+')
		return false;
	errno = 0;
	*out = strtoull(s, &end, 10);
	return !errno && !*end;
}

static void add_str(json_object *o, const char *k, const char *v)
{
	json_object_object_add(o, k, json_object_new_string(v));
}

static json_object *status_obj(int code, const char *reason, const char *msg)
{
	json_object *o = json_object_new_object();
	add_str(o, "kind", "Status");
	add_str(o, "apiVersion", "v1");
	json_object_object_add(o, "metadata", json_object_new_object());
	add_str(o, "status", "Failure");
	add_str(o, "message", msg);
	add_str(o, "reason", reason);
	json_object_object_add(o, "code", json_object_new_int(code));
	return o;
}

/* Items inside a PodList carry no kind/apiVersion, watch objects do. */
static json_object *pod_obj(const struct pod *p, bool kind)
{
	json_object *o = json_object_new_object(), *md = json_object_new_object();
	json_object *spec = json_object_new_object(), *st = json_object_new_object();
	json_object *ctrs = json_object_new_array(), *c = json_object_new_object();
	char rv[32];

	if (kind) {
		add_str(o, "kind", "Pod");
		add_str(o, "apiVersion", "v1");
	}
	snprintf(rv, sizeof(rv), "%llu", p->rv);
	add_str(md, "name", p->name);
	add_str(md, "namespace", p->ns);
	add_str(md, "uid", p->uid);
	add_str(md, "resourceVersion", rv);
	add_str(md, "creationTimestamp", "2026-11-25T00:00:00Z");
	for (int m = 0; m < 2; m++) {
		const char *pairs = m ? p->annots : p->labels;

		if (pairs[0]) { /* the real server omits empty maps */
			json_object *l = json_object_new_object();
			char buf[sizeof(p->labels)], *save, *kv;
			snprintf(buf, sizeof(buf), "%s", pairs);
			for (kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
				char *eq = strchr(kv, '=');
				*eq = 0;
				add_str(l, kv, eq + 1);
			}
			json_object_object_add(md, m ? "annotations" : "labels", l);
		}
	}
	json_object_object_add(o, "metadata", md);
	if (p->node[0])
		add_str(spec, "nodeName", p->node);
	add_str(c, "name", "main");
	add_str(c, "image", "busybox");
	json_object_array_add(ctrs, c);
	json_object_object_add(spec, "containers", ctrs);
	json_object_object_add(o, "spec", spec);
	add_str(st, "phase", p->phase);
	add_str(st, "qosClass", p->qos);
	json_object_object_add(o, "status", st);
	return o;
}

static bool matches(const struct filter *f, const struct pod *p)
{
	return (f->any_ns || !strcmp(f->ns, p->ns)) && (f->any_node || !strcmp(f->node, p->node));
}

/* Queue one event line to a watch; takes ownership of obj. Caller holds mu. */
static void push(struct watch *w, const char *type, json_object *obj)
{
	json_object *ev = json_object_new_object();
	const char *s;
	struct line *l;
	size_t n;

	add_str(ev, "type", type);
	json_object_object_add(ev, "object", obj);
	s = json_object_to_json_string_ext(ev, JSON_C_TO_STRING_PLAIN);
	n = strlen(s);
	l = xmalloc(sizeof(*l) + n + 1);
	memcpy(l->s, s, n);
	l->s[n] = '\n';
	l->len = n + 1;
	if (w->tail)
		w->tail->next = l;
	else
		w->head = l;
	w->tail = l;
	json_object_put(ev);
}

static void push_pod(struct watch *w, const char *type, const struct pod *p)
{
	push(w, type, pod_obj(p, true));
	if (p->rv > w->last_rv)
		w->last_rv = p->rv;
}

static void push_expired(struct watch *w, unsigned long long rv)
{
	char msg[96];
	snprintf(msg, sizeof(msg), "too old resource version: %llu (%llu)", rv, g.floor);
	push(w, "ERROR", status_obj(410, "Expired", msg));
	w->ending = true;
}

/* How a change looks through this watch's field selector. */
static void deliver(struct watch *w, const struct event *e)
{
	bool was = e->has_prev && matches(&w->f, &e->prev);
	bool now = e->has_cur && matches(&w->f, &e->cur);

	if (e->rv <= w->last_rv) /* seen, or before a future starting version */
		return;
	if (was && now) {
		push_pod(w, "MODIFIED", &e->cur);
	} else if (now) {
		push_pod(w, "ADDED", &e->cur);
	} else if (was) { /* last state it saw, at the version of the change */
		struct pod p = e->prev;
		p.rv = e->rv;
		push_pod(w, "DELETED", &p);
	}
}

/* Append a change to the history and fan it out. Caller holds mu and has
 * already bumped g.rv into cur->rv (or the deletion's version). */
static void record(const struct pod *prev, const struct pod *cur)
{
	struct event *e = xmalloc(sizeof(*e));
	struct watch *w;

	e->rv = g.rv;
	if (prev) {
		e->has_prev = true;
		e->prev = *prev;
	}
	if (cur) {
		e->has_cur = true;
		e->cur = *cur;
	}
	if (g.hist_tail)
		g.hist_tail->next = e;
	else
		g.hist = e;
	g.hist_tail = e;
	for (w = g.watches; w; w = w->next)
		if (!w->drop && !w->ending)
			deliver(w, e);
	pthread_cond_broadcast(&g.cond);
}

static void unlist(struct watch *w)
{
	struct watch **pp;
	if (!w->listed)
		return;
	for (pp = &g.watches; *pp; pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	w->listed = false;
	g.open--;
}

/* True once the client has closed its end: a watch with nothing to send
 * would otherwise keep its connection thread blocked here forever. */
static bool peer_gone(struct watch *w)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(w->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	struct pollfd p;

	if (!ci)
		return false;
	p.fd = ci->connect_fd;
	p.events = POLLIN | POLLRDHUP;
	p.revents = 0;
	return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Content reader of a watch stream. Runs in the connection's own thread
 * (thread per connection), so it may block until there is something to
 * send; it wakes at least every second to notice a vanished client. */
static ssize_t watch_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct watch *w = cls;
	ssize_t ret;

	(void)pos;
	pthread_mutex_lock(&g.mu);
	for (;;) {
		struct timespec now, until;

		if (w->drop) {
			ret = MHD_CONTENT_READER_END_WITH_ERROR;
			break;
		}
		if (!w->cur && w->head) {
			w->cur = w->head;
			w->head = w->head->next;
			if (!w->head)
				w->tail = NULL;
			w->off = 0;
		}
		if (w->cur) {
			size_t n = w->cur->len - w->off;
			if (n > max)
				n = max;
			memcpy(buf, w->cur->s + w->off, n);
			w->off += n;
			if (w->off == w->cur->len) {
				free(w->cur);
				w->cur = NULL;
			}
			pthread_mutex_unlock(&g.mu);
			return (ssize_t)n;
		}
		now_mono(&now);
		if (w->ending || (w->has_deadline && !ts_before(&now, &w->deadline))) {
			ret = MHD_CONTENT_READER_END_OF_STREAM;
			break;
		}
		if (peer_gone(w)) {
			ret = MHD_CONTENT_READER_END_WITH_ERROR;
			break;
		}
		until = now;
		until.tv_sec += 1;
		if (w->has_deadline && ts_before(&w->deadline, &until))
			until = w->deadline;
		pthread_cond_timedwait(&g.cond, &g.mu, &until);
	}
	unlist(w); /* no longer open, even if MHD releases it later */
	pthread_mutex_unlock(&g.mu);
	return ret;
}

static void watch_free(void *cls)
{
	struct watch *w = cls;
	struct line *l, *n;

	pthread_mutex_lock(&g.mu);
	unlist(w);
	pthread_mutex_unlock(&g.mu);
	free(w->cur);
	for (l = w->head; l; l = n) {
		n = l->next;
		free(l);
	}
	free(w);
}

static enum MHD_Result send_json_ra(struct MHD_Connection *conn, unsigned code, json_object *o,
				    int retry_after)
{
	const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
	size_t n = strlen(s);
	char *body = malloc(n + 1);
	struct MHD_Response *r;
	enum MHD_Result ret;

	if (!body) {
		json_object_put(o);
		return MHD_NO;
	}
	memcpy(body, s, n + 1);
	json_object_put(o);
	r = MHD_create_response_from_buffer(n, body, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache, private");
	if (retry_after >= 0) {
		char ra[16];

		snprintf(ra, sizeof(ra), "%d", retry_after);
		MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, ra);
	}
	ret = MHD_queue_response(conn, code, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *conn, unsigned code, json_object *o)
{
	return send_json_ra(conn, code, o, -1);
}

static enum MHD_Result send_status(struct MHD_Connection *conn, unsigned code, const char *reason,
				   const char *msg)
{
	return send_json(conn, code, status_obj((int)code, reason, msg));
}

/* Accepts what the real server accepts for pods on spec.nodeName:
 * "spec.nodeName=V" or "spec.nodeName==V", several joined by commas. */
static bool parse_fieldsel(const char *sel, struct filter *f, char *err, size_t errlen)
{
	char buf[1024], *save, *term;

	if (!sel || !*sel)
		return true;
	if (strlen(sel) >= sizeof(buf)) {
		snprintf(err, errlen, "field selector too long");
		return false;
	}
	strcpy(buf, sel);
	for (term = strtok_r(buf, ",", &save); term; term = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(term, '='), *val;
		if (!eq || (eq > term && eq[-1] == '!')) {
			snprintf(err, errlen, "unsupported field selector: %s", term);
			return false;
		}
		val = eq + 1 + (eq[1] == '=');
		*eq = 0;
		if (strcmp(term, "spec.nodeName")) {
			snprintf(err, errlen, "field label not supported: %s", term);
			return false;
		}
		if (strlen(val) >= sizeof(f->node)) {
			snprintf(err, errlen, "node name too long");
			return false;
		}
		if (!f->any_node && strcmp(f->node, val)) { /* two nodes: nothing matches */
			snprintf(f->node, sizeof(f->node), "%s", "\x01");
			continue;
		}
		f->any_node = false;
		snprintf(f->node, sizeof(f->node), "%s", val);
	}
	return true;
}

/* The i-th filler pod (on node-f0..node-f99, or on "filler N NODE"'s NODE). */
static void filler_pod(size_t i, struct pod *p)
{
	memset(p, 0, sizeof(*p));
	snprintf(p->ns, sizeof(p->ns), "filler");
	snprintf(p->name, sizeof(p->name), "filler-%zu", i);
	snprintf(p->uid, sizeof(p->uid), "fff00000-0000-4000-8000-%012zx", i);
	if (g.filler_node[0])
		snprintf(p->node, sizeof(p->node), "%s", g.filler_node);
	else
		snprintf(p->node, sizeof(p->node), "node-f%zu", i % 100);
	snprintf(p->qos, sizeof(p->qos), "Burstable");
	snprintf(p->phase, sizeof(p->phase), "Running");
	snprintf(p->labels, sizeof(p->labels), "app=filler,tier=batch");
	p->rv = 1;
}

/* Pod number i of what lists serve: pods[], then the fillers. Caller holds mu. */
static const struct pod *served_pod(size_t i, struct pod *tmp)
{
	if (i < g.npods)
		return &g.pods[i];
	filler_pod(i - g.npods, tmp);
	return tmp;
}

static enum MHD_Result do_list(struct MHD_Connection *conn, const struct filter *f)
{
	const char *lim = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "limit");
	const char *cont = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "continue");
	json_object *o, *md, *items;
	unsigned long long limit = 0, list_rv, from = 0, remaining = 0;
	size_t i, n = 0, total;
	char rv[32], next[64] = "";
	struct pod tmp;

	if (lim && *lim && !parse_ull(lim, &limit))
		return send_status(conn, MHD_HTTP_BAD_REQUEST, "BadRequest", "invalid limit");
	pthread_mutex_lock(&g.mu);
	g.lists++;
	list_rv = g.rv;
	if (cont && *cont) {
		char *colon = strchr(cont, ':'), buf[64];

		g.pages++;
		if (!colon || strlen(cont) >= sizeof(buf)) {
			pthread_mutex_unlock(&g.mu);
			return send_status(conn, MHD_HTTP_BAD_REQUEST, "BadRequest",
					   "invalid continue token");
		}
		snprintf(buf, sizeof(buf), "%s", cont);
		buf[colon - cont] = 0;
		if (!parse_ull(buf, &list_rv) || !parse_ull(colon + 1, &from)) {
			pthread_mutex_unlock(&g.mu);
			return send_status(conn, MHD_HTTP_BAD_REQUEST, "BadRequest",
					   "invalid continue token");
		}
		if (g.expire_continue || list_rv < g.floor) {
			if (g.expire_continue)
				g.expire_continue--;
			pthread_mutex_unlock(&g.mu);
			return send_status(conn, MHD_HTTP_GONE, "Expired",
					   "The provided continue parameter is too old to display a "
					   "consistent list result. You can start a new list without "
					   "the continue parameter.");
		}
	}
	if (g.ignore_limit)
		limit = 0;
	o = json_object_new_object();
	md = json_object_new_object();
	items = json_object_new_array();
	total = g.npods + g.filler;
	for (i = from; i < total; i++) {
		const struct pod *p = served_pod(i, &tmp);

		if (!matches(f, p))
			continue;
		if (limit && n == limit) {
			snprintf(next, sizeof(next), "%llu:%zu", list_rv, i);
			for (; i < total; i++)
				remaining += matches(f, served_pod(i, &tmp));
			break;
		}
		json_object_array_add(items, pod_obj(p, false));
		n++;
	}
	pthread_mutex_unlock(&g.mu);
	snprintf(rv, sizeof(rv), "%llu", list_rv);
	add_str(o, "kind", "PodList");
	add_str(o, "apiVersion", "v1");
	add_str(md, "resourceVersion", rv);
	if (next[0]) {
		add_str(md, "continue", next);
		json_object_object_add(md, "remainingItemCount", json_object_new_int64((int64_t)remaining));
	}
	json_object_object_add(o, "metadata", md);
	json_object_object_add(o, "items", items);
	return send_json(conn, MHD_HTTP_OK, o);
}

static enum MHD_Result do_watch(struct MHD_Connection *conn, const struct filter *f)
{
	const char *rvs = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "resourceVersion");
	const char *bm = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "allowWatchBookmarks");
	const char *ts = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "timeoutSeconds");
	unsigned long long rv = 0, tmo = 0;
	struct MHD_Response *r;
	struct watch *w;
	enum MHD_Result ret;
	size_t i;

	if (rvs && *rvs && !parse_ull(rvs, &rv))
		return send_status(conn, MHD_HTTP_BAD_REQUEST, "BadRequest",
				   "invalid resourceVersion");
	if (ts && *ts && !parse_ull(ts, &tmo))
		return send_status(conn, MHD_HTTP_BAD_REQUEST, "BadRequest",
				   "invalid timeoutSeconds");
	w = xmalloc(sizeof(*w));
	w->f = *f;
	w->conn = conn;
	w->bookmarks = bm && !strcmp(bm, "true");
	if (tmo) {
		now_mono(&w->deadline);
		w->deadline.tv_sec += (time_t)tmo;
		w->has_deadline = true;
	}

	pthread_mutex_lock(&g.mu);
	g.nwatches++;
	if (rv && rv < g.floor && g.gone_http) {
		char msg[96];
		snprintf(msg, sizeof(msg), "too old resource version: %llu (%llu)", rv, g.floor);
		pthread_mutex_unlock(&g.mu);
		free(w);
		return send_status(conn, MHD_HTTP_GONE, "Expired", msg);
	}
	if (rv && rv < g.floor) {
		push_expired(w, rv);
	} else if (!rv) {
		struct pod tmp;

		for (i = 0; i < g.npods + g.filler; i++)
			if (matches(f, served_pod(i, &tmp)))
				push_pod(w, "ADDED", served_pod(i, &tmp));
		w->last_rv = g.rv;
	} else {
		struct event *e;
		w->last_rv = rv;
		for (e = g.hist; e; e = e->next)
			deliver(w, e); /* skips those at or below rv */
	}
	w->drop = g.down; /* raced with "down": break it at once */
	w->listed = true;
	w->next = g.watches;
	g.watches = w;
	g.open++;
	pthread_mutex_unlock(&g.mu);

	r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, watch_read, w, watch_free);
	if (!r) {
		watch_free(w);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache, private");
	ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
			      const char *method, const char *version, const char *upload_data,
			      size_t *upload_data_size, void **con_cls)
{
	static int seen;
	const char *auth, *watch, *sel;
	struct filter f = { .any_ns = true, .any_node = true };
	char err[160];

	(void)cls;
	(void)version;
	(void)upload_data;
	if (!*con_cls) { /* headers only so far; answer once the body is in */
		*con_cls = &seen;
		return MHD_YES;
	}
	if (*upload_data_size) {
		*upload_data_size = 0;
		return MHD_YES;
	}

	auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	pthread_mutex_lock(&g.mu);
	{
		struct timespec now;

		now_mono(&now);
		g.times[g.ntimes++ % 16] =
			(unsigned long long)now.tv_sec * 1000 + (unsigned long long)now.tv_nsec / 1000000;
	}
	if (!auth || strncmp(auth, "Bearer ", 7) || strcmp(auth + 7, g.token)) {
		g.unauthorized++;
		pthread_mutex_unlock(&g.mu);
		return send_status(conn, MHD_HTTP_UNAUTHORIZED, "Unauthorized", "Unauthorized");
	}
	pthread_mutex_unlock(&g.mu);

	if (!strcmp(url, "/api/v1/pods")) {
		/* all namespaces */
	} else if (!strncmp(url, "/api/v1/namespaces/", 19)) {
		const char *ns = url + 19, *slash = strchr(ns, '/');
		size_t n = slash ? (size_t)(slash - ns) : 0;
		if (!n || n >= sizeof(f.ns) || strcmp(slash, "/pods"))
			goto notfound;
		memcpy(f.ns, ns, n);
		f.ns[n] = 0;
		f.any_ns = false;
	} else {
		goto notfound;
	}
	if (strcmp(method, MHD_HTTP_METHOD_GET))
		return send_status(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "MethodNotAllowed",
				   "the server does not allow this method on the requested resource");

	sel = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "fieldSelector");
	if (!parse_fieldsel(sel, &f, err, sizeof(err)))
		return send_status(conn, MHD_HTTP_BAD_REQUEST, "BadRequest", err);
	pthread_mutex_lock(&g.mu);
	if (g.ignore_fieldsel)
		f.any_node = true;
	if (g.fail_n) {
		int code = g.fail_code, secs = g.fail_secs;

		g.fail_n--;
		g.failed++;
		pthread_mutex_unlock(&g.mu);
		/* two lines, as some real messages are: the client must show one */
		snprintf(err, sizeof(err), "injected failure %d\nsee the fake server", code);
		return send_json_ra(conn, (unsigned)code,
				    status_obj(code, code == 429 ? "TooManyRequests" :
						     code == 503 ? "ServiceUnavailable" : "InternalError",
					       err),
				    secs);
	}
	pthread_mutex_unlock(&g.mu);
	watch = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "watch");
	if (watch && (!strcmp(watch, "1") || !strcmp(watch, "true")))
		return do_watch(conn, &f);
	return do_list(conn, &f);

notfound:
	snprintf(err, sizeof(err), "the server could not find the requested resource");
	return send_status(conn, MHD_HTTP_NOT_FOUND, "NotFound", err);
}

/* --- server lifecycle --- */

static char *cert_pem, *key_pem;
static struct MHD_Daemon *daemon_;
static uint16_t port_;

static bool server_up(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port_),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	const union MHD_DaemonInfo *di;

	daemon_ = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
				   MHD_USE_TLS | MHD_USE_ERROR_LOG,
				   port_, NULL, NULL, handle, NULL,
				   MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
				   MHD_OPTION_HTTPS_MEM_CERT, cert_pem,
				   MHD_OPTION_HTTPS_MEM_KEY, key_pem,
				   MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1,
				   MHD_OPTION_END);
	if (!daemon_)
		return false;
	di = MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_BIND_PORT);
	if (di && di->port)
		port_ = di->port; /* so "up" after "down" reuses a picked port */
	pthread_mutex_lock(&g.mu);
	g.down = false;
	pthread_mutex_unlock(&g.mu);
	return true;
}

/* Break every open stream so their threads return, then stop; MHD joins
 * the connection threads, so mu must not be held here. */
static void server_down(void)
{
	struct watch *w;

	pthread_mutex_lock(&g.mu);
	g.down = true;
	for (w = g.watches; w; w = w->next)
		w->drop = true;
	pthread_cond_broadcast(&g.cond);
	pthread_mutex_unlock(&g.mu);
	if (daemon_)
		MHD_stop_daemon(daemon_);
	daemon_ = NULL;
}

/* --- stdin commands (main thread; state changes under mu) --- */

static struct pod *find_pod(const char *uid)
{
	size_t i;
	for (i = 0; i < g.npods; i++)
		if (!strcmp(g.pods[i].uid, uid))
			return &g.pods[i];
	return NULL;
}

static bool valid_labels(const char *s)
{
	char buf[1024], *save, *kv;

	if (strlen(s) >= sizeof(buf))
		return false;
	strcpy(buf, s);
	if (!*s || s[strlen(s) - 1] == ',' || *s == ',' || strstr(s, ",,"))
		return false;
	for (kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(kv, '=');
		if (!eq || eq == kv)
			return false;
	}
	return true;
}

/* Copies a label (or annotation) argument (absent or "-": none) into dst
 * after checking it. */
static bool set_pairs(char *dst, size_t len, const char *arg)
{
	if (!arg || !strcmp(arg, "-")) {
		dst[0] = 0;
		return true;
	}
	if (!valid_labels(arg))
		return false;
	snprintf(dst, len, "%s", arg);
	return true;
}

static bool set_labels(struct pod *p, const char *arg)
{
	return set_pairs(p->labels, sizeof(p->labels), arg);
}

static bool set_field(char *dst, size_t len, const char *src)
{
	if (strlen(src) >= len)
		return false;
	strcpy(dst, src);
	return true;
}

static const char *node_arg(const char *s)
{
	return strcmp(s, "-") ? s : "";
}

/* Returns NULL on success, else what was wrong. Caller holds mu. */
static const char *command(int argc, char **argv)
{
	const char *cmd = argv[0];
	struct pod *p, old;
	struct watch *w;

	if (!strcmp(cmd, "add")) {
		struct pod np = { .rv = 0 };
		size_t i;
		if (argc != 6 && argc != 7)
			return "usage: add NS NAME UID NODE QOS [k=v,...]";
		if (strcmp(argv[5], "Guaranteed") && strcmp(argv[5], "Burstable") &&
		    strcmp(argv[5], "BestEffort"))
			return "bad QOS";
		if (!set_field(np.ns, sizeof(np.ns), argv[1]) ||
		    !set_field(np.name, sizeof(np.name), argv[2]) ||
		    !set_field(np.uid, sizeof(np.uid), argv[3]) ||
		    !set_field(np.node, sizeof(np.node), node_arg(argv[4])))
			return "field too long";
		if (!set_labels(&np, argc == 7 ? argv[6] : NULL))
			return "bad labels";
		if (find_pod(np.uid))
			return "uid exists";
		for (i = 0; i < g.npods; i++)
			if (!strcmp(g.pods[i].ns, np.ns) && !strcmp(g.pods[i].name, np.name))
				return "name exists";
		strcpy(np.qos, argv[5]);
		strcpy(np.phase, "Running");
		if (g.npods == g.cap) {
			g.cap = g.cap ? 2 * g.cap : 16;
			g.pods = realloc(g.pods, g.cap * sizeof(*g.pods));
			if (!g.pods)
				abort();
		}
		np.rv = ++g.rv;
		g.pods[g.npods++] = np;
		record(NULL, &np);
		return NULL;
	}
	if (!strcmp(cmd, "labels") || !strcmp(cmd, "annotations") || !strcmp(cmd, "move") ||
	    !strcmp(cmd, "phase")) {
		bool lab = !strcmp(cmd, "labels"), ann = !strcmp(cmd, "annotations");
		if (lab || ann ? (argc != 2 && argc != 3) : argc != 3)
			return lab ? "usage: labels UID [k=v,...]"
			       : ann ? "usage: annotations UID [k=v,...]"
				     : "usage: move|phase UID VALUE";
		p = find_pod(argv[1]);
		if (!p)
			return "no such pod";
		old = *p;
		if (lab) {
			if (!set_labels(p, argc == 3 ? argv[2] : NULL))
				return "bad labels";
		} else if (ann) {
			if (!set_pairs(p->annots, sizeof(p->annots), argc == 3 ? argv[2] : NULL))
				return "bad annotations";
		} else if (!strcmp(cmd, "move")) {
			if (!set_field(p->node, sizeof(p->node), node_arg(argv[2])))
				return "field too long";
		} else if (!set_field(p->phase, sizeof(p->phase), argv[2])) {
			return "field too long";
		}
		p->rv = ++g.rv;
		record(&old, p);
		return NULL;
	}
	if (!strcmp(cmd, "delete")) {
		if (argc != 2)
			return "usage: delete UID";
		p = find_pod(argv[1]);
		if (!p)
			return "no such pod";
		old = *p;
		old.rv = ++g.rv;
		memmove(p, p + 1, (size_t)(g.pods + g.npods - (p + 1)) * sizeof(*p));
		g.npods--;
		record(&old, NULL);
		return NULL;
	}
	if (!strcmp(cmd, "token")) {
		if (argc != 2 || !*argv[1] || strlen(argv[1]) >= sizeof(g.token))
			return "usage: token NEW";
		snprintf(g.token, sizeof(g.token), "%s", argv[1]);
		return NULL;
	}
	if (!strcmp(cmd, "fail")) {
		char *end;
		long code, secs;
		unsigned long long n;

		if (argc != 4)
			return "usage: fail CODE SECS N";
		code = strtol(argv[1], &end, 10);
		if (*end || code < 400 || code > 599)
			return "bad CODE";
		secs = strtol(argv[2], &end, 10);
		if (*end || secs > 86400 || secs < -1)
			return "bad SECS";
		if (!parse_ull(argv[3], &n))
			return "bad N";
		g.fail_code = (int)code;
		g.fail_secs = (int)secs;
		g.fail_n = (unsigned long)n;
		return NULL;
	}
	if (!strcmp(cmd, "filler") || !strcmp(cmd, "expire-continue")) {
		unsigned long long n;

		if (argc < 2 || argc > (strcmp(cmd, "filler") ? 2 : 3) || !parse_ull(argv[1], &n) ||
		    n > 10000000 || (argc == 3 && strlen(argv[2]) >= sizeof(g.filler_node)))
			return "usage: filler N [NODE] | expire-continue N";
		if (!strcmp(cmd, "filler")) {
			g.filler += (size_t)n;
			if (argc == 3)
				snprintf(g.filler_node, sizeof(g.filler_node), "%s", argv[2]);
		} else
			g.expire_continue = (unsigned long)n;
		return NULL;
	}
	if (!strcmp(cmd, "ignore")) {
		bool on;

		if (argc != 3 || (strcmp(argv[2], "on") && strcmp(argv[2], "off")) ||
		    (strcmp(argv[1], "fieldsel") && strcmp(argv[1], "limit")))
			return "usage: ignore fieldsel|limit on|off";
		on = !strcmp(argv[2], "on");
		if (!strcmp(argv[1], "fieldsel"))
			g.ignore_fieldsel = on;
		else
			g.ignore_limit = on;
		return NULL;
	}
	if (argc != 1 && strcmp(cmd, "gone-http"))
		return "unexpected arguments";
	if (!strcmp(cmd, "bookmark")) {
		for (w = g.watches; w; w = w->next) {
			json_object *o, *md;
			char rv[32];
			if (!w->bookmarks || w->drop || w->ending || g.rv < w->last_rv)
				continue;
			o = json_object_new_object();
			md = json_object_new_object();
			snprintf(rv, sizeof(rv), "%llu", g.rv);
			add_str(o, "kind", "Pod");
			add_str(o, "apiVersion", "v1");
			add_str(md, "resourceVersion", rv);
			json_object_object_add(o, "metadata", md);
			push(w, "BOOKMARK", o);
			w->last_rv = g.rv;
		}
		pthread_cond_broadcast(&g.cond);
		return NULL;
	}
	if (!strcmp(cmd, "compact")) {
		struct event *e, *n;
		g.floor = g.rv;
		for (e = g.hist; e; e = n) { /* nothing at or below the floor is replayable */
			n = e->next;
			free(e);
		}
		g.hist = g.hist_tail = NULL;
		for (w = g.watches; w; w = w->next)
			if (!w->drop && !w->ending)
				push_expired(w, w->last_rv);
		pthread_cond_broadcast(&g.cond);
		return NULL;
	}
	if (!strcmp(cmd, "gone-http")) {
		if (argc != 2 || (strcmp(argv[1], "on") && strcmp(argv[1], "off")))
			return "usage: gone-http on|off";
		g.gone_http = !strcmp(argv[1], "on");
		return NULL;
	}
	if (!strcmp(cmd, "drop")) {
		for (w = g.watches; w; w = w->next)
			w->drop = true;
		pthread_cond_broadcast(&g.cond);
		return NULL;
	}
	if (!strcmp(cmd, "stats")) {
		printf("lists=%lu watches=%lu open=%lu unauthorized=%lu failed=%lu pages=%lu\n",
		       g.lists, g.nwatches, g.open, g.unauthorized, g.failed, g.pages);
		return NULL;
	}
	if (!strcmp(cmd, "times")) {
		unsigned long i = g.ntimes > 16 ? g.ntimes - 16 : 0;

		printf("times");
		for (; i < g.ntimes; i++)
			printf(" %llu", g.times[i % 16]);
		printf("\n");
		return NULL;
	}
	return "unknown command";
}

static void run_line(char *line)
{
	char *argv[8], *save, *tok;
	const char *err;
	int argc = 0;

	for (tok = strtok_r(line, " \t\r", &save); tok; tok = strtok_r(NULL, " \t\r", &save)) {
		if (argc == 8) {
			printf("error too many arguments\n");
			goto out;
		}
		argv[argc++] = tok;
	}
	if (!argc) {
		printf("error empty line\n");
		goto out;
	}
	/* up/down call into MHD, which waits for connection threads: no mu */
	if (!strcmp(argv[0], "down") || !strcmp(argv[0], "up")) {
		bool up = !strcmp(argv[0], "up");
		if (argc != 1)
			err = "unexpected arguments";
		else if (up == !!daemon_)
			err = up ? "already up" : "already down";
		else if (up)
			err = server_up() ? NULL : "cannot listen";
		else
			err = (server_down(), NULL);
	} else {
		pthread_mutex_lock(&g.mu);
		err = command(argc, argv);
		pthread_mutex_unlock(&g.mu);
	}
	if (err)
		printf("error %s\n", err);
	else
		printf("ok\n");
out:
	fflush(stdout);
}

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf = NULL;
	size_t len = 0, cap = 0, n;

	if (!f)
		return NULL;
	for (;;) {
		if (cap - len < 4096) {
			cap = cap ? 2 * cap : 8192;
			buf = realloc(buf, cap);
			if (!buf)
				abort();
		}
		n = fread(buf + len, 1, cap - len - 1, f);
		len += n;
		if (n == 0)
			break;
	}
	buf[len] = 0;
	if (ferror(f) || !len) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	return buf;
}

static void usage_exit(const char *what)
{
	fprintf(stderr, "kt-fakekube: %s (usage: kt-fakekube --cert CERT.pem --key KEY.pem "
			"--token TOKEN [--port N])\n", what);
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "cert", required_argument, NULL, 'c' }, { "key", required_argument, NULL, 'k' },
		{ "token", required_argument, NULL, 't' }, { "port", required_argument, NULL, 'p' },
		{ NULL, 0, NULL, 0 }
	};
	const char *cert = NULL, *key = NULL;
	unsigned long long port = 0;
	pthread_condattr_t ca;
	struct pollfd pfd[2];
	sigset_t sigs;
	char buf[65536];
	size_t have = 0;
	bool eof = false;
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'c': cert = optarg; break;
		case 'k': key = optarg; break;
		case 't':
			if (strlen(optarg) >= sizeof(g.token))
				usage_exit("--token too long");
			snprintf(g.token, sizeof(g.token), "%s", optarg);
			break;
		case 'p':
			if (!parse_ull(optarg, &port) || port > 65535)
				usage_exit("bad --port");
			break;
		default: usage_exit("unknown or incomplete option");
		}
	}
	if (optind != argc)
		usage_exit("unexpected argument");
	if (!cert || !key || !*g.token)
		usage_exit("--cert, --key and --token are required");
	cert_pem = read_file(cert);
	if (!cert_pem)
		usage_exit("cannot read --cert file");
	key_pem = read_file(key);
	if (!key_pem)
		usage_exit("cannot read --key file");
	port_ = (uint16_t)port;

	/* Timed waits must not jump with the wall clock. */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&g.cond, &ca);
	pthread_condattr_destroy(&ca);

	/* SIGTERM/SIGINT are read from a signalfd in this thread; blocked
	 * before MHD's threads exist so none of them takes the signal. */
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	pfd[1].fd = signalfd(-1, &sigs, SFD_CLOEXEC);
	pfd[1].events = POLLIN;
	pfd[0].fd = STDIN_FILENO;
	pfd[0].events = POLLIN;
	if (pfd[1].fd < 0) {
		perror("kt-fakekube: signalfd");
		return 1;
	}

	if (!server_up()) {
		fprintf(stderr, "kt-fakekube: cannot listen on 127.0.0.1:%u\n", port_);
		return 1;
	}
	printf("ready %u\n", port_);
	fflush(stdout);

	while (!eof) {
		ssize_t n;
		char *nl;

		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pfd[1].revents)
			break;
		if (!pfd[0].revents)
			continue;
		n = read(STDIN_FILENO, buf + have, sizeof(buf) - 1 - have);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			eof = true;
			if (have) { /* a last line without newline still counts */
				buf[have] = 0;
				run_line(buf);
			}
			break;
		}
		have += (size_t)n;
		while ((nl = memchr(buf, '\n', have))) {
			size_t len = (size_t)(nl - buf) + 1;
			*nl = 0;
			run_line(buf);
			memmove(buf, buf + len, have - len);
			have -= len;
		}
		if (have == sizeof(buf) - 1) { /* no newline in 64 KiB: discard */
			printf("error line too long\n");
			fflush(stdout);
			have = 0;
		}
	}

	server_down();
	pthread_mutex_lock(&g.mu);
	while (g.hist) {
		struct event *e = g.hist;
		g.hist = e->next;
		free(e);
	}
	free(g.pods);
	pthread_mutex_unlock(&g.mu);
	free(cert_pem);
	free(key_pem);
	close(pfd[1].fd);
	return 0;
}
