// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Unit call across nodes: three kthrottled nodes agree on one call limit
 * through a real redis-server (max 60/s, burst 12: 20/s a node), each with
 * unmodified HTTP clients in its member cgroup (http.client, 4 keep-alive
 * connections flat out) calling one counting server
 * (tests/tools/kt-httpcall.py, tests/lib/kt_httpfx).
 *
 * Asserted at the server: every 1 s window within max + burst (and the
 * calls of 50 ms more, LAG_CALLS, for the server's timestamps, taken after
 * the kernel admitted the call), each call the clients saw answered arriving there, and no client
 * error on a node whose daemon runs. test_kill9 kills n2's daemon 2 s in:
 * its pod keeps calling on what its kernel still holds (the lease, then
 * the conservative fallback the other nodes keep reserving), and the
 * windows still hold. test_restart stops n2's daemon (SIGTERM) 2 s in and
 * starts it again, as a rolling update does; in test_join n2 joins a pool
 * of two 2 s in, its clients calling at once. test_store_killed kills the redis-server 2 s in:
 * every node runs on its lease, then its fallback, within the same
 * bound, with no client error. test_groups: groupBy with calls on one node, a pool
 * per tenant directory, each tenant's server within its own pool's bound. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "kt_clusterfx.h"
#include "kt_daemonfx.h"
#include "kt_httpfx.h"
#include "ktest.h"
#include "redis_proc.h"

#define NODES 3
#define MAX 60.0
#define BURST 12
#define CONNS 4
#define RUN_S 6.0
#define LAG_CALLS 3 /* 50 ms at MAX */
#define PREFIX "ktcall"
#define LIMIT "calls"

#define TICK_MS 50
#define HB_MS 200
#define STALE 3
#define VALID_MS 2000

static const struct kt_clusterfx_pool pool = { TICK_MS, HB_MS, STALE, VALID_MS };

static struct fixture {
	struct ktest_daemon d[NODES];
	char cg[NODES][PATH_MAX];
	char tmp[PATH_MAX];
	struct rp_proc rp;
	struct kt_httpfx_server server;
	pid_t client[NODES];
	/* test_groups: BASE, BASE/acme, BASE/acme/w, BASE/beta, BASE/beta/w */
	char grp[5][PATH_MAX];
	struct kt_httpfx_server server2;
} fx;

static void dump_node(int i)
{
	char name[16];

	snprintf(name, sizeof(name), "node n%d", i);
	ktest_daemon_dump(&fx.d[i], name, 2500);
}

static int setup(void **state)
{
	(void)state;
	kt_clusterfx_begin(&fx, sizeof(fx), fx.d, NODES, NULL, NULL);
	fx.server.pid = -1;
	fx.server2.pid = -1;
	for (int i = 0; i < NODES; i++)
		fx.client[i] = -1;
	if (ktest_root_unavailable())
		return 0;
	return ktest_tmpdir(fx.tmp, sizeof(fx.tmp));
}

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < NODES; i++)
		ktest_kill_wait(&fx.client[i]);
	kt_httpfx_kill(&fx.server);
	kt_httpfx_kill(&fx.server2);
	kt_clusterfx_nodes_end(fx.d, NODES, NULL, NULL);
	for (int i = 5; i-- > 0;) /* the workers, their tenants, then BASE */
		if (fx.grp[i][0])
			ktest_cgroup_destroy(fx.grp[i]);
	rp_stop(&fx.rp);
	kt_clusterfx_cgroups_end(fx.cg, NODES);
	if (fx.tmp[0])
		ktest_rmtree(fx.tmp);
	return 0;
}

/* Redis and the first n of the three nodes (all configured), agreed on a
 * pool of n. */
static void start_pool_of(int n)
{
	const struct rp_opts o = { 0 };
	char store[256], limits[1024], name[16];

	assert_int_equal(rp_start_master(&fx.rp, &o), 0);
	snprintf(store, sizeof(store),
		 "{mode: single, url: \"redis://127.0.0.1:%d/0\", keyPrefix: " PREFIX "}",
		 fx.rp.port);
	for (int i = 0; i < NODES; i++) {
		snprintf(name, sizeof(name), "calls%d", i);
		assert_int_equal(ktest_cgroup_create(name, fx.cg[i], sizeof(fx.cg[i])), 0);
		snprintf(limits, sizeof(limits),
			 "  - {name: " LIMIT ", cgroups: [%s], unit: call, burst: %d,\n"
			 "     match: {cidrs: [127.0.0.1/32]}, rateLimit: {max: %g}}\n",
			 fx.cg[i], BURST, MAX);
		assert_int_equal(ktest_daemon_init(&fx.d[i]), 0);
		kt_clusterfx_node_config(&fx.d[i], i, &pool, store, limits);
	}
	kt_clusterfx_run_nodes(fx.d, n, dump_node);
	for (int t = 0;; t++) {
		int good = 0;

		for (int i = 0; i < n; i++) {
			struct kt_clusterfx_lst s;

			if (kt_clusterfx_lst_get(&fx.d[i], LIMIT, &s) && kt_clusterfx_agreed(&s, n))
				good++;
		}
		if (good == n)
			break;
		if (t > 250) {
			for (int i = 0; i < n; i++)
				dump_node(i);
			fail_msg("no agreement on a pool of %d within 5 s", n);
		}
		ktest_sleep_ms(20);
	}
}

static void start_pool(void)
{
	start_pool_of(NODES);
}

/* What happens kill_at_s into a run: n2's daemon killed, or stopped
 * (SIGTERM) and started again at once, or the store killed; or n2 joins
 * then (its daemon started, then its clients). */
enum fault { KILL_NODE, RESTART_NODE, KILL_STORE, JOIN_NODE };

/* Clients on every node for RUN_S; kill_at_s >= 0: the fault strikes that
 * long after they start. */
static void run_fault(const char *name, double kill_at_s, enum fault fault)
{
	char url[64], out[NODES][PATH_MAX + 32], *srv, *cli[NODES];
	double ok = 0, requests, window;

	kt_httpfx_serve(&fx.server, fx.tmp, "none");
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/call", fx.server.port);
	for (int i = 0; i < NODES; i++) {
		snprintf(out[i], sizeof(out[i]), "%s/client%d.json", fx.tmp, i);
		if (i < 2 || fault != JOIN_NODE)
			fx.client[i] = kt_httpfx_client_spawn(fx.cg[i], "http.client", url, CONNS,
							      RUN_S, out[i]);
	}
	if (kill_at_s >= 0 && fault == KILL_NODE) {
		ktest_sleep_ms((int)(kill_at_s * 1000));
		print_message("%s: kill -9 n2's daemon %.1f s in\n", name, kill_at_s);
		assert_int_equal(ktest_daemon_signal_wait(&fx.d[2], SIGKILL), 128 + SIGKILL);
	} else if (kill_at_s >= 0 && fault == RESTART_NODE) {
		ktest_sleep_ms((int)(kill_at_s * 1000));
		print_message("%s: n2's daemon stopped and started again %.1f s in\n", name, kill_at_s);
		assert_int_equal(ktest_daemon_signal_wait(&fx.d[2], SIGTERM), 0);
		assert_int_equal(ktest_daemon_start_logged(&fx.d[2]), 0);
	} else if (kill_at_s >= 0 && fault == JOIN_NODE) {
		ktest_sleep_ms((int)(kill_at_s * 1000));
		print_message("%s: n2 joins %.1f s in\n", name, kill_at_s);
		kt_clusterfx_run_node(&fx.d[2], 2, dump_node);
		fx.client[2] = kt_httpfx_client_spawn(fx.cg[2], "http.client", url, CONNS,
						      RUN_S - kill_at_s, out[2]);
	} else if (kill_at_s >= 0) {
		ktest_sleep_ms((int)(kill_at_s * 1000));
		print_message("%s: kill -9 of redis-server %.1f s in\n", name, kill_at_s);
		assert_int_equal(rp_signal(&fx.rp, SIGKILL), 0);
	}
	for (int i = 0; i < NODES; i++) {
		cli[i] = kt_httpfx_client_wait(fx.client[i], out[i]);
		fx.client[i] = -1;
	}
	srv = kt_httpfx_stop(&fx.server);
	requests = kt_httpfx_num(srv, "requests");
	window = kt_httpfx_num(srv, "max_window");
	for (int i = 0; i < NODES; i++) {
		print_message("%s: n%d client ok %.0f errors %.0f p50 %.1f ms p99 %.1f ms max %.1f ms\n",
			      name, i, kt_httpfx_num(cli[i], "ok"), kt_httpfx_num(cli[i], "errors"),
			      kt_httpfx_num(cli[i], "p50_ms"), kt_httpfx_num(cli[i], "p99_ms"),
			      kt_httpfx_num(cli[i], "max_ms"));
		ok += kt_httpfx_num(cli[i], "ok");
		/* a held call waits; it never fails while its node's daemon runs */
		if (i != 2 || kill_at_s < 0 || fault != KILL_NODE)
			assert_true(kt_httpfx_num(cli[i], "errors") == 0);
	}
	print_message("%s: %.0f calls at the server in %.2f s, worst 1 s window %.0f (max + burst "
		      "%.0f), clients saw %.0f answered\n",
		      name, requests, kt_httpfx_num(srv, "last") - kt_httpfx_num(srv, "first"),
		      window, MAX + BURST, ok);
	assert_true(requests >= ok);
	assert_true(window <= MAX + BURST + LAG_CALLS);
	/* the pool kept the limit busy (without a store, the nodes fall back
	 * to a conservative part of it) */
	if (fault != KILL_STORE)
		assert_true(requests >= 0.8 * MAX * RUN_S);
	for (int i = 0; i < NODES; i++)
		free(cli[i]);
	free(srv);
}

static void run(const char *name, double kill_at_s)
{
	run_fault(name, kill_at_s, KILL_NODE);
}

static void test_three_nodes(void **state)
{
	(void)state;
	KT_HTTPFX_SKIP_UNLESS_READY();
	start_pool();
	run("three nodes", -1);
}

static void test_kill9(void **state)
{
	(void)state;
	KT_HTTPFX_SKIP_UNLESS_READY();
	start_pool();
	run("kill9", 2.0);
}

/* n2's daemon stopped (SIGTERM) and started again mid-run, as a rolling
 * update does: the pins keep its calls limited meanwhile, the new daemon
 * adopts them, no window passes max + burst and no call fails. */
static void test_restart(void **state)
{
	(void)state;
	KT_HTTPFX_SKIP_UNLESS_READY();
	start_pool();
	run_fault("restart", 2.0, RESTART_NODE);
}

/* n2 joins a pool of two mid-run, its clients calling at once: it runs
 * within what the pool leaves until the pool agrees on three, and no
 * window passes max + burst. */
static void test_join(void **state)
{
	(void)state;
	KT_HTTPFX_SKIP_UNLESS_READY();
	start_pool_of(2);
	run_fault("join", 2.0, JOIN_NODE);
}

/* The store killed mid-run: each node keeps its share for the lease, then
 * the fallback the others reserve for it; no window passes max + burst,
 * and no call fails (held ones wait). */
static void test_store_killed(void **state)
{
	(void)state;
	KT_HTTPFX_SKIP_UNLESS_READY();
	start_pool();
	run_fault("store killed", 2.0, KILL_STORE);
}

/* groupBy with calls, on one node: "tenant" covers BASE/STAR/STAR grouped by
 * the parent directory, so tenants acme and beta are a pool each. Each
 * tenant's worker calls a counting server of its own flat out: each
 * server's every 1 s window stays within max + burst, and each gets its
 * pool's max (the two together twice max: one pool each, not one shared). */
static void test_groups(void **state)
{
	static const char *const rel[5] = { NULL, "acme", "acme/w", "beta", "beta/w" };
	struct kt_httpfx_server *srv[2] = { &fx.server, &fx.server2 };
	char body[1024], url[64], out[2][PATH_MAX + 32], *cli[2], *sum[2];
	pid_t kid[2];

	(void)state;
	KT_HTTPFX_SKIP_UNLESS_READY();
	assert_int_equal(ktest_cgroup_create("callgrp", fx.grp[0], sizeof(fx.grp[0])), 0);
	for (int i = 1; i < 5; i++) {
		snprintf(fx.grp[i], sizeof(fx.grp[i]), "%s/%s", fx.grp[0], rel[i]);
		assert_int_equal(mkdir(fx.grp[i], 0755), 0);
	}
	snprintf(body, sizeof(body),
		 "tickInterval: %dms\n"
		 "limits:\n"
		 "  - {name: tenant, cgroups: [\"%s/*/*\"], groupBy: parent, unit: call,\n"
		 "     burst: %d, match: {cidrs: [127.0.0.1/32]}, rateLimit: {max: %g}}\n",
		 TICK_MS, fx.grp[0], BURST, MAX / NODES);
	assert_int_equal(ktest_daemon_up(&fx.d[0], body), 0);
	kt_cmd_has(&fx.d[0], "status", "groups of tenant (groupBy parent): 2 of maxGroups 1000\n");
	for (int t = 0; t < 2; t++) {
		kt_httpfx_serve(srv[t], fx.tmp, "none");
		snprintf(url, sizeof(url), "http://127.0.0.1:%d/call", srv[t]->port);
		snprintf(out[t], sizeof(out[t]), "%s/tenant%d.json", fx.tmp, t);
		kid[t] = kt_httpfx_client_spawn(fx.grp[2 + 2 * t], "http.client", url, CONNS, RUN_S,
						out[t]);
	}
	for (int t = 0; t < 2; t++) {
		double requests, window;

		cli[t] = kt_httpfx_client_wait(kid[t], out[t]);
		sum[t] = kt_httpfx_stop(srv[t]);
		requests = kt_httpfx_num(sum[t], "requests");
		window = kt_httpfx_num(sum[t], "max_window");
		print_message("tenant %s: %.0f calls at its server, worst 1 s window %.0f (max + burst "
			      "%.0f), client ok %.0f errors %.0f p99 %.1f ms\n",
			      rel[1 + 2 * t], requests, window, MAX / NODES + BURST,
			      kt_httpfx_num(cli[t], "ok"), kt_httpfx_num(cli[t], "errors"),
			      kt_httpfx_num(cli[t], "p99_ms"));
		assert_true(kt_httpfx_num(cli[t], "errors") == 0);
		assert_true(window <= MAX / NODES + BURST + LAG_CALLS);
		/* its own pool, kept busy */
		assert_true(requests >= 0.8 * MAX / NODES * RUN_S);
		free(cli[t]);
		free(sum[t]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_three_nodes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kill9, setup, teardown),
		cmocka_unit_test_setup_teardown(test_restart, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_killed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_join, setup, teardown),
		cmocka_unit_test_setup_teardown(test_groups, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
