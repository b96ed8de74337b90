// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* libkthrottle's tag query client (kthrottle_tagq_*, the tag query line
 * protocol of docs/tags.md) against servers of the test's own: a thread with a listening
 * Unix socket in a mkdtemp dir or on TCP 127.0.0.1 (a free port) that
 * answers "NO\n" for tags starting with 'n', else "OK\n" (or never, or
 * "XX\n"), and counts connections and lines. Answers on one connection
 * (1000 queries, one accept), the fail-safe cases (silent server: serve
 * within the timeout, then back off without connecting; garbage; no
 * server; a restarted server reached again after the back-off), bad tags
 * never sent; `kthrottlectl check` (output and exit codes) and the Python
 * TagQuery against the same servers. No root needed. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "kthrottle_client.h"
#include "ktest.h"

#define MS 1000000ULL

enum srv_mode { SRV_ANSWER, SRV_SILENT, SRV_GARBAGE };

#define SRV_MAX_CLIENTS 16

struct srv {
	int lfd;
	int stop[2];
	pthread_t th;
	_Atomic int mode;
	_Atomic int accepts;
	_Atomic long lines;
	char path[108]; /* Unix: the socket path; "" for TCP */
	int port;       /* TCP */
	char where[128];
};

static char dir[64];

static void srv_line(struct srv *s, int fd, const char *line)
{
	const char *ans;

	atomic_fetch_add(&s->lines, 1);
	switch (atomic_load(&s->mode)) {
	case SRV_SILENT:
		return;
	case SRV_GARBAGE:
		ans = "XX\n";
		break;
	default:
		ans = line[0] == 'n' ? "NO\n" : "OK\n";
	}
	if (send(fd, ans, 3, MSG_NOSIGNAL) != 3)
		return; /* the client gone: its problem */
}

static void *srv_main(void *arg)
{
	struct srv *s = arg;
	struct pollfd p[2 + SRV_MAX_CLIENTS];
	char buf[SRV_MAX_CLIENTS][1024];
	size_t len[SRV_MAX_CLIENTS] = { 0 };
	int n = 2;

	p[0] = (struct pollfd){ .fd = s->stop[0], .events = POLLIN };
	p[1] = (struct pollfd){ .fd = s->lfd, .events = POLLIN };
	for (;;) {
		if (poll(p, n, -1) < 0)
			continue;
		if (p[0].revents)
			break;
		if (p[1].revents & POLLIN) {
			int c = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);

			if (c >= 0) {
				atomic_fetch_add(&s->accepts, 1);
				if (n < 2 + SRV_MAX_CLIENTS) {
					len[n - 2] = 0;
					p[n++] = (struct pollfd){ .fd = c, .events = POLLIN };
				} else {
					close(c);
				}
			}
		}
		for (int i = 2; i < n; i++) {
			int k = i - 2;
			ssize_t r;

			if (!p[i].revents)
				continue;
			r = recv(p[i].fd, buf[k] + len[k], sizeof(buf[k]) - 1 - len[k], 0);
			if (r <= 0) {
				close(p[i].fd);
				p[i] = p[n - 1];
				memcpy(buf[k], buf[n - 3], len[n - 3]);
				len[k] = len[n - 3];
				n--;
				i--;
				continue;
			}
			len[k] += (size_t)r;
			char *start = buf[k], *nl;
			while ((nl = memchr(start, '\n', len[k] - (size_t)(start - buf[k])))) {
				*nl = 0;
				srv_line(s, p[i].fd, start);
				start = nl + 1;
			}
			len[k] -= (size_t)(start - buf[k]);
			memmove(buf[k], start, len[k]);
		}
	}
	for (int i = 2; i < n; i++)
		close(p[i].fd);
	return NULL;
}

/* A server on `path` (Unix) or, path NULL, on 127.0.0.1 (port 0: a free one). */
static void srv_start(struct srv *s, const char *path, int port)
{
	memset(s, 0, sizeof(*s));
	assert_int_equal(pipe2(s->stop, O_CLOEXEC), 0);
	if (path) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };

		snprintf(s->path, sizeof(s->path), "%s", path);
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
		unlink(path);
		s->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		assert_true(s->lfd >= 0);
		assert_int_equal(bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
		snprintf(s->where, sizeof(s->where), "%s", path);
	} else {
		struct sockaddr_in sa = { .sin_family = AF_INET,
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		int one = 1;

		s->port = port ? port : ktest_free_port(SOCK_STREAM);
		assert_true(s->port > 0);
		sa.sin_port = htons((uint16_t)s->port);
		s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		assert_true(s->lfd >= 0);
		setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		assert_int_equal(bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
		snprintf(s->where, sizeof(s->where), "127.0.0.1:%d", s->port);
	}
	assert_int_equal(listen(s->lfd, 64), 0);
	assert_int_equal(pthread_create(&s->th, NULL, srv_main, s), 0);
}

static void srv_stop(struct srv *s)
{
	if (write(s->stop[1], "x", 1) != 1)
		fail();
	pthread_join(s->th, NULL);
	close(s->lfd);
	close(s->stop[0]);
	close(s->stop[1]);
	if (s->path[0])
		unlink(s->path);
}

static int setup(void **state)
{
	(void)state;
	return ktest_tmpdir(dir, sizeof(dir));
}

static int teardown(void **state)
{
	(void)state;
	ktest_rmtree(dir);
	return 0;
}

static int check(struct kthrottle_tagq *q, const char *tag)
{
	return kthrottle_tagq_check(q, tag, strlen(tag));
}

static void test_open_args(void **state)
{
	struct kthrottle_tagq *q = NULL;
	char longpath[200];

	(void)state;
	assert_int_equal(kthrottle_tagq_open(NULL, 100, &q), 0); /* the default socket, lazily */
	assert_non_null(q);
	kthrottle_tagq_close(q);
	assert_int_equal(kthrottle_tagq_open("[::1]:4000", 100, &q), 0);
	kthrottle_tagq_close(q);
	assert_int_equal(kthrottle_tagq_open("127.0.0.1:65535", 10000, &q), 0);
	kthrottle_tagq_close(q);
	assert_int_equal(kthrottle_tagq_open("/x", 0, &q), -EINVAL);
	assert_null(q);
	assert_int_equal(kthrottle_tagq_open("/x", 10001, &q), -EINVAL);
	assert_int_equal(kthrottle_tagq_open("", 100, &q), -EINVAL);
	assert_int_equal(kthrottle_tagq_open("relative.sock", 100, &q), -EINVAL);
	assert_int_equal(kthrottle_tagq_open("127.0.0.1", 100, &q), -EINVAL);
	assert_int_equal(kthrottle_tagq_open("127.0.0.1:0", 100, &q), -EINVAL);
	assert_int_equal(kthrottle_tagq_open("127.0.0.1:65536", 100, &q), -EINVAL);
	assert_int_equal(kthrottle_tagq_open("127.0.0.1:80x", 100, &q), -EINVAL);
	assert_int_equal(kthrottle_tagq_open("localhost:80", 100, &q), -EINVAL);
	assert_int_equal(kthrottle_tagq_open("::1:80", 100, &q), -EINVAL);
	assert_int_equal(kthrottle_tagq_open("[::1:80", 100, &q), -EINVAL);
	assert_int_equal(kthrottle_tagq_open("[1.2.3.4]:80", 100, &q), -EINVAL);
	assert_non_null(strstr(kthrottle_last_error(), "IPv6"));
	memset(longpath, 'a', sizeof(longpath) - 1);
	longpath[0] = '/';
	longpath[sizeof(longpath) - 1] = 0;
	assert_int_equal(kthrottle_tagq_open(longpath, 100, &q), -EINVAL);
	assert_int_equal(kthrottle_tagq_open("/x", 100, NULL), -EINVAL);
	assert_null(q);
	kthrottle_tagq_close(NULL);
}

/* 1000 queries on one connection, answered by the rule */
static void many_queries(struct srv *s)
{
	struct kthrottle_tagq *q;
	char tag[32];

	assert_int_equal(kthrottle_tagq_open(s->where, 1000, &q), 0);
	assert_int_equal(atomic_load(&s->accepts), 0); /* lazy */
	for (int i = 0; i < 1000; i++) {
		int no = i % 3 == 0;

		snprintf(tag, sizeof(tag), "%s-%d", no ? "nope" : "client", i);
		assert_int_equal(check(q, tag), !no);
		assert_int_equal(kthrottle_tagq_last_error(q), 0);
	}
	/* a tag of exactly 255 bytes goes out */
	char big[255];
	memset(big, 'n', sizeof(big));
	assert_int_equal(kthrottle_tagq_check(q, big, sizeof(big)), 0);
	assert_int_equal(kthrottle_tagq_last_error(q), 0);
	kthrottle_tagq_close(q);
	assert_int_equal(atomic_load(&s->accepts), 1);
	assert_int_equal(atomic_load(&s->lines), 1001);
}

static void test_unix_answers(void **state)
{
	struct srv s;
	char path[128];

	(void)state;
	snprintf(path, sizeof(path), "%s/query.sock", dir);
	srv_start(&s, path, 0);
	many_queries(&s);
	srv_stop(&s);
}

static void test_tcp_answers(void **state)
{
	struct srv s;

	(void)state;
	srv_start(&s, NULL, 0);
	many_queries(&s);
	srv_stop(&s);
}

/* A server that takes the tag and never answers: serve within the timeout,
 * then back off: answered at once, EAGAIN, nothing connects; the back-off
 * doubles; an answered query resets it. */
static void test_silent(void **state)
{
	struct kthrottle_tagq *q;
	struct srv s;
	char path[128];
	uint64_t t0, dt;

	(void)state;
	snprintf(path, sizeof(path), "%s/silent.sock", dir);
	srv_start(&s, path, 0);
	atomic_store(&s.mode, SRV_SILENT);
	assert_int_equal(kthrottle_tagq_open(path, 100, &q), 0);
	t0 = ktest_now_ns();
	assert_int_equal(check(q, "no-answer"), 1);
	dt = ktest_now_ns() - t0;
	assert_int_equal(kthrottle_tagq_last_error(q), ETIMEDOUT);
	assert_true(dt >= 100 * MS);
	assert_true(dt < 150 * MS);
	assert_non_null(strstr(kthrottle_last_error(), "no answer in time"));
	/* within the back-off (75..100 ms): at once, not tried */
	t0 = ktest_now_ns();
	assert_int_equal(check(q, "no-answer"), 1);
	assert_int_equal(kthrottle_tagq_last_error(q), EAGAIN);
	assert_true(ktest_now_ns() - t0 < 2 * MS);
	ktest_sleep_ms(40);
	assert_int_equal(check(q, "no-answer"), 1);
	assert_int_equal(kthrottle_tagq_last_error(q), EAGAIN);
	assert_int_equal(atomic_load(&s.accepts), 1);
	assert_int_equal(atomic_load(&s.lines), 1);
	/* past it: a new connection, timed out again; now 150..200 ms */
	ktest_sleep_ms(70);
	assert_int_equal(check(q, "no-answer"), 1);
	assert_int_equal(kthrottle_tagq_last_error(q), ETIMEDOUT);
	ktest_sleep_ms(20);
	assert_int_equal(atomic_load(&s.accepts), 2);
	ktest_sleep_ms(110); /* 130 ms after: still backing off */
	assert_int_equal(check(q, "x"), 1);
	assert_int_equal(kthrottle_tagq_last_error(q), EAGAIN);
	/* the server answers again: after the back-off, real answers */
	atomic_store(&s.mode, SRV_ANSWER);
	ktest_sleep_ms(80);
	assert_int_equal(check(q, "nope"), 0);
	assert_int_equal(kthrottle_tagq_last_error(q), 0);
	assert_int_equal(check(q, "yes"), 1);
	assert_int_equal(kthrottle_tagq_last_error(q), 0);
	assert_int_equal(atomic_load(&s.accepts), 3);
	/* reset: the next failure backs off 75..100 ms again, not 300+ */
	atomic_store(&s.mode, SRV_SILENT);
	assert_int_equal(check(q, "x"), 1);
	assert_int_equal(kthrottle_tagq_last_error(q), ETIMEDOUT);
	ktest_sleep_ms(105);
	atomic_store(&s.mode, SRV_ANSWER);
	assert_int_equal(check(q, "n"), 0);
	kthrottle_tagq_close(q);
	srv_stop(&s);
}

static void test_garbage(void **state)
{
	struct kthrottle_tagq *q;
	struct srv s;

	(void)state;
	srv_start(&s, NULL, 0);
	atomic_store(&s.mode, SRV_GARBAGE);
	assert_int_equal(kthrottle_tagq_open(s.where, 200, &q), 0);
	assert_int_equal(check(q, "nope"), 1); /* not "NO": serve */
	assert_int_equal(kthrottle_tagq_last_error(q), EPROTO);
	assert_int_equal(check(q, "nope"), 1);
	assert_int_equal(kthrottle_tagq_last_error(q), EAGAIN);
	kthrottle_tagq_close(q);
	srv_stop(&s);
}

static void test_no_server(void **state)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct kthrottle_tagq *q;
	char path[128];
	uint64_t t0;
	int fd;

	(void)state;
	/* no socket file */
	snprintf(path, sizeof(path), "%s/absent.sock", dir);
	assert_int_equal(kthrottle_tagq_open(path, 100, &q), 0);
	t0 = ktest_now_ns();
	assert_int_equal(check(q, "nope"), 1);
	assert_true(ktest_now_ns() - t0 < 20 * MS);
	assert_int_equal(kthrottle_tagq_last_error(q), ENOENT);
	kthrottle_tagq_close(q);
	/* a stale socket file: nobody listening */
	snprintf(path, sizeof(path), "%s/stale.sock", dir);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	assert_int_equal(kthrottle_tagq_open(path, 100, &q), 0);
	assert_int_equal(check(q, "nope"), 1);
	assert_int_equal(kthrottle_tagq_last_error(q), ECONNREFUSED);
	kthrottle_tagq_close(q);
	/* TCP: a free port */
	snprintf(path, sizeof(path), "127.0.0.1:%d", ktest_free_port(SOCK_STREAM));
	assert_int_equal(kthrottle_tagq_open(path, 100, &q), 0);
	assert_int_equal(check(q, "nope"), 1);
	assert_int_equal(kthrottle_tagq_last_error(q), ECONNREFUSED);
	kthrottle_tagq_close(q);
}

/* The server goes away under an open connection and comes back. */
static void test_restart(void **state)
{
	struct kthrottle_tagq *q;
	struct srv s;
	char path[128];
	int err;

	(void)state;
	snprintf(path, sizeof(path), "%s/restart.sock", dir);
	srv_start(&s, path, 0);
	assert_int_equal(kthrottle_tagq_open(path, 200, &q), 0);
	assert_int_equal(check(q, "nope"), 0);
	srv_stop(&s);
	assert_int_equal(check(q, "nope"), 1);
	err = kthrottle_tagq_last_error(q);
	assert_true(err == ECONNRESET || err == EPIPE);
	/* still down after the back-off: no socket */
	ktest_sleep_ms(105);
	assert_int_equal(check(q, "nope"), 1);
	assert_int_equal(kthrottle_tagq_last_error(q), ENOENT);
	srv_start(&s, path, 0);
	assert_int_equal(check(q, "nope"), 1);
	assert_int_equal(kthrottle_tagq_last_error(q), EAGAIN);
	ktest_sleep_ms(205);
	assert_int_equal(check(q, "nope"), 0);
	assert_int_equal(kthrottle_tagq_last_error(q), 0);
	assert_int_equal(check(q, "ok"), 1);
	assert_int_equal(atomic_load(&s.accepts), 1);
	kthrottle_tagq_close(q);
	srv_stop(&s);
}

/* Tags that cannot be sent: served, EINVAL, nothing on the wire, the
 * connection still in step, no back-off. */
static void test_bad_tags(void **state)
{
	struct kthrottle_tagq *q;
	struct srv s;
	char big[256];

	(void)state;
	srv_start(&s, NULL, 0);
	assert_int_equal(kthrottle_tagq_open(s.where, 200, &q), 0);
	assert_int_equal(check(q, "nope"), 0);
	memset(big, 'n', sizeof(big));
	assert_int_equal(kthrottle_tagq_check(q, big, sizeof(big)), 1);
	assert_int_equal(kthrottle_tagq_last_error(q), EINVAL);
	assert_int_equal(kthrottle_tagq_check(q, "nope\nnope", 9), 1);
	assert_int_equal(kthrottle_tagq_last_error(q), EINVAL);
	assert_int_equal(kthrottle_tagq_check(q, "no\0pe", 5), 1);
	assert_int_equal(kthrottle_tagq_last_error(q), EINVAL);
	assert_int_equal(kthrottle_tagq_check(q, "", 0), 1);
	assert_int_equal(kthrottle_tagq_last_error(q), EINVAL);
	assert_int_equal(kthrottle_tagq_check(q, NULL, 3), 1);
	assert_int_equal(kthrottle_tagq_last_error(q), EINVAL);
	assert_int_equal(check(q, "nope"), 0); /* in step, not backing off */
	assert_int_equal(check(q, "yes"), 1);
	assert_int_equal(kthrottle_tagq_last_error(q), 0);
	assert_int_equal(atomic_load(&s.lines), 3);
	assert_int_equal(atomic_load(&s.accepts), 1);
	kthrottle_tagq_close(q);
	srv_stop(&s);
}

/* Runs argv with stdout and stderr to files; the exit code, and both
 * outputs (malloc'd). */
static int run(char *const argv[], char **out, char **err)
{
	char fo[128], fe[128];
	int status;
	pid_t pid;

	snprintf(fo, sizeof(fo), "%s/stdout", dir);
	snprintf(fe, sizeof(fe), "%s/stderr", dir);
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		int o = open(fo, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int e = open(fe, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
			_exit(126);
		execv(argv[0], argv);
		_exit(127);
	}
	assert_true(pid > 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	*out = ktest_slurp(fo);
	*err = ktest_slurp(fe);
	assert_non_null(*out);
	assert_non_null(*err);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int ctl_check(const char *where, const char *tag, const char *timeout, char **out,
		     char **err)
{
	char bin[4096];

	snprintf(bin, sizeof(bin), "%s/kthrottlectl", ktest_build_dir());
	char *argv[] = { bin, "check", (char *)tag, "--query", (char *)where, "--timeout-ms",
			 (char *)timeout, NULL };
	return run(argv, out, err);
}

static void test_cli(void **state)
{
	struct srv su, st;
	char path[128], *out, *err, absent[128];
	int rc;

	(void)state;
	snprintf(path, sizeof(path), "%s/cli.sock", dir);
	srv_start(&su, path, 0);
	srv_start(&st, NULL, 0);
	struct srv *both[] = { &su, &st };
	for (int i = 0; i < 2; i++) {
		rc = ctl_check(both[i]->where, "client-1", "500", &out, &err);
		assert_int_equal(rc, 0);
		assert_string_equal(out, "OK\n");
		assert_string_equal(err, "");
		free(out);
		free(err);
		rc = ctl_check(both[i]->where, "nope", "500", &out, &err);
		assert_int_equal(rc, 1);
		assert_string_equal(out, "NO\n");
		assert_string_equal(err, "");
		free(out);
		free(err);
	}
	/* unanswered: fail-safe OK, exit 0, a one-line warning */
	atomic_store(&st.mode, SRV_SILENT);
	uint64_t t0 = ktest_now_ns();
	rc = ctl_check(st.where, "nope", "100", &out, &err);
	assert_true(ktest_now_ns() - t0 < 1000 * MS);
	assert_int_equal(rc, 0);
	assert_string_equal(out, "OK (unanswered: Connection timed out; clients serve)\n");
	assert_true(ktest_is_one_line(err));
	assert_non_null(strstr(err, "warning"));
	free(out);
	free(err);
	snprintf(absent, sizeof(absent), "%s/absent.sock", dir);
	rc = ctl_check(absent, "nope", "100", &out, &err);
	assert_int_equal(rc, 0);
	assert_string_equal(out, "OK (unanswered: No such file or directory; clients serve)\n");
	assert_true(ktest_is_one_line(err));
	free(out);
	free(err);
	/* usage errors: exit 2, nothing on stdout, nothing asked */
	long lines = atomic_load(&su.lines);
	rc = ctl_check(su.where, "", "100", &out, &err);
	assert_int_equal(rc, 2);
	assert_string_equal(out, "");
	free(out);
	free(err);
	rc = ctl_check(su.where, "a\nb", "100", &out, &err);
	assert_int_equal(rc, 2);
	free(out);
	free(err);
	rc = ctl_check("nowhere", "x", "100", &out, &err);
	assert_int_equal(rc, 2);
	free(out);
	free(err);
	rc = ctl_check(su.where, "x", "0", &out, &err);
	assert_int_equal(rc, 2);
	free(out);
	free(err);
	assert_int_equal(atomic_load(&su.lines), lines);
	srv_stop(&su);
	srv_stop(&st);
}

/* The Python module's TagQuery (python/ by PYTHONPATH, the shared library
 * by KTHROTTLE_LIB), like tests/e2e/test_python.c runs Debian's python3. */
static void test_python(void **state)
{
	struct srv s;
	char path[128], py[4096], lib[4096], script[1024], *out, *err;
	const char *python = "/usr/bin/python3";
	struct stat sb;
	int rc;

	(void)state;
	snprintf(py, sizeof(py), "%s/../python", ktest_build_dir());
	snprintf(lib, sizeof(lib), "%s/libkthrottle.so", ktest_build_dir());
	if (access(python, X_OK) || stat(py, &sb) || access(lib, R_OK)) {
		print_message("no %s, %s or %s: skipped\n", python, py, lib);
		skip();
	}
	snprintf(path, sizeof(path), "%s/py.sock", dir);
	srv_start(&s, path, 0);
	snprintf(script, sizeof(script),
		 "import errno, sys, kthrottle\n"
		 "with kthrottle.TagQuery.open(%s%s%s, timeout_ms=200) as q:\n"
		 "    r = [q.check('client'), q.check(b'nope'), q.check('x' * 300), q.last_error]\n"
		 "    assert r == [True, False, True, errno.EINVAL], r\n"
		 "q2 = kthrottle.TagQuery('%s/absent.sock', 50)\n"
		 "assert q2.check('nope') and q2.last_error == errno.ENOENT\n"
		 "assert q2.check('nope') and q2.last_error == errno.EAGAIN\n"
		 "q2.close()\n"
		 "try:\n"
		 "    q2.check('x')\n"
		 "    sys.exit('check after close')\n"
		 "except kthrottle.Error as e:\n"
		 "    assert e.errno == errno.EBADF\n"
		 "for bad in ('nowhere', '1.2.3.4'):\n"
		 "    try:\n"
		 "        kthrottle.TagQuery(bad)\n"
		 "        sys.exit('accepted ' + bad)\n"
		 "    except ValueError:\n"
		 "        pass\n"
		 "print('python ok')\n",
		 "'", s.where, "'", dir);
	setenv("PYTHONPATH", py, 1);
	setenv("KTHROTTLE_LIB", lib, 1);
	ktest_asan_preload(); /* a sanitized libkthrottle in python */
	char *argv[] = { (char *)python, "-c", script, NULL };
	rc = run(argv, &out, &err);
	if (rc)
		print_message("python: %s%s", out, err);
	assert_int_equal(rc, 0);
	assert_string_equal(out, "python ok\n");
	assert_int_equal(atomic_load(&s.accepts), 1);
	assert_int_equal(atomic_load(&s.lines), 2);
	free(out);
	free(err);
	srv_stop(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_open_args),
		cmocka_unit_test(test_unix_answers),
		cmocka_unit_test(test_tcp_answers),
		cmocka_unit_test(test_silent),
		cmocka_unit_test(test_garbage),
		cmocka_unit_test(test_no_server),
		cmocka_unit_test(test_restart),
		cmocka_unit_test(test_bad_tags),
		cmocka_unit_test(test_cli),
		cmocka_unit_test(test_python),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
