// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Hostile config and secret input: FIFOs, directories, devices, sockets and
 * oversized files are refused promptly with one line naming the file; deep
 * nesting and anchor floods are rejected in linear time; long flat but valid
 * configs still parse. A read that blocks is caught by alarm(): SIGALRM kills
 * the binary and the run counts it as a failure. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/config.h"

#define LIM "limits:\n  - name: a\n    cgroups: [x]\n    unit: connection\n    rateLimit: {max: 100}\n"
#define REDIS_AUTH(path) \
	"store:\n  redisStore:\n    mode: single\n    url: redis://h\n" \
	"    redis_auth: {username: u, passwordFile: " path "}\n" LIM

static char dir[] = "/tmp/kt-test-cfgfiles-XXXXXX";

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *in_dir(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", dir, name);
	return buf;
}

static void write_file(const char *path, const char *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, len), (ssize_t)len);
	close(fd);
}

/* Loads `path`, which must fail with `code` and an error equal to "PATH" +
 * `suffix`, within a second. */
static void load_fails(const char *path, int code, const char *suffix)
{
	struct kt_config cfg;
	char err[KT_ERR_LEN], want[KT_ERR_LEN];
	double t0 = now();

	alarm(5); /* a blocking open or read ends the binary here */
	assert_int_equal(kt_config_load(path, &cfg, err, sizeof(err)), code);
	alarm(0);
	assert_true(now() - t0 < 1.0);
	snprintf(want, sizeof(want), "%s%s", path, suffix);
	assert_string_equal(err, want);
	assert_null(cfg.file);
	assert_null(cfg.limits);
}

/* Parses `yaml`, which must fail with `code` and an error holding `want`,
 * within a second. */
static void parse_fails_code(const char *yaml, size_t len, int code, const char *want)
{
	struct kt_config cfg;
	char err[KT_ERR_LEN];
	double t0 = now();

	alarm(5);
	assert_int_equal(kt_config_parse("t.yaml", yaml, len, &cfg, err, sizeof(err)), code);
	alarm(0);
	assert_true(now() - t0 < 1.0);
	if (!strstr(err, want))
		fail_msg("got \"%s\", want \"%s\"", err, want);
	assert_null(cfg.file);
}

#define parse_fails(yaml, len, want) parse_fails_code(yaml, len, -EINVAL, want)

static void test_fifo_config(void **state)
{
	char path[128];

	(void)state;
	in_dir(path, sizeof(path), "fifo.yaml");
	assert_int_equal(mkfifo(path, 0600), 0);
	/* no writer: a blocking open() would wait forever */
	load_fails(path, -EINVAL, ": cannot open: a FIFO, not a regular file");
	unlink(path);
}

static void test_not_regular(void **state)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	char path[128];
	int s;

	(void)state;
	load_fails(dir, -EISDIR, ": cannot open: Is a directory");
	load_fails("/dev/zero", -EINVAL, ": cannot open: a character device, not a regular file");
	load_fails("/dev/null", -EINVAL, ": cannot open: a character device, not a regular file");

	/* a socket is named for what it is */
	in_dir(path, sizeof(path), "sock.yaml");
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
	s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(s >= 0);
	assert_int_equal(bind(s, (struct sockaddr *)&sun, sizeof(sun)), 0);
	load_fails(path, -EINVAL, ": cannot open: a socket, not a regular file");
	close(s);
	unlink(path);
}

static void test_size_cap(void **state)
{
	struct kt_config cfg;
	char path[128], err[KT_ERR_LEN];
	size_t cap = KT_CONFIG_MAX_BYTES;
	char *big = malloc(cap + 1);

	(void)state;
	assert_non_null(big);
	/* exactly 8 MiB: a valid config padded with a comment */
	memset(big, 'x', cap);
	memcpy(big, LIM "#", strlen(LIM "#"));
	big[cap - 1] = '\n';
	in_dir(path, sizeof(path), "big.yaml");
	write_file(path, big, cap);
	assert_int_equal(kt_config_load(path, &cfg, err, sizeof(err)), 0);
	assert_int_equal(cfg.n_limits, 1);
	kt_config_free(&cfg);

	/* one byte more */
	big[cap] = '\n';
	write_file(path, big, cap + 1);
	load_fails(path, -EFBIG, ": cannot read: larger than 8 MiB (the limit for config files)");

	/* sparse and huge: refused from fstat, nothing read */
	assert_int_equal(truncate(path, 1LL << 40), 0);
	load_fails(path, -EFBIG, ": cannot read: larger than 8 MiB (the limit for config files)");
	unlink(path);
	free(big);
}

/* Secret files: same rules, 64 KiB cap, errors at the passwordFile line. */
static void test_secret_files(void **state)
{
	struct kt_config cfg;
	char fifo[128], yaml[1024], err[KT_ERR_LEN], want[KT_ERR_LEN];
	size_t cap = 64 << 10;
	char *big = malloc(cap + 2);

	(void)state;
	assert_non_null(big);
	in_dir(fifo, sizeof(fifo), "pass.fifo");
	assert_int_equal(mkfifo(fifo, 0600), 0);
	snprintf(yaml, sizeof(yaml), REDIS_AUTH("%s"), fifo);
	snprintf(want, sizeof(want),
		 "t.yaml:5: store.redisStore.redis_auth.passwordFile: cannot open %s: "
		 "a FIFO, not a regular file", fifo);
	parse_fails(yaml, strlen(yaml), want);
	unlink(fifo);

	snprintf(yaml, sizeof(yaml), REDIS_AUTH("%s"), "/dev/zero");
	parse_fails(yaml, strlen(yaml),
		    "passwordFile: cannot open /dev/zero: a character device, not a regular file");
	snprintf(yaml, sizeof(yaml), REDIS_AUTH("%s"), dir);
	parse_fails_code(yaml, strlen(yaml), -EISDIR, ": Is a directory");

	/* 64 KiB plus the newline editors add is accepted; one byte more is not */
	memset(big, 'p', cap);
	big[cap] = '\n';
	in_dir(fifo, sizeof(fifo), "pass.txt");
	write_file(fifo, big, cap + 1);
	snprintf(yaml, sizeof(yaml), REDIS_AUTH("%s"), fifo);
	parse_fails_code(yaml, strlen(yaml), -EFBIG,
			 "is larger than 64 KiB (the limit for secret files)");
	write_file(fifo, big, cap);
	assert_int_equal(kt_config_parse("t.yaml", yaml, strlen(yaml), &cfg, err, sizeof(err)), 0);
	assert_int_equal(strlen(cfg.store.redis_auth.password), cap);
	kt_config_free(&cfg);
	unlink(fifo);
	free(big);

	/* a block mapping: its own line, not the store's or redis_auth's */
	snprintf(yaml, sizeof(yaml),
		 "store:\n  redisStore:\n    mode: single\n    url: redis://h\n"
		 "    redis_auth:\n      username: u\n      passwordFile: /nonexistent/kt-pass\n"
		 "limits:\n  - {name: a, cgroups: [x], unit: connection, rateLimit: {max: 1}}\n");
	parse_fails_code(yaml, strlen(yaml), -ENOENT,
			 "t.yaml:7: store.redisStore.redis_auth.passwordFile: cannot open /nonexistent/kt-pass: ");
}

/* 100k '[' took 15 s to reject (quadratic inside libyaml); now the event
 * pass stops at level 65. */
static void test_deep_nesting(void **state)
{
	size_t n = 100000, i;
	char *y = malloc(n + 64), path[128];

	(void)state;
	assert_non_null(y);
	memset(y, '[', n);
	parse_fails(y, n, "t.yaml:1: yaml: too deeply nested (more than 64 levels)");
	memset(y, '{', n);
	parse_fails(y, n, "t.yaml:1: yaml: too deeply nested (more than 64 levels)");
	in_dir(path, sizeof(path), "deep.yaml");
	write_file(path, y, n);
	load_fails(path, -EINVAL, ":1: yaml: too deeply nested (more than 64 levels)");
	unlink(path);

	/* block style, one level a line: the error names line 65 */
	for (i = 0, n = 0; i < 70; i++)
		n += (size_t)sprintf(y + n, "%*s-\n", (int)i, "");
	parse_fails(y, n, "t.yaml:65: yaml: too deeply nested (more than 64 levels)");

	/* 64 levels pass this check and reach the schema */
	n = (size_t)sprintf(y, "node: ");
	memset(y + n, '[', 63);
	memset(y + n + 63, ']', 63);
	n += 126;
	y[n++] = '\n';
	parse_fails(y, n, "t.yaml:1: node: expected a string, got a list");
	free(y);
}

static void test_anchor_flood(void **state)
{
	size_t cap = 64 << 10, n = 0;
	char *y = malloc(cap);
	int i;

	(void)state;
	assert_non_null(y);
	n += (size_t)sprintf(y, "node: [");
	for (i = 0; i < 300; i++)
		n += (size_t)sprintf(y + n, "&a%d x, ", i);
	n += (size_t)sprintf(y + n, "*a299]\n");
	parse_fails(y, n, "t.yaml:1: yaml: too many anchors (more than 256)");

	/* a few anchors, used as intended */
	n = (size_t)sprintf(y, "store: &s {static: {poolSize: 2}}\nlimits:\n"
			       "  - {name: a, cgroups: [x], unit: byte, rateLimit: {max: 9, store: *s}}\n");
	{
		struct kt_config cfg;
		char err[KT_ERR_LEN];

		assert_int_equal(kt_config_parse("t.yaml", y, n, &cfg, err, sizeof(err)), 0);
		assert_int_equal(cfg.limits[0].store.static_pool_size, 2);
		kt_config_free(&cfg);
	}
	free(y);
}

/* Long flat lists are not nesting: KT_MAX_LIMITS limits, and a limit of
 * KT_MAX_CGROUPS_PER_LIMIT cgroups, parse. */
static void test_long_flat(void **state)
{
	struct kt_config cfg;
	char err[KT_ERR_LEN];
	size_t cap = KT_CONFIG_MAX_BYTES, n;
	char *y = malloc(cap);
	char last[32];
	double t0;
	int i, j;

	(void)state;
	assert_non_null(y);
	n = (size_t)sprintf(y, "limits:\n");
	for (i = 0; i < KT_MAX_LIMITS; i++)
		n += (size_t)sprintf(y + n, "  - {name: l%d, cgroups: [c%d], unit: packet, "
				     "rateLimit: {max: 10}}\n", i, i);
	t0 = now();
	assert_int_equal(kt_config_parse("t.yaml", y, n, &cfg, err, sizeof(err)), 0);
	assert_true(n < cap);
	print_message("%d limits parsed in %.3f s\n", KT_MAX_LIMITS, now() - t0);
	assert_true(now() - t0 < 2.0);
	assert_int_equal(cfg.n_limits, KT_MAX_LIMITS);
	snprintf(last, sizeof(last), "l%d", KT_MAX_LIMITS - 1);
	assert_string_equal(cfg.limits[KT_MAX_LIMITS - 1].name, last);
	kt_config_free(&cfg);

	n = (size_t)sprintf(y, LIM "  - name: b\n    unit: byte\n    rateLimit: {max: 1e6}\n"
			       "    cgroups:\n");
	for (j = 0; j < KT_MAX_CGROUPS_PER_LIMIT; j++)
		n += (size_t)sprintf(y + n, "      - pod/%d\n", j);
	assert_int_equal(kt_config_parse("t.yaml", y, n, &cfg, err, sizeof(err)), 0);
	assert_int_equal(cfg.limits[1].n_cgroups, KT_MAX_CGROUPS_PER_LIMIT);
	kt_config_free(&cfg);
	free(y);
}

static int setup(void **state)
{
	(void)state;
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	return rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fifo_config),
		cmocka_unit_test(test_not_regular),
		cmocka_unit_test(test_size_cap),
		cmocka_unit_test(test_secret_files),
		cmocka_unit_test(test_deep_nesting),
		cmocka_unit_test(test_anchor_flood),
		cmocka_unit_test(test_long_flat),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
