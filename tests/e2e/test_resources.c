// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The daemon's file descriptors against the budget its start checks
 * (KT_START_FDS, docs/operations.md "Resources"). One kthrottled with
 * everything that holds a connection: a limit pooled through a real
 * redis-server, a strict limit on its own store, a tag limit exchanging
 * through Redis with a query socket, and a `pods:` limit watching
 * tests/tools/kt-fakekube, held to RLIMIT_NOFILE at exactly that budget once
 * it is up. What is asserted: it settles (stores up, the watch open with
 * its pods), and the strict limit's connection is made; its fds plus the
 * 16 control clients it may hold fit the budget; 16 clients connected at
 * once are each an fd, a 17th takes the oldest one's place (never a 17th fd), and once they are
 * gone the count is back where it was; every one of 16 clients then gets
 * its answer at that limit.
 *
 * With KT_RESOURCES_TABLE=1 it also prints the table of docs/operations.md:
 * fds (by kind) and memory of a daemon per configuration, one daemon each
 * (KT_RESOURCES_PODS=100,1000 sets the pod counts; default 100), and
 * KT_RESOURCES_LIST=1 prints every fd. The counts include fds the test
 * itself inherited and passed down (run it with none above 2 for the
 * docs' numbers). Nothing here waits on a rate or a window: every wait is
 * for a state, bounded. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "control/daemon.h"
#include "fakekube.h"
#include "kt_daemonfx.h"
#include "ktest.h"
#include "redis_proc.h"

#define NODE "node-r"
#define TOKEN "t0ken-for-resources"
#define PREFIX "ktres"
#define N_CLIENTS 16 /* KT_MAX_CLIENTS, the control socket's slots */
#define N_PLAIN 4    /* plain member cgroups, one per plain limit */
#define MAX_PODS 5000
#define SETTLE_MS 15000

/* what a daemon is started with */
enum {
	F_POOL = 1 << 0,   /* limit "pool": rateLimit.store on redis A */
	F_POOL_B = 1 << 1, /* limit "pool-b": another limit on redis A */
	F_STORE2 = 1 << 2, /* limit "pool-2": on redis B, a second store */
	F_STRICT = 1 << 3, /* limit "strict": rateLimit.strict on redis A */
	F_TAGS = 1 << 4,   /* top-level store redis A + a tag limit, query socket */
	F_KUBE = 1 << 5,   /* kubernetes: + limit "crawl" on pods app=crawler */
	F_SENTINEL = 1 << 6, /* limit "pool-s": through a sentinel to redis A */
	F_CLUSTER = 1 << 7,  /* limits "c0".."c5" on a 3-master Redis Cluster */
};
#define N_CL 3

static struct {
	struct ktest_daemon d;
	struct rp_proc rp, rp2;
	struct rp_proc sent, cl[N_CL]; /* the table's only */
	struct ktest_fakekube api;
	char dir[PATH_MAX];  /* certificates, token, query socket */
	char base[PATH_MAX]; /* the test cgroup: plain cgroups and cgroupRoot */
	char plain[N_PLAIN][PATH_MAX];
	int n_pods;          /* pods added to the API and made under base */
	int n_pod_dirs;      /* their directories made */
} fx;

/* ---- the daemon's fds and memory ----------------------------------------- */

/* The count once it has read the same 3 times 100 ms apart (a rescan may
 * hold a directory open for a moment, a store may be reconnecting): bounded
 * by SETTLE_MS, then the last count. */
static int fds_settled(pid_t pid)
{
	int last = -1, same = 0;

	for (int i = 0; i < SETTLE_MS / 100 && same < 3; i++) {
		int n = ktest_proc_fds(pid);

		same = n == last ? same + 1 : 1;
		last = n;
		ktest_sleep_ms(100);
	}
	return last;
}

/* The remote port of a TCP socket by inode (0: not TCP), from one of
 * /proc/net/tcp{,6}; for a listener, -1. */
static int tcp_rport(unsigned long inode)
{
	static const char *const files[] = { "/proc/net/tcp", "/proc/net/tcp6" };

	for (int i = 0; i < 2; i++) {
		char line[512];
		FILE *f = fopen(files[i], "r");

		if (!f)
			continue;
		while (fgets(line, sizeof(line), f)) {
			char rem[64];
			unsigned long ino;
			unsigned st;
			char *colon;

			if (sscanf(line, " %*s %*s %63s %x %*s %*s %*s %*s %*s %lu", rem, &st, &ino) != 3 ||
			    ino != inode)
				continue;
			fclose(f);
			colon = strrchr(rem, ':');
			return st == 0x0A ? -1 : colon ? (int)strtol(colon + 1, NULL, 16) : 0;
		}
		fclose(f);
	}
	return 0;
}

struct kinds {
	char name[24][24];
	int n[24];
	int len;
};

static void kinds_add(struct kinds *k, const char *name)
{
	int i;

	for (i = 0; i < k->len; i++)
		if (!strcmp(k->name[i], name))
			break;
	if (i == k->len) {
		if (k->len == 24)
			return;
		snprintf(k->name[k->len++], sizeof(k->name[0]), "%s", name);
	}
	k->n[i]++;
}

/* The daemon's fds by kind, as "bpf-map 113, redis 2, ..." into out. */
static void fd_kinds(pid_t pid, char *out, size_t len)
{
	char path[64], fdp[128], target[PATH_MAX];
	struct kinds k = { .len = 0 };
	struct dirent *de;
	size_t off = 0;
	DIR *d;

	out[0] = '\0';
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	if (!(d = opendir(path)))
		return;
	while ((de = readdir(d))) {
		unsigned long ino;
		ssize_t n;

		if (de->d_name[0] == '.')
			continue;
		snprintf(fdp, sizeof(fdp), "%s/%s", path, de->d_name);
		n = readlink(fdp, target, sizeof(target) - 1);
		if (n < 0)
			continue;
		target[n] = '\0';
		if (sscanf(target, "socket:[%lu]", &ino) == 1) {
			int port = tcp_rport(ino);

			if (port < 0)
				kinds_add(&k, "tcp listener");
			else if (port && port == fx.rp.port)
				kinds_add(&k, "redis A");
			else if (port && port == fx.rp2.port)
				kinds_add(&k, "redis B");
			else if (port && port == fx.api.port)
				kinds_add(&k, "kube API");
			else if (port && port == fx.sent.port)
				kinds_add(&k, "sentinel");
			else if (port && (port == fx.cl[0].port || port == fx.cl[1].port ||
					  port == fx.cl[2].port))
				kinds_add(&k, "cluster node");
			else if (port)
				kinds_add(&k, "tcp other");
			else
				kinds_add(&k, "socket (unix etc.)");
		} else if (!strncmp(target, "anon_inode:", 11)) {
			char *s = target + 11;

			s += *s == '[';
			s[strcspn(s, "]")] = '\0';
			kinds_add(&k, s);
		} else if (!strncmp(target, "pipe:", 5)) {
			kinds_add(&k, "pipe");
		} else {
			kinds_add(&k, "file");
		}
		if (getenv("KT_RESOURCES_LIST"))
			print_message("  fd %s -> %s\n", de->d_name, target);
	}
	closedir(d);
	for (int i = 0; i < k.len && off < len; i++)
		off += (size_t)snprintf(out + off, len - off, "%s%s %d", i ? ", " : "", k.name[i], k.n[i]);
}

/* The daemon's TCP connections to 127.0.0.1:port (any local address). */
static int conns_to(pid_t pid, int port)
{
	char path[64], fdp[128], target[64];
	struct dirent *de;
	int n = 0;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	if (!(d = opendir(path)))
		return -1;
	while ((de = readdir(d))) {
		unsigned long ino;
		ssize_t len;

		snprintf(fdp, sizeof(fdp), "%s/%s", path, de->d_name);
		len = readlink(fdp, target, sizeof(target) - 1);
		if (len <= 0)
			continue;
		target[len] = '\0';
		n += sscanf(target, "socket:[%lu]", &ino) == 1 && tcp_rport(ino) == port;
	}
	closedir(d);
	return n;
}

/* ---- the fixture --------------------------------------------------------- */

static int setup(void **state)
{
	char path[PATH_MAX + 16];

	(void)state;
	memset(&fx, 0, sizeof(fx));
	fx.d.pid = -1;
	fx.api.pid = -1;
	if (ktest_root_unavailable())
		return 0;
	if (rp_start_master(&fx.rp, NULL) || rp_start_master(&fx.rp2, NULL))
		return -1;
	if (ktest_tmpdir(fx.dir, sizeof(fx.dir)) || ktest_fakekube_certs(fx.dir))
		return -1;
	snprintf(path, sizeof(path), "%s/token", fx.dir);
	if (ktest_write_file(path, TOKEN "\n") || ktest_fakekube_start(&fx.api, fx.dir, TOKEN))
		return -1;
	if (ktest_cgroup_create("res", fx.base, sizeof(fx.base)))
		return -1;
	for (int i = 0; i < N_PLAIN; i++) {
		snprintf(fx.plain[i], sizeof(fx.plain[i]), "%s/plain%d", fx.base, i);
		if (mkdir(fx.plain[i], 0755))
			return -1;
	}
	return 0;
}

static void pod_uid(int i, char *uid, size_t len)
{
	snprintf(uid, len, "%08x-aaaa-4bbb-8ccc-%012x", (unsigned)i, (unsigned)i);
}

static int teardown(void **state)
{
	char path[PATH_MAX], uid[40];

	(void)state;
	if (fx.d.dir[0])
		ktest_daemon_cleanup(&fx.d);
	ktest_fakekube_stop(&fx.api);
	for (int i = 0; i < fx.n_pod_dirs; i++) {
		pod_uid(i, uid, sizeof(uid));
		ktest_kubelet_pod_cgroup(fx.base, uid, "Burstable", 0, path, sizeof(path));
		ktest_cgroup_destroy(path);
	}
	if (fx.base[0]) {
		snprintf(path, sizeof(path), "%s/kubepods.slice/kubepods-burstable.slice", fx.base);
		rmdir(path);
		snprintf(path, sizeof(path), "%s/kubepods.slice", fx.base);
		rmdir(path);
		for (int i = 0; i < N_PLAIN; i++)
			if (fx.plain[i][0])
				ktest_cgroup_destroy(fx.plain[i]);
		ktest_cgroup_destroy(fx.base);
	}
	rp_stop(&fx.rp);
	rp_stop(&fx.rp2);
	rp_stop(&fx.sent);
	for (int i = 0; i < N_CL; i++)
		rp_stop(&fx.cl[i]);
	if (fx.dir[0])
		ktest_rmtree(fx.dir);
	return 0;
}

/* Pods 0..n-1 of this node labelled app=crawler in the API, each with its
 * kubelet directory (made after the API lists it, as the kubelet does). */
static void pods_upto(int n)
{
	char path[PATH_MAX], uid[40];

	assert_true(n <= MAX_PODS);
	for (; fx.n_pods < n; fx.n_pods++) {
		pod_uid(fx.n_pods, uid, sizeof(uid));
		assert_int_equal(ktest_fakekube_cmd(&fx.api, "add workers crawler-%d %s " NODE
						    " Burstable app=crawler",
						    fx.n_pods, uid),
				 0);
		assert_int_equal(ktest_kubelet_pod_cgroup(fx.base, uid, "Burstable", 1, path, sizeof(path)),
				 0);
		fx.n_pod_dirs++;
	}
}

/* A redis store block on rp for a limit. */
static void store_of(char *buf, size_t len, const struct rp_proc *rp)
{
	snprintf(buf, len, "{redisStore: {mode: single, url: \"redis://127.0.0.1:%d/0\", keyPrefix: " PREFIX "}}",
		 rp->port);
}

/* The config body for flags f. */
static void body_of(char *b, size_t len, unsigned f)
{
	const char *root = strrchr(fx.base, '/') + 1; /* ktest cgroups sit at the mount's top */
	char sa[160], sb[160];

	b[0] = '\0';
	store_of(sa, sizeof(sa), &fx.rp);
	store_of(sb, sizeof(sb), &fx.rp2);
	kt_cat(b, len, "node: " NODE "\ntickInterval: 100ms\n");
	if (f & F_TAGS)
		kt_cat(b, len, "store: %s\ntags:\n  - name: api\n    rate: 5\n    burst: 5\n"
			       "    query: {socket: %s/query.sock}\n", sa, fx.dir);
	if (f & F_KUBE)
		kt_cat(b, len, "kubernetes:\n  apiServer: https://127.0.0.1:%d\n  tokenFile: %s/token\n"
			       "  caFile: %s/ca.pem\n  nodeName: " NODE "\n  cgroupRoot: %s\n",
		       fx.api.port, fx.dir, fx.dir, root);
	/* a local limit in every daemon: the constant part of the docs' table */
	kt_cat(b, len, "limits:\n  - name: local\n    cgroups: [%s]\n"
		       "    match: {cidrs: [127.0.0.1/32], ports: 9, protocol: udp}\n"
		       "    unit: datagram\n    burst: 20\n    rateLimit: {max: 200, store: {}}\n", fx.plain[0]);
	if (f & F_POOL)
		kt_cat(b, len, "  - name: pool\n    cgroups: [%s]\n"
			       "    match: {cidrs: [127.0.0.1/32], ports: 10, protocol: udp}\n"
			       "    unit: datagram\n    rateLimit: {max: 200, store: %s}\n", fx.plain[1], sa);
	if (f & F_POOL_B)
		kt_cat(b, len, "  - name: pool-b\n    cgroups: [%s]\n"
			       "    match: {cidrs: [127.0.0.1/32], ports: 11, protocol: udp}\n"
			       "    unit: datagram\n    rateLimit: {max: 200, store: %s}\n", fx.plain[2], sa);
	if (f & F_STORE2)
		kt_cat(b, len, "  - name: pool-2\n    cgroups: [%s]\n"
			       "    match: {cidrs: [127.0.0.1/32], ports: 12, protocol: udp}\n"
			       "    unit: datagram\n    rateLimit: {max: 200, store: %s}\n", fx.plain[2], sb);
	if (f & F_STRICT)
		kt_cat(b, len, "  - name: strict\n    cgroups: [%s]\n"
			       "    match: {cidrs: [127.0.0.1/32], ports: 13, protocol: tcp}\n"
			       "    unit: connection\n    rateLimit: {strict: {every: 100ms}, store: %s}\n",
		       fx.plain[3], sa);
	if (f & F_SENTINEL)
		kt_cat(b, len, "  - name: pool-s\n    cgroups: [%s]\n"
			       "    match: {cidrs: [127.0.0.1/32], ports: 15, protocol: udp}\n"
			       "    unit: datagram\n    rateLimit: {max: 200, store: {redisStore: {mode: sentinel, "
			       "sentinel: {endpoints: [\"127.0.0.1:%d\"], master_name: ktres}, keyPrefix: " PREFIX
			       "}}}\n", fx.plain[1], fx.sent.port);
	for (int i = 0; (f & F_CLUSTER) && i < 6; i++)
		kt_cat(b, len, "  - name: c%d\n    cgroups: [%s]\n"
			       "    match: {cidrs: [127.0.0.1/32], ports: %d, protocol: udp}\n"
			       "    unit: datagram\n    rateLimit: {max: 200, store: {redisStore: {mode: cluster, "
			       "addrs: [\"127.0.0.1:%d\"], keyPrefix: " PREFIX "}}}\n",
		       i, fx.plain[1], 20 + i, fx.cl[0].port);
	if (f & F_KUBE)
		kt_cat(b, len, "  - name: crawl\n    pods: {namespace: workers, labels: {app: crawler}}\n"
			       "    match: {cidrs: [127.0.0.1/32], ports: 14, protocol: udp}\n"
			       "    unit: datagram\n    rateLimit: {max: 200, store: %s}\n", sa);
}

/* Whether d's status says every store it uses is up, the tag exchange and
 * the strict limit's store answer, and (kube) the watch is open with pods
 * pods of this node. */
static bool settled(unsigned f, int pods)
{
	char *js = ktest_daemon_cmd(&fx.d, "status json"), want[64];
	bool ok;

	if (!js)
		return false;
	ok = !strstr(js, "\"store_ok\":false") && !strstr(js, "\"kind\":\"redis\",\"state\":\"down\"") &&
	     !strstr(js, "\"kind\":\"redis\",\"state\":\"connecting\"");
	if (f & F_KUBE) {
		const char *k = strstr(js, "\"kubernetes\":{");

		snprintf(want, sizeof(want), "\"pods\":%d,", pods);
		ok = ok && k && strstr(k, "\"state\":\"watching\"") && strstr(k, want);
	}
	free(js);
	return ok;
}

static void wait_settled(unsigned f, int pods)
{
	uint64_t t0 = ktest_now_ns();

	while (!settled(f, pods)) {
		if (ktest_now_ns() - t0 > (uint64_t)SETTLE_MS * 1000000ull) {
			ktest_daemon_dump(&fx.d, "kthrottled", 4000);
			fail_msg("the daemon did not settle within %d ms", SETTLE_MS);
		}
		ktest_sleep_ms(50);
	}
}

/* Starts the daemon for flags f with `pods` pods, waits until it settles;
 * its fd count. nofile > 0: then its RLIMIT_NOFILE (soft and hard), set
 * once it has started (the start's own check wants at least that much, and
 * the test's hard limit could not be raised back after lending it). */
static int daemon_up(unsigned f, int pods, rlim_t nofile)
{
	static char body[8192];
	struct rlimit rl = { nofile, nofile };

	if (f & F_KUBE)
		pods_upto(pods);
	body_of(body, sizeof(body), f);
	if (ktest_daemon_up(&fx.d, body))
		fail_msg("kthrottled did not start:\n%s", body);
	if (nofile)
		assert_int_equal(prlimit(fx.d.pid, RLIMIT_NOFILE, &rl, NULL), 0);
	wait_settled(f, (f & F_KUBE) ? pods : 0);
	if (f & F_STRICT) {
		/* connects the strict limit asks permits for: its store
		 * connection is made at the first one */
		struct ktest_load r;

		assert_int_equal(ktest_load(fx.plain[3], "tcp", "127.0.0.1", 13, 0.3, &r), 0);
		wait_settled(f, (f & F_KUBE) ? pods : 0);
	}
	return fds_settled(fx.d.pid);
}

static void daemon_down(void)
{
	ktest_daemon_cleanup(&fx.d);
	fx.d.pid = -1;
}

/* ---- control clients ---------------------------------------------------- */

/* Waits (bounded) until the daemon holds `want` fds; the count seen last. */
static int wait_fds(int want, int bound_ms)
{
	uint64_t t0 = ktest_now_ns();
	int n;

	while ((n = ktest_proc_fds(fx.d.pid)) != want && ktest_now_ns() - t0 < (uint64_t)bound_ms * 1000000ull)
		ktest_sleep_ms(5);
	return n;
}

/* Whether a client was sent something (the daemon's timeout or "too many
 * clients" line) or hung up on. */
static bool client_told(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, 0) == 1;
}

/* The 17th client: the oldest idle one (fd[0]) is told it was dropped to
 * make room, and the count stays base + N_CLIENTS. False when fd[0] was
 * timed out instead (a round stretched past 2 s). */
static bool one_too_many(int *fd, int base)
{
	char line[128] = "";
	ssize_t r;

	assert_true((fd[N_CLIENTS] = kt_daemonfx_connect(fx.d.socket)) >= 0);
	for (int i = 0; i < 200 && !client_told(fd[0]); i++)
		ktest_sleep_ms(5);
	r = read(fd[0], line, sizeof(line) - 1);
	line[r > 0 ? r : 0] = '\0';
	print_message("the oldest of %d clients was told: %s", N_CLIENTS + 1, line);
	if (strstr(line, "timed out"))
		return false;
	assert_non_null(strstr(line, "too many clients"));
	assert_int_equal(wait_fds(base + N_CLIENTS, 1000), base + N_CLIENTS);
	return true;
}

/* N_CLIENTS idle control clients at once are N_CLIENTS more fds (all within
 * the budget), a 17th takes the oldest one's slot, and closing them brings
 * the count back to base. An idle client is dropped after the daemon's 2 s
 * timeout: a round that a loaded machine stretched past it (a client was
 * told so) is run again, at most 3 times. */
static void clients_round_trip(int base)
{
	int fd[N_CLIENTS + 1], round;

	for (round = 0; round < 3; round++) {
		bool told = false, done = false;
		int n, m = N_CLIENTS;

		for (int i = 0; i < N_CLIENTS; i++)
			assert_true((fd[i] = kt_daemonfx_connect(fx.d.socket)) >= 0);
		n = wait_fds(base + N_CLIENTS, 1500);
		for (int i = 0; i < N_CLIENTS; i++)
			told = told || client_told(fd[i]);
		if (n == base + N_CLIENTS && !told) {
			print_message("%d fds with %d control clients connected\n", n, N_CLIENTS);
			assert_true(n <= KT_START_FDS);
			done = one_too_many(fd, base);
			m = N_CLIENTS + 1;
		} else {
			print_message("round %d: %d fds with %d clients (want %d)%s\n", round, n,
				      N_CLIENTS, base + N_CLIENTS, told ? ", a client timed out" : "");
		}
		for (int i = 0; i < m; i++)
			close(fd[i]);
		/* gone: the daemon sees the hang-ups and closes their fds */
		assert_int_equal(wait_fds(base, 5000), base);
		if (done)
			break;
	}
	assert_true(round < 3);
}

/* N_CLIENTS clients asking at once, each answered, twice over: the fds
 * they took are given back. */
static void clients_answered(int base)
{
	for (int r = 0; r < 2; r++) {
		int fd[N_CLIENTS];

		for (int i = 0; i < N_CLIENTS; i++) {
			assert_true((fd[i] = kt_daemonfx_connect(fx.d.socket)) >= 0);
			assert_int_equal(write(fd[i], "health\n", 7), 7);
		}
		for (int i = 0; i < N_CLIENTS; i++) {
			char buf[256];
			struct pollfd p = { .fd = fd[i], .events = POLLIN };

			assert_int_equal(poll(&p, 1, 5000), 1);
			assert_true(read(fd[i], buf, sizeof(buf)) > 0);
			close(fd[i]);
		}
	}
	assert_int_equal(wait_fds(base, 5000), base);
}

/* ---- tests -------------------------------------------------------------- */

/* Everything that holds a connection, under RLIMIT_NOFILE = KT_START_FDS. */
static void test_fds_within_start_budget(void **state)
{
	const unsigned all = F_POOL | F_STRICT | F_TAGS | F_KUBE;
	char kinds[1024];
	int base;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	base = daemon_up(all, 3, KT_START_FDS);
	fd_kinds(fx.d.pid, kinds, sizeof(kinds));
	print_message("%d fds at RLIMIT_NOFILE %d: %s\n", base, KT_START_FDS, kinds);
	/* what the budget is to cover is there: the pool's store, the strict
	 * limit's and the tag exchange's connections, and the watch */
	assert_int_equal(conns_to(fx.d.pid, fx.rp.port), 3);
	assert_int_equal(conns_to(fx.d.pid, fx.api.port), 1);
	assert_true(base + N_CLIENTS <= KT_START_FDS);
	clients_round_trip(base);
	clients_answered(base);
	/* the count did not creep while clients came and went */
	assert_int_equal(fds_settled(fx.d.pid), base);
	daemon_down();
}

/* The table: one daemon per row, its fds and memory (KT_RESOURCES_TABLE=1). */
static void test_table(void **state)
{
	static const struct {
		const char *what;
		unsigned f;
	} rows[] = {
		{ "1 local limit", 0 },
		{ "+ 1 limit on redis A", F_POOL },
		{ "+ 2 limits on redis A", F_POOL | F_POOL_B },
		{ "+ 1 limit on redis A, 1 on redis B", F_POOL | F_STORE2 },
		{ "+ 1 strict limit on redis A", F_STRICT },
		{ "+ pool and strict on redis A", F_POOL | F_STRICT },
		{ "+ tag limit (store redis A, query socket)", F_TAGS },
		{ "+ kube watch, 0 pods", F_KUBE },
		{ "+ 1 limit through a sentinel", F_SENTINEL },
		{ "+ 6 limits on a 3-master cluster", F_CLUSTER },
	};
	const char *env = getenv("KT_RESOURCES_PODS");
	char kinds[1024], list[128];

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	if (!getenv("KT_RESOURCES_TABLE")) {
		print_message("skipped: KT_RESOURCES_TABLE=1 prints the table\n");
		skip();
	}
	assert_int_equal(rp_start_sentinel(&fx.sent, &fx.rp, "ktres", 1, 5000, NULL), 0);
	assert_int_equal(rp_start_cluster(fx.cl, N_CL, 0), 0);
	printf("| daemon | fds | VmRSS kB | VmHWM kB | fds by kind |\n|---|---:|---:|---:|---|\n");
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		int n = daemon_up(rows[i].f, 0, 0);

		fd_kinds(fx.d.pid, kinds, sizeof(kinds));
		printf("| %s | %d | %ld | %ld | %s |\n", rows[i].what, n,
		       ktest_proc_status_kb(fx.d.pid, "VmRSS"), ktest_proc_status_kb(fx.d.pid, "VmHWM"),
		       kinds);
		fflush(stdout);
		daemon_down();
	}
	snprintf(list, sizeof(list), "%s", env && *env ? env : "100");
	for (char *s = strtok(list, ","); s; s = strtok(NULL, ",")) {
		int pods = atoi(s), n;

		assert_true(pods > 0 && pods <= MAX_PODS);
		n = daemon_up(F_KUBE, pods, 0);
		fd_kinds(fx.d.pid, kinds, sizeof(kinds));
		printf("| + kube watch, %d pods selected | %d | %ld | %ld | %s |\n", pods, n,
		       ktest_proc_status_kb(fx.d.pid, "VmRSS"), ktest_proc_status_kb(fx.d.pid, "VmHWM"),
		       kinds);
		fflush(stdout);
		daemon_down();
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_fds_within_start_budget, setup, teardown),
		cmocka_unit_test_setup_teardown(test_table, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
