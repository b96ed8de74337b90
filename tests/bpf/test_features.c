// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The loader on a kernel that refuses one BPF object (KT_REFUSE_FEATURES
 * makes kt_bpf_open take it as refused with EPERM), each object in turn:
 * the open succeeds, that object is off in b.feat with its reason and the
 * others on; a sync that wants every hook on a cgroup links exactly the
 * programs of the objects that loaded (and detaches a refused program's
 * link a previous load made). With every object refused the open fails
 * with one line naming the reason and leaves nothing pinned. Also the
 * probes' answers on this kernel: the minimum check passes, ring buffers
 * are on, fq is on exactly when the kernel has sch_fq. */
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
#include <cmocka.h>
#include <bpf/bpf.h>

#include "base/log.h"
#include "kernel/bpf_loader.h"
#include "kernel/features.h"
#include "kt_bpffx.h"
#include "ktest.h"

struct fixture {
	char pin[PATH_MAX];
	char cg[PATH_MAX];
	struct kt_bpf b;
	bool opened;
};

static int fx_setup(void **state)
{
	struct fixture *f;

	if (kt_bpffx_setup(state, sizeof(struct fixture), "feat"))
		return -1;
	f = *state;
	if (ktest_root_unavailable())
		return 0;
	return ktest_cgroup_create("feat", f->cg, sizeof(f->cg)) ? -1 : 0;
}

static int fx_teardown(void **state)
{
	struct fixture *f = *state;

	unsetenv(KT_REFUSE_ENV);
	kt_bpffx_close(&f->b, f->pin, f->opened);
	if (f->cg[0])
		ktest_cgroup_destroy(f->cg);
	free(f);
	return 0;
}

/* The program names of each object, as the loader links them. */
static const char *const progs_of[KT_FEAT_N_OBJECTS][3] = {
	[KT_FEAT_CONNECT] = { "kt_connect4", "kt_connect6" },
	[KT_FEAT_SENDMSG] = { "kt_sendmsg4", "kt_sendmsg6" },
	[KT_FEAT_EGRESS] = { "kt_egress" },
	[KT_FEAT_SOCK] = { "kt_sock_create", "kt_sock_release" },
	[KT_FEAT_SOCKOPS] = { "kt_sockops" },
};

static bool has_link(const struct fixture *f, uint64_t cgid, const char *prog)
{
	char p[PATH_MAX + 96];

	snprintf(p, sizeof(p), "%s/links/%llu-%s", f->pin, (unsigned long long)cgid, prog);
	return access(p, F_OK) == 0;
}

static void *object_of(const struct kt_bpf *b, int f)
{
	void *objs[KT_FEAT_N_OBJECTS] = { b->connect, b->sendmsg, b->egress, b->sock, b->sockops };

	return objs[f];
}

static const unsigned all_hooks = 1u << KT_HOOK_CONNECT | 1u << KT_HOOK_SENDMSG |
				  1u << KT_HOOK_EGRESS | 1u << KT_ATTACH_SOCK_CREATE |
				  1u << KT_ATTACH_SOCKOPS | 1u << KT_ATTACH_SOCK_RELEASE;

static void test_each_refused(void **state)
{
	struct fixture *f = *state;
	char err[512];
	uint64_t cgid;

	KTEST_SKIP_UNLESS_ROOT();
	cgid = ktest_cgroup_id(f->cg);
	const struct kt_attach want[] = { { cgid, f->cg, all_hooks } };

	/* first with nothing refused: every link there */
	if (kt_bpf_open(&f->b, f->pin, err, sizeof(err)))
		fail_msg("open: %s", err);
	f->opened = true;
	if (kt_bpf_sync_links(&f->b, want, 1, err, sizeof(err)))
		fail_msg("sync: %s", err);
	for (int o = 0; o < KT_FEAT_N_OBJECTS; o++) {
		assert_true(kt_feature_on(&f->b.feat, o));
		for (int p = 0; p < 3 && progs_of[o][p]; p++)
			assert_true(has_link(f, cgid, progs_of[o][p]));
	}
	kt_bpf_close(&f->b);
	f->opened = false;

	for (int off = 0; off < KT_FEAT_N_OBJECTS; off++) {
		setenv(KT_REFUSE_ENV, kt_feature_name(off), 1);
		if (kt_bpf_open(&f->b, f->pin, err, sizeof(err)))
			fail_msg("open with %s refused: %s", kt_feature_name(off), err);
		f->opened = true;
		print_message("%-8s refused: %s\n", kt_feature_name(off), f->b.feat.f[off].why);
		for (int o = 0; o < KT_FEAT_N_OBJECTS; o++) {
			assert_int_equal(f->b.feat.f[o].state, o == off ? KT_FEAT_OFF : KT_FEAT_ON);
			assert_true((object_of(&f->b, o) == NULL) == (o == off));
		}
		assert_non_null(strstr(f->b.feat.f[off].why, strerror(EPERM)));
		assert_int_equal(kt_features_off(&f->b.feat) - (f->b.feat.f[KT_FEAT_FQ].state == KT_FEAT_OFF), 1);
		/* the sync links what loaded, and takes away the refused
		 * object's links the full load above made */
		if (kt_bpf_sync_links(&f->b, want, 1, err, sizeof(err)))
			fail_msg("sync with %s refused: %s", kt_feature_name(off), err);
		for (int o = 0; o < KT_FEAT_N_OBJECTS; o++)
			for (int p = 0; p < 3 && progs_of[o][p]; p++)
				if (has_link(f, cgid, progs_of[o][p]) != (o != off))
					fail_msg("%s refused: link of %s %s", kt_feature_name(off),
						 progs_of[o][p], o == off ? "left" : "missing");
		kt_bpf_close(&f->b);
		f->opened = false;
		unsetenv(KT_REFUSE_ENV);
		/* back to every object, for the next round's detach */
		if (kt_bpf_open(&f->b, f->pin, err, sizeof(err)) ||
		    kt_bpf_sync_links(&f->b, want, 1, err, sizeof(err)))
			fail_msg("reopen: %s", err);
		kt_bpf_close(&f->b);
	}
}

static void test_all_refused(void **state)
{
	struct fixture *f = *state;
	char err[512];
	int ret;

	KTEST_SKIP_UNLESS_ROOT();
	setenv(KT_REFUSE_ENV, "connect,sendmsg,egress,sock,sockops", 1);
	ret = kt_bpf_open(&f->b, f->pin, err, sizeof(err));
	print_message("every object refused: %s\n", err);
	assert_int_equal(ret, -EPERM);
	assert_null(strchr(err, '\n'));
	assert_non_null(strstr(err, "cannot load BPF programs"));
	assert_non_null(strstr(err, strerror(EPERM)));
	/* no BTF hint on a kernel that has BTF */
	assert_null(strstr(err, "BTF"));
	assert_int_not_equal(access(f->pin, F_OK), 0);
	kt_bpffx_assert_none_left();
}

/* A pinned map of another layout is an upgrade that needs a cleanup, not
 * a feature the kernel lacks: in a pin directory an earlier load made,
 * kt_pace_socks (which only sockops declares) pinned anew with 8-byte
 * values fails the whole open, naming cleanup, instead of turning sockops
 * off; the adopted pins stay. */
static void test_pin_mismatch_fails(void **state)
{
	struct fixture *f = *state;
	char err[512], p[PATH_MAX + 32];
	int fd, ret;

	KTEST_SKIP_UNLESS_ROOT();
	if (kt_bpf_open(&f->b, f->pin, err, sizeof(err)))
		fail_msg("open: %s", err);
	kt_bpf_close(&f->b);
	snprintf(p, sizeof(p), "%s/kt_pace_socks", f->pin);
	assert_int_equal(unlink(p), 0);
	fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, "kt_pace_socks", 4, 8, KT_MAX_BUCKETS, NULL);
	assert_true(fd >= 0);
	assert_int_equal(bpf_obj_pin(fd, p), 0);
	close(fd);
	ret = kt_bpf_open(&f->b, f->pin, err, sizeof(err));
	print_message("a pinned map of another layout: %s\n", err);
	assert_int_equal(ret, -EINVAL);
	assert_non_null(strstr(err, "kthrottlectl cleanup"));
	assert_null(strchr(err, '\n'));
	assert_true(kt_bpf_pinned(f->pin));
}

static void test_probes(void **state)
{
	struct kt_features fs;
	char err[256];
	bool fq;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	memset(&fs, 0, sizeof(fs));
	assert_int_equal(kt_features_check_minimum(err, sizeof(err)), 0);
	kt_features_probe_kernel(&fs);
	assert_true(kt_feature_on(&fs, KT_FEAT_RINGBUF));
	/* the other way to ask: can tc make an fq qdisc here? A throwaway
	 * netns's loopback answers it without touching the host's devices */
	fq = system("ip netns add kt-feat-fq >/dev/null 2>&1 && "
		    "ip netns exec kt-feat-fq tc qdisc add dev lo root fq >/dev/null 2>&1") == 0;
	(void)!system("ip netns del kt-feat-fq >/dev/null 2>&1");
	print_message("fq: probe %s (%s), tc %s\n", kt_feature_on(&fs, KT_FEAT_FQ) ? "on" : "off",
		      fs.f[KT_FEAT_FQ].why, fq ? "made one" : "could not");
	if (ktest_find_prog("tc") && ktest_find_prog("ip"))
		assert_int_equal(kt_feature_on(&fs, KT_FEAT_FQ), fq);
	setenv(KT_REFUSE_ENV, "fq,ringbuf", 1);
	kt_features_probe_kernel(&fs);
	unsetenv(KT_REFUSE_ENV);
	assert_false(kt_feature_on(&fs, KT_FEAT_FQ));
	assert_false(kt_feature_on(&fs, KT_FEAT_RINGBUF));
}

int main(void)
{
	kt_log_init("test_features", KT_LOG_WARN);
	/* the loader reads the verifier's line from libbpf's messages */
	kt_log_setup_libbpf();
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_each_refused, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_all_refused, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_pin_mismatch_fails, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_probes, fx_setup, fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
