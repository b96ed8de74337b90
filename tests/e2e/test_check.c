// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* `kthrottled --check` runs every check a start and a reload run, short of
 * the kernel: a config it accepts starts, and a config a start refuses it
 * refuses with the same exit status and the same error line. The configs:
 * every examples/<name>.yaml (cgroups swapped for test cgroups, stores pointed
 * at a port nobody listens on), the suite's edge cases at the kernel tables'
 * limits, and bad configs for each kind of check (parser, cgroups, store,
 * limits per cgroup, nested ones included). 1,024 limits on the default
 * cidrs check, start and each hold its own port. Also: the reload of a config
 * --check refuses is rejected with the same message, and --check needs no
 * root. Every start is bounded (5 s) and the whole test by an alarm; pins,
 * sockets, temp dirs and cgroups are removed. */
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "kt_daemonfx.h"
#include "ktest.h"

#define N_CG 10 /* @0..@8 top-level test cgroups, @9 nested in @0 */
static char cg[N_CG][PATH_MAX];
static int ports[3]; /* free and distinct: stores that are never reached */
static struct ktest_daemon dm;
#define BIG_CGS (1024 / 8)
static char big_cg[BIG_CGS][PATH_MAX]; /* test_1024_limits_on_default_cidrs */
static void destroy_big_cgroups(void);

/* ---- helpers ---- */

/* body with "@N" replaced by test cgroup N (malloc'd). */
static char *subst(const char *body)
{
	size_t cap = strlen(body) * 2 + N_CG * PATH_MAX, len = 0;
	char *out = malloc(cap);

	assert_non_null(out);
	for (const char *p = body; *p; p++) {
		if (p[0] == '@' && p[1] >= '0' && p[1] <= '9') {
			len += (size_t)snprintf(out + len, cap - len, "%s", cg[p[1] - '0']);
			p++;
		} else {
			out[len++] = *p;
		}
		assert_true(len < cap - PATH_MAX);
	}
	out[len] = 0;
	return out;
}

/* The first "error:" line of out (without its newline), or "". */
static void first_error(const char *out, char *line, size_t len)
{
	const char *e = strstr(out, ": error: "), *s, *nl;

	line[0] = 0;
	if (!e)
		return;
	for (s = e; s > out && s[-1] != '\n'; s--)
		;
	nl = strchr(s, '\n');
	snprintf(line, len, "%.*s", (int)(nl ? nl - s : (ptrdiff_t)strlen(s)), s);
}

static int check(const char *config, char **out)
{
	return ktest_run_bin("kthrottled", out, "--config", config, "--check", NULL);
}

/* Writes body (with @N substituted) as dm's config. */
static void configure(const char *body)
{
	char *b = subst(body);

	assert_int_equal(ktest_daemon_init(&dm), 0);
	assert_int_equal(ktest_daemon_config(&dm, b), 0);
	free(b);
}

/* --check, then a real start of the same file: the same exit status, and
 * for a refusal the same error line and nothing left behind. Returns the
 * exit status; the daemon is stopped and cleaned up. */
static int parity(const char *what, const char *body)
{
	char *out = NULL, *log, check_err[1024], start_err[1024];
	int rc_check, rc_start = -1;

	print_message("case: %s\n", what);
	configure(body);
	rc_check = check(dm.config, &out);
	first_error(out, check_err, sizeof(check_err));
	if (ktest_daemon_start(&dm, 5000, &rc_start) == 0)
		rc_start = 0;
	log = ktest_slurp(dm.log);
	first_error(log, start_err, sizeof(start_err));
	print_message("  --check %d: %s  start %d: %s\n", rc_check, rc_check ? check_err : out,
		      rc_start, rc_start ? start_err : "running");
	if (rc_start && !start_err[0])
		print_message("  start log:\n%s", log);
	assert_int_equal(rc_check, rc_start);
	if (rc_check) {
		assert_true(check_err[0]);
		assert_string_equal(check_err, start_err);
		assert_int_not_equal(access(dm.pin_dir, F_OK), 0);
		assert_int_not_equal(access(dm.socket, F_OK), 0);
	} else {
		assert_non_null(strstr(out, ": ok,"));
	}
	free(out);
	free(log);
	ktest_daemon_cleanup(&dm);
	return rc_check;
}

/* n packet limits l1..ln on ports 1001.., limit i on cgroup @cgs[i] (or
 * @0 if cgs is NULL), with `match` (flow mapping body, may be ""). */
static void limits_body(char *buf, size_t len, int n, const char *cgs, const char *match)
{
	buf[0] = 0;
	kt_cat(buf, len, "limits:\n");
	for (int i = 0; i < n; i++)
		kt_cat(buf, len,
		       "  - {name: l%d, cgroups: [@%c], unit: packet, match: {ports: %d%s%s}, rateLimit: {max: 10}}\n",
		       i + 1, cgs ? cgs[i] : '0', 1001 + i, match[0] ? ", " : "", match);
}

/* ---- fixtures ---- */

static int group_setup(void **state)
{
	(void)state;
	if (ktest_root_unavailable())
		return 0;
	for (int i = 0; i < N_CG - 1; i++) {
		char name[32];

		snprintf(name, sizeof(name), "check%d", i);
		if (ktest_cgroup_create(name, cg[i], sizeof(cg[i])))
			return -1;
	}
	snprintf(cg[N_CG - 1], sizeof(cg[N_CG - 1]), "%s/nested", cg[0]);
	if (mkdir(cg[N_CG - 1], 0755) < 0 && errno != EEXIST)
		return -1;
	for (int i = 0, tries = 0; i < 3 && tries < 100; tries++) {
		int p = ktest_free_port(SOCK_STREAM);

		if (p > 0 && (i == 0 || p != ports[0]) && (i < 2 || p != ports[1]))
			ports[i++] = p;
	}
	return ports[2] > 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
	(void)state;
	destroy_big_cgroups();
	if (cg[N_CG - 1][0])
		ktest_cgroup_destroy(cg[N_CG - 1]);
	for (int i = 0; i < N_CG - 1; i++)
		if (cg[i][0])
			ktest_cgroup_destroy(cg[i]);
	return 0;
}

static int setup(void **state)
{
	(void)state;
	kt_daemonfx_dms_begin(&dm, 1);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	kt_daemonfx_dms_end(&dm, 1);
	return 0;
}

/* ---- 1,024 limits on the default cidrs ---- */

static const char nine_cgroups[] = "012345678";

/* KT_MAX_LIMITS (1,024) limits on the default cidrs (every destination of
 * both families), eight to a cgroup on 128 cgroups, each on its own port:
 * --check accepts it, the daemon starts with all of them, and each cgroup
 * is held by its own limits and no other's. */
static void destroy_big_cgroups(void)
{
	for (int i = 0; i < BIG_CGS; i++)
		if (big_cg[i][0]) {
			ktest_cgroup_destroy(big_cg[i]);
			big_cg[i][0] = 0;
		}
}

static void test_1024_limits_on_default_cidrs(void **state)
{
	size_t cap = 1024 * (PATH_MAX + 200), len = 0;
	char *body = malloc(cap), *out = NULL, *status;
	int base = 20000, rc = -1;
	double n;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_non_null(body);
	for (int i = 0; i < BIG_CGS; i++) {
		char name[32];

		snprintf(name, sizeof(name), "big%d", i);
		assert_int_equal(ktest_cgroup_create(name, big_cg[i], sizeof(big_cg[i])), 0);
	}
	len += (size_t)snprintf(body + len, cap - len, "limits:\n");
	for (int i = 0; i < 1024; i++)
		len += (size_t)snprintf(body + len, cap - len,
					"  - {name: l%d, cgroups: [%s], unit: connection, burst: 3, match: {ports: %d}, rateLimit: {max: 2}}\n",
					i, big_cg[i / 8], base + i);
	assert_true(len < cap);
	assert_int_equal(ktest_daemon_init(&dm), 0);
	assert_int_equal(ktest_daemon_config(&dm, body), 0);
	free(body);

	assert_int_equal(check(dm.config, &out), 0);
	print_message("--check: %s", out);
	free(out);
	uint64_t t0 = ktest_now_ns();
	if (ktest_daemon_start(&dm, 60000, &rc) != 0) {
		char *log = ktest_slurp(dm.log);
		print_error("start failed (%d):\n%s\n", rc, log);
		free(log);
		destroy_big_cgroups();
		fail();
	}
	print_message("started with 1024 limits in %.2f s\n", (ktest_now_ns() - t0) / 1e9);
	status = ktest_daemon_cmd(&dm, "status json");
	assert_non_null(status);
	assert_true(ktest_json_limit_num(status, "l0", "max", &n) || strstr(status, "\"l0\""));
	assert_non_null(strstr(status, "\"l1023\""));
	free(status);

	/* TCP connects with nobody listening: admitted ones fail with
	 * ECONNREFUSED (kt-load's errors), refused ones with EBUSY */
	static const int probe[][2] = { { 0, 0 }, { 5, 3 }, { 127, 7 } };
	for (size_t p = 0; p < sizeof(probe) / sizeof(probe[0]); p++) {
		int c = probe[p][0], lim = c * 8 + probe[p][1];
		struct ktest_load own, other;

		assert_int_equal(ktest_load(big_cg[c], "tcp", "127.0.0.1", base + lim, 0.5, &own), 0);
		/* the next cgroup's limit on the same destinations: not ours */
		int far = ((c + 1) % BIG_CGS) * 8;
		assert_int_equal(ktest_load(big_cg[c], "tcp", "127.0.0.1", base + far, 0.2, &other), 0);
		print_message("cgroup big%d: port of l%d: admitted %llu refused %llu; port of l%d: admitted %llu refused %llu\n",
			      c, lim, own.ok + own.errors, own.refused, far, other.ok + other.errors,
			      other.refused);
		assert_true(own.ok + own.errors >= 3);
		assert_true(own.ok + own.errors <= 3 + 2); /* burst + 0.5 s at 2/s, rounded up */
		assert_true(own.refused > 0);
		assert_int_equal(other.refused, 0);
		assert_true(other.ok + other.errors > 10);
	}
	ktest_daemon_cleanup(&dm);
	destroy_big_cgroups();
}

/* A running daemon rejects the reload of that config with the same message
 * and keeps its configuration. */
static void test_reload_rejects_with_check_message(void **state)
{
	char body[4096], want[1024], *out = NULL, *r, *b;
	const char *e;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	limits_body(body, sizeof(body), 1, NULL, "");
	assert_int_equal(ktest_daemon_init(&dm), 0);
	b = subst(body);
	assert_int_equal(ktest_daemon_config(&dm, b), 0);
	free(b);
	assert_int_equal(ktest_daemon_start_logged(&dm), 0);

	limits_body(body, sizeof(body), 9, NULL, ""); /* 9 on one cgroup */
	b = subst(body);
	assert_int_equal(ktest_daemon_config(&dm, b), 0);
	free(b);
	assert_int_equal(check(dm.config, &out), 2);
	e = strstr(out, ": error: ");
	assert_non_null(e);
	snprintf(want, sizeof(want), "error: %s", e + strlen(": error: "));

	r = ktest_daemon_cmd(&dm, "reload");
	assert_non_null(r);
	print_message("reload: %s", r);
	assert_string_equal(r, want);
	free(r);
	free(out);
	r = ktest_daemon_cmd(&dm, "status json");
	assert_non_null(r);
	assert_non_null(strstr(r, "\"name\":\"l1\""));
	assert_null(strstr(r, "\"name\":\"l2\""));
	free(r);
}

/* --check as nobody: the same answers without root or BPF. */
static void test_check_needs_no_root(void **state)
{
	char body[4096], src[PATH_MAX], copy[PATH_MAX], root_err[1024], got[1024];
	char *out = NULL, *cp_out = NULL;
	char *cp_argv[] = { "/bin/cp", src, copy, NULL };
	char *argv[] = { copy, "--config", dm.config, "--check", NULL };

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	limits_body(body, sizeof(body), 8, nine_cgroups, "");
	configure(body);
	/* the build tree may be closed to nobody: run a copy from the temp dir */
	assert_int_equal(chmod(dm.dir, 0755), 0);
	snprintf(src, sizeof(src), "%s/kthrottled", ktest_build_dir());
	snprintf(copy, sizeof(copy), "%s/kthrottled", dm.dir);
	assert_int_equal(ktest_run_capture(cp_argv, &cp_out), 0);
	free(cp_out);
	assert_int_equal(chmod(copy, 0755), 0);

	assert_int_equal(ktest_run_capture_as(argv, 65534, &out), 0);
	print_message("nobody, 8 limits: %s", out);
	assert_non_null(strstr(out, ": ok, 8 limit(s)"));
	free(out);

	limits_body(body, sizeof(body), 9, NULL, ""); /* 9 on one cgroup */
	{
		char *b = subst(body);
		assert_int_equal(ktest_daemon_config(&dm, b), 0);
		free(b);
	}
	assert_int_equal(check(dm.config, &out), 2);
	first_error(out, root_err, sizeof(root_err));
	free(out);
	assert_int_equal(ktest_run_capture_as(argv, 65534, &out), 2);
	print_message("nobody, 9 limits: %s", out);
	first_error(out, got, sizeof(got));
	free(out);
	assert_string_equal(got, root_err);
}

/* ---- parity ---- */

/* An example with its cgroups swapped for test cgroups, its pinDir and
 * socket lines dropped (ktest_daemon_config sets them) and its Redis ports
 * pointed at a free port (nothing is ever asked). */
static char *example_body(const char *path)
{
	static const char *const swaps[][2] = {
		{ "/sys/fs/cgroup/unified/pods/api-2", "@1" },
		{ "pods/api-1", "@0" },
		{ "pods/api-2", "@1" },
		{ "pods/collector", "@2" },
		{ "pods/backup", "@3" },
		{ "pods/uploader", "@2" },
		{ "pods/summarizer", "@3" },
		{ "pods/worker", "@0" },
		{ "kthrottle-demo", "@0" },
		{ ":6379", ":P0" },
		{ ":26379", ":P0" }, /* sentinel endpoints must be distinct */
		{ ":26380", ":P1" },
		{ ":26381", ":P2" },
	};
	char *text = ktest_slurp(path), *out = calloc(1, strlen(text) * 2 + 64), *line, *save;

	assert_non_null(out);
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (!strncmp(line, "pinDir:", 7) || !strncmp(line, "socket:", 7))
			continue;
		for (const char *p = line; *p;) {
			size_t k, n = sizeof(swaps) / sizeof(swaps[0]);

			for (k = 0; k < n; k++)
				if (!strncmp(p, swaps[k][0], strlen(swaps[k][0])))
					break;
			if (k < n && swaps[k][1][0] == ':') {
				sprintf(out + strlen(out), ":%d", ports[swaps[k][1][2] - '0']);
				p += strlen(swaps[k][0]);
			} else if (k < n) {
				strcat(out, swaps[k][1]);
				p += strlen(swaps[k][0]);
			} else {
				strncat(out, p++, 1);
			}
		}
		strcat(out, "\n");
	}
	free(text);
	return out;
}

/* body with every `from` replaced by `to` (malloc'd; body is freed). */
static char *replace_all(char *body, const char *from, const char *to)
{
	size_t n = 0, fl = strlen(from);
	char *out, *p, *q;

	for (p = body; (p = strstr(p, from)); p += fl)
		n++;
	out = calloc(1, strlen(body) + n * strlen(to) + 1);
	assert_non_null(out);
	for (p = body; (q = strstr(p, from)); p = q + fl) {
		strncat(out, p, (size_t)(q - p));
		strcat(out, to);
	}
	strcat(out, p);
	free(body);
	return out;
}

/* The examples' XDP tag limits go on an interface of the test's (a veth
 * pair, down: no traffic; never the machine's own uplink) and their query
 * sockets into a temp dir. */
static void test_examples_check_and_start(void **state)
{
	char pattern[PATH_MAX], dummy[16], ifs[32], qdir[PATH_MAX], qsock[PATH_MAX + 16], *out = NULL;
	const char *found = ktest_find_prog("ip");
	char ip[PATH_MAX];
	int bad = 0;
	glob_t g;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	if (!found)
		skip();
	snprintf(ip, sizeof(ip), "%s", found);
	snprintf(dummy, sizeof(dummy), "ktchk%d", (int)(getpid() % 100000));
	snprintf(ifs, sizeof(ifs), "[%s]", dummy);
	char peer[24];
	snprintf(peer, sizeof(peer), "%sp", dummy);
	/* a veth pair left down: this kernel has no dummy driver */
	char *add[] = { ip, "link", "add", dummy, "type", "veth", "peer", "name", peer, NULL };
	char *del[] = { ip, "link", "del", dummy, NULL };
	assert_int_equal(ktest_run_capture(add, &out), 0);
	free(out);
	assert_int_equal(ktest_tmpdir(qdir, sizeof(qdir)), 0);
	snprintf(qsock, sizeof(qsock), "%s/query.sock", qdir);
	snprintf(pattern, sizeof(pattern), "%s/../examples/*.yaml", ktest_build_dir());
	assert_int_equal(glob(pattern, 0, NULL, &g), 0);
	assert_true(g.gl_pathc >= 4);
	for (size_t i = 0; i < g.gl_pathc && !bad; i++) {
		char *body = example_body(g.gl_pathv[i]);

		body = replace_all(body, "[eth0]", ifs);
		body = replace_all(body, "/run/kthrottle/query.sock", qsock);
		bad = parity(g.gl_pathv[i], body);
		free(body);
	}
	globfree(&g);
	ktest_run_capture(del, &out);
	free(out);
	ktest_rmtree(qdir);
	assert_int_equal(bad, 0);
}

/* Configs at the kernel tables' limits, as the suite uses them: accepted by
 * both. */
static void test_edge_configs_check_and_start(void **state)
{
	char body[4096];

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	limits_body(body, sizeof(body), 8, NULL, "");
	assert_int_equal(parity("8 limits on one cgroup (the most)", body), 0);
	limits_body(body, sizeof(body), 9, nine_cgroups, "");
	assert_int_equal(parity("9 limits on the default cidrs", body), 0);
	limits_body(body, sizeof(body), 8, nine_cgroups, "cidrs: [10.0.0.0/8]");
	kt_cat(body, sizeof(body),
	       "  - {name: narrow, cgroups: [@8], unit: packet, match: {cidrs: [10.1.0.0/16]}, rateLimit: {max: 10}}\n");
	assert_int_equal(parity("9 limits on one prefix, the ninth narrower", body), 0);
	assert_int_equal(parity("nested member cgroups",
				"limits:\n"
				"  - {name: outer, cgroups: [@0], unit: datagram, rateLimit: {max: 10}}\n"
				"  - {name: inner, cgroups: [@9], unit: connection, rateLimit: {max: 10}}\n"),
			 0);
	/* joins when created: a warning, not a refusal */
	assert_int_equal(parity("a missing cgroup and a pattern",
				"limits:\n"
				"  - {name: a, cgroups: [@0-missing, \"@1/w-*\"], unit: packet, rateLimit: {max: 10}}\n"),
			 0);
	assert_int_equal(parity("node scope over two cgroups",
				"limits:\n"
				"  - name: shared\n"
				"    cgroups: [@0, @1, @9]\n"
				"    match: {cidrs: [127.0.0.1/32], ports: 9, protocol: udp}\n"
				"    unit: datagram\n"
				"    scope: node\n"
				"    rateLimit: {max: 200}\n"),
			 0);
}

/* Each kind of refusal: the same exit status (2) and error line. */
static void test_bad_configs_check_and_start(void **state)
{
	char body[4096];

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	limits_body(body, sizeof(body), 9, NULL, "");
	assert_int_equal(parity("9 limits on one cgroup", body), 2);
	limits_body(body, sizeof(body), 8, NULL, "");
	kt_cat(body, sizeof(body),
	       "  - {name: inner, cgroups: [@9], unit: packet, match: {ports: 2001}, rateLimit: {max: 10}}\n");
	assert_int_equal(parity("8 limits on a cgroup and 1 on a cgroup nested in it", body), 2);
	assert_int_equal(parity("an unknown key",
				"limits:\n"
				"  - {name: a, cgroups: [@0], unit: packet, bogusKey: 1, rateLimit: {max: 10}}\n"),
			 2);
	assert_int_equal(parity("a cgroup path that is no cgroup",
				"limits:\n"
				"  - {name: a, cgroups: [/tmp], unit: packet, rateLimit: {max: 10}}\n"),
			 2);
	snprintf(body, sizeof(body),
		 "store:\n"
		 "  redisStore: {mode: single, url: \"rediss://127.0.0.1:%d/0\",\n"
		 "               redis_tls: {ca_cert_secret: /nonexistent/ca.pem}}\n"
		 "limits:\n"
		 "  - {name: a, cgroups: [@0], unit: packet, rateLimit: {max: 10}}\n",
		 ports[0]);
	assert_int_equal(parity("a TLS store with an unreadable CA file", body), 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_1024_limits_on_default_cidrs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reload_rejects_with_check_message, setup, teardown),
		cmocka_unit_test_setup_teardown(test_check_needs_no_root, setup, teardown),
		cmocka_unit_test_setup_teardown(test_examples_check_and_start, setup, teardown),
		cmocka_unit_test_setup_teardown(test_edge_configs_check_and_start, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_configs_check_and_start, setup, teardown),
	};

	/* a bound on the whole run: a start is 5 s at most, there are ~20 */
	alarm(300);
	return cmocka_run_group_tests_name("e2e_check", tests, group_setup, group_teardown);
}
