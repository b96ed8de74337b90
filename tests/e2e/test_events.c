// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Throttle events: the kernel reports refusals through the kt_events ring
 * buffer, sampled, with the reason and the retry-after, and the daemon
 * shows them per limit in status. A real daemon and real connects from a
 * member cgroup (kt-load, nobody listening: admitted connects fail with
 * ECONNREFUSED, refused ones with EBUSY):
 *   - a limit whose share is used up: reason "share", a retry-after within
 *     one token's interval, as many events as refusals at most;
 *   - a limit whose store never answered (an unknown pool size grants
 *     nothing, so the bucket is closed): reason "closed". */
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
#include <cmocka.h>

#include "ktest.h"

static struct fixture {
	struct ktest_daemon d;
	char cg[PATH_MAX];
} fx;

static int setup(void **state)
{
	(void)state;
	memset(&fx, 0, sizeof(fx));
	fx.d.pid = -1;
	if (ktest_root_unavailable())
		return 0;
	return ktest_cgroup_create("events", fx.cg, sizeof(fx.cg)) ? -1 : 0;
}

static int teardown(void **state)
{
	(void)state;
	if (fx.d.dir[0])
		ktest_daemon_cleanup(&fx.d);
	if (fx.cg[0])
		ktest_cgroup_destroy(fx.cg);
	return 0;
}

/* The limit's throttle_events.<reason> from status json. */
static double events_of(const char *json, const char *limit, const char *reason)
{
	const char *ev = ktest_json_limit_field(json, limit, "throttle_events");
	char key[32];
	double v = -1;

	if (!ev)
		return -1;
	snprintf(key, sizeof(key), "\"%s\":", reason);
	ev = strstr(ev, key);
	if (ev)
		v = atof(ev + strlen(key));
	return v;
}

static void test_share_events(void **state)
{
	int port = ktest_free_port(SOCK_STREAM);
	struct ktest_load r;
	char body[1024], *st;
	double share, closed;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_true(port > 0);
	snprintf(body, sizeof(body),
		 "limits:\n"
		 "  - {name: ev, cgroups: [%s], unit: connection, burst: 1,\n"
		 "     match: {cidrs: [127.0.0.1/32], ports: %d}, rateLimit: {max: 2}}\n",
		 fx.cg, port);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
	assert_int_equal(ktest_load(fx.cg, "tcp", "127.0.0.1", port, 0.5, &r), 0);
	st = ktest_daemon_cmd(&fx.d, "status json");
	assert_non_null(st);
	share = events_of(st, "ev", "share");
	closed = events_of(st, "ev", "closed");
	const char *last = ktest_json_limit_field(st, "ev", "last_throttle");
	print_message("%llu connects refused in 0.5 s; events: share %.0f closed %.0f; last %.80s\n",
		      r.refused, share, closed, last ? last : "(none)");
	assert_true(r.refused > 0);
	assert_true(share >= 1 && share <= (double)r.refused);
	assert_true(closed == 0);
	assert_non_null(last);
	assert_non_null(strstr(last, "\"reason\":\"share\""));
	const char *ra = strstr(last, "\"retry_after_ms\":");
	assert_non_null(ra);
	double retry_ms = atof(ra + strlen("\"retry_after_ms\":"));
	assert_true(retry_ms > 0 && retry_ms <= 500.0 + 1.0); /* one token at 2/s */
	free(st);
}

static void test_closed_events(void **state)
{
	int port = ktest_free_port(SOCK_STREAM), dead = ktest_free_port(SOCK_STREAM);
	struct ktest_load r;
	char body[1024], *st;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_true(port > 0 && dead > 0 && port != dead);
	/* a store nobody answers: the pool size stays unknown, nothing granted */
	snprintf(body, sizeof(body),
		 "store:\n"
		 "  redisStore: {mode: single, url: \"redis://127.0.0.1:%d/0\"}\n"
		 "limits:\n"
		 "  - {name: evc, cgroups: [%s], unit: connection,\n"
		 "     match: {cidrs: [127.0.0.1/32], ports: %d}, rateLimit: {max: 2}}\n",
		 dead, fx.cg, port);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
	assert_int_equal(ktest_load(fx.cg, "tcp", "127.0.0.1", port, 0.3, &r), 0);
	st = ktest_daemon_cmd(&fx.d, "status json");
	assert_non_null(st);
	const char *last = ktest_json_limit_field(st, "evc", "last_throttle");
	print_message("%llu ok, %llu refused; events: closed %.0f share %.0f; last %.80s\n", r.ok,
		      r.refused, events_of(st, "evc", "closed"), events_of(st, "evc", "share"),
		      last ? last : "(none)");
	assert_int_equal(r.ok + r.errors, 0);
	assert_true(r.refused > 0);
	assert_true(events_of(st, "evc", "closed") >= 1);
	assert_true(events_of(st, "evc", "share") == 0);
	assert_non_null(last);
	assert_non_null(strstr(last, "\"reason\":\"closed\",\"retry_after_ms\":-1"));
	free(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_share_events, setup, teardown),
		cmocka_unit_test_setup_teardown(test_closed_events, setup, teardown),
	};

	alarm(60);
	return cmocka_run_group_tests_name("e2e_events", tests, NULL, NULL);
}
