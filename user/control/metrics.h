/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The Prometheus text endpoint (`metrics: ADDR:PORT`): libmicrohttpd on the
 * daemon's own event loop (its epoll fd is one more fd in ours), so a slow
 * or stuck scraper never holds the loop. Serves GET on the paths of a route
 * table (e.g. /metrics, /healthz); each body comes from its callback at
 * each request. */
#ifndef KT_METRICS_H
#define KT_METRICS_H

#include <stddef.h>

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
