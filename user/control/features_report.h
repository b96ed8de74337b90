/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The kernel's features (kernel/features.h) in status, health and metrics:
 * which are on, which the kernel refused and why, and which limits that
 * leaves unenforced or with a gap. Only reads what the probes recorded. */
#ifndef KT_FEATURES_REPORT_H
#define KT_FEATURES_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include "base/config.h"
#include "base/strbuf.h"
#include "kernel/features.h"

/* Status: the kernel's release and a features line (text: "features on:
 * ... off: ...", then a line per feature off; JSON: ,"kernel":{...}). */
void kt_features_status(const struct kt_features *fs, struct kt_sbuf *b, bool json);
/* Status of one limit: text, a line when a feature it needs or uses is
 * off; JSON, ,"kernel_enforced":BOOL,"features_off":[...] (no trailing
 * comma). */
void kt_features_limit_status(const struct kt_features *fs, const struct kt_limit_cfg *c,
			      struct kt_sbuf *b, bool json);
/* Whether the kernel can enforce a limit of c's unit at all. */
bool kt_features_limit_enforced(const struct kt_features *fs, const struct kt_limit_cfg *c);
/* kthrottle_kernel_feature{feature} 1 (on) or 0 (off), for each probed. */
void kt_features_metrics(const struct kt_features *fs, struct kt_sbuf *b);

#endif
