/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <mntent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <linux/magic.h>
#include "base/cgroup.h"

int kt_cgroup2_mount(char *out, size_t outlen, const char *mounts_path)
{
	FILE *f = setmntent(mounts_path ? mounts_path : "/proc/mounts", "r");
	struct mntent *m;
	int err = -ENOENT;

	if (!f)
		return -errno;
	while ((m = getmntent(f))) {
		if (strcmp(m->mnt_type, "cgroup2") == 0) {
			if (strlen(m->mnt_dir) >= outlen) {
				err = -ENAMETOOLONG;
				break;
			}
			strcpy(out, m->mnt_dir);
			err = 0;
			break;
		}
	}
	endmntent(f);
	return err;
}

int kt_cgroup_resolve(const char *path, const char *mount, char *out, size_t outlen, char *err,
		      size_t errlen)
{
	char joined[PATH_MAX], real[PATH_MAX];
	struct statfs sfs;
	struct stat st;

	if (path[0] == '/')
		snprintf(joined, sizeof(joined), "%s", path);
	else if (mount)
		snprintf(joined, sizeof(joined), "%s/%s", mount, path);
	else {
		snprintf(err, errlen, "relative path and no cgroup v2 mount found in /proc/mounts");
		return -ENOENT;
	}
	if (!realpath(joined, real)) {
		int e = errno;
		snprintf(err, errlen, "%s: %s", joined, strerror(e));
		return -e;
	}
	if (stat(real, &st) < 0 || !S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "%s: not a directory", real);
		return -ENOTDIR;
	}
	if (statfs(real, &sfs) < 0 || sfs.f_type != CGROUP2_SUPER_MAGIC) {
		snprintf(err, errlen, "%s: not a cgroup v2 directory%s%s", real,
			 mount ? " (cgroup v2 is mounted at " : "", mount ? mount : "");
		if (mount)
			strncat(err, ")", errlen - strlen(err) - 1);
		return -EINVAL;
	}
	if (strlen(real) >= outlen) {
		snprintf(err, errlen, "%s: path too long", real);
		return -ENAMETOOLONG;
	}
	strcpy(out, real);
	return 0;
}
