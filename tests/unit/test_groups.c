// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* groupBy (user/members/groups.c): instance names, the group of a pod or a
 * cgroup path, the groups seen over time (ttl, maxGroups and the other
 * pool) and the expanded config (instances, parents renumbered). */
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
#include "kube/pods.h"
#include "members/globcache.h"
#include "members/groups.h"

#define SEC 1000000000ULL

static void parse(const char *yaml, struct kt_config *cfg)
{
	char err[KT_ERR_LEN] = "";
	int ret = kt_config_parse("g.yaml", yaml, strlen(yaml), cfg, err, sizeof(err));

	if (ret)
		print_message("%s\n", err);
	assert_int_equal(ret, 0);
}

static void add_pod(struct kt_pod_set *s, const char *ns, const char *name, const char *team)
{
	struct kt_pod p;

	memset(&p, 0, sizeof(p));
	snprintf(p.ns, sizeof(p.ns), "%s", ns);
	snprintf(p.name, sizeof(p.name), "%s", name);
	snprintf(p.uid, sizeof(p.uid), "%08x-aaaa-4bbb-8ccc-000000000000", (unsigned)s->n + 1);
	if (team)
		assert_int_equal(kt_pod_add_label(&p, "team", team), 0);
	assert_int_equal(kt_pod_set_put(s, &p), 0);
	kt_pod_free_labels(&p);
}

static void test_instance_names(void **state)
{
	char out[KT_NAME_LEN], other[KT_NAME_LEN], again[KT_NAME_LEN];

	(void)state;
	kt_group_instance_name("api", "team-a", out);
	assert_string_equal(out, "api@team-a");
	kt_group_instance_name("api", NULL, out);
	assert_string_equal(out, "api@@other");
	/* too long, or a character outside the alphabet: prefix, "@@", hash */
	kt_group_instance_name("api", "a-namespace-name-that-is-far-too-long", out);
	assert_int_equal(strlen(out), 3 + 2 + 12);
	assert_memory_equal(out, "api@@", 5);
	assert_int_equal(strspn(out + 5, "0123456789abcdef"), 12);
	kt_group_instance_name("api", "a-namespace-name-that-is-far-too-long", again);
	assert_string_equal(out, again); /* every node names it alike */
	kt_group_instance_name("api", "a-namespace-name-that-is-far-too-lonG", again);
	assert_string_not_equal(out, again);
	kt_group_instance_name("api", "with space", out);
	assert_memory_equal(out, "api@@", 5);
	/* long templates sharing a prefix still differ, other pools too */
	kt_group_instance_name("a-very-long-template-name-1", NULL, out);
	kt_group_instance_name("a-very-long-template-name-2", NULL, other);
	assert_int_equal(strlen(out), KT_NAME_LEN - 1);
	assert_string_not_equal(out, other);
	assert_memory_equal(out, "a-very-long-templ@@", 19);
}

static void test_path_value(void **state)
{
	char v[64];

	(void)state;
	assert_true(kt_group_path_value("/sys/fs/cgroup/t/acme/w1", 1, v, sizeof(v)));
	assert_string_equal(v, "acme");
	assert_true(kt_group_path_value("/t/acme/w1/", 1, v, sizeof(v)));
	assert_string_equal(v, "acme");
	assert_false(kt_group_path_value("/w1", 1, v, sizeof(v)));
	assert_false(kt_group_path_value("/t/a-long-parent-name/w1", 1, v, 8));
	/* capture: the component that many levels up */
	assert_true(kt_group_path_value("/c/acme/jobs/w1", 2, v, sizeof(v)));
	assert_string_equal(v, "acme");
	assert_true(kt_group_path_value("/c/acme/jobs/w1", 0, v, sizeof(v)));
	assert_string_equal(v, "w1");
	assert_true(kt_group_path_value("/c/acme/jobs/w1", 3, v, sizeof(v)));
	assert_string_equal(v, "c");
	assert_false(kt_group_path_value("/c/acme/jobs/w1", 4, v, sizeof(v)));
}

/* Namespaces seen, a fourth appearing, one going after ttl; an instance
 * takes its own namespace's pods only. */
static void test_namespaces_over_time(void **state)
{
	struct kt_config src, run;
	struct kt_groups *g;
	struct kt_pod_set pods = { 0 };

	(void)state;
	parse("limits:\n"
	      "  - {name: all, cgroups: x, unit: datagram, rateLimit: {max: 100}}\n"
	      "  - {name: ns, pods: {}, groupBy: namespace, parent: all, unit: datagram,\n"
	      "     rateLimit: {max: 10, ttl: 5s}}\n"
	      "  - {name: z, cgroups: y, unit: datagram, parent: all, rateLimit: {max: 1}}\n",
	      &src);
	add_pod(&pods, "b", "p1", NULL);
	add_pod(&pods, "a", "p2", NULL);
	add_pod(&pods, "a", "p3", NULL);
	assert_int_equal(kt_groups_new(&g), 0);
	assert_int_equal(kt_groups_observe(g, &src, NULL, &pods, 10 * SEC), 1);
	assert_int_equal(kt_groups_expand(g, &src, &run), 0);
	assert_ptr_equal(run.source, &src);
	assert_int_equal(run.n_limits, 4);
	assert_string_equal(run.limits[0].name, "all");
	assert_string_equal(run.limits[1].name, "ns@a");
	assert_string_equal(run.limits[2].name, "ns@b");
	assert_string_equal(run.limits[3].name, "z");
	assert_int_equal(run.limits[1].group_of, 2);
	assert_string_equal(run.limits[2].group_value, "b");
	/* parents renumbered into the expanded config */
	assert_int_equal(kt_cfg_parent(&run.limits[1]), 0);
	assert_int_equal(kt_cfg_parent(&run.limits[2]), 0);
	assert_int_equal(kt_cfg_parent(&run.limits[3]), 0);
	assert_true(kt_group_takes(&run.limits[1], kt_group_pod_value(&run.limits[1], &pods.pods[1])));
	assert_false(kt_group_takes(&run.limits[1], kt_group_pod_value(&run.limits[1], &pods.pods[0])));
	assert_true(kt_group_takes(&run.limits[0], NULL)); /* no instance: everything */
	assert_int_equal(kt_groups_count(g, "ns", NULL), 2);
	kt_config_free(&run);

	/* nothing new: no change */
	assert_int_equal(kt_groups_observe(g, &src, NULL, &pods, 11 * SEC), 0);
	assert_int_equal(kt_groups_next_expiry(g), UINT64_MAX);
	/* b's pod gone: b stays for its ttl, then goes */
	assert_true(kt_pod_set_remove(&pods, pods.pods[0].uid));
	add_pod(&pods, "c", "p4", NULL);
	assert_int_equal(kt_groups_observe(g, &src, NULL, &pods, 12 * SEC), 1);
	assert_int_equal(kt_groups_expand(g, &src, &run), 0);
	assert_int_equal(run.n_limits, 5); /* a, b (ttl), c */
	kt_config_free(&run);
	/* absent from 12 s (it may have had its pod until then), ttl 5 s */
	assert_int_equal(kt_groups_next_expiry(g), 17 * SEC);
	assert_int_equal(kt_groups_observe(g, &src, NULL, &pods, 16 * SEC), 0);
	assert_int_equal(kt_groups_observe(g, &src, NULL, &pods, 17 * SEC), 1);
	assert_int_equal(kt_groups_expand(g, &src, &run), 0);
	assert_int_equal(run.n_limits, 4);
	assert_string_equal(run.limits[1].name, "ns@a");
	assert_string_equal(run.limits[2].name, "ns@c");
	kt_config_free(&run);
	kt_groups_free(g);
	kt_pod_set_clear(&pods);
	kt_config_free(&src);
}

/* Past maxGroups the other values share one pool, which takes every value
 * none of the others names; a pod without the label is in no group. */
static void test_max_groups_and_other(void **state)
{
	struct kt_config src, run;
	struct kt_groups *g;
	struct kt_pod_set pods = { 0 };
	bool other;

	(void)state;
	parse("limits:\n"
	      "  - {name: t, pods: {}, groupBy: label:team, maxGroups: 2, unit: datagram,\n"
	      "     rateLimit: {max: 10}}\n",
	      &src);
	add_pod(&pods, "x", "p1", "red");
	add_pod(&pods, "x", "p2", "blue");
	add_pod(&pods, "x", "p3", "green");
	add_pod(&pods, "x", "p4", NULL);
	assert_int_equal(kt_groups_new(&g), 0);
	assert_int_equal(kt_groups_observe(g, &src, NULL, &pods, SEC), 1);
	assert_int_equal(kt_groups_count(g, "t", &other), 2);
	assert_true(other);
	assert_int_equal(kt_groups_expand(g, &src, &run), 0);
	assert_int_equal(run.n_limits, 3);
	/* the first two values in order take their own pools */
	assert_string_equal(run.limits[0].name, "t@blue");
	assert_string_equal(run.limits[1].name, "t@green");
	assert_string_equal(run.limits[2].name, "t@@other");
	assert_true(run.limits[2].group_other);
	assert_true(kt_group_takes(&run.limits[2], "red"));
	assert_true(kt_group_takes(&run.limits[2], "yellow"));
	assert_false(kt_group_takes(&run.limits[2], "blue"));
	assert_false(kt_group_takes(&run.limits[2], NULL));
	assert_false(kt_group_takes(&run.limits[0], kt_group_pod_value(&run.limits[0], &pods.pods[3])));
	kt_config_free(&run);
	kt_groups_free(g);
	kt_pod_set_clear(&pods);
	kt_config_free(&src);
}

/* A template the new config no longer has is forgotten. */
static void test_template_removed(void **state)
{
	struct kt_config a, b, run;
	struct kt_groups *g;
	struct kt_pod_set pods = { 0 };

	(void)state;
	parse("limits:\n  - {name: t, pods: {}, groupBy: namespace, unit: datagram, rateLimit: {max: 1}}\n",
	      &a);
	parse("limits:\n  - {name: u, cgroups: x, unit: datagram, rateLimit: {max: 1}}\n", &b);
	add_pod(&pods, "x", "p1", NULL);
	assert_int_equal(kt_groups_new(&g), 0);
	assert_int_equal(kt_groups_observe(g, &a, NULL, &pods, SEC), 1);
	assert_int_equal(kt_groups_expand(g, &a, &run), 0);
	kt_config_free(&run);
	assert_int_equal(kt_groups_observe(g, &b, NULL, &pods, 2 * SEC), 1);
	assert_int_equal(kt_groups_count(g, "t", NULL), -1);
	assert_int_equal(kt_groups_expand(g, &b, &run), 0);
	assert_int_equal(run.n_limits, 1);
	assert_string_equal(run.limits[0].name, "u");
	kt_config_free(&run);
	kt_groups_free(g);
	kt_pod_set_clear(&pods);
	kt_config_free(&a);
	kt_config_free(&b);
}

/* The glob cache: each pattern expanded once, and its matches found by
 * their own name or their parent's through an index. */
static void test_glob_cache_index(void **state)
{
	char dir[] = "/tmp/kt-groups-XXXXXX", path[256], pattern[256];
	static const char *const rel[] = { "a", "a/x", "a/y", "b", "b/x", "c" };
	struct kt_glob_cache *c = kt_glob_cache_new();
	char **paths, **again;
	const struct kt_glob_key *idx;
	int n;

	(void)state;
	assert_non_null(c);
	assert_non_null(mkdtemp(dir));
	for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, rel[i]);
		assert_int_equal(mkdir(path, 0755), 0);
	}
	snprintf(pattern, sizeof(pattern), "%s/*/*", dir);
	n = kt_glob_cached(c, pattern, &paths);
	assert_int_equal(n, 3);
	assert_int_equal(kt_glob_cached(c, pattern, &again), 3);
	assert_ptr_equal(again, paths); /* once */
	assert_int_equal(kt_glob_cached_by(c, pattern, KT_GLOB_BY_PARENT, "a", &idx), 2);
	assert_non_null(strstr(paths[idx[0].idx], "/a/"));
	assert_non_null(strstr(paths[idx[1].idx], "/a/"));
	assert_int_equal(kt_glob_cached_by(c, pattern, KT_GLOB_BY_PARENT, "b", &idx), 1);
	assert_non_null(strstr(paths[idx[0].idx], "/b/x"));
	assert_int_equal(kt_glob_cached_by(c, pattern, KT_GLOB_BY_PARENT, "c", &idx), 0);
	assert_int_equal(kt_glob_cached_by(c, pattern, KT_GLOB_BY_NAME, "x", &idx), 2);
	assert_int_equal(kt_glob_cached_by(c, pattern, KT_GLOB_BY_NAME, "y", &idx), 1);
	assert_int_equal(kt_glob_cached_by(c, pattern, KT_GLOB_BY_NAME, "", &idx), 0);
	kt_glob_cache_free(c);
	for (int i = (int)(sizeof(rel) / sizeof(rel[0])) - 1; i >= 0; i--) {
		snprintf(path, sizeof(path), "%s/%s", dir, rel[i]);
		rmdir(path);
	}
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_instance_names),
		cmocka_unit_test(test_path_value),
		cmocka_unit_test(test_namespaces_over_time),
		cmocka_unit_test(test_max_groups_and_other),
		cmocka_unit_test(test_template_removed),
		cmocka_unit_test(test_glob_cache_index),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
