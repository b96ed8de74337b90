/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The connection's state, shared by rconn.c (the non-blocking connection)
 * and rconn_wait.c (its blocking use, for callers with no loop). */
#ifndef KT_RCONN_INT_H
#define KT_RCONN_INT_H

#include <netdb.h>
#include <stdbool.h>
#include <stdint.h>
#include <openssl/ssl.h>
#include <hiredis/hiredis.h>
#include "store/rconn.h"

/* PEM files (a CA bundle, a chain, a key) are kilobytes */
#define PEM_MAX_BYTES (1u << 20)

#define READ_CHUNK 16384

struct pend {
	kt_rconn_cb cb;
	void *cbdata;
	uint64_t deadline_ns; /* 0: none */
	uint64_t queued_ns;   /* for the timeout message */
};

struct kt_rconn {
	enum kt_rconn_state st;
	int fd;
	char where[300];          /* "host:port" / "[v6]:port" for messages */
	struct addrinfo *ai_list; /* resolved addresses; ai_next: the next to try */
	struct addrinfo *ai_next;
	uint64_t opened_ns, connect_deadline_ns;
	/* TLS */
	SSL_CTX *ctx;             /* NULL: plain TCP */
	SSL *ssl;
	char *server_name;
	const char *bad_file;     /* the option's TLS file that setup_tls failed on */
	bool verify;
	bool hs_want_write;       /* handshake waits for EPOLLOUT (else EPOLLIN) */
	bool rd_want_write;       /* SSL_read needs the socket writable */
	bool wr_want_read;        /* SSL_write needs the socket readable */
	/* output: formatted commands not yet written, [out_off, out_len) */
	char *out;
	size_t out_off, out_len, out_cap;
	uint64_t bytes_out, bytes_in; /* commands formatted, replies read: the store's work */
	/* FIFO of commands awaiting replies (ring) */
	struct pend *q;
	size_t q_head, q_len, q_cap;
	redisReader *reader;
	/* the reader's functions with createArray bounded (hiredis 0.14 has no
	 * maxelements), and what an oversized header claimed */
	redisReplyObjectFunctions fns;
	const redisReplyObjectFunctions *orig_fns;
	long long claimed;
	kt_rconn_cb push_cb;      /* replies with no command pending; NULL: protocol error */
	void *push_data;
	int depth;                /* > 0 while inside handle()/close(): free is deferred */
	bool closing;
	int err_code;             /* negative errno once FAILED */
	char err[512];
};

/* a blocking caller's reply slot (kt_rconn_sync_cb fills it) */
struct sync_slot {
	redisReply *reply;
	bool done;
};

void kt_rconn_sync_cb(void *cbdata, redisReply *reply, const char *err);
void kt_rconn_set_err(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* the connection FAILED with -code and the message; pending callbacks told */
void kt_rconn_fail(struct kt_rconn *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
