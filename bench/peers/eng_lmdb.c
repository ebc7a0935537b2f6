/*
 * eng_lmdb.c - the LMDB peer of walrus-peers.
 *
 * The environment is the database directory (data.mdb, lock.mdb), its main
 * unnamed database holds the pairs. Each put is its own write transaction
 * (mdb_txn_begin, mdb_put, mdb_txn_commit); asynchronous workloads open the
 * environment with MDB_NOSYNC (commits are not flushed; the OS writes them
 * back), durable ones with the default flags, where mdb_txn_commit flushes
 * the data pages and then the meta page before it returns. Reads go through
 * one read-only transaction per handle, renewed for each get and reset after
 * it (LMDB's idiom for short read transactions). The fills' batches
 * (--batch) are one write transaction each, its puts between begin and
 * commit. The map is sparse: at least 4 GiB, 1 KiB per key beyond that.
 * LMDB has no cache of its own (its pages are the file's, mapped): the
 * kernel's page cache holds them, so --cache-mb does not apply. With
 * --lmdb-nordahead the environment opens with MDB_NORDAHEAD: LMDB then
 * advises the kernel (madvise MADV_RANDOM) not to read around a page fault
 * of its map, which otherwise reads up to the device's read_ahead_kb per
 * fault, most of it not wanted when the database is larger than memory.
 *
 * A transaction (txn_transfer) is one write transaction: mdb_txn_begin
 * waits for LMDB's single writer lock, so transactions run one after the
 * other and never conflict; its reads are mdb_get inside it, and its
 * commit is durable or not as the environment's puts are.
 *
 * An environment may be used only by the process that opened it: a handle is
 * never carried across fork(), each client process opens its own.
 */
#include "peers.h"

#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LM_MIN_MAP ((size_t)4 << 30)

static bool lm_nordahead; /* peers_lmdb_nordahead */

typedef struct lm_handle {
	MDB_env *env;
	MDB_dbi dbi;
	MDB_txn *rtxn; /* reset between gets */
	MDB_txn *wtxn; /* the open batch's, or NULL */
} lm_handle;

static _Noreturn void lm_fail(const char *op, int rc)
{
	peers_fatal("lmdb", op, "%s (code %d)", mdb_strerror(rc), rc);
}

void peers_lmdb_nordahead(bool on)
{
	lm_nordahead = on;
}

static const char *lm_version(void)
{
	static char buf[32];
	int major, minor, patch;

	mdb_version(&major, &minor, &patch);
	snprintf(buf, sizeof(buf), "%d.%d.%d", major, minor, patch);
	return buf;
}

static void *lm_open(const peers_open_args *a)
{
	lm_handle *l = peers_xmalloc("lmdb handle", sizeof(*l));
	size_t map = LM_MIN_MAP;
	MDB_txn *txn;
	int rc;

	if (a->nkeys > map / 1024)
		map = (size_t)a->nkeys * 1024;
	rc = mdb_env_create(&l->env);
	if (rc != 0)
		lm_fail("mdb_env_create", rc);
	rc = mdb_env_set_mapsize(l->env, map);
	if (rc != 0)
		lm_fail("mdb_env_set_mapsize", rc);
	rc = mdb_env_open(l->env, a->dir,
	                  (a->sync ? 0 : MDB_NOSYNC) | (lm_nordahead ? MDB_NORDAHEAD : 0), 0644);
	if (rc != 0)
		peers_fatal("lmdb", "mdb_env_open", "\"%s\": %s (code %d)", a->dir,
		            mdb_strerror(rc), rc);

	rc = mdb_txn_begin(l->env, NULL, MDB_RDONLY, &txn);
	if (rc != 0)
		lm_fail("mdb_txn_begin", rc);
	rc = mdb_dbi_open(txn, NULL, 0, &l->dbi);
	if (rc != 0)
		lm_fail("mdb_dbi_open", rc);
	rc = mdb_txn_commit(txn);
	if (rc != 0)
		lm_fail("mdb_txn_commit", rc);

	rc = mdb_txn_begin(l->env, NULL, MDB_RDONLY, &l->rtxn);
	if (rc != 0)
		lm_fail("mdb_txn_begin(MDB_RDONLY)", rc);
	mdb_txn_reset(l->rtxn);
	l->wtxn = NULL;
	return l;
}

static void lm_close(void *h)
{
	lm_handle *l = h;

	mdb_txn_abort(l->rtxn);
	mdb_env_close(l->env);
	free(l);
}

static void lm_put(void *h, const char *key, size_t klen, const char *val, size_t vlen)
{
	lm_handle *l = h;
	MDB_val k = {.mv_size = klen, .mv_data = (void *)key};
	MDB_val v = {.mv_size = vlen, .mv_data = (void *)val};
	MDB_txn *txn = l->wtxn;
	int rc;

	if (txn == NULL) {
		rc = mdb_txn_begin(l->env, NULL, 0, &txn);
		if (rc != 0)
			lm_fail("mdb_txn_begin", rc);
	}
	/* Flags 0: an existing key's value is replaced (no MDB_NOOVERWRITE). */
	rc = mdb_put(txn, l->dbi, &k, &v, 0);
	if (rc != 0) {
		mdb_txn_abort(txn);
		l->wtxn = NULL;
		lm_fail("mdb_put", rc);
	}
	if (l->wtxn != NULL)
		return;
	rc = mdb_txn_commit(txn);
	if (rc != 0)
		lm_fail("mdb_txn_commit", rc);
}

static void lm_batch_begin(void *h)
{
	lm_handle *l = h;
	int rc = mdb_txn_begin(l->env, NULL, 0, &l->wtxn);

	if (rc != 0)
		lm_fail("mdb_txn_begin", rc);
}

static void lm_batch_commit(void *h)
{
	lm_handle *l = h;
	int rc = mdb_txn_commit(l->wtxn);

	l->wtxn = NULL; /* freed by the commit, whatever its result */
	if (rc != 0)
		lm_fail("mdb_txn_commit", rc);
}

static bool lm_get(void *h, const char *key, size_t klen, char *buf, size_t cap, size_t *vlen)
{
	lm_handle *l = h;
	MDB_val k = {.mv_size = klen, .mv_data = (void *)key};
	MDB_val v;
	int rc;

	rc = mdb_txn_renew(l->rtxn);
	if (rc != 0)
		lm_fail("mdb_txn_renew", rc);
	rc = mdb_get(l->rtxn, l->dbi, &k, &v);
	if (rc == MDB_NOTFOUND) {
		mdb_txn_reset(l->rtxn);
		return false;
	}
	if (rc != 0)
		lm_fail("mdb_get", rc);
	*vlen = v.mv_size;
	memcpy(buf, v.mv_data, v.mv_size < cap ? v.mv_size : cap);
	mdb_txn_reset(l->rtxn);
	return true;
}

static void lm_scan(void *h, peers_scan_cb cb, void *arg)
{
	lm_handle *l = h;
	MDB_cursor *cur;
	MDB_val k, v;
	int rc;

	rc = mdb_txn_renew(l->rtxn);
	if (rc != 0)
		lm_fail("mdb_txn_renew", rc);
	rc = mdb_cursor_open(l->rtxn, l->dbi, &cur);
	if (rc != 0)
		lm_fail("mdb_cursor_open", rc);
	for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
		cb(arg, k.mv_data, k.mv_size, v.mv_data, v.mv_size);
	if (rc != MDB_NOTFOUND)
		lm_fail("mdb_cursor_get", rc);
	mdb_cursor_close(cur);
	mdb_txn_reset(l->rtxn);
}

/* Up to @max pairs from the first key >= @start (MDB_SET_RANGE). */
static void lm_range(void *h, const char *start, size_t slen, uint64_t max, peers_scan_cb cb,
                     void *arg)
{
	lm_handle *l = h;
	MDB_cursor *cur;
	MDB_val k = {.mv_size = slen, .mv_data = (void *)start}, v;
	int rc;

	rc = mdb_txn_renew(l->rtxn);
	if (rc != 0)
		lm_fail("mdb_txn_renew", rc);
	rc = mdb_cursor_open(l->rtxn, l->dbi, &cur);
	if (rc != 0)
		lm_fail("mdb_cursor_open", rc);
	rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
	for (uint64_t n = 0; rc == 0 && n < max; n++) {
		cb(arg, k.mv_data, k.mv_size, v.mv_data, v.mv_size);
		if (n + 1 < max)
			rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	}
	if (rc != 0 && rc != MDB_NOTFOUND)
		lm_fail("mdb_cursor_get", rc);
	mdb_cursor_close(cur);
	mdb_txn_reset(l->rtxn);
}

static void *lm_txn_new(void *h)
{
	return h; /* a handle serves one client process: its txn is the handle's */
}

static void lm_txn_free(void *t)
{
	lm_handle *l = t;

	if (l->wtxn != NULL) {
		mdb_txn_abort(l->wtxn);
		l->wtxn = NULL;
	}
}

static peers_txn_rc lm_txn_begin(void *t)
{
	lm_handle *l = t;
	int rc;

	lm_txn_free(l);
	rc = mdb_txn_begin(l->env, NULL, 0, &l->wtxn);
	if (rc != 0) {
		l->wtxn = NULL;
		lm_fail("mdb_txn_begin", rc);
	}
	return PEERS_TXN_OK;
}

static peers_txn_rc lm_txn_get(void *t, const char *key, size_t klen, char *buf, size_t cap,
                               size_t *vlen)
{
	lm_handle *l = t;
	MDB_val k = {.mv_size = klen, .mv_data = (void *)key};
	MDB_val v;
	int rc = mdb_get(l->wtxn, l->dbi, &k, &v);

	if (rc == MDB_NOTFOUND)
		return PEERS_TXN_ABSENT;
	if (rc != 0)
		lm_fail("mdb_get", rc);
	*vlen = v.mv_size;
	memcpy(buf, v.mv_data, v.mv_size < cap ? v.mv_size : cap);
	return PEERS_TXN_OK;
}

static peers_txn_rc lm_txn_put(void *t, const char *key, size_t klen, const char *val, size_t vlen)
{
	lm_handle *l = t;
	MDB_val k = {.mv_size = klen, .mv_data = (void *)key};
	MDB_val v = {.mv_size = vlen, .mv_data = (void *)val};
	int rc = mdb_put(l->wtxn, l->dbi, &k, &v, 0);

	if (rc != 0)
		lm_fail("mdb_put", rc);
	return PEERS_TXN_OK;
}

static peers_txn_rc lm_txn_commit(void *t)
{
	lm_handle *l = t;
	int rc = mdb_txn_commit(l->wtxn);

	l->wtxn = NULL; /* freed by the commit, whatever its result */
	if (rc != 0)
		lm_fail("mdb_txn_commit", rc);
	return PEERS_TXN_OK;
}

const peers_engine peers_lmdb = {
    .name = "lmdb",
    .threads = false,
    .version = lm_version,
    .open = lm_open,
    .close = lm_close,
    .put = lm_put,
    .get = lm_get,
    .scan = lm_scan,
    .range = lm_range,
    .batch_begin = lm_batch_begin,
    .batch_commit = lm_batch_commit,
    .txn_new = lm_txn_new,
    .txn_free = lm_txn_free,
    .txn_begin = lm_txn_begin,
    .txn_get = lm_txn_get,
    .txn_put = lm_txn_put,
    .txn_commit = lm_txn_commit,
};
