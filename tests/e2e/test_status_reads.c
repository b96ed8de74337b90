// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Status, metrics and health only read. A daemon started in this process
 * (kt_daemon_start, its loop not run) is ticked by hand at chosen times
 * while its members' kernel counters are written by hand between ticks:
 * what the controller keeps (each limit's state, its tick ring, every
 * slot's demand windows) is byte for byte the same after a status (text
 * and JSON), a scrape and a health probe as before them, and each member's
 * demand (what a share: demand heartbeat reports, and status shows) is the
 * same in a run with those calls between the ticks as in one without. Status still shows the counters as
 * the kernel has them now, not as the last tick read them. */
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
#include <sys/stat.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <cmocka.h>

#include "base/log.h"
#include "control/controller.h"
#include "control/daemon.h"
#include "control/report.h"
#include "kernel/bpf_loader.h"
#include "ktest.h"

#define N_MEMBERS 2
#define TICK_NS 100000000ull
#define N_TICKS 24 /* past one epoch (the default 1 s): the epoch window turns */

static struct fixture {
	struct ktest_daemon t; /* paths: config, socket, pin dir */
	char cg[PATH_MAX], members[N_MEMBERS][PATH_MAX];
} fx;

static int setup(void **state)
{
	(void)state;
	memset(&fx, 0, sizeof(fx));
	if (ktest_root_unavailable())
		return 0;
	if (ktest_daemon_init(&fx.t) || ktest_cgroup_create("statusro", fx.cg, sizeof(fx.cg)))
		return -1;
	for (int m = 0; m < N_MEMBERS; m++) {
		snprintf(fx.members[m], PATH_MAX, "%s/m-%d", fx.cg, m);
		if (mkdir(fx.members[m], 0755) && errno != EEXIST)
			return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	for (int m = N_MEMBERS - 1; m >= 0; m--)
		if (fx.members[m][0])
			rmdir(fx.members[m]);
	if (fx.cg[0])
		ktest_cgroup_destroy(fx.cg);
	if (fx.t.dir[0])
		ktest_daemon_cleanup(&fx.t);
	return 0;
}

/* The config's cgroups are relative to the test cgroup. */
static void write_config(void)
{
	char body[1024];
	const char *rel = strrchr(fx.cg, '/') + 1;

	snprintf(body, sizeof(body),
		 "tickInterval: 100ms\n"
		 "limits:\n"
		 "  - name: st\n"
		 "    cgroups: [\"%s/m-*\"]\n"
		 "    match: {cidrs: [127.0.0.1/32], ports: 9, protocol: udp}\n"
		 "    unit: datagram\n"
		 "    burst: 10\n"
		 "    rateLimit: {max: 100}\n",
		 rel);
	assert_int_equal(ktest_daemon_config(&fx.t, body), 0);
}

/* Member slot m's counters := admitted, throttled (on CPU 0). */
static void set_counters(const struct kt_daemon *d, int m, uint64_t admitted, uint64_t throttled)
{
	int ncpu = libbpf_num_possible_cpus();
	struct kt_counters *v = calloc((size_t)ncpu, sizeof(*v));
	uint32_t slot = d->plan.limits[0].members[m].slot;

	assert_non_null(v);
	v[0].admitted = admitted;
	v[0].throttled = throttled;
	assert_int_equal(bpf_map_update_elem(d->bpf.counters_fd, &slot, v, BPF_ANY), 0);
	free(v);
}

/* What the controller keeps, as bytes: the limit's state, its tick ring,
 * the members' slot baselines. */
struct kept {
	struct kt_limit_state ls;
	struct kt_sample hist[KT_HISTORY];
	struct kt_slot_base base[N_MEMBERS];
};

static void keep(const struct kt_daemon *d, struct kept *k)
{
	memset(k, 0, sizeof(*k));
	k->ls = d->ls[0];
	memcpy(k->hist, d->ls[0].hist, sizeof(k->hist[0]) * (size_t)d->ls[0].hist_cap);
	for (int m = 0; m < N_MEMBERS; m++)
		k->base[m] = d->slot_base[d->plan.limits[0].members[m].slot];
}

/* One run of N_TICKS ticks, the counters growing between them (member 0
 * 30 calls a tick, member 1 70, a fifth of them refused); with `look`, a
 * status, a JSON status, a scrape and a health probe after each counter
 * write and after each tick. Each member's demand after each tick into
 * demand. */
static void run(bool look, double demand[N_TICKS][N_MEMBERS])
{
	struct kt_daemon d;
	uint64_t t0;

	memset(&d, 0, sizeof(d));
	write_config();
	assert_int_equal(kt_daemon_start(&d, fx.t.config, true), 0);
	assert_int_equal(d.plan.limits[0].n_members, N_MEMBERS);
	t0 = d.started_ns + TICK_NS;
	for (int k = 0; k < N_TICKS; k++) {
		struct kept before, after;

		for (int m = 0; m < N_MEMBERS; m++) {
			uint64_t calls = (uint64_t)(k + 1) * (m ? 70 : 30);

			set_counters(&d, m, calls - calls / 5, calls / 5);
		}
		for (int pass = 0; look && pass < 2; pass++) {
			char *text, *json, *page, *health;
			unsigned code;

			keep(&d, &before);
			text = kt_report_status(&d, false);
			json = kt_report_status(&d, true);
			page = kt_report_metrics(&d);
			health = kt_report_health(&d, false, &code);
			keep(&d, &after);
			assert_non_null(text);
			assert_non_null(json);
			assert_non_null(page);
			assert_non_null(health);
			/* what the kernel has now, whatever the last tick read */
			double adm = -1;
			uint64_t want = (uint64_t)(k + 1) * 30 - (uint64_t)(k + 1) * 30 / 5 +
					(uint64_t)(k + 1) * 70 - (uint64_t)(k + 1) * 70 / 5;
			assert_true(ktest_json_limit_num(json, "st", "admitted", &adm));
			assert_true(adm == (double)want);
			free(text);
			free(json);
			free(page);
			free(health);
			assert_memory_equal(&before, &after, sizeof(before));
			if (pass == 0)
				kt_ctl_tick(&d.controller, t0 + (uint64_t)k * TICK_NS);
		}
		if (!look)
			kt_ctl_tick(&d.controller, t0 + (uint64_t)k * TICK_NS);
		/* a share: demand heartbeat reports the larger of these */
		for (int m = 0; m < N_MEMBERS; m++) {
			const struct kt_slot_base *b = &d.slot_base[d.plan.limits[0].members[m].slot];

			demand[k][m] = b->demand > b->recent ? b->demand : b->recent;
		}
	}
	kt_daemon_stop(&d);
}

static void test_status_only_reads(void **state)
{
	double plain[N_TICKS][N_MEMBERS], looked[N_TICKS][N_MEMBERS];

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	kt_log_init("test_status_reads", KT_LOG_WARN);
	run(false, plain);
	run(true, looked);
	for (int k = 0; k < N_TICKS; k++)
		for (int m = 0; m < N_MEMBERS; m++)
			if (plain[k][m] != looked[k][m])
				fail_msg("tick %d member %d: demand %.3f without status, %.3f with", k, m,
					 plain[k][m], looked[k][m]);
	/* the demand is the members' calls: 300/s and 700/s */
	print_message("demand at the last tick: %.1f/s and %.1f/s\n", plain[N_TICKS - 1][0],
		      plain[N_TICKS - 1][1]);
	assert_true(plain[N_TICKS - 1][0] > 299 && plain[N_TICKS - 1][0] < 301);
	assert_true(plain[N_TICKS - 1][1] > 699 && plain[N_TICKS - 1][1] < 701);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_status_only_reads, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
