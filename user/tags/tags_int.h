/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What tags.c (query servers, buckets, the hit exchange) and xdp_plan.c
 * (the XDP program's attachments and rules) share: the tag limits' state. */
#ifndef KT_TAGS_INT_H
#define KT_TAGS_INT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "kthrottle.h"
#include "base/config.h"
#include "store/store.h"
#include "store/storeq.h"
#include "tags/tags.h"
#include "tags/tagtab.h"
#include "tags/query.h"
#include "tags/xdp_maps.h"

#define KEEP_MIN_MS 60000ULL /* stream retention: at least a minute, 10 reports */
#define RETRY_NS (1000ULL * 1000000ULL) /* a failed exchange is retried after 1 s at most */
#define HITS_MAX 1000000000000ULL /* a remote count above this is not believed */

/* epoll data: what became readable */
#define EV_TIMER 0xffffffffu
#define EV_QUERY(i) ((uint32_t)(i) << 1)
#define EV_STORE(i) (((uint32_t)(i) << 1) | 1)

struct xjob {
	char limit[KT_NAME_LEN];
	char node[256];
	char last_id[KT_STORE_TAG_ID_MAX];
	uint64_t keep_ms;
	char **chunks;
	size_t *lens;
	int n_chunks;
	/* results */
	int ret, more;
	char err[256];
	char *in;            /* the other nodes' chunks, each followed by '\n' already */
	size_t in_len, in_cap;
	int in_entries;
	bool in_oom;
};

/* XDP hits harvested for a limit, waiting for its next report */
struct xhit {
	struct kt_tag_key key;
	uint64_t hits;
};

struct tlimit {
	struct kt_tag_limit_cfg cfg;  /* a copy; query_socket owned */
	uint32_t xid;                 /* its tag_limit id in the XDP maps, stable across reloads */
	int ifindex[KT_TAG_MAX_IFACES]; /* attached, 0 = none */
	struct xhit *xh;              /* XDP hits not yet reported */
	size_t n_xh, cap_xh;
	struct kt_tagtab *tab;
	struct kt_query *query;
	int evfd;
	struct kt_storeq *q;          /* NULL: no exchange (not a redis store) */
	bool in_flight;
	char last_id[KT_STORE_TAG_ID_MAX];
	uint64_t next_report_ns;
	uint64_t next_expire_ns;
	struct kt_tag_stat st;
};

struct kt_tags {
	struct tlimit *l;
	int n;
	struct kt_xdp_tags *xdp;      /* NULL: no tag limit has xdp */
	char xdp_pin[PATH_MAX];
	uint32_t xdp_max_tags;        /* the bucket map's size (fixed until a restart) */
	int epfd, timerfd;
	char node[256];
};

/* xdp_plan.c */
/* XDP tag buckets the configuration wants (the sum of maxTags), 0: none */
uint32_t kt_tags_xdp_total(const struct kt_config *cfg);
/* every tag limit's interfaces to ifindexes; an unknown one is an error */
int kt_tags_resolve_ifaces(struct kt_tags *t, char *err, size_t errlen);
/* the XDP maps and program, pinned under t->xdp_pin */
int kt_tags_xdp_open(struct kt_tags *t, const struct kt_config *cfg, char *err, size_t errlen);
/* a start's attachments and rules (nothing attached stays on error) */
int kt_tags_xdp_start(struct kt_tags *t, const struct kt_config *cfg, char *err, size_t errlen);
/* a committed reload's attachments and rules, from `old`'s */
void kt_tags_xdp_reload(struct kt_tags *t, struct kt_tags *old, const struct kt_config *cfg);

#endif
