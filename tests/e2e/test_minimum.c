// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The minimum kernel, as a user meets it: kthrottled on the running kernel
 * with the smallest valid config.
 *   - a kernel with every helper the objects need (bpf_loop, Linux 5.17;
 *     bpf_set_retval, 5.18; as kt_features_check_minimum asks libbpf):
 *     it starts, and status names the kernel's features;
 *   - an older one (the kernel matrix boots Debian 11's 5.10 for this):
 *     it exits at start, non-zero, with one line naming the missing helper,
 *     the kernel that added it and the minimum, Linux 6.1, and leaves no
 *     pin directory behind. */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/utsname.h>
#include <cmocka.h>

#include "kernel/features.h"
#include "kt_daemonfx.h"
#include "ktest.h"

static struct fixture {
	struct ktest_daemon d;
	char cg[PATH_MAX];
} fx;

static int teardown(void **state)
{
	(void)state;
	kt_daemonfx_end(&fx.d, fx.cg);
	return 0;
}

static void test_minimum_kernel(void **state)
{
	char body[1024], why[256] = "", *log, *out;
	struct utsname u;
	int code = 0, started;
	bool old;

	(void)state;
	if (ktest_root_unavailable())
		skip();
	assert_int_equal(uname(&u), 0);
	old = kt_features_check_minimum(why, sizeof(why)) != 0;
	print_message("kernel %s: %s\n", u.release, old ? why : "has the helpers kthrottle needs");
	assert_int_equal(ktest_daemon_init(&fx.d), 0);
	assert_int_equal(ktest_daemon_config(&fx.d, kt_daemonfx_ok_body(body, sizeof(body), fx.cg)), 0);
	started = ktest_daemon_start(&fx.d, 20000, &code);
	log = ktest_slurp(fx.d.log);
	assert_non_null(log);
	if (!old) {
		if (started != 0)
			fail_msg("kthrottled did not start (exit %d): %s", code, log);
		out = ktest_daemon_cmd(&fx.d, "status");
		assert_non_null(out);
		assert_non_null(strstr(out, "features on: connect sendmsg egress sock sockops"));
		free(out);
		free(log);
		return;
	}
	print_message("kthrottled: %s", log);
	assert_int_not_equal(started, 0);
	assert_int_not_equal(code, 0);
	assert_non_null(strstr(log, "lacks the BPF helper bpf_"));
	assert_non_null(strstr(log, "kthrottle needs Linux 6.1 or later"));
	assert_non_null(strstr(log, u.release));
	/* one error line, and nothing about BTF: the kernel's fault is named */
	assert_null(strstr(strstr(log, "error:") + 1, "error:"));
	assert_null(strstr(log, "BTF"));
	assert_int_not_equal(access(fx.d.pin_dir, F_OK), 0);
	free(log);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_minimum_kernel, kt_dfx_setup, teardown),
	};

	kt_dfx = (struct kt_daemonfx_spec){
		.fx = &fx, .len = sizeof(fx), .d = &fx.d, .cgroup = "minimum", .cg = fx.cg
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
