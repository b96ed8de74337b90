// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The volume rule (user/base/volfile.h) on volumes laid out as the kubelet
 * lays them out (tests/lib/kvol.h: timestamped directory, ..data link, a
 * link per name, the emptyDir's 0777 or the tmpfs's 1777, seen through a
 * read-only bind mount): a ConfigMap and a Secret are read through their
 * links and re-read after each atomic swap, also while swaps run flat out;
 * what O_NOFOLLOW guarded against stays refused: absolute links, links that
 * climb out, entries owned by another user, a writable volume that is not
 * read-only, FIFOs, link loops. Needs root (mounts, chown). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
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
#include "kvol.h"
#include "base/volfile.h"


/* The file's content, or NULL with why. */
static char *read_it(const char *path, int *err, char *why, size_t whylen)
{
	const char *stage;
	char *out = NULL;
	size_t len;

	*err = kt_volfile_read(path, 4096, &out, &len, &stage, why, whylen);
	return *err ? NULL : out;
}

static void expect_content(const char *path, const char *want)
{
	char why[256] = "";
	int err;
	char *got = read_it(path, &err, why, sizeof(why));

	if (!got)
		print_message("%s: %s\n", path, why);
	assert_non_null(got);
	assert_string_equal(got, want);
	free(got);
}

static void expect_refused(const char *path, int want_err, const char *want_why)
{
	char why[256] = "";
	int err;
	char *got = read_it(path, &err, why, sizeof(why));

	print_message("%s: %s\n", path, why);
	assert_null(got);
	assert_int_equal(err, want_err);
	assert_non_null(strstr(why, want_why));
	assert_null(strchr(why, '\n'));
}

static void test_configmap_swaps(void **state)
{
	struct ktest_kvol v;
	const struct ktest_kvol_file one[] = { { "kthrottled.yaml", "a: 1\n" },
					       { "other.yaml", "x\n" } };
	char path[PATH_MAX], link[PATH_MAX + 16];
	struct stat st;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	const char *tmp = *state;

	assert_int_equal(ktest_kvol_create(&v, tmp, "config", KTEST_KVOL_CONFIGMAP), 0);
	assert_int_equal(ktest_kvol_publish(&v, one, 2), 0);
	ktest_kvol_path(&v, "kthrottled.yaml", path, sizeof(path));
	/* the layout is the kubelet's: a link to ..data/<name>, a 0777 dir */
	assert_int_equal(lstat(path, &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	snprintf(link, sizeof(link), "%s/..data", v.pod);
	assert_int_equal(lstat(link, &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	assert_int_equal(stat(v.pod, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0777);
	/* and the container cannot write it */
	assert_int_not_equal(open(path, O_WRONLY), 0);
	assert_int_equal(errno, EROFS);

	expect_content(path, "a: 1\n");
	assert_int_equal(ktest_kvol_update(&v, "kthrottled.yaml", "a: 2\n"), 0);
	expect_content(path, "a: 2\n");
	ktest_kvol_path(&v, "other.yaml", path, sizeof(path));
	expect_content(path, "x\n");
	/* a name the new set drops is gone */
	assert_int_equal(ktest_kvol_publish(&v, one, 1), 0);
	expect_refused(path, -ENOENT, "other.yaml");
	ktest_kvol_remove(&v);
}

static void test_secret_and_token(void **state)
{
	struct ktest_kvol v;
	const struct ktest_kvol_file sa[] = { { "token", "t0ken-1\n" },
					      { "ca.crt", "-----BEGIN CERTIFICATE-----\n" },
					      { "namespace", "kthrottle" } };
	char path[PATH_MAX];
	struct stat st;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	const char *tmp = *state;

	assert_int_equal(ktest_kvol_create(&v, tmp, "serviceaccount", KTEST_KVOL_SECRET), 0);
	assert_int_equal(ktest_kvol_publish(&v, sa, 3), 0);
	assert_int_equal(stat(v.pod, &st), 0);
	assert_int_equal(st.st_mode & 07777, 01777);
	expect_content(ktest_kvol_path(&v, "token", path, sizeof(path)), "t0ken-1\n");
	expect_content(ktest_kvol_path(&v, "namespace", path, sizeof(path)), "kthrottle");
	assert_int_equal(ktest_kvol_update(&v, "token", "t0ken-2\n"), 0);
	expect_content(ktest_kvol_path(&v, "token", path, sizeof(path)), "t0ken-2\n");
	ktest_kvol_remove(&v);
}

/* Plain files in an ordinary directory (a host install) read as before. */
static void test_plain_files(void **state)
{
	char path[PATH_MAX];

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	const char *tmp = *state;

	snprintf(path, sizeof(path), "%s/plain.yaml", tmp);
	assert_int_equal(ktest_write_file(path, "plain\n"), 0);
	expect_content(path, "plain\n");
	assert_int_equal(chdir(tmp), 0);
	expect_content("plain.yaml", "plain\n");
	expect_content("./plain.yaml", "plain\n");
	assert_int_equal(chdir("/"), 0);
	expect_refused(tmp, -EISDIR, "directory");
	snprintf(path, sizeof(path), "%s/", tmp);
	expect_refused(path, -EISDIR, "directory");
}

/* Every redirection the old O_NOFOLLOW stopped is still stopped. */
static void test_refusals(void **state)
{
	char vol[PATH_MAX], path[PATH_MAX + 32], sub[PATH_MAX + 32];

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	const char *tmp = *state;

	snprintf(vol, sizeof(vol), "%s/vol", tmp);
	assert_int_equal(mkdir(vol, 0755), 0);
	snprintf(path, sizeof(path), "%s/real", vol);
	assert_int_equal(ktest_write_file(path, "real\n"), 0);

	snprintf(path, sizeof(path), "%s/abs", vol);
	assert_int_equal(symlink("/etc/hostname", path), 0);
	expect_refused(path, -EPERM, "absolute");

	snprintf(sub, sizeof(sub), "%s/d", vol);
	assert_int_equal(mkdir(sub, 0755), 0);
	snprintf(path, sizeof(path), "%s/d/up", vol);
	assert_int_equal(symlink("../real", path), 0);
	expect_refused(path, -EPERM, "out of the volume");

	/* a link another user made, and a file another user owns */
	snprintf(path, sizeof(path), "%s/theirs", vol);
	assert_int_equal(symlink("real", path), 0);
	assert_int_equal(lchown(path, 1000, 1000), 0);
	expect_refused(path, -EPERM, "owned by uid 1000");
	snprintf(path, sizeof(path), "%s/theirfile", vol);
	assert_int_equal(ktest_write_file(path, "x\n"), 0);
	assert_int_equal(chown(path, 1000, 1000), 0);
	expect_refused(path, -EPERM, "owned by uid 1000");

	/* writable by others on a writable mount */
	snprintf(path, sizeof(path), "%s/open", vol);
	assert_int_equal(ktest_write_file(path, "x\n"), 0);
	assert_int_equal(chmod(path, 0666), 0);
	expect_refused(path, -EPERM, "writable by group or others");
	assert_int_equal(chmod(vol, 0777), 0);
	snprintf(path, sizeof(path), "%s/real", vol);
	expect_refused(path, -EPERM, "neither sticky nor a read-only mount");
	assert_int_equal(chmod(vol, 01777), 0); /* sticky, as /tmp */
	expect_content(path, "real\n");
	assert_int_equal(chmod(vol, 0755), 0);

	/* a FIFO is refused at once, not waited on */
	snprintf(path, sizeof(path), "%s/fifo", vol);
	assert_int_equal(mkfifo(path, 0600), 0);
	alarm(5);
	expect_refused(path, -EINVAL, "FIFO");
	alarm(0);

	/* loops and missing files */
	snprintf(path, sizeof(path), "%s/loop1", vol);
	assert_int_equal(symlink("loop2", path), 0);
	snprintf(path, sizeof(path), "%s/loop2", vol);
	assert_int_equal(symlink("loop1", path), 0);
	expect_refused(path, -ELOOP, "links");
	snprintf(path, sizeof(path), "%s/missing", vol);
	expect_refused(path, -ENOENT, "missing");

	/* the volume directory itself owned by someone else */
	assert_int_equal(chown(vol, 1000, 1000), 0);
	snprintf(path, sizeof(path), "%s/real", vol);
	expect_refused(path, -EPERM, "directory is owned by uid 1000");
}

/* Reads while the kubelet swaps flat out: every read sees one whole
 * version, never an error or a mix. */
struct swapper {
	struct ktest_kvol *v;
	volatile bool stop;
	int swaps;
};

static void *swap_loop(void *arg)
{
	struct swapper *s = arg;
	char body[64];

	while (!s->stop && s->swaps < 2000) {
		snprintf(body, sizeof(body), "version %d\n", s->swaps % 2);
		if (ktest_kvol_update(s->v, "token", body))
			break;
		__atomic_add_fetch(&s->swaps, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

static void test_reads_during_swaps(void **state)
{
	struct ktest_kvol v;
	struct swapper s = { .v = &v };
	const struct ktest_kvol_file f[] = { { "token", "version 0\n" } };
	char path[PATH_MAX];
	pthread_t t;
	int reads = 0, errors = 0;
	uint64_t until;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	const char *tmp = *state;

	assert_int_equal(ktest_kvol_create(&v, tmp, "sa", KTEST_KVOL_SECRET), 0);
	assert_int_equal(ktest_kvol_publish(&v, f, 1), 0);
	ktest_kvol_path(&v, "token", path, sizeof(path));
	assert_int_equal(pthread_create(&t, NULL, swap_loop, &s), 0);
	/* until enough reads have met enough swaps: on a loaded machine the
	 * swapper may get no CPU for the first 20,000 reads */
	until = ktest_now_ns() + 10000000000ull;
	while (ktest_now_ns() < until &&
	       (reads < 20000 || __atomic_load_n(&s.swaps, __ATOMIC_RELAXED) < 500)) {
		char why[256];
		int err;
		char *got = read_it(path, &err, why, sizeof(why));

		reads++;
		if (!got || (strcmp(got, "version 0\n") && strcmp(got, "version 1\n"))) {
			if (errors++ < 3)
				print_message("read %d: %s\n", reads, got ? got : why);
		}
		free(got);
	}
	s.stop = true;
	pthread_join(t, NULL);
	print_message("%d reads during %d swaps, %d bad\n", reads, s.swaps, errors);
	assert_true(s.swaps >= 500);
	assert_int_equal(errors, 0);
	ktest_kvol_remove(&v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_configmap_swaps, ktest_setup_tmpdir, ktest_teardown_tmpdir),
		cmocka_unit_test_setup_teardown(test_secret_and_token, ktest_setup_tmpdir, ktest_teardown_tmpdir),
		cmocka_unit_test_setup_teardown(test_plain_files, ktest_setup_tmpdir, ktest_teardown_tmpdir),
		cmocka_unit_test_setup_teardown(test_refusals, ktest_setup_tmpdir, ktest_teardown_tmpdir),
		cmocka_unit_test_setup_teardown(test_reads_during_swaps, ktest_setup_tmpdir, ktest_teardown_tmpdir),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
