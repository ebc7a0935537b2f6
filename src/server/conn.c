/*
 * conn.c - a backend: the life of one client connection in the process
 * forked for it.
 *
 * Interface: srv_backend().
 *
 * The loop: wait for input (ppoll, the only place SIGTERM/SIGINT are
 * delivered, so a signal is never lost between a check and a wait), read
 * what is there, run every complete request in it appending the replies,
 * then pass the barrier (the writes those replies acknowledge become
 * durable) and send them all.  So pipelined requests cost one read, one
 * WAL flush and one write per burst.  Replies are also sent (barrier
 * first) when they pass SRV_OUT_FLUSH in the middle of a burst.
 *
 * Signals: SIGTERM (clean shutdown, or the server died) lets the burst
 * being run finish and its replies go out, then closes; SIGINT (fast
 * shutdown) stops after the request under way and drops the connection.
 * Either way the handle is closed cleanly: a backend never leaves the
 * instance without detaching, which would be a crash to the supervisor.
 */
#include "server/srv_int.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/common.h"

#define SRV_OUT_FLUSH    ((size_t)1024 * 1024)
#define SRV_TERM_SEND_MS 5000 /* replies' grace during a clean shutdown */

typedef struct conn {
	srv_io io;
	srv_input in;
	resp_buf out;
	size_t sent;
	srv_session sess;
	int64_t idle_ms;
	sigset_t waitmask; /* the mask during ppoll: SIGTERM and SIGINT open */
	bool closing;
} conn;

/* ---------------------------------------------------------------- setup */

/* Dies with the server: SIGTERM, so the connection ends cleanly. */
static void watch_parent(pid_t parent)
{
	if (prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0) != 0 || getppid() != parent)
		srv_got_term = 1;
}

/* ---------------------------------------------------------------- I/O */

enum { WAIT_ERROR = -1, WAIT_TIMEOUT = 0, WAIT_READY = 1, WAIT_SIGNAL = 2 };

/* Waits for @events on the client's socket, signals open; timeout_ms < 0: no limit. */
static int wait_fd(conn *c, short events, int timeout_ms)
{
	struct pollfd p = {.fd = c->io.fd, .events = events};
	struct timespec ts, *tsp = NULL;
	if (timeout_ms >= 0) {
		ts.tv_sec = timeout_ms / 1000;
		ts.tv_nsec = (long)(timeout_ms % 1000) * 1000000L;
		tsp = &ts;
	}
	int r = ppoll(&p, 1, tsp, &c->waitmask);
	if (r < 0)
		return errno == EINTR ? WAIT_SIGNAL : WAIT_ERROR;
	return r == 0 ? WAIT_TIMEOUT : WAIT_READY;
}

/*
 * How long a wait may last (-1: no limit): the idle timeout, and until
 * authenticated what is left of authentication_timeout (0: the time is up,
 * and a wait that times out closes the connection).
 */
static int wait_limit_ms(const conn *c)
{
	int64_t auth = srv_auth_left_ms(&c->sess, wr_now_ns());
	int64_t ms = c->idle_ms > 0 ? c->idle_ms : -1;
	if (auth >= 0 && (ms < 0 || auth < ms))
		ms = auth;
	return ms < 0 ? -1 : (int)WR_MIN(ms, (int64_t)INT32_MAX);
}

/* Sends what is buffered; false when the connection is gone or must go. */
static bool send_all(conn *c)
{
	while (c->sent < c->out.len) {
		short want;
		ssize_t n = srv_io_send(&c->io, c->out.p + c->sent, c->out.len - c->sent, &want);
		if (n > 0) {
			c->sent += (size_t)n;
			continue;
		}
		if (n != SRV_IO_AGAIN)
			return false;
		/* A client that does not read: the idle or authentication timeout,
		 * or the shutdown's grace. */
		int timeout = srv_got_term ? SRV_TERM_SEND_MS : wait_limit_ms(c);
		int r = wait_fd(c, want, timeout);
		if (srv_got_int || r == WAIT_ERROR || r == WAIT_TIMEOUT)
			return false;
	}
	return true;
}

/* The barrier, then every reply out. */
static bool flush_replies(conn *c)
{
	srv_barrier(&c->sess);
	if (c->out.oom)
		return false;
	bool ok = send_all(c);
	c->out.len = 0;
	c->sent = 0;
	if (c->out.cap > SRV_KEEP_BUFFER)
		resp_buf_free(&c->out);
	return ok;
}

/* Waits for input and appends it; false to close (EOF, error, idle, signal). */
static bool read_input(conn *c)
{
	short want = POLLIN;
	for (;;) {
		if (srv_got_term || srv_got_int)
			return false;
		int limit = wait_limit_ms(c);
		if (limit == 0)
			return false;          /* not authenticated in time */
		if (!srv_io_pending(&c->io)) { /* bytes TLS holds already: no wait */
			int r = wait_fd(c, want, limit);
			if (r == WAIT_SIGNAL)
				continue;
			if (r != WAIT_READY)
				return false; /* an error, the idle or the authentication timeout */
		}
		const char *full = srv_input_reserve(&c->in);
		if (full != NULL) {
			resp_add_error(&c->out, "%s", full);
			c->closing = true;
			return true;
		}
		ssize_t n =
		    srv_io_recv(&c->io, c->in.buf + c->in.len, c->in.cap - c->in.len, &want);
		if (n > 0) {
			c->in.len += (size_t)n;
			return true;
		}
		if (n != SRV_IO_AGAIN)
			return false;
	}
}

/* ---------------------------------------------------------------- requests */

/* After each request: false to stop running requests. */
static bool after_request(void *arg)
{
	conn *c = arg;
	if (c->sess.quit) {
		c->closing = true;
		return false;
	}
	if (c->out.len > srv_out_limit(&c->sess, SRV_OUT_FLUSH) && !flush_replies(c)) {
		c->closing = true;
		return false;
	}
	return !srv_got_int;
}

/* Runs every complete request in the input; drops their bytes. */
static void run_input(conn *c)
{
	srv_input_run(&c->in, &c->sess, &c->out, &c->closing, after_request, c);
}

/* ---------------------------------------------------------------- srv_backend */

/* The first open: a refusal for lack of room is Redis's "max clients" error. */
static bool open_database(conn *c)
{
	int rc = srv_session_open(&c->sess);
	if (rc == WALRUS_OK)
		return true;
	if (rc == WALRUS_ELIMIT)
		resp_add_error(&c->out, "ERR max number of clients reached");
	else
		resp_add_error(&c->out, "ERR could not open the database: %s",
		               walrus_errmsg()[0] ? walrus_errmsg() : walrus_strerror(rc));
	(void)send_all(c);
	return false;
}

int srv_backend(const srv_config *cfg, int fd, bool tls)
{
	conn c = {.idle_ms = cfg->idle_ms};
	(void)prctl(PR_SET_NAME, "walrus-backend", 0, 0, 0);
	if (srv_io_open(&c.io, cfg, fd, tls) != 0) {
		close(fd);
		return 1;
	}
	if (srv_backend_signals(&c.waitmask) != 0) {
		srv_io_close(&c.io);
		return 1;
	}
	watch_parent(getppid());
	srv_socket_nodelay(fd);
	srv_input_init(&c.in, cfg->query_limit);
	srv_session_init(&c.sess, cfg, &c.out);
	if (open_database(&c)) {
		while (!c.closing && read_input(&c)) {
			run_input(&c);
			if (srv_got_int || !flush_replies(&c))
				break;
		}
	}
	srv_session_free(&c.sess); /* closes the handle: a clean detach */
	srv_input_free(&c.in);
	resp_buf_free(&c.out);
	srv_io_close(&c.io);
	return 0;
}
