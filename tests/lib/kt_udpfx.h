/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The UDP fixture of the e2e tests that count what member cgroups' datagrams
 * a limit let through: a loopback receiver with room for every datagram,
 * the count of what reached it, and kt-load run from several cgroups at
 * once. The functions assert with cmocka (this header includes it). */
#ifndef KT_UDPFX_H
#define KT_UDPFX_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "ktest.h"

/* cmocka: a UDP socket bound to 127.0.0.1 on a free port (*port), with an
 * 8 MiB receive queue, so a test's bounded load is not dropped at it. */
int kt_udpfx_receiver(int *port);
/* Reads every datagram waiting at fd; how many there were. */
unsigned long long kt_udpfx_drain(int fd);
/* cmocka: kt-load from cgroups cg[0..n) to 127.0.0.1:port[i], all at once,
 * each for secs with the extra kt-load arguments (NULL-terminated, or
 * NULL); each one's result in res[i]. */
void kt_udpfx_load_all(int n, const char *const *cg, const int *port, double secs,
		       char *const extra[], struct ktest_load *res);

#endif
