// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The real BPF programs, loaded through kt_bpf_open into a private pin dir.
 * cgroup_skb/egress runs under BPF_PROG_TEST_RUN on crafted packets
 * (skipped where the test run gives cgroup_skb no packet data);
 * connect4/6 and sendmsg4/6 (no test-run support) are attached to a test
 * cgroup through kt_plan_apply and driven by real sockets from a child
 * process inside it. Needs root; skipped otherwise. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/ethernet.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/ip6.h>
#include <netinet/tcp.h>
#include <netinet/udp.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "kernel/apply.h"
#include "kernel/bpf_loader.h"
#include "base/cgroup.h"
#include "kernel/classify.h"
#include "connect.skel.h"
#include "egress.skel.h"
#include "sendmsg.skel.h"
#include "sock.skel.h"
#include "sockops.skel.h"
#include "kernel/inspect.h"
#include "kt_bpffx.h"
#include "kt_kprobe.h"
#include "kt_procfx.h"
#include "members/resolve.h"
#include "ktest.h"

/* Slow enough that no token refills while a test runs. */
#define SLOW_RATE 0.001


struct fx {
	char pin[PATH_MAX];
	struct kt_bpf b;
	bool opened;
	struct kt_plan plan;
	struct kt_limit_cfg *cfgs; /* owned here; the plan points into it */
	struct kt_procfx pf; /* cgroups, children, descriptors */
};

_Static_assert(offsetof(struct fx, pin) == 0, "kt_bpffx_setup fills the pin first");

static int fx_setup(void **state)
{
	return kt_bpffx_setup(state, sizeof(struct fx), "progs");
}

static int fx_teardown(void **state)
{
	struct fx *f = *state;

	kt_bpffx_close(&f->b, f->pin, f->opened);
	kt_procfx_end(&f->pf);
	kt_plan_free(&f->plan);
	free(f->cfgs);
	free(f);
	return 0;
}

/* Skips unless root with BTF and cgroup v2; opens the programs. */
static struct fx *fx_open(void **state)
{
	struct fx *f = *state;

	KTEST_SKIP_UNLESS_ROOT();
	kt_bpffx_open(&f->b, f->pin, &f->opened);
	assert_non_null(f->b.buckets);
	assert_true(f->b.ncpus > 0);
	return f;
}

/* fx_open for the tests that drive kt_egress under BPF_PROG_TEST_RUN. Each
 * of them needs the program to read the packet (each expects some packet
 * charged or refused), and a kernel whose test run leaves cgroup_skb's
 * data_end unset shows it none: kt_egress passes everything unread there,
 * which says nothing of kt_egress, so they skip. */
static struct fx *egress_open(void **state)
{
	KTEST_SKIP_UNLESS_ROOT();
	KTEST_SKIP_IF(kt_kprobe_skb_test_data());
	return fx_open(state);
}

/* The cgroup this process runs in. BPF_PROG_TEST_RUN gives the skb a dummy
 * socket charged to the caller's cgroup, so that is what
 * bpf_skb_cgroup_id() sees in the egress runs below. */
static uint64_t self_cgroup_id(void)
{
	char m[PATH_MAX], line[PATH_MAX], path[2 * PATH_MAX];
	uint64_t id = 0;
	FILE *fp;

	assert_int_equal(kt_cgroup2_mount(m, sizeof(m), NULL), 0);
	fp = fopen("/proc/self/cgroup", "r");
	assert_non_null(fp);
	while (fgets(line, sizeof(line), fp)) {
		if (strncmp(line, "0::", 3))
			continue;
		line[strcspn(line, "\n")] = 0;
		snprintf(path, sizeof(path), "%s%s", m, line + 3);
		assert_int_equal(kt_cgroup_id(path, &id), 0);
	}
	fclose(fp);
	assert_true(id != 0);
	return id;
}

/* ---- direct map programming ---- */

static struct kt_cidr cidr(const char *s)
{
	struct kt_cidr c = { 0 };
	char buf[64];
	char *slash;

	snprintf(buf, sizeof(buf), "%s", s);
	slash = strchr(buf, '/');
	assert_non_null(slash);
	*slash = 0;
	if (strchr(buf, ':')) {
		assert_int_equal(inet_pton(AF_INET6, buf, c.addr), 1);
		c.prefixlen = (uint8_t)atoi(slash + 1);
	} else {
		c.addr[10] = c.addr[11] = 0xff;
		assert_int_equal(inet_pton(AF_INET, buf, c.addr + 12), 1);
		c.prefixlen = (uint8_t)(96 + atoi(slash + 1));
	}
	return c;
}

struct lim {
	uint32_t id;
	enum kt_unit unit;
	uint8_t proto;
	uint16_t lo, hi;
	const char *cidr;
	uint32_t slot;
	__u64 burst;
	double rate; /* tokens/s; 0: SLOW_RATE */
};

/* Writes the classifier for `n` limits (built by kt_classifier_build, as the
 * daemon does), a bucket per limit and a membership of cgroup `cgid`. */
static void program(struct fx *f, const struct lim *l, int n, uint64_t cgid,
		    struct kt_classifier *keep)
{
	struct kt_rule_input in[8];
	struct kt_cidr c[8];
	struct kt_classifier cls;
	char err[256];
	int i;

	assert_true(n <= 8);
	for (i = 0; i < n; i++) {
		c[i] = cidr(l[i].cidr);
		in[i] = (struct kt_rule_input){ .limit_id = l[i].id, .unit = l[i].unit,
						.proto_mask = l[i].proto, .port_lo = l[i].lo,
						.port_hi = l[i].hi, .cidrs = &c[i], .n_cidrs = 1 };
	}
	assert_int_equal(kt_classifier_build(in, n, &cls, err, sizeof(err)), 0);
	for (i = 0; i < cls.n_dests; i++)
		assert_int_equal(bpf_map_update_elem(f->b.dests_fd, &cls.dests[i].key,
						     &cls.dests[i].val, BPF_ANY),
				 0);
	for (__u32 h = 0; h < KT_HOOK_COUNT; h++)
		assert_int_equal(bpf_map_update_elem(f->b.ports_fd, &h, &cls.ports[h], BPF_ANY), 0);
	struct kt_member_key k = { .cgroup_id = cgid };
	struct kt_member_val v = { .count = (__u32)n };

	for (i = 0; i < n; i++) {
		struct kt_limit_info li = { .in_use = 1,
					    .unit = (__u8)l[i].unit,
					    .proto_mask = l[i].proto,
					    .port_lo = l[i].lo,
					    .port_hi = l[i].hi };

		snprintf(li.name, sizeof(li.name), "lim%u", l[i].id);
		assert_int_equal(bpf_map_update_elem(f->b.limits_fd, &l[i].id, &li, BPF_ANY), 0);
		f->b.buckets[l[i].slot] = (struct kt_bucket){
			.tat = 0,
			.interval_fp = kt_interval_fp_from_rate(l[i].rate ? l[i].rate : SLOW_RATE),
			.burst = l[i].burst,
			.limit_id = l[i].id,
			.flags = KT_BUCKET_IN_USE,
		};
		v.ents[i] = (struct kt_member_ent){ .limit_id = l[i].id, .slot = l[i].slot };
	}
	assert_int_equal(bpf_map_update_elem(f->b.members_fd, &k, &v, BPF_ANY), 0);
	kt_bpf_bump_gen(&f->b); /* as the daemon does after writing kt_members */
	if (keep)
		*keep = cls;
	else
		kt_classifier_free(&cls);
}

static struct kt_counters counters(struct fx *f, uint32_t slot)
{
	struct kt_counters c;

	assert_int_equal(kt_bpf_read_counters(&f->b, slot, &c), 0);
	return c;
}

/* All slots' counters added up: "touches no counter" checks. */
static struct kt_counters all_counters(struct fx *f)
{
	struct kt_counters s = { 0 };

	for (uint32_t i = 0; i < 16; i++) {
		struct kt_counters c = counters(f, i);
		s.admitted += c.admitted;
		s.throttled += c.throttled;
		s.admitted_bytes += c.admitted_bytes;
		s.throttled_bytes += c.throttled_bytes;
	}
	return s;
}

/* ---- crafted packets for BPF_PROG_TEST_RUN ---- */

struct pkt {
	uint8_t data[2048];
	size_t len; /* with the Ethernet header */
};

/* Ethernet + IP + TCP/UDP to dst:port, `ip_len` bytes from the IP header on
 * (what the program sees as skb->len). proto: IPPROTO_TCP/UDP/ICMP. Headers
 * are built as structs and copied in (no type-punned stores into the bytes). */
static struct pkt mkpkt(const char *dst, uint8_t proto, uint16_t port, size_t ip_len)
{
	struct pkt p;
	struct ether_header eth = { 0 };
	size_t off = sizeof(eth), l3len;

	memset(&p, 0, sizeof(p));
	assert_true(ip_len + sizeof(eth) <= sizeof(p.data));
	p.len = sizeof(eth) + ip_len;
	memset(eth.ether_dhost, 0x02, ETH_ALEN);
	memset(eth.ether_shost, 0x04, ETH_ALEN);
	if (strchr(dst, ':')) {
		struct ip6_hdr ip6 = { 0 };
		eth.ether_type = htons(ETHERTYPE_IPV6);
		ip6.ip6_flow = htonl(6u << 28);
		ip6.ip6_plen = htons((uint16_t)(ip_len - sizeof(ip6)));
		ip6.ip6_nxt = proto;
		ip6.ip6_hlim = 64;
		assert_int_equal(inet_pton(AF_INET6, "fd00::1", &ip6.ip6_src), 1);
		assert_int_equal(inet_pton(AF_INET6, dst, &ip6.ip6_dst), 1);
		memcpy(p.data + off, &ip6, sizeof(ip6));
		l3len = sizeof(ip6);
	} else {
		struct iphdr ip = { 0 };
		eth.ether_type = htons(ETHERTYPE_IP);
		ip.version = 4;
		ip.ihl = 5;
		ip.tot_len = htons((uint16_t)ip_len);
		ip.ttl = 64;
		ip.protocol = proto;
		ip.saddr = htonl(0x0a000063);
		assert_int_equal(inet_pton(AF_INET, dst, &ip.daddr), 1);
		memcpy(p.data + off, &ip, sizeof(ip));
		l3len = sizeof(ip);
	}
	memcpy(p.data, &eth, sizeof(eth));
	off += l3len;
	if (proto == IPPROTO_TCP) {
		struct tcphdr t = { 0 };
		assert_true(ip_len >= l3len + sizeof(t));
		t.source = htons(40000);
		t.dest = htons(port);
		t.doff = 5;
		t.syn = 1;
		memcpy(p.data + off, &t, sizeof(t));
	} else if (proto == IPPROTO_UDP) {
		struct udphdr u = { 0 };
		assert_true(ip_len >= l3len + sizeof(u));
		u.source = htons(40000);
		u.dest = htons(port);
		u.len = htons((uint16_t)(ip_len - l3len));
		memcpy(p.data + off, &u, sizeof(u));
	}
	return p;
}

/* Byte offsets in a mkpkt() IPv4 packet, for corrupting it on purpose. */
#define ETHERTYPE_OFF 12
#define IP4_FRAG_OFF (sizeof(struct ether_header) + 6)
#define IP4_PROTO_OFF (sizeof(struct ether_header) + 9)
#define IP6_NXT_OFF (sizeof(struct ether_header) + 6)
#define IP6_PLEN_OFF (sizeof(struct ether_header) + 4)

/* Inserts IPv6 extension headers after the fixed header of a mkpkt() IPv6
 * packet: types[] in order (each 8 bytes: next header, length 0, padding;
 * a fragment header gets `frag_off`), the last pointing at the packet's
 * original next header. */
static struct pkt with_ext(const struct pkt *in, const uint8_t *types, int n, uint16_t frag_off)
{
	const size_t l3 = sizeof(struct ether_header) + 40;
	struct pkt p = *in;
	uint8_t orig = in->data[IP6_NXT_OFF];
	uint16_t plen;

	assert_true(in->len + 8 * (size_t)n <= sizeof(p.data));
	memmove(p.data + l3 + 8 * n, in->data + l3, in->len - l3);
	for (int i = 0; i < n; i++) {
		uint8_t *h = p.data + l3 + 8 * i;

		memset(h, 0, 8);
		h[0] = i + 1 < n ? types[i + 1] : orig;
		if (types[i] == 44) { /* fragment: offset in 8-byte units, shifted by 3 */
			h[2] = (uint8_t)(frag_off >> 8);
			h[3] = (uint8_t)frag_off;
		} else {
			h[2] = 1; /* PadN option of 4 bytes fills the 8 */
			h[3] = 4;
		}
	}
	p.data[IP6_NXT_OFF] = types[0];
	p.len = in->len + 8 * (size_t)n;
	memcpy(&plen, p.data + IP6_PLEN_OFF, 2);
	plen = htons((uint16_t)(ntohs(plen) + 8 * n));
	memcpy(p.data + IP6_PLEN_OFF, &plen, 2);
	return p;
}

static __u32 run(struct fx *f, const struct pkt *p)
{
	LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = p->data, .data_size_in = (__u32)p->len,
		    .repeat = 1);
	int fd = bpf_program__fd(f->b.egress->progs.kt_egress);

	if (bpf_prog_test_run_opts(fd, &o) != 0) {
		print_error("BPF_PROG_TEST_RUN: %s\n", strerror(errno));
		fail();
	}
	return o.retval;
}

#define SKB_DROP 0
#define SKB_PASS 1
#define SKB_DROP_CN 2

/* The same as run() for a GSO packet that becomes `segs` on the wire. */
static __u32 run_gso(struct fx *f, const struct pkt *p, __u32 segs)
{
	struct __sk_buff ctx = { .gso_segs = segs, .gso_size = 100 };
	LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = p->data, .data_size_in = (__u32)p->len,
		    .ctx_in = &ctx, .ctx_size_in = sizeof(ctx), .repeat = 1);
	int fd = bpf_program__fd(f->b.egress->progs.kt_egress);

	if (bpf_prog_test_run_opts(fd, &o) != 0) {
		print_error("BPF_PROG_TEST_RUN with gso_segs: %s\n", strerror(errno));
		fail();
	}
	return o.retval;
}

/* No way around a limit through the packet's headers: IPv6 extension
 * headers are walked (a destination-options header once let 600 of 600
 * packets pass); a chain longer than the walk, a truncated one, ESP or a
 * later fragment is charged against every port range of the covering
 * limits, never passed. */
static void test_egress_headers_charged(void **state)
{
	struct fx *f = egress_open(state);
	static const struct lim l[] = {
		{ 0, KT_UNIT_PACKET, KT_PROTO_UDP, 5000, 5000, "2001:db8::/32", 0, 1000 },
	};
	struct pkt udp = mkpkt("2001:db8::1", IPPROTO_UDP, 5000, 64);
	struct pkt other = mkpkt("2001:db8::1", IPPROTO_UDP, 6000, 64);
	static const uint8_t dst[] = { 60 }, chain[] = { 0, 43, 60, 51 }, frag[] = { 44 };
	uint8_t longchain[9];
	struct pkt p;
	__u64 n = 0;

	memset(longchain, 60, sizeof(longchain));
	program(f, l, 1, self_cgroup_id(), NULL);
#define CHARGED(pk, what)                                                                          \
	do {                                                                                       \
		assert_int_equal(run(f, pk), SKB_PASS);                                            \
		if (counters(f, 0).admitted != ++n) {                                              \
			print_error("%s: not charged\n", what);                                   \
			fail();                                                                    \
		}                                                                                  \
	} while (0)
	CHARGED(&udp, "plain");
	p = with_ext(&udp, dst, 1, 0);
	CHARGED(&p, "destination options");
	p = with_ext(&udp, chain, 4, 0);
	CHARGED(&p, "hop-by-hop, routing, destination options, AH");
	p = with_ext(&udp, frag, 1, 0);
	CHARGED(&p, "first fragment");
	p = with_ext(&other, frag, 1, 0);
	assert_int_equal(run(f, &p), SKB_PASS); /* first fragment: its port is read */
	assert_int_equal(counters(f, 0).admitted, n);
	p = with_ext(&other, frag, 1, 100 << 3);
	CHARGED(&p, "later fragment (no port)");
	p = with_ext(&other, longchain, 9, 0);
	CHARGED(&p, "chain longer than the walk");
	p = with_ext(&other, dst, 1, 0);
	p.data[sizeof(struct ether_header) + 40 + 1] = 200; /* header length past the end */
	CHARGED(&p, "truncated chain");
	p = other;
	p.data[IP6_NXT_OFF] = 50;
	CHARGED(&p, "ESP");
	/* what is not TCP or UDP still passes uncounted */
	p = with_ext(&other, dst, 1, 0);
	p.data[sizeof(struct ether_header) + 40] = 58; /* ICMPv6 */
	assert_int_equal(run(f, &p), SKB_PASS);
	assert_int_equal(counters(f, 0).admitted, n);
#undef CHARGED
}

/* GSO: one send that becomes many packets is charged per packet on the
 * wire (UDP_SEGMENT once turned one admitted send into 128 datagrams). */
static void test_egress_gso_per_segment(void **state)
{
	struct fx *f = egress_open(state);
	static const struct lim l[] = {
		{ 0, KT_UNIT_PACKET, KT_PROTO_UDP, 5000, 5000, "10.0.0.0/8", 0, 20 },
	};
	struct pkt udp = mkpkt("10.0.0.1", IPPROTO_UDP, 5000, 1400);

	program(f, l, 1, self_cgroup_id(), NULL);
	assert_int_equal(run_gso(f, &udp, 16), SKB_PASS);
	assert_int_equal(counters(f, 0).admitted, 16);
	/* 4 tokens left: a 16-segment send does not fit */
	assert_int_equal(run_gso(f, &udp, 16), SKB_DROP);
	assert_int_equal(counters(f, 0).throttled, 16);
	assert_int_equal(run_gso(f, &udp, 4), SKB_PASS);
	assert_int_equal(run(f, &udp), SKB_DROP);
}

/* ---- egress under BPF_PROG_TEST_RUN (the caller's cgroup, see self_cgroup_id) ---- */

/* Burst N admits N, then UDP is dropped and TCP dropped with congestion
 * notification; counters match. */
static void test_egress_burst_v4(void **state)
{
	struct fx *f = egress_open(state);
	static const struct lim l[] = {
		{ 0, KT_UNIT_PACKET, KT_PROTO_TCP | KT_PROTO_UDP, 5000, 5000, "10.0.0.0/8", 3, 5 },
	};
	struct pkt udp = mkpkt("10.1.2.3", IPPROTO_UDP, 5000, 100);
	struct pkt tcp = mkpkt("10.1.2.3", IPPROTO_TCP, 5000, 60);
	struct kt_counters c;

	program(f, l, 1, self_cgroup_id(), NULL);
	for (int i = 0; i < 5; i++)
		assert_int_equal(run(f, &udp), SKB_PASS);
	assert_int_equal(run(f, &udp), SKB_DROP);
	assert_int_equal(run(f, &udp), SKB_DROP);
	assert_int_equal(run(f, &tcp), SKB_DROP_CN);
	c = counters(f, 3);
	assert_int_equal(c.admitted, 5);
	assert_int_equal(c.throttled, 3);
	/* packet unit still records bytes: skb->len from the IP header on */
	assert_int_equal(c.admitted_bytes, 5 * 100);
	assert_int_equal(c.throttled_bytes, 2 * 100 + 60);
	/* the bucket in the mmap is the one the program charged */
	assert_true(f->b.buckets[3].tat > ktest_now_ns());

	/* a fractional rate (3/s, 333333333.3 ns per token): the burst, then
	 * nothing for the next 333 ms */
	f->b.buckets[3].tat = 0;
	f->b.buckets[3].burst = 4;
	__atomic_store_n(&f->b.buckets[3].interval_fp, kt_interval_fp_from_rate(3),
			 __ATOMIC_RELEASE);
	for (int i = 0; i < 4; i++)
		assert_int_equal(run(f, &udp), SKB_PASS);
	assert_int_equal(run(f, &udp), SKB_DROP);

	/* refill: at 20/s one token is back within 50 ms */
	__atomic_store_n(&f->b.buckets[3].interval_fp, kt_interval_fp_from_rate(20),
			 __ATOMIC_RELEASE);
	f->b.buckets[3].tat = 0;
	f->b.buckets[3].burst = 1;
	assert_int_equal(run(f, &tcp), SKB_PASS);
	assert_int_equal(run(f, &tcp), SKB_DROP_CN);
	ktest_sleep_ms(60);
	assert_int_equal(run(f, &tcp), SKB_PASS);
}

static void test_egress_burst_v6(void **state)
{
	struct fx *f = egress_open(state);
	static const struct lim l[] = {
		{ 4, KT_UNIT_PACKET, KT_PROTO_TCP | KT_PROTO_UDP, 443, 443, "2001:db8::/32", 7, 3 },
	};
	struct pkt tcp = mkpkt("2001:db8::42", IPPROTO_TCP, 443, 80);
	struct pkt udp = mkpkt("2001:db8:1::1", IPPROTO_UDP, 443, 120);
	struct kt_counters c;

	program(f, l, 1, self_cgroup_id(), NULL);
	for (int i = 0; i < 3; i++)
		assert_int_equal(run(f, &tcp), SKB_PASS);
	assert_int_equal(run(f, &tcp), SKB_DROP_CN);
	assert_int_equal(run(f, &udp), SKB_DROP);
	c = counters(f, 7);
	assert_int_equal(c.admitted, 3);
	assert_int_equal(c.throttled, 2);
	assert_int_equal(c.admitted_bytes, 3 * 80);
	assert_int_equal(c.throttled_bytes, 80 + 120);
	/* an IPv4 packet to the "same" bits is another destination */
	struct pkt v4 = mkpkt("32.1.13.184", IPPROTO_TCP, 443, 60);
	assert_int_equal(run(f, &v4), SKB_PASS);
	assert_int_equal(counters(f, 7).throttled, 2);
}

/* Limits on different ports and prefixes have separate buckets; a narrower
 * prefix on port 80 does not hide the broader limit on port 443. The kernel
 * agrees with kt_classifier_lookup on every probe. */
static void test_egress_isolation(void **state)
{
	struct fx *f = egress_open(state);
	static const struct lim l[] = {
		{ 0, KT_UNIT_PACKET, KT_PROTO_TCP, 80, 80, "10.0.0.0/8", 0, 3 },
		{ 1, KT_UNIT_PACKET, KT_PROTO_TCP, 443, 443, "10.0.0.0/8", 1, 3 },
		{ 2, KT_UNIT_PACKET, KT_PROTO_TCP, 80, 80, "10.1.0.0/16", 2, 3 },
		{ 3, KT_UNIT_PACKET, KT_PROTO_UDP, 80, 80, "fd00::/8", 3, 3 },
	};
	static const struct {
		const char *dst;
		uint8_t proto;
		uint16_t port;
		int limit; /* what classifies it; -1: nothing */
	} pr[] = {
		{ "10.2.0.1", IPPROTO_TCP, 80, 0 },   /* A: /8 port 80 */
		{ "10.1.0.1", IPPROTO_TCP, 80, 2 },   /* B: /16 port 80 */
		{ "10.2.0.1", IPPROTO_TCP, 443, 1 },  /* C: /8 port 443 */
		{ "10.1.0.1", IPPROTO_TCP, 443, 1 },  /* C': 443 under the /16 */
		{ "fd12::1", IPPROTO_UDP, 80, 3 },    /* D */
		{ "fd12::1", IPPROTO_TCP, 80, -1 },   /* protocol */
		{ "11.0.0.1", IPPROTO_TCP, 80, -1 },  /* address */
		{ "10.1.0.1", IPPROTO_UDP, 80, -1 },  /* protocol */
	};
	enum { A, B, C, C2, D, U1, U2, U3 };
	static const struct {
		int probe;
		__u32 verdict;
	} step[] = {
		{ A, SKB_PASS },    { A, SKB_PASS },    { A, SKB_PASS },    { A, SKB_DROP_CN },
		{ B, SKB_PASS },    { B, SKB_PASS },    { B, SKB_PASS },    { B, SKB_DROP_CN },
		{ A, SKB_DROP_CN }, { C, SKB_PASS },    { C2, SKB_PASS },   { C, SKB_PASS },
		{ C2, SKB_DROP_CN }, { C, SKB_DROP_CN }, { B, SKB_DROP_CN }, { D, SKB_PASS },
		{ D, SKB_PASS },    { D, SKB_PASS },    { D, SKB_DROP },    { U1, SKB_PASS },
		{ U2, SKB_PASS },   { U3, SKB_PASS },
	};
	static const __u64 adm[4] = { 3, 3, 3, 3 }, thr[4] = { 2, 2, 2, 1 };
	struct kt_classifier cls;

	program(f, l, 4, self_cgroup_id(), &cls);
	for (size_t i = 0; i < sizeof(pr) / sizeof(pr[0]); i++) {
		uint8_t a[16] = { 0 };
		if (strchr(pr[i].dst, ':')) {
			inet_pton(AF_INET6, pr[i].dst, a);
		} else {
			a[10] = a[11] = 0xff;
			inet_pton(AF_INET, pr[i].dst, a + 12);
		}
		assert_int_equal(kt_classifier_lookup(&cls, a, KT_HOOK_EGRESS,
						      pr[i].proto == IPPROTO_TCP ? KT_PROTO_TCP
										 : KT_PROTO_UDP,
						      pr[i].port),
				 pr[i].limit);
	}
	kt_classifier_free(&cls);

	for (size_t i = 0; i < sizeof(step) / sizeof(step[0]); i++) {
		int k = step[i].probe;
		struct pkt p = mkpkt(pr[k].dst, pr[k].proto, pr[k].port, 64);
		__u32 got = run(f, &p);
		if (got != step[i].verdict) {
			print_error("step %zu: %s %s:%u: verdict %u, want %u\n", i,
				    pr[k].proto == IPPROTO_TCP ? "tcp" : "udp", pr[k].dst, pr[k].port,
				    got, step[i].verdict);
			fail();
		}
	}
	for (uint32_t s = 0; s < 4; s++) {
		struct kt_counters c = counters(f, s);
		assert_int_equal(c.admitted, adm[s]);
		assert_int_equal(c.throttled, thr[s]);
	}
}

/* Traffic no limit covers passes and costs no counter. */
static void test_egress_unmatched(void **state)
{
	struct fx *f = egress_open(state);
	static const struct lim l[] = {
		{ 0, KT_UNIT_PACKET, KT_PROTO_UDP, 5000, 5000, "10.0.0.0/8", 0, 1 },
	};
	struct pkt hit = mkpkt("10.0.0.1", IPPROTO_UDP, 5000, 64);
	struct pkt miss[] = {
		mkpkt("10.0.0.1", IPPROTO_UDP, 5001, 64),      /* port */
		mkpkt("10.0.0.1", IPPROTO_UDP, 4999, 64),      /* port */
		mkpkt("11.0.0.1", IPPROTO_UDP, 5000, 64),      /* address */
		mkpkt("10.0.0.1", IPPROTO_TCP, 5000, 64),      /* protocol */
		mkpkt("10.0.0.1", IPPROTO_ICMP, 0, 64),        /* not TCP/UDP */
		mkpkt("2001:db8::1", IPPROTO_UDP, 5000, 64),   /* family */
		mkpkt("::ffff:10.0.0.1", IPPROTO_UDP, 5001, 64), /* v4-mapped v6, port */
	};
	struct kt_counters before, after;

	program(f, l, 1, self_cgroup_id(), NULL);
	assert_int_equal(run(f, &hit), SKB_PASS);
	assert_int_equal(run(f, &hit), SKB_DROP); /* drained: anything matched is refused */
	before = all_counters(f);
	assert_int_equal(before.admitted, 1);
	assert_int_equal(before.throttled, 1);
	for (size_t i = 0; i < sizeof(miss) / sizeof(miss[0]); i++) {
		if (run(f, &miss[i]) != SKB_PASS) {
			print_error("unmatched packet %zu refused\n", i);
			fail();
		}
	}
	/* not IP at all */
	struct pkt arp = hit;
	uint16_t v = htons(ETHERTYPE_ARP);
	memcpy(arp.data + ETHERTYPE_OFF, &v, 2);
	assert_int_equal(run(f, &arp), SKB_PASS);
	after = all_counters(f);
	assert_memory_equal(&before, &after, sizeof(before));

	/* a later IPv4 fragment carries no ports: charged against every port
	 * range of the limits covering it (here: refused, the bucket is empty) */
	struct pkt frag = hit;
	v = htons(100); /* fragment offset 800 bytes */
	memcpy(frag.data + IP4_FRAG_OFF, &v, 2);
	assert_int_equal(run(f, &frag), SKB_DROP);
	assert_int_equal(all_counters(f).throttled, 2);
	frag.data[IP4_PROTO_OFF] = IPPROTO_TCP; /* ...of its own protocol only */
	assert_int_equal(run(f, &frag), SKB_PASS);
	/* cut after the IP header: no ports to read, so charged as well (test
	 * runs refuse packets shorter than an IP header) */
	struct pkt trunc = hit;
	trunc.len = sizeof(struct ether_header) + sizeof(struct iphdr) + 2;
	assert_int_equal(run(f, &trunc), SKB_DROP);
	assert_int_equal(all_counters(f).throttled, 3);
}

/* Byte unit: the cost is skb->len (from the IP header on). */
static void test_egress_bytes(void **state)
{
	struct fx *f = egress_open(state);
	static const struct lim l[] = {
		/* 1 B/s: under a byte refills while the test runs */
		{ 0, KT_UNIT_BYTE, KT_PROTO_TCP | KT_PROTO_UDP, 9000, 9000, "192.0.2.0/24", 5, 3000, 1 },
	};
	struct pkt p1000 = mkpkt("192.0.2.7", IPPROTO_UDP, 9000, 1000);
	struct pkt p400 = mkpkt("192.0.2.7", IPPROTO_UDP, 9000, 400);
	struct pkt p100 = mkpkt("192.0.2.7", IPPROTO_TCP, 9000, 100);
	struct kt_counters c;

	program(f, l, 1, self_cgroup_id(), NULL);
	assert_int_equal(run(f, &p1000), SKB_PASS);
	assert_int_equal(run(f, &p1000), SKB_PASS);
	assert_int_equal(run(f, &p400), SKB_PASS);
	/* 600 bytes left: 1000 does not fit, 400 does, then not even 100 */
	assert_int_equal(run(f, &p1000), SKB_DROP);
	assert_int_equal(run(f, &p400), SKB_PASS);
	assert_int_equal(run(f, &p400), SKB_DROP);
	assert_int_equal(run(f, &p100), SKB_PASS);
	assert_int_equal(run(f, &p100), SKB_PASS);
	assert_int_equal(run(f, &p100), SKB_DROP_CN);
	c = counters(f, 5);
	assert_int_equal(c.admitted, 6);
	assert_int_equal(c.throttled, 3);
	assert_int_equal(c.admitted_bytes, 3000);
	assert_int_equal(c.throttled_bytes, 1000 + 400 + 100);

	/* a packet larger than the whole burst passes only on a full bucket */
	f->b.buckets[5].burst = 1500;
	struct pkt big = mkpkt("192.0.2.7", IPPROTO_UDP, 9000, 1900);
	assert_int_equal(run(f, &big), SKB_DROP);
	f->b.buckets[5].tat = 0;
	assert_int_equal(run(f, &big), SKB_PASS);
	assert_int_equal(run(f, &p100), SKB_DROP_CN);
	assert_int_equal(run(f, &big), SKB_DROP);

	/* a slow byte rate: 1000 bytes at 0.001 B/s is 1e15 ns, past the 2^64
	 * of Q48.16 ns; it must not wrap into "free" (burst 1: at most the
	 * first passes, as an oversize request from a full bucket) */
	f->b.buckets[5].tat = 0;
	f->b.buckets[5].burst = 1;
	__atomic_store_n(&f->b.buckets[5].interval_fp, kt_interval_fp_from_rate(0.001),
			 __ATOMIC_RELEASE);
	int passed = 0;
	for (int i = 0; i < 10; i++)
		passed += run(f, &p1000) == SKB_PASS;
	assert_true(passed <= 1);
}

/* A cgroup that is no member of the limit passes untouched. */
static void test_egress_non_member(void **state)
{
	struct fx *f = egress_open(state);
	static const struct lim l[] = {
		{ 0, KT_UNIT_PACKET, KT_PROTO_UDP, 53, 53, "0.0.0.0/0", 0, 1 },
	};
	struct pkt p = mkpkt("8.8.8.8", IPPROTO_UDP, 53, 64);
	struct kt_member_key k = { .cgroup_id = self_cgroup_id() };

	program(f, l, 1, 12345, NULL); /* member: some other cgroup */
	for (int i = 0; i < 5; i++)
		assert_int_equal(run(f, &p), SKB_PASS);
	struct kt_counters c = all_counters(f);
	assert_int_equal(c.admitted + c.throttled, 0);

	/* becoming a member makes it count, once the generation says the
	 * cached answers are stale (as the daemon bumps it after each apply) */
	struct kt_member_val v = { .count = 1, .ents[0] = { .limit_id = 0, .slot = 0 } };
	assert_int_equal(bpf_map_update_elem(f->b.members_fd, &k, &v, BPF_ANY), 0);
	kt_bpf_bump_gen(&f->b);
	assert_int_equal(run(f, &p), SKB_PASS);
	assert_int_equal(run(f, &p), SKB_DROP);
	c = counters(f, 0);
	assert_int_equal(c.admitted, 1);
	assert_int_equal(c.throttled, 1);
	/* and leaving again stops it */
	assert_int_equal(bpf_map_delete_elem(f->b.members_fd, &k), 0);
	kt_bpf_bump_gen(&f->b);
	assert_int_equal(run(f, &p), SKB_PASS);
	assert_int_equal(counters(f, 0).throttled, 1);
}

/* A closed bucket (rate 0) refuses everything it matches. */
static void test_egress_closed(void **state)
{
	struct fx *f = egress_open(state);
	static const struct lim l[] = {
		{ 0, KT_UNIT_PACKET, KT_PROTO_UDP, 53, 53, "0.0.0.0/0", 2, 100 },
	};
	struct pkt p = mkpkt("8.8.8.8", IPPROTO_UDP, 53, 64);

	program(f, l, 1, self_cgroup_id(), NULL);
	__atomic_store_n(&f->b.buckets[2].interval_fp, 0, __ATOMIC_RELEASE);
	for (int i = 0; i < 3; i++)
		assert_int_equal(run(f, &p), SKB_DROP);
	assert_int_equal(counters(f, 2).throttled, 3);
	assert_int_equal(f->b.buckets[2].tat, 0);
}

/* Test runs from a process inside cgroup `cg`: the dummy socket of each run
 * belongs to that cgroup. Verdicts of `n` runs of `p` into out. */
static void run_in_cgroup(struct fx *f, const char *cg, const struct pkt *p, int n, __u32 *out)
{
	int fd = bpf_program__fd(f->b.egress->progs.kt_egress), pp[2], status;
	pid_t pid;

	assert_int_equal(pipe2(pp, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(pp[0]);
		if (ktest_cgroup_join(cg) != 0)
			_exit(1);
		for (int i = 0; i < n; i++) {
			LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = p->data,
				    .data_size_in = (__u32)p->len, .repeat = 1);
			if (bpf_prog_test_run_opts(fd, &o) != 0 ||
			    write(pp[1], &o.retval, sizeof(o.retval)) != sizeof(o.retval))
				_exit(2);
		}
		_exit(0);
	}
	close(pp[1]);
	kt_procfx_kid(&f->pf, pid);
	kt_procfx_fd(&f->pf, pp[0]);
	for (int i = 0; i < n; i++) {
		struct pollfd pf = { .fd = pp[0], .events = POLLIN };
		assert_int_equal(poll(&pf, 1, 10000), 1);
		assert_int_equal(read(pp[0], &out[i], sizeof(out[i])), sizeof(out[i]));
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	kt_procfx_reaped(&f->pf, pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static const char *add_child_cgroup(struct fx *f, const char *parent, const char *name)
{
	struct kt_procfx *p = &f->pf;

	assert_true(p->ncg < KT_PROCFX_CGS);
	snprintf(p->cg[p->ncg], PATH_MAX, "%s/%s", parent, name);
	assert_int_equal(mkdir(p->cg[p->ncg], 0755), 0);
	return p->cg[p->ncg++];
}

/* egress walks the socket's cgroup ancestors (bpf_skb_ancestor_cgroup_id):
 * traffic of a nested cgroup counts against the attached parent. */
static void test_egress_nested_cgroup(void **state)
{
	struct fx *f = egress_open(state);
	const char *parent = kt_procfx_cgroup(&f->pf, "egress-nest");
	const char *inner = add_child_cgroup(f, parent, "inner");
	const char *deeper = add_child_cgroup(f, inner, "deeper");
	static const struct lim l[] = {
		{ 0, KT_UNIT_PACKET, KT_PROTO_UDP, 53, 53, "0.0.0.0/0", 6, 3 },
	};
	struct pkt p = mkpkt("192.0.2.1", IPPROTO_UDP, 53, 64);
	__u32 r[4];

	program(f, l, 1, ktest_cgroup_id(parent), NULL);
	run_in_cgroup(f, deeper, &p, 2, r);
	assert_int_equal(r[0], SKB_PASS);
	assert_int_equal(r[1], SKB_PASS);
	run_in_cgroup(f, inner, &p, 2, r);
	assert_int_equal(r[0], SKB_PASS);
	assert_int_equal(r[1], SKB_DROP);
	run_in_cgroup(f, parent, &p, 1, r);
	assert_int_equal(r[0], SKB_DROP);
	/* this process is no member (nor below one): untouched */
	assert_int_equal(run(f, &p), SKB_PASS);
	struct kt_counters c = counters(f, 6);
	assert_int_equal(c.admitted, 3);
	assert_int_equal(c.throttled, 2);
}

/* ---- sock_addr programs: real sockets in a test cgroup ---- */

/* A loopback listener (TCP) or receiver (UDP) on a free port. */
static int serve(struct fx *f, int family, int type, uint16_t *port)
{
	struct sockaddr_storage ss = { 0 };
	socklen_t sl;
	int fd = socket(family, type | SOCK_CLOEXEC, 0);

	kt_procfx_fd(&f->pf, fd);
	if (family == AF_INET) {
		struct sockaddr_in *a = (void *)&ss;
		a->sin_family = AF_INET;
		a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		sl = sizeof(*a);
	} else {
		struct sockaddr_in6 *a = (void *)&ss;
		a->sin6_family = AF_INET6;
		a->sin6_addr = in6addr_loopback;
		sl = sizeof(*a);
	}
	assert_int_equal(bind(fd, (struct sockaddr *)&ss, sl), 0);
	if (type == SOCK_STREAM)
		assert_int_equal(listen(fd, 128), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&ss, &sl), 0);
	*port = ntohs(family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
					: ((struct sockaddr_in6 *)&ss)->sin6_port);
	return fd;
}

enum op_kind { OP_CONNECT, OP_SENDTO, OP_SEND_CONNECTED };

struct op {
	enum op_kind kind;
	int family;
	uint16_t port;
	int times;
};

struct res {
	int err;    /* 0 or errno */
	int64_t ns; /* how long the call took */
};

static struct res do_op(const struct op *o)
{
	struct sockaddr_storage ss = { 0 };
	socklen_t sl;
	struct res r = { 0 };
	int type = o->kind == OP_CONNECT ? SOCK_STREAM : SOCK_DGRAM;
	int fd = socket(o->family, type | SOCK_CLOEXEC, 0);
	uint64_t t0;
	long n = 0;

	if (fd < 0) {
		r.err = errno ? errno : EIO;
		return r;
	}
	if (o->family == AF_INET) {
		struct sockaddr_in *a = (void *)&ss;
		a->sin_family = AF_INET;
		a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		a->sin_port = htons(o->port);
		sl = sizeof(*a);
	} else {
		struct sockaddr_in6 *a = (void *)&ss;
		a->sin6_family = AF_INET6;
		a->sin6_addr = in6addr_loopback;
		a->sin6_port = htons(o->port);
		sl = sizeof(*a);
	}
	t0 = ktest_now_ns();
	switch (o->kind) {
	case OP_CONNECT:
		n = connect(fd, (struct sockaddr *)&ss, sl);
		break;
	case OP_SENDTO:
		n = sendto(fd, "x", 1, 0, (struct sockaddr *)&ss, sl);
		break;
	case OP_SEND_CONNECTED:
		n = connect(fd, (struct sockaddr *)&ss, sl);
		if (n == 0)
			n = send(fd, "x", 1, 0);
		break;
	}
	r.err = n < 0 ? errno : 0;
	r.ns = (int64_t)(ktest_now_ns() - t0);
	close(fd);
	return r;
}

/* Forks a process that joins cgroup `cg` (NULL: stays where the test runs),
 * performs the ops and reports each call's outcome. */
static void run_ops(struct fx *f, const char *cg, const struct op *ops, int nops,
		    struct res *out, int nout)
{
	int p[2], total = 0, got = 0, status;
	pid_t pid;

	for (int i = 0; i < nops; i++)
		total += ops[i].times;
	assert_int_equal(total, nout);
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct res fail_r = { .err = -1 };
		close(p[0]);
		if (cg && ktest_cgroup_join(cg) != 0) {
			if (write(p[1], &fail_r, sizeof(fail_r)) < 0)
				_exit(2);
			_exit(1);
		}
		for (int i = 0; i < nops; i++)
			for (int k = 0; k < ops[i].times; k++) {
				struct res r = do_op(&ops[i]);
				if (write(p[1], &r, sizeof(r)) != sizeof(r))
					_exit(2);
			}
		_exit(0);
	}
	close(p[1]);
	kt_procfx_kid(&f->pf, pid);
	kt_procfx_fd(&f->pf, p[0]);
	while (got < nout) {
		struct pollfd pf = { .fd = p[0], .events = POLLIN };
		ssize_t n;

		if (poll(&pf, 1, 10000) != 1) {
			print_error("child %d: no result after 10 s\n", pid);
			fail();
		}
		n = read(p[0], &out[got], sizeof(out[got]));
		if (n != sizeof(out[got])) {
			print_error("child %d: result %d missing\n", pid, got);
			fail();
		}
		if (out[got].err == -1) {
			print_error("child %d: cannot join cgroup %s\n", pid, cg);
			fail();
		}
		got++;
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	kt_procfx_reaped(&f->pf, pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* `n` ok then `m` refused with EBUSY, each refusal immediate. */
static void expect(const struct res *r, int n_ok, int n_busy, const char *what)
{
	for (int i = 0; i < n_ok + n_busy; i++) {
		int want = i < n_ok ? 0 : KT_REFUSE_ERRNO;
		if (r[i].err != want) {
			print_error("%s: call %d: %s, want %s\n", what, i,
				    r[i].err ? strerror(r[i].err) : "ok",
				    want ? strerror(want) : "ok");
			fail();
		}
		if (want && r[i].ns > 50 * 1000000LL) {
			print_error("%s: call %d refused after %lld ms, not at once\n", what, i,
				    (long long)(r[i].ns / 1000000));
			fail();
		}
	}
}

/* A limit over loopback destinations on one port, with its cgroups. */
struct plim {
	const char *name;
	enum kt_unit unit;
	enum kt_scope scope;
	uint8_t proto;
	uint16_t port;
	const char *cidr;
	double burst;
	const char *cgs[3];
	int refuse_errno; /* errno: of the limit; 0: the default */
};

/* Replaces the fixture's plan with `pl` and applies it; kt_plan_apply's
 * return, its message in err. */
static int try_apply(struct fx *f, const struct plim *pl, int n, char *err, size_t errlen)
{
	struct kt_bucket_policy pol[16] = { 0 };

	assert_true(n <= 16);
	kt_plan_free(&f->plan);
	free(f->cfgs);
	f->cfgs = calloc((size_t)n, sizeof(*f->cfgs));
	f->plan.limits = calloc((size_t)n, sizeof(*f->plan.limits));
	assert_non_null(f->cfgs);
	assert_non_null(f->plan.limits);
	f->plan.n_limits = n;
	for (int i = 0; i < n; i++) {
		struct kt_limit_cfg *c = &f->cfgs[i];
		struct kt_limit_rt *l = &f->plan.limits[i];

		snprintf(c->name, sizeof(c->name), "%s", pl[i].name);
		c->unit = pl[i].unit;
		c->scope = pl[i].scope;
		c->burst = pl[i].burst;
		c->match.cidrs[0] = cidr(pl[i].cidr);
		c->match.n_cidrs = 1;
		c->match.port_lo = c->match.port_hi = pl[i].port;
		c->match.proto_mask = pl[i].proto;
		c->rl.max = c->rl.min = SLOW_RATE;
		c->refuse_errno = pl[i].refuse_errno;
		l->cfg = c;
		l->members = calloc(3, sizeof(*l->members));
		assert_non_null(l->members);
		for (int j = 0; j < 3 && pl[i].cgs[j]; j++) {
			l->members[j].path = strdup(pl[i].cgs[j]);
			assert_non_null(l->members[j].path);
			l->members[j].cgid = ktest_cgroup_id(pl[i].cgs[j]);
			assert_true(l->members[j].cgid != 0);
			l->n_members++;
		}
		pol[i].rate = SLOW_RATE;
		pol[i].burst = pl[i].burst;
	}
	return kt_plan_apply(&f->b, &f->plan, pol, err, errlen);
}

static void apply(struct fx *f, const struct plim *pl, int n)
{
	char err[512];

	if (try_apply(f, pl, n, err, sizeof(err)) != 0) {
		print_error("kt_plan_apply: %s\n", err);
		fail();
	}
}

static struct kt_counters member_counters(struct fx *f, int limit, int member)
{
	return counters(f, f->plan.limits[limit].members[member].slot);
}

/* connect4/connect6: exactly the burst connects, then EBUSY at once; an
 * unmatched port and a process outside the cgroup are untouched. */
static void test_connect(void **state)
{
	struct fx *f = fx_open(state);
	const char *cg = kt_procfx_cgroup(&f->pf, "conn");
	uint16_t p4, p6, other;

	serve(f, AF_INET, SOCK_STREAM, &p4);
	serve(f, AF_INET6, SOCK_STREAM, &p6);
	serve(f, AF_INET, SOCK_STREAM, &other);
	const struct plim pl[] = {
		{ "c4", KT_UNIT_CONNECTION, KT_SCOPE_POD, KT_PROTO_TCP, p4, "127.0.0.1/32", 3, { cg } },
		{ "c6", KT_UNIT_CONNECTION, KT_SCOPE_POD, KT_PROTO_TCP, p6, "::1/128", 2, { cg } },
	};
	apply(f, pl, 2);

	const struct op ops[] = {
		{ OP_CONNECT, AF_INET, p4, 5 },
		{ OP_CONNECT, AF_INET6, p6, 4 },
		{ OP_CONNECT, AF_INET, other, 6 },
		{ OP_CONNECT, AF_INET6, p4, 2 }, /* ::1 on p4: c4 is 127.0.0.1 only */
	};
	struct res r[17];
	run_ops(f, cg, ops, 4, r, 17);
	expect(r, 3, 2, "connect 127.0.0.1");
	expect(r + 5, 2, 2, "connect ::1");
	for (int i = 9; i < 17; i++)
		assert_true(r[i].err == 0 || r[i].err == ECONNREFUSED);
	for (int i = 9; i < 15; i++)
		assert_int_equal(r[i].err, 0); /* unmatched port */

	struct kt_counters c = member_counters(f, 0, 0);
	assert_int_equal(c.admitted, 3);
	assert_int_equal(c.throttled, 2);
	c = member_counters(f, 1, 0);
	assert_int_equal(c.admitted, 2);
	assert_int_equal(c.throttled, 2);

	/* outside the cgroup: no limit at all */
	const struct op out_ops[] = { { OP_CONNECT, AF_INET, p4, 5 }, { OP_CONNECT, AF_INET6, p6, 5 } };
	run_ops(f, NULL, out_ops, 2, r, 10);
	expect(r, 10, 0, "connect from outside");
	assert_int_equal(member_counters(f, 0, 0).admitted + member_counters(f, 0, 0).throttled, 5);

	/* the bucket stays drained for a new process in the cgroup */
	const struct op again[] = { { OP_CONNECT, AF_INET, p4, 1 } };
	run_ops(f, cg, again, 1, r, 1);
	expect(r, 0, 1, "connect again");
}

/* sendmsg4/sendmsg6: unconnected UDP sendto() refused with EBUSY after the
 * burst; connected UDP, which these hooks never see, is charged to the same
 * limit on egress, where a refusal drops the datagram (EPERM). */
static void test_sendmsg(void **state)
{
	struct fx *f = fx_open(state);
	const char *cg = kt_procfx_cgroup(&f->pf, "send");
	uint16_t u4, u6, other;

	serve(f, AF_INET, SOCK_DGRAM, &u4);
	serve(f, AF_INET6, SOCK_DGRAM, &u6);
	serve(f, AF_INET, SOCK_DGRAM, &other);
	const struct plim pl[] = {
		{ "d4", KT_UNIT_DATAGRAM, KT_SCOPE_POD, KT_PROTO_UDP, u4, "127.0.0.0/8", 4, { cg } },
		{ "d6", KT_UNIT_DATAGRAM, KT_SCOPE_POD, KT_PROTO_UDP, u6, "::1/128", 2, { cg } },
	};
	apply(f, pl, 2);

	const struct op ops[] = {
		{ OP_SENDTO, AF_INET, u4, 6 },
		{ OP_SENDTO, AF_INET6, u6, 3 },
		{ OP_SENDTO, AF_INET, other, 5 },
		{ OP_SEND_CONNECTED, AF_INET, u4, 3 },
	};
	struct res r[17];
	run_ops(f, cg, ops, 4, r, 17);
	expect(r, 4, 2, "sendto 127.0.0.1");
	expect(r + 6, 2, 1, "sendto ::1");
	expect(r + 9, 5, 0, "sendto unmatched port");
	/* the burst is spent: no way around the limit by connecting */
	for (int i = 14; i < 17; i++)
		if (r[i].err != EPERM) {
			print_error("send on a connected UDP socket: call %d: %s, want EPERM\n", i - 14,
				    r[i].err ? strerror(r[i].err) : "ok");
			fail();
		}

	struct kt_counters c = member_counters(f, 0, 0);
	assert_int_equal(c.admitted, 4);
	assert_int_equal(c.throttled, 2 + 3);
	c = member_counters(f, 1, 0);
	assert_int_equal(c.admitted, 2);
	assert_int_equal(c.throttled, 1);

	const struct op out_ops[] = { { OP_SENDTO, AF_INET, u4, 6 }, { OP_SENDTO, AF_INET6, u6, 3 } };
	run_ops(f, NULL, out_ops, 2, r, 9);
	expect(r, 9, 0, "sendto from outside");
	assert_int_equal(member_counters(f, 0, 0).throttled, 2 + 3);
}

/* A process in `cg` that keeps its sockets across plan changes: one
 * unconnected UDP socket and one connected to 127.0.0.1:`conn_port`. Each
 * command (a port: sendto() it on the unconnected socket; 0: send() on the
 * connected one) is answered with the call's errno (0: sent). */
struct held {
	pid_t pid;
	int cmd, res;
};

static void held_start(struct fx *f, const char *cg, uint16_t conn_port, struct held *h)
{
	int c[2], r[2];

	assert_int_equal(pipe2(c, O_CLOEXEC), 0);
	assert_int_equal(pipe2(r, O_CLOEXEC), 0);
	h->pid = fork();
	assert_true(h->pid >= 0);
	if (h->pid == 0) {
		struct sockaddr_in a = { .sin_family = AF_INET,
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		int u, k, err;
		uint16_t port;

		if (ktest_cgroup_join(cg) != 0)
			_exit(1);
		u = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		k = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		a.sin_port = htons(conn_port);
		if (u < 0 || k < 0 || connect(k, (struct sockaddr *)&a, sizeof(a)) < 0)
			_exit(1);
		while (read(c[0], &port, sizeof(port)) == sizeof(port)) {
			a.sin_port = htons(port);
			err = (port ? sendto(u, "x", 1, 0, (struct sockaddr *)&a, sizeof(a))
				    : send(k, "x", 1, 0)) < 0 ? errno : 0;
			if (write(r[1], &err, sizeof(err)) != sizeof(err))
				_exit(2);
		}
		_exit(0);
	}
	close(c[0]);
	close(r[1]);
	h->cmd = kt_procfx_fd(&f->pf, c[1]);
	h->res = kt_procfx_fd(&f->pf, r[0]);
	kt_procfx_kid(&f->pf, h->pid);
}

/* Sends `n` times (port as for struct held); the errnos in order, as a
 * string: '0' sent, 'B' EBUSY, 'P' EPERM, '?' anything else. */
static const char *held_send(struct held *h, uint16_t port, int n)
{
	static char out[32];
	int err;

	assert_true(n < (int)sizeof(out));
	for (int i = 0; i < n; i++) {
		struct pollfd pf = { .fd = h->res, .events = POLLIN };

		assert_int_equal(write(h->cmd, &port, sizeof(port)), sizeof(port));
		assert_int_equal(poll(&pf, 1, 10000), 1);
		assert_int_equal(read(h->res, &err, sizeof(err)), sizeof(err));
		out[i] = !err ? '0' : err == EBUSY ? 'B' : err == EPERM ? 'P' : '?';
	}
	out[n] = 0;
	return out;
}

/* The programs remember a socket's last decision (kt_sk_sa, kt_sk_eg):
 * every plan change must reach sockets that already sent, and a socket
 * that alternates between destinations must be decided per destination. */
static void test_socket_decisions_follow_changes(void **state)
{
	struct fx *f = fx_open(state);
	const char *cg = kt_procfx_cgroup(&f->pf, "sockcache");
	uint16_t lim, other;
	struct held h;

	serve(f, AF_INET, SOCK_DGRAM, &lim);
	serve(f, AF_INET, SOCK_DGRAM, &other);
	const struct plim elsewhere[] = {
		{ "d", KT_UNIT_DATAGRAM, KT_SCOPE_POD, KT_PROTO_UDP, other, "127.0.0.1/32", 2, { cg } },
	};
	const struct plim here[] = {
		{ "d", KT_UNIT_DATAGRAM, KT_SCOPE_POD, KT_PROTO_UDP, lim, "127.0.0.1/32", 2, { cg } },
	};
	const struct plim packets[] = {
		{ "p", KT_UNIT_PACKET, KT_SCOPE_POD, KT_PROTO_UDP, lim, "127.0.0.1/32", 3, { cg } },
	};

	apply(f, elsewhere, 1);
	held_start(f, cg, lim, &h);
	/* decided (and remembered) as passing */
	assert_string_equal(held_send(&h, lim, 3), "000");
	assert_string_equal(held_send(&h, 0, 3), "000");
	/* the same sockets, now covered: charged from the next call */
	apply(f, here, 1);
	assert_string_equal(held_send(&h, lim, 3), "00B");
	assert_string_equal(held_send(&h, 0, 1), "P"); /* the same bucket, spent */
	/* one socket, two destinations: each decided as its own */
	for (int i = 0; i < 3; i++) {
		assert_string_equal(held_send(&h, other, 1), "0");
		assert_string_equal(held_send(&h, lim, 1), "B");
	}
	/* no longer covered: passing again */
	apply(f, elsewhere, 1);
	assert_string_equal(held_send(&h, lim, 3), "000");
	assert_string_equal(held_send(&h, 0, 2), "00");
	/* a packet limit, decided on egress, for an unconnected socket that
	 * alternates (its egress entry is replaced only after many misses) */
	apply(f, packets, 1);
	for (int i = 0; i < 5; i++) {
		assert_string_equal(held_send(&h, other, 1), "0");
		assert_string_equal(held_send(&h, lim, 1), i < 3 ? "0" : "P");
	}
	assert_string_equal(held_send(&h, 0, 1), "P");
	struct kt_counters c = member_counters(f, 0, 0);
	assert_int_equal(c.admitted, 3);
	assert_int_equal(c.throttled, 3);
}

/* A process in a child cgroup of the attached one counts against the
 * parent's membership (ancestor walk), shared with the parent's own. */
static void test_nested_cgroup(void **state)
{
	struct fx *f = fx_open(state);
	const char *parent = kt_procfx_cgroup(&f->pf, "nest");
	/* children are destroyed (reverse order) before the parent */
	const char *inner = add_child_cgroup(f, parent, "inner");
	const char *deeper = add_child_cgroup(f, inner, "deeper");
	uint16_t p4;

	serve(f, AF_INET, SOCK_STREAM, &p4);
	const struct plim pl[] = {
		{ "n4", KT_UNIT_CONNECTION, KT_SCOPE_POD, KT_PROTO_TCP, p4, "127.0.0.1/32", 4,
		  { parent } },
	};
	apply(f, pl, 1);

	struct res r[5];
	const struct op two[] = { { OP_CONNECT, AF_INET, p4, 2 } };
	run_ops(f, deeper, two, 1, r, 2);
	expect(r, 2, 0, "connect from parent/inner/deeper");
	run_ops(f, inner, two, 1, r, 2);
	expect(r, 2, 0, "connect from parent/inner");
	const struct op one[] = { { OP_CONNECT, AF_INET, p4, 1 } };
	run_ops(f, parent, one, 1, r, 1);
	expect(r, 0, 1, "connect from parent after its children used the burst");
	run_ops(f, deeper, one, 1, r, 1);
	expect(r, 0, 1, "connect from parent/inner/deeper");

	struct kt_counters c = member_counters(f, 0, 0);
	assert_int_equal(c.admitted, 4);
	assert_int_equal(c.throttled, 2);

	/* The sub-cgroups' nearest member is cached (kt_anc_cache): when
	 * `inner` becomes a member too, `deeper` must be charged to inner's
	 * own new bucket at once, not to the cached parent's. (Inner joins a
	 * limit with members, so its bucket starts with one heartbeat of its
	 * share: none at this rate, so the connects are refused either way;
	 * the counters tell the buckets apart.) */
	const struct plim both[] = {
		{ "n4", KT_UNIT_CONNECTION, KT_SCOPE_POD, KT_PROTO_TCP, p4, "127.0.0.1/32", 1,
		  { parent, inner } },
	};
	apply(f, both, 1);
	struct kt_counters par0 = member_counters(f, 0, 0);
	run_ops(f, deeper, two, 1, r, 2);
	expect(r, 0, 2, "connect from parent/inner/deeper, inner now a member");
	c = member_counters(f, 0, 1);
	assert_int_equal(c.admitted + c.throttled, 2);
	struct kt_counters par1 = member_counters(f, 0, 0);
	assert_int_equal(par1.admitted + par1.throttled, par0.admitted + par0.throttled);
	/* and back: deeper is the parent's again */
	apply(f, pl, 1);
	run_ops(f, deeper, one, 1, r, 1);
	expect(r, 0, 1, "connect from parent/inner/deeper, the parent's bucket again");
}

/* A member nested in another member: programs attached to the outer cgroup
 * also run for the inner one, so attaching both would decide (and charge)
 * every call twice. Only the outer one is attached; the inner member still
 * gets its own bucket, charged exactly once per call. */
static void test_nested_members_charged_once(void **state)
{
	struct fx *f = fx_open(state);
	const char *outer = kt_procfx_cgroup(&f->pf, "pod");
	const char *inner = add_child_cgroup(f, outer, "ctr");
	char links[PATH_MAX], *out = NULL;
	uint16_t p4;

	serve(f, AF_INET, SOCK_STREAM, &p4);
	const struct plim pl[] = {
		{ "nm", KT_UNIT_CONNECTION, KT_SCOPE_POD, KT_PROTO_TCP, p4, "127.0.0.1/32", 4,
		  { outer, inner } },
	};
	apply(f, pl, 1);

	struct res r[6];
	const struct op six[] = { { OP_CONNECT, AF_INET, p4, 6 } };
	run_ops(f, inner, six, 1, r, 6);
	expect(r, 4, 2, "connect from the inner member"); /* its burst, not half of it */
	struct kt_counters ci = member_counters(f, 0, 1), co = member_counters(f, 0, 0);
	assert_int_equal(ci.admitted, 4);
	assert_int_equal(ci.throttled, 2);
	assert_int_equal(co.admitted + co.throttled, 0);
	run_ops(f, outer, six, 1, r, 6);
	expect(r, 4, 2, "connect from the outer member");

	/* one attachment, on the outer cgroup */
	snprintf(links, sizeof(links), "/bin/ls %s/links", f->b.pin_dir);
	char *argv[] = { "/bin/sh", "-c", links, NULL };
	assert_int_equal(ktest_run_capture(argv, &out), 0);
	char want_outer[64], want_inner[64];
	snprintf(want_outer, sizeof(want_outer), "%llu-kt_connect4",
		 (unsigned long long)ktest_cgroup_id(outer));
	snprintf(want_inner, sizeof(want_inner), "%llu-kt_connect4",
		 (unsigned long long)ktest_cgroup_id(inner));
	assert_non_null(strstr(out, want_outer));
	assert_null(strstr(out, want_inner));
	free(out);
}

/* errno: a limit's refused connect() and unconnected sendto() fail with
 * the errno it configures, at once; another limit keeps the default. */
static void test_refuse_errno(void **state)
{
	struct fx *f = fx_open(state);
	const char *cg = kt_procfx_cgroup(&f->pf, "errno");
	uint16_t pt, pu, pd;

	serve(f, AF_INET, SOCK_STREAM, &pt);
	serve(f, AF_INET, SOCK_DGRAM, &pu);
	serve(f, AF_INET, SOCK_STREAM, &pd);
	const struct plim pl[] = {
		{ "e-conn", KT_UNIT_CONNECTION, KT_SCOPE_POD, KT_PROTO_TCP, pt, "127.0.0.1/32", 1,
		  { cg }, ECONNREFUSED },
		{ "e-dgram", KT_UNIT_DATAGRAM, KT_SCOPE_POD, KT_PROTO_UDP, pu, "127.0.0.1/32", 1,
		  { cg }, EAGAIN },
		{ "e-default", KT_UNIT_CONNECTION, KT_SCOPE_POD, KT_PROTO_TCP, pd, "127.0.0.1/32", 1,
		  { cg } },
	};
	const struct op ops[] = { { OP_CONNECT, AF_INET, pt, 3 },
				  { OP_SENDTO, AF_INET, pu, 3 },
				  { OP_CONNECT, AF_INET, pd, 3 } };
	const int want[] = { ECONNREFUSED, EAGAIN, KT_REFUSE_ERRNO };
	struct res r[9];

	apply(f, pl, 3);
	run_ops(f, cg, ops, 3, r, 9);
	for (int k = 0; k < 3; k++) {
		assert_int_equal(r[3 * k].err, 0); /* the burst */
		for (int j = 1; j < 3; j++) {
			if (r[3 * k + j].err != want[k])
				fail_msg("limit %s call %d: %s, want %s", pl[k].name, j,
					 strerror(r[3 * k + j].err), strerror(want[k]));
			assert_true(r[3 * k + j].ns < 50 * 1000000LL); /* at once */
		}
	}
}

/* A member that joins a limit with members on the node (a new pod) starts
 * with one heartbeat of its share ("Joins" in docs/ARCHITECTURE.md), not a full burst
 * that churning pods would each bring anew; the first members of a limit
 * start full. */
static void test_join_credit(void **state)
{
	struct fx *f = fx_open(state);
	const char *a = kt_procfx_cgroup(&f->pf, "credit-a");
	const char *b = kt_procfx_cgroup(&f->pf, "credit-b");
	uint16_t p4;

	serve(f, AF_INET, SOCK_STREAM, &p4);
	const struct plim one[] = {
		{ "jc", KT_UNIT_CONNECTION, KT_SCOPE_POD, KT_PROTO_TCP, p4, "127.0.0.1/32", 4, { a } },
	};
	const struct plim two[] = {
		{ "jc", KT_UNIT_CONNECTION, KT_SCOPE_POD, KT_PROTO_TCP, p4, "127.0.0.1/32", 4,
		  { a, b } },
	};
	struct res r[5];
	const struct op five[] = { { OP_CONNECT, AF_INET, p4, 5 } };

	apply(f, one, 1);
	run_ops(f, a, five, 1, r, 5);
	expect(r, 4, 1, "the first member: a full burst");
	apply(f, two, 1); /* b joins; SLOW_RATE: one heartbeat earns nothing */
	const struct op two_ops[] = { { OP_CONNECT, AF_INET, p4, 2 } };
	run_ops(f, b, two_ops, 1, r, 2);
	expect(r, 0, 2, "a joining member: no burst");
	assert_int_equal(member_counters(f, 0, 1).throttled, 2);
}

/* A member nested in another member is charged under the outer member's
 * limits too (its kt_members list inherits them): the pod's limit holds for
 * traffic of a container that is itself a member of another limit, and of
 * that container's sub-cgroups; of the limits covering a call, the most
 * specific prefix wins whichever member it comes from. */
static void test_nested_members_inherit(void **state)
{
	struct fx *f = fx_open(state);
	const char *pod = kt_procfx_cgroup(&f->pf, "inh-pod");
	const char *ctr = add_child_cgroup(f, pod, "ctr");
	const char *sub = add_child_cgroup(f, ctr, "sub");
	struct kt_member_key k = { .cgroup_id = ktest_cgroup_id(ctr) };
	struct kt_member_val v;
	uint16_t pa, pb;

	serve(f, AF_INET, SOCK_STREAM, &pa);
	serve(f, AF_INET, SOCK_STREAM, &pb);
	const struct plim pl[] = {
		/* the pod's: port pa, and the more specific /32 on pb */
		{ "pod-a", KT_UNIT_CONNECTION, KT_SCOPE_POD, KT_PROTO_TCP, pa, "0.0.0.0/0", 2, { pod } },
		{ "pod-b", KT_UNIT_CONNECTION, KT_SCOPE_POD, KT_PROTO_TCP, pb, "127.0.0.1/32", 3,
		  { pod } },
		/* the container's: port pb everywhere */
		{ "ctr-b", KT_UNIT_CONNECTION, KT_SCOPE_POD, KT_PROTO_TCP, pb, "0.0.0.0/0", 5, { ctr } },
	};
	apply(f, pl, 3);

	assert_int_equal(bpf_map_lookup_elem(f->b.members_fd, &k, &v), 0);
	assert_int_equal(v.count, 3);
	assert_int_equal(v.own, 1);
	assert_int_equal(v.ents[0].limit_id, f->plan.limits[2].id);

	struct res r[4];
	const struct op a3[] = { { OP_CONNECT, AF_INET, pa, 3 } };
	run_ops(f, sub, a3, 1, r, 3);
	expect(r, 2, 1, "connect to the pod's port from the container's sub-cgroup");
	const struct op b4[] = { { OP_CONNECT, AF_INET, pb, 4 } };
	run_ops(f, ctr, b4, 1, r, 4);
	expect(r, 3, 1, "connect to 127.0.0.1 (the pod's /32 beats the container's /0)");
	assert_int_equal(member_counters(f, 0, 0).admitted, 2);
	assert_int_equal(member_counters(f, 1, 0).admitted, 3);
	assert_int_equal(member_counters(f, 1, 0).throttled, 1);
	struct kt_counters c = member_counters(f, 2, 0);
	assert_int_equal(c.admitted + c.throttled, 0);

	/* status shows each member under its own limits only */
	struct kt_kstate *st = calloc(1, sizeof(*st));
	assert_non_null(st);
	assert_int_equal(kt_inspect_read(&f->b, st), 0);
	const struct kt_klimit *kl = kt_inspect_find(st, "ctr-b");
	assert_non_null(kl);
	assert_int_equal(kl->n_members, 1);
	kl = kt_inspect_find(st, "pod-a");
	assert_non_null(kl);
	assert_int_equal(kl->n_members, 1);
	assert_int_equal(kl->members[0].cgroup_id, ktest_cgroup_id(pod));
	kt_kstate_free(st);

	/* a reload keeps every bucket: inherited entries are not memberships */
	uint32_t slots[3] = { f->plan.limits[0].members[0].slot, f->plan.limits[1].members[0].slot,
			      f->plan.limits[2].members[0].slot };
	apply(f, pl, 3);
	for (int i = 0; i < 3; i++)
		assert_int_equal(f->plan.limits[i].members[0].slot, slots[i]);
}

/* Pod scope: a bucket per member cgroup. Node scope: one bucket shared by
 * every member. */
static void test_scopes(void **state)
{
	struct fx *f = fx_open(state);
	const char *a = kt_procfx_cgroup(&f->pf, "scope-a");
	const char *b = kt_procfx_cgroup(&f->pf, "scope-b");
	uint16_t pod_port, node_port;

	serve(f, AF_INET, SOCK_STREAM, &pod_port);
	serve(f, AF_INET, SOCK_STREAM, &node_port);
	const struct plim pl[] = {
		{ "pod", KT_UNIT_CONNECTION, KT_SCOPE_POD, KT_PROTO_TCP, pod_port, "127.0.0.1/32", 2,
		  { a, b } },
		{ "node", KT_UNIT_CONNECTION, KT_SCOPE_NODE, KT_PROTO_TCP, node_port, "127.0.0.1/32",
		  3, { a, b } },
	};
	apply(f, pl, 2);
	assert_int_not_equal(f->plan.limits[0].members[0].slot, f->plan.limits[0].members[1].slot);
	assert_int_equal(f->plan.limits[1].members[0].slot, f->plan.limits[1].members[1].slot);

	const struct op ops[] = { { OP_CONNECT, AF_INET, pod_port, 3 },
				  { OP_CONNECT, AF_INET, node_port, 2 } };
	struct res r[5];
	run_ops(f, a, ops, 2, r, 5);
	expect(r, 2, 1, "pod scope, cgroup a");
	expect(r + 3, 2, 0, "node scope, cgroup a");
	run_ops(f, b, ops, 2, r, 5);
	expect(r, 2, 1, "pod scope, cgroup b: its own bucket");
	expect(r + 3, 1, 1, "node scope, cgroup b: the shared bucket");

	assert_int_equal(member_counters(f, 0, 0).admitted, 2);
	assert_int_equal(member_counters(f, 0, 1).admitted, 2);
	struct kt_counters c = member_counters(f, 1, 0);
	assert_int_equal(c.admitted, 3);
	assert_int_equal(c.throttled, 1);
}

/* Chained members (set by hand: the daemon does not chain them yet): two
 * pod-scope members of burst 4 on one node bucket of burst 5 admit 5 in
 * all, on the sendmsg hook (unconnected sendto) and on egress (connected
 * UDP). A refusal by the node bucket counts as the member's throttled send
 * and costs the member no token. */
static void test_chained_members_share_node_bucket(void **state)
{
	struct fx *f = fx_open(state);
	const char *a = kt_procfx_cgroup(&f->pf, "chain-a");
	const char *b = kt_procfx_cgroup(&f->pf, "chain-b");
	uint32_t pool = KT_SLOT_NONE;
	uint16_t port;

	serve(f, AF_INET, SOCK_DGRAM, &port);
	const struct plim pl[] = {
		{ "chain", KT_UNIT_DATAGRAM, KT_SCOPE_POD, KT_PROTO_UDP, port, "127.0.0.1/32", 4,
		  { a, b } },
	};
	apply(f, pl, 1);
	uint32_t sa = f->plan.limits[0].members[0].slot, sb = f->plan.limits[0].members[1].slot;
	struct kt_bucket *ba = kt_bpf_bucket(&f->b, sa), *bb = kt_bpf_bucket(&f->b, sb);

	assert_int_not_equal(sa, sb);
	assert_int_equal(kt_gcra_tokens_left(ba, kt_clock_ns()), 4);
	assert_int_equal(kt_gcra_tokens_left(bb, kt_clock_ns()), 4);
	/* the node bucket in the highest free slot (KT_MAX_BUCKETS - 1 here):
	 * the largest parent slot the flags carry must reach the programs */
	for (uint32_t s = KT_MAX_BUCKETS; s-- > 0;)
		if (!__atomic_load_n(&f->b.buckets[s].flags, __ATOMIC_ACQUIRE)) {
			pool = s;
			break;
		}
	assert_true(pool != KT_SLOT_NONE && pool != sa && pool != sb);
	struct kt_bucket *bp = kt_bpf_bucket(&f->b, pool);
	*bp = (struct kt_bucket){ .interval_fp = ba->interval_fp, .burst = 5,
				  .limit_id = ba->limit_id };
	__atomic_store_n(&bp->flags, KT_BUCKET_IN_USE | KT_BUCKET_POOL, __ATOMIC_RELEASE);
	__atomic_store_n(&ba->flags, kt_bucket_chain_flags(ba->flags, pool), __ATOMIC_RELEASE);
	__atomic_store_n(&bb->flags, kt_bucket_chain_flags(bb->flags, pool), __ATOMIC_RELEASE);

	struct res r[4];
	const struct op send4[] = { { OP_SENDTO, AF_INET, port, 4 } };
	run_ops(f, a, send4, 1, r, 4);
	expect(r, 4, 0, "sendto from member a: its burst, 4 of the node's 5");
	run_ops(f, b, send4, 1, r, 4);
	expect(r, 1, 3, "sendto from member b: the node's last token");
	struct kt_counters ca = counters(f, sa), cb = counters(f, sb), cp = counters(f, pool);
	assert_int_equal(ca.admitted, 4);
	assert_int_equal(ca.throttled, 0);
	assert_int_equal(cb.admitted, 1);
	assert_int_equal(cb.throttled, 3);
	assert_int_equal(ca.admitted + cb.admitted, 5);
	assert_int_equal(cp.admitted + cp.throttled, 0); /* the node bucket counts nothing */
	/* b's three refusals were the node bucket's: b keeps 4 - 1 */
	assert_int_equal(kt_gcra_tokens_left(ba, kt_clock_ns()), 0);
	assert_int_equal(kt_gcra_tokens_left(bb, kt_clock_ns()), 3);
	assert_int_equal(kt_gcra_tokens_left(bp, kt_clock_ns()), 0);

	/* egress: a connected UDP datagram of b, refused by the node bucket
	 * (dropped, EPERM), b's token given back */
	const struct op conn1[] = { { OP_SEND_CONNECTED, AF_INET, port, 1 } };
	run_ops(f, b, conn1, 1, r, 1);
	assert_int_equal(r[0].err, EPERM);
	assert_int_equal(counters(f, sb).throttled, 4);
	assert_int_equal(kt_gcra_tokens_left(bb, kt_clock_ns()), 3);
	/* the node bucket refilled: b's 3 pass on egress and are taken from
	 * the node bucket too; the 4th is b's own refusal */
	__atomic_store_n(&bp->tat, 0, __ATOMIC_RELEASE);
	const struct op conn4[] = { { OP_SEND_CONNECTED, AF_INET, port, 4 } };
	run_ops(f, b, conn4, 1, r, 4);
	for (int i = 0; i < 4; i++)
		if (r[i].err != (i < 3 ? 0 : EPERM))
			fail_msg("connected send %d from member b: %s", i,
				 r[i].err ? strerror(r[i].err) : "ok");
	cb = counters(f, sb);
	assert_int_equal(cb.admitted, 1 + 3);
	assert_int_equal(cb.throttled, 4 + 1);
	assert_int_equal(kt_gcra_tokens_left(bb, kt_clock_ns()), 0);
	assert_int_equal(kt_gcra_tokens_left(bp, kt_clock_ns()), 2);

	/* a parent that is no node bucket (flag gone, or another limit's) is
	 * ignored: b, refilled, admits its own 4 although that slot is empty */
	/* empty: its whole tolerance queued, and a second more */
	__atomic_store_n(&bp->tat,
			 kt_clock_ns() + kt_tokens_to_ns(bp->burst, bp->interval_fp) + 1000000000ull,
			 __ATOMIC_RELEASE);
	__atomic_store_n(&bp->flags, KT_BUCKET_IN_USE, __ATOMIC_RELEASE);
	__atomic_store_n(&bb->tat, 0, __ATOMIC_RELEASE);
	run_ops(f, b, send4, 1, r, 4);
	expect(r, 4, 0, "sendto from member b chained to a slot that is no node bucket");
	__atomic_store_n(&bp->flags, KT_BUCKET_IN_USE | KT_BUCKET_POOL, __ATOMIC_RELEASE);
	__atomic_store_n(&bb->tat, 0, __ATOMIC_RELEASE);
	run_ops(f, b, send4, 1, r, 4);
	expect(r, 0, 4, "the same slot a node bucket again, and empty");

	/* unchain, then free the hand-made slot */
	__atomic_store_n(&ba->flags, kt_bucket_chain_flags(ba->flags, KT_SLOT_NONE), __ATOMIC_RELEASE);
	__atomic_store_n(&bb->flags, kt_bucket_chain_flags(bb->flags, KT_SLOT_NONE), __ATOMIC_RELEASE);
	assert_int_equal(ba->flags & KT_BUCKET_CHAINED, 0);
	__atomic_store_n(&bp->flags, 0, __ATOMIC_RELEASE);
	memset(bp, 0, sizeof(*bp));
}

/* One kt_members value lists a cgroup's limits: KT_LIMITS_PER_CGROUP of them
 * apply, one more is refused naming the cgroup before any membership or
 * limit name is written. */
static void test_limits_per_cgroup(void **state)
{
	struct fx *f = fx_open(state);
	const char *cg = kt_procfx_cgroup(&f->pf, "many");
	struct plim pl[KT_LIMITS_PER_CGROUP + 1];
	char names[KT_LIMITS_PER_CGROUP + 1][16], cidrs[KT_LIMITS_PER_CGROUP + 1][24];
	char err[512], want[64];
	struct kt_member_key k = { .cgroup_id = ktest_cgroup_id(cg) };
	struct kt_member_val v;
	struct kt_kstate *st = calloc(1, sizeof(*st));

	assert_non_null(st);
	for (int i = 0; i <= KT_LIMITS_PER_CGROUP; i++) {
		snprintf(names[i], sizeof(names[i]), "many%d", i);
		snprintf(cidrs[i], sizeof(cidrs[i]), "127.0.%d.1/32", i);
		pl[i] = (struct plim){ names[i], KT_UNIT_CONNECTION, KT_SCOPE_POD, KT_PROTO_TCP,
				       (uint16_t)(1000 + i), cidrs[i], 1, { cg } };
	}
	assert_int_equal(try_apply(f, pl, KT_LIMITS_PER_CGROUP + 1, err, sizeof(err)), -E2BIG);
	snprintf(want, sizeof(want), "is a member of more than %d limits", KT_LIMITS_PER_CGROUP);
	assert_non_null(strstr(err, want));
	assert_non_null(strstr(err, cg));
	assert_true(bpf_map_lookup_elem(f->b.members_fd, &k, &v) < 0 && errno == ENOENT);
	assert_int_equal(kt_inspect_read(&f->b, st), 0);
	assert_int_equal(st->n_limits, 0);

	assert_int_equal(try_apply(f, pl, KT_LIMITS_PER_CGROUP, err, sizeof(err)), 0);
	assert_int_equal(bpf_map_lookup_elem(f->b.members_fd, &k, &v), 0);
	assert_int_equal(v.count, KT_LIMITS_PER_CGROUP);
	for (int i = 0; i < KT_LIMITS_PER_CGROUP; i++) {
		assert_int_equal(v.ents[i].limit_id, f->plan.limits[i].id);
		assert_int_equal(v.ents[i].slot, f->plan.limits[i].members[0].slot);
	}
	/* inspect reads every entry back as a member of its limit */
	assert_int_equal(kt_inspect_read(&f->b, st), 0);
	assert_int_equal(st->n_limits, KT_LIMITS_PER_CGROUP);
	for (int i = 0; i < st->n_limits; i++) {
		assert_int_equal(st->limits[i].n_members, 1);
		assert_int_equal(st->limits[i].members[0].cgroup_id, k.cgroup_id);
	}

	/* dropping limits rewrites the cgroup's list, keeping the bucket */
	uint32_t slot2 = v.ents[2].slot;
	assert_int_equal(try_apply(f, pl + 2, 1, err, sizeof(err)), 0);
	assert_int_equal(bpf_map_lookup_elem(f->b.members_fd, &k, &v), 0);
	assert_int_equal(v.count, 1);
	assert_int_equal(v.ents[0].limit_id, f->plan.limits[0].id);
	assert_int_equal(v.ents[0].slot, slot2);
	/* a cgroup in no limit any more loses its entry */
	const char *other = kt_procfx_cgroup(&f->pf, "many-other");
	pl[0].cgs[0] = other;
	assert_int_equal(try_apply(f, pl, 1, err, sizeof(err)), 0);
	assert_true(bpf_map_lookup_elem(f->b.members_fd, &k, &v) < 0 && errno == ENOENT);
	k.cgroup_id = ktest_cgroup_id(other);
	assert_int_equal(bpf_map_lookup_elem(f->b.members_fd, &k, &v), 0);
	assert_int_equal(v.count, 1);
	kt_kstate_free(st);
}

/* Verifier budget: every program verifies in a small share of the kernel's
 * one-million-instruction limit. Header walks and two classifications on
 * one path once blew through it (E2BIG at load): a change that multiplies
 * the verifier's states fails here with the figure, before it fails to
 * load on a kernel with a tighter budget. */
#define KT_VERIFIER_BUDGET 500000 /* half the kernel limit; kt_egress needs about 306k today */

static void test_verifier_budget(void **state)
{
	struct fx *f = fx_open(state);
	struct bpf_object *objs[] = { f->b.connect->obj, f->b.sendmsg->obj, f->b.egress->obj,
				      f->b.sock->obj, f->b.sockops->obj };
	struct bpf_program *prog;
	int n = 0;

	for (size_t i = 0; i < sizeof(objs) / sizeof(objs[0]); i++) {
		bpf_object__for_each_program(prog, objs[i]) {
			struct bpf_prog_info info = { 0 };
			__u32 len = sizeof(info);

			assert_int_equal(bpf_obj_get_info_by_fd(bpf_program__fd(prog), &info, &len), 0);
			print_message("%-16s verified %6u instructions (budget %d)\n",
				      bpf_program__name(prog), info.verified_insns, KT_VERIFIER_BUDGET);
			assert_true(info.verified_insns > 0);
			assert_true(info.verified_insns <= KT_VERIFIER_BUDGET);
			n++;
		}
	}
	assert_int_equal(n, 8); /* connect4/6, sendmsg4/6, egress, sock_create, sock_release, sockops */
}

/* Runs last: every earlier test removed its pins and cgroups. */
static void test_nothing_left(void **state)
{
	char prefix[64], m[PATH_MAX];
	struct dirent *de;
	DIR *d;
	(void)state;

	KTEST_SKIP_UNLESS_ROOT();
	kt_bpffx_assert_none_left();

	snprintf(prefix, sizeof(prefix), "kt-test-%d-", getpid());
	assert_int_equal(kt_cgroup2_mount(m, sizeof(m), NULL), 0);
	d = opendir(m);
	assert_non_null(d);
	while ((de = readdir(d)))
		if (!strncmp(de->d_name, prefix, strlen(prefix))) {
			print_error("left behind: %s/%s\n", m, de->d_name);
			fail();
		}
	closedir(d);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_egress_burst_v4),
		T(test_egress_burst_v6),
		T(test_egress_isolation),
		T(test_verifier_budget),
		T(test_egress_unmatched),
		T(test_egress_headers_charged),
		T(test_egress_gso_per_segment),
		T(test_egress_bytes),
		T(test_egress_non_member),
		T(test_egress_closed),
		T(test_egress_nested_cgroup),
		T(test_connect),
		T(test_sendmsg),
		T(test_socket_decisions_follow_changes),
		T(test_nested_cgroup),
		T(test_nested_members_charged_once),
		T(test_nested_members_inherit),
		T(test_join_credit),
		T(test_refuse_errno),
		T(test_scopes),
		T(test_chained_members_share_node_bucket),
		T(test_limits_per_cgroup),
		cmocka_unit_test(test_nothing_left),
	};
	return cmocka_run_group_tests_name("bpf_progs", tests, NULL, NULL);
}
