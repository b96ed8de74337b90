/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include "kernel/classify.h"

/* Does prefix (a, alen) contain prefix (b, blen)? */
static int prefix_covers(const uint8_t *a, unsigned alen, const uint8_t *b, unsigned blen)
{
	unsigned full = alen / 8, rem = alen % 8;

	if (alen > blen)
		return 0;
	if (memcmp(a, b, full))
		return 0;
	if (rem) {
		uint8_t mask = (uint8_t)(0xff << (8 - rem));
		if ((a[full] & mask) != (b[full] & mask))
			return 0;
	}
	return 1;
}

/* The longest prefix of limit `id` in c->dests that covers addr, or NULL:
 * what the kernel's kt_dests lookup answers. */
static const struct kt_dest_entry *dest_match(const struct kt_classifier *c, uint32_t id,
					      const uint8_t addr[16])
{
	const struct kt_dest_entry *best = NULL;

	for (int i = 0; i < c->n_dests; i++) {
		const struct kt_dest_entry *e = &c->dests[i];

		if (e->key.limit_id == id &&
		    prefix_covers(e->key.addr, e->key.prefixlen - KT_DEST_ID_BITS, addr, KT_DEST_ADDR_BITS) &&
		    (!best || e->key.prefixlen > best->key.prefixlen))
			best = e;
	}
	return best;
}

/* Ports lo..hi (inclusive) into f, a word at a time: a limit on every
 * port is 1,024 stores, not 65,536 (10,000 such limits are a reload). */
static void set_ports(struct kt_port_filter *f, unsigned lo, unsigned hi)
{
	while (lo <= hi && (lo & 63)) {
		f->bits[lo >> 6] |= 1ULL << (lo & 63);
		lo++;
	}
	while (lo + 63 <= hi) {
		f->bits[lo >> 6] = ~0ULL;
		lo += 64;
	}
	for (; lo <= hi; lo++)
		f->bits[lo >> 6] |= 1ULL << (lo & 63);
}

int kt_classifier_build(const struct kt_rule_input *rules, int n, struct kt_classifier *out,
			char *err, size_t errlen)
{
	struct kt_dest_entry *e = NULL;
	int ne = 0, cap = 0, i, j, k, ret = 0;

	memset(out, 0, sizeof(*out));
	if (n > 0xffff) {
		snprintf(err, errlen, "more than %d limits", 0xffff);
		return -E2BIG;
	}
	out->rules = calloc(n + 1, sizeof(*out->rules));
	if (!out->rules)
		return -ENOMEM;
	/* One entry per (limit, distinct prefix): the kernel's longest-prefix
	 * match within the limit finds its most specific covering prefix. */
	for (i = 0; i < n; i++) {
		int first = ne;

		out->rules[i] = rules[i];
		out->rules[i].cidrs = NULL;
		out->rules[i].n_cidrs = 0;
		for (j = 0; j < rules[i].n_cidrs; j++) {
			const struct kt_cidr *c = &rules[i].cidrs[j];

			for (k = first; k < ne; k++)
				if (e[k].key.prefixlen == KT_DEST_ID_BITS + c->prefixlen &&
				    !memcmp(e[k].key.addr, c->addr, 16))
					break;
			if (k < ne)
				continue;
			if (ne >= KT_MAX_DESTS) {
				snprintf(err, errlen,
					 "more than %d destination prefixes in all limits together",
					 KT_MAX_DESTS);
				ret = -E2BIG;
				goto out;
			}
			if (ne == cap) {
				int grow = cap ? 2 * cap : 64;
				struct kt_dest_entry *grown = realloc(e, grow * sizeof(*e));

				if (!grown) {
					ret = -ENOMEM;
					goto out;
				}
				e = grown;
				cap = grow;
			}
			memset(&e[ne], 0, sizeof(e[ne]));
			e[ne].key.prefixlen = KT_DEST_ID_BITS + c->prefixlen;
			e[ne].key.limit_id = rules[i].limit_id;
			memcpy(e[ne].key.addr, c->addr, 16);
			/* the kernel compares only prefixlen bits; zero the rest
			 * so equal prefixes are equal keys here too */
			for (unsigned bit = c->prefixlen; bit < KT_DEST_ADDR_BITS; bit++)
				e[ne].key.addr[bit / 8] &= (uint8_t) ~(0x80 >> (bit % 8));
			e[ne].val = (struct kt_dest_val){ .prefixlen = c->prefixlen,
							  .order = (uint16_t)i,
							  .depth = rules[i].depth,
							  .refuse_errno = rules[i].refuse_errno };
			ne++;
		}
	}
	out->n_rules = n;

	for (i = 0; i < n; i++)
		set_ports(&out->ports[kt_hook_for_unit(rules[i].unit)], rules[i].port_lo,
			  rules[i].port_hi);
	out->dests = e;
	out->n_dests = ne;
	e = NULL;
out:
	free(e);
	if (ret) {
		free(out->rules);
		out->rules = NULL;
		out->n_rules = 0;
	}
	return ret;
}

void kt_classifier_free(struct kt_classifier *c)
{
	free(c->dests);
	free(c->rules);
	c->dests = NULL;
	c->rules = NULL;
	c->n_dests = c->n_rules = 0;
}

int kt_classifier_lookup_in(const struct kt_classifier *c, const uint8_t addr[16],
			    enum kt_hook hook, uint8_t proto, uint16_t port,
			    const uint32_t *members, int n_members)
{
	uint64_t best_prio = 0;
	int best = -1;

	if (!kt_port_filter_test(&c->ports[hook], port))
		return -1;
	for (int i = 0; i < c->n_rules; i++) {
		const struct kt_rule_input *r = &c->rules[i];
		const struct kt_dest_entry *d;
		bool member = !members;

		for (int m = 0; m < n_members && !member; m++)
			member = members[m] == r->limit_id;
		if (!member || kt_hook_for_unit(r->unit) != hook || !(r->proto_mask & proto) ||
		    port < r->port_lo || port > r->port_hi)
			continue;
		d = dest_match(c, r->limit_id, addr);
		if (d && kt_dest_priority(&d->val) > best_prio) {
			best_prio = kt_dest_priority(&d->val);
			best = (int)r->limit_id;
		}
	}
	return best;
}

int kt_classifier_lookup(const struct kt_classifier *c, const uint8_t addr[16], enum kt_hook hook,
			 uint8_t proto, uint16_t port)
{
	return kt_classifier_lookup_in(c, addr, hook, proto, port, NULL, 0);
}
