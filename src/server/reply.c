/*
 * reply.c - what the command files share, below all of them: the error
 * replies, the argument checks, and the write path of SET, DEL, MSET, EXEC
 * and the SET groups (stripe locks, key sets, batch building, commit).
 *
 * Interface: srv_reply_engine_error, srv_arity_error, srv_check_*,
 * srv_set_options, srv_password_ok, srv_note_write, srv_use_space,
 * srv_get_into, srv_txn_get_into, srv_key_exists, srv_stripe*,
 * srv_keyset_*, srv_del_into, srv_mset_into, srv_commit.
 *
 * Notes: the command files (keys.c, tx.c, admin.c) call only this file and
 * the layers below (resp.c, the engine), never each other; commands.c
 * dispatches to them.  Keeping it so keeps the files from calling each
 * other in a ring.
 */
#include "server/srv_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "engine/engine.h"

/* ---------------------------------------------------------------- errors */

void srv_reply_engine_error(srv_session *s, int rc)
{
	const char *m = walrus_errmsg()[0] ? walrus_errmsg() : walrus_strerror(rc);
	if (rc == WALRUS_ERESTART || rc == WALRUS_EPANIC || rc == WALRUS_ESHUTDOWN) {
		s->db_dead = true; /* reopened before the next request */
		resp_add_error(s->out,
		               "ERR the walrus instance restarted (%s); the request may or may not "
		               "have been applied: retry it",
		               walrus_strerror(rc));
		return;
	}
	if (rc == WALRUS_EREADONLY) {
		resp_add_error(s->out, "READONLY You can't write against a read only replica. (%s)",
		               m);
		return;
	}
	resp_add_error(s->out, "ERR %s", m);
}

bool srv_is_standby(void)
{
	return client_attached(NULL) && atomic_load(&engine_sh()->sb.active) != 0;
}

uint32_t srv_stop_requested(void)
{
	return client_attached(NULL) ? atomic_load(&engine_sh()->stop_mode) : 0;
}

void srv_arity_error(srv_session *s, const char *name)
{
	resp_add_error(s->out, "ERR wrong number of arguments for '%s' command", name);
}

/* ---------------------------------------------------------------- argument checks */

bool srv_check_key(srv_session *s, const resp_arg *k)
{
	if (k->len == 0)
		resp_add_error(s->out, "ERR key must not be empty");
	else if (k->len > WALRUS_MAX_KEY)
		resp_add_error(s->out, "ERR key of %zu bytes is over the limit of %u bytes", k->len,
		               WALRUS_MAX_KEY);
	return k->len > 0 && k->len <= WALRUS_MAX_KEY;
}

bool srv_check_value(srv_session *s, const resp_arg *v)
{
	if (v->len <= WALRUS_MAX_VALUE)
		return true;
	resp_add_error(s->out, "ERR value of %zu bytes is over the limit of %u bytes", v->len,
	               WALRUS_MAX_VALUE);
	return false;
}

bool srv_check_keys(srv_session *s, const resp_arg *argv, size_t from, size_t argc, size_t step)
{
	for (size_t i = from; i < argc; i += step)
		if (!srv_check_key(s, &argv[i]) || (step == 2 && !srv_check_value(s, &argv[i + 1])))
			return false;
	return true;
}

/* SET's options; replies the error and returns false when they are wrong. */
bool srv_set_options(srv_session *s, const resp_arg *argv, size_t argc, int *flags)
{
	*flags = 0;
	for (size_t i = 3; i < argc; i++) {
		const resp_arg *o = &argv[i];
		if (resp_arg_is(o, "nx")) {
			*flags |= SET_NX;
		} else if (resp_arg_is(o, "xx")) {
			*flags |= SET_XX;
		} else if (resp_arg_is(o, "get")) {
			*flags |= SET_GET;
		} else if (resp_arg_is(o, "keepttl")) {
			continue; /* no key expires: keeping no TTL is what happens anyway */
		} else if (resp_arg_is(o, "ex") || resp_arg_is(o, "px") || resp_arg_is(o, "exat") ||
		           resp_arg_is(o, "pxat")) {
			resp_add_error(s->out,
			               "ERR walrus keys do not expire: SET option '%.*s' is not "
			               "supported",
			               (int)o->len, o->p);
			return false;
		} else {
			resp_add_error(s->out, "ERR syntax error");
			return false;
		}
	}
	if ((*flags & SET_NX) && (*flags & SET_XX)) {
		resp_add_error(s->out, "ERR syntax error");
		return false;
	}
	return srv_check_key(s, &argv[1]) && srv_check_value(s, &argv[2]);
}

/* Constant-time comparison of the password (no early exit on the first difference). */
bool srv_password_ok(const char *want, const resp_arg *got)
{
	size_t n = strlen(want);
	unsigned char diff = got->len != n;
	for (size_t i = 0; i < got->len; i++)
		diff |= (unsigned char)(got->p[i] ^ want[i % (n ? n : 1)]);
	return diff == 0;
}

/* ---------------------------------------------------------------- writes */

void srv_note_write(srv_session *s)
{
	if (s->cfg->sync)
		s->unsynced = true;
}

/* ---------------------------------------------------------------- key spaces */

int srv_use_space(srv_session *s, bool create)
{
	s->sp = NULL;
	s->sp_missing = false;
	if (s->dbnum == 0)
		return WALRUS_OK;
	char name[24];
	snprintf(name, sizeof(name), "db%d", s->dbnum);
	int rc = walrus_space_open(s->db, name, create ? WALRUS_SPACE_CREATE : 0, &s->sp);
	if (rc == WALRUS_ENOTFOUND && !create) {
		wr_error_clear();
		s->sp_missing = true;
		return WALRUS_OK;
	}
	return rc;
}

int srv_get_into(srv_session *s, const resp_arg *k, void *buf, size_t cap, size_t *vlen)
{
	if (s->sp_missing)
		return WALRUS_ENOTFOUND;
	return walrus_get_into_in(s->db, s->sp, k->p, k->len, buf, cap, vlen);
}

int srv_txn_get_into(srv_session *s, walrus_txn *t, const resp_arg *k, void *buf, size_t cap,
                     size_t *vlen)
{
	if (s->sp_missing)
		return WALRUS_ENOTFOUND;
	return walrus_txn_get_into_in(t, s->sp, k->p, k->len, buf, cap, vlen);
}

/* Whether @k exists: 1, 0, or a negative walrus error.  The key is valid. */
int srv_key_exists(srv_session *s, const resp_arg *k)
{
	size_t vlen;
	int rc = srv_get_into(s, k, NULL, 0, &vlen);
	if (rc == WALRUS_OK || rc == WALRUS_ETOOBIG)
		return 1;
	return rc == WALRUS_ENOTFOUND ? 0 : rc;
}

/* Adds to @b a delete of every key of argv[from..argc) that exists, once; counts them. */
int srv_del_into(srv_session *s, keyset *ks, walrus_batch *b, const resp_arg *argv, size_t from,
                 size_t argc, long long *count)
{
	for (size_t i = from; i < argc; i++) {
		struct kentry *e = NULL;
		int ex = srv_keyset_exists(s, ks, &argv[i], &e);
		if (ex < 0)
			return ex;
		if (ex == 0)
			continue;
		int rc = walrus_batch_delete_in(b, s->sp, argv[i].p, argv[i].len);
		if (rc != WALRUS_OK)
			return rc;
		e->exists = 0;
		(*count)++;
	}
	return WALRUS_OK;
}

/* Adds the pairs of argv[from..argc) to @b, in the request's key space. */
int srv_mset_into(srv_session *s, walrus_batch *b, const resp_arg *argv, size_t from, size_t argc)
{
	for (size_t i = from; i + 1 < argc; i += 2) {
		int rc = walrus_batch_put_in(b, s->sp, argv[i].p, argv[i].len, argv[i + 1].p,
		                             argv[i + 1].len);
		if (rc != WALRUS_OK)
			return rc;
	}
	return WALRUS_OK;
}

int srv_commit(srv_session *s, walrus_batch *b)
{
	if (walrus_batch_count(b) == 0)
		return WALRUS_OK;
	int rc = walrus_batch_commit(s->db, b, WALRUS_ASYNC);
	if (rc == WALRUS_OK)
		srv_note_write(s);
	return rc;
}

/* ---------------------------------------------------------------- stripe locks */

void srv_stripe_add(stripe_set *set, const resp_arg *k)
{
	uint32_t i = crc32c(0, k->p, k->len) % SRV_STRIPES;
	set->bits[i / 64] |= 1ull << (i % 64);
}

static void stripe_lock_one(pthread_mutex_t *m)
{
	int rc = pthread_mutex_lock(m);
	if (rc == EOWNERDEAD) /* a backend died holding it: what it guarded is in walrus */
		(void)pthread_mutex_consistent(m);
}

/* Locks in increasing order: no deadlock between backends. */
void srv_stripes_lock(srv_session *s, const stripe_set *set)
{
	if (s->cfg->sh == NULL)
		return;
	for (unsigned i = 0; i < SRV_STRIPES; i++)
		if (set->bits[i / 64] & (1ull << (i % 64)))
			stripe_lock_one(&s->cfg->sh->stripe[i]);
}

void srv_stripes_unlock(srv_session *s, const stripe_set *set)
{
	if (s->cfg->sh == NULL)
		return;
	for (unsigned i = 0; i < SRV_STRIPES; i++)
		if (set->bits[i / 64] & (1ull << (i % 64)))
			(void)pthread_mutex_unlock(&s->cfg->sh->stripe[i]);
}

/* ---------------------------------------------------------------- key sets */

struct kentry *srv_keyset_find(keyset *ks, const resp_arg *k, bool *found)
{
	if (ks->n * 2 >= ks->cap) {
		keyset bigger = {.cap = ks->cap ? ks->cap * 2 : 64};
		bigger.e = calloc(bigger.cap, sizeof(*bigger.e));
		if (bigger.e == NULL)
			return NULL;
		for (size_t i = 0; i < ks->cap; i++) {
			if (ks->e[i].p == NULL)
				continue;
			bool f;
			resp_arg a = {ks->e[i].p, ks->e[i].len};
			*srv_keyset_find(&bigger, &a, &f) = ks->e[i];
			bigger.n++;
		}
		free(ks->e);
		*ks = bigger;
	}
	size_t i = crc32c(0, k->p, k->len) & (ks->cap - 1);
	while (ks->e[i].p != NULL) {
		if (ks->e[i].len == k->len && memcmp(ks->e[i].p, k->p, k->len) == 0) {
			*found = true;
			return &ks->e[i];
		}
		i = (i + 1) & (ks->cap - 1);
	}
	*found = false;
	return &ks->e[i];
}

/* Whether @k exists, as seen after the writes already noted in @ks; notes it. */
int srv_keyset_exists(srv_session *s, keyset *ks, const resp_arg *k, struct kentry **ent)
{
	bool found;
	struct kentry *e = srv_keyset_find(ks, k, &found);
	if (e == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory");
	if (!found) {
		int rc = srv_key_exists(s, k);
		if (rc < 0)
			return rc;
		*e = (struct kentry){.p = k->p, .len = k->len, .exists = rc};
		ks->n++;
	}
	*ent = e;
	return e->exists;
}
