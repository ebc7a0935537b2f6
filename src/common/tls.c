/*
 * tls.c - TLS through OpenSSL's libssl, for the two network protocols: the
 * replication connection (src/repl) and the RESP server (src/server).
 *
 * Interface: wr_tls_server_ctx and wr_tls_client_ctx build contexts (TLS
 * 1.2 at least, the files loaded and checked at once, so that a bad
 * certificate is reported where it is configured and not at the first
 * connection); wr_tls_handshake, wr_tls_read and wr_tls_write wrap one
 * call of libssl each and say what the socket must become (readable or
 * writable) before it is called again, so the same functions serve a
 * blocking socket with a timeout (a "want" is then the timeout) and a
 * non-blocking socket in an event loop.
 *
 * Notes: no session tickets, no session cache, no renegotiation: nothing
 * arrives after the handshake but application data and alerts, so a
 * readable socket means data for the caller (or its end), and the
 * replication handshake's channel binding (RFC 5705 exporter) is always
 * that of a full handshake.  libssl's error queue is per thread; each call
 * clears it first so that its result is about that call only.
 */
#include "common/common.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

/* The oldest error libssl queued, as text ("certificate verify failed"), the queue emptied. */
static void queued_error(char *buf, size_t len)
{
	unsigned long e = ERR_get_error();
	unsigned long next;
	if (e == 0) {
		wr_snprintf(buf, len, "%s", "unknown TLS error");
		return;
	}
	while ((next = ERR_get_error()) != 0)
		(void)next; /* the first one says why; the rest is the call stack */
	const char *reason = ERR_reason_error_string(e);
	if (reason != NULL)
		wr_snprintf(buf, len, "%s", reason);
	else
		ERR_error_string_n(e, buf, len);
}

/* A private key that others may read is as good as published. */
static int check_key_mode(const char *path)
{
	struct stat st;
	if (stat(path, &st) != 0)
		return wr_error(wr_errno_code(errno), "could not stat TLS key file \"%s\": %m",
		                path);
	if ((st.st_mode & 077) != 0)
		return wr_error(
		    WALRUS_EINVAL,
		    "TLS key file \"%s\" may be read by others (mode %04o): chmod 600 it", path,
		    (unsigned)(st.st_mode & 07777));
	return WALRUS_OK;
}

static int ctx_fail(SSL_CTX *ctx, const char *what, const char *path)
{
	char why[256];
	queued_error(why, sizeof(why));
	SSL_CTX_free(ctx);
	return wr_error(WALRUS_EINVAL, "could not load %s \"%s\": %s", what, path, why);
}

static SSL_CTX *new_ctx(bool server)
{
	SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
	if (ctx == NULL)
		return NULL;
	if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) {
		SSL_CTX_free(ctx);
		return NULL;
	}
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_TICKET |
	                             SSL_OP_NO_COMPRESSION | SSL_OP_CIPHER_SERVER_PREFERENCE);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	if (server)
		(void)SSL_CTX_set_num_tickets(ctx, 0);
	/* Writes resume where a short one stopped, the buffer possibly moved (a
	 * RESP connection's output buffer grows between two calls). */
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	return ctx;
}

/* A certificate chain and its key into @ctx; the key checked against the certificate. */
static int load_pair(SSL_CTX *ctx, const char *cert, const char *key)
{
	int rc = check_key_mode(key);
	if (rc != WALRUS_OK) {
		SSL_CTX_free(ctx);
		return rc;
	}
	if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1)
		return ctx_fail(ctx, "TLS certificate file", cert);
	bool loaded = SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) == 1;
	bool mismatch =
	    !loaded && ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH;
	if (mismatch || (loaded && SSL_CTX_check_private_key(ctx) != 1))
		return ctx_fail(ctx, "TLS key file (it does not match the certificate)", key);
	if (!loaded)
		return ctx_fail(ctx, "TLS key file", key);
	return WALRUS_OK;
}

int wr_tls_server_ctx(const char *cert, const char *key, const char *ca, int verify,
                      wr_tls_ctx **out)
{
	SSL_CTX *ctx = new_ctx(true);
	if (ctx == NULL)
		return wr_error(WALRUS_ENOMEM, "could not create a TLS context");
	int rc = load_pair(ctx, cert, key);
	if (rc != WALRUS_OK)
		return rc;
	if (ca != NULL && ca[0] != '\0') {
		STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(ca);
		if (names == NULL || SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1) {
			sk_X509_NAME_pop_free(names, X509_NAME_free);
			return ctx_fail(ctx, "TLS CA file", ca);
		}
		SSL_CTX_set_client_CA_list(ctx, names);
	}
	if (verify != WR_TLS_VERIFY_NONE)
		SSL_CTX_set_verify(
		    ctx,
		    SSL_VERIFY_PEER |
		        (verify == WR_TLS_VERIFY_REQUIRED ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0),
		    NULL);
	*out = ctx;
	return WALRUS_OK;
}

int wr_tls_client_ctx(const char *ca, const char *cert, const char *key, wr_tls_ctx **out)
{
	SSL_CTX *ctx = new_ctx(false);
	if (ctx == NULL)
		return wr_error(WALRUS_ENOMEM, "could not create a TLS context");
	if (cert != NULL && cert[0] != '\0') {
		int rc = load_pair(ctx, cert, key);
		if (rc != WALRUS_OK)
			return rc;
	}
	if (ca != NULL && ca[0] != '\0') {
		if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1)
			return ctx_fail(ctx, "TLS root certificate file", ca);
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	} else {
		SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
	}
	*out = ctx;
	return WALRUS_OK;
}

void wr_tls_ctx_free(wr_tls_ctx *ctx)
{
	SSL_CTX_free(ctx);
}

int wr_tls_new(wr_tls_ctx *ctx, int fd, wr_tls **out)
{
	ERR_clear_error();
	SSL *s = SSL_new(ctx);
	if (s == NULL || SSL_set_fd(s, fd) != 1) {
		SSL_free(s);
		return wr_error(WALRUS_ENOMEM, "could not create a TLS connection");
	}
	*out = s;
	return WALRUS_OK;
}

void wr_tls_free(wr_tls *s)
{
	SSL_free(s);
}

/* After a call that failed with @r (errno cleared before it): a want, the
 * end, or an error recorded with wr_error. */
static int outcome(SSL *s, int r, const char *what)
{
	int e = SSL_get_error(s, r);
	char why[256];
	switch (e) {
	case SSL_ERROR_WANT_READ:
		return WR_TLS_WANT_READ;
	case SSL_ERROR_WANT_WRITE:
		return WR_TLS_WANT_WRITE;
	case SSL_ERROR_ZERO_RETURN:
		return WR_TLS_EOF;
	case SSL_ERROR_SYSCALL:
		if (ERR_peek_error() == 0 && errno == 0)
			return WR_TLS_EOF; /* the peer closed without close_notify */
		if (ERR_peek_error() == 0) {
			int err = errno;
			wr_error(WALRUS_EIO, "TLS %s failed: %s", what, strerror(err));
			errno = err;
			return WR_TLS_ERROR;
		}
		break;
	default:
		break;
	}
	if (e == SSL_ERROR_SSL &&
	    ERR_GET_REASON(ERR_peek_error()) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
		ERR_clear_error();
		return WR_TLS_EOF;
	}
	queued_error(why, sizeof(why));
	if (e == SSL_ERROR_SSL && SSL_get_verify_result(s) != X509_V_OK)
		wr_snprintf(why, sizeof(why), "certificate verify failed: %s",
		            X509_verify_cert_error_string(SSL_get_verify_result(s)));
	wr_error(WALRUS_EIO, "TLS %s failed: %s", what, why);
	errno = EPROTO;
	return WR_TLS_ERROR;
}

int wr_tls_handshake(wr_tls *s)
{
	ERR_clear_error();
	errno = 0;
	int r = SSL_do_handshake(s);
	if (r == 1)
		return WR_TLS_DONE;
	int o = outcome(s, r, "handshake");
	if (o == WR_TLS_EOF) {
		wr_error(WALRUS_EIO, "TLS handshake failed: the peer closed the connection");
		errno = ECONNRESET;
		return WR_TLS_ERROR;
	}
	return o;
}

ssize_t wr_tls_read(wr_tls *s, void *buf, size_t len)
{
	ERR_clear_error();
	size_t got = 0;
	errno = 0;
	int r = SSL_read_ex(s, buf, len, &got);
	if (r == 1)
		return (ssize_t)got;
	return outcome(s, r, "read");
}

ssize_t wr_tls_write(wr_tls *s, const void *buf, size_t len)
{
	ERR_clear_error();
	size_t done = 0;
	errno = 0;
	int r = SSL_write_ex(s, buf, len, &done);
	if (r == 1)
		return (ssize_t)done;
	int o = outcome(s, r, "write");
	if (o == WR_TLS_EOF) {
		wr_error(WALRUS_EIO, "TLS write failed: the peer closed the connection");
		errno = EPIPE;
		return WR_TLS_ERROR;
	}
	return o;
}

size_t wr_tls_pending(wr_tls *s)
{
	return (size_t)SSL_pending(s);
}

void wr_tls_close(wr_tls *s)
{
	/* close_notify, best effort and without waiting for the peer's: the
	 * connection ends either way, and a peer that does not read must not
	 * hold us (a blocking socket's send timeout bounds the write). */
	ERR_clear_error();
	if (SSL_is_init_finished(s))
		(void)SSL_shutdown(s);
	ERR_clear_error();
}
