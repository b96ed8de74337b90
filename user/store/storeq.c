/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The store worker: see storeq.h. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "kthrottle.h"
#include "store/storeq.h"

enum job_state { Q_IDLE = 0, Q_POSTED, Q_RUNNING, Q_DONE };

struct kt_storeq {
	pthread_mutex_t mu;
	pthread_cond_t cv;            /* worker: a job or a close; owner: a job done */
	pthread_t th;
	struct kt_store *st;
	int notify_fd;                /* the worker's dup of the owner's eventfd */
	enum job_state js;
	kt_storeq_fn fn;
	void *job;
	void (*free_job)(void *);
	bool closing;                 /* the owner is gone: the worker frees everything */
	struct kt_storeq_snap snap;
};

/* Under q->mu. */
static void snap_store(struct kt_storeq *q)
{
	q->snap.state = kt_store_state(q->st, &q->snap.since_ns, NULL);
	kt_store_endpoint(q->st, q->snap.endpoint, sizeof(q->snap.endpoint));
	snprintf(q->snap.last_error, sizeof(q->snap.last_error), "%s", kt_store_last_error(q->st));
	kt_store_get_stats(q->st, &q->snap.stats);
	kt_store_get_errors(q->st, &q->snap.errors);
}

static void destroy(struct kt_storeq *q)
{
	kt_store_close(q->st);
	if (q->notify_fd >= 0)
		close(q->notify_fd);
	pthread_cond_destroy(&q->cv);
	pthread_mutex_destroy(&q->mu);
	free(q);
}

static void *worker(void *arg)
{
	struct kt_storeq *q = arg;

	pthread_mutex_lock(&q->mu);
	for (;;) {
		while (q->js != Q_POSTED && !q->closing)
			pthread_cond_wait(&q->cv, &q->mu);
		if (q->js != Q_POSTED)
			break; /* closed while idle: the owner joins and frees */
		q->js = Q_RUNNING;
		pthread_mutex_unlock(&q->mu);

		q->fn(q->st, q->job);

		pthread_mutex_lock(&q->mu);
		snap_store(q);
		q->snap.busy = false;
		q->snap.jobs++;
		if (q->closing) {
			/* closed while this job ran: the owner detached us */
			if (q->free_job)
				q->free_job(q->job);
			pthread_mutex_unlock(&q->mu);
			destroy(q);
			return NULL;
		}
		q->js = Q_DONE;
		pthread_cond_broadcast(&q->cv);
		if (q->notify_fd >= 0) {
			uint64_t one = 1;
			/* fails only when the counter is near 2^64: readable anyway */
			ssize_t w = write(q->notify_fd, &one, sizeof(one));

			(void)w;
		}
	}
	pthread_mutex_unlock(&q->mu);
	return NULL;
}

int kt_storeq_open(struct kt_storeq **out, struct kt_store *st, int notify_fd, char *err, size_t errlen)
{
	struct kt_storeq *q;
	sigset_t all, old;
	int ret;

	*out = NULL;
	q = calloc(1, sizeof(*q));
	if (!q) {
		kt_store_close(st);
		snprintf(err, errlen, "store worker: out of memory");
		return -ENOMEM;
	}
	q->st = st;
	q->notify_fd = notify_fd >= 0 ? dup(notify_fd) : -1;
	if (notify_fd >= 0 && q->notify_fd < 0) {
		ret = -errno;
		snprintf(err, errlen, "store worker: dup: %s", strerror(errno));
		kt_store_close(st);
		free(q);
		return ret;
	}
	pthread_mutex_init(&q->mu, NULL);
	pthread_cond_init(&q->cv, NULL);
	snap_store(q);
	/* the loop takes signals through its signalfd, never this thread */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	ret = pthread_create(&q->th, NULL, worker, q);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret) {
		snprintf(err, errlen, "store worker: pthread_create: %s", strerror(ret));
		destroy(q);
		return -ret;
	}
	*out = q;
	return 0;
}

int kt_storeq_post(struct kt_storeq *q, kt_storeq_fn fn, void *job, void (*free_job)(void *))
{
	int ret = 0;

	pthread_mutex_lock(&q->mu);
	if (q->js != Q_IDLE) {
		ret = -EBUSY;
	} else {
		q->fn = fn;
		q->job = job;
		q->free_job = free_job;
		q->js = Q_POSTED;
		q->snap.busy = true;
		q->snap.busy_since_ns = kt_clock_ns();
		pthread_cond_broadcast(&q->cv);
	}
	pthread_mutex_unlock(&q->mu);
	return ret;
}

void *kt_storeq_take(struct kt_storeq *q)
{
	void *job = NULL;

	pthread_mutex_lock(&q->mu);
	if (q->js == Q_DONE) {
		job = q->job;
		q->job = NULL;
		q->js = Q_IDLE;
	}
	pthread_mutex_unlock(&q->mu);
	return job;
}

bool kt_storeq_busy(struct kt_storeq *q)
{
	bool busy;

	pthread_mutex_lock(&q->mu);
	busy = q->js != Q_IDLE;
	pthread_mutex_unlock(&q->mu);
	return busy;
}

int kt_storeq_wait(struct kt_storeq *q, uint64_t timeout_ns)
{
	struct timespec dl;
	int ret = 0;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += (time_t)(timeout_ns / 1000000000ULL);
	dl.tv_nsec += (long)(timeout_ns % 1000000000ULL);
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&q->mu);
	while (q->js == Q_POSTED || q->js == Q_RUNNING) {
		if (pthread_cond_timedwait(&q->cv, &q->mu, &dl) == ETIMEDOUT) {
			ret = -ETIMEDOUT;
			break;
		}
	}
	pthread_mutex_unlock(&q->mu);
	return ret;
}

struct kt_store *kt_storeq_store(struct kt_storeq *q)
{
	struct kt_store *st;

	pthread_mutex_lock(&q->mu);
	st = q->js == Q_POSTED || q->js == Q_RUNNING ? NULL : q->st;
	pthread_mutex_unlock(&q->mu);
	return st;
}

void kt_storeq_resnap(struct kt_storeq *q)
{
	pthread_mutex_lock(&q->mu);
	if (q->js != Q_POSTED && q->js != Q_RUNNING)
		snap_store(q);
	pthread_mutex_unlock(&q->mu);
}

void kt_storeq_snapshot(struct kt_storeq *q, struct kt_storeq_snap *out)
{
	pthread_mutex_lock(&q->mu);
	*out = q->snap;
	pthread_mutex_unlock(&q->mu);
}

int kt_storeq_rebind(struct kt_storeq *q, int notify_fd)
{
	int fd = -1, ret = 0;

	pthread_mutex_lock(&q->mu);
	if (q->js == Q_POSTED || q->js == Q_RUNNING) {
		ret = -EBUSY;
	} else if (notify_fd >= 0 && (fd = dup(notify_fd)) < 0) {
		ret = -errno;
	} else {
		if (q->js == Q_DONE) {
			if (q->free_job)
				q->free_job(q->job);
			q->job = NULL;
			q->js = Q_IDLE;
		}
		if (q->notify_fd >= 0)
			close(q->notify_fd);
		q->notify_fd = fd;
	}
	pthread_mutex_unlock(&q->mu);
	return ret;
}

void kt_storeq_close(struct kt_storeq *q)
{
	bool running;

	if (!q)
		return;
	pthread_mutex_lock(&q->mu);
	q->closing = true;
	running = q->js == Q_POSTED || q->js == Q_RUNNING;
	if (q->js == Q_DONE && q->free_job) {
		/* finished but never taken */
		q->free_job(q->job);
		q->job = NULL;
		q->js = Q_IDLE;
	}
	pthread_cond_broadcast(&q->cv);
	pthread_mutex_unlock(&q->mu);
	if (running) {
		/* bounded by the store's deadlines; the worker frees everything */
		pthread_detach(q->th);
		return;
	}
	pthread_join(q->th, NULL);
	destroy(q);
}
