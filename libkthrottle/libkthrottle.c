// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* libkthrottle: see include/kthrottle_client.h for the contract. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "kthrottle.h"
#include "kthrottle_client.h"
#include "libkthrottle_int.h"

#define KT_API __attribute__((visibility("default")))

#define ACQUIRE_MAX_SLEEP_NS 100000000ULL /* re-check a closed/slow limit every 100 ms */
/* a strict limit: every 5 ms, so a waiting caller keeps telling the daemon
 * it wants a permit (its refusals are the demand) and sees one soon */
#define ACQUIRE_MAX_SLEEP_STRICT_NS KT_STRICT_RETRY_NS
#define ACQUIRE_JITTER_MAX_NS 1000000ULL  /* jitter at most 1 ms ... */
#define ACQUIRE_JITTER_MIN_NS 20000ULL    /* ... and at least up to 20 us */

static __thread char last_error[256];

int kt_lib_fail(int err, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	if (n >= 0 && (size_t)n < sizeof(last_error) - 32)
		snprintf(last_error + n, sizeof(last_error) - n, ": %s", strerror(err));
	return -err;
}

KT_API const char *kthrottle_last_error(void)
{
	return last_error;
}

const char *kt_lib_pin_dir(void)
{
	const char *d = getenv(KTHROTTLE_PIN_DIR_ENV);

	return d && *d ? d : KTHROTTLE_PIN_DIR_DEFAULT;
}

/* Opens <pin dir>/<map> with `file_flags`, checks it is an mmapable array of
 * value_size `vsize`, and maps it with `prot` if `prot` is not PROT_NONE. */
static int map_open(struct kthrottle *h, const char *map, __u32 file_flags, __u32 vsize, int prot,
		    __u32 *max_entries)
{
	LIBBPF_OPTS(bpf_obj_get_opts, opts, .file_flags = file_flags);
	struct bpf_map_info info;
	__u32 len = sizeof(info);
	char path[4096];
	int err;

	if (snprintf(path, sizeof(path), "%s/%s", kt_lib_pin_dir(), map) >= (int)sizeof(path))
		return kt_lib_fail(ENAMETOOLONG, "pin path %s/%s", kt_lib_pin_dir(), map);
	h->fd = bpf_obj_get_opts(path, &opts);
	if (h->fd < 0) {
		err = errno;
		if (err == ENOENT)
			return kt_lib_fail(ENOENT, "open %s (is kthrottled running with pinDir %s? set %s)", path,
				    kt_lib_pin_dir(), KTHROTTLE_PIN_DIR_ENV);
		return kt_lib_fail(err, "bpf_obj_get %s%s", path, file_flags ? " (read-only)" : "");
	}
	memset(&info, 0, sizeof(info));
	if (bpf_obj_get_info_by_fd(h->fd, &info, &len))
		return kt_lib_fail(errno, "bpf_obj_get_info %s", path);
	if (info.type != BPF_MAP_TYPE_ARRAY || info.value_size != vsize ||
	    !(info.map_flags & BPF_F_MMAPABLE) || !info.max_entries)
		return kt_lib_fail(EPROTO, "%s: not an mmapable array of %u-byte values (type %u, value %u, flags 0x%x)",
			    path, vsize, info.type, info.value_size, info.map_flags);
	*max_entries = info.max_entries;
	if (prot == PROT_NONE)
		return 0;
	h->map_len = (size_t)info.max_entries * vsize;
	h->map = mmap(NULL, h->map_len, prot, MAP_SHARED, h->fd, 0);
	if (h->map == MAP_FAILED) {
		h->map = NULL;
		return kt_lib_fail(errno, "mmap %s", path);
	}
	return 0;
}

static struct kthrottle *handle_new(void)
{
	struct kthrottle *h = calloc(1, sizeof(*h));

	if (!h)
		return NULL;
	h->fd = -1;
	h->rng = kt_clock_ns() ^ ((__u64)getpid() << 32) ^ (__u64)(uintptr_t)h;
	if (!h->rng)
		h->rng = 1;
	return h;
}

KT_API int kthrottle_open(const char *limit, struct kthrottle **out)
{
	struct kthrottle *h;
	__u32 n, i, gen;
	size_t len;
	int err;

	last_error[0] = 0;
	if (!out || !limit || !*limit)
		return kt_lib_fail(EINVAL, "kthrottle_open: no limit name");
	*out = NULL;
	len = strlen(limit);
	if (len >= KT_NAME_LEN)
		return kt_lib_fail(ENAMETOOLONG, "limit name '%s' longer than %d bytes", limit, KT_NAME_LEN - 1);
	h = handle_new();
	if (!h)
		return kt_lib_fail(ENOMEM, "kthrottle_open");
	h->kind = KTH_COOP;
	err = map_open(h, "kt_coop", 0, sizeof(struct kt_coop), PROT_READ | PROT_WRITE, &n);
	if (err)
		goto out_err;
	for (i = 0; i < n; i++) {
		struct kt_coop *e = (struct kt_coop *)h->map + i;

		gen = kt_coop_match(e, limit, len);
		if (gen) {
			h->ent = e;
			h->bucket = &e->bucket;
			h->gen = gen;
			memcpy(h->name, limit, len + 1);
			*out = h;
			return 0;
		}
	}
	err = kt_lib_fail(ENOENT, "no cooperative limit '%s' in %s/kt_coop (unit request in the config?)", limit,
		   kt_lib_pin_dir());
out_err:
	kthrottle_close(h);
	return err;
}

KT_API int kthrottle_open_member(uint32_t slot, struct kthrottle **out)
{
	struct kthrottle *h;
	__u32 n;
	int err;

	last_error[0] = 0;
	if (!out)
		return kt_lib_fail(EINVAL, "kthrottle_open_member: out is NULL");
	*out = NULL;
	h = handle_new();
	if (!h)
		return kt_lib_fail(ENOMEM, "kthrottle_open_member");
	h->kind = KTH_MEMBER;
	/* A read-only descriptor: the kernel refuses writes through it
	 * (update: EPERM; mmap PROT_WRITE: EACCES). It does not map it at all
	 * either: mmap of a file opened without FMODE_WRITE drops VM_SHARED,
	 * and bpf_map_mmap wants it (EINVAL, kernel 6.18). So a kernel bucket
	 * is read with one bpf_map_lookup_elem per is_throttled, unless the
	 * read-only mapping below succeeds. */
	err = map_open(h, "kt_buckets", BPF_F_RDONLY, sizeof(struct kt_bucket), PROT_NONE, &n);
	if (err)
		goto out_err;
	if (slot >= n) {
		err = kt_lib_fail(ERANGE, "bucket slot %u: kt_buckets has %u", slot, n);
		goto out_err;
	}
	h->slot = slot;
	/* should a kernel map it read-only after all, no syscall either */
	h->map_len = (size_t)n * sizeof(struct kt_bucket);
	h->map = mmap(NULL, h->map_len, PROT_READ, MAP_SHARED, h->fd, 0);
	if (h->map == MAP_FAILED)
		h->map = NULL;
	else
		h->bucket = (const struct kt_bucket *)h->map + slot;
	*out = h;
	return 0;
out_err:
	kthrottle_close(h);
	return err;
}

KT_API int kthrottle_try_acquire(struct kthrottle *h, uint64_t n, uint64_t *retry_after_ns)
{
	struct kt_coop *e = h->ent;
	__u64 wait, burst;

	if (__builtin_expect(!e, 0))
		return kt_lib_fail(EPERM, "try_acquire: read-only handle of a kernel-enforced bucket");
	if (__builtin_expect(!n, 0))
		return kt_lib_fail(EINVAL, "try_acquire: n is 0");
	if (__builtin_expect(__atomic_load_n(&e->gen, __ATOMIC_RELAXED) != h->gen, 0))
		return kt_lib_fail(ESTALE, "try_acquire: limit '%s' was removed or replaced; reopen it",
			    h->name);
	if (__builtin_expect(n > 1, 0) &&
	    (__atomic_load_n(&e->bucket.flags, __ATOMIC_RELAXED) & KT_BUCKET_STRICT))
		return kt_lib_fail(EINVAL, "try_acquire: limit '%s' is strict: a permit admits one request, n must be 1",
				   h->name);
	/* more than the bucket holds would be refused forever: a caller's bug */
	burst = __atomic_load_n(&e->bucket.burst, __ATOMIC_RELAXED);
	if (__builtin_expect(burst && n > burst, 0))
		return kt_lib_fail(EINVAL, "try_acquire: %llu tokens is over limit '%s''s burst of %llu: never admitted",
				   (unsigned long long)n, h->name, (unsigned long long)burst);
	if (kt_gcra_decide(&e->bucket, kt_fast_clock_ns(), n, &wait) == KT_ADMIT) {
		__atomic_fetch_add(&e->admitted, n, __ATOMIC_RELAXED);
		return 1;
	}
	__atomic_fetch_add(&e->refused, n, __ATOMIC_RELAXED);
	wait = kt_strict_wait(&e->bucket, wait); /* no permit yet: soon, not never */
	__atomic_store_n(&e->last_wait, wait, __ATOMIC_RELAXED); /* for the daemon's events */
	if (retry_after_ns)
		*retry_after_ns = wait;
	return 0;
}

static __u64 rng_next(struct kthrottle *h)
{
	/* xorshift64: threads sharing a handle may race on it; any value will do */
	__u64 x = __atomic_load_n(&h->rng, __ATOMIC_RELAXED);

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	__atomic_store_n(&h->rng, x, __ATOMIC_RELAXED);
	return x;
}

static void sleep_ns(__u64 ns)
{
	struct timespec ts = { .tv_sec = ns / 1000000000ULL, .tv_nsec = ns % 1000000000ULL };

	while (clock_nanosleep(CLOCK_BOOTTIME, 0, &ts, &ts) == EINTR)
		;
}

KT_API int kthrottle_acquire(struct kthrottle *h, uint64_t n, uint64_t timeout_ns)
{
	__u64 start = kt_fast_clock_ns(), deadline = start + timeout_ns;

	for (;;) {
		uint64_t wait = 0;
		__u64 now, left, jmax, nap;
		int r = kthrottle_try_acquire(h, n, &wait);

		if (r != 0)
			return r;
		now = kt_fast_clock_ns();
		if ((__s64)(deadline - now) <= 0)
			return 0;
		left = deadline - now;
		/* jitter: up to wait/8, between 20 us and 1 ms. Waking a little
		 * late loses nothing while the bucket's tolerance covers it
		 * (burst >= 2); waking early only costs a retry. */
		jmax = wait / 8;
		if (jmax < ACQUIRE_JITTER_MIN_NS)
			jmax = ACQUIRE_JITTER_MIN_NS;
		if (jmax > ACQUIRE_JITTER_MAX_NS)
			jmax = ACQUIRE_JITTER_MAX_NS;
		__u64 cap = (__atomic_load_n(&h->ent->bucket.flags, __ATOMIC_RELAXED) & KT_BUCKET_STRICT)
				    ? ACQUIRE_MAX_SLEEP_STRICT_NS
				    : ACQUIRE_MAX_SLEEP_NS;
		nap = wait > cap ? cap : wait;
		nap += rng_next(h) % jmax;
		if (nap > left) {
			/* the request cannot conform before the deadline: sleep
			 * to it only if it might (a rate rise), and try last */
			sleep_ns(left);
			r = kthrottle_try_acquire(h, n, &wait);
			return r;
		}
		sleep_ns(nap);
	}
}

KT_API int kthrottle_is_throttled(struct kthrottle *h, uint64_t *for_ns)
{
	__u64 wait = 0;
	int r;

	if (h->ent && __atomic_load_n(&h->ent->gen, __ATOMIC_RELAXED) != h->gen)
		return kt_lib_fail(ESTALE, "is_throttled: limit '%s' was removed or replaced; reopen it",
			    h->name);
	if (h->bucket) {
		r = kt_gcra_peek(h->bucket, kt_fast_clock_ns(), 1, &wait);
		wait = kt_strict_wait(h->bucket, wait);
	} else {
		struct kt_bucket copy;
		__u32 key = h->slot;

		if (bpf_map_lookup_elem(h->fd, &key, &copy))
			return kt_lib_fail(errno, "is_throttled: read bucket slot %u", key);
		r = kt_gcra_peek(&copy, kt_fast_clock_ns(), 1, &wait);
		wait = kt_strict_wait(&copy, wait);
	}
	if (for_ns)
		*for_ns = r == KT_ADMIT ? 0 : wait;
	return r == KT_REFUSE;
}

KT_API void kthrottle_close(struct kthrottle *h)
{
	if (!h)
		return;
	if (h->map)
		munmap(h->map, h->map_len);
	if (h->fd >= 0)
		close(h->fd);
	free(h);
}
