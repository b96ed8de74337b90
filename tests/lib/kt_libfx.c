// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The fixture of the library e2e tests (kt_libfx.h). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kt_clusterfx.h"
#include "kt_libfx.h"
#include "ktest.h"
#include "kthrottle_client.h"

uint64_t kt_libfx_boot_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void kt_libfx_sleep_until(uint64_t t)
{
	struct timespec ts = { .tv_sec = (time_t)(t / 1000000000ull), .tv_nsec = (long)(t % 1000000000ull) };

	while (clock_nanosleep(CLOCK_BOOTTIME, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

int kt_libfx_setup(const char *tag, char *mnt, size_t len, struct rp_proc *rp, const char **skip_why)
{
	*skip_why = ktest_root_unavailable();
	if (!*skip_why && !ktest_find_prog("redis-server"))
		*skip_why = "no redis-server";
	if (!*skip_why)
		*skip_why = ktest_private_bpffs(tag, mnt, len);
	if (*skip_why)
		return 0;
	return rp_start_master(rp, NULL) == 0 ? 0 : -1;
}

void kt_libfx_teardown(char *mnt, struct rp_proc *rp)
{
	if (rp->pid)
		rp_stop(rp);
	rp_remove_tree(rp->dir);
	ktest_private_bpffs_remove(mnt);
}

/* Runs argv, its output captured; the exit status (printed with the
 * output when it is not 0). */
static int run(char *const argv[])
{
	char *o = NULL;
	int rc = ktest_run_capture(argv, &o);

	if (rc)
		print_message("$ %s ... -> %d\n%s", argv[0], rc, o ? o : "");
	free(o);
	return rc;
}

const char *kt_libfx_pyenv(const char *dir, char *py, size_t len)
{
	char venv[PATH_MAX], pkg[PATH_MAX], pip[PATH_MAX], path[PATH_MAX], lib[PATH_MAX];

	if (access(KT_LIBFX_PYTHON, X_OK) || access(KT_LIBFX_WHEELS, R_OK))
		return "no " KT_LIBFX_PYTHON " or " KT_LIBFX_WHEELS;
	snprintf(lib, sizeof(lib), "%s/libkthrottle.so.0", ktest_build_dir());
	assert_int_equal(access(lib, R_OK), 0);
	snprintf(path, sizeof(path), "%s/../python", ktest_build_dir());
	snprintf(pkg, sizeof(pkg), "%s/python", dir);
	assert_int_equal(run((char *[]){ "/bin/cp", "-r", path, pkg, NULL }), 0);
	snprintf(venv, sizeof(venv), "%s/venv", dir);
	snprintf(py, len, "%s/bin/python", venv);
	snprintf(pip, sizeof(pip), "%s/bin/pip", venv);
	if (run((char *[]){ KT_LIBFX_PYTHON, "-m", "venv", venv, NULL }))
		return KT_LIBFX_PYTHON " -m venv failed";
	assert_int_equal(
		run((char *[]){ pip, "install", "--no-index", "--find-links", KT_LIBFX_WHEELS, pkg, NULL }), 0);
	setenv("KTHROTTLE_LIB", lib, 1);
	return NULL;
}

pid_t kt_libfx_python(const char *py, const char *script, const char *const *args, const char *pin_dir,
		      int *fd)
{
	const char *argv[16] = { py, "-I", script };
	int n = 3;
	pid_t pid;

	for (int i = 0; args[i] && n < (int)(sizeof(argv) / sizeof(argv[0])) - 1; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	pid = kt_clusterfx_fork(fd);
	if (pid == 0) {
		dup2(*fd, 1);
		dup2(*fd, 2);
		setenv(KTHROTTLE_PIN_DIR_ENV, pin_dir, 1);
		execv(py, (char *const *)argv);
		_exit(127);
	}
	return pid;
}

int kt_libfx_read_all(int *fd, int n, char **out, size_t *len, size_t cap, uint64_t deadline)
{
	int open_fds = 0;

	for (int i = 0; i < n; i++)
		open_fds += fd[i] >= 0;
	while (open_fds && kt_libfx_boot_ns() < deadline) {
		struct pollfd pf[n];

		for (int i = 0; i < n; i++)
			pf[i] = (struct pollfd){ .fd = fd[i], .events = POLLIN };
		if (poll(pf, (nfds_t)n, 100) <= 0)
			continue;
		for (int i = 0; i < n; i++) {
			ssize_t k;

			if (pf[i].fd < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			k = read(fd[i], out[i] + len[i], cap - 1 - len[i]);
			if (k > 0) {
				len[i] += (size_t)k;
				out[i][len[i]] = 0;
				continue;
			}
			close(fd[i]);
			fd[i] = -1;
			open_fds--;
		}
	}
	for (int i = 0; i < n; i++)
		out[i][len[i]] = 0;
	return open_fds;
}

void kt_libfx_print_bins(const char *tag, const uint64_t *t, int n, uint64_t start, double bin_s, int bins)
{
	char line[1024];
	int at = 0;

	for (int k = 0; k < bins && at < (int)sizeof(line) - 12; k++) {
		uint64_t a = start + (uint64_t)(k * bin_s * 1e9), b = start + (uint64_t)((k + 1) * bin_s * 1e9);
		int c = 0;

		for (int i = 0; i < n; i++)
			c += t[i] >= a && t[i] < b;
		at += snprintf(line + at, sizeof(line) - (size_t)at, " %d", c);
	}
	print_message("%s: per %.0f ms from start:%s\n", tag, bin_s * 1000, line);
}
