/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* kthrottled: one event loop (epoll over a signalfd, a timerfd and the
 * control socket) that owns the kernel state, runs the controller tick and
 * answers kthrottlectl. */
#ifndef KT_DAEMON_H
#define KT_DAEMON_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include "apply.h"
#include "bpf_loader.h"
#include "config.h"
#include "pool.h"
#include "ramp.h"

#define KT_DEFAULT_SOCKET "/run/kthrottle/kthrottled.sock"
#define KT_MAX_CLIENTS 16
#define KT_CLIENT_TIMEOUT_NS 2000000000ull /* to send the command line */
#define KT_HISTORY (KT_EPOCH_TICKS_MAX + 2) /* per-tick samples: one epoch */

struct kt_sample {
	uint64_t ts_ns;
	uint64_t used;      /* admitted tokens (bytes for unit byte), cumulative */
	uint64_t calls;     /* admitted + throttled requests, cumulative */
	uint64_t refused;   /* throttled requests, cumulative */
	double granted;     /* tokens granted since start, cumulative */
};

/* Controller state of one limit, index-aligned with plan.limits. */
struct kt_limit_state {
	struct kt_ramp ramp;
	double pool_rate;          /* tokens/s for the whole pool (ramp output) */
	int pool_size;             /* members sharing the pool */
	double bucket_rate;        /* last written per-bucket rate */
	double bucket_burst;
	double fallback_rate;      /* kernel's rate once the lease lapses */
	struct kt_bucket_policy pol; /* last computed: share, burst, lease */
	uint64_t pinned_lease;     /* lease_until last written to kt_leases */
	uint64_t pinned_ns;        /* when */
	struct kt_sample hist[KT_HISTORY];
	int hist_len, hist_head;   /* ring of the last ticks */
	double epoch_used_rate;    /* admitted tokens/s over the trailing epoch */
	uint64_t admitted, throttled, admitted_bytes, throttled_bytes;
};

struct kt_client {
	int fd;
	char buf[256];
	size_t len;
	uint64_t since_ns;  /* accepted at */
};

struct kt_daemon {
	struct kt_config cfg;
	struct kt_plan plan;
	struct kt_limit_state *ls;
	struct kt_pool *pool;
	struct kt_pool_local *pool_local; /* scratch, index-aligned with plan.limits */
	struct kt_bpf bpf;
	char cg_mount[PATH_MAX];
	char config_path[PATH_MAX];
	int epfd, sigfd, timerfd, listenfd;
	struct kt_client clients[KT_MAX_CLIENTS];
	bool running;
	bool detach_on_exit;
	uint64_t started_ns;
	uint64_t ticks;
	uint64_t reloads, reload_failures;
	uint64_t last_prune_ns;
};

/* Exit codes */
#define KT_EXIT_OK 0
#define KT_EXIT_RUNTIME 1
#define KT_EXIT_CONFIG 2

/* Loads config and starts enforcing; returns a KT_EXIT_* code on failure
 * with the error printed, leaving nothing attached or pinned that it made. */
int kt_daemon_start(struct kt_daemon *d, const char *config_path, bool detach_on_exit);
/* Runs until SIGTERM/SIGINT; returns the exit code. */
int kt_daemon_run(struct kt_daemon *d);
void kt_daemon_stop(struct kt_daemon *d);

/* One controller tick at `now` (exposed for tests and the benchmark). */
void kt_daemon_tick(struct kt_daemon *d, uint64_t now);
/* Drops members whose cgroup was removed (the pod ended): their links and
 * buckets go, and they leave the pool at once. Returns how many. */
int kt_daemon_prune_members(struct kt_daemon *d);
/* Re-read the config; on error keep the running one. 0 or negative errno. */
int kt_daemon_reload(struct kt_daemon *d, char *err, size_t errlen);
/* Status as a human table or JSON into a malloc'd string. */
char *kt_daemon_status(struct kt_daemon *d, bool json);

#endif
