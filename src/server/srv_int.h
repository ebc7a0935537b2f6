/*
 * srv_int.h - inside the server module: sessions (the protocol state of a
 * connection), the command layer, and the helpers its files share.  Only
 * src/server/ includes it; server.h is the module's contract.
 *
 * A session belongs to one backend process.  Its handle is opened with
 * walrus_open() in that process and reopened after the instance restarted
 * (db_dead); in a pool backend every session uses the backend's one handle
 * (srv_dbref), which the pool loop reopens between iterations.  Every
 * request gets exactly one reply appended to s->out; nothing is sent until
 * srv_barrier() has made the writes they acknowledge durable.
 */
#ifndef WALRUS_SRV_INT_H
#define WALRUS_SRV_INT_H

#include <signal.h>

#include "common/common.h"
#include "server/server.h"

typedef struct srv_txop srv_txop;

/* A pool backend's handle, shared by all its sessions. */
typedef struct srv_dbref {
	walrus *db; /* NULL when not open */
	bool dead;  /* the instance restarted: no call until the pool reopens it */
} srv_dbref;

typedef struct srv_session {
	const srv_config *cfg;
	resp_buf *out;
	walrus *db;         /* NULL when not open */
	bool db_dead;       /* the instance restarted: reopen before the next call */
	srv_dbref *shared;  /* pool: the backend's handle (db mirrors it); NULL: db is ours */
	uint64_t client_id; /* CLIENT ID */
	int proto;          /* 2 or 3 (HELLO) */
	bool authed;
	bool readonly; /* READONLY: reads a standby's data */
	/* SELECT: database 0 is the default key space, n > 0 the key space "dbN" */
	int dbnum;
	walrus_space *sp; /* the request's key space (srv_use_space); NULL: the default one */
	bool sp_missing;  /* "dbN" does not exist (yet): the request's reads find nothing */
	bool spoke;       /* a first complete command arrived */
	uint64_t born_ns; /* connected: authentication_timeout runs from here */
	bool quit;        /* QUIT: close after the reply */
	/* MULTI, and WATCH's engine transaction (tx.c) */
	bool in_multi, tx_dirty;
	walrus_txn *watch;
	srv_txop **tx;
	size_t ntx, tx_cap;
	/* durability: writes applied but not yet durable, and their replies */
	bool unsynced;
	size_t mark;       /* offset in out where the first such reply starts */
	size_t since_mark; /* replies from there on */
	char *val;         /* GET's buffer */
	size_t val_cap;
	/* plain SETs in a row, applied as one batch (commands.c) */
	bool args_stable; /* the request's words stay put until srv_group_flush */
	struct srv_group {
		resp_arg *kv; /* key, value, key, value, ... */
		size_t n, cap, bytes;
		size_t out_start; /* where their replies begin in out */
		walrus_batch *batch;
	} group;
} srv_session;

/* ---------------------------------------------------------------- commands.c */

void srv_session_init(srv_session *s, const srv_config *cfg, resp_buf *out);
void srv_session_free(srv_session *s);
/* Opens (or reopens after a crash) the session's handle; WALRUS_* code. */
int srv_session_open(srv_session *s);
/* Runs one request (argc > 0) and appends exactly one reply. */
void srv_dispatch(srv_session *s, const resp_arg *argv, size_t argc);
/*
 * Called before replies leave the process: waits until the writes they
 * acknowledge are durable.  If that fails, their replies (and those that
 * followed) are replaced by errors.
 */
void srv_barrier(srv_session *s);
/*
 * The second half of srv_barrier, for a pool backend that made the WAL
 * durable once for all its sessions: @rc is that flush's result; replaces
 * the replies of the session's unsynced writes by errors when it failed.
 */
void srv_barrier_result(srv_session *s, int rc);
/* Applies the pending group of SETs (before anything may see or send their effects). */
void srv_group_flush(srv_session *s);
/* A request answered with an error without running (a discarded too-long argument). */
void srv_reply_error(srv_session *s, const char *text);
/*
 * Milliseconds the session has left to authenticate (0: its time is up),
 * or -1 when it has no such limit (authenticated, or no password).
 */
int64_t srv_auth_left_ms(const srv_session *s, uint64_t now_ns);

/* ---------------------------------------------------------------- reply.c */

/* Replies with the error of a failed walrus call (noting a crashed instance). */
void srv_reply_engine_error(srv_session *s, int rc);
/* The attached instance is a standby in recovery (reads only). */
bool srv_is_standby(void);
/*
 * The stop an operator asked of the attached instance (walrus stop,
 * walrus_stop: WALRUS_STOP_*), 0 when none.  A server never reattaches after
 * one (its open would start a new instance, and `walrus stop` would not
 * fence the directory): it shuts down.
 */
uint32_t srv_stop_requested(void);
void srv_arity_error(srv_session *s, const char *name);
/* Compares a password in constant time. */
bool srv_password_ok(const char *want, const resp_arg *got);

enum { SET_NX = 1, SET_XX = 2, SET_GET = 4 };

/* Argument checks: each replies the error and returns false. */
bool srv_check_key(srv_session *s, const resp_arg *k);
bool srv_check_value(srv_session *s, const resp_arg *v);
/* Keys at argv[from], argv[from + step], ...; with step 2 each is followed by a value. */
bool srv_check_keys(srv_session *s, const resp_arg *argv, size_t from, size_t argc, size_t step);
bool srv_set_options(srv_session *s, const resp_arg *argv, size_t argc, int *flags);
/* A write was applied WALRUS_ASYNC: a barrier is owed before its reply leaves. */
void srv_note_write(srv_session *s);
/*
 * The key space of the session's database for the request under way, in
 * s->sp (space handles belong to the handle and are kept by it: looking one
 * up again is cheap, and finds a space dropped and made again since).  With
 * @create a missing "dbN" is made first (a write's first use); without,
 * s->sp_missing says that it does not exist and the request's reads find
 * nothing (a request that would write only what exists writes nothing).
 * WALRUS_OK or the error to reply.
 */
int srv_use_space(srv_session *s, bool create);
/* walrus_get_into, and the same in transaction @t, in the request's key space. */
int srv_get_into(srv_session *s, const resp_arg *k, void *buf, size_t cap, size_t *vlen);
int srv_txn_get_into(srv_session *s, walrus_txn *t, const resp_arg *k, void *buf, size_t cap,
                     size_t *vlen);
/* 1 when the (valid) key exists, 0 when not, or a walrus error. */
int srv_key_exists(srv_session *s, const resp_arg *k);

/* Stripe locks: a set of stripes, locked in increasing order. */
typedef struct stripe_set {
	uint64_t bits[SRV_STRIPES / 64];
} stripe_set;
void srv_stripe_add(stripe_set *set, const resp_arg *k);
void srv_stripes_lock(srv_session *s, const stripe_set *set);
void srv_stripes_unlock(srv_session *s, const stripe_set *set);

/* Key sets (open addressing): DEL's duplicates, EXEC's view of its own writes. */
typedef struct keyset {
	struct kentry {
		const char *p;
		size_t len;
		int exists;
	} * e;
	size_t cap, n;
} keyset;
/* The entry of @k (*found) or the free slot for it; NULL when out of memory. */
struct kentry *srv_keyset_find(keyset *ks, const resp_arg *k, bool *found);
/* Whether @k exists as seen after the writes noted in @ks (noting it); *ent its entry. */
int srv_keyset_exists(srv_session *s, keyset *ks, const resp_arg *k, struct kentry **ent);

/* Batch building shared with EXEC. */
int srv_del_into(srv_session *s, keyset *ks, walrus_batch *b, const resp_arg *argv, size_t from,
                 size_t argc, long long *count);
int srv_mset_into(srv_session *s, walrus_batch *b, const resp_arg *argv, size_t from, size_t argc);
/* Commits @b (WALRUS_ASYNC, noting the write); an empty batch is a no-op. */
int srv_commit(srv_session *s, walrus_batch *b);

/* ---------------------------------------------------------------- keys.c */

void srv_cmd_get(srv_session *s, const resp_arg *argv, size_t argc);
void srv_cmd_set(srv_session *s, const resp_arg *argv, size_t argc);
void srv_cmd_del(srv_session *s, const resp_arg *argv, size_t argc);
void srv_cmd_exists(srv_session *s, const resp_arg *argv, size_t argc);
void srv_cmd_mget(srv_session *s, const resp_arg *argv, size_t argc);
void srv_cmd_mset(srv_session *s, const resp_arg *argv, size_t argc);
void srv_cmd_scan(srv_session *s, const resp_arg *argv, size_t argc);

/* ---------------------------------------------------------------- tx.c */

void srv_cmd_multi(srv_session *s, const resp_arg *argv, size_t argc);
void srv_cmd_exec(srv_session *s, const resp_arg *argv, size_t argc);
void srv_cmd_discard(srv_session *s, const resp_arg *argv, size_t argc);
/* A command inside MULTI: checked and queued ("+QUEUED"), or an error. */
void srv_tx_add(srv_session *s, const resp_arg *argv, size_t argc);
void srv_tx_clear(srv_session *s);
void srv_cmd_watch(srv_session *s, const resp_arg *argv, size_t argc);
void srv_cmd_unwatch(srv_session *s, const resp_arg *argv, size_t argc);
/* Ends a WATCH (its engine transaction). */
void srv_unwatch(srv_session *s);
/* INCR, INCRBY, DECR, DECRBY, GETSET, GETDEL, SETNX, APPEND: a transaction each. */
void srv_cmd_rmw(srv_session *s, const resp_arg *argv, size_t argc);

/* ---------------------------------------------------------------- admin.c */

void srv_cmd_info(srv_session *s, const resp_arg *argv, size_t argc);
void srv_cmd_config(srv_session *s, const resp_arg *argv, size_t argc);
void srv_cmd_dbsize(srv_session *s, const resp_arg *argv, size_t argc);
void srv_cmd_hello(srv_session *s, const resp_arg *argv, size_t argc);
void srv_cmd_command(srv_session *s, const resp_arg *argv, size_t argc);
void srv_cmd_client(srv_session *s, const resp_arg *argv, size_t argc);

/* ---------------------------------------------------------------- input.c */

#define SRV_KEEP_BUFFER ((size_t)1024 * 1024) /* larger idle buffers are given back */
#define SRV_NOAUTH_OUT  ((size_t)16 * 1024)   /* replies buffered before AUTH: send first */

/* Replies buffered past which no more requests run until they are sent:
 * @most, or a few KiB for a session not yet authenticated (a client that
 * pipelines requests without reading their -NOAUTH costs little). */
static inline size_t srv_out_limit(const srv_session *s, size_t most)
{
	return s->authed ? most : SRV_NOAUTH_OUT;
}

/* A connection's input: bytes read and not yet run, and their parser. */
typedef struct srv_input {
	char *buf;
	size_t len, cap;
	size_t limit; /* client_query_buffer_limit: cap never exceeds it */
	resp_parser parser;
} srv_input;
void srv_input_init(srv_input *in, size_t limit);
void srv_input_free(srv_input *in);
/*
 * Room for the next read (the parser's hint, at least a chunk): NULL, or
 * the error to reply before closing the connection (the request under way
 * needs more than the limit, or no memory).
 */
const char *srv_input_reserve(srv_input *in);
/*
 * Runs every complete request in the input, each followed by @after(conn)
 * (false: run no more now); a malformed request gets an error reply in
 * @out and sets *@closing.  Then drops the bytes run.
 */
void srv_input_run(srv_input *in, srv_session *sess, resp_buf *out, bool *closing,
                   bool (*after)(void *conn), void *conn);
/* TCP_NODELAY on a TCP connection (replies are whole; nothing to gain from
 * Nagle); nothing on a Unix socket.  Best effort. */
void srv_socket_nodelay(int fd);

/* ---------------------------------------------------------------- tls.c */

/* A client connection's socket, and its TLS when it came on the TLS port. */
typedef struct srv_io {
	int fd;
	wr_tls *tls; /* NULL: in clear */
} srv_io;
enum { SRV_IO_AGAIN = -2, SRV_IO_ERROR = -1 };
/* The server's TLS context from cfg's files (none without --tls-port): 0,
 * or 2 (the usage exit code) with the reason on stderr. */
int srv_tls_setup(srv_config *cfg);
/* @fd as a connection, TLS when @tls (made non-blocking): 0, or -1 said on stderr. */
int srv_io_open(srv_io *io, const srv_config *cfg, int fd, bool tls);
/*
 * One recv or send without blocking: bytes (> 0), 0 at the end of the
 * input, SRV_IO_AGAIN (call again once the socket has the readiness in
 * *@want, POLLIN or POLLOUT), or SRV_IO_ERROR (close it).
 */
ssize_t srv_io_recv(srv_io *io, void *buf, size_t len, short *want);
ssize_t srv_io_send(srv_io *io, const void *buf, size_t len, short *want);
/* Input TLS has decrypted that the socket's readiness does not show. */
bool srv_io_pending(const srv_io *io);
/* TLS's close_notify (best effort), then close(2). */
void srv_io_close(srv_io *io);

/* ---------------------------------------------------------------- signals.c */

/* A backend's flags: SIGTERM ends its connections cleanly (replies get
 * their grace), SIGINT at once. */
extern volatile sig_atomic_t srv_got_term, srv_got_int;
/* Sets the backend's handlers (SIGCHLD default) and blocks SIGTERM and
 * SIGINT; *@waitmask opens them during the poll.  0, or -1 logged. */
int srv_backend_signals(sigset_t *waitmask);
/* sigaction(@sig) with @fn and no flags: 0, or -1 logged. */
int srv_handle_signal(int sig, void (*fn)(int));
/* Blocks @sigs; *@waitmask is the mask before, with them and SIGCHLD open. */
int srv_block_signals(const int *sigs, size_t n, sigset_t *waitmask);

#endif /* WALRUS_SRV_INT_H */
