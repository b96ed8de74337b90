/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The tag limits of the daemon (top-level `tags:`), each with its
 * query server(s), its query-tag buckets (tagtab.h) and its exchange of hit
 * counts with the other nodes.
 *
 * Exchange: every reportInterval the tags served since the last report and
 * their hit counts go, as text lines, into the limit's Redis stream
 * (kt_store_tag_exchange), and what the other nodes reported since comes
 * back; each remote hit takes a token from the local bucket. One store
 * connection and worker thread per tag limit (storeq.h): no store I/O on the
 * loop. A report that fails is put back (kt_tagtab_unharvest) and goes with
 * the next one, so a Redis outage loses no hits the other nodes must count:
 * while it lasts each node throttles on its own counts; status says so.
 * Without a redis store a tag limit is local to the node.
 *
 * Report lines: "q <hits> <tag>\n" (a query tag, any bytes but '\n' and
 * NUL), and "x <hits> <address>/<prefix>\n" (an XDP source prefix). A line
 * that is not one of these is skipped and counted (bad_remote). */
#ifndef KT_TAGS_H
#define KT_TAGS_H

#include <stdbool.h>
#include <stdint.h>
#include "base/config.h"
#include "tags/query.h"
#include "tags/tagtab.h"

struct kt_tags;

/* Opens every tag limit of cfg: binds its query sockets, makes its tables,
 * opens its store worker (no store I/O yet). *out is NULL when cfg has no
 * tag limits. On error nothing is left open or bound. */
int kt_tags_create(struct kt_tags **out, const struct kt_config *cfg, char *err, size_t errlen);
void kt_tags_destroy(struct kt_tags *t);
/* What a start checks before it binds or attaches anything (--check):
 * every xdp interface exists. 0 or -ENODEV with the start's error line. */
int kt_tags_check(const struct kt_config *cfg, char *err, size_t errlen);
/* Reload: a tag limit that keeps its name keeps its tags and their tokens
 * (kt_tagtab_reconfigure), its unreported hits and its place in the stream;
 * its query listeners are rebound only if their addresses changed. On error
 * old is untouched and keeps running. On success old is consumed. */
int kt_tags_reload(struct kt_tags **out, struct kt_tags *old, const struct kt_config *cfg, char *err,
		   size_t errlen);
/* An fd (epoll of its own) readable when kt_tags_run has work; -1 for NULL. */
int kt_tags_fd(const struct kt_tags *t);
void kt_tags_run(struct kt_tags *t, uint64_t now);

struct kt_tag_stat {
	char name[KT_NAME_LEN];
	double rate;
	uint64_t burst;
	uint64_t report_ns;
	struct kt_tagtab_stats tab;   /* query tags */
	struct kt_query_stats query;  /* summed over its listeners */
	bool exchange;                /* a redis store carries the exchange */
	bool store_ok;                /* the last exchange succeeded */
	uint64_t reports, report_errors;
	uint64_t tags_sent, remote_entries, remote_tags, bad_remote;
	uint64_t last_ok_ns;          /* kt clock of the last good exchange, 0 never */
	/* XDP source tags (cfg xdp) */
	bool xdp;
	int ifaces;                   /* interfaces attached */
	uint64_t xdp_buckets, xdp_admitted, xdp_dropped; /* its buckets in the kernel now */
	uint64_t xdp_hits_sent, xdp_remote_hits;
	char last_error[256];
};
int kt_tags_count(const struct kt_tags *t);
void kt_tags_get(const struct kt_tags *t, int i, struct kt_tag_stat *out);
/* Test and CLI hook: one decision for a query tag of limit i, as the query
 * server would make it (KT_ADMIT or KT_REFUSE). */
int kt_tags_take(struct kt_tags *t, int i, const char *tag, size_t len, uint64_t now);

#endif
