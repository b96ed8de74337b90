/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* kt_sk_pace, the per-socket pacing state (struct kt_sk_pace): the egress
 * program records the byte bucket a TCP socket's packets charge, the
 * sockops program paces the socket below that bucket's rate. Only these
 * two objects declare it (pinned by name, so they share one map). */
#ifndef KTHROTTLE_PACE_BPF_H
#define KTHROTTLE_PACE_BPF_H

#include "kthrottle.bpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct kt_sk_pace);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kt_sk_pace SEC(".maps");

#endif
