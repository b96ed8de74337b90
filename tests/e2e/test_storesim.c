// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* kt-storesim at a small size: 100 nodes x 10 members against its own
 * redis-server through the real store code. Asserts the figures from its
 * --json, not only its exit status: one round trip per heartbeat, the
 * heartbeat script's server time measured (its 1 ms target is make
 * bench's: a timed test on a shared VM would judge the VM), every steady answer AGREE
 * at N x M, and after 10 nodes die at once every survivor AGREE at
 * (N - K) x M within staleAfter + 2 heartbeats (and not before the dead
 * could have lapsed). The same again with --share demand, plus: no answer's
 * `granted` above the pool rate, the grants stored in Redis summing to at
 * most the pool rate (and close to it: the pool is oversubscribed), and
 * saturated members granted more than the others. With --share weighted
 * (member k weighing 3 when k % 4 == 0, else 1) the same, plus every answer's
 * weights summing to the pool's (1,500) and the saturated members' grants
 * 3:1 by weight. With --share classes (weighted, plus critical members
 * k % 5 == 0 and batch the others, batch's floor 10% of the pool) no grant
 * violation, critical's demand fitting beside batch's floor, every
 * saturated critical member holding its demand and batch at least its
 * floor. With --groups (groupBy
 * at the store level): 10 nodes x 20 groups of 50 in all, a 300 ms
 * heartbeat, still one round trip per node per heartbeat and every group
 * AGREE at its own size (its live nodes x M), at the start and after 2
 * nodes die. Also that bad input is refused with exit 2 and one line
 * naming the option. No root needed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ktest.h"

#define NODES 100
#define MEMBERS 10
#define HB_MS 500 /* half the default: the kill phase, staleAfter + 2 beats, in half the time */
#define STALE_AFTER 3
#define DURATION_S 3
#define KILL 10
#define POOL_RATE 10000.0

static char *g_out; /* the tool's output; freed by teardown when an assert jumps out */

static int teardown(void **state)
{
	(void)state;
	free(g_out);
	g_out = NULL;
	return 0;
}

static double num(const char *json, const char *key)
{
	double v;

	if (!ktest_json_num(json, key, &v))
		fail_msg("kt-storesim --json has no \"%s\"", key);
	return v;
}

/* Runs 100 x 10 with --share `share` and asserts the targets both modes share. */
static const char *run_fleet(const char *share, int *rc_out)
{
	const char *out;
	double hb, rt, p99, late, kill_ms, start_ms, bound;
	char label[32];
	int rc;

	/* staleAfter 3 is the default; checked below */
	rc = ktest_run_bin("tools/kt-storesim", &g_out, "--nodes", "100", "--members", "10", "--duration", "3",
			   "--heartbeat-ms", "500", "--kill", "10", "--share", share, "--json", NULL);
	out = g_out;
	print_message("%s", out);
	snprintf(label, sizeof(label), "\"share\":\"%s\"", share);
	assert_non_null(strstr(out, label));
	assert_non_null(strstr(out, "{\"nodes\":"));
	assert_int_equal(num(out, "nodes"), NODES);
	assert_int_equal(num(out, "members"), MEMBERS);
	assert_int_equal(num(out, "kill"), KILL);
	assert_int_equal(num(out, "heartbeat_ms"), HB_MS);
	assert_int_equal(num(out, "stale_after"), STALE_AFTER);

	/* it ran the whole steady state on schedule: N heartbeats a second,
	 * each on time, and the slow log caught the first half's scripts */
	hb = num(out, "steady_heartbeats");
	assert_true(hb >= 0.95 * NODES * DURATION_S * 1000 / HB_MS &&
		    hb <= 1.05 * NODES * DURATION_S * 1000 / HB_MS);
	assert_true(num(out, "script_samples") >= 0.45 * hb);
	late = num(out, "lateness_p99_ms");
	assert_true(late < 50.0); /* a twentieth of the default period */
	assert_int_equal(num(out, "errors"), 0);
	assert_int_equal(num(out, "steady_not_agree"), 0);

	/* exactly one exchange per heartbeat: 2 (or an uncounted 0) fails */
	rt = num(out, "round_trips_per_heartbeat");
	assert_true(rt >= 0.999 && rt <= 1.0);

	/* measured, not judged: the script's server time is the VM's as much
	 * as ours (this size has measured a p99 of 0.3-0.9 ms on a quiet
	 * machine and 1.3-4.3 ms on a busy one, the code unchanged). The 1 ms
	 * target is make bench's, at 1,000 x 10. */
	p99 = num(out, "script_p99_us");
	assert_true(p99 > 0);
	assert_true(num(out, "rtt_p99_us") > 0);
	assert_true(num(out, "redis_cpu_pct") > 0);

	/* joining over one period, then two heartbeats each */
	start_ms = num(out, "agree_start_ms");
	assert_true(start_ms > 0 && start_ms <= 3 * HB_MS + 250);
	/* the dead lapse staleAfter heartbeats after their last one (at most
	 * one period before the kill), then two heartbeats each */
	bound = num(out, "agree_bound_ms");
	assert_int_equal(bound, (STALE_AFTER + 2) * HB_MS);
	kill_ms = num(out, "agree_after_kill_ms");
	assert_true(kill_ms > (STALE_AFTER - 1) * HB_MS && kill_ms <= bound);
	/* every verdict but the script's time (see above); the tool exits 1
	 * for a missed target, 0 when all were met */
	assert_int_equal(num(out, "ok_round_trips"), 1);
	assert_int_equal(num(out, "ok_kill"), 1);
	assert_int_equal(num(out, "ok_start"), 1);
	assert_int_equal(num(out, "ok_steady"), 1);
	assert_int_equal(rc, num(out, "pass") == 1 ? 0 : 1);
	*rc_out = rc;
	return out;
}

static void test_small_fleet_meets_targets(void **state)
{
	const char *out;
	int rc;

	(void)state;
	if (!ktest_find_prog("redis-server"))
		skip();
	out = run_fleet("equal", &rc);
	assert_null(strstr(out, "grant_violations"));
	(void)rc;
}

static void test_small_fleet_demand_meets_targets(void **state)
{
	const char *out;
	double sum;
	int rc;

	(void)state;
	if (!ktest_find_prog("redis-server"))
		skip();
	out = run_fleet("demand", &rc);
	assert_true(num(out, "pool_rate") == POOL_RATE);
	/* floor = pool rate / pool size / 10; level cached half a heartbeat */
	assert_true(num(out, "floor_rate") == POOL_RATE / (NODES * MEMBERS) / 10);
	assert_int_equal(num(out, "recompute_ms"), HB_MS / 2);
	/* every answer checked, none above the pool rate */
	assert_true(num(out, "answers") >= num(out, "steady_heartbeats"));
	assert_int_equal(num(out, "grant_violations"), 0);
	assert_true(num(out, "granted_max") <= POOL_RATE + 1e-6);
	/* what Redis holds: one grant per live member, summing to at most the
	 * pool rate; demand exceeds it, so the sum is close to it */
	assert_int_equal(num(out, "grants_stored"), NODES * MEMBERS);
	sum = num(out, "grant_sum_stored");
	assert_true(sum <= POOL_RATE + 1e-6 && sum >= 0.95 * POOL_RATE);
	assert_int_equal(num(out, "grants_stored_after_kill"), (NODES - KILL) * MEMBERS);
	sum = num(out, "grant_sum_stored_after_kill");
	assert_true(sum <= POOL_RATE + 1e-6 && sum >= 0.95 * POOL_RATE);
	/* shared by demand, not equally: saturated members above an equal
	 * share, the others below it */
	assert_true(num(out, "grant_mean_saturated") > POOL_RATE / (NODES * MEMBERS));
	assert_true(num(out, "grant_mean_other") < POOL_RATE / (NODES * MEMBERS));
	assert_int_equal(num(out, "ok_grants"), 1);
	(void)rc;
}

static void test_small_fleet_weighted_meets_targets(void **state)
{
	const char *out;
	double ratio;
	int rc;

	(void)state;
	if (!ktest_find_prog("redis-server"))
		skip();
	out = run_fleet("weighted", &rc);
	assert_true(num(out, "pool_rate") == POOL_RATE);
	assert_int_equal(num(out, "grant_violations"), 0);
	assert_int_equal(num(out, "grants_stored"), NODES * MEMBERS);
	assert_int_equal(num(out, "ok_grants"), 1);
	/* 250 members of weight 3, 750 of weight 1 */
	assert_true(num(out, "pool_weight") == 1500);
	assert_true(num(out, "weights_min") == 1500 && num(out, "weights_max") == 1500);
	/* saturated members capped by the level: 3:1 by weight */
	assert_true(num(out, "samples_w3") > 0 && num(out, "samples_w1") > 0);
	ratio = num(out, "grant_ratio_w3_w1");
	assert_true(ratio >= 2.85 && ratio <= 3.15);
	assert_int_equal(num(out, "ok_ratio"), 1);
	(void)rc;
}

static void test_small_fleet_classes_meets_targets(void **state)
{
	const char *out;
	int rc;

	(void)state;
	if (!ktest_find_prog("redis-server"))
		skip();
	out = run_fleet("classes", &rc);
	assert_true(num(out, "pool_rate") == POOL_RATE);
	assert_int_equal(num(out, "grant_violations"), 0);
	assert_int_equal(num(out, "grants_stored"), NODES * MEMBERS);
	assert_int_equal(num(out, "ok_grants"), 1);
	/* critical's demand (about 64% of the pool) fits beside batch's floor:
	 * its saturated members (k % 35 == 0: 29) hold their demand */
	assert_int_equal(num(out, "crit_fits"), 1);
	assert_int_equal(num(out, "sat_crit"), 29);
	assert_int_equal(num(out, "sat_crit_short"), 0);
	assert_int_equal(num(out, "ok_crit"), 1);
	/* batch wants far more than its floor and gets at least that */
	assert_true(num(out, "batch_granted_stored") >= 0.99 * 0.1 * POOL_RATE);
	assert_int_equal(num(out, "ok_batch"), 1);
	(void)rc;
}

/* 10 nodes x 20 groups of 50: node i has groups 5i..5i+19 (mod 50), so each
 * group is on 4 nodes; all 20 in one heartbeat call. Runs kt-storesim on
 * that fleet with redisStore.leases `leases` and checks what holds either
 * way: no error, every group AGREE in the steady state (counted per group
 * answer: every group at 4 x 10, every heartbeat), agreed at the start,
 * and every survivor's every group at its survivors x 10 within the kill
 * bound. Returns the JSON. */
static const char *group_fleet(const char *leases)
{
	const char *out;
	double bound, kill_ms;

	ktest_run_bin("tools/kt-storesim", &g_out, "--nodes", "10", "--groups", "20", "--groups-total", "50",
		      "--heartbeat-ms", "300", "--duration", "1", "--kill", "2", "--leases", leases, "--json",
		      NULL);
	out = g_out;
	print_message("%s", out);
	assert_non_null(strstr(out, "{\"nodes\":"));
	assert_int_equal(num(out, "errors"), 0);
	assert_int_equal(num(out, "steady_not_agree"), 0);
	assert_true(num(out, "agree_start_ms") > 0);
	bound = num(out, "agree_bound_ms");
	assert_int_equal(bound, (STALE_AFTER + 2) * 300);
	kill_ms = num(out, "agree_after_kill_ms");
	assert_true(kill_ms > 0 && kill_ms <= bound);
	assert_int_equal(num(out, "ok_start"), 1);
	assert_int_equal(num(out, "ok_kill"), 1);
	return out;
}

static void test_groups_one_round_trip_every_group_agrees(void **state)
{
	const char *out;
	double rt, hb;

	(void)state;
	if (!ktest_find_prog("redis-server"))
		skip();
	out = group_fleet("member");
	assert_int_equal(num(out, "groups"), 20);
	assert_int_equal(num(out, "groups_total"), 50);
	assert_int_equal(num(out, "group_nodes_min"), 4);
	assert_int_equal(num(out, "group_nodes_max"), 4);
	hb = num(out, "steady_heartbeats");
	assert_true(hb >= 0.9 * 10 * 1 * 1000 / 300);
	/* 20 limits, one exchange */
	rt = num(out, "round_trips_per_heartbeat");
	assert_true(rt >= 0.999 && rt <= 1.0);
	assert_true(num(out, "script_per_limit_p99_us") > 0);
	assert_int_equal(num(out, "ok_round_trips"), 1);
	assert_int_equal(num(out, "ok_steady"), 1);
}

/* The same fleet with redisStore.leases: node: in the steady state a node
 * sends node.lua alone (its 20 groups unchanged: none sent), and every
 * survivor still agrees within the kill bound. */
static void test_groups_node_leases(void **state)
{
	const char *out;
	double sent, rt;

	(void)state;
	if (!ktest_find_prog("redis-server"))
		skip();
	out = group_fleet("node");
	assert_non_null(strstr(out, "\"leases\":\"node\""));
	sent = num(out, "limits_sent_per_heartbeat");
	assert_true(sent >= 0 && sent < 2); /* of 20 */
	rt = num(out, "round_trips_per_heartbeat");
	assert_true(rt >= 0.999 && rt <= 1.1);
	assert_true(num(out, "commands_per_heartbeat") < 30);
}

static void test_bad_input_exits_2_naming_it(void **state)
{
	static const struct {
		const char *opt, *val;
	} bad[] = {
		{ "--nodes", "0" },    { "--members", "x" },   { "--heartbeat-ms", "-5" },
		{ "--stale-after", "" }, { "--duration", "1e3" }, { "--redis", "nohost" },
		{ "--threads", "65" }, { "--kill", "100" },    { "--share", "fair" },
		{ "--groups", "0" },   { "--groups-total", "x" },  { "--leases", "pod" },
		/* 1 group a node cannot cover 1000 over 100 nodes */
		{ "--groups-total", "1000" },
	};
	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		/* --kill 100 of 100 nodes leaves no survivor */
		assert_int_equal(ktest_run_bin("tools/kt-storesim", &g_out, "--nodes", "100", bad[i].opt,
					       bad[i].val, NULL),
				 2);
		assert_true(ktest_is_one_line(g_out));
		assert_non_null(strstr(g_out, bad[i].opt));
		teardown(NULL);
	}
	assert_int_equal(ktest_run_bin("tools/kt-storesim", &g_out, "--nodes", "10", "--no-such", NULL), 2);
	assert_true(ktest_is_one_line(g_out));
	assert_non_null(strstr(g_out, "--no-such"));
	teardown(NULL);
	/* demand shares one limit per node only */
	assert_int_equal(ktest_run_bin("tools/kt-storesim", &g_out, "--nodes", "10", "--groups", "2", "--share",
				       "demand", NULL),
			 2);
	assert_true(ktest_is_one_line(g_out));
	assert_non_null(strstr(g_out, "--groups"));
	teardown(NULL);
	/* more groups a node than in all */
	assert_int_equal(ktest_run_bin("tools/kt-storesim", &g_out, "--nodes", "10", "--groups", "20",
				       "--groups-total", "10", NULL),
			 2);
	assert_true(ktest_is_one_line(g_out));
	assert_non_null(strstr(g_out, "--groups"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_bad_input_exits_2_naming_it, teardown),
		cmocka_unit_test_teardown(test_small_fleet_meets_targets, teardown),
		cmocka_unit_test_teardown(test_small_fleet_demand_meets_targets, teardown),
		cmocka_unit_test_teardown(test_small_fleet_weighted_meets_targets, teardown),
		cmocka_unit_test_teardown(test_small_fleet_classes_meets_targets, teardown),
		cmocka_unit_test_teardown(test_groups_one_round_trip_every_group_agrees, teardown),
		cmocka_unit_test_teardown(test_groups_node_leases, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
