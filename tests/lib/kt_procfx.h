/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What a BPF test made besides its pins: its cgroups, the child processes
 * it forked and the descriptors it keeps, undone by kt_procfx_end (its
 * teardown): children killed and reaped, descriptors closed, cgroups
 * destroyed last made first. The functions that take assert with cmocka. */
#ifndef KT_PROCFX_H
#define KT_PROCFX_H

#include <limits.h>
#include <sys/types.h>

#define KT_PROCFX_CGS 6
#define KT_PROCFX_KIDS 8
#define KT_PROCFX_FDS 64

struct kt_procfx {
	char cg[KT_PROCFX_CGS][PATH_MAX];
	int ncg;
	pid_t kids[KT_PROCFX_KIDS];
	int nkids;
	int fds[KT_PROCFX_FDS];
	int nfds;
};

/* cmocka: cgroup `name` made (ktest_cgroup_create); its path. */
const char *kt_procfx_cgroup(struct kt_procfx *p, const char *name);
/* cmocka: fd (>= 0) kept to be closed at the end; fd. */
int kt_procfx_fd(struct kt_procfx *p, int fd);
/* cmocka: child pid kept to be killed at the end. */
void kt_procfx_kid(struct kt_procfx *p, pid_t pid);
/* Child pid reaped already (waited for by the test): not killed at the end. */
void kt_procfx_reaped(struct kt_procfx *p, pid_t pid);
/* The teardown's: every kept child killed and reaped, every kept fd closed,
 * every cgroup destroyed (last first). */
void kt_procfx_end(struct kt_procfx *p);

#endif
