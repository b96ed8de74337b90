/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The control socket's server (ctlserver.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include "kernel/bpf_loader.h"
#include "control/ctlproto.h"
#include "control/ctlserver.h"
#include "base/log.h"

/* A client slot reads its command line, then writes the reply. Replies are
 * queued (struct kt_client.out) and sent non-blocking as the socket drains
 * (EPOLLOUT); a client that has not taken all of it KT_CLIENT_TIMEOUT_NS
 * after it was queued is dropped, so a client that never reads cannot stall
 * the loop. */

_Static_assert(sizeof(((struct kt_client *)0)->buf) >= KT_CTL_MAX_LINE,
	       "a client's buffer holds a whole command line");

static struct kt_client_out *client_out(struct kt_ctlserver *s, struct kt_client *c)
{
	(void)s;
	return &c->out;
}

static void client_close(struct kt_ctlserver *s, struct kt_client *c)
{
	struct kt_client_out *o = client_out(s, c);
	int ret = kt_watch_del(s->epfd, &c->w);

	if (ret) /* the close below takes it out of the set all the same */
		kt_warn("control socket: cannot unwatch a client connection: %s", strerror(-ret));
	close(c->fd);
	c->fd = -1;
	c->len = 0;
	c->subscribed = c->throttled = false;
	free(o->p);
	o->p = NULL;
	o->len = o->off = 0;
}

/* What the client's watch waits for changed (ret from kt_watch_mod): on a
 * failure the loop would no longer serve it, so it is dropped. */
static void client_watch(struct kt_ctlserver *s, struct kt_client *c, uint32_t events)
{
	int ret = kt_watch_mod(s->epfd, &c->w, events);

	if (ret) {
		kt_warn("control socket: cannot watch a client connection: %s; closing it",
			strerror(-ret));
		client_close(s, c);
	}
}

/* Best effort and never blocking: a last word to a client being dropped. */
static void client_say(struct kt_client *c, const char *s)
{
	ssize_t r = send(c->fd, s, strlen(s), MSG_NOSIGNAL | MSG_DONTWAIT);

	(void)r;
}

/* Sends what the socket takes now; closes once all is sent or on error. */
static void client_flush(struct kt_ctlserver *s, struct kt_client *c)
{
	struct kt_client_out *o = client_out(s, c);

	while (o->off < o->len) {
		ssize_t w = send(c->fd, o->p + o->off, o->len - o->off, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return; /* EPOLLOUT resumes */
		if (w <= 0)
			break; /* client gone */
		o->off += (size_t)w;
	}
	if (c->subscribed && o->off == o->len) {
		/* all sent: wait for the next line, and notice a hang-up */
		free(o->p);
		o->p = NULL;
		o->len = o->off = 0;
		client_watch(s, c, EPOLLIN);
		return;
	}
	client_close(s, c);
}

/* Queues a line to a subscriber, never waiting on it: one that lets
 * KT_SUB_BACKLOG_MAX bytes pile up is dropped. */
static void subscriber_say(struct kt_ctlserver *s, struct kt_client *c, const char *line)
{
	struct kt_client_out *o = client_out(s, c);
	size_t n = strlen(line);
	char *p;

	if (o->len - o->off + n > KT_SUB_BACKLOG_MAX || !(p = realloc(o->p, o->len + n + 1))) {
		client_close(s, c);
		return;
	}
	if (o->off == o->len)
		c->since_ns = kt_clock_ns();
	memcpy(p + o->len, line, n + 1);
	o->p = p;
	o->len += n;
	client_flush(s, c);
	if (c->fd >= 0 && o->p)
		client_watch(s, c, EPOLLIN | EPOLLOUT);
}

void kt_ctlserver_notify(struct kt_ctlserver *s, const char *name, bool refusing,
			 const char *reason, double retry_ms)
{
	char line[160];

	for (int k = 0; k < KT_MAX_CLIENTS; k++) {
		struct kt_client *c = &s->clients[k];

		if (c->fd < 0 || !c->subscribed || strcmp(c->sub_limit, name) || c->throttled == refusing)
			continue;
		if (refusing)
			snprintf(line, sizeof(line), "throttled %s reason=%s retry_after_ms=%.3f\n", name,
				 reason, retry_ms);
		else
			snprintf(line, sizeof(line), "resumed %s\n", name);
		c->throttled = refusing;
		subscriber_say(s, c, line);
	}
}

/* Queues `out` (malloc'd, taken over; NULL: out of memory) as the reply. */
static void client_reply(struct kt_ctlserver *s, struct kt_client *c, char *out)
{
	struct kt_client_out *o = client_out(s, c);

	if (!out) {
		client_say(c, "error: out of memory\n");
		client_close(s, c);
		return;
	}
	o->p = out;
	o->len = strlen(out);
	o->off = 0;
	c->since_ns = kt_clock_ns(); /* the drain deadline counts from here */
	client_flush(s, c);
	/* what did not fit waits for EPOLLOUT; nothing more is read (one
	 * command per connection) */
	if (c->fd >= 0)
		client_watch(s, c, EPOLLOUT);
}

/* "subscribe NAME": the connection becomes a subscriber of limit NAME. */
static void client_subscribe(struct kt_ctlserver *s, struct kt_client *c)
{
	char name[KT_NAME_LEN], line[96];
	int subs = 0;
	bool known;

	kt_ctl_subscribe_name(c->buf, name, sizeof(name));
	known = s->ops->has_limit(s->ctx, name);
	for (int k = 0; k < KT_MAX_CLIENTS; k++)
		subs += s->clients[k].fd >= 0 && s->clients[k].subscribed;
	if (!known || subs >= KT_MAX_SUBSCRIBERS) {
		char *msg = NULL;

		if (known)
			msg = strdup("error: too many subscribers\n");
		else if (asprintf(&msg, "error: no limit named %s\n", name) < 0)
			msg = NULL;
		client_reply(s, c, msg);
		return;
	}
	c->subscribed = true;
	c->throttled = false;
	snprintf(c->sub_limit, sizeof(c->sub_limit), "%s", name);
	snprintf(line, sizeof(line), "ok: subscribed %s\n", name);
	subscriber_say(s, c, line);
	if (c->fd >= 0)
		s->ops->subscribed(s->ctx, name); /* already refusing: say so */
}

static void client_readable(struct kt_ctlserver *s, struct kt_client *c)
{
	ssize_t r;
	int cmd;

	if (c->subscribed) {
		char sink[256];

		/* a subscriber says nothing more; EOF is its hang-up */
		r = read(c->fd, sink, sizeof(sink));
		if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
			client_close(s, c);
		return;
	}
	r = read(c->fd, c->buf + c->len, sizeof(c->buf) - c->len);
	if (r <= 0) {
		if (r < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		client_close(s, c);
		return;
	}
	c->len += (size_t)r;
	cmd = kt_ctl_parse(c->buf, c->len);
	if (cmd == KT_CTL_SUBSCRIBE)
		client_subscribe(s, c);
	else if (cmd != KT_CTL_INCOMPLETE)
		client_reply(s, c, s->ops->command(s->ctx, cmd));
}

/* A slot holds a client that has not sent its line yet or has not taken its
 * reply yet. Past the timeout it is stuck, idle or not reading: it must not
 * keep others out of the daemon. */
void kt_ctlserver_expire(struct kt_ctlserver *s, uint64_t now)
{
	for (int i = 0; i < KT_MAX_CLIENTS; i++) {
		struct kt_client *c = &s->clients[i];

		/* a subscriber waits as long as it likes, but does not leave
		 * lines unread for longer than the timeout */
		if (c->fd >= 0 && c->subscribed && !client_out(s, c)->p)
			continue;
		if (c->fd >= 0 && now - c->since_ns > KT_CLIENT_TIMEOUT_NS) {
			if (!client_out(s, c)->p)
				client_say(c, "error: timed out waiting for a command line\n");
			client_close(s, c);
		}
	}
}

/* A client's watch: its reply drains, or its line (or hang-up) comes in. */
static void on_client(struct kt_watch *w, uint32_t events)
{
	struct kt_client *c = kt_container_of(w, struct kt_client, w);
	struct kt_ctlserver *s = w->ctx;

	(void)events;
	if (c->fd >= 0 && client_out(s, c)->p)
		client_flush(s, c);
	else if (c->fd >= 0)
		client_readable(s, c);
}

static void accept_client(struct kt_ctlserver *s)
{
	int fd = accept4(s->listenfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	int i, ret;

	if (fd < 0)
		return;
	for (i = 0; i < KT_MAX_CLIENTS; i++)
		if (s->clients[i].fd < 0)
			break;
	if (i == KT_MAX_CLIENTS) {
		/* full of slow clients: the oldest makes room, since a live
		 * client sends its line right after connecting and reads its
		 * reply right after that (subscribers, at most half, stay) */
		i = -1;
		for (int k = 0; k < KT_MAX_CLIENTS; k++)
			if (!s->clients[k].subscribed &&
			    (i < 0 || s->clients[k].since_ns < s->clients[i].since_ns))
				i = k;
		if (i < 0)
			i = 0;
		if (!client_out(s, &s->clients[i])->p)
			client_say(&s->clients[i], "error: too many clients, dropped while waiting for a command line\n");
		client_close(s, &s->clients[i]);
	}
	s->clients[i].fd = fd;
	s->clients[i].len = 0;
	s->clients[i].since_ns = kt_clock_ns();
	ret = kt_watch_add(s->epfd, &s->clients[i].w, fd, EPOLLIN);
	if (ret) {
		kt_warn("control socket: cannot watch a new client connection: %s; closing it",
			strerror(-ret));
		client_close(s, &s->clients[i]);
	}
}

/* The directory the socket lives in, created when missing. */
static int mkdir_parent(const char *path)
{
	char buf[PATH_MAX];
	char *slash;

	snprintf(buf, sizeof(buf), "%s", path);
	slash = strrchr(buf, '/');
	if (!slash || slash == buf)
		return 0;
	*slash = 0;
	return kt_mkdir_p(buf, 0755);
}

/* Whether a socket file has a listener: 0 if connecting is refused (stale),
 * -EADDRINUSE if it answers or its backlog is full, else -errno. Never
 * blocks on a busy listener. */
static int socket_in_use(const struct sockaddr_un *sa)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), ret = 0;

	if (fd < 0)
		return -errno;
	if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0 || errno == EAGAIN ||
	    errno == EINPROGRESS)
		ret = -EADDRINUSE;
	else if (errno != ECONNREFUSED)
		ret = -errno;
	close(fd);
	return ret;
}

int kt_ctlserver_listen(struct kt_ctlserver *s, const char *path, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int fd, ret;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "socket path %s: longer than %zu bytes", path,
			 sizeof(sa.sun_path) - 1);
		return -ENAMETOOLONG;
	}
	strcpy(sa.sun_path, path);
	/* Only a stale socket is ever removed: whatever else is at the path
	 * (the config file, a symlink, a directory) is someone's file. */
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			snprintf(err, errlen, "socket path %s exists and is not a socket: not replacing it",
				 path);
			return -EEXIST;
		}
		ret = socket_in_use(&sa);
		if (ret == -EADDRINUSE) {
			snprintf(err, errlen, "another kthrottled is running on %s", path);
			return ret;
		}
		if (ret) {
			snprintf(err, errlen, "socket path %s: cannot tell whether it is in use: %s", path,
				 strerror(-ret));
			return ret;
		}
		if (unlink(path) < 0 && errno != ENOENT) {
			ret = -errno;
			snprintf(err, errlen, "cannot remove stale socket %s: %s", path, strerror(-ret));
			return ret;
		}
	} else if (errno != ENOENT) {
		ret = -errno;
		snprintf(err, errlen, "socket path %s: %s", path, strerror(-ret));
		return ret;
	} else {
		ret = mkdir_parent(path);
		if (ret) {
			snprintf(err, errlen, "cannot create directory for %s: %s", path, strerror(-ret));
			return ret;
		}
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 16) < 0) {
		ret = -errno;
		snprintf(err, errlen, "cannot listen on %s: %s", path, strerror(-ret));
		if (fd >= 0)
			close(fd);
		return ret;
	}
	chmod(path, 0600);
	s->listenfd = fd;
	return 0;
}

/* A new connection on the control socket. */
static void on_listen(struct kt_watch *w, uint32_t events)
{
	(void)events;
	accept_client(w->ctx);
}

void kt_ctlserver_init(struct kt_ctlserver *s, const struct kt_ctl_ops *ops, void *ctx)
{
	memset(s, 0, sizeof(*s));
	s->epfd = s->listenfd = -1;
	s->ops = ops;
	s->ctx = ctx;
	kt_watch_init(&s->w_listen, on_listen, s);
	for (int i = 0; i < KT_MAX_CLIENTS; i++) {
		s->clients[i].fd = -1;
		kt_watch_init(&s->clients[i].w, on_client, s);
	}
}

void kt_ctlserver_drop_clients(struct kt_ctlserver *s)
{
	for (int i = 0; i < KT_MAX_CLIENTS; i++) {
		if (s->clients[i].fd >= 0)
			close(s->clients[i].fd);
		s->clients[i].fd = -1;
		free(s->clients[i].out.p);
		s->clients[i].out.p = NULL;
	}
}

void kt_ctlserver_close(struct kt_ctlserver *s, const char *path)
{
	if (s->listenfd >= 0) {
		close(s->listenfd);
		unlink(path);
	}
	s->listenfd = -1;
}
