// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* kthrottled started exactly as deploy/kubernetes/daemonset.yaml starts it,
 * on the config of deploy/kubernetes/configmap.yaml, in the layout a pod
 * gets. Both manifests are read here, not restated, so if they and this
 * test drift apart the test fails:
 *   - the container's command line (the image's /usr/sbin and /usr/bin
 *     mapped to the build dir);
 *   - only the env the manifest gives (fieldRef spec.nodeName resolved),
 *     plus the KUBERNETES_SERVICE_* env every pod gets;
 *   - every volumeMount at its mountPath, in a private mount namespace: the
 *     ConfigMap volume and the automounted service account laid out as the
 *     kubelet lays them out (tests/lib/kvol.h) behind read-only binds, the
 *     emptyDir a tmpfs, the host's bpffs a fresh bpffs, the host's cgroup2
 *     the real one; a volume of another kind fails the test;
 *   - the config as shipped, but for `kubernetes: {}` getting the test's
 *     cgroupRoot (the pods' cgroups are made under a test cgroup);
 *   - the network a pod has: a network namespace of the test's own, where
 *     the Service names the config uses resolve (a bind over /etc/hosts) to
 *     loopback: a real redis-server on the config's port, the fake API
 *     server (tests/tools/kt-fakekube) at KUBERNETES_SERVICE_HOST/PORT.
 * Asserted: the readiness and liveness probes of the manifest pass once the
 * pods are listed; a pod the config's selector picks is attached and its
 * new connections are held to the ramp's rate (counted as they complete at
 * a loopback listener, refusals as EBUSY), a pod it does not pick is not
 * throttled, and the node's member is in Redis; an edit of the ConfigMap
 * (the kubelet's ..data swap) applies by itself. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <cmocka.h>
#include <yaml.h>

#include "fakekube.h"
#include "ktest.h"
#include "kvol.h"
#include "redis_proc.h"

#define NODE "node-a"
#define TOKEN "pod-token-1"
#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"
#define MAX_ITEMS 16
#define LOAD_S 3.0

static const char *const CRAWLER_UID = "aaaaaaaa-1111-4222-8333-000000000001";
static const char *const INDEXER_UID = "aaaaaaaa-1111-4222-8333-000000000002";

/* ---- the manifests ---------------------------------------------------------- */

struct mount_spec {
	char name[64], path[PATH_MAX];
	bool read_only;
};

struct manifest {
	char *argv[MAX_ITEMS];       /* the container's command */
	char *env[MAX_ITEMS];        /* NAME=VALUE, fieldRefs resolved */
	char *ready[MAX_ITEMS], *live[MAX_ITEMS]; /* the probes' commands */
	struct mount_spec mounts[MAX_ITEMS];
	int n_mounts;
	yaml_document_t ds;          /* the DaemonSet, for the volumes */
	char *config;                /* configmap.yaml's kthrottled.yaml */
	char config_key[64], config_map[64];
};

static yaml_node_t *ykey(yaml_document_t *d, yaml_node_t *n, const char *key)
{
	if (!n || n->type != YAML_MAPPING_NODE)
		return NULL;
	for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
		yaml_node_t *k = yaml_document_get_node(d, p->key);

		if (k && k->type == YAML_SCALAR_NODE && !strcmp((char *)k->data.scalar.value, key))
			return yaml_document_get_node(d, p->value);
	}
	return NULL;
}

/* "a.b.0.c": mapping keys and sequence indexes */
static yaml_node_t *ypath(yaml_document_t *d, yaml_node_t *n, const char *path)
{
	char buf[256], *save = NULL;

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *s = strtok_r(buf, ".", &save); s && n; s = strtok_r(NULL, ".", &save)) {
		if (n->type == YAML_SEQUENCE_NODE) {
			int i = atoi(s), len = (int)(n->data.sequence.items.top -
						     n->data.sequence.items.start);

			n = i < len ? yaml_document_get_node(d, n->data.sequence.items.start[i]) : NULL;
		} else {
			n = ykey(d, n, s);
		}
	}
	return n;
}

static const char *yscalar(yaml_node_t *n)
{
	return n && n->type == YAML_SCALAR_NODE ? (char *)n->data.scalar.value : NULL;
}

static int ylen(yaml_node_t *n)
{
	return n && n->type == YAML_SEQUENCE_NODE ?
		       (int)(n->data.sequence.items.top - n->data.sequence.items.start) : 0;
}

static int load_yaml(const char *path, yaml_document_t *doc)
{
	yaml_parser_t p;
	FILE *f = fopen(path, "r");
	int ok;

	if (!f)
		return -1;
	yaml_parser_initialize(&p);
	yaml_parser_set_input_file(&p, f);
	ok = yaml_parser_load(&p, doc);
	yaml_parser_delete(&p);
	fclose(f);
	return ok && yaml_document_get_root_node(doc) ? 0 : -1;
}

static void strings_of(yaml_document_t *d, yaml_node_t *seq, char **out)
{
	int n = ylen(seq);

	assert_true(n > 0 && n < MAX_ITEMS);
	for (int i = 0; i < n; i++) {
		char idx[8];

		snprintf(idx, sizeof(idx), "%d", i);
		assert_non_null(yscalar(ypath(d, seq, idx)));
		out[i] = strdup(yscalar(ypath(d, seq, idx)));
	}
	out[n] = NULL;
}

static const char *repo_file(const char *rel, char *out, size_t len)
{
	/* <repo>/build/... : the manifests are next to the build dir */
	snprintf(out, len, "%s/../%s", ktest_build_dir(), rel);
	return out;
}

static void read_manifests(struct manifest *m)
{
	yaml_document_t cm;
	yaml_node_t *ctr, *env, *mounts;
	char path[PATH_MAX];
	int n;

	memset(m, 0, sizeof(*m));
	assert_int_equal(load_yaml(repo_file("deploy/kubernetes/daemonset.yaml", path, sizeof(path)),
				   &m->ds), 0);
	ctr = ypath(&m->ds, yaml_document_get_root_node(&m->ds), "spec.template.spec.containers.0");
	assert_non_null(ctr);
	strings_of(&m->ds, ykey(&m->ds, ctr, "command"), m->argv);
	strings_of(&m->ds, ypath(&m->ds, ctr, "readinessProbe.exec.command"), m->ready);
	strings_of(&m->ds, ypath(&m->ds, ctr, "livenessProbe.exec.command"), m->live);
	env = ykey(&m->ds, ctr, "env");
	n = ylen(env);
	assert_true(n < MAX_ITEMS - 4);
	for (int i = 0; i < n; i++) {
		char idx[8], *kv = NULL;
		yaml_node_t *e;
		const char *name, *val, *ref;

		snprintf(idx, sizeof(idx), "%d", i);
		e = ypath(&m->ds, env, idx);
		name = yscalar(ykey(&m->ds, e, "name"));
		val = yscalar(ykey(&m->ds, e, "value"));
		ref = yscalar(ypath(&m->ds, e, "valueFrom.fieldRef.fieldPath"));
		assert_non_null(name);
		/* a pod resolves the fieldRefs it is given; this test knows one */
		if (ref)
			assert_string_equal(ref, "spec.nodeName");
		assert_true(val || ref);
		assert_true(asprintf(&kv, "%s=%s", name, val ? val : NODE) > 0);
		m->env[i] = kv;
	}
	mounts = ykey(&m->ds, ctr, "volumeMounts");
	m->n_mounts = ylen(mounts);
	assert_true(m->n_mounts > 0 && m->n_mounts < MAX_ITEMS);
	for (int i = 0; i < m->n_mounts; i++) {
		char idx[8];
		yaml_node_t *v;

		snprintf(idx, sizeof(idx), "%d", i);
		v = ypath(&m->ds, mounts, idx);
		assert_non_null(yscalar(ykey(&m->ds, v, "name")));
		assert_non_null(yscalar(ykey(&m->ds, v, "mountPath")));
		snprintf(m->mounts[i].name, sizeof(m->mounts[i].name), "%s",
			 yscalar(ykey(&m->ds, v, "name")));
		snprintf(m->mounts[i].path, sizeof(m->mounts[i].path), "%s",
			 yscalar(ykey(&m->ds, v, "mountPath")));
		m->mounts[i].read_only = yscalar(ykey(&m->ds, v, "readOnly")) &&
					 !strcmp(yscalar(ykey(&m->ds, v, "readOnly")), "true");
	}

	/* the ConfigMap: the one data key is the file the command names */
	assert_int_equal(load_yaml(repo_file("deploy/kubernetes/configmap.yaml", path, sizeof(path)),
				   &cm), 0);
	{
		yaml_node_t *root = yaml_document_get_root_node(&cm), *data = ykey(&cm, root, "data");
		yaml_node_pair_t *p;

		assert_non_null(data);
		assert_int_equal(data->data.mapping.pairs.top - data->data.mapping.pairs.start, 1);
		p = data->data.mapping.pairs.start;
		snprintf(m->config_key, sizeof(m->config_key), "%s",
			 yscalar(yaml_document_get_node(&cm, p->key)));
		m->config = strdup(yscalar(yaml_document_get_node(&cm, p->value)));
		snprintf(m->config_map, sizeof(m->config_map), "%s",
			 yscalar(ypath(&cm, root, "metadata.name")));
	}
	yaml_document_delete(&cm);
}

static void free_manifest(struct manifest *m)
{
	for (char **v = m->argv; *v; v++)
		free(*v);
	for (char **v = m->env; *v; v++)
		free(*v);
	for (char **v = m->ready; *v; v++)
		free(*v);
	for (char **v = m->live; *v; v++)
		free(*v);
	free(m->config);
	yaml_document_delete(&m->ds);
}

/* The DaemonSet's volume named `name`. */
static yaml_node_t *volume(struct manifest *m, const char *name)
{
	yaml_node_t *vols = ypath(&m->ds, yaml_document_get_root_node(&m->ds),
				  "spec.template.spec.volumes");

	for (int i = 0; i < ylen(vols); i++) {
		char idx[8];
		yaml_node_t *v;

		snprintf(idx, sizeof(idx), "%d", i);
		v = ypath(&m->ds, vols, idx);
		if (yscalar(ykey(&m->ds, v, "name")) && !strcmp(yscalar(ykey(&m->ds, v, "name")), name))
			return v;
	}
	return NULL;
}

/* ---- the pod ------------------------------------------------------------------- */

static struct fixture {
	struct manifest m;
	char tmp[PATH_MAX];
	char cgroot[PATH_MAX];          /* the test's cgroup: the kubelet's cgroup root */
	char crawler[PATH_MAX], indexer[PATH_MAX];
	char made[MAX_ITEMS][PATH_MAX]; /* mount points made on the host, to remove */
	int n_made;
	char mounted[MAX_ITEMS][PATH_MAX];
	int n_mounted;
	struct ktest_kvol config, sa;
	struct ktest_fakekube api;
	struct rp_proc redis;
	char redis_host[128];
	int redis_port, limit_port;
	pid_t daemon;
	bool stopped;                   /* by the test: --cleanup still due */
	char log[PATH_MAX];
	int listen_fd;
	pthread_t acceptor;
	bool accepting;
	char socket_path[PATH_MAX];
} fx;

static void mkdirs(const char *path)
{
	char p[PATH_MAX];

	snprintf(p, sizeof(p), "%s", path);
	for (char *s = p + 1;; s++) {
		bool end = !*s;

		if (*s == '/' || end) {
			*s = '\0';
			if (mkdir(p, 0755) == 0 && fx.n_made < MAX_ITEMS)
				snprintf(fx.made[fx.n_made++], PATH_MAX, "%s", p);
			if (end)
				break;
			*s = '/';
		}
	}
}

/* How many mounts the table `file` lists at `path`. */
static int mounts_at(const char *file, const char *path)
{
	char line[1024], dev[256], at[PATH_MAX];
	FILE *f = fopen(file, "r");
	int n = 0;

	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		n += sscanf(line, "%255s %4095s", dev, at) == 2 && !strcmp(at, path);
	fclose(f);
	return n;
}

static void note_mount(const char *path)
{
	assert_true(fx.n_mounted < MAX_ITEMS);
	snprintf(fx.mounted[fx.n_mounted++], PATH_MAX, "%s", path);
}

static void bind_ro(const char *src, const char *dst)
{
	mkdirs(dst);
	assert_int_equal(mount(src, dst, NULL, MS_BIND, NULL), 0);
	note_mount(dst);
	assert_int_equal(mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL), 0);
}

static void lo_up(void)
{
	struct ifreq ifr = { 0 };
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	assert_true(s >= 0);
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	assert_int_equal(ioctl(s, SIOCGIFFLAGS, &ifr), 0);
	ifr.ifr_flags |= IFF_UP;
	assert_int_equal(ioctl(s, SIOCSIFFLAGS, &ifr), 0);
	close(s);
}

/* The config as shipped, cgroupRoot aside; and where its Redis is. */
static char *pod_config(void)
{
	const char *root = strrchr(fx.cgroot, '/') + 1; /* ktest cgroups sit at the top */
	const char *at = strstr(fx.m.config, "\nkubernetes: {}\n"), *url;
	char *out = NULL;

	assert_non_null(at); /* the manifest's defaults, no overrides */
	assert_null(strstr(at + 1, "\nkubernetes:"));
	assert_true(asprintf(&out, "%.*s\nkubernetes: {cgroupRoot: %s}\n%s", (int)(at - fx.m.config),
			     fx.m.config, root, at + strlen("\nkubernetes: {}\n")) > 0);
	url = strstr(fx.m.config, "url: redis://");
	assert_non_null(url);
	assert_int_equal(sscanf(url, "url: redis://%127[^:/\n]:%d", fx.redis_host, &fx.redis_port), 2);
	{
		const char *ports = strstr(fx.m.config, "ports: ");

		assert_non_null(ports);
		fx.limit_port = atoi(ports + 7);
		assert_true(fx.limit_port > 0);
	}
	return out;
}

/* Each volumeMount of the container, made as the kubelet makes it. */
static void mount_volumes(const char *config)
{
	for (int i = 0; i < fx.m.n_mounts; i++) {
		const struct mount_spec *ms = &fx.m.mounts[i];
		yaml_node_t *v = volume(&fx.m, ms->name);
		const char *host = yscalar(ypath(&fx.m.ds, v, "hostPath.path"));
		const char *cm = yscalar(ypath(&fx.m.ds, v, "configMap.name"));

		assert_non_null(v);
		if (cm) {
			const struct ktest_kvol_file f[] = { { fx.m.config_key, config } };

			assert_string_equal(cm, fx.m.config_map);
			assert_true(ms->read_only);
			assert_int_equal(ktest_kvol_create(&fx.config, fx.tmp, "config",
							   KTEST_KVOL_CONFIGMAP), 0);
			assert_int_equal(ktest_kvol_publish(&fx.config, f, 1), 0);
			bind_ro(fx.config.pod, ms->path);
		} else if (ykey(&fx.m.ds, v, "emptyDir")) {
			mkdirs(ms->path);
			assert_int_equal(mount("tmpfs", ms->path, "tmpfs", 0, "mode=0755,size=1m"), 0);
			note_mount(ms->path);
		} else if (host && !strcmp(host, "/sys/fs/bpf")) {
			/* the host's bpffs: a fresh one, gone with the test
			 * (its mount namespace: the host's mounts stay as
			 * they were, init's view says) */
			int host_before = mounts_at("/proc/1/mounts", ms->path);

			assert_int_equal(mount("bpffs", ms->path, "bpf", 0, "mode=0700"), 0);
			note_mount(ms->path);
			assert_int_equal(mounts_at("/proc/1/mounts", ms->path), host_before);
			assert_int_equal(mounts_at("/proc/self/mounts", ms->path), host_before + 1);
		} else if (host && !strcmp(host, "/sys/fs/cgroup")) {
			/* the host's own; the daemon finds cgroup2 in /proc/mounts */
		} else {
			fail_msg("volume %s: a kind this test does not lay out", ms->name);
		}
	}
	/* the service account every pod gets */
	{
		char ca[PATH_MAX + 16];
		char *pem;
		const struct ktest_kvol_file f[3] = { { "ca.crt", NULL }, { "namespace", "kthrottle" },
						      { "token", TOKEN "\n" } };
		struct ktest_kvol_file files[3];

		snprintf(ca, sizeof(ca), "%s/ca.pem", fx.tmp);
		pem = ktest_slurp(ca);
		assert_true(strlen(pem) > 0);
		memcpy(files, f, sizeof(f));
		files[0].content = pem;
		assert_int_equal(ktest_kvol_create(&fx.sa, fx.tmp, "serviceaccount", KTEST_KVOL_SECRET),
				 0);
		assert_int_equal(ktest_kvol_publish(&fx.sa, files, 3), 0);
		free(pem);
		bind_ro(fx.sa.pod, SA_DIR);
	}
	/* the cluster's names of the Services the config uses */
	{
		char hosts[PATH_MAX + 16], body[256];

		snprintf(hosts, sizeof(hosts), "%s/hosts", fx.tmp);
		snprintf(body, sizeof(body), "127.0.0.1 localhost %s\n::1 localhost\n", fx.redis_host);
		assert_int_equal(ktest_write_file(hosts, body), 0);
		bind_ro(hosts, "/etc/hosts");
	}
}

static void *accept_loop(void *arg)
{
	(void)arg;
	while (fx.accepting) {
		int c = accept(fx.listen_fd, NULL, NULL);

		if (c >= 0)
			close(c);
	}
	return NULL;
}

static void listen_on_limit_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(fx.limit_port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int one = 1;

	fx.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fx.listen_fd >= 0);
	setsockopt(fx.listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	assert_int_equal(bind(fx.listen_fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fx.listen_fd, 1024), 0);
	fx.accepting = true;
	assert_int_equal(pthread_create(&fx.acceptor, NULL, accept_loop, NULL), 0);
}

/* The image's programs are the build's. */
static void map_prog(char **argv)
{
	const char *base = strrchr(argv[0], '/');
	char *p = NULL;

	assert_non_null(base);
	assert_true(!strcmp(base, "/kthrottled") || !strcmp(base, "/kthrottlectl"));
	assert_true(asprintf(&p, "%s%s", ktest_build_dir(), base) > 0);
	free(argv[0]);
	argv[0] = p;
}

static void start_daemon(void)
{
	char *envp[MAX_ITEMS + 8];
	int n = 0, fd;

	for (char **e = fx.m.env; *e; e++)
		envp[n++] = *e;
	/* what every pod gets for the API server's Service */
	assert_true(asprintf(&envp[n++], "KUBERNETES_SERVICE_HOST=127.0.0.1") > 0);
	assert_true(asprintf(&envp[n++], "KUBERNETES_SERVICE_PORT=%d", fx.api.port) > 0);
	assert_true(asprintf(&envp[n++], "KUBERNETES_SERVICE_PORT_HTTPS=%d", fx.api.port) > 0);
	assert_true(asprintf(&envp[n++], "KUBERNETES_PORT=tcp://127.0.0.1:%d", fx.api.port) > 0);
	envp[n] = NULL;
	snprintf(fx.log, sizeof(fx.log), "%s/kthrottled.log", fx.tmp);
	fflush(NULL);
	fx.daemon = fork();
	assert_true(fx.daemon >= 0);
	if (fx.daemon == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		fd = open(fx.log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execve(fx.m.argv[0], fx.m.argv, envp);
		_exit(127);
	}
	for (int i = n - 4; i < n; i++)
		free(envp[i]);
}

static int probe(char **cmd)
{
	char *out = NULL;
	int rc = ktest_run_capture(cmd, &out);

	print_message("probe -> %d: %s", rc, out ? out : "");
	free(out);
	return rc;
}

static int setup(void **state)
{
	(void)state;
	memset(&fx, 0, sizeof(fx));
	fx.daemon = -1;
	fx.listen_fd = -1;
	fx.api.pid = -1;
	if (ktest_root_unavailable())
		return 0;
	/* the pod's network: loopback only, and its own; its mounts its own too
	 * (the bpffs laid out at /sys/fs/bpf must not stay on the host's) */
	if (unshare(CLONE_NEWNET) || ktest_private_mounts())
		return -1;
	lo_up();
	if (ktest_tmpdir(fx.tmp, sizeof(fx.tmp)) || ktest_cgroup_create("deploy", fx.cgroot,
								       sizeof(fx.cgroot)))
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (fx.daemon > 0 || fx.stopped) {
		int st;

		if (fx.daemon > 0) {
			kill(fx.daemon, SIGTERM);
			for (int i = 0; i < 150 && waitpid(fx.daemon, &st, WNOHANG) == 0; i++)
				ktest_sleep_ms(20);
			kill(fx.daemon, SIGKILL);
			waitpid(fx.daemon, &st, 0);
		}
		/* the programs stay attached on SIGTERM (by design): detach */
		if (fx.m.argv[0]) {
			char *argv[] = { fx.m.argv[0], "--cleanup", "--config", fx.m.argv[2], NULL };
			char *out = NULL;

			ktest_run_capture(argv, &out);
			free(out);
		}
	}
	if (fx.accepting) {
		fx.accepting = false;
		shutdown(fx.listen_fd, SHUT_RDWR);
		pthread_join(fx.acceptor, NULL);
	}
	if (fx.listen_fd >= 0)
		close(fx.listen_fd);
	ktest_fakekube_stop(&fx.api);
	rp_stop(&fx.redis);
	for (int i = fx.n_mounted - 1; i >= 0; i--)
		umount2(fx.mounted[i], MNT_DETACH);
	ktest_kvol_remove(&fx.sa);
	ktest_kvol_remove(&fx.config);
	for (int i = fx.n_made - 1; i >= 0; i--)
		rmdir(fx.made[i]);
	if (fx.crawler[0])
		ktest_cgroup_destroy(fx.crawler);
	if (fx.indexer[0])
		ktest_cgroup_destroy(fx.indexer);
	if (fx.cgroot[0]) {
		char p[PATH_MAX + 64];

		snprintf(p, sizeof(p), "%s/kubepods.slice/kubepods-burstable.slice", fx.cgroot);
		rmdir(p);
		snprintf(p, sizeof(p), "%s/kubepods.slice/kubepods-besteffort.slice", fx.cgroot);
		rmdir(p);
		snprintf(p, sizeof(p), "%s/kubepods.slice", fx.cgroot);
		rmdir(p);
		ktest_cgroup_destroy(fx.cgroot);
	}
	if (fx.tmp[0])
		ktest_rmtree(fx.tmp);
	if (fx.m.config)
		free_manifest(&fx.m);
	return 0;
}

/* ---- the test ------------------------------------------------------------------- */

static bool is_member(const char *ns_name)
{
	char *st, want[160];
	bool found;
	struct ktest_daemon d = { 0 };

	snprintf(d.socket, sizeof(d.socket), "%s", fx.socket_path);
	snprintf(want, sizeof(want), "(pods %s)", ns_name);
	st = ktest_daemon_cmd(&d, "status");
	found = st && strstr(st, want);
	free(st);
	return found;
}

/* The limit's max in `status json`, -1 if it cannot be read. */
static double status_max(const char *limit)
{
	struct ktest_daemon d = { 0 };
	char *st;
	double v = -1;

	snprintf(d.socket, sizeof(d.socket), "%s", fx.socket_path);
	st = ktest_daemon_cmd(&d, "status json");
	if (!st || !ktest_json_limit_num(st, limit, "max", &v))
		v = -1;
	free(st);
	return v;
}

/* kubectl edit of the ConfigMap: the kubelet swaps ..data, and the daemon
 * applies it by itself (no exec, no signal) within 5 s. */
static void edit_configmap(void)
{
	const char *at = strstr(fx.m.config, "- name: ");
	char name[64], *cfg, *maxp, *edited = NULL;
	double max, want;
	uint64_t t0;

	assert_non_null(at);
	assert_int_equal(sscanf(at, "- name: %63s", name), 1);
	cfg = pod_config();
	maxp = strstr(cfg, "max: ");
	assert_non_null(maxp);
	max = atof(maxp + 5);
	assert_true(max >= 2);
	want = (double)(long)(max / 2);
	assert_true(asprintf(&edited, "%.*smax: %.0f%s", (int)(maxp - cfg), cfg, want,
			     maxp + 5 + strspn(maxp + 5, "0123456789.")) > 0);
	assert_true(status_max(name) == max);
	t0 = ktest_now_ns();
	assert_int_equal(ktest_kvol_update(&fx.config, fx.m.config_key, edited), 0);
	while (status_max(name) != want && ktest_now_ns() - t0 < 5000000000ull)
		ktest_sleep_ms(50);
	print_message("ConfigMap edit max %.0f -> %.0f applied in %.2f s\n", max, want,
		      (double)(ktest_now_ns() - t0) / 1e9);
	assert_true(status_max(name) == want);
	free(edited);
	free(cfg);
}

static void test_daemonset_as_shipped(void **state)
{
	struct rp_opts ro = { 0 };
	struct ktest_load crawl, index;
	uint64_t t0;
	char *config, *log;
	int ready = -1;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	read_manifests(&fx.m);
	config = pod_config();
	assert_int_equal(ktest_fakekube_start(&fx.api, fx.tmp, TOKEN), 0);
	mount_volumes(config);
	free(config);
	ro.port = fx.redis_port;
	assert_int_equal(rp_start_master(&fx.redis, &ro), 0);
	listen_on_limit_port();

	/* a crawler the selector picks, an indexer it does not */
	assert_int_equal(ktest_kubelet_pod_cgroup(fx.cgroot, CRAWLER_UID, "Burstable", 1, fx.crawler,
						  sizeof(fx.crawler)), 0);
	assert_int_equal(ktest_kubelet_pod_cgroup(fx.cgroot, INDEXER_UID, "BestEffort", 1,
						  fx.indexer, sizeof(fx.indexer)), 0);
	assert_int_equal(ktest_fakekube_cmd(&fx.api, "add workers crawler-1 %s " NODE
				      " Burstable app=crawler,tier=batch", CRAWLER_UID), 0);
	assert_int_equal(ktest_fakekube_cmd(&fx.api, "add workers indexer-1 %s " NODE
				      " BestEffort app=indexer,tier=batch", INDEXER_UID), 0);

	map_prog(fx.m.argv);
	map_prog(fx.m.ready);
	map_prog(fx.m.live);
	/* the probes name the socket */
	for (char **a = fx.m.ready; *a; a++)
		if (!strcmp(*a, "--socket") && a[1])
			snprintf(fx.socket_path, sizeof(fx.socket_path), "%s", a[1]);
	assert_true(fx.socket_path[0]);
	t0 = ktest_now_ns();
	start_daemon();

	/* ready once the pods are listed and attached: 10 s is the probe's
	 * period twice */
	for (int i = 0; i < 50 && ready; i++) {
		ktest_sleep_ms(200);
		ready = probe(fx.m.ready);
	}
	log = ktest_slurp(fx.log);
	if (ready)
		print_message("kthrottled log:\n%s", log);
	free(log);
	assert_int_equal(ready, 0);
	assert_int_equal(probe(fx.m.live), 0);
	assert_true(is_member("workers/crawler-1"));
	assert_false(is_member("workers/indexer-1"));

	/* connections from the crawler are held to the ramp; the indexer's
	 * are not touched */
	assert_int_equal(ktest_load(fx.crawler, "tcp", "127.0.0.1", fx.limit_port, LOAD_S, &crawl), 0);
	{
		double elapsed = (double)(ktest_now_ns() - t0) / 1e9;
		/* max 50, min 10 over 1m: the rate at the end bounds it; burst
		 * max(1, max) = 50 */
		double rate_end = 10.0 + 40.0 * elapsed / 60.0;
		double bound = 50.0 + rate_end * crawl.elapsed + 2.0;

		print_message("crawler: ok=%llu refused=%llu errors=%llu in %.2f s (bound %.1f)\n",
			      crawl.ok, crawl.refused, crawl.errors, crawl.elapsed, bound);
		assert_true((double)crawl.ok <= bound);
		assert_true(crawl.ok >= 10);
		assert_true(crawl.refused > 0);
	}
	assert_int_equal(ktest_load(fx.indexer, "tcp", "127.0.0.1", fx.limit_port, 1.0, &index), 0);
	print_message("indexer: ok=%llu refused=%llu\n", index.ok, index.refused);
	assert_int_equal(index.refused, 0);
	assert_true(index.ok > 100);

	/* the node is a member of the cluster-wide pool in Redis */
	{
		redisReply *r = rp_command(&fx.redis, "KEYS %s", "*crawler-api*");

		assert_non_null(r);
		print_message("redis keys: %zu\n", r->elements);
		assert_int_equal(r->type, REDIS_REPLY_ARRAY);
		assert_true(r->elements > 0);
		freeReplyObject(r);
	}
	edit_configmap();
	assert_int_equal(probe(fx.m.ready), 0);

	/* a rollout's SIGTERM: a clean exit, and nothing a sanitizer build
	 * would have said */
	{
		int st = -1;

		kill(fx.daemon, SIGTERM);
		for (int i = 0; i < 250 && waitpid(fx.daemon, &st, WNOHANG) == 0; i++)
			ktest_sleep_ms(20);
		assert_true(WIFEXITED(st));
		assert_int_equal(WEXITSTATUS(st), 0);
		fx.daemon = -1;
		fx.stopped = true;
		log = ktest_slurp(fx.log);
		assert_null(strstr(log, "Sanitizer"));
		assert_null(strstr(log, "runtime error"));
		free(log);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_daemonset_as_shipped, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
