/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* One logging module for the daemon and the CLI. Messages go to stderr as
 * "kthrottled: level: text". libbpf's own output is shown only at debug. */
#ifndef KT_LOG_H
#define KT_LOG_H

#include <stddef.h>

enum kt_log_level { KT_LOG_ERROR = 0, KT_LOG_WARN, KT_LOG_INFO, KT_LOG_DEBUG };

void kt_log_init(const char *prog, enum kt_log_level level);
enum kt_log_level kt_log_level(void);
void kt_log(enum kt_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Routes libbpf's messages through kt_log (warnings only at debug level). */
void kt_log_setup_libbpf(void);
/* Hands every libbpf warning, whole, to tap as well, at any log level
 * (the loader keeps the verifier's last lines for its error). NULL: none. */
void kt_log_set_libbpf_tap(void (*tap)(const char *text));

/* src into dst (size n) as one line, for messages shown one per line (the
 * API's and Redis's may span lines): control characters (C0, DEL, and C1 as
 * UTF-8) become spaces, and what does not fit is cut on a character
 * boundary and ends in "...". dst may be src. */
void kt_one_line(char *dst, size_t n, const char *src);

#define kt_err(...) kt_log(KT_LOG_ERROR, __VA_ARGS__)
#define kt_warn(...) kt_log(KT_LOG_WARN, __VA_ARGS__)
#define kt_info(...) kt_log(KT_LOG_INFO, __VA_ARGS__)
#define kt_debug(...) kt_log(KT_LOG_DEBUG, __VA_ARGS__)

#endif
