// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Fuzz target for the metrics endpoint's request parser: arbitrary bytes,
 * parsed as the growing prefix the server has after each read, must give
 * "read more" (never at the 8 KiB cap) or a status the server answers, a
 * decided status must not change as more bytes come, and a GET/HEAD's path
 * must lie in the request and begin with '/'. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "control/metrics.h"

static int check(const char *buf, size_t len, struct kt_http_req *req)
{
	int r = kt_http_parse(buf, len, req);

	switch (r) {
	case 0:
		if (len >= KT_HTTP_MAX_REQ)
			abort();
		if (len >= KT_HTTP_MAX_LINE && !memchr(buf, '\n', KT_HTTP_MAX_LINE))
			abort();
		break;
	case 200:
		if (!req->len || req->len > len || req->len > KT_HTTP_MAX_REQ ||
		    !req->path_len || req->path_off + req->path_len > req->len ||
		    buf[req->path_off] != '/')
			abort();
		for (size_t i = 0; i < req->path_len; i++)
			if ((unsigned char)buf[req->path_off + i] <= ' ' ||
			    buf[req->path_off + i] == '?')
				abort();
		/* the bytes after the request change nothing */
		{
			struct kt_http_req again;

			if (kt_http_parse(buf, req->len, &again) != 200 ||
			    memcmp(&again, req, sizeof(again)))
				abort();
		}
		break;
	case 400: case 405: case 414: case 431: case 505:
		break;
	default:
		abort();
	}
	return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *copy = malloc(size ? size : 1);
	struct kt_http_req req, first;
	size_t n;
	int r = 0, fr;

	if (!copy)
		return 0;
	memcpy(copy, data, size);
	/* the server parses a growing prefix after each read */
	for (n = 0; n <= size && !r; n++)
		r = check(copy, n, &first);
	fr = check(copy, size, &req);
	if (r && (fr != r || (r == 200 && memcmp(&req, &first, sizeof(req)))))
		abort();
	free(copy);
	return 0;
}
