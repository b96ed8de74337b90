// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Fuzz target for the query protocol's line parser (user/tags/qline.c):
 * the input's first byte picks read sizes, the rest is the stream. Fed in
 * those pieces, the parser must give exactly one "OK\n"/"NO\n" per '\n',
 * call decide only with well-formed tags (1..255 bytes, no NUL), and agree
 * answer for answer with a simple model of query.c's rules over the whole
 * stream at once. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "tags/qline.h"

struct rec {
	size_t calls;
};

/* Serves tags whose bytes sum to an even number. */
static int decide(void *ctx, const char *tag, size_t len)
{
	unsigned sum = 0;

	if (!len || len > KT_TAG_MAX_LEN || memchr(tag, 0, len))
		abort();
	((struct rec *)ctx)->calls++;
	for (size_t i = 0; i < len; i++)
		sum += (unsigned char)tag[i];
	return sum % 2 == 0;
}

/* The rules, for one whole line without its '\n': 'B' a bad line (NO,
 * undecided), else decide's verdict 'O' or 'N'. */
static char model(const char *l, size_t len)
{
	unsigned sum = 0;

	if (len && l[len - 1] == '\r')
		len--;
	if (!len || len > KT_TAG_MAX_LEN || memchr(l, 0, len))
		return 'B';
	for (size_t i = 0; i < len; i++)
		sum += (unsigned char)l[i];
	return sum % 2 == 0 ? 'O' : 'N';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kt_qline s = { 0 };
	struct kt_qline_counts cnt = { 0 };
	struct rec r = { 0 };
	const char *p, *line, *end;
	size_t n, o = 0, lines = 0, step, want_calls = 0;
	char *out;

	if (!size)
		return 0;
	step = (data[0] % 64) + 1; /* 1..64-byte reads */
	p = (const char *)data + 1;
	n = size - 1;
	out = malloc(3 * n + 1);
	if (!out)
		return 0;
	for (size_t off = 0; off < n; off += step) {
		size_t k = n - off < step ? n - off : step;
		size_t w = kt_qline_parse(&s, p + off, k, out + o, decide, &r, &cnt);

		if (w % 3 || w > 3 * k)
			abort();
		o += w;
	}
	end = p + n;
	for (line = p; line < end;) {
		const char *nl = memchr(line, '\n', end - line);
		char m;

		if (!nl)
			break;
		m = model(line, nl - line);
		if (o < 3 * (lines + 1) || memcmp(out + 3 * lines, m == 'O' ? "OK\n" : "NO\n", 3))
			abort();
		if (m != 'B')
			want_calls++;
		lines++;
		line = nl + 1;
	}
	/* exactly one answer per '\n', and the counters agree with them */
	if (o != 3 * lines || cnt.ok + cnt.no != lines || r.calls != want_calls ||
	    cnt.ok > r.calls || cnt.bad != lines - r.calls)
		abort();
	/* a partial line never grows past one tag and its '\r' */
	if (s.llen > KT_QLINE_MAX || (s.discard && s.llen))
		abort();
	free(out);
	return 0;
}
