// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* kt_plan_apply is all or nothing. Against the real maps and links in a
 * private pin dir: a plan whose commit fails at any one of its kernel writes
 * (kt_apply_fail_step), or whose link sync genuinely fails (a member cgroup
 * removed between resolve and apply), leaves every map, every bucket, every
 * counter and the set of pinned links byte for byte as they were; a plan
 * rejected by validation, applied 600 times, leaks no bucket slot; and
 * kt_bpf_sync_links on its own detaches nothing (and puts upgraded links
 * back) when a later cgroup's attach fails. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <bpf/bpf.h>
#include <cmocka.h>

#include "kernel/apply.h"
#include "base/cgroup.h"
#include "members/resolve.h"
#include "ktest.h"

#define N_CG 6

static struct fixture {
	char cg[N_CG][PATH_MAX];
	char nested[PATH_MAX]; /* inside CG0, when a test made it */
	char cg_mount[PATH_MAX];
	char tmp[PATH_MAX];
	char pin[PATH_MAX];
	struct kt_bpf b;
	bool open;
	struct kt_config cfg[2];
	struct kt_plan plan[2];
	int n_cfg;
} fx;

/* ---- configs ---- */

/* Writes the limits (with CG0..CG5 standing for the test cgroups) to a file
 * and resolves it into the next config/plan pair of the fixture. */
static struct kt_plan *load_plan(const char *name, const char *limits)
{
	char body[8192], path[PATH_MAX + 64], err[KT_ERR_LEN];
	size_t n = 0;
	int i = fx.n_cfg++;

	assert_true(i < 2);
	n += snprintf(body + n, sizeof(body) - n, "node: apply-test\nlimits:\n");
	for (const char *p = limits; *p; p++) {
		if (p[0] == 'C' && p[1] == 'G' && p[2] >= '0' && p[2] < '0' + N_CG) {
			n += snprintf(body + n, sizeof(body) - n, "%s", fx.cg[p[2] - '0']);
			p += 2;
		} else {
			body[n++] = *p;
		}
		assert_true(n < sizeof(body) - PATH_MAX);
	}
	body[n] = 0;
	snprintf(path, sizeof(path), "%s/%s.yaml", fx.tmp, name);
	assert_int_equal(ktest_write_file(path, body), 0);
	if (kt_config_load(path, &fx.cfg[i], err, sizeof(err)) ||
	    kt_plan_resolve(&fx.cfg[i], fx.cg_mount, NULL, &fx.plan[i], err, sizeof(err)))
		fail_msg("%s: %s", name, err);
	return &fx.plan[i];
}

static void free_plans(void)
{
	for (int i = 0; i < fx.n_cfg; i++) {
		kt_plan_free(&fx.plan[i]);
		kt_config_free(&fx.cfg[i]);
	}
	fx.n_cfg = 0;
}

/* A: three limits on CG0..CG2, every unit family, pod and node scope. */
static const char plan_a[] =
	"  - name: a-udp\n"
	"    cgroups: [CG0, CG1]\n"
	"    match: {cidrs: [10.1.0.0/16], ports: 5001, protocol: udp}\n"
	"    unit: datagram\n"
	"    burst: 10\n"
	"    rateLimit: {max: 100}\n"
	"  - name: a-conn\n"
	"    cgroups: [CG1, CG2]\n"
	"    scope: node\n"
	"    match: {cidrs: [10.2.0.0/16, 127.0.0.1/32], ports: 5002-5010, protocol: tcp}\n"
	"    unit: connection\n"
	"    rateLimit: {max: 50}\n"
	"  - name: a-pkt\n"
	"    cgroups: [CG0]\n"
	"    match: {ports: 5003}\n"
	"    unit: packet\n"
	"    rateLimit: {max: 1000}\n"
	"  - name: a-req\n"
	"    unit: request\n"
	"    burst: 10\n"
	"    rateLimit: {max: 20}\n";

/* B: a-udp kept (CG1's bucket kept, new max 5, new prefixes and port), the
 * others gone; CG0 leaves, CG1 loses its connect hook, CG2 trades connect
 * for egress, CG3 and CG4 are new. `extra` is appended to b-bytes'
 * cgroups. */
static const char *plan_b(char *buf, size_t len, const char *extra)
{
	snprintf(buf, len,
		 "  - name: a-udp\n"
		 "    cgroups: [CG1, CG3]\n"
		 "    match: {cidrs: [10.1.0.0/16, 10.9.0.0/24], ports: 6001, protocol: udp}\n"
		 "    unit: datagram\n"
		 "    burst: 5\n"
		 "    rateLimit: {max: 5}\n"
		 "  - name: b-bytes\n"
		 "    cgroups: [CG2, CG4%s]\n"
		 "    scope: node\n"
		 "    match: {cidrs: [192.168.0.0/16], ports: 6002}\n"
		 "    unit: byte\n"
		 "    rateLimit: {max: 100000}\n"
		 "  - name: a-req\n"
		 "    unit: request\n"
		 "    burst: 5\n"
		 "    rateLimit: {max: 30}\n"
		 "  - name: b-req\n"
		 "    unit: request\n"
		 "    rateLimit: {max: 40}\n",
		 extra);
	return buf;
}

/* CG0 in eight limits (with CG1..CG5, 16 buckets planned), and `nested`, a
 * cgroup inside CG0, in a ninth: with the eight it inherits from CG0 that
 * is more than a kt_members list holds, so the plan refuses it. */
static const char *plan_bad(char *buf, size_t len, const char *nested)
{
	size_t n = 0;

	for (int i = 0; i <= KT_LIMITS_PER_CGROUP; i++) {
		char cgs[PATH_MAX + 16];

		if (i < KT_LIMITS_PER_CGROUP)
			snprintf(cgs, sizeof(cgs), "CG0, CG%d", 1 + i % (N_CG - 1));
		else
			snprintf(cgs, sizeof(cgs), "%s", nested);
		n += snprintf(buf + n, len - n,
			      "  - name: bad-%d\n"
			      "    cgroups: [%s]\n"
			      "    match: {cidrs: [10.3.0.0/16], ports: %d}\n"
			      "    unit: packet\n"
			      "    rateLimit: {max: %d}\n",
			      i, cgs, 7000 + i, 10 + i);
	}
	assert_true(n < len);
	return buf;
}

/* What each bucket of the plan gets: B also a lease, so it is rewritten. */
static struct kt_bucket_policy *policy(const struct kt_plan *p, bool lease)
{
	struct kt_bucket_policy *pol = calloc(p->n_limits, sizeof(*pol));
	uint64_t now = kt_clock_ns();

	assert_non_null(pol);
	for (int i = 0; i < p->n_limits; i++) {
		pol[i].rate = p->limits[i].cfg->rl.max;
		pol[i].burst = p->limits[i].cfg->burst;
		if (lease) {
			pol[i].valid_until = now + 60000000000ull;
			pol[i].fallback_rate = 1;
			pol[i].fallback_until = now + 120000000000ull;
		}
	}
	return pol;
}

static int apply(struct kt_plan *p, bool lease, char *err, size_t len)
{
	struct kt_bucket_policy *pol = policy(p, lease);
	int ret;

	err[0] = 0;
	ret = kt_plan_apply(&fx.b, p, pol, err, len);
	free(pol);
	return ret;
}

/* ---- dumps ---- */

struct dump {
	unsigned char *data;
	size_t len, cap;
	size_t section[8]; /* start offsets, for the report of a difference */
	int n_sections;
};

static const char *const section_names[] = { "kt_limits", "kt_members", "kt_dests",
					     "kt_ports",  "kt_buckets", "kt_counters",
					     "links",     "kt_coop" };

static void put(struct dump *d, const void *p, size_t n)
{
	if (d->len + n > d->cap) {
		d->cap = (d->len + n) * 2;
		d->data = realloc(d->data, d->cap);
		assert_non_null(d->data);
	}
	memcpy(d->data + d->len, p, n);
	d->len += n;
}

static size_t sort_key_len;
static int cmp_key(const void *a, const void *b)
{
	return memcmp(a, b, sort_key_len);
}

/* Every entry of a map, sorted by key, so a hash map's order does not matter. */
static void dump_map(struct dump *d, int fd)
{
	struct bpf_map_info info = { 0 };
	__u32 ilen = sizeof(info);
	size_t vsize, rec, n = 0, cap = 64;
	unsigned char *recs, *key;

	d->section[d->n_sections++] = d->len;
	assert_int_equal(bpf_obj_get_info_by_fd(fd, &info, &ilen), 0);
	vsize = info.value_size;
	if (info.type == BPF_MAP_TYPE_PERCPU_ARRAY || info.type == BPF_MAP_TYPE_PERCPU_HASH)
		vsize = ((vsize + 7) & ~7ul) * (size_t)fx.b.ncpus;
	rec = info.key_size + vsize;
	recs = malloc(cap * rec);
	key = calloc(1, info.key_size);
	assert_non_null(recs);
	assert_non_null(key);
	for (int r = bpf_map_get_next_key(fd, NULL, key); r == 0;
	     r = bpf_map_get_next_key(fd, key, key)) {
		if (n == cap) {
			cap *= 2;
			recs = realloc(recs, cap * rec);
			assert_non_null(recs);
		}
		memcpy(recs + n * rec, key, info.key_size);
		assert_int_equal(bpf_map_lookup_elem(fd, key, recs + n * rec + info.key_size), 0);
		n++;
	}
	sort_key_len = info.key_size;
	qsort(recs, n, rec, cmp_key);
	put(d, &n, sizeof(n));
	put(d, recs, n * rec);
	free(recs);
	free(key);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Pinned links: name, link id and program id. */
static void dump_links(struct dump *d)
{
	char dir[PATH_MAX + 8], path[2 * PATH_MAX], *lines[256];
	struct dirent *de;
	int n = 0;
	DIR *dd;

	d->section[d->n_sections++] = d->len;
	snprintf(dir, sizeof(dir), "%s/links", fx.pin);
	dd = opendir(dir);
	while (dd && (de = readdir(dd))) {
		struct bpf_link_info li = { 0 };
		__u32 len = sizeof(li);
		int fd;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		fd = bpf_obj_get(path);
		assert_true(fd >= 0);
		assert_int_equal(bpf_obj_get_info_by_fd(fd, &li, &len), 0);
		close(fd);
		assert_true(n < 256);
		assert_true(asprintf(&lines[n++], "%s link %u prog %u\n", de->d_name, li.id,
				     li.prog_id) > 0);
	}
	if (dd)
		closedir(dd);
	qsort(lines, n, sizeof(lines[0]), cmp_str);
	for (int i = 0; i < n; i++) {
		put(d, lines[i], strlen(lines[i]));
		free(lines[i]);
	}
	put(d, "", 1);
}

static void take_dump(struct dump *d)
{
	memset(d, 0, sizeof(*d));
	dump_map(d, fx.b.limits_fd);
	dump_map(d, fx.b.members_fd);
	dump_map(d, fx.b.dests_fd);
	dump_map(d, fx.b.ports_fd);
	d->section[d->n_sections++] = d->len;
	put(d, fx.b.buckets, (size_t)KT_MAX_BUCKETS * sizeof(struct kt_bucket)); /* the mmap */
	dump_map(d, fx.b.counters_fd);
	dump_links(d);
	/* kt_coop as callers see it: an entry a rollback retired again has
	 * a new gen (callers of the retired one get -ESTALE), no name, and
	 * is out of use; entries in use must be as they were to the byte */
	d->section[d->n_sections++] = d->len;
	for (int i = 0; i < KT_MAX_COOP; i++) {
		const struct kt_coop *e = &fx.b.coop[i];

		if (e->flags & KT_COOP_IN_USE)
			put(d, e, sizeof(*e));
		else
			put(d, e->name, 1); /* 0 */
	}
}

static void assert_same_dump(const struct dump *want, const struct dump *got, const char *what)
{
	if (want->len == got->len && !memcmp(want->data, got->data, want->len))
		return;
	for (int s = 0; s < want->n_sections; s++) {
		size_t a = want->section[s], e = s + 1 < want->n_sections ? want->section[s + 1] : want->len;
		size_t ga = got->section[s], ge = s + 1 < got->n_sections ? got->section[s + 1] : got->len;

		if (e - a != ge - ga || memcmp(want->data + a, got->data + ga, e - a))
			fail_msg("%s: %s differs from before the apply (%zu vs %zu bytes)", what,
				 section_names[s], e - a, ge - ga);
	}
	fail_msg("%s: dumps differ", what);
}

static void free_dump(struct dump *d)
{
	free(d->data);
	memset(d, 0, sizeof(*d));
}

/* ---- checks on the applied state ---- */

static bool has_link(uint64_t cgid, const char *prog)
{
	char path[PATH_MAX + 96];

	snprintf(path, sizeof(path), "%s/links/%llu-%s", fx.pin, (unsigned long long)cgid, prog);
	return access(path, F_OK) == 0;
}

/* The buckets in use are exactly the plan's slots, each with its limit. */
static void assert_buckets_are(const struct kt_plan *p)
{
	bool want[KT_MAX_BUCKETS] = { 0 };
	int n_want = 0, n_used = 0;

	for (int i = 0; i < p->n_limits; i++) {
		uint32_t slots[KT_MAX_MEMBERS_PER_LIMIT];
		int n = kt_limit_slots(&p->limits[i], slots, KT_MAX_MEMBERS_PER_LIMIT);

		for (int j = 0; j < n; j++) {
			if (p->limits[i].cfg->unit == KT_UNIT_REQUEST) {
				/* its kt_coop entry, published under its name */
				const struct kt_coop *e;

				assert_true(kt_slot_is_coop(slots[j]));
				e = &fx.b.coop[slots[j] - KT_COOP_SLOT0];
				assert_true(e->flags & KT_COOP_IN_USE);
				assert_string_equal(e->name, p->limits[i].cfg->name);
				assert_int_equal(e->bucket.burst, (uint64_t)ceil(p->limits[i].cfg->burst));
				continue;
			}
			assert_true(slots[j] < KT_MAX_BUCKETS);
			assert_false(want[slots[j]]);
			want[slots[j]] = true;
			n_want++;
			assert_int_equal(fx.b.buckets[slots[j]].limit_id, p->limits[i].id);
		}
		/* node scope: every member charges the one bucket */
		for (int j = 0; p->limits[i].cfg->unit != KT_UNIT_REQUEST && j < p->limits[i].n_members; j++)
			assert_true(want[p->limits[i].members[j].slot]);
		/* pod scope with 2+ members: a node bucket, every member chained to it */
		bool chained = p->limits[i].cfg->scope == KT_SCOPE_POD &&
			       p->limits[i].cfg->unit != KT_UNIT_REQUEST && p->limits[i].n_members >= 2;
		assert_int_equal(p->limits[i].has_pool, chained);
		if (chained) {
			uint32_t ps = p->limits[i].pool_slot;

			assert_true(ps < KT_MAX_BUCKETS && !want[ps]);
			want[ps] = true;
			n_want++;
			assert_true(fx.b.buckets[ps].flags & KT_BUCKET_POOL);
			assert_int_equal(fx.b.buckets[ps].limit_id, p->limits[i].id);
		}
		for (int j = 0; chained && j < p->limits[i].n_members; j++)
			assert_int_equal(kt_bucket_parent(fx.b.buckets[p->limits[i].members[j].slot].flags),
					 p->limits[i].pool_slot);
	}
	for (int s = 0; s < KT_MAX_BUCKETS; s++) {
		bool used = fx.b.buckets[s].flags & KT_BUCKET_IN_USE;

		n_used += used;
		if (used != want[s])
			fail_msg("slot %d: in use %d, in the plan %d", s, used, want[s]);
	}
	for (int c = 0, n_coop = 0, w = 0; c <= KT_MAX_COOP; c++) {
		if (c == KT_MAX_COOP) {
			for (int i = 0; i < p->n_limits; i++)
				w += p->limits[i].cfg->unit == KT_UNIT_REQUEST;
			assert_int_equal(n_coop, w); /* none left over */
			break;
		}
		n_coop += !!(fx.b.coop[c].flags & KT_COOP_IN_USE);
	}
	print_message("%d buckets in use, the plan's %d\n", n_used, n_want);
}

/* Every member cgroup of the plan has its kt_members entry, and no other. */
static void assert_members_are(const struct kt_plan *p)
{
	struct kt_member_key key, next;
	int n_keys = 0, n_want = 0;

	for (int r = bpf_map_get_next_key(fx.b.members_fd, NULL, &next); r == 0;
	     r = bpf_map_get_next_key(fx.b.members_fd, &key, &next)) {
		key = next;
		n_keys++;
	}
	for (int c = 0; c < N_CG; c++) {
		uint64_t id = ktest_cgroup_id(fx.cg[c]);
		struct kt_member_val v;
		bool member = false;

		for (int i = 0; i < p->n_limits; i++)
			for (int j = 0; j < p->limits[i].n_members; j++)
				member |= p->limits[i].members[j].cgid == id;
		key.cgroup_id = id;
		assert_int_equal(bpf_map_lookup_elem(fx.b.members_fd, &key, &v) == 0, member);
		n_want += member;
	}
	assert_int_equal(n_keys, n_want);
}

/* ---- fixtures ---- */

static int setup(void **state)
{
	char err[KT_ERR_LEN], name[32];
	static int seq;

	(void)state;
	memset(&fx, 0, sizeof(fx));
	if (ktest_root_unavailable())
		return 0;
	kt_apply_fail_step = 0;
	if (kt_cgroup2_mount(fx.cg_mount, sizeof(fx.cg_mount), NULL) ||
	    ktest_tmpdir(fx.tmp, sizeof(fx.tmp)))
		return -1;
	for (int i = 0; i < N_CG; i++) {
		snprintf(name, sizeof(name), "apply-%d", i);
		if (ktest_cgroup_create(name, fx.cg[i], sizeof(fx.cg[i])))
			return -1;
	}
	/* kt_bpf_open pins on bpffs only, so not in fx.tmp */
	snprintf(fx.pin, sizeof(fx.pin), "/sys/fs/bpf/kt-test-%d-apply%d", getpid(), seq++);
	if (kt_bpf_open(&fx.b, fx.pin, err, sizeof(err))) {
		fprintf(stderr, "kt_bpf_open %s: %s\n", fx.pin, err);
		fx.pin[0] = 0;
		return -1;
	}
	fx.open = true;
	return 0;
}

static int teardown(void **state)
{
	char err[KT_ERR_LEN];

	(void)state;
	kt_apply_fail_step = 0;
	free_plans();
	if (fx.open)
		kt_bpf_close(&fx.b);
	if (fx.pin[0] && kt_bpf_cleanup(fx.pin, err, sizeof(err)))
		fprintf(stderr, "cleanup of %s: %s\n", fx.pin, err);
	if (fx.nested[0])
		rmdir(fx.nested);
	for (int i = 0; i < N_CG; i++)
		if (fx.cg[i][0])
			ktest_cgroup_destroy(fx.cg[i]);
	ktest_rmtree(fx.tmp);
	memset(&fx, 0, sizeof(fx));
	return 0;
}

/* ---- tests ---- */

/* A applied; then B failing at each of its commit's kernel writes in turn,
 * and once at a real link failure: each time everything is as A left it. */
static void test_failed_apply_changes_nothing(void **state)
{
	char err[KT_ERR_LEN], buf[4096];
	struct kt_plan *a, *b;
	struct dump before, after;
	int n, ret;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	a = load_plan("a", plan_a);
	if (apply(a, false, err, sizeof(err)))
		fail_msg("plan A: %s", err);
	assert_true(has_link(a->limits[1].members[0].cgid, "kt_connect4"));
	take_dump(&before);

	/* A real failure inside kt_bpf_sync_links: CG5 is gone by the time its
	 * programs are attached, after CG2..CG4 got new links. */
	b = load_plan("b-doomed", plan_b(buf, sizeof(buf), ", CG5"));
	uint32_t given[8][8];
	for (int i = 0; i < b->n_limits && i < 8; i++)
		for (int j = 0; j < b->limits[i].n_members && j < 8; j++)
			given[i][j] = b->limits[i].members[j].slot;
	ktest_cgroup_destroy(fx.cg[5]);
	ret = apply(b, true, err, sizeof(err));
	print_message("B with a removed cgroup: %d %s\n", ret, err);
	assert_int_equal(ret, -ENOENT);
	assert_non_null(strstr(err, fx.cg[5]));
	take_dump(&after);
	assert_same_dump(&before, &after, "link failure");
	free_dump(&after);
	for (int i = 0; i < b->n_limits; i++) {
		assert_int_equal(b->limits[i].id, 0); /* the plan as given */
		for (int j = 0; j < b->limits[i].n_members && j < 8; j++)
			assert_int_equal(b->limits[i].members[j].slot, given[i][j]);
	}
	kt_plan_free(b);
	kt_config_free(&fx.cfg[1]);
	fx.n_cfg = 1;
	assert_int_equal(ktest_cgroup_create("apply-5", fx.cg[5], sizeof(fx.cg[5])), 0);

	/* Every commit step of B refused in turn; the first N past the last
	 * step is the one that succeeds. */
	b = load_plan("b", plan_b(buf, sizeof(buf), ""));
	for (n = 1; n < 10000; n++) {
		char what[64];

		kt_apply_fail_step = n;
		ret = apply(b, true, err, sizeof(err));
		if (ret == 0)
			break;
		assert_int_equal(ret, -EIO);
		assert_true(err[0]);
		snprintf(what, sizeof(what), "step %d (%s)", n, err);
		take_dump(&after);
		assert_same_dump(&before, &after, what);
		free_dump(&after);
	}
	kt_apply_fail_step = 0;
	print_message("commit of B: %d steps, each refused in turn, all rolled back\n", n - 1);
	assert_true(n - 1 >= 15);
	free_dump(&before);

	/* B in force: its members, buckets and links, A's surplus gone. */
	uint64_t cg0 = a->limits[0].members[0].cgid, cg1 = a->limits[0].members[1].cgid;
	uint64_t cg2 = a->limits[1].members[1].cgid;
	assert_members_are(b);
	assert_buckets_are(b);
	assert_int_equal(b->limits[0].id, a->limits[0].id);
	assert_int_equal(b->limits[0].members[0].slot, a->limits[0].members[1].slot); /* CG1 kept */
	/* the cooperative a-req keeps its kt_coop entry (and gen: open
	 * handles stay valid); b-req got another */
	assert_true(kt_slot_is_coop(a->limits[3].members[0].slot));
	assert_int_equal(b->limits[2].members[0].slot, a->limits[3].members[0].slot);
	assert_int_not_equal(b->limits[3].members[0].slot, a->limits[3].members[0].slot);
	assert_false(has_link(cg0, "kt_sendmsg4"));
	assert_false(has_link(cg0, "kt_egress"));
	assert_true(has_link(cg1, "kt_sendmsg4"));
	assert_false(has_link(cg1, "kt_connect4"));
	assert_false(has_link(cg2, "kt_connect4"));
	assert_true(has_link(cg2, "kt_egress"));
	assert_true(has_link(b->limits[0].members[1].cgid, "kt_sendmsg6"));
	assert_true(has_link(b->limits[1].members[1].cgid, "kt_egress"));
}

/* A config the plan refuses, 600 times: no slot leaks, and B then fits
 * with exactly its own buckets in use. */
static void test_rejected_apply_leaks_nothing(void **state)
{
	char err[KT_ERR_LEN], buf[8192];
	struct kt_plan *a, *bad, *b;
	struct dump before, after;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	a = load_plan("a", plan_a);
	if (apply(a, false, err, sizeof(err)))
		fail_msg("plan A: %s", err);
	take_dump(&before);
	snprintf(fx.nested, sizeof(fx.nested), "%s/nested", fx.cg[0]);
	assert_int_equal(mkdir(fx.nested, 0755), 0);
	bad = load_plan("bad", plan_bad(buf, sizeof(buf), fx.nested));
	for (int i = 0; i < 600; i++) {
		assert_int_equal(apply(bad, false, err, sizeof(err)), -E2BIG);
		if (i == 0)
			print_message("rejected: %s\n", err);
	}
	assert_non_null(strstr(err, "limits[8] (bad-8)"));
	assert_non_null(strstr(err, "counting those of"));
	take_dump(&after);
	assert_same_dump(&before, &after, "600 rejected applies");
	free_dump(&after);
	free_dump(&before);
	kt_plan_free(bad);
	kt_config_free(&fx.cfg[1]);
	fx.n_cfg = 1;

	b = load_plan("b", plan_b(buf, sizeof(buf), ""));
	if (apply(b, true, err, sizeof(err)))
		fail_msg("plan B after 600 rejected applies: %s", err);
	assert_members_are(b);
	assert_buckets_are(b);
}

/* kt_bpf_sync_links on its own: CG0 stays and loses its connect hook, CG2
 * is new, CG5 is gone, so its attach fails after CG0 and CG2 were handled.
 * Every link is then as it was, CG0's connect links included (same link,
 * same program), and CG2 has none. Also through a second load of the
 * programs (a restart): the links it upgraded are put back on the old
 * programs, and a sync that succeeds upgrades them in place. */
static void test_failed_sync_keeps_links(void **state)
{
	char err[KT_ERR_LEN], path[PATH_MAX + 96];
	struct dump before, after;
	struct kt_bpf b2;
	uint64_t id[N_CG];
	struct bpf_link_info li0 = { 0 }, li1 = { 0 };
	__u32 len = sizeof(li0);
	int fd;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	for (int i = 0; i < N_CG; i++)
		id[i] = ktest_cgroup_id(fx.cg[i]);
	const struct kt_attach first[] = {
		{ id[0], fx.cg[0], 1u << KT_HOOK_CONNECT | 1u << KT_HOOK_SENDMSG },
		{ id[1], fx.cg[1], 1u << KT_HOOK_EGRESS },
	};
	const struct kt_attach doomed[] = {
		{ id[0], fx.cg[0], 1u << KT_HOOK_SENDMSG },
		{ id[2], fx.cg[2], 1u << KT_HOOK_CONNECT },
		{ id[5], fx.cg[5], 1u << KT_HOOK_CONNECT },
		{ id[1], fx.cg[1], 1u << KT_HOOK_EGRESS },
	};
	if (kt_bpf_sync_links(&fx.b, first, 2, err, sizeof(err)))
		fail_msg("first sync: %s", err);
	assert_true(has_link(id[0], "kt_connect4"));
	take_dump(&before);
	ktest_cgroup_destroy(fx.cg[5]);

	assert_int_equal(kt_bpf_sync_links(&fx.b, doomed, 4, err, sizeof(err)), -ENOENT);
	print_message("sync with a removed cgroup: %s\n", err);
	take_dump(&after);
	assert_same_dump(&before, &after, "failed sync");
	free_dump(&after);
	assert_true(has_link(id[0], "kt_connect4"));
	assert_true(has_link(id[0], "kt_connect6"));
	assert_false(has_link(id[2], "kt_connect4"));

	/* Freshly loaded programs: a failed sync has upgraded CG0's and CG1's
	 * kept links before the failure, and must put the old programs back. */
	if (kt_bpf_open(&b2, fx.pin, err, sizeof(err)))
		fail_msg("second open: %s", err);
	assert_int_equal(kt_bpf_sync_links(&b2, doomed, 4, err, sizeof(err)), -ENOENT);
	take_dump(&after);
	assert_same_dump(&before, &after, "failed sync after a reload");
	free_dump(&after);

	snprintf(path, sizeof(path), "%s/links/%llu-kt_sendmsg4", fx.pin, (unsigned long long)id[0]);
	fd = bpf_obj_get(path);
	assert_true(fd >= 0);
	assert_int_equal(bpf_obj_get_info_by_fd(fd, &li0, &len), 0);
	close(fd);
	if (kt_bpf_sync_links(&b2, doomed, 2, err, sizeof(err))) /* without CG5 and CG1 */
		fail_msg("sync after a reload: %s", err);
	fd = bpf_obj_get(path);
	assert_true(fd >= 0);
	assert_int_equal(bpf_obj_get_info_by_fd(fd, &li1, &len), 0);
	close(fd);
	assert_int_equal(li1.id, li0.id);         /* the same link, never detached */
	assert_int_not_equal(li1.prog_id, li0.prog_id); /* on the new program */
	assert_false(has_link(id[0], "kt_connect4"));
	assert_false(has_link(id[0], "kt_connect6"));
	assert_true(has_link(id[0], "kt_sendmsg6"));
	assert_true(has_link(id[2], "kt_connect6"));
	assert_false(has_link(id[1], "kt_egress"));
	kt_bpf_close(&b2);
	free_dump(&before);
	assert_int_equal(ktest_cgroup_create("apply-5", fx.cg[5], sizeof(fx.cg[5])), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_failed_apply_changes_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rejected_apply_leaks_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_failed_sync_keeps_links, setup, teardown),
	};

	return cmocka_run_group_tests_name("e2e_apply", tests, NULL, NULL);
}
