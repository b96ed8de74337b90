/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Test helper: what a limit admitted, measured where it lands. A UDP socket
 * on a free 127.0.0.1 port, read by a thread, counts arriving datagrams into
 * ARRIVALS_BIN_MS bins from the start; the worst sum over any 10 consecutive
 * bins is the worst one-second window (sliding in 100 ms steps).
 *
 * Bins use the kernel's receive timestamp (SO_TIMESTAMPNS), not the time the
 * thread got round to reading, so a starved thread does not move counts
 * between windows. The socket buffer is large and the kernel's drop counter
 * (SO_RXQ_OVFL) is kept: a measurement with drops undercounts and says so. */
#ifndef KT_ARRIVALS_H
#define KT_ARRIVALS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define ARRIVALS_BIN_MS 100
#define ARRIVALS_WINDOW_BINS 10      /* one second */
#define ARRIVALS_MAX_BINS 1200       /* 120 s; later datagrams count in `late` */

struct arrivals {
	int fd, port;
	int wake[2];                 /* pipe: stops the thread */
	pthread_t thread;
	bool running;
	uint64_t t0_ns;              /* CLOCK_REALTIME (the timestamps' clock) at start */
	unsigned bins[ARRIVALS_MAX_BINS];
	unsigned long long total, early, late, drops; /* drops: kernel counter, cumulative */
};

/* Binds a free UDP port (a->port) and starts counting; time 0 is now. 0 or
 * -errno. */
int arrivals_start(struct arrivals *a);
/* Stops and joins the thread, closes the socket. Safe on a zeroed or
 * stopped struct. */
void arrivals_stop(struct arrivals *a);
/* Seconds since the start (for marking phases). */
double arrivals_now_s(const struct arrivals *a);
/* Datagrams in the bins covering [from_s, to_s). */
unsigned long arrivals_sum(const struct arrivals *a, double from_s, double to_s);
/* Largest sum over ARRIVALS_WINDOW_BINS consecutive bins inside [from_s,
 * to_s) (the whole range if it is shorter); *start_s (may be NULL) gets
 * where that window starts. */
unsigned long arrivals_worst_window(const struct arrivals *a, double from_s, double to_s,
				    double *start_s);
/* The same over n receivers' datagrams together (their bins summed: one
 * limit observed on several ports). */
unsigned long arrivals_worst_window_of(const struct arrivals *const *a, int n, double from_s,
				       double to_s, double *start_s);
/* One line per whole second of [from_s, to_s): the count in that second and
 * its bins; `tag` prefixes each line. To stdout. */
void arrivals_print(const struct arrivals *a, const char *tag, double from_s, double to_s);
/* Datagrams counted so far (all bins, early and late included). */
unsigned long long arrivals_total(const struct arrivals *a);
unsigned long long arrivals_drops(const struct arrivals *a);

#endif
