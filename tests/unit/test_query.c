/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The query server (user/tags/query.c) over real sockets: the tag query line
 * protocol (docs/tags.md), its edge cases (over-long lines, NUL, empty lines, '\r', partial
 * lines, clients that disconnect mid-line or never read), many clients,
 * max_clients, the socket path's life cycle, and TCP. The server runs in a
 * thread looping poll(kt_query_fd) + kt_query_run; the test's decide answers
 * 0 for tags starting with 'n', else 1, and counts its calls. Every loop is
 * bounded in count and time. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <grp.h>
#include <signal.h>
#include <cmocka.h>
#include "kthrottle.h"
#include "ktest.h"
#include "tags/query.h"

#define SERVER_MAX_S 120 /* a server thread never runs longer than this */

static atomic_long g_calls;
static pthread_mutex_t g_last_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_last[KT_TAG_MAX_LEN + 1];
static size_t g_last_len;

/* ctx, when given, is a budget (atomic_int): serve while it lasts, like a
 * bucket with that burst and no refill. */
static int decide(void *ctx, const char *tag, size_t len)
{
	atomic_fetch_add(&g_calls, 1);
	if (ctx)
		return atomic_fetch_sub((atomic_int *)ctx, 1) > 0;
	pthread_mutex_lock(&g_last_mu);
	memcpy(g_last, tag, len);
	g_last_len = len;
	pthread_mutex_unlock(&g_last_mu);
	return tag[0] == 'n' ? 0 : 1;
}

static void assert_last_tag(const char *want)
{
	char last[sizeof(g_last)];
	size_t len;

	pthread_mutex_lock(&g_last_mu); /* copied: a failed assert must not keep the lock */
	memcpy(last, g_last, sizeof(last));
	len = g_last_len;
	pthread_mutex_unlock(&g_last_mu);
	assert_int_equal(len, strlen(want));
	assert_memory_equal(last, want, len);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000ULL + ts.tv_nsec / 1000000;
}

/* A server in a thread. */
struct srv {
	struct kt_query *q;
	pthread_t th;
	bool running;
	atomic_bool stop;
	pthread_mutex_t mu; /* held around kt_query_run and get_stats */
};

static struct srv g_srv;
static char g_dir[256], g_path[320];

static void *srv_main(void *a)
{
	struct srv *s = a;
	struct pollfd p = { .fd = kt_query_fd(s->q), .events = POLLIN };
	uint64_t t0 = now_ms();

	while (!atomic_load(&s->stop) && now_ms() - t0 < SERVER_MAX_S * 1000) {
		poll(&p, 1, 10);
		pthread_mutex_lock(&s->mu);
		kt_query_run(s->q);
		pthread_mutex_unlock(&s->mu);
	}
	return NULL;
}

static void srv_start(struct srv *s, struct kt_query *q)
{
	s->q = q;
	atomic_store(&s->stop, false);
	pthread_mutex_init(&s->mu, NULL);
	assert_int_equal(pthread_create(&s->th, NULL, srv_main, s), 0);
	s->running = true;
}

static void srv_stop(struct srv *s)
{
	if (s->running) {
		atomic_store(&s->stop, true);
		pthread_join(s->th, NULL);
		s->running = false;
		pthread_mutex_destroy(&s->mu);
	}
	kt_query_close(s->q);
	s->q = NULL;
}

static void srv_stats(struct srv *s, struct kt_query_stats *st)
{
	pthread_mutex_lock(&s->mu);
	kt_query_get_stats(s->q, st);
	pthread_mutex_unlock(&s->mu);
}

/* Waits (up to 2 s) until the server has `clients` connections. */
static void wait_clients(struct srv *s, uint64_t clients)
{
	struct kt_query_stats st;
	uint64_t t0 = now_ms();

	do {
		srv_stats(s, &st);
		if (st.clients == clients)
			return;
		usleep(2000);
	} while (now_ms() - t0 < 2000);
	print_error("clients %llu, want %llu\n", (unsigned long long)st.clients,
		    (unsigned long long)clients);
	fail();
}

/* Opens a server with these options and starts it. */
static void start_opts(const struct kt_query_opts *o, void *ctx)
{
	struct kt_query *q;
	char err[256];
	int ret = kt_query_open(o, decide, ctx, &q, err, sizeof(err));

	if (ret)
		print_error("kt_query_open: %d %s\n", ret, err);
	assert_int_equal(ret, 0);
	srv_start(&g_srv, q);
}

/* Opens a server on g_path and starts it. */
static void start_unix(unsigned max_clients)
{
	struct kt_query_opts o = { .socket_path = g_path, .max_clients = max_clients };

	start_opts(&o, NULL);
}

static int setup(void **state)
{
	(void)state;
	atomic_store(&g_calls, 0);
	if (ktest_tmpdir(g_dir, sizeof(g_dir)))
		return -1;
	snprintf(g_path, sizeof(g_path), "%s/query.sock", g_dir);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	srv_stop(&g_srv);
	ktest_rmtree(g_dir);
	return 0;
}

static int cli_unix(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = 5 };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	return fd;
}

static void send_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;

	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		assert_true(w > 0); /* SO_SNDTIMEO bounds each call */
		p += w;
		n -= w;
	}
}

static void send_str(int fd, const char *s)
{
	send_all(fd, s, strlen(s));
}

/* Reads until n bytes, EOF or timeout_ms; returns the bytes read. */
static size_t read_upto(int fd, char *buf, size_t n, int timeout_ms)
{
	uint64_t t0 = now_ms();
	size_t got = 0;

	while (got < n) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int left = timeout_ms - (int)(now_ms() - t0);
		ssize_t r;

		if (left <= 0 || poll(&p, 1, left) <= 0)
			break;
		r = recv(fd, buf + got, n - got, MSG_DONTWAIT);
		if (r < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (r <= 0)
			break;
		got += r;
	}
	return got;
}

/* The next bytes are exactly `want`, within 2 s. */
static void expect(int fd, const char *want)
{
	size_t n = strlen(want);
	char *buf = malloc(n + 1);
	size_t got;

	assert_non_null(buf);
	got = read_upto(fd, buf, n, 2000);
	buf[got] = 0;
	if (got != n || memcmp(buf, want, n))
		print_error("got %zu bytes '%.40s', want %zu '%.40s'\n", got, buf, n, want);
	assert_int_equal(got, n);
	assert_memory_equal(buf, want, n);
	free(buf);
}

/* EOF (the server closed) within 2 s, with nothing before it. */
static void expect_eof(int fd)
{
	char c;

	assert_int_equal(read_upto(fd, &c, 1, 2000), 0);
	assert_int_equal(recv(fd, &c, 1, MSG_DONTWAIT), 0);
}

static void test_single(void **state)
{
	struct kt_query_stats st;
	int fd;

	(void)state;
	start_unix(0);
	fd = cli_unix(g_path);
	send_str(fd, "hello\n");
	expect(fd, "OK\n");
	assert_last_tag("hello");
	send_str(fd, "nope\n");
	expect(fd, "NO\n");
	assert_last_tag("nope");
	assert_int_equal(atomic_load(&g_calls), 2);
	srv_stats(&g_srv, &st);
	assert_int_equal(st.ok, 1);
	assert_int_equal(st.no, 1);
	assert_int_equal(st.bad_lines, 0);
	assert_int_equal(st.clients, 1);
	assert_int_equal(st.accepted, 1);
	assert_int_equal(st.refused, 0);
	close(fd);
	wait_clients(&g_srv, 0);
}

static void test_pipelining(void **state)
{
	char *in = malloc(1000 * 16), want[3001];
	size_t n = 0;
	int fd, i;

	(void)state;
	assert_non_null(in);
	for (i = 0; i < 1000; i++) {
		n += sprintf(in + n, i % 3 ? "t%d\n" : "n%d\n", i);
		memcpy(want + 3 * i, i % 3 ? "OK\n" : "NO\n", 3);
	}
	want[3000] = 0;
	start_unix(0);
	fd = cli_unix(g_path);
	send_all(fd, in, n); /* one write */
	expect(fd, want);
	assert_int_equal(atomic_load(&g_calls), 1000);
	assert_last_tag("n999");
	close(fd);
	free(in);
}

static void test_partial_lines(void **state)
{
	const char *tag = "partial-tag\n";
	char in[4096], want[601];
	size_t n = 0, off = 0;
	int fd, i;

	(void)state;
	start_unix(0);
	fd = cli_unix(g_path);
	for (i = 0; tag[i]; i++) { /* byte by byte, each its own read */
		send_all(fd, tag + i, 1);
		usleep(2000);
	}
	expect(fd, "OK\n");
	assert_last_tag("partial-tag");
	/* 200 lines in writes of 1..17 bytes, cutting lines anywhere */
	for (i = 0; i < 200; i++) {
		n += sprintf(in + n, i % 2 ? "tag-%d\n" : "no-%d\n", i);
		memcpy(want + 3 * i, i % 2 ? "OK\n" : "NO\n", 3);
	}
	want[600] = 0;
	for (i = 0; off < n; i++) {
		size_t k = 1 + (i * 7) % 17;

		if (k > n - off)
			k = n - off;
		send_all(fd, in + off, k);
		off += k;
		if (i % 10 == 0)
			usleep(500);
	}
	expect(fd, want);
	assert_int_equal(atomic_load(&g_calls), 201);
	close(fd);
}

static void test_oversized(void **state)
{
	struct kt_query_stats st;
	size_t big = 1 << 20;
	char line[600], *huge;
	int fd, i;

	(void)state;
	start_unix(0);
	fd = cli_unix(g_path);
	/* 300 bytes: one NO, and the next line is read normally */
	memset(line, 'a', 300);
	memcpy(line + 300, "\nok\n", 5);
	send_str(fd, line);
	expect(fd, "NO\nOK\n");
	assert_int_equal(atomic_load(&g_calls), 1);
	assert_last_tag("ok");
	/* the boundary: 255 bytes is a tag (with or without '\r'), 256 is not */
	memset(line, 'b', 255);
	strcpy(line + 255, "\n");
	send_str(fd, line);
	expect(fd, "OK\n");
	strcpy(line + 255, "\r\n");
	send_str(fd, line);
	expect(fd, "OK\n");
	strcpy(line + 255, "b\n");
	send_str(fd, line);
	expect(fd, "NO\n");
	strcpy(line + 255, "b\r\n");
	send_str(fd, line);
	expect(fd, "NO\n");
	assert_int_equal(atomic_load(&g_calls), 3);
	/* over-long across writes: the part before the cut is buffered, not the rest */
	memset(line, 'c', 300);
	send_all(fd, line, 200);
	usleep(5000);
	send_all(fd, line, 100);
	usleep(5000);
	send_str(fd, "\nyes\n");
	expect(fd, "NO\nOK\n");
	/* 1 MiB line: one NO, then in sync */
	huge = malloc(big + 16);
	assert_non_null(huge);
	memset(huge, 'x', big);
	memcpy(huge + big, "\nmore\nnah\n", 11);
	send_all(fd, huge, big + 10);
	expect(fd, "NO\nOK\nNO\n");
	assert_last_tag("nah");
	free(huge);
	assert_int_equal(atomic_load(&g_calls), 6);
	srv_stats(&g_srv, &st);
	assert_int_equal(st.bad_lines, 5);
	assert_int_equal(st.ok, 5);
	assert_int_equal(st.no, 6);
	for (i = 0; i < 3; i++) { /* still fine afterwards */
		send_str(fd, "again\n");
		expect(fd, "OK\n");
	}
	close(fd);
}

static void test_nul_empty_cr(void **state)
{
	struct kt_query_stats st;
	int fd;

	(void)state;
	start_unix(0);
	fd = cli_unix(g_path);
	send_all(fd, "a\0b\n", 4);
	expect(fd, "NO\n");
	send_all(fd, "\0\n", 2);
	expect(fd, "NO\n");
	send_str(fd, "\n");
	expect(fd, "NO\n");
	send_str(fd, "\r\n");
	expect(fd, "NO\n");
	assert_int_equal(atomic_load(&g_calls), 0);
	send_str(fd, "tag\r\n");
	expect(fd, "OK\n");
	assert_last_tag("tag"); /* '\r' removed */
	send_str(fd, "nn\r\n");
	expect(fd, "NO\n");
	assert_last_tag("nn");
	send_str(fd, "x\r\r\n"); /* only one '\r' removed */
	expect(fd, "OK\n");
	assert_last_tag("x\r");
	/* mixed in one write */
	send_all(fd, "a\n\nb\0\nn\r\nc\n", 11);
	expect(fd, "OK\nNO\nNO\nNO\nOK\n");
	assert_int_equal(atomic_load(&g_calls), 6);
	srv_stats(&g_srv, &st);
	assert_int_equal(st.bad_lines, 6);
	close(fd);
}

static void test_disconnect_midline(void **state)
{
	struct kt_query_stats st;
	int a, b, c;

	(void)state;
	start_unix(0);
	a = cli_unix(g_path);
	b = cli_unix(g_path);
	send_str(a, "first\nabc");
	expect(a, "OK\n");
	close(a); /* mid-line */
	wait_clients(&g_srv, 1);
	send_str(b, "other\n");
	expect(b, "OK\n");
	assert_int_equal(atomic_load(&g_calls), 2);
	assert_last_tag("other");
	/* mid over-long line */
	c = cli_unix(g_path);
	{
		char line[400];

		memset(line, 'z', sizeof(line));
		send_all(c, line, sizeof(line));
	}
	usleep(10000);
	close(c);
	wait_clients(&g_srv, 1);
	/* half close: the answers still come, then EOF */
	c = cli_unix(g_path);
	send_str(c, "h1\nnh2\nh3-partial");
	assert_int_equal(shutdown(c, SHUT_WR), 0);
	expect(c, "OK\nNO\n");
	expect_eof(c);
	close(c);
	wait_clients(&g_srv, 1);
	send_str(b, "still\n");
	expect(b, "OK\n");
	assert_int_equal(atomic_load(&g_calls), 5);
	srv_stats(&g_srv, &st);
	assert_int_equal(st.bad_lines, 0);
	assert_int_equal(st.accepted, 4);
	close(b);
}

#define MANY 1000

static void test_many_clients(void **state)
{
	struct kt_query_stats st;
	struct rlimit rl;
	static int fds[MANY];
	char buf[32];
	int i;

	(void)state;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur < 2 * MANY + 64) {
		rl.rlim_cur = 2 * MANY + 64;
		if (rl.rlim_max < rl.rlim_cur)
			rl.rlim_max = rl.rlim_cur;
		assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	}
	/* one uid: allowed that many here (the per-peer cap is test_hostile's) */
	start_opts(&(struct kt_query_opts){ .socket_path = g_path, .max_per_peer = MANY }, NULL);
	for (i = 0; i < MANY; i++)
		fds[i] = cli_unix(g_path);
	for (i = 0; i < MANY; i++) {
		snprintf(buf, sizeof(buf), i % 2 ? "c%d\n" : "n%d\n", i);
		send_str(fds[i], buf);
	}
	for (i = 0; i < MANY; i++)
		expect(fds[i], i % 2 ? "OK\n" : "NO\n");
	assert_int_equal(atomic_load(&g_calls), MANY);
	srv_stats(&g_srv, &st);
	assert_int_equal(st.clients, MANY);
	assert_int_equal(st.accepted, MANY);
	assert_int_equal(st.ok, MANY / 2);
	for (i = 0; i < MANY; i++)
		close(fds[i]);
	wait_clients(&g_srv, 0);
}

/* The flooder: never reads, writes up to 10 MB of queries with blocking
 * writes that time out after 100 ms; stops after 6 s or when told. */
struct flood {
	int fd;
	atomic_bool stop;
	atomic_size_t sent;
	int stalls;
};

#define FLOOD_BYTES (10u << 20)

static void *flood_main(void *arg)
{
	struct flood *f = arg;
	struct timeval tv = { .tv_usec = 100000 };
	char chunk[65536];
	uint64_t t0 = now_ms();
	size_t i;

	for (i = 0; i + 6 <= sizeof(chunk); i += 6)
		memcpy(chunk + i, "flood\n", 6);
	setsockopt(f->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	while (!atomic_load(&f->stop) && atomic_load(&f->sent) < FLOOD_BYTES &&
	       now_ms() - t0 < 6000) {
		ssize_t w = send(f->fd, chunk, i, MSG_NOSIGNAL);

		if (w > 0)
			atomic_fetch_add(&f->sent, w);
		else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			f->stalls++;
		else if (w < 0 && errno != EINTR)
			break;
	}
	return NULL;
}

static void test_slow_reader(void **state)
{
	struct kt_query_stats st, st2;
	struct flood f = { 0 };
	uint64_t worst = 0;
	pthread_t th;
	int b, i;

	(void)state;
	start_unix(0);
	f.fd = cli_unix(g_path);
	b = cli_unix(g_path);
	assert_int_equal(pthread_create(&th, NULL, flood_main, &f), 0);
	/* another client is answered at once all along */
	for (i = 0; i < 20; i++) {
		uint64_t t0 = now_ms(), dt;

		send_str(b, "b\n");
		expect(b, "OK\n");
		dt = now_ms() - t0;
		if (dt > worst)
			worst = dt;
		usleep(50000);
	}
	atomic_store(&f.stop, true);
	pthread_join(th, NULL);
	print_message("    flooder sent %zu bytes (%d stalls); other client's worst answer %llu ms\n",
		      atomic_load(&f.sent), f.stalls, (unsigned long long)worst);
	assert_true(worst < 500);
	/* the server stopped reading it: far from 10 MB taken, and no more */
	assert_true(atomic_load(&f.sent) < FLOOD_BYTES / 2);
	assert_true(f.stalls > 0);
	srv_stats(&g_srv, &st);
	usleep(100000);
	srv_stats(&g_srv, &st2);
	assert_int_equal(st.ok, st2.ok);
	assert_true(st.ok < FLOOD_BYTES / 6);
	close(f.fd);
	wait_clients(&g_srv, 1);
	send_str(b, "after\n");
	expect(b, "OK\n");
	close(b);
}

/* Sends 1 MB of "a\n" (500,000 queries, 1.5 MB of answers) with blocking
 * writes, each bounded by SO_SNDTIMEO. */
struct pusher {
	int fd;
	size_t sent;
};

static void *pusher_main(void *arg)
{
	struct pusher *p = arg;
	char chunk[65536];
	size_t i;

	for (i = 0; i + 2 <= sizeof(chunk); i += 2)
		memcpy(chunk + i, "a\n", 2);
	while (p->sent < (1u << 20)) {
		ssize_t w = send(p->fd, chunk, sizeof(chunk), MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		p->sent += w;
	}
	return NULL;
}

/* A client slow to read: the server stops reading it, then resumes as it
 * drains, and every answer arrives, in order, none lost. */
static void test_backpressure_resume(void **state)
{
	struct pusher p = { 0 };
	size_t want = 3 * ((1u << 20) / 2), got = 0, bad = 0, i;
	char *buf = malloc(65536);
	uint64_t t0;
	pthread_t th;

	(void)state;
	assert_non_null(buf);
	start_unix(0);
	p.fd = cli_unix(g_path);
	assert_int_equal(pthread_create(&th, NULL, pusher_main, &p), 0);
	usleep(300000); /* not reading yet: the server must hold back */
	t0 = now_ms();
	while (got < want && now_ms() - t0 < 10000) {
		size_t n = read_upto(p.fd, buf, want - got < 65536 ? want - got : 65536, 1000);

		if (!n)
			break;
		for (i = 0; i < n; i++) /* "OK\n" repeated, phase by offset */
			bad += buf[i] != "OK\n"[(got + i) % 3];
		got += n;
	}
	pthread_join(th, NULL);
	free(buf);
	print_message("    sent %zu bytes, read %zu answer bytes in %llu ms\n", p.sent, got,
		      (unsigned long long)(now_ms() - t0));
	assert_int_equal(p.sent, 1u << 20);
	assert_int_equal(got, want);
	assert_int_equal(bad, 0);
	assert_int_equal(atomic_load(&g_calls), (1u << 20) / 2);
	close(p.fd);
}

static void test_max_clients(void **state)
{
	struct kt_query_stats st;
	int a, b, c;

	(void)state;
	start_unix(2);
	a = cli_unix(g_path);
	b = cli_unix(g_path);
	send_str(a, "a\n");
	expect(a, "OK\n");
	send_str(b, "b\n");
	expect(b, "OK\n");
	/* full: the newcomer is served, the idlest connection (a) makes room */
	c = cli_unix(g_path);
	send_str(c, "c\n");
	expect(c, "OK\n");
	expect_eof(a);
	close(a);
	srv_stats(&g_srv, &st);
	assert_int_equal(st.refused, 0);
	assert_int_equal(st.evicted_full, 1);
	assert_int_equal(st.evicted_peer_cap, 0);
	assert_int_equal(st.clients, 2);
	assert_int_equal(st.accepted, 3);
	assert_int_equal(st.peers, 1);
	send_str(b, "b\n");
	expect(b, "OK\n");
	assert_int_equal(atomic_load(&g_calls), 4);
	close(b);
	close(c);
	wait_clients(&g_srv, 0);
	srv_stats(&g_srv, &st);
	assert_int_equal(st.peers, 0);
}

static void test_stale_socket(void **state)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int fd;

	(void)state;
	/* a dead server's socket: bound, then closed without unlink */
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", g_path);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	assert_int_equal(lstat(g_path, &st), 0);
	start_unix(0);
	fd = cli_unix(g_path);
	send_str(fd, "s\n");
	expect(fd, "OK\n");
	assert_int_equal(stat(g_path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0666);
	close(fd);
}

static void test_live_socket(void **state)
{
	struct kt_query_opts o = { .socket_path = g_path };
	struct kt_query *q2 = (void *)1;
	char err[256] = "";
	int fd;

	(void)state;
	start_unix(0);
	assert_int_equal(kt_query_open(&o, decide, NULL, &q2, err, sizeof(err)), -EADDRINUSE);
	assert_null(q2);
	print_message("    error: %s\n", err);
	assert_non_null(strstr(err, g_path));
	assert_non_null(strstr(err, "another server"));
	/* the first server is untouched */
	fd = cli_unix(g_path);
	send_str(fd, "live\n");
	expect(fd, "OK\n");
	close(fd);
}

static void test_path_errors(void **state)
{
	struct kt_query_opts o = { .socket_path = g_path };
	struct kt_query *q;
	char err[256] = "", missing[400];
	struct stat st;

	(void)state;
	/* not a socket: refused and left alone */
	assert_int_equal(ktest_write_file(g_path, "data"), 0);
	assert_int_equal(kt_query_open(&o, decide, NULL, &q, err, sizeof(err)), -EEXIST);
	print_message("    error: %s\n", err);
	assert_non_null(strstr(err, "not a socket"));
	assert_int_equal(lstat(g_path, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	/* no directory: the daemon creates it, not the server */
	snprintf(missing, sizeof(missing), "%s/nodir/q.sock", g_dir);
	o.socket_path = missing;
	assert_int_equal(kt_query_open(&o, decide, NULL, &q, err, sizeof(err)), -ENOENT);
	print_message("    error: %s\n", err);
	assert_non_null(strstr(err, "directory"));
	/* no listener at all, a bad TCP address */
	o.socket_path = NULL;
	assert_int_equal(kt_query_open(&o, decide, NULL, &q, err, sizeof(err)), -EINVAL);
	o.tcp_addr = "localhost";
	o.tcp_port = 4000;
	assert_int_equal(kt_query_open(&o, decide, NULL, &q, err, sizeof(err)), -EINVAL);
	print_message("    error: %s\n", err);
	assert_null(q);
}

static int cli_tcp(int family, const char *addr, int port)
{
	struct sockaddr_storage ss = { 0 };
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
	int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	if (family == AF_INET) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons(port);
		inet_pton(AF_INET, addr, &s4->sin_addr);
	} else {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		inet_pton(AF_INET6, addr, &s6->sin6_addr);
	}
	assert_int_equal(connect(fd, (struct sockaddr *)&ss, family == AF_INET ? sizeof(*s4) : sizeof(*s6)), 0);
	return fd;
}

static void test_tcp(void **state)
{
	struct kt_query_opts o = { .socket_path = g_path, .tcp_addr = "127.0.0.1" };
	struct kt_query *q;
	char err[256];
	int fd, u, ret, tries;

	(void)state;
	for (tries = 0; tries < 5; tries++) { /* a free port may be taken meanwhile */
		o.tcp_port = ktest_free_port(SOCK_STREAM);
		ret = kt_query_open(&o, decide, NULL, &q, err, sizeof(err));
		if (ret != -EADDRINUSE)
			break;
	}
	if (ret)
		print_error("kt_query_open: %s\n", err);
	assert_int_equal(ret, 0);
	srv_start(&g_srv, q);
	fd = cli_tcp(AF_INET, "127.0.0.1", o.tcp_port);
	send_str(fd, "tcp\nno\r\n\n");
	expect(fd, "OK\nNO\nNO\n");
	u = cli_unix(g_path); /* both listeners at once */
	send_str(u, "unix\n");
	expect(u, "OK\n");
	close(fd);
	close(u);
	srv_stop(&g_srv);
	assert_int_equal(access(g_path, F_OK), -1);

	/* IPv6 loopback, bracketed or not, when the host has it */
	o.socket_path = NULL;
	o.tcp_addr = "[::1]";
	o.tcp_port = ktest_free_port(SOCK_STREAM);
	ret = kt_query_open(&o, decide, NULL, &q, err, sizeof(err));
	if (ret == -EADDRNOTAVAIL || ret == -EAFNOSUPPORT) {
		print_message("    no IPv6 loopback: %s\n", err);
		return;
	}
	assert_int_equal(ret, 0);
	srv_start(&g_srv, q);
	fd = cli_tcp(AF_INET6, "::1", o.tcp_port);
	send_str(fd, "six\n");
	expect(fd, "OK\n");
	close(fd);
}

static void test_close_unlinks(void **state)
{
	struct stat st;

	(void)state;
	start_unix(0);
	assert_int_equal(lstat(g_path, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	srv_stop(&g_srv);
	assert_int_equal(lstat(g_path, &st), -1);
	assert_int_equal(errno, ENOENT);
	/* a path replaced by someone else since is not removed */
	start_unix(0);
	assert_int_equal(unlink(g_path), 0);
	assert_int_equal(ktest_write_file(g_path, "someone else's"), 0);
	srv_stop(&g_srv);
	assert_int_equal(lstat(g_path, &st), 0);
	assert_true(S_ISREG(st.st_mode));
}

/* ---- hostile neighbours: a fail-safe client must not be made to fail ---- */

#define HOLD 4300       /* idle connections one peer opens and keeps */
#define PEER_CAP 512    /* the default per-peer cap: max(64, 4096 / 8) */
#define BURST 3         /* the fresh client's budget: OK x3, then NO */

static void raise_nofile(rlim_t want)
{
	struct rlimit rl;

	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur < want) {
		rl.rlim_cur = want;
		if (rl.rlim_max < want)
			rl.rlim_max = want; /* root may raise it */
		assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	}
}

/* Waits (up to 30 s) until the server accepted `n` connections in all. */
static void wait_accepted(uint64_t n)
{
	struct kt_query_stats st;
	uint64_t t0 = now_ms();

	do {
		srv_stats(&g_srv, &st);
		if (st.accepted >= n)
			return;
		usleep(5000);
	} while (now_ms() - t0 < 30000);
	print_error("accepted %llu, want %llu\n", (unsigned long long)st.accepted,
		    (unsigned long long)n);
	fail();
}

/* A non-blocking connect to sa, from `src` (IPv4, or NULL); retried while
 * the backlog is full, for up to 10 s. */
static int hold_connect(const struct sockaddr *sa, socklen_t sl, const char *src)
{
	uint64_t t0 = now_ms();
	int fd;

	fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	if (src) {
		struct sockaddr_in b = { .sin_family = AF_INET };

		inet_pton(AF_INET, src, &b.sin_addr);
		assert_int_equal(bind(fd, (struct sockaddr *)&b, sizeof(b)), 0);
	}
	while (connect(fd, sa, sl)) {
		if (errno == EINPROGRESS)
			break; /* TCP: the server thread completes it */
		assert_true(errno == EAGAIN || errno == EINTR);
		assert_true(now_ms() - t0 < 10000);
		usleep(1000);
	}
	return fd;
}

/* The fresh client's queries: BURST x OK, then NO. 0 or a failing step. */
static int fresh_queries(int fd)
{
	char buf[4];

	for (int i = 0; i <= BURST; i++) {
		if (send(fd, "t\n", 2, MSG_NOSIGNAL) != 2)
			return 10 + i;
		if (read_upto(fd, buf, 3, 2000) != 3)
			return 20 + i;
		if (memcmp(buf, i < BURST ? "OK\n" : "NO\n", 3))
			return 30 + i;
	}
	return 0;
}

/* Whether fd's connection was closed by the server (EOF or reset within
 * 2 s), or is still open (nothing to read, no EOF). */
static bool closed_by_server(int fd, int wait_ms)
{
	char c;
	ssize_t r;

	if (read_upto(fd, &c, 1, wait_ms))
		return false;
	r = recv(fd, &c, 1, MSG_DONTWAIT);
	return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* A child with uid 65534 connects and queries; its exit code is the verdict. */
static int fresh_as_nobody(void)
{
	pid_t pid = fork();
	uint64_t t0;
	int status = -1;

	assert_true(pid >= 0);
	if (!pid) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		int fd;

		if (setgroups(0, NULL) || setgid(65534) || setuid(65534))
			_exit(2);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", g_path);
		if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
			_exit(3);
		_exit(fresh_queries(fd));
	}
	t0 = now_ms();
	while (waitpid(pid, &status, WNOHANG) == 0) {
		if (now_ms() - t0 > 10000) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			break;
		}
		usleep(2000);
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}

/* One local process (this test, root) opens HOLD idle connections to the
 * Unix socket and keeps them: it keeps PEER_CAP, its oldest evicted as it
 * goes; another uid's fresh client is answered right; a fresh one of the
 * same uid evicts the holder's oldest, not itself. */
static void test_hostile_unix(void **state)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct kt_query_opts o = { .socket_path = g_path };
	struct kt_query_stats st;
	static int fds[HOLD];
	atomic_int budget = BURST;
	uint64_t t0;
	int i, fd, rc;

	(void)state;
	raise_nofile(2 * HOLD + 256);
	start_opts(&o, &budget);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", g_path);
	t0 = now_ms();
	for (i = 0; i < HOLD; i++)
		fds[i] = hold_connect((struct sockaddr *)&sa, sizeof(sa), NULL);
	wait_accepted(HOLD);
	print_message("    %d idle connections held in %llu ms\n", HOLD,
		      (unsigned long long)(now_ms() - t0));
	srv_stats(&g_srv, &st);
	assert_int_equal(st.clients, PEER_CAP);
	assert_int_equal(st.evicted_peer_cap, HOLD - PEER_CAP);
	assert_int_equal(st.evicted_full, 0);
	assert_int_equal(st.refused, 0);
	assert_true(closed_by_server(fds[0], 2000));
	assert_true(closed_by_server(fds[HOLD - PEER_CAP - 1], 2000));
	assert_false(closed_by_server(fds[HOLD - PEER_CAP], 0));

	if (geteuid() == 0) {
		assert_int_equal(chmod(g_dir, 0755), 0); /* nobody reaches the socket */
		t0 = now_ms();
		rc = fresh_as_nobody();
		print_message("    uid 65534's fresh client answered in %llu ms (exit %d)\n",
			      (unsigned long long)(now_ms() - t0), rc);
		assert_int_equal(rc, 0);
		srv_stats(&g_srv, &st);
		assert_int_equal(st.evicted_peer_cap, HOLD - PEER_CAP); /* nobody's own slot */
		assert_int_equal(st.ok, BURST);
		assert_int_equal(st.no, 1);
		atomic_store(&budget, BURST);
	} else {
		print_message("    not root: the other-uid client is skipped\n");
	}
	/* the same uid: served too, at the cost of the holder's oldest */
	fd = cli_unix(g_path);
	assert_int_equal(fresh_queries(fd), 0);
	assert_true(closed_by_server(fds[HOLD - PEER_CAP], 2000));
	assert_false(closed_by_server(fds[HOLD - PEER_CAP + 1], 0));
	srv_stats(&g_srv, &st);
	assert_int_equal(st.evicted_peer_cap, HOLD - PEER_CAP + 1);
	close(fd);
	for (i = 0; i < HOLD; i++)
		close(fds[i]);
	wait_clients(&g_srv, 0);
	srv_stats(&g_srv, &st);
	assert_int_equal(st.peers, 0);
}

/* The same by TCP source address: 127.0.0.2 holds HOLD, 127.0.0.1 is served. */
static void test_hostile_tcp(void **state)
{
	struct kt_query_opts o = { .tcp_addr = "127.0.0.1" };
	struct sockaddr_in sa = { .sin_family = AF_INET };
	struct kt_query_stats st;
	static int fds[HOLD];
	atomic_int budget = BURST;
	struct kt_query *q;
	char err[256];
	uint64_t t0;
	int i, fd, ret = 0, tries;

	(void)state;
	raise_nofile(2 * HOLD + 256);
	for (tries = 0; tries < 5; tries++) {
		o.tcp_port = ktest_free_port(SOCK_STREAM);
		ret = kt_query_open(&o, decide, &budget, &q, err, sizeof(err));
		if (ret != -EADDRINUSE)
			break;
	}
	assert_int_equal(ret, 0);
	srv_start(&g_srv, q);
	sa.sin_port = htons(o.tcp_port);
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	t0 = now_ms();
	for (i = 0; i < HOLD; i++)
		fds[i] = hold_connect((struct sockaddr *)&sa, sizeof(sa), "127.0.0.2");
	wait_accepted(HOLD);
	print_message("    %d idle TCP connections from 127.0.0.2 held in %llu ms\n", HOLD,
		      (unsigned long long)(now_ms() - t0));
	srv_stats(&g_srv, &st);
	assert_int_equal(st.clients, PEER_CAP);
	assert_int_equal(st.evicted_peer_cap, HOLD - PEER_CAP);
	assert_int_equal(st.peers, 1);
	fd = hold_connect((struct sockaddr *)&sa, sizeof(sa), "127.0.0.1");
	{
		int fl = fcntl(fd, F_GETFL);

		assert_int_equal(fcntl(fd, F_SETFL, fl & ~O_NONBLOCK), 0);
	}
	t0 = now_ms();
	assert_int_equal(fresh_queries(fd), 0);
	print_message("    127.0.0.1's fresh client answered in %llu ms\n",
		      (unsigned long long)(now_ms() - t0));
	srv_stats(&g_srv, &st);
	assert_int_equal(st.clients, PEER_CAP + 1);
	assert_int_equal(st.evicted_peer_cap, HOLD - PEER_CAP); /* its own slot */
	assert_int_equal(st.peers, 2);
	assert_int_equal(st.ok, BURST);
	assert_int_equal(st.no, 1);
	close(fd);
	for (i = 0; i < HOLD; i++)
		close(fds[i]);
	wait_clients(&g_srv, 0);
}

/* Full server, many peers: the newcomer evicts the idlest connection of
 * the largest holder. 127.0.0.2 holds 6, 127.0.0.3 holds 2 (max 8). */
static void test_full_evicts_largest(void **state)
{
	struct kt_query_opts o = { .tcp_addr = "127.0.0.1", .max_clients = 8 };
	struct sockaddr_in sa = { .sin_family = AF_INET };
	struct kt_query_stats st;
	int big[6], small[2], fd, i, ret = 0, tries;
	struct kt_query *q;
	char err[256];

	(void)state;
	for (tries = 0; tries < 5; tries++) {
		o.tcp_port = ktest_free_port(SOCK_STREAM);
		ret = kt_query_open(&o, decide, NULL, &q, err, sizeof(err));
		if (ret != -EADDRINUSE)
			break;
	}
	assert_int_equal(ret, 0);
	srv_start(&g_srv, q);
	sa.sin_port = htons(o.tcp_port);
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	for (i = 0; i < 2; i++)
		small[i] = hold_connect((struct sockaddr *)&sa, sizeof(sa), "127.0.0.3");
	wait_accepted(2);
	for (i = 0; i < 6; i++) {
		big[i] = hold_connect((struct sockaddr *)&sa, sizeof(sa), "127.0.0.2");
		wait_accepted(3 + i);
	}
	fd = hold_connect((struct sockaddr *)&sa, sizeof(sa), "127.0.0.4");
	wait_accepted(9);
	assert_true(closed_by_server(big[0], 2000));
	assert_false(closed_by_server(big[1], 0));
	assert_false(closed_by_server(small[0], 0));
	srv_stats(&g_srv, &st);
	assert_int_equal(st.evicted_full, 1);
	assert_int_equal(st.clients, 8);
	assert_int_equal(st.peers, 3);
	{
		int fl = fcntl(fd, F_GETFL);

		assert_int_equal(fcntl(fd, F_SETFL, fl & ~O_NONBLOCK), 0);
	}
	send_str(fd, "a\nn\n");
	expect(fd, "OK\nNO\n");
	close(fd);
	for (i = 0; i < 6; i++)
		close(big[i]);
	for (i = 0; i < 2; i++)
		close(small[i]);
}

/* Idle timeout (300 ms here): the silent connection is closed, the one
 * asking every 100 ms is not; a client draining a backlog slowly is not. */
static void test_idle_timeout(void **state)
{
	struct kt_query_opts o = { .socket_path = g_path, .idle_ms = 300 };
	struct kt_query_stats st;
	int idle, busy, i;
	uint64_t t0;

	(void)state;
	start_opts(&o, NULL);
	t0 = now_ms();
	idle = cli_unix(g_path);
	busy = cli_unix(g_path);
	send_str(idle, "partial line, never ended"); /* not a complete line */
	for (i = 0; i < 10; i++) {
		send_str(busy, "b\n");
		expect(busy, "OK\n");
		usleep(100000);
	}
	assert_true(closed_by_server(idle, 0));
	srv_stats(&g_srv, &st);
	assert_int_equal(st.evicted_idle, 1);
	assert_int_equal(st.clients, 1);
	assert_true(now_ms() - t0 >= 300);
	send_str(busy, "b\n");
	expect(busy, "OK\n");
	close(idle);
	close(busy);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_single, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pipelining, setup, teardown),
		cmocka_unit_test_setup_teardown(test_partial_lines, setup, teardown),
		cmocka_unit_test_setup_teardown(test_oversized, setup, teardown),
		cmocka_unit_test_setup_teardown(test_nul_empty_cr, setup, teardown),
		cmocka_unit_test_setup_teardown(test_disconnect_midline, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many_clients, setup, teardown),
		cmocka_unit_test_setup_teardown(test_slow_reader, setup, teardown),
		cmocka_unit_test_setup_teardown(test_backpressure_resume, setup, teardown),
		cmocka_unit_test_setup_teardown(test_max_clients, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stale_socket, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_socket, setup, teardown),
		cmocka_unit_test_setup_teardown(test_path_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tcp, setup, teardown),
		cmocka_unit_test_setup_teardown(test_close_unlinks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile_unix, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile_tcp, setup, teardown),
		cmocka_unit_test_setup_teardown(test_full_evicts_largest, setup, teardown),
		cmocka_unit_test_setup_teardown(test_idle_timeout, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
