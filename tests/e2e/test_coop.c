// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Cooperative limits (unit request) end to end: kthrottled publishes the
 * limit in its pinned kt_coop, processes charge it through libkthrottle
 * (no syscall), the daemon sets its rate and reads its counters.
 *
 *  - 4 processes asking as fast as the limit lets them for ~2 s: the total
 *    admitted is <= max x elapsed + burst and >= 90% of max x 2 s; status
 *    json shows unit request and admitted equal to the processes' total;
 *  - a reload to max 50 halves the admitted rate within two ticks;
 *  - a daemon restart keeps the entry (open handles keep working);
 *  - a reload that removes the limit makes try_acquire answer -ESTALE;
 *  - an unprivileged process (uid 65534) opens and uses a cooperative limit
 *    but cannot open kt_buckets for writing;
 *  - a subscriber sees the limit's refusals ("throttled", "resumed").
 *
 * The daemon's pin dir is on a bpffs this test mounts (mode 0755) in a
 * private mount namespace, and is made 0711 after the daemon created it
 * (0700): /sys/fs/bpf is 0700 on this host, so nobody but root could reach
 * a pin under it. The daemon refuses pin dirs writable by group or other,
 * not searchable ones. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mount.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <bpf/bpf.h>
#include <cmocka.h>

#include "kt_daemonfx.h"
#include "ktest.h"
#include "kthrottle_client.h"

#define NPROC 4
#define TICK_S 0.1
#define BURST 10.0

static struct fixture {
	struct ktest_daemon d;
	bool started;
	pid_t kids[NPROC];
} fx;

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < NPROC; i++)
		if (fx.kids[i] > 0)
			ktest_kill_wait(&fx.kids[i]);
	if (fx.started)
		ktest_daemon_cleanup(&fx.d);
	fx.started = false;
	return 0;
}

#define NEED_ENV() KTEST_SKIP_IF(kt_bpffs.skip_why)

static double now_s(void)
{
	return (double)ktest_now_ns() / 1e9;
}

static const char *limit_yaml(char *buf, size_t len, const char *name, double max)
{
	snprintf(buf, len,
		 "  - name: %s\n"
		 "    unit: request\n"
		 "    burst: %.0f\n"
		 "    rateLimit: {min: %g, max: %g}\n",
		 name, BURST, max, max);
	return buf;
}

static void start_daemon(const char *limits)
{
	/* on our own bpffs, not under /sys/fs/bpf (0700) */
	assert_int_equal(kt_daemonfx_bpffs_init(&fx.d), 0);
	kt_write_limits(&fx.d, limits);
	fx.started = true;
	assert_int_equal(ktest_daemon_start_logged(&fx.d), 0);
	/* searchable by others, still writable only by root */
	assert_int_equal(chmod(fx.d.pin_dir, 0711), 0);
	setenv(KTHROTTLE_PIN_DIR_ENV, fx.d.pin_dir, 1);
}

static void reload(void)
{
	char *out = ktest_daemon_cmd(&fx.d, "reload");

	assert_non_null(out);
	if (!strstr(out, "ok"))
		print_message("reload: %s", out);
	assert_non_null(strstr(out, "ok"));
	free(out);
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000ULL),
			       .tv_nsec = (long)(ns % 1000000000ULL) };

	nanosleep(&ts, NULL);
}

/* One process: opens `limit` and asks for one token at a time for `secs`,
 * napping the retry-after (at most 2 ms) when refused. Writes its admitted
 * count (or a negative errno) to fd. */
static void asker(const char *limit, double secs, int fd)
{
	struct kthrottle *h = NULL;
	long long admitted = 0;
	int r = kthrottle_open(limit, &h);
	double end = now_s() + secs;

	while (r == 0 && now_s() < end) {
		uint64_t wait = 0;
		int a = kthrottle_try_acquire(h, 1, &wait);

		if (a < 0) {
			r = a;
			break;
		}
		if (a == 1)
			admitted++;
		else
			sleep_ns(wait > 2000000 ? 2000000 : wait + 1000);
	}
	kthrottle_close(h);
	if (r)
		admitted = r;
	if (write(fd, &admitted, sizeof(admitted)) != sizeof(admitted))
		_exit(2);
	_exit(0);
}

/* NPROC askers on `limit` for `secs`; returns their total admitted and the
 * span from the first fork to the last exit. */
static long long ask_all(const char *limit, double secs, double *span)
{
	int p[2];
	long long total = 0, one;
	double t0;

	assert_int_equal(pipe(p), 0);
	t0 = now_s();
	for (int i = 0; i < NPROC; i++) {
		fx.kids[i] = fork();
		assert_true(fx.kids[i] >= 0);
		if (fx.kids[i] == 0) {
			close(p[0]);
			asker(limit, secs, p[1]);
		}
	}
	close(p[1]);
	for (int i = 0; i < NPROC; i++) {
		assert_int_equal(read(p[0], &one, sizeof(one)), (ssize_t)sizeof(one));
		if (one < 0)
			print_message("asker: %s\n", strerror((int)-one));
		assert_true(one >= 0);
		total += one;
	}
	close(p[0]);
	for (int i = 0; i < NPROC; i++) {
		int st;

		assert_int_equal(waitpid(fx.kids[i], &st, 0), fx.kids[i]);
		fx.kids[i] = 0;
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	*span = now_s() - t0;
	return total;
}

static void assert_rate(const char *what, long long got, double rate, double secs, double span)
{
	double hi = rate * span + BURST, lo = 0.9 * rate * secs;

	print_message("%s: %lld admitted in %.3f s (%d processes, asking %.1f s): %.1f/s, want %.0f/s, in [%.0f, %.0f]\n",
		      what, got, span, NPROC, secs, got / secs, rate, lo, hi);
	assert_true(got <= hi);
	assert_true(got >= lo);
}

/* The admitted total status shows once the daemon has read the counters
 * after the askers stopped (a tick or two). */
static double settled_admitted(const char *limit, long long want)
{
	double v = -1;

	for (int i = 0; i < 20; i++) { /* 2 s at most */
		ktest_sleep_ms(100);
		v = kt_status_num(&fx.d, limit, "admitted");
		if (v == (double)want)
			break;
	}
	return v;
}

static void test_coop_rate_reload_restart_remove(void **state)
{
	char a[512], b[512], lims[1024];
	struct kthrottle *h = NULL;
	long long total, got;
	double span, v;
	char *out;
	char unit[32];
	uint64_t wait;

	(void)state;
	NEED_ENV();
	limit_yaml(a, sizeof(a), "api", 100);
	limit_yaml(b, sizeof(b), "other", 100);
	snprintf(lims, sizeof(lims), "%s%s", a, b);
	start_daemon(lims);

	/* status: unit request, one member (the node) */
	out = ktest_daemon_cmd(&fx.d, "status json");
	assert_non_null(out);
	assert_true(ktest_json_limit_str(out, "api", "unit", unit, sizeof(unit)));
	assert_string_equal(unit, "request");
	free(out);
	kt_cmd_has(&fx.d, "status", "request");

	/* 4 processes at 100/s, burst 10 */
	total = ask_all("api", 2.0, &span);
	assert_rate("max 100", total, 100, 2.0, span);
	v = settled_admitted("api", total);
	print_message("status admitted %.0f, processes %lld\n", v, total);
	assert_true(v == (double)total);
	assert_true(kt_status_num(&fx.d, "api", "throttled") > 0);
	/* the text status too: the member's counters */
	out = ktest_daemon_cmd(&fx.d, "status");
	assert_non_null(out);
	char want[64];
	snprintf(want, sizeof(want), "admitted %lld  throttled ", total);
	if (!strstr(out, want))
		print_message("%s", out);
	assert_non_null(strstr(out, want));
	free(out);

	/* reload: max 50; two ticks to take effect, then half the rate */
	limit_yaml(a, sizeof(a), "api", 50);
	snprintf(lims, sizeof(lims), "%s%s", a, b);
	kt_write_limits(&fx.d, lims);
	reload();
	ktest_sleep_ms((int)(2 * TICK_S * 1000));
	got = ask_all("api", 2.0, &span);
	assert_rate("max 50 after reload", got, 50, 2.0, span);
	total += got;
	/* the entry was kept: its counters carry on */
	v = settled_admitted("api", total);
	print_message("status admitted %.0f, processes %lld\n", v, total);
	assert_true(v == (double)total);

	/* a restart keeps the entry: an open handle stays valid */
	assert_int_equal(kthrottle_open("api", &h), 0);
	ktest_daemon_signal_wait(&fx.d, SIGTERM);
	assert_int_equal(ktest_daemon_start_logged(&fx.d), 0);
	double t0 = now_s();
	int one = kthrottle_try_acquire(h, 1, &wait);
	assert_true(one == 0 || one == 1); /* not -ESTALE: the same entry */
	got = ask_all("api", 1.0, &span);
	assert_rate("max 50 after restart", got + one, 50, 1.0, now_s() - t0);

	/* a reload that removes the limit: -ESTALE, and it cannot be opened */
	kt_write_limits(&fx.d, b);
	reload();
	assert_int_equal(kthrottle_try_acquire(h, 1, &wait), -ESTALE);
	assert_int_equal(kthrottle_is_throttled(h, NULL), -ESTALE);
	kthrottle_close(h);
	h = NULL;
	assert_int_equal(kthrottle_open("api", &h), -ENOENT);
	assert_null(h);
	/* the other limit is untouched */
	assert_int_equal(kthrottle_open("other", &h), 0);
	assert_int_equal(kthrottle_try_acquire(h, 1, &wait), 1);
	kthrottle_close(h);
}

/* What uid 65534 can do with the pins: 0 all fine, else which step failed. */
static int unprivileged_child(void)
{
	struct kthrottle *h = NULL;
	char p[PATH_MAX];
	uint64_t wait;
	int fd;

	if (setgroups(0, NULL) || setgid(65534) || setuid(65534))
		return 10;
	if (kthrottle_open("other", &h)) {
		fprintf(stderr, "unprivileged open: %s\n", kthrottle_last_error());
		return 11;
	}
	if (kthrottle_try_acquire(h, 1, &wait) != 1)
		return 12;
	kthrottle_close(h);
	/* kt_buckets: no write access for it (nor read: 0600, root's) */
	snprintf(p, sizeof(p), "%s/kt_buckets", fx.d.pin_dir);
	fd = bpf_obj_get(p);
	if (fd >= 0)
		return 13;
	if (errno != EACCES && errno != EPERM)
		return 14;
	LIBBPF_OPTS(bpf_obj_get_opts, ro, .file_flags = BPF_F_RDONLY);
	fd = bpf_obj_get_opts(p, &ro);
	if (fd >= 0)
		return 15;
	return 0;
}

static void test_coop_unprivileged(void **state)
{
	char a[512];
	struct stat st;
	char p[PATH_MAX];
	pid_t pid;
	int status;

	(void)state;
	NEED_ENV();
	start_daemon(limit_yaml(a, sizeof(a), "other", 100));
	/* kt_coop 0666, the others as the loader pins them (0600) */
	snprintf(p, sizeof(p), "%s/kt_coop", fx.d.pin_dir);
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0666);
	snprintf(p, sizeof(p), "%s/kt_buckets", fx.d.pin_dir);
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_mode & 0077, 0);

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(unprivileged_child());
	fx.kids[0] = pid;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	fx.kids[0] = 0;
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* Refusals of a cooperative limit are events too, though no program sees
 * them: the daemon turns a tick's growth of the entry's refused count into
 * one. A subscriber gets "throttled" within a tick of the first refusal,
 * with a retry-after within a tick of the one the library answered, and
 * "resumed" two ticks after the refusals stop; status counts the events. */
static void test_coop_subscribe(void **state)
{
	char a[512], line[256];
	struct kthrottle *h = NULL;
	uint64_t t_ref = 0, retry_ref = 0, t_thr, t_res, t_stop, wait;
	int p[2], status, admitted = 0;
	pid_t sub;

	(void)state;
	NEED_ENV();
	start_daemon(limit_yaml(a, sizeof(a), "sub", 20));
	sub = ktest_subscribe_spawn(&fx.d, "sub", 2, &p[0]);
	assert_true(sub > 0);
	fx.kids[0] = sub;
	ktest_sleep_ms(300); /* subscribed */

	assert_int_equal(kthrottle_open("sub", &h), 0);
	/* the burst, then the first refusal: its time and retry-after */
	for (int i = 0; i < 100 && !t_ref; i++) {
		int r = kthrottle_try_acquire(h, 1, &wait);

		assert_true(r >= 0);
		if (r == 1) {
			admitted++;
		} else {
			t_ref = ktest_now_ns();
			retry_ref = wait;
		}
	}
	print_message("admitted %d, then refused with retry-after %.3f ms\n", admitted,
		      retry_ref / 1e6);
	assert_true(t_ref && retry_ref > 0 && retry_ref <= 50000000ull);
	/* keep asking (refused mostly) for 1 s, 10 ms apart, watching for the
	 * line meanwhile */
	bool got = false;
	for (int i = 0; i < 100; i++) {
		kthrottle_try_acquire(h, 1, &wait);
		if (got || !(got = ktest_read_line(p[0], line, sizeof(line), 10, &t_thr)))
			ktest_sleep_ms(got ? 10 : 0);
	}
	t_stop = ktest_now_ns();
	kthrottle_close(h);

	assert_true(got);
	print_message("%s (%.3f s after the first refusal)\n", line, ((double)t_thr - t_ref) / 1e9);
	assert_int_equal(strncmp(line, "throttled sub reason=share retry_after_ms=", 42), 0);
	double retry_ms = atof(line + 42);
	/* the latest refusal's, up to a tick after the first one */
	assert_true(retry_ms > 0 && fabs(retry_ms - retry_ref / 1e6) <= TICK_S * 1000);
	assert_true(t_thr - t_ref <= (uint64_t)(2.5 * TICK_S * 1e9));
	assert_true(ktest_read_line(p[0], line, sizeof(line), 3000, &t_res));
	print_message("%s (%.3f s after the asking stopped)\n", line, ((double)t_res - t_stop) / 1e9);
	assert_string_equal(line, "resumed sub");
	assert_true(t_res - t_stop <= (uint64_t)(4 * TICK_S * 1e9));
	assert_int_equal(waitpid(sub, &status, 0), sub);
	fx.kids[0] = 0;
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(p[0]);

	/* status: the events, by reason (one per tick with refusals) */
	char *out = ktest_daemon_cmd(&fx.d, "status");
	assert_non_null(out);
	const char *ev = strstr(out, "throttle events: share ");
	if (!ev)
		print_message("%s", out);
	assert_non_null(ev);
	int n_share = atoi(ev + strlen("throttle events: share "));
	print_message("status: %.40s\n", ev);
	assert_true(n_share >= 5 && n_share <= 11); /* ~1 s of refusals, a tick each */
	free(out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_coop_rate_reload_restart_remove, teardown),
		cmocka_unit_test_teardown(test_coop_unprivileged, teardown),
		cmocka_unit_test_teardown(test_coop_subscribe, teardown),
	};

	kt_bpffs.prefix = "kt-cooptest";
	return cmocka_run_group_tests(tests, kt_daemonfx_bpffs_group_setup,
				      kt_daemonfx_bpffs_group_teardown);
}
