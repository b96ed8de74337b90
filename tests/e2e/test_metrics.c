// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The Prometheus endpoint (`metrics: 127.0.0.1:PORT`): a real daemon with
 * a connection limit and real refused connects from a member cgroup, then
 *   - GET /metrics: the kthrottle_ families, per member counters equal to
 *     the kernel's (status json reads the same per-CPU counters), events by
 *     reason, seconds throttled; other paths 404;
 *   - Debian's real prometheus server scraping it every second: the same
 *     admitted total comes back from its query API, and up == 1;
 * and a hostile neighbour on the scraper's own address (127.0.0.1) cannot
 * starve it: a request not whole 1 s after connect is closed (also when it
 * trickles), and while 20 slowloris (1 byte/s) and 2,000 idle connections
 * are held (each reopened once a second when closed), GET /metrics answers
 * within 1 s, a 100 KB URL gets 414 and a 1 MiB header 431 within 1 s and
 * are closed, and prometheus still records up == 1. */
#include <errno.h>
#include <limits.h>
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
#include <poll.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "kt_daemonfx.h"
#include "ktest.h"

#define PROMETHEUS "/usr/bin/prometheus"

#define N_SLOW 20
#define N_IDLE 2000
#define N_HOLD (N_SLOW + N_IDLE)

/* The neighbour: N_SLOW connections sending a request 1 byte a second and
 * N_IDLE sending nothing, each reopened (at most once a second) when the
 * daemon closes it. */
static struct holder {
	pthread_t th;
	bool started;
	int port, stop, ready; /* stop, ready: __atomic */
	int fd[N_HOLD];
	size_t sent[N_HOLD];
	uint64_t opened_ns[N_HOLD], byte_ns[N_HOLD];
	unsigned long connects, closed;
} hold;

static struct fixture {
	struct ktest_daemon d;
	char cg[PATH_MAX];
	char tmp[PATH_MAX];
	pid_t prom;
} fx;

static int teardown(void **state)
{
	(void)state;
	if (hold.started) { /* a failed assertion left the neighbour running */
		__atomic_store_n(&hold.stop, 1, __ATOMIC_RELEASE);
		pthread_join(hold.th, NULL);
		hold.started = false;
	}
	ktest_kill_wait(&fx.prom);
	kt_daemonfx_end(&fx.d, fx.cg);
	if (fx.tmp[0])
		ktest_rmtree(fx.tmp);
	return 0;
}

/* Runs Debian's prometheus scraping 127.0.0.1:target every second; its
 * web port in *web. */
static void start_prometheus(int target, int *web)
{
	char cfgpath[PATH_MAX + 32], data[PATH_MAX + 32], conf[512], listen[64], cfgarg[PATH_MAX + 64],
		dataarg[PATH_MAX + 64];
	pid_t parent = getpid();

	*web = ktest_free_port(SOCK_STREAM);
	assert_true(*web > 0);
	snprintf(cfgpath, sizeof(cfgpath), "%s/prometheus.yml", fx.tmp);
	snprintf(data, sizeof(data), "%s/tsdb", fx.tmp);
	snprintf(conf, sizeof(conf),
		 "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
		 "scrape_configs:\n"
		 "  - job_name: kthrottle\n"
		 "    static_configs: [{targets: ['127.0.0.1:%d']}]\n",
		 target);
	assert_int_equal(ktest_write_file(cfgpath, conf), 0);
	snprintf(listen, sizeof(listen), "--web.listen-address=127.0.0.1:%d", *web);
	snprintf(cfgarg, sizeof(cfgarg), "--config.file=%s", cfgpath);
	snprintf(dataarg, sizeof(dataarg), "--storage.tsdb.path=%s", data);
	fflush(NULL);
	fx.prom = fork();
	assert_true(fx.prom >= 0);
	if (fx.prom == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		freopen("/dev/null", "w", stdout);
		freopen("/dev/null", "w", stderr);
		execl(PROMETHEUS, PROMETHEUS, cfgarg, dataarg, listen, (char *)NULL);
		_exit(127);
	}
}

/* A one-sample instant query's value from prometheus; false until it has one. */
static bool prom_query(int web, const char *query_escaped, double *v)
{
	char path[512], *body = NULL;
	const char *val;
	bool ok = false;

	snprintf(path, sizeof(path), "/api/v1/query?query=%s", query_escaped);
	if (ktest_http_get(web, path, &body) == 200 && body && (val = strstr(body, "\"value\":[")) &&
	    (val = strchr(val, ','))) {
		*v = atof(val + 2); /* ,"<number>" */
		ok = strstr(body, "\"status\":\"success\"") != NULL;
	}
	free(body);
	return ok;
}

/* The daemon of both tests: metrics on 127.0.0.1:mport and connection
 * limit "m" (max 4/s; `burst` "" or e.g. " burst: 2,") to port. */
static void start_m(char *body, size_t len, int mport, int port, const char *burst)
{
	assert_true(mport > 0 && port > 0 && mport != port);
	snprintf(body, len,
		 "metrics: 127.0.0.1:%d\n"
		 "limits:\n"
		 "  - {name: m, cgroups: [%s], unit: connection,%s\n"
		 "     match: {cidrs: [127.0.0.1/32], ports: %d}, rateLimit: {max: 4}}\n",
		 mport, fx.cg, burst, port);
	assert_int_equal(ktest_daemon_up(&fx.d, body), 0);
}

static void test_metrics(void **state)
{
	int mport = ktest_free_port(SOCK_STREAM), port = ktest_free_port(SOCK_STREAM), web;
	char body[1024], series[256], *page = NULL, *st;
	double admitted, throttled, m_adm, m_thr, events, tsec, v;
	struct ktest_load r;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_m(body, sizeof(body), mport, port, " burst: 2,");
	assert_int_equal(ktest_load(fx.cg, "tcp", "127.0.0.1", port, 0.5, &r), 0);
	ktest_sleep_ms(250); /* two ticks: the controller's totals catch up */

	assert_int_equal(ktest_http_get(mport, "/metrics", &page), 200);
	assert_non_null(page);
	st = ktest_daemon_cmd(&fx.d, "status json");
	assert_non_null(st);
	assert_true(ktest_metric_sample(page, "kthrottle_admitted_total{limit=\"m\"}", &admitted));
	assert_true(ktest_metric_sample(page, "kthrottle_throttled_total{limit=\"m\"}", &throttled));
	assert_true(ktest_metric_sample(page, "kthrottle_throttle_events_total{limit=\"m\",reason=\"share\"}", &events));
	assert_true(ktest_metric_sample(page, "kthrottle_throttled_seconds_total{limit=\"m\"}", &tsec));
	const char *member = strstr(st, "\"member_id\":\"");
	assert_non_null(member);
	char id[96];
	assert_int_equal(sscanf(member + strlen("\"member_id\":\""), "%95[^\"]", id), 1);
	snprintf(series, sizeof(series), "kthrottle_member_admitted_total{limit=\"m\",member=\"%s\"}", id);
	assert_true(ktest_metric_sample(page, series, &m_adm));
	snprintf(series, sizeof(series), "kthrottle_member_throttled_total{limit=\"m\",member=\"%s\"}", id);
	assert_true(ktest_metric_sample(page, series, &m_thr));
	/* the kernel's per-CPU counters, as status reads them */
	const char *madm = strstr(member, "\"admitted\":"), *mthr = strstr(member, "\"throttled\":");
	assert_non_null(madm);
	assert_non_null(mthr);
	double k_adm = atof(madm + 11), k_thr = atof(mthr + 12);
	print_message("kt-load: %llu admitted (%llu ok + %llu ECONNREFUSED), %llu refused; metrics: "
		      "admitted %.0f throttled %.0f, member %.0f/%.0f (kernel %.0f / %.0f), events %.0f, "
		      "throttled %.1f s\n",
		      r.ok + r.errors, r.ok, r.errors, r.refused, admitted, throttled, m_adm, m_thr,
		      k_adm, k_thr, events, tsec);
	assert_true(m_adm == k_adm);
	assert_true(m_thr == k_thr);
	assert_true(admitted == (double)(r.ok + r.errors));
	assert_true(throttled == (double)r.refused);
	assert_true(events >= 1 && events <= throttled);
	assert_true(tsec >= 0.1 && tsec <= 1.0);
	free(st);
	free(page);
	page = NULL;
	assert_int_equal(ktest_http_get(mport, "/other", &page), 404);
	free(page);

	if (access(PROMETHEUS, X_OK) != 0) {
		print_message("%s missing (scripts/setup.sh installs prometheus)\n", PROMETHEUS);
		fail();
	}
	start_prometheus(mport, &web);
	bool got = false, up = false;
	for (int i = 0; i < 300 && !(got && up); i++) {
		ktest_sleep_ms(100);
		got = prom_query(web, "kthrottle_admitted_total%7Blimit%3D%22m%22%7D", &v) &&
		      v == admitted;
		double u;
		up = prom_query(web, "up%7Bjob%3D%22kthrottle%22%7D", &u) && u == 1;
	}
	print_message("prometheus: kthrottle_admitted_total{limit=\"m\"} = %.0f, up %s\n", v,
		      up ? "1" : "not 1");
	assert_true(got);
	assert_true(up);
}



static const char slow_req[] = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";

static int hold_open(int i, uint64_t now)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)hold.port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	hold.opened_ns[i] = hold.byte_ns[i] = now;
	hold.sent[i] = 0;
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) && errno != EINPROGRESS) {
		close(fd);
		fd = -1;
	}
	hold.connects += fd >= 0;
	return hold.fd[i] = fd;
}

static void *holder_main(void *arg)
{
	(void)arg;
	for (int i = 0; i < N_HOLD; i++)
		hold_open(i, ktest_now_ns());
	__atomic_store_n(&hold.ready, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&hold.stop, __ATOMIC_ACQUIRE)) {
		uint64_t now = ktest_now_ns();

		for (int i = 0; i < N_HOLD; i++) {
			char b;
			ssize_t r;

			if (hold.fd[i] < 0) {
				if (now - hold.opened_ns[i] >= 1000000000ULL)
					hold_open(i, now);
				continue;
			}
			r = recv(hold.fd[i], &b, 1, MSG_DONTWAIT);
			if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
				close(hold.fd[i]);
				hold.fd[i] = -1;
				hold.closed++;
			} else if (i < N_SLOW && now - hold.byte_ns[i] >= 1000000000ULL) {
				size_t k = hold.sent[i];
				char c = k < sizeof(slow_req) - 1 ? slow_req[k] : 'a';

				if (send(hold.fd[i], &c, 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1) {
					hold.sent[i]++;
					hold.byte_ns[i] = now;
				}
			}
		}
		ktest_sleep_ms(100);
	}
	for (int i = 0; i < N_HOLD; i++)
		if (hold.fd[i] >= 0)
			close(hold.fd[i]);
	return NULL;
}

static int connect_port(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* Sends req[0..len) as fast as the daemon takes it while reading: the
 * reply's status and the seconds until it came (-1 if none in 3 s), and
 * whether the daemon then closed the connection (EOF or reset). */
static int hostile_request(int port, const char *req, size_t len, double *answer_s, bool *closed)
{
	int fd = connect_port(port), status = -1;
	uint64_t t0 = ktest_now_ns();
	size_t off = 0, got = 0;
	char head[64] = "";

	*answer_s = -1;
	*closed = false;
	while (ktest_now_ns() - t0 < 3000000000ULL && !*closed) {
		struct pollfd p = { .fd = fd, .events = POLLIN | (off < len ? POLLOUT : 0) };

		if (poll(&p, 1, 100) <= 0)
			continue;
		if (p.revents & POLLIN) {
			char buf[4096];
			ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);

			if (r > 0 && got < sizeof(head) - 1) {
				size_t k = (size_t)r < sizeof(head) - 1 - got ? (size_t)r : sizeof(head) - 1 - got;

				memcpy(head + got, buf, k);
				got += k;
				head[got] = 0;
				if (status < 0 && sscanf(head, "HTTP/1.%*d %d", &status) == 1)
					*answer_s = (double)(ktest_now_ns() - t0) / 1e9;
			}
			if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
				*closed = true;
		} else if (p.revents & (POLLHUP | POLLERR)) {
			*closed = true;
		} else if (p.revents & POLLOUT) {
			ssize_t r = send(fd, req + off, len - off > 65536 ? 65536 : len - off,
					 MSG_NOSIGNAL | MSG_DONTWAIT);

			if (r > 0)
				off += (size_t)r;
			else if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
				off = len; /* reset: stop sending, read what came */
		}
	}
	close(fd);
	return status;
}

/* Seconds until the daemon closes fd (-1: not within 3 s), sending one byte
 * of an unfinished request every trickle_ms (0: none). */
static double seconds_to_close(int fd, int trickle_ms)
{
	uint64_t t0 = ktest_now_ns(), last = t0;

	while (ktest_now_ns() - t0 < 3000000000ULL) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		char b;

		if (trickle_ms && ktest_now_ns() - last >= (uint64_t)trickle_ms * 1000000) {
			send(fd, "a", 1, MSG_NOSIGNAL);
			last = ktest_now_ns();
		}
		if (poll(&p, 1, 10) > 0 && recv(fd, &b, 1, MSG_DONTWAIT) <= 0)
			return (double)(ktest_now_ns() - t0) / 1e9;
	}
	return -1;
}

static void test_metrics_hostile(void **state)
{
	int mport = ktest_free_port(SOCK_STREAM), port = ktest_free_port(SOCK_STREAM), web;
	struct rlimit rl = { N_HOLD + 1024, N_HOLD + 1024 };
	char body[1024], *page = NULL, *big;
	double t, worst = 0, idle_s, trickle_s, cnt = 0, sum = 0;
	bool closed;
	int st;

	(void)state;
	KTEST_SKIP_UNLESS_ROOT();
	start_m(body, sizeof(body), mport, port, "");
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);

	/* (d) the deadline runs from accept, whole request, not reset by bytes */
	int fd = connect_port(mport);
	send(fd, "GET /metrics HTTP/1.1\r\n", 23, MSG_NOSIGNAL);
	idle_s = seconds_to_close(fd, 0);
	close(fd);
	fd = connect_port(mport);
	trickle_s = seconds_to_close(fd, 100);
	close(fd);
	print_message("unfinished request closed after %.2f s; one trickling a byte each 100 ms "
		      "after %.2f s\n", idle_s, trickle_s);
	assert_true(idle_s >= 0.9 && idle_s <= 1.5);
	assert_true(trickle_s >= 0.9 && trickle_s <= 1.5);

	hold.port = mport;
	assert_int_equal(pthread_create(&hold.th, NULL, holder_main, NULL), 0);
	hold.started = true;
	for (int i = 0; i < 100 && !__atomic_load_n(&hold.ready, __ATOMIC_ACQUIRE); i++)
		ktest_sleep_ms(50);
	assert_true(__atomic_load_n(&hold.ready, __ATOMIC_ACQUIRE));
	ktest_sleep_ms(1500); /* the slowloris are mid-request, the idle ones reopening */

	/* (a) */
	for (int i = 0; i < 5; i++) {
		uint64_t t0 = ktest_now_ns();

		st = ktest_http_get(mport, "/metrics", &page);
		t = (double)(ktest_now_ns() - t0) / 1e9;
		worst = t > worst ? t : worst;
		assert_int_equal(st, 200);
		assert_non_null(strstr(page, "kthrottle_admitted_total{limit=\"m\"}"));
		assert_true(t < 1.0);
		free(page);
		page = NULL;
		ktest_sleep_ms(200);
	}
	print_message("held: GET /metrics 5 of 5 answered 200, slowest %.3f s\n", worst);

	/* (c) */
	size_t biglen = (1 << 20) + 256;

	big = malloc(biglen);
	assert_non_null(big);
	memcpy(big, "GET /", 5);
	memset(big + 5, 'u', 100000);
	memcpy(big + 5 + 100000, " HTTP/1.1\r\n\r\n", 13);
	st = hostile_request(mport, big, 5 + 100000 + 13, &t, &closed);
	print_message("held: 100 KB URL: %d after %.3f s, closed %d\n", st, t, closed);
	assert_int_equal(st, 414);
	assert_true(t >= 0 && t < 1.0 && closed);
	int hl = snprintf(big, biglen, "GET /metrics HTTP/1.1\r\nX-Big: ");
	memset(big + hl, 'h', (1 << 20));
	memcpy(big + hl + (1 << 20), "\r\n\r\n", 4);
	st = hostile_request(mport, big, (size_t)hl + (1 << 20) + 4, &t, &closed);
	print_message("held: 1 MiB header: %d after %.3f s, closed %d\n", st, t, closed);
	assert_int_equal(st, 431);
	assert_true(t >= 0 && t < 1.0 && closed);
	free(big);
	st = hostile_request(mport, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 46, &t, &closed);
	assert_int_equal(st, 405);
	assert_true(closed);

	/* (b) */
	if (access(PROMETHEUS, X_OK) != 0) {
		print_message("%s missing (scripts/setup.sh installs prometheus)\n", PROMETHEUS);
		fail();
	}
	start_prometheus(mport, &web);
	bool seen = false;
	double u;

	for (int i = 0; i < 300 && !seen; i++) {
		ktest_sleep_ms(100);
		seen = prom_query(web, "up%7Bjob%3D%22kthrottle%22%7D", &u);
	}
	assert_true(seen);
	ktest_sleep_ms(6500);
	/* the scrapes of the last 6 s, and how many succeeded */
	assert_true(prom_query(web, "count_over_time(up%7Bjob%3D%22kthrottle%22%7D%5B6s%5D)", &cnt));
	assert_true(prom_query(web, "sum_over_time(up%7Bjob%3D%22kthrottle%22%7D%5B6s%5D)", &sum));
	__atomic_store_n(&hold.stop, 1, __ATOMIC_RELEASE);
	pthread_join(hold.th, NULL);
	hold.started = false;
	print_message("held: prometheus scraping every 1 s: %.0f of %.0f scrapes in 6 s up; the "
		      "neighbour opened %lu connections, the daemon closed %lu\n",
		      sum, cnt, hold.connects, hold.closed);
	assert_true(cnt >= 5);
	assert_true(sum == cnt);
	assert_int_equal(ktest_http_get(mport, "/healthz", &page), 200);
	free(page);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_metrics, kt_dfx_setup, teardown),
		cmocka_unit_test_setup_teardown(test_metrics_hostile, kt_dfx_setup, teardown),
	};

	kt_dfx = (struct kt_daemonfx_spec){
		.fx = &fx, .len = sizeof(fx), .d = &fx.d, .kid = &fx.prom,
		.cgroup = "metrics", .cg = fx.cg, .tmp = fx.tmp, .tmp_len = sizeof(fx.tmp)
	};
	alarm(180);
	return cmocka_run_group_tests_name("e2e_metrics", tests, NULL, NULL);
}
