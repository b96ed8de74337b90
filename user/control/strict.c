/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The strict controller (strict.h): permits from the store into the
 * strict buckets, one at a time per bucket. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include "kernel/bucket.h"
#include "base/log.h"
#include "store/store.h"
#include "store/storeq.h"
#include "control/strict.h"

#define MS 1000000ULL
#define POLL_SPENT_NS (2 * MS)  /* a due permit is checked for use this often */
#define POLL_COOP_NS (5 * MS)   /* a cooperative limit's refusals are read this often */
#define DOWN_RETRY_NS (100 * MS) /* after a failed call (the store backs off too) */

enum { B_IDLE = 0, B_ASKING, B_ARMED, B_BACKOFF };

struct sbucket {
	uint32_t slot;
	int state;
	uint64_t due, end;      /* B_ARMED: the permit's window [due, end] */
	uint64_t retry_ns;      /* B_BACKOFF: ask again from then */
	bool want;              /* a refusal since the last permit was spent or expired */
	uint64_t refused_mark;  /* refused counter then */
	bool closed_down;       /* interval 0 written: the store was unreachable */
};

struct permit_job {
	char limit[KT_NAME_LEN];
	uint64_t every_us;
	int max_reserved;
	int n;
	uint32_t slots[KT_MAX_MEMBERS_PER_LIMIT];
	struct kt_permit out[KT_MAX_MEMBERS_PER_LIMIT];
	struct kt_permit_answer ans;
	int ret;
	char err[KT_ERR_LEN];
	uint64_t done_ns;       /* kt clock when the answer was back */
};

struct slimit {
	int idx;                /* in the plan */
	char name[KT_NAME_LEN];
	uint64_t every_ns, expire_ns, hold_ns;
	int max_reserved;
	bool coop;
	int evfd;
	struct kt_storeq *q;
	bool in_flight;
	struct sbucket *b;
	int nb;
	bool store_down;
	uint64_t retry_ns;      /* store down: next call not before */
	uint64_t granted, used, wasted, backoffs, store_errors;
	uint64_t ahead_ns, answer_ns; /* last answer: next permit time - Redis now, when */
	char last_error[256];
};

struct kt_strict {
	struct kt_bpf *bpf;
	struct slimit *l;
	int n;
	int epfd, timerfd;
	uint64_t armed_for;     /* the timer's current deadline, 0 none */
	uint64_t rnd;
};

static uint64_t rnd_next(struct kt_strict *st)
{
	st->rnd ^= st->rnd << 13;
	st->rnd ^= st->rnd >> 7;
	st->rnd ^= st->rnd << 17;
	return st->rnd;
}

static struct kt_bucket *bucket_of(struct kt_strict *st, uint32_t slot)
{
	return kt_bpf_bucket(st->bpf, slot);
}

static uint64_t refused_now(struct kt_strict *st, uint32_t slot)
{
	struct kt_counters c;

	return kt_bpf_read_counters(st->bpf, slot, &c) ? 0 : c.throttled;
}

/* A bucket the kernel holds: armed while its window is open. */
static void adopt(struct kt_strict *st, struct slimit *l, struct sbucket *sb, uint64_t now)
{
	struct kt_bucket *bk = bucket_of(st, sb->slot);
	uint64_t until = __atomic_load_n(&bk->valid_until, __ATOMIC_ACQUIRE);

	uint32_t slot = sb->slot;

	memset(sb, 0, sizeof(*sb));
	sb->slot = slot;
	sb->refused_mark = refused_now(st, sb->slot);
	if (!(__atomic_load_n(&bk->flags, __ATOMIC_ACQUIRE) & KT_BUCKET_STRICT) || until <= 1 ||
	    (int64_t)(until - now) <= 0 || until < l->expire_ns)
		return;
	sb->state = B_ARMED;
	sb->end = until;
	sb->due = until - l->expire_ns;
}

static int set_buckets(struct kt_strict *st, struct slimit *l, const struct kt_limit_rt *lr, uint64_t now)
{
	uint32_t slots[KT_MAX_MEMBERS_PER_LIMIT];
	int n = kt_limit_slots(lr, slots, KT_MAX_MEMBERS_PER_LIMIT);
	struct sbucket *nb = calloc(n > 0 ? (size_t)n : 1, sizeof(*nb));

	if (!nb)
		return -ENOMEM;
	for (int k = 0; k < n; k++) {
		int j;

		for (j = 0; j < l->nb; j++)
			if (l->b[j].slot == slots[k])
				break;
		if (j < l->nb) {
			nb[k] = l->b[j];
			continue;
		}
		nb[k].slot = slots[k];
		adopt(st, l, &nb[k], now);
	}
	free(l->b);
	l->b = nb;
	l->nb = n;
	return 0;
}

static void free_job(void *p)
{
	free(p);
}

static void run_job(struct kt_store *s, void *p)
{
	struct permit_job *j = p;

	j->ret = kt_store_permits(s, j->limit, j->every_us, j->max_reserved, j->n, j->out, &j->ans, j->err,
				  sizeof(j->err));
	j->done_ns = kt_clock_ns();
}

int kt_strict_create(struct kt_strict **out, const struct kt_plan *plan, struct kt_bpf *bpf, char *err,
		     size_t errlen)
{
	struct kt_strict *st;
	uint64_t now = kt_clock_ns();
	int i, n = 0, ret;

	*out = NULL;
	for (i = 0; i < plan->n_limits; i++)
		n += plan->limits[i].cfg->rl.strict.on;
	if (!n)
		return 0;
	st = calloc(1, sizeof(*st));
	if (!st || !(st->l = calloc((size_t)n, sizeof(*st->l)))) {
		free(st);
		snprintf(err, errlen, "strict: out of memory");
		return -ENOMEM;
	}
	st->bpf = bpf;
	st->rnd = now ^ ((uint64_t)getpid() << 32) ^ 0x9e3779b97f4a7c15ULL;
	st->timerfd = timerfd_create(CLOCK_BOOTTIME, TFD_CLOEXEC | TFD_NONBLOCK);
	st->epfd = epoll_create1(EPOLL_CLOEXEC);
	for (i = 0; i < n; i++)
		st->l[i].evfd = -1;
	if (st->timerfd < 0 || st->epfd < 0)
		goto sys_fail;
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = ~0u };
	if (epoll_ctl(st->epfd, EPOLL_CTL_ADD, st->timerfd, &ev) < 0)
		goto sys_fail;
	for (i = 0; i < plan->n_limits; i++) {
		const struct kt_limit_cfg *c = plan->limits[i].cfg;
		struct slimit *l = &st->l[st->n];
		struct kt_store *store;

		if (!c->rl.strict.on)
			continue;
		st->n++;
		l->idx = i;
		snprintf(l->name, sizeof(l->name), "%s", c->name);
		l->every_ns = c->rl.strict.every_ns;
		l->expire_ns = c->rl.strict.expire_ns;
		l->max_reserved = c->rl.strict.max_reserved;
		l->hold_ns = kt_strict_hold_ns(l->every_ns, l->expire_ns);
		l->coop = c->unit == KT_UNIT_REQUEST;
		l->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (l->evfd < 0)
			goto sys_fail;
		ev = (struct epoll_event){ .events = EPOLLIN, .data.u32 = (uint32_t)(st->n - 1) };
		if (epoll_ctl(st->epfd, EPOLL_CTL_ADD, l->evfd, &ev) < 0)
			goto sys_fail;
		if ((ret = kt_store_open(&store, &c->store, err, errlen)))
			goto fail;
		if ((ret = kt_storeq_open(&l->q, store, l->evfd, err, errlen)))
			goto fail;
	}
	*out = st;
	return 0;
sys_fail:
	ret = -errno;
	snprintf(err, errlen, "strict: %s", strerror(errno));
fail:
	kt_strict_destroy(st);
	return ret;
}

void kt_strict_destroy(struct kt_strict *st)
{
	if (!st)
		return;
	for (int i = 0; i < st->n; i++) {
		if (st->l[i].q)
			kt_storeq_close(st->l[i].q); /* a job in flight finishes on its own */
		if (st->l[i].evfd >= 0)
			close(st->l[i].evfd);
		free(st->l[i].b);
	}
	free(st->l);
	if (st->timerfd >= 0)
		close(st->timerfd);
	if (st->epfd >= 0)
		close(st->epfd);
	free(st);
}

void kt_strict_sync(struct kt_strict *st, const struct kt_plan *plan)
{
	uint64_t now = kt_clock_ns();

	if (!st)
		return;
	for (int i = 0; i < st->n; i++) {
		struct slimit *l = &st->l[i];

		if (l->idx < plan->n_limits && !strcmp(plan->limits[l->idx].cfg->name, l->name) &&
		    set_buckets(st, l, &plan->limits[l->idx], now))
			kt_warn("strict limit %s: out of memory following its members", l->name);
	}
	kt_strict_run(st, now);
}

void kt_strict_inherit(struct kt_strict *st, const struct kt_strict *old)
{
	if (!st || !old)
		return;
	for (int i = 0; i < st->n; i++)
		for (int j = 0; j < old->n; j++) {
			struct slimit *l = &st->l[i];
			const struct slimit *o = &old->l[j];

			if (strcmp(l->name, o->name))
				continue;
			l->granted = o->granted;
			l->used = o->used;
			l->wasted = o->wasted;
			l->backoffs = o->backoffs;
			l->store_errors = o->store_errors;
			l->ahead_ns = o->ahead_ns;
			l->answer_ns = o->answer_ns;
			if (l->every_ns == o->every_ns) /* the same permits: a reservation still counts */
				l->store_down = o->store_down;
		}
}

int kt_strict_fd(const struct kt_strict *st)
{
	return st ? st->epfd : -1;
}

static struct sbucket *find_slot(struct slimit *l, uint32_t slot)
{
	for (int k = 0; k < l->nb; k++)
		if (l->b[k].slot == slot)
			return &l->b[k];
	return NULL;
}

bool kt_strict_refused(struct kt_strict *st, uint32_t slot, uint64_t ts)
{
	bool kick = false;

	if (!st)
		return false;
	for (int i = 0; i < st->n; i++) {
		struct sbucket *sb = find_slot(&st->l[i], slot);

		/* refused while waiting for the armed permit: not new demand */
		if (!sb || (sb->state == B_ARMED && (int64_t)(ts - sb->due) < 0))
			continue;
		/* new demand, or a refusal after due: the permit is spent */
		kick |= !sb->want || sb->state == B_ARMED;
		sb->want = true;
	}
	return kick;
}

/* The refused counter as the demand signal: a refusal since the last look
 * is a caller that wants a permit, unless one is armed (refusals before its
 * time are the wait). */
static void note_refusals(struct kt_strict *st, struct sbucket *sb)
{
	uint64_t r;

	if (sb->state == B_ARMED)
		return;
	r = refused_now(st, sb->slot);
	if (r != sb->refused_mark)
		sb->want = true;
	sb->refused_mark = r;
}

/* The store answered (or failed) the job in flight. */
static void take_answer(struct kt_strict *st, struct slimit *l, uint64_t now)
{
	struct permit_job *j = kt_storeq_take(l->q);
	uint64_t v;

	while (read(l->evfd, &v, sizeof(v)) > 0)
		;
	if (!j)
		return;
	l->in_flight = false;
	if (j->ret) {
		if (!l->store_down)
			kt_warn("strict limit %s: no permits, admitting nothing: %s", l->name, j->err);
		l->store_down = true;
		l->store_errors++;
		l->retry_ns = now + DOWN_RETRY_NS;
		snprintf(l->last_error, sizeof(l->last_error), "%s", j->err);
		for (int k = 0; k < l->nb; k++) {
			struct sbucket *sb = &l->b[k];

			if (sb->state == B_ASKING)
				sb->state = B_IDLE;
			/* no permit, and none to come: say why in the reason */
			if (sb->state != B_ARMED && !sb->closed_down) {
				kt_bucket_strict_close(bucket_of(st, sb->slot), l->hold_ns, true);
				sb->closed_down = true;
			}
		}
		free(j);
		return;
	}
	if (l->store_down)
		kt_info("strict limit %s: store answers again; permits resume", l->name);
	l->store_down = false;
	l->last_error[0] = 0;
	l->ahead_ns = j->ans.ahead_us * 1000;
	l->answer_ns = j->done_ns;
	for (int r = 0; r < j->n; r++) {
		struct sbucket *sb = find_slot(l, j->slots[r]);
		struct kt_bucket *bk;

		if (!sb || sb->state != B_ASKING)
			continue; /* the member left meanwhile: the permit is wasted */
		bk = bucket_of(st, sb->slot);
		if (j->out[r].granted) {
			/* never early: Redis's now was before done_ns */
			sb->due = j->done_ns + j->out[r].wait_us * 1000;
			sb->end = sb->due + l->expire_ns;
			kt_strict_arm(bk, sb->due, l->expire_ns);
			if (sb->closed_down || !__atomic_load_n(&bk->interval_fp, __ATOMIC_RELAXED))
				__atomic_store_n(&bk->interval_fp, l->hold_ns << KT_FP_SHIFT, __ATOMIC_RELEASE);
			sb->closed_down = false;
			sb->state = B_ARMED;
			sb->want = false;
			l->granted++;
		} else {
			uint64_t span = l->max_reserved ? l->every_ns / 8 : l->every_ns / 2;

			sb->state = B_BACKOFF;
			sb->retry_ns = j->done_ns + j->out[r].wait_us * 1000 + (span ? rnd_next(st) % span : 0);
			l->backoffs++;
		}
	}
	/* buckets closed while the store was down and not asked for now */
	for (int k = 0; k < l->nb; k++) {
		struct sbucket *sb = &l->b[k];

		if (sb->closed_down && sb->state != B_ARMED) {
			kt_bucket_strict_close(bucket_of(st, sb->slot), l->hold_ns, false);
			sb->closed_down = false;
		}
	}
	free(j);
}

static void set_timer(struct kt_strict *st, uint64_t at)
{
	struct itimerspec its = { 0 };

	if (at == st->armed_for)
		return;
	st->armed_for = at;
	if (at) {
		its.it_value.tv_sec = (time_t)(at / 1000000000ULL);
		its.it_value.tv_nsec = (long)(at % 1000000000ULL);
	}
	timerfd_settime(st->timerfd, at ? TFD_TIMER_ABSTIME : 0, &its, NULL);
}

static void earliest(uint64_t *w, uint64_t t)
{
	if (!*w || t < *w)
		*w = t;
}

void kt_strict_run(struct kt_strict *st, uint64_t now)
{
	uint64_t wake = 0, v;

	if (!st)
		return;
	while (read(st->timerfd, &v, sizeof(v)) > 0)
		;
	st->armed_for = 0;
	for (int i = 0; i < st->n; i++) {
		struct slimit *l = &st->l[i];
		struct permit_job *j = NULL;

		take_answer(st, l, now);
		for (int k = 0; k < l->nb; k++) {
			struct sbucket *sb = &l->b[k];
			struct kt_bucket *bk = bucket_of(st, sb->slot);

			if (l->coop)
				note_refusals(st, sb);
			if (sb->state == B_ARMED) {
				if ((int64_t)(now - sb->due) >= 0 && kt_strict_spent(bk, sb->due)) {
					l->used++;
				} else if ((int64_t)(now - sb->end) > 0) {
					l->wasted++;
				} else {
					earliest(&wake, (int64_t)(now - sb->due) < 0 ? sb->due + MS
										     : now + POLL_SPENT_NS);
					earliest(&wake, sb->end + 1);
					continue;
				}
				sb->state = B_IDLE;
				sb->refused_mark = refused_now(st, sb->slot);
				if (l->store_down) {
					/* its permit is over and no other comes */
					kt_bucket_strict_close(bk, l->hold_ns, true);
					sb->closed_down = true;
				}
			}
			if (sb->state == B_BACKOFF) {
				if ((int64_t)(now - sb->retry_ns) < 0) {
					earliest(&wake, sb->retry_ns);
					continue;
				}
				sb->state = B_IDLE;
			}
			if (sb->state != B_IDLE || !sb->want)
				continue;
			if (l->in_flight)
				continue; /* asked when the answer is back */
			if (l->store_down && (int64_t)(now - l->retry_ns) < 0) {
				earliest(&wake, l->retry_ns);
				continue;
			}
			if (!j) {
				j = calloc(1, sizeof(*j));
				if (!j)
					break;
				snprintf(j->limit, sizeof(j->limit), "%s", l->name);
				j->every_us = l->every_ns / 1000;
				j->max_reserved = l->max_reserved;
			}
			j->slots[j->n++] = sb->slot;
			sb->state = B_ASKING;
		}
		if (j) {
			if (kt_storeq_post(l->q, run_job, j, free_job) == 0) {
				l->in_flight = true;
			} else {
				for (int r = 0; r < j->n; r++) {
					struct sbucket *sb = find_slot(l, j->slots[r]);

					if (sb)
						sb->state = B_IDLE;
				}
				free(j);
				earliest(&wake, now + MS);
			}
		}
		if (l->coop)
			earliest(&wake, now + POLL_COOP_NS);
	}
	set_timer(st, wake);
}

void kt_strict_tick(struct kt_strict *st, uint64_t now)
{
	if (!st)
		return;
	for (int i = 0; i < st->n; i++) {
		struct slimit *l = &st->l[i];

		for (int k = 0; k < l->nb; k++)
			note_refusals(st, &l->b[k]);
	}
	kt_strict_run(st, now);
}

void kt_strict_get(const struct kt_strict *st, int i, uint64_t now, struct kt_strict_stat *out)
{
	memset(out, 0, sizeof(*out));
	if (!st)
		return;
	for (int n = 0; n < st->n; n++) {
		const struct slimit *l = &st->l[n];

		if (l->idx != i)
			continue;
		out->strict = true;
		out->every_ns = l->every_ns;
		out->expire_ns = l->expire_ns;
		out->max_reserved = l->max_reserved;
		out->granted = l->granted;
		out->used = l->used;
		out->wasted = l->wasted;
		out->backoffs = l->backoffs;
		out->store_errors = l->store_errors;
		out->store_down = l->store_down;
		out->last_answer_ns = l->answer_ns;
		snprintf(out->last_error, sizeof(out->last_error), "%s", l->last_error);
		if (l->answer_ns && now - l->answer_ns < l->ahead_ns)
			out->reserved = (double)(l->ahead_ns - (now - l->answer_ns)) / (double)l->every_ns;
		for (int k = 0; k < l->nb; k++) {
			const struct sbucket *sb = &l->b[k];

			if (sb->state == B_ARMED) {
				out->armed++;
				if ((int64_t)(now - sb->due) < 0)
					out->waiting++;
				if (!out->next_due_ns || sb->due < out->next_due_ns)
					out->next_due_ns = sb->due;
			} else if (sb->want) {
				out->waiting++;
			}
		}
		return;
	}
}
