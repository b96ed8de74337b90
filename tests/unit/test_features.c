// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The feature table without a kernel: which features each unit needs and
 * uses, KT_REFUSE_FEATURES's list, the verifier's line picked out of
 * libbpf's message (the one Linux 6.1 printed for kt_egress before its
 * initial value went through the stack), and health's warnings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "control/health.h"
#include "kernel/features.h"
#include "kthrottle.h"

#define BIT(f) (1u << (f))

static void test_units(void **state)
{
	(void)state;
	assert_int_equal(kt_unit_needs(KT_UNIT_CONNECTION), BIT(KT_FEAT_CONNECT));
	assert_int_equal(kt_unit_needs(KT_UNIT_CONCURRENT), BIT(KT_FEAT_CONNECT) | BIT(KT_FEAT_SOCK));
	assert_int_equal(kt_unit_needs(KT_UNIT_DATAGRAM), BIT(KT_FEAT_SENDMSG));
	assert_int_equal(kt_unit_needs(KT_UNIT_PACKET), BIT(KT_FEAT_EGRESS));
	assert_int_equal(kt_unit_needs(KT_UNIT_BYTE), BIT(KT_FEAT_EGRESS));
	assert_int_equal(kt_unit_needs(KT_UNIT_REQUEST), 0);
	assert_int_equal(kt_unit_uses(KT_UNIT_REQUEST, false, false), 0);
	assert_true(kt_unit_uses(KT_UNIT_CONNECTION, false, false) & BIT(KT_FEAT_SOCK));
	assert_false(kt_unit_uses(KT_UNIT_CONNECTION, true, false) & BIT(KT_FEAT_SOCK));
	assert_true(kt_unit_uses(KT_UNIT_DATAGRAM, true, false) & BIT(KT_FEAT_EGRESS));
	assert_true(kt_unit_uses(KT_UNIT_BYTE, true, false) & BIT(KT_FEAT_FQ));
	assert_true(kt_unit_uses(KT_UNIT_CONCURRENT, true, false) & BIT(KT_FEAT_AUDIT));
	/* a call limit's maxDelay is set by sockops */
	assert_false(kt_unit_uses(KT_UNIT_CALL, true, false) & BIT(KT_FEAT_SOCKOPS));
	assert_true(kt_unit_uses(KT_UNIT_CALL, true, true) & BIT(KT_FEAT_SOCKOPS));
	/* every feature has a name and an effect */
	for (int f = 0; f < KT_FEAT_COUNT; f++) {
		assert_true(strlen(kt_feature_name(f)) > 0);
		assert_true(strlen(kt_feature_effect(f)) > 0);
	}
	assert_string_equal(kt_feature_name(KT_FEAT_COUNT), "?");
}

static void test_set_and_first_off(void **state)
{
	struct kt_features fs;

	(void)state;
	memset(&fs, 0, sizeof(fs));
	assert_int_equal(kt_features_off(&fs), 0);
	assert_int_equal(kt_features_first_off(&fs, ~0u), KT_FEAT_COUNT);
	assert_true(kt_features_set(&fs, KT_FEAT_EGRESS, false, "Permission denied:\nverifier"));
	assert_false(kt_features_set(&fs, KT_FEAT_EGRESS, false, "again"));
	/* one line whatever the kernel said */
	assert_null(strchr(fs.f[KT_FEAT_EGRESS].why, '\n'));
	assert_true(kt_features_set(&fs, KT_FEAT_CONNECT, true, "ignored"));
	assert_string_equal(fs.f[KT_FEAT_CONNECT].why, "");
	assert_int_equal(kt_features_off(&fs), 1);
	assert_int_equal(kt_features_first_off(&fs, kt_unit_needs(KT_UNIT_BYTE)), KT_FEAT_EGRESS);
	assert_int_equal(kt_features_first_off(&fs, kt_unit_needs(KT_UNIT_CONNECTION)), KT_FEAT_COUNT);
	assert_false(kt_features_set(&fs, KT_FEAT_COUNT, true, NULL));
}

static void test_refuse_env(void **state)
{
	(void)state;
	unsetenv(KT_REFUSE_ENV);
	assert_false(kt_feature_refused_by_env(KT_FEAT_EGRESS));
	setenv(KT_REFUSE_ENV, "egress", 1);
	assert_true(kt_feature_refused_by_env(KT_FEAT_EGRESS));
	assert_false(kt_feature_refused_by_env(KT_FEAT_CONNECT));
	setenv(KT_REFUSE_ENV, "sock,inflight_audit", 1);
	assert_true(kt_feature_refused_by_env(KT_FEAT_SOCK));
	assert_true(kt_feature_refused_by_env(KT_FEAT_AUDIT));
	/* whole names only: "sock" is not "sockops" */
	assert_false(kt_feature_refused_by_env(KT_FEAT_SOCKOPS));
	setenv(KT_REFUSE_ENV, "sockopsx,,egres", 1);
	assert_false(kt_feature_refused_by_env(KT_FEAT_SOCKOPS));
	assert_false(kt_feature_refused_by_env(KT_FEAT_EGRESS));
	unsetenv(KT_REFUSE_ENV);
}

/* libbpf 1.1's message for a program the verifier refused, as the tap
 * gets it (one call, the log inside). */
static const char egress_61[] =
	"libbpf: prog 'kt_egress': -- BEGIN PROG LOAD LOG --\n"
	"func#0 @0\n"
	"func#1 @312\n"
	"0: R1=ctx(off=0,imm=0) R10=fp0\n"
	"; return bpf_sk_storage_get(&kt_sk_eg, sk, (void *)nv, BPF_SK_STORAGE_GET_F_CREATE) != 0;\n"
	"371: (85) call bpf_sk_storage_get#107\n"
	"R3 type=mem expected=fp, pkt, pkt_meta, map_key, map_value\n"
	"processed 201123 insns (limit 1000000) max_states_per_insn 4 total_states 9030 peak_states 1734 mark_read 120\n"
	"-- END PROG LOAD LOG --\n";

static void test_verifier_line(void **state)
{
	char line[200], tail[4096];

	(void)state;
	kt_features_vlog_reset();
	assert_false(kt_features_vlog_line(line, sizeof(line), tail, sizeof(tail)));
	assert_string_equal(line, "");
	/* other messages are not the log */
	kt_features_vlog_feed("libbpf: prog 'kt_egress': BPF program load failed: Permission denied\n");
	assert_false(kt_features_vlog_line(line, sizeof(line), NULL, 0));
	kt_features_vlog_feed(egress_61);
	assert_true(kt_features_vlog_line(line, sizeof(line), tail, sizeof(tail)));
	assert_string_equal(line, "R3 type=mem expected=fp, pkt, pkt_meta, map_key, map_value");
	/* the tail: the log's last lines, the statistics included */
	assert_non_null(strstr(tail, "processed 201123 insns"));
	assert_non_null(strstr(tail, "371: (85) call bpf_sk_storage_get#107\n"));
	assert_null(strstr(tail, "END PROG LOAD LOG"));
	/* a log of noise only names nothing */
	kt_features_vlog_feed("-- BEGIN PROG LOAD LOG --\nprocessed 5 insns\n-- END PROG LOAD LOG --\n");
	assert_false(kt_features_vlog_line(line, sizeof(line), NULL, 0));
	kt_features_vlog_reset();
}

static void test_health_warnings(void **state)
{
	struct kt_features fs;
	struct kt_health_in in;
	struct kt_health h;
	char out[2048];

	(void)state;
	memset(&fs, 0, sizeof(fs));
	memset(&in, 0, sizeof(in));
	for (int f = 0; f < KT_FEAT_COUNT; f++)
		kt_features_set(&fs, f, true, NULL);
	in.now_ns = in.started_ns = 1;
	in.tick_ns = 100000000;
	in.bpf_loaded = true;
	in.feat = &fs;
	kt_health_eval(&in, &h);
	kt_health_format(&in, &h, false, out, sizeof(out));
	assert_string_equal(out, "ready\nkernel ok\n");

	/* fq off: a warning only while a limit uses it */
	kt_features_set(&fs, KT_FEAT_FQ, false, "no sch_fq");
	kt_health_eval(&in, &h);
	kt_health_format(&in, &h, false, out, sizeof(out));
	assert_string_equal(out, "ready\nkernel ok\n");
	in.feat_used = kt_unit_uses(KT_UNIT_BYTE, false, false);
	kt_health_format(&in, &h, false, out, sizeof(out));
	assert_non_null(strstr(out, "ready\nkernel ok\nwarning kernel feature fq off: no sch_fq; "));

	/* a refused object: ready, warned, with the limits it leaves */
	kt_features_set(&fs, KT_FEAT_EGRESS, false, "Permission denied: verifier: R3 type=mem");
	in.unenforced = 2;
	in.unenforced_limit = "pkts";
	kt_health_eval(&in, &h);
	assert_true(h.ready);
	kt_health_format(&in, &h, false, out, sizeof(out));
	assert_non_null(strstr(out, "\nwarning kernel feature egress off: Permission denied: verifier: R3 type=mem; packet and byte limits are not enforced"));
	assert_non_null(strstr(out, "\nwarning 2 limit(s) not enforced by this kernel, e.g. pkts\n"));
	assert_true(!strncmp(out, "ready\nkernel ok\n", 16));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_units),
		cmocka_unit_test(test_set_and_first_off),
		cmocka_unit_test(test_refuse_env),
		cmocka_unit_test(test_verifier_line),
		cmocka_unit_test(test_health_warnings),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
