// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The daemon fixture of the e2e tests (kt_daemonfx.h). */
#include <string.h>

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
