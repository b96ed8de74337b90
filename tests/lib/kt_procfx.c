// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* A BPF test's cgroups, children and descriptors: see kt_procfx.h. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "kt_procfx.h"
#include "ktest.h"

const char *kt_procfx_cgroup(struct kt_procfx *p, const char *name)
{
	assert_true(p->ncg < KT_PROCFX_CGS);
	assert_int_equal(ktest_cgroup_create(name, p->cg[p->ncg], PATH_MAX), 0);
	return p->cg[p->ncg++];
}

int kt_procfx_fd(struct kt_procfx *p, int fd)
{
	assert_true(fd >= 0);
	assert_true(p->nfds < KT_PROCFX_FDS);
	p->fds[p->nfds++] = fd;
	return fd;
}

void kt_procfx_kid(struct kt_procfx *p, pid_t pid)
{
	assert_true(pid > 0);
	assert_true(p->nkids < KT_PROCFX_KIDS);
	p->kids[p->nkids++] = pid;
}

void kt_procfx_reaped(struct kt_procfx *p, pid_t pid)
{
	for (int i = 0; i < p->nkids; i++)
		if (p->kids[i] == pid)
			p->kids[i] = -1;
}

void kt_procfx_end(struct kt_procfx *p)
{
	for (int i = 0; i < p->nkids; i++)
		if (p->kids[i] > 0) {
			kill(p->kids[i], SIGKILL);
			waitpid(p->kids[i], NULL, 0);
		}
	for (int i = 0; i < p->nfds; i++)
		close(p->fds[i]);
	for (int i = p->ncg - 1; i >= 0; i--)
		ktest_cgroup_destroy(p->cg[i]);
	p->nkids = p->nfds = p->ncg = 0;
}
