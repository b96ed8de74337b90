/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* kthrottlectl: inspect and steer kthrottled. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include "kernel/bpf_loader.h"
#include "base/config.h"
#include "control/daemon.h"
#include "kernel/inspect.h"
#include "kthrottle_client.h"
#include "base/log.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: kthrottlectl [options] COMMAND\n"
		"\n"
		"Commands:\n"
		"  status [--json]   every limit: cgroups, rates, burst, ramp, admitted,\n"
		"                    throttled (from the daemon; from the pinned maps when\n"
		"                    the daemon is not running: then exit 1 when no\n"
		"                    program is attached, maps left by an interrupted start)\n"
		"  watch             admitted/s and throttled/s per limit, read from the\n"
		"                    pinned maps every --interval seconds\n"
		"  top               the daemon's status redrawn every --interval seconds\n"
		"                    (limits, pools, members, throttle events)\n"
		"  reload            make the daemon re-read its configuration\n"
		"  health [--live]   ask the daemon whether it is ready: prints \"ready\" or\n"
		"                    \"not ready\", then a line per component in use\n"
		"                    (kernel, kubernetes, store); exit 0 when ready. With\n"
		"                    --live: whether its loop runs (\"live\"). Never reads\n"
		"                    the pinned maps: no answer within 3 s is exit 1\n"
		"  cleanup [--force] detach every program and remove every pin; refused for a\n"
		"                    directory that is not kthrottle's (on bpffs, owned by\n"
		"                    root, holding its maps) and, without --force, while a\n"
		"                    kthrottled runs on it\n"
		"  bpftool           print the bpftool commands that show the kernel state\n"
		"  subscribe LIMIT   print a line when LIMIT starts refusing (\"throttled LIMIT\n"
		"                    reason=share|fallback|closed retry_after_ms=N\") and when\n"
		"                    it stops (\"resumed LIMIT\"); until ^C, or -n lines\n"
		"  check TAG         ask a tag limit's query server whether to serve TAG:\n"
		"                    prints OK (exit 0) or NO (exit 1); the query takes a\n"
		"                    token as an application's would. Unanswered (no\n"
		"                    server, refused, no reply within --timeout-ms, a reply\n"
		"                    other than OK/NO) is fail-safe, as clients are: prints\n"
		"                    \"OK (unanswered: REASON; clients serve)\", a warning on\n"
		"                    stderr, exit 0. A TAG that is empty, over 255 bytes or\n"
		"                    holds a newline is a usage error\n"
		"\n"
		"Options:\n"
		"  -c, --config FILE   take the socket and pin directory from FILE\n"
		"  -s, --socket PATH   daemon control socket (default " KT_DEFAULT_SOCKET ")\n"
		"  -p, --pin-dir DIR   pin directory (default " KT_DEFAULT_PIN_DIR ")\n"
		"      --json          JSON output (status)\n"
		"      --force         cleanup even while a kthrottled runs on the pin dir\n"
		"      --live          health: liveness instead of readiness\n"
		"  -i, --interval SEC  watch and top period, default 1\n"
		"  -n, --count N       watch, top: stop after N periods; subscribe: after N\n"
		"                      lines (default: until ^C)\n"
		"      --query WHERE   check: the query server, a socket PATH or HOST:PORT\n"
		"                      (IPv4, or [IPv6]:PORT); default: the first tag\n"
		"                      limit's query socket of --config, else\n"
		"                      " KTHROTTLE_TAGQ_DEFAULT_SOCKET "\n"
		"      --timeout-ms N  check: the query's deadline, 1..10000 ms (default 500)\n"
		"  -h, --help          this text\n"
		"\n"
		"The control socket must be a socket owned by root. A daemon that does not\n"
		"answer within 3 s (reload: 10 s) is an error, as is an empty reply.\n"
		"\n"
		"Exit status: 0 ok, 1 runtime error (daemon or maps unreachable, daemon hung,\n"
		"busy or not owned by root), 2 usage error. check: 0 OK (or unanswered), 1 NO,\n"
		"2 usage error.\n");
}

/* Every exchange with the daemon is bounded: a hung or flooded daemon makes
 * kthrottlectl fail with one line, not wait. Reload may wait on the store. */
#define CTL_TIMEOUT_MS 3000
#define CTL_RELOAD_TIMEOUT_MS 10000
#define CTL_MAX_REPLY (64u << 20)
#define CTL_CHECK_TIMEOUT_MS 500

static long long ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void set_sndtimeo(int fd, long long ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

	if (ms <= 0)
		tv.tv_usec = 1000; /* 0 would mean no timeout */
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* Sends `cmd` and reads the whole reply within timeout_ms. Returns 0 with a
 * malloc'd, newline-terminated reply; -ENOENT or -ECONNREFUSED when no
 * daemon is running (no socket, or a stale one); any other error with a
 * one-line message in err. The socket must be a socket owned by root and
 * the listener must run as root, else a local user could answer for the
 * daemon. */
/* A streaming reply's lines, one call each; non-zero stops reading. */
typedef int (*line_fn)(const char *line, void *arg);

static int daemon_exchange(const char *sock, const char *cmd, int timeout_ms, line_fn on_line,
			   void *arg, char **reply, char *err, size_t errlen);

static int daemon_request(const char *sock, const char *cmd, int timeout_ms, char **reply,
			  char *err, size_t errlen)
{
	return daemon_exchange(sock, cmd, timeout_ms, NULL, NULL, reply, err, errlen);
}

/* Sends cmd and reads the reply: whole, into *reply (on_line NULL), or line
 * by line to on_line until the daemon closes or on_line says stop; then
 * the timeout bounds only the first line (a subscription waits). */
static int daemon_exchange(const char *sock, const char *cmd, int timeout_ms, line_fn on_line,
			   void *arg, char **reply, char *err, size_t errlen)
{
	size_t delivered = 0;
	bool streaming = false;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	long long deadline = ms_now() + timeout_ms;
	struct ucred cred;
	socklen_t credlen = sizeof(cred);
	size_t len = 0, cap = 4096, cmdlen = strlen(cmd);
	struct stat st;
	char *buf = NULL, *line = NULL;
	int fd = -1, ret;

	*reply = NULL;
	if (strlen(sock) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "socket path %s: longer than %zu bytes", sock,
			 sizeof(sa.sun_path) - 1);
		return -ENAMETOOLONG;
	}
	strcpy(sa.sun_path, sock);
	if (lstat(sock, &st) < 0) {
		ret = -errno;
		snprintf(err, errlen, "cannot reach kthrottled on %s: %s", sock, strerror(-ret));
		return ret;
	}
	if (!S_ISSOCK(st.st_mode)) {
		snprintf(err, errlen, "%s is not a socket: not talking to it", sock);
		return -ENOTSOCK;
	}
	if (st.st_uid != 0) {
		snprintf(err, errlen, "%s is owned by uid %u, not root: not talking to it", sock,
			 (unsigned)st.st_uid);
		return -EPERM;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		ret = -errno;
		snprintf(err, errlen, "socket: %s", strerror(-ret));
		return ret;
	}
	/* a full backlog blocks connect() up to SO_SNDTIMEO */
	set_sndtimeo(fd, deadline - ms_now());
	while ((ret = connect(fd, (struct sockaddr *)&sa, sizeof(sa))) < 0 && errno == EINTR)
		;
	if (ret < 0) {
		ret = -errno;
		if (ret == -EAGAIN || ret == -EINPROGRESS)
			snprintf(err, errlen, "kthrottled on %s does not accept connections (busy or hung)",
				 sock);
		else
			snprintf(err, errlen, "cannot reach kthrottled on %s: %s", sock, strerror(-ret));
		goto fail;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &credlen) < 0 || cred.uid != 0) {
		snprintf(err, errlen, "the listener on %s does not run as root: not talking to it", sock);
		ret = -EPERM;
		goto fail;
	}
	if (asprintf(&line, "%s\n", cmd) < 0) {
		line = NULL;
		ret = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	for (size_t off = 0; off < cmdlen + 1;) {
		ssize_t w;

		set_sndtimeo(fd, deadline - ms_now());
		/* a daemon that dropped us must not kill us with SIGPIPE */
		w = send(fd, line + off, cmdlen + 1 - off, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			ret = w < 0 ? -errno : -EIO;
			if (ret == -EAGAIN)
				snprintf(err, errlen, "kthrottled on %s did not take the command within %d ms",
					 sock, timeout_ms);
			else
				snprintf(err, errlen, "kthrottled on %s closed the connection: %s", sock,
					 strerror(-ret));
			goto fail;
		}
		off += (size_t)w;
	}
	buf = malloc(cap);
	if (!buf) {
		ret = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		long long left = deadline - ms_now();
		ssize_t r;

		if (len + 1 >= cap) {
			char *nb = cap < CTL_MAX_REPLY ? realloc(buf, cap * 2) : NULL;
			if (!nb) {
				ret = -ENOMEM;
				snprintf(err, errlen, "reply from kthrottled on %s is too large", sock);
				goto fail;
			}
			buf = nb;
			cap *= 2;
		}
		r = streaming ? poll(&p, 1, -1) : left > 0 ? poll(&p, 1, (int)left) : 0;
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0) {
			ret = -ETIMEDOUT;
			snprintf(err, errlen, "kthrottled on %s did not answer within %d ms", sock,
				 timeout_ms);
			goto fail;
		}
		r = r < 0 ? -1 : recv(fd, buf + len, cap - 1 - len, MSG_DONTWAIT);
		if (r < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (r < 0) {
			ret = -errno;
			snprintf(err, errlen, "reading from kthrottled on %s: %s", sock, strerror(-ret));
			goto fail;
		}
		if (r == 0)
			break;
		len += (size_t)r;
		if (!on_line)
			continue;
		/* hand over every whole line; keep the cut one */
		char *nl;
		while ((nl = memchr(buf + delivered, '\n', len - delivered))) {
			*nl = 0;
			if (strlen(buf + delivered) != (size_t)(nl - buf - delivered)) {
				ret = -EPROTO;
				snprintf(err, errlen, "kthrottled on %s sent a malformed line", sock);
				goto fail;
			}
			streaming = true;
			if (on_line(buf + delivered, arg)) {
				close(fd);
				free(line);
				free(buf);
				return 0;
			}
			delivered = (size_t)(nl - buf) + 1;
		}
		memmove(buf, buf + delivered, len - delivered);
		len -= delivered;
		delivered = 0;
	}
	if (on_line) {
		/* the daemon closed: after lines that is the end, before any a failure */
		close(fd);
		free(line);
		free(buf);
		if (streaming && len == 0)
			return 0;
		snprintf(err, errlen, "kthrottled on %s %s", sock,
			 streaming ? "closed the connection in the middle of a line"
				   : "closed the connection without answering");
		return -EPROTO;
	}
	buf[len] = 0;
	/* every reply is whole lines: nothing, or a cut line, is a failure */
	if (len == 0 || buf[len - 1] != '\n' || strlen(buf) != len) {
		ret = -EPROTO;
		snprintf(err, errlen, "kthrottled on %s %s", sock,
			 len == 0		 ? "closed the connection without answering"
			 : buf[len - 1] != '\n' ? "sent an incomplete reply"
						 : "sent a malformed reply");
		goto fail;
	}
	close(fd);
	free(line);
	*reply = buf;
	return 0;
fail:
	close(fd);
	free(line);
	free(buf);
	return ret;
}

/* subscribe: the daemon's first line is "ok: ..." or "error: ...", then
 * the events, printed as they come (flushed: often piped). */
struct sub_state {
	long count, seen; /* count 0: no end */
	bool failed;
};

static int sub_line(const char *line, void *arg)
{
	struct sub_state *st = arg;

	if (!strncmp(line, "error:", 6)) {
		fprintf(stderr, "%s\n", line);
		st->failed = true;
		return 1;
	}
	if (!strncmp(line, "ok:", 3))
		return 0;
	printf("%s\n", line);
	fflush(stdout);
	return st->count && ++st->seen >= st->count;
}

/* `s` as a JSON string, quotes included: the pin dir comes from the command
 * line and names from maps anyone with access may have written. */
static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static int open_maps(const char *pin_dir, struct kt_bpf *b)
{
	char err[KT_ERR_LEN];
	int ret = kt_bpf_open_pinned(b, pin_dir, err, sizeof(err));

	if (ret)
		kt_err("no kthrottle state pinned in %s (%s)", pin_dir, err);
	return ret;
}

static bool id_in(uint64_t id, const uint64_t *ids, int n)
{
	for (int i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

/* Whether the pinned state enforces without a daemon: maps alone do not.
 * A cgroup limit's members enforce only through links the kernel still has
 * attached; none attached while some limit needs them (or with no limit
 * written at all) is what a start killed between pinning its maps and
 * attaching its programs leaves behind. Limits of unit request need no
 * program (applications charge kt_coop themselves). */
static bool pinned_enforcing(const struct kt_kstate *st, int n_attached)
{
	bool needs_progs = st->n_limits == 0;

	for (int i = 0; i < st->n_limits; i++)
		needs_progs |= st->limits[i].info.unit != KT_UNIT_REQUEST;
	return n_attached > 0 || !needs_progs;
}

/* Whether pin_dir holds any of our pins: a start killed before it pinned
 * every map leaves some. */
static bool some_pins_left(const char *pin_dir)
{
	DIR *dir = opendir(pin_dir);
	struct dirent *e;
	bool found = false;

	if (!dir)
		return false;
	while (!found && (e = readdir(dir)))
		found = !strncmp(e->d_name, "kt_", 3);
	closedir(dir);
	return found;
}

static int status_from_maps(const char *pin_dir, bool json)
{
	char err[KT_ERR_LEN];
	struct kt_bpf b;
	struct kt_kstate *st = calloc(1, sizeof(*st));
	uint64_t *ids = NULL;
	int ret, n_ids = 0;
	bool enforcing = false;

	if (!st)
		return KT_EXIT_RUNTIME;
	if (kt_bpf_open_pinned(&b, pin_dir, err, sizeof(err))) {
		kt_kstate_free(st);
		if (!some_pins_left(pin_dir)) {
			kt_err("no kthrottle state pinned in %s (%s)", pin_dir, err);
			return KT_EXIT_RUNTIME;
		}
		if (json) {
			printf("{\"daemon\":false,\"enforcing\":false,\"partial\":true,\"pin_dir\":");
			json_str(stdout, pin_dir);
			printf("}\n");
		} else {
			printf("daemon not running; not enforcing: programs missing, some maps left in %s from an interrupted start (start kthrottled to complete it, or run kthrottlectl cleanup)\n",
			       pin_dir);
		}
		return KT_EXIT_RUNTIME;
	}
	ret = kt_inspect_read(&b, st);
	if (ret) {
		kt_err("cannot read maps in %s: %s", pin_dir, strerror(-ret));
		goto out;
	}
	n_ids = kt_bpf_attached_cgroups(pin_dir, &ids);
	if (n_ids < 0) {
		ret = n_ids;
		kt_err("cannot read the links in %s/links: %s", pin_dir, strerror(-ret));
		goto out;
	}
	enforcing = pinned_enforcing(st, n_ids);
	if (json) {
		printf("{\"daemon\":false,\"enforcing\":%s,\"attached_cgroups\":%d,\"pin_dir\":",
		       enforcing ? "true" : "false", n_ids);
		json_str(stdout, pin_dir);
		printf(",\"limits\":[");
	} else {
		if (enforcing)
			printf("daemon not running; kernel state pinned in %s (still enforcing)\n",
			       pin_dir);
		else
			printf("daemon not running; not enforcing: programs missing, maps left in %s from an interrupted start (start kthrottled to complete it, or run kthrottlectl cleanup)\n",
			       pin_dir);
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
			printf("%s{\"name\":", i ? "," : "");
			json_str(stdout, l->info.name);
			printf(",\"id\":%u,\"unit\":", l->id);
			json_str(stdout, unit);
			printf(",\"scope\":");
			json_str(stdout, scope);
			printf(",\"bucket_rate\":%.6g,\"burst\":%llu,\"admitted\":%llu,\"throttled\":%llu,"
			       "\"cgroups\":[",
			       rate, burst,
			       (unsigned long long)l->total.admitted,
			       (unsigned long long)l->total.throttled);
			for (int j = 0; j < l->n_members; j++)
				printf("%s{\"cgroup_id\":%llu,\"slot\":%u,\"attached\":%s,\"admitted\":%llu,\"throttled\":%llu}",
				       j ? "," : "", (unsigned long long)l->members[j].cgroup_id,
				       l->members[j].slot,
				       id_in(l->members[j].cgroup_id, ids, n_ids) ? "true" : "false",
				       (unsigned long long)l->members[j].counters.admitted,
				       (unsigned long long)l->members[j].counters.throttled);
			printf("]}");
		} else {
			printf("%-16s %-10s %-5s %12.3f %8llu %12llu %12llu\n", l->info.name, unit,
			       scope, rate, burst, (unsigned long long)l->total.admitted,
			       (unsigned long long)l->total.throttled);
			for (int j = 0; j < l->n_members; j++)
				printf("  cgroup id %llu (bucket %u)%s%s\n",
				       (unsigned long long)l->members[j].cgroup_id, l->members[j].slot,
				       l->members[j].fallback_active
					       ? "  validity lapsed: store-failure rate in force"
					       : "",
				       l->info.unit != KT_UNIT_REQUEST &&
						       !id_in(l->members[j].cgroup_id, ids, n_ids)
					       ? "  no program attached: not enforced"
					       : "");
		}
	}
	if (json)
		printf("]}\n");
out:
	free(ids);
	kt_bpf_close(&b);
	kt_kstate_free(st);
	return ret || !enforcing ? KT_EXIT_RUNTIME : KT_EXIT_OK;
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

/* top: the daemon's status, redrawn every interval on a terminal (each
 * frame after an ANSI clear; plain frames one after the other when stdout
 * is not a terminal), until ^C or count frames. */
static int top(const char *sock, double interval, long count)
{
	bool tty = isatty(1);
	char err[KT_ERR_LEN], *reply = NULL;
	int ret = KT_EXIT_OK;

	signal(SIGINT, on_sigint);
	signal(SIGTERM, on_sigint);
	for (long n = 0; (count <= 0 || n < count) && !stop_watch; n++) {
		if (n) {
			struct timespec ts = { (time_t)interval,
					       (long)((interval - (time_t)interval) * 1e9) };
			while (nanosleep(&ts, &ts) < 0 && errno == EINTR && !stop_watch)
				;
			if (stop_watch)
				break;
		}
		if (daemon_request(sock, "status", CTL_TIMEOUT_MS, &reply, err, sizeof(err))) {
			kt_err("%s", err);
			ret = KT_EXIT_RUNTIME;
			break;
		}
		if (tty)
			fputs("\033[H\033[2J", stdout);
		else if (n)
			putchar('\n');
		fputs(reply, stdout);
		fflush(stdout);
		free(reply);
		reply = NULL;
	}
	return ret;
}

static int watch(const char *pin_dir, double interval, long count)
{
	struct kt_kstate *prev = calloc(1, sizeof(*prev)), *cur = calloc(1, sizeof(*cur));
	struct kt_bpf b;
	double t0, t1, tstart;
	int ret = KT_EXIT_OK;

	if (!prev || !cur || open_maps(pin_dir, &b)) {
		kt_kstate_free(prev);
		kt_kstate_free(cur);
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
	kt_kstate_free(prev);
	kt_kstate_free(cur);
	return ret;
}

static void print_bpftool(const char *pin)
{
	printf("# Limits (name, unit, scope, protocols, ports) by id:\n"
	       "bpftool map dump pinned %s/kt_limits\n"
	       "# Which bucket each (cgroup id, limit id) is charged to (the first `own`\n"
	       "# entries are the cgroup's, the rest its member ancestors'):\n"
	       "bpftool map dump pinned %s/kt_members\n"
	       "# Buckets: tat = theoretical arrival time (CLOCK_BOOTTIME ns),\n"
	       "# interval_fp = ns per token << 16 (rate = 65536e9 / interval_fp tokens/s),\n"
	       "# burst = tokens that may pass back to back:\n"
	       "bpftool map lookup pinned %s/kt_buckets key 0 0 0 0\n"
	       "# Per-CPU counters of bucket 0 (admitted, throttled, bytes):\n"
	       "bpftool map lookup pinned %s/kt_counters key 0 0 0 0\n"
	       "# Destination prefixes of each limit ({prefixlen 32 + len, limit_id, addr}):\n"
	       "bpftool map dump pinned %s/kt_dests\n"
	       "# Attached programs, per cgroup:\n"
	       "ls %s/links; bpftool cgroup tree\n"
	       "bpftool link show\n",
	       pin, pin, pin, pin, pin, pin);
}

/* check: one tag query through libkthrottle's client (kthrottle_tagq), so
 * the command answers exactly what an application would, fail-safe included. */
static int check(const char *where, const char *tag, uint32_t timeout_ms)
{
	struct kthrottle_tagq *q;
	size_t len = strlen(tag);
	int r, err;

	if (!len || len > KT_TAG_MAX_LEN || strchr(tag, '\n')) {
		kt_err("check: a tag is 1..%d bytes without a newline", KT_TAG_MAX_LEN);
		return KT_EXIT_CONFIG;
	}
	if (kthrottle_tagq_open(where, timeout_ms, &q)) {
		kt_err("check: %s", kthrottle_last_error());
		return KT_EXIT_CONFIG;
	}
	r = kthrottle_tagq_check(q, tag, len);
	err = kthrottle_tagq_last_error(q);
	kthrottle_tagq_close(q);
	if (err) {
		/* not an error: what every client does when the server is down */
		kt_warn("check: %s", kthrottle_last_error());
		printf("OK (unanswered: %s; clients serve)\n", strerror(err));
		return KT_EXIT_OK;
	}
	printf("%s\n", r ? "OK" : "NO");
	return r ? KT_EXIT_OK : 1; /* NO: throttle */
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "socket", required_argument, NULL, 's' },
		{ "pin-dir", required_argument, NULL, 'p' },
		{ "json", no_argument, NULL, 'j' },
		{ "force", no_argument, NULL, 'f' },
		{ "live", no_argument, NULL, 'L' },
		{ "interval", required_argument, NULL, 'i' },
		{ "count", required_argument, NULL, 'n' },
		{ "query", required_argument, NULL, 'Q' },
		{ "timeout-ms", required_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *sock = KT_DEFAULT_SOCKET, *pin_dir = KT_DEFAULT_PIN_DIR, *cmd;
	struct kt_config cfg = { 0 };
	bool json = false, have_cfg = false;
	bool force = false; /* cleanup */
	bool live = false;  /* health */
	double interval = 1;
	long count = 0;
	const char *query = NULL; /* check */
	long timeout_ms = CTL_CHECK_TIMEOUT_MS;
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
		case 'f':
			force = true;
			break;
		case 'L':
			live = true;
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
		case 'Q':
			query = optarg;
			break;
		case 'T':
			errno = 0;
			timeout_ms = strtol(optarg, &end, 10);
			if (!*optarg || *end || errno || timeout_ms < 1 ||
			    timeout_ms > KTHROTTLE_TAGQ_MAX_TIMEOUT_MS) {
				kt_err("--timeout-ms: '%s' is not a number of milliseconds in 1..%d", optarg,
				       KTHROTTLE_TAGQ_MAX_TIMEOUT_MS);
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
		for (int i = 0; !query && i < cfg.n_tags; i++)
			if (cfg.tags[i].query)
				query = cfg.tags[i].query_socket ? cfg.tags[i].query_socket
								 : KT_TAG_DEFAULT_SOCKET;
	}
	if (optind >= argc) {
		kt_err("no command given (status, top, watch, reload, health, cleanup, bpftool, subscribe, check; see --help)");
		return KT_EXIT_CONFIG;
	}
	cmd = argv[optind++];
	const char *sub_limit = NULL;
	if (!strcmp(cmd, "subscribe")) {
		if (optind >= argc) {
			kt_err("subscribe needs a limit name (see --help)");
			ret = KT_EXIT_CONFIG;
			goto out;
		}
		sub_limit = argv[optind++];
	}
	const char *check_tag = NULL;
	if (!strcmp(cmd, "check")) {
		if (optind >= argc) {
			kt_err("check needs a tag (see --help)");
			ret = KT_EXIT_CONFIG;
			goto out;
		}
		check_tag = argv[optind++];
	}
	if (live && strcmp(cmd, "health")) {
		kt_err("--live is for health only (see --help)");
		ret = KT_EXIT_CONFIG;
		goto out;
	}
	/* getopt permutes, so options may also follow the command */
	if (optind < argc) {
		kt_err("unexpected argument '%s' for %s (see --help)", argv[optind], cmd);
		ret = KT_EXIT_CONFIG;
		goto out;
	}

	if (!strcmp(cmd, "status")) {
		ret = daemon_request(sock, json ? "status json" : "status", CTL_TIMEOUT_MS, &reply,
				     err, sizeof(err));
		if (ret == 0) {
			bool failed = !strncmp(reply, "error:", 6);
			fputs(reply, failed ? stderr : stdout);
			ret = failed ? KT_EXIT_RUNTIME : KT_EXIT_OK;
		} else if (ret == -ENOENT || ret == -ECONNREFUSED) {
			/* no daemon (or a stale socket): the kernel state is
			 * still there; a daemon that is there but fails to
			 * answer is an error, not a fallback */
			ret = status_from_maps(pin_dir, json);
		} else {
			kt_err("%s", err);
			ret = KT_EXIT_RUNTIME;
		}
	} else if (!strcmp(cmd, "reload")) {
		ret = daemon_request(sock, "reload", CTL_RELOAD_TIMEOUT_MS, &reply, err, sizeof(err));
		if (ret) {
			kt_err("%s", err);
			ret = KT_EXIT_RUNTIME;
		} else {
			fputs(reply, strncmp(reply, "ok", 2) ? stderr : stdout);
			ret = strncmp(reply, "ok", 2) ? KT_EXIT_RUNTIME : KT_EXIT_OK;
		}
	} else if (!strcmp(cmd, "health")) {
		/* a probe: only the daemon's own answer counts, never the maps */
		ret = daemon_request(sock, live ? "health live" : "health", CTL_TIMEOUT_MS, &reply,
				     err, sizeof(err));
		if (ret) {
			kt_err("%s", err);
			ret = KT_EXIT_RUNTIME;
		} else {
			bool ok = !strncmp(reply, live ? "live\n" : "ready\n", live ? 5 : 6);

			fputs(reply, stdout);
			ret = ok ? KT_EXIT_OK : KT_EXIT_RUNTIME;
		}
	} else if (!strcmp(cmd, "top")) {
		ret = top(sock, interval, count);
	} else if (!strcmp(cmd, "watch")) {
		ret = watch(pin_dir, interval, count);
	} else if (!strcmp(cmd, "cleanup")) {
		ret = kt_bpf_cleanup_opts(pin_dir, force, err, sizeof(err));
		if (ret) {
			kt_err("%s", err);
			ret = KT_EXIT_RUNTIME;
		} else {
			printf("removed every kthrottle link and pin under %s\n", pin_dir);
		}
	} else if (sub_limit) {
		struct sub_state st = { .count = count };
		char line[128];

		if (snprintf(line, sizeof(line), "subscribe %s", sub_limit) >= (int)sizeof(line)) {
			kt_err("limit name '%s' is too long", sub_limit);
			ret = KT_EXIT_CONFIG;
			goto out;
		}
		ret = daemon_exchange(sock, line, CTL_TIMEOUT_MS, sub_line, &st, &reply, err,
				      sizeof(err));
		if (ret) {
			kt_err("%s", err);
			ret = KT_EXIT_RUNTIME;
		} else {
			ret = st.failed ? KT_EXIT_RUNTIME : KT_EXIT_OK;
		}
	} else if (check_tag) {
		ret = check(query, check_tag, (uint32_t)timeout_ms);
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
