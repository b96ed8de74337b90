/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include "relay.h"

/* Commands on the control socket; the child answers each with RELAY_ACK. */
#define RELAY_FREEZE 'F'
#define RELAY_THAW 'T'
#define RELAY_DELAY 'D' /* followed by the delay in ms, 4 bytes, host order */
#define RELAY_STOP 'S'
#define RELAY_ACK 'k'
#define RELAY_ACK_MS 2000

/* One relayed connection: c (client side), u (upstream, the server). */
struct relay_pipe {
	char buf[RELAY_BUF];
	size_t len;
	/* delayed: buf[0, mark[i].end) may go once mark[i].due_ns has passed */
	struct {
		size_t end;
		uint64_t due_ns;
	} mark[RELAY_MARKS];
	int n_marks;
};

struct relay_conn {
	int c, u;           /* -1: slot free */
	bool connecting;    /* non-blocking connect to the target in flight */
	struct relay_pipe up, down; /* client -> server, server -> client */
};

/* Used only in the child: static, so the child never allocates after a fork
 * from a test that may run threads (malloc locks). */
static struct relay_conn relay_conns[RELAY_MAX_CONNS];
static uint64_t relay_delay_ns;

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* How many bytes of p may be forwarded now. */
static size_t pipe_ready(const struct relay_pipe *p, uint64_t now)
{
	size_t r = 0;

	if (!relay_delay_ns)
		return p->len; /* a delay turned off releases what it held */
	for (int i = 0; i < p->n_marks && p->mark[i].due_ns <= now; i++)
		r = p->mark[i].end;
	return r;
}

/* The earliest release still ahead in p, or UINT64_MAX. */
static uint64_t pipe_next_due(const struct relay_pipe *p, uint64_t now)
{
	if (relay_delay_ns)
		for (int i = 0; i < p->n_marks; i++)
			if (p->mark[i].due_ns > now)
				return p->mark[i].due_ns;
	return UINT64_MAX;
}

static void conn_close(struct relay_conn *k)
{
	if (k->c >= 0)
		close(k->c);
	if (k->u >= 0)
		close(k->u);
	k->c = k->u = -1;
	k->up.len = k->down.len = 0;
	k->up.n_marks = k->down.n_marks = 0;
	k->connecting = false;
}

static void conn_open(int lfd, int target_port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)target_port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct relay_conn *k = NULL;
	int c, u;

	c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (c < 0)
		return;
	for (int i = 0; i < RELAY_MAX_CONNS && !k; i++)
		if (relay_conns[i].c < 0)
			k = &relay_conns[i];
	if (!k) { /* bounded: refuse beyond the table */
		close(c);
		return;
	}
	/* non-blocking: a stopped server's full backlog must not hang the relay */
	u = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (u < 0) {
		close(c);
		return;
	}
	k->c = c;
	k->u = u;
	k->up.len = k->down.len = 0;
	k->up.n_marks = k->down.n_marks = 0;
	k->connecting = false;
	if (connect(u, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		if (errno != EINPROGRESS) {
			conn_close(k); /* server gone: the client sees the close */
			return;
		}
		k->connecting = true;
	}
}

/* Reads from `from` into p; false when the pair must close (EOF, error). */
static bool pipe_fill(int from, struct relay_pipe *p)
{
	ssize_t n = recv(from, p->buf + p->len, sizeof(p->buf) - p->len, MSG_DONTWAIT);

	if (n > 0) {
		p->len += (size_t)n;
		if (relay_delay_ns)
			p->mark[p->n_marks++] = (typeof(p->mark[0])){ p->len, mono_ns() + relay_delay_ns };
		return true;
	}
	return n < 0 && (errno == EAGAIN || errno == EINTR);
}

static bool pipe_drain(int to, struct relay_pipe *p)
{
	size_t ready = pipe_ready(p, mono_ns());
	ssize_t n;
	int i, j;

	if (!ready)
		return true;
	n = send(to, p->buf, ready, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (n > 0) {
		memmove(p->buf, p->buf + n, p->len - (size_t)n);
		p->len -= (size_t)n;
		for (i = j = 0; i < p->n_marks; i++)
			if (p->mark[i].end > (size_t)n)
				p->mark[j++] = (typeof(p->mark[0])){ p->mark[i].end - (size_t)n,
								     p->mark[i].due_ns };
		p->n_marks = j;
		if (!relay_delay_ns && !p->len)
			p->n_marks = 0;
		return true;
	}
	return n < 0 && (errno == EAGAIN || errno == EINTR);
}

/* Events wanted on one side of a pair; frozen: only hang-ups, so a closed
 * client is noticed but no byte is read or written. */
static short side_events(const struct relay_conn *k, bool client, bool frozen)
{
	const struct relay_pipe *in = client ? &k->up : &k->down, *out = client ? &k->down : &k->up;
	short ev = 0;

	if (!client && k->connecting)
		return POLLOUT;
	if (frozen)
		return POLLRDHUP;
	/* a full buffer waits for the other side; asking for RDHUP then would
	 * spin on a half-closed peer */
	if (in->len < sizeof(in->buf) && !k->connecting && in->n_marks < RELAY_MARKS)
		ev |= POLLIN | POLLRDHUP;
	if (pipe_ready(out, mono_ns()) > 0)
		ev |= POLLOUT;
	return ev;
}

/* Returns false when the pair must close. */
static bool side_ready(struct relay_conn *k, bool client, short rev, bool frozen)
{
	int fd = client ? k->c : k->u;
	struct relay_pipe *in = client ? &k->up : &k->down, *out = client ? &k->down : &k->up;

	if (!client && k->connecting) {
		int err = 0;
		socklen_t l = sizeof(err);

		if (!(rev & (POLLOUT | POLLERR | POLLHUP)))
			return true;
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0 || err)
			return false;
		k->connecting = false;
		return true;
	}
	if (frozen)
		return !(rev & (POLLRDHUP | POLLHUP | POLLERR));
	if ((rev & POLLERR) || ((rev & POLLHUP) && in->len == sizeof(in->buf)))
		return false;
	/* POLLIN also covers EOF, which pipe_fill reports */
	if ((rev & (POLLIN | POLLRDHUP | POLLHUP)) && in->len < sizeof(in->buf) &&
	    in->n_marks < RELAY_MARKS && !pipe_fill(fd, in))
		return false;
	if ((rev & POLLOUT) && out->len > 0 && !pipe_drain(fd, out))
		return false;
	return true;
}

static void relay_child(int lfd, int ctl, int target_port)
{
	struct pollfd pfd[2 + 2 * RELAY_MAX_CONNS];
	bool frozen = false;

	signal(SIGPIPE, SIG_IGN);
	for (int i = 0; i < RELAY_MAX_CONNS; i++)
		relay_conns[i].c = relay_conns[i].u = -1;
	for (;;) {
		uint64_t now = mono_ns(), due = UINT64_MAX;
		int n = 2, wait_ms = -1;

		pfd[0] = (struct pollfd){ .fd = ctl, .events = POLLIN };
		pfd[1] = (struct pollfd){ .fd = lfd, .events = POLLIN };
		for (int i = 0; i < RELAY_MAX_CONNS; i++) {
			struct relay_conn *k = &relay_conns[i];

			if (k->c < 0)
				continue;
			pfd[n++] = (struct pollfd){ .fd = k->c, .events = side_events(k, true, frozen) };
			pfd[n++] = (struct pollfd){ .fd = k->u, .events = side_events(k, false, frozen) };
			if (!frozen) {
				uint64_t a = pipe_next_due(&k->up, now), b = pipe_next_due(&k->down, now);

				due = a < due ? a : due;
				due = b < due ? b : due;
			}
		}
		if (due != UINT64_MAX)
			wait_ms = (int)((due - now + 999999) / 1000000);
		if (poll(pfd, (nfds_t)n, wait_ms) < 0) {
			if (errno == EINTR)
				continue;
			_exit(3);
		}
		if (pfd[0].revents) {
			char cmd = 0;

			if (read(ctl, &cmd, 1) != 1 || cmd == RELAY_STOP) {
				for (int i = 0; i < RELAY_MAX_CONNS; i++)
					conn_close(&relay_conns[i]);
				close(lfd);
				cmd = RELAY_ACK;
				(void)!write(ctl, &cmd, 1);
				_exit(0);
			}
			if (cmd == RELAY_DELAY) {
				uint32_t ms;

				if (read(ctl, &ms, sizeof(ms)) != sizeof(ms))
					_exit(5);
				relay_delay_ns = (uint64_t)ms * 1000000ULL;
			} else {
				frozen = cmd == RELAY_FREEZE;
			}
			cmd = RELAY_ACK;
			if (write(ctl, &cmd, 1) != 1)
				_exit(4);
			continue; /* events were computed for the old state */
		}
		/* the pairs' pollfds follow in table order */
		n = 2;
		for (int i = 0; i < RELAY_MAX_CONNS; i++) {
			struct relay_conn *k = &relay_conns[i];
			short rc, ru;

			if (k->c < 0)
				continue;
			rc = pfd[n++].revents;
			ru = pfd[n++].revents;
			if (!side_ready(k, false, ru, frozen) || !side_ready(k, true, rc, frozen))
				conn_close(k);
		}
		if (pfd[1].revents & POLLIN)
			conn_open(lfd, target_port);
	}
}

int relay_start(struct relay *r, int target_port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(sa);
	pid_t parent = getpid();
	int lfd, sv[2], one = 1;

	memset(r, 0, sizeof(*r));
	r->ctl = -1;
	r->target_port = target_port;
	/* port 0: the kernel picks a free port, no race with other tests */
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (lfd < 0)
		return -errno;
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 64) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&sa, &l) < 0) {
		int e = errno;

		close(lfd);
		return -e;
	}
	r->port = ntohs(sa.sin_port);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		int e = errno;

		close(lfd);
		return -e;
	}
	r->pid = fork();
	if (r->pid < 0) {
		int e = errno;

		close(lfd);
		close(sv[0]);
		close(sv[1]);
		r->pid = 0;
		return -e;
	}
	if (r->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		close(sv[0]);
		relay_child(lfd, sv[1], target_port);
		_exit(0);
	}
	close(lfd);
	close(sv[1]);
	r->ctl = sv[0];
	return 0;
}

/* Sends one command (and its argument) and waits (bounded) for the
 * acknowledgement. */
static int relay_cmd_arg(struct relay *r, char cmd, uint32_t arg)
{
	struct pollfd p = { .fd = r->ctl, .events = POLLIN };
	char ack = 0, msg[1 + sizeof(arg)];
	size_t len = cmd == RELAY_DELAY ? sizeof(msg) : 1;

	if (r->pid <= 0 || r->ctl < 0)
		return -ESRCH;
	msg[0] = cmd;
	memcpy(msg + 1, &arg, sizeof(arg));
	if (write(r->ctl, msg, len) != (ssize_t)len)
		return -errno;
	if (poll(&p, 1, RELAY_ACK_MS) != 1)
		return -ETIMEDOUT;
	if (read(r->ctl, &ack, 1) != 1 || ack != RELAY_ACK)
		return -EIO;
	return 0;
}

static int relay_cmd(struct relay *r, char cmd)
{
	return relay_cmd_arg(r, cmd, 0);
}

int relay_set_delay(struct relay *r, unsigned ms)
{
	if (ms > RELAY_DELAY_MAX_MS)
		return -EINVAL;
	return relay_cmd_arg(r, RELAY_DELAY, ms);
}

int relay_freeze(struct relay *r)
{
	int ret = relay_cmd(r, RELAY_FREEZE);

	if (!ret)
		r->frozen = true;
	return ret;
}

int relay_thaw(struct relay *r)
{
	int ret = relay_cmd(r, RELAY_THAW);

	if (!ret)
		r->frozen = false;
	return ret;
}

int relay_stop(struct relay *r)
{
	int ret, status;

	if (r->pid <= 0)
		return 0;
	ret = relay_cmd(r, RELAY_STOP);
	for (int i = 0; i < 100; i++) { /* 1 s */
		if (waitpid(r->pid, &status, WNOHANG) == r->pid)
			goto reaped;
		struct timespec ts = { 0, 10 * 1000000L };
		nanosleep(&ts, NULL);
	}
	kill(r->pid, SIGKILL);
	waitpid(r->pid, &status, 0);
	ret = ret ? ret : -ETIMEDOUT;
reaped:
	close(r->ctl);
	r->ctl = -1;
	r->pid = 0;
	r->frozen = false;
	return ret;
}
