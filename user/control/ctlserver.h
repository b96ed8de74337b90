/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The control socket's server (kthrottlectl's end): a Unix stream socket,
 * one command line per connection and its reply, sent non-blocking; or
 * "subscribe NAME", after which the connection stays open and gets a line
 * when the limit starts refusing and when it stops. Every fd is a watch in
 * the daemon's loop (evloop.h); what a command does and which limits exist
 * are the daemon's, asked through struct kt_ctl_ops. */
#ifndef KT_CTLSERVER_H
#define KT_CTLSERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "base/evloop.h"
#include "kthrottle.h"

#define KT_MAX_CLIENTS 16
#define KT_CLIENT_TIMEOUT_NS 2000000000ull /* to send the command line */
#define KT_MAX_SUBSCRIBERS (KT_MAX_CLIENTS / 2) /* the rest stay for commands */
#define KT_SUB_BACKLOG_MAX 65536 /* a subscriber this far behind is dropped */

/* A reply being sent, non-blocking: p[off..len) is still to go. */
struct kt_client_out {
	char *p;
	size_t len, off;
};

struct kt_client {
	int fd;             /* the connection; -1: a free slot */
	struct kt_watch w;  /* fd in the loop while the slot is in use */
	char buf[256];
	size_t len;
	uint64_t since_ns;  /* accepted at; for a subscriber, when its backlog began */
	struct kt_client_out out;
	/* "subscribe NAME": the connection stays open and gets a line when the
	 * limit starts refusing and when it stops */
	bool subscribed;
	bool throttled;     /* the last line sent was "throttled" */
	char sub_limit[KT_NAME_LEN];
};

/* What the server asks of its owner (ctx is kt_ctlserver_init's). */
struct kt_ctl_ops {
	/* The reply to a parsed command (a KT_CTL_* other than subscribe, or a
	 * parse error), malloc'd; NULL: out of memory. */
	char *(*command)(void *ctx, int cmd);
	/* Whether a limit of that name exists, for "subscribe NAME". */
	bool (*has_limit)(void *ctx, const char *name);
	/* A connection just subscribed to limit name: if it refuses already,
	 * the owner says so (kt_ctlserver_notify). */
	void (*subscribed)(void *ctx, const char *name);
};

struct kt_ctlserver {
	int epfd;              /* the loop the connections join; set before the first accept */
	int listenfd;          /* -1: not listening */
	struct kt_watch w_listen; /* the listener's watch; the owner registers it */
	struct kt_client clients[KT_MAX_CLIENTS];
	const struct kt_ctl_ops *ops;
	void *ctx;
};

/* Not listening, no clients, every watch unregistered (before anything can
 * fail, so that kt_ctlserver_close always has something to go by). */
void kt_ctlserver_init(struct kt_ctlserver *s, const struct kt_ctl_ops *ops, void *ctx);
/* Listens on path (mode 0600; its directory made when missing). A stale
 * socket there is replaced; a live one (another kthrottled), or anything
 * that is not a socket, is an error. 0 or -errno with err one line. */
int kt_ctlserver_listen(struct kt_ctlserver *s, const char *path, char *err, size_t errlen);
/* Tells limit name's subscribers that it refuses now (a "throttled" line
 * with reason and retry_ms) or no longer ("resumed"), to each one whose
 * last line said otherwise. */
void kt_ctlserver_notify(struct kt_ctlserver *s, const char *name, bool refusing,
			 const char *reason, double retry_ms);
/* Drops the clients stuck past KT_CLIENT_TIMEOUT_NS (no command line yet,
 * or a reply or subscriber backlog not taken); called each tick. */
void kt_ctlserver_expire(struct kt_ctlserver *s, uint64_t now);
/* Closes every client connection (no unwatching: the loop is going). */
void kt_ctlserver_drop_clients(struct kt_ctlserver *s);
/* Closes the listener and removes its socket file at path. */
void kt_ctlserver_close(struct kt_ctlserver *s, const char *path);

#endif
