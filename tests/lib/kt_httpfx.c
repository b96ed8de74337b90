// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include "kt_httpfx.h"
#include "kt_daemonfx.h"
#include "ktest.h"

/* Debian's: the python3 first on PATH may be another (pyenv's) without
 * requests and httpx */
#define PYTHON "/usr/bin/python3"

/* tests/tools/kt-httpcall.py beside the build directory */
static const char *tool(void)
{
	static char path[PATH_MAX];

	if (!path[0])
		snprintf(path, sizeof(path), "%s/../tests/tools/kt-httpcall.py", ktest_build_dir());
	return path;
}

const char *kt_httpfx_why_not(void)
{
	const char *why = ktest_root_unavailable();

	if (why)
		return why;
	if (access(PYTHON, X_OK) || access(tool(), R_OK))
		return "needs " PYTHON " and tests/tools/kt-httpcall.py";
	if (system(PYTHON " -c 'import requests, httpx' 2>/dev/null") != 0)
		return "needs python3-requests and python3-httpx";
	if (!ktest_find_prog("curl") || !ktest_find_prog("openssl"))
		return "needs curl and openssl";
	return NULL;
}

void kt_httpfx_cert(const char *dir)
{
	char cmd[3 * PATH_MAX];

	snprintf(cmd, sizeof(cmd),
		 "openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=localhost -days 1 "
		 "-keyout %s/key.pem -out %s/cert.pem >/dev/null 2>&1",
		 dir, dir);
	assert_int_equal(system(cmd), 0);
}

int kt_httpfx_serve(struct kt_httpfx_server *s, const char *dir, const char *tls)
{
	char port_file[PATH_MAX + 16], out[PATH_MAX + 16], cert[PATH_MAX + 16], key[PATH_MAX + 16];

	snprintf(s->dir, sizeof(s->dir), "%s", dir);
	snprintf(port_file, sizeof(port_file), "%s/port", dir);
	snprintf(out, sizeof(out), "%s/server.json", dir);
	snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
	snprintf(key, sizeof(key), "%s/key.pem", dir);
	unlink(port_file);
	unlink(out);
	s->port = -1;
	s->pid = kt_daemonfx_fork_bounded();
	assert_true(s->pid >= 0);
	if (s->pid == 0) {
		if (!strcmp(tls, "none"))
			execl(PYTHON, "python3", tool(), "serve", "--port-file", port_file, "--out", out,
			      "--duration", "120", (char *)NULL);
		else
			execl(PYTHON, "python3", tool(), "serve", "--port-file", port_file, "--out", out,
			      "--duration", "120", "--tls", tls, "--cert", cert, "--key", key,
			      (char *)NULL);
		_exit(127);
	}
	/* the port file appears once it listens */
	for (int i = 0; i < 200 && s->port <= 0; i++) {
		char *p = ktest_slurp(port_file);

		if (p)
			s->port = atoi(p);
		free(p);
		if (s->port <= 0)
			ktest_sleep_ms(50);
	}
	assert_true(s->port > 0);
	return s->port;
}

char *kt_httpfx_stop(struct kt_httpfx_server *s)
{
	char out[PATH_MAX + 16];
	pid_t pid = s->pid;
	int status;

	assert_true(pid > 0);
	kill(pid, SIGTERM);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	s->pid = -1;
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	snprintf(out, sizeof(out), "%s/server.json", s->dir);
	return ktest_slurp(out);
}

void kt_httpfx_kill(struct kt_httpfx_server *s)
{
	ktest_kill_wait(&s->pid);
}

pid_t kt_httpfx_client_spawn(const char *cg, const char *lib, const char *url, int conns,
			     double secs, const char *out)
{
	char s[32], c[16];
	pid_t pid;

	snprintf(s, sizeof(s), "%.2f", secs);
	snprintf(c, sizeof(c), "%d", conns);
	unlink(out);
	pid = kt_daemonfx_fork_bounded();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (ktest_cgroup_join(cg))
			_exit(3);
		execl(PYTHON, "python3", tool(), "client", "--lib", lib, "--url", url, "--conns", c,
		      "--duration", s, "--timeout", "20", "--out", out, (char *)NULL);
		_exit(127);
	}
	return pid;
}

char *kt_httpfx_client_wait(pid_t pid, const char *out)
{
	int status;

	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	return ktest_slurp(out);
}

int kt_httpfx_bins(const char *json, double *bins, int max)
{
	const char *p = json ? strstr(json, "\"per_second\"") : NULL;
	int n = 0;

	if (!p || !(p = strchr(p, '[')))
		return -1;
	for (p++;;) {
		char *end;
		double v;

		while (isspace((unsigned char)*p))
			p++;
		if (*p == ']')
			return n;
		v = strtod(p, &end);
		if (end == p)
			return -1;
		if (n < max)
			bins[n] = v;
		n++;
		p = end;
		while (isspace((unsigned char)*p))
			p++;
		if (*p == ',')
			p++;
		else if (*p != ']')
			return -1;
	}
}

double kt_httpfx_num(const char *json, const char *key)
{
	double v = -1;

	if (!json || !ktest_json_num(json, key, &v))
		fail_msg("no number %s in %s", key, json ? json : "(no summary)");
	return v;
}
