// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The cluster fixture of the multi-node e2e tests (kt_clusterfx.h). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "kt_clusterfx.h"

void kt_clusterfx_begin(void *fx, size_t len, struct ktest_daemon *d, int n, pid_t *sender,
		       int *sender_fd)
{
	memset(fx, 0, len);
	for (int i = 0; i < n; i++) {
		d[i].pid = -1;
		if (sender)
			sender[i] = -1;
		if (sender_fd)
			sender_fd[i] = -1;
	}
}

void kt_clusterfx_nodes_end(struct ktest_daemon *d, int n, pid_t *sender, int *sender_fd)
{
	for (int i = 0; sender && i < n; i++) {
		ktest_kill_wait(&sender[i]);
		if (sender_fd[i] >= 0)
			close(sender_fd[i]);
	}
	for (int i = 0; i < n; i++)
		if (d[i].dir[0])
			ktest_daemon_cleanup(&d[i]);
}

void kt_clusterfx_cgroups_end(char (*cg)[PATH_MAX], int n)
{
	for (int i = 0; i < n; i++)
		if (cg[i][0])
			ktest_cgroup_destroy(cg[i]);
}

pid_t kt_clusterfx_fork(int *fd)
{
	pid_t parent = getpid(), pid;
	int p[2];

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(126);
		close(p[0]);
		*fd = p[1];
		return 0;
	}
	close(p[1]);
	*fd = p[0];
	return pid;
}

bool kt_clusterfx_reap(pid_t pid, int fd, void *r, size_t len, int *status)
{
	ssize_t n = read(fd, r, len);

	*status = -1;
	close(fd);
	assert_int_equal(waitpid(pid, status, 0), pid);
	return n == (ssize_t)len && WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
}

/* The sender's body (in the child): never returns. */
static void pace(const char *cg, const int *ports, int n, double secs, int per_s, int out)
{
	const long step_ns = 1000000000L / per_s;
	const unsigned long long max_ops = (unsigned long long)(secs * per_s * 2) + 10;
	struct sockaddr_in sa[KT_CLUSTERFX_PORTS];
	struct kt_clusterfx_sent r = { 0 };
	struct timespec next, now;
	uint64_t end;
	int fd;

	for (int l = 0; l < n; l++)
		sa[l] = (struct sockaddr_in){ .sin_family = AF_INET,
					      .sin_port = htons((uint16_t)ports[l]),
					      .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	/* join first: the cgroup programs see the cgroup a socket was made in */
	if (ktest_cgroup_join(cg) != 0)
		_exit(3);
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		_exit(4);
	end = ktest_now_ns() + (uint64_t)(secs * 1e9);
	clock_gettime(CLOCK_MONOTONIC, &next);
	for (unsigned long long i = 0; i < max_ops && ktest_now_ns() < end; i++) {
		int l = (int)(i % (unsigned long long)n);

		if (sendto(fd, "x", 1, 0, (struct sockaddr *)&sa[l], sizeof(sa[l])) >= 0)
			r.ok[l]++;
		else if (errno == EBUSY)
			r.refused[l]++;
		else
			r.errors[l]++;
		next.tv_nsec += step_ns;
		if (next.tv_nsec >= 1000000000L) {
			next.tv_sec++;
			next.tv_nsec -= 1000000000L;
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec > next.tv_sec + 1 ||
		    (now.tv_sec - next.tv_sec) * 1000000000L + (now.tv_nsec - next.tv_nsec) > 50000000L)
			next = now; /* > 50 ms behind: resume from now */
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
	}
	_exit(write(out, &r, sizeof(r)) == sizeof(r) ? 0 : 5);
}

pid_t kt_clusterfx_sender_start(const char *cg, const int *ports, int n, double secs, int per_s,
				int *fd)
{
	pid_t pid;

	assert_true(n >= 1 && n <= KT_CLUSTERFX_PORTS && per_s > 0);
	pid = kt_clusterfx_fork(fd);
	if (pid == 0)
		pace(cg, ports, n, secs, per_s, *fd);
	return pid;
}

bool kt_clusterfx_sender_wait(pid_t *pid, int *fd, int node, struct kt_clusterfx_sent *r)
{
	int status = -1;
	bool ok;

	memset(r, 0, sizeof(*r));
	if (*pid <= 0)
		return false;
	ok = kt_clusterfx_reap(*pid, *fd, r, sizeof(*r), &status);
	*fd = -1;
	*pid = -1;
	if (!ok) {
		print_message("sender in n%d's cgroup failed (status 0x%x)\n", node, status);
		fail();
	}
	return true;
}

char *kt_clusterfx_node_yaml(int i, const struct kt_clusterfx_pool *p, const char *store,
			     const char *limits)
{
	char *body;

	assert_true(asprintf(&body,
			     "node: n%d\n"
			     "tickInterval: %dms\n"
			     "store:\n"
			     "  redisStore: %s\n"
			     "  heartbeat: %dms\n"
			     "  staleAfter: %d\n"
			     "  validFor: %dms\n"
			     "  onStoreFailure: conservative\n"
			     "limits:\n%s",
			     i, p->tick_ms, store, p->hb_ms, p->stale, p->valid_ms, limits) > 0);
	return body;
}

void kt_clusterfx_dump_node(const struct ktest_daemon *d, int i, int lines)
{
	char tag[16];

	snprintf(tag, sizeof(tag), "n%d", i);
	ktest_daemon_dump(d, tag, lines);
}

void kt_clusterfx_node_config(struct ktest_daemon *d, int i, const struct kt_clusterfx_pool *p,
			      const char *store, const char *limits)
{
	char *body = kt_clusterfx_node_yaml(i, p, store, limits);

	assert_int_equal(ktest_daemon_config(d, body), 0);
	free(body);
}

void kt_clusterfx_add_limit(char *buf, size_t len, const struct kt_clusterfx_limit *l)
{
	size_t off = strlen(buf);
	int n;

	n = snprintf(buf + off, len - off,
		     "  - name: %s\n"
		     "    cgroups: [%s]\n"
		     "    match: {cidrs: [127.0.0.1/32], ports: %d, protocol: udp}\n"
		     "    unit: datagram\n"
		     "%s%s%s"
		     "    burst: %g\n",
		     l->name, l->cgroups, l->port, l->scope ? "    scope: " : "",
		     l->scope ? l->scope : "", l->scope ? "\n" : "", l->burst);
	assert_true(n >= 0 && (size_t)n < len - off);
	off += (size_t)n;
	if (l->rate)
		n = snprintf(buf + off, len - off, "    rateLimit:%s", l->rate);
	else
		n = snprintf(buf + off, len - off, "    rateLimit: {max: %g, min: %g%s}\n", l->max,
			     l->min, l->rl_extra ? l->rl_extra : "");
	assert_true(n >= 0 && (size_t)n < len - off);
}

unsigned kt_clusterfx_lst_read(const char *js, const char *limit, struct kt_clusterfx_lst *s)
{
	const struct {
		const char *name;
		double *v;
		unsigned bit;
	} nums[] = {
		{ "size", &s->size, KT_LST_SIZE },
		{ "live", &s->live, KT_LST_LIVE },
		{ "pool_rate", &s->pool_rate, KT_LST_POOL_RATE },
		{ "bucket_rate", &s->bucket_rate, KT_LST_BUCKET_RATE },
		{ "burst", &s->burst, KT_LST_BURST },
		{ "max", &s->max, KT_LST_MAX },
		{ "reserved", &s->reserved, KT_LST_RESERVED },
		{ "fallback_rate", &s->fallback_rate, KT_LST_FALLBACK_RATE },
		{ "lease_left_s", &s->lease_left_s, KT_LST_LEASE_LEFT },
		{ "admitted", &s->admitted, KT_LST_ADMITTED },
		{ "share", &s->share, KT_LST_SHARE },
	};
	uint64_t t_ns = s->t_ns;
	unsigned got = 0;

	memset(s, 0, sizeof(*s));
	s->t_ns = t_ns;
	if (ktest_json_limit_str(js, limit, "phase", s->phase, sizeof(s->phase)))
		got |= KT_LST_PHASE;
	if (ktest_json_limit_str(js, limit, "state", s->state, sizeof(s->state)))
		got |= KT_LST_STATE;
	if (ktest_json_limit_str(js, limit, "endpoint", s->endpoint, sizeof(s->endpoint)))
		got |= KT_LST_ENDPOINT;
	for (size_t k = 0; k < sizeof(nums) / sizeof(nums[0]); k++) {
		double v = 0;

		if (ktest_json_limit_num(js, limit, nums[k].name, &v)) {
			*nums[k].v = v;
			got |= nums[k].bit;
		}
	}
	return got;
}

unsigned kt_clusterfx_lst_get(const struct ktest_daemon *d, const char *limit,
			      struct kt_clusterfx_lst *s)
{
	char *js;
	unsigned got;

	memset(s, 0, sizeof(*s));
	s->t_ns = ktest_now_ns();
	js = ktest_daemon_cmd(d, "status json");
	if (!js)
		return 0;
	got = kt_clusterfx_lst_read(js, limit, s);
	free(js);
	return got;
}

bool kt_clusterfx_agreed(const struct kt_clusterfx_lst *s, int size)
{
	return !strcmp(s->phase, "agreed") && !strcmp(s->state, "up") && s->size == size &&
	       s->live == size;
}

void kt_clusterfx_run_node(struct ktest_daemon *d, int i, void (*dump)(int i))
{
	int code = -1;

	if (ktest_daemon_start(d, 5000, &code) != 0) {
		print_message("kthrottled n%d did not start (exit %d)\n", i, code);
		dump(i);
		fail();
	}
}

void kt_clusterfx_run_nodes(struct ktest_daemon *d, int n, void (*dump)(int i))
{
	uint64_t t0 = ktest_now_ns();

	/* side by side: each one's BPF load and verification overlaps the others' */
	for (int i = 0; i < n; i++)
		if (ktest_daemon_spawn_flag(&d[i], NULL) != 0) {
			print_message("kthrottled n%d: fork failed\n", i);
			fail();
		}
	for (int i = 0; i < n; i++) {
		/* the same 5 s as kt_clusterfx_run_node, counted from the spawn */
		int64_t left = 5000 - (int64_t)((ktest_now_ns() - t0) / 1000000);
		int code = -1;

		if (ktest_daemon_await(&d[i], left > 0 ? (int)left : 1, &code) != 0) {
			print_message("kthrottled n%d did not start (exit %d)\n", i, code);
			dump(i);
			fail();
		}
	}
}

void kt_clusterfx_check_measurement(const struct arrivals *a, const char *name,
				    unsigned long long sent_ok)
{
	print_message("%s: arrived %llu, senders sent %llu, receiver drops %llu\n", name,
		      arrivals_total(a), sent_ok, arrivals_drops(a));
	assert_int_equal(arrivals_drops(a), 0);
	assert_int_equal(arrivals_total(a), sent_ok);
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

bool kt_clusterfx_gaps(const uint64_t *t, int n, double every_ms, struct kt_clusterfx_gaps *g)
{
	double *err;
	int ne = 0;

	memset(g, 0, sizeof(*g));
	g->lo = 1e9;
	if (n < 2)
		return false;
	err = calloc((size_t)n, sizeof(*err));
	assert_non_null(err);
	for (int k = 1; k < n; k++) {
		double gap = (double)(t[k] - t[k - 1]) / 1e6;

		if (gap < g->lo)
			g->lo = gap;
		err[ne++] = gap - every_ms;
	}
	qsort(err, (size_t)ne, sizeof(*err), cmp_dbl);
	g->p50 = err[ne / 2];
	g->p99 = err[(ne * 99) / 100 < ne ? (ne * 99) / 100 : ne - 1];
	g->hi = err[ne - 1] + every_ms;
	free(err);
	return true;
}
