/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The heartbeat memo (hbmemo.h): an open-addressing table keyed by limit
 * name, linear probing, grown at half full. Entries are never removed one
 * by one (forget only clears the digest); groups come and go by name, so
 * once the table holds KT_HBMEMO_MAX names it is emptied and refilled by the
 * next heartbeats, which then take the full path once each. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kthrottle.h"
#include "store/hbmemo.h"

#define KT_HBMEMO_MIN_CAP 64
#define KT_HBMEMO_MAX (2 * KT_MAX_LIMITS)

struct memo_entry {
	char limit[KT_NAME_LEN]; /* "" = free slot */
	uint64_t digest;         /* 0 = no answer to repeat */
	bool joined;             /* answered once: its members were registered */
	bool confirmed;          /* the answer is its last call's (kt_hbmemo_doubt) */
	int agree, size, live;
	double reserved;
	uint64_t at_ns;          /* kt_clock_ns() when it was set */
	uint64_t asof_ms;        /* the Redis TIME the answer was computed at; 0: unknown */
};

struct kt_hbmemo {
	struct memo_entry *e;
	size_t cap; /* a power of two */
	int n;
};

#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL

static uint64_t fnv(uint64_t h, const void *p, size_t len)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < len; i++)
		h = (h ^ b[i]) * FNV_PRIME;
	return h;
}

uint64_t kt_hbmemo_digest(const struct kt_pool_req *q)
{
	uint64_t h = FNV_OFFSET;

	h = fnv(h, &q->stale_ms, sizeof(q->stale_ms));
	h = fnv(h, &q->hold_ms, sizeof(q->hold_ms));
	h = fnv(h, &q->fallback_rate, sizeof(q->fallback_rate));
	h = fnv(h, &q->n_members, sizeof(q->n_members));
	for (int i = 0; i < q->n_members; i++) {
		h = fnv(h, q->members[i].id, strlen(q->members[i].id) + 1);
		h = fnv(h, &q->members[i].reported_size, sizeof(q->members[i].reported_size));
	}
	return h ? h : 1;
}

struct kt_hbmemo *kt_hbmemo_new(void)
{
	struct kt_hbmemo *m = calloc(1, sizeof(*m));

	if (m && !(m->e = calloc(KT_HBMEMO_MIN_CAP, sizeof(*m->e)))) {
		free(m);
		return NULL;
	}
	if (m)
		m->cap = KT_HBMEMO_MIN_CAP;
	return m;
}

void kt_hbmemo_free(struct kt_hbmemo *m)
{
	if (m)
		free(m->e);
	free(m);
}

int kt_hbmemo_count(const struct kt_hbmemo *m)
{
	return m ? m->n : 0;
}

/* The slot holding limit, or the free slot where it would go. */
static struct memo_entry *slot_of(const struct kt_hbmemo *m, const char *limit)
{
	size_t i = fnv(FNV_OFFSET, limit, strlen(limit)) & (m->cap - 1);

	while (m->e[i].limit[0] && strcmp(m->e[i].limit, limit))
		i = (i + 1) & (m->cap - 1);
	return &m->e[i];
}

/* The entry holding limit, or NULL (no memo, no such name). */
static struct memo_entry *find(const struct kt_hbmemo *m, const char *limit)
{
	struct memo_entry *e;

	if (!m || strlen(limit) >= KT_NAME_LEN)
		return NULL;
	e = slot_of(m, limit);
	return e->limit[0] ? e : NULL;
}

void kt_hbmemo_lookup(const struct kt_hbmemo *m, const char *limit, uint64_t digest,
		      struct kt_hbmemo_hit *hit)
{
	const struct memo_entry *e = find(m, limit);

	*hit = (struct kt_hbmemo_hit){ .joined = !m || strlen(limit) >= KT_NAME_LEN };
	if (!e)
		return;
	hit->joined = e->joined;
	hit->confirmed = e->confirmed;
	hit->asof_ms = e->asof_ms;
	if (e->digest != digest)
		return;
	hit->has = 1;
	hit->ans = (struct kt_pool_answer){ .agree = e->agree, .size = e->size, .live = e->live,
					    .reserved = e->reserved };
	hit->at_ns = e->at_ns;
}

int kt_hbmemo_get(const struct kt_hbmemo *m, const char *limit, uint64_t digest,
		  struct kt_pool_answer *ans)
{
	struct kt_hbmemo_hit h;

	kt_hbmemo_lookup(m, limit, digest, &h);
	if (h.has)
		*ans = h.ans;
	return h.has;
}

void kt_hbmemo_forget(struct kt_hbmemo *m, const char *limit)
{
	struct memo_entry *e = find(m, limit);

	if (e)
		e->digest = 0;
}

void kt_hbmemo_doubt(struct kt_hbmemo *m, const char *limit)
{
	struct memo_entry *e = find(m, limit);

	if (e)
		e->confirmed = false;
}

void kt_hbmemo_rejoin(struct kt_hbmemo *m, const char *limit)
{
	struct memo_entry *e = find(m, limit);

	if (e)
		e->joined = e->confirmed = false;
}

static int grow(struct kt_hbmemo *m)
{
	struct kt_hbmemo big = { .cap = m->cap * 2 };

	if (!(big.e = calloc(big.cap, sizeof(*big.e))))
		return -ENOMEM;
	for (size_t i = 0; i < m->cap; i++)
		if (m->e[i].limit[0])
			*slot_of(&big, m->e[i].limit) = m->e[i];
	free(m->e);
	m->e = big.e;
	m->cap = big.cap;
	return 0;
}

int kt_hbmemo_set(struct kt_hbmemo *m, const char *limit, uint64_t digest,
		  const struct kt_pool_answer *ans, uint64_t asof_ms)
{
	struct memo_entry *e;
	size_t len = strlen(limit);

	if (!m || len >= KT_NAME_LEN)
		return 0;
	e = slot_of(m, limit);
	if (!e->limit[0]) {
		if (m->n >= KT_HBMEMO_MAX) {
			memset(m->e, 0, m->cap * sizeof(*m->e));
			m->n = 0;
		} else if ((size_t)(m->n + 1) * 2 > m->cap && grow(m)) {
			kt_hbmemo_forget(m, limit);
			return -ENOMEM;
		}
		e = slot_of(m, limit);
		memcpy(e->limit, limit, len + 1);
		m->n++;
	}
	e->digest = digest;
	e->joined = true;
	e->confirmed = true;
	e->agree = ans->agree;
	e->size = ans->size;
	e->live = ans->live;
	e->reserved = ans->reserved;
	e->at_ns = kt_clock_ns();
	e->asof_ms = asof_ms;
	return 0;
}
