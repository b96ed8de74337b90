// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The config's YAML walker (config_int.h): error lines, mapping checks
 * (unknown and duplicate keys), one-or-a-list fields, names, and the typed
 * scalar getters. Every mapping is checked for unknown and duplicate keys
 * before its values are read, so a typo never silently falls back to a
 * default. */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <search.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/config_int.h"
#include "base/netparse.h"

/* ---- errors ----------------------------------------------------------- */

__attribute__((format(printf, 5, 6)))
int kt_cfg_fail_code(struct ctx *c, int code, const yaml_node_t *n, const char *field,
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

/* ---- mappings, lists and names --------------------------------------- */

int kt_cfg_check_map(struct ctx *c, yaml_node_t *n, const char *field, const char *const *keys)
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

int kt_cfg_missing(struct ctx *c, yaml_node_t *parent, const char *field, const char *key)
{
	char sub[FIELD_LEN];

	return fail(c, parent, join(sub, field, key), "required but missing");
}

int kt_cfg_list_open(struct ctx *c, yaml_node_t *v, const char *field, const char *what,
		     bool null_is_item, const char *empty, struct kt_cfg_list *l)
{
	l->v = v;
	l->field = field;
	l->i = 0;
	if (v->type == YAML_SCALAR_NODE && (null_is_item || !is_null(v)))
		l->n = 1;
	else if (v->type == YAML_SEQUENCE_NODE)
		l->n = (int)(v->data.sequence.items.top - v->data.sequence.items.start);
	else
		return fail(c, v, field, "expected %s, got %s", what,
			    is_null(v) ? "nothing" : kind_of(v));
	if (!l->n)
		return fail(c, v, field, "%s", empty);
	return 0;
}

yaml_node_t *kt_cfg_list_next(struct ctx *c, struct kt_cfg_list *l, char item[FIELD_LEN])
{
	if (l->i >= l->n)
		return NULL;
	if (l->v->type != YAML_SEQUENCE_NODE) {
		l->i++;
		snprintf(item, FIELD_LEN, "%s", l->field);
		return l->v;
	}
	index_of(item, l->field, l->i);
	return node_at(c, l->v->data.sequence.items.start[l->i++]);
}

static int cmp_name(const void *x, const void *y)
{
	return strcmp(x, y);
}

int kt_cfg_name_index(void *const *names, const void *base, size_t size, const char *name)
{
	char *const *found = tfind(name, names, cmp_name);

	return found ? (int)((size_t)(*found - (const char *)base) / size) : -1;
}

int kt_cfg_get_name(struct ctx *c, yaml_node_t *n, const char *field,
		    const struct kt_cfg_names *nl, char out[KT_NAME_LEN])
{
	char sub[FIELD_LEN];
	yaml_node_t *v;
	const char *s, *prev;
	size_t len;
	int err, i;

	if (!(v = map_get(c, n, "name")))
		return kt_cfg_missing(c, n, field, "name");
	join(sub, field, "name");
	if ((err = kt_cfg_get_scalar(c, v, sub, "a name", &s)))
		return err;
	len = strlen(s);
	if (!len || len >= KT_NAME_LEN || strspn(s, NAME_CHARS) != len)
		return fail(c, v, sub, "\"%s\" must be 1..%d of A-Z a-z 0-9 _ . -", show_str(s).s,
			    KT_NAME_LEN - 1);
	snprintf(out, KT_NAME_LEN, "%s", s);
	{
		char **seen = tsearch(out, nl->names, cmp_name);

		if (!seen)
			return oom(c, v, sub);
		if (*seen == out)
			return 0;
		prev = *seen;
	}
	i = (int)((size_t)(prev - (const char *)nl->base) / nl->size);
	return fail(c, v, sub, "\"%s\" is already used by %s[%d] (line %d)", s, nl->list, i,
		    *(const int *)((const char *)nl->base + (size_t)i * nl->size + nl->line_off));
}

/* ---- scalars ---------------------------------------------------------- */

/* A non-null scalar with no embedded NUL. `what` names the expected type. */
int kt_cfg_get_scalar(struct ctx *c, yaml_node_t *v, const char *field, const char *what,
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

bool kt_cfg_has_control(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return true;
	return false;
}

int kt_cfg_get_str(struct ctx *c, yaml_node_t *v, const char *field, size_t maxlen, char **out)
{
	const char *s;
	int err = kt_cfg_get_scalar(c, v, field, "a string", &s);

	if (err)
		return err;
	if (!*s)
		return fail(c, v, field, "is empty");
	if (strlen(s) > maxlen)
		return fail(c, v, field, "longer than %zu bytes", maxlen);
	if (kt_cfg_has_control(s))
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
	int err = kt_cfg_get_scalar(c, v, field, "a number", &s);

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
int kt_cfg_get_number_in(struct ctx *c, yaml_node_t *v, const char *field, double lo, bool above_lo,
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

int kt_cfg_get_int(struct ctx *c, yaml_node_t *v, const char *field, long long lo, long long hi,
		   long long *out)
{
	const char *s;
	int err = kt_cfg_get_scalar(c, v, field, "an integer", &s);

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

int kt_cfg_get_bool(struct ctx *c, yaml_node_t *v, const char *field, bool *out)
{
	const char *s;
	int err = kt_cfg_get_scalar(c, v, field, "true or false", &s);

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

int kt_cfg_get_enum(struct ctx *c, yaml_node_t *v, const char *field, const char *const *names,
		    size_t n, int *out)
{
	char allowed[200];
	const char *s;
	size_t i;
	int err = kt_cfg_get_scalar(c, v, field, "a string", &s);

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

int kt_cfg_get_abs_path(struct ctx *c, yaml_node_t *v, const char *field, size_t maxlen, char **out)
{
	int err = kt_cfg_get_str(c, v, field, maxlen, out);

	if (err)
		return err;
	if ((*out)[0] != '/')
		return fail(c, v, field, "\"%s\" must be an absolute path", show_str(*out).s);
	return 0;
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
struct shown kt_cfg_fmt_dur(uint64_t ns)
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

int kt_cfg_get_duration(struct ctx *c, yaml_node_t *v, const char *field, uint64_t lo, uint64_t hi,
			uint64_t *out)
{
	const char *s;
	int err = kt_cfg_get_scalar(c, v, field, "a duration", &s);

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
			    kt_cfg_fmt_dur(lo).s);
	if (*out > hi)
		return fail(c, v, field, "%s is longer than the maximum %s", show_str(s).s,
			    kt_cfg_fmt_dur(hi).s);
	return 0;
}

/* ---- addresses and paths --------------------------------------------- */

/* "ADDR:PORT" or "[V6]:PORT" with an IP literal (no name to resolve at
 * start); with `local`, "PORT" and ":PORT" alone mean 127.0.0.1. The address
 * is returned without brackets. Brackets hold IPv6 and only IPv6, as in a URL,
 * so "::1:8080" (itself an IPv6 address) is refused as ambiguous. */
int kt_cfg_get_addr_port(struct ctx *c, yaml_node_t *v, const char *field, const char *eg,
			 bool local, char *addr, size_t addrlen, int *out_port)
{
	char host[48], hint[200], *end;
	unsigned char bin[16];
	const char *s, *colon, *ps, *h;
	size_t hl;
	long port;
	int err = kt_cfg_get_scalar(c, v, field, "ADDR:PORT", &s);

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
					    kt_v6_needs_brackets(s, strlen(s), 0, hint, sizeof(hint)));
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

/* A cgroup path must not climb out of the cgroup2 mount it is resolved in. */
bool kt_cfg_has_dotdot(const char *p)
{
	const char *s = p;

	while ((s = strstr(s, ".."))) {
		if ((s == p || s[-1] == '/') && (s[2] == '\0' || s[2] == '/'))
			return true;
		s += 2;
	}
	return false;
}
