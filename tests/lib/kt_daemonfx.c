// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The daemon fixture of the e2e tests (kt_daemonfx.h). */
#include <limits.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "kt_daemonfx.h"

bool kt_daemonfx_begin(void *fx, size_t len, struct ktest_daemon *d)
{
	memset(fx, 0, len);
	d->pid = -1;
	return !ktest_root_unavailable();
}

int kt_daemonfx_setup(void *fx, size_t len, struct ktest_daemon *d, const char *name, char *cg,
		      size_t cg_len)
{
	if (!kt_daemonfx_begin(fx, len, d))
		return 0;
	return ktest_cgroup_create(name, cg, cg_len) ? -1 : 0;
}

void kt_daemonfx_end(struct ktest_daemon *d, const char *cg)
{
	if (d->dir[0])
		ktest_daemon_cleanup(d);
	if (cg && cg[0])
		ktest_cgroup_destroy(cg);
}

bool kt_daemonfx_status_num(const struct ktest_daemon *d, const char *limit, const char *field,
			    double *v)
{
	char *out = ktest_daemon_cmd(d, "status json");
	bool ok = out && (limit ? ktest_json_limit_num(out, limit, field, v)
				: ktest_json_num(out, field, v));

	free(out);
	return ok;
}

struct kt_daemonfx_spec kt_dfx;

int kt_dfx_setup(void **state)
{
	bool root = kt_daemonfx_begin(kt_dfx.fx, kt_dfx.len, kt_dfx.d);

	(void)state;
	if (kt_dfx.kid)
		*kt_dfx.kid = -1;
	if (!root || !kt_dfx.cgroup)
		return 0;
	if (ktest_cgroup_create(kt_dfx.cgroup, kt_dfx.cg, PATH_MAX) ||
	    (kt_dfx.tmp && ktest_tmpdir(kt_dfx.tmp, kt_dfx.tmp_len)))
		return -1;
	if (!kt_dfx.metrics_port)
		return 0;
	*kt_dfx.metrics_port = ktest_free_port(SOCK_STREAM);
	return *kt_dfx.metrics_port > 0 ? 0 : -1;
}

int kt_daemonfx_group_cg(const char *name, char *cg, size_t cg_len)
{
	if (ktest_root_unavailable())
		return 0;
	return ktest_cgroup_create(name, cg, cg_len) ? -1 : 0;
}

void kt_daemonfx_group_cg_end(const char *cg)
{
	if (cg[0])
		ktest_cgroup_destroy(cg);
}

static struct {
	const char *name;
	char *cg;
	size_t cg_len;
} group;

void kt_daemonfx_group(const char *name, char *cg, size_t cg_len)
{
	group.name = name;
	group.cg = cg;
	group.cg_len = cg_len;
}

int kt_daemonfx_group_setup(void **state)
{
	(void)state;
	return kt_daemonfx_group_cg(group.name, group.cg, group.cg_len);
}

int kt_daemonfx_group_teardown(void **state)
{
	(void)state;
	kt_daemonfx_group_cg_end(group.cg);
	return 0;
}

void kt_daemonfx_dms_begin(struct ktest_daemon *dm, int n)
{
	memset(dm, 0, sizeof(*dm) * (size_t)n);
	for (int i = 0; i < n; i++)
		dm[i].pid = -1;
}

void kt_daemonfx_dms_end(struct ktest_daemon *dm, int n)
{
	for (int i = 0; i < n; i++)
		if (dm[i].dir[0])
			ktest_daemon_cleanup(&dm[i]);
}

const char *kt_daemonfx_ok_body(char *buf, size_t len, const char *cg)
{
	snprintf(buf, len,
		 "limits:\n"
		 "  - name: ok\n"
		 "    cgroups: [%s]\n"
		 "    match: {cidrs: [127.0.0.1/32], ports: 9, protocol: udp}\n"
		 "    unit: datagram\n"
		 "    burst: 20\n"
		 "    rateLimit: {max: 200}\n",
		 cg);
	return buf;
}

int kt_daemonfx_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

pid_t kt_daemonfx_fork_bounded(void)
{
	pid_t pid = fork();

	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		alarm(300); /* bounded even if the test binary is killed */
	}
	return pid;
}

struct kt_daemonfx_bpffs kt_bpffs;

int kt_daemonfx_bpffs_group_setup(void **state)
{
	(void)state;
	kt_bpffs.skip_why =
		ktest_private_bpffs(kt_bpffs.prefix, kt_bpffs.mnt, sizeof(kt_bpffs.mnt));
	return 0;
}

int kt_daemonfx_bpffs_group_teardown(void **state)
{
	(void)state;
	ktest_private_bpffs_remove(kt_bpffs.mnt);
	return 0;
}

int kt_daemonfx_bpffs_init(struct ktest_daemon *d)
{
	if (ktest_daemon_init(d))
		return -1;
	snprintf(d->pin_dir, sizeof(d->pin_dir), "%s/kt", kt_bpffs.mnt);
	return 0;
}

void kt_daemonfx_end_rp(struct ktest_daemon *d, const char *cg, struct rp_proc *rp)
{
	kt_daemonfx_end(d, cg);
	if (rp->pid > 0)
		rp_stop(rp);
}

bool kt_cat_fits(char *buf, size_t len, const char *fmt, ...)
{
	size_t used = strlen(buf);
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf + used, len - used, fmt, ap);
	va_end(ap);
	return n >= 0 && (size_t)n < len - used;
}

double kt_daemonfx_events(const char *json, const char *limit, const char *reason)
{
	const char *ev = ktest_json_limit_field(json, limit, "throttle_events");
	char key[32];

	snprintf(key, sizeof(key), "\"%s\":", reason);
	ev = ev ? strstr(ev, key) : NULL;
	return ev ? atof(ev + strlen(key)) : -1;
}
