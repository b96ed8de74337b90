// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* libkthrottle demo: asks a cooperative limit for one token per request,
 * as fast as it is allowed, for a few seconds, and prints what was admitted
 * and refused each second.
 *
 *   libkthrottle_demo LIMIT [SECONDS]    (pin dir: $KTHROTTLE_PIN_DIR)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kthrottle_client.h"

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv)
{
	struct kthrottle *h;
	int secs = argc > 2 ? atoi(argv[2]) : 3, s, r;

	if (argc < 2) {
		fprintf(stderr, "usage: %s LIMIT [SECONDS]\n", argv[0]);
		return 2;
	}
	if (kthrottle_open(argv[1], &h)) {
		fprintf(stderr, "%s\n", kthrottle_last_error());
		return 1;
	}
	for (s = 0; s < secs; s++) {
		uint64_t end = now_ns() + 1000000000ull, admitted = 0, refused = 0, retry = 0;

		while (now_ns() < end) {
			/* a real client would do its request when admitted and
			 * wait retry-after (or use kthrottle_acquire) when not */
			r = kthrottle_acquire(h, 1, end - now_ns());
			if (r < 0) {
				fprintf(stderr, "%s\n", kthrottle_last_error());
				kthrottle_close(h);
				return 1;
			}
			if (r)
				admitted++;
			else
				refused++;
		}
		r = kthrottle_is_throttled(h, &retry);
		printf("%s: second %d: admitted %llu, timed out %llu; throttled now: %s (%.1f ms)\n",
		       argv[1], s + 1, (unsigned long long)admitted, (unsigned long long)refused,
		       r == 1 ? "yes" : "no", retry / 1e6);
	}
	kthrottle_close(h);
	return 0;
}
