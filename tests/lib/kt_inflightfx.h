/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The in-flight tests' outside observer and load: a loopback TCP server
 * that counts the connections open at each instant, and workers that open
 * connections as fast as they are admitted and hold each for a random
 * time. Both are forked children bounded in time, reporting over a pipe
 * (kt_clusterfx_reap). Functions that assert use cmocka. */
#ifndef KT_INFLIGHTFX_H
#define KT_INFLIGHTFX_H

#include <stdint.h>
#include <sys/types.h>

/* What the server saw. */
struct kt_inflight_seen {
	int max_open;        /* the most connections open at once, the whole run */
	double max_at_s;     /* when it was first seen, s from the start */
	double mean_open;    /* time-weighted mean of the open count in the window */
	uint64_t accepted;   /* connections accepted in all */
	double measured_s;   /* the span the mean covers */
};

/* cmocka: a listener on 127.0.0.1:port served by a child
 * for `secs`: it accepts every connection and counts it open until the
 * client closes it. Closes are taken before accepts in each round, and
 * swept again before a new count is recorded, so the server never counts a
 * connection the client closed before the next one was admitted. The
 * largest count covers the whole run, the mean the window [from_s, to_s)
 * (to_s <= secs): the load's steady part. Its pid; *fd carries its struct
 * kt_inflight_seen. */
pid_t kt_inflight_server_start(int port, double secs, double from_s, double to_s, int *fd);

/* What a worker did. */
struct kt_inflight_work {
	uint64_t admitted, refused, errors;
	int max_held;
	int last_errno; /* of the last error (not EBUSY), 0: none */
};

/* cmocka: a child that joins cgroup cg and, for `secs`, keeps opening TCP
 * connections to 127.0.0.1:port, holding each for a random hold_min_ms to
 * hold_max_ms (at most 256 at once); a refused connect is retried after
 * 1 ms. Its pid; *fd carries its struct kt_inflight_work. */
pid_t kt_inflight_worker_start(const char *cg, int port, double secs, int hold_min_ms,
			       int hold_max_ms, int *fd);

#endif
