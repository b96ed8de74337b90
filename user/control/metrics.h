/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The Prometheus text endpoint (`metrics: ADDR:PORT`): a small HTTP/1.x
 * GET server on the daemon's own event loop (its epoll fd is one more fd in
 * ours), so a slow or stuck client never holds the loop. Serves GET/HEAD on
 * the paths of a route table (e.g. /metrics, /healthz); each body comes from
 * its callback at each request; every reply closes its connection.
 *
 * A neighbour must not starve it, even from the scraper's own address: a
 * request must arrive whole within 1 s of accept (not reset by each byte),
 * a reply be taken within 2 s; at most 256 connections and 64 per address,
 * a new one evicting the oldest still reading its request; a request is at
 * most 8 KiB (request line 4 KiB: 414; headers: 431), answered at once. */
#ifndef KT_METRICS_H
#define KT_METRICS_H

#include <stdbool.h>
#include <stddef.h>

#define KT_HTTP_MAX_LINE 4096 /* the request line, its CRLF included */
#define KT_HTTP_MAX_REQ 8192  /* request line + headers + blank line */

struct kt_http_req {
	bool head;       /* HEAD: the reply has no body */
	size_t path_off; /* the target's path (no query) is buf[path_off..+path_len) */
	size_t path_len;
	size_t len;      /* bytes of the request, its blank line included */
};

/* Parses the request at the start of buf[0..len) (no I/O): 0 while more
 * bytes are needed (never once len >= KT_HTTP_MAX_REQ), 200 for a complete
 * GET or HEAD (req set), else the status to answer: 400, 405 (another
 * method), 414 (request line too long), 431 (headers too long), 505. Reads
 * only the first KT_HTTP_MAX_REQ bytes, and a result other than 0 stays the
 * same for any longer buffer with this prefix. */
int kt_http_parse(const char *buf, size_t len, struct kt_http_req *req);

struct kt_metrics;

/* The page for one request, malloc'd (NULL: out of memory); *status is
 * 200 unless it sets another HTTP status. */
typedef char *(*kt_metrics_render)(void *arg, unsigned *status);

struct kt_metrics_route {
	const char *path;         /* exact, e.g. "/metrics" */
	const char *content_type;
	kt_metrics_render render;
};

/* Listens on addr (an IP literal) and port and serves routes[0..n) (the
 * table must outlive m), each render called with arg. 0, or -errno with
 * err set. */
int kt_metrics_start(struct kt_metrics **out, const char *addr, int port,
		     const struct kt_metrics_route *routes, int n, void *arg, char *err,
		     size_t errlen);
/* For epoll: readable when a connection needs work; then kt_metrics_run. */
int kt_metrics_fd(const struct kt_metrics *m);
/* Does the work pending now, never blocking; call it also every tick
 * (connection timeouts). */
void kt_metrics_run(struct kt_metrics *m);
void kt_metrics_stop(struct kt_metrics *m);

#endif
