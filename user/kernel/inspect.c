/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <bpf/bpf.h>
#include "kernel/inspect.h"

void kt_kstate_free(struct kt_kstate *st)
{
	if (st)
		free(st->limits);
	free(st);
}

int kt_inspect_read(const struct kt_bpf *b, struct kt_kstate *st)
{
	struct kt_member_key key, next;
	struct kt_member_val val;
	struct kt_limit_info *infos = malloc(KT_MAX_LIMITS * sizeof(*infos));
	int *idx_of = malloc(KT_MAX_LIMITS * sizeof(*idx_of));
	uint32_t id;
	int ret;

	st->n_limits = 0;
	if (!infos || !idx_of) {
		ret = -ENOMEM;
		goto out;
	}
	if ((ret = kt_bpf_read_limits(b, infos)))
		goto out;
	for (id = 0; id < KT_MAX_LIMITS; id++) {
		struct kt_limit_info *li = &infos[id];
		struct kt_klimit *l;

		idx_of[id] = -1;
		if (!li->in_use)
			continue;
		if (st->n_limits == st->cap) {
			int grow = st->cap ? 2 * st->cap : 16;
			struct kt_klimit *g = realloc(st->limits, (size_t)grow * sizeof(*g));

			if (!g) {
				ret = -ENOMEM;
				goto out;
			}
			st->limits = g;
			st->cap = grow;
		}
		li->name[KT_NAME_LEN - 1] = 0;
		idx_of[id] = st->n_limits;
		l = &st->limits[st->n_limits++];
		memset(l, 0, sizeof(*l));
		l->id = id;
		l->info = *li;
	}
	if (bpf_map_get_next_key(b->members_fd, NULL, &next) != 0)
		goto out;
	do {
		key = next;
		if (bpf_map_lookup_elem(b->members_fd, &key, &val) < 0)
			continue;
		if (val.count > KT_LIMITS_PER_CGROUP)
			continue; /* written by hand: not ours to show */
		/* the inherited entries are the ancestor's members, shown there */
		for (uint32_t e = 0; e < kt_member_own(&val); e++) {
			const struct kt_member_ent *me = &val.ents[e];
			struct kt_klimit *l;
			struct kt_kmember *m;
			struct kt_bucket bk;
			int dup = 0;

			if (me->limit_id >= KT_MAX_LIMITS || idx_of[me->limit_id] < 0 ||
			    me->slot >= KT_MAX_BUCKETS)
				continue; /* written by hand or mid-update: not ours to show */
			l = &st->limits[idx_of[me->limit_id]];
			if (l->n_members >= KT_INSPECT_MAX_MEMBERS)
				continue;
			m = &l->members[l->n_members];
			m->cgroup_id = key.cgroup_id;
			m->slot = me->slot;
			if (bpf_map_lookup_elem(b->buckets_fd, &me->slot, &bk) == 0) {
				__u64 now = kt_clock_ns(), burst;

				/* the rate and burst the kernel applies now: the fallback
				 * once the lease lapsed, closed once that ended too */
				m->rate = kt_rate_from_interval_fp(kt_bucket_params(&bk, now, &burst));
				m->fallback_active = bk.valid_until && (__s64)(now - bk.valid_until) > 0;
				m->burst = burst;
			}
			kt_bpf_read_counters(b, me->slot, &m->counters);
			for (int k = 0; k < l->n_members; k++)
				dup |= l->members[k].slot == me->slot;
			if (!dup) {
				l->total.admitted += m->counters.admitted;
				l->total.throttled += m->counters.throttled;
				l->total.admitted_bytes += m->counters.admitted_bytes;
				l->total.throttled_bytes += m->counters.throttled_bytes;
			}
			l->n_members++;
		}
	} while (bpf_map_get_next_key(b->members_fd, &key, &next) == 0);
out:
	free(infos);
	free(idx_of);
	return ret;
}

const struct kt_klimit *kt_inspect_find(const struct kt_kstate *st, const char *name)
{
	for (int i = 0; i < st->n_limits; i++)
		if (!strcmp(st->limits[i].info.name, name))
			return &st->limits[i];
	return NULL;
}
