// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* libkthrottle against maps this test creates as the daemon would: a
 * BPF_F_MMAPABLE kt_coop with cooperative limits and a kt_buckets, pinned on
 * a bpffs of the test's own (in a private mount namespace, so nothing is
 * left behind). Errors for a missing pin dir and an unknown name; exact
 * bursts and retry-after; 4 processes on one limit within rate x time +
 * burst, counters equal to what they saw; acquire's timeout and rate; and
 * the read-only path: a kernel-enforced bucket cannot be written through
 * what the library maps. Needs root (skips otherwise). */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <bpf/bpf.h>

#include "kthrottle.h"
#include "kthrottle_client.h"
#include "ktest.h"
#include "libkthrottle_int.h"

#define MS 1000000ULL
#define SEC 1000000000ULL

static char dir[64];           /* bpffs mount point = pin dir */
static struct kt_coop *coop;   /* the "daemon's" writable mapping of kt_coop */
static struct kt_bucket *bkts; /* ... and of kt_buckets */
static int coop_fd = -1, bkts_fd = -1;
static const char *skip_why;

static void *map_pinned(const char *name, __u32 vsize, __u32 n, int *fd)
{
	LIBBPF_OPTS(bpf_map_create_opts, o, .map_flags = BPF_F_MMAPABLE);
	char path[128];
	void *m;

	*fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, name, 4, vsize, n, &o);
	if (*fd < 0)
		return NULL;
	m = mmap(NULL, (size_t)vsize * n, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
	if (m == MAP_FAILED)
		return NULL;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (bpf_obj_pin(*fd, path))
		return NULL;
	return m;
}

static int setup(void **state)
{
	(void)state;
	skip_why = ktest_private_bpffs("kt-libtest", dir, sizeof(dir));
	if (skip_why)
		return 0;
	coop = map_pinned("kt_coop", sizeof(struct kt_coop), KT_MAX_COOP, &coop_fd);
	bkts = map_pinned("kt_buckets", sizeof(struct kt_bucket), KT_MAX_BUCKETS, &bkts_fd);
	if (!coop || !bkts) {
		skip_why = "cannot create and pin BPF_F_MMAPABLE arrays";
		return 0;
	}
	setenv(KTHROTTLE_PIN_DIR_ENV, dir, 1);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	ktest_private_bpffs_remove(dir);
	return 0;
}

#define NEED_ENV() KTEST_SKIP_IF(skip_why)

/* Publishes limit `name` in entry i (as the daemon will). */
static struct kt_coop *publish(int i, const char *name, double rate, __u64 burst)
{
	kt_coop_publish(&coop[i], name, kt_interval_fp_from_rate(rate), burst);
	return &coop[i];
}

static void test_errors(void **state)
{
	struct kthrottle *h = (void *)1;
	char name[64];
	(void)state;
	NEED_ENV();

	setenv(KTHROTTLE_PIN_DIR_ENV, "/nonexistent/kt-pins", 1);
	assert_int_equal(kthrottle_open("x", &h), -ENOENT);
	assert_null(h);
	print_message("missing pin dir: %s\n", kthrottle_last_error());
	assert_non_null(strstr(kthrottle_last_error(), "/nonexistent/kt-pins/kt_coop"));
	assert_int_equal(kthrottle_open_member(0, &h), -ENOENT);
	assert_non_null(strstr(kthrottle_last_error(), "kt_buckets"));
	setenv(KTHROTTLE_PIN_DIR_ENV, dir, 1);

	publish(7, "known", 10, 1);
	assert_int_equal(kthrottle_open("unknown", &h), -ENOENT);
	print_message("unknown limit: %s\n", kthrottle_last_error());
	assert_non_null(strstr(kthrottle_last_error(), "'unknown'"));
	/* a prefix, or an entry being rewritten (odd gen), does not match */
	assert_int_equal(kthrottle_open("know", &h), -ENOENT);
	coop[7].gen++;
	assert_int_equal(kthrottle_open("known", &h), -ENOENT);
	coop[7].gen++;
	memset(name, 'n', sizeof(name) - 1);
	name[sizeof(name) - 1] = 0;
	assert_int_equal(kthrottle_open(name, &h), -ENAMETOOLONG);
	assert_int_equal(kthrottle_open_member(KT_MAX_BUCKETS, &h), -ERANGE);

	/* retired while open: -ESTALE */
	assert_int_equal(kthrottle_open("known", &h), 0);
	assert_int_equal(kthrottle_try_acquire(h, 0, NULL), -EINVAL);
	assert_int_equal(kthrottle_try_acquire(h, 1, NULL), 1);
	kt_coop_retire(&coop[7]);
	assert_int_equal(kthrottle_try_acquire(h, 1, NULL), -ESTALE);
	print_message("retired: %s\n", kthrottle_last_error());
	kthrottle_close(h);
	kthrottle_close(NULL);
}

static void test_single(void **state)
{
	const double rate = 100;
	const __u64 burst = 5, interval = 10 * MS;
	struct kthrottle *h;
	uint64_t retry = 0, t0, t1, th;
	unsigned i;
	(void)state;
	NEED_ENV();

	publish(0, "other", 1, 1);
	struct kt_coop *e = publish(3, "single", rate, burst);
	assert_int_equal(kthrottle_open("single", &h), 0);
	assert_int_equal(h->ent - (struct kt_coop *)h->map, 3);
	assert_int_equal(kthrottle_is_throttled(h, &th), 0);
	assert_int_equal(th, 0);

	/* more than the burst can never pass: refused as a bad request */
	assert_int_equal(kthrottle_try_acquire(h, burst + 1, &retry), -EINVAL);
	assert_int_equal(kthrottle_acquire(h, burst + 1, MS), -EINVAL);
	assert_non_null(strstr(kthrottle_last_error(), "over limit 'single''s burst of 5"));
	assert_int_equal(e->refused, 0);

	t0 = kt_clock_ns();
	for (i = 0; i < burst; i++)
		assert_int_equal(kthrottle_try_acquire(h, 1, &retry), 1);
	assert_int_equal(kthrottle_try_acquire(h, 1, &retry), 0);
	t1 = kt_clock_ns();
	print_message("burst %llu admitted in %llu us; retry-after %llu us\n",
		      (unsigned long long)burst, (unsigned long long)(t1 - t0) / 1000,
		      (unsigned long long)retry / 1000);
	/* one token's interval after the first charge */
	assert_true(retry <= interval);
	assert_true(retry + (t1 - t0) >= interval);
	assert_int_equal(kthrottle_is_throttled(h, &th), 1);
	assert_true(th > 0 && th <= retry);
	assert_int_equal(e->admitted, burst);
	assert_int_equal(e->refused, 1);

	struct timespec ts = { 0, (long)retry };
	nanosleep(&ts, NULL);
	assert_int_equal(kthrottle_try_acquire(h, 1, &retry), 1);
	assert_int_equal(kthrottle_try_acquire(h, 1, &retry), 0);

	/* closed (rate 0): refused with UINT64_MAX */
	__atomic_store_n(&e->bucket.interval_fp, 0, __ATOMIC_RELEASE);
	assert_int_equal(kthrottle_try_acquire(h, 1, &retry), 0);
	assert_int_equal(retry, UINT64_MAX);
	assert_int_equal(kthrottle_is_throttled(h, &th), 1);
	assert_int_equal(th, UINT64_MAX);
	kthrottle_close(h);
}

#define NPROC 4
struct tally {
	__u64 admitted, refused;
};

static void test_four_processes(void **state)
{
	const double rate = 200;
	const __u64 burst = 10;
	struct tally sum = { 0, 0 };
	int fds[2], i, status;
	pid_t pids[NPROC];
	__u64 go, deadline, end;
	(void)state;
	NEED_ENV();

	struct kt_coop *e = publish(100, "shared", rate, burst);
	assert_int_equal(pipe(fds), 0);
	go = kt_clock_ns() + 200 * MS; /* after every child has opened the limit */
	deadline = go + 2 * SEC;
	for (i = 0; i < NPROC; i++) {
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0) {
			struct tally t = { 0, 0 };
			struct kthrottle *h;
			uint64_t retry;

			if (kthrottle_open("shared", &h))
				_exit(2);
			while (kt_clock_ns() < go)
				;
			while (kt_clock_ns() < deadline) {
				int r = kthrottle_try_acquire(h, 1, &retry);
				if (r == 1)
					t.admitted++;
				else if (r == 0)
					t.refused++;
				else
					_exit(3);
			}
			kthrottle_close(h);
			_exit(write(fds[1], &t, sizeof(t)) == sizeof(t) ? 0 : 4);
		}
	}
	close(fds[1]);
	for (i = 0; i < NPROC; i++) {
		assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
		assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	end = kt_clock_ns();
	for (i = 0; i < NPROC; i++) {
		struct tally t;
		assert_int_equal(read(fds[0], &t, sizeof(t)), sizeof(t));
		sum.admitted += t.admitted;
		sum.refused += t.refused;
	}
	close(fds[0]);

	/* Every admission read the clock in [go, end]. GCRA admits at most
	 * burst + elapsed / interval there, and the interval is rounded up
	 * (kt_interval_fp_from_rate, cost_ns): no tolerance is needed above
	 * burst + rate x elapsed. Below, the children asked throughout
	 * [go, deadline], so at least 90% of its allowance must pass. */
	double elapsed = (double)(end - go) / 1e9;
	double upper = (double)burst + rate * elapsed;
	double lower = 0.9 * ((double)burst + rate * 2.0);
	print_message("%d processes, %.3f s: admitted %llu (bound %.1f, floor %.1f), refused %llu; "
		      "entry counters %llu / %llu\n",
		      NPROC, elapsed, (unsigned long long)sum.admitted, upper, lower,
		      (unsigned long long)sum.refused, (unsigned long long)e->admitted,
		      (unsigned long long)e->refused);
	assert_true((double)sum.admitted <= upper);
	assert_true((double)sum.admitted >= lower);
	assert_int_equal(e->admitted, sum.admitted);
	assert_int_equal(e->refused, sum.refused);
}

/* How late a sleep may wake on a loaded machine, in these bounds: they
 * catch a wait that is early (a refusal not honoured) or far too long. */
#define LATE_MAX (500 * MS)

static void test_acquire(void **state)
{
	struct kthrottle *h;
	uint64_t t0, dt;
	int i;
	(void)state;
	NEED_ENV();

	/* timeout: rate 1/s, the one token spent */
	publish(5, "slow", 1, 1);
	assert_int_equal(kthrottle_open("slow", &h), 0);
	assert_int_equal(kthrottle_acquire(h, 1, 0), 1);
	assert_int_equal(kthrottle_acquire(h, 1, 0), 0);
	t0 = kt_clock_ns();
	assert_int_equal(kthrottle_acquire(h, 1, 200 * MS), 0);
	dt = kt_clock_ns() - t0;
	print_message("acquire timed out after %.1f ms (timeout 200)\n", dt / 1e6);
	/* never early; late by a loaded machine's wake-ups at most (the host
	 * tests run three at a time, and CI's machine is shared) */
	assert_true(dt >= 200 * MS && dt < 200 * MS + LATE_MAX);
	kthrottle_close(h);

	/* rate: 100/s burst 5, 60 acquires: 5 at once, then 55 x 10 ms */
	publish(6, "paced", 100, 5);
	assert_int_equal(kthrottle_open("paced", &h), 0);
	t0 = kt_clock_ns();
	for (i = 0; i < 60; i++)
		assert_int_equal(kthrottle_acquire(h, 1, SEC), 1);
	dt = kt_clock_ns() - t0;
	print_message("60 acquires at 100/s burst 5: %.1f ms (ideal 550)\n", dt / 1e6);
	assert_true(dt >= 540 * MS && dt < 550 * MS + LATE_MAX);
	kthrottle_close(h);
}

static void test_readonly(void **state)
{
	const __u32 slot = 3;
	struct kthrottle *h;
	struct kt_bucket before;
	uint64_t th;
	void *p;
	(void)state;
	NEED_ENV();

	/* the daemon's bucket: 10/s burst 2, spent */
	bkts[slot] = (struct kt_bucket){ .interval_fp = kt_interval_fp_from_rate(10), .burst = 2,
					 .flags = KT_BUCKET_IN_USE };
	bkts[slot].tat = kt_clock_ns() + 300 * MS;
	before = bkts[slot];

	assert_int_equal(kthrottle_open_member(slot, &h), 0);
	assert_int_equal(h->kind, KTH_MEMBER);
	assert_int_equal(kthrottle_is_throttled(h, &th), 1);
	print_message("kernel bucket throttled for %.1f ms\n", th / 1e6);
	assert_true(th > 150 * MS && th <= 200 * MS);
	assert_int_equal(kthrottle_try_acquire(h, 1, NULL), -EPERM);
	assert_int_equal(kthrottle_acquire(h, 1, 0), -EPERM);

	/* a writable mapping of the library's descriptor */
	p = mmap(NULL, (size_t)KT_MAX_BUCKETS * sizeof(struct kt_bucket), PROT_READ | PROT_WRITE,
		 MAP_SHARED, h->fd, 0);
	print_message("mmap PROT_WRITE MAP_SHARED on the read-only fd: %s\n",
		      p == MAP_FAILED ? strerror(errno) : "succeeded");
	assert_true(p == MAP_FAILED && (errno == EACCES || errno == EPERM));
	p = mmap(NULL, (size_t)KT_MAX_BUCKETS * sizeof(struct kt_bucket), PROT_READ | PROT_WRITE,
		 MAP_PRIVATE, h->fd, 0);
	print_message("mmap PROT_WRITE MAP_PRIVATE on the read-only fd: %s\n",
		      p == MAP_FAILED ? strerror(errno) : "succeeded");
	assert_true(p == MAP_FAILED);
	/* read-only: 6.18 refuses it too (EINVAL), the library then reads by
	 * syscall; where it maps, the mapping must not become writable */
	p = mmap(NULL, (size_t)KT_MAX_BUCKETS * sizeof(struct kt_bucket), PROT_READ, MAP_SHARED,
		 h->fd, 0);
	print_message("mmap PROT_READ MAP_SHARED on the read-only fd: %s (library: %s)\n",
		      p == MAP_FAILED ? strerror(errno) : "succeeded",
		      h->bucket ? "mapped" : "bpf_map_lookup_elem");
	if (p != MAP_FAILED) {
		assert_int_equal(mprotect(p, (size_t)KT_MAX_BUCKETS * sizeof(struct kt_bucket),
					  PROT_READ | PROT_WRITE), -1);
		munmap(p, (size_t)KT_MAX_BUCKETS * sizeof(struct kt_bucket));
	}
	if (h->map)
		assert_int_equal(mprotect(h->map, h->map_len, PROT_READ | PROT_WRITE), -1);
	/* Even a read-only mapping of a read-write descriptor (the daemon's)
	 * cannot be made writable: bpf_map_mmap drops VM_MAYWRITE. */
	p = mmap(NULL, (size_t)KT_MAX_BUCKETS * sizeof(struct kt_bucket), PROT_READ, MAP_SHARED,
		 bkts_fd, 0);
	assert_true(p != MAP_FAILED);
	errno = 0;
	assert_int_equal(mprotect(p, (size_t)KT_MAX_BUCKETS * sizeof(struct kt_bucket),
				  PROT_READ | PROT_WRITE), -1);
	print_message("mprotect PROT_WRITE of a PROT_READ mapping (rw fd): %s\n", strerror(errno));
	assert_true(errno == EACCES || errno == EPERM);
	munmap(p, (size_t)KT_MAX_BUCKETS * sizeof(struct kt_bucket));
	/* and the syscall path through the same descriptor */
	__u32 key = slot;
	struct kt_bucket full = before;
	full.tat = 0;
	assert_int_equal(bpf_map_update_elem(h->fd, &key, &full, BPF_ANY), -EPERM);
	print_message("bpf_map_update_elem on the read-only fd: %s\n", strerror(EPERM));
	assert_memory_equal(&bkts[slot], &before, sizeof(before));
	assert_int_equal(kthrottle_is_throttled(h, &th), 1);
	kthrottle_close(h);
}

/* What an unprivileged process can do with the pins on this kernel: the
 * "Access" in docs/clients.md depends on it. Pin files get modes an
 * operator could grant (kt_coop 0666, kt_buckets 0644); a child drops to
 * nobody and tries. Only one thing is asserted: it cannot get a writable
 * descriptor of kt_buckets. */
static void test_unprivileged(void **state)
{
	char path[128], buf[1024] = "";
	int fds[2], status;
	ssize_t n;
	pid_t pid;
	(void)state;
	NEED_ENV();

	publish(9, "nobody", 100, 5);
	snprintf(path, sizeof(path), "%s/kt_coop", dir);
	assert_int_equal(chmod(path, 0666), 0);
	snprintf(path, sizeof(path), "%s/kt_buckets", dir);
	assert_int_equal(chmod(path, 0644), 0);
	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct kthrottle *h;
		char out[1024];
		int r, fd, len = 0;

		close(fds[0]);
		if (setgroups(0, NULL) || setgid(65534) || setuid(65534))
			_exit(2);
		fd = bpf_obj_get(path); /* kt_buckets, read-write */
		len += snprintf(out + len, sizeof(out) - len, "  bpf_obj_get(kt_buckets, rw): %s\n",
				fd >= 0 ? "OK" : strerror(errno));
		int rw_ok = fd >= 0;
		LIBBPF_OPTS(bpf_obj_get_opts, ro, .file_flags = BPF_F_RDONLY);
		fd = bpf_obj_get_opts(path, &ro);
		len += snprintf(out + len, sizeof(out) - len, "  bpf_obj_get(kt_buckets, BPF_F_RDONLY): %s\n",
				fd >= 0 ? "OK" : strerror(errno));
		r = kthrottle_open("nobody", &h);
		len += snprintf(out + len, sizeof(out) - len, "  kthrottle_open(cooperative): %s\n",
				r == 0 ? "OK" : kthrottle_last_error());
		if (r == 0) {
			r = kthrottle_try_acquire(h, 1, NULL);
			len += snprintf(out + len, sizeof(out) - len, "  try_acquire: %d\n", r);
		}
		r = kthrottle_open_member(3, &h);
		len += snprintf(out + len, sizeof(out) - len, "  kthrottle_open_member: %s\n",
				r == 0 ? "OK" : kthrottle_last_error());
		if (r == 0) {
			uint64_t th = 0;
			r = kthrottle_is_throttled(h, &th);
			len += snprintf(out + len, sizeof(out) - len,
					"  is_throttled (kernel bucket): %d, %llu ns\n", r,
					(unsigned long long)th);
		}
		fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, "x", 4, 4, 1, NULL);
		len += snprintf(out + len, sizeof(out) - len, "  bpf_map_create: %s\n",
				fd >= 0 ? "OK" : strerror(errno));
		if (write(fds[1], out, len) != len)
			_exit(3);
		_exit(rw_ok ? 1 : 0);
	}
	close(fds[1]);
	n = read(fds[0], buf, sizeof(buf) - 1);
	close(fds[0]);
	if (n > 0)
		buf[n] = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	FILE *f = fopen("/proc/sys/kernel/unprivileged_bpf_disabled", "r");
	int disabled = -1;
	if (f) {
		if (fscanf(f, "%d", &disabled) != 1)
			disabled = -1;
		fclose(f);
	}
	print_message("uid 65534, kernel.unprivileged_bpf_disabled=%d, pins kt_coop 0666, "
		      "kt_buckets 0644:\n%s", disabled, buf);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* The library's clock against CLOCK_BOOTTIME read on both sides of it, for
 * 300 ms of calls (anchors taken and expired many times): it must lie
 * between the two reads, within a few µs of slack, or every decision moves.
 * Where the clocksource is tsc the library must use the TSC (that is what
 * the 25 ns target rests on); KTHROTTLE_CLOCK=vdso turns it off. */
static int fast_clock_child(void)
{
	__u64 end = kt_clock_ns() + 300000000ull, worst = 0, calls = 0;
	const __u64 slack = 5000;

	for (;;) {
		__u64 a = kt_clock_ns(), f = kt_fast_clock_ns(), b = kt_clock_ns();

		if (f + slack < a || f > b + slack) {
			fprintf(stderr, "fast clock %llu outside [%llu, %llu]\n",
				(unsigned long long)f, (unsigned long long)a, (unsigned long long)b);
			return 1;
		}
		if (f < a && a - f > worst)
			worst = a - f;
		if (f > b && f - b > worst)
			worst = f - b;
		if (++calls % 64 == 0) /* sleeps too, so anchors expire */
			usleep(calls % 4096 == 0 ? 3000 : 0);
		if (b > end)
			break;
	}
	printf("%llu calls, worst outside the bracketing reads %llu ns, tsc %d\n",
	       (unsigned long long)calls, (unsigned long long)worst, kt_fast_clock_is_tsc());
	return 0;
}

static void test_fast_clock(void **state)
{
	char cs[32] = "", out[256] = "";
	FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "re");
	int pipefd[2], status, tsc;
	pid_t pid;
	ssize_t n;

	(void)state;
	if (f) {
		if (!fgets(cs, sizeof(cs), f))
			cs[0] = 0;
		fclose(f);
	}
	print_message("clocksource %s", cs);

	/* the check runs in a child, and again in one told to use the vDSO
	 * (the clock's mode is chosen once per process, at its first call) */
	for (int vdso = 0; vdso <= 1; vdso++) {
		assert_int_equal(pipe(pipefd), 0);
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			close(pipefd[0]);
			dup2(pipefd[1], 1);
			if (vdso)
				setenv("KTHROTTLE_CLOCK", "vdso", 1);
			kt_fast_clock_reset();
			fflush(stdout);
			status = fast_clock_child();
			fflush(stdout);
			_exit(status);
		}
		close(pipefd[1]);
		n = read(pipefd[0], out, sizeof(out) - 1);
		out[n > 0 ? n : 0] = 0;
		close(pipefd[0]);
		assert_int_equal(waitpid(pid, &status, 0), pid);
		print_message("%s: %s", vdso ? "KTHROTTLE_CLOCK=vdso" : "default", out);
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
		assert_non_null(strstr(out, "tsc "));
		tsc = atoi(strstr(out, "tsc ") + 4);
		assert_int_equal(tsc, vdso ? 0 : !strcmp(cs, "tsc\n"));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_single),
		cmocka_unit_test(test_four_processes),
		cmocka_unit_test(test_acquire),
		cmocka_unit_test(test_readonly),
		cmocka_unit_test(test_unprivileged),
		cmocka_unit_test(test_fast_clock),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
