// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The in-flight audit's verdict (kt_audit_judge), without a kernel: a
 * count is corrected only after KT_AUDIT_STREAK audits in a row saw it
 * differ from the marks with one sign, each with the count unchanged across
 * its pass, and then by the smallest difference seen; a new owner of the
 * slot (epoch) starts over. The kernel side is tests/bpf/test_inflight. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "kernel/inflight_audit.h"

/* One audit seeing `open` before and after the pass, `marks` in it. */
static int64_t audit(struct kt_audit_slot *st, uint32_t epoch, uint64_t open, uint64_t marks)
{
	struct kt_inflight c = { .open = open, .epoch = epoch };

	return kt_audit_judge(st, &c, &c, marks);
}

static void test_agreement_changes_nothing(void **state)
{
	struct kt_audit_slot st = { 0 };

	(void)state;
	for (int i = 0; i < 10; i++)
		assert_int_equal(audit(&st, 1, 4, 4), 0);
	assert_int_equal(st.streak, 0);
}

static void test_streak_then_smallest_difference(void **state)
{
	struct kt_audit_slot st = { 0 };

	(void)state;
	/* 3 high by the first audit, 2 by the next two: corrected by -2 */
	assert_int_equal(audit(&st, 1, 5, 2), 0);
	assert_int_equal(audit(&st, 1, 5, 3), 0);
	assert_int_equal(audit(&st, 1, 5, 3), -2);
	/* low: raised, after as many audits */
	memset(&st, 0, sizeof(st));
	assert_int_equal(audit(&st, 1, 1, 4), 0);
	assert_int_equal(audit(&st, 1, 1, 4), 0);
	assert_int_equal(audit(&st, 1, 1, 4), 3);
	/* still differing (the correction failed): every further audit says so */
	assert_int_equal(audit(&st, 1, 1, 4), 3);
}

static void test_interruptions(void **state)
{
	struct kt_audit_slot st = { 0 };
	struct kt_inflight before = { .open = 5, .epoch = 1 }, after = { .open = 6, .epoch = 1 };

	(void)state;
	/* one audit in agreement starts over */
	assert_int_equal(audit(&st, 1, 5, 3), 0);
	assert_int_equal(audit(&st, 1, 5, 3), 0);
	assert_int_equal(audit(&st, 1, 5, 5), 0);
	assert_int_equal(audit(&st, 1, 5, 3), 0);
	assert_int_equal(audit(&st, 1, 5, 3), 0);
	/* a difference of the other sign starts over */
	assert_int_equal(audit(&st, 1, 5, 7), 0);
	assert_int_equal(audit(&st, 1, 5, 7), 0);
	/* a count that moved during the pass is no evidence, and breaks nothing */
	assert_int_equal(kt_audit_judge(&st, &before, &after, 7), 0);
	assert_int_equal(st.streak, 2);
	assert_int_equal(audit(&st, 1, 5, 7), 2);
	/* a new owner of the slot: what was seen of the old one is forgotten */
	memset(&st, 0, sizeof(st));
	assert_int_equal(audit(&st, 1, 5, 3), 0);
	assert_int_equal(audit(&st, 1, 5, 3), 0);
	assert_int_equal(audit(&st, 2, 5, 3), 0);
	assert_int_equal(st.streak, 1);
	before.epoch = 2;
	after.epoch = 3;
	after.open = 5;
	assert_int_equal(kt_audit_judge(&st, &before, &after, 3), 0);
	assert_int_equal(st.streak, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_agreement_changes_nothing),
		cmocka_unit_test(test_streak_then_smallest_difference),
		cmocka_unit_test(test_interruptions),
	};

	return cmocka_run_group_tests_name("inflight_audit", tests, NULL, NULL);
}
