/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include "classify.h"

enum kt_hook kt_hook_for_unit(enum kt_unit unit)
{
	switch (unit) {
	case KT_UNIT_CONNECTION:
		return KT_HOOK_CONNECT;
	case KT_UNIT_DATAGRAM:
		return KT_HOOK_SENDMSG;
	default:
		return KT_HOOK_EGRESS;
	}
}

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

static void format_prefix(const uint8_t *addr, unsigned len, char *buf, size_t buflen)
{
	char s[INET6_ADDRSTRLEN];
	static const uint8_t v4map[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	if (len >= 96 && !memcmp(addr, v4map, 12)) {
		inet_ntop(AF_INET, addr + 12, s, sizeof(s));
		snprintf(buf, buflen, "%s/%u", s, len - 96);
	} else {
		inet_ntop(AF_INET6, addr, s, sizeof(s));
		snprintf(buf, buflen, "%s/%u", s, len);
	}
}

int kt_classifier_build(const struct kt_rule_input *rules, int n, struct kt_classifier *out,
			char *err, size_t errlen)
{
	struct kt_prefix_entry *e = NULL;
	int ne = 0, i, j, k, ret = 0;

	memset(out, 0, sizeof(*out));
	/* Distinct prefixes across all rules. */
	for (i = 0; i < n; i++) {
		for (j = 0; j < rules[i].n_cidrs; j++) {
			const struct kt_cidr *c = &rules[i].cidrs[j];
			for (k = 0; k < ne; k++)
				if (e[k].key.prefixlen == c->prefixlen &&
				    !memcmp(e[k].key.addr, c->addr, 16))
					break;
			if (k < ne)
				continue;
			if (ne >= KT_MAX_PREFIXES) {
				snprintf(err, errlen, "more than %d distinct destination prefixes",
					 KT_MAX_PREFIXES);
				ret = -E2BIG;
				goto out;
			}
			struct kt_prefix_entry *grown = realloc(e, (ne + 1) * sizeof(*e));
			if (!grown) {
				ret = -ENOMEM;
				goto out;
			}
			e = grown;
			memset(&e[ne], 0, sizeof(e[ne]));
			e[ne].key.prefixlen = c->prefixlen;
			memcpy(e[ne].key.addr, c->addr, 16);
			ne++;
		}
	}

	/* Each prefix carries every rule whose cidr covers it, most specific
	 * covering cidr first, then config order; one entry per limit. */
	for (k = 0; k < ne; k++) {
		struct kt_rule_set *set = &e[k].set;
		int cover_len[KT_RULES_PER_PREFIX];

		for (i = 0; i < n; i++) {
			int best = -1;
			for (j = 0; j < rules[i].n_cidrs; j++) {
				const struct kt_cidr *c = &rules[i].cidrs[j];
				if (prefix_covers(c->addr, c->prefixlen, e[k].key.addr,
						  e[k].key.prefixlen) &&
				    (int)c->prefixlen > best)
					best = c->prefixlen;
			}
			if (best < 0)
				continue;
			if (set->count >= KT_RULES_PER_PREFIX) {
				char p[64];
				format_prefix(e[k].key.addr, e[k].key.prefixlen, p, sizeof(p));
				snprintf(err, errlen,
					 "destination %s is covered by more than %d limits",
					 p, KT_RULES_PER_PREFIX);
				ret = -E2BIG;
				goto out;
			}
			/* insertion keeps cover_len descending, stable for ties */
			int pos = set->count;
			while (pos > 0 && cover_len[pos - 1] < best) {
				set->rules[pos] = set->rules[pos - 1];
				cover_len[pos] = cover_len[pos - 1];
				pos--;
			}
			set->rules[pos] = (struct kt_rule){
				.limit_id = rules[i].limit_id,
				.port_lo = rules[i].port_lo,
				.port_hi = rules[i].port_hi,
				.proto_mask = rules[i].proto_mask,
				.hook = (uint8_t)kt_hook_for_unit(rules[i].unit),
				.unit = (uint8_t)rules[i].unit,
			};
			cover_len[pos] = best;
			set->count++;
		}
	}

	for (i = 0; i < n; i++) {
		struct kt_port_filter *f = &out->ports[kt_hook_for_unit(rules[i].unit)];
		for (unsigned p = rules[i].port_lo; p <= rules[i].port_hi; p++)
			f->bits[p >> 6] |= 1ULL << (p & 63);
	}
	out->entries = e;
	out->n_entries = ne;
	e = NULL;
out:
	free(e);
	return ret;
}

void kt_classifier_free(struct kt_classifier *c)
{
	free(c->entries);
	c->entries = NULL;
	c->n_entries = 0;
}

int kt_classifier_lookup(const struct kt_classifier *c, const uint8_t addr[16], enum kt_hook hook,
			 uint8_t proto, uint16_t port)
{
	const struct kt_prefix_entry *best = NULL;
	int i;

	if (!kt_port_filter_test(&c->ports[hook], port))
		return -1;
	for (i = 0; i < c->n_entries; i++) {
		const struct kt_prefix_entry *e = &c->entries[i];
		if (prefix_covers(e->key.addr, e->key.prefixlen, addr, 128) &&
		    (!best || e->key.prefixlen > best->key.prefixlen))
			best = e;
	}
	if (!best)
		return -1;
	for (i = 0; i < (int)best->set.count; i++) {
		const struct kt_rule *r = &best->set.rules[i];
		if (r->hook == hook && (r->proto_mask & proto) && port >= r->port_lo &&
		    port <= r->port_hi)
			return (int)r->limit_id;
	}
	return -1;
}
