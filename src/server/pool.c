/*
 * pool.c - a pool backend: one process that serves many connections with
 * epoll, so that one WAL flush acknowledges the writes of all of them.
 *
 * Interface: srv_pool_backend().
 *
 * Why: with one process per connection (conn.c), each request costs a
 * wake-up of its own process, its own futex wait in the group commit and a
 * context switch or two; on a small machine with many clients sending one
 * request per round trip that CPU, not the disk, is the limit.  A pool
 * backend answers every ready connection per event-loop iteration, as
 * redis does:
 *
 *   1. epoll_pwait (the only place SIGTERM/SIGINT are delivered);
 *   2. new connections from the server (fds over the socket pair);
 *   3. one recv() per readable connection, one send() attempt per writable;
 *   4. every complete request of every connection with input is run,
 *      writes WALRUS_ASYNC (plain SETs in a row batched, as in conn.c);
 *   5. the barrier: ONE wal flush (walrus_sync: the engine's group commit,
 *      shared with the other pool backends) covers the writes of all the
 *      connections of this iteration; if it fails, each session's replies
 *      from its first unsynced write on become errors (srv_barrier_result);
 *   6. every reply is sent without blocking: what a client does not take
 *      stays buffered and waits for EPOLLOUT, and that connection is not
 *      read (nor are more of its requests run) until it is drained, so a
 *      slow client costs memory bounded by about one burst of replies and
 *      never stalls the others.
 *
 * The handle: every session of the process uses the pool's one walrus
 * handle (srv_dbref).  When a call reports that the instance restarted, the
 * handle is marked dead; the other sessions' requests of the same
 * iteration answer "the instance restarted ... retry it" and the barrier
 * fails for all writes made on the old handle; the handle is reopened only
 * after the replies went out, so a flush of the new instance's WAL never
 * acknowledges a write of the old one.
 *
 * Signals: SIGTERM (clean shutdown, or the server died) stops reading new
 * input; requests already read are run and their replies get
 * POOL_TERM_SEND_MS to leave, then every connection is closed.  SIGINT
 * (fast) drops every connection after the iteration under way.  Either
 * way the handle is closed cleanly (no crash restart of the instance).
 *
 * Accounting: the server counts a connection in sh->pool_conns[slot] before
 * it sends the fd; this process subtracts it when the connection closes.
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
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/common.h"
#include "engine/engine.h"
#include "ipc/ipc.h"

#define POOL_OUT_PAUSE    ((size_t)1024 * 1024) /* replies buffered: run no more requests */
#define POOL_TERM_SEND_MS 5000                  /* replies' grace during a clean shutdown */
#define POOL_TICK_MS      1000                  /* idle checks, handle reopening */
#define POOL_EVENTS       256

typedef struct pconn {
	srv_io io;
	size_t idx; /* in pool.conns */
	srv_input in;
	resp_buf out;
	size_t sent;
	srv_session sess;
	uint64_t last_ns; /* last progress (input or output): the idle timeout */
	uint32_t events;  /* registered with epoll */
	/* TLS's wants: a read that waits for the socket to be writable (the
	 * handshake's replies), a send that waits for it to be readable. */
	bool read_wants_out, send_wants_in;
	bool ready;   /* has input whose requests are to run this iteration */
	bool ran;     /* ran requests this iteration: replies to send */
	bool paused;  /* stopped running requests: too many replies buffered */
	bool closing; /* close once the replies are out */
} pconn;

typedef struct pool {
	const srv_config *cfg;
	int slot, chan, ep;
	bool chan_open;
	srv_dbref h;
	pconn **conns;
	size_t n, cap;
	sigset_t waitmask; /* the mask during epoll_pwait: SIGTERM and SIGINT open */
	uint64_t term_deadline;
	uint64_t idle_checked;
	uint64_t reopen_ns; /* a failed reopen is not tried again before this */
	bool reopen_failed; /* logged once per run of failures */
	bool stopped;       /* an operator stopped the instance: never reopened */
} pool;

/* ---------------------------------------------------------------- setup */

/* Many connections: one fd each, so the soft limit goes up to the hard one. */
static void raise_fd_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl); /* the old limit still works */
	}
}

static int epoll_set(pool *p, int op, int fd, uint32_t events, void *ptr)
{
	struct epoll_event ev = {.events = events, .data.ptr = ptr};
	if (epoll_ctl(p->ep, op, fd, &ev) == 0)
		return 0;
	fprintf(stderr, "walrus serve: pool backend %d: epoll_ctl: %s\n", p->slot, strerror(errno));
	return -1;
}

/* ---------------------------------------------------------------- connections */

static void conn_close(pool *p, pconn *c)
{
	/*
	 * Out of the epoll set first: close() alone removes it only once every
	 * fd of the socket is closed, and the server may still hold its copy
	 * for a moment after sending it to us; a hung-up socket would then
	 * report events carrying this freed connection.
	 */
	if (epoll_ctl(p->ep, EPOLL_CTL_DEL, c->io.fd, NULL) != 0 && errno != ENOENT)
		fprintf(stderr, "walrus serve: pool backend %d: epoll_ctl: %s\n", p->slot,
		        strerror(errno));
	srv_session_free(&c->sess);
	srv_input_free(&c->in);
	resp_buf_free(&c->out);
	srv_io_close(&c->io);
	p->conns[c->idx] = p->conns[--p->n];
	p->conns[c->idx]->idx = c->idx;
	free(c);
	atomic_fetch_sub(&p->cfg->sh->pool_conns[p->slot], 1);
}

/* Whether @c is sending replies (and reads nothing until they are out). */
static bool sending(const pconn *c)
{
	return c->sent < c->out.len;
}

/* The interest of @c: input unless replies wait (or it is closing), output
 * while they do; each the other way round when TLS asked for it. */
static bool conn_watch(pool *p, pconn *c)
{
	uint32_t want = sending(c)                   ? (c->send_wants_in ? EPOLLIN : EPOLLOUT)
	                : srv_got_term || c->closing ? 0
	                : c->read_wants_out          ? EPOLLOUT
	                                             : EPOLLIN;
	if (want == c->events)
		return true;
	c->events = want;
	return epoll_set(p, EPOLL_CTL_MOD, c->io.fd, want, c) == 0;
}

static void conn_add(pool *p, int fd, uint64_t id, bool tls)
{
	static const char oom[] = "-ERR out of memory\r\n";
	pconn *c = NULL;
	if (wr_grow(&p->conns, &p->cap, p->n + 1, sizeof(pconn *), 64) == WALRUS_OK)
		c = calloc(1, sizeof(*c));
	if (c == NULL || srv_io_open(&c->io, p->cfg, fd, tls) != 0) {
		if (!tls)
			(void)send(fd, oom, sizeof(oom) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
		free(c);
		close(fd);
		atomic_fetch_sub(&p->cfg->sh->pool_conns[p->slot], 1);
		return;
	}
	srv_socket_nodelay(fd);
	c->idx = p->n;
	p->conns[p->n++] = c;
	c->last_ns = wr_now_ns();
	srv_input_init(&c->in, p->cfg->query_limit);
	srv_session_init(&c->sess, p->cfg, &c->out);
	c->sess.shared = &p->h;
	c->sess.client_id = id;
	c->events = EPOLLIN;
	if (epoll_set(p, EPOLL_CTL_ADD, fd, EPOLLIN, c) != 0)
		conn_close(p, c);
}

/* Takes every connection the server has sent. */
static void take_connections(pool *p)
{
	for (;;) {
		srv_handoff msg;
		size_t len;
		int fds[IPC_MAX_FDS], nfds = 0;
		int rc = ipc_recv_nowait(p->chan, &msg, sizeof(msg), &len, fds, &nfds);
		if (rc != WALRUS_OK) {
			/* a message that did not fit (no fd left to receive it into,
			 * say): that connection is lost, and no longer counted */
			fprintf(stderr, "walrus serve: pool backend %d: %s\n", p->slot,
			        walrus_errmsg());
			atomic_fetch_sub(&p->cfg->sh->pool_conns[p->slot], 1);
			return;
		}
		if (len == SIZE_MAX)
			return;
		if (len == 0) { /* the server is gone: as its SIGTERM */
			srv_got_term = 1;
			return;
		}
		for (int i = 1; i < nfds; i++)
			close(fds[i]);
		if (len != sizeof(msg) || nfds != 1) {
			if (nfds > 0)
				close(fds[0]);
			atomic_fetch_sub(&p->cfg->sh->pool_conns[p->slot], 1);
			continue;
		}
		conn_add(p, fds[0], msg.id, msg.tls != 0);
	}
}

/* ---------------------------------------------------------------- input */

/* One recv(); false when the connection is gone (EOF or an error). */
static bool read_some(pool *p, pconn *c)
{
	const char *full = srv_input_reserve(&c->in);
	if (full != NULL) {
		resp_add_error(&c->out, "%s", full);
		c->closing = true;
		c->ran = true; /* the error goes out */
		return true;
	}
	short want;
	ssize_t n = srv_io_recv(&c->io, c->in.buf + c->in.len, c->in.cap - c->in.len, &want);
	c->read_wants_out = n == SRV_IO_AGAIN && want == POLLOUT;
	if (n > 0) {
		c->in.len += (size_t)n;
		c->last_ns = wr_now_ns();
		c->ready = true;
	}
	return (n > 0 || n == SRV_IO_AGAIN) && conn_watch(p, c);
}

/* Whether @c has input TLS decrypted and nothing else will make it read. */
static bool input_pending(const pconn *c)
{
	return !sending(c) && c->events != 0 && !c->closing && srv_io_pending(&c->io);
}

/* Reads what TLS holds already: epoll would not say it is there. */
static void read_pending(pool *p)
{
	for (size_t i = p->n; i-- > 0;) {
		pconn *c = p->conns[i];
		if (input_pending(c) && !read_some(p, c))
			conn_close(p, c);
	}
}

/* After each request: false to stop running this connection's requests. */
static bool after_request(void *arg)
{
	pconn *c = arg;
	if (c->sess.quit) {
		c->closing = true;
		return false;
	}
	if (c->out.len > srv_out_limit(&c->sess, POOL_OUT_PAUSE)) {
		c->paused = true; /* the rest once these replies are out */
		return false;
	}
	return !srv_got_int;
}

/* Runs every complete request in the input (until paused); drops their bytes. */
static void run_input(pool *p, pconn *c)
{
	/* the session sees the pool's handle as it is now */
	c->sess.db = p->h.db;
	c->sess.db_dead = p->h.dead || p->h.db == NULL;
	c->paused = false;
	c->ran = true;
	srv_input_run(&c->in, &c->sess, &c->out, &c->closing, after_request, c);
	if (c->sess.db_dead)
		p->h.dead = true; /* the instance restarted: for every session */
}

/* ---------------------------------------------------------------- output */

/* Sends what it can without blocking; false when the connection is gone. */
static bool send_some(pool *p, pconn *c)
{
	if (c->out.oom)
		return false;
	while (c->sent < c->out.len) {
		short want;
		ssize_t n = srv_io_send(&c->io, c->out.p + c->sent, c->out.len - c->sent, &want);
		c->send_wants_in = n == SRV_IO_AGAIN && want == POLLIN;
		if (n > 0) {
			c->sent += (size_t)n;
			c->last_ns = wr_now_ns();
			continue;
		}
		if (n == SRV_IO_AGAIN)
			return conn_watch(p, c); /* the rest when the socket is ready */
		return false;
	}
	c->out.len = 0;
	c->sent = 0;
	if (c->out.cap > SRV_KEEP_BUFFER)
		resp_buf_free(&c->out);
	if (c->paused && !c->closing)
		c->ready = true; /* its next requests */
	return conn_watch(p, c);
}

/* ---------------------------------------------------------------- the loop */

/* The barrier of this iteration: one WAL flush for every session that wrote. */
static void barrier(pool *p)
{
	bool need = false;
	for (size_t i = 0; i < p->n && !need; i++)
		need = p->conns[i]->ran && p->conns[i]->sess.unsynced;
	if (!need)
		return;
	int rc = !p->h.dead && p->h.db != NULL
	             ? walrus_sync(p->h.db)
	             : wr_error(WALRUS_ERESTART, "the walrus instance restarted");
	for (size_t i = 0; i < p->n; i++) {
		pconn *c = p->conns[i];
		if (c->ran && c->sess.unsynced) {
			srv_barrier_result(&c->sess, rc);
			if (c->sess.db_dead)
				p->h.dead = true;
		}
	}
}

/* A dead handle (the instance restarted) is reopened between iterations. */
static void reopen(pool *p)
{
	if (!p->h.dead && p->h.db != NULL)
		return;
	if (p->stopped || (p->h.db != NULL && srv_stop_requested() != 0)) {
		p->stopped = true; /* the server's SIGTERM follows: no new instance meanwhile */
		return;
	}
	if (p->h.db != NULL)
		(void)walrus_close(p->h.db); /* the dead instance's handle: errors expected */
	p->h.db = NULL;
	p->h.dead = true;
	uint64_t now = wr_now_ns();
	if (now < p->reopen_ns)
		return;
	int rc = walrus_open(p->cfg->dir, p->cfg->opts, &p->h.db);
	if (rc == WALRUS_OK) {
		p->h.dead = false;
		p->reopen_failed = false;
		return;
	}
	/* requests answer "retry it" meanwhile; no retry storm under load */
	p->h.db = NULL;
	p->reopen_ns = now + 100000000ull;
	if (!p->reopen_failed)
		fprintf(stderr, "walrus serve: pool backend %d: could not open \"%s\": %s\n",
		        p->slot, p->cfg->dir,
		        walrus_errmsg()[0] ? walrus_errmsg() : walrus_strerror(rc));
	p->reopen_failed = true;
}

/*
 * Before requests run: a handle the instance's crash restart left behind is
 * reopened now (a cached read of the instance's state), so that requests
 * that arrive after the restart do not fail for nothing.  Safe between
 * iterations: every write made on the old handle has passed its barrier.
 */
static void check_handle(pool *p)
{
	if (p->h.dead || p->h.db == NULL)
		return; /* reopen() at the end of the iteration */
	bool work = false;
	for (size_t i = 0; i < p->n && !work; i++)
		work = p->conns[i]->ready;
	if (work && api_handle_check(p->h.db, "srv_pool") == WALRUS_ERESTART) {
		p->h.dead = true;
		reopen(p);
	}
}

static void check_idle(pool *p, uint64_t now)
{
	int64_t idle = p->cfg->idle_ms;
	for (size_t i = p->n; i-- > 0;) {
		pconn *c = p->conns[i];
		if (idle > 0 && now - c->last_ns > (uint64_t)idle * 1000000u)
			conn_close(p, c);
	}
}

/* Every iteration (wait_ms wakes the loop for it): whatever the connection does meanwhile. */
static void check_auth(pool *p, uint64_t now)
{
	for (size_t i = p->n; i-- > 0;)
		if (srv_auth_left_ms(&p->conns[i]->sess, now) == 0)
			conn_close(p, p->conns[i]);
}

/* Whether @c has requests to run now (not while its replies wait for EPOLLOUT). */
static bool runnable(const pconn *c)
{
	return c->ready && !c->closing && !sending(c);
}

/* How long epoll may sleep: not at all when requests wait to run. */
static int wait_ms(pool *p, uint64_t now)
{
	for (size_t i = 0; i < p->n; i++)
		if (runnable(p->conns[i]))
			return 0;
	for (size_t i = 0; i < p->n; i++)
		if (input_pending(p->conns[i]))
			return 0;
	int ms = POOL_TICK_MS;
	if (p->cfg->idle_ms > 0 && p->cfg->idle_ms < ms)
		ms = (int)p->cfg->idle_ms;
	for (size_t i = 0; i < p->n; i++) {
		int64_t auth = srv_auth_left_ms(&p->conns[i]->sess, now);
		if (auth >= 0 && auth < ms)
			ms = (int)auth + 1; /* check_auth closes it once the time is up */
	}
	if (p->term_deadline != 0)
		ms = p->term_deadline > now
		         ? (int)WR_MIN((p->term_deadline - now) / 1000000u + 1, (uint64_t)ms)
		         : 0;
	return ms;
}

static void handle_event(pool *p, const struct epoll_event *ev)
{
	pconn *c = ev->data.ptr;
	if (c == NULL) {
		take_connections(p);
		return;
	}
	bool alive = true, out = sending(c);
	uint32_t got = ev->events & (c->events | EPOLLHUP | EPOLLERR);
	if (!out && c->events != 0 && got != 0)
		alive = read_some(p, c);
	else if (!out && (got & (EPOLLHUP | EPOLLERR)))
		alive = false; /* hung up while we do not read: nothing to wait for */
	if (alive && out && got != 0)
		alive = send_some(p, c);
	if (alive && c->closing && c->sent == c->out.len)
		alive = false; /* its last reply (an error, QUIT's +OK) is out */
	if (!alive)
		conn_close(p, c);
}

static void iteration(pool *p)
{
	struct epoll_event evs[POOL_EVENTS];
	uint64_t now = wr_now_ns();
	int n = epoll_pwait(p->ep, evs, POOL_EVENTS, wait_ms(p, now), &p->waitmask);
	if (n < 0 && errno != EINTR) {
		fprintf(stderr, "walrus serve: pool backend %d: epoll_wait: %s\n", p->slot,
		        strerror(errno));
		wr_sleep_us(100000);
	}
	for (int i = 0; i < n; i++)
		handle_event(p, &evs[i]);
	read_pending(p);
	if (srv_got_int)
		return;
	check_handle(p);
	/* run: every connection with input, replies gathered */
	for (size_t i = 0; i < p->n; i++) {
		pconn *c = p->conns[i];
		if (runnable(c)) {
			c->ready = false;
			run_input(p, c);
		}
	}
	barrier(p);
	/* send: backwards, as closing moves the last connection into the hole */
	for (size_t i = p->n; i-- > 0;) {
		pconn *c = p->conns[i];
		if (!c->ran)
			continue;
		c->ran = false;
		bool alive = send_some(p, c);
		if (!alive || (c->closing && c->sent == c->out.len))
			conn_close(p, c);
	}
	reopen(p);
	now = wr_now_ns();
	check_auth(p, now);
	if (now - p->idle_checked >= POOL_TICK_MS * 1000000ull / 4) {
		check_idle(p, now);
		p->idle_checked = now;
	}
}

/* SIGTERM: no new input or connections; idle connections go at once. */
static void start_term(pool *p)
{
	p->term_deadline = wr_now_ns() + POOL_TERM_SEND_MS * 1000000ull;
	if (p->chan_open) {
		(void)epoll_ctl(p->ep, EPOLL_CTL_DEL, p->chan, NULL);
		p->chan_open = false;
	}
	for (size_t i = p->n; i-- > 0;) {
		pconn *c = p->conns[i];
		/* Nothing left to do, or no way to be told when there is. */
		if ((!c->ready && c->sent == c->out.len) || !conn_watch(p, c))
			conn_close(p, c);
	}
}

/* During a clean shutdown: whether some connection still has requests or replies. */
static bool term_pending(pool *p)
{
	for (size_t i = p->n; i-- > 0;) {
		pconn *c = p->conns[i];
		if (!c->ready && c->sent == c->out.len)
			conn_close(p, c); /* done */
	}
	return p->n > 0 && wr_now_ns() < p->term_deadline;
}

int srv_pool_backend(const srv_config *cfg, int slot, int chan)
{
	pool p = {.cfg = cfg, .slot = slot, .chan = chan, .h.dead = true};
	char name[16];
	snprintf(name, sizeof(name), "walrus-pool-%d", slot);
	(void)prctl(PR_SET_NAME, name, 0, 0, 0);
	if (srv_backend_signals(&p.waitmask) != 0)
		return 1;
	pid_t parent = getppid();
	if (prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0) != 0 || getppid() != parent)
		srv_got_term = 1; /* the server is already gone */
	raise_fd_limit();
	int code = 0;
	p.ep = epoll_create1(EPOLL_CLOEXEC);
	if (p.ep < 0) {
		fprintf(stderr, "walrus serve: pool backend %d: epoll_create1: %s\n", slot,
		        strerror(errno));
		close(chan);
		return 3;
	}
	if (epoll_set(&p, EPOLL_CTL_ADD, chan, EPOLLIN, NULL) == 0)
		p.chan_open = true;
	else
		code = 3;
	reopen(&p);
	if (p.h.db == NULL)
		code = 3; /* the first open failed: the server starts another later */
	while (code == 0 && !srv_got_int) {
		if (srv_got_term) {
			if (p.term_deadline == 0)
				start_term(&p);
			if (!term_pending(&p))
				break;
		}
		iteration(&p);
	}
	while (p.n > 0)
		conn_close(&p, p.conns[0]);
	free(p.conns);
	if (p.h.db != NULL)
		(void)walrus_close(p.h.db); /* a clean detach */
	close(p.ep);
	close(chan);
	return code;
}
