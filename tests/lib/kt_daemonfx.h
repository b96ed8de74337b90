/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The daemon fixture of the e2e tests: the first and last steps of a
 * setup/teardown around a struct ktest_daemon (and the test's cgroup), and
 * reading numbers out of its status; whole cmocka fixtures a file names
 * instead of writing its own (kt_dfx_setup, the group cgroup, the private
 * bpffs); and what several single-daemon tests do alike (the "ok" config,
 * configs built piece by piece, the control socket, a forked child's
 * result). The static inline helpers and kt_cat assert with cmocka (this
 * header includes it); the rest is in kt_daemonfx.c. */
#ifndef KT_DAEMONFX_H
#define KT_DAEMONFX_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "ktest.h"
#include "redis_proc.h"

/* The start of a daemon test's setup: the fixture (len bytes at fx) zeroed
 * and d, inside it, marked not started (pid -1). False when root tests
 * cannot run here: then the setup returns 0 and the test skips itself. */
bool kt_daemonfx_begin(void *fx, size_t len, struct ktest_daemon *d);
/* kt_daemonfx_begin, then cgroup `name` into cg (ktest_cgroup_create): 0,
 * 0 without the cgroup when root tests cannot run here, or -1. */
int kt_daemonfx_setup(void *fx, size_t len, struct ktest_daemon *d, const char *name, char *cg,
		      size_t cg_len);
/* The end of its teardown: d cleaned up if it was prepared, cgroup cg
 * destroyed if it was made (cg may be NULL). */
void kt_daemonfx_end(struct ktest_daemon *d, const char *cg);

/* A number from d's "status json": limit `limit`'s field, or with limit
 * NULL a top-level one (uptime_s...). False if there is no answer or no
 * such number. */
bool kt_daemonfx_status_num(const struct ktest_daemon *d, const char *limit, const char *field,
			    double *v);

/* cmocka: limit `limit`'s field in d's status json; fails the test when
 * there is no answer or no such number. */
static inline double kt_status_num(const struct ktest_daemon *d, const char *limit,
				   const char *field)
{
	char *out = ktest_daemon_cmd(d, "status json");
	double v = -1;

	assert_non_null(out);
	assert_true(ktest_json_limit_num(out, limit, field, &v));
	free(out);
	return v;
}

/* cmocka: writes d's config, "tickInterval: 100ms" and `limits` (YAML
 * list items) under "limits:". */
static inline void kt_write_limits(struct ktest_daemon *d, const char *limits)
{
	char body[4096];

	snprintf(body, sizeof(body), "tickInterval: 100ms\nlimits:\n%s", limits);
	assert_int_equal(ktest_daemon_config(d, body), 0);
}

/* The setup of a file whose setup is only the daemon fixture's: main fills
 * kt_dfx, the tests name kt_dfx_setup as their cmocka setup. */
struct kt_daemonfx_spec {
	void *fx;               /* the file's fixture, zeroed */
	size_t len;
	struct ktest_daemon *d; /* in it, marked not started */
	pid_t *kid;             /* a helper process of the test: -1, or NULL */
	const char *cgroup;     /* NULL, or a cgroup of this name into cg */
	char *cg;               /* char[PATH_MAX] */
	char *tmp;              /* NULL, or a temp dir into tmp[tmp_len] */
	size_t tmp_len;
	int *metrics_port;      /* NULL, or a free TCP port for the metrics endpoint */
};
extern struct kt_daemonfx_spec kt_dfx;
/* The steps of kt_dfx in the order above; the cgroup, temp dir and port
 * only when root tests can run here. 0 or -1. */
int kt_dfx_setup(void **state);

/* Group fixtures around a test cgroup: cgroup `name` into cg, or nothing
 * when root tests cannot run here (0, or -1); and its removal if made. */
int kt_daemonfx_group_cg(const char *name, char *cg, size_t cg_len);
void kt_daemonfx_group_cg_end(const char *cg);
/* The same as cmocka group fixtures: main names the cgroup and cg with
 * kt_daemonfx_group, then passes kt_daemonfx_group_setup/_teardown. */
void kt_daemonfx_group(const char *name, char *cg, size_t cg_len);
int kt_daemonfx_group_setup(void **state);
int kt_daemonfx_group_teardown(void **state);
/* A test's daemons dm[0..n): zeroed and not started (setup); cleaned up
 * if prepared (teardown). */
void kt_daemonfx_dms_begin(struct ktest_daemon *dm, int n);
void kt_daemonfx_dms_end(struct ktest_daemon *dm, int n);

/* The smallest valid config body: limit "ok" on cgroup cg, UDP to
 * 127.0.0.1:9, burst 20, max 200 (a daemon that starts and enforces).
 * Returns buf. */
const char *kt_daemonfx_ok_body(char *buf, size_t len, const char *cg);

/* A connected Unix stream socket to path (a daemon's control socket
 * without the ktest_daemon_cmd framing), or -1. */
int kt_daemonfx_connect(const char *path);

/* fork() for a helper process of the test (a server, a load): the child
 * dies with the test (PDEATHSIG) and within 300 s in any case. */
pid_t kt_daemonfx_fork_bounded(void);

/* The private bpffs of a group of tests whose daemons pin there instead of
 * under /sys/fs/bpf (0700: clients that are not root could not open the
 * pins). main sets prefix; kt_daemonfx_bpffs_group_setup mounts it on
 * mnt, or says why not in skip_why (for KTEST_SKIP_IF); the teardown
 * removes it. */
struct kt_daemonfx_bpffs {
	const char *prefix; /* of /tmp/<prefix>-XXXXXX */
	char mnt[64];
	const char *skip_why;
};
extern struct kt_daemonfx_bpffs kt_bpffs;
int kt_daemonfx_bpffs_group_setup(void **state);
int kt_daemonfx_bpffs_group_teardown(void **state);
/* ktest_daemon_init with d's pin directory <mnt>/kt on that bpffs. */
int kt_daemonfx_bpffs_init(struct ktest_daemon *d);

/* cmocka: d's reply to `cmd` (printed) contains `needle`. */
static inline void kt_cmd_has(const struct ktest_daemon *d, const char *cmd, const char *needle)
{
	char *out = ktest_daemon_cmd(d, cmd);

	assert_non_null(out);
	print_message("%s", out);
	assert_non_null(strstr(out, needle));
	free(out);
}

/* cmocka: the result of a forked child *kid: len bytes at r read from the
 * pipe p (the child has the write end p[1], closed here), then the child
 * reaped (*kid = -1), which must have exited 0. */
static inline void kt_child_result(int p[2], pid_t *kid, void *r, size_t len)
{
	int status;

	close(p[1]);
	assert_int_equal(read(p[0], r, len), len);
	close(p[0]);
	assert_int_equal(waitpid(*kid, &status, 0), *kid);
	*kid = -1;
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* kt_daemonfx_end, then rp stopped if it was started (a test's own
 * redis-server). */
void kt_daemonfx_end_rp(struct ktest_daemon *d, const char *cg, struct rp_proc *rp);

/* printf-style text appended to the string in buf[len] (a config built
 * piece by piece); false if it did not fit. kt_cat (cmocka) fails the test
 * then rather than truncate. No cmocka in the .c: the bench and tools link
 * this file without it. */
bool kt_cat_fits(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define kt_cat(buf, len, ...) assert_true(kt_cat_fits(buf, len, __VA_ARGS__))

/* Limit `limit`'s throttle_events.<reason> in status json, -1 when absent. */
double kt_daemonfx_events(const char *json, const char *limit, const char *reason);

#endif
