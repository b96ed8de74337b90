/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The daemon fixture of the e2e tests: the first and last steps of a
 * setup/teardown around a struct ktest_daemon (and the test's cgroup), and
 * reading numbers out of its status. The static inline helpers assert with
 * cmocka (this header includes it); the rest is in kt_daemonfx.c. */
#ifndef KT_DAEMONFX_H
#define KT_DAEMONFX_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include "ktest.h"

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

#endif
