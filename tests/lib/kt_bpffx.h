/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The BPF fixture of the tests that load programs themselves: their pin
 * directories under /sys/fs/bpf, removed by the teardown, and the check
 * that none is left behind. */
#ifndef KT_BPFFX_H
#define KT_BPFFX_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

/* A fresh pin directory name for one test: /sys/fs/bpf/kt-test-<pid>-<what><n>
 * (what kt_bpffx_pins_left looks for). */
void kt_bpffx_pin_path(char *out, size_t len, const char *what);
/* Unlinks every pin in dir, then removes dir; nothing if it is absent. */
void kt_bpffx_rm_pins(const char *dir);
/* The name of an entry /sys/fs/bpf/kt-test-<this pid>-* still there (a
 * static buffer), or NULL when none is; "" when /sys/fs/bpf cannot be
 * read. */
const char *kt_bpffx_pins_left(void);

/* cmocka setup of a test's fixture: *state = a zeroed block of size bytes
 * whose first member, char pin[PATH_MAX], holds kt_bpffx_pin_path(what);
 * -1 when out of memory. */
int kt_bpffx_setup(void **state, size_t size, const char *what);

struct kt_bpf;
/* cmocka: kt_bpf_open of the programs with their maps pinned at pin, or
 * the test fails naming why; *opened set. */
void kt_bpffx_open(struct kt_bpf *b, const char *pin, bool *opened);
/* A teardown's: b closed if opened, then every pin and link under pin
 * removed (kt_bpf_cleanup; a failure printed). */
void kt_bpffx_close(struct kt_bpf *b, const char *pin, bool opened);

/* cmocka: prints the entry kt_bpffx_pins_left names and fails the test,
 * or does nothing when it names none (inline: the tools that link
 * tests/lib do not link cmocka). */
static inline void kt_bpffx_assert_none_left(void)
{
	const char *left = kt_bpffx_pins_left();

	if (left) {
		print_error("left behind: /sys/fs/bpf/%s\n", left);
		fail();
	}
}

#endif
