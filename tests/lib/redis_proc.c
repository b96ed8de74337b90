/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include "redis_proc.h"

#define START_ATTEMPTS 5
#define READY_TIMEOUT_MS 5000

void rp_sleep_ms(int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int rp_free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd, port = -1;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
		port = ntohs(sa.sin_port);
	else
		port = -errno;
	close(fd);
	return port;
}

redisContext *rp_connect(const struct rp_proc *p)
{
	struct timeval tv = { .tv_sec = 1 };
	redisContext *c;
	redisReply *r;

	c = redisConnectWithTimeout("127.0.0.1", p->port, tv);
	if (!c || c->err)
		goto fail;
	redisSetTimeout(c, tv);
	if (p->password[0]) {
		r = redisCommand(c, "AUTH %s", p->password);
		if (!r || r->type != REDIS_REPLY_STATUS) {
			if (r)
				freeReplyObject(r);
			goto fail;
		}
		freeReplyObject(r);
	}
	return c;
fail:
	if (c)
		redisFree(c);
	return NULL;
}

static redisReply *vcommand(const struct rp_proc *p, const char *fmt, va_list ap)
{
	redisContext *c = rp_connect(p);
	redisReply *r;

	if (!c)
		return NULL;
	r = redisvCommand(c, fmt, ap);
	redisFree(c);
	return r;
}

redisReply *rp_command(const struct rp_proc *p, const char *fmt, ...)
{
	redisReply *r;
	va_list ap;

	va_start(ap, fmt);
	r = vcommand(p, fmt, ap);
	va_end(ap);
	return r;
}

redisReply *rp_command_argv(const struct rp_proc *p, int argc, const char **argv)
{
	redisContext *c = rp_connect(p);
	redisReply *r;

	if (!c)
		return NULL;
	r = redisCommandArgv(c, argc, argv, NULL);
	redisFree(c);
	return r;
}

/* A command's reply as a number: its integer (want REDIS_REPLY_INTEGER)
 * or its string read as one (REDIS_REPLY_STRING), else fallback. */
static long long vnumber(const struct rp_proc *p, int want, long long fallback, const char *fmt, va_list ap)
{
	redisReply *r = vcommand(p, fmt, ap);
	long long v = fallback;

	if (r && r->type == want)
		v = want == REDIS_REPLY_INTEGER ? r->integer : strtoll(r->str, NULL, 10);
	if (r)
		freeReplyObject(r);
	return v;
}

long long rp_command_int(const struct rp_proc *p, long long fallback, const char *fmt, ...)
{
	long long v;
	va_list ap;

	va_start(ap, fmt);
	v = vnumber(p, REDIS_REPLY_INTEGER, fallback, fmt, ap);
	va_end(ap);
	return v;
}

long long rp_command_num(const struct rp_proc *p, long long fallback, const char *fmt, ...)
{
	long long v;
	va_list ap;

	va_start(ap, fmt);
	v = vnumber(p, REDIS_REPLY_STRING, fallback, fmt, ap);
	va_end(ap);
	return v;
}

long long rp_time_ms(const struct rp_proc *p)
{
	redisReply *r = rp_command(p, "TIME");
	long long t = -1;

	if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[0]->type == REDIS_REPLY_STRING &&
	    r->element[1]->type == REDIS_REPLY_STRING)
		t = strtoll(r->element[0]->str, NULL, 10) * 1000 + strtoll(r->element[1]->str, NULL, 10) / 1000;
	if (r)
		freeReplyObject(r);
	return t;
}

int rp_info_field(const struct rp_proc *p, const char *section, const char *field, char *buf, size_t len)
{
	redisReply *r = rp_command(p, "INFO %s", section);
	size_t fl = strlen(field);
	int ret = -ENOENT;
	const char *line;

	if (!r || r->type != REDIS_REPLY_STRING) {
		ret = -EIO;
		goto out;
	}
	for (line = r->str; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
		if (strncmp(line, field, fl) == 0 && line[fl] == ':') {
			size_t n = strcspn(line + fl + 1, "\r\n");

			if (n >= len)
				n = len - 1;
			memcpy(buf, line + fl + 1, n);
			buf[n] = 0;
			ret = 0;
			break;
		}
	}
out:
	if (r)
		freeReplyObject(r);
	return ret;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

void rp_remove_tree(char *dir)
{
	const char *keep = getenv("KT_KEEP_REDIS_DIRS");

	if (!dir[0])
		return;
	if (keep && *keep == '1')
		fprintf(stderr, "redis_proc: kept %s\n", dir);
	else
		nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
	dir[0] = 0;
}

static void remove_dir(struct rp_proc *p)
{
	rp_remove_tree(p->dir);
}

static void reap(struct rp_proc *p, int grace_ms)
{
	long long end = now_ms() + grace_ms;
	int st;

	while (now_ms() < end) {
		if (waitpid(p->pid, &st, WNOHANG) == p->pid)
			goto done;
		rp_sleep_ms(10);
	}
	kill(p->pid, SIGKILL);
	waitpid(p->pid, &st, 0);
done:
	p->pid = 0;
}

int rp_stop(struct rp_proc *p)
{
	if (p->pid > 0) {
		kill(p->pid, SIGTERM);
		kill(p->pid, SIGCONT); /* a SIGSTOPped server must run to handle SIGTERM */
		reap(p, 3000);
	}
	remove_dir(p);
	return 0;
}

int rp_signal(struct rp_proc *p, int sig)
{
	if (p->pid <= 0)
		return -ESRCH;
	if (kill(p->pid, sig))
		return -errno;
	if (sig == SIGKILL)
		reap(p, 3000);
	return 0;
}

static pid_t spawn(const char *bin, const char *conf, const char *dir)
{
	pid_t parent = getpid(), pid;
	char errlog[128];
	int fd;

	pid = fork();
	if (pid != 0)
		return pid;
	/* child: die with the test, keep no test fds, log stderr into the dir */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(127);
	fd = open("/dev/null", O_RDWR);
	if (fd >= 0) {
		dup2(fd, 0);
		dup2(fd, 1);
	}
	snprintf(errlog, sizeof(errlog), "%s/stderr.log", dir);
	fd = open(errlog, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd >= 0)
		dup2(fd, 2);
	close_range(3, ~0U, 0);
	execlp(bin, bin, conf, (char *)NULL);
	_exit(127);
}

/* Spawns p->bin on the config in p->dir and waits until it answers PING.
 * -ECHILD if it exited (typically: port taken), -ETIMEDOUT if it never answered. */
static int spawn_and_wait(struct rp_proc *p)
{
	char conf[128];
	long long end;
	int st;

	snprintf(conf, sizeof(conf), "%s/server.conf", p->dir);
	p->pid = spawn(p->bin, conf, p->dir);
	if (p->pid < 0) {
		p->pid = 0;
		return -EAGAIN;
	}
	end = now_ms() + READY_TIMEOUT_MS;
	while (now_ms() < end) {
		redisReply *r;

		if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
			p->pid = 0;
			return -ECHILD;
		}
		r = rp_command(p, "PING");
		if (r) {
			bool ok = r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;

			freeReplyObject(r);
			if (ok)
				return 0;
		}
		rp_sleep_ms(20);
	}
	kill(p->pid, SIGKILL);
	waitpid(p->pid, &st, 0);
	p->pid = 0;
	return -ETIMEDOUT;
}

typedef int (*write_conf_fn)(FILE *f, const struct rp_proc *p, const void *ctx);

/* Writes the config and starts the server; retries on another port if the
 * process dies (most likely the port was taken meanwhile). */
static int start(struct rp_proc *p, const char *bin, write_conf_fn write_conf, const void *ctx,
		 const struct rp_opts *o)
{
	char conf[128];
	int attempt, ret = -EIO;
	FILE *f;

	memset(p, 0, sizeof(*p));
	snprintf(p->bin, sizeof(p->bin), "%s", bin);
	strcpy(p->dir, "/tmp/kt-redis-XXXXXX");
	if (!mkdtemp(p->dir)) {
		p->dir[0] = 0;
		return -errno;
	}
	if (o && o->password)
		snprintf(p->password, sizeof(p->password), "%s", o->password);
	snprintf(conf, sizeof(conf), "%s/server.conf", p->dir);
	for (attempt = 0; attempt < START_ATTEMPTS; attempt++) {
		p->port = o && o->port ? o->port : rp_free_port();
		if (p->port < 0)
			break;
		f = fopen(conf, "w");
		if (!f)
			break;
		fprintf(f, "port %d\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\ndir %s\n"
			   "logfile %s/server.log\n",
			p->port, p->dir, p->dir);
		if (p->password[0])
			fprintf(f, "requirepass %s\n", p->password);
		if (write_conf(f, p, ctx) || (o && o->extra_conf && fprintf(f, "%s\n", o->extra_conf) < 0)) {
			fclose(f);
			break;
		}
		if (fclose(f))
			break;
		ret = spawn_and_wait(p);
		if (ret != -ECHILD)
			break;
	}
	if (ret)
		fprintf(stderr, "redis_proc: could not start %s (see %s/server.log)\n", bin, p->dir);
	return ret;
}

int rp_restart(struct rp_proc *p)
{
	int ret;

	if (!p->dir[0])
		return -EINVAL;
	if (p->pid > 0) {
		kill(p->pid, SIGKILL);
		reap(p, 3000);
	}
	ret = spawn_and_wait(p);
	if (ret)
		fprintf(stderr, "redis_proc: could not restart %s on port %d (see %s/server.log)\n",
			p->bin, p->port, p->dir);
	return ret;
}

static int conf_master(FILE *f, const struct rp_proc *p, const void *ctx)
{
	(void)p;
	(void)ctx;
	return fprintf(f, "save \"\"\nappendonly no\nrepl-diskless-sync-delay 0\n") < 0;
}

int rp_start_master(struct rp_proc *p, const struct rp_opts *o)
{
	return start(p, "redis-server", conf_master, NULL, o);
}

static int conf_replica(FILE *f, const struct rp_proc *p, const void *ctx)
{
	const struct rp_proc *m = ctx;

	(void)p;
	if (fprintf(f, "save \"\"\nappendonly no\nrepl-diskless-sync-delay 0\nreplicaof 127.0.0.1 %d\n", m->port) < 0)
		return -1;
	if (m->password[0] && fprintf(f, "masterauth %s\n", m->password) < 0)
		return -1;
	return 0;
}

int rp_start_replica(struct rp_proc *p, const struct rp_proc *master, const struct rp_opts *o)
{
	char st[32];
	long long end;
	int ret;

	ret = start(p, "redis-server", conf_replica, master, o);
	if (ret)
		return ret;
	end = now_ms() + READY_TIMEOUT_MS;
	while (now_ms() < end) {
		if (rp_info_field(p, "replication", "master_link_status", st, sizeof(st)) == 0 &&
		    strcmp(st, "up") == 0)
			return 0;
		rp_sleep_ms(20);
	}
	fprintf(stderr, "redis_proc: replica on port %d never linked to master %d\n", p->port,
		master->port);
	return -ETIMEDOUT;
}

struct sentinel_ctx {
	const struct rp_proc *master;
	const char *name;
	int quorum, down_after_ms;
};

static int conf_sentinel(FILE *f, const struct rp_proc *p, const void *ctx)
{
	const struct sentinel_ctx *c = ctx;

	(void)p;
	if (fprintf(f,
		    "sentinel monitor %s 127.0.0.1 %d %d\n"
		    "sentinel down-after-milliseconds %s %d\n"
		    "sentinel failover-timeout %s 10000\n",
		    c->name, c->master->port, c->quorum, c->name, c->down_after_ms, c->name) < 0)
		return -1;
	if (c->master->password[0] &&
	    fprintf(f, "sentinel auth-pass %s %s\n", c->name, c->master->password) < 0)
		return -1;
	return 0;
}

int rp_start_sentinel(struct rp_proc *p, const struct rp_proc *master, const char *name, int quorum,
		      int down_after_ms, const struct rp_opts *o)
{
	struct sentinel_ctx c = {
		.master = master, .name = name, .quorum = quorum, .down_after_ms = down_after_ms,
	};
	int ret;

	ret = start(p, "redis-sentinel", conf_sentinel, &c, o);
	p->sentinel = true;
	return ret;
}

static const char *kv(const redisReply *r, const char *key)
{
	for (size_t i = 0; i + 1 < r->elements; i += 2)
		if (r->element[i]->type == REDIS_REPLY_STRING && strcmp(r->element[i]->str, key) == 0 &&
		    r->element[i + 1]->type == REDIS_REPLY_STRING)
			return r->element[i + 1]->str;
	return "";
}

int rp_sentinel_wait_replicas(const struct rp_proc *s, const char *name, int n, int timeout_ms)
{
	long long end = now_ms() + timeout_ms;

	while (now_ms() < end) {
		redisReply *r = rp_command(s, "SENTINEL replicas %s", name);
		int good = 0;

		if (r && r->type == REDIS_REPLY_ARRAY) {
			for (size_t i = 0; i < r->elements; i++) {
				const redisReply *e = r->element[i];

				if (e->type == REDIS_REPLY_ARRAY && !strstr(kv(e, "flags"), "down") &&
				    !strstr(kv(e, "flags"), "disconnected") &&
				    strcmp(kv(e, "master-link-status"), "ok") == 0)
					good++;
			}
		}
		if (r)
			freeReplyObject(r);
		if (good >= n)
			return 0;
		rp_sleep_ms(50);
	}
	return -ETIMEDOUT;
}

int rp_sentinel_failover(const struct rp_proc *s, const char *name, int new_port)
{
	long long t0 = now_ms();

	for (;;) {
		redisReply *r = rp_command(s, "SENTINEL FAILOVER %s", name);
		bool taken;

		if (!r)
			return -EIO;
		taken = r->type == REDIS_REPLY_STATUS;
		freeReplyObject(r);
		if (taken)
			break;
		/* NOGOODSLAVE and the like until a replica is ready */
		if (now_ms() - t0 >= 10000)
			return -ETIMEDOUT;
		rp_sleep_ms(200);
	}
	t0 = now_ms();
	while (rp_sentinel_master_port(s, name) != new_port) {
		if (now_ms() - t0 >= 20000)
			return -ETIMEDOUT;
		rp_sleep_ms(100);
	}
	return 0;
}

int rp_sentinel_master_port(const struct rp_proc *s, const char *name)
{
	redisReply *r = rp_command(s, "SENTINEL get-master-addr-by-name %s", name);
	int port = -1;

	if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
	    r->element[1]->type == REDIS_REPLY_STRING)
		port = atoi(r->element[1]->str);
	if (r)
		freeReplyObject(r);
	return port;
}

/* ---- Redis Cluster ---- */

static int conf_cluster(FILE *f, const struct rp_proc *p, const void *ctx)
{
	int bus = rp_free_port();

	(void)ctx;
	/* an explicit bus port: port + 10000 may be taken or above 65535 */
	return bus < 0 || fprintf(f, "save \"\"\nappendonly no\nrepl-diskless-sync-delay 0\n"
				  "cluster-enabled yes\ncluster-config-file %s/nodes.conf\n"
				  "cluster-node-timeout 1000\ncluster-port %d\n"
				  "cluster-replica-validity-factor 0\n",
				  p->dir, bus) < 0;
}

/* CLUSTER INFO's value for field, or "" */
static void cluster_info(const struct rp_proc *p, const char *field, char *buf, size_t len)
{
	redisReply *r = rp_command(p, "CLUSTER INFO");
	const char *l;
	size_t fl = strlen(field);

	buf[0] = 0;
	if (r && r->type == REDIS_REPLY_STRING)
		for (l = r->str; l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
			if (!strncmp(l, field, fl) && l[fl] == ':') {
				size_t n = strcspn(l + fl + 1, "\r\n");

				if (n >= len)
					n = len - 1;
				memcpy(buf, l + fl + 1, n);
				buf[n] = 0;
				break;
			}
	if (r)
		freeReplyObject(r);
}

int rp_cluster_wait_ok(const struct rp_proc *nodes, int n, int timeout_ms)
{
	long long end = now_ms() + timeout_ms;
	char v[32];

	while (now_ms() < end) {
		int ok = 0, up = 0;

		for (int i = 0; i < n; i++) {
			if (nodes[i].pid <= 0)
				continue;
			up++;
			cluster_info(&nodes[i], "cluster_state", v, sizeof(v));
			ok += !strcmp(v, "ok");
		}
		if (up && ok == up)
			return 0;
		rp_sleep_ms(50);
	}
	return -ETIMEDOUT;
}

int rp_start_cluster(struct rp_proc *nodes, int n, int replicas)
{
	char cmd[2048];
	int len, ret, i;
	FILE *f;

	memset(nodes, 0, sizeof(*nodes) * (size_t)n);
	for (i = 0; i < n; i++) {
		ret = start(&nodes[i], "redis-server", conf_cluster, NULL, NULL);
		if (ret)
			goto fail;
	}
	len = snprintf(cmd, sizeof(cmd), "redis-cli --cluster create");
	for (i = 0; i < n; i++)
		len += snprintf(cmd + len, sizeof(cmd) - (size_t)len, " 127.0.0.1:%d", nodes[i].port);
	snprintf(cmd + len, sizeof(cmd) - (size_t)len, " --cluster-replicas %d --cluster-yes >%s/create.log 2>&1",
		 replicas, nodes[0].dir);
	f = popen(cmd, "r");
	if (!f || pclose(f) != 0) {
		fprintf(stderr, "redis_proc: redis-cli --cluster create failed (see %s/create.log)\n", nodes[0].dir);
		ret = -EIO;
		goto fail;
	}
	ret = rp_cluster_wait_ok(nodes, n, 10000);
	if (!ret)
		return 0;
fail:
	for (i = 0; i < n; i++)
		rp_stop(&nodes[i]);
	return ret ? ret : -EIO;
}

int rp_cluster_slot_owner(const struct rp_proc *nodes, int n, int slot)
{
	int owner = -1;

	for (int i = 0; i < n && owner < 0; i++) {
		redisReply *r = nodes[i].pid > 0 ? rp_command(&nodes[i], "CLUSTER SLOTS") : NULL;

		for (size_t k = 0; r && r->type == REDIS_REPLY_ARRAY && k < r->elements; k++) {
			redisReply *e = r->element[k];

			if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[0]->integer > slot ||
			    e->element[1]->integer < slot || e->element[2]->type != REDIS_REPLY_ARRAY)
				continue;
			for (int j = 0; j < n; j++)
				if (nodes[j].pid > 0 && nodes[j].port == e->element[2]->element[1]->integer)
					owner = j;
		}
		if (r)
			freeReplyObject(r);
	}
	return owner;
}

int rp_cluster_slot(const struct rp_proc *p, const char *key)
{
	return (int)rp_command_int(p, -1, "CLUSTER KEYSLOT %s", key);
}

uint64_t rp_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}
