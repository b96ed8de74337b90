/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <curl/curl.h>
#include <json-c/json.h>
#include "kthrottle.h"
#include "kube/kubewatch.h"
#include "base/log.h"
#include "base/volfile.h"

/* Bounds on what the API may send. The list is asked for in pages of
 * LIST_PAGE_PODS; a page is small (a pod's object is a few kB, tens with
 * many containers and managed fields), and so is one watch event. A server
 * that ignores both the field selector and limit (a proxy dropping the
 * query) could send the whole cluster's pods in one answer: past
 * LIST_PAGE_MAX_BYTES it is refused, and said so, rather than read. */
#define LIST_PAGE_PODS 500
/* a list of more pages than this (a million pods: several clusters' worth)
 * is a server that does not end it */
#define LIST_MAX_PAGES 2000
#define LIST_PAGE_MAX_BYTES (16u << 20)
#define EVENT_MAX_BYTES (4u << 20)
/* the buffer a large page grew is given back after the list */
#define BUF_KEEP_BYTES (1u << 20)
#define TOKEN_MAX_BYTES 65536
#define CA_MAX_BYTES (1u << 20) /* a bundle of a few hundred certificates */
#define CONNECT_TIMEOUT_MS 5000L
#define LIST_TIMEOUT_MS 30000L
/* the server ends a watch after this; the client allows a margin over it */
#define WATCH_SECONDS 300
#define BACKOFF_FIRST_MS 200
#define BACKOFF_MAX_MS 8000

struct kt_kube {
	struct kt_kube_opts o;
	pthread_t thread;
	bool started;
	atomic_bool stop;
	int efd;
	CURLM *multi;
	CURL *easy;               /* the request under way */

	pthread_mutex_t mu;       /* guards pub, version, st */
	struct kt_pod_set pub;
	unsigned long version, taken;
	struct kt_kube_status st;

	/* the thread's own */
	struct kt_pod_set work;
	char rv[64];
	char *buf;                /* list body, or the watch's unfinished line */
	size_t len, cap;
	bool watch;               /* buf holds watch lines (else a list body) */
	bool gone;                /* the API said 410: relist */
	bool changed;             /* work changed since the last publish */
	bool too_big;
	char why[256];            /* why the current transfer was aborted (one line) */
	long http;                /* the HTTP status of the failed request, 0 if none */
	long retry_after_ms;      /* Retry-After of a 429/503, -1 if none */
	unsigned seed;
};

const char *kt_kube_state_name(enum kt_kube_state s)
{
	static const char *const names[] = { "listing", "watching", "unreachable" };

	return (unsigned)s < 3 ? names[s] : "?";
}

/* ---- error text --------------------------------------------------------- */

/* k->why from a format, as one line. */
__attribute__((format(printf, 2, 3))) static void whyf(struct kt_kube *k, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	kt_one_line(k->why, sizeof(k->why), buf);
}

/* ---- options ------------------------------------------------------------ */

int kt_kube_resolve_opts(const struct kt_kube_cfg *k, struct kt_kube_opts *o, char *err,
			 size_t errlen)
{
	const char *node = k->node_name ? k->node_name : getenv("NODE_NAME");

	memset(o, 0, sizeof(*o));
	if (k->api_server) {
		size_t n = strlen(k->api_server);

		while (n > 8 && k->api_server[n - 1] == '/')
			n--;
		snprintf(o->api_server, sizeof(o->api_server), "%.*s", (int)n, k->api_server);
	} else {
		const char *host = getenv("KUBERNETES_SERVICE_HOST");
		const char *port = getenv("KUBERNETES_SERVICE_PORT");

		if (!host || !*host) {
			snprintf(err, errlen,
				 "kubernetes: apiServer not given and KUBERNETES_SERVICE_HOST is not set (not running in a pod?)");
			return -EINVAL;
		}
		if (strspn(host, "0123456789abcdefABCDEF.:-") != strlen(host) ||
		    (port && strspn(port, "0123456789") != strlen(port))) {
			snprintf(err, errlen,
				 "kubernetes: KUBERNETES_SERVICE_HOST/PORT do not name a host and port");
			return -EINVAL;
		}
		/* an IPv6 service address goes in brackets */
		snprintf(o->api_server, sizeof(o->api_server), "https://%s%s%s:%s",
			 strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "",
			 port && *port ? port : "443");
	}
	snprintf(o->token_file, sizeof(o->token_file), "%s",
		 k->token_file ? k->token_file : KT_KUBE_SA_DIR "/token");
	snprintf(o->ca_file, sizeof(o->ca_file), "%s",
		 k->ca_file ? k->ca_file : KT_KUBE_SA_DIR "/ca.crt");
	if (!node || !*node) {
		snprintf(err, errlen,
			 "kubernetes: nodeName not given and NODE_NAME is not set (the DaemonSet sets it from spec.nodeName)");
		return -EINVAL;
	}
	if (!kt_dns_name_ok(node, strlen(node), false)) {
		snprintf(err, errlen, "kubernetes: node name \"%.64s\" is not a Kubernetes node name",
			 node);
		return -EINVAL;
	}
	snprintf(o->node_name, sizeof(o->node_name), "%s", node);
	return 0;
}

void kt_kube_opts_free(struct kt_kube_opts *o)
{
	for (int i = 0; i < o->n_sels; i++)
		kt_pod_selector_free(&o->sels[i]);
	free(o->sels);
	o->sels = NULL;
	o->n_sels = 0;
}

/* Appends a copy of sel unless an equal one is there. */
static int add_selector(struct kt_kube_opts *o, const struct kt_pod_selector *sel, int cap)
{
	for (int i = 0; i < o->n_sels; i++)
		if (kt_pod_selector_equal(&o->sels[i], sel))
			return 0;
	if (o->n_sels >= cap || kt_pod_selector_copy(&o->sels[o->n_sels], sel))
		return -ENOMEM;
	o->n_sels++;
	return 0;
}

int kt_kube_opts_selectors(struct kt_kube_opts *o, const struct kt_config *cfg)
{
	kt_kube_opts_free(o);
	if (cfg->source)
		cfg = cfg->source;
	if (!cfg->n_limits)
		return 0;
	o->sels = calloc((size_t)cfg->n_limits, sizeof(*o->sels));
	if (!o->sels)
		return -ENOMEM;
	for (int i = 0; i < cfg->n_limits; i++)
		if (cfg->limits[i].pods.set && add_selector(o, &cfg->limits[i].pods, cfg->n_limits)) {
			kt_kube_opts_free(o);
			return -ENOMEM;
		}
	return 0;
}

bool kt_kube_opts_equal(const struct kt_kube_opts *a, const struct kt_kube_opts *b)
{
	if (strcmp(a->api_server, b->api_server) || strcmp(a->token_file, b->token_file) ||
	    strcmp(a->ca_file, b->ca_file) || strcmp(a->node_name, b->node_name) ||
	    a->n_sels != b->n_sels)
		return false;
	for (int i = 0; i < a->n_sels; i++)
		if (!kt_pod_selector_equal(&a->sels[i], &b->sels[i]))
			return false;
	return true;
}

int kt_kube_opts_copy(struct kt_kube_opts *dst, const struct kt_kube_opts *src)
{
	*dst = *src;
	dst->sels = NULL;
	dst->n_sels = 0;
	if (!src->n_sels)
		return 0;
	dst->sels = calloc((size_t)src->n_sels, sizeof(*dst->sels));
	if (!dst->sels)
		return -ENOMEM;
	for (int i = 0; i < src->n_sels; i++) {
		if (kt_pod_selector_copy(&dst->sels[i], &src->sels[i])) {
			kt_kube_opts_free(dst);
			return -ENOMEM;
		}
		dst->n_sels++;
	}
	return 0;
}

/* ---- decoding ----------------------------------------------------------- */

static json_object *jget(json_object *o, const char *key)
{
	json_object *v = NULL;

	if (!o || !json_object_is_type(o, json_type_object) ||
	    !json_object_object_get_ex(o, key, &v))
		return NULL;
	return v;
}

/* The string at key, NULL if absent or not a string. */
static const char *jstr(json_object *o, const char *key)
{
	json_object *v = jget(o, key);

	return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

/* A label of the pod's metadata.labels (ctx), NULL if absent or not a
 * string: a selected pod with a malformed label is refused by
 * parse_pod_obj after. */
static const char *json_label(void *ctx, const char *key)
{
	return jstr(ctx, key);
}

/* Whether some selector of o picks the pod object, read in place (nothing
 * copied): a pod none picks is not decoded. */
static bool pod_wanted(const struct kt_kube_opts *o, json_object *obj)
{
	json_object *meta = jget(obj, "metadata");
	json_object *labels = jget(meta, "labels");
	const char *ns = jstr(meta, "namespace");

	if (!o->n_sels)
		return true;
	for (int i = 0; i < o->n_sels; i++)
		if (kt_pod_selected_by(&o->sels[i], ns, json_label, labels))
			return true;
	return false;
}

int kt_kube_pod_kept(const struct kt_kube_opts *o, const char *json)
{
	json_object *obj = json_tokener_parse(json);
	int ret;

	if (!obj)
		return -EINVAL;
	ret = pod_wanted(o, obj);
	json_object_put(obj);
	return ret;
}

/* Copies s into a fixed field, refusing what does not fit. */
static bool fit(char *dst, size_t n, const char *s)
{
	if (!s || strlen(s) >= n)
		return false;
	memcpy(dst, s, strlen(s) + 1);
	return true;
}

/* The QoS class of a pod object, "" if not (yet) one of the three. */
static const char *pod_qos(json_object *obj)
{
	const char *qos = jstr(jget(obj, "status"), "qosClass");

	return qos && (!strcmp(qos, "Guaranteed") || !strcmp(qos, "Burstable") ||
		       !strcmp(qos, "BestEffort")) ? qos : "";
}

static int parse_pod_obj(json_object *obj, struct kt_pod *p, char *node, size_t nodelen,
			 char *why, size_t whylen)
{
	json_object *meta = jget(obj, "metadata"), *labels, *annots;
	const char *nn;

	memset(p, 0, sizeof(*p));
	if (!meta || !json_object_is_type(meta, json_type_object)) {
		snprintf(why, whylen, "no metadata");
		return -EINVAL;
	}
	if (!fit(p->uid, sizeof(p->uid), jstr(meta, "uid")) || !kt_pod_uid_ok(p->uid)) {
		snprintf(why, whylen, "metadata.uid missing or not a UID");
		return -EINVAL;
	}
	if (!fit(p->ns, sizeof(p->ns), jstr(meta, "namespace")) || !p->ns[0] ||
	    !fit(p->name, sizeof(p->name), jstr(meta, "name")) || !p->name[0]) {
		snprintf(why, whylen, "pod %s: metadata.namespace or .name missing or too long", p->uid);
		return -EINVAL;
	}
	labels = jget(meta, "labels");
	if (labels && !json_object_is_type(labels, json_type_null)) {
		if (!json_object_is_type(labels, json_type_object)) {
			snprintf(why, whylen, "pod %s/%s: metadata.labels is not an object", p->ns, p->name);
			return -EINVAL;
		}
		json_object_object_foreach(labels, key, val) {
			int ret;

			if (!json_object_is_type(val, json_type_string)) {
				snprintf(why, whylen, "pod %s/%s: label %.63s is not a string", p->ns,
					 p->name, key);
				kt_pod_free_labels(p);
				return -EINVAL;
			}
			ret = kt_pod_add_label(p, key, json_object_get_string(val));
			if (ret) {
				snprintf(why, whylen, "pod %s/%s: %s", p->ns, p->name,
					 ret == -E2BIG ? "more than 64 labels" : "out of memory");
				kt_pod_free_labels(p);
				return ret;
			}
		}
	}
	/* the annotations weightBy/classBy may read, under KT_ANNOTATION_PREFIX:
	 * the only ones kept, the others can be large; past the most kept, or
	 * not a string, one is left out (it reads as absent) */
	annots = jget(meta, "annotations");
	if (annots && json_object_is_type(annots, json_type_object)) {
		json_object_object_foreach(annots, key, val) {
			int ret;

			if (strncmp(key, KT_ANNOTATION_PREFIX, strlen(KT_ANNOTATION_PREFIX)) ||
			    !json_object_is_type(val, json_type_string))
				continue;
			ret = kt_pod_add_annotation(p, key, json_object_get_string(val));
			if (ret == -ENOMEM) {
				snprintf(why, whylen, "pod %s/%s: out of memory", p->ns, p->name);
				kt_pod_free_labels(p);
				return ret;
			}
		}
	}
	/* not yet set on a pod the scheduler just bound: every class is tried */
	snprintf(p->qos, sizeof(p->qos), "%s", pod_qos(obj));
	nn = jstr(jget(obj, "spec"), "nodeName");
	snprintf(node, nodelen, "%s", nn ? nn : "");
	return 0;
}

int kt_kube_parse_pod(const char *json, struct kt_pod *p, char *node, size_t nodelen, char *why,
		      size_t whylen)
{
	json_object *obj = json_tokener_parse(json);
	int ret;

	if (!obj) {
		snprintf(why, whylen, "not JSON");
		memset(p, 0, sizeof(*p));
		return -EINVAL;
	}
	ret = parse_pod_obj(obj, p, node, nodelen, why, whylen);
	json_object_put(obj);
	return ret;
}

/* ---- publishing ----------------------------------------------------------- */

static void notify(struct kt_kube *k)
{
	uint64_t one = 1;

	if (write(k->efd, &one, sizeof(one)) < 0) {
		/* EAGAIN: the counter is already non-zero, the loop will look */
	}
}

/* Under mu: a new state; `why` the error ("" on success). */
static void set_state(struct kt_kube *k, enum kt_kube_state s, const char *why)
{
	char line[sizeof(k->st.error)];
	bool note;
	long http = s == KT_KUBE_UNREACHABLE ? k->http : 0;

	kt_one_line(line, sizeof(line), why);
	pthread_mutex_lock(&k->mu);
	note = k->st.state != s || strcmp(k->st.error, line) || k->st.http_status != http;
	if (k->st.state != s)
		k->st.since_ns = kt_clock_ns();
	k->st.state = s;
	k->st.http_status = http;
	snprintf(k->st.error, sizeof(k->st.error), "%s", line);
	snprintf(k->st.resource_version, sizeof(k->st.resource_version), "%s", k->rv);
	pthread_mutex_unlock(&k->mu);
	if (note) {
		if (s == KT_KUBE_UNREACHABLE)
			kt_warn("kubernetes: %s (keeping the last known pods)", line);
		else if (s == KT_KUBE_WATCHING && !k->st.lists)
			kt_info("kubernetes: watching the pods of node %s", k->o.node_name);
		notify(k);
	}
}

static void publish(struct kt_kube *k)
{
	struct kt_pod_set copy = { 0 };

	if (!k->changed)
		return;
	/* copy outside the lock; on failure the next change tries again */
	if (kt_pod_set_copy(&copy, &k->work))
		return;
	pthread_mutex_lock(&k->mu);
	kt_pod_set_clear(&k->pub);
	k->pub = copy;
	k->version++;
	snprintf(k->st.resource_version, sizeof(k->st.resource_version), "%s", k->rv);
	pthread_mutex_unlock(&k->mu);
	k->changed = false;
	notify(k);
}

static void count(struct kt_kube *k, unsigned long *field)
{
	pthread_mutex_lock(&k->mu);
	(*field)++;
	pthread_mutex_unlock(&k->mu);
}

/* ---- events --------------------------------------------------------------- */

/* An unselected pod of this node into set by its uid and QoS alone (its
 * labels are not copied); 1 changed, 0 not, -ENOMEM, -EINVAL (no UID). */
static int put_other(struct kt_pod_set *set, json_object *obj, bool append)
{
	const char *uid = jstr(jget(obj, "metadata"), "uid");

	if (!uid || !kt_pod_uid_ok(uid))
		return -EINVAL;
	return append ? (kt_pod_set_append_other(set, uid, pod_qos(obj)) ? -ENOMEM : 1)
		      : kt_pod_set_put_other(set, uid, pod_qos(obj));
}

/* Applies one pod as the API now has it: on this node and selected it is
 * put; unselected (its labels left every selector) it is kept by uid and
 * QoS only; elsewhere (moved, or the field selector ignored) it is removed,
 * by its uid alone. */
static void upsert(struct kt_kube *k, json_object *obj)
{
	const char *nn = jstr(jget(obj, "spec"), "nodeName");
	char node[254], why[256];
	struct kt_pod p;
	int ret;

	/* another node's: only its uid matters (one that moved away) */
	if (!nn || strcmp(nn, k->o.node_name)) {
		const char *uid = jstr(jget(obj, "metadata"), "uid");

		if (uid)
			k->changed |= kt_pod_set_remove(&k->work, uid);
		return;
	}
	if (!pod_wanted(&k->o, obj)) {
		ret = put_other(&k->work, obj, false);
		if (ret < 0)
			count(k, &k->st.skipped);
		else
			k->changed |= ret > 0;
		return;
	}
	if (parse_pod_obj(obj, &p, node, sizeof(node), why, sizeof(why))) {
		count(k, &k->st.skipped);
		kt_debug("kubernetes: skipped a pod: %s", why);
		return;
	}
	k->changed |= kt_pod_set_remove_other(&k->work, p.uid);
	if (!kt_pod_set_put(&k->work, &p))
		k->changed = true;
	kt_pod_free_labels(&p);
}

/* One watch event; false aborts the stream (k->why says why). */
static bool on_event(struct kt_kube *k, json_object *ev)
{
	const char *type = jstr(ev, "type");
	json_object *obj = jget(ev, "object");
	const char *rv = jstr(jget(obj, "metadata"), "resourceVersion");

	if (!type || !obj) {
		count(k, &k->st.skipped);
		return true;
	}
	if (!strcmp(type, "ERROR")) {
		json_object *code = jget(obj, "code");
		const char *msg = jstr(obj, "message");

		k->gone = code && json_object_get_int(code) == 410;
		whyf(k, "watch: %s (code %d)", msg ? msg : "error",
		     code ? json_object_get_int(code) : 0);
		return false;
	}
	if (rv && strlen(rv) < sizeof(k->rv))
		snprintf(k->rv, sizeof(k->rv), "%s", rv);
	if (!strcmp(type, "ADDED") || !strcmp(type, "MODIFIED")) {
		upsert(k, obj);
	} else if (!strcmp(type, "DELETED")) {
		const char *uid = jstr(jget(obj, "metadata"), "uid");

		if (uid)
			k->changed |= kt_pod_set_remove(&k->work, uid);
	}
	/* BOOKMARK: only the resourceVersion; unknown types are ignored */
	return true;
}

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *ud)
{
	struct kt_kube *k = ud;
	size_t n = size * nmemb, limit = k->watch ? EVENT_MAX_BYTES : LIST_PAGE_MAX_BYTES;
	bool ok = true;

	if (atomic_load(&k->stop))
		return 0;
	if (k->len + n + 1 > limit) {
		k->too_big = true;
		whyf(k, "%s larger than %zu MiB%s", k->watch ? "a watch event" : "a page of the pod list",
		     limit >> 20,
		     k->watch ? "" : " (does the server or a proxy ignore fieldSelector and limit?)");
		return 0;
	}
	if (k->len + n + 1 > k->cap) {
		size_t cap = k->cap ? k->cap : 65536;
		char *g;

		while (cap < k->len + n + 1)
			cap *= 2;
		if (!(g = realloc(k->buf, cap))) {
			whyf(k, "out of memory");
			return 0;
		}
		k->buf = g;
		k->cap = cap;
	}
	memcpy(k->buf + k->len, ptr, n);
	k->len += n;
	k->buf[k->len] = '\0';
	if (!k->watch)
		return n;
	/* an error answer is a Status object, not a stream of events */
	{
		long status = 0;

		curl_easy_getinfo(k->easy, CURLINFO_RESPONSE_CODE, &status);
		if (status != 200)
			return n;
	}
	/* one JSON event per line */
	for (char *nl; ok && (nl = memchr(k->buf, '\n', k->len));) {
		size_t line = (size_t)(nl - k->buf);

		*nl = '\0';
		if (line) {
			json_object *ev = json_tokener_parse(k->buf);

			if (ev)
				ok = on_event(k, ev);
			else
				count(k, &k->st.skipped);
			json_object_put(ev);
		}
		memmove(k->buf, nl + 1, k->len - line - 1);
		k->len -= line + 1;
		k->buf[k->len] = '\0';
	}
	publish(k);
	return ok ? n : 0;
}

/* ---- HTTP ----------------------------------------------------------------- */

/* A file of the service account (`what` names it in errors), read under
 * the volume rule (volfile.h) at every request: the kubelet rotates the
 * token, and may the CA, by swapping ..data. */
static int read_sa_file(struct kt_kube *k, const char *what, const char *path, size_t cap,
			char **out, size_t *len)
{
	const char *stage;
	char why[200];
	int ret = kt_volfile_read(path, cap, out, len, &stage, why, sizeof(why));

	if (ret)
		whyf(k, "cannot read %s %s: %s", what, path, why);
	return ret;
}

/* "Authorization: Bearer <token>" from the token file. */
static int auth_header(struct kt_kube *k, char **out)
{
	char *tok = NULL;
	size_t n = 0, got;
	int ret;

	*out = NULL;
	ret = read_sa_file(k, "token", k->o.token_file, TOKEN_MAX_BYTES, &tok, &n);
	if (ret)
		return ret;
	got = n;
	while (n > 0 && (tok[n - 1] == '\n' || tok[n - 1] == '\r' || tok[n - 1] == ' '))
		n--;
	tok[n] = '\0';
	/* the token goes into a header line: nothing but visible ASCII */
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)tok[i] <= ' ' || (unsigned char)tok[i] >= 0x7f) {
			n = 0;
			break;
		}
	if (!n) {
		ret = -EINVAL;
		whyf(k, "token %s is empty or not a bearer token", k->o.token_file);
	} else if (asprintf(out, "Authorization: Bearer %s", tok) < 0) {
		*out = NULL;
		ret = -ENOMEM;
		whyf(k, "out of memory");
	}
	explicit_bzero(tok, got + 1);
	free(tok);
	return ret;
}

/* Runs one GET to its end (or the stop flag). Returns the HTTP status, or
 * -1 with k->why set. The response body went through on_data. */
static long get(struct kt_kube *k, const char *url, bool watch, bool *answered)
{
	char errbuf[CURL_ERROR_SIZE] = "", *auth = NULL, *ca = NULL;
	struct curl_slist *hdrs = NULL, *h;
	struct curl_blob cablob;
	curl_off_t retry_after = 0;
	size_t calen = 0;
	CURLcode res = CURLE_OK;
	CURL *e = curl_easy_init();
	long status = 0;
	int running = 1;
	CURLMsg *msg;

	*answered = false;
	k->len = 0;
	k->watch = watch;
	k->too_big = false;
	k->why[0] = '\0';
	k->http = 0;
	k->retry_after_ms = -1;
	if (!e || auth_header(k, &auth) ||
	    read_sa_file(k, "CA", k->o.ca_file, CA_MAX_BYTES, &ca, &calen)) {
		if (!e)
			whyf(k, "out of memory");
		if (auth) {
			explicit_bzero(auth, strlen(auth));
			free(auth);
		}
		curl_easy_cleanup(e);
		return -1;
	}
	hdrs = curl_slist_append(NULL, auth);
	if (hdrs && (h = curl_slist_append(hdrs, "Accept: application/json")))
		hdrs = h;
	explicit_bzero(auth, strlen(auth));
	free(auth);
	/* the CA as read now (a rotated ca.crt is used at the next request),
	 * and it alone: not the system's store */
	cablob.data = ca;
	cablob.len = calen;
	cablob.flags = CURL_BLOB_COPY;
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "https");
	curl_easy_setopt(e, CURLOPT_CAINFO_BLOB, &cablob);
	curl_easy_setopt(e, CURLOPT_CAPATH, NULL);
	free(ca);
	curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
	curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, k);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPIDLE, 30L);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPINTVL, 10L);
	/* a watch is long by design: the server ends it; a silent peer is
	 * caught by keepalive and by the overall cap */
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, watch ? (WATCH_SECONDS + 60) * 1000L : LIST_TIMEOUT_MS);
	k->easy = e;
	curl_multi_add_handle(k->multi, e);
	while (running && !atomic_load(&k->stop)) {
		curl_multi_perform(k->multi, &running);
		if (!*answered) {
			curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
			/* the watch is open once its headers say 200 */
			if (status == 200 && watch) {
				*answered = true;
				count(k, &k->st.watches);
				set_state(k, KT_KUBE_WATCHING, "");
			}
		}
		if (running)
			curl_multi_poll(k->multi, NULL, 0, 1000, NULL);
	}
	while ((msg = curl_multi_info_read(k->multi, &running)))
		if (msg->msg == CURLMSG_DONE)
			res = msg->data.result;
	if (atomic_load(&k->stop))
		res = CURLE_ABORTED_BY_CALLBACK;
	curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
	/* seconds, from a number or an HTTP date; 0 when absent */
	if ((status == 429 || status == 503) &&
	    curl_easy_getinfo(e, CURLINFO_RETRY_AFTER, &retry_after) == CURLE_OK && retry_after > 0)
		k->retry_after_ms = retry_after > BACKOFF_MAX_MS / 1000 ? BACKOFF_MAX_MS
									: (long)retry_after * 1000;
	curl_multi_remove_handle(k->multi, e);
	curl_easy_cleanup(e);
	k->easy = NULL;
	if (hdrs) /* the token's copy */
		explicit_bzero(hdrs->data, strlen(hdrs->data));
	curl_slist_free_all(hdrs);
	if (res == CURLE_OK)
		return status;
	if (!k->why[0])
		whyf(k, "%s", errbuf[0] ? errbuf : curl_easy_strerror(res));
	/* a stream the API ended with ERROR 410 reports a write error here */
	return k->gone ? 410 : -1;
}

/* "HTTP 403: pods is forbidden: ..." from the Status object the API
 * answers with (a list's or a watch's), else the start of the body. */
static void http_error(struct kt_kube *k, const char *what, long status)
{
	json_object *st = k->len ? json_tokener_parse(k->buf) : NULL;
	const char *msg = jstr(st, "message");
	char body[184];

	if (!msg && k->len) {
		kt_one_line(body, sizeof(body), k->buf);
		msg = body;
	}
	k->http = status;
	whyf(k, "%s: HTTP %ld%s%s", what, status, msg && *msg ? ": " : "", msg ? msg : "");
	json_object_put(st);
}

/* The items of a list page into fresh: the pods of o's node that a
 * selector picks decoded, that node's others by uid and QoS alone, other
 * nodes' not decoded at all. *skipped counts the malformed. -ENOMEM. */
static int keep_items(const struct kt_kube_opts *o, json_object *items, struct kt_pod_set *fresh,
		      unsigned long *skipped)
{
	int n = (int)json_object_array_length(items);

	for (int i = 0; i < n; i++) {
		json_object *item = json_object_array_get_idx(items, i);
		const char *nn = jstr(jget(item, "spec"), "nodeName");
		char node[254], why[256];
		struct kt_pod p;
		int ret;

		/* another node's (the field selector ignored): not decoded */
		if (!nn || strcmp(nn, o->node_name))
			continue;
		if (!pod_wanted(o, item)) {
			ret = put_other(fresh, item, true);
			if (ret == -ENOMEM)
				return ret;
			*skipped += ret == -EINVAL;
			continue;
		}
		if (parse_pod_obj(item, &p, node, sizeof(node), why, sizeof(why))) {
			(*skipped)++;
			continue;
		}
		ret = kt_pod_set_put(fresh, &p);
		kt_pod_free_labels(&p);
		if (ret)
			return ret;
	}
	return 0;
}

int kt_kube_decode_list(const struct kt_kube_opts *o, const char *json, struct kt_pod_set *set,
			unsigned long *skipped)
{
	json_object *list = json_tokener_parse(json);
	json_object *items = jget(list, "items");
	int ret = -EINVAL;

	if (items && json_object_is_type(items, json_type_array))
		ret = keep_items(o, items, set, skipped);
	json_object_put(list);
	return ret;
}

enum step { STEP_OK, STEP_ENDED_EARLY, STEP_RELIST, STEP_FAILED };

/* One page of the list into fresh: its pods of this node that a selector
 * picks kept, this node's others by uid and QoS alone, other nodes'
 * dropped before they are decoded; the list's resourceVersion into rv (from
 * the first page) and the next page's continue token into cont ("" on the
 * last page). */
static enum step list_page(struct kt_kube *k, struct kt_pod_set *fresh, char *rv, size_t rvlen,
			   char *cont, size_t contlen)
{
	char url[2048];
	json_object *list, *items, *md;
	const char *prv, *next;
	unsigned long skipped = 0;
	bool answered;
	long status;

	if (cont[0]) {
		char *esc = curl_easy_escape(NULL, cont, 0);

		if (!esc) {
			whyf(k, "listing pods: out of memory");
			return STEP_FAILED;
		}
		snprintf(url, sizeof(url),
			 "%s/api/v1/pods?fieldSelector=spec.nodeName%%3D%s&limit=%d&continue=%s",
			 k->o.api_server, k->o.node_name, LIST_PAGE_PODS, esc);
		curl_free(esc);
	} else {
		snprintf(url, sizeof(url), "%s/api/v1/pods?fieldSelector=spec.nodeName%%3D%s&limit=%d",
			 k->o.api_server, k->o.node_name, LIST_PAGE_PODS);
	}
	status = get(k, url, false, &answered);
	if (status < 0) {
		char why[sizeof(k->why)];

		snprintf(why, sizeof(why), "%s", k->why);
		whyf(k, "listing pods: %s", why);
		return STEP_FAILED;
	}
	/* the continue token expired (the list took longer than the API keeps
	 * its snapshot): the list starts again from the first page */
	if (status == 410 && cont[0])
		return STEP_RELIST;
	if (status != 200) {
		http_error(k, "listing pods", status);
		return STEP_FAILED;
	}
	list = json_tokener_parse(k->buf ? k->buf : "");
	items = jget(list, "items");
	md = jget(list, "metadata");
	prv = jstr(md, "resourceVersion");
	next = jstr(md, "continue");
	if (!items || !json_object_is_type(items, json_type_array) ||
	    ((!prv || !*prv || strlen(prv) >= rvlen) && !rv[0])) {
		whyf(k, "listing pods: the answer is not a PodList");
		json_object_put(list);
		return STEP_FAILED;
	}
	if (next && strlen(next) >= contlen) {
		whyf(k, "listing pods: a continue token longer than %zu bytes", contlen - 1);
		json_object_put(list);
		return STEP_FAILED;
	}
	if (next && *next && !strcmp(next, cont)) {
		whyf(k, "listing pods: the server answered a continue token with the same token");
		json_object_put(list);
		return STEP_FAILED;
	}
	if (keep_items(&k->o, items, fresh, &skipped)) {
		json_object_put(list);
		whyf(k, "listing pods: out of memory");
		return STEP_FAILED;
	}
	if (skipped) {
		pthread_mutex_lock(&k->mu);
		k->st.skipped += skipped;
		pthread_mutex_unlock(&k->mu);
	}
	/* every page is at the first page's version */
	if (!rv[0])
		snprintf(rv, rvlen, "%s", prv);
	snprintf(cont, contlen, "%s", next ? next : "");
	json_object_put(list);
	return STEP_OK;
}

/* Lists this node's pods page by page, LIST_PAGE_PODS at a time (the field
 * selector asks for this node's; pods of other nodes, from a server that
 * ignores it, and those no selector picks are dropped before decoding),
 * then replaces the working set. */
static enum step do_list(struct kt_kube *k)
{
	struct kt_pod_set fresh = { 0 };
	char rv[sizeof(k->rv)] = "", cont[1024] = "";
	enum step s;
	int pages = 0;

	count(k, &k->st.lists);
	do {
		s = list_page(k, &fresh, rv, sizeof(rv), cont, sizeof(cont));
		if (s == STEP_OK && cont[0] && ++pages == LIST_MAX_PAGES) {
			whyf(k, "listing pods: more than %d pages of %d", LIST_MAX_PAGES,
			     LIST_PAGE_PODS);
			s = STEP_FAILED;
		}
	} while (s == STEP_OK && cont[0] && !atomic_load(&k->stop));
	if (k->cap > BUF_KEEP_BYTES) {
		free(k->buf);
		k->buf = NULL;
		k->len = k->cap = 0;
	}
	if (s != STEP_OK || atomic_load(&k->stop)) {
		kt_pod_set_clear(&fresh);
		if (s == STEP_RELIST) {
			count(k, &k->st.relists);
			kt_info("kubernetes: the pod list's continue token expired (410 Gone): listing again");
		}
		return s;
	}
	snprintf(k->rv, sizeof(k->rv), "%s", rv);
	kt_pod_set_dedup_others(&fresh);
	kt_pod_set_clear(&k->work);
	fresh.synced = true;
	k->work = fresh;
	k->changed = true;
	pthread_mutex_lock(&k->mu);
	k->st.synced = true;
	pthread_mutex_unlock(&k->mu);
	publish(k);
	set_state(k, KT_KUBE_WATCHING, "");
	return STEP_OK;
}

static enum step do_watch(struct kt_kube *k)
{
	char url[1200];
	uint64_t t0 = kt_clock_ns();
	bool answered;
	long status;

	snprintf(url, sizeof(url),
		 "%s/api/v1/pods?fieldSelector=spec.nodeName%%3D%s&watch=1&resourceVersion=%s&allowWatchBookmarks=true&timeoutSeconds=%d",
		 k->o.api_server, k->o.node_name, k->rv, WATCH_SECONDS);
	k->gone = false;
	status = get(k, url, true, &answered);
	publish(k);
	if (k->gone || status == 410) {
		count(k, &k->st.relists);
		kt_info("kubernetes: resourceVersion %s expired (410 Gone): listing again", k->rv);
		k->gone = false;
		return STEP_RELIST;
	}
	if (status < 0) {
		char why[sizeof(k->why)];

		snprintf(why, sizeof(why), "%s", k->why);
		whyf(k, "watching pods: %s", why);
		/* a stream that was open and broke is retried at once; one that
		 * never opened backs off */
		return answered ? STEP_ENDED_EARLY : STEP_FAILED;
	}
	if (status != 200) {
		http_error(k, "watching pods", status);
		return STEP_FAILED;
	}
	/* ended by the server's timeout: reopen from the last resourceVersion,
	 * unless it ends at once again and again */
	return kt_clock_ns() - t0 < 1000000000ull ? STEP_ENDED_EARLY : STEP_OK;
}

/* Sleeps ms unless stopped: jittered by +-25%, or with exact (the
 * server's Retry-After) by +0..10% but never past BACKOFF_MAX_MS, so that
 * the daemons of many nodes refused at once do not come back at once. */
static void backoff_sleep(struct kt_kube *k, unsigned ms, bool exact)
{
	uint64_t until;

	if (!exact)
		ms = ms * 3 / 4 + (unsigned)(rand_r(&k->seed) % (ms / 2 + 1));
	else if ((ms += (unsigned)(rand_r(&k->seed) % (ms / 10 + 1))) > BACKOFF_MAX_MS)
		ms = BACKOFF_MAX_MS;
	until = kt_clock_ns() + (uint64_t)ms * 1000000ull;
	while (!atomic_load(&k->stop)) {
		uint64_t now = kt_clock_ns();

		if (now >= until)
			break;
		curl_multi_poll(k->multi, NULL, 0, (int)((until - now) / 1000000ull) + 1, NULL);
	}
}

static void *run(void *arg)
{
	struct kt_kube *k = arg;
	bool need_list = true;
	unsigned delay = 0;  /* the exponential back-off */
	long retry_ms = -1;  /* the server's Retry-After, which overrides it */

	while (!atomic_load(&k->stop)) {
		enum step s;

		if (retry_ms >= 0)
			backoff_sleep(k, (unsigned)retry_ms, true);
		else if (delay)
			backoff_sleep(k, delay, false);
		retry_ms = -1;
		if (atomic_load(&k->stop))
			break;
		s = need_list ? do_list(k) : do_watch(k);
		if (atomic_load(&k->stop))
			break;
		switch (s) {
		case STEP_OK:
			need_list = false;
			delay = 0;
			break;
		case STEP_RELIST:
			/* a watch expired: list at once; a list whose continue
			 * token expired: again after a back-off, so that a
			 * server expiring every token is not asked in a loop */
			delay = !need_list ? 0
				: delay ? (delay * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : delay * 2)
					: BACKOFF_FIRST_MS;
			need_list = true;
			break;
		case STEP_ENDED_EARLY:
			delay = BACKOFF_FIRST_MS;
			break;
		case STEP_FAILED:
			set_state(k, KT_KUBE_UNREACHABLE, k->why);
			delay = delay ? (delay * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : delay * 2)
				      : BACKOFF_FIRST_MS;
			retry_ms = k->retry_after_ms;
			break;
		}
	}
	return NULL;
}

/* ---- lifecycle ------------------------------------------------------------- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_res;

static void curl_init(void)
{
	curl_init_res = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int kt_kube_start(const struct kt_kube_opts *o, struct kt_kube **out, char *err, size_t errlen)
{
	struct kt_kube *k;
	int ret;

	*out = NULL;
	pthread_once(&curl_once, curl_init);
	if (curl_init_res != CURLE_OK) {
		snprintf(err, errlen, "kubernetes: cannot initialize libcurl: %s",
			 curl_easy_strerror(curl_init_res));
		return -EIO;
	}
	k = calloc(1, sizeof(*k));
	if (!k) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	if (kt_kube_opts_copy(&k->o, o)) {
		free(k);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	k->seed = (unsigned)kt_clock_ns() ^ (unsigned)getpid();
	k->st.since_ns = kt_clock_ns();
	pthread_mutex_init(&k->mu, NULL);
	k->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	k->multi = curl_multi_init();
	if (k->efd < 0 || !k->multi) {
		ret = k->efd < 0 ? -errno : -ENOMEM;
		snprintf(err, errlen, "kubernetes: cannot start the watcher: %s", strerror(-ret));
		goto fail;
	}
	/* the thread takes no signal: the daemon reads them from a signalfd,
	 * and one delivered to this thread (SIGHUP) would kill the process */
	{
		sigset_t all, old;

		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		ret = -pthread_create(&k->thread, NULL, run, k);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	if (ret) {
		snprintf(err, errlen, "kubernetes: cannot start the watcher thread: %s", strerror(-ret));
		goto fail;
	}
	k->started = true;
	*out = k;
	return 0;
fail:
	kt_kube_stop(k);
	return ret;
}

int kt_kube_fd(const struct kt_kube *k)
{
	return k->efd;
}

int kt_kube_snapshot(struct kt_kube *k, struct kt_pod_set *dst, bool *changed)
{
	uint64_t v;
	int ret = 0;

	if (read(k->efd, &v, sizeof(v)) < 0) {
		/* EAGAIN: nothing was signalled; the copy is still taken */
	}
	*changed = false;
	pthread_mutex_lock(&k->mu);
	if (k->version != k->taken) {
		struct kt_pod_set copy = { 0 };

		ret = kt_pod_set_copy(&copy, &k->pub);
		if (!ret) {
			kt_pod_set_clear(dst);
			*dst = copy;
			k->taken = k->version;
			*changed = true;
		}
	}
	pthread_mutex_unlock(&k->mu);
	return ret;
}

void kt_kube_status(struct kt_kube *k, struct kt_kube_status *st)
{
	pthread_mutex_lock(&k->mu);
	*st = k->st;
	pthread_mutex_unlock(&k->mu);
}

const struct kt_kube_opts *kt_kube_options(const struct kt_kube *k)
{
	return &k->o;
}

void kt_kube_stop(struct kt_kube *k)
{
	if (!k)
		return;
	atomic_store(&k->stop, true);
	if (k->started) {
		curl_multi_wakeup(k->multi);
		pthread_join(k->thread, NULL);
	}
	if (k->multi)
		curl_multi_cleanup(k->multi);
	if (k->efd >= 0)
		close(k->efd);
	kt_pod_set_clear(&k->work);
	kt_pod_set_clear(&k->pub);
	kt_kube_opts_free(&k->o);
	free(k->buf);
	pthread_mutex_destroy(&k->mu);
	free(k);
}
