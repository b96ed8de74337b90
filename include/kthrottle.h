/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * kthrottle: types shared by the BPF programs and userspace, and the decision
 * math, one header per concern under include/kthrottle/ (abi.h: the maps'
 * structs; gcra.h: the decision; tags.h, strict.h, coop.h: those limits).
 * Everything here compiles both with `clang -target bpf` and on the host,
 * so the unit tests exercise the exact arithmetic the kernel runs.
 *
 * Every struct has fixed-width fields, explicit padding and a size assertion:
 * the layout is an ABI between the programs, the daemon, kthrottlectl and
 * whatever an operator writes by hand with bpftool.
 */
#ifndef KTHROTTLE_H
#define KTHROTTLE_H

#include "kthrottle/abi.h"
#include "kthrottle/gcra.h"
#include "kthrottle/tags.h"
#include "kthrottle/strict.h"
#include "kthrottle/coop.h"

#endif /* KTHROTTLE_H */
