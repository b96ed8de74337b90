// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "fakekube.h"
#include "ktest.h"

int ktest_fakekube_certs(const char *dir)
{
	char cmd[4 * PATH_MAX];
	char *argv[] = { "/bin/sh", "-c", cmd, NULL }, *out = NULL;
	int ret;

	/* a CA, and a server certificate for 127.0.0.1 signed by it */
	snprintf(cmd, sizeof(cmd),
		 "cd '%s' && printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext && "
		 "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
		 "-keyout ca.key -out ca.pem -days 2 -subj /CN=kt-test-ca && "
		 "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
		 "-keyout srv.key -out srv.csr -subj /CN=127.0.0.1 && "
		 "openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
		 "-out srv.pem -days 2 -extfile san.ext",
		 dir);
	ret = ktest_run_capture(argv, &out);
	if (ret)
		fprintf(stderr, "fakekube: openssl: %s\n", out);
	free(out);
	return ret;
}

int ktest_fakekube_start(struct ktest_fakekube *k, const char *dir, const char *token)
{
	char bin[PATH_MAX], cert[PATH_MAX + 16], key[PATH_MAX + 16], line[128];
	int in[2], out[2];

	memset(k, 0, sizeof(*k));
	k->pid = -1;
	snprintf(k->dir, sizeof(k->dir), "%s", dir);
	snprintf(cert, sizeof(cert), "%s/srv.pem", dir);
	if ((access(cert, R_OK) && ktest_fakekube_certs(dir)) || pipe2(in, O_CLOEXEC) ||
	    pipe2(out, O_CLOEXEC)) /* not inherited by the daemons the test starts */
		return -1;
	snprintf(bin, sizeof(bin), "%s/tools/kt-fakekube", ktest_build_dir());
	snprintf(cert, sizeof(cert), "%s/srv.pem", dir);
	snprintf(key, sizeof(key), "%s/srv.key", dir);
	fflush(NULL);
	k->pid = fork();
	if (k->pid < 0)
		return -1;
	if (k->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(in[0], 0);
		dup2(out[1], 1);
		close(in[1]);
		close(out[0]);
		execl(bin, bin, "--cert", cert, "--key", key, "--token", token, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	k->in = fdopen(in[1], "w");
	k->out = fdopen(out[0], "r");
	if (!k->in || !k->out || !fgets(line, sizeof(line), k->out) ||
	    sscanf(line, "ready %d", &k->port) != 1) {
		fprintf(stderr, "fakekube: %s did not start\n", bin);
		return -1;
	}
	return 0;
}

int ktest_fakekube_cmd(struct ktest_fakekube *k, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	va_start(ap, fmt);
	vfprintf(k->in, fmt, ap);
	va_end(ap);
	fputc('\n', k->in);
	fflush(k->in);
	if (!fgets(line, sizeof(line), k->out))
		return -1;
	if (strcmp(line, "ok\n")) {
		fprintf(stderr, "fake API answered: %s", line);
		return -1;
	}
	return 0;
}

int ktest_fakekube_query(struct ktest_fakekube *k, const char *cmd, char *line, size_t len)
{
	char ok[16];

	fprintf(k->in, "%s\n", cmd);
	fflush(k->in);
	if (!fgets(line, (int)len, k->out) || !fgets(ok, sizeof(ok), k->out))
		return -1;
	return strcmp(ok, "ok\n") ? -1 : 0;
}

void ktest_fakekube_stop(struct ktest_fakekube *k)
{
	if (k->in)
		fclose(k->in); /* EOF: the server exits */
	k->in = NULL;
	if (k->pid > 0) {
		int status;

		for (int i = 0; i < 100 && waitpid(k->pid, &status, WNOHANG) == 0; i++)
			ktest_sleep_ms(20);
		if (kill(k->pid, 0) == 0) {
			kill(k->pid, SIGKILL);
			waitpid(k->pid, &status, 0);
		}
	}
	k->pid = -1;
	if (k->out)
		fclose(k->out);
	k->out = NULL;
}

bool ktest_kube_member(const struct ktest_daemon *d, const char *path, const char *ns,
		       const char *name)
{
	char want[PATH_MAX + 600], *st = ktest_daemon_cmd(d, "status json");
	bool found;

	if (!st)
		return false;
	snprintf(want, sizeof(want), "\"path\":\"%s\",\"found_by\":\"pods\",\"entry\":\"%s/%s\"",
		 path, ns, name);
	found = strstr(st, want) != NULL;
	free(st);
	return found;
}

int ktest_kubelet_pod_cgroup(const char *root, const char *uid, const char *qos, int mk, char *out,
			     size_t len)
{
	char uid_[64], tier[16] = "", *s;

	snprintf(uid_, sizeof(uid_), "%s", uid);
	for (s = uid_; *s; s++)
		if (*s == '-')
			*s = '_';
	if (!strcmp(qos, "Burstable"))
		strcpy(tier, "burstable");
	else if (!strcmp(qos, "BestEffort"))
		strcpy(tier, "besteffort");
	if (tier[0])
		snprintf(out, len, "%s/kubepods.slice/kubepods-%s.slice/kubepods-%s-pod%s.slice", root,
			 tier, tier, uid_);
	else
		snprintf(out, len, "%s/kubepods.slice/kubepods-pod%s.slice", root, uid_);
	if (!mk)
		return 0;
	for (s = out + strlen(root) + 1; (s = strchr(s, '/')); s++) {
		*s = '\0';
		if (mkdir(out, 0755) && errno != EEXIST)
			return -1;
		*s = '/';
	}
	return mkdir(out, 0755) && errno != EEXIST ? -1 : 0;
}
