/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* kt_store_open and kt_store_close (store.h): the configuration checked and
 * copied, the transport chosen (store_int.h). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "store/store_int.h"

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
	if (s->t)
		s->t->close(s);
	free(s->host);
	free(s->user);
	rs_free_secret(s->pass);
	free(s->pass_file);
	for (int i = 0; i < s->n_ep; i++)
		free(s->ep_host[i]);
	free(s->master_name);
	free(s->s_user);
	rs_free_secret(s->s_pass);
	free(s->s_pass_file);
	free(s->prefix);
	tls_opt_free(&s->tls_redis);
	tls_opt_free(&s->tls_sentinel);
	kt_hbmemo_free(s->memo);
	free(s->node);
	free(s);
}

int kt_store_set_node(struct kt_store *s, const char *node)
{
	char *dup;

	if (!s || !node || !rs_valid_token(node, KT_STORE_ID_MAX) || !(dup = strdup(node)))
		return -EINVAL;
	free(s->node);
	s->node = dup;
	s->feed_since = 0; /* a new name holds no lease yet */
	return 0;
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
	if (a->username && !rs_valid_token(a->username, 255)) {
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
	if (!rs_valid_token(prefix, KT_STORE_PREFIX_MAX)) {
		snprintf(err, errlen, "store (line %d): keyPrefix must be 1..%d printable characters without spaces",
			 cfg->line, KT_STORE_PREFIX_MAX);
		return -EINVAL;
	}
	if (cfg->db < 0) {
		snprintf(err, errlen, "store (line %d): db %d is negative", cfg->line, cfg->db);
		return -EINVAL;
	}
	if (cfg->timeout_ns && (cfg->timeout_ns < KT_STORE_TIMEOUT_MIN_MS * 1000000ULL ||
				cfg->timeout_ns > KT_STORE_TIMEOUT_MAX_MS * 1000000ULL)) {
		snprintf(err, errlen, "store (line %d): timeout must be %d ms..%d s, or unset (auto)",
			 cfg->line, KT_STORE_TIMEOUT_MIN_MS, KT_STORE_TIMEOUT_MAX_MS / 1000);
		return -EINVAL;
	}
	ret = check_auth(&cfg->redis_auth, "redis_auth", cfg->line, err, errlen);
	if (ret)
		return ret;
	if (cfg->redis_mode == KT_REDIS_SINGLE) {
		if (!rs_valid_host(cfg->host) || cfg->port < 1 || cfg->port > 65535) {
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
			if (!rs_valid_host(cfg->endpoint_host[i]) || cfg->endpoint_port[i] < 1 ||
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
			if (!rs_valid_host(cfg->endpoint_host[i]) || cfg->endpoint_port[i] < 1 ||
			    cfg->endpoint_port[i] > 65535) {
				snprintf(err, errlen, "store (line %d): sentinel: endpoint %d: bad host or port",
					 cfg->line, i + 1);
				return -EINVAL;
			}
		}
		if (!rs_valid_token(cfg->master_name, 255)) {
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
	if (s->mode == KT_REDIS_SENTINEL) {
		if (dup_str(&s->master_name, cfg->master_name) ||
		    dup_str(&s->s_user, cfg->sentinel_auth.username) ||
		    dup_str(&s->s_pass, cfg->sentinel_auth.password) ||
		    dup_str(&s->s_pass_file, cfg->sentinel_auth.password_file) ||
		    tls_opt_dup(&s->tls_sentinel, &cfg->sentinel_tls))
			goto oom;
	}
	if (cfg->leases == KT_LEASES_NODE && cfg->redis_mode == KT_REDIS_CLUSTER) {
		snprintf(err, errlen, "store (line %d): leases: node is not available with mode: cluster",
			 cfg->line);
		kt_store_close(s);
		return -EINVAL;
	}
	s->leases = cfg->leases;
	s->st.join_budget = KT_STORE_JOIN_FIRST_UNITS;
	s->st.news_budget = KT_STORE_JOIN_FIRST_UNITS;
	s->fixed_timeout_ms = (unsigned)(cfg->timeout_ns / 1000000ULL);
	s->t = s->mode == KT_REDIS_CLUSTER ? &kt_rtrans_cluster : &kt_rtrans_single;
	if (s->t->init(s))
		goto oom;
	s->rng = rs_mono_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)s;
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

