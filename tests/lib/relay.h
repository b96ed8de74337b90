/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Test helper: a TCP relay from a free port on 127.0.0.1 to 127.0.0.1:target
 * (a redis-server), in a forked child, so a test can cut one client's path to
 * the server without touching the server or the other clients.
 *
 * Frozen, the relay forwards no byte in either direction but keeps every
 * connection open (and accepts new ones): the client's writes land in socket
 * buffers and its reads time out, as on a hung link or a partition that
 * drops packets. Connections a client closes while frozen are closed on the
 * other side too. Buffers are bounded (RELAY_BUF per direction, at most
 * RELAY_MAX_CONNS connections; more are closed at once). The child sleeps
 * in poll() and dies with its parent (PR_SET_PDEATHSIG).
 *
 * Delayed, each byte is forwarded `ms` after the relay read it, in each
 * direction: a server `ms` away one way (a round trip costs 2 x ms; the TCP
 * connect to the relay itself is not delayed). At most RELAY_MARKS reads
 * per direction are in flight; beyond that the relay stops reading and TCP
 * pushes back. */
#ifndef KT_RELAY_H
#define KT_RELAY_H

#include <stdbool.h>
#include <sys/types.h>

#define RELAY_BUF 16384
#define RELAY_MAX_CONNS 32
#define RELAY_MARKS 64
#define RELAY_DELAY_MAX_MS 60000

struct relay {
	pid_t pid;       /* child; 0 when not running */
	int ctl;         /* command socket to the child; -1 when not running */
	int port;        /* where clients connect */
	int target_port; /* where the relay connects */
	bool frozen;
};

/* Listens on a free 127.0.0.1 port (r->port) and starts the child. 0 or
 * -errno. */
int relay_start(struct relay *r, int target_port);
/* Stop / resume forwarding. Each returns once the child has acknowledged
 * (from then on no byte moves / bytes move again). 0 or -errno. */
int relay_freeze(struct relay *r);
int relay_thaw(struct relay *r);
/* Every byte read from now on waits `ms` (0..RELAY_DELAY_MAX_MS; 0: none)
 * before it is forwarded. 0 or -errno. */
int relay_set_delay(struct relay *r, unsigned ms);
/* Closes every connection and the listener; the child exits and is reaped
 * (SIGKILL by pid if it does not within 1 s). Safe on a zeroed or stopped
 * struct. */
int relay_stop(struct relay *r);

#endif
