// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The container image: scripts/build-image.sh builds it with podman from this
 * test's build dir (FROM scratch, offline), and a container of it, run
 * privileged on the host's bpffs and cgroup2 mount, enforces a limit on a
 * host cgroup:
 *   - the image is one layer and names the Debian packages of its files
 *     (label and /usr/share/kthrottle/packages.txt);
 *   - a process in the host cgroup sending UDP to a loopback receiver gets
 *     EBUSY refusals, and what arrives stays within rate x time + burst;
 *   - `kthrottlectl status`, run in the container, shows the limit, and the
 *     DaemonSet's probe command (`kthrottlectl health`) there says ready.
 * Podman uses a store, runroot and tmpdir inside the test's temp dir, so the
 * host's podman store is neither used nor changed, and everything goes with
 * the temp dir. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <linux/magic.h>
#include <cmocka.h>

#include "arrivals.h"
#include "base/cgroup.h"
#include "kt_daemonfx.h"
#include "ktest.h"

#define LIMIT "img"
#define RATE 20.0
#define BURST 5.0
#define SEND_S 3.0
/* per podman command; the build takes ~5 s on the 2-core VM */
#define CMD_TIMEOUT_S "40"

static struct fixture {
	struct ktest_daemon d; /* paths only: the daemon runs in the container */
	char podman[PATH_MAX];
	char store[PATH_MAX]; /* d.dir/podman: root, runroot, tmpdir, confs */
	char cg[PATH_MAX];
	char tag[64];
	char cid[128];
	char cidfile[PATH_MAX];
	bool image_built;
	struct arrivals a;
	pid_t kid;
} fx;

/* Runs `podman ARGS...` (NULL-terminated, up to 30) under timeout(1);
 * output (stdout and stderr) into *out; its exit status. */
static int podman(char **out, ...)
{
	char *argv[40] = { "/usr/bin/timeout", "-k", "5", CMD_TIMEOUT_S, fx.podman };
	int n = 5;
	va_list ap;

	va_start(ap, out);
	while (n < 38 && (argv[n] = va_arg(ap, char *)))
		n++;
	va_end(ap);
	argv[n] = NULL;
	return ktest_run_capture(argv, out);
}

/* crun refuses to start any container on a hybrid cgroup host whose cgroup2
 * hierarchy has a controller (it reads /sys/fs/cgroup/unified/cgroup.controllers);
 * the host's cgroup setup is not this test's to change. */
static bool crun_refuses_hybrid(void)
{
	struct statfs s;
	char *c;
	bool any;

	if (statfs("/sys/fs/cgroup", &s) == 0 && s.f_type == CGROUP2_SUPER_MAGIC)
		return false;
	if (statfs("/sys/fs/cgroup/unified", &s) != 0 || s.f_type != CGROUP2_SUPER_MAGIC)
		return false;
	c = ktest_slurp("/sys/fs/cgroup/unified/cgroup.controllers");
	any = strspn(c, " \n") != strlen(c);
	free(c);
	return any;
}

/* Points podman (and build-image.sh, which inherits the environment) at a
 * store under fx.store: storage.conf and containers.conf. */
static int podman_sandbox(const char *driver)
{
	char path[PATH_MAX + 32], conf[4 * PATH_MAX], runtime[2 * PATH_MAX + 64] = "";
	char crun[PATH_MAX] = "", unshare[PATH_MAX] = "", mnt[PATH_MAX] = "";
	struct rlimit nofile, nproc;
	int ret;

	/* find_prog's buffer is static: copy each answer */
	snprintf(crun, sizeof(crun), "%s", ktest_find_prog("crun") ?: "");
	snprintf(unshare, sizeof(unshare), "%s", ktest_find_prog("unshare") ?: "");
	snprintf(mnt, sizeof(mnt), "%s", ktest_find_prog("mount") ?: "");
	if (crun_refuses_hybrid() && crun[0] && unshare[0] && mnt[0]) {
		char wrapper[PATH_MAX + 16], empty[PATH_MAX + 16], sh[4 * PATH_MAX];

		snprintf(empty, sizeof(empty), "%s/no-controllers", fx.store);
		snprintf(wrapper, sizeof(wrapper), "%s/crun", fx.store);
		if ((ret = ktest_write_file(empty, "")))
			return ret;
		/* crun in a mount namespace of its own, where the hybrid check
		 * reads an empty file; the host's mounts stay as they are */
		snprintf(sh, sizeof(sh),
			 "#!/bin/sh\n"
			 "exec %s --mount --propagation private /bin/sh -c '%s --bind \"$0\" "
			 "/sys/fs/cgroup/unified/cgroup.controllers && exec %s \"$@\"' %s \"$@\"\n",
			 unshare, mnt, crun, empty);
		if ((ret = ktest_write_file(wrapper, sh)) || chmod(wrapper, 0755) < 0)
			return ret ? ret : -errno;
		snprintf(runtime, sizeof(runtime), "[engine.runtimes]\ncrun = [\"%s\"]\n", wrapper);
		print_message("hybrid cgroup host: crun runs through %s\n", wrapper);
	}
	/* podman's default rlimits for root (nofile 1048576, nproc 4194304)
	 * are above this process's hard limits (and podman lowers its own
	 * nproc), and crun may not raise them without CAP_SYS_RESOURCE: ask
	 * for no more than any of them has */
	getrlimit(RLIMIT_NOFILE, &nofile);
	getrlimit(RLIMIT_NPROC, &nproc);
	if (nofile.rlim_max > 65536)
		nofile.rlim_max = 65536;
	if (nproc.rlim_max > 4096)
		nproc.rlim_max = 4096;

	snprintf(conf, sizeof(conf),
		 "[storage]\ndriver = \"%s\"\n"
		 "graphroot = \"%s/root-%s\"\nrunroot = \"%s/run-%s\"\n",
		 driver, fx.store, driver, fx.store, driver);
	snprintf(path, sizeof(path), "%s/storage.conf", fx.store);
	if ((ret = ktest_write_file(path, conf)))
		return ret;
	setenv("CONTAINERS_STORAGE_CONF", path, 1);
	snprintf(conf, sizeof(conf),
		 "[containers]\ndefault_ulimits = [\"nofile=%llu:%llu\", \"nproc=%llu:%llu\"]\n"
		 "[engine]\ntmp_dir = \"%s/tmp-%s\"\nevents_logger = \"file\"\n%s",
		 (unsigned long long)nofile.rlim_max, (unsigned long long)nofile.rlim_max,
		 (unsigned long long)nproc.rlim_max, (unsigned long long)nproc.rlim_max, fx.store,
		 driver, runtime);
	snprintf(path, sizeof(path), "%s/containers.conf", fx.store);
	if ((ret = ktest_write_file(path, conf)))
		return ret;
	setenv("CONTAINERS_CONF", path, 1);
	return 0;
}

/* overlay where it works (it does on the dev VM), else vfs; each driver has
 * a store of its own (podman's database records the driver). */
static void podman_setup(void)
{
	static const char *drivers[] = { "overlay", "vfs" };
	char *out = NULL;
	int rc = -1;

	for (size_t i = 0; i < 2 && rc != 0; i++) {
		assert_int_equal(podman_sandbox(drivers[i]), 0);
		free(out);
		rc = podman(&out, "info", "--format", "{{.Store.GraphDriverName}}", NULL);
		print_message("podman storage %s: %s", drivers[i], rc == 0 ? out : "failed\n");
	}
	if (rc != 0)
		print_message("podman info: %s", out);
	free(out);
	assert_int_equal(rc, 0);
}

/* The repository: the build dir's parent, else the working directory. */
static void repo_dir(char *out, size_t len)
{
	char p[PATH_MAX + 32], *slash;

	snprintf(out, len, "%s", ktest_build_dir());
	slash = strrchr(out, '/');
	if (slash && slash != out)
		*slash = 0;
	snprintf(p, sizeof(p), "%s/scripts/build-image.sh", out);
	if (access(p, X_OK) != 0 && getcwd(out, len) == NULL)
		out[0] = 0;
}

/* Processes still naming `dir` on their command line (conmon, a podman
 * cleanup it started): their store must not be removed under them. */
static int procs_using(const char *dir)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	int n = 0;

	if (!d)
		return 0;
	while ((e = readdir(d))) {
		char p[300], *cmd;
		size_t len;
		FILE *f;

		if (e->d_name[0] < '1' || e->d_name[0] > '9' || atoi(e->d_name) == getpid())
			continue;
		snprintf(p, sizeof(p), "/proc/%s/cmdline", e->d_name);
		if (!(f = fopen(p, "r")))
			continue;
		cmd = calloc(1, 65536);
		len = cmd ? fread(cmd, 1, 65535, f) : 0;
		fclose(f);
		for (size_t i = 0; i < len; i++)
			if (!cmd[i])
				cmd[i] = ' ';
		n += len && strstr(cmd, dir) != NULL;
		free(cmd);
	}
	closedir(d);
	return n;
}

/* Lazily unmounts whatever is still mounted under `dir` (a container's shm
 * or overlay after a failure), so removing the tree stays inside it. */
static void umount_under(const char *dir)
{
	char line[4096], mnt[PATH_MAX];
	size_t len = strlen(dir);
	FILE *f = fopen("/proc/self/mounts", "r");

	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%*s %4095s", mnt) == 1 && !strncmp(mnt, dir, len) &&
		    mnt[len] == '/')
			umount2(mnt, MNT_DETACH);
	fclose(f);
}

static int setup(void **state)
{
	bool root = kt_daemonfx_begin(&fx, sizeof(fx), &fx.d);

	(void)state;
	fx.kid = -1;
	if (!root || !ktest_find_prog("podman"))
		return 0;
	snprintf(fx.podman, sizeof(fx.podman), "%s", ktest_find_prog("podman"));
	snprintf(fx.tag, sizeof(fx.tag), "localhost/kthrottle-test:%d", getpid());
	if (ktest_daemon_init(&fx.d))
		return -1;
	snprintf(fx.store, sizeof(fx.store), "%s/podman", fx.d.dir);
	snprintf(fx.cidfile, sizeof(fx.cidfile), "%s/cid", fx.d.dir);
	if (mkdir(fx.store, 0700) < 0)
		return -1;
	if (ktest_cgroup_create("image", fx.cg, sizeof(fx.cg)))
		return -1;
	return arrivals_start(&fx.a) ? -1 : 0;
}

static int teardown(void **state)
{
	char *out = NULL, *id;

	(void)state;
	ktest_kill_wait(&fx.kid);
	/* the container by the id podman wrote, even if `run` failed later */
	id = fx.cid[0] ? strdup(fx.cid) : (fx.cidfile[0] ? ktest_slurp(fx.cidfile) : strdup(""));
	if (id && id[0]) {
		id[strcspn(id, "\n")] = 0;
		podman(&out, "rm", "-f", "-t", "2", id, NULL);
		free(out);
	}
	free(id);
	if (fx.image_built) {
		podman(&out, "rmi", "-f", fx.tag, NULL);
		free(out);
	}
	if (fx.store[0]) {
		for (int i = 0; i < 100 && procs_using(fx.store) > 0; i++)
			ktest_sleep_ms(50);
		umount_under(fx.d.dir);
	}
	/* pins (kthrottled --cleanup), then the temp dir with the store */
	if (fx.d.dir[0])
		ktest_daemon_cleanup(&fx.d);
	if (fx.cg[0])
		ktest_cgroup_destroy(fx.cg);
	arrivals_stop(&fx.a);
	unsetenv("CONTAINERS_STORAGE_CONF");
	unsetenv("CONTAINERS_CONF");
	return 0;
}

static void build_image(void)
{
	char repo[PATH_MAX], script[PATH_MAX + 32], build[PATH_MAX], *out = NULL;
	char *argv[] = { "/usr/bin/timeout", "-k", "5", "120", script, build, fx.tag, NULL };
	uint64_t t0 = ktest_now_ns();
	int rc;

	repo_dir(repo, sizeof(repo));
	snprintf(script, sizeof(script), "%s/scripts/build-image.sh", repo);
	snprintf(build, sizeof(build), "%s", ktest_build_dir());
	rc = ktest_run_capture(argv, &out);
	/* its summary line (the package list follows) */
	print_message("build-image.sh (%.1f s, exit %d): %.*s\n", (ktest_now_ns() - t0) / 1e9, rc,
		      (int)strcspn(out, "\n"), out);
	free(out);
	assert_int_equal(rc, 0);
	fx.image_built = true;
}

/* One layer (FROM scratch), the packages label, and packages.txt in it. */
static void check_image_contents(void)
{
	static const char fmt[] =
		"{{len .RootFS.Layers}} {{index .Config.Labels \"io.kthrottle.debian-packages\"}}";
	char *out = NULL, *txt, *cid, dst[PATH_MAX + 32], src[256], cidfile[PATH_MAX + 16];
	int rc;

	assert_int_equal(podman(&out, "image", "inspect", "--format", fmt, fx.tag, NULL), 0);
	print_message("image layers: %.*s\n", (int)strcspn(out, " "), out);
	assert_true(!strncmp(out, "1 ", 2));
	assert_non_null(strstr(out, "libc6:"));
	assert_non_null(strstr(out, "libbpf1:"));
	free(out);

	snprintf(cidfile, sizeof(cidfile), "%s/cid-files", fx.d.dir);
	assert_int_equal(podman(&out, "create", "--cidfile", cidfile, fx.tag, NULL), 0);
	free(out);
	cid = ktest_slurp(cidfile);
	cid[strcspn(cid, "\n")] = 0;
	snprintf(src, sizeof(src), "%s:/usr/share/kthrottle/packages.txt", cid);
	snprintf(dst, sizeof(dst), "%s/packages.txt", fx.d.dir);
	rc = podman(&out, "cp", src, dst, NULL);
	free(out);
	podman(&out, "rm", "-f", cid, NULL);
	free(out);
	free(cid);
	assert_int_equal(rc, 0);
	txt = ktest_slurp(dst);
	assert_non_null(strstr(txt, "libc6:"));
	assert_non_null(strstr(txt, "/usr/sbin/kthrottled"));
	free(txt);
}

/* The daemon in a container: config, socket and log in the temp dir, which
 * the container sees at the same path, as it sees bpffs and cgroup2. */
static void run_container(void)
{
	char body[1024], cg2[PATH_MAX], v_bpf[] = "/sys/fs/bpf:/sys/fs/bpf:rshared";
	char v_cg[2 * PATH_MAX + 2], v_dir[2 * sizeof(fx.d.dir) + 2], logopt[PATH_MAX + 8];
	char *out = NULL;
	uint64_t t0;
	int rc;

	snprintf(body, sizeof(body),
		 "limits:\n"
		 "  - name: " LIMIT "\n"
		 "    cgroups: [\"%s\"]\n"
		 "    match: {cidrs: [127.0.0.1/32], ports: %d, protocol: udp}\n"
		 "    unit: datagram\n"
		 "    burst: %.0f\n"
		 "    rateLimit: {max: %.0f}\n",
		 fx.cg, fx.a.port, BURST, RATE);
	assert_int_equal(ktest_daemon_config(&fx.d, body), 0);
	/* the cgroup2 mount as /proc/mounts has it (hybrid hosts:
	 * /sys/fs/cgroup/unified) */
	assert_int_equal(kt_cgroup2_mount(cg2, sizeof(cg2), NULL), 0);
	snprintf(v_cg, sizeof(v_cg), "%s:%s", cg2, cg2);
	snprintf(v_dir, sizeof(v_dir), "%s:%s", fx.d.dir, fx.d.dir);
	snprintf(logopt, sizeof(logopt), "path=%s", fx.d.log);
	/* --cgroups=disabled: podman makes no cgroups of its own on the host,
	 * so removing the container is all the cleanup there is */
	rc = podman(&out, "run", "-d", "--rm", "--privileged", "--network", "host",
		    "--cgroups=disabled", "--cidfile", fx.cidfile, "--log-driver", "k8s-file",
		    "--log-opt", logopt, "-v", v_bpf, "-v", v_cg, "-v", v_dir, fx.tag, "--config",
		    fx.d.config, NULL);
	if (rc != 0)
		print_message("podman run: exit %d: %s", rc, out);
	free(out);
	assert_int_equal(rc, 0);
	out = ktest_slurp(fx.cidfile);
	snprintf(fx.cid, sizeof(fx.cid), "%.*s", (int)strcspn(out, "\n"), out);
	free(out);
	assert_true(strlen(fx.cid) >= 12);

	/* up when its socket answers and the cgroup is a member; a container
	 * that exited is gone (--rm), its log stays */
	t0 = ktest_now_ns();
	for (;;) {
		char *st = ktest_daemon_cmd(&fx.d, "status json"), want[PATH_MAX + 16];
		bool up;

		snprintf(want, sizeof(want), "\"path\":\"%s\"", fx.cg);
		up = st && strstr(st, want);
		free(st);
		if (up)
			break;
		if (ktest_now_ns() - t0 > 15000000000ull ||
		    podman(&out, "container", "exists", fx.cid, NULL) != 0) {
			free(out);
			out = ktest_slurp(fx.d.log);
			print_message("kthrottled in container %.12s not up; log:\n%s", fx.cid,
				      out);
			free(out);
			fail();
		}
		free(out);
		ktest_sleep_ms(100);
	}
	print_message("container %.12s: kthrottled up after %.2f s\n", fx.cid,
		      (ktest_now_ns() - t0) / 1e9);
}

struct sent {
	unsigned long long ok, refused, other;
};

/* A child in the host cgroup sends a datagram to the receiver every
 * millisecond for secs; what it saw. */
static struct sent send_from_cgroup(double secs)
{
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons((uint16_t)fx.a.port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct sent r = { 0 };
	int p[2];

	assert_int_equal(pipe(p), 0);
	fx.kid = fork();
	assert_true(fx.kid >= 0);
	if (fx.kid == 0) {
		uint64_t t0 = ktest_now_ns();
		char b[16] = { 0 };
		int fd;

		close(p[0]);
		/* the socket is created in the cgroup: that is what the
		 * programs act on */
		if (ktest_cgroup_join(fx.cg) != 0)
			_exit(2);
		fd = socket(AF_INET, SOCK_DGRAM, 0);
		if (fd < 0)
			_exit(3);
		while (ktest_now_ns() - t0 < (uint64_t)(secs * 1e9)) {
			if (sendto(fd, b, sizeof(b), 0, (struct sockaddr *)&to, sizeof(to)) >= 0)
				r.ok++;
			else if (errno == EBUSY)
				r.refused++;
			else
				r.other++;
			usleep(1000);
		}
		_exit(write(p[1], &r, sizeof(r)) == sizeof(r) ? 0 : 4);
	}
	kt_child_result(p, &fx.kid, &r, sizeof(r));
	return r;
}

static void test_image_enforces_host_cgroup(void **state)
{
	char *out = NULL, status_arg[] = "status", sock_opt[] = "--socket",
	     health_arg[] = "health";
	unsigned long long before, arrived;
	double bound, rate, throttled = 0;
	struct sent s;
	uint64_t t0;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	if (!fx.podman[0]) {
		print_message("skipped: podman not installed (scripts/setup.sh installs it)\n");
		skip();
	}
	t0 = ktest_now_ns();
	podman_setup();
	build_image();
	check_image_contents();
	run_container();

	before = arrivals_total(&fx.a);
	s = send_from_cgroup(SEND_S);
	ktest_sleep_ms(100); /* the last datagrams land */
	arrived = arrivals_total(&fx.a) - before;
	bound = RATE * SEND_S + BURST + 2;
	rate = (arrived - (arrived > BURST ? BURST : 0)) / SEND_S;
	print_message("from %s over %.1f s: %llu sent, %llu refused (EBUSY), %llu other errors; "
		      "%llu arrived = %.1f/s after the burst (limit %.0f/s, bound %.0f)\n",
		      fx.cg, SEND_S, s.ok, s.refused, s.other, arrived, rate, RATE, bound);
	assert_true(s.refused > 0);
	assert_int_equal(s.other, 0);
	assert_true(arrived <= bound);
	assert_true(arrived >= RATE * SEND_S * 0.8);
	assert_int_equal(arrivals_drops(&fx.a), 0);

	/* the readiness probe's command, inside the container */
	assert_int_equal(podman(&out, "exec", fx.cid, "kthrottlectl", sock_opt, fx.d.socket,
				health_arg, NULL),
			 0);
	print_message("podman exec kthrottlectl health:\n%s", out);
	assert_non_null(strstr(out, "ready\nkernel ok\n"));
	free(out);
	/* status from inside the container, as an operator would ask */
	assert_int_equal(podman(&out, "exec", fx.cid, "kthrottlectl", sock_opt, fx.d.socket,
				status_arg, NULL),
			 0);
	print_message("podman exec kthrottlectl status:\n%s", out);
	assert_non_null(strstr(out, LIMIT " "));
	assert_non_null(strstr(out, "datagram"));
	assert_non_null(strstr(out, "20.000"));
	assert_non_null(strstr(out, fx.cg));
	free(out);
	/* and the host's kthrottlectl on the shared socket counts the refusals */
	assert_int_equal(ktest_run_bin("kthrottlectl", &out, "--socket", fx.d.socket, "status",
				       "--json", NULL),
			 0);
	assert_true(ktest_json_limit_num(out, LIMIT, "throttled", &throttled));
	free(out);
	print_message("status --json on the host: throttled %.0f; whole test %.1f s\n", throttled,
		      (ktest_now_ns() - t0) / 1e9);
	assert_true(throttled > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_image_enforces_host_cgroup, setup, teardown),
	};

	/* every podman call has its own timeout; this is the backstop */
	alarm(150);
	return cmocka_run_group_tests_name("e2e_image", tests, NULL, NULL);
}
