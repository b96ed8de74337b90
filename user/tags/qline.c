/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The query protocol's line parser (qline.h). */
#include <string.h>

#include "tags/qline.h"

static const char ans_ok[3] = { 'O', 'K', '\n' };
static const char ans_no[3] = { 'N', 'O', '\n' };

static inline size_t bad(struct kt_qline_counts *cnt, char *out)
{
	cnt->bad++;
	cnt->no++;
	memcpy(out, ans_no, 3);
	return 3;
}

/* Answers one complete line (without its '\n'). */
static inline size_t answer(const char *l, size_t len, char *out, kt_qline_decide_fn decide,
			    void *ctx, struct kt_qline_counts *cnt)
{
	if (len && l[len - 1] == '\r')
		len--;
	if (!len || len > KT_TAG_MAX_LEN || memchr(l, 0, len))
		return bad(cnt, out);
	if (decide(ctx, l, len) == 1) {
		cnt->ok++;
		memcpy(out, ans_ok, 3);
	} else {
		cnt->no++;
		memcpy(out, ans_no, 3);
	}
	return 3;
}

size_t kt_qline_parse(struct kt_qline *s, const char *p, size_t n, char *out,
		      kt_qline_decide_fn decide, void *ctx, struct kt_qline_counts *cnt)
{
	const char *end = p + n;
	size_t o = 0;

	while (p < end) {
		const char *nl = memchr(p, '\n', end - p);
		size_t seg;

		if (!nl) {
			seg = end - p;
			if (s->discard)
				break;
			if (s->llen + seg > KT_QLINE_MAX) {
				s->discard = true; /* too long already: skip, never buffer */
				s->llen = 0;
			} else {
				memcpy(s->line + s->llen, p, seg);
				s->llen += seg;
			}
			break;
		}
		seg = nl - p;
		if (s->discard) {
			s->discard = false;
			o += bad(cnt, out + o);
		} else if (!s->llen) {
			o += answer(p, seg, out + o, decide, ctx, cnt);
		} else if (s->llen + seg > KT_QLINE_MAX) {
			s->llen = 0;
			o += bad(cnt, out + o);
		} else {
			memcpy(s->line + s->llen, p, seg);
			o += answer(s->line, s->llen + seg, out + o, decide, ctx, cnt);
			s->llen = 0;
		}
		p = nl + 1;
	}
	return o;
}
