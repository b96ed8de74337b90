// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The config's tag limits (top-level `tags:`): rate, burst, allow and
 * override prefixes, and where the tags come from (xdp:, query:). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "base/config_int.h"
#include "base/netparse.h"

#define TAG_MAX_BURST 1000000000000LL  /* MAX_RATE tokens */
#define IFNAME_CHARS NAME_CHARS ":@"

/* One more allow or override prefix of t (the CIDR at e): within the rule
 * budget and not already listed in either. */
static int get_tag_rule(struct ctx *c, yaml_node_t *e, const char *item,
			const struct kt_tag_limit_cfg *t, struct kt_tag_prefix *p)
{
	const char *s, *why;
	int i, err;

	if ((err = kt_cfg_get_scalar(c, e, item, "a CIDR", &s)))
		return err;
	if ((why = kt_parse_tag_prefix(s, p)))
		return fail(c, e, item, "\"%s\" %s", show_str(s).s, why);
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

/* rate (tokens per second) and burst, both required. */
static int get_rate_burst(struct ctx *c, yaml_node_t *n, const char *field, double *rate,
			  uint64_t *burst)
{
	char sub[FIELD_LEN];
	yaml_node_t *v;
	long long ll;
	int err;

	if (!(v = map_get(c, n, "rate")))
		return kt_cfg_missing(c, n, field, "rate");
	if ((err = kt_cfg_get_number_in(c, v, join(sub, field, "rate"), 0, true, MAX_RATE, rate)))
		return err;
	if (!(v = map_get(c, n, "burst")))
		return kt_cfg_missing(c, n, field, "burst");
	if ((err = kt_cfg_get_int(c, v, join(sub, field, "burst"), 1, TAG_MAX_BURST, &ll)))
		return err;
	*burst = (uint64_t)ll;
	return 0;
}

static int parse_tag_allow(struct ctx *c, yaml_node_t *v, const char *field,
			   struct kt_tag_limit_cfg *t)
{
	char item[FIELD_LEN];
	struct kt_cfg_list list;
	struct kt_tag_prefix p;
	yaml_node_t *e;
	int err;

	if ((err = kt_cfg_list_open(c, v, field, "a list of CIDRs", true,
				    "is empty (leave it out to allow no prefix)", &list)))
		return err;
	while ((e = kt_cfg_list_next(c, &list, item))) {
		if ((err = get_tag_rule(c, e, item, t, &p)))
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
		if ((err = kt_cfg_check_map(c, e, item, keys)))
			return err;
		if (!(w = map_get(c, e, "cidr")))
			return kt_cfg_missing(c, e, item, "cidr");
		if ((err = get_tag_rule(c, w, join(sub, item, "cidr"), t, &p)))
			return err;
		o = &t->overrides[t->n_overrides];
		o->prefix = p;
		o->line = line_of(e);
		if ((err = get_rate_burst(c, e, item, &o->rate, &o->burst)))
			return err;
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
	static const char *const plen_keys[] = { "ipv4", "ipv6", NULL };
	struct kt_tag_limit_cfg *t = &cfg->tags[idx];
	char sub[FIELD_LEN], item[FIELD_LEN];
	struct kt_cfg_list list;
	yaml_node_t *v, *w, *e;
	const char *s;
	long long ll;
	int i, j, err = kt_cfg_check_map(c, n, field, kt_cfg_keys_xdp);

	if (err)
		return err;
	t->xdp = true;
	if (!(v = map_get(c, n, "interfaces")))
		return kt_cfg_missing(c, n, field, "interfaces");
	join(sub, field, "interfaces");
	if ((err = kt_cfg_list_open(c, v, sub, "a list of interface names", false,
				    "needs at least one interface", &list)))
		return err;
	while ((e = kt_cfg_list_next(c, &list, item))) {
		if (t->n_ifaces >= KT_TAG_MAX_IFACES)
			return fail(c, e, item, "at most %d interfaces per tag limit", KT_TAG_MAX_IFACES);
		if ((err = kt_cfg_get_scalar(c, e, item, "an interface name", &s)))
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
		if ((err = kt_cfg_check_map(c, v, sub, plen_keys)))
			return err;
		if ((w = map_get(c, v, "ipv4"))) {
			if ((err = kt_cfg_get_int(c, w, join(item, sub, "ipv4"), 1, 32, &ll)))
				return err;
			t->prefix_v4 = (uint8_t)ll;
		}
		if ((w = map_get(c, v, "ipv6"))) {
			if ((err = kt_cfg_get_int(c, w, join(item, sub, "ipv6"), 1, 128, &ll)))
				return err;
			t->prefix_v6 = (uint8_t)ll;
		}
	}
	return 0;
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
	struct kt_tag_limit_cfg *t = &cfg->tags[idx];
	struct sockaddr_un sun;
	char sub[FIELD_LEN];
	yaml_node_t *v;
	int j, err = kt_cfg_check_map(c, n, field, kt_cfg_keys_query);

	if (err)
		return err;
	t->query = true;
	join(sub, field, "socket");
	if ((v = map_get(c, n, "socket")))
		err = kt_cfg_get_abs_path(c, v, sub, sizeof(sun.sun_path) - 1, &t->query_socket);
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
	if ((err = kt_cfg_get_addr_port(c, v, sub, "127.0.0.1:7070, [::1]:7070, 7070", true,
					t->query_addr, sizeof(t->query_addr), &t->query_port)))
		return err;
	if (cfg->metrics_port &&
	    kt_listeners_clash(t->query_addr, t->query_port, cfg->metrics_addr, cfg->metrics_port))
		return fail(c, v, sub, "%s is the metrics endpoint (metrics at line %d)",
			    fmt_endpoint(t->query_addr, t->query_port).s, metrics_line);
	for (j = 0; j < idx; j++)
		if (cfg->tags[j].query_port &&
		    kt_listeners_clash(t->query_addr, t->query_port, cfg->tags[j].query_addr,
				       cfg->tags[j].query_port))
			return fail(c, v, sub,
				    "%s is already used by tag limit %s (tags[%d] at line %d)",
				    fmt_endpoint(t->query_addr, t->query_port).s, cfg->tags[j].name, j,
				    cfg->tags[j].line);
	return 0;
}

int kt_cfg_parse_tag(struct ctx *c, yaml_node_t *n, const char *field, struct kt_config *cfg,
		     int idx, int metrics_line)
{
	struct kt_tag_limit_cfg *t = &cfg->tags[idx];
	const struct kt_cfg_names names = { "tags", cfg->tags, sizeof(*cfg->tags),
					    offsetof(struct kt_tag_limit_cfg, line), &c->tag_names };
	char sub[FIELD_LEN];
	yaml_node_t *v, *xdp, *q;
	long long ll;
	int err;

	if (n->type != YAML_MAPPING_NODE)
		return fail(c, n, field, "expected a mapping, got %s", kind_of(n));
	if ((err = kt_cfg_check_map(c, n, field, kt_cfg_keys_tag)))
		return err;
	t->line = line_of(n);
	t->idle_expiry_ns = 300 * NS_PER_SEC;
	t->max_tags = 65536;
	t->report_ns = NS_PER_SEC;
	t->prefix_v4 = 32;
	t->prefix_v6 = 128;

	if ((err = kt_cfg_get_name(c, n, field, &names, t->name)))
		return err;

	if ((err = get_rate_burst(c, n, field, &t->rate, &t->burst)))
		return err;
	if ((v = map_get(c, n, "idleExpiry")) &&
	    (err = kt_cfg_get_duration(c, v, join(sub, field, "idleExpiry"), NS_PER_SEC,
				       7 * 24 * 3600 * NS_PER_SEC, &t->idle_expiry_ns)))
		return err;
	if ((v = map_get(c, n, "maxTags"))) {
		if ((err = kt_cfg_get_int(c, v, join(sub, field, "maxTags"), 1, KT_TAG_MAX_TAGS, &ll)))
			return err;
		t->max_tags = (uint32_t)ll;
	}
	if ((v = map_get(c, n, "reportInterval")) &&
	    (err = kt_cfg_get_duration(c, v, join(sub, field, "reportInterval"), 10 * NS_PER_MS,
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
