/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include "base/cgwatch.h"

/* IN_MOVE_SELF besides the documented set: a cgroup directory can be renamed,
 * and a watched literal prefix moving away must be noticed like a deletion.
 * IN_DONT_FOLLOW: a symlink put where a directory was is never watched. */
#define KT_CGW_MASK                                                                  \
	(IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF |      \
	 IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW)
/* Reads per drain: enough for a full default queue (16,384 events with
 * names); past it the fd stays readable and the next drain goes on. */
#define KT_CGW_MAX_READS 512

struct kt_cgwatch {
	int fd;
	int max;
	int *wds; /* sorted, distinct */
	int nwds;
	/* room for at least one event with a NAME_MAX name, as read(2) needs */
	char buf[16384] __attribute__((aligned(__alignof__(struct inotify_event))));
};

/* One parsed pattern or path. */
struct kt_spec {
	char *norm; /* normalized: "/" or "/c1/.../cn", no "." or ".." */
	int n;      /* components */
	int lit;    /* leading components without a metacharacter */
};

/* A growable list of malloc'd strings. */
struct kt_strv {
	char **v;
	int n, cap;
};

bool kt_path_is_pattern(const char *s)
{
	return s && strpbrk(s, "*?[") != NULL;
}

/* Normalize an absolute path or pattern: one slash between components, "."
 * dropped, ".." refused (it would let a config leave the cgroup tree; and
 * resolving it lexically would be wrong past a symlink). */
static int kt_normalize(const char *in, struct kt_spec *sp)
{
	size_t len = in ? strlen(in) : 0;
	const char *p = in;
	char *out, *o;

	sp->norm = NULL;
	sp->n = sp->lit = 0;
	if (!in || in[0] != '/')
		return -EINVAL;
	out = malloc(len + 2);
	if (!out)
		return -ENOMEM;
	o = out;
	while (*p) {
		const char *start;
		size_t clen;

		while (*p == '/')
			p++;
		start = p;
		while (*p && *p != '/')
			p++;
		clen = (size_t)(p - start);
		if (clen == 0 || (clen == 1 && start[0] == '.'))
			continue;
		if (clen == 2 && start[0] == '.' && start[1] == '.') {
			free(out);
			return -EINVAL;
		}
		*o++ = '/';
		memcpy(o, start, clen);
		o += clen;
		if (sp->lit == sp->n && !memchr(start, '*', clen) && !memchr(start, '?', clen) &&
		    !memchr(start, '[', clen))
			sp->lit++;
		sp->n++;
	}
	if (o == out)
		*o++ = '/';
	*o = 0;
	if ((size_t)(o - out) >= PATH_MAX) {
		free(out);
		return -ENAMETOOLONG;
	}
	sp->norm = out;
	return 0;
}

/* The first d components of a normalized path ("/" for d == 0). */
static char *kt_prefix(const char *norm, int d)
{
	const char *p = norm;

	if (d == 0)
		return strdup("/");
	for (int i = 0; i < d && *p; i++) {
		p++;
		while (*p && *p != '/')
			p++;
	}
	return strndup(norm, (size_t)(p - norm));
}

static bool kt_is_dir_nofollow(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The largest d <= maxd such that the first d components of a normalized
 * path are all real directories (lstat, no symlink): 0 is the root. */
static int kt_real_depth(const char *norm, int maxd)
{
	char *buf = strdup(norm);
	int d = 0;

	if (!buf)
		return -ENOMEM;
	for (char *p = buf; d < maxd && *p == '/';) {
		char save;

		p++;
		while (*p && *p != '/')
			p++;
		save = *p;
		*p = 0;
		if (!kt_is_dir_nofollow(buf))
			break;
		*p = save;
		d++;
	}
	free(buf);
	return d;
}

/* A glob(3) result is kept only when it has no "." or ".." component (glob
 * returns both for ".*") and, from the first wildcard component on, every
 * component is a real directory: glob itself walks through symlinks. The
 * literal prefix was checked once before globbing. 1 keep, 0 drop, -ENOMEM. */
static int kt_result_ok(const char *path, int lit)
{
	char *buf;
	bool ok = true;
	int comp = 0;

	if (strcmp(path, "/") == 0)
		return kt_is_dir_nofollow(path);
	buf = strdup(path);
	if (!buf)
		return -ENOMEM;
	for (char *p = buf; ok && *p == '/';) {
		char *start = ++p, save;

		while (*p && *p != '/')
			p++;
		if ((p - start == 1 && start[0] == '.') ||
		    (p - start == 2 && start[0] == '.' && start[1] == '.'))
			ok = false;
		else if (++comp > lit || !*p) {
			save = *p;
			*p = 0;
			ok = kt_is_dir_nofollow(buf);
			*p = save;
		}
	}
	free(buf);
	return ok;
}

static int kt_cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int kt_cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	return (x > y) - (x < y);
}

/* Sort and drop duplicates in place; returns the new count. */
static int kt_sort_uniq(char **v, int n)
{
	int k = 0;

	if (n <= 0)
		return 0;
	qsort(v, (size_t)n, sizeof(*v), kt_cmp_str);
	for (int i = 1; i < n; i++) {
		if (strcmp(v[i], v[k]) == 0)
			free(v[i]);
		else
			v[++k] = v[i];
	}
	return k + 1;
}

static int kt_strv_push(struct kt_strv *sv, char *s)
{
	if (!s)
		return -ENOMEM;
	if (sv->n == sv->cap) {
		int cap = sv->cap ? sv->cap * 2 : 16;
		char **v = realloc(sv->v, (size_t)cap * sizeof(*v));

		if (!v) {
			free(s);
			return -ENOMEM;
		}
		sv->v = v;
		sv->cap = cap;
	}
	sv->v[sv->n++] = s;
	return 0;
}

static void kt_strv_clear(struct kt_strv *sv)
{
	for (int i = 0; i < sv->n; i++)
		free(sv->v[i]);
	sv->n = 0;
}

void kt_cgroup_glob_free(char **paths, int n)
{
	if (!paths)
		return;
	for (int i = 0; i < n; i++)
		free(paths[i]);
	free(paths);
}

/* Append the directories matching an already normalized spec to sv. */
static int kt_glob_into(const struct kt_spec *sp, struct kt_strv *sv)
{
	glob_t g;
	int r, err = 0;

	/* NOESCAPE: "\x2d" in systemd unit cgroup names is literal. ONLYDIR is
	 * only a hint, kt_result_ok checks. Sorting is ours (strcmp, not the
	 * locale's collation). */
	r = kt_real_depth(sp->norm, sp->lit);
	if (r < 0)
		return r;
	if (r < sp->lit)
		return 0; /* the literal prefix is missing or goes through a symlink */
	r = glob(sp->norm, GLOB_ONLYDIR | GLOB_NOESCAPE | GLOB_NOSORT, NULL, &g);
	if (r == GLOB_NOMATCH)
		return 0;
	if (r == GLOB_NOSPACE)
		return -ENOMEM;
	if (r != 0)
		return -EIO;
	for (size_t i = 0; i < g.gl_pathc && !err; i++) {
		if (sv->n == INT_MAX)
			err = -E2BIG;
		else if ((err = kt_result_ok(g.gl_pathv[i], sp->lit)) > 0)
			err = kt_strv_push(sv, strdup(g.gl_pathv[i]));
	}
	globfree(&g);
	return err;
}

int kt_cgroup_glob(const char *pattern, char ***out)
{
	struct kt_strv sv = { 0 };
	struct kt_spec sp;
	int err;

	if (!out)
		return -EINVAL;
	*out = NULL;
	err = kt_normalize(pattern, &sp);
	if (err)
		return err;
	err = kt_glob_into(&sp, &sv);
	free(sp.norm);
	if (err) {
		kt_cgroup_glob_free(sv.v, sv.n);
		return err;
	}
	sv.n = kt_sort_uniq(sv.v, sv.n);
	if (sv.n == 0) {
		free(sv.v);
		return 0;
	}
	*out = sv.v;
	return sv.n;
}

int kt_cgwatch_open(struct kt_cgwatch **out, int max_watches)
{
	struct kt_cgwatch *w;

	*out = NULL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (w->fd < 0) {
		int e = errno;

		free(w);
		return -e;
	}
	w->max = max_watches > 0 ? max_watches : KT_CGWATCH_MAX;
	*out = w;
	return 0;
}

int kt_cgwatch_fd(const struct kt_cgwatch *w)
{
	return w ? w->fd : -1;
}

int kt_cgwatch_count(const struct kt_cgwatch *w)
{
	return w ? w->nwds : 0;
}

/* The deepest directory among the first d components reached without a
 * symlink (at worst the root). 0 or -ENOMEM. */
static int kt_nearest_dir(const char *norm, int d, char **out, int *depth)
{
	*out = NULL;
	*depth = kt_real_depth(norm, d);
	if (*depth < 0)
		return *depth;
	*out = kt_prefix(norm, *depth);
	return *out ? 0 : -ENOMEM;
}

/* Sorted, distinct wds; returns the new count. */
static int kt_wd_uniq(int *v, int n)
{
	int k = 0;

	if (n <= 0)
		return 0;
	qsort(v, (size_t)n, sizeof(*v), kt_cmp_int);
	for (int i = 1; i < n; i++)
		if (v[i] != v[k])
			v[++k] = v[i];
	return k + 1;
}

static bool kt_wd_has(const int *v, int n, int wd)
{
	return n > 0 && bsearch(&wd, v, (size_t)n, sizeof(*v), kt_cmp_int) != NULL;
}

int kt_cgwatch_set(struct kt_cgwatch *w, const char *const *paths, int n)
{
	struct kt_spec *sp = NULL;
	char **fixed = NULL; /* the directory each spec is anchored at */
	int *fdepth = NULL, *gfrom = NULL, *gto = NULL; /* glob depths [gfrom, gto) */
	struct kt_strv bucket = { 0 };
	int *nw = NULL, nnw = 0, maxdepth = -1, err = 0, soft = 0;

	if (!w || n < 0 || (n > 0 && !paths))
		return -EINVAL;
	sp = calloc((size_t)n + 1, sizeof(*sp));
	fixed = calloc((size_t)n + 1, sizeof(*fixed));
	fdepth = calloc((size_t)n + 1, sizeof(*fdepth));
	gfrom = calloc((size_t)n + 1, sizeof(*gfrom));
	gto = calloc((size_t)n + 1, sizeof(*gto));
	nw = malloc((size_t)w->max * sizeof(*nw));
	if (!sp || !fixed || !fdepth || !gfrom || !gto || !nw) {
		err = -ENOMEM;
		goto out;
	}
	/* All parsed before any watch changes: a bad config changes nothing. */
	for (int i = 0; i < n && !err; i++)
		err = kt_normalize(paths[i], &sp[i]);
	if (err)
		goto out;

	for (int i = 0; i < n; i++) {
		bool plain = sp[i].lit == sp[i].n;
		int anchor = plain ? (sp[i].n > 0 ? sp[i].n - 1 : 0) : sp[i].lit;

		err = kt_nearest_dir(sp[i].norm, anchor, &fixed[i], &fdepth[i]);
		if (err)
			goto out;
		/* Deeper levels only exist below an existing literal prefix. */
		if (!plain && fixed[i] && fdepth[i] == anchor) {
			gfrom[i] = anchor + 1;
			gto[i] = sp[i].n;
		}
		if (fdepth[i] > maxdepth)
			maxdepth = fdepth[i];
		if (gto[i] - 1 > maxdepth)
			maxdepth = gto[i] - 1;
	}

	/* Breadth first over all specs: at the cap, what is left out is the
	 * deepest, and every literal prefix is watched before any expansion. */
	for (int d = 0; d <= maxdepth && !soft; d++) {
		for (int i = 0; i < n && !err; i++) {
			if (fixed[i] && fdepth[i] == d)
				err = kt_strv_push(&bucket, strdup(fixed[i]));
			if (!err && d >= gfrom[i] && d < gto[i]) {
				struct kt_spec pre = { kt_prefix(sp[i].norm, d), d, sp[i].lit };

				err = pre.norm ? kt_glob_into(&pre, &bucket) : -ENOMEM;
				free(pre.norm);
			}
		}
		if (err)
			goto out;
		bucket.n = kt_sort_uniq(bucket.v, bucket.n);
		for (int j = 0; j < bucket.n; j++) {
			int wd;

			if (nnw == w->max) {
				soft = -E2BIG;
				break;
			}
			/* Re-adding a watched inode returns its wd unchanged and
			 * loses no event; a recreated or renamed directory gets
			 * the inode that is there now. */
			wd = inotify_add_watch(w->fd, bucket.v[j], KT_CGW_MASK);
			if (wd >= 0) {
				nw[nnw++] = wd;
				continue;
			}
			if (errno == ENOSPC) {
				soft = -ENOSPC;
				break;
			}
			if (errno == ENOMEM) {
				err = -ENOMEM;
				goto out;
			}
			/* Gone or replaced since the scan: the parent's events
			 * report it; unreadable: nothing to watch there. */
		}
		kt_strv_clear(&bucket);
	}

	nnw = kt_wd_uniq(nw, nnw);
	for (int i = 0; i < w->nwds; i++)
		if (!kt_wd_has(nw, nnw, w->wds[i]))
			inotify_rm_watch(w->fd, w->wds[i]); /* EINVAL if already dead */
	free(w->wds);
	w->wds = nw;
	w->nwds = nnw;
	nw = NULL;
	err = soft;
out:
	if (err && nw && nnw > 0) {
		/* Hard failure midway: keep old and new watches both, so
		 * nothing that was reported before goes quiet. */
		int *u = realloc(nw, ((size_t)nnw + (size_t)w->nwds) * sizeof(*u));

		if (u) {
			if (w->nwds)
				memcpy(u + nnw, w->wds, (size_t)w->nwds * sizeof(*u));
			free(w->wds);
			w->wds = u;
			w->nwds = kt_wd_uniq(u, nnw + w->nwds);
			nw = NULL;
		}
	}
	free(nw);
	kt_strv_clear(&bucket);
	free(bucket.v);
	for (int i = 0; sp && i < n; i++) {
		free(sp[i].norm);
		if (fixed)
			free(fixed[i]);
	}
	free(sp);
	free(fixed);
	free(fdepth);
	free(gfrom);
	free(gto);
	return err;
}

/* A watch the kernel dropped (its directory is gone) leaves the set. */
static void kt_forget_wd(struct kt_cgwatch *w, int wd)
{
	int *p;

	if (w->nwds == 0)
		return;
	p = bsearch(&wd, w->wds, (size_t)w->nwds, sizeof(*p), kt_cmp_int);
	if (!p)
		return;
	memmove(p, p + 1, (size_t)(w->wds + w->nwds - (p + 1)) * sizeof(*p));
	w->nwds--;
}

bool kt_cgwatch_drain(struct kt_cgwatch *w)
{
	bool changed = false;

	if (!w)
		return false;
	for (int r = 0; r < KT_CGW_MAX_READS; r++) {
		ssize_t len = read(w->fd, w->buf, sizeof(w->buf));

		if (len < 0 && errno == EINTR)
			continue;
		if (len < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (len <= 0) {
			changed = true; /* events may be lost: rescan */
			break;
		}
		for (size_t off = 0; off + sizeof(struct inotify_event) <= (size_t)len;) {
			struct inotify_event ev;

			memcpy(&ev, w->buf + off, sizeof(ev));
			off += sizeof(ev) + ev.len;
			if (ev.mask & (IN_Q_OVERFLOW | IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT))
				changed = true;
			if ((ev.mask & IN_ISDIR) &&
			    (ev.mask & (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO)))
				changed = true;
			if (ev.mask & IN_IGNORED)
				kt_forget_wd(w, ev.wd);
		}
	}
	return changed;
}

void kt_cgwatch_close(struct kt_cgwatch *w)
{
	if (!w)
		return;
	close(w->fd);
	free(w->wds);
	free(w);
}
