/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* One kt_store on a thread of its own, so that no store I/O ever runs on
 * the daemon's event loop: the store never blocks the daemon.
 *
 * The owner (the pool, on the loop's thread) posts one job at a time: a
 * function run on the worker with the store, and the job's memory. When it
 * is done the worker writes 1 to the owner's eventfd; the owner takes the
 * finished job with kt_storeq_take. Connect, AUTH, SELECT, SCRIPT LOAD,
 * Sentinel lookups and the heartbeat all run inside jobs, each step bounded
 * by the store's own deadlines (store.h), so a job ends within the call's
 * budget or so whatever Redis does. A heartbeat that falls
 * due while a job is still in flight is skipped by the owner: the leases
 * that job would have renewed run out in the kernel as designed.
 *
 * The store's state, endpoint, last error and counters are copied into a
 * snapshot under a mutex after every job, so status never waits for Redis.
 *
 * Closing with a job in flight detaches the worker: it finishes the job
 * (bounded as above), then frees the job, the store and itself. A reload
 * therefore never waits for a slow Redis either: it hands an idle queue to
 * the new pool (kt_storeq_rebind) and opens a new one for a busy one. */
#ifndef KT_STOREQ_H
#define KT_STOREQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "store/store.h"

struct kt_storeq;

typedef void (*kt_storeq_fn)(struct kt_store *st, void *job);

struct kt_storeq_snap {
	enum kt_store_state state;
	uint64_t since_ns;
	char endpoint[300];           /* "host:port" in use, "" when not connected */
	char last_error[KT_ERR_LEN];
	struct kt_store_stats stats;
	struct kt_store_errors errors;
	bool busy;                    /* a job is in flight */
	uint64_t busy_since_ns;       /* kt clock, when busy */
	uint64_t jobs;                /* jobs finished */
};

/* Takes ownership of st (also on failure). notify_fd: an eventfd the worker
 * writes to when a job is done; the worker keeps its own dup of it. */
int kt_storeq_open(struct kt_storeq **out, struct kt_store *st, int notify_fd, char *err, size_t errlen);
/* -EBUSY while a job is in flight or finished but not taken; the worker
 * calls fn(store, job), then free_job(job) if the queue was closed meanwhile. */
int kt_storeq_post(struct kt_storeq *q, kt_storeq_fn fn, void *job, void (*free_job)(void *));
/* The finished job, or NULL (none posted, or still running). */
void *kt_storeq_take(struct kt_storeq *q);
bool kt_storeq_busy(struct kt_storeq *q);
/* Waits until no job is running, at most timeout_ns. 0 or -ETIMEDOUT. */
int kt_storeq_wait(struct kt_storeq *q, uint64_t timeout_ns);
/* The store for use on the caller's thread: only while no job is running
 * (NULL otherwise). The stop path uses it for its last calls. */
struct kt_store *kt_storeq_store(struct kt_storeq *q);
/* Refreshes the snapshot from the store after a direct use (idle only). */
void kt_storeq_resnap(struct kt_storeq *q);
void kt_storeq_snapshot(struct kt_storeq *q, struct kt_storeq_snap *out);
/* Hands an idle queue to a new owner: from now on the worker writes to
 * notify_fd (dup'd) instead of the old owner's. A job finished and not
 * taken is freed (its answer was the old owner's). -EBUSY while a job is
 * in flight (the caller keeps its own queue), -errno when dup fails. */
int kt_storeq_rebind(struct kt_storeq *q, int notify_fd);
void kt_storeq_close(struct kt_storeq *q);

#endif
