/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <linux/magic.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "kernel/bpf_loader.h"
#include "kernel/verify.h"
#include "base/log.h"
#include "connect.skel.h"
#include "sendmsg.skel.h"
#include "egress.skel.h"
#include "sock.skel.h"
#include "sockops.skel.h"

static const char *const map_names[] = {
	"kt_buckets", "kt_counters", "kt_members", "kt_dests", "kt_ports", "kt_limits", "kt_leases",
	"kt_sk_pace", "kt_pace_socks", /* TCP pacing (sockops); absent in older pin dirs */
	"kt_anc_cache", "kt_gen",      /* sub-cgroups' nearest member; absent in older pin dirs */
	"kt_events",                   /* throttle events; absent in older pin dirs */
	"kt_coop",                     /* cooperative limits; absent in older pin dirs */
	"kt_sk_sa", "kt_sk_eg",        /* per-socket decisions; absent in older pin dirs */
	"kt_idle_hooks",               /* hooks no limit uses; absent in older pin dirs */
	"kt_shadow",                   /* shadow limits' refusals; absent in older pin dirs */
	"kt_up",                       /* the bucket one level up (parent:); absent in older pin dirs */
	"kt_inflight", "kt_sk_slot",   /* in-flight limits' open counts; absent in older pin dirs */
	"kt_sk_call",                  /* where TCP conversations stand (unit call); absent in older pin dirs */
	"kt_limit_ext",                /* per-limit settings beyond kt_limits; absent in older pin dirs */
	"kt_sk_depart",                /* call turns sent late under fq (EDT); absent in older pin dirs */
};
/* bpf/kthrottle.bpf.h's types, in map_names' order */
static const __u32 map_types[] = {
	BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_PERCPU_ARRAY, BPF_MAP_TYPE_HASH, BPF_MAP_TYPE_LPM_TRIE,
	BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_HASH,
	BPF_MAP_TYPE_SK_STORAGE, BPF_MAP_TYPE_ARRAY,
	BPF_MAP_TYPE_LRU_HASH, BPF_MAP_TYPE_ARRAY,
	BPF_MAP_TYPE_RINGBUF,
	BPF_MAP_TYPE_ARRAY,
	BPF_MAP_TYPE_SK_STORAGE, BPF_MAP_TYPE_SK_STORAGE,
	BPF_MAP_TYPE_ARRAY,
	BPF_MAP_TYPE_PERCPU_HASH,
	BPF_MAP_TYPE_ARRAY,
	BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_SK_STORAGE,
	BPF_MAP_TYPE_SK_STORAGE,
	BPF_MAP_TYPE_ARRAY,
	BPF_MAP_TYPE_SK_STORAGE,
};
#define N_MAPS (sizeof(map_names) / sizeof(map_names[0]))
_Static_assert(sizeof(map_types) / sizeof(map_types[0]) == N_MAPS, "one type per map");

static int is_bpffs(const char *path)
{
	struct statfs s;

	return statfs(path, &s) == 0 && s.f_type == BPF_FS_MAGIC;
}

int kt_mkdir_p(const char *path, mode_t mode)
{
	char buf[PATH_MAX];
	char *p;

	if (strlen(path) >= sizeof(buf))
		return -ENAMETOOLONG;
	strcpy(buf, path);
	for (p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(buf, mode) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

int kt_bpffs_ensure(const char *dir, char *err, size_t errlen)
{
	char buf[PATH_MAX];
	char *slash;

	if (strlen(dir) >= sizeof(buf) || dir[0] != '/') {
		snprintf(err, errlen, "pin directory %s: must be an absolute path", dir);
		return -EINVAL;
	}
	/* Walk up to the nearest existing ancestor: it must be on bpffs. */
	strcpy(buf, dir);
	while (access(buf, F_OK) != 0 && (slash = strrchr(buf, '/')) && slash != buf)
		*slash = 0;
	if (is_bpffs(buf))
		return 0;
	if (strncmp(dir, "/sys/fs/bpf/", 12) == 0 && !is_bpffs("/sys/fs/bpf")) {
		if (kt_mkdir_p("/sys/fs/bpf", 0700) < 0 ||
		    mount("bpf", "/sys/fs/bpf", "bpf", 0, "mode=0700") < 0) {
			snprintf(err, errlen, "cannot mount bpffs at /sys/fs/bpf: %s",
				 strerror(errno));
			return -errno;
		}
		kt_info("mounted bpffs at /sys/fs/bpf");
		return 0;
	}
	snprintf(err, errlen,
		 "pin directory %s is not on a bpf filesystem (mount -t bpf -o mode=0700 bpf DIR)",
		 dir);
	return -EINVAL;
}

/* Only root may change what is in a pin directory: whoever can unlink a
 * pin there detaches the program behind it while status still says
 * enforcing. path names the directory in messages. */
static int check_dir_fd(int fd, const char *path, char *err, size_t errlen)
{
	struct statfs sf;
	struct stat st;

	if (fstatfs(fd, &sf) < 0 || fstat(fd, &st) < 0) {
		int e = errno;
		snprintf(err, errlen, "pin directory %s: %s", path, strerror(e));
		return -e;
	}
	if (sf.f_type != BPF_FS_MAGIC) {
		snprintf(err, errlen,
			 "pin directory %s is not on a bpf filesystem (mount -t bpf -o mode=0700 bpf DIR)",
			 path);
		return -ENOTDIR;
	}
	if (st.st_uid != 0 && st.st_uid != geteuid()) {
		snprintf(err, errlen,
			 "pin directory %s is owned by uid %u, not root: refusing it (its owner could detach the programs; remove it)",
			 path, (unsigned)st.st_uid);
		return -EPERM;
	}
	if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		snprintf(err, errlen,
			 "pin directory %s has mode %04o, writable by group/other: refusing it (others could detach the programs; chmod go-w it)",
			 path, (unsigned)(st.st_mode & 07777));
		return -EPERM;
	}
	return 0;
}

/* Opens name (relative to at) as a directory without following a symlink
 * in its last component, so the directory checked is the one used. */
static int open_dir_nofollow(int at, const char *name, const char *path, char *err, size_t errlen)
{
	int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	int e;

	if (fd >= 0)
		return fd;
	e = errno;
	if ((e == ELOOP || e == ENOTDIR) && fstatat(at, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    S_ISLNK(st.st_mode))
		snprintf(err, errlen, "pin directory %s is a symbolic link: refusing it (give the real path)",
			 path);
	else
		snprintf(err, errlen, "pin directory %s: %s", path, strerror(e));
	return -e;
}

/* The checked pin directory's fd; its links/ is checked too when present. */
static int open_pin_dir(const char *pin_dir, char *err, size_t errlen)
{
	char links[PATH_MAX];
	int fd, lfd, ret;

	fd = open_dir_nofollow(AT_FDCWD, pin_dir, pin_dir, err, errlen);
	if (fd < 0)
		return fd;
	ret = check_dir_fd(fd, pin_dir, err, errlen);
	if (ret)
		goto fail;
	snprintf(links, sizeof(links), "%s/links", pin_dir);
	lfd = open_dir_nofollow(fd, "links", links, err, errlen);
	if (lfd == -ENOENT)
		return fd;
	if (lfd < 0) {
		ret = lfd;
		goto fail;
	}
	ret = check_dir_fd(lfd, links, err, errlen);
	close(lfd);
	if (ret)
		goto fail;
	return fd;
fail:
	close(fd);
	return ret;
}

bool kt_bpf_pinned(const char *pin_dir)
{
	char p[PATH_MAX];

	snprintf(p, sizeof(p), "%s/kt_buckets", pin_dir);
	return access(p, F_OK) == 0;
}

static void zero_fds(struct kt_bpf *b)
{
	b->buckets_fd = b->counters_fd = b->members_fd = -1;
	b->dests_fd = b->ports_fd = b->limits_fd = b->leases_fd = -1;
	b->gen_fd = b->events_fd = b->coop_fd = b->idle_fd = b->shadow_fd = b->up_fd = -1;
	b->inflight_fd = b->limit_ext_fd = -1;
}

static int open_pinned_maps(struct kt_bpf *b, char *err, size_t errlen)
{
	int *fds[] = { &b->buckets_fd, &b->counters_fd, &b->members_fd,
		       &b->dests_fd, &b->ports_fd, &b->limits_fd, &b->leases_fd };
	char p[PATH_MAX];
	size_t i;

	for (i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", b->pin_dir, map_names[i]);
		*fds[i] = bpf_obj_get(p);
		if (*fds[i] < 0) {
			int e = errno;
			snprintf(err, errlen, "%s: %s", p, strerror(e));
			return -e;
		}
	}
	/* optional: pin directories of older versions have none */
	snprintf(p, sizeof(p), "%s/kt_gen", b->pin_dir);
	b->gen_fd = bpf_obj_get(p);
	snprintf(p, sizeof(p), "%s/kt_events", b->pin_dir);
	b->events_fd = bpf_obj_get(p);
	snprintf(p, sizeof(p), "%s/kt_idle_hooks", b->pin_dir);
	b->idle_fd = bpf_obj_get(p);
	snprintf(p, sizeof(p), "%s/kt_coop", b->pin_dir);
	b->coop_fd = bpf_obj_get(p);
	snprintf(p, sizeof(p), "%s/kt_shadow", b->pin_dir);
	b->shadow_fd = bpf_obj_get(p);
	snprintf(p, sizeof(p), "%s/kt_up", b->pin_dir);
	b->up_fd = bpf_obj_get(p);
	snprintf(p, sizeof(p), "%s/kt_inflight", b->pin_dir);
	b->inflight_fd = bpf_obj_get(p);
	snprintf(p, sizeof(p), "%s/kt_limit_ext", b->pin_dir);
	b->limit_ext_fd = bpf_obj_get(p);
	return 0;
}

void kt_bpf_bump_gen(struct kt_bpf *b)
{
	__u32 zero = 0;
	__u64 gen = 0;

	if (b->gen_fd < 0 || bpf_map_lookup_elem(b->gen_fd, &zero, &gen) < 0)
		return;
	gen = (gen > b->gen_written ? gen : b->gen_written) + 1;
	b->gen_written = gen;
	if (bpf_map_update_elem(b->gen_fd, &zero, &gen, BPF_ANY) < 0)
		kt_err("cannot update kt_gen: %s (sub-cgroups may be charged under their old member until the next change)",
		       strerror(errno));
}

static void close_fds(struct kt_bpf *b)
{
	int fds[] = { b->buckets_fd, b->counters_fd, b->members_fd, b->dests_fd, b->ports_fd,
		      b->limits_fd,  b->leases_fd,   b->gen_fd,     b->events_fd, b->coop_fd,
		      b->idle_fd,    b->shadow_fd,  b->up_fd,	    b->inflight_fd, b->limit_ext_fd };

	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	zero_fds(b);
}

int kt_bpf_open_pinned(struct kt_bpf *b, const char *pin_dir, char *err, size_t errlen)
{
	int ret;

	memset(b, 0, sizeof(*b));
	zero_fds(b);
	snprintf(b->pin_dir, sizeof(b->pin_dir), "%s", pin_dir);
	b->ncpus = libbpf_num_possible_cpus();
	if (b->ncpus <= 0) {
		snprintf(err, errlen, "cannot count possible CPUs");
		return -EINVAL;
	}
	ret = open_pinned_maps(b, err, errlen);
	if (ret)
		close_fds(b);
	return ret;
}

static void unpin_maps(const char *pin_dir)
{
	char p[PATH_MAX];

	for (size_t i = 0; i < sizeof(map_names) / sizeof(map_names[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", pin_dir, map_names[i]);
		unlink(p);
	}
	/* the classifier of versions before kt_dests */
	snprintf(p, sizeof(p), "%s/kt_classify", pin_dir);
	unlink(p);
}

/* kt_coop, mapped read-write. Its pin is made mode 0666 (every other pin
 * keeps the 0600 bpffs gives it, root's only): applications of any uid
 * charge a cooperative limit themselves, writing tat and the counters of
 * its entry through their own mapping, and opening the pin for that needs
 * write permission on it. That grants nothing beyond the cooperative limits
 * (which applications enforce on themselves anyway): kt_buckets, which the
 * kernel enforces, stays unwritable by them. Reaching the pin still needs
 * search permission on the pin directory (0700 by default: root only). */
static int open_coop(struct kt_bpf *b, char *err, size_t errlen)
{
	char p[PATH_MAX];
	int ret;

	if (b->coop_fd < 0) {
		ret = -ENOENT;
		snprintf(err, errlen, "%s/kt_coop: not pinned", b->pin_dir);
		return ret;
	}
	snprintf(p, sizeof(p), "%s/kt_coop", b->pin_dir);
	if (chmod(p, 0666) < 0) {
		ret = -errno;
		snprintf(err, errlen, "cannot chmod %s: %s", p, strerror(-ret));
		return ret;
	}
	b->coop = mmap(NULL, (size_t)KT_MAX_COOP * sizeof(struct kt_coop), PROT_READ | PROT_WRITE,
		       MAP_SHARED, b->coop_fd, 0);
	if (b->coop == MAP_FAILED) {
		ret = -errno;
		b->coop = NULL;
		snprintf(err, errlen, "cannot mmap kt_coop: %s", strerror(-ret));
		return ret;
	}
	return 0;
}

/* Why the kernel refused an object, one line: the verifier's own line
 * when libbpf printed its log, else the errno, with the BTF or BPF hint
 * only when the kernel truly lacks them. */
static void refusal(int ret, bool adopted, char *why, size_t len)
{
	char vline[200];

	if (kt_features_vlog_line(vline, sizeof(vline), NULL, 0))
		snprintf(why, len, "%s: verifier: %s", strerror(-ret), vline);
	else if (access("/sys/kernel/btf/vmlinux", R_OK) != 0)
		snprintf(why, len, "%s (this kernel has no BTF: /sys/kernel/btf/vmlinux is missing)",
			 strerror(-ret));
	else if (access("/sys/fs/bpf", F_OK) != 0 && ret == -ENOSYS)
		snprintf(why, len, "%s (this kernel has no BPF syscall)", strerror(-ret));
	else
		snprintf(why, len, "%s%s", strerror(-ret),
			 adopted ? " (pinned maps from another version? run kthrottlectl cleanup)"
				 : " (run with -v for the verifier's log)");
	if (kt_log_level() >= KT_LOG_DEBUG) {
		char tail[4096];

		if (kt_features_vlog_line(NULL, 0, tail, sizeof(tail)))
			kt_debug("the verifier's last lines:\n%s", tail);
	}
}

/* set when libbpf found a pinned map of another layout: an upgrade that
 * needs a cleanup, not a feature the kernel lacks */
static bool pin_mismatch;

static void vlog_tap(const char *text)
{
	kt_features_vlog_feed(text);
	if (strstr(text, "couldn't reuse pinned map"))
		pin_mismatch = true;
}

/* One object: opened, loaded, or recorded off. 0 when loaded; a refused
 * object is destroyed and *skel left NULL. */
#define LOAD_OBJECT(b, name, feature, opts)                                                  \
	({                                                                                   \
		int _r;                                                                      \
		kt_features_vlog_reset();                                                    \
		(b)->name = kt_feature_refused_by_env(feature) ? NULL : kt_##name##__open_opts(opts); \
		if (kt_feature_refused_by_env(feature))                                      \
			_r = -EPERM;                                                         \
		else if (!(b)->name)                                                         \
			_r = -errno ? -errno : -EINVAL;                                      \
		else                                                                         \
			_r = kt_##name##__load((b)->name);                                   \
		if (_r) {                                                                    \
			kt_##name##__destroy((b)->name);                                     \
			(b)->name = NULL;                                                    \
		}                                                                            \
		_r;                                                                          \
	})

static int load_objects(struct kt_bpf *b, const struct bpf_object_open_opts *opts, char *err,
			size_t errlen)
{
	int rets[KT_FEAT_N_OBJECTS], loaded = 0;
	char why[240];

	pin_mismatch = false;
	kt_log_set_libbpf_tap(vlog_tap);
	rets[KT_FEAT_CONNECT] = LOAD_OBJECT(b, connect, KT_FEAT_CONNECT, opts);
	rets[KT_FEAT_SENDMSG] = LOAD_OBJECT(b, sendmsg, KT_FEAT_SENDMSG, opts);
	rets[KT_FEAT_EGRESS] = LOAD_OBJECT(b, egress, KT_FEAT_EGRESS, opts);
	rets[KT_FEAT_SOCK] = LOAD_OBJECT(b, sock, KT_FEAT_SOCK, opts);
	rets[KT_FEAT_SOCKOPS] = LOAD_OBJECT(b, sockops, KT_FEAT_SOCKOPS, opts);
	kt_log_set_libbpf_tap(NULL);
	if (pin_mismatch) {
		/* never run half an upgrade: the maps must be made anew */
		snprintf(err, errlen,
			 "cannot load BPF programs: pinned maps in %s have another layout (from another version? stop the daemon and run kthrottlectl cleanup)",
			 b->pin_dir);
		return -EINVAL;
	}
	for (int f = 0; f < KT_FEAT_N_OBJECTS; f++) {
		/* out of fds is this process's limit, not a feature the kernel
		 * lacks: no object is turned off for it, the start fails */
		if (rets[f] == -EMFILE || rets[f] == -ENFILE) {
			snprintf(err, errlen, "cannot load BPF programs: %s", strerror(-rets[f]));
			return rets[f];
		}
	}
	for (int f = 0; f < KT_FEAT_N_OBJECTS; f++) {
		if (!rets[f]) {
			loaded++;
			kt_features_set(&b->feat, f, true, NULL);
			continue;
		}
		if (kt_feature_refused_by_env(f))
			snprintf(why, sizeof(why), "%s (refused by " KT_REFUSE_ENV ")",
				 strerror(-rets[f]));
		else
			refusal(rets[f], b->adopted, why, sizeof(why));
		kt_features_set(&b->feat, f, false, why);
	}
	if (loaded)
		return 0;
	/* nothing loaded: the first object's reason is everyone's */
	snprintf(err, errlen, "cannot load BPF programs: %s", b->feat.f[KT_FEAT_CONNECT].why);
	return rets[KT_FEAT_CONNECT];
}

static int bpf_open(struct kt_bpf *b, const char *pin_dir, bool lock, char *err, size_t errlen)
{
	LIBBPF_OPTS(bpf_object_open_opts, opts, .pin_root_path = pin_dir);
	size_t maplen;
	int ret, dfd, lock_fd;

	memset(b, 0, sizeof(*b));
	zero_fds(b);
	b->lock_fd = -1;
	if (strlen(pin_dir) >= sizeof(b->pin_dir)) {
		snprintf(err, errlen, "pin directory too long");
		return -ENAMETOOLONG;
	}
	strcpy(b->pin_dir, pin_dir);
	ret = kt_bpffs_ensure(pin_dir, err, errlen);
	if (ret)
		return ret;
	ret = kt_mkdir_p(pin_dir, 0700);
	if (ret) {
		snprintf(err, errlen, "cannot create pin directory %s: %s", pin_dir, strerror(-ret));
		return ret;
	}
	/* an existing directory may have been made by anyone: check it before
	 * trusting (or deleting) anything in it */
	dfd = open_pin_dir(pin_dir, err, errlen);
	if (dfd < 0)
		return dfd;
	if (!lock) {
		close(dfd);
	} else if (flock(dfd, LOCK_EX | LOCK_NB) < 0) {
		ret = -errno;
		if (ret == -EWOULDBLOCK)
			snprintf(err, errlen,
				 "pin directory %s is in use by another kthrottled (it holds the directory's lock)",
				 pin_dir);
		else
			snprintf(err, errlen, "cannot lock pin directory %s: %s", pin_dir,
				 strerror(-ret));
		close(dfd);
		return ret == -EWOULDBLOCK ? -EBUSY : ret;
	} else {
		b->lock_fd = dfd;
		b->locked = true;
	}
	b->adopted = kt_bpf_pinned(pin_dir);
	b->ncpus = libbpf_num_possible_cpus();

	ret = kt_features_check_minimum(err, errlen);
	if (ret)
		goto fail;
	kt_features_probe_kernel(&b->feat);
	/* Each object declares the same pinned-by-name maps: the first load
	 * creates and pins them (or reuses the pins), the others reuse them
	 * (libbpf unpins what a failed load of its own pinned). */
	ret = load_objects(b, &opts, err, errlen);
	if (ret)
		goto fail;
	ret = open_pinned_maps(b, err, errlen);
	if (ret)
		goto fail;
	maplen = (size_t)KT_MAX_BUCKETS * sizeof(struct kt_bucket);
	b->buckets = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_SHARED, b->buckets_fd, 0);
	if (b->buckets == MAP_FAILED) {
		ret = -errno;
		b->buckets = NULL;
		snprintf(err, errlen, "cannot mmap kt_buckets: %s", strerror(-ret));
		goto fail;
	}
	ret = open_coop(b, err, errlen);
	if (ret)
		goto fail;
	return 0;
fail:
	/* keep the lock until what this call pinned is gone */
	lock_fd = b->locked ? b->lock_fd : -1;
	b->locked = false;
	kt_bpf_close(b);
	/* Leave nothing pinned that this call created. */
	if (!b->adopted) {
		unpin_maps(pin_dir);
		rmdir(pin_dir);
	}
	if (lock_fd >= 0)
		close(lock_fd);
	return ret;
}

int kt_bpf_open(struct kt_bpf *b, const char *pin_dir, char *err, size_t errlen)
{
	return bpf_open(b, pin_dir, false, err, errlen);
}

int kt_bpf_open_locked(struct kt_bpf *b, const char *pin_dir, char *err, size_t errlen)
{
	return bpf_open(b, pin_dir, true, err, errlen);
}

void kt_bpf_close(struct kt_bpf *b)
{
	if (b->buckets)
		munmap(b->buckets, (size_t)KT_MAX_BUCKETS * sizeof(struct kt_bucket));
	b->buckets = NULL;
	if (b->coop)
		munmap(b->coop, (size_t)KT_MAX_COOP * sizeof(struct kt_coop));
	b->coop = NULL;
	free(b->written);
	b->written = NULL;
	kt_verify_free(b);
	close_fds(b);
	kt_connect__destroy(b->connect);
	kt_sendmsg__destroy(b->sendmsg);
	kt_egress__destroy(b->egress);
	kt_sock__destroy(b->sock);
	kt_sockops__destroy(b->sockops);
	b->sockops = NULL;
	b->connect = NULL;
	b->sendmsg = NULL;
	b->egress = NULL;
	b->sock = NULL;
	if (b->locked)
		close(b->lock_fd);
	b->locked = false;
	b->lock_fd = -1;
}

/* Entries 0..n-1 of the array map fd (values of vsize bytes) into vals:
 * one batch, else one lookup each. 0 or negative errno. */
static int read_array(int fd, uint32_t n, void *vals, size_t vsize)
{
	__u32 *keys = calloc(n, sizeof(*keys)), out_batch = 0, i;
	__u32 count = n;
	int ret = -ENOMEM;

	if (!keys)
		return ret;
	/* an array map answers a batch from its first key: all or an error */
	ret = bpf_map_lookup_batch(fd, NULL, &out_batch, keys, vals, &count, NULL);
	if ((ret == 0 || ret == -ENOENT) && count == n) {
		for (i = 0; i < n && keys[i] == i; i++)
			;
		if (i == n) {
			free(keys);
			return 0;
		}
	}
	free(keys);
	for (i = 0; i < n; i++)
		if (bpf_map_lookup_elem(fd, &i, (char *)vals + (size_t)i * vsize) < 0)
			return -errno;
	return 0;
}

int kt_bpf_read_limits(const struct kt_bpf *b, struct kt_limit_info *infos)
{
	return read_array(b->limits_fd, KT_MAX_LIMITS, infos, sizeof(*infos));
}

int kt_bpf_read_limit_exts(const struct kt_bpf *b, struct kt_limit_ext *exts)
{
	if (b->limit_ext_fd < 0) {
		memset(exts, 0, KT_MAX_LIMITS * sizeof(*exts));
		return 0;
	}
	return read_array(b->limit_ext_fd, KT_MAX_LIMITS, exts, sizeof(*exts));
}

int kt_bpf_read_counters(const struct kt_bpf *b, uint32_t slot, struct kt_counters *sum)
{
	struct kt_counters *v;
	int ret = 0;

	memset(sum, 0, sizeof(*sum));
	if (kt_slot_is_coop(slot)) {
		/* the callers' totals, in tokens (atomic adds) */
		const struct kt_coop *e;
		struct kt_coop copy;
		__u32 key = slot - KT_COOP_SLOT0;

		if (b->coop) {
			e = &b->coop[key];
		} else if (b->coop_fd >= 0 && bpf_map_lookup_elem(b->coop_fd, &key, &copy) == 0) {
			e = &copy;
		} else {
			return -ENOENT;
		}
		sum->admitted = __atomic_load_n(&e->admitted, __ATOMIC_RELAXED);
		sum->throttled = __atomic_load_n(&e->refused, __ATOMIC_RELAXED);
		return 0;
	}
	v = calloc(b->ncpus, sizeof(*v));
	if (!v)
		return -ENOMEM;
	if (bpf_map_lookup_elem(b->counters_fd, &slot, v) < 0) {
		ret = -errno;
		goto out;
	}
	for (int i = 0; i < b->ncpus; i++) {
		sum->admitted += v[i].admitted;
		sum->throttled += v[i].throttled;
		sum->admitted_bytes += v[i].admitted_bytes;
		sum->throttled_bytes += v[i].throttled_bytes;
	}
out:
	free(v);
	return ret;
}

int kt_bpf_read_shadow(const struct kt_bpf *b, uint32_t slot, struct kt_shadow_counters *sum)
{
	struct kt_shadow_counters *v;
	int ret = 0;

	memset(sum, 0, sizeof(*sum));
	if (b->shadow_fd < 0 || kt_slot_is_coop(slot))
		return 0;
	v = calloc(b->ncpus, sizeof(*v));
	if (!v)
		return -ENOMEM;
	if (bpf_map_lookup_elem(b->shadow_fd, &slot, v) < 0) {
		ret = errno == ENOENT ? 0 : -errno; /* no entry: nothing refused yet */
		goto out;
	}
	for (int i = 0; i < b->ncpus; i++) {
		sum->refused += v[i].refused;
		sum->refused_bytes += v[i].refused_bytes;
	}
out:
	free(v);
	return ret;
}

void kt_bpf_reset_shadow(const struct kt_bpf *b, uint32_t slot)
{
	if (b->shadow_fd >= 0 && bpf_map_delete_elem(b->shadow_fd, &slot) < 0 && errno != ENOENT)
		kt_warn("cannot reset kt_shadow slot %u: %s (its would-refuse count carries over)",
			slot, strerror(errno));
}

int kt_bpf_read_inflight(const struct kt_bpf *b, uint32_t slot, struct kt_inflight *out)
{
	memset(out, 0, sizeof(*out));
	if (b->inflight_fd < 0 || slot >= KT_MAX_BUCKETS)
		return -ENOENT;
	return bpf_map_lookup_elem(b->inflight_fd, &slot, out) < 0 ? -errno : 0;
}

/* The pinned id of limit `name` (of `unit`, or any unit with -1), or
 * KT_MAX_LIMITS when there is none or the table cannot be read. */
static __u32 pinned_limit_id(const struct kt_bpf *b, const char *name, int unit)
{
	struct kt_limit_info *infos;
	__u32 id = KT_MAX_LIMITS;

	if (!b->buckets || b->limits_fd < 0 || !(infos = calloc(KT_MAX_LIMITS, sizeof(*infos))))
		return KT_MAX_LIMITS;
	/* the whole table in one batch read, as apply reads it */
	if (kt_bpf_read_limits(b, infos) >= 0)
		for (id = 0; id < KT_MAX_LIMITS; id++)
			if (infos[id].in_use && (unit < 0 || infos[id].unit == (__u32)unit) &&
			    !strncmp(infos[id].name, name, sizeof(infos[id].name)))
				break;
	free(infos);
	return id;
}

int64_t kt_bpf_limit_slots(const struct kt_bpf *b, const char *name, uint64_t now)
{
	int64_t best = -1;
	__u32 id = pinned_limit_id(b, name, KT_UNIT_CONCURRENT);

	if (id == KT_MAX_LIMITS)
		return -1;
	/* one pass over the mmapped array, once per start */
	for (uint32_t s = 0; s < KT_MAX_BUCKETS; s++) {
		const struct kt_bucket *bk = &b->buckets[s];
		__u32 flags = KT_READ_ONCE(bk->flags);

		if ((flags & KT_BUCKET_IN_USE) && (flags & (KT_BUCKET_POOL | KT_BUCKET_NODE)) &&
		    KT_READ_ONCE(bk->limit_id) == id) {
			int64_t n = (int64_t)kt_slots_in_force(bk, now);

			best = n > best ? n : best;
		}
	}
	return best;
}

double kt_bpf_limit_member_rate(const struct kt_bpf *b, const char *name, int members)
{
	double best = -1;
	__u32 id = pinned_limit_id(b, name, -1);

	if (id == KT_MAX_LIMITS)
		return -1;
	for (uint32_t s = 0; s < KT_MAX_BUCKETS; s++) {
		const struct kt_bucket *bk = &b->buckets[s];
		__u32 flags = KT_READ_ONCE(bk->flags);
		double r;

		if (!(flags & KT_BUCKET_IN_USE) || (flags & (KT_BUCKET_POOL | KT_BUCKET_JOIN | KT_BUCKET_STRICT)) ||
		    KT_READ_ONCE(bk->limit_id) != id)
			continue;
		r = kt_rate_from_interval_fp(KT_READ_ONCE(bk->interval_fp));
		/* a node-scope bucket serves all of the node's members */
		if (flags & KT_BUCKET_NODE)
			r /= members > 0 ? members : 1;
		best = r > best ? r : best;
	}
	return best;
}

void kt_bpf_reset_inflight(const struct kt_bpf *b, uint32_t slot)
{
	struct kt_inflight v;

	if (b->inflight_fd < 0 || slot >= KT_MAX_BUCKETS)
		return;
	/* a new owner: sockets of the old one give nothing back to it */
	if (bpf_map_lookup_elem(b->inflight_fd, &slot, &v) < 0)
		memset(&v, 0, sizeof(v));
	v.epoch++;
	v.open = v.peak = 0;
	if (bpf_map_update_elem(b->inflight_fd, &slot, &v, BPF_ANY) < 0)
		kt_warn("cannot reset kt_inflight slot %u: %s (its open count carries over)", slot,
			strerror(errno));
}

/* ---- links ---- */

struct hook_prog {
	unsigned hook; /* enum kt_hook, or a KT_ATTACH_* */
	const char *name;
};

static const struct hook_prog hook_progs[] = {
	{ KT_HOOK_CONNECT, "kt_connect4" },	     { KT_HOOK_CONNECT, "kt_connect6" },
	{ KT_HOOK_SENDMSG, "kt_sendmsg4" },	     { KT_HOOK_SENDMSG, "kt_sendmsg6" },
	{ KT_HOOK_EGRESS, "kt_egress" },	     { KT_ATTACH_SOCK_CREATE, "kt_sock_create" },
	{ KT_ATTACH_SOCKOPS, "kt_sockops" },	     { KT_ATTACH_SOCK_RELEASE, "kt_sock_release" },
};
#define N_HOOK_PROGS (sizeof(hook_progs) / sizeof(hook_progs[0]))

static struct bpf_program *prog_by_name(struct kt_bpf *b, const char *name)
{
	/* a refused object is NULL: its programs are not there */
	struct bpf_object *objs[] = { b->connect ? b->connect->obj : NULL,
				      b->sendmsg ? b->sendmsg->obj : NULL,
				      b->egress ? b->egress->obj : NULL, b->sock ? b->sock->obj : NULL,
				      b->sockops ? b->sockops->obj : NULL };

	for (size_t i = 0; i < sizeof(objs) / sizeof(objs[0]); i++) {
		struct bpf_program *p = objs[i] ? bpf_object__find_program_by_name(objs[i], name) : NULL;
		if (p)
			return p;
	}
	return NULL;
}

static void link_pin_path(const char *pin_dir, uint64_t cgid, const char *prog, char *out,
			  size_t outlen)
{
	snprintf(out, outlen, "%s/links/%llu-%s", pin_dir, (unsigned long long)cgid, prog);
}

/* Detach a pinned link and remove its pin. */
static int remove_pinned_link(const char *path)
{
	struct bpf_link *l = bpf_link__open(path);
	int ret = 0;

	if (l) {
		if (bpf_link__detach(l) < 0)
			ret = -errno;
		bpf_link__destroy(l);
	}
	if (unlink(path) < 0 && errno != ENOENT && !ret)
		ret = -errno;
	return ret;
}

int kt_bpf_cleanup_tags(const char *pin_dir)
{
	char dir[PATH_MAX], path[PATH_MAX * 2];
	struct dirent *de;
	struct stat st;
	int ret = 0, r;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/" KT_TAGS_PIN_SUBDIR, pin_dir);
	d = opendir(dir);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		/* links are detached, not only unpinned: nothing else may hold
		 * them, but an XDP program must not outlive its cleanup */
		if (!strncmp(de->d_name, "kt_xdp_link_", 12) &&
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
			r = remove_pinned_link(path);
		else
			r = unlink(path) < 0 ? -errno : 0;
		if (r && !ret)
			ret = r;
	}
	closedir(d);
	if (rmdir(dir) < 0 && errno != ENOENT && !ret)
		ret = -errno;
	return ret;
}

/* A link this sync created or upgraded, for its undo. */
struct link_undo {
	char path[PATH_MAX];
	int old_prog_fd; /* -1: created here; else the program it ran before */
};

/* The program behind a link fd, or a program fd's own id; 0 on error. */
static __u32 prog_id(int fd, bool link)
{
	struct bpf_link_info li = { 0 };
	struct bpf_prog_info pi = { 0 };
	__u32 len = link ? sizeof(li) : sizeof(pi);

	if (bpf_obj_get_info_by_fd(fd, link ? (void *)&li : (void *)&pi, &len) < 0)
		return 0;
	return link ? li.prog_id : pi.id;
}

/* Makes the link at `path` run `prog`: upgrades the pinned link in place
 * (no gap) or creates and pins one. Records in *u what to undo: nothing
 * (u->path empty) when the link already runs prog. */
static int attach_one(struct bpf_program *prog, const struct kt_attach *w, const char *path,
		      struct link_undo *u, char *err, size_t errlen)
{
	struct bpf_link *l;
	__u32 old_id = 0, new_id;
	int cgfd, ret = 0;

	u->old_prog_fd = -1;
	/* probe first: libbpf logs a failed open as an error */
	l = access(path, F_OK) == 0 ? bpf_link__open(path) : NULL;
	if (l) {
		new_id = prog_id(bpf_program__fd(prog), false);
		if (new_id)
			old_id = prog_id(bpf_link__fd(l), true);
		if (old_id && old_id == new_id)
			goto out;
		/* hold the old program: the update drops the link's reference */
		if (old_id)
			u->old_prog_fd = bpf_prog_get_fd_by_id(old_id);
		if (u->old_prog_fd < 0) {
			ret = errno ? -errno : -EINVAL;
			snprintf(err, errlen, "cannot read link %s: %s", path, strerror(-ret));
			goto out;
		}
		if (bpf_link__update_program(l, prog) < 0) {
			ret = -errno;
			snprintf(err, errlen, "cannot update link %s: %s", path, strerror(-ret));
			close(u->old_prog_fd);
			u->old_prog_fd = -1;
			goto out;
		}
		strcpy(u->path, path);
		goto out;
	}
	cgfd = open(w->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cgfd < 0) {
		ret = -errno;
		snprintf(err, errlen, "cannot open cgroup %s: %s", w->path, strerror(-ret));
		goto out;
	}
	l = bpf_program__attach_cgroup(prog, cgfd);
	close(cgfd);
	if (!l) {
		ret = -errno;
		snprintf(err, errlen, "cannot attach %s to %s: %s", bpf_program__name(prog), w->path,
			 strerror(-ret));
		goto out;
	}
	if (bpf_link__pin(l, path) < 0) {
		ret = -errno;
		snprintf(err, errlen, "cannot pin link %s: %s", path, strerror(-ret));
		goto out; /* not pinned: the destroy below detaches it */
	}
	strcpy(u->path, path);
out:
	bpf_link__destroy(l); /* a pinned link stays attached */
	return ret;
}

/* Puts back a link attach_one changed: removes a created one, returns an
 * upgraded one to its old program. */
static void undo_link(const struct link_undo *u)
{
	struct bpf_link *l;
	int r;

	if (u->old_prog_fd < 0) {
		r = remove_pinned_link(u->path);
		if (r)
			kt_err("cannot remove link %s: %s", u->path, strerror(-r));
		return;
	}
	l = bpf_link__open(u->path);
	if (!l || bpf_link_update(bpf_link__fd(l), u->old_prog_fd, NULL) < 0)
		kt_err("cannot put link %s back on its program: %s", u->path, strerror(errno));
	bpf_link__destroy(l);
}

static bool link_wanted(struct kt_bpf *b, const struct kt_attach *want, int n, uint64_t cgid,
			const char *name)
{
	/* a refused program's link (an older daemon's) goes: status says its
	 * limits are not enforced here, so they are not */
	if (!prog_by_name(b, name))
		return false;
	for (int i = 0; i < n; i++)
		for (size_t j = 0; j < N_HOOK_PROGS; j++)
			if (want[i].cgroup_id == cgid && !strcmp(hook_progs[j].name, name) &&
			    (want[i].hook_mask & (1u << hook_progs[j].hook)))
				return true;
	return false;
}

int kt_bpf_sync_links(struct kt_bpf *b, const struct kt_attach *want, int n, char *err,
		      size_t errlen)
{
	char dir[PATH_MAX], path[PATH_MAX];
	struct link_undo *undo = NULL;
	int nundo = 0, ret, i, r;
	size_t j;
	DIR *d;
	struct dirent *de;

	snprintf(dir, sizeof(dir), "%s/links", b->pin_dir);
	ret = kt_mkdir_p(dir, 0700);
	if (ret) {
		snprintf(err, errlen, "cannot create %s: %s", dir, strerror(-ret));
		return ret;
	}
	undo = calloc((size_t)n * N_HOOK_PROGS + 1, sizeof(*undo));
	if (!undo) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}

	/* Every wanted link first, and only then the detaches: a failure on a
	 * later cgroup must find every link that was in force still there. */
	for (i = 0; i < n; i++) {
		for (j = 0; j < N_HOOK_PROGS; j++) {
			struct bpf_program *prog;

			if (!(want[i].hook_mask & (1u << hook_progs[j].hook)))
				continue;
			/* the kernel refused its object (b->feat says so): the
			 * limits that need it are reported unenforced, the others
			 * are attached as usual */
			prog = prog_by_name(b, hook_progs[j].name);
			if (!prog)
				continue;
			link_pin_path(b->pin_dir, want[i].cgroup_id, hook_progs[j].name, path,
				      sizeof(path));
			ret = attach_one(prog, &want[i], path, &undo[nundo], err, errlen);
			if (ret)
				goto out;
			nundo += undo[nundo].path[0] != 0;
		}
	}

	/* The new set is in force. A link that cannot be detached here only
	 * lingers, harmless (its program finds no rule for its cgroup or
	 * hook), until the next sync retries. */
	d = opendir(dir);
	if (d) {
		while ((de = readdir(d))) {
			unsigned long long cgid;
			char name[64];

			if (sscanf(de->d_name, "%llu-%63s", &cgid, name) != 2 ||
			    link_wanted(b, want, n, cgid, name))
				continue;
			snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
			r = remove_pinned_link(path);
			if (r)
				kt_warn("cannot detach %s: %s", path, strerror(-r));
		}
		closedir(d);
	}
out:
	for (i = nundo; i-- > 0;) {
		if (ret)
			undo_link(&undo[i]);
		if (undo[i].old_prog_fd >= 0)
			close(undo[i].old_prog_fd);
	}
	free(undo);
	return ret;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Whether the link pinned as `name` in directory `dir` is attached to
 * its cgroup: the kernel reports cgroup id 0 for a cgroup link that was
 * detached (its cgroup removed, or bpf_link_detach) though still pinned. */
static bool link_attached(const char *dir, const char *name)
{
	struct bpf_link_info li = { 0 };
	__u32 len = sizeof(li);
	char path[PATH_MAX * 2];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = bpf_obj_get(path);
	if (fd < 0)
		return false;
	if (bpf_obj_get_info_by_fd(fd, &li, &len) < 0)
		li.prog_id = 0;
	close(fd);
	return li.prog_id && li.type == BPF_LINK_TYPE_CGROUP && li.cgroup.cgroup_id;
}

/* The cgroup ids named by the pins in <pin_dir>/links (only the links the
 * kernel still has attached with `attached`), sorted, in *ids. */
static int linked_ids(const char *pin_dir, bool attached, uint64_t **ids)
{
	char dir[PATH_MAX];
	uint64_t *v = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	DIR *d;

	*ids = NULL;
	snprintf(dir, sizeof(dir), "%s/links", pin_dir);
	d = opendir(dir);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((de = readdir(d))) {
		unsigned long long cgid;
		char name[64];

		if (sscanf(de->d_name, "%llu-%63s", &cgid, name) != 2 ||
		    (attached && !link_attached(dir, de->d_name)))
			continue;
		if (n == cap) {
			uint64_t *nv = realloc(v, (cap = cap ? cap * 2 : 64) * sizeof(*v));

			if (!nv) {
				free(v);
				closedir(d);
				return -ENOMEM;
			}
			v = nv;
		}
		v[n++] = cgid;
	}
	closedir(d);
	if (n)
		qsort(v, n, sizeof(*v), cmp_u64);
	*ids = v;
	return (int)n;
}

int kt_bpf_linked_cgroups(const struct kt_bpf *b, uint64_t **ids)
{
	return linked_ids(b->pin_dir, false, ids);
}

int kt_bpf_attached_cgroups(const char *pin_dir, uint64_t **ids)
{
	return linked_ids(pin_dir, true, ids);
}

/* Whether dfd's directory has no entries. */
static bool dir_empty(int dfd)
{
	int fd = dup(dfd);
	struct dirent *de;
	bool empty = true;
	DIR *d;

	if (fd < 0)
		return false;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return false;
	}
	while (empty && (de = readdir(d)))
		empty = !strcmp(de->d_name, ".") || !strcmp(de->d_name, "..");
	closedir(d);
	return empty;
}

/* Whether map_names[i] in the pin directory is kthrottle's pinned map: a
 * bpffs file (not a symlink to another object) that opens as a BPF map of
 * that name and type. -ENOENT when absent, -ENOTDIR (err set) otherwise. */
static int check_map_pin(int dfd, const char *pin_dir, size_t i, char *err, size_t errlen)
{
	struct bpf_map_info info;
	__u32 len = sizeof(info);
	char p[PATH_MAX], link[64], kind[64];
	struct stat st;
	ssize_t n;
	int fd = -1;
	bool ok;

	snprintf(p, sizeof(p), "%s/%s", pin_dir, map_names[i]);
	if (fstatat(dfd, map_names[i], &st, AT_SYMLINK_NOFOLLOW) < 0) {
		if (errno == ENOENT)
			return -ENOENT;
	} else if (S_ISREG(st.st_mode)) {
		fd = bpf_obj_get(p);
	}
	ok = fd >= 0;
	if (ok) {
		/* a pinned program or link opens too: only a map's fd is this */
		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		n = readlink(link, kind, sizeof(kind) - 1);
		kind[n > 0 ? n : 0] = 0;
		memset(&info, 0, sizeof(info));
		ok = !strcmp(kind, "anon_inode:bpf-map") &&
		     bpf_obj_get_info_by_fd(fd, &info, &len) == 0 &&
		     !strcmp(info.name, map_names[i]) && info.type == map_types[i];
		close(fd);
	}
	if (ok)
		return 0;
	snprintf(err, errlen,
		 "%s is not a kthrottle pin directory (%s is not kthrottle's BPF map): refusing to delete anything in it",
		 pin_dir, map_names[i]);
	return -ENOTDIR;
}

int kt_bpf_cleanup(const char *pin_dir, char *err, size_t errlen)
{
	return kt_bpf_cleanup_opts(pin_dir, false, err, errlen);
}

int kt_bpf_cleanup_opts(const char *pin_dir, bool force, char *err, size_t errlen)
{
	char dir[PATH_MAX], path[PATH_MAX];
	struct dirent *de;
	struct stat st;
	int ret = 0, r, dfd;
	DIR *d;

	if (lstat(pin_dir, &st) < 0 && errno == ENOENT)
		return 0;
	/* unlink and detach only in a directory that is kthrottle's: on
	 * bpffs, only root's, holding its maps (or empty: nothing to lose) */
	dfd = open_pin_dir(pin_dir, err, errlen);
	if (dfd < 0)
		return dfd;
	if (!dir_empty(dfd)) {
		for (size_t i = 0; i < N_MAPS; i++) {
			r = check_map_pin(dfd, pin_dir, i, err, errlen);
			if (r == -ENOENT && i == 0)
				snprintf(err, errlen,
					 "%s is not a kthrottle pin directory (no kt_buckets map in it): refusing to delete anything in it",
					 pin_dir);
			if (r && (r != -ENOENT || i == 0)) {
				close(dfd);
				return -ENOTDIR;
			}
		}
	}
	/* held to the end, so no daemon starts on what is being removed */
	if (flock(dfd, LOCK_EX | LOCK_NB) < 0) {
		if (errno != EWOULDBLOCK || !force) {
			ret = errno == EWOULDBLOCK ? -EBUSY : -errno;
			if (ret == -EBUSY)
				snprintf(err, errlen,
					 "kthrottled is running on pin directory %s (it holds the directory's lock): stop it, or use --force to detach its programs anyway",
					 pin_dir);
			else
				snprintf(err, errlen, "cannot lock pin directory %s: %s", pin_dir,
					 strerror(-ret));
			close(dfd);
			return ret;
		}
		kt_warn("kthrottled is running on pin directory %s: detaching its programs anyway (--force)",
			pin_dir);
	}
	snprintf(dir, sizeof(dir), "%s/links", pin_dir);
	d = opendir(dir);
	if (d) {
		while ((de = readdir(d))) {
			if (de->d_name[0] == '.')
				continue;
			snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
			/* open (and detach) only pins, never through a symlink */
			if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    !S_ISREG(st.st_mode))
				r = unlink(path) < 0 ? -errno : 0;
			else
				r = remove_pinned_link(path);
			if (r && !ret) {
				ret = r;
				snprintf(err, errlen, "cannot detach %s: %s", path, strerror(-r));
			}
		}
		closedir(d);
		rmdir(dir);
	}
	r = kt_bpf_cleanup_tags(pin_dir);
	if (r && !ret) {
		ret = r;
		snprintf(err, errlen, "cannot remove %s/" KT_TAGS_PIN_SUBDIR ": %s", pin_dir, strerror(-r));
	}
	unpin_maps(pin_dir);
	if (rmdir(pin_dir) < 0 && errno != ENOENT && !ret) {
		ret = -errno;
		snprintf(err, errlen, "cannot remove %s: %s (unknown files left there?)", pin_dir,
			 strerror(errno));
	}
	close(dfd);
	return ret;
}
