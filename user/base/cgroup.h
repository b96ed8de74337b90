/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* cgroup v2 discovery. Never assumes /sys/fs/cgroup: hybrid hosts mount v2 at
 * e.g. /sys/fs/cgroup/unified, so the mount is read from /proc/mounts. */
#ifndef KT_CGROUP_H
#define KT_CGROUP_H

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* First cgroup2 mount in /proc/mounts (or `mounts_path` when not NULL). */
int kt_cgroup2_mount(char *out, size_t outlen, const char *mounts_path);
/* Resolve a config path (absolute, or relative to the cgroup2 mount) to an
 * absolute, canonical directory on cgroup2. On error fills err with the
 * reason (not a directory, not on cgroup v2, ...). */
int kt_cgroup_resolve(const char *path, const char *mount, char *out, size_t outlen,
		      char *err, size_t errlen);
/* Whether `path` is the directory `dir` or below it (both absolute and
 * normalized: one slash between components, no trailing one but "/"). */
static inline bool kt_path_at_or_below(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	/* "/" ends in the separator itself */
	return strncmp(path, dir, n) == 0 &&
	       (path[n] == '/' || path[n] == 0 || (n && dir[n - 1] == '/'));
}

/* 64-bit cgroup id, the value bpf_get_current_cgroup_id() returns. Inline:
 * libkthrottle (kthrottle_connect) uses it too, without this module. */
static inline int kt_cgroup_id(const char *path, uint64_t *id)
{
	struct {
		struct file_handle fh;
		uint64_t cgid;
	} h = { .fh.handle_bytes = sizeof(uint64_t) };
	int mount_id;

	*id = 0; /* callers inlining this cannot tell it is set on success only */
	/* cgroupfs (kernfs) file handles are exactly the 64-bit cgroup id */
	if (name_to_handle_at(AT_FDCWD, path, &h.fh, &mount_id, 0) < 0)
		return -errno;
	if (h.fh.handle_bytes != sizeof(uint64_t))
		return -EINVAL;
	*id = h.cgid;
	return 0;
}

#endif
