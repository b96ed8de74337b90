/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The query protocol's line parser (query.c's header states the rules),
 * apart from any socket so the fuzzer links it alone. */
#ifndef KT_QLINE_H
#define KT_QLINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kthrottle.h"

#define KT_QLINE_MAX (KT_TAG_MAX_LEN + 1) /* a tag and its '\r' */

/* The state one connection carries between reads. Zeroed = a fresh line. */
struct kt_qline {
	bool discard;            /* inside an over-long line */
	uint16_t llen;           /* partial line in `line` */
	char line[KT_QLINE_MAX];
};

struct kt_qline_counts {
	uint64_t ok, no, bad;    /* answers produced; bad lines are also in no */
};

/* 1: serve, anything else: throttle (query.h's kt_query_decide_fn). */
typedef int (*kt_qline_decide_fn)(void *ctx, const char *tag, size_t len);

/* Parses n bytes that followed the state s; writes one "OK\n" or "NO\n" to
 * out per '\n' (out has room for 3 x n bytes) and returns the bytes written.
 * Calls decide once per well-formed tag, in order. Pure but for decide. */
size_t kt_qline_parse(struct kt_qline *s, const char *p, size_t n, char *out,
		      kt_qline_decide_fn decide, void *ctx, struct kt_qline_counts *cnt);

#endif
