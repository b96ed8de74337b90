// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* kthrottle's clock (CLOCK_BOOTTIME, what bpf_ktime_get_boot_ns() reads)
 * for the library's fast path, without paying for clock_gettime on every
 * call: clock_gettime through the vDSO costs ~24 ns on a VM, a bare RDTSC
 * ~10 ns, and try_acquire's decision itself ~6 ns.
 *
 * When the kernel itself keeps time with the TSC (clocksource "tsc", which
 * it picks only for a TSC that is invariant and synchronized across CPUs),
 * the library reads the TSC and extrapolates from an anchor: a
 * (tsc, boottime) pair taken at most KT_ANCHOR_NS ago, scaled by the TSC's
 * rate measured between the first anchor and the latest one. Every call
 * past the anchor's reach takes a new one with clock_gettime, so the error
 * stays that of the rate over one reach: with the rate measured over >= 1
 * ms to +-50 ns of clock_gettime jitter, at most ~50 ns per ms of reach,
 * and a token's decision moves by at most that. Elsewhere (another
 * clocksource, another architecture, KTHROTTLE_CLOCK=vdso) it is
 * clock_gettime on every call. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "libkthrottle_int.h"

#if defined(__x86_64__)
#include <x86intrin.h>
#define KT_HAVE_TSC 1
#endif

#define KT_ANCHOR_NS 1000000ull         /* an anchor serves calls up to 1 ms after it */
#define KT_PAIR_MAX_TICKS 8192ull       /* a clock_gettime (~70 ticks) bracketed wider: preempted */
#define KT_CALIB_MIN_NS 1000000ull      /* the TSC's rate is measured over >= 1 ms */
#define KT_CALIB_RENEW_NS 10000000000ull /* and over at most the last ~10 s (NTP slews it) */

static __u64 vdso_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (__u64)ts.tv_sec * 1000000000ull + (__u64)ts.tv_nsec;
}

#ifdef KT_HAVE_TSC
/* Readers take a seqlock snapshot; a reader that sees a writer, or a
 * torn snapshot, reads the vDSO clock instead of waiting. */
static struct {
	_Atomic __u64 seq;          /* odd while being written */
	_Atomic __u64 tsc, ns;      /* the anchor */
	_Atomic __u64 mult;         /* ns per tick, Q32.32; 0: not calibrated */
	_Atomic __u64 reach;        /* ticks the anchor serves */
	__u64 base_tsc, base_ns;    /* calibration base (writer only) */
	__u64 next_tsc, next_ns;    /* the next base */
} anc;

static int tsc_state; /* 0 unknown, 1 usable, -1 not */

static int tsc_usable(void)
{
	char cs[32] = "";
	const char *env = getenv("KTHROTTLE_CLOCK");
	FILE *f;

	if (env && !strcmp(env, "vdso"))
		return -1;
	f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "re");
	if (!f)
		return -1;
	if (!fgets(cs, sizeof(cs), f))
		cs[0] = 0;
	fclose(f);
	return !strcmp(cs, "tsc\n") ? 1 : -1;
}

/* Takes a new anchor (and refines the rate) unless another thread is. */
static __u64 reanchor(void)
{
	__u64 seq = atomic_load_explicit(&anc.seq, memory_order_relaxed);
	__u64 t0, ns, t1, tsc;

	/* the pair: TSC read on both sides of clock_gettime, midpoint */
	t0 = __rdtsc();
	ns = vdso_ns();
	t1 = __rdtsc();
	/* a pair the thread was preempted in (the VM descheduled, an
	 * interrupt) is not an anchor: its midpoint may be off by half the
	 * gap; this call has its exact clock_gettime anyway */
	if (t1 < t0 || t1 - t0 > KT_PAIR_MAX_TICKS || (seq & 1) ||
	    !atomic_compare_exchange_strong_explicit(&anc.seq, &seq, seq + 1, memory_order_acquire,
						     memory_order_relaxed))
		return ns;
	atomic_thread_fence(memory_order_release);
	tsc = t0 + (t1 - t0) / 2;
	if (!anc.base_tsc || tsc <= anc.base_tsc || ns <= anc.base_ns) {
		/* first anchor, or a TSC that went back: measure anew */
		anc.base_tsc = anc.next_tsc = tsc;
		anc.base_ns = anc.next_ns = ns;
		atomic_store_explicit(&anc.mult, 0, memory_order_relaxed);
	} else if (ns - anc.next_ns > KT_CALIB_RENEW_NS) {
		/* the base stays 10-20 s old: long enough to be exact, recent
		 * enough to follow the kernel's NTP adjustments */
		anc.base_tsc = anc.next_tsc;
		anc.base_ns = anc.next_ns;
		anc.next_tsc = tsc;
		anc.next_ns = ns;
	}
	if (ns - anc.base_ns >= KT_CALIB_MIN_NS) {
		__u64 old = atomic_load_explicit(&anc.mult, memory_order_relaxed);
		__u64 mult = (__u64)(((unsigned __int128)(ns - anc.base_ns) << 32) /
				     (tsc - anc.base_tsc));

		if (old && (mult > old + old / 100 || mult < old - old / 100)) {
			/* 1% off the last rate: the TSC and boottime parted (a
			 * suspend); measure anew from here */
			anc.base_tsc = anc.next_tsc = tsc;
			anc.base_ns = anc.next_ns = ns;
			mult = 0;
		}
		atomic_store_explicit(&anc.mult, mult, memory_order_relaxed);
		/* the anchor's reach in ticks: KT_ANCHOR_NS / (mult / 2^32) */
		atomic_store_explicit(&anc.reach, mult ? (KT_ANCHOR_NS << 32) / mult : 0,
				      memory_order_relaxed);
	}
	atomic_store_explicit(&anc.tsc, tsc, memory_order_relaxed);
	atomic_store_explicit(&anc.ns, ns, memory_order_relaxed);
	atomic_store_explicit(&anc.seq, seq + 2, memory_order_release);
	return ns;
}

__u64 kt_fast_clock_ns(void)
{
	__u64 seq, tsc, ns, mult, reach, now, d;

	if (__builtin_expect(tsc_state <= 0, 0)) {
		if (!tsc_state)
			__atomic_store_n(&tsc_state, tsc_usable(), __ATOMIC_RELAXED);
		if (tsc_state < 0)
			return vdso_ns();
	}
	now = __rdtsc();
	seq = atomic_load_explicit(&anc.seq, memory_order_acquire);
	tsc = atomic_load_explicit(&anc.tsc, memory_order_relaxed);
	ns = atomic_load_explicit(&anc.ns, memory_order_relaxed);
	mult = atomic_load_explicit(&anc.mult, memory_order_relaxed);
	reach = atomic_load_explicit(&anc.reach, memory_order_relaxed);
	atomic_thread_fence(memory_order_acquire);
	d = now - tsc; /* a TSC behind the anchor wraps past reach */
	if (__builtin_expect((seq & 1) || !mult || d > reach ||
			     seq != atomic_load_explicit(&anc.seq, memory_order_relaxed), 0))
		return reanchor();
	return ns + (__u64)(((unsigned __int128)d * mult) >> 32);
}

int kt_fast_clock_is_tsc(void)
{
	kt_fast_clock_ns();
	return __atomic_load_n(&tsc_state, __ATOMIC_RELAXED) > 0;
}

void kt_fast_clock_reset(void)
{
	memset(&anc, 0, sizeof(anc));
	tsc_state = 0;
}
#else
__u64 kt_fast_clock_ns(void)
{
	return vdso_ns();
}

int kt_fast_clock_is_tsc(void)
{
	return 0;
}

void kt_fast_clock_reset(void)
{
}
#endif
