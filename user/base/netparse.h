/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Network values as the config writes them: CIDRs, ports and port ranges,
 * host:port, percent-encoded URL parts. Pure string parsers: each returns
 * NULL or why the value is refused, a phrase to follow the quoted value
 * ("has a bad prefix length"). */
#ifndef KT_NETPARSE_H
#define KT_NETPARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "base/config.h"

/* "10.0.0.0/8", "fd00::/64", or a plain address (host prefix). IPv4 becomes
 * v4-mapped with prefix + 96 so one LPM trie serves both families. Host bits
 * are cleared: "10.1.2.3/8" means 10.0.0.0/8. */
const char *kt_parse_cidr(const char *s, struct kt_cidr *out);
/* The same as a tag prefix, kept in its own family (IPv4 in addr[0..3]). */
const char *kt_parse_tag_prefix(const char *s, struct kt_tag_prefix *out);
/* "443", "8000-8080". */
const char *kt_parse_ports(const char *s, uint16_t *lo, uint16_t *hi);
/* s[0..n) has more than one ':' outside brackets: an IPv6 address that could
 * end with the port ("::1:8080") or not. Refused for the ambiguity, with
 * the bracketed forms it may have meant (defport > 0: the port is optional);
 * the reason is written in buf. */
const char *kt_v6_needs_brackets(const char *s, size_t n, int defport, char *buf, size_t len);
/* "host:port", "[v6]:port", or without ":port" when defport > 0. The host is
 * returned without brackets. Returns NULL or a reason (maybe in buf);
 * *host is malloc'd. */
const char *kt_parse_hostport(const char *s, size_t n, int defport, char **host, int *port,
			      char *buf, size_t buflen);
/* Two TCP listeners that cannot both bind: the same port on the same
 * address, or on a wildcard covering the other (:: covers IPv4 too). */
bool kt_listeners_clash(const char *a, int pa, const char *b, int pb);
/* Percent-decodes s[0..n) into a new string; NULL for empty input; sets *bad
 * on a malformed escape or a decoded NUL, *nomem when out of memory. */
char *kt_pct_decode(const char *s, size_t n, bool *bad, bool *nomem);

#endif
