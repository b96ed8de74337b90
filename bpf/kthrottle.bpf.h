/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What every kthrottle program object includes: the license and the
 * shared path, one header per concern under bpf/lib/ (maps, members,
 * classify, events, charge, inflight, sockaddr). */
#ifndef KTHROTTLE_BPF_H
#define KTHROTTLE_BPF_H

#include "lib/maps.h"
#include "lib/members.h"
#include "lib/classify.h"
#include "lib/events.h"
#include "lib/charge.h"
#include "lib/inflight.h"
#include "lib/sockaddr.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#endif /* KTHROTTLE_BPF_H */
