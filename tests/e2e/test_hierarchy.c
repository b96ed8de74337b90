// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* A hierarchy of limits (parent:) on one node, with a real daemon, member
 * cgroups sending real datagrams and loopback receivers counting what
 * arrives:
 *   - two children under a parent, and the parent's own cgroup, all
 *     flooding: what arrives from all three together stays within the
 *     parent's max x time + burst, each child's within its own, and the
 *     parent's refusals are reported as the parent's;
 *   - a call the parent refuses leaves the child's tokens where they were
 *     (the bucket read back from the pinned map);
 *   - with the parent pooled through Redis by demand, a child whose sibling
 *     is idle gets its own full rate;
 *   - a shadow parent (enforce: false) lets the children's calls through
 *     and counts what it would have refused. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <bpf/bpf.h>
#include <cmocka.h>

#include "kt_daemonfx.h"
#include "kt_storefx.h"
#include "kt_udpfx.h"
#include "ktest.h"
#include "redis_proc.h"
#include "kthrottle.h"

#define N_CG 3 /* the parent's own cgroup, child a's, child b's */

static struct fixture {
	struct ktest_daemon d;
	char cg[N_CG][PATH_MAX];
	int rx[N_CG];
} fx;

static int setup(void **state)
{
	static const char *const names[N_CG] = { "hier-p", "hier-a", "hier-b" };

	(void)state;
	if (!kt_daemonfx_begin(&fx, sizeof(fx), &fx.d))
		return 0;
	for (int i = 0; i < N_CG; i++)
		fx.rx[i] = -1;
	for (int i = 0; i < N_CG; i++)
		if (ktest_cgroup_create(names[i], fx.cg[i], sizeof(fx.cg[i])))
			return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < N_CG; i++)
		if (fx.rx[i] >= 0)
			close(fx.rx[i]);
	kt_daemonfx_end(&fx.d, fx.cg[0]);
	for (int i = 1; i < N_CG; i++)
		if (fx.cg[i][0])
			ktest_cgroup_destroy(fx.cg[i]);
	return 0;
}

/* kt-load flat out from all N_CG cgroups to their ports at once, for secs. */
static void flood_all(const int *port, double secs, struct ktest_load *res)
{
	const char *const cgs[N_CG] = { fx.cg[0], fx.cg[1], fx.cg[2] };

	kt_udpfx_load_all(N_CG, cgs, port, secs, NULL, res);
}

#define P_MAX 40.0
#define P_BURST 4.0
#define C_MAX 30.0
#define C_BURST 3.0
#define FLOOD_S 2.0

/* The config of the parent `all` (on cg[0], its own port[0]; `all_extra`
 * added to its flow mapping) and its children a and b (cg[1], cg[2]),
 * after `head` (top-level keys). */
static void family_config(char *body, size_t len, const char *head, const char *all_extra,
			  double all_max, const int *port)
{
	snprintf(body, len,
		 "tickInterval: 100ms\n"
		 "%s"
		 "limits:\n"
		 "  - {name: all, cgroups: [%s], unit: datagram, burst: %g, rateLimit: {max: %g},%s\n"
		 "     match: {cidrs: [127.0.0.1/32], ports: %d, protocol: udp}}\n"
		 "  - {name: a, parent: all, cgroups: [%s], unit: datagram, burst: %g, rateLimit: {max: %g},\n"
		 "     match: {cidrs: [127.0.0.1/32], ports: %d, protocol: udp}}\n"
		 "  - {name: b, parent: all, cgroups: [%s], unit: datagram, burst: %g, rateLimit: {max: %g},\n"
		 "     match: {cidrs: [127.0.0.1/32], ports: %d, protocol: udp}}\n",
		 head, fx.cg[0], P_BURST, all_max, all_extra, port[0], fx.cg[1], C_BURST, C_MAX, port[1],
		 fx.cg[2], C_BURST, C_MAX, port[2]);
}

static void test_children_and_parent_within_the_parent(void **state)
{
	struct ktest_load res[N_CG];
	unsigned long long got[N_CG], total = 0;
	int port[N_CG];
	char body[2048], *st;
	double a_throttled;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	for (int i = 0; i < N_CG; i++)
		fx.rx[i] = kt_udpfx_receiver(&port[i]);
	family_config(body, sizeof(body), "", "", P_MAX, port);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);

	flood_all(port, FLOOD_S, res);
	ktest_sleep_ms(50);
	for (int i = 0; i < N_CG; i++) {
		got[i] = kt_udpfx_drain(fx.rx[i]);
		total += got[i];
		assert_int_equal(got[i], res[i].ok);
	}
	st = ktest_daemon_cmd(&fx.d, "status json");
	assert_non_null(st);
	print_message("in %.1f s: parent's own %llu, a %llu, b %llu: %llu together (parent %g/s + %g); "
		      "refusals reported by all %.0f, by a %.0f\n",
		      FLOOD_S, got[0], got[1], got[2], total, P_MAX, P_BURST,
		      kt_daemonfx_events(st, "all", "share"), kt_daemonfx_events(st, "a", "share"));
	/* the parent's bound holds over all three (a tick of slack) */
	assert_true((double)total <= P_MAX * (FLOOD_S + 0.1) + P_BURST + 2);
	for (int i = 1; i < N_CG; i++)
		assert_true((double)got[i] <= C_MAX * (FLOOD_S + 0.1) + C_BURST + 2);
	/* and it is used: each of the three members has a third of it */
	assert_true((double)total >= 0.85 * P_MAX * FLOOD_S);
	for (int i = 0; i < N_CG; i++)
		assert_true((double)got[i] >= 0.7 * P_MAX / N_CG * FLOOD_S);
	/* status names each limit's parent */
	assert_non_null(strstr(ktest_json_limit_field(st, "a", "parent"), "\"all\""));
	assert_non_null(strstr(ktest_json_limit_field(st, "all", "parent"), "null"));
	/* the parent refused the children's calls: its events, not theirs */
	assert_true(kt_daemonfx_events(st, "all", "share") >= 1);
	assert_true(ktest_json_limit_num(st, "a", "throttled", &a_throttled));
	assert_true(a_throttled == (double)res[1].refused);
	free(st);
}

/* Tokens the bucket in `slot` of the daemon's pinned kt_buckets holds now. */
static double bucket_tokens(uint32_t slot)
{
	char path[400];
	struct kt_bucket b;
	struct timespec ts;
	int fd;

	snprintf(path, sizeof(path), "%s/kt_buckets", fx.d.pin_dir);
	fd = bpf_obj_get(path);
	assert_true(fd >= 0);
	assert_int_equal(bpf_map_lookup_elem(fd, &slot, &b), 0);
	close(fd);
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (double)kt_gcra_tokens_left(&b, (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec);
}

/* The bucket slot of limit `name`'s member with cgroup id cgid. */
static uint32_t member_slot(const char *name, uint64_t cgid)
{
	char *st = ktest_daemon_cmd(&fx.d, "status json"), key[64];
	const char *cg, *at;
	double slot = -1;

	assert_non_null(st);
	cg = ktest_json_limit_field(st, name, "cgroups");
	assert_non_null(cg);
	snprintf(key, sizeof(key), "\"cgroup_id\":%llu,\"slot\":", (unsigned long long)cgid);
	at = strstr(cg, key);
	assert_non_null(at);
	slot = atof(at + strlen(key));
	free(st);
	return (uint32_t)slot;
}

static void test_refused_call_leaves_child_tokens(void **state)
{
	struct ktest_load r;
	char body[2048];
	double before, after;
	uint32_t slot;
	int port;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	fx.rx[1] = kt_udpfx_receiver(&port);
	/* the child holds 50 tokens and refills slowly; the parent admits
	 * a few a second */
	snprintf(body, sizeof(body),
		 "tickInterval: 100ms\n"
		 "limits:\n"
		 "  - {name: top, cgroups: [%s], unit: datagram, burst: 2, rateLimit: {max: 4}}\n"
		 "  - {name: kid, parent: top, cgroups: [%s], unit: datagram, burst: 50,\n"
		 "     rateLimit: {max: 0.5}, match: {cidrs: [127.0.0.1/32], ports: %d, protocol: udp}}\n",
		 fx.cg[0], fx.cg[1], port);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
	slot = member_slot("kid", ktest_cgroup_id(fx.cg[1]));
	before = bucket_tokens(slot);
	assert_int_equal(ktest_load(fx.cg[1], "udp", "127.0.0.1", port, 0.5, &r), 0);
	after = bucket_tokens(slot);
	print_message("kid's bucket: %.0f tokens before, %.0f after %llu admitted and %llu refused by top\n",
		      before, after, r.ok, r.refused);
	assert_true(before == 50);
	assert_true(r.refused > 100);
	assert_true(r.ok >= 1 && r.ok <= 6);
	/* only the admitted calls took the child's tokens */
	assert_true(after >= before - (double)r.ok - 1 && after <= before - (double)r.ok + 1);
	assert_int_equal(kt_udpfx_drain(fx.rx[1]), r.ok);

	/* a reload keeps the parent's bucket for the child's member (in no
	 * kt_members list: found through the child's kt_up link), tokens and
	 * all, as it keeps the child's */
	{
		uint64_t cgid = ktest_cgroup_id(fx.cg[1]);
		uint32_t up = member_slot("top", cgid);
		char *out = NULL;

		assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-s", fx.d.socket, "reload", NULL), 0);
		free(out);
		assert_int_equal(member_slot("top", cgid), up);
		assert_int_equal(member_slot("kid", cgid), slot);
	}
}

static void test_idle_child_leaves_its_part(void **state)
{
	struct ktest_load warm, r;
	char body[2048];
	int port[N_CG];

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	for (int i = 0; i < N_CG; i++)
		fx.rx[i] = kt_udpfx_receiver(&port[i]);
	{
		char head[256];

		snprintf(head, sizeof(head),
			 "store:\n"
			 "  redisStore: {mode: single, url: \"redis://127.0.0.1:%d/0\"}\n"
			 "  heartbeat: 200ms\n",
			 kfx_master.port);
		family_config(body, sizeof(body), head, " share: demand,", P_MAX, port);
	}
	if (ktest_daemon_up(&fx.d, body)) {
		ktest_daemon_dump(&fx.d, "hier-redis", 20);
		fail();
	}
	/* a floods, b and the parent's own cgroup are idle: once the pool
	 * has seen the demand, a's part of the parent is all of it */
	assert_int_equal(ktest_load(fx.cg[1], "udp", "127.0.0.1", port[1], 2.0, &warm), 0);
	assert_int_equal(ktest_load(fx.cg[1], "udp", "127.0.0.1", port[1], FLOOD_S, &r), 0);
	print_message("a alone, after %.1f s of warm-up (%llu): %llu in %.1f s (its max %g/s, the parent's %g/s)\n",
		      2.0, warm.ok, r.ok, FLOOD_S, C_MAX, P_MAX);
	assert_true((double)r.ok >= 0.85 * C_MAX * FLOOD_S);
	assert_true((double)r.ok <= C_MAX * (FLOOD_S + 0.1) + C_BURST + 2);
	kt_udpfx_drain(fx.rx[1]);
}

static void test_shadow_parent_lets_children_through(void **state)
{
	struct ktest_load res[N_CG];
	double would;
	char body[2048];
	int port[N_CG];

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	for (int i = 0; i < N_CG; i++)
		fx.rx[i] = kt_udpfx_receiver(&port[i]);
	family_config(body, sizeof(body), "", " enforce: false,", 10, port);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
	flood_all(port, 2.0, res);
	assert_true(kt_daemonfx_status_num(&fx.d, "all", "would_refuse", &would));
	print_message("shadow parent (10/s): own %llu, a %llu, b %llu passed; it would have refused %.0f\n",
		      res[0].ok, res[1].ok, res[2].ok, would);
	/* the parent's own traffic passes whole; the children's up to their
	 * own limits, which alone decide */
	assert_int_equal(res[0].refused, 0);
	for (int i = 1; i < N_CG; i++) {
		assert_true((double)res[i].ok >= 0.85 * C_MAX * 2.0);
		assert_true((double)res[i].ok <= C_MAX * 2.1 + C_BURST + 2);
	}
	/* enforcing, the parent would have let about 10/s + burst through */
	assert_true(would >= (double)(res[0].ok + res[1].ok + res[2].ok) - 10 * 2.1 - P_BURST - 3);
	/* the children's all arrived (the parent's own flood overflows its
	 * receiver's queue) */
	for (int i = 1; i < N_CG; i++)
		assert_int_equal(kt_udpfx_drain(fx.rx[i]), res[i].ok);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_children_and_parent_within_the_parent, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_refused_call_leaves_child_tokens, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_idle_child_leaves_its_part, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shadow_parent_lets_children_through, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, kt_storefx_group_setup, kt_storefx_group_teardown);
}
