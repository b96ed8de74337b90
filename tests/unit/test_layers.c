// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The layers of user/ point one way (docs/ARCHITECTURE.md, "Layers"): every
 * `#include "LAYER/NAME.h"` in a layer's files names its own layer or one
 * the table lets it use, kernel takes only policy.h from pool, and
 * libkthrottle only base/cgroup.h of user/. Includes
 * name their layer, so this reads them as written. The source tree is
 * $KT_SRCDIR, else the parent of the build dir. */
#include <dirent.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ktest.h"

struct layer {
	const char *name;
	const char *may; /* layers it may include, space-separated; "*": any */
};

/* as docs/ARCHITECTURE.md's table */
static const struct layer layers[] = {
	{ "base", "" },
	{ "kube", "base" },
	{ "store", "base" },
	{ "pool", "base store" },
	{ "members", "base kube" },
	{ "kernel", "base members pool/policy.h" },
	{ "tags", "base kernel store" },
	{ "control", "*" },
	{ "bin", "*" },
};

/* libkthrottle (outside user/, linked into applications) takes one header
 * of the daemon's tree: the cgroup id lookup */
static const struct layer libkthrottle = { "libkthrottle", "base/cgroup.h" };

static const struct layer *layer_named(const char *name)
{
	for (size_t i = 0; i < sizeof(layers) / sizeof(layers[0]); i++)
		if (!strcmp(layers[i].name, name))
			return &layers[i];
	fail_msg("no layer %s", name);
	return NULL;
}

static void src_dir(char *out, size_t len)
{
	const char *env = getenv("KT_SRCDIR");

	if (env)
		snprintf(out, len, "%s", env);
	else
		snprintf(out, len, "%s/..", ktest_build_dir());
}

/* May a file of `l` include "<dir>/<file>"? */
static bool allowed(const struct layer *l, const char *dir, const char *file)
{
	char want[96], tok[96];
	const char *p = l->may;
	int n;

	if (!strcmp(l->may, "*") || !strcmp(dir, l->name))
		return true;
	snprintf(want, sizeof(want), "%s/%s", dir, file);
	while (sscanf(p, "%95s%n", tok, &n) == 1) {
		if (!strcmp(tok, dir) || !strcmp(tok, want))
			return true;
		p += n;
	}
	return false;
}

/* Violations in one file's text; each printed. */
static int check_text(const struct layer *l, const char *fname, const char *text)
{
	const char *p = text;
	int bad = 0;

	while ((p = strstr(p, "#include \""))) {
		char dir[64], file[64];

		p += strlen("#include \"");
		if (sscanf(p, "%63[a-z_]/%63[a-z_0-9.]\"", dir, file) == 2 && !allowed(l, dir, file)) {
			print_error("%s%s/%s includes %s/%s: layer %s may include only: %s\n",
				    l == &libkthrottle ? "" : "user/", l->name, fname, dir, file, l->name,
				    *l->may ? l->may : "nothing of user/");
			bad++;
		}
	}
	return bad;
}

/* Every .c and .h of directory dir (under the source tree) checked as
 * layer l; how many files into *files. */
static int check_dir(const struct layer *l, const char *root, const char *dir, int *files)
{
	char path[PATH_MAX + 300];
	struct dirent *e;
	int bad = 0;
	DIR *d;

	snprintf(path, sizeof(path), "%s/%s", root, dir);
	d = opendir(path);
	if (!d)
		fail_msg("cannot open %s (set KT_SRCDIR to the source tree)", path);
	while ((e = readdir(d))) {
		size_t n = strlen(e->d_name);
		char *text;

		if (n < 3 || (strcmp(e->d_name + n - 2, ".c") && strcmp(e->d_name + n - 2, ".h")))
			continue;
		snprintf(path, sizeof(path), "%s/%s/%s", root, dir, e->d_name);
		text = ktest_slurp(path);
		assert_non_null(text);
		bad += check_text(l, e->d_name, text);
		(*files)++;
		free(text);
	}
	closedir(d);
	return bad;
}

static void test_includes_point_one_way(void **state)
{
	char root[PATH_MAX], dir[64];
	int files = 0, lib_files = 0, bad = 0;

	(void)state;
	src_dir(root, sizeof(root));
	for (size_t i = 0; i < sizeof(layers) / sizeof(layers[0]); i++) {
		snprintf(dir, sizeof(dir), "user/%s", layers[i].name);
		bad += check_dir(&layers[i], root, dir, &files);
	}
	bad += check_dir(&libkthrottle, root, "libkthrottle", &lib_files);
	print_message("%d files of user/ and %d of libkthrottle/ read\n", files, lib_files);
	assert_true(files > 50);
	assert_true(lib_files > 3);
	assert_int_equal(bad, 0);
}

/* The check itself finds an include against the table. */
static void test_a_wrong_include_is_found(void **state)
{
	(void)state;
	assert_int_equal(check_text(layer_named("pool"), "x.c", "#include \"kernel/apply.h\"\n"), 1);
	assert_int_equal(check_text(layer_named("kernel"), "x.c", "#include \"store/store.h\"\n"), 1);
	assert_int_equal(check_text(layer_named("kernel"), "x.c", "#include \"pool/policy.h\"\n"), 0);
	assert_int_equal(check_text(layer_named("store"), "x.c", "#include \"pool/pool.h\"\n"), 1);
	assert_int_equal(check_text(layer_named("tags"), "x.c", "#include \"pool/pool.h\"\n"), 1);
	assert_int_equal(check_text(layer_named("base"), "x.c", "#include \"base/log.h\"\n#include <stdio.h>\n"),
			 0);
	assert_int_equal(check_text(&libkthrottle, "x.c", "#include \"base/cgroup.h\"\n"), 0);
	assert_int_equal(check_text(&libkthrottle, "x.c", "#include \"base/log.h\"\n"), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_includes_point_one_way),
		cmocka_unit_test(test_a_wrong_include_is_found),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
