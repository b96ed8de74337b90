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
 *     changes nothing;
 *   - attachRoot: members keeps per-member links;
 *   - no attachRoot (auto): one link per hook at the deepest common
 *     ancestor of what the limits select (a pattern's static directory; a
 *     single cgroup itself), a pod made after the start is limited with no
 *     new link; limits in unrelated top-level cgroups fall back to
 *     per-member links (said once in the log); a pattern elsewhere moves
 *     the root up and the member that appears there is enforced. Status
 *     shows the attach point. */
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
#include "kt_daemonfx.h"
#include "ktest.h"

#define RATE 20.0
#define BURST 5.0
#define LOAD_S 0.5 /* a flood: long enough for share x time + burst to tell 2x the rate */

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
	if (!kt_daemonfx_begin(&fx, sizeof(fx), &fx.d))
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
	kt_daemonfx_end(&fx.d, NULL);
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

/* The config body: attachRoot `root` (NULL: none, the default auto), the
 * datagram limit "ar" on the cgroups entries `dgram` and the connection
 * limit "arc" on `conn` (the insides of YAML lists). */
static void body_with(char *buf, size_t len, const char *root, const char *dgram, const char *conn)
{
	char ar[PATH_MAX + 32] = "";

	if (root)
		snprintf(ar, sizeof(ar), "attachRoot: \"%s\"\n", root);
	assert_true(snprintf(buf, len,
			     "tickInterval: 100ms\n"
			     "%s"
			     "limits:\n"
			     "  - name: ar\n"
			     "    cgroups: [%s]\n"
			     "    match: {cidrs: [127.0.0.1/32], ports: %d, protocol: udp}\n"
			     "    unit: datagram\n"
			     "    burst: %.0f\n"
			     "    rateLimit: {max: %.0f}\n"
			     "  - name: arc\n"
			     "    cgroups: [%s]\n"
			     "    match: {cidrs: [127.0.0.1/32], ports: %d, protocol: tcp}\n"
			     "    unit: connection\n"
			     "    rateLimit: {max: 1000}\n",
			     ar, dgram, fx.a.port, BURST, RATE, conn, fx.conn_port) < (int)len);
}

/* body_with the two limits on the member (plain path) and the root's pod-*
 * (pattern); `extra` another cgroups entry of the datagram limit (or ""). */
static void body_for(char *buf, size_t len, const char *root, const char *extra)
{
	char dgram[3 * PATH_MAX], conn[PATH_MAX + 4];

	snprintf(dgram, sizeof(dgram), "\"%s\", \"%s/pod-*\"%s", fx.member, fx.root, extra);
	snprintf(conn, sizeof(conn), "\"%s\"", fx.member);
	body_with(buf, len, root, dgram, conn);
}

/* Programs attached directly at cg for attach type t (not inherited); 0
 * when cg does not exist (yet). */
static int progs_at(const char *cg, enum bpf_attach_type t)
{
	__u32 cnt = 0, flags = 0;
	int fd = open(cg, O_RDONLY | O_DIRECTORY | O_CLOEXEC), ret;

	if (fd < 0 && errno == ENOENT)
		return 0;
	assert_true(fd >= 0);
	ret = bpf_prog_query(fd, t, 0, &flags, NULL, &cnt);
	close(fd);
	assert_int_equal(ret, 0);
	return (int)cnt;
}

/* The pinned links of the daemon's pin dir; each must be cg's. */
static int links_of(const char *cg)
{
	char dir[PATH_MAX], want[32];
	struct dirent *de;
	int n = 0;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/links", fx.d.pin_dir);
	snprintf(want, sizeof(want), "%llu-", (unsigned long long)ktest_cgroup_id(cg));
	d = opendir(dir);
	assert_non_null(d);
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		if (strncmp(de->d_name, want, strlen(want)))
			print_message("link not on %s: %s\n", cg, de->d_name);
		assert_true(!strncmp(de->d_name, want, strlen(want)));
		n++;
	}
	closedir(d);
	return n;
}

/* (a): exactly one program per needed hook on cg, none on any cgroup in
 * `others`, and cg's links only. */
static void assert_attached_at(const char *cg, const char *const *others)
{
	for (size_t h = 0; h < N_HOOKS; h++) {
		int n = progs_at(cg, hooks[h].type);

		if (n != hooks[h].want)
			print_message("%s: %d programs on %s, want %d\n", hooks[h].name, n, cg,
				      hooks[h].want);
		assert_int_equal(n, hooks[h].want);
		for (const char *const *o = others; *o; o++)
			assert_int_equal(progs_at(*o, hooks[h].type), 0);
	}
	assert_int_equal(links_of(cg), N_LINKS);
}

/* The same at the root */
static void assert_attached_once(const char *const *others)
{
	assert_attached_at(fx.root, others);
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

/* With the programs at the root: the member is limited, its sibling below
 * the root and a cgroup outside it are not, and a pattern's member made
 * after the start (fx.pod) is limited without a new link. `how` tells the
 * runs apart in failure messages. */
static void assert_root_enforces(const char *how)
{
	char what[128];

	ktest_sleep_ms(300);
	snprintf(what, sizeof(what), "member (%s)", how);
	assert_limited(what, fx.member);
	snprintf(what, sizeof(what), "sibling below the root (%s)", how);
	assert_unlimited(what, fx.sibling);
	snprintf(what, sizeof(what), "outside the root (%s)", how);
	assert_unlimited(what, fx.outside);

	assert_int_equal(mkdir(fx.pod, 0755), 0);
	wait_enforced(fx.pod);
	ktest_sleep_ms(300); /* its bucket refills */
	snprintf(what, sizeof(what), "pod-1, joined after the start (%s)", how);
	assert_limited_n(what, fx.pod, 2);
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
	/* (b) member limited, (c) sibling and (e) outsider not, (d) a
	 * pattern's member made after the start */
	assert_root_enforces("attachRoot");
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

/* A reload to body that succeeds. */
static void reload_to(const char *body)
{
	char *out = NULL;

	assert_int_equal(ktest_daemon_config(&fx.d, body), 0);
	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-s", fx.d.socket, "reload", NULL), 0);
	free(out);
}

/* kthrottlectl status shows `text` (a whole line, or its start), status
 * --json holds `json`. */
static void assert_status_attach(const char *text, const char *json)
{
	char *out = NULL;

	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-s", fx.d.socket, "status", NULL), 0);
	if (!strstr(out, text))
		print_message("status has no \"%s\":\n%s", text, out);
	assert_non_null(strstr(out, text));
	free(out);
	out = NULL;
	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-s", fx.d.socket, "status", "--json",
				       NULL),
			 0);
	if (!strstr(out, json))
		print_message("status --json has no %s:\n%s", json, out);
	assert_non_null(strstr(out, json));
	free(out);
}

/* Occurrences of needle in the daemon's log. */
static int log_count(const char *needle)
{
	char *log = ktest_slurp(fx.d.log);
	int n = 0;

	for (const char *p = log; (p = strstr(p, needle)); p++)
		n++;
	free(log);
	return n;
}

/* (1) No attachRoot (auto): the limits select the member and the root's
 * pod-*: their deepest common ancestor is the root, which gets one link per
 * hook; a pod made after the start is limited with no new link. A config
 * whose limits select the member alone attaches at the member itself. */
static void test_default_auto(void **state)
{
	const char *const below[] = { fx.member, fx.sibling, NULL };
	const char *const below_pod[] = { fx.member, fx.sibling, fx.pod, NULL };
	const char *const not_member[] = { fx.root, fx.sibling, NULL };
	char body[4096], want[PATH_MAX + 64], member[PATH_MAX + 4];

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	body_for(body, sizeof(body), NULL, "");
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
	assert_attached_once(below);
	snprintf(want, sizeof(want), "attach %s (auto)\n", fx.root);
	assert_status_attach(want, "(auto)\"");
	assert_root_enforces("auto root");
	assert_attached_once(below_pod);

	/* one cgroup selected: it is its own common ancestor */
	snprintf(member, sizeof(member), "\"%s\"", fx.member);
	body_with(body, sizeof(body), "auto", member, member);
	reload_to(body);
	assert_attached_at(fx.member, not_member);
	snprintf(want, sizeof(want), "attach %s (auto)\n", fx.member);
	assert_status_attach(want, "(auto)\"");
	ktest_sleep_ms(300);
	assert_limited("member (its own root)", fx.member);
	assert_unlimited("pod-1, no longer selected", fx.pod);
}

/* (3) Limits in unrelated top-level cgroups: their common ancestor is the
 * cgroup v2 root, where no program goes; each member gets its own links,
 * the log says why once, and both are enforced. */
static void test_root_fallback(void **state)
{
	const char *const none[] = { fx.root, fx.sibling, fx.pod, NULL };
	char body[4096], extra[PATH_MAX + 8];
	static const char why[] = "no common ancestor below the cgroup v2 root";

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	snprintf(extra, sizeof(extra), ", \"%s\"", fx.outside);
	body_for(body, sizeof(body), NULL, extra);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
	for (size_t h = 0; h < N_HOOKS; h++) {
		for (const char *const *o = none; *o; o++)
			assert_int_equal(progs_at(*o, hooks[h].type), 0);
		assert_int_equal(progs_at(fx.member, hooks[h].type), hooks[h].want);
		/* the datagram limit's hooks (and sock_create) on outside */
		assert_int_equal(progs_at(fx.outside, hooks[h].type),
				 hooks[h].want && hooks[h].type != BPF_CGROUP_INET4_CONNECT &&
					 hooks[h].type != BPF_CGROUP_INET6_CONNECT);
	}
	assert_status_attach("attach members (auto: the limits' cgroups have no common ancestor below the cgroup v2 root",
			     "\"attach\":\"members (auto: ");
	ktest_sleep_ms(300);
	assert_limited_n("member (per-member fallback)", fx.member, 2);
	assert_limited_n("outside (per-member fallback)", fx.outside, 2);
	assert_unlimited("sibling (no member, no link)", fx.sibling);

	/* a pod the pattern finds later: its own links, as before */
	assert_int_equal(mkdir(fx.pod, 0755), 0);
	wait_enforced(fx.pod);
	for (size_t h = 0; h < N_HOOKS; h++)
		assert_int_equal(progs_at(fx.root, hooks[h].type), 0);
	ktest_sleep_ms(300);
	assert_limited_n("pod-1 (per-member fallback)", fx.pod, 3);
	/* said once, not at every rescan */
	assert_int_equal(log_count(why), 1);
}

/* (4) A member appearing outside the auto root is enforced: the limits
 * first select root/a/pod-* (auto root: root/a); a reload adds a pattern
 * elsewhere, root/b/pod-*, and the root moves up to their common ancestor
 * (new links before the old go); a pod that appears in b after that is
 * enforced by a map update, no new link. */
static char dir_a[PATH_MAX], dir_b[PATH_MAX], pod_a[PATH_MAX + 8], pod_b[PATH_MAX + 8];

static void test_root_moves(void **state)
{
	const char *const at_a[] = { fx.root, pod_a, NULL };
	const char *const at_root[] = { dir_a, dir_b, pod_a, pod_b, fx.member, NULL };
	char body[4096], dgram[3 * PATH_MAX], conn[PATH_MAX + 16], want[PATH_MAX + 64];

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	snprintf(dir_a, sizeof(dir_a), "%s/a", fx.root);
	snprintf(dir_b, sizeof(dir_b), "%s/b", fx.root);
	snprintf(pod_a, sizeof(pod_a), "%s/pod-1", dir_a);
	snprintf(pod_b, sizeof(pod_b), "%s/pod-2", dir_b);
	assert_int_equal(mkdir(dir_a, 0755), 0);
	assert_int_equal(mkdir(dir_b, 0755), 0);
	assert_int_equal(mkdir(pod_a, 0755), 0);

	snprintf(dgram, sizeof(dgram), "\"%s/pod-*\"", dir_a);
	snprintf(conn, sizeof(conn), "\"%s/pod-*\"", dir_a);
	body_with(body, sizeof(body), NULL, dgram, conn);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
	assert_attached_at(dir_a, at_a);
	snprintf(want, sizeof(want), "attach %s (auto)\n", dir_a);
	assert_status_attach(want, "(auto)\"");
	ktest_sleep_ms(300);
	assert_limited("a/pod-1 (auto root a)", pod_a);

	snprintf(dgram, sizeof(dgram), "\"%s/pod-*\", \"%s/pod-*\"", dir_a, dir_b);
	body_with(body, sizeof(body), NULL, dgram, conn);
	reload_to(body);
	assert_attached_once(at_root);
	snprintf(want, sizeof(want), "attach %s (auto)\n", fx.root);
	assert_status_attach(want, "(auto)\"");
	assert_limited("a/pod-1 after the root moved up", pod_a);

	assert_int_equal(mkdir(pod_b, 0755), 0);
	wait_enforced(pod_b);
	ktest_sleep_ms(300);
	assert_limited_n("b/pod-2 (joined outside the first root)", pod_b, 2);
	assert_attached_once(at_root);
	assert_unlimited("member (not selected, below the root)", fx.member);
}

/* Reloads between a root and per-member attachment (attachRoot: members):
 * the links move, and the member is enforced after each (the new links are
 * made before the old go, so there is no gap in between). */
static void test_switch(void **state)
{
	const char *const below[] = { fx.member, fx.sibling, NULL };
	char body[4096], *out = NULL;
	int n;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	body_for(body, sizeof(body), "members", "");
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
	/* per-member: the member's links, none on the root */
	for (size_t h = 0; h < N_HOOKS; h++) {
		assert_int_equal(progs_at(fx.root, hooks[h].type), 0);
		assert_int_equal(progs_at(fx.member, hooks[h].type), hooks[h].want);
	}
	ktest_sleep_ms(300);
	assert_limited("member, per-member links", fx.member);
	assert_status_attach("attach members\n", "\"attach\":\"members\"");

	body_for(body, sizeof(body), fx.root, "");
	assert_int_equal(ktest_daemon_config(&fx.d, body), 0);
	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "-s", fx.d.socket, "reload", NULL), 0);
	free(out);
	assert_attached_once(below);
	assert_limited("member, root link", fx.member);

	body_for(body, sizeof(body), "members", "");
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
	if (dir_a[0]) {
		ktest_cgroup_destroy(pod_a);
		ktest_cgroup_destroy(pod_b);
		ktest_cgroup_destroy(dir_a);
		ktest_cgroup_destroy(dir_b);
		dir_a[0] = 0;
	}
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_attach_root, reset),
		cmocka_unit_test_teardown(test_bad_attach_root, reset),
		cmocka_unit_test_teardown(test_switch, reset),
		cmocka_unit_test_teardown(test_default_auto, reset),
		cmocka_unit_test_teardown(test_root_fallback, reset),
		cmocka_unit_test_teardown(test_root_moves, reset),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
