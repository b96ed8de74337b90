// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The decision math of include/kthrottle.h, the same code the BPF programs
 * run: exact bursts, long-run rates on a simulated clock, fractional rates,
 * byte costs, oversize requests, closed buckets, clock wrap-around, overflow,
 * concurrent charging and rate changes. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "kthrottle.h"

#define US 1000ULL
#define MS 1000000ULL
#define SEC 1000000000ULL
/* Some uptime, so a fresh bucket (tat 0) lies in the past. */
#define T0 (1000ULL * SEC)

static struct kt_bucket mk(double rate, __u64 burst)
{
	return (struct kt_bucket){ .tat = 0, .interval_fp = kt_interval_fp_from_rate(rate),
				   .burst = burst };
}

/* Exact ns per token of a bucket (what the fixed point stands for). */
static double ns_per_token(const struct kt_bucket *b)
{
	return (double)b->interval_fp / (double)KT_FP_ONE;
}

/* Requests of `cost` at one instant until the first refusal (at most max). */
static __u64 drain(struct kt_bucket *b, __u64 now, __u64 cost, __u64 max, __u64 *wait)
{
	__u64 n = 0, w = 0;

	while (n < max && kt_gcra_decide(b, now, cost, &w) == KT_ADMIT) {
		assert_int_equal(w, 0);
		n++;
	}
	if (wait)
		*wait = w;
	return n;
}

/* One request of `cost` every `step` ns over [start, start + dur]; returns
 * admitted requests and fails if the admitted tokens ever exceed
 * burst + rate * elapsed (+ slack tokens). */
static __u64 simulate(struct kt_bucket *b, __u64 start, __u64 dur, __u64 step, __u64 cost,
		      double slack)
{
	double rate = 1e9 / ns_per_token(b);
	__u64 n = 0, w, t;

	for (t = 0; t <= dur; t += step) {
		if (kt_gcra_decide(b, start + t, cost, &w) == KT_ADMIT)
			n++;
		double bound = (double)b->burst + rate * (double)t / 1e9 + slack;
		if ((double)(n * cost) > bound + 1e-6) {
			print_error("rate %g burst %llu cost %llu: %llu tokens admitted by +%llu ns, bound %.3f\n",
				    rate, (unsigned long long)b->burst, (unsigned long long)cost,
				    (unsigned long long)(n * cost), (unsigned long long)t, bound);
			fail();
		}
	}
	return n;
}

static void test_tokens_to_ns(void **state)
{
	(void)state;
	assert_int_equal(kt_tokens_to_ns(0, 12345), 0);
	assert_int_equal(kt_tokens_to_ns(0, ~0ULL), 0);
	assert_int_equal(kt_tokens_to_ns(1, KT_FP_ONE), 1);
	assert_int_equal(kt_tokens_to_ns(7, KT_FP_ONE), 7);
	/* rounds up: a fraction of a ns costs a whole one */
	assert_int_equal(kt_tokens_to_ns(1, KT_FP_ONE + 1), 2);
	assert_int_equal(kt_tokens_to_ns(1, 1), 1);
	assert_int_equal(kt_tokens_to_ns(2, KT_FP_ONE / 2), 1);
	assert_int_equal(kt_tokens_to_ns(3, KT_FP_ONE / 2), 2);
	/* 0.1 ns per byte: 1500 bytes = 150 ns (6554/65536 rounds 150.006 up) */
	assert_int_equal(kt_tokens_to_ns(1500, 6554), 151);
	assert_int_equal(kt_tokens_to_ns(10, 6553600), 1000);
	/* products past 2^64 saturate (at 2^48 ns, 78 hours) instead of
	 * wrapping to something small */
	const __u64 sat = ~0ULL >> KT_FP_SHIFT;
	assert_true(kt_tokens_to_ns(~0ULL, ~0ULL) >= sat);
	assert_true(kt_tokens_to_ns(1ULL << 40, 1ULL << 40) >= sat);
	assert_true(kt_tokens_to_ns(1ULL << 33, 1ULL << 32) >= sat);
	assert_true(kt_tokens_to_ns(1, ~0ULL) >= sat);
	assert_true(kt_tokens_to_ns(3, (1ULL << 63) + 5) >= sat);
	/* just below saturation: exact */
	assert_int_equal(kt_tokens_to_ns(1ULL << 20, 1ULL << 40), 1ULL << 44);
	/* monotonic in tokens across the overflow boundary */
	__u64 ifp = 1ULL << 50, prev = 0;
	for (__u64 k = 1; k < (1ULL << 20); k = k * 3 + 1) {
		__u64 ns = kt_tokens_to_ns(k, ifp);
		assert_true(ns >= prev);
		prev = ns;
	}
}

static void test_interval_from_rate(void **state)
{
	(void)state;
	assert_int_equal(kt_interval_fp_from_rate(1), 1000000000ULL << KT_FP_SHIFT);
	assert_int_equal(kt_interval_fp_from_rate(0.1), 10000000000ULL << KT_FP_SHIFT);
	assert_int_equal(kt_interval_fp_from_rate(1e9), KT_FP_ONE);
	assert_int_equal(kt_interval_fp_from_rate(1e10), 6554); /* 6553.6 rounded up */
	/* closed: zero, negative, NaN */
	assert_int_equal(kt_interval_fp_from_rate(0), 0);
	assert_int_equal(kt_interval_fp_from_rate(-5), 0);
	assert_int_equal(kt_interval_fp_from_rate(NAN), 0);
	/* extremes saturate instead of closing the bucket */
	assert_int_equal(kt_interval_fp_from_rate(1e-30), ~0ULL);
	assert_int_equal(kt_interval_fp_from_rate(1e30), 1);
	assert_int_equal(kt_interval_fp_from_rate(INFINITY), 1);
	assert_true(kt_rate_from_interval_fp(0) == 0.0);

	/* Rounded up: the enforced rate never exceeds the requested one (but
	 * for double rounding, 1e-12), and is within 1e-4 of it up to 10 G
	 * tokens/s (bytes of a 100 Gbit link). */
	for (double r = 1e-4; r <= 1e10; r *= 1.37) {
		double got = kt_rate_from_interval_fp(kt_interval_fp_from_rate(r));
		if (!(got <= r * (1 + 1e-12) && got >= r * (1 - 1e-4))) {
			print_error("rate %.9g represented as %.9g\n", r, got);
			fail();
		}
	}
}

/* Burst N admits exactly N at one instant; the next waits one token. */
static void test_exact_burst(void **state)
{
	static const double rates[] = { 1, 3, 7, 10, 0.1, 0.3, 333, 1000, 12345.678, 1e6, 3e7 };
	static const __u64 bursts[] = { 1, 2, 3, 5, 10, 64, 1000 };
	(void)state;

	for (size_t i = 0; i < sizeof(rates) / sizeof(rates[0]); i++) {
		for (size_t j = 0; j < sizeof(bursts) / sizeof(bursts[0]); j++) {
			struct kt_bucket b = mk(rates[i], bursts[j]);
			__u64 wait, w2, n = drain(&b, T0, 1, bursts[j] + 10, &wait);
			double x = ns_per_token(&b);

			if (n != bursts[j]) {
				print_error("rate %g burst %llu: %llu admitted back to back\n",
					    rates[i], (unsigned long long)bursts[j],
					    (unsigned long long)n);
				fail();
			}
			/* the refusal charged nothing */
			__u64 tat = b.tat;
			assert_int_equal(kt_gcra_decide(&b, T0, 1, &w2), KT_REFUSE);
			assert_int_equal(b.tat, tat);
			assert_int_equal(w2, wait);
			/* next token one interval later, to the ns */
			if (fabs((double)wait - x) > 1.0) {
				print_error("rate %g burst %llu: wait %llu ns, interval %.3f ns\n",
					    rates[i], (unsigned long long)bursts[j],
					    (unsigned long long)wait, x);
				fail();
			}
			assert_int_equal(kt_gcra_decide(&b, T0 + wait - 1, 1, &w2), KT_REFUSE);
			assert_int_equal(w2, 1);
			assert_int_equal(kt_gcra_decide(&b, T0 + wait, 1, &w2), KT_ADMIT);
			assert_int_equal(kt_gcra_decide(&b, T0 + wait, 1, &w2), KT_REFUSE);
		}
	}
}

/* Admitted over T seconds == rate * T + burst, within one token below, and
 * never above burst + rate * elapsed at any point. (Bursts of at least 2:
 * with burst 1 a poller that arrives late loses the lateness, as in any
 * token bucket of capacity 1.) */
static void test_steady_rate(void **state)
{
	static const struct {
		double rate;
		__u64 burst, dur, step;
	} c[] = {
		{ 1000, 10, 10 * SEC, 100 * US },
		{ 1000, 2, 10 * SEC, 37 * US }, /* step not a divisor of the interval */
		{ 3, 5, 60 * SEC, 1 * MS },
		{ 7, 2, 100 * SEC, 10 * MS },
		{ 250000, 100, 1 * SEC, 1 * US },
		{ 1e6, 1000, 500 * MS, 250 },
	};
	(void)state;

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		struct kt_bucket b = mk(c[i].rate, c[i].burst);
		double want = c[i].rate * (double)c[i].dur / 1e9 + (double)c[i].burst;
		__u64 n = simulate(&b, T0, c[i].dur, c[i].step, 1, 0);

		if ((double)n > want || (double)n < want - 1) {
			print_error("rate %g burst %llu over %.3f s: %llu admitted, want %.3f\n",
				    c[i].rate, (unsigned long long)c[i].burst, c[i].dur / 1e9,
				    (unsigned long long)n, want);
			fail();
		}
		/* idle for a long time: refills to the burst, not beyond */
		__u64 later = T0 + c[i].dur + 1000 * SEC;
		assert_int_equal(kt_gcra_tokens_left(&b, later), c[i].burst);
		assert_int_equal(drain(&b, later, 1, c[i].burst + 10, NULL), c[i].burst);
	}
}

/* Rates below one token per second are exact: 0.1/s is one token every
 * 10 s, never zero tokens (the reference implementation's integer-flooring defect). */
static void test_fractional_rates(void **state)
{
	static const double rates[] = { 0.1, 0.5, 1.0 / 3, 0.01, 0.001, 2.5 };
	__u64 w;
	(void)state;

	struct kt_bucket b = mk(0.1, 1);
	assert_int_equal(kt_gcra_decide(&b, T0, 1, &w), KT_ADMIT);
	assert_int_equal(kt_gcra_decide(&b, T0, 1, &w), KT_REFUSE);
	assert_int_equal(w, 10 * SEC);
	assert_int_equal(kt_gcra_decide(&b, T0 + 10 * SEC - 1, 1, &w), KT_REFUSE);
	assert_int_equal(w, 1);
	assert_int_equal(kt_gcra_decide(&b, T0 + 10 * SEC, 1, &w), KT_ADMIT);
	assert_int_equal(kt_gcra_decide(&b, T0 + 15 * SEC, 1, &w), KT_REFUSE);
	assert_int_equal(w, 5 * SEC);

	/* 10 intervals polled 10 times per interval: burst + 10 tokens */
	for (size_t i = 0; i < sizeof(rates) / sizeof(rates[0]); i++) {
		b = mk(rates[i], 1);
		__u64 dur = (__u64)llround(10e9 / rates[i]);
		__u64 n = simulate(&b, T0, dur, dur / 100, 1, 0);
		if (n != 11 && n != 10) {
			print_error("rate %g: %llu admitted over 10 intervals, want 11\n", rates[i],
				    (unsigned long long)n);
			fail();
		}
	}
}

/* Byte unit: the cost is the packet size. */
static void test_byte_units(void **state)
{
	__u64 w, n;
	(void)state;

	/* 10 kB/s, burst 10000 bytes: six 1500-byte packets back to back */
	struct kt_bucket b = mk(10000, 10000);
	assert_int_equal(drain(&b, T0, 1500, 100, &w), 6);
	assert_int_equal(w, 50 * MS); /* 500 bytes short at 10 kB/s */
	/* a smaller packet still fits the 1000 bytes left */
	assert_int_equal(kt_gcra_decide(&b, T0, 1000, &w), KT_ADMIT);
	assert_int_equal(kt_gcra_decide(&b, T0, 1, &w), KT_REFUSE);
	assert_int_equal(kt_gcra_tokens_left(&b, T0), 0);
	assert_int_equal(kt_gcra_tokens_left(&b, T0 + 150 * MS), 1500);

	/* steady: 10 s of 1500-byte packets every ms holds 10 kB/s + burst */
	b = mk(10000, 10000);
	n = simulate(&b, T0, 10 * SEC, 1 * MS, 1500, 0);
	assert_true(n * 1500 <= 110000);
	assert_true(n * 1500 > 110000 - 1500);

	/* a burst of whole packets at a rate whose ns per byte is fractional */
	b = mk(7000, 3000);
	assert_int_equal(drain(&b, T0, 1500, 100, NULL), 2);

	/* 10 GB/s: 1500-byte packets and 64 KiB GSO packets within 1% */
	static const __u64 sizes[] = { 1500, 65536, 9000 };
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		b = mk(1e10, 1000000);
		n = simulate(&b, T0, 1 * MS, 10, sizes[i], 0);
		double got = (double)(n * sizes[i]), want = 1e10 * 1e-3 + 1e6;
		if (got > want || got < want * 0.99) {
			print_error("10 GB/s, %llu-byte packets: %.0f bytes in 1 ms, want %.0f\n",
				    (unsigned long long)sizes[i], got, want);
			fail();
		}
	}
}

/* A request larger than the burst passes only from a full bucket, and its
 * excess is owed, so the long-run rate holds. */
static void test_oversize(void **state)
{
	__u64 w, n;
	(void)state;

	/* 1000 B/s, burst 1500 B, 64000-byte requests */
	struct kt_bucket b = mk(1000, 1500);
	assert_int_equal(kt_gcra_decide(&b, T0, 64000, &w), KT_ADMIT);
	assert_int_equal(w, 0);
	assert_int_equal(kt_gcra_tokens_left(&b, T0), 0);
	/* everything waits for the debt: 64 s for another oversize request */
	assert_int_equal(kt_gcra_decide(&b, T0, 64000, &w), KT_REFUSE);
	assert_int_equal(w, 64 * SEC);
	/* a small one only needs the debt below the burst tolerance */
	assert_int_equal(kt_gcra_decide(&b, T0, 100, &w), KT_REFUSE);
	assert_int_equal(w, 64 * SEC - 1400 * MS);
	assert_int_equal(kt_gcra_decide(&b, T0 + 64 * SEC - 1, 64000, &w), KT_REFUSE);
	assert_int_equal(w, 1);
	assert_int_equal(kt_gcra_decide(&b, T0 + 64 * SEC, 64000, &w), KT_ADMIT);

	/* not full: refused even though the tokens left exceed the burst share */
	b = mk(1000, 1500);
	assert_int_equal(kt_gcra_decide(&b, T0, 100, &w), KT_ADMIT);
	assert_int_equal(kt_gcra_decide(&b, T0, 64000, &w), KT_REFUSE);
	assert_int_equal(w, 100 * MS);
	assert_int_equal(kt_gcra_decide(&b, T0 + 100 * MS, 64000, &w), KT_ADMIT);

	/* long run: one per 64 s (plus the first) over 6400 s, within 1% */
	b = mk(1000, 1500);
	n = simulate(&b, T0, 6400 * SEC, 1 * SEC, 64000, 64000);
	assert_int_equal(n, 101);
}

/* interval 0 is a closed bucket: everything is refused, nothing charged. */
static void test_closed(void **state)
{
	struct kt_bucket b = { .tat = 0, .interval_fp = 0, .burst = 100 };
	__u64 w;
	(void)state;

	for (__u64 t = 0; t < 10; t++) {
		assert_int_equal(kt_gcra_decide(&b, T0 + t * SEC, 1, &w), KT_REFUSE);
		assert_int_equal(w, ~0ULL);
		assert_int_equal(kt_gcra_decide(&b, T0 + t * SEC, 0, &w), KT_REFUSE);
	}
	assert_int_equal(b.tat, 0);
	assert_int_equal(kt_gcra_tokens_left(&b, T0), 0);
	/* reopening gives the full burst: closing charged nothing */
	b.interval_fp = kt_interval_fp_from_rate(10);
	assert_int_equal(drain(&b, T0 + 20 * SEC, 1, 1000, NULL), 100);
}

/* The clock is compared by signed difference, so a wrap of the 64-bit
 * counter changes nothing. */
static void test_clock_wrap(void **state)
{
	__u64 start = 0ULL - 200 * MS, w, n;
	(void)state;

	/* 10/s, burst 5; tat = now: a full bucket at the start */
	struct kt_bucket b = mk(10, 5);
	b.tat = start;
	assert_int_equal(kt_gcra_tokens_left(&b, start), 5);
	assert_int_equal(drain(&b, start, 1, 100, &w), 5);
	assert_int_equal(w, 100 * MS);
	assert_true(b.tat < start); /* the debt wrapped past 0 */
	assert_int_equal(kt_gcra_tokens_left(&b, start), 0);
	assert_int_equal(kt_gcra_decide(&b, start + 100 * MS - 1, 1, &w), KT_REFUSE);
	assert_int_equal(kt_gcra_decide(&b, start + 100 * MS, 1, &w), KT_ADMIT);
	/* now itself wraps: one token per 100 ms continues on the other side */
	assert_int_equal(kt_gcra_decide(&b, start + 200 * MS, 1, &w), KT_ADMIT); /* now == 0 */
	assert_int_equal(kt_gcra_decide(&b, start + 200 * MS, 1, &w), KT_REFUSE);
	assert_int_equal(w, 100 * MS);
	assert_int_equal(kt_gcra_tokens_left(&b, start + 10 * SEC), 5);

	/* steady across the wrap: 10 s at 10/s from 5 s before it */
	b = mk(10, 5);
	b.tat = 0ULL - 5 * SEC;
	n = simulate(&b, 0ULL - 5 * SEC, 10 * SEC, 1 * MS, 1, 0);
	assert_true(n == 105 || n == 104);
}

/* Huge costs, intervals and bursts saturate; none admits by wrapping. */
static void test_overflow_safety(void **state)
{
	__u64 w, n;
	(void)state;

	/* 0.1 B/s, burst 1, 64 KiB packets: cost in ns overflows 64 bits at
	 * Q48.16; the first may pass (oversize from full), then none. */
	struct kt_bucket b = mk(0.1, 1);
	n = drain(&b, T0, 65536, 100, NULL);
	assert_true(n <= 1);
	for (int i = 0; i < 10; i++)
		assert_int_equal(kt_gcra_decide(&b, T0 + i * SEC, 65536, &w), KT_REFUSE);

	/* Tolerances past 2^48 ns (78 hours) saturate there by design: the
	 * slowest representable rate with burst 2, and burst 100 at 0.0001/s
	 * (1e15 ns), pass fewer than the burst, never more. */
	b = (struct kt_bucket){ .interval_fp = ~0ULL, .burst = 2 };
	n = drain(&b, T0, 1, 1000, NULL);
	assert_true(n >= 1 && n <= 2);
	b = mk(0.0001, 100);
	n = drain(&b, T0, 1, 1000, NULL);
	assert_true(n >= 1 && n <= 100);
	/* below the cap such a bucket is exact: burst 20 at 0.0001/s */
	b = mk(0.0001, 20);
	assert_int_equal(drain(&b, T0, 1, 1000, NULL), 20);

	/* cost ~0 from a full bucket: never admitted by wrap-around, and
	 * refused requests leave the bucket as it was */
	b = mk(1e9, 1000);
	n = drain(&b, T0, ~0ULL, 10, NULL);
	assert_true(n <= 1);
	if (n == 0) {
		assert_int_equal(b.tat, 0);
		assert_int_equal(drain(&b, T0, 1, 2000, NULL), 1000);
	} else {
		assert_int_equal(kt_gcra_decide(&b, T0 + 1000 * SEC, 1, &w), KT_REFUSE);
	}

	/* debt near 2^63 ns must not read as "in the past" */
	b = (struct kt_bucket){ .interval_fp = 1ULL << 47, .burst = 1ULL << 40 };
	n = drain(&b, T0, 1ULL << 31, 2000, NULL); /* 2^62 ns per request */
	assert_true(n >= 1 && n <= 512);

	/* huge interval with a huge burst: the tolerance saturates */
	b = (struct kt_bucket){ .interval_fp = ~0ULL, .burst = ~0ULL };
	n = drain(&b, T0, 1, 100000, NULL);
	assert_true(n < 100000);

	/* tokens_left saturates the same way decide does */
	b = mk(0.0001, 100);
	__u64 left = kt_gcra_tokens_left(&b, T0);
	assert_int_equal(left, drain(&b, T0, 1, 1000, NULL));
}

static void test_tokens_left(void **state)
{
	__u64 w;
	(void)state;

	struct kt_bucket b = mk(10, 10); /* whole ns per token */
	assert_int_equal(kt_gcra_tokens_left(&b, T0), 10);
	for (int k = 1; k <= 10; k++) {
		assert_int_equal(kt_gcra_decide(&b, T0, 1, &w), KT_ADMIT);
		assert_int_equal(kt_gcra_tokens_left(&b, T0), 10 - k);
	}
	assert_int_equal(kt_gcra_tokens_left(&b, T0 + 100 * MS - 1), 0);
	assert_int_equal(kt_gcra_tokens_left(&b, T0 + 100 * MS), 1);
	assert_int_equal(kt_gcra_tokens_left(&b, T0 + 350 * MS), 3);
	assert_int_equal(kt_gcra_tokens_left(&b, T0 + 100 * SEC), 10);

	/* fractional ns per token: within one token of the exact count */
	b = mk(3, 10);
	for (int k = 1; k <= 9; k++) {
		assert_int_equal(kt_gcra_decide(&b, T0, 1, &w), KT_ADMIT);
		__u64 left = kt_gcra_tokens_left(&b, T0);
		assert_true(left <= (__u64)(10 - k) && left + 1 >= (__u64)(10 - k));
	}
}

/* kt_bucket_rescale (what the daemon does on every tick) keeps the tokens a
 * bucket holds across a rate change: no reset to full, no emptying, and a
 * rise takes effect at once. */
static void test_rate_change(void **state)
{
	__u64 w, n;
	(void)state;

	/* 5 of 10 left at 10/s; 20/s: still 5, now refilling every 50 ms */
	struct kt_bucket b = mk(10, 10);
	assert_int_equal(drain(&b, T0, 1, 5, NULL), 5);
	kt_bucket_rescale(&b, T0, kt_interval_fp_from_rate(20));
	assert_int_equal(b.interval_fp, kt_interval_fp_from_rate(20));
	assert_int_equal(kt_gcra_tokens_left(&b, T0), 5);
	assert_int_equal(drain(&b, T0, 1, 100, &w), 5);
	assert_int_equal(w, 50 * MS);

	/* the same down to 5/s: 5 kept, not 7 (no fresh allowance) */
	b = mk(10, 10);
	assert_int_equal(drain(&b, T0, 1, 5, NULL), 5);
	kt_bucket_rescale(&b, T0, kt_interval_fp_from_rate(5));
	assert_int_equal(drain(&b, T0, 1, 100, &w), 5);
	assert_int_equal(w, 200 * MS);

	/* drained, then raised: still drained, the next token one new
	 * interval later (not after the old debt drains) */
	b = mk(10, 10);
	assert_int_equal(drain(&b, T0, 1, 100, NULL), 10);
	kt_bucket_rescale(&b, T0, kt_interval_fp_from_rate(20));
	assert_int_equal(kt_gcra_decide(&b, T0, 1, &w), KT_REFUSE);
	assert_int_equal(w, 50 * MS);
	n = simulate(&b, T0, 10 * SEC, 1 * MS, 1, 0);
	assert_true(n >= 199 && n <= 200);

	/* full stays full */
	b = mk(10, 10);
	kt_bucket_rescale(&b, T0, kt_interval_fp_from_rate(1));
	assert_int_equal(kt_gcra_tokens_left(&b, T0), 10);
	assert_int_equal(drain(&b, T0, 1, 100, &w), 10);
	assert_int_equal(w, 1 * SEC);

	/* closing keeps the debt; reopening at the old rate resumes it */
	b = mk(10, 10);
	assert_int_equal(drain(&b, T0, 1, 100, NULL), 10);
	__u64 tat = b.tat;
	kt_bucket_rescale(&b, T0, 0);
	assert_int_equal(b.tat, tat);
	assert_int_equal(kt_gcra_decide(&b, T0 + 100 * MS, 1, &w), KT_REFUSE);
	kt_bucket_rescale(&b, T0 + 100 * MS, kt_interval_fp_from_rate(10));
	assert_int_equal(kt_gcra_decide(&b, T0 + 100 * MS, 1, &w), KT_ADMIT);
	assert_int_equal(kt_gcra_decide(&b, T0 + 100 * MS, 1, &w), KT_REFUSE);

	/* a raw store of interval_fp (an operator with bpftool) is safe: the
	 * bucket is not reset to full */
	b = mk(10, 10);
	assert_int_equal(drain(&b, T0, 1, 100, NULL), 10);
	__atomic_store_n(&b.interval_fp, kt_interval_fp_from_rate(20), __ATOMIC_RELEASE);
	assert_int_equal(kt_gcra_decide(&b, T0, 1, &w), KT_REFUSE);
	assert_int_equal(kt_gcra_tokens_left(&b, T0), 0);
}

/* A ramp from 10/s to 1000/s over 10 s, rate rewritten every 100 ms, burst
 * 1000, a sender that always wants more: each second it gets what the ramp
 * allowed that second (the tokens of the first burst are not owed again). */
static void test_ramp_no_starvation(void **state)
{
	struct kt_bucket b = mk(10, 1000);
	__u64 w, t, sec_n = 0;
	double allowed = 0;
	(void)state;

	for (t = 0; t <= 12 * SEC; t += 100 * US) {
		double r = 10 + 9.9 * (double)(t / (100 * MS)); /* +9.9/s per tick */
		if (r > 1000)
			r = 1000;
		if (t % (100 * MS) == 0)
			kt_bucket_rescale(&b, T0 + t, kt_interval_fp_from_rate(r));
		allowed += r * 100e-6;
		if (kt_gcra_decide(&b, T0 + t, 1, &w) == KT_ADMIT)
			sec_n++;
		if (t && t % SEC == 0) {
			/* the first second also spends the burst */
			if (t > SEC && ((double)sec_n < 0.9 * allowed || (double)sec_n > allowed + 2)) {
				print_error("second %llu: %llu admitted, ramp allowed %.1f\n",
					    (unsigned long long)(t / SEC), (unsigned long long)sec_n,
					    allowed);
				fail();
			}
			sec_n = 0;
			allowed = 0;
		}
	}
}

/* valid_until: past it the bucket runs at fallback_fp (the kernel applies
 * the store-failure policy when the daemon stops refreshing it). */
static void test_validity_fallback(void **state)
{
	__u64 w;
	(void)state;

	/* valid for 1 s at 1000/s, then closed */
	struct kt_bucket b = mk(1000, 1);
	b.valid_until = T0 + 1 * SEC;
	b.fallback_fp = 0;
	assert_int_equal(kt_gcra_decide(&b, T0, 1, &w), KT_ADMIT);
	assert_int_equal(kt_gcra_decide(&b, T0 + SEC, 1, &w), KT_ADMIT); /* at the deadline */
	assert_int_equal(kt_gcra_decide(&b, T0 + SEC + 10 * MS, 1, &w), KT_REFUSE);
	assert_int_equal(w, ~0ULL);
	assert_int_equal(kt_gcra_tokens_left(&b, T0 + 2 * SEC), 0);
	/* pushed forward again: open */
	b.valid_until = T0 + 10 * SEC;
	assert_int_equal(kt_gcra_decide(&b, T0 + 2 * SEC, 1, &w), KT_ADMIT);

	/* fallback to a slower rate: 1/s after the deadline */
	b = mk(1000, 1);
	b.valid_until = T0;
	b.fallback_fp = kt_interval_fp_from_rate(1);
	assert_int_equal(kt_gcra_decide(&b, T0 + 1, 1, &w), KT_ADMIT);
	assert_int_equal(kt_gcra_decide(&b, T0 + 500 * MS, 1, &w), KT_REFUSE);
	assert_int_equal(kt_gcra_decide(&b, T0 + 1 + SEC, 1, &w), KT_ADMIT);

	/* the fallback ends: closed after fallback_until */
	b = mk(1000, 1);
	b.valid_until = T0;
	b.fallback_fp = kt_interval_fp_from_rate(1000);
	b.fallback_until = T0 + SEC;
	assert_int_equal(kt_gcra_decide(&b, T0 + SEC / 2, 1, &w), KT_ADMIT);
	assert_int_equal(kt_gcra_decide(&b, T0 + SEC + 10 * MS, 1, &w), KT_REFUSE);
	assert_int_equal(w, ~0ULL);
	b.fallback_until = 0; /* 0: the fallback never ends (open) */
	assert_int_equal(kt_gcra_decide(&b, T0 + 100 * SEC, 1, &w), KT_ADMIT);

	/* 0: valid forever, even at the far end of the clock */
	b = mk(1000, 1);
	b.tat = 0ULL - 5 * SEC;
	assert_int_equal(kt_gcra_decide(&b, 0ULL - 1, 1, &w), KT_ADMIT);
	/* a deadline just before the clock wraps still lapses after the wrap */
	b = mk(1000, 1);
	b.tat = 0ULL - 5 * SEC;
	b.valid_until = 0ULL - 1 * SEC;
	assert_int_equal(kt_gcra_decide(&b, 0ULL - 2 * SEC, 1, &w), KT_ADMIT);
	assert_int_equal(kt_gcra_decide(&b, 1 * SEC, 1, &w), KT_REFUSE);
}

/* The switch to the fallback hands out no tokens: a saturated bucket at
 * 100/s burst 10 whose lease lapses into 20/s with the fallback burst
 * scaled (10 x 20/100 = 2) admits no more than the fallback rate allows,
 * where keeping the full burst would free ~8 tokens at once. */
static void test_fallback_switch_no_free_tokens(void **state)
{
	struct kt_bucket b = mk(100, 10);
	__u64 w, now = T0, n = 0;

	(void)state;
	/* drain: saturated, debt queued in tat at 100/s */
	n = drain(&b, now, 1, 100, &w);
	assert_int_equal(n, 10);
	b.valid_until = now + 1;
	b.fallback_fp = kt_interval_fp_from_rate(20);
	b.fallback_burst = 2;
	/* right after the deadline nothing is free: the debt still stands */
	assert_int_equal(drain(&b, now + 2, 1, 100, &w), 0);
	/* over one second of fallback: at most 20 + the fallback burst */
	n = 0;
	for (__u64 t = now + 2; t <= now + SEC; t += MS)
		n += drain(&b, t, 1, 100, &w);
	assert_true(n <= 20 + 2);
	assert_true(n >= 18);
	/* without the scaled burst the tolerance grows fivefold: the flaw */
	b = mk(100, 10);
	drain(&b, now, 1, 100, &w);
	b.valid_until = now + 1;
	b.fallback_fp = kt_interval_fp_from_rate(20);
	assert_true(drain(&b, now + 2, 1, 100, &w) >= 7);
}

/* Four threads charging one bucket at one fixed instant: the CAS on tat
 * must admit exactly the burst in total, never a token twice. */
#define THREADS 4
#define BURST_MT 20000
#define TRIES_MT 40000

struct mt_arg {
	struct kt_bucket *b;
	pthread_barrier_t *bar;
	__u64 admitted, refused;
};

static void *mt_worker(void *p)
{
	struct mt_arg *a = p;
	__u64 w;

	pthread_barrier_wait(a->bar);
	for (int i = 0; i < TRIES_MT; i++) {
		if (kt_gcra_decide(a->b, T0, 1, &w) == KT_ADMIT)
			a->admitted++;
		else
			a->refused++;
	}
	return NULL;
}

static void test_concurrent_cas(void **state)
{
	static struct kt_bucket b __attribute__((aligned(64)));
	struct mt_arg args[THREADS];
	pthread_t th[THREADS];
	pthread_barrier_t bar;
	__u64 total = 0;
	(void)state;

	for (int round = 0; round < 5; round++) {
		b = mk(1, BURST_MT); /* 1 s per token: no refill at a fixed clock */
		assert_int_equal(pthread_barrier_init(&bar, NULL, THREADS), 0);
		for (int i = 0; i < THREADS; i++) {
			args[i] = (struct mt_arg){ .b = &b, .bar = &bar };
			assert_int_equal(pthread_create(&th[i], NULL, mt_worker, &args[i]), 0);
		}
		total = 0;
		for (int i = 0; i < THREADS; i++) {
			pthread_join(th[i], NULL);
			total += args[i].admitted;
			assert_int_equal(args[i].admitted + args[i].refused, TRIES_MT);
		}
		pthread_barrier_destroy(&bar);
		assert_int_equal(total, BURST_MT);
		assert_int_equal(b.tat, T0 + BURST_MT * SEC);
	}
}

/* ---- EDT pacing (kt_gcra_pace) ---- */

/* A paced request departs exactly when kt_gcra_decide would first admit it
 * (its refusal's wait), and leaves the bucket as that admission would. */
static void test_pace_matches_decide(void **state)
{
	static const __u64 costs[] = { 1, 100, 1500, 64000 };
	(void)state;

	for (size_t i = 0; i < sizeof(costs) / sizeof(costs[0]); i++) {
		struct kt_bucket a = mk(1e6, 16384), p;
		__u64 wd, wp, t;

		/* drain, then one request each way */
		drain(&a, T0, costs[i], 100000, NULL);
		p = a;
		assert_int_equal(kt_gcra_decide(&a, T0, costs[i], &wd), KT_REFUSE);
		assert_int_equal(kt_gcra_pace(&p, T0, costs[i], KT_PACE_HORIZON_NS, &wp), KT_ADMIT);
		assert_int_equal(wp, wd);
		/* decide at the departure time: admitted, same tat */
		t = T0 + wd;
		assert_int_equal(kt_gcra_decide(&a, t, costs[i], &wd), KT_ADMIT);
		assert_int_equal(a.tat, p.tat);
	}
	/* a bucket with room: departs now, charged as an admission */
	struct kt_bucket a = mk(1e6, 16384), p = a;
	__u64 w;
	assert_int_equal(kt_gcra_pace(&p, T0, 1500, KT_PACE_HORIZON_NS, &w), KT_ADMIT);
	assert_int_equal(w, 0);
	assert_int_equal(kt_gcra_decide(&a, T0, 1500, &w), KT_ADMIT);
	assert_int_equal(a.tat, p.tat);
}

/* A sender that never waits (everything queued at once): departures hold
 * the rate and burst exactly, come in order, and stop at the horizon. */
static void test_pace_rate_and_horizon(void **state)
{
	(void)state;
	static const __u64 bursts[] = { 16384, 65536, 131072, 1048576 };

	for (size_t i = 0; i < sizeof(bursts) / sizeof(bursts[0]); i++) {
		struct kt_bucket b = mk(1e6, bursts[i]);
		__u64 w, last = 0, bytes = 0, n = 0;

		/* 1448-byte segments and 64 KiB TSO packets, alternating */
		for (int k = 0; k < 100000; k++) {
			__u64 cost = k % 2 ? 1448 : 65536;

			if (kt_gcra_pace(&b, T0, cost, KT_PACE_HORIZON_NS, &w) != KT_ADMIT) {
				assert_true(w > KT_PACE_HORIZON_NS);
				break;
			}
			assert_true(w >= last); /* in order */
			last = w;
			bytes += cost;
			n++;
			/* what departed by now + w is within rate x w + burst, plus
			 * one oversize packet when the burst is below 64 KiB */
			double cap = 1e6 * (double)w / 1e9 + (double)bursts[i] +
				     (bursts[i] < 65536 ? 65536.0 : 0.0) + 1;
			if ((double)bytes > cap) {
				print_error("burst %llu: %llu bytes by %llu ns, cap %.0f\n",
					    (unsigned long long)bursts[i], (unsigned long long)bytes,
					    (unsigned long long)w, cap);
				fail();
			}
		}
		/* the horizon ends it at about 2 s worth of bytes + burst */
		assert_true(n > 0 && n < 100000);
		assert_true(last <= KT_PACE_HORIZON_NS);
		assert_true((double)bytes >= 1e6 * 2.0 + (double)bursts[i] - 65536 - 1448);
		/* refused: nothing charged */
		__u64 tat = b.tat;
		assert_int_equal(kt_gcra_pace(&b, T0, 65536, KT_PACE_HORIZON_NS, &w), KT_REFUSE);
		assert_int_equal(b.tat, tat);
		/* and once the queue drained, departures are immediate again */
		assert_int_equal(kt_gcra_pace(&b, T0 + 10 * SEC, 1448, KT_PACE_HORIZON_NS, &w),
				 KT_ADMIT);
		assert_int_equal(w, 0);
	}
}

/* Closed bucket: refused with an infinite wait; a zero horizon is plain
 * GCRA (admits only what conforms now). */
static void test_pace_closed_and_zero_horizon(void **state)
{
	struct kt_bucket b = mk(1e6, 3000);
	__u64 w;
	(void)state;

	b.interval_fp = 0;
	assert_int_equal(kt_gcra_pace(&b, T0, 1500, KT_PACE_HORIZON_NS, &w), KT_REFUSE);
	assert_true(w == ~0ULL);
	assert_int_equal(b.tat, 0);

	b = mk(1e6, 3000);
	assert_int_equal(kt_gcra_pace(&b, T0, 1500, 0, &w), KT_ADMIT);
	assert_int_equal(kt_gcra_pace(&b, T0, 1500, 0, &w), KT_ADMIT);
	assert_int_equal(kt_gcra_pace(&b, T0, 1500, 0, &w), KT_REFUSE);
	assert_int_equal(w, 1500 * US);
}

/* A strict bucket (KT_BUCKET_STRICT, burst 1, the hold as interval):
 * closed until a permit is armed; then nothing before its time, exactly one
 * admission in its window [due, due + expire], and nothing after, with the
 * reasons and retry-afters callers see. */
static void test_strict_permit_window(void **state)
{
	const uint64_t every = 500 * MS, expire = 20 * MS, t0 = 1000 * SEC;
	uint64_t hold = kt_strict_hold_ns(every, expire);
	__u64 wait;
	struct kt_bucket b = { .interval_fp = hold << KT_FP_SHIFT, .burst = 1, .valid_until = 1,
			       .flags = KT_BUCKET_IN_USE | KT_BUCKET_STRICT };
	uint64_t due = t0 + 100 * MS;
	int admitted = 0;

	(void)state;
	assert_true(hold > expire && hold >= every);
	/* no permit: closed, reason permit (interval set), no retry time */
	assert_int_equal(kt_gcra_decide(&b, t0, 1, &wait), KT_REFUSE);
	assert_true(wait == ~0ULL);
	assert_int_equal(kt_bucket_reason(&b, t0), KT_REASON_PERMIT);
	kt_strict_arm(&b, due, expire);
	assert_false(kt_strict_spent(&b, due));
	/* before its time: refused, retry-after = the time left */
	assert_int_equal(kt_gcra_decide(&b, due - 3 * MS, 1, &wait), KT_REFUSE);
	assert_true(wait == 3 * MS);
	/* in its window: one, and one only, whoever asks how often */
	for (uint64_t t = due; t <= due + expire; t += 100000)
		admitted += kt_gcra_decide(&b, t + 1000, 1, &wait) == KT_ADMIT;
	assert_int_equal(admitted, 1);
	assert_true(kt_strict_spent(&b, due));
	/* after the window: closed, nothing */
	for (uint64_t t = due + expire + 1; t < due + 10 * every; t += MS)
		assert_int_equal(kt_gcra_decide(&b, t, 1, &wait), KT_REFUSE);
	/* an unused permit is not usable after its window either */
	kt_strict_arm(&b, due + every, expire);
	assert_int_equal(kt_gcra_decide(&b, due + every + expire + 1, 1, &wait), KT_REFUSE);
	assert_false(kt_strict_spent(&b, due + every));
	/* interval 0: the store is unreachable, reason closed */
	b.interval_fp = 0;
	assert_int_equal(kt_bucket_reason(&b, due), KT_REASON_CLOSED);
	/* hold when expireAfter is not shorter than every */
	assert_true(kt_strict_hold_ns(10 * MS, 10 * MS) > 10 * MS);
}


/* A member bucket's flags name the node bucket it is chained to in bits
 * 16..31; chaining and unchaining keep every other flag. */
static void test_chain_flags(void **state)
{
	const __u32 other = KT_BUCKET_IN_USE | KT_BUCKET_STRICT;
	__u32 fl;
	(void)state;

	assert_int_equal(kt_bucket_parent(0), KT_SLOT_NONE);
	assert_int_equal(kt_bucket_parent(other), KT_SLOT_NONE);
	fl = kt_bucket_chain_flags(other, 7);
	assert_true(fl & KT_BUCKET_CHAINED);
	assert_int_equal(fl & 0xffffu & ~KT_BUCKET_CHAINED, other);
	assert_int_equal(kt_bucket_parent(fl), 7);
	/* slot 0 is a slot, not "none" */
	assert_int_equal(kt_bucket_parent(kt_bucket_chain_flags(other, 0)), 0);
	/* the highest slot fits */
	fl = kt_bucket_chain_flags(other, KT_MAX_BUCKETS - 1);
	assert_int_equal(kt_bucket_parent(fl), KT_MAX_BUCKETS - 1);
	assert_int_equal(fl & 0xffffu & ~KT_BUCKET_CHAINED, other);
	/* rechaining replaces the parent, no bits of the old one left over */
	fl = kt_bucket_chain_flags(fl, 1);
	assert_int_equal(kt_bucket_parent(fl), 1);
	/* unchaining restores the flags exactly */
	assert_int_equal(kt_bucket_chain_flags(fl, KT_SLOT_NONE), other);
	assert_int_equal(kt_bucket_chain_flags(kt_bucket_chain_flags(0, KT_MAX_BUCKETS - 1), KT_SLOT_NONE), 0);
	/* a parent that is no kt_buckets slot (a kt_coop one, say) does not
	 * chain: the programs would look up a slot that is not there */
	assert_int_equal(kt_bucket_chain_flags(other, KT_MAX_BUCKETS), other);
	/* high bits without KT_BUCKET_CHAINED name no parent */
	assert_int_equal(kt_bucket_parent(other | (5u << KT_BUCKET_PARENT_SHIFT)), KT_SLOT_NONE);
}

/* Without a parent, kt_gcra_decide_chained is kt_gcra_decide: the same
 * verdicts, waits and tat on the same sequence. */
static void test_chained_no_parent(void **state)
{
	static const __u64 costs[] = { 1, 1, 3, 1, 1, 10, 1, 2, 1, 1, 1, 5 };
	struct kt_bucket a = mk(10, 5), b = mk(10, 5);
	(void)state;

	for (int k = 0; k < 60; k++) {
		__u64 now = T0 + (__u64)k * 37 * MS, cost = costs[k % 12], wa, wb;
		int va = kt_gcra_decide(&a, now, cost, &wa);
		int vb = kt_gcra_decide_chained(&b, NULL, now, cost, &wb);

		assert_int_equal(va, vb);
		assert_int_equal(wa, wb);
		assert_int_equal(a.tat, b.tat);
	}
	/* closed: refused with the same wait */
	a.interval_fp = b.interval_fp = 0;
	__u64 wa, wb;
	assert_int_equal(kt_gcra_decide_chained(&b, NULL, T0, 1, &wb), KT_REFUSE);
	assert_int_equal(kt_gcra_decide(&a, T0, 1, &wa), KT_REFUSE);
	assert_int_equal(wa, wb);
}

/* Member burst 5 chained to a node bucket of burst 3 (same rate): 3 pass
 * back to back; the refusals, made by the node bucket, cost the member
 * nothing, and the wait is the node bucket's. */
static void test_chained_parent_limits(void **state)
{
	struct kt_bucket m = mk(1, 5), node = mk(1, 3);
	__u64 w, n = 0;
	(void)state;

	while (n < 10 && kt_gcra_decide_chained(&m, &node, T0, 1, &w) == KT_ADMIT) {
		assert_int_equal(w, 0);
		n++;
	}
	assert_int_equal(n, 3);
	assert_int_equal(w, SEC); /* the node bucket's next token */
	for (int k = 0; k < 5; k++) {
		assert_int_equal(kt_gcra_decide_chained(&m, &node, T0, 1, &w), KT_REFUSE);
		assert_int_equal(w, SEC);
	}
	assert_int_equal(kt_gcra_tokens_left(&m, T0), 2);
	assert_int_equal(kt_gcra_tokens_left(&node, T0), 0);
	/* one second on: the node bucket's one token, then refused again */
	assert_int_equal(kt_gcra_decide_chained(&m, &node, T0 + SEC - 1, 1, &w), KT_REFUSE);
	assert_int_equal(w, 1);
	assert_int_equal(kt_gcra_decide_chained(&m, &node, T0 + SEC, 1, &w), KT_ADMIT);
	assert_int_equal(kt_gcra_decide_chained(&m, &node, T0 + SEC, 1, &w), KT_REFUSE);
	assert_int_equal(kt_gcra_tokens_left(&m, T0 + SEC), 2); /* 2 - 1 + 1 refilled */

	/* a member refusal (the member empty, the node not) charges neither */
	m = mk(1, 2);
	node = mk(1, 10);
	assert_int_equal(kt_gcra_decide_chained(&m, &node, T0, 1, &w), KT_ADMIT);
	assert_int_equal(kt_gcra_decide_chained(&m, &node, T0, 1, &w), KT_ADMIT);
	assert_int_equal(kt_gcra_decide_chained(&m, &node, T0, 1, &w), KT_REFUSE);
	assert_int_equal(w, SEC);
	assert_int_equal(kt_gcra_tokens_left(&node, T0), 8);

	/* many-token requests (bytes): refunded in full */
	m = mk(1000, 1500);
	node = mk(1000, 1000);
	assert_int_equal(kt_gcra_decide_chained(&m, &node, T0, 600, &w), KT_ADMIT);
	assert_int_equal(kt_gcra_decide_chained(&m, &node, T0, 600, &w), KT_REFUSE);
	assert_int_equal(w, 200 * MS);
	assert_int_equal(kt_gcra_tokens_left(&m, T0), 900);
	assert_int_equal(kt_gcra_tokens_left(&node, T0), 400);
}

/* Two members of burst 4 on one node bucket of burst 5: 5 in all, however
 * the requests interleave; each member keeps what it did not spend. */
static void test_chained_members_share(void **state)
{
	struct kt_bucket a = mk(1, 4), b = mk(1, 4), node = mk(1, 5);
	__u64 w, na = 0, nb = 0;
	(void)state;

	for (int k = 0; k < 4; k++)
		na += kt_gcra_decide_chained(&a, &node, T0, 1, &w) == KT_ADMIT;
	for (int k = 0; k < 4; k++)
		nb += kt_gcra_decide_chained(&b, &node, T0, 1, &w) == KT_ADMIT;
	assert_int_equal(na, 4);
	assert_int_equal(nb, 1);
	assert_int_equal(kt_gcra_tokens_left(&a, T0), 0);
	assert_int_equal(kt_gcra_tokens_left(&b, T0), 3);
	assert_int_equal(kt_gcra_tokens_left(&node, T0), 0);

	/* interleaved */
	a = mk(1, 4);
	b = mk(1, 4);
	node = mk(1, 5);
	na = nb = 0;
	for (int k = 0; k < 8; k++) {
		na += kt_gcra_decide_chained(&a, &node, T0, 1, &w) == KT_ADMIT;
		nb += kt_gcra_decide_chained(&b, &node, T0, 1, &w) == KT_ADMIT;
	}
	assert_int_equal(na + nb, 5);
	assert_int_equal(kt_gcra_tokens_left(&a, T0) + kt_gcra_tokens_left(&b, T0), 8 - 5);

	/* over a minute at the rate: the node bucket's burst plus its rate,
	 * not the members' (their 8 tokens of burst are not all usable) */
	for (__u64 t = 1; t <= 60; t++)
		for (int k = 0; k < 3; k++) {
			na += kt_gcra_decide_chained(&a, &node, T0 + t * SEC, 1, &w) == KT_ADMIT;
			nb += kt_gcra_decide_chained(&b, &node, T0 + t * SEC, 1, &w) == KT_ADMIT;
		}
	assert_int_equal(na + nb, 5 + 60);
}

/* A closed node bucket refuses everything its members ask, with the closed
 * wait, and leaves the members' tokens as they were. */
static void test_chained_closed_parent(void **state)
{
	struct kt_bucket m = mk(1, 4), node = mk(1, 5);
	__u64 w;
	(void)state;

	assert_int_equal(kt_gcra_decide_chained(&m, &node, T0, 1, &w), KT_ADMIT);
	node.interval_fp = 0;
	for (int k = 0; k < 10; k++) {
		assert_int_equal(kt_gcra_decide_chained(&m, &node, T0 + (__u64)k * MS, 1, &w),
				 KT_REFUSE);
		assert_int_equal(w, ~0ULL);
	}
	assert_int_equal(kt_gcra_tokens_left(&m, T0), 3);
	/* a fresh member too, with a cost of many tokens */
	m = mk(1000, 1500);
	assert_int_equal(kt_gcra_decide_chained(&m, &node, T0, 1000, &w), KT_REFUSE);
	assert_true((__s64)(m.tat - T0) <= 0); /* given back: full again */
	assert_int_equal(kt_gcra_tokens_left(&m, T0), 1500);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tokens_to_ns),
		cmocka_unit_test(test_interval_from_rate),
		cmocka_unit_test(test_exact_burst),
		cmocka_unit_test(test_steady_rate),
		cmocka_unit_test(test_fractional_rates),
		cmocka_unit_test(test_byte_units),
		cmocka_unit_test(test_oversize),
		cmocka_unit_test(test_closed),
		cmocka_unit_test(test_clock_wrap),
		cmocka_unit_test(test_overflow_safety),
		cmocka_unit_test(test_tokens_left),
		cmocka_unit_test(test_rate_change),
		cmocka_unit_test(test_ramp_no_starvation),
		cmocka_unit_test(test_validity_fallback),
		cmocka_unit_test(test_fallback_switch_no_free_tokens),
		cmocka_unit_test(test_concurrent_cas),
		cmocka_unit_test(test_pace_matches_decide),
		cmocka_unit_test(test_pace_rate_and_horizon),
		cmocka_unit_test(test_pace_closed_and_zero_horizon),
		cmocka_unit_test(test_strict_permit_window),
		cmocka_unit_test(test_chain_flags),
		cmocka_unit_test(test_chained_no_parent),
		cmocka_unit_test(test_chained_parent_limits),
		cmocka_unit_test(test_chained_members_share),
		cmocka_unit_test(test_chained_closed_parent),
	};
	return cmocka_run_group_tests_name("gcra", tests, NULL, NULL);
}
