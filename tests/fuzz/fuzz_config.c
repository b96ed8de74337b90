// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* libFuzzer target: the config parser on arbitrary bytes. Besides what ASan
 * and UBSan catch, it checks the parser's contract: an error is one
 * non-empty line and leaves the config zeroed; success yields at least one
 * limit, each with at least one cgroup. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int all_zero(const void *p, size_t n)
{
	const unsigned char *b = p;
	size_t i;

	for (i = 0; i < n; i++)
		if (b[i])
			return 0;
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kt_config cfg;
	char err[KT_ERR_LEN];
	int i;

	if (kt_config_parse("fuzz.yaml", (const char *)data, size, &cfg, err, sizeof(err))) {
		if (!err[0] || strchr(err, '\n') || strncmp(err, "fuzz.yaml:", 10) ||
		    !all_zero(&cfg, sizeof(cfg)))
			__builtin_trap();
		return 0;
	}
	/* a config has a limit or a tag limit; request limits and pod
	 * selectors may have no cgroup paths */
	if (cfg.n_limits < 0 || cfg.n_limits > KT_MAX_LIMITS || cfg.n_tags < 0 ||
	    cfg.n_tags > KT_MAX_TAG_LIMITS || cfg.n_limits + cfg.n_tags < 1 || !cfg.file ||
	    !cfg.node_name)
		__builtin_trap();
	for (i = 0; i < cfg.n_limits; i++)
		if (!cfg.limits[i].name[0])
			__builtin_trap();
	for (i = 0; i < cfg.n_tags; i++)
		if (!cfg.tags[i].name[0] || !(cfg.tags[i].rate > 0) || cfg.tags[i].burst < 1 ||
		    (!cfg.tags[i].xdp && !cfg.tags[i].query))
			__builtin_trap();
	kt_config_free(&cfg);
	return 0;
}
