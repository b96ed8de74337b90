// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The config's store blocks (top-level store: and a limit's rateLimit.store:):
 * static or Redis (single, sentinel, cluster), with their auth, TLS and
 * agreement settings, and the secrets they read. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/config_int.h"
#include "base/netparse.h"

#define MAX_SECRET_BYTES (64 << 10) /* a password, or a PEM bundle some day */

static const char *const failure_names[] = { "conservative", "open", "closed" };
static const char *const store_kind_names[] = { "local", "static", "redis" };
static const char *const redis_mode_names[] = { "single", "sentinel", "cluster" };

const char *kt_store_failure_name(enum kt_store_failure f) { return NAME_OF(failure_names, f); }
const char *kt_store_kind_name(enum kt_store_kind k) { return NAME_OF(store_kind_names, k); }

static void free_secret(char **p)
{
	if (*p) {
		explicit_bzero(*p, strlen(*p));
		free(*p);
		*p = NULL;
	}
}

static void auth_free(struct kt_auth_cfg *a)
{
	free(a->username);
	a->username = NULL;
	free_secret(&a->password);
	free(a->password_file);
	a->password_file = NULL;
}

static void tls_free(struct kt_tls_cfg *t)
{
	free(t->ca_cert);
	free(t->cert);
	free(t->key);
	free(t->field);
	memset(t, 0, sizeof(*t));
}

void kt_cfg_store_free(struct kt_store_cfg *s)
{
	int i;

	free(s->host);
	auth_free(&s->redis_auth);
	tls_free(&s->redis_tls);
	for (i = 0; i < KT_MAX_ENDPOINTS; i++)
		free(s->endpoint_host[i]);
	free(s->master_name);
	auth_free(&s->sentinel_auth);
	tls_free(&s->sentinel_tls);
	free(s->key_prefix);
	free(s->file);
	memset(s, 0, sizeof(*s));
}

int kt_cfg_store_defaults(struct kt_store_cfg *s)
{
	memset(s, 0, sizeof(*s));
	s->heartbeat_ns = NS_PER_SEC;
	s->stale_after = 3;
	s->valid_for_ns = 10 * NS_PER_SEC;
	s->fallback_for_ns = 60 * NS_PER_SEC;
	s->on_failure = KT_FAIL_CONSERVATIVE;
	s->key_prefix = strdup("kthrottle");
	return s->key_prefix ? 0 : -ENOMEM;
}

/* Duplicates every string so each limit owns its store; on failure every
 * pointer is either a fresh copy or NULL, so store_free is safe. */
static void dup_into(char **p, bool *ok)
{
	if (*p) {
		*p = strdup(*p);
		if (!*p)
			*ok = false;
	}
}

static void auth_dup(struct kt_auth_cfg *a, bool *ok)
{
	dup_into(&a->username, ok);
	dup_into(&a->password, ok);
	dup_into(&a->password_file, ok);
}

static void tls_dup(struct kt_tls_cfg *t, bool *ok)
{
	dup_into(&t->ca_cert, ok);
	dup_into(&t->cert, ok);
	dup_into(&t->key, ok);
	dup_into(&t->field, ok);
}

int kt_cfg_store_copy(struct kt_store_cfg *dst, const struct kt_store_cfg *src)
{
	bool ok = true;
	int i;

	*dst = *src;
	dup_into(&dst->host, &ok);
	auth_dup(&dst->redis_auth, &ok);
	tls_dup(&dst->redis_tls, &ok);
	for (i = 0; i < KT_MAX_ENDPOINTS; i++)
		dup_into(&dst->endpoint_host[i], &ok);
	dup_into(&dst->master_name, &ok);
	auth_dup(&dst->sentinel_auth, &ok);
	tls_dup(&dst->sentinel_tls, &ok);
	dup_into(&dst->key_prefix, &ok);
	dup_into(&dst->file, &ok);
	if (!ok) {
		kt_cfg_store_free(dst);
		return -ENOMEM;
	}
	return 0;
}

/* One trailing newline (as editors and `echo` leave) is not part of the
 * password. why: "cannot open: ...", "larger than ...", "is empty"... */
int kt_config_read_secret(const char *path, char **out, char *why, size_t whylen)
{
	const char *stage;
	char w[128], *buf = NULL;
	size_t len = 0, size;
	int err;

	*out = NULL;
	err = kt_cfg_read_capped(path, MAX_SECRET_BYTES, "secret files", &buf, &len, &stage, w, sizeof(w));
	if (err == -EFBIG)
		snprintf(why, whylen, "is %s", w);
	else if (err)
		snprintf(why, whylen, "cannot %s: %s", stage, w);
	if (err)
		return err;
	size = len;
	if (len && buf[len - 1] == '\n')
		len--;
	if (len && buf[len - 1] == '\r')
		len--;
	buf[len] = '\0';
	if (!len || strlen(buf) != len) {
		snprintf(why, whylen, "%s", len ? "contains a NUL byte" : "is empty");
		explicit_bzero(buf, size);
		free(buf);
		return -EINVAL;
	}
	*out = buf;
	return 0;
}

static int read_secret_file(struct ctx *c, yaml_node_t *v, const char *field, const char *path,
			    char **out)
{
	char why[160];
	int err = kt_config_read_secret(path, out, why, sizeof(why));

	if (!err)
		return 0;
	/* "cannot open X: ..." / "X is empty" */
	if (!strncmp(why, "cannot ", 7)) {
		const char *colon = strchr(why, ':');

		return kt_cfg_fail_code(c, err, v, field, "%.*s %s%s", (int)(colon - why), why,
					show_str(path).s, colon);
	}
	return kt_cfg_fail_code(c, err, v, field, "%s %s", show_str(path).s, why);
}

static const char *const auth_keys[] = { "username", "password", "passwordFile", "passwordEnv",
					 NULL };

/* Secrets are never echoed: every message here names the field, not the value. */
static int parse_auth(struct ctx *c, yaml_node_t *n, const char *field, struct kt_auth_cfg *a)
{
	char sub[FIELD_LEN];
	yaml_node_t *v, *src = NULL;
	const char *s, *env, *src_key = NULL;
	int i, err = kt_cfg_check_map(c, n, field, auth_keys);

	if (err)
		return err;
	if ((v = map_get(c, n, "username")) &&
	    (err = kt_cfg_get_str(c, v, join(sub, field, "username"), 256, &a->username)))
		return err;
	for (i = 1; i <= 3; i++) {
		yaml_node_t *w = map_get(c, n, auth_keys[i]);

		if (!w)
			continue;
		if (src)
			return fail(c, w, join(sub, field, auth_keys[i]),
				    "give only one of password, passwordFile, passwordEnv (%s at line %d)",
				    src_key, line_of(src));
		src = w;
		src_key = auth_keys[i];
	}
	if (!src)
		return 0;
	join(sub, field, src_key);
	if ((err = kt_cfg_get_scalar(c, src, sub, "a string", &s)))
		return err;
	if (!*s)
		return fail(c, src, sub, "is empty");
	if (!strcmp(src_key, "password")) {
		a->password = strdup(s);
		return a->password ? 0 : oom(c, src, sub);
	}
	if (!strcmp(src_key, "passwordFile")) {
		a->password_file = strdup(s);
		if (!a->password_file)
			return oom(c, src, sub);
		return read_secret_file(c, src, sub, s, &a->password);
	}
	/* passwordEnv */
	if (!(env = cfg_getenv(c, s)))
		return fail(c, src, sub, "environment variable %s is not set", show_str(s).s);
	if (!*env)
		return fail(c, src, sub, "environment variable %s is empty", show_str(s).s);
	a->password = strdup(env);
	return a->password ? 0 : oom(c, src, sub);
}

static int parse_tls(struct ctx *c, yaml_node_t *n, const char *field, struct kt_tls_cfg *t)
{
	static const char *const keys[] = { "ca_cert_secret", "cert_secret", "key_secret",
					    "insecure_skip_verify", NULL };
	char sub[FIELD_LEN];
	yaml_node_t *v;
	int err = kt_cfg_check_map(c, n, field, keys);

	if (err)
		return err;
	t->enabled = true;
	if (!(t->field = strdup(field)))
		return oom(c, n, field);
	if ((v = map_get(c, n, "ca_cert_secret"))) {
		if ((err = kt_cfg_get_str(c, v, join(sub, field, "ca_cert_secret"), MAX_PATH_BYTES,
					  &t->ca_cert)))
			return err;
		t->ca_cert_line = line_of(v);
	}
	if ((v = map_get(c, n, "cert_secret"))) {
		if ((err = kt_cfg_get_str(c, v, join(sub, field, "cert_secret"), MAX_PATH_BYTES, &t->cert)))
			return err;
		t->cert_line = line_of(v);
	}
	if ((v = map_get(c, n, "key_secret"))) {
		if ((err = kt_cfg_get_str(c, v, join(sub, field, "key_secret"), MAX_PATH_BYTES, &t->key)))
			return err;
		t->key_line = line_of(v);
	}
	if ((v = map_get(c, n, "insecure_skip_verify")) &&
	    (err = kt_cfg_get_bool(c, v, join(sub, field, "insecure_skip_verify"), &t->insecure_skip_verify)))
		return err;
	if (!t->cert != !t->key)
		return fail(c, n, field, "cert_secret and key_secret must be given together");
	return 0;
}

/* redis://[user[:password]@]host[:port][/db], rediss:// for TLS. The URL may
 * carry a password, so no message here quotes it. */
static int parse_url(struct ctx *c, yaml_node_t *v, const char *field, struct kt_store_cfg *s)
{
	const char *u, *rest, *at, *why;
	char hint[200];
	size_t alen;
	bool bad = false, nomem = false;
	int err = kt_cfg_get_scalar(c, v, field, "a string", &u);

	if (err)
		return err;
	if (!strncmp(u, "redis://", 8)) {
		rest = u + 8;
	} else if (!strncmp(u, "rediss://", 9)) {
		rest = u + 9;
		s->redis_tls.enabled = true;
	} else {
		return fail(c, v, field, "must start with redis:// or rediss://");
	}
	if (strpbrk(rest, "?#"))
		return fail(c, v, field, "query and fragment are not supported");
	if (kt_cfg_has_control(rest) || strchr(rest, ' '))
		return fail(c, v, field, "contains a space or control character");
	alen = strcspn(rest, "/");
	at = memrchr(rest, '@', alen);
	if (at) {
		const char *colon = memchr(rest, ':', (size_t)(at - rest));
		size_t ulen = colon ? (size_t)(colon - rest) : (size_t)(at - rest);

		s->redis_auth.username = kt_pct_decode(rest, ulen, &bad, &nomem);
		if (colon && !bad && !nomem)
			s->redis_auth.password =
				kt_pct_decode(colon + 1, (size_t)(at - colon - 1), &bad, &nomem);
		if (nomem)
			return oom(c, v, field);
		if (bad)
			return fail(c, v, field, "bad percent-encoding in the user info");
		alen -= (size_t)(at + 1 - rest);
		rest = at + 1;
	}
	why = kt_parse_hostport(rest, alen, 6379, &s->host, &s->port, hint, sizeof(hint));
	if (why)
		return fail(c, v, field, "%s", why);
	rest += alen;
	s->db = 0;
	if (*rest == '/' && rest[1]) {
		const char *d = rest + 1;

		if (strspn(d, "0123456789") != strlen(d) || strlen(d) > 9)
			return fail(c, v, field, "database must be a number (redis://host:6379/0)");
		s->db = atoi(d);
	}
	return 0;
}

/* Fills `dst` from a second source (a redis_auth block) where the URL or an
 * outer block left it empty; giving the same thing twice is an error. */
static int merge_auth(struct ctx *c, yaml_node_t *n, const char *field, struct kt_auth_cfg *dst,
		      struct kt_auth_cfg *src, const char *first)
{
	if ((dst->username && src->username) || (dst->password && src->password))
		return fail(c, n, field, "%s also given in %s",
			    dst->username && src->username ? "username" : "password", first);
	if (src->username) {
		dst->username = src->username;
		src->username = NULL;
	}
	if (src->password) {
		dst->password = src->password;
		src->password = NULL;
		dst->password_file = src->password_file;
		src->password_file = NULL;
	}
	return 0;
}

static int parse_endpoints(struct ctx *c, yaml_node_t *n, const char *field, struct kt_store_cfg *s)
{
	char sub[FIELD_LEN], hint[200];
	yaml_node_item_t *it;
	int i, err;

	if (n->type != YAML_SEQUENCE_NODE)
		return fail(c, n, field, "expected a list of host:port, got %s", kind_of(n));
	if (n->data.sequence.items.top == n->data.sequence.items.start)
		return fail(c, n, field, "needs at least one endpoint");
	for (it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
		yaml_node_t *e = node_at(c, *it);
		const char *str, *why;

		index_of(sub, field, s->n_endpoints);
		if (s->n_endpoints >= KT_MAX_ENDPOINTS)
			return fail(c, e, sub, "at most %d endpoints", KT_MAX_ENDPOINTS);
		if ((err = kt_cfg_get_scalar(c, e, sub, "host:port", &str)))
			return err;
		why = kt_parse_hostport(str, strlen(str), 0, &s->endpoint_host[s->n_endpoints],
					&s->endpoint_port[s->n_endpoints], hint, sizeof(hint));
		if (why)
			return fail(c, e, sub, "\"%s\" %s", show_str(str).s, why);
		s->n_endpoints++;
		for (i = 0; i < s->n_endpoints - 1; i++)
			if (!strcmp(s->endpoint_host[i], s->endpoint_host[s->n_endpoints - 1]) &&
			    s->endpoint_port[i] == s->endpoint_port[s->n_endpoints - 1])
				return fail(c, e, sub, "\"%s\" is listed twice", show_str(str).s);
	}
	return 0;
}

static int parse_sentinel(struct ctx *c, yaml_node_t *n, const char *field, struct kt_store_cfg *s,
			  yaml_node_t *outer_auth, yaml_node_t *outer_tls)
{
	static const char *const keys[] = { "endpoints", "master_name", "redis_auth", "sentinel_auth",
					    "redis_tls", "sentinel_tls", NULL };
	char sub[FIELD_LEN];
	yaml_node_t *v;
	int err = kt_cfg_check_map(c, n, field, keys);

	if (err)
		return err;
	if (!(v = map_get(c, n, "endpoints")))
		return kt_cfg_missing(c, n, field, "endpoints");
	if ((err = parse_endpoints(c, v, join(sub, field, "endpoints"), s)))
		return err;
	if (!(v = map_get(c, n, "master_name")))
		return kt_cfg_missing(c, n, field, "master_name");
	if ((err = kt_cfg_get_str(c, v, join(sub, field, "master_name"), 255, &s->master_name)))
		return err;
	if ((v = map_get(c, n, "redis_auth"))) {
		if (outer_auth)
			return fail(c, v, join(sub, field, "redis_auth"),
				    "also given at redisStore.redis_auth (line %d)", line_of(outer_auth));
		if ((err = parse_auth(c, v, sub, &s->redis_auth)))
			return err;
	}
	if ((v = map_get(c, n, "redis_tls"))) {
		if (outer_tls)
			return fail(c, v, join(sub, field, "redis_tls"),
				    "also given at redisStore.redis_tls (line %d)", line_of(outer_tls));
		if ((err = parse_tls(c, v, sub, &s->redis_tls)))
			return err;
	}
	if ((v = map_get(c, n, "sentinel_auth")) &&
	    (err = parse_auth(c, v, join(sub, field, "sentinel_auth"), &s->sentinel_auth)))
		return err;
	if ((v = map_get(c, n, "sentinel_tls")) &&
	    (err = parse_tls(c, v, join(sub, field, "sentinel_tls"), &s->sentinel_tls)))
		return err;
	return 0;
}

static bool key_prefix_ok(const char *s)
{
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
		      strchr("_.:-", *s)))
			return false;
	return true;
}

static int parse_redis(struct ctx *c, yaml_node_t *n, const char *field, struct kt_store_cfg *s)
{
	static const char *const keys[] = { "mode", "url", "redis_auth", "redis_tls", "sentinel",
					    "addrs", "db", "keyPrefix", "timeout", "leases", NULL };
	static const char *const leases_names[] = { "member", "node" };
	struct kt_auth_cfg block = { 0 };
	char sub[FIELD_LEN];
	yaml_node_t *v, *url, *auth, *tls, *sent, *addrs, *db;
	long long ll;
	int mode, err = kt_cfg_check_map(c, n, field, keys);

	if (err)
		return err;
	if (!(v = map_get(c, n, "mode")))
		return kt_cfg_missing(c, n, field, "mode");
	if ((err = kt_cfg_get_enum(c, v, join(sub, field, "mode"), redis_mode_names, 3, &mode)))
		return err;
	s->redis_mode = (enum kt_redis_mode)mode;
	url = map_get(c, n, "url");
	auth = map_get(c, n, "redis_auth");
	tls = map_get(c, n, "redis_tls");
	sent = map_get(c, n, "sentinel");
	addrs = map_get(c, n, "addrs");
	db = map_get(c, n, "db");

	if (s->redis_mode != KT_REDIS_CLUSTER) {
		if (addrs)
			return fail(c, addrs, join(sub, field, "addrs"), "only used with mode: cluster");
		if (db)
			return fail(c, db, join(sub, field, "db"),
				    "only used with mode: cluster (give the db in url)");
	}
	if (s->redis_mode == KT_REDIS_CLUSTER) {
		if (url)
			return fail(c, url, join(sub, field, "url"), "not used with mode: cluster (give addrs)");
		if (sent)
			return fail(c, sent, join(sub, field, "sentinel"), "only used with mode: sentinel");
		if (!addrs)
			return kt_cfg_missing(c, n, field, "addrs");
		if ((err = parse_endpoints(c, addrs, join(sub, field, "addrs"), s)))
			return err;
		/* Redis Cluster serves db 0 only; say so rather than ignore it */
		if (db) {
			if ((err = kt_cfg_get_int(c, db, join(sub, field, "db"), 0, 1000000, &ll)))
				return err;
			if (ll != 0)
				return fail(c, db, sub, "%lld: Redis Cluster has only db 0", ll);
		}
		free(s->host);
		s->host = strdup(s->endpoint_host[0]);
		if (!s->host)
			return fail(c, addrs, sub, "out of memory");
		s->port = s->endpoint_port[0];
		s->db = 0;
	} else if (s->redis_mode == KT_REDIS_SINGLE) {
		if (sent)
			return fail(c, sent, join(sub, field, "sentinel"), "only used with mode: sentinel");
		if (!url)
			return kt_cfg_missing(c, n, field, "url");
		if ((err = parse_url(c, url, join(sub, field, "url"), s)))
			return err;
	} else {
		if (url)
			return fail(c, url, join(sub, field, "url"),
				    "not used with mode: sentinel (give sentinel.endpoints)");
		if (!sent)
			return kt_cfg_missing(c, n, field, "sentinel");
		if ((err = parse_sentinel(c, sent, join(sub, field, "sentinel"), s, auth, tls)))
			return err;
	}
	if (auth) {
		join(sub, field, "redis_auth");
		err = parse_auth(c, auth, sub, &block);
		if (!err)
			err = merge_auth(c, auth, sub, &s->redis_auth, &block, "url");
		auth_free(&block);
		if (err)
			return err;
	}
	if (tls && (err = parse_tls(c, tls, join(sub, field, "redis_tls"), &s->redis_tls)))
		return err;
	if (s->redis_auth.username && !s->redis_auth.password) {
		if (auth)
			return fail(c, auth, join(sub, field, "redis_auth"), "username needs a password");
		if (url)
			return fail(c, url, join(sub, field, "url"), "username needs a password");
		v = map_get(c, sent, "redis_auth");
		return fail(c, v, join(sub, field, "sentinel.redis_auth"), "username needs a password");
	}
	if (s->sentinel_auth.username && !s->sentinel_auth.password)
		return fail(c, map_get(c, sent, "sentinel_auth"),
			    join(sub, field, "sentinel.sentinel_auth"), "username needs a password");
	if ((v = map_get(c, n, "keyPrefix"))) {
		join(sub, field, "keyPrefix");
		free(s->key_prefix);
		s->key_prefix = NULL;
		if ((err = kt_cfg_get_str(c, v, sub, 64, &s->key_prefix)))
			return err;
		if (!key_prefix_ok(s->key_prefix))
			return fail(c, v, sub, "\"%s\" may only hold letters, digits and _.:-",
				    show_str(s->key_prefix).s);
	}
	if ((v = map_get(c, n, "leases"))) {
		int l;

		if ((err = kt_cfg_get_enum(c, v, join(sub, field, "leases"), leases_names, 2, &l)))
			return err;
		if (l == KT_LEASES_NODE && s->redis_mode == KT_REDIS_CLUSTER)
			return fail(c, v, sub,
				    "node is not available with mode: cluster (a node's lease and the change "
				    "feed are one key each, and a cluster spreads the limits over slots)");
		s->leases = (enum kt_store_leases)l;
	}
	if ((v = map_get(c, n, "timeout")) &&
	    (err = kt_cfg_get_duration(c, v, join(sub, field, "timeout"),
				       KT_STORE_TIMEOUT_MIN_MS * NS_PER_MS,
				       KT_STORE_TIMEOUT_MAX_MS * NS_PER_MS, &s->timeout_ns)))
		return err;
	return 0;
}

/* Fills *s (already defaulted by store_defaults) from a store block. */
int kt_cfg_parse_store(struct ctx *c, yaml_node_t *n, const char *field, struct kt_store_cfg *s)
{
	static const char *const keys[] = { "static",	   "redisStore",  "heartbeat",
					    "staleAfter",  "validFor",	  "fallbackFor",
					    "maxMembers",  "onStoreFailure", NULL };
	char sub[FIELD_LEN];
	yaml_node_t *st, *rs, *v, *hb;
	long long ll;
	int e, err = kt_cfg_check_map(c, n, field, keys);

	if (err)
		return err;
	s->line = line_of(n);
	if (!s->file && !(s->file = strdup(c->file)))
		return oom(c, n, field);
	st = map_get(c, n, "static");
	rs = map_get(c, n, "redisStore");
	if (st && rs)
		return fail(c, rs, join(sub, field, "redisStore"),
			    "give only one of static, redisStore (static at line %d)", line_of(st));
	if (st) {
		static const char *const skeys[] = { "poolSize", NULL };

		s->kind = KT_STORE_STATIC;
		join(sub, field, "static");
		if ((err = kt_cfg_check_map(c, st, sub, skeys)))
			return err;
		if (!(v = map_get(c, st, "poolSize")))
			return kt_cfg_missing(c, st, sub, "poolSize");
		if ((err = kt_cfg_get_int(c, v, join(sub, field, "static.poolSize"), 1, 1000000, &ll)))
			return err;
		s->static_pool_size = (int)ll;
	}
	if (rs) {
		s->kind = KT_STORE_REDIS;
		if ((err = parse_redis(c, rs, join(sub, field, "redisStore"), s)))
			return err;
	}
	if ((hb = map_get(c, n, "heartbeat")) &&
	    (err = kt_cfg_get_duration(c, hb, join(sub, field, "heartbeat"), 10 * NS_PER_MS,
				       60 * NS_PER_SEC, &s->heartbeat_ns)))
		return err;
	if ((v = map_get(c, n, "staleAfter"))) {
		if ((err = kt_cfg_get_int(c, v, join(sub, field, "staleAfter"), 2, 100, &ll)))
			return err;
		s->stale_after = (int)ll;
	}
	if ((v = map_get(c, n, "validFor")) &&
	    (err = kt_cfg_get_duration(c, v, join(sub, field, "validFor"), 0, UINT64_MAX, &s->valid_for_ns)))
		return err;
	if (s->valid_for_ns <= s->heartbeat_ns)
		return fail(c, v ? v : hb, join(sub, field, v ? "validFor" : "heartbeat"),
			    "validFor (%s) must be longer than heartbeat (%s)",
			    kt_cfg_fmt_dur(s->valid_for_ns).s, kt_cfg_fmt_dur(s->heartbeat_ns).s);
	if ((v = map_get(c, n, "fallbackFor")) &&
	    (err = kt_cfg_get_duration(c, v, join(sub, field, "fallbackFor"), 0, 24 * 3600 * NS_PER_SEC,
				       &s->fallback_for_ns)))
		return err;
	if ((v = map_get(c, n, "maxMembers"))) {
		if ((err = kt_cfg_get_int(c, v, join(sub, field, "maxMembers"), 1, 1000000, &ll)))
			return err;
		s->max_members = (int)ll;
	}
	if ((v = map_get(c, n, "onStoreFailure"))) {
		if ((err = kt_cfg_get_enum(c, v, join(sub, field, "onStoreFailure"), failure_names, 3, &e)))
			return err;
		s->on_failure = (enum kt_store_failure)e;
	}
	return 0;
}
