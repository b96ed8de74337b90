/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* tests/tools/kt-fakekube as a test fixture: a CA and a server certificate
 * for 127.0.0.1 made with the openssl CLI, the server started on a free
 * port with a bearer token, and its stdin commands (see the tool's header)
 * sent and checked. Kubelet-style pod cgroups to go with it. */
#ifndef KTEST_FAKEKUBE_H
#define KTEST_FAKEKUBE_H

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

struct ktest_fakekube {
	char dir[PATH_MAX]; /* ca.pem, srv.pem, srv.key (given by the caller, made here) */
	pid_t pid;
	FILE *in, *out;
	int port;
};

/* Makes dir/ca.pem (the CA a client trusts), dir/srv.pem and dir/srv.key
 * (the server's, for IP 127.0.0.1) with the openssl CLI. 0 or -1. */
int ktest_fakekube_certs(const char *dir);
/* Starts the server with dir's certificates (made by ktest_fakekube_certs
 * first, unless dir/srv.pem exists), accepting `token`. 0, or -1 (printed
 * why). */
int ktest_fakekube_start(struct ktest_fakekube *k, const char *dir, const char *token);
/* The line the server printed for a command (stats, times), before "ok";
 * 0, or -1 when it did not answer so. */
int ktest_fakekube_query(struct ktest_fakekube *k, const char *cmd, char *line, size_t len);
/* One stdin command; 0 when the server answered "ok" (else prints it). */
int ktest_fakekube_cmd(struct ktest_fakekube *k, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* EOF on stdin, then SIGKILL if it has not exited within 2 s. */
void ktest_fakekube_stop(struct ktest_fakekube *k);

struct ktest_daemon;

/* Whether d's status json lists cgroup `path` as a member found by pods as
 * ns/name (false if the daemon did not answer). */
bool ktest_kube_member(const struct ktest_daemon *d, const char *path, const char *ns,
		       const char *name);

/* The cgroup directory the kubelet's systemd driver makes for a pod of QoS
 * class qos ("Guaranteed", "Burstable", "BestEffort") and uid, under root:
 * root/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice;
 * made with its parents when mk. */
int ktest_kubelet_pod_cgroup(const char *root, const char *uid, const char *qos, int mk, char *out,
			     size_t len);

#endif
