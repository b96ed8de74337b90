// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Member cgroups by glob pattern or not-yet-existing path: expansion (sorted,
 * directories only, no symlinks, no "..", systemd's literal "\x2d") and the
 * inotify watcher (patterns, nested patterns re-armed by set(), a plain path
 * whose parents appear one by one, removal of unwanted watches, the cap,
 * queue overflow).
 * Plain directories under a mkdtemp dir stand in for cgroups: no root. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "base/cgwatch.h"

struct fx {
	char root[64];
};

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	snprintf(f->root, sizeof(f->root), "/tmp/kt-cgw-XXXXXX");
	if (!mkdtemp(f->root)) {
		free(f);
		return -1;
	}
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	int r = nftw(f->root, rm_one, 16, FTW_DEPTH | FTW_PHYS);

	free(f);
	return r;
}

/* root + "/" + rel, in a rotating static buffer (a few live at once). */
static const char *P(struct fx *f, const char *rel)
{
	static char b[8][PATH_MAX];
	static int next;
	char *p = b[next++ % 8];

	assert_true(snprintf(p, PATH_MAX, "%s/%s", f->root, rel) < PATH_MAX);
	return p;
}

static void mkd(struct fx *f, const char *rel)
{
	assert_int_equal(mkdir(P(f, rel), 0755), 0);
}

static void rmd(struct fx *f, const char *rel)
{
	if (rmdir(P(f, rel)) < 0)
		fail_msg("rmdir %s: %s", rel, strerror(errno));
}

static void touch(struct fx *f, const char *rel)
{
	int fd = open(P(f, rel), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);

	assert_true(fd >= 0);
	close(fd);
}

static bool readable(struct kt_cgwatch *w)
{
	struct pollfd p = { .fd = kt_cgwatch_fd(w), .events = POLLIN };

	return poll(&p, 1, 0) == 1;
}

/* inotify queues the event before mkdir/rmdir returns, so no waiting. The fd
 * must agree with drain (readable when a change is pending), as epoll uses it. */
static bool changed(struct kt_cgwatch *w)
{
	bool pending = readable(w), r = kt_cgwatch_drain(w);

	if (r)
		assert_true(pending);
	assert_false(readable(w)); /* drained everything */
	return r;
}

static void set1(struct kt_cgwatch *w, const char *path)
{
	const char *v[] = { path };

	assert_int_equal(kt_cgwatch_set(w, v, 1), 0);
}

static void test_is_pattern(void **state)
{
	(void)state;
	assert_true(kt_path_is_pattern("/sys/fs/cgroup/system.slice/worker@*.service"));
	assert_true(kt_path_is_pattern("/a/b?"));
	assert_true(kt_path_is_pattern("/a/[ab]/c"));
	assert_false(kt_path_is_pattern("/sys/fs/cgroup/kubepods.slice"));
	assert_false(kt_path_is_pattern("/x/system-systemd\\x2dfsck.slice"));
	assert_false(kt_path_is_pattern(""));
	assert_false(kt_path_is_pattern(NULL));
}

static void test_glob(void **state)
{
	struct fx *f = *state;
	char **out;
	int n;

	mkd(f, "s");
	mkd(f, "s/worker@3.service"); /* created out of order: result is sorted */
	mkd(f, "s/worker@1.service");
	mkd(f, "s/worker@2.service");
	mkd(f, "s/other.service");
	touch(f, "s/worker@4.service"); /* a file never matches */
	assert_int_equal(symlink(P(f, "s/other.service"), P(f, "s/worker@5.service")), 0);

	n = kt_cgroup_glob(P(f, "s/worker@*.service"), &out);
	assert_int_equal(n, 3);
	assert_string_equal(out[0], P(f, "s/worker@1.service"));
	assert_string_equal(out[1], P(f, "s/worker@2.service"));
	assert_string_equal(out[2], P(f, "s/worker@3.service"));
	kt_cgroup_glob_free(out, n);

	/* Normalized: "//", "/./" and a trailing "/" give the same paths. */
	n = kt_cgroup_glob(P(f, "/s/./worker@[12].service/"), &out);
	assert_int_equal(n, 2);
	assert_string_equal(out[0], P(f, "s/worker@1.service"));
	assert_string_equal(out[1], P(f, "s/worker@2.service"));
	kt_cgroup_glob_free(out, n);

	/* A plain path matches itself when it is a directory. */
	n = kt_cgroup_glob(P(f, "s/other.service"), &out);
	assert_int_equal(n, 1);
	assert_string_equal(out[0], P(f, "s/other.service"));
	kt_cgroup_glob_free(out, n);
	assert_int_equal(kt_cgroup_glob(P(f, "s/worker@4.service"), &out), 0);

	/* No match is 0 with a NULL array, not an error. */
	out = (char **)1;
	assert_int_equal(kt_cgroup_glob(P(f, "s/nothing*"), &out), 0);
	assert_null(out);
	assert_int_equal(kt_cgroup_glob(P(f, "missing/*"), &out), 0);

	/* glob(3) returns "." and ".." for ".*": never a cgroup. */
	assert_int_equal(kt_cgroup_glob(P(f, "s/.*"), &out), 0);
	assert_int_equal(kt_cgroup_glob(P(f, "s/.?"), &out), 0);

	/* Relative and ".." are refused, not resolved. */
	assert_int_equal(kt_cgroup_glob("sys/fs/cgroup/*", &out), -EINVAL);
	assert_int_equal(kt_cgroup_glob("", &out), -EINVAL);
	assert_int_equal(kt_cgroup_glob(P(f, "s/../s/*"), &out), -EINVAL);
	assert_int_equal(kt_cgroup_glob(P(f, "s/*/.."), &out), -EINVAL);
	assert_int_equal(kt_cgroup_glob(NULL, &out), -EINVAL);
	/* "..x" is a name, not the parent. */
	mkd(f, "s/..x");
	n = kt_cgroup_glob(P(f, "s/..x"), &out);
	assert_int_equal(n, 1);
	kt_cgroup_glob_free(out, n);
}

static void test_glob_symlink_not_descended(void **state)
{
	struct fx *f = *state;
	char **out;
	int n;

	mkd(f, "k");
	mkd(f, "k/real");
	mkd(f, "k/real/podA");
	mkd(f, "outside");
	mkd(f, "outside/podB");
	assert_int_equal(symlink(P(f, "outside"), P(f, "k/link")), 0);

	n = kt_cgroup_glob(P(f, "k/*/pod*"), &out);
	assert_int_equal(n, 1);
	assert_string_equal(out[0], P(f, "k/real/podA"));
	kt_cgroup_glob_free(out, n);
	/* Nor through a symlink in the literal part, nor as a plain path. */
	assert_int_equal(kt_cgroup_glob(P(f, "k/link/pod*"), &out), 0);
	assert_int_equal(kt_cgroup_glob(P(f, "k/link/podB"), &out), 0);
	assert_int_equal(kt_cgroup_glob(P(f, "k/link"), &out), 0);
}

static void test_glob_systemd_escape(void **state)
{
	struct fx *f = *state;
	char **out;
	int n;

	/* systemd writes "\x2d" literally in unit cgroup names. */
	mkd(f, "system-systemd\\x2dfsck.slice");
	mkd(f, "system-systemdx2dfsck.slice");
	n = kt_cgroup_glob(P(f, "system-systemd\\x2d*"), &out);
	assert_int_equal(n, 1);
	assert_string_equal(out[0], P(f, "system-systemd\\x2dfsck.slice"));
	kt_cgroup_glob_free(out, n);
}

static void test_glob_long_path(void **state)
{
	struct fx *f = *state;
	char *pat = malloc(PATH_MAX + 16);
	char **out;
	size_t len;

	assert_non_null(pat);
	len = (size_t)snprintf(pat, PATH_MAX + 16, "%s/", f->root);
	memset(pat + len, 'a', PATH_MAX + 15 - len);
	pat[PATH_MAX + 15] = 0;
	pat[PATH_MAX + 10] = '*';
	assert_int_equal(kt_cgroup_glob(pat, &out), -ENAMETOOLONG);
	free(pat);
}

/* Paths close to PATH_MAX work: nothing is truncated on the way. */
static void test_long_paths(void **state)
{
	struct fx *f = *state;
	char *dir = malloc(PATH_MAX), *pat = malloc(PATH_MAX);
	struct kt_cgwatch *w;
	const char *v[1];
	char **out;
	size_t len;
	int n;

	assert_non_null(dir);
	assert_non_null(pat);
	len = (size_t)snprintf(dir, PATH_MAX, "%s", f->root);
	while (len + 1 + 200 + 16 < PATH_MAX) {
		dir[len++] = '/';
		memset(dir + len, 'd', 200);
		len += 200;
		dir[len] = 0;
		assert_int_equal(mkdir(dir, 0755), 0);
	}
	assert_true(len > PATH_MAX - 300);
	snprintf(pat, PATH_MAX, "%s/podA", dir);
	assert_int_equal(mkdir(pat, 0755), 0);
	snprintf(pat, PATH_MAX, "%s/pod*", dir);
	n = kt_cgroup_glob(pat, &out);
	assert_int_equal(n, 1);
	assert_int_equal(strlen(out[0]), len + 5);
	kt_cgroup_glob_free(out, n);

	assert_int_equal(kt_cgwatch_open(&w, 0), 0);
	v[0] = pat;
	assert_int_equal(kt_cgwatch_set(w, v, 1), 0);
	assert_int_equal(kt_cgwatch_count(w), 1);
	snprintf(pat, PATH_MAX, "%s/podB", dir);
	assert_int_equal(mkdir(pat, 0755), 0);
	assert_true(changed(w));
	kt_cgwatch_close(w);
	free(dir);
	free(pat);
}

static void test_open_flags(void **state)
{
	struct kt_cgwatch *w;
	int fd;
	struct timespec a, b;

	(void)state;
	assert_int_equal(kt_cgwatch_open(&w, 0), 0);
	fd = kt_cgwatch_fd(w);
	assert_true(fd >= 0);
	assert_true(fcntl(fd, F_GETFL) & O_NONBLOCK);
	assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	/* Nothing pending and nothing watched: false at once, no blocking. */
	clock_gettime(CLOCK_MONOTONIC, &a);
	assert_false(kt_cgwatch_drain(w));
	clock_gettime(CLOCK_MONOTONIC, &b);
	assert_true(b.tv_sec - a.tv_sec < 2);
	assert_int_equal(kt_cgwatch_count(w), 0);
	kt_cgwatch_close(w);
	kt_cgwatch_close(NULL);
}

static void test_watch_pattern(void **state)
{
	struct fx *f = *state;
	struct kt_cgwatch *w;

	mkd(f, "s");
	mkd(f, "u");
	assert_int_equal(kt_cgwatch_open(&w, 0), 0);
	set1(w, P(f, "s/worker@*.service"));
	assert_int_equal(kt_cgwatch_count(w), 1); /* s */
	assert_false(changed(w));                 /* nothing pending */

	mkd(f, "s/worker@1.service");
	assert_true(changed(w));
	assert_false(changed(w)); /* reported once */
	rmd(f, "s/worker@1.service");
	assert_true(changed(w));

	/* Files, and directories elsewhere, are not reported. */
	touch(f, "u/x");
	touch(f, "s/worker@2.service");
	mkd(f, "u/worker@3.service");
	assert_false(changed(w));

	/* A directory moved in or out is. */
	assert_int_equal(rename(P(f, "u/worker@3.service"), P(f, "s/worker@3.service")), 0);
	assert_true(changed(w));
	assert_int_equal(rename(P(f, "s/worker@3.service"), P(f, "u/worker@3.service")), 0);
	assert_true(changed(w));

	/* The same set again keeps the same watch. */
	set1(w, P(f, "s/worker@*.service"));
	assert_int_equal(kt_cgwatch_count(w), 1);
	assert_false(changed(w));
	mkd(f, "s/worker@4.service");
	assert_true(changed(w));
	kt_cgwatch_close(w);
}

static void test_watch_nested(void **state)
{
	struct fx *f = *state;
	struct kt_cgwatch *w;

	mkd(f, "t");
	mkd(f, "t/n0");
	assert_int_equal(kt_cgwatch_open(&w, 0), 0);
	set1(w, P(f, "t/*/pod*"));
	assert_int_equal(kt_cgwatch_count(w), 2); /* t, t/n0 */

	mkd(f, "t/n0/podA"); /* an existing intermediate dir is watched */
	assert_true(changed(w));

	mkd(f, "t/n1"); /* a new intermediate dir */
	assert_true(changed(w));
	set1(w, P(f, "t/*/pod*"));
	assert_int_equal(kt_cgwatch_count(w), 3);
	assert_false(changed(w));
	mkd(f, "t/n1/podB");
	assert_true(changed(w));
	touch(f, "t/n1/podfile");
	assert_false(changed(w));
	assert_int_equal(unlink(P(f, "t/n1/podfile")), 0);
	assert_false(changed(w));

	/* The intermediate dir going away is reported (and its watch ends). */
	rmd(f, "t/n1/podB");
	assert_true(changed(w));
	rmd(f, "t/n1");
	assert_true(changed(w));
	assert_int_equal(kt_cgwatch_count(w), 2);
	set1(w, P(f, "t/*/pod*"));
	assert_int_equal(kt_cgwatch_count(w), 2);

	/* The literal prefix itself removed, then recreated: set() falls back
	 * to its parent, so the recreation is seen, then its children. */
	rmd(f, "t/n0/podA");
	rmd(f, "t/n0");
	rmd(f, "t");
	assert_true(changed(w));
	set1(w, P(f, "t/*/pod*"));
	assert_int_equal(kt_cgwatch_count(w), 1); /* root */
	mkd(f, "t");
	assert_true(changed(w));
	set1(w, P(f, "t/*/pod*"));
	mkd(f, "t/n2");
	assert_true(changed(w));
	set1(w, P(f, "t/*/pod*"));
	mkd(f, "t/n2/podC");
	assert_true(changed(w));
	kt_cgwatch_close(w);
}

static void test_watch_plain_missing(void **state)
{
	struct fx *f = *state;
	const char *target = "p/a/b/c";
	char want[PATH_MAX];
	struct kt_cgwatch *w;
	struct stat st;
	int steps = 0;

	snprintf(want, sizeof(want), "%s", P(f, target));
	assert_int_equal(kt_cgwatch_open(&w, 0), 0);
	/* Create the chain one level at a time, re-arming after each report,
	 * until the path itself appears; bounded by its depth. */
	while (lstat(want, &st) < 0 && steps < 8) {
		char next[PATH_MAX], *slash;

		set1(w, want);
		assert_int_equal(kt_cgwatch_count(w), 1);
		assert_false(changed(w));
		/* next missing level: the shortest prefix that does not exist */
		snprintf(next, sizeof(next), "%s", want);
		for (slash = next + strlen(f->root) + 1; (slash = strchr(slash, '/')); slash++) {
			*slash = 0;
			if (lstat(next, &st) < 0)
				break;
			*slash = '/';
		}
		assert_int_equal(mkdir(next, 0755), 0);
		assert_true(changed(w));
		steps++;
	}
	assert_int_equal(steps, 4); /* p, p/a, p/a/b, p/a/b/c */
	assert_int_equal(lstat(want, &st), 0);

	/* Existing now: its parent is watched, so its removal is seen. */
	set1(w, want);
	rmd(f, target);
	assert_true(changed(w));
	kt_cgwatch_close(w);
}

static void test_set_replaces(void **state)
{
	struct fx *f = *state;
	struct kt_cgwatch *w;
	const char *both[2];

	mkd(f, "a");
	mkd(f, "b");
	assert_int_equal(kt_cgwatch_open(&w, 0), 0);
	set1(w, P(f, "a/*"));
	set1(w, P(f, "b/*")); /* a's watch goes */
	assert_int_equal(kt_cgwatch_count(w), 1);
	assert_false(changed(w)); /* our own removal is not a change */
	mkd(f, "a/x");
	assert_false(changed(w));
	mkd(f, "b/x");
	assert_true(changed(w));

	/* Two specs on the same directory share one watch. */
	both[0] = P(f, "a/x*");
	both[1] = P(f, "a/y*");
	assert_int_equal(kt_cgwatch_set(w, both, 2), 0);
	assert_int_equal(kt_cgwatch_count(w), 1);
	mkd(f, "a/y");
	assert_true(changed(w));

	/* A bad entry changes nothing. */
	both[1] = "relative/*";
	assert_int_equal(kt_cgwatch_set(w, both, 2), -EINVAL);
	both[1] = P(f, "a/../b/*");
	assert_int_equal(kt_cgwatch_set(w, both, 2), -EINVAL);
	assert_int_equal(kt_cgwatch_count(w), 1);
	mkd(f, "a/z");
	assert_true(changed(w));

	/* The empty set removes everything. */
	assert_int_equal(kt_cgwatch_set(w, NULL, 0), 0);
	assert_int_equal(kt_cgwatch_count(w), 0);
	mkd(f, "a/w");
	assert_false(changed(w));
	kt_cgwatch_close(w);
}

static void test_cap(void **state)
{
	struct fx *f = *state;
	struct kt_cgwatch *w;
	const char *v[1];
	char rel[32];

	mkd(f, "c");
	for (int i = 0; i < 10; i++) {
		snprintf(rel, sizeof(rel), "c/d%d", i);
		mkd(f, rel);
	}
	assert_int_equal(kt_cgwatch_open(&w, 4), 0);
	v[0] = P(f, "c/*/x");
	assert_int_equal(kt_cgwatch_set(w, v, 1), -E2BIG); /* c + 10 */
	assert_int_equal(kt_cgwatch_count(w), 4);
	/* Shallow first: the literal prefix is among the kept watches. */
	mkd(f, "c/new");
	assert_true(changed(w));
	/* Below the cap again, it is 0 and the extra watches go. */
	v[0] = P(f, "c/x*");
	assert_int_equal(kt_cgwatch_set(w, v, 1), 0);
	assert_int_equal(kt_cgwatch_count(w), 1);
	kt_cgwatch_close(w);

	/* The default cap, for real. */
	for (int i = 10; i < KT_CGWATCH_MAX + 1; i++) {
		snprintf(rel, sizeof(rel), "c/d%d", i);
		mkd(f, rel);
	}
	assert_int_equal(kt_cgwatch_open(&w, 0), 0);
	v[0] = P(f, "c/*/x");
	assert_int_equal(kt_cgwatch_set(w, v, 1), -E2BIG);
	assert_int_equal(kt_cgwatch_count(w), KT_CGWATCH_MAX);
	kt_cgwatch_close(w);
}

/* Lost events (a full queue) must mean "rescan", even though only files,
 * which alone are never reported, filled it. */
static void test_overflow(void **state)
{
	struct fx *f = *state;
	struct kt_cgwatch *w;
	long max = 0;
	FILE *q = fopen("/proc/sys/fs/inotify/max_queued_events", "r");
	char rel[32];

	if (!q || fscanf(q, "%ld", &max) != 1 || max <= 0 || max > 100000) {
		if (q)
			fclose(q);
		skip(); /* a huge queue would make this slow */
	}
	fclose(q);
	mkd(f, "o");
	assert_int_equal(kt_cgwatch_open(&w, 0), 0);
	set1(w, P(f, "o/*"));
	touch(f, "o/first");
	assert_false(changed(w));
	for (long i = 0; i <= max; i++) {
		snprintf(rel, sizeof(rel), "o/f%ld", i);
		touch(f, rel);
	}
	assert_true(changed(w));
	assert_false(changed(w));
	kt_cgwatch_close(w);
}

/* a test with the per-test setup and teardown */
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_is_pattern),
		T(test_glob),
		T(test_glob_symlink_not_descended),
		T(test_glob_systemd_escape),
		T(test_glob_long_path),
		T(test_long_paths),
		cmocka_unit_test(test_open_flags),
		T(test_watch_pattern),
		T(test_watch_nested),
		T(test_watch_plain_missing),
		T(test_set_replaces),
		T(test_cap),
		T(test_overflow),
	};
	return cmocka_run_group_tests_name("cgwatch", tests, NULL, NULL);
}
