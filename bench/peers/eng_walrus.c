/*
 * eng_walrus.c - the walrus engine of the workloads, through the public API
 * (include/walrus.h) only.
 *
 * The database is a walrus data directory, opened with create_if_missing=on
 * and the options the program gave (peers_walrus_use_opts: walrus-peers'
 * -o, the walrus command's -o). Each put is walrus_put, WALRUS_SYNC for the
 * durable workloads (it returns once the WAL is flushed; concurrent
 * committers share a flush) and WALRUS_ASYNC otherwise (the WAL writer
 * flushes within wal_writer_delay); each get is walrus_get_into; the scan
 * is a walrus_iter over the whole key space, a range one opened at its
 * start key. The fills' batches (--batch)
 * are walrus batches: the puts go into one, walrus_batch_commit applies it
 * with the handle's flags, as a put would be. With a snapshot taken on the
 * handle (--snapshot), gets are walrus_get_into_at and the scan
 * walrus_iter_open_at through it. With a key space named
 * (peers_walrus_use_space, `walrus -s NAME bench`), every call is its _in
 * form on that space, which the first open creates. A transaction is a walrus_txn,
 * serializable (flags 0), begun on the client's handle and committed with
 * the handle's flags; WALRUS_ECONFLICT at its commit is the conflict the
 * caller runs it again for.
 *
 * Every walrus handle is a backend of the instance, whether its process
 * holds one handle or many threads each hold their own: threads is false
 * (processes may share the directory) and thread_handles true, so a client
 * is a thread of the program that opens its own handle, or a forked process
 * that opens its own after fork() (a handle belongs to the process that
 * opened it). The options are shared by the threads' opens: they are
 * completed (create_if_missing) once, under wa_mu, and only read after.
 * The first open starts the instance's supervisor; after the last
 * close it lingers (supervisor_linger), checkpoints and exits. Before a
 * directory is removed, idle waits for that: the supervisor and its
 * auxiliary processes hold a lock on byte 0 of DIR/walrus.pid for as long as
 * any of them lives (the data directory lock of DESIGN.md).
 */
#include "peers.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "walrus.h"

#ifndef PEERS_WALRUS_VERSION
#define PEERS_WALRUS_VERSION "dev"
#endif

#define WA_IDLE_TIMEOUT_S 300 /* a shutdown checkpoint of a large pool takes a while */

typedef struct wa_handle {
	walrus *db;
	int flags;             /* WALRUS_SYNC or WALRUS_ASYNC */
	walrus_batch *batch;   /* made by the first batch_begin */
	bool in_batch;         /* puts go into batch */
	walrus_snapshot *snap; /* gets and the scan read through it, when set */
	walrus_space *sp;      /* the key space of every call (NULL: the default one) */
} wa_handle;

/* A client's transactions on its handle: one at a time. */
typedef struct wa_txn {
	wa_handle *w;
	walrus_txn *txn; /* the open one, or NULL */
} wa_txn;

static pthread_mutex_t wa_mu = PTHREAD_MUTEX_INITIALIZER; /* guards the next three */
static walrus_opts *wa_opts;                              /* the program's, or wa_own */
static walrus_opts *wa_own;
static bool wa_ready;        /* wa_opts has create_if_missing: opens only read it now */
static const char *wa_space; /* the key space, NULL: the default one */

/* Report and end on a walrus error code. */
static _Noreturn void wa_fail(const char *op, int rc)
{
	const char *msg = walrus_errmsg();

	peers_fatal("walrus", op, "%s (%s)", msg[0] ? msg : walrus_strerror(rc),
	            walrus_strerror(rc));
}

/* Called with no client running. */
void peers_walrus_use_opts(walrus_opts *opts)
{
	(void)pthread_mutex_lock(&wa_mu);
	if (wa_own != NULL) {
		walrus_opts_free(wa_own);
		wa_own = NULL;
	}
	wa_opts = opts;
	wa_ready = false;
	(void)pthread_mutex_unlock(&wa_mu);
}

void peers_walrus_use_space(const char *name)
{
	wa_space = name;
}

static const char *wa_version(void)
{
	return PEERS_WALRUS_VERSION;
}

/* The options every open uses, completed by the first (several client
 * threads may open at once). */
static walrus_opts *wa_open_opts(void)
{
	walrus_opts *o;
	int rc = WALRUS_OK;

	(void)pthread_mutex_lock(&wa_mu);
	if (!wa_ready) {
		if (wa_opts == NULL) {
			if (wa_own == NULL && (wa_own = walrus_opts_new()) == NULL)
				peers_fatal("walrus", "walrus_opts_new", "out of memory");
			wa_opts = wa_own;
		}
		rc = walrus_opts_set(wa_opts, "create_if_missing", "on");
		wa_ready = rc == WALRUS_OK;
	}
	o = wa_opts;
	(void)pthread_mutex_unlock(&wa_mu);
	if (rc != WALRUS_OK)
		wa_fail("walrus_opts_set(create_if_missing)", rc);
	return o;
}

static void *wa_open(const peers_open_args *a)
{
	walrus_opts *opts = wa_open_opts();
	wa_handle *w = peers_xmalloc("walrus handle", sizeof(*w));
	int rc;

	rc = walrus_open(a->dir, opts, &w->db);
	if (rc != WALRUS_OK) {
		const char *msg = walrus_errmsg();

		peers_fatal("walrus", "walrus_open", "\"%s\": %s (%s)", a->dir,
		            msg[0] ? msg : walrus_strerror(rc), walrus_strerror(rc));
	}
	w->flags = a->sync ? WALRUS_SYNC : WALRUS_ASYNC;
	w->batch = NULL;
	w->in_batch = false;
	w->snap = NULL;
	w->sp = NULL;
	if (wa_space != NULL &&
	    (rc = walrus_space_open(w->db, wa_space, WALRUS_SPACE_CREATE, &w->sp)) != WALRUS_OK)
		wa_fail("walrus_space_open", rc);
	return w;
}

static void wa_close(void *h)
{
	wa_handle *w = h;
	int rc;

	walrus_snapshot_release(w->snap); /* NULL: nothing */
	rc = walrus_close(w->db);
	walrus_batch_free(w->batch);
	free(w);
	if (rc != WALRUS_OK)
		wa_fail("walrus_close", rc);
}

static void wa_report(void *arg, uint32_t block, const char *msg)
{
	(*(unsigned long *)arg)++;
	fprintf(stderr, "walrus verify: block %u: %s\n", block, msg);
}

/* walrus_verify after a workload that wrote: a benchmark of a broken tree fails. */
static void wa_check(void *h, const char *what)
{
	wa_handle *w = h;
	unsigned long problems = 0;
	int rc = walrus_verify(w->db, wa_report, &problems);

	if (rc == WALRUS_ECORRUPT)
		peers_mismatch("walrus", what, "walrus verify found %lu problem(s)", problems);
	if (rc != WALRUS_OK)
		wa_fail("walrus_verify", rc);
	fprintf(stderr, "walrus: verify ok after %s\n", what);
}

static void wa_put(void *h, const char *key, size_t klen, const char *val, size_t vlen)
{
	wa_handle *w = h;
	int rc;

	if (w->in_batch) {
		rc = walrus_batch_put_in(w->batch, w->sp, key, klen, val, vlen);
		if (rc != WALRUS_OK)
			wa_fail("walrus_batch_put", rc);
		return;
	}
	rc = walrus_put_in(w->db, w->sp, key, klen, val, vlen, w->flags);
	if (rc != WALRUS_OK)
		wa_fail(w->flags == WALRUS_SYNC ? "walrus_put(WALRUS_SYNC)"
		                                : "walrus_put(WALRUS_ASYNC)",
		        rc);
}

static void wa_batch_begin(void *h)
{
	wa_handle *w = h;

	if (w->batch == NULL && (w->batch = walrus_batch_new()) == NULL)
		peers_fatal("walrus", "walrus_batch_new", "out of memory");
	w->in_batch = true;
}

static void wa_batch_commit(void *h)
{
	wa_handle *w = h;
	int rc = walrus_batch_commit(w->db, w->batch, w->flags);

	if (rc != WALRUS_OK)
		wa_fail(w->flags == WALRUS_SYNC ? "walrus_batch_commit(WALRUS_SYNC)"
		                                : "walrus_batch_commit(WALRUS_ASYNC)",
		        rc);
	walrus_batch_clear(w->batch);
	w->in_batch = false;
}

static bool wa_get(void *h, const char *key, size_t klen, char *buf, size_t cap, size_t *vlen)
{
	wa_handle *w = h;
	int rc = w->snap != NULL
	             ? walrus_get_into_at_in(w->db, w->snap, w->sp, key, klen, buf, cap, vlen)
	             : walrus_get_into_in(w->db, w->sp, key, klen, buf, cap, vlen);

	if (rc == WALRUS_ENOTFOUND)
		return false;
	/* Too big for the buffer: *vlen has the size, which the caller finds wrong. */
	if (rc != WALRUS_OK && rc != WALRUS_ETOOBIG)
		wa_fail(w->snap != NULL ? "walrus_get_into_at" : "walrus_get_into", rc);
	return true;
}

static void wa_scan(void *h, peers_scan_cb cb, void *arg)
{
	wa_handle *w = h;
	walrus_iter *it = NULL;
	int rc = w->snap != NULL
	             ? walrus_iter_open_at_in(w->db, w->snap, w->sp, NULL, 0, NULL, 0, &it)
	             : walrus_iter_open_in(w->db, w->sp, NULL, 0, NULL, 0, &it);

	if (rc != WALRUS_OK) {
		walrus_iter_close(it);
		wa_fail(w->snap != NULL ? "walrus_iter_open_at" : "walrus_iter_open", rc);
	}
	while (walrus_iter_valid(it)) {
		const void *k, *v;
		size_t kn, vn;

		walrus_iter_key(it, &k, &kn);
		walrus_iter_value(it, &v, &vn);
		cb(arg, k, kn, v, vn);
		rc = walrus_iter_next(it);
		if (rc != WALRUS_OK) {
			walrus_iter_close(it);
			wa_fail("walrus_iter_next", rc);
		}
	}
	walrus_iter_close(it);
}

/* Up to @max pairs from the first key >= @start: an iterator opened there. */
static void wa_range(void *h, const char *start, size_t slen, uint64_t max, peers_scan_cb cb,
                     void *arg)
{
	wa_handle *w = h;
	walrus_iter *it = NULL;
	int rc = w->snap != NULL
	             ? walrus_iter_open_at_in(w->db, w->snap, w->sp, start, slen, NULL, 0, &it)
	             : walrus_iter_open_in(w->db, w->sp, start, slen, NULL, 0, &it);

	if (rc != WALRUS_OK) {
		walrus_iter_close(it);
		wa_fail(w->snap != NULL ? "walrus_iter_open_at" : "walrus_iter_open", rc);
	}
	for (uint64_t n = 0; n < max && walrus_iter_valid(it); n++) {
		const void *k, *v;
		size_t kn, vn;

		walrus_iter_key(it, &k, &kn);
		walrus_iter_value(it, &v, &vn);
		cb(arg, k, kn, v, vn);
		/* No step past the last pair wanted: it could read a leaf more. */
		if (n + 1 == max)
			break;
		rc = walrus_iter_next(it);
		if (rc != WALRUS_OK) {
			walrus_iter_close(it);
			wa_fail("walrus_iter_next", rc);
		}
	}
	walrus_iter_close(it);
}

static void wa_snapshot(void *h, bool take)
{
	wa_handle *w = h;
	int rc;

	walrus_snapshot_release(w->snap);
	w->snap = NULL;
	if (take && (rc = walrus_snapshot_take(w->db, &w->snap)) != WALRUS_OK)
		wa_fail("walrus_snapshot_take", rc);
}

static void *wa_txn_new(void *h)
{
	wa_txn *t = peers_xmalloc("walrus transaction", sizeof(*t));

	t->w = h;
	t->txn = NULL;
	return t;
}

static void wa_txn_free(void *p)
{
	wa_txn *t = p;

	walrus_txn_free(t->txn); /* NULL: nothing; an open one is aborted */
	free(t);
}

/* Ends the transaction after a conflict: the caller begins another. */
static peers_txn_rc wa_txn_conflict(wa_txn *t)
{
	walrus_txn_free(t->txn);
	t->txn = NULL;
	return PEERS_TXN_CONFLICT;
}

static peers_txn_rc wa_txn_begin(void *p)
{
	wa_txn *t = p;
	int rc;

	walrus_txn_free(t->txn);
	t->txn = NULL;
	rc = walrus_txn_begin(t->w->db, 0, &t->txn);
	if (rc != WALRUS_OK)
		wa_fail("walrus_txn_begin", rc);
	return PEERS_TXN_OK;
}

static peers_txn_rc wa_txn_get(void *p, const char *key, size_t klen, char *buf, size_t cap,
                               size_t *vlen)
{
	wa_txn *t = p;
	int rc = walrus_txn_get_into_in(t->txn, t->w->sp, key, klen, buf, cap, vlen);

	if (rc == WALRUS_ENOTFOUND)
		return PEERS_TXN_ABSENT;
	if (rc == WALRUS_ECONFLICT)
		return wa_txn_conflict(t);
	/* Too big for the buffer: *vlen has the size, which the caller finds wrong. */
	if (rc != WALRUS_OK && rc != WALRUS_ETOOBIG)
		wa_fail("walrus_txn_get_into", rc);
	return PEERS_TXN_OK;
}

static peers_txn_rc wa_txn_put(void *p, const char *key, size_t klen, const char *val, size_t vlen)
{
	wa_txn *t = p;
	int rc = walrus_txn_put_in(t->txn, t->w->sp, key, klen, val, vlen);

	if (rc == WALRUS_ECONFLICT)
		return wa_txn_conflict(t);
	if (rc != WALRUS_OK)
		wa_fail("walrus_txn_put", rc);
	return PEERS_TXN_OK;
}

static peers_txn_rc wa_txn_commit(void *p)
{
	wa_txn *t = p;
	int flags = t->w->flags;
	int rc = walrus_txn_commit(t->txn, flags);

	/* Ended by the commit, whatever it answered. */
	walrus_txn_free(t->txn);
	t->txn = NULL;
	if (rc == WALRUS_ECONFLICT)
		return PEERS_TXN_CONFLICT;
	if (rc != WALRUS_OK)
		wa_fail(flags == WALRUS_SYNC ? "walrus_txn_commit(WALRUS_SYNC)"
		                             : "walrus_txn_commit(WALRUS_ASYNC)",
		        rc);
	return PEERS_TXN_OK;
}

/* Is byte 0 of walrus.pid (the instance lock) held? */
static bool wa_instance_running(int fd, const char *path)
{
	struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};

	while (fcntl(fd, F_OFD_GETLK, &fl) != 0) {
		if (errno != EINTR)
			peers_fatal("walrus", "fcntl(F_OFD_GETLK)", "\"%s\": %s", path,
			            strerror(errno));
	}
	return fl.l_type != F_UNLCK;
}

/* walrus_compact on the open handle; its seconds. */
static double wa_compact(void *h)
{
	wa_handle *w = h;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int rc = walrus_compact(w->db, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (rc != WALRUS_OK)
		wa_fail("walrus_compact", rc);
	return (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
}

static void wa_idle(const char *dir)
{
	char path[PATH_MAX];
	struct timespec nap = {.tv_sec = 0, .tv_nsec = 10000000L};
	int fd;

	if ((size_t)snprintf(path, sizeof(path), "%s/walrus.pid", dir) >= sizeof(path))
		peers_fatal("walrus", "idle", "path too long: \"%s\"", dir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return;
		peers_fatal("walrus", "open", "\"%s\": %s", path, strerror(errno));
	}
	for (long waited = 0; wa_instance_running(fd, path); waited++) {
		if (waited >= WA_IDLE_TIMEOUT_S * 100L) {
			close(fd);
			peers_fatal("walrus", "idle",
			            "the instance serving \"%s\" is still running after %d s (see "
			            "%s/log/walrus.log)",
			            dir, WA_IDLE_TIMEOUT_S, dir);
		}
		nanosleep(&nap, NULL);
	}
	if (close(fd) != 0)
		peers_fatal("walrus", "close", "\"%s\": %s", path, strerror(errno));
}

const peers_engine peers_walrus = {
    .name = "walrus",
    .threads = false,
    .thread_handles = true,
    .version = wa_version,
    .open = wa_open,
    .close = wa_close,
    .put = wa_put,
    .get = wa_get,
    .scan = wa_scan,
    .range = wa_range,
    .idle = wa_idle,
    .batch_begin = wa_batch_begin,
    .batch_commit = wa_batch_commit,
    .check = wa_check,
    .data_dir = "base",
    .wal_dir = "wal",
    .compact = wa_compact,
    .snapshot = wa_snapshot,
    .txn_new = wa_txn_new,
    .txn_free = wa_txn_free,
    .txn_begin = wa_txn_begin,
    .txn_get = wa_txn_get,
    .txn_put = wa_txn_put,
    .txn_commit = wa_txn_commit,
};
