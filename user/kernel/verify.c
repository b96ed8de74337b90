/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <bpf/bpf.h>
#include "base/log.h"
#include "kernel/verify.h"

struct kt_verify_record {
	uint64_t *ids;
	struct kt_member_val *vals;
	int n;
	uint32_t *limit_ids;
	struct kt_limit_info *limits;
	int nl;
};

void kt_verify_free(struct kt_bpf *b)
{
	struct kt_verify_record *r = b->verify;

	if (!r)
		return;
	free(r->ids);
	free(r->vals);
	free(r->limit_ids);
	free(r->limits);
	free(r);
	b->verify = NULL;
}

int kt_verify_note_commit(struct kt_bpf *b, const uint64_t *cgroup_ids,
			  const struct kt_member_val *vals, int n, const uint32_t *limit_ids,
			  const struct kt_limit_info *limits, int nl)
{
	struct kt_verify_record *r = calloc(1, sizeof(*r));

	kt_verify_free(b);
	if (!r)
		return -ENOMEM;
	r->ids = calloc(n ? n : 1, sizeof(*r->ids));
	r->vals = calloc(n ? n : 1, sizeof(*r->vals));
	r->limit_ids = calloc(nl ? nl : 1, sizeof(*r->limit_ids));
	r->limits = calloc(nl ? nl : 1, sizeof(*r->limits));
	b->verify = r;
	if (!r->ids || !r->vals || !r->limit_ids || !r->limits) {
		kt_verify_free(b);
		return -ENOMEM;
	}
	memcpy(r->ids, cgroup_ids, n * sizeof(*r->ids));
	memcpy(r->vals, vals, n * sizeof(*r->vals));
	memcpy(r->limit_ids, limit_ids, nl * sizeof(*r->limit_ids));
	memcpy(r->limits, limits, nl * sizeof(*r->limits));
	r->n = n;
	r->nl = nl;
	return 0;
}

/* "count 1 own 1 flags 0x0 [limit 0 slot 3]", or "none" (no entry). */
static const char *member_text(const struct kt_member_val *v, bool present, char *buf, size_t len)
{
	size_t o;

	if (!present)
		return "none";
	o = (size_t)snprintf(buf, len, "count %u own %u flags %#x [", v->count, v->own, v->flags);
	for (unsigned k = 0; k < KT_LIMITS_PER_CGROUP && k < v->count && o < len; k++)
		o += (size_t)snprintf(buf + o, len - o, "%slimit %u slot %u", k ? ", " : "",
				      v->ents[k].limit_id, v->ents[k].slot);
	if (o < len)
		snprintf(buf + o, len - o, "]");
	return buf;
}

static const char *limit_text(const struct kt_limit_info *v, bool present, char *buf, size_t len)
{
	if (!present)
		return "none";
	snprintf(buf, len, "\"%.*s\" in_use %u unit %u scope %u proto %#x ports %u-%u",
		 (int)sizeof(v->name), v->name, v->in_use, v->unit, v->scope, v->proto_mask,
		 v->port_lo, v->port_hi);
	return buf;
}

int kt_verify_maps(struct kt_bpf *b, struct kt_verify_fixes *fixes)
{
	const struct kt_verify_record *r = b->verify;
	char want[256], had[256];
	int fixed = 0, logged = 0;

	if (!r)
		return 0;
	for (int i = 0; i < r->n; i++) {
		struct kt_member_key key = { .cgroup_id = r->ids[i] };
		struct kt_member_val v;
		bool present = bpf_map_lookup_elem(b->members_fd, &key, &v) == 0;

		if (present && !memcmp(&v, &r->vals[i], sizeof(v)))
			continue;
		if (bpf_map_update_elem(b->members_fd, &key, &r->vals[i], BPF_ANY) < 0) {
			kt_warn("kernel state: cannot write back kt_members cgroup %llu: %s",
				(unsigned long long)key.cgroup_id, strerror(errno));
			continue;
		}
		fixed++;
		fixes->members++;
		if (logged++ < KT_VERIFY_LOG_MAX)
			kt_warn("kernel state: kt_members cgroup %llu held %s, not the %s the daemon "
				"wrote: written back",
				(unsigned long long)key.cgroup_id, member_text(&v, present, had, sizeof(had)),
				member_text(&r->vals[i], true, want, sizeof(want)));
	}
	for (int i = 0; i < r->nl; i++) {
		uint32_t id = r->limit_ids[i];
		struct kt_limit_info v;
		bool present = bpf_map_lookup_elem(b->limits_fd, &id, &v) == 0;

		if (present && !memcmp(&v, &r->limits[i], sizeof(v)))
			continue;
		if (bpf_map_update_elem(b->limits_fd, &id, &r->limits[i], BPF_ANY) < 0) {
			kt_warn("kernel state: cannot write back kt_limits id %u: %s", id, strerror(errno));
			continue;
		}
		fixed++;
		fixes->limits++;
		if (logged++ < KT_VERIFY_LOG_MAX)
			kt_warn("kernel state: kt_limits id %u held %s, not the %s the daemon wrote: "
				"written back",
				id, limit_text(&v, present, had, sizeof(had)),
				limit_text(&r->limits[i], true, want, sizeof(want)));
	}
	if (logged > KT_VERIFY_LOG_MAX)
		kt_warn("kernel state: %d more entries written back", logged - KT_VERIFY_LOG_MAX);
	/* the programs' cache holds copies of member lists: a fixed list is
	 * seen once the generation moves */
	if (fixed)
		kt_bpf_bump_gen(b);
	return fixed;
}
