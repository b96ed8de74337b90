/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The configuration's keys, section by section: the one list the parser
 * checks each mapping against (an unknown key is refused, naming these),
 * and the one the configuration reference in docs/configuration.md must
 * match (tests/unit/test_config_docs.c fails when they differ). Each list
 * is NULL-terminated. */
#ifndef KT_CONFIG_KEYS_H
#define KT_CONFIG_KEYS_H

extern const char *const kt_cfg_keys_root[];
extern const char *const kt_cfg_keys_limit[];
extern const char *const kt_cfg_keys_match[];
extern const char *const kt_cfg_keys_rate_limit[];
extern const char *const kt_cfg_keys_strict[];
extern const char *const kt_cfg_keys_class[];
extern const char *const kt_cfg_keys_tag[];
extern const char *const kt_cfg_keys_xdp[];
extern const char *const kt_cfg_keys_query[];

/* A section as the reference names its keys: `prefix` is what stands
 * before a key there ("" for the top level, "match." in the limits'
 * table); `table` is which of the reference's tables lists it (0 top level,
 * 1 limits, 2 tag limits). */
struct kt_cfg_section {
	int table;
	const char *prefix;
	const char *const *keys;
};
extern const struct kt_cfg_section kt_cfg_sections[];
extern const int kt_cfg_n_sections;

#endif
