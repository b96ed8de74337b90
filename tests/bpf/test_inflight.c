// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* In-flight limits (unit concurrent) in the kernel, with real sockets:
 * connects admitted while fewer than the share are open, refused at once
 * past it, and every way a socket ends giving its slot back exactly once
 * (close, a reset, a refused or timed-out connect, the process killed).
 * The plan is applied as the daemon applies it (kt_plan_apply), so the
 * links (connect, sockops, sock_release) and buckets are the real ones. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include <bpf/bpf.h>

#include "kernel/apply.h"
#include "kernel/bpf_loader.h"
#include "kernel/inflight_audit.h"
#include "kt_bpffx.h"
#include "kt_kprobe.h"
#include "kt_procfx.h"
#include "ktest.h"
#include "members/resolve.h"
#include "pool/policy.h"

#define MAX_FDS 64 /* a worker's sockets */

struct fx {
	char pin[PATH_MAX];
	struct kt_bpf b;
	bool opened;
	struct kt_plan plan;
	struct kt_limit_cfg cfg;
	struct kt_procfx pf; /* cgroups, workers, pipes */
};
_Static_assert(offsetof(struct fx, pin) == 0, "kt_bpffx_setup fills the pin first");

static int fx_setup(void **state)
{
	return kt_bpffx_setup(state, sizeof(struct fx), "inflight");
}

static int fx_teardown(void **state)
{
	struct fx *f = *state;

	kt_bpffx_close(&f->b, f->pin, f->opened);
	kt_procfx_end(&f->pf);
	kt_plan_free(&f->plan);
	free(f);
	return 0;
}

static struct fx *fx_open(void **state)
{
	struct fx *f = *state;

	KTEST_SKIP_UNLESS_ROOT();
	kt_bpffx_open(&f->b, f->pin, &f->opened);
	return f;
}

/* A TCP listener on 127.0.0.1 (backlog 128: connects complete unaccepted). */
static int listen_tcp(struct fx *f, uint16_t *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(a);
	int fd = kt_procfx_fd(&f->pf, socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));

	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 128), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &sl), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

/* A port nothing listens on (bound, so no one else takes it meanwhile). */
static uint16_t closed_port(struct fx *f)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(a);
	int fd = kt_procfx_fd(&f->pf, socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));

	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &sl), 0);
	return ntohs(a.sin_port);
}

/* One in-flight limit on 127.0.0.0/8 (and 10.99.0.0/16, the blackhole of
 * test_timeout) with `slots` for the pool, members `cgs`; applied as the
 * daemon does, the policy through kt_slots_policy. */
static void apply_limit(struct fx *f, enum kt_scope scope, double slots, const char *const *cgs,
			int n)
{
	struct kt_limit_cfg *c = &f->cfg;
	struct kt_limit_rt *l;
	struct kt_bucket_policy pol = { 0 };
	char err[512];

	kt_plan_free(&f->plan);
	memset(c, 0, sizeof(*c));
	snprintf(c->name, sizeof(c->name), "inflight");
	c->unit = KT_UNIT_CONCURRENT;
	c->scope = scope;
	c->match.n_cidrs = 2;
	c->match.cidrs[0].addr[10] = c->match.cidrs[0].addr[11] = 0xff;
	c->match.cidrs[0].addr[12] = 127;
	c->match.cidrs[0].prefixlen = 96 + 8;
	c->match.cidrs[1].addr[10] = c->match.cidrs[1].addr[11] = 0xff;
	c->match.cidrs[1].addr[12] = 10;
	c->match.cidrs[1].addr[13] = 99;
	c->match.cidrs[1].prefixlen = 96 + 16;
	c->match.port_lo = 0;
	c->match.port_hi = 65535;
	c->match.proto_mask = KT_PROTO_TCP | KT_PROTO_UDP;
	c->rl.max = c->rl.min = slots;
	c->refuse_errno = EBUSY;
	c->allow_raw_sockets = true;
	f->plan.limits = calloc(1, sizeof(*f->plan.limits));
	assert_non_null(f->plan.limits);
	f->plan.n_limits = 1;
	l = &f->plan.limits[0];
	l->cfg = c;
	l->members = calloc((size_t)n, sizeof(*l->members));
	assert_non_null(l->members);
	for (int j = 0; j < n; j++) {
		l->members[j].path = strdup(cgs[j]);
		l->members[j].cgid = ktest_cgroup_id(cgs[j]);
		assert_true(l->members[j].cgid != 0);
		l->n_members++;
	}
	/* the pool's share: pod scope one member's (equal), node scope all */
	pol.rate = scope == KT_SCOPE_POD ? slots / n : slots;
	pol.burst = 1;
	pol.node_rate = slots;
	pol.node_burst = 1;
	kt_slots_policy(&pol, scope == KT_SCOPE_POD);
	if (kt_plan_apply(&f->b, &f->plan, &pol, err, sizeof(err)) != 0) {
		print_error("kt_plan_apply: %s\n", err);
		fail();
	}
}

static struct kt_inflight inflight(struct fx *f, uint32_t slot)
{
	struct kt_inflight v;

	assert_int_equal(kt_bpf_read_inflight(&f->b, slot, &v), 0);
	return v;
}

static uint64_t open_of(struct fx *f, uint32_t slot)
{
	return inflight(f, slot).open;
}

/* Waits up to `ms` for slot's open count to be `want`; the ms it took, or
 * fails showing the count. */
static int wait_open(struct fx *f, uint32_t slot, uint64_t want, int ms, const char *what)
{
	uint64_t t0 = ktest_now_ns();

	for (;;) {
		uint64_t n = open_of(f, slot);
		int took = (int)((ktest_now_ns() - t0) / 1000000);

		if (n == want)
			return took;
		if (took > ms) {
			print_error("%s: %llu open after %d ms, want %llu\n", what, (unsigned long long)n,
				    took, (unsigned long long)want);
			fail();
		}
		usleep(1000);
	}
}

/* ---- a worker in a member cgroup, driven over a pipe ---- */

enum {
	W_TCP = 'T',
	W_TCP_NB = 'N',
	W_UDP = 'U',
	W_AGAIN = 'A',
	W_CLOSE = 'C',
	W_ABORT = 'X', /* close with a reset (SO_LINGER 0): the socket is gone at once */
	W_BLACKHOLE = 'B'
};

struct wcmd {
	char op;
	uint16_t port;
};

struct worker {
	pid_t pid;
	int cmd, res;
};

/* The child: keeps every socket it opens until told to close it (oldest
 * first) or killed; answers each command with an errno (0: ok). */
/* Where a worker runs: the test's network namespace, one of its own with a
 * blackhole (10.99.0.5 answers nothing), or one with only lo (10.99.0.5
 * has no route). */
enum wnet { NET_HOST = 0, NET_BLACKHOLE = 1, NET_NOROUTE = 2 };

static void worker_main(int in, int out, enum wnet net)
{
	int fds[MAX_FDS], n = 0, first = 0;
	struct wcmd c;

	if (net == NET_NOROUTE && (unshare(CLONE_NEWNET) != 0 || system("ip link set lo up") != 0))
		_exit(3);
	if (net == NET_BLACKHOLE) {
		/* a blackhole: 10.99.0.5 routes out of a veth whose peer has
		 * no address, so SYNs vanish without an answer */
		if (unshare(CLONE_NEWNET) != 0 ||
		    system("ip link set lo up && ip link add kva type veth peer name kvb && "
			   "ip addr add 10.99.0.1/24 dev kva && ip link set kva up && ip link set kvb up && "
			   "ip neigh add 10.99.0.5 lladdr 02:00:00:00:00:05 dev kva nud permanent") != 0)
			_exit(3);
	}
	while (read(in, &c, sizeof(c)) == sizeof(c)) {
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(c.port),
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		int err = 0, fd;

		switch (c.op) {
		case W_ABORT:
			if (first < n) {
				struct linger lg = { .l_onoff = 1, .l_linger = 0 };

				setsockopt(fds[first], SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
			}
			/* fall through */
		case W_CLOSE:
			if (first < n)
				close(fds[first++]);
			break;
		case W_AGAIN:
			err = n > first && connect(fds[n - 1], (struct sockaddr *)&a, sizeof(a)) < 0 ? errno
												    : 0;
			break;
		default:
			if (n == MAX_FDS)
				_exit(4);
			fd = socket(AF_INET,
				    (c.op == W_UDP ? SOCK_DGRAM : SOCK_STREAM) |
					    (c.op == W_TCP_NB ? SOCK_NONBLOCK : 0),
				    0);
			if (fd < 0)
				_exit(5);
			if (c.op == W_BLACKHOLE) {
				int ms = 300;

				a.sin_addr.s_addr = inet_addr("10.99.0.5");
				setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof(ms));
			}
			err = connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ? errno : 0;
			fds[n++] = fd; /* kept whatever the outcome: only close gives back */
			break;
		}
		if (write(out, &err, sizeof(err)) != sizeof(err))
			_exit(2);
	}
	_exit(0);
}

static void worker_start(struct fx *f, const char *cg, enum wnet net, struct worker *w)
{
	int c[2], r[2];

	assert_int_equal(pipe2(c, O_CLOEXEC), 0);
	assert_int_equal(pipe2(r, O_CLOEXEC), 0);
	w->pid = fork();
	assert_true(w->pid >= 0);
	if (w->pid == 0) {
		if (ktest_cgroup_join(cg) != 0)
			_exit(1);
		worker_main(c[0], r[1], net);
	}
	close(c[0]);
	close(r[1]);
	w->cmd = kt_procfx_fd(&f->pf, c[1]);
	w->res = kt_procfx_fd(&f->pf, r[0]);
	kt_procfx_kid(&f->pf, w->pid);
}

/* One command; its errno. Refusals must be immediate: within 50 ms. */
static int wdo(struct worker *w, char op, uint16_t port)
{
	struct wcmd c = { .op = op, .port = port };
	struct pollfd pf = { .fd = w->res, .events = POLLIN };
	uint64_t t0 = ktest_now_ns();
	int err;

	assert_int_equal(write(w->cmd, &c, sizeof(c)), sizeof(c));
	if (poll(&pf, 1, 10000) != 1) {
		print_error("worker %d: no answer to %c after 10 s\n", w->pid, op);
		fail();
	}
	if (read(w->res, &err, sizeof(err)) != sizeof(err)) {
		print_error("worker %d died at %c\n", w->pid, op);
		fail();
	}
	if (err == EBUSY && ktest_now_ns() - t0 > 50 * 1000000ULL) {
		print_error("worker %d: %c refused after %llu ms, not at once\n", w->pid, op,
			    (unsigned long long)((ktest_now_ns() - t0) / 1000000));
		fail();
	}
	return err;
}

static void worker_kill(struct fx *f, struct worker *w)
{
	kill(w->pid, SIGKILL);
	assert_int_equal(waitpid(w->pid, NULL, 0), w->pid);
	kt_procfx_reaped(&f->pf, w->pid);
}

static uint32_t member_slot(struct fx *f, int j)
{
	return f->plan.limits[0].members[j].slot;
}

/* A listener (its port in *port), one in-flight limit of `slots` on
 * cgroup cg alone (node scope) and a worker in cg; the limit's bucket slot. */
static uint32_t one_member(struct fx *f, const char *cg, double slots, uint16_t *port,
			   struct worker *w)
{
	listen_tcp(f, port);
	apply_limit(f, KT_SCOPE_NODE, slots, &cg, 1);
	worker_start(f, cg, NET_HOST, w);
	return member_slot(f, 0);
}

/* fx_open for the audit's tests: skipped where the kernel refuses its
 * programs (the daemon runs without it there). The other tests need no
 * audit: their counts are the kernel programs' alone. */
static struct fx *audit_fx_open(void **state)
{
	KTEST_SKIP_UNLESS_ROOT();
	KTEST_SKIP_IF(kt_kprobe_audit());
	return fx_open(state);
}

/* The audit's programs on this test's pins. */
static void audit_open(struct fx *f, struct kt_inflight_audit *a)
{
	char err[256];

	if (kt_inflight_audit_open(a, f->pin, err, sizeof(err)) != 0) {
		print_error("%s\n", err);
		fail();
	}
}

/* ---- tests ---- */

/* The share's slots and no more, refused at once past it; a close frees
 * one; a connect repeated on a socket takes nothing more; the counters
 * count admissions and refusals. */
static void test_slots(void **state)
{
	struct fx *f = fx_open(state);
	const char *cg = kt_procfx_cgroup(&f->pf, "inflight");
	struct worker w;
	uint16_t port;
	uint32_t slot;

	slot = one_member(f, cg, 3, &port, &w);
	for (int i = 0; i < 3; i++)
		assert_int_equal(wdo(&w, W_TCP, port), 0);
	assert_int_equal(open_of(f, slot), 3);
	assert_int_equal(wdo(&w, W_TCP, port), EBUSY);
	assert_int_equal(wdo(&w, W_TCP_NB, port), EBUSY);
	assert_int_equal(open_of(f, slot), 3);
	/* the refused sockets hold nothing: closing them gives nothing back */
	assert_int_equal(wdo(&w, W_AGAIN, port), EBUSY);
	/* the oldest (admitted) one closed: one slot free, taken again */
	assert_int_equal(wdo(&w, W_CLOSE, 0), 0);
	assert_int_equal(open_of(f, slot), 2);
	assert_int_equal(wdo(&w, W_TCP, port), 0);
	assert_int_equal(open_of(f, slot), 3);
	/* connect() again on that connected socket: EISCONN, nothing taken */
	assert_int_equal(wdo(&w, W_AGAIN, port), EISCONN);
	assert_int_equal(open_of(f, slot), 3);
	assert_int_equal(inflight(f, slot).peak, 3);

	struct kt_counters c;

	assert_int_equal(kt_bpf_read_counters(&f->b, slot, &c), 0);
	assert_int_equal(c.admitted, 4);
	assert_int_equal(c.throttled, 3);

	/* everything closed: the count returns to 0 */
	for (int i = 0; i < 6; i++)
		wdo(&w, W_CLOSE, 0);
	wait_open(f, slot, 0, 1000, "all closed");
}

/* kill -9 of a process holding connections: their slots come back as the
 * kernel closes its sockets. */
static void test_killed_holder(void **state)
{
	struct fx *f = fx_open(state);
	const char *cg = kt_procfx_cgroup(&f->pf, "inflight-kill");
	struct worker w, w2;
	uint16_t port;
	uint32_t slot;
	uint64_t t0;
	int ms;

	slot = one_member(f, cg, 5, &port, &w);
	for (int i = 0; i < 5; i++)
		assert_int_equal(wdo(&w, W_TCP, port), 0);
	assert_int_equal(wdo(&w, W_TCP, port), EBUSY);
	t0 = ktest_now_ns();
	worker_kill(f, &w);
	ms = wait_open(f, slot, 0, 1000, "after kill -9");
	print_message("slots back %d ms after kill -9 (%.1f ms after the kill was sent)\n", ms,
		      (double)(ktest_now_ns() - t0) / 1e6);
	/* and usable again by another process */
	worker_start(f, cg, NET_HOST, &w2);
	for (int i = 0; i < 5; i++)
		assert_int_equal(wdo(&w2, W_TCP, port), 0);
	assert_int_equal(wdo(&w2, W_TCP, port), EBUSY);
}

/* Connects that never complete hold nothing once they failed, while the
 * application still holds the socket: refused by the peer (RST), reset
 * after the handshake, timed out against a blackhole. */
static void test_failed_connects(void **state)
{
	struct fx *f = fx_open(state);
	const char *cg = kt_procfx_cgroup(&f->pf, "inflight-fail");
	struct worker w, wb;
	uint16_t port, nobody = closed_port(f);
	int lfd, afd;
	uint32_t slot;

	lfd = listen_tcp(f, &port);
	apply_limit(f, KT_SCOPE_NODE, 2, &cg, 1);
	slot = member_slot(f, 0);
	worker_start(f, cg, NET_HOST, &w);

	/* refused: ECONNREFUSED, the slot is back before connect returns */
	for (int i = 0; i < 4; i++)
		assert_int_equal(wdo(&w, W_TCP, nobody), ECONNREFUSED);
	assert_int_equal(open_of(f, slot), 0);
	/* non-blocking, refused later */
	assert_int_equal(wdo(&w, W_TCP_NB, nobody), EINPROGRESS);
	wait_open(f, slot, 0, 1000, "non-blocking refused");

	/* reset by the server after the handshake */
	assert_int_equal(wdo(&w, W_TCP, port), 0);
	assert_int_equal(open_of(f, slot), 1);
	afd = accept(lfd, NULL, NULL);
	assert_true(afd >= 0);
	{
		struct linger lg = { .l_onoff = 1, .l_linger = 0 };

		assert_int_equal(setsockopt(afd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
		close(afd); /* RST */
	}
	wait_open(f, slot, 0, 1000, "reset by the peer");

	/* timed out: no answer at all (TCP_USER_TIMEOUT 300 ms) */
	worker_start(f, cg, NET_BLACKHOLE, &wb);
	assert_int_equal(wdo(&wb, W_BLACKHOLE, 80), ETIMEDOUT);
	assert_int_equal(open_of(f, slot), 0);
	/* closing all those sockets now gives back nothing twice */
	for (int i = 0; i < 7; i++)
		wdo(&w, W_CLOSE, 0);
	wdo(&wb, W_CLOSE, 0);
	assert_int_equal(open_of(f, slot), 0);
	/* the share is whole again */
	assert_int_equal(wdo(&w, W_TCP, port), 0);
	assert_int_equal(wdo(&w, W_TCP, port), 0);
	assert_int_equal(wdo(&w, W_TCP, port), EBUSY);
}

/* Connected UDP: a socket holds a slot from connect() to close; connecting
 * it anew (another destination) takes nothing more. */
static void test_udp(void **state)
{
	struct fx *f = fx_open(state);
	const char *cg = kt_procfx_cgroup(&f->pf, "inflight-udp");
	struct worker w;
	uint32_t slot;

	apply_limit(f, KT_SCOPE_NODE, 2, &cg, 1);
	slot = member_slot(f, 0);
	worker_start(f, cg, NET_HOST, &w);
	assert_int_equal(wdo(&w, W_UDP, 9), 0);
	assert_int_equal(wdo(&w, W_UDP, 9), 0);
	assert_int_equal(wdo(&w, W_UDP, 9), EBUSY);
	assert_int_equal(open_of(f, slot), 2);
	assert_int_equal(wdo(&w, W_CLOSE, 0), 0);
	assert_int_equal(wdo(&w, W_CLOSE, 0), 0);
	assert_int_equal(open_of(f, slot), 0);
	assert_int_equal(wdo(&w, W_UDP, 9), 0);
	assert_int_equal(wdo(&w, W_AGAIN, 10), 0);
	assert_int_equal(open_of(f, slot), 1);
}

/* Pod scope: each member's share rounds up (2 of 3 for two members), the
 * node bucket they are chained to holds the node's 3 exactly. */
static void test_pod_members_share_node(void **state)
{
	struct fx *f = fx_open(state);
	const char *cgs[2] = { kt_procfx_cgroup(&f->pf, "inflight-a"), kt_procfx_cgroup(&f->pf, "inflight-b") };
	struct worker wa, wb;
	uint16_t port;
	uint32_t node;

	listen_tcp(f, &port);
	apply_limit(f, KT_SCOPE_POD, 3, cgs, 2);
	assert_true(f->plan.limits[0].has_pool);
	node = f->plan.limits[0].pool_slot;
	worker_start(f, cgs[0], NET_HOST, &wa);
	worker_start(f, cgs[1], NET_HOST, &wb);
	assert_int_equal(wdo(&wa, W_TCP, port), 0);
	assert_int_equal(wdo(&wa, W_TCP, port), 0);
	assert_int_equal(wdo(&wa, W_TCP, port), EBUSY); /* its own 2 */
	assert_int_equal(wdo(&wb, W_TCP, port), 0);
	assert_int_equal(wdo(&wb, W_TCP, port), EBUSY); /* the node's 3 */
	assert_int_equal(open_of(f, node), 3);
	assert_int_equal(open_of(f, member_slot(f, 0)), 2);
	assert_int_equal(open_of(f, member_slot(f, 1)), 1);
	/* b's refusal by the node gave its own slot back */
	worker_kill(f, &wa);
	wait_open(f, node, 1, 1000, "a killed");
	assert_int_equal(open_of(f, member_slot(f, 0)), 0);
	assert_int_equal(wdo(&wb, W_TCP, port), 0);
	assert_int_equal(wdo(&wb, W_TCP, port), EBUSY); /* its own 2 now */
}

/* The lease: past valid_until the fallback's slots, past fallback_until
 * none; open sockets are never touched, only new connects refused. */
static void test_lease_phases(void **state)
{
	struct fx *f = fx_open(state);
	const char *cg = kt_procfx_cgroup(&f->pf, "inflight-lease");
	struct kt_bucket *b;
	struct worker w;
	uint16_t port;
	uint32_t slot;
	uint64_t now;

	listen_tcp(f, &port);
	apply_limit(f, KT_SCOPE_NODE, 4, &cg, 1);
	slot = member_slot(f, 0);
	b = kt_bpf_bucket(&f->b, slot);
	worker_start(f, cg, NET_HOST, &w);
	assert_int_equal(wdo(&w, W_TCP, port), 0);
	/* lapsed: fallback of 2 slots */
	now = kt_clock_ns();
	__atomic_store_n(&b->fallback_fp, KT_FP_ONE, __ATOMIC_RELAXED);
	__atomic_store_n(&b->fallback_burst, 2, __ATOMIC_RELAXED);
	__atomic_store_n(&b->fallback_until, now + 60ULL * 1000000000ULL, __ATOMIC_RELAXED);
	__atomic_store_n(&b->valid_until, now - 1, __ATOMIC_RELEASE);
	assert_int_equal(wdo(&w, W_TCP, port), 0);
	assert_int_equal(wdo(&w, W_TCP, port), EBUSY);
	/* the fallback ended: closed, the 2 open stay open */
	__atomic_store_n(&b->fallback_until, now, __ATOMIC_RELEASE);
	assert_int_equal(wdo(&w, W_TCP, port), EBUSY);
	assert_int_equal(open_of(f, slot), 2);
	assert_int_equal(wdo(&w, W_CLOSE, 0), 0);
	assert_int_equal(open_of(f, slot), 1);
	assert_int_equal(wdo(&w, W_TCP, port), EBUSY);
}

/* A slot given to a new bucket starts at 0 under a new epoch: a socket of
 * the old owner closing later gives nothing back to the new one. */
static void test_slot_reuse(void **state)
{
	struct fx *f = fx_open(state);
	const char *cg = kt_procfx_cgroup(&f->pf, "inflight-reuse");
	struct worker w;
	uint16_t port;
	uint32_t slot;

	slot = one_member(f, cg, 2, &port, &w);
	assert_int_equal(wdo(&w, W_TCP, port), 0);
	assert_int_equal(open_of(f, slot), 1);
	kt_bpf_reset_inflight(&f->b, slot); /* what apply does for a fresh slot */
	assert_int_equal(open_of(f, slot), 0);
	assert_int_equal(wdo(&w, W_TCP, port), 0);
	assert_int_equal(open_of(f, slot), 1);
	/* the old owner's socket closes: the new count keeps its one */
	assert_int_equal(wdo(&w, W_CLOSE, 0), 0);
	assert_int_equal(open_of(f, slot), 1);
	/* a count zeroed by hand (same epoch): a close never wraps it */
	{
		struct kt_inflight v = inflight(f, slot);

		v.open = 0;
		assert_int_equal(bpf_map_update_elem(f->b.inflight_fd, &slot, &v, BPF_ANY), 0);
	}
	assert_int_equal(wdo(&w, W_CLOSE, 0), 0);
	assert_int_equal(open_of(f, slot), 0);
	assert_int_equal(wdo(&w, W_TCP, port), 0);
	assert_int_equal(open_of(f, slot), 1);
}

/* The audit (kernel/inflight_audit.h). A member leaves the limit while its
 * sockets are open and the links move off its cgroup: closing them then is
 * seen by nothing and the count stays high. The audit finds no marks for
 * them and, after KT_AUDIT_STREAK audits, sets the count to the marks. A
 * count written low by hand is raised to the marks the same way. */
static void test_audit(void **state)
{
	struct fx *f = audit_fx_open(state);
	const char *cgs[2] = { kt_procfx_cgroup(&f->pf, "inflight-aud-a"),
			       kt_procfx_cgroup(&f->pf, "inflight-aud-b") };
	struct kt_inflight_audit a;
	struct worker wa, wb;
	struct kt_inflight v;
	char err[256];
	uint16_t port;
	uint32_t slot;

	listen_tcp(f, &port);
	apply_limit(f, KT_SCOPE_NODE, 5, cgs, 2);
	slot = member_slot(f, 0);
	assert_int_equal(member_slot(f, 1), slot); /* node scope: one bucket */
	audit_open(f, &a);
	worker_start(f, cgs[0], NET_HOST, &wa);
	for (int i = 0; i < 3; i++)
		assert_int_equal(wdo(&wa, W_TCP, port), 0);
	assert_int_equal(open_of(f, slot), 3);
	/* in agreement: audits change nothing */
	for (int i = 0; i < KT_AUDIT_STREAK + 1; i++)
		assert_int_equal(kt_inflight_audit_run(&a, NULL, NULL, err, sizeof(err)), 0);

	/* a leaves; its links go with it; its sockets close unseen */
	apply_limit(f, KT_SCOPE_NODE, 5, &cgs[1], 1);
	assert_int_equal(member_slot(f, 0), slot);
	assert_int_equal(open_of(f, slot), 3);
	for (int i = 0; i < 3; i++)
		assert_int_equal(wdo(&wa, W_ABORT, 0), 0);
	usleep(20000);
	assert_int_equal(open_of(f, slot), 3); /* the drift the audit is for */
	for (int i = 1; i < KT_AUDIT_STREAK; i++)
		assert_int_equal(kt_inflight_audit_run(&a, NULL, NULL, err, sizeof(err)), 0);
	assert_int_equal(open_of(f, slot), 3); /* not before KT_AUDIT_STREAK audits */
	assert_int_equal(kt_inflight_audit_run(&a, NULL, NULL, err, sizeof(err)), 1);
	assert_int_equal(open_of(f, slot), 0);

	/* b's sockets: a count written low by hand is raised to them */
	worker_start(f, cgs[1], NET_HOST, &wb);
	for (int i = 0; i < 4; i++)
		assert_int_equal(wdo(&wb, W_TCP, port), 0);
	v = inflight(f, slot);
	assert_int_equal(v.open, 4);
	v.open = 1;
	assert_int_equal(bpf_map_update_elem(f->b.inflight_fd, &slot, &v, BPF_ANY), 0);
	assert_int_equal(wdo(&wb, W_TCP, port), 0); /* what the low count lets in */
	for (int i = 1; i < KT_AUDIT_STREAK; i++)
		assert_int_equal(kt_inflight_audit_run(&a, NULL, NULL, err, sizeof(err)), 0);
	assert_int_equal(kt_inflight_audit_run(&a, NULL, NULL, err, sizeof(err)), 1);
	assert_int_equal(open_of(f, slot), 5);
	assert_int_equal(wdo(&wb, W_TCP, port), EBUSY);
	/* closes give back as before, down to 0 */
	for (int i = 0; i < 6; i++)
		assert_int_equal(wdo(&wb, W_CLOSE, 0), 0);
	wait_open(f, slot, 0, 1000, "b closed all");
	assert_int_equal(a.corrections, 2);

	/* the correction itself: only from the count it was judged on, only
	 * under the slot's epoch */
	v = inflight(f, slot);
	assert_int_equal(kt_inflight_audit_fix(&a, slot, v.epoch, 1, 7), 0);
	assert_int_equal(kt_inflight_audit_fix(&a, slot, v.epoch + 1, 0, 7), 0);
	assert_int_equal(open_of(f, slot), 0);
	assert_int_equal(kt_inflight_audit_fix(&a, slot, v.epoch, 0, 2), 1);
	assert_int_equal(open_of(f, slot), 2);
	kt_inflight_audit_close(&a);
}

/* A connect that fails before TCP (no route) changes no TCP state: nothing
 * gives its slot back while the application keeps the socket. The audit
 * does, once the socket is still unconnected KT_AUDIT_UNCONNECTED_NS after
 * it took the slot; connected sockets keep theirs however old. */
static void test_audit_unconnected(void **state)
{
	struct fx *f = audit_fx_open(state);
	const char *cg = kt_procfx_cgroup(&f->pf, "inflight-aud-nr");
	struct kt_inflight_audit a;
	struct worker w, wl;
	char err[256];
	uint16_t port;
	uint32_t slot;

	listen_tcp(f, &port);
	apply_limit(f, KT_SCOPE_NODE, 4, &cg, 1);
	slot = member_slot(f, 0);
	audit_open(f, &a);
	worker_start(f, cg, NET_HOST, &wl);
	assert_int_equal(wdo(&wl, W_TCP, port), 0);
	worker_start(f, cg, NET_NOROUTE, &w);
	assert_int_equal(wdo(&w, W_BLACKHOLE, 0), ENETUNREACH);
	assert_int_equal(wdo(&w, W_BLACKHOLE, 0), ENETUNREACH);
	usleep(20000);
	assert_int_equal(open_of(f, slot), 3); /* held by failed sockets still open */
	/* too young: an audit right away gives nothing back */
	assert_int_equal(kt_inflight_audit_run(&a, NULL, NULL, err, sizeof(err)), 0);
	assert_int_equal(open_of(f, slot), 3);
	usleep((useconds_t)(KT_AUDIT_UNCONNECTED_NS / 1000 + 100000));
	assert_int_equal(kt_inflight_audit_run(&a, NULL, NULL, err, sizeof(err)), 0);
	assert_int_equal(open_of(f, slot), 1); /* the connected one keeps its slot */
	/* the failed sockets' close later gives nothing twice */
	assert_int_equal(wdo(&w, W_CLOSE, 0), 0);
	assert_int_equal(wdo(&w, W_CLOSE, 0), 0);
	assert_int_equal(open_of(f, slot), 1);
	for (int i = 0; i < KT_AUDIT_STREAK; i++)
		assert_int_equal(kt_inflight_audit_run(&a, NULL, NULL, err, sizeof(err)), 0);
	assert_int_equal(open_of(f, slot), 1);
	assert_int_equal(a.corrections, 0);
	kt_inflight_audit_close(&a);
}

/* Runs last: every earlier test removed its pins. */
static void test_nothing_left(void **state)
{
	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	kt_bpffx_assert_none_left();
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_slots),
		T(test_killed_holder),
		T(test_failed_connects),
		T(test_udp),
		T(test_pod_members_share_node),
		T(test_lease_phases),
		T(test_slot_reuse),
		T(test_audit),
		T(test_audit_unconnected),
		cmocka_unit_test(test_nothing_left),
	};
	return cmocka_run_group_tests_name("bpf_inflight", tests, NULL, NULL);
}
