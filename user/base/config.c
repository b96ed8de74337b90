// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* kthrottled configuration: YAML (libyaml document API) walked against a
 * fixed schema. Every mapping is checked for unknown and duplicate keys before
 * its values are read, so a typo never silently falls back to a default. Each
 * error is one line naming file, line and field path. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <search.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <yaml.h>
#include <openssl/evp.h>

#include "config.h"
#include "volfile.h"

#define FIELD_LEN 200            /* longest field path we print */
#define MAX_FILE_BYTES KT_CONFIG_MAX_BYTES /* refuse anything huge */
#define MAX_SECRET_BYTES (64 << 10) /* a password, or a PEM bundle some day */
#define MAX_DEPTH 64               /* real configs nest 8 deep */
#define MAX_ANCHORS 256            /* libyaml looks each alias up in a list of them */
#define MAX_PATH_BYTES 4095
#define MAX_RATE 1e12
#define NS_PER_MS 1000000ULL
#define NS_PER_SEC 1000000000ULL
#define KT_XSTR(x) #x
#define KT_STR(x) KT_XSTR(x)
#define NAME_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-"

struct ctx {
	const char *file;
	yaml_document_t *doc;
	char *err;
	size_t errlen;
	void *limit_names; /* tsearch tree of the limits parsed so far, by name */
};

static int cmp_limit_name(const void *x, const void *y)
{
	return strcmp(((const struct kt_limit_cfg *)x)->name, ((const struct kt_limit_cfg *)y)->name);
}

static void no_free(void *p)
{
	(void)p;
}

/* ---- names ------------------------------------------------------------ */

static const char *const unit_names[] = { "connection", "datagram", "packet", "byte", "request" };
_Static_assert(sizeof(unit_names) / sizeof(unit_names[0]) == KT_UNIT_COUNT, "one name per unit");
static const char *const mode_names[] = { "relaxed", "scheduled", "onlyIfUsed", "goBackN" };
static const char *const scope_names[] = { "pod", "node" };
static const char *const share_names[] = { "equal", "demand" };
/* What a refused connect() or sendmsg() may fail with (`errno:`): errors a
 * caller can tell from a dead peer and retry later. */
static const char *const errno_names[] = { "EBUSY",  "EAGAIN",	   "ECONNREFUSED",
					   "ETIMEDOUT", "ENOBUFS", "EHOSTUNREACH" };
static const int errno_values[] = { EBUSY, EAGAIN, ECONNREFUSED, ETIMEDOUT, ENOBUFS, EHOSTUNREACH };
_Static_assert(sizeof(errno_names) / sizeof(errno_names[0]) ==
		       sizeof(errno_values) / sizeof(errno_values[0]),
	       "one value per errno name");
static const char *const failure_names[] = { "conservative", "open", "closed" };
static const char *const store_kind_names[] = { "local", "static", "redis" };
static const char *const redis_mode_names[] = { "single", "sentinel", "cluster" };
static const char *const proto_names[] = { "any", "tcp", "udp" };

#define NAME_OF(tab, i) ((unsigned)(i) < sizeof(tab) / sizeof(tab[0]) ? tab[i] : "?")

const char *kt_unit_name(enum kt_unit u) { return NAME_OF(unit_names, u); }
const char *kt_mode_name(enum kt_mode m) { return NAME_OF(mode_names, m); }
const char *kt_scope_name(enum kt_scope s) { return NAME_OF(scope_names, s); }
const char *kt_share_name(enum kt_share_policy s) { return NAME_OF(share_names, s); }
const char *kt_store_failure_name(enum kt_store_failure f) { return NAME_OF(failure_names, f); }
const char *kt_store_kind_name(enum kt_store_kind k) { return NAME_OF(store_kind_names, k); }

/* ---- errors ----------------------------------------------------------- */

static int line_of(const yaml_node_t *n)
{
	return n ? (int)n->start_mark.line + 1 : 1;
}

__attribute__((format(printf, 5, 6)))
static int fail_code(struct ctx *c, int code, const yaml_node_t *n, const char *field,
		     const char *fmt, ...)
{
	char msg[KT_ERR_LEN];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (c->err && c->errlen)
		snprintf(c->err, c->errlen, "%s:%d: %s: %s", c->file, line_of(n), field, msg);
	return code;
}

#define fail(c, n, field, ...) fail_code(c, -EINVAL, n, field, __VA_ARGS__)
#define oom(c, n, field) fail_code(c, -ENOMEM, n, field, "out of memory")

/* A value shown in an error: short, printable, one line. Returned by value so
 * it can be used inline; it lives until the end of the full expression. */
struct shown {
	char s[52];
};

static struct shown show_str(const char *v)
{
	struct shown out;
	size_t i, n = 0;

	for (i = 0; v[i] && n < sizeof(out.s) - 4; i++)
		out.s[n++] = (v[i] >= 0x20 && v[i] < 0x7f) ? v[i] : '?';
	if (v[i])
		out.s[n++] = '.', out.s[n++] = '.', out.s[n++] = '.';
	out.s[n] = '\0';
	return out;
}

static const char *kind_of(const yaml_node_t *n)
{
	switch (n->type) {
	case YAML_MAPPING_NODE: return "a mapping";
	case YAML_SEQUENCE_NODE: return "a list";
	default: return "a scalar";
	}
}

/* Field paths: "limits[0].rateLimit.max". */
static const char *join(char *buf, const char *parent, const char *key)
{
	struct shown k = show_str(key);

	if (parent && *parent)
		snprintf(buf, FIELD_LEN, "%s.%s", parent, k.s);
	else
		snprintf(buf, FIELD_LEN, "%s", k.s);
	return buf;
}

static const char *index_of(char *buf, const char *parent, int i)
{
	snprintf(buf, FIELD_LEN, "%s[%d]", parent, i);
	return buf;
}

static void list_names(char *buf, size_t len, const char *const *names, size_t n)
{
	size_t i, off = 0;

	buf[0] = '\0';
	for (i = 0; i < n && off < len; i++) {
		int w = snprintf(buf + off, len - off, "%s%s", i ? ", " : "", names[i]);
		if (w < 0)
			break;
		off += (size_t)w;
	}
}

/* ---- node access ------------------------------------------------------ */

static yaml_node_t *node_at(struct ctx *c, int id)
{
	return yaml_document_get_node(c->doc, id);
}

static const char *sval(const yaml_node_t *n)
{
	return (const char *)n->data.scalar.value;
}

/* YAML null: an absent value, "~" or "null". An empty block reads as null,
 * so "modes: {scheduled: }" and "store:" behave like their {} forms. */
static bool is_null(const yaml_node_t *n)
{
	const char *v;

	if (!n || n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return false;
	v = sval(n);
	return !*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") ||
	       !strcmp(v, "NULL");
}

/* The mapping's key set must be a subset of `keys` (NULL-terminated; NULL:
 * any key, for maps of user names), with no key given twice. A null node is
 * an empty mapping. */
static int check_map(struct ctx *c, yaml_node_t *n, const char *field, const char *const *keys)
{
	yaml_node_pair_t *p, *q;
	char sub[FIELD_LEN];

	if (is_null(n))
		return 0;
	if (n->type != YAML_MAPPING_NODE)
		return fail(c, n, field, "expected a mapping, got %s", kind_of(n));
	for (p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
		yaml_node_t *k = node_at(c, p->key);
		size_t i;

		if (!k || k->type != YAML_SCALAR_NODE)
			return fail(c, k ? k : n, field, "keys must be strings");
		for (i = 0; keys && keys[i]; i++)
			if (!strcmp(keys[i], sval(k)))
				break;
		if (keys && !keys[i]) {
			char allowed[300];

			list_names(allowed, sizeof(allowed), keys, i);
			if (!i)
				return fail(c, k, join(sub, field, sval(k)),
					    "unknown key (this block takes no keys)");
			return fail(c, k, join(sub, field, sval(k)),
				    "unknown key (expected one of: %s)", allowed);
		}
		for (q = n->data.mapping.pairs.start; q < p; q++) {
			yaml_node_t *prev = node_at(c, q->key);

			if (!strcmp(sval(prev), sval(k)))
				return fail(c, k, join(sub, field, sval(k)),
					    "duplicate key (first at line %d)", line_of(prev));
		}
	}
	return 0;
}

/* Value of `key`, or NULL when absent. Call check_map first. */
static yaml_node_t *map_get(struct ctx *c, yaml_node_t *n, const char *key)
{
	yaml_node_pair_t *p;

	if (!n || n->type != YAML_MAPPING_NODE)
		return NULL;
	for (p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
		yaml_node_t *k = node_at(c, p->key);

		if (k && k->type == YAML_SCALAR_NODE && !strcmp(sval(k), key))
			return node_at(c, p->value);
	}
	return NULL;
}

static int missing(struct ctx *c, yaml_node_t *parent, const char *field, const char *key)
{
	char sub[FIELD_LEN];

	return fail(c, parent, join(sub, field, key), "required but missing");
}

/* ---- scalars ---------------------------------------------------------- */

/* A non-null scalar with no embedded NUL. `what` names the expected type. */
static int get_scalar(struct ctx *c, yaml_node_t *v, const char *field, const char *what,
		      const char **out)
{
	if (v->type != YAML_SCALAR_NODE)
		return fail(c, v, field, "expected %s, got %s", what, kind_of(v));
	if (is_null(v))
		return fail(c, v, field, "expected %s, got nothing", what);
	if (strlen(sval(v)) != v->data.scalar.length)
		return fail(c, v, field, "contains a NUL byte");
	*out = sval(v);
	return 0;
}

static bool has_control(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return true;
	return false;
}

static int get_str(struct ctx *c, yaml_node_t *v, const char *field, size_t maxlen, char **out)
{
	const char *s;
	int err = get_scalar(c, v, field, "a string", &s);

	if (err)
		return err;
	if (!*s)
		return fail(c, v, field, "is empty");
	if (strlen(s) > maxlen)
		return fail(c, v, field, "longer than %zu bytes", maxlen);
	if (has_control(s))
		return fail(c, v, field, "contains a control character");
	*out = strdup(s);
	return *out ? 0 : oom(c, v, field);
}

/* Decimal only: YAML's .inf, .nan, hex and octal forms, and strtod's "inf",
 * "0x10" or leading blanks are all refused before conversion. */
static bool is_decimal(const char *s, bool frac)
{
	bool digits = false;

	if (*s == '-' || *s == '+')
		s++;
	for (; *s >= '0' && *s <= '9'; s++)
		digits = true;
	if (frac && *s == '.')
		for (s++; *s >= '0' && *s <= '9'; s++)
			digits = true;
	if (!digits)
		return false;
	if (frac && (*s == 'e' || *s == 'E')) {
		s++;
		if (*s == '-' || *s == '+')
			s++;
		if (!(*s >= '0' && *s <= '9'))
			return false;
		while (*s >= '0' && *s <= '9')
			s++;
	}
	return *s == '\0';
}

static int get_number(struct ctx *c, yaml_node_t *v, const char *field, double *out)
{
	const char *s;
	int err = get_scalar(c, v, field, "a number", &s);

	if (err)
		return err;
	if (!is_decimal(s, true))
		return fail(c, v, field, "\"%s\" is not a number", show_str(s).s);
	*out = strtod(s, NULL);
	if (!isfinite(*out))
		return fail(c, v, field, "\"%s\" is out of range", show_str(s).s);
	return 0;
}

/* A number in [lo, hi]; `above_lo` makes the lower bound exclusive. */
static int get_number_in(struct ctx *c, yaml_node_t *v, const char *field, double lo, bool above_lo,
			 double hi, double *out)
{
	int err = get_number(c, v, field, out);

	if (err)
		return err;
	if (above_lo ? !(*out > lo) : !(*out >= lo))
		return fail(c, v, field, "%g must be %s %g", *out, above_lo ? "greater than" : "at least",
			    lo);
	if (*out > hi)
		return fail(c, v, field, "%g is greater than the maximum %g", *out, hi);
	return 0;
}

static int get_int(struct ctx *c, yaml_node_t *v, const char *field, long long lo, long long hi,
		   long long *out)
{
	const char *s;
	int err = get_scalar(c, v, field, "an integer", &s);

	if (err)
		return err;
	if (!is_decimal(s, false))
		return fail(c, v, field, "\"%s\" is not an integer", show_str(s).s);
	errno = 0;
	*out = strtoll(s, NULL, 10);
	if (errno || *out < lo || *out > hi)
		return fail(c, v, field, "%s is out of range %lld..%lld", show_str(s).s, lo, hi);
	return 0;
}

static int get_bool(struct ctx *c, yaml_node_t *v, const char *field, bool *out)
{
	const char *s;
	int err = get_scalar(c, v, field, "true or false", &s);

	if (err)
		return err;
	if (!strcmp(s, "true"))
		*out = true;
	else if (!strcmp(s, "false"))
		*out = false;
	else
		return fail(c, v, field, "\"%s\" is not true or false", show_str(s).s);
	return 0;
}

static int get_enum(struct ctx *c, yaml_node_t *v, const char *field, const char *const *names,
		    size_t n, int *out)
{
	char allowed[200];
	const char *s;
	size_t i;
	int err = get_scalar(c, v, field, "a string", &s);

	if (err)
		return err;
	for (i = 0; i < n; i++) {
		if (!strcmp(s, names[i])) {
			*out = (int)i;
			return 0;
		}
	}
	list_names(allowed, sizeof(allowed), names, n);
	return fail(c, v, field, "\"%s\" is not one of: %s", show_str(s).s, allowed);
}

/* ---- durations -------------------------------------------------------- */

int kt_parse_duration(const char *s, uint64_t *out_ns)
{
	static const struct {
		const char *sfx;
		uint64_t ns;
	} units[] = {
		/* two-letter units first so "ms" is not read as "m" */
		{ "ns", 1 }, { "us", 1000 }, { "\xc2\xb5s", 1000 }, { "ms", NS_PER_MS },
		{ "s", NS_PER_SEC }, { "m", 60 * NS_PER_SEC }, { "h", 3600 * NS_PER_SEC },
	};
	unsigned __int128 total = 0;
	const char *p = s;
	bool first = true;

	if (!s || !*s)
		return -EINVAL;
	while (*p) {
		uint64_t whole = 0, frac = 0, scale = 1, unit = 0;
		int digits = 0;
		size_t i;

		for (; *p >= '0' && *p <= '9'; p++, digits++) {
			if (whole > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
				return -ERANGE;
			whole = whole * 10 + (uint64_t)(*p - '0');
		}
		if (*p == '.') {
			/* digits past 1e-18 cannot change a nanosecond count */
			for (p++; *p >= '0' && *p <= '9'; p++, digits++) {
				if (scale < 1000000000000000000ULL) {
					frac = frac * 10 + (uint64_t)(*p - '0');
					scale *= 10;
				}
			}
		}
		if (!digits)
			return -EINVAL;
		for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
			size_t l = strlen(units[i].sfx);

			if (!strncmp(p, units[i].sfx, l)) {
				unit = units[i].ns;
				p += l;
				break;
			}
		}
		if (!unit) {
			/* only a whole string that is one bare number means seconds */
			if (*p || !first)
				return -EINVAL;
			unit = NS_PER_SEC;
		}
		total += (unsigned __int128)whole * unit + (unsigned __int128)frac * unit / scale;
		if (total > UINT64_MAX)
			return -ERANGE;
		first = false;
	}
	*out_ns = (uint64_t)total;
	return 0;
}

/* "1500ms" style for messages: the largest unit that divides evenly. */
static struct shown fmt_dur(uint64_t ns)
{
	static const struct {
		const char *sfx;
		uint64_t ns;
	} units[] = {
		{ "h", 3600 * NS_PER_SEC }, { "m", 60 * NS_PER_SEC }, { "s", NS_PER_SEC },
		{ "ms", NS_PER_MS }, { "us", 1000 }, { "ns", 1 },
	};
	struct shown out;
	size_t i;

	for (i = 0; i < sizeof(units) / sizeof(units[0]) - 1; i++)
		if (ns && ns % units[i].ns == 0)
			break;
	if (!ns)
		i = 2;
	snprintf(out.s, sizeof(out.s), "%llu%s", (unsigned long long)(ns / units[i].ns),
		 units[i].sfx);
	return out;
}

static int get_duration(struct ctx *c, yaml_node_t *v, const char *field, uint64_t lo, uint64_t hi,
			uint64_t *out)
{
	const char *s;
	int err = get_scalar(c, v, field, "a duration", &s);

	if (err)
		return err;
	err = kt_parse_duration(s, out);
	if (err == -ERANGE)
		return fail(c, v, field, "\"%s\" is too long a duration", show_str(s).s);
	if (err)
		return fail(c, v, field, "\"%s\" is not a duration (e.g. 250us, 100ms, 1s, 1m30s, 2h)",
			    show_str(s).s);
	if (*out < lo)
		return fail(c, v, field, "%s is shorter than the minimum %s", show_str(s).s,
			    fmt_dur(lo).s);
	if (*out > hi)
		return fail(c, v, field, "%s is longer than the maximum %s", show_str(s).s,
			    fmt_dur(hi).s);
	return 0;
}

/* ---- addresses -------------------------------------------------------- */

/* "10.0.0.0/8", "fd00::/64", or a plain address (host prefix). IPv4 becomes
 * v4-mapped with prefix + 96 so one LPM trie serves both families. Host bits
 * are cleared: "10.1.2.3/8" means 10.0.0.0/8. */
static const char *parse_cidr(const char *s, struct kt_cidr *out)
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

/* "443", "8000-8080". */
static const char *parse_ports(const char *s, uint16_t *lo, uint16_t *hi)
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
static const char *v6_needs_brackets(const char *s, size_t n, int defport, char *buf, size_t len)
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
static const char *parse_hostport(const char *s, size_t n, int defport, char **host, int *port,
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
			return v6_needs_brackets(s, n, defport, buf, buflen);
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

/* ---- files ------------------------------------------------------------ */

/* Reads a whole config or secret file of at most `cap` bytes under the
 * volume rule (volfile.h: the kubelet's symlinks are followed, nothing else
 * is); `what` names the cap in the message. */
static int read_capped(const char *path, size_t cap, const char *what, char **out, size_t *outlen,
		       const char **stage, char *why, size_t whylen)
{
	int ret = kt_volfile_read(path, cap, out, outlen, stage, why, whylen);
	size_t n = strlen(why);

	if (ret == -EFBIG)
		snprintf(why + n, whylen - n, " (the limit for %s)", what);
	return ret;
}

/* ---- store ------------------------------------------------------------ */

static void free_secret(char **p)
{
	if (*p) {
		explicit_bzero(*p, strlen(*p));
		free(*p);
		*p = NULL;
	}
}

static void auth_free(struct kt_auth_cfg *a)
{
	free(a->username);
	a->username = NULL;
	free_secret(&a->password);
	free(a->password_file);
	a->password_file = NULL;
}

static void tls_free(struct kt_tls_cfg *t)
{
	free(t->ca_cert);
	free(t->cert);
	free(t->key);
	free(t->field);
	memset(t, 0, sizeof(*t));
}

static void store_free(struct kt_store_cfg *s)
{
	int i;

	free(s->host);
	auth_free(&s->redis_auth);
	tls_free(&s->redis_tls);
	for (i = 0; i < KT_MAX_ENDPOINTS; i++)
		free(s->endpoint_host[i]);
	free(s->master_name);
	auth_free(&s->sentinel_auth);
	tls_free(&s->sentinel_tls);
	free(s->key_prefix);
	free(s->file);
	memset(s, 0, sizeof(*s));
}

static int store_defaults(struct kt_store_cfg *s)
{
	memset(s, 0, sizeof(*s));
	s->heartbeat_ns = NS_PER_SEC;
	s->stale_after = 3;
	s->valid_for_ns = 10 * NS_PER_SEC;
	s->fallback_for_ns = 60 * NS_PER_SEC;
	s->on_failure = KT_FAIL_CONSERVATIVE;
	s->key_prefix = strdup("kthrottle");
	return s->key_prefix ? 0 : -ENOMEM;
}

/* Duplicates every string so each limit owns its store; on failure every
 * pointer is either a fresh copy or NULL, so store_free is safe. */
static void dup_into(char **p, bool *ok)
{
	if (*p) {
		*p = strdup(*p);
		if (!*p)
			*ok = false;
	}
}

static int store_copy(struct kt_store_cfg *dst, const struct kt_store_cfg *src)
{
	bool ok = true;
	int i;

	*dst = *src;
	dup_into(&dst->host, &ok);
	dup_into(&dst->redis_auth.username, &ok);
	dup_into(&dst->redis_auth.password, &ok);
	dup_into(&dst->redis_auth.password_file, &ok);
	dup_into(&dst->redis_tls.ca_cert, &ok);
	dup_into(&dst->redis_tls.cert, &ok);
	dup_into(&dst->redis_tls.key, &ok);
	dup_into(&dst->redis_tls.field, &ok);
	for (i = 0; i < KT_MAX_ENDPOINTS; i++)
		dup_into(&dst->endpoint_host[i], &ok);
	dup_into(&dst->master_name, &ok);
	dup_into(&dst->sentinel_auth.username, &ok);
	dup_into(&dst->sentinel_auth.password, &ok);
	dup_into(&dst->sentinel_auth.password_file, &ok);
	dup_into(&dst->sentinel_tls.ca_cert, &ok);
	dup_into(&dst->sentinel_tls.cert, &ok);
	dup_into(&dst->sentinel_tls.key, &ok);
	dup_into(&dst->sentinel_tls.field, &ok);
	dup_into(&dst->key_prefix, &ok);
	dup_into(&dst->file, &ok);
	if (!ok) {
		store_free(dst);
		return -ENOMEM;
	}
	return 0;
}

/* One trailing newline (as editors and `echo` leave) is not part of the
 * password. why: "cannot open: ...", "larger than ...", "is empty"... */
int kt_config_read_secret(const char *path, char **out, char *why, size_t whylen)
{
	const char *stage;
	char w[128], *buf = NULL;
	size_t len = 0, size;
	int err;

	*out = NULL;
	err = read_capped(path, MAX_SECRET_BYTES, "secret files", &buf, &len, &stage, w, sizeof(w));
	if (err == -EFBIG)
		snprintf(why, whylen, "is %s", w);
	else if (err)
		snprintf(why, whylen, "cannot %s: %s", stage, w);
	if (err)
		return err;
	size = len;
	if (len && buf[len - 1] == '\n')
		len--;
	if (len && buf[len - 1] == '\r')
		len--;
	buf[len] = '\0';
	if (!len || strlen(buf) != len) {
		snprintf(why, whylen, "%s", len ? "contains a NUL byte" : "is empty");
		explicit_bzero(buf, size);
		free(buf);
		return -EINVAL;
	}
	*out = buf;
	return 0;
}

static int read_secret_file(struct ctx *c, yaml_node_t *v, const char *field, const char *path,
			    char **out)
{
	char why[160];
	int err = kt_config_read_secret(path, out, why, sizeof(why));

	if (!err)
		return 0;
	/* "cannot open X: ..." / "X is empty" */
	if (!strncmp(why, "cannot ", 7)) {
		const char *colon = strchr(why, ':');

		return fail_code(c, err, v, field, "%.*s %s%s", (int)(colon - why), why,
				 show_str(path).s, colon);
	}
	return fail_code(c, err, v, field, "%s %s", show_str(path).s, why);
}

static const char *const auth_keys[] = { "username", "password", "passwordFile", "passwordEnv",
					 NULL };

/* Secrets are never echoed: every message here names the field, not the value. */
static int parse_auth(struct ctx *c, yaml_node_t *n, const char *field, struct kt_auth_cfg *a)
{
	char sub[FIELD_LEN];
	yaml_node_t *v, *src = NULL;
	const char *s, *src_key = NULL;
	int i, err = check_map(c, n, field, auth_keys);

	if (err)
		return err;
	if ((v = map_get(c, n, "username")) &&
	    (err = get_str(c, v, join(sub, field, "username"), 256, &a->username)))
		return err;
	for (i = 1; i <= 3; i++) {
		yaml_node_t *w = map_get(c, n, auth_keys[i]);

		if (!w)
			continue;
		if (src)
			return fail(c, w, join(sub, field, auth_keys[i]),
				    "give only one of password, passwordFile, passwordEnv (%s at line %d)",
				    src_key, line_of(src));
		src = w;
		src_key = auth_keys[i];
	}
	if (!src)
		return 0;
	join(sub, field, src_key);
	if ((err = get_scalar(c, src, sub, "a string", &s)))
		return err;
	if (!*s)
		return fail(c, src, sub, "is empty");
	if (!strcmp(src_key, "password")) {
		a->password = strdup(s);
		return a->password ? 0 : oom(c, src, sub);
	}
	if (!strcmp(src_key, "passwordFile")) {
		a->password_file = strdup(s);
		if (!a->password_file)
			return oom(c, src, sub);
		return read_secret_file(c, src, sub, s, &a->password);
	}
	/* passwordEnv */
	if (!getenv(s))
		return fail(c, src, sub, "environment variable %s is not set", show_str(s).s);
	if (!*getenv(s))
		return fail(c, src, sub, "environment variable %s is empty", show_str(s).s);
	a->password = strdup(getenv(s));
	return a->password ? 0 : oom(c, src, sub);
}

static int parse_tls(struct ctx *c, yaml_node_t *n, const char *field, struct kt_tls_cfg *t)
{
	static const char *const keys[] = { "ca_cert_secret", "cert_secret", "key_secret",
					    "insecure_skip_verify", NULL };
	char sub[FIELD_LEN];
	yaml_node_t *v;
	int err = check_map(c, n, field, keys);

	if (err)
		return err;
	t->enabled = true;
	if (!(t->field = strdup(field)))
		return oom(c, n, field);
	if ((v = map_get(c, n, "ca_cert_secret"))) {
		if ((err = get_str(c, v, join(sub, field, "ca_cert_secret"), MAX_PATH_BYTES,
				   &t->ca_cert)))
			return err;
		t->ca_cert_line = line_of(v);
	}
	if ((v = map_get(c, n, "cert_secret"))) {
		if ((err = get_str(c, v, join(sub, field, "cert_secret"), MAX_PATH_BYTES, &t->cert)))
			return err;
		t->cert_line = line_of(v);
	}
	if ((v = map_get(c, n, "key_secret"))) {
		if ((err = get_str(c, v, join(sub, field, "key_secret"), MAX_PATH_BYTES, &t->key)))
			return err;
		t->key_line = line_of(v);
	}
	if ((v = map_get(c, n, "insecure_skip_verify")) &&
	    (err = get_bool(c, v, join(sub, field, "insecure_skip_verify"), &t->insecure_skip_verify)))
		return err;
	if (!t->cert != !t->key)
		return fail(c, n, field, "cert_secret and key_secret must be given together");
	return 0;
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
static char *pct_decode(const char *s, size_t n, bool *bad, bool *nomem)
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

/* redis://[user[:password]@]host[:port][/db], rediss:// for TLS. The URL may
 * carry a password, so no message here quotes it. */
static int parse_url(struct ctx *c, yaml_node_t *v, const char *field, struct kt_store_cfg *s)
{
	const char *u, *rest, *at, *why;
	char hint[200];
	size_t alen;
	bool bad = false, nomem = false;
	int err = get_scalar(c, v, field, "a string", &u);

	if (err)
		return err;
	if (!strncmp(u, "redis://", 8)) {
		rest = u + 8;
	} else if (!strncmp(u, "rediss://", 9)) {
		rest = u + 9;
		s->redis_tls.enabled = true;
	} else {
		return fail(c, v, field, "must start with redis:// or rediss://");
	}
	if (strpbrk(rest, "?#"))
		return fail(c, v, field, "query and fragment are not supported");
	if (has_control(rest) || strchr(rest, ' '))
		return fail(c, v, field, "contains a space or control character");
	alen = strcspn(rest, "/");
	at = memrchr(rest, '@', alen);
	if (at) {
		const char *colon = memchr(rest, ':', (size_t)(at - rest));
		size_t ulen = colon ? (size_t)(colon - rest) : (size_t)(at - rest);

		s->redis_auth.username = pct_decode(rest, ulen, &bad, &nomem);
		if (colon && !bad && !nomem)
			s->redis_auth.password =
				pct_decode(colon + 1, (size_t)(at - colon - 1), &bad, &nomem);
		if (nomem)
			return oom(c, v, field);
		if (bad)
			return fail(c, v, field, "bad percent-encoding in the user info");
		alen -= (size_t)(at + 1 - rest);
		rest = at + 1;
	}
	why = parse_hostport(rest, alen, 6379, &s->host, &s->port, hint, sizeof(hint));
	if (why)
		return fail(c, v, field, "%s", why);
	rest += alen;
	s->db = 0;
	if (*rest == '/' && rest[1]) {
		const char *d = rest + 1;

		if (strspn(d, "0123456789") != strlen(d) || strlen(d) > 9)
			return fail(c, v, field, "database must be a number (redis://host:6379/0)");
		s->db = atoi(d);
	}
	return 0;
}

/* Fills `dst` from a second source (a redis_auth block) where the URL or an
 * outer block left it empty; giving the same thing twice is an error. */
static int merge_auth(struct ctx *c, yaml_node_t *n, const char *field, struct kt_auth_cfg *dst,
		      struct kt_auth_cfg *src, const char *first)
{
	if ((dst->username && src->username) || (dst->password && src->password))
		return fail(c, n, field, "%s also given in %s",
			    dst->username && src->username ? "username" : "password", first);
	if (src->username) {
		dst->username = src->username;
		src->username = NULL;
	}
	if (src->password) {
		dst->password = src->password;
		src->password = NULL;
		dst->password_file = src->password_file;
		src->password_file = NULL;
	}
	return 0;
}

static int parse_endpoints(struct ctx *c, yaml_node_t *n, const char *field, struct kt_store_cfg *s)
{
	char sub[FIELD_LEN], hint[200];
	yaml_node_item_t *it;
	int i, err;

	if (n->type != YAML_SEQUENCE_NODE)
		return fail(c, n, field, "expected a list of host:port, got %s", kind_of(n));
	if (n->data.sequence.items.top == n->data.sequence.items.start)
		return fail(c, n, field, "needs at least one endpoint");
	for (it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
		yaml_node_t *e = node_at(c, *it);
		const char *str, *why;

		index_of(sub, field, s->n_endpoints);
		if (s->n_endpoints >= KT_MAX_ENDPOINTS)
			return fail(c, e, sub, "at most %d endpoints", KT_MAX_ENDPOINTS);
		if ((err = get_scalar(c, e, sub, "host:port", &str)))
			return err;
		why = parse_hostport(str, strlen(str), 0, &s->endpoint_host[s->n_endpoints],
				     &s->endpoint_port[s->n_endpoints], hint, sizeof(hint));
		if (why)
			return fail(c, e, sub, "\"%s\" %s", show_str(str).s, why);
		s->n_endpoints++;
		for (i = 0; i < s->n_endpoints - 1; i++)
			if (!strcmp(s->endpoint_host[i], s->endpoint_host[s->n_endpoints - 1]) &&
			    s->endpoint_port[i] == s->endpoint_port[s->n_endpoints - 1])
				return fail(c, e, sub, "\"%s\" is listed twice", show_str(str).s);
	}
	return 0;
}

static int parse_sentinel(struct ctx *c, yaml_node_t *n, const char *field, struct kt_store_cfg *s,
			  yaml_node_t *outer_auth, yaml_node_t *outer_tls)
{
	static const char *const keys[] = { "endpoints", "master_name", "redis_auth", "sentinel_auth",
					    "redis_tls", "sentinel_tls", NULL };
	char sub[FIELD_LEN];
	yaml_node_t *v;
	int err = check_map(c, n, field, keys);

	if (err)
		return err;
	if (!(v = map_get(c, n, "endpoints")))
		return missing(c, n, field, "endpoints");
	if ((err = parse_endpoints(c, v, join(sub, field, "endpoints"), s)))
		return err;
	if (!(v = map_get(c, n, "master_name")))
		return missing(c, n, field, "master_name");
	if ((err = get_str(c, v, join(sub, field, "master_name"), 255, &s->master_name)))
		return err;
	if ((v = map_get(c, n, "redis_auth"))) {
		if (outer_auth)
			return fail(c, v, join(sub, field, "redis_auth"),
				    "also given at redisStore.redis_auth (line %d)", line_of(outer_auth));
		if ((err = parse_auth(c, v, sub, &s->redis_auth)))
			return err;
	}
	if ((v = map_get(c, n, "redis_tls"))) {
		if (outer_tls)
			return fail(c, v, join(sub, field, "redis_tls"),
				    "also given at redisStore.redis_tls (line %d)", line_of(outer_tls));
		if ((err = parse_tls(c, v, sub, &s->redis_tls)))
			return err;
	}
	if ((v = map_get(c, n, "sentinel_auth")) &&
	    (err = parse_auth(c, v, join(sub, field, "sentinel_auth"), &s->sentinel_auth)))
		return err;
	if ((v = map_get(c, n, "sentinel_tls")) &&
	    (err = parse_tls(c, v, join(sub, field, "sentinel_tls"), &s->sentinel_tls)))
		return err;
	return 0;
}

static bool key_prefix_ok(const char *s)
{
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
		      strchr("_.:-", *s)))
			return false;
	return true;
}

static int parse_redis(struct ctx *c, yaml_node_t *n, const char *field, struct kt_store_cfg *s)
{
	static const char *const keys[] = { "mode", "url", "redis_auth", "redis_tls", "sentinel",
					    "addrs", "db", "keyPrefix", NULL };
	struct kt_auth_cfg block = { 0 };
	char sub[FIELD_LEN];
	yaml_node_t *v, *url, *auth, *tls, *sent, *addrs, *db;
	long long ll;
	int mode, err = check_map(c, n, field, keys);

	if (err)
		return err;
	if (!(v = map_get(c, n, "mode")))
		return missing(c, n, field, "mode");
	if ((err = get_enum(c, v, join(sub, field, "mode"), redis_mode_names, 3, &mode)))
		return err;
	s->redis_mode = (enum kt_redis_mode)mode;
	url = map_get(c, n, "url");
	auth = map_get(c, n, "redis_auth");
	tls = map_get(c, n, "redis_tls");
	sent = map_get(c, n, "sentinel");
	addrs = map_get(c, n, "addrs");
	db = map_get(c, n, "db");

	if (s->redis_mode != KT_REDIS_CLUSTER) {
		if (addrs)
			return fail(c, addrs, join(sub, field, "addrs"), "only used with mode: cluster");
		if (db)
			return fail(c, db, join(sub, field, "db"),
				    "only used with mode: cluster (give the db in url)");
	}
	if (s->redis_mode == KT_REDIS_CLUSTER) {
		if (url)
			return fail(c, url, join(sub, field, "url"), "not used with mode: cluster (give addrs)");
		if (sent)
			return fail(c, sent, join(sub, field, "sentinel"), "only used with mode: sentinel");
		if (!addrs)
			return missing(c, n, field, "addrs");
		if ((err = parse_endpoints(c, addrs, join(sub, field, "addrs"), s)))
			return err;
		/* Redis Cluster serves db 0 only; say so rather than ignore it */
		if (db) {
			if ((err = get_int(c, db, join(sub, field, "db"), 0, 1000000, &ll)))
				return err;
			if (ll != 0)
				return fail(c, db, sub, "%lld: Redis Cluster has only db 0", ll);
		}
		free(s->host);
		s->host = strdup(s->endpoint_host[0]);
		if (!s->host)
			return fail(c, addrs, sub, "out of memory");
		s->port = s->endpoint_port[0];
		s->db = 0;
	} else if (s->redis_mode == KT_REDIS_SINGLE) {
		if (sent)
			return fail(c, sent, join(sub, field, "sentinel"), "only used with mode: sentinel");
		if (!url)
			return missing(c, n, field, "url");
		if ((err = parse_url(c, url, join(sub, field, "url"), s)))
			return err;
	} else {
		if (url)
			return fail(c, url, join(sub, field, "url"),
				    "not used with mode: sentinel (give sentinel.endpoints)");
		if (!sent)
			return missing(c, n, field, "sentinel");
		if ((err = parse_sentinel(c, sent, join(sub, field, "sentinel"), s, auth, tls)))
			return err;
	}
	if (auth) {
		join(sub, field, "redis_auth");
		err = parse_auth(c, auth, sub, &block);
		if (!err)
			err = merge_auth(c, auth, sub, &s->redis_auth, &block, "url");
		auth_free(&block);
		if (err)
			return err;
	}
	if (tls && (err = parse_tls(c, tls, join(sub, field, "redis_tls"), &s->redis_tls)))
		return err;
	if (s->redis_auth.username && !s->redis_auth.password) {
		if (auth)
			return fail(c, auth, join(sub, field, "redis_auth"), "username needs a password");
		if (url)
			return fail(c, url, join(sub, field, "url"), "username needs a password");
		v = map_get(c, sent, "redis_auth");
		return fail(c, v, join(sub, field, "sentinel.redis_auth"), "username needs a password");
	}
	if (s->sentinel_auth.username && !s->sentinel_auth.password)
		return fail(c, map_get(c, sent, "sentinel_auth"),
			    join(sub, field, "sentinel.sentinel_auth"), "username needs a password");
	if ((v = map_get(c, n, "keyPrefix"))) {
		join(sub, field, "keyPrefix");
		free(s->key_prefix);
		s->key_prefix = NULL;
		if ((err = get_str(c, v, sub, 64, &s->key_prefix)))
			return err;
		if (!key_prefix_ok(s->key_prefix))
			return fail(c, v, sub, "\"%s\" may only hold letters, digits and _.:-",
				    show_str(s->key_prefix).s);
	}
	return 0;
}

/* Fills *s (already defaulted by store_defaults) from a store block. */
static int parse_store(struct ctx *c, yaml_node_t *n, const char *field, struct kt_store_cfg *s)
{
	static const char *const keys[] = { "static",	   "redisStore",  "heartbeat",
					    "staleAfter",  "validFor",	  "fallbackFor",
					    "maxMembers",  "onStoreFailure", NULL };
	char sub[FIELD_LEN];
	yaml_node_t *st, *rs, *v, *hb;
	long long ll;
	int e, err = check_map(c, n, field, keys);

	if (err)
		return err;
	s->line = line_of(n);
	if (!s->file && !(s->file = strdup(c->file)))
		return oom(c, n, field);
	st = map_get(c, n, "static");
	rs = map_get(c, n, "redisStore");
	if (st && rs)
		return fail(c, rs, join(sub, field, "redisStore"),
			    "give only one of static, redisStore (static at line %d)", line_of(st));
	if (st) {
		static const char *const skeys[] = { "poolSize", NULL };

		s->kind = KT_STORE_STATIC;
		join(sub, field, "static");
		if ((err = check_map(c, st, sub, skeys)))
			return err;
		if (!(v = map_get(c, st, "poolSize")))
			return missing(c, st, sub, "poolSize");
		if ((err = get_int(c, v, join(sub, field, "static.poolSize"), 1, 1000000, &ll)))
			return err;
		s->static_pool_size = (int)ll;
	}
	if (rs) {
		s->kind = KT_STORE_REDIS;
		if ((err = parse_redis(c, rs, join(sub, field, "redisStore"), s)))
			return err;
	}
	if ((hb = map_get(c, n, "heartbeat")) &&
	    (err = get_duration(c, hb, join(sub, field, "heartbeat"), 10 * NS_PER_MS,
				60 * NS_PER_SEC, &s->heartbeat_ns)))
		return err;
	if ((v = map_get(c, n, "staleAfter"))) {
		if ((err = get_int(c, v, join(sub, field, "staleAfter"), 2, 100, &ll)))
			return err;
		s->stale_after = (int)ll;
	}
	if ((v = map_get(c, n, "validFor")) &&
	    (err = get_duration(c, v, join(sub, field, "validFor"), 0, UINT64_MAX, &s->valid_for_ns)))
		return err;
	if (s->valid_for_ns <= s->heartbeat_ns)
		return fail(c, v ? v : hb, join(sub, field, v ? "validFor" : "heartbeat"),
			    "validFor (%s) must be longer than heartbeat (%s)",
			    fmt_dur(s->valid_for_ns).s, fmt_dur(s->heartbeat_ns).s);
	if ((v = map_get(c, n, "fallbackFor")) &&
	    (err = get_duration(c, v, join(sub, field, "fallbackFor"), 0, 24 * 3600 * NS_PER_SEC,
				&s->fallback_for_ns)))
		return err;
	if ((v = map_get(c, n, "maxMembers"))) {
		if ((err = get_int(c, v, join(sub, field, "maxMembers"), 1, 1000000, &ll)))
			return err;
		s->max_members = (int)ll;
	}
	if ((v = map_get(c, n, "onStoreFailure"))) {
		if ((err = get_enum(c, v, join(sub, field, "onStoreFailure"), failure_names, 3, &e)))
			return err;
		s->on_failure = (enum kt_store_failure)e;
	}
	return 0;
}

/* ---- limits ----------------------------------------------------------- */

static int parse_match(struct ctx *c, yaml_node_t *n, const char *field, struct kt_limit_cfg *l)
{
	static const char *const keys[] = { "cidrs", "ports", "protocol", NULL };
	struct kt_match *m = &l->match;
	char sub[FIELD_LEN], item[FIELD_LEN];
	yaml_node_t *v;
	const char *s, *why;
	int i, p, err = check_map(c, n, field, keys);

	if (err)
		return err;
	if ((v = map_get(c, n, "cidrs"))) {
		yaml_node_item_t *start, *top, *it, one = 0;

		join(sub, field, "cidrs");
		if (v->type == YAML_SCALAR_NODE) {
			start = &one;
			top = start + 1;
			one = (yaml_node_item_t)(v - c->doc->nodes.start) + 1;
		} else if (v->type == YAML_SEQUENCE_NODE) {
			start = v->data.sequence.items.start;
			top = v->data.sequence.items.top;
		} else {
			return fail(c, v, sub, "expected a list of CIDRs, got %s", kind_of(v));
		}
		if (start == top)
			return fail(c, v, sub, "is empty (leave it out to match every address)");
		m->n_cidrs = 0;
		for (it = start; it < top; it++) {
			yaml_node_t *e = node_at(c, *it);
			struct kt_cidr *cd = &m->cidrs[m->n_cidrs];

			if (v->type == YAML_SEQUENCE_NODE)
				index_of(item, sub, (int)(it - start));
			else
				snprintf(item, sizeof(item), "%s", sub);
			if (m->n_cidrs >= KT_MAX_CIDRS)
				return fail(c, e, item, "at most %d CIDRs per limit", KT_MAX_CIDRS);
			if ((err = get_scalar(c, e, item, "a CIDR", &s)))
				return err;
			if ((why = parse_cidr(s, cd)))
				return fail(c, e, item, "\"%s\" %s", show_str(s).s, why);
			for (i = 0; i < m->n_cidrs; i++)
				if (!memcmp(&m->cidrs[i], cd, sizeof(*cd)))
					return fail(c, e, item, "\"%s\" is listed twice", show_str(s).s);
			m->n_cidrs++;
		}
	}
	if ((v = map_get(c, n, "ports"))) {
		join(sub, field, "ports");
		if ((err = get_scalar(c, v, sub, "a port or port range", &s)))
			return err;
		if ((why = parse_ports(s, &m->port_lo, &m->port_hi)))
			return fail(c, v, sub, "\"%s\" %s", show_str(s).s, why);
	}
	if ((v = map_get(c, n, "protocol"))) {
		if ((err = get_enum(c, v, join(sub, field, "protocol"), proto_names, 3, &p)))
			return err;
		m->proto_mask = p == 1 ? KT_PROTO_TCP : p == 2 ? KT_PROTO_UDP :
				KT_PROTO_TCP | KT_PROTO_UDP;
	}
	return 0;
}

static int parse_modes(struct ctx *c, yaml_node_t *n, const char *field,
		       struct kt_rate_limit_cfg *rl)
{
	static const char *const keys[] = { "relaxed", "scheduled", "onlyIfUsed", "goBackN", NULL };
	static const char *const no_keys[] = { NULL };
	static const char *const oiu_keys[] = { "thresholdPercentage", NULL };
	static const char *const gbn_keys[] = { "thresholdPercentage", "coolDownPeriod",
						"rampDownPercentage", NULL };
	char sub[FIELD_LEN], sub2[FIELD_LEN];
	yaml_node_t *k, *v, *w;
	int err = check_map(c, n, field, keys);

	if (err)
		return err;
	if (is_null(n) || n->data.mapping.pairs.top == n->data.mapping.pairs.start)
		return fail(c, n, field, "needs exactly one of: relaxed, scheduled, onlyIfUsed, goBackN");
	if (n->data.mapping.pairs.top - n->data.mapping.pairs.start > 1) {
		k = node_at(c, n->data.mapping.pairs.start[1].key);
		return fail(c, k, join(sub, field, sval(k)), "only one mode may be given (%s at line %d)",
			    sval(node_at(c, n->data.mapping.pairs.start[0].key)),
			    line_of(node_at(c, n->data.mapping.pairs.start[0].key)));
	}
	k = node_at(c, n->data.mapping.pairs.start[0].key);
	v = node_at(c, n->data.mapping.pairs.start[0].value);
	join(sub, field, sval(k));
	if (!strcmp(sval(k), "relaxed") || !strcmp(sval(k), "scheduled")) {
		rl->mode = !strcmp(sval(k), "relaxed") ? KT_MODE_RELAXED : KT_MODE_SCHEDULED;
		return check_map(c, v, sub, no_keys);
	}
	rl->mode = !strcmp(sval(k), "onlyIfUsed") ? KT_MODE_ONLY_IF_USED : KT_MODE_GO_BACK_N;
	if ((err = check_map(c, v, sub, rl->mode == KT_MODE_ONLY_IF_USED ? oiu_keys : gbn_keys)))
		return err;
	if ((w = map_get(c, v, "thresholdPercentage")) &&
	    (err = get_number_in(c, w, join(sub2, sub, "thresholdPercentage"), 0, false, 100,
				 &rl->threshold_pct)))
		return err;
	if ((w = map_get(c, v, "coolDownPeriod")) &&
	    (err = get_duration(c, w, join(sub2, sub, "coolDownPeriod"), 0, UINT64_MAX,
				&rl->cool_down_ns)))
		return err;
	if ((w = map_get(c, v, "rampDownPercentage")) &&
	    (err = get_number_in(c, w, join(sub2, sub, "rampDownPercentage"), 0, false, 100,
				 &rl->ramp_down_pct)))
		return err;
	return 0;
}

/* rateLimit.strict: {every, maxReserved, expireAfter}. */
static int parse_strict(struct ctx *c, yaml_node_t *n, const char *field, struct kt_strict_cfg *st)
{
	static const char *const keys[] = { "every", "maxReserved", "expireAfter", NULL };
	char sub[FIELD_LEN];
	yaml_node_t *v;
	long long ll;
	int err = check_map(c, n, field, keys);

	if (err)
		return err;
	st->on = true;
	st->line = line_of(n);
	if (!(v = map_get(c, n, "every")))
		return missing(c, n, field, "every");
	if ((err = get_duration(c, v, join(sub, field, "every"), NS_PER_MS, 24 * 3600 * NS_PER_SEC,
				&st->every_ns)))
		return err;
	st->max_reserved = 8;
	if ((v = map_get(c, n, "maxReserved"))) {
		if ((err = get_int(c, v, join(sub, field, "maxReserved"), 0, 100000, &ll)))
			return err;
		st->max_reserved = (int)ll;
	}
	/* every / 2, but never under the 1ms floor a given value must meet */
	st->expire_ns = st->every_ns / 2 > NS_PER_MS ? st->every_ns / 2 : NS_PER_MS;
	if ((v = map_get(c, n, "expireAfter"))) {
		join(sub, field, "expireAfter");
		if ((err = get_duration(c, v, sub, NS_PER_MS, UINT64_MAX, &st->expire_ns)))
			return err;
		if (st->expire_ns > st->every_ns)
			return fail(c, v, sub, "%s is longer than every (%s)", fmt_dur(st->expire_ns).s,
				    fmt_dur(st->every_ns).s);
	}
	return 0;
}

/* The rateLimit block (accepted verbatim). *store_node is set when it carries a store. */
static int parse_rate_limit(struct ctx *c, yaml_node_t *n, const char *field,
			    struct kt_rate_limit_cfg *rl, yaml_node_t **store_node)
{
	static const char *const keys[] = { "max", "min", "rampUpDuration", "modes", "resumedRampUp",
					    "ttl", "store", "strict", NULL };
	/* a strict limit's rate is 1 / every: nothing else shapes it */
	static const char *const not_strict[] = { "max", "min", "rampUpDuration", "modes",
						  "resumedRampUp", "ttl" };
	char sub[FIELD_LEN];
	yaml_node_t *v, *st;
	size_t i;
	int err = check_map(c, n, field, keys);

	if (err)
		return err;
	rl->mode = KT_MODE_RELAXED;
	rl->threshold_pct = 50;
	rl->cool_down_ns = 5 * NS_PER_SEC;
	rl->ramp_down_pct = 50;
	rl->ttl_ns = 180 * NS_PER_SEC;
	*store_node = map_get(c, n, "store");
	if ((st = map_get(c, n, "strict"))) {
		for (i = 0; i < sizeof(not_strict) / sizeof(not_strict[0]); i++)
			if ((v = map_get(c, n, not_strict[i])))
				return fail(c, v, join(sub, field, not_strict[i]),
					    "not allowed with strict at line %d (a strict limit's rate is 1/every)",
					    line_of(st));
		if ((err = parse_strict(c, st, join(sub, field, "strict"), &rl->strict)))
			return err;
		/* tokens/s equivalent, for whatever reports rl.max */
		rl->max = rl->min = 1e9 / (double)rl->strict.every_ns;
		return 0;
	}
	if (!(v = map_get(c, n, "max")))
		return fail(c, n, join(sub, field, "max"), "required but missing (or give strict)");
	if ((err = get_number_in(c, v, join(sub, field, "max"), 0, true, MAX_RATE, &rl->max)))
		return err;
	rl->min = rl->max;
	if ((v = map_get(c, n, "min"))) {
		join(sub, field, "min");
		if ((err = get_number_in(c, v, sub, 0, true, MAX_RATE, &rl->min)))
			return err;
		if (rl->min > rl->max)
			return fail(c, v, sub, "%g is greater than max (%g)", rl->min, rl->max);
	}
	if ((v = map_get(c, n, "rampUpDuration")) &&
	    (err = get_duration(c, v, join(sub, field, "rampUpDuration"), 0, UINT64_MAX,
				&rl->ramp_up_ns)))
		return err;
	if ((v = map_get(c, n, "modes")) &&
	    (err = parse_modes(c, v, join(sub, field, "modes"), rl)))
		return err;
	if ((v = map_get(c, n, "resumedRampUp")) &&
	    (err = get_bool(c, v, join(sub, field, "resumedRampUp"), &rl->resumed_ramp_up)))
		return err;
	if ((v = map_get(c, n, "ttl")) &&
	    (err = get_duration(c, v, join(sub, field, "ttl"), 0, UINT64_MAX, &rl->ttl_ns)))
		return err;
	return 0;
}

static bool name_ok(const char *s)
{
	size_t n = strlen(s);

	return n && n < KT_NAME_LEN && strspn(s, NAME_CHARS) == n;
}

/* A cgroup path must not climb out of the cgroup2 mount it is resolved in. */
static bool has_dotdot(const char *p)
{
	const char *s = p;

	while ((s = strstr(s, ".."))) {
		if ((s == p || s[-1] == '/') && (s[2] == '\0' || s[2] == '/'))
			return true;
		s += 2;
	}
	return false;
}

static int parse_cgroups(struct ctx *c, yaml_node_t *v, const char *field, struct kt_limit_cfg *l)
{
	char item[FIELD_LEN];
	yaml_node_item_t *start, *top, *it, one;
	int i, n, err;

	if (v->type == YAML_SCALAR_NODE) {
		one = (yaml_node_item_t)(v - c->doc->nodes.start) + 1;
		start = &one;
		top = start + 1;
	} else if (v->type == YAML_SEQUENCE_NODE) {
		start = v->data.sequence.items.start;
		top = v->data.sequence.items.top;
	} else {
		return fail(c, v, field, "expected a list of cgroup paths, got %s", kind_of(v));
	}
	if (start == top)
		return fail(c, v, field, "needs at least one cgroup");
	/* as many as listed, up to the cap (the one past it is refused) */
	n = top - start < KT_MAX_CGROUPS_PER_LIMIT ? (int)(top - start) : KT_MAX_CGROUPS_PER_LIMIT;
	l->cgroups = calloc((size_t)n, sizeof(*l->cgroups));
	l->cgroup_lines = calloc((size_t)n, sizeof(*l->cgroup_lines));
	if (!l->cgroups || !l->cgroup_lines)
		return oom(c, v, field);
	for (it = start; it < top; it++) {
		yaml_node_t *e = node_at(c, *it);
		int k = l->n_cgroups;

		if (v->type == YAML_SEQUENCE_NODE)
			index_of(item, field, (int)(it - start));
		else
			snprintf(item, sizeof(item), "%s", field);
		if (k >= KT_MAX_CGROUPS_PER_LIMIT)
			return fail(c, e, item, "at most %d cgroups per limit", KT_MAX_CGROUPS_PER_LIMIT);
		if ((err = get_str(c, e, item, MAX_PATH_BYTES, &l->cgroups[k]))) {
			free(l->cgroups[k]);
			l->cgroups[k] = NULL;
			return err;
		}
		l->n_cgroups++;
		l->cgroup_lines[k] = line_of(e);
		if (has_dotdot(l->cgroups[k]))
			return fail(c, e, item, "\"%s\" must not contain '..'", show_str(l->cgroups[k]).s);
		for (i = 0; i < k; i++)
			if (!strcmp(l->cgroups[i], l->cgroups[k]))
				return fail(c, e, item, "\"%s\" is listed twice (first at line %d)",
					    show_str(l->cgroups[k]).s, l->cgroup_lines[i]);
	}
	return 0;
}

/* ---- pods: a Kubernetes label selector --------------------------------- */

static const char *const label_op_names[] = { "In", "NotIn", "Exists", "DoesNotExist" };

const char *kt_label_op_name(enum kt_label_op op) { return NAME_OF(label_op_names, op); }

static bool alnum(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
}

/* A label name or value as Kubernetes validates it: at most 63 of
 * [A-Za-z0-9._-], starting and ending alphanumeric (a value may be empty). */
static bool label_name_ok(const char *s, size_t n, bool empty_ok)
{
	if (!n)
		return empty_ok;
	if (n > 63 || !alnum(s[0]) || !alnum(s[n - 1]))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!alnum(s[i]) && s[i] != '.' && s[i] != '_' && s[i] != '-')
			return false;
	return true;
}

bool kt_dns_name_ok(const char *s, size_t n, bool label)
{
	size_t start = 0;

	if (!n || n > (label ? 63 : 253))
		return false;
	for (size_t i = 0; i <= n; i++) {
		char ch = i < n ? s[i] : '.';

		if (ch == '.') {
			if (label && i < n)
				return false;
			if (i == start || s[start] == '-' || s[i - 1] == '-' || i - start > 63)
				return false;
			start = i + 1;
		} else if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-')) {
			return false;
		}
	}
	return true;
}

static bool label_key_ok(const char *k)
{
	const char *slash = strchr(k, '/');

	if (!slash)
		return label_name_ok(k, strlen(k), false);
	return kt_dns_name_ok(k, (size_t)(slash - k), false) &&
	       label_name_ok(slash + 1, strlen(slash + 1), false);
}

static int get_label_key(struct ctx *c, yaml_node_t *v, const char *field, char **out)
{
	int err = get_str(c, v, field, 317, out);

	if (!err && !label_key_ok(*out))
		return fail(c, v, field,
			    "\"%s\" is not a label key ([prefix/]name: name 1..63 of A-Z a-z 0-9 . _ -, starting and ending alphanumeric)",
			    show_str(*out).s);
	return err;
}

static int get_label_value(struct ctx *c, yaml_node_t *v, const char *field, char **out)
{
	const char *s;
	int err;

	/* an empty value is a valid label value: `key: ""` */
	if (v->type == YAML_SCALAR_NODE && !is_null(v) && !*sval(v))
		s = "";
	else if ((err = get_scalar(c, v, field, "a label value", &s)))
		return err;
	if (!label_name_ok(s, strlen(s), true))
		return fail(c, v, field,
			    "\"%s\" is not a label value (0..63 of A-Z a-z 0-9 . _ -, starting and ending alphanumeric)",
			    show_str(s).s);
	*out = strdup(s);
	return *out ? 0 : oom(c, v, field);
}

static struct kt_label_req *new_req(struct ctx *c, yaml_node_t *v, const char *field,
				    struct kt_pod_selector *ps)
{
	if (ps->n_reqs == KT_MAX_LABEL_REQS) {
		fail(c, v, field, "at most %d labels and expressions per selector", KT_MAX_LABEL_REQS);
		return NULL;
	}
	return &ps->reqs[ps->n_reqs++];
}

static int parse_label_expr(struct ctx *c, yaml_node_t *n, const char *field,
			    struct kt_pod_selector *ps)
{
	static const char *const keys[] = { "key", "operator", "values", NULL };
	char sub[FIELD_LEN], item[FIELD_LEN];
	struct kt_label_req *r;
	yaml_node_t *v, *vals;
	int e, err;

	if (n->type != YAML_MAPPING_NODE)
		return fail(c, n, field, "expected a mapping {key, operator, values}, got %s",
			    kind_of(n));
	if ((err = check_map(c, n, field, keys)))
		return err;
	if (!(r = new_req(c, n, field, ps)))
		return -EINVAL;
	if (!(v = map_get(c, n, "key")))
		return missing(c, n, field, "key");
	if ((err = get_label_key(c, v, join(sub, field, "key"), &r->key)))
		return err;
	if (!(v = map_get(c, n, "operator")))
		return missing(c, n, field, "operator");
	if ((err = get_enum(c, v, join(sub, field, "operator"), label_op_names, 4, &e)))
		return err;
	r->op = (enum kt_label_op)e;
	vals = map_get(c, n, "values");
	join(sub, field, "values");
	if (r->op == KT_LABEL_EXISTS || r->op == KT_LABEL_DOES_NOT_EXIST) {
		if (vals && !(vals->type == YAML_SEQUENCE_NODE &&
			      vals->data.sequence.items.start == vals->data.sequence.items.top))
			return fail(c, vals, sub, "must be empty for operator %s", label_op_names[e]);
		return 0;
	}
	if (!vals)
		return fail(c, n, sub, "required for operator %s", label_op_names[e]);
	if (vals->type != YAML_SEQUENCE_NODE)
		return fail(c, vals, sub, "expected a list of label values, got %s", kind_of(vals));
	if (vals->data.sequence.items.start == vals->data.sequence.items.top)
		return fail(c, vals, sub, "needs at least one value for operator %s",
			    label_op_names[e]);
	for (yaml_node_item_t *it = vals->data.sequence.items.start;
	     it < vals->data.sequence.items.top; it++) {
		if (r->n_values == KT_MAX_LABEL_VALUES)
			return fail(c, vals, sub, "at most %d values", KT_MAX_LABEL_VALUES);
		index_of(item, sub, r->n_values);
		if ((err = get_label_value(c, node_at(c, *it), item, &r->values[r->n_values])))
			return err;
		r->n_values++;
	}
	return 0;
}

/* pods: {namespace: NS, labels: {K: V}, matchExpressions: [{key, operator,
 * values}]}: every part optional, all must hold (as a Kubernetes selector). */
static int parse_pods(struct ctx *c, yaml_node_t *n, const char *field, struct kt_pod_selector *ps)
{
	static const char *const keys[] = { "namespace", "labels", "matchExpressions", NULL };
	char sub[FIELD_LEN], item[FIELD_LEN];
	yaml_node_t *v;
	int err;

	if (n->type != YAML_MAPPING_NODE)
		return fail(c, n, field, "expected a mapping {namespace, labels, matchExpressions}, got %s",
			    kind_of(n));
	if ((err = check_map(c, n, field, keys)))
		return err;
	ps->set = true;
	ps->line = line_of(n);
	if ((v = map_get(c, n, "namespace"))) {
		join(sub, field, "namespace");
		if ((err = get_str(c, v, sub, 63, &ps->namespace)))
			return err;
		if (!kt_dns_name_ok(ps->namespace, strlen(ps->namespace), true))
			return fail(c, v, sub,
				    "\"%s\" is not a namespace name (1..63 of a-z 0-9 -, starting and ending alphanumeric)",
				    show_str(ps->namespace).s);
	}
	if ((v = map_get(c, n, "labels"))) {
		join(sub, field, "labels");
		if (v->type != YAML_MAPPING_NODE)
			return fail(c, v, sub, "expected a mapping of label keys to values, got %s",
				    kind_of(v));
		if ((err = check_map(c, v, sub, NULL)))
			return err;
		for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top;
		     p++) {
			yaml_node_t *k = node_at(c, p->key);
			struct kt_label_req *r = new_req(c, k, sub, ps);

			if (!r)
				return -EINVAL;
			r->op = KT_LABEL_IN;
			if ((err = get_label_key(c, k, sub, &r->key)))
				return err;
			join(item, sub, r->key);
			if ((err = get_label_value(c, node_at(c, p->value), item, &r->values[0])))
				return err;
			r->n_values = 1;
		}
	}
	if ((v = map_get(c, n, "matchExpressions"))) {
		join(sub, field, "matchExpressions");
		if (v->type != YAML_SEQUENCE_NODE)
			return fail(c, v, sub, "expected a list of expressions, got %s", kind_of(v));
		for (yaml_node_item_t *it = v->data.sequence.items.start;
		     it < v->data.sequence.items.top; it++) {
			index_of(item, sub, (int)(it - v->data.sequence.items.start));
			if ((err = parse_label_expr(c, node_at(c, *it), item, ps)))
				return err;
		}
	}
	return 0;
}

static void pods_free(struct kt_pod_selector *ps)
{
	free(ps->namespace);
	for (int i = 0; i < ps->n_reqs; i++) {
		free(ps->reqs[i].key);
		for (int j = 0; j < ps->reqs[i].n_values; j++)
			free(ps->reqs[i].values[j]);
	}
	memset(ps, 0, sizeof(*ps));
}

bool kt_config_uses_pods(const struct kt_config *cfg)
{
	for (int i = 0; i < cfg->n_limits; i++)
		if (cfg->limits[i].pods.set)
			return true;
	return false;
}

static int parse_limit(struct ctx *c, yaml_node_t *n, const char *field, struct kt_config *cfg,
		       int idx)
{
	static const char *const keys[] = { "name",  "cgroups",	 "match",	    "unit",
					    "scope", "burst",	 "share",	    "rateLimit",
					    "allowRawSockets", "errno", "pods", NULL };
	struct kt_limit_cfg *l = &cfg->limits[idx];
	char sub[FIELD_LEN];
	yaml_node_t *v, *rl, *strict, *store = NULL, *share_node = NULL;
	const char *s;
	int i, e, err;

	if (n->type != YAML_MAPPING_NODE)
		return fail(c, n, field, "expected a mapping, got %s", kind_of(n));
	if ((err = check_map(c, n, field, keys)))
		return err;
	l->line = line_of(n);
	l->scope = KT_SCOPE_POD;
	l->share = KT_SHARE_EQUAL;
	l->match.port_lo = 0;
	l->match.port_hi = 65535;
	l->match.proto_mask = KT_PROTO_TCP | KT_PROTO_UDP;
	/* every IPv4 address (v4-mapped ::ffff:0:0/96), every IPv6 address */
	l->match.n_cidrs = 2;
	l->match.cidrs[0].addr[10] = l->match.cidrs[0].addr[11] = 0xff;
	l->match.cidrs[0].prefixlen = 96;
	l->match.cidrs[1].prefixlen = 0;

	if (!(v = map_get(c, n, "name")))
		return missing(c, n, field, "name");
	join(sub, field, "name");
	if ((err = get_scalar(c, v, sub, "a name", &s)))
		return err;
	if (!name_ok(s))
		return fail(c, v, sub, "\"%s\" must be 1..%d of A-Z a-z 0-9 _ . -", show_str(s).s,
			    KT_NAME_LEN - 1);
	snprintf(l->name, sizeof(l->name), "%s", s);
	/* a tree, not a scan of the earlier limits: 10,000 limits would take
	 * 50 M compares */
	{
		struct kt_limit_cfg **seen = tsearch(l, &c->limit_names, cmp_limit_name);

		if (!seen)
			return oom(c, v, sub);
		if (*seen != l) {
			i = (int)(*seen - cfg->limits);
			return fail(c, v, sub, "\"%s\" is already used by limits[%d] (line %d)", s, i,
				    cfg->limits[i].line);
		}
	}

	if (!(v = map_get(c, n, "unit")))
		return missing(c, n, field, "unit");
	if ((err = get_enum(c, v, join(sub, field, "unit"), unit_names, KT_UNIT_COUNT, &e)))
		return err;
	l->unit = (enum kt_unit)e;
	if (l->unit == KT_UNIT_REQUEST) {
		/* cooperative: applications charge it through libkthrottle; no
		 * kernel hook, so nothing that picks traffic applies, and its
		 * one bucket is the node's */
		static const char *const hooked[] = { "cgroups", "pods", "match", "allowRawSockets" };
		static const char *const matched[] = { "cidrs", "ports", "protocol" };
		yaml_node_t *m;

		for (i = 0; i < (int)(sizeof(hooked) / sizeof(hooked[0])); i++) {
			if (!(v = map_get(c, n, hooked[i])))
				continue;
			join(sub, field, hooked[i]);
			for (e = 0; i == 2 && v->type == YAML_MAPPING_NODE && e < 3; e++)
				if ((m = map_get(c, v, matched[e]))) {
					v = m;
					snprintf(sub + strlen(sub), sizeof(sub) - strlen(sub), ".%s",
						 matched[e]);
					break;
				}
			return fail(c, v, sub,
				    "not allowed with unit request (a cooperative limit has no kernel hook: applications charge it through libkthrottle)");
		}
		l->scope = KT_SCOPE_NODE;
	}
	if ((v = map_get(c, n, "pods")) && (err = parse_pods(c, v, join(sub, field, "pods"), &l->pods)))
		return err;
	/* members come from cgroups:, pods: or both */
	if (!(v = map_get(c, n, "cgroups")) && !l->pods.set && l->unit != KT_UNIT_REQUEST)
		return fail(c, n, join(sub, field, "cgroups"), "required but missing (or give pods:)");
	if (v && (err = parse_cgroups(c, v, join(sub, field, "cgroups"), l)))
		return err;
	if ((v = map_get(c, n, "match")) && (err = parse_match(c, v, join(sub, field, "match"), l)))
		return err;
	/* sendmsg hooks only see UDP: a TCP-only datagram limit would never fire */
	if (l->unit == KT_UNIT_DATAGRAM && l->match.proto_mask == KT_PROTO_TCP)
		return fail(c, map_get(c, map_get(c, n, "match"), "protocol"),
			    join(sub, field, "match.protocol"), "tcp never matches unit datagram");
	if ((v = map_get(c, n, "scope"))) {
		if ((err = get_enum(c, v, join(sub, field, "scope"), scope_names, 2, &e)))
			return err;
		if (l->unit == KT_UNIT_REQUEST && e != KT_SCOPE_NODE)
			return fail(c, v, sub,
				    "unit request is node scope only (one cooperative bucket per node, shared by every process that opens the limit)");
		l->scope = (enum kt_scope)e;
	}
	if ((v = map_get(c, n, "allowRawSockets")) &&
	    (err = get_bool(c, v, join(sub, field, "allowRawSockets"), &l->allow_raw_sockets)))
		return err;
	l->refuse_errno = EBUSY;
	if ((v = map_get(c, n, "errno"))) {
		if ((err = get_enum(c, v, join(sub, field, "errno"), errno_names,
				    sizeof(errno_names) / sizeof(errno_names[0]), &e)))
			return err;
		/* the egress hook cannot choose: its drops fail with EPERM */
		if (l->unit == KT_UNIT_PACKET || l->unit == KT_UNIT_BYTE)
			return fail(c, v, sub,
				    "applies to units connection and datagram only (a refused packet fails its send with EPERM)");
		if (l->unit == KT_UNIT_REQUEST)
			return fail(c, v, sub,
				    "applies to units connection and datagram only (a refused request is the application's to answer)");
		l->refuse_errno = errno_values[e];
	}
	if ((share_node = map_get(c, n, "share"))) {
		if ((err = get_enum(c, share_node, join(sub, field, "share"), share_names, 2, &e)))
			return err;
		l->share = (enum kt_share_policy)e;
	}
	if (!(rl = map_get(c, n, "rateLimit")))
		return missing(c, n, field, "rateLimit");
	if ((err = parse_rate_limit(c, rl, join(sub, field, "rateLimit"), &l->rl, &store)))
		return err;

	strict = l->rl.strict.on ? map_get(c, rl, "strict") : NULL;
	/* permits pace admissions one by one: nothing to count packets or bytes by */
	if (strict && (l->unit == KT_UNIT_PACKET || l->unit == KT_UNIT_BYTE))
		return fail(c, strict, join(sub, field, "rateLimit.strict"),
			    "needs unit connection, datagram or request (this limit's unit is %s at line %d)",
			    kt_unit_name(l->unit), line_of(map_get(c, n, "unit")));
	/* each node asks the store for its own permits: there is no pool to divide */
	if (strict && l->share == KT_SHARE_DEMAND)
		return fail(c, share_node, join(sub, field, "share"),
			    "demand is not allowed with rateLimit.strict at line %d (each node asks the store for its own permits)",
			    line_of(strict));

	/* One full-size packet must fit a byte bucket, or it could never pass.
	 * A strict limit's burst is 1: a permit admits one. */
	{
		double floor = l->unit == KT_UNIT_BYTE ? 1500 : 1;

		l->burst = l->rl.max > floor && !strict ? l->rl.max : floor;
		if ((v = map_get(c, n, "burst"))) {
			join(sub, field, "burst");
			if ((err = get_number_in(c, v, sub, floor, false, MAX_RATE, &l->burst)))
				return err;
			if (strict && l->burst != 1)
				return fail(c, v, sub, "%g must be 1 with rateLimit.strict at line %d (a permit admits one)",
					    l->burst, line_of(strict));
		}
	}

	if (store) {
		if ((err = store_defaults(&l->store)))
			return oom(c, store, field);
		if ((err = parse_store(c, store, join(sub, field, "rateLimit.store"), &l->store)))
			return err;
	} else if ((err = store_copy(&l->store, &cfg->store))) {
		return oom(c, n, field);
	}
	if (strict && l->store.kind != KT_STORE_REDIS)
		return fail(c, strict, join(sub, field, "rateLimit.strict"),
			    "needs a redis store (permits are issued on the Redis clock)");
	/* demand divides what the nodes agree through Redis */
	if (l->share == KT_SHARE_DEMAND && l->store.kind != KT_STORE_REDIS)
		return fail(c, share_node, join(sub, field, "share"),
			    "demand needs a redis store (this limit's store is %s; use equal)",
			    kt_store_kind_name(l->store.kind));
	return 0;
}

/* ---- top level -------------------------------------------------------- */

static int get_abs_path(struct ctx *c, yaml_node_t *v, const char *field, size_t maxlen, char **out)
{
	int err = get_str(c, v, field, maxlen, out);

	if (err)
		return err;
	if ((*out)[0] != '/')
		return fail(c, v, field, "\"%s\" must be an absolute path", show_str(*out).s);
	return 0;
}

/* "ADDR:PORT" or "[V6]:PORT" with an IP literal (no name to resolve at
 * start); with `local`, "PORT" and ":PORT" alone mean 127.0.0.1. The address
 * is returned without brackets. Brackets hold IPv6 and only IPv6, as in a URL,
 * so "::1:8080" (itself an IPv6 address) is refused as ambiguous. */
static int parse_addr_port(struct ctx *c, yaml_node_t *v, const char *field, const char *eg,
			   bool local, char *addr, size_t addrlen, int *out_port)
{
	char host[48], hint[200], *end;
	unsigned char bin[16];
	const char *s, *colon, *ps, *h;
	size_t hl;
	long port;
	int err = get_scalar(c, v, field, "ADDR:PORT", &s);

	if (err)
		return err;
	if (local && *s && strspn(s + (*s == ':'), "0123456789") == strlen(s + (*s == ':'))) {
		snprintf(host, sizeof(host), "127.0.0.1");
		ps = s + (*s == ':');
	} else {
		if (s[0] == '[') {
			const char *close = strchr(s, ']');

			if (!close)
				return fail(c, v, field, "\"%s\" has an unclosed [", show_str(s).s);
			h = s + 1;
			hl = (size_t)(close - h);
			colon = close + 1;
		} else {
			h = s;
			colon = strchr(s, ':');
			hl = colon ? (size_t)(colon - s) : 0;
			if (colon && strchr(colon + 1, ':'))
				return fail(c, v, field, "\"%s\" %s", show_str(s).s,
					    v6_needs_brackets(s, strlen(s), 0, hint, sizeof(hint)));
		}
		if (!colon || *colon != ':' || !hl)
			return fail(c, v, field, "\"%s\" is not ADDR:PORT (e.g. %s)", show_str(s).s, eg);
		if (hl >= sizeof(host) || hl >= addrlen)
			return fail(c, v, field, "address too long");
		memcpy(host, h, hl);
		host[hl] = 0;
		if (h != s ? inet_pton(AF_INET6, host, bin) != 1 :
			     inet_pton(AF_INET, host, bin) != 1)
			return fail(c, v, field, "\"%s\" is not an %s address", show_str(host).s,
				    h != s ? "IPv6" : "IPv4 or IPv6");
		ps = colon + 1;
	}
	errno = 0;
	port = strtol(ps, &end, 10);
	if (errno || *end || end == ps || !(*ps >= '0' && *ps <= '9') || port < 1 || port > 65535)
		return fail(c, v, field, "port \"%s\" is not 1..65535", show_str(ps).s);
	snprintf(addr, addrlen, "%s", host);
	*out_port = (int)port;
	return 0;
}

/* metrics: "127.0.0.1:9464" or "[::1]:9464". */
static int parse_metrics(struct ctx *c, yaml_node_t *v, struct kt_config *cfg)
{
	return parse_addr_port(c, v, "metrics", "127.0.0.1:9464, [::1]:9464", false,
			       cfg->metrics_addr, sizeof(cfg->metrics_addr), &cfg->metrics_port);
}

/* kubernetes: {apiServer, tokenFile, caFile, nodeName, cgroupRoot}: each
 * optional (in-cluster defaults apply at start). */
static int parse_kube(struct ctx *c, yaml_node_t *n, struct kt_kube_cfg *k)
{
	static const char *const keys[] = { "apiServer", "tokenFile", "caFile", "nodeName",
					    "cgroupRoot", NULL };
	yaml_node_t *v;
	int err = check_map(c, n, "kubernetes", keys);

	if (err)
		return err;
	k->line = line_of(n);
	if ((v = map_get(c, n, "apiServer"))) {
		if ((err = get_str(c, v, "kubernetes.apiServer", 512, &k->api_server)))
			return err;
		/* the token is a credential: never sent in clear */
		if (strncmp(k->api_server, "https://", 8) || !k->api_server[8])
			return fail(c, v, "kubernetes.apiServer", "\"%s\" is not an https:// URL",
				    show_str(k->api_server).s);
	}
	if ((v = map_get(c, n, "tokenFile")) &&
	    (err = get_abs_path(c, v, "kubernetes.tokenFile", MAX_PATH_BYTES, &k->token_file)))
		return err;
	if ((v = map_get(c, n, "caFile")) &&
	    (err = get_abs_path(c, v, "kubernetes.caFile", MAX_PATH_BYTES, &k->ca_file)))
		return err;
	if ((v = map_get(c, n, "nodeName"))) {
		if ((err = get_str(c, v, "kubernetes.nodeName", 253, &k->node_name)))
			return err;
		if (!kt_dns_name_ok(k->node_name, strlen(k->node_name), false))
			return fail(c, v, "kubernetes.nodeName", "\"%s\" is not a node name",
				    show_str(k->node_name).s);
	}
	if ((v = map_get(c, n, "cgroupRoot"))) {
		if ((err = get_str(c, v, "kubernetes.cgroupRoot", MAX_PATH_BYTES, &k->cgroup_root)))
			return err;
		if (has_dotdot(k->cgroup_root))
			return fail(c, v, "kubernetes.cgroupRoot", "\"%s\" must not contain '..'",
				    show_str(k->cgroup_root).s);
	}
	return 0;
}

/* ---- tag limits (top-level `tags:`) -------------------------- */

#define TAG_MAX_BURST 1000000000000LL  /* MAX_RATE tokens */
#define IFNAME_CHARS NAME_CHARS ":@"

/* A CIDR (or a bare address) as a tag prefix: parse_cidr's checks and
 * masking, kept in its own family (IPv4 in addr[0..3]). */
static const char *parse_tag_prefix(const char *s, struct kt_tag_prefix *out)
{
	struct kt_cidr cd;
	const char *why = parse_cidr(s, &cd);

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

/* One more allow or override prefix of t: within the rule budget and not
 * already listed in either. */
static int tag_rule_ok(struct ctx *c, yaml_node_t *e, const char *item,
		       const struct kt_tag_limit_cfg *t, const struct kt_tag_prefix *p, const char *s)
{
	int i;

	if (t->n_allow + t->n_overrides >= KT_TAG_MAX_RULES)
		return fail(c, e, item, "at most %d prefixes in allow and overrides together",
			    KT_TAG_MAX_RULES);
	for (i = 0; i < t->n_allow; i++)
		if (!memcmp(&t->allow[i], p, sizeof(*p)))
			return fail(c, e, item, "\"%s\" is listed twice (also allow[%d])", show_str(s).s,
				    i);
	for (i = 0; i < t->n_overrides; i++)
		if (!memcmp(&t->overrides[i].prefix, p, sizeof(*p)))
			return fail(c, e, item, "\"%s\" is listed twice (also overrides[%d] at line %d)",
				    show_str(s).s, i, t->overrides[i].line);
	return 0;
}

static int parse_tag_allow(struct ctx *c, yaml_node_t *v, const char *field,
			   struct kt_tag_limit_cfg *t)
{
	char item[FIELD_LEN];
	yaml_node_item_t *start, *top, *it, one;
	struct kt_tag_prefix p;
	const char *s, *why;
	int err;

	if (v->type == YAML_SCALAR_NODE) {
		one = (yaml_node_item_t)(v - c->doc->nodes.start) + 1;
		start = &one;
		top = start + 1;
	} else if (v->type == YAML_SEQUENCE_NODE) {
		start = v->data.sequence.items.start;
		top = v->data.sequence.items.top;
	} else {
		return fail(c, v, field, "expected a list of CIDRs, got %s", kind_of(v));
	}
	if (start == top)
		return fail(c, v, field, "is empty (leave it out to allow no prefix)");
	for (it = start; it < top; it++) {
		yaml_node_t *e = node_at(c, *it);

		if (v->type == YAML_SEQUENCE_NODE)
			index_of(item, field, (int)(it - start));
		else
			snprintf(item, sizeof(item), "%s", field);
		if ((err = get_scalar(c, e, item, "a CIDR", &s)))
			return err;
		if ((why = parse_tag_prefix(s, &p)))
			return fail(c, e, item, "\"%s\" %s", show_str(s).s, why);
		if ((err = tag_rule_ok(c, e, item, t, &p, s)))
			return err;
		t->allow[t->n_allow++] = p;
	}
	return 0;
}

static int parse_tag_overrides(struct ctx *c, yaml_node_t *v, const char *field,
			       struct kt_tag_limit_cfg *t)
{
	static const char *const keys[] = { "cidr", "rate", "burst", NULL };
	char item[FIELD_LEN], sub[FIELD_LEN];
	yaml_node_item_t *it;
	struct kt_tag_prefix p;
	const char *s, *why;
	long long ll;
	int err;

	if (v->type != YAML_SEQUENCE_NODE)
		return fail(c, v, field, "expected a list of {cidr, rate, burst}, got %s", kind_of(v));
	if (v->data.sequence.items.start == v->data.sequence.items.top)
		return fail(c, v, field, "is empty (leave it out for no overrides)");
	for (it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
		yaml_node_t *e = node_at(c, *it), *w;
		struct kt_tag_override *o;

		index_of(item, field, (int)(it - v->data.sequence.items.start));
		if (e->type != YAML_MAPPING_NODE)
			return fail(c, e, item, "expected a mapping {cidr, rate, burst}, got %s",
				    kind_of(e));
		if ((err = check_map(c, e, item, keys)))
			return err;
		if (!(w = map_get(c, e, "cidr")))
			return missing(c, e, item, "cidr");
		join(sub, item, "cidr");
		if ((err = get_scalar(c, w, sub, "a CIDR", &s)))
			return err;
		if ((why = parse_tag_prefix(s, &p)))
			return fail(c, w, sub, "\"%s\" %s", show_str(s).s, why);
		if ((err = tag_rule_ok(c, w, sub, t, &p, s)))
			return err;
		o = &t->overrides[t->n_overrides];
		o->prefix = p;
		o->line = line_of(e);
		if (!(w = map_get(c, e, "rate")))
			return missing(c, e, item, "rate");
		if ((err = get_number_in(c, w, join(sub, item, "rate"), 0, true, MAX_RATE, &o->rate)))
			return err;
		if (!(w = map_get(c, e, "burst")))
			return missing(c, e, item, "burst");
		if ((err = get_int(c, w, join(sub, item, "burst"), 1, TAG_MAX_BURST, &ll)))
			return err;
		o->burst = (uint64_t)ll;
		t->n_overrides++;
	}
	return 0;
}

static bool ifname_ok(const char *s)
{
	size_t n = strlen(s);

	return n && n < sizeof(((struct kt_tag_limit_cfg *)0)->ifaces[0]) &&
	       strspn(s, IFNAME_CHARS) == n && strcmp(s, ".") && strcmp(s, "..");
}

/* xdp: {interfaces: [..], prefixLen: {ipv4: N, ipv6: M}}. */
static int parse_tag_xdp(struct ctx *c, yaml_node_t *n, const char *field, struct kt_config *cfg,
			 int idx)
{
	static const char *const keys[] = { "interfaces", "prefixLen", NULL };
	static const char *const plen_keys[] = { "ipv4", "ipv6", NULL };
	struct kt_tag_limit_cfg *t = &cfg->tags[idx];
	char sub[FIELD_LEN], item[FIELD_LEN];
	yaml_node_item_t *start, *top, *it, one;
	yaml_node_t *v, *w;
	const char *s;
	long long ll;
	int i, j, err = check_map(c, n, field, keys);

	if (err)
		return err;
	t->xdp = true;
	if (!(v = map_get(c, n, "interfaces")))
		return missing(c, n, field, "interfaces");
	join(sub, field, "interfaces");
	if (v->type == YAML_SCALAR_NODE && !is_null(v)) {
		one = (yaml_node_item_t)(v - c->doc->nodes.start) + 1;
		start = &one;
		top = start + 1;
	} else if (v->type == YAML_SEQUENCE_NODE) {
		start = v->data.sequence.items.start;
		top = v->data.sequence.items.top;
	} else {
		return fail(c, v, sub, "expected a list of interface names, got %s",
			    is_null(v) ? "nothing" : kind_of(v));
	}
	if (start == top)
		return fail(c, v, sub, "needs at least one interface");
	for (it = start; it < top; it++) {
		yaml_node_t *e = node_at(c, *it);

		if (v->type == YAML_SEQUENCE_NODE)
			index_of(item, sub, (int)(it - start));
		else
			snprintf(item, sizeof(item), "%s", sub);
		if (t->n_ifaces >= KT_TAG_MAX_IFACES)
			return fail(c, e, item, "at most %d interfaces per tag limit", KT_TAG_MAX_IFACES);
		if ((err = get_scalar(c, e, item, "an interface name", &s)))
			return err;
		if (!ifname_ok(s))
			return fail(c, e, item, "\"%s\" is not an interface name (1..15 of A-Z a-z 0-9 _ . - : @)",
				    show_str(s).s);
		for (i = 0; i < t->n_ifaces; i++)
			if (!strcmp(t->ifaces[i], s))
				return fail(c, e, item, "\"%s\" is listed twice", show_str(s).s);
		/* one XDP program per interface: one tag limit owns it */
		for (j = 0; j < idx; j++)
			for (i = 0; i < cfg->tags[j].n_ifaces; i++)
				if (!strcmp(cfg->tags[j].ifaces[i], s))
					return fail(c, e, item,
						    "\"%s\" of tag limit %s is already used by tag limit %s (tags[%d] at line %d): an interface belongs to one tag limit",
						    s, t->name, cfg->tags[j].name, j, cfg->tags[j].line);
		snprintf(t->ifaces[t->n_ifaces++], sizeof(t->ifaces[0]), "%s", s);
	}
	if ((v = map_get(c, n, "prefixLen"))) {
		join(sub, field, "prefixLen");
		if (!is_null(v) && v->type != YAML_MAPPING_NODE)
			return fail(c, v, sub, "expected a mapping, got %s: use prefixLen: {ipv4: N, ipv6: M}",
				    kind_of(v));
		if ((err = check_map(c, v, sub, plen_keys)))
			return err;
		if ((w = map_get(c, v, "ipv4"))) {
			if ((err = get_int(c, w, join(item, sub, "ipv4"), 1, 32, &ll)))
				return err;
			t->prefix_v4 = (uint8_t)ll;
		}
		if ((w = map_get(c, v, "ipv6"))) {
			if ((err = get_int(c, w, join(item, sub, "ipv6"), 1, 128, &ll)))
				return err;
			t->prefix_v6 = (uint8_t)ll;
		}
	}
	return 0;
}

/* Two TCP listeners that cannot both bind: the same port on the same
 * address, or on a wildcard covering the other (:: covers IPv4 too). */
static bool listeners_clash(const char *a, int pa, const char *b, int pb)
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

/* "127.0.0.1:7070", "[::1]:7070" for messages. */
static struct shown fmt_endpoint(const char *addr, int port)
{
	struct shown out;

	snprintf(out.s, sizeof(out.s), strchr(addr, ':') ? "[%s]:%d" : "%s:%d", addr, port);
	return out;
}

/* query: {socket: PATH, listen: ADDR:PORT}; `query: {}` is every default. */
static int parse_tag_query(struct ctx *c, yaml_node_t *n, const char *field, struct kt_config *cfg,
			   int idx, int metrics_line)
{
	static const char *const keys[] = { "socket", "listen", NULL };
	struct kt_tag_limit_cfg *t = &cfg->tags[idx];
	struct sockaddr_un sun;
	char sub[FIELD_LEN];
	yaml_node_t *v;
	int j, err = check_map(c, n, field, keys);

	if (err)
		return err;
	t->query = true;
	join(sub, field, "socket");
	if ((v = map_get(c, n, "socket")))
		err = get_abs_path(c, v, sub, sizeof(sun.sun_path) - 1, &t->query_socket);
	else if (!(t->query_socket = strdup(KT_TAG_DEFAULT_SOCKET)))
		err = oom(c, n, sub);
	if (err)
		return err;
	if (!strcmp(t->query_socket, cfg->socket_path))
		return fail(c, v ? v : n, sub, "\"%s\" is the daemon's control socket (socket:)",
			    show_str(t->query_socket).s);
	for (j = 0; j < idx; j++)
		if (cfg->tags[j].query_socket && !strcmp(cfg->tags[j].query_socket, t->query_socket))
			return fail(c, v ? v : n, sub,
				    "\"%s\" is already used by tag limit %s (tags[%d] at line %d): give each tag limit its own query.socket",
				    show_str(t->query_socket).s, cfg->tags[j].name, j,
				    cfg->tags[j].line);
	if (!(v = map_get(c, n, "listen")))
		return 0;
	join(sub, field, "listen");
	if ((err = parse_addr_port(c, v, sub, "127.0.0.1:7070, [::1]:7070, 7070", true,
				   t->query_addr, sizeof(t->query_addr), &t->query_port)))
		return err;
	if (cfg->metrics_port &&
	    listeners_clash(t->query_addr, t->query_port, cfg->metrics_addr, cfg->metrics_port))
		return fail(c, v, sub, "%s is the metrics endpoint (metrics at line %d)",
			    fmt_endpoint(t->query_addr, t->query_port).s, metrics_line);
	for (j = 0; j < idx; j++)
		if (cfg->tags[j].query_port &&
		    listeners_clash(t->query_addr, t->query_port, cfg->tags[j].query_addr,
				    cfg->tags[j].query_port))
			return fail(c, v, sub,
				    "%s is already used by tag limit %s (tags[%d] at line %d)",
				    fmt_endpoint(t->query_addr, t->query_port).s, cfg->tags[j].name, j,
				    cfg->tags[j].line);
	return 0;
}

static int parse_tag(struct ctx *c, yaml_node_t *n, const char *field, struct kt_config *cfg,
		     int idx, int metrics_line)
{
	static const char *const keys[] = { "name",	"rate",	 "burst",     "idleExpiry",
					    "maxTags",	"reportInterval", "allow", "overrides",
					    "xdp",	"query", NULL };
	struct kt_tag_limit_cfg *t = &cfg->tags[idx];
	char sub[FIELD_LEN];
	yaml_node_t *v, *xdp, *q;
	const char *s;
	long long ll;
	int i, err;

	if (n->type != YAML_MAPPING_NODE)
		return fail(c, n, field, "expected a mapping, got %s", kind_of(n));
	if ((err = check_map(c, n, field, keys)))
		return err;
	t->line = line_of(n);
	t->idle_expiry_ns = 300 * NS_PER_SEC;
	t->max_tags = 65536;
	t->report_ns = NS_PER_SEC;
	t->prefix_v4 = 32;
	t->prefix_v6 = 128;

	if (!(v = map_get(c, n, "name")))
		return missing(c, n, field, "name");
	join(sub, field, "name");
	if ((err = get_scalar(c, v, sub, "a name", &s)))
		return err;
	if (!name_ok(s))
		return fail(c, v, sub, "\"%s\" must be 1..%d of A-Z a-z 0-9 _ . -", show_str(s).s,
			    KT_NAME_LEN - 1);
	for (i = 0; i < idx; i++)
		if (!strcmp(cfg->tags[i].name, s))
			return fail(c, v, sub, "\"%s\" is already used by tags[%d] (line %d)", s, i,
				    cfg->tags[i].line);
	snprintf(t->name, sizeof(t->name), "%s", s);

	if (!(v = map_get(c, n, "rate")))
		return missing(c, n, field, "rate");
	if ((err = get_number_in(c, v, join(sub, field, "rate"), 0, true, MAX_RATE, &t->rate)))
		return err;
	if (!(v = map_get(c, n, "burst")))
		return missing(c, n, field, "burst");
	if ((err = get_int(c, v, join(sub, field, "burst"), 1, TAG_MAX_BURST, &ll)))
		return err;
	t->burst = (uint64_t)ll;
	if ((v = map_get(c, n, "idleExpiry")) &&
	    (err = get_duration(c, v, join(sub, field, "idleExpiry"), NS_PER_SEC,
				7 * 24 * 3600 * NS_PER_SEC, &t->idle_expiry_ns)))
		return err;
	if ((v = map_get(c, n, "maxTags"))) {
		if ((err = get_int(c, v, join(sub, field, "maxTags"), 1, KT_TAG_MAX_TAGS, &ll)))
			return err;
		t->max_tags = (uint32_t)ll;
	}
	if ((v = map_get(c, n, "reportInterval")) &&
	    (err = get_duration(c, v, join(sub, field, "reportInterval"), 10 * NS_PER_MS,
				3600 * NS_PER_SEC, &t->report_ns)))
		return err;
	if ((v = map_get(c, n, "allow")) &&
	    (err = parse_tag_allow(c, v, join(sub, field, "allow"), t)))
		return err;
	if ((v = map_get(c, n, "overrides")) &&
	    (err = parse_tag_overrides(c, v, join(sub, field, "overrides"), t)))
		return err;
	xdp = map_get(c, n, "xdp");
	q = map_get(c, n, "query");
	if (!xdp && !q)
		return fail(c, n, field,
			    "needs xdp:, query: or both (where its tags come from; query: {} for the defaults)");
	if (xdp && (err = parse_tag_xdp(c, xdp, join(sub, field, "xdp"), cfg, idx)))
		return err;
	if (q && (err = parse_tag_query(c, q, join(sub, field, "query"), cfg, idx, metrics_line)))
		return err;
	return 0;
}

static int parse_root(struct ctx *c, yaml_node_t *root, struct kt_config *cfg)
{
	static const char *const keys[] = { "node",  "pinDir", "socket",  "tickInterval",
					    "epoch", "store",  "limits",  "metrics", "kubernetes",
					    "tags",  "attachRoot", NULL };
	struct sockaddr_un sun;
	yaml_node_t *v, *tick, *limits, *tags;
	yaml_node_item_t *it;
	char sub[FIELD_LEN];
	int i, n_tags = 0, err;

	if (!root || is_null(root))
		return fail(c, root, "limits", "required but missing (the file is empty)");
	if (root->type != YAML_MAPPING_NODE)
		return fail(c, root, "config", "expected a mapping at the top, got %s", kind_of(root));
	if ((err = check_map(c, root, "", keys)))
		return err;

	if ((v = map_get(c, root, "node"))) {
		/* the node name goes into store keys: keep it to a safe alphabet */
		if ((err = get_str(c, v, "node", 63, &cfg->node_name)))
			return err;
		if (strspn(cfg->node_name, NAME_CHARS) != strlen(cfg->node_name))
			return fail(c, v, "node", "\"%s\" may only hold A-Z a-z 0-9 _ . -",
				    show_str(cfg->node_name).s);
	} else if (getenv("NODE_NAME") && *getenv("NODE_NAME") &&
		   strlen(getenv("NODE_NAME")) <= 63 &&
		   strspn(getenv("NODE_NAME"), NAME_CHARS) == strlen(getenv("NODE_NAME"))) {
		/* in a pod the host name is the pod's, new at every rollout: the
		 * node's name (downward API) keeps the member ids in the store */
		if (!(cfg->node_name = strdup(getenv("NODE_NAME"))))
			return oom(c, root, "node");
	} else {
		char host[256] = "";

		if (gethostname(host, sizeof(host) - 1) < 0 || !host[0])
			return fail_code(c, -errno ? -errno : -EINVAL, root, "node",
					 "not given and gethostname() failed");
		cfg->node_name = strdup(host);
		if (!cfg->node_name)
			return oom(c, root, "node");
	}
	if ((v = map_get(c, root, "pinDir")))
		err = get_abs_path(c, v, "pinDir", MAX_PATH_BYTES, &cfg->pin_dir);
	else if (!(cfg->pin_dir = strdup("/sys/fs/bpf/kthrottle")))
		err = oom(c, root, "pinDir");
	if (err)
		return err;
	/* the cgroup itself is resolved with the members (apply.c): it must
	 * exist when the config is checked, started or reloaded */
	if ((v = map_get(c, root, "attachRoot"))) {
		if ((err = get_str(c, v, "attachRoot", MAX_PATH_BYTES, &cfg->attach_root)))
			return err;
		cfg->attach_root_line = line_of(v);
		if (!strcmp(cfg->attach_root, "auto") || !strcmp(cfg->attach_root, "members")) {
			cfg->attach_mode = cfg->attach_root[0] == 'a' ? KT_ATTACH_AUTO : KT_ATTACH_MEMBERS;
			free(cfg->attach_root);
			cfg->attach_root = NULL;
		} else if (cfg->attach_root[0] != '/') {
			return fail(c, v, "attachRoot",
				    "\"%s\" must be an absolute path, auto or members",
				    show_str(cfg->attach_root).s);
		} else {
			cfg->attach_mode = KT_ATTACH_PATH;
		}
	}
	if ((v = map_get(c, root, "socket")))
		err = get_abs_path(c, v, "socket", sizeof(sun.sun_path) - 1, &cfg->socket_path);
	else if (!(cfg->socket_path = strdup("/run/kthrottle/kthrottled.sock")))
		err = oom(c, root, "socket");
	if (err)
		return err;

	if ((v = map_get(c, root, "metrics")) && (err = parse_metrics(c, v, cfg)))
		return err;
	if ((v = map_get(c, root, "kubernetes")) && (err = parse_kube(c, v, &cfg->kube)))
		return err;

	cfg->tick_ns = 100 * NS_PER_MS;
	cfg->epoch_ns = NS_PER_SEC;
	if ((tick = map_get(c, root, "tickInterval")) &&
	    (err = get_duration(c, tick, "tickInterval", NS_PER_MS, 10 * NS_PER_SEC, &cfg->tick_ns)))
		return err;
	if ((v = map_get(c, root, "epoch")) &&
	    (err = get_duration(c, v, "epoch", 1, UINT64_MAX, &cfg->epoch_ns)))
		return err;
	if (cfg->epoch_ns < cfg->tick_ns)
		return fail(c, v ? v : tick, v ? "epoch" : "tickInterval",
			    "epoch (%s) must not be shorter than tickInterval (%s)",
			    fmt_dur(cfg->epoch_ns).s, fmt_dur(cfg->tick_ns).s);
	/* the daemon keeps one epoch of per-tick samples (KT_EPOCH_TICKS_MAX) */
	if (cfg->epoch_ns / cfg->tick_ns > KT_EPOCH_TICKS_MAX)
		return fail(c, v ? v : tick, v ? "epoch" : "tickInterval",
			    "epoch (%s) spans more than %d ticks of %s",
			    fmt_dur(cfg->epoch_ns).s, KT_EPOCH_TICKS_MAX, fmt_dur(cfg->tick_ns).s);

	if (store_defaults(&cfg->store))
		return oom(c, root, "store");
	if ((v = map_get(c, root, "store")) && (err = parse_store(c, v, "store", &cfg->store)))
		return err;

	/* tag limits: with at least one, limits: may be absent or empty */
	if ((tags = map_get(c, root, "tags"))) {
		if (tags->type != YAML_SEQUENCE_NODE)
			return fail(c, tags, "tags", "expected a list of tag limits, got %s",
				    kind_of(tags));
		n_tags = (int)(tags->data.sequence.items.top - tags->data.sequence.items.start);
		if (n_tags == 0)
			return fail(c, tags, "tags", "needs at least one tag limit (leave tags out for none)");
		if (n_tags > KT_MAX_TAG_LIMITS)
			return fail(c, node_at(c, tags->data.sequence.items.start[KT_MAX_TAG_LIMITS]),
				    "tags", "at most %d tag limits", KT_MAX_TAG_LIMITS);
	}

	limits = map_get(c, root, "limits");
	if (!limits && !n_tags)
		return missing(c, root, "", "limits");
	if (limits && !(n_tags && is_null(limits))) {
		if (limits->type != YAML_SEQUENCE_NODE)
			return fail(c, limits, "limits", "expected a list of limits, got %s",
				    kind_of(limits));
		i = (int)(limits->data.sequence.items.top - limits->data.sequence.items.start);
		if (i == 0 && !n_tags)
			return fail(c, limits, "limits", "needs at least one limit");
		if (i > KT_MAX_LIMITS)
			return fail(c, node_at(c, limits->data.sequence.items.start[KT_MAX_LIMITS]),
				    "limits", "at most %d limits", KT_MAX_LIMITS);
		if (i > 0) {
			cfg->limits = calloc((size_t)i, sizeof(*cfg->limits));
			if (!cfg->limits)
				return oom(c, limits, "limits");
			cfg->n_limits = i;
		}
		for (it = limits->data.sequence.items.start, i = 0;
		     it < limits->data.sequence.items.top; it++, i++)
			if ((err = parse_limit(c, node_at(c, *it), index_of(sub, "limits", i), cfg, i)))
				return err;
	}

	if (!n_tags)
		return 0;
	cfg->tags = calloc((size_t)n_tags, sizeof(*cfg->tags));
	if (!cfg->tags)
		return oom(c, tags, "tags");
	cfg->n_tags = n_tags;
	v = map_get(c, root, "metrics");
	for (it = tags->data.sequence.items.start, i = 0; it < tags->data.sequence.items.top;
	     it++, i++)
		if ((err = parse_tag(c, node_at(c, *it), index_of(sub, "tags", i), cfg, i,
				     v ? line_of(v) : 0)))
			return err;
	return 0;
}

static int yaml_error(struct ctx *c, yaml_parser_t *p, const char *text, size_t len)
{
	int line;

	if (p->error == YAML_MEMORY_ERROR)
		return fail_code(c, -ENOMEM, NULL, "yaml", "out of memory");
	if (p->error == YAML_READER_ERROR) {
		/* reader errors carry a byte offset, not a mark */
		size_t i, end = p->problem_offset < len ? p->problem_offset : len;

		line = 1;
		for (i = 0; i < end; i++)
			line += text[i] == '\n';
	} else {
		line = (int)p->problem_mark.line + 1;
	}
	if (c->err && c->errlen) {
		if (p->context)
			snprintf(c->err, c->errlen, "%s:%d: yaml: %s (%s at line %d)", c->file, line,
				 p->problem ? p->problem : "syntax error", p->context,
				 (int)p->context_mark.line + 1);
		else
			snprintf(c->err, c->errlen, "%s:%d: yaml: %s", c->file, line,
				 p->problem ? p->problem : "syntax error");
	}
	return -EINVAL;
}

/* libyaml's scanner visits every open flow level for each token, and its
 * loader looks every alias and anchor up in a list: 100k nested '[' took 15 s
 * to reject and 60k anchors 10 s, all inside yaml_parser_load. So one pass
 * over the events comes first and stops at MAX_DEPTH or MAX_ANCHORS; past it,
 * each token costs at most MAX_DEPTH and each alias MAX_ANCHORS, and the
 * document is loaded only when the whole stream is within both. A syntax
 * error ends this pass quietly: the load stops at the same place and reports
 * it, having done no more work than this pass. */
static int check_shape(struct ctx *c, const char *yaml, size_t len)
{
	yaml_parser_t parser;
	yaml_event_t ev;
	int depth = 0, anchors = 0, line = 0;
	const char *too_many = NULL;
	bool end = false;

	if (!yaml_parser_initialize(&parser))
		return fail_code(c, -ENOMEM, NULL, "yaml", "out of memory");
	yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
	while (!end && !too_many && yaml_parser_parse(&parser, &ev)) {
		const yaml_char_t *anchor = NULL;

		switch (ev.type) {
		case YAML_SEQUENCE_START_EVENT:
		case YAML_MAPPING_START_EVENT:
			anchor = ev.type == YAML_SEQUENCE_START_EVENT ?
					 ev.data.sequence_start.anchor :
					 ev.data.mapping_start.anchor;
			if (++depth > MAX_DEPTH)
				too_many = "too deeply nested (more than " KT_STR(MAX_DEPTH) " levels)";
			break;
		case YAML_SEQUENCE_END_EVENT:
		case YAML_MAPPING_END_EVENT:
			depth--;
			break;
		case YAML_SCALAR_EVENT:
			anchor = ev.data.scalar.anchor;
			break;
		case YAML_STREAM_END_EVENT:
			end = true;
			break;
		default:
			break;
		}
		if (anchor && ++anchors > MAX_ANCHORS)
			too_many = "too many anchors (more than " KT_STR(MAX_ANCHORS) ")";
		line = (int)ev.start_mark.line + 1;
		yaml_event_delete(&ev);
	}
	yaml_parser_delete(&parser);
	if (!too_many)
		return 0;
	if (c->err && c->errlen)
		snprintf(c->err, c->errlen, "%s:%d: yaml: %s", c->file, line, too_many);
	return -EINVAL;
}

int kt_config_parse(const char *name, const char *yaml, size_t len, struct kt_config *cfg,
		    char *err, size_t errlen)
{
	struct ctx c = { .file = name, .err = err, .errlen = errlen };
	yaml_parser_t parser;
	yaml_document_t doc, extra;
	bool have_doc = false;
	int ret;

	memset(cfg, 0, sizeof(*cfg));
	if (err && errlen)
		err[0] = '\0';
	if ((ret = check_shape(&c, yaml, len)))
		return ret;
	if (!yaml_parser_initialize(&parser))
		return fail_code(&c, -ENOMEM, NULL, "yaml", "out of memory");
	yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
	if (!yaml_parser_load(&parser, &doc)) {
		ret = yaml_error(&c, &parser, yaml, len);
		goto out;
	}
	have_doc = true;
	c.doc = &doc;
	if (yaml_document_get_root_node(&doc)) {
		/* a second document would be silently ignored: refuse it */
		if (!yaml_parser_load(&parser, &extra)) {
			ret = yaml_error(&c, &parser, yaml, len);
			goto out;
		}
		if (yaml_document_get_root_node(&extra)) {
			/* at its "---" (the document's start), not its first key */
			yaml_node_t at = { .start_mark = extra.start_mark };

			ret = fail(&c, &at, "yaml", "only one document is allowed");
			yaml_document_delete(&extra);
			goto out;
		}
		yaml_document_delete(&extra);
	}
	cfg->file = strdup(name);
	if (!cfg->file) {
		ret = oom(&c, NULL, "config");
		goto out;
	}
	ret = parse_root(&c, yaml_document_get_root_node(&doc), cfg);
	tdestroy(c.limit_names, no_free);
out:
	if (have_doc)
		yaml_document_delete(&doc);
	yaml_parser_delete(&parser);
	if (ret)
		kt_config_free(cfg);
	return ret;
}

__attribute__((format(printf, 3, 4)))
static void load_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

void kt_config_digest(const char *buf, size_t len, int read_err,
		      unsigned char out[KT_CONFIG_DIGEST_LEN])
{
	char mark[48];
	unsigned int n = 0;

	if (read_err) {
		len = (size_t)snprintf(mark, sizeof(mark), "kthrottle: unreadable: %d", read_err);
		buf = mark;
	}
	if (!EVP_Digest(buf ? buf : "", len, out, &n, EVP_sha256(), NULL) ||
	    n != KT_CONFIG_DIGEST_LEN)
		memset(out, 0, KT_CONFIG_DIGEST_LEN); /* no digest: every content looks alike */
}

void kt_config_file_digest(const char *path, unsigned char out[KT_CONFIG_DIGEST_LEN])
{
	const char *stage;
	char why[128], *buf = NULL;
	size_t len = 0;
	int ret = read_capped(path, MAX_FILE_BYTES, "config files", &buf, &len, &stage, why,
			      sizeof(why));

	kt_config_digest(buf, len, ret, out);
	if (buf) {
		explicit_bzero(buf, len); /* may hold an inline password */
		free(buf);
	}
}

int kt_config_load(const char *path, struct kt_config *cfg, char *err, size_t errlen)
{
	return kt_config_load_digest(path, cfg, NULL, err, errlen);
}

int kt_config_load_digest(const char *path, struct kt_config *cfg,
			  unsigned char digest[KT_CONFIG_DIGEST_LEN], char *err, size_t errlen)
{
	const char *stage;
	char why[128], *buf = NULL;
	size_t len = 0;
	int ret;

	memset(cfg, 0, sizeof(*cfg));
	ret = read_capped(path, MAX_FILE_BYTES, "config files", &buf, &len, &stage, why,
			  sizeof(why));
	if (digest)
		kt_config_digest(buf, len, ret, digest);
	if (ret) {
		load_err(err, errlen, "%s: cannot %s: %s", path, stage, why);
		return ret;
	}
	ret = kt_config_parse(path, buf, len, cfg, err, errlen);
	explicit_bzero(buf, len); /* may hold an inline password */
	free(buf);
	return ret;
}

void kt_config_free(struct kt_config *cfg)
{
	int i, j;

	if (!cfg)
		return;
	for (i = 0; cfg->limits && i < cfg->n_limits; i++) {
		for (j = 0; j < cfg->limits[i].n_cgroups; j++)
			free(cfg->limits[i].cgroups[j]);
		free(cfg->limits[i].cgroups);
		free(cfg->limits[i].cgroup_lines);
		store_free(&cfg->limits[i].store);
		pods_free(&cfg->limits[i].pods);
	}
	free(cfg->limits);
	for (i = 0; cfg->tags && i < cfg->n_tags; i++)
		free(cfg->tags[i].query_socket);
	free(cfg->tags);
	store_free(&cfg->store);
	free(cfg->kube.api_server);
	free(cfg->kube.token_file);
	free(cfg->kube.ca_file);
	free(cfg->kube.node_name);
	free(cfg->kube.cgroup_root);
	free(cfg->file);
	free(cfg->node_name);
	free(cfg->pin_dir);
	free(cfg->attach_root);
	free(cfg->socket_path);
	memset(cfg, 0, sizeof(*cfg));
}
