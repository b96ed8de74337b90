// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Unit call against Debian's own server and load generators: nginx serves
 * plain HTTP/1.1, TLS 1.2, TLS 1.3 and HTTP/2 over TLS on loopback and
 * logs every request with its time; `ab -k`, `wrk`, `h2load` (one stream a
 * connection) and `curl` (many URLs over one connection) run unmodified in
 * the member cgroup, each wanting far more than the limit (RATE calls/s,
 * burst BURST, maxDelay 30 s).
 *
 * Each run asserts, from nginx's log: every 1 s window within max + burst
 * (and LAG_CALLS for nginx's timestamps, taken when it has read the
 * request), at least 95% of the rate in the run's steady seconds, every
 * request answered 200; from the client's own report: no failed request
 * (a held call waits, it is not refused); in the kernel: the calls counted
 * equal nginx's requests (within one a connection, for curl's TLS
 * close_notify). The client's latency is printed. Skips, saying why,
 * without nginx, ab, wrk, h2load, curl or openssl. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "kt_daemonfx.h"
#include "kt_nginx.h"
#include "ktest.h"

#define RATE 40.0
#define BURST 20
#define CONNS 16 /* a held call waits 200-500 ms: 16 connections keep 40/s busy */
#define SETTLE_MS 1500 /* a call still held when its client exits is sent after */
#define RUN_S 4
#define LAG_CALLS 2 /* 50 ms at RATE */
#define MAX_LOG (64 * 1024)

/* a server per run, so that what a run's client left held and sent after
 * it exited is never counted at the next run's */
enum { PORT_PLAIN_AB, PORT_PLAIN_WRK, PORT_TLS12, PORT_TLS13, PORT_H2, N_PORTS };

static struct fixture {
	struct ktest_daemon d;
	char cg[PATH_MAX];
	char tmp[PATH_MAX];
	pid_t nginx;
	int port[N_PORTS];
} fx;

static const char *const tools[] = { "nginx", "ab", "wrk", "h2load", "curl", "openssl" };

/* Why this machine cannot run the test, NULL when it can. */
static const char *why_not(void)
{
	static char why[128];
	const char *root = ktest_root_unavailable();

	if (root)
		return root;
	for (size_t i = 0; i < sizeof(tools) / sizeof(tools[0]); i++)
		if (!ktest_find_prog(tools[i])) {
			snprintf(why, sizeof(why), "%s is not installed (scripts/setup.sh test)", tools[i]);
			return why;
		}
	return NULL;
}

static int teardown(void **state)
{
	(void)state;
	if (fx.nginx > 0) {
		kill(fx.nginx, SIGTERM);
		waitpid(fx.nginx, NULL, 0);
		fx.nginx = -1;
	}
	kt_daemonfx_end(&fx.d, fx.cg);
	if (fx.tmp[0])
		ktest_rmtree(fx.tmp);
	return 0;
}

/* nginx in the test's own cgroup (not the member one), its files in tmp,
 * logging "$msec $server_port $status" a request. */
static void nginx_up(void)
{
	char conf[PATH_MAX + 16], cmd[3 * PATH_MAX], *text = NULL;
	uint64_t t0;

	snprintf(cmd, sizeof(cmd),
		 "openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -days 1 "
		 "-keyout %s/key.pem -out %s/cert.pem >/dev/null 2>&1",
		 fx.tmp, fx.tmp);
	assert_int_equal(system(cmd), 0);
	for (int i = 0; i < N_PORTS; i++)
		fx.port[i] = ktest_free_port(SOCK_STREAM);
	assert_true(asprintf(&text,
			     "  log_format kt '$msec $server_port $status';\n"
			     "  access_log %s/access.log kt;\n"
			     "  ssl_certificate %s/cert.pem;\n"
			     "  ssl_certificate_key %s/key.pem;\n"
			     "  server { listen 127.0.0.1:%d; location / { return 200 \"ok\"; } }\n"
			     "  server { listen 127.0.0.1:%d; location / { return 200 \"ok\"; } }\n"
			     "  server { listen 127.0.0.1:%d ssl; ssl_protocols TLSv1.2; location / { return 200 \"ok\"; } }\n"
			     "  server { listen 127.0.0.1:%d ssl; ssl_protocols TLSv1.3; location / { return 200 \"ok\"; } }\n"
			     "  server { listen 127.0.0.1:%d ssl http2; location / { return 200 \"ok\"; } }\n",
			     fx.tmp, fx.tmp, fx.tmp, fx.port[PORT_PLAIN_AB], fx.port[PORT_PLAIN_WRK],
			     fx.port[PORT_TLS12], fx.port[PORT_TLS13], fx.port[PORT_H2]) > 0);
	assert_int_equal(kt_nginx_conf(fx.tmp, text, conf, sizeof(conf)), 0);
	free(text);
	fx.nginx = kt_daemonfx_fork_bounded();
	assert_true(fx.nginx >= 0);
	if (fx.nginx == 0) {
		char errlog[PATH_MAX + 16];

		snprintf(errlog, sizeof(errlog), "%s/error.log", fx.tmp);
		execl(ktest_find_prog("nginx"), "nginx", "-p", fx.tmp, "-e", errlog, "-c", conf, "-g",
		      "daemon off;", (char *)NULL);
		_exit(127);
	}
	t0 = ktest_now_ns();
	for (int i = 0; i < N_PORTS; i++)
		while (!ktest_port_open(fx.port[i])) {
			assert_true(ktest_now_ns() - t0 < 10000000000ull);
			assert_int_equal(waitpid(fx.nginx, NULL, WNOHANG), 0); /* still up */
			ktest_sleep_ms(20);
		}
}

static void daemon_up(void)
{
	char body[1024];

	snprintf(body, sizeof(body),
		 "tickInterval: 100ms\n"
		 "limits:\n"
		 "  - {name: calls, cgroups: [%s], unit: call, burst: %d, maxDelay: 30s,\n"
		 "     match: {cidrs: [127.0.0.1/32]}, rateLimit: {max: %g}}\n",
		 fx.cg, BURST, RATE);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
}

/* argv run in the member cgroup, its output (stdout and stderr) returned. */
static char *member_run(char *const argv[])
{
	char out[PATH_MAX + 16], *text;
	int st;
	pid_t kid;

	snprintf(out, sizeof(out), "%s/client.out", fx.tmp);
	kid = kt_daemonfx_fork_bounded();
	assert_true(kid >= 0);
	if (kid == 0) {
		int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

		if (fd < 0 || ktest_cgroup_join(fx.cg) || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
			_exit(126);
		execvp(argv[0], argv);
		_exit(127);
	}
	assert_int_equal(waitpid(kid, &st, 0), kid);
	text = ktest_slurp(out);
	assert_non_null(text);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("%s exited with %d:\n%s", argv[0], WIFEXITED(st) ? WEXITSTATUS(st) : -1, text);
	return text;
}

/* What nginx logged for `port` from byte `from` of its log on. */
struct served {
	int n, not_ok;
	double first, last, window;
	double bins[RUN_S + 4]; /* calls per second from the first */
};

static long log_size(void)
{
	char p[PATH_MAX + 16];
	struct stat sb;

	snprintf(p, sizeof(p), "%s/access.log", fx.tmp);
	return stat(p, &sb) == 0 ? (long)sb.st_size : 0;
}

static void served_since(long from, int port, struct served *s)
{
	char p[PATH_MAX + 16], line[128];
	static double t[MAX_LOG];
	FILE *f;

	memset(s, 0, sizeof(*s));
	snprintf(p, sizeof(p), "%s/access.log", fx.tmp);
	f = fopen(p, "r");
	assert_non_null(f);
	assert_int_equal(fseek(f, from, SEEK_SET), 0);
	while (fgets(line, sizeof(line), f)) {
		double msec;
		int lport, status;

		if (sscanf(line, "%lf %d %d", &msec, &lport, &status) != 3 || lport != port)
			continue;
		s->not_ok += status != 200;
		if (s->n < MAX_LOG)
			t[s->n++] = msec;
	}
	fclose(f);
	if (!s->n)
		return;
	s->first = t[0];
	s->last = t[s->n - 1];
	/* the worst window [t[i], t[i] + 1 s): the log is in time order
	 * (one worker) */
	for (int i = 0, j = 0; i < s->n; i++) {
		while (j < s->n && t[j] < t[i] + 1.0)
			j++;
		if (j - i > s->window)
			s->window = j - i;
	}
	for (int i = 0; i < s->n; i++) {
		int b = (int)(t[i] - t[0]);

		if (b >= 0 && b < (int)(sizeof(s->bins) / sizeof(s->bins[0])))
			s->bins[b]++;
	}
}

/* The duration after `key` in text ("208.00ms", "1.51s", "56us"), in ms;
 * -1 without one. */
static double ms_after(const char *text, const char *key)
{
	const char *p = strstr(text, key);
	char *end;
	double v;

	if (!p)
		return -1;
	v = strtod(p + strlen(key), &end);
	if (!strncmp(end, "us", 2))
		return v / 1000;
	if (!strncmp(end, "ms", 2))
		return v;
	if (*end == 's')
		return v * 1000;
	if (*end == 'm')
		return v * 60000;
	return v; /* ab: ms, no unit */
}

/* The number after `key` in text, -1 without one. */
static double after(const char *text, const char *key)
{
	const char *p = strstr(text, key);

	return p ? atof(p + strlen(key)) : -1;
}

/* One client, unmodified, against the limit: `ok` is the requests it says
 * were answered, `failed` those it says failed. */
static void one_run(const char *name, int port, char *const argv[],
		    void (*report)(const char *out, double *ok, double *failed, char *lat, size_t len))
{
	struct served s;
	double before, calls, ok = -1, failed = -1, steady;
	char lat[160] = "";
	long from = log_size();
	char *out;

	before = kt_status_num(&fx.d, "calls", "admitted");
	out = member_run(argv);
	/* calls still held when the client exited leave its closed sockets
	 * later; nginx logs a call after answering it */
	ktest_sleep_ms(SETTLE_MS);
	served_since(from, port, &s);
	calls = kt_status_num(&fx.d, "calls", "admitted") - before;
	report(out, &ok, &failed, lat, sizeof(lat));
	/* the steady seconds: after the first (which holds the burst), before
	 * the last (clients stop at different moments) */
	steady = s.bins[1] + s.bins[2];
	print_message("%-12s: %4d calls at nginx in %.2f s, worst 1 s window %.0f (max + burst %d), "
		      "seconds 2-3 %.0f (%.0f%% of the rate), kernel counted %.0f, client ok %.0f "
		      "failed %.0f, %s (ideal wait %.0f ms: %d connections sharing %g/s)\n",
		      name, s.n, s.last - s.first, s.window, (int)RATE + BURST, steady,
		      100 * steady / (2 * RATE), calls, ok, failed, lat, 1000 * CONNS / RATE, CONNS,
		      RATE);
	if (failed != 0 || s.not_ok)
		fail_msg("%s: %.0f failed, %d not 200 at nginx:\n%s", name, failed, s.not_ok, out);
	free(out);
	assert_true(s.n >= ok && s.n <= ok + CONNS);
	assert_true(s.window <= RATE + BURST + LAG_CALLS);
	assert_true(steady >= 0.95 * 2 * RATE);
	assert_true(fabs(calls - s.n) <= CONNS);
}

/* ab: "Complete requests:", "Failed requests:", and its percentiles. */
static void ab_report(const char *out, double *ok, double *failed, char *lat, size_t len)
{
	*ok = after(out, "Complete requests:");
	*failed = after(out, "Failed requests:");
	if (after(out, "Non-2xx responses:") > 0)
		*failed += after(out, "Non-2xx responses:");
	snprintf(lat, len, "latency p50 %.0f ms p99 %.0f ms", ms_after(out, "  50%"),
		 ms_after(out, "  99%"));
}

/* wrk: "N requests in", and its socket errors (timeouts included). */
static void wrk_report(const char *out, double *ok, double *failed, char *lat, size_t len)
{
	const char *e = strstr(out, "Socket errors:");

	*ok = -1;
	for (const char *p = out; (p = strstr(p, " requests in ")); p++) {
		const char *q = p;

		while (q > out && q[-1] != '\n')
			q--;
		*ok = atof(q);
		break;
	}
	*failed = e ? 1 : 0;
	if (after(out, "Non-2xx or 3xx responses:") > 0)
		*failed += after(out, "Non-2xx or 3xx responses:");
	snprintf(lat, len, "latency p50 %.0f ms p99 %.0f ms", ms_after(out, "     50%"),
		 ms_after(out, "     99%"));
}

/* h2load: "requests: T total, S started, D done, O succeeded, F failed,
 * E errored, X timeout" and its "time for request:" min, max, mean. */
static void h2load_report(const char *out, double *ok, double *failed, char *lat, size_t len)
{
	const char *p = strstr(out, "requests:"), *t = strstr(out, "time for request:");
	double total, started, done, succeeded, bad, errored, timeout;

	*ok = *failed = -1;
	if (p && sscanf(p, "requests: %lf total, %lf started, %lf done, %lf succeeded, %lf failed, "
			   "%lf errored, %lf timeout",
			&total, &started, &done, &succeeded, &bad, &errored, &timeout) == 7) {
		*ok = succeeded;
		*failed = bad + errored + timeout;
	}
	snprintf(lat, len, "%.*s", t && strchr(t, '\n') ? (int)(strchr(t, '\n') - t) : 0, t ? t : "");
}

/* curl -w 'code=%{http_code}' per URL (its bodies go to the same
 * output): the 200s answered. */
static void curl_report(const char *out, double *ok, double *failed, char *lat, size_t len)
{
	int n = 0, bad = 0;

	for (const char *p = out; (p = strstr(p, "code=")); p += 5) {
		if (atoi(p + 5) == 200)
			n++;
		else
			bad++;
	}
	*ok = n;
	*failed = bad;
	snprintf(lat, len, "%d connections at most", CONNS);
}

/* One nginx and one daemon for every run, each run on a server of its
 * own: curl first (it ends with nothing held), then ab, wrk, wrk over TLS
 * 1.3, h2load. */
static void test_debian_clients(void **state)
{
	char url[64], conns[8], secs[8], dur[8], urls[8][64];

	(void)state;
	KTEST_SKIP_IF(why_not());
	nginx_up();
	daemon_up();
	snprintf(conns, sizeof(conns), "%d", CONNS);
	snprintf(secs, sizeof(secs), "%d", RUN_S);
	snprintf(dur, sizeof(dur), "%ds", RUN_S);
	{
		/* 200 URLs over CONNS TLS 1.2 connections: 4.5 s at the rate */
		static char *argv[16 + 200];
		int a = 0;

		argv[a++] = "curl";
		argv[a++] = "-sk";
		argv[a++] = "--no-progress-meter";
		argv[a++] = "--parallel";
		argv[a++] = "--parallel-max";
		argv[a++] = conns;
		argv[a++] = "-w";
		argv[a++] = "code=%{http_code}\\n";
		for (int i = 0; i < 8; i++)
			snprintf(urls[i], sizeof(urls[i]), "https://127.0.0.1:%d/%d",
				 fx.port[PORT_TLS12], i);
		for (int i = 0; i < 200; i++)
			argv[a++] = urls[i % 8];
		argv[a] = NULL;
		one_run("curl TLS 1.2", fx.port[PORT_TLS12], argv, curl_report);
	}
	{
		char *argv[] = { "ab", "-k", "-q", "-c", conns, "-t", secs, "-n", "100000", "-s", "30",
				 url, NULL };

		snprintf(url, sizeof(url), "http://127.0.0.1:%d/", fx.port[PORT_PLAIN_AB]);
		one_run("ab -k", fx.port[PORT_PLAIN_AB], argv, ab_report);
	}
	{
		char *argv[] = { "wrk", "-t", "1", "-c", conns, "-d", dur, "--latency", "--timeout",
				 "30s", url, NULL };

		snprintf(url, sizeof(url), "http://127.0.0.1:%d/", fx.port[PORT_PLAIN_WRK]);
		one_run("wrk", fx.port[PORT_PLAIN_WRK], argv, wrk_report);
		snprintf(url, sizeof(url), "https://127.0.0.1:%d/", fx.port[PORT_TLS13]);
		one_run("wrk TLS 1.3", fx.port[PORT_TLS13], argv, wrk_report);
	}
	{
		char *argv[] = { "h2load", "-c", conns, "-m", "1", "-D", secs, url, NULL };

		snprintf(url, sizeof(url), "https://127.0.0.1:%d/", fx.port[PORT_H2]);
		one_run("h2load h2", fx.port[PORT_H2], argv, h2load_report);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_debian_clients, kt_dfx_setup, teardown),
	};

	kt_dfx = (struct kt_daemonfx_spec){ .fx = &fx, .len = sizeof(fx), .d = &fx.d,
					    .kid = &fx.nginx, .cgroup = "callsnginx", .cg = fx.cg,
					    .tmp = fx.tmp, .tmp_len = sizeof(fx.tmp) };
	return cmocka_run_group_tests(tests, NULL, NULL);
}
