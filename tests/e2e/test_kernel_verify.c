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
 * holds again.
 *
 * Then every other field that decides whether and how a datagram is
 * limited, one at a time: the bucket's lease fields, limit id and flags,
 * its kt_up link to the parent limit, the limit's kt_dests prefix
 * (deleted, changed, and one added), kt_ports, kt_idle_hooks and kt_gen
 * set back; and all of them at once in the pins of a killed daemon, which
 * its restart must not believe. */
#include <errno.h>
#include <signal.h>
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

/* The slot of limit's first member, from status json. */
static uint32_t slot_of(const char *limit)
{
	char *st = ktest_daemon_cmd(&fx.d, "status json");
	const char *cgs;
	double slot = -1;

	assert_non_null(st);
	cgs = ktest_json_limit_field(st, limit, "cgroups");
	assert_non_null(cgs);
	assert_true(ktest_json_num(cgs, "slot", &slot));
	free(st);
	assert_true(slot >= 0 && slot < KT_MAX_BUCKETS);
	return (uint32_t)slot;
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

/* Waits until the len bytes at off of fd's value at key (vsize bytes) are
 * want again: the wait in ms (fails past FIX_BOUND_MS). */
static int wait_field(int fd, const void *key, size_t vsize, size_t off, const void *want,
		      size_t len)
{
	char cur[sizeof(struct kt_port_filter)];
	uint64_t t0 = ktest_now_ns();

	assert_true(vsize <= sizeof(cur) && off + len <= vsize);
	for (;;) {
		if (bpf_map_lookup_elem(fd, key, cur) == 0 && !memcmp(cur + off, want, len))
			return (int)((ktest_now_ns() - t0) / 1000000ull);
		assert_true(ktest_now_ns() - t0 < FIX_BOUND_MS * 1000000ull);
		ktest_sleep_ms(20);
	}
}

/* The limit holds at a real sender. */
static void limit_holds(void)
{
	struct ktest_load r;

	assert_int_equal(ktest_load(fx.cg, "udp", "127.0.0.1", fx.port, 0.5, &r), 0);
	print_message("v: ok %llu refused %llu in %.2f s (bound %.0f)\n", r.ok, r.refused, r.elapsed,
		      RATE * r.elapsed + BURST + 1);
	assert_true(r.refused > 0);
	assert_true(r.ok <= RATE * r.elapsed + BURST + 1);
}

/* "v": RATE/s, burst BURST, datagrams from the member cgroup to fx.port. */
static void single_up(void)
{
	char body[1024];

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
	char err[KT_ERR_LEN], *st;
	struct kt_bucket before;
	struct ktest_load r;
	struct kt_bpf kb;
	double fixes = -1;
	uint32_t slot;
	int ms;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	single_up();
	slot = slot_of("v");
	assert_int_equal(kt_bpf_open_pinned(&kb, fx.d.pin_dir, err, sizeof(err)), 0);
	assert_int_equal(bpf_map_lookup_elem(kb.buckets_fd, &slot, &before), 0);
	assert_true(before.interval_fp > 1 && before.burst == (uint64_t)BURST);

	ms = hand_edit_and_wait(kb.buckets_fd, slot, &before);
	print_message("slot %u: interval_fp 1, burst 1000000 written by hand; put back to %llu, %llu "
		      "within %d ms\n",
		      slot, (unsigned long long)before.interval_fp, (unsigned long long)before.burst, ms);
	assert_int_equal(logged("written back"), 1);
	st = ktest_daemon_cmd(&fx.d, "status json");
	assert_non_null(st);
	assert_true(ktest_json_limit_num(st, "v", "kernel_state_fixes", &fixes));
	free(st);
	assert_true(fixes >= 1);
	st = ktest_daemon_cmd(&fx.d, "status");
	assert_non_null(st);
	assert_non_null(strstr(st, "kernel state: "));
	free(st);

	limit_holds(); /* again */

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
	assert_int_equal(logged("written back"), 1);
	st = ktest_daemon_cmd(&fx.d, "status json");
	assert_non_null(st);
	assert_true(ktest_json_limit_num(st, "v", "kernel_state_fixes", &fixes));
	free(st);
	assert_true(fixes >= 3);
	kt_bpf_close(&kb);
}

static void test_hand_edited_entries_are_put_back(void **state)
{
	char err[KT_ERR_LEN], *st;
	struct kt_member_key key;
	struct kt_member_val mv, bad;
	struct kt_limit_info li, lbad;
	struct kt_bpf kb;
	struct stat sb;
	double lid = -1, members = -1, limits = -1;
	uint32_t id, zero = 0;
	uint64_t gen;
	int ms;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	single_up();
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
	ms = wait_field(kb.members_fd, &key, sizeof(mv), 0, &mv, sizeof(mv));
	print_message("kt_members entry of cgroup %llu deleted: put back within %d ms\n",
		      (unsigned long long)key.cgroup_id, ms);
	/* rewritten empty */
	bad = mv;
	bad.count = 0;
	assert_int_equal(bpf_map_update_elem(kb.members_fd, &key, &bad, BPF_EXIST), 0);
	ms = wait_field(kb.members_fd, &key, sizeof(mv), 0, &mv, sizeof(mv));
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
	ms = wait_field(kb.limits_fd, &id, sizeof(li), 0, &li, sizeof(li));
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
	assert_non_null(strstr(st, "kernel state: entries found changed and written back: "
				   "kt_members 2, kt_limits 1"));
	free(st);

	limit_holds(); /* again */
	kt_bpf_close(&kb);
}

/* "v" under a parent "top", both on the member cgroup: a datagram of v's
 * reads kt_limits, kt_members, kt_dests, kt_ports, kt_idle_hooks, the
 * member's bucket (rate, lease, flags, limit id) and its kt_up link. */
static void family_up(void)
{
	char body[1024];

	snprintf(body, sizeof(body),
		 "limits:\n"
		 "  - {name: top, cgroups: [\"%s\"], unit: datagram, burst: 100, rateLimit: {max: 1000}}\n"
		 "  - name: v\n"
		 "    parent: top\n"
		 "    cgroups: [\"%s\"]\n"
		 "    match: {cidrs: [127.0.0.1/32], ports: %d, protocol: udp}\n"
		 "    unit: datagram\n"
		 "    burst: %.0f\n"
		 "    rateLimit: {max: %.0f}\n",
		 fx.cg, fx.cg, fx.port, BURST, RATE);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
}

/* The key of limit id's one prefix in kt_dests. */
static void dest_of(int fd, uint32_t id, struct kt_dest_key *out)
{
	struct kt_dest_key k, next;
	bool have = bpf_map_get_next_key(fd, NULL, &k) == 0;

	for (int n = 0; have && n < 1000; n++, k = next) {
		if (k.limit_id == id) {
			*out = k;
			return;
		}
		have = bpf_map_get_next_key(fd, &k, &next) == 0;
	}
	fail_msg("no kt_dests entry for limit %u", id);
}

/* Every field of every map that decides whether and how v's datagrams are
 * limited, changed by hand one at a time while the daemon runs: each is
 * put back within 2 s (a tick for a bucket's rate and lease, the second's
 * cycle for the rest), logged, and counted per map; the limit then holds. */
static void test_every_field_is_put_back(void **state)
{
	static const struct {
		const char *field;
		size_t off, len;
		uint64_t bad; /* 0: the field's value + 12345 */
	} lease[] = {
		{ "valid_until", offsetof(struct kt_bucket, valid_until), 8, 1 }, /* lapsed */
		{ "fallback_fp", offsetof(struct kt_bucket, fallback_fp), 8, 1 }, /* no limit */
		{ "fallback_until", offsetof(struct kt_bucket, fallback_until), 8, 0 },
		{ "fallback_burst", offsetof(struct kt_bucket, fallback_burst), 8, 1000000 },
	}, ident[] = {
		{ "limit_id", offsetof(struct kt_bucket, limit_id), 4, 0 },
		{ "flags", offsetof(struct kt_bucket, flags), 4, 0 },
	};
	char err[KT_ERR_LEN], *st;
	struct kt_bpf kb;
	struct kt_bucket bk;
	struct kt_dest_key dk, extra;
	struct kt_dest_val dv, dbad = { .prefixlen = 8, .order = 9 };
	struct kt_port_filter *pf = calloc(KT_HOOK_COUNT, sizeof(*pf)), zero_pf;
	double lid = -1, fixes = -1, n;
	uint32_t slot, id, zero = 0, up, upbad, idle, idlebad = ~0u;
	uint64_t gen, genbad;
	int ms, hook = -1;
	static const char *const per_map[][2] = {
		{ "kt_buckets", "2" }, { "kt_up", "1" }, { "kt_dests", "3" },
		{ "kt_ports", "1" }, { "kt_idle_hooks", "1" }, { "kt_gen", "1" },
		{ "kt_limit_ext", "1" },
	};

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_non_null(pf);
	family_up();
	slot = slot_of("v");
	assert_true(kt_daemonfx_status_num(&fx.d, "v", "id", &lid));
	id = (uint32_t)lid;
	assert_int_equal(kt_bpf_open_pinned(&kb, fx.d.pin_dir, err, sizeof(err)), 0);
	assert_int_equal(bpf_map_lookup_elem(kb.buckets_fd, &slot, &bk), 0);
	assert_true(bk.flags & KT_BUCKET_UP);

	/* the bucket: its lease, field by field (the controller's tick) */
	for (size_t i = 0; i < sizeof(lease) / sizeof(lease[0]); i++) {
		struct kt_bucket cur;
		uint64_t was, bad;

		assert_int_equal(bpf_map_lookup_elem(kb.buckets_fd, &slot, &cur), 0);
		memcpy(&was, (char *)&cur + lease[i].off, 8);
		bad = lease[i].bad && lease[i].bad != was ? lease[i].bad : was + 12345;
		memcpy((char *)&cur + lease[i].off, &bad, 8);
		assert_int_equal(bpf_map_update_elem(kb.buckets_fd, &slot, &cur, BPF_ANY), 0);
		ms = wait_field(kb.buckets_fd, &slot, sizeof(cur), lease[i].off, &was, 8);
		print_message("kt_buckets slot %u %s %llu -> %llu by hand: put back within %d ms\n", slot,
			      lease[i].field, (unsigned long long)was, (unsigned long long)bad, ms);
	}
	/* its identity: the limit it counts for, and the flags that chain it
	 * up to its parent (the second's cycle) */
	for (size_t i = 0; i < sizeof(ident) / sizeof(ident[0]); i++) {
		struct kt_bucket cur;
		uint32_t was, bad;

		assert_int_equal(bpf_map_lookup_elem(kb.buckets_fd, &slot, &cur), 0);
		memcpy(&was, (char *)&cur + ident[i].off, 4);
		bad = i == 0 ? was + 7 : was & ~(uint32_t)KT_BUCKET_UP;
		memcpy((char *)&cur + ident[i].off, &bad, 4);
		assert_int_equal(bpf_map_update_elem(kb.buckets_fd, &slot, &cur, BPF_ANY), 0);
		ms = wait_field(kb.buckets_fd, &slot, sizeof(cur), ident[i].off, &was, 4);
		print_message("kt_buckets slot %u %s %#x -> %#x by hand: put back within %d ms\n", slot,
			      ident[i].field, was, bad, ms);
	}
	/* the link to the parent's bucket */
	assert_int_equal(bpf_map_lookup_elem(kb.up_fd, &slot, &up), 0);
	upbad = up + 1 < KT_MAX_BUCKETS ? up + 1 : 0;
	assert_int_equal(bpf_map_update_elem(kb.up_fd, &slot, &upbad, BPF_ANY), 0);
	ms = wait_field(kb.up_fd, &slot, sizeof(up), 0, &up, sizeof(up));
	print_message("kt_up slot %u %u -> %u: put back within %d ms\n", slot, up, upbad, ms);

	/* the limit's settings beyond kt_limits: a maxDelay it does not have */
	{
		struct kt_limit_ext ext, extbad = { .max_delay_ms = 1 };

		assert_true(kb.limit_ext_fd >= 0);
		assert_int_equal(bpf_map_lookup_elem(kb.limit_ext_fd, &id, &ext), 0);
		assert_int_equal(ext.max_delay_ms, 0);
		assert_int_equal(bpf_map_update_elem(kb.limit_ext_fd, &id, &extbad, BPF_ANY), 0);
		ms = wait_field(kb.limit_ext_fd, &id, sizeof(ext), 0, &ext, sizeof(ext));
		print_message("kt_limit_ext id %u max_delay_ms 0 -> 1: put back within %d ms\n", id, ms);
	}

	/* v's prefix: deleted, changed, and one added that it does not have */
	dest_of(kb.dests_fd, id, &dk);
	assert_int_equal(bpf_map_lookup_elem(kb.dests_fd, &dk, &dv), 0);
	assert_int_equal(bpf_map_delete_elem(kb.dests_fd, &dk), 0);
	ms = wait_field(kb.dests_fd, &dk, sizeof(dv), 0, &dv, sizeof(dv));
	print_message("kt_dests prefix of limit %u deleted: put back within %d ms\n", id, ms);
	assert_int_equal(bpf_map_update_elem(kb.dests_fd, &dk, &dbad, BPF_EXIST), 0);
	ms = wait_field(kb.dests_fd, &dk, sizeof(dv), 0, &dv, sizeof(dv));
	print_message("kt_dests prefix of limit %u changed: put back within %d ms\n", id, ms);
	extra = (struct kt_dest_key){ .prefixlen = KT_DEST_ID_BITS + 96 + 8, .limit_id = id,
				      .addr = { [10] = 0xff, [11] = 0xff, [12] = 10 } };
	assert_int_equal(bpf_map_update_elem(kb.dests_fd, &extra, &dbad, BPF_NOEXIST), 0);
	{
		uint64_t t0 = ktest_now_ns();

		while (bpf_map_lookup_elem(kb.dests_fd, &extra, &dv) == 0) {
			assert_true(ktest_now_ns() - t0 < FIX_BOUND_MS * 1000000ull);
			ktest_sleep_ms(20);
		}
		print_message("kt_dests 10.0.0.0/8 added for limit %u: deleted within %llu ms\n", id,
			      (unsigned long long)((ktest_now_ns() - t0) / 1000000ull));
	}

	/* the port filter of the hook v uses, emptied */
	for (uint32_t h = 0; h < KT_HOOK_COUNT; h++) {
		assert_int_equal(bpf_map_lookup_elem(kb.ports_fd, &h, &pf[h]), 0);
		for (size_t w = 0; hook < 0 && w < sizeof(pf[h].bits) / 8; w++)
			if (pf[h].bits[w])
				hook = (int)h;
	}
	assert_true(hook >= 0);
	memset(&zero_pf, 0, sizeof(zero_pf));
	assert_int_equal(bpf_map_update_elem(kb.ports_fd, &hook, &zero_pf, BPF_ANY), 0);
	ms = wait_field(kb.ports_fd, &hook, sizeof(zero_pf), 0, &pf[hook], sizeof(zero_pf));
	print_message("kt_ports hook %d emptied: put back within %d ms\n", hook, ms);

	/* every hook said idle: the programs would let everything go */
	assert_int_equal(bpf_map_lookup_elem(kb.idle_fd, &zero, &idle), 0);
	assert_int_equal(bpf_map_update_elem(kb.idle_fd, &zero, &idlebad, BPF_ANY), 0);
	ms = wait_field(kb.idle_fd, &zero, sizeof(idle), 0, &idle, sizeof(idle));
	print_message("kt_idle_hooks %#x -> %#x: put back within %d ms\n", idle, idlebad, ms);

	/* the generation set back: it moves on past anything written before */
	assert_int_equal(bpf_map_lookup_elem(kb.gen_fd, &zero, &gen), 0);
	genbad = gen > 3 ? gen - 3 : 0;
	assert_int_equal(bpf_map_update_elem(kb.gen_fd, &zero, &genbad, BPF_ANY), 0);
	{
		uint64_t t0 = ktest_now_ns(), cur = genbad;

		while (bpf_map_lookup_elem(kb.gen_fd, &zero, &cur) == 0 && cur <= gen) {
			assert_true(ktest_now_ns() - t0 < FIX_BOUND_MS * 1000000ull);
			ktest_sleep_ms(20);
		}
		print_message("kt_gen %llu -> %llu: moved on to %llu\n", (unsigned long long)gen,
			      (unsigned long long)genbad, (unsigned long long)cur);
	}

	/* each logged, and counted per map */
	assert_int_equal(logged("held the lease"), 1);
	assert_true(kt_daemonfx_status_num(&fx.d, "v", "kernel_state_fixes", &fixes));
	assert_true(fixes >= 4);
	st = ktest_daemon_cmd(&fx.d, "status json");
	assert_non_null(st);
	for (size_t m = 0; m < sizeof(per_map) / sizeof(per_map[0]); m++) {
		char what[64];

		assert_true(ktest_json_num(st, per_map[m][0], &n));
		print_message("%s: %.0f fixes\n", per_map[m][0], n);
		assert_true(n == atof(per_map[m][1]));
		snprintf(what, sizeof(what), "kernel state: %s ", per_map[m][0]);
		assert_int_equal(logged(what), atoi(per_map[m][1]));
	}
	free(st);
	st = ktest_daemon_cmd(&fx.d, "status");
	assert_non_null(st);
	assert_non_null(
		strstr(st, "kt_limit_ext 1, kt_dests 3, kt_ports 1, kt_idle_hooks 1, kt_buckets 2, kt_up 1, kt_gen 1"));
	free(st);
	limit_holds();
	kt_bpf_close(&kb);
	free(pf);
}

/* The same fields changed in the pins while no daemon runs: the next
 * start adopts the maps and writes its own values over them. */
static void test_adoption_believes_none_of_it(void **state)
{
	char err[KT_ERR_LEN];
	struct kt_bpf kb;
	struct kt_bucket bk;
	struct kt_dest_key dk;
	struct kt_port_filter zero_pf;
	double lid = -1;
	uint32_t slot, id, zero = 0, idlebad = ~0u, upbad = 0;
	struct kt_limit_ext ext, extbad = { .max_delay_ms = 1 };
	uint64_t gen = 0;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	family_up();
	slot = slot_of("v");
	assert_true(kt_daemonfx_status_num(&fx.d, "v", "id", &lid));
	id = (uint32_t)lid;
	assert_int_equal(ktest_daemon_signal_wait(&fx.d, SIGKILL), 128 + SIGKILL);

	assert_int_equal(kt_bpf_open_pinned(&kb, fx.d.pin_dir, err, sizeof(err)), 0);
	assert_int_equal(bpf_map_lookup_elem(kb.buckets_fd, &slot, &bk), 0);
	bk.interval_fp = 1;
	bk.burst = 1000000;
	bk.valid_until = 1;
	bk.fallback_fp = 1;
	bk.fallback_burst = 1000000;
	bk.flags &= ~(uint32_t)KT_BUCKET_UP;
	bk.flags |= KT_BUCKET_SHADOW;
	assert_int_equal(bpf_map_update_elem(kb.buckets_fd, &slot, &bk, BPF_ANY), 0);
	assert_int_equal(bpf_map_update_elem(kb.up_fd, &slot, &upbad, BPF_ANY), 0);
	dest_of(kb.dests_fd, id, &dk);
	assert_int_equal(bpf_map_delete_elem(kb.dests_fd, &dk), 0);
	memset(&zero_pf, 0, sizeof(zero_pf));
	for (uint32_t h = 0; h < KT_HOOK_COUNT; h++)
		assert_int_equal(bpf_map_update_elem(kb.ports_fd, &h, &zero_pf, BPF_ANY), 0);
	assert_int_equal(bpf_map_update_elem(kb.idle_fd, &zero, &idlebad, BPF_ANY), 0);
	assert_int_equal(bpf_map_update_elem(kb.gen_fd, &zero, &gen, BPF_ANY), 0);
	assert_int_equal(bpf_map_update_elem(kb.limit_ext_fd, &id, &extbad, BPF_ANY), 0);
	kt_bpf_close(&kb);

	assert_int_equal(ktest_daemon_start_logged(&fx.d), 0);
	limit_holds();
	assert_int_equal(kt_bpf_open_pinned(&kb, fx.d.pin_dir, err, sizeof(err)), 0);
	assert_int_equal(bpf_map_lookup_elem(kb.limit_ext_fd, &id, &ext), 0);
	assert_int_equal(ext.max_delay_ms, 0);
	kt_bpf_close(&kb);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_hand_written_rate_is_put_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hand_edited_entries_are_put_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_every_field_is_put_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_adoption_believes_none_of_it, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
