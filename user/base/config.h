/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* kthrottled configuration: the YAML file parsed into plain structs.
 * Parsing and validation are pure (no filesystem checks beyond reading the
 * file); runtime checks such as "is this a cgroup v2 directory" happen in the
 * daemon, which reports them with the line numbers kept here. */
#ifndef KT_CONFIG_H
#define KT_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "kthrottle.h"

#define KT_MAX_CIDRS 32
#define KT_MAX_CGROUPS_PER_LIMIT 256
#define KT_MAX_ENDPOINTS 8
#define KT_ERR_LEN 512
#define KT_EPOCH_TICKS_MAX 1000   /* epoch / tickInterval */

enum kt_mode {
	KT_MODE_RELAXED = 0, /* default */
	KT_MODE_SCHEDULED,
	KT_MODE_ONLY_IF_USED,
	KT_MODE_GO_BACK_N,
};

/* rateLimit.strict: every admission is a permit issued on the
 * Redis clock, consecutive permits at least `every` apart across all nodes.
 * Units connection, datagram and request only; a redis store; no max, min,
 * rampUpDuration, modes, resumedRampUp, ttl; burst 1; share equal. */
struct kt_strict_cfg {
	bool on;
	int line;
	uint64_t every_ns;        /* required, 1ms..24h */
	int max_reserved;         /* maxReserved: permits reserved ahead across the cluster,
				   * default 8, 0..100000; 0 = pessimistic (back off with jitter) */
	uint64_t expire_ns;       /* expireAfter: a permit unused this long after its time is
				   * wasted; default every / 2, 1ms..every */
};

struct kt_rate_limit_cfg {
	struct kt_strict_cfg strict; /* when on, max = min = 1/every and the rest default */
	double max;               /* pool tokens per second, > 0 */
	double min;               /* default: max */
	uint64_t ramp_up_ns;      /* rampUpDuration, default 0 */
	enum kt_mode mode;
	double threshold_pct;     /* onlyIfUsed / goBackN, default 50, 0..100 */
	uint64_t cool_down_ns;    /* goBackN, default 5 s */
	double ramp_down_pct;     /* goBackN, default 50, 0..100 */
	bool resumed_ramp_up;     /* default false */
	uint64_t ttl_ns;          /* default 180 s */
};

struct kt_cidr {
	uint8_t addr[16];         /* v4 stored v4-mapped (::ffff:a.b.c.d) */
	uint8_t prefixlen;        /* in the 128-bit v4-mapped space */
};

struct kt_match {
	struct kt_cidr cidrs[KT_MAX_CIDRS];
	int n_cidrs;              /* default: 0.0.0.0/0 and ::/0 */
	uint16_t port_lo, port_hi; /* default 0..65535 */
	uint8_t proto_mask;       /* KT_PROTO_*, default both */
};

struct kt_auth_cfg {
	char *username;           /* NULL if absent */
	char *password;           /* resolved from password, passwordFile or passwordEnv */
	char *password_file;      /* passwordFile, read again at each connect (a rotated Secret) */
};

struct kt_tls_cfg {
	bool enabled;             /* true when a *_tls block is present */
	char *ca_cert;            /* paths; NULL if absent */
	char *cert;
	char *key;
	bool insecure_skip_verify;
	/* where each path was given, for errors about the file at store open
	 * (it is read there and at every connect): 0 if absent */
	int ca_cert_line, cert_line, key_line;
	char *field;              /* "store.redisStore.redis_tls"; NULL if built by hand */
};

enum kt_store_kind {
	KT_STORE_LOCAL = 0,       /* no store: this node enforces the whole limit */
	KT_STORE_STATIC,          /* static: {poolSize: N} */
	KT_STORE_REDIS,
};

/* cluster: the seed nodes are endpoint_host/port (from addrs); host/port
 * name the first seed (labels), db is always 0. */
enum kt_redis_mode { KT_REDIS_SINGLE = 0, KT_REDIS_SENTINEL, KT_REDIS_CLUSTER };

/* redisStore.leases: what a lease is held by. member: each member of each
 * limit renews its own at every heartbeat (the node sends every limit).
 * node: the node renews one lease for all its members, and sends a limit
 * only when it or its pool changed (the change feed) or once per
 * KT_STORE_QUIET_REFRESH_MS (store.h "Node leases"). */
enum kt_store_leases { KT_LEASES_MEMBER = 0, KT_LEASES_NODE };

enum kt_store_failure {
	KT_FAIL_CONSERVATIVE = 0, /* min / last known pool size */
	KT_FAIL_OPEN,             /* keep the last share */
	KT_FAIL_CLOSED,           /* rate 0 */
};

enum kt_share_policy { KT_SHARE_EQUAL = 0, KT_SHARE_DEMAND };

/* groupBy: what splits a limit into one pool per distinct value. */
enum kt_group_by {
	KT_GROUP_NONE = 0,
	KT_GROUP_NAMESPACE,       /* a pods: limit: the pod's namespace */
	KT_GROUP_LABEL,           /* a pods: limit: the value of label group_label */
	KT_GROUP_PARENT,          /* a cgroups: pattern limit: the matched directory's parent's name */
	KT_GROUP_CAPTURE,         /* a cgroups: pattern limit: the component {group_label} matched */
};
/* groupBy parent and capture: the group is the name group_up directories
 * above a match (parent: 1; capture: the components after {NAME}), at most
 * this many */
#define KT_GROUP_UP_MAX 7
/* Whether g finds a member's group in its cgroup's path (parent, capture),
 * not in its pod. */
static inline bool kt_group_by_path(enum kt_group_by g)
{
	return g == KT_GROUP_PARENT || g == KT_GROUP_CAPTURE;
}
/* weightBy (share: demand): where a member's weight comes from. */
enum kt_weight_by {
	KT_WEIGHT_NONE = 0,       /* every member weighs 1 */
	KT_WEIGHT_LABEL,          /* a pods: limit: the value of label weight_key */
	KT_WEIGHT_ANNOTATION,     /* a pods: limit: the value of annotation weight_key (one of
				   * KT_ANNOTATION_PREFIX: the only ones the watcher keeps) */
	KT_WEIGHT_CAPTURE,        /* a cgroups: pattern limit: the component {weight_key} matched */
	KT_WEIGHT_CHILD,          /* classes only, a parent whose children have floor: the child
				   * a member comes through (kt_cfg_link_floors) */
	KT_WEIGHT_CALLER,         /* unit request: the name the application opens the limit
				   * by, "LIMIT/CALLER" (kt_limit_cfg.callers) */
};
/* weightBy/classBy annotation:KEY: the watcher keeps a pod's annotations
 * under this prefix only (others, such as last-applied-configuration, can
 * be large), at most KT_POD_MAX_ANNOTATIONS of them */
#define KT_ANNOTATION_PREFIX "kthrottle.io/"
/* weights, defaultWeight: a weight is a number in this range */
#define KT_WEIGHT_MIN 0.001
#define KT_WEIGHT_MAX 1000000.0
/* weights: the most values one limit maps, and their longest (a path
 * component's) */
#define KT_WEIGHTS_MAX 256
#define KT_WEIGHT_VALUE_MAX 255
/* weights: one value and what it weighs */
struct kt_weight_value {
	char *value;
	double weight;
};
/* classes (share: demand): a priority class, the most important first */
#define KT_CLASSES_MAX 8
/* weightBy/classBy caller: at most this many callers a limit (each a
 * kt_coop entry and a pool member on every node) */
#define KT_CALLERS_MAX 32
struct kt_share_class {
	char *name;       /* 1..63 printable, unique in the limit */
	double floor;     /* tokens/s it can always use (its demand permitting) */
	double ceiling;   /* tokens/s it takes at most; default rateLimit.max */
	int line;
};
/* maxGroups: default and ceiling of the groups one groupBy limit has on a
 * node; past it, the other values share one pool (members/groups.h). */
#define KT_GROUPS_DEFAULT 1000
#define KT_GROUPS_MAX 8192

/* pods: a Kubernetes label selector over the pods on this node. */
#define KT_MAX_LABEL_REQS 16
#define KT_MAX_LABEL_VALUES 16

enum kt_label_op { KT_LABEL_IN = 0, KT_LABEL_NOT_IN, KT_LABEL_EXISTS, KT_LABEL_DOES_NOT_EXIST };

struct kt_label_req {
	char *key;                /* [prefix/]name, as Kubernetes checks it */
	enum kt_label_op op;
	char *values[KT_MAX_LABEL_VALUES]; /* In/NotIn: 1..16; Exists/DoesNotExist: none */
	int n_values;
};

struct kt_pod_selector {
	bool set;                 /* the limit has a pods: block */
	int line;
	char *namespace;          /* NULL: every namespace */
	struct kt_label_req reqs[KT_MAX_LABEL_REQS]; /* labels: (as In [v]) then matchExpressions */
	int n_reqs;               /* 0: every pod (of the namespace) */
};

/* kubernetes: where the pods come from. NULL fields take the in-cluster
 * defaults when the daemon starts (kt_kube_resolve_opts). */
struct kt_kube_cfg {
	int line;                 /* 0 if the block is absent */
	char *api_server;         /* https://HOST:PORT; default from KUBERNETES_SERVICE_HOST/PORT */
	char *token_file;         /* default the service account's token */
	char *ca_file;            /* default the service account's ca.crt */
	char *node_name;          /* default $NODE_NAME */
	char *cgroup_root;        /* where kubepods[.slice] lives, relative to the cgroup2 mount; default "" */
};

struct kt_store_cfg {
	enum kt_store_kind kind;
	int line;                 /* where the store block starts, 0 if defaulted */
	char *file;               /* the config file, for messages; NULL if built by hand */
	int static_pool_size;     /* KT_STORE_STATIC, >= 1 */
	/* KT_STORE_REDIS */
	enum kt_redis_mode redis_mode;
	char *host;               /* single: from url */
	int port;
	int db;
	struct kt_auth_cfg redis_auth; /* single: from url and/or redis_auth */
	struct kt_tls_cfg redis_tls;
	/* sentinel endpoints, or cluster seed nodes */
	char *endpoint_host[KT_MAX_ENDPOINTS];
	int endpoint_port[KT_MAX_ENDPOINTS];
	int n_endpoints;
	char *master_name;
	struct kt_auth_cfg sentinel_auth;
	struct kt_tls_cfg sentinel_tls;
	/* agreement and failure policy */
	uint64_t heartbeat_ns;    /* default 1 s */
	int stale_after;          /* heartbeats, default 3 */
	uint64_t valid_for_ns;    /* default 10 s; the lease is min(this, staleAfter x heartbeat) */
	uint64_t fallback_for_ns; /* default 60 s: onStoreFailure rate after the lease, then closed */
	int max_members;          /* pool size assumed before any answer; 0 = unknown: closed */
	enum kt_store_failure on_failure;
	char *key_prefix;         /* default "kthrottle" */
	enum kt_store_leases leases; /* redisStore.leases, default member */
	uint64_t timeout_ns;      /* redisStore.timeout: a fixed step timeout; 0: follow the latency */
};
/* redisStore.timeout: bounds (the store's step timeout, store.h) */
#define KT_STORE_TIMEOUT_MIN_MS 10
#define KT_STORE_TIMEOUT_MAX_MS 10000

struct kt_limit_cfg {
	char name[KT_NAME_LEN];   /* [A-Za-z0-9_.-], 1..31 chars, unique */
	int line;
	char **cgroups;           /* n_cgroups, as written (at most KT_MAX_CGROUPS_PER_LIMIT) */
	int *cgroup_lines;
	int n_cgroups;            /* >= 1 unless pods.set */
	struct kt_pod_selector pods;
	struct kt_match match;
	enum kt_unit unit;        /* required */
	enum kt_scope scope;      /* default pod */
	bool allow_raw_sockets;   /* default false: members cannot open raw IP sockets */
	bool shadow;              /* enforce: false: decide and count, refuse nothing */
	/* parent: a limit of the same unit every call of this one is also
	 * charged to (and its ancestors'), at most KT_MAX_LEVELS levels in all */
	char parent_name[KT_NAME_LEN]; /* "" = none */
	int parent_line;
	int parent;               /* limits[parent - 1], 0 = none (kt_cfg_parent; set after all are parsed) */
	int depth;                /* 0 for a root, 1 for its children... */
	int enforce_line;         /* where enforce: is written, 0 = absent */
	/* groupBy: this limit is a template, one instance per group value
	 * (members/groups.h); none of its own pools or buckets */
	enum kt_group_by group_by;
	char *group_label;        /* KT_GROUP_LABEL: the label key; KT_GROUP_CAPTURE: the capture's name */
	int group_up;             /* KT_GROUP_PARENT, _CAPTURE: levels above a match (KT_GROUP_UP_MAX) */
	int group_line;           /* where groupBy: is written, 0 = absent */
	int max_groups;           /* maxGroups: groups on this node, 1..KT_GROUPS_MAX */
	/* In a running (expanded) config: an instance of the template
	 * limits[group_of - 1] of the parsed one (0 = none), for the members
	 * whose value is group_value; group_other: for every value past
	 * maxGroups, that is none of group_known[0..n_group_known) (sorted) */
	int group_of;
	char *group_value;
	bool group_other;
	const char *const *group_known;
	int n_group_known;
	/* weightBy, weights, defaultWeight (share: demand): each member's
	 * weight in the weighted max-min division of the pool. With weights
	 * the member's value names its weight; without, the value is the
	 * weight. A member with no value, or one that names none, weighs
	 * default_weight. */
	enum kt_weight_by weight_by;
	char *weight_key;         /* the label key, or the capture's name */
	int weight_up;            /* KT_WEIGHT_CAPTURE: levels above a match */
	int weight_line;          /* where weightBy: is written, 0 = absent */
	struct kt_weight_value *weights; /* sorted by value (strcmp), unique */
	int n_weights;
	double default_weight;    /* KT_WEIGHT_MIN..KT_WEIGHT_MAX, default 1 */
	/* classBy, classes, defaultClass (share: demand): priority classes.
	 * A member's value names its class; without one, or naming none, it
	 * is of default_class (by default the last). */
	enum kt_weight_by class_by;
	char *class_key;          /* the label key, or the capture's name */
	int class_up;             /* KT_WEIGHT_CAPTURE: levels above a match */
	int class_line;           /* where classBy: is written, 0 = absent */
	struct kt_share_class classes[KT_CLASSES_MAX];
	int n_classes;            /* 0, or 2..KT_CLASSES_MAX */
	int default_class;
	/* weight (a limit with a parent whose share is demand): what this
	 * limit weighs in its parent's pool, all of its members together
	 * (KT_WEIGHT_MIN..KT_WEIGHT_MAX; 0: not set). child_weights: some
	 * child of this limit has one, so its pool is weighted. */
	double weight;
	int weight_at_line;       /* where weight: is written, 0 = absent */
	bool child_weights;
	/* floor (a child of a parent whose share is demand): the tokens/s of
	 * the parent's rate this limit's members can always use together,
	 * their demand permitting; its rateLimit.max is its ceiling there.
	 * As written floor_pct >= 0 is "N%" of the parent's max, resolved
	 * by kt_cfg_link_floors. Its parent's classes are then its children
	 * (class_by KT_WEIGHT_CHILD, classes_siblings), child_class this
	 * limit's among them (-1: none). */
	double floor;
	double floor_pct;
	int floor_at_line;        /* where floor: is written, 0 = absent */
	int child_class;
	bool classes_siblings;    /* classes share by weight above their floors, not in order */
	/* weightBy/classBy caller (unit request): the callers an application
	 * may name, kthrottle_open("LIMIT/CALLER"): the weights' values and
	 * the classes' names, once each, sorted (pointers into those). Each
	 * is a pool member of its own on every node, with its own kt_coop
	 * entry, as is the plain "LIMIT" (default weight and class). */
	const char **callers;
	int n_callers;
	int refuse_errno;         /* a refused connect()/sendmsg() fails with it; default EBUSY */
	/* maxDelay (unit call): a held call's connection ends (ETIMEDOUT)
	 * after waiting this long, ms; 0 = it waits until admitted */
	uint32_t max_delay_ms;
	double burst;             /* pool tokens, default max(1, rateLimit.max) */
	enum kt_share_policy share;
	struct kt_rate_limit_cfg rl;
	struct kt_store_cfg store; /* rateLimit.store, else the top-level store */
};

/* A tag limit (top-level `tags:`): a leaky bucket per throttling
 * tag, `burst` tokens refilled at `rate` per second, decided on each node and
 * kept global by exchanging hit counts through the top-level store every
 * `report_ns`. Source-address tags at XDP (`xdp:`) and application tags over
 * the query socket (`query:`); at least one of the two. */
#define KT_TAG_MAX_IFACES 8
#define KT_TAG_MAX_RULES 256      /* allow + overrides of one tag limit */
#define KT_TAG_MAX_TAGS (4u << 20) /* maxTags ceiling */
#define KT_TAG_DEFAULT_SOCKET "/run/kthrottle/query.sock"
/* The index in limits[] of l's parent, -1 when it has none (0-filled
 * configs, as tests build them, have none). */
static inline int kt_cfg_parent(const struct kt_limit_cfg *l)
{
	return l->parent - 1;
}

struct kt_tag_prefix {
	uint8_t family;     /* 4 or 6 */
	uint8_t prefix_len; /* 0..32 or 0..128 */
	uint8_t addr[16];   /* masked to prefix_len; IPv4 in addr[0..3] */
};
struct kt_tag_override {
	struct kt_tag_prefix prefix;
	double rate;        /* tokens per second, > 0 */
	uint64_t burst;     /* >= 1 */
	int line;
};
struct kt_tag_limit_cfg {
	char name[KT_NAME_LEN];   /* same alphabet as limit names, unique among tags */
	int line;
	double rate;              /* tokens per second, > 0 */
	uint64_t burst;           /* >= 1 */
	uint64_t idle_expiry_ns;  /* idleExpiry, default 5 min: a tag whose bucket has
				   * been full this long is forgotten */
	uint32_t max_tags;        /* maxTags, default 65536: least recently used beyond */
	uint64_t report_ns;       /* reportInterval, default 1 s */
	struct kt_tag_prefix allow[KT_TAG_MAX_RULES];
	int n_allow;
	struct kt_tag_override overrides[KT_TAG_MAX_RULES];
	int n_overrides;
	/* xdp: source-address tags on these interfaces */
	bool xdp;
	char ifaces[KT_TAG_MAX_IFACES][16]; /* IF_NAMESIZE */
	int n_ifaces;
	uint8_t prefix_v4;        /* xdp.prefixLen.ipv4, default 32 */
	uint8_t prefix_v6;        /* xdp.prefixLen.ipv6, default 128 */
	/* query: application tags over the line protocol */
	bool query;
	char *query_socket;       /* default KT_TAG_DEFAULT_SOCKET */
	char query_addr[48];      /* query.listen host (IP literal), default 127.0.0.1 */
	int query_port;           /* 0 = no TCP listener (the default) */
};

struct kt_config {
	char *file;               /* path as given */
	char *node_name;          /* default: $NODE_NAME if it fits the alphabet, else gethostname() */
	char *pin_dir;            /* default /sys/fs/bpf/kthrottle */
	/* attachRoot: where the programs are attached. KT_ATTACH_AUTO (absent
	 * or "auto", the default): once per hook at the deepest common
	 * ancestor of what the limits select, unless that is the cgroup v2
	 * root (then per member); KT_ATTACH_MEMBERS ("members"): on each
	 * outermost member cgroup; KT_ATTACH_PATH: once per hook at
	 * attach_root (an absolute path on the cgroup v2 mount; NULL in the
	 * other modes), for every member below it */
	enum kt_attach_mode { KT_ATTACH_AUTO = 0, KT_ATTACH_MEMBERS, KT_ATTACH_PATH } attach_mode;
	char *attach_root;
	int attach_root_line;
	char *socket_path;        /* default /run/kthrottle/kthrottled.sock */
	/* metrics: "ADDR:PORT" (IPv6 as [ADDR]:PORT) of the Prometheus text
	 * endpoint; metrics_port 0 = off (the default) */
	char metrics_addr[48];    /* the IP literal, brackets removed */
	int metrics_port;
	uint64_t tick_ns;         /* tickInterval, default 100 ms */
	uint64_t epoch_ns;        /* epoch, default 1 s */
	struct kt_store_cfg store; /* top-level default store */
	struct kt_kube_cfg kube;
	struct kt_limit_cfg *limits;
	int n_limits;             /* >= 1, or 0 when there are tag limits */
	struct kt_tag_limit_cfg *tags;
	int n_tags;
	/* An expanded config (members/groups.h): the parsed config it was
	 * made from, which owns everything but `limits` and the instances'
	 * own fields and must outlive it (kt_config_free frees only those);
	 * NULL for a parsed one. */
	const struct kt_config *source;
};

/* Parse and validate. On error returns -EINVAL (or -errno for I/O), fills err
 * with one line "FILE:LINE: FIELD: what is wrong", and leaves cfg zeroed. */
/* A password file as passwordFile reads it (the volume rule, 64 KiB, one
 * trailing newline dropped, not empty, no NUL): 0 and a malloc'd *out, or
 * -errno and why (no path in it). */
int kt_config_read_secret(const char *path, char **out, char *why, size_t whylen);
int kt_config_load(const char *path, struct kt_config *cfg, char *err, size_t errlen);
/* Largest config file read (larger: -EFBIG): 10,000 limits take about 2 MB. */
#define KT_CONFIG_MAX_BYTES (8 << 20)
#define KT_CONFIG_DIGEST_LEN 32
/* What a content is, for telling a changed file (cfgwatch.h): the SHA-256
 * of the bytes read, or, when read_err (a negative errno) says they could
 * not be read, of a marker naming that errno (a file gone is a state too). */
void kt_config_digest(const char *buf, size_t len, int read_err,
		      unsigned char out[KT_CONFIG_DIGEST_LEN]);
/* The digest of the file at path now, read as kt_config_load reads it. */
void kt_config_file_digest(const char *path, unsigned char out[KT_CONFIG_DIGEST_LEN]);
/* kt_config_load, and the digest of exactly what it read (or failed to). */
int kt_config_load_digest(const char *path, struct kt_config *cfg,
			  unsigned char digest[KT_CONFIG_DIGEST_LEN], char *err, size_t errlen);
/* Same, from a string (for tests); `name` stands in for the file name. */
int kt_config_parse(const char *name, const char *yaml, size_t len, struct kt_config *cfg,
		    char *err, size_t errlen);
/* What the parser takes from its surroundings: a variable of the
 * environment (NULL when unset: NODE_NAME, passwordEnv's) and this host's
 * name (0, or -errno), each given `arg`. kt_config_parse and kt_config_load
 * use the process's own (getenv, gethostname); tests can give others. */
struct kt_config_env {
	const char *(*getenv)(const char *name, void *arg);
	int (*hostname)(char *buf, size_t len, void *arg);
	void *arg;
};
/* kt_config_parse in the environment env. */
int kt_config_parse_env(const char *name, const char *yaml, size_t len,
			const struct kt_config_env *env, struct kt_config *cfg, char *err,
			size_t errlen);
void kt_config_free(struct kt_config *cfg);
/* Frees what a pods: selector holds (a config's, or a copy of one), and
 * empties it. */
void kt_pod_selector_free(struct kt_pod_selector *s);

/* "1s", "100ms", "1m30s", "250us", "5ns", "2h"; a bare number means seconds. */
int kt_parse_duration(const char *s, uint64_t *out_ns);

const char *kt_unit_name(enum kt_unit u);
const char *kt_mode_name(enum kt_mode m);
const char *kt_scope_name(enum kt_scope s);
const char *kt_share_name(enum kt_share_policy s);
const char *kt_store_failure_name(enum kt_store_failure f);
const char *kt_store_kind_name(enum kt_store_kind k); /* "local", "static", "redis" */
const char *kt_label_op_name(enum kt_label_op op);    /* "In", "NotIn", ... */
/* A DNS subdomain of n bytes (node names, label key prefixes) or, with
 * `label`, a DNS label (namespaces), as Kubernetes checks them: lower-case
 * alphanumerics and '-' (and '.' between the labels of a subdomain), each
 * label starting and ending alphanumeric. */
bool kt_dns_name_ok(const char *s, size_t n, bool label);
const char *kt_group_by_name(enum kt_group_by g); /* "namespace", "label", "parent" */
/* True when some limit selects pods (the daemon then watches Kubernetes). */
bool kt_config_uses_pods(const struct kt_config *cfg);

#endif
