/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <bpf/bpf.h>
#include "base/log.h"
#include "kernel/verify.h"

/* A bucket's identity as the commit left it. */
struct slot_rec {
	uint32_t slot, flags, limit_id, up; /* up: kt_up's value, with KT_BUCKET_UP */
};

struct kt_verify_record {
	uint64_t *ids;
	struct kt_member_val *vals;
	int n;
	uint32_t *limit_ids;
	struct kt_limit_info *limits;
	struct kt_limit_ext *exts; /* NULL: no kt_limit_ext (an older pin directory) */
	int nl;
	struct kt_dest_entry *dests; /* sorted by key, for the search of extras */
	int nd;
	struct kt_port_filter *ports; /* KT_HOOK_COUNT */
	bool has_idle;
	uint32_t idle;
	struct slot_rec *slots;
	int ns;
};

static const char *const map_names[KT_VERIFY_MAPS] = {
	[KT_VERIFY_MEMBERS] = "kt_members", [KT_VERIFY_LIMITS] = "kt_limits",
	[KT_VERIFY_LIMIT_EXT] = "kt_limit_ext",
	[KT_VERIFY_DESTS] = "kt_dests",     [KT_VERIFY_PORTS] = "kt_ports",
	[KT_VERIFY_IDLE_HOOKS] = "kt_idle_hooks", [KT_VERIFY_BUCKETS] = "kt_buckets",
	[KT_VERIFY_UP] = "kt_up",           [KT_VERIFY_GEN] = "kt_gen",
};

const char *kt_verify_map_name(enum kt_verify_map m)
{
	return m < KT_VERIFY_MAPS ? map_names[m] : "?";
}

uint64_t kt_verify_fixes_total(const struct kt_verify_fixes *f)
{
	uint64_t t = 0;

	for (int m = 0; m < KT_VERIFY_MAPS; m++)
		t += f->n[m];
	return t;
}

void kt_verify_free(struct kt_bpf *b)
{
	struct kt_verify_record *r = b->verify;

	if (!r)
		return;
	free(r->ids);
	free(r->vals);
	free(r->limit_ids);
	free(r->limits);
	free(r->exts);
	free(r->dests);
	free(r->ports);
	free(r->slots);
	free(r);
	b->verify = NULL;
}

static int dest_cmp(const void *a, const void *b)
{
	return memcmp(&((const struct kt_dest_entry *)a)->key, &((const struct kt_dest_entry *)b)->key,
		      sizeof(struct kt_dest_key));
}

/* calloc of n (at least one) elements copied from src. */
static void *dup_of(const void *src, int n, size_t size)
{
	void *p = calloc(n > 0 ? (size_t)n : 1, size);

	if (p && n > 0)
		memcpy(p, src, (size_t)n * size);
	return p;
}

int kt_verify_note_commit(struct kt_bpf *b, const struct kt_verify_commit *c)
{
	struct kt_verify_record *r = calloc(1, sizeof(*r));

	kt_verify_free(b);
	if (!r)
		return -ENOMEM;
	b->verify = r;
	r->ids = dup_of(c->cgroup_ids, c->n, sizeof(*r->ids));
	r->vals = dup_of(c->vals, c->n, sizeof(*r->vals));
	r->limit_ids = dup_of(c->limit_ids, c->nl, sizeof(*r->limit_ids));
	r->limits = dup_of(c->limits, c->nl, sizeof(*r->limits));
	r->exts = b->limit_ext_fd >= 0 ? dup_of(c->exts, c->nl, sizeof(*r->exts)) : NULL;
	r->dests = dup_of(c->dests, c->nd, sizeof(*r->dests));
	r->ports = c->ports ? dup_of(c->ports, KT_HOOK_COUNT, sizeof(*r->ports)) : NULL;
	r->slots = calloc(c->ns > 0 ? (size_t)c->ns : 1, sizeof(*r->slots));
	if (!r->ids || !r->vals || !r->limit_ids || !r->limits ||
	    (b->limit_ext_fd >= 0 && !r->exts) || !r->dests ||
	    (c->ports && !r->ports) || !r->slots) {
		kt_verify_free(b);
		return -ENOMEM;
	}
	r->n = c->n;
	r->nl = c->nl;
	r->nd = c->nd;
	qsort(r->dests, (size_t)r->nd, sizeof(*r->dests), dest_cmp);
	r->has_idle = c->has_idle && b->idle_fd >= 0;
	r->idle = c->idle;
	/* read back what the commit published: the flags carry the chain
	 * and the parent, kt_up the level above */
	for (int i = 0; i < c->ns; i++) {
		uint32_t slot = c->slots[i];
		struct slot_rec *s = &r->slots[r->ns];

		if (slot >= KT_MAX_BUCKETS || !b->buckets)
			continue;
		s->slot = slot;
		s->flags = __atomic_load_n(&b->buckets[slot].flags, __ATOMIC_ACQUIRE);
		s->limit_id = __atomic_load_n(&b->buckets[slot].limit_id, __ATOMIC_RELAXED);
		if ((s->flags & KT_BUCKET_UP) &&
		    (b->up_fd < 0 || bpf_map_lookup_elem(b->up_fd, &slot, &s->up) < 0))
			s->flags &= ~KT_BUCKET_UP; /* unreadable: not checked */
		r->ns++;
	}
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

/* "limit 3 127.0.0.1/32" or "limit 3 2001:db8::/32". */
static const char *dest_key_text(const struct kt_dest_key *k, char *buf, size_t len)
{
	static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	unsigned bits = k->prefixlen > KT_DEST_ID_BITS ? k->prefixlen - KT_DEST_ID_BITS : 0;
	char a[INET6_ADDRSTRLEN] = "?";

	if (!memcmp(k->addr, v4mapped, sizeof(v4mapped)) && bits >= 96) {
		inet_ntop(AF_INET, k->addr + 12, a, sizeof(a));
		bits -= 96;
	} else {
		inet_ntop(AF_INET6, k->addr, a, sizeof(a));
	}
	snprintf(buf, len, "limit %u %s/%u", k->limit_id, a, bits);
	return buf;
}

static const char *dest_val_text(const struct kt_dest_val *v, bool present, char *buf, size_t len)
{
	if (!present)
		return "none";
	snprintf(buf, len, "prefixlen %u order %u errno %u depth %u", v->prefixlen, v->order,
		 v->refuse_errno, v->depth);
	return buf;
}

static unsigned ports_set(const struct kt_port_filter *f)
{
	unsigned n = 0;

	for (size_t w = 0; w < sizeof(f->bits) / sizeof(f->bits[0]); w++)
		n += (unsigned)__builtin_popcountll(f->bits[w]);
	return n;
}

/* One check's fixes: counted, and the first KT_VERIFY_LOG_MAX logged. */
struct pass {
	struct kt_verify_fixes *fixes;
	int fixed, logged;
};

__attribute__((format(printf, 4, 5))) static void fixed(struct pass *p, enum kt_verify_map m,
							 const char *done, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	p->fixed++;
	p->fixes->n[m]++;
	if (p->logged++ >= KT_VERIFY_LOG_MAX)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	kt_warn("kernel state: %s %s: %s", map_names[m], line, done);
}

static void verify_members(struct kt_bpf *b, const struct kt_verify_record *r, struct pass *p)
{
	char want[256], had[256];

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
		fixed(p, KT_VERIFY_MEMBERS, "written back", "cgroup %llu held %s, not the %s the daemon wrote",
		      (unsigned long long)key.cgroup_id, member_text(&v, present, had, sizeof(had)),
		      member_text(&r->vals[i], true, want, sizeof(want)));
	}
}

static void verify_limits(struct kt_bpf *b, const struct kt_verify_record *r, struct pass *p)
{
	char want[256], had[256];

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
		fixed(p, KT_VERIFY_LIMITS, "written back", "id %u held %s, not the %s the daemon wrote", id,
		      limit_text(&v, present, had, sizeof(had)),
		      limit_text(&r->limits[i], true, want, sizeof(want)));
	}
}

static void verify_limit_exts(struct kt_bpf *b, const struct kt_verify_record *r, struct pass *p)
{
	for (int i = 0; r->exts && i < r->nl; i++) {
		uint32_t id = r->limit_ids[i];
		struct kt_limit_ext v;
		bool present = bpf_map_lookup_elem(b->limit_ext_fd, &id, &v) == 0;

		if (present && !memcmp(&v, &r->exts[i], sizeof(v)))
			continue;
		if (bpf_map_update_elem(b->limit_ext_fd, &id, &r->exts[i], BPF_ANY) < 0) {
			kt_warn("kernel state: cannot write back kt_limit_ext id %u: %s", id, strerror(errno));
			continue;
		}
		fixed(p, KT_VERIFY_LIMIT_EXT, "written back",
		      "id %u held max_delay_ms %u reserved %u %u %u, not the max_delay_ms %u the daemon wrote", id,
		      present ? v.max_delay_ms : 0, present ? v.reserved[0] : 0,
		      present ? v.reserved[1] : 0, present ? v.reserved[2] : 0, r->exts[i].max_delay_ms);
	}
}

/* Every recorded prefix present with its value, and no other: a prefix
 * added by hand would charge a limit for traffic it does not cover. */
static void verify_dests(struct kt_bpf *b, const struct kt_verify_record *r, struct pass *p)
{
	char key[96], want[96], had[96];
	struct kt_dest_entry e;
	struct kt_dest_key cur, next;

	for (int i = 0; i < r->nd; i++) {
		const struct kt_dest_entry *w = &r->dests[i];
		struct kt_dest_val v;
		bool present = bpf_map_lookup_elem(b->dests_fd, &w->key, &v) == 0;

		if (present && !memcmp(&v, &w->val, sizeof(v)))
			continue;
		if (bpf_map_update_elem(b->dests_fd, &w->key, &w->val, BPF_ANY) < 0) {
			kt_warn("kernel state: cannot write back kt_dests %s: %s",
				dest_key_text(&w->key, key, sizeof(key)), strerror(errno));
			continue;
		}
		fixed(p, KT_VERIFY_DESTS, "written back", "%s held %s, not the %s the daemon wrote",
		      dest_key_text(&w->key, key, sizeof(key)), dest_val_text(&v, present, had, sizeof(had)),
		      dest_val_text(&w->val, true, want, sizeof(want)));
	}
	/* extras: the next key is taken before the current one goes */
	bool have = bpf_map_get_next_key(b->dests_fd, NULL, &cur) == 0;

	for (int steps = 0; have && steps <= KT_MAX_DESTS; steps++, cur = next) {
		have = bpf_map_get_next_key(b->dests_fd, &cur, &next) == 0;
		e.key = cur;
		if (bsearch(&e, r->dests, (size_t)r->nd, sizeof(*r->dests), dest_cmp) ||
		    bpf_map_lookup_elem(b->dests_fd, &cur, &e.val) < 0 ||
		    bpf_map_delete_elem(b->dests_fd, &cur) < 0)
			continue;
		fixed(p, KT_VERIFY_DESTS, "deleted", "%s held %s, which the daemon did not write",
		      dest_key_text(&cur, key, sizeof(key)), dest_val_text(&e.val, true, had, sizeof(had)));
	}
}

static void verify_ports(struct kt_bpf *b, const struct kt_verify_record *r, struct pass *p)
{
	struct kt_port_filter *cur;

	if (!r->ports || !(cur = malloc(sizeof(*cur))))
		return;
	for (uint32_t h = 0; h < KT_HOOK_COUNT; h++) {
		bool present = bpf_map_lookup_elem(b->ports_fd, &h, cur) == 0;

		if (present && !memcmp(cur, &r->ports[h], sizeof(*cur)))
			continue;
		if (bpf_map_update_elem(b->ports_fd, &h, &r->ports[h], BPF_ANY) < 0) {
			kt_warn("kernel state: cannot write back kt_ports hook %u: %s", h, strerror(errno));
			continue;
		}
		fixed(p, KT_VERIFY_PORTS, "written back", "hook %u held %u ports, not the %u the daemon wrote", h,
		      present ? ports_set(cur) : 0, ports_set(&r->ports[h]));
	}
	free(cur);
}

static void verify_idle(struct kt_bpf *b, const struct kt_verify_record *r, struct pass *p)
{
	uint32_t zero = 0, v = 0;

	if (!r->has_idle || (bpf_map_lookup_elem(b->idle_fd, &zero, &v) == 0 && v == r->idle))
		return;
	if (bpf_map_update_elem(b->idle_fd, &zero, &r->idle, BPF_ANY) < 0) {
		kt_warn("kernel state: cannot write back kt_idle_hooks: %s", strerror(errno));
		return;
	}
	fixed(p, KT_VERIFY_IDLE_HOOKS, "written back", "held %#x, not the %#x the daemon wrote", v,
	      r->idle);
}

/* Flags and limit id of each bucket the commit published (the flags hold
 * in use, shadow, the chain to the node bucket and its parent), and its
 * kt_up link. Strict buckets too: their permits change tat and the
 * window, never these. */
static void verify_slots(struct kt_bpf *b, const struct kt_verify_record *r, struct pass *p)
{
	for (int i = 0; i < r->ns && b->buckets; i++) {
		const struct slot_rec *s = &r->slots[i];
		struct kt_bucket *bk = &b->buckets[s->slot];
		uint32_t flags = __atomic_load_n(&bk->flags, __ATOMIC_ACQUIRE);
		uint32_t lid = __atomic_load_n(&bk->limit_id, __ATOMIC_RELAXED), up = 0;

		if (flags != s->flags || lid != s->limit_id) {
			/* the limit first: a bucket back in use is charged to its own */
			__atomic_store_n(&bk->limit_id, s->limit_id, __ATOMIC_RELAXED);
			__atomic_store_n(&bk->flags, s->flags, __ATOMIC_RELEASE);
			fixed(p, KT_VERIFY_BUCKETS, "written back",
			      "slot %u held flags %#x limit %u, not the flags %#x limit %u the daemon wrote",
			      s->slot, flags, lid, s->flags, s->limit_id);
		}
		if (!(s->flags & KT_BUCKET_UP) ||
		    (bpf_map_lookup_elem(b->up_fd, &s->slot, &up) == 0 && up == s->up))
			continue;
		if (bpf_map_update_elem(b->up_fd, &s->slot, &s->up, BPF_ANY) < 0) {
			kt_warn("kernel state: cannot write back kt_up slot %u: %s", s->slot, strerror(errno));
			continue;
		}
		fixed(p, KT_VERIFY_UP, "written back", "slot %u held %u, not the %u the daemon wrote",
		      s->slot, up, s->up);
	}
}

/* A generation set back would make stale kt_anc_cache entries valid
 * again: it moves on past every value the daemon wrote instead. */
static void verify_gen(struct kt_bpf *b, struct pass *p)
{
	uint64_t gen = 0, wrote = b->gen_written;
	uint32_t zero = 0;

	if (b->gen_fd < 0 || !wrote ||
	    (bpf_map_lookup_elem(b->gen_fd, &zero, &gen) == 0 && gen == wrote))
		return;
	kt_bpf_bump_gen(b);
	fixed(p, KT_VERIFY_GEN, "moved on", "held %llu, not the %llu the daemon wrote: now %llu",
	      (unsigned long long)gen, (unsigned long long)wrote, (unsigned long long)b->gen_written);
}

int kt_verify_maps(struct kt_bpf *b, struct kt_verify_fixes *fixes)
{
	const struct kt_verify_record *r = b->verify;
	struct pass p = { .fixes = fixes };
	int lists;

	if (!r)
		return 0;
	verify_gen(b, &p);
	lists = p.fixed;
	verify_members(b, r, &p);
	lists = p.fixed - lists;
	verify_limits(b, r, &p);
	verify_limit_exts(b, r, &p);
	verify_dests(b, r, &p);
	verify_ports(b, r, &p);
	verify_idle(b, r, &p);
	verify_slots(b, r, &p);
	if (p.logged > KT_VERIFY_LOG_MAX)
		kt_warn("kernel state: %d more entries written back", p.logged - KT_VERIFY_LOG_MAX);
	/* the programs' cache holds copies of member lists: a fixed list is
	 * seen once the generation moves */
	if (lists)
		kt_bpf_bump_gen(b);
	return p.fixed;
}
