// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The UDP fixture of the e2e tests (kt_udpfx.h). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kt_udpfx.h"

#define KT_UDPFX_RCVBUF (8 << 20)
#define KT_UDPFX_MAX_LOADS 8

int kt_udpfx_receiver(int *port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_DGRAM, 0), big = KT_UDPFX_RCVBUF;

	assert_true(fd >= 0);
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big)), 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	*port = ntohs(sa.sin_port);
	return fd;
}

unsigned long long kt_udpfx_drain(int fd)
{
	unsigned long long n = 0;
	char buf[2048];

	while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) >= 0)
		n++;
	return n;
}

void kt_udpfx_load_all(int n, const char *const *cg, const int *port, double secs,
		       char *const extra[], struct ktest_load *res)
{
	int fds[KT_UDPFX_MAX_LOADS][2];
	pid_t pid[KT_UDPFX_MAX_LOADS];

	assert_true(n > 0 && n <= KT_UDPFX_MAX_LOADS);
	for (int i = 0; i < n; i++) {
		assert_int_equal(pipe(fds[i]), 0);
		pid[i] = fork();
		assert_true(pid[i] >= 0);
		if (pid[i] == 0) {
			struct ktest_load r = { 0 };
			int rc = ktest_load_args(cg[i], "udp", "127.0.0.1", port[i], secs, extra, &r);

			_exit(rc == 0 && write(fds[i][1], &r, sizeof(r)) == (ssize_t)sizeof(r) ? 0 : 1);
		}
		close(fds[i][1]);
	}
	for (int i = 0; i < n; i++) {
		int st = 0;

		assert_int_equal(waitpid(pid[i], &st, 0), pid[i]);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
		assert_int_equal(read(fds[i][0], &res[i], sizeof(res[i])), (ssize_t)sizeof(res[i]));
		close(fds[i][0]);
	}
}
