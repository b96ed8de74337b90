/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <bpf/libbpf.h>
#include "base/log.h"

static const char *log_prog = "kthrottle";
static enum kt_log_level log_level = KT_LOG_INFO;

void kt_log_init(const char *prog, enum kt_log_level level)
{
	log_prog = prog;
	log_level = level;
}

enum kt_log_level kt_log_level(void)
{
	return log_level;
}

void kt_log(enum kt_log_level level, const char *fmt, ...)
{
	static const char *const names[] = { "error", "warning", "info", "debug" };
	char buf[1024];
	va_list ap;

	if (level > log_level)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	/* one write per line so concurrent writers never interleave mid-line */
	fprintf(stderr, "%s: %s: %s\n", log_prog, names[level], buf);
}

static void (*libbpf_tap)(const char *text);

void kt_log_set_libbpf_tap(void (*tap)(const char *text))
{
	libbpf_tap = tap;
}

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	char buf[1024];
	size_t n;

	if (level == LIBBPF_DEBUG)
		return 0;
	if (libbpf_tap) {
		/* whole: the verifier's log ends with the line naming the error */
		char *all = NULL;
		va_list cp;

		va_copy(cp, ap);
		if (vasprintf(&all, fmt, cp) >= 0) {
			libbpf_tap(all);
			free(all);
		}
		va_end(cp);
	}
	if (log_level < KT_LOG_DEBUG)
		return 0;
	vsnprintf(buf, sizeof(buf), fmt, ap);
	n = strlen(buf);
	while (n && buf[n - 1] == '\n')
		buf[--n] = 0;
	kt_log(KT_LOG_DEBUG, "libbpf: %s", buf);
	return 0;
}

void kt_log_setup_libbpf(void)
{
	libbpf_set_print(libbpf_print);
}

void kt_one_line(char *dst, size_t n, const char *src)
{
	size_t i = 0, o = 0, cut = 0;

	if (!n)
		return;
	while (src[i]) {
		unsigned char c = (unsigned char)src[i];
		size_t step = 1;
		bool ctl = c < 0x20 || c == 0x7f;

		if (c == 0xc2 && (unsigned char)src[i + 1] >= 0x80 && (unsigned char)src[i + 1] <= 0x9f) {
			ctl = true;
			step = 2;
		} else if (c >= 0xc0) { /* a lead byte and its continuations */
			while ((((unsigned char)src[i + step]) & 0xc0) == 0x80 && step < 4)
				step++;
		}
		if (o + (ctl ? 1 : step) >= n) {
			/* does not fit: back to the last boundary leaving room for "..." */
			o = cut;
			snprintf(dst + o, n - o, "%s", "...");
			return;
		}
		if (ctl) {
			dst[o++] = ' ';
		} else {
			memmove(dst + o, src + i, step); /* dst may be src */
			o += step;
		}
		i += step;
		if (o + 4 <= n)
			cut = o;
	}
	dst[o] = '\0';
}
