/*
 * server.h - walrus's RESP server: `walrus -D DIR serve --port P`.
 *
 * Process model: the server process opens the data directory with
 * walrus_open() (starting the instance when it is not running, so the
 * instance lives while it serves) and listens on TCP and on a Unix socket.
 * Two ways to run the connections:
 *   - pool (the default, --backends N): N backend processes forked at start
 *     (default: two per online CPU); the server accepts and hands each
 *     connection's fd to the least loaded one over a socket pair
 *     (SCM_RIGHTS); a pool backend multiplexes its connections with epoll
 *     and passes ONE barrier per event-loop iteration for all of them
 *     (pool.c);
 *   - per connection (--backends 0, PostgreSQL's model): one backend
 *     process forked per accepted connection (conn.c).
 * Each backend calls walrus_open() itself after fork(): it is an ordinary
 * attached backend of the instance, and never touches the server's handle.
 * See src/server/README.md for the protocol, the commands and the
 * durability rules, and srv_int.h for the module's inside.
 *
 * Owns: the listening sockets (and the Unix socket's file), the backend
 * processes it forked (it reaps every one), a shared anonymous mapping
 * (struct srv_shared) inherited by the backends: connection counters and the
 * key stripe locks that make SET NX/XX, DEL's count, MSET and EXEC atomic
 * among the server's clients.
 *
 * Durability: with synchronous_commit=on a write is acknowledged only once
 * its WAL is durable.  A backend applies the writes of a pipelined burst
 * (a pool backend: of every connection ready in one event-loop iteration)
 * WALRUS_ASYNC and, before any reply leaves, waits for one WAL flush that
 * covers them all (srv_barrier: the engine's group commit, shared with every
 * other backend's); with synchronous_commit=off nothing waits.
 *
 * Signals (server process): SIGTERM = clean shutdown (stop accepting; each
 * backend finishes the requests it has read, replies, closes; the server
 * closes its handle and waits for the instance's final checkpoint when it
 * was the last process attached); SIGINT = fast shutdown (backends drop
 * their connections after the command under way).  Backends get SIGTERM if
 * the server dies.  A pool backend that dies is forked again (its
 * connections are lost; the instance crash-restarts as for any backend).
 *
 * TLS (--tls-port): a second TCP listener whose connections speak TLS
 * (tls.c: the same loops, libssl under them); the context is made once,
 * before any backend is forked.
 *
 * Clients: with a password (cfg->requirepass), a connection that has not
 * authenticated may send only small requests (resp.h, strict) and is closed
 * after authentication_timeout; without one, a connection that sent no
 * command within authentication_timeout is closed; every connection's unparsed input is at most
 * client_query_buffer_limit.  Either limit answers an error and closes.
 *
 * Returns: srv_run() returns the command's exit code (0 after a clean
 * shutdown, 3 when the engine failed at start, 2 on a usage problem such as
 * an address in use).  Engine errors during requests become RESP errors;
 * an instance crash (WALRUS_ERESTART) is answered with an error and the
 * backend reopens the directory for the next request.
 */
#ifndef WALRUS_SERVER_H
#define WALRUS_SERVER_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "server/resp.h"
#include "walrus.h"

#define SRV_STRIPES  256
#define SRV_CURSORS  4096 /* SCAN cursors alive at once */
#define SRV_MAX_POOL 64   /* pool backends at most */

/* Where a SCAN goes on: cursor @id (its slot is id % SRV_CURSORS) resumes at @key. */
typedef struct srv_cursor {
	uint64_t id;
	uint32_t len;
	char key[WALRUS_MAX_KEY];
} srv_cursor;

/* The mapping shared by the server and its backends. */
typedef struct srv_shared {
	pthread_mutex_t stripe[SRV_STRIPES]; /* robust, process-shared */
	pthread_mutex_t cursor_lock;         /* guards cursor_next and cursors */
	uint64_t cursor_next;
	srv_cursor cursors[SRV_CURSORS];
	_Atomic uint32_t clients; /* per connection: connected clients (backends alive) */
	/* pool: connections of each pool backend (the server adds, the backend subtracts) */
	_Atomic uint32_t pool_conns[SRV_MAX_POOL];
	_Atomic uint64_t connections; /* accepted since start */
	_Atomic uint64_t rejected;    /* refused: max clients reached */
	_Atomic uint64_t commands;    /* requests run */
	uint64_t start_us;
	int tcp_port; /* the bound port, 0 without TCP */
	int tls_port; /* the bound TLS port, 0 without TLS */
} srv_shared;

typedef struct srv_config {
	const char *dir;          /* the data directory, absolute */
	walrus_opts *opts;        /* for every walrus_open (-o options) */
	bool tcp;                 /* listen on TCP */
	const char *bind;         /* its address (IPv4 or IPv6 literal) */
	int port;                 /* 0: any free port */
	char unix_path[PATH_MAX]; /* "" for no Unix socket */
	const char *requirepass;  /* NULL: no AUTH needed; never empty */
	int64_t idle_ms;          /* close a connection idle this long; 0: never */
	int backends;             /* pool backends; 0: one backend process per connection */
	/* TLS (--tls-*, Redis 6's names): a second TCP listener on bind */
	int tls_port;               /* -1: none; 0: any free port */
	const char *tls_cert;       /* certificate chain (PEM) */
	const char *tls_key;        /* its key (PEM, mode 0600) */
	const char *tls_ca;         /* CA certificates for clients' certificates, or NULL */
	int tls_auth_clients;       /* enum wr_tls_verify */
	struct ssl_ctx_st *tls_ctx; /* made by srv_run before any backend is forked */
	/* filled by srv_run */
	bool sync;               /* synchronous_commit */
	int64_t auth_timeout_ms; /* authentication_timeout: to authenticate, or to send a first
	                            command */
	size_t query_limit;      /* client_query_buffer_limit */
	int databases;           /* databases: SELECT 0 .. databases - 1 (--databases sets it) */
	long max_clients;        /* max_connections minus the server's own attachment */
	srv_shared *sh;
} srv_config;

/*
 * Runs the server until SIGTERM/SIGINT; prints its "RESP on ..." and "ready"
 * lines on stdout once every listener is up (a server that fails to start
 * prints neither).
 */
int srv_run(srv_config *cfg);

/* ---------------------------------------------------------------- backends (conn.c) */

/* The life of one connection (@tls: accepted on the TLS port) in a freshly
 * forked backend; returns its exit code. */
int srv_backend(const srv_config *cfg, int fd, bool tls);

/* ---------------------------------------------------------------- pool backends (pool.c) */

/* A connection handed to a pool backend: its id, and whether it came on the TLS port. */
typedef struct srv_handoff {
	uint64_t id;
	uint64_t tls; /* 0 or 1 (a whole word: no padding in the message) */
} srv_handoff;

/*
 * A pool backend (slot @slot of the pool) until shutdown: connections
 * arrive on @chan, one message each (a srv_handoff, the fd attached);
 * returns the exit code.
 */
int srv_pool_backend(const srv_config *cfg, int slot, int chan);

/* Clients connected now (either model). */
static inline uint32_t srv_clients(const srv_config *cfg)
{
	if (cfg->sh == NULL)
		return 1;
	if (cfg->backends == 0)
		return atomic_load(&cfg->sh->clients);
	uint32_t n = 0;
	for (int i = 0; i < cfg->backends; i++)
		n += atomic_load(&cfg->sh->pool_conns[i]);
	return n;
}

#endif /* WALRUS_SERVER_H */
