/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* A growable char buffer for replies and pages: printf appends, and an
 * allocation failure is remembered (oom) instead of reported at each call,
 * so a renderer writes straight through and checks once, at kt_sb_take. */
#ifndef KT_STRBUF_H
#define KT_STRBUF_H

#include <stddef.h>

/* Zero-initialised: empty (p NULL until the first append). */
struct kt_sbuf {
	char *p;
	size_t len, cap;
	int oom;
};

/* Appends printf-style; after a failure (oom set) nothing more is added. */
void kt_sb_printf(struct kt_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s as a JSON string: quoted, '"' and '\\' escaped, control
 * characters as \u00XX. */
void kt_sb_json_str(struct kt_sbuf *b, const char *s);
/* The malloc'd text, NUL-terminated, for the caller to free; NULL (and
 * nothing left to free) when an append ran out of memory. Nothing appended:
 * NULL as well. The buffer is empty afterwards. */
char *kt_sb_take(struct kt_sbuf *b);

#endif
