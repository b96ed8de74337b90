// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Tag limits across nodes (docs/tags.md), end to end: two kthrottled (two
 * nodes) on one real redis-server, each answering the line protocol on its
 * own query socket. A client alternating its queries between them is held
 * to the one configured rate (burst + rate x time, give or take what one
 * report interval hides), where two unconnected nodes would each give it
 * that much; the hit counts are read back from the Redis stream. With
 * Redis killed, each node holds the client to the rate on its own counts
 * and status says the exchange fails; when Redis returns the exchange
 * resumes and the hits served meanwhile reach the other node. Every loop is
 * bounded; the daemons and Redis are the test's own, stopped by pid. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <cmocka.h>

#include "ktest.h"
#include "redis_proc.h"

#define PREFIX "kttags"
#define RATE 5.0
#define BURST 5
#define REPORT_MS 500

static struct {
	struct rp_proc rp;
	struct ktest_daemon d[2];
	char qsock[2][300];
	int fd[2];
} fx;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int connect_query(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* One query on node i's connection: 1 OK, 0 NO; fails the test on anything
 * else or no answer within 1 s. */
static int ask(int i, const char *tag)
{
	char line[300], ans[4];
	int n = snprintf(line, sizeof(line), "%s\n", tag);
	size_t got = 0;
	uint64_t end = now_ms() + 1000;

	assert_int_equal(send(fx.fd[i], line, (size_t)n, MSG_NOSIGNAL), n);
	while (got < 3) {
		struct pollfd p = { .fd = fx.fd[i], .events = POLLIN };
		int left = (int)(end - now_ms());

		if (left <= 0 || poll(&p, 1, left) != 1)
			fail_msg("node %d: no answer to %s", i, tag);
		ssize_t r = read(fx.fd[i], ans + got, 3 - got);
		if (r <= 0)
			fail_msg("node %d: connection closed", i);
		got += (size_t)r;
	}
	if (!memcmp(ans, "OK\n", 3))
		return 1;
	if (!memcmp(ans, "NO\n", 3))
		return 0;
	fail_msg("node %d: answer %.3s", i, ans);
	return -1;
}

/* A number in the tag limit object of node i's status JSON, under "tags". */
static bool tag_num(int i, const char *field, double *v)
{
	char *js = ktest_daemon_cmd(&fx.d[i], "status json");
	char key[64];
	const char *p;
	bool ok = false;

	if (!js)
		return false;
	p = strstr(js, "\"tags\":[");
	snprintf(key, sizeof(key), "\"%s\":", field);
	if (p && (p = strstr(p, key)))
		ok = sscanf(p + strlen(key), "%lf", v) == 1 ||
		     (!strncmp(p + strlen(key), "true", 4) && (*v = 1, true)) ||
		     (!strncmp(p + strlen(key), "false", 5) && (*v = 0, true));
	free(js);
	return ok;
}

static double tag_num_or(int i, const char *field, double dflt)
{
	double v;

	return tag_num(i, field, &v) ? v : dflt;
}

static void start_node_at(int i, double rate)
{
	char body[1024];

	snprintf(body, sizeof(body),
		 "node: tags-n%d\n"
		 "store:\n"
		 "  redisStore: {mode: single, url: \"redis://127.0.0.1:%d/0\", keyPrefix: " PREFIX "}\n"
		 "tags:\n"
		 "  - name: api\n"
		 "    rate: %g\n"
		 "    burst: %d\n"
		 "    reportInterval: %dms\n"
		 "    query:\n"
		 "      socket: %s\n",
		 i, fx.rp.port, rate, BURST, REPORT_MS, fx.qsock[i]);
	if (ktest_daemon_up(&fx.d[i], body))
		fail_msg("kthrottled node %d did not start", i);
	fx.fd[i] = connect_query(fx.qsock[i]);
	assert_true(fx.fd[i] >= 0);
}

static void start_node(int i)
{
	start_node_at(i, RATE);
}

static int setup(void **state)
{
	const char *why = ktest_root_unavailable();

	(void)state;
	if (why) {
		print_message("skipped: %s\n", why);
		skip();
	}
	memset(&fx, 0, sizeof(fx));
	fx.fd[0] = fx.fd[1] = -1;
	if (rp_start_master(&fx.rp, NULL))
		return -1;
	for (int i = 0; i < 2; i++) {
		if (ktest_daemon_init(&fx.d[i]))
			return -1;
		snprintf(fx.qsock[i], sizeof(fx.qsock[i]), "%s/query.sock", fx.d[i].dir);
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < 2; i++) {
		if (fx.fd[i] >= 0)
			close(fx.fd[i]);
		ktest_daemon_cleanup(&fx.d[i]);
	}
	rp_stop(&fx.rp);
	return 0;
}

/* Waits up to ms for both nodes' exchange to have answered `reports`
 * times (or to be ok, with reports < 0). */
static void wait_exchange(int reports, int ms)
{
	uint64_t end = now_ms() + (uint64_t)ms;

	while (now_ms() < end) {
		bool all = true;

		for (int i = 0; i < 2; i++)
			all = all && tag_num_or(i, "store_ok", 0) == 1 && tag_num_or(i, "reports", 0) >= reports;
		if (all)
			return;
		rp_sleep_ms(50);
	}
	for (int i = 0; i < 2; i++) {
		char *js = ktest_daemon_cmd(&fx.d[i], "status json");
		char *log = ktest_slurp(fx.d[i].log);

		print_message("node %d status: %s\nlog: %s\n", i, js ? js : "(none)", log ? log : "");
		free(js);
		free(log);
	}
	fail_msg("the exchange did not answer %d times in %d ms", reports, ms);
}

/* A client sends a query every 10 ms, alternating between the nodes, for
 * secs; returns how many were served (per node in served[2]). */
static int alternate(const char *tag, double secs, int served[2])
{
	uint64_t start = now_ms(), end = start + (uint64_t)(secs * 1000);
	int k = 0;

	served[0] = served[1] = 0;
	for (uint64_t next = start; now_ms() < end && k < 100000; k++, next += 10) {
		served[k & 1] += ask(k & 1, tag);
		while (now_ms() < next + 10)
			rp_sleep_ms(1);
	}
	return served[0] + served[1];
}

static void test_alternating_client_held_to_one_rate(void **state)
{
	const double secs = 6;
	int served[2], total;
	long long xlen;

	(void)state;
	start_node(0);
	start_node(1);
	wait_exchange(2, 5000);
	total = alternate("client-C", secs, served);
	/* burst + rate x time on the two nodes together: each may run ahead
	 * by what the other served since its last report (its own burst at
	 * the start, then a report interval of refill) */
	double want = BURST + RATE * secs;
	double hi = want + BURST + RATE * REPORT_MS / 1000.0 + 1;
	double lo = want - RATE * REPORT_MS / 1000.0 - 2;
	print_message("alternating client, %g/s burst %d for %.0f s: served %d (%d + %d), want %.1f "
		      "(one node alone would serve it %.0f)\n",
		      RATE, BURST, secs, total, served[0], served[1], want, 2 * want);
	if (total > hi || total < lo)
		fail_msg("served %d, want %.1f..%.1f", total, lo, hi);
	assert_true(served[0] > 0 && served[1] > 0);
	/* the hits went through the stream: read it back */
	xlen = rp_command_int(&fx.rp, -1, "XLEN " PREFIX ":tags:{api}");
	assert_true(xlen >= 2);
	redisReply *r = rp_command(&fx.rp, "XREVRANGE " PREFIX ":tags:{api} + - COUNT 50");
	assert_non_null(r);
	bool seen = false;
	for (size_t e = 0; e < r->elements && !seen; e++) {
		redisReply *f = r->element[e]->element[1];

		for (size_t j = 0; j + 1 < f->elements; j += 2)
			if (!strcmp(f->element[j]->str, "h") && strstr(f->element[j + 1]->str, " client-C\n"))
				seen = true;
	}
	freeReplyObject(r);
	assert_true(seen);
	assert_true(tag_num_or(0, "remote_hits", 0) >= 1);
	assert_true(tag_num_or(1, "remote_hits", 0) >= 1);
}

static void test_store_down_each_node_alone_then_resumes(void **state)
{
	const double secs = 3;
	int served[2];
	double before[2];
	uint64_t end;

	(void)state;
	start_node(0);
	start_node(1);
	wait_exchange(2, 5000);
	assert_int_equal(rp_signal(&fx.rp, SIGKILL), 0);
	/* both notice within a few report intervals */
	end = now_ms() + 5000;
	while (now_ms() < end && (tag_num_or(0, "store_ok", 1) != 0 || tag_num_or(1, "store_ok", 1) != 0))
		rp_sleep_ms(50);
	assert_true(tag_num_or(0, "store_ok", 1) == 0 && tag_num_or(1, "store_ok", 1) == 0);
	assert_true(tag_num_or(0, "errors", 0) >= 1);
	for (int i = 0; i < 2; i++)
		before[i] = tag_num_or(i, "remote_hits", -1);
	alternate("client-D", secs, served);
	print_message("redis down, %g/s burst %d for %.0f s: node 0 served %d, node 1 served %d "
		      "(each on its own: want %.1f)\n",
		      RATE, BURST, secs, served[0], served[1], BURST + RATE * secs);
	for (int i = 0; i < 2; i++) {
		if (served[i] > BURST + RATE * secs + 1 || served[i] < BURST + RATE * secs - 2)
			fail_msg("node %d served %d alone, want %.1f", i, served[i], BURST + RATE * secs);
		assert_true(tag_num_or(i, "remote_hits", -2) == before[i]); /* nothing came in */
	}
	/* Redis returns: the exchange resumes and carries the hits of the outage */
	assert_int_equal(rp_restart(&fx.rp), 0);
	end = now_ms() + 8000;
	while (now_ms() < end &&
	       (tag_num_or(0, "remote_hits", 0) < before[0] + served[1] ||
		tag_num_or(1, "remote_hits", 0) < before[1] + served[0]))
		rp_sleep_ms(100);
	for (int i = 0; i < 2; i++) {
		double got = tag_num_or(i, "remote_hits", 0) - before[i];

		print_message("node %d after redis returned: %.0f remote hits (the other served %d)\n", i,
			      got, served[!i]);
		assert_true(got >= served[!i]);
		assert_true(tag_num_or(i, "store_ok", 0) == 1);
	}
	/* and the client is in debt on both nodes now */
	assert_int_equal(ask(0, "client-D"), 0);
	assert_int_equal(ask(1, "client-D"), 0);
}

/* The operator's path: kthrottlectl check against a node's query socket
 * takes tokens like any client, exit 0 while served, 1 once refused; the
 * refusal reaches the other node through the exchange. The rate is slow
 * (a token every CLI_TOKEN_S) so that the seven process spawns and the
 * wait for the report cannot refill a token on a loaded machine. */
#define CLI_TOKEN_S 4.0
static void test_cli_check_through_the_daemon(void **state)
{
	char ctl[300], *out = NULL;
	int rc, ok = 0, no = 0;

	(void)state;
	start_node_at(0, 1.0 / CLI_TOKEN_S);
	start_node_at(1, 1.0 / CLI_TOKEN_S);
	wait_exchange(1, 5000);
	snprintf(ctl, sizeof(ctl), "%s/kthrottlectl", ktest_build_dir());
	for (int k = 0; k < BURST + 2; k++) {
		char *argv[] = { ctl, "check", "--query", fx.qsock[0], "cli-tag", NULL };

		rc = ktest_run_capture(argv, &out);
		if (rc == 0 && out && !strncmp(out, "OK", 2))
			ok++;
		else if (rc == 1 && out && !strncmp(out, "NO", 2))
			no++;
		else
			fail_msg("kthrottlectl check: exit %d, output %s", rc, out ? out : "(none)");
		free(out);
		out = NULL;
	}
	assert_int_equal(ok, BURST);
	assert_int_equal(no, 2);
	/* node 1 hears of the BURST hits within a few reports: its bucket for
	 * the tag is empty too */
	uint64_t end = now_ms() + 3000;
	while (now_ms() < end && tag_num_or(1, "remote_hits", 0) < BURST)
		rp_sleep_ms(50);
	assert_true(tag_num_or(1, "remote_hits", 0) >= BURST);
	assert_int_equal(ask(1, "cli-tag"), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_alternating_client_held_to_one_rate, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_down_each_node_alone_then_resumes, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_cli_check_through_the_daemon, setup, teardown),
	};
	alarm(120);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
