/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include "base/strbuf.h"

void kt_sb_printf(struct kt_sbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->oom)
		return;
	for (;;) {
		size_t room = b->cap - b->len;
		va_start(ap, fmt);
		n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? room : 0, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->oom = 1;
			return;
		}
		if (b->p && (size_t)n < room) {
			b->len += n;
			return;
		}
		size_t cap = (b->cap + n + 1) * 2;
		char *np = realloc(b->p, cap);
		if (!np) {
			b->oom = 1;
			return;
		}
		b->p = np;
		b->cap = cap;
	}
}

void kt_sb_json_str(struct kt_sbuf *b, const char *s)
{
	kt_sb_printf(b, "\"");
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			kt_sb_printf(b, "\\%c", c);
		else if (c < 0x20)
			kt_sb_printf(b, "\\u%04x", c);
		else
			kt_sb_printf(b, "%c", c);
	}
	kt_sb_printf(b, "\"");
}

char *kt_sb_take(struct kt_sbuf *b)
{
	char *p = b->p;

	if (b->oom) {
		free(p);
		p = NULL;
	}
	b->p = NULL;
	b->len = b->cap = 0;
	b->oom = 0;
	return p;
}
