// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Kernel feature probes for tests (kt_kprobe.h). */
#include <errno.h>
#include <net/ethernet.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>

#include "audit.skel.h"
#include "kernel/features.h"
#include "kt_kprobe.h"

#ifndef ENOTSUPP
#define ENOTSUPP 524 /* the kernel's own, not in the C library's errno.h */
#endif

#define INSN(c, d, s, o, i)                                                                        \
	((struct bpf_insn){ .code = (c), .dst_reg = (d), .src_reg = (s), .off = (o), .imm = (i) })

/* What the probe program returns (cgroup_skb egress allows 0-3). */
enum { SAW_NOTHING = 0, SAW_IP = 1, SAW_OTHER = 2 };

/* Before Linux commit ed3e469d021c ("bpf: fix cgroup_skb prog test run
 * direct packet access", December 2024) the test run computed no data
 * pointers for cgroup_skb: data_end stayed 0, so every bounds check fails
 * and kt_egress passes every packet unread. A program built here reads
 * the first byte of a crafted IPv4 packet through data/data_end as
 * kt_egress does: SAW_IP says the kernel gives it the packet. */
const char *kt_kprobe_skb_test_data(void)
{
	static int known; /* 0: not asked yet, 1: yes, 2: no */
	const struct bpf_insn prog[] = {
		INSN(BPF_LDX | BPF_MEM | BPF_W, BPF_REG_2, BPF_REG_1, offsetof(struct __sk_buff, data), 0),
		INSN(BPF_LDX | BPF_MEM | BPF_W, BPF_REG_3, BPF_REG_1, offsetof(struct __sk_buff, data_end), 0),
		INSN(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, SAW_NOTHING),
		INSN(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_4, BPF_REG_2, 0, 0),
		INSN(BPF_ALU64 | BPF_ADD | BPF_K, BPF_REG_4, 0, 0, sizeof(struct iphdr)),
		INSN(BPF_JMP | BPF_JGT | BPF_X, BPF_REG_4, BPF_REG_3, 4, 0), /* to exit */
		INSN(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, SAW_OTHER),
		INSN(BPF_LDX | BPF_MEM | BPF_B, BPF_REG_5, BPF_REG_2, 0, 0),
		INSN(BPF_JMP | BPF_JNE | BPF_K, BPF_REG_5, 0, 1, 0x45), /* to exit */
		INSN(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, SAW_IP),
		INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
	};
	uint8_t pkt[64] = { 0 }; /* Ethernet, IPv4 (version 4, 5 words), zeros */
	struct ether_header eth = { .ether_type = htons(ETHERTYPE_IP) };
	struct iphdr ip = { .version = 4, .ihl = 5, .ttl = 64, .protocol = IPPROTO_UDP,
			    .tot_len = htons(sizeof(pkt) - sizeof(eth)),
			    .saddr = htonl(0x0a000001), .daddr = htonl(0x0a000002) };
	char log[4096] = "";
	LIBBPF_OPTS(bpf_prog_load_opts, lo, .expected_attach_type = BPF_CGROUP_INET_EGRESS,
		    .log_buf = log, .log_size = sizeof(log), .log_level = 1);
	LIBBPF_OPTS(bpf_test_run_opts, ro, .data_in = pkt, .data_size_in = sizeof(pkt), .repeat = 1);
	int fd, ret, e;

	if (known)
		return known == 1 ? NULL
				  : "this kernel's BPF_PROG_TEST_RUN gives cgroup_skb no packet data "
				    "(data_end unset before Linux commit ed3e469d021c, December 2024)";
	memcpy(pkt, &eth, sizeof(eth));
	memcpy(pkt + sizeof(eth), &ip, sizeof(ip));
	fd = bpf_prog_load(BPF_PROG_TYPE_CGROUP_SKB, "kt_probe_data", "Dual BSD/GPL", prog,
			   sizeof(prog) / sizeof(prog[0]), &lo);
	if (fd < 0) {
		e = errno;
		print_error("probe: cannot load a cgroup_skb program: %s\n%s", strerror(e), log);
		fail();
	}
	ret = bpf_prog_test_run_opts(fd, &ro);
	e = errno;
	close(fd);
	if (ret != 0) {
		print_error("probe: BPF_PROG_TEST_RUN of a cgroup_skb program: %s\n", strerror(e));
		fail();
	}
	if (ro.retval != SAW_IP && ro.retval != SAW_NOTHING) {
		print_error("probe: a cgroup_skb test run saw data, not the packet given (%u)\n",
			    ro.retval);
		fail();
	}
	known = ro.retval == SAW_IP ? 1 : 2;
	return kt_kprobe_skb_test_data();
}

static const char *err_name(int e)
{
	return e == ENOTSUPP ? "not supported (ENOTSUPP)" : strerror(e);
}

static int quiet(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	(void)level;
	(void)fmt;
	(void)ap;
	return 0;
}

/* The audit's object on maps of its own (no pins: the probe must touch
 * none of a daemon's or a test's), loading only the program `only`
 * (NULL: all). 0 or -errno; *skel set on success. */
static int audit_load(const char *only, struct kt_audit **skel)
{
	struct bpf_program *p;
	struct bpf_map *m;
	int ret;

	*skel = kt_audit__open();
	if (!*skel)
		return errno ? -errno : -EINVAL;
	bpf_object__for_each_map(m, (*skel)->obj)
		bpf_map__set_pin_path(m, NULL);
	bpf_object__for_each_program(p, (*skel)->obj)
		if (only && strcmp(bpf_program__name(p), only))
			bpf_program__set_autoload(p, false);
	ret = kt_audit__load(*skel);
	if (ret) {
		kt_audit__destroy(*skel);
		*skel = NULL;
	}
	return ret;
}

/* Which program of the audit's object is refused when each loads alone:
 * "name (section)" into buf, or nothing when none is alone. */
static void audit_refused(char *buf, size_t len)
{
	struct kt_audit *all = kt_audit__open(), *one;
	struct bpf_program *p;

	if (!all)
		return;
	bpf_object__for_each_program(p, all->obj) {
		int r = audit_load(bpf_program__name(p), &one);

		kt_audit__destroy(one);
		if (r) {
			snprintf(buf, len, "%s (%s)", bpf_program__name(p), bpf_program__section_name(p));
			break;
		}
	}
	kt_audit__destroy(all);
}

/* One machine refused iter/bpf_sk_storage_map programs with EPERM while
 * task, tcp and bpf_map iterators loaded (as is bpf_map_elem): the audit
 * cannot run there, and the daemon says so (kernel feature inflight_audit
 * off). Loads what kt_inflight_audit_open loads and attaches its
 * iterator. */
const char *kt_kprobe_audit(void)
{
	static char why[256];
	static int known; /* 0: not asked yet, 1: yes, 2: no */
	LIBBPF_OPTS(bpf_iter_attach_opts, io);
	union bpf_iter_link_info li;
	char prog[128] = "its programs";
	const char *what = "cannot load";
	libbpf_print_fn_t was;
	struct kt_audit *skel;
	struct bpf_link *link;
	int ret;

	if (known)
		return known == 1 ? NULL : why;
	/* the daemon's and kt_inflight_audit_open's test hook: refused there too */
	if (kt_feature_refused_by_env(KT_FEAT_AUDIT)) {
		snprintf(why, sizeof(why), "the in-flight audit is refused by " KT_REFUSE_ENV);
		known = 2;
		return why;
	}
	was = libbpf_set_print(quiet); /* a refusal is one line, not the verifier's log */
	ret = audit_load(NULL, &skel);
	if (ret) {
		audit_refused(prog, sizeof(prog));
	} else {
		memset(&li, 0, sizeof(li));
		li.map.map_fd = bpf_map__fd(skel->maps.kt_sk_slot);
		io.link_info = &li;
		io.link_info_len = sizeof(li);
		link = bpf_program__attach_iter(skel->progs.kt_audit_marks, &io);
		ret = link ? 0 : errno ? -errno : -EINVAL;
		what = "cannot attach";
		snprintf(prog, sizeof(prog), "%s (%s)", bpf_program__name(skel->progs.kt_audit_marks),
			 bpf_program__section_name(skel->progs.kt_audit_marks));
		bpf_link__destroy(link);
		kt_audit__destroy(skel);
	}
	libbpf_set_print(was);
	if (ret != 0 && ret != -EPERM && ret != -EINVAL && ret != -ENOTSUPP) {
		print_error("probe: the in-flight audit: %s %s: %s\n", what, prog, err_name(-ret));
		fail();
	}
	snprintf(why, sizeof(why), "this kernel refuses the in-flight audit: %s %s: %s", what, prog,
		 err_name(-ret));
	known = ret == 0 ? 1 : 2;
	return known == 1 ? NULL : why;
}
