// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* In-flight slots for cooperative requests: a slot is a connected UDP
 * socket the kernel counts under an in-flight limit (unit concurrent), so
 * the kernel gives it back when the descriptor closes, however: release,
 * exit, kill -9. Nothing is sent on it. See kthrottle_client.h. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>

#include "kthrottle_client.h"
#include "libkthrottle_int.h"

#define KT_API __attribute__((visibility("default")))
#define SLOT_WAIT_MIN_NS 1000000ULL /* the first wait for a slot to free */
#define SLOT_WAIT_MAX_NS 8000000ULL /* waits double up to this */

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

KT_API int kthrottle_slot_acquire(const char *limit, uint64_t timeout_ns)
{
	struct sockaddr_storage ss;
	socklen_t len = 0;
	uint64_t start = mono_ns(), wait = SLOT_WAIT_MIN_NS;
	int refuse, err;

	if (!limit || !*limit || strlen(limit) >= KT_NAME_LEN)
		return kt_lib_fail(EINVAL, "kthrottle_slot_acquire: limit name must be 1..%d bytes",
				   KT_NAME_LEN - 1);
	if ((err = kt_lib_slot_target(limit, &ss, &len, &refuse)))
		return err;
	for (;;) {
		int fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		uint64_t now;

		if (fd < 0)
			return kt_lib_fail(errno, "kthrottle_slot_acquire: socket");
		if (connect(fd, (struct sockaddr *)&ss, len) == 0)
			return fd; /* the slot: held until this descriptor closes */
		err = errno;
		close(fd);
		if (err != refuse)
			return kt_lib_fail(err, "kthrottle_slot_acquire: connect for limit %s", limit);
		/* every slot is held: a slot frees when a holder closes, which
		 * nothing announces, so look again, less often the longer it takes */
		now = mono_ns();
		if (now - start >= timeout_ns)
			return kt_lib_fail(timeout_ns ? ETIMEDOUT : EBUSY,
					   "kthrottle_slot_acquire: every slot of %s is held", limit);
		if (wait > timeout_ns - (now - start))
			wait = timeout_ns - (now - start);
		{
			struct timespec ts = { (time_t)(wait / 1000000000ULL),
					       (long)(wait % 1000000000ULL) };

			nanosleep(&ts, NULL);
		}
		if (wait < SLOT_WAIT_MAX_NS)
			wait *= 2;
	}
}

KT_API int kthrottle_slot_release(int slot)
{
	if (slot < 0)
		return kt_lib_fail(EBADF, "kthrottle_slot_release: no slot");
	return close(slot) ? kt_lib_fail(errno, "kthrottle_slot_release: close") : 0;
}
