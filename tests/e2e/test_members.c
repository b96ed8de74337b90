// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Members that come and go: a real daemon whose limit names its cgroups by
 * a glob pattern and by a plain path that does not exist at the start.
 * Cgroups are created after the start with a process inside sending UDP to
 * a loopback receiver, and each is measured:
 *   - enforced within one tick of its mkdir (the time from mkdir to the
 *     first EBUSY, the burst used up, printed and bounded);
 *   - held to its rate (arrivals at the receiver <= rate x time + burst);
 *   - listed in status, found by the pattern or the path;
 *   - gone on rmdir: its member and its links leave within a tick;
 *   - the same path created again (a new cgroup id) is enforced again. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "arrivals.h"
#include "kt_daemonfx.h"
#include "ktest.h"

#define RATE 20.0
#define BURST 5.0
#define TICK_S 0.1
/* mkdir to enforced: one tick, plus room for a loaded 2-core machine */
#define JOIN_BOUND_S (TICK_S + 0.15)

static struct fixture {
	struct ktest_daemon d;
	char base[PATH_MAX];
	char sub[3][PATH_MAX]; /* base/w-1, base/w-2, base/later */
	struct arrivals a;
	pid_t kid;
} fx;

static int setup(void **state)
{
	int rc = kt_daemonfx_setup(&fx, sizeof(fx), &fx.d, "members", fx.base, sizeof(fx.base));

	(void)state;
	fx.kid = -1;
	if (rc || !fx.base[0]) /* failed, or root tests cannot run here */
		return rc;
	snprintf(fx.sub[0], sizeof(fx.sub[0]), "%s/w-1", fx.base);
	snprintf(fx.sub[1], sizeof(fx.sub[1]), "%s/w-2", fx.base);
	snprintf(fx.sub[2], sizeof(fx.sub[2]), "%s/later", fx.base);
	return arrivals_start(&fx.a) ? -1 : 0;
}

static int teardown(void **state)
{
	(void)state;
	ktest_kill_wait(&fx.kid);
	kt_daemonfx_end(&fx.d, NULL);
	for (int i = 0; i < 3; i++)
		kt_daemonfx_group_cg_end(fx.sub[i]);
	kt_daemonfx_group_cg_end(fx.base);
	arrivals_stop(&fx.a);
	return 0;
}

/* The daemon: one datagram limit on base/w-* and base/later. */
static void start_daemon(void)
{
	char body[2048];

	snprintf(body, sizeof(body),
		 "limits:\n"
		 "  - name: sel\n"
		 "    cgroups: [\"%s/w-*\", \"%s\"]\n"
		 "    match: {cidrs: [127.0.0.1/32], ports: %d, protocol: udp}\n"
		 "    unit: datagram\n"
		 "    burst: %.0f\n"
		 "    rateLimit: {max: %.0f}\n",
		 fx.base, fx.sub[2], fx.a.port, BURST, RATE);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
}

struct run {
	double first_refusal_s; /* after the mkdir; < 0: none */
	unsigned long long ok, refused;
};

/* mkdir `cg`, then at once a child in it sends a datagram every 2 ms for
 * secs seconds; what it saw. The arrivals counted meanwhile are *arrived. */
static struct run join_and_send(const char *cg, double secs, unsigned long long *arrived)
{
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons((uint16_t)fx.a.port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct run r = { .first_refusal_s = -1 };
	unsigned long long before;
	int p[2];
	uint64_t t0;

	assert_int_equal(pipe(p), 0);
	before = arrivals_total(&fx.a);
	t0 = ktest_now_ns();
	assert_int_equal(mkdir(cg, 0755), 0);
	fx.kid = fork();
	assert_true(fx.kid >= 0);
	if (fx.kid == 0) {
		char b[16] = { 0 };
		int fd;

		close(p[0]);
		if (ktest_cgroup_join(cg) != 0)
			_exit(2);
		fd = socket(AF_INET, SOCK_DGRAM, 0);
		if (fd < 0)
			_exit(3);
		while (ktest_now_ns() - t0 < (uint64_t)(secs * 1e9)) {
			if (sendto(fd, b, sizeof(b), 0, (struct sockaddr *)&to, sizeof(to)) >= 0) {
				r.ok++;
			} else if (errno == EBUSY) {
				if (!r.refused++)
					r.first_refusal_s = (ktest_now_ns() - t0) / 1e9;
			}
			usleep(2000);
		}
		if (write(p[1], &r, sizeof(r)) != sizeof(r))
			_exit(4);
		_exit(0);
	}
	kt_child_result(p, &fx.kid, &r, sizeof(r));
	ktest_sleep_ms(100); /* the last datagrams land */
	*arrived = arrivals_total(&fx.a) - before;
	return r;
}

/* A cgroup joined: it was enforced within JOIN_BOUND_S of its mkdir, and
 * what it got through stayed within rate x time + burst, plus what it sent
 * before its programs were attached (one datagram per 2 ms until the first
 * refusal: the latency bounded above, not the limit). */
static void assert_enforced(const char *what, const struct run *r, double secs,
			    unsigned long long arrived)
{
	double before_attach = r->first_refusal_s > 0 ? r->first_refusal_s / 0.002 + 1 : 0;
	double bound = RATE * secs + BURST + 2 + before_attach;

	print_message("%s: first EBUSY %.3f s after mkdir; %llu sent, %llu refused, %llu arrived (bound %.0f)\n",
		      what, r->first_refusal_s, r->ok, r->refused, arrived, bound);
	assert_true(r->refused > 0);
	assert_true(r->first_refusal_s >= 0 && r->first_refusal_s <= JOIN_BOUND_S);
	assert_true(arrived <= bound);
	assert_true(arrived >= BURST);
}

/* Whether status lists `path` as a member, found by `by` ("pattern"/"path"). */
static bool listed(const char *path, const char *by)
{
	char *st = ktest_daemon_cmd(&fx.d, "status json"), want[PATH_MAX + 64];
	bool found;

	assert_non_null(st);
	snprintf(want, sizeof(want), "\"path\":\"%s\",\"found_by\":\"%s\"", path, by);
	found = strstr(st, want) != NULL;
	free(st);
	return found;
}

/* Whether any link of cgroup id `cgid` is pinned. */
static bool has_links(uint64_t cgid)
{
	char cmd[PATH_MAX + 64], *out = NULL, want[32];
	char *argv[] = { "/bin/sh", "-c", cmd, NULL };
	bool found;

	snprintf(cmd, sizeof(cmd), "ls %s/links", fx.d.pin_dir);
	assert_int_equal(ktest_run_capture(argv, &out), 0);
	snprintf(want, sizeof(want), "%llu-", (unsigned long long)cgid);
	found = strstr(out, want) != NULL;
	free(out);
	return found;
}

/* rmdir `cg`: within one tick (and slack) it is no member and has no links. */
static void remove_and_check_gone(const char *cg)
{
	uint64_t id = ktest_cgroup_id(cg), t0;
	double took;

	assert_true(id != 0);
	assert_int_equal(rmdir(cg), 0);
	t0 = ktest_now_ns();
	while ((listed(cg, "pattern") || listed(cg, "path") || has_links(id)) &&
	       ktest_now_ns() - t0 < 3000000000ull)
		ktest_sleep_ms(10);
	took = (ktest_now_ns() - t0) / 1e9;
	print_message("%s removed: member and links gone after %.3f s\n", cg, took);
	assert_false(listed(cg, "pattern"));
	assert_false(has_links(id));
	assert_true(took <= JOIN_BOUND_S);
}

static void test_pattern_members_come_and_go(void **state)
{
	unsigned long long arrived;
	struct run r;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_daemon();

	r = join_and_send(fx.sub[0], 1.0, &arrived);
	assert_enforced("w-1 (pattern)", &r, 1.0, arrived);
	assert_true(listed(fx.sub[0], "pattern"));

	/* a second match is a member of its own (pod scope: its own burst) */
	r = join_and_send(fx.sub[1], 1.0, &arrived);
	assert_enforced("w-2 (pattern)", &r, 1.0, arrived);
	assert_true(listed(fx.sub[0], "pattern") && listed(fx.sub[1], "pattern"));

	remove_and_check_gone(fx.sub[0]);
	assert_true(listed(fx.sub[1], "pattern"));

	/* the same path again: a new cgroup, enforced again */
	r = join_and_send(fx.sub[0], 1.0, &arrived);
	assert_enforced("w-1 recreated", &r, 1.0, arrived);
	assert_true(listed(fx.sub[0], "pattern"));
}

/* A plain path missing at the start: a warning, and the limit applies to it
 * once it appears. */
static void test_missing_path_joins_when_created(void **state)
{
	unsigned long long arrived;
	char *log;
	struct run r;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_daemon();
	log = ktest_slurp(fx.d.log);
	assert_non_null(log);
	assert_non_null(strstr(log, "does not exist (yet)"));
	free(log);
	assert_false(listed(fx.sub[2], "path"));

	r = join_and_send(fx.sub[2], 1.0, &arrived);
	assert_enforced("later (plain path)", &r, 1.0, arrived);
	assert_true(listed(fx.sub[2], "path"));
	remove_and_check_gone(fx.sub[2]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_pattern_members_come_and_go, setup, teardown),
		cmocka_unit_test_setup_teardown(test_missing_path_joins_when_created, setup,
						teardown),
	};

	alarm(120);
	return cmocka_run_group_tests_name("e2e_members", tests, NULL, NULL);
}
