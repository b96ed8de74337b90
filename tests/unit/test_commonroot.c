// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* kt_plan_common_root: the deepest common ancestor of what the limits
 * select (plain paths, the static part of patterns, the pods' cgroup
 * root), walked up to a directory that exists. A temporary directory
 * stands in for the cgroup v2 mount: the function is lexical plus stat. */
#include <errno.h>
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

#include "base/config.h"
#include "members/resolve.h"

static char mnt[PATH_MAX];

static int setup(void **state)
{
	static const char *const dirs[] = { "a", "a/b", "a/b/c", "a/bc", "a/d", "k8s", "k8s/kubepods.slice" };
	char p[PATH_MAX * 2];

	(void)state;
	snprintf(mnt, sizeof(mnt), "/tmp/kt-commonroot-XXXXXX");
	if (!mkdtemp(mnt))
		return -1;
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", mnt, dirs[i]);
		if (mkdir(p, 0755) < 0)
			return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	char cmd[PATH_MAX + 16];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", mnt);
	return system(cmd) ? -1 : 0;
}

/* The common root of a config whose limits are `limits` (YAML list items),
 * relative to mnt ("" = mnt itself); NULL when the call fails. */
static const char *root_of(const char *limits, const char *kube, int *ret)
{
	static char out[PATH_MAX], rel[PATH_MAX];
	char yaml[4096], err[KT_ERR_LEN];
	struct kt_config cfg;
	size_t n = strlen(mnt);

	snprintf(yaml, sizeof(yaml), "%slimits:\n%s", kube ? kube : "", limits);
	assert_int_equal(kt_config_parse("t.yaml", yaml, strlen(yaml), &cfg, err, sizeof(err)), 0);
	*ret = kt_plan_common_root(&cfg, mnt, out, sizeof(out));
	kt_config_free(&cfg);
	if (*ret)
		return NULL;
	if (strncmp(out, mnt, n))
		return out; /* outside: returned as is */
	snprintf(rel, sizeof(rel), "%s", out[n] == '/' ? out + n + 1 : out + n);
	return rel;
}

#define L(name, cg) "  - name: " name "\n    cgroups: " cg "\n    unit: connection\n    rateLimit: {max: 1}\n"
#define POD(name) "  - name: " name "\n    pods: {namespace: default}\n    unit: connection\n    rateLimit: {max: 1}\n"
#define REQ(name) "  - name: " name "\n    unit: request\n    rateLimit: {max: 1}\n"

static void test_paths(void **state)
{
	int ret;

	(void)state;
	/* one cgroup: itself */
	assert_string_equal(root_of(L("x", "[a/b/c]"), NULL, &ret), "a/b/c");
	/* siblings: their parent, on component boundaries (a/b and a/bc share a) */
	assert_string_equal(root_of(L("x", "[a/b/c, a/d]"), NULL, &ret), "a");
	assert_string_equal(root_of(L("x", "[a/b]") L("y", "[a/bc]"), NULL, &ret), "a");
	/* one inside another: the outer */
	assert_string_equal(root_of(L("x", "[a/b/c]") L("y", "[a/b]"), NULL, &ret), "a/b");
	assert_string_equal(root_of(L("x", "[a/b]") L("y", "[a/b/c]"), NULL, &ret), "a/b");
	/* spelled differently: absolute, doubled slashes, "." */
	{
		char lim[PATH_MAX * 2];

		snprintf(lim, sizeof(lim), L("x", "[\"%s//a/./b/c/\"]") L("y", "[a/b/c]"), mnt);
		assert_string_equal(root_of(lim, NULL, &ret), "a/b/c");
	}
	/* not created yet: its nearest existing ancestor */
	assert_string_equal(root_of(L("x", "[a/b/new/deeper]"), NULL, &ret), "a/b");
	/* nothing in common below the mount: the mount */
	assert_string_equal(root_of(L("x", "[a]") L("y", "[k8s]"), NULL, &ret), "");
}

static void test_patterns(void **state)
{
	int ret;

	(void)state;
	/* the static directory before the first wildcard component */
	assert_string_equal(root_of(L("x", "[\"a/b/pod-*\"]"), NULL, &ret), "a/b");
	assert_string_equal(root_of(L("x", "[\"a/*/c\"]"), NULL, &ret), "a");
	assert_string_equal(root_of(L("x", "[\"a/b?/x\"]"), NULL, &ret), "a");
	assert_string_equal(root_of(L("x", "[\"a/b/pod-*\", a/b/c]"), NULL, &ret), "a/b");
	assert_string_equal(root_of(L("x", "[\"a/b/pod-*\", a/d]"), NULL, &ret), "a");
}

static void test_pods(void **state)
{
	int ret;

	(void)state;
	/* the pods' cgroup root: the kubelet's kubepods.slice under
	 * kubernetes.cgroupRoot (under the mount, a leading / or not) */
	assert_string_equal(root_of(POD("p"), "kubernetes: {cgroupRoot: k8s}\n", &ret),
			    "k8s/kubepods.slice");
	assert_string_equal(root_of(POD("p"), "kubernetes: {cgroupRoot: /k8s}\n", &ret),
			    "k8s/kubepods.slice");
	/* no kubepods[.slice] there: cgroupRoot itself */
	assert_string_equal(root_of(POD("p"), "kubernetes: {cgroupRoot: a}\n", &ret), "a");
	/* no cgroupRoot, no kubepods at the mount: the mount */
	assert_string_equal(root_of(POD("p"), NULL, &ret), "");
	assert_string_equal(root_of(POD("p") L("x", "[k8s/kubepods.slice]"),
				    "kubernetes: {cgroupRoot: k8s}\n", &ret),
			    "k8s/kubepods.slice");
	/* both layouts: their parent */
	{
		char p[PATH_MAX * 2];

		snprintf(p, sizeof(p), "%s/k8s/kubepods", mnt);
		assert_int_equal(mkdir(p, 0755), 0);
		assert_string_equal(root_of(POD("p"), "kubernetes: {cgroupRoot: k8s}\n", &ret),
				    "k8s");
		rmdir(p);
	}
	/* cooperative limits select no cgroup */
	assert_string_equal(root_of(REQ("r") L("x", "[a/d]"), NULL, &ret), "a/d");
	assert_null(root_of(REQ("r"), NULL, &ret));
	assert_int_equal(ret, -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_paths),
		cmocka_unit_test(test_patterns),
		cmocka_unit_test(test_pods),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
