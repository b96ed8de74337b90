/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * `make bench`'s sendto section (tests/bench/bench.c runs it), both phases:
 *   sendto   unconnected UDP sendto() to 127.0.0.1 from a test
 *            cgroup: no filter, empty sendmsg4 + egress programs,
 *            build/kthrottled (admitted, refused, unmatched) and, when nft is
 *            installed, an nftables limit rule and a 1,000-cgroup verdict map
 *            (tables kt_bench_<pid>_*, each in its worker's own network
 *            namespace, always deleted); one long-lived worker per mode,
 *            short chunks paired with the baseline chunks around them; senders
 *            1 and 4 cgroups below kthrottle's member; and the programs' own
 *            time per run from BPF run-time statistics; then a second daemon
 *            with 1,000 limits on one destination (a member cgroup each), a
 *            1-limit comparison and 1 limit with 1,000 pods (st_scale)
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <bpf/bpf.h>
#include "members/plan.h"
#include "ktest.h"
#include "kthrottle.h"
#include "bench.h"

/* ---- section: UDP sendto() against nftables ---- */

/* What a user comparing kthrottle with nftables sees: the cost of one
 * unconnected UDP sendto() to 127.0.0.1 from a process in a test cgroup,
 * with nothing, empty programs, kthrottled's programs, or nft rules in the
 * way. The machine's speed drifts over seconds, more than the overheads
 * measured, so one long-lived worker per mode (in its cgroup, socket bound
 * and warm) is driven over pipes in short chunks, and every mode's chunk is
 * paired with the mean of the baseline chunks run just before and just after
 * it; a row's delta is the median of those paired deltas over many rounds
 * (± half their interquartile range).
 *
 * Every worker sends in a network namespace of its own (with only lo up, and
 * its receiver bound with the smallest receive buffer and never read, so the
 * datagrams are dropped at a full socket: no ICMP). An nft table hooks the
 * output path of its whole namespace, so each nft mode's table is loaded in
 * its worker's namespace only, for the whole run: no other mode pays for it
 * (the kernel's switch for a hook is global, but elsewhere it costs a test
 * of an empty hook list; measured: the baseline row with and without a
 * table loaded). The other
 * modes get namespaces too, so every sender has the same stack around it
 * (only lo, no host rules); cgroup programs do not care about namespaces.
 * All cgroups are children of kt-test-<pid>-sendto (level 2, which the nft
 * rules name). */

#define ST_FILLERS 999      /* + the sender's cgroup: a 1,000-entry verdict map */
#define ST_CHUNK 3000       /* calls per measured chunk: 3-6 ms */
#define ST_CHUNK_QUICK 2000
#define ST_ROUNDS 60        /* rounds of one chunk per mode, each between baseline chunks */
#define ST_ROUNDS_QUICK 15
#define ST_MAX_ROUNDS 64    /* median() takes at most 64 values */
#define ST_SUBS 9           /* slices per chunk, timed one by one */
#define ST_WARMUP 2000      /* calls before the first measured chunk */
#define ST_TABLE_CYCLES 24  /* baseline chunk pairs with / without an nft table loaded */
#define ST_PORT 9000        /* in the workers' own namespaces: any port is free */
#define ST_PORT_REFUSE 9001
#define ST_PORT_UNMATCH 9002

enum { ST_BASE, ST_CONTROL, ST_EMPTY, ST_KT_ADMIT, ST_KT_REFUSE, ST_KT_UNMATCH, ST_NFT_LIMIT,
       ST_NFT_VMAP, ST_NEST1, ST_NEST4, ST_KT_OTHER, ST_N };

struct st_result {
	long n, errors, refused;
	int last_errno;
	double ns_per_call; /* of the median slice */
};

/* A measuring worker: it runs `n` calls per command (n <= 0: exit) and
 * answers with a struct st_result. */
struct st_worker {
	pid_t pid;
	int cmd, res; /* pipe ends: commands to it, results from it */
	int netns;    /* its network namespace, for nft */
	long sent;    /* calls made, warm-up included */
};

static int st_lo_up(void)
{
	struct ifreq ifr = { 0 };
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), ret = 0;

	if (fd < 0)
		return -errno;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) < 0)
		ret = -errno;
	ifr.ifr_flags |= IFF_UP;
	if (!ret && ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
		ret = -errno;
	close(fd);
	return ret;
}

/* A UDP receiver on 127.0.0.1:port that is never read: the smallest buffer
 * the kernel allows fills at once and every later datagram is dropped there. */
static int st_receiver(uint16_t port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int one = 1;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

/* n calls, timed in ST_SUBS slices; r->ns_per_call is the median slice's:
 * a slice in which another task had the CPU is dropped, not averaged in. */
static void st_send(int fd, const struct sockaddr_in *sa, long n, struct st_result *r)
{
	double slice[ST_SUBS];
	char byte = 'x';
	long done = 0;

	for (int s = 0; s < ST_SUBS; s++) {
		long k = (n * (s + 1)) / ST_SUBS - done;
		uint64_t t0 = now_ns();

		for (long i = 0; i < k; i++) {
			if (sendto(fd, &byte, 1, 0, (const struct sockaddr *)sa, sizeof(*sa)) == 1)
				continue;
			if (errno == KT_REFUSE_ERRNO) {
				r->refused++;
			} else {
				r->errors++;
				r->last_errno = errno;
			}
		}
		slice[s] = k ? (double)(now_ns() - t0) / (double)k : NAN;
		done += k;
	}
	r->ns_per_call = median(slice, ST_SUBS);
	r->n = n;
}

static void st_worker_main(const char *cgroup, uint16_t port, int cmd, int res)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct st_result r = { 0 };
	long n;
	int fd = -1, rfd, ret;

	pin_cpu(0);
	ret = unshare(CLONE_NEWNET) < 0 ? -errno : st_lo_up();
	/* the receiver before joining: its socket stays in the bench's cgroup,
	 * where no program of the sender's cgroup runs for it */
	rfd = ret ? ret : st_receiver(port);
	ret = rfd < 0 ? rfd : ktest_cgroup_join(cgroup);
	if (!ret)
		fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		r.errors = 1;
		r.last_errno = ret ? -ret : errno;
	} else {
		/* the first send binds the socket; the rest warm caches and
		 * branch predictors; a refused mode's first one or two pass */
		st_send(fd, &sa, ST_WARMUP, &r);
	}
	if (write(res, &r, sizeof(r)) != (ssize_t)sizeof(r) || fd < 0)
		_exit(1);
	while (read(cmd, &n, sizeof(n)) == (ssize_t)sizeof(n) && n > 0) {
		memset(&r, 0, sizeof(r));
		st_send(fd, &sa, n, &r);
		if (write(res, &r, sizeof(r)) != (ssize_t)sizeof(r))
			break;
	}
	_exit(0);
}

static int st_read_result(int fd, struct st_result *r)
{
	size_t got = 0;

	while (got < sizeof(*r)) {
		ssize_t n = read(fd, (char *)r + got, sizeof(*r) - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -EIO;
		got += (size_t)n;
	}
	return 0;
}

static void st_worker_stop(struct st_worker *w)
{
	int status;

	long stop = 0;

	if (w->netns >= 0)
		close(w->netns);
	/* told, not left to see EOF: later workers hold copies of this pipe */
	if (w->cmd >= 0 && write(w->cmd, &stop, sizeof(stop)) != (ssize_t)sizeof(stop) &&
	    w->pid > 0)
		kill(w->pid, SIGKILL);
	if (w->cmd >= 0)
		close(w->cmd);
	if (w->res >= 0)
		close(w->res);
	if (w->pid > 0)
		while (waitpid(w->pid, &status, 0) < 0 && errno == EINTR)
			;
	w->pid = -1;
	w->cmd = w->res = w->netns = -1;
}

/* Starts a worker in `cgroup` sending to 127.0.0.1:port and waits for its
 * warm-up; *warm is that result. 0 or -errno. */
static int st_worker_start(struct st_worker *w, const char *cgroup, uint16_t port,
			   struct st_result *warm)
{
	int c[2], r[2], ret;
	char ns[64];

	w->pid = -1;
	w->cmd = w->res = w->netns = -1;
	if (pipe2(c, O_CLOEXEC) < 0)
		return -errno;
	if (pipe2(r, O_CLOEXEC) < 0) {
		ret = -errno;
		close(c[0]);
		close(c[1]);
		return ret;
	}
	fflush(NULL);
	w->pid = fork();
	if (w->pid == 0) {
		pid_t parent = getppid();

		close(c[1]);
		close(r[0]);
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		st_worker_main(cgroup, port, c[0], r[1]);
	}
	ret = w->pid < 0 ? -errno : 0;
	close(c[0]);
	close(r[1]);
	w->cmd = c[1];
	w->res = r[0];
	if (ret) {
		st_worker_stop(w);
		return ret;
	}
	ret = st_read_result(w->res, warm);
	if (!ret && warm->errors && warm->n == 0)
		ret = -warm->last_errno;
	w->sent = warm->n;
	snprintf(ns, sizeof(ns), "/proc/%d/ns/net", w->pid);
	if (!ret && (w->netns = open(ns, O_RDONLY | O_CLOEXEC)) < 0)
		ret = -errno;
	if (ret) {
		fprintf(stderr, "bench: sendto: worker in %s: %s\n", cgroup, strerror(-ret));
		st_worker_stop(w);
	}
	return ret;
}

static int st_chunk(struct st_worker *w, long n, struct st_result *r)
{
	if (write(w->cmd, &n, sizeof(n)) != (ssize_t)sizeof(n) || st_read_result(w->res, r))
		return -EIO;
	w->sent += r->n;
	return 0;
}

/* r0 = 1; exit: what running any one program at that hook costs. */
static int st_empty_prog(enum bpf_prog_type type, enum bpf_attach_type at)
{
	const struct bpf_insn insns[] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 1 },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	LIBBPF_OPTS(bpf_prog_load_opts, o, .expected_attach_type = at);

	return bpf_prog_load(type, "kt_st_empty", "GPL", insns, 2, &o);
}

/* nft -f / nft delete table, in network namespace `netns`; quiet unless it
 * fails (a delete of a table that is not there is no failure). The bench
 * itself steps into the namespace and back: nft inherits it. */
static int st_nft(int netns, const char *nft, const char *a1, const char *a2, const char *a3,
		  const char *a4)
{
	char *argv[] = { (char *)nft, (char *)a1, (char *)a2, (char *)a3, (char *)a4, NULL };
	char *out = NULL;
	int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC), rc;

	if (self < 0 || setns(netns, CLONE_NEWNET) < 0) {
		rc = -errno;
		fprintf(stderr, "bench: sendto: cannot enter a worker's netns: %s\n", strerror(-rc));
		if (self >= 0)
			close(self);
		return rc;
	}
	rc = ktest_run_capture(argv, &out);
	if (setns(self, CLONE_NEWNET) < 0) {
		/* nothing after this could be trusted to run where it should */
		fprintf(stderr, "bench: sendto: cannot return to the bench's netns: %s\n",
			strerror(errno));
		_exit(1);
	}
	close(self);
	if (rc && strcmp(a1, "delete"))
		fprintf(stderr, "bench: sendto: nft %s %s: exit %d: %s", a1, a2, rc, out ? out : "");
	free(out);
	return rc ? -EIO : 0;
}

/* The two rulesets, written to files that `nft -f` loads. limit: UDP to
 * ST_PORT from sockets in the sender's cgroup, through one token bucket that
 * never runs out (1e9/s) - the shape of kthrottle's admitted path: cgroup +
 * port + bucket. vmap: the same, with the cgroup looked up in a 1,000-entry
 * verdict map, each entry jumping to its own chain with its own limit - one
 * limit per tenant. */
static int st_write_rules(const char *path, const char *table, const char *cgrel,
			  const char *parent_rel, bool vmap, const char *verdict)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return -errno;
	fprintf(f, "table inet %s {\n", table);
	if (!vmap) {
		fprintf(f, "  chain out {\n    type filter hook output priority 0; policy accept;\n"
			   "    udp dport %u socket cgroupv2 level 2 \"%s\" %s;\n  }\n}\n",
			ST_PORT, cgrel, verdict);
	} else {
		for (int i = 0; i <= ST_FILLERS; i++)
			fprintf(f, "  chain t%d { %s; }\n", i, verdict);
		fprintf(f, "  chain out {\n    type filter hook output priority 0; policy accept;\n"
			   "    udp dport %u socket cgroupv2 level 2 vmap {\n      \"%s\" : jump t0",
			ST_PORT, cgrel);
		for (int i = 1; i <= ST_FILLERS; i++)
			fprintf(f, ",\n      \"%s/f%d\" : jump t%d", parent_rel, i, i);
		fprintf(f, "\n    };\n  }\n}\n");
	}
	return fclose(f) ? -EIO : 0;
}

/* Half the interquartile range of v: how far a paired delta typically
 * strays from the median, shown next to it. */
static double st_half_iqr(const double *v, int n)
{
	double s[ST_MAX_ROUNDS];

	if (n < 4 || n > ST_MAX_ROUNDS)
		return NAN;
	memcpy(s, v, (size_t)n * sizeof(*v));
	qsort(s, (size_t)n, sizeof(*s), cmp_double);
	return (s[(3 * n) / 4] - s[n / 4]) / 2;
}

static double st_ns(const struct st_result *r)
{
	return r->n ? r->ns_per_call : NAN;
}

/* Whether the baseline moves when an nft table is loaded in another
 * namespace: baseline chunks alternately with and without the limit table in
 * the nft worker's namespace, paired. Each nft run is followed by one chunk
 * that is not kept: the nft process itself evicts caches. Median of (with -
 * without), or NAN. */
static double st_table_check(struct st_worker *base, struct st_worker *nftw, const char *nft,
			     const char *rules, const char *table, long chunk)
{
	double d[ST_TABLE_CYCLES];
	struct st_result r;
	bool ok = true;
	int n = 0;

	for (int c = 0; c < ST_TABLE_CYCLES && !g_stop; c++) {
		double v[2]; /* without, with */

		/* alternate which comes first, so a steady drift cancels */
		for (int k = 0; k < 2; k++) {
			int with = (k + c) % 2;

			/* an nft run before either, so both follow one */
			if (with)
				ok = ok && st_nft(nftw->netns, nft, "-f", rules, NULL, NULL) == 0;
			else
				st_nft(nftw->netns, nft, "delete", "table", "inet", table);
			ok = ok && st_chunk(base, chunk, &r) == 0 && st_chunk(base, chunk, &r) == 0;
			v[with] = st_ns(&r);
		}
		if (!ok)
			break;
		d[n++] = v[1] - v[0];
		if (getenv("KT_BENCH_VERBOSE"))
			fprintf(stderr, "bench: sendto table check %d: without %.0f with %.0f ns/call\n", c,
				v[0], v[1]);
	}
	st_nft(nftw->netns, nft, "delete", "table", "inet", table);
	return ok && n ? median(d, n) : NAN;
}

/* The second view: in-kernel time per program run from BPF run-time
 * statistics (bpf_enable_stats), read before and after each chunk of a mode:
 * no scheduling, syscall or receive path in it, so it is far steadier than
 * the sendto() timings. Stats add a fixed cost to every run (two clock
 * reads), the same for an empty program: kthrottle − empty removes it. */

#define ST_STATS_ROUNDS 30
#define ST_STATS_ROUNDS_QUICK 5
#define ST_MAX_PROGS 8 /* per hook a cgroup's sender runs */
_Static_assert(ST_ROUNDS <= ST_MAX_ROUNDS && ST_STATS_ROUNDS <= ST_MAX_ROUNDS,
	       "rounds are kept in arrays of ST_MAX_ROUNDS");

enum { ST_HOOK_SENDMSG, ST_HOOK_EGRESS, ST_N_HOOKS };

struct st_progs {
	int n;
	int fd[ST_MAX_PROGS];
};

/* The programs that run for a sender in `cgroup` at hook `at` (its own and
 * its ancestors'), as fds in *p. 0 or -errno. */
static int st_query(const char *cgroup, enum bpf_attach_type at, struct st_progs *p)
{
	return cgroup_progs(cgroup, at, p->fd, ST_MAX_PROGS, &p->n);
}

/* Run time and run count summed over the programs in p. */
static void st_prog_stats(const struct st_progs *p, uint64_t *ns, uint64_t *cnt)
{
	progs_run_stats(p->fd, p->n, ns, cnt);
}

/* One chunk of worker w with stats read around it: ns per run of the
 * programs at each hook (NAN: none ran) and their ns per call together. */
static int st_stats_chunk(struct st_worker *w, const struct st_progs *progs, long n,
			  double run[ST_N_HOOKS], double *per_call)
{
	uint64_t t0[ST_N_HOOKS], c0[ST_N_HOOKS], t1, c1;
	struct st_result res;
	int ret;

	for (int h = 0; h < ST_N_HOOKS; h++)
		st_prog_stats(&progs[h], &t0[h], &c0[h]);
	ret = st_chunk(w, n, &res);
	if (ret)
		return ret;
	*per_call = 0;
	for (int h = 0; h < ST_N_HOOKS; h++) {
		st_prog_stats(&progs[h], &t1, &c1);
		run[h] = c1 > c0[h] ? (double)(t1 - t0[h]) / (double)(c1 - c0[h]) : NAN;
		*per_call += (double)(t1 - t0[h]) / (double)n;
		/* every sendto() ran the sendmsg4 programs */
		sanity(h != ST_HOOK_SENDMSG || c1 - c0[h] >= (uint64_t)n,
		       "sendto: sendmsg4 programs ran %llu times for %ld calls",
		       (unsigned long long)(c1 - c0[h]), n);
	}
	sanity(res.n == n && res.errors == 0, "sendto: bpf_stats chunk: %ld of %ld sent, %ld errors",
	       res.n, n, res.errors);
	return 0;
}

/* A row of the bpf_stats view: value (ns) against a baseline (ns), the delta
 * the median of the per-chunk paired differences; base NAN: value only. */
static void row_stat(const char *what, double value, double base, double delta)
{
	struct row *r = row_new(what);

	if (!r)
		return;
	snprintf(r->value, sizeof(r->value), "%.1f ns", value);
	if (!isnan(base)) {
		snprintf(r->baseline, sizeof(r->baseline), "%.1f ns", base);
		snprintf(r->delta, sizeof(r->delta), "%+.1f ns", delta);
	}
}

/* ---- sendto, second phase: the admitted cost at scale ----
 *
 * After the main rounds, with the first daemon stopped (one daemon on k at a
 * time), a second daemon runs, twice: with 1,000 and with 10,000 limits
 * (ST_SCALE_LIMITS[]):
 *   - limits l0..l<n-1>, all on the same destination (127.0.0.1, ST_PORT,
 *     udp, datagram); the first ST_SCALE_MEMBERS each have their own member
 *     cgroup k/p<i> (the sender is in the last one); the rest name a cgroup
 *     that does not exist on this node (k/elsewhere<i>: limits whose pods
 *     run on other nodes), so they only fill the tables;
 *   - one limit `one` on a destination no other limit covers (ST_PORT_ONE),
 *     member k/one: the 1-limit comparison, in the same daemon and run;
 *   - one pod-scope limit `pods` (ST_PORT_PODS) whose member cgroups are the
 *     ST_SCALE_PODS cgroups k/q<i> (a glob; a bucket each, chained to the
 *     limit's node bucket; the sender is in the last one);
 *   - a hierarchy of three limits h0 <- h1 <- h2 (parent:) on ST_PORT_HIER,
 *     all three on member k/h, the sender: each call is charged to all
 *     three levels (the target: at most about 2x one level).
 * Each mode's chunk is paired with the baseline chunks around it as in the
 * main rounds, and n limits − 1 limit is the median of the paired
 * per-round differences. */

static const int ST_SCALE_LIMITS[] = { 1000, 10000 };
#define ST_SCALE_RUNS (int)(sizeof(ST_SCALE_LIMITS) / sizeof(ST_SCALE_LIMITS[0]))
#define ST_SCALE_MAX_LIMITS 10000
#define ST_SCALE_MEMBERS 1000 /* limits with a member cgroup on this node */
#define ST_SCALE_PODS 1000
#define ST_PORT_ONE 9003
#define ST_PORT_PODS 9004
#define ST_PORT_HIER 9005
#define ST_HIER_MAX_RATIO 2.0 /* target: a call charged to 3 levels within 2x one level */
#define ST_SCALE_FLAT_NS 10.0 /* target: 1,000s of limits or pods within ±10 ns of 1 limit */
_Static_assert(ST_SCALE_MAX_LIMITS + 2 <= KT_MAX_LIMITS, "the scale phase's limits fit the tables");
_Static_assert(ST_SCALE_PODS <= KT_MAX_MEMBERS_PER_LIMIT, "one limit holds the scale phase's pods");
_Static_assert(ST_SCALE_MEMBERS + ST_SCALE_PODS + 3 <= KT_MAX_BUCKETS,
	       "the scale phase's pod-scope buckets fit the tables");
_Static_assert(ST_SCALE_MEMBERS + ST_SCALE_PODS + 1 <= KT_MAX_MEMBERSHIPS,
	       "the scale phase's members fit the tables");

enum { SC_MANY, SC_ONE, SC_PODS, SC_HIER, SC_N };

/* Appends to a malloc'd buffer of fixed size; false once it would overflow. */
static bool st_cat(char *buf, size_t cap, size_t *len, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static bool st_cat(char *buf, size_t cap, size_t *len, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (*len >= cap)
		return false;
	va_start(ap, fmt);
	n = vsnprintf(buf + *len, cap - *len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= cap - *len) {
		*len = cap;
		return false;
	}
	*len += (size_t)n;
	return true;
}

static char *st_scale_yaml(const char *kdir, int n_limits)
{
	/* one limit's text is under 256 bytes plus its cgroup path */
	size_t cap = (size_t)(n_limits + 2) * (256 + strlen(kdir)) + 1024, len = 0;
	char *y = malloc(cap);
	bool ok;

	if (!y)
		return NULL;
	/* 1 s ticks: the controller's per-limit work stays out of the timings */
	ok = st_cat(y, cap, &len, "tickInterval: 1s\nlimits:\n");
	for (int i = 0; ok && i < n_limits; i++)
		ok = st_cat(y, cap, &len,
			    "  - name: l%d\n"
			    "    cgroups: [%s/%s%d]\n"
			    "    match: {cidrs: [127.0.0.1/32], ports: %u, protocol: udp}\n"
			    "    unit: datagram\n"
			    "    rateLimit: {max: 1000000000}\n",
			    i, kdir, i < ST_SCALE_MEMBERS ? "p" : "elsewhere", i, ST_PORT);
	ok = ok && st_cat(y, cap, &len,
			  "  - name: one\n"
			  "    cgroups: [%s/one]\n"
			  "    match: {cidrs: [127.0.0.1/32], ports: %u, protocol: udp}\n"
			  "    unit: datagram\n"
			  "    rateLimit: {max: 1000000000}\n"
			  /* pod scope: the pool rate divides by the pods */
			  "  - name: pods\n"
			  "    cgroups: [\"%s/q*\"]\n"
			  "    match: {cidrs: [127.0.0.1/32], ports: %u, protocol: udp}\n"
			  "    unit: datagram\n"
			  "    scope: pod\n"
			  "    rateLimit: {max: 1000000000000}\n",
			  kdir, ST_PORT_ONE, kdir, ST_PORT_PODS);
	/* three levels, all on the sender's cgroup: the deepest classifies */
	for (int h = 0; ok && h < 3; h++)
		ok = st_cat(y, cap, &len,
			    "  - name: h%d\n"
			    "    cgroups: [%s/h]\n"
			    "    match: {cidrs: [127.0.0.1/32], ports: %u, protocol: udp}\n"
			    "    unit: datagram\n"
			    "%s%s%s"
			    "    rateLimit: {max: 1000000000}\n",
			    h, kdir, ST_PORT_HIER, h ? "    parent: h" : "", h ? (h == 1 ? "0" : "1") : "",
			    h ? "\n" : "");
	if (!ok) {
		fprintf(stderr, "bench: sendto: the scale config does not fit %zu bytes\n", cap);
		free(y);
		return NULL;
	}
	return y;
}

/* The second phase; `base` is the main rounds' baseline worker, kdir the
 * cgroup k. Everything it creates it removes, also on failure or SIGINT. */
static int st_scale(const char *kdir, struct st_worker *base, long chunk, int rounds, int srounds,
		    int n_limits)
{
	static const char *const sc_name[SC_N] = { "l999", "one", "pods", "h2" };
	char sc_tag[SC_N][48], nl[16];
	struct ktest_daemon d = { .pid = -1 };
	struct st_worker w[SC_N];
	struct dsnap s0[SC_N], s1[SC_N];
	char cg[SC_N][PATH_MAX + 16], p[PATH_MAX + 16], *yaml = NULL;
	double ns[SC_N][ST_MAX_ROUNDS] = { { 0 } }, delta[SC_N][ST_MAX_ROUNDS] = { { 0 } };
	double base_ns[ST_MAX_ROUNDS] = { 0 }, minus_one[SC_N][ST_MAX_ROUNDS] = { { 0 } };
	double kt_call[SC_N][ST_MAX_ROUNDS] = { { 0 } }, kt_minus_one[SC_N][ST_MAX_ROUNDS] = { { 0 } };
	struct st_progs progs[ST_N_HOOKS] = { 0 };
	const enum bpf_attach_type hook_at[ST_N_HOOKS] = { BPF_CGROUP_UDP4_SENDMSG,
							   BPF_CGROUP_INET_EGRESS };
	static const uint16_t port[SC_N] = { ST_PORT, ST_PORT_ONE, ST_PORT_PODS, ST_PORT_HIER };
	int np = 0, nq = 0, ret = 0, code = -1, stats_fd = -1;
	bool one_made = false, hier_made = false;
	double start_s = NAN, ready_s = NAN;
	uint64_t t0;

	snprintf(nl, sizeof(nl), "%d,%03d", n_limits / 1000, n_limits % 1000);
	snprintf(sc_tag[SC_MANY], sizeof(sc_tag[SC_MANY]), "%s limits", nl);
	snprintf(sc_tag[SC_ONE], sizeof(sc_tag[SC_ONE]), "1 limit");
	snprintf(sc_tag[SC_PODS], sizeof(sc_tag[SC_PODS]), "%d,%03d pods (%s limits)",
		 ST_SCALE_PODS / 1000, ST_SCALE_PODS % 1000, nl);
	snprintf(sc_tag[SC_HIER], sizeof(sc_tag[SC_HIER]), "3 levels (parent:, %s limits)", nl);
	for (int m = 0; m < SC_N; m++)
		w[m] = (struct st_worker){ .pid = -1, .cmd = -1, .res = -1, .netns = -1 };
	snprintf(cg[SC_ONE], sizeof(cg[SC_ONE]), "%s/one", kdir);
	snprintf(cg[SC_MANY], sizeof(cg[SC_MANY]), "%s/p%d", kdir, ST_SCALE_MEMBERS - 1);
	snprintf(cg[SC_PODS], sizeof(cg[SC_PODS]), "%s/q%d", kdir, ST_SCALE_PODS - 1);
	snprintf(cg[SC_HIER], sizeof(cg[SC_HIER]), "%s/h", kdir);
	if (mkdir(cg[SC_ONE], 0755) < 0 && errno != EEXIST) {
		ret = -errno;
		fprintf(stderr, "bench: sendto: %s: %s\n", cg[SC_ONE], strerror(-ret));
		goto out;
	}
	one_made = true;
	if (mkdir(cg[SC_HIER], 0755) < 0 && errno != EEXIST) {
		ret = -errno;
		fprintf(stderr, "bench: sendto: %s: %s\n", cg[SC_HIER], strerror(-ret));
		goto out;
	}
	hier_made = true;
	for (; np < ST_SCALE_MEMBERS && !g_stop; np++) {
		snprintf(p, sizeof(p), "%s/p%d", kdir, np);
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
			break;
	}
	for (; np == ST_SCALE_MEMBERS && nq < ST_SCALE_PODS && !g_stop; nq++) {
		snprintf(p, sizeof(p), "%s/q%d", kdir, nq);
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
			break;
	}
	if (g_stop) {
		ret = -EINTR;
		goto out;
	}
	if (np < ST_SCALE_MEMBERS || nq < ST_SCALE_PODS) {
		ret = -errno;
		fprintf(stderr, "bench: sendto: %s: %s\n", p, strerror(-ret));
		goto out;
	}

	yaml = st_scale_yaml(kdir, n_limits);
	if (!yaml) {
		ret = -ENOMEM;
		goto out;
	}
	if (ktest_daemon_init(&d) || ktest_daemon_config(&d, yaml)) {
		fprintf(stderr, "bench: sendto: cannot write the scale config\n");
		ret = -EIO;
		goto out;
	}
	/* start: until the control socket answers and the pod limit counts
	 * all its members */
	t0 = now_ns();
	if (ktest_daemon_start(&d, 120000, &code)) {
		char *log = ktest_slurp(d.log);

		fprintf(stderr, "bench: sendto: kthrottled with %d limits did not start (exit %d):\n%s",
			n_limits + 2, code, log ? log : "");
		free(log);
		ret = -EIO;
		goto out;
	}
	start_s = (double)(now_ns() - t0) / 1e9;
	for (int i = 0; i < 3000 && !g_stop; i++) {
		if (dsnap_take(&d, "pods", &s0[SC_PODS]) && s0[SC_PODS].size == ST_SCALE_PODS)
			break;
		ktest_sleep_ms(10);
	}
	ready_s = (double)(now_ns() - t0) / 1e9;
	for (int m = 0; m < SC_N; m++)
		if (!dsnap_take(&d, sc_name[m], &s0[m])) {
			fprintf(stderr, "bench: sendto: no status for limit %s\n", sc_name[m]);
			ret = -EIO;
			goto out;
		}
	sanity(s0[SC_PODS].size == ST_SCALE_PODS, "sendto: limit pods has %d members, want %d",
	       s0[SC_PODS].size, ST_SCALE_PODS);

	for (int m = 0; m < SC_N; m++) {
		struct st_result warm;

		if ((ret = st_worker_start(&w[m], cg[m], port[m], &warm)))
			goto out;
	}

	for (int r = 0; r < rounds; r++) {
		struct st_result res;
		double before, after;

		if ((ret = st_chunk(base, chunk, &res)))
			goto out;
		before = st_ns(&res);
		base_ns[r] = before / (SC_N + 1);
		for (int k = 0; k < SC_N; k++) {
			int m = (k + r) % SC_N;

			if (g_stop) {
				ret = -EINTR;
				goto out;
			}
			if ((ret = st_chunk(&w[m], chunk, &res)))
				goto out;
			sanity(res.n == chunk && res.errors == 0 && res.refused == 0,
			       "sendto: %s: %ld of %ld sent, %ld errors (last: %s), %ld refused",
			       sc_tag[m], res.n, chunk, res.errors, strerror(res.last_errno),
			       res.refused);
			ns[m][r] = st_ns(&res);
			if ((ret = st_chunk(base, chunk, &res)))
				goto out;
			after = st_ns(&res);
			delta[m][r] = ns[m][r] - (before + after) / 2;
			base_ns[r] += after / (SC_N + 1);
			before = after;
		}
		for (int m = 0; m < SC_N; m++)
			minus_one[m][r] = delta[m][r] - delta[SC_ONE][r];
		if (getenv("KT_BENCH_VERBOSE"))
			fprintf(stderr, "bench: sendto scale round %d: base %.0f, %s %+.0f, "
				"1 limit %+.0f, %s %+.0f ns/call\n", r, base_ns[r], sc_tag[SC_MANY],
				delta[SC_MANY][r], delta[SC_ONE][r], sc_tag[SC_PODS], delta[SC_PODS][r]);
	}

	/* bpf_stats: the same programs (attached at k) run for all three, so
	 * each chunk reads them around itself; 1-limit chunks around the others */
	for (int h = 0; h < ST_N_HOOKS; h++)
		if ((ret = st_query(cg[SC_MANY], hook_at[h], &progs[h])))
			goto out;
	stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
	for (int r = 0; stats_fd >= 0 && r < srounds; r++) {
		double run[ST_N_HOOKS], one_before, one_after;

		if ((ret = st_stats_chunk(&w[SC_ONE], progs, chunk, run, &one_before)))
			goto out;
		kt_call[SC_ONE][r] = one_before / SC_N;
		for (int k = 0; k < SC_N - 1; k++) {
			static const int others[SC_N - 1] = { SC_MANY, SC_PODS, SC_HIER };
			int m = others[(k + r) % (SC_N - 1)];

			if (g_stop) {
				ret = -EINTR;
				goto out;
			}
			if ((ret = st_stats_chunk(&w[m], progs, chunk, run, &kt_call[m][r])) ||
			    (ret = st_stats_chunk(&w[SC_ONE], progs, chunk, run, &one_after)))
				goto out;
			kt_minus_one[m][r] = kt_call[m][r] - (one_before + one_after) / 2;
			kt_call[SC_ONE][r] += one_after / SC_N;
			one_before = one_after;
		}
	}

	/* every datagram the senders sent was matched and admitted by its limit */
	for (int m = 0; m < SC_N; m++) {
		if (!dsnap_take(&d, sc_name[m], &s1[m])) {
			ret = -EIO;
			goto out;
		}
		sanity(s1[m].admitted - s0[m].admitted == (double)w[m].sent,
		       "sendto: limit %s counted %.0f admitted; its sender sent %ld", sc_name[m],
		       s1[m].admitted - s0[m].admitted, w[m].sent);
	}

	{
		char v[40], wh[200], row_what[SC_N][160];
		double b = median(base_ns, rounds);

		snprintf(row_what[SC_MANY], sizeof(row_what[SC_MANY]),
			 "sendto() kthrottle admitted, %s limits on one destination (%d with a member here)",
			 nl, ST_SCALE_MEMBERS);
		snprintf(row_what[SC_ONE], sizeof(row_what[SC_ONE]),
			 "sendto() kthrottle admitted, 1 limit on its destination (same daemon, %s limits)",
			 nl);
		snprintf(row_what[SC_PODS], sizeof(row_what[SC_PODS]),
			 "sendto() kthrottle admitted, 1 limit with %d pods (pod scope; same daemon, %s limits)",
			 ST_SCALE_PODS, nl);
		snprintf(row_what[SC_HIER], sizeof(row_what[SC_HIER]),
			 "sendto() kthrottle admitted, charged to 3 levels (parent:; same daemon, %s limits)",
			 nl);
		snprintf(v, sizeof(v), "%.1f s", start_s);
		snprintf(wh, sizeof(wh),
			 "daemon start with %s limits, %d member cgroups and 1 limit with %d pods: "
			 "until its control socket answers", nl, ST_SCALE_MEMBERS, ST_SCALE_PODS);
		row_text(wh, v, NULL, 0);
		snprintf(v, sizeof(v), "%.1f s", ready_s);
		snprintf(wh, sizeof(wh), "daemon start as above (%s limits): until `status` shows the %d pods",
			 nl, ST_SCALE_PODS);
		row_text(wh, v, NULL, 0);
		for (int m = 0; m < SC_N; m++) {
			double ov = median(delta[m], rounds);

			snprintf(wh, sizeof(wh), "%s (%d chunks of %ld calls)", row_what[m], rounds,
				 chunk);
			row_ns_ratio(wh, median(ns[m], rounds), b, ov);
			if (g_nrows) {
				struct row *row = &g_rows[g_nrows - 1];

				snprintf(row->delta, sizeof(row->delta), "×%.3f (%+.0f ± %.0f ns)",
					 1 + ov / b, ov, st_half_iqr(delta[m], rounds));
			}
		}
		for (int m = 0; m < SC_N; m++) {
			struct row *row;
			double dd;

			if (m == SC_ONE || m == SC_HIER)
				continue; /* the hierarchy's target is a ratio, below */
			dd = median(minus_one[m], rounds);
			snprintf(wh, sizeof(wh), "sendto() admitted: %s − 1 limit (median of paired rounds)",
				 sc_tag[m]);
			row = row_new(wh);
			if (!row)
				continue;
			snprintf(row->value, sizeof(row->value), "%+.1f ± %.1f ns", dd,
				 st_half_iqr(minus_one[m], rounds));
			snprintf(row->target, sizeof(row->target), "within ±%.0f ns", ST_SCALE_FLAT_NS);
			row_target(row, fabs(dd) <= ST_SCALE_FLAT_NS);
		}
		if (stats_fd < 0) {
			row_text("bpf_stats: kthrottle programs at scale", "skipped (bpf_enable_stats failed)",
				 NULL, 0);
		} else {
			for (int m = 0; m < SC_N; m++) {
				if (m == SC_ONE)
					continue;
				snprintf(wh, sizeof(wh),
					 "bpf_stats: kthrottle programs (sendmsg4 + egress), ns per "
					 "sendto: %s vs 1 limit (%d rounds)",
					 sc_tag[m], srounds);
				row_stat(wh, median(kt_call[m], srounds), median(kt_call[SC_ONE], srounds),
					 median(kt_minus_one[m], srounds));
				if (m == SC_HIER && g_nrows) {
					struct row *row = &g_rows[g_nrows - 1];
					double one = median(kt_call[SC_ONE], srounds),
					       ratio = one > 0 ? median(kt_call[m], srounds) / one : NAN;

					snprintf(row->delta, sizeof(row->delta), "×%.2f", ratio);
					snprintf(row->target, sizeof(row->target), "≤ %.0f× 1 level",
						 ST_HIER_MAX_RATIO);
					row_target(row, ratio <= ST_HIER_MAX_RATIO);
					continue;
				}
				/* the view that resolves 10 ns: sendto() timings stray more */
				if (g_nrows) {
					struct row *row = &g_rows[g_nrows - 1];

					snprintf(row->target, sizeof(row->target), "within ±%.0f ns",
						 ST_SCALE_FLAT_NS);
					row_target(row, fabs(median(kt_minus_one[m], srounds)) <=
								ST_SCALE_FLAT_NS);
				}
			}
		}
	}
	ret = 0;
out:
	if (stats_fd >= 0)
		close(stats_fd);
	for (int h = 0; h < ST_N_HOOKS; h++)
		for (int k = 0; k < progs[h].n; k++)
			close(progs[h].fd[k]);
	for (int m = 0; m < SC_N; m++)
		st_worker_stop(&w[m]);
	if (d.dir[0])
		ktest_daemon_cleanup(&d);
	free(yaml);
	/* in the reverse order of creation */
	while (nq > 0) {
		snprintf(p, sizeof(p), "%s/q%d", kdir, --nq);
		ktest_cgroup_destroy(p);
	}
	while (np > 0) {
		snprintf(p, sizeof(p), "%s/p%d", kdir, --np);
		ktest_cgroup_destroy(p);
	}
	if (one_made)
		ktest_cgroup_destroy(cg[SC_ONE]);
	if (hier_made)
		ktest_cgroup_destroy(cg[SC_HIER]);
	return ret;
}

int bench_sendto(struct bench_env *e)
{
	static const char *const what[ST_N] = {
		[ST_BASE] = "sendto() no program, no nft rules",
		[ST_CONTROL] = "sendto() no program, a second such worker (noise floor)",
		[ST_EMPTY] = "sendto() empty sendmsg4 + empty egress program attached",
		[ST_KT_ADMIT] = "sendto() kthrottle, matched limit, admitted",
		[ST_KT_REFUSE] = "sendto() kthrottle, refused (max 1/s; fails EBUSY)",
		[ST_KT_UNMATCH] = "sendto() kthrottle, limit on another port",
		[ST_NFT_LIMIT] = "sendto() nftables cgroupv2 + dport `limit` rule, under rate",
		[ST_NFT_VMAP] = "sendto() nftables 1,000-cgroup vmap, each to a `limit` chain",
		[ST_NEST1] = "sendto() kthrottle, admitted, nested depth 1 (1 cgroup below the member)",
		[ST_NEST4] = "sendto() kthrottle, admitted, nested depth 4 (4 cgroups below the member)",
		[ST_KT_OTHER] = "sendto() kthrottle, a non-member cgroup below the attach point",
	};
	static const char *const tag[ST_N] = {
		[ST_BASE] = "base",       [ST_CONTROL] = "control",     [ST_EMPTY] = "empty",
		[ST_KT_ADMIT] = "admitted", [ST_KT_REFUSE] = "refused", [ST_KT_UNMATCH] = "unmatched",
		[ST_NFT_LIMIT] = "nft-limit", [ST_NFT_VMAP] = "nft-vmap", [ST_NEST1] = "nested depth 1",
		[ST_NEST4] = "nested depth 4", [ST_KT_OTHER] = "non-member",
	};
	/* created in this order, removed in the reverse. kthrottle's cgroups
	 * share the parent k, which the daemon attaches to (attachRoot auto:
	 * their deepest common ancestor): base, empty and nft are outside it */
	static const char *const sub[] = { "base",	  "empty",    "nft",
					   "k",		  "k/kt",     "k/ktr",
					   "k/other",	  "k/kt/d1",  "k/kt/d1/d2",
					   "k/kt/d1/d2/d3", "k/kt/d1/d2/d3/d4" };
	enum { SUB_BASE, SUB_EMPTY, SUB_NFT, SUB_K, SUB_KT, SUB_KTR, SUB_OTHER,
	       SUB_D1,	 SUB_D2,    SUB_D3,  SUB_D4, N_SUB };
	static const int sub_of[ST_N] = {
		[ST_BASE] = SUB_BASE,    [ST_CONTROL] = SUB_BASE,   [ST_EMPTY] = SUB_EMPTY,
		[ST_KT_ADMIT] = SUB_KT,  [ST_KT_REFUSE] = SUB_KTR,  [ST_KT_UNMATCH] = SUB_KT,
		[ST_NFT_LIMIT] = SUB_NFT, [ST_NFT_VMAP] = SUB_NFT, [ST_NEST1] = SUB_D1,
		[ST_NEST4] = SUB_D4,     [ST_KT_OTHER] = SUB_OTHER,
	};
	const int rounds = g_quick ? ST_ROUNDS_QUICK : ST_ROUNDS;
	const long chunk = g_quick ? ST_CHUNK_QUICK : ST_CHUNK;
	const char *nft = ktest_find_prog("nft");
	char parent[PATH_MAX] = "", cgrel[PATH_MAX], parent_rel[PATH_MAX];
	char body[2048], table[2][64], rules[2][64] = { "", "" }, subcg[N_SUB][PATH_MAX];
	int empty_fd[ST_N_HOOKS] = { -1, -1 }, cgfd = -1, nfill = 0, nmodes = 0, ret;
	bool empty_attached[ST_N_HOOKS] = { false, false }, have_nft = nft != NULL;
	bool tables_loaded = false;
	struct ktest_daemon d = { .pid = -1 };
	struct st_worker w[ST_N];
	double ns[ST_N][ST_MAX_ROUNDS] = { { 0 } }, delta[ST_N][ST_MAX_ROUNDS] = { { 0 } };
	double table_moves = NAN;
	int order[ST_N];
	/* bpf_stats view: the modes with programs, per chunk; the empty one first */
	static const int st_prog_modes[] = { ST_EMPTY,      ST_KT_ADMIT, ST_KT_REFUSE,
					     ST_KT_UNMATCH, ST_NEST1,    ST_NEST4,
					     ST_KT_OTHER };
	enum { N_PM = sizeof(st_prog_modes) / sizeof(st_prog_modes[0]) };
	const int srounds = g_quick ? ST_STATS_ROUNDS_QUICK : ST_STATS_ROUNDS;
	const enum bpf_attach_type hook_at[ST_N_HOOKS] = { BPF_CGROUP_UDP4_SENDMSG,
							   BPF_CGROUP_INET_EGRESS };
	struct st_progs progs[N_PM][ST_N_HOOKS];
	double per_run[N_PM][ST_N_HOOKS][ST_MAX_ROUNDS], per_call[N_PM][ST_MAX_ROUNDS];
	double kt_minus_empty[N_PM][ST_MAX_ROUNDS];
	int stats_fd = -1;
	bool have_stats = false;
	char stats_was[16];
	struct dsnap snap0, snap1;

	(void)e;
	memset(subcg, 0, sizeof(subcg));
	memset(progs, 0, sizeof(progs));
	read_first_line("/proc/sys/kernel/bpf_stats_enabled", stats_was, sizeof(stats_was));
	for (int m = 0; m < ST_N; m++)
		w[m] = (struct st_worker){ .pid = -1, .cmd = -1, .res = -1, .netns = -1 };
	snprintf(table[0], sizeof(table[0]), "kt_bench_%d_limit", getpid());
	snprintf(table[1], sizeof(table[1]), "kt_bench_%d_vmap", getpid());
	ret = ktest_cgroup_create("sendto", parent, sizeof(parent));
	if (ret) {
		fprintf(stderr, "bench: sendto: cannot create a cgroup: %s\n", strerror(-ret));
		parent[0] = 0;
		goto out;
	}
	for (int i = 0; i < N_SUB; i++) {
		snprintf(subcg[i], sizeof(subcg[i]), "%s/%s", parent, sub[i]);
		if (mkdir(subcg[i], 0755) < 0 && errno != EEXIST) {
			ret = -errno;
			fprintf(stderr, "bench: sendto: %s: %s\n", subcg[i], strerror(-ret));
			goto out;
		}
	}

	/* empty programs at both hooks kthrottle runs a datagram through */
	cgfd = open(subcg[SUB_EMPTY], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	for (int i = 0; i < ST_N_HOOKS; i++) {
		empty_fd[i] = st_empty_prog(i == ST_HOOK_EGRESS ? BPF_PROG_TYPE_CGROUP_SKB :
								  BPF_PROG_TYPE_CGROUP_SOCK_ADDR,
					    hook_at[i]);
		if (empty_fd[i] < 0 || cgfd < 0 ||
		    bpf_prog_attach(empty_fd[i], cgfd, hook_at[i], 0) < 0) {
			ret = -errno;
			fprintf(stderr, "bench: sendto: cannot load/attach an empty program: %s\n",
				strerror(-ret));
			goto out;
		}
		empty_attached[i] = true;
	}

	/* admitted: a bucket far above any rate reached; refused: 1/s, burst 1 */
	snprintf(body, sizeof(body),
		 "tickInterval: 100ms\n"
		 "limits:\n"
		 "  - name: admit\n"
		 "    cgroups: [%s]\n"
		 "    match: {cidrs: [127.0.0.1/32], ports: %u, protocol: udp}\n"
		 "    unit: datagram\n"
		 "    rateLimit: {max: 1000000000}\n"
		 "  - name: refuse\n"
		 "    cgroups: [%s]\n"
		 "    match: {cidrs: [127.0.0.1/32], ports: %u, protocol: udp}\n"
		 "    unit: datagram\n"
		 "    burst: 1\n"
		 "    rateLimit: {max: 1}\n",
		 subcg[SUB_KT], ST_PORT, subcg[SUB_KTR], ST_PORT_REFUSE);
	ret = ktest_daemon_up(&d, body);
	if (ret || !dsnap_take(&d, "admit", &snap0)) {
		ret = ret ? ret : -EIO;
		goto out;
	}
	/* the programs sit at k only: the baseline and the peers run none
	 * of them, and k's other cgroups get theirs from k */
	{
		struct st_progs at_base = { 0 }, at_other = { 0 };

		ret = st_query(subcg[SUB_BASE], BPF_CGROUP_UDP4_SENDMSG, &at_base);
		if (!ret)
			ret = st_query(subcg[SUB_OTHER], BPF_CGROUP_UDP4_SENDMSG, &at_other);
		for (int k = 0; k < at_base.n; k++)
			close(at_base.fd[k]);
		for (int k = 0; k < at_other.n; k++)
			close(at_other.fd[k]);
		if (ret)
			goto out;
		sanity(at_base.n == 0 && at_other.n == 1,
		       "sendto: sendmsg4 programs: %d on the baseline's cgroup (want 0), %d on a non-member below k (want 1)",
		       at_base.n, at_other.n);
	}

	for (int m = 0; m < ST_N; m++) {
		uint16_t p = m == ST_KT_REFUSE ? ST_PORT_REFUSE : m == ST_KT_UNMATCH ? ST_PORT_UNMATCH :
						  ST_PORT;
		struct st_result warm;

		if ((m == ST_NFT_LIMIT || m == ST_NFT_VMAP) && !have_nft)
			continue;
		ret = st_worker_start(&w[m], subcg[sub_of[m]], p, &warm);
		if (ret)
			goto out;
		if (m != ST_BASE)
			order[nmodes++] = m;
	}

	if (have_nft) {
		/* nft names cgroups by path under /sys/fs/cgroup (on a hybrid host
		 * the v2 tree is /sys/fs/cgroup/unified); level counts from the v2
		 * root, where kt-test-<pid>-sendto is level 1 */
		static const char sys_cg[] = "/sys/fs/cgroup/";

		if (strncmp(parent, sys_cg, strlen(sys_cg))) {
			fprintf(stderr, "bench: sendto: %s is not under %s: nft cannot name it\n",
				parent, sys_cg);
			ret = -ENOTSUP;
			goto out;
		}
		snprintf(parent_rel, sizeof(parent_rel), "%s", parent + strlen(sys_cg));
		snprintf(cgrel, sizeof(cgrel), "%s/nft", parent_rel);
		for (nfill = 0; nfill < ST_FILLERS; nfill++) {
			char p[PATH_MAX + 16];

			snprintf(p, sizeof(p), "%s/f%d", parent, nfill + 1);
			if (mkdir(p, 0755) < 0 && errno != EEXIST) {
				ret = -errno;
				fprintf(stderr, "bench: sendto: %s: %s\n", p, strerror(-ret));
				goto out;
			}
		}
		for (int i = 0; i < 2; i++) {
			struct st_worker *nw = &w[ST_NFT_LIMIT + i];
			struct st_result chk;
			int fd;

			snprintf(rules[i], sizeof(rules[i]), "/tmp/kt-bench-%d-nft%d.XXXXXX", getpid(), i);
			fd = mkstemp(rules[i]);
			if (fd < 0) {
				ret = -errno;
				rules[i][0] = 0;
				goto out;
			}
			close(fd);
			/* first with drop: proves the rule matches the sender */
			ret = st_write_rules(rules[i], table[i], cgrel, parent_rel, i == 1, "drop");
			if (ret || (ret = st_nft(nw->netns, nft, "-f", rules[i], NULL, NULL)))
				goto out;
			ret = st_chunk(nw, 10, &chk);
			st_nft(nw->netns, nft, "delete", "table", "inet", table[i]);
			if (ret)
				goto out;
			sanity(chk.errors == 10 && chk.last_errno == EPERM,
			       "sendto: nft %s rule with drop did not drop (%ld of 10 failed, last: %s)",
			       i ? "vmap" : "limit", chk.errors, strerror(chk.last_errno));
			ret = st_write_rules(rules[i], table[i], cgrel, parent_rel, i == 1,
					     "limit rate over 1000000000/second drop");
			if (ret)
				goto out;
		}
		table_moves = st_table_check(&w[ST_BASE], &w[ST_NFT_LIMIT], nft, rules[0], table[0],
					     chunk);
		/* from here on for the whole run, each in its worker's namespace */
		for (int i = 0; i < 2; i++)
			if ((ret = st_nft(w[ST_NFT_LIMIT + i].netns, nft, "-f", rules[i], NULL, NULL)))
				goto out;
		tables_loaded = true;
	}

	for (int r = 0; r < rounds; r++) {
		struct st_result res;
		double before, after;

		/* base, mode, base, mode, ..., base; the order rotates so no mode
		 * always runs first or last */
		if ((ret = st_chunk(&w[ST_BASE], chunk, &res)))
			goto out;
		before = st_ns(&res);
		ns[ST_BASE][r] = before / (nmodes + 1);
		for (int k = 0; k < nmodes; k++) {
			int m = order[(k + r) % nmodes];

			if (g_stop) {
				ret = -EINTR;
				goto out;
			}
			if ((ret = st_chunk(&w[m], chunk, &res)))
				goto out;
			sanity(res.n == chunk && res.errors == 0,
			       "%s: %ld of %ld sent, %ld errors (last: %s)", what[m], res.n, chunk,
			       res.errors, strerror(res.last_errno));
			/* burst 1 at 1/s: at most one or two per chunk get through */
			sanity(m == ST_KT_REFUSE ? res.refused >= chunk - 2 : res.refused == 0,
			       "%s: %ld of %ld refused", what[m], res.refused, chunk);
			ns[m][r] = st_ns(&res);
			if ((ret = st_chunk(&w[ST_BASE], chunk, &res)))
				goto out;
			after = st_ns(&res);
			sanity(res.errors == 0 && res.refused == 0, "%s: %ld errors, %ld refused",
			       what[ST_BASE], res.errors, res.refused);
			delta[m][r] = ns[m][r] - (before + after) / 2;
			ns[ST_BASE][r] += after / (nmodes + 1);
			before = after;
		}
		if (getenv("KT_BENCH_VERBOSE")) {
			fprintf(stderr, "bench: sendto round %d ns/call: base %.0f", r, ns[ST_BASE][r]);
			for (int k = 0; k < nmodes; k++)
				fprintf(stderr, ", %s %+.0f", tag[order[k]], delta[order[k]][r]);
			fputc('\n', stderr);
		}
	}

	/* the bpf_stats view: chunks of the modes with programs, stats on */
	for (int i = 0; i < N_PM; i++)
		for (int h = 0; h < ST_N_HOOKS; h++)
			if ((ret = st_query(subcg[sub_of[st_prog_modes[i]]], hook_at[h], &progs[i][h]))) {
				fprintf(stderr, "bench: sendto: cannot list the programs of %s: %s\n",
					what[st_prog_modes[i]], strerror(-ret));
				goto out;
			}
	stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
	have_stats = stats_fd >= 0;
	if (!have_stats)
		fprintf(stderr, "bench: sendto: cannot enable bpf_stats: %s; no rows from it\n",
			strerror(errno));
	/* as the timed rounds: empty, mode, empty, mode, ..., empty, each
	 * kthrottle chunk paired with the empty chunks around it */
	for (int r = 0; have_stats && r < srounds; r++) {
		double e_before, e_run[ST_N_HOOKS] = { 0 };

		if ((ret = st_stats_chunk(&w[ST_EMPTY], progs[0], chunk, e_run, &e_before)))
			goto out;
		for (int h = 0; h < ST_N_HOOKS; h++)
			per_run[0][h][r] = e_run[h] / N_PM;
		per_call[0][r] = e_before / N_PM;
		for (int k = 0; k < N_PM - 1; k++) {
			int i = 1 + (k + r) % (N_PM - 1), m = st_prog_modes[i];
			double run[ST_N_HOOKS], e_after;

			if (g_stop) {
				ret = -EINTR;
				goto out;
			}
			if ((ret = st_stats_chunk(&w[m], progs[i], chunk, run, &per_call[i][r])))
				goto out;
			for (int h = 0; h < ST_N_HOOKS; h++)
				per_run[i][h][r] = run[h];
			if ((ret = st_stats_chunk(&w[ST_EMPTY], progs[0], chunk, run, &e_after)))
				goto out;
			for (int h = 0; h < ST_N_HOOKS; h++)
				per_run[0][h][r] += run[h] / N_PM;
			per_call[0][r] += e_after / N_PM;
			kt_minus_empty[i][r] = per_call[i][r] - (e_before + e_after) / 2;
			e_before = e_after;
		}
	}
	if (have_stats)
		close(stats_fd);
	stats_fd = -1;

	/* the limit counted every datagram of its member's and the nested
	 * senders: the nested ones were matched, not passed as unmatched */
	if (!dsnap_take(&d, "admit", &snap1)) {
		ret = -EIO;
		goto out;
	}
	{
		long sent = w[ST_KT_ADMIT].sent + w[ST_NEST1].sent + w[ST_NEST4].sent;

		sanity(snap1.admitted - snap0.admitted == (double)sent,
		       "sendto: limit admit counted %.0f admitted; its member and nested senders sent %ld",
		       snap1.admitted - snap0.admitted, sent);
	}

	double base = median(ns[ST_BASE], rounds), ov[ST_N];
	for (int m = 0; m < ST_N; m++)
		ov[m] = median(delta[m], rounds);
	for (int m = 0; m < ST_N; m++) {
		char wh[112];

		snprintf(wh, sizeof(wh), "%s (%d chunks of %ld calls)", what[m], rounds, chunk);
		if ((m == ST_NFT_LIMIT || m == ST_NFT_VMAP) && !have_nft) {
			row_text(wh, "skipped (nft not installed)", NULL, 0);
			continue;
		}
		row_ns_ratio(wh, median(ns[m], rounds), m == ST_BASE ? NAN : base, ov[m]);
		if (m != ST_BASE && g_nrows) {
			struct row *row = &g_rows[g_nrows - 1];

			snprintf(row->delta, sizeof(row->delta), "×%.3f (%+.0f ± %.0f ns)",
				 1 + ov[m] / base, ov[m], st_half_iqr(delta[m], rounds));
		}
		if (m == ST_KT_ADMIT && have_nft && g_nrows) {
			/* the target: admitted ≤ ½ nftables' overhead; where empty
			 * programs alone cost more than that, ≤ empty + 60 ns and
			 * below nftables */
			struct row *row = &g_rows[g_nrows - 1];
			double half = ov[ST_NFT_LIMIT] / 2;

			if (!(ov[ST_NFT_LIMIT] > 0)) {
				/* no measurable nft overhead: nothing to judge against */
				snprintf(row->target, sizeof(row->target), "nft overhead ≤ 0");
			} else if (ov[ST_EMPTY] <= half) {
				snprintf(row->target, sizeof(row->target), "≤ ½ nft: +%.0f ns", half);
				row_target(row, ov[m] <= half);
			} else {
				snprintf(row->target, sizeof(row->target), "≤ empty+60: +%.0f ns, < nft",
					 ov[ST_EMPTY] + 60);
				row_target(row, ov[m] <= ov[ST_EMPTY] + 60 &&
							ov[m] < ov[ST_NFT_LIMIT]);
			}
		}
	}
	if (have_nft) {
		char v[40];

		snprintf(v, sizeof(v), "%+.1f ns", table_moves);
		row_text("sendto() baseline with an nft table loaded in another netns − without "
			 "(median of paired chunks)", v, NULL, 0);
		snprintf(v, sizeof(v), "%.2f", ov[ST_KT_ADMIT] / ov[ST_NFT_LIMIT]);
		row_text("sendto() overhead ratio: kthrottle admitted / nftables limit", v, NULL, 0);
		snprintf(v, sizeof(v), "%.2f", ov[ST_KT_ADMIT] / ov[ST_NFT_VMAP]);
		row_text("sendto() overhead ratio: kthrottle admitted / nftables 1,000-cgroup vmap", v,
			 NULL, 0);
	} else {
		row_text("sendto() overhead ratio: kthrottle admitted / nftables limit",
			 "skipped (nft not installed)", NULL, 0);
	}
	/* on when the sysctl or another process's stats fd has it on */
	row_text("sendto() timed rounds: kernel.bpf_stats_enabled (on: two clock reads more per "
		 "program run)", !strcmp(stats_was, "0") ? "off" : !strcmp(stats_was, "1") ? "on" : "?",
		 NULL, 0);

	if (!have_stats) {
		row_text("bpf_stats: programs' own time per run", "skipped (bpf_enable_stats failed)",
			 NULL, 0);
	} else {
		static const char *const hook_name[ST_N_HOOKS] = { "sendmsg4", "egress" };
		char wh[112];

		for (int h = 0; h < ST_N_HOOKS; h++) {
			snprintf(wh, sizeof(wh), "bpf_stats: empty %s program, ns per run (%d rounds)",
				 h ? "cgroup_skb egress" : "sendmsg4", srounds);
			row_stat(wh, median(per_run[0][h], srounds), NAN, NAN);
		}
		for (int h = 0; h < ST_N_HOOKS; h++) {
			snprintf(wh, sizeof(wh), "bpf_stats: kthrottle %s program, admitted, ns per run",
				 hook_name[h]);
			row_stat(wh, median(per_run[1][h], srounds), median(per_run[0][h], srounds),
				 median(per_run[1][h], srounds) - median(per_run[0][h], srounds));
		}
		for (int i = 1; i < N_PM; i++) {
			int m = st_prog_modes[i];

			snprintf(wh, sizeof(wh),
				 "bpf_stats: kthrottle − empty programs (sendmsg4 + egress), ns per "
				 "sendto: %s",
				 tag[m]);
			row_stat(wh, median(per_call[i], srounds), median(per_call[0], srounds),
				 median(kt_minus_empty[i], srounds));
		}
	}

	/* the second phase: one daemon on k at a time */
	ktest_daemon_cleanup(&d);
	for (int r = 0; !ret && r < ST_SCALE_RUNS; r++)
		ret = st_scale(subcg[SUB_K], &w[ST_BASE], chunk, rounds, srounds, ST_SCALE_LIMITS[r]);
	if (ret)
		goto out;
	ret = 0;
out:
	/* never leave a table behind, also on failure or interruption (a
	 * worker's namespace, and so its table, also goes when it exits) */
	for (int i = 0; have_nft && i < 2; i++)
		if (w[ST_NFT_LIMIT + i].netns >= 0 && (tables_loaded || ret))
			st_nft(w[ST_NFT_LIMIT + i].netns, nft, "delete", "table", "inet", table[i]);
	if (stats_fd >= 0)
		close(stats_fd);
	for (int i = 0; i < N_PM; i++)
		for (int h = 0; h < ST_N_HOOKS; h++)
			for (int k = 0; k < progs[i][h].n; k++)
				close(progs[i][h].fd[k]);
	for (int m = 0; m < ST_N; m++)
		st_worker_stop(&w[m]);
	for (int i = 0; i < 2; i++)
		if (rules[i][0])
			unlink(rules[i]);
	if (d.dir[0])
		ktest_daemon_cleanup(&d);
	for (int i = 0; i < ST_N_HOOKS; i++) {
		if (empty_attached[i])
			bpf_prog_detach2(empty_fd[i], cgfd, hook_at[i]);
		if (empty_fd[i] >= 0)
			close(empty_fd[i]);
	}
	if (cgfd >= 0)
		close(cgfd);
	if (parent[0]) {
		for (int i = 0; i < nfill; i++) {
			char p[PATH_MAX + 16];

			snprintf(p, sizeof(p), "%s/f%d", parent, i + 1);
			rmdir(p);
		}
		for (int i = N_SUB - 1; i >= 0; i--)
			if (subcg[i][0])
				ktest_cgroup_destroy(subcg[i]);
		ktest_cgroup_destroy(parent);
	}
	return ret;
}
