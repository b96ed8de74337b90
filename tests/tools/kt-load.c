/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* kt-load: bounded load generator for demos, tests and benchmarks.
 * Joins a cgroup (optional), then for --duration seconds (and at most --max
 * operations) sends UDP datagrams with sendto() or makes TCP connect()s to a
 * loopback target, and prints what the kernel admitted and refused. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: kt-load [--cgroup DIR] --mode udp|udp-connected|tcp --addr IP --port N\n"
		"               [--duration SEC] [--max N] [--rate PER_S] [--size BYTES]\n"
		"               [--report SEC]\n"
		"Prints: ok=N refused=N errors=N elapsed=S (refused = EBUSY from kthrottle);\n"
		"with --report, one line per period: t=S ok=N refused=N.\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "cgroup", required_argument, NULL, 'g' }, { "mode", required_argument, NULL, 'm' },
		{ "addr", required_argument, NULL, 'a' },   { "port", required_argument, NULL, 'p' },
		{ "duration", required_argument, NULL, 'd' }, { "max", required_argument, NULL, 'x' },
		{ "rate", required_argument, NULL, 'r' },   { "size", required_argument, NULL, 's' },
		{ "report", required_argument, NULL, 'R' }, { 0 },
	};
	const char *cgroup = NULL, *mode = "udp", *addr = "127.0.0.1";
	double duration = 1, rate = 0, report = 0;
	long port = 9000, size = 16, max_ops = 100000000;
	struct sockaddr_storage ss = { 0 };
	socklen_t sslen;
	unsigned long long ok = 0, refused = 0, errors = 0, pok = 0, pref = 0;
	char payload[65536] = { 0 };
	int c, fd = -1, family;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		char *end = NULL;
		switch (c) {
		case 'g': cgroup = optarg; break;
		case 'm': mode = optarg; break;
		case 'a': addr = optarg; break;
		case 'p': port = strtol(optarg, &end, 10); break;
		case 'd': duration = strtod(optarg, &end); break;
		case 'x': max_ops = strtol(optarg, &end, 10); break;
		case 'r': rate = strtod(optarg, &end); break;
		case 's': size = strtol(optarg, &end, 10); break;
		case 'R': report = strtod(optarg, &end); break;
		default: usage(); return 2;
		}
		if (end && *end) {
			fprintf(stderr, "kt-load: bad value '%s'\n", optarg);
			return 2;
		}
	}
	if (port < 1 || port > 65535 || duration <= 0 || duration > 600 || size < 0 ||
	    size > 65000 || max_ops < 1) {
		usage();
		return 2;
	}
	if (cgroup) {
		char p[4096], pid[32];
		int cfd;
		snprintf(p, sizeof(p), "%s/cgroup.procs", cgroup);
		cfd = open(p, O_WRONLY);
		snprintf(pid, sizeof(pid), "%d\n", getpid());
		if (cfd < 0 || write(cfd, pid, strlen(pid)) < 0) {
			fprintf(stderr, "kt-load: cannot join %s: %s\n", cgroup, strerror(errno));
			return 1;
		}
		close(cfd);
	}
	if (strchr(addr, ':')) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		s6->sin6_family = family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		if (inet_pton(AF_INET6, addr, &s6->sin6_addr) != 1)
			goto bad_addr;
		sslen = sizeof(*s6);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		s4->sin_family = family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
		if (inet_pton(AF_INET, addr, &s4->sin_addr) != 1)
			goto bad_addr;
		sslen = sizeof(*s4);
	}
	if (!strcmp(mode, "udp") || !strcmp(mode, "udp-connected")) {
		fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			perror("kt-load: socket");
			return 1;
		}
		if (!strcmp(mode, "udp-connected") && connect(fd, (struct sockaddr *)&ss, sslen) < 0) {
			fprintf(stderr, "kt-load: connect: %s\n", strerror(errno));
			return 1;
		}
	} else if (strcmp(mode, "tcp")) {
		usage();
		return 2;
	}

	double start = now_s(), end = start + duration, next_report = start + report;
	for (long i = 0; i < max_ops; i++) {
		double t = now_s();
		if (t >= end)
			break;
		if (rate > 0) {
			double due = start + i / rate;
			while ((t = now_s()) < due && t < end)
				;
		}
		if (report > 0 && t >= next_report) {
			printf("t=%.2f ok=%llu refused=%llu\n", next_report - start, ok - pok,
			       refused - pref);
			fflush(stdout);
			pok = ok;
			pref = refused;
			next_report += report;
		}
		int r;
		if (fd >= 0) {
			r = !strcmp(mode, "udp")
				    ? (int)sendto(fd, payload, (size_t)size, 0, (struct sockaddr *)&ss, sslen)
				    : (int)send(fd, payload, (size_t)size, 0);
		} else {
			int s = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (s < 0) {
				errors++;
				continue;
			}
			r = connect(s, (struct sockaddr *)&ss, sslen);
			int e = errno;
			close(s);
			errno = e;
		}
		if (r >= 0)
			ok++;
		else if (errno == EBUSY)
			refused++;
		else
			errors++;
	}
	printf("ok=%llu refused=%llu errors=%llu elapsed=%.3f\n", ok, refused, errors,
	       now_s() - start);
	return 0;
bad_addr:
	fprintf(stderr, "kt-load: bad address '%s'\n", addr);
	return 2;
}
