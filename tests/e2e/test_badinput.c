// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Bad input to the real kthrottled: every config error prints one line that
 * names file, line and field and exits 2; runtime errors (no root, a second
 * daemon on the socket) exit 1; either way nothing is left pinned and no
 * socket is left behind. Bad lines on the control socket get a one-line
 * error and the daemon keeps serving everyone else. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "ktest.h"
#include "kt_daemonfx.h"

static char cg[PATH_MAX];        /* a real test cgroup for the valid parts */
static char plain_dir[PATH_MAX]; /* a directory that is not on cgroup2 */

#define MAX_DAEMONS 2
static struct ktest_daemon dm[MAX_DAEMONS];

static int kthrottled(char **out, int uid, const char *a1, const char *a2)
{
	char bin[PATH_MAX];
	char *argv[] = { bin, (char *)a1, (char *)a2, NULL };

	snprintf(bin, sizeof(bin), "%s/kthrottled", ktest_build_dir());
	return ktest_run_capture_as(argv, uid, out);
}

static void assert_nothing_left(const struct ktest_daemon *d)
{
	assert_int_not_equal(access(d->pin_dir, F_OK), 0);
	assert_int_not_equal(access(d->socket, F_OK), 0);
}

/* ---- fixtures ---- */

static int group_setup(void **state)
{
	(void)state;
	if (ktest_root_unavailable())
		return 0;
	if (kt_daemonfx_group_cg("badinput", cg, sizeof(cg)))
		return -1;
	snprintf(plain_dir, sizeof(plain_dir), "/tmp/kt-test-plain-%d", getpid());
	return mkdir(plain_dir, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

static int group_teardown(void **state)
{
	(void)state;
	kt_daemonfx_group_cg_end(cg);
	if (plain_dir[0])
		rmdir(plain_dir);
	return 0;
}

static int setup(void **state)
{
	(void)state;
	kt_daemonfx_dms_begin(dm, MAX_DAEMONS);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	kt_daemonfx_dms_end(dm, MAX_DAEMONS);
	return 0;
}

/* ---- config errors: exit 2 ---- */

struct bad_cfg {
	const char *what;
	const char *body;   /* printf format; %s is the test cgroup */
	const char *needle; /* text on the offending line */
	const char *field;  /* field path the message must name */
	const char *reason; /* and a word of why */
};

#define LIMIT_HEAD "limits:\n  - name: bad\n    unit: datagram\n"

static const struct bad_cfg bad_cfgs[] = {
	{ "unknown key in a limit",
	  LIMIT_HEAD "    cgroups: [%s]\n    bogusKey: 1\n    rateLimit: {max: 10}\n", "bogusKey",
	  "limits[0].bogusKey", "unknown" },
	{ "unknown top-level key", "nodeName: x\n" LIMIT_HEAD "    cgroups: [%s]\n    rateLimit: {max: 10}\n",
	  "nodeName", "nodeName", "unknown" },
	{ "wrong type: list for a number",
	  LIMIT_HEAD "    cgroups: [%s]\n    rateLimit:\n      max: [1, 2]\n", "max:",
	  "limits[0].rateLimit.max", "number" },
	{ "wrong type: word for a number",
	  LIMIT_HEAD "    cgroups: [%s]\n    rateLimit:\n      max: fast\n", "max:",
	  "limits[0].rateLimit.max", "number" },
	{ "negative max", LIMIT_HEAD "    cgroups: [%s]\n    rateLimit:\n      max: -5\n", "max:",
	  "limits[0].rateLimit.max", "-5" },
	{ "zero max", LIMIT_HEAD "    cgroups: [%s]\n    rateLimit:\n      max: 0\n", "max:",
	  "limits[0].rateLimit.max", "0" },
	{ "cgroup path that is no cgroup v2 directory (a missing one only warns)",
	  LIMIT_HEAD "    cgroups:\n      - %s\n      - /tmp\n    rateLimit: {max: 10}\n",
	  "- /tmp", "limits[0].cgroups[1]", "not a cgroup v2 directory" },
	{ "one cgroup in more limits than a membership holds (8)",
	  "limits:\n"
	  "  - {name: l1, cgroups: [%1$s], unit: packet, match: {ports: 1001}, rateLimit: {max: 10}}\n  - {name: l2, cgroups: [%1$s], unit: packet, match: {ports: 1002}, rateLimit: {max: 10}}\n  - {name: l3, cgroups: [%1$s], unit: packet, match: {ports: 1003}, rateLimit: {max: 10}}\n  - {name: l4, cgroups: [%1$s], unit: packet, match: {ports: 1004}, rateLimit: {max: 10}}\n  - {name: l5, cgroups: [%1$s], unit: packet, match: {ports: 1005}, rateLimit: {max: 10}}\n  - {name: l6, cgroups: [%1$s], unit: packet, match: {ports: 1006}, rateLimit: {max: 10}}\n  - {name: l7, cgroups: [%1$s], unit: packet, match: {ports: 1007}, rateLimit: {max: 10}}\n  - {name: l8, cgroups: [%1$s], unit: packet, match: {ports: 1008}, rateLimit: {max: 10}}\n"
	  "  - name: l9\n    unit: packet\n    rateLimit: {max: 10}\n"
	  "    cgroups:\n      - %1$s  # the ninth\n",
	  "the ninth", "limits[8].cgroups[0]", "already a member of 8 limits" },
};

static void run_bad_cfg(const struct bad_cfg *c, const char *cgroup_arg, const char *needle)
{
	struct ktest_daemon *d = &dm[0];
	char body[2048], want_loc[600], *out = NULL;
	int rc, line;

	print_message("case: %s\n", c->what);
	assert_int_equal(ktest_daemon_init(d), 0);
	snprintf(body, sizeof(body), c->body, cgroup_arg, cgroup_arg);
	assert_int_equal(ktest_daemon_config(d, body), 0);
	line = ktest_line_of(d->config, needle);
	assert_true(line > 0);
	rc = kthrottled(&out, -1, "--config", d->config);
	assert_int_equal(rc, 2);
	assert_true(ktest_is_one_line(out));
	snprintf(want_loc, sizeof(want_loc), "%s:%d:", d->config, line);
	assert_non_null(strstr(out, want_loc));
	assert_non_null(strstr(out, c->field));
	assert_non_null(strstr(out, c->reason));
	free(out);
	assert_nothing_left(d);
	ktest_daemon_cleanup(d);
}

static void test_config_errors_exit_2(void **state)
{
	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	for (size_t i = 0; i < sizeof(bad_cfgs) / sizeof(bad_cfgs[0]); i++)
		run_bad_cfg(&bad_cfgs[i], cg, bad_cfgs[i].needle);
}

/* A directory on another filesystem (tmpfs /tmp) is not a cgroup. */
static void test_plain_directory_is_not_a_cgroup(void **state)
{
	const struct bad_cfg c = { "plain directory",
				   LIMIT_HEAD "    cgroups:\n      - %s\n    rateLimit: {max: 10}\n",
				   NULL, "limits[0].cgroups[0]", "not a cgroup v2 directory" };

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	run_bad_cfg(&c, plain_dir, plain_dir);
}

static void test_missing_file_and_cli_errors(void **state)
{
	char path[PATH_MAX], *out = NULL;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	snprintf(path, sizeof(path), "/tmp/kt-test-none-%d/kthrottled.yaml", getpid());

	assert_int_equal(kthrottled(&out, -1, "--config", path), 2);
	assert_true(ktest_is_one_line(out));
	assert_non_null(strstr(out, path));
	free(out);

	assert_int_equal(kthrottled(&out, -1, NULL, NULL), 2);
	assert_true(ktest_is_one_line(out));
	assert_non_null(strstr(out, "--config"));
	free(out);

	assert_int_equal(kthrottled(&out, -1, "--no-such-flag", NULL), 2);
	assert_true(ktest_is_one_line(out));
	assert_non_null(strstr(out, "--no-such-flag"));
	free(out);

	assert_int_equal(kthrottled(&out, -1, "--config", NULL), 2);
	assert_true(ktest_is_one_line(out));
	assert_non_null(strstr(out, "--config"));
	free(out);
}

/* ---- runtime errors: exit 1 ---- */

static void test_no_root_exit_1(void **state)
{
	struct ktest_daemon *d = &dm[0];
	char body[1024], *out = NULL;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(ktest_daemon_init(d), 0);
	assert_int_equal(ktest_daemon_config(d, kt_daemonfx_ok_body(body, sizeof(body), cg)), 0);
	assert_int_equal(chmod(d->dir, 0755), 0); /* readable by nobody */
	{
		/* the build tree may sit in a directory nobody cannot enter (a
		 * clone in a 0700 temp dir): run a copy from the test's dir */
		char src[PATH_MAX], copy[PATH_MAX], *cp_out = NULL;
		char *cp_argv[] = { "/bin/cp", src, copy, NULL };
		char *argv[] = { copy, "--config", d->config, NULL };

		snprintf(src, sizeof(src), "%s/kthrottled", ktest_build_dir());
		snprintf(copy, sizeof(copy), "%s/kthrottled", d->dir);
		assert_int_equal(ktest_run_capture(cp_argv, &cp_out), 0);
		free(cp_out);
		assert_int_equal(chmod(copy, 0755), 0);
		assert_int_equal(ktest_run_capture_as(argv, 65534, &out), 1);
	}
	assert_true(ktest_is_one_line(out));
	assert_non_null(strstr(out, "root"));
	assert_non_null(strstr(out, "CAP_BPF"));
	free(out);
	assert_nothing_left(d);
}

static void test_second_daemon_exit_1_first_unaffected(void **state)
{
	struct ktest_daemon *d = &dm[0], *other = &dm[1];
	char body[1024], *out = NULL, *r;
	struct ktest_load l;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(ktest_daemon_up(d, kt_daemonfx_ok_body(body, sizeof(body), cg)), 0);

	/* same config: same socket and pin dir */
	assert_int_equal(kthrottled(&out, -1, "--config", d->config), 1);
	assert_true(ktest_is_one_line(out));
	assert_non_null(strstr(out, d->socket));
	free(out);

	/* another pin dir, same socket: refused before anything is pinned */
	assert_int_equal(ktest_daemon_init(other), 0);
	snprintf(other->socket, sizeof(other->socket), "%s", d->socket);
	assert_int_equal(ktest_daemon_config(other, body), 0);
	assert_int_equal(kthrottled(&out, -1, "--config", other->config), 1);
	assert_true(ktest_is_one_line(out));
	assert_non_null(strstr(out, d->socket));
	free(out);
	assert_int_not_equal(access(other->pin_dir, F_OK), 0);

	/* the first one is untouched: alive, answering, pinned, enforcing */
	assert_int_equal(waitpid(d->pid, NULL, WNOHANG), 0);
	r = ktest_daemon_cmd(d, "ping");
	assert_non_null(r);
	assert_string_equal(r, "ok: pong\n");
	free(r);
	assert_int_equal(access(d->pin_dir, F_OK), 0);
	assert_int_equal(access(d->socket, F_OK), 0);
	assert_int_equal(ktest_load(cg, "udp", "127.0.0.1", 9, 0.5, &l), 0);
	print_message("first daemon still enforcing: ok=%llu refused=%llu elapsed=%.3f\n", l.ok,
		      l.refused, l.elapsed);
	assert_true(l.refused > 0);
	/* 200/s x 0.5 s + 20, +-(5% + 2) */
	assert_true(l.ok >= 114 && l.ok <= 126);
}

/* ---- control socket ---- */

/* Sends `len` bytes and reads the reply until EOF or timeout_ms. */
static char *sock_talk(const char *path, const char *data, size_t len, int timeout_ms)
{
	size_t got = 0, cap = 1 << 16;
	char *buf = calloc(1, cap);
	uint64_t deadline = ktest_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	int fd = kt_daemonfx_connect(path);

	if (fd < 0 || !buf) {
		if (fd >= 0)
			close(fd);
		free(buf);
		return NULL;
	}
	if (len && write(fd, data, len) != (ssize_t)len) {
		close(fd);
		free(buf);
		return NULL;
	}
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int64_t left = (int64_t)(deadline - ktest_now_ns()) / 1000000;
		ssize_t r;

		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			break;
		r = read(fd, buf + got, cap - 1 - got);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	return buf;
}

/* ping answered within `ms` */
static void assert_answers(const struct ktest_daemon *d, int ms)
{
	uint64_t t0 = ktest_now_ns();
	char *r = sock_talk(d->socket, "ping\n", 5, ms);

	assert_non_null(r);
	assert_string_equal(r, "ok: pong\n");
	free(r);
	assert_true(ktest_now_ns() - t0 < (uint64_t)ms * 1000000ull);
	assert_int_equal(waitpid(d->pid, NULL, WNOHANG), 0);
}

static void test_bad_socket_lines(void **state)
{
	struct ktest_daemon *d = &dm[0];
	char body[1024], *r, *big;
	const size_t big_len = 10 * 1024;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(ktest_daemon_up(d, kt_daemonfx_ok_body(body, sizeof(body), cg)), 0);

	static const char *const bad[] = { "bogus\n", "\n", "status  json\n", "\x01\x02\xff\n",
					   "reload now\n" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		r = sock_talk(d->socket, bad[i], strlen(bad[i]), 2000);
		assert_non_null(r);
		assert_true(ktest_is_one_line(r));
		assert_true(!strncmp(r, "error:", 6));
		free(r);
		assert_answers(d, 1000);
	}

	/* 10 kB without a newline */
	big = malloc(big_len);
	assert_non_null(big);
	memset(big, 'a', big_len);
	r = sock_talk(d->socket, big, big_len, 2000);
	free(big);
	assert_non_null(r);
	assert_true(ktest_is_one_line(r));
	assert_true(!strncmp(r, "error:", 6));
	free(r);
	assert_answers(d, 1000);

	/* a client that asks and leaves without reading the reply */
	int fd = kt_daemonfx_connect(d->socket);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "status json\n", 12), 12);
	close(fd);
	assert_answers(d, 1000);
}

/* Connections that send nothing (or half a line) and hang must not stop
 * the daemon from answering others. */
static void test_hanging_clients(void **state)
{
	struct ktest_daemon *d = &dm[0];
	char body[1024], *r;
	int idle = -1, half = -1;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(ktest_daemon_up(d, kt_daemonfx_ok_body(body, sizeof(body), cg)), 0);

	idle = kt_daemonfx_connect(d->socket);
	half = kt_daemonfx_connect(d->socket);
	assert_true(idle >= 0 && half >= 0);
	assert_int_equal(write(half, "sta", 3), 3);
	for (int i = 0; i < 5; i++)
		assert_answers(d, 1000);
	r = sock_talk(d->socket, "status\n", 7, 2000);
	assert_non_null(r);
	assert_non_null(strstr(r, "ok"));
	free(r);
	close(idle);
	close(half);
	assert_answers(d, 1000);
}

/* More idle connections than the daemon has client slots: a stuck client
 * must not lock everyone else out of the daemon. */
static void test_many_hanging_clients(void **state)
{
	struct ktest_daemon *d = &dm[0];
	char body[1024];
	int fds[40], n = 0;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(ktest_daemon_up(d, kt_daemonfx_ok_body(body, sizeof(body), cg)), 0);

	for (n = 0; n < 40; n++) {
		fds[n] = kt_daemonfx_connect(d->socket);
		if (fds[n] < 0)
			break;
	}
	ktest_sleep_ms(100); /* let the daemon accept them all */
	/* the idle ones may be dropped, but within a few seconds a new client
	 * must get an answer again */
	char *r = NULL;
	for (int i = 0; i < 30 && !(r && !strcmp(r, "ok: pong\n")); i++) {
		free(r);
		r = sock_talk(d->socket, "ping\n", 5, 500);
		if (!r || strcmp(r, "ok: pong\n"))
			ktest_sleep_ms(100);
	}
	for (int i = 0; i < n; i++)
		close(fds[i]);
	print_message("reply with %d idle connections open: %s\n", n, r ? r : "(none)");
	assert_non_null(r);
	assert_string_equal(r, "ok: pong\n");
	free(r);
	assert_answers(d, 1000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_config_errors_exit_2, setup, teardown),
		cmocka_unit_test_setup_teardown(test_plain_directory_is_not_a_cgroup, setup, teardown),
		cmocka_unit_test_setup_teardown(test_missing_file_and_cli_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_root_exit_1, setup, teardown),
		cmocka_unit_test_setup_teardown(test_second_daemon_exit_1_first_unaffected, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_bad_socket_lines, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hanging_clients, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many_hanging_clients, setup, teardown),
	};

	return cmocka_run_group_tests_name("e2e_badinput", tests, group_setup, group_teardown);
}
