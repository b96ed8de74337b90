// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The classifier the daemon writes into kt_dests / kt_limits / kt_ports,
 * checked through kt_classifier_lookup (the same choice the BPF programs
 * make): CIDRs of both families, most specific prefix then config order,
 * broader limits on other ports, ports, protocols, hooks, membership, and
 * 1,024 limits on one prefix. */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kernel/classify.h"

#define TCP KT_PROTO_TCP
#define UDP KT_PROTO_UDP
#define BOTH (KT_PROTO_TCP | KT_PROTO_UDP)

/* "10.0.0.0/8" or "2001:db8::/32" into the v4-mapped 128-bit space. */
static struct kt_cidr cidr(const char *s)
{
	struct kt_cidr c = { 0 };
	char buf[64];
	char *slash;
	int len;

	snprintf(buf, sizeof(buf), "%s", s);
	slash = strchr(buf, '/');
	assert_non_null(slash);
	*slash = 0;
	len = atoi(slash + 1);
	if (strchr(buf, ':')) {
		assert_int_equal(inet_pton(AF_INET6, buf, c.addr), 1);
		c.prefixlen = (uint8_t)len;
	} else {
		c.addr[10] = c.addr[11] = 0xff;
		assert_int_equal(inet_pton(AF_INET, buf, c.addr + 12), 1);
		c.prefixlen = (uint8_t)(96 + len);
	}
	return c;
}

static const uint8_t *addr(const char *s)
{
	static uint8_t a[8][16];
	static int next;
	uint8_t *p = a[next++ % 8];

	memset(p, 0, 16);
	if (strchr(s, ':')) {
		assert_int_equal(inet_pton(AF_INET6, s, p), 1);
	} else {
		p[10] = p[11] = 0xff;
		assert_int_equal(inet_pton(AF_INET, s, p + 12), 1);
	}
	return p;
}

#define MAXC 4
struct rule {
	uint32_t id;
	enum kt_unit unit;
	uint8_t proto;
	uint16_t lo, hi;
	const char *cidrs[MAXC];
};

struct built {
	struct kt_classifier c;
	struct kt_cidr cidrs[16][MAXC];
	struct kt_rule_input in[16];
	char err[256];
	int ret;
};

static void build(struct built *b, const struct rule *r, int n)
{
	memset(b, 0, sizeof(*b));
	assert_true(n <= 16);
	for (int i = 0; i < n; i++) {
		int k = 0;
		while (k < MAXC && r[i].cidrs[k]) {
			b->cidrs[i][k] = cidr(r[i].cidrs[k]);
			k++;
		}
		b->in[i] = (struct kt_rule_input){ .limit_id = r[i].id, .unit = r[i].unit,
						   .proto_mask = r[i].proto, .port_lo = r[i].lo,
						   .port_hi = r[i].hi, .cidrs = b->cidrs[i],
						   .n_cidrs = k };
	}
	b->ret = kt_classifier_build(b->in, n, &b->c, b->err, sizeof(b->err));
}

static int look(const struct built *b, const char *a, enum kt_hook h, uint8_t proto, uint16_t port)
{
	return kt_classifier_lookup(&b->c, addr(a), h, proto, port);
}

/* The kt_dests entry of limit `id` for prefix `c`. */
static const struct kt_dest_entry *entry(const struct built *b, uint32_t id, const char *c)
{
	struct kt_cidr k = cidr(c);

	for (int i = 0; i < b->c.n_dests; i++)
		if (b->c.dests[i].key.limit_id == id && b->c.dests[i].key.prefixlen == 32u + k.prefixlen &&
		    !memcmp(b->c.dests[i].key.addr, k.addr, 16))
			return &b->c.dests[i];
	return NULL;
}

static int look_in(const struct built *b, const char *a, enum kt_hook h, uint8_t proto,
		   uint16_t port, const uint32_t *members, int n)
{
	return kt_classifier_lookup_in(&b->c, addr(a), h, proto, port, members, n);
}

static int port_bit(const struct built *b, enum kt_hook h, unsigned port)
{
	return kt_port_filter_test(&b->c.ports[h], (uint16_t)port);
}

static void test_hook_for_unit(void **state)
{
	(void)state;
	assert_int_equal(kt_hook_for_unit(KT_UNIT_CONNECTION), KT_HOOK_CONNECT);
	assert_int_equal(kt_hook_for_unit(KT_UNIT_DATAGRAM), KT_HOOK_SENDMSG);
	assert_int_equal(kt_hook_for_unit(KT_UNIT_PACKET), KT_HOOK_EGRESS);
	assert_int_equal(kt_hook_for_unit(KT_UNIT_BYTE), KT_HOOK_EGRESS);
}

static void test_v4_cidr(void **state)
{
	static const struct rule r[] = {
		{ 7, KT_UNIT_CONNECTION, TCP, 80, 80, { "10.0.0.0/8" } },
	};
	struct built b;
	(void)state;

	build(&b, r, 1);
	assert_int_equal(b.ret, 0);
	assert_int_equal(b.c.n_dests, 1);
	assert_int_equal(b.c.dests[0].key.prefixlen, 32 + 96 + 8);
	assert_int_equal(b.c.dests[0].key.limit_id, 7);
	assert_int_equal(b.c.dests[0].val.prefixlen, 96 + 8);
	assert_int_equal(look(&b, "10.0.0.0", KT_HOOK_CONNECT, TCP, 80), 7);
	assert_int_equal(look(&b, "10.255.255.255", KT_HOOK_CONNECT, TCP, 80), 7);
	assert_int_equal(look(&b, "9.255.255.255", KT_HOOK_CONNECT, TCP, 80), -1);
	assert_int_equal(look(&b, "11.0.0.0", KT_HOOK_CONNECT, TCP, 80), -1);
	/* the same bits as a native IPv6 address are another destination */
	assert_int_equal(look(&b, "a00::1", KT_HOOK_CONNECT, TCP, 80), -1);
	assert_int_equal(look(&b, "::a00:1", KT_HOOK_CONNECT, TCP, 80), -1);
	kt_classifier_free(&b.c);
	assert_null(b.c.dests);

	/* odd prefix lengths: 192.168.4.0/22 is .4.0 - .7.255 */
	static const struct rule r2[] = {
		{ 1, KT_UNIT_DATAGRAM, UDP, 53, 53, { "192.168.4.0/22", "1.2.3.4/32" } },
	};
	build(&b, r2, 1);
	assert_int_equal(b.ret, 0);
	assert_int_equal(b.c.n_dests, 2);
	assert_int_equal(look(&b, "192.168.3.255", KT_HOOK_SENDMSG, UDP, 53), -1);
	assert_int_equal(look(&b, "192.168.4.0", KT_HOOK_SENDMSG, UDP, 53), 1);
	assert_int_equal(look(&b, "192.168.7.255", KT_HOOK_SENDMSG, UDP, 53), 1);
	assert_int_equal(look(&b, "192.168.8.0", KT_HOOK_SENDMSG, UDP, 53), -1);
	assert_int_equal(look(&b, "1.2.3.4", KT_HOOK_SENDMSG, UDP, 53), 1);
	assert_int_equal(look(&b, "1.2.3.5", KT_HOOK_SENDMSG, UDP, 53), -1);
	kt_classifier_free(&b.c);
}

static void test_v6_cidr(void **state)
{
	static const struct rule r[] = {
		{ 3, KT_UNIT_PACKET, BOTH, 0, 65535, { "2001:db8::/32", "fd00::1/128" } },
	};
	struct built b;
	(void)state;

	build(&b, r, 1);
	assert_int_equal(b.ret, 0);
	assert_int_equal(look(&b, "2001:db8::", KT_HOOK_EGRESS, TCP, 443), 3);
	assert_int_equal(look(&b, "2001:db8:ffff:ffff::1", KT_HOOK_EGRESS, UDP, 1), 3);
	assert_int_equal(look(&b, "2001:db9::", KT_HOOK_EGRESS, TCP, 443), -1);
	assert_int_equal(look(&b, "fd00::1", KT_HOOK_EGRESS, TCP, 0), 3);
	assert_int_equal(look(&b, "fd00::2", KT_HOOK_EGRESS, TCP, 0), -1);
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_EGRESS, TCP, 443), -1);
	kt_classifier_free(&b.c);

	/* the defaults 0.0.0.0/0 and ::/0: everything, both families */
	static const struct rule all[] = {
		{ 9, KT_UNIT_CONNECTION, BOTH, 0, 65535, { "0.0.0.0/0", "::/0" } },
	};
	build(&b, all, 1);
	assert_int_equal(b.ret, 0);
	assert_int_equal(look(&b, "8.8.8.8", KT_HOOK_CONNECT, TCP, 1), 9);
	assert_int_equal(look(&b, "::1", KT_HOOK_CONNECT, UDP, 65535), 9);
	assert_int_equal(look(&b, "ffff::", KT_HOOK_CONNECT, TCP, 0), 9);
	kt_classifier_free(&b.c);
}

/* The longest matching prefix picks the limit; a broader limit still owns
 * what the narrower one does not cover. */
static void test_longest_prefix(void **state)
{
	static const struct rule r[] = {
		{ 1, KT_UNIT_CONNECTION, TCP, 80, 80, { "10.0.0.0/8" } },
		{ 2, KT_UNIT_CONNECTION, TCP, 80, 80, { "10.1.0.0/16" } },
		{ 3, KT_UNIT_CONNECTION, TCP, 80, 80, { "10.1.2.0/24" } },
		{ 4, KT_UNIT_CONNECTION, TCP, 80, 80, { "10.1.2.3/32" } },
	};
	const struct rule rev[] = { r[3], r[2], r[1], r[0] };
	struct built b;
	(void)state;

	for (int pass = 0; pass < 2; pass++) {
		/* config order does not decide between different prefix lengths */
		build(&b, pass ? rev : r, 4);
		assert_int_equal(b.ret, 0);
		assert_int_equal(b.c.n_dests, 4);
		assert_int_equal(look(&b, "10.9.9.9", KT_HOOK_CONNECT, TCP, 80), 1);
		assert_int_equal(look(&b, "10.1.9.9", KT_HOOK_CONNECT, TCP, 80), 2);
		assert_int_equal(look(&b, "10.1.2.9", KT_HOOK_CONNECT, TCP, 80), 3);
		assert_int_equal(look(&b, "10.1.2.3", KT_HOOK_CONNECT, TCP, 80), 4);
		/* each limit has its prefix, with its length and config order */
		const struct kt_dest_entry *e = entry(&b, 4, "10.1.2.3/32");
		assert_non_null(e);
		assert_int_equal(e->val.prefixlen, 96 + 32);
		assert_int_equal(e->val.order, pass ? 0 : 3);
		assert_null(entry(&b, 1, "10.1.2.3/32"));
		kt_classifier_free(&b.c);
	}

	/* same prefix, same traffic: the first in config order wins */
	static const struct rule tie[] = {
		{ 5, KT_UNIT_CONNECTION, TCP, 1, 1000, { "10.0.0.0/8" } },
		{ 6, KT_UNIT_CONNECTION, TCP, 80, 80, { "10.0.0.0/8" } },
	};
	build(&b, tie, 2);
	assert_int_equal(b.ret, 0);
	assert_int_equal(b.c.n_dests, 2); /* the shared prefix once per limit */
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_CONNECT, TCP, 80), 5);
	kt_classifier_free(&b.c);
}

/* A more specific prefix for port 80 must not hide a broader limit on port
 * 53: the /16 entry inherits the /8 rule. */
static void test_inheritance(void **state)
{
	static const struct rule r[] = {
		{ 1, KT_UNIT_DATAGRAM, UDP, 53, 53, { "10.0.0.0/8" } },
		{ 2, KT_UNIT_DATAGRAM, UDP, 80, 80, { "10.1.0.0/16" } },
		{ 3, KT_UNIT_CONNECTION, TCP, 80, 80, { "10.1.2.0/24" } },
		{ 4, KT_UNIT_DATAGRAM, UDP, 0, 65535, { "::/0" } },
	};
	struct built b;
	(void)state;

	build(&b, r, 4);
	assert_int_equal(b.ret, 0);
	assert_int_equal(look(&b, "10.1.2.3", KT_HOOK_SENDMSG, UDP, 53), 1);
	assert_int_equal(look(&b, "10.1.2.3", KT_HOOK_SENDMSG, UDP, 80), 2);
	assert_int_equal(look(&b, "10.1.2.3", KT_HOOK_CONNECT, TCP, 80), 3);
	assert_int_equal(look(&b, "10.2.0.1", KT_HOOK_SENDMSG, UDP, 80), 4);
	assert_int_equal(look(&b, "10.1.0.1", KT_HOOK_SENDMSG, UDP, 53), 1);
	/* ::/0 covers every IPv4 destination too (v4-mapped) */
	assert_int_equal(look(&b, "192.0.2.1", KT_HOOK_SENDMSG, UDP, 9999), 4);
	assert_int_equal(look(&b, "10.1.2.3", KT_HOOK_SENDMSG, UDP, 9999), 4);
	assert_int_equal(look(&b, "10.1.2.3", KT_HOOK_CONNECT, TCP, 53), -1);

	/* what the kernel will see: each limit's own prefixes, nothing copied */
	assert_int_equal(b.c.n_dests, 4);
	const struct kt_dest_entry *e = entry(&b, 3, "10.1.2.0/24");
	assert_non_null(e);
	assert_int_equal(e->val.order, 2);
	e = entry(&b, 4, "::/0");
	assert_non_null(e);
	assert_int_equal(e->val.prefixlen, 0);
	assert_int_equal(e->val.order, 3);
	kt_classifier_free(&b.c);
}

/* Port ranges are inclusive; the per-hook port filter has exactly the ports
 * some rule of that hook covers, so everything else exits early. */
static void test_ports(void **state)
{
	static const struct rule r[] = {
		{ 1, KT_UNIT_CONNECTION, TCP, 1000, 2000, { "10.0.0.0/8" } },
		{ 2, KT_UNIT_CONNECTION, TCP, 443, 443, { "10.0.0.0/8" } },
		{ 3, KT_UNIT_BYTE, BOTH, 0, 0, { "10.0.0.0/8" } },
		{ 4, KT_UNIT_DATAGRAM, UDP, 65535, 65535, { "10.0.0.0/8" } },
	};
	struct built b;
	(void)state;

	build(&b, r, 4);
	assert_int_equal(b.ret, 0);
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_CONNECT, TCP, 999), -1);
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_CONNECT, TCP, 1000), 1);
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_CONNECT, TCP, 1500), 1);
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_CONNECT, TCP, 2000), 1);
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_CONNECT, TCP, 2001), -1);
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_CONNECT, TCP, 443), 2);
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_CONNECT, TCP, 442), -1);
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_EGRESS, TCP, 0), 3);
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_EGRESS, UDP, 1), -1);
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_SENDMSG, UDP, 65535), 4);
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_SENDMSG, UDP, 65534), -1);

	for (unsigned p = 0; p <= 65535; p++) {
		int want_c = (p >= 1000 && p <= 2000) || p == 443;
		if (port_bit(&b, KT_HOOK_CONNECT, p) != want_c ||
		    port_bit(&b, KT_HOOK_EGRESS, p) != (p == 0) ||
		    port_bit(&b, KT_HOOK_SENDMSG, p) != (p == 65535)) {
			print_error("port %u: filter bits %d %d %d\n", p,
				    port_bit(&b, KT_HOOK_CONNECT, p), port_bit(&b, KT_HOOK_SENDMSG, p),
				    port_bit(&b, KT_HOOK_EGRESS, p));
			fail();
		}
	}
	kt_classifier_free(&b.c);

	/* no rules: empty filters, no entries, every lookup passes */
	build(&b, NULL, 0);
	assert_int_equal(b.ret, 0);
	assert_int_equal(b.c.n_dests, 0);
	for (int h = 0; h < KT_HOOK_COUNT; h++)
		for (unsigned p = 0; p <= 65535; p += 97)
			assert_int_equal(port_bit(&b, h, p), 0);
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_CONNECT, TCP, 80), -1);
	kt_classifier_free(&b.c);
}

static void test_protocols(void **state)
{
	static const struct rule r[] = {
		{ 1, KT_UNIT_PACKET, TCP, 80, 80, { "10.0.0.0/8" } },
		{ 2, KT_UNIT_PACKET, UDP, 80, 80, { "10.0.0.0/8" } },
		{ 3, KT_UNIT_PACKET, BOTH, 81, 81, { "10.0.0.0/8" } },
		{ 4, KT_UNIT_PACKET, 0, 82, 82, { "10.0.0.0/8" } }, /* matches nothing */
	};
	struct built b;
	(void)state;

	build(&b, r, 4);
	assert_int_equal(b.ret, 0);
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_EGRESS, TCP, 80), 1);
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_EGRESS, UDP, 80), 2);
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_EGRESS, TCP, 81), 3);
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_EGRESS, UDP, 81), 3);
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_EGRESS, TCP, 82), -1);
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_EGRESS, UDP, 82), -1);
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_EGRESS, 0, 81), -1);
	kt_classifier_free(&b.c);
}

/* Each rule lands in its unit's hook and is invisible to the others. */
static void test_hook_selection(void **state)
{
	static const struct rule r[] = {
		{ 1, KT_UNIT_CONNECTION, BOTH, 80, 80, { "10.0.0.0/8" } },
		{ 2, KT_UNIT_DATAGRAM, BOTH, 80, 80, { "10.0.0.0/8" } },
		{ 3, KT_UNIT_PACKET, BOTH, 80, 80, { "10.0.0.0/8" } },
		{ 4, KT_UNIT_BYTE, BOTH, 90, 90, { "10.0.0.0/8" } },
	};
	struct built b;
	(void)state;

	build(&b, r, 4);
	assert_int_equal(b.ret, 0);
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_CONNECT, TCP, 80), 1);
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_SENDMSG, UDP, 80), 2);
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_EGRESS, TCP, 80), 3);
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_EGRESS, UDP, 90), 4);
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_CONNECT, TCP, 90), -1);
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_SENDMSG, UDP, 90), -1);
	assert_false(port_bit(&b, KT_HOOK_CONNECT, 90));
	assert_true(port_bit(&b, KT_HOOK_EGRESS, 90));

	for (int i = 0; i < 4; i++) {
		const struct kt_dest_entry *e = entry(&b, (uint32_t)i + 1, "10.0.0.0/8");
		assert_non_null(e);
		assert_int_equal(e->val.order, i); /* config order */
	}
	kt_classifier_free(&b.c);
}

/* KT_MAX_LIMITS limits on the default cidrs (every destination, both
 * families) build: no cap per prefix. Each still takes its own port, the
 * first in the config wins a tie, a narrower prefix beats every broader one
 * wherever it sits in the config, and a cgroup is charged only under the
 * limits it is a member of. */
static void test_many_limits_one_prefix(void **state)
{
	enum { N = KT_MAX_LIMITS };
	struct kt_cidr all[2] = { cidr("0.0.0.0/0"), cidr("::/0") }, narrow = cidr("10.1.0.0/16");
	struct kt_rule_input *in = calloc(N + 1, sizeof(*in));
	struct kt_classifier c;
	char err[256] = "";
	(void)state;

	assert_non_null(in);
	for (int i = 0; i < N; i++)
		in[i] = (struct kt_rule_input){ .limit_id = (uint32_t)i, .unit = KT_UNIT_CONNECTION,
						.proto_mask = TCP, .port_lo = (uint16_t)(1000 + i),
						.port_hi = (uint16_t)(1000 + i), .cidrs = all,
						.n_cidrs = 2 };
	/* limit N-2 shares N-1's port; N-1 is narrower */
	in[N - 2].port_lo = in[N - 2].port_hi = (uint16_t)(1000 + N - 1);
	in[N - 1].cidrs = &narrow;
	in[N - 1].n_cidrs = 1;
	assert_int_equal(kt_classifier_build(in, N, &c, err, sizeof(err)), 0);
	assert_int_equal(c.n_dests, 2 * N - 1);
	/* the first 64 ports and a spread of the rest (the model's lookup is
	 * a scan: all of them would be N^2) */
	for (int i = 0; i < N - 2; i += i < 64 ? 1 : 97) {
		if (kt_classifier_lookup(&c, addr("192.0.2.1"), KT_HOOK_CONNECT, TCP,
					 (uint16_t)(1000 + i)) != i ||
		    kt_classifier_lookup(&c, addr("2001:db8::1"), KT_HOOK_CONNECT, TCP,
					 (uint16_t)(1000 + i)) != i) {
			print_error("port %d is not limit %d's\n", 1000 + i, i);
			fail();
		}
	}
	assert_int_equal(kt_classifier_lookup(&c, addr("10.1.2.3"), KT_HOOK_CONNECT, TCP, 1000 + N - 1),
			 N - 1);
	assert_int_equal(kt_classifier_lookup(&c, addr("10.2.2.3"), KT_HOOK_CONNECT, TCP, 1000 + N - 1),
			 N - 2);
	/* a tie on the prefix: the first in the config */
	in[5].port_lo = in[5].port_hi = 1000 + 3;
	kt_classifier_free(&c);
	assert_int_equal(kt_classifier_build(in, N, &c, err, sizeof(err)), 0);
	assert_int_equal(kt_classifier_lookup(&c, addr("192.0.2.1"), KT_HOOK_CONNECT, TCP, 1003), 3);

	/* membership decides among the covering limits */
	struct built b;
	static const struct rule r[] = {
		{ 1, KT_UNIT_CONNECTION, TCP, 80, 80, { "0.0.0.0/0" } },
		{ 2, KT_UNIT_CONNECTION, TCP, 80, 80, { "10.0.0.0/8" } },
		{ 3, KT_UNIT_CONNECTION, TCP, 80, 80, { "0.0.0.0/0" } },
	};
	static const uint32_t only3[] = { 3 }, one_three[] = { 3, 1 }, all3[] = { 1, 2, 3 };
	build(&b, r, 3);
	assert_int_equal(b.ret, 0);
	assert_int_equal(look_in(&b, "10.0.0.1", KT_HOOK_CONNECT, TCP, 80, all3, 3), 2);
	assert_int_equal(look_in(&b, "10.0.0.1", KT_HOOK_CONNECT, TCP, 80, one_three, 2), 1);
	assert_int_equal(look_in(&b, "10.0.0.1", KT_HOOK_CONNECT, TCP, 80, only3, 1), 3);
	assert_int_equal(look_in(&b, "10.0.0.1", KT_HOOK_CONNECT, TCP, 80, NULL, 0), 2);
	assert_int_equal(look_in(&b, "10.0.0.1", KT_HOOK_CONNECT, TCP, 80, all3, 0), -1);
	kt_classifier_free(&b.c);

	/* a prefix written with host bits is stored as its network */
	static const struct rule host[] = { { 1, KT_UNIT_CONNECTION, TCP, 80, 80, { "10.1.2.3/8" } } };
	build(&b, host, 1);
	assert_int_equal(b.ret, 0);
	assert_non_null(entry(&b, 1, "10.0.0.0/8"));
	kt_classifier_free(&b.c);

	kt_classifier_free(&c);
	free(in);
}

static void test_too_many_prefixes(void **state)
{
	/* as configs give them: limits of KT_MAX_CIDRS prefixes each, one
	 * prefix past the table's size in all */
	const int per = KT_MAX_CIDRS, n_rules = KT_MAX_DESTS / per + 1, n = n_rules * per;
	struct kt_cidr *c = calloc((size_t)n, sizeof(*c));
	struct kt_rule_input *in = calloc((size_t)n_rules, sizeof(*in));
	struct kt_classifier cls;
	char err[256] = "";
	(void)state;

	assert_non_null(c);
	assert_non_null(in);
	for (int i = 0; i < n; i++) {
		c[i].addr[0] = 0xfd;
		c[i].addr[13] = (uint8_t)(i >> 16);
		c[i].addr[14] = (uint8_t)(i >> 8);
		c[i].addr[15] = (uint8_t)i;
		c[i].prefixlen = 128;
	}
	for (int r = 0; r < n_rules; r++)
		in[r] = (struct kt_rule_input){ .limit_id = (uint32_t)r, .unit = KT_UNIT_PACKET,
						.proto_mask = BOTH, .port_lo = 0, .port_hi = 65535,
						.cidrs = c + (size_t)r * per, .n_cidrs = per };
	/* exactly KT_MAX_DESTS: the last limit has one prefix */
	in[n_rules - 1].n_cidrs = KT_MAX_DESTS - (n_rules - 1) * per;
	assert_int_equal(kt_classifier_build(in, n_rules, &cls, err, sizeof(err)), 0);
	assert_int_equal(cls.n_dests, KT_MAX_DESTS);
	kt_classifier_free(&cls);

	in[n_rules - 1].n_cidrs++;
	assert_int_equal(kt_classifier_build(in, n_rules, &cls, err, sizeof(err)), -E2BIG);
	assert_non_null(strstr(err, "prefixes"));
	assert_null(cls.dests);
	assert_null(cls.rules);
	kt_classifier_free(&cls);
	free(in);
	free(c);
}

/* Traffic that matches no limit: -1 for every reason it can miss. */
static void test_unmatched(void **state)
{
	static const struct rule r[] = {
		{ 1, KT_UNIT_CONNECTION, TCP, 80, 80, { "10.0.0.0/8", "2001:db8::/32" } },
	};
	struct built b;
	(void)state;

	build(&b, r, 1);
	assert_int_equal(b.ret, 0);
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_CONNECT, TCP, 80), 1);
	assert_int_equal(look(&b, "2001:db8::1", KT_HOOK_CONNECT, TCP, 80), 1);
	assert_int_equal(look(&b, "192.0.2.1", KT_HOOK_CONNECT, TCP, 80), -1);   /* address */
	assert_int_equal(look(&b, "2001:db9::1", KT_HOOK_CONNECT, TCP, 80), -1); /* address */
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_CONNECT, TCP, 81), -1);    /* port */
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_CONNECT, UDP, 80), -1);    /* protocol */
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_EGRESS, TCP, 80), -1);     /* hook */
	assert_int_equal(look(&b, "10.0.0.1", KT_HOOK_SENDMSG, TCP, 80), -1);    /* hook */
	kt_classifier_free(&b.c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hook_for_unit),
		cmocka_unit_test(test_v4_cidr),
		cmocka_unit_test(test_v6_cidr),
		cmocka_unit_test(test_longest_prefix),
		cmocka_unit_test(test_inheritance),
		cmocka_unit_test(test_ports),
		cmocka_unit_test(test_protocols),
		cmocka_unit_test(test_hook_selection),
		cmocka_unit_test(test_many_limits_one_prefix),
		cmocka_unit_test(test_too_many_prefixes),
		cmocka_unit_test(test_unmatched),
	};
	return cmocka_run_group_tests_name("classify", tests, NULL, NULL);
}
