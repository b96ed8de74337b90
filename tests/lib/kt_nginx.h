/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* A private nginx for the call-unit tests and the bench: its whole
 * configuration in a directory of its own, beside its pid, logs and
 * temp files. */
#ifndef KT_NGINX_H
#define KT_NGINX_H

#include <stddef.h>

/* Writes dir/nginx.conf: one worker, the pid and error log (error.log) in
 * dir, keep-alive connections that last, every temp path in dir, and
 * `http` (access_log and server blocks) inside http { }. Its path into
 * conf. 0 or -errno. */
int kt_nginx_conf(const char *dir, const char *http, char *conf, size_t conf_len);

#endif
