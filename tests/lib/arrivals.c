/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include "arrivals.h"

#ifndef SO_RXQ_OVFL
#define SO_RXQ_OVFL 40
#endif
#define ARRIVALS_RCVBUF (8 << 20)
#define ARRIVALS_BATCH 64

static uint64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void count_one(struct arrivals *a, uint64_t ts_ns)
{
	if (ts_ns < a->t0_ns) {
		__atomic_fetch_add(&a->early, 1, __ATOMIC_RELAXED);
	} else {
		uint64_t bin = (ts_ns - a->t0_ns) / (ARRIVALS_BIN_MS * 1000000ull);

		if (bin < ARRIVALS_MAX_BINS)
			__atomic_fetch_add(&a->bins[bin], 1, __ATOMIC_RELAXED);
		else
			__atomic_fetch_add(&a->late, 1, __ATOMIC_RELAXED);
	}
	__atomic_fetch_add(&a->total, 1, __ATOMIC_RELAXED);
}

/* Reads everything queued, in batches; no allocation (the test forks). */
static void drain(struct arrivals *a)
{
	static __thread char data[ARRIVALS_BATCH][64];
	static __thread char ctrl[ARRIVALS_BATCH][CMSG_SPACE(sizeof(struct timespec)) +
						   CMSG_SPACE(sizeof(uint32_t))];
	struct mmsghdr m[ARRIVALS_BATCH];
	struct iovec iov[ARRIVALS_BATCH];
	int n;

	do {
		for (int i = 0; i < ARRIVALS_BATCH; i++) {
			iov[i] = (struct iovec){ data[i], sizeof(data[i]) };
			m[i] = (struct mmsghdr){ .msg_hdr = { .msg_iov = &iov[i], .msg_iovlen = 1,
							       .msg_control = ctrl[i],
							       .msg_controllen = sizeof(ctrl[i]) } };
		}
		n = recvmmsg(a->fd, m, ARRIVALS_BATCH, MSG_DONTWAIT, NULL);
		for (int i = 0; i < n; i++) {
			uint64_t ts = 0;

			for (struct cmsghdr *c = CMSG_FIRSTHDR(&m[i].msg_hdr); c;
			     c = CMSG_NXTHDR(&m[i].msg_hdr, c)) {
				if (c->cmsg_level != SOL_SOCKET)
					continue;
				if (c->cmsg_type == SO_TIMESTAMPNS) {
					struct timespec t;

					memcpy(&t, CMSG_DATA(c), sizeof(t));
					ts = (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
				} else if (c->cmsg_type == SO_RXQ_OVFL) {
					uint32_t d;

					memcpy(&d, CMSG_DATA(c), sizeof(d));
					__atomic_store_n(&a->drops, d, __ATOMIC_RELAXED);
				}
			}
			count_one(a, ts ? ts : realtime_ns());
		}
	} while (n == ARRIVALS_BATCH);
}

static void *arrivals_thread(void *arg)
{
	struct arrivals *a = arg;
	struct pollfd p[2] = { { .fd = a->fd, .events = POLLIN }, { .fd = a->wake[0], .events = POLLIN } };

	for (;;) {
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[0].revents & POLLIN)
			drain(a);
		if (p[1].revents) {
			drain(a); /* what arrived before the stop */
			break;
		}
	}
	return NULL;
}

int arrivals_start(struct arrivals *a)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(sa);
	int one = 1, buf = ARRIVALS_RCVBUF, e;

	memset(a, 0, sizeof(*a));
	a->fd = a->wake[0] = a->wake[1] = -1;
	a->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (a->fd < 0)
		return -errno;
	/* FORCE works as root past rmem_max; else the plain one, capped */
	if (setsockopt(a->fd, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof(buf)) < 0)
		setsockopt(a->fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
	if (setsockopt(a->fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one)) < 0 ||
	    setsockopt(a->fd, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof(one)) < 0 ||
	    bind(a->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    getsockname(a->fd, (struct sockaddr *)&sa, &l) < 0 || pipe2(a->wake, O_CLOEXEC) < 0)
		goto fail;
	a->port = ntohs(sa.sin_port);
	a->t0_ns = realtime_ns();
	e = pthread_create(&a->thread, NULL, arrivals_thread, a);
	if (e) {
		errno = e;
		goto fail;
	}
	a->running = true;
	return 0;
fail:
	e = errno;
	close(a->fd);
	if (a->wake[0] >= 0) {
		close(a->wake[0]);
		close(a->wake[1]);
	}
	a->fd = a->wake[0] = a->wake[1] = -1;
	a->port = 0;
	return -e;
}

void arrivals_stop(struct arrivals *a)
{
	if (a->running) {
		(void)!write(a->wake[1], "x", 1);
		pthread_join(a->thread, NULL);
		a->running = false;
	}
	/* a zeroed struct has fd 0: only close what a successful start opened */
	if (a->port) {
		close(a->fd);
		close(a->wake[0]);
		close(a->wake[1]);
	}
	a->fd = a->wake[0] = a->wake[1] = -1;
	a->port = 0;
}

double arrivals_now_s(const struct arrivals *a)
{
	return (double)(int64_t)(realtime_ns() - a->t0_ns) / 1e9;
}

static unsigned bin_at(const struct arrivals *a, long i)
{
	return i >= 0 && i < ARRIVALS_MAX_BINS ? __atomic_load_n(&a->bins[i], __ATOMIC_RELAXED) : 0;
}

/* Bin range [*b0, *b1) of [from_s, to_s), clamped to the table. */
static void bin_range(double from_s, double to_s, long *b0, long *b1)
{
	double per_s = 1000.0 / ARRIVALS_BIN_MS;

	*b0 = (long)floor(from_s * per_s + 1e-9);
	*b1 = (long)ceil(to_s * per_s - 1e-9);
	if (*b0 < 0)
		*b0 = 0;
	if (*b1 > ARRIVALS_MAX_BINS)
		*b1 = ARRIVALS_MAX_BINS;
	if (*b1 < *b0)
		*b1 = *b0;
}

unsigned long arrivals_sum(const struct arrivals *a, double from_s, double to_s)
{
	unsigned long s = 0;
	long b0, b1;

	bin_range(from_s, to_s, &b0, &b1);
	for (long i = b0; i < b1; i++)
		s += bin_at(a, i);
	return s;
}

/* bin i summed over the n receivers a[] */
static unsigned long bins_at(const struct arrivals *const *a, int n, long i)
{
	unsigned long s = 0;

	for (int k = 0; k < n; k++)
		s += bin_at(a[k], i);
	return s;
}

unsigned long arrivals_worst_window(const struct arrivals *a, double from_s, double to_s,
				    double *start_s)
{
	return arrivals_worst_window_of(&a, 1, from_s, to_s, start_s);
}

unsigned long arrivals_worst_window_of(const struct arrivals *const *a, int n, double from_s,
				       double to_s, double *start_s)
{
	unsigned long s = 0, worst;
	long b0, b1, w = ARRIVALS_WINDOW_BINS, at;

	bin_range(from_s, to_s, &b0, &b1);
	if (b1 - b0 < w)
		w = b1 - b0;
	for (long i = b0; i < b0 + w; i++)
		s += bins_at(a, n, i);
	worst = s;
	at = b0;
	for (long i = b0 + w; i < b1; i++) { /* slide by one bin */
		s += bins_at(a, n, i);
		s -= bins_at(a, n, i - w);
		if (s > worst) {
			worst = s;
			at = i - w + 1;
		}
	}
	if (start_s)
		*start_s = (double)at * ARRIVALS_BIN_MS / 1000.0;
	return worst;
}

void arrivals_print(const struct arrivals *a, const char *tag, double from_s, double to_s)
{
	long b0, b1;

	bin_range(from_s, to_s, &b0, &b1);
	for (long s = b0; s + ARRIVALS_WINDOW_BINS <= b1; s += ARRIVALS_WINDOW_BINS) {
		char line[256];
		unsigned long sum = 0;
		int off = 0;

		for (long i = s; i < s + ARRIVALS_WINDOW_BINS; i++) {
			sum += bin_at(a, i);
			off += snprintf(line + off, sizeof(line) - (size_t)off, " %3u", bin_at(a, i));
		}
		printf("%s t=%5.1fs: %4lu |%s\n", tag, (double)s * ARRIVALS_BIN_MS / 1000.0, sum, line);
	}
	fflush(stdout);
}

unsigned long long arrivals_total(const struct arrivals *a)
{
	return __atomic_load_n(&a->total, __ATOMIC_RELAXED);
}

unsigned long long arrivals_drops(const struct arrivals *a)
{
	return __atomic_load_n(&a->drops, __ATOMIC_RELAXED);
}
