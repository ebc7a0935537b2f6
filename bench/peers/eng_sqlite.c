/*
 * eng_sqlite.c - the SQLite peer of walrus-peers.
 *
 * One table `kv(k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID` in
 * DIR/db.sqlite, in WAL mode, with synchronous=NORMAL for asynchronous
 * workloads (commits reach the WAL file, only checkpoints fsync) and
 * synchronous=FULL for durable ones (each commit fsyncs the WAL). Every put
 * is an autocommit INSERT OR REPLACE (a put overwrites the key's value, as
 * the other engines' do: updaterandom and readwhilewriting's writer rewrite
 * existing keys; the fills, on a new table, only ever insert), every get an
 * autocommit SELECT, through prepared statements. The fills' batches
 * (--batch) are BEGIN ... COMMIT around their INSERTs. The page cache is
 * 256 MiB per connection (--cache-mb) so the read workloads run from memory;
 * the busy timeout (60 s) lets several processes take turns at the single
 * write lock, as an application would.
 */
#include "peers.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SQ_BUSY_TIMEOUT_MS 60000

typedef struct sq_handle {
	sqlite3 *db;
	sqlite3_stmt *put;
	sqlite3_stmt *get;
	sqlite3_stmt *scan;
} sq_handle;

static _Noreturn void sq_fail(sqlite3 *db, const char *op, int rc)
{
	peers_fatal("sqlite", op, "%s (code %d)", db ? sqlite3_errmsg(db) : sqlite3_errstr(rc), rc);
}

static void sq_exec(sqlite3 *db, const char *sql)
{
	char *err = NULL;
	int rc = sqlite3_exec(db, sql, NULL, NULL, &err);

	if (rc != SQLITE_OK) {
		char msg[256];

		snprintf(msg, sizeof(msg), "%s", err ? err : sqlite3_errstr(rc));
		sqlite3_free(err);
		peers_fatal("sqlite", sql, "%s (code %d)", msg, rc);
	}
}

static sqlite3_stmt *sq_prepare(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);

	if (rc != SQLITE_OK)
		sq_fail(db, "sqlite3_prepare_v2", rc);
	return st;
}

static void sq_bind(sq_handle *s, sqlite3_stmt *st, int col, const char *p, size_t n)
{
	int rc = sqlite3_bind_blob(st, col, p, (int)n, SQLITE_STATIC);

	if (rc != SQLITE_OK)
		sq_fail(s->db, "sqlite3_bind_blob", rc);
}

static void sq_reset(sq_handle *s, sqlite3_stmt *st)
{
	int rc = sqlite3_reset(st);

	if (rc != SQLITE_OK)
		sq_fail(s->db, "sqlite3_reset", rc);
}

static const char *sq_version(void)
{
	return sqlite3_libversion();
}

static void *sq_open(const peers_open_args *a)
{
	char path[4096];
	sqlite3 *db = NULL;
	sqlite3_stmt *st;
	int rc;

	if ((size_t)snprintf(path, sizeof(path), "%s/db.sqlite", a->dir) >= sizeof(path))
		peers_fatal("sqlite", "open", "path too long: %s/db.sqlite", a->dir);
	rc = sqlite3_open_v2(
	    path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		char msg[256];

		snprintf(msg, sizeof(msg), "%s", db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
		sqlite3_close(db);
		peers_fatal("sqlite", "sqlite3_open_v2", "\"%s\": %s (code %d)", path, msg, rc);
	}
	rc = sqlite3_busy_timeout(db, SQ_BUSY_TIMEOUT_MS);
	if (rc != SQLITE_OK)
		sq_fail(db, "sqlite3_busy_timeout", rc);

	/* journal_mode answers with the mode in force: insist on "wal". */
	st = sq_prepare(db, "PRAGMA journal_mode=WAL");
	rc = sqlite3_step(st);
	if (rc != SQLITE_ROW)
		sq_fail(db, "PRAGMA journal_mode=WAL", rc);
	{
		const unsigned char *mode = sqlite3_column_text(st, 0);

		if (mode == NULL || strcmp((const char *)mode, "wal") != 0)
			peers_fatal("sqlite", "PRAGMA journal_mode=WAL", "journal mode is \"%s\"",
			            mode ? (const char *)mode : "(null)");
	}
	rc = sqlite3_finalize(st);
	if (rc != SQLITE_OK)
		sq_fail(db, "sqlite3_finalize", rc);

	sq_exec(db, a->sync ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL");
	{
		char sql[64];
		uint64_t mb = a->cache_mb ? a->cache_mb : PEERS_CACHE_MB;

		/* A negative cache_size is in KiB. */
		snprintf(sql, sizeof(sql), "PRAGMA cache_size=-%llu",
		         (unsigned long long)mb * 1024);
		sq_exec(db, sql);
	}
	sq_exec(db, "CREATE TABLE IF NOT EXISTS kv(k BLOB PRIMARY KEY, v BLOB NOT NULL) "
	            "WITHOUT ROWID");

	sq_handle *s = peers_xmalloc("sqlite handle", sizeof(*s));
	s->db = db;
	s->put = sq_prepare(db, "INSERT OR REPLACE INTO kv(k, v) VALUES(?1, ?2)");
	s->get = sq_prepare(db, "SELECT v FROM kv WHERE k = ?1");
	s->scan = sq_prepare(db, "SELECT k, v FROM kv ORDER BY k");
	return s;
}

static void sq_close(void *h)
{
	sq_handle *s = h;
	sqlite3_stmt *st[] = {s->put, s->get, s->scan};
	int rc;

	for (size_t i = 0; i < sizeof(st) / sizeof(st[0]); i++) {
		rc = sqlite3_finalize(st[i]);
		if (rc != SQLITE_OK)
			sq_fail(s->db, "sqlite3_finalize", rc);
	}
	rc = sqlite3_close(s->db);
	if (rc != SQLITE_OK)
		sq_fail(s->db, "sqlite3_close", rc);
	free(s);
}

static void sq_put(void *h, const char *key, size_t klen, const char *val, size_t vlen)
{
	sq_handle *s = h;
	int rc;

	sq_bind(s, s->put, 1, key, klen);
	sq_bind(s, s->put, 2, val, vlen);
	rc = sqlite3_step(s->put);
	if (rc != SQLITE_DONE)
		sq_fail(s->db, "sqlite3_step(INSERT OR REPLACE)", rc);
	sq_reset(s, s->put);
}

static void sq_batch_begin(void *h)
{
	sq_exec(((sq_handle *)h)->db, "BEGIN");
}

static void sq_batch_commit(void *h)
{
	sq_exec(((sq_handle *)h)->db, "COMMIT");
}

static bool sq_get(void *h, const char *key, size_t klen, char *buf, size_t cap, size_t *vlen)
{
	sq_handle *s = h;
	bool found = false;
	int rc;

	sq_bind(s, s->get, 1, key, klen);
	rc = sqlite3_step(s->get);
	if (rc == SQLITE_ROW) {
		const void *v = sqlite3_column_blob(s->get, 0);
		int n = sqlite3_column_bytes(s->get, 0);

		if (n < 0 || (n > 0 && v == NULL))
			sq_fail(s->db, "sqlite3_column_blob", sqlite3_errcode(s->db));
		*vlen = (size_t)n;
		if (n > 0)
			memcpy(buf, v, (size_t)n < cap ? (size_t)n : cap);
		found = true;
	} else if (rc != SQLITE_DONE) {
		sq_fail(s->db, "sqlite3_step(SELECT)", rc);
	}
	sq_reset(s, s->get);
	return found;
}

static void sq_scan(void *h, peers_scan_cb cb, void *arg)
{
	sq_handle *s = h;
	int rc;

	while ((rc = sqlite3_step(s->scan)) == SQLITE_ROW) {
		const void *k = sqlite3_column_blob(s->scan, 0);
		int kn = sqlite3_column_bytes(s->scan, 0);
		const void *v = sqlite3_column_blob(s->scan, 1);
		int vn = sqlite3_column_bytes(s->scan, 1);

		if (kn < 0 || vn < 0 || (kn > 0 && k == NULL) || (vn > 0 && v == NULL))
			sq_fail(s->db, "sqlite3_column_blob", sqlite3_errcode(s->db));
		cb(arg, k, (size_t)kn, v, (size_t)vn);
	}
	if (rc != SQLITE_DONE)
		sq_fail(s->db, "sqlite3_step(SELECT ... ORDER BY k)", rc);
	sq_reset(s, s->scan);
}

const peers_engine peers_sqlite = {
    .name = "sqlite",
    .threads = false,
    .version = sq_version,
    .open = sq_open,
    .close = sq_close,
    .put = sq_put,
    .get = sq_get,
    .scan = sq_scan,
    .batch_begin = sq_batch_begin,
    .batch_commit = sq_batch_commit,
};
