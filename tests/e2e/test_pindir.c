// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The pin directory is trusted only when only root can change it: a pinDir
 * (or its links/) off bpffs, owned by another user, group/other-writable or
 * a symlink is refused before anything is attached. Directories the daemon
 * creates are 0700. A daemon holds a lock on its pin dir: a second daemon
 * is refused, and so is a cleanup unless --force. Cleanup deletes only in
 * a kthrottle pin directory on bpffs. */
#include <errno.h>
#include <fcntl.h>
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
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <bpf/bpf.h>
#include <cmocka.h>

#include "ktest.h"
#include "kt_daemonfx.h"

#define NOBODY 65534

static char cg[PATH_MAX];

#define MAX_DAEMONS 2
static struct ktest_daemon dm[MAX_DAEMONS];
/* extra paths a test made: removed (rmdir, or rmtree for temp dirs) in
 * teardown, last first */
static char made[8][PATH_MAX];
static bool made_tmp[8];
static int nmade;

static void remember(const char *path, bool tmp)
{
	assert_true(nmade < 8);
	snprintf(made[nmade], sizeof(made[nmade]), "%s", path);
	made_tmp[nmade++] = tmp;
}

/* A fresh /sys/fs/bpf/kt-test-<pid>-x<n> path (not created). */
static void bpffs_path(char *out, size_t len)
{
	static int seq;

	snprintf(out, len, "/sys/fs/bpf/kt-test-%d-x%d", getpid(), seq++);
}

static bool cg_has_kthrottle_prog(void)
{
	char *out = NULL;
	bool has;

	ktest_bpftool_cgroup_show(cg, &out);
	has = out && ktest_lists_kthrottle_prog(out);
	free(out);
	return has;
}

static void assert_enforcing(const struct ktest_daemon *d)
{
	struct ktest_load l;
	char *r;

	assert_int_equal(waitpid(d->pid, NULL, WNOHANG), 0);
	r = ktest_daemon_cmd(d, "ping");
	assert_non_null(r);
	assert_string_equal(r, "ok: pong\n");
	free(r);
	assert_int_equal(ktest_load(cg, "udp", "127.0.0.1", 9, 0.5, &l), 0);
	print_message("enforcing: ok=%llu refused=%llu\n", l.ok, l.refused);
	assert_true(l.refused > 0);
	assert_true(l.ok <= 130);
}

/* Entries in dir (without . and ..), or -1. */
static int count_entries(const char *dir)
{
	char cmd[PATH_MAX + 64], buf[64];
	FILE *p;
	int n = -1;

	snprintf(cmd, sizeof(cmd), "ls -A '%s' | wc -l", dir);
	p = popen(cmd, "r");
	if (p && fgets(buf, sizeof(buf), p))
		n = atoi(buf);
	if (p)
		pclose(p);
	return n;
}

/* kthrottled --config d->config, expecting exit 1 with one line that
 * contains every needle (NULL-terminated); then nothing is attached and
 * d's socket is gone. */
static void assert_start_refused(struct ktest_daemon *d, ...)
{
	char *out = NULL;
	const char *needle;
	va_list ap;

	assert_int_equal(ktest_run_bin("kthrottled", &out, "--config", d->config, NULL), 1);
	assert_true(ktest_is_one_line(out));
	va_start(ap, d);
	while ((needle = va_arg(ap, const char *)))
		assert_non_null(strstr(out, needle));
	va_end(ap);
	free(out);
	assert_false(cg_has_kthrottle_prog());
	assert_int_not_equal(access(d->socket, F_OK), 0);
}

/* ---- fixtures ---- */

static int setup(void **state)
{
	(void)state;
	kt_daemonfx_dms_begin(dm, MAX_DAEMONS);
	nmade = 0;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	kt_daemonfx_dms_end(dm, MAX_DAEMONS);
	while (nmade-- > 0) {
		if (made_tmp[nmade])
			ktest_rmtree(made[nmade]);
		else if (rmdir(made[nmade]) < 0 && errno != ENOENT)
			unlink(made[nmade]);
	}
	nmade = 0;
	return 0;
}

/* ---- pinDir checks at start ---- */

static void test_pindir_not_on_bpffs(void **state)
{
	struct ktest_daemon *d = &dm[0];
	char body[1024], tmp[PATH_MAX];

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(ktest_tmpdir(tmp, sizeof(tmp)), 0);
	remember(tmp, true);

	/* an existing directory off bpffs */
	assert_int_equal(ktest_daemon_init(d), 0);
	snprintf(d->pin_dir, sizeof(d->pin_dir), "%s", tmp);
	assert_int_equal(ktest_daemon_config(d, kt_daemonfx_ok_body(body, sizeof(body), cg)), 0);
	assert_start_refused(d, tmp, "not on a bpf filesystem", NULL);
	assert_int_equal(count_entries(tmp), 0);

	/* one that does not exist yet, under a directory off bpffs */
	snprintf(d->pin_dir, sizeof(d->pin_dir), "%s/pins", tmp);
	assert_int_equal(ktest_daemon_config(d, body), 0);
	assert_start_refused(d, d->pin_dir, "not on a bpf filesystem", NULL);
	assert_int_not_equal(access(d->pin_dir, F_OK), 0);
	d->pin_dir[0] = 0;
}

struct untrusted {
	const char *what;
	bool links;      /* the flaw is on links/, not on the pin dir */
	int uid;         /* chown to this, or -1 */
	mode_t mode;
	const char *reason;
};

static void test_untrusted_pindir_refused(void **state)
{
	static const struct untrusted cases[] = {
		{ "pin dir owned by nobody", false, NOBODY, 0700, "owned by uid 65534" },
		{ "pin dir mode 0777", false, -1, 0777, "writable by group/other" },
		{ "pin dir mode 0775", false, -1, 0775, "writable by group/other" },
		{ "links/ owned by nobody", true, NOBODY, 0700, "owned by uid 65534" },
		{ "links/ mode 0777", true, -1, 0777, "writable by group/other" },
	};
	struct ktest_daemon *d = &dm[0];
	char body[1024], links[PATH_MAX + 8];

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	kt_daemonfx_ok_body(body, sizeof(body), cg);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct untrusted *c = &cases[i];
		const char *bad;

		print_message("case: %s\n", c->what);
		assert_int_equal(ktest_daemon_init(d), 0);
		assert_int_equal(ktest_daemon_config(d, body), 0);
		snprintf(links, sizeof(links), "%s/links", d->pin_dir);
		assert_int_equal(mkdir(d->pin_dir, 0700), 0);
		remember(d->pin_dir, false);
		if (c->links) {
			assert_int_equal(mkdir(links, 0700), 0);
			remember(links, false);
		}
		bad = c->links ? links : d->pin_dir;
		assert_int_equal(chmod(bad, c->mode), 0);
		if (c->uid >= 0)
			assert_int_equal(chown(bad, c->uid, c->uid), 0);

		assert_start_refused(d, bad, c->reason, NULL);
		/* nothing pinned in it, and the directories are left alone */
		assert_int_equal(count_entries(d->pin_dir), c->links ? 1 : 0);

		/* cleanup refuses it too, deleting nothing */
		char *out = NULL;
		assert_int_equal(ktest_run_bin("kthrottled", &out, "--cleanup", "--pin-dir",
					       d->pin_dir, NULL), 1);
		assert_true(ktest_is_one_line(out));
		assert_non_null(strstr(out, c->reason));
		free(out);
		assert_int_equal(access(bad, F_OK), 0);

		d->pin_dir[0] = 0; /* teardown removes it, not kthrottled */
		teardown(state);
	}
}

static void test_symlink_pindir_refused(void **state)
{
	struct ktest_daemon *d = &dm[0];
	char body[1024], real[PATH_MAX];

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	bpffs_path(real, sizeof(real));
	assert_int_equal(mkdir(real, 0700), 0);
	remember(real, false);
	assert_int_equal(ktest_daemon_init(d), 0);
	assert_int_equal(ktest_daemon_config(d, kt_daemonfx_ok_body(body, sizeof(body), cg)), 0);
	assert_int_equal(symlink(real, d->pin_dir), 0);
	remember(d->pin_dir, false);
	assert_start_refused(d, d->pin_dir, "symbolic link", NULL);
	assert_int_equal(count_entries(real), 0);
	d->pin_dir[0] = 0;
}

/* Every directory the daemon creates, parents included, is 0700 root. */
static void test_created_dirs_private(void **state)
{
	struct ktest_daemon *d = &dm[0];
	char body[1024], base[PATH_MAX], mid[PATH_MAX + 8], links[PATH_MAX + 32];
	const char *dirs[] = { base, mid, d->pin_dir, links };
	struct stat st;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	bpffs_path(base, sizeof(base));
	snprintf(mid, sizeof(mid), "%s/sub", base);
	remember(base, false);
	remember(mid, false);
	assert_int_equal(ktest_daemon_init(d), 0);
	snprintf(d->pin_dir, sizeof(d->pin_dir), "%s/pins", mid);
	snprintf(links, sizeof(links), "%s/links", d->pin_dir);
	assert_int_equal(ktest_daemon_config(d, kt_daemonfx_ok_body(body, sizeof(body), cg)), 0);
	assert_int_equal(ktest_daemon_start_logged(d), 0);
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		assert_int_equal(lstat(dirs[i], &st), 0);
		print_message("%s: %04o uid %u\n", dirs[i], (unsigned)(st.st_mode & 07777),
			      (unsigned)st.st_uid);
		assert_true(S_ISDIR(st.st_mode));
		assert_int_equal(st.st_uid, 0);
		assert_int_equal(st.st_mode & 077, 0);
	}
	assert_enforcing(d);
}

/* ---- the pin dir lock ---- */

static void test_second_daemon_same_pindir(void **state)
{
	struct ktest_daemon *d = &dm[0], *other = &dm[1];
	char body[1024];
	int links_before;
	char links[PATH_MAX + 8];

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(ktest_daemon_up(d, kt_daemonfx_ok_body(body, sizeof(body), cg)), 0);
	snprintf(links, sizeof(links), "%s/links", d->pin_dir);
	links_before = count_entries(links);
	assert_true(links_before > 0);

	/* its own socket, the first one's pin dir */
	assert_int_equal(ktest_daemon_init(other), 0);
	snprintf(other->pin_dir, sizeof(other->pin_dir), "%s", d->pin_dir);
	assert_int_equal(ktest_daemon_config(other, body), 0);
	{
		char *out = NULL;
		assert_int_equal(ktest_run_bin("kthrottled", &out, "--config", other->config, NULL),
				 1);
		assert_true(ktest_is_one_line(out));
		assert_non_null(strstr(out, d->pin_dir));
		assert_non_null(strstr(out, "in use by another kthrottled"));
		free(out);
	}
	assert_int_not_equal(access(other->socket, F_OK), 0);
	other->pin_dir[0] = 0; /* not its to clean */

	/* the first is untouched */
	assert_int_equal(count_entries(links), links_before);
	assert_enforcing(d);
}

/* ---- cleanup ---- */

static void assert_cleanup_refused(const char *dir, const char *reason)
{
	char *out = NULL;

	assert_int_equal(ktest_run_bin("kthrottled", &out, "--cleanup", "--pin-dir", dir, NULL), 1);
	assert_true(ktest_is_one_line(out));
	assert_non_null(strstr(out, dir));
	assert_non_null(strstr(out, reason));
	free(out);
	assert_int_equal(ktest_run_bin("kthrottled", &out, "--cleanup", "--force", "--pin-dir", dir,
				       NULL),
			 1);
	assert_true(ktest_is_one_line(out));
	assert_non_null(strstr(out, reason));
	free(out);
	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-p", dir, "cleanup", NULL), 1);
	assert_true(ktest_is_one_line(out));
	assert_non_null(strstr(out, dir));
	assert_non_null(strstr(out, reason));
	free(out);
	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-p", dir, "cleanup", "--force", NULL),
			 1);
	assert_true(ktest_is_one_line(out));
	assert_non_null(strstr(out, reason));
	free(out);
}

static void test_cleanup_refuses_plain_dir(void **state)
{
	static const char *const files[] = { "kt_buckets", "kt_counters", "kt_members",
					     "kt_dests", "kt_ports",	 "kt_limits",
					     "kt_leases",  "kt_other",	 "links/1-kt_connect4",
					     "links/2-kt_egress" };
	char tmp[PATH_MAX], p[PATH_MAX + 64];

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(ktest_tmpdir(tmp, sizeof(tmp)), 0);
	remember(tmp, true);
	assert_int_equal(chmod(tmp, 0700), 0);
	snprintf(p, sizeof(p), "%s/links", tmp);
	assert_int_equal(mkdir(p, 0700), 0);
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", tmp, files[i]);
		assert_int_equal(ktest_write_file(p, "keep me\n"), 0);
	}
	assert_cleanup_refused(tmp, "not on a bpf filesystem");
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", tmp, files[i]);
		assert_int_equal(access(p, F_OK), 0);
	}
}

/* Pins a hash map named "foreign" at path; its fd stays open until the
 * test ends (the pin keeps the map anyway). */
static void pin_foreign_map(const char *path)
{
	int fd = bpf_map_create(BPF_MAP_TYPE_HASH, "foreign", 4, 4, 4, NULL);

	assert_true(fd >= 0);
	assert_int_equal(bpf_obj_pin(fd, path), 0);
	close(fd);
}

static void test_cleanup_refuses_foreign_bpffs_dir(void **state)
{
	char dir[PATH_MAX], p[PATH_MAX + 64], links[PATH_MAX + 16], sub[PATH_MAX + 32];

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	bpffs_path(dir, sizeof(dir));
	assert_int_equal(mkdir(dir, 0700), 0);
	remember(dir, false);
	snprintf(links, sizeof(links), "%s/links", dir);
	assert_int_equal(mkdir(links, 0700), 0);
	remember(links, false);
	snprintf(sub, sizeof(sub), "%s/keep", links);
	assert_int_equal(mkdir(sub, 0700), 0);
	remember(sub, false);

	/* no kt_buckets at all: someone else's directory */
	snprintf(p, sizeof(p), "%s/kt_limits", dir);
	pin_foreign_map(p);
	remember(p, false);
	assert_cleanup_refused(dir, "not a kthrottle pin directory");
	assert_int_equal(access(p, F_OK), 0);
	assert_int_equal(access(sub, F_OK), 0);

	/* a kt_buckets that is not kthrottle's map */
	snprintf(p, sizeof(p), "%s/kt_buckets", dir);
	pin_foreign_map(p);
	remember(p, false);
	assert_cleanup_refused(dir, "not a kthrottle pin directory");
	assert_int_equal(access(p, F_OK), 0);
	assert_int_equal(access(sub, F_OK), 0);
	assert_int_equal(count_entries(dir), 3);
}

/* A kt_buckets that is a directory, on bpffs. */
static void test_cleanup_refuses_dir_named_like_a_map(void **state)
{
	char dir[PATH_MAX], p[PATH_MAX + 64];

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	bpffs_path(dir, sizeof(dir));
	assert_int_equal(mkdir(dir, 0700), 0);
	remember(dir, false);
	snprintf(p, sizeof(p), "%s/kt_buckets", dir);
	assert_int_equal(mkdir(p, 0700), 0);
	remember(p, false);
	assert_cleanup_refused(dir, "not a kthrottle pin directory");
	assert_int_equal(access(p, F_OK), 0);
}

static void test_cleanup_while_daemon_runs(void **state)
{
	struct ktest_daemon *d = &dm[0];
	char body[1024], links[PATH_MAX + 8], *out = NULL;
	int n;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(ktest_daemon_up(d, kt_daemonfx_ok_body(body, sizeof(body), cg)), 0);
	snprintf(links, sizeof(links), "%s/links", d->pin_dir);
	n = count_entries(links);
	assert_true(n > 0);

	/* refused, by every way in, while the daemon holds the lock */
	assert_int_equal(
		ktest_run_bin("kthrottled", &out, "--cleanup", "--pin-dir", d->pin_dir, NULL), 1);
	assert_true(ktest_is_one_line(out));
	assert_non_null(strstr(out, "running"));
	assert_non_null(strstr(out, d->pin_dir));
	assert_non_null(strstr(out, "--force"));
	free(out);
	assert_int_equal(ktest_run_bin("kthrottled", &out, "--cleanup", "--config", d->config, NULL),
			 1);
	assert_true(ktest_is_one_line(out));
	assert_non_null(strstr(out, "--force"));
	free(out);
	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-p", d->pin_dir, "cleanup", NULL), 1);
	assert_true(ktest_is_one_line(out));
	assert_non_null(strstr(out, "running"));
	assert_non_null(strstr(out, "--force"));
	free(out);
	assert_int_equal(count_entries(links), n);
	assert_true(cg_has_kthrottle_prog());
	assert_enforcing(d);

	/* --force does it */
	assert_int_equal(
		ktest_run_bin("kthrottlectl", &out, "-p", d->pin_dir, "cleanup", "--force", NULL), 0);
	print_message("output: %s", out);
	free(out);
	assert_int_not_equal(access(d->pin_dir, F_OK), 0);
	assert_false(cg_has_kthrottle_prog());
	assert_int_equal(ktest_daemon_signal_wait(d, SIGTERM), 0);

	/* and kthrottled --cleanup --force the same */
	ktest_daemon_cleanup(d);
	assert_int_equal(ktest_daemon_up(d, body), 0);
	assert_true(cg_has_kthrottle_prog());
	assert_int_equal(ktest_run_bin("kthrottled", &out, "--cleanup", "--force", "--pin-dir",
				       d->pin_dir, NULL),
			 0);
	print_message("output: %s", out);
	free(out);
	assert_int_not_equal(access(d->pin_dir, F_OK), 0);
	assert_false(cg_has_kthrottle_prog());
}

/* Once the daemon is gone the lock is free: plain cleanup works. */
static void test_cleanup_after_daemon(void **state)
{
	struct ktest_daemon *d = &dm[0];
	char body[1024], *out = NULL;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(ktest_daemon_up(d, kt_daemonfx_ok_body(body, sizeof(body), cg)), 0);
	assert_int_equal(ktest_daemon_signal_wait(d, SIGTERM), 0);
	assert_true(cg_has_kthrottle_prog()); /* still enforcing after exit */
	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-p", d->pin_dir, "cleanup", NULL), 0);
	free(out);
	assert_int_not_equal(access(d->pin_dir, F_OK), 0);
	assert_false(cg_has_kthrottle_prog());
}

static void test_detach_on_exit(void **state)
{
	struct ktest_daemon *d = &dm[0];
	char body[1024], *log;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(ktest_daemon_init(d), 0);
	assert_int_equal(ktest_daemon_config(d, kt_daemonfx_ok_body(body, sizeof(body), cg)), 0);
	/* up within 5 s, not exited */
	assert_int_equal(ktest_daemon_start_flag(d, "--detach-on-exit", 5000, NULL), 0);
	assert_enforcing(d);
	assert_int_equal(ktest_daemon_signal_wait(d, SIGTERM), 0);
	log = ktest_slurp(d->log);
	print_message("log: %s", log);
	assert_non_null(strstr(log, "detached and removed pins"));
	free(log);
	assert_int_not_equal(access(d->pin_dir, F_OK), 0);
	assert_false(cg_has_kthrottle_prog());
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_pindir_not_on_bpffs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_untrusted_pindir_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_symlink_pindir_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_created_dirs_private, setup, teardown),
		cmocka_unit_test_setup_teardown(test_second_daemon_same_pindir, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cleanup_refuses_plain_dir, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cleanup_refuses_foreign_bpffs_dir, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_cleanup_refuses_dir_named_like_a_map, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_cleanup_while_daemon_runs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cleanup_after_daemon, setup, teardown),
		cmocka_unit_test_setup_teardown(test_detach_on_exit, setup, teardown),
	};

	kt_daemonfx_group("pindir", cg, sizeof(cg));
	return cmocka_run_group_tests_name("e2e_pindir", tests, kt_daemonfx_group_setup,
					   kt_daemonfx_group_teardown);
}
