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
 * autocommit SELECT, a scan `ORDER BY k` (a range: `WHERE k >= ? ... LIMIT ?`),
 * through prepared statements. The fills' batches
 * (--batch) are BEGIN ... COMMIT around their INSERTs. The page cache is
 * 256 MiB per connection (--cache-mb) so the read workloads run from memory;
 * the busy timeout (60 s) lets several processes take turns at the single
 * write lock, as an application would.
 *
 * A transaction (txn_transfer) is BEGIN IMMEDIATE, which takes the write
 * lock at once (waiting for it up to the busy timeout), the same prepared
 * SELECTs and INSERT OR REPLACEs, then COMMIT: in WAL mode a transaction
 * holding the write lock reads the latest data and cannot meet a
 * conflicting writer, so the only abort is an SQLITE_BUSY that outlasted
 * the busy timeout, after which the transaction is rolled back and run
 * again. Durable or not by the connection's synchronous setting, as the
 * puts are.
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
	sqlite3_stmt *range;
	sqlite3_stmt *begin, *commit, *rollback; /* txn_transfer's */
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
	s->range = sq_prepare(db, "SELECT k, v FROM kv WHERE k >= ?1 ORDER BY k LIMIT ?2");
	s->begin = sq_prepare(db, "BEGIN IMMEDIATE");
	s->commit = sq_prepare(db, "COMMIT");
	s->rollback = sq_prepare(db, "ROLLBACK");
	return s;
}

static void sq_close(void *h)
{
	sq_handle *s = h;
	sqlite3_stmt *st[] = {s->put, s->get, s->scan, s->range, s->begin, s->commit, s->rollback};
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

/* Every row of @st (k, v) to @cb, then the statement reset. */
static void sq_rows(sq_handle *s, sqlite3_stmt *st, peers_scan_cb cb, void *arg)
{
	int rc;

	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const void *k = sqlite3_column_blob(st, 0);
		int kn = sqlite3_column_bytes(st, 0);
		const void *v = sqlite3_column_blob(st, 1);
		int vn = sqlite3_column_bytes(st, 1);

		if (kn < 0 || vn < 0 || (kn > 0 && k == NULL) || (vn > 0 && v == NULL))
			sq_fail(s->db, "sqlite3_column_blob", sqlite3_errcode(s->db));
		cb(arg, k, (size_t)kn, v, (size_t)vn);
	}
	if (rc != SQLITE_DONE)
		sq_fail(s->db, "sqlite3_step(SELECT ... ORDER BY k)", rc);
	sq_reset(s, st);
}

static void sq_scan(void *h, peers_scan_cb cb, void *arg)
{
	sq_handle *s = h;

	sq_rows(s, s->scan, cb, arg);
}

static void sq_range(void *h, const char *start, size_t slen, uint64_t max, peers_scan_cb cb,
                     void *arg)
{
	sq_handle *s = h;
	int rc;

	sq_bind(s, s->range, 1, start, slen);
	rc = sqlite3_bind_int64(s->range, 2, max > INT64_MAX ? INT64_MAX : (sqlite3_int64)max);
	if (rc != SQLITE_OK)
		sq_fail(s->db, "sqlite3_bind_int64", rc);
	sq_rows(s, s->range, cb, arg);
}

/*
 * Steps @st, which should answer @want: true when it did, false on
 * SQLITE_BUSY (the write lock not had within the busy timeout). Resets the
 * statement either way; any other answer is fatal.
 */
/* NOLINTNEXTLINE(bugprone-easily-swappable-parameters): the order is fixed */
static bool sq_step_busy(sq_handle *s, sqlite3_stmt *st, const char *what, int want)
{
	int rc = sqlite3_step(st);
	int rrc;

	if (rc == want || rc == SQLITE_BUSY) {
		/* After a failed step, reset answers that step's error again. */
		rrc = sqlite3_reset(st);
		if (rrc != SQLITE_OK && rrc != SQLITE_BUSY)
			sq_fail(s->db, "sqlite3_reset", rrc);
		return rc == want;
	}
	sq_fail(s->db, what, rc);
}

/* Rolls the open transaction back after a busy step: the caller runs it again. */
static peers_txn_rc sq_txn_busy(sq_handle *s)
{
	if (!sqlite3_get_autocommit(s->db) &&
	    !sq_step_busy(s, s->rollback, "sqlite3_step(ROLLBACK)", SQLITE_DONE))
		sq_fail(s->db, "sqlite3_step(ROLLBACK)", SQLITE_BUSY);
	return PEERS_TXN_CONFLICT;
}

static void *sq_txn_new(void *h)
{
	return h; /* a connection serves one client process: its txn is the connection's */
}

static void sq_txn_free(void *t)
{
	sq_handle *s = t;

	if (!sqlite3_get_autocommit(s->db))
		(void)sq_txn_busy(s);
}

static peers_txn_rc sq_txn_begin(void *t)
{
	sq_handle *s = t;

	sq_txn_free(s);
	return sq_step_busy(s, s->begin, "sqlite3_step(BEGIN IMMEDIATE)", SQLITE_DONE)
	           ? PEERS_TXN_OK
	           : PEERS_TXN_CONFLICT;
}

static peers_txn_rc sq_txn_get(void *t, const char *key, size_t klen, char *buf, size_t cap,
                               size_t *vlen)
{
	sq_handle *s = t;
	peers_txn_rc ret = PEERS_TXN_ABSENT;
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
		ret = PEERS_TXN_OK;
	} else if (rc == SQLITE_BUSY) {
		ret = PEERS_TXN_CONFLICT;
	} else if (rc != SQLITE_DONE) {
		sq_fail(s->db, "sqlite3_step(SELECT)", rc);
	}
	rc = sqlite3_reset(s->get);
	if (rc != SQLITE_OK && rc != SQLITE_BUSY)
		sq_fail(s->db, "sqlite3_reset", rc);
	return ret == PEERS_TXN_CONFLICT ? sq_txn_busy(s) : ret;
}

static peers_txn_rc sq_txn_put(void *t, const char *key, size_t klen, const char *val, size_t vlen)
{
	sq_handle *s = t;

	sq_bind(s, s->put, 1, key, klen);
	sq_bind(s, s->put, 2, val, vlen);
	if (!sq_step_busy(s, s->put, "sqlite3_step(INSERT OR REPLACE)", SQLITE_DONE))
		return sq_txn_busy(s);
	return PEERS_TXN_OK;
}

static peers_txn_rc sq_txn_commit(void *t)
{
	sq_handle *s = t;

	/* A busy COMMIT leaves the transaction open: rolled back, run again. */
	if (!sq_step_busy(s, s->commit, "sqlite3_step(COMMIT)", SQLITE_DONE))
		return sq_txn_busy(s);
	return PEERS_TXN_OK;
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
    .range = sq_range,
    .batch_begin = sq_batch_begin,
    .batch_commit = sq_batch_commit,
    .txn_new = sq_txn_new,
    .txn_free = sq_txn_free,
    .txn_begin = sq_txn_begin,
    .txn_get = sq_txn_get,
    .txn_put = sq_txn_put,
    .txn_commit = sq_txn_commit,
};
