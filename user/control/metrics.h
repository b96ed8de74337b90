/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The Prometheus text endpoint (`metrics: ADDR:PORT`): libmicrohttpd on the
 * daemon's own event loop (its epoll fd is one more fd in ours), so a slow
 * or stuck scraper never holds the loop. Serves GET /metrics only; the body
 * comes from a callback at each scrape. */
#ifndef KT_METRICS_H
#define KT_METRICS_H

#include <stddef.h>

struct kt_metrics;

/* The page for one scrape, malloc'd (NULL: out of memory). */
typedef char *(*kt_metrics_render)(void *arg);

/* Listens on addr (an IP literal) and port. 0, or -errno with err set. */
int kt_metrics_start(struct kt_metrics **out, const char *addr, int port,
		     kt_metrics_render render, void *arg, char *err, size_t errlen);
/* For epoll: readable when a connection needs work; then kt_metrics_run. */
int kt_metrics_fd(const struct kt_metrics *m);
/* Does the work pending now, never blocking; call it also every tick
 * (connection timeouts). */
void kt_metrics_run(struct kt_metrics *m);
void kt_metrics_stop(struct kt_metrics *m);

#endif
