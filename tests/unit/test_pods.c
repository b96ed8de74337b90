// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The pure parts of pod selection: the pods: and kubernetes: config blocks
 * (with their one-line errors), label selector semantics as Kubernetes
 * defines them, the kubelet's cgroup directory names under both drivers,
 * decoding a Pod object as the API sends it, the watcher's selectors (which
 * pods it keeps) and its options from the in-cluster environment. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/config.h"
#include "kube/kubewatch.h"
#include "kube/pods.h"

#define HEAD "limits:\n  - name: a\n    unit: connection\n    rateLimit: {max: 10}\n"

static int parse(const char *yaml, struct kt_config *cfg, char *err)
{
	return kt_config_parse("t.yaml", yaml, strlen(yaml), cfg, err, KT_ERR_LEN);
}

static void test_config_pods(void **state)
{
	struct kt_config cfg;
	char err[KT_ERR_LEN];
	const struct kt_pod_selector *ps;

	(void)state;
	assert_int_equal(parse(HEAD "    pods:\n"
				    "      namespace: workers\n"
				    "      labels: {app: crawler, example.com/tier: \"\"}\n"
				    "      matchExpressions:\n"
				    "        - {key: zone, operator: NotIn, values: [a, b]}\n"
				    "        - {key: canary, operator: DoesNotExist}\n",
			       &cfg, err),
			 0);
	ps = &cfg.limits[0].pods;
	assert_true(ps->set);
	assert_int_equal(cfg.limits[0].n_cgroups, 0);
	assert_string_equal(ps->namespace, "workers");
	assert_int_equal(ps->n_reqs, 4);
	assert_string_equal(ps->reqs[0].key, "app");
	assert_int_equal(ps->reqs[0].op, KT_LABEL_IN);
	assert_string_equal(ps->reqs[0].values[0], "crawler");
	assert_string_equal(ps->reqs[1].key, "example.com/tier");
	assert_string_equal(ps->reqs[1].values[0], "");
	assert_int_equal(ps->reqs[2].op, KT_LABEL_NOT_IN);
	assert_int_equal(ps->reqs[2].n_values, 2);
	assert_int_equal(ps->reqs[3].op, KT_LABEL_DOES_NOT_EXIST);
	assert_true(kt_config_uses_pods(&cfg));
	kt_config_free(&cfg);

	/* cgroups and pods mixed; neither is an error */
	assert_int_equal(parse(HEAD "    cgroups: [x]\n    pods: {}\n", &cfg, err), 0);
	assert_true(cfg.limits[0].pods.set && cfg.limits[0].n_cgroups == 1);
	kt_config_free(&cfg);
	assert_int_equal(parse(HEAD, &cfg, err), -EINVAL);
	assert_string_equal(err, "t.yaml:2: limits[0].cgroups: required but missing (or give pods:)");
}

static void test_config_pods_errors(void **state)
{
	static const struct {
		const char *yaml, *err;
	} cases[] = {
		{ HEAD "    pods: {namespace: Workers}\n",
		  "t.yaml:5: limits[0].pods.namespace: \"Workers\" is not a namespace name (1..63 of a-z 0-9 -, starting and ending alphanumeric)" },
		{ HEAD "    pods: {labels: {\"-app\": x}}\n",
		  "t.yaml:5: limits[0].pods.labels: \"-app\" is not a label key ([prefix/]name: name 1..63 of A-Z a-z 0-9 . _ -, starting and ending alphanumeric)" },
		{ HEAD "    pods: {labels: {app: \"a b\"}}\n",
		  "t.yaml:5: limits[0].pods.labels.app: \"a b\" is not a label value (0..63 of A-Z a-z 0-9 . _ -, starting and ending alphanumeric)" },
		{ HEAD "    pods: {labels: [app]}\n",
		  "t.yaml:5: limits[0].pods.labels: expected a mapping of label keys to values, got a list" },
		{ HEAD "    pods: {matchExpressions: [{key: a, operator: In}]}\n",
		  "t.yaml:5: limits[0].pods.matchExpressions[0].values: required for operator In" },
		{ HEAD "    pods: {matchExpressions: [{key: a, operator: Exists, values: [x]}]}\n",
		  "t.yaml:5: limits[0].pods.matchExpressions[0].values: must be empty for operator Exists" },
		{ HEAD "    pods: {matchExpressions: [{key: a, operator: in, values: [x]}]}\n",
		  "t.yaml:5: limits[0].pods.matchExpressions[0].operator: \"in\" is not one of: In, NotIn, Exists, DoesNotExist" },
		{ HEAD "    pods: {matchLabels: {a: b}}\n",
		  "t.yaml:5: limits[0].pods.matchLabels: unknown key (expected one of: namespace, labels, matchExpressions)" },
		{ "kubernetes: {apiServer: \"http://10.0.0.1\"}\n" HEAD "    pods: {}\n",
		  "t.yaml:1: kubernetes.apiServer: \"http://10.0.0.1\" is not an https:// URL" },
		{ "kubernetes: {tokenFile: token}\n" HEAD "    pods: {}\n",
		  "t.yaml:1: kubernetes.tokenFile: \"token\" must be an absolute path" },
		{ "kubernetes: {nodeName: Node_A}\n" HEAD "    pods: {}\n",
		  "t.yaml:1: kubernetes.nodeName: \"Node_A\" is not a node name" },
		{ "kubernetes: {cgroupRoot: ../x}\n" HEAD "    pods: {}\n",
		  "t.yaml:1: kubernetes.cgroupRoot: \"../x\" must not contain '..'" },
	};
	struct kt_config cfg;
	char err[KT_ERR_LEN];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(parse(cases[i].yaml, &cfg, err), -EINVAL);
		if (strcmp(err, cases[i].err))
			print_message("case %zu: got  %s\n          want %s\n", i, err, cases[i].err);
		assert_string_equal(err, cases[i].err);
	}
}

static struct kt_pod pod(const char *ns, const char *labels)
{
	struct kt_pod p = { .uid = "0123abcd-0000-4000-8000-00000000beef", .name = "p",
			    .qos = "Burstable" };
	char buf[256], *save = NULL;

	snprintf(p.ns, sizeof(p.ns), "%s", ns);
	snprintf(buf, sizeof(buf), "%s", labels);
	for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(kv, '=');

		*eq = '\0';
		assert_int_equal(kt_pod_add_label(&p, kv, eq + 1), 0);
	}
	return p;
}

static bool selects(const char *sel_yaml, const char *ns, const char *labels)
{
	char yaml[1024], err[KT_ERR_LEN];
	struct kt_config cfg;
	struct kt_pod p = pod(ns, labels);
	bool r;

	snprintf(yaml, sizeof(yaml), HEAD "    pods: %s\n", sel_yaml);
	assert_int_equal(parse(yaml, &cfg, err), 0);
	r = kt_pod_selected(&cfg.limits[0].pods, &p);
	kt_config_free(&cfg);
	kt_pod_free_labels(&p);
	return r;
}

static void test_selector_semantics(void **state)
{
	(void)state;
	assert_true(selects("{}", "any", ""));
	assert_true(selects("{namespace: w}", "w", "a=1"));
	assert_false(selects("{namespace: w}", "x", "a=1"));
	assert_true(selects("{labels: {a: \"1\"}}", "w", "a=1,b=2"));
	assert_false(selects("{labels: {a: \"1\"}}", "w", "a=2"));
	assert_false(selects("{labels: {a: \"1\", b: \"2\"}}", "w", "a=1"));
	assert_true(selects("{labels: {a: \"\"}}", "w", "a="));
	assert_false(selects("{labels: {a: \"\"}}", "w", "b="));
	/* In: present with one of the values; NotIn: absent or none of them */
	assert_true(selects("{matchExpressions: [{key: z, operator: In, values: [a, b]}]}", "w", "z=b"));
	assert_false(selects("{matchExpressions: [{key: z, operator: In, values: [a, b]}]}", "w", ""));
	assert_true(selects("{matchExpressions: [{key: z, operator: NotIn, values: [a]}]}", "w", ""));
	assert_true(selects("{matchExpressions: [{key: z, operator: NotIn, values: [a]}]}", "w", "z=c"));
	assert_false(selects("{matchExpressions: [{key: z, operator: NotIn, values: [a]}]}", "w", "z=a"));
	assert_true(selects("{matchExpressions: [{key: z, operator: Exists}]}", "w", "z="));
	assert_false(selects("{matchExpressions: [{key: z, operator: Exists}]}", "w", "y=1"));
	assert_true(selects("{matchExpressions: [{key: z, operator: DoesNotExist}]}", "w", "y=1"));
	assert_false(selects("{matchExpressions: [{key: z, operator: DoesNotExist}]}", "w", "z=1"));
	/* labels and expressions together: all must hold */
	assert_false(selects("{labels: {a: \"1\"}, matchExpressions: [{key: c, operator: DoesNotExist}]}",
			     "w", "a=1,c=x"));
}

static void test_cgroup_paths(void **state)
{
	char paths[6][PATH_MAX];
	struct kt_pod p = { .uid = "0123abcd-0000-4000-8000-00000000beef" };

	(void)state;
	strcpy(p.qos, "Burstable");
	assert_int_equal(kt_pod_cgroup_paths(NULL, &p, paths, 6), 2);
	assert_string_equal(paths[0], "kubepods.slice/kubepods-burstable.slice/"
				      "kubepods-burstable-pod0123abcd_0000_4000_8000_00000000beef.slice");
	assert_string_equal(paths[1], "kubepods/burstable/pod0123abcd-0000-4000-8000-00000000beef");
	strcpy(p.qos, "Guaranteed");
	assert_int_equal(kt_pod_cgroup_paths("/node/root/", &p, paths, 6), 2);
	assert_string_equal(paths[0], "node/root/kubepods.slice/kubepods-pod0123abcd_0000_4000_8000_00000000beef.slice");
	assert_string_equal(paths[1], "node/root/kubepods/pod0123abcd-0000-4000-8000-00000000beef");
	strcpy(p.qos, "BestEffort");
	assert_int_equal(kt_pod_cgroup_paths("r", &p, paths, 6), 2);
	assert_string_equal(paths[1], "r/kubepods/besteffort/pod0123abcd-0000-4000-8000-00000000beef");
	/* no class yet: every class */
	p.qos[0] = '\0';
	assert_int_equal(kt_pod_cgroup_paths(NULL, &p, paths, 6), 6);
	/* every pod cgroup is a child of one of the kubelet's tier
	 * directories: those pending.c charges for a pod not known yet */
	char tiers[KT_POD_TIER_DIRS][PATH_MAX];
	assert_int_equal(kt_pod_tier_dirs("/node/root/", tiers), KT_POD_TIER_DIRS);
	assert_string_equal(tiers[0], "node/root/kubepods.slice");
	assert_string_equal(tiers[2], "node/root/kubepods.slice/kubepods-besteffort.slice");
	assert_string_equal(tiers[4], "node/root/kubepods/burstable");
	assert_int_equal(kt_pod_tier_dirs(NULL, tiers), KT_POD_TIER_DIRS);
	assert_string_equal(tiers[3], "kubepods");
	assert_int_equal(kt_pod_cgroup_paths("/node/root/", &p, paths, 6), 6);
	for (int k = 0; k < 6; k++) {
		bool child = false;

		assert_int_equal(kt_pod_tier_dirs("/node/root/", tiers), KT_POD_TIER_DIRS);
		*strrchr(paths[k], '/') = '\0';
		for (int t = 0; t < KT_POD_TIER_DIRS; t++)
			child |= !strcmp(paths[k], tiers[t]);
		assert_true(child);
	}
	/* the uid goes into a path: only a UID is accepted */
	strcpy(p.uid, "../../etc");
	assert_int_equal(kt_pod_cgroup_paths(NULL, &p, paths, 6), -EINVAL);
	assert_false(kt_pod_uid_ok("0123ABCD-0000-4000-8000-00000000beef"));
	assert_false(kt_pod_uid_ok("0123abcd-0000-4000-8000-00000000beef0"));
	assert_true(kt_pod_uid_ok("0123abcd-0000-4000-8000-00000000beef"));
}

static void test_parse_pod(void **state)
{
	struct kt_pod p;
	char node[254], why[256];

	(void)state;
	assert_int_equal(kt_kube_parse_pod(
				 "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"c-1\","
				 "\"namespace\":\"w\",\"uid\":\"0123abcd-0000-4000-8000-00000000beef\","
				 "\"resourceVersion\":\"7\",\"labels\":{\"app\":\"c\",\"x/y\":\"\"},"
				 "\"annotations\":{\"kthrottle.io/weight\":\"3\",\"kthrottle.io/n\":7,"
				 "\"kubectl.kubernetes.io/last-applied-configuration\":\"{...}\"}},"
				 "\"spec\":{\"nodeName\":\"node-a\",\"containers\":[]},"
				 "\"status\":{\"phase\":\"Running\",\"qosClass\":\"Guaranteed\"}}",
				 &p, node, sizeof(node), why, sizeof(why)),
			 0);
	assert_string_equal(p.ns, "w");
	assert_string_equal(p.name, "c-1");
	assert_string_equal(p.qos, "Guaranteed");
	assert_string_equal(node, "node-a");
	assert_string_equal(kt_pod_label(&p, "app"), "c");
	assert_string_equal(kt_pod_label(&p, "x/y"), "");
	assert_null(kt_pod_label(&p, "none"));
	/* annotations: only kthrottle.io/ ones that are strings are kept */
	assert_int_equal(p.n_annots, 1);
	assert_string_equal(kt_pod_annotation(&p, "kthrottle.io/weight"), "3");
	assert_null(kt_pod_annotation(&p, "kthrottle.io/n"));
	assert_null(kt_pod_annotation(&p, "kubectl.kubernetes.io/last-applied-configuration"));
	assert_null(kt_pod_label(&p, "kthrottle.io/weight"));
	kt_pod_free_labels(&p);

	/* unscheduled, no class yet, no labels: fine */
	assert_int_equal(kt_kube_parse_pod("{\"metadata\":{\"name\":\"n\",\"namespace\":\"w\","
					   "\"uid\":\"0123abcd-0000-4000-8000-00000000beef\"}}",
					   &p, node, sizeof(node), why, sizeof(why)),
			 0);
	assert_string_equal(node, "");
	assert_string_equal(p.qos, "");
	/* malformed objects are refused with a reason */
	assert_int_equal(kt_kube_parse_pod("[1]", &p, node, sizeof(node), why, sizeof(why)), -EINVAL);
	assert_int_equal(kt_kube_parse_pod("{\"metadata\":{\"name\":\"n\",\"namespace\":\"w\","
					   "\"uid\":\"../x\"}}",
					   &p, node, sizeof(node), why, sizeof(why)),
			 -EINVAL);
	assert_string_equal(why, "metadata.uid missing or not a UID");
	assert_int_equal(kt_kube_parse_pod("{\"metadata\":{\"name\":\"n\",\"namespace\":\"w\","
					   "\"uid\":\"0123abcd-0000-4000-8000-00000000beef\","
					   "\"labels\":{\"a\":1}}}",
					   &p, node, sizeof(node), why, sizeof(why)),
			 -EINVAL);
	assert_string_equal(why, "pod w/n: label a is not a string");
	assert_int_equal(kt_kube_parse_pod("not json", &p, node, sizeof(node), why, sizeof(why)),
			 -EINVAL);
}

static void test_pod_set(void **state)
{
	struct kt_pod_set s = { 0 }, c = { 0 };
	struct kt_pod a = pod("w", "k=1"), b = pod("w", "k=2");

	(void)state;
	strcpy(b.uid, "0123abcd-0000-4000-8000-00000000ffff");
	assert_int_equal(kt_pod_add_annotation(&a, "kthrottle.io/weight", "2"), 0);
	assert_int_equal(kt_pod_set_put(&s, &a), 0);
	assert_int_equal(kt_pod_set_put(&s, &b), 0);
	assert_int_equal(kt_pod_set_put(&s, &b), 0); /* same uid: replaced */
	assert_int_equal(s.n, 2);
	s.synced = true; /* listed: the copy says so too */
	assert_int_equal(kt_pod_set_copy(&c, &s), 0);
	assert_true(c.synced);
	assert_true(kt_pod_set_remove(&s, a.uid));
	assert_false(kt_pod_set_remove(&s, a.uid));
	assert_int_equal(s.n, 1);
	/* the copy is deep */
	assert_string_equal(kt_pod_label(kt_pod_set_find(&c, a.uid), "k"), "1");
	assert_string_equal(kt_pod_annotation(kt_pod_set_find(&c, a.uid), "kthrottle.io/weight"), "2");
	for (int i = 0; i < KT_POD_MAX_ANNOTATIONS - 1; i++) {
		char k[32];

		snprintf(k, sizeof(k), "kthrottle.io/a%d", i);
		assert_int_equal(kt_pod_add_annotation(&b, k, "v"), 0);
	}
	assert_int_equal(kt_pod_add_annotation(&b, "kthrottle.io/one-more", "v"), 0);
	assert_int_equal(kt_pod_add_annotation(&b, "kthrottle.io/too-many", "v"), -E2BIG);
	kt_pod_set_clear(&s);
	kt_pod_set_clear(&c);
	kt_pod_free_labels(&a);
	kt_pod_free_labels(&b);
}

/* A Pod object as the API sends it, on node-a. */
static const char *pod_json(char *buf, size_t len, const char *ns, const char *labels_json)
{
	snprintf(buf, len,
		 "{\"metadata\":{\"name\":\"n\",\"namespace\":\"%s\","
		 "\"uid\":\"0123abcd-0000-4000-8000-00000000beef\",\"labels\":%s},"
		 "\"spec\":{\"nodeName\":\"node-a\"},\"status\":{\"qosClass\":\"Burstable\"}}",
		 ns, labels_json);
	return buf;
}

/* The watcher's predicate: a pod is kept when some limit's selector picks
 * it, decided on the object before it is decoded; the options carry the
 * selectors, so a change of them is a change of the options. */
static void test_watcher_selectors(void **state)
{
	struct kt_config cfg, wide;
	struct kt_kube_opts o = { 0 }, w = { 0 }, c = { 0 }, none = { 0 };
	char err[KT_ERR_LEN], j[512];

	(void)state;
	assert_int_equal(parse("limits:\n"
			       "  - {name: a, unit: connection, rateLimit: {max: 10},\n"
			       "     pods: {namespace: workers, labels: {app: crawler},\n"
			       "            matchExpressions: [{key: canary, operator: DoesNotExist}]}}\n"
			       "  - {name: b, unit: datagram, rateLimit: {max: 10},\n"
			       "     pods: {namespace: workers, labels: {app: crawler},\n"
			       "            matchExpressions: [{key: canary, operator: DoesNotExist}]}}\n"
			       "  - {name: c, unit: connection, rateLimit: {max: 10}, cgroups: [x]}\n",
			       &cfg, err),
			 0);
	assert_int_equal(kt_kube_opts_selectors(&o, &cfg), 0);
	assert_int_equal(o.n_sels, 1); /* the same selector twice, once */
	kt_config_free(&cfg);          /* the options own their copies */
	assert_int_equal(kt_kube_pod_kept(&o, pod_json(j, sizeof(j), "workers", "{\"app\":\"crawler\"}")), 1);
	assert_int_equal(kt_kube_pod_kept(&o, pod_json(j, sizeof(j), "workers", "{\"app\":\"idle\"}")), 0);
	assert_int_equal(kt_kube_pod_kept(&o, pod_json(j, sizeof(j), "other", "{\"app\":\"crawler\"}")), 0);
	assert_int_equal(kt_kube_pod_kept(&o, pod_json(j, sizeof(j), "workers",
						       "{\"app\":\"crawler\",\"canary\":\"1\"}")), 0);
	assert_int_equal(kt_kube_pod_kept(&o, pod_json(j, sizeof(j), "workers", "null")), 0);
	/* a label that is not a string is absent to the predicate (a selected
	 * pod with one is refused when decoded) */
	assert_int_equal(kt_kube_pod_kept(&o, pod_json(j, sizeof(j), "workers", "{\"app\":1}")), 0);
	assert_int_equal(kt_kube_pod_kept(&o, "not json"), -EINVAL);
	/* no selectors (options made by hand): every pod */
	assert_int_equal(kt_kube_pod_kept(&none, pod_json(j, sizeof(j), "x", "{}")), 1);

	/* a wider selector: other options, and the pod is kept */
	assert_int_equal(parse("limits:\n"
			       "  - {name: a, unit: connection, rateLimit: {max: 10},\n"
			       "     pods: {namespace: workers, labels: {app: crawler},\n"
			       "            matchExpressions: [{key: canary, operator: DoesNotExist}]}}\n"
			       "  - {name: d, unit: connection, rateLimit: {max: 10},\n"
			       "     pods: {matchExpressions: [{key: app, operator: In, values: [idle, x]}]}}\n",
			       &wide, err),
			 0);
	assert_int_equal(kt_kube_opts_selectors(&w, &wide), 0);
	kt_config_free(&wide);
	assert_int_equal(w.n_sels, 2);
	assert_false(kt_kube_opts_equal(&o, &w));
	assert_int_equal(kt_kube_pod_kept(&w, pod_json(j, sizeof(j), "other", "{\"app\":\"idle\"}")), 1);
	assert_int_equal(kt_kube_pod_kept(&w, pod_json(j, sizeof(j), "other", "{\"app\":\"y\"}")), 0);
	/* a copy is equal, and deep */
	assert_int_equal(kt_kube_opts_copy(&c, &w), 0);
	assert_true(kt_kube_opts_equal(&c, &w));
	assert_ptr_not_equal(c.sels[1].reqs[0].values[0], w.sels[1].reqs[0].values[0]);
	kt_kube_opts_free(&w);
	assert_int_equal(kt_kube_pod_kept(&c, pod_json(j, sizeof(j), "other", "{\"app\":\"x\"}")), 1);
	/* only the node differs: not equal either */
	snprintf(w.node_name, sizeof(w.node_name), "other");
	assert_int_equal(kt_kube_opts_copy(&w, &c), 0);
	assert_true(kt_kube_opts_equal(&w, &c));
	snprintf(w.node_name, sizeof(w.node_name), "other");
	assert_false(kt_kube_opts_equal(&w, &c));
	kt_kube_opts_free(&w);
	kt_kube_opts_free(&c);
	kt_kube_opts_free(&o);
}

/* The unselected pods: uid and QoS only; a uid is selected or not, never
 * both; each has its cgroup directories. */
static void test_pod_set_others(void **state)
{
	struct kt_pod_set s = { 0 }, c = { 0 };
	struct kt_pod a = pod("w", "k=1");
	struct kt_pod_ref r = { "0123abcd-0000-4000-8000-00000000beef", "Guaranteed" };
	const char *u2 = "0123abcd-0000-4000-8000-000000000002";
	char paths[6][PATH_MAX];

	(void)state;
	assert_int_equal(kt_pod_set_put(&s, &a), 0);
	/* relabelled out: moved to the others */
	assert_int_equal(kt_pod_set_put_other(&s, a.uid, "Burstable"), 1);
	assert_int_equal(s.n, 0);
	assert_int_equal(s.n_others, 1);
	assert_int_equal(kt_pod_set_put_other(&s, a.uid, "Burstable"), 0); /* no change */
	assert_int_equal(kt_pod_set_put_other(&s, a.uid, "Guaranteed"), 1);
	assert_string_equal(s.others[0].qos, "Guaranteed");
	/* a list's: appended as served, duplicates dropped after */
	assert_int_equal(kt_pod_set_append_other(&s, u2, ""), 0);
	assert_int_equal(kt_pod_set_append_other(&s, u2, ""), 0);
	assert_int_equal(kt_pod_set_append_other(&s, a.uid, "Guaranteed"), 0);
	kt_pod_set_dedup_others(&s);
	assert_int_equal(s.n_others, 2);
	/* a uid a list served selected and unselected (it was relabelled
	 * between two pages): the selected one stays */
	assert_int_equal(kt_pod_set_put(&s, &a), 0);
	kt_pod_set_dedup_others(&s);
	assert_int_equal(s.n_others, 1);
	assert_string_equal(s.others[0].uid, u2);
	assert_true(kt_pod_set_remove(&s, a.uid));
	assert_int_equal(kt_pod_set_append_other(&s, a.uid, "Guaranteed"), 0);
	assert_int_equal(s.n_others, 2);
	assert_int_equal(kt_pod_set_copy(&c, &s), 0);
	assert_int_equal(c.n_others, 2);
	/* deleted or moved away: removed from either list */
	assert_true(kt_pod_set_remove(&s, u2));
	assert_false(kt_pod_set_remove(&s, u2));
	assert_int_equal(s.n_others, 1);
	/* relabelled in: the watcher removes it from the others, then puts it */
	assert_true(kt_pod_set_remove_other(&s, a.uid));
	assert_int_equal(s.n_others, 0);
	/* an unselected pod's directories are a selected one's */
	assert_int_equal(kt_pod_ref_cgroup_paths("", &r, paths, 6), 2);
	assert_string_equal(paths[0], "kubepods.slice/kubepods-pod0123abcd_0000_4000_8000_00000000beef.slice");
	assert_string_equal(paths[1], "kubepods/pod0123abcd-0000-4000-8000-00000000beef");
	kt_pod_set_clear(&s);
	kt_pod_set_clear(&c);
	kt_pod_free_labels(&a);
}

static void test_in_cluster_options(void **state)
{
	struct kt_kube_cfg k = { 0 };
	struct kt_kube_opts o;
	char err[KT_ERR_LEN];

	(void)state;
	unsetenv("KUBERNETES_SERVICE_HOST");
	unsetenv("NODE_NAME");
	assert_int_equal(kt_kube_resolve_opts(&k, &o, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "kubernetes: apiServer not given and KUBERNETES_SERVICE_HOST is not set (not running in a pod?)");
	setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
	setenv("KUBERNETES_SERVICE_PORT", "6443", 1);
	assert_int_equal(kt_kube_resolve_opts(&k, &o, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "kubernetes: nodeName not given and NODE_NAME is not set (the DaemonSet sets it from spec.nodeName)");
	setenv("NODE_NAME", "worker-3", 1);
	assert_int_equal(kt_kube_resolve_opts(&k, &o, err, sizeof(err)), 0);
	assert_string_equal(o.api_server, "https://[fd00::1]:6443");
	assert_string_equal(o.node_name, "worker-3");
	assert_string_equal(o.token_file, KT_KUBE_SA_DIR "/token");
	assert_string_equal(o.ca_file, KT_KUBE_SA_DIR "/ca.crt");
	setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1/evil", 1);
	assert_int_equal(kt_kube_resolve_opts(&k, &o, err, sizeof(err)), -EINVAL);
	/* the block wins over the environment */
	k.api_server = "https://api.example:443/";
	k.node_name = "n1";
	assert_int_equal(kt_kube_resolve_opts(&k, &o, err, sizeof(err)), 0);
	assert_string_equal(o.api_server, "https://api.example:443");
	assert_string_equal(o.node_name, "n1");
	unsetenv("KUBERNETES_SERVICE_HOST");
	unsetenv("KUBERNETES_SERVICE_PORT");
	unsetenv("NODE_NAME");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_config_pods),
		cmocka_unit_test(test_config_pods_errors),
		cmocka_unit_test(test_selector_semantics),
		cmocka_unit_test(test_cgroup_paths),
		cmocka_unit_test(test_parse_pod),
		cmocka_unit_test(test_pod_set),
		cmocka_unit_test(test_watcher_selectors),
		cmocka_unit_test(test_pod_set_others),
		cmocka_unit_test(test_in_cluster_options),
	};

	return cmocka_run_group_tests_name("unit_pods", tests, NULL, NULL);
}
