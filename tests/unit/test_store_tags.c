/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* kt_store_tag_exchange (tag limits, docs/tags.md) against a real redis-server
 * on a free loopback port: what one node reports the others read once, in
 * order, never their own; a first call starts after the newest entry; more
 * entries than one call reads are paged; the stream is trimmed on Redis's
 * clock and expires; bad arguments and a bad last id change nothing. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "kt_storefx.h"
#include "redis_proc.h"
#include "store/store.h"

#define PREFIX "kttest"

static char err[KT_ERR_LEN];

#define ASSERT_OK(expr) RP_ASSERT_OK(expr, err)

static struct kt_store *open_store(void)
{
	struct kt_store_cfg c;
	struct kt_store *s;

	kt_storefx_cfg_single(&c, kfx_master.port, PREFIX);
	ASSERT_OK(kt_store_open(&s, &c, err, sizeof(err)));
	return kt_storefx_track(s);
}

struct inbox {
	char text[8192];
	size_t len;
	int n;
};

static void got(void *ctx, const char *chunk, size_t len)
{
	struct inbox *in = ctx;

	assert_true(in->len + len + 1 < sizeof(in->text));
	memcpy(in->text + in->len, chunk, len);
	in->len += len;
	in->text[in->len++] = '|';
	in->text[in->len] = 0;
	in->n++;
}

static void count(void *ctx, const char *chunk, size_t len)
{
	assert_int_equal(len, 6);
	assert_memory_equal(chunk, "q 1 t\n", 6);
	(*(int *)ctx)++;
}

/* One exchange: node reports `chunk` (NULL: nothing), the inbox gets what
 * the others wrote since *last. */
static int xchg(struct kt_store *s, const char *limit, const char *node, const char *chunk,
		char last[KT_STORE_TAG_ID_MAX], struct inbox *in)
{
	size_t len = chunk ? strlen(chunk) : 0;
	int more = -1;

	memset(in, 0, sizeof(*in));
	ASSERT_OK(kt_store_tag_exchange(s, limit, node, 60000, chunk ? &chunk : NULL, &len,
					chunk ? 1 : 0, last, got, in, &more, err, sizeof(err)));
	assert_true(more == 0 || more == 1);
	return more;
}

static int teardown(void **state)
{
	(void)state;
	kt_storefx_close_all();
	return 0;
}

static void test_reports_reach_the_others_once(void **state)
{
	struct kt_store *a = open_store(), *b = open_store(), *c = open_store();
	char la[KT_STORE_TAG_ID_MAX] = "", lb[KT_STORE_TAG_ID_MAX] = "", lc[KT_STORE_TAG_ID_MAX] = "";
	struct inbox in;

	(void)state;
	/* an old report, before anyone joined: nobody is charged for it */
	xchg(c, "api", "node-c", "q 99 old\n", lc, &in);
	/* first calls: read nothing, start after the newest entry */
	xchg(a, "api", "node-a", "q 10 C\nq 2 204.112.101.1\n", la, &in);
	assert_int_equal(in.n, 0);
	assert_string_not_equal(la, "");
	xchg(b, "api", "node-b", NULL, lb, &in);
	assert_int_equal(in.n, 0);
	/* b reports; a reads b's report and c's old one? no: c's came before a joined */
	xchg(b, "api", "node-b", "q 8 C\n", lb, &in);
	assert_int_equal(in.n, 0); /* a's first report came before b's first call */
	xchg(a, "api", "node-a", NULL, la, &in);
	assert_int_equal(in.n, 1);
	assert_string_equal(in.text, "q 8 C\n|");
	/* read once */
	xchg(a, "api", "node-a", NULL, la, &in);
	assert_int_equal(in.n, 0);
	/* c reads both in stream order, not its own */
	xchg(c, "api", "node-c", "q 1 x\n", lc, &in);
	assert_int_equal(in.n, 2);
	assert_string_equal(in.text, "q 10 C\nq 2 204.112.101.1\n|q 8 C\n|");
	xchg(b, "api", "node-b", NULL, lb, &in);
	assert_string_equal(in.text, "q 1 x\n|");
	/* limits are separate streams */
	xchg(a, "other", "node-a", "q 5 C\n", la, &in);
	xchg(b, "api", "node-b", NULL, lb, &in);
	assert_int_equal(in.n, 0);
	/* the stream is there for operators: XLEN, fields n and h */
	assert_int_equal(rp_command_int(&kfx_master, -1, "XLEN " PREFIX ":tags:{api}"), 4);
	assert_true(rp_command_int(&kfx_master, -3, "PTTL " PREFIX ":tags:{api}") > 60000);
}

static void test_paging(void **state)
{
	struct kt_store *a = open_store(), *b = open_store();
	char la[KT_STORE_TAG_ID_MAX] = "", lb[KT_STORE_TAG_ID_MAX] = "";
	const int n = KT_STORE_TAG_READ_MAX + 10;
	const char **chunks = calloc((size_t)n, sizeof(*chunks));
	size_t *lens = calloc((size_t)n, sizeof(*lens));
	struct inbox in;
	int more, total = 0, calls = 0;

	(void)state;
	assert_non_null(chunks);
	assert_non_null(lens);
	xchg(b, "page", "node-b", NULL, lb, &in);
	for (int i = 0; i < n; i++) {
		chunks[i] = "q 1 t\n";
		lens[i] = 6;
	}
	/* more than one call can carry: KT_STORE_TAG_MAX_CHUNKS is the bound */
	assert_int_equal(kt_store_tag_exchange(a, "page", "node-a", 60000, chunks, lens, n, la, got, &in,
					       &more, err, sizeof(err)),
			 -EINVAL);
	ASSERT_OK(kt_store_tag_exchange(a, "page", "node-a", 60000, chunks, lens, KT_STORE_TAG_MAX_CHUNKS,
					la, got, &in, &more, err, sizeof(err)));
	ASSERT_OK(kt_store_tag_exchange(a, "page", "node-a", 60000, chunks, lens, 10, la, got, &in,
					&more, err, sizeof(err)));
	do {
		int m = 0, got_n = 0;

		ASSERT_OK(kt_store_tag_exchange(b, "page", "node-b", 60000, NULL, NULL, 0, lb, count,
						&got_n, &m, err, sizeof(err)));
		assert_true(got_n <= KT_STORE_TAG_READ_MAX);
		total += got_n;
		more = m;
	} while (more && ++calls < 10);
	assert_int_equal(total, KT_STORE_TAG_MAX_CHUNKS + 10);
	assert_int_equal(calls, 1); /* a full page, then the rest */
	free(chunks);
	free(lens);
}

static void test_bad_input_changes_nothing(void **state)
{
	struct kt_store *a = open_store();
	char last[KT_STORE_TAG_ID_MAX] = "";
	const char *chunk = "q 1 t\n";
	size_t len = 6, zero = 0;
	struct inbox in;
	int more;

	(void)state;
	xchg(a, "bad", "node-a", NULL, last, &in);
	char keep[KT_STORE_TAG_ID_MAX];
	memcpy(keep, last, sizeof(keep));
	assert_int_equal(kt_store_tag_exchange(a, "bad lim", "node-a", 60000, &chunk, &len, 1, last, got,
					       &in, &more, err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(kt_store_tag_exchange(a, "bad", "", 60000, &chunk, &len, 1, last, got, &in,
					       &more, err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(kt_store_tag_exchange(a, "bad", "node-a", 10, &chunk, &len, 1, last, got, &in,
					       &more, err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(kt_store_tag_exchange(a, "bad", "node-a", 60000, &chunk, &zero, 1, last, got,
					       &in, &more, err, sizeof(err)),
			 -EINVAL);
	strcpy(last, "12x-3");
	assert_int_equal(kt_store_tag_exchange(a, "bad", "node-a", 60000, &chunk, &len, 1, last, got,
					       &in, &more, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "last id"));
	assert_int_equal(rp_command_int(&kfx_master, -1, "EXISTS " PREFIX ":tags:{bad}"), 0);
	memcpy(last, keep, sizeof(keep));
	xchg(a, "bad", "node-a", NULL, last, &in);
	assert_string_equal(last, keep);
}

/* Entries older than the retention are trimmed on Redis's clock (MINID ~
 * trims whole macro nodes, so only a large stream shows it exactly; here:
 * the key expires at 2 x retention after the last report). */
static void test_retention(void **state)
{
	struct kt_store *a = open_store();
	char last[KT_STORE_TAG_ID_MAX] = "";
	const char *chunk = "q 1 t\n";
	size_t len = 6;
	struct inbox in;
	int more;

	(void)state;
	ASSERT_OK(kt_store_tag_exchange(a, "short", "node-a", 1000, &chunk, &len, 1, last, got, &in,
					&more, err, sizeof(err)));
	long long ttl = rp_command_int(&kfx_master, -3, "PTTL " PREFIX ":tags:{short}");
	assert_true(ttl > 1000 && ttl <= 2000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_reports_reach_the_others_once, teardown),
		cmocka_unit_test_teardown(test_paging, teardown),
		cmocka_unit_test_teardown(test_bad_input_changes_nothing, teardown),
		cmocka_unit_test_teardown(test_retention, teardown),
	};
	return cmocka_run_group_tests(tests, kt_storefx_group_setup, kt_storefx_group_teardown);
}
