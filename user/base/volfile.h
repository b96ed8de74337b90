/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Reading the files a pod is given (service-account token, CA and
 * namespace; ConfigMap and Secret volumes) the way the kubelet lays them
 * out: every name is a symlink into a timestamped directory through the
 * `..data` link, which the kubelet swaps atomically to publish new content:
 *
 *   token  -> ..data/token
 *   ..data -> ..2026_11_26_13_20_01.123456789
 *
 * The volume rule. The directory part of the configured path is the volume
 * (resolved as the system resolves it). Inside it, the name is walked one
 * step at a time, following symlinks only while:
 *   - a link is relative and has no ".." step (it stays in the volume), and
 *     at most KT_VOLFILE_MAX_LINKS are followed;
 *   - every entry met (links, directories, the file) is owned by root or by
 *     the user kthrottled runs as;
 *   - nothing met is writable by group or others, unless the volume is a
 *     read-only mount (as every pod volume is inside the container); the
 *     volume directory itself may also be sticky (a tmpfs, /tmp);
 *   - the file is a regular file (no FIFO can stall the reader).
 * So a process that cannot already write the volume as root cannot point a
 * name at another file (what O_NOFOLLOW was for), while the kubelet's swaps
 * are followed. Every open resolves afresh: a swapped ..data is read at the
 * next open. */
#ifndef KT_VOLFILE_H
#define KT_VOLFILE_H

#include <stddef.h>

#define KT_VOLFILE_MAX_LINKS 8

/* An O_RDONLY|O_NONBLOCK|O_CLOEXEC fd of `path` under the volume rule, or
 * -errno with why (one line, no path: the caller names the file). */
int kt_volfile_open(const char *path, char *why, size_t whylen);

/* The whole file, at most cap bytes, NUL-terminated in a malloc'd buffer
 * (cap + 1 bytes; zeroed before it is freed on error: it may be a secret).
 * -EFBIG when larger (why "larger than N KiB"); else -errno from the open
 * or the read, with *stage "open" or "read" and why. */
int kt_volfile_read(const char *path, size_t cap, char **out, size_t *outlen, const char **stage,
		    char *why, size_t whylen);

#endif
