// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Member churn end-to-end: a pod-scope UDP datagram limit "churn" with
 * onlyIfUsed (threshold 50%) from min 50/s to max 500/s over 10 s, 8 member
 * cgroups, and 15 s of membership changes every 150 ms: reloads (through the
 * control socket, as `kthrottlectl reload`) naming another subset, each
 * cgroup in it with probability 3/4, and cgroups removed and recreated under
 * the daemon (which prunes them once per epoch). The controller keeps
 * per-slot baselines, so a member that leaves takes its counts out of the
 * limit's sum without the sum ever running backwards; before that fix an
 * unsigned delta wrapped, status showed 100% utilization for an epoch and
 * onlyIfUsed ramped.
 *
 * Load: one sender per cgroup, 2 datagrams/s each, on a shared absolute
 * CLOCK_MONOTONIC schedule with the 8 phases 62.5 ms apart, a new socket per
 * datagram (a socket is charged to the cgroup it was created in). The senders
 * of the member cgroups together send at most 16/s, evenly spaced: at most 17
 * in any 1 s epoch of the 50 granted (34%), at most 2 in a 0.1 s window (40%
 * of 5: the daemon's first ticks, before its history spans an epoch); ~24% on
 * average. Each member's bucket gets 50/n per second (>= 6.25/s) and burst
 * 16/n (>= 2), so nothing is refused (a refusal counts as 100% by design). A
 * sender is moved to a parking cgroup (never a member) while its cgroup is
 * removed, and into the new one after; traffic from a cgroup that is not a
 * member is not counted, and the test's "real utilization" counts only the
 * senders of current members.
 *
 * Asserted while churning (status json every 100 ms): utilization_pct in
 * [0, 100] and below the 50% threshold; pool_rate never above min + 2 ticks of
 * ramp (2 x 45/s per s x 0.1 s = 9/s: no tick can be at the threshold, the
 * allowance covers scheduling delays bunching sends in the first short
 * windows); throttled stays 0. About once a second and at the end: the
 * kernel's in-use buckets (KT_BUCKET_IN_USE in the pinned kt_buckets) and the
 * limit's memberships in kt_members equal the daemon's member count, and at
 * the quiet end the test's own (5 after a last reload, 3 once two of them are
 * removed and pruned). Also: the member buckets' rates in the kernel never
 * add up to more than the pool rate (pod scope shares the pool), and the
 * utilization shown is on average at least half the real one (not hidden the
 * other way). KT_CHURN_SEED=<n> replays a run's sequence of operations. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <bpf/bpf.h>
#include <cmocka.h>

#include "kernel/bpf_loader.h"
#include "kernel/inspect.h"
#include "kthrottle.h"
#include "kt_clusterfx.h"
#include "ktest.h"

#define N_CG 8
#define LIMIT "churn"
#define MIN_RATE 50.0
#define MAX_RATE 500.0
#define RAMP_S 10.0
#define SLOPE ((MAX_RATE - MIN_RATE) / RAMP_S) /* 45/s per second */
#define THRESHOLD 50.0
#define BURST 16
#define TICK_S 0.1
#define RATE_TOL (2 * SLOPE * TICK_S) /* 9/s: two ticks of ramp */
#define SEND_RATE 2.0                 /* per sender, datagrams/s */
#define CHURN_S 15.0
#define POLL_MS 100
#define CHURN_MS 150
#define SLOT_CHECK_EVERY 10 /* polls */
#define MAX_REPORTS 25      /* violation lines printed */

struct sender_stats {
	unsigned long long ok, refused, errors;
};

static struct fixture {
	struct ktest_daemon d;
	char cg[N_CG][PATH_MAX];
	bool exists[N_CG];
	char park[PATH_MAX];
	pid_t sender[N_CG];
	struct sender_stats *stats; /* shared with the senders */
	int recv_fd, port;
	struct kt_bpf bpf;
	bool bpf_open;
	struct kt_kstate *ks;
} fx;

/* ---- small helpers ---- */

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t rng_state;

static uint32_t rnd(void)
{
	uint64_t x = rng_state;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	rng_state = x;
	return (uint32_t)(x >> 16);
}

static int move_pid(const char *cg, pid_t pid)
{
	char p[PATH_MAX + 16], s[32];

	snprintf(p, sizeof(p), "%s/cgroup.procs", cg);
	snprintf(s, sizeof(s), "%d\n", (int)pid);
	return ktest_write_file(p, s);
}

static int popcount(unsigned m)
{
	return __builtin_popcount(m);
}

/* ---- senders ---- */

/* One datagram every 1/SEND_RATE s at t0 + phase + k/SEND_RATE (absolute
 * CLOCK_MONOTONIC), until t_end; counts into *st. Never returns. */
static void sender_main(pid_t parent, int port, uint64_t t0, uint64_t phase, uint64_t t_end,
			struct sender_stats *st)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	const uint64_t period = (uint64_t)(1e9 / SEND_RATE);
	char payload[16] = { 0 };

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(1);
	for (uint64_t k = 0; k < 100000; k++) {
		uint64_t due = t0 + phase + k * period;
		struct timespec ts = { (time_t)(due / 1000000000ull), (long)(due % 1000000000ull) };
		int fd, r;

		if (due >= t_end)
			break;
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
			;
		/* a socket belongs to the cgroup its creator was in: a new one
		 * per datagram, so the sender's current cgroup is charged */
		fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			__atomic_fetch_add(&st->errors, 1, __ATOMIC_RELAXED);
			continue;
		}
		r = (int)sendto(fd, payload, sizeof(payload), 0, (struct sockaddr *)&sa, sizeof(sa));
		if (r >= 0)
			__atomic_fetch_add(&st->ok, 1, __ATOMIC_RELAXED);
		else if (errno == EBUSY)
			__atomic_fetch_add(&st->refused, 1, __ATOMIC_RELAXED);
		else
			__atomic_fetch_add(&st->errors, 1, __ATOMIC_RELAXED);
		close(fd);
	}
	_exit(0);
}

static void senders_start(uint64_t t0, double secs)
{
	pid_t parent = getpid();
	uint64_t period = (uint64_t)(1e9 / SEND_RATE), t_end = t0 + (uint64_t)(secs * 1e9);

	fflush(NULL);
	for (int i = 0; i < N_CG; i++) {
		pid_t pid = fork();

		assert_true(pid >= 0);
		if (pid == 0)
			sender_main(parent, fx.port, t0, period * (uint64_t)i / N_CG, t_end,
				    &fx.stats[i]);
		fx.sender[i] = pid;
		assert_int_equal(move_pid(fx.cg[i], pid), 0);
	}
}

static struct sender_stats senders_total(void)
{
	struct sender_stats t = { 0 };

	for (int i = 0; i < N_CG; i++) {
		t.ok += __atomic_load_n(&fx.stats[i].ok, __ATOMIC_RELAXED);
		t.refused += __atomic_load_n(&fx.stats[i].refused, __ATOMIC_RELAXED);
		t.errors += __atomic_load_n(&fx.stats[i].errors, __ATOMIC_RELAXED);
	}
	return t;
}

/* ---- config ---- */

static void write_config(unsigned mask)
{
	char body[8192], list[N_CG * (PATH_MAX + 2)], rate[256];
	size_t n = 0;

	list[0] = 0;
	for (int i = 0; i < N_CG; i++)
		if (mask & (1u << i))
			n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%s", n ? ", " : "",
					      fx.cg[i]);
	snprintf(rate, sizeof(rate),
		 "\n"
		 "      min: %.0f\n"
		 "      max: %.0f\n"
		 "      rampUpDuration: %.0fs\n"
		 "      modes: {onlyIfUsed: {thresholdPercentage: %.0f}}\n",
		 MIN_RATE, MAX_RATE, RAMP_S, THRESHOLD);
	snprintf(body, sizeof(body), "tickInterval: 100ms\nepoch: 1s\nlimits:\n");
	kt_clusterfx_add_limit(body, sizeof(body),
			       &(struct kt_clusterfx_limit){ .name = LIMIT, .cgroups = list,
							     .port = fx.port, .scope = "pod",
							     .burst = BURST, .rate = rate });
	assert_int_equal(ktest_daemon_config(&fx.d, body), 0);
}

/* Reload through the control socket (what `kthrottlectl reload` sends). */
static bool reload_sock(char *reply, size_t len)
{
	char *out = ktest_daemon_cmd(&fx.d, "reload");
	bool ok = out && !strncmp(out, "ok", 2);

	snprintf(reply, len, "%s", out ? out : "(no answer)");
	free(out);
	return ok;
}

/* ---- status ---- */

struct snap {
	double up, pool_rate, util, bucket_rate, admitted, throttled, reloads, id;
	int members; /* entries in the limit's "cgroups" array */
};

static bool snap_take(struct snap *s)
{
	char *out = ktest_daemon_cmd(&fx.d, "status json");
	const char *p;
	bool ok;

	memset(s, 0, sizeof(*s));
	if (!out)
		return false;
	ok = ktest_json_num(out, "uptime_s", &s->up) && ktest_json_num(out, "reloads", &s->reloads) &&
	     ktest_json_limit_num(out, LIMIT, "id", &s->id) &&
	     ktest_json_limit_num(out, LIMIT, "pool_rate", &s->pool_rate) &&
	     ktest_json_limit_num(out, LIMIT, "utilization_pct", &s->util) &&
	     ktest_json_limit_num(out, LIMIT, "bucket_rate", &s->bucket_rate) &&
	     ktest_json_limit_num(out, LIMIT, "admitted", &s->admitted) &&
	     ktest_json_limit_num(out, LIMIT, "throttled", &s->throttled);
	/* one limit: every member_id in the answer is one of ours */
	for (p = strstr(out, "\"member_id\":"); p; p = strstr(p + 1, "\"member_id\":"))
		s->members++;
	free(out);
	return ok;
}

/* ---- kernel ---- */

struct kview {
	int in_use;        /* buckets flagged in use for the limit */
	int in_use_other;  /* in use for any other limit id */
	double rate_sum;   /* their rates, tokens/s */
	int memberships;   /* kt_members entries for the limit */
	int node_buckets;  /* the limit's node bucket (KT_BUCKET_POOL): 1 with 2+ members */
	double node_rate;  /* its rate, tokens/s */
};

static void kernel_read(uint32_t limit_id, struct kview *v)
{
	const struct kt_klimit *kl;

	memset(v, 0, sizeof(*v));
	for (uint32_t s = 0; s < KT_MAX_BUCKETS; s++) {
		struct kt_bucket bk;

		assert_int_equal(bpf_map_lookup_elem(fx.bpf.buckets_fd, &s, &bk), 0);
		if (!(bk.flags & KT_BUCKET_IN_USE))
			continue;
		if (bk.limit_id != limit_id) {
			v->in_use_other++;
			continue;
		}
		if (bk.flags & KT_BUCKET_POOL) {
			/* what the members are chained to, not a member's */
			v->node_buckets++;
			v->node_rate = kt_rate_from_interval_fp(bk.interval_fp);
			continue;
		}
		v->in_use++;
		v->rate_sum += kt_rate_from_interval_fp(bk.interval_fp);
	}
	assert_int_equal(kt_inspect_read(&fx.bpf, fx.ks), 0);
	kl = kt_inspect_find(fx.ks, LIMIT);
	v->memberships = kl ? kl->n_members : 0;
}

/* Status, kernel, status: a consistent view when membership did not change
 * in between (only a prune can change it: the test reloads itself). */
static bool slots_consistent(struct snap *a, struct kview *k)
{
	struct snap b;

	assert_true(snap_take(a));
	kernel_read((uint32_t)a->id, k);
	assert_true(snap_take(&b));
	return a->members == b.members && a->reloads == b.reloads;
}

/* ---- fixtures ---- */

static int setup(void **state)
{
	(void)state;
	memset(&fx, 0, sizeof(fx));
	fx.d.pid = -1;
	fx.recv_fd = -1;
	for (int i = 0; i < N_CG; i++)
		fx.sender[i] = -1;
	fx.stats = mmap(NULL, sizeof(struct sender_stats) * N_CG, PROT_READ | PROT_WRITE,
			MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (fx.stats == MAP_FAILED) {
		fx.stats = NULL;
		return -1;
	}
	fx.ks = calloc(1, sizeof(*fx.ks));
	return fx.ks ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < N_CG; i++)
		ktest_kill_wait(&fx.sender[i]);
	if (fx.bpf_open)
		kt_bpf_close(&fx.bpf);
	fx.bpf_open = false;
	if (fx.d.dir[0])
		ktest_daemon_cleanup(&fx.d);
	for (int i = 0; i < N_CG; i++)
		if (fx.cg[i][0])
			ktest_cgroup_destroy(fx.cg[i]);
	if (fx.park[0])
		ktest_cgroup_destroy(fx.park);
	if (fx.recv_fd >= 0)
		close(fx.recv_fd);
	if (fx.stats)
		munmap(fx.stats, sizeof(struct sender_stats) * N_CG);
	kt_kstate_free(fx.ks);
	memset(&fx, 0, sizeof(fx));
	return 0;
}

/* ---- the test ---- */

struct tally {
	int polls, reloads, reload_fail, removals, leaves, joins;
	int util_out_of_range, util_high, rate_high, throttled, rate_sum_high;
	int slot_checks, slot_skipped, slot_bad;
	int admitted_backwards;
	double max_util, max_pool_rate, max_rate_sum_ratio, max_reload_ms, real_util_sum;
	double shown_util_sum;
	int printed;
};

static void report(struct tally *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(struct tally *t, const char *fmt, ...)
{
	va_list ap;
	char buf[512];

	if (t->printed++ >= MAX_REPORTS)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	print_message("  VIOLATION %s\n", buf);
}

static void check_slots(struct tally *t, double at, const char *when)
{
	struct snap s;
	struct kview k;

	if (!slots_consistent(&s, &k)) {
		t->slot_skipped++;
		return;
	}
	t->slot_checks++;
	if (k.in_use != s.members || k.memberships != s.members || k.in_use_other ||
	    k.node_buckets != (s.members >= 2)) {
		t->slot_bad++;
		report(t, "t=%.2fs (%s): %d buckets in use (+%d of other ids, %d node buckets), %d "
			  "memberships in kt_members, daemon has %d members",
		       at, when, k.in_use, k.in_use_other, k.node_buckets, k.memberships, s.members);
	}
}

static void test_churn_keeps_utilization_true(void **state)
{
	struct tally t = { 0 };
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	char reply[1024], err[256];
	unsigned mask = (1u << N_CG) - 1, in_member = 0;
	struct snap s, prev = { 0 };
	struct kview k;
	const char *seed_env = getenv("KT_CHURN_SEED");
	uint64_t seed;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	seed = seed_env ? strtoull(seed_env, NULL, 0) : (uint64_t)time(NULL) ^ (uint64_t)getpid();
	rng_state = seed ? seed : 1;
	print_message("seed %llu (KT_CHURN_SEED reproduces the sequence of operations)\n",
		      (unsigned long long)seed);

	for (int i = 0; i < N_CG; i++) {
		char name[32];

		snprintf(name, sizeof(name), "churn-%d", i);
		assert_int_equal(ktest_cgroup_create(name, fx.cg[i], sizeof(fx.cg[i])), 0);
		fx.exists[i] = true;
	}
	assert_int_equal(ktest_cgroup_create("churn-park", fx.park, sizeof(fx.park)), 0);
	/* a bound receiver, so the port stays ours; never read */
	fx.recv_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(fx.recv_fd >= 0);
	assert_int_equal(bind(fx.recv_fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	socklen_t sl = sizeof(sa);
	assert_int_equal(getsockname(fx.recv_fd, (struct sockaddr *)&sa, &sl), 0);
	fx.port = ntohs(sa.sin_port);

	assert_int_equal(ktest_daemon_init(&fx.d), 0);
	write_config(mask);
	assert_int_equal(ktest_daemon_start_logged(&fx.d), 0);
	in_member = mask;
	assert_int_equal(kt_bpf_open_pinned(&fx.bpf, fx.d.pin_dir, err, sizeof(err)), 0);
	fx.bpf_open = true;

	/* senders: start on a schedule 200 ms ahead, in their cgroups by then */
	uint64_t t0 = mono_ns() + 200 * 1000000ull;
	const double run_s = CHURN_S + 8;
	senders_start(t0, run_s);
	ktest_sleep_ms(300);

	uint64_t start = mono_ns(), next_poll = start, next_churn = start + CHURN_MS * 1000000ull;
	uint64_t end = start + (uint64_t)(CHURN_S * 1e9);
	int guard = 0;

	/* ---- churn ---- */
	while (mono_ns() < end && guard++ < (int)(CHURN_S * 1000 / 20)) {
		uint64_t now = mono_ns();
		double at = (double)(now - start) / 1e9;

		if (now >= next_churn) {
			next_churn += CHURN_MS * 1000000ull;
			if (rnd() % 10 < 7) {
				/* reload with another non-empty subset */
				unsigned nm;
				/* each cgroup a member with probability 3/4: ~6 members,
				 * ~24% real utilization while all their senders count */
				for (int tries = 0; tries < 100; tries++) {
					nm = 0;
					for (int i = 0; i < N_CG; i++)
						nm |= (rnd() % 4 != 0) << i;
					if (nm && nm != mask)
						break;
				}
				if (!nm || nm == mask)
					nm = mask ^ 1u;
				write_config(nm);
				uint64_t r0 = mono_ns();
				if (!reload_sock(reply, sizeof(reply))) {
					t.reload_fail++;
					report(&t, "t=%.2fs: reload failed: %s", at, reply);
				} else {
					double ms = (double)(mono_ns() - r0) / 1e6;
					if (ms > t.max_reload_ms)
						t.max_reload_ms = ms;
					t.reloads++;
					t.leaves += popcount(mask & ~nm);
					t.joins += popcount(nm & ~mask);
					mask = nm;
					in_member = nm;
				}
			} else {
				/* remove a cgroup under the daemon and recreate it: the
				 * new one has a new id, so it is not a member until the
				 * next reload names it; the old member is pruned within
				 * an epoch (or replaced by that reload) */
				int i = (int)(rnd() % N_CG);
				char name[32];

				assert_int_equal(move_pid(fx.park, fx.sender[i]), 0);
				ktest_cgroup_destroy(fx.cg[i]);
				snprintf(name, sizeof(name), "churn-%d", i);
				assert_int_equal(ktest_cgroup_create(name, fx.cg[i], sizeof(fx.cg[i])),
						 0);
				assert_int_equal(move_pid(fx.cg[i], fx.sender[i]), 0);
				t.removals++;
				if (in_member & (1u << i))
					t.leaves++;
				in_member &= ~(1u << i);
			}
		}
		if (now >= next_poll) {
			next_poll += POLL_MS * 1000000ull;
			if (!snap_take(&s))
				fail_msg("t=%.2fs: the daemon stopped answering", at);
			t.polls++;
			t.real_util_sum += popcount(in_member) * SEND_RATE / MIN_RATE * 100;
			t.shown_util_sum += s.util;
			if (s.util > t.max_util)
				t.max_util = s.util;
			if (s.pool_rate > t.max_pool_rate)
				t.max_pool_rate = s.pool_rate;
			if (!(s.util >= 0 && s.util <= 100)) {
				t.util_out_of_range++;
				report(&t, "t=%.2fs up=%.2fs: utilization_pct %.2f outside [0, 100]", at,
				       s.up, s.util);
			} else if (s.util >= THRESHOLD) {
				t.util_high++;
				report(&t, "t=%.2fs up=%.2fs: utilization_pct %.2f >= %.0f (real ~%.0f%%, "
					  "%d members, admitted %.0f, was %.0f)",
				       at, s.up, s.util, THRESHOLD,
				       popcount(in_member) * SEND_RATE / MIN_RATE * 100, s.members,
				       s.admitted, prev.admitted);
			}
			if (s.pool_rate > MIN_RATE + RATE_TOL) {
				t.rate_high++;
				report(&t, "t=%.2fs up=%.2fs: pool_rate %.3f > min %.0f + %.1f (util %.2f%%)",
				       at, s.up, s.pool_rate, MIN_RATE, RATE_TOL, s.util);
			}
			if (s.throttled > 0 && t.throttled++ == 0)
				report(&t, "t=%.2fs: throttled %.0f (a refusal reads as 100%% busy)", at,
				       s.throttled);
			if (t.polls > 1 && s.admitted < prev.admitted)
				t.admitted_backwards++;
			/* the kernel's member rates never add up beyond the pool */
			kernel_read((uint32_t)s.id, &k);
			double ratio = s.pool_rate > 0 ? k.rate_sum / s.pool_rate : 0;
			if (ratio > t.max_rate_sum_ratio)
				t.max_rate_sum_ratio = ratio;
			if (k.rate_sum > s.pool_rate * (1 + 1e-6) + 1e-6 ||
			    k.node_rate > s.pool_rate * (1 + 1e-6) + 1e-6) {
				if (t.rate_sum_high++ < 3)
					report(&t, "t=%.2fs: %d member buckets in the kernel grant %.2f/s "
						  "together, their node bucket %.2f/s, pool_rate %.2f/s "
						  "(bucket_rate %.3f)",
					       at, k.in_use, k.rate_sum, k.node_rate, s.pool_rate,
					       s.bucket_rate);
			}
			if (t.polls % SLOT_CHECK_EVERY == 0) {
				check_slots(&t, at, "churning");
				print_message("t=%5.2fs up=%6.2fs members %d (senders counted %d) util %6.2f%% "
					      "pool_rate %.3f bucket_rate %.3f admitted %.0f\n",
					      at, s.up, s.members, popcount(in_member), s.util,
					      s.pool_rate, s.bucket_rate, s.admitted);
			}
			prev = s;
		}
		uint64_t wake = next_poll < next_churn ? next_poll : next_churn;
		now = mono_ns();
		if (wake > now)
			ktest_sleep_ms((int)((wake - now + 999999) / 1000000));
	}

	/* ---- quiet: a known membership ---- */
	const unsigned final_mask = 0x1f; /* cgroups 0-4 */
	char *out = NULL;

	write_config(final_mask);
	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-s", fx.d.socket, "reload", NULL), 0);
	free(out);
	in_member = final_mask;
	ktest_sleep_ms(300);
	check_slots(&t, (double)(mono_ns() - start) / 1e9, "after the final reload");
	assert_true(slots_consistent(&s, &k));
	print_message("after the final reload: daemon %d members, %d buckets in use, %d "
		      "memberships, rates sum %.2f/s of pool_rate %.2f/s\n",
		      s.members, k.in_use, k.memberships, k.rate_sum, s.pool_rate);
	bool quiet_ok = s.members == popcount(final_mask) && k.in_use == popcount(final_mask) &&
			k.memberships == popcount(final_mask);

	/* two members' cgroups removed for good: pruned within an epoch */
	for (int i = 3; i < 5; i++) {
		assert_int_equal(move_pid(fx.park, fx.sender[i]), 0);
		ktest_cgroup_destroy(fx.cg[i]);
		fx.cg[i][0] = 0;
	}
	in_member &= ~0x18u;
	uint64_t p0 = mono_ns();
	for (int i = 0; i < 40; i++) {
		assert_true(snap_take(&s));
		if (s.members == 3)
			break;
		ktest_sleep_ms(100);
	}
	double prune_s = (double)(mono_ns() - p0) / 1e9;
	ktest_sleep_ms(200);
	assert_true(slots_consistent(&s, &k));
	print_message("after removing 2 member cgroups: pruned in %.2fs; daemon %d members, %d "
		      "buckets in use, %d memberships; util %.2f%% pool_rate %.3f\n",
		      prune_s, s.members, k.in_use, k.memberships, s.util, s.pool_rate);
	bool prune_ok = s.members == 3 && k.in_use == 3 && k.memberships == 3;
	if (s.util > t.max_util)
		t.max_util = s.util;
	if (s.pool_rate > t.max_pool_rate)
		t.max_pool_rate = s.pool_rate;
	bool final_rate_ok = s.pool_rate <= MIN_RATE + RATE_TOL && s.util < THRESHOLD;

	struct sender_stats st = senders_total();
	for (int i = 0; i < N_CG; i++)
		ktest_kill_wait(&fx.sender[i]);

	double mean_real = t.real_util_sum / (t.polls ? t.polls : 1),
	       mean_shown = t.shown_util_sum / (t.polls ? t.polls : 1);

	print_message("churn: %d polls, %d reloads (%d failed, slowest %.1f ms), %d cgroups removed "
		      "and recreated, %d leaves, %d joins\n",
		      t.polls, t.reloads, t.reload_fail, t.max_reload_ms, t.removals, t.leaves,
		      t.joins);
	print_message("senders: ok %llu refused %llu errors %llu; utilization real ~%.1f%%, shown "
		      "%.1f%% on average; status: max utilization %.2f%%, max pool_rate %.3f (bound "
		      "%.1f), admitted went down %d times\n",
		      st.ok, st.refused, st.errors, mean_real, mean_shown, t.max_util,
		      t.max_pool_rate, MIN_RATE + RATE_TOL, t.admitted_backwards);
	print_message("slots: %d consistent checks (%d skipped mid-prune), %d wrong; member bucket "
		      "rates summed up to %.2fx pool_rate (%d polls above it)\n",
		      t.slot_checks, t.slot_skipped, t.slot_bad, t.max_rate_sum_ratio,
		      t.rate_sum_high);
	if (t.printed > MAX_REPORTS)
		print_message("(%d more violations not printed)\n", t.printed - MAX_REPORTS);

	/* preconditions: the load was what the bounds assume */
	if (!(st.ok > 0) || st.errors || st.refused)
		fail_msg("senders: ok %llu refused %llu errors %llu: expected traffic, never refused",
			 st.ok, st.refused, st.errors);
	if (t.reload_fail)
		fail_msg("%d reloads failed", t.reload_fail);
	if (t.slot_checks < 10)
		fail_msg("only %d consistent slot checks", t.slot_checks);
	/* the defect's signature: utilization beyond [0, 100] or high after a
	 * leave, and onlyIfUsed ramping on it */
	if (t.util_out_of_range || t.util_high)
		fail_msg("utilization_pct outside [0, 100] %d times, >= %.0f%% %d times (max %.2f%%) "
			 "with real utilization ~%.0f%%",
			 t.util_out_of_range, THRESHOLD, t.util_high, t.max_util, mean_real);
	if (t.rate_high || !final_rate_ok)
		fail_msg("onlyIfUsed ramped below its threshold: pool_rate up to %.3f (> %.1f) in %d "
			 "polls",
			 t.max_pool_rate, MIN_RATE + RATE_TOL, t.rate_high);
	if (t.throttled)
		fail_msg("status showed throttled datagrams in %d polls", t.throttled);
	/* no slot leak */
	if (t.slot_bad || !quiet_ok || !prune_ok)
		fail_msg("bucket slots: %d wrong checks while churning; final reload %s; prune %s",
			 t.slot_bad, quiet_ok ? "ok" : "WRONG", prune_ok ? "ok" : "WRONG");
	/* pod scope shares the pool: the members' buckets never add up to more */
	if (t.rate_sum_high)
		fail_msg("member buckets granted up to %.2fx pool_rate together (%d of %d polls): "
			 "each member gets the whole pool until the tick after a reload",
			 t.max_rate_sum_ratio, t.rate_sum_high, t.polls);
	/* and utilization is not hidden the other way: a new slot's first
	 * counts and a leaving one's last are lost (a tick at most each), so
	 * the mean shown is a little under the real one, never far under */
	if (mean_shown < 0.5 * mean_real)
		fail_msg("utilization shown %.1f%% on average, real ~%.1f%%: under-reported",
			 mean_shown, mean_real);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_churn_keeps_utilization_true, setup, teardown),
	};

	return cmocka_run_group_tests_name("e2e_churn", tests, NULL, NULL);
}
