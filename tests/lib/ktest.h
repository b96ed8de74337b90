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
int ktest_cgroup_create(const char *name, char *path, size_t len);
/* Moves any processes back to the root cgroup and removes the directory. */
void ktest_cgroup_destroy(const char *path);
/* Moves the calling process into cgroup `path`. */
int ktest_cgroup_join(const char *path);
uint64_t ktest_cgroup_id(const char *path);

/* mkdtemp under /tmp; path out. */
int ktest_tmpdir(char *path, size_t len);
/* Removes a directory tree created by the tests. */
void ktest_rmtree(const char *path);
/* A TCP (or UDP) port on 127.0.0.1 that is free right now. */
int ktest_free_port(int sock_type);
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
/* Starts build/kthrottled on d->config and waits until its socket answers
 * (up to timeout_ms). Returns 0, or -1 if it exited; then *exit_code holds
 * its exit status. */
int ktest_daemon_start(struct ktest_daemon *d, int timeout_ms, int *exit_code);
/* SIGTERM (or sig) and wait; returns its exit status. */
int ktest_daemon_signal_wait(struct ktest_daemon *d, int sig);
/* Sends one control command and returns the malloc'd reply (NULL on error). */
char *ktest_daemon_cmd(const struct ktest_daemon *d, const char *cmd);
/* Removes pins (kthrottled --cleanup), the temp dir. Kills the daemon if it
 * is still running. Safe to call twice. */
void ktest_daemon_cleanup(struct ktest_daemon *d);
/* Prepares paths (tmp dir and pin dir) without starting anything. */
int ktest_daemon_init(struct ktest_daemon *d);

/* Runs argv (argv[0] a path) with stdout captured into a malloc'd string;
 * returns the exit status or -1. */
int ktest_run_capture(char *const argv[], char **out);
/* Runs kt-load inside `cgroup` (NULL: this cgroup); parses its summary. */
struct ktest_load {
	unsigned long long ok, refused, errors;
	double elapsed;
};
int ktest_load(const char *cgroup, const char *mode, const char *addr, int port, double duration,
	       struct ktest_load *res);

uint64_t ktest_now_ns(void);
void ktest_sleep_ms(int ms);

#endif
