/*
 * tx.c - commands built on engine transactions (walrus_txn_*): MULTI, EXEC,
 * DISCARD, WATCH, UNWATCH, and the read-modify-write commands INCR, INCRBY,
 * DECR, DECRBY, GETSET, GETDEL, SETNX, APPEND.
 *
 * A command queued inside MULTI is checked then (an error discards the
 * whole transaction at EXEC, as Redis's EXECABORT); EXEC runs the queue in
 * one serializable engine transaction: its reads (GET, MGET, EXISTS, the
 * counters) see its own earlier writes, and its writes are one atomic batch
 * at commit.  Without WATCH the transaction begins at EXEC and a conflict
 * (a commit by anyone else touching what it read or wrote) makes EXEC run
 * it again, invisibly.  WATCH begins the transaction at WATCH and reads the
 * watched keys in it: a commit that changes one of them (or anything the
 * queued commands read) after WATCH fails EXEC's commit, and EXEC answers a
 * null array, as Redis does; the client runs its WATCH loop again.
 *
 * A read-modify-write command outside MULTI is a transaction of its own,
 * retried on conflict, under the stripe locks of its keys (so that it is
 * atomic against SET NX/XX and DEL, which check then write under them).
 */
#include "server/srv_int.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

enum {
	TX_SET,
	TX_DEL,
	TX_MSET,
	TX_GET,
	TX_MGET,
	TX_EXISTS,
	TX_INCRBY, /* INCR, INCRBY, DECR, DECRBY: the delta in the op */
	TX_GETSET,
	TX_GETDEL,
	TX_SETNX,
	TX_APPEND,
};

struct srv_txop {
	int kind;
	int flags;    /* SET's */
	long long by; /* TX_INCRBY's delta */
	size_t argc;
	resp_arg argv[]; /* the words follow the array */
};

#define TX_RETRIES 1000 /* conflicts of one EXEC without WATCH before it gives up */

void srv_tx_clear(srv_session *s)
{
	for (size_t i = 0; i < s->ntx; i++)
		free(s->tx[i]);
	s->ntx = 0;
	s->in_multi = false;
	s->tx_dirty = false;
}

/* Ends a WATCH: its transaction goes. */
void srv_unwatch(srv_session *s)
{
	if (s->watch != NULL)
		walrus_txn_free(s->watch);
	s->watch = NULL;
}

void srv_cmd_multi(srv_session *s, const resp_arg *argv, size_t argc)
{
	(void)argv;
	(void)argc;
	if (s->in_multi) {
		resp_add_error(s->out, "ERR MULTI calls can not be nested");
		return;
	}
	s->in_multi = true;
	s->tx_dirty = false;
	resp_add_simple(s->out, "OK");
}

void srv_cmd_discard(srv_session *s, const resp_arg *argv, size_t argc)
{
	(void)argv;
	(void)argc;
	if (!s->in_multi) {
		resp_add_error(s->out, "ERR DISCARD without MULTI");
		return;
	}
	srv_tx_clear(s);
	srv_unwatch(s);
	resp_add_simple(s->out, "OK");
}

/* ---------------------------------------------------------------- WATCH */

/*
 * The key space of a WATCH is made if missing, before its transaction
 * begins: a key watched in a database nobody wrote yet must be read in the
 * transaction for a later write of it to fail EXEC.  A standby makes none:
 * the watched keys read as absent, and EXEC's writes are refused anyway.
 */
static int watch_space(srv_session *s)
{
	int rc = srv_use_space(s, true);
	if (rc == WALRUS_EREADONLY) {
		wr_error_clear();
		rc = srv_use_space(s, false);
	}
	return rc;
}

void srv_cmd_watch(srv_session *s, const resp_arg *argv, size_t argc)
{
	if (s->in_multi) {
		resp_add_error(s->out, "ERR WATCH inside MULTI is not allowed");
		return;
	}
	if (!srv_check_keys(s, argv, 1, argc, 1))
		return;
	int rc = watch_space(s);
	if (rc == WALRUS_OK && s->watch == NULL)
		rc = walrus_txn_begin(s->db, 0, &s->watch);
	for (size_t i = 1; rc == WALRUS_OK && i < argc; i++) {
		size_t vl; /* read into nothing: the key joins what the transaction read */
		rc = srv_txn_get_into(s, s->watch, &argv[i], NULL, 0, &vl);
		if (rc == WALRUS_ENOTFOUND || rc == WALRUS_ETOOBIG)
			rc = WALRUS_OK;
	}
	if (rc != WALRUS_OK) {
		srv_unwatch(s);
		srv_reply_engine_error(s, rc);
		return;
	}
	resp_add_simple(s->out, "OK");
}

void srv_cmd_unwatch(srv_session *s, const resp_arg *argv, size_t argc)
{
	(void)argv;
	(void)argc;
	srv_unwatch(s);
	resp_add_simple(s->out, "OK");
}

/* ---------------------------------------------------------------- queueing */

/* Copies a checked command into a new op (freed by the caller). */
static srv_txop *op_new(int kind, int flags, long long by, const resp_arg *argv, size_t argc)
{
	size_t bytes = 0;
	for (size_t i = 0; i < argc; i++)
		bytes += argv[i].len;
	srv_txop *op = malloc(sizeof(*op) + argc * sizeof(resp_arg) + bytes);
	if (op == NULL)
		return NULL;
	op->kind = kind;
	op->flags = flags;
	op->by = by;
	op->argc = argc;
	char *d = (char *)&op->argv[argc];
	for (size_t i = 0; i < argc; i++) {
		if (argv[i].len > 0)
			memcpy(d, argv[i].p, argv[i].len);
		op->argv[i] = (resp_arg){d, argv[i].len};
		d += argv[i].len;
	}
	return op;
}

/* A 64-bit integer as Redis writes one: optional '-', digits, no leading zero. */
static bool value_ll(const char *p, size_t n, long long *out)
{
	char buf[24];
	if (n == 0 || n > 20 || (p[0] == '0' && n > 1) || (p[0] == '-' && (n == 1 || p[1] == '0')))
		return false;
	for (size_t i = p[0] == '-' ? 1 : 0; i < n; i++)
		if (p[i] < '0' || p[i] > '9')
			return false;
	memcpy(buf, p, n);
	buf[n] = '\0';
	errno = 0;
	long long v = strtoll(buf, NULL, 10);
	if (errno != 0)
		return false;
	*out = v;
	return true;
}

/* The delta of INCR/INCRBY/DECR/DECRBY, or false after an error reply. */
static bool counter_delta(srv_session *s, const resp_arg *argv, size_t argc, long long *by)
{
	bool decr = resp_arg_is(&argv[0], "decr") || resp_arg_is(&argv[0], "decrby");
	*by = 1;
	if (argc == 3 && !value_ll(argv[2].p, argv[2].len, by)) {
		resp_add_error(s->out, "ERR value is not an integer or out of range");
		return false;
	}
	if (decr) {
		if (*by == LLONG_MIN) {
			resp_add_error(s->out, "ERR decrement would overflow");
			return false;
		}
		*by = -*by;
	}
	return true;
}

/* The kind of a command this file runs, after its checks (false: an error reply). */
static bool classify(srv_session *s, const resp_arg *argv, size_t argc, int *kind, int *flags,
                     long long *by)
{
	*flags = 0;
	*by = 0;
	static const struct {
		const char *name;
		int kind;
		size_t step; /* keys from argv[1] every step words; 0: one key, then values */
	} table[] = {{"del", TX_DEL, 1},       {"mset", TX_MSET, 2},     {"get", TX_GET, 0},
	             {"mget", TX_MGET, 1},     {"exists", TX_EXISTS, 1}, {"incr", TX_INCRBY, 0},
	             {"incrby", TX_INCRBY, 0}, {"decr", TX_INCRBY, 0},   {"decrby", TX_INCRBY, 0},
	             {"getset", TX_GETSET, 0}, {"getdel", TX_GETDEL, 0}, {"setnx", TX_SETNX, 0},
	             {"append", TX_APPEND, 0}};
	if (resp_arg_is(&argv[0], "set")) {
		*kind = TX_SET;
		if (!srv_set_options(s, argv, argc, flags))
			return false;
		if (*flags & SET_GET) {
			resp_add_error(s->out, "ERR SET with GET is not supported inside MULTI");
			return false;
		}
		return true;
	}
	for (size_t i = 0; i < WR_ARRAY_LEN(table); i++) {
		if (!resp_arg_is(&argv[0], table[i].name))
			continue;
		*kind = table[i].kind;
		if (table[i].step == 2 && argc % 2 == 0) {
			srv_arity_error(s, table[i].name);
			return false;
		}
		if (table[i].step > 0)
			return srv_check_keys(s, argv, 1, argc, table[i].step);
		if (!srv_check_key(s, &argv[1]))
			return false;
		if (*kind == TX_INCRBY)
			return counter_delta(s, argv, argc, by);
		if (argc == 3)
			return srv_check_value(s, &argv[2]);
		return true;
	}
	resp_add_error(s->out, "ERR %.*s is not supported inside MULTI",
	               (int)WR_MIN(argv[0].len, 64), argv[0].p);
	return false;
}

/* A command inside MULTI: checked now, run by EXEC ("+QUEUED"), or an error. */
void srv_tx_add(srv_session *s, const resp_arg *argv, size_t argc)
{
	int kind, flags;
	long long by;
	bool ok = classify(s, argv, argc, &kind, &flags, &by);
	if (ok && s->ntx >= RESP_MAX_ARGS) {
		resp_add_error(s->out, "ERR too many commands in this transaction");
		ok = false;
	}
	srv_txop *op = NULL;
	if (ok && (wr_grow(&s->tx, &s->tx_cap, s->ntx + 1, sizeof(srv_txop *), 16) != WALRUS_OK ||
	           (op = op_new(kind, flags, by, argv, argc)) == NULL)) {
		resp_add_error(s->out, "ERR out of memory queueing the command");
		ok = false;
	}
	if (ok) {
		s->tx[s->ntx++] = op;
		resp_add_simple(s->out, "QUEUED");
	} else {
		s->tx_dirty = true;
	}
}

/* ---------------------------------------------------------------- running */

/* The value of @k in @t into s->val (*found false when absent). */
static int txn_value(srv_session *s, walrus_txn *t, const resp_arg *k, size_t *vlen, bool *found)
{
	*found = false;
	for (int tries = 0;; tries++) {
		int rc = srv_txn_get_into(s, t, k, s->val, s->val_cap, vlen);
		if (rc == WALRUS_ENOTFOUND)
			return WALRUS_OK;
		if (rc == WALRUS_OK)
			*found = true;
		if (rc != WALRUS_ETOOBIG || tries == 3)
			return rc;
		char *v = realloc(s->val, *vlen);
		if (v == NULL)
			return wr_error(WALRUS_ENOMEM, "out of memory");
		s->val = v;
		s->val_cap = *vlen;
	}
}

static int txn_exists(srv_session *s, walrus_txn *t, const resp_arg *k, bool *found)
{
	size_t vl;
	int rc = srv_txn_get_into(s, t, k, NULL, 0, &vl);
	*found = rc == WALRUS_OK || rc == WALRUS_ETOOBIG;
	return rc == WALRUS_ENOTFOUND || *found ? WALRUS_OK : rc;
}

/* INCRBY: the new value, or a reply error (*bad) for a value that is no integer. */
static int run_incr(srv_session *s, walrus_txn *t, const srv_txop *op, resp_buf *out)
{
	size_t vl;
	bool found;
	int rc = txn_value(s, t, &op->argv[1], &vl, &found);
	if (rc != WALRUS_OK)
		return rc;
	long long n = 0;
	if (found) {
		if (!value_ll(s->val, vl, &n)) {
			resp_add_error(out, "ERR value is not an integer or out of range");
			return WALRUS_OK;
		}
	}
	if ((op->by > 0 && n > LLONG_MAX - op->by) || (op->by < 0 && n < LLONG_MIN - op->by)) {
		resp_add_error(out, "ERR increment or decrement would overflow");
		return WALRUS_OK;
	}
	n += op->by;
	char buf[32];
	int len = snprintf(buf, sizeof(buf), "%lld", n);
	rc = walrus_txn_put_in(t, s->sp, op->argv[1].p, op->argv[1].len, buf, (size_t)len);
	if (rc == WALRUS_OK)
		resp_add_int(out, n);
	return rc;
}

static int run_append(srv_session *s, walrus_txn *t, const srv_txop *op, resp_buf *out)
{
	size_t vl;
	bool found;
	int rc = txn_value(s, t, &op->argv[1], &vl, &found);
	if (rc != WALRUS_OK)
		return rc;
	size_t add = op->argv[2].len, total = (found ? vl : 0) + add;
	if (total > WALRUS_MAX_VALUE) {
		resp_add_error(out, "ERR string exceeds maximum allowed size");
		return WALRUS_OK;
	}
	if (total > s->val_cap) {
		char *v = realloc(s->val, total);
		if (v == NULL)
			return wr_error(WALRUS_ENOMEM, "out of memory");
		s->val = v;
		s->val_cap = total;
	}
	if (add > 0)
		memcpy(s->val + total - add, op->argv[2].p, add);
	rc = walrus_txn_put_in(t, s->sp, op->argv[1].p, op->argv[1].len, s->val, total);
	if (rc == WALRUS_OK)
		resp_add_int(out, (long long)total);
	return rc;
}

/* GET, GETSET, GETDEL: the old value's reply, then the change. */
static int run_get_then(srv_session *s, walrus_txn *t, const srv_txop *op, resp_buf *out)
{
	size_t vl;
	bool found;
	int rc = txn_value(s, t, &op->argv[1], &vl, &found);
	if (rc != WALRUS_OK)
		return rc;
	if (found)
		resp_add_bulk(out, s->val, vl);
	else
		resp_add_null(out, s->proto);
	if (op->kind == TX_GETSET)
		return walrus_txn_put_in(t, s->sp, op->argv[1].p, op->argv[1].len, op->argv[2].p,
		                         op->argv[2].len);
	if (op->kind == TX_GETDEL && found)
		return walrus_txn_delete_in(t, s->sp, op->argv[1].p, op->argv[1].len);
	return WALRUS_OK;
}

static int run_set(srv_session *s, walrus_txn *t, const srv_txop *op, int flags, resp_buf *out)
{
	if (flags & (SET_NX | SET_XX)) {
		bool found;
		int rc = txn_exists(s, t, &op->argv[1], &found);
		if (rc != WALRUS_OK)
			return rc;
		if (((flags & SET_NX) && found) || ((flags & SET_XX) && !found)) {
			if (op->kind == TX_SETNX)
				resp_add_int(out, 0);
			else
				resp_add_null(out, s->proto);
			return WALRUS_OK;
		}
	}
	int rc = walrus_txn_put_in(t, s->sp, op->argv[1].p, op->argv[1].len, op->argv[2].p,
	                           op->argv[2].len);
	if (rc == WALRUS_OK && op->kind == TX_SETNX)
		resp_add_int(out, 1);
	else if (rc == WALRUS_OK)
		resp_add_simple(out, "OK");
	return rc;
}

/* The keys of DEL and EXISTS (each counted), MGET's values. */
static int run_keys(srv_session *s, walrus_txn *t, const srv_txop *op, resp_buf *out)
{
	long long n = 0;
	if (op->kind == TX_MGET)
		resp_add_array(out, op->argc - 1);
	for (size_t i = 1; i < op->argc; i++) {
		const resp_arg *k = &op->argv[i];
		bool found;
		size_t vl;
		int rc = op->kind == TX_MGET ? txn_value(s, t, k, &vl, &found)
		                             : txn_exists(s, t, k, &found);
		if (rc != WALRUS_OK)
			return rc;
		if (op->kind == TX_MGET && found)
			resp_add_bulk(out, s->val, vl);
		else if (op->kind == TX_MGET)
			resp_add_null(out, s->proto);
		n += found;
		if (op->kind == TX_DEL && found &&
		    (rc = walrus_txn_delete_in(t, s->sp, k->p, k->len)) != WALRUS_OK)
			return rc;
	}
	if (op->kind != TX_MGET)
		resp_add_int(out, n);
	return WALRUS_OK;
}

/* One command in @t; its reply into @out.  An engine error ends the transaction. */
static int run_op(srv_session *s, walrus_txn *t, const srv_txop *op, resp_buf *out)
{
	switch (op->kind) {
	case TX_SET:
		return run_set(s, t, op, op->flags, out);
	case TX_SETNX:
		return run_set(s, t, op, SET_NX, out);
	case TX_MSET:
		for (size_t i = 1; i + 1 < op->argc; i += 2) {
			int rc = walrus_txn_put_in(t, s->sp, op->argv[i].p, op->argv[i].len,
			                           op->argv[i + 1].p, op->argv[i + 1].len);
			if (rc != WALRUS_OK)
				return rc;
		}
		resp_add_simple(out, "OK");
		return WALRUS_OK;
	case TX_GET:
	case TX_GETSET:
	case TX_GETDEL:
		return run_get_then(s, t, op, out);
	case TX_INCRBY:
		return run_incr(s, t, op, out);
	case TX_APPEND:
		return run_append(s, t, op, out);
	default:
		return run_keys(s, t, op, out);
	}
}

static bool op_writes(const srv_txop *op)
{
	return op->kind != TX_GET && op->kind != TX_MGET && op->kind != TX_EXISTS;
}

/* DEL and GETDEL write only keys that exist: in a missing key space, nothing. */
static bool op_creates(const srv_txop *op)
{
	return op_writes(op) && op->kind != TX_DEL && op->kind != TX_GETDEL;
}

/*
 * Runs @ops in a transaction (@watch's, or a new one retried on conflict)
 * and replies: an array of their replies (@multi), or the one reply.
 * WALRUS_ECONFLICT is returned (nothing replied) only for @watch.
 */
static int run_ops(srv_session *s, srv_txop *const *ops, size_t n, bool multi, walrus_txn *watch)
{
	resp_buf out = {0};
	int rc = WALRUS_OK;
	bool writes = false;
	for (size_t i = 0; i < n; i++)
		writes = writes || op_writes(ops[i]);
	for (int attempt = 0; attempt < TX_RETRIES; attempt++) {
		walrus_txn *t = watch;
		out.len = 0;
		rc = t != NULL ? WALRUS_OK : walrus_txn_begin(s->db, 0, &t);
		for (size_t i = 0; rc == WALRUS_OK && i < n; i++)
			rc = run_op(s, t, ops[i], &out);
		if (rc == WALRUS_OK)
			rc = walrus_txn_commit(t, WALRUS_ASYNC);
		if (t != watch)
			walrus_txn_free(t);
		if (rc != WALRUS_ECONFLICT || watch != NULL)
			break;
	}
	if (rc == WALRUS_OK && out.oom)
		rc = wr_error(WALRUS_ENOMEM, "out of memory building the replies");
	if (rc == WALRUS_OK) {
		if (writes)
			srv_note_write(s);
		if (multi)
			resp_add_array(s->out, n);
		resp_add_raw(s->out, out.p, out.len);
	} else if (rc != WALRUS_ECONFLICT || watch == NULL) {
		srv_reply_engine_error(s, rc);
	}
	resp_buf_free(&out);
	return rc;
}

/* The stripes of every key @ops touch. */
static void ops_stripes(srv_txop *const *ops, size_t n, stripe_set *set)
{
	for (size_t i = 0; i < n; i++) {
		const srv_txop *op = ops[i];
		size_t step = op->kind == TX_MSET ? 2 : 1;
		size_t last = op->kind == TX_DEL || op->kind == TX_MSET || op->kind == TX_MGET ||
		                      op->kind == TX_EXISTS
		                  ? op->argc
		                  : 2;
		for (size_t k = 1; k < last; k += step)
			srv_stripe_add(set, &op->argv[k]);
	}
}

void srv_cmd_exec(srv_session *s, const resp_arg *argv, size_t argc)
{
	(void)argv;
	(void)argc;
	if (!s->in_multi) {
		resp_add_error(s->out, "ERR EXEC without MULTI");
		return;
	}
	if (s->tx_dirty) {
		srv_tx_clear(s);
		srv_unwatch(s);
		resp_add_error(s->out,
		               "EXECABORT Transaction discarded because of previous errors.");
		return;
	}
	bool create = false;
	for (size_t i = 0; i < s->ntx; i++)
		create = create || op_creates(s->tx[i]);
	int rc = srv_use_space(s, create);
	if (rc != WALRUS_OK) {
		srv_tx_clear(s);
		srv_unwatch(s);
		srv_reply_engine_error(s, rc);
		return;
	}
	stripe_set set = {{0}};
	ops_stripes(s->tx, s->ntx, &set);
	srv_stripes_lock(s, &set);
	rc = run_ops(s, s->tx, s->ntx, true, s->watch);
	srv_stripes_unlock(s, &set);
	if (rc == WALRUS_ECONFLICT) /* a watched key changed: Redis's null array */
		resp_add_raw(s->out, s->proto == 3 ? "_\r\n" : "*-1\r\n", s->proto == 3 ? 3 : 5);
	srv_tx_clear(s);
	srv_unwatch(s);
}

/* INCR, INCRBY, DECR, DECRBY, GETSET, GETDEL, SETNX, APPEND outside MULTI. */
void srv_cmd_rmw(srv_session *s, const resp_arg *argv, size_t argc)
{
	int kind, flags;
	long long by;
	if (!classify(s, argv, argc, &kind, &flags, &by))
		return;
	srv_txop *op = op_new(kind, flags, by, argv, argc);
	if (op == NULL) {
		srv_reply_engine_error(s, wr_error(WALRUS_ENOMEM, "out of memory"));
		return;
	}
	stripe_set set = {{0}};
	ops_stripes(&op, 1, &set);
	srv_stripes_lock(s, &set);
	(void)run_ops(s, &op, 1, false, NULL);
	srv_stripes_unlock(s, &set);
	free(op);
}
