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
 * windows still hold. */
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
	kt_clusterfx_nodes_end(fx.d, NODES, NULL, NULL);
	rp_stop(&fx.rp);
	kt_clusterfx_cgroups_end(fx.cg, NODES);
	if (fx.tmp[0])
		ktest_rmtree(fx.tmp);
	return 0;
}

/* Redis and the three nodes, agreed on a pool of three. */
static void start_pool(void)
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
	kt_clusterfx_run_nodes(fx.d, NODES, dump_node);
	for (int t = 0;; t++) {
		int good = 0;

		for (int i = 0; i < NODES; i++) {
			struct kt_clusterfx_lst s;

			if (kt_clusterfx_lst_get(&fx.d[i], LIMIT, &s) && kt_clusterfx_agreed(&s, NODES))
				good++;
		}
		if (good == NODES)
			break;
		if (t > 250) {
			for (int i = 0; i < NODES; i++)
				dump_node(i);
			fail_msg("no agreement on a pool of %d within 5 s", NODES);
		}
		ktest_sleep_ms(20);
	}
}

/* Clients on every node for RUN_S; kill_at_s >= 0: n2's daemon is killed
 * (SIGKILL) that long after they start. */
static void run(const char *name, double kill_at_s)
{
	char url[64], out[NODES][PATH_MAX + 32], *srv, *cli[NODES];
	double ok = 0, requests, window;

	kt_httpfx_serve(&fx.server, fx.tmp, "none");
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/call", fx.server.port);
	for (int i = 0; i < NODES; i++) {
		snprintf(out[i], sizeof(out[i]), "%s/client%d.json", fx.tmp, i);
		fx.client[i] = kt_httpfx_client_spawn(fx.cg[i], "http.client", url, CONNS, RUN_S,
						      out[i]);
	}
	if (kill_at_s >= 0) {
		ktest_sleep_ms((int)(kill_at_s * 1000));
		print_message("%s: kill -9 n2's daemon %.1f s in\n", name, kill_at_s);
		assert_int_equal(ktest_daemon_signal_wait(&fx.d[2], SIGKILL), 128 + SIGKILL);
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
		if (i != 2 || kill_at_s < 0)
			assert_true(kt_httpfx_num(cli[i], "errors") == 0);
	}
	print_message("%s: %.0f calls at the server in %.2f s, worst 1 s window %.0f (max + burst "
		      "%.0f), clients saw %.0f answered\n",
		      name, requests, kt_httpfx_num(srv, "last") - kt_httpfx_num(srv, "first"),
		      window, MAX + BURST, ok);
	assert_true(requests >= ok);
	assert_true(window <= MAX + BURST + LAG_CALLS);
	/* the pool kept the limit busy */
	assert_true(requests >= 0.8 * MAX * RUN_S);
	for (int i = 0; i < NODES; i++)
		free(cli[i]);
	free(srv);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_three_nodes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kill9, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
