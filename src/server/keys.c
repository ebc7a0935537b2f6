/*
 * keys.c - the key-value commands: GET SET DEL EXISTS MGET MSET SCAN.  What
 * they share with EXEC (tx.c) is in reply.c: argument checks, the stripe
 * locks, key sets, batch building.
 *
 * Notes: a write is applied WALRUS_ASYNC under the stripe locks of its
 * keys (struct srv_shared) and srv_note_write() records that a barrier is
 * owed before its reply leaves (commands.c).  The conditional writes
 * (SET NX/XX/GET), DEL's count, MSET and EXEC read and write under the
 * same locks, so they are atomic against every other client of the server
 * (not against other processes that open the directory themselves).
 *
 * SCAN's cursor is "0" to start (and when done), else an opaque decimal
 * token naming the next key to return (see the cursor table below): it
 * stays valid whatever is written meanwhile, and a key present for the
 * whole scan is returned exactly once, in key order.
 */
#include "server/srv_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

/* Reads the value of the (valid) key @k into s->val. */
static int get_value(srv_session *s, const resp_arg *k, size_t *vlen)
{
	for (int tries = 0;; tries++) {
		int rc = srv_get_into(s, k, s->val, s->val_cap, vlen);
		if (rc != WALRUS_ETOOBIG || tries == 3)
			return rc;
		char *v = realloc(s->val, *vlen);
		if (v == NULL)
			return wr_error(WALRUS_ENOMEM, "out of memory");
		s->val = v;
		s->val_cap = *vlen;
	}
}

/* ---------------------------------------------------------------- GET SET DEL EXISTS MGET MSET */

void srv_cmd_get(srv_session *s, const resp_arg *argv, size_t argc)
{
	size_t vlen;
	(void)argc;
	if (!srv_check_key(s, &argv[1]))
		return;
	int rc = get_value(s, &argv[1], &vlen);
	if (rc == WALRUS_OK)
		resp_add_bulk(s->out, s->val, vlen);
	else if (rc == WALRUS_ENOTFOUND)
		resp_add_null(s->out, s->proto);
	else
		srv_reply_engine_error(s, rc);
}

/* SET under the key's stripe lock.  Returns the reply to give (0 +OK, 1 null, 2 old value). */
static int set_locked(srv_session *s, const resp_arg *argv, int flags, size_t *oldlen, int *rc)
{
	int exists = 0;
	*rc = WALRUS_OK;
	if (flags & SET_GET) {
		*rc = get_value(s, &argv[1], oldlen);
		exists = *rc == WALRUS_OK;
		if (*rc == WALRUS_ENOTFOUND)
			*rc = WALRUS_OK;
	} else if (flags & (SET_NX | SET_XX)) {
		exists = srv_key_exists(s, &argv[1]);
		if (exists < 0)
			*rc = exists;
	}
	if (*rc != WALRUS_OK)
		return 0;
	int answer = (flags & SET_GET) ? (exists ? 2 : 1) : 0;
	if (((flags & SET_NX) && exists) || ((flags & SET_XX) && !exists))
		return (flags & SET_GET) ? answer : 1;
	*rc = walrus_put_in(s->db, s->sp, argv[1].p, argv[1].len, argv[2].p, argv[2].len,
	                    WALRUS_ASYNC);
	if (*rc == WALRUS_OK)
		srv_note_write(s);
	return answer;
}

void srv_cmd_set(srv_session *s, const resp_arg *argv, size_t argc)
{
	int flags, rc;
	size_t oldlen = 0;
	stripe_set set = {{0}};
	if (!srv_set_options(s, argv, argc, &flags))
		return;
	srv_stripe_add(&set, &argv[1]);
	srv_stripes_lock(s, &set);
	int answer = set_locked(s, argv, flags, &oldlen, &rc);
	srv_stripes_unlock(s, &set);
	if (rc != WALRUS_OK)
		srv_reply_engine_error(s, rc);
	else if (answer == 0)
		resp_add_simple(s->out, "OK");
	else if (answer == 1)
		resp_add_null(s->out, s->proto);
	else
		resp_add_bulk(s->out, s->val, oldlen);
}

void srv_cmd_del(srv_session *s, const resp_arg *argv, size_t argc)
{
	stripe_set set = {{0}};
	keyset ks = {0};
	long long count = 0;
	if (!srv_check_keys(s, argv, 1, argc, 1))
		return;
	walrus_batch *b = walrus_batch_new();
	if (b == NULL) {
		srv_reply_engine_error(s, wr_error(WALRUS_ENOMEM, "out of memory"));
		return;
	}
	for (size_t i = 1; i < argc; i++)
		srv_stripe_add(&set, &argv[i]);
	srv_stripes_lock(s, &set);
	int rc = srv_del_into(s, &ks, b, argv, 1, argc, &count);
	if (rc == WALRUS_OK)
		rc = srv_commit(s, b);
	srv_stripes_unlock(s, &set);
	walrus_batch_free(b);
	free(ks.e);
	if (rc != WALRUS_OK)
		srv_reply_engine_error(s, rc);
	else
		resp_add_int(s->out, count);
}

/* Several keys read under their stripe locks: a consistent view against the server's writes. */
static void lock_keys(srv_session *s, const resp_arg *argv, size_t argc, stripe_set *set)
{
	memset(set, 0, sizeof(*set));
	if (argc <= 2)
		return; /* one key: a single read is atomic by itself */
	for (size_t i = 1; i < argc; i++)
		srv_stripe_add(set, &argv[i]);
	srv_stripes_lock(s, set);
}

void srv_cmd_exists(srv_session *s, const resp_arg *argv, size_t argc)
{
	long long n = 0;
	stripe_set set;
	int ex = 0;
	if (!srv_check_keys(s, argv, 1, argc, 1))
		return;
	lock_keys(s, argv, argc, &set);
	for (size_t i = 1; ex >= 0 && i < argc; i++) {
		ex = srv_key_exists(s, &argv[i]);
		n += ex > 0;
	}
	srv_stripes_unlock(s, &set);
	if (ex < 0)
		srv_reply_engine_error(s, ex);
	else
		resp_add_int(s->out, n);
}

void srv_cmd_mget(srv_session *s, const resp_arg *argv, size_t argc)
{
	size_t start = s->out->len;
	stripe_set set;
	int rc = WALRUS_OK;
	lock_keys(s, argv, argc, &set);
	resp_add_array(s->out, argc - 1);
	for (size_t i = 1; i < argc; i++) {
		size_t vlen;
		rc = argv[i].len == 0 || argv[i].len > WALRUS_MAX_KEY
		         ? WALRUS_ENOTFOUND /* as Redis: no such key, not an error */
		         : get_value(s, &argv[i], &vlen);
		if (rc == WALRUS_OK)
			resp_add_bulk(s->out, s->val, vlen);
		else if (rc == WALRUS_ENOTFOUND)
			resp_add_null(s->out, s->proto);
		else
			break;
	}
	srv_stripes_unlock(s, &set);
	if (rc != WALRUS_OK && rc != WALRUS_ENOTFOUND) {
		s->out->len = start; /* one reply: the error instead of the array */
		srv_reply_engine_error(s, rc);
	}
}

void srv_cmd_mset(srv_session *s, const resp_arg *argv, size_t argc)
{
	stripe_set set = {{0}};
	if (argc % 2 == 0) {
		srv_arity_error(s, "mset");
		return;
	}
	if (!srv_check_keys(s, argv, 1, argc, 2))
		return;
	walrus_batch *b = walrus_batch_new();
	int rc = b == NULL ? wr_error(WALRUS_ENOMEM, "out of memory")
	                   : srv_mset_into(s, b, argv, 1, argc);
	for (size_t i = 1; i < argc; i += 2)
		srv_stripe_add(&set, &argv[i]);
	if (rc == WALRUS_OK) {
		srv_stripes_lock(s, &set);
		rc = srv_commit(s, b);
		srv_stripes_unlock(s, &set);
	}
	walrus_batch_free(b);
	if (rc != WALRUS_OK)
		srv_reply_engine_error(s, rc);
	else
		resp_add_simple(s->out, "OK");
}

/* ---------------------------------------------------------------- SCAN */

/*
 * Cursors.  Clients (redis-cli, redis-py, ...) parse a SCAN cursor as an
 * unsigned decimal number, so a cursor is an opaque token: the id of a slot
 * of the server's shared cursor table that holds the next key to return.
 * Any backend of the server takes it; it expires when SRV_CURSORS newer
 * cursors have been handed out.
 */
static pthread_mutex_t *cursor_lock(srv_session *s)
{
	pthread_mutex_t *m = &s->cfg->sh->cursor_lock;
	if (pthread_mutex_lock(m) == EOWNERDEAD)
		(void)pthread_mutex_consistent(m);
	return m;
}

/* Saves @key; returns its cursor (0 when there is no table). */
static uint64_t cursor_save(srv_session *s, const void *key, size_t klen)
{
	if (s->cfg->sh == NULL)
		return 0;
	pthread_mutex_t *m = cursor_lock(s);
	uint64_t id = s->cfg->sh->cursor_next++;
	srv_cursor *c = &s->cfg->sh->cursors[id % SRV_CURSORS];
	c->id = id;
	c->len = (uint32_t)klen;
	memcpy(c->key, key, klen);
	(void)pthread_mutex_unlock(m);
	return id;
}

/* The key where cursor @a resumes ("0": from the start). */
static bool cursor_load(srv_session *s, const resp_arg *a, char *key, size_t *klen)
{
	long long id;
	*klen = 0;
	if (!resp_arg_ll(a, &id) || id < 0)
		return false;
	if (id == 0)
		return true;
	if (s->cfg->sh == NULL)
		return false;
	pthread_mutex_t *m = cursor_lock(s);
	const srv_cursor *c = &s->cfg->sh->cursors[(uint64_t)id % SRV_CURSORS];
	bool ok = c->id == (uint64_t)id;
	if (ok) {
		*klen = c->len;
		memcpy(key, c->key, c->len);
	}
	(void)pthread_mutex_unlock(m);
	return ok;
}

typedef struct scan_args {
	const resp_arg *match; /* NULL: every key */
	long long count;
	char lo[WALRUS_MAX_KEY], hi[WALRUS_MAX_KEY];
	size_t lolen, hilen; /* hilen 0: no upper bound */
} scan_args;

static bool scan_options(srv_session *s, const resp_arg *argv, size_t argc, scan_args *a)
{
	a->match = NULL;
	a->count = 10;
	for (size_t i = 2; i < argc; i += 2) {
		if (i + 1 >= argc) {
			resp_add_error(s->out, "ERR syntax error");
			return false;
		}
		if (resp_arg_is(&argv[i], "match")) {
			a->match = &argv[i + 1];
		} else if (resp_arg_is(&argv[i], "count")) {
			if (!resp_arg_ll(&argv[i + 1], &a->count) || a->count < 1) {
				resp_add_error(s->out, "ERR syntax error");
				return false;
			}
		} else if (resp_arg_is(&argv[i], "type")) {
			if (!resp_arg_is(&argv[i + 1], "string"))
				a->count =
				    0; /* every walrus value is a string: nothing of another type */
		} else {
			resp_add_error(s->out, "ERR syntax error");
			return false;
		}
	}
	return true;
}

/* Narrows [lo, hi) to the keys that start with the pattern's literal prefix. */
static void scan_range(scan_args *a)
{
	a->hilen = 0;
	if (a->match == NULL)
		return;
	size_t n = 0;
	while (n < a->match->len && n < WALRUS_MAX_KEY && strchr("*?[\\", a->match->p[n]) == NULL)
		n++;
	if (n == 0)
		return;
	const char *pre = a->match->p;
	int cmp = memcmp(a->lo, pre, WR_MIN(a->lolen, n));
	if (cmp < 0 || (cmp == 0 && a->lolen < n)) {
		memcpy(a->lo, pre, n); /* the cursor is before the prefix: start at it */
		a->lolen = n;
	}
	/* hi = the prefix with its last byte below 0xff incremented, cut after it */
	memcpy(a->hi, pre, n);
	while (n > 0 && (unsigned char)a->hi[n - 1] == 0xff)
		n--;
	if (n > 0)
		a->hi[n - 1] = (char)((unsigned char)a->hi[n - 1] + 1);
	a->hilen = n;
}

/* Visits up to a->count keys; appends the matching ones to @keys; *more when keys remain. */
static int scan_visit(srv_session *s, scan_args *a, resp_buf *keys, size_t *nkeys, resp_buf *cur)
{
	walrus_iter *it = NULL;
	if (s->sp_missing) { /* a database never written: nothing to visit */
		resp_add_bulk(cur, "0", 1);
		return WALRUS_OK;
	}
	int rc = walrus_iter_open_in(s->db, s->sp, a->lolen ? a->lo : NULL, a->lolen,
	                             a->hilen ? a->hi : NULL, a->hilen, &it);
	for (long long seen = 0; rc == WALRUS_OK && walrus_iter_valid(it); seen++) {
		const void *k;
		size_t kl;
		walrus_iter_key(it, &k, &kl);
		if (seen == a->count) {
			char id[24];
			snprintf(id, sizeof(id), "%llu", (unsigned long long)cursor_save(s, k, kl));
			resp_add_cstr(cur, id);
			break;
		}
		if (a->match == NULL || resp_glob_match(a->match->p, a->match->len, k, kl, false)) {
			resp_add_bulk(keys, k, kl);
			(*nkeys)++;
		}
		rc = walrus_iter_next(it);
	}
	walrus_iter_close(it);
	if (rc == WALRUS_OK && cur->len == 0)
		resp_add_bulk(cur, "0", 1);
	return rc;
}

void srv_cmd_scan(srv_session *s, const resp_arg *argv, size_t argc)
{
	scan_args a;
	resp_buf keys = {0}, cur = {0};
	size_t nkeys = 0;
	if (!cursor_load(s, &argv[1], a.lo, &a.lolen)) {
		resp_add_error(s->out,
		               "ERR invalid or expired cursor: start the scan again from 0");
		return;
	}
	if (!scan_options(s, argv, argc, &a))
		return;
	scan_range(&a);
	int rc = a.count == 0 ? (resp_add_bulk(&cur, "0", 1), WALRUS_OK)
	                      : scan_visit(s, &a, &keys, &nkeys, &cur);
	if (rc == WALRUS_OK && (keys.oom || cur.oom))
		rc = wr_error(WALRUS_ENOMEM, "out of memory");
	if (rc != WALRUS_OK) {
		srv_reply_engine_error(s, rc);
	} else {
		resp_add_array(s->out, 2);
		resp_add_raw(s->out, cur.p, cur.len);
		resp_add_array(s->out, nkeys);
		resp_add_raw(s->out, keys.p, keys.len);
	}
	resp_buf_free(&keys);
	resp_buf_free(&cur);
}
