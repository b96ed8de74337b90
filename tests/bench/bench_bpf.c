/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * `make bench`'s BPF sections (tests/bench/bench.c runs them):
 *   skb      cgroup_skb egress decision via BPF_PROG_TEST_RUN, next to an
 *            empty cgroup_skb program, paired run by run; and a program that
 *            only reads the clock, to show that part of the matched cost
 *   xdp      XDP tag decision (bpf/xdp.bpf.c, through xdp_maps.c in its own
 *            pin dir kt-bench-<pid>-xdp) next to an XDP_PASS program, paired
 *            run by run: a bucket that admits (deep burst) and one that
 *            refuses
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "kernel/bpf_loader.h"
#include "base/cgroup.h"
#include "kt_bpffx.h"
#include "ktest.h"
#include "kthrottle.h"
#include "bench_empty.skel.h"
#include "egress.skel.h"
#include "tags/xdp_maps.h"
#include "bench.h"

/* ---- section: cgroup_skb decision via BPF_PROG_TEST_RUN ---- */

/* 14-byte Ethernet header + IPv4 + UDP + payload. The test run strips the
 * Ethernet header for cgroup_skb, as the egress hook sees L3. */
struct bench_pkt {
	uint8_t eth[14];
	uint8_t ip[20];
	uint8_t udp[8];
	uint8_t payload[18];
} __attribute__((packed));

static void make_pkt(struct bench_pkt *p, const char *daddr, uint16_t dport)
{
	uint32_t src = htonl(0x0a000001), dst;
	uint16_t v;

	memset(p, 0, sizeof(*p));
	p->eth[12] = 0x08; /* ETH_P_IP */
	p->ip[0] = 0x45;
	v = htons(sizeof(*p) - 14);
	memcpy(p->ip + 2, &v, 2);
	p->ip[8] = 64;
	p->ip[9] = IPPROTO_UDP;
	inet_pton(AF_INET, daddr, &dst);
	memcpy(p->ip + 12, &src, 4);
	memcpy(p->ip + 16, &dst, 4);
	v = htons(40000);
	memcpy(p->udp, &v, 2);
	v = htons(dport);
	memcpy(p->udp + 2, &v, 2);
	v = htons(8 + sizeof(p->payload));
	memcpy(p->udp + 4, &v, 2);
}

static int test_run(int fd, const struct bench_pkt *pkt, int repeat, double *ns, __u32 *retval)
{
	LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = pkt, .data_size_in = sizeof(*pkt),
		    .repeat = repeat);

	if (bpf_prog_test_run_opts(fd, &o) < 0)
		return -errno;
	*ns = o.duration;
	*retval = o.retval;
	return 0;
}

/* Rows (g), (h): this process moves `levels` (1 or 2) below bench-nest,
 * which becomes the member skb-match charges (a test-run skb's socket is
 * made in the caller's cgroup); 0 moves it back and drops that member. */
static int set_nest(struct bench_env *e, int levels)
{
	struct kt_member_key k = { 0 };
	struct kt_member_val v = { .count = 1, .own = 1 };
	char procs[PATH_MAX + 16];
	uint64_t id;
	int ret;

	if (kt_cgroup_id(e->cg_nest[0], &id))
		return -ENOENT;
	k.cgroup_id = id;
	v.ents[0] = (struct kt_member_ent){ .limit_id = e->limit_id[LIM_SKB_MATCH],
					    .slot = e->slot[LIM_SKB_MATCH] };
	if (levels && bpf_map_update_elem(e->bpf.members_fd, &k, &v, BPF_ANY) < 0)
		return -errno;
	snprintf(procs, sizeof(procs), "%s/cgroup.procs", levels ? e->cg_nest[levels] : e->self_cg);
	ret = ktest_write_file(procs, "0");
	if (ret) {
		fprintf(stderr, "bench: cannot move into %s: %s\n", procs, strerror(-ret));
		return ret;
	}
	if (!levels)
		bpf_map_delete_elem(e->bpf.members_fd, &k);
	kt_bpf_bump_gen(&e->bpf);
	return 0;
}

static void print_prog_size(const char *name, int fd)
{
	struct bpf_prog_info info = { 0 };
	__u32 len = sizeof(info);

	if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0)
		printf("- %s: %u bytes translated, %u bytes JITed\n", name, info.xlated_prog_len,
		       info.jited_prog_len);
}

enum expect_count { C_NONE, C_ADMIT, C_REFUSE };

struct skb_case {
	const char *what;
	const char *daddr;
	uint16_t dport;
	enum bucket_state bucket;
	__u32 want_retval;
	enum expect_count count;
	double max_delta;
	bool full_list; /* the cgroup in 8 limits that all cover the packet */
	int nest;       /* the sending cgroup 1 or 2 levels below the member */
};

int bench_skb(struct bench_env *e)
{
	static const struct skb_case cases[] = {
		{ "egress (a) matched, admitted", "10.1.2.3", SKB_PORT_MATCH, B_HUGE, 1, C_ADMIT, 60 },
		{ "egress (b) matched, refused (bucket exhausted)", "10.1.2.3", SKB_PORT_MATCH,
		  B_EXHAUSTED, 0, C_REFUSE, 60 },
		{ "egress (b') matched, refused (rate closed)", "10.1.2.3", SKB_PORT_MATCH, B_CLOSED, 0,
		  C_REFUSE, 60 },
		{ "egress (c) unmatched: port in no rule", "10.1.2.3", SKB_PORT_NORULE, B_HUGE, 1,
		  C_NONE, 15 },
		{ "egress (d) port of a limit the cgroup is not in", "10.1.2.3",
		  SKB_PORT_NOMEMBER, B_HUGE, 1, C_NONE, 60 },
		{ "egress (e) unmatched: port in a rule, address in no prefix", "192.0.2.1",
		  SKB_PORT_MATCH, B_HUGE, 1, C_NONE, 15 },
		{ "egress (f) matched, the cgroup's 8 limits all cover it", "10.1.2.3",
		  SKB_PORT_MATCH, B_HUGE, 1, C_ADMIT, 240, true },
		/* the nearest member is cached per cgroup, members included:
		 * the same one LRU lookup as (a) once warm */
		{ "egress (g) matched, sender 1 level below the member", "10.1.2.3",
		  SKB_PORT_MATCH, B_HUGE, 1, C_ADMIT, 70, false, 1 },
		{ "egress (h) matched, sender 2 levels below the member", "10.1.2.3",
		  SKB_PORT_MATCH, B_HUGE, 1, C_ADMIT, 70, false, 2 },
	};
	enum { NC = sizeof(cases) / sizeof(cases[0]) };
	const int rounds = g_quick ? 3 : 7;
	const int repeat = g_quick ? 500000 : 2000000;
	int kt_fd = bpf_program__fd(e->bpf.egress->progs.kt_egress);
	int empty_fd = bpf_program__fd(e->empty->progs.empty_egress);
	int clock_fd = bpf_program__fd(e->empty->progs.clock_egress);
	double val[NC][16], base[NC * 16], delta[NC][16], clk_val[16], clk_delta[16];
	uint32_t slot = e->slot[LIM_SKB_MATCH];
	struct bench_pkt pkts[NC], empty_pkt;
	int nbase = 0, ret;

	print_prog_size("kt_egress", kt_fd);
	print_prog_size("empty_egress", empty_fd);
	print_prog_size("clock_egress", clock_fd);
	fflush(stdout);
	make_pkt(&empty_pkt, "10.1.2.3", SKB_PORT_MATCH);
	for (int c = 0; c < NC; c++)
		make_pkt(&pkts[c], cases[c].daddr, cases[c].dport);

	for (int r = 0; r < rounds; r++) {
		for (int c = 0; c < NC; c++) {
			struct kt_counters before, after;
			struct kt_counters nb_before, nb_after;
			double ns_empty, ns_kt;
			__u32 rv;

			if (g_stop)
				return -EINTR;
			set_bucket(e, slot, cases[c].bucket);
			if (cases[c].full_list && (ret = set_self_members(e, true)))
				return ret;
			if (cases[c].nest && (ret = set_nest(e, cases[c].nest)))
				return ret;
			if (read_counters(e, slot, &before) ||
			    read_counters(e, e->slot[LIM_SKB_NOMEMBER], &nb_before))
				return -EIO;
			/* paired: the empty program right before, same packet size */
			ret = test_run(empty_fd, &empty_pkt, repeat, &ns_empty, &rv);
			if (!ret)
				ret = test_run(kt_fd, &pkts[c], repeat, &ns_kt, &rv);
			if (ret) {
				fprintf(stderr, "bench: BPF_PROG_TEST_RUN: %s\n", strerror(-ret));
				return ret;
			}
			if (cases[c].full_list && !ret)
				ret = set_self_members(e, false);
			if (cases[c].nest && !ret)
				ret = set_nest(e, 0);
			base[nbase++] = ns_empty;
			val[c][r] = ns_kt;
			delta[c][r] = ns_kt - ns_empty;
			sanity(rv == cases[c].want_retval, "%s: program returned %u, expected %u",
			       cases[c].what, rv, cases[c].want_retval);
			if (read_counters(e, slot, &after) ||
			    read_counters(e, e->slot[LIM_SKB_NOMEMBER], &nb_after))
				return -EIO;
			__u64 adm = after.admitted - before.admitted;
			__u64 thr = after.throttled - before.throttled;
			switch (cases[c].count) {
			case C_ADMIT:
				sanity(adm == (__u64)repeat && thr == 0,
				       "%s: counted %llu admitted, %llu throttled of %d runs",
				       cases[c].what, (unsigned long long)adm,
				       (unsigned long long)thr, repeat);
				break;
			case C_REFUSE:
				/* an exhausted bucket may admit the first run of the first round */
				sanity(adm + thr == (__u64)repeat && thr + 1 >= (__u64)repeat,
				       "%s: counted %llu admitted, %llu throttled of %d runs",
				       cases[c].what, (unsigned long long)adm,
				       (unsigned long long)thr, repeat);
				break;
			case C_NONE:
				sanity(adm == 0 && thr == 0 &&
					       nb_after.admitted == nb_before.admitted &&
					       nb_after.throttled == nb_before.throttled,
				       "%s: unmatched traffic was counted", cases[c].what);
				break;
			}
		}
		/* the clock read alone, paired with the empty program likewise */
		double ns_empty, ns_clk;
		__u32 rv;

		ret = test_run(empty_fd, &empty_pkt, repeat, &ns_empty, &rv);
		if (!ret)
			ret = test_run(clock_fd, &empty_pkt, repeat, &ns_clk, &rv);
		if (ret) {
			fprintf(stderr, "bench: BPF_PROG_TEST_RUN: %s\n", strerror(-ret));
			return ret;
		}
		sanity(rv == 1, "clock_egress returned %u, expected 1", rv);
		clk_val[r] = ns_clk;
		clk_delta[r] = ns_clk - ns_empty;
	}
	double b = median(base, nbase);
	for (int c = 0; c < NC; c++)
		row_ns_delta(cases[c].what, median(val[c], rounds), b, median(delta[c], rounds),
			     cases[c].max_delta);
	row_ns_delta("egress: clock read only (bpf_ktime_get_ns)", median(clk_val, rounds), b,
		     median(clk_delta, rounds), NAN);
	/* the target for nesting: a sender below a member within
	 * 10 ns of the member itself, per round (g) or (h) minus (a) */
	for (int c = 0; c < NC; c++) {
		double nd[16];
		char what[96];

		if (!cases[c].nest)
			continue;
		for (int r = 0; r < rounds; r++)
			nd[r] = delta[c][r] - delta[0][r];
		snprintf(what, sizeof(what), "egress (%c) - (a): %d level%s below a member vs the member",
			 cases[c].nest == 1 ? 'g' : 'h', cases[c].nest, cases[c].nest == 1 ? "" : "s");
		row_ns_delta(what, median(val[c], rounds), median(val[0], rounds),
			     median(nd, rounds), 10);
	}
	return 0;
}

/* ---- section: XDP tag decision via BPF_PROG_TEST_RUN ---- */

#define XDP_LIM 1
#define XDP_PASS_RV 2
#define XDP_DROP_RV 1

int bench_xdp(struct bench_env *e)
{
	static const struct {
		const char *what;
		uint32_t saddr; /* host order */
		__u32 want_retval;
	} cases[] = {
		{ "xdp tag decision, bucket admitting (deep burst)", 0x0a000001, XDP_PASS_RV },
		{ "xdp tag decision, bucket refusing", 0x0a000002, XDP_DROP_RV },
	};
	enum { NC = sizeof(cases) / sizeof(cases[0]) };
	const int rounds = g_quick ? 3 : 7;
	const int repeat = g_quick ? 500000 : 2000000;
	int empty_fd = bpf_program__fd(e->empty->progs.empty_xdp);
	double val[NC][16], base[NC * 16], delta[NC][16];
	struct kt_xdp_tags *t = NULL;
	struct bench_pkt pkts[NC];
	char pin[PATH_MAX];
	uint8_t slow[16] = { 10, 0, 0, 2 };
	int nbase = 0, ret, kt_fd, lo = (int)if_nametoindex("lo");

	snprintf(pin, sizeof(pin), "/sys/fs/bpf/kt-bench-%d-xdp", getpid());
	ret = kt_xdp_tags_open(pin, 65536, &t);
	if (ret) {
		fprintf(stderr, "bench: cannot load the XDP tag programs: %s\n", strerror(-ret));
		goto out;
	}
	/* test runs arrive on lo; 1e9 tokens/s with a burst of 1e9 admits
	 * every run, the /32 override of one token per 1000 s refuses */
	if ((ret = kt_xdp_tags_set_iface(t, lo, XDP_LIM, 32, 128)) ||
	    (ret = kt_xdp_tags_set_limit(t, XDP_LIM, 1e9, 1000000000ull)) ||
	    (ret = kt_xdp_tags_set_rule(t, XDP_LIM, 4, slow, 32, 0, 1e-3, 1))) {
		fprintf(stderr, "bench: cannot program the XDP tag maps: %s\n", strerror(-ret));
		goto out;
	}
	kt_fd = kt_xdp_tags_prog_fd(t);
	print_prog_size("kt_xdp_tags", kt_fd);
	print_prog_size("empty_xdp", empty_fd);
	fflush(stdout);
	for (int c = 0; c < NC; c++) {
		uint32_t src = htonl(cases[c].saddr);

		make_pkt(&pkts[c], "192.0.2.1", 53);
		memcpy(pkts[c].ip + 12, &src, 4);
	}
	for (int r = 0; r < rounds; r++) {
		for (int c = 0; c < NC; c++) {
			struct kt_xdp_tags_stats before, after;
			double ns_empty, ns_kt;
			__u32 rv;

			if (g_stop) {
				ret = -EINTR;
				goto out;
			}
			if ((ret = kt_xdp_tags_stats(t, XDP_LIM, &before)))
				goto out;
			ret = test_run(empty_fd, &pkts[c], repeat, &ns_empty, &rv);
			if (!ret)
				sanity(rv == XDP_PASS_RV, "empty_xdp returned %u", rv);
			if (!ret)
				ret = test_run(kt_fd, &pkts[c], repeat, &ns_kt, &rv);
			if (ret) {
				fprintf(stderr, "bench: BPF_PROG_TEST_RUN: %s\n", strerror(-ret));
				goto out;
			}
			if ((ret = kt_xdp_tags_stats(t, XDP_LIM, &after)))
				goto out;
			base[nbase++] = ns_empty;
			val[c][r] = ns_kt;
			delta[c][r] = ns_kt - ns_empty;
			sanity(rv == cases[c].want_retval, "%s: program returned %u, expected %u",
			       cases[c].what, rv, cases[c].want_retval);
			__u64 adm = after.admitted - before.admitted;
			__u64 drp = after.dropped - before.dropped;
			if (cases[c].want_retval == XDP_PASS_RV)
				sanity(adm == (__u64)repeat && drp == 0,
				       "%s: counted %llu admitted, %llu dropped of %d runs",
				       cases[c].what, (unsigned long long)adm,
				       (unsigned long long)drp, repeat);
			else
				/* the first run of the first round takes the one token */
				sanity(adm + drp == (__u64)repeat && drp + 1 >= (__u64)repeat,
				       "%s: counted %llu admitted, %llu dropped of %d runs",
				       cases[c].what, (unsigned long long)adm,
				       (unsigned long long)drp, repeat);
		}
	}
	/* the clock read alone, paired with the empty program likewise */
	int clock_fd = bpf_program__fd(e->empty->progs.clock_xdp);
	double clk_val[16], clk_delta[16];
	for (int r = 0; r < rounds; r++) {
		double ns_empty, ns_clk;
		__u32 rv;

		ret = test_run(empty_fd, &pkts[0], repeat, &ns_empty, &rv);
		if (!ret)
			ret = test_run(clock_fd, &pkts[0], repeat, &ns_clk, &rv);
		if (ret) {
			fprintf(stderr, "bench: BPF_PROG_TEST_RUN: %s\n", strerror(-ret));
			goto out;
		}
		sanity(rv == XDP_PASS_RV, "clock_xdp returned %u", rv);
		clk_val[r] = ns_clk;
		clk_delta[r] = ns_clk - ns_empty;
	}
	double b = median(base, nbase);
	for (int c = 0; c < NC; c++)
		row_ns_delta(cases[c].what, median(val[c], rounds), b, median(delta[c], rounds), 60);
	row_ns_delta("xdp: clock read only (bpf_ktime_get_coarse_ns)", median(clk_val, rounds), b,
		     median(clk_delta, rounds), NAN);
	ret = 0;
out:
	kt_xdp_tags_close(t);
	kt_bpffx_rm_pins(pin);
	return ret;
}
