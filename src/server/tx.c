/*
 * tx.c - MULTI, EXEC, DISCARD: a transaction of writes.  SET (with NX/XX),
 * DEL and MSET are checked when queued (an error discards the whole
 * transaction at EXEC, as Redis's EXECABORT) and EXEC applies them as one
 * walrus batch under the stripe locks of every key they touch: all or
 * nothing, for readers and after a crash.  NX/XX and DEL's counts see the
 * transaction's own earlier writes.  Reads are refused inside MULTI.
 */
#include "server/srv_int.h"

#include <stdlib.h>
#include <string.h>

#include "common/common.h"

enum { TX_SET, TX_DEL, TX_MSET };

struct srv_txop {
	int kind;
	int flags;
	size_t argc;
	resp_arg argv[]; /* the words follow the array */
};

void srv_tx_clear(srv_session *s)
{
	for (size_t i = 0; i < s->ntx; i++)
		free(s->tx[i]);
	s->ntx = 0;
	s->in_multi = false;
	s->tx_dirty = false;
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
	resp_add_simple(s->out, "OK");
}

/* Copies a checked write into the transaction's queue. */
static bool tx_queue(srv_session *s, int kind, int flags, const resp_arg *argv, size_t argc)
{
	size_t bytes = 0;
	for (size_t i = 0; i < argc; i++)
		bytes += argv[i].len;
	if (wr_grow(&s->tx, &s->tx_cap, s->ntx + 1, sizeof(srv_txop *), 16) != WALRUS_OK)
		return false;
	srv_txop *op = malloc(sizeof(*op) + argc * sizeof(resp_arg) + bytes);
	if (op == NULL)
		return false;
	op->kind = kind;
	op->flags = flags;
	op->argc = argc;
	char *d = (char *)&op->argv[argc];
	for (size_t i = 0; i < argc; i++) {
		if (argv[i].len > 0)
			memcpy(d, argv[i].p, argv[i].len);
		op->argv[i] = (resp_arg){d, argv[i].len};
		d += argv[i].len;
	}
	s->tx[s->ntx++] = op;
	return true;
}

/* A write command inside MULTI: checked now, applied by EXEC. */
void srv_tx_add(srv_session *s, const resp_arg *argv, size_t argc)
{
	int kind, flags = 0;
	bool ok;
	if (resp_arg_is(&argv[0], "set")) {
		kind = TX_SET;
		ok = srv_set_options(s, argv, argc, &flags);
		if (ok && (flags & SET_GET)) {
			resp_add_error(s->out, "ERR SET with GET is not supported inside MULTI");
			ok = false;
		}
	} else if (resp_arg_is(&argv[0], "del")) {
		kind = TX_DEL;
		ok = srv_check_keys(s, argv, 1, argc, 1);
	} else {
		kind = TX_MSET;
		ok = argc % 2 == 1 && srv_check_keys(s, argv, 1, argc, 2);
		if (argc % 2 == 0)
			srv_arity_error(s, "mset");
	}
	if (ok && s->ntx >= RESP_MAX_ARGS) {
		resp_add_error(s->out, "ERR too many commands in this transaction");
		ok = false;
	}
	if (ok && !tx_queue(s, kind, flags, argv, argc)) {
		resp_add_error(s->out, "ERR out of memory queueing the command");
		ok = false;
	}
	if (ok)
		resp_add_simple(s->out, "QUEUED");
	else
		s->tx_dirty = true;
}

/* One queued SET into the batch: *result 1 when it writes, 0 when NX/XX stop it. */
static int tx_set(srv_session *s, keyset *ks, walrus_batch *b, const srv_txop *op, int *result)
{
	*result = 1;
	if (op->flags & (SET_NX | SET_XX)) {
		struct kentry *e;
		int ex = srv_keyset_exists(s, ks, &op->argv[1], &e);
		if (ex < 0)
			return ex;
		if (((op->flags & SET_NX) && ex) || ((op->flags & SET_XX) && !ex)) {
			*result = 0;
			return WALRUS_OK;
		}
		e->exists = 1;
	} else {
		bool found;
		struct kentry *e = srv_keyset_find(ks, &op->argv[1], &found);
		if (e == NULL)
			return wr_error(WALRUS_ENOMEM, "out of memory");
		if (!found)
			ks->n++;
		*e = (struct kentry){.p = op->argv[1].p, .len = op->argv[1].len, .exists = 1};
	}
	return walrus_batch_put(b, op->argv[1].p, op->argv[1].len, op->argv[2].p, op->argv[2].len);
}

static int tx_mset(keyset *ks, walrus_batch *b, const srv_txop *op)
{
	for (size_t i = 1; i + 1 < op->argc; i += 2) {
		bool found;
		struct kentry *e = srv_keyset_find(ks, &op->argv[i], &found);
		if (e == NULL)
			return wr_error(WALRUS_ENOMEM, "out of memory");
		if (!found)
			ks->n++;
		*e = (struct kentry){.p = op->argv[i].p, .len = op->argv[i].len, .exists = 1};
	}
	return srv_mset_into(b, op->argv, 1, op->argc);
}

/* Builds the transaction's batch in order; results[i] is op i's reply value. */
static int tx_build(srv_session *s, walrus_batch *b, long long *results)
{
	keyset ks = {0};
	int rc = WALRUS_OK;
	for (size_t i = 0; rc == WALRUS_OK && i < s->ntx; i++) {
		const srv_txop *op = s->tx[i];
		int r = 1;
		if (op->kind == TX_SET) {
			rc = tx_set(s, &ks, b, op, &r);
			results[i] = r;
		} else if (op->kind == TX_DEL) {
			results[i] = 0;
			rc = srv_del_into(s, &ks, b, op->argv, 1, op->argc, &results[i]);
		} else {
			rc = tx_mset(&ks, b, op);
			results[i] = 1;
		}
	}
	free(ks.e);
	return rc;
}

static void tx_reply(srv_session *s, const long long *results)
{
	resp_add_array(s->out, s->ntx);
	for (size_t i = 0; i < s->ntx; i++) {
		if (s->tx[i]->kind == TX_DEL)
			resp_add_int(s->out, results[i]);
		else if (results[i])
			resp_add_simple(s->out, "OK");
		else
			resp_add_null(s->out, s->proto);
	}
}

void srv_cmd_exec(srv_session *s, const resp_arg *argv, size_t argc)
{
	stripe_set set = {{0}};
	(void)argv;
	(void)argc;
	if (!s->in_multi) {
		resp_add_error(s->out, "ERR EXEC without MULTI");
		return;
	}
	if (s->tx_dirty) {
		srv_tx_clear(s);
		resp_add_error(s->out,
		               "EXECABORT Transaction discarded because of previous errors.");
		return;
	}
	long long *results = calloc(s->ntx + 1, sizeof(*results));
	walrus_batch *b = walrus_batch_new();
	int rc =
	    results == NULL || b == NULL ? wr_error(WALRUS_ENOMEM, "out of memory") : WALRUS_OK;
	for (size_t i = 0; i < s->ntx; i++)
		for (size_t k = 1; k < s->tx[i]->argc; k += s->tx[i]->kind == TX_DEL ? 1 : 2)
			srv_stripe_add(&set, &s->tx[i]->argv[k]);
	if (rc == WALRUS_OK) {
		srv_stripes_lock(s, &set);
		rc = tx_build(s, b, results);
		if (rc == WALRUS_OK)
			rc = srv_commit(s, b);
		srv_stripes_unlock(s, &set);
	}
	if (rc == WALRUS_OK)
		tx_reply(s, results);
	else
		srv_reply_engine_error(s, rc);
	walrus_batch_free(b);
	free(results);
	srv_tx_clear(s);
}
