/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Member cgroups named by glob patterns or by paths that may not exist yet:
 * expansion, and an inotify watcher that tells the daemon when a rescan could
 * change the matches, so it need not poll the tree.
 *
 * Paths and patterns are absolute; a ".." component is refused (-EINVAL) so a
 * config cannot escape the cgroup tree. They are normalized first ("//", "/./"
 * and a trailing "/" dropped). Backslash is not an escape character: systemd
 * unit names put literal "\x2d" sequences in cgroup directory names. "*" and
 * "?" do not match a leading "." (glob(3) default); cgroup names never start
 * with one. */
#ifndef KT_CGWATCH_H
#define KT_CGWATCH_H

#include <stdbool.h>

/* Default cap on inotify watches per watcher: bounds kernel memory and the
 * per-user inotify quota (fs.inotify.max_user_watches) one daemon can use. */
#define KT_CGWATCH_MAX 4096

/* True when s contains a glob metacharacter (*, ?, [): the caller decides
 * between expanding a pattern and resolving a plain path. */
bool kt_path_is_pattern(const char *s);

/* The directories matching an absolute glob pattern (a plain path matches
 * itself if it is a directory): sorted by strcmp, deduplicated, directories
 * only. No component of a result is a symbolic link (a cgroup tree has none;
 * following one could escape the tree); "." and ".." entries that glob(3)
 * returns for ".*" are dropped. *out is a malloc'd array of malloc'd
 * strings (NULL when none), free it with kt_cgroup_glob_free. Returns the
 * count (no match is 0, not an error), -EINVAL for a relative pattern or a
 * ".." component, -ENAMETOOLONG beyond PATH_MAX, -ENOMEM. */
int kt_cgroup_glob(const char *pattern, char ***out);
void kt_cgroup_glob_free(char **paths, int n);

struct kt_cgwatch;

/* A watcher on its own inotify instance (non-blocking, close-on-exec) holding
 * at most max_watches watches (<= 0: KT_CGWATCH_MAX). Returns 0 or -errno. */
int kt_cgwatch_open(struct kt_cgwatch **out, int max_watches);
/* The inotify descriptor, for epoll/poll: readable when something changed;
 * then call kt_cgwatch_drain. */
int kt_cgwatch_fd(const struct kt_cgwatch *w);
/* Number of distinct directories watched now (for logs and tests). */
int kt_cgwatch_count(const struct kt_cgwatch *w);

/* Replace the watched set so that creating or removing a directory that could
 * change the matches of any of the n patterns/paths is reported:
 *  - a pattern: every existing directory matching a proper prefix of its
 *    components, from its longest wildcard-free prefix on (for /a/b/x/c/d
 *    with x = "*" and d = "d*": /a/b, every /a/b/x, every /a/b/x/c); if that
 *    prefix does not exist, its nearest existing ancestor instead;
 *  - a plain path: its parent, or if missing its nearest existing ancestor
 *    ("existing" = reached from / without a symlink, as for kt_cgroup_glob;
 *    a path whose intermediate directories appear one by one is noticed
 *    level by level, as long as the caller calls set() after each report).
 * Only directories are watched, never through a final symlink. Watches are
 * (re)added by path every call, so a directory recreated or renamed since the
 * last call is watched as it is now; watches no longer wanted are removed.
 * Shallow directories come first: past the cap the deepest ones are left out
 * and -E2BIG is returned with the rest in place (the caller's periodic rescan
 * is the safety net). -EINVAL (nothing changed) for a bad path/pattern;
 * -ENOSPC when the user's inotify quota is exhausted; 0 otherwise. */
int kt_cgwatch_set(struct kt_cgwatch *w, const char *const *paths, int n);

/* Read every pending event without blocking. True when a directory was
 * created, removed or moved into or out of a watched directory, a watched
 * directory itself went away (deleted, moved, unmounted), or events were lost
 * (queue overflow, read error): the caller should rescan and call set()
 * again. Files and our own watch removals are not reported. */
bool kt_cgwatch_drain(struct kt_cgwatch *w);
void kt_cgwatch_close(struct kt_cgwatch *w);

#endif
