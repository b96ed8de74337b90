// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Fuzz target for the control-socket protocol: arbitrary bytes, as one
 * read or split into the reads the daemon would make, must parse to a
 * command, "read more" or an error with a one-line reply, and the result
 * must only depend on the bytes up to the first newline. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "control/ctlproto.h"

static void check(const char *buf, size_t len)
{
	int r = kt_ctl_parse(buf, len);
	const char *reply = kt_ctl_error_reply(r);
	const char *nl = memchr(buf, '\n', len < KT_CTL_MAX_LINE ? len : KT_CTL_MAX_LINE);

	if (r < KT_CTL_ERR_UNKNOWN || r > KT_CTL_LAST)
		abort();
	/* a subscription names a limit as a limit name is spelled ('@': a
	 * groupBy limit's group) */
	if (r == KT_CTL_SUBSCRIBE) {
		char name[64];

		kt_ctl_subscribe_name(buf, name, sizeof(name));
		if (!name[0] || strlen(name) > 31 ||
		    strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-@") !=
			    strlen(name))
			abort();
	}
	if ((r < 0) != (reply != NULL))
		abort();
	if (reply && (strncmp(reply, "error: ", 7) || strchr(reply, '\n') != reply + strlen(reply) - 1))
		abort();
	/* a command needs its newline; "read more" never comes past the limit */
	if (r > 0 && !nl)
		abort();
	if (r == KT_CTL_INCOMPLETE && (nl || len >= KT_CTL_MAX_LINE))
		abort();
	/* bytes after the newline change nothing */
	if (nl && kt_ctl_parse(buf, (size_t)(nl - buf) + 1) != r)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* the daemon parses a growing prefix after each read */
	char *copy = malloc(size ? size : 1);
	int r = KT_CTL_INCOMPLETE;

	if (!copy)
		return 0;
	memcpy(copy, data, size);
	for (size_t n = 0; n <= size && r == KT_CTL_INCOMPLETE; n++) {
		check(copy, n);
		r = kt_ctl_parse(copy, n);
	}
	check(copy, size);
	free(copy);
	return 0;
}
