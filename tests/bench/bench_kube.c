/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * `make bench`'s pods section (tests/bench/bench.c runs it):
 *   kube   what one pod of a list costs the Kubernetes watcher, for lists of
 *          100, 1,000 and 10,000 pods of this node, in-process: decoding
 *          it (kt_kube_parse_pod, json-c) and keeping it (kt_pod_set_put),
 *          the loop's copy of the set (kt_pod_set_copy), and the bytes the
 *          kept set holds (malloc's count, mallinfo2). Pods as
 *          kt-fakekube serves them (two labels, one container), about
 *          450 bytes of JSON each; a real pod object is larger (more to
 *          decode), but what is kept is the same few fields.
 *          Then a node of 10,000 pods of which 100 are selected, listed
 *          in pages of 500 through the watcher's own decoding
 *          (kt_kube_decode_list): with the limits' selectors (the other
 *          9,900 kept by uid and QoS alone) and without (every pod kept
 *          whole, as before the watcher had the selectors): µs per pod
 *          and the kept set's bytes.
 */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kube/kubewatch.h"
#include "kube/pods.h"
#include "bench.h"

static char *pod_json_app(int i, const char *app)
{
	char *s = NULL;

	if (asprintf(&s,
		     "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"web-%d\","
		     "\"namespace\":\"shop\",\"uid\":\"aaaa0000-0000-4000-8000-%012x\","
		     "\"resourceVersion\":\"%d\",\"creationTimestamp\":\"2026-11-25T00:00:00Z\","
		     "\"labels\":{\"app\":\"%s\",\"tier\":\"frontend\"}},"
		     "\"spec\":{\"nodeName\":\"node-a\",\"containers\":[{\"name\":\"main\","
		     "\"image\":\"busybox\"}]},\"status\":{\"phase\":\"Running\","
		     "\"qosClass\":\"Burstable\"}}",
		     i, (unsigned)i, i + 1, app) < 0)
		return NULL;
	return s;
}

static char *pod_json(int i)
{
	return pod_json_app(i, "web");
}

/* One list of n pods: µs per pod to decode and keep, to copy; bytes kept
 * per pod. -ENOMEM. */
static int measure(int n, double *keep_us, double *copy_us, double *bytes)
{
	struct kt_pod_set set = { 0 }, copy = { 0 };
	char **json = calloc((size_t)n, sizeof(*json));
	struct mallinfo2 m0, m1;
	uint64_t t0, t1, t2;
	int ret = 0;

	if (!json)
		return -ENOMEM;
	for (int i = 0; i < n; i++)
		if (!(json[i] = pod_json(i)))
			ret = -ENOMEM;
	m0 = mallinfo2();
	t0 = now_ns();
	for (int i = 0; i < n && !ret; i++) {
		char node[254], why[256];
		struct kt_pod p;

		if (kt_kube_parse_pod(json[i], &p, node, sizeof(node), why, sizeof(why))) {
			ret = -EINVAL;
			break;
		}
		if (!strcmp(node, "node-a") && kt_pod_set_put(&set, &p))
			ret = -ENOMEM;
		kt_pod_free_labels(&p);
	}
	t1 = now_ns();
	m1 = mallinfo2();
	if (!ret && kt_pod_set_copy(&copy, &set))
		ret = -ENOMEM;
	t2 = now_ns();
	sanity(ret || set.n == n, "kube: %d of %d pods kept", set.n, n);
	*keep_us = (double)(t1 - t0) / 1e3 / n;
	*copy_us = (double)(t2 - t1) / 1e3 / n;
	*bytes = ((double)m1.uordblks - (double)m0.uordblks) / n;
	kt_pod_set_clear(&copy);
	kt_pod_set_clear(&set);
	for (int i = 0; i < n; i++)
		free(json[i]);
	free(json);
	return ret;
}

#define NODE_PODS 10000
#define NODE_SELECTED 100
#define NODE_PAGE 500

/* The node's list as NODE_PODS / NODE_PAGE PodList pages: every
 * (NODE_PODS / NODE_SELECTED)-th pod app=web, the others app=batch. */
static int node_pages(char **pages)
{
	for (int pg = 0; pg < NODE_PODS / NODE_PAGE; pg++) {
		size_t cap = 1024 + (size_t)NODE_PAGE * 600, len;
		char *b = malloc(cap);

		if (!b)
			return -ENOMEM;
		len = (size_t)snprintf(b, cap, "{\"kind\":\"PodList\",\"metadata\":"
					       "{\"resourceVersion\":\"1\"},\"items\":[");
		for (int j = 0; j < NODE_PAGE; j++) {
			int i = pg * NODE_PAGE + j;
			char *pj = pod_json_app(i, i % (NODE_PODS / NODE_SELECTED) ? "batch" : "web");

			if (!pj || len + strlen(pj) + 4 > cap) {
				free(pj);
				free(b);
				return -ENOMEM;
			}
			len += (size_t)snprintf(b + len, cap - len, "%s%s", j ? "," : "", pj);
			free(pj);
		}
		snprintf(b + len, cap - len, "]}");
		pages[pg] = b;
	}
	return 0;
}

/* One list of the node's pages with options o: µs per pod, bytes kept;
 * kept and others counted. */
static int measure_node(const struct kt_kube_opts *o, char **pages, double *us, double *bytes,
			int *kept, int *others)
{
	struct kt_pod_set set = { 0 };
	unsigned long skipped = 0;
	struct mallinfo2 m0, m1;
	uint64_t t0, t1;
	int ret = 0;

	m0 = mallinfo2();
	t0 = now_ns();
	for (int pg = 0; pg < NODE_PODS / NODE_PAGE && !ret; pg++)
		ret = kt_kube_decode_list(o, pages[pg], &set, &skipped);
	kt_pod_set_dedup_others(&set);
	t1 = now_ns();
	m1 = mallinfo2();
	*us = (double)(t1 - t0) / 1e3 / NODE_PODS;
	*bytes = (double)m1.uordblks - (double)m0.uordblks;
	*kept = set.n;
	*others = set.n_others;
	sanity(!skipped, "kube: %lu pods skipped", skipped);
	kt_pod_set_clear(&set);
	return ret;
}

/* The node of NODE_PODS, NODE_SELECTED selected: with and without the
 * selectors. */
static int bench_node(void)
{
	char *pages[NODE_PODS / NODE_PAGE] = { 0 };
	char *vals[] = { "web" };
	struct kt_pod_selector sel = { .set = true, .namespace = "shop", .n_reqs = 1 };
	struct kt_kube_opts with = { .node_name = "node-a", .sels = &sel, .n_sels = 1 };
	struct kt_kube_opts without = { .node_name = "node-a" };
	int ret = node_pages(pages);

	sel.reqs[0] = (struct kt_label_req){ .key = "app", .op = KT_LABEL_IN, .n_values = 1 };
	sel.reqs[0].values[0] = vals[0];
	for (int w = 0; w < 2 && !ret; w++) {
		const int rounds = g_quick ? 3 : 5;
		double us[5], bytes = 0;
		int kept = 0, others = 0;
		char what[200], val[64];

		for (int r = 0; r < rounds && !ret; r++)
			ret = measure_node(w ? &without : &with, pages, &us[r], &bytes, &kept, &others);
		if (ret)
			break;
		sanity(w ? kept == NODE_PODS : kept == NODE_SELECTED && others == NODE_PODS - kept,
		       "kube: %d kept, %d others", kept, others);
		snprintf(what, sizeof(what), "kube: a node of %d pods, %d selected, %s: list decode + keep, per pod",
			 NODE_PODS, NODE_SELECTED, w ? "every pod kept whole (no selectors)" : "with the selectors");
		snprintf(val, sizeof(val), "%.2f µs", median(us, rounds));
		row_text(what, val, NULL, 0);
		snprintf(what, sizeof(what), "kube: a node of %d pods, %d selected, %s: the set's memory",
			 NODE_PODS, NODE_SELECTED, w ? "every pod kept whole (no selectors)" : "with the selectors");
		snprintf(val, sizeof(val), "%.0f kB", bytes / 1024);
		row_text(what, val, NULL, 0);
	}
	for (int pg = 0; pg < NODE_PODS / NODE_PAGE; pg++)
		free(pages[pg]);
	return ret;
}

int bench_kube(struct bench_env *e)
{
	static const int sizes[] = { 100, 1000, 10000 };

	(void)e;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		double keep[5], copy[5], bytes = 0;
		const int rounds = g_quick ? 3 : 5;
		char what[160], val[64];
		int ret;

		for (int r = 0; r < rounds; r++)
			if ((ret = measure(sizes[i], &keep[r], &copy[r], &bytes)))
				return ret;
		snprintf(what, sizeof(what), "kube: a list of %d pods, decode + keep, per pod", sizes[i]);
		snprintf(val, sizeof(val), "%.2f µs", median(keep, rounds));
		row_text(what, val, NULL, 0);
		snprintf(what, sizeof(what), "kube: the loop's copy of %d pods, per pod", sizes[i]);
		snprintf(val, sizeof(val), "%.2f µs", median(copy, rounds));
		row_text(what, val, NULL, 0);
		snprintf(what, sizeof(what), "kube: %d pods kept, memory per pod", sizes[i]);
		snprintf(val, sizeof(val), "%.0f bytes", bytes);
		row_text(what, val, NULL, 0);
	}
	return bench_node();
}
