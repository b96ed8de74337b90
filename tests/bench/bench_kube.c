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
 */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kube/kubewatch.h"
#include "kube/pods.h"
#include "bench.h"

static char *pod_json(int i)
{
	char *s = NULL;

	if (asprintf(&s,
		     "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"web-%d\","
		     "\"namespace\":\"shop\",\"uid\":\"aaaa0000-0000-4000-8000-%012x\","
		     "\"resourceVersion\":\"%d\",\"creationTimestamp\":\"2026-11-25T00:00:00Z\","
		     "\"labels\":{\"app\":\"web\",\"tier\":\"frontend\"}},"
		     "\"spec\":{\"nodeName\":\"node-a\",\"containers\":[{\"name\":\"main\","
		     "\"image\":\"busybox\"}]},\"status\":{\"phase\":\"Running\","
		     "\"qosClass\":\"Burstable\"}}",
		     i, (unsigned)i, i + 1) < 0)
		return NULL;
	return s;
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
	return 0;
}
