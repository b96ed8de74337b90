// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The config's limits: each limit's name, members (cgroups; pods: is
 * config_pods.c), match, unit, scope, errno, share, burst and rateLimit
 * (modes, strict), and its store (config_store.c). */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/config_int.h"
#include "base/cgwatch.h"
#include "base/netparse.h"

static const char *const unit_names[] = { "connection", "datagram", "packet", "byte", "request",
					  "concurrent", "call" };
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
static const char *const proto_names[] = { "any", "tcp", "udp" };
/* How long TCP waits before it tries a call the egress program held
 * (TCP_RESOURCE_PROBE_INTERVAL, for its first tries: see bpf/lib/call.h) */
#define KT_CALL_RETRY_NS (500 * NS_PER_MS)


const char *kt_unit_name(enum kt_unit u) { return NAME_OF(unit_names, u); }
const char *kt_mode_name(enum kt_mode m) { return NAME_OF(mode_names, m); }
const char *kt_scope_name(enum kt_scope s) { return NAME_OF(scope_names, s); }
const char *kt_share_name(enum kt_share_policy s) { return NAME_OF(share_names, s); }

static int parse_match(struct ctx *c, yaml_node_t *n, const char *field, struct kt_limit_cfg *l)
{
	struct kt_match *m = &l->match;
	char sub[FIELD_LEN], item[FIELD_LEN];
	yaml_node_t *v;
	const char *s, *why;
	int i, p, err = kt_cfg_check_map(c, n, field, kt_cfg_keys_match);

	if (err)
		return err;
	if ((v = map_get(c, n, "cidrs"))) {
		struct kt_cfg_list list;
		yaml_node_t *e;

		join(sub, field, "cidrs");
		if ((err = kt_cfg_list_open(c, v, sub, "a list of CIDRs", true,
					    "is empty (leave it out to match every address)", &list)))
			return err;
		m->n_cidrs = 0;
		while ((e = kt_cfg_list_next(c, &list, item))) {
			struct kt_cidr *cd = &m->cidrs[m->n_cidrs];

			if (m->n_cidrs >= KT_MAX_CIDRS)
				return fail(c, e, item, "at most %d CIDRs per limit", KT_MAX_CIDRS);
			if ((err = kt_cfg_get_scalar(c, e, item, "a CIDR", &s)))
				return err;
			if ((why = kt_parse_cidr(s, cd)))
				return fail(c, e, item, "\"%s\" %s", show_str(s).s, why);
			for (i = 0; i < m->n_cidrs; i++)
				if (!memcmp(&m->cidrs[i], cd, sizeof(*cd)))
					return fail(c, e, item, "\"%s\" is listed twice", show_str(s).s);
			m->n_cidrs++;
		}
	}
	if ((v = map_get(c, n, "ports"))) {
		join(sub, field, "ports");
		if ((err = kt_cfg_get_scalar(c, v, sub, "a port or port range", &s)))
			return err;
		if ((why = kt_parse_ports(s, &m->port_lo, &m->port_hi)))
			return fail(c, v, sub, "\"%s\" %s", show_str(s).s, why);
	}
	if ((v = map_get(c, n, "protocol"))) {
		if ((err = kt_cfg_get_enum(c, v, join(sub, field, "protocol"), proto_names, 3, &p)))
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
	int err = kt_cfg_check_map(c, n, field, keys);

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
		return kt_cfg_check_map(c, v, sub, no_keys);
	}
	rl->mode = !strcmp(sval(k), "onlyIfUsed") ? KT_MODE_ONLY_IF_USED : KT_MODE_GO_BACK_N;
	if ((err = kt_cfg_check_map(c, v, sub, rl->mode == KT_MODE_ONLY_IF_USED ? oiu_keys : gbn_keys)))
		return err;
	if ((w = map_get(c, v, "thresholdPercentage")) &&
	    (err = kt_cfg_get_number_in(c, w, join(sub2, sub, "thresholdPercentage"), 0, false, 100,
					&rl->threshold_pct)))
		return err;
	if ((w = map_get(c, v, "coolDownPeriod")) &&
	    (err = kt_cfg_get_duration(c, w, join(sub2, sub, "coolDownPeriod"), 0, UINT64_MAX,
				       &rl->cool_down_ns)))
		return err;
	if ((w = map_get(c, v, "rampDownPercentage")) &&
	    (err = kt_cfg_get_number_in(c, w, join(sub2, sub, "rampDownPercentage"), 0, false, 100,
					&rl->ramp_down_pct)))
		return err;
	return 0;
}

/* rateLimit.strict: {every, maxReserved, expireAfter}. */
static int parse_strict(struct ctx *c, yaml_node_t *n, const char *field, struct kt_strict_cfg *st)
{
	char sub[FIELD_LEN];
	yaml_node_t *v;
	long long ll;
	int err = kt_cfg_check_map(c, n, field, kt_cfg_keys_strict);

	if (err)
		return err;
	st->on = true;
	st->line = line_of(n);
	if (!(v = map_get(c, n, "every")))
		return kt_cfg_missing(c, n, field, "every");
	if ((err = kt_cfg_get_duration(c, v, join(sub, field, "every"), NS_PER_MS, 24 * 3600 * NS_PER_SEC,
				       &st->every_ns)))
		return err;
	st->max_reserved = 8;
	if ((v = map_get(c, n, "maxReserved"))) {
		if ((err = kt_cfg_get_int(c, v, join(sub, field, "maxReserved"), 0, 100000, &ll)))
			return err;
		st->max_reserved = (int)ll;
	}
	/* every / 2, but never under the 1ms floor a given value must meet */
	st->expire_ns = st->every_ns / 2 > NS_PER_MS ? st->every_ns / 2 : NS_PER_MS;
	if ((v = map_get(c, n, "expireAfter"))) {
		join(sub, field, "expireAfter");
		if ((err = kt_cfg_get_duration(c, v, sub, NS_PER_MS, UINT64_MAX, &st->expire_ns)))
			return err;
		if (st->expire_ns > st->every_ns)
			return fail(c, v, sub, "%s is longer than every (%s)", kt_cfg_fmt_dur(st->expire_ns).s,
				    kt_cfg_fmt_dur(st->every_ns).s);
	}
	return 0;
}

/* The rateLimit block (accepted verbatim). *store_node is set when it carries a store. */
static int parse_rate_limit(struct ctx *c, yaml_node_t *n, const char *field,
			    struct kt_rate_limit_cfg *rl, yaml_node_t **store_node)
{
	/* a strict limit's rate is 1 / every: nothing else shapes it */
	static const char *const not_strict[] = { "max", "min", "rampUpDuration", "modes",
						  "resumedRampUp", "ttl" };
	char sub[FIELD_LEN];
	yaml_node_t *v, *st;
	size_t i;
	int err = kt_cfg_check_map(c, n, field, kt_cfg_keys_rate_limit);

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
	if ((err = kt_cfg_get_number_in(c, v, join(sub, field, "max"), 0, true, MAX_RATE, &rl->max)))
		return err;
	rl->min = rl->max;
	if ((v = map_get(c, n, "min"))) {
		join(sub, field, "min");
		if ((err = kt_cfg_get_number_in(c, v, sub, 0, true, MAX_RATE, &rl->min)))
			return err;
		if (rl->min > rl->max)
			return fail(c, v, sub, "%g is greater than max (%g)", rl->min, rl->max);
	}
	if ((v = map_get(c, n, "rampUpDuration")) &&
	    (err = kt_cfg_get_duration(c, v, join(sub, field, "rampUpDuration"), 0, UINT64_MAX,
				       &rl->ramp_up_ns)))
		return err;
	if ((v = map_get(c, n, "modes")) &&
	    (err = parse_modes(c, v, join(sub, field, "modes"), rl)))
		return err;
	if ((v = map_get(c, n, "resumedRampUp")) &&
	    (err = kt_cfg_get_bool(c, v, join(sub, field, "resumedRampUp"), &rl->resumed_ramp_up)))
		return err;
	if ((v = map_get(c, n, "ttl")) &&
	    (err = kt_cfg_get_duration(c, v, join(sub, field, "ttl"), 0, UINT64_MAX, &rl->ttl_ns)))
		return err;
	return 0;
}

static int parse_cgroups(struct ctx *c, yaml_node_t *v, const char *field, struct kt_limit_cfg *l)
{
	char item[FIELD_LEN];
	struct kt_cfg_list list;
	yaml_node_t *e;
	int i, n, err;

	if ((err = kt_cfg_list_open(c, v, field, "a list of cgroup paths", true,
				    "needs at least one cgroup", &list)))
		return err;
	/* as many as listed, up to the cap (the one past it is refused) */
	n = list.n < KT_MAX_CGROUPS_PER_LIMIT ? list.n : KT_MAX_CGROUPS_PER_LIMIT;
	l->cgroups = calloc((size_t)n, sizeof(*l->cgroups));
	l->cgroup_lines = calloc((size_t)n, sizeof(*l->cgroup_lines));
	if (!l->cgroups || !l->cgroup_lines)
		return oom(c, v, field);
	while ((e = kt_cfg_list_next(c, &list, item))) {
		int k = l->n_cgroups;

		if (k >= KT_MAX_CGROUPS_PER_LIMIT)
			return fail(c, e, item, "at most %d cgroups per limit", KT_MAX_CGROUPS_PER_LIMIT);
		if ((err = kt_cfg_get_str(c, e, item, MAX_PATH_BYTES, &l->cgroups[k]))) {
			free(l->cgroups[k]);
			l->cgroups[k] = NULL;
			return err;
		}
		l->n_cgroups++;
		l->cgroup_lines[k] = line_of(e);
		if (kt_cfg_has_dotdot(l->cgroups[k]))
			return fail(c, e, item, "\"%s\" must not contain '..'", show_str(l->cgroups[k]).s);
		for (i = 0; i < k; i++)
			if (!strcmp(l->cgroups[i], l->cgroups[k]))
				return fail(c, e, item, "\"%s\" is listed twice (first at line %d)",
					    show_str(l->cgroups[k]).s, l->cgroup_lines[i]);
	}
	return 0;
}

/* capture:NAME (groupBy, weightBy): cgroups[j] holds {NAME} as one whole
 * component, once, at the same depth from the end as in every other entry;
 * it is replaced by * (so the rest of the daemon sees a plain pattern) and
 * the value is the name that many levels above a match. */
int kt_cfg_take_capture(struct ctx *c, yaml_node_t *v, const char *sub, struct kt_limit_cfg *l,
			int j, const char *name, int *up_out)
{
	char want[80], *e = l->cgroups[j], *at, *end;
	int up = 0;

	snprintf(want, sizeof(want), "{%s}", name);
	at = strstr(e, want);
	end = at ? at + strlen(want) : NULL;
	if (!at || (at > e && at[-1] != '/') || (*end && *end != '/') || strstr(end, want))
		return fail(c, v, sub,
			    "capture:%s needs %s once, as a whole path component, in every cgroups: entry (%s at line %d)",
			    name, want, show_str(e).s, l->cgroup_lines[j]);
	for (const char *p = end; *p; p++)
		up += *p == '/' && p[1] && p[1] != '/';
	if (up > KT_GROUP_UP_MAX || (*up_out >= 0 && up != *up_out))
		return fail(c, v, sub,
			    "%s at line %d: {%s} must be at most %d components from the end, and as far from it in every entry (%d, not %d)",
			    show_str(e).s, l->cgroup_lines[j], name, KT_GROUP_UP_MAX,
			    *up_out >= 0 ? *up_out : up, up);
	*up_out = up;
	at[0] = '*';
	memmove(at + 1, end, strlen(end) + 1);
	return 0;
}

/* groupBy and maxGroups: what a group is must be a thing every member
 * has (a namespace, a label, a matched directory's parent or one of its
 * components). */
static int parse_group_by(struct ctx *c, yaml_node_t *n, const char *field, struct kt_limit_cfg *l)
{
	char sub[FIELD_LEN];
	yaml_node_t *v = map_get(c, n, "groupBy"), *mg = map_get(c, n, "maxGroups");
	long long max = KT_GROUPS_DEFAULT;
	int err;

	if (!v) {
		if (mg)
			return fail(c, mg, join(sub, field, "maxGroups"), "needs groupBy");
		return 0;
	}
	join(sub, field, "groupBy");
	if (l->unit == KT_UNIT_REQUEST)
		return fail(c, v, sub,
			    "not allowed with unit request (a cooperative limit has no members to group)");
	if ((err = kt_cfg_parse_group_by(c, v, sub, l)))
		return err;
	if (kt_group_by_path(l->group_by)) {
		const char *how = kt_group_by_name(l->group_by);

		if (l->pods.set || !l->n_cgroups)
			return fail(c, v, sub,
				    "%s groups the cgroups a pattern matches: needs cgroups: patterns and no pods: (group pods by namespace or label:KEY)",
				    how);
		l->group_up = l->group_by == KT_GROUP_CAPTURE ? -1 : 1;
		for (int j = 0; j < l->n_cgroups; j++) {
			if (l->group_by == KT_GROUP_CAPTURE &&
			    (err = kt_cfg_take_capture(c, v, sub, l, j, l->group_label, &l->group_up)))
				return err;
			if (!kt_path_is_pattern(l->cgroups[j]))
				return fail(c, v, sub,
					    "%s needs every cgroups: entry to be a pattern (%s at line %d is a plain path: one group)",
					    how, show_str(l->cgroups[j]).s, l->cgroup_lines[j]);
		}
	} else if (!l->pods.set || l->n_cgroups) {
		return fail(c, v, sub,
			    "%s groups pods: needs pods: and no cgroups: (group cgroups: patterns by parent)",
			    l->group_by == KT_GROUP_NAMESPACE ? "namespace" : "label");
	}
	if (mg && (err = kt_cfg_get_int(c, mg, join(sub, field, "maxGroups"), 1, KT_GROUPS_MAX, &max)))
		return err;
	l->max_groups = (int)max;
	return 0;
}

/* unit concurrent: max and min count slots, whole ones, and what this
 * version does not do with them yet is refused by name. */
static int check_concurrent(struct ctx *c, yaml_node_t *n, yaml_node_t *rl, const char *field,
			    const struct kt_limit_cfg *l)
{
	static const struct {
		const char *key, *why;
	} not_yet[] = {
		{ "burst", "an in-flight limit has no burst: max is the number of connections open at once" },
		{ "parent", "not supported with unit concurrent yet" },
		{ "enforce", "not supported with unit concurrent yet (in-flight limits always enforce)" },
		{ "groupBy", "not supported with unit concurrent yet" },
	};
	char sub[FIELD_LEN];
	yaml_node_t *v;
	double whole[2] = { l->rl.max, l->rl.min };
	static const char *const names[2] = { "max", "min" };

	if ((v = map_get(c, rl, "strict")))
		return fail(c, v, join(sub, field, "rateLimit.strict"),
			    "not allowed with unit concurrent (permits pace admissions; an in-flight limit counts open connections)");
	for (size_t i = 0; i < sizeof(not_yet) / sizeof(not_yet[0]); i++)
		if ((v = map_get(c, n, not_yet[i].key)))
			return fail(c, v, join(sub, field, not_yet[i].key), "%s", not_yet[i].why);
	for (int i = 0; i < 2; i++)
		if (whole[i] != floor(whole[i]) && (v = map_get(c, rl, names[i])))
			return fail(c, v, join(sub, field, i ? "rateLimit.min" : "rateLimit.max"),
				    "%g is no whole number (unit concurrent counts connections open at once)",
				    whole[i]);
	return 0;
}

int kt_cfg_parse_limit(struct ctx *c, yaml_node_t *n, const char *field, struct kt_config *cfg,
		       int idx)
{
	struct kt_limit_cfg *l = &cfg->limits[idx];
	const struct kt_cfg_names names = { "limits", cfg->limits, sizeof(*cfg->limits),
					    offsetof(struct kt_limit_cfg, line), &c->limit_names };
	char sub[FIELD_LEN];
	yaml_node_t *v, *rl, *strict, *store = NULL, *share_node = NULL;
	int i, e, err;

	if (n->type != YAML_MAPPING_NODE)
		return fail(c, n, field, "expected a mapping, got %s", kind_of(n));
	if ((err = kt_cfg_check_map(c, n, field, kt_cfg_keys_limit)))
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

	if ((err = kt_cfg_get_name(c, n, field, &names, l->name)))
		return err;

	if (!(v = map_get(c, n, "unit")))
		return kt_cfg_missing(c, n, field, "unit");
	if ((err = kt_cfg_get_enum(c, v, join(sub, field, "unit"), unit_names, KT_UNIT_COUNT, &e)))
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
	if ((v = map_get(c, n, "pods")) && (err = kt_cfg_parse_pods(c, v, join(sub, field, "pods"), &l->pods)))
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
	/* calls are counted as turns of TCP conversations */
	if (l->unit == KT_UNIT_CALL) {
		if (l->match.proto_mask == KT_PROTO_UDP)
			return fail(c, map_get(c, map_get(c, n, "match"), "protocol"),
				    join(sub, field, "match.protocol"),
				    "udp never matches unit call (calls are counted on TCP connections; limit datagrams with unit datagram)");
		l->match.proto_mask = KT_PROTO_TCP;
	}
	if ((v = map_get(c, n, "scope"))) {
		if ((err = kt_cfg_get_enum(c, v, join(sub, field, "scope"), scope_names, 2, &e)))
			return err;
		if (l->unit == KT_UNIT_REQUEST && e != KT_SCOPE_NODE)
			return fail(c, v, sub,
				    "unit request is node scope only (one cooperative bucket per node, shared by every process that opens the limit)");
		l->scope = (enum kt_scope)e;
	}
	if ((v = map_get(c, n, "allowRawSockets")) &&
	    (err = kt_cfg_get_bool(c, v, join(sub, field, "allowRawSockets"), &l->allow_raw_sockets)))
		return err;
	if ((err = parse_group_by(c, n, field, l)))
		return err;
	if ((v = map_get(c, n, "parent"))) {
		const char *s;

		join(sub, field, "parent");
		if ((err = kt_cfg_get_scalar(c, v, sub, "a limit name", &s)))
			return err;
		if (!*s || strlen(s) >= KT_NAME_LEN || strspn(s, NAME_CHARS) != strlen(s))
			return fail(c, v, sub, "\"%s\" is no limit name (1..%d of A-Z a-z 0-9 _ . -)",
				    show_str(s).s, KT_NAME_LEN - 1);
		snprintf(l->parent_name, sizeof(l->parent_name), "%s", s);
		l->parent_line = line_of(v);
		if (l->unit == KT_UNIT_REQUEST)
			return fail(c, v, sub,
				    "not supported with unit request (a cooperative limit is decided in the application)");
	}
	if ((v = map_get(c, n, "enforce"))) {
		bool enforce;

		if ((err = kt_cfg_get_bool(c, v, join(sub, field, "enforce"), &enforce)))
			return err;
		l->shadow = !enforce;
		l->enforce_line = line_of(v);
		/* libkthrottle decides cooperative limits in the application */
		if (l->shadow && l->unit == KT_UNIT_REQUEST)
			return fail(c, v, sub,
				    "false is not supported with unit request (a cooperative limit is decided in the application by libkthrottle)");
	}
	l->refuse_errno = EBUSY;
	if ((v = map_get(c, n, "errno"))) {
		if ((err = kt_cfg_get_enum(c, v, join(sub, field, "errno"), errno_names,
					   sizeof(errno_names) / sizeof(errno_names[0]), &e)))
			return err;
		/* the egress hook cannot choose: its drops fail with EPERM */
		if (l->unit == KT_UNIT_PACKET || l->unit == KT_UNIT_BYTE)
			return fail(c, v, sub,
				    "applies to units connection, datagram and concurrent only (a refused packet fails its send with EPERM)");
		if (l->unit == KT_UNIT_CALL)
			return fail(c, v, sub,
				    "applies to units connection, datagram and concurrent only (a call over the rate waits in its connection: no error to choose)");
		if (l->unit == KT_UNIT_REQUEST)
			return fail(c, v, sub,
				    "applies to units connection, datagram and concurrent only (a refused request is the application's to answer)");
		l->refuse_errno = errno_values[e];
	}
	if ((v = map_get(c, n, "maxDelay"))) {
		uint64_t ns;

		join(sub, field, "maxDelay");
		if (l->unit != KT_UNIT_CALL)
			return fail(c, v, sub,
				    "applies to unit call only (how long a held call may wait; this limit's unit is %s)",
				    kt_unit_name(l->unit));
		if ((err = kt_cfg_get_duration(c, v, sub, KT_MAX_DELAY_MS_MIN * NS_PER_MS,
					       KT_MAX_DELAY_MS_MAX * NS_PER_MS, &ns)))
			return err;
		l->max_delay_ms = (uint32_t)(ns / NS_PER_MS);
	}
	if ((share_node = map_get(c, n, "share"))) {
		if ((err = kt_cfg_get_enum(c, share_node, join(sub, field, "share"), share_names, 2, &e)))
			return err;
		l->share = (enum kt_share_policy)e;
	}
	if (!(rl = map_get(c, n, "rateLimit")))
		return kt_cfg_missing(c, n, field, "rateLimit");
	if ((err = parse_rate_limit(c, rl, join(sub, field, "rateLimit"), &l->rl, &store)))
		return err;

	strict = l->rl.strict.on ? map_get(c, rl, "strict") : NULL;
	/* permits pace admissions one by one: nothing to count packets or bytes by */
	if (strict && (l->unit == KT_UNIT_PACKET || l->unit == KT_UNIT_BYTE))
		return fail(c, strict, join(sub, field, "rateLimit.strict"),
			    "needs unit connection, datagram or request (this limit's unit is %s at line %d)",
			    kt_unit_name(l->unit), line_of(map_get(c, n, "unit")));
	/* a held call is sent again when TCP next tries it, every 500 ms at
	 * first: a permit's window shorter than that could fall between two
	 * tries and expire unused. So the window is at least that long. */
	if (strict && l->unit == KT_UNIT_CALL) {
		struct kt_strict_cfg *st = &l->rl.strict;
		yaml_node_t *ea = map_get(c, strict, "expireAfter");

		if (st->every_ns < KT_CALL_RETRY_NS)
			return fail(c, map_get(c, strict, "every"), join(sub, field, "rateLimit.strict.every"),
				    "%s is shorter than %s, how long TCP waits before it tries a held call again (unit call at line %d)",
				    kt_cfg_fmt_dur(st->every_ns).s, kt_cfg_fmt_dur(KT_CALL_RETRY_NS).s,
				    line_of(map_get(c, n, "unit")));
		if (ea && st->expire_ns < KT_CALL_RETRY_NS)
			return fail(c, ea, join(sub, field, "rateLimit.strict.expireAfter"),
				    "%s is shorter than %s, how long TCP waits before it tries a held call again: a permit could expire between two tries (unit call at line %d)",
				    kt_cfg_fmt_dur(st->expire_ns).s, kt_cfg_fmt_dur(KT_CALL_RETRY_NS).s,
				    line_of(map_get(c, n, "unit")));
		if (st->expire_ns < KT_CALL_RETRY_NS)
			st->expire_ns = KT_CALL_RETRY_NS;
	}
	/* a permit is taken from the store for each admission: a shadow
	 * limit would spend the permits of the limits sharing its keys */
	if (strict && l->shadow)
		return fail(c, map_get(c, n, "enforce"), join(sub, field, "enforce"),
			    "false is not allowed with rateLimit.strict at line %d (each admission spends a permit from the store)",
			    line_of(strict));
	if (strict && l->group_by)
		return fail(c, map_get(c, n, "groupBy"), join(sub, field, "groupBy"),
			    "not allowed with rateLimit.strict at line %d (permits are issued per limit, not per group)",
			    line_of(strict));
	if (strict && l->parent_name[0])
		return fail(c, map_get(c, n, "parent"), join(sub, field, "parent"),
			    "not allowed with rateLimit.strict at line %d (a permit admits one call of one limit)",
			    line_of(strict));
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
			if ((err = kt_cfg_get_number_in(c, v, sub, floor, false, MAX_RATE, &l->burst)))
				return err;
			if (strict && l->burst != 1)
				return fail(c, v, sub, "%g must be 1 with rateLimit.strict at line %d (a permit admits one)",
					    l->burst, line_of(strict));
		}
	}

	if (store) {
		if ((err = kt_cfg_store_defaults(&l->store)))
			return oom(c, store, field);
		if ((err = kt_cfg_parse_store(c, store, join(sub, field, "rateLimit.store"), &l->store)))
			return err;
	} else if ((err = kt_cfg_store_copy(&l->store, &cfg->store))) {
		return oom(c, n, field);
	}
	if (l->unit == KT_UNIT_CONCURRENT && (err = check_concurrent(c, n, rl, field, l)))
		return err;
	if ((err = kt_cfg_parse_weights(c, n, field, l)))
		return err;
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


void kt_cfg_limit_free(struct kt_limit_cfg *l)
{
	int j;

	for (j = 0; j < l->n_cgroups; j++)
		free(l->cgroups[j]);
	free(l->cgroups);
	free(l->cgroup_lines);
	kt_cfg_store_free(&l->store);
	kt_pod_selector_free(&l->pods);
	free(l->group_label);
	kt_cfg_weights_free(l);
}

/* The `parent:` of limit i as written, for its errors. */
static yaml_node_t *parent_node(struct ctx *c, yaml_node_t *limits, int i)
{
	return map_get(c, node_at(c, limits->data.sequence.items.start[i]), "parent");
}

/* "a -> b -> c": limit i and its next `steps` ancestors, then " -> ..."
 * when `more` and the last one has a parent; for an error message. */
static void chain_text(const struct kt_config *cfg, int i, int steps, bool more, char *buf,
		       size_t len)
{
	size_t n = 0;

	buf[0] = '\0';
	for (int k = 0; k <= steps && i >= 0 && n < len; k++, i = kt_cfg_parent(&cfg->limits[i]))
		n += (size_t)snprintf(buf + n, len - n, "%s%s", k ? " -> " : "", cfg->limits[i].name);
	if (more && i >= 0 && n < len)
		snprintf(buf + n, len - n, " -> ...");
}

int kt_cfg_link_parents(struct ctx *c, yaml_node_t *limits, struct kt_config *cfg)
{
	char sub[FIELD_LEN], path[(KT_MAX_LEVELS + 2) * (KT_NAME_LEN + 4) + 8];
	int i, j;

	for (i = 0; i < cfg->n_limits; i++) {
		struct kt_limit_cfg *l = &cfg->limits[i];
		const struct kt_limit_cfg *p;

		if (!l->parent_name[0])
			continue;
		snprintf(sub, sizeof(sub), "limits[%d].parent", i);
		j = kt_cfg_name_index(&c->limit_names, cfg->limits, sizeof(*cfg->limits),
				      l->parent_name);
		if (j < 0)
			return fail(c, parent_node(c, limits, i), sub, "no limit is named \"%s\"",
				    l->parent_name);
		if (j == i)
			return fail(c, parent_node(c, limits, i), sub, "a limit cannot be its own parent");
		p = &cfg->limits[j];
		/* the parent counts the same tokens */
		if (p->unit != l->unit)
			return fail(c, parent_node(c, limits, i), sub,
				    "%s (line %d) is unit %s, this limit is unit %s: a parent counts the same tokens",
				    p->name, p->line, kt_unit_name(p->unit), kt_unit_name(l->unit));
		if (p->rl.strict.on)
			return fail(c, parent_node(c, limits, i), sub,
				    "%s (line %d) is strict: a permit admits one call of one limit",
				    p->name, p->line);
		/* a groupBy limit is a template: each group is a pool of its own */
		if (p->group_by)
			return fail(c, parent_node(c, limits, i), sub,
				    "%s (line %d) has groupBy: its groups are pools of their own, it cannot be a parent",
				    p->name, p->line);
		/* one bucket for every member cannot lead to a bucket per member */
		if (l->scope == KT_SCOPE_NODE && p->scope == KT_SCOPE_POD)
			return fail(c, parent_node(c, limits, i), sub,
				    "%s (line %d) is scope pod, this limit is scope node: a node-scope limit's parent must be node scope too",
				    p->name, p->line);
		/* weight: a share of the parent's pool, which only a parent
		 * divided by demand has */
		if (l->weight > 0 && p->share != KT_SHARE_DEMAND)
			return fail(c, map_get(c, node_at(c, limits->data.sequence.items.start[i]), "weight"),
				    (snprintf(sub, sizeof(sub), "limits[%d].weight", i), sub),
				    "its parent %s (line %d) shares equally: give it share: demand for its children to share it by weight",
				    p->name, p->line);
		if (l->weight > 0)
			cfg->limits[j].child_weights = true;
		l->parent = j + 1;
	}
	/* Each chain ends at a root within KT_MAX_LEVELS and never loops. One
	 * walk of at most KT_MAX_LEVELS + 1 steps a limit tells both: a loop
	 * that does not come back by then is a chain too deep as well. */
	for (i = 0; i < cfg->n_limits; i++) {
		int at = i, depth = 0;

		while (kt_cfg_parent(&cfg->limits[at]) >= 0 && depth <= KT_MAX_LEVELS) {
			at = kt_cfg_parent(&cfg->limits[at]);
			depth++;
			if (at == i) {
				chain_text(cfg, i, depth, false, path, sizeof(path));
				snprintf(sub, sizeof(sub), "limits[%d].parent", i);
				return fail(c, parent_node(c, limits, i), sub, "a cycle: %s", path);
			}
		}
		if (depth >= KT_MAX_LEVELS) {
			chain_text(cfg, i, KT_MAX_LEVELS, true, path, sizeof(path));
			snprintf(sub, sizeof(sub), "limits[%d].parent", i);
			return fail(c, parent_node(c, limits, i), sub,
				    "more than %d levels: %s", KT_MAX_LEVELS, path);
		}
		cfg->limits[i].depth = depth;
	}
	return 0;
}
