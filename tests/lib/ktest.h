/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Shared helpers for kthrottle's root tests: test cgroups, child processes
 * inside them, free loopback ports, temp dirs, and a kthrottled under test. */
#ifndef KTEST_H
#define KTEST_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Skip reason when the environment cannot run root tests, else NULL. */
const char *ktest_root_unavailable(void);

/* Creates <cgroup2 mount>/kt-test-<pid>-<name>; path out. */
/* This process (and the children it starts afterwards) in a mount namespace
 * of its own, every mount private: what the test mounts goes with it, never
 * onto the host. Once per process; 0 or -errno. */
int ktest_private_mounts(void);
int ktest_cgroup_create(const char *name, char *path, size_t len);
/* Moves any processes back to the root cgroup and removes the directory. */
void ktest_cgroup_destroy(const char *path);
/* Moves the calling process into cgroup `path`. */
int ktest_cgroup_join(const char *path);
uint64_t ktest_cgroup_id(const char *path);
/* The fds process pid holds (/proc/PID/fd), or -1. */
int ktest_proc_fds(pid_t pid);
/* A kB field of /proc/PID/status ("VmRSS", "VmHWM"), or -1. */
long ktest_proc_status_kb(pid_t pid, const char *field);

/* mkdtemp under /tmp; path out. */
int ktest_tmpdir(char *path, size_t len);
/* cmocka setup/teardown for tests that need only a temp dir: *state is
 * its path (malloc'd), or NULL when root tests cannot run here. */
int ktest_setup_tmpdir(void **state);
int ktest_teardown_tmpdir(void **state);
/* Removes a directory tree created by the tests. */
void ktest_rmtree(const char *path);
/* A TCP (or UDP) port on 127.0.0.1 that is free right now. */
int ktest_free_port(int sock_type);
/* Whether a TCP connect to 127.0.0.1:port succeeds now. */
bool ktest_port_open(int port);
int ktest_write_file(const char *path, const char *content);

/* Directory of the built binaries (build/ next to the test binary's tree),
 * e.g. "/repo/build". */
const char *ktest_build_dir(void);

/* A kthrottled under test. */
struct ktest_daemon {
	pid_t pid;
	char dir[256];       /* temp dir: config, socket, log */
	char config[300];
	char socket[300];
	char log[300];
	char pin_dir[300];   /* /sys/fs/bpf/kt-test-<pid>-<n> */
};

/* Writes `yaml_body` to dir/kthrottled.yaml, prefixed with pinDir and socket
 * lines for this daemon (the body must not set them). */
int ktest_daemon_config(struct ktest_daemon *d, const char *yaml_body);
/* The same text, malloc'd (NULL: out of memory), for a config published
 * elsewhere (a ConfigMap volume: tests/lib/kvol.h). */
char *ktest_daemon_config_text(const struct ktest_daemon *d, const char *yaml_body);
/* Starts build/kthrottled on d->config and waits until its socket answers
 * (up to timeout_ms). Returns 0, or -1 if it exited; then *exit_code holds
 * its exit status. */
int ktest_daemon_start(struct ktest_daemon *d, int timeout_ms, int *exit_code);
/* SIGTERM (or sig) and wait; returns its exit status. */
int ktest_daemon_signal_wait(struct ktest_daemon *d, int sig);
/* Sends one control command and returns the malloc'd reply (NULL on error). */
char *ktest_daemon_cmd(const struct ktest_daemon *d, const char *cmd);
/* For a failing assertion: the last `tail` bytes of d's log and, while it
 * runs, its status JSON, each headed "--- NAME ...". Nothing for a daemon
 * never set up. */
void ktest_daemon_dump(const struct ktest_daemon *d, const char *name, size_t tail);
/* Removes pins (kthrottled --cleanup), the temp dir. Kills the daemon if it
 * is still running. Safe to call twice. */
void ktest_daemon_cleanup(struct ktest_daemon *d);
/* Prepares paths (tmp dir and pin dir) without starting anything. */
int ktest_daemon_init(struct ktest_daemon *d);

/* Starts d (already configured) with a 5 s timeout; on failure prints its
 * exit status and log to stderr. 0 or -1. */
int ktest_daemon_start_logged(struct ktest_daemon *d);
/* ktest_daemon_init + ktest_daemon_config(yaml_body) +
 * ktest_daemon_start_logged; each failure is named on stderr. 0 or -EIO;
 * either way d is ready for ktest_daemon_cleanup. */
int ktest_daemon_up(struct ktest_daemon *d, const char *yaml_body);

/* 1-based number of the first line of `file` containing `needle`, 0 if none
 * (or the file cannot be read): where an error message should point. */
int ktest_line_of(const char *file, const char *needle);
/* Newlines in s. */
int ktest_count_lines(const char *s);
/* Prints `out` and says whether it is exactly one newline-terminated line
 * (the shape of every error kthrottled and kthrottlectl print). */
bool ktest_is_one_line(const char *out);

/* Whole file as a malloc'd string; "" (also malloc'd) if it cannot be read,
 * so callers can strstr() it unchecked. */
char *ktest_slurp(const char *path);

/* The path of program `name` in the system's bin and sbin directories, or
 * NULL; a static buffer, overwritten by the next call. */
const char *ktest_find_prog(const char *name);
/* Runs argv (argv[0] a path) with stdout and stderr captured into a malloc'd
 * string; returns the exit status or -1. */
int ktest_run_capture(char *const argv[], char **out);
/* The same as user and group `uid` with no supplementary groups (exit 126
 * if that fails); uid < 0: as this process. */
int ktest_run_capture_as(char *const argv[], int uid, char **out);
/* ktest_run_capture of <build dir>/<prog> and the arguments that follow, up
 * to 22 and a terminating NULL. */
int ktest_run_bin(const char *prog, char **out, ...) __attribute__((sentinel));
/* `bpftool cgroup show <cg>` output into *out; its exit status. */
int ktest_bpftool_cgroup_show(const char *cg, char **out);
/* Whether bpftool output lists one of kthrottle's cgroup programs. */
bool ktest_lists_kthrottle_prog(const char *bpftool_out);

/* Reading `kthrottlectl status --json` (or the socket's "status json"). A
 * limit's own fields, its "store" and its "pool" objects come before its
 * "cgroups" array; the lookups below search only that part of the object
 * whose "name" is `limit`. */
/* Start of the value of `field` in limit `limit`, or NULL. */
const char *ktest_json_limit_field(const char *json, const char *limit, const char *field);
/* A number (true/false read as 1/0); false if absent or not a number. */
bool ktest_json_limit_num(const char *json, const char *limit, const char *field, double *v);
/* A string without its quotes; false if absent, not a string, or longer
 * than len - 1. */
bool ktest_json_limit_str(const char *json, const char *limit, const char *field, char *out,
			  size_t len);
/* The number after the first "key": anywhere (top-level fields such as
 * uptime_s). */
bool ktest_json_num(const char *json, const char *key, double *v);

/* kt-load's summary line "ok=.. refused=.. errors=.. elapsed=.."; false if
 * `line` does not start with one. */
struct ktest_load {
	unsigned long long ok, refused, errors;
	double elapsed;
};
bool ktest_load_parse(const char *line, struct ktest_load *res);
/* Runs kt-load inside `cgroup` (NULL: this cgroup) and parses its summary;
 * 0, or -1 if it failed or printed no summary. */
int ktest_load(const char *cgroup, const char *mode, const char *addr, int port, double duration,
	       struct ktest_load *res);
/* The same with up to 8 more kt-load arguments (NULL-terminated, or NULL),
 * e.g. { "--rate", "10", NULL }. */
int ktest_load_args(const char *cgroup, const char *mode, const char *addr, int port,
		    double duration, char *const extra[], struct ktest_load *res);
/* kt-load in the background: UDP from `cgroup` to 127.0.0.1:port flat out
 * for secs, killed with the caller. report_s > 0 adds --report report_s.
 * With out_fd its stdout goes to a pipe whose read end is *out_fd, else to
 * /dev/null. Returns its pid or -errno. */
pid_t ktest_load_spawn(const char *cgroup, int port, double secs, double report_s, int *out_fd);
/* SIGKILL and reap *pid if it is > 0; then *pid = -1. */
void ktest_kill_wait(pid_t *pid);

/* The ramp that e2e test_ramp asserts and the bench's ramp section measures:
 * one UDP datagram limit "ramp" from KTEST_RAMP_MIN to KTEST_RAMP_MAX per
 * second over KTEST_RAMP_S seconds, burst KTEST_RAMP_BURST, tickInterval
 * 100 ms, epoch 1 s. */
#define KTEST_RAMP_MIN 50.0
#define KTEST_RAMP_MAX 200.0
#define KTEST_RAMP_S 3.0
#define KTEST_RAMP_BURST 5
/* Its config body on cgroup `cg` and 127.0.0.1:port; `modes` is the inside
 * of the modes mapping, e.g. "relaxed: {}". 0 or -ENAMETOOLONG. */
int ktest_ramp_config(char *buf, size_t len, const char *cg, int port, const char *modes);
/* Tokens the ideal ramp r(u) = min(max, min + slope*u) admits over [0, u]. */
double ktest_ramp_integral(double u);

/* A daemon config body: the metrics endpoint on 127.0.0.1:metrics_port and
 * one connection limit `name` (max 100, port 9 on 127.0.0.1) on cgroup cg,
 * pooled through the Redis at 127.0.0.1:redis_port with a 200 ms
 * heartbeat; store_extra is put before `heartbeat:` in the store block
 * (e.g. "maxMembers: 3, ", or ""). 0 or -ENAMETOOLONG. */
int ktest_redis_limit_body(char *buf, size_t len, const char *name, int metrics_port,
			   const char *cg, int redis_port, const char *store_extra);

/* GET path from 127.0.0.1:port (HTTP/1.0, 3 s socket timeouts): the status
 * code or -1, and the body in *body (malloc'd, "" when none). */
int ktest_http_get(int port, const char *path, char **body);
/* The value of the Prometheus sample line `series VALUE` in page. */
bool ktest_metric_sample(const char *page, const char *series, double *v);

uint64_t ktest_now_ns(void);
void ktest_sleep_ms(int ms);
/* Mounts a bpffs (mode 0755) on a new /tmp/<prefix>-XXXXXX in a private
 * mount namespace of this process (and its children): NULL, or why not
 * (then mnt is ""). ktest_private_bpffs_remove undoes it. */
const char *ktest_private_bpffs(const char *prefix, char *mnt, size_t len);
void ktest_private_bpffs_remove(char *mnt);
/* Starts `kthrottlectl subscribe LIMIT -n LINES` against d's socket; its
 * stdout is *fd (read it with ktest_read_line). The pid, or -1. */
pid_t ktest_subscribe_spawn(const struct ktest_daemon *d, const char *limit, int lines, int *fd);
/* In an AddressSanitizer build: LD_PRELOAD its runtime (and no leak
 * report) for the programs this test then starts (python loading the
 * sanitized libkthrottle); nothing otherwise. */
void ktest_asan_preload(void);
/* Reads one line from fd (byte by byte: what follows stays in the pipe)
 * that begins within timeout_ms (a line begun gets at least 1 s more to
 * end, so none loses its start to a short timeout); the newline is dropped
 * and *at is when it came. */
bool ktest_read_line(int fd, char *buf, size_t len, int timeout_ms, uint64_t *at);

/* For cmocka tests: skip (with the reason) unless ktest_root_unavailable()
 * says the environment can run root tests. */
/* Skips the running test, saying why, when `why` (a const char *, e.g. what
 * a group setup found missing) is set. */
#define KTEST_SKIP_IF(why)                                                                         \
	do {                                                                                       \
		const char *why_ = (why);                                                          \
		if (why_) {                                                                        \
			print_message("skipped: %s\n", why_);                                      \
			skip();                                                                    \
		}                                                                                  \
	} while (0)

#define KTEST_SKIP_UNLESS_ROOT() KTEST_SKIP_IF(ktest_root_unavailable())

/* ktest_daemon_start with one more kthrottled argument after --config
 * (e.g. "--detach-on-exit"; NULL: none). */
int ktest_daemon_start_flag(struct ktest_daemon *d, const char *flag, int timeout_ms,
			    int *exit_code);
/* The two halves of ktest_daemon_start_flag, for daemons started side by
 * side: spawn forks and execs it (d->pid; 0, or -1 if fork failed); await
 * waits until its socket answers (up to timeout_ms), as the start does. */
int ktest_daemon_spawn_flag(struct ktest_daemon *d, const char *flag);
int ktest_daemon_await(struct ktest_daemon *d, int timeout_ms, int *exit_code);

/* ktest_ramp_config with burst `burst` (< 0: no burst line) and `more`
 * (more rateLimit keys, each "      key: value\n"; or "") after modes. */
int ktest_ramp_config_with(char *buf, size_t len, const char *cg, int port, const char *modes,
			   int burst, const char *more);

#endif
