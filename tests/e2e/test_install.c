// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* `make install` and `make uninstall` into a staging DESTDIR under /tmp, from
 * the build dir this test was built in (never rebuilt: make -o). PREFIX=/usr
 * and PREFIX=/usr/local: the programs land in sbin/ and bin/, are executable
 * and answer --help; the systemd unit names the installed daemon in ExecStart
 * and has the keys the deployment relies on (and `systemd-analyze verify`
 * accepts it when systemd-analyze is installed); the example config passes
 * --check; an existing kthrottled.yaml survives a second install and the
 * uninstall; uninstall removes exactly the installed files and is idempotent.
 * Every make runs with DESTDIR set to the temp dir, which is removed. */
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "ktest.h"

static char repo[PATH_MAX];  /* where the Makefile is */
static char build[PATH_MAX]; /* BUILD the binaries come from */
static char dest[PATH_MAX];  /* DESTDIR, a fresh temp dir per test */

/* ---- helpers ---- */

static bool is_repo(const char *dir)
{
	char p[PATH_MAX + 64];

	snprintf(p, sizeof(p), "%s/deploy/systemd/kthrottled.service.in", dir);
	if (access(p, R_OK) != 0)
		return false;
	snprintf(p, sizeof(p), "%s/Makefile", dir);
	return access(p, R_OK) == 0;
}

static void path_in(char *out, size_t len, const char *rel)
{
	snprintf(out, len, "%s/%s", dest, rel);
}

/* make -C repo TARGET BUILD=build DESTDIR=dest PREFIX=prefix; exit status.
 * DESTDIR is always the temp dir: nothing is written outside it. */
static int make_target(const char *target, const char *prefix)
{
	char make[PATH_MAX], bin_d[PATH_MAX + 16], bin_c[PATH_MAX + 16];
	char a_build[PATH_MAX + 8], a_dest[PATH_MAX + 8], a_prefix[PATH_MAX + 8];
	const char *m = ktest_find_prog("make");
	char *out = NULL;
	int rc;

	assert_non_null(m);
	assert_true(strncmp(dest, "/tmp/", 5) == 0);
	snprintf(make, sizeof(make), "%s", m);
	snprintf(bin_d, sizeof(bin_d), "%s/kthrottled", build);
	snprintf(bin_c, sizeof(bin_c), "%s/kthrottlectl", build);
	snprintf(a_build, sizeof(a_build), "BUILD=%s", build);
	snprintf(a_dest, sizeof(a_dest), "DESTDIR=%s", dest);
	snprintf(a_prefix, sizeof(a_prefix), "PREFIX=%s", prefix);
	/* -o: install the binaries this test was built with; sources being
	 * edited must not turn an install test into a compile */
	char *argv[] = { make, "--no-print-directory", "-C", repo, "-o", bin_d, "-o", bin_c,
			 (char *)target, a_build, a_dest, a_prefix, NULL };
	rc = ktest_run_capture(argv, &out);
	if (rc != 0)
		print_message("make %s PREFIX=%s: exit %d\n%s", target, prefix, rc, out ? out : "");
	free(out);
	return rc;
}

static void assert_mode(const char *rel, mode_t mode)
{
	char p[PATH_MAX];
	struct stat st;

	path_in(p, sizeof(p), rel);
	if (lstat(p, &st) != 0) {
		print_message("%s: %s\n", p, strerror(errno));
		fail();
	}
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_mode & 07777, mode);
}

static void assert_absent(const char *rel)
{
	char p[PATH_MAX];

	path_in(p, sizeof(p), rel);
	if (access(p, F_OK) == 0) {
		print_message("%s is still there\n", p);
		fail();
	}
}

/* Runs the staged program with --help: exit 0, and its usage line. */
static void assert_help(const char *rel, const char *usage)
{
	char p[PATH_MAX], *out = NULL;
	char *argv[] = { p, "--help", NULL };
	int rc;

	path_in(p, sizeof(p), rel);
	rc = ktest_run_capture(argv, &out);
	if (rc != 0 || !strstr(out, usage))
		print_message("%s --help: exit %d\n%s", p, rc, out ? out : "");
	assert_int_equal(rc, 0);
	assert_non_null(strstr(out, usage));
	free(out);
}

/* Value of `key` in `section` of a unit file (first occurrence), into out. */
static bool unit_value(const char *unit, const char *section, const char *key, char *out,
		       size_t len)
{
	char cur[64] = "";
	const char *line = unit;

	while (line && *line) {
		const char *nl = strchr(line, '\n');
		size_t n = nl ? (size_t)(nl - line) : strlen(line);
		char buf[1024];

		snprintf(buf, sizeof(buf), "%.*s", (int)(n < sizeof(buf) ? n : sizeof(buf) - 1),
			 line);
		if (buf[0] == '[')
			snprintf(cur, sizeof(cur), "%s", buf);
		else if (buf[0] != '#' && buf[0] != ';' && strcmp(cur, section) == 0) {
			char *eq = strchr(buf, '=');
			if (eq && (size_t)(eq - buf) == strlen(key) && !strncmp(buf, key, strlen(key))) {
				snprintf(out, len, "%s", eq + 1);
				return true;
			}
		}
		line = nl ? nl + 1 : NULL;
	}
	return false;
}

static void assert_unit_key(const char *unit, const char *section, const char *key,
			    const char *want)
{
	char v[1024];

	if (!unit_value(unit, section, key, v, sizeof(v))) {
		print_message("unit: no %s= in %s\n", key, section);
		fail();
	}
	if (strcmp(v, want) != 0) {
		print_message("unit: %s=%s, want %s\n", key, v, want);
		fail();
	}
}

/* The unit's keys the deployment relies on, and ExecStart naming sbindir's
 * daemon with the config in /etc. */
static void check_unit(const char *unit_rel, const char *sbindir)
{
	char p[PATH_MAX], v[1024], want[PATH_MAX + 64];
	char *unit;

	path_in(p, sizeof(p), unit_rel);
	unit = ktest_slurp(p);
	assert_null(strstr(unit, "@SBINDIR@"));
	snprintf(want, sizeof(want), "%s/kthrottled --config /etc/kthrottle/kthrottled.yaml",
		 sbindir);
	assert_unit_key(unit, "[Service]", "ExecStart", want);
	assert_unit_key(unit, "[Service]", "Type", "simple");
	assert_unit_key(unit, "[Service]", "ExecReload", "/bin/kill -HUP $MAINPID");
	assert_unit_key(unit, "[Service]", "Restart", "on-failure");
	assert_unit_key(unit, "[Service]", "RuntimeDirectory", "kthrottle");
	assert_unit_key(unit, "[Service]", "NoNewPrivileges", "yes");
	assert_unit_key(unit, "[Install]", "WantedBy", "multi-user.target");
	assert_true(unit_value(unit, "[Service]", "CapabilityBoundingSet", v, sizeof(v)));
	assert_non_null(strstr(v, "CAP_BPF"));
	assert_non_null(strstr(v, "CAP_NET_ADMIN"));
	assert_non_null(strstr(v, "CAP_SYS_ADMIN"));
	/* strict would make /sys/fs/bpf and /run read-only */
	if (unit_value(unit, "[Service]", "ProtectSystem", v, sizeof(v)))
		assert_string_not_equal(v, "strict");
	free(unit);
}

/* systemd-analyze verify, when installed, on a copy of the unit whose
 * ExecStart names the staged daemon (verify checks that it exists). Any
 * complaint about the unit fails: verify exits 0 on unknown keys. */
static void verify_unit(const char *unit_rel, const char *sbindir)
{
	const char *sa = ktest_find_prog("systemd-analyze");
	char p[PATH_MAX], dir[PATH_MAX], copy[PATH_MAX + 32], from[PATH_MAX + 16];
	char to[PATH_MAX + 16], *unit, *out = NULL, *at;
	FILE *f;
	int rc;

	if (!sa) {
		print_message("systemd-analyze not installed: unit keys checked by hand only\n");
		return;
	}
	char sa_path[PATH_MAX];
	snprintf(sa_path, sizeof(sa_path), "%s", sa);
	path_in(p, sizeof(p), unit_rel);
	unit = ktest_slurp(p);
	snprintf(from, sizeof(from), "ExecStart=%s/", sbindir);
	snprintf(to, sizeof(to), "ExecStart=%s%s/", dest, sbindir);
	at = strstr(unit, from);
	assert_non_null(at);
	path_in(dir, sizeof(dir), "verify");
	assert_int_equal(mkdir(dir, 0755), 0);
	snprintf(copy, sizeof(copy), "%s/kthrottled.service", dir);
	f = fopen(copy, "w");
	assert_non_null(f);
	fprintf(f, "%.*s%s%s", (int)(at - unit), unit, to, at + strlen(from));
	assert_int_equal(fclose(f), 0);
	free(unit);

	char *argv[] = { sa_path, "verify", copy, NULL };
	rc = ktest_run_capture(argv, &out);
	if (rc != 0 || strstr(out, "kthrottled.service"))
		print_message("systemd-analyze verify: exit %d\n%s", rc, out);
	assert_int_equal(rc, 0);
	assert_null(strstr(out, "kthrottled.service"));
	free(out);
	ktest_rmtree(dir);
}

/* Every non-directory under dest, sorted, one per line (malloc'd). */
static char **listing;
static size_t n_listing;

static int collect(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag != FTW_D && flag != FTW_DP) {
		char **nl = realloc(listing, (n_listing + 1) * sizeof(*nl));
		if (!nl)
			return -1;
		listing = nl;
		listing[n_listing++] = strdup(p + strlen(dest));
	}
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *list_files(void)
{
	size_t len = 1;
	char *s;

	listing = NULL;
	n_listing = 0;
	assert_int_equal(nftw(dest, collect, 16, FTW_PHYS), 0);
	qsort(listing, n_listing, sizeof(*listing), cmp_str);
	for (size_t i = 0; i < n_listing; i++)
		len += strlen(listing[i]) + 1;
	s = calloc(1, len);
	assert_non_null(s);
	for (size_t i = 0; i < n_listing; i++) {
		strcat(s, listing[i]);
		strcat(s, "\n");
		free(listing[i]);
	}
	free(listing);
	listing = NULL;
	return s;
}

static void write_rel(const char *rel, const char *content, mode_t mode)
{
	char p[PATH_MAX], d[PATH_MAX], *slash;

	path_in(p, sizeof(p), rel);
	snprintf(d, sizeof(d), "%s", p);
	slash = strrchr(d, '/');
	*slash = 0;
	char *argv[] = { "/bin/mkdir", "-p", d, NULL }, *out = NULL;
	assert_int_equal(ktest_run_capture(argv, &out), 0);
	free(out);
	assert_int_equal(ktest_write_file(p, content), 0);
	assert_int_equal(chmod(p, mode), 0);
}

/* The whole cycle for one PREFIX. */
static void install_cycle(const char *prefix)
{
	char sbindir[PATH_MAX], rel_d[PATH_MAX], rel_c[PATH_MAX], rel_unit[PATH_MAX];
	char rel_other[PATH_MAX];
	char p[PATH_MAX], *before, *after, *out = NULL, *cfg;
	const char *rel_ex = "etc/kthrottle/kthrottled.yaml.example";
	const char *rel_cfg = "etc/kthrottle/kthrottled.yaml";
	struct stat st;

	snprintf(sbindir, sizeof(sbindir), "%s/sbin", prefix);
	snprintf(rel_d, sizeof(rel_d), "%s/sbin/kthrottled", prefix + 1);
	snprintf(rel_c, sizeof(rel_c), "%s/bin/kthrottlectl", prefix + 1);
	snprintf(rel_unit, sizeof(rel_unit), "%s/lib/systemd/system/kthrottled.service",
		 prefix + 1);

	/* someone else's file in a directory install writes to */
	snprintf(rel_other, sizeof(rel_other), "%s/sbin/other-tool", prefix + 1);
	write_rel(rel_other, "#!/bin/sh\n", 0755);
	before = list_files();

	assert_int_equal(make_target("install", prefix), 0);
	assert_mode(rel_d, 0755);
	assert_mode(rel_c, 0755);
	assert_mode(rel_unit, 0644);
	assert_mode(rel_ex, 0644);
	assert_help(rel_d, "Usage: kthrottled");
	assert_help(rel_c, "Usage: kthrottlectl");
	check_unit(rel_unit, sbindir);
	verify_unit(rel_unit, sbindir);

	/* the example is a config the installed daemon accepts */
	path_in(p, sizeof(p), rel_ex);
	{
		char bin[PATH_MAX];
		path_in(bin, sizeof(bin), rel_d);
		char *argv[] = { bin, "--config", p, "--check", NULL };
		int rc = ktest_run_capture(argv, &out);
		if (rc != 0)
			print_message("--check %s: exit %d\n%s", p, rc, out);
		assert_int_equal(rc, 0);
		free(out);
	}

	/* the admin's config survives a second install and the uninstall */
	write_rel(rel_cfg, "# mine\nlimits: []\n", 0600);
	assert_int_equal(make_target("install", prefix), 0);
	path_in(p, sizeof(p), rel_cfg);
	cfg = ktest_slurp(p);
	assert_string_equal(cfg, "# mine\nlimits: []\n");
	free(cfg);
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);

	assert_int_equal(make_target("uninstall", prefix), 0);
	assert_absent(rel_d);
	assert_absent(rel_c);
	assert_absent(rel_unit);
	assert_absent(rel_ex);
	after = list_files();
	{
		/* exactly what was there before, plus the admin's config */
		char *expect = NULL;
		assert_true(asprintf(&expect, "/%s\n%s", rel_cfg, before) > 0);
		/* both sorted: /etc/... sorts before /usr/... */
		if (strcmp(after, expect) != 0)
			print_message("after uninstall:\n%swant:\n%s", after, expect);
		assert_string_equal(after, expect);
		free(expect);
	}
	free(after);

	/* without the config, uninstall again: nothing to remove, exit 0, and
	 * now the config dir goes too */
	path_in(p, sizeof(p), rel_cfg);
	assert_int_equal(unlink(p), 0);
	assert_int_equal(make_target("uninstall", prefix), 0);
	path_in(p, sizeof(p), "etc/kthrottle");
	assert_int_equal(access(p, F_OK), -1);
	after = list_files();
	assert_string_equal(after, before);
	free(after);
	free(before);
}

/* ---- tests ---- */

static void test_install_prefix_usr(void **state)
{
	(void)state;
	install_cycle("/usr");
}

static void test_install_prefix_usr_local(void **state)
{
	(void)state;
	install_cycle("/usr/local");
}

static int setup(void **state)
{
	(void)state;
	return ktest_tmpdir(dest, sizeof(dest));
}

static int teardown(void **state)
{
	(void)state;
	ktest_rmtree(dest);
	dest[0] = 0;
	return 0;
}

static int group_setup(void **state)
{
	char cwd[PATH_MAX], *slash, bin[PATH_MAX + 16];

	(void)state;
	snprintf(build, sizeof(build), "%s", ktest_build_dir());
	/* the build dir's parent (BUILD=build-x), else the working directory
	 * (scripts/run-tests.sh runs from the repository root) */
	snprintf(repo, sizeof(repo), "%s", build);
	slash = strrchr(repo, '/');
	if (slash && slash != repo)
		*slash = 0;
	if (!is_repo(repo)) {
		if (!getcwd(cwd, sizeof(cwd)) || !is_repo(cwd)) {
			fprintf(stderr, "test_install: cannot find the repository (Makefile)\n");
			return -1;
		}
		snprintf(repo, sizeof(repo), "%s", cwd);
	}
	snprintf(bin, sizeof(bin), "%s/kthrottled", build);
	if (access(bin, X_OK) != 0) {
		fprintf(stderr, "test_install: %s not built\n", bin);
		return -1;
	}
	/* a make running this test passes its flags and variables down in
	 * the environment; the install under test must see only ours */
	static const char *vars[] = { "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEFILES", "DESTDIR",
				      "PREFIX", "SBINDIR", "BINDIR", "UNITDIR", "KT_ETCDIR" };
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_install_prefix_usr, setup, teardown),
		cmocka_unit_test_setup_teardown(test_install_prefix_usr_local, setup, teardown),
	};

	return cmocka_run_group_tests_name("e2e_install", tests, group_setup, NULL);
}
