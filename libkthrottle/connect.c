// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* kthrottle_connect: connect(2) that tells a refusal by a kthrottle
 * connection limit from a network error (include/kthrottle_client.h).
 *
 * The BPF connect hook refuses with the limit's errno and counts the refusal
 * in the bucket's per-CPU throttled counter; it leaves no other trace the
 * caller could see. So the library redoes the program's classification
 * (kt_member_list + kt_classify_and_decide of bpf/kthrottle.bpf.h) from
 * userspace on read-only map descriptors, and reads the counters of the
 * buckets that could refuse this destination before and after connect. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "base/cgroup.h" /* kt_cgroup_id, from user/base */
#include "kthrottle.h"
#include "kthrottle_client.h"
#include "libkthrottle_int.h"

#define KT_API __attribute__((visibility("default")))

enum { M_MEMBERS, M_LIMITS, M_DESTS, M_COUNTERS, M_BUCKETS, M_COUNT };

static const struct {
	const char *name;
	__u32 type, key, value;
} maps[M_COUNT] = {
	[M_MEMBERS] = { "kt_members", BPF_MAP_TYPE_HASH, sizeof(struct kt_member_key),
			sizeof(struct kt_member_val) },
	[M_LIMITS] = { "kt_limits", BPF_MAP_TYPE_ARRAY, sizeof(__u32), sizeof(struct kt_limit_info) },
	[M_DESTS] = { "kt_dests", BPF_MAP_TYPE_LPM_TRIE, sizeof(struct kt_dest_key),
		      sizeof(struct kt_dest_val) },
	[M_COUNTERS] = { "kt_counters", BPF_MAP_TYPE_PERCPU_ARRAY, sizeof(__u32),
			 sizeof(struct kt_counters) },
	[M_BUCKETS] = { "kt_buckets", BPF_MAP_TYPE_ARRAY, sizeof(__u32), sizeof(struct kt_bucket) },
};

/* Process-wide: the maps of one pin dir, opened on first use. Readers hold
 * the lock shared while they use the descriptors, so a reopen (the pins
 * were replaced: kthrottlectl cleanup and a new daemon) never closes one
 * under them. */
static struct {
	pthread_rwlock_t lock;
	int fd[M_COUNT];
	int up_fd; /* kt_up, -1 in an older pin dir: the levels above (parent:) */
	bool open;
	char pin_dir[PATH_MAX];
	dev_t dev; /* of <pin_dir>/kt_members when opened: identifies the pins */
	ino_t ino;
	int ncpus;
	char cg_mount[PATH_MAX]; /* the cgroup2 mount point ("" if none) */
	char cg_root[PATH_MAX];  /* its root inside the hierarchy (mountinfo field 4) */
} st = { .lock = PTHREAD_RWLOCK_INITIALIZER };

static void close_maps(void)
{
	for (int i = 0; i < M_COUNT; i++) {
		if (st.open && st.fd[i] >= 0)
			close(st.fd[i]);
		st.fd[i] = -1;
	}
	if (st.open && st.up_fd >= 0)
		close(st.up_fd);
	st.up_fd = -1;
	st.open = false;
}

/* The cgroup2 mount from /proc/self/mountinfo: any path (a hybrid host has
 * it at /sys/fs/cgroup/unified), and its root, which is not "/" in a bind
 * mount or a cgroup namespace entered after the mount. */
static void find_cgroup2_mount(void)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL;
	size_t cap = 0;

	st.cg_mount[0] = st.cg_root[0] = 0;
	if (!f)
		return;
	while (getline(&line, &cap, f) > 0) {
		/* id parent maj:min root mountpoint opts [optional...] - fstype ... */
		char *sep = strstr(line, " - "), root[PATH_MAX], mnt[PATH_MAX], fstype[32];

		if (!sep || sscanf(sep + 3, "%31s", fstype) != 1 || strcmp(fstype, "cgroup2"))
			continue;
		if (sscanf(line, "%*s %*s %*s %4095s %4095s", root, mnt) != 2)
			continue;
		/* mountinfo octal-escapes spaces; a cgroup mount with them is not
		 * worth supporting: such a path just finds no member */
		snprintf(st.cg_root, sizeof(st.cg_root), "%s", strcmp(root, "/") ? root : "");
		snprintf(st.cg_mount, sizeof(st.cg_mount), "%s", mnt);
		break;
	}
	free(line);
	fclose(f);
}

/* Opens the pin dir's maps read-only, checking each is what this library
 * was built for. 0 or -errno; on failure nothing stays open. */
static int open_maps(const char *dir, const struct stat *id)
{
	close_maps();
	for (int i = 0; i < M_COUNT; i++) {
		LIBBPF_OPTS(bpf_obj_get_opts, opts, .file_flags = BPF_F_RDONLY);
		struct bpf_map_info info;
		__u32 len = sizeof(info);
		char path[PATH_MAX + 32];
		int fd;

		snprintf(path, sizeof(path), "%s/%s", dir, maps[i].name);
		fd = bpf_obj_get_opts(path, &opts);
		if (fd < 0) {
			int err = errno;

			for (int j = 0; j < i; j++)
				close(st.fd[j]);
			return kt_lib_fail(err, "kthrottle_connect: open %s read-only", path);
		}
		st.fd[i] = fd;
		memset(&info, 0, sizeof(info));
		if (bpf_obj_get_info_by_fd(fd, &info, &len) || info.type != maps[i].type ||
		    info.key_size != maps[i].key || info.value_size != maps[i].value) {
			for (int j = 0; j <= i; j++)
				close(st.fd[j]);
			return kt_lib_fail(EPROTO, "kthrottle_connect: %s is not the map this library knows",
					   path);
		}
	}
	st.ncpus = libbpf_num_possible_cpus();
	if (st.ncpus <= 0) {
		for (int j = 0; j < M_COUNT; j++)
			close(st.fd[j]);
		return kt_lib_fail(EIO, "kthrottle_connect: number of possible CPUs");
	}
	{
		LIBBPF_OPTS(bpf_obj_get_opts, opts, .file_flags = BPF_F_RDONLY);
		char path[PATH_MAX + 32];

		snprintf(path, sizeof(path), "%s/kt_up", dir);
		st.up_fd = bpf_obj_get_opts(path, &opts);
	}
	st.open = true;
	st.dev = id->st_dev;
	st.ino = id->st_ino;
	snprintf(st.pin_dir, sizeof(st.pin_dir), "%s", dir);
	find_cgroup2_mount();
	return 0;
}

/* Takes st.lock shared with the maps of the current pin dir open: 0, or
 * -errno with no lock held (then the caller connects plainly). */
static int maps_get(void)
{
	const char *dir = kt_lib_pin_dir();
	char path[PATH_MAX + 32];
	struct stat id;
	int err = 0;

	/* one stat per call tells whether the pins are still those opened */
	snprintf(path, sizeof(path), "%s/kt_members", dir);
	if (stat(path, &id) < 0)
		return -errno;
	pthread_rwlock_rdlock(&st.lock);
	if (st.open && st.dev == id.st_dev && st.ino == id.st_ino && !strcmp(st.pin_dir, dir))
		return 0;
	pthread_rwlock_unlock(&st.lock);
	pthread_rwlock_wrlock(&st.lock);
	if (!(st.open && st.dev == id.st_dev && st.ino == id.st_ino && !strcmp(st.pin_dir, dir)))
		err = open_maps(dir, &id);
	pthread_rwlock_unlock(&st.lock);
	if (err)
		return err;
	/* whatever is open now is valid; if another thread reopened in between,
	 * its maps are as good as the ones this call found */
	pthread_rwlock_rdlock(&st.lock);
	if (st.open)
		return 0;
	pthread_rwlock_unlock(&st.lock);
	return -ENOENT;
}

/* This process's cgroup v2 directory (from /proc/self/cgroup, "0::/path"):
 * 0 and out, or -errno. */
static int own_cgroup_dir(char *out, size_t outlen)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	char *line = NULL, *p = NULL;
	size_t cap = 0, rl;
	int err = -ENOENT;

	if (!f)
		return -errno;
	while (getline(&line, &cap, f) > 0) {
		if (!strncmp(line, "0::", 3)) {
			p = line + 3;
			p[strcspn(p, "\n")] = 0;
			break;
		}
	}
	fclose(f);
	rl = strlen(st.cg_root);
	if (p && st.cg_mount[0]) {
		/* the path is relative to the hierarchy's (namespace's) root, the
		 * mount shows cg_root of it: strip that prefix */
		if (rl && !(strncmp(p, st.cg_root, rl) == 0 && (p[rl] == '/' || !p[rl])))
			p = NULL; /* our cgroup is outside what the mount shows */
		else if ((size_t)snprintf(out, outlen, "%s%s", st.cg_mount, p + rl) < outlen)
			err = 0;
		else
			err = -ENAMETOOLONG;
	}
	free(line);
	return err;
}

/* The kt_members list that decides for this process, as kt_member_list
 * finds it: its cgroup's own, else the nearest member ancestor's (at most
 * KT_MAX_CGROUP_DEPTH levels up, never above the mount). 0 or -ENOENT. */
static int member_list(struct kt_member_val *v)
{
	char dir[PATH_MAX];
	size_t mlen = strlen(st.cg_mount);

	if (own_cgroup_dir(dir, sizeof(dir)))
		return -ENOENT;
	for (int level = 0; level < KT_MAX_CGROUP_DEPTH; level++) {
		struct kt_member_key key = { 0 };
		uint64_t id;
		char *slash;

		if (!kt_cgroup_id(dir, &id)) {
			key.cgroup_id = id;
			if (!bpf_map_lookup_elem(st.fd[M_MEMBERS], &key, v))
				return 0;
		}
		slash = strrchr(dir, '/');
		if (strlen(dir) <= mlen || !slash || (size_t)(slash - dir) < mlen)
			break; /* at the mount: no further up */
		*slash = 0;
	}
	return -ENOENT;
}

/* A connection limit that covers the destination. */
struct cand {
	__u32 limit_id, slot, refuse_errno;
	__u64 prio;
	__u64 throttled; /* sum over CPUs before connect */
};

static int throttled_sum(__u32 slot, __u64 *sum)
{
	struct kt_counters *c = calloc((size_t)st.ncpus, sizeof(*c));
	int ret = 0;

	if (!c)
		return -ENOMEM;
	if (bpf_map_lookup_elem(st.fd[M_COUNTERS], &slot, c)) {
		ret = -errno;
	} else {
		*sum = 0;
		for (int i = 0; i < st.ncpus; i++)
			*sum += c[i].throttled;
	}
	free(c);
	return ret;
}

/* The limits of the list that the connect hook could charge for this call
 * (kt_classify_and_decide's filter: hook, protocol, port, a kt_dests prefix
 * covering the address), with their counters now. Their number. */
static int candidates(const struct kt_member_val *v, __u8 proto, const __u8 addr[16], __u16 port,
		      struct cand *out)
{
	struct kt_dest_key dk = { .prefixlen = 32 + 128 };
	int n = 0;

	memcpy(dk.addr, addr, 16);
	for (__u32 i = 0; i < v->count && i < KT_LIMITS_PER_CGROUP; i++) {
		__u32 id = v->ents[i].limit_id;
		struct kt_limit_info li;
		struct kt_dest_val d;

		if (bpf_map_lookup_elem(st.fd[M_LIMITS], &id, &li) ||
		    kt_hook_for_unit(li.unit) != KT_HOOK_CONNECT || !(li.proto_mask & proto) ||
		    port < li.port_lo || port > li.port_hi)
			continue;
		dk.limit_id = id;
		if (bpf_map_lookup_elem(st.fd[M_DESTS], &dk, &d))
			continue;
		out[n] = (struct cand){ .limit_id = id, .slot = v->ents[i].slot,
					.prio = kt_dest_priority(&d),
					.refuse_errno = d.refuse_errno ? d.refuse_errno : KT_REFUSE_ERRNO };
		if (!throttled_sum(out[n].slot, &out[n].throttled))
			n++;
	}
	return n;
}

/* The bucket that refused a call charged to `slot`: its own, or with a
 * parent (KT_BUCKET_UP) the first level up, from the bottom, that would
 * refuse now, as the program decides the levels; *limit_id its limit. */
static __u32 refusing_slot(__u32 slot, __u64 now, __u32 *limit_id)
{
	__u32 at = slot;

	for (int lv = 0; lv < KT_MAX_LEVELS; lv++) {
		struct kt_bucket b;
		__u64 wait;
		__u32 up;

		if (bpf_map_lookup_elem(st.fd[M_BUCKETS], &at, &b))
			break;
		if (kt_gcra_peek(&b, now, 1, &wait) == KT_REFUSE && !(b.flags & KT_BUCKET_SHADOW)) {
			*limit_id = b.limit_id;
			return at;
		}
		if (!(b.flags & KT_BUCKET_UP) || st.up_fd < 0 ||
		    bpf_map_lookup_elem(st.up_fd, &at, &up) || up >= KT_MAX_BUCKETS)
			break;
		at = up;
	}
	return slot;
}

/* Fills *why from the refusing limit and its bucket now. */
static void describe(const struct cand *c, int err, struct kthrottle_refusal *why)
{
	struct kt_limit_info li = { 0 };
	struct kt_bucket b;
	__u64 now = kt_clock_ns(), wait = 0;
	__u32 key = c->limit_id;
	__u32 slot = refusing_slot(c->slot, now, &key);

	memset(why, 0, sizeof(*why));
	why->err = err;
	if (!bpf_map_lookup_elem(st.fd[M_LIMITS], &key, &li))
		memcpy(why->limit, li.name, sizeof(why->limit) - 1);
	if (li.unit == KT_UNIT_CONCURRENT && li.in_use) {
		/* an in-flight limit: no time to wait for, a slot frees when
		 * one of the connections holding it closes */
		key = c->slot;
		why->retry_after_ns = 0;
		why->reason = KT_REASON_INFLIGHT;
		if (!bpf_map_lookup_elem(st.fd[M_BUCKETS], &key, &b) && !kt_slots_in_force(&b, now)) {
			why->reason = kt_bucket_reason(&b, now);
			why->retry_after_ns = UINT64_MAX;
		}
		return;
	}
	key = slot;
	if (!bpf_map_lookup_elem(st.fd[M_BUCKETS], &key, &b)) {
		/* what kthrottle_is_throttled would answer: the wait for one
		 * token (~0 closed), 0 if the bucket has refilled since */
		if (kt_gcra_peek(&b, now, 1, &wait) == KT_ADMIT)
			wait = 0;
		wait = kt_strict_wait(&b, wait);
		why->retry_after_ns = wait;
		why->reason = kt_bucket_reason(&b, now);
	}
}

static int plain_connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	return connect(fd, addr, len) == 0 ? 0 : -errno;
}

int kt_lib_slot_target(const char *name, struct sockaddr_storage *ss, socklen_t *len,
		       int *refuse_errno)
{
	struct kt_member_val v;
	struct kt_limit_info li;
	struct kt_dest_key k, next;
	struct kt_dest_val d;
	__u32 id = KT_MAX_LIMITS;
	void *prev = NULL;
	int err;

	if ((err = maps_get()))
		return kt_lib_fail(-err, "kthrottle_slot_acquire: the pinned maps of %s", kt_lib_pin_dir());
	if (member_list(&v)) {
		pthread_rwlock_unlock(&st.lock);
		return kt_lib_fail(EPERM, "kthrottle_slot_acquire: this process's cgroup is not a member of %s",
				   name);
	}
	/* one of this cgroup's limits, in flight, for UDP */
	for (__u32 i = 0; i < v.count && i < KT_LIMITS_PER_CGROUP; i++) {
		__u32 lid = v.ents[i].limit_id;

		if (!bpf_map_lookup_elem(st.fd[M_LIMITS], &lid, &li) && li.in_use &&
		    !strncmp(li.name, name, sizeof(li.name))) {
			id = lid;
			break;
		}
	}
	if (id == KT_MAX_LIMITS || li.unit != KT_UNIT_CONCURRENT || !(li.proto_mask & KT_PROTO_UDP)) {
		pthread_rwlock_unlock(&st.lock);
		return kt_lib_fail(id == KT_MAX_LIMITS ? EPERM : EINVAL,
				   id == KT_MAX_LIMITS
					   ? "kthrottle_slot_acquire: this process's cgroup is not a member of %s"
					   : "kthrottle_slot_acquire: %s is no in-flight limit covering UDP (unit concurrent, protocol udp or both)",
				   name);
	}
	/* a destination it covers: any address of its first prefix */
	for (;;) {
		if (bpf_map_get_next_key(st.fd[M_DESTS], prev, &next)) {
			pthread_rwlock_unlock(&st.lock);
			return kt_lib_fail(ENOENT, "kthrottle_slot_acquire: %s covers no destination", name);
		}
		k = next;
		prev = &k;
		if (k.limit_id == id && !bpf_map_lookup_elem(st.fd[M_DESTS], &k, &d))
			break;
	}
	pthread_rwlock_unlock(&st.lock);
	memset(ss, 0, sizeof(*ss));
	{
		__u16 port = li.port_lo ? li.port_lo : (li.port_hi ? 1 : 0);
		static const __u8 v4map[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

		if (!memcmp(k.addr, v4map, 12) && k.prefixlen >= 32 + 96) {
			struct sockaddr_in *s4 = (struct sockaddr_in *)ss;

			s4->sin_family = AF_INET;
			s4->sin_port = htons(port);
			memcpy(&s4->sin_addr, k.addr + 12, 4);
			*len = sizeof(*s4);
		} else {
			struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

			s6->sin6_family = AF_INET6;
			s6->sin6_port = htons(port);
			memcpy(&s6->sin6_addr, k.addr, 16);
			*len = sizeof(*s6);
		}
	}
	*refuse_errno = d.refuse_errno ? d.refuse_errno : KT_REFUSE_ERRNO;
	return 0;
}

KT_API int kthrottle_connect(int fd, const struct sockaddr *addr, socklen_t len,
			     struct kthrottle_refusal *why)
{
	struct cand cands[KT_LIMITS_PER_CGROUP];
	struct kt_member_val v;
	__u8 a[16] = { 0 };
	__u16 port;
	__u8 proto;
	int sp = 0, best = -1, n, err;
	socklen_t sl = sizeof(sp);

	/* what the connect4/connect6 hooks see: the destination as a 16-byte
	 * (v4-mapped) address, the port, the socket's protocol */
	if (!addr)
		return plain_connect(fd, addr, len);
	if (addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)addr;

		a[10] = a[11] = 0xff;
		memcpy(a + 12, &s4->sin_addr, 4);
		port = ntohs(s4->sin_port);
	} else if (addr->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)addr;

		memcpy(a, &s6->sin6_addr, 16);
		port = ntohs(s6->sin6_port);
	} else {
		return plain_connect(fd, addr, len);
	}
	if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &sp, &sl))
		return plain_connect(fd, addr, len);
	proto = sp == IPPROTO_TCP ? KT_PROTO_TCP : sp == IPPROTO_UDP ? KT_PROTO_UDP : 0;
	if (!proto || maps_get())
		return plain_connect(fd, addr, len);

	n = member_list(&v) ? 0 : candidates(&v, proto, a, port, cands);
	if (!n) {
		/* no connection limit of ours covers it: kthrottle cannot refuse */
		pthread_rwlock_unlock(&st.lock);
		return plain_connect(fd, addr, len);
	}
	if (connect(fd, addr, len) == 0) {
		pthread_rwlock_unlock(&st.lock);
		return 0;
	}
	err = errno;
	/* The hook charges one limit: of those whose throttled count rose and
	 * whose errno this is, the most specific (as the program chooses). */
	for (int i = 0; i < n; i++) {
		__u64 after;

		if (cands[i].refuse_errno != (__u32)err || throttled_sum(cands[i].slot, &after) ||
		    after == cands[i].throttled)
			continue;
		if (best < 0 || cands[i].prio > cands[best].prio)
			best = i;
	}
	if (best >= 0 && why)
		describe(&cands[best], err, why);
	pthread_rwlock_unlock(&st.lock);
	errno = err;
	return best >= 0 ? KTHROTTLE_THROTTLED : -err;
}
