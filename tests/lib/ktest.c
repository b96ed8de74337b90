/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include "base/cgroup.h"
#include "ktest.h"

uint64_t ktest_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

int ktest_private_mounts(void)
{
	static bool done;

	if (done)
		return 0;
	if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL))
		return -errno;
	done = true;
	return 0;
}

const char *ktest_private_bpffs(const char *prefix, char *mnt, size_t len)
{
	mnt[0] = 0;
	if (geteuid() != 0)
		return "needs root";
	/* a private mount namespace: the bpffs goes away with the test (the
	 * daemons it starts, its children, share it) */
	if (ktest_private_mounts())
		return "cannot unshare the mount namespace";
	if ((size_t)snprintf(mnt, len, "/tmp/%s-XXXXXX", prefix) >= len || !mkdtemp(mnt)) {
		mnt[0] = 0;
		return "cannot make a mount point";
	}
	if (mount("bpffs", mnt, "bpf", 0, "mode=0755")) {
		rmdir(mnt);
		mnt[0] = 0;
		return "cannot mount a bpffs";
	}
	chmod(mnt, 0755); /* mkdtemp's 0700 on the mount point is hidden now */
	return NULL;
}

void ktest_private_bpffs_remove(char *mnt)
{
	if (!mnt[0])
		return;
	umount2(mnt, MNT_DETACH);
	rmdir(mnt);
	mnt[0] = 0;
}

pid_t ktest_subscribe_spawn(const struct ktest_daemon *d, const char *limit, int lines, int *fd)
{
	char bin[PATH_MAX], n[16];
	int p[2];
	pid_t pid;

	snprintf(bin, sizeof(bin), "%s/kthrottlectl", ktest_build_dir());
	snprintf(n, sizeof(n), "%d", lines);
	if (pipe2(p, O_CLOEXEC))
		return -1;
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(p[1], 1);
		execl(bin, bin, "-s", d->socket, "subscribe", limit, "-n", n, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	*fd = p[0];
	return pid;
}

void ktest_asan_preload(void)
{
#ifdef __SANITIZE_ADDRESS__
	/* an ASan build of libkthrottle dlopened by python needs the runtime
	 * loaded first: the one this test runs with */
	char line[PATH_MAX + 128], *p;
	FILE *f = fopen("/proc/self/maps", "re");

	while (f && fgets(line, sizeof(line), f)) {
		if (!strstr(line, "libasan.so") || !(p = strchr(line, '/')))
			continue;
		p[strcspn(p, "\n")] = 0;
		setenv("LD_PRELOAD", p, 1);
		setenv("ASAN_OPTIONS", "detect_leaks=0", 1); /* the interpreter's own */
		break;
	}
	if (f)
		fclose(f);
#endif
}

bool ktest_read_line(int fd, char *buf, size_t len, int timeout_ms, uint64_t *at)
{
	size_t n = 0;
	uint64_t end = ktest_now_ns() + (uint64_t)timeout_ms * 1000000ull;

	while (n + 1 < len) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int64_t left = (int64_t)(end - ktest_now_ns()) / 1000000;

		if (left <= 0 || poll(&p, 1, (int)left) <= 0 || read(fd, buf + n, 1) != 1)
			return false;
		if (buf[n] == '\n') {
			buf[n] = 0;
			*at = ktest_now_ns();
			return true;
		}
		/* a line begun is read whole: its first byte must not be lost to
		 * a short timeout that ran out mid-line (its writer sent it in
		 * one write, so the rest is there at once) */
		if (n++ == 0 && end < ktest_now_ns() + 1000000000ull)
			end = ktest_now_ns() + 1000000000ull;
	}
	return false;
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

long ktest_proc_status_kb(pid_t pid, const char *field)
{
	char path[64], line[256];
	size_t flen = strlen(field);
	long kb = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, field, flen) && line[flen] == ':') {
			kb = strtol(line + flen + 1, NULL, 10);
			break;
		}
	fclose(f);
	return kb;
}

int ktest_proc_fds(pid_t pid)
{
	char path[64];
	struct dirent *de;
	int n = 0;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	if (!d)
		return -1;
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
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

bool ktest_port_open(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;

	if (fd >= 0)
		close(fd);
	return ok;
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

char *ktest_daemon_config_text(const struct ktest_daemon *d, const char *yaml_body)
{
	char *buf;

	if (asprintf(&buf, "pinDir: %s\nsocket: %s\n%s", d->pin_dir, d->socket, yaml_body) < 0)
		return NULL;
	return buf;
}

int ktest_daemon_config(struct ktest_daemon *d, const char *yaml_body)
{
	char *buf = ktest_daemon_config_text(d, yaml_body);
	int ret;

	if (!buf)
		return -ENOMEM;
	ret = ktest_write_file(d->config, buf);
	free(buf);
	return ret;
}

void ktest_daemon_dump(const struct ktest_daemon *d, const char *name, size_t tail)
{
	char *log, *st;
	size_t n;

	if (!d->dir[0])
		return;
	log = ktest_slurp(d->log);
	n = log ? strlen(log) : 0;
	fprintf(stderr, "--- %s log (tail):\n%s\n", name, log ? log + (n > tail ? n - tail : 0) : "");
	free(log);
	st = d->pid > 0 ? ktest_daemon_cmd(d, "status json") : NULL;
	fprintf(stderr, "--- %s status: %s\n", name, st ? st : "(not running)");
	free(st);
}

char *ktest_daemon_cmd(const struct ktest_daemon *d, const char *cmd)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = 10 };
	size_t len = 0, cap = 1 << 20;
	char *buf = malloc(cap);
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
		/* a status of 10,000 limits is megabytes: grow, up to 256 MiB */
		if (cap - 1 - len < 4096 && cap < (256u << 20)) {
			char *g = realloc(buf, 2 * cap);

			if (!g)
				break;
			buf = g;
			cap *= 2;
		}
		ssize_t r = read(fd, buf + len, cap - 1 - len);
		if (r <= 0)
			break;
		len += (size_t)r;
	}
	close(fd);
	buf[len] = 0;
	return buf;
}

int ktest_daemon_spawn_flag(struct ktest_daemon *d, const char *flag)
{
	char bin[PATH_MAX];
	pid_t pid;

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
			/* the daemon gets 0-2 as from systemd, no fd of the log
			 * more (test_resources counts its fds) */
			if (fd > 2)
				close(fd);
		}
		execl(bin, bin, "--config", d->config, flag, (char *)NULL); /* flag NULL: none */
		_exit(127);
	}
	d->pid = pid;
	return 0;
}

int ktest_daemon_await(struct ktest_daemon *d, int timeout_ms, int *exit_code)
{
	pid_t pid = d->pid;
	int status;

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

int ktest_daemon_start_flag(struct ktest_daemon *d, const char *flag, int timeout_ms,
			    int *exit_code)
{
	if (ktest_daemon_spawn_flag(d, flag))
		return -1;
	return ktest_daemon_await(d, timeout_ms, exit_code);
}

int ktest_daemon_start(struct ktest_daemon *d, int timeout_ms, int *exit_code)
{
	return ktest_daemon_start_flag(d, NULL, timeout_ms, exit_code);
}

int ktest_daemon_start_logged(struct ktest_daemon *d)
{
	int code = -1;
	char *log;

	if (ktest_daemon_start(d, 5000, &code) == 0)
		return 0;
	log = ktest_slurp(d->log);
	fprintf(stderr, "kthrottled on %s did not start (exit %d):\n%s", d->config, code, log);
	free(log);
	return -1;
}

int ktest_daemon_up(struct ktest_daemon *d, const char *yaml_body)
{
	if (ktest_daemon_init(d)) {
		fprintf(stderr, "ktest: cannot create a temp dir for kthrottled\n");
		return -EIO;
	}
	if (ktest_daemon_config(d, yaml_body)) {
		fprintf(stderr, "ktest: cannot write %s\n", d->config);
		return -EIO;
	}
	return ktest_daemon_start_logged(d) ? -EIO : 0;
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

/* A sanitizer build's daemon writes its reports to its log, which the
 * cleanup removes: they are printed here, and the test binary aborts, so
 * `make SAN=1 test` counts them. */
static void sanitizer_reports(const struct ktest_daemon *d)
{
	static const char *const marks[] = { "ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
					     ": runtime error: " };
	char *log = d->log[0] ? ktest_slurp(d->log) : NULL;
	const char *hit = NULL;

	for (size_t i = 0; log && !hit && i < sizeof(marks) / sizeof(marks[0]); i++)
		hit = strstr(log, marks[i]);
	if (hit) {
		const char *from = hit - log > 200 ? hit - 200 : log;

		fprintf(stderr, "ktest: sanitizer report in %s:\n%.6000s\n", d->log, from);
		free(log);
		abort();
	}
	free(log);
}

void ktest_daemon_cleanup(struct ktest_daemon *d)
{
	char bin[PATH_MAX];

#ifdef __SANITIZE_ADDRESS__
	/* a sanitizer build's daemon stops as in production (SIGTERM; SIGCONT
	 * for one a test stopped), so LeakSanitizer checks it at exit; one
	 * that does not exit in 5 s is killed */
	if (d->pid > 0) {
		kill(d->pid, SIGCONT);
		ktest_daemon_signal_wait(d, SIGTERM);
	}
#endif
	ktest_kill_wait(&d->pid);
	sanitizer_reports(d);
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

int ktest_run_capture_as(char *const argv[], int uid, char **out)
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
		if (uid >= 0 && (setgroups(0, NULL) < 0 || setgid((gid_t)uid) < 0 ||
				 setuid((uid_t)uid) < 0))
			_exit(126);
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

const char *ktest_find_prog(const char *name)
{
	static const char *dirs[] = { "/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/local/bin" };
	static char p[PATH_MAX];

	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", dirs[i], name);
		if (access(p, X_OK) == 0)
			return p;
	}
	return NULL;
}

int ktest_run_capture(char *const argv[], char **out)
{
	return ktest_run_capture_as(argv, -1, out);
}

int ktest_run_bin(const char *prog, char **out, ...)
{
	char bin[PATH_MAX];
	char *argv[24];
	va_list ap;
	int n = 0;

	snprintf(bin, sizeof(bin), "%s/%s", ktest_build_dir(), prog);
	argv[n++] = bin;
	va_start(ap, out);
	while (n < 23 && (argv[n] = va_arg(ap, char *)))
		n++;
	va_end(ap);
	argv[n] = NULL;
	return ktest_run_capture(argv, out);
}

int ktest_bpftool_cgroup_show(const char *cg, char **out)
{
	char *argv[] = { "/usr/sbin/bpftool", "cgroup", "show", (char *)cg, NULL };

	if (access(argv[0], X_OK) != 0)
		argv[0] = "/usr/bin/bpftool";
	return ktest_run_capture(argv, out);
}

bool ktest_lists_kthrottle_prog(const char *bpftool_out)
{
	return strstr(bpftool_out, "kt_sendmsg4") || strstr(bpftool_out, "kt_connect4") ||
	       strstr(bpftool_out, "kt_egress");
}

char *ktest_slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf = NULL;
	size_t cap = 0;
	ssize_t n;

	if (!f)
		return strdup("");
	n = getdelim(&buf, &cap, 0, f);
	fclose(f);
	if (n < 0) {
		free(buf);
		return strdup("");
	}
	return buf;
}

const char *ktest_json_limit_field(const char *json, const char *limit, const char *field)
{
	char key[128], fk[64];
	const char *p, *end;

	snprintf(key, sizeof(key), "\"name\":\"%s\"", limit);
	snprintf(fk, sizeof(fk), "\"%s\":", field);
	p = strstr(json, key);
	if (!p)
		return NULL;
	end = strstr(p, "\"cgroups\":");
	p = strstr(p, fk);
	if (!p || (end && p > end))
		return NULL;
	return p + strlen(fk);
}

static bool json_number(const char *p, double *v)
{
	char *e;
	double x;

	if (!strncmp(p, "true", 4) || !strncmp(p, "false", 5)) {
		*v = *p == 't';
		return true;
	}
	x = strtod(p, &e);
	if (e == p)
		return false;
	*v = x;
	return true;
}

bool ktest_json_limit_num(const char *json, const char *limit, const char *field, double *v)
{
	const char *p = ktest_json_limit_field(json, limit, field);

	return p && json_number(p, v);
}

bool ktest_json_limit_str(const char *json, const char *limit, const char *field, char *out,
			  size_t len)
{
	const char *p = ktest_json_limit_field(json, limit, field), *q;

	if (!p || *p++ != '"')
		return false;
	q = strchr(p, '"');
	if (!q || (size_t)(q - p) >= len)
		return false;
	memcpy(out, p, (size_t)(q - p));
	out[q - p] = 0;
	return true;
}

bool ktest_json_num(const char *json, const char *key, double *v)
{
	char k[64];
	const char *p;

	snprintf(k, sizeof(k), "\"%s\":", key);
	p = strstr(json, k);
	return p && json_number(p + strlen(k), v);
}

bool ktest_load_parse(const char *line, struct ktest_load *res)
{
	return sscanf(line, "ok=%llu refused=%llu errors=%llu elapsed=%lf", &res->ok, &res->refused,
		      &res->errors, &res->elapsed) == 4;
}

int ktest_load_args(const char *cgroup, const char *mode, const char *addr, int port,
		    double duration, char *const extra[], struct ktest_load *res)
{
	char bin[PATH_MAX], portbuf[16], durbuf[32];
	char *argv[24], *out = NULL;
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
	for (int i = 0; extra && extra[i] && i < 8; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	rc = ktest_run_capture(argv, &out);
	memset(res, 0, sizeof(*res));
	if (rc != 0 || !out || !ktest_load_parse(out, res)) {
		free(out);
		return -1;
	}
	free(out);
	return 0;
}

int ktest_load(const char *cgroup, const char *mode, const char *addr, int port, double duration,
	       struct ktest_load *res)
{
	return ktest_load_args(cgroup, mode, addr, port, duration, NULL, res);
}

pid_t ktest_load_spawn(const char *cgroup, int port, double secs, double report_s, int *out_fd)
{
	char bin[PATH_MAX], portbuf[16], dur[32], rep[32];
	char *argv[] = { bin, "--cgroup", (char *)cgroup, "--mode", "udp", "--addr", "127.0.0.1",
			 "--port", portbuf, "--duration", dur, report_s > 0 ? "--report" : NULL, rep,
			 NULL };
	pid_t parent = getpid(), pid;
	int p[2] = { -1, -1 };

	snprintf(bin, sizeof(bin), "%s/tools/kt-load", ktest_build_dir());
	snprintf(portbuf, sizeof(portbuf), "%d", port);
	snprintf(dur, sizeof(dur), "%.3f", secs);
	snprintf(rep, sizeof(rep), "%.3f", report_s);
	if (access(bin, X_OK) != 0) {
		fprintf(stderr, "ktest: %s missing (make build/tools/kt-load)\n", bin);
		return -ENOENT;
	}
	if (out_fd && pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		int fd = out_fd ? p[1] : open("/dev/null", O_WRONLY | O_CLOEXEC);

		/* dies with the caller, even if that died before this line */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		if (fd >= 0)
			dup2(fd, 1);
		execv(bin, argv);
		_exit(127);
	}
	if (pid < 0)
		pid = -errno;
	if (out_fd) {
		close(p[1]);
		if (pid > 0)
			*out_fd = p[0];
		else
			close(p[0]);
	}
	return pid;
}

void ktest_kill_wait(pid_t *pid)
{
	if (*pid > 0) {
		kill(*pid, SIGKILL);
		waitpid(*pid, NULL, 0);
	}
	*pid = -1;
}

int ktest_ramp_config_with(char *buf, size_t len, const char *cg, int port, const char *modes,
			   int burst, const char *more)
{
	char b[32] = "";
	int n;

	if (burst >= 0)
		snprintf(b, sizeof(b), "    burst: %d\n", burst);
	n = snprintf(buf, len,
		     "tickInterval: 100ms\n"
		     "epoch: 1s\n"
		     "limits:\n"
		     "  - name: ramp\n"
		     "    cgroups: [%s]\n"
		     "    match: {cidrs: [127.0.0.1/32], ports: %d, protocol: udp}\n"
		     "    unit: datagram\n"
		     "%s"
		     "    rateLimit:\n"
		     "      max: %.0f\n"
		     "      min: %.0f\n"
		     "      rampUpDuration: %.0fs\n"
		     "      modes: {%s}\n"
		     "%s",
		     cg, port, b, KTEST_RAMP_MAX, KTEST_RAMP_MIN, KTEST_RAMP_S, modes, more);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int ktest_ramp_config(char *buf, size_t len, const char *cg, int port, const char *modes)
{
	return ktest_ramp_config_with(buf, len, cg, port, modes, KTEST_RAMP_BURST, "");
}

double ktest_ramp_integral(double u)
{
	const double slope = (KTEST_RAMP_MAX - KTEST_RAMP_MIN) / KTEST_RAMP_S;

	if (u <= 0)
		return 0;
	if (u <= KTEST_RAMP_S)
		return KTEST_RAMP_MIN * u + slope * u * u / 2;
	return KTEST_RAMP_MIN * KTEST_RAMP_S + slope * KTEST_RAMP_S * KTEST_RAMP_S / 2 +
	       KTEST_RAMP_MAX * (u - KTEST_RAMP_S);
}

int ktest_count_lines(const char *s)
{
	int n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

bool ktest_is_one_line(const char *out)
{
	size_t n = strlen(out);

	printf("output: %s", out);
	return n > 0 && out[n - 1] == '\n' && ktest_count_lines(out) == 1;
}

int ktest_line_of(const char *file, const char *needle)
{
	FILE *f = fopen(file, "r");
	char line[4096];
	int n = 0, found = 0;

	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f)) {
		n++;
		if (strstr(line, needle))
			found = n;
	}
	fclose(f);
	return found;
}

int ktest_setup_tmpdir(void **state)
{
	char path[PATH_MAX];

	*state = NULL;
	if (ktest_root_unavailable())
		return 0;
	if (ktest_tmpdir(path, sizeof(path)))
		return -1;
	*state = strdup(path);
	return *state ? 0 : -1;
}

int ktest_teardown_tmpdir(void **state)
{
	if (*state)
		ktest_rmtree(*state);
	free(*state);
	*state = NULL;
	return 0;
}

int ktest_http_get(int port, const char *path, char **body)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct timeval tv = { .tv_sec = 3 };
	size_t len = 0, cap = 1 << 16;
	char req[512], *buf = malloc(cap), *b;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), code = -1;
	ssize_t r;

	*body = NULL;
	if (!buf || fd < 0)
		goto out;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		goto out;
	snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
	if (send(fd, req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req))
		goto out;
	while ((r = recv(fd, buf + len, cap - 1 - len, 0)) > 0) {
		len += (size_t)r;
		if (len + 1 == cap) {
			char *g = realloc(buf, cap * 2);

			if (!g)
				goto out;
			buf = g;
			cap *= 2;
		}
	}
	buf[len] = 0;
	if (sscanf(buf, "HTTP/1.%*d %d", &code) != 1)
		code = -1;
	b = strstr(buf, "\r\n\r\n");
	*body = strdup(b ? b + 4 : "");
out:
	if (!*body)
		*body = strdup("");
	if (fd >= 0)
		close(fd);
	free(buf);
	return code;
}

bool ktest_metric_sample(const char *page, const char *series, double *v)
{
	size_t n = strlen(series);

	for (const char *p = page; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (!strncmp(p, series, n) && p[n] == ' ') {
			*v = atof(p + n + 1);
			return true;
		}
	return false;
}

int ktest_redis_limit_body(char *buf, size_t len, const char *name, int metrics_port,
			   const char *cg, int redis_port, const char *store_extra)
{
	int n = snprintf(buf, len,
			 "metrics: 127.0.0.1:%d\n"
			 "limits:\n"
			 "  - {name: %s, cgroups: [%s], unit: connection,\n"
			 "     match: {cidrs: [127.0.0.1/32], ports: 9},\n"
			 "     rateLimit: {max: 100, store: {redisStore: {mode: single, url: \"redis://127.0.0.1:%d/0\"},\n"
			 "                 %sheartbeat: 200ms, onStoreFailure: conservative}}}\n",
			 metrics_port, name, cg, redis_port, store_extra);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}
