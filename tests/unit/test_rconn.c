/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Non-blocking Redis connection (rconn) against real redis-server processes
 * on free loopback ports, plain and TLS, driven by a tiny epoll loop that also
 * checks no kt_rconn_handle call ever blocks. */
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
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <cmocka.h>
#include "kthrottle.h"
#include "redis_proc.h"
#include "redis_tls.h"
#include "store/rconn.h"

#define MS 1000000ULL
#define HANDLE_MAX_NS (5 * MS) /* the loop is never blocked longer than this */

static struct rp_proc g_plain, g_tls, g_mtls, g_own;
static int g_tls_port, g_mtls_port;
static struct rt_certs g_certs;
static char err[512];

/* One command's outcome, filled by rec_cb. */
struct rec {
	int called;
	int order;        /* position among all callbacks of the test */
	int type;
	long long integer;
	char str[256];
	size_t len;
	size_t elements;
	char err[512];
	uint64_t at_ns;
};

static int g_order;

static void rec_cb(void *data, redisReply *r, const char *e)
{
	struct rec *x = data;

	x->called++;
	x->order = g_order++;
	x->at_ns = kt_clock_ns();
	if (!r) {
		assert_non_null(e);
		snprintf(x->err, sizeof(x->err), "%s", e);
		return;
	}
	assert_null(e);
	x->type = r->type;
	x->integer = r->integer;
	x->elements = r->elements;
	if (r->str) {
		x->len = r->len;
		memcpy(x->str, r->str, r->len < sizeof(x->str) ? r->len : sizeof(x->str) - 1);
	}
}

/* The test's epoll loop. */
struct loop {
	int ep;
	int reg_fd;
	uint64_t max_handle_ns;
	int handles;
};

static void loop_init(struct loop *l)
{
	l->ep = epoll_create1(EPOLL_CLOEXEC);
	assert_true(l->ep >= 0);
	l->reg_fd = -1;
	l->max_handle_ns = 0;
	l->handles = 0;
}

static void loop_fini(struct loop *l)
{
	close(l->ep);
}

/* One turn: register/refresh the fd, wait for events or the deadline (at
 * most max_wait_ms), handle. */
static void loop_turn(struct loop *l, struct kt_rconn *c, int max_wait_ms)
{
	struct epoll_event ev = { 0 };
	uint64_t now, d, t0, t1;
	int fd = kt_rconn_fd(c), n, wait = max_wait_ms;

	if (fd >= 0) {
		ev.events = kt_rconn_events(c);
		ev.data.fd = fd;
		/* A changed number means the old socket is closed: epoll forgot it. */
		if (fd != l->reg_fd)
			assert_int_equal(epoll_ctl(l->ep, EPOLL_CTL_ADD, fd, &ev), 0);
		else
			assert_int_equal(epoll_ctl(l->ep, EPOLL_CTL_MOD, fd, &ev), 0);
		l->reg_fd = fd;
	}
	now = kt_clock_ns();
	d = kt_rconn_deadline(c);
	if (d) {
		uint64_t left = d > now ? (d - now + MS - 1) / MS : 0;

		if (left < (uint64_t)wait)
			wait = (int)left;
	}
	ev.events = 0;
	n = epoll_wait(l->ep, &ev, 1, wait);
	if (n < 0)
		assert_int_equal(errno, EINTR);
	t0 = kt_clock_ns();
	kt_rconn_handle(c, n > 0 ? ev.events : 0, t0);
	t1 = kt_clock_ns();
	l->handles++;
	if (t1 - t0 > l->max_handle_ns)
		l->max_handle_ns = t1 - t0;
}

/* Turns until done() or the conn FAILED or limit_ms passed. */
static void loop_run(struct loop *l, struct kt_rconn *c, bool (*done)(void *), void *arg, int limit_ms)
{
	uint64_t end = kt_clock_ns() + (uint64_t)limit_ms * MS;

	while (!(done && done(arg)) && kt_rconn_state(c) != KT_RCONN_FAILED && kt_clock_ns() < end)
		loop_turn(l, c, 50);
}

struct until_n {
	struct rec *recs;
	int n;
};

static bool all_called(void *arg)
{
	struct until_n *u = arg;

	for (int i = 0; i < u->n; i++)
		if (!u->recs[i].called)
			return false;
	return true;
}

static bool is_ready(void *arg)
{
	return kt_rconn_state(arg) == KT_RCONN_READY;
}

static uint64_t in_ms(int ms)
{
	return kt_clock_ns() + (uint64_t)ms * MS;
}

static struct kt_rconn *open_plain(int port)
{
	struct kt_rconn_opts o = { .host = "127.0.0.1", .port = port, .connect_deadline_ns = in_ms(2000) };
	struct kt_rconn *c = NULL;

	assert_int_equal(kt_rconn_open(&o, &c, err, sizeof(err)), 0);
	return c;
}

static struct kt_rconn *open_opts(struct kt_rconn_opts *o)
{
	struct kt_rconn *c = NULL;
	int r;

	o->connect_deadline_ns = o->connect_deadline_ns ? o->connect_deadline_ns : in_ms(2000);
	r = kt_rconn_open(o, &c, err, sizeof(err));
	if (r)
		print_error("kt_rconn_open = %d: %s\n", r, err);
	assert_int_equal(r, 0);
	return c;
}

static void cmd(struct kt_rconn *c, struct rec *r, uint64_t deadline, int argc, ...)
{
	const char *argv[16];
	va_list ap;

	assert_true(argc <= 16);
	va_start(ap, argc);
	for (int i = 0; i < argc; i++)
		argv[i] = va_arg(ap, const char *);
	va_end(ap);
	assert_int_equal(kt_rconn_command_argv(c, argc, argv, NULL, rec_cb, r, deadline), 0);
}

/* Sends PING on a fresh loop and returns the result record. */
static void ping_once(struct kt_rconn *c, struct rec *r, int limit_ms)
{
	struct loop l;
	struct until_n u = { r, 1 };

	memset(r, 0, sizeof(*r));
	loop_init(&l);
	cmd(c, r, in_ms(limit_ms), 1, "PING");
	loop_run(&l, c, all_called, &u, limit_ms + 500);
	loop_fini(&l);
	assert_int_equal(r->called, 1);
}

/* ---- group setup ---- */

static int group_setup(void **state)
{
	(void)state;
	if (rp_start_master(&g_plain, NULL))
		return -1;
	return rt_start_tls_pair(&g_certs, &g_tls, &g_tls_port, &g_mtls, &g_mtls_port);
}

static int group_teardown(void **state)
{
	(void)state;
	rp_stop(&g_plain);
	rt_stop_tls_pair(&g_certs, &g_tls, &g_mtls);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	rp_stop(&g_own); /* SIGCONT first: a stopped server is resumed, then killed */
	g_order = 0;
	return 0;
}

/* ---- plain TCP ---- */

/* Commands queued while still connecting go out once connected, in order. */
static void test_plain_ping_set_get(void **state)
{
	struct rec r[3] = { 0 };
	struct until_n u = { r, 3 };
	struct kt_rconn *c;
	struct loop l;

	(void)state;
	c = open_plain(g_plain.port);
	assert_int_not_equal(kt_rconn_state(c), KT_RCONN_FAILED);
	assert_true(kt_rconn_fd(c) >= 0);
	cmd(c, &r[0], in_ms(2000), 1, "PING");
	cmd(c, &r[1], in_ms(2000), 3, "SET", "rconn:k", "hello");
	cmd(c, &r[2], in_ms(2000), 2, "GET", "rconn:k");
	assert_int_equal(kt_rconn_pending(c), 3);
	loop_init(&l);
	loop_run(&l, c, all_called, &u, 3000);
	assert_int_equal(kt_rconn_state(c), KT_RCONN_READY);
	assert_string_equal(kt_rconn_error(c), "");
	assert_int_equal(r[0].type, REDIS_REPLY_STATUS);
	assert_string_equal(r[0].str, "PONG");
	assert_int_equal(r[1].type, REDIS_REPLY_STATUS);
	assert_string_equal(r[1].str, "OK");
	assert_int_equal(r[2].type, REDIS_REPLY_STRING);
	assert_string_equal(r[2].str, "hello");
	assert_int_equal(kt_rconn_pending(c), 0);
	assert_int_equal(kt_rconn_deadline(c), 0);
	/* idle and ready: only interested in reading */
	assert_int_equal(kt_rconn_events(c), EPOLLIN);
	assert_true(l.max_handle_ns < HANDLE_MAX_NS);
	loop_fini(&l);
	kt_rconn_close(c);
}

/* A batch queued at once is written together and answered in FIFO order;
 * argvlen makes arguments binary-safe. */
static void test_plain_pipeline(void **state)
{
	enum { N = 500 };
	static struct rec r[N + 3];
	struct until_n u = { r, N + 3 };
	const char *argv[3] = { "SET", "rconn:bin", "a\0b" };
	size_t lens[3] = { 3, 9, 3 };
	struct kt_rconn *c;
	struct loop l;

	(void)state;
	memset(r, 0, sizeof(r));
	c = open_plain(g_plain.port);
	loop_init(&l);
	loop_run(&l, c, is_ready, c, 2000);
	assert_int_equal(kt_rconn_state(c), KT_RCONN_READY);
	cmd(c, &r[0], 0, 2, "DEL", "rconn:ctr");
	for (int i = 0; i < N; i++)
		cmd(c, &r[1 + i], in_ms(3000), 2, "INCR", "rconn:ctr");
	assert_int_equal(kt_rconn_command_argv(c, 3, argv, lens, rec_cb, &r[N + 1], 0), 0);
	cmd(c, &r[N + 2], 0, 2, "GET", "rconn:bin");
	assert_true(kt_rconn_events(c) & EPOLLOUT);
	loop_run(&l, c, all_called, &u, 5000);
	assert_int_equal(kt_rconn_state(c), KT_RCONN_READY);
	for (int i = 0; i < N; i++) {
		assert_int_equal(r[1 + i].called, 1);
		assert_int_equal(r[1 + i].type, REDIS_REPLY_INTEGER);
		assert_int_equal(r[1 + i].integer, i + 1);
		assert_int_equal(r[1 + i].order, i + 1);
	}
	assert_int_equal(r[N + 2].type, REDIS_REPLY_STRING);
	assert_int_equal(r[N + 2].len, 3);
	assert_memory_equal(r[N + 2].str, "a\0b", 3);
	assert_true(l.max_handle_ns < HANDLE_MAX_NS);
	loop_fini(&l);
	kt_rconn_close(c);
}

struct eval_check {
	int called;
	bool ok;
};

static void eval_cb(void *data, redisReply *r, const char *e)
{
	struct eval_check *x = data;

	x->called++;
	x->ok = !e && r && r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
		r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 1 &&
		r->element[1]->type == REDIS_REPLY_STRING && strcmp(r->element[1]->str, "two") == 0 &&
		r->element[2]->type == REDIS_REPLY_ARRAY && r->element[2]->elements == 2 &&
		r->element[2]->element[0]->integer == 3 &&
		strcmp(r->element[2]->element[1]->str, "four") == 0;
}

static bool eval_done(void *arg)
{
	struct eval_check *x = arg;

	return x[0].called && x[1].called;
}

/* EVAL returns a nested array; a Redis error is a reply, not a failure. */
static void test_eval_array(void **state)
{
	const char *eval[] = { "EVAL", "return {1, 'two', {3, 'four'}}", "0" };
	struct eval_check x[2] = { 0 };
	struct rec bad = { 0 };
	struct kt_rconn *c;
	struct loop l;

	(void)state;
	c = open_plain(g_plain.port);
	assert_int_equal(kt_rconn_command_argv(c, 3, eval, NULL, eval_cb, &x[0], in_ms(2000)), 0);
	cmd(c, &bad, in_ms(2000), 3, "EVAL", "return redis.error_reply('nope')", "0");
	assert_int_equal(kt_rconn_command_argv(c, 3, eval, NULL, eval_cb, &x[1], in_ms(2000)), 0);
	loop_init(&l);
	loop_run(&l, c, eval_done, x, 3000);
	assert_true(x[0].ok);
	assert_true(x[1].ok);
	assert_int_equal(bad.called, 1);
	assert_int_equal(bad.type, REDIS_REPLY_ERROR);
	assert_non_null(strstr(bad.str, "nope"));
	assert_int_equal(kt_rconn_state(c), KT_RCONN_READY);
	loop_fini(&l);
	kt_rconn_close(c);
}

/* Nothing listens: FAILED with the errno, queued command told why. */
static void test_refused(void **state)
{
	struct rec r = { 0 };
	struct kt_rconn *c;
	struct loop l;
	int port = rp_free_port();

	(void)state;
	c = open_plain(port);
	if (kt_rconn_state(c) != KT_RCONN_FAILED) {
		cmd(c, &r, in_ms(1000), 1, "PING");
		loop_init(&l);
		loop_run(&l, c, NULL, NULL, 2000);
		loop_fini(&l);
		assert_int_equal(r.called, 1);
		assert_non_null(strstr(r.err, "refused"));
	}
	assert_int_equal(kt_rconn_state(c), KT_RCONN_FAILED);
	assert_int_equal(kt_rconn_handle(c, 0, kt_clock_ns()), -ECONNREFUSED);
	print_message("    error: %s\n", kt_rconn_error(c));
	assert_non_null(strstr(kt_rconn_error(c), "connect to 127.0.0.1:"));
	assert_non_null(strstr(kt_rconn_error(c), "Connection refused"));
	assert_int_equal(kt_rconn_fd(c), -1);
	assert_int_equal(kt_rconn_events(c), 0);
	assert_int_equal(kt_rconn_deadline(c), 0);
	/* a FAILED conn refuses new commands without calling back */
	assert_int_equal(kt_rconn_command_argv(c, 1, (const char *[]){ "PING" }, NULL, rec_cb, &r, 0),
			 -ENOTCONN);
	kt_rconn_close(c);
}

/* The server drops the connection while a command waits: it fails. */
static void test_server_closes(void **state)
{
	struct rec ping = { 0 }, blpop = { 0 };
	struct kt_rconn *c;
	redisReply *kill;
	struct loop l;

	(void)state;
	c = open_plain(g_plain.port);
	ping_once(c, &ping, 2000);
	assert_string_equal(ping.str, "PONG");
	cmd(c, &blpop, 0, 3, "BLPOP", "rconn:never", "0");
	loop_init(&l);
	while (kt_rconn_events(c) & EPOLLOUT)
		loop_turn(&l, c, 50);
	loop_turn(&l, c, 50); /* let the server take the BLPOP */
	assert_int_equal(blpop.called, 0);
	kill = rp_command(&g_plain, "CLIENT KILL TYPE normal SKIPME yes");
	assert_non_null(kill);
	freeReplyObject(kill);
	loop_run(&l, c, NULL, NULL, 2000);
	loop_fini(&l);
	assert_int_equal(blpop.called, 1);
	print_message("    error: %s\n", blpop.err);
	assert_non_null(strstr(blpop.err, "connection closed by 127.0.0.1:"));
	assert_int_equal(kt_rconn_state(c), KT_RCONN_FAILED);
	kt_rconn_close(c);
}

static void close_in_cb(void *data, redisReply *r, const char *e)
{
	struct kt_rconn **c = data;

	(void)r;
	(void)e;
	kt_rconn_close(*c);
	*c = NULL;
}

/* close() fails what is pending with "closed", also when called from a
 * callback in the middle of a pipeline. */
static void test_close_fails_pending(void **state)
{
	struct rec r[2] = { 0 }, after = { 0 };
	struct kt_rconn *c, *cc;
	struct loop l;

	(void)state;
	c = open_plain(g_plain.port);
	cmd(c, &r[0], 0, 1, "PING");
	cmd(c, &r[1], 0, 1, "PING");
	kt_rconn_close(c);
	assert_int_equal(r[0].called, 1);
	assert_int_equal(r[1].called, 1);
	assert_string_equal(r[0].err, "closed");
	assert_true(r[0].order < r[1].order);

	cc = open_plain(g_plain.port);
	assert_int_equal(kt_rconn_command_argv(cc, 1, (const char *[]){ "PING" }, NULL, close_in_cb,
					       &cc, 0), 0);
	cmd(cc, &after, 0, 1, "PING");
	loop_init(&l);
	while (cc && !after.called)
		loop_turn(&l, cc, 50);
	loop_fini(&l);
	assert_null(cc);
	assert_int_equal(after.called, 1);
	assert_string_equal(after.err, "closed");
}

/* ---- deadlines ---- */

static bool rec_called(void *arg)
{
	return ((struct rec *)arg)->called;
}

/* A SIGSTOPped server accepts bytes (the kernel does) but never answers: the
 * command fails by its deadline, every pending one with it, and no handle()
 * call blocks. */
static void test_deadline_stopped_server(void **state)
{
	struct rec ping = { 0 }, get = { 0 }, later = { 0 };
	struct kt_rconn *c;
	struct loop l;
	uint64_t deadline;

	(void)state;
	assert_int_equal(rp_start_master(&g_own, NULL), 0);
	c = open_plain(g_own.port);
	ping_once(c, &ping, 2000);
	assert_string_equal(ping.str, "PONG");
	assert_int_equal(rp_signal(&g_own, SIGSTOP), 0);

	deadline = in_ms(300);
	cmd(c, &get, deadline, 2, "GET", "rconn:k");
	cmd(c, &later, in_ms(5000), 1, "PING");
	assert_int_equal(kt_rconn_deadline(c), deadline);
	loop_init(&l);
	loop_run(&l, c, rec_called, &get, 3000);
	print_message("    failed %.1f ms after the deadline, longest handle() %.3f ms (%d calls): %s\n",
		      ((double)get.at_ns - (double)deadline) / 1e6, (double)l.max_handle_ns / 1e6,
		      l.handles, get.err);
	assert_int_equal(get.called, 1);
	assert_true(get.at_ns >= deadline);
	assert_true(get.at_ns - deadline < 50 * MS);
	assert_non_null(strstr(get.err, "timed out"));
	assert_int_equal(later.called, 1);
	assert_string_equal(later.err, get.err);
	assert_int_equal(kt_rconn_state(c), KT_RCONN_FAILED);
	assert_int_equal(kt_rconn_handle(c, 0, kt_clock_ns()), -ETIMEDOUT);
	assert_true(l.max_handle_ns < HANDLE_MAX_NS);
	loop_fini(&l);
	kt_rconn_close(c);
	rp_signal(&g_own, SIGCONT);
}

/* A listener that never speaks TLS: connect succeeds (backlog), the
 * handshake does not, and the connect deadline ends it. */
static void test_handshake_deadline(void **state)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	struct kt_rconn_opts o = { .host = "127.0.0.1", .tls = true, .ca_file = g_certs.ca };
	struct rec r = { 0 };
	struct kt_rconn *c;
	struct loop l;
	uint64_t t0;
	int lfd;

	(void)state;
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(lfd >= 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, 4), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&sa, &len), 0);
	o.port = ntohs(sa.sin_port);
	t0 = kt_clock_ns();
	o.connect_deadline_ns = t0 + 200 * MS;
	c = open_opts(&o);
	cmd(c, &r, 0, 1, "PING");
	loop_init(&l);
	loop_run(&l, c, NULL, NULL, 2000);
	loop_fini(&l);
	print_message("    error: %s\n", kt_rconn_error(c));
	assert_int_equal(kt_rconn_state(c), KT_RCONN_FAILED);
	assert_int_equal(r.called, 1);
	assert_true(r.at_ns - o.connect_deadline_ns < 50 * MS);
	assert_non_null(strstr(r.err, "TLS handshake with 127.0.0.1:"));
	assert_non_null(strstr(r.err, "timed out"));
	kt_rconn_close(c);
	close(lfd);
}

/* ---- TLS ---- */

static struct kt_rconn *open_tls(int port, const char *ca, const char *name, bool insecure, bool client_cert)
{
	struct kt_rconn_opts o = {
		.host = "127.0.0.1", .port = port, .tls = true, .ca_file = ca, .server_name = name,
		.insecure_skip_verify = insecure,
		.cert_file = client_cert ? g_certs.client_crt : NULL,
		.key_file = client_cert ? g_certs.client_key : NULL,
	};

	return open_opts(&o);
}

static void expect_pong(struct kt_rconn *c)
{
	struct rec r;

	ping_once(c, &r, 2000);
	if (r.err[0])
		print_error("PING failed: %s\n", r.err);
	assert_string_equal(r.err, "");
	assert_string_equal(r.str, "PONG");
	assert_int_equal(kt_rconn_state(c), KT_RCONN_READY);
}

/* Returns the failure text of the first PING. */
static const char *expect_fail(struct kt_rconn *c)
{
	static struct rec r;

	ping_once(c, &r, 2000);
	assert_int_equal(kt_rconn_state(c), KT_RCONN_FAILED);
	assert_string_not_equal(r.err, "");
	assert_string_equal(r.err, kt_rconn_error(c));
	print_message("    error: %s\n", r.err);
	return r.err;
}

static void test_tls_good_ca(void **state)
{
	struct kt_rconn *c;

	(void)state;
	c = open_tls(g_tls_port, g_certs.ca, NULL, false, false);
	expect_pong(c);
	kt_rconn_close(c);
	/* DNS SAN: server_name localhost on an IP connection */
	c = open_tls(g_tls_port, g_certs.ca, "localhost", false, false);
	expect_pong(c);
	kt_rconn_close(c);
}

/* host "localhost" resolves (maybe ::1 first, refused: next address, new fd);
 * SNI and the verified name default to it. */
static void test_tls_hostname(void **state)
{
	struct kt_rconn_opts o = { .host = "localhost", .port = g_tls_port, .tls = true, .ca_file = g_certs.ca };
	struct kt_rconn *c;

	(void)state;
	c = open_opts(&o);
	expect_pong(c);
	kt_rconn_close(c);
}

/* Megabytes both ways: partial TLS writes and multi-record reads. */
static void test_tls_large_values(void **state)
{
	enum { SZ = 3 * 1024 * 1024 };
	const char *argv[3] = { "SET", "rconn:big", NULL };
	size_t lens[3] = { 3, 9, SZ };
	struct rec set = { 0 }, get = { 0 }, len = { 0 };
	struct kt_rconn *c;
	struct loop l;
	char *big = malloc(SZ);

	(void)state;
	assert_non_null(big);
	for (size_t i = 0; i < SZ; i++)
		big[i] = (char)('a' + i % 26);
	argv[2] = big;
	c = open_tls(g_tls_port, g_certs.ca, NULL, false, false);
	assert_int_equal(kt_rconn_command_argv(c, 3, argv, lens, rec_cb, &set, in_ms(5000)), 0);
	cmd(c, &get, in_ms(5000), 4, "GETRANGE", "rconn:big", "2999990", "2999999");
	cmd(c, &len, in_ms(5000), 2, "STRLEN", "rconn:big");
	free(big);
	loop_init(&l);
	loop_run(&l, c, rec_called, &len, 6000);
	loop_fini(&l);
	assert_string_equal(set.str, "OK");
	assert_int_equal(len.type, REDIS_REPLY_INTEGER);
	assert_int_equal(len.integer, SZ);
	assert_int_equal(get.type, REDIS_REPLY_STRING);
	assert_int_equal(get.len, 10);
	for (int i = 0; i < 10; i++)
		assert_int_equal(get.str[i], 'a' + (2999990 + i) % 26);
	kt_rconn_close(c);
}

static void test_tls_wrong_ca(void **state)
{
	struct kt_rconn *c;
	const char *e;

	(void)state;
	c = open_tls(g_tls_port, g_certs.other_ca, NULL, false, false);
	e = expect_fail(c);
	assert_non_null(strstr(e, "TLS handshake with 127.0.0.1:"));
	assert_non_null(strstr(e, "certificate verify failed"));
	/* Redis sends its CA along (auto chain), so OpenSSL names that one */
	assert_non_null(strstr(e, "certificate verify failed ("));
	assert_int_equal(kt_rconn_handle(c, 0, kt_clock_ns()), -EPROTO);
	kt_rconn_close(c);
}

static void test_tls_insecure_wrong_ca(void **state)
{
	struct kt_rconn *c;

	(void)state;
	c = open_tls(g_tls_port, g_certs.other_ca, "wrong.example", true, false);
	expect_pong(c);
	kt_rconn_close(c);
}

static void test_tls_name_mismatch(void **state)
{
	struct kt_rconn *c;
	const char *e;

	(void)state;
	c = open_tls(g_tls_port, g_certs.ca, "wrong.example", false, false);
	e = expect_fail(c);
	assert_non_null(strstr(e, "certificate verify failed"));
	assert_non_null(strstr(e, "hostname mismatch"));
	kt_rconn_close(c);
	/* an IP literal is checked against IP SANs */
	c = open_tls(g_tls_port, g_certs.ca, "127.0.0.2", false, false);
	e = expect_fail(c);
	assert_non_null(strstr(e, "IP address mismatch"));
	kt_rconn_close(c);
}

static void test_mtls_with_cert(void **state)
{
	struct kt_rconn *c;

	(void)state;
	c = open_tls(g_mtls_port, g_certs.ca, NULL, false, true);
	expect_pong(c);
	kt_rconn_close(c);
}

/* TLS 1.3: the client finishes its handshake before the server checks the
 * (missing) certificate, so the refusal arrives as an alert on first read. */
static void test_mtls_without_cert(void **state)
{
	struct kt_rconn *c;
	const char *e;

	(void)state;
	c = open_tls(g_mtls_port, g_certs.ca, NULL, false, false);
	e = expect_fail(c);
	assert_non_null(strstr(e, "127.0.0.1:"));
	assert_non_null(strstr(e, "certificate required"));
	kt_rconn_close(c);
}

static void test_bad_options(void **state)
{
	struct kt_rconn_opts o = { .host = "127.0.0.1", .port = 0 };
	struct kt_rconn *c = NULL;

	(void)state;
	assert_int_equal(kt_rconn_open(&o, &c, err, sizeof(err)), -EINVAL);
	o.port = 6379;
	o.tls = true;
	o.cert_file = g_certs.client_crt;
	assert_int_equal(kt_rconn_open(&o, &c, err, sizeof(err)), -EINVAL);
	o.cert_file = NULL;
	o.ca_file = "/nonexistent/ca.pem";
	assert_int_equal(kt_rconn_open(&o, &c, err, sizeof(err)), -EIO);
	print_message("    error: %s\n", err);
	assert_non_null(strstr(err, "cannot open /nonexistent/ca.pem: No such file or directory"));
	o.ca_file = g_certs.ca;
	o.cert_file = g_certs.client_crt;
	o.key_file = g_certs.server_key;
	assert_int_equal(kt_rconn_open(&o, &c, err, sizeof(err)), -EIO);
	print_message("    error: %s\n", err);
	assert_non_null(strstr(err, "mismatch"));
	o.key_file = g_certs.client_key;
	o.ca_file = g_certs.client_key; /* not a certificate */
	assert_int_equal(kt_rconn_open(&o, &c, err, sizeof(err)), -EIO);
	print_message("    error: %s\n", err);
	assert_non_null(strstr(err, "cannot load CA file"));
	assert_null(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_plain_ping_set_get, teardown),
		cmocka_unit_test_teardown(test_plain_pipeline, teardown),
		cmocka_unit_test_teardown(test_eval_array, teardown),
		cmocka_unit_test_teardown(test_refused, teardown),
		cmocka_unit_test_teardown(test_server_closes, teardown),
		cmocka_unit_test_teardown(test_close_fails_pending, teardown),
		cmocka_unit_test_teardown(test_deadline_stopped_server, teardown),
		cmocka_unit_test_teardown(test_handshake_deadline, teardown),
		cmocka_unit_test_teardown(test_tls_good_ca, teardown),
		cmocka_unit_test_teardown(test_tls_hostname, teardown),
		cmocka_unit_test_teardown(test_tls_large_values, teardown),
		cmocka_unit_test_teardown(test_tls_wrong_ca, teardown),
		cmocka_unit_test_teardown(test_tls_insecure_wrong_ca, teardown),
		cmocka_unit_test_teardown(test_tls_name_mismatch, teardown),
		cmocka_unit_test_teardown(test_mtls_with_cert, teardown),
		cmocka_unit_test_teardown(test_mtls_without_cert, teardown),
		cmocka_unit_test_teardown(test_bad_options, teardown),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
