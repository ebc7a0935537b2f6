/*
 * tls.c - a client connection's bytes, in clear or through TLS (--tls-port):
 * what both backend models (conn.c, pool.c) call instead of recv/send.
 *
 * Interface: srv_tls_setup (the server, before it forks a backend),
 * srv_io_open, srv_io_recv, srv_io_send, srv_io_pending, srv_io_close.
 *
 * Every socket is used without blocking: recv and send with MSG_DONTWAIT
 * in clear, libssl on a non-blocking socket with TLS.  A call that cannot
 * go on returns SRV_IO_AGAIN and says which readiness to wait for: with
 * TLS, a read may need the socket writable (the handshake's replies) and
 * a write readable, so the loops wait for what the call asked, not for
 * what they were doing.  The handshake needs no step of its own: a
 * connection is put in the server's state and its first read runs it.
 * Bytes TLS has decrypted and the caller has not read yet do not show in
 * the socket's readiness: srv_io_pending says so, and the loops read them
 * before they wait.
 *
 * A TLS failure (a client speaking clear text on the TLS port, a client
 * certificate the CA did not sign, a record damaged on the way) closes
 * the connection with one line on stderr naming libssl's reason.
 */
#include "server/srv_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/ssl.h>

#include "common/common.h"

int srv_tls_setup(srv_config *cfg)
{
	if (cfg->tls_port < 0)
		return 0;
	int rc = wr_tls_server_ctx(cfg->tls_cert, cfg->tls_key, cfg->tls_ca, cfg->tls_auth_clients,
	                           &cfg->tls_ctx);
	if (rc == WALRUS_OK)
		return 0;
	fprintf(stderr, "walrus serve: %s\n", walrus_errmsg());
	return 2;
}

int srv_io_open(srv_io *io, const srv_config *cfg, int fd, bool tls)
{
	*io = (srv_io){.fd = fd};
	if (!tls)
		return 0;
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) {
		fprintf(stderr, "walrus serve: fcntl: %s\n", strerror(errno));
		return -1;
	}
	if (wr_tls_new(cfg->tls_ctx, fd, &io->tls) != WALRUS_OK) {
		fprintf(stderr, "walrus serve: %s\n", walrus_errmsg());
		return -1;
	}
	SSL_set_accept_state(io->tls);
	return 0;
}

/* "ADDR:PORT" of the client, for a line about it. */
static void describe_peer(int fd, char *out, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[INET6_ADDRSTRLEN];
	if (getpeername(fd, (struct sockaddr *)&ss, &sl) != 0)
		return;
	if (ss.ss_family == AF_INET &&
	    inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, host, sizeof(host)))
		snprintf(out, len, "%s:%u", host,
		         (unsigned)ntohs(((struct sockaddr_in *)&ss)->sin_port));
	else if (ss.ss_family == AF_INET6 &&
	         inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, host, sizeof(host)))
		snprintf(out, len, "[%s]:%u", host,
		         (unsigned)ntohs(((struct sockaddr_in6 *)&ss)->sin6_port));
}

/* libssl's result as ours: bytes, the end, a wait (for *@want), or an error said on stderr. */
static ssize_t tls_result(srv_io *io, ssize_t n, short *want)
{
	if (n > 0)
		return n;
	if (n == WR_TLS_WANT_READ || n == WR_TLS_WANT_WRITE) {
		*want = n == WR_TLS_WANT_READ ? POLLIN : POLLOUT;
		return SRV_IO_AGAIN;
	}
	if (n == WR_TLS_EOF)
		return 0;
	if (errno == EPROTO) { /* libssl's reason; a vanished peer is not worth a line */
		char peer[INET6_ADDRSTRLEN + 8] = "?";
		describe_peer(io->fd, peer, sizeof(peer));
		fprintf(stderr, "walrus serve: TLS with client %s: %s; connection closed\n", peer,
		        walrus_errmsg());
	}
	return SRV_IO_ERROR;
}

ssize_t srv_io_recv(srv_io *io, void *buf, size_t len, short *want)
{
	*want = POLLIN;
	if (io->tls != NULL)
		return tls_result(io, wr_tls_read(io->tls, buf, len), want);
	ssize_t n;
	do
		n = recv(io->fd, buf, len, MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return SRV_IO_AGAIN;
	return n < 0 ? SRV_IO_ERROR : n;
}

ssize_t srv_io_send(srv_io *io, const void *buf, size_t len, short *want)
{
	*want = POLLOUT;
	if (io->tls != NULL)
		return tls_result(io, wr_tls_write(io->tls, buf, len), want);
	ssize_t n;
	do
		n = send(io->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return SRV_IO_AGAIN;
	return n <= 0 ? SRV_IO_ERROR : n;
}

bool srv_io_pending(const srv_io *io)
{
	return io->tls != NULL && wr_tls_pending(io->tls) > 0;
}

void srv_io_close(srv_io *io)
{
	if (io->tls != NULL) {
		wr_tls_close(io->tls);
		wr_tls_free(io->tls);
		io->tls = NULL;
	}
	close(io->fd); /* a socket: nothing written is at stake in its close */
	io->fd = -1;
}
