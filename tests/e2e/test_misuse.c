// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Misuse of kthrottled and kthrottlectl: a `socket:` path that is not a
 * stale socket is never removed; kthrottlectl fails with one line (never
 * hangs, never dies of a signal) against hung, silent, foreign or flooded
 * daemons; a client that does not read its reply does not stall the
 * daemon; JSON output escapes every string. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <cmocka.h>
#include <bpf/bpf.h>

#include "kthrottle.h"
#include "ktest.h"
#include "kt_daemonfx.h"

static char cg[PATH_MAX];  /* a test cgroup for the real daemons */
static char qcg[PATH_MAX]; /* one whose name needs escaping in JSON */

#define MAX_DAEMONS 2
static struct ktest_daemon dm[MAX_DAEMONS];
#define MAX_KIDS 4
static pid_t kids[MAX_KIDS]; /* fake daemons and flooders, killed in teardown */

/* ---- helpers ---- */

static const char *valid_body(char *buf, size_t len, const char *cgroup)
{
	snprintf(buf, len,
		 "tickInterval: 100ms\n"
		 "limits:\n"
		 "  - name: ok\n"
		 "    cgroups: ['%s']\n"
		 "    match: {cidrs: [127.0.0.1/32], ports: 9, protocol: udp}\n"
		 "    unit: datagram\n"
		 "    rateLimit: {max: 200}\n",
		 cgroup);
	return buf;
}

static int kthrottled(char **out, const char *config)
{
	return ktest_run_bin("kthrottled", out, "--config", config, NULL);
}

/* A listening Unix socket at path (removed first), or -1. */
static int listen_at(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	unlink(path);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 64) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

static void add_kid(pid_t pid)
{
	for (int i = 0; i < MAX_KIDS; i++)
		if (kids[i] <= 0) {
			kids[i] = pid;
			return;
		}
	kill(pid, SIGKILL);
	fail_msg("too many helper processes");
}

enum fake_mode { FAKE_HANG, FAKE_CLOSE, FAKE_ANSWER };

/* A fake daemon on `path` in a child process: HANG accepts and never
 * answers (keeping every connection open), CLOSE reads the line and closes
 * without a word, ANSWER answers `reply` like a daemon would. */
static pid_t fake_daemon(const char *path, enum fake_mode mode, const char *reply)
{
	int lfd = listen_at(path);
	pid_t parent = getpid(), pid;

	assert_true(lfd >= 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		signal(SIGPIPE, SIG_IGN);
		for (;;) {
			char buf[256];
			int fd = accept(lfd, NULL, NULL);

			if (fd < 0)
				continue;
			if (mode == FAKE_HANG)
				continue; /* held open, never read, answered or closed */
			struct pollfd p = { .fd = fd, .events = POLLIN };
			if (poll(&p, 1, 1000) > 0 && read(fd, buf, sizeof(buf)) > 0 && mode == FAKE_ANSWER)
				(void)!write(fd, reply, strlen(reply));
			close(fd);
		}
	}
	close(lfd);
	add_kid(pid);
	return pid;
}

/* kthrottlectl -s sock ARGS...; exit status, output in *out, wall time in
 * *ms. */
static int ctl(const char *sock, double *ms, char **out, const char *a1, const char *a2)
{
	uint64_t t0 = ktest_now_ns();
	int rc = ktest_run_bin("kthrottlectl", out, "-s", sock, a1, a2, NULL);

	*ms = (double)(ktest_now_ns() - t0) / 1e6;
	print_message("kthrottlectl %s %s: exit %d after %.0f ms\n", a1, a2 ? a2 : "", rc, *ms);
	return rc;
}

/* ---- fixtures ---- */

#define NR_CGROUPS 48
#define NR_PER_CG 8 /* a cgroup is in at most 8 limits */

static char nr_base[PATH_MAX];
static char nr_cg[NR_CGROUPS][PATH_MAX];

static void nr_cgroups_destroy(void)
{
	for (int i = 0; i < NR_CGROUPS; i++) {
		if (!nr_cg[i][0])
			continue;
		rmdir(nr_cg[i]);
		*strrchr(nr_cg[i], '/') = 0; /* its long-named parent */
		rmdir(nr_cg[i]);
		nr_cg[i][0] = 0;
	}
	if (nr_base[0])
		ktest_cgroup_destroy(nr_base);
	nr_base[0] = 0;
}


static int setup(void **state)
{
	(void)state;
	kt_daemonfx_dms_begin(dm, MAX_DAEMONS);
	for (int i = 0; i < MAX_KIDS; i++)
		kids[i] = -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < MAX_KIDS; i++)
		ktest_kill_wait(&kids[i]);
	kt_daemonfx_dms_end(dm, MAX_DAEMONS);
	nr_cgroups_destroy();
	if (qcg[0])
		ktest_cgroup_destroy(qcg);
	qcg[0] = 0;
	return 0;
}

/* ---- socket: never removes what is not a stale socket ---- */

static void refuse_socket_path(struct ktest_daemon *d, const char *sock, const char *what)
{
	char body[1024], *out = NULL, *before, *after;

	print_message("socket path is %s\n", what);
	snprintf(d->socket, sizeof(d->socket), "%s", sock);
	assert_int_equal(ktest_daemon_config(d, valid_body(body, sizeof(body), cg)), 0);
	before = ktest_slurp(d->config);
	assert_int_equal(kthrottled(&out, d->config), 1);
	assert_true(ktest_is_one_line(out));
	assert_non_null(strstr(out, sock));
	assert_non_null(strstr(out, "not a socket"));
	free(out);
	after = ktest_slurp(d->config);
	assert_true(before[0] != 0);
	assert_string_equal(before, after); /* the file is intact */
	free(before);
	free(after);
	assert_int_not_equal(access(d->pin_dir, F_OK), 0); /* nothing started */
}

static void test_socket_path_not_a_socket(void **state)
{
	struct ktest_daemon *d = &dm[0];
	char link[PATH_MAX], dir[PATH_MAX];
	struct stat st;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(ktest_daemon_init(d), 0);
	/* the config file itself */
	refuse_socket_path(d, d->config, "the config file");
	/* a symlink to it (lstat: the link is not a socket either) */
	snprintf(link, sizeof(link), "%s/link.sock", d->dir);
	assert_int_equal(symlink(d->config, link), 0);
	refuse_socket_path(d, link, "a symlink to the config file");
	assert_int_equal(lstat(link, &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	/* a directory */
	snprintf(dir, sizeof(dir), "%s/dir.sock", d->dir);
	assert_int_equal(mkdir(dir, 0700), 0);
	refuse_socket_path(d, dir, "a directory");
	assert_int_equal(stat(dir, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
}

static void test_stale_socket_replaced(void **state)
{
	struct ktest_daemon *d = &dm[0];
	char body[1024], *r;
	struct stat st;
	int fd;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(ktest_daemon_init(d), 0);
	fd = listen_at(d->socket);
	assert_true(fd >= 0);
	close(fd); /* the file stays, nobody listens: stale */
	assert_int_equal(lstat(d->socket, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(ktest_daemon_config(d, valid_body(body, sizeof(body), cg)), 0);
	assert_int_equal(ktest_daemon_start_logged(d), 0);
	r = ktest_daemon_cmd(d, "ping");
	assert_non_null(r);
	assert_string_equal(r, "ok: pong\n");
	free(r);
}

static void test_live_socket_refused(void **state)
{
	struct ktest_daemon *d = &dm[0];
	char body[1024], *out = NULL;
	struct stat before, after;
	int lfd, fd;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(ktest_daemon_init(d), 0);
	lfd = listen_at(d->socket); /* someone else's live socket */
	assert_true(lfd >= 0);
	assert_int_equal(lstat(d->socket, &before), 0);
	assert_int_equal(ktest_daemon_config(d, valid_body(body, sizeof(body), cg)), 0);
	assert_int_equal(kthrottled(&out, d->config), 1);
	assert_true(ktest_is_one_line(out));
	assert_non_null(strstr(out, d->socket));
	free(out);
	assert_int_not_equal(access(d->pin_dir, F_OK), 0);
	/* the same file, still listening */
	assert_int_equal(lstat(d->socket, &after), 0);
	assert_true(before.st_ino == after.st_ino);
	fd = kt_daemonfx_connect(d->socket);
	assert_true(fd >= 0);
	close(fd);
	close(lfd);
}

/* ---- kthrottlectl against broken daemons ---- */

static void test_ctl_hung_daemon(void **state)
{
	char dir[PATH_MAX], sock[PATH_MAX], *out = NULL;
	double ms;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(ktest_daemon_init(&dm[0]), 0); /* for its temp dir */
	snprintf(dir, sizeof(dir), "%s", dm[0].dir);
	snprintf(sock, sizeof(sock), "%s/hung.sock", dir);
	fake_daemon(sock, FAKE_HANG, NULL);
	assert_int_equal(ctl(sock, &ms, &out, "status", NULL), 1);
	assert_true(ktest_is_one_line(out));
	assert_non_null(strstr(out, sock));
	free(out);
	assert_true(ms < 5000); /* the 3 s bound, with slack */
	assert_int_equal(ctl(sock, &ms, &out, "status", "--json"), 1);
	assert_true(ktest_is_one_line(out));
	free(out);
	assert_true(ms < 5000);
}

static void test_ctl_silent_daemon(void **state)
{
	char sock[PATH_MAX], *out = NULL;
	double ms;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(ktest_daemon_init(&dm[0]), 0);
	snprintf(sock, sizeof(sock), "%s/silent.sock", dm[0].dir);
	fake_daemon(sock, FAKE_CLOSE, NULL);
	assert_int_equal(ctl(sock, &ms, &out, "status", NULL), 1);
	assert_true(ktest_is_one_line(out));
	assert_non_null(strstr(out, "without answering"));
	free(out);
	assert_int_equal(ctl(sock, &ms, &out, "reload", NULL), 1);
	assert_true(ktest_is_one_line(out));
	free(out);
}

static void test_ctl_socket_not_root(void **state)
{
	char sock[PATH_MAX], file[PATH_MAX], *out = NULL;
	double ms;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(ktest_daemon_init(&dm[0]), 0);
	snprintf(sock, sizeof(sock), "%s/fake.sock", dm[0].dir);
	/* a fake that would pass for the daemon if asked */
	fake_daemon(sock, FAKE_ANSWER, "ok: reloaded\n");
	assert_int_equal(ctl(sock, &ms, &out, "reload", NULL), 0); /* root-owned: trusted */
	free(out);
	assert_int_equal(chown(sock, 65534, 65534), 0);
	assert_int_equal(ctl(sock, &ms, &out, "reload", NULL), 1);
	assert_true(ktest_is_one_line(out));
	assert_non_null(strstr(out, "owned by uid 65534"));
	free(out);
	assert_int_equal(ctl(sock, &ms, &out, "status", "--json"), 1);
	assert_true(ktest_is_one_line(out));
	free(out);
	/* a plain file is no socket */
	snprintf(file, sizeof(file), "%s/file.sock", dm[0].dir);
	assert_int_equal(ktest_write_file(file, "ok: pong\n"), 0);
	assert_int_equal(ctl(file, &ms, &out, "status", NULL), 1);
	assert_true(ktest_is_one_line(out));
	assert_non_null(strstr(out, "not a socket"));
	free(out);
}

/* Floods `path` with connections that send half a line or nothing, until
 * killed (or 60 s). */
static pid_t flooder(const char *path)
{
	pid_t parent = getpid(), pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		int ring[48], k = 0;
		uint64_t end = ktest_now_ns() + 60000000000ull;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
		for (int i = 0; i < 48; i++)
			ring[i] = -1;
		while (ktest_now_ns() < end) {
			int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

			if (fd < 0)
				continue;
			if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
				close(fd);
				usleep(200);
				continue;
			}
			if (k & 1)
				send(fd, "sta", 3, MSG_NOSIGNAL);
			if (ring[k % 48] >= 0)
				close(ring[k % 48]);
			ring[k % 48] = fd;
			k++;
			usleep(200);
		}
		_exit(0);
	}
	add_kid(pid);
	return pid;
}

static void test_ctl_flood(void **state)
{
	enum { RUNS = 100 };
	struct ktest_daemon *d = &dm[0];
	char body[1024], bin[PATH_MAX], *r;
	pid_t pids[RUNS];
	int ok = 0, failed = 0, signaled = 0, multi = 0, timed_out = 0;
	uint64_t deadline;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(ktest_daemon_up(d, valid_body(body, sizeof(body), cg)), 0);
	flooder(d->socket);
	ktest_sleep_ms(200);
	snprintf(bin, sizeof(bin), "%s/kthrottlectl", ktest_build_dir());
	fflush(NULL);
	for (int i = 0; i < RUNS; i++) {
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0) {
			char out[PATH_MAX];
			int fd;

			snprintf(out, sizeof(out), "%s/ctl-%d.out", d->dir, i);
			fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
			if (fd < 0)
				_exit(125);
			dup2(fd, 1);
			dup2(fd, 2);
			/* the default SIGPIPE disposition, as from a shell */
			signal(SIGPIPE, SIG_DFL);
			char *argv[] = { bin, "-s", d->socket, "status", i & 1 ? "--json" : NULL, NULL };
			execv(bin, argv);
			_exit(127);
		}
	}
	deadline = ktest_now_ns() + 30000000000ull;
	for (int i = 0; i < RUNS; i++) {
		int status;
		pid_t w;

		while ((w = waitpid(pids[i], &status, WNOHANG)) == 0 && ktest_now_ns() < deadline)
			ktest_sleep_ms(5);
		if (w != pids[i]) {
			kill(pids[i], SIGKILL);
			waitpid(pids[i], &status, 0);
			timed_out++;
			continue;
		}
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/ctl-%d.out", d->dir, i);
		char *out = ktest_slurp(path);
		if (WIFSIGNALED(status)) {
			signaled++;
			print_message("run %d died of signal %d\n", i, WTERMSIG(status));
		} else if (WEXITSTATUS(status) == 0) {
			ok++;
		} else {
			failed++;
			if (ktest_count_lines(out) != 1 || WEXITSTATUS(status) != 1) {
				multi++;
				print_message("run %d exit %d: %s", i, WEXITSTATUS(status), out);
			}
		}
		free(out);
	}
	print_message("under a flood: %d ok, %d failed with one line, %d signaled, %d bad, %d hung\n",
		      ok, failed - multi, signaled, multi, timed_out);
	assert_int_equal(signaled, 0);
	assert_int_equal(timed_out, 0);
	assert_int_equal(multi, 0);
	ktest_kill_wait(&kids[0]); /* the flood ends: the daemon answers again */
	assert_int_equal(waitpid(d->pid, NULL, WNOHANG), 0);
	r = NULL;
	for (int i = 0; i < 40 && !(r && !strcmp(r, "ok: pong\n")); i++) {
		free(r);
		r = ktest_daemon_cmd(d, "ping");
		if (!r || strcmp(r, "ok: pong\n"))
			ktest_sleep_ms(100);
	}
	assert_non_null(r);
	assert_string_equal(r, "ok: pong\n");
	free(r);
}

/* ---- a client that never reads ---- */

static long sysctl_long(const char *path)
{
	char *s = ktest_slurp(path);
	long v = strtol(s, NULL, 10);

	free(s);
	return v;
}

/* Answered within ms (ping); the time it took. */
static double ping_ms(const char *sock, int ms)
{
	uint64_t t0 = ktest_now_ns();
	int fd = kt_daemonfx_connect(sock);
	char buf[64] = "";
	size_t got = 0;

	assert_true(fd >= 0);
	assert_int_equal(write(fd, "ping\n", 5), 5);
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (poll(&p, 1, ms) <= 0)
			break;
		r = read(fd, buf + got, sizeof(buf) - 1 - got);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	assert_string_equal(buf, "ok: pong\n");
	return (double)(ktest_now_ns() - t0) / 1e6;
}

static void test_nonreader_does_not_stall(void **state)
{
	enum { NONREADERS = 4 };
	struct ktest_daemon *d = &dm[0];
	size_t cap = 1 << 20, len = 0, full;
	char *body = malloc(cap), *r;
	char name[300];
	int fds[NONREADERS];
	double t1, t2, ms;
	long wmem = sysctl_long("/proc/sys/net/core/wmem_default");

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	assert_non_null(body);
	/* a status reply larger than a socket buffer takes: 384 limits on 48
	 * cgroups with long paths */
	assert_int_equal(ktest_cgroup_create("nonreader", nr_base, sizeof(nr_base)), 0);
	memset(name, 'n', 200);
	name[200] = 0;
	len += (size_t)snprintf(body + len, cap - len, "tickInterval: 100ms\nlimits:\n");
	for (int i = 0; i < NR_CGROUPS; i++) {
		snprintf(nr_cg[i], sizeof(nr_cg[i]), "%s/%s-%02d", nr_base, name, i);
		assert_int_equal(mkdir(nr_cg[i], 0755), 0);
		snprintf(nr_cg[i] + strlen(nr_cg[i]), sizeof(nr_cg[i]) - strlen(nr_cg[i]), "/%s", name);
		assert_int_equal(mkdir(nr_cg[i], 0755), 0);
		for (int j = 0; j < NR_PER_CG; j++) {
			int n = i * NR_PER_CG + j;

			len += (size_t)snprintf(body + len, cap - len,
						"  - {name: nr%03d, cgroups: ['%s'], unit: datagram, "
						"match: {cidrs: [127.1.%d.%d/32], ports: %d, protocol: udp}, "
						"rateLimit: {max: 100}}\n",
						n, nr_cg[i], i, j, 20000 + n);
			assert_true(len < cap);
		}
	}
	assert_int_equal(ktest_daemon_up(d, body), 0);
	free(body);
	r = ktest_daemon_cmd(d, "status json");
	assert_non_null(r);
	full = strlen(r);
	assert_true(ktest_json_num(r, "ticks", &t1));
	free(r);
	print_message("status json is %zu bytes; socket buffer %ld\n", full, wmem);
	assert_true(full > (size_t)wmem + 65536);

	/* clients that ask for status and never read it */
	for (int i = 0; i < NONREADERS; i++) {
		fds[i] = kt_daemonfx_connect(d->socket);
		assert_true(fds[i] >= 0);
		assert_int_equal(write(fds[i], "status json\n", 12), 12);
	}
	ktest_sleep_ms(50);
	for (int i = 0; i < 3; i++) {
		/* a loop stalled on a non-reader never answers (ping_ms gives up
		 * at 2 s); the first ping may wait for the four large replies to
		 * be built: tens of ms, a few hundred under ASan */
		ms = ping_ms(d->socket, 2000);
		print_message("ping with %d clients not reading: %.1f ms\n", NONREADERS, ms);
		assert_true(ms < 1000);
		ktest_sleep_ms(150);
	}
	/* the ticks go on meanwhile */
	r = ktest_daemon_cmd(d, "status json");
	assert_non_null(r);
	assert_true(ktest_json_num(r, "ticks", &t2));
	free(r);
	print_message("ticks %.0f -> %.0f\n", t1, t2);
	assert_true(t2 - t1 >= 3);

	/* past the deadline they are dropped: a reader that wakes up late
	 * finds part of the reply, then the end */
	ktest_sleep_ms(3000);
	for (int i = 0; i < NONREADERS; i++) {
		size_t got = 0;
		char buf[65536];

		for (int k = 0; k < 1000; k++) {
			struct pollfd p = { .fd = fds[i], .events = POLLIN };
			ssize_t n;

			if (poll(&p, 1, 1000) <= 0)
				break;
			n = read(fds[i], buf, sizeof(buf));
			if (n <= 0)
				break;
			got += (size_t)n;
		}
		close(fds[i]);
		print_message("non-reader %d got %zu of %zu bytes\n", i, got, full);
		assert_true(got < full);
	}
	assert_true(ping_ms(d->socket, 1000) < 200);
}

/* ---- JSON escaping ---- */

/* No raw control character inside the output. */
static void assert_no_ctl_chars(const char *s)
{
	for (; *s; s++)
		assert_true((unsigned char)*s >= 0x20 || *s == '\n');
}

static void test_json_escaping(void **state)
{
	struct ktest_daemon *d = &dm[0];
	char body[1024], want[PATH_MAX * 2], lpath[PATH_MAX], *out = NULL;
	struct kt_limit_info li;
	int mfd, found = 0;
	double ms;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	/* a cgroup and a pin dir whose names need escaping */
	assert_int_equal(ktest_cgroup_create("q\"b\\s", qcg, sizeof(qcg)), 0);
	assert_int_equal(ktest_daemon_init(d), 0);
	strncat(d->pin_dir, "-p\"q\\", sizeof(d->pin_dir) - strlen(d->pin_dir) - 1);
	assert_int_equal(ktest_daemon_config(d, valid_body(body, sizeof(body), qcg)), 0);
	assert_int_equal(ktest_daemon_start_logged(d), 0);

	/* from the daemon */
	assert_int_equal(ctl(d->socket, &ms, &out, "status", "--json"), 0);
	print_message("%s", out);
	snprintf(want, sizeof(want), "\"path\":\"%.*sq\\\"b\\\\s\"", (int)(strstr(qcg, "q\"") - qcg), qcg);
	assert_non_null(strstr(out, want));
	assert_non_null(strstr(out, "-p\\\"q\\\\\""));
	assert_no_ctl_chars(out);
	free(out);

	/* from the pinned maps (daemon stopped), with a limit name written by
	 * hand that the config would never allow */
	assert_int_equal(ktest_daemon_signal_wait(d, SIGTERM), 0);
	snprintf(lpath, sizeof(lpath), "%s/kt_limits", d->pin_dir);
	mfd = bpf_obj_get(lpath);
	assert_true(mfd >= 0);
	for (__u32 k = 0; k < KT_MAX_LIMITS && !found; k++) {
		if (bpf_map_lookup_elem(mfd, &k, &li) || !li.in_use || strcmp(li.name, "ok"))
			continue;
		snprintf(li.name, sizeof(li.name), "o\"k\\\x01\x1f");
		assert_int_equal(bpf_map_update_elem(mfd, &k, &li, BPF_ANY), 0);
		found = 1;
	}
	close(mfd);
	assert_true(found);
	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-s", d->socket, "-p", d->pin_dir,
				       "status", "--json", NULL),
			 0);
	print_message("%s", out);
	assert_non_null(strstr(out, "\"daemon\":false"));
	assert_non_null(strstr(out, "\"name\":\"o\\\"k\\\\\\u0001\\u001f\""));
	assert_non_null(strstr(out, "-p\\\"q\\\\\""));
	assert_no_ctl_chars(out);
	free(out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_socket_path_not_a_socket, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stale_socket_replaced, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_socket_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ctl_hung_daemon, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ctl_silent_daemon, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ctl_socket_not_root, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ctl_flood, setup, teardown),
		cmocka_unit_test_setup_teardown(test_nonreader_does_not_stall, setup, teardown),
		cmocka_unit_test_setup_teardown(test_json_escaping, setup, teardown),
	};

	kt_daemonfx_group("misuse", cg, sizeof(cg));
	return cmocka_run_group_tests_name("e2e_misuse", tests, kt_daemonfx_group_setup,
					   kt_daemonfx_group_teardown);
}
