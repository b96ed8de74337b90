/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What report.c, report_status.c and report_metrics.c share. Private to
 * them. */
#ifndef KT_REPORT_INT_H
#define KT_REPORT_INT_H

#include <stdbool.h>
#include "base/config.h"
#include "base/strbuf.h"
#include "kthrottle.h"

struct kt_daemon;

/* A throttle event's reason by KT_REASON_* (kt_report_reason_name checks
 * the range). */
extern const char *const kt_report_reason_names[KT_REASON_COUNT];
/* The health families of the metrics page (ready, components up, kernel
 * features). */
void kt_report_health_metrics(const struct kt_daemon *d, struct kt_sbuf *b);
/* How many groups groupBy template c has on this node (*other: the
 * @@other pool too), or -1 if c is no template. */
int kt_report_template_groups(const struct kt_daemon *d, const struct kt_limit_cfg *c, bool *other);
struct kt_member_rt;
/* The rate the kernel runs member m's bucket at now (node scope: the
 * node's one bucket), 0 when it cannot be read. A look, not a read of
 * anything the controller keeps. */
double kt_report_member_rate(const struct kt_daemon *d, const struct kt_member_rt *m);

#endif
