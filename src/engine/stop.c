/*
 * stop.c - walrus_stop(): asks the instance serving a data directory to
 * shut down, as `pg_ctl stop` does, and waits for its processes to exit.
 *
 * The request is a STOP message on DIR/walrus.sock (not a signal to the pid
 * in walrus.pid: a message needs no pid guessing and names its sender in
 * the log).  The supervisor answers STOP_OK at once, with its pid, and
 * exits only after its auxiliary processes have: waiting is a pidfd of the
 * supervisor becoming readable, opened while its answer proves it alive
 * (its pid cannot be reused before it has exited and been reaped), then
 * the directory lock seen free (see datadir.c).  The end of the connection
 * is not enough: the kernel closes an exiting process's files before the
 * process is gone.
 *
 * No socket while the directory lock is held means an instance that is
 * starting (it takes the lock before it listens) or ending on its own (it
 * stops listening first): we look again until one of the two settles.
 */
#include "engine/engine.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#define STOP_ANSWER_MS 30000 /* the supervisor answers at once; an old one never does */
#define STOP_RETRY_US  10000
#define STOP_UNLOCK_NS (60ULL * 1000000000ULL)

static int stop_resolve(const char *dir, char *abs)
{
	if (dir == NULL || *dir == '\0')
		return wr_error(WALRUS_EINVAL, "walrus_stop: no data directory given");
	if (realpath(dir, abs) == NULL)
		return wr_error(wr_errno_code(errno), "could not access data directory \"%s\": %m",
		                dir);
	return WALRUS_OK;
}

/* *gone: the instance we saw starting or ending went away before it listened to us. */
static int stop_connect(const char *abs, int *sock, bool *gone)
{
	bool seen = false;
	*gone = false;
	for (;;) {
		int rc = ipc_connect(abs, WR_SOCKET_NAME, sock);
		if (rc != WALRUS_ENOENT)
			return rc;
		bool locked = datadir_instance_pid(abs) != 0;
		if (!locked && !seen)
			return wr_error(WALRUS_ENOTRUNNING, "no instance is running on \"%s\"",
			                abs);
		if (!locked) {
			*gone = true;
			return WALRUS_OK;
		}
		seen = true;
		wr_sleep_us(STOP_RETRY_US);
	}
}

/* 1 when @sock has something to read (or ended), 0 after @timeout_ms (-1: never). */
static int wait_readable(int sock, int timeout_ms)
{
	struct pollfd p = {.fd = sock, .events = POLLIN};
	int r;
	do
		r = poll(&p, 1, timeout_ms);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return wr_error(WALRUS_EIO, "poll on the supervisor's socket: %m");
	return r;
}

/* *sup: the supervisor's pid when it answered, else 0 (it was exiting already). */
static int stop_send(int sock, int mode, const char *abs, pid_t *sup)
{
	wr_msg m = {.magic = WR_PROTO_MAGIC,
	            .version = WR_PROTO_VERSION,
	            .type = WR_MSG_STOP,
	            .status = mode,
	            .pid = (uint32_t)getpid()};
	size_t len;
	*sup = 0;
	int rc = ipc_send(sock, &m, sizeof(m), NULL, 0);
	if (rc == WALRUS_EIO) {
		/* The peer closed the connection first (EPIPE or ECONNRESET on a Unix
		 * socket): a supervisor exiting on its own, its linger over, as for a
		 * close without an answer below.  The waits that follow see it go. */
		wr_error_clear();
		return WALRUS_OK;
	}
	if (rc == WALRUS_OK)
		rc = wait_readable(sock, STOP_ANSWER_MS);
	if (rc == 0)
		return wr_error(
		    WALRUS_EPROTO,
		    "the supervisor of \"%s\" did not answer the stop request (a walrus "
		    "older than this library?)",
		    abs);
	if (rc < 0)
		return rc;
	rc = ipc_recv(sock, &m, sizeof(m), &len, NULL, NULL);
	if (rc != WALRUS_OK || len == 0)
		return rc; /* closed without an answer: it was exiting already */
	m.text[sizeof(m.text) - 1] = '\0';
	if (len != sizeof(m) || m.magic != WR_PROTO_MAGIC || m.version != WR_PROTO_VERSION ||
	    (m.type != WR_MSG_STOP_OK && m.type != WR_MSG_ERROR))
		return wr_error(WALRUS_EPROTO, "unexpected answer from the supervisor of \"%s\"",
		                abs);
	if (m.type == WR_MSG_ERROR)
		return wr_error(m.status, "%s", m.text);
	wr_log(WR_LOG, "%s requested", m.text);
	*sup = (pid_t)m.pid;
	return WALRUS_OK;
}

/* Until the connection ends: the supervisor's files are closing. */
static int wait_connection_end(int sock)
{
	for (;;) {
		char buf[sizeof(wr_msg)];
		size_t len;
		int rc = wait_readable(sock, -1);
		if (rc < 0)
			return rc;
		rc = ipc_recv(sock, buf, sizeof(buf), &len, NULL, NULL);
		if (rc != WALRUS_OK || len == 0)
			return WALRUS_OK; /* it never speaks again: anything else is its end */
	}
}

/* Until the supervisor has exited (after its auxiliary processes). */
static int wait_supervisor_exit(int sock, pid_t sup)
{
	int pfd = sup > 0 ? (int)syscall(SYS_pidfd_open, sup, 0) : -1;
	if (pfd < 0 && errno == ESRCH)
		return WALRUS_OK; /* exited and reaped already */
	/* Without pidfds (Linux before 5.3) the lock check below closes the gap. */
	int rc = pfd >= 0 ? wait_readable(pfd, -1) : wait_connection_end(sock);
	if (pfd >= 0)
		close(pfd);
	return rc < 0 ? rc : WALRUS_OK;
}

/* Then until the directory lock is free: the last holder's files are closing. */
static int wait_unlocked(const char *abs)
{
	uint64_t deadline = wr_now_ns() + STOP_UNLOCK_NS;
	for (;;) {
		if (datadir_instance_pid(abs) == 0)
			return WALRUS_OK;
		if (wr_now_ns() > deadline)
			return wr_error(
			    WALRUS_EBUSY,
			    "the supervisor of \"%s\" has exited but the directory lock "
			    "is still held (see %s/%s)",
			    abs, abs, WR_LOG_FILE);
		wr_sleep_us(1000);
	}
}

int walrus_stop(const char *dir, int mode, int wait)
{
	char abs[PATH_MAX];
	wr_error_clear();
	if (mode < WALRUS_STOP_SMART || mode > WALRUS_STOP_IMMEDIATE)
		return wr_error(WALRUS_EINVAL,
		                "walrus_stop: unknown mode %d (WALRUS_STOP_SMART, _FAST or "
		                "_IMMEDIATE)",
		                mode);
	int rc = stop_resolve(dir, abs);
	if (rc != WALRUS_OK)
		return rc;
	if (mode == WALRUS_STOP_SMART && wait && client_attached(abs))
		return wr_error(WALRUS_EBUSY,
		                "this process has \"%s\" open: a smart stop would wait for its own "
		                "handles; close them first, or stop fast",
		                abs);
	int sock = -1;
	bool gone;
	rc = stop_connect(abs, &sock, &gone);
	if (rc != WALRUS_OK || gone)
		return rc;
	pid_t sup;
	rc = stop_send(sock, mode, abs, &sup);
	if (rc == WALRUS_OK && wait)
		rc = wait_supervisor_exit(sock, sup);
	if (rc == WALRUS_OK && wait)
		rc = wait_unlocked(abs);
	close(sock);
	return rc;
}
