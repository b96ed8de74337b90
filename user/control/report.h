/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What the daemon tells about itself: `status` (a table, or JSON), the
 * `health` replies and the Prometheus page, each rendered from the daemon's
 * state as the loop left it into a malloc'd string (NULL: out of memory).
 * Rendering changes nothing the daemon keeps (it is handed a const one):
 * throttle events are counted as the loop consumes them (kt_events' ring
 * callback, and each tick), never here, and the counters are peeked
 * (kt_ctl_peek_counters), never read as a tick reads them, so a status, a
 * scrape or a probe between two ticks moves no demand window. It does read
 * the kernel: the buckets' counters and rates now. */
#ifndef KT_REPORT_H
#define KT_REPORT_H

#include <stdbool.h>
#include <stdint.h>
#include "control/controller.h"
#include "control/metrics.h"

struct kt_daemon;

/* Status as a human table or JSON. */
char *kt_report_status(const struct kt_daemon *d, bool json);
/* The Prometheus text page (every metric prefixed kthrottle_). */
char *kt_report_metrics(const struct kt_daemon *d);
/* The `health` (live: `health live`) reply; *status (may be NULL) gets
 * the HTTP status that goes with it, 200 or 503. */
char *kt_report_health(const struct kt_daemon *d, bool live, unsigned *status);
/* The metrics endpoint's pages (/metrics, /healthz, /livez), each called
 * with the struct kt_daemon * as its arg; returns how many. */
int kt_report_http_routes(const struct kt_metrics_route **routes);

/* A throttle event's reason as status and subscribers name it. */
const char *kt_report_reason_name(uint32_t reason);
/* The last throttle event's retry-after in ms (-1: closed). */
double kt_report_retry_ms(const struct kt_limit_state *s);

#endif
