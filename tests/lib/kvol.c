// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The kubelet's volume layout and atomic writer (kvol.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include "ktest.h"
#include "kvol.h"

#define MAX_FILES 32

int ktest_kvol_create(struct ktest_kvol *v, const char *parent, const char *name,
		      enum ktest_kvol_kind kind)
{
	memset(v, 0, sizeof(*v));
	if (ktest_private_mounts()) {
		fprintf(stderr, "kvol: cannot make a private mount namespace: %s\n", strerror(errno));
		return -1;
	}
	snprintf(v->host, sizeof(v->host), "%s/%s.host", parent, name);
	snprintf(v->pod, sizeof(v->pod), "%s/%s", parent, name);
	if (mkdir(v->host, 0755) || mkdir(v->pod, 0755)) {
		fprintf(stderr, "kvol: mkdir %s: %s\n", v->host, strerror(errno));
		return -1;
	}
	if (kind == KTEST_KVOL_SECRET) {
		if (mount("tmpfs", v->host, "tmpfs", 0, "mode=1777,size=1m")) {
			fprintf(stderr, "kvol: tmpfs on %s: %s\n", v->host, strerror(errno));
			return -1;
		}
	} else if (chmod(v->host, 0777)) { /* an emptyDir: 0777 whatever the umask */
		return -1;
	}
	if (mount(v->host, v->pod, NULL, MS_BIND, NULL) ||
	    mount(NULL, v->pod, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL)) {
		fprintf(stderr, "kvol: read-only bind of %s: %s\n", v->host, strerror(errno));
		umount2(v->pod, MNT_DETACH);
		return -1;
	}
	v->mounted = true;
	return 0;
}

static int write_whole(const char *path, const char *content)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	size_t len = strlen(content), off = 0;

	if (fd < 0)
		return -1;
	while (off < len) {
		ssize_t n = write(fd, content + off, len - off);

		if (n <= 0) {
			close(fd);
			return -1;
		}
		off += (size_t)n;
	}
	fchmod(fd, 0644);
	return close(fd);
}

/* The target of host/..data ("" when there is none). */
static void current_dir(const struct ktest_kvol *v, char *out, size_t len)
{
	char link[PATH_MAX + 16];
	ssize_t n;

	snprintf(link, sizeof(link), "%s/..data", v->host);
	n = readlink(link, out, len - 1);
	out[n > 0 ? n : 0] = '\0';
}

static bool listed(const char *name, const struct ktest_kvol_file *files, int n)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(files[i].name, name))
			return true;
	return false;
}

int ktest_kvol_publish(struct ktest_kvol *v, const struct ktest_kvol_file *files, int n)
{
	char old[PATH_MAX], dir[96], path[2 * PATH_MAX], tmp[PATH_MAX + 16], data[PATH_MAX + 16];
	struct timespec ts;
	struct tm tm;
	DIR *d;
	struct dirent *e;

	current_dir(v, old, sizeof(old));
	/* 1. the new timestamped directory with every file */
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	for (;;) {
		snprintf(dir, sizeof(dir), "..%04d_%02d_%02d_%02d_%02d_%02d.%09u", tm.tm_year + 1900,
			 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
			 (unsigned)ts.tv_nsec + v->gen++);
		snprintf(path, sizeof(path), "%s/%s", v->host, dir);
		if (!mkdir(path, 0700))
			break;
		if (errno != EEXIST)
			return -1;
	}
	for (int i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "%s/%s/%s", v->host, dir, files[i].name);
		if (write_whole(path, files[i].content))
			return -1;
	}
	snprintf(path, sizeof(path), "%s/%s", v->host, dir);
	chmod(path, 0755);
	/* 2. ..data swapped in one rename */
	snprintf(tmp, sizeof(tmp), "%s/..data_tmp", v->host);
	snprintf(data, sizeof(data), "%s/..data", v->host);
	unlink(tmp);
	if (symlink(dir, tmp) || rename(tmp, data))
		return -1;
	/* 3. a link per new name, none for names gone */
	for (int i = 0; i < n; i++) {
		char target[PATH_MAX];

		snprintf(path, sizeof(path), "%s/%s", v->host, files[i].name);
		snprintf(target, sizeof(target), "..data/%s", files[i].name);
		if (symlink(target, path) && errno != EEXIST)
			return -1;
	}
	d = opendir(v->host);
	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.' || listed(e->d_name, files, n))
			continue;
		snprintf(path, sizeof(path), "%s/%s", v->host, e->d_name);
		unlink(path);
	}
	if (d)
		closedir(d);
	/* 4. the old directory goes */
	if (old[0]) {
		snprintf(path, sizeof(path), "%s/%s", v->host, old);
		ktest_rmtree(path);
	}
	return 0;
}

int ktest_kvol_update(struct ktest_kvol *v, const char *name, const char *content)
{
	struct ktest_kvol_file files[MAX_FILES];
	char *bodies[MAX_FILES] = { 0 }, cur[PATH_MAX], dirpath[2 * PATH_MAX];
	int n = 0, ret = -1;
	bool seen = false;
	DIR *d;
	struct dirent *e;

	current_dir(v, cur, sizeof(cur));
	snprintf(dirpath, sizeof(dirpath), "%s/%s", v->host, cur);
	d = cur[0] ? opendir(dirpath) : NULL;
	while (d && (e = readdir(d)) && n < MAX_FILES) {
		char path[3 * PATH_MAX];

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dirpath, e->d_name);
		files[n].name = strdup(e->d_name);
		if (!strcmp(e->d_name, name)) {
			files[n].content = content;
			seen = true;
		} else {
			files[n].content = bodies[n] = ktest_slurp(path);
		}
		n++;
	}
	if (d)
		closedir(d);
	if (!seen && n < MAX_FILES) {
		files[n].name = strdup(name);
		files[n++].content = content;
	}
	ret = ktest_kvol_publish(v, files, n);
	for (int i = 0; i < n; i++) {
		free((char *)files[i].name);
		free(bodies[i]);
	}
	return ret;
}

const char *ktest_kvol_path(const struct ktest_kvol *v, const char *name, char *out, size_t len)
{
	snprintf(out, len, "%s/%s", v->pod, name);
	return out;
}

void ktest_kvol_remove(struct ktest_kvol *v)
{
	if (v->mounted) {
		umount2(v->pod, MNT_DETACH);
		v->mounted = false;
	}
	if (v->pod[0])
		rmdir(v->pod);
	if (v->host[0]) {
		umount2(v->host, MNT_DETACH); /* a Secret's tmpfs; EINVAL otherwise */
		ktest_rmtree(v->host);
	}
	v->host[0] = v->pod[0] = '\0';
}
