// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The XDP tag buckets (bpf/xdp.bpf.c) through their wrapper (xdp_maps.c),
 * loaded into a private pin dir and never attached: kt_xdp_tags runs under
 * BPF_PROG_TEST_RUN on crafted frames (with no ctx the frame arrives on the
 * loopback device, so the tests configure its ifindex), kt_tag_run_ops
 * through the wrapper's harvest, debit and set. Needs root; skipped
 * otherwise. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/ip6.h>
#include <netinet/udp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>

#include "kthrottle.h"
#include "kt_bpffx.h"
#include "ktest.h"
#include "tags/xdp_maps.h"

#define SLOW_RATE 0.001 /* no token refills while a test runs */
#define LIM 3           /* the tag limit the tests use */
#define XDP_VERDICT_DROP 1
#define XDP_VERDICT_PASS 2

struct fx {
	char pin[PATH_MAX];
	struct kt_xdp_tags *t;
	int lo; /* ifindex of lo: where BPF_PROG_TEST_RUN frames arrive */
	char dev[IF_NAMESIZE]; /* a veth a test made: removed on teardown */
};

_Static_assert(offsetof(struct fx, pin) == 0, "kt_bpffx_setup fills the pin first");

static int fx_setup(void **state)
{
	return kt_bpffx_setup(state, sizeof(struct fx), "xdp");
}

static int fx_teardown(void **state)
{
	struct fx *f = *state;

	kt_xdp_tags_close(f->t);
	kt_bpffx_rm_pins(f->pin);
	if (f->dev[0]) {
		char cmd[64];

		snprintf(cmd, sizeof(cmd), "ip link del %s 2>/dev/null", f->dev);
		if (system(cmd) != 0)
			fprintf(stderr, "cannot remove %s\n", f->dev);
	}
	free(f);
	return 0;
}

/* Skips unless root; loads with max_tags 1024; lo charged to LIM, sources
 * masked to prefix_v4 / prefix_v6; LIM's default: rate, burst. */
static struct fx *fx_open(void **state, uint8_t prefix_v4, uint8_t prefix_v6, double rate,
			  uint64_t burst)
{
	struct fx *f = *state;

	KTEST_SKIP_UNLESS_ROOT();
	assert_int_equal(kt_xdp_tags_open(f->pin, 1024, &f->t), 0);
	f->lo = (int)if_nametoindex("lo");
	assert_true(f->lo > 0);
	assert_int_equal(kt_xdp_tags_set_iface(f->t, f->lo, LIM, prefix_v4, prefix_v6), 0);
	assert_int_equal(kt_xdp_tags_set_limit(f->t, LIM, rate, burst), 0);
	return f;
}

/* ---- crafted frames ---- */

struct pkt {
	uint8_t data[256];
	size_t len;
};

/* Ethernet (+ one 802.1Q tag if vlan) + IPv4/IPv6 + UDP from `src`. */
static struct pkt mkframe(const char *src, int vlan)
{
	struct ether_header eth = { 0 };
	struct udphdr u = { .source = htons(40000), .dest = htons(53), .len = htons(8) };
	struct pkt p;
	size_t off = sizeof(eth);
	uint16_t type;

	memset(&p, 0, sizeof(p));
	memset(eth.ether_dhost, 0x02, ETH_ALEN);
	memset(eth.ether_shost, 0x04, ETH_ALEN);
	if (vlan) {
		uint16_t tci = htons(42);

		eth.ether_type = htons(ETHERTYPE_VLAN);
		memcpy(p.data + off, &tci, 2);
		off += 4; /* the encapsulated type is written below */
	}
	if (strchr(src, ':')) {
		struct ip6_hdr ip6 = { 0 };

		type = htons(ETHERTYPE_IPV6);
		ip6.ip6_flow = htonl(6u << 28);
		ip6.ip6_plen = htons(sizeof(u));
		ip6.ip6_nxt = IPPROTO_UDP;
		ip6.ip6_hlim = 64;
		assert_int_equal(inet_pton(AF_INET6, src, &ip6.ip6_src), 1);
		assert_int_equal(inet_pton(AF_INET6, "2001:db8::1", &ip6.ip6_dst), 1);
		memcpy(p.data + off, &ip6, sizeof(ip6));
		off += sizeof(ip6);
	} else {
		struct iphdr ip = { 0 };

		type = htons(ETHERTYPE_IP);
		ip.version = 4;
		ip.ihl = 5;
		ip.tot_len = htons(sizeof(ip) + sizeof(u));
		ip.ttl = 64;
		ip.protocol = IPPROTO_UDP;
		assert_int_equal(inet_pton(AF_INET, src, &ip.saddr), 1);
		ip.daddr = htonl(0xc0000201);
		memcpy(p.data + off, &ip, sizeof(ip));
		off += sizeof(ip);
	}
	if (vlan)
		memcpy(p.data + sizeof(eth) + 2, &type, 2);
	else
		eth.ether_type = type;
	memcpy(p.data, &eth, sizeof(eth));
	memcpy(p.data + off, &u, sizeof(u));
	p.len = off + sizeof(u);
	return p;
}

static __u32 run(struct fx *f, const struct pkt *p)
{
	LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = p->data, .data_size_in = (__u32)p->len,
		    .repeat = 1);

	if (bpf_prog_test_run_opts(kt_xdp_tags_prog_fd(f->t), &o) != 0) {
		print_error("BPF_PROG_TEST_RUN: %s\n", strerror(errno));
		fail();
	}
	return o.retval;
}

/* How many of n runs of p pass. */
static int passes(struct fx *f, const struct pkt *p, int n)
{
	int k = 0;

	for (int i = 0; i < n; i++)
		k += run(f, p) == XDP_VERDICT_PASS;
	return k;
}

static struct kt_tag_key tkey(const char *src, uint8_t prefix)
{
	struct kt_tag_key k = { .tag_limit = LIM, .prefix_len = prefix };
	unsigned i;

	if (strchr(src, ':')) {
		k.family = 6;
		assert_int_equal(inet_pton(AF_INET6, src, k.addr), 1);
	} else {
		k.family = 4;
		assert_int_equal(inet_pton(AF_INET, src, k.addr), 1);
	}
	for (i = 0; i < 16; i++) {
		int bits = (int)prefix - 8 * (int)i;

		k.addr[i] = bits >= 8 ? k.addr[i] : bits <= 0 ? 0 : k.addr[i] & (0xff << (8 - bits));
	}
	return k;
}

static int bucket(struct fx *f, const struct kt_tag_key *k, struct kt_tag_bucket *b)
{
	char p[PATH_MAX + 32];
	int fd, ret;

	snprintf(p, sizeof(p), "%s/kt_tag_buckets", f->pin);
	fd = bpf_obj_get(p);
	assert_true(fd >= 0);
	ret = bpf_map_lookup_elem(fd, k, b);
	close(fd);
	return ret;
}

/* The tag buckets' clock (kt_xdp_now in xdp.bpf.c) */
static uint64_t xdp_clock_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- harvest collector ---- */

#define MAX_HITS 16
struct hits {
	struct kt_tag_key key[MAX_HITS];
	uint64_t n[MAX_HITS];
	int count;
};

static void collect(void *ctx, const struct kt_tag_key *key, uint64_t n)
{
	struct hits *h = ctx;

	assert_true(h->count < MAX_HITS);
	h->key[h->count] = *key;
	h->n[h->count++] = n;
}

static uint64_t hits_of(const struct hits *h, const struct kt_tag_key *k)
{
	for (int i = 0; i < h->count; i++)
		if (!memcmp(&h->key[i], k, sizeof(*k)))
			return h->n[i];
	return 0;
}

static int drop_rec(void *ctx, void *data, size_t len)
{
	(void)ctx;
	(void)data;
	(void)len;
	return 0;
}

/* ---- tests ---- */

/* burst B passes, then drops, for one source; another is unaffected */
static void test_burst_v4(void **state)
{
	struct fx *f = fx_open(state, 32, 128, SLOW_RATE, 5);
	struct pkt a = mkframe("10.0.0.1", 0), b = mkframe("10.0.0.2", 0);
	struct kt_xdp_tags_stats s;
	struct kt_tag_bucket bk;
	struct kt_tag_key ka = tkey("10.0.0.1", 32);

	assert_int_equal(passes(f, &a, 5), 5);
	assert_int_equal(passes(f, &a, 3), 0);
	assert_int_equal(passes(f, &b, 8), 5);
	assert_int_equal(kt_xdp_tags_stats(f->t, LIM, &s), 0);
	assert_int_equal(s.buckets, 2);
	assert_int_equal(s.admitted, 10);
	assert_int_equal(s.dropped, 6);
	assert_int_equal(bucket(f, &ka, &bk), 0);
	assert_int_equal(bk.hits, 5);
	assert_int_equal(bk.admitted, 0); /* a packet adds to hits only; a harvest moves them */
	assert_int_equal(bk.dropped, 3);
	assert_int_equal(bk.burst, 5);
	assert_true(bk.last_seen > 0 && bk.last_seen <= xdp_clock_ns());
	assert_int_equal(kt_xdp_tags_stats(f->t, LIM + 1, &s), 0);
	assert_int_equal(s.buckets, 0);
}

/* IPv6 sources, and a VLAN-tagged frame is the same source as untagged */
static void test_v6_and_vlan(void **state)
{
	struct fx *f = fx_open(state, 32, 128, SLOW_RATE, 3);
	struct pkt v6 = mkframe("2001:db8::7", 0), v6b = mkframe("2001:db8::8", 1);
	struct pkt v4 = mkframe("192.0.2.9", 0), v4vlan = mkframe("192.0.2.9", 1);
	struct kt_tag_bucket bk;
	struct kt_tag_key k6 = tkey("2001:db8::7", 128);

	assert_int_equal(passes(f, &v6, 5), 3);
	assert_int_equal(bucket(f, &k6, &bk), 0);
	assert_int_equal(bk.admitted + bk.hits, 3);
	assert_int_equal(passes(f, &v6b, 5), 3); /* tagged v6: its own source */
	assert_int_equal(passes(f, &v4, 2), 2);
	assert_int_equal(passes(f, &v4vlan, 3), 1); /* shares the untagged one's bucket */
}

/* ARP and an unconfigured interface pass; a truncated IP header drops */
static void test_unparsed(void **state)
{
	struct fx *f = fx_open(state, 32, 128, SLOW_RATE, 1);
	struct pkt arp = mkframe("10.0.0.1", 0), t4 = mkframe("10.0.0.1", 0);
	struct pkt t6 = mkframe("2001:db8::1", 0), tv = mkframe("10.0.0.1", 1);
	struct pkt ok = mkframe("10.0.0.3", 0);
	struct kt_xdp_stats st;
	uint16_t type = htons(ETHERTYPE_ARP);

	memcpy(arp.data + 12, &type, 2);
	assert_int_equal(passes(f, &arp, 5), 5);
	t4.len = sizeof(struct ether_header) + 10;
	t6.len = sizeof(struct ether_header) + 30;
	tv.len = sizeof(struct ether_header) + 4 + 19;
	assert_int_equal(run(f, &t4), XDP_VERDICT_DROP);
	assert_int_equal(run(f, &t6), XDP_VERDICT_DROP);
	assert_int_equal(run(f, &tv), XDP_VERDICT_DROP);
	assert_int_equal(kt_xdp_tags_global_stats(f->t, &st), 0);
	assert_int_equal(st.malformed, 3);
	/* a limit not in use passes */
	assert_int_equal(kt_xdp_tags_clear_limit(f->t, LIM), 0);
	assert_int_equal(passes(f, &ok, 3), 3);
	assert_int_equal(kt_xdp_tags_set_limit(f->t, LIM, SLOW_RATE, 1), 0);
	assert_int_equal(passes(f, &ok, 3), 1);
	/* an interface not configured passes, even truncated frames */
	assert_int_equal(kt_xdp_tags_del_iface(f->t, f->lo), 0);
	assert_int_equal(passes(f, &ok, 3), 3);
	assert_int_equal(run(f, &t4), XDP_VERDICT_PASS);
	assert_int_equal(kt_xdp_tags_del_iface(f->t, f->lo), -ENOENT);
}

/* One run of p as if it arrived on ifindex (a ctx, unlike run()). */
static __u32 run_on(struct fx *f, const struct pkt *p, int ifindex)
{
	struct xdp_md ctx = { .data_end = (__u32)p->len, .ingress_ifindex = (__u32)ifindex };
	LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = p->data, .data_size_in = (__u32)p->len,
		    .ctx_in = &ctx, .ctx_size_in = sizeof(ctx), .repeat = 1);

	if (bpf_prog_test_run_opts(kt_xdp_tags_prog_fd(f->t), &o) != 0) {
		print_error("BPF_PROG_TEST_RUN on ifindex %d: %s\n", ifindex, strerror(errno));
		fail();
	}
	return o.retval;
}

static int map_fd(struct fx *f, const char *name)
{
	char p[PATH_MAX + 32];
	int fd;

	snprintf(p, sizeof(p), "%s/%s", f->pin, name);
	fd = bpf_obj_get(p);
	assert_true(fd >= 0);
	return fd;
}

/* The interface config by slot (kt_xdp_ifslot) follows kt_xdp_ifaces, the
 * record: rebuilt on open when the pins have no slot map (an older
 * version's) or an older daemon changed only the record; an ifindex past
 * the slots is read from the record. */
static void test_iface_slots(void **state)
{
	struct fx *f = fx_open(state, 32, 128, SLOW_RATE, 2);
	struct pkt a = mkframe("10.0.0.1", 0);
	struct kt_xdp_iface v;
	struct kt_xdp_tags *t2 = NULL;
	char p[PATH_MAX + 32], cmd[160], *dev = f->dev;
	__u32 k = (__u32)f->lo;
	int fd, big = 0;

	assert_true(f->lo < KT_XDP_IFSLOTS);
	fd = map_fd(f, "kt_xdp_ifslot");
	assert_int_equal(bpf_map_lookup_elem(fd, &k, &v), 0);
	assert_int_equal(v.flags, KT_XDP_IFACE_SET);
	assert_int_equal(v.tag_limit, LIM);
	assert_int_equal(v.prefix_v4, 32);
	close(fd);
	assert_int_equal(passes(f, &a, 3), 2);

	/* pins of a version without the slots: made and filled on open */
	snprintf(p, sizeof(p), "%s/kt_xdp_ifslot", f->pin);
	assert_int_equal(unlink(p), 0);
	assert_int_equal(kt_xdp_tags_open(f->pin, 1024, &t2), 0);
	kt_xdp_tags_close(f->t);
	f->t = t2;
	assert_int_equal(run(f, &a), XDP_VERDICT_DROP);

	/* an older daemon took lo out of the record only: the next open clears its slot */
	fd = map_fd(f, "kt_xdp_ifaces");
	assert_int_equal(bpf_map_delete_elem(fd, &k), 0);
	close(fd);
	assert_int_equal(run(f, &a), XDP_VERDICT_DROP); /* the slot still says so */
	t2 = NULL;
	assert_int_equal(kt_xdp_tags_open(f->pin, 1024, &t2), 0);
	kt_xdp_tags_close(f->t);
	f->t = t2;
	assert_int_equal(passes(f, &a, 3), 3);
	assert_int_equal(kt_xdp_tags_set_iface(f->t, f->lo, LIM, 32, 128), 0);
	assert_int_equal(run(f, &a), XDP_VERDICT_DROP);

	/* an ifindex past the slots: a veth made with one (no dummy driver here) */
	snprintf(dev, IF_NAMESIZE - 1, "ktx%d", getpid() % 1000000);
	for (int i = 0; i < 8 && !big; i++) {
		int idx = KT_XDP_IFSLOTS + 1000 + (getpid() * 7 + i * 1031) % 50000;

		snprintf(cmd, sizeof(cmd), "ip link add %s index %d type veth peer name %sp 2>/dev/null", dev,
			 idx, dev);
		if (system(cmd) == 0)
			big = idx;
	}
	assert_true(big > 0);
	assert_int_equal((int)if_nametoindex(dev), big);
	assert_int_equal(run_on(f, &a, big), XDP_VERDICT_PASS); /* not configured */
	assert_int_equal(kt_xdp_tags_set_iface(f->t, big, LIM, 24, 128), 0);
	/* 10.0.0.0/24: a bucket of its own, burst 2 */
	assert_int_equal(run_on(f, &a, big), XDP_VERDICT_PASS);
	assert_int_equal(run_on(f, &a, big), XDP_VERDICT_PASS);
	assert_int_equal(run_on(f, &a, big), XDP_VERDICT_DROP);
	assert_int_equal(kt_xdp_tags_del_iface(f->t, big), 0);
	assert_int_equal(run_on(f, &a, big), XDP_VERDICT_PASS);
}

/* an allowlisted prefix passes unlimited, uncounted; an override CIDR has
 * its own burst */
static void test_rules(void **state)
{
	struct fx *f = fx_open(state, 32, 128, SLOW_RATE, 5);
	struct kt_tag_key allow = tkey("10.9.0.0", 16), over = tkey("10.8.0.0", 16);
	struct kt_tag_key v6 = tkey("2001:db8:aa::", 48);
	struct pkt pa = mkframe("10.9.1.2", 0), po = mkframe("10.8.3.4", 0);
	struct pkt pd = mkframe("10.7.0.1", 0), p6 = mkframe("2001:db8:aa::1", 0);
	struct kt_tag_key ka = tkey("10.9.1.2", 32);
	struct kt_xdp_tags_stats s;
	struct kt_tag_bucket bk;
	struct hits h = { 0 };

	assert_int_equal(kt_xdp_tags_set_rule(f->t, LIM, 4, allow.addr, 16, 1, 0, 0), 0);
	assert_int_equal(kt_xdp_tags_set_rule(f->t, LIM, 4, over.addr, 16, 0, SLOW_RATE, 2), 0);
	assert_int_equal(kt_xdp_tags_set_rule(f->t, LIM, 6, v6.addr, 48, 0, SLOW_RATE, 1), 0);
	assert_int_equal(kt_xdp_tags_set_rule(f->t, LIM, 4, over.addr, 33, 0, 1, 1), -EINVAL);
	assert_int_equal(passes(f, &pa, 100), 100);
	assert_int_equal(passes(f, &po, 5), 2);
	assert_int_equal(passes(f, &pd, 7), 5);
	assert_int_equal(passes(f, &p6, 3), 1);
	assert_int_equal(bucket(f, &ka, &bk), 0);
	assert_true(bk.flags & KT_TAG_ALLOW);
	assert_int_equal(bk.hits, 0);
	assert_int_equal(bk.admitted, 0);
	assert_int_equal(kt_xdp_tags_harvest(f->t, collect, &h), 3);
	assert_int_equal(hits_of(&h, &ka), 0);
	assert_int_equal(kt_xdp_tags_stats(f->t, LIM, &s), 0);
	assert_int_equal(s.buckets, 4);
	assert_int_equal(s.admitted, 2 + 5 + 1);
	/* a rule deleted: new buckets of its prefix get the default */
	assert_int_equal(kt_xdp_tags_del_rule(f->t, LIM, 4, over.addr, 16), 0);
	struct pkt po2 = mkframe("10.8.3.5", 0);
	assert_int_equal(passes(f, &po2, 7), 5);
}

/* prefix length 24: two hosts of a /24 share one bucket */
static void test_prefix24(void **state)
{
	struct fx *f = fx_open(state, 24, 64, SLOW_RATE, 4);
	struct pkt a = mkframe("10.1.2.3", 0), b = mkframe("10.1.2.77", 0);
	struct pkt c = mkframe("10.1.3.3", 0);
	struct pkt x = mkframe("2001:db8:1:2:aaaa::1", 0), y = mkframe("2001:db8:1:2:bbbb::2", 0);
	struct kt_tag_key k = tkey("10.1.2.0", 24);
	struct kt_tag_bucket bk;

	assert_int_equal(passes(f, &a, 2), 2);
	assert_int_equal(passes(f, &b, 3), 2);
	assert_int_equal(passes(f, &a, 1), 0);
	assert_int_equal(passes(f, &c, 1), 1);
	assert_int_equal(bucket(f, &k, &bk), 0);
	assert_int_equal(bk.admitted + bk.hits, 4);
	assert_int_equal(bk.dropped, 2);
	assert_int_equal(passes(f, &x, 3), 3);
	assert_int_equal(passes(f, &y, 3), 1);
	/* the key the program made: the /64, bytes past it zero */
	k = tkey("2001:db8:1:2::", 64);
	assert_int_equal(bucket(f, &k, &bk), 0);
	assert_int_equal(bk.admitted + bk.hits, 4);
	assert_int_equal(bk.dropped, 2);
}

/* tokens refill at the rate: 100/s, burst 2 */
static void test_refill(void **state)
{
	struct fx *f = fx_open(state, 32, 128, 100, 2);
	struct pkt a = mkframe("10.0.0.5", 0);
	struct timespec ts = { 0, 25 * 1000 * 1000 };
	int got;

	assert_int_equal(passes(f, &a, 4), 2);
	nanosleep(&ts, NULL); /* 2.5 tokens' worth, capped at the burst */
	got = passes(f, &a, 4);
	assert_true(got == 2 || got == 3); /* 3 only if a further 10 ms passed between runs */
	/* 2 tokens' worth: the coarse clock moves in ticks (4 ms at HZ=250),
	 * so 1.6 to 2.4 of them, plus what was left, capped at the burst */
	ts.tv_nsec = 20 * 1000 * 1000;
	nanosleep(&ts, NULL);
	got = passes(f, &a, 3);
	assert_true(got >= 1 && got <= 2);
}

/* harvest: exact hit counts, zeroed; by the ring, and by a full scan
 * after lost notifications */
static void test_harvest(void **state)
{
	struct fx *f = fx_open(state, 32, 128, SLOW_RATE, 10);
	struct pkt a = mkframe("10.0.0.1", 0), b = mkframe("2001:db8::b", 0);
	struct kt_tag_key ka = tkey("10.0.0.1", 32), kb = tkey("2001:db8::b", 128);
	struct kt_xdp_stats st;
	struct kt_xdp_tags_stats s;
	struct kt_tag_bucket bk;
	struct ring_buffer *rb;
	struct hits h = { 0 };
	char p[PATH_MAX + 32];
	__u32 zero = 0;
	int fd;

	/* the first harvest scans (a previous daemon may have read the ring) */
	assert_int_equal(kt_xdp_tags_harvest(f->t, collect, &h), 0);
	assert_int_equal(passes(f, &a, 3), 3);
	assert_int_equal(passes(f, &b, 12), 10);
	assert_int_equal(kt_xdp_tags_harvest(f->t, collect, &h), 2);
	assert_int_equal(hits_of(&h, &ka), 3);
	assert_int_equal(hits_of(&h, &kb), 10);
	assert_int_equal(bucket(f, &ka, &bk), 0);
	assert_int_equal(bk.hits, 0);
	assert_int_equal(bk.admitted, 3);
	memset(&h, 0, sizeof(h));
	assert_int_equal(kt_xdp_tags_harvest(f->t, collect, &h), 0);
	assert_int_equal(passes(f, &a, 1), 1);
	assert_int_equal(kt_xdp_tags_harvest(f->t, collect, &h), 1);
	assert_int_equal(hits_of(&h, &ka), 1);
	/* the totals: harvested (admitted) plus not yet (hits), dropped apart */
	assert_int_equal(kt_xdp_tags_stats(f->t, LIM, &s), 0);
	assert_int_equal(s.admitted, 3 + 1 + 10);
	assert_int_equal(s.dropped, 2);
	assert_int_equal(passes(f, &a, 2), 2);
	assert_int_equal(kt_xdp_tags_stats(f->t, LIM, &s), 0);
	assert_int_equal(s.admitted, 3 + 1 + 10 + 2);
	memset(&h, 0, sizeof(h));
	assert_int_equal(kt_xdp_tags_harvest(f->t, collect, &h), 1);
	assert_int_equal(hits_of(&h, &ka), 2);
	assert_int_equal(bucket(f, &ka, &bk), 0);
	assert_int_equal(bk.hits, 0);
	assert_int_equal(bk.admitted, 3 + 1 + 2);
	assert_int_equal(kt_xdp_tags_stats(f->t, LIM, &s), 0);
	assert_int_equal(s.admitted, 3 + 1 + 10 + 2);

	/* notifications read by someone else, and counted lost: the scan finds them */
	assert_int_equal(passes(f, &a, 2), 2);
	snprintf(p, sizeof(p), "%s/kt_tag_notify", f->pin);
	fd = bpf_obj_get(p);
	assert_true(fd >= 0);
	rb = ring_buffer__new(fd, drop_rec, NULL, NULL);
	assert_non_null(rb);
	assert_int_equal(ring_buffer__consume(rb), 1);
	ring_buffer__free(rb);
	close(fd);
	memset(&h, 0, sizeof(h));
	assert_int_equal(kt_xdp_tags_harvest(f->t, collect, &h), 0); /* nothing in the ring */
	assert_int_equal(passes(f, &a, 2), 2);
	fd = bpf_obj_get(p);
	assert_true(fd >= 0);
	rb = ring_buffer__new(fd, drop_rec, NULL, NULL);
	assert_non_null(rb);
	assert_int_equal(ring_buffer__consume(rb), 0); /* hits was not 0: no new notification */
	ring_buffer__free(rb);
	close(fd);
	snprintf(p, sizeof(p), "%s/kt_xdp_stats", f->pin);
	fd = bpf_obj_get(p);
	assert_true(fd >= 0);
	assert_int_equal(bpf_map_lookup_elem(fd, &zero, &st), 0);
	st.notify_lost++;
	assert_int_equal(bpf_map_update_elem(fd, &zero, &st, BPF_ANY), 0);
	close(fd);
	assert_int_equal(kt_xdp_tags_harvest(f->t, collect, &h), 1);
	assert_int_equal(hits_of(&h, &ka), 4);
	memset(&h, 0, sizeof(h));
	assert_int_equal(kt_xdp_tags_harvest(f->t, collect, &h), 0);
}

/* debit of N remote hits takes N tokens, below zero, as kt_tag_debit says */
static void test_debit(void **state)
{
	struct fx *f = fx_open(state, 32, 128, SLOW_RATE, 5);
	struct pkt a = mkframe("10.0.0.1", 0), d = mkframe("10.0.0.4", 0);
	struct pkt e = mkframe("10.0.0.5", 0), al = mkframe("10.9.0.1", 0);
	struct kt_tag_key k[5] = { tkey("10.0.0.1", 32), tkey("10.0.0.4", 32), tkey("10.0.0.5", 32),
				   tkey("10.9.0.1", 32), tkey("10.0.0.6", 32) };
	uint64_t n[5] = { 3, 4, 7, 50, 1 };
	struct kt_tag_bucket bk;
	struct hits h = { 0 };
	double tokens;

	k[4].tag_limit = LIM + 1; /* a limit not in use: skipped */
	assert_int_equal(kt_xdp_tags_set_rule(f->t, LIM, 4, k[3].addr, 32, 1, 0, 0), 0);
	assert_int_equal(passes(f, &a, 1), 1);                /* 4 left */
	assert_int_equal(kt_xdp_tags_harvest(f->t, collect, &h), 1);
	assert_int_equal(kt_xdp_tags_debit(f->t, k, n, 5), 4); /* the absent 10.0.0.4/.5 made */
	assert_int_equal(passes(f, &a, 3), 1);                /* 4 - 3 = 1 */
	assert_int_equal(passes(f, &d, 3), 1);                /* 5 - 4 = 1 */
	assert_int_equal(passes(f, &e, 3), 0);                /* 5 - 7 = -2 */
	assert_int_equal(passes(f, &al, 3), 3);               /* allowlisted: not debited */
	assert_int_equal(bucket(f, &k[2], &bk), 0);
	tokens = kt_tag_tokens(bk.tat, xdp_clock_ns(), bk.interval_fp, bk.burst);
	assert_true(tokens > -2.01 && tokens < -1.99);
	assert_int_equal(bk.dropped, 3);
	assert_int_equal(bucket(f, &k[4], &bk), -ENOENT);
	/* remote hits are not harvested back */
	memset(&h, 0, sizeof(h));
	assert_int_equal(kt_xdp_tags_harvest(f->t, collect, &h), 2);
	assert_int_equal(hits_of(&h, &k[0]), 1);
	assert_int_equal(hits_of(&h, &k[1]), 1);
	assert_int_equal(hits_of(&h, &k[2]), 0);
}

/* a reload rewrites the buckets in place, each keeping its tokens */
static void test_set_buckets(void **state)
{
	struct fx *f = fx_open(state, 32, 128, SLOW_RATE, 5);
	struct pkt a = mkframe("10.0.0.1", 0), b = mkframe("10.0.0.2", 0);
	struct kt_tag_key ka = tkey("10.0.0.1", 32), kb = tkey("10.0.0.2", 32);
	struct kt_tag_bucket bk;
	uint64_t now;
	double tokens;

	assert_int_equal(passes(f, &a, 6), 5); /* empty */
	assert_int_equal(passes(f, &b, 2), 2); /* 3 left */
	assert_int_equal(kt_xdp_tags_set_limit(f->t, LIM, 0.002, 10), 0);
	assert_int_equal(kt_xdp_tags_set_buckets(f->t, LIM), 2);
	assert_int_equal(bucket(f, &kb, &bk), 0);
	assert_int_equal(bk.burst, 10);
	now = xdp_clock_ns();
	tokens = kt_tag_tokens(bk.tat, now, bk.interval_fp, bk.burst);
	/* 2 tokens of debt at the new rate: 8 of 10 */
	assert_true(tokens > 7.99 && tokens < 8.01);
	assert_int_equal(passes(f, &a, 7), 5); /* 5 of debt kept: 5 of 10 */
	assert_int_equal(bucket(f, &ka, &bk), 0);
	assert_int_equal(bk.interval_fp, kt_interval_fp_from_rate(0.002));
	/* allowlisting by rule, then a reload: the bucket passes */
	assert_int_equal(kt_xdp_tags_set_rule(f->t, LIM, 4, ka.addr, 32, 1, 0, 0), 0);
	assert_int_equal(passes(f, &a, 2), 0);
	assert_int_equal(kt_xdp_tags_set_buckets(f->t, UINT32_MAX), 2);
	assert_int_equal(passes(f, &a, 2), 2);
	/* the limit gone: its buckets go */
	assert_int_equal(kt_xdp_tags_clear_limit(f->t, LIM), 0);
	assert_int_equal(kt_xdp_tags_set_buckets(f->t, LIM), 0);
	assert_int_equal(bucket(f, &kb, &bk), -ENOENT);
}

/* the same pin dir opened again (a restarted daemon) keeps the buckets */
static void test_reopen(void **state)
{
	struct fx *f = fx_open(state, 32, 128, SLOW_RATE, 3);
	struct pkt a = mkframe("10.0.0.1", 0);
	struct kt_tag_key ka = tkey("10.0.0.1", 32);
	struct kt_xdp_tags *t2 = NULL;
	struct hits h = { 0 };

	assert_int_equal(passes(f, &a, 2), 2);
	assert_int_equal(kt_xdp_tags_open(f->pin, 1024, &t2), 0);
	kt_xdp_tags_close(f->t);
	f->t = t2;
	assert_int_equal(passes(f, &a, 2), 1);
	assert_int_equal(kt_xdp_tags_harvest(f->t, collect, &h), 1);
	assert_int_equal(hits_of(&h, &ka), 3);
	/* another size is refused */
	t2 = NULL;
	assert_true(kt_xdp_tags_open(f->pin, 2048, &t2) < 0);
	assert_null(t2);
}

#define KT_XDP_VERIFIER_BUDGET 50000

static void test_verifier_budget(void **state)
{
	struct fx *f = fx_open(state, 32, 128, SLOW_RATE, 3);
	struct kt_tag_key k = tkey("10.0.0.1", 32);
	struct bpf_prog_info info = { 0 };
	uint64_t n = 1;
	__u32 len = sizeof(info);

	assert_int_equal(bpf_obj_get_info_by_fd(kt_xdp_tags_prog_fd(f->t), &info, &len), 0);
	print_message("kt_xdp_tags      verified %6u instructions (budget %d)\n", info.verified_insns,
		      KT_XDP_VERIFIER_BUDGET);
	assert_true(info.verified_insns > 0);
	assert_true(info.verified_insns <= KT_XDP_VERIFIER_BUDGET);
	/* kt_tag_run_ops loaded with it (else the open fails); it runs: */
	assert_int_equal(kt_xdp_tags_debit(f->t, &k, &n, 1), 1);
}

/* Runs last: every earlier test removed its pins. */
static void test_nothing_left(void **state)
{
	(void)state;

	KTEST_SKIP_UNLESS_ROOT();
	kt_bpffx_assert_none_left();
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_burst_v4),
		T(test_v6_and_vlan),
		T(test_unparsed),
		T(test_iface_slots),
		T(test_rules),
		T(test_prefix24),
		T(test_refill),
		T(test_harvest),
		T(test_debit),
		T(test_set_buckets),
		T(test_reopen),
		T(test_verifier_budget),
		cmocka_unit_test(test_nothing_left),
	};
	return cmocka_run_group_tests_name("bpf_xdp", tests, NULL, NULL);
}
