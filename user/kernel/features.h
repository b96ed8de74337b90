/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The kernel features kthrottled uses beyond what every supported kernel
 * (Linux 6.1 and later) has, each probed rather than assumed: a BPF object
 * the kernel refuses, an iterator it will not load, a qdisc it lacks. A
 * feature that is off turns off only what needs it; status, health, the
 * kthrottle_kernel_feature metric and the log name it and why.
 *
 * Each BPF object is one feature, loaded on its own, so a refused object
 * leaves the limits that do not need it enforced. A kernel without a helper
 * every object needs (bpf_loop, bpf_set_retval: Linux 5.17, 5.18) is
 * refused at start by kt_features_check_minimum. */
#ifndef KT_FEATURES_H
#define KT_FEATURES_H

#include <stdbool.h>
#include <stddef.h>

enum kt_feature {
	KT_FEAT_CONNECT,  /* cgroup/connect4,6: connection and in-flight limits */
	KT_FEAT_SENDMSG,  /* cgroup/sendmsg4,6: datagram limits (unconnected UDP) */
	KT_FEAT_EGRESS,   /* cgroup_skb/egress: packet and byte limits, datagrams of connected UDP */
	KT_FEAT_SOCK,     /* cgroup/sock_create, sock_release: raw sockets refused, in-flight slots given back */
	KT_FEAT_SOCKOPS,  /* sockops: TCP under a byte limit paced, in-flight slots given back at TCP close */
	KT_FEAT_AUDIT,    /* iter/bpf_sk_storage_map: the in-flight audit */
	KT_FEAT_RINGBUF,  /* BPF ring buffer: throttle events */
	KT_FEAT_FQ,       /* the fq qdisc: EDT pacing of TCP under byte limits */
	KT_FEAT_COUNT
};
/* The BPF objects, the first features in the enum (kt_bpf's skeletons). */
#define KT_FEAT_N_OBJECTS (KT_FEAT_SOCKOPS + 1)

enum kt_feat_state {
	KT_FEAT_UNPROBED = 0, /* not asked yet (the audit: no in-flight limit so far) */
	KT_FEAT_ON,
	KT_FEAT_OFF,
};

struct kt_feature_state {
	enum kt_feat_state state;
	char why[240]; /* OFF: the kernel's answer, one line */
};

struct kt_features {
	struct kt_feature_state f[KT_FEAT_COUNT];
};

/* "connect", "sendmsg", ... as status and the metric's label name them. */
const char *kt_feature_name(enum kt_feature f);
/* What is lost without it, for the log and status ("packet and byte limits"). */
const char *kt_feature_effect(enum kt_feature f);
/* Records a probe's answer (why: NULL or "" when on). Returns true when
 * the state changed, so the caller logs only changes. */
bool kt_features_set(struct kt_features *fs, enum kt_feature f, bool on, const char *why);
bool kt_feature_on(const struct kt_features *fs, enum kt_feature f);
/* The features a limit of `unit` needs to be enforced at all (bit per
 * enum kt_feature): without one of them, none of its traffic is limited,
 * or (in-flight without sock_release) its slots would never come back. */
unsigned kt_unit_needs(unsigned unit);
/* The features it uses beyond those, each of which closes one gap
 * (raw sockets, connected UDP, pacing, the audit, a call's maxDelay). */
unsigned kt_unit_uses(unsigned unit, bool allow_raw_sockets, bool max_delay);
/* The first feature of mask that is off (KT_FEAT_COUNT: none). */
enum kt_feature kt_features_first_off(const struct kt_features *fs, unsigned mask);
/* How many features are off. */
int kt_features_off(const struct kt_features *fs);

/* Probes what needs no BPF object of ours: ring buffers (libbpf's map
 * probe) and the fq qdisc (built in, loaded, or a module of the running
 * kernel). */
void kt_features_probe_kernel(struct kt_features *fs);
/* 0 when the kernel has every helper all objects need; else -ENOTSUP
 * with a line naming the missing helper, the kernel that added it and
 * the minimum kernel. */
int kt_features_check_minimum(char *err, size_t errlen);

/* Test hook: KT_REFUSE_FEATURES="egress,audit" makes the loader treat
 * those features as refused by the kernel (EPERM), to show what the
 * daemon does on a kernel that refuses them. Returns true for a feature
 * named there. */
#define KT_REFUSE_ENV "KT_REFUSE_FEATURES"
bool kt_feature_refused_by_env(enum kt_feature f);

/* The last lines of the verifier's log that libbpf printed while loading
 * (kt_log's libbpf callback keeps them): `line` gets the one that names
 * the error, `tail` (may be NULL) up to the last KT_VLOG_TAIL lines. */
#define KT_VLOG_TAIL 12
void kt_features_vlog_reset(void);
void kt_features_vlog_feed(const char *text);
bool kt_features_vlog_line(char *line, size_t len, char *tail, size_t tail_len);

#endif
