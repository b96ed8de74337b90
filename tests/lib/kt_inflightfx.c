// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The in-flight tests' observer and load: see kt_inflightfx.h. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <cmocka.h>

#include "kt_clusterfx.h"
#include "kt_inflightfx.h"
#include "ktest.h"

#define MAX_CONNS 1024

/* Takes every client that has closed out of fds[1..n): 0 = wait nothing.
 * Returns the new n. */
static int sweep_closed(struct pollfd *pf, int n, int timeout_ms)
{
	char buf[256];

	if (n <= 1 || poll(pf + 1, (nfds_t)(n - 1), timeout_ms) <= 0)
		return n;
	for (int i = 1; i < n; i++) {
		if (!pf[i].revents)
			continue;
		ssize_t r = read(pf[i].fd, buf, sizeof(buf));

		if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EINTR)))
			continue;
		close(pf[i].fd);
		pf[i] = pf[--n];
		pf[n].revents = 0;
		i--;
	}
	return n;
}

static void server_main(int lfd, double secs, double from_s, double to_s, int out)
{
	struct pollfd pf[MAX_CONNS + 1];
	struct kt_inflight_seen s = { 0 };
	uint64_t t0 = ktest_now_ns(), from = t0 + (uint64_t)(from_s * 1e9),
		 to = t0 + (uint64_t)(to_s * 1e9), end = t0 + (uint64_t)(secs * 1e9), last = from;
	double area = 0;
	int n = 1;

	pf[0] = (struct pollfd){ .fd = lfd, .events = POLLIN };
	for (;;) {
		uint64_t now = ktest_now_ns();
		int open;

		if (now >= end)
			break;
		for (int i = 0; i < n; i++)
			pf[i].revents = 0;
		if (poll(pf, (nfds_t)n, 10) < 0 && errno != EINTR)
			_exit(3);
		/* closes first: they happened before the connects they made room for */
		n = sweep_closed(pf, n, 0);
		now = ktest_now_ns();
		open = n - 1;
		if (now > from && last < to) {
			area += (double)open * (double)((now < to ? now : to) - last) / 1e9;
			last = now;
		}
		for (;;) {
			int c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

			if (c < 0)
				break;
			if (n == MAX_CONNS + 1) {
				close(c);
				continue;
			}
			pf[n++] = (struct pollfd){ .fd = c, .events = POLLIN };
			s.accepted++;
		}
		n = sweep_closed(pf, n, 0);
		if (n - 1 > s.max_open) {
			s.max_open = n - 1;
			s.max_at_s = (double)(ktest_now_ns() - t0) / 1e9;
		}
	}
	s.measured_s = to_s - from_s;
	s.mean_open = s.measured_s > 0 ? area / s.measured_s : 0;
	if (write(out, &s, sizeof(s)) != sizeof(s))
		_exit(2);
	_exit(0);
}

pid_t kt_inflight_server_start(int port, double secs, double from_s, double to_s, int *fd)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
	pid_t pid;

	assert_true(lfd >= 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(lfd, 1024), 0);
	pid = kt_clusterfx_fork(fd);
	if (pid == 0)
		server_main(lfd, secs, from_s, to_s, *fd);
	close(lfd);
	return pid;
}

struct held {
	int fd;
	uint64_t until;
};

static void worker_main(int port, double secs, int hold_min_ms, int hold_max_ms, int out)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct held h[256];
	struct kt_inflight_work w = { 0 };
	uint64_t end = ktest_now_ns() + (uint64_t)(secs * 1e9);
	int n = 0;

	srandom((unsigned)getpid());
	while (ktest_now_ns() < end) {
		uint64_t now = ktest_now_ns();
		int fd;

		for (int i = 0; i < n; i++)
			if (h[i].until <= now) {
				close(h[i].fd);
				h[i--] = h[--n];
			}
		if (n == (int)(sizeof(h) / sizeof(h[0]))) {
			usleep(1000);
			continue;
		}
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			_exit(3);
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
			int ms = hold_min_ms + (int)(random() % (hold_max_ms - hold_min_ms + 1));

			h[n++] = (struct held){ fd, now + (uint64_t)ms * 1000000ULL };
			w.admitted++;
			if (n > w.max_held)
				w.max_held = n;
			continue;
		}
		if (errno == EBUSY)
			w.refused++;
		else
			w.errors++, w.last_errno = errno;
		close(fd);
		usleep(1000);
	}
	for (int i = 0; i < n; i++)
		close(h[i].fd);
	if (write(out, &w, sizeof(w)) != sizeof(w))
		_exit(2);
	_exit(0);
}

pid_t kt_inflight_worker_start(const char *cg, int port, double secs, int hold_min_ms,
			       int hold_max_ms, int *fd)
{
	pid_t pid = kt_clusterfx_fork(fd);

	if (pid == 0) {
		if (ktest_cgroup_join(cg) != 0)
			_exit(4);
		worker_main(port, secs, hold_min_ms, hold_max_ms, *fd);
	}
	return pid;
}
