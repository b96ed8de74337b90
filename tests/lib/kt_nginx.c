/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include "kt_nginx.h"
#include "ktest.h"

int kt_nginx_conf(const char *dir, const char *http, char *conf, size_t conf_len)
{
	char *text = NULL;
	int ret;

	snprintf(conf, conf_len, "%s/nginx.conf", dir);
	if (asprintf(&text,
		     "worker_processes 1;\n"
		     "pid %s/nginx.pid;\n"
		     "error_log %s/error.log warn;\n"
		     "events { worker_connections 1024; }\n"
		     "http {\n"
		     "    default_type text/plain;\n"
		     "    keepalive_requests 1000000;\n"
		     "    keepalive_timeout 60s;\n"
		     "    client_body_temp_path %s/body;\n"
		     "    proxy_temp_path %s/proxy;\n"
		     "    fastcgi_temp_path %s/fastcgi;\n"
		     "    uwsgi_temp_path %s/uwsgi;\n"
		     "    scgi_temp_path %s/scgi;\n"
		     "%s"
		     "}\n",
		     dir, dir, dir, dir, dir, dir, dir, http) < 0)
		return -ENOMEM;
	ret = ktest_write_file(conf, text);
	free(text);
	return ret;
}
