// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Config parser: defaults field by field, every error path with its exact
 * line and field path, durations, and every example config. */
#include <errno.h>
#include <glob.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/config.h"

#define MS 1000000ULL
#define SEC 1000000000ULL

static int parse(const char *yaml, struct kt_config *cfg, char *err)
{
	return kt_config_parse("t.yaml", yaml, strlen(yaml), cfg, err, KT_ERR_LEN);
}

static bool all_zero(const void *p, size_t n)
{
	const unsigned char *b = p;
	size_t i;

	for (i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

/* Lines 1-5: one limit with every required field. */
#define LIM "limits:\n  - name: a\n    cgroups: [x]\n    unit: connection\n    rateLimit: {max: 100}\n"
/* Lines 1-6: the same with a block rateLimit, for rateLimit keys at line 7. */
#define RL "limits:\n  - name: a\n    cgroups: [x]\n    unit: connection\n    rateLimit:\n      max: 100\n"
/* Line 1 "store:", line 2 "  redisStore:", line 3 "    mode: single"... */
#define REDIS(body) "store:\n  redisStore:\n    mode: single\n" body LIM
#define SENT(body) "store:\n  redisStore:\n    mode: sentinel\n" body LIM

/* Lines 1-4: a redis store. */
#define SREDIS "store:\n  redisStore:\n    mode: single\n    url: redis://h\n"
/* Lines 5-10: a strict limit after SREDIS, strict at line 10; more
 * rateLimit keys (6 spaces) or limit keys (4 spaces) from line 11. */
#define SLIM(unit, strict) \
	SREDIS "limits:\n  - name: s\n    cgroups: [x]\n    unit: " unit "\n    rateLimit:\n" \
	"      strict: " strict "\n"

/* Lines 1-4: a tag limit with no source yet; its keys (4 spaces) from line 5. */
#define TAGX "tags:\n  - name: a\n    rate: 10\n    burst: 20\n"
/* Lines 1-5: the same with `query: {}`; more keys from line 6. */
#define TAG TAGX "    query: {}\n"
/* A second tag limit "b" of three lines, then `body`. */
#define TAG2(body) "  - name: b\n    rate: 1\n    burst: 1\n" body

/* ---- valid configs ---------------------------------------------------- */

static void check_default_store(const struct kt_store_cfg *s)
{
	assert_int_equal(s->kind, KT_STORE_LOCAL);
	assert_int_equal(s->line, 0);
	assert_int_equal(s->heartbeat_ns, 1 * SEC);
	assert_int_equal(s->stale_after, 3);
	assert_int_equal(s->valid_for_ns, 10 * SEC);
	assert_int_equal(s->fallback_for_ns, 60 * SEC);
	assert_int_equal(s->max_members, 0);
	assert_int_equal(s->on_failure, KT_FAIL_CONSERVATIVE);
	assert_string_equal(s->key_prefix, "kthrottle");
	assert_null(s->host);
	assert_int_equal(s->n_endpoints, 0);
	assert_false(s->redis_tls.enabled);
	assert_null(s->redis_auth.password);
}

static void test_minimal_defaults(void **state)
{
	struct kt_config cfg;
	char err[KT_ERR_LEN], host[256] = "";
	const struct kt_limit_cfg *l;
	static const uint8_t v4_all[16] = { [10] = 0xff, [11] = 0xff };
	static const uint8_t zero[16] = { 0 };

	(void)state;
	unsetenv("NODE_NAME");
	assert_int_equal(parse(LIM, &cfg, err), 0);
	assert_string_equal(cfg.file, "t.yaml");
	assert_int_equal(gethostname(host, sizeof(host) - 1), 0);
	assert_string_equal(cfg.node_name, host);
	kt_config_free(&cfg);
	/* in a pod: the node's name from the downward API, not the pod's */
	setenv("NODE_NAME", "worker-7", 1);
	assert_int_equal(parse(LIM, &cfg, err), 0);
	assert_string_equal(cfg.node_name, "worker-7");
	kt_config_free(&cfg);
	setenv("NODE_NAME", "not/a name", 1);
	assert_int_equal(parse(LIM, &cfg, err), 0);
	assert_string_equal(cfg.node_name, host);
	unsetenv("NODE_NAME");
	kt_config_free(&cfg);
	assert_int_equal(parse(LIM, &cfg, err), 0);
	assert_string_equal(cfg.pin_dir, "/sys/fs/bpf/kthrottle");
	assert_string_equal(cfg.socket_path, "/run/kthrottle/kthrottled.sock");
	assert_int_equal(cfg.tick_ns, 100 * MS);
	assert_int_equal(cfg.epoch_ns, 1 * SEC);
	check_default_store(&cfg.store);
	assert_int_equal(cfg.n_limits, 1);

	l = &cfg.limits[0];
	assert_string_equal(l->name, "a");
	assert_int_equal(l->line, 2);
	assert_int_equal(l->n_cgroups, 1);
	assert_string_equal(l->cgroups[0], "x");
	assert_int_equal(l->cgroup_lines[0], 3);
	assert_int_equal(l->match.n_cidrs, 2);
	assert_memory_equal(l->match.cidrs[0].addr, v4_all, 16);
	assert_int_equal(l->match.cidrs[0].prefixlen, 96);
	assert_memory_equal(l->match.cidrs[1].addr, zero, 16);
	assert_int_equal(l->match.cidrs[1].prefixlen, 0);
	assert_int_equal(l->match.port_lo, 0);
	assert_int_equal(l->match.port_hi, 65535);
	assert_int_equal(l->match.proto_mask, KT_PROTO_TCP | KT_PROTO_UDP);
	assert_int_equal(l->unit, KT_UNIT_CONNECTION);
	assert_int_equal(l->scope, KT_SCOPE_POD);
	assert_int_equal(l->share, KT_SHARE_EQUAL);
	assert_true(l->burst == 100);
	assert_true(l->rl.max == 100);
	assert_true(l->rl.min == 100);
	assert_int_equal(l->rl.ramp_up_ns, 0);
	assert_int_equal(l->rl.mode, KT_MODE_RELAXED);
	assert_true(l->rl.threshold_pct == 50);
	assert_int_equal(l->rl.cool_down_ns, 5 * SEC);
	assert_true(l->rl.ramp_down_pct == 50);
	assert_false(l->rl.resumed_ramp_up);
	assert_int_equal(l->rl.ttl_ns, 180 * SEC);
	check_default_store(&l->store);
	assert_ptr_not_equal(l->store.key_prefix, cfg.store.key_prefix);
	kt_config_free(&cfg);
	assert_true(all_zero(&cfg, sizeof(cfg)));
}

/* tags: every key given, and the defaults of a tag limit that gives none. */
static void test_tags(void **state)
{
	static const char yaml[] =
		"metrics: 127.0.0.1:9464\n"                              /* 1 */
		"tags:\n"
		"  - name: api-clients\n"                                /* 3 */
		"    rate: 0.5\n"
		"    burst: 20\n"
		"    idleExpiry: 10m\n"
		"    maxTags: 1000\n"
		"    reportInterval: 250ms\n"
		"    allow: [10.1.2.3/8, \"fd00::1/8\", 192.168.1.7]\n" /* 9 */
		"    overrides:\n"
		"      - cidr: 192.168.1.0/24\n"                         /* 11 */
		"        rate: 100\n"
		"        burst: 200\n"
		"      - {cidr: \"2001:db8::/32\", rate: 5, burst: 1}\n"  /* 14 */
		"    xdp:\n"
		"      interfaces: [eth0, veth1.2, \"br-x:1\", v@e]\n"
		"      prefixLen: {ipv4: 24, ipv6: 64}\n"
		"    query:\n"
		"      socket: /run/kt/api.sock\n"
		"      listen: \"[::1]:7070\"\n"
		"  - name: b\n"                                          /* 21 */
		"    rate: 3\n"
		"    burst: 1\n"
		"    query:\n"
		"  - name: c\n"                                          /* 25 */
		"    rate: 1\n"
		"    burst: 1\n"
		"    xdp: {interfaces: eth2, prefixLen: {ipv6: 48}}\n"
		LIM;
	static const uint8_t ten[16] = { 10 }, host[16] = { 192, 168, 1, 7 }, fd00[16] = { 0xfd };
	static const uint8_t net[16] = { 192, 168, 1 }, db8[16] = { 0x20, 0x01, 0x0d, 0xb8 };
	struct kt_config cfg;
	char err[KT_ERR_LEN];
	const struct kt_tag_limit_cfg *t;

	(void)state;
	if (parse(yaml, &cfg, err))
		fail_msg("%s", err);
	assert_int_equal(cfg.n_limits, 1);
	assert_int_equal(cfg.n_tags, 3);

	t = &cfg.tags[0];
	assert_string_equal(t->name, "api-clients");
	assert_int_equal(t->line, 3);
	assert_true(t->rate == 0.5);
	assert_int_equal(t->burst, 20);
	assert_int_equal(t->idle_expiry_ns, 600 * SEC);
	assert_int_equal(t->max_tags, 1000);
	assert_int_equal(t->report_ns, 250 * MS);
	assert_int_equal(t->n_allow, 3);
	assert_int_equal(t->allow[0].family, 4);
	assert_int_equal(t->allow[0].prefix_len, 8);
	assert_memory_equal(t->allow[0].addr, ten, 16); /* host bits cleared */
	assert_int_equal(t->allow[1].family, 6);
	assert_int_equal(t->allow[1].prefix_len, 8);
	assert_memory_equal(t->allow[1].addr, fd00, 16);
	assert_int_equal(t->allow[2].family, 4);
	assert_int_equal(t->allow[2].prefix_len, 32);
	assert_memory_equal(t->allow[2].addr, host, 16);
	assert_int_equal(t->n_overrides, 2);
	assert_int_equal(t->overrides[0].prefix.family, 4);
	assert_int_equal(t->overrides[0].prefix.prefix_len, 24);
	assert_memory_equal(t->overrides[0].prefix.addr, net, 16);
	assert_true(t->overrides[0].rate == 100);
	assert_int_equal(t->overrides[0].burst, 200);
	assert_int_equal(t->overrides[0].line, 11);
	assert_int_equal(t->overrides[1].prefix.family, 6);
	assert_int_equal(t->overrides[1].prefix.prefix_len, 32);
	assert_memory_equal(t->overrides[1].prefix.addr, db8, 16);
	assert_true(t->overrides[1].rate == 5);
	assert_int_equal(t->overrides[1].burst, 1);
	assert_int_equal(t->overrides[1].line, 14);
	assert_true(t->xdp);
	assert_int_equal(t->n_ifaces, 4);
	assert_string_equal(t->ifaces[0], "eth0");
	assert_string_equal(t->ifaces[1], "veth1.2");
	assert_string_equal(t->ifaces[2], "br-x:1");
	assert_string_equal(t->ifaces[3], "v@e");
	assert_int_equal(t->prefix_v4, 24);
	assert_int_equal(t->prefix_v6, 64);
	assert_true(t->query);
	assert_string_equal(t->query_socket, "/run/kt/api.sock");
	assert_string_equal(t->query_addr, "::1");
	assert_int_equal(t->query_port, 7070);

	/* `query:` alone: every default, no xdp */
	t = &cfg.tags[1];
	assert_string_equal(t->name, "b");
	assert_int_equal(t->line, 21);
	assert_true(t->rate == 3);
	assert_int_equal(t->burst, 1);
	assert_int_equal(t->idle_expiry_ns, 300 * SEC);
	assert_int_equal(t->max_tags, 65536);
	assert_int_equal(t->report_ns, 1 * SEC);
	assert_int_equal(t->n_allow, 0);
	assert_int_equal(t->n_overrides, 0);
	assert_false(t->xdp);
	assert_int_equal(t->n_ifaces, 0);
	assert_int_equal(t->prefix_v4, 32);
	assert_int_equal(t->prefix_v6, 128);
	assert_true(t->query);
	assert_string_equal(t->query_socket, KT_TAG_DEFAULT_SOCKET);
	assert_int_equal(t->query_port, 0);

	/* xdp only: one interface as a plain string, prefixLen keys each optional */
	t = &cfg.tags[2];
	assert_int_equal(t->line, 25);
	assert_true(t->xdp);
	assert_false(t->query);
	assert_null(t->query_socket);
	assert_int_equal(t->n_ifaces, 1);
	assert_string_equal(t->ifaces[0], "eth2");
	assert_int_equal(t->prefix_v4, 32);
	assert_int_equal(t->prefix_v6, 48);
	kt_config_free(&cfg);
	assert_true(all_zero(&cfg, sizeof(cfg)));
}

/* Tag limits alone: limits: may be absent, empty or null. */
static void test_tags_only(void **state)
{
	static const char *const yamls[] = {
		TAG,
		"limits: []\n" TAG,
		"limits:\n" TAG,
		TAG "limits: []\n",
	};
	struct kt_config cfg;
	char err[KT_ERR_LEN];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(yamls) / sizeof(yamls[0]); i++) {
		if (parse(yamls[i], &cfg, err))
			fail_msg("case %zu: %s", i, err);
		assert_int_equal(cfg.n_limits, 0);
		assert_null(cfg.limits);
		assert_int_equal(cfg.n_tags, 1);
		assert_string_equal(cfg.tags[0].name, "a");
		assert_false(kt_config_uses_pods(&cfg));
		kt_config_free(&cfg);
	}
}

/* query.listen: "PORT" and ":PORT" mean 127.0.0.1; other ports than the
 * metrics endpoint's and the other tag limits' are fine. */
static void test_tag_listen(void **state)
{
	static const struct {
		const char *listen;
		const char *addr;
		int port;
	} cases[] = {
		{ "7070", "127.0.0.1", 7070 },
		{ "\":7071\"", "127.0.0.1", 7071 },
		{ "10.0.0.1:1", "10.0.0.1", 1 },
		{ "\"[fd00::2]:65535\"", "fd00::2", 65535 },
		{ "0.0.0.0:9465", "0.0.0.0", 9465 },
	};
	struct kt_config cfg;
	char yaml[512], err[KT_ERR_LEN];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(yaml, sizeof(yaml),
			 "metrics: 127.0.0.1:9464\n" TAGX "    query: {listen: %s}\n"
			 TAG2("    query: {socket: /run/b.sock, listen: \"[::1]:9466\"}\n"),
			 cases[i].listen);
		if (parse(yaml, &cfg, err))
			fail_msg("%s: %s", cases[i].listen, err);
		assert_string_equal(cfg.tags[0].query_addr, cases[i].addr);
		assert_int_equal(cfg.tags[0].query_port, cases[i].port);
		assert_int_equal(cfg.tags[1].query_port, 9466);
		kt_config_free(&cfg);
	}
}

/* At most KT_MAX_TAG_LIMITS tag limits, and KT_TAG_MAX_RULES allow and
 * override prefixes in one. */
static void test_tag_counts(void **state)
{
	size_t cap = 128 * (KT_MAX_TAG_LIMITS + KT_TAG_MAX_RULES + 8);
	char *yaml = malloc(cap), err[KT_ERR_LEN], expect[128];
	struct kt_config cfg;
	size_t off;
	int i;

	(void)state;
	assert_non_null(yaml);
	off = (size_t)snprintf(yaml, cap, "tags:\n");
	for (i = 0; i < KT_MAX_TAG_LIMITS; i++)
		off += (size_t)snprintf(yaml + off, cap - off,
					"- {name: t%d, rate: 1, burst: 1, xdp: {interfaces: [e%d]}}\n", i, i);
	assert_int_equal(parse(yaml, &cfg, err), 0);
	assert_int_equal(cfg.n_tags, KT_MAX_TAG_LIMITS);
	kt_config_free(&cfg);
	snprintf(yaml + off, cap - off, "- {name: extra, rate: 1, burst: 1, query: {}}\n");
	assert_int_equal(parse(yaml, &cfg, err), -EINVAL);
	snprintf(expect, sizeof(expect), "t.yaml:%d: tags: at most %d tag limits",
		 KT_MAX_TAG_LIMITS + 2, KT_MAX_TAG_LIMITS);
	assert_string_equal(err, expect);
	assert_true(all_zero(&cfg, sizeof(cfg)));

	/* 200 allow and 56 overrides: the most; one more override is refused */
	off = (size_t)snprintf(yaml, cap, TAG "    allow:\n");
	for (i = 0; i < 200; i++)
		off += (size_t)snprintf(yaml + off, cap - off, "      - 10.%d.0.0/16\n", i);
	off += (size_t)snprintf(yaml + off, cap - off, "    overrides:\n");
	for (i = 0; i < KT_TAG_MAX_RULES - 200; i++)
		off += (size_t)snprintf(yaml + off, cap - off,
					"      - {cidr: 11.%d.0.0/16, rate: 1, burst: 1}\n", i);
	assert_int_equal(parse(yaml, &cfg, err), 0);
	assert_int_equal(cfg.tags[0].n_allow, 200);
	assert_int_equal(cfg.tags[0].n_overrides, KT_TAG_MAX_RULES - 200);
	kt_config_free(&cfg);
	snprintf(yaml + off, cap - off, "      - {cidr: 12.0.0.0/8, rate: 1, burst: 1}\n");
	assert_int_equal(parse(yaml, &cfg, err), -EINVAL);
	snprintf(expect, sizeof(expect),
		 "t.yaml:%d: tags[0].overrides[%d].cidr: at most %d prefixes in allow and overrides together",
		 5 + 1 + 200 + 1 + KT_TAG_MAX_RULES - 200 + 1, KT_TAG_MAX_RULES - 200, KT_TAG_MAX_RULES);
	assert_string_equal(err, expect);
	assert_true(all_zero(&cfg, sizeof(cfg)));
	free(yaml);
}

/* Burst defaults: max(1, max), and max(1500, max) for bytes. */
static void test_burst_defaults(void **state)
{
	struct kt_config cfg;
	char err[KT_ERR_LEN];

	(void)state;
	assert_int_equal(parse("limits:\n"
			       "  - {name: a, cgroups: x, unit: packet, rateLimit: {max: 0.25}}\n"
			       "  - {name: b, cgroups: x, unit: byte, rateLimit: {max: 100}}\n"
			       "  - {name: c, cgroups: x, unit: byte, rateLimit: {max: 1e6}}\n",
			       &cfg, err), 0);
	assert_true(cfg.limits[0].burst == 1);
	assert_true(cfg.limits[0].rl.max == 0.25);
	assert_int_equal(cfg.limits[0].refuse_errno, EBUSY); /* the default */
	assert_true(cfg.limits[1].burst == 1500);
	assert_true(cfg.limits[2].burst == 1e6);
	assert_string_equal(cfg.limits[0].cgroups[0], "x");
	kt_config_free(&cfg);
}

/* errno: what a refused connect()/sendmsg() of the limit fails with. */
static void test_refuse_errno(void **state)
{
	struct kt_config cfg;
	char err[KT_ERR_LEN];

	(void)state;
	assert_int_equal(parse("limits:\n"
			       "  - {name: a, cgroups: x, unit: connection, errno: ECONNREFUSED, rateLimit: {max: 1}}\n"
			       "  - {name: b, cgroups: x, unit: datagram, errno: EAGAIN, rateLimit: {max: 1}}\n"
			       "  - {name: c, cgroups: x, unit: datagram, rateLimit: {max: 1}}\n",
			       &cfg, err), 0);
	assert_int_equal(cfg.limits[0].refuse_errno, ECONNREFUSED);
	assert_int_equal(cfg.limits[1].refuse_errno, EAGAIN);
	assert_int_equal(cfg.limits[2].refuse_errno, EBUSY);
	kt_config_free(&cfg);
}

/* maxDelay: unit call's bound on a held call, none by default. */
static void test_max_delay(void **state)
{
	struct kt_config cfg;
	char err[KT_ERR_LEN];

	(void)state;
	assert_int_equal(parse("limits:\n"
			       "  - {name: a, cgroups: x, unit: call, maxDelay: 1500ms, rateLimit: {max: 1}}\n"
			       "  - {name: b, cgroups: x, unit: call, maxDelay: 24h, rateLimit: {max: 1}}\n"
			       "  - {name: c, cgroups: x, unit: call, rateLimit: {max: 1}}\n",
			       &cfg, err), 0);
	assert_int_equal(cfg.limits[0].max_delay_ms, 1500);
	assert_int_equal(cfg.limits[1].max_delay_ms, 24u * 3600 * 1000);
	assert_int_equal(cfg.limits[2].max_delay_ms, 0);
	kt_config_free(&cfg);
}

/* enforce: true by default; false makes a shadow limit. */
static void test_enforce(void **state)
{
	struct kt_config cfg;
	char err[KT_ERR_LEN];

	(void)state;
	assert_int_equal(parse("limits:\n"
			       "  - {name: a, cgroups: x, unit: connection, rateLimit: {max: 1}}\n"
			       "  - {name: b, cgroups: x, unit: datagram, enforce: false, rateLimit: {max: 1}}\n"
			       "  - {name: c, cgroups: x, unit: byte, enforce: true, rateLimit: {max: 1}}\n",
			       &cfg, err), 0);
	assert_false(cfg.limits[0].shadow);
	assert_true(cfg.limits[1].shadow);
	assert_int_equal(cfg.limits[1].enforce_line, 3);
	assert_false(cfg.limits[2].shadow);
	kt_config_free(&cfg);
}

/* parent: found by name before or after, depth counted from the root. */
static void test_parent(void **state)
{
	struct kt_config cfg;
	char err[KT_ERR_LEN];

	(void)state;
	assert_int_equal(parse("limits:\n"
			       "  - {name: a, cgroups: x, unit: datagram, parent: p, rateLimit: {max: 1}}\n"
			       "  - {name: p, cgroups: x, unit: datagram, parent: r, rateLimit: {max: 2}}\n"
			       "  - {name: r, cgroups: x, unit: datagram, rateLimit: {max: 3}}\n"
			       "  - {name: b, cgroups: x, unit: datagram, parent: p, rateLimit: {max: 1}}\n",
			       &cfg, err), 0);
	assert_int_equal(kt_cfg_parent(&cfg.limits[0]), 1);
	assert_int_equal(cfg.limits[0].depth, 2);
	assert_int_equal(cfg.limits[0].parent_line, 2);
	assert_int_equal(kt_cfg_parent(&cfg.limits[1]), 2);
	assert_int_equal(cfg.limits[1].depth, 1);
	assert_int_equal(kt_cfg_parent(&cfg.limits[2]), -1);
	assert_int_equal(cfg.limits[2].depth, 0);
	assert_int_equal(kt_cfg_parent(&cfg.limits[3]), 1);
	kt_config_free(&cfg);
}

/* groupBy: what it groups by, maxGroups defaulted; a template may have a
 * parent. */
static void test_group_by(void **state)
{
	struct kt_config cfg;
	char err[KT_ERR_LEN];

	(void)state;
	assert_int_equal(parse("limits:\n"
			       "  - {name: all, cgroups: x, unit: datagram, rateLimit: {max: 9}}\n"
			       "  - {name: ns, pods: {}, groupBy: namespace, parent: all, unit: datagram, rateLimit: {max: 1}}\n"
			       "  - {name: team, pods: {}, groupBy: \"label:example.com/team\", maxGroups: 7, unit: datagram, rateLimit: {max: 1}}\n"
			       "  - {name: t, cgroups: [\"/t/*/*\"], groupBy: parent, unit: datagram, rateLimit: {max: 1}}\n"
			       "  - {name: c, cgroups: [\"/c/{tenant}/jobs/*\", \"/d/{tenant}/x*/*\"], groupBy: \"capture:tenant\",\n"
			       "     unit: datagram, rateLimit: {max: 1}}\n",
			       &cfg, err), 0);
	assert_int_equal(cfg.limits[0].group_by, KT_GROUP_NONE);
	assert_int_equal(cfg.limits[1].group_by, KT_GROUP_NAMESPACE);
	assert_int_equal(cfg.limits[1].max_groups, KT_GROUPS_DEFAULT);
	assert_int_equal(cfg.limits[1].group_line, 3);
	assert_int_equal(kt_cfg_parent(&cfg.limits[1]), 0);
	assert_int_equal(cfg.limits[2].group_by, KT_GROUP_LABEL);
	assert_string_equal(cfg.limits[2].group_label, "example.com/team");
	assert_int_equal(cfg.limits[2].max_groups, 7);
	assert_int_equal(cfg.limits[3].group_by, KT_GROUP_PARENT);
	assert_string_equal(kt_group_by_name(cfg.limits[3].group_by), "parent");
	assert_int_equal(cfg.limits[3].group_up, 1);
	/* a capture is a * the daemon globs, and the group is that many levels up */
	assert_int_equal(cfg.limits[4].group_by, KT_GROUP_CAPTURE);
	assert_string_equal(cfg.limits[4].group_label, "tenant");
	assert_string_equal(cfg.limits[4].cgroups[0], "/c/*/jobs/*");
	assert_string_equal(cfg.limits[4].cgroups[1], "/d/*/x*/*");
	assert_int_equal(cfg.limits[4].group_up, 2);
	kt_config_free(&cfg);
}

/* weightBy: a label or a capture; weights sorted for lookup; the capture
 * becomes a * like groupBy's, each its own depth. */
static void test_weights(void **state)
{
	struct kt_config cfg;
	char err[KT_ERR_LEN];

	(void)state;
	assert_int_equal(parse(SREDIS "limits:\n"
			       "  - {name: l, pods: {}, share: demand, weightBy: \"label:kthrottle.io/weight\",\n"
			       "     unit: call, rateLimit: {max: 9}}\n"
			       "  - {name: c, cgroups: [\"/t/{tenant}/{tier}/*\"], groupBy: \"capture:tenant\",\n"
			       "     share: demand, weightBy: \"capture:tier\", weights: {prod: 3, batch: 1, canary: 0.5},\n"
			       "     defaultWeight: 2, unit: datagram, rateLimit: {max: 9}}\n"
			       "  - {name: e, cgroups: x, share: demand, unit: datagram, rateLimit: {max: 9}}\n",
			       &cfg, err), 0);
	assert_int_equal(cfg.limits[0].weight_by, KT_WEIGHT_LABEL);
	assert_string_equal(cfg.limits[0].weight_key, "kthrottle.io/weight");
	assert_int_equal(cfg.limits[0].n_weights, 0);
	assert_true(cfg.limits[0].default_weight == 1);
	assert_int_equal(cfg.limits[0].weight_line, 6);
	assert_int_equal(cfg.limits[1].weight_by, KT_WEIGHT_CAPTURE);
	assert_string_equal(cfg.limits[1].cgroups[0], "/t/*/*/*");
	assert_int_equal(cfg.limits[1].group_up, 2);
	assert_int_equal(cfg.limits[1].weight_up, 1);
	assert_int_equal(cfg.limits[1].n_weights, 3);
	assert_string_equal(cfg.limits[1].weights[0].value, "batch");
	assert_string_equal(cfg.limits[1].weights[1].value, "canary");
	assert_true(cfg.limits[1].weights[1].weight == 0.5);
	assert_string_equal(cfg.limits[1].weights[2].value, "prod");
	assert_true(cfg.limits[1].weights[2].weight == 3);
	assert_true(cfg.limits[1].default_weight == 2);
	assert_int_equal(cfg.limits[2].weight_by, KT_WEIGHT_NONE);
	assert_true(cfg.limits[2].default_weight == 1);
	assert_int_equal(cfg.limits[2].n_classes, 0);
	kt_config_free(&cfg);

	/* classes: percentages of max, the default the last unless named; a
	 * class may come from the weight's own capture */
	assert_int_equal(parse(SREDIS "limits:\n"
			       "  - {name: p, pods: {}, share: demand, classBy: \"label:kthrottle.io/class\",\n"
			       "     classes: [{name: critical}, {name: batch, floor: 10%, ceiling: 50}],\n"
			       "     unit: call, rateLimit: {max: 200}}\n"
			       "  - {name: q, cgroups: [\"/t/{tier}/*\"], share: demand, weightBy: \"capture:tier\",\n"
			       "     weights: {prod: 3}, classBy: \"capture:tier\", classes: [{name: prod}, {name: batch}],\n"
			       "     defaultClass: prod, unit: datagram, rateLimit: {max: 9}}\n",
			       &cfg, err), 0);
	assert_int_equal(cfg.limits[0].class_by, KT_WEIGHT_LABEL);
	assert_string_equal(cfg.limits[0].class_key, "kthrottle.io/class");
	assert_int_equal(cfg.limits[0].n_classes, 2);
	assert_string_equal(cfg.limits[0].classes[0].name, "critical");
	assert_true(cfg.limits[0].classes[0].floor == 0 && cfg.limits[0].classes[0].ceiling == 200);
	assert_true(cfg.limits[0].classes[1].floor == 20 && cfg.limits[0].classes[1].ceiling == 50);
	assert_int_equal(cfg.limits[0].default_class, 1);
	assert_int_equal(cfg.limits[1].class_by, KT_WEIGHT_CAPTURE);
	assert_int_equal(cfg.limits[1].class_up, cfg.limits[1].weight_up);
	assert_string_equal(cfg.limits[1].cgroups[0], "/t/*/*");
	assert_int_equal(cfg.limits[1].default_class, 0);
	kt_config_free(&cfg);

	/* callers (unit request): the weights' values and the classes' names,
	 * once each, sorted; each caller is a member of its own */
	assert_int_equal(parse(SREDIS "limits:\n"
			       "  - {name: api, unit: request, share: demand, weightBy: caller,\n"
			       "     weights: {prod: 3, batch: 1}, classBy: caller,\n"
			       "     classes: [{name: prod}, {name: ops}, {name: batch, floor: 10%}], rateLimit: {max: 100}}\n",
			       &cfg, err), 0);
	assert_int_equal(cfg.limits[0].weight_by, KT_WEIGHT_CALLER);
	assert_int_equal(cfg.limits[0].class_by, KT_WEIGHT_CALLER);
	assert_int_equal(cfg.limits[0].n_callers, 3);
	assert_string_equal(cfg.limits[0].callers[0], "batch");
	assert_string_equal(cfg.limits[0].callers[1], "ops");
	assert_string_equal(cfg.limits[0].callers[2], "prod");
	assert_int_equal(cfg.limits[0].scope, KT_SCOPE_POD);
	assert_int_equal(cfg.limits[0].default_class, 2);
	kt_config_free(&cfg);
	assert_int_equal(parse(SREDIS "limits:\n"
			       "  - {name: api, unit: request, share: demand, rateLimit: {max: 100}}\n",
			       &cfg, err), 0);
	assert_int_equal(cfg.limits[0].n_callers, 0);
	assert_int_equal(cfg.limits[0].scope, KT_SCOPE_NODE);
	kt_config_free(&cfg);

	/* a child's weight in its parent's pool marks the parent weighted */
	assert_int_equal(parse(SREDIS "limits:\n"
			       "  - {name: all, cgroups: x, share: demand, unit: datagram, rateLimit: {max: 9}}\n"
			       "  - {name: a, cgroups: y, parent: all, weight: 3, unit: datagram, rateLimit: {max: 9}}\n"
			       "  - {name: b, cgroups: z, parent: all, unit: datagram, rateLimit: {max: 9}}\n",
			       &cfg, err), 0);
	assert_true(cfg.limits[0].child_weights);
	assert_true(cfg.limits[1].weight == 3 && cfg.limits[2].weight == 0);
	assert_false(cfg.limits[1].child_weights);
	kt_config_free(&cfg);

	/* annotations: kthrottle.io/ ones */
	assert_int_equal(parse(SREDIS "limits:\n"
			       "  - {name: l, pods: {}, share: demand, weightBy: \"annotation:kthrottle.io/weight\",\n"
			       "     classBy: \"annotation:kthrottle.io/tier\", classes: [{name: a}, {name: b}],\n"
			       "     unit: datagram, rateLimit: {max: 9}}\n",
			       &cfg, err), 0);
	assert_int_equal(cfg.limits[0].weight_by, KT_WEIGHT_ANNOTATION);
	assert_string_equal(cfg.limits[0].weight_key, "kthrottle.io/weight");
	assert_int_equal(cfg.limits[0].class_by, KT_WEIGHT_ANNOTATION);
	assert_string_equal(cfg.limits[0].class_key, "kthrottle.io/tier");
	kt_config_free(&cfg);

	/* floors on children: the parent's classes are its children, in
	 * order, then its own members; a child's ceiling is its max */
	assert_int_equal(parse(SREDIS "limits:\n"
			       "  - {name: all, cgroups: x, share: demand, unit: datagram, rateLimit: {max: 200}}\n"
			       "  - {name: a, cgroups: y, parent: all, floor: 25%, unit: datagram, rateLimit: {max: 300}}\n"
			       "  - {name: b, cgroups: z, parent: all, weight: 2, unit: datagram, rateLimit: {max: 80}}\n"
			       "  - {name: c, cgroups: w, parent: all, floor: 20, unit: datagram, rateLimit: {max: 90}}\n",
			       &cfg, err), 0);
	assert_int_equal(cfg.limits[0].class_by, KT_WEIGHT_CHILD);
	assert_true(cfg.limits[0].classes_siblings);
	assert_int_equal(cfg.limits[0].n_classes, 4);
	assert_string_equal(cfg.limits[0].classes[0].name, "a");
	assert_true(cfg.limits[0].classes[0].floor == 50 && cfg.limits[0].classes[0].ceiling == 200);
	assert_true(cfg.limits[0].classes[1].floor == 0 && cfg.limits[0].classes[1].ceiling == 80);
	assert_true(cfg.limits[0].classes[2].floor == 20 && cfg.limits[0].classes[2].ceiling == 90);
	assert_string_equal(cfg.limits[0].classes[3].name, "all");
	assert_int_equal(cfg.limits[0].default_class, 3);
	assert_int_equal(cfg.limits[1].child_class, 0);
	assert_int_equal(cfg.limits[3].child_class, 2);
	kt_config_free(&cfg);
}

/* unit request: a cooperative limit, no cgroups, always node scope. */
static void test_unit_request(void **state)
{
	struct kt_config cfg;
	char err[KT_ERR_LEN];

	(void)state;
	assert_int_equal(parse("limits:\n"
			       "  - {name: api, unit: request, burst: 10, rateLimit: {max: 100, min: 100}}\n"
			       "  - {name: b, unit: request, scope: node, share: equal, rateLimit: {max: 1}}\n",
			       &cfg, err), 0);
	assert_int_equal(cfg.limits[0].unit, KT_UNIT_REQUEST);
	assert_int_equal(cfg.limits[0].scope, KT_SCOPE_NODE);
	assert_int_equal(cfg.limits[0].n_cgroups, 0);
	assert_true(cfg.limits[0].burst == 10);
	assert_int_equal(cfg.limits[1].scope, KT_SCOPE_NODE);
	assert_string_equal(kt_unit_name(KT_UNIT_REQUEST), "request");
	kt_config_free(&cfg);
}

/* unit concurrent: a connect hook limit counting open connections; its
 * errno, scope and a static pool as for connection limits. */
static void test_unit_concurrent(void **state)
{
	struct kt_config cfg;
	char err[KT_ERR_LEN];

	(void)state;
	assert_int_equal(parse("limits:\n"
			       "  - {name: llm, cgroups: [x], unit: concurrent, errno: EAGAIN,\n"
			       "     rateLimit: {max: 30, min: 10, rampUpDuration: 10s, store: {static: {poolSize: 3}}}}\n",
			       &cfg, err), 0);
	assert_int_equal(cfg.limits[0].unit, KT_UNIT_CONCURRENT);
	assert_int_equal(cfg.limits[0].scope, KT_SCOPE_POD);
	assert_int_equal(cfg.limits[0].refuse_errno, EAGAIN);
	assert_int_equal(cfg.limits[0].store.kind, KT_STORE_STATIC);
	assert_true(cfg.limits[0].rl.max == 30 && cfg.limits[0].rl.min == 10);
	assert_int_equal(kt_hook_for_unit(KT_UNIT_CONCURRENT), KT_HOOK_CONNECT);
	assert_string_equal(kt_unit_name(KT_UNIT_CONCURRENT), "concurrent");
	kt_config_free(&cfg);
}

/* metrics: off by default; IPv4 and bracketed IPv6 literals. */
static void test_metrics_addr(void **state)
{
	struct kt_config cfg;
	char err[KT_ERR_LEN];

	(void)state;
	assert_int_equal(parse(LIM, &cfg, err), 0);
	assert_int_equal(cfg.metrics_port, 0);
	kt_config_free(&cfg);
	assert_int_equal(parse("metrics: 127.0.0.1:9464\n" LIM, &cfg, err), 0);
	assert_string_equal(cfg.metrics_addr, "127.0.0.1");
	assert_int_equal(cfg.metrics_port, 9464);
	kt_config_free(&cfg);
	assert_int_equal(parse("metrics: \"[::1]:19464\"\n" LIM, &cfg, err), 0);
	assert_string_equal(cfg.metrics_addr, "::1");
	assert_int_equal(cfg.metrics_port, 19464);
	kt_config_free(&cfg);
}

/* The lease options: fallbackFor and maxMembers, top level and per limit. */
static void test_lease_options(void **state)
{
	struct kt_config cfg;
	char err[KT_ERR_LEN];

	(void)state;
	assert_int_equal(parse("store:\n  fallbackFor: 90s\n  maxMembers: 12\n"
			       "limits:\n"
			       "  - {name: a, cgroups: x, unit: packet, rateLimit: {max: 5}}\n"
			       "  - {name: b, cgroups: x, unit: packet, rateLimit: {max: 5,\n"
			       "     store: {fallbackFor: 0s, maxMembers: 3}}}\n",
			       &cfg, err), 0);
	assert_int_equal(cfg.limits[0].store.fallback_for_ns, 90 * SEC);
	assert_int_equal(cfg.limits[0].store.max_members, 12);
	assert_int_equal(cfg.limits[1].store.fallback_for_ns, 0);
	assert_int_equal(cfg.limits[1].store.max_members, 3);
	kt_config_free(&cfg);
	/* redisStore.timeout: absent follows the latency (0) */
	assert_int_equal(parse("store:\n  redisStore: {mode: single, url: \"redis://h\", timeout: 750ms}\n"
			       "limits:\n"
			       "  - {name: a, cgroups: x, unit: packet, rateLimit: {max: 5}}\n"
			       "  - {name: b, cgroups: x, unit: packet, rateLimit: {max: 5,\n"
			       "     store: {redisStore: {mode: single, url: \"redis://h\"}}}}\n",
			       &cfg, err), 0);
	assert_int_equal(cfg.limits[0].store.timeout_ns, 750 * MS);
	assert_int_equal(cfg.limits[1].store.timeout_ns, 0);
	kt_config_free(&cfg);
	/* redisStore.leases: member unless node is asked for */
	assert_int_equal(parse("store:\n  redisStore: {mode: single, url: \"redis://h\", leases: node}\n"
			       "limits:\n"
			       "  - {name: a, cgroups: x, unit: packet, rateLimit: {max: 5}}\n"
			       "  - {name: b, cgroups: x, unit: packet, rateLimit: {max: 5,\n"
			       "     store: {redisStore: {mode: single, url: \"redis://h\"}}}}\n",
			       &cfg, err), 0);
	assert_int_equal(cfg.limits[0].store.leases, KT_LEASES_NODE);
	assert_int_equal(cfg.limits[1].store.leases, KT_LEASES_MEMBER);
	kt_config_free(&cfg);
}

/* attachRoot: a path kept as written (its cgroup is resolved with the
 * members, apply.c), with its line; absent or "auto": the common ancestor
 * (computed with the members); "members": per-member attachments */
static void test_attach_root(void **state)
{
	struct kt_config cfg;
	char err[KT_ERR_LEN];

	(void)state;
	assert_int_equal(parse("tickInterval: 50ms\nattachRoot: /sys/fs/cgroup/kubepods.slice\n" LIM,
			       &cfg, err), 0);
	assert_string_equal(cfg.attach_root, "/sys/fs/cgroup/kubepods.slice");
	assert_int_equal(cfg.attach_root_line, 2);
	assert_int_equal(cfg.attach_mode, KT_ATTACH_PATH);
	kt_config_free(&cfg);
	assert_int_equal(parse(LIM, &cfg, err), 0);
	assert_null(cfg.attach_root);
	assert_int_equal(cfg.attach_mode, KT_ATTACH_AUTO);
	kt_config_free(&cfg);
	/* the two words: no path */
	assert_int_equal(parse("attachRoot: auto\n" LIM, &cfg, err), 0);
	assert_null(cfg.attach_root);
	assert_int_equal(cfg.attach_mode, KT_ATTACH_AUTO);
	kt_config_free(&cfg);
	assert_int_equal(parse("attachRoot: members\n" LIM, &cfg, err), 0);
	assert_null(cfg.attach_root);
	assert_int_equal(cfg.attach_mode, KT_ATTACH_MEMBERS);
	kt_config_free(&cfg);
}

static const char everything[] =
	"node: node-a\n"
	"pinDir: /sys/fs/bpf/kt2\n"
	"socket: /tmp/kt.sock\n"
	"tickInterval: 50ms\n"
	"epoch: 2s\n"
	"store:\n"
	"  redisStore:\n"
	"    mode: single\n"
	"    url: rediss://bob:p%40ss@[::1]:6380/2\n"
	"    redis_tls: {ca_cert_secret: /ca, cert_secret: /c, key_secret: /k, insecure_skip_verify: true}\n"
	"    keyPrefix: kt:test\n"
	"  heartbeat: 250ms\n"
	"  staleAfter: 4\n"
	"  validFor: 3s\n"
	"  onStoreFailure: closed\n"
	"limits:\n"
	"  - name: api.v1_x-2\n"                      /* line 17 */
	"    cgroups:\n"
	"      - /sys/fs/cgroup/unified/demo\n"        /* line 19 */
	"      - pods/a\n"                              /* line 20 */
	"    match:\n"
	"      cidrs: [10.1.2.3/8, \"::1/128\", 127.0.0.1, \"fd00::1234/16\", 0.0.0.0/0]\n"
	"      ports: \"8000-8080\"\n"
	"      protocol: udp\n"
	"    unit: datagram\n"
	"    scope: node\n"
	"    burst: 20.5\n"
	"    share: equal\n"
	"    rateLimit:\n"
	"      max: 100\n"
	"      min: 0.1\n"
	"      rampUpDuration: 1m30s\n"
	"      modes:\n"
	"        goBackN: {thresholdPercentage: 40, coolDownPeriod: \"7s\", rampDownPercentage: 25}\n"
	"      resumedRampUp: true\n"
	"      ttl: 60\n"
	"  - name: b\n"
	"    cgroups: [y]\n"
	"    match: {ports: 443, protocol: tcp}\n"
	"    unit: byte\n"
	"    rateLimit:\n"
	"      max: 1e6\n"
	"      modes: {onlyIfUsed: {thresholdPercentage: 10}}\n"
	"      store:\n"                                /* line 44 */
	"        static: {poolSize: 3}\n"
	"        onStoreFailure: open\n"
	"  - name: c\n"
	"    cgroups: z\n"
	"    unit: packet\n"
	"    rateLimit: {max: 1, modes: {scheduled: }, store: }\n";

static void test_everything(void **state)
{
	struct kt_config cfg;
	char err[KT_ERR_LEN];
	const struct kt_limit_cfg *l;
	const struct kt_store_cfg *s;
	static const uint8_t a10[16] = { [10] = 0xff, [11] = 0xff, [12] = 10 };
	static const uint8_t lo6[16] = { [15] = 1 };
	static const uint8_t lo4[16] = { [10] = 0xff, [11] = 0xff, [12] = 127, [15] = 1 };
	static const uint8_t fd00[16] = { [0] = 0xfd };
	static const uint8_t any4[16] = { [10] = 0xff, [11] = 0xff };

	(void)state;
	assert_int_equal(parse(everything, &cfg, err), 0);
	assert_string_equal(cfg.node_name, "node-a");
	assert_string_equal(cfg.pin_dir, "/sys/fs/bpf/kt2");
	assert_string_equal(cfg.socket_path, "/tmp/kt.sock");
	assert_int_equal(cfg.tick_ns, 50 * MS);
	assert_int_equal(cfg.epoch_ns, 2 * SEC);

	s = &cfg.store;
	assert_int_equal(s->kind, KT_STORE_REDIS);
	assert_int_equal(s->line, 7);
	assert_int_equal(s->redis_mode, KT_REDIS_SINGLE);
	assert_string_equal(s->host, "::1");
	assert_int_equal(s->port, 6380);
	assert_int_equal(s->db, 2);
	assert_string_equal(s->redis_auth.username, "bob");
	assert_string_equal(s->redis_auth.password, "p@ss");
	assert_true(s->redis_tls.enabled);
	assert_string_equal(s->redis_tls.ca_cert, "/ca");
	assert_string_equal(s->redis_tls.cert, "/c");
	assert_string_equal(s->redis_tls.key, "/k");
	assert_true(s->redis_tls.insecure_skip_verify);
	assert_false(s->sentinel_tls.enabled);
	assert_string_equal(s->key_prefix, "kt:test");
	assert_int_equal(s->heartbeat_ns, 250 * MS);
	assert_int_equal(s->stale_after, 4);
	assert_int_equal(s->valid_for_ns, 3 * SEC);
	assert_int_equal(s->on_failure, KT_FAIL_CLOSED);

	assert_int_equal(cfg.n_limits, 3);
	l = &cfg.limits[0];
	assert_string_equal(l->name, "api.v1_x-2");
	assert_int_equal(l->line, 17);
	assert_int_equal(l->n_cgroups, 2);
	assert_string_equal(l->cgroups[0], "/sys/fs/cgroup/unified/demo");
	assert_string_equal(l->cgroups[1], "pods/a");
	assert_int_equal(l->cgroup_lines[0], 19);
	assert_int_equal(l->cgroup_lines[1], 20);
	assert_int_equal(l->match.n_cidrs, 5);
	/* host bits cleared, v4 mapped with prefix + 96 */
	assert_memory_equal(l->match.cidrs[0].addr, a10, 16);
	assert_int_equal(l->match.cidrs[0].prefixlen, 104);
	assert_memory_equal(l->match.cidrs[1].addr, lo6, 16);
	assert_int_equal(l->match.cidrs[1].prefixlen, 128);
	assert_memory_equal(l->match.cidrs[2].addr, lo4, 16);
	assert_int_equal(l->match.cidrs[2].prefixlen, 128);
	assert_memory_equal(l->match.cidrs[3].addr, fd00, 16);
	assert_int_equal(l->match.cidrs[3].prefixlen, 16);
	assert_memory_equal(l->match.cidrs[4].addr, any4, 16);
	assert_int_equal(l->match.cidrs[4].prefixlen, 96);
	assert_int_equal(l->match.port_lo, 8000);
	assert_int_equal(l->match.port_hi, 8080);
	assert_int_equal(l->match.proto_mask, KT_PROTO_UDP);
	assert_int_equal(l->unit, KT_UNIT_DATAGRAM);
	assert_int_equal(l->scope, KT_SCOPE_NODE);
	assert_true(l->burst == 20.5);
	assert_int_equal(l->share, KT_SHARE_EQUAL);
	assert_true(l->rl.max == 100);
	assert_true(l->rl.min == 0.1);
	assert_int_equal(l->rl.ramp_up_ns, 90 * SEC);
	assert_int_equal(l->rl.mode, KT_MODE_GO_BACK_N);
	assert_true(l->rl.threshold_pct == 40);
	assert_int_equal(l->rl.cool_down_ns, 7 * SEC);
	assert_true(l->rl.ramp_down_pct == 25);
	assert_true(l->rl.resumed_ramp_up);
	assert_int_equal(l->rl.ttl_ns, 60 * SEC);
	/* no rateLimit.store: a deep copy of the top-level store */
	assert_int_equal(l->store.kind, KT_STORE_REDIS);
	assert_string_equal(l->store.host, "::1");
	assert_ptr_not_equal(l->store.host, cfg.store.host);
	assert_string_equal(l->store.redis_auth.password, "p@ss");
	assert_ptr_not_equal(l->store.redis_auth.password, cfg.store.redis_auth.password);
	assert_string_equal(l->store.redis_tls.key, "/k");
	assert_int_equal(l->store.heartbeat_ns, 250 * MS);

	l = &cfg.limits[1];
	assert_int_equal(l->match.port_lo, 443);
	assert_int_equal(l->match.port_hi, 443);
	assert_int_equal(l->match.proto_mask, KT_PROTO_TCP);
	assert_int_equal(l->unit, KT_UNIT_BYTE);
	assert_true(l->burst == 1e6);
	assert_int_equal(l->rl.mode, KT_MODE_ONLY_IF_USED);
	assert_true(l->rl.threshold_pct == 10);
	assert_int_equal(l->store.kind, KT_STORE_STATIC);
	assert_int_equal(l->store.line, 45);
	assert_int_equal(l->store.static_pool_size, 3);
	assert_int_equal(l->store.on_failure, KT_FAIL_OPEN);
	assert_int_equal(l->store.heartbeat_ns, 1 * SEC); /* own store: own defaults */
	assert_null(l->store.host);

	/* "scheduled:" and "store:" with no value read as {} */
	l = &cfg.limits[2];
	assert_int_equal(l->rl.mode, KT_MODE_SCHEDULED);
	assert_int_equal(l->store.kind, KT_STORE_LOCAL);
	assert_null(l->store.host);
	assert_string_equal(l->cgroups[0], "z");
	kt_config_free(&cfg);
	assert_true(all_zero(&cfg, sizeof(cfg)));
}

static void test_redis_url_defaults(void **state)
{
	struct kt_config cfg;
	char err[KT_ERR_LEN];

	(void)state;
	assert_int_equal(parse(REDIS("    url: redis://cache.local\n"), &cfg, err), 0);
	assert_string_equal(cfg.store.host, "cache.local");
	assert_int_equal(cfg.store.port, 6379);
	assert_int_equal(cfg.store.db, 0);
	assert_false(cfg.store.redis_tls.enabled);
	assert_null(cfg.store.redis_auth.username);
	assert_null(cfg.store.redis_auth.password);
	assert_string_equal(cfg.store.key_prefix, "kthrottle");
	kt_config_free(&cfg);

	/* ":password@" form, and redis_auth adding the username */
	assert_int_equal(parse(REDIS("    url: redis://:pw@10.0.0.1:7000/\n"
				     "    redis_auth: {username: alice}\n"), &cfg, err), 0);
	assert_string_equal(cfg.store.host, "10.0.0.1");
	assert_int_equal(cfg.store.port, 7000);
	assert_string_equal(cfg.store.redis_auth.username, "alice");
	assert_string_equal(cfg.store.redis_auth.password, "pw");
	kt_config_free(&cfg);
}

static void test_password_sources(void **state)
{
	struct kt_config cfg;
	char err[KT_ERR_LEN], path[] = "/tmp/kt-test-pass-XXXXXX", yaml[512];
	int fd;

	(void)state;
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "s3cret\n", 7), 7);
	close(fd);
	snprintf(yaml, sizeof(yaml),
		 REDIS("    url: redis://h\n    redis_auth: {username: u, passwordFile: %s}\n"), path);
	assert_int_equal(parse(yaml, &cfg, err), 0);
	assert_string_equal(cfg.store.redis_auth.username, "u");
	assert_string_equal(cfg.store.redis_auth.password, "s3cret");
	kt_config_free(&cfg);
	unlink(path);

	assert_int_equal(setenv("KT_TEST_REDIS_PW", "from-env", 1), 0);
	assert_int_equal(parse(REDIS("    url: redis://h\n"
				     "    redis_auth: {passwordEnv: KT_TEST_REDIS_PW}\n"), &cfg, err), 0);
	assert_string_equal(cfg.store.redis_auth.password, "from-env");
	assert_null(cfg.store.redis_auth.username);
	kt_config_free(&cfg);
	unsetenv("KT_TEST_REDIS_PW");
}

static void test_cluster(void **state)
{
	struct kt_config cfg;
	char err[KT_ERR_LEN];
	const struct kt_store_cfg *s;

	(void)state;
	assert_int_equal(parse("store:\n  redisStore:\n    mode: cluster\n"
			       "    addrs: [\"127.0.0.1:7000\", \"[::1]:7001\"]\n    db: 0\n"
			       "    redis_auth: {username: u, password: p}\n"
			       "    redis_tls: {insecure_skip_verify: true}\n" LIM, &cfg, err), 0);
	s = &cfg.store;
	assert_int_equal(s->redis_mode, KT_REDIS_CLUSTER);
	assert_int_equal(s->n_endpoints, 2);
	assert_string_equal(s->endpoint_host[1], "::1");
	assert_int_equal(s->endpoint_port[1], 7001);
	assert_string_equal(s->host, "127.0.0.1"); /* the first seed names the store */
	assert_int_equal(s->port, 7000);
	assert_int_equal(s->db, 0);
	assert_string_equal(s->redis_auth.username, "u");
	assert_true(s->redis_tls.enabled);
	kt_config_free(&cfg);
}

/* Each TLS file's line is kept: the files are read at store open, which
 * reports a bad one there (FILE:LINE: FIELD) and not at the store's line. */
static void test_tls_lines(void **state)
{
	struct kt_config cfg;
	char err[KT_ERR_LEN];
	const struct kt_tls_cfg *t;

	(void)state;
	assert_int_equal(parse(SENT("    sentinel:\n"
				    "      endpoints: [\"127.0.0.1:26379\"]\n"
				    "      master_name: m\n"
				    "      sentinel_tls:\n"
				    "        ca_cert_secret: /sca\n"    /* line 8 */
				    "    redis_tls:\n"
				    "      insecure_skip_verify: true\n"
				    "      key_secret: /k\n"          /* line 11 */
				    "      cert_secret: /c\n"), &cfg, err), 0);
	assert_string_equal(cfg.store.file, "t.yaml");
	t = &cfg.store.sentinel_tls;
	assert_string_equal(t->field, "store.redisStore.sentinel.sentinel_tls");
	assert_int_equal(t->ca_cert_line, 8);
	assert_int_equal(t->cert_line, 0);
	assert_int_equal(t->key_line, 0);
	t = &cfg.limits[0].store.redis_tls; /* the limit's copy */
	assert_string_equal(cfg.limits[0].store.file, "t.yaml");
	assert_ptr_not_equal(cfg.limits[0].store.file, cfg.store.file);
	assert_string_equal(t->field, "store.redisStore.redis_tls");
	assert_ptr_not_equal(t->field, cfg.store.redis_tls.field);
	assert_int_equal(t->ca_cert_line, 0);
	assert_int_equal(t->key_line, 11);
	assert_int_equal(t->cert_line, 12);
	kt_config_free(&cfg);
}

static void test_sentinel(void **state)
{
	struct kt_config cfg;
	char err[KT_ERR_LEN];
	const struct kt_store_cfg *s;

	(void)state;
	assert_int_equal(parse(SENT("    sentinel:\n"
				    "      endpoints: [\"127.0.0.1:26379\", \"[::1]:26380\", sent.local:5]\n"
				    "      master_name: mymaster\n"
				    "      redis_auth: {password: a}\n"
				    "      sentinel_auth: {username: s, password: b}\n"
				    "      sentinel_tls: {insecure_skip_verify: false}\n"
				    "    keyPrefix: k\n"), &cfg, err), 0);
	s = &cfg.store;
	assert_int_equal(s->kind, KT_STORE_REDIS);
	assert_int_equal(s->redis_mode, KT_REDIS_SENTINEL);
	assert_int_equal(s->n_endpoints, 3);
	assert_string_equal(s->endpoint_host[0], "127.0.0.1");
	assert_int_equal(s->endpoint_port[0], 26379);
	assert_string_equal(s->endpoint_host[1], "::1");
	assert_int_equal(s->endpoint_port[1], 26380);
	assert_string_equal(s->endpoint_host[2], "sent.local");
	assert_int_equal(s->endpoint_port[2], 5);
	assert_string_equal(s->master_name, "mymaster");
	assert_string_equal(s->redis_auth.password, "a");
	assert_null(s->redis_auth.username);
	assert_string_equal(s->sentinel_auth.username, "s");
	assert_string_equal(s->sentinel_auth.password, "b");
	assert_true(s->sentinel_tls.enabled);
	assert_false(s->sentinel_tls.insecure_skip_verify);
	assert_false(s->redis_tls.enabled);
	assert_null(s->host);
	assert_string_equal(s->key_prefix, "k");
	/* the limit's copy owns its endpoint strings */
	assert_string_equal(cfg.limits[0].store.endpoint_host[1], "::1");
	assert_ptr_not_equal(cfg.limits[0].store.endpoint_host[1], s->endpoint_host[1]);
	assert_string_equal(cfg.limits[0].store.master_name, "mymaster");
	kt_config_free(&cfg);
}

/* KT_MAX_LIMITS limits parse; one more is refused at the extra item. */
static void test_limit_count(void **state)
{
	size_t cap = 64 * (KT_MAX_LIMITS + 2);
	char *yaml = malloc(cap), err[KT_ERR_LEN], expect[64];
	struct kt_config cfg;
	size_t off;
	int i;

	(void)state;
	assert_non_null(yaml);
	off = (size_t)snprintf(yaml, cap, "limits:\n");
	for (i = 0; i < KT_MAX_LIMITS; i++)
		off += (size_t)snprintf(yaml + off, cap - off,
					"- {name: l%d, cgroups: x, unit: packet, rateLimit: {max: 1}}\n", i);
	assert_int_equal(parse(yaml, &cfg, err), 0);
	assert_int_equal(cfg.n_limits, KT_MAX_LIMITS);
	snprintf(expect, sizeof(expect), "l%d", KT_MAX_LIMITS - 1);
	assert_string_equal(cfg.limits[KT_MAX_LIMITS - 1].name, expect);
	kt_config_free(&cfg);
	snprintf(yaml + off, cap - off, "- {name: extra, cgroups: x, unit: packet, rateLimit: {max: 1}}\n");
	assert_int_equal(parse(yaml, &cfg, err), -EINVAL);
	snprintf(expect, sizeof(expect), "t.yaml:%d: limits: at most %d limits", KT_MAX_LIMITS + 2,
		 KT_MAX_LIMITS);
	assert_string_equal(err, expect);
	assert_true(all_zero(&cfg, sizeof(cfg)));
	free(yaml);
}

/* rateLimit.strict: defaults, explicit values, every unit it takes, and a
 * redis store of the limit's own. */
static void test_strict(void **state)
{
	struct kt_config cfg;
	char err[KT_ERR_LEN];
	const struct kt_limit_cfg *l;

	(void)state;
	assert_int_equal(parse(SLIM("connection", "{every: 500ms}"), &cfg, err), 0);
	l = &cfg.limits[0];
	assert_true(l->rl.strict.on);
	assert_int_equal(l->rl.strict.line, 10);
	assert_int_equal(l->rl.strict.every_ns, 500 * MS);
	assert_int_equal(l->rl.strict.max_reserved, 8);
	assert_int_equal(l->rl.strict.expire_ns, 250 * MS);
	assert_true(l->rl.max == 2.0);
	assert_true(l->rl.min == 2.0);
	assert_true(l->burst == 1);
	assert_int_equal(l->share, KT_SHARE_EQUAL);
	assert_int_equal(l->rl.ramp_up_ns, 0);
	assert_int_equal(l->rl.mode, KT_MODE_RELAXED);
	assert_true(l->rl.threshold_pct == 50);
	assert_int_equal(l->rl.cool_down_ns, 5 * SEC);
	assert_true(l->rl.ramp_down_pct == 50);
	assert_false(l->rl.resumed_ramp_up);
	assert_int_equal(l->rl.ttl_ns, 180 * SEC);
	assert_int_equal(l->store.kind, KT_STORE_REDIS);
	kt_config_free(&cfg);

	/* unit call: the permit's window is at least TCP's 500 ms between tries */
	assert_int_equal(parse(SLIM("call", "{every: 600ms}"), &cfg, err), 0);
	assert_int_equal(cfg.limits[0].rl.strict.expire_ns, 500 * MS);
	kt_config_free(&cfg);
	assert_int_equal(parse(SLIM("call", "{every: 2s}"), &cfg, err), 0);
	assert_int_equal(cfg.limits[0].rl.strict.expire_ns, 1 * SEC);
	kt_config_free(&cfg);

	/* explicit values, block form (the line is the block's), burst 1 given */
	assert_int_equal(parse(SREDIS "limits:\n  - name: s\n    cgroups: [x]\n    unit: datagram\n"
			       "    burst: 1\n    share: equal\n    rateLimit:\n      strict:\n"
			       "        every: 2s\n        maxReserved: 0\n        expireAfter: 2s\n",
			       &cfg, err), 0);
	l = &cfg.limits[0];
	assert_true(l->rl.strict.on);
	assert_int_equal(l->rl.strict.line, 13);
	assert_int_equal(l->rl.strict.every_ns, 2 * SEC);
	assert_int_equal(l->rl.strict.max_reserved, 0);
	assert_int_equal(l->rl.strict.expire_ns, 2 * SEC);
	assert_true(l->rl.max == 0.5);
	assert_true(l->rl.min == 0.5);
	assert_true(l->burst == 1);
	kt_config_free(&cfg);

	/* the bounds; every/2 under 1ms defaults to 1ms */
	assert_int_equal(parse(SLIM("connection", "{every: 1ms, maxReserved: 100000}"), &cfg, err), 0);
	assert_int_equal(cfg.limits[0].rl.strict.every_ns, 1 * MS);
	assert_int_equal(cfg.limits[0].rl.strict.expire_ns, 1 * MS);
	assert_int_equal(cfg.limits[0].rl.strict.max_reserved, 100000);
	assert_true(cfg.limits[0].rl.max == 1000);
	kt_config_free(&cfg);
	assert_int_equal(parse(SLIM("connection", "{every: 24h, expireAfter: 1ms}"), &cfg, err), 0);
	assert_int_equal(cfg.limits[0].rl.strict.every_ns, 24 * 3600 * SEC);
	assert_int_equal(cfg.limits[0].rl.strict.expire_ns, 1 * MS);
	kt_config_free(&cfg);

	/* unit request (no cgroups), with the limit's own redis store */
	assert_int_equal(parse("limits:\n  - name: r\n    unit: request\n    rateLimit:\n"
			       "      strict: {every: 100ms, expireAfter: 20ms}\n"
			       "      store: {redisStore: {mode: single, url: redis://h}}\n",
			       &cfg, err), 0);
	l = &cfg.limits[0];
	assert_int_equal(l->unit, KT_UNIT_REQUEST);
	assert_true(l->rl.strict.on);
	assert_int_equal(l->rl.strict.line, 5);
	assert_int_equal(l->rl.strict.expire_ns, 20 * MS);
	assert_true(l->rl.max == 10);
	assert_int_equal(l->store.kind, KT_STORE_REDIS);
	assert_int_equal(cfg.store.kind, KT_STORE_LOCAL);
	kt_config_free(&cfg);

	/* a limit without strict has it off */
	assert_int_equal(parse(LIM, &cfg, err), 0);
	assert_false(cfg.limits[0].rl.strict.on);
	kt_config_free(&cfg);
}

/* ---- errors ----------------------------------------------------------- */

struct bad {
	const char *yaml;
	const char *prefix;  /* "t.yaml:LINE: FIELD: " exactly */
	const char *problem; /* a substring of the rest */
	int rc;              /* 0: -EINVAL */
};

static const struct bad bad_cases[] = {
	/* top level */
	{ "bogus: 1\n" LIM, "t.yaml:1: bogus: ", "unknown key (expected one of: node," },
	{ "", "t.yaml:1: limits: ", "required" },
	{ "node: a\n", "t.yaml:1: limits: ", "required but missing" },
	{ "limits: []\n", "t.yaml:1: limits: ", "at least one limit" },
	{ "limits: {a: 1}\n", "t.yaml:1: limits: ", "expected a list" },
	/* tags: (tag limits) */
	{ "tags: {a: 1}\n" LIM, "t.yaml:1: tags: ", "expected a list of tag limits, got a mapping" },
	{ "tags: []\n" LIM, "t.yaml:1: tags: ", "needs at least one tag limit" },
	{ "tags:\n" LIM, "t.yaml:1: tags: ", "expected a list of tag limits, got a scalar" },
	{ TAG "limits: {a: 1}\n", "t.yaml:6: limits: ", "expected a list of limits" },
	{ TAG "    bogus: 1\n", "t.yaml:6: tags[0].bogus: ",
	  "unknown key (expected one of: name, rate, burst, idleExpiry, maxTags, reportInterval, allow, overrides, xdp, query)" },
	{ "tags:\n  - a\n", "t.yaml:2: tags[0]: ", "expected a mapping, got a scalar" },
	{ "tags:\n  - {rate: 1, burst: 1, query: {}}\n", "t.yaml:2: tags[0].name: ", "required but missing" },
	{ "tags:\n  - {name: a b, rate: 1, burst: 1, query: {}}\n", "t.yaml:2: tags[0].name: ",
	  "\"a b\" must be 1..31 of A-Z a-z 0-9 _ . -" },
	{ TAG TAG2("    query: {socket: /run/b.sock}\n") "  - name: a\n    rate: 1\n    burst: 1\n",
	  "t.yaml:10: tags[2].name: ", "\"a\" is already used by tags[0] (line 2)" },
	{ "tags:\n  - {name: a, burst: 1, query: {}}\n", "t.yaml:2: tags[0].rate: ", "required but missing" },
	{ "tags:\n  - {name: a, rate: 0, burst: 1, query: {}}\n", "t.yaml:2: tags[0].rate: ",
	  "0 must be greater than 0" },
	{ "tags:\n  - {name: a, rate: fast, burst: 1, query: {}}\n", "t.yaml:2: tags[0].rate: ",
	  "\"fast\" is not a number" },
	{ "tags:\n  - {name: a, rate: 1, query: {}}\n", "t.yaml:2: tags[0].burst: ", "required but missing" },
	{ "tags:\n  - name: a\n    rate: 1\n    burst: 0\n    query: {}\n", "t.yaml:4: tags[0].burst: ",
	  "0 is out of range 1..1000000000000" },
	{ "tags:\n  - name: a\n    rate: 1\n    burst: 2.5\n    query: {}\n", "t.yaml:4: tags[0].burst: ",
	  "\"2.5\" is not an integer" },
	{ TAG "    idleExpiry: 500ms\n", "t.yaml:6: tags[0].idleExpiry: ", "500ms is shorter than the minimum 1s" },
	{ TAG "    idleExpiry: 169h\n", "t.yaml:6: tags[0].idleExpiry: ", "169h is longer than the maximum 168h" },
	{ TAG "    idleExpiry: later\n", "t.yaml:6: tags[0].idleExpiry: ", "\"later\" is not a duration" },
	{ TAG "    maxTags: 0\n", "t.yaml:6: tags[0].maxTags: ", "0 is out of range 1..4194304" },
	{ TAG "    maxTags: 4194305\n", "t.yaml:6: tags[0].maxTags: ", "4194305 is out of range 1..4194304" },
	{ TAG "    reportInterval: 5ms\n", "t.yaml:6: tags[0].reportInterval: ",
	  "5ms is shorter than the minimum 10ms" },
	{ TAG "    reportInterval: 2h\n", "t.yaml:6: tags[0].reportInterval: ",
	  "2h is longer than the maximum 1h" },
	{ TAGX "    idleExpiry: 1m\n", "t.yaml:2: tags[0]: ", "needs xdp:, query: or both" },
	/* allow and overrides */
	{ TAG "    allow: [10.0.0.0/33]\n", "t.yaml:6: tags[0].allow[0]: ",
	  "\"10.0.0.0/33\" has a prefix length over 32" },
	{ TAG "    allow: [\"fd00::/129\"]\n", "t.yaml:6: tags[0].allow[0]: ", "has a prefix length over 128" },
	{ TAG "    allow: [example.com]\n", "t.yaml:6: tags[0].allow[0]: ", "is not an IPv4 or IPv6 address" },
	{ TAG "    allow: []\n", "t.yaml:6: tags[0].allow: ", "is empty" },
	{ TAG "    allow: {a: 1}\n", "t.yaml:6: tags[0].allow: ", "expected a list of CIDRs, got a mapping" },
	{ TAG "    allow:\n      - 10.0.0.0/8\n      - 10.9.9.9/8\n", "t.yaml:8: tags[0].allow[1]: ",
	  "\"10.9.9.9/8\" is listed twice (also allow[0])" },
	{ TAG "    overrides:\n      - {cidr: 10.0.0.0/8, rate: 1, burst: 1}\n"
	  "      - {cidr: 10.1.0.0/8, rate: 2, burst: 2}\n", "t.yaml:8: tags[0].overrides[1].cidr: ",
	  "\"10.1.0.0/8\" is listed twice (also overrides[0] at line 7)" },
	{ TAG "    allow: [\"fd00::/8\"]\n    overrides:\n      - {cidr: \"fd00::1/8\", rate: 1, burst: 1}\n",
	  "t.yaml:8: tags[0].overrides[0].cidr: ", "\"fd00::1/8\" is listed twice (also allow[0])" },
	{ TAG "    overrides:\n      - cidr: 10.0.0.0/8\n        burst: 1\n",
	  "t.yaml:7: tags[0].overrides[0].rate: ", "required but missing" },
	{ TAG "    overrides:\n      - {rate: 1, burst: 1}\n", "t.yaml:7: tags[0].overrides[0].cidr: ",
	  "required but missing" },
	{ TAG "    overrides:\n      - {cidr: 10.0.0.0/8, rate: 1}\n", "t.yaml:7: tags[0].overrides[0].burst: ",
	  "required but missing" },
	{ TAG "    overrides:\n      - {cidr: 10.0.0.0/8, rate: -1, burst: 1}\n",
	  "t.yaml:7: tags[0].overrides[0].rate: ", "-1 must be greater than 0" },
	{ TAG "    overrides:\n      - {cidr: 10.0.0.0/8, rate: 1, burst: 0}\n",
	  "t.yaml:7: tags[0].overrides[0].burst: ", "0 is out of range 1.." },
	{ TAG "    overrides:\n      - {cidr: 10.0.0.0/8, rate: 1, burst: 1, ceil: 2}\n",
	  "t.yaml:7: tags[0].overrides[0].ceil: ", "unknown key (expected one of: cidr, rate, burst)" },
	{ TAG "    overrides:\n      - 10.0.0.0/8\n", "t.yaml:7: tags[0].overrides[0]: ",
	  "expected a mapping {cidr, rate, burst}, got a scalar" },
	{ TAG "    overrides: {cidr: 10.0.0.0/8}\n", "t.yaml:6: tags[0].overrides: ",
	  "expected a list of {cidr, rate, burst}, got a mapping" },
	{ TAG "    overrides:\n      - {cidr: 1.2.3.4/40, rate: 1, burst: 1}\n",
	  "t.yaml:7: tags[0].overrides[0].cidr: ", "has a prefix length over 32" },
	/* xdp */
	{ TAGX "    xdp: {}\n", "t.yaml:5: tags[0].xdp.interfaces: ", "required but missing" },
	{ TAGX "    xdp: [eth0]\n", "t.yaml:5: tags[0].xdp: ", "expected a mapping, got a list" },
	{ TAGX "    xdp: {interfaces: []}\n", "t.yaml:5: tags[0].xdp.interfaces: ", "needs at least one interface" },
	{ TAGX "    xdp: {interfaces: [eth0], bogus: 1}\n", "t.yaml:5: tags[0].xdp.bogus: ",
	  "unknown key (expected one of: interfaces, prefixLen)" },
	{ TAGX "    xdp:\n      interfaces: [eth0, abcdefghijklmnop]\n", "t.yaml:6: tags[0].xdp.interfaces[1]: ",
	  "\"abcdefghijklmnop\" is not an interface name (1..15 of" },
	{ TAGX "    xdp:\n      interfaces: [\"eth/0\"]\n", "t.yaml:6: tags[0].xdp.interfaces[0]: ",
	  "is not an interface name" },
	{ TAGX "    xdp:\n      interfaces: [\"..\"]\n", "t.yaml:6: tags[0].xdp.interfaces[0]: ",
	  "is not an interface name" },
	{ TAGX "    xdp:\n      interfaces: [eth0, eth1, eth0]\n", "t.yaml:6: tags[0].xdp.interfaces[2]: ",
	  "\"eth0\" is listed twice" },
	{ TAGX "    xdp:\n      interfaces: [e0, e1, e2, e3, e4, e5, e6, e7, e8]\n",
	  "t.yaml:6: tags[0].xdp.interfaces[8]: ", "at most 8 interfaces per tag limit" },
	{ TAGX "    xdp: {interfaces: [eth0, eth1]}\n" TAG2("    xdp: {interfaces: [eth1]}\n"),
	  "t.yaml:9: tags[1].xdp.interfaces[0]: ",
	  "\"eth1\" of tag limit b is already used by tag limit a (tags[0] at line 2): an interface belongs to one tag limit" },
	{ TAGX "    xdp:\n      interfaces: [eth0]\n      prefixLen: 24\n", "t.yaml:7: tags[0].xdp.prefixLen: ",
	  "expected a mapping, got a scalar: use prefixLen: {ipv4: N, ipv6: M}" },
	{ TAGX "    xdp:\n      interfaces: [eth0]\n      prefixLen: {ipv4: 33}\n",
	  "t.yaml:7: tags[0].xdp.prefixLen.ipv4: ", "33 is out of range 1..32" },
	{ TAGX "    xdp:\n      interfaces: [eth0]\n      prefixLen: {ipv6: 129}\n",
	  "t.yaml:7: tags[0].xdp.prefixLen.ipv6: ", "129 is out of range 1..128" },
	{ TAGX "    xdp:\n      interfaces: [eth0]\n      prefixLen: {v4: 24}\n",
	  "t.yaml:7: tags[0].xdp.prefixLen.v4: ", "unknown key (expected one of: ipv4, ipv6)" },
	/* query */
	{ TAGX "    query: {sock: /x}\n", "t.yaml:5: tags[0].query.sock: ",
	  "unknown key (expected one of: socket, listen)" },
	{ TAGX "    query: /run/q.sock\n", "t.yaml:5: tags[0].query: ", "expected a mapping, got a scalar" },
	{ TAGX "    query: {socket: q.sock}\n", "t.yaml:5: tags[0].query.socket: ",
	  "\"q.sock\" must be an absolute path" },
	{ TAGX "    query:\n      socket: /" "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
	  "t.yaml:6: tags[0].query.socket: ", "longer than 107 bytes" },
	{ "socket: /run/k.sock\n" TAGX "    query: {socket: /run/k.sock}\n", "t.yaml:6: tags[0].query.socket: ",
	  "\"/run/k.sock\" is the daemon's control socket (socket:)" },
	{ TAG TAG2("    query: {}\n"), "t.yaml:9: tags[1].query.socket: ",
	  "\"/run/kthrottle/query.sock\" is already used by tag limit a (tags[0] at line 2): give each tag limit its own query.socket" },
	{ TAG TAG2("    query:\n      socket: /run/kthrottle/query.sock\n"), "t.yaml:10: tags[1].query.socket: ",
	  "is already used by tag limit a (tags[0] at line 2)" },
	{ TAGX "    query: {listen: \"localhost:7070\"}\n", "t.yaml:5: tags[0].query.listen: ",
	  "\"localhost\" is not an IPv4 or IPv6 address" },
	{ TAGX "    query: {listen: \"127.0.0.1:0\"}\n", "t.yaml:5: tags[0].query.listen: ",
	  "port \"0\" is not 1..65535" },
	{ TAGX "    query: {listen: 70000}\n", "t.yaml:5: tags[0].query.listen: ", "port \"70000\" is not 1..65535" },
	{ TAGX "    query: {listen: \"127.0.0.1\"}\n", "t.yaml:5: tags[0].query.listen: ",
	  "\"127.0.0.1\" is not ADDR:PORT (e.g. 127.0.0.1:7070, [::1]:7070, 7070)" },
	{ TAGX "    query: {listen: [7070]}\n", "t.yaml:5: tags[0].query.listen: ", "expected ADDR:PORT, got a list" },
	{ "metrics: 127.0.0.1:9464\n" TAGX "    query: {listen: 9464}\n", "t.yaml:6: tags[0].query.listen: ",
	  "127.0.0.1:9464 is the metrics endpoint (metrics at line 1)" },
	{ "metrics: \"[::1]:9464\"\n" TAGX "    query: {listen: \"[::]:9464\"}\n", "t.yaml:6: tags[0].query.listen: ",
	  "[::]:9464 is the metrics endpoint (metrics at line 1)" },
	{ "metrics: 127.0.0.1:9464\n" TAGX "    query: {listen: \"0.0.0.0:9464\"}\n",
	  "t.yaml:6: tags[0].query.listen: ", "0.0.0.0:9464 is the metrics endpoint" },
	{ TAGX "    query: {listen: \":7070\"}\n" TAG2("    query: {socket: /run/b.sock, listen: \"127.0.0.1:7070\"}\n"),
	  "t.yaml:9: tags[1].query.listen: ", "127.0.0.1:7070 is already used by tag limit a (tags[0] at line 2)" },
	/* metrics: ADDR:PORT with an IP literal */
	{ "metrics: localhost:9464\n" LIM, "t.yaml:1: metrics: ", "is not an IPv4 or IPv6 address" },
	{ "metrics: 127.0.0.1\n" LIM, "t.yaml:1: metrics: ", "is not ADDR:PORT" },
	{ "metrics: 127.0.0.1:0\n" LIM, "t.yaml:1: metrics: ", "is not 1..65535" },
	{ "metrics: \"[::1]:99999\"\n" LIM, "t.yaml:1: metrics: ", "is not 1..65535" },
	/* unbracketed IPv6 is ambiguous ("::1:8080" is an address itself): refused
	 * in every ADDR:PORT field, naming the bracketed form */
	{ "metrics: \"::1:8080\"\n" LIM, "t.yaml:1: metrics: ",
	  "\"::1:8080\" is ambiguous: an IPv6 address needs brackets, \"[::1]:8080\"" },
	{ "metrics: \"fe80::1\"\n" LIM, "t.yaml:1: metrics: ",
	  "\"fe80::1\" is ambiguous: an IPv6 address needs brackets ([::1]:8080)" },
	{ "metrics: \"[127.0.0.1]:9464\"\n" LIM, "t.yaml:1: metrics: ",
	  "\"127.0.0.1\" is not an IPv6 address" },
	{ "metrics: \"[::1:9464\"\n" LIM, "t.yaml:1: metrics: ", "\"[::1:9464\" has an unclosed [" },
	{ "metrics: \"[::1]\"\n" LIM, "t.yaml:1: metrics: ", "\"[::1]\" is not ADDR:PORT" },
	{ "metrics: \"[::1]9464\"\n" LIM, "t.yaml:1: metrics: ", "\"[::1]9464\" is not ADDR:PORT" },
	{ TAGX "    query: {listen: \"::1:7070\"}\n", "t.yaml:5: tags[0].query.listen: ",
	  "\"::1:7070\" is ambiguous: an IPv6 address needs brackets, \"[::1]:7070\"" },
	{ REDIS("    url: redis://::1:6380\n"), "t.yaml:4: store.redisStore.url: ",
	  "is ambiguous: an IPv6 address needs brackets, \"[::1]:6380\" or \"[::1:6380]\" (port 6379)" },
	{ REDIS("    url: redis://fe80::1/2\n"), "t.yaml:4: store.redisStore.url: ",
	  "is ambiguous: an IPv6 address needs brackets, \"[fe80::1]\" (port 6379)" },
	{ "store:\n  redisStore:\n    mode: cluster\n    addrs: [\"::1:7000\"]\n" LIM,
	  "t.yaml:4: store.redisStore.addrs[0]: ",
	  "\"::1:7000\" is ambiguous: an IPv6 address needs brackets, \"[::1]:7000\"" },
	{ SENT("    sentinel: {endpoints: [\"fd00::5:26379\"], master_name: m}\n"),
	  "t.yaml:4: store.redisStore.sentinel.endpoints[0]: ",
	  "\"fd00::5:26379\" is ambiguous: an IPv6 address needs brackets, \"[fd00::5]:26379\"" },
	/* errno: a known name, and only where the hook can choose it */
	{ LIM "    errno: EFOO\n", "t.yaml:6: limits[0].errno: ",
	  "\"EFOO\" is not one of: EBUSY, EAGAIN, ECONNREFUSED" },
	{ "limits:\n  - {name: a, cgroups: x, unit: packet, errno: EAGAIN, rateLimit: {max: 1}}\n",
	  "t.yaml:2: limits[0].errno: ", "applies to units connection, datagram and concurrent only" },
	/* unit request: nothing that picks traffic, node scope, no errno */
#define REQ(extra) "limits:\n  - name: a\n    unit: request\n    rateLimit: {max: 1}\n" extra
	{ REQ("    cgroups: [x]\n"), "t.yaml:5: limits[0].cgroups: ",
	  "not allowed with unit request (a cooperative limit has no kernel hook" },
	{ REQ("    pods: {namespace: a}\n"), "t.yaml:5: limits[0].pods: ", "not allowed with unit request" },
	{ REQ("    match:\n      protocol: tcp\n      cidrs: [10.0.0.0/8]\n"),
	  "t.yaml:7: limits[0].match.cidrs: ", "not allowed with unit request" },
	{ REQ("    match: {ports: 80}\n"), "t.yaml:5: limits[0].match.ports: ",
	  "not allowed with unit request" },
	{ REQ("    scope: pod\n"), "t.yaml:5: limits[0].scope: ", "unit request is node scope only" },
	{ REQ("    errno: EAGAIN\n"), "t.yaml:5: limits[0].errno: ",
	  "applies to units connection, datagram and concurrent only" },
	{ REQ("    enforce: false\n"), "t.yaml:5: limits[0].enforce: ",
	  "false is not supported with unit request" },
#undef REQ
	/* unit concurrent: whole slots, no burst, and not yet with a
	 * parent, shadow or groups */
#define CC(rl, extra) "limits:\n  - name: a\n    cgroups: [x]\n    unit: concurrent\n    rateLimit: " rl "\n" extra
	{ CC("{max: 2.5}", ""), "t.yaml:5: limits[0].rateLimit.max: ", "2.5 is no whole number" },
	{ CC("{max: 4, min: 0.5}", ""), "t.yaml:5: limits[0].rateLimit.min: ", "0.5 is no whole number" },
	{ CC("{max: 4}", "    burst: 2\n"), "t.yaml:6: limits[0].burst: ", "an in-flight limit has no burst" },
	{ CC("{max: 4}", "    parent: p\n"), "t.yaml:6: limits[0].parent: ", "not supported with unit concurrent yet" },
	{ CC("{max: 4}", "    enforce: false\n"), "t.yaml:6: limits[0].enforce: ", "in-flight limits always enforce" },
	{ CC("{strict: {every: 1s}}", ""), "t.yaml:5: limits[0].rateLimit.strict: ",
	  "not allowed with unit concurrent" },
#undef CC
	/* parent: a limit of the same unit, no cycle, at most 4 levels */
#define PL(name, unit, parent) "  - {name: " name ", cgroups: x, unit: " unit ", parent: " parent ", rateLimit: {max: 1}}\n"
#define RL_(name, unit) "  - {name: " name ", cgroups: x, unit: " unit ", rateLimit: {max: 1}}\n"
	{ "limits:\n" PL("a", "datagram", "nope"), "t.yaml:2: limits[0].parent: ", "no limit is named \"nope\"" },
	{ "limits:\n" PL("a", "datagram", "a"), "t.yaml:2: limits[0].parent: ", "a limit cannot be its own parent" },
	{ "limits:\n" RL_("p", "connection") PL("a", "datagram", "p"), "t.yaml:3: limits[1].parent: ",
	  "p (line 2) is unit connection, this limit is unit datagram: a parent counts the same tokens" },
	{ "limits:\n" PL("a", "datagram", "b") PL("b", "datagram", "a"), "t.yaml:2: limits[0].parent: ",
	  "a cycle: a -> b -> a" },
	{ "limits:\n" RL_("r", "datagram") PL("a", "datagram", "r") PL("b", "datagram", "a")
	  PL("c", "datagram", "b") PL("d", "datagram", "c"), "t.yaml:6: limits[4].parent: ",
	  "more than 4 levels: d -> c -> b -> a -> r" },
	{ "limits:\n" PL("a", "datagram", "\"x y\""), "t.yaml:2: limits[0].parent: ", "\"x y\" is no limit name" },
	{ "limits:\n  - {name: a, unit: request, parent: b, rateLimit: {max: 1}}\n" ,
	  "t.yaml:2: limits[0].parent: ", "not supported with unit request" },
	{ "limits:\n  - {name: p, cgroups: x, unit: datagram, rateLimit: {max: 1}}\n"
	  "  - {name: a, cgroups: x, unit: datagram, scope: node, parent: p, rateLimit: {max: 1}}\n",
	  "t.yaml:3: limits[1].parent: ", "a node-scope limit's parent must be node scope too" },
	{ SLIM("connection", "{every: 1s}") "    parent: q\n", "t.yaml:11: limits[0].parent: ",
	  "not allowed with rateLimit.strict at line 10" },
#undef PL
#undef RL_
	/* weightBy: a weight is a number in range, from something members have,
	 * for a pool divided by demand */
#define WP(extra) SREDIS "limits:\n  - {name: w, pods: {}, unit: datagram, share: demand, rateLimit: {max: 1}" extra "}\n"
#define WC(extra) SREDIS "limits:\n  - {name: w, cgroups: [\"/t/{tier}/*\"], unit: datagram, share: demand, rateLimit: {max: 1}" extra "}\n"
	{ WP(", weightBy: \"label:w\", weights: {a: 0}"), "t.yaml:6: limits[0].weights.a: ",
	  "0 must be at least 0.001" },
	{ WP(", weightBy: \"label:w\", weights: {a: -2}"), "t.yaml:6: limits[0].weights.a: ",
	  "-2 must be at least 0.001" },
	{ WP(", weightBy: \"label:w\", weights: {a: .nan}"), "t.yaml:6: limits[0].weights.a: ", "" },
	{ WP(", weightBy: \"label:w\", weights: {a: three}"), "t.yaml:6: limits[0].weights.a: ", "" },
	{ WP(", weightBy: \"label:w\", weights: {a: 2000000}"), "t.yaml:6: limits[0].weights.a: ",
	  "2e+06 is greater than the maximum 1e+06" },
	{ WP(", weightBy: \"label:w\", weights: {a: 1, a: 2}"), "t.yaml:6: limits[0].weights", "" },
	{ WP(", weightBy: \"label:w\", weights: [a]"), "t.yaml:6: limits[0].weights: ",
	  "expected a mapping of values to weights" },
	{ WP(", weightBy: \"label:w\", defaultWeight: 0"), "t.yaml:6: limits[0].defaultWeight: ",
	  "0 must be at least 0.001" },
	{ WP(", weights: {a: 1}"), "t.yaml:6: limits[0].weights: ", "needs weightBy" },
	{ WP(", defaultWeight: 2"), "t.yaml:6: limits[0].defaultWeight: ", "needs weightBy" },
	{ WP(", weightBy: tier"), "t.yaml:6: limits[0].weightBy: ",
	  "\"tier\" is not one of label:KEY or annotation:KEY (pods:), capture:NAME (cgroups: patterns) or caller (unit request)" },
	{ WP(", weightBy: \"label:-x\""), "t.yaml:6: limits[0].weightBy: ", "\"-x\" is no label key" },
	{ WP(", weightBy: \"annotation:example.com/weight\""), "t.yaml:6: limits[0].weightBy: ",
	  "\"example.com/weight\" is no annotation key this reads (kthrottle.io/NAME" },
	{ WP(", weightBy: \"annotation:kthrottle.io/-w\""), "t.yaml:6: limits[0].weightBy: ",
	  "is no annotation key this reads" },
	{ WC(", weightBy: \"annotation:kthrottle.io/w\""), "t.yaml:6: limits[0].weightBy: ",
	  "annotation:kthrottle.io/w needs pods: and no cgroups:" },
	{ WC(", weightBy: \"label:w\""), "t.yaml:6: limits[0].weightBy: ",
	  "label:w needs pods: and no cgroups:" },
	{ WP(", weightBy: \"capture:tier\""), "t.yaml:6: limits[0].weightBy: ",
	  "capture:tier reads the cgroups a pattern matches: needs cgroups: patterns and no pods:" },
	{ WC(", weightBy: \"capture:tenant\""), "t.yaml:6: limits[0].weightBy: ",
	  "capture:tenant needs {tenant} once, as a whole path component" },
	{ SREDIS "limits:\n  - {name: w, pods: {}, unit: datagram, weightBy: \"label:w\", rateLimit: {max: 1}}\n",
	  "t.yaml:6: limits[0].weightBy: ", "needs share: demand" },
	{ SREDIS "limits:\n  - {name: w, cgroups: [\"/t/{tier}/*\"], groupBy: \"capture:tier\", unit: datagram,"
	  " share: demand, weightBy: \"capture:tier\", rateLimit: {max: 1}}\n",
	  "t.yaml:6: limits[0].weightBy: ", "capture:tier is groupBy's too" },
	/* caller: unit request's callers name themselves, LIMIT/CALLER */
#define WR(extra) SREDIS "limits:\n  - {name: w, unit: request, share: demand, rateLimit: {max: 1}" extra "}\n"
	{ WR(", weightBy: \"label:w\""), "t.yaml:6: limits[0].weightBy: ",
	  "\"label:w\": unit request has no pod or cgroup to read; its callers name their weights themselves: caller" },
	{ WR(", classBy: \"capture:c\", classes: [{name: a}, {name: b}]"), "t.yaml:6: limits[0].classBy: ",
	  "unit request has no pod or cgroup to read; its callers name their classes themselves" },
	{ WP(", weightBy: caller, weights: {a: 1}"), "t.yaml:6: limits[0].weightBy: ",
	  "caller applies to unit request only (the name an application opens the limit by; this limit's unit is datagram" },
	{ WR(", weightBy: caller"), "t.yaml:6: limits[0].weightBy: ", "caller needs weights: {CALLER: WEIGHT, ...}" },
	{ SREDIS "limits:\n  - {name: w, unit: request, weightBy: caller, weights: {a: 1}, rateLimit: {max: 1}}\n",
	  "t.yaml:6: limits[0].weightBy: ", "needs share: demand" },
	{ WR(", weightBy: caller, weights: {a: 1, \"b c\": 2}"), "t.yaml:6: limits[0].weights.b c: ",
	  "\"b c\" is no caller name" },
	{ WR(", weightBy: caller, weights: {a: 1, aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa: 2}"),
	  "t.yaml:6: limits[0].weights.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa: ",
	  "\"w/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\" is longer than 31 characters, the most a cooperative limit's name may be" },
	{ WR(", classBy: caller, classes: [{name: a}, {name: \"x/y\"}]"), "t.yaml:6: limits[0].classes[1].name: ",
	  "\"x/y\" is no caller name" },
	{ WR(", weightBy: caller, weights: {c0: 1, c1: 1, c2: 1, c3: 1, c4: 1, c5: 1, c6: 1, c7: 1, c8: 1, c9: 1,"
	     " c10: 1, c11: 1, c12: 1, c13: 1, c14: 1, c15: 1, c16: 1, c17: 1, c18: 1, c19: 1, c20: 1, c21: 1,"
	     " c22: 1, c23: 1, c24: 1, c25: 1, c26: 1, c27: 1, c28: 1, c29: 1, c30: 1, c31: 1}, classBy: caller,"
	     " classes: [{name: c0}, {name: extra}]"),
	  "t.yaml:6: limits[0].classBy: ", "33 callers: at most 32 a limit" },
	{ WR(", weightBy: caller, weights: {a: 1}, scope: pod"), "t.yaml:6: limits[0].scope: ",
	  "unit request is node scope only" },
#undef WR
	/* classes: 2..8, named once, floors within max, a known default */
#define CL(classes, extra) WP(", classBy: \"label:c\", classes: " classes extra)
	{ CL("[{name: a}]", ""), "t.yaml:6: limits[0].classes: ", "1 classes: give 2..8" },
	{ CL("[{name: a}, {name: a}]", ""), "t.yaml:6: limits[0].classes[1].name: ", "\"a\" is listed twice" },
	{ CL("[{name: a, floor: 60%}, {name: b, floor: 50%}]", ""), "t.yaml:6: limits[0].classes[1]: ",
	  "the floors sum to 1.1, above rateLimit.max 1" },
	{ CL("[{name: a, floor: 0.5, ceiling: 0.2}, {name: b}]", ""), "t.yaml:6: limits[0].classes[0]",
	  "ceiling 0.2 is below the floor 0.5" },
	{ CL("[{name: a, floor: 150%}, {name: b}]", ""), "t.yaml:6: limits[0].classes[0].floor: ",
	  "\"150%\" is no percentage of max" },
	{ CL("[{name: a, floor: -1}, {name: b}]", ""), "t.yaml:6: limits[0].classes[0].floor: ", "" },
	{ CL("[{name: a}, {name: b, weight: 2}]", ""), "t.yaml:6: limits[0].classes[1].weight: ", "unknown key" },
	{ CL("[{name: a}, {name: b}]", ", defaultClass: c"), "t.yaml:6: limits[0].defaultClass: ",
	  "\"c\" is no class of this limit" },
	{ WP(", classes: [{name: a}, {name: b}]"), "t.yaml:6: limits[0].classes: ", "needs classBy" },
	{ WP(", classBy: \"label:c\""), "t.yaml:6: limits[0]", "classes" },
	{ SREDIS "limits:\n  - {name: w, pods: {}, unit: datagram, classBy: \"label:c\", classes: [{name: a}, {name: b}], rateLimit: {max: 1}}\n",
	  "t.yaml:6: limits[0].classBy: ", "needs share: demand" },
#undef CL
	/* weight: a child's in its parent's pool, one divided by demand */
	{ WP(", weight: 2"), "t.yaml:6: limits[0].weight: ", "needs parent:" },
	{ SREDIS "limits:\n  - {name: p, cgroups: x, unit: datagram, rateLimit: {max: 1}}\n"
	  "  - {name: w, cgroups: y, unit: datagram, parent: p, weight: 2, rateLimit: {max: 1}}\n",
	  "t.yaml:7: limits[1].weight: ", "its parent p (line 6) shares equally" },
	{ SREDIS "limits:\n  - {name: p, cgroups: x, unit: datagram, share: demand, rateLimit: {max: 1}}\n"
	  "  - {name: w, cgroups: y, unit: datagram, parent: p, weight: 0, rateLimit: {max: 1}}\n",
	  "t.yaml:7: limits[1].weight: ", "0 must be at least 0.001" },
	/* floor: what a child keeps of a parent divided by demand */
	{ WP(", floor: 2"), "t.yaml:6: limits[0].floor: ", "needs parent:" },
#define FP(pextra, a, b) SREDIS "limits:\n  - {name: p, cgroups: x, unit: datagram, rateLimit: {max: 100}" pextra "}\n" \
	"  - {name: a, cgroups: y, unit: datagram, parent: p, rateLimit: {max: 50}" a "}\n" \
	"  - {name: b, cgroups: z, unit: datagram, parent: p, rateLimit: {max: 80}" b "}\n"
	{ FP("", ", floor: 10", ""), "t.yaml:7: limits[1].floor: ", "its parent p (line 6) shares equally" },
	{ FP(", share: demand", ", floor: 60", ""), "t.yaml:7: limits[1].floor: ", "60 is greater than the maximum 50" },
	{ FP(", share: demand", ", floor: 60%", ""), "t.yaml:7: limits[1].floor: ",
	  "60 is above this limit's rateLimit.max 50, its ceiling in p" },
	{ FP(", share: demand", ", floor: 40", ", floor: 70%"), "t.yaml:8: limits[2].floor: ",
	  "the floors of p's children sum to 110, above its rateLimit.max 100" },
	{ FP(", share: demand", ", floor: 101%", ""), "t.yaml:7: limits[1].floor: ",
	  "\"101%\" is no percentage of the parent's max" },
	{ FP(", share: demand", ", floor: -1", ""), "t.yaml:7: limits[1].floor: ", "" },
	{ FP(", share: demand", ", floor: x", ""), "t.yaml:7: limits[1].floor: ", "" },
	{ SREDIS "limits:\n  - {name: p, pods: {}, unit: datagram, share: demand, classBy: \"label:c\","
	  " classes: [{name: a}, {name: b}], rateLimit: {max: 100}}\n"
	  "  - {name: a, cgroups: y, unit: datagram, parent: p, floor: 1, rateLimit: {max: 50}}\n",
	  "t.yaml:7: limits[1].floor: ", "its parent p (line 6) has classBy" },
#undef FP
#undef WP
#undef WC
	/* groupBy: something every member has; a template is no parent */
#define GP(extra) "limits:\n  - {name: g, pods: {namespace: a}, unit: datagram, rateLimit: {max: 1}" extra "}\n"
#define GC(cg, extra) "limits:\n  - {name: g, cgroups: " cg ", unit: datagram, rateLimit: {max: 1}" extra "}\n"
	{ GC("[\"/t/*\"]", ", groupBy: namespace"), "t.yaml:2: limits[0].groupBy: ",
	  "namespace groups pods: needs pods: and no cgroups: (group cgroups: patterns by parent)" },
	{ GP(", groupBy: parent"), "t.yaml:2: limits[0].groupBy: ",
	  "parent groups the cgroups a pattern matches: needs cgroups: patterns and no pods:" },
	{ GC("[\"/t/*/*\", /t/x]", ", groupBy: parent"), "t.yaml:2: limits[0].groupBy: ",
	  "parent needs every cgroups: entry to be a pattern (/t/x at line 2 is a plain path: one group)" },
	{ GP(", groupBy: label:-bad"), "t.yaml:2: limits[0].groupBy: ", "\"-bad\" is no label key" },
	{ GP(", groupBy: tenant"), "t.yaml:2: limits[0].groupBy: ",
	  "\"tenant\" is not one of namespace, label:KEY (pods:), parent or capture:NAME (cgroups: patterns)" },
	{ GP(", groupBy: \"capture:t\""), "t.yaml:2: limits[0].groupBy: ",
	  "capture groups the cgroups a pattern matches: needs cgroups: patterns and no pods:" },
	{ GC("[\"/t/{t}/*\"]", ", groupBy: \"capture:t-x\""), "t.yaml:2: limits[0].groupBy: ",
	  "\"t-x\" is no capture name" },
	{ GC("[\"/t/*/*\"]", ", groupBy: \"capture:t\""), "t.yaml:2: limits[0].groupBy: ",
	  "capture:t needs {t} once, as a whole path component, in every cgroups: entry (/t/*/* at line 2)" },
	{ GC("[\"/t/x{t}/*\"]", ", groupBy: \"capture:t\""), "t.yaml:2: limits[0].groupBy: ",
	  "as a whole path component" },
	{ GC("[\"/t/{t}/{t}\"]", ", groupBy: \"capture:t\""), "t.yaml:2: limits[0].groupBy: ",
	  "needs {t} once" },
	{ GC("[\"/t/{t}/*\", \"/u/{t}/a/*\"]", ", groupBy: \"capture:t\""),
	  "t.yaml:2: limits[0].groupBy: ", "as far from it in every entry (1, not 2)" },
	{ GC("[\"/{t}/1/2/3/4/5/6/7/*\"]", ", groupBy: \"capture:t\""), "t.yaml:2: limits[0].groupBy: ",
	  "must be at most 7 components from the end" },
	{ GP(", maxGroups: 5"), "t.yaml:2: limits[0].maxGroups: ", "needs groupBy" },
	{ GP(", groupBy: namespace, maxGroups: 0"), "t.yaml:2: limits[0].maxGroups: ", "" },
	{ GP(", groupBy: namespace, maxGroups: 9000"), "t.yaml:2: limits[0].maxGroups: ", "" },
	{ "limits:\n  - {name: g, unit: request, groupBy: namespace, rateLimit: {max: 1}}\n",
	  "t.yaml:2: limits[0].groupBy: ", "not allowed with unit request" },
	{ "limits:\n  - {name: g, pods: {namespace: a}, groupBy: namespace, unit: datagram, rateLimit: {max: 1}}\n"
	  "  - {name: a, cgroups: x, unit: datagram, parent: g, rateLimit: {max: 1}}\n",
	  "t.yaml:3: limits[1].parent: ", "g (line 2) has groupBy: its groups are pools of their own, it cannot be a parent" },
	{ SREDIS "limits:\n  - name: a\n    pods: {namespace: a}\n    groupBy: namespace\n    unit: connection\n"
	  "    rateLimit: {strict: {every: 1s}}\n", "t.yaml:8: limits[0].groupBy: ",
	  "not allowed with rateLimit.strict at line 10" },
#undef GP
#undef GC
	/* enforce: a boolean; shadow mode spends no store permits */
	{ LIM "    enforce: maybe\n", "t.yaml:6: limits[0].enforce: ", "\"maybe\" is not true or false" },
	{ SLIM("connection", "{every: 1s}") "    enforce: false\n", "t.yaml:11: limits[0].enforce: ",
	  "false is not allowed with rateLimit.strict at line 10" },
	{ "- a\n", "t.yaml:1: config: ", "expected a mapping" },
	{ "epoch: 1s\nepoch: 2s\n" LIM, "t.yaml:2: epoch: ", "duplicate key (first at line 1)" },
	{ "tickInterval: 0\n" LIM, "t.yaml:1: tickInterval: ", "shorter than the minimum 1ms" },
	{ "tickInterval: 20s\n" LIM, "t.yaml:1: tickInterval: ", "longer than the maximum 10s" },
	{ "tickInterval: fast\n" LIM, "t.yaml:1: tickInterval: ", "\"fast\" is not a duration" },
	{ "tickInterval: 500ms\nepoch: 100ms\n" LIM, "t.yaml:2: epoch: ",
	  "epoch (100ms) must not be shorter than tickInterval (500ms)" },
	{ "tickInterval: 2s\n" LIM, "t.yaml:1: tickInterval: ", "must not be shorter" },
	{ "epoch: -1s\n" LIM, "t.yaml:1: epoch: ", "not a duration" },
	{ "socket: rel.sock\n" LIM, "t.yaml:1: socket: ", "must be an absolute path" },
	{ "socket: /" "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n" LIM,
	  "t.yaml:1: socket: ", "longer than 107 bytes" },
	{ "pinDir: [a]\n" LIM, "t.yaml:1: pinDir: ", "expected a string, got a list" },
	{ "attachRoot: kubepods\n" LIM, "t.yaml:1: attachRoot: ", "\"kubepods\" must be an absolute path, auto or members" },
	{ "attachRoot: Auto\n" LIM, "t.yaml:1: attachRoot: ", "\"Auto\" must be an absolute path, auto or members" },
	{ "attachRoot: [a]\n" LIM, "t.yaml:1: attachRoot: ", "expected a string, got a list" },
	{ "attachRoot: \"\"\n" LIM, "t.yaml:1: attachRoot: ", "is empty" },
	{ "node: bad/name\n" LIM, "t.yaml:1: node: ", "may only hold" },
	{ "node: \"\"\n" LIM, "t.yaml:1: node: ", "is empty" },
	{ "a: b: c\n", "t.yaml:1: yaml: ", "mapping values are not allowed" },
	{ LIM "---\nfoo: 1\n", "t.yaml:6: yaml: ", "only one document" },
	{ LIM "--- # two\n\n\nfoo: 1\n", "t.yaml:6: yaml: ", "only one document" },
	{ "---\n" LIM "...\n---\nfoo: 1\n", "t.yaml:8: yaml: ", "only one document" },
	{ "limits: [\n", "t.yaml:2: yaml: ", "" },

	/* a limit */
	{ LIM "    bogus: 1\n", "t.yaml:6: limits[0].bogus: ", "unknown key" },
	{ "limits:\n  - cgroups: [x]\n    unit: connection\n    rateLimit: {max: 1}\n",
	  "t.yaml:2: limits[0].name: ", "required but missing" },
	{ "limits:\n  - name: a\n    unit: connection\n    rateLimit: {max: 1}\n",
	  "t.yaml:2: limits[0].cgroups: ", "required" },
	{ "limits:\n  - name: a\n    cgroups: [x]\n    rateLimit: {max: 1}\n",
	  "t.yaml:2: limits[0].unit: ", "required" },
	{ "limits:\n  - name: a\n    cgroups: [x]\n    unit: packet\n",
	  "t.yaml:2: limits[0].rateLimit: ", "required" },
	{ "limits:\n  - name\n", "t.yaml:2: limits[0]: ", "expected a mapping, got a scalar" },
	{ "limits:\n  - name: a b\n    cgroups: [x]\n    unit: packet\n    rateLimit: {max: 1}\n",
	  "t.yaml:2: limits[0].name: ", "\"a b\" must be 1..31 of" },
	{ "limits:\n  - name: abcdefghijklmnopqrstuvwxyz012345\n    cgroups: [x]\n    unit: packet\n"
	  "    rateLimit: {max: 1}\n", "t.yaml:2: limits[0].name: ", "must be 1..31" },
	{ "limits:\n  - name: \"a\\0b\"\n    cgroups: [x]\n    unit: packet\n    rateLimit: {max: 1}\n",
	  "t.yaml:2: limits[0].name: ", "NUL byte" },
	{ LIM "  - name: a\n    cgroups: [y]\n    unit: packet\n    rateLimit: {max: 1}\n",
	  "t.yaml:6: limits[1].name: ", "\"a\" is already used by limits[0] (line 2)" },
	{ "limits:\n  - name: a\n    cgroups: []\n    unit: packet\n    rateLimit: {max: 1}\n",
	  "t.yaml:3: limits[0].cgroups: ", "at least one cgroup" },
	{ "limits:\n  - name: a\n    cgroups: [x, y, x]\n    unit: packet\n    rateLimit: {max: 1}\n",
	  "t.yaml:3: limits[0].cgroups[2]: ", "\"x\" is listed twice (first at line 3)" },
	{ "limits:\n  - name: a\n    cgroups: [pods/../../etc]\n    unit: packet\n    rateLimit: {max: 1}\n",
	  "t.yaml:3: limits[0].cgroups[0]: ", "must not contain '..'" },
	{ "limits:\n  - name: a\n    cgroups: [x, \"\"]\n    unit: packet\n    rateLimit: {max: 1}\n",
	  "t.yaml:3: limits[0].cgroups[1]: ", "is empty" },
	{ "limits:\n  - name: a\n    cgroups: {a: b}\n    unit: packet\n    rateLimit: {max: 1}\n",
	  "t.yaml:3: limits[0].cgroups: ", "expected a list of cgroup paths, got a mapping" },
	{ "limits:\n  - name: a\n    cgroups:\n      - x\n      - [y]\n    unit: packet\n    rateLimit: {max: 1}\n",
	  "t.yaml:5: limits[0].cgroups[1]: ", "expected a string, got a list" },
	{ "limits:\n  - name: a\n    cgroups: [x]\n    unit: bytes\n    rateLimit: {max: 1}\n",
	  "t.yaml:4: limits[0].unit: ", "\"bytes\" is not one of: connection, datagram, packet, byte" },
	{ LIM "    scope: cluster\n", "t.yaml:6: limits[0].scope: ", "is not one of: pod, node" },
	{ LIM "    share: fair\n", "t.yaml:6: limits[0].share: ", "is not one of: equal, demand" },
	{ "tickInterval: 1ms\nepoch: 2s\n" "limits:\n  - name: a\n    cgroups: [x]\n    unit: packet\n    rateLimit: {max: 1}\n",
	  "t.yaml:2: epoch: ", "spans more than 1000 ticks" },
	{ LIM "    share: demand\n", "t.yaml:6: limits[0].share: ", "demand needs a redis store (this limit's store is local; use equal)" },
	{ LIM "    burst: 0\n", "t.yaml:6: limits[0].burst: ", "0 must be at least 1" },
	{ LIM "    burst: 10x\n", "t.yaml:6: limits[0].burst: ", "\"10x\" is not a number" },
	{ "limits:\n  - name: a\n    cgroups: [x]\n    unit: byte\n    rateLimit: {max: 1}\n    burst: 1000\n",
	  "t.yaml:6: limits[0].burst: ", "1000 must be at least 1500" },

	/* match */
	{ LIM "    match: {foo: 1}\n", "t.yaml:6: limits[0].match.foo: ",
	  "unknown key (expected one of: cidrs, ports, protocol)" },
	{ LIM "    match: [1]\n", "t.yaml:6: limits[0].match: ", "expected a mapping, got a list" },
	{ LIM "    match:\n      cidrs: [10.0.0.0/8, 10.0.0.0/33]\n", "t.yaml:7: limits[0].match.cidrs[1]: ",
	  "\"10.0.0.0/33\" has a prefix length over 32" },
	{ LIM "    match: {cidrs: [not-an-ip]}\n", "t.yaml:6: limits[0].match.cidrs[0]: ",
	  "is not an IPv4 or IPv6 address" },
	{ LIM "    match: {cidrs: [\"::/129\"]}\n", "t.yaml:6: limits[0].match.cidrs[0]: ",
	  "prefix length over 128" },
	{ LIM "    match: {cidrs: [\"10.0.0.0/\"]}\n", "t.yaml:6: limits[0].match.cidrs[0]: ",
	  "bad prefix length" },
	{ LIM "    match: {cidrs: [\"10.0.0.0/+8\"]}\n", "t.yaml:6: limits[0].match.cidrs[0]: ",
	  "bad prefix length" },
	{ LIM "    match: {cidrs: [10.0.0.1/8, 10.9.9.9/8]}\n", "t.yaml:6: limits[0].match.cidrs[1]: ",
	  "listed twice" },
	{ LIM "    match: {cidrs: []}\n", "t.yaml:6: limits[0].match.cidrs: ", "is empty" },
	{ LIM "    match: {ports: 70000}\n", "t.yaml:6: limits[0].match.ports: ", "over 65535" },
	{ LIM "    match: {ports: 9000-80}\n", "t.yaml:6: limits[0].match.ports: ", "range runs backwards" },
	{ LIM "    match: {ports: \"80-\"}\n", "t.yaml:6: limits[0].match.ports: ", "is not a port" },
	{ LIM "    match: {ports: -1}\n", "t.yaml:6: limits[0].match.ports: ", "is not a port" },
	{ LIM "    match: {ports: [80, 443]}\n", "t.yaml:6: limits[0].match.ports: ", "got a list" },
	{ LIM "    match: {protocol: sctp}\n", "t.yaml:6: limits[0].match.protocol: ",
	  "is not one of: any, tcp, udp" },
	{ "limits:\n  - name: a\n    cgroups: [x]\n    unit: datagram\n    match:\n      protocol: tcp\n"
	  "    rateLimit: {max: 1}\n", "t.yaml:6: limits[0].match.protocol: ", "never matches unit datagram" },
	/* unit call: TCP only, no errno, no strict permits yet */
	{ "limits:\n  - name: a\n    cgroups: [x]\n    unit: call\n    match:\n      protocol: udp\n"
	  "    rateLimit: {max: 1}\n", "t.yaml:6: limits[0].match.protocol: ", "udp never matches unit call" },
	{ "limits:\n  - {name: a, cgroups: x, unit: call, errno: EAGAIN, rateLimit: {max: 1}}\n",
	  "t.yaml:2: limits[0].errno: ", "a call over the rate waits in its connection" },
	{ "limits:\n  - {name: a, cgroups: x, unit: packet, maxDelay: 5s, rateLimit: {max: 1}}\n",
	  "t.yaml:2: limits[0].maxDelay: ", "applies to unit call only (how long a held call may wait; this limit's unit is packet)" },
	{ "limits:\n  - {name: a, cgroups: x, unit: call, maxDelay: 500ms, rateLimit: {max: 1}}\n",
	  "t.yaml:2: limits[0].maxDelay: ", "500ms is shorter than the minimum 1s" },
	{ "limits:\n  - {name: a, cgroups: x, unit: call, maxDelay: 25h, rateLimit: {max: 1}}\n",
	  "t.yaml:2: limits[0].maxDelay: ", "25h is longer than the maximum 24h" },
	{ "limits:\n  - {name: a, cgroups: x, unit: call, maxDelay: soon, rateLimit: {max: 1}}\n",
	  "t.yaml:2: limits[0].maxDelay: ", "\"soon\" is not a duration" },
	{ "limits:\n  - {name: a, cgroups: x, unit: call, maxDelay: [1s], rateLimit: {max: 1}}\n",
	  "t.yaml:2: limits[0].maxDelay: ", "got a list" },

	/* rateLimit.strict */
	{ SLIM("connection", "{}"), "t.yaml:10: limits[0].rateLimit.strict.every: ", "required but missing" },
	{ SLIM("connection", ""), "t.yaml:10: limits[0].rateLimit.strict.every: ", "required but missing" },
	{ SLIM("connection", "5"), "t.yaml:10: limits[0].rateLimit.strict: ", "expected a mapping, got a scalar" },
	{ SLIM("connection", "{every: 1s, bogus: 1}"), "t.yaml:10: limits[0].rateLimit.strict.bogus: ",
	  "unknown key (expected one of: every, maxReserved, expireAfter)" },
	{ SLIM("connection", "{every: 1s, every: 2s}"), "t.yaml:10: limits[0].rateLimit.strict.every: ",
	  "duplicate key" },
	{ SLIM("connection", "{every: 500us}"), "t.yaml:10: limits[0].rateLimit.strict.every: ",
	  "500us is shorter than the minimum 1ms" },
	{ SLIM("connection", "{every: 25h}"), "t.yaml:10: limits[0].rateLimit.strict.every: ",
	  "25h is longer than the maximum 24h" },
	{ SLIM("connection", "{every: soon}"), "t.yaml:10: limits[0].rateLimit.strict.every: ",
	  "\"soon\" is not a duration" },
	{ SLIM("connection", "{every: 1s, maxReserved: -1}"), "t.yaml:10: limits[0].rateLimit.strict.maxReserved: ",
	  "-1 is out of range 0..100000" },
	{ SLIM("connection", "{every: 1s, maxReserved: 100001}"),
	  "t.yaml:10: limits[0].rateLimit.strict.maxReserved: ", "100001 is out of range 0..100000" },
	{ SLIM("connection", "{every: 1s, maxReserved: 1.5}"),
	  "t.yaml:10: limits[0].rateLimit.strict.maxReserved: ", "\"1.5\" is not an integer" },
	{ SLIM("connection", "{every: 1s, expireAfter: 1001ms}"),
	  "t.yaml:10: limits[0].rateLimit.strict.expireAfter: ", "1001ms is longer than every (1s)" },
	{ SLIM("connection", "{every: 1s, expireAfter: 999us}"),
	  "t.yaml:10: limits[0].rateLimit.strict.expireAfter: ", "999us is shorter than the minimum 1ms" },
	{ SLIM("connection", "{every: 1s, expireAfter: [1s]}"),
	  "t.yaml:10: limits[0].rateLimit.strict.expireAfter: ", "expected a duration, got a list" },
	{ SLIM("connection", "{every: 1s}") "      max: 1\n", "t.yaml:11: limits[0].rateLimit.max: ",
	  "not allowed with strict at line 10" },
	{ SLIM("connection", "{every: 1s}") "      min: 1\n", "t.yaml:11: limits[0].rateLimit.min: ",
	  "not allowed with strict at line 10" },
	{ SLIM("connection", "{every: 1s}") "      rampUpDuration: 1s\n",
	  "t.yaml:11: limits[0].rateLimit.rampUpDuration: ", "not allowed with strict at line 10" },
	{ SLIM("connection", "{every: 1s}") "      modes: {relaxed: {}}\n",
	  "t.yaml:11: limits[0].rateLimit.modes: ", "not allowed with strict at line 10" },
	{ SLIM("connection", "{every: 1s}") "      resumedRampUp: false\n",
	  "t.yaml:11: limits[0].rateLimit.resumedRampUp: ", "not allowed with strict at line 10" },
	{ SLIM("connection", "{every: 1s}") "      ttl: 1s\n", "t.yaml:11: limits[0].rateLimit.ttl: ",
	  "not allowed with strict at line 10" },
	{ SREDIS "limits:\n  - name: s\n    cgroups: [x]\n    unit: connection\n    rateLimit:\n"
	  "      max: 5\n      strict: {every: 1s}\n",
	  "t.yaml:10: limits[0].rateLimit.max: ", "not allowed with strict at line 11" },
	{ SLIM("packet", "{every: 1s}"), "t.yaml:10: limits[0].rateLimit.strict: ",
	  "needs unit connection, datagram or request (this limit's unit is packet at line 8)" },
	{ SLIM("byte", "{every: 1s}"), "t.yaml:10: limits[0].rateLimit.strict: ",
	  "needs unit connection, datagram or request (this limit's unit is byte at line 8)" },
	{ SLIM("call", "{every: 200ms}"), "t.yaml:10: limits[0].rateLimit.strict.every: ",
	  "200ms is shorter than 500ms, how long TCP waits before it tries a held call again (unit call at line 8)" },
	{ SLIM("call", "{every: 2s, expireAfter: 100ms}"), "t.yaml:10: limits[0].rateLimit.strict.expireAfter: ",
	  "100ms is shorter than 500ms, how long TCP waits before it tries a held call again: a permit could expire between two tries (unit call at line 8)" },
	{ SLIM("connection", "{every: 1s}") "    burst: 2\n", "t.yaml:11: limits[0].burst: ",
	  "2 must be 1 with rateLimit.strict at line 10 (a permit admits one)" },
	{ SLIM("connection", "{every: 1s}") "    burst: 0.5\n", "t.yaml:11: limits[0].burst: ",
	  "0.5 must be at least 1" },
	{ SLIM("connection", "{every: 1s}") "    share: demand\n", "t.yaml:11: limits[0].share: ",
	  "demand is not allowed with rateLimit.strict at line 10" },
	{ "limits:\n  - name: s\n    cgroups: [x]\n    unit: connection\n    rateLimit:\n"
	  "      strict: {every: 1s}\n", "t.yaml:6: limits[0].rateLimit.strict: ",
	  "needs a redis store (permits are issued on the Redis clock)" },
	{ "store: {static: {poolSize: 3}}\nlimits:\n  - name: s\n    cgroups: [x]\n    unit: connection\n"
	  "    rateLimit:\n      strict: {every: 1s}\n", "t.yaml:7: limits[0].rateLimit.strict: ",
	  "needs a redis store (permits are issued on the Redis clock)" },
	{ SLIM("connection", "{every: 1s}") "      store: {}\n", "t.yaml:10: limits[0].rateLimit.strict: ",
	  "needs a redis store (permits are issued on the Redis clock)" },
	{ "limits:\n  - name: r\n    unit: request\n    rateLimit:\n      strict: {every: 1s}\n"
	  "      store: {static: {poolSize: 2}}\n", "t.yaml:5: limits[0].rateLimit.strict: ",
	  "needs a redis store (permits are issued on the Redis clock)" },

	/* rateLimit */
	{ RL "      bogus: 1\n", "t.yaml:7: limits[0].rateLimit.bogus: ", "unknown key (expected one of: max," },
	{ "limits:\n  - name: a\n    cgroups: [x]\n    unit: packet\n    rateLimit:\n      min: 1\n",
	  "t.yaml:6: limits[0].rateLimit.max: ", "required but missing (or give strict)" },
	{ "limits:\n  - name: a\n    cgroups: [x]\n    unit: packet\n    rateLimit: 5\n",
	  "t.yaml:5: limits[0].rateLimit: ", "expected a mapping, got a scalar" },
	{ "limits:\n  - name: a\n    cgroups: [x]\n    unit: packet\n    rateLimit:\n      max: 0\n",
	  "t.yaml:6: limits[0].rateLimit.max: ", "0 must be greater than 0" },
	{ "limits:\n  - name: a\n    cgroups: [x]\n    unit: packet\n    rateLimit:\n      max: -5\n",
	  "t.yaml:6: limits[0].rateLimit.max: ", "-5 must be greater than 0" },
	{ "limits:\n  - name: a\n    cgroups: [x]\n    unit: packet\n    rateLimit:\n      max: abc\n",
	  "t.yaml:6: limits[0].rateLimit.max: ", "\"abc\" is not a number" },
	{ "limits:\n  - name: a\n    cgroups: [x]\n    unit: packet\n    rateLimit:\n      max: .inf\n",
	  "t.yaml:6: limits[0].rateLimit.max: ", "not a number" },
	{ "limits:\n  - name: a\n    cgroups: [x]\n    unit: packet\n    rateLimit:\n      max: 0x10\n",
	  "t.yaml:6: limits[0].rateLimit.max: ", "not a number" },
	{ "limits:\n  - name: a\n    cgroups: [x]\n    unit: packet\n    rateLimit:\n      max: 1e400\n",
	  "t.yaml:6: limits[0].rateLimit.max: ", "out of range" },
	{ "limits:\n  - name: a\n    cgroups: [x]\n    unit: packet\n    rateLimit:\n      max: 1e13\n",
	  "t.yaml:6: limits[0].rateLimit.max: ", "greater than the maximum 1e+12" },
	{ "limits:\n  - name: a\n    cgroups: [x]\n    unit: packet\n    rateLimit:\n      max: [1]\n",
	  "t.yaml:6: limits[0].rateLimit.max: ", "expected a number, got a list" },
	{ "limits:\n  - name: a\n    cgroups: [x]\n    unit: packet\n    rateLimit:\n      max:\n",
	  "t.yaml:6: limits[0].rateLimit.max: ", "expected a number, got nothing" },
	{ RL "      min: 200\n", "t.yaml:7: limits[0].rateLimit.min: ", "200 is greater than max (100)" },
	{ RL "      min: 0\n", "t.yaml:7: limits[0].rateLimit.min: ", "0 must be greater than 0" },
	{ RL "      rampUpDuration: 5 parsecs\n", "t.yaml:7: limits[0].rateLimit.rampUpDuration: ",
	  "not a duration" },
	{ RL "      rampUpDuration: -1s\n", "t.yaml:7: limits[0].rateLimit.rampUpDuration: ", "not a duration" },
	{ RL "      ttl: 99999999999h\n", "t.yaml:7: limits[0].rateLimit.ttl: ", "too long a duration" },
	{ RL "      ttl: {a: 1}\n", "t.yaml:7: limits[0].rateLimit.ttl: ", "expected a duration, got a mapping" },
	{ RL "      resumedRampUp: yes\n", "t.yaml:7: limits[0].rateLimit.resumedRampUp: ",
	  "\"yes\" is not true or false" },
	{ RL "      modes:\n        relaxed: {}\n        scheduled: {}\n",
	  "t.yaml:9: limits[0].rateLimit.modes.scheduled: ", "only one mode may be given (relaxed at line 8)" },
	{ RL "      modes: {turbo: {}}\n", "t.yaml:7: limits[0].rateLimit.modes.turbo: ",
	  "unknown key (expected one of: relaxed, scheduled, onlyIfUsed, goBackN)" },
	{ RL "      modes: {}\n", "t.yaml:7: limits[0].rateLimit.modes: ", "needs exactly one of" },
	{ RL "      modes: relaxed\n", "t.yaml:7: limits[0].rateLimit.modes: ", "expected a mapping" },
	{ RL "      modes:\n        onlyIfUsed: {thresholdPercentage: 101}\n",
	  "t.yaml:8: limits[0].rateLimit.modes.onlyIfUsed.thresholdPercentage: ",
	  "101 is greater than the maximum 100" },
	{ RL "      modes:\n        goBackN:\n          rampDownPercentage: -1\n",
	  "t.yaml:9: limits[0].rateLimit.modes.goBackN.rampDownPercentage: ", "-1 must be at least 0" },
	{ RL "      modes:\n        goBackN:\n          coolDownPeriod: soon\n",
	  "t.yaml:9: limits[0].rateLimit.modes.goBackN.coolDownPeriod: ", "not a duration" },
	{ RL "      modes:\n        relaxed: {x: 1}\n", "t.yaml:8: limits[0].rateLimit.modes.relaxed.x: ",
	  "this block takes no keys" },
	{ RL "      modes:\n        onlyIfUsed: {coolDownPeriod: 5s}\n",
	  "t.yaml:8: limits[0].rateLimit.modes.onlyIfUsed.coolDownPeriod: ",
	  "unknown key (expected one of: thresholdPercentage)" },
	{ RL "      store: {static: {poolSize: -1}}\n",
	  "t.yaml:7: limits[0].rateLimit.store.static.poolSize: ", "out of range 1..1000000" },

	/* store */
	{ "store: []\n" LIM, "t.yaml:1: store: ", "expected a mapping, got a list" },
	{ "store:\n  redis: {}\n" LIM, "t.yaml:2: store.redis: ", "unknown key (expected one of: static," },
	{ "store:\n  static: {poolSize: 2}\n  redisStore: {mode: single, url: \"redis://h\"}\n" LIM,
	  "t.yaml:3: store.redisStore: ", "give only one of static, redisStore (static at line 2)" },
	{ "store:\n  static: {poolSize: 0}\n" LIM, "t.yaml:2: store.static.poolSize: ", "out of range" },
	{ "store:\n  static: {poolSize: 2.5}\n" LIM, "t.yaml:2: store.static.poolSize: ",
	  "\"2.5\" is not an integer" },
	{ "store:\n  static: {}\n" LIM, "t.yaml:2: store.static.poolSize: ", "required" },
	{ "store:\n  heartbeat: 5ms\n" LIM, "t.yaml:2: store.heartbeat: ", "shorter than the minimum 10ms" },
	{ "store:\n  heartbeat: 2m\n" LIM, "t.yaml:2: store.heartbeat: ", "longer than the maximum 1m" },
	{ "store:\n  staleAfter: 1\n" LIM, "t.yaml:2: store.staleAfter: ", "out of range 2..100" },
	{ "store:\n  heartbeat: 1s\n  validFor: 1s\n" LIM, "t.yaml:3: store.validFor: ",
	  "validFor (1s) must be longer than heartbeat (1s)" },
	{ "store:\n  heartbeat: 20s\n" LIM, "t.yaml:2: store.heartbeat: ", "must be longer than heartbeat" },
	{ "store:\n  fallbackFor: 25h\n" LIM, "t.yaml:2: store.fallbackFor: ", "longer than the maximum" },
	{ "store:\n  fallbackFor: soon\n" LIM, "t.yaml:2: store.fallbackFor: ", "" },
	{ "store:\n  maxMembers: 0\n" LIM, "t.yaml:2: store.maxMembers: ", "out of range 1..1000000" },
	{ "store:\n  maxMembers: many\n" LIM, "t.yaml:2: store.maxMembers: ", "is not an integer" },
	{ "store:\n  onStoreFailure: panic\n" LIM, "t.yaml:2: store.onStoreFailure: ",
	  "is not one of: conservative, open, closed" },
	{ "store:\n  redisStore:\n    url: redis://h\n" LIM, "t.yaml:3: store.redisStore.mode: ", "required" },
	{ "store:\n  redisStore:\n    mode: galaxy\n" LIM, "t.yaml:3: store.redisStore.mode: ",
	  "is not one of: single, sentinel, cluster" },
	{ "store:\n  redisStore:\n    mode: cluster\n" LIM, "t.yaml:3: store.redisStore.addrs: ",
	  "required but missing" },
	{ "store:\n  redisStore:\n    mode: cluster\n    addrs: [10.0.0.1:7000]\n    db: 2\n" LIM,
	  "t.yaml:5: store.redisStore.db: ", "2: Redis Cluster has only db 0" },
	{ "store:\n  redisStore:\n    mode: cluster\n    addrs: [10.0.0.1:7000]\n    url: redis://h\n" LIM,
	  "t.yaml:5: store.redisStore.url: ", "not used with mode: cluster (give addrs)" },
	{ "store:\n  redisStore:\n    mode: cluster\n    addrs: [10.0.0.1]\n" LIM,
	  "t.yaml:4: store.redisStore.addrs[0]: ", "" },
	{ "store:\n  redisStore:\n    mode: single\n    url: redis://h\n    addrs: [h:1]\n" LIM,
	  "t.yaml:5: store.redisStore.addrs: ", "only used with mode: cluster" },
	{ REDIS(""), "t.yaml:3: store.redisStore.url: ", "required" },
	{ REDIS("    url: http://h\n"), "t.yaml:4: store.redisStore.url: ", "must start with redis://" },
	{ REDIS("    url: redis://h:99999\n"), "t.yaml:4: store.redisStore.url: ", "port out of range" },
	{ REDIS("    url: redis://h:x\n"), "t.yaml:4: store.redisStore.url: ", "bad port" },
	{ REDIS("    url: redis://\n"), "t.yaml:4: store.redisStore.url: ", "bad host name" },
	{ REDIS("    url: redis://h/x\n"), "t.yaml:4: store.redisStore.url: ", "database must be a number" },
	{ REDIS("    url: redis://h?db=1\n"), "t.yaml:4: store.redisStore.url: ", "query" },
	{ REDIS("    url: redis://::1:6379\n"), "t.yaml:4: store.redisStore.url: ", "brackets" },
	{ REDIS("    url: redis://u:p%zz@h\n"), "t.yaml:4: store.redisStore.url: ", "percent-encoding" },
	{ REDIS("    url: redis://u@h\n"), "t.yaml:4: store.redisStore.url: ", "username needs a password" },
	{ REDIS("    url: redis://h\n    sentinel: {master_name: m}\n"), "t.yaml:5: store.redisStore.sentinel: ",
	  "only used with mode: sentinel" },
	{ REDIS("    url: redis://h\n    redis_auth: {passwordEnv: KT_TEST_NO_SUCH_VAR}\n"),
	  "t.yaml:5: store.redisStore.redis_auth.passwordEnv: ",
	  "environment variable KT_TEST_NO_SUCH_VAR is not set" },
	{ REDIS("    url: redis://h\n    redis_auth:\n      password: a\n      passwordEnv: B\n"),
	  "t.yaml:7: store.redisStore.redis_auth.passwordEnv: ",
	  "give only one of password, passwordFile, passwordEnv (password at line 6)" },
	{ REDIS("    url: redis://h\n    redis_auth: {passwordFile: /nonexistent/kt-pass}\n"),
	  "t.yaml:5: store.redisStore.redis_auth.passwordFile: ",
	  "cannot open /nonexistent/kt-pass: No such file or directory", -ENOENT },
	{ REDIS("    url: redis://h\n    redis_auth: {pass: x}\n"), "t.yaml:5: store.redisStore.redis_auth.pass: ",
	  "unknown key" },
	{ REDIS("    url: redis://h\n    redis_auth: {username: u}\n"), "t.yaml:5: store.redisStore.redis_auth: ",
	  "username needs a password" },
	{ REDIS("    url: redis://:pw@h\n    redis_auth: {password: other}\n"),
	  "t.yaml:5: store.redisStore.redis_auth: ", "password also given in url" },
	{ REDIS("    url: redis://h\n    redis_auth: {password: \"\"}\n"),
	  "t.yaml:5: store.redisStore.redis_auth.password: ", "is empty" },
	{ REDIS("    url: redis://h\n    redis_tls: {cert_secret: /c}\n"), "t.yaml:5: store.redisStore.redis_tls: ",
	  "cert_secret and key_secret must be given together" },
	{ REDIS("    url: redis://h\n    redis_tls: {insecure_skip_verify: maybe}\n"),
	  "t.yaml:5: store.redisStore.redis_tls.insecure_skip_verify: ", "not true or false" },
	{ REDIS("    url: redis://h\n    keyPrefix: a b\n"), "t.yaml:5: store.redisStore.keyPrefix: ",
	  "may only hold letters" },
	{ REDIS("    url: redis://h\n    timeout: 5ms\n"), "t.yaml:5: store.redisStore.timeout: ", "10ms" },
	{ REDIS("    url: redis://h\n    timeout: 11s\n"), "t.yaml:5: store.redisStore.timeout: ", "10s" },
	{ REDIS("    url: redis://h\n    timeout: soon\n"), "t.yaml:5: store.redisStore.timeout: ", "" },
	{ REDIS("    url: redis://h\n    leases: pod\n"), "t.yaml:5: store.redisStore.leases: ", "member" },
	{ "store:\n  redisStore:\n    mode: cluster\n    addrs: [\"h:7000\"]\n    leases: node\n" LIM,
	  "t.yaml:5: store.redisStore.leases: ", "node is not available with mode: cluster" },
	{ SENT(""), "t.yaml:3: store.redisStore.sentinel: ", "required" },
	{ SENT("    url: redis://h\n"), "t.yaml:4: store.redisStore.url: ", "not used with mode: sentinel" },
	{ SENT("    sentinel: {master_name: m}\n"), "t.yaml:4: store.redisStore.sentinel.endpoints: ", "required" },
	{ SENT("    sentinel: {endpoints: [\"h:1\"]}\n"), "t.yaml:4: store.redisStore.sentinel.master_name: ",
	  "required" },
	{ SENT("    sentinel: {endpoints: [], master_name: m}\n"), "t.yaml:4: store.redisStore.sentinel.endpoints: ",
	  "at least one endpoint" },
	{ SENT("    sentinel: {endpoints: \"h:1\", master_name: m}\n"),
	  "t.yaml:4: store.redisStore.sentinel.endpoints: ", "expected a list" },
	{ SENT("    sentinel:\n      endpoints: [\"h:1\", h]\n      master_name: m\n"),
	  "t.yaml:5: store.redisStore.sentinel.endpoints[1]: ", "\"h\" needs a port" },
	{ SENT("    sentinel:\n      endpoints: [\"::1:26379\"]\n      master_name: m\n"),
	  "t.yaml:5: store.redisStore.sentinel.endpoints[0]: ", "brackets" },
	{ SENT("    sentinel:\n      endpoints: [\"[::g]:1\"]\n      master_name: m\n"),
	  "t.yaml:5: store.redisStore.sentinel.endpoints[0]: ", "bad IPv6 address" },
	{ SENT("    sentinel:\n      endpoints: [\"h:1\", \"h:1\"]\n      master_name: m\n"),
	  "t.yaml:5: store.redisStore.sentinel.endpoints[1]: ", "listed twice" },
	{ SENT("    sentinel:\n      endpoints: [a:1, b:1, c:1, d:1, e:1, f:1, g:1, h:1, i:1]\n      master_name: m\n"),
	  "t.yaml:5: store.redisStore.sentinel.endpoints[8]: ", "at most 8 endpoints" },
	{ SENT("    redis_auth: {password: a}\n    sentinel:\n      endpoints: [\"h:1\"]\n      master_name: m\n"
	       "      redis_auth: {password: b}\n"),
	  "t.yaml:8: store.redisStore.sentinel.redis_auth: ", "also given at redisStore.redis_auth (line 4)" },
	{ SENT("    sentinel:\n      endpoints: [\"h:1\"]\n      master_name: m\n      sentinel_auth: {username: s}\n"),
	  "t.yaml:7: store.redisStore.sentinel.sentinel_auth: ", "username needs a password" },
	{ SENT("    sentinel:\n      endpoints: [\"h:1\"]\n      master_name: m\n      bogus: 1\n"),
	  "t.yaml:7: store.redisStore.sentinel.bogus: ", "unknown key" },
};

static void test_errors(void **state)
{
	size_t i, failed = 0;

	(void)state;
	for (i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
		const struct bad *b = &bad_cases[i];
		struct kt_config cfg;
		char err[KT_ERR_LEN];
		int rc;

		memset(&cfg, 0xa5, sizeof(cfg)); /* the parser must zero it */
		rc = parse(b->yaml, &cfg, err);
		if (getenv("KT_TEST_VERBOSE"))
			print_message("%s\n", err);
		if (rc != (b->rc ? b->rc : -EINVAL) || strncmp(err, b->prefix, strlen(b->prefix)) ||
		    !strstr(err + strlen(b->prefix), b->problem) || strchr(err, '\n'))
		{
			print_error("case %zu: rc %d, got \"%s\", want \"%s...%s\"\n", i, rc, err,
				    b->prefix, b->problem);
			failed++;
		}
		assert_true(all_zero(&cfg, sizeof(cfg)));
	}
	assert_int_equal(failed, 0);
}

/* No message ever carries a password, whichever check fails around it. */
static void test_secrets_not_echoed(void **state)
{
	static const char *const yamls[] = {
		REDIS("    url: redis://u:Hunter2Pw@h:99999\n"),
		REDIS("    url: redis://u:Hunter2Pw@h/x\n"),
		REDIS("    url: redis://u:Hunter2Pw@::1\n"),
		REDIS("    url: redis://:Hunter2Pw@h\n    redis_auth: {password: Hunter2Pw}\n"),
		REDIS("    url: redis://h\n    redis_auth: {password: [Hunter2Pw]}\n"),
		REDIS("    url: Hunter2Pw\n"),
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(yamls) / sizeof(yamls[0]); i++) {
		struct kt_config cfg;
		char err[KT_ERR_LEN];

		assert_int_equal(parse(yamls[i], &cfg, err), -EINVAL);
		assert_true(strncmp(err, "t.yaml:", 7) == 0);
		if (strstr(err, "Hunter2Pw"))
			fail_msg("case %zu leaks the password: %s", i, err);
	}
}

/* ---- durations -------------------------------------------------------- */

static void test_durations(void **state)
{
	static const struct {
		const char *s;
		int rc;
		uint64_t ns;
	} cases[] = {
		{ "1s", 0, SEC },
		{ "100ms", 0, 100 * MS },
		{ "1m30s", 0, 90 * SEC },
		{ "250us", 0, 250000 },
		{ "250\xc2\xb5s", 0, 250000 },
		{ "5ns", 0, 5 },
		{ "2h", 0, 7200 * SEC },
		{ "1.5s", 0, 1500 * MS },
		{ "0.001ms", 0, 1000 },
		{ ".5s", 0, 500 * MS },
		{ "1h1m1s1ms1us1ns", 0, 3661 * SEC + MS + 1000 + 1 },
		{ "5", 0, 5 * SEC },
		{ "0", 0, 0 },
		{ "2.25", 0, 2250 * MS },
		{ "18446744073709551615ns", 0, UINT64_MAX },
		{ "18446744073709551616ns", -ERANGE, 0 },
		{ "5124096h", -ERANGE, 0 },
		{ "99999999999999999999999s", -ERANGE, 0 },
		{ "", -EINVAL, 0 },
		{ "-1s", -EINVAL, 0 },
		{ "+1s", -EINVAL, 0 },
		{ "s", -EINVAL, 0 },
		{ "1x", -EINVAL, 0 },
		{ "1s5", -EINVAL, 0 },
		{ "0s5", -EINVAL, 0 },
		{ "1 s", -EINVAL, 0 },
		{ " 1s", -EINVAL, 0 },
		{ "1e3", -EINVAL, 0 },
		{ "1ss", -EINVAL, 0 },
		{ ".", -EINVAL, 0 },
		{ "nan", -EINVAL, 0 },
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t ns = 12345;
		int rc = kt_parse_duration(cases[i].s, &ns);

		if (rc != cases[i].rc || (rc == 0 && ns != cases[i].ns))
			fail_msg("\"%s\": rc %d ns %llu, want rc %d ns %llu", cases[i].s, rc,
				 (unsigned long long)ns, cases[i].rc, (unsigned long long)cases[i].ns);
	}
}

static void test_names(void **state)
{
	(void)state;
	assert_string_equal(kt_unit_name(KT_UNIT_CONNECTION), "connection");
	assert_string_equal(kt_unit_name(KT_UNIT_DATAGRAM), "datagram");
	assert_string_equal(kt_unit_name(KT_UNIT_PACKET), "packet");
	assert_string_equal(kt_unit_name(KT_UNIT_BYTE), "byte");
	assert_string_equal(kt_unit_name(KT_UNIT_CALL), "call");
	assert_string_equal(kt_unit_name(KT_UNIT_COUNT), "?");
	assert_string_equal(kt_mode_name(KT_MODE_RELAXED), "relaxed");
	assert_string_equal(kt_mode_name(KT_MODE_SCHEDULED), "scheduled");
	assert_string_equal(kt_mode_name(KT_MODE_ONLY_IF_USED), "onlyIfUsed");
	assert_string_equal(kt_mode_name(KT_MODE_GO_BACK_N), "goBackN");
	assert_string_equal(kt_scope_name(KT_SCOPE_POD), "pod");
	assert_string_equal(kt_scope_name(KT_SCOPE_NODE), "node");
	assert_string_equal(kt_share_name(KT_SHARE_DEMAND), "demand");
	assert_string_equal(kt_store_failure_name(KT_FAIL_OPEN), "open");
	assert_string_equal(kt_store_kind_name(KT_STORE_REDIS), "redis");
}

/* ---- files ------------------------------------------------------------ */

static void test_load_errors(void **state)
{
	struct kt_config cfg;
	char err[KT_ERR_LEN], dir[] = "/tmp/kt-test-cfg-XXXXXX", path[64];
	FILE *f;

	(void)state;
	assert_int_equal(kt_config_load("/nonexistent/kt.yaml", &cfg, err, sizeof(err)), -ENOENT);
	assert_string_equal(err, "/nonexistent/kt.yaml: cannot open: No such file or directory");
	assert_true(all_zero(&cfg, sizeof(cfg)));

	assert_non_null(mkdtemp(dir));
	assert_int_equal(kt_config_load(dir, &cfg, err, sizeof(err)), -EISDIR);
	assert_true(strstr(err, ": cannot open: Is a directory") != NULL);

	snprintf(path, sizeof(path), "%s/k.yaml", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(RL "      min: 200\n", f);
	fclose(f);
	assert_int_equal(kt_config_load(path, &cfg, err, sizeof(err)), -EINVAL);
	assert_true(strncmp(err, path, strlen(path)) == 0);
	assert_string_equal(err + strlen(path), ":7: limits[0].rateLimit.min: 200 is greater than max (100)");
	assert_true(all_zero(&cfg, sizeof(cfg)));

	/* a NULL error buffer is allowed */
	assert_int_equal(kt_config_load(path, &cfg, NULL, 0), -EINVAL);
	assert_int_equal(kt_config_load("/nonexistent/kt.yaml", &cfg, NULL, 0), -ENOENT);

	f = fopen(path, "w");
	assert_non_null(f);
	fputs(LIM, f);
	fclose(f);
	assert_int_equal(kt_config_load(path, &cfg, err, sizeof(err)), 0);
	assert_string_equal(cfg.file, path);
	assert_string_equal(cfg.limits[0].name, "a");
	kt_config_free(&cfg);
	unlink(path);
	rmdir(dir);
}

/* Every shipped example parses; demo.yaml is what the demo script relies on. */
static void test_examples(void **state)
{
	const char *src = getenv("KT_SRCDIR");
	char pattern[4096], err[KT_ERR_LEN];
	struct kt_config cfg;
	glob_t g;
	size_t i;
	bool saw_demo = false;

	(void)state;
	snprintf(pattern, sizeof(pattern), "%s/examples/*.yaml", src ? src : ".");
	assert_int_equal(glob(pattern, 0, NULL, &g), 0);
	assert_true(g.gl_pathc >= 4);
	for (i = 0; i < g.gl_pathc; i++) {
		int rc = kt_config_load(g.gl_pathv[i], &cfg, err, sizeof(err));

		if (rc)
			fail_msg("%s", err);
		assert_true(cfg.n_limits >= 1);
		if (strstr(g.gl_pathv[i], "/demo.yaml")) {
			const struct kt_limit_cfg *l = &cfg.limits[0];

			saw_demo = true;
			assert_int_equal(cfg.n_limits, 1);
			assert_string_equal(l->name, "demo");
			assert_int_equal(l->n_cgroups, 1);
			assert_string_equal(l->cgroups[0], "kthrottle-demo");
			assert_int_equal(l->match.port_lo, 9000);
			assert_int_equal(l->match.port_hi, 9100);
			assert_int_equal(l->match.proto_mask, KT_PROTO_UDP);
			assert_int_equal(l->unit, KT_UNIT_DATAGRAM);
			assert_true(l->rl.max == 100);
			assert_true(l->rl.min == 50);
			assert_true(l->rl.ramp_up_ns == 4000000000ull);
			assert_int_equal(l->rl.mode, KT_MODE_RELAXED);
			assert_true(l->burst == 10);
			assert_string_equal(cfg.pin_dir, "/sys/fs/bpf/kthrottle-demo");
			assert_int_equal(l->store.kind, KT_STORE_LOCAL);
		}
		if (strstr(g.gl_pathv[i], "/sentinel.yaml"))
			assert_int_equal(cfg.store.redis_mode, KT_REDIS_SENTINEL);
		if (strstr(g.gl_pathv[i], "/redis.yaml"))
			assert_int_equal(cfg.store.kind, KT_STORE_REDIS);
		kt_config_free(&cfg);
	}
	globfree(&g);
	assert_true(saw_demo);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_minimal_defaults),
		cmocka_unit_test(test_attach_root),
		cmocka_unit_test(test_tags),
		cmocka_unit_test(test_tags_only),
		cmocka_unit_test(test_tag_listen),
		cmocka_unit_test(test_tag_counts),
		cmocka_unit_test(test_burst_defaults),
		cmocka_unit_test(test_refuse_errno),
		cmocka_unit_test(test_max_delay),
		cmocka_unit_test(test_enforce),
		cmocka_unit_test(test_parent),
		cmocka_unit_test(test_group_by),
		cmocka_unit_test(test_weights),
		cmocka_unit_test(test_unit_request),
		cmocka_unit_test(test_unit_concurrent),
		cmocka_unit_test(test_metrics_addr),
		cmocka_unit_test(test_lease_options),
		cmocka_unit_test(test_everything),
		cmocka_unit_test(test_redis_url_defaults),
		cmocka_unit_test(test_password_sources),
		cmocka_unit_test(test_sentinel),
		cmocka_unit_test(test_tls_lines),
		cmocka_unit_test(test_cluster),
		cmocka_unit_test(test_limit_count),
		cmocka_unit_test(test_strict),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_secrets_not_echoed),
		cmocka_unit_test(test_durations),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_load_errors),
		cmocka_unit_test(test_examples),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
