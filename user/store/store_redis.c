/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Redis store client: see store.h for keys, consensus and failure handling. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "store/store_int.h"

/* Per limit the scripts take these KEYS, all under the hash tag {L} (store.h):
 * hb, size, ramp, fb, lapsed, counted, hist, sizes, meta, grant, dem; then
 * wt for a weighted limit, dc0..dc7 for one with priority classes (both
 * always for leave), and N_SLOT_KEYS more, claim, seen and sdem, for an
 * in-flight limit's heartbeat. Only then: in a slot that migrates, a script
 * whose keys are not all on one side is answered TRYAGAIN, and other limits
 * never make these. */
#define N_KEYS 11
#define N_WEIGHT_KEYS 1
#define N_CLASS_KEYS KT_STORE_MAX_CLASSES
#define N_SLOT_KEYS 3
#define N_ALL_KEYS (N_KEYS + N_WEIGHT_KEYS + N_CLASS_KEYS + N_SLOT_KEYS)
static const char *const key_names[N_ALL_KEYS] = {
	"hb", "size", "ramp", "fb", "lapsed", "counted", "hist", "sizes", "meta", "grant", "dem",
	"wt",
	"dc0", "dc1", "dc2", "dc3", "dc4", "dc5", "dc6", "dc7",
	"claim", "seen", "sdem",
};
_Static_assert(KT_STORE_MAX_CLASSES == 8, "a dc key per class in key_names");

enum key_set {
	KEYS_WEIGHT = 1 << 0,
	KEYS_CLASSES = 1 << 1,
	KEYS_SLOTS = 1 << 2,
};

/* The scripts, one file each in user/store/lua/ (what each does, its KEYS and
 * ARGV are in its header comment): heartbeat.lua and leave.lua include
 * common.lua, the counters they share. The build turns them into the
 * KT_LUA_* string macros of $(BUILD)/gen/kt_lua.h (scripts/lua-embed.sh:
 * comments dropped; it asserts that the numbers marked --[[N_KEYS]],
 * --[[KT_STORE_MAX_POOL]] and --[[KT_STORE_EXPIRE_FACTOR]] there are these
 * constants). */
#include "kt_lua.h"

static const char hb_script[] = KT_LUA_HEARTBEAT;
static const char leave_script[] = KT_LUA_LEAVE;
static const char permit_script[] = KT_LUA_PERMIT;
static const char tags_script[] = KT_LUA_TAGS;
static const char node_script[] = KT_LUA_NODE;

const char *const rs_scripts[N_SCRIPTS] = { hb_script, leave_script, permit_script, tags_script, node_script };

/* The keys of one limit in the scripts' order: N_KEYS, then wt, the dc keys
 * and the slot keys as `set` asks. Returns how many. */
static int arg_keys(struct args *a, const char *prefix, const char *limit, unsigned set)
{
	int n = 0;

	for (int k = 0; k < N_ALL_KEYS; k++) {
		if ((k >= N_KEYS && k < N_KEYS + N_WEIGHT_KEYS && !(set & KEYS_WEIGHT)) ||
		    (k >= N_KEYS + N_WEIGHT_KEYS && k < N_KEYS + N_WEIGHT_KEYS + N_CLASS_KEYS &&
		     !(set & KEYS_CLASSES)) ||
		    (k >= N_KEYS + N_WEIGHT_KEYS + N_CLASS_KEYS && !(set & KEYS_SLOTS)))
			continue;
		if (a)
			rs_arg_fmt(a, "%s:pool:{%s}:%s", prefix, limit, key_names[k]);
		n++;
	}
	return n;
}

/* The keys a heartbeat of q names. */
/* Node leases' keys (store.h "Node leases"): the change feed, and this
 * node's index of its members (leave.lua takes "P:node:{-}:limits", an
 * empty one, when the node has none). */
static void arg_feed(const struct kt_store *s, struct args *a)
{
	rs_arg_fmt(a, "%s:feed", s->prefix);
}

static void arg_node_index(const struct kt_store *s, struct args *a)
{
	rs_arg_fmt(a, "%s:node:{%s}:limits", s->prefix, s->leases == KT_LEASES_NODE && s->node ? s->node : "-");
}

static unsigned req_keys(const struct kt_pool_req *q)
{
	return (q->weighted ? KEYS_WEIGHT : 0) | (q->pool_rate > 0 && q->n_classes > 0 ? KEYS_CLASSES : 0) |
	       (q->slots_node ? KEYS_SLOTS : 0);
}

/* ---- validation ---- */

static bool valid_limit(const char *l)
{
	size_t n;

	if (!l)
		return false;
	n = strlen(l);
	if (n < 1 || n >= KT_NAME_LEN)
		return false;
	for (size_t i = 0; i < n; i++) {
		char ch = l[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
		      ch == '_' || ch == '.' || ch == '-' || ch == '@' /* a group's limit */))
			return false;
	}
	return true;
}

/* ---- the transport (store_int.h) ---- */

/* Start of every public call: set the budget, connect if needed, honour back-off. */
static int begin(struct kt_store *s, char *err, size_t errlen)
{
	uint64_t now = rs_mono_ns();

	s->deadline_ns = now + rs_budget_ms(s) * 1000000ULL;
	return s->t->begin(s, now, err, errlen);
}

/* The route of a limit's keys (all under its hash tag {L}). */
static int limit_route(const struct kt_store *s, const char *limit)
{
	char key[KT_STORE_PREFIX_MAX + KT_NAME_LEN + 16];

	snprintf(key, sizeof(key), "%s:pool:{%s}:hb", s->prefix, limit);
	return s->t->route(s, key);
}

/* One script on one limit's keys. *out: the reply (never an error reply)
 * when 0 is returned. */
static int limit_script(struct kt_store *s, int script, const char *limit, struct args *a,
			const char *what, redisReply **out, char *err, size_t errlen)
{
	struct kt_rjob jb = { .slot = limit_route(s, limit), .script = script, .a = a, .ask = -1 };

	return rs_run_one(s, &jb, what, out, err, errlen);
}

/* One plain command touching key; *out is never an error reply. */
static int command(struct kt_store *s, const char *key, int argc, const char **argv, const char *what,
		   redisReply **out, char *err, size_t errlen)
{
	struct args a = { 0 };
	struct kt_rjob jb = { .slot = s->t->route(s, key), .script = -1, .a = &a, .ask = -1 };
	int ret;

	*out = NULL;
	if (rs_args_init(&a, argc)) {
		rs_args_free(&a);
		rs_seterr(s, err, errlen, "%s: out of memory", what);
		return -ENOMEM;
	}
	for (int i = 0; i < argc; i++)
		rs_arg_ref(&a, argv[i]);
	ret = rs_run_one(s, &jb, what, out, err, errlen);
	rs_args_free(&a);
	return ret;
}

static int check_req(struct kt_store *s, const struct kt_pool_req *q, int idx, char *err, size_t errlen)
{
	if (!valid_limit(q->limit)) {
		rs_seterr(s, err, errlen, "heartbeat: request %d: invalid limit name", idx);
		return -EINVAL;
	}
	if (q->n_members < 0 || q->n_members > KT_STORE_MAX_POOL || (q->n_members && !q->members)) {
		rs_seterr(s, err, errlen, "heartbeat: limit %s: bad member count %d", q->limit, q->n_members);
		return -EINVAL;
	}
	if (q->stale_ms < 1 || q->stale_ms > KT_STORE_STALE_MAX_MS) {
		rs_seterr(s, err, errlen, "heartbeat: limit %s: stale_ms %llu out of 1..%llu", q->limit,
			  (unsigned long long)q->stale_ms, (unsigned long long)KT_STORE_STALE_MAX_MS);
		return -EINVAL;
	}
	if (q->hold_ms > KT_STORE_STALE_MAX_MS || !isfinite(q->fallback_rate) || q->fallback_rate < 0 ||
	    q->fallback_rate > 1e15) {
		rs_seterr(s, err, errlen, "heartbeat: limit %s: hold %llu ms or fallback rate %g out of range",
			  q->limit, (unsigned long long)q->hold_ms, q->fallback_rate);
		return -EINVAL;
	}
	if (!isfinite(q->pool_rate) || q->pool_rate < 0 || q->pool_rate > 1e15 || !isfinite(q->floor_rate) ||
	    q->floor_rate < 0 || q->floor_rate > 1e15 || q->recompute_ms > KT_STORE_STALE_MAX_MS ||
	    (q->pool_rate > 0 && q->n_members > 0 && !q->grants)) {
		rs_seterr(s, err, errlen, "heartbeat: limit %s: pool rate %g, floor %g, recompute %llu ms or grants "
			  "out of range", q->limit, q->pool_rate, q->floor_rate,
			  (unsigned long long)q->recompute_ms);
		return -EINVAL;
	}
	if (q->n_classes != 0 &&
	    ((!q->weighted && !q->slots_node) || q->n_classes < 2 || q->n_classes > KT_STORE_MAX_CLASSES)) {
		rs_seterr(s, err, errlen,
			  "heartbeat: limit %s: %d classes: give 2..%d on a weighted or in-flight limit",
			  q->limit, q->n_classes, KT_STORE_MAX_CLASSES);
		return -EINVAL;
	}
	for (int k = 0; q->slots_node && k < q->n_classes; k++) {
		if (q->slots_class_demand[k] < 0 || q->slots_class_demand[k] > KT_STORE_MAX_SLOTS ||
		    !(q->slots_class_weight[k] >= 0 && q->slots_class_weight[k] <= KT_STORE_MAX_NODE_WEIGHT)) {
			rs_seterr(s, err, errlen, "heartbeat: limit %s: class %d: demand %lld or weight %g out of range",
				  q->limit, k, (long long)q->slots_class_demand[k], q->slots_class_weight[k]);
			return -EINVAL;
		}
	}
	for (int k = 0; k < q->n_classes; k++) {
		if (!(q->class_floor[k] >= 0 && q->class_floor[k] <= q->class_ceiling[k] &&
		      q->class_ceiling[k] <= 1e15)) {
			rs_seterr(s, err, errlen, "heartbeat: limit %s: class %d: floor %g, ceiling %g out of range",
				  q->limit, k, q->class_floor[k], q->class_ceiling[k]);
			return -EINVAL;
		}
	}
	if (q->slots_node &&
	    (!rs_valid_token(q->slots_node, KT_STORE_ID_MAX) || q->slots_held < 0 ||
	     q->slots_held > KT_STORE_MAX_SLOTS || q->slots_pool < 0 || q->slots_pool > KT_STORE_MAX_SLOTS ||
	     q->slots_cap < -1 || q->slots_cap > KT_STORE_MAX_SLOTS || q->slots_demand < -1 ||
	     q->slots_demand > KT_STORE_MAX_SLOTS || q->pool_rate > 0 ||
	     !(q->slots_weight >= 0 && q->slots_weight <= KT_STORE_MAX_NODE_WEIGHT))) {
		rs_seterr(s, err, errlen, "heartbeat: limit %s: in-flight node name, held %lld or pool %lld out of range",
			  q->limit, (long long)q->slots_held, (long long)q->slots_pool);
		return -EINVAL;
	}
	if (q->save_ramp >= 0 &&
	    (!isfinite(q->save_ramp) || q->save_ramp > 1e15 || q->ramp_ttl_ms < 1 ||
	     q->ramp_ttl_ms > KT_STORE_STALE_MAX_MS * 365)) {
		rs_seterr(s, err, errlen, "heartbeat: limit %s: ramp %g or ttl %llu ms out of range", q->limit,
			  q->save_ramp, (unsigned long long)q->ramp_ttl_ms);
		return -EINVAL;
	}
	for (int i = 0; i < q->n_members; i++) {
		const struct kt_pool_member *m = &q->members[i];

		if (!rs_valid_token(m->id, KT_STORE_ID_MAX)) {
			rs_seterr(s, err, errlen, "heartbeat: limit %s: member %d: id must be 1..%d printable characters",
				  q->limit, i, KT_STORE_ID_MAX);
			return -EINVAL;
		}
		if (m->reported_size < 0 || m->reported_size > KT_STORE_MAX_POOL) {
			rs_seterr(s, err, errlen, "heartbeat: limit %s: member %s: reported size %d out of 0..%d",
				  q->limit, m->id, m->reported_size, KT_STORE_MAX_POOL);
			return -EINVAL;
		}
		if (q->pool_rate > 0 && m->demand != KT_POOL_DEMAND_DORMANT &&
		    (!isfinite(m->demand) || m->demand < 0 || m->demand > 1e15)) {
			rs_seterr(s, err, errlen, "heartbeat: limit %s: member %s: demand %g out of 0..1e15 (or -1, dormant)",
				  q->limit, m->id, m->demand);
			return -EINVAL;
		}
		if (q->n_classes > 0 && (m->klass < 0 || m->klass >= q->n_classes)) {
			rs_seterr(s, err, errlen, "heartbeat: limit %s: member %s: class %d out of 0..%d",
				  q->limit, m->id, m->klass, q->n_classes - 1);
			return -EINVAL;
		}
		if (q->pool_rate > 0 && !(m->weight >= 0 && m->weight <= KT_STORE_MAX_WEIGHT)) {
			rs_seterr(s, err, errlen, "heartbeat: limit %s: member %s: weight %g out of (0, %d]",
				  q->limit, m->id, m->weight, KT_STORE_MAX_WEIGHT);
			return -EINVAL;
		}
	}
	return 0;
}

/* A rate the script formatted with %.17g. */
static bool parse_rate(const redisReply *r, double *out)
{
	char *end;
	double v;

	if (r->type != REDIS_REPLY_STRING || r->len < 1 || r->len > 40)
		return false;
	errno = 0;
	v = strtod(r->str, &end);
	if (errno || end != r->str + r->len || !isfinite(v) || v < 0 || v > 1e15)
		return false;
	*out = v;
	return true;
}

/* A limit's answer (heartbeat.lua): agree, size, live, reserved; an
 * in-flight limit's adds its grant and the others' claims; a share: demand
 * limit's adds granted, level, the grants and the weights summed, and with
 * classes each class's part and weights. */
enum { ANSWER_EQUAL = 4, ANSWER_SLOTS = 6, ANSWER_SLOTS_CLASSES = 7, ANSWER_SHARE = 8, ANSWER_CLASSES = 9 };

/* The demand part of an answer: granted, level, one grant per member, the
 * weights summed. The grants are written only once all of them parsed. */
static const char *parse_share(const redisReply *e, const struct kt_pool_req *q, struct kt_pool_answer *a)
{
	const redisReply *g = e->element[6];
	double lvl;
	char *end;

	if (!parse_rate(e->element[4], &a->granted))
		return "granted rate not a finite number >= 0";
	if (e->element[5]->type != REDIS_REPLY_STRING || e->element[5]->len > 40)
		return "level not a number";
	errno = 0;
	lvl = strtod(e->element[5]->str, &end);
	if (errno || end != e->element[5]->str + e->element[5]->len || !isfinite(lvl) ||
	    (lvl < 0 && lvl != -1) || lvl > 1e15)
		return "level not a number";
	a->level = lvl < 0 ? INFINITY : lvl;
	if (!parse_rate(e->element[7], &a->weights))
		return "weights not a finite number >= 0";
	if (g->type != REDIS_REPLY_ARRAY || g->elements != (size_t)q->n_members)
		return "grants not an array of one per member";
	if (q->n_classes > 0) {
		const redisReply *c = e->element[8];

		if (c->type != REDIS_REPLY_ARRAY || c->elements != 2 * (size_t)q->n_classes)
			return "class parts not an array of two per class";
		for (size_t j = 0; j < c->elements; j++) {
			double v;

			if (!parse_rate(c->element[j], &v))
				return "class part not a finite number >= 0";
		}
		for (int k = 0; k < q->n_classes; k++) {
			parse_rate(c->element[2 * k], &a->class_part[k]);
			parse_rate(c->element[2 * k + 1], &a->class_weights[k]);
		}
	}
	for (size_t j = 0; j < g->elements; j++) {
		double v;

		if (!parse_rate(g->element[j], &v))
			return "grant not a finite number >= 0";
	}
	for (size_t j = 0; j < g->elements; j++)
		parse_rate(g->element[j], &q->grants[j]);
	return NULL;
}

/* An in-flight answer's parts per class (element 7). */
static const char *parse_slot_parts(const redisReply *c, const struct kt_pool_req *q, struct kt_pool_answer *a)
{
	double v[KT_STORE_MAX_CLASSES];

	if (c->type != REDIS_REPLY_ARRAY || c->elements != (size_t)q->n_classes)
		return "slot parts not an array of one per class";
	for (int k = 0; k < q->n_classes; k++)
		if (!parse_rate(c->element[k], &v[k]) || v[k] > (double)KT_STORE_MAX_SLOTS)
			return "slot part not a number in range";
	memcpy(a->slots_class_part, v, sizeof(double) * (size_t)q->n_classes);
	return NULL;
}

/* What the memo says of one request: its digest, and the answer its last
 * heartbeat got (has: one the steady path may repeat). Found once per
 * heartbeat: build_hb sends it as prev, parse_answers takes it for a 1. */
struct hb_prev {
	uint64_t digest;
	bool has;
	bool joining; /* not answered yet: sent under the join budget */
	bool doubted; /* quiet, but its last call failed: news to send */
	bool news;    /* quiet, and news: sent within the news budget, else doubted */
	bool rejoin;  /* a lapsed lease's limit left by the join budget: deferred, to join again */
	uint64_t asof_ms; /* the Redis TIME its last answer was computed at (0: none) */
	struct kt_pool_answer prev;
};

/* Why an answer's agree, size and live (each in range) to q do not hold
 * together, or NULL. */
static const char *sizes_why(const struct kt_pool_answer *a, const struct kt_pool_req *q)
{
	if (a->size < a->live)
		return "size below live count";
	if (a->agree && (a->size != a->live || a->live < 1))
		return "AGREE on a size other than the live count";
	if (q->n_members > 0 && a->live < 1)
		return "no live member right after a heartbeat";
	return NULL;
}

/* "agree size live[ R][ w]" (heartbeat.lua's steady path catching up,
 * only for a node with members there; R the reserve when > 0, w when it
 * acknowledged, writing this node's sizes: *acked) to q, into a; NULL, or
 * why not. */
static const char *parse_caught_up(const char *str, const struct kt_pool_req *q, struct kt_pool_answer *a,
				   bool *acked)
{
	static const char *const bad = "not a consistent \"agree size live\"";
	int agree, size, live, end = 0;
	double res = 0;

	if (sscanf(str, "%1d %7d %7d%n", &agree, &size, &live, &end) != 3 || agree < 0 || agree > 1 ||
	    size > KT_STORE_MAX_POOL || live < 1)
		return bad;
	str += end;
	if (str[0] == ' ' && str[1] != 'w') {
		char *stop;

		errno = 0;
		res = strtod(str + 1, &stop);
		if (errno || stop == str + 1 || !isfinite(res) || res <= 0)
			return bad;
		str = stop;
	}
	*acked = !strcmp(str, " w");
	if (*str && !*acked)
		return bad;
	a->agree = agree;
	a->size = size;
	a->live = live;
	a->reserved = res;
	a->status = 0;
	return sizes_why(a, q);
}

static int parse_answers(struct kt_store *s, const redisReply *r, const struct kt_pool_req *reqs,
			 struct hb_prev *pv, int n, struct kt_pool_answer *ans, char *err, size_t errlen)
{
	const char *why = NULL;
	int i;

	/* the answers, then the number of commands the script ran and its TIME */
	if (r->type != REDIS_REPLY_ARRAY || r->elements != (size_t)n + 2 ||
	    !rs_int_in(r->element[n], 0, INT32_MAX) || !rs_int_in(r->element[n + 1], 1, INT64_MAX)) {
		rs_seterr(s, err, errlen,
			  "redis %s:%d: heartbeat: malformed reply: expected %d answers, a count and a time",
			  s->cur_host, s->cur_port, n);
		if (r->type != REDIS_REPLY_ARRAY)
			s->hint = KT_SERR_WRONGTYPE;
		return -EPROTO;
	}
	s->st.script_commands += (uint64_t)r->element[n]->integer;
	for (i = 0; i < n && !why; i++) {
		const redisReply *e = r->element[i];
		const struct kt_pool_req *q = &reqs[i];
		size_t want = q->pool_rate > 0 ? (q->n_classes > 0 ? ANSWER_CLASSES : ANSWER_SHARE)
			      : q->slots_node ? (q->n_classes > 0 && q->slots_demand >= 0 ? ANSWER_SLOTS_CLASSES
											: ANSWER_SLOTS)
					      : ANSWER_EQUAL;
		struct kt_pool_answer a = ans[i];

		if (e->type == REDIS_REPLY_INTEGER && e->integer == 1 && q->pool_rate <= 0 && !q->slots_node) {
			/* the steady path: the answer sent as prev still holds */
			if (!pv[i].has) {
				why = "\"unchanged\" without a previous answer";
			} else {
				a.agree = pv[i].prev.agree;
				a.size = pv[i].prev.size;
				a.live = pv[i].prev.live;
				a.reserved = pv[i].prev.reserved;
				a.status = 0;
				ans[i] = a;
				s->st.hb_steady++;
			}
		} else if (e->type == REDIS_REPLY_STRING && q->pool_rate <= 0 && !q->slots_node) {
			/* the steady path catching up: the answer that holds now */
			bool acked = false;

			why = !pv[i].has ? "an answer to catch up with without a previous one"
					 : parse_caught_up(e->str, q, &a, &acked);
			if (!why) {
				ans[i] = a;
				s->st.hb_steady++;
				if (acked)
					s->st.hb_acked++;
				else
					s->st.hb_caught_up++;
			}
		} else if (e->type != REDIS_REPLY_ARRAY || e->elements != want) {
			why = want == ANSWER_EQUAL	   ? "not an array of 4"
			      : want == ANSWER_SLOTS	   ? "not an array of 6"
			      : want == ANSWER_SLOTS_CLASSES ? "not an array of 7"
			      : want == ANSWER_SHARE	   ? "not an array of 8"
							   : "not an array of 9";
			if (e->type != REDIS_REPLY_ARRAY)
				s->hint = KT_SERR_WRONGTYPE;
		} else if (!rs_int_in(e->element[0], 0, 1) || !rs_int_in(e->element[1], 0, KT_STORE_MAX_POOL) ||
			   !rs_int_in(e->element[2], 0, KT_STORE_MAX_POOL)) {
			why = "field not an integer in range";
		} else {
			a.agree = (int)e->element[0]->integer;
			a.size = (int)e->element[1]->integer;
			a.live = (int)e->element[2]->integer;
			why = sizes_why(&a, q);
			if (!why && !parse_rate(e->element[3], &a.reserved))
				why = "reserved rate not a finite number >= 0";
			else if (!why && (want == ANSWER_SHARE || want == ANSWER_CLASSES))
				why = parse_share(e, q, &a);
			else if (!why && (want == ANSWER_SLOTS || want == ANSWER_SLOTS_CLASSES) &&
				 (!rs_int_in(e->element[4], 0, KT_STORE_MAX_SLOTS) ||
				  !rs_int_in(e->element[5], 0, KT_STORE_MAX_SLOTS)))
				why = "slots not whole numbers in range";
			else if (!why && (want == ANSWER_SLOTS || want == ANSWER_SLOTS_CLASSES) &&
				 e->element[4]->integer > q->slots_pool)
				why = "slots granted past the pool";
			else if (!why && want == ANSWER_SLOTS_CLASSES)
				why = parse_slot_parts(e->element[6], q, &a);
			if (!why && (want == ANSWER_SLOTS || want == ANSWER_SLOTS_CLASSES)) {
				a.slots_grant = e->element[4]->integer;
				a.slots_claimed = e->element[5]->integer;
			}
			if (!why) {
				a.status = 0;
				ans[i] = a;
				s->st.hb_full++;
			}
		}
	}
	if (why) {
		rs_seterr(s, err, errlen, "redis %s:%d: heartbeat: malformed reply for limit %s: %s",
			  s->cur_host, s->cur_port, reqs[i - 1].limit, why);
		return -EPROTO;
	}
	for (i = 0; i < n; i++)
		pv[i].asof_ms = (uint64_t)r->element[n + 1]->integer;
	return 0;
}

/* EVALSHA's arguments for reqs (argv[0..1] left for the command and sha). */
static int build_hb(struct kt_store *s, const struct kt_pool_req *reqs, const struct hb_prev *pv, int n,
		    struct args *a)
{
	int i, j, cap = 3;

	for (i = 0; i < n; i++)
		cap += N_ALL_KEYS + 12 + 3 * reqs[i].n_members;
	if (rs_args_init(a, cap + 4))
		return -ENOMEM;
	a->n = 2; /* EVALSHA sha */
	for (i = 0, j = 0; i < n; i++)
		j += arg_keys(NULL, s->prefix, reqs[i].limit, req_keys(&reqs[i]));
	rs_arg_fmt(a, "%d", j);
	for (i = 0; i < n; i++)
		arg_keys(a, s->prefix, reqs[i].limit, req_keys(&reqs[i]));
	/* the call's own: the feed, this node's index, the horizon and the
	 * keys' least TTL (leases: node), or none */
	if (s->mode != KT_REDIS_CLUSTER) /* member leases feed it too: a mix of both hears all */
		arg_feed(s, a);
	else
		rs_arg_ref(a, "-");
	if (s->leases == KT_LEASES_NODE) {
		arg_node_index(s, a);
		rs_arg_fmt(a, "%llu", (unsigned long long)KT_STORE_QUIET_HORIZON_MS);
		rs_arg_fmt(a, "%llu", (unsigned long long)KT_STORE_QUIET_TTL_MS);
	} else {
		rs_arg_ref(a, "-");
		rs_arg_ref(a, "0");
		rs_arg_ref(a, "0");
	}
	for (i = 0; i < n; i++) {
		const struct kt_pool_req *q = &reqs[i];

		rs_arg_fmt(a, "%llu", (unsigned long long)q->stale_ms);
		rs_arg_fmt(a, "%d", q->n_members);
		if (q->save_ramp >= 0) {
			rs_arg_fmt(a, "%.17g", q->save_ramp);
			rs_arg_fmt(a, "%llu", (unsigned long long)q->ramp_ttl_ms);
		} else {
			rs_arg_ref(a, "");
			rs_arg_ref(a, "0");
		}
		rs_arg_fmt(a, "%llu", (unsigned long long)q->hold_ms);
		if (q->fallback_rate > 0)
			rs_arg_fmt(a, "%.17g", q->fallback_rate);
		else
			rs_arg_ref(a, "0");
		if (q->pool_rate > 0) {
			rs_arg_fmt(a, "%.17g", q->pool_rate);
			rs_arg_fmt(a, "%.17g", q->floor_rate);
			rs_arg_fmt(a, "%llu", (unsigned long long)q->recompute_ms);
		} else {
			rs_arg_ref(a, "0");
			rs_arg_ref(a, "0");
			rs_arg_ref(a, "0");
		}
		/* prev: the steady path's hint (equal share only) */
		if (pv[i].has && pv[i].prev.reserved > 0)
			rs_arg_fmt(a, "%d %d %d %.17g", pv[i].prev.agree, pv[i].prev.size, pv[i].prev.live,
				   pv[i].prev.reserved);
		else if (pv[i].has)
			rs_arg_fmt(a, "%d %d %d", pv[i].prev.agree, pv[i].prev.size, pv[i].prev.live);
		else
			rs_arg_ref(a, "-");
		/* slots: an in-flight limit's claim (always the full path) */
		if (q->slots_node && q->n_classes > 0 && q->slots_demand >= 0) {
			/* and its demand and weight per class, "D0:W0,D1:W1,..." */
			char cl[KT_STORE_MAX_CLASSES * 48 + 1];
			int at = 0;

			for (int k = 0; k < q->n_classes; k++)
				at += snprintf(cl + at, sizeof(cl) - (size_t)at, "%s%lld:%.17g", k ? "," : "",
					       (long long)q->slots_class_demand[k], q->slots_class_weight[k]);
			rs_arg_fmt(a, "%s %lld %lld %lld %lld %.17g %s", q->slots_node, (long long)q->slots_held,
				   (long long)q->slots_pool, (long long)q->slots_cap,
				   (long long)q->slots_demand, q->slots_weight > 0 ? q->slots_weight : 1, cl);
		} else if (q->slots_node && q->slots_weight > 0 && q->slots_demand >= 0)
			rs_arg_fmt(a, "%s %lld %lld %lld %lld %.17g", q->slots_node, (long long)q->slots_held,
				   (long long)q->slots_pool, (long long)q->slots_cap,
				   (long long)q->slots_demand, q->slots_weight);
		else if (q->slots_node)
			rs_arg_fmt(a, "%s %lld %lld %lld %lld", q->slots_node, (long long)q->slots_held,
				   (long long)q->slots_pool, (long long)q->slots_cap,
				   (long long)q->slots_demand);
		else
			rs_arg_ref(a, "-");
		if (q->n_classes > 0) {
			char ct[KT_STORE_MAX_CLASSES * 52 + 2];
			/* weighted (names wt) 1, peers 2 (heartbeat.lua) */
			int at = snprintf(ct, sizeof(ct), "%d", (q->weighted ? 1 : 0) | (q->classes_siblings ? 2 : 0));

			for (int k = 0; k < q->n_classes; k++)
				at += snprintf(ct + at, sizeof(ct) - (size_t)at, " %.17g %.17g",
					       q->class_floor[k], q->class_ceiling[k]);
			rs_arg_fmt(a, "%s", ct);
		} else {
			rs_arg_ref(a, q->weighted ? "1" : "0");
		}
		for (j = 0; j < q->n_members; j++) {
			rs_arg_ref(a, q->members[j].id);
			rs_arg_fmt(a, "%d", q->members[j].reported_size);
			/* "D", "D W" for a weight other than 1, "D W K" with
			 * classes (heartbeat.lua) */
			if (q->pool_rate > 0 && q->weighted && q->n_classes > 0)
				rs_arg_fmt(a, "%.17g %.17g %d", q->members[j].demand,
					   q->members[j].weight > 0 ? q->members[j].weight : 1,
					   q->members[j].klass);
			else if (q->pool_rate > 0 && q->weighted && q->members[j].weight > 0 &&
				 q->members[j].weight != 1)
				rs_arg_fmt(a, "%.17g %.17g", q->members[j].demand, q->members[j].weight);
			else if (q->pool_rate > 0)
				rs_arg_fmt(a, "%.17g", q->members[j].demand);
		}
	}
	return a->oom ? -ENOMEM : 0;
}

/* A script runs alone on its Redis: every other client waits until it ends.
 * So a heartbeat's limits go in scripts of at most this many units, a limit
 * counting 1 plus its members (a limit alone may be more): the full path
 * costs about 60-100 us of Redis time a limit and 20 us a member, so a
 * script holds Redis a few milliseconds at most. They still go in one
 * pipeline: one round trip, whatever their number. */
#define HB_SCRIPT_UNITS KT_STORE_SCRIPT_UNITS

/* One heartbeat's work: the requests in route order (sub), their memo
 * (pv), their answers (sa), each one's route (slot), and the scripts of
 * one round trip (jobs, as, first: job g serves sub[first[g]..first[g+1])). */
struct hb_batch {
	struct kt_pool_req *sub;
	struct kt_pool_answer *sa;
	struct hb_prev *pv;
	int *slot;
	struct kt_rjob *jobs;
	struct args *as;
	int *first;
	int *idx;      /* sub[i] is reqs[idx[i]] */
	int failed, first_fail;
};

/* Limits i and j of a batch change places (their route stays with them:
 * both are in one route whenever this is called). */
static void hb_swap(struct hb_batch *b, int i, int j)
{
	struct kt_pool_req q = b->sub[i];
	struct kt_pool_answer a = b->sa[i];
	struct hb_prev pv = b->pv[i];
	int idx = b->idx[i];

	b->sub[i] = b->sub[j], b->sa[i] = b->sa[j], b->pv[i] = b->pv[j], b->idx[i] = b->idx[j];
	b->sub[j] = q, b->sa[j] = a, b->pv[j] = pv, b->idx[j] = idx;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A limit node.lua's inbox names, and the Redis TIME of its last change;
 * sorted by name (cmp_str: the name comes first). */
struct news {
	const char *limit;
	uint64_t at_ms;
};

/* Cluster hash slots: a route is below this (quiet limits sort after). */
#define ROUTES 16384

/* leases: node: node.lua's arguments (node.lua's header). */
static int build_node(struct kt_store *s, uint64_t stale_ms, struct args *a)
{
	if (rs_args_init(a, 12))
		return -ENOMEM;
	a->n = 2;
	rs_arg_ref(a, "3");
	rs_arg_fmt(a, "%s:nodes", s->prefix);
	arg_feed(s, a);
	rs_arg_fmt(a, "%s:node:{%s}:feed", s->prefix, s->node);
	rs_arg_ref(a, s->prefix);
	rs_arg_ref(a, s->node);
	rs_arg_fmt(a, "%llu", (unsigned long long)stale_ms);
	rs_arg_fmt(a, "%llu", (unsigned long long)s->feed_since);
	rs_arg_fmt(a, "%llu", (unsigned long long)KT_STORE_FEED_KEEP_MS);
	rs_arg_fmt(a, "%llu", (unsigned long long)KT_STORE_QUIET_TTL_MS);
	return a->oom ? -ENOMEM : 0;
}

/* Sends sub[lo..hi) in scripts of at most HB_SCRIPT_UNITS, one pipeline
 * per server, after node.lua when node is not NULL (its reply in *node_rep,
 * or its failure: then every limit of the round trip fails with it).
 * Each limit's status says how it went; -ENOMEM, else 0. */
static int hb_send(struct kt_store *s, struct hb_batch *b, int lo, int hi, struct args *node,
		   redisReply **node_rep, char *err, size_t errlen)
{
	int i, g, nj = 0, units = 0, ret;
	char e[KT_ERR_LEN];

	if (node) {
		b->jobs[nj] = (struct kt_rjob){ .slot = b->slot[lo < hi ? lo : 0], .script = SCRIPT_NODE,
						.a = node, .ask = -1 };
		b->first[nj++] = lo;
	}
	for (i = lo; i < hi; i++) {
		int u = 1 + b->sub[i].n_members;

		/* a new script per route, and within one once it holds
		 * HB_SCRIPT_UNITS (at least one limit) */
		if (i == lo || b->slot[i] != b->slot[i - 1] || units + u > HB_SCRIPT_UNITS) {
			units = 0;
			b->first[nj] = i;
			b->jobs[nj] = (struct kt_rjob){ .slot = b->slot[i], .script = SCRIPT_HB, .a = &b->as[nj],
							.ask = -1 };
			nj++;
		}
		units += u;
	}
	b->first[nj] = hi;
	for (g = node ? 1 : 0; g < nj; g++)
		if ((ret = build_hb(s, b->sub + b->first[g], b->pv + b->first[g], b->first[g + 1] - b->first[g],
				    &b->as[g])))
			goto out;
	s->st.hb_scripts += (uint64_t)(nj - (node ? 1 : 0));
	ret = s->t->run(s, b->jobs, nj, "heartbeat", err, errlen);
	if (ret == -ENOMEM)
		goto out;
	/* each script stands alone: a master down (or a bad reply from one)
	 * fails only the limits it serves; node.lua's failure fails them all */
	int node_fail = 0;

	for (g = 0; g < nj; g++) {
		int r = b->jobs[g].rep ? s->t->check(s, &b->jobs[g], "heartbeat", e, sizeof(e)) : (ret ? ret : -EIO);

		if (g == 0 && node) {
			if (!r) {
				*node_rep = b->jobs[g].rep;
				b->jobs[g].rep = NULL;
				continue;
			}
		} else if (b->jobs[g].rep && !r) {
			r = parse_answers(s, b->jobs[g].rep, b->sub + b->first[g], b->pv + b->first[g],
					  b->first[g + 1] - b->first[g], b->sa + b->first[g], e, sizeof(e));
		}
		if (r && !b->jobs[g].rep)
			snprintf(e, sizeof(e), "%s", s->last_err);
		if (g == 0 && node)
			node_fail = r;
		else if (node_fail && !r)
			r = node_fail;
		if (r) {
			if (!b->failed++)
				snprintf(err, errlen, "%s", e);
			b->first_fail = b->first_fail ? b->first_fail : r;
		}
		if (g == 0 && node)
			continue;
		for (i = b->first[g]; i < b->first[g + 1]; i++)
			b->sa[i].status = r;
	}
	ret = 0;
out:
	rs_jobs_free(b->jobs, nj);
	/* as[] serves the next round trip too: left empty */
	for (g = 0; g < nj; g++) {
		rs_args_free(&b->as[g]);
		memset(&b->as[g], 0, sizeof(b->as[g]));
	}
	memset(b->jobs, 0, sizeof(*b->jobs) * (size_t)nj);
	return ret;
}

/* node.lua's answer {now, held, changed (array, or -1: every limit),
 * commands}: 0 and *every (the lease had lapsed: send every limit), *all
 * (the inbox could not say: every limit is news), the names in *changed (the
 * reply's own strings, sorted), else -EPROTO. */
static int parse_node(struct kt_store *s, redisReply *r, uint64_t *now, bool *every, bool *all,
		      struct news **changed, int *n_changed, char *err, size_t errlen)
{
	redisReply *c;

	*changed = NULL;
	*n_changed = 0;
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 4 || !rs_int_in(r->element[0], 1, INT64_MAX) ||
	    !rs_int_in(r->element[1], 0, 1) || !rs_int_in(r->element[3], 0, INT32_MAX))
		goto bad;
	c = r->element[2];
	*now = (uint64_t)r->element[0]->integer;
	*every = r->element[1]->integer == 0;
	*all = false;
	s->st.script_commands += (uint64_t)r->element[3]->integer;
	if (c->type == REDIS_REPLY_INTEGER && c->integer == -1) {
		*all = true;
		return 0;
	}
	if (c->type != REDIS_REPLY_ARRAY || c->elements > 2 * KT_STORE_FEED_MAX || c->elements % 2)
		goto bad;
	if (c->elements) {
		*changed = calloc(c->elements / 2, sizeof(**changed));
		if (!*changed) {
			rs_seterr(s, err, errlen, "heartbeat: out of memory");
			return -ENOMEM;
		}
	}
	/* the inbox names limits this node holds, changed by other nodes, and when */
	for (size_t i = 0; i < c->elements; i += 2) {
		struct news *w = &(*changed)[(*n_changed)++];
		char *end;

		if (c->element[i]->type != REDIS_REPLY_STRING || c->element[i + 1]->type != REDIS_REPLY_STRING)
			goto bad;
		errno = 0;
		w->limit = c->element[i]->str;
		w->at_ms = strtoull(c->element[i + 1]->str, &end, 10);
		if (errno || end == c->element[i + 1]->str || *end)
			goto bad;
	}
	if (*n_changed > 1)
		qsort(*changed, (size_t)*n_changed, sizeof(**changed), cmp_str);
	s->st.feed_changes += (uint64_t)*n_changed;
	return 0;
bad:
	free(*changed);
	*changed = NULL;
	rs_seterr(s, err, errlen, "redis %s:%d: heartbeat: malformed reply of node.lua", s->cur_host, s->cur_port);
	s->hint = KT_SERR_PROTOCOL;
	return -EPROTO;
}

/* leases: node: how long a limit may stay quiet, a quarter of it less by
 * its name, so a node's limits do not all come due in one heartbeat. */
static uint64_t quiet_for_ns(const char *limit)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (const char *p = limit; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
	return (KT_STORE_QUIET_REFRESH_MS - h % (KT_STORE_QUIET_REFRESH_MS / 4)) * 1000000ULL;
}

#define BUDGET_SLOW_NS (KT_STORE_JOIN_SLOW_MS * 1000000ULL)

/* A budget cut, Redis queueing or failing: half of what went (or was to
 * go) when that is less than the budget, at least KT_STORE_JOIN_MIN_UNITS. */
static unsigned budget_cut(unsigned budget, unsigned went)
{
	budget = (went < budget ? went : budget) / 2;
	return budget < KT_STORE_JOIN_MIN_UNITS ? KT_STORE_JOIN_MIN_UNITS : budget;
}

/* The join budget after a round trip that sent limits not answered yet
 * (the first; or the second, when a lapsed lease rejoins), `joining` units
 * of them in b's [lo, hi) (store.h "The start herd"): half of those when
 * one of them failed or the round trip took longer than
 * KT_STORE_JOIN_SLOW_MS (Redis is queueing, or gone); doubled when it was
 * quick and `ndeferred` were left. */
static void join_adapt(struct kt_store *s, const struct hb_batch *b, int lo, int hi, unsigned joining,
		       int ndeferred, uint64_t took_ns)
{
	bool failed = false;
	unsigned budget = s->st.join_budget;

	for (int i = lo; i < hi; i++)
		failed |= b->pv[i].joining && b->sa[i].status != 0;
	if (failed || took_ns > BUDGET_SLOW_NS) {
		budget = budget_cut(budget, joining);
	} else if (ndeferred) {
		budget = budget < KT_STORE_JOIN_MAX_UNITS / 2 ? budget * 2 : KT_STORE_JOIN_MAX_UNITS;
	}
	s->st.join_budget = budget;
}

/* The news budget (store.h "The news budget") after a round trip of a
 * heartbeat that took took_ns: `want` units of news were sent in b's
 * [lo, hi), or are to be sent (lo == hi, after the first round trip),
 * `left` limits postponed. Slower than KT_STORE_JOIN_SLOW_MS, or failed:
 * half; quick with some left: what would have fitted in
 * KT_STORE_JOIN_SLOW_MS at that pace, between twice and 8 times as much
 * (news after a burst is mostly cheap: answers to catch up with). */
static void news_adapt(struct kt_store *s, const struct hb_batch *b, int lo, int hi, unsigned want,
		       int left, uint64_t took_ns)
{
	bool failed = false;
	uint64_t budget = s->st.news_budget;

	for (int i = lo; i < hi; i++)
		failed |= b->sa[i].status != 0;
	if (failed || took_ns > BUDGET_SLOW_NS) {
		s->st.news_budget = budget_cut(s->st.news_budget, want);
		return;
	}
	if (left) {
		uint64_t pace = (uint64_t)want * BUDGET_SLOW_NS / (took_ns ? took_ns : 1);

		budget = pace < budget * 2 ? budget * 2 : pace > budget * 8 ? budget * 8 : pace;
	}
	s->st.news_budget = budget < KT_STORE_JOIN_MAX_UNITS ? (unsigned)budget : KT_STORE_JOIN_MAX_UNITS;
}

/* A heartbeat without news: the news budget is validated only while news
 * uses it (as TCP restarts its window after idle), so a budget grown on
 * cheap catching up never sends a fleet's next burst of full calls at
 * once: at most KT_STORE_NEWS_IDLE_UNITS, grown again by news_adapt. */
static void news_idle(struct kt_store *s)
{
	if (s->st.news_budget > KT_STORE_NEWS_IDLE_UNITS)
		s->st.news_budget = KT_STORE_NEWS_IDLE_UNITS;
}

/* The limits grouped by the transport's route (cluster: by slot, a script
 * may only touch one; single: one group), then cut into scripts of at most
 * HB_SCRIPT_UNITS, one EVALSHA each, those for one server pipelined. A
 * group left unanswered, or answered with an error or a bad reply, fails
 * only its own limits (their status; the call returns KT_STORE_PARTIAL
 * while some group was answered).
 *
 * leases: node (store.h "Node leases"): node.lua goes first in the
 * pipeline; a limit whose request is what its last answer was sent for,
 * answered less than its quiet time ago (and, with a reserve, less than
 * its hold: store.h), is not sent
 * ("quiet": that answer again) unless node.lua says the node's lease had
 * lapsed (every limit goes in a second round trip), or it is news: the
 * inbox names it, or its last call failed; news goes in the second round
 * trip within the news budget, the rest quiet and doubted (store.h "The
 * news budget").
 *
 * The join budget (store.h "The start herd"): limits not answered yet go
 * in the first round trip up to the budget, in the caller's order; the
 * rest are deferred (sorted last, never sent) to the next heartbeat. */
static int heartbeat_groups(struct kt_store *s, const struct kt_pool_req *reqs, int n,
			    struct kt_pool_answer *ans, char *err, size_t errlen)
{
	struct hb_batch b = { 0 };
	int *ord = calloc((size_t)n, sizeof(*ord)), *slot = calloc((size_t)n, sizeof(*slot));
	struct hb_prev *byreq = calloc((size_t)n, sizeof(*byreq)); /* the memo, by reqs[] */
	bool lease = s->leases == KT_LEASES_NODE, every = true, all_news = false;
	struct news *changed = NULL;
	int i, k, nq = 0, nd = 0, n_changed = 0, ret = 0, nsend;
	unsigned joining = 0; /* units of limits not answered yet, sent */
	uint64_t now_ns = kt_clock_ns(), stale_ms = UINT64_MAX, since = 0, sent_ns, took_ns;
	struct args node = { 0 };
	redisReply *node_rep = NULL;

	b.sub = calloc((size_t)n, sizeof(*b.sub));
	b.sa = calloc((size_t)n, sizeof(*b.sa));
	b.pv = calloc((size_t)n, sizeof(*b.pv));
	b.slot = calloc((size_t)n, sizeof(*b.slot));
	b.jobs = calloc((size_t)n + 1, sizeof(*b.jobs));
	b.as = calloc((size_t)n + 1, sizeof(*b.as));
	b.first = calloc((size_t)n + 2, sizeof(*b.first));
	b.idx = calloc((size_t)n, sizeof(*b.idx));
	if (!b.sub || !b.sa || !b.pv || !b.slot || !b.jobs || !b.as || !b.first || !b.idx || !ord || !slot ||
	    !byreq) {
		ret = -ENOMEM;
		goto out;
	}
	if (lease && !s->node) {
		rs_seterr(s, err, errlen, "heartbeat: leases: node needs this node's name");
		ret = -EINVAL;
		goto out;
	}
	if (!s->memo)
		s->memo = kt_hbmemo_new(); /* NULL: every call takes the full path */
	/* a server reached anew (restarted, failed over) may have lost the
	 * last changes: every limit is sent once */
	if (s->feed_epoch != s->server_epoch)
		s->feed_since = 0;
	/* by route, stable; with leases: node the quiet ones last */
	for (i = 0; i < n; i++) {
		struct hb_prev *pv = &byreq[i];
		struct kt_hbmemo_hit hit;

		pv->digest = kt_hbmemo_digest(&reqs[i]);
		kt_hbmemo_lookup(s->memo, reqs[i].limit, pv->digest, &hit);
		pv->asof_ms = hit.asof_ms;
		pv->has = reqs[i].pool_rate <= 0 && !reqs[i].slots_node && hit.has;
		if (pv->has)
			pv->prev = hit.ans;
		slot[i] = limit_route(s, reqs[i].limit);
		if (!hit.joined) {
			unsigned u = 1 + (unsigned)reqs[i].n_members;

			/* at least one limit a heartbeat, whatever its size */
			if (joining && joining + u > s->st.join_budget) {
				slot[i] += 2 * ROUTES;
				nd++;
			} else {
				joining += u;
				pv->joining = true;
			}
		} else if (lease && s->feed_since && pv->has && reqs[i].save_ramp < 0 &&
			   now_ns - hit.at_ns < quiet_for_ns(reqs[i].limit) &&
			   (pv->prev.reserved == 0 ||
			    now_ns - hit.at_ns < reqs[i].hold_ms * 1000000ULL)) {
			/* a failed last call goes with the news */
			pv->doubted = !hit.confirmed;
			slot[i] += ROUTES;
			nq++;
		}
		if (reqs[i].stale_ms < stale_ms)
			stale_ms = reqs[i].stale_ms;
		/* insertion sort: n <= KT_MAX_LIMITS */
		for (k = i; k > 0 && slot[ord[k - 1]] > slot[i]; k--)
			ord[k] = ord[k - 1];
		ord[k] = i;
	}
	for (i = 0; i < n; i++) {
		b.sub[i] = reqs[ord[i]];
		b.sa[i] = ans[ord[i]];
		b.idx[i] = ord[i];
		b.slot[i] = slot[ord[i]] % ROUTES;
		b.pv[i] = byreq[ord[i]];
	}
	nsend = n - nq - nd;
	if (lease && (ret = build_node(s, stale_ms, &node)))
		goto out;
	sent_ns = kt_clock_ns();
	if ((ret = hb_send(s, &b, 0, nsend, lease ? &node : NULL, &node_rep, err, errlen)))
		goto out;
	took_ns = kt_clock_ns() - sent_ns;
	if (joining)
		join_adapt(s, &b, 0, nsend, joining, nd, took_ns);
	for (i = n - nd; i < n; i++)
		b.sa[i].status = KT_STORE_DEFERRED;
	s->st.hb_deferred += (uint64_t)nd;
	if (lease) {
		int m = nsend;

		ret = node_rep ? parse_node(s, node_rep, &since, &every, &all_news, &changed, &n_changed, err, errlen)
			       : b.first_fail ? b.first_fail : -EIO;
		if (ret == -ENOMEM)
			goto out;
		/* a failed read keeps the cursor: the next reads from it again
		 * (node.lua says "every" once it is older than the feed keeps) */
		if (!ret) {
			s->feed_since = since;
			s->feed_epoch = s->server_epoch;
			s->st.feed_at_ns = kt_clock_ns();
		}
		if (ret) {
			/* no lease renewed: the quiet limits have no answer either */
			for (i = nsend; i < n - nd; i++)
				b.sa[i].status = ret;
			b.first_fail = b.first_fail ? b.first_fail : ret;
			m = n;
		} else {
			if (every || all_news)
				s->st.feed_resyncs++;
			/* the quiet limits to send after all go first: every
			 * one (a lapsed lease: each joins again, within what
			 * the join budget leaves), or the news within the news
			 * budget */
			unsigned want = 0, units = 0, rejoining = 0;
			int left = 0, n_rejoin = 0;

			for (i = nsend; i < n - nd; i++) {
				const struct news *w = n_changed ? bsearch(&b.sub[i].limit, changed, (size_t)n_changed,
									   sizeof(*changed), cmp_str)
								 : NULL;

				/* a change from before its last answer is in that answer */
				if (w && w->at_ms < b.pv[i].asof_ms)
					w = NULL;
				b.pv[i].news = !every && (b.pv[i].doubted || all_news || w);
				want += b.pv[i].news ? 1 + (unsigned)b.sub[i].n_members : 0;
			}
			/* Redis queued the first round trip: less news now;
			 * none: the budget is as after idle (news_idle) */
			if (want && took_ns > BUDGET_SLOW_NS)
				news_adapt(s, &b, 0, 0, want, 0, took_ns);
			else if (!want && !every)
				news_idle(s);
			for (i = nsend; i < n - nd; i++) {
				unsigned u = 1 + (unsigned)b.sub[i].n_members;

				if (every) {
					if ((joining || rejoining) && joining + rejoining + u > s->st.join_budget) {
						b.pv[i].rejoin = true;
						n_rejoin++;
						continue;
					}
					rejoining += u;
					b.pv[i].joining = true;
				} else if (!b.pv[i].news) {
					continue;
				} else if (units && units + u > s->st.news_budget) {
					left++;
					continue;
				} else {
					units += u;
				}
				hb_swap(&b, i, m++);
			}
			sent_ns = kt_clock_ns();
			if (m > nsend && (ret = hb_send(s, &b, nsend, m, NULL, NULL, err, errlen)))
				goto out;
			took_ns = kt_clock_ns() - sent_ns;
			if (every && m > nsend)
				join_adapt(s, &b, nsend, m, rejoining, n_rejoin, took_ns);
			else if (m > nsend)
				news_adapt(s, &b, nsend, m, units, left, took_ns);
			s->st.hb_postponed += (uint64_t)left;
			s->st.hb_deferred += (uint64_t)n_rejoin;
			for (i = m; i < n - nd; i++) {
				/* its members lapsed: no answer until it joins again */
				if (b.pv[i].rejoin) {
					b.sa[i].status = KT_STORE_DEFERRED;
					kt_hbmemo_rejoin(s->memo, b.sub[i].limit);
					continue;
				}
				b.sa[i].agree = b.pv[i].prev.agree;
				b.sa[i].size = b.pv[i].prev.size;
				b.sa[i].live = b.pv[i].prev.live;
				b.sa[i].reserved = b.pv[i].prev.reserved;
				b.sa[i].status = 0;
			}
			s->st.hb_quiet += (uint64_t)(n - nd - m - n_rejoin);
		}
		nq = n - nd - m;
	}
	/* the answers, in the caller's order: [0, n - nd - nq) were sent,
	 * then come the quiet ones, then the deferred */
	int n_failed = 0, n_deferred = 0;

	for (i = 0; i < n; i++) {
		k = b.idx[i];
		if (!b.sa[i].status) {
			ans[k] = b.sa[i];
			/* sent and answered: joined, and with a digest the steady
			 * path can repeat (0: a demand or in-flight limit) */
			if (i < n - nd - nq) {
				kt_hbmemo_set(s->memo, b.sub[i].limit,
					      b.sub[i].pool_rate <= 0 && !b.sub[i].slots_node ? b.pv[i].digest : 0,
					      &b.sa[i], b.pv[i].asof_ms);
			} else if (b.pv[i].news) { /* quiet: news still to send */
				kt_hbmemo_doubt(s->memo, b.sub[i].limit);
			}
		} else if (b.sa[i].status == KT_STORE_DEFERRED) {
			ans[k].status = KT_STORE_DEFERRED;
			n_deferred++;
		} else {
			/* sent again next time, its answer a hint the script
			 * checks: a timeout costs no full call */
			ans[k].status = b.sa[i].status;
			kt_hbmemo_doubt(s->memo, b.sub[i].limit);
			n_failed++;
		}
	}
	/* deferred limits alone never fail a heartbeat: some were sent */
	ret = !n_failed && !n_deferred		  ? 0
	      : n_failed == n - n_deferred ? (b.first_fail ? b.first_fail : -EIO)
					   : KT_STORE_PARTIAL;
out:
	if (ret == -ENOMEM)
		rs_seterr(s, err, errlen, "heartbeat: out of memory");
	if (node_rep)
		freeReplyObject(node_rep);
	rs_args_free(&node);
	free(changed);
	free(b.sub);
	free(b.sa);
	free(b.pv);
	free(b.slot);
	free(b.jobs);
	free(b.as);
	free(b.first);
	free(b.idx);
	free(ord);
	free(slot);
	free(byreq);
	return ret;
}

static int do_heartbeat_many(struct kt_store *s, const struct kt_pool_req *reqs, int n,
			    struct kt_pool_answer *ans, char *err, size_t errlen)
{
	int i, ret;

	if (n < 1 || n > KT_MAX_LIMITS || !reqs || !ans) {
		rs_seterr(s, err, errlen, "heartbeat: %d limits, need 1..%d", n, KT_MAX_LIMITS);
		return -EINVAL;
	}
	for (i = 0; i < n; i++) {
		ret = check_req(s, &reqs[i], i, err, errlen);
		if (ret)
			return ret;
	}
	ret = begin(s, err, errlen);
	if (ret)
		return ret;
	return heartbeat_groups(s, reqs, n, ans, err, errlen);
}

int kt_store_heartbeat(struct kt_store *s, const char *limit, const struct kt_pool_member *m, int n,
		       uint64_t stale_ms, struct kt_pool_answer *ans, char *err, size_t errlen)
{
	struct kt_pool_req q = {
		.limit = limit, .members = m, .n_members = n, .stale_ms = stale_ms, .save_ramp = -1,
	};

	return kt_store_heartbeat_many(s, &q, 1, ans, err, errlen);
}

static int do_leave(struct kt_store *s, const char *limit, const char *const *ids, int n, char *err,
		   size_t errlen)
{
	struct args a = { 0 };
	redisReply *r = NULL;
	bool feed = s->mode != KT_REDIS_CLUSTER; /* the feed and node index exist */
	int i, ret;

	if (!valid_limit(limit) || n < 0 || n > KT_STORE_MAX_POOL || (n && !ids)) {
		rs_seterr(s, err, errlen, "leave: invalid limit name or %d ids", n);
		return -EINVAL;
	}
	for (i = 0; i < n; i++) {
		if (!rs_valid_token(ids[i], KT_STORE_ID_MAX)) {
			rs_seterr(s, err, errlen, "leave: limit %s: id %d must be 1..%d printable characters",
				  limit, i, KT_STORE_ID_MAX);
			return -EINVAL;
		}
	}
	if (n == 0)
		return 0;
	ret = begin(s, err, errlen);
	if (ret)
		return ret;
	kt_hbmemo_forget(s->memo, limit);
	ret = rs_args_init(&a, 5 + N_KEYS + N_WEIGHT_KEYS + N_CLASS_KEYS + n);
	if (ret)
		goto oom;
	a.n = 2;
	/* not in a cluster: the feed and this node's index too (leave.lua) */
	rs_arg_fmt(&a, "%d", N_KEYS + N_WEIGHT_KEYS + N_CLASS_KEYS + (feed ? 2 : 0));
	arg_keys(&a, s->prefix, limit, KEYS_WEIGHT | KEYS_CLASSES);
	if (feed) {
		arg_feed(s, &a);
		arg_node_index(s, &a);
	}
	for (i = 0; i < n; i++)
		rs_arg_ref(&a, ids[i]);
	if (a.oom)
		goto oom;
	ret = limit_script(s, SCRIPT_LEAVE, limit, &a, "leave", &r, err, errlen);
	if (!ret && !rs_int_in(r, 0, n)) {
		rs_seterr(s, err, errlen, "redis %s:%d: leave: malformed reply", s->cur_host, s->cur_port);
		ret = -EPROTO;
	}
	goto out;
oom:
	rs_seterr(s, err, errlen, "leave: out of memory");
	ret = -ENOMEM;
out:
	if (r)
		freeReplyObject(r);
	rs_args_free(&a);
	return ret;
}

/* Every microsecond figure the permit script can answer is below this (see
 * permit_script); now is below 2^53. */
#define PERMIT_MAX_US (1ULL << 54)

/* The permit script's reply, checked against the rule it follows: the
 * grants come first and are every apart (after a first one that may be due
 * at once), the refusals that follow all wait the same, and ahead_us is the
 * last grant's wait. out and ans are written only when all of it holds. */
static bool parse_permits(const redisReply *r, uint64_t every_us, int max_reserved, int n,
			  struct kt_permit *out, struct kt_permit_answer *ans)
{
	uint64_t max_grant_wait = ((uint64_t)max_reserved + 1) * every_us, now, ahead, w, prev = 0;
	int granted = 0;

	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 + 2 * (size_t)n)
		return false;
	for (size_t i = 0; i < r->elements; i++)
		if (!rs_int_in(r->element[i], 0, (long long)PERMIT_MAX_US - 1))
			return false;
	now = (uint64_t)r->element[0]->integer;
	ahead = (uint64_t)r->element[1]->integer;
	if (now == 0 || now >= PERMIT_MAX_US / 2)
		return false;
	for (int i = 0; i < n; i++) {
		long long g = r->element[2 + 2 * i]->integer;

		w = (uint64_t)r->element[3 + 2 * i]->integer;
		if (g == 1) {
			if (granted < i || w > max_grant_wait || (i > 0 && w != prev + every_us))
				return false;
			granted++;
		} else if (g != 0 || w == 0 || (i > granted && w != prev)) {
			return false;
		}
		prev = w;
	}
	if (granted && ahead != (uint64_t)r->element[1 + 2 * granted]->integer)
		return false;
	for (int i = 0; i < n; i++)
		out[i] = (struct kt_permit){ .granted = (int)r->element[2 + 2 * i]->integer,
					     .wait_us = (uint64_t)r->element[3 + 2 * i]->integer };
	ans->now_us = now;
	ans->ahead_us = ahead;
	return true;
}

static int do_permits(struct kt_store *s, const char *limit, uint64_t every_us, int max_reserved, int n,
		     struct kt_permit *out, struct kt_permit_answer *ans, char *err, size_t errlen)
{
	struct args a = { 0 };
	redisReply *r = NULL;
	int ret;

	if (!valid_limit(limit) || every_us < 1000 || every_us > 86400ULL * 1000000 || max_reserved < 0 ||
	    max_reserved > 100000 || n < 1 || n > KT_STORE_MAX_PERMITS || !out || !ans) {
		rs_seterr(s, err, errlen,
			  "permits: invalid limit name, every %llu us (1000..86400e6), max reserved %d "
			  "(0..100000) or %d permits (1..%d)",
			  (unsigned long long)every_us, max_reserved, n, KT_STORE_MAX_PERMITS);
		return -EINVAL;
	}
	ret = begin(s, err, errlen);
	if (ret)
		return ret;
	ret = rs_args_init(&a, 7); /* EVALSHA sha 1 key every max_reserved n */
	if (ret)
		goto oom;
	a.n = 2;
	rs_arg_ref(&a, "1");
	rs_arg_fmt(&a, "%s:strict:{%s}", s->prefix, limit);
	rs_arg_fmt(&a, "%llu", (unsigned long long)every_us);
	rs_arg_fmt(&a, "%d", max_reserved);
	rs_arg_fmt(&a, "%d", n);
	if (a.oom)
		goto oom;
	ret = limit_script(s, SCRIPT_PERMIT, limit, &a, "permits", &r, err, errlen);
	if (!ret && !parse_permits(r, every_us, max_reserved, n, out, ans)) {
		rs_seterr(s, err, errlen, "redis %s:%d: permits: malformed reply", s->cur_host, s->cur_port);
		ret = -EPROTO;
	}
	goto out;
oom:
	rs_seterr(s, err, errlen, "permits: out of memory");
	ret = -ENOMEM;
out:
	if (r)
		freeReplyObject(r);
	rs_args_free(&a);
	return ret;
}

/* "ms-seq", as Redis writes stream ids */
static bool stream_id_ok(const char *p, size_t n)
{
	size_t i = 0, d;

	if (n == 0 || n >= KT_STORE_TAG_ID_MAX)
		return false;
	for (d = 0; i < n && p[i] >= '0' && p[i] <= '9'; i++)
		d++;
	if (!d || i >= n || p[i++] != '-')
		return false;
	for (d = 0; i < n && p[i] >= '0' && p[i] <= '9'; i++)
		d++;
	return d && i == n;
}

static int do_tag_exchange(struct kt_store *s, const char *limit, const char *node, uint64_t keep_ms,
			  const char *const *chunks, const size_t *chunk_lens, int n_chunks,
			  char last_id[KT_STORE_TAG_ID_MAX], kt_store_tag_fn fn, void *ctx, int *more,
			  char *err, size_t errlen)
{
	struct args a = { 0 };
	redisReply *r = NULL;
	int ret, i;

	if (!valid_limit(limit) || !node || !rs_valid_token(node, KT_STORE_ID_MAX) || keep_ms < 1000 ||
	    keep_ms > 86400000ULL || n_chunks < 0 || n_chunks > KT_STORE_TAG_MAX_CHUNKS ||
	    (n_chunks && (!chunks || !chunk_lens)) || !last_id || !fn || !more ||
	    (last_id[0] && !stream_id_ok(last_id, strnlen(last_id, KT_STORE_TAG_ID_MAX)))) {
		rs_seterr(s, err, errlen,
			  "tag exchange: invalid limit name, node, retention %llu ms (1000..86400000), "
			  "%d chunks (0..%d) or last id",
			  (unsigned long long)keep_ms, n_chunks, KT_STORE_TAG_MAX_CHUNKS);
		return -EINVAL;
	}
	for (i = 0; i < n_chunks; i++) {
		if (!chunks[i] || chunk_lens[i] == 0 || chunk_lens[i] > KT_STORE_TAG_CHUNK_MAX) {
			rs_seterr(s, err, errlen, "tag exchange: chunk %d: 1..%d bytes", i,
				  KT_STORE_TAG_CHUNK_MAX);
			return -EINVAL;
		}
	}
	*more = 0;
	ret = begin(s, err, errlen);
	if (ret)
		return ret;
	ret = rs_args_init(&a, 8 + n_chunks); /* EVALSHA sha 1 key node last keep count chunks */
	if (ret)
		goto oom;
	a.n = 2;
	rs_arg_ref(&a, "1");
	rs_arg_fmt(&a, "%s:tags:{%s}", s->prefix, limit);
	rs_arg_ref(&a, node);
	rs_arg_ref(&a, last_id);
	rs_arg_fmt(&a, "%llu", (unsigned long long)keep_ms);
	rs_arg_fmt(&a, "%d", KT_STORE_TAG_READ_MAX);
	if (a.oom)
		goto oom;
	for (i = 0; i < n_chunks; i++) {
		a.v[a.n] = chunks[i];
		a.len[a.n++] = chunk_lens[i];
	}
	ret = limit_script(s, SCRIPT_TAGS, limit, &a, "tag exchange", &r, err, errlen);
	if (ret)
		goto out;
	if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
	    r->elements > 2 + (size_t)KT_STORE_TAG_READ_MAX ||
	    r->element[0]->type != REDIS_REPLY_STRING ||
	    !stream_id_ok(r->element[0]->str, r->element[0]->len) || !rs_int_in(r->element[1], 0, 1)) {
		rs_seterr(s, err, errlen, "redis %s:%d: tag exchange: malformed reply", s->cur_host, s->cur_port);
		ret = -EPROTO;
		goto out;
	}
	for (i = 2; i < (int)r->elements; i++) {
		if (r->element[i]->type != REDIS_REPLY_STRING) {
			rs_seterr(s, err, errlen, "redis %s:%d: tag exchange: entry %d is not a string",
				  s->cur_host, s->cur_port, i - 2);
			ret = -EPROTO;
			goto out;
		}
	}
	for (i = 2; i < (int)r->elements; i++)
		fn(ctx, r->element[i]->str, r->element[i]->len);
	memcpy(last_id, r->element[0]->str, r->element[0]->len);
	last_id[r->element[0]->len] = 0;
	*more = (int)r->element[1]->integer;
	goto out;
oom:
	rs_seterr(s, err, errlen, "tag exchange: out of memory");
	ret = -ENOMEM;
out:
	if (r)
		freeReplyObject(r);
	rs_args_free(&a);
	return ret;
}

static int do_save_ramp(struct kt_store *s, const char *limit, double rate, uint64_t ttl_ms, char *err,
		       size_t errlen)
{
	char key[KT_STORE_PREFIX_MAX + KT_NAME_LEN + 16], val[32], ttl[24];
	const char *argv[5] = { "SET", key, val, "PX", ttl };
	redisReply *r = NULL;
	int ret;

	if (!valid_limit(limit) || !isfinite(rate) || rate < 0 || rate > 1e15 || ttl_ms < 1 ||
	    ttl_ms > KT_STORE_STALE_MAX_MS * 365) {
		rs_seterr(s, err, errlen, "save ramp: invalid limit name, rate %g or ttl %llu ms", rate,
			  (unsigned long long)ttl_ms);
		return -EINVAL;
	}
	ret = begin(s, err, errlen);
	if (ret)
		return ret;
	snprintf(key, sizeof(key), "%s:pool:{%s}:ramp", s->prefix, limit);
	snprintf(val, sizeof(val), "%.17g", rate);
	snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)ttl_ms);
	ret = command(s, key, 5, argv, "save ramp", &r, err, errlen);
	if (!ret && !rs_is_ok(r)) {
		rs_seterr(s, err, errlen, "redis %s:%d: save ramp: malformed reply to SET", s->cur_host,
			  s->cur_port);
		ret = -EPROTO;
	}
	if (r)
		freeReplyObject(r);
	return ret;
}

static int do_load_ramp(struct kt_store *s, const char *limit, double *rate, char *err, size_t errlen)
{
	char key[KT_STORE_PREFIX_MAX + KT_NAME_LEN + 16], *end;
	const char *argv[2] = { "GET", key };
	redisReply *r = NULL;
	double v;
	int ret;

	*rate = -1;
	if (!valid_limit(limit)) {
		rs_seterr(s, err, errlen, "load ramp: invalid limit name");
		return -EINVAL;
	}
	ret = begin(s, err, errlen);
	if (ret)
		return ret;
	snprintf(key, sizeof(key), "%s:pool:{%s}:ramp", s->prefix, limit);
	ret = command(s, key, 2, argv, "load ramp", &r, err, errlen);
	if (ret)
		return ret;
	if (r->type == REDIS_REPLY_NIL)
		goto out;
	ret = -EPROTO;
	if (r->type != REDIS_REPLY_STRING || r->len == 0 || r->len > 31 || strlen(r->str) != r->len)
		goto bad;
	errno = 0;
	v = strtod(r->str, &end);
	if (errno || *end || !isfinite(v) || v < 0 || v > 1e15)
		goto bad;
	*rate = v;
	ret = 0;
	goto out;
bad:
	rs_seterr(s, err, errlen, "redis %s:%d: load ramp: malformed value in %s", s->cur_host, s->cur_port,
		  key);
out:
	freeReplyObject(r);
	return ret;
}

static int do_ping(struct kt_store *s, char *err, size_t errlen)
{
	int ret = begin(s, err, errlen);

	return ret ? ret : s->t->ping(s, err, errlen);
}

enum kt_store_state kt_store_state(const struct kt_store *s, uint64_t *since_ns, uint64_t *next_retry_ns)
{
	if (since_ns)
		*since_ns = s->state == KT_STORE_IDLE ? 0 : s->since_ns;
	if (next_retry_ns)
		*next_retry_ns = s->state == KT_STORE_DOWN ? s->next_retry_ns : 0;
	return s->state;
}

int kt_store_connected(const struct kt_store *s)
{
	return s->t->connected(s);
}

const char *kt_store_state_name(enum kt_store_state st)
{
	switch (st) {
	case KT_STORE_IDLE:
		return "idle";
	case KT_STORE_UP:
		return "up";
	case KT_STORE_DOWN:
		return "down";
	case KT_STORE_FAILING:
		return "failing";
	}
	return "?";
}

const char *kt_store_endpoint(const struct kt_store *s, char *buf, size_t len)
{
	if (!s->t->endpoint(s, buf, len) && len)
		buf[0] = 0;
	return buf;
}

const char *kt_store_last_error(const struct kt_store *s)
{
	return s->last_err;
}

void kt_store_get_stats(const struct kt_store *s, struct kt_store_stats *st)
{
	*st = s->st;
	st->lat = (struct kt_store_latency){
		.samples = s->rtt_n,
		.p50_us = rs_rtt_pct_us(s, 50),
		.p99_us = rs_rtt_pct_us(s, 99),
		.timeout_ms = rs_step_timeout_ms(s),
		.budget_ms = rs_budget_ms(s),
		.fixed = s->fixed_timeout_ms != 0,
	};
}

/* ---- errors by kind; the public calls ---- */

static enum kt_store_err_kind kind_of(const struct kt_store *s, int ret)
{
	if (strstr(s->last_err, "oversized"))
		return KT_SERR_OVERSIZED; /* rconn's bound, whatever errno carried it */
	if (s->hint)
		return s->hint;
	if (ret == -EACCES)
		return KT_SERR_AUTH;
	if (strstr(s->last_err, "TLS"))
		return KT_SERR_TLS;
	switch (ret) {
	case -ETIMEDOUT:
		return KT_SERR_TIMEOUT;
	case -EMSGSIZE:
		return KT_SERR_OVERSIZED;
	case -EPROTO:
		return KT_SERR_PROTOCOL;
	case -EIO:
	case -EROFS:
		return KT_SERR_ERR;
	default:
		return KT_SERR_CONNECT;
	}
}

/* Every public call ends here. Only an answered heartbeat ends an episode
 * and makes the store UP; a connection that answers with errors is FAILING. */
static int track(struct kt_store *s, int ret, bool heartbeat)
{
	struct kt_store_errors *e = &s->errs;
	uint64_t now = rs_mono_ns();
	enum kt_store_err_kind k;

	if (ret == 0) {
		if (heartbeat) {
			e->since_ns = 0;
			e->episode_kinds = 0;
			if (s->state != KT_STORE_UP) {
				s->state = KT_STORE_UP;
				s->since_ns = now;
			}
		}
		return ret;
	}
	/* backing off, a caller's mistake, or out of memory: nothing new was asked */
	if (ret == -EAGAIN || ret == -EINVAL || ret == -ENOMEM)
		return ret;
	k = kind_of(s, ret);
	e->kind = k;
	snprintf(e->text, sizeof(e->text), "%s", s->last_err);
	e->count[k]++;
	e->last_ns = now;
	if (!e->since_ns)
		e->since_ns = now;
	e->episode_kinds |= 1u << k;
	if (ret < 0 && (s->state == KT_STORE_UP || s->state == KT_STORE_IDLE)) {
		s->state = KT_STORE_FAILING;
		s->since_ns = now;
	}
	return ret;
}

int kt_store_heartbeat_many(struct kt_store *s, const struct kt_pool_req *reqs, int n,
			    struct kt_pool_answer *ans, char *err, size_t errlen)
{
	s->hint = KT_SERR_NONE;
	return track(s, do_heartbeat_many(s, reqs, n, ans, err, errlen), true);
}

int kt_store_leave(struct kt_store *s, const char *limit, const char *const *ids, int n, char *err,
		   size_t errlen)
{
	s->hint = KT_SERR_NONE;
	return track(s, do_leave(s, limit, ids, n, err, errlen), false);
}

int kt_store_save_ramp(struct kt_store *s, const char *limit, double rate, uint64_t ttl_ms, char *err,
		       size_t errlen)
{
	s->hint = KT_SERR_NONE;
	return track(s, do_save_ramp(s, limit, rate, ttl_ms, err, errlen), false);
}

int kt_store_load_ramp(struct kt_store *s, const char *limit, double *rate, char *err, size_t errlen)
{
	s->hint = KT_SERR_NONE;
	return track(s, do_load_ramp(s, limit, rate, err, errlen), false);
}

int kt_store_permits(struct kt_store *s, const char *limit, uint64_t every_us, int max_reserved, int n,
		     struct kt_permit *out, struct kt_permit_answer *ans, char *err, size_t errlen)
{
	s->hint = KT_SERR_NONE;
	return track(s, do_permits(s, limit, every_us, max_reserved, n, out, ans, err, errlen), false);
}

int kt_store_tag_exchange(struct kt_store *s, const char *limit, const char *node, uint64_t keep_ms,
			  const char *const *chunks, const size_t *chunk_lens, int n_chunks,
			  char last_id[KT_STORE_TAG_ID_MAX], kt_store_tag_fn fn, void *ctx, int *more,
			  char *err, size_t errlen)
{
	s->hint = KT_SERR_NONE;
	return track(s, do_tag_exchange(s, limit, node, keep_ms, chunks, chunk_lens, n_chunks, last_id, fn,
					ctx, more, err, errlen),
		     false);
}

int kt_store_ping(struct kt_store *s, char *err, size_t errlen)
{
	s->hint = KT_SERR_NONE;
	return track(s, do_ping(s, err, errlen), false);
}

void kt_store_get_errors(const struct kt_store *s, struct kt_store_errors *e)
{
	*e = s->errs;
}

const char *kt_store_err_kind_name(enum kt_store_err_kind k)
{
	static const char *const names[KT_SERR_KINDS] = {
		"none", "connect", "auth", "tls", "timeout", "protocol", "wrongtype", "err", "noscript",
		"oversized",
	};

	return k >= 0 && k < KT_SERR_KINDS ? names[k] : "?";
}

