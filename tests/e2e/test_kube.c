// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Members selected by `pods:` from the Kubernetes API. There is no API
 * server here, so tests/tools/kt-fakekube stands in for one: the real list
 * and watch wire format over TLS (a CA and certificate made here with the
 * openssl CLI) with a bearer token, chunked watch streams, BOOKMARK, 410
 * Gone and disconnects, driven line by line from the test.
 *
 * The pods' cgroups are real directories in the kubelet's layouts (systemd
 * driver, and cgroupfs for one pod) under a test cgroup given to the
 * daemon as kubernetes.cgroupRoot. What is asserted is what a user sees:
 * datagrams from a selected pod's cgroup refused (EBUSY) at the configured
 * rate, measured by kt-load; status listing the member found by pods with
 * its namespace/name; and the changes: pods added (the directory created
 * after the API lists the pod, as the kubelet does), removed, relabelled,
 * moved to another node, and the API going away (the last set kept, and
 * said) and coming back, expiring the watch (410: relist) or dropping it.
 *
 * The token and CA are given as a pod sees them: a service-account volume
 * laid out by tests/lib/kvol as the kubelet does (symlinks through ..data,
 * a read-only view), rotated mid-run; one test keeps plain files, as on a
 * host. Also: the API's refusals (401 after a rotation, 429/503 with
 * Retry-After, a Status message spanning lines) as status shows them; and
 * a `call` limit on a selected pod, its HTTP calls bounded at a real
 * server (test_pod_calls). */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <cmocka.h>
#include <curl/curl.h>

#include "fakekube.h"
#include "kt_httpfx.h"
#include "ktest.h"
#include "kvol.h"
#include "redis_proc.h"

#define RATE 20.0
#define BURST 5.0
#define NODE "node-a"
/* a membership change is applied within a tick of the event reaching the
 * daemon; this allows for the watch stream and a loaded 2-core machine */
#define CHANGE_BOUND_MS 1000
#define TOKEN "t0ken-for-tests"
#define BACKOFF_MAX_MS 8000 /* kubewatch.c's cap, Retry-After included */

struct pod {
	const char *ns, *name, *uid, *qos; /* qos as the API spells it */
	bool cgroupfs;                     /* the cgroupfs driver's layout */
};

static const struct pod CRAWLER1 = { "workers", "crawler-1", "11111111-aaaa-4bbb-8ccc-000000000001",
				     "Burstable" };
static const struct pod CRAWLER2 = { "workers", "crawler-2", "22222222-aaaa-4bbb-8ccc-000000000002",
				     "Guaranteed" };
static const struct pod OTHER = { "workers", "indexer-1", "33333333-aaaa-4bbb-8ccc-000000000003",
				  "BestEffort" };
static const struct pod ELSEWHERE = { "workers", "crawler-9", "44444444-aaaa-4bbb-8ccc-000000000004",
				      "Burstable" };
static const struct pod WRONGNS = { "default", "crawler-5", "55555555-aaaa-4bbb-8ccc-000000000005",
				    "Burstable" };
static const struct pod FSDRIVER = { "workers", "crawler-6", "66666666-aaaa-4bbb-8ccc-000000000006",
				     "BestEffort", true };

#define MAX_DIRS 32

static struct fixture {
	struct ktest_daemon d;
	char dir[PATH_MAX];    /* certificates, token */
	struct ktest_kvol sa;  /* the service-account volume */
	char token_path[PATH_MAX], ca_path[PATH_MAX]; /* what the daemon is given */
	char base[PATH_MAX];   /* the test's cgroup: the kubelet's cgroup root */
	char dirs[MAX_DIRS][PATH_MAX]; /* made under base, in creation order */
	int n_dirs;
	struct ktest_fakekube api;
	int udp_port;          /* nothing listens: kt-load counts sends */
	struct kt_httpfx_server server; /* test_pod_calls */
	pid_t client;
	struct rp_proc redis;  /* test_pod_weights */
} fx;

/* ---- the fake API server ------------------------------------------------- */

static void api_start(void)
{
	assert_int_equal(ktest_fakekube_start(&fx.api, fx.dir, TOKEN), 0);
}

/* One command; the reply must be "ok". */
__attribute__((format(printf, 1, 2))) static void api(const char *fmt, ...)
{
	char line[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	assert_int_equal(ktest_fakekube_cmd(&fx.api, "%s", line), 0);
}

/* The server's stats: lists answered, requests refused with 401. */
static void api_stats(int *lists, int *unauthorized)
{
	char line[256];
	int watches, open, failed;

	assert_int_equal(ktest_fakekube_query(&fx.api, "stats", line, sizeof(line)), 0);
	assert_int_equal(sscanf(line, "lists=%d watches=%d open=%d unauthorized=%d failed=%d", lists,
				&watches, &open, unauthorized, &failed),
			 5);
}

/* Watch streams the server holds open right now. */
static int api_open_watches(void)
{
	char line[256];
	int lists, watches, open, unauthorized, failed;

	assert_int_equal(ktest_fakekube_query(&fx.api, "stats", line, sizeof(line)), 0);
	assert_int_equal(sscanf(line, "lists=%d watches=%d open=%d unauthorized=%d failed=%d", &lists,
				&watches, &open, &unauthorized, &failed),
			 5);
	return open;
}

/* The daemon reports "watching" once its list is in, a moment before its
 * watch request reaches the server: a test that times the next request
 * waits for the stream first. */
static void wait_watch_open(int bound_ms)
{
	uint64_t t0 = ktest_now_ns();

	while (api_open_watches() < 1) {
		if (ktest_now_ns() - t0 >= (uint64_t)bound_ms * 1000000ull)
			fail_msg("no watch stream open at the server after %d ms", bound_ms);
		ktest_sleep_ms(20);
	}
}

static int api_lists(void)
{
	int lists, unauthorized;

	api_stats(&lists, &unauthorized);
	return lists;
}

/* The arrival times (CLOCK_MONOTONIC ms) of the server's last requests,
 * oldest first; how many. */
static int api_times(unsigned long long *t, int max)
{
	char line[1024], *s, *end;
	int n = 0;

	assert_int_equal(ktest_fakekube_query(&fx.api, "times", line, sizeof(line)), 0);
	assert_memory_equal(line, "times", 5);
	for (s = line + 5; n < max; s = end) {
		t[n] = strtoull(s, &end, 10);
		if (end == s)
			break;
		n++;
	}
	return n;
}

static unsigned long long mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000 + (unsigned long long)ts.tv_nsec / 1000000;
}

/* The delay between the first request the server got after `since` (mono
 * ms) and the next one: the client's retry delay. */
static long retry_gap_ms(unsigned long long since)
{
	unsigned long long t[16];
	int n = api_times(t, 16);

	for (int i = 0; i + 1 < n; i++)
		if (t[i] >= since)
			return (long)(t[i + 1] - t[i]);
	fail_msg("no retry after %llu in the server's times", since);
	return -1;
}

static size_t discard(char *p, size_t size, size_t n, void *ud)
{
	(void)p;
	(void)ud;
	return size * n;
}

/* The HTTP status the server gives a plain pod list with this token. */
static long api_get(const char *token)
{
	char url[128], auth[256], ca[PATH_MAX + 16];
	struct curl_slist *h;
	CURL *e = curl_easy_init();
	long status = 0;

	assert_non_null(e);
	snprintf(url, sizeof(url), "https://127.0.0.1:%d/api/v1/pods", fx.api.port);
	snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
	snprintf(ca, sizeof(ca), "%s/ca.pem", fx.dir);
	h = curl_slist_append(NULL, auth);
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(e, CURLOPT_CAINFO, ca);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 5000L);
	assert_int_equal(curl_easy_perform(e), CURLE_OK);
	curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_cleanup(e);
	curl_slist_free_all(h);
	return status;
}

static void api_add(const struct pod *p, const char *node, const char *labels)
{
	api("add %s %s %s %s %s %s", p->ns, p->name, p->uid, node, p->qos, labels);
}

/* ---- the kubelet's directories --------------------------------------------- */

static void mkdir_once(const char *path)
{
	for (int i = 0; i < fx.n_dirs; i++)
		if (!strcmp(fx.dirs[i], path))
			return;
	assert_true(fx.n_dirs < MAX_DIRS);
	assert_int_equal(mkdir(path, 0755), 0);
	snprintf(fx.dirs[fx.n_dirs++], PATH_MAX, "%s", path);
}

/* The pod's directory as the kubelet names it, written out here by hand
 * (not with the code under test). */
static void pod_dir(const struct pod *p, char *out, size_t len)
{
	char uid_[40], tier[16] = "";

	snprintf(uid_, sizeof(uid_), "%s", p->uid);
	for (char *c = uid_; *c; c++)
		if (*c == '-')
			*c = '_';
	if (!strcmp(p->qos, "Burstable"))
		strcpy(tier, "burstable");
	else if (!strcmp(p->qos, "BestEffort"))
		strcpy(tier, "besteffort");
	if (p->cgroupfs)
		snprintf(out, len, "%s/kubepods%s%s/pod%s", fx.base, tier[0] ? "/" : "", tier, p->uid);
	else if (tier[0])
		snprintf(out, len, "%s/kubepods.slice/kubepods-%s.slice/kubepods-%s-pod%s.slice",
			 fx.base, tier, tier, uid_);
	else
		snprintf(out, len, "%s/kubepods.slice/kubepods-pod%s.slice", fx.base, uid_);
}

/* Creates the pod's directory and its parents. */
static void kubelet_mkdir(const struct pod *p, char *path, size_t len)
{
	char parent[PATH_MAX];

	pod_dir(p, path, len);
	snprintf(parent, sizeof(parent), "%s", path);
	for (char *s = parent + strlen(fx.base) + 1; (s = strchr(s, '/')); s++) {
		*s = '\0';
		mkdir_once(parent);
		*s = '/';
	}
	mkdir_once(path);
}

/* ---- what the daemon shows and does ------------------------------------------ */

/* Whether status lists cgroup `path` as a member found by pods as ns/name. */
static bool member(const struct pod *p)
{
	char path[PATH_MAX];

	pod_dir(p, path, sizeof(path));
	return ktest_kube_member(&fx.d, path, p->ns, p->name);
}

/* Polls until member(p) == want or the bound; the time it took (ms). */
static int wait_member(const struct pod *p, bool want, int bound_ms)
{
	uint64_t t0 = ktest_now_ns();

	while (member(p) != want && ktest_now_ns() - t0 < (uint64_t)bound_ms * 1000000ull)
		ktest_sleep_ms(10);
	assert_true(member(p) == want);
	return (int)((ktest_now_ns() - t0) / 1000000ull);
}

/* The daemon's "kubernetes" status: state and relists. */
static void kube_state(char *state, size_t len, double *relists)
{
	char *st = ktest_daemon_cmd(&fx.d, "status json"), *s;

	assert_non_null(st);
	s = strstr(st, "\"kubernetes\":{");
	assert_non_null(s);
	s = strstr(s, "\"state\":\"");
	assert_non_null(s);
	s += 9;
	snprintf(state, len, "%.*s", (int)strcspn(s, "\""), s);
	assert_true(ktest_json_num(strstr(st, "\"kubernetes\":{"), "relists", relists));
	free(st);
}

static void wait_state(const char *want, int bound_ms)
{
	char state[32] = "";
	double relists;
	uint64_t t0 = ktest_now_ns();

	do {
		kube_state(state, sizeof(state), &relists);
		if (!strcmp(state, want))
			return;
		ktest_sleep_ms(20);
	} while (ktest_now_ns() - t0 < (uint64_t)bound_ms * 1000000ull);
	print_message("kubernetes state %s, wanted %s\n", state, want);
	fail();
}

/* The daemon's kubernetes http_status. */
static long kube_http_status(void)
{
	char *st = ktest_daemon_cmd(&fx.d, "status json");
	double v = -1;

	assert_non_null(st);
	assert_true(ktest_json_num(strstr(st, "\"kubernetes\":{"), "http_status", &v));
	free(st);
	return (long)v;
}

static void wait_http_status(long want, int bound_ms)
{
	uint64_t t0 = ktest_now_ns();
	long got;

	while ((got = kube_http_status()) != want &&
	       ktest_now_ns() - t0 < (uint64_t)bound_ms * 1000000ull)
		ktest_sleep_ms(20);
	if (got != want)
		fail_msg("kubernetes http_status %ld, wanted %ld", got, want);
}

/* The "kubernetes error:" line of the text status ("" when none). */
static void kube_error_line(char *out, size_t len)
{
	char *st = ktest_daemon_cmd(&fx.d, "status"), *s;

	assert_non_null(st);
	s = strstr(st, "kubernetes error: ");
	snprintf(out, len, "%.*s", s ? (int)strcspn(s, "\n") : 0, s ? s : "");
	free(st);
}

/* Sends flat out from the pod's cgroup for 0.5 s: enforced means refused
 * sends and no more admitted than rate x time + burst. */
static void assert_limited(const struct pod *p, bool limited)
{
	char path[PATH_MAX];
	struct ktest_load r;

	pod_dir(p, path, sizeof(path));
	assert_int_equal(ktest_load(path, "udp", "127.0.0.1", fx.udp_port, 0.5, &r), 0);
	print_message("%s/%s: ok %llu refused %llu in %.2f s\n", p->ns, p->name, r.ok, r.refused,
		      r.elapsed);
	if (limited) {
		assert_true(r.refused > 0);
		assert_true(r.ok <= RATE * r.elapsed + BURST + 1);
	} else {
		assert_int_equal(r.refused, 0);
	}
}

/* ---- set-up ----------------------------------------------------------------- */

/* The fake server's certificates, and a plain token file for the host case. */
static int make_certs(void)
{
	char path[PATH_MAX + 16];

	snprintf(path, sizeof(path), "%s/token", fx.dir);
	return ktest_fakekube_certs(fx.dir) || ktest_write_file(path, TOKEN "\n");
}

/* The service-account volume as the kubelet publishes it (the token left
 * out when !token); the daemon is given its files through the pod's view. */
static int sa_publish(bool token)
{
	char path[PATH_MAX + 16], *ca;
	struct ktest_kvol_file files[3];
	int n = 0, ret;

	snprintf(path, sizeof(path), "%s/ca.pem", fx.dir);
	ca = ktest_slurp(path);
	if (!ca || !*ca) {
		free(ca);
		return -1;
	}
	if (token)
		files[n++] = (struct ktest_kvol_file){ "token", TOKEN };
	files[n++] = (struct ktest_kvol_file){ "ca.crt", ca };
	files[n++] = (struct ktest_kvol_file){ "namespace", "workers" };
	ret = ktest_kvol_publish(&fx.sa, files, n);
	free(ca);
	return ret;
}

/* Plain files in an ordinary directory, as on a host. */
static void use_plain_files(void)
{
	snprintf(fx.token_path, sizeof(fx.token_path), "%s/token", fx.dir);
	snprintf(fx.ca_path, sizeof(fx.ca_path), "%s/ca.pem", fx.dir);
}

static int setup(void **state)
{
	(void)state;
	memset(&fx, 0, sizeof(fx));
	fx.d.pid = -1;
	fx.api.pid = -1;
	fx.server.pid = fx.client = -1;
	if (ktest_root_unavailable())
		return 0;
	if (ktest_tmpdir(fx.dir, sizeof(fx.dir)) || make_certs())
		return -1;
	if (ktest_kvol_create(&fx.sa, fx.dir, "serviceaccount", KTEST_KVOL_SECRET) ||
	    sa_publish(true))
		return -1;
	ktest_kvol_path(&fx.sa, "token", fx.token_path, sizeof(fx.token_path));
	ktest_kvol_path(&fx.sa, "ca.crt", fx.ca_path, sizeof(fx.ca_path));
	if (ktest_cgroup_create("kube", fx.base, sizeof(fx.base)))
		return -1;
	fx.udp_port = ktest_free_port(SOCK_DGRAM);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	ktest_kill_wait(&fx.client);
	kt_httpfx_kill(&fx.server);
	if (fx.redis.pid > 0)
		rp_stop(&fx.redis);
	if (fx.d.dir[0])
		ktest_daemon_cleanup(&fx.d);
	ktest_fakekube_stop(&fx.api);
	for (int i = fx.n_dirs - 1; i >= 0; i--)
		ktest_cgroup_destroy(fx.dirs[i]);
	if (fx.base[0])
		ktest_cgroup_destroy(fx.base);
	ktest_kvol_remove(&fx.sa);
	if (fx.dir[0])
		ktest_rmtree(fx.dir);
	return 0;
}

/* The daemon on the fake API (the kubernetes: block) with `limits`, a
 * config's limits: section. */
static void start_daemon_with(const char *limits)
{
	char body[4096];
	const char *root = strrchr(fx.base, '/') + 1; /* ktest cgroups sit at the mount's top */

	snprintf(body, sizeof(body),
		 "kubernetes:\n"
		 "  apiServer: https://127.0.0.1:%d\n"
		 "  tokenFile: %s\n"
		 "  caFile: %s\n"
		 "  nodeName: " NODE "\n"
		 "  cgroupRoot: %s\n"
		 "%s",
		 fx.api.port, fx.token_path, fx.ca_path, root, limits);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
}

/* The daemon: one datagram limit on the crawler pods of namespace workers. */
static void start_daemon(void)
{
	char limits[1024];

	snprintf(limits, sizeof(limits),
		 "limits:\n"
		 "  - name: crawl\n"
		 "    pods:\n"
		 "      namespace: workers\n"
		 "      labels: {app: crawler}\n"
		 "      matchExpressions:\n"
		 "        - {key: canary, operator: DoesNotExist}\n"
		 "    match: {cidrs: [127.0.0.1/32], ports: %d, protocol: udp}\n"
		 "    unit: datagram\n"
		 "    burst: %.0f\n"
		 "    rateLimit: {max: %.0f}\n",
		 fx.udp_port, BURST, RATE);
	start_daemon_with(limits);
}

/* The start most tests share: the API lists CRAWLER1 (app=crawler) on NODE,
 * its directory is made (into path), then the daemon starts. */
static void start_crawler1_only(char *path, size_t len)
{
	api_start();
	api_add(&CRAWLER1, NODE, "app=crawler");
	kubelet_mkdir(&CRAWLER1, path, len);
	start_daemon();
}

/* The fake API with crawler-1 on this node (crawler-2's directory made
 * too), and the daemon watching with crawler-1 a member. */
static void start_with_crawler1(void)
{
	char path[PATH_MAX];

	api_start();
	api_add(&CRAWLER1, NODE, "app=crawler");
	kubelet_mkdir(&CRAWLER1, path, sizeof(path));
	kubelet_mkdir(&CRAWLER2, path, sizeof(path));
	start_daemon();
	assert_true(member(&CRAWLER1));
	wait_state("watching", 2000);
}

/* ---- tests -------------------------------------------------------------------- */

/* The pods on this node that the selector picks are members from the start,
 * under either driver's layout and every QoS class; a pod on another node,
 * in another namespace, without the label or with the excluded label is
 * not, although its directory exists here. Token and CA as plain files. */
static void test_selected_pods_are_members(void **state)
{
	const struct pod canary = { "workers", "crawler-7", "77777777-aaaa-4bbb-8ccc-000000000007",
				    "Burstable" };
	char path[PATH_MAX];
	char *st;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	use_plain_files();
	api_start();
	api_add(&CRAWLER1, NODE, "app=crawler,team=a");
	api_add(&FSDRIVER, NODE, "app=crawler");
	api_add(&OTHER, NODE, "app=indexer");
	api_add(&ELSEWHERE, "node-b", "app=crawler");
	api_add(&WRONGNS, NODE, "app=crawler");
	api_add(&canary, NODE, "app=crawler,canary=yes");
	kubelet_mkdir(&CRAWLER1, path, sizeof(path));
	kubelet_mkdir(&FSDRIVER, path, sizeof(path));
	kubelet_mkdir(&OTHER, path, sizeof(path));
	kubelet_mkdir(&ELSEWHERE, path, sizeof(path));
	kubelet_mkdir(&WRONGNS, path, sizeof(path));
	kubelet_mkdir(&canary, path, sizeof(path));
	start_daemon();

	assert_true(member(&CRAWLER1));
	assert_true(member(&FSDRIVER));
	assert_false(member(&OTHER));
	assert_false(member(&ELSEWHERE));
	assert_false(member(&WRONGNS));
	assert_false(member(&canary));
	assert_limited(&CRAWLER1, true);
	assert_limited(&FSDRIVER, true);
	assert_limited(&OTHER, false);
	/* a cgroup in the kubelet's directories that no pod of this node
	 * accounts for is one whose pod the API has not told of yet: charged
	 * as unclassified, within the node's share */
	assert_limited(&ELSEWHERE, true);

	st = ktest_daemon_cmd(&fx.d, "status");
	assert_non_null(st);
	print_message("%s", st);
	assert_non_null(strstr(st, "(pods workers/crawler-1)"));
	assert_non_null(strstr(st, "kubernetes https://127.0.0.1:"));
	free(st);
	wait_state("watching", 2000);

	/* SIGHUP reloads (the watcher thread takes no signal: one delivered
	 * there would kill the daemon), and the members stay */
	assert_int_equal(kill(fx.d.pid, SIGHUP), 0);
	{
		double reloads = 0;
		uint64_t t0 = ktest_now_ns();

		do {
			ktest_sleep_ms(20);
			st = ktest_daemon_cmd(&fx.d, "status json");
			assert_non_null(st);
			assert_true(ktest_json_num(st, "reloads", &reloads));
			free(st);
		} while (reloads < 1 && ktest_now_ns() - t0 < 2000000000ull);
		assert_true(reloads == 1);
	}
	assert_true(member(&CRAWLER1));
	assert_limited(&CRAWLER1, true);
}

/* Pods added (the directory made after the API lists it), relabelled out
 * and back in, moved to another node and deleted: each change is applied
 * within CHANGE_BOUND_MS and enforcement follows. */
static void test_pods_come_go_and_change(void **state)
{
	char path[PATH_MAX];
	int ms;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_crawler1_only(path, sizeof(path));
	assert_true(member(&CRAWLER1));

	/* listed first, its directory later: it joins when the directory appears */
	api_add(&CRAWLER2, NODE, "app=crawler");
	ktest_sleep_ms(200);
	assert_false(member(&CRAWLER2));
	kubelet_mkdir(&CRAWLER2, path, sizeof(path));
	ms = wait_member(&CRAWLER2, true, CHANGE_BOUND_MS);
	print_message("crawler-2 joined %d ms after its directory appeared\n", ms);
	assert_limited(&CRAWLER2, true);

	/* relabelled out of the selector: it leaves and runs unlimited */
	api("labels %s app=indexer", CRAWLER1.uid);
	ms = wait_member(&CRAWLER1, false, CHANGE_BOUND_MS);
	print_message("crawler-1 left %d ms after its relabel\n", ms);
	assert_limited(&CRAWLER1, false);
	/* and back in */
	api("labels %s app=crawler", CRAWLER1.uid);
	wait_member(&CRAWLER1, true, CHANGE_BOUND_MS);
	assert_limited(&CRAWLER1, true);
	/* a label the expression excludes */
	api("labels %s app=crawler,canary=1", CRAWLER1.uid);
	wait_member(&CRAWLER1, false, CHANGE_BOUND_MS);

	/* scheduled to another node (the field selector drops it) */
	api("move %s node-b", CRAWLER2.uid);
	ms = wait_member(&CRAWLER2, false, CHANGE_BOUND_MS);
	print_message("crawler-2 left %d ms after it moved to node-b\n", ms);
	api("move %s " NODE, CRAWLER2.uid);
	wait_member(&CRAWLER2, true, CHANGE_BOUND_MS);
	/* deleted: a directory the kubelet left behind is no known pod's, so
	 * it is charged as unclassified (the kubelet removes it, with the
	 * pod's processes, before the API deletes the pod) */
	api("delete %s", CRAWLER2.uid);
	wait_member(&CRAWLER2, false, CHANGE_BOUND_MS);
	assert_limited(&CRAWLER2, true);
	/* crawler-1, excluded by its canary label: free, as a known pod no
	 * selector picks */
	assert_limited(&CRAWLER1, false);
}

/* The API going away keeps the last known set (said in status), its return
 * is followed (a pod added while it was down joins), an expired watch (410)
 * is answered by a relist, a dropped stream by a new watch. */
static void test_api_outages(void **state)
{
	char st[32];
	double relists;
	int lists;
	uint64_t t0;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_with_crawler1();

	/* down: the members stay, enforcement goes on, status says so */
	api("down");
	wait_state("unreachable", 3000);
	assert_true(member(&CRAWLER1));
	assert_limited(&CRAWLER1, true);
	kube_state(st, sizeof(st), &relists);
	{
		char *text = ktest_daemon_cmd(&fx.d, "status");

		assert_non_null(text);
		assert_non_null(strstr(text, "unreachable"));
		assert_non_null(strstr(text, "the last known"));
		free(text);
	}

	/* back up, with a pod added meanwhile: found within the back-off */
	api("up");
	api_add(&CRAWLER2, NODE, "app=crawler");
	t0 = ktest_now_ns();
	wait_member(&CRAWLER2, true, 12000);
	print_message("API back: crawler-2 joined after %.2f s\n", (ktest_now_ns() - t0) / 1e9);
	wait_state("watching", 2000);

	/* 410 Gone: the watcher lists again, and the set is still right */
	lists = api_lists();
	api("compact");
	api("delete %s", CRAWLER1.uid);
	wait_member(&CRAWLER1, false, 3000);
	assert_true(api_lists() > lists);
	kube_state(st, sizeof(st), &relists);
	assert_true(relists >= 1);
	/* the same as an HTTP 410 */
	api("gone-http on");
	api("compact");
	api_add(&CRAWLER1, NODE, "app=crawler");
	wait_member(&CRAWLER1, true, 3000);

	/* a dropped stream: the next change still arrives */
	api("drop");
	api("labels %s app=other", CRAWLER2.uid);
	wait_member(&CRAWLER2, false, 3000);
	assert_true(member(&CRAWLER1));
}

/* A wrong CA (a plain file): the watcher cannot verify the server; status
 * says why and no pod is a member, but the daemon runs. */
static void test_untrusted_server(void **state)
{
	char path[PATH_MAX], *st;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	api_start();
	api_add(&CRAWLER1, NODE, "app=crawler");
	kubelet_mkdir(&CRAWLER1, path, sizeof(path));
	use_plain_files();
	/* the CA file now holds the server's own key's CSR-less twin: another CA */
	{
		char cmd[2 * PATH_MAX], *out = NULL;
		char *argv[] = { "/bin/sh", "-c", cmd, NULL };

		snprintf(cmd, sizeof(cmd),
			 "cd '%s' && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
			 "-nodes -keyout other.key -out ca.pem -days 2 -subj /CN=other-ca",
			 fx.dir);
		assert_int_equal(ktest_run_capture(argv, &out), 0);
		free(out);
	}
	start_daemon();
	wait_state("unreachable", 3000);
	assert_false(member(&CRAWLER1));
	st = ktest_daemon_cmd(&fx.d, "status json");
	assert_non_null(st);
	print_message("%.*s\n", 400, strstr(st, "\"kubernetes\""));
	assert_non_null(strstr(st, "certificate"));
	free(st);
}

/* The kubelet rotates the token (the ..data swap) while the API server
 * stops accepting the old one: after the stream breaks, the daemon comes
 * back with the new token and a pod added afterwards joins; the old token
 * is refused. Rotated on the server first, the daemon is refused (401 in
 * status) until the kubelet publishes the new token, then recovers. */
/* `kthrottlectl health [--live]`: its exit status, the reply in out. */
static int health(bool live, char *out, size_t len)
{
	char *reply = NULL;
	int rc = live ? ktest_run_bin("kthrottlectl", &reply, "--socket", fx.d.socket, "health",
				      "--live", (char *)NULL) :
			ktest_run_bin("kthrottlectl", &reply, "--socket", fx.d.socket, "health",
				      (char *)NULL);

	snprintf(out, len, "%s", reply ? reply : "");
	free(reply);
	return rc;
}

static void test_token_rotation(void **state)
{
	char line[512];
	int lists, unauth0, unauth;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_with_crawler1();
	assert_int_equal(api_get(TOKEN), 200);
	/* pods listed: ready */
	assert_int_equal(health(false, line, sizeof(line)), 0);

	assert_int_equal(ktest_kvol_update(&fx.sa, "token", "t0ken-rotated-1"), 0);
	api("token t0ken-rotated-1");
	api_stats(&lists, &unauth0);
	api("drop");
	api_add(&CRAWLER2, NODE, "app=crawler");
	wait_member(&CRAWLER2, true, 3000);
	wait_state("watching", 2000);
	/* the old token is refused; the daemon never sent it again */
	assert_int_equal(api_get(TOKEN), 401);
	assert_int_equal(api_get("t0ken-rotated-1"), 200);
	api_stats(&lists, &unauth);
	assert_int_equal(unauth, unauth0 + 1);

	/* the server first: refused, and said so, until the file follows */
	api("token t0ken-rotated-2");
	api("drop");
	wait_http_status(401, 3000);
	kube_error_line(line, sizeof(line));
	print_message("%s\n", line);
	assert_non_null(strstr(line, "HTTP 401: Unauthorized"));
	assert_true(member(&CRAWLER1) && member(&CRAWLER2)); /* the last set is kept */
	/* refused: not ready at once (no outage bound), but live */
	assert_int_equal(health(false, line, sizeof(line)), 1);
	print_message("health while refused: %s", line);
	assert_non_null(strstr(line, "kubernetes fail the API refuses this daemon (HTTP 401)"));
	assert_int_equal(health(true, line, sizeof(line)), 0);
	assert_int_equal(ktest_kvol_update(&fx.sa, "token", "t0ken-rotated-2"), 0);
	api("delete %s", CRAWLER1.uid);
	wait_member(&CRAWLER1, false, 8000);
	wait_state("watching", 2000);
	assert_int_equal(kube_http_status(), 0);
	assert_true(member(&CRAWLER2));
	assert_int_equal(health(false, line, sizeof(line)), 0);
}

/* The CA is read at every request too: rotated to another CA (and the
 * stream broken), the server is no longer trusted; rotated back, it is. */
static void test_ca_rotation(void **state)
{
	char path[PATH_MAX], cmd[2 * PATH_MAX], line[512], *out = NULL, *good, *other;
	char *argv[] = { "/bin/sh", "-c", cmd, NULL };

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	snprintf(cmd, sizeof(cmd),
		 "cd '%s' && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
		 "-nodes -keyout other.key -out other.pem -days 2 -subj /CN=other-ca",
		 fx.dir);
	assert_int_equal(ktest_run_capture(argv, &out), 0);
	free(out);
	snprintf(path, sizeof(path), "%s/ca.pem", fx.dir);
	good = ktest_slurp(path);
	snprintf(path, sizeof(path), "%s/other.pem", fx.dir);
	other = ktest_slurp(path);
	assert_true(*good && *other);
	start_crawler1_only(path, sizeof(path));
	assert_true(member(&CRAWLER1));
	wait_state("watching", 2000);

	assert_int_equal(ktest_kvol_update(&fx.sa, "ca.crt", other), 0);
	api("drop");
	wait_state("unreachable", 3000);
	kube_error_line(line, sizeof(line));
	print_message("%s\n", line);
	assert_non_null(strstr(line, "certificate"));
	assert_true(member(&CRAWLER1)); /* the last set is kept */

	assert_int_equal(ktest_kvol_update(&fx.sa, "ca.crt", good), 0);
	api("delete %s", CRAWLER1.uid);
	wait_member(&CRAWLER1, false, 8000);
	wait_state("watching", 2000);
	free(good);
	free(other);
}

/* Retry-After on a 503 is waited for (the watch path); one beyond the
 * back-off cap on a 429 is capped at 8 s (the list path, after a 410). */
static void test_retry_after(void **state)
{
	char path[PATH_MAX];
	unsigned long long t0;
	long gap;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_crawler1_only(path, sizeof(path));
	wait_state("watching", 2000);
	wait_watch_open(2000);

	t0 = mono_ms();
	api("fail 503 2 1");
	api("drop");
	wait_http_status(503, 2000);
	wait_state("watching", 5000);
	gap = retry_gap_ms(t0);
	print_message("503 with Retry-After: 2: retried after %ld ms\n", gap);
	assert_true(gap >= 1900);
	assert_true(gap <= 2000 * 11 / 10 + 500);

	wait_watch_open(2000);
	t0 = mono_ms();
	api("fail 429 30 1");
	api("compact"); /* the watch ends with 410: the relist is refused */
	wait_http_status(429, 2000);
	wait_state("watching", BACKOFF_MAX_MS + 3000);
	gap = retry_gap_ms(t0);
	print_message("429 with Retry-After: 30: retried after %ld ms (cap %d)\n", gap,
		      BACKOFF_MAX_MS);
	assert_true(gap >= BACKOFF_MAX_MS - 100);
	assert_true(gap <= BACKOFF_MAX_MS + 500);
	assert_true(member(&CRAWLER1));
}

/* A watch refused with a Status whose message spans lines: status shows
 * the message, on one line, and no JSON. */
static void test_watch_error_one_line(void **state)
{
	char path[PATH_MAX], line[512];

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_crawler1_only(path, sizeof(path));
	wait_state("watching", 2000);

	api("fail 500 -1 3");
	api("drop");
	wait_http_status(500, 2000);
	kube_error_line(line, sizeof(line));
	print_message("%s\n", line);
	assert_non_null(
		strstr(line, "watching pods: HTTP 500: injected failure 500 see the fake server"));
	assert_null(strchr(line, '{'));
	assert_null(strchr(line, '\r'));
	wait_state("watching", 5000);
	assert_true(member(&CRAWLER1));
}

/* The token's name missing from the volume: status names the file and why,
 * no pod joins; once the kubelet publishes it, they do. */
static void test_token_unreadable(void **state)
{
	char path[PATH_MAX], line[512], want[PATH_MAX + 64];

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(sa_publish(false), 0);
	start_crawler1_only(path, sizeof(path));
	wait_state("unreachable", 3000);
	kube_error_line(line, sizeof(line));
	print_message("%s\n", line);
	snprintf(want, sizeof(want), "cannot read token %s: ", fx.token_path);
	assert_non_null(strstr(line, want));
	assert_int_equal(kube_http_status(), 0);
	assert_false(member(&CRAWLER1));
	assert_int_equal(api_lists(), 0);

	assert_int_equal(sa_publish(true), 0);
	wait_member(&CRAWLER1, true, 10000);
	wait_state("watching", 2000);
}

/* Unit call on pods the watcher selects: an unmodified HTTP client
 * (http.client, 4 keep-alive connections flat out) in crawler-1's pod
 * cgroup calls a counting server; every 1 s window at the server stays
 * within max + burst, the limit is kept busy, and no call fails. */
static void test_pod_calls(void **state)
{
	const double max = 20, burst = 5, run_s = 4;
	char body[1024], path[PATH_MAX], url[64], out[PATH_MAX + 16], *cli, *srv;
	double requests, window;

	(void)state;
	KT_HTTPFX_SKIP_UNLESS_READY();
	api_start();
	api_add(&CRAWLER1, NODE, "app=crawler");
	kubelet_mkdir(&CRAWLER1, path, sizeof(path));
	snprintf(body, sizeof(body),
		 "limits:\n"
		 "  - name: llm\n"
		 "    pods: {namespace: workers, labels: {app: crawler}}\n"
		 "    match: {cidrs: [127.0.0.1/32]}\n"
		 "    unit: call\n"
		 "    burst: %.0f\n"
		 "    rateLimit: {max: %.0f}\n",
		 burst, max);
	start_daemon_with(body);
	assert_true(member(&CRAWLER1));
	kt_httpfx_serve(&fx.server, fx.dir, "none");
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/call", fx.server.port);
	snprintf(out, sizeof(out), "%s/client.json", fx.dir);
	fx.client = kt_httpfx_client_spawn(path, "http.client", url, 4, run_s, out);
	cli = kt_httpfx_client_wait(fx.client, out);
	fx.client = -1;
	srv = kt_httpfx_stop(&fx.server);
	requests = kt_httpfx_num(srv, "requests");
	window = kt_httpfx_num(srv, "max_window");
	print_message("pod workers/crawler-1: %.0f calls at the server in %.1f s, worst 1 s window "
		      "%.0f (max + burst %.0f), client ok %.0f errors %.0f p99 %.1f ms\n",
		      requests, run_s, window, max + burst, kt_httpfx_num(cli, "ok"),
		      kt_httpfx_num(cli, "errors"), kt_httpfx_num(cli, "p99_ms"));
	assert_true(kt_httpfx_num(cli, "errors") == 0);
	/* the server timestamps a call after the kernel admitted it: 50 ms
	 * of calls may fall into the next window */
	assert_true(window <= max + burst + 1);
	assert_true(requests >= 0.8 * max * run_s);
	free(cli);
	free(srv);
}

/* A pod's weight in its member's status: *w and where it came from into
 * from (weight_from); false when status does not list the pod. */
static bool pod_weight(const struct pod *p, double *w, char *from, size_t len)
{
	char *st = ktest_daemon_cmd(&fx.d, "status json"), key[300], *m, *f;
	bool ok = false;

	assert_non_null(st);
	snprintf(key, sizeof(key), "kubepods");
	/* the member's object: from its pod's uid in the path to its end */
	{
		char uid_[40];

		snprintf(uid_, sizeof(uid_), "%s", p->uid);
		for (char *c = uid_; *c; c++)
			if (*c == '-')
				*c = '_';
		m = strstr(st, uid_);
	}
	if (m && ktest_json_num(m, "weight", w) && (f = strstr(m, "\"weight_from\":\""))) {
		f += strlen("\"weight_from\":\"");
		snprintf(from, len, "%.*s", (int)strcspn(f, "\""), f);
		ok = true;
	}
	free(st);
	return ok;
}

/* cmocka: polls until the pod weighs `want` from `from`, within the bound. */
static void wait_weight(const struct pod *p, double want, const char *from)
{
	uint64_t t0 = ktest_now_ns();
	char got_from[32] = "";
	double w = -1;

	while (!(pod_weight(p, &w, got_from, sizeof(got_from)) && w == want && !strcmp(got_from, from)) &&
	       ktest_now_ns() - t0 < (uint64_t)CHANGE_BOUND_MS * 1000000ull)
		ktest_sleep_ms(20);
	if (!(w == want && !strcmp(got_from, from)))
		fail_msg("%s: weight %g from %s, wanted %g from %s", p->name, w, got_from, want, from);
}

/* cmocka: HVALS of key once it has n values (within 2 s); the caller frees it. */
static redisReply *wait_hvals(const char *key, size_t n)
{
	uint64_t t0 = ktest_now_ns();
	redisReply *r;

	for (;;) {
		r = rp_command(&fx.redis, "HVALS %s", key);
		assert_non_null(r);
		if ((r->type == REDIS_REPLY_ARRAY && r->elements == n) || ktest_now_ns() - t0 > 2000000000ULL)
			break;
		freeReplyObject(r);
		ktest_sleep_ms(50);
	}
	assert_int_equal(r->type, REDIS_REPLY_ARRAY);
	assert_int_equal(r->elements, n);
	return r;
}

/* The daemon with one limit `crawl` over the crawler pods on fx.redis
 * (keyPrefix `prefix`), shared by demand, `by` its weightBy/classBy
 * lines; its kube watch running. */
static void crawl_daemon_up(const char *prefix, const char *by)
{
	char body[1024];

	snprintf(body, sizeof(body),
		 "store:\n"
		 "  redisStore: {mode: single, url: \"redis://127.0.0.1:%d/0\", keyPrefix: %s}\n"
		 "  heartbeat: 200ms\n"
		 "limits:\n"
		 "  - name: crawl\n"
		 "    pods: {namespace: workers, labels: {app: crawler}}\n"
		 "    unit: datagram\n"
		 "    share: demand\n"
		 "%s"
		 "    rateLimit: {max: %.0f}\n",
		 fx.redis.port, prefix, by, RATE);
	start_daemon_with(body);
	wait_state("watching", 2000);
}

/* weightBy label: a pod's weight is its label's value, read from the API
 * through the watch: a number, absent (defaultWeight), not a number
 * (defaultWeight, said), changed by a relabel; the store keeps what the
 * pods weigh (read back from Redis). */
static void test_pod_weights(void **state)
{
	char path[PATH_MAX];
	redisReply *r;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(rp_start_master(&fx.redis, NULL), 0);
	api_start();
	api_add(&CRAWLER1, NODE, "app=crawler,kthrottle.io/weight=3");
	api_add(&CRAWLER2, NODE, "app=crawler");
	kubelet_mkdir(&CRAWLER1, path, sizeof(path));
	kubelet_mkdir(&CRAWLER2, path, sizeof(path));
	crawl_daemon_up("ktkw", "    weightBy: label:kthrottle.io/weight\n    defaultWeight: 1\n");
	wait_weight(&CRAWLER1, 3, "value");
	wait_weight(&CRAWLER2, 1, "default");
	/* the store divides by what the pods weigh: crawler-1's 3 is kept
	 * beside its demand, crawler-2 weighs 1 (no entry) */
	r = wait_hvals("ktkw:pool:{crawl}:wt", 1);
	assert_string_equal(r->element[0]->str, "3");
	freeReplyObject(r);
	/* relabelled: a weight that is no number weighs the default, and says so */
	api("labels %s app=crawler,kthrottle.io/weight=heavy", CRAWLER2.uid);
	wait_weight(&CRAWLER2, 1, "invalid");
	api("labels %s app=crawler,kthrottle.io/weight=0.5", CRAWLER2.uid);
	wait_weight(&CRAWLER2, 0.5, "value");
	api("labels %s app=crawler", CRAWLER1.uid);
	wait_weight(&CRAWLER1, 1, "default");
}

/* A pod's class in its member's status, and where it came from: "name
 * from", "" when status does not list the pod. */
static void pod_class(const struct pod *p, char *out, size_t len)
{
	char *st = ktest_daemon_cmd(&fx.d, "status json"), uid_[40], *m, *c, *f;

	assert_non_null(st);
	snprintf(uid_, sizeof(uid_), "%s", p->uid);
	for (char *x = uid_; *x; x++)
		if (*x == '-')
			*x = '_';
	out[0] = 0;
	if ((m = strstr(st, uid_)) && (c = strstr(m, "\"class\":\"")) && (f = strstr(m, "\"class_from\":\""))) {
		c += strlen("\"class\":\"");
		f += strlen("\"class_from\":\"");
		snprintf(out, len, "%.*s %.*s", (int)strcspn(c, "\""), c, (int)strcspn(f, "\""), f);
	}
	free(st);
}

static void wait_class(const struct pod *p, const char *want)
{
	uint64_t t0 = ktest_now_ns();
	char got[96] = "";

	while ((pod_class(p, got, sizeof(got)), strcmp(got, want)) &&
	       ktest_now_ns() - t0 < (uint64_t)CHANGE_BOUND_MS * 1000000ull)
		ktest_sleep_ms(20);
	if (strcmp(got, want))
		fail_msg("%s: class \"%s\", wanted \"%s\"", p->name, got, want);
}

/* weightBy and classBy from annotations (kthrottle.io/ ones, the only
 * ones the watcher keeps): read through the watch, absent ones default,
 * changed by an annotation edit; the store keeps "W K" per pod (read back
 * from Redis). */
static void test_pod_annotations(void **state)
{
	char path[PATH_MAX];
	redisReply *r;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(rp_start_master(&fx.redis, NULL), 0);
	api_start();
	api_add(&CRAWLER1, NODE, "app=crawler");
	api_add(&CRAWLER2, NODE, "app=crawler,kthrottle.io/class=critical");
	api("annotations %s kthrottle.io/weight=2,kthrottle.io/class=critical,example.com/note=x",
	    CRAWLER1.uid);
	kubelet_mkdir(&CRAWLER1, path, sizeof(path));
	kubelet_mkdir(&CRAWLER2, path, sizeof(path));
	crawl_daemon_up("ktka", "    weightBy: annotation:kthrottle.io/weight\n"
				"    classBy: annotation:kthrottle.io/class\n"
				"    classes: [{name: critical}, {name: batch, floor: 10%}]\n");
	wait_weight(&CRAWLER1, 2, "value");
	wait_class(&CRAWLER1, "critical value");
	/* a label of the same key is not the annotation */
	wait_weight(&CRAWLER2, 1, "default");
	wait_class(&CRAWLER2, "batch default");
	/* the store: crawler-1 "2" (class 0), crawler-2 "1 1" (class 1) */
	r = wait_hvals("ktka:pool:{crawl}:wt", 2);
	assert_true((!strcmp(r->element[0]->str, "2") && !strcmp(r->element[1]->str, "1 1")) ||
		    (!strcmp(r->element[0]->str, "1 1") && !strcmp(r->element[1]->str, "2")));
	freeReplyObject(r);
	/* annotated: it moves at once */
	api("annotations %s kthrottle.io/weight=0.5,kthrottle.io/class=critical", CRAWLER2.uid);
	wait_weight(&CRAWLER2, 0.5, "value");
	wait_class(&CRAWLER2, "critical value");
	api("annotations %s kthrottle.io/class=nosuch", CRAWLER1.uid);
	wait_weight(&CRAWLER1, 1, "default");
	wait_class(&CRAWLER1, "batch invalid");
}

/* a test with the per-test setup and teardown */
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_selected_pods_are_members),
		T(test_pods_come_go_and_change),
		T(test_api_outages),
		T(test_untrusted_server),
		T(test_token_rotation),
		T(test_ca_rotation),
		T(test_retry_after),
		T(test_watch_error_one_line),
		T(test_token_unreadable),
		T(test_pod_calls),
		T(test_pod_weights),
		T(test_pod_annotations),
	};

	signal(SIGPIPE, SIG_IGN);
	alarm(180);
	return cmocka_run_group_tests_name("e2e_kube", tests, NULL, NULL);
}
