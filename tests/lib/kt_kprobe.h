/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Probes of kernel features some tests need that an older (or a locked
 * down) kernel lacks: such tests skip with the reason there instead of
 * failing on what they do not test. Each probe asks the running kernel
 * itself (no version numbers) once per process, as root. An answer the
 * probe cannot give (the probe itself refused for some other reason)
 * fails the calling cmocka test, naming why. */
#ifndef KT_KPROBE_H
#define KT_KPROBE_H

/* NULL when BPF_PROG_TEST_RUN gives a cgroup_skb program the packet's
 * data (skb->data .. skb->data_end); otherwise the reason to skip. */
const char *kt_kprobe_skb_test_data(void);

/* NULL when the in-flight audit's programs (bpf/audit.bpf.c) load and its
 * iterator over kt_sk_slot attaches, as kt_inflight_audit_open does;
 * otherwise (EPERM, EINVAL, ENOTSUPP, or the audit named in
 * KT_REFUSE_FEATURES) the reason to skip, naming the program and the
 * error. */
const char *kt_kprobe_audit(void);

#endif
