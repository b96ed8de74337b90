/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Tells the daemon loop when its config file's content has changed, so a
 * change applies itself (a ConfigMap update, an edit) without a SIGHUP.
 *
 * inotify on the directory holding the path: the kubelet's swap shows as
 * IN_MOVED_TO of `..data`, a rewrite as IN_CLOSE_WRITE of the name, an
 * editor's save as a rename onto it. Events on those names (or a lost
 * watch, a queue overflow) arm a debounce of KT_CFGWATCH_DEBOUNCE_MS after
 * the last one; when it fires the file is read as the daemon reads it
 * (kt_volfile_read: the kubelet's links under the volume rule) and its
 * digest (kt_config_digest) compared with the content last tried (applied
 * or rejected). Only a different content is reported, so a touch or an
 * identical republish does nothing and a bad file is tried once.
 *
 * Every KT_CFGWATCH_RECHECK_MS the watch is re-added by path (a directory
 * replaced or moved is watched as it is now) and the content compared
 * anyway: the net under lost events and a target outside the directory. */
#ifndef KT_CFGWATCH_H
#define KT_CFGWATCH_H

#include <stdbool.h>
#include <stdint.h>
#include "base/config.h"

#define KT_CFGWATCH_DEBOUNCE_MS 500
#define KT_CFGWATCH_RECHECK_MS 10000

struct kt_cfgwatch;

/* Watches path. tried: the digest of the content running now (NULL: the
 * file is read now). debounce_ms, recheck_ms <= 0: the defaults above.
 * 0, or -errno (inotify instances or watches used up) with err one line. */
int kt_cfgwatch_open(struct kt_cfgwatch **out, const char *path,
		     const unsigned char tried[KT_CONFIG_DIGEST_LEN], int debounce_ms, int recheck_ms,
		     char *err, size_t errlen);
/* One fd (an epoll set of its own) readable when kt_cfgwatch_run has work. */
int kt_cfgwatch_fd(const struct kt_cfgwatch *w);
/* Reads events and timers without blocking. True when the content now
 * differs from the last tried: it becomes the last tried; reload, then
 * kt_cfgwatch_tried with the digest of what the reload read. */
bool kt_cfgwatch_run(struct kt_cfgwatch *w);
/* The content a reload (SIGHUP, kthrottlectl reload, or after run) read. */
void kt_cfgwatch_tried(struct kt_cfgwatch *w, const unsigned char digest[KT_CONFIG_DIGEST_LEN]);
/* Contents compared so far (debounces and rechecks fired): for tests. */
uint64_t kt_cfgwatch_checks(const struct kt_cfgwatch *w);
void kt_cfgwatch_close(struct kt_cfgwatch *w);

#endif
