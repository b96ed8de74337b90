/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The HTTP fixture of the call-unit tests: tests/tools/kt-httpcall.py as a
 * keep-alive server that counts every request it parses (outside any
 * member cgroup), and as unmodified clients (http.client, requests, httpx,
 * curl) run inside a member cgroup; the numbers of their JSON summaries.
 * Functions that assert use cmocka (this header includes it). */
#ifndef KT_HTTPFX_H
#define KT_HTTPFX_H

#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/types.h>
#include <cmocka.h>

/* Why the call tests cannot run here (no root, no Debian python3 with
 * requests and httpx, no curl or openssl), or NULL. */
const char *kt_httpfx_why_not(void);

/* cmocka: skips the test, saying why, when kt_httpfx_why_not says so. */
#define KT_HTTPFX_SKIP_UNLESS_READY()                         \
	do {                                                  \
		const char *why_ = kt_httpfx_why_not();       \
		if (why_) {                                   \
			print_message("skipped: %s\n", why_); \
			skip();                               \
		}                                             \
	} while (0)

/* cmocka: a self-signed certificate and key in dir (cert.pem, key.pem). */
void kt_httpfx_cert(const char *dir);

/* A counting server; its files (port, summary, certificate) in dir. */
struct kt_httpfx_server {
	pid_t pid; /* -1: not running */
	int port;
	char dir[PATH_MAX];
};

/* cmocka: starts the server on a free 127.0.0.1 port, plain (tls "none")
 * or TLS "1.2" / "1.3" with dir's certificate; returns the port. */
int kt_httpfx_serve(struct kt_httpfx_server *s, const char *dir, const char *tls);
/* cmocka: stops it (SIGTERM, reaped, exit 0 asserted); its summary
 * (malloc'd): requests, connections, first, last, max_window... */
char *kt_httpfx_stop(struct kt_httpfx_server *s);
/* Teardown: kills and reaps it if it still runs. */
void kt_httpfx_kill(struct kt_httpfx_server *s);

/* cmocka: a client process inside cgroup cg: `conns` keep-alive
 * connections of `lib` sending calls back to back to url for secs, its
 * summary written to out. Its pid. */
pid_t kt_httpfx_client_spawn(const char *cg, const char *lib, const char *url, int conns,
			     double secs, const char *out);
/* cmocka: waits for that client (exit 0 asserted); its summary (malloc'd):
 * ok, errors, connects, p50_ms, p99_ms, max_ms... */
char *kt_httpfx_client_wait(pid_t pid, const char *out);

/* The server's requests per consecutive 1 s bin from its first request
 * (the summary's per_second) into bins[0..max); how many there are, or -1
 * when the summary has no such list. */
int kt_httpfx_bins(const char *json, double *bins, int max);

/* cmocka: number `key` of a summary; fails the test when it is missing. */
double kt_httpfx_num(const char *json, const char *key);

#endif
