// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The volume rule of volfile.h: a path walked one entry at a time with
 * fstatat(AT_SYMLINK_NOFOLLOW) and openat(O_NOFOLLOW) from an fd of the
 * volume directory, so each check holds for the entry actually opened. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "base/volfile.h"

/* A swap between the check of an entry and its open is retried this often. */
#define SWAP_RETRIES 5

static const char *not_regular(mode_t m)
{
	if (S_ISDIR(m))
		return strerror(EISDIR);
	if (S_ISFIFO(m))
		return "a FIFO, not a regular file";
	if (S_ISSOCK(m))
		return "a socket, not a regular file";
	if (S_ISCHR(m))
		return "a character device, not a regular file";
	if (S_ISBLK(m))
		return "a block device, not a regular file";
	return "not a regular file";
}

static bool owner_ok(const struct stat *st)
{
	return st->st_uid == 0 || st->st_uid == geteuid();
}

__attribute__((format(printf, 4, 5))) static int refuse(int err, char *why, size_t whylen,
							  const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, whylen, fmt, ap);
	va_end(ap);
	return -err;
}

/* The volume directory: trusted by owner, and kept from others by its mode,
 * its sticky bit or a read-only mount. *ro: the mount is read-only. */
static int check_volume(int dfd, bool *ro, char *why, size_t whylen)
{
	struct statvfs vfs;
	struct stat st;

	if (fstat(dfd, &st) < 0 || fstatvfs(dfd, &vfs) < 0)
		return refuse(errno, why, whylen, "cannot stat its directory: %s", strerror(errno));
	*ro = vfs.f_flag & ST_RDONLY;
	if (!owner_ok(&st))
		return refuse(EPERM, why, whylen, "its directory is owned by uid %u, not root",
			      (unsigned)st.st_uid);
	if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX) && !*ro)
		return refuse(EPERM, why, whylen,
			      "its directory is writable by group or others (mode %04o) and neither sticky nor a read-only mount",
			      (unsigned)(st.st_mode & 07777));
	return 0;
}

/* One entry met inside the volume. */
static int check_entry(const char *name, const struct stat *st, bool ro, char *why, size_t whylen)
{
	if (!owner_ok(st))
		return refuse(EPERM, why, whylen, "%s is owned by uid %u, not root", name,
			      (unsigned)st->st_uid);
	if ((S_ISREG(st->st_mode) || S_ISDIR(st->st_mode)) && (st->st_mode & (S_IWGRP | S_IWOTH)) && !ro)
		return refuse(EPERM, why, whylen, "%s is writable by group or others (mode %04o)", name,
			      (unsigned)(st->st_mode & 07777));
	return 0;
}

/* Splits the first step off rest (in place): *step, and rest moves on. */
static char *next_step(char **rest)
{
	char *s = *rest, *slash;

	while (*s == '/')
		s++;
	if (!*s)
		return NULL;
	slash = strchr(s, '/');
	if (slash) {
		*slash = '\0';
		*rest = slash + 1;
	} else {
		*rest = s + strlen(s);
	}
	return s;
}

/* One walk from the volume fd; -EAGAIN when an entry changed under it. */
static int walk(int vfd, bool ro, const char *name, char *why, size_t whylen)
{
	char buf[2][PATH_MAX], *rest, *step;
	int cur = dup(vfd), links = 0, which = 0, ret;

	if (cur < 0)
		return refuse(errno, why, whylen, "%s", strerror(errno));
	if (strlen(name) >= sizeof(buf[0])) {
		close(cur);
		return refuse(ENAMETOOLONG, why, whylen, "%s", strerror(ENAMETOOLONG));
	}
	strcpy(buf[0], name);
	rest = buf[0];
	while ((step = next_step(&rest))) {
		struct stat st, got;
		int fd;

		if (!strcmp(step, "."))
			continue;
		if (!strcmp(step, "..")) {
			ret = refuse(EPERM, why, whylen, "a link leads out of the volume (\"..\")");
			goto out;
		}
		if (fstatat(cur, step, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			ret = refuse(errno, why, whylen, "%s: %s", step, strerror(errno));
			/* past a link, the directory it named may have just been
			 * swapped out and removed: walk again */
			if (ret == -ENOENT && links)
				ret = -EAGAIN;
			goto out;
		}
		if ((ret = check_entry(step, &st, ro, why, whylen)))
			goto out;
		if (S_ISLNK(st.st_mode)) {
			char target[PATH_MAX];
			ssize_t n;

			if (++links > KT_VOLFILE_MAX_LINKS) {
				ret = refuse(ELOOP, why, whylen, "more than %d links",
					     KT_VOLFILE_MAX_LINKS);
				goto out;
			}
			n = readlinkat(cur, step, target, sizeof(target) - 1);
			if (n < 0) {
				ret = errno == EINVAL ? -EAGAIN : -errno;
				snprintf(why, whylen, "%s: %s", step, strerror(errno));
				goto out;
			}
			target[n] = '\0';
			if (target[0] == '/') {
				ret = refuse(EPERM, why, whylen,
					     "link %s is absolute: it leads out of the volume", step);
				goto out;
			}
			/* the target's steps come before what was left */
			which ^= 1;
			if ((size_t)snprintf(buf[which], sizeof(buf[which]), "%s%s%s", target,
					     *rest ? "/" : "", rest) >= sizeof(buf[which])) {
				ret = refuse(ENAMETOOLONG, why, whylen, "%s", strerror(ENAMETOOLONG));
				goto out;
			}
			rest = buf[which];
			continue;
		}
		if (S_ISDIR(st.st_mode)) {
			if (!*rest) {
				ret = refuse(EISDIR, why, whylen, "%s", strerror(EISDIR));
				goto out;
			}
			fd = openat(cur, step, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		} else {
			if (*rest) {
				ret = refuse(ENOTDIR, why, whylen, "%s: %s", step, strerror(ENOTDIR));
				goto out;
			}
			if (!S_ISREG(st.st_mode)) {
				ret = refuse(EINVAL, why, whylen, "%s", not_regular(st.st_mode));
				goto out;
			}
			/* O_NONBLOCK: should a FIFO appear here after all, open()
			 * returns at once and the fstat below refuses it */
			fd = openat(cur, step, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
		}
		if (fd < 0) {
			ret = errno == ELOOP || errno == ENOENT || errno == ENOTDIR ? -EAGAIN : -errno;
			snprintf(why, whylen, "%s: %s", step, strerror(errno));
			goto out;
		}
		if (fstat(fd, &got) < 0 || got.st_dev != st.st_dev || got.st_ino != st.st_ino) {
			close(fd);
			ret = -EAGAIN; /* swapped between the check and the open */
			snprintf(why, whylen, "%s changed while it was opened", step);
			goto out;
		}
		close(cur);
		cur = fd;
		if (!S_ISDIR(st.st_mode))
			return cur; /* the file */
	}
	ret = refuse(EISDIR, why, whylen, "%s", strerror(EISDIR));
out:
	close(cur);
	return ret;
}

int kt_volfile_open(const char *path, char *why, size_t whylen)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/'), *name = slash ? slash + 1 : path;
	bool ro = false;
	int vfd, ret;

	if (!*name || !strcmp(name, ".") || !strcmp(name, ".."))
		return refuse(EISDIR, why, whylen, "%s", strerror(EISDIR));
	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == path)
		snprintf(dir, sizeof(dir), "/");
	else if ((size_t)(slash - path) >= sizeof(dir))
		return refuse(ENAMETOOLONG, why, whylen, "%s", strerror(ENAMETOOLONG));
	else
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	vfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (vfd < 0)
		return refuse(errno, why, whylen, "%s", strerror(errno));
	ret = check_volume(vfd, &ro, why, whylen);
	for (int i = 0; !ret; i++) {
		int fd = walk(vfd, ro, name, why, whylen);

		if (fd != -EAGAIN || i == SWAP_RETRIES) {
			close(vfd);
			return fd;
		}
	}
	close(vfd);
	return ret;
}

int kt_volfile_read(const char *path, size_t cap, char **out, size_t *outlen, const char **stage,
		    char *why, size_t whylen)
{
	struct stat st;
	char *buf = NULL;
	size_t len = 0;
	ssize_t n;
	int fd, ret = 0;

	*stage = "open";
	fd = kt_volfile_open(path, why, whylen);
	if (fd < 0)
		return fd;
	*stage = "read";
	if (fstat(fd, &st) < 0) {
		ret = -errno;
		snprintf(why, whylen, "%s", strerror(-ret));
		goto out;
	}
	/* st_size is a first check (procfs says 0, a file may grow): the read
	 * loop itself stops at cap + 1 bytes */
	if (st.st_size < 0 || (uint64_t)st.st_size > cap)
		goto too_big;
	buf = malloc(cap + 1);
	if (!buf) {
		ret = -ENOMEM;
		snprintf(why, whylen, "%s", strerror(ENOMEM));
		goto out;
	}
	while (len <= cap) {
		n = read(fd, buf + len, cap + 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ret = -errno;
			snprintf(why, whylen, "%s", strerror(-ret));
			goto out;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	if (len > cap)
		goto too_big;
	buf[len] = '\0';
	*out = buf;
	*outlen = len;
	buf = NULL;
	goto out;
too_big:
	ret = -EFBIG;
	if (cap >= (1 << 20))
		snprintf(why, whylen, "larger than %zu MiB", cap >> 20);
	else
		snprintf(why, whylen, "larger than %zu KiB", cap >> 10);
out:
	if (buf) {
		explicit_bzero(buf, len);
		free(buf);
	}
	close(fd);
	return ret;
}
