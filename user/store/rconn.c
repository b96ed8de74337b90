/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Non-blocking Redis connection: see rconn.h for the contract. */
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include "kthrottle.h"
#include "store/rconn.h"
#include "store/rconn_int.h"
#include "base/volfile.h"


static bool is_ip_literal(const char *s)
{
	unsigned char buf[sizeof(struct in6_addr)];

	return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

void kt_rconn_set_err(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!err || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
}

/* Text of the most recent OpenSSL error (the queue is cleared). */
static const char *ssl_reason(char *buf, size_t len)
{
	unsigned long e = ERR_peek_last_error();
	const char *r = e ? ERR_reason_error_string(e) : NULL;

	if (r)
		snprintf(buf, len, "%s", r);
	else if (e)
		snprintf(buf, len, "OpenSSL error %#lx", e);
	else
		snprintf(buf, len, "unknown TLS error");
	ERR_clear_error();
	return buf;
}

static void release_socket(struct kt_rconn *c)
{
	/* No SSL_shutdown: it may want to wait for the peer, and the peer gets
	 * the TCP close anyway; Redis does not care about close_notify. */
	if (c->ssl) {
		SSL_free(c->ssl);
		c->ssl = NULL;
	}
	if (c->fd >= 0) {
		close(c->fd);
		c->fd = -1;
	}
}

static struct pend *q_at(struct kt_rconn *c, size_t i)
{
	return &c->q[(c->q_head + i) % c->q_cap];
}

static struct pend q_pop(struct kt_rconn *c)
{
	struct pend p = c->q[c->q_head];

	c->q_head = (c->q_head + 1) % c->q_cap;
	c->q_len--;
	return p;
}

/* Callbacks may queue (refused: FAILED) or close (pops the rest itself), so
 * pop one at a time rather than walking the ring. */
static void fail_pending(struct kt_rconn *c, const char *msg)
{
	while (c->q_len) {
		struct pend p = q_pop(c);

		p.cb(p.cbdata, NULL, msg);
	}
}

void kt_rconn_fail(struct kt_rconn *c, int code, const char *fmt, ...)
{
	va_list ap;

	if (c->st == KT_RCONN_FAILED)
		return;
	c->st = KT_RCONN_FAILED;
	c->err_code = code;
	va_start(ap, fmt);
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	va_end(ap);
	release_socket(c);
	c->out_off = c->out_len = 0;
	fail_pending(c, c->err);
}

/* One line for an SSL_* call that failed with SSL_get_error() == e. */
static void fail_tls(struct kt_rconn *c, const char *step, int e)
{
	char reason[256], verify[160] = "";
	long v;

	if (e == SSL_ERROR_ZERO_RETURN) {
		ERR_clear_error();
		kt_rconn_fail(c, -ECONNRESET, "%s %s failed: connection closed by the server", step, c->where);
		return;
	}
	if (e == SSL_ERROR_SYSCALL && ERR_peek_last_error() == 0) {
		int en = errno;

		if (en)
			kt_rconn_fail(c, -en, "%s %s failed: %s", step, c->where, strerror(en));
		else
			kt_rconn_fail(c, -ECONNRESET, "%s %s failed: connection closed by the server", step,
			     c->where);
		return;
	}
	ssl_reason(reason, sizeof(reason));
	/* The chain/hostname verdict says what "certificate verify failed" means. */
	if (c->verify && c->ssl && (v = SSL_get_verify_result(c->ssl)) != X509_V_OK)
		snprintf(verify, sizeof(verify), " (%s)", X509_verify_cert_error_string(v));
	kt_rconn_fail(c, -EPROTO, "%s %s failed: %s%s", step, c->where, reason, verify);
}

/* The blocking helpers' callback. dispatch() recognises it and hands the
 * reply over instead of freeing it, so the caller gets it without a copy. */
void kt_rconn_sync_cb(void *cbdata, redisReply *reply, const char *err)
{
	struct sync_slot *slot = cbdata;

	(void)reply; /* only called with NULL: on failure */
	(void)err;
	slot->done = true;
}

static void *bounded_array(const redisReadTask *t, int elements)
{
	struct kt_rconn *c = t->privdata;

	if (elements > KT_RCONN_MAX_ELEMENTS) {
		c->claimed = elements;
		return NULL; /* the reader fails ("out of memory"); dispatch names it */
	}
	return c->orig_fns->createArray(t, elements);
}

/* A bulk string whose header is read but whose body is not: the reader
 * would buffer whatever length it claims, so the claim is checked first. */
static bool bulk_oversized(struct kt_rconn *c)
{
	const redisReader *r = c->reader;
	const char *p, *end;
	long long n = 0;

	if (r->ridx < 0 || r->rstack[r->ridx].type != REDIS_REPLY_STRING)
		return false;
	p = r->buf + r->pos;
	end = r->buf + r->len;
	if (p < end && *p == '-')
		return false;
	for (; p < end && *p >= '0' && *p <= '9'; p++) {
		n = n * 10 + (*p - '0');
		if (n > KT_RCONN_MAX_BULK) {
			c->claimed = n;
			return true;
		}
	}
	return false;
}

/* Moves [data, data+len) into the reader and runs callbacks for complete
 * replies. Stops as soon as the conn fails or a callback closes it. */
static void dispatch(struct kt_rconn *c, const char *data, size_t len)
{
	c->bytes_in += len;
	if (redisReaderFeed(c->reader, data, len) != REDIS_OK) {
		kt_rconn_fail(c, -ENOMEM, "reading from %s failed: %s", c->where, c->reader->errstr);
		return;
	}
	while (c->st == KT_RCONN_READY) {
		void *r = NULL;
		struct pend p;

		if (redisReaderGetReply(c->reader, &r) != REDIS_OK) {
			if (c->claimed)
				kt_rconn_fail(c, -EMSGSIZE, "oversized reply from %s: an array of %lld elements (at most %d)",
				     c->where, c->claimed, KT_RCONN_MAX_ELEMENTS);
			else
				kt_rconn_fail(c, -EPROTO, "protocol error from %s: %s", c->where, c->reader->errstr);
			return;
		}
		if (!r) {
			if (bulk_oversized(c))
				kt_rconn_fail(c, -EMSGSIZE, "oversized reply from %s: a bulk string of %lld bytes (at most %d)",
				     c->where, c->claimed, KT_RCONN_MAX_BULK);
			return;
		}
		if (!c->q_len && c->push_cb) {
			c->push_cb(c->push_data, r, NULL);
			freeReplyObject(r);
			continue;
		}
		if (!c->q_len) {
			freeReplyObject(r);
			kt_rconn_fail(c, -EPROTO, "protocol error from %s: reply without a command", c->where);
			return;
		}
		p = q_pop(c);
		if (p.cb == kt_rconn_sync_cb) {
			((struct sync_slot *)p.cbdata)->reply = r;
			((struct sync_slot *)p.cbdata)->done = true;
			continue;
		}
		p.cb(p.cbdata, r, NULL);
		freeReplyObject(r);
	}
}

/* Reads until the socket would block: level-triggered epoll would signal
 * again anyway, but bytes decrypted into OpenSSL's buffer would not. */
static void do_read(struct kt_rconn *c)
{
	char buf[READ_CHUNK];

	c->rd_want_write = false;
	while (c->st == KT_RCONN_READY) {
		ssize_t n;

		if (c->ssl) {
			int e;

			ERR_clear_error();
			n = SSL_read(c->ssl, buf, sizeof(buf));
			if (n <= 0) {
				e = SSL_get_error(c->ssl, (int)n);
				if (e == SSL_ERROR_WANT_READ)
					return;
				if (e == SSL_ERROR_WANT_WRITE) {
					c->rd_want_write = true;
					return;
				}
				fail_tls(c, "TLS read from", e);
				return;
			}
		} else {
			n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
			if (n == 0) {
				kt_rconn_fail(c, -ECONNRESET, "connection closed by %s", c->where);
				return;
			}
			if (n < 0) {
				if (errno == EINTR)
					continue;
				if (errno == EAGAIN || errno == EWOULDBLOCK)
					return;
				kt_rconn_fail(c, -errno, "read from %s failed: %s", c->where, strerror(errno));
				return;
			}
		}
		dispatch(c, buf, (size_t)n);
	}
}

/* A server that rejects us after our side of the handshake finished (TLS
 * 1.3 client certificates) sends an alert and closes; our next write then
 * fails with a bare EPIPE/ECONNRESET while the alert, which says why, still
 * sits unread in the socket. Reads it and fails with it if there is one. */
static bool harvest_alert(struct kt_rconn *c)
{
	int saved_errno = errno, n, e;
	char buf[512];
	unsigned long saved_err = ERR_peek_last_error();

	if (saved_err)
		return false; /* OpenSSL already knows the reason */
	n = SSL_read(c->ssl, buf, sizeof(buf));
	if (n > 0) {
		/* Replies that made it: deliver them before failing. */
		dispatch(c, buf, (size_t)n);
	} else if ((e = SSL_get_error(c->ssl, n)) == SSL_ERROR_SSL && ERR_peek_last_error()) {
		fail_tls(c, "TLS session with", e);
		return true;
	}
	ERR_clear_error();
	errno = saved_errno;
	return c->st == KT_RCONN_FAILED;
}

static void do_write(struct kt_rconn *c)
{
	c->wr_want_read = false;
	while (c->st == KT_RCONN_READY && c->out_off < c->out_len) {
		size_t left = c->out_len - c->out_off;
		ssize_t n;

		if (c->ssl) {
			int e;

			ERR_clear_error();
			n = SSL_write(c->ssl, c->out + c->out_off, left > INT32_MAX ? INT32_MAX : (int)left);
			if (n <= 0) {
				e = SSL_get_error(c->ssl, (int)n);
				if (e == SSL_ERROR_WANT_WRITE)
					return;
				if (e == SSL_ERROR_WANT_READ) {
					c->wr_want_read = true;
					return;
				}
				if (harvest_alert(c))
					return;
				fail_tls(c, "TLS write to", e);
				return;
			}
		} else {
			n = send(c->fd, c->out + c->out_off, left, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (n < 0) {
				if (errno == EINTR)
					continue;
				if (errno == EAGAIN || errno == EWOULDBLOCK)
					return;
				kt_rconn_fail(c, -errno, "write to %s failed: %s", c->where, strerror(errno));
				return;
			}
		}
		c->out_off += (size_t)n;
	}
	if (c->out_off == c->out_len)
		c->out_off = c->out_len = 0;
}

static void do_handshake(struct kt_rconn *c)
{
	int r, e;

	ERR_clear_error();
	r = SSL_connect(c->ssl);
	if (r == 1) {
		c->st = KT_RCONN_READY;
		do_write(c);
		return;
	}
	e = SSL_get_error(c->ssl, r);
	if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
		c->hs_want_write = e == SSL_ERROR_WANT_WRITE;
		return;
	}
	fail_tls(c, "TLS handshake with", e);
}

static void connected(struct kt_rconn *c)
{
	if (!c->ctx) {
		c->st = KT_RCONN_READY;
		do_write(c);
		return;
	}
	c->st = KT_RCONN_HANDSHAKING;
	c->ssl = SSL_new(c->ctx);
	if (!c->ssl || !SSL_set_fd(c->ssl, c->fd)) {
		fail_tls(c, "TLS setup for", SSL_ERROR_SSL);
		return;
	}
	SSL_set_connect_state(c->ssl);
	/* RFC 6066: SNI carries host names only, never IP literals. */
	if (!is_ip_literal(c->server_name) && !SSL_set_tlsext_host_name(c->ssl, c->server_name)) {
		fail_tls(c, "TLS setup for", SSL_ERROR_SSL);
		return;
	}
	if (c->verify) {
		int ok;

		if (is_ip_literal(c->server_name)) {
			ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), c->server_name);
		} else {
			SSL_set_hostflags(c->ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
			ok = SSL_set1_host(c->ssl, c->server_name);
		}
		if (!ok) {
			fail_tls(c, "TLS setup for", SSL_ERROR_SSL);
			return;
		}
	}
	do_handshake(c);
}

/* Starts a connect to the next address that does not fail at once. The new
 * socket is made before the old one is closed so its number differs (see
 * rconn.h: the caller notices the change). */
static void try_connect(struct kt_rconn *c)
{
	int last = ECONNREFUSED;

	while (c->ai_next) {
		struct addrinfo *ai = c->ai_next;
		int fd, one = 1;

		c->ai_next = ai->ai_next;
		fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			last = errno;
			continue;
		}
		if (c->fd >= 0)
			close(c->fd);
		c->fd = fd;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
			connected(c);
			return;
		}
		if (errno == EINPROGRESS || errno == EINTR) {
			c->st = KT_RCONN_CONNECTING;
			return;
		}
		last = errno;
	}
	kt_rconn_fail(c, -last, "connect to %s failed: %s", c->where, strerror(last));
}

/* The PEM file at path as a memory BIO, read under the volume rule at every
 * connect (a rotated Secret is used from the next connect on). */
static BIO *pem_bio(struct kt_rconn *c, const char *path, char **buf, char *err, size_t errlen)
{
	const char *stage;
	char why[200];
	size_t len;
	BIO *b;

	*buf = NULL;
	if (kt_volfile_read(path, PEM_MAX_BYTES, buf, &len, &stage, why, sizeof(why))) {
		kt_rconn_set_err(err, errlen, "TLS setup for %s: cannot %s %s: %s", c->where, stage, path, why);
		return NULL;
	}
	b = BIO_new_mem_buf(*buf, (int)len);
	if (!b)
		kt_rconn_set_err(err, errlen, "TLS setup for %s: out of memory", c->where);
	return b;
}

static void pem_done(BIO *b, char *buf)
{
	BIO_free(b);
	if (buf) {
		explicit_bzero(buf, strlen(buf)); /* a key */
		free(buf);
	}
}

/* Every certificate of the CA file into the context's trust store. */
static int load_ca(struct kt_rconn *c, const char *path, char *err, size_t errlen)
{
	char reason[256], *buf;
	BIO *b = pem_bio(c, path, &buf, err, errlen);
	X509_STORE *store = SSL_CTX_get_cert_store(c->ctx);
	X509 *x;
	int n = 0;

	if (!b) {
		free(buf);
		return -EIO;
	}
	while ((x = PEM_read_bio_X509(b, NULL, NULL, NULL))) {
		int ok = X509_STORE_add_cert(store, x);

		X509_free(x);
		if (!ok)
			break;
		n++;
	}
	ERR_clear_error(); /* the end of the file reads as an error */
	pem_done(b, buf);
	if (!n) {
		kt_rconn_set_err(err, errlen, "TLS setup for %s: cannot load CA file %s: %s", c->where, path,
			ssl_reason(reason, sizeof(reason)));
		return -EIO;
	}
	return 0;
}

/* The client certificate (then its chain) and key. */
static int load_identity(struct kt_rconn *c, const char *cert, const char *key, char *err,
			 size_t errlen)
{
	char reason[256], *buf;
	BIO *b = pem_bio(c, cert, &buf, err, errlen);
	X509 *x;
	EVP_PKEY *k;
	int ok;

	c->bad_file = cert;
	if (!b) {
		free(buf);
		return -EIO;
	}
	x = PEM_read_bio_X509(b, NULL, NULL, NULL);
	ok = x && SSL_CTX_use_certificate(c->ctx, x);
	X509_free(x);
	while (ok && (x = PEM_read_bio_X509(b, NULL, NULL, NULL)))
		if (!SSL_CTX_add0_chain_cert(c->ctx, x))
			X509_free(x);
	if (ok)
		ERR_clear_error();
	pem_done(b, buf);
	if (!ok) {
		kt_rconn_set_err(err, errlen, "TLS setup for %s: cannot load certificate %s: %s", c->where, cert,
			ssl_reason(reason, sizeof(reason)));
		return -EIO;
	}
	c->bad_file = key; /* a key that does not match is the key's fault too */
	if (!(b = pem_bio(c, key, &buf, err, errlen))) {
		free(buf);
		return -EIO;
	}
	k = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL);
	ok = k && SSL_CTX_use_PrivateKey(c->ctx, k);
	EVP_PKEY_free(k);
	pem_done(b, buf);
	if (!ok) {
		kt_rconn_set_err(err, errlen, "TLS setup for %s: cannot load key %s: %s", c->where, key,
			ssl_reason(reason, sizeof(reason)));
		return -EIO;
	}
	if (!SSL_CTX_check_private_key(c->ctx)) {
		kt_rconn_set_err(err, errlen, "TLS setup for %s: key %s does not match certificate %s: %s",
			c->where, key, cert, ssl_reason(reason, sizeof(reason)));
		return -EIO;
	}
	c->bad_file = NULL;
	return 0;
}

static int setup_tls(struct kt_rconn *c, const struct kt_rconn_opts *o, char *err, size_t errlen)
{
	char reason[256];

	c->server_name = strdup(o->server_name && *o->server_name ? o->server_name : o->host);
	c->ctx = SSL_CTX_new(TLS_client_method());
	if (!c->server_name || !c->ctx) {
		kt_rconn_set_err(err, errlen, "TLS setup for %s: out of memory", c->where);
		return -ENOMEM;
	}
	SSL_CTX_set_min_proto_version(c->ctx, TLS1_2_VERSION);
	/* The output buffer moves (realloc) and is written in pieces. */
	SSL_CTX_set_mode(c->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	c->verify = !o->insecure_skip_verify;
	SSL_CTX_set_verify(c->ctx, c->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
	/* the files are read here, at every connect, not by OpenSSL from a
	 * path: the volume rule applies and a rotated Secret is picked up.
	 * Unverified, the CA file is not even read. */
	if (c->verify) {
		if (o->ca_file && load_ca(c, o->ca_file, err, errlen)) {
			c->bad_file = o->ca_file;
			return -EIO;
		}
		if (!o->ca_file && !SSL_CTX_set_default_verify_paths(c->ctx)) {
			kt_rconn_set_err(err, errlen, "TLS setup for %s: cannot load the system CA store: %s",
				c->where, ssl_reason(reason, sizeof(reason)));
			return -EIO;
		}
	}
	if (o->cert_file && load_identity(c, o->cert_file, o->key_file, err, errlen))
		return -EIO;
	return 0;
}

static void free_conn(struct kt_rconn *c)
{
	release_socket(c);
	SSL_CTX_free(c->ctx);
	free(c->server_name);
	if (c->ai_list)
		freeaddrinfo(c->ai_list);
	if (c->reader)
		redisReaderFree(c->reader);
	free(c->out);
	free(c->q);
	free(c);
}

static int check_opts(const struct kt_rconn_opts *o, char *err, size_t errlen)
{
	kt_rconn_set_err(err, errlen, "%s", "");
	if (!o || !o->host || !*o->host || strlen(o->host) > 255 || o->port < 1 || o->port > 65535) {
		kt_rconn_set_err(err, errlen, "redis connection: host and port (1..65535) are required");
		return -EINVAL;
	}
	if (o->tls && (!o->cert_file) != (!o->key_file)) {
		kt_rconn_set_err(err, errlen, "TLS for %s:%d: a client certificate needs its key and vice versa",
			o->host, o->port);
		return -EINVAL;
	}
	return 0;
}

static void set_where(struct kt_rconn *c, const struct kt_rconn_opts *o)
{
	snprintf(c->where, sizeof(c->where), strchr(o->host, ':') ? "[%s]:%d" : "%s:%d", o->host,
		 o->port);
}

int kt_rconn_tls_check(const struct kt_rconn_opts *o, const char **bad_file, char *err,
		       size_t errlen)
{
	struct kt_rconn *c;
	int ret = check_opts(o, err, errlen);

	if (bad_file)
		*bad_file = NULL;
	if (ret || !o->tls)
		return ret;
	c = calloc(1, sizeof(*c));
	if (!c) {
		kt_rconn_set_err(err, errlen, "TLS setup: out of memory");
		return -ENOMEM;
	}
	c->fd = -1;
	set_where(c, o);
	ret = setup_tls(c, o, err, errlen);
	if (ret && bad_file)
		*bad_file = c->bad_file;
	free_conn(c);
	return ret;
}

int kt_rconn_open(const struct kt_rconn_opts *o, struct kt_rconn **out, char *err, size_t errlen)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
	struct sigaction sa;
	struct kt_rconn *c;
	char port[16];
	int ret;

	if (!out) {
		kt_rconn_set_err(err, errlen, "redis connection: no result pointer");
		return -EINVAL;
	}
	ret = check_opts(o, err, errlen);
	if (ret)
		return ret;
	/* TLS writes use write(2) (see rconn.h); a peer reset must not kill us. */
	if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL)
		signal(SIGPIPE, SIG_IGN);

	c = calloc(1, sizeof(*c));
	if (!c) {
		kt_rconn_set_err(err, errlen, "redis connection: out of memory");
		return -ENOMEM;
	}
	c->fd = -1;
	c->st = KT_RCONN_CONNECTING;
	set_where(c, o);
	c->opened_ns = kt_clock_ns();
	c->connect_deadline_ns = o->connect_deadline_ns;
	c->reader = redisReaderCreate();
	if (!c->reader) {
		kt_rconn_set_err(err, errlen, "redis connection to %s: out of memory", c->where);
		ret = -ENOMEM;
		goto fail;
	}
	c->orig_fns = c->reader->fn;
	c->fns = *c->orig_fns;
	c->fns.createArray = bounded_array;
	c->reader->fn = &c->fns;
	c->reader->privdata = c;
	if (o->tls) {
		ret = setup_tls(c, o, err, errlen);
		if (ret)
			goto fail;
	}

	snprintf(port, sizeof(port), "%d", o->port);
	/* An IP literal never touches the resolver; a name may block (rconn.h). */
	hints.ai_flags |= is_ip_literal(o->host) ? AI_NUMERICHOST : AI_ADDRCONFIG;
	ret = getaddrinfo(o->host, port, &hints, &c->ai_list);
	if (ret) {
		c->ai_list = NULL;
		if (ret == EAI_MEMORY) {
			kt_rconn_set_err(err, errlen, "redis connection to %s: out of memory", c->where);
			ret = -ENOMEM;
			goto fail;
		}
		kt_rconn_fail(c, -EHOSTUNREACH, "cannot resolve %s: %s", o->host,
		     ret == EAI_SYSTEM ? strerror(errno) : gai_strerror(ret));
	} else {
		c->ai_next = c->ai_list;
		try_connect(c);
	}
	*out = c;
	return 0;
fail:
	free_conn(c);
	return ret;
}

void kt_rconn_close(struct kt_rconn *c)
{
	if (!c || c->closing)
		return;
	c->closing = true;
	c->depth++;
	if (c->st != KT_RCONN_FAILED) {
		c->st = KT_RCONN_FAILED;
		c->err_code = -ENOTCONN;
		snprintf(c->err, sizeof(c->err), "closed");
	}
	release_socket(c);
	fail_pending(c, "closed");
	if (--c->depth == 0)
		free_conn(c);
}

int kt_rconn_fd(const struct kt_rconn *c)
{
	return c->st == KT_RCONN_FAILED ? -1 : c->fd;
}

uint32_t kt_rconn_events(const struct kt_rconn *c)
{
	uint32_t ev;

	switch (c->st) {
	case KT_RCONN_CONNECTING:
		return EPOLLOUT;
	case KT_RCONN_HANDSHAKING:
		return c->hs_want_write ? EPOLLOUT : EPOLLIN;
	case KT_RCONN_READY:
		/* Always readable-interested: that is how a server close is seen. */
		ev = EPOLLIN;
		if (c->rd_want_write || (c->out_off < c->out_len && !c->wr_want_read))
			ev |= EPOLLOUT;
		return ev;
	default:
		return 0;
	}
}

uint64_t kt_rconn_deadline(const struct kt_rconn *c)
{
	uint64_t d = 0;

	if (c->st == KT_RCONN_FAILED)
		return 0;
	if (c->st != KT_RCONN_READY)
		d = c->connect_deadline_ns;
	for (size_t i = 0; i < c->q_len; i++) {
		uint64_t p = c->q[(c->q_head + i) % c->q_cap].deadline_ns;

		if (p && (!d || p < d))
			d = p;
	}
	return d;
}

static void check_deadlines(struct kt_rconn *c, uint64_t now)
{
	uint64_t d = kt_rconn_deadline(c);

	if (!d || now < d)
		return;
	if (c->st != KT_RCONN_READY && c->connect_deadline_ns && now >= c->connect_deadline_ns) {
		kt_rconn_fail(c, -ETIMEDOUT, "%s %s timed out after %llu ms",
		     c->st == KT_RCONN_HANDSHAKING ? "TLS handshake with" : "connect to", c->where,
		     (unsigned long long)((now - c->opened_ns) / 1000000));
		return;
	}
	for (size_t i = 0; i < c->q_len; i++) {
		struct pend *p = q_at(c, i);

		if (p->deadline_ns && now >= p->deadline_ns) {
			kt_rconn_fail(c, -ETIMEDOUT, "command to %s timed out: no reply within %llu ms%s", c->where,
			     (unsigned long long)((p->deadline_ns - p->queued_ns) / 1000000),
			     c->st == KT_RCONN_READY ? "" : " (still connecting)");
			return;
		}
	}
}

int kt_rconn_handle(struct kt_rconn *c, uint32_t revents, uint64_t now_ns)
{
	int ret;

	if (c->closing || c->st == KT_RCONN_FAILED)
		return c->err_code;
	c->depth++;
	/* Errors and hangups surface through the next read/write/SO_ERROR. */
	if (revents & (EPOLLERR | EPOLLHUP))
		revents |= EPOLLIN | EPOLLOUT;
	switch (c->st) {
	case KT_RCONN_CONNECTING:
		if (revents & EPOLLOUT) {
			int soerr = 0;
			socklen_t len = sizeof(soerr);

			if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &len))
				soerr = errno;
			if (!soerr) {
				connected(c);
			} else if (c->ai_next) {
				try_connect(c);
			} else {
				kt_rconn_fail(c, -soerr, "connect to %s failed: %s", c->where, strerror(soerr));
			}
		}
		break;
	case KT_RCONN_HANDSHAKING:
		if (revents & (EPOLLIN | EPOLLOUT))
			do_handshake(c);
		break;
	case KT_RCONN_READY:
		if ((revents & EPOLLIN) || (c->rd_want_write && (revents & EPOLLOUT)))
			do_read(c);
		if (c->st == KT_RCONN_READY && c->out_off < c->out_len &&
		    ((revents & EPOLLOUT) || (c->wr_want_read && (revents & EPOLLIN))))
			do_write(c);
		break;
	default:
		break;
	}
	/* After the I/O: a reply that arrived in time wins over its deadline. */
	if (c->st != KT_RCONN_FAILED)
		check_deadlines(c, now_ns);
	ret = c->st == KT_RCONN_FAILED ? c->err_code : 0;
	if (--c->depth == 0 && c->closing)
		free_conn(c);
	return ret;
}

static int out_append(struct kt_rconn *c, const char *data, size_t len)
{
	c->bytes_out += len;
	if (c->out_off && c->out_off == c->out_len)
		c->out_off = c->out_len = 0;
	if (c->out_len + len > c->out_cap) {
		size_t cap = c->out_cap ? c->out_cap : 4096;
		char *n;

		/* Compact first: TLS (ACCEPT_MOVING_WRITE_BUFFER) and send() only
		 * ever see out + out_off, so moving the unsent bytes is safe. */
		if (c->out_off) {
			memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
			c->out_len -= c->out_off;
			c->out_off = 0;
		}
		while (cap < c->out_len + len)
			cap *= 2;
		if (cap > c->out_cap) {
			n = realloc(c->out, cap);
			if (!n)
				return -ENOMEM;
			c->out = n;
			c->out_cap = cap;
		}
	}
	memcpy(c->out + c->out_len, data, len);
	c->out_len += len;
	return 0;
}

static int q_reserve(struct kt_rconn *c)
{
	struct pend *n;
	size_t cap;

	if (c->q_len < c->q_cap)
		return 0;
	cap = c->q_cap ? c->q_cap * 2 : 16;
	n = malloc(cap * sizeof(*n));
	if (!n)
		return -ENOMEM;
	for (size_t i = 0; i < c->q_len; i++)
		n[i] = *q_at(c, i);
	free(c->q);
	c->q = n;
	c->q_cap = cap;
	c->q_head = 0;
	return 0;
}

int kt_rconn_command_argv(struct kt_rconn *c, int argc, const char **argv, const size_t *argvlen,
			  kt_rconn_cb cb, void *cbdata, uint64_t deadline_ns)
{
	char *cmd = NULL;
	int n, ret;

	if (!c || argc < 1 || !argv || !cb)
		return -EINVAL;
	if (c->closing || c->st == KT_RCONN_FAILED)
		return -ENOTCONN;
	/* Reserve the queue slot first: a written command must have one. */
	ret = q_reserve(c);
	if (ret)
		return ret;
	n = redisFormatCommandArgv(&cmd, argc, argv, argvlen);
	if (n < 0)
		return -ENOMEM;
	ret = out_append(c, cmd, (size_t)n);
	redisFreeCommand(cmd);
	if (ret)
		return ret;
	*q_at(c, c->q_len) = (struct pend){
		.cb = cb, .cbdata = cbdata, .deadline_ns = deadline_ns, .queued_ns = kt_clock_ns(),
	};
	c->q_len++;
	return 0;
}

void kt_rconn_bytes(const struct kt_rconn *c, uint64_t *out, uint64_t *in)
{
	*out = c ? c->bytes_out : 0;
	*in = c ? c->bytes_in : 0;
}

enum kt_rconn_state kt_rconn_state(const struct kt_rconn *c)
{
	return c->st;
}

const char *kt_rconn_state_name(enum kt_rconn_state st)
{
	switch (st) {
	case KT_RCONN_CONNECTING:
		return "connecting";
	case KT_RCONN_HANDSHAKING:
		return "handshaking";
	case KT_RCONN_READY:
		return "ready";
	case KT_RCONN_FAILED:
		return "failed";
	}
	return "?";
}

const char *kt_rconn_error(const struct kt_rconn *c)
{
	return c->st == KT_RCONN_FAILED ? c->err : "";
}

size_t kt_rconn_pending(const struct kt_rconn *c)
{
	return c->q_len;
}

void kt_rconn_set_push(struct kt_rconn *c, kt_rconn_cb cb, void *cbdata)
{
	c->push_cb = cb;
	c->push_data = cbdata;
}

