/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The fixture of the e2e tests that drive cooperative limits through
 * libkthrottle and the Python module against kthrottled nodes on a
 * private bpffs and one redis-server (test_strict_lib, test_coop_callers):
 * their setup and teardown, CLOCK_BOOTTIME (the clock the workers report
 * in), a venv with the module, and reading the workers' output. Functions
 * that assert use cmocka (this header includes it). */
#ifndef KT_LIBFX_H
#define KT_LIBFX_H

#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <cmocka.h>

#include "redis_proc.h"

#define KT_LIBFX_PYTHON "/usr/bin/python3"
#define KT_LIBFX_WHEELS "/usr/share/python-wheels" /* Debian's pip, setuptools, wheel */

/* CLOCK_BOOTTIME in ns, and a sleep until such a time. */
uint64_t kt_libfx_boot_ns(void);
void kt_libfx_sleep_until(uint64_t boot_ns);

/* A group setup: *skip_why set when root or redis-server is missing or no
 * private bpffs could be mounted (tag names it; its path into mnt), else
 * the master started into rp. 0, or -1 when it did not start. */
int kt_libfx_setup(const char *tag, char *mnt, size_t len, struct rp_proc *rp, const char **skip_why);
/* The group teardown: the master stopped, its dir and the bpffs removed. */
void kt_libfx_teardown(char *mnt, struct rp_proc *rp);

/* cmocka: a venv under dir (a temp dir of the test's) with the Python
 * module installed from a copy of the tree's python/ (pip builds in the
 * source tree), offline from Debian's wheels; its python into py and
 * KTHROTTLE_LIB set to the build's libkthrottle.so.0. NULL, or why it
 * cannot be made here (the test skips); a failed install fails the test. */
const char *kt_libfx_pyenv(const char *dir, char *py, size_t len);

/* cmocka: a child running py -I script args[0..] (NULL-terminated) with
 * KTHROTTLE_PIN_DIR pin_dir, stdout and stderr into a pipe; its pid, *fd
 * the pipe's read end (kt_libfx_read_all). -I: the installed module, not
 * one from the cwd or PYTHONPATH. */
pid_t kt_libfx_python(const char *py, const char *script, const char *const *args, const char *pin_dir,
		      int *fd);

/* Reads the n fds into out[i] (cap bytes each, NUL-terminated, *len[i]
 * so far) until each is at EOF (then closed, -1) or CLOCK_BOOTTIME passes
 * deadline. How many are still open. */
int kt_libfx_read_all(int *fd, int n, char **out, size_t *len, size_t cap, uint64_t deadline);

/* Prints the times t[0..n) per bin of bin_s seconds, from start, for bins
 * bins: "tag: per N ms from start: a b c ...". */
void kt_libfx_print_bins(const char *tag, const uint64_t *t, int n, uint64_t start, double bin_s, int bins);

#endif
