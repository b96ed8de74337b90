/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <bpf/libbpf.h>
#include "log.h"

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

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	char buf[1024];
	size_t n;

	if (log_level < KT_LOG_DEBUG || level == LIBBPF_DEBUG)
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
