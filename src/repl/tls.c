/*
 * tls.c - TLS on the replication connection.
 *
 * A connection is its socket everywhere in src/repl (an int), with or
 * without TLS: this file keeps the TLS state of the sockets that have one
 * (a small table, under a mutex: the base backup of an embedding
 * application may run in any of its threads), and every byte of a
 * connection goes through repl_io_read/repl_io_write_full, which use it
 * when there is one.  A socket number is forgotten when a new connection
 * gets it (repl_connect, repl_accept), so an entry left by a plain close()
 * can never be taken for the new connection's.
 *
 * The primary's context (ssl = on) is built by the supervisor before it
 * forks any sender, so that a bad certificate stops the start with a
 * message naming the file; each sender inherits it and runs its handshake
 * on a non-blocking socket bounded by the authentication deadline (a peer
 * trickling bytes cannot hold a sender).  The standby's side connects on
 * a blocking socket whose timeouts bound each step, checking the
 * certificate as its sslmode says.
 *
 * Channel binding: repl_tls_binding exports keying material (RFC 5705,
 * label REPL_TLS_EXPORTER_LABEL) that both ends of one TLS session share
 * and nobody else knows; the handshake's MACs cover it, so a relay that
 * terminates TLS toward each side (two sessions, two different exports)
 * cannot pass one side's proof to the other.
 */
#include "repl/repl_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#define REPL_TLS_EXPORTER_LABEL "EXPORTER-walrus-replication"

static pthread_mutex_t conns_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tls_conn {
	int fd;
	wr_tls *tls;
} * conns;
static size_t nconns, conns_cap;

/* The primary's context (ssl = on), inherited by its senders; NULL: plain. */
static wr_tls_ctx *server_ctx;

static wr_tls *tls_of(int fd)
{
	wr_tls *t = NULL;
	pthread_mutex_lock(&conns_lock);
	for (size_t i = 0; i < nconns && t == NULL; i++)
		if (conns[i].fd == fd)
			t = conns[i].tls;
	pthread_mutex_unlock(&conns_lock);
	return t;
}

/* Takes @fd's entry out of the table: its TLS state, or NULL. */
static wr_tls *take(int fd)
{
	wr_tls *t = NULL;
	pthread_mutex_lock(&conns_lock);
	for (size_t i = 0; i < nconns; i++) {
		if (conns[i].fd != fd)
			continue;
		t = conns[i].tls;
		conns[i] = conns[--nconns];
		break;
	}
	pthread_mutex_unlock(&conns_lock);
	return t;
}

static int add(int fd, wr_tls *t)
{
	pthread_mutex_lock(&conns_lock);
	int rc = wr_grow(&conns, &conns_cap, nconns + 1, sizeof(*conns), 4);
	if (rc == WALRUS_OK)
		conns[nconns++] = (struct tls_conn){.fd = fd, .tls = t};
	pthread_mutex_unlock(&conns_lock);
	return rc == WALRUS_OK ? rc : wr_error(rc, "out of memory");
}

void repl_forget(int fd)
{
	wr_tls *t = take(fd);
	if (t != NULL)
		wr_tls_free(t); /* its socket was closed without repl_close */
}

bool repl_is_tls(int fd)
{
	return tls_of(fd) != NULL;
}

void repl_close(int fd)
{
	wr_tls *t = take(fd);
	if (t != NULL) {
		wr_tls_close(t);
		wr_tls_free(t);
	}
	close(fd); /* a socket: nothing written is at stake in its close */
}

/* ---------------------------------------------------------------- I/O */

/* A want on a blocking socket is its timeout: EAGAIN, as read(2) says it. */
static ssize_t from_tls(ssize_t n)
{
	if (n == WR_TLS_WANT_READ || n == WR_TLS_WANT_WRITE) {
		errno = EAGAIN;
		return -1;
	}
	return n == WR_TLS_ERROR ? -1 : n;
}

ssize_t repl_io_read(int fd, void *buf, size_t len, short *wait_for)
{
	wr_tls *t = tls_of(fd);
	if (wait_for != NULL)
		*wait_for = POLLIN;
	if (t == NULL) {
		ssize_t n;
		do
			n = read(fd, buf, len);
		while (n < 0 && errno == EINTR);
		return n;
	}
	ssize_t n = wr_tls_read(t, buf, len);
	if (n == WR_TLS_WANT_WRITE && wait_for != NULL)
		*wait_for = POLLOUT;
	return from_tls(n);
}

ssize_t repl_io_read_full(int fd, void *buf, size_t len)
{
	size_t got = 0;
	while (got < len) {
		ssize_t n = repl_io_read(fd, (char *)buf + got, len - got, NULL);
		if (n < 0)
			return -1;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

int repl_io_write_full(int fd, const void *buf, size_t len)
{
	wr_tls *t = tls_of(fd);
	if (t == NULL)
		return wr_write_full(fd, buf, len);
	size_t done = 0;
	while (done < len) {
		ssize_t n = from_tls(wr_tls_write(t, (const char *)buf + done, len - done));
		if (n < 0)
			return -1;
		done += (size_t)n;
	}
	return 0;
}

bool repl_tls_alert(int fd, char *why, size_t len)
{
	wr_tls *t = tls_of(fd);
	uint8_t scratch[256];
	if (t == NULL || (errno != ECONNRESET && errno != EPIPE))
		return false; /* (a read could wait for a peer that is still there) */
	if (wr_tls_read(t, scratch, sizeof(scratch)) != WR_TLS_ERROR || errno != EPROTO)
		return false;
	const char *m = walrus_errmsg(), *reason = strstr(m, ": "); /* "TLS read failed: ..." */
	return wr_snprintf(why, len, "the peer ended TLS with \"%s\"", reason ? reason + 2 : m);
}

bool repl_io_pending(int fd)
{
	wr_tls *t = tls_of(fd);
	return t != NULL && wr_tls_pending(t) > 0;
}

bool repl_readable(int fd, int ms)
{
	if (repl_io_pending(fd))
		return true;
	struct pollfd p = {.fd = fd, .events = POLLIN};
	int r;
	do
		r = poll(&p, 1, ms);
	while (r < 0 && errno == EINTR);
	return r > 0;
}

/* ---------------------------------------------------------------- the primary's side */

/* A setting's file: absolute, or relative to the data directory. */
static bool in_datadir(const char *datadir, const char *file, char *out, size_t len)
{
	if (file[0] == '/' || file[0] == '\0')
		return wr_snprintf(out, len, "%s", file);
	return wr_snprintf(out, len, "%s/%s", datadir, file);
}

int repl_tls_server_setup(const wr_options *o, const char *datadir)
{
	char cert[PATH_MAX], key[PATH_MAX], ca[PATH_MAX];
	if (server_ctx != NULL) {
		wr_tls_ctx_free(server_ctx);
		server_ctx = NULL;
	}
	if (!o->ssl)
		return WALRUS_OK;
	if (o->ssl_cert_file[0] == '\0' || o->ssl_key_file[0] == '\0')
		return wr_error(WALRUS_EINVAL,
		                "option \"ssl\" is on but option \"%s\" is not set: a primary "
		                "serving TLS needs its certificate and key",
		                o->ssl_cert_file[0] == '\0' ? "ssl_cert_file" : "ssl_key_file");
	if (!in_datadir(datadir, o->ssl_cert_file, cert, sizeof(cert)) ||
	    !in_datadir(datadir, o->ssl_key_file, key, sizeof(key)) ||
	    !in_datadir(datadir, o->ssl_ca_file, ca, sizeof(ca)))
		return wr_error(WALRUS_EINVAL, "a TLS file's path is too long");
	return wr_tls_server_ctx(cert, key, ca,
	                         ca[0] != '\0' ? WR_TLS_VERIFY_REQUIRED : WR_TLS_VERIFY_NONE,
	                         &server_ctx);
}

bool repl_tls_serving(void)
{
	return server_ctx != NULL;
}

int repl_set_blocking(int fd, bool blocking)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, blocking ? fl & ~O_NONBLOCK : fl | O_NONBLOCK) != 0)
		return wr_error(WALRUS_EIO, "could not change a socket's mode: %m");
	return WALRUS_OK;
}

/* Waits for @events on @fd until @deadline_ns: WALRUS_OK, or the error that ends the wait. */
static int wait_until(int fd, short events, uint64_t deadline_ns)
{
	for (;;) {
		uint64_t now = wr_now_ns();
		if (now >= deadline_ns)
			return wr_error(WALRUS_EIO, "the TLS handshake did not finish in time");
		struct pollfd p = {.fd = fd, .events = events};
		int r = poll(&p, 1, (int)((deadline_ns - now) / 1000000 + 1));
		if (r > 0)
			return WALRUS_OK;
		if (r < 0 && errno != EINTR)
			return wr_error(WALRUS_EIO, "poll failed: %m");
	}
}

int repl_tls_accept(int fd, uint64_t deadline_ns)
{
	wr_tls *t;
	int rc = repl_set_blocking(fd, false);
	if (rc == WALRUS_OK)
		rc = wr_tls_new(server_ctx, fd, &t);
	if (rc != WALRUS_OK)
		return rc;
	SSL_set_accept_state(t);
	for (;;) {
		int r = wr_tls_handshake(t);
		if (r == WR_TLS_DONE)
			break;
		if (r == WR_TLS_ERROR)
			rc = WALRUS_EIO;
		else
			rc = wait_until(fd, r == WR_TLS_WANT_WRITE ? POLLOUT : POLLIN, deadline_ns);
		if (rc != WALRUS_OK) {
			wr_tls_free(t);
			return rc;
		}
	}
	rc = add(fd, t);
	if (rc != WALRUS_OK)
		wr_tls_free(t);
	return rc;
}

/* ---------------------------------------------------------------- the standby's side */

static const char *const mode_names[] = {
    [REPL_SSL_DISABLE] = "disable",         [REPL_SSL_PREFER] = "prefer",
    [REPL_SSL_REQUIRE] = "require",         [REPL_SSL_VERIFY_CA] = "verify-ca",
    [REPL_SSL_VERIFY_FULL] = "verify-full",
};

const char *repl_sslmode_name(int mode)
{
	return mode >= 0 && mode < (int)WR_ARRAY_LEN(mode_names) ? mode_names[mode] : "unknown";
}

int repl_sslmode_parse(const char *text)
{
	for (int i = 0; i < (int)WR_ARRAY_LEN(mode_names); i++)
		if (strcmp(text, mode_names[i]) == 0)
			return i;
	return -1;
}

/* verify-full: the name the certificate must carry, the host of "HOST:PORT". */
static int check_host(wr_tls *t, const char *addr)
{
	char host[256];
	const char *colon = strrchr(addr, ':');
	size_t n = colon != NULL ? (size_t)(colon - addr) : 0;
	if (addr[0] == '[' && n >= 2 && addr[n - 1] == ']') {
		addr++;
		n -= 2;
	}
	if (n == 0 || n >= sizeof(host))
		return wr_error(WALRUS_EINVAL,
		                "sslmode = verify-full needs primary = HOST:PORT (\"%s\" names no "
		                "host to check the certificate against)",
		                addr);
	memcpy(host, addr, n);
	host[n] = '\0';
	unsigned char ip[16];
	bool literal = inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1;
	X509_VERIFY_PARAM *vp = SSL_get0_param(t);
	int ok = literal ? X509_VERIFY_PARAM_set1_ip_asc(vp, host) : SSL_set1_host(t, host);
	if (!literal)
		ok = ok && SSL_set_tlsext_host_name(t, host);
	if (ok != 1)
		return wr_error(WALRUS_ENOMEM, "could not set the TLS host name to check");
	return WALRUS_OK;
}

/* On the blocking socket: done, failed, or a want, which is its timeout. */
static int client_handshake(wr_tls *t, const char *addr)
{
	SSL_set_connect_state(t);
	int r = wr_tls_handshake(t);
	if (r == WR_TLS_DONE)
		return WALRUS_OK;
	if (r != WR_TLS_ERROR)
		return wr_error(WALRUS_EIO, "the primary at \"%s\": the TLS handshake timed out",
		                addr);
	char why[512];
	wr_snprintf(why, sizeof(why), "%s", walrus_errmsg());
	return wr_error(WALRUS_EPERM, "the primary at \"%s\": %s", addr, why);
}

int repl_tls_connect(int fd, const char *addr, const repl_ssl_conf *c)
{
	wr_tls_ctx *ctx;
	bool verify = c->mode >= REPL_SSL_VERIFY_CA;
	if (verify && c->rootcert[0] == '\0')
		return wr_error(WALRUS_EINVAL, "sslmode = %s needs sslrootcert",
		                repl_sslmode_name(c->mode));
	int rc = wr_tls_client_ctx(verify ? c->rootcert : NULL, c->cert, c->key, &ctx);
	if (rc != WALRUS_OK)
		return rc;
	wr_tls *t;
	rc = wr_tls_new(ctx, fd, &t);
	wr_tls_ctx_free(ctx); /* the connection holds its own reference */
	if (rc != WALRUS_OK)
		return rc;
	if (c->mode == REPL_SSL_VERIFY_FULL)
		rc = check_host(t, addr);
	if (rc == WALRUS_OK)
		rc = client_handshake(t, addr);
	if (rc == WALRUS_OK)
		rc = add(fd, t);
	if (rc != WALRUS_OK)
		wr_tls_free(t);
	return rc;
}

int repl_tls_binding(int fd, uint8_t out[REPL_BINDING_LEN])
{
	wr_tls *t = tls_of(fd);
	if (t == NULL)
		return wr_error(WALRUS_EINTERNAL, "no TLS on the replication connection");
	if (SSL_export_keying_material(t, out, REPL_BINDING_LEN, REPL_TLS_EXPORTER_LABEL,
	                               strlen(REPL_TLS_EXPORTER_LABEL), NULL, 0, 0) != 1)
		return wr_error(WALRUS_EINTERNAL, "could not export TLS keying material");
	return WALRUS_OK;
}
