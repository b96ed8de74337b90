// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Secrets that change under a running store are used from its next connect
 * on, read from a Secret volume laid out as the kubelet lays it out
 * (tests/lib/kvol.h): a rotated passwordFile (the server's password changed
 * and the old connections killed: the store reconnects with the new one,
 * where an inline password stays refused), and a rotated CA file (a CA that
 * signed nothing, then the right one: the next connect verifies). A real
 * redis-server throughout. Needs root (mounts). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/config.h"
#include "ktest.h"
#include "kvol.h"
#include "redis_proc.h"
#include "redis_tls.h"
#include "store/store.h"
#include "kt_storefx.h"

#define PREFIX "ktsecret"
#define RECONNECT_BOUND_MS 10000 /* the store's back-off after a failed call */

static char err[512];

/* PINGs until one succeeds, within bound_ms: the ms it took, or -1. */
static int ping_until_ok(struct kt_store *s, int bound_ms)
{
	uint64_t t0 = ktest_now_ns();

	while (ktest_now_ns() - t0 < (uint64_t)bound_ms * 1000000ull) {
		if (kt_store_ping(s, err, sizeof(err)) == 0)
			return (int)((ktest_now_ns() - t0) / 1000000ull);
		ktest_sleep_ms(50);
	}
	print_message("last error: %s\n", err);
	return -1;
}

static void kill_clients(struct rp_proc *r)
{
	redisReply *rep = rp_command(r, "CLIENT KILL TYPE normal SKIPME yes");

	assert_non_null(rep);
	freeReplyObject(rep);
}

static void test_password_file_rotation(void **state)
{
	const struct ktest_kvol_file f[] = { { "password", "first-pass\n" } };
	struct rp_opts o = { .password = "first-pass" };
	struct kt_store_cfg c, inline_c;
	struct kt_store *s, *stale;
	struct ktest_kvol v;
	struct rp_proc r;
	char path[PATH_MAX], why[128], *pass;
	redisReply *rep;
	int ms;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	const char *tmp = *state;

	assert_int_equal(ktest_kvol_create(&v, tmp, "redis-auth", KTEST_KVOL_SECRET), 0);
	assert_int_equal(ktest_kvol_publish(&v, f, 1), 0);
	ktest_kvol_path(&v, "password", path, sizeof(path));
	assert_int_equal(kt_config_read_secret(path, &pass, why, sizeof(why)), 0);
	assert_string_equal(pass, "first-pass");
	assert_int_equal(rp_start_master(&r, &o), 0);

	kt_storefx_cfg_single(&c, r.port, PREFIX);
	c.redis_auth.password = pass;
	c.redis_auth.password_file = path;
	assert_int_equal(kt_store_open(&s, &c, err, sizeof(err)), 0);
	inline_c = c;
	inline_c.redis_auth.password_file = NULL; /* what the config had read once */
	assert_int_equal(kt_store_open(&stale, &inline_c, err, sizeof(err)), 0);
	assert_int_equal(kt_store_ping(s, err, sizeof(err)), 0);
	assert_int_equal(kt_store_ping(stale, err, sizeof(err)), 0);

	/* the password changes on the server and in the Secret; connections
	 * made with the old one are dropped */
	rep = rp_command(&r, "CONFIG SET requirepass %s", "second-pass");
	assert_non_null(rep);
	freeReplyObject(rep);
	snprintf(r.password, sizeof(r.password), "second-pass");
	assert_int_equal(ktest_kvol_update(&v, "password", "second-pass\n"), 0);
	kill_clients(&r);

	ms = ping_until_ok(s, RECONNECT_BOUND_MS);
	print_message("passwordFile store reconnected in %d ms\n", ms);
	assert_true(ms >= 0);
	/* the inline password is refused on its reconnects: the rotation is
	 * what made the other one work */
	{
		uint64_t t0 = ktest_now_ns();
		bool refused = false;

		while (ktest_now_ns() - t0 < 3000000000ull && !refused) {
			assert_int_not_equal(kt_store_ping(stale, err, sizeof(err)), 0);
			refused = strstr(err, "authentication failed");
			assert_null(strstr(err, "first-pass"));
			assert_null(strstr(err, "second-pass"));
			ktest_sleep_ms(50);
		}
		print_message("inline password store: %s\n", err);
		assert_true(refused);
	}

	kt_store_close(s);
	kt_store_close(stale);
	explicit_bzero(pass, strlen(pass));
	free(pass);
	rp_stop(&r);
	ktest_kvol_remove(&v);
}

static void test_ca_rotation(void **state)
{
	struct rt_certs certs = { 0 };
	struct ktest_kvol v;
	struct kt_store_cfg c;
	struct kt_store *s;
	struct rp_proc r;
	char path[PATH_MAX], *wrong, *right;
	int tls_port, ms;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	const char *tmp = *state;

	assert_int_equal(rt_make_certs(&certs), 0);
	wrong = ktest_slurp(certs.other_ca);
	right = ktest_slurp(certs.ca);
	assert_true(strlen(wrong) > 0 && strlen(right) > 0);
	assert_int_equal(ktest_kvol_create(&v, tmp, "redis-tls", KTEST_KVOL_SECRET), 0);
	{
		const struct ktest_kvol_file f[] = { { "ca.crt", wrong } };

		assert_int_equal(ktest_kvol_publish(&v, f, 1), 0);
	}
	assert_int_equal(rt_start_tls_master(&r, &certs, false, &tls_port), 0);
	kt_storefx_cfg_single(&c, tls_port, PREFIX);
	c.redis_tls.enabled = true;
	c.redis_tls.ca_cert = (char *)ktest_kvol_path(&v, "ca.crt", path, sizeof(path));
	assert_int_equal(kt_store_open(&s, &c, err, sizeof(err)), 0);
	assert_int_not_equal(kt_store_ping(s, err, sizeof(err)), 0);
	print_message("with a CA that signed nothing: %s\n", err);
	assert_non_null(strstr(err, "certificate"));

	/* the Secret gets the right CA: the next connect verifies */
	assert_int_equal(ktest_kvol_update(&v, "ca.crt", right), 0);
	ms = ping_until_ok(s, RECONNECT_BOUND_MS);
	print_message("verified after the CA rotation in %d ms\n", ms);
	assert_true(ms >= 0);

	kt_store_close(s);
	free(wrong);
	free(right);
	rp_stop(&r);
	rt_remove_certs(&certs);
	ktest_kvol_remove(&v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_password_file_rotation, ktest_setup_tmpdir, ktest_teardown_tmpdir),
		cmocka_unit_test_setup_teardown(test_ca_rotation, ktest_setup_tmpdir, ktest_teardown_tmpdir),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
