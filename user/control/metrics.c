/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <microhttpd.h>
#include "metrics.h"

#define METRICS_MAX_CONNECTIONS 8
#define METRICS_TIMEOUT_S 2 /* a scraper idle this long is dropped */

struct kt_metrics {
	struct MHD_Daemon *mhd;
	const struct kt_metrics_route *routes;
	int n;
	void *arg;
};

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, char *body,
			     const char *type)
{
	struct MHD_Response *r;
	enum MHD_Result ret;

	if (!body)
		return MHD_NO; /* out of memory: drop the connection */
	r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	ret = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
			      const char *method, const char *version, const char *upload_data,
			      size_t *upload_size, void **req_cls)
{
	struct kt_metrics *m = cls;
	unsigned status = MHD_HTTP_OK;

	(void)version;
	(void)upload_data;
	(void)req_cls;
	if (*upload_size)
		return MHD_NO; /* no request bodies here */
	if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
		return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, strdup("only GET\n"), "text/plain");
	for (int i = 0; i < m->n; i++) {
		if (strcmp(url, m->routes[i].path))
			continue;
		char *body = m->routes[i].render(m->arg, &status);

		return reply(conn, status, body, m->routes[i].content_type);
	}
	return reply(conn, MHD_HTTP_NOT_FOUND, strdup("see /metrics\n"), "text/plain");
}

int kt_metrics_start(struct kt_metrics **out, const char *addr, int port,
		     const struct kt_metrics_route *routes, int n, void *arg, char *err,
		     size_t errlen)
{
	struct sockaddr_storage ss = { 0 };
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
	unsigned flags = MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
	struct kt_metrics *m = calloc(1, sizeof(*m));

	*out = NULL;
	if (!m)
		return -ENOMEM;
	if (inet_pton(AF_INET, addr, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
	} else if (inet_pton(AF_INET6, addr, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		flags |= MHD_USE_IPv6;
	} else {
		free(m);
		snprintf(err, errlen, "metrics: %s is not an IP address", addr);
		return -EINVAL;
	}
	m->routes = routes;
	m->n = n;
	m->arg = arg;
	errno = 0;
	m->mhd = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, handle, m,
				  MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
				  MHD_OPTION_CONNECTION_LIMIT, (unsigned)METRICS_MAX_CONNECTIONS,
				  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)METRICS_TIMEOUT_S,
				  MHD_OPTION_END);
	if (!m->mhd) {
		int e = errno ? errno : EADDRINUSE;

		free(m);
		snprintf(err, errlen, "metrics: cannot listen on %s port %d: %s", addr, port,
			 strerror(e));
		return -e;
	}
	*out = m;
	return 0;
}

int kt_metrics_fd(const struct kt_metrics *m)
{
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(m->mhd, MHD_DAEMON_INFO_EPOLL_FD);

	return info ? info->epoll_fd : -1;
}

void kt_metrics_run(struct kt_metrics *m)
{
	if (m)
		MHD_run(m->mhd);
}

void kt_metrics_stop(struct kt_metrics *m)
{
	if (!m)
		return;
	MHD_stop_daemon(m->mhd);
	free(m);
}
