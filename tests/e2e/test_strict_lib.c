// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* A strict cooperative limit (unit request, rateLimit.strict) through
 * libkthrottle and the Python module, two nodes on one Redis.
 *
 * Two kthrottled "nodes" (each its own pin dir on this test's private
 * bpffs, as in test_coop; the same Redis and keyPrefix) publish one strict
 * limit, every 200 ms, maxReserved 4, expireAfter 50 ms. Each node arms one
 * permit at a time in its kt_coop entry; the callers' refusals are the
 * demand. What it proves:
 *   - spacing: four worker processes (two per node, each pointed at its
 *     node's pin dir) calling kthrottle_acquire for 4 s are admitted at
 *     least every - expireAfter - 5 ms apart across both nodes (a permit
 *     may be used late within its window, and armed late by the store
 *     round trip), 20 +- 1 times in all, each worker at least once;
 *   - try_acquire: refused (0) with a retry-after > 0 while no permit is
 *     due, the retry-after of a refusal while a permit is armed points at
 *     that permit, and n = 2 is -EINVAL (a permit admits one request);
 *   - the Python decorator @kthrottle.throttle(LIMIT, max_delay=...) in two
 *     processes, one per node, for 3 s: the same spacing, 15 +- 1 runs.
 * Skipped without root, redis-server, or (the Python test) python3 -m venv
 * and Debian's wheels. */
#include <errno.h>
#include <limits.h>
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "kt_clusterfx.h"
#include "kt_daemonfx.h"
#include "kt_libfx.h"
#include "ktest.h"
#include "kthrottle_client.h"
#include "redis_proc.h"

#define NODES 2
#define PER_NODE 2
#define WORKERS (NODES * PER_NODE)
#define LIMIT "strict-lib"
#define PREFIX "ktstrlib"
#define EVERY_MS 200
#define MAX_RESERVED 4
#define EXPIRE_MS 50
#define TOL_EXTRA_MS 5.0 /* the store round trip and wakeups, on top of expireAfter */
#define MAX_CALLS 1000   /* per worker */
#define MAX_TIMES 4096
#define PY_PROCS NODES

static struct fixture {
	char mnt[64]; /* our bpffs */
	struct rp_proc rp;
	struct ktest_daemon d[NODES];
	bool up[NODES];
	pid_t kids[WORKERS];
	int kfd[WORKERS];
	char tmp[PATH_MAX];
} fx;

static const char *skip_why;

static int group_setup(void **state)
{
	(void)state;
	memset(&fx, 0, sizeof(fx));
	for (int w = 0; w < WORKERS; w++)
		fx.kfd[w] = -1;
	return kt_libfx_setup("kt-strictlib", fx.mnt, sizeof(fx.mnt), &fx.rp, &skip_why);
}

static int group_teardown(void **state)
{
	(void)state;
	kt_libfx_teardown(fx.mnt, &fx.rp);
	return 0;
}

static void kids_kill(void)
{
	for (int w = 0; w < WORKERS; w++) {
		if (fx.kids[w] > 0)
			ktest_kill_wait(&fx.kids[w]);
		fx.kids[w] = 0;
		if (fx.kfd[w] >= 0)
			close(fx.kfd[w]);
		fx.kfd[w] = -1;
	}
}

/* After each test: the processes it started, the nodes, the permit key
 * (the next test starts from an empty one), its temp dir. */
static int teardown(void **state)
{
	(void)state;
	kids_kill();
	for (int i = 0; i < NODES; i++) {
		if (fx.up[i])
			ktest_daemon_cleanup(&fx.d[i]);
		fx.up[i] = false;
	}
	if (fx.rp.pid) {
		redisReply *r = rp_command(&fx.rp, "DEL %s", PREFIX ":strict:{" LIMIT "}");

		if (r)
			freeReplyObject(r);
	}
	if (fx.tmp[0])
		ktest_rmtree(fx.tmp);
	fx.tmp[0] = 0;
	return 0;
}

#define NEED_ENV() KTEST_SKIP_IF(skip_why)

/* The two nodes on the strict cooperative limit, started. */
static void nodes_up(void)
{
	for (int i = 0; i < NODES; i++) {
		char body[1024];

		assert_int_equal(ktest_daemon_init(&fx.d[i]), 0);
		fx.up[i] = true;
		/* on our own bpffs, not under /sys/fs/bpf */
		snprintf(fx.d[i].pin_dir, sizeof(fx.d[i].pin_dir), "%s/kt%d", fx.mnt, i);
		snprintf(body, sizeof(body),
			 "node: lib%d\n"
			 "tickInterval: 50ms\n"
			 "store:\n"
			 "  redisStore: {mode: single, url: \"redis://127.0.0.1:%d/0\", keyPrefix: " PREFIX "}\n"
			 "limits:\n"
			 "  - name: " LIMIT "\n"
			 "    unit: request\n"
			 "    rateLimit:\n"
			 "      strict: {every: %dms, maxReserved: %d, expireAfter: %dms}\n",
			 i, fx.rp.port, EVERY_MS, MAX_RESERVED, EXPIRE_MS);
		assert_int_equal(ktest_daemon_config(&fx.d[i], body), 0);
		assert_int_equal(ktest_daemon_start_logged(&fx.d[i]), 0);
		/* searchable by others, still writable only by root */
		assert_int_equal(chmod(fx.d[i].pin_dir, 0711), 0);
	}
}

static double status_num(int i, const char *field)
{
	double v;

	return kt_daemonfx_status_num(&fx.d[i], LIMIT, field, &v) ? v : -1;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Sorts t; the smallest gap between consecutive times (ms, 1e9 if fewer
 * than 2), and prints it with p50/p99 of gap - every. */
static double gaps(uint64_t *t, int n, const char *tag)
{
	struct kt_clusterfx_gaps g;

	qsort(t, (size_t)n, sizeof(*t), cmp_u64);
	if (kt_clusterfx_gaps(t, n, EVERY_MS, &g))
		print_message("%s: %d admissions, smallest gap %.2f ms (every %d, bound %.0f), "
			      "gap - every p50 %.2f ms p99 %.2f ms, largest gap %.2f ms\n",
			      tag, n, g.lo, EVERY_MS, EVERY_MS - EXPIRE_MS - TOL_EXTRA_MS, g.p50, g.p99,
			      g.hi);
	else
		print_message("%s: %d admissions\n", tag, n);
	return g.lo;
}

/* A worker process: opens LIMIT on `node`'s pin dir, waits for start, then
 * calls kthrottle_acquire (timeout 1 s, never past end) until end, at most
 * MAX_CALLS times, writing the CLOCK_BOOTTIME time of each admission to fd.
 * Exit 0, or which step failed. */
static void lib_worker(int node, uint64_t start, uint64_t end, int fd)
{
	struct kthrottle *h = NULL;
	int r;

	setenv(KTHROTTLE_PIN_DIR_ENV, fx.d[node].pin_dir, 1);
	r = kthrottle_open(LIMIT, &h);
	if (r) {
		fprintf(stderr, "worker on node %d: open: %s\n", node, kthrottle_last_error());
		_exit(10);
	}
	kt_libfx_sleep_until(start);
	for (int calls = 0; calls < MAX_CALLS; calls++) {
		uint64_t now = kt_libfx_boot_ns(), left;

		if (now >= end)
			break;
		left = end - now;
		r = kthrottle_acquire(h, 1, left < 1000000000ull ? left : 1000000000ull);
		if (r < 0) {
			fprintf(stderr, "worker on node %d: acquire %d: %s\n", node, r, kthrottle_last_error());
			_exit(11);
		}
		if (r == 1) {
			uint64_t t = kt_libfx_boot_ns();

			if (write(fd, &t, sizeof(t)) != sizeof(t))
				_exit(12);
		}
	}
	kthrottle_close(h);
	_exit(0);
}

static void test_lib_acquire_two_nodes(void **state)
{
	const double secs = 4.0;
	static uint64_t all[MAX_TIMES];
	int got[WORKERS] = { 0 }, n = 0;
	uint64_t start, end;
	double granted = 0, used = 0, wasted = 0, backoffs = 0;

	(void)state;
	NEED_ENV();
	nodes_up();
	start = kt_libfx_boot_ns() + 300000000ull; /* every worker has its handle open by then */
	end = start + (uint64_t)(secs * 1e9);
	for (int w = 0; w < WORKERS; w++) {
		fx.kids[w] = kt_clusterfx_fork(&fx.kfd[w]);
		if (fx.kids[w] == 0)
			lib_worker(w / PER_NODE, start, end, fx.kfd[w]);
	}
	/* each worker writes ~5 records of 8 bytes: the pipe holds them, so
	 * wait first (bounded: end + the 1 s timeout + slack), then read */
	for (int w = 0; w < WORKERS; w++) {
		int status = -1;
		pid_t r = 0;

		while (kt_libfx_boot_ns() < end + 5000000000ull && (r = waitpid(fx.kids[w], &status, WNOHANG)) == 0)
			ktest_sleep_ms(20);
		assert_int_equal(r, fx.kids[w]);
		fx.kids[w] = 0;
		if (!WIFEXITED(status) || WEXITSTATUS(status))
			print_message("worker %d: status 0x%x\n", w, status);
		assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		for (;;) {
			uint64_t t;
			ssize_t k = read(fx.kfd[w], &t, sizeof(t));

			if (k == 0)
				break;
			assert_int_equal(k, (ssize_t)sizeof(t));
			assert_true(n < MAX_TIMES);
			assert_true(t >= start && t <= end + 100000000ull); /* the last call may end late by its wakeup */
			all[n++] = t;
			got[w]++;
		}
		close(fx.kfd[w]);
		fx.kfd[w] = -1;
	}
	double lo = gaps(all, n, "libkthrottle, 2 nodes x 2 workers, every 200 ms, 4 s");
	for (int w = 0; w < WORKERS; w++)
		print_message("worker %d (node lib%d): %d admitted\n", w, w / PER_NODE, got[w]);
	for (int i = 0; i < NODES; i++) {
		granted += status_num(i, "granted");
		used += status_num(i, "used");
		wasted += status_num(i, "wasted");
		backoffs += status_num(i, "backoffs");
	}
	print_message("nodes: permits granted %.0f, used %.0f, wasted %.0f, back-offs %.0f\n", granted,
		      used, wasted, backoffs);
	assert_true(lo >= EVERY_MS - EXPIRE_MS - TOL_EXTRA_MS);
	assert_true(n >= (int)(secs * 1000 / EVERY_MS) - 1 && n <= (int)(secs * 1000 / EVERY_MS) + 1);
	for (int w = 0; w < WORKERS; w++)
		assert_true(got[w] >= 1); /* nobody starves */
}

/* try_acquire on the strict limit, node lib0, from this process. */
static void test_lib_try_acquire(void **state)
{
	struct kthrottle *h = NULL;
	uint64_t wait = 12345, t, adm[2] = { 0 }, last_t = 0, last_w = 0;
	int r, refusals = 0, closed = 0, finite = 0, k = 0;
	uint64_t after_spent = 0;

	(void)state;
	NEED_ENV();
	nodes_up();
	setenv(KTHROTTLE_PIN_DIR_ENV, fx.d[0].pin_dir, 1);
	assert_int_equal(kthrottle_open(LIMIT, &h), 0);

	/* n > 1 on a strict limit: -EINVAL, nothing charged, nothing asked */
	assert_int_equal(kthrottle_try_acquire(h, 2, &wait), -EINVAL);
	print_message("try_acquire(n = 2): -EINVAL: %s\n", kthrottle_last_error());
	assert_non_null(strstr(kthrottle_last_error(), "strict"));
	assert_int_equal(wait, 12345); /* untouched */
	assert_int_equal(kthrottle_acquire(h, 2, 100000000ull), -EINVAL);
	assert_int_equal(kthrottle_try_acquire(h, 0, &wait), -EINVAL);

	/* no permit yet: refused, retry-after > 0 and finite: not closed, a
	 * permit comes (KT_STRICT_RETRY_NS, ask again soon) */
	wait = 0;
	assert_int_equal(kthrottle_try_acquire(h, 1, &wait), 0);
	print_message("first try_acquire (no permit armed): 0, retry-after %s%llu ns\n",
		      wait == UINT64_MAX ? "UINT64_MAX = " : "", (unsigned long long)wait);
	assert_true(wait > 0 && wait != UINT64_MAX);

	/* every 1 ms for up to 3 s: two admissions. Each refusal says > 0; one
	 * while the second permit is armed points at it */
	uint64_t end = kt_libfx_boot_ns() + 3000000000ull;
	while (k < 2 && kt_libfx_boot_ns() < end) {
		wait = 0;
		r = kthrottle_try_acquire(h, 1, &wait);
		t = kt_libfx_boot_ns();
		assert_true(r == 0 || r == 1);
		if (r == 1) {
			adm[k++] = t;
			if (k == 1) {
				/* just spent: refused until the next permit at the earliest */
				assert_int_equal(kthrottle_try_acquire(h, 1, &after_spent), 0);
				assert_true(after_spent > 0);
			}
			continue;
		}
		refusals++;
		assert_true(wait > 0);
		if (wait == UINT64_MAX) {
			closed++;
		} else {
			finite++;
			if (k == 1) {
				last_t = t;
				last_w = wait;
			}
		}
		ktest_sleep_ms(1);
	}
	kthrottle_close(h);
	print_message("%d refusals before two admissions: %d with retry-after UINT64_MAX (no permit "
		      "armed), %d finite; right after the first admission: %.3f ms\n",
		      refusals, closed, finite, after_spent / 1e6);
	assert_int_equal(k, 2);
	assert_int_equal(closed, 0); /* never "closed" while the store answers */
	print_message("admissions %.3f ms apart\n", (adm[1] - adm[0]) / 1e6);
	assert_true((double)(adm[1] - adm[0]) / 1e6 >= EVERY_MS - EXPIRE_MS - TOL_EXTRA_MS);
	/* after the spent permit the bucket holds `every`: at most that long */
	assert_true(after_spent <= (uint64_t)EVERY_MS * 1000000ull);
	/* the last refusal before the second admission, while that permit was
	 * armed: its retry-after is when it was admitted (polled every ms) */
	assert_true(last_t && last_w);
	double off_ms = ((double)adm[1] - (double)(last_t + last_w)) / 1e6;
	print_message("last refusal said retry after %.3f ms; admitted %.3f ms after that\n", last_w / 1e6,
		      off_ms);
	assert_true(off_ms >= -1.0 && off_ms <= 10.0);
}

/* argv: limit start_boottime_s secs max_delay. Waits for start, then calls
 * the decorated function until start + secs (at most 1000 calls), printing
 * "RUN <CLOCK_BOOTTIME s>" for each run, "DONE calls=.. none=.." last. */
static const char py_script[] =
	"import sys, time\n"
	"import kthrottle\n"
	"LIMIT, START, SECS, MAXD = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])\n"
	"BOOT = time.CLOCK_BOOTTIME\n"
	"\n"
	"@kthrottle.throttle(LIMIT, max_delay=MAXD)\n"
	"def work():\n"
	"    return time.clock_gettime(BOOT)\n"
	"\n"
	"kthrottle.Limit(LIMIT).close()  # the library, the daemon and the limit are there\n"
	"while time.clock_gettime(BOOT) < START:\n"
	"    time.sleep(0.001)\n"
	"calls = none = 0\n"
	"while calls < 1000 and time.clock_gettime(BOOT) < START + SECS:\n"
	"    calls += 1\n"
	"    t = work()\n"
	"    if t is None:\n"
	"        none += 1\n"
	"    else:\n"
	"        print('RUN %.9f' % t, flush=True)\n"
	"print('DONE calls=%d none=%d' % (calls, none), flush=True)\n";

static void test_python_decorator_two_nodes(void **state)
{
	const double secs = 3.0, max_delay = 0.5;
	char py[PATH_MAX], script[PATH_MAX], start_s[32], secs_s[16], delay_s[16];
	static char out[PY_PROCS][65536];
	char *outs[PY_PROCS];
	size_t len[PY_PROCS] = { 0 };
	static uint64_t all[MAX_TIMES];
	int n = 0, in_window = 0, runs[PY_PROCS] = { 0 };
	uint64_t start, end;
	const char *why;

	(void)state;
	NEED_ENV();
	assert_int_equal(ktest_tmpdir(fx.tmp, sizeof(fx.tmp)), 0);
	if ((why = kt_libfx_pyenv(fx.tmp, py, sizeof(py)))) {
		print_message("skipped: %s\n", why);
		skip();
	}
	snprintf(script, sizeof(script), "%s/strict.py", fx.tmp);
	assert_int_equal(ktest_write_file(script, py_script), 0);

	nodes_up();
	ktest_asan_preload(); /* for the python processes: after venv and pip */
	start = kt_libfx_boot_ns() + 2000000000ull; /* interpreter and module loaded by then */
	end = start + (uint64_t)(secs * 1e9);
	snprintf(start_s, sizeof(start_s), "%.9f", start / 1e9);
	snprintf(secs_s, sizeof(secs_s), "%g", secs);
	snprintf(delay_s, sizeof(delay_s), "%g", max_delay);
	for (int i = 0; i < PY_PROCS; i++) {
		fx.kids[i] = kt_libfx_python(py, script, (const char *[]){ LIMIT, start_s, secs_s, delay_s, NULL },
					     fx.d[i % NODES].pin_dir, &fx.kfd[i]);
		outs[i] = out[i];
	}
	/* read both until EOF, bounded: the window, the last max_delay, slack */
	int open_fds = kt_libfx_read_all(fx.kfd, PY_PROCS, outs, len, sizeof(out[0]), end + 20000000000ull);
	assert_int_equal(open_fds, 0);
	for (int i = 0; i < PY_PROCS; i++) {
		int status = -1;

		assert_int_equal(waitpid(fx.kids[i], &status, 0), fx.kids[i]);
		fx.kids[i] = 0;
		if (!WIFEXITED(status) || WEXITSTATUS(status) || !strstr(out[i], "DONE calls="))
			print_message("python %d: status 0x%x\n%s", i, status, out[i]);
		assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		const char *done = strstr(out[i], "DONE calls=");
		assert_non_null(done);
		for (char *l = out[i]; (l = strstr(l, "RUN ")); l += 4) {
			uint64_t t = (uint64_t)(strtod(l + 4, NULL) * 1e9 + 0.5);

			assert_true(n < MAX_TIMES);
			/* %.9f of a double: within a microsecond */
			assert_true(t + 1000 >= start && t <= end + (uint64_t)(max_delay * 1e9) + 100000000ull);
			all[n++] = t;
			runs[i]++;
			if (t < end)
				in_window++;
		}
		print_message("python %d (node lib%d): %d runs; %.*s", i, i % NODES, runs[i],
			      (int)strcspn(done, "\n") + 1, done);
	}
	double lo = gaps(all, n, "python @throttle, 2 nodes x 1 process, every 200 ms, 3 s");
	print_message("runs in the 3 s window: %d (want %d +- 1), all: %d\n", in_window,
		      (int)(secs * 1000 / EVERY_MS), n);
	/* the gap bound is about microseconds of float: 1 us of slack */
	assert_true(lo + 0.001 >= EVERY_MS - EXPIRE_MS - TOL_EXTRA_MS);
	assert_true(in_window >= (int)(secs * 1000 / EVERY_MS) - 1 &&
		    in_window <= (int)(secs * 1000 / EVERY_MS) + 1);
	for (int i = 0; i < PY_PROCS; i++)
		assert_true(runs[i] >= 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_lib_acquire_two_nodes, teardown),
		cmocka_unit_test_teardown(test_lib_try_acquire, teardown),
		cmocka_unit_test_teardown(test_python_decorator_two_nodes, teardown),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
