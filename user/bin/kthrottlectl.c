/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* kthrottlectl: inspect and steer kthrottled. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include "bpf_loader.h"
#include "config.h"
#include "daemon.h"
#include "inspect.h"
#include "log.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: kthrottlectl [options] COMMAND\n"
		"\n"
		"Commands:\n"
		"  status [--json]   every limit: cgroups, rates, burst, ramp, admitted,\n"
		"                    throttled (from the daemon; from the pinned maps when\n"
		"                    the daemon is not running)\n"
		"  watch             admitted/s and throttled/s per limit, read from the\n"
		"                    pinned maps every --interval seconds\n"
		"  reload            make the daemon re-read its configuration\n"
		"  cleanup           detach every program and remove every pin\n"
		"  bpftool           print the bpftool commands that show the kernel state\n"
		"\n"
		"Options:\n"
		"  -c, --config FILE   take the socket and pin directory from FILE\n"
		"  -s, --socket PATH   daemon control socket (default " KT_DEFAULT_SOCKET ")\n"
		"  -p, --pin-dir DIR   pin directory (default " KT_DEFAULT_PIN_DIR ")\n"
		"      --json          JSON output (status)\n"
		"  -i, --interval SEC  watch period, default 1\n"
		"  -n, --count N       watch: stop after N periods (default: until ^C)\n"
		"  -h, --help          this text\n"
		"\n"
		"Exit status: 0 ok, 1 runtime error (daemon or maps unreachable), 2 usage error.\n");
}

static int daemon_request(const char *sock, const char *cmd, char **reply)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = 10 };
	size_t len = 0, cap = 4096;
	char *buf;
	int fd;

	if (strlen(sock) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, sock);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    write(fd, cmd, strlen(cmd)) != (ssize_t)strlen(cmd) || write(fd, "\n", 1) != 1) {
		int e = errno;
		close(fd);
		return -e;
	}
	buf = malloc(cap);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	for (;;) {
		ssize_t r;
		if (len + 1 >= cap) {
			char *nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				close(fd);
				return -ENOMEM;
			}
			buf = nb;
			cap *= 2;
		}
		r = read(fd, buf + len, cap - 1 - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		len += (size_t)r;
	}
	buf[len] = 0;
	close(fd);
	*reply = buf;
	return 0;
}

static int open_maps(const char *pin_dir, struct kt_bpf *b)
{
	char err[KT_ERR_LEN];
	int ret = kt_bpf_open_pinned(b, pin_dir, err, sizeof(err));

	if (ret)
		kt_err("no kthrottle state pinned in %s (%s)", pin_dir, err);
	return ret;
}

static int status_from_maps(const char *pin_dir, bool json)
{
	struct kt_bpf b;
	struct kt_kstate *st = calloc(1, sizeof(*st));
	int ret;

	if (!st)
		return KT_EXIT_RUNTIME;
	if (open_maps(pin_dir, &b)) {
		free(st);
		return KT_EXIT_RUNTIME;
	}
	ret = kt_inspect_read(&b, st);
	if (ret) {
		kt_err("cannot read maps in %s: %s", pin_dir, strerror(-ret));
		goto out;
	}
	if (json) {
		printf("{\"daemon\":false,\"pin_dir\":\"%s\",\"limits\":[", pin_dir);
	} else {
		printf("daemon not running; kernel state pinned in %s (still enforcing)\n", pin_dir);
		printf("%-16s %-10s %-5s %12s %8s %12s %12s\n", "LIMIT", "UNIT", "SCOPE",
		       "BUCKET_RATE", "BURST", "ADMITTED", "THROTTLED");
	}
	for (int i = 0; i < st->n_limits; i++) {
		const struct kt_klimit *l = &st->limits[i];
		/* bounds-checked: a value written by hand reads as "?" */
		const char *unit = kt_unit_name(l->info.unit);
		const char *scope = kt_scope_name(l->info.scope);
		double rate = l->n_members ? l->members[0].rate : 0;
		unsigned long long burst = l->n_members ? l->members[0].burst : 0;

		if (json) {
			printf("%s{\"name\":\"%s\",\"id\":%u,\"unit\":\"%s\",\"scope\":\"%s\","
			       "\"bucket_rate\":%.6g,\"burst\":%llu,\"admitted\":%llu,\"throttled\":%llu,"
			       "\"cgroups\":[",
			       i ? "," : "", l->info.name, l->id, unit, scope, rate, burst,
			       (unsigned long long)l->total.admitted,
			       (unsigned long long)l->total.throttled);
			for (int j = 0; j < l->n_members; j++)
				printf("%s{\"cgroup_id\":%llu,\"slot\":%u,\"admitted\":%llu,\"throttled\":%llu}",
				       j ? "," : "", (unsigned long long)l->members[j].cgroup_id,
				       l->members[j].slot,
				       (unsigned long long)l->members[j].counters.admitted,
				       (unsigned long long)l->members[j].counters.throttled);
			printf("]}");
		} else {
			printf("%-16s %-10s %-5s %12.3f %8llu %12llu %12llu\n", l->info.name, unit,
			       scope, rate, burst, (unsigned long long)l->total.admitted,
			       (unsigned long long)l->total.throttled);
			for (int j = 0; j < l->n_members; j++)
				printf("  cgroup id %llu (bucket %u)%s\n",
				       (unsigned long long)l->members[j].cgroup_id, l->members[j].slot,
				       l->members[j].fallback_active
					       ? "  validity lapsed: store-failure rate in force"
					       : "");
		}
	}
	if (json)
		printf("]}\n");
out:
	kt_bpf_close(&b);
	free(st);
	return ret ? KT_EXIT_RUNTIME : KT_EXIT_OK;
}

static volatile sig_atomic_t stop_watch;
static void on_sigint(int sig)
{
	(void)sig;
	stop_watch = 1;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int watch(const char *pin_dir, double interval, long count)
{
	struct kt_kstate *prev = calloc(1, sizeof(*prev)), *cur = calloc(1, sizeof(*cur));
	struct kt_bpf b;
	double t0, t1, tstart;
	int ret = KT_EXIT_OK;

	if (!prev || !cur || open_maps(pin_dir, &b)) {
		free(prev);
		free(cur);
		return KT_EXIT_RUNTIME;
	}
	signal(SIGINT, on_sigint);
	signal(SIGTERM, on_sigint);
	kt_inspect_read(&b, prev);
	t0 = tstart = now_s();
	printf("%8s  %-16s %12s %12s %12s %12s\n", "TIME_S", "LIMIT", "ADMITTED/s", "THROTTLED/s",
	       "RATE/bucket", "BYTES/s");
	fflush(stdout);
	for (long n = 0; (count <= 0 || n < count) && !stop_watch; n++) {
		struct timespec ts = { (time_t)interval, (long)((interval - (time_t)interval) * 1e9) };
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR && !stop_watch)
			;
		if (stop_watch)
			break;
		if (kt_inspect_read(&b, cur)) {
			kt_err("cannot read maps in %s", pin_dir);
			ret = KT_EXIT_RUNTIME;
			break;
		}
		t1 = now_s();
		for (int i = 0; i < cur->n_limits; i++) {
			const struct kt_klimit *c = &cur->limits[i];
			const struct kt_klimit *p = kt_inspect_find(prev, c->info.name);
			double dt = t1 - t0;
			if (!p)
				continue;
			printf("%8.1f  %-16s %12.1f %12.1f %12.3f %12.0f\n", t1 - tstart, c->info.name,
			       (double)(c->total.admitted - p->total.admitted) / dt,
			       (double)(c->total.throttled - p->total.throttled) / dt,
			       c->n_members ? c->members[0].rate : 0.0,
			       (double)(c->total.admitted_bytes - p->total.admitted_bytes) / dt);
		}
		fflush(stdout);
		struct kt_kstate *tmp = prev;
		prev = cur;
		cur = tmp;
		t0 = t1;
	}
	kt_bpf_close(&b);
	free(prev);
	free(cur);
	return ret;
}

static void print_bpftool(const char *pin)
{
	printf("# Limits (name, unit, scope) by id:\n"
	       "bpftool map dump pinned %s/kt_limits\n"
	       "# Which bucket each (cgroup id, limit id) is charged to:\n"
	       "bpftool map dump pinned %s/kt_members\n"
	       "# Buckets: tat = theoretical arrival time (CLOCK_BOOTTIME ns),\n"
	       "# interval_fp = ns per token << 16 (rate = 65536e9 / interval_fp tokens/s),\n"
	       "# burst = tokens that may pass back to back:\n"
	       "bpftool map lookup pinned %s/kt_buckets key 0 0 0 0\n"
	       "# Per-CPU counters of bucket 0 (admitted, throttled, bytes):\n"
	       "bpftool map lookup pinned %s/kt_counters key 0 0 0 0\n"
	       "# Destination classifier (prefix -> rules) and port filters:\n"
	       "bpftool map dump pinned %s/kt_classify\n"
	       "# Attached programs, per cgroup:\n"
	       "ls %s/links; bpftool cgroup tree\n"
	       "bpftool link show\n",
	       pin, pin, pin, pin, pin, pin);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "socket", required_argument, NULL, 's' },
		{ "pin-dir", required_argument, NULL, 'p' },
		{ "json", no_argument, NULL, 'j' },
		{ "interval", required_argument, NULL, 'i' },
		{ "count", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *sock = KT_DEFAULT_SOCKET, *pin_dir = KT_DEFAULT_PIN_DIR, *cmd;
	struct kt_config cfg = { 0 };
	bool json = false, have_cfg = false;
	double interval = 1;
	long count = 0;
	char err[KT_ERR_LEN], *reply = NULL, *end;
	int c, ret;

	kt_log_init("kthrottlectl", KT_LOG_INFO);
	opterr = 0; /* one-line errors below instead of getopt's message */
	while ((c = getopt_long(argc, argv, ":c:s:p:i:n:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			if (kt_config_load(optarg, &cfg, err, sizeof(err))) {
				kt_err("%s", err);
				return KT_EXIT_CONFIG;
			}
			have_cfg = true;
			break;
		case 's':
			sock = optarg;
			break;
		case 'p':
			pin_dir = optarg;
			break;
		case 'j':
			json = true;
			break;
		case 'i':
			interval = strtod(optarg, &end);
			if (*end || !(interval >= 0.05 && interval <= 3600)) {
				kt_err("--interval: '%s' is not a number of seconds in 0.05..3600", optarg);
				return KT_EXIT_CONFIG;
			}
			break;
		case 'n':
			count = strtol(optarg, &end, 10);
			if (*end || count < 1) {
				kt_err("--count: '%s' is not a positive integer", optarg);
				return KT_EXIT_CONFIG;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		case ':':
			kt_err("option '%s' needs a value (see --help)", argv[optind - 1]);
			return KT_EXIT_CONFIG;
		default:
			kt_err("unknown option '%s' (see --help)", argv[optind - 1]);
			return KT_EXIT_CONFIG;
		}
	}
	if (have_cfg) {
		sock = cfg.socket_path;
		pin_dir = cfg.pin_dir;
	}
	if (optind >= argc) {
		kt_err("no command given (status, watch, reload, cleanup, bpftool; see --help)");
		return KT_EXIT_CONFIG;
	}
	cmd = argv[optind++];
	/* getopt permutes, so options may also follow the command */
	if (optind < argc) {
		kt_err("unexpected argument '%s' for %s (see --help)", argv[optind], cmd);
		ret = KT_EXIT_CONFIG;
		goto out;
	}

	if (!strcmp(cmd, "status")) {
		ret = daemon_request(sock, json ? "status json" : "status", &reply);
		if (ret == 0) {
			fputs(reply, stdout);
			ret = strncmp(reply, "error:", 6) ? KT_EXIT_OK : KT_EXIT_RUNTIME;
		} else {
			ret = status_from_maps(pin_dir, json);
		}
	} else if (!strcmp(cmd, "reload")) {
		ret = daemon_request(sock, "reload", &reply);
		if (ret) {
			kt_err("cannot reach kthrottled on %s: %s", sock, strerror(-ret));
			ret = KT_EXIT_RUNTIME;
		} else {
			fputs(reply, strncmp(reply, "ok", 2) ? stderr : stdout);
			ret = strncmp(reply, "ok", 2) ? KT_EXIT_RUNTIME : KT_EXIT_OK;
		}
	} else if (!strcmp(cmd, "watch")) {
		ret = watch(pin_dir, interval, count);
	} else if (!strcmp(cmd, "cleanup")) {
		ret = kt_bpf_cleanup(pin_dir, err, sizeof(err));
		if (ret) {
			kt_err("%s", err);
			ret = KT_EXIT_RUNTIME;
		} else {
			printf("removed every kthrottle link and pin under %s\n", pin_dir);
		}
	} else if (!strcmp(cmd, "bpftool")) {
		print_bpftool(pin_dir);
		ret = KT_EXIT_OK;
	} else {
		kt_err("unknown command '%s' (see --help)", cmd);
		ret = KT_EXIT_CONFIG;
	}
out:
	free(reply);
	if (have_cfg)
		kt_config_free(&cfg);
	return ret;
}
