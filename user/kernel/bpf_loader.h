/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Lifecycle of the kernel side: load the programs against the pinned maps
 * (creating and pinning them the first time, adopting them afterwards), keep
 * pinned cgroup links in sync with the wanted attachments, and remove
 * everything on cleanup. Pinned maps and links outlive the daemon, so
 * enforcement continues across a crash or restart. */
#ifndef KT_BPF_LOADER_H
#define KT_BPF_LOADER_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "kthrottle.h"
#include "kernel/features.h"

#define KT_DEFAULT_PIN_DIR "/sys/fs/bpf/kthrottle"

struct kt_connect;
struct kt_sendmsg;
struct kt_egress;
struct kt_sock;
struct kt_sockops;
struct kt_verify_record;

/* What the daemon last wrote into a slot's rate and lease fields: what
 * kt_bucket_verify holds the map to (burst 0: no rate recorded; lease
 * false: no lease recorded). */
struct kt_bucket_written {
	uint64_t interval_fp, burst;
	uint64_t valid_until, fallback_fp, fallback_until, fallback_burst;
	bool lease;
};

struct kt_bpf {
	char pin_dir[PATH_MAX];
	struct kt_connect *connect;
	struct kt_sendmsg *sendmsg;
	struct kt_egress *egress;
	struct kt_sock *sock;
	struct kt_sockops *sockops;
	int buckets_fd, counters_fd, members_fd, dests_fd, ports_fd, limits_fd, leases_fd;
	int gen_fd;    /* kt_gen, -1 in an older pin directory */
	int idle_fd;   /* kt_idle_hooks, -1 in an older pin directory */
	int events_fd; /* kt_events (ring buffer), -1 in an older pin directory */
	int shadow_fd; /* kt_shadow, -1 in an older pin directory */
	int up_fd;     /* kt_up, -1 in an older pin directory */
	int inflight_fd; /* kt_inflight, -1 in an older pin directory */
	int limit_ext_fd; /* kt_limit_ext, -1 in an older pin directory */
	struct kt_bucket *buckets; /* mmap of kt_buckets: rates change by one atomic store */
	int coop_fd;               /* kt_coop, -1 in an older pin directory (kt_bpf_open_pinned) */
	struct kt_coop *coop;      /* mmap of kt_coop (kt_bpf_open): KT_MAX_COOP entries */
	/* KT_MAX_SLOTS records of the rates written (bucket.h), allocated at
	 * the first write; NULL in a reader (the CLI) */
	struct kt_bucket_written *written;
	/* what the last commit wrote (verify.h); NULL in a reader */
	struct kt_verify_record *verify;
	/* the last kt_gen the daemon wrote: generations only move on, so a
	 * value set back by hand never revives a stale kt_anc_cache entry */
	uint64_t gen_written;
	int ncpus;
	bool adopted;              /* pinned maps existed before this open */
	bool locked;               /* lock_fd holds the pin dir lock (kt_bpf_open_locked) */
	int lock_fd;
	/* what the kernel took (kt_bpf_open): each object is one feature, a
	 * refused one NULL above; the daemon adds the audit's */
	struct kt_features feat;
};

/* Cooperative limits (unit request) have no kt_buckets slot: their one
 * member's "slot" is KT_COOP_SLOT0 + its kt_coop index, so the controller's
 * per-slot code (rates, lease, counters, baselines) serves both maps. */
#define KT_COOP_SLOT0 KT_MAX_BUCKETS
#define KT_MAX_SLOTS (KT_MAX_BUCKETS + KT_MAX_COOP)
static inline bool kt_slot_is_coop(uint32_t slot)
{
	return slot >= KT_COOP_SLOT0 && slot < KT_MAX_SLOTS;
}
/* The bucket a slot names (kt_buckets, or a kt_coop entry's). */
static inline struct kt_bucket *kt_bpf_bucket(const struct kt_bpf *b, uint32_t slot)
{
	return kt_slot_is_coop(slot) ? &b->coop[slot - KT_COOP_SLOT0].bucket : &b->buckets[slot];
}

/* One cgroup and the hooks (bit per enum kt_hook) its limits need. */
struct kt_attach {
	uint64_t cgroup_id;
	const char *path;
	unsigned hook_mask;
};

/* Mounts bpffs under pin_dir's parent when needed, loads every program with
 * the maps pinned in pin_dir (created 0700 when absent). Each object loads
 * on its own: one the kernel refuses is recorded off in b->feat (with the
 * verifier's line), its pointer left NULL and its programs never attached,
 * and the rest serve the limits that do not need it; only when none loads
 * does this fail. A kernel older than the minimum is refused first
 * (kt_features_check_minimum). An existing pin_dir
 * or pin_dir/links that is not on bpffs, is a symlink, is not owned by root
 * or is group/other-writable is refused (-EPERM): whoever can write there
 * can unpin, and so detach, the programs. */
int kt_bpf_open(struct kt_bpf *b, const char *pin_dir, char *err, size_t errlen);
/* kt_bpf_open for the daemon: first takes flock(LOCK_EX) on pin_dir, held
 * until kt_bpf_close, so a second daemon (-EBUSY) or a cleanup cannot work
 * on a pin directory a daemon is using. */
int kt_bpf_open_locked(struct kt_bpf *b, const char *pin_dir, char *err, size_t errlen);
/* Drops this process's handles (and the lock); pinned maps and links stay
 * in force. */
void kt_bpf_close(struct kt_bpf *b);
/* Makes the pinned links exactly `want`: adopts (and upgrades to the loaded
 * programs, atomically) links that exist, creates missing ones, and only
 * once all of that succeeded detaches the rest. All or nothing: on failure
 * the links created by this call are removed again, those it upgraded are
 * put back on their old programs, and none was detached. A link that then
 * fails to detach is logged and left for the next call (harmless: its
 * program finds no rule for it). */
int kt_bpf_sync_links(struct kt_bpf *b, const struct kt_attach *want, int n, char *err,
		      size_t errlen);
/* The cgroup ids that have at least one pinned link, sorted ascending, in
 * *ids (malloc'd; NULL when none). Returns the count or -errno. */
int kt_bpf_linked_cgroups(const struct kt_bpf *b, uint64_t **ids);
/* The same for the pins under pin_dir/links whose link the kernel still
 * has attached to a cgroup (a pin of a detached link, or one that is not a
 * cgroup link, does not count): what enforces, with or without a daemon. */
int kt_bpf_attached_cgroups(const char *pin_dir, uint64_t **ids);
/* Detaches every pinned link and removes every pin under pin_dir; 0 when
 * pin_dir does not exist. Refuses, deleting nothing, a pin_dir that fails
 * kt_bpf_open's checks or does not hold kthrottle's maps (-ENOTDIR, -EPERM),
 * and one whose lock a running daemon holds (-EBUSY). */
int kt_bpf_cleanup(const char *pin_dir, char *err, size_t errlen);
/* The XDP tag buckets' pins live in <pin_dir>/tags (user/tags/xdp_maps.c):
 * detaches their XDP links and removes the directory. 0 if it is absent.
 * kt_bpf_cleanup does this too. */
#define KT_TAGS_PIN_SUBDIR "tags"
int kt_bpf_cleanup_tags(const char *pin_dir);
/* The same; force: even while a daemon holds the lock. */
int kt_bpf_cleanup_opts(const char *pin_dir, bool force, char *err, size_t errlen);

/* Whether pin_dir holds kthrottle maps. */
bool kt_bpf_pinned(const char *pin_dir);

/* Open the pinned maps read-only for inspection (kthrottlectl, tests):
 * fills the *_fd fields and ncpus only. */
int kt_bpf_open_pinned(struct kt_bpf *b, const char *pin_dir, char *err, size_t errlen);

/* Sum of a slot's per-CPU counters. */
int kt_bpf_read_counters(const struct kt_bpf *b, uint32_t slot, struct kt_counters *sum);
/* What a shadow limit's bucket in `slot` refused and let pass, summed over
 * CPUs (zero when it refused nothing, or for a cooperative slot). */
int kt_bpf_read_shadow(const struct kt_bpf *b, uint32_t slot, struct kt_shadow_counters *sum);
/* A slot given to a new bucket starts with no would-refuse count. */
void kt_bpf_reset_shadow(const struct kt_bpf *b, uint32_t slot);
/* The open count of an in-flight limit's bucket in `slot`; -errno (and
 * zeroes) when there is none. */
int kt_bpf_read_inflight(const struct kt_bpf *b, uint32_t slot, struct kt_inflight *out);
/* The slots in force at `now` in the pinned node bucket of in-flight limit
 * `name` (its node-scope bucket, or the node bucket its pod-scope members
 * are chained to): what a restarted daemon's kernel still runs on before
 * any store answer. -1 when there is none (or the maps cannot be read). */
int64_t kt_bpf_limit_slots(const struct kt_bpf *b, const char *name, uint64_t now);
/* The largest per-member rate (tokens/s) the pinned buckets of limit
 * `name` run at (a node-scope bucket's divided by `members`, the node's
 * members): the share the previous daemon wrote, for a restart to check
 * the pinned lease against. -1 when there is none. */
double kt_bpf_limit_member_rate(const struct kt_bpf *b, const char *name, int members);
/* A slot given to a new bucket: no socket open, a new epoch (sockets of
 * the slot's previous owner give nothing back to this one). */
void kt_bpf_reset_inflight(const struct kt_bpf *b, uint32_t slot);
/* Every kt_limits entry into infos[KT_MAX_LIMITS], in one batch syscall
 * where the kernel has it (the table is large; one lookup each would cost
 * a syscall per id on every apply). 0 or negative errno. */
int kt_bpf_read_limits(const struct kt_bpf *b, struct kt_limit_info *infos);
/* Every kt_limit_ext entry into exts[KT_MAX_LIMITS] likewise; all zero
 * in an older pin directory, which has none. */
int kt_bpf_read_limit_exts(const struct kt_bpf *b, struct kt_limit_ext *exts);

/* mkdir -p: creates path and its missing parents; 0 or negative errno. */
int kt_mkdir_p(const char *path, mode_t mode);

/* Ensure a bpffs is mounted at `dir` or one of its parents (mounts at
 * /sys/fs/bpf when nothing is). */
int kt_bpffs_ensure(const char *dir, char *err, size_t errlen);

/* Marks every kt_anc_cache entry stale (kt_gen[0]++): after any change of
 * kt_members, so no sub-cgroup keeps a nearest member that changed. */
void kt_bpf_bump_gen(struct kt_bpf *b);

#endif
