/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The query tags of one tag limit: a leaky bucket per tag string,
 * in the daemon's memory, with the kernel's own arithmetic (kt_tag_take,
 * kt_tag_debit in kthrottle.h). At most max_tags tags; a new one beyond that
 * evicts the least recently used. A tag whose bucket has been full for
 * idle_expiry is forgotten (kt_tagtab_expire): forgetting a full bucket
 * changes no answer, so a tag in debt is never forgotten early. Not thread
 * safe: the daemon's one loop owns it. */
#ifndef KT_TAGTAB_H
#define KT_TAGTAB_H

#include <stddef.h>
#include <stdint.h>

struct kt_tagtab;

struct kt_tagtab_opts {
	double rate;             /* tokens per second, > 0 */
	uint64_t burst;          /* >= 1 */
	uint32_t max_tags;       /* >= 1 */
	uint64_t idle_expiry_ns; /* > 0 */
};

/* 0, or -EINVAL (bad opts) / -ENOMEM. */
int kt_tagtab_new(const struct kt_tagtab_opts *o, struct kt_tagtab **out);
void kt_tagtab_free(struct kt_tagtab *t);
/* A reload: the new rate and burst hold from now for every tag, each keeping
 * the tokens it has (debt rescaled, as kt_bucket_rescale does). A smaller
 * max_tags evicts the least recently used at once. -EINVAL changes nothing. */
int kt_tagtab_reconfigure(struct kt_tagtab *t, const struct kt_tagtab_opts *o, uint64_t now);

/* One query at `now` (kt clock ns): KT_ADMIT, taking a token, or KT_REFUSE.
 * Tags are byte strings of 1..KT_TAG_MAX_LEN bytes; anything else refuses. */
int kt_tagtab_take(struct kt_tagtab *t, const char *tag, size_t len, uint64_t now);
/* Hits another node served: `hits` tokens taken at `now`, below zero if
 * need be. An unknown tag is made (full, then debited). Not reported back. */
void kt_tagtab_debit(struct kt_tagtab *t, const char *tag, size_t len, uint64_t hits,
		     uint64_t now);
/* The tag's tokens at `now` (fractional, may be negative); burst when the
 * tag is unknown. Changes nothing. */
double kt_tagtab_tokens(const struct kt_tagtab *t, const char *tag, size_t len, uint64_t now);

/* Hands each tag served since the last harvest, with its hit count, to `fn`
 * and zeroes the counts. Costs the number of such tags, not of all tags.
 * Returns how many tags it handed over. */
typedef void (*kt_tagtab_hit_fn)(void *ctx, const char *tag, size_t len, uint64_t hits);
size_t kt_tagtab_harvest(struct kt_tagtab *t, kt_tagtab_hit_fn fn, void *ctx);
/* Hits that could not be reported (a store failure): added back, so the
 * next harvest carries them. */
void kt_tagtab_unharvest(struct kt_tagtab *t, const char *tag, size_t len, uint64_t hits);

/* Forgets tags whose bucket has been full for idle_expiry; returns how many. */
size_t kt_tagtab_expire(struct kt_tagtab *t, uint64_t now);

struct kt_tagtab_stats {
	uint64_t tags;       /* known now */
	uint64_t admitted;   /* totals since made */
	uint64_t refused;
	uint64_t remote_hits;
	uint64_t evicted;    /* by max_tags */
	uint64_t expired;    /* by idle_expiry */
};
void kt_tagtab_stats(const struct kt_tagtab *t, struct kt_tagtab_stats *s);

#endif
