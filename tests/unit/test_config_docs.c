// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The configuration reference (docs/configuration.md) and the parser name
 * the same keys: its three "| key | default | meaning |" tables (top
 * level, per limit, per tag limit) list exactly the keys of
 * user/base/config_keys.c, section by section ("match.ports" is key
 * "ports" of section "match."). A key added to the parser without a row,
 * or a row for a key the parser refuses, fails here. The source tree is
 * $KT_SRCDIR, else the parent of the build dir. */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/config_keys.h"
#include "ktest.h"

#define N_TABLES 3
#define MAX_ROWS 128

struct table {
	char key[MAX_ROWS][64]; /* a row's key, as written between backticks */
	int n;
};

static char *read_reference(void)
{
	const char *env = getenv("KT_SRCDIR");
	char path[PATH_MAX];

	if (env)
		snprintf(path, sizeof(path), "%s/docs/configuration.md", env);
	else
		snprintf(path, sizeof(path), "%s/../docs/configuration.md", ktest_build_dir());
	char *text = ktest_slurp(path);

	if (!text || !*text)
		fail_msg("cannot read %s (set KT_SRCDIR to the source tree)", path);
	return text;
}

/* The first N_TABLES key tables of the reference, in order. */
static void parse_tables(const char *text, struct table *t)
{
	static const char header[] = "| key | default | meaning |";
	const char *p = text;

	memset(t, 0, sizeof(*t) * N_TABLES);
	for (int i = 0; i < N_TABLES; i++) {
		p = strstr(p, header);
		if (!p)
			fail_msg("docs/configuration.md: key table %d of %d not found", i + 1, N_TABLES);
		p = strchr(p, '\n'); /* the header */
		p = p ? strchr(p + 1, '\n') : NULL; /* the |---| line */
		while (p && p[1] == '|') {
			const char *row = p + 1, *a = strchr(row, '`'), *b = a ? strchr(a + 1, '`') : NULL;
			const char *cell_end = strchr(row + 1, '|');

			if (!a || !b || !cell_end || a > cell_end)
				fail_msg("docs/configuration.md: a row of table %d without a `key`: %.60s", i + 1,
					 row);
			assert_true(t[i].n < MAX_ROWS && (size_t)(b - a - 1) < sizeof(t[i].key[0]));
			memcpy(t[i].key[t[i].n], a + 1, (size_t)(b - a - 1));
			t[i].n++;
			p = strchr(p + 1, '\n');
		}
	}
}

/* Whether `key` (a row, "[]" dropped) is `prefix` + a key of a section
 * whose keys are `section` and nothing deeper, or is deeper and names a
 * key of this section on the way ("rateLimit.strict.every" counts as
 * "strict" in section "rateLimit."). The name of this section's key it
 * stands for goes to `name`. */
static bool row_in_section(const char *key, const char *prefix, char *name, size_t len)
{
	size_t pl = strlen(prefix);
	const char *rest, *dot;

	if (strncmp(key, prefix, pl))
		return false;
	rest = key + pl;
	dot = strchr(rest, '.');
	snprintf(name, len, "%.*s", (int)(dot ? (size_t)(dot - rest) : strlen(rest)), rest);
	return true;
}

/* A row's key as the parser's sections name it: every "[]" (a list's
 * items, "classes[].name") dropped. */
static void drop_brackets(char *key)
{
	char *br;

	while ((br = strstr(key, "[]")))
		memmove(br, br + 2, strlen(br + 2) + 1);
}

static bool listed(const char *const *keys, const char *name)
{
	for (int k = 0; keys[k]; k++)
		if (!strcmp(keys[k], name))
			return true;
	return false;
}

static void test_reference_lists_the_parsers_keys(void **state)
{
	struct table t[N_TABLES];
	char *text = read_reference();
	int missing = 0, extra = 0;

	(void)state;
	parse_tables(text, t);
	for (int s = 0; s < kt_cfg_n_sections; s++) {
		const struct kt_cfg_section *sec = &kt_cfg_sections[s];
		const struct table *tb = &t[sec->table];

		/* every key of the section has a row (itself, or keys below it) */
		for (int k = 0; sec->keys[k]; k++) {
			bool found = false;

			for (int r = 0; r < tb->n && !found; r++) {
				char key[64], name[64];

				snprintf(key, sizeof(key), "%s", tb->key[r]);
				drop_brackets(key);
				found = row_in_section(key, sec->prefix, name, sizeof(name)) &&
					!strcmp(name, sec->keys[k]);
			}
			if (!found) {
				print_error("table %d has no row for `%s%s`\n", sec->table + 1, sec->prefix,
					    sec->keys[k]);
				missing++;
			}
		}
		/* every row under the section's prefix names one of its keys */
		for (int r = 0; r < tb->n; r++) {
			char key[64], name[64];

			snprintf(key, sizeof(key), "%s", tb->key[r]);
			drop_brackets(key);
			if (!row_in_section(key, sec->prefix, name, sizeof(name)))
				continue;
			/* a deeper section's rows belong to it too */
			if (!listed(sec->keys, name)) {
				print_error("table %d has a row `%s` the parser does not know\n",
					    sec->table + 1, tb->key[r]);
				extra++;
			}
		}
	}
	print_message("reference tables: %d, %d and %d rows\n", t[0].n, t[1].n, t[2].n);
	free(text);
	assert_int_equal(missing, 0);
	assert_int_equal(extra, 0);
}

/* The check itself can fail: a section with a key the tables lack. */
static void test_a_key_without_a_row_is_found(void **state)
{
	static const char text[] = "| key | default | meaning |\n|---|---|---|\n| `a` | x | y |\n"
				   "| `b.c` | x | y |\n\n| key | default | meaning |\n|---|---|---|\n"
				   "| `n` | x | y |\n\n| key | default | meaning |\n|---|---|---|\n"
				   "| `m` | x | y |\n";
	static const char *const top[] = { "a", "b", NULL }, *const b[] = { "c", "d", NULL };
	struct table t[N_TABLES];
	char name[64];
	(void)state;

	parse_tables(text, t);
	assert_int_equal(t[0].n, 2);
	assert_true(row_in_section(t[0].key[1], "", name, sizeof(name)) && !strcmp(name, "b"));
	assert_true(listed(top, name));
	assert_true(row_in_section(t[0].key[1], "b.", name, sizeof(name)) && !strcmp(name, "c"));
	assert_false(listed(b, "e"));
	/* "d" of section "b." has no row */
	bool found = false;
	for (int r = 0; r < t[0].n; r++)
		found |= row_in_section(t[0].key[r], "b.", name, sizeof(name)) && !strcmp(name, "d");
	assert_false(found);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reference_lists_the_parsers_keys),
		cmocka_unit_test(test_a_key_without_a_row_is_found),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
