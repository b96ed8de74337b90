// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The BPF fixture's pin directories (kt_bpffx.h). */
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernel/bpf_loader.h"
#include "kt_bpffx.h"

void kt_bpffx_open(struct kt_bpf *b, const char *pin, bool *opened)
{
	char err[512];

	if (kt_bpf_open(b, pin, err, sizeof(err)) != 0) {
		print_error("kt_bpf_open %s: %s\n", pin, err);
		fail();
	}
	*opened = true;
}

void kt_bpffx_close(struct kt_bpf *b, const char *pin, bool opened)
{
	char err[256];

	if (opened)
		kt_bpf_close(b);
	if (kt_bpf_cleanup(pin, err, sizeof(err)) != 0)
		fprintf(stderr, "cleanup of %s: %s\n", pin, err);
}

void kt_bpffx_pin_path(char *out, size_t len, const char *what)
{
	static int seq;

	snprintf(out, len, "/sys/fs/bpf/kt-test-%d-%s%d", getpid(), what, seq++);
}

void kt_bpffx_rm_pins(const char *dir)
{
	char p[2 * PATH_MAX];
	struct dirent *de;
	DIR *d = opendir(dir);

	if (!d)
		return;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.') {
			snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
			unlink(p);
		}
	closedir(d);
	rmdir(dir);
}

const char *kt_bpffx_pins_left(void)
{
	static char name[NAME_MAX + 1];
	char prefix[64];
	struct dirent *de;
	DIR *d = opendir("/sys/fs/bpf");

	if (!d)
		return "";
	snprintf(prefix, sizeof(prefix), "kt-test-%d-", getpid());
	name[0] = 0;
	while (!name[0] && (de = readdir(d)))
		if (!strncmp(de->d_name, prefix, strlen(prefix)))
			snprintf(name, sizeof(name), "%s", de->d_name);
	closedir(d);
	return name[0] ? name : NULL;
}

int kt_bpffx_setup(void **state, size_t size, const char *what)
{
	char *f = calloc(1, size);

	if (!f)
		return -1;
	kt_bpffx_pin_path(f, PATH_MAX, what);
	*state = f;
	return 0;
}
