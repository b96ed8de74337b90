/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include "redis_tls.h"

#define EC_CURVE "ec_paramgen_curve:prime256v1" /* EC keys: generated instantly, unlike RSA */

/* Runs openssl with argv (no shell), output appended to dir/openssl.log. */
static int run_openssl(const char *dir, const char *const *argv)
{
	char log[128];
	pid_t pid;
	int st, fd;

	snprintf(log, sizeof(log), "%s/openssl.log", dir);
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		if (chdir(dir))
			_exit(126);
		execvp("openssl", (char *const *)argv);
		_exit(127);
	}
	if (waitpid(pid, &st, 0) != pid)
		return -errno;
	if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "redis_tls: openssl %s failed, see %s\n", argv[1], log);
		return -EIO;
	}
	return 0;
}

static int write_file(const char *dir, const char *name, const char *text)
{
	char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	if (!f)
		return -errno;
	fputs(text, f);
	return fclose(f) ? -errno : 0;
}

static int make_ca(const char *dir, const char *name, const char *cn)
{
	char key[64], crt[64], subj[64];
	const char *argv[] = { "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", EC_CURVE,
			       "-nodes", "-keyout", key, "-out", crt, "-subj", subj, "-days", "2",
			       NULL };

	snprintf(key, sizeof(key), "%s.key", name);
	snprintf(crt, sizeof(crt), "%s.crt", name);
	snprintf(subj, sizeof(subj), "/CN=%s", cn);
	return run_openssl(dir, argv);
}

/* name.key + name.crt signed by ca, with the extensions in ext_text. */
static int make_leaf(const char *dir, const char *name, const char *cn, const char *ext_text)
{
	char key[64], csr[64], crt[64], ext[64], subj[64];
	const char *req[] = { "openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", EC_CURVE, "-nodes",
			      "-keyout", key, "-out", csr, "-subj", subj, NULL };
	const char *sign[] = { "openssl", "x509", "-req", "-in", csr, "-CA", "ca.crt", "-CAkey", "ca.key",
			       "-CAcreateserial", "-out", crt, "-days", "2", "-extfile", ext, NULL };
	int ret;

	snprintf(key, sizeof(key), "%s.key", name);
	snprintf(csr, sizeof(csr), "%s.csr", name);
	snprintf(crt, sizeof(crt), "%s.crt", name);
	snprintf(ext, sizeof(ext), "%s.ext", name);
	snprintf(subj, sizeof(subj), "/CN=%s", cn);
	ret = write_file(dir, ext, ext_text);
	if (!ret)
		ret = run_openssl(dir, req);
	if (!ret)
		ret = run_openssl(dir, sign);
	return ret;
}

int rt_make_certs(struct rt_certs *c)
{
	int ret;

	memset(c, 0, sizeof(*c));
	strcpy(c->dir, "/tmp/kt-certs-XXXXXX");
	if (!mkdtemp(c->dir)) {
		c->dir[0] = 0;
		return -errno;
	}
	snprintf(c->ca, sizeof(c->ca), "%s/ca.crt", c->dir);
	snprintf(c->ca_key, sizeof(c->ca_key), "%s/ca.key", c->dir);
	snprintf(c->server_crt, sizeof(c->server_crt), "%s/server.crt", c->dir);
	snprintf(c->server_key, sizeof(c->server_key), "%s/server.key", c->dir);
	snprintf(c->client_crt, sizeof(c->client_crt), "%s/client.crt", c->dir);
	snprintf(c->client_key, sizeof(c->client_key), "%s/client.key", c->dir);
	snprintf(c->other_ca, sizeof(c->other_ca), "%s/other-ca.crt", c->dir);
	ret = make_ca(c->dir, "ca", "kt-test-ca");
	if (!ret)
		ret = make_ca(c->dir, "other-ca", "kt-test-other-ca");
	if (!ret)
		ret = make_leaf(c->dir, "server", "localhost",
				"subjectAltName=IP:127.0.0.1,DNS:localhost\n"
				"extendedKeyUsage=serverAuth,clientAuth\n");
	if (!ret)
		ret = make_leaf(c->dir, "client", "kt-test-client", "extendedKeyUsage=clientAuth\n");
	return ret;
}

void rt_remove_certs(struct rt_certs *c)
{
	rp_remove_tree(c->dir);
}

enum rt_kind { RT_MASTER, RT_REPLICA, RT_SENTINEL };

struct rt_start {
	enum rt_kind kind;
	const struct rp_proc *master; /* replica, sentinel: a copy with the TLS port */
	const char *name;
	int quorum, down_after_ms;
};

/* Starts one server of kind k with the TLS lines added. The TLS port is
 * picked before the server starts; if someone takes it meanwhile the server
 * exits and we try another. */
static int start_tls(struct rp_proc *p, const struct rt_start *k, const struct rt_certs *c,
		     bool auth_clients, int *tls_port)
{
	struct rp_opts o = { 0 };
	char conf[1024];
	int attempt, ret = -EIO;

	for (attempt = 0; attempt < 3; attempt++) {
		*tls_port = rp_free_port();
		if (*tls_port < 0)
			return *tls_port;
		snprintf(conf, sizeof(conf),
			 "tls-port %d\ntls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\n"
			 "tls-auth-clients %s\n%s",
			 *tls_port, c->server_crt, c->server_key, c->ca, auth_clients ? "yes" : "no",
			 k->kind == RT_MASTER ? "" : "tls-replication yes\n");
		o.extra_conf = conf;
		if (k->kind == RT_MASTER)
			ret = rp_start_master(p, &o);
		else if (k->kind == RT_REPLICA)
			ret = rp_start_replica(p, k->master, &o);
		else
			ret = rp_start_sentinel(p, k->master, k->name, k->quorum, k->down_after_ms, &o);
		if (!ret)
			return 0;
		rp_stop(p);
	}
	return ret;
}

int rt_start_tls_master(struct rp_proc *p, const struct rt_certs *c, bool auth_clients, int *tls_port)
{
	struct rt_start k = { .kind = RT_MASTER };

	return start_tls(p, &k, c, auth_clients, tls_port);
}

int rt_start_tls_replica(struct rp_proc *p, const struct rp_proc *master, int master_tls_port,
			 const struct rt_certs *c, int *tls_port)
{
	struct rp_proc m = *master;
	struct rt_start k = { .kind = RT_REPLICA, .master = &m };

	m.port = master_tls_port; /* replicaof names this port: replication over TLS */
	return start_tls(p, &k, c, false, tls_port);
}

int rt_start_tls_sentinel(struct rp_proc *p, const struct rp_proc *master, int master_tls_port,
			  const struct rt_certs *c, const char *name, int quorum, int down_after_ms,
			  bool auth_clients, int *tls_port)
{
	struct rp_proc m = *master;
	struct rt_start k = {
		.kind = RT_SENTINEL, .master = &m, .name = name, .quorum = quorum,
		.down_after_ms = down_after_ms,
	};

	m.port = master_tls_port; /* sentinel monitor names this port */
	return start_tls(p, &k, c, auth_clients, tls_port);
}

int rt_start_tls_pair(struct rt_certs *c, struct rp_proc *tls, int *tls_port, struct rp_proc *mtls,
		      int *mtls_port)
{
	if (rt_make_certs(c))
		return -1;
	if (rt_start_tls_master(tls, c, false, tls_port))
		return -1;
	if (rt_start_tls_master(mtls, c, true, mtls_port))
		return -1;
	return 0;
}

void rt_stop_tls_pair(struct rt_certs *c, struct rp_proc *tls, struct rp_proc *mtls)
{
	rp_stop(tls);
	rp_stop(mtls);
	rt_remove_certs(c);
}
