/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The Redis store over TLS, through the store API, against real
 * redis-server / redis-sentinel processes with --tls-port and certificates
 * made by the openssl CLI (tests/lib/redis_tls.h): CA verification, wrong CA,
 * insecure_skip_verify, host names, mutual TLS, no fallback to clear text,
 * and Sentinel (and a failover) over TLS. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "kthrottle.h"
#include "kt_storefx.h"
#include "redis_proc.h"
#include "redis_tls.h"
#include "base/config.h"
#include "store/store.h"

#define PREFIX "kttls"
#define LIVE KT_POOL_REPORT_LIVE

static struct rt_certs g_certs;
static struct rp_proc g_tls, g_mtls;  /* TLS; TLS requiring client certificates */
static int g_tls_port, g_mtls_port;
static char err[KT_ERR_LEN];

#define ASSERT_OK(expr)                                                            \
	do {                                                                       \
		int ret_ = (expr);                                                 \
		if (ret_)                                                          \
			fail_msg("%s = %d (%s)", #expr, ret_, err);                \
	} while (0)

static uint64_t mono_ms(void)
{
	return kt_clock_ns() / 1000000ULL;
}

static void cfg_tls(struct kt_store_cfg *c, const char *host, int port, const char *ca)
{
	memset(c, 0, sizeof(*c));
	c->kind = KT_STORE_REDIS;
	c->line = 3;
	c->redis_mode = KT_REDIS_SINGLE;
	c->host = (char *)host;
	c->port = port;
	c->key_prefix = PREFIX;
	c->redis_tls.enabled = true;
	c->redis_tls.ca_cert = (char *)ca;
}

static struct kt_store *open_cfg(const struct kt_store_cfg *c)
{
	struct kt_store *s;

	ASSERT_OK(kt_store_open(&s, c, err, sizeof(err)));
	return kt_storefx_track(s);
}

static int beat(struct kt_store *s, const char *limit, const char *id, struct kt_pool_answer *a)
{
	struct kt_pool_member m = { id, LIVE };

	return kt_store_heartbeat(s, limit, &m, 1, 5000, a, err, sizeof(err));
}

/* The heartbeat really reached this server: hb and size hold the member. */
static void assert_stored(const struct rp_proc *p, const char *limit, const char *id)
{
	redisReply *r = rp_command(p, "ZSCORE " PREFIX ":pool:{%s}:hb %s", limit, id);

	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_STRING);
	freeReplyObject(r);
	r = rp_command(p, "HGET " PREFIX ":pool:{%s}:size %s", limit, id);
	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_STRING);
	assert_string_equal(r->str, "1");
	freeReplyObject(r);
}

static int group_setup(void **state)
{
	(void)state;
	return rt_start_tls_pair(&g_certs, &g_tls, &g_tls_port, &g_mtls, &g_mtls_port);
}

static int group_teardown(void **state)
{
	(void)state;
	rt_stop_tls_pair(&g_certs, &g_tls, &g_mtls);
	return 0;
}


/* A good CA: heartbeats, ramp save/load, values read back from the server. */
static void test_good_ca(void **state)
{
	struct kt_store_cfg c;
	struct kt_store *s;
	struct kt_pool_answer a;
	char ep[64], want[64];
	double rate;

	(void)state;
	cfg_tls(&c, "127.0.0.1", g_tls_port, g_certs.ca);
	s = open_cfg(&c);
	ASSERT_OK(beat(s, "good", "g1", &a));
	assert_int_equal(a.agree, 1);
	assert_int_equal(a.size, 1);
	assert_int_equal(a.live, 1);
	assert_int_equal(kt_store_state(s, NULL, NULL), KT_STORE_UP);
	snprintf(want, sizeof(want), "127.0.0.1:%d", g_tls_port);
	assert_string_equal(kt_store_endpoint(s, ep, sizeof(ep)), want);
	assert_stored(&g_tls, "good", "g1");
	ASSERT_OK(kt_store_save_ramp(s, "good", 12.5, 60000, err, sizeof(err)));
	ASSERT_OK(kt_store_load_ramp(s, "good", &rate, err, sizeof(err)));
	assert_true(rate == 12.5);
	ASSERT_OK(kt_store_ping(s, err, sizeof(err)));
	assert_string_equal(kt_store_last_error(s), "");
}

/* A name, not an IP literal: sent as SNI and checked against the DNS SAN. */
static void test_host_name(void **state)
{
	struct kt_store_cfg c;
	struct kt_store *s;
	struct kt_pool_answer a;

	(void)state;
	cfg_tls(&c, "localhost", g_tls_port, g_certs.ca);
	s = open_cfg(&c);
	ASSERT_OK(beat(s, "name", "n1", &a));
	assert_int_equal(a.agree, 1);
	assert_stored(&g_tls, "name", "n1");
}

/* A CA that signed nothing here: one clear line, the store DOWN and backing
 * off like after any other connection failure (pool.c's onStoreFailure
 * policy sees the same errors). */
static void test_wrong_ca(void **state)
{
	struct kt_store_cfg c;
	struct kt_store *s;
	struct kt_pool_answer a;
	char want[96];
	int ret;

	(void)state;
	cfg_tls(&c, "127.0.0.1", g_tls_port, g_certs.other_ca);
	s = open_cfg(&c);
	ret = beat(s, "wrong", "w1", &a);
	assert_int_equal(ret, -EPROTO);
	snprintf(want, sizeof(want), "redis: TLS handshake with 127.0.0.1:%d failed: ", g_tls_port);
	assert_non_null(strstr(err, want));
	assert_non_null(strstr(err, "certificate verify failed ("));
	assert_null(strchr(err, '\n'));
	assert_string_equal(kt_store_last_error(s), err);
	assert_int_equal(kt_store_state(s, NULL, NULL), KT_STORE_DOWN);
	assert_false(kt_store_connected(s));
	assert_int_equal(beat(s, "wrong", "w1", &a), -EAGAIN);
	assert_non_null(strstr(err, "next retry"));
	assert_non_null(strstr(err, "certificate verify failed"));
}

/* insecure_skip_verify: the wrong CA (or none) no longer matters; still TLS. */
static void test_insecure_skip_verify(void **state)
{
	struct kt_store_cfg c;
	struct kt_store *s;
	struct kt_pool_answer a;

	(void)state;
	cfg_tls(&c, "127.0.0.1", g_tls_port, g_certs.other_ca);
	c.redis_tls.insecure_skip_verify = true;
	s = open_cfg(&c);
	ASSERT_OK(beat(s, "skip", "s1", &a));
	assert_int_equal(a.agree, 1);
	assert_stored(&g_tls, "skip", "s1");
}

/* TLS to the plain port: the handshake fails; never a clear-text fallback. */
static void test_no_clear_text_fallback(void **state)
{
	struct kt_store_cfg c;
	struct kt_store *s;
	struct kt_pool_answer a;

	(void)state;
	cfg_tls(&c, "127.0.0.1", g_tls.port, g_certs.ca);
	s = open_cfg(&c);
	assert_true(beat(s, "plain", "p1", &a) < 0);
	assert_non_null(strstr(err, "TLS"));
	assert_int_equal(kt_store_state(s, NULL, NULL), KT_STORE_DOWN);
}

static void test_mtls_given(void **state)
{
	struct kt_store_cfg c;
	struct kt_store *s;
	struct kt_pool_answer a;

	(void)state;
	cfg_tls(&c, "127.0.0.1", g_mtls_port, g_certs.ca);
	c.redis_tls.cert = g_certs.client_crt;
	c.redis_tls.key = g_certs.client_key;
	s = open_cfg(&c);
	ASSERT_OK(beat(s, "mtls", "m1", &a));
	assert_int_equal(a.agree, 1);
	assert_stored(&g_mtls, "mtls", "m1");
}

/* Under TLS 1.3 the server refuses after our side of the handshake is done:
 * the refusal (an alert) surfaces on the first command, still one line. */
static void test_mtls_missing(void **state)
{
	struct kt_store_cfg c;
	struct kt_store *s;
	struct kt_pool_answer a;
	char want[32];
	int ret;

	(void)state;
	cfg_tls(&c, "127.0.0.1", g_mtls_port, g_certs.ca);
	s = open_cfg(&c);
	ret = beat(s, "mtls", "m2", &a);
	assert_true(ret < 0 && ret != -EAGAIN);
	snprintf(want, sizeof(want), "127.0.0.1:%d", g_mtls_port);
	assert_non_null(strstr(err, want));
	assert_non_null(strstr(err, "TLS"));
	assert_non_null(strstr(err, "certificate required"));
	assert_null(strchr(err, '\n'));
	assert_int_equal(kt_store_state(s, NULL, NULL), KT_STORE_DOWN);
}

/* Unreadable or mismatched files are refused at open, not at every connect. */
static void test_bad_files_at_open(void **state)
{
	struct kt_store_cfg c;
	struct kt_store *s;

	(void)state;
	cfg_tls(&c, "127.0.0.1", g_tls_port, "/nonexistent/kt-ca.pem");
	assert_int_equal(kt_store_open(&s, &c, err, sizeof(err)), -EIO);
	assert_null(s);
	assert_non_null(strstr(err, "store (line 3): redis_tls: cannot open /nonexistent/kt-ca.pem"));
	cfg_tls(&c, "127.0.0.1", g_tls_port, g_certs.ca);
	c.redis_tls.cert = g_certs.client_crt;
	c.redis_tls.key = g_certs.server_key; /* not this certificate's key */
	assert_int_equal(kt_store_open(&s, &c, err, sizeof(err)), -EIO);
	assert_non_null(strstr(err, "store (line 3): redis_tls: cannot load key "));
	assert_non_null(strstr(err, "mismatch"));
}

/* Sentinel over TLS (sentinel_tls) naming a TLS master (redis_tls), both
 * requiring client certificates; the +switch-master subscription is a TLS
 * connection too, so a failover is followed at once. */
static void test_sentinel_tls(void **state)
{
	struct rp_proc *M = &kfx_procs[0], *R = &kfx_procs[1], *S = &kfx_procs[2];
	int m_port, r_port, s_port, ret;
	struct kt_store_cfg c;
	struct kt_store *s, *bad;
	struct kt_pool_answer a;
	char ep[64], want[96];
	uint64_t t0;

	(void)state;
	ASSERT_OK(rt_start_tls_master(M, &g_certs, true, &m_port));
	ASSERT_OK(rt_start_tls_replica(R, M, m_port, &g_certs, &r_port));
	ASSERT_OK(rt_start_tls_sentinel(S, M, m_port, &g_certs, "ktm", 1, 1000, true, &s_port));

	memset(&c, 0, sizeof(c));
	c.kind = KT_STORE_REDIS;
	c.line = 5;
	c.redis_mode = KT_REDIS_SENTINEL;
	c.n_endpoints = 1;
	c.endpoint_host[0] = "127.0.0.1";
	c.endpoint_port[0] = s_port;
	c.master_name = "ktm";
	c.key_prefix = PREFIX;
	c.redis_tls = (struct kt_tls_cfg){ .enabled = true, .ca_cert = g_certs.ca,
					   .cert = g_certs.client_crt, .key = g_certs.client_key };
	c.sentinel_tls = c.redis_tls;
	s = open_cfg(&c);
	ASSERT_OK(beat(s, "sent", "sm", &a));
	assert_int_equal(a.agree, 1);
	snprintf(want, sizeof(want), "127.0.0.1:%d", m_port);
	assert_string_equal(kt_store_endpoint(s, ep, sizeof(ep)), want);
	assert_stored(M, "sent", "sm");

	/* the wrong CA for the sentinels only: the sentinel step fails, clearly */
	c.sentinel_tls.ca_cert = g_certs.other_ca;
	bad = open_cfg(&c);
	assert_int_equal(kt_store_ping(bad, err, sizeof(err)), -EPROTO);
	snprintf(want, sizeof(want), "sentinel: TLS handshake with 127.0.0.1:%d failed", s_port);
	assert_non_null(strstr(err, want));
	assert_non_null(strstr(err, "certificate verify failed"));

	ASSERT_OK(rp_sentinel_wait_replicas(S, "ktm", 1, 15000));
	ASSERT_OK(rp_sentinel_failover(S, "ktm", r_port));
	/* the old master still takes writes: only the event moves the store */
	snprintf(want, sizeof(want), "127.0.0.1:%d", r_port);
	t0 = mono_ms();
	for (;;) {
		ret = beat(s, "sent", "sm", &a);
		if (!ret && strcmp(kt_store_endpoint(s, ep, sizeof(ep)), want) == 0)
			break;
		if (mono_ms() - t0 > 1000)
			fail_msg("store did not follow the failover: %d %s (at %s)", ret, err, ep);
		rp_sleep_ms(50);
	}
	assert_int_equal(a.agree, 1);
	assert_stored(R, "sent", "sm");
}

/* From YAML: a rediss:// URL with a redis_tls block now loads and connects
 * (it used to be refused as "no TLS support"). */
static void test_config_rediss_loads(void **state)
{
	struct kt_config cfg;
	struct kt_store *s;
	struct kt_pool_answer a;
	char *y;
	int n;

	(void)state;
	n = asprintf(&y,
		     "store:\n"
		     "  redisStore:\n"
		     "    mode: single\n"
		     "    url: rediss://127.0.0.1:%d/0\n"
		     "    keyPrefix: " PREFIX "\n"
		     "    redis_tls: {ca_cert_secret: %s, cert_secret: %s, key_secret: %s}\n"
		     "limits:\n"
		     "  - {name: a, cgroups: [x], unit: connection, rateLimit: {max: 100}}\n",
		     g_mtls_port, g_certs.ca, g_certs.client_crt, g_certs.client_key);
	assert_true(n > 0);
	ASSERT_OK(kt_config_parse("tls.yaml", y, strlen(y), &cfg, err, sizeof(err)));
	free(y);
	assert_true(cfg.store.redis_tls.enabled);
	s = open_cfg(&cfg.store);
	ASSERT_OK(beat(s, "yaml", "y1", &a));
	assert_int_equal(a.agree, 1);
	assert_stored(&g_mtls, "yaml", "y1");
	kt_config_free(&cfg);
}

/* A file at fault is reported at its own key's line (FILE:LINE: FIELD), as
 * passwordFile is, not at the store's. */
static void test_file_errors_at_key_line(void **state)
{
	struct kt_config cfg;
	struct kt_store *s;
	char *y, want[KT_ERR_LEN];
	const char *ca[] = { "/nonexistent/kt-ca.pem", g_certs.ca };
	const char *key[] = { g_certs.client_key, g_certs.server_key };

	(void)state;
	for (int i = 0; i < 2; i++) {
		assert_true(asprintf(&y,
				     "store:\n"
				     "  redisStore:\n"
				     "    mode: single\n"
				     "    url: rediss://127.0.0.1:%d/0\n"
				     "    redis_tls:\n"
				     "      ca_cert_secret: %s\n"
				     "      cert_secret: %s\n"
				     "      key_secret: %s\n"
				     "limits:\n"
				     "  - {name: a, cgroups: [x], unit: connection, rateLimit: {max: 100}}\n",
				     g_mtls_port, ca[i], g_certs.client_crt, key[i]) > 0);
		ASSERT_OK(kt_config_parse("tls.yaml", y, strlen(y), &cfg, err, sizeof(err)));
		free(y);
		assert_int_equal(kt_store_open(&s, &cfg.store, err, sizeof(err)), -EIO);
		assert_null(s);
		if (i == 0)
			snprintf(want, sizeof(want),
				 "tls.yaml:6: store.redisStore.redis_tls.ca_cert_secret: cannot open %s: ",
				 ca[0]);
		else
			snprintf(want, sizeof(want),
				 "tls.yaml:8: store.redisStore.redis_tls.key_secret: cannot load key %s: ",
				 key[1]);
		if (strncmp(err, want, strlen(want)))
			fail_msg("got \"%s\", want \"%s...\"", err, want);
		assert_null(strchr(err, '\n'));
		/* a limit's copy of the store says the same */
		assert_int_equal(kt_store_open(&s, &cfg.limits[0].store, err, sizeof(err)), -EIO);
		assert_int_equal(strncmp(err, want, strlen(want)), 0);
		kt_config_free(&cfg);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_good_ca, kt_storefx_teardown),
		cmocka_unit_test_teardown(test_host_name, kt_storefx_teardown),
		cmocka_unit_test_teardown(test_wrong_ca, kt_storefx_teardown),
		cmocka_unit_test_teardown(test_insecure_skip_verify, kt_storefx_teardown),
		cmocka_unit_test_teardown(test_no_clear_text_fallback, kt_storefx_teardown),
		cmocka_unit_test_teardown(test_mtls_given, kt_storefx_teardown),
		cmocka_unit_test_teardown(test_mtls_missing, kt_storefx_teardown),
		cmocka_unit_test_teardown(test_bad_files_at_open, kt_storefx_teardown),
		cmocka_unit_test_teardown(test_file_errors_at_key_line, kt_storefx_teardown),
		cmocka_unit_test_teardown(test_config_rediss_loads, kt_storefx_teardown),
		cmocka_unit_test_teardown(test_sentinel_tls, kt_storefx_teardown),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
