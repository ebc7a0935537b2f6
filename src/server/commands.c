/*
 * commands.c - a RESP request to walrus calls: sessions, the command
 * table, the checks every request goes through (arity, AUTH, MULTI), the
 * connection commands (PING ECHO QUIT AUTH SELECT CHECKPOINT) and the
 * durability barrier.  SELECT n picks the session's database: 0 is the
 * default key space, n > 0 the key space "dbN" (srv_use_space resolves it
 * for each request that works on keys).  Key-value commands are in keys.c, MULTI/EXEC in
 * tx.c, INFO/CONFIG/HELLO and friends in admin.c; what they share (error
 * replies, argument checks, the write path) in reply.c, below them all.
 *
 * Interface: srv_session_init/free/open, srv_dispatch, srv_barrier.
 *
 * Notes: srv_dispatch() appends exactly one reply per request, so
 * srv_barrier() can replace the replies of writes that did not become
 * durable (and of the requests after them) by errors, in order.
 */
#include "server/srv_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"

typedef void (*cmd_fn)(srv_session *s, const resp_arg *argv, size_t argc);

typedef struct srv_cmd {
	const char *name;
	int arity; /* Redis's: n = exactly n words, -n = at least n */
	int flags;
	cmd_fn fn;
} srv_cmd;

enum {
	CMD_DB = 1,     /* needs the database handle */
	CMD_NOAUTH = 2, /* allowed before AUTH */
	CMD_TX = 4,     /* queued inside MULTI */
	CMD_TXCTL = 8,  /* runs inside MULTI (MULTI, EXEC, DISCARD, QUIT) */
	CMD_READ = 16,  /* reads keys: on a standby, only for READONLY connections */
	CMD_KEYS = 32,  /* works on keys: in the key space of the session's database */
	CMD_MAKE = 64,  /* may write a key: makes the database's key space if missing */
};

/* ---------------------------------------------------------------- sessions */

void srv_session_init(srv_session *s, const srv_config *cfg, resp_buf *out)
{
	memset(s, 0, sizeof(*s));
	s->cfg = cfg;
	s->out = out;
	s->proto = 2;
	s->authed = cfg->requirepass == NULL;
	s->born_ns = wr_now_ns();
	s->client_id = (uint64_t)getpid();
}

/*
 * With a password, a connection has authentication_timeout to authenticate;
 * without one, to send its first command (PostgreSQL's startup packet): a
 * socket that stays silent cannot hold a slot either way.
 */
int64_t srv_auth_left_ms(const srv_session *s, uint64_t now_ns)
{
	if ((s->authed && s->spoke) || s->cfg->auth_timeout_ms <= 0)
		return -1;
	uint64_t spent_ms = (now_ns - s->born_ns) / 1000000u;
	return spent_ms >= (uint64_t)s->cfg->auth_timeout_ms
	           ? 0
	           : s->cfg->auth_timeout_ms - (int64_t)spent_ms;
}

void srv_session_free(srv_session *s)
{
	srv_group_flush(s);
	free(s->group.kv);
	walrus_batch_free(s->group.batch);
	srv_tx_clear(s);
	srv_unwatch(s);
	free(s->tx);
	free(s->val);
	if (s->db != NULL && s->shared == NULL)
		(void)walrus_close(s->db);
	s->db = NULL;
}

int srv_session_open(srv_session *s)
{
	if (s->shared != NULL) {
		/* only the pool loop reopens a shared handle, between iterations:
		 * writes of this iteration made on the old one must fail their
		 * barrier, not be covered by a flush of the new instance's WAL */
		s->db = s->shared->db;
		s->db_dead = s->shared->dead || s->db == NULL;
		if (!s->db_dead)
			return WALRUS_OK;
		return wr_error(WALRUS_ERESTART, "the instance restarted; reattaching");
	}
	if (s->db != NULL && !s->db_dead)
		return WALRUS_OK;
	if (s->db != NULL && srv_stop_requested() != 0)
		return wr_error(WALRUS_ESHUTDOWN, "the instance was stopped: this server is "
		                                  "shutting down");
	if (s->db != NULL)
		(void)walrus_close(s->db); /* the dead instance's handle: errors expected */
	s->db = NULL;
	s->db_dead = false;
	return walrus_open(s->cfg->dir, s->cfg->opts, &s->db);
}

/* ---------------------------------------------------------------- connection commands */

static void cmd_ping(srv_session *s, const resp_arg *argv, size_t argc)
{
	if (argc > 2)
		srv_arity_error(s, "ping");
	else if (argc == 2)
		resp_add_bulk(s->out, argv[1].p, argv[1].len);
	else
		resp_add_simple(s->out, "PONG");
}

static void cmd_echo(srv_session *s, const resp_arg *argv, size_t argc)
{
	(void)argc;
	resp_add_bulk(s->out, argv[1].p, argv[1].len);
}

static void cmd_quit(srv_session *s, const resp_arg *argv, size_t argc)
{
	(void)argv;
	(void)argc;
	s->quit = true;
	resp_add_simple(s->out, "OK");
}

/* Database n > 0 is the key space "dbN", made by its first write (srv_use_space). */
static void cmd_select(srv_session *s, const resp_arg *argv, size_t argc)
{
	long long n;
	(void)argc;
	if (!resp_arg_ll(&argv[1], &n)) {
		resp_add_error(s->out, "ERR value is not an integer or out of range");
	} else if (n < 0 || n >= s->cfg->databases) {
		resp_add_error(s->out, "ERR DB index is out of range");
	} else {
		s->dbnum = (int)n;
		resp_add_simple(s->out, "OK");
	}
}

/* MOVE and SWAPDB: each database is a key space of its own; neither is implemented. */
static void cmd_refused(srv_session *s, const resp_arg *argv, size_t argc)
{
	(void)argc;
	resp_add_error(s->out,
	               "ERR %s is not supported by walrus: each database is a key space of its "
	               "own (copy a key with GET and SET in the other database, then DEL it)",
	               resp_arg_is(&argv[0], "move") ? "MOVE" : "SWAPDB");
}

static void cmd_checkpoint(srv_session *s, const resp_arg *argv, size_t argc)
{
	(void)argv;
	(void)argc;
	int rc = walrus_checkpoint(s->db);
	if (rc == WALRUS_OK)
		resp_add_simple(s->out, "OK");
	else
		srv_reply_engine_error(s, rc);
}

static void cmd_auth(srv_session *s, const resp_arg *argv, size_t argc)
{
	if (argc > 3) {
		resp_add_error(s->out, "ERR syntax error");
		return;
	}
	if (s->cfg->requirepass == NULL) {
		resp_add_error(s->out, "ERR AUTH <password> called without any password configured "
		                       "for the default user. Are you sure your configuration is "
		                       "correct?");
		return;
	}
	bool user_ok = argc == 2 || resp_arg_is(&argv[1], "default");
	if (user_ok && srv_password_ok(s->cfg->requirepass, &argv[argc - 1])) {
		s->authed = true;
		resp_add_simple(s->out, "OK");
	} else {
		resp_add_error(s->out,
		               "WRONGPASS invalid username-password pair or user is disabled.");
	}
}

/* ---------------------------------------------------------------- dispatch */

/* READONLY / READWRITE: whether this connection reads from a standby. */
static void cmd_readonly(srv_session *s, const resp_arg *argv, size_t argc)
{
	(void)argv;
	(void)argc;
	s->readonly = true;
	resp_add_simple(s->out, "OK");
}

static void cmd_readwrite(srv_session *s, const resp_arg *argv, size_t argc)
{
	(void)argv;
	(void)argc;
	s->readonly = false;
	resp_add_simple(s->out, "OK");
}

static const srv_cmd commands[] = {
    {"get", 2, CMD_DB | CMD_READ | CMD_KEYS | CMD_TX, srv_cmd_get},
    {"set", -3, CMD_DB | CMD_KEYS | CMD_MAKE | CMD_TX, srv_cmd_set},
    {"del", -2, CMD_DB | CMD_KEYS | CMD_TX, srv_cmd_del},
    {"exists", -2, CMD_DB | CMD_READ | CMD_KEYS | CMD_TX, srv_cmd_exists},
    {"mget", -2, CMD_DB | CMD_READ | CMD_KEYS | CMD_TX, srv_cmd_mget},
    {"mset", -3, CMD_DB | CMD_KEYS | CMD_MAKE | CMD_TX, srv_cmd_mset},
    {"scan", -2, CMD_DB | CMD_READ | CMD_KEYS, srv_cmd_scan},
    {"dbsize", 1, CMD_DB | CMD_READ | CMD_KEYS, srv_cmd_dbsize},
    {"info", -1, CMD_DB, srv_cmd_info},
    {"config", -2, CMD_DB, srv_cmd_config},
    {"checkpoint", 1, CMD_DB, cmd_checkpoint},
    {"multi", 1, CMD_TXCTL, srv_cmd_multi},
    {"exec", 1, CMD_DB | CMD_TXCTL, srv_cmd_exec},
    {"discard", 1, CMD_TXCTL, srv_cmd_discard},
    {"watch", -2, CMD_DB | CMD_TXCTL, srv_cmd_watch},
    {"unwatch", 1, CMD_DB, srv_cmd_unwatch},
    {"incr", 2, CMD_DB | CMD_KEYS | CMD_MAKE | CMD_TX, srv_cmd_rmw},
    {"incrby", 3, CMD_DB | CMD_KEYS | CMD_MAKE | CMD_TX, srv_cmd_rmw},
    {"decr", 2, CMD_DB | CMD_KEYS | CMD_MAKE | CMD_TX, srv_cmd_rmw},
    {"decrby", 3, CMD_DB | CMD_KEYS | CMD_MAKE | CMD_TX, srv_cmd_rmw},
    {"getset", 3, CMD_DB | CMD_KEYS | CMD_MAKE | CMD_TX, srv_cmd_rmw},
    {"getdel", 2, CMD_DB | CMD_KEYS | CMD_TX, srv_cmd_rmw},
    {"setnx", 3, CMD_DB | CMD_KEYS | CMD_MAKE | CMD_TX, srv_cmd_rmw},
    {"append", 3, CMD_DB | CMD_KEYS | CMD_MAKE | CMD_TX, srv_cmd_rmw},
    {"ping", -1, 0, cmd_ping},
    {"readonly", 1, 0, cmd_readonly},
    {"readwrite", 1, 0, cmd_readwrite},
    {"echo", 2, 0, cmd_echo},
    {"quit", -1, CMD_NOAUTH | CMD_TXCTL, cmd_quit},
    {"auth", -2, CMD_NOAUTH, cmd_auth},
    {"hello", -1, CMD_NOAUTH, srv_cmd_hello},
    {"select", 2, 0, cmd_select},
    {"move", -1, 0, cmd_refused},
    {"swapdb", -1, 0, cmd_refused},
    {"command", -1, 0, srv_cmd_command},
    {"client", -2, 0, srv_cmd_client},
};

static const srv_cmd *lookup(const resp_arg *name)
{
	for (size_t i = 0; i < WR_ARRAY_LEN(commands); i++)
		if (resp_arg_is(name, commands[i].name))
			return &commands[i];
	return NULL;
}

/* Redis's wording: "unknown command 'x', with args beginning with: 'a' 'b' ". */
static void unknown_command(srv_session *s, const resp_arg *argv, size_t argc)
{
	char args[256] = "";
	size_t used = 0;
	for (size_t i = 1; i < argc && used < sizeof(args) - 1; i++) {
		int n = snprintf(args + used, sizeof(args) - used, "'%.*s' ",
		                 (int)WR_MIN(argv[i].len, 128), argv[i].p);
		if (n < 0)
			break;
		used += WR_MIN((size_t)n, sizeof(args) - 1 - used);
	}
	resp_add_error(s->out, "ERR unknown command '%.*s', with args beginning with: %s",
	               (int)WR_MIN(argv[0].len, 128), argv[0].p, args);
}

/* The checks before a command runs; false when a reply was given instead. */
static bool admit(srv_session *s, const srv_cmd *c, const resp_arg *argv, size_t argc)
{
	if (c == NULL) {
		unknown_command(s, argv, argc);
	} else if ((c->arity > 0 && argc != (size_t)c->arity) ||
	           (c->arity < 0 && argc < (size_t)-c->arity)) {
		srv_arity_error(s, c->name);
	} else if (!s->authed && !(c->flags & CMD_NOAUTH)) {
		resp_add_error(s->out, "NOAUTH Authentication required.");
		return false;
	} else if (s->in_multi && !(c->flags & (CMD_TX | CMD_TXCTL))) {
		resp_add_error(s->out,
		               "ERR %s inside MULTI is not supported: a walrus transaction runs "
		               "the key commands (GET SET DEL EXISTS MGET MSET INCR INCRBY DECR "
		               "DECRBY GETSET GETDEL SETNX APPEND)",
		               c->name);
	} else {
		return true;
	}
	if (s->in_multi)
		s->tx_dirty = true;
	return false;
}

/* ---------------------------------------------------------------- groups of SETs */

/*
 * Pipelined plain SETs (no option) in a row become one walrus batch: one
 * tree lock and one commit for the lot instead of one per SET.  Their
 * "+OK" replies are appended at once and are the last replies in out until
 * the group is applied, so if the batch fails they are replaced: each SET
 * is then applied on its own and answers for itself.  A group is applied
 * before any other request runs and before the barrier, so nothing ever
 * observes it half-done and no reply leaves before it is applied.
 */
#define GROUP_MAX_SETS  ((size_t)64)
#define GROUP_MAX_BYTES ((size_t)256 * 1024)

static int group_commit(srv_session *s, struct srv_group *g)
{
	stripe_set set = {{0}};
	for (size_t i = 0; i < g->n; i++)
		srv_stripe_add(&set, &g->kv[2 * i]);
	if (g->batch == NULL && (g->batch = walrus_batch_new()) == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory");
	walrus_batch_clear(g->batch);
	int rc = srv_mset_into(s, g->batch, g->kv, 0, 2 * g->n);
	if (rc != WALRUS_OK)
		return rc;
	srv_stripes_lock(s, &set);
	rc = walrus_batch_commit(s->db, g->batch, WALRUS_ASYNC);
	srv_stripes_unlock(s, &set);
	return rc;
}

void srv_group_flush(srv_session *s)
{
	struct srv_group *g = &s->group;
	if (g->n == 0)
		return;
	/* a SELECT flushes the group before it runs: its SETs are all of this database */
	int rc = srv_use_space(s, true);
	bool space_ok = rc == WALRUS_OK;
	if (space_ok)
		rc = group_commit(s, g);
	if (rc != WALRUS_OK) {
		s->out->len = g->out_start; /* each SET on its own, with its own reply */
		for (size_t i = 0; i < g->n; i++) {
			resp_arg set[3] = {{"SET", 3}, g->kv[2 * i], g->kv[2 * i + 1]};
			if (space_ok)
				srv_cmd_set(s, set, 3);
			else
				srv_reply_engine_error(s, rc);
		}
	}
	g->n = 0;
	g->bytes = 0;
}

/* Takes a plain SET into the group; false when it must run on its own. */
static bool group_add(srv_session *s, const resp_arg *argv)
{
	struct srv_group *g = &s->group;
	if (argv[1].len == 0 || argv[1].len > WALRUS_MAX_KEY || argv[2].len > GROUP_MAX_BYTES)
		return false;
	if (g->n == GROUP_MAX_SETS || g->bytes + argv[2].len > GROUP_MAX_BYTES)
		srv_group_flush(s);
	if (wr_grow(&g->kv, &g->cap, 2 * g->n + 3, sizeof(*g->kv), 2 * GROUP_MAX_SETS + 1) !=
	    WALRUS_OK)
		return false;
	if (g->n == 0)
		g->out_start = s->out->len;
	g->kv[2 * g->n] = argv[1];
	g->kv[2 * g->n + 1] = argv[2];
	g->n++;
	g->bytes += argv[2].len;
	srv_note_write(s);
	resp_add_simple(s->out, "OK");
	return true;
}

/* Whether a request may join the group of SETs. */
static bool groupable(const srv_session *s, const srv_cmd *c, size_t argc)
{
	return c != NULL && c->fn == srv_cmd_set && argc == 3 && s->args_stable && s->authed &&
	       !s->in_multi && s->db != NULL && !s->db_dead;
}

/* ---------------------------------------------------------------- dispatch */

static void run(srv_session *s, const resp_arg *argv, size_t argc)
{
	const srv_cmd *c = lookup(&argv[0]);
	s->spoke = true;
	if (groupable(s, c, argc) && group_add(s, argv))
		return;
	srv_group_flush(s);
	if (!admit(s, c, argv, argc))
		return;
	if (s->in_multi && (c->flags & CMD_TX)) {
		srv_tx_add(s, argv, argc);
		return;
	}
	if (c->flags & CMD_DB) {
		int rc = srv_session_open(s);
		if (rc == WALRUS_ERESTART) {
			srv_reply_engine_error(s, rc); /* "retry it" */
			return;
		}
		if (rc != WALRUS_OK) {
			resp_add_error(s->out, "ERR could not open the database: %s",
			               walrus_errmsg()[0] ? walrus_errmsg() : walrus_strerror(rc));
			return;
		}
	}
	/* As a Redis Cluster replica: reads only for clients that said they
	 * accept data that may lag the primary's. */
	if ((c->flags & CMD_READ) && !s->readonly && srv_is_standby()) {
		resp_add_error(s->out, "READONLY this walrus instance is a standby: send READONLY "
		                       "to read from it (its data may lag its primary's)");
		return;
	}
	if (c->flags & CMD_KEYS) {
		int rc = srv_use_space(s, c->flags & CMD_MAKE);
		if (rc != WALRUS_OK) {
			srv_reply_engine_error(s, rc);
			return;
		}
	}
	c->fn(s, argv, argc);
}

/* Bookkeeping of the barrier: where the replies of not yet durable writes begin. */
static void account(srv_session *s, size_t start, bool was_unsynced)
{
	if (s->unsynced) {
		if (!was_unsynced) {
			s->mark = start;
			s->since_mark = 0;
		}
		s->since_mark++;
	}
	if (s->cfg->sh != NULL)
		atomic_fetch_add_explicit(&s->cfg->sh->commands, 1, memory_order_relaxed);
}

void srv_dispatch(srv_session *s, const resp_arg *argv, size_t argc)
{
	size_t start = s->out->len;
	bool was_unsynced = s->unsynced;
	run(s, argv, argc);
	account(s, start, was_unsynced);
}

void srv_reply_error(srv_session *s, const char *text)
{
	srv_group_flush(s);
	size_t start = s->out->len;
	resp_add_error(s->out, "%s", text);
	if (s->in_multi)
		s->tx_dirty = true;
	account(s, start, s->unsynced);
}

void srv_barrier(srv_session *s)
{
	srv_group_flush(s);
	if (s->unsynced)
		srv_barrier_result(s, s->db != NULL ? walrus_sync(s->db) : WALRUS_EINVAL);
}

void srv_barrier_result(srv_session *s, int rc)
{
	if (!s->unsynced)
		return;
	s->unsynced = false;
	if (rc == WALRUS_OK)
		return;
	char msg[256];
	snprintf(msg, sizeof(msg), "%s",
	         walrus_errmsg()[0] ? walrus_errmsg() : walrus_strerror(rc));
	if (rc == WALRUS_ERESTART || rc == WALRUS_EPANIC || rc == WALRUS_ESHUTDOWN)
		s->db_dead = true;
	s->out->len = s->mark;
	for (size_t i = 0; i < s->since_mark; i++)
		resp_add_error(s->out,
		               "ERR the write may not be durable (it may or may not have "
		               "happened): %s",
		               msg);
}
