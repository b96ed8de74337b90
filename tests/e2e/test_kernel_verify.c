// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Kernel state verified, not believed: a member's bucket in kt_buckets
 * rewritten by hand while the daemon runs (an interval of 1, a burst of a
 * million: no limit at all) is written back within a tick or two, logged
 * once and counted in status; the limit then holds again at a real sender.
 * A second edit within the log's quiet spell is written back and counted,
 * not logged again; so is a shadow flag set on it (everything would pass).
 *
 * The same for the member's kt_members entry (deleted, with the programs'
 * cache reset through kt_gen, then rewritten empty) and its limit's
 * kt_limits entry (its ports changed): each is written back within 2 s,
 * logged with both values, counted in status and metrics, and the limit
 * holds again. */
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
#include <bpf/bpf.h>
#include <cmocka.h>

#include "base/config.h"
#include "kernel/bpf_loader.h"
#include "kt_daemonfx.h"
#include "ktest.h"

#define RATE 100.0
#define BURST 10.0
#define FIX_BOUND_MS 2000 /* the bound: a tick (100 ms) and a loaded machine */

static struct fixture {
	struct ktest_daemon d;
	char cg[PATH_MAX];
	int port; /* nothing listens: kt-load counts sends */
} fx;

static int setup(void **state)
{
	(void)state;
	if (kt_daemonfx_setup(&fx, sizeof(fx), &fx.d, "kverify", fx.cg, sizeof(fx.cg)))
		return -1;
	fx.port = ktest_free_port(SOCK_DGRAM);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	kt_daemonfx_end(&fx.d, fx.cg);
	return 0;
}

/* The member's bucket slot, from status json. */
static uint32_t member_slot(void)
{
	char *st = ktest_daemon_cmd(&fx.d, "status json");
	const char *cgs;
	double slot = -1;

	assert_non_null(st);
	cgs = ktest_json_limit_field(st, "v", "cgroups");
	assert_non_null(cgs);
	assert_true(ktest_json_num(cgs, "slot", &slot));
	free(st);
	assert_true(slot >= 0 && slot < KT_MAX_BUCKETS);
	return (uint32_t)slot;
}

/* Times "written back" appears in the daemon's log. */
static int fixes_logged(void)
{
	char *log = ktest_slurp(fx.d.log);
	int n = 0;

	for (const char *p = log; p && (p = strstr(p, "written back")); p++)
		n++;
	free(log);
	return n;
}

/* Writes interval_fp 1 and burst 1,000,000 into slot; returns the wait (ms)
 * until the daemon has put back want (the bucket as it was). */
static int hand_edit_and_wait(int fd, uint32_t slot, const struct kt_bucket *want)
{
	struct kt_bucket bk;
	uint64_t t0;

	assert_int_equal(bpf_map_lookup_elem(fd, &slot, &bk), 0);
	bk.interval_fp = 1;
	bk.burst = 1000000;
	assert_int_equal(bpf_map_update_elem(fd, &slot, &bk, BPF_ANY), 0);
	t0 = ktest_now_ns();
	do {
		ktest_sleep_ms(10);
		assert_int_equal(bpf_map_lookup_elem(fd, &slot, &bk), 0);
	} while ((bk.interval_fp != want->interval_fp || bk.burst != want->burst) &&
		 ktest_now_ns() - t0 < FIX_BOUND_MS * 1000000ull);
	assert_true(bk.interval_fp == want->interval_fp);
	assert_true(bk.burst == want->burst);
	return (int)((ktest_now_ns() - t0) / 1000000ull);
}

static void test_hand_written_rate_is_put_back(void **state)
{
	char body[1024], err[KT_ERR_LEN], *st;
	struct kt_bucket before;
	struct ktest_load r;
	struct kt_bpf kb;
	double fixes = -1;
	uint32_t slot;
	int ms;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	snprintf(body, sizeof(body),
		 "limits:\n"
		 "  - name: v\n"
		 "    cgroups: [\"%s\"]\n"
		 "    match: {cidrs: [127.0.0.1/32], ports: %d, protocol: udp}\n"
		 "    unit: datagram\n"
		 "    burst: %.0f\n"
		 "    rateLimit: {max: %.0f}\n",
		 fx.cg, fx.port, BURST, RATE);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
	slot = member_slot();
	assert_int_equal(kt_bpf_open_pinned(&kb, fx.d.pin_dir, err, sizeof(err)), 0);
	assert_int_equal(bpf_map_lookup_elem(kb.buckets_fd, &slot, &before), 0);
	assert_true(before.interval_fp > 1 && before.burst == (uint64_t)BURST);

	ms = hand_edit_and_wait(kb.buckets_fd, slot, &before);
	print_message("slot %u: interval_fp 1, burst 1000000 written by hand; put back to %llu, %llu "
		      "within %d ms\n",
		      slot, (unsigned long long)before.interval_fp, (unsigned long long)before.burst, ms);
	assert_int_equal(fixes_logged(), 1);
	st = ktest_daemon_cmd(&fx.d, "status json");
	assert_non_null(st);
	assert_true(ktest_json_limit_num(st, "v", "kernel_state_fixes", &fixes));
	free(st);
	assert_true(fixes >= 1);
	st = ktest_daemon_cmd(&fx.d, "status");
	assert_non_null(st);
	assert_non_null(strstr(st, "kernel state: "));
	free(st);

	/* the limit holds again */
	assert_int_equal(ktest_load(fx.cg, "udp", "127.0.0.1", fx.port, 0.5, &r), 0);
	print_message("after: ok %llu refused %llu in %.2f s\n", r.ok, r.refused, r.elapsed);
	assert_true(r.refused > 0);
	assert_true(r.ok <= RATE * r.elapsed + BURST + 1);

	/* the shadow bit set by hand on an enforcing limit's bucket: cleared */
	{
		struct kt_bucket bk;
		uint64_t t0;

		assert_int_equal(bpf_map_lookup_elem(kb.buckets_fd, &slot, &bk), 0);
		bk.flags |= KT_BUCKET_SHADOW;
		assert_int_equal(bpf_map_update_elem(kb.buckets_fd, &slot, &bk, BPF_ANY), 0);
		t0 = ktest_now_ns();
		do {
			ktest_sleep_ms(10);
			assert_int_equal(bpf_map_lookup_elem(kb.buckets_fd, &slot, &bk), 0);
		} while ((bk.flags & KT_BUCKET_SHADOW) && ktest_now_ns() - t0 < FIX_BOUND_MS * 1000000ull);
		assert_false(bk.flags & KT_BUCKET_SHADOW);
		print_message("shadow flag set by hand: cleared within %llu ms\n",
			      (unsigned long long)((ktest_now_ns() - t0) / 1000000));
		assert_int_equal(ktest_load(fx.cg, "udp", "127.0.0.1", fx.port, 0.5, &r), 0);
		assert_true(r.ok <= RATE * r.elapsed + BURST + 1);
	}

	/* again at once: put back and counted, the log quiet for a while */
	ms = hand_edit_and_wait(kb.buckets_fd, slot, &before);
	print_message("second edit put back within %d ms\n", ms);
	assert_int_equal(fixes_logged(), 1);
	st = ktest_daemon_cmd(&fx.d, "status json");
	assert_non_null(st);
	assert_true(ktest_json_limit_num(st, "v", "kernel_state_fixes", &fixes));
	free(st);
	assert_true(fixes >= 3);
	kt_bpf_close(&kb);
}

/* Times `what` appears in the daemon's log. */
static int logged(const char *what)
{
	char *log = ktest_slurp(fx.d.log);
	int n = 0;

	for (const char *p = log; p && (p = strstr(p, what)); p++)
		n++;
	free(log);
	return n;
}

/* Waits until fd's value at key equals want (size len); the wait in ms. */
static int wait_entry(int fd, const void *key, const void *want, size_t len)
{
	char cur[256];
	uint64_t t0 = ktest_now_ns();

	assert_true(len <= sizeof(cur));
	for (;;) {
		if (bpf_map_lookup_elem(fd, key, cur) == 0 && !memcmp(cur, want, len))
			return (int)((ktest_now_ns() - t0) / 1000000ull);
		assert_true(ktest_now_ns() - t0 < FIX_BOUND_MS * 1000000ull);
		ktest_sleep_ms(20);
	}
}

static void test_hand_edited_entries_are_put_back(void **state)
{
	char body[1024], err[KT_ERR_LEN], *st;
	struct kt_member_key key;
	struct kt_member_val mv, bad;
	struct kt_limit_info li, lbad;
	struct ktest_load r;
	struct kt_bpf kb;
	struct stat sb;
	double lid = -1, members = -1, limits = -1;
	uint32_t id, zero = 0;
	uint64_t gen;
	int ms;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	snprintf(body, sizeof(body),
		 "limits:\n"
		 "  - name: v\n"
		 "    cgroups: [\"%s\"]\n"
		 "    match: {cidrs: [127.0.0.1/32], ports: %d, protocol: udp}\n"
		 "    unit: datagram\n"
		 "    burst: %.0f\n"
		 "    rateLimit: {max: %.0f}\n",
		 fx.cg, fx.port, BURST, RATE);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
	assert_int_equal(stat(fx.cg, &sb), 0);
	key = (struct kt_member_key){ .cgroup_id = sb.st_ino };
	assert_int_equal(kt_bpf_open_pinned(&kb, fx.d.pin_dir, err, sizeof(err)), 0);
	assert_int_equal(bpf_map_lookup_elem(kb.members_fd, &key, &mv), 0);
	assert_true(mv.count >= 1);

	/* deleted, and the programs' cache of it dropped: unlimited until put back */
	assert_int_equal(bpf_map_delete_elem(kb.members_fd, &key), 0);
	assert_int_equal(bpf_map_lookup_elem(kb.gen_fd, &zero, &gen), 0);
	gen++;
	assert_int_equal(bpf_map_update_elem(kb.gen_fd, &zero, &gen, BPF_ANY), 0);
	ms = wait_entry(kb.members_fd, &key, &mv, sizeof(mv));
	print_message("kt_members entry of cgroup %llu deleted: put back within %d ms\n",
		      (unsigned long long)key.cgroup_id, ms);
	/* rewritten empty */
	bad = mv;
	bad.count = 0;
	assert_int_equal(bpf_map_update_elem(kb.members_fd, &key, &bad, BPF_EXIST), 0);
	ms = wait_entry(kb.members_fd, &key, &mv, sizeof(mv));
	print_message("kt_members entry rewritten with count 0: put back within %d ms\n", ms);

	/* the limit's ports changed: its rule would match nothing */
	st = ktest_daemon_cmd(&fx.d, "status json");
	assert_non_null(st);
	assert_true(ktest_json_limit_num(st, "v", "id", &lid));
	free(st);
	id = (uint32_t)lid;
	assert_int_equal(bpf_map_lookup_elem(kb.limits_fd, &id, &li), 0);
	lbad = li;
	lbad.port_lo = lbad.port_hi = 1;
	assert_int_equal(bpf_map_update_elem(kb.limits_fd, &id, &lbad, BPF_EXIST), 0);
	ms = wait_entry(kb.limits_fd, &id, &li, sizeof(li));
	print_message("kt_limits id %u with ports 1-1: put back within %d ms\n", id, ms);

	assert_int_equal(logged("kernel state: kt_members cgroup"), 2);
	assert_int_equal(logged("kernel state: kt_limits id"), 1);
	assert_true(logged("held none, not the count") == 1);
	st = ktest_daemon_cmd(&fx.d, "status json");
	assert_non_null(st);
	assert_true(ktest_json_num(st, "kt_members", &members) && ktest_json_num(st, "kt_limits", &limits));
	free(st);
	assert_true(members == 2 && limits == 1);
	st = ktest_daemon_cmd(&fx.d, "status");
	assert_non_null(st);
	assert_non_null(strstr(st, "kernel state: 2 kt_members and 1 kt_limits entries"));
	free(st);

	/* the limit holds again */
	assert_int_equal(ktest_load(fx.cg, "udp", "127.0.0.1", fx.port, 0.5, &r), 0);
	print_message("after: ok %llu refused %llu in %.2f s\n", r.ok, r.refused, r.elapsed);
	assert_true(r.refused > 0);
	assert_true(r.ok <= RATE * r.elapsed + BURST + 1);
	kt_bpf_close(&kb);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_hand_written_rate_is_put_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hand_edited_entries_are_put_back, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
