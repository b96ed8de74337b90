// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The XDP tag buckets from the daemon's side: see xdp_maps.h. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "kernel/bpf_loader.h"
#include "base/log.h"
#include "tags/xdp_maps.h"
#include "xdp.skel.h"

#define RING_MIN (64u * 1024)
#define RING_MAX (64u * 1024 * 1024)
#define RING_REC 32u /* a record: 8-byte header + struct kt_tag_key */

struct kt_xdp_tags {
	struct kt_xdp *skel;
	struct ring_buffer *rb;
	struct kt_tag_op *ops; /* kt_tag_ops, mmapped: KT_TAG_OPS_BATCH entries */
	size_t ops_len;
	uint64_t *slots; /* kt_xdp_ifslot, mmapped: KT_XDP_IFSLOTS struct kt_xdp_iface */
	char pin_dir[PATH_MAX];
	uint32_t max_tags;
	uint64_t lost_seen;   /* notify_lost at the last harvest; ~0: scan next time */
	struct kt_tag_key *pending; /* keys named by the ring, to harvest */
	size_t npending, cap;
	int pending_err;
};

static size_t ring_size(uint32_t max_tags)
{
	size_t want = (size_t)max_tags * RING_REC, sz = RING_MIN;

	while (sz < want && sz < RING_MAX)
		sz <<= 1;
	return sz;
}

#define SLOTS_LEN ((size_t)KT_XDP_IFSLOTS * sizeof(struct kt_xdp_iface))
_Static_assert(sizeof(struct kt_xdp_iface) == sizeof(uint64_t), "a slot is one word");

/* kt_xdp_ifslot[ifindex] = v (KT_XDP_IFACE_SET) or empty (v NULL): one
 * store, so the program never reads half an entry. */
static void slot_store(struct kt_xdp_tags *t, __u32 ifindex, const struct kt_xdp_iface *v)
{
	struct kt_xdp_iface e = { 0 };
	uint64_t w;

	if (ifindex >= KT_XDP_IFSLOTS)
		return;
	if (v) {
		e = *v;
		e.flags = KT_XDP_IFACE_SET;
	}
	memcpy(&w, &e, sizeof(w));
	if (__atomic_load_n(&t->slots[ifindex], __ATOMIC_RELAXED) != w)
		__atomic_store_n(&t->slots[ifindex], w, __ATOMIC_RELEASE);
}

/* The slots as kt_xdp_ifaces says: the record, which an older daemon may
 * have changed (or the slot map is new: pins of a version without it). */
static int slots_sync(struct kt_xdp_tags *t)
{
	int fd = bpf_map__fd(t->skel->maps.kt_xdp_ifaces);
	unsigned char *want = calloc(KT_XDP_IFSLOTS, 1);
	__u32 key, next, i;
	const void *prev = NULL;
	struct kt_xdp_iface v;
	size_t budget = 2 * KT_MAX_XDP_IFACES + 16;

	if (!want)
		return -ENOMEM;
	while (budget-- > 0 && bpf_map_get_next_key(fd, prev, &next) == 0) {
		key = next;
		prev = &key;
		if (key >= KT_XDP_IFSLOTS || bpf_map_lookup_elem(fd, &key, &v) < 0)
			continue;
		slot_store(t, key, &v);
		want[key] = 1;
	}
	for (i = 0; i < KT_XDP_IFSLOTS; i++)
		if (!want[i])
			slot_store(t, i, NULL);
	free(want);
	return 0;
}

static int on_notify(void *ctx, void *data, size_t len)
{
	struct kt_xdp_tags *t = ctx;

	if (len < sizeof(struct kt_tag_key))
		return 0;
	if (t->npending == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 1024;
		struct kt_tag_key *p = realloc(t->pending, cap * sizeof(*p));

		if (!p) {
			t->pending_err = -ENOMEM;
			return 0; /* the harvest falls back to a full scan */
		}
		t->pending = p;
		t->cap = cap;
	}
	memcpy(&t->pending[t->npending++], data, sizeof(struct kt_tag_key));
	return 0;
}

int kt_xdp_tags_open(const char *pin_dir, uint32_t max_tags, struct kt_xdp_tags **out)
{
	LIBBPF_OPTS(bpf_object_open_opts, opts, .pin_root_path = pin_dir);
	struct kt_xdp_tags *t = NULL;
	char err[512];
	int ret;

	*out = NULL;
	if (!max_tags || strlen(pin_dir) >= sizeof(t->pin_dir))
		return -EINVAL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	strcpy(t->pin_dir, pin_dir);
	t->max_tags = max_tags;
	t->lost_seen = ~0ULL; /* a previous daemon may have read notifications it never harvested */
	t->ops = MAP_FAILED;
	t->slots = MAP_FAILED;
	ret = kt_bpffs_ensure(pin_dir, err, sizeof(err));
	if (ret) {
		kt_err("xdp tags: %s", err);
		goto fail;
	}
	ret = kt_mkdir_p(pin_dir, 0700);
	if (ret) {
		kt_err("xdp tags: cannot create pin directory %s: %s", pin_dir, strerror(-ret));
		goto fail;
	}
	t->skel = kt_xdp__open_opts(&opts);
	if (!t->skel) {
		ret = errno ? -errno : -EINVAL;
		kt_err("xdp tags: cannot open the XDP object: %s", strerror(-ret));
		goto fail;
	}
	if ((ret = bpf_map__set_max_entries(t->skel->maps.kt_tag_buckets, max_tags)) ||
	    (ret = bpf_map__set_max_entries(t->skel->maps.kt_tag_notify, ring_size(max_tags)))) {
		kt_err("xdp tags: cannot size the maps: %s", strerror(-ret));
		goto fail;
	}
	ret = kt_xdp__load(t->skel);
	if (ret) {
		kt_err("xdp tags: cannot load the XDP programs: %s (pinned maps of another size or version in %s?)",
		       strerror(-ret), pin_dir);
		goto fail;
	}
	t->ops_len = sizeof(struct kt_tag_op) * KT_TAG_OPS_BATCH;
	t->ops = mmap(NULL, t->ops_len, PROT_READ | PROT_WRITE, MAP_SHARED,
		      bpf_map__fd(t->skel->maps.kt_tag_ops), 0);
	if (t->ops == MAP_FAILED) {
		ret = -errno;
		kt_err("xdp tags: cannot mmap kt_tag_ops: %s", strerror(-ret));
		goto fail;
	}
	t->slots = mmap(NULL, SLOTS_LEN, PROT_READ | PROT_WRITE, MAP_SHARED,
			bpf_map__fd(t->skel->maps.kt_xdp_ifslot), 0);
	if (t->slots == MAP_FAILED) {
		ret = -errno;
		kt_err("xdp tags: cannot mmap kt_xdp_ifslot: %s", strerror(-ret));
		goto fail;
	}
	ret = slots_sync(t);
	if (ret) {
		kt_err("xdp tags: cannot rebuild kt_xdp_ifslot: %s", strerror(-ret));
		goto fail;
	}
	t->rb = ring_buffer__new(bpf_map__fd(t->skel->maps.kt_tag_notify), on_notify, t, NULL);
	if (!t->rb) {
		ret = errno ? -errno : -EINVAL;
		kt_err("xdp tags: cannot open the notification ring: %s", strerror(-ret));
		goto fail;
	}
	*out = t;
	return 0;
fail:
	kt_xdp_tags_close(t);
	return ret;
}

void kt_xdp_tags_close(struct kt_xdp_tags *t)
{
	if (!t)
		return;
	ring_buffer__free(t->rb);
	if (t->ops != MAP_FAILED && t->ops)
		munmap(t->ops, t->ops_len);
	if (t->slots != MAP_FAILED && t->slots)
		munmap(t->slots, SLOTS_LEN);
	kt_xdp__destroy(t->skel);
	free(t->pending);
	free(t);
}

int kt_xdp_tags_prog_fd(const struct kt_xdp_tags *t)
{
	return bpf_program__fd(t->skel->progs.kt_xdp_tags);
}

static int link_path(const struct kt_xdp_tags *t, int ifindex, char *buf, size_t len)
{
	if (ifindex <= 0)
		return -EINVAL;
	if ((size_t)snprintf(buf, len, "%s/kt_xdp_link_%d", t->pin_dir, ifindex) >= len)
		return -ENAMETOOLONG;
	return 0;
}

int kt_xdp_tags_attach(struct kt_xdp_tags *t, int ifindex)
{
	struct bpf_program *prog = t->skel->progs.kt_xdp_tags;
	struct bpf_link *l = NULL;
	char path[PATH_MAX];
	int ret;

	ret = link_path(t, ifindex, path, sizeof(path));
	if (ret)
		return ret;
	/* probe first: libbpf logs a failed open as an error */
	if (access(path, F_OK) == 0) {
		l = bpf_link__open(path);
		if (!l) {
			ret = -errno;
			kt_err("xdp tags: cannot open link %s: %s", path, strerror(-ret));
			goto out;
		}
		if (bpf_link__update_program(l, prog) < 0) {
			ret = -errno;
			kt_err("xdp tags: cannot update link %s: %s", path, strerror(-ret));
		}
		goto out;
	}
	l = bpf_program__attach_xdp(prog, ifindex);
	if (!l) {
		ret = -errno;
		kt_err("xdp tags: cannot attach XDP to ifindex %d: %s", ifindex, strerror(-ret));
		goto out;
	}
	if (bpf_link__pin(l, path) < 0) {
		ret = -errno;
		kt_err("xdp tags: cannot pin link %s: %s", path, strerror(-ret));
		goto out; /* not pinned: the destroy below detaches it */
	}
out:
	bpf_link__destroy(l); /* a pinned link stays attached */
	return ret;
}

int kt_xdp_tags_detach(struct kt_xdp_tags *t, int ifindex)
{
	struct bpf_link *l = NULL;
	char path[PATH_MAX];
	int ret;

	ret = link_path(t, ifindex, path, sizeof(path));
	if (ret)
		return ret;
	if (access(path, F_OK) != 0)
		return -ENOENT;
	l = bpf_link__open(path);
	if (!l) {
		ret = -errno;
		kt_err("xdp tags: cannot open link %s: %s", path, strerror(-ret));
		goto out;
	}
	if (bpf_link__detach(l) < 0) {
		ret = -errno;
		kt_err("xdp tags: cannot detach link %s: %s", path, strerror(-ret));
		goto out;
	}
	if (unlink(path) < 0) {
		ret = -errno;
		kt_err("xdp tags: cannot remove %s: %s", path, strerror(-ret));
	}
out:
	bpf_link__destroy(l);
	return ret;
}

static int map_update(struct bpf_map *m, const void *key, const void *val, const char *what)
{
	if (bpf_map_update_elem(bpf_map__fd(m), key, val, BPF_ANY) < 0) {
		int ret = -errno;

		kt_err("xdp tags: cannot write %s: %s", what, strerror(-ret));
		return ret;
	}
	return 0;
}

int kt_xdp_tags_set_iface(struct kt_xdp_tags *t, int ifindex, uint32_t tag_limit,
			  uint8_t prefix_v4, uint8_t prefix_v6)
{
	struct kt_xdp_iface v = { .tag_limit = tag_limit, .prefix_v4 = prefix_v4,
				  .prefix_v6 = prefix_v6 };
	__u32 k = (__u32)ifindex;

	int ret;

	if (ifindex <= 0 || tag_limit >= KT_MAX_TAG_LIMITS || prefix_v4 > 32 || prefix_v6 > 128)
		return -EINVAL;
	ret = map_update(t->skel->maps.kt_xdp_ifaces, &k, &v, "kt_xdp_ifaces");
	if (!ret)
		slot_store(t, k, &v);
	return ret;
}

int kt_xdp_tags_del_iface(struct kt_xdp_tags *t, int ifindex)
{
	__u32 k = (__u32)ifindex;

	if (ifindex <= 0)
		return -ENOENT;
	slot_store(t, k, NULL);
	if (bpf_map_delete_elem(bpf_map__fd(t->skel->maps.kt_xdp_ifaces), &k) < 0)
		return -errno;
	return 0;
}

static int policy_of_rate(double rate, uint64_t burst, int allow, struct kt_tag_policy *p)
{
	memset(p, 0, sizeof(*p));
	if (allow) {
		p->flags = KT_TAG_ALLOW;
		return 0;
	}
	if (!(rate > 0) || !burst)
		return -EINVAL;
	p->interval_fp = kt_interval_fp_from_rate(rate);
	p->burst = burst;
	return p->interval_fp ? 0 : -EINVAL;
}

int kt_xdp_tags_set_limit(struct kt_xdp_tags *t, uint32_t tag_limit, double rate, uint64_t burst)
{
	struct kt_tag_policy p;
	int ret;

	if (tag_limit >= KT_MAX_TAG_LIMITS)
		return -EINVAL;
	ret = policy_of_rate(rate, burst, 0, &p);
	if (ret)
		return ret;
	p.flags = KT_TAG_POLICY_IN_USE;
	return map_update(t->skel->maps.kt_tag_policy, &tag_limit, &p, "kt_tag_policy");
}

int kt_xdp_tags_clear_limit(struct kt_xdp_tags *t, uint32_t tag_limit)
{
	struct kt_tag_policy p = { 0 };

	if (tag_limit >= KT_MAX_TAG_LIMITS)
		return -EINVAL;
	return map_update(t->skel->maps.kt_tag_policy, &tag_limit, &p, "kt_tag_policy");
}

/* The LPM key of a rule or a lookup: addr masked to prefix_len bits. */
static int rule_key(uint32_t tag_limit, uint8_t family, const uint8_t addr[16], uint8_t prefix_len,
		    struct kt_tag_rule_key *k)
{
	unsigned i;

	if (tag_limit >= KT_MAX_TAG_LIMITS || (family != 4 && family != 6) ||
	    prefix_len > (family == 4 ? 32 : 128))
		return -EINVAL;
	memset(k, 0, sizeof(*k));
	k->prefixlen = KT_TAG_RULE_BITS + prefix_len;
	k->tag_limit = tag_limit;
	k->family = family;
	for (i = 0; i < 16; i++) {
		int bits = (int)prefix_len - 8 * (int)i;

		k->addr[i] = bits >= 8 ? addr[i] : bits <= 0 ? 0 : addr[i] & (uint8_t)(0xff << (8 - bits));
	}
	return 0;
}

int kt_xdp_tags_set_rule(struct kt_xdp_tags *t, uint32_t tag_limit, uint8_t family,
			 const uint8_t addr[16], uint8_t prefix_len, int allow, double rate,
			 uint64_t burst)
{
	struct kt_tag_rule_key k;
	struct kt_tag_policy p;
	int ret;

	if ((ret = rule_key(tag_limit, family, addr, prefix_len, &k)) ||
	    (ret = policy_of_rate(rate, burst, allow, &p)))
		return ret;
	return map_update(t->skel->maps.kt_tag_rules, &k, &p, "kt_tag_rules");
}

int kt_xdp_tags_del_rule(struct kt_xdp_tags *t, uint32_t tag_limit, uint8_t family,
			 const uint8_t addr[16], uint8_t prefix_len)
{
	struct kt_tag_rule_key k;
	int ret = rule_key(tag_limit, family, addr, prefix_len, &k);

	if (ret)
		return ret;
	if (bpf_map_delete_elem(bpf_map__fd(t->skel->maps.kt_tag_rules), &k) < 0)
		return -errno;
	return 0;
}

int kt_xdp_tags_policy_of(struct kt_xdp_tags *t, const struct kt_tag_key *key,
			  struct kt_tag_policy *out)
{
	struct kt_tag_rule_key k;
	struct kt_tag_policy p, r;
	__u32 lim = key->tag_limit;
	int ret;

	ret = rule_key(key->tag_limit, key->family, key->addr, key->prefix_len, &k);
	if (ret)
		return ret;
	if (bpf_map_lookup_elem(bpf_map__fd(t->skel->maps.kt_tag_policy), &lim, &p) < 0)
		return -errno;
	if (!(p.flags & KT_TAG_POLICY_IN_USE))
		return -ENOENT;
	if (bpf_map_lookup_elem(bpf_map__fd(t->skel->maps.kt_tag_rules), &k, &r) == 0) {
		p.interval_fp = r.interval_fp;
		p.burst = r.burst;
		p.flags = r.flags;
	} else if (errno != ENOENT) {
		return -errno;
	}
	p.flags &= KT_TAG_ALLOW;
	*out = p;
	return 0;
}

/* Runs ops 0..n-1 of the mmapped batch (n <= KT_TAG_OPS_BATCH). */
static int run_ops(struct kt_xdp_tags *t, uint32_t n)
{
	struct timespec ts;
	struct kt_tag_ops_ctx ctx = { .count = n };
	LIBBPF_OPTS(bpf_test_run_opts, o, .ctx_in = &ctx, .ctx_size_in = sizeof(ctx));
	int ret;

	if (!n)
		return 0;
	/* the buckets' clock (kt_xdp_now in xdp.bpf.c) */
	if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) == 0)
		ctx.now_ns = (__u64)ts.tv_sec * 1000000000ull + (__u64)ts.tv_nsec;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (bpf_prog_test_run_opts(bpf_program__fd(t->skel->progs.kt_tag_run_ops), &o) < 0) {
		ret = -errno;
		kt_err("xdp tags: cannot run the bucket operations: %s", strerror(-ret));
		return ret;
	}
	if (ctx.done != n) {
		kt_err("xdp tags: the bucket operations ran %u of %u", ctx.done, n);
		return -EIO;
	}
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return 0;
}

/* Every key of kt_tag_buckets for which keep(t, key, bucket, arg) says
 * so, to a malloc'd array *keys_out (count *n_out). Bounded: a map that
 * changes while it is walked may restart the walk, so at most twice its
 * size is visited. */
typedef int (*scan_fn)(const struct kt_tag_key *key, const struct kt_tag_bucket *b, void *arg);
static int scan(struct kt_xdp_tags *t, scan_fn keep, void *arg, struct kt_tag_key **keys_out,
		size_t *n_out)
{
	int fd = bpf_map__fd(t->skel->maps.kt_tag_buckets);
	struct kt_tag_key key, next, *keys = NULL, *p;
	struct kt_tag_bucket b;
	size_t n = 0, cap = 0, budget = 2 * (size_t)t->max_tags + 16;
	const void *prev = NULL;
	int ret = 0;

	while (budget-- > 0 && bpf_map_get_next_key(fd, prev, &next) == 0) {
		key = next;
		prev = &key;
		if (bpf_map_lookup_elem(fd, &key, &b) < 0)
			continue; /* evicted meanwhile */
		if (keep && !keep(&key, &b, arg))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 256;
			p = realloc(keys, cap * sizeof(*keys));
			if (!p) {
				ret = -ENOMEM;
				goto fail;
			}
			keys = p;
		}
		keys[n++] = key;
	}
	*keys_out = keys;
	*n_out = n;
	return 0;
fail:
	free(keys);
	return ret;
}

static int has_hits(const struct kt_tag_key *key, const struct kt_tag_bucket *b, void *arg)
{
	(void)key;
	(void)arg;
	return b->hits != 0;
}

/* Harvest ops for keys[0..n), in batches; fn for each that had hits. */
static int harvest_keys(struct kt_xdp_tags *t, const struct kt_tag_key *keys, size_t n,
			kt_xdp_tags_hit_fn fn, void *ctx)
{
	size_t i = 0, j, m;
	int ret, count = 0;

	while (i < n) {
		m = n - i < KT_TAG_OPS_BATCH ? n - i : KT_TAG_OPS_BATCH;
		for (j = 0; j < m; j++) {
			memset(&t->ops[j], 0, sizeof(t->ops[j]));
			t->ops[j].key = keys[i + j];
			t->ops[j].op = KT_TAG_OP_HARVEST;
		}
		ret = run_ops(t, (uint32_t)m);
		if (ret)
			return ret;
		for (j = 0; j < m; j++) {
			if (t->ops[j].result != KT_TAG_OP_DONE || !t->ops[j].hits)
				continue;
			fn(ctx, &t->ops[j].key, t->ops[j].hits);
			count++;
		}
		i += m;
	}
	return count;
}

int kt_xdp_tags_harvest(struct kt_xdp_tags *t, kt_xdp_tags_hit_fn fn, void *ctx)
{
	struct kt_tag_key *keys = NULL;
	struct kt_xdp_stats st;
	size_t n = 0;
	int ret, got, total = 0;

	/* lost count first: a notification lost after this read is seen next time */
	ret = kt_xdp_tags_global_stats(t, &st);
	if (ret)
		return ret;
	t->npending = 0;
	t->pending_err = 0;
	ret = ring_buffer__consume(t->rb);
	if (ret < 0) {
		kt_err("xdp tags: cannot read the notification ring: %s", strerror(-ret));
		return ret;
	}
	got = harvest_keys(t, t->pending, t->npending, fn, ctx);
	if (got < 0)
		return got;
	total += got;
	if (st.notify_lost != t->lost_seen || t->pending_err) {
		ret = scan(t, has_hits, NULL, &keys, &n);
		if (ret) {
			kt_err("xdp tags: cannot scan kt_tag_buckets: %s", strerror(-ret));
			return ret;
		}
		got = harvest_keys(t, keys, n, fn, ctx);
		free(keys);
		if (got < 0)
			return got;
		total += got;
		t->lost_seen = st.notify_lost;
	}
	return total;
}

int kt_xdp_tags_debit(struct kt_xdp_tags *t, const struct kt_tag_key *keys, const uint64_t *hits,
		      size_t n)
{
	struct kt_tag_policy pol;
	size_t i = 0, j, m;
	uint32_t k;
	int ret, count = 0;

	while (i < n) {
		m = n - i < KT_TAG_OPS_BATCH ? n - i : KT_TAG_OPS_BATCH;
		for (j = 0; j < m; j++) {
			memset(&t->ops[j], 0, sizeof(t->ops[j]));
			t->ops[j].key = keys[i + j];
			t->ops[j].hits = hits[i + j];
			t->ops[j].op = KT_TAG_OP_DEBIT;
		}
		ret = run_ops(t, (uint32_t)m);
		if (ret)
			return ret;
		/* the absent ones again, with the policy a packet would give them */
		for (j = 0, k = 0; j < m; j++) {
			if (t->ops[j].result == KT_TAG_OP_DONE) {
				count++;
				continue;
			}
			if (t->ops[j].result != KT_TAG_OP_ABSENT ||
			    kt_xdp_tags_policy_of(t, &keys[i + j], &pol) != 0)
				continue;
			t->ops[k] = t->ops[j];
			t->ops[k].interval_fp = pol.interval_fp;
			t->ops[k].burst = pol.burst;
			t->ops[k].flags = pol.flags | KT_TAG_OP_MAKE;
			t->ops[k].result = 0;
			k++;
		}
		ret = run_ops(t, k);
		if (ret)
			return ret;
		for (j = 0; j < k; j++)
			count += t->ops[j].result == KT_TAG_OP_DONE;
		i += m;
	}
	return count;
}

struct limit_sel {
	uint32_t tag_limit;
};

static int of_limit(const struct kt_tag_key *key, const struct kt_tag_bucket *b, void *arg)
{
	const struct limit_sel *s = arg;

	(void)b;
	return s->tag_limit == UINT32_MAX || key->tag_limit == s->tag_limit;
}

int kt_xdp_tags_set_buckets(struct kt_xdp_tags *t, uint32_t tag_limit)
{
	struct limit_sel sel = { .tag_limit = tag_limit };
	struct kt_tag_key *keys = NULL;
	struct kt_tag_policy pol;
	size_t n = 0, i = 0, j;
	uint32_t m;
	int ret, count = 0;

	ret = scan(t, of_limit, &sel, &keys, &n);
	if (ret) {
		kt_err("xdp tags: cannot scan kt_tag_buckets: %s", strerror(-ret));
		return ret;
	}
	while (i < n) {
		for (m = 0; i < n && m < KT_TAG_OPS_BATCH; i++) {
			ret = kt_xdp_tags_policy_of(t, &keys[i], &pol);
			if (ret == -ENOENT) {
				/* the limit is gone: its buckets go too */
				bpf_map_delete_elem(bpf_map__fd(t->skel->maps.kt_tag_buckets), &keys[i]);
				continue;
			}
			if (ret)
				goto out;
			memset(&t->ops[m], 0, sizeof(t->ops[m]));
			t->ops[m].key = keys[i];
			t->ops[m].op = KT_TAG_OP_SET;
			t->ops[m].interval_fp = pol.interval_fp;
			t->ops[m].burst = pol.burst;
			t->ops[m].flags = pol.flags;
			m++;
		}
		ret = run_ops(t, m);
		if (ret)
			goto out;
		for (j = 0; j < m; j++)
			count += t->ops[j].result == KT_TAG_OP_DONE;
	}
	ret = count;
out:
	free(keys);
	return ret;
}

int kt_xdp_tags_stats(struct kt_xdp_tags *t, uint32_t tag_limit, struct kt_xdp_tags_stats *out)
{
	int fd = bpf_map__fd(t->skel->maps.kt_tag_buckets);
	struct kt_tag_key key, next;
	struct kt_tag_bucket b;
	size_t budget = 2 * (size_t)t->max_tags + 16;
	const void *prev = NULL;

	memset(out, 0, sizeof(*out));
	while (budget-- > 0 && bpf_map_get_next_key(fd, prev, &next) == 0) {
		key = next;
		prev = &key;
		if (key.tag_limit != tag_limit || bpf_map_lookup_elem(fd, &key, &b) < 0)
			continue;
		out->buckets++;
		out->admitted += b.admitted + b.hits; /* hits: not yet harvested */
		out->dropped += b.dropped;
	}
	return 0;
}

int kt_xdp_tags_global_stats(struct kt_xdp_tags *t, struct kt_xdp_stats *out)
{
	__u32 zero = 0;
	int ret;

	if (bpf_map_lookup_elem(bpf_map__fd(t->skel->maps.kt_xdp_stats), &zero, out) < 0) {
		ret = -errno;
		kt_err("xdp tags: cannot read kt_xdp_stats: %s", strerror(-ret));
		return ret;
	}
	return 0;
}
