// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Weighted shares across three nodes and one Redis. One datagram limit,
 * 200/s burst 20, share: demand, weighed by the cgroup pattern's capture
 * {tier} with weights {prod: 3, batch: 0.5}: a production member on node 0
 * and a batch member on each of nodes 1 and 2, so the sides weigh 3:1.
 * Every member floods (400/s) to its side's port; an outside observer per
 * side (tests/lib/arrivals, 100 ms bins on kernel receive timestamps) must
 * see:
 *   - both sides flooding: production 75% +- 3% of what arrives;
 *   - production idle: batch at >= 95% of max (it borrows what production
 *     leaves; the idle member keeps only its floor, a tenth of an equal
 *     share);
 *   - production busy again: its bucket back at 90% of its weighted share
 *     within two heartbeats (plus the demand window, ticks and the poll);
 *   - in every one-second window, sliding by 100 ms, prod + batch <= max +
 *     burst, from the first datagram to the end;
 *   - test_kill9: node 0's daemon killed -9 while everything floods (its pod
 *     sends on, on what its kernel was left): the same bound throughout,
 *     and the batch members' grants taking production's share within
 *     staleAfter + its hold + 2 heartbeats of the kill.
 * Each receiver must drop nothing and see exactly what its senders were
 * told was sent. status shows each member's weight and where it came from.
 * About 35 s. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "arrivals.h"
#include "kt_clusterfx.h"
#include "kt_storefx.h"
#include "ktest.h"
#include "redis_proc.h"

#define NODES 3
#define MAX 200.0
#define BURST 20.0
#define PER_S 400     /* each member's offer: twice the whole pool */
#define HB_MS 200
#define TICK_MS 50
#define STALE 3
#define LIMIT "llm"
#define PROD 0        /* arrivals / side index */
#define BATCH 1

/* member m: on node node_of[m], tier tier_of[m] (side side_of[m]) */
#define MEMBERS 3
_Static_assert(MEMBERS == NODES, "a sender per node: the cluster fixture's teardown reaps them");
static const int node_of[MEMBERS] = { 0, 1, 2 };
static const char *const tier_of[MEMBERS] = { "prod", "batch", "batch" };
/* test_priority_classes: the same layout, production's class "critical" */
static const char *const class_of[MEMBERS] = { "critical", "batch", "batch" };
static const int side_of[MEMBERS] = { PROD, BATCH, BATCH };

static struct fixture {
	struct ktest_daemon d[NODES];
	char base[NODES][PATH_MAX];     /* node i's cgroup: base/{tier}/m are its members */
	char cg[MEMBERS][PATH_MAX];     /* member m's cgroup */
	char tierdir[MEMBERS][PATH_MAX];
	pid_t sender[MEMBERS];
	int sender_fd[MEMBERS];
	unsigned long long sent[2];     /* per side: what the senders were told was sent */
	struct arrivals arr[2];         /* per side */
	int test;                       /* which test of the run: its key prefix */
	bool classes;                   /* classBy instead of weightBy */
	int metrics_port[NODES];
} fx;

static const struct kt_clusterfx_pool pool = { TICK_MS, HB_MS, STALE, 2000 };

static int setup(void **state)
{
	static int tests;

	(void)state;
	kt_clusterfx_begin(&fx, sizeof(fx), fx.d, NODES, fx.sender, fx.sender_fd);
	fx.test = ++tests;
	fx.arr[0].fd = fx.arr[1].fd = -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	kt_clusterfx_nodes_end(fx.d, NODES, fx.sender, fx.sender_fd);
	for (int s = 0; s < 2; s++)
		arrivals_stop(&fx.arr[s]);
	for (int m = 0; m < MEMBERS; m++) {
		if (fx.cg[m][0])
			ktest_cgroup_destroy(fx.cg[m]);
		if (fx.tierdir[m][0])
			rmdir(fx.tierdir[m]);
	}
	kt_clusterfx_cgroups_end(fx.base, NODES);
	return 0;
}

static void dump_node(int i)
{
	kt_clusterfx_dump_node(&fx.d[i], i, 40);
}

/* Node i's cgroups (base/{tier}/m for its members) and config, started. */
static void node_up(int i)
{
	char name[16], store[256], limits[1024];

	snprintf(name, sizeof(name), "ktw%d", i);
	assert_int_equal(ktest_cgroup_create(name, fx.base[i], sizeof(fx.base[i])), 0);
	for (int m = 0; m < MEMBERS; m++) {
		if (node_of[m] != i)
			continue;
		snprintf(fx.tierdir[m], sizeof(fx.tierdir[m]), "%s/%s", fx.base[i],
			 fx.classes ? class_of[m] : tier_of[m]);
		assert_true(mkdir(fx.tierdir[m], 0755) == 0 || errno == EEXIST);
		snprintf(fx.cg[m], sizeof(fx.cg[m]), "%s/m", fx.tierdir[m]);
		assert_int_equal(mkdir(fx.cg[m], 0755), 0);
	}
	snprintf(limits, sizeof(limits),
		 "  - {name: " LIMIT ", cgroups: [\"%s/{tier}/*\"], unit: datagram, scope: pod,\n"
		 "     share: demand, %s,\n"
		 "     burst: %g, rateLimit: {max: %g}}\n",
		 fx.base[i],
		 fx.classes ? "classBy: \"capture:tier\", classes: [{name: critical}, {name: batch, floor: 10%}]"
			    : "weightBy: \"capture:tier\", weights: {prod: 3, batch: 0.5}",
		 BURST, MAX);
	fx.metrics_port[i] = ktest_free_port(SOCK_STREAM);
	snprintf(limits + strlen(limits), sizeof(limits) - strlen(limits), "metrics: 127.0.0.1:%d\n",
		 fx.metrics_port[i]);
	/* each test its own keys */
	snprintf(store, sizeof(store),
		 "{mode: single, url: \"redis://127.0.0.1:%d/0\", keyPrefix: ktwt%dt%d}", kfx_master.port,
		 (int)getpid(), fx.test);
	assert_int_equal(ktest_daemon_init(&fx.d[i]), 0);
	kt_clusterfx_node_config(&fx.d[i], i, &pool, store, limits);
}

/* cmocka: every node agreed at MEMBERS within 5 s. */
static void wait_agreed(void)
{
	uint64_t t0 = ktest_now_ns();

	for (int i = 0; i < NODES; i++) {
		struct kt_clusterfx_lst s;

		while (kt_clusterfx_lst_get(&fx.d[i], LIMIT, &s), !kt_clusterfx_agreed(&s, MEMBERS)) {
			if (ktest_now_ns() - t0 > 5000000000ULL) {
				dump_node(i);
				fail_msg("n%d: not agreed at %d in 5 s (phase %s, size %g)", i, MEMBERS,
					 s.phase, s.size);
			}
			ktest_sleep_ms(20);
		}
	}
}

static void sleep_until(double t)
{
	double now = arrivals_now_s(&fx.arr[0]);

	if (t > now)
		ktest_sleep_ms((int)((t - now) * 1000));
}

static void sender_start(int m, double secs)
{
	assert_true(fx.sender[m] <= 0);
	fx.sender[m] = kt_clusterfx_sender_start(fx.cg[m], &fx.arr[side_of[m]].port, 1, secs, PER_S,
						 &fx.sender_fd[m]);
}

static void sender_wait(int m)
{
	struct kt_clusterfx_sent r;

	assert_true(kt_clusterfx_sender_wait(&fx.sender[m], &fx.sender_fd[m], m, &r));
	print_message("sender m%d (%s on n%d): ok=%llu refused=%llu errors=%llu\n", m, tier_of[m],
		      node_of[m], r.ok[0], r.refused[0], r.errors[0]);
	assert_int_equal(r.errors[0], 0);
	fx.sent[side_of[m]] += r.ok[0];
}

/* Datagrams of `side` (-1: both) that arrived in [from, to). */
static double got(int side, double from, double to)
{
	if (side < 0)
		return (double)(arrivals_sum(&fx.arr[0], from, to) + arrivals_sum(&fx.arr[1], from, to));
	return (double)arrivals_sum(&fx.arr[side], from, to);
}

/* The whole measurement, both sides; then the promise over all of it. */
static void check_all(const char *name, double t0)
{
	double end, at = 0;
	unsigned long worst;

	ktest_sleep_ms(200);
	end = arrivals_now_s(&fx.arr[0]);
	for (int s = 0; s < 2; s++) {
		char tag[48];

		snprintf(tag, sizeof(tag), "%s: %s", name, s == PROD ? "prod" : "batch");
		kt_clusterfx_check_measurement(&fx.arr[s], tag, fx.sent[s]);
		arrivals_print(&fx.arr[s], tag, t0, end);
	}
	worst = arrivals_worst_window_of((const struct arrivals *[]){ &fx.arr[0], &fx.arr[1] }, 2, 0,
					 end, &at);
	print_message("%s: prod + batch: worst window %lu at %.1f s (max %g + burst %g)\n", name, worst,
		      at - t0, MAX, BURST);
	assert_true(worst <= MAX + BURST);
}

/* A member's weight as status shows it (its node's json), -1 if absent. */
static double status_weight(int m)
{
	char *js = ktest_daemon_cmd(&fx.d[node_of[m]], "status json");
	const char *p = js ? strstr(js, "\"weight\":") : NULL;
	double w = -1;

	if (p && strstr(p, "\"weight_from\":\"value\""))
		w = strtod(p + strlen("\"weight\":"), NULL);
	free(js);
	return w;
}

static void start_all(void)
{
	for (int s = 0; s < 2; s++)
		assert_int_equal(arrivals_start(&fx.arr[s]), 0);
	for (int i = 0; i < NODES; i++)
		node_up(i);
	kt_clusterfx_run_nodes(fx.d, NODES, dump_node);
	wait_agreed();
	for (int m = 0; m < MEMBERS && !fx.classes; m++)
		assert_true(status_weight(m) == (side_of[m] == PROD ? 3 : 0.5));
}

/* Node i's kthrottle_borrowed for its one member (-1: none). */
static double borrowed_on(int i)
{
	char *page = NULL;
	const char *p;
	double x = -1;

	assert_int_equal(ktest_http_get(fx.metrics_port[i], "/metrics", &page), 200);
	p = strstr(page, "\nkthrottle_borrowed{limit=\"" LIMIT "\"");
	if (p && (p = strchr(p + 1, '}')))
		x = strtod(p + 1, NULL);
	free(page);
	return x;
}

/* Node 0's production bucket: seconds from `from` (arrivals clock) until
 * its rate reaches 90% of `want`, polled; -1 if not within `limit_s`. */
static double prod_reaches(double from, double want, double limit_s)
{
	struct kt_clusterfx_lst st;

	while (arrivals_now_s(&fx.arr[0]) < from + limit_s) {
		if (kt_clusterfx_lst_get(&fx.d[0], LIMIT, &st) && st.bucket_rate >= 0.9 * want)
			return arrivals_now_s(&fx.arr[0]) - from;
		ktest_sleep_ms(20);
	}
	return -1;
}

/* 3:1 while both flood; batch borrows what idle production leaves; back to
 * 3:1 within two heartbeats of production turning busy. */
static void test_weights_3_to_1(void **state)
{
	const double settle = 2, measure = 3, idle = 4, back = 3;
	double t0, t_idle, t_back, prod, batch, share, grow;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_all();
	t0 = arrivals_now_s(&fx.arr[0]);
	sender_start(0, settle + measure);
	sender_start(1, settle + measure + idle + back);
	sender_start(2, settle + measure + idle + back);

	/* 1. both sides flood */
	sleep_until(t0 + settle + measure + 0.05);
	prod = got(PROD, t0 + settle, t0 + settle + measure);
	batch = got(BATCH, t0 + settle, t0 + settle + measure);
	share = prod / (prod + batch);
	print_message("flooding: prod %.1f/s, batch %.1f/s: prod %.1f%% of %.1f/s (max %g)\n",
		      prod / measure, batch / measure, 100 * share, (prod + batch) / measure, MAX);
	assert_true(fabs(share - 0.75) <= 0.03);

	/* 2. production idle (its sender has ended); its demand is the
	 * largest of the last whole epoch (1 s), the running one and the last
	 * 100 ms, so it falls to nothing within 2 s */
	sender_wait(0);
	t_idle = arrivals_now_s(&fx.arr[0]);
	sleep_until(t_idle + idle);
	batch = got(BATCH, t_idle + 2.2, t_idle + idle);
	print_message("production idle: batch %.1f/s (%.1f%% of max %g), prod %.1f/s\n",
		      batch / (idle - 2.2), 100 * batch / (idle - 2.2) / MAX, MAX,
		      got(PROD, t_idle + 2.2, t_idle + idle) / (idle - 2.2));
	assert_true(batch / (idle - 2.2) >= 0.95 * MAX);
	/* a batch member's guaranteed part is 200 x 0.5 / 4 = 25/s; it runs
	 * near 100/s: the rest it borrows from idle production */
	{
		double bb = borrowed_on(1);

		print_message("production idle: batch member on n1 borrows %.1f/s\n", bb);
		assert_true(bb >= 0.25 * MAX);
	}

	/* 3. production busy again: its weighted share (150/s) within two
	 * heartbeats, plus the 100 ms demand window, a tick to see it and a
	 * tick to write the grant, and the poll */
	t_back = arrivals_now_s(&fx.arr[0]);
	sender_start(0, back - 0.2);
	grow = prod_reaches(t_back, 0.75 * MAX, back - 0.5);
	print_message("production busy again: its bucket at 90%% of %.0f/s after %.2f s\n", 0.75 * MAX,
		      grow);
	assert_true(grow >= 0 && grow <= 2 * HB_MS / 1000.0 + 0.1 + 2 * TICK_MS / 1000.0 + 0.2);
	sleep_until(t_back + back);
	prod = got(PROD, t_back + 1, t_back + back - 0.3);
	batch = got(BATCH, t_back + 1, t_back + back - 0.3);
	print_message("busy again: prod %.1f%% of what arrived\n", 100 * prod / (prod + batch));
	assert_true(fabs(prod / (prod + batch) - 0.75) <= 0.03);
	for (int m = 0; m < MEMBERS; m++)
		sender_wait(m);
	check_all("weights", t0);
}

/* kill -9 of node 0's daemon (production) while everything floods: within
 * the bound throughout; once production's member lapses (staleAfter
 * heartbeats) the store holds back only its kernel's fallback (conservative:
 * min / size, 66.7/s, for fallbackFor), and the batch members share the
 * rest: (200 - 66.7) / 2 each, at their next heartbeat. The same with
 * classes (critical on node 0: before the kill batch is at its floor). */
static void kill9_run(const char *name)
{
	const double before = 2.5, after = 5;
	double t0, t_kill, t_batch = -1;

	start_all();
	t0 = arrivals_now_s(&fx.arr[0]);
	for (int m = 0; m < MEMBERS; m++)
		sender_start(m, before + after);
	sleep_until(t0 + before);
	t_kill = arrivals_now_s(&fx.arr[0]);
	print_message("kill -9 n0 at t=%.2fs\n", t_kill - t0);
	assert_int_equal(ktest_daemon_signal_wait(&fx.d[0], SIGKILL), 128 + SIGKILL);
	/* node 1's batch bucket: from its weighted share (25/s) to half of
	 * what production's lapse leaves */
	while (arrivals_now_s(&fx.arr[0]) < t_kill + after - 0.5) {
		struct kt_clusterfx_lst st;

		if (kt_clusterfx_lst_get(&fx.d[1], LIMIT, &st) &&
		    st.bucket_rate >= 0.9 * (MAX - MAX / MEMBERS) / 2) {
			t_batch = arrivals_now_s(&fx.arr[0]) - t_kill;
			break;
		}
		ktest_sleep_ms(20);
	}
	print_message("%s: n1's batch bucket at 90%% of %.1f/s %.2f s after the kill\n", name,
		      (MAX - MAX / MEMBERS) / 2, t_batch);
	for (int m = 0; m < MEMBERS; m++)
		sender_wait(m);
	check_all(name, t0);
	/* staleAfter heartbeats (the lapse), two heartbeats, the demand
	 * window, ticks and the poll */
	assert_true(t_batch >= 0 &&
		    t_batch <= STALE * HB_MS / 1000.0 + 2 * HB_MS / 1000.0 + 0.1 + 2 * TICK_MS / 1000.0 + 0.2);
}

static void test_kill9(void **state)
{
	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	kill9_run("kill9");
}

/* kill -9 of the node holding the critical pod while everything floods */
static void test_kill9_classes(void **state)
{
	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	fx.classes = true;
	kill9_run("kill9-classes");
}

/* A paced sender at per_s from member m for secs. */
static void sender_at(int m, double secs, int per_s)
{
	assert_true(fx.sender[m] <= 0);
	fx.sender[m] = kt_clusterfx_sender_start(fx.cg[m], &fx.arr[side_of[m]].port, 1, secs, per_s,
						 &fx.sender_fd[m]);
}

/* The part of the divided rate class `name` was given at node 0's last
 * heartbeat, as its status shows it (-1: absent). */
static double class_part(const char *name)
{
	char *js = ktest_daemon_cmd(&fx.d[0], "status json"), want[64];
	const char *p = NULL;
	double x = -1;

	snprintf(want, sizeof(want), "{\"name\":\"%s\",", name);
	if (js && (p = strstr(js, want)) && (p = strstr(p, "\"part\":")))
		x = strtod(p + strlen("\"part\":"), NULL);
	free(js);
	return x;
}

/* Priority classes: critical (node 0) before batch (nodes 1 and 2, a floor
 * of 10% of max between them). Critical at 80% of max gets it, batch the
 * rest (less critical's demand headroom, 10% + 1/s: a member is granted a
 * little more than it sends); critical at 150% gets max less batch's
 * floor, batch its floor; critical idle, batch takes the pool. Every
 * window within max + burst throughout. */
static void test_priority_classes(void **state)
{
	const double settle = 2, measure = 2.5, phase = settle + measure;
	double t0, crit, batch, t1, t2;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	fx.classes = true;
	start_all();
	for (int m = 0; m < MEMBERS; m++) {
		char *js = ktest_daemon_cmd(&fx.d[node_of[m]], "status json"), want[64];

		assert_non_null(js);
		snprintf(want, sizeof(want), "\"class\":\"%s\",\"class_from\":\"value\"", class_of[m]);
		assert_non_null(strstr(js, want));
		free(js);
	}
	t0 = arrivals_now_s(&fx.arr[0]);
	sender_at(0, phase, (int)(0.8 * MAX));
	sender_at(1, 3 * phase, PER_S);
	sender_at(2, 3 * phase, PER_S);

	/* 1. critical wants 80% */
	sleep_until(t0 + phase);
	crit = got(PROD, t0 + settle, t0 + phase) / measure;
	batch = got(BATCH, t0 + settle, t0 + phase) / measure;
	print_message("critical at 80%%: critical %.1f/s, batch %.1f/s (max %g)\n", crit, batch, MAX);
	assert_true(crit >= 0.95 * 0.8 * MAX);
	assert_true(batch >= 0.9 * (MAX - (1.1 * 0.8 * MAX + 1)));

	/* 2. critical wants 150%: max less batch's floor */
	sender_wait(0);
	t1 = arrivals_now_s(&fx.arr[0]);
	sender_at(0, phase, (int)(1.5 * MAX));
	sleep_until(t1 + phase);
	crit = got(PROD, t1 + settle, t1 + phase) / measure;
	batch = got(BATCH, t1 + settle, t1 + phase) / measure;
	print_message("critical at 150%%: critical %.1f/s, batch %.1f/s (floor %g)\n", crit, batch,
		      0.1 * MAX);
	assert_true(crit >= 0.95 * 0.9 * MAX && crit <= 0.9 * MAX + BURST);
	assert_true(batch >= 0.8 * 0.1 * MAX && batch <= 0.1 * MAX + BURST);
	/* what the store gave each class, in status; batch at its floor
	 * borrows nothing */
	{
		double pc = class_part("critical"), pb = class_part("batch"), bb = borrowed_on(1);

		print_message("critical at 150%%: parts critical %.1f/s, batch %.1f/s; batch member borrows %.2f/s\n",
			      pc, pb, bb);
		assert_true(fabs(pc - 0.9 * MAX) <= 0.02 * MAX);
		assert_true(fabs(pb - 0.1 * MAX) <= 0.02 * MAX);
		assert_true(bb >= 0 && bb <= 0.02 * MAX);
	}

	/* 3. critical idle: batch takes the pool */
	sender_wait(0);
	t2 = arrivals_now_s(&fx.arr[0]);
	sleep_until(t2 + phase);
	batch = got(BATCH, t2 + 2.2, t2 + phase) / (phase - 2.2);
	print_message("critical idle: batch %.1f/s\n", batch);
	assert_true(batch >= 0.9 * MAX);
	/* each batch member runs near half the pool, its guaranteed part is
	 * half of batch's floor: the rest is borrowed from critical */
	{
		double bb = borrowed_on(1);

		print_message("critical idle: batch member on n1 borrows %.1f/s\n", bb);
		assert_true(bb >= 0.35 * MAX);
	}
	for (int m = 1; m < MEMBERS; m++)
		sender_wait(m);
	check_all("classes", t0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_weights_3_to_1, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kill9, setup, teardown),
		cmocka_unit_test_setup_teardown(test_priority_classes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kill9_classes, setup, teardown),
	};

	return cmocka_run_group_tests(tests, kt_storefx_group_setup, kt_storefx_group_teardown);
}
