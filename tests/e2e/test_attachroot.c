// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* attachRoot: a real daemon attaches each hook's program once, at a test
 * parent cgroup, and none on the members below it. Measured:
 *   - bpf_prog_query: one program per hook the limits need on the root,
 *     none on the member; the pinned links are the root's only;
 *   - UDP from the member to a loopback receiver is held to the rate
 *     (EBUSY refusals, datagrams received <= rate x time + burst);
 *   - a sibling below the root that is no member, and a cgroup outside the
 *     root, are not limited;
 *   - a member a glob pattern finds after the start is enforced with no new
 *     link;
 *   - SIGKILL and a new daemon on the same pin dir: still one link per hook,
 *     still enforcing;
 *   - a relative or missing attachRoot, or a member outside it, is refused
 *     by --check with one line naming the field, and by a reload, which
 *     changes nothing. */
#include <errno.h>
#include <dirent.h>
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
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <bpf/bpf.h>
#include <cmocka.h>

#include "arrivals.h"
#include "ktest.h"

#define RATE 20.0
#define BURST 5.0
#define LOAD_S 1.0

static struct fixture {
	struct ktest_daemon d;
	char root[PATH_MAX];    /* attachRoot */
	char member[PATH_MAX];  /* root/member: a plain path */
	char sibling[PATH_MAX]; /* root/sibling: no member */
	char pod[PATH_MAX];     /* root/pod-1: the pattern's, made after the start */
	char outside[PATH_MAX]; /* next to the root */
	struct arrivals a;
	int conn_port;          /* the connection limit's (nothing listens) */
} fx;

/* The attach types of the hooks the two limits below need: connect (the
 * connection limit), sendmsg and egress (datagram), sock_create (no raw
 * sockets); sockops only for byte limits. */
static const struct {
	enum bpf_attach_type type;
	const char *name;
	int want;
} hooks[] = {
	{ BPF_CGROUP_INET4_CONNECT, "connect4", 1 }, { BPF_CGROUP_INET6_CONNECT, "connect6", 1 },
	{ BPF_CGROUP_UDP4_SENDMSG, "sendmsg4", 1 },  { BPF_CGROUP_UDP6_SENDMSG, "sendmsg6", 1 },
	{ BPF_CGROUP_INET_EGRESS, "egress", 1 },     { BPF_CGROUP_INET_SOCK_CREATE, "sock_create", 1 },
	{ BPF_CGROUP_SOCK_OPS, "sockops", 0 },
};
#define N_HOOKS (sizeof(hooks) / sizeof(hooks[0]))
#define N_LINKS 6

static int setup(void **state)
{
	(void)state;
	memset(&fx, 0, sizeof(fx));
	fx.d.pid = -1;
	if (ktest_root_unavailable())
		return 0;
	if (ktest_cgroup_create("attachroot", fx.root, sizeof(fx.root)) ||
	    ktest_cgroup_create("attachroot-out", fx.outside, sizeof(fx.outside)))
		return -1;
	snprintf(fx.member, sizeof(fx.member), "%s/member", fx.root);
	snprintf(fx.sibling, sizeof(fx.sibling), "%s/sibling", fx.root);
	snprintf(fx.pod, sizeof(fx.pod), "%s/pod-1", fx.root);
	if (mkdir(fx.member, 0755) || mkdir(fx.sibling, 0755))
		return -1;
	fx.conn_port = ktest_free_port(SOCK_STREAM);
	return arrivals_start(&fx.a) ? -1 : 0;
}

static int teardown(void **state)
{
	(void)state;
	if (fx.d.dir[0])
		ktest_daemon_cleanup(&fx.d);
	if (fx.member[0]) {
		ktest_cgroup_destroy(fx.pod);
		ktest_cgroup_destroy(fx.member);
		ktest_cgroup_destroy(fx.sibling);
	}
	if (fx.root[0])
		ktest_cgroup_destroy(fx.root);
	if (fx.outside[0])
		ktest_cgroup_destroy(fx.outside);
	arrivals_stop(&fx.a);
	return 0;
}

/* The config body: attachRoot `root` (NULL: none) and the two limits on
 * the member (plain path) and the root's pod-* (pattern); `extra` another
 * cgroups entry of the datagram limit (or ""). */
static void body_for(char *buf, size_t len, const char *root, const char *extra)
{
	char ar[PATH_MAX + 32] = "";

	if (root)
		snprintf(ar, sizeof(ar), "attachRoot: \"%s\"\n", root);
	assert_true(snprintf(buf, len,
			     "tickInterval: 100ms\n"
			     "%s"
			     "limits:\n"
			     "  - name: ar\n"
			     "    cgroups: [\"%s\", \"%s/pod-*\"%s]\n"
			     "    match: {cidrs: [127.0.0.1/32], ports: %d, protocol: udp}\n"
			     "    unit: datagram\n"
			     "    burst: %.0f\n"
			     "    rateLimit: {max: %.0f}\n"
			     "  - name: arc\n"
			     "    cgroups: [\"%s\"]\n"
			     "    match: {cidrs: [127.0.0.1/32], ports: %d, protocol: tcp}\n"
			     "    unit: connection\n"
			     "    rateLimit: {max: 1000}\n",
			     ar, fx.member, fx.root, extra, fx.a.port, BURST, RATE, fx.member,
			     fx.conn_port) < (int)len);
}

/* Programs attached directly at cg for attach type t (not inherited). */
static int progs_at(const char *cg, enum bpf_attach_type t)
{
	__u32 cnt = 0, flags = 0;
	int fd = open(cg, O_RDONLY | O_DIRECTORY | O_CLOEXEC), ret;

	assert_true(fd >= 0);
	ret = bpf_prog_query(fd, t, 0, &flags, NULL, &cnt);
	close(fd);
	assert_int_equal(ret, 0);
	return (int)cnt;
}

/* The pinned links of the daemon's pin dir; each must be the root's. */
static int links_of_root(void)
{
	char dir[PATH_MAX], want[32];
	struct dirent *de;
	int n = 0;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/links", fx.d.pin_dir);
	snprintf(want, sizeof(want), "%llu-", (unsigned long long)ktest_cgroup_id(fx.root));
	d = opendir(dir);
	assert_non_null(d);
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		if (strncmp(de->d_name, want, strlen(want)))
			print_message("link not on the root: %s\n", de->d_name);
		assert_true(!strncmp(de->d_name, want, strlen(want)));
		n++;
	}
	closedir(d);
	return n;
}

/* (a): exactly one program per needed hook on the root, none on `member`
 * (nor on any cgroup in `others`), and the root's links only. */
static void assert_attached_once(const char *const *others)
{
	for (size_t h = 0; h < N_HOOKS; h++) {
		int n = progs_at(fx.root, hooks[h].type);

		if (n != hooks[h].want)
			print_message("%s: %d programs on the root, want %d\n", hooks[h].name, n,
				      hooks[h].want);
		assert_int_equal(n, hooks[h].want);
		for (const char *const *o = others; *o; o++)
			assert_int_equal(progs_at(*o, hooks[h].type), 0);
	}
	assert_int_equal(links_of_root(), N_LINKS);
}

/* UDP from cg for LOAD_S at full speed: what kt-load saw, and the datagrams
 * that arrived meanwhile in *arrived. */
static struct ktest_load send_from(const char *cg, unsigned long long *arrived)
{
	struct ktest_load l;
	unsigned long long before = arrivals_total(&fx.a);

	assert_int_equal(ktest_load(cg, "udp", "127.0.0.1", fx.a.port, LOAD_S, &l), 0);
	ktest_sleep_ms(50); /* the receiver thread catches up */
	*arrived = arrivals_total(&fx.a) - before;
	return l;
}

/* (b): cg is held to its share of RATE (pod scope, a local store: the rate
 * split equally among the limit's `members`): refusals, and arrivals within
 * share x time + burst. */
static void assert_limited_n(const char *what, const char *cg, int members)
{
	unsigned long long arrived;
	struct ktest_load l = send_from(cg, &arrived);
	double share = RATE / members, bound = share * l.elapsed + BURST;

	print_message("%s: ok=%llu refused=%llu arrived=%llu in %.2fs (bound %.1f)\n", what, l.ok,
		      l.refused, arrived, l.elapsed, bound);
	assert_true(l.refused > 0);
	assert_true((double)arrived <= bound + 2);
	assert_true((double)l.ok <= bound + 2);
	/* and it is the limit, not something else, that holds it back */
	assert_true((double)arrived >= 0.5 * share * l.elapsed);
}

static void assert_limited(const char *what, const char *cg)
{
	assert_limited_n(what, cg, 1);
}

/* (c), (e): cg is not limited: no refusal, far more than the rate. */
static void assert_unlimited(const char *what, const char *cg)
{
	unsigned long long arrived;
	struct ktest_load l = send_from(cg, &arrived);

	print_message("%s: ok=%llu refused=%llu arrived=%llu in %.2fs\n", what, l.ok, l.refused,
		      arrived, l.elapsed);
	assert_int_equal(l.refused, 0);
	assert_true((double)l.ok > 10 * (RATE * l.elapsed + BURST));
}

/* Waits (up to 3 s) until a short burst from cg is refused: the member
 * joined. */
static void wait_enforced(const char *cg)
{
	struct ktest_load l;

	for (int i = 0; i < 30; i++) {
		assert_int_equal(ktest_load(cg, "udp", "127.0.0.1", fx.a.port, 0.1, &l), 0);
		if (l.refused)
			return;
	}
	fail_msg("%s never enforced", cg);
}

static void test_attach_root(void **state)
{
	const char *const below[] = { fx.member, fx.sibling, NULL };
	const char *const below_pod[] = { fx.member, fx.sibling, fx.pod, NULL };
	char body[4096];

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	body_for(body, sizeof(body), fx.root, "");
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);

	/* (a) */
	assert_attached_once(below);
	/* (b) */
	ktest_sleep_ms(300);
	assert_limited("member", fx.member);
	/* (c) */
	assert_unlimited("sibling below the root", fx.sibling);
	/* (e) */
	assert_unlimited("outside the root", fx.outside);

	/* (d): a pattern's member made after the start */
	assert_int_equal(mkdir(fx.pod, 0755), 0);
	wait_enforced(fx.pod);
	ktest_sleep_ms(300); /* its bucket refills */
	assert_limited_n("pod-1 (joined after the start)", fx.pod, 2);
	assert_attached_once(below_pod);

	/* (f): SIGKILL, and a new daemon adopts the pinned links */
	assert_int_equal(ktest_daemon_signal_wait(&fx.d, SIGKILL) != 0, 1);
	fx.d.pid = -1;
	/* the old daemon's links still enforce while none runs */
	assert_attached_once(below_pod);
	assert_limited_n("member, no daemon", fx.member, 2);
	assert_int_equal(ktest_daemon_start_logged(&fx.d), 0);
	assert_attached_once(below_pod);
	ktest_sleep_ms(300);
	assert_limited_n("member after restart", fx.member, 2);
	assert_limited_n("pod-1 after restart", fx.pod, 2);
	assert_unlimited("sibling after restart", fx.sibling);
}

/* --check on body: exit 2 and one line naming the file and n1..n3; n1 NULL:
 * "FILE:LINE: attachRoot: " at the attachRoot line. */
static void assert_check_refuses(const char *body, const char *n1, const char *n2, const char *n3)
{
	char path[PATH_MAX], line[PATH_MAX + 64], *text, *out = NULL;

	snprintf(path, sizeof(path), "%s/bad.yaml", fx.d.dir);
	text = ktest_daemon_config_text(&fx.d, body);
	assert_non_null(text);
	assert_int_equal(ktest_write_file(path, text), 0);
	free(text);
	assert_int_equal(ktest_run_bin("kthrottled", &out, "--config", path, "--check", NULL), 2);
	print_message("--check: %s", out);
	assert_true(ktest_is_one_line(out));
	assert_non_null(strstr(out, path));
	if (!n1) {
		snprintf(line, sizeof(line), "%s:%d: attachRoot: ", path,
			 ktest_line_of(path, "attachRoot:"));
		n1 = line;
	}
	assert_non_null(strstr(out, n1));
	if (n2)
		assert_non_null(strstr(out, n2));
	if (n3)
		assert_non_null(strstr(out, n3));
	free(out);
}

/* A reload to body is refused (naming n1) and changes nothing. */
static void assert_reload_refused(const char *body, const char *n1)
{
	const char *const below[] = { fx.member, fx.sibling, NULL };
	char *out = NULL;

	assert_int_equal(ktest_daemon_config(&fx.d, body), 0);
	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-s", fx.d.socket, "reload", NULL), 1);
	print_message("reload: %s", out);
	assert_true(!strncmp(out, "error:", 6));
	assert_non_null(strstr(out, n1));
	free(out);
	assert_attached_once(below);
	assert_limited("member after a refused reload", fx.member);
	assert_unlimited("outside after a refused reload", fx.outside);
}

static void test_bad_attach_root(void **state)
{
	char body[4096], good[4096], missing[PATH_MAX + 16];

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	body_for(good, sizeof(good), fx.root, "");
	assert_int_equal(ktest_daemon_up(&fx.d, good), 0);

	/* relative */
	body_for(body, sizeof(body), "kt-relative", "");
	assert_check_refuses(body, NULL, "must be an absolute path", NULL);
	/* missing */
	snprintf(missing, sizeof(missing), "%s/nope", fx.root);
	body_for(body, sizeof(body), missing, "");
	assert_check_refuses(body, NULL, "No such file or directory", NULL);
	/* not a cgroup v2 directory */
	body_for(body, sizeof(body), "/tmp", "");
	assert_check_refuses(body, NULL, "not a cgroup v2 directory", NULL);
	/* a member outside it: names the limit, the cgroup and the field */
	{
		char extra[PATH_MAX + 8];

		snprintf(extra, sizeof(extra), ", \"%s\"", fx.outside);
		body_for(body, sizeof(body), fx.root, extra);
		assert_check_refuses(body, "limits[0] (ar)", fx.outside, "attachRoot");
		/* the good config passes the same check */
		assert_int_equal(ktest_daemon_config(&fx.d, good), 0);
		char *out = NULL;
		assert_int_equal(ktest_run_bin("kthrottled", &out, "--config", fx.d.config,
					       "--check", NULL), 0);
		free(out);

		ktest_sleep_ms(300);
		assert_reload_refused(body, "attachRoot");
	}
	body_for(body, sizeof(body), missing, "");
	assert_reload_refused(body, "attachRoot");
	body_for(body, sizeof(body), "kt-relative", "");
	assert_reload_refused(body, "attachRoot");
}

/* Reloads between a root and per-member attachment: the links move, and
 * the member is enforced after each (the new links are made before the old
 * go, so there is no gap in between). */
static void test_switch(void **state)
{
	const char *const below[] = { fx.member, fx.sibling, NULL };
	char body[4096], *out = NULL;
	int n;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	body_for(body, sizeof(body), NULL, "");
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
	/* per-member: the member's links, none on the root */
	for (size_t h = 0; h < N_HOOKS; h++) {
		assert_int_equal(progs_at(fx.root, hooks[h].type), 0);
		assert_int_equal(progs_at(fx.member, hooks[h].type), hooks[h].want);
	}
	ktest_sleep_ms(300);
	assert_limited("member, per-member links", fx.member);

	body_for(body, sizeof(body), fx.root, "");
	assert_int_equal(ktest_daemon_config(&fx.d, body), 0);
	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-s", fx.d.socket, "reload", NULL), 0);
	free(out);
	assert_attached_once(below);
	assert_limited("member, root link", fx.member);

	body_for(body, sizeof(body), NULL, "");
	assert_int_equal(ktest_daemon_config(&fx.d, body), 0);
	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-s", fx.d.socket, "reload", NULL), 0);
	free(out);
	for (size_t h = 0; h < N_HOOKS; h++) {
		assert_int_equal(progs_at(fx.root, hooks[h].type), 0);
		n = progs_at(fx.member, hooks[h].type);
		assert_int_equal(n, hooks[h].want);
	}
	assert_limited("member, per-member links again", fx.member);
}

static int reset(void **state)
{
	(void)state;
	if (fx.d.dir[0])
		ktest_daemon_cleanup(&fx.d);
	memset(&fx.d, 0, sizeof(fx.d));
	fx.d.pid = -1;
	if (fx.pod[0])
		ktest_cgroup_destroy(fx.pod);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_attach_root, reset),
		cmocka_unit_test_teardown(test_bad_attach_root, reset),
		cmocka_unit_test_teardown(test_switch, reset),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
