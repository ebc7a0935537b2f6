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
 * the C API allows for put, get and iterators.
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

typedef struct rk_handle {
	rocksdb_t *db;
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

static void *rk_open(const peers_open_args *a)
{
	rk_handle *r = peers_xmalloc("rocksdb handle", sizeof(*r));
	char *err = NULL;

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

	r->db = rocksdb_open(r->opts, a->dir, &err);
	rk_check("rocksdb_open", err);
	rk_nonnull(r->db, "rocksdb_open");
	return r;
}

static void rk_close(void *h)
{
	rk_handle *r = h;

	rocksdb_close(r->db);
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

	/* A put replaces an existing key's value. */
	rocksdb_put(r->db, r->wopts, key, klen, val, vlen, &err);
	rk_check("rocksdb_put", err);
}

static bool rk_get(void *h, const char *key, size_t klen, char *buf, size_t cap, size_t *vlen)
{
	rk_handle *r = h;
	char *err = NULL;
	rocksdb_pinnableslice_t *ps = rocksdb_get_pinned(r->db, r->ropts, key, klen, &err);
	const char *v;

	rk_check("rocksdb_get_pinned", err);
	if (ps == NULL)
		return false;
	v = rocksdb_pinnableslice_value(ps, vlen);
	if (v == NULL && *vlen > 0)
		peers_fatal("rocksdb", "rocksdb_pinnableslice_value", "returned NULL");
	if (*vlen > 0)
		memcpy(buf, v, *vlen < cap ? *vlen : cap);
	rocksdb_pinnableslice_destroy(ps);
	return true;
}

static void rk_scan(void *h, peers_scan_cb cb, void *arg)
{
	rk_handle *r = h;
	rocksdb_iterator_t *it =
	    rk_nonnull(rocksdb_create_iterator(r->db, r->ropts), "rocksdb_create_iterator");
	char *err = NULL;

	for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
		size_t kn, vn;
		const char *k = rocksdb_iter_key(it, &kn);
		const char *v = rocksdb_iter_value(it, &vn);

		cb(arg, k, kn, v, vn);
	}
	rocksdb_iter_get_error(it, &err);
	rk_check("rocksdb_iter_get_error", err);
	rocksdb_iter_destroy(it);
}

const peers_engine peers_rocksdb = {
    .name = "rocksdb",
    .threads = true,
    .version = rk_version,
    .open = rk_open,
    .close = rk_close,
    .put = rk_put,
    .get = rk_get,
    .scan = rk_scan,
};
