/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Non-blocking Redis connection, plain TCP or TLS (OpenSSL), driven by the
 * caller's epoll loop. hiredis does the protocol: commands are formatted with
 * redisFormatCommandArgv and replies parsed by a redisReader; this module only
 * moves bytes (through SSL_read/SSL_write under TLS) and keeps deadlines.
 *
 * Driving it:
 *   kt_rconn_open(...)                       starts connecting, returns at once
 *   loop:
 *     fd = kt_rconn_fd(c)                    (re-register if it changed, see below)
 *     wait on fd for kt_rconn_events(c), at most until kt_rconn_deadline(c)
 *     kt_rconn_handle(c, revents, kt_clock_ns())   (revents 0 on a timeout)
 * Re-read fd, events and deadline after every kt_rconn_handle and every
 * kt_rconn_command_argv: queuing a command makes the conn want EPOLLOUT, and
 * TLS may want EPOLLOUT to read or EPOLLIN to write. Level-triggered epoll is
 * assumed (handle() drains what is readable but may leave output for later).
 *
 * Commands can be queued from kt_rconn_open on; they are sent in order once
 * the connection is READY, so AUTH, SELECT, SCRIPT LOAD... are simply the
 * first commands queued. Replies are matched to commands in FIFO order
 * (pipelining). RESP2 only. A reply with no command waiting fails the
 * connection as a protocol error unless kt_rconn_set_push() installed a
 * handler for it (SUBSCRIBE: the messages that follow the confirmation).
 *
 * Time is kt_clock_ns() (kthrottle.h) everywhere: every deadline is an
 * absolute kt_clock_ns() value, 0 meaning none. A connection does not
 * recover: once FAILED (error, timeout, peer close) the caller closes it
 * and opens a new one.
 *
 * Name resolution: an IP literal is parsed without any lookup. A host name is
 * resolved synchronously with getaddrinfo inside kt_rconn_open, which may
 * block for the resolver's timeout on a slow DNS; callers that must never
 * block give IP literals (or names from /etc/hosts). Each resolved address is
 * tried in turn until one connects; moving to the next address opens a new
 * socket, so kt_rconn_fd() can change while CONNECTING. The old fd is closed
 * by then (epoll forgets it) and the new one always has a different number:
 * add it to epoll when the number changes.
 *
 * TLS writes go through OpenSSL's socket BIO (write(2)), so a peer reset
 * raises SIGPIPE: kt_rconn_open sets SIGPIPE to SIG_IGN if it is still
 * SIG_DFL (plain TCP uses MSG_NOSIGNAL). Not thread-safe: one thread drives a
 * conn (OpenSSL's error queue is per thread).
 */
#ifndef KT_RCONN_H
#define KT_RCONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <hiredis/hiredis.h>

struct kt_rconn;

/* Bounds on what a reply may claim before it is read: the largest reply the
 * store takes is a tag exchange page (KT_STORE_TAG_READ_MAX entries of up to
 * 64 KiB each) or a grants array (one entry per member of this node, up to
 * KT_STORE_MAX_POOL); CLUSTER SLOTS has at most 16384 ranges. Above them the
 * conn fails with -EMSGSIZE, "oversized reply from ...". */
#define KT_RCONN_MAX_BULK (1 << 20)
#define KT_RCONN_MAX_ELEMENTS (1 << 21)

enum kt_rconn_state {
	KT_RCONN_CONNECTING = 0, /* TCP connect in progress */
	KT_RCONN_HANDSHAKING,    /* TLS handshake in progress */
	KT_RCONN_READY,          /* commands flow */
	KT_RCONN_FAILED,         /* terminal: kt_rconn_error() says why */
};

struct kt_rconn_opts {
	const char *host;         /* IP literal (v4/v6) or name; required */
	int port;                 /* 1..65535 */
	uint64_t connect_deadline_ns; /* absolute; covers TCP connect + TLS handshake; 0: none */
	bool tls;                 /* false: plain TCP, all fields below ignored */
	const char *ca_file;      /* PEM CA bundle to verify the server; NULL: system store */
	const char *cert_file;    /* client certificate chain (PEM) for mutual TLS; NULL: none */
	const char *key_file;     /* its private key (PEM); required iff cert_file */
	bool insecure_skip_verify; /* no chain, no hostname check (still encrypted) */
	const char *server_name;  /* SNI and the name verified; NULL: host. An IP
				   * literal is checked against IP SANs and sends no SNI */
};

/* reply: the parsed reply, owned by the conn and freed (freeReplyObject)
 * right after the callback returns; a Redis error reply is a reply of type
 * REDIS_REPLY_ERROR with err NULL. On failure reply is NULL and err is one
 * line saying why ("closed" after kt_rconn_close). Called exactly once per
 * command that kt_rconn_command_argv accepted, always from kt_rconn_handle
 * or kt_rconn_close, never from kt_rconn_command_argv. The callback may queue
 * more commands and may call kt_rconn_close (freeing is then deferred until
 * the outermost kt_rconn_handle returns; do not use the conn afterwards). */
typedef void (*kt_rconn_cb)(void *cbdata, redisReply *reply, const char *err);

/* Validates o, sets up TLS (reads CA, certificate and key now), resolves the
 * host and starts a non-blocking connect. Returns 0 and *out on success; the
 * conn may already be FAILED (e.g. resolution failed or the connect was
 * refused at once): everything that happens on the network is reported
 * through kt_rconn_state()/kt_rconn_error(), never as a return value.
 * Errors (nothing allocated, err filled): -EINVAL bad option, -ENOMEM,
 * -EIO TLS setup (unreadable CA/cert/key, key does not match the cert). */
int kt_rconn_open(const struct kt_rconn_opts *o, struct kt_rconn **out, char *err, size_t errlen);

/* Fails every pending command with "closed" (in FIFO order), closes the
 * socket and frees the conn (deferred if called from a callback). NULL ok. */
void kt_rconn_close(struct kt_rconn *c);

/* The socket, or -1 when FAILED. See the header comment on changes. */
int kt_rconn_fd(const struct kt_rconn *c);
/* EPOLLIN/EPOLLOUT the conn waits for now; 0 when FAILED. */
uint32_t kt_rconn_events(const struct kt_rconn *c);
/* Nearest deadline (connect, or the earliest pending command) in
 * kt_clock_ns() ns; 0 if none or FAILED. */
uint64_t kt_rconn_deadline(const struct kt_rconn *c);

/* Advances the conn: connect completion, TLS handshake, writes queued
 * commands, reads and dispatches replies, and fails it when now_ns has
 * reached kt_rconn_deadline(). revents: what epoll reported (0 after a
 * timeout). Never blocks. On failure every pending command's callback runs
 * with the error. Returns 0 while the conn is alive, else the negative errno
 * of its failure: -ETIMEDOUT, -ECONNREFUSED, -ECONNRESET (peer closed),
 * -EPROTO (TLS or protocol error), -EHOSTUNREACH..., -ENOMEM. */
int kt_rconn_handle(struct kt_rconn *c, uint32_t revents, uint64_t now_ns);

/* Formats argv (binary-safe; argvlen NULL: strlen each) and queues it.
 * deadline_ns: absolute time by which the reply must have arrived, 0: none.
 * A command that misses its deadline fails the whole conn (replies are
 * ordered, so a late one cannot be skipped). Returns 0 (cb will be called
 * exactly once) or, with cb never called: -EINVAL (argc < 1, no cb),
 * -ENOTCONN (FAILED or closing), -ENOMEM. */
int kt_rconn_command_argv(struct kt_rconn *c, int argc, const char **argv, const size_t *argvlen,
			  kt_rconn_cb cb, void *cbdata, uint64_t deadline_ns);

enum kt_rconn_state kt_rconn_state(const struct kt_rconn *c);
/* Bytes of commands queued and of replies read on c since it was made. */
void kt_rconn_bytes(const struct kt_rconn *c, uint64_t *out, uint64_t *in);
const char *kt_rconn_state_name(enum kt_rconn_state st);
/* Why it FAILED, one line naming host:port and the step, e.g. "TLS handshake
 * with 127.0.0.1:6390 failed: certificate verify failed (unable to get local
 * issuer certificate)"; "" while not failed. */
const char *kt_rconn_error(const struct kt_rconn *c);
/* Commands queued or sent whose reply has not arrived. */
size_t kt_rconn_pending(const struct kt_rconn *c);

/* Replies that arrive while no command is pending go to cb (err NULL, reply
 * freed after it returns) instead of failing the conn: after SUBSCRIBE has
 * been confirmed, the messages. cb NULL restores the default. Never called
 * on failure (kt_rconn_state() says FAILED). */
void kt_rconn_set_push(struct kt_rconn *c, kt_rconn_cb cb, void *cbdata);

/* Checks o's TLS files the way kt_rconn_open would (readable, valid PEM, key
 * matching the certificate) without connecting: a configuration check.
 * 0 when o->tls is false. Errors as kt_rconn_open: -EINVAL, -ENOMEM, -EIO;
 * then *bad_file (if not NULL) is the one of o->ca_file, cert_file, key_file
 * at fault (the key for a mismatch), or NULL. */
int kt_rconn_tls_check(const struct kt_rconn_opts *o, const char **bad_file, char *err,
		       size_t errlen);

/* ---- blocking use ----
 * For a synchronous client: these run a private poll() loop on
 * kt_rconn_fd/events/deadline until done, so they block the thread for at
 * most until deadline_ns (0: no limit of their own; the connect deadline
 * and the commands' deadlines still apply). Not to be called from a
 * callback or on a conn that is also in someone's epoll set. */

/* Waits until the conn is READY. Returns 0, the negative errno of its
 * failure (err: kt_rconn_error()), or -ETIMEDOUT when deadline_ns passed
 * first (the conn is left as it is: close it). */
int kt_rconn_open_wait(struct kt_rconn *c, uint64_t deadline_ns, char *err, size_t errlen);

struct kt_rconn_cmd {
	int argc;
	const char **argv;
	const size_t *argvlen; /* NULL: strlen each */
};

/* Queues n commands (one pipeline, written together), each with reply
 * deadline deadline_ns, and waits for all n replies; connects first if the
 * conn is not READY yet. Returns 0 with replies[0..n) set (the caller frees
 * each with freeReplyObject; Redis error replies included), or the negative
 * errno of the conn's failure with every replies[i] NULL and err one line
 * (kt_rconn_error()). A missed deadline fails the conn (-ETIMEDOUT), as for
 * kt_rconn_command_argv. */
int kt_rconn_call_many(struct kt_rconn *c, const struct kt_rconn_cmd *cmds, int n, uint64_t deadline_ns,
		       redisReply **replies, char *err, size_t errlen);
/* One command: the reply (caller frees), or NULL with err filled. */
redisReply *kt_rconn_call(struct kt_rconn *c, int argc, const char **argv, const size_t *argvlen,
			  uint64_t deadline_ns, char *err, size_t errlen);

#endif
