/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* libkthrottle internals: the handle, visible to the library's own tests. */
#ifndef LIBKTHROTTLE_INT_H
#define LIBKTHROTTLE_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "kthrottle.h"

enum kth_kind {
	KTH_COOP = 0,   /* entry of kt_coop, mapped read-write */
	KTH_MEMBER = 1, /* slot of kt_buckets, mapped read-only */
};

struct kthrottle {
	struct kt_coop *ent;           /* KTH_COOP: the limit's entry */
	/* the bucket decided on: in ent, or in a read-only mapping of
	 * kt_buckets; NULL when the kernel would not map the read-only
	 * descriptor (then is_throttled reads slot by bpf_map_lookup_elem) */
	const struct kt_bucket *bucket;
	__u32 slot;                    /* KTH_MEMBER: index in kt_buckets */
	__u32 gen;                     /* ent->gen when it was matched */
	int kind;                      /* enum kth_kind */
	int fd;                        /* the map */
	void *map;                     /* its mapping */
	size_t map_len;
	__u64 rng;                     /* jitter state (xorshift) */
	char name[KT_NAME_LEN];        /* KTH_COOP: the limit's name */
};

/* CLOCK_BOOTTIME for the fast path: the TSC extrapolated from an anchor at
 * most 1 ms old where the kernel keeps time with the TSC, else the vDSO
 * (clock.c). */
__u64 kt_fast_clock_ns(void);
/* 1 when kt_fast_clock_ns reads the TSC (for tests and the bench). */
int kt_fast_clock_is_tsc(void);
/* Forgets the anchor and the mode, as in a new process (tests; one thread). */
void kt_fast_clock_reset(void);
/* Shared by the library's files (not exported: -fvisibility=hidden). */
/* Sets kthrottle_last_error() to the message and strerror(err); -err. */
int kt_lib_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* $KTHROTTLE_PIN_DIR, else KTHROTTLE_PIN_DIR_DEFAULT. */
const char *kt_lib_pin_dir(void);
/* connect.c, for slot.c: a UDP destination the in-flight limit `name`
 * covers, where `name` is one of the limits of this process's cgroup (or
 * the member it is nested in), and the errno it refuses with. 0, or -errno
 * with kthrottle_last_error() set (-EPERM: not a member; -EINVAL: not an
 * in-flight limit covering UDP). */
int kt_lib_slot_target(const char *name, struct sockaddr_storage *ss, socklen_t *len,
		       int *refuse_errno);

#endif
