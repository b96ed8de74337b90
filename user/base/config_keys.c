// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
#include <stddef.h>
#include "base/config_keys.h"

const char *const kt_cfg_keys_root[] = { "node",	 "pinDir",  "socket", "tickInterval",
					 "epoch",	 "store",   "limits", "metrics",
					 "kubernetes", "tags",    "attachRoot", NULL };
const char *const kt_cfg_keys_limit[] = { "name",  "cgroups", "match",	     "unit",
					  "scope", "burst",   "share",	     "rateLimit",
					  "allowRawSockets", "errno", "pods", "enforce", "parent",
					  "groupBy", "maxGroups", "maxDelay", "weightBy", "weights",
					  "defaultWeight", "classBy", "classes", "defaultClass", "weight", "floor", NULL };
const char *const kt_cfg_keys_match[] = { "cidrs", "ports", "protocol", NULL };
const char *const kt_cfg_keys_rate_limit[] = { "max", "min", "rampUpDuration", "modes",
					       "resumedRampUp", "ttl", "store", "strict", NULL };
const char *const kt_cfg_keys_strict[] = { "every", "maxReserved", "expireAfter", NULL };
const char *const kt_cfg_keys_class[] = { "name", "floor", "ceiling", NULL };
const char *const kt_cfg_keys_tag[] = { "name",	"rate",	 "burst",     "idleExpiry",
					"maxTags", "reportInterval", "allow", "overrides",
					"xdp",	"query", NULL };
const char *const kt_cfg_keys_xdp[] = { "interfaces", "prefixLen", NULL };
const char *const kt_cfg_keys_query[] = { "socket", "listen", NULL };

const struct kt_cfg_section kt_cfg_sections[] = {
	{ 0, "", kt_cfg_keys_root },
	{ 1, "", kt_cfg_keys_limit },
	{ 1, "match.", kt_cfg_keys_match },
	{ 1, "rateLimit.", kt_cfg_keys_rate_limit },
	{ 1, "rateLimit.strict.", kt_cfg_keys_strict },
	{ 1, "classes.", kt_cfg_keys_class }, /* rows classes[].KEY */
	{ 2, "", kt_cfg_keys_tag },
	{ 2, "xdp.", kt_cfg_keys_xdp },
	{ 2, "query.", kt_cfg_keys_query },
};
const int kt_cfg_n_sections = (int)(sizeof(kt_cfg_sections) / sizeof(kt_cfg_sections[0]));
