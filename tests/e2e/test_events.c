// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Throttle events: the kernel reports refusals through the kt_events ring
 * buffer, sampled, with the reason and the retry-after, and the daemon
 * shows them per limit in status. A real daemon and real connects from a
 * member cgroup (kt-load, nobody listening: admitted connects fail with
 * ECONNREFUSED, refused ones with EBUSY):
 *   - a limit whose share is used up: reason "share", a retry-after within
 *     one token's interval, as many events as refusals at most;
 *   - a limit whose store never answered (an unknown pool size grants
 *     nothing, so the bucket is closed): reason "closed";
 *   - `kthrottlectl subscribe`: a "throttled" line within a tick of the
 *     first refusal, with the reason and a retry-after, and "resumed"
 *     within two ticks (and one of slack) after the refusals stop. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "kt_daemonfx.h"
#include "ktest.h"

static struct fixture {
	struct ktest_daemon d;
	char cg[PATH_MAX];
} fx;

static int setup(void **state)
{
	(void)state;
	return kt_daemonfx_setup(&fx, sizeof(fx), &fx.d, "events", fx.cg, sizeof(fx.cg));
}

static int teardown(void **state)
{
	(void)state;
	kt_daemonfx_end(&fx.d, fx.cg);
	return 0;
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
	share = kt_daemonfx_events(st, "ev", "share");
	closed = kt_daemonfx_events(st, "ev", "closed");
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
		      r.refused, kt_daemonfx_events(st, "evc", "closed"), kt_daemonfx_events(st, "evc", "share"),
		      last ? last : "(none)");
	assert_int_equal(r.ok + r.errors, 0);
	assert_true(r.refused > 0);
	assert_true(kt_daemonfx_events(st, "evc", "closed") >= 1);
	assert_true(kt_daemonfx_events(st, "evc", "share") == 0);
	assert_non_null(last);
	assert_non_null(strstr(last, "\"reason\":\"closed\",\"retry_after_ms\":-1"));
	free(st);
}

static void test_subscribe(void **state)
{
	int port = ktest_free_port(SOCK_DGRAM), p[2], out = -1, status;
	char body[1024], line[256];
	uint64_t t0, t_thr, t_res;
	pid_t sub, load;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_true(port > 0);
	snprintf(body, sizeof(body),
		 "limits:\n"
		 "  - {name: evs, cgroups: [%s], unit: datagram, burst: 1,\n"
		 "     match: {cidrs: [127.0.0.1/32], ports: %d, protocol: udp}, rateLimit: {max: 2}}\n",
		 fx.cg, port);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);

	/* kthrottlectl subscribe evs -n 2: the throttled and the resumed line */
	sub = ktest_subscribe_spawn(&fx.d, "evs", 2, &p[0]);
	assert_true(sub > 0);
	ktest_sleep_ms(300); /* subscribed */

	t0 = ktest_now_ns();
	load = ktest_load_spawn(fx.cg, port, 1.0, 0, &out);
	assert_true(load > 0);
	assert_true(ktest_read_line(p[0], line, sizeof(line), 3000, &t_thr));
	print_message("after %.3f s: %s\n", (t_thr - t0) / 1e9, line);
	assert_int_equal(strncmp(line, "throttled evs reason=share retry_after_ms=", 42), 0);
	double retry_ms = atof(line + 42);
	assert_true(retry_ms > 0 && retry_ms <= 501);
	assert_true(t_thr - t0 <= 250000000ull); /* a tick, and room for fork and exec */

	assert_int_equal(waitpid(load, &status, 0), load); /* the 1 s flood ends */
	uint64_t t_stop = ktest_now_ns();
	close(out);
	assert_true(ktest_read_line(p[0], line, sizeof(line), 3000, &t_res));
	print_message("%.3f s after the sender stopped: %s\n", (t_res - t_stop) / 1e9, line);
	assert_string_equal(line, "resumed evs");
	assert_true(t_res - t_stop <= 400000000ull); /* two ticks, and one of slack */
	assert_int_equal(waitpid(sub, &status, 0), sub);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(p[0]);
}

/* kthrottlectl top: frames of the daemon's status, -n of them, -i apart. */
static void test_top(void **state)
{
	char body[1024], *out = NULL;
	uint64_t t0;
	int rc, frames = 0;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	snprintf(body, sizeof(body),
		 "limits:\n  - {name: toplim, cgroups: [%s], unit: connection, rateLimit: {max: 1}}\n",
		 fx.cg);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
	t0 = ktest_now_ns();
	rc = ktest_run_bin("kthrottlectl", &out, "-s", fx.d.socket, "top", "-n", "3", "-i", "0.2",
			   NULL);
	double took = (ktest_now_ns() - t0) / 1e9;
	assert_int_equal(rc, 0);
	assert_non_null(out);
	for (const char *p = out; (p = strstr(p, "\ntoplim ")); p++)
		frames++;
	print_message("top -n 3 -i 0.2: %d frames in %.2f s\n", frames, took);
	assert_int_equal(frames, 3);
	assert_true(took >= 0.4 && took < 3.0);
	free(out);
}

/* A subscription to a limit that does not exist is refused with one line. */
static void test_subscribe_unknown(void **state)
{
	char *out = NULL, body[1024];
	int rc;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();

	snprintf(body, sizeof(body),
		 "limits:\n  - {name: one, cgroups: [%s], unit: connection, rateLimit: {max: 1}}\n",
		 fx.cg);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
	rc = ktest_run_bin("kthrottlectl", &out, "-s", fx.d.socket, "subscribe", "nope", NULL);
	print_message("exit %d: %s", rc, out ? out : "(null)\n");
	assert_int_equal(rc, 1);
	assert_non_null(out);
	assert_non_null(strstr(out, "error: no limit named nope"));
	free(out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_share_events, setup, teardown),
		cmocka_unit_test_setup_teardown(test_closed_events, setup, teardown),
		cmocka_unit_test_setup_teardown(test_subscribe, setup, teardown),
		cmocka_unit_test_setup_teardown(test_subscribe_unknown, setup, teardown),
		cmocka_unit_test_setup_teardown(test_top, setup, teardown),
	};

	alarm(60);
	return cmocka_run_group_tests_name("e2e_events", tests, NULL, NULL);
}
