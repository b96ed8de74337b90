// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* kthrottled configuration: YAML (libyaml document API) walked against a
 * fixed schema. This file: reading the file, the YAML stream's checks, the
 * top level (node, paths, metrics, kubernetes, timing) and the entry points
 * (parse, load, digest, free). The walker's helpers are config_yaml.c; the
 * sections config_store.c, config_limits.c, config_pods.c, config_tags.c;
 * the network values netparse.c. Each error is one line naming file, line
 * and field path. */
#include <errno.h>
#include <search.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>
#include <yaml.h>
#include <openssl/evp.h>

#include "base/config_int.h"
#include "base/volfile.h"

#define MAX_FILE_BYTES KT_CONFIG_MAX_BYTES /* refuse anything huge */
#define MAX_DEPTH 64               /* real configs nest 8 deep */
#define MAX_ANCHORS 256            /* libyaml looks each alias up in a list of them */
#define KT_XSTR(x) #x
#define KT_STR(x) KT_XSTR(x)

static void no_free(void *p)
{
	(void)p;
}

/* ---- files ------------------------------------------------------------ */

/* Reads a whole config or secret file of at most `cap` bytes under the
 * volume rule (volfile.h: the kubelet's symlinks are followed, nothing else
 * is); `what` names the cap in the message. */
int kt_cfg_read_capped(const char *path, size_t cap, const char *what, char **out, size_t *outlen,
		       const char **stage, char *why, size_t whylen)
{
	int ret = kt_volfile_read(path, cap, out, outlen, stage, why, whylen);

	/* why is written only on a failure */
	if (ret == -EFBIG) {
		size_t n = strnlen(why, whylen);

		if (n < whylen)
			snprintf(why + n, whylen - n, " (the limit for %s)", what);
	}
	return ret;
}

/* ---- top level -------------------------------------------------------- */

/* metrics: "127.0.0.1:9464" or "[::1]:9464". */
static int parse_metrics(struct ctx *c, yaml_node_t *v, struct kt_config *cfg)
{
	return kt_cfg_get_addr_port(c, v, "metrics", "127.0.0.1:9464, [::1]:9464", false,
				    cfg->metrics_addr, sizeof(cfg->metrics_addr), &cfg->metrics_port);
}

/* kubernetes: {apiServer, tokenFile, caFile, nodeName, cgroupRoot}: each
 * optional (in-cluster defaults apply at start). */
static int parse_kube(struct ctx *c, yaml_node_t *n, struct kt_kube_cfg *k)
{
	static const char *const keys[] = { "apiServer", "tokenFile", "caFile", "nodeName",
					    "cgroupRoot", NULL };
	yaml_node_t *v;
	int err = kt_cfg_check_map(c, n, "kubernetes", keys);

	if (err)
		return err;
	k->line = line_of(n);
	if ((v = map_get(c, n, "apiServer"))) {
		if ((err = kt_cfg_get_str(c, v, "kubernetes.apiServer", 512, &k->api_server)))
			return err;
		/* the token is a credential: never sent in clear */
		if (strncmp(k->api_server, "https://", 8) || !k->api_server[8])
			return fail(c, v, "kubernetes.apiServer", "\"%s\" is not an https:// URL",
				    show_str(k->api_server).s);
	}
	if ((v = map_get(c, n, "tokenFile")) &&
	    (err = kt_cfg_get_abs_path(c, v, "kubernetes.tokenFile", MAX_PATH_BYTES, &k->token_file)))
		return err;
	if ((v = map_get(c, n, "caFile")) &&
	    (err = kt_cfg_get_abs_path(c, v, "kubernetes.caFile", MAX_PATH_BYTES, &k->ca_file)))
		return err;
	if ((v = map_get(c, n, "nodeName"))) {
		if ((err = kt_cfg_get_str(c, v, "kubernetes.nodeName", 253, &k->node_name)))
			return err;
		if (!kt_dns_name_ok(k->node_name, strlen(k->node_name), false))
			return fail(c, v, "kubernetes.nodeName", "\"%s\" is not a node name",
				    show_str(k->node_name).s);
	}
	if ((v = map_get(c, n, "cgroupRoot"))) {
		if ((err = kt_cfg_get_str(c, v, "kubernetes.cgroupRoot", MAX_PATH_BYTES, &k->cgroup_root)))
			return err;
		if (kt_cfg_has_dotdot(k->cgroup_root))
			return fail(c, v, "kubernetes.cgroupRoot", "\"%s\" must not contain '..'",
				    show_str(k->cgroup_root).s);
	}
	return 0;
}

static int parse_root(struct ctx *c, yaml_node_t *root, struct kt_config *cfg)
{
	struct sockaddr_un sun;
	yaml_node_t *v, *tick, *limits, *tags;
	yaml_node_item_t *it;
	char sub[FIELD_LEN];
	const char *env;
	int i, n_tags = 0, err;

	if (!root || is_null(root))
		return fail(c, root, "limits", "required but missing (the file is empty)");
	if (root->type != YAML_MAPPING_NODE)
		return fail(c, root, "config", "expected a mapping at the top, got %s", kind_of(root));
	if ((err = kt_cfg_check_map(c, root, "", kt_cfg_keys_root)))
		return err;

	if ((v = map_get(c, root, "node"))) {
		/* the node name goes into store keys: keep it to a safe alphabet */
		if ((err = kt_cfg_get_str(c, v, "node", 63, &cfg->node_name)))
			return err;
		if (strspn(cfg->node_name, NAME_CHARS) != strlen(cfg->node_name))
			return fail(c, v, "node", "\"%s\" may only hold A-Z a-z 0-9 _ . -",
				    show_str(cfg->node_name).s);
	} else if ((env = cfg_getenv(c, "NODE_NAME")) && *env && strlen(env) <= 63 &&
		   strspn(env, NAME_CHARS) == strlen(env)) {
		/* in a pod the host name is the pod's, new at every rollout: the
		 * node's name (downward API) keeps the member ids in the store */
		if (!(cfg->node_name = strdup(env)))
			return oom(c, root, "node");
	} else {
		char host[256] = "";
		int r = c->env->hostname(host, sizeof(host) - 1, c->env->arg);

		if (r < 0 || !host[0])
			return kt_cfg_fail_code(c, r < 0 ? r : errno ? -errno : -EINVAL, root, "node",
						"not given and gethostname() failed");
		cfg->node_name = strdup(host);
		if (!cfg->node_name)
			return oom(c, root, "node");
	}
	if ((v = map_get(c, root, "pinDir")))
		err = kt_cfg_get_abs_path(c, v, "pinDir", MAX_PATH_BYTES, &cfg->pin_dir);
	else if (!(cfg->pin_dir = strdup("/sys/fs/bpf/kthrottle")))
		err = oom(c, root, "pinDir");
	if (err)
		return err;
	/* the cgroup itself is resolved with the members (apply.c): it must
	 * exist when the config is checked, started or reloaded */
	if ((v = map_get(c, root, "attachRoot"))) {
		if ((err = kt_cfg_get_str(c, v, "attachRoot", MAX_PATH_BYTES, &cfg->attach_root)))
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
		err = kt_cfg_get_abs_path(c, v, "socket", sizeof(sun.sun_path) - 1, &cfg->socket_path);
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
	    (err = kt_cfg_get_duration(c, tick, "tickInterval", NS_PER_MS, 10 * NS_PER_SEC, &cfg->tick_ns)))
		return err;
	if ((v = map_get(c, root, "epoch")) &&
	    (err = kt_cfg_get_duration(c, v, "epoch", 1, UINT64_MAX, &cfg->epoch_ns)))
		return err;
	if (cfg->epoch_ns < cfg->tick_ns)
		return fail(c, v ? v : tick, v ? "epoch" : "tickInterval",
			    "epoch (%s) must not be shorter than tickInterval (%s)",
			    kt_cfg_fmt_dur(cfg->epoch_ns).s, kt_cfg_fmt_dur(cfg->tick_ns).s);
	/* the daemon keeps one epoch of per-tick samples (KT_EPOCH_TICKS_MAX) */
	if (cfg->epoch_ns / cfg->tick_ns > KT_EPOCH_TICKS_MAX)
		return fail(c, v ? v : tick, v ? "epoch" : "tickInterval",
			    "epoch (%s) spans more than %d ticks of %s",
			    kt_cfg_fmt_dur(cfg->epoch_ns).s, KT_EPOCH_TICKS_MAX, kt_cfg_fmt_dur(cfg->tick_ns).s);

	if (kt_cfg_store_defaults(&cfg->store))
		return oom(c, root, "store");
	if ((v = map_get(c, root, "store")) && (err = kt_cfg_parse_store(c, v, "store", &cfg->store)))
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
		return kt_cfg_missing(c, root, "", "limits");
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
			if ((err = kt_cfg_parse_limit(c, node_at(c, *it), index_of(sub, "limits", i), cfg, i)))
				return err;
		if ((err = kt_cfg_link_parents(c, limits, cfg)) || (err = kt_cfg_link_floors(c, limits, cfg)))
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
		if ((err = kt_cfg_parse_tag(c, node_at(c, *it), index_of(sub, "tags", i), cfg, i,
					    v ? line_of(v) : 0)))
			return err;
	return 0;
}

static int yaml_error(struct ctx *c, yaml_parser_t *p, const char *text, size_t len)
{
	int line;

	if (p->error == YAML_MEMORY_ERROR)
		return kt_cfg_fail_code(c, -ENOMEM, NULL, "yaml", "out of memory");
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
		return kt_cfg_fail_code(c, -ENOMEM, NULL, "yaml", "out of memory");
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

static const char *real_getenv(const char *name, void *arg)
{
	(void)arg;
	return getenv(name);
}

static int real_hostname(char *buf, size_t len, void *arg)
{
	(void)arg;
	return gethostname(buf, len) < 0 ? -errno : 0;
}

static const struct kt_config_env real_env = { real_getenv, real_hostname, NULL };

int kt_config_parse(const char *name, const char *yaml, size_t len, struct kt_config *cfg,
		    char *err, size_t errlen)
{
	return kt_config_parse_env(name, yaml, len, &real_env, cfg, err, errlen);
}

int kt_config_parse_env(const char *name, const char *yaml, size_t len,
			const struct kt_config_env *env, struct kt_config *cfg, char *err,
			size_t errlen)
{
	struct ctx c = { .file = name, .env = env, .err = err, .errlen = errlen };
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
		return kt_cfg_fail_code(&c, -ENOMEM, NULL, "yaml", "out of memory");
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
	tdestroy(c.tag_names, no_free);
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
	int ret = kt_cfg_read_capped(path, MAX_FILE_BYTES, "config files", &buf, &len, &stage, why,
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
	const char *stage = "read";
	char why[128] = "", *buf = NULL;
	size_t len = 0;
	int ret;

	memset(cfg, 0, sizeof(*cfg));
	ret = kt_cfg_read_capped(path, MAX_FILE_BYTES, "config files", &buf, &len, &stage, why,
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
	int i;

	if (!cfg)
		return;
	if (cfg->source) { /* an expanded config owns its limits and groups only */
		for (i = 0; cfg->limits && i < cfg->n_limits; i++) {
			free(cfg->limits[i].group_value);
			if (cfg->limits[i].group_other)
				free((void *)cfg->limits[i].group_known);
		}
		free(cfg->limits);
		memset(cfg, 0, sizeof(*cfg));
		return;
	}
	for (i = 0; cfg->limits && i < cfg->n_limits; i++) {
		kt_cfg_limit_free(&cfg->limits[i]);
	}
	free(cfg->limits);
	for (i = 0; cfg->tags && i < cfg->n_tags; i++)
		free(cfg->tags[i].query_socket);
	free(cfg->tags);
	kt_cfg_store_free(&cfg->store);
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
