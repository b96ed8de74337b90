// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The config file watcher (cfgwatch.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/timerfd.h>
#include "control/cfgwatch.h"

/* IN_MODIFY too: a writer that keeps the file open is seen (debounced) */
#define KT_CFW_MASK                                                                          \
	(IN_CLOSE_WRITE | IN_MODIFY | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE |  \
	 IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)
#define KT_CFW_MAX_READS 64 /* per run: the rest keeps the fd readable */

struct kt_cfgwatch {
	int epfd, ifd, debounce_fd, recheck_fd;
	int wd; /* -1: lost (the directory went away), re-added by path */
	int debounce_ms;
	uint64_t checks;
	char path[PATH_MAX], dir[PATH_MAX], base[NAME_MAX + 1];
	unsigned char tried[KT_CONFIG_DIGEST_LEN];
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
};

static void arm(int fd, int ms)
{
	struct itimerspec its = { .it_value = { ms / 1000, (long)(ms % 1000) * 1000000 } };

	timerfd_settime(fd, 0, &its, NULL);
}

/* (Re)adds the watch by path: a directory replaced since is watched anew,
 * the old watch dropped. A failure keeps what there was (next recheck). */
static int rewatch(struct kt_cfgwatch *w)
{
	int wd = inotify_add_watch(w->ifd, w->dir, KT_CFW_MASK);

	if (wd < 0)
		return -errno;
	if (w->wd >= 0 && w->wd != wd)
		inotify_rm_watch(w->ifd, w->wd);
	w->wd = wd;
	return 0;
}

int kt_cfgwatch_open(struct kt_cfgwatch **out, const char *path,
		     const unsigned char tried[KT_CONFIG_DIGEST_LEN], int debounce_ms, int recheck_ms,
		     char *err, size_t errlen)
{
	struct epoll_event ev = { .events = EPOLLIN };
	struct kt_cfgwatch *w;
	const char *slash;
	int ret;

	*out = NULL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->wd = -1;
	w->debounce_ms = debounce_ms > 0 ? debounce_ms : KT_CFGWATCH_DEBOUNCE_MS;
	if (recheck_ms <= 0)
		recheck_ms = KT_CFGWATCH_RECHECK_MS;
	slash = strrchr(path, '/');
	if (snprintf(w->path, sizeof(w->path), "%s", path) >= (int)sizeof(w->path) ||
	    snprintf(w->base, sizeof(w->base), "%s", slash ? slash + 1 : path) >= (int)sizeof(w->base)) {
		free(w);
		snprintf(err, errlen, "%s: path too long to watch", path);
		return -ENAMETOOLONG;
	}
	if (!slash)
		snprintf(w->dir, sizeof(w->dir), ".");
	else if (slash == path)
		snprintf(w->dir, sizeof(w->dir), "/");
	else
		snprintf(w->dir, sizeof(w->dir), "%.*s", (int)(slash - path), path);
	w->epfd = epoll_create1(EPOLL_CLOEXEC);
	w->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	w->debounce_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	w->recheck_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (w->epfd < 0 || w->ifd < 0 || w->debounce_fd < 0 || w->recheck_fd < 0 ||
	    epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->ifd, &ev) < 0 ||
	    epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->debounce_fd, &ev) < 0 ||
	    epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->recheck_fd, &ev) < 0) {
		ret = -errno;
		snprintf(err, errlen, "cannot watch %s: %s", path, strerror(-ret));
		kt_cfgwatch_close(w);
		return ret;
	}
	ret = rewatch(w);
	if (ret) {
		snprintf(err, errlen, "cannot watch %s (inotify on %s): %s", path, w->dir,
			 strerror(-ret));
		kt_cfgwatch_close(w);
		return ret;
	}
	struct itimerspec its = {
		.it_value = { recheck_ms / 1000, (long)(recheck_ms % 1000) * 1000000 },
		.it_interval = { recheck_ms / 1000, (long)(recheck_ms % 1000) * 1000000 },
	};
	timerfd_settime(w->recheck_fd, 0, &its, NULL);
	if (tried)
		memcpy(w->tried, tried, KT_CONFIG_DIGEST_LEN);
	else
		kt_config_file_digest(w->path, w->tried);
	*out = w;
	return 0;
}

int kt_cfgwatch_fd(const struct kt_cfgwatch *w)
{
	return w ? w->epfd : -1;
}

/* Whether an event may mean another content behind the path: the name
 * itself, the kubelet's ..data swap, or a watch lost or overflowed. */
static bool relevant(struct kt_cfgwatch *w, const struct inotify_event *ev)
{
	if (ev->mask & IN_Q_OVERFLOW)
		return true;
	if (ev->wd == w->wd && (ev->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT))) {
		if (ev->mask & (IN_IGNORED | IN_UNMOUNT))
			w->wd = -1; /* gone for good: re-added at the debounce */
		return true;
	}
	if (ev->wd != w->wd || !ev->len)
		return false;
	return !strcmp(ev->name, w->base) || !strcmp(ev->name, "..data");
}

bool kt_cfgwatch_run(struct kt_cfgwatch *w)
{
	unsigned char now[KT_CONFIG_DIGEST_LEN];
	bool seen = false, due = false;
	uint64_t x;

	if (!w)
		return false;
	for (int r = 0; r < KT_CFW_MAX_READS; r++) {
		ssize_t n = read(w->ifd, w->buf, sizeof(w->buf));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n < 0 && errno != EAGAIN)
				seen = true; /* events may be lost: look */
			break;
		}
		for (char *p = w->buf; p < w->buf + n;) {
			const struct inotify_event *ev = (const struct inotify_event *)p;

			seen |= relevant(w, ev);
			p += sizeof(*ev) + ev->len;
		}
	}
	if (seen)
		arm(w->debounce_fd, w->debounce_ms); /* from the last event on */
	if (read(w->debounce_fd, &x, sizeof(x)) == sizeof(x))
		due = true;
	if (read(w->recheck_fd, &x, sizeof(x)) == sizeof(x))
		due = true;
	if (!due)
		return false;
	rewatch(w);
	w->checks++;
	kt_config_file_digest(w->path, now);
	if (!memcmp(now, w->tried, sizeof(now)))
		return false;
	memcpy(w->tried, now, sizeof(now));
	return true;
}

void kt_cfgwatch_tried(struct kt_cfgwatch *w, const unsigned char digest[KT_CONFIG_DIGEST_LEN])
{
	if (w)
		memcpy(w->tried, digest, KT_CONFIG_DIGEST_LEN);
}

uint64_t kt_cfgwatch_checks(const struct kt_cfgwatch *w)
{
	return w ? w->checks : 0;
}

void kt_cfgwatch_close(struct kt_cfgwatch *w)
{
	if (!w)
		return;
	int fds[] = { w->epfd, w->ifd, w->debounce_fd, w->recheck_fd };

	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(w);
}
