/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The query server of one tag limit: the line protocol on a Unix
 * socket and, optionally, on TCP. A client sends a tag and '\n' and gets
 * exactly "OK\n" (serve) or "NO\n" (throttle); pipelined lines are answered
 * in order. One epoll set, driven by the daemon's loop; no threads, no
 * blocking call. The protocol's edge cases (over-long lines, NUL bytes,
 * '\r', empty lines, clients that stop reading) are documented in
 * docs/ARCHITECTURE.md and docs/tags.md; the exact rules are the block
 * comment at the top of query.c. */
#ifndef KT_QUERY_H
#define KT_QUERY_H

#include <stddef.h>
#include <stdint.h>

struct kt_query;

/* 1: serve ("OK\n"), 0: throttle ("NO\n"). Called once per well-formed tag
 * (1..KT_TAG_MAX_LEN bytes, no NUL, trailing '\r' removed), in the order
 * the lines arrived. */
typedef int (*kt_query_decide_fn)(void *ctx, const char *tag, size_t len);

struct kt_query_opts {
	const char *socket_path; /* Unix listener; NULL = none */
	const char *tcp_addr;    /* IP literal; NULL = 127.0.0.1 */
	int tcp_port;            /* TCP listener; 0 = none */
	unsigned max_clients;    /* connections at once; 0 = 4096 */
	unsigned max_per_peer;   /* per uid (Unix) or source address (TCP);
				  * 0 = max(64, max_clients / 8) */
	unsigned idle_ms;        /* no complete line for this long: closed;
				  * 0 = KT_QUERY_IDLE_MS */
};

#define KT_QUERY_IDLE_MS 30000

/* Binds and listens. A socket path left by a dead server is replaced; one a
 * live server answers on is -EADDRINUSE. Returns 0 or a negative errno with
 * one line in err. */
int kt_query_open(const struct kt_query_opts *o, kt_query_decide_fn decide, void *ctx,
		  struct kt_query **out, char *err, size_t errlen);
/* The epoll fd to watch (readable when something is ready). */
int kt_query_fd(const struct kt_query *q);
/* Serves what is ready now and returns; never blocks. */
void kt_query_run(struct kt_query *q);

struct kt_query_stats {
	uint64_t ok, no;        /* answers sent */
	uint64_t bad_lines;     /* over-long, NUL, empty: answered NO */
	uint64_t clients;       /* connected now */
	uint64_t accepted;      /* connections accepted, total */
	uint64_t refused;       /* connections closed at once: out of fds or memory */
	uint64_t peers;         /* distinct peers (uids, source addresses) now */
	uint64_t evicted_idle;  /* closed: no complete line for idle_ms */
	uint64_t evicted_peer_cap; /* closed: its peer opened one past max_per_peer */
	uint64_t evicted_full;  /* closed: max_clients reached, the largest peer's */
};
void kt_query_get_stats(const struct kt_query *q, struct kt_query_stats *s);
/* Closes every connection and the listeners, and unlinks the socket path
 * it bound. */
void kt_query_close(struct kt_query *q);

#endif
