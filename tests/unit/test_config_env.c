// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* kt_config_parse_env with a fake environment (no getenv, no gethostname):
 * the values it takes from there (NODE_NAME, a passwordEnv variable, the
 * host name), a variable that is not set, and a bad value, each error one
 * line naming the variable. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "base/config.h"

/* Lines 1-5: one limit with every required field. */
#define LIM "limits:\n  - name: a\n    cgroups: [x]\n    unit: connection\n    rateLimit: {max: 100}\n"
/* Lines 1-5: a single Redis whose password is in $KT_PW (line 5), then LIM. */
#define PW_ENV                                                                                    \
	"store:\n  redisStore:\n    mode: single\n    url: redis://h\n"                            \
	"    redis_auth: {passwordEnv: KT_PW}\n" LIM

/* The fake environment: up to 4 variables, a host name (or the error
 * hostname gives), and the names asked for. */
struct fake_env {
	const char *names[4], *values[4];
	const char *host;
	int host_err;
	char asked[8][32];
	int n_asked;
};

/* kt_config_env.getenv over fake_env: the value, or NULL when not there. */
static const char *fake_getenv(const char *name, void *arg)
{
	struct fake_env *e = arg;

	if (e->n_asked < 8)
		snprintf(e->asked[e->n_asked++], sizeof(e->asked[0]), "%s", name);
	for (int i = 0; i < 4 && e->names[i]; i++)
		if (!strcmp(e->names[i], name))
			return e->values[i];
	return NULL;
}

/* kt_config_env.hostname over fake_env: host, or host_err when that is set. */
static int fake_hostname(char *buf, size_t len, void *arg)
{
	struct fake_env *e = arg;

	if (e->host_err)
		return e->host_err;
	snprintf(buf, len, "%s", e->host);
	return 0;
}

/* kt_config_parse_env of yaml (as "t.yaml") in the environment e. */
static int parse_in(struct fake_env *e, const char *yaml, struct kt_config *cfg, char *err)
{
	const struct kt_config_env env = { fake_getenv, fake_hostname, e };

	return kt_config_parse_env("t.yaml", yaml, strlen(yaml), &env, cfg, err, KT_ERR_LEN);
}

/* Whether name was asked of the environment. */
static bool asked(const struct fake_env *e, const char *name)
{
	for (int i = 0; i < e->n_asked; i++)
		if (!strcmp(e->asked[i], name))
			return true;
	return false;
}

/* NODE_NAME names the node, the passwordEnv variable gives the password;
 * with no NODE_NAME the node is the host name. */
static void test_values(void **state)
{
	struct fake_env e = { .names = { "NODE_NAME", "KT_PW" }, .values = { "worker-7", "from-env" },
			      .host = "fake-host" };
	struct fake_env no_node = { .names = { "KT_PW" }, .values = { "s3cret" }, .host = "fake-host" };
	struct kt_config cfg;
	char err[KT_ERR_LEN];

	(void)state;
	assert_int_equal(parse_in(&e, PW_ENV, &cfg, err), 0);
	assert_string_equal(err, "");
	assert_string_equal(cfg.node_name, "worker-7");
	assert_string_equal(cfg.store.redis_auth.password, "from-env");
	assert_true(asked(&e, "NODE_NAME"));
	assert_true(asked(&e, "KT_PW"));
	kt_config_free(&cfg);

	assert_int_equal(parse_in(&no_node, PW_ENV, &cfg, err), 0);
	assert_string_equal(cfg.node_name, "fake-host");
	assert_string_equal(cfg.store.redis_auth.password, "s3cret");
	kt_config_free(&cfg);

	/* a node given in the file: NODE_NAME is not needed */
	e.n_asked = 0;
	assert_int_equal(parse_in(&e, "node: n1\n" LIM, &cfg, err), 0);
	assert_string_equal(cfg.node_name, "n1");
	assert_false(asked(&e, "NODE_NAME"));
	kt_config_free(&cfg);
}

/* The passwordEnv variable not set: the error names it, on one line. */
static void test_missing(void **state)
{
	struct fake_env e = { .names = { "NODE_NAME" }, .values = { "worker-7" }, .host = "fake-host" };
	struct kt_config cfg;
	char err[KT_ERR_LEN];

	(void)state;
	assert_int_equal(parse_in(&e, PW_ENV, &cfg, err), -EINVAL);
	assert_string_equal(err, "t.yaml:5: store.redisStore.redis_auth.passwordEnv: "
				 "environment variable KT_PW is not set");
	assert_null(strchr(err, '\n'));
	assert_true(asked(&e, "KT_PW"));
}

/* Bad values: an empty passwordEnv variable is an error naming it; a
 * NODE_NAME that is no safe name gives way to the host name; a host name
 * that cannot be had is an error naming the node. All on one line. */
static void test_bad_value(void **state)
{
	struct fake_env empty = { .names = { "KT_PW" }, .values = { "" }, .host = "fake-host" };
	struct fake_env bad_node = { .names = { "NODE_NAME" }, .values = { "not/a name" },
				     .host = "fake-host" };
	struct fake_env no_host = { .host_err = -EPERM };
	struct kt_config cfg;
	char err[KT_ERR_LEN];

	(void)state;
	assert_int_equal(parse_in(&empty, PW_ENV, &cfg, err), -EINVAL);
	assert_string_equal(err, "t.yaml:5: store.redisStore.redis_auth.passwordEnv: "
				 "environment variable KT_PW is empty");
	assert_null(strchr(err, '\n'));

	assert_int_equal(parse_in(&bad_node, LIM, &cfg, err), 0);
	assert_string_equal(cfg.node_name, "fake-host");
	kt_config_free(&cfg);

	assert_int_equal(parse_in(&no_host, LIM, &cfg, err), -EPERM);
	assert_non_null(strstr(err, "node: not given and gethostname() failed"));
	assert_null(strchr(err, '\n'));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_values),
		cmocka_unit_test(test_missing),
		cmocka_unit_test(test_bad_value),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
