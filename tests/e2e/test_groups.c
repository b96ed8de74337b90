// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* groupBy: one pool per group, with a real daemon, member cgroups sending
 * real datagrams and loopback receivers counting what arrives:
 *   - cgroups: patterns grouped by parent directory: each tenant's
 *     directory is a pool at the limit's rate (two workers of one tenant
 *     share theirs), and a tenant directory made later gets its pool;
 *   - pods grouped by namespace through the fake API server: three
 *     namespaces flooding get a pool each at its limit, a fourth namespace
 *     gets its pool within a heartbeat, and a namespace emptied loses its
 *     pool after ttl;
 *   - groups under a parent: each group within its own limit, all of
 *     them within the parent's;
 *   - two nodes with one Redis agree per group: a group on both is one
 *     pool across them, and a group gone leaves the store. */
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
#include <sys/socket.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "fakekube.h"
#include "kt_clusterfx.h"
#include "kt_daemonfx.h"
#include "kt_udpfx.h"
#include "ktest.h"
#include "redis_proc.h"

#define G_MAX 20.0
#define G_BURST 4.0
#define FLOOD_S 1.5
#define NODE "node-g"
#define TOKEN "t0ken-for-groups"
/* a new group's pool exists within a heartbeat (1 s) of its first member;
 * this allows for a loaded 2-core machine */
#define APPEAR_BOUND_MS 2500
#define TTL_MS 1000
#define N_SEND 3
#define MAX_DIRS 24

static struct fixture {
	struct ktest_daemon d, d2; /* d2: the second node of a pooled test */
	struct rp_proc rp;
	char base[PATH_MAX];
	char dirs[MAX_DIRS][PATH_MAX]; /* made under base, in creation order */
	int n_dirs;
	char tmp[PATH_MAX];
	struct ktest_fakekube api;
	int rx[N_SEND], port[N_SEND];
} fx;

static int setup(void **state)
{
	(void)state;
	if (!kt_daemonfx_begin(&fx, sizeof(fx), &fx.d))
		return 0;
	fx.d2.pid = -1;
	fx.api.pid = -1;
	for (int i = 0; i < N_SEND; i++)
		fx.rx[i] = -1;
	if (ktest_cgroup_create("groups", fx.base, sizeof(fx.base)) ||
	    ktest_tmpdir(fx.tmp, sizeof(fx.tmp)))
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < N_SEND; i++)
		if (fx.rx[i] >= 0)
			close(fx.rx[i]);
	if (fx.d.dir[0])
		ktest_daemon_cleanup(&fx.d);
	if (fx.d2.dir[0])
		ktest_daemon_cleanup(&fx.d2);
	ktest_fakekube_stop(&fx.api);
	rp_stop(&fx.rp);
	for (int i = fx.n_dirs - 1; i >= 0; i--)
		if (fx.dirs[i][0])
			ktest_cgroup_destroy(fx.dirs[i]);
	kt_daemonfx_end(&fx.d, fx.base);
	if (fx.tmp[0])
		ktest_rmtree(fx.tmp);
	return 0;
}

/* base/rel, made (with the parents it lacks) and removed at teardown. */
static void mkcg(const char *rel, char *out, size_t len)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", fx.base, rel);
	for (char *s = path + strlen(fx.base) + 1;; s++) {
		char c = *s;

		if (c != '/' && c != '\0')
			continue;
		*s = '\0';
		bool seen = false;

		for (int i = 0; i < fx.n_dirs && !seen; i++)
			seen = !strcmp(fx.dirs[i], path);
		if (!seen) {
			assert_true(fx.n_dirs < MAX_DIRS);
			assert_true(mkdir(path, 0755) == 0 || errno == EEXIST);
			snprintf(fx.dirs[fx.n_dirs++], PATH_MAX, "%s", path);
		}
		*s = c;
		if (!c)
			break;
	}
	if (out)
		snprintf(out, len, "%s", path);
}

/* Whether d's status lists a limit named `name`. */
static bool has_limit_on(const struct ktest_daemon *d, const char *name)
{
	char *st = ktest_daemon_cmd(d, "status json");
	char want[64];
	bool has;

	assert_non_null(st);
	snprintf(want, sizeof(want), "\"name\":\"%s\"", name);
	has = strstr(st, want) != NULL;
	free(st);
	return has;
}

static bool has_limit(const char *name)
{
	return has_limit_on(&fx.d, name);
}

/* Waits up to bound_ms for d's limit `name` to be listed (want) or gone;
 * the time it took, or -1. */
static long wait_limit_on(const struct ktest_daemon *d, const char *name, bool want, long bound_ms)
{
	uint64_t t0 = ktest_now_ns();
	long waited = 0;

	/* the clock's, not the sleeps': each status request takes time too */
	while (has_limit_on(d, name) != want) {
		if (waited >= bound_ms)
			return -1;
		ktest_sleep_ms(50);
		waited = (long)((ktest_now_ns() - t0) / 1000000);
	}
	return (long)((ktest_now_ns() - t0) / 1000000);
}

static long wait_limit(const char *name, bool want, long bound_ms)
{
	return wait_limit_on(&fx.d, name, want, bound_ms);
}

/* Each of cgs floods its own receiver for FLOOD_S; what arrived. */
static void flood(int n, const char *const *cgs, unsigned long long *got)
{
	struct ktest_load res[N_SEND];

	for (int i = 0; i < n; i++) {
		if (fx.rx[i] < 0)
			fx.rx[i] = kt_udpfx_receiver(&fx.port[i]);
		kt_udpfx_drain(fx.rx[i]);
	}
	kt_udpfx_load_all(n, cgs, fx.port, FLOOD_S, NULL, res);
	ktest_sleep_ms(50);
	for (int i = 0; i < n; i++) {
		got[i] = kt_udpfx_drain(fx.rx[i]);
		assert_int_equal(got[i], res[i].ok);
	}
}

/* One pool's bound over the flood (a tick of slack), and its floor: a pool
 * of its own reaches most of its rate. */
#define POOL_MAX (G_MAX * (FLOOD_S + 0.1) + G_BURST + 2)
#define POOL_MIN (G_MAX * FLOOD_S * 0.75)

/* What one group's members got in a flood: held to its pool, and using it */
static void assert_one_pool(unsigned long long got)
{
	assert_true((double)got <= POOL_MAX);
	assert_true((double)got >= POOL_MIN);
}

/* cgroups: "BASE/STAR/STAR" grouped by parent: tenants t1 (one worker) and t2
 * (two workers) are a pool each; t3 made later gets its own. */
static void test_parent_directory_groups(void **state)
{
	char w[N_SEND][PATH_MAX], body[2048];
	const char *cgs[N_SEND] = { w[0], w[1], w[2] };
	unsigned long long got[N_SEND];
	long took;
	char *st;
	int mport;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	mkcg("t1/w1", w[0], PATH_MAX);
	mkcg("t2/w1", w[1], PATH_MAX);
	mkcg("t2/w2", w[2], PATH_MAX);
	mport = ktest_free_port(SOCK_STREAM);
	snprintf(body, sizeof(body),
		 "tickInterval: 100ms\n"
		 "metrics: 127.0.0.1:%d\n"
		 "limits:\n"
		 "  - {name: tenant, cgroups: [\"%s/*/*\"], groupBy: parent, unit: datagram,\n"
		 "     burst: %g, rateLimit: {max: %g, ttl: %dms},\n"
		 "     match: {cidrs: [127.0.0.1/32], protocol: udp}}\n",
		 mport, fx.base, G_BURST, G_MAX, TTL_MS);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
	assert_true(has_limit("tenant@t1"));
	assert_true(has_limit("tenant@t2"));
	st = ktest_daemon_cmd(&fx.d, "status json");
	assert_non_null(st);
	assert_non_null(strstr(st, "\"group\":{\"limit\":\"tenant\",\"by\":\"parent\",\"value\":\"t2\"}"));
	assert_non_null(strstr(st, "\"groups\":[{\"limit\":\"tenant\",\"by\":\"parent\",\"label\":null,"
				   "\"groups\":2,\"max_groups\":1000,\"other\":false}]"));
	free(st);
	kt_cmd_has(&fx.d, "status", "groups of tenant (groupBy parent): 2 of maxGroups 1000\n");
	/* the series' bound, in metrics */
	char *page = NULL;

	assert_int_equal(ktest_http_get(mport, "/metrics", &page), 200);
	assert_non_null(strstr(page, "\nkthrottle_groups{limit=\"tenant\"} 2\n"));
	assert_non_null(strstr(page, "{limit=\"tenant@t2\"}"));
	free(page);

	flood(N_SEND, cgs, got);
	print_message("in %.1f s: t1 %llu; t2 %llu + %llu = %llu (each pool %g/s + %g)\n", FLOOD_S,
		      got[0], got[1], got[2], got[1] + got[2], G_MAX, G_BURST);
	assert_one_pool(got[0]);
	assert_one_pool(got[1] + got[2]);

	/* a tenant made now: its pool appears, and holds its worker */
	mkcg("t3/w1", w[0], PATH_MAX);
	took = wait_limit("tenant@t3", true, APPEAR_BOUND_MS);
	print_message("tenant@t3 appeared %ld ms after its directory\n", took);
	assert_true(took >= 0);
	flood(1, cgs, got);
	assert_one_pool(got[0]);
}

/* cgroups: "BASE/c/{tenant}/jobs/STAR" grouped by the capture: every
 * tenant's workers sit in a directory named jobs (by parent they would all
 * be one group "jobs"); tenants ta (one worker) and tb (two) are a pool
 * each, and tc, made a directory at a time, gets its own. */
static void test_capture_groups(void **state)
{
	char w[N_SEND][PATH_MAX], body[2048];
	const char *cgs[N_SEND] = { w[0], w[1], w[2] };
	unsigned long long got[N_SEND];
	long took;
	char *st;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	mkcg("c/ta/jobs/w1", w[0], PATH_MAX);
	mkcg("c/tb/jobs/w1", w[1], PATH_MAX);
	mkcg("c/tb/jobs/w2", w[2], PATH_MAX);
	snprintf(body, sizeof(body),
		 "tickInterval: 100ms\n"
		 "limits:\n"
		 "  - {name: job, cgroups: [\"%s/c/{tenant}/jobs/*\"], groupBy: \"capture:tenant\",\n"
		 "     unit: datagram, burst: %g, rateLimit: {max: %g, ttl: %dms},\n"
		 "     match: {cidrs: [127.0.0.1/32], protocol: udp}}\n",
		 fx.base, G_BURST, G_MAX, TTL_MS);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
	assert_true(has_limit("job@ta"));
	assert_true(has_limit("job@tb"));
	assert_false(has_limit("job@jobs"));
	st = ktest_daemon_cmd(&fx.d, "status json");
	assert_non_null(st);
	assert_non_null(strstr(st, "\"group\":{\"limit\":\"job\",\"by\":\"capture\",\"value\":\"tb\"}"));
	free(st);
	kt_cmd_has(&fx.d, "status", "groups of job (groupBy capture:tenant): 2 of maxGroups 1000\n");

	flood(N_SEND, cgs, got);
	print_message("in %.1f s: ta %llu; tb %llu + %llu = %llu (each pool %g/s + %g)\n", FLOOD_S,
		      got[0], got[1], got[2], got[1] + got[2], G_MAX, G_BURST);
	assert_one_pool(got[0]);
	assert_one_pool(got[1] + got[2]);

	/* a tenant made a directory at a time: its pool appears once its
	 * first worker does, and holds it */
	mkcg("c/tc", NULL, 0);
	mkcg("c/tc/jobs", NULL, 0);
	ktest_sleep_ms(200);
	assert_false(has_limit("job@tc")); /* no worker yet: no group */
	mkcg("c/tc/jobs/w1", w[0], PATH_MAX);
	took = wait_limit("job@tc", true, APPEAR_BOUND_MS);
	print_message("job@tc appeared %ld ms after its first worker\n", took);
	assert_true(took >= 0);
	flood(1, cgs, got);
	print_message("in %.1f s: tc %llu\n", FLOOD_S, got[0]);
	assert_one_pool(got[0]);
}

/* Groups under a parent: tenants t1..t3 a pool of G_MAX each, all of them
 * charged to `all` too, whose P_MAX is less than their sum. */
#define P_MAX 30.0
#define P_BURST 3.0
static void test_groups_under_a_parent(void **state)
{
	char w[N_SEND][PATH_MAX], body[2048];
	const char *cgs[N_SEND] = { w[0], w[1], w[2] };
	unsigned long long got[N_SEND], total = 0;
	char *st;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	mkcg("t1/w", w[0], PATH_MAX);
	mkcg("t2/w", w[1], PATH_MAX);
	mkcg("t3/w", w[2], PATH_MAX);
	snprintf(body, sizeof(body),
		 "tickInterval: 100ms\n"
		 "limits:\n"
		 "  - {name: all, cgroups: [\"%s/*/*\"], unit: datagram, burst: %g, rateLimit: {max: %g},\n"
		 "     match: {cidrs: [127.0.0.1/32], protocol: udp}}\n"
		 "  - {name: tenant, cgroups: [\"%s/*/*\"], groupBy: parent, parent: all, unit: datagram,\n"
		 "     burst: %g, rateLimit: {max: %g}, match: {cidrs: [127.0.0.1/32], protocol: udp}}\n",
		 fx.base, P_BURST, P_MAX, fx.base, G_BURST, G_MAX);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
	st = ktest_daemon_cmd(&fx.d, "status json");
	assert_non_null(st);
	assert_non_null(strstr(st, "\"name\":\"tenant@t3\""));
	free(st);

	flood(N_SEND, cgs, got);
	for (int i = 0; i < N_SEND; i++) {
		total += got[i];
		assert_true((double)got[i] <= POOL_MAX);
	}
	print_message("in %.1f s: t1 %llu, t2 %llu, t3 %llu: %llu together (parent %g/s + %g, each "
		      "group %g/s + %g)\n",
		      FLOOD_S, got[0], got[1], got[2], total, P_MAX, P_BURST, G_MAX, G_BURST);
	/* the parent's bound over every group (a tick of slack), and used */
	assert_true((double)total <= P_MAX * (FLOOD_S + 0.1) + P_BURST + 2);
	assert_true((double)total >= P_MAX * FLOOD_S * 0.75);
	st = ktest_daemon_cmd(&fx.d, "status json");
	assert_non_null(st);
	assert_true(kt_daemonfx_events(st, "all", "share") > 0); /* the parent refused */
	free(st);
}

/* ---- two nodes, one Redis ---- */

static void dump_node(int i)
{
	ktest_daemon_dump(i ? &fx.d2 : &fx.d, i ? "node n1" : "node n0", 2500);
}

/* How many keys of the store match pattern. */
static long long store_keys(const char *pattern)
{
	redisReply *r = rp_command(&fx.rp, "KEYS %s", pattern);
	long long n;

	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_ARRAY);
	n = (long long)r->elements;
	freeReplyObject(r);
	return n;
}

/* The ids of the store's clients whose last command was a script call (the
 * daemons' heartbeat connections), as " id id ... " in out. */
static void heartbeat_clients(char *out, size_t len)
{
	redisReply *r = rp_command(&fx.rp, "CLIENT LIST");
	size_t at = 0;

	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_STRING);
	out[at++] = ' ';
	out[at] = '\0';
	for (char *line = r->str, *nl; line && *line; line = nl ? nl + 1 : NULL) {
		nl = strchr(line, '\n');
		char *cmd = strstr(line, " cmd=evalsha");

		if (!cmd || (nl && cmd > nl) || strncmp(line, "id=", 3))
			continue;
		at += (size_t)snprintf(out + at, len - at, "%ld ", strtol(line + 3, NULL, 10));
		assert_true(at < len);
	}
	freeReplyObject(r);
}

/* Waits up to bound_ms for node d's limit `name` to be agreed at size;
 * the time it took, or -1. */
static long wait_agreed(const struct ktest_daemon *d, const char *name, int size, long bound_ms)
{
	struct kt_clusterfx_lst s;

	uint64_t t0 = ktest_now_ns();
	long waited = 0;

	while (waited <= bound_ms) {
		kt_clusterfx_lst_get(d, name, &s);
		if (kt_clusterfx_agreed(&s, size))
			return waited;
		ktest_sleep_ms(50);
		waited = (long)((ktest_now_ns() - t0) / 1000000);
	}
	return -1;
}

/* Nodes n0 and n1 (their own pattern each) both have tenant t1, n1 also t2:
 * t1 is one pool of two members across the nodes, t2 one of one; what
 * arrives from each group stays within that group's one limit. When t2's
 * last cgroup goes, its pool goes after ttl and its keys leave the store. */
static void test_two_nodes_agree_per_group(void **state)
{
	static const struct kt_clusterfx_pool pool = { 100, 200, 3, 2000 };
	char w[N_SEND][PATH_MAX], limits[1024], store[256];
	const char *cgs[N_SEND] = { w[0], w[1], w[2] };
	struct ktest_load res[N_SEND];
	unsigned long long t1, t2;
	int port[2], ports[N_SEND];
	long took;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	mkcg("n0/t1/w", w[0], PATH_MAX);
	mkcg("n1/t1/w", w[1], PATH_MAX);
	mkcg("n1/t2/w", w[2], PATH_MAX);
	assert_int_equal(rp_start_master(&fx.rp, NULL), 0);
	snprintf(store, sizeof(store), "{mode: single, url: \"redis://127.0.0.1:%d/0\", keyPrefix: ktgrp}",
		 fx.rp.port);
	for (int i = 0; i < 2; i++) {
		struct ktest_daemon *d = i ? &fx.d2 : &fx.d;

		snprintf(limits, sizeof(limits),
			 "  - {name: tenant, cgroups: [\"%s/n%d/*/*\"], groupBy: parent, unit: datagram,\n"
			 "     burst: %g, rateLimit: {max: %g, ttl: %dms},\n"
			 "     match: {cidrs: [127.0.0.1/32], protocol: udp}}\n",
			 fx.base, i, G_BURST, G_MAX, TTL_MS);
		assert_int_equal(ktest_daemon_init(d), 0);
		kt_clusterfx_node_config(d, i, &pool, store, limits);
		kt_clusterfx_run_node(d, i, dump_node);
	}
	assert_true(wait_agreed(&fx.d, "tenant@t1", 2, 5000) >= 0);
	assert_true(wait_agreed(&fx.d2, "tenant@t1", 2, 5000) >= 0);
	assert_true(wait_agreed(&fx.d2, "tenant@t2", 1, 5000) >= 0);
	assert_false(has_limit("tenant@t2")); /* n0 has no member of t2 */
	assert_true(store_keys("ktgrp*tenant@t1*") > 0);
	assert_true(store_keys("ktgrp*tenant@t2*") > 0);

	for (int i = 0; i < 2; i++)
		fx.rx[i] = kt_udpfx_receiver(&port[i]);
	ports[0] = ports[1] = port[0];
	ports[2] = port[1];
	kt_udpfx_load_all(N_SEND, cgs, ports, FLOOD_S, NULL, res);
	ktest_sleep_ms(50);
	t1 = kt_udpfx_drain(fx.rx[0]);
	t2 = kt_udpfx_drain(fx.rx[1]);
	assert_int_equal(t1, res[0].ok + res[1].ok);
	assert_int_equal(t2, res[2].ok);
	print_message("in %.1f s: t1 %llu (n0 %llu + n1 %llu), t2 %llu (each pool %g/s + %g)\n",
		      FLOOD_S, t1, res[0].ok, res[1].ok, t2, G_MAX, G_BURST);
	assert_one_pool(t1);
	assert_one_pool(t2);

	/* t2's only cgroup goes: the group after ttl, then its keys */
	char before[256], after[256];

	heartbeat_clients(before, sizeof(before));
	for (int i = fx.n_dirs - 1; i >= 0; i--)
		if (!strcmp(fx.dirs[i], w[2])) {
			assert_int_equal(rmdir(w[2]), 0);
			fx.dirs[i][0] = '\0';
		}
	took = wait_limit_on(&fx.d2, "tenant@t2", false, TTL_MS + APPEAR_BOUND_MS);
	print_message("tenant@t2 gone from n1 %ld ms after its last cgroup (ttl %d ms)\n", took,
		      TTL_MS);
	if (took < TTL_MS - 100)
		dump_node(1);
	assert_true(took >= TTL_MS - 100);
	for (uint64_t t0 = ktest_now_ns();
	     (took = (long)((ktest_now_ns() - t0) / 1000000)) < 10000 &&
	     store_keys("ktgrp*tenant@t2*") > 0;)
		ktest_sleep_ms(100);
	print_message("its keys gone from the store %ld ms later\n", took);
	assert_int_equal(store_keys("ktgrp*tenant@t2*"), 0);
	assert_true(store_keys("ktgrp*tenant@t1*") > 0);
	/* n1 applied the change as a reload, on the connections it had: no
	 * node reconnected (the store went with the new set of limits) */
	heartbeat_clients(after, sizeof(after));
	print_message("heartbeat connections before:%s after:%s\n", before, after);
	assert_int_equal(strlen(before), strlen(after));
	assert_string_equal(before, after);
	assert_true(strlen(before) > 4); /* two daemons' */
}

/* ---- pods grouped by namespace, through the fake API server ---- */

struct pod {
	const char *ns, *name, *uid;
};

static const struct pod PODS[] = {
	{ "ns-a", "w-a", "a0000000-aaaa-4bbb-8ccc-000000000001" },
	{ "ns-b", "w-b", "b0000000-aaaa-4bbb-8ccc-000000000002" },
	{ "ns-c", "w-c", "c0000000-aaaa-4bbb-8ccc-000000000003" },
	{ "ns-d", "w-d", "d0000000-aaaa-4bbb-8ccc-000000000004" },
};

/* The pod listed on this node with its kubelet directory (into cg). */
static void pod_up(const struct pod *p, char *cg, size_t len)
{
	char dir[PATH_MAX];

	assert_int_equal(ktest_fakekube_cmd(&fx.api, "add %s %s %s " NODE " Burstable app=worker", p->ns,
					    p->name, p->uid),
			 0);
	assert_int_equal(ktest_kubelet_pod_cgroup(fx.base, p->uid, "Burstable", 0, dir, sizeof(dir)),
			 0);
	mkcg(dir + strlen(fx.base) + 1, cg, len);
}

static void test_namespace_groups(void **state)
{
	char cg[4][PATH_MAX], body[2048], token[PATH_MAX];
	const char *cgs[N_SEND] = { cg[0], cg[1], cg[2] };
	unsigned long long got[N_SEND];
	long took;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	snprintf(token, sizeof(token), "%s/token", fx.tmp);
	assert_int_equal(ktest_fakekube_certs(fx.tmp), 0);
	assert_int_equal(ktest_write_file(token, TOKEN "\n"), 0);
	assert_int_equal(ktest_fakekube_start(&fx.api, fx.tmp, TOKEN), 0);
	for (int i = 0; i < 3; i++)
		pod_up(&PODS[i], cg[i], PATH_MAX);
	snprintf(body, sizeof(body),
		 "tickInterval: 100ms\n"
		 "kubernetes:\n"
		 "  apiServer: https://127.0.0.1:%d\n"
		 "  tokenFile: %s\n"
		 "  caFile: %s/ca.pem\n"
		 "  nodeName: " NODE "\n"
		 "  cgroupRoot: %s\n"
		 "limits:\n"
		 "  - {name: per-ns, pods: {labels: {app: worker}}, groupBy: namespace,\n"
		 "     unit: datagram, burst: %g, rateLimit: {max: %g, ttl: %dms},\n"
		 "     match: {cidrs: [127.0.0.1/32], protocol: udp}}\n",
		 fx.api.port, token, fx.tmp, strrchr(fx.base, '/') + 1, G_BURST, G_MAX, TTL_MS);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
	for (int i = 0; i < 3; i++) {
		char name[64];

		snprintf(name, sizeof(name), "per-ns@%s", PODS[i].ns);
		assert_true(has_limit(name));
	}

	flood(N_SEND, cgs, got);
	print_message("in %.1f s: ns-a %llu, ns-b %llu, ns-c %llu (each pool %g/s + %g)\n", FLOOD_S,
		      got[0], got[1], got[2], G_MAX, G_BURST);
	for (int i = 0; i < N_SEND; i++) {
		assert_one_pool(got[i]);
	}

	/* a fourth namespace: its pool within a heartbeat */
	pod_up(&PODS[3], cg[3], PATH_MAX);
	took = wait_limit("per-ns@ns-d", true, APPEAR_BOUND_MS);
	print_message("per-ns@ns-d appeared %ld ms after its pod\n", took);
	assert_true(took >= 0);

	/* ns-c emptied: its pool goes after ttl, not before */
	assert_int_equal(ktest_fakekube_cmd(&fx.api, "delete %s", PODS[2].uid), 0);
	ktest_sleep_ms(TTL_MS / 2);
	assert_true(has_limit("per-ns@ns-c"));
	took = wait_limit("per-ns@ns-c", false, TTL_MS + APPEAR_BOUND_MS);
	print_message("per-ns@ns-c gone %ld ms after ttl/2 (ttl %d ms)\n", took, TTL_MS);
	assert_true(took >= 0);
	assert_true(has_limit("per-ns@ns-d"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_parent_directory_groups, setup, teardown),
		cmocka_unit_test_setup_teardown(test_capture_groups, setup, teardown),
		cmocka_unit_test_setup_teardown(test_groups_under_a_parent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_namespace_groups, setup, teardown),
		cmocka_unit_test_setup_teardown(test_two_nodes_agree_per_group, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
