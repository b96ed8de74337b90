// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Network value parsers for the config (netparse.h): pure, no YAML. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/netparse.h"

const char *kt_parse_cidr(const char *s, struct kt_cidr *out)
{
	char addr[INET6_ADDRSTRLEN + 1];
	const char *slash = strchr(s, '/');
	size_t alen = slash ? (size_t)(slash - s) : strlen(s);
	unsigned char v4[4];
	int plen, maxlen, i;

	if (!alen || alen >= sizeof(addr))
		return "is not an IPv4 or IPv6 address";
	memcpy(addr, s, alen);
	addr[alen] = '\0';
	memset(out, 0, sizeof(*out));
	if (inet_pton(AF_INET, addr, v4) == 1) {
		out->addr[10] = out->addr[11] = 0xff;
		memcpy(out->addr + 12, v4, 4);
		maxlen = 32;
	} else if (inet_pton(AF_INET6, addr, out->addr) == 1) {
		maxlen = 128;
	} else {
		return "is not an IPv4 or IPv6 address";
	}
	plen = maxlen;
	if (slash) {
		const char *p = slash + 1;

		if (!*p || strlen(p) > 3 || strspn(p, "0123456789") != strlen(p))
			return "has a bad prefix length";
		plen = atoi(p);
		if (plen > maxlen)
			return maxlen == 32 ? "has a prefix length over 32" :
					      "has a prefix length over 128";
	}
	out->prefixlen = (uint8_t)(plen + (maxlen == 32 ? 96 : 0));
	for (i = out->prefixlen; i < 128; i++)
		out->addr[i / 8] &= (uint8_t)~(0x80u >> (i % 8));
	return NULL;
}

/* A CIDR (or a bare address) as a tag prefix: kt_parse_cidr's checks and
 * masking, kept in its own family (IPv4 in addr[0..3]). */
const char *kt_parse_tag_prefix(const char *s, struct kt_tag_prefix *out)
{
	struct kt_cidr cd;
	const char *why = kt_parse_cidr(s, &cd);

	if (why)
		return why;
	memset(out, 0, sizeof(*out));
	if (strchr(s, ':')) {
		out->family = 6;
		out->prefix_len = cd.prefixlen;
		memcpy(out->addr, cd.addr, 16);
	} else {
		out->family = 4;
		out->prefix_len = (uint8_t)(cd.prefixlen - 96);
		memcpy(out->addr, cd.addr + 12, 4);
	}
	return NULL;
}

/* "443", "8000-8080". */
const char *kt_parse_ports(const char *s, uint16_t *lo, uint16_t *hi)
{
	const char *dash = strchr(s, '-');
	long a, b;
	char *end;

	if (!(*s >= '0' && *s <= '9'))
		return "is not a port or port range (e.g. 443, 8000-8080)";
	a = strtol(s, &end, 10);
	if (end == s || (dash ? end != dash : *end != '\0'))
		return "is not a port or port range (e.g. 443, 8000-8080)";
	b = a;
	if (dash) {
		if (!(dash[1] >= '0' && dash[1] <= '9'))
			return "is not a port or port range (e.g. 443, 8000-8080)";
		b = strtol(dash + 1, &end, 10);
		if (*end)
			return "is not a port or port range (e.g. 443, 8000-8080)";
	}
	if (a > 65535 || b > 65535)
		return "has a port over 65535";
	if (a > b)
		return "range runs backwards";
	*lo = (uint16_t)a;
	*hi = (uint16_t)b;
	return NULL;
}

static bool host_chars_ok(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		char ch = s[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '.' || ch == '-' || ch == '_'))
			return false;
	}
	return n > 0 && n <= 253;
}

static bool is_v6(const char *s, size_t n)
{
	char tmp[INET6_ADDRSTRLEN + 1];
	struct in6_addr a6;

	if (!n || n >= sizeof(tmp))
		return false;
	memcpy(tmp, s, n);
	tmp[n] = '\0';
	return inet_pton(AF_INET6, tmp, &a6) == 1;
}

/* s[0..n) has more than one ':' outside brackets: an IPv6 address that could
 * end with the port ("::1:8080") or not. Refused for the ambiguity, with
 * the bracketed forms it may have meant (defport > 0: the port is optional). */
const char *kt_v6_needs_brackets(const char *s, size_t n, int defport, char *buf, size_t len)
{
	const char *colon = s + n;
	size_t hl, off = 0;
	bool split, whole;

	while (colon > s && colon[-1] != ':')
		colon--;
	hl = colon > s ? (size_t)(colon - 1 - s) : 0;
	split = colon < s + n && strspn(colon, "0123456789") == (size_t)(s + n - colon) &&
		is_v6(s, hl);
	whole = defport > 0 && is_v6(s, n);
	off = (size_t)snprintf(buf, len, "is ambiguous: an IPv6 address needs brackets");
	if (split && off < len)
		off += (size_t)snprintf(buf + off, len - off, ", \"[%.*s]:%.*s\"", (int)hl, s,
					(int)(s + n - colon), colon);
	if (whole && off < len)
		off += (size_t)snprintf(buf + off, len - off, "%s\"[%.*s]\" (port %d)",
					split ? " or " : ", ", (int)n, s, defport);
	if (!split && !whole && off < len)
		snprintf(buf + off, len - off, " ([::1]:%d)", defport > 0 ? defport : 8080);
	return buf;
}

/* "host:port", "[v6]:port", or without ":port" when defport > 0. The host is
 * returned without brackets. Returns NULL or a reason (maybe in buf);
 * *host is malloc'd. */
const char *kt_parse_hostport(const char *s, size_t n, int defport, char **host, int *port,
			      char *buf, size_t buflen)
{
	const char *h = s, *rest;
	size_t hlen;

	*host = NULL;
	if (n && s[0] == '[') {
		const char *close = memchr(s, ']', n);
		char tmp[INET6_ADDRSTRLEN + 1];
		struct in6_addr a6;

		if (!close)
			return "has an unclosed [";
		h = s + 1;
		hlen = (size_t)(close - h);
		if (!hlen || hlen >= sizeof(tmp))
			return "has a bad IPv6 address";
		memcpy(tmp, h, hlen);
		tmp[hlen] = '\0';
		if (inet_pton(AF_INET6, tmp, &a6) != 1)
			return "has a bad IPv6 address";
		rest = close + 1;
	} else {
		const char *colon = memchr(s, ':', n);

		if (colon && memchr(colon + 1, ':', n - (size_t)(colon + 1 - s)))
			return kt_v6_needs_brackets(s, n, defport, buf, buflen);
		hlen = colon ? (size_t)(colon - s) : n;
		if (!host_chars_ok(s, hlen))
			return "has a bad host name";
		rest = s + hlen;
	}
	if (rest == s + n) {
		if (defport <= 0)
			return "needs a port (host:port)";
		*port = defport;
	} else {
		long p = 0;
		const char *q;

		if (*rest != ':' || rest + 1 == s + n)
			return "has a bad port";
		for (q = rest + 1; q < s + n; q++) {
			if (*q < '0' || *q > '9' || p > 65535)
				return "has a bad port";
			p = p * 10 + (*q - '0');
		}
		if (p < 1 || p > 65535)
			return "has a port out of range 1..65535";
		*port = (int)p;
	}
	*host = strndup(h, hlen);
	return *host ? NULL : "out of memory";
}

/* Two TCP listeners that cannot both bind: the same port on the same
 * address, or on a wildcard covering the other (:: covers IPv4 too). */
bool kt_listeners_clash(const char *a, int pa, const char *b, int pb)
{
	static const unsigned char any[16] = { 0 };
	unsigned char x[16] = { 0 }, y[16] = { 0 };
	int fx, fy;

	if (pa != pb)
		return false;
	fx = inet_pton(AF_INET, a, x) == 1 ? 4 : inet_pton(AF_INET6, a, x) == 1 ? 6 : 0;
	fy = inet_pton(AF_INET, b, y) == 1 ? 4 : inet_pton(AF_INET6, b, y) == 1 ? 6 : 0;
	if (!fx || !fy)
		return !strcmp(a, b);
	if (fx == fy && !memcmp(x, y, 16))
		return true;
	if (!memcmp(x, any, 16) && (fx == fy || fx == 6))
		return true;
	return !memcmp(y, any, 16) && (fx == fy || fy == 6);
}

static int hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* Percent-decodes s[0..n) into a new string; NULL for empty input; sets *bad
 * on a malformed escape or a decoded NUL. */
char *kt_pct_decode(const char *s, size_t n, bool *bad, bool *nomem)
{
	char *out;
	size_t i, o = 0;

	if (!n)
		return NULL;
	out = malloc(n + 1);
	if (!out) {
		*nomem = true;
		return NULL;
	}
	for (i = 0; i < n; i++) {
		if (s[i] == '%') {
			int hi = i + 2 < n ? hexval(s[i + 1]) : -1;
			int lo = i + 2 < n ? hexval(s[i + 2]) : -1;

			if (hi < 0 || lo < 0 || (hi | lo) == 0) {
				*bad = true;
				break;
			}
			out[o++] = (char)(hi << 4 | lo);
			i += 2;
		} else {
			out[o++] = s[i];
		}
	}
	out[o] = '\0';
	if (*bad) {
		explicit_bzero(out, n + 1);
		free(out);
		return NULL;
	}
	return out;
}
