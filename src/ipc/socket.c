/*
 * socket.c - Unix SOCK_SEQPACKET sockets between the processes of an
 * instance, with fds passed as SCM_RIGHTS.
 *
 * Interface: ipc_listen, ipc_connect, ipc_accept, ipc_peer_pid, ipc_send,
 * ipc_recv, ipc_recv_nowait, ipc_socketpair (see ipc.h).
 *
 * Addresses.  sun_path holds 108 bytes, less than a data directory path may
 * need, so the socket is named through the directory's fd:
 * "/proc/self/fd/N/name" always fits, and the kernel resolves it like any
 * path.  Without /proc (some containers) we fall back to the plain path when
 * it fits, and say so plainly when it does not.
 *
 * Messages.  SEQPACKET keeps message boundaries, so one sendmsg is one
 * request.  An empty message is refused on send: recvmsg returns 0 for it
 * just as for a closed peer.  A received message whose data or fds did not
 * fit is an error, and every fd that did arrive is closed, so a bad or
 * hostile peer cannot make us leak descriptors.
 */
#include "ipc/ipc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define LISTEN_BACKLOG 64

/* A socket address resolved through an open directory fd. */
typedef struct sock_addr {
	int dirfd;
	struct sockaddr_un sa;
	socklen_t len;
} sock_addr;

/* -1 until the first look; threads racing to it all store the same answer. */
static _Atomic int proc_fd_state = -1;

static bool proc_fd_usable(void)
{
	int usable = atomic_load_explicit(&proc_fd_state, memory_order_relaxed);
	if (usable < 0) {
		struct stat st;
		usable = stat("/proc/self/fd", &st) == 0 && S_ISDIR(st.st_mode);
		atomic_store_explicit(&proc_fd_state, usable, memory_order_relaxed);
	}
	return usable;
}

static int check_name(const char *name)
{
	if (name[0] == '\0' || strchr(name, '/') != NULL || strcmp(name, ".") == 0 ||
	    strcmp(name, "..") == 0)
		return wr_error(WALRUS_EINVAL, "bad socket name \"%s\"", name);
	return WALRUS_OK;
}

static int fill_path(sock_addr *a, const char *dir, const char *name)
{
	bool fits;
	memset(&a->sa, 0, sizeof(a->sa));
	a->sa.sun_family = AF_UNIX;
	if (proc_fd_usable())
		fits = wr_snprintf(a->sa.sun_path, sizeof(a->sa.sun_path), "/proc/self/fd/%d/%s",
		                   a->dirfd, name);
	else
		fits = wr_snprintf(a->sa.sun_path, sizeof(a->sa.sun_path), "%s/%s", dir, name);
	if (!fits)
		return wr_error(WALRUS_EINVAL,
		                "socket path \"%s/%s\" is too long (max %zu bytes without /proc)",
		                dir, name, sizeof(a->sa.sun_path) - 1);
	a->len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(a->sa.sun_path) + 1);
	return WALRUS_OK;
}

/* Opens @dir and builds the address of @name in it; the caller closes a->dirfd. */
static int addr_open(sock_addr *a, const char *dir, const char *name, bool for_connect)
{
	int rc = check_name(name);
	if (rc != WALRUS_OK)
		return rc;
	a->dirfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (a->dirfd < 0) {
		if (for_connect && errno == ENOENT)
			return wr_error(WALRUS_ENOENT, "no instance is listening on \"%s/%s\"", dir,
			                name);
		return wr_error(wr_errno_code(errno), "could not open directory \"%s\": %m", dir);
	}
	rc = fill_path(a, dir, name);
	if (rc != WALRUS_OK)
		close(a->dirfd);
	return rc;
}

static int new_socket(int *fd)
{
	*fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (*fd < 0)
		return wr_error(wr_errno_code(errno), "could not create Unix socket: %m");
	return WALRUS_OK;
}

/*
 * connect(2), returning 0 or an errno.  An AF_UNIX connect interrupted while
 * waiting for backlog room has not connected, so it is simply tried again
 * (EISCONN would mean the first attempt made it after all).
 */
static int connect_addr(int fd, const sock_addr *a)
{
	while (connect(fd, (const struct sockaddr *)&a->sa, a->len) != 0) {
		if (errno == EISCONN)
			return 0;
		if (errno != EINTR)
			return errno;
	}
	return 0;
}

/*
 * Removes a socket left by an instance that is gone.  Refuses anything that
 * is not a socket, and a socket someone still accepts connections on.
 */
static int remove_stale(const sock_addr *a, const char *dir, const char *name)
{
	struct stat st;
	if (fstatat(a->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
		if (errno == ENOENT)
			return WALRUS_OK;
		return wr_error(wr_errno_code(errno), "could not stat \"%s/%s\": %m", dir, name);
	}
	if (!S_ISSOCK(st.st_mode))
		return wr_error(WALRUS_EBUSY,
		                "\"%s/%s\" exists and is not a socket; refusing to remove it", dir,
		                name);
	int probe;
	int rc = new_socket(&probe);
	if (rc != WALRUS_OK)
		return rc;
	int err = connect_addr(probe, a);
	close(probe);
	if (err == 0)
		return wr_error(WALRUS_EBUSY, "another process is listening on \"%s/%s\"", dir,
		                name);
	if (err != ECONNREFUSED && err != ENOENT) {
		errno = err;
		return wr_error(wr_errno_code(err), "could not check socket \"%s/%s\": %m", dir,
		                name);
	}
	if (unlinkat(a->dirfd, name, 0) != 0 && errno != ENOENT)
		return wr_error(wr_errno_code(errno), "could not remove stale socket \"%s/%s\": %m",
		                dir, name);
	return WALRUS_OK;
}

/* bind(2) with umask 0177, so the socket file is born 0600: no window in
 * which another user could connect.  The process has no threads, so the
 * temporary umask is safe. */
static int bind_private(int fd, const sock_addr *a, const char *dir, const char *name)
{
	mode_t old = umask(0177);
	int r = bind(fd, (const struct sockaddr *)&a->sa, a->len);
	int err = errno;
	umask(old);
	if (r != 0) {
		errno = err;
		return wr_error(wr_errno_code(err), "could not bind socket \"%s/%s\": %m", dir,
		                name);
	}
	return WALRUS_OK;
}

static int listen_at(const sock_addr *a, const char *dir, const char *name, int *fd_out)
{
	int rc = remove_stale(a, dir, name);
	int fd = -1;
	if (rc == WALRUS_OK)
		rc = new_socket(&fd);
	if (rc == WALRUS_OK)
		rc = bind_private(fd, a, dir, name);
	if (rc == WALRUS_OK && listen(fd, LISTEN_BACKLOG) != 0)
		rc = wr_error(wr_errno_code(errno), "could not listen on \"%s/%s\": %m", dir, name);
	if (rc != WALRUS_OK) {
		if (fd >= 0)
			close(fd);
		return rc;
	}
	*fd_out = fd;
	return WALRUS_OK;
}

int ipc_listen(const char *dir, const char *name, int *fd_out)
{
	sock_addr a;
	int rc = addr_open(&a, dir, name, false);
	if (rc != WALRUS_OK)
		return rc;
	rc = listen_at(&a, dir, name, fd_out);
	close(a.dirfd);
	return rc;
}

int ipc_connect(const char *dir, const char *name, int *fd_out)
{
	sock_addr a;
	int rc = addr_open(&a, dir, name, true);
	if (rc != WALRUS_OK)
		return rc;
	int fd;
	rc = new_socket(&fd);
	if (rc == WALRUS_OK) {
		int err = connect_addr(fd, &a);
		if (err == ENOENT || err == ECONNREFUSED)
			rc = wr_error(WALRUS_ENOENT, "no instance is listening on \"%s/%s\"", dir,
			              name);
		else if (err != 0) {
			errno = err;
			rc = wr_error(wr_errno_code(err), "could not connect to \"%s/%s\": %m", dir,
			              name);
		}
		if (rc != WALRUS_OK)
			close(fd);
	}
	close(a.dirfd);
	if (rc == WALRUS_OK)
		*fd_out = fd;
	return rc;
}

int ipc_accept(int lfd, int *fd_out)
{
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd >= 0) {
			*fd_out = fd;
			return WALRUS_OK;
		}
		/* A client that gave up before we got to it is not our error. */
		if (errno == EINTR || errno == ECONNABORTED)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return wr_error(WALRUS_EBUSY, "no connection is pending");
		return wr_error(wr_errno_code(errno), "could not accept a connection: %m");
	}
}

int ipc_peer_pid(int fd, pid_t *pid)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
		return wr_error(wr_errno_code(errno), "could not get the peer of socket %d: %m",
		                fd);
	*pid = cred.pid;
	return WALRUS_OK;
}

int ipc_socketpair(int fds[2])
{
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0)
		return wr_error(wr_errno_code(errno), "could not create a socket pair: %m");
	return WALRUS_OK;
}

/* ---------------------------------------------------------------- messages */

typedef union cmsg_buf {
	char buf[CMSG_SPACE(sizeof(int) * IPC_MAX_FDS)];
	struct cmsghdr align;
} cmsg_buf;

static void attach_fds(struct msghdr *mh, cmsg_buf *cb, const int *fds, int nfds)
{
	if (nfds == 0)
		return;
	memset(cb, 0, sizeof(*cb));
	mh->msg_control = cb->buf;
	mh->msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
	struct cmsghdr *c = CMSG_FIRSTHDR(mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
	memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
}

static int send_error(int err, size_t len)
{
	errno = err;
	if (err == EPIPE || err == ECONNRESET)
		return wr_error(WALRUS_EIO, "could not send a message: peer closed the connection");
	if (err == EAGAIN || err == EWOULDBLOCK)
		return wr_error(WALRUS_EBUSY, "could not send a message: socket buffer is full");
	if (err == EMSGSIZE)
		return wr_error(WALRUS_ETOOBIG, "could not send a message of %zu bytes: %m", len);
	return wr_error(wr_errno_code(err), "could not send a message: %m");
}

int ipc_send(int sock, const void *msg, size_t len, const int *fds, int nfds)
{
	if (nfds < 0 || nfds > IPC_MAX_FDS)
		return wr_error(WALRUS_EINVAL, "cannot send %d fds in one message (max %d)", nfds,
		                IPC_MAX_FDS);
	if (len == 0)
		return wr_error(WALRUS_EINVAL, "cannot send an empty message");
	struct iovec iov = {.iov_base = (void *)msg, .iov_len = len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	cmsg_buf cb;
	attach_fds(&mh, &cb, fds, nfds);
	ssize_t n;
	while ((n = sendmsg(sock, &mh, MSG_NOSIGNAL)) < 0)
		if (errno != EINTR)
			return send_error(errno, len);
	if ((size_t)n != len)
		return wr_error(WALRUS_EIO, "short send: %zd of %zu bytes", n, len);
	return WALRUS_OK;
}

/* Moves the fds of every SCM_RIGHTS header into out[]; returns how many. */
static int collect_fds(struct msghdr *mh, int *out, int cap)
{
	int n = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c != NULL; c = CMSG_NXTHDR(mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int count = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (int i = 0; i < count && n < cap; i++)
			memcpy(&out[n++], CMSG_DATA(c) + sizeof(int) * (size_t)i, sizeof(int));
	}
	return n;
}

static void close_all(const int *fds, int n)
{
	for (int i = 0; i < n; i++)
		close(fds[i]);
}

static int recv_common(int sock, void *msg, size_t cap, size_t *len, int *fds, int *nfds, int flags)
{
	struct iovec iov = {.iov_base = msg, .iov_len = cap};
	cmsg_buf cb;
	struct msghdr mh = {.msg_iov = &iov,
	                    .msg_iovlen = 1,
	                    .msg_control = cb.buf,
	                    .msg_controllen = sizeof(cb.buf)};
	if (nfds != NULL)
		*nfds = 0;
	ssize_t n;
	while ((n = recvmsg(sock, &mh, flags | MSG_CMSG_CLOEXEC)) < 0) {
		if (errno == EINTR)
			continue;
		if ((errno == EAGAIN || errno == EWOULDBLOCK) && (flags & MSG_DONTWAIT)) {
			*len = SIZE_MAX;
			return WALRUS_OK;
		}
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return wr_error(WALRUS_EBUSY, "no message is queued on socket %d", sock);
		if (errno == ECONNRESET) {
			*len = 0; /* the peer went away: same as an orderly close */
			return WALRUS_OK;
		}
		return wr_error(wr_errno_code(errno), "could not receive a message: %m");
	}
	int got[IPC_MAX_FDS];
	int ngot = collect_fds(&mh, got, IPC_MAX_FDS);
	if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		close_all(got, ngot);
		return wr_error(
		    WALRUS_EPROTO, "received message did not fit (%zu-byte buffer, %d fds max%s%s)",
		    cap, IPC_MAX_FDS, (mh.msg_flags & MSG_TRUNC) ? ", data truncated" : "",
		    (mh.msg_flags & MSG_CTRUNC) ? ", fds truncated" : "");
	}
	if (ngot > 0 && (fds == NULL || nfds == NULL)) {
		close_all(got, ngot);
		return wr_error(WALRUS_EPROTO, "received %d unexpected fds", ngot);
	}
	if (ngot > 0) {
		memcpy(fds, got, sizeof(int) * (size_t)ngot);
		*nfds = ngot;
	}
	*len = (size_t)n;
	return WALRUS_OK;
}

int ipc_recv(int sock, void *msg, size_t cap, size_t *len, int *fds, int *nfds)
{
	return recv_common(sock, msg, cap, len, fds, nfds, 0);
}

int ipc_recv_nowait(int sock, void *msg, size_t cap, size_t *len, int *fds, int *nfds)
{
	return recv_common(sock, msg, cap, len, fds, nfds, MSG_DONTWAIT);
}
