/*
 * eng_rocksdb.c - the RocksDB peer of walrus-peers, through the C API.
 *
 * The database is the directory itself. Options are RocksDB's defaults but
 * for: create_if_missing, no compression (the other engines, and walrus,
 * store values as they are), and a 256 MiB LRU block cache (--cache-mb) so
 * the read workloads run from memory like the other peers. It has no
 * batches (batch_begin NULL): with --batch its fills still write one put at
 * a time, as issue 18's definition has it ("RocksDB one write per op": its
 * memtable makes a single put cheap already). The WAL is always on;
 * asynchronous workloads write with WriteOptions.sync = false (the WAL is
 * written, not fsynced), durable ones with sync = true (each Put fsyncs the
 * WAL; concurrent writers share a group commit).
 *
 * RocksDB locks its directory (the LOCK file): a second process cannot open
 * it, so its multi-client workloads run as threads sharing one handle, which
 * the C API allows for put, get and iterators (a scan from seek_to_first, a
 * range from seek).
 *
 * Three engines share this file. "rocksdb" is a plain DB and has no
 * transactions (txn_transfer skips it). The other two open the same
 * database, with the same options, as one of RocksDB's transaction DBs,
 * and run every workload (their puts, gets and scans go through that DB
 * outside any transaction):
 *   rocksdb-otxn  OptimisticTransactionDB: a transaction's reads are
 *                 get_for_update, which records each key for validation;
 *                 its commit fails with Busy when a key it read or wrote
 *                 was committed by another after the read (or TryAgain
 *                 when the memtable no longer holds enough history to
 *                 tell), and is run again.
 *   rocksdb-ptxn  TransactionDB (pessimistic): get_for_update takes the
 *                 key's exclusive lock, held to the commit; a lock wait
 *                 that times out (TimedOut, after the default 1 s) or
 *                 would deadlock (Busy: deadlock detection is on) rolls
 *                 the transaction back, to be run again.
 * Each client thread has its own rocksdb_transaction_t, reused from one
 * transaction to the next (the C API's old_txn), and commits with the
 * handle's write options: sync = true for the durable rows.
 */
#include "peers.h"

#include <rocksdb/c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef PEERS_ROCKSDB_VERSION
#define PEERS_ROCKSDB_VERSION "unknown"
#endif

#define RK_BLOCK_CACHE ((size_t)PEERS_CACHE_MB << 20)

typedef enum rk_kind { RK_PLAIN, RK_OPTIMISTIC, RK_PESSIMISTIC } rk_kind;

typedef struct rk_handle {
	rk_kind kind;
	rocksdb_t *db; /* RK_PLAIN's, or RK_OPTIMISTIC's base DB */
	rocksdb_optimistictransactiondb_t *odb;
	rocksdb_transactiondb_t *tdb;
	rocksdb_optimistictransaction_options_t *otxn_opts;
	rocksdb_transactiondb_options_t *tdb_opts;
	rocksdb_transaction_options_t *txn_opts;
	rocksdb_options_t *opts;
	rocksdb_cache_t *cache;
	rocksdb_block_based_table_options_t *table;
	rocksdb_writeoptions_t *wopts;
	rocksdb_readoptions_t *ropts;
} rk_handle;

/* Report and end on a RocksDB error string (set through errptr). */
static void rk_check(const char *op, char *err)
{
	if (err != NULL) {
		char msg[512];

		snprintf(msg, sizeof(msg), "%s", err);
		rocksdb_free(err);
		peers_fatal("rocksdb", op, "%s", msg);
	}
}

static void *rk_nonnull(void *p, const char *op)
{
	if (p == NULL)
		peers_fatal("rocksdb", op, "returned NULL");
	return p;
}

static const char *rk_version(void)
{
	return PEERS_ROCKSDB_VERSION;
}

static void *rk_open(const peers_open_args *a, rk_kind kind)
{
	rk_handle *r = peers_xmalloc("rocksdb handle", sizeof(*r));
	char *err = NULL;

	*r = (rk_handle){.kind = kind};

	r->opts = rk_nonnull(rocksdb_options_create(), "rocksdb_options_create");
	rocksdb_options_set_create_if_missing(r->opts, 1);
	rocksdb_options_set_compression(r->opts, rocksdb_no_compression);
	r->cache = rk_nonnull(
	    rocksdb_cache_create_lru(a->cache_mb ? (size_t)a->cache_mb << 20 : RK_BLOCK_CACHE),
	    "rocksdb_cache_create_lru");
	r->table =
	    rk_nonnull(rocksdb_block_based_options_create(), "rocksdb_block_based_options_create");
	rocksdb_block_based_options_set_block_cache(r->table, r->cache);
	rocksdb_options_set_block_based_table_factory(r->opts, r->table);
	r->wopts = rk_nonnull(rocksdb_writeoptions_create(), "rocksdb_writeoptions_create");
	rocksdb_writeoptions_set_sync(r->wopts, a->sync ? 1 : 0);
	rocksdb_writeoptions_disable_WAL(r->wopts, 0);
	r->ropts = rk_nonnull(rocksdb_readoptions_create(), "rocksdb_readoptions_create");

	switch (kind) {
	case RK_PLAIN:
		r->db = rocksdb_open(r->opts, a->dir, &err);
		rk_check("rocksdb_open", err);
		rk_nonnull(r->db, "rocksdb_open");
		break;
	case RK_OPTIMISTIC:
		r->otxn_opts = rk_nonnull(rocksdb_optimistictransaction_options_create(),
		                          "rocksdb_optimistictransaction_options_create");
		r->odb = rocksdb_optimistictransactiondb_open(r->opts, a->dir, &err);
		rk_check("rocksdb_optimistictransactiondb_open", err);
		rk_nonnull(r->odb, "rocksdb_optimistictransactiondb_open");
		r->db = rk_nonnull(rocksdb_optimistictransactiondb_get_base_db(r->odb),
		                   "rocksdb_optimistictransactiondb_get_base_db");
		break;
	case RK_PESSIMISTIC:
		r->tdb_opts = rk_nonnull(rocksdb_transactiondb_options_create(),
		                         "rocksdb_transactiondb_options_create");
		r->txn_opts = rk_nonnull(rocksdb_transaction_options_create(),
		                         "rocksdb_transaction_options_create");
		/* A deadlock is reported at once rather than after the lock timeout. */
		rocksdb_transaction_options_set_deadlock_detect(r->txn_opts, 1);
		r->tdb = rocksdb_transactiondb_open(r->opts, r->tdb_opts, a->dir, &err);
		rk_check("rocksdb_transactiondb_open", err);
		rk_nonnull(r->tdb, "rocksdb_transactiondb_open");
		break;
	}
	return r;
}

static void *rk_open_plain(const peers_open_args *a)
{
	return rk_open(a, RK_PLAIN);
}

static void *rk_open_otxn(const peers_open_args *a)
{
	return rk_open(a, RK_OPTIMISTIC);
}

static void *rk_open_ptxn(const peers_open_args *a)
{
	return rk_open(a, RK_PESSIMISTIC);
}

static void rk_close(void *h)
{
	rk_handle *r = h;

	switch (r->kind) {
	case RK_PLAIN:
		rocksdb_close(r->db);
		break;
	case RK_OPTIMISTIC:
		rocksdb_optimistictransactiondb_close_base_db(r->db);
		rocksdb_optimistictransactiondb_close(r->odb);
		rocksdb_optimistictransaction_options_destroy(r->otxn_opts);
		break;
	case RK_PESSIMISTIC:
		rocksdb_transactiondb_close(r->tdb);
		rocksdb_transaction_options_destroy(r->txn_opts);
		rocksdb_transactiondb_options_destroy(r->tdb_opts);
		break;
	}
	rocksdb_readoptions_destroy(r->ropts);
	rocksdb_writeoptions_destroy(r->wopts);
	rocksdb_options_destroy(r->opts);
	rocksdb_block_based_options_destroy(r->table);
	rocksdb_cache_destroy(r->cache);
	free(r);
}

static void rk_put(void *h, const char *key, size_t klen, const char *val, size_t vlen)
{
	rk_handle *r = h;
	char *err = NULL;

	/* A put replaces an existing key's value. The pessimistic DB's own put
	 * takes the key's lock, as its transactions expect. */
	if (r->kind == RK_PESSIMISTIC) {
		rocksdb_transactiondb_put(r->tdb, r->wopts, key, klen, val, vlen, &err);
		rk_check("rocksdb_transactiondb_put", err);
		return;
	}
	rocksdb_put(r->db, r->wopts, key, klen, val, vlen, &err);
	rk_check("rocksdb_put", err);
}

/* Copies a pinned value (as much as @cap holds) and frees the slice. */
static bool rk_pinned_value(rocksdb_pinnableslice_t *ps, char *buf, size_t cap, size_t *vlen)
{
	const char *v = rocksdb_pinnableslice_value(ps, vlen);

	if (v == NULL && *vlen > 0)
		peers_fatal("rocksdb", "rocksdb_pinnableslice_value", "returned NULL");
	if (*vlen > 0)
		memcpy(buf, v, *vlen < cap ? *vlen : cap);
	rocksdb_pinnableslice_destroy(ps);
	return true;
}

static bool rk_get(void *h, const char *key, size_t klen, char *buf, size_t cap, size_t *vlen)
{
	rk_handle *r = h;
	char *err = NULL;
	rocksdb_pinnableslice_t *ps =
	    r->kind == RK_PESSIMISTIC
	        ? rocksdb_transactiondb_get_pinned(r->tdb, r->ropts, key, klen, &err)
	        : rocksdb_get_pinned(r->db, r->ropts, key, klen, &err);

	rk_check(r->kind == RK_PESSIMISTIC ? "rocksdb_transactiondb_get_pinned"
	                                   : "rocksdb_get_pinned",
	         err);
	if (ps == NULL)
		return false;
	return rk_pinned_value(ps, buf, cap, vlen);
}

/* Up to @max pairs from the first key >= @start (NULL: the first key). */
static void rk_iterate(rk_handle *r, const char *start, size_t slen, uint64_t max, peers_scan_cb cb,
                       void *arg)
{
	rocksdb_iterator_t *it = rk_nonnull(
	    r->kind == RK_PESSIMISTIC ? rocksdb_transactiondb_create_iterator(r->tdb, r->ropts)
	                              : rocksdb_create_iterator(r->db, r->ropts),
	    "rocksdb_create_iterator");
	char *err = NULL;

	if (start == NULL)
		rocksdb_iter_seek_to_first(it);
	else
		rocksdb_iter_seek(it, start, slen);
	for (uint64_t n = 0; n < max && rocksdb_iter_valid(it); n++) {
		size_t kn, vn;
		const char *k = rocksdb_iter_key(it, &kn);
		const char *v = rocksdb_iter_value(it, &vn);

		cb(arg, k, kn, v, vn);
		if (n + 1 < max)
			rocksdb_iter_next(it);
	}
	rocksdb_iter_get_error(it, &err);
	rk_check("rocksdb_iter_get_error", err);
	rocksdb_iter_destroy(it);
}

static void rk_scan(void *h, peers_scan_cb cb, void *arg)
{
	rk_iterate(h, NULL, 0, UINT64_MAX, cb, arg);
}

static void rk_range(void *h, const char *start, size_t slen, uint64_t max, peers_scan_cb cb,
                     void *arg)
{
	rk_iterate(h, start, slen, max, cb, arg);
}

/* ---------------------------------------------------------------- transactions */

/* A client thread's transactions on the shared handle. */
typedef struct rk_txn {
	rk_handle *r;
	rocksdb_transaction_t *txn; /* kept from one transaction to the next */
} rk_txn;

/*
 * Is @err (set by a transaction's call) a conflict to run the transaction
 * again for? Busy (a validation failure, or a deadlock), TimedOut (a lock
 * wait) and TryAgain (too little memtable history to validate) are;
 * anything else is fatal. RocksDB's C API hands back only the status
 * message, whose prefix names the status code. Rolls the transaction back.
 */
static peers_txn_rc rk_txn_failed(rk_txn *t, const char *op, char *err)
{
	static const char *const retry[] = {"Resource busy", "Operation timed out",
	                                    "Operation failed. Try again."};
	bool conflict = false;
	char *rerr = NULL;

	for (size_t i = 0; i < sizeof(retry) / sizeof(retry[0]); i++)
		conflict = conflict || strncmp(err, retry[i], strlen(retry[i])) == 0;
	if (!conflict)
		rk_check(op, err);
	rocksdb_free(err);
	rocksdb_transaction_rollback(t->txn, &rerr);
	rk_check("rocksdb_transaction_rollback", rerr);
	return PEERS_TXN_CONFLICT;
}

static void *rk_txn_new(void *h)
{
	rk_txn *t = peers_xmalloc("rocksdb transaction", sizeof(*t));

	t->r = h;
	t->txn = NULL;
	return t;
}

static void rk_txn_free(void *p)
{
	rk_txn *t = p;

	/* Destroying a transaction rolls back what it has not committed. */
	if (t->txn != NULL)
		rocksdb_transaction_destroy(t->txn);
	free(t);
}

static peers_txn_rc rk_txn_begin(void *p)
{
	rk_txn *t = p;
	rk_handle *r = t->r;

	/* Given the previous transaction, begin reinitialises it in place. */
	if (r->kind == RK_OPTIMISTIC)
		t->txn =
		    rocksdb_optimistictransaction_begin(r->odb, r->wopts, r->otxn_opts, t->txn);
	else
		t->txn = rocksdb_transaction_begin(r->tdb, r->wopts, r->txn_opts, t->txn);
	rk_nonnull(t->txn, "rocksdb_transaction_begin");
	return PEERS_TXN_OK;
}

static peers_txn_rc rk_txn_get(void *p, const char *key, size_t klen, char *buf, size_t cap,
                               size_t *vlen)
{
	rk_txn *t = p;
	char *err = NULL;
	/* Exclusive: the pessimistic DB's lock is held for the write that follows. */
	rocksdb_pinnableslice_t *ps =
	    rocksdb_transaction_get_pinned_for_update(t->txn, t->r->ropts, key, klen, 1, &err);

	if (err != NULL)
		return rk_txn_failed(t, "rocksdb_transaction_get_pinned_for_update", err);
	if (ps == NULL)
		return PEERS_TXN_ABSENT;
	rk_pinned_value(ps, buf, cap, vlen);
	return PEERS_TXN_OK;
}

static peers_txn_rc rk_txn_put(void *p, const char *key, size_t klen, const char *val, size_t vlen)
{
	rk_txn *t = p;
	char *err = NULL;

	rocksdb_transaction_put(t->txn, key, klen, val, vlen, &err);
	if (err != NULL)
		return rk_txn_failed(t, "rocksdb_transaction_put", err);
	return PEERS_TXN_OK;
}

static peers_txn_rc rk_txn_commit(void *p)
{
	rk_txn *t = p;
	char *err = NULL;

	rocksdb_transaction_commit(t->txn, &err);
	if (err != NULL)
		return rk_txn_failed(t, "rocksdb_transaction_commit", err);
	return PEERS_TXN_OK;
}

const peers_engine peers_rocksdb = {
    .name = "rocksdb",
    .threads = true,
    .version = rk_version,
    .open = rk_open_plain,
    .close = rk_close,
    .put = rk_put,
    .get = rk_get,
    .scan = rk_scan,
    .range = rk_range,
};

const peers_engine peers_rocksdb_otxn = {
    .name = "rocksdb-otxn",
    .threads = true,
    .version = rk_version,
    .open = rk_open_otxn,
    .close = rk_close,
    .put = rk_put,
    .get = rk_get,
    .scan = rk_scan,
    .range = rk_range,
    .txn_new = rk_txn_new,
    .txn_free = rk_txn_free,
    .txn_begin = rk_txn_begin,
    .txn_get = rk_txn_get,
    .txn_put = rk_txn_put,
    .txn_commit = rk_txn_commit,
};

const peers_engine peers_rocksdb_ptxn = {
    .name = "rocksdb-ptxn",
    .threads = true,
    .version = rk_version,
    .open = rk_open_ptxn,
    .close = rk_close,
    .put = rk_put,
    .get = rk_get,
    .scan = rk_scan,
    .range = rk_range,
    .txn_new = rk_txn_new,
    .txn_free = rk_txn_free,
    .txn_begin = rk_txn_begin,
    .txn_get = rk_txn_get,
    .txn_put = rk_txn_put,
    .txn_commit = rk_txn_commit,
};
