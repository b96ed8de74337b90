// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The in-flight audit: see inflight_audit.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "audit.skel.h"
#include "kernel/inflight_audit.h"
#include "kernel/features.h"

static int sign(int64_t v)
{
	return (v > 0) - (v < 0);
}

int64_t kt_audit_judge(struct kt_audit_slot *st, const struct kt_inflight *before,
		       const struct kt_inflight *after, uint64_t marks)
{
	int64_t d;

	if (before->epoch != after->epoch || st->epoch != after->epoch) {
		/* a new owner: what was seen of the old one counts for nothing */
		memset(st, 0, sizeof(*st));
		st->epoch = after->epoch;
		if (before->epoch != after->epoch)
			return 0;
	}
	if (before->open != after->open)
		return 0; /* sockets came or went during the pass: no evidence either way */
	d = (int64_t)marks - (int64_t)after->open;
	if (d == 0) {
		st->streak = 0;
		return 0;
	}
	if (st->streak > 0 && sign(d) == sign(st->diff)) {
		st->streak++;
		if (llabs(d) < llabs(st->diff))
			st->diff = d;
	} else {
		st->streak = 1;
		st->diff = d;
	}
	return st->streak >= KT_AUDIT_STREAK ? st->diff : 0;
}

#define COUNTS_LEN ((size_t)KT_MAX_BUCKETS * sizeof(struct kt_inflight))

void kt_inflight_audit_close(struct kt_inflight_audit *a)
{
	if (a->counts)
		munmap((void *)a->counts, COUNTS_LEN);
	bpf_link__destroy(a->iter);
	kt_audit__destroy(a->skel);
	free(a->before);
	free(a->after);
	free(a->marks);
	free(a->state);
	memset(a, 0, sizeof(*a));
}

int kt_inflight_audit_open(struct kt_inflight_audit *a, const char *pin_dir, char *err,
			   size_t errlen)
{
	LIBBPF_OPTS(bpf_object_open_opts, opts, .pin_root_path = pin_dir);
	LIBBPF_OPTS(bpf_iter_attach_opts, iopts);
	union bpf_iter_link_info linfo;
	int ret;

	memset(a, 0, sizeof(*a));
	a->before = calloc(KT_MAX_BUCKETS, sizeof(*a->before));
	a->after = calloc(KT_MAX_BUCKETS, sizeof(*a->after));
	a->marks = calloc(KT_MAX_BUCKETS, sizeof(*a->marks));
	a->state = calloc(KT_MAX_BUCKETS, sizeof(*a->state));
	if (!a->before || !a->after || !a->marks || !a->state) {
		ret = -ENOMEM;
		snprintf(err, errlen, "in-flight audit: out of memory");
		goto fail;
	}
	if (kt_feature_refused_by_env(KT_FEAT_AUDIT)) {
		ret = -EPERM;
		snprintf(err, errlen, "in-flight audit: cannot load its programs: %s (refused by "
			 KT_REFUSE_ENV ")", strerror(-ret));
		goto fail;
	}
	/* the maps are reused from their pins, as every object's are */
	a->skel = kt_audit__open_opts(&opts);
	if (!a->skel) {
		ret = -errno ? -errno : -EINVAL;
		snprintf(err, errlen, "in-flight audit: cannot open its BPF object: %s", strerror(-ret));
		goto fail;
	}
	ret = kt_audit__load(a->skel);
	if (ret) {
		snprintf(err, errlen, "in-flight audit: cannot load its programs: %s", strerror(-ret));
		goto fail;
	}
	memset(&linfo, 0, sizeof(linfo));
	linfo.map.map_fd = bpf_map__fd(a->skel->maps.kt_sk_slot);
	iopts.link_info = &linfo;
	iopts.link_info_len = sizeof(linfo);
	a->iter = bpf_program__attach_iter(a->skel->progs.kt_audit_marks, &iopts);
	if (!a->iter) {
		ret = -errno ? -errno : -EINVAL;
		snprintf(err, errlen, "in-flight audit: cannot make the iterator over kt_sk_slot: %s",
			 strerror(-ret));
		goto fail;
	}
	/* a copy of the mapping is a memcpy; a batch read of the 16,384
	 * entries costs the kernel about 2.5 ms */
	void *m = mmap(NULL, COUNTS_LEN, PROT_READ, MAP_SHARED, bpf_map__fd(a->skel->maps.kt_inflight), 0);

	if (m == MAP_FAILED) {
		ret = -errno;
		snprintf(err, errlen, "in-flight audit: cannot map kt_inflight: %s (a pin from an older "
			 "version? run kthrottlectl cleanup)", strerror(-ret));
		goto fail;
	}
	a->counts = m;
	return 0;
fail:
	kt_inflight_audit_close(a);
	return ret;
}

int kt_inflight_audit_fix(const struct kt_inflight_audit *a, uint32_t slot, uint32_t epoch,
			  uint64_t expect, uint64_t want)
{
	struct kt_audit_fix fix = { .slot = slot, .epoch = epoch, .expect = expect, .want = want };
	LIBBPF_OPTS(bpf_test_run_opts, run, .ctx_in = &fix, .ctx_size_in = sizeof(fix));

	if (!a->skel || slot >= KT_MAX_BUCKETS)
		return -EINVAL;
	if (bpf_prog_test_run_opts(bpf_program__fd(a->skel->progs.kt_audit_fix), &run) < 0)
		return -errno;
	return run.retval == 1;
}

/* Every slot's count and epoch, each read once (the programs change them
 * with atomic adds; a torn entry would only cost this pass its evidence). */
static void copy_counts(const struct kt_inflight_audit *a, struct kt_inflight *out)
{
	for (uint32_t s = 0; s < KT_MAX_BUCKETS; s++) {
		out[s].open = __atomic_load_n(&a->counts[s].open, __ATOMIC_RELAXED);
		out[s].epoch = __atomic_load_n(&a->counts[s].epoch, __ATOMIC_RELAXED);
	}
}

/* One mark counted for its slot, if it is of the slot's epoch now. */
static void count_mark(struct kt_inflight_audit *a, uint32_t slot, uint32_t epoch)
{
	if (slot < KT_MAX_BUCKETS && a->before[slot].epoch == epoch)
		a->marks[slot]++;
}

/* The marks of the live sockets holding a slot, per slot. */
static int count_marks(struct kt_inflight_audit *a)
{
	char buf[64 * sizeof(struct kt_audit_mark) * 16];
	size_t have = 0;
	int fd = bpf_iter_create(bpf_link__fd(a->iter)), ret = 0;

	if (fd < 0)
		return -errno;
	memset(a->marks, 0, KT_MAX_BUCKETS * sizeof(*a->marks));
	for (;;) {
		ssize_t n = read(fd, buf + have, sizeof(buf) - have);
		size_t i;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ret = -errno;
			break;
		}
		if (n == 0)
			break;
		have += (size_t)n;
		for (i = 0; i + sizeof(struct kt_audit_mark) <= have; i += sizeof(struct kt_audit_mark)) {
			struct kt_audit_mark m;

			memcpy(&m, buf + i, sizeof(m));
			count_mark(a, m.slot, m.epoch);
			if (m.node_slot != KT_SLOT_NONE)
				count_mark(a, m.node_slot, m.node_epoch);
		}
		memmove(buf, buf + i, have - i); /* a record split across reads */
		have -= i;
	}
	close(fd);
	return ret;
}

int kt_inflight_audit_run(struct kt_inflight_audit *a, kt_audit_fixed_fn fixed, void *arg,
			  char *err, size_t errlen)
{
	int ret, n = 0;

	if (!a->skel)
		return -EINVAL;
	copy_counts(a, a->before);
	ret = count_marks(a);
	if (ret < 0) {
		snprintf(err, errlen, "in-flight audit: cannot list the sockets' marks: %s",
			 strerror(-ret));
		return ret;
	}
	copy_counts(a, a->after);
	a->audits++;
	for (uint32_t s = 0; s < KT_MAX_BUCKETS; s++) {
		const struct kt_inflight *now = &a->after[s];
		int64_t delta, want;

		if (!a->before[s].open && !now->open && !a->marks[s] && !a->state[s].streak)
			continue;
		delta = kt_audit_judge(&a->state[s], &a->before[s], now, a->marks[s]);
		if (!delta)
			continue;
		want = (int64_t)now->open + delta;
		if (want < 0)
			want = 0;
		/* the count moved since it was read: the next audit tries again */
		if (kt_inflight_audit_fix(a, s, now->epoch, now->open, (uint64_t)want) != 1)
			continue;
		a->state[s].streak = 0;
		a->corrections++;
		n++;
		if (fixed)
			fixed(arg, s, now->open, (uint64_t)want);
	}
	return n;
}
