// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The config watcher (user/control/cfgwatch.h) alone: a config in a
 * ConfigMap volume as the kubelet lays it out (tests/lib/kvol.h) is reported
 * once per swap, KT_CFGWATCH_DEBOUNCE_MS after it; a touch or an identical
 * republish is looked at and not reported; a burst of swaps is reported
 * once. In a plain directory a rewrite, an editor's rename over the name and
 * a directory replaced under the path are reported too. Needs root (kvol's
 * mounts). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
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

#include "control/cfgwatch.h"
#include "ktest.h"
#include "kvol.h"

#define NAME "kthrottled.yaml"


/* Runs the watcher for up to ms (until the first report with stop_at_first):
 * reports seen; *first_ns when the first came. */
static int reports(struct kt_cfgwatch *w, int ms, bool stop_at_first, uint64_t *first_ns)
{
	uint64_t end = ktest_now_ns() + (uint64_t)ms * 1000000;
	int n = 0;

	while (ktest_now_ns() < end) {
		struct pollfd p = { .fd = kt_cfgwatch_fd(w), .events = POLLIN };
		int left = (int)((end - ktest_now_ns()) / 1000000) + 1;

		if (poll(&p, 1, left) <= 0 || !kt_cfgwatch_run(w))
			continue;
		if (!n++ && first_ns)
			*first_ns = ktest_now_ns();
		if (stop_at_first)
			break;
	}
	return n;
}

/* One report, at least the debounce after `since` and within 2 s of it,
 * then none for the next second. */
static void expect_one(struct kt_cfgwatch *w, uint64_t since, const char *what)
{
	uint64_t at = 0;

	assert_int_equal(reports(w, 2000, true, &at), 1);
	print_message("%s: reported %.0f ms after it\n", what, (double)(at - since) / 1e6);
	assert_true(at - since >= (uint64_t)(KT_CFGWATCH_DEBOUNCE_MS - 5) * 1000000);
	assert_int_equal(reports(w, 1000, false, NULL), 0);
}

/* Looked at (a debounce fired) and not reported. */
static void expect_none(struct kt_cfgwatch *w, const char *what)
{
	uint64_t before = kt_cfgwatch_checks(w);

	assert_int_equal(reports(w, KT_CFGWATCH_DEBOUNCE_MS + 1000, false, NULL), 0);
	print_message("%s: %llu check(s), no report\n", what,
		      (unsigned long long)(kt_cfgwatch_checks(w) - before));
	assert_true(kt_cfgwatch_checks(w) > before);
}

static struct kt_cfgwatch *watch(const char *path, int recheck_ms)
{
	struct kt_cfgwatch *w = NULL;
	char err[256] = "";

	if (kt_cfgwatch_open(&w, path, NULL, 0, recheck_ms, err, sizeof(err)))
		print_message("%s\n", err);
	assert_non_null(w);
	return w;
}

static void test_configmap(void **state)
{
	struct ktest_kvol v = { 0 };
	char path[PATH_MAX], link[PATH_MAX + 16];
	struct timespec ts[2] = { { 0, UTIME_NOW }, { 0, UTIME_NOW } };
	uint64_t t;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	const char *tmp = *state;

	assert_int_equal(ktest_kvol_create(&v, tmp, "config", KTEST_KVOL_CONFIGMAP), 0);
	assert_int_equal(ktest_kvol_update(&v, NAME, "a: 1\n"), 0);
	ktest_kvol_path(&v, NAME, path, sizeof(path));
	struct kt_cfgwatch *w = watch(path, 0);

	for (int i = 2; i <= 3; i++) {
		char content[32];

		snprintf(content, sizeof(content), "a: %d\n", i);
		t = ktest_now_ns();
		assert_int_equal(ktest_kvol_update(&v, NAME, content), 0);
		expect_one(w, t, "..data swap");
	}
	/* the same content again: a new timestamped dir, the same bytes */
	assert_int_equal(ktest_kvol_update(&v, NAME, "a: 3\n"), 0);
	expect_none(w, "identical republish");
	/* a touch of the name's link in the watched directory */
	snprintf(link, sizeof(link), "%s/%s", v.host, NAME);
	assert_int_equal(utimensat(AT_FDCWD, link, ts, AT_SYMLINK_NOFOLLOW), 0);
	expect_none(w, "touch");
	/* back to a content tried before is a change too */
	t = ktest_now_ns();
	assert_int_equal(ktest_kvol_update(&v, NAME, "a: 2\n"), 0);
	expect_one(w, t, "swap back");
	/* what a reload read becomes the last tried: no report for it */
	unsigned char d[KT_CONFIG_DIGEST_LEN];

	kt_config_digest("a: 9\n", 5, 0, d);
	kt_cfgwatch_tried(w, d);
	assert_int_equal(ktest_kvol_update(&v, NAME, "a: 9\n"), 0);
	expect_none(w, "content a reload already tried");
	kt_cfgwatch_close(w);
	ktest_kvol_remove(&v);
}

static void test_burst(void **state)
{
	struct ktest_kvol v = { 0 };
	char path[PATH_MAX], content[32];
	uint64_t t = 0, t0;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	const char *tmp = *state;

	assert_int_equal(ktest_kvol_create(&v, tmp, "config", KTEST_KVOL_CONFIGMAP), 0);
	assert_int_equal(ktest_kvol_update(&v, NAME, "b: 0\n"), 0);
	ktest_kvol_path(&v, NAME, path, sizeof(path));
	struct kt_cfgwatch *w = watch(path, 0);

	t0 = ktest_now_ns();
	for (int i = 1; i <= 10; i++) {
		snprintf(content, sizeof(content), "b: %d\n", i);
		assert_int_equal(ktest_kvol_update(&v, NAME, content), 0);
		t = ktest_now_ns();
		/* nothing yet: each swap restarts the debounce */
		assert_int_equal(reports(w, 40, false, NULL), 0);
	}
	print_message("10 swaps in %.0f ms\n", (double)(t - t0) / 1e6);
	expect_one(w, t, "burst of 10 swaps, after the last");
	kt_cfgwatch_close(w);
	ktest_kvol_remove(&v);
}

static void test_plain_dir(void **state)
{
	char dir[PATH_MAX], path[PATH_MAX + 32], tmpf[PATH_MAX + 32], old[PATH_MAX + 8];
	struct timespec ts[2] = { { 0, UTIME_NOW }, { 0, UTIME_NOW } };
	uint64_t t;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	const char *tmp = *state;

	snprintf(dir, sizeof(dir), "%s/etc", tmp);
	assert_int_equal(mkdir(dir, 0755), 0);
	snprintf(path, sizeof(path), "%s/%s", dir, NAME);
	assert_int_equal(ktest_write_file(path, "c: 1\n"), 0);
	struct kt_cfgwatch *w = watch(path, 0);

	/* a rewrite in place (IN_CLOSE_WRITE of the name) */
	t = ktest_now_ns();
	assert_int_equal(ktest_write_file(path, "c: 2\n"), 0);
	expect_one(w, t, "rewrite");
	assert_int_equal(ktest_write_file(path, "c: 2\n"), 0);
	expect_none(w, "identical rewrite");
	assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
	expect_none(w, "touch");
	/* an editor's save: a temp file renamed over the name */
	snprintf(tmpf, sizeof(tmpf), "%s/.%s.swp", dir, NAME);
	assert_int_equal(ktest_write_file(tmpf, "c: 3\n"), 0);
	t = ktest_now_ns();
	assert_int_equal(rename(tmpf, path), 0);
	expect_one(w, t, "rename over");
	/* the directory itself replaced (IN_MOVE_SELF): the watch is re-added
	 * by path when the debounce fires */
	snprintf(old, sizeof(old), "%s.old", dir);
	assert_int_equal(rename(dir, old), 0);
	assert_int_equal(mkdir(dir, 0755), 0);
	t = ktest_now_ns();
	assert_int_equal(ktest_write_file(path, "c: 4\n"), 0);
	uint64_t at = 0;

	assert_int_equal(reports(w, 3000, true, &at), 1);
	print_message("directory replaced: reported %.0f ms after the write\n",
		      (double)(at - t) / 1e6);
	/* and the new directory is the one watched now */
	ktest_sleep_ms(100);
	t = ktest_now_ns();
	assert_int_equal(ktest_write_file(path, "c: 5\n"), 0);
	assert_int_equal(reports(w, 1000, true, &at), 1);
	print_message("rewrite in the new directory: reported %.0f ms after it\n",
		      (double)(at - t) / 1e6);
	kt_cfgwatch_close(w);
}

/* A change no event in the watched directory shows (the name links into a
 * subdirectory, whose file is rewritten in place): the periodic recheck
 * finds it. */
static void test_recheck(void **state)
{
	char dir[PATH_MAX], sub[PATH_MAX + 8], path[PATH_MAX + 32], real[PATH_MAX + 32];
	uint64_t t, at = 0;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	const char *tmp = *state;

	snprintf(dir, sizeof(dir), "%s/etc", tmp);
	snprintf(sub, sizeof(sub), "%s/sub", dir);
	assert_int_equal(mkdir(dir, 0755), 0);
	assert_int_equal(mkdir(sub, 0755), 0);
	snprintf(real, sizeof(real), "%s/real.yaml", sub);
	snprintf(path, sizeof(path), "%s/%s", dir, NAME);
	assert_int_equal(ktest_write_file(real, "d: 1\n"), 0);
	assert_int_equal(symlink("sub/real.yaml", path), 0);
	struct kt_cfgwatch *w = watch(path, 1000);

	t = ktest_now_ns();
	assert_int_equal(ktest_write_file(real, "d: 2\n"), 0);
	assert_int_equal(reports(w, 3000, true, &at), 1);
	print_message("target in a subdirectory: reported %.0f ms after the write\n",
		      (double)(at - t) / 1e6);
	assert_int_equal(reports(w, 1500, false, NULL), 0);
	kt_cfgwatch_close(w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_configmap, ktest_setup_tmpdir, ktest_teardown_tmpdir),
		cmocka_unit_test_setup_teardown(test_burst, ktest_setup_tmpdir, ktest_teardown_tmpdir),
		cmocka_unit_test_setup_teardown(test_plain_dir, ktest_setup_tmpdir, ktest_teardown_tmpdir),
		cmocka_unit_test_setup_teardown(test_recheck, ktest_setup_tmpdir, ktest_teardown_tmpdir),
	};

	return cmocka_run_group_tests_name("cfgwatch", tests, NULL, NULL);
}
