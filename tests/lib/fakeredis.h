/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* A fake Redis for the replies a real one never sends: it speaks RESP on a
 * free loopback port, answers PING, AUTH and SELECT as Redis does, SCRIPT
 * with `sha_reply`, and every other command with `reply`, verbatim. Up to
 * KTEST_FAKEREDIS_CONNS clients at once (a daemon reconnecting while its
 * old connection lingers). One thread; the replies may change at any time. */
#ifndef KTEST_FAKEREDIS_H
#define KTEST_FAKEREDIS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#define KTEST_FAKEREDIS_CONNS 8

struct ktest_fakeredis {
	int lfd, port;
	pthread_t th;
	pthread_mutex_t mu;
	bool running, stop;
	char reply[512];      /* to EVALSHA, EVAL, GET, SENTINEL... */
	char sha_reply[128];  /* to SCRIPT LOAD */
	char last_cmd[32];    /* the last command, its argument count and 3rd word */
	int last_argc;
	char last_arg2[32];
	unsigned long answered;
};

/* Listens and serves; sha_reply a valid SHA-1, reply "-ERR unset". 0 or -1. */
int ktest_fakeredis_start(struct ktest_fakeredis *f);
void ktest_fakeredis_stop(struct ktest_fakeredis *f);
/* The raw RESP answered to every other command from now on. */
void ktest_fakeredis_set(struct ktest_fakeredis *f, const char *reply);
/* The raw RESP answered to SCRIPT. */
void ktest_fakeredis_set_sha(struct ktest_fakeredis *f, const char *reply);
/* "CMD ARG2 ARGC" of the last command served. */
void ktest_fakeredis_last(struct ktest_fakeredis *f, char *out, size_t len);

#endif
