/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The control-socket protocol: one command line per connection. Parsing is
 * a pure function of the bytes received so far (no I/O, no allocation), so
 * the daemon and the fuzz target (tests/fuzz/fuzz_ctl.c) share it and it
 * links alone. */
#ifndef KT_CTLPROTO_H
#define KT_CTLPROTO_H

#include <stddef.h>

/* The newline must come within this many bytes (it included). */
#define KT_CTL_MAX_LINE 256

enum kt_ctl_result {
	KT_CTL_INCOMPLETE = 0,     /* no newline yet: read more */
	KT_CTL_STATUS = 1,
	KT_CTL_STATUS_JSON = 2,
	KT_CTL_RELOAD = 3,
	KT_CTL_PING = 4,
	KT_CTL_SUBSCRIBE = 5,      /* "subscribe NAME": kt_ctl_subscribe_name gives NAME */
	KT_CTL_HEALTH = 6,         /* readiness, health.h */
	KT_CTL_HEALTH_LIVE = 7,    /* "health live": liveness */
	KT_CTL_LAST = KT_CTL_HEALTH_LIVE,
	KT_CTL_ERR_TOO_LONG = -1,  /* no newline within KT_CTL_MAX_LINE bytes */
	KT_CTL_ERR_NUL = -2,       /* a NUL byte before the newline */
	KT_CTL_ERR_UNKNOWN = -3,   /* a complete line that is no command */
};

/* Parses the first line of buf[0..len) (buf need not be NUL-terminated; a
 * CR before the LF is ignored, bytes after the LF are ignored). Returns a
 * command (> 0), KT_CTL_INCOMPLETE, or an error (< 0). */
int kt_ctl_parse(const char *buf, size_t len);

/* The limit name of a "subscribe NAME" line that kt_ctl_parse accepted,
 * copied NUL-terminated into out (outlen > the name). */
void kt_ctl_subscribe_name(const char *buf, char *out, size_t outlen);

/* The one-line reply ("error: ...\n") for an error result, else NULL. */
const char *kt_ctl_error_reply(int result);

#endif
