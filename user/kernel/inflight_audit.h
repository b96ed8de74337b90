/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The in-flight audit: the open count of an in-flight limit's bucket
 * (kt_inflight[slot].open) checked against the marks of the live sockets
 * holding one of its slots (kt_sk_slot), and corrected when they differ.
 *
 * Why: a close is seen only by programs attached at or above the socket's
 * cgroup. A member cgroup that leaves the limit while its sockets are open,
 * when the attach point then moves off it, closes them unseen: the count
 * stays that much high (fewer connects admitted) until the bucket is made
 * anew. A count written by hand can be low (more admitted than max).
 *
 * How: each audit reads every slot's count, lists the marks (an iterator
 * over kt_sk_slot, bpf/audit.bpf.c), and reads the counts again. A slot
 * whose count did not move across the audit and differs from its marks
 * (of the same epoch) is a suspect; after KT_AUDIT_STREAK such audits with
 * differences of one sign, the count is set to count + the smallest of
 * those differences by a compare-and-swap in the kernel, which fails
 * (and the next audit tries again) if the count moved meanwhile. A socket
 * between taking its slot and writing its mark, or between giving it back
 * and subtracting, looks like a difference for microseconds: it cannot
 * last over audits seconds apart. */
#ifndef KT_INFLIGHT_AUDIT_H
#define KT_INFLIGHT_AUDIT_H

#include <stddef.h>
#include <stdint.h>
#include "kthrottle.h"

/* audits in a row that must see a difference (of one sign) before it is
 * corrected */
#define KT_AUDIT_STREAK 3
/* how often the daemon audits while it has an in-flight limit */
#define KT_AUDIT_INTERVAL_NS 1000000000ull

/* One slot's suspicion across audits. */
struct kt_audit_slot {
	uint32_t epoch; /* the slot's owner these audits saw */
	int32_t streak; /* audits in a row with a difference of diff's sign */
	int64_t diff;   /* the smallest difference (marks - count) of the streak */
};

/* The verdict of one audit on one slot, from its count before and after the
 * pass and the marks the pass found: the change to make to the count (0:
 * none). Updates st. Pure: no kernel access. */
int64_t kt_audit_judge(struct kt_audit_slot *st, const struct kt_inflight *before,
		       const struct kt_inflight *after, uint64_t marks);

struct kt_audit;
struct bpf_link;

struct kt_inflight_audit {
	struct kt_audit *skel;      /* the two programs, on the pinned maps */
	struct bpf_link *iter;      /* the iterator over kt_sk_slot */
	const struct kt_inflight *counts; /* kt_inflight, mapped read-only */
	struct kt_inflight *before; /* KT_MAX_BUCKETS each: the counts copied before the pass */
	struct kt_inflight *after;  /* and after it */
	uint32_t *marks;
	struct kt_audit_slot *state;
	uint64_t audits, corrections;
};

/* Called for each count corrected: slot, from, to. */
typedef void (*kt_audit_fixed_fn)(void *arg, uint32_t slot, uint64_t from, uint64_t to);

/* Loads the audit's programs against the maps pinned in pin_dir (which
 * must hold them: kt_bpf_open first) and makes the iterator. */
int kt_inflight_audit_open(struct kt_inflight_audit *a, const char *pin_dir, char *err,
			   size_t errlen);
void kt_inflight_audit_close(struct kt_inflight_audit *a);
/* One audit over every slot; fixed (may be NULL) hears each correction.
 * Returns the counts corrected, or -errno (nothing changed). */
int kt_inflight_audit_run(struct kt_inflight_audit *a, kt_audit_fixed_fn fixed, void *arg,
			  char *err, size_t errlen);
/* The kernel's correction alone: kt_inflight[slot].open from expect to
 * want if the slot still has epoch; 1 written, 0 not, or -errno. */
int kt_inflight_audit_fix(const struct kt_inflight_audit *a, uint32_t slot, uint32_t epoch,
			  uint64_t expect, uint64_t want);

#endif
