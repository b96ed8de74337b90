// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The layers of user/ point one way (docs/ARCHITECTURE.md, "Layers"): every
 * `#include "LAYER/NAME.h"` in a layer's files names its own layer or one
 * the table lets it use, and kernel takes only policy.h from pool. Includes
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
	{ "pool", "base" },
	{ "members", "base kube" },
	{ "kernel", "base members pool/policy.h" },
	{ "tags", "base kernel pool" },
	{ "control", "*" },
	{ "bin", "*" },
};

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
			print_error("user/%s/%s includes %s/%s: layer %s may include only: %s\n", l->name,
				    fname, dir, file, l->name, *l->may ? l->may : "nothing of user/");
			bad++;
		}
	}
	return bad;
}

static void test_includes_point_one_way(void **state)
{
	char root[PATH_MAX], path[PATH_MAX + 300];
	int files = 0, bad = 0;

	(void)state;
	src_dir(root, sizeof(root));
	for (size_t i = 0; i < sizeof(layers) / sizeof(layers[0]); i++) {
		struct dirent *e;
		DIR *d;

		snprintf(path, sizeof(path), "%s/user/%s", root, layers[i].name);
		d = opendir(path);
		if (!d)
			fail_msg("cannot open %s (set KT_SRCDIR to the source tree)", path);
		while ((e = readdir(d))) {
			size_t n = strlen(e->d_name);
			char *text;

			if (n < 3 || (strcmp(e->d_name + n - 2, ".c") && strcmp(e->d_name + n - 2, ".h")))
				continue;
			snprintf(path, sizeof(path), "%s/user/%s/%s", root, layers[i].name, e->d_name);
			text = ktest_slurp(path);
			assert_non_null(text);
			bad += check_text(&layers[i], e->d_name, text);
			files++;
			free(text);
		}
		closedir(d);
	}
	print_message("%d files of user/ read\n", files);
	assert_true(files > 50);
	assert_int_equal(bad, 0);
}

/* The check itself finds an include against the table. */
static void test_a_wrong_include_is_found(void **state)
{
	(void)state;
	assert_int_equal(check_text(&layers[2], "x.c", "#include \"kernel/apply.h\"\n"), 1);
	assert_int_equal(check_text(&layers[4], "x.c", "#include \"pool/store.h\"\n"), 1);
	assert_int_equal(check_text(&layers[4], "x.c", "#include \"pool/policy.h\"\n"), 0);
	assert_int_equal(check_text(&layers[0], "x.c", "#include \"base/log.h\"\n#include <stdio.h>\n"),
			 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_includes_point_one_way),
		cmocka_unit_test(test_a_wrong_include_is_found),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
