/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Test helper: throwaway certificates made with the openssl CLI, and a
 * redis-server (redis_proc.h) that also listens with TLS. The plain port
 * stays open so rp_* helpers (readiness PING, rp_command) keep working. */
#ifndef KT_REDIS_TLS_H
#define KT_REDIS_TLS_H

#include <stdbool.h>
#include "redis_proc.h"

struct rt_certs {
	char dir[64];
	char ca[128];         /* CA that signed server and client */
	char ca_key[128];
	char server_crt[128]; /* SAN IP:127.0.0.1, DNS:localhost */
	char server_key[128];
	char client_crt[128]; /* CN kt-test-client, clientAuth */
	char client_key[128];
	char other_ca[128];   /* unrelated CA: signed nothing here */
};

/* Creates a temp dir with the files above. Returns 0 or -errno (openssl's
 * output goes to dir/openssl.log). */
int rt_make_certs(struct rt_certs *c);
/* Removes the dir. Safe on a zeroed struct. */
void rt_remove_certs(struct rt_certs *c);
/* rp_start_master with tls-port *tls_port (chosen here), the server cert and
 * key, tls-ca-cert-file c->ca and tls-auth-clients yes|no. */
int rt_start_tls_master(struct rp_proc *p, const struct rt_certs *c, bool auth_clients, int *tls_port);
/* rp_start_replica of master reached over TLS at master_tls_port
 * (tls-replication yes, presenting the server cert as its client cert), itself
 * listening on TLS port *tls_port too (tls-auth-clients no). */
int rt_start_tls_replica(struct rp_proc *p, const struct rp_proc *master, int master_tls_port,
			 const struct rt_certs *c, int *tls_port);
/* rp_start_sentinel monitoring master over TLS at master_tls_port (so the
 * sentinel names that port), listening on TLS port *tls_port with
 * tls-auth-clients yes|no. */
int rt_start_tls_sentinel(struct rp_proc *p, const struct rp_proc *master, int master_tls_port,
			  const struct rt_certs *c, const char *name, int quorum, int down_after_ms,
			  bool auth_clients, int *tls_port);

/* The two servers the TLS tests share: rt_make_certs(c), then
 * rt_start_tls_master of tls on *tls_port (tls-auth-clients no) and of mtls
 * on *mtls_port (yes). 0, or -1 at the first step that fails (what started
 * is left for rt_stop_tls_pair). */
int rt_start_tls_pair(struct rt_certs *c, struct rp_proc *tls, int *tls_port, struct rp_proc *mtls,
		      int *mtls_port);
/* rp_stop of tls and mtls, then rt_remove_certs(c). */
void rt_stop_tls_pair(struct rt_certs *c, struct rp_proc *tls, struct rp_proc *mtls);

#endif
