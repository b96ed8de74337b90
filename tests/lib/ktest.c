/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include "cgroup.h"
#include "ktest.h"

uint64_t ktest_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

void ktest_sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

const char *ktest_root_unavailable(void)
{
	char m[PATH_MAX];

	if (geteuid() != 0)
		return "needs root";
	if (access("/sys/kernel/btf/vmlinux", R_OK) != 0)
		return "kernel has no BTF";
	if (kt_cgroup2_mount(m, sizeof(m), NULL) != 0)
		return "no cgroup v2 mount";
	return NULL;
}

int ktest_cgroup_create(const char *name, char *path, size_t len)
{
	char m[PATH_MAX];
	int ret = kt_cgroup2_mount(m, sizeof(m), NULL);

	if (ret)
		return ret;
	snprintf(path, len, "%s/kt-test-%d-%s", m, getpid(), name);
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

void ktest_cgroup_destroy(const char *path)
{
	char procs[PATH_MAX], m[PATH_MAX], rootprocs[PATH_MAX], line[64];
	FILE *f;

	if (kt_cgroup2_mount(m, sizeof(m), NULL) == 0) {
		snprintf(procs, sizeof(procs), "%s/cgroup.procs", path);
		snprintf(rootprocs, sizeof(rootprocs), "%s/cgroup.procs", m);
		f = fopen(procs, "r");
		if (f) {
			while (fgets(line, sizeof(line), f))
				ktest_write_file(rootprocs, line);
			fclose(f);
		}
	}
	for (int i = 0; i < 50 && rmdir(path) < 0 && errno == EBUSY; i++)
		ktest_sleep_ms(20);
}

int ktest_cgroup_join(const char *path)
{
	char p[PATH_MAX], pid[32];

	snprintf(p, sizeof(p), "%s/cgroup.procs", path);
	snprintf(pid, sizeof(pid), "%d\n", getpid());
	return ktest_write_file(p, pid);
}

uint64_t ktest_cgroup_id(const char *path)
{
	uint64_t id = 0;
	kt_cgroup_id(path, &id);
	return id;
}

int ktest_tmpdir(char *path, size_t len)
{
	snprintf(path, len, "/tmp/kt-test-XXXXXX");
	return mkdtemp(path) ? 0 : -errno;
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(p);
}

void ktest_rmtree(const char *path)
{
	if (path && path[0])
		nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int ktest_free_port(int sock_type)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(sa);
	int fd = socket(AF_INET, sock_type, 0), port = -1;

	if (fd < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &l) == 0)
		port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

int ktest_write_file(const char *path, const char *content)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = write(fd, content, strlen(content));
	close(fd);
	return n == (ssize_t)strlen(content) ? 0 : -EIO;
}

const char *ktest_build_dir(void)
{
	static char dir[PATH_MAX];
	char exe[PATH_MAX];
	ssize_t n;
	char *p;

	if (dir[0])
		return dir;
	/* test binaries live in <build>/tests/<kind>/<name> */
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return "build";
	exe[n] = 0;
	for (int i = 0; i < 3 && (p = strrchr(exe, '/')); i++)
		*p = 0;
	snprintf(dir, sizeof(dir), "%s", exe);
	return dir;
}

int ktest_daemon_init(struct ktest_daemon *d)
{
	static int seq;

	memset(d, 0, sizeof(*d));
	d->pid = -1;
	if (ktest_tmpdir(d->dir, sizeof(d->dir)))
		return -1;
	snprintf(d->config, sizeof(d->config), "%s/kthrottled.yaml", d->dir);
	snprintf(d->socket, sizeof(d->socket), "%s/ctl.sock", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/kthrottled.log", d->dir);
	snprintf(d->pin_dir, sizeof(d->pin_dir), "/sys/fs/bpf/kt-test-%d-%d", getpid(), seq++);
	return 0;
}

int ktest_daemon_config(struct ktest_daemon *d, const char *yaml_body)
{
	char *buf;
	int ret;

	if (asprintf(&buf, "pinDir: %s\nsocket: %s\n%s", d->pin_dir, d->socket, yaml_body) < 0)
		return -ENOMEM;
	ret = ktest_write_file(d->config, buf);
	free(buf);
	return ret;
}

char *ktest_daemon_cmd(const struct ktest_daemon *d, const char *cmd)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = 10 };
	char *buf = malloc(1 << 20);
	size_t len = 0;
	int fd;

	if (!buf)
		return NULL;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", d->socket);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    write(fd, cmd, strlen(cmd)) < 0 || write(fd, "\n", 1) < 0) {
		if (fd >= 0)
			close(fd);
		free(buf);
		return NULL;
	}
	for (;;) {
		ssize_t r = read(fd, buf + len, (1 << 20) - 1 - len);
		if (r <= 0)
			break;
		len += (size_t)r;
	}
	close(fd);
	buf[len] = 0;
	return buf;
}

int ktest_daemon_start(struct ktest_daemon *d, int timeout_ms, int *exit_code)
{
	char bin[PATH_MAX];
	pid_t pid;
	int status;

	snprintf(bin, sizeof(bin), "%s/kthrottled", ktest_build_dir());
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		/* a killed test must not leave its daemon behind */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execl(bin, bin, "--config", d->config, (char *)NULL);
		_exit(127);
	}
	d->pid = pid;
	for (int waited = 0; waited < timeout_ms; waited += 20) {
		char *r;
		if (waitpid(pid, &status, WNOHANG) == pid) {
			d->pid = -1;
			if (exit_code)
				*exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
			return -1;
		}
		r = ktest_daemon_cmd(d, "ping");
		if (r && !strncmp(r, "ok", 2)) {
			free(r);
			return 0;
		}
		free(r);
		ktest_sleep_ms(20);
	}
	return -1;
}

int ktest_daemon_signal_wait(struct ktest_daemon *d, int sig)
{
	int status = 0;

	if (d->pid <= 0)
		return -1;
	kill(d->pid, sig);
	for (int i = 0; i < 500; i++) {
		if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
			d->pid = -1;
			return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		}
		ktest_sleep_ms(10);
	}
	kill(d->pid, SIGKILL);
	waitpid(d->pid, &status, 0);
	d->pid = -1;
	return -1;
}

void ktest_daemon_cleanup(struct ktest_daemon *d)
{
	char bin[PATH_MAX];

	if (d->pid > 0) {
		kill(d->pid, SIGKILL);
		waitpid(d->pid, NULL, 0);
		d->pid = -1;
	}
	if (d->pin_dir[0] && access(d->pin_dir, F_OK) == 0) {
		char *argv[] = { bin, "--cleanup", "--pin-dir", d->pin_dir, NULL };
		char *out = NULL;
		snprintf(bin, sizeof(bin), "%s/kthrottled", ktest_build_dir());
		ktest_run_capture(argv, &out);
		free(out);
	}
	ktest_rmtree(d->dir);
	d->dir[0] = 0;
}

int ktest_run_capture(char *const argv[], char **out)
{
	int p[2], status;
	size_t len = 0, cap = 4096;
	char *buf = malloc(cap);
	pid_t pid;

	*out = NULL;
	if (!buf || pipe2(p, O_CLOEXEC) < 0) {
		free(buf);
		return -1;
	}
	pid = fork();
	if (pid == 0) {
		dup2(p[1], 1);
		dup2(p[1], 2);
		close(p[0]);
		execv(argv[0], argv);
		_exit(127);
	}
	close(p[1]);
	for (;;) {
		if (len + 1 >= cap) {
			char *nb = realloc(buf, cap *= 2);
			if (!nb)
				break;
			buf = nb;
		}
		ssize_t r = read(p[0], buf + len, cap - 1 - len);
		if (r <= 0)
			break;
		len += (size_t)r;
	}
	close(p[0]);
	buf[len] = 0;
	*out = buf;
	if (waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int ktest_load(const char *cgroup, const char *mode, const char *addr, int port, double duration,
	       struct ktest_load *res)
{
	char bin[PATH_MAX], portbuf[16], durbuf[32];
	char *argv[16], *out = NULL;
	int n = 0, rc;

	snprintf(bin, sizeof(bin), "%s/tools/kt-load", ktest_build_dir());
	snprintf(portbuf, sizeof(portbuf), "%d", port);
	snprintf(durbuf, sizeof(durbuf), "%.3f", duration);
	argv[n++] = bin;
	if (cgroup) {
		argv[n++] = "--cgroup";
		argv[n++] = (char *)cgroup;
	}
	argv[n++] = "--mode";
	argv[n++] = (char *)mode;
	argv[n++] = "--addr";
	argv[n++] = (char *)addr;
	argv[n++] = "--port";
	argv[n++] = portbuf;
	argv[n++] = "--duration";
	argv[n++] = durbuf;
	argv[n] = NULL;
	rc = ktest_run_capture(argv, &out);
	memset(res, 0, sizeof(*res));
	if (rc != 0 || !out ||
	    sscanf(out, "ok=%llu refused=%llu errors=%llu elapsed=%lf", &res->ok, &res->refused,
		   &res->errors, &res->elapsed) != 4) {
		free(out);
		return -1;
	}
	free(out);
	return 0;
}
