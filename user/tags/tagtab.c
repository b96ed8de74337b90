// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Query tags of one tag limit: a chained hash of tag -> tat, an LRU list for
 * max_tags, and a list of the tags served since the last harvest so the
 * exchange costs the tags seen, not the tags known. The bucket arithmetic is
 * the kernel's (kt_tag_take, kt_tag_debit), so a query tag and an XDP source
 * tag behave the same. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "kthrottle.h"
#include "tags/tagtab.h"

struct tag_ent {
	struct tag_ent *hnext;             /* hash chain */
	struct tag_ent *lru_prev, *lru_next; /* lru_next: toward the least recent */
	struct tag_ent *dirty_next;        /* on the harvest list */
	__u64 tat;
	uint64_t hits;                     /* served since the last harvest */
	uint64_t touched;                  /* kt clock ns of the last take or debit */
	uint64_t hash;
	bool dirty;
	bool orphan;                       /* evicted with hits unreported: freed at harvest */
	uint32_t len;
	char tag[];
};

struct kt_tagtab {
	struct kt_tagtab_opts o;
	uint64_t interval_fp;
	struct tag_ent **buckets;
	size_t nbuckets;                  /* power of two */
	size_t count;
	struct tag_ent *lru_head, *lru_tail; /* head: most recent */
	struct tag_ent *dirty;
	uint64_t seed;
	struct kt_tagtab_stats st;
};

static int opts_ok(const struct kt_tagtab_opts *o)
{
	return o && o->rate > 0 && isfinite(o->rate) && o->burst >= 1 && o->max_tags >= 1 &&
	       o->idle_expiry_ns > 0 && kt_interval_fp_from_rate(o->rate) != 0;
}

/* FNV-1a over the bytes with a per-table random seed, then a 64-bit
 * finalizer: tags come from applications, so chains must not be steerable
 * by a fixed hash. */
static uint64_t tag_hash(const struct kt_tagtab *t, const char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL ^ t->seed;

	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 0x100000001b3ULL;
	}
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

int kt_tagtab_new(const struct kt_tagtab_opts *o, struct kt_tagtab **out)
{
	struct kt_tagtab *t;
	size_t nb = 16;

	*out = NULL;
	if (!opts_ok(o))
		return -EINVAL;
	while (nb < o->max_tags && nb < (1u << 22))
		nb <<= 1;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->buckets = calloc(nb, sizeof(*t->buckets));
	if (!t->buckets) {
		free(t);
		return -ENOMEM;
	}
	t->nbuckets = nb;
	t->o = *o;
	t->interval_fp = kt_interval_fp_from_rate(o->rate);
	if (getrandom(&t->seed, sizeof(t->seed), GRND_NONBLOCK) != sizeof(t->seed))
		t->seed = (uint64_t)(uintptr_t)t ^ kt_clock_ns();
	*out = t;
	return 0;
}

static void lru_unlink(struct kt_tagtab *t, struct tag_ent *e)
{
	if (e->lru_prev)
		e->lru_prev->lru_next = e->lru_next;
	else
		t->lru_head = e->lru_next;
	if (e->lru_next)
		e->lru_next->lru_prev = e->lru_prev;
	else
		t->lru_tail = e->lru_prev;
	e->lru_prev = e->lru_next = NULL;
}

static void lru_push(struct kt_tagtab *t, struct tag_ent *e)
{
	e->lru_prev = NULL;
	e->lru_next = t->lru_head;
	if (t->lru_head)
		t->lru_head->lru_prev = e;
	t->lru_head = e;
	if (!t->lru_tail)
		t->lru_tail = e;
}

static void hash_unlink(struct kt_tagtab *t, struct tag_ent *e)
{
	struct tag_ent **pp = &t->buckets[e->hash & (t->nbuckets - 1)];

	while (*pp && *pp != e)
		pp = &(*pp)->hnext;
	if (*pp)
		*pp = e->hnext;
	e->hnext = NULL;
}

/* Takes e out of the table. Unreported hits stay on the harvest list (the
 * entry becomes an orphan, freed there), so eviction loses no report. */
static void forget(struct kt_tagtab *t, struct tag_ent *e)
{
	hash_unlink(t, e);
	lru_unlink(t, e);
	t->count--;
	if (e->dirty)
		e->orphan = true;
	else
		free(e);
}

static struct tag_ent *find(const struct kt_tagtab *t, const char *tag, size_t len, uint64_t h)
{
	struct tag_ent *e = t->buckets[h & (t->nbuckets - 1)];

	for (; e; e = e->hnext)
		if (e->hash == h && e->len == len && !memcmp(e->tag, tag, len))
			return e;
	return NULL;
}

static bool tag_ok(const char *tag, size_t len)
{
	return tag && len >= 1 && len <= KT_TAG_MAX_LEN;
}

/* The tag's entry, made full (tat 0 is "long ago") when new; NULL only on
 * ENOMEM. Moves it to the LRU head. */
static struct tag_ent *lookup_or_make(struct kt_tagtab *t, const char *tag, size_t len,
				      uint64_t now)
{
	uint64_t h = tag_hash(t, tag, len);
	struct tag_ent *e = find(t, tag, len, h);

	if (e) {
		lru_unlink(t, e);
		lru_push(t, e);
		e->touched = now;
		return e;
	}
	while (t->count >= t->o.max_tags && t->lru_tail) {
		forget(t, t->lru_tail);
		t->st.evicted++;
	}
	e = calloc(1, sizeof(*e) + len + 1);
	if (!e)
		return NULL;
	memcpy(e->tag, tag, len);
	e->len = (uint32_t)len;
	e->hash = h;
	e->tat = now; /* full: nothing ahead of now */
	e->touched = now;
	e->hnext = t->buckets[h & (t->nbuckets - 1)];
	t->buckets[h & (t->nbuckets - 1)] = e;
	lru_push(t, e);
	t->count++;
	return e;
}

static void mark_dirty(struct kt_tagtab *t, struct tag_ent *e)
{
	if (e->dirty)
		return;
	e->dirty = true;
	e->dirty_next = t->dirty;
	t->dirty = e;
}

int kt_tagtab_take(struct kt_tagtab *t, const char *tag, size_t len, uint64_t now)
{
	struct tag_ent *e;
	__u64 wait;

	if (!tag_ok(tag, len)) {
		t->st.refused++;
		return KT_REFUSE;
	}
	e = lookup_or_make(t, tag, len, now);
	if (!e || kt_tag_take(&e->tat, now, t->interval_fp, t->o.burst, &wait) != KT_ADMIT) {
		t->st.refused++;
		return KT_REFUSE;
	}
	e->hits++;
	mark_dirty(t, e);
	t->st.admitted++;
	return KT_ADMIT;
}

void kt_tagtab_debit(struct kt_tagtab *t, const char *tag, size_t len, uint64_t hits, uint64_t now)
{
	struct tag_ent *e;

	if (!tag_ok(tag, len) || !hits)
		return;
	e = lookup_or_make(t, tag, len, now);
	if (!e)
		return;
	kt_tag_debit(&e->tat, now, t->interval_fp, hits);
	t->st.remote_hits += hits;
}

double kt_tagtab_tokens(const struct kt_tagtab *t, const char *tag, size_t len, uint64_t now)
{
	const struct tag_ent *e = tag_ok(tag, len) ? find(t, tag, len, tag_hash(t, tag, len)) : NULL;

	if (!e)
		return (double)t->o.burst;
	return kt_tag_tokens(e->tat, now, t->interval_fp, t->o.burst);
}

size_t kt_tagtab_harvest(struct kt_tagtab *t, kt_tagtab_hit_fn fn, void *ctx)
{
	struct tag_ent *e = t->dirty, *next;
	size_t n = 0;

	t->dirty = NULL;
	for (; e; e = next) {
		next = e->dirty_next;
		e->dirty_next = NULL;
		e->dirty = false;
		if (e->hits) {
			fn(ctx, e->tag, e->len, e->hits);
			n++;
		}
		e->hits = 0;
		if (e->orphan)
			free(e);
	}
	return n;
}

void kt_tagtab_unharvest(struct kt_tagtab *t, const char *tag, size_t len, uint64_t hits)
{
	uint64_t h;
	struct tag_ent *e;

	if (!tag_ok(tag, len) || !hits)
		return;
	h = tag_hash(t, tag, len);
	e = find(t, tag, len, h);
	if (!e) {
		/* forgotten since: carry the hits on an orphan of its own */
		e = calloc(1, sizeof(*e) + len + 1);
		if (!e)
			return;
		memcpy(e->tag, tag, len);
		e->len = (uint32_t)len;
		e->hash = h;
		e->orphan = true;
	}
	e->hits += hits;
	mark_dirty(t, e);
}

size_t kt_tagtab_expire(struct kt_tagtab *t, uint64_t now)
{
	struct tag_ent *e = t->lru_tail, *prev;
	size_t n = 0;

	/* tat >= the last touch (a take or a debit leaves tat past it), so a
	 * tag touched within idle_expiry cannot have been full that long: the
	 * walk stops at the first one from the least recent end. */
	for (; e && (int64_t)(now - e->touched) >= (int64_t)t->o.idle_expiry_ns; e = prev) {
		prev = e->lru_prev;
		if ((int64_t)(now - e->tat) >= (int64_t)t->o.idle_expiry_ns) {
			forget(t, e);
			n++;
		}
	}
	t->st.expired += n;
	return n;
}

int kt_tagtab_reconfigure(struct kt_tagtab *t, const struct kt_tagtab_opts *o, uint64_t now)
{
	__u64 new_fp, old_cost, new_cost;

	if (!opts_ok(o))
		return -EINVAL;
	new_fp = kt_interval_fp_from_rate(o->rate);
	kt_gcra_tolerance(t->interval_fp, 1, 1, &old_cost);
	kt_gcra_tolerance(new_fp, 1, 1, &new_cost);
	if (new_cost != old_cost) {
		/* the tokens each tag is short stay the same number of tokens */
		for (struct tag_ent *e = t->lru_head; e; e = e->lru_next) {
			if ((int64_t)(e->tat - now) <= 0)
				continue;
			double tokens = (double)(e->tat - now) / (double)old_cost;
			double ahead = tokens * (double)new_cost;

			e->tat = now + (ahead >= (double)KT_NS_CAP ? KT_NS_CAP : (uint64_t)ahead);
		}
	}
	t->interval_fp = new_fp;
	t->o = *o;
	while (t->count > t->o.max_tags && t->lru_tail) {
		forget(t, t->lru_tail);
		t->st.evicted++;
	}
	return 0;
}

void kt_tagtab_stats(const struct kt_tagtab *t, struct kt_tagtab_stats *s)
{
	*s = t->st;
	s->tags = t->count;
}

void kt_tagtab_free(struct kt_tagtab *t)
{
	struct tag_ent *e, *next;

	if (!t)
		return;
	for (e = t->dirty; e; e = next) { /* orphans live only here */
		next = e->dirty_next;
		if (e->orphan)
			free(e);
	}
	for (e = t->lru_head; e; e = next) {
		next = e->lru_next;
		free(e);
	}
	free(t->buckets);
	free(t);
}
