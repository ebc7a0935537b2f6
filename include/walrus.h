/*
 * walrus.h - the public API of the walrus storage engine.
 *
 * walrus is an embeddable key-value engine whose I/O path mirrors
 * PostgreSQL's: a write-ahead log, a shared buffer pool in shared memory,
 * and a background checkpointer that alone fsyncs data files.
 *
 * Process model.  Every handle that walrus_open() returns is a *backend* of
 * the instance serving the data directory, whether it was opened by a
 * process of its own or by one thread among many.  The first open starts
 * the instance's supervisor (a detached process) which owns the directory;
 * later opens, from any process or thread, attach to it.  When the last
 * backend closes, the supervisor lingers briefly, checkpoints and exits.
 *
 * Threads.  Any number of threads may each open a handle on the same
 * directory and use it concurrently with the others (as SQLite's
 * multi-thread mode, or LMDB's transaction per thread): the handles of a
 * process share one mapping of the shared memory, one connection to the
 * supervisor and one bounded file-descriptor cache (max_open_files), and
 * each has its own pins, WAL insertion slot, locks and PANIC boundary.
 *
 * Rules for callers:
 *   - A handle serves one thread at a time.  It may move between threads,
 *     but a call on a handle while another thread is inside a call on it
 *     fails with WALRUS_EMISUSE (nothing is changed).  An iterator belongs
 *     to its handle's thread in the same way.
 *   - One data directory per process: a process may hold many handles, all
 *     on the same directory.
 *   - A handle belongs to the process that opened it: in a child created by
 *     fork(), calls on inherited handles fail with WALRUS_EMISUSE, and the
 *     child may open handles of its own.
 *   - A process that exits normally (exit(), return from main) with handles
 *     open detaches them: that is not a crash.  From the moment exit()
 *     begins, a call or open by any other thread of the process fails with
 *     WALRUS_ESHUTDOWN; calls already inside are given up to 5 s to return.
 *     A process killed by a signal, leaving with _exit() while attached, or
 *     exiting while a call stays inside past those 5 s, is a crash: the
 *     instance restarts from its WAL, as PostgreSQL does when a backend dies.
 *   - A thread that ends without closing its handles does not keep their
 *     slots (max_connections): a handle whose last call was made by that
 *     thread gives its slot back, stays valid, and takes a slot again at its
 *     next call, from any thread (WALRUS_ELIMIT then if none is free).
 *   - The library never calls exit() or abort() in the caller's process,
 *     never installs signal handlers there and never writes to its stdout
 *     or stderr (see walrus_set_log_handler for its messages).
 *
 * Errors.  Every function returns WALRUS_OK (0) or a negative WALRUS_E*
 * code.  walrus_strerror() names the code; walrus_errmsg() gives the detailed
 * message of the last failure in the calling thread ("could not open file
 * "/data/base/1": Permission denied").
 *
 * WALRUS_ERESTART means the instance crashed (a process died while attached,
 * or an fsync failed and the instance PANICked) and has restarted from its
 * write-ahead log.  Nothing acknowledged as durable is lost; writes that were
 * in flight may or may not have happened.  The handle is dead: close it and
 * open the directory again.
 */
#ifndef WALRUS_H
#define WALRUS_H

#include <stddef.h>
#include <stdint.h>

#include "walrus_config.h" /* WALRUS_PAGE_SIZE: 8192 unless built with -Dpage_size */

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden symbols: only these functions leave it. */
#if defined(__GNUC__) && !defined(WALRUS_API)
#define WALRUS_API __attribute__((visibility("default")))
#elif !defined(WALRUS_API)
#define WALRUS_API
#endif

enum walrus_error {
	WALRUS_OK = 0,
	WALRUS_ENOTFOUND = -1,    /* key absent */
	WALRUS_EINVAL = -2,       /* bad argument or option value */
	WALRUS_EIO = -3,          /* an I/O error (the message names file and errno) */
	WALRUS_ENOSPC = -4,       /* no space left on a device; also every write of an
	                           * instance started read-only on a full disk */
	WALRUS_ECORRUPT = -5,     /* a checksum or structural check failed */
	WALRUS_EBUSY = -6,        /* directory owned by another instance, or in use */
	WALRUS_EPERM = -7,        /* permissions (or bad permissions on the directory) */
	WALRUS_ENOENT = -8,       /* missing directory or file */
	WALRUS_ERESTART = -9,     /* instance crashed and restarted: reopen */
	WALRUS_EPANIC = -10,      /* this call hit a PANIC; the instance restarts */
	WALRUS_ENOMEM = -11,      /* out of memory */
	WALRUS_EVERSION = -12,    /* data directory, WAL or primary of an incompatible
	                           * version: the message names the walrus it needs */
	WALRUS_ETOOBIG = -13,     /* key or value over its limit */
	WALRUS_ESHUTDOWN = -14,   /* instance shutting down */
	WALRUS_EPROTO = -15,      /* unexpected message from the supervisor */
	WALRUS_ENOTWALRUS = -16,  /* not a walrus data directory */
	WALRUS_EINTERNAL = -17,   /* a bug: please report with the log */
	WALRUS_ELIMIT = -18,      /* a configured limit reached (connections, fds) */
	WALRUS_EMISUSE = -19,     /* a handle used by two threads at once, or after fork() */
	WALRUS_ENOTRUNNING = -20, /* walrus_stop: no instance serves the directory */
	WALRUS_EREADONLY = -21,   /* a standby in recovery: writes go to its primary */
	WALRUS_EINTR = -22,       /* stopped by walrus_interrupt(); nothing half done kept */
	WALRUS_ECONFLICT = -23,   /* a transaction's commit met a concurrent change: retry */
	WALRUS_ESNAPSHOT = -24,   /* snapshot too old: versions it needs are gone */
	WALRUS_EEXIST = -25,      /* a key space of that name exists */
};

/* A short description of an error code; never NULL. */
WALRUS_API const char *walrus_strerror(int code);

/* The detailed message of the last failure in this thread ("" if none). */
WALRUS_API const char *walrus_errmsg(void);

/*
 * Options.  Every engine knob has a name, a documented default and a valid
 * range; walrus_opts_set() parses and validates a value ("128MB", "5min",
 * "on", "io_uring") and fails with WALRUS_EINVAL and a message naming the
 * option.  Instance-wide options (shared_buffers, wal_segment_size, ...)
 * take effect when the instance starts, from (lowest precedence first) their
 * defaults, DIR/walrus.conf, and the options the starting open set with
 * walrus_opts_set().  A later open that sets one to a different value runs
 * with the instance's value: it logs a WARNING and, having succeeded, leaves
 * that text in walrus_errmsg() (empty after an open with nothing to report);
 * with option strict_options=on such an open fails with WALRUS_EINVAL.
 */
typedef struct walrus_opts walrus_opts;

WALRUS_API walrus_opts *walrus_opts_new(void);
WALRUS_API void walrus_opts_free(walrus_opts *opts);
WALRUS_API int walrus_opts_set(walrus_opts *opts, const char *name, const char *value);
/* Writes the value of option @name into buf as text; WALRUS_EINVAL if unknown. */
WALRUS_API int walrus_opts_get(const walrus_opts *opts, const char *name, char *buf, size_t len);

typedef struct walrus walrus;

/*
 * Opens (attaching to, or starting, the instance of) data directory @dir.
 * @opts may be NULL for defaults; option create_if_missing=on creates the
 * directory (mode 0700) and initialises it.
 * Errors: ENOENT (missing and not created), EPERM (not ours, not writable,
 * or group/world permissions), ENOTWALRUS, EVERSION (the directory, or WAL
 * that recovery must replay, was written by a walrus this one cannot read),
 * EBUSY (another instance owns it, or another directory is open in this
 * process), EINVAL (also a bad DIR/walrus.conf, named with its line, and
 * strict_options=on conflicts), EIO.
 */
WALRUS_API int walrus_open(const char *dir, const walrus_opts *opts, walrus **db);

/*
 * Detaches cleanly and frees @db; returns the first error met, if any.
 * The one exception: while another thread is inside a call on @db it is
 * left alone (freeing it would pull it from under that call) and the
 * result is WALRUS_EMISUSE.  Its iterators, snapshots and transactions
 * stay to be closed, released and freed; their calls fail with
 * WALRUS_EMISUSE from then on.
 */
WALRUS_API int walrus_close(walrus *db);

/* Pid of the supervisor serving @db. */
WALRUS_API int walrus_supervisor_pid(const walrus *db);

/*
 * Stops the instance serving data directory @dir, as `pg_ctl stop` does
 * (`walrus -D DIR stop` calls it):
 *   WALRUS_STOP_SMART      new opens are refused (WALRUS_ESHUTDOWN); the
 *                          instance waits until every process attached to
 *                          it has closed its handles, then writes a
 *                          shutdown checkpoint and exits.
 *   WALRUS_STOP_FAST       new opens are refused, and every new call on the
 *                          handles still open fails with WALRUS_ESHUTDOWN;
 *                          calls already under way finish, then the
 *                          shutdown checkpoint, then exit.
 *   WALRUS_STOP_IMMEDIATE  the instance's processes stop at once, without a
 *                          checkpoint; calls on open handles fail (with
 *                          WALRUS_ESHUTDOWN, or WALRUS_EPANIC for a call cut
 *                          short).  The next open recovers from the WAL.
 * No mode loses a write that was acknowledged as durable.  A request may
 * escalate one under way (smart, then fast, then immediate), never weaken it.
 * Handles still open after a stop are dead: close them.  Until the instance
 * is gone, opens of @dir fail with WALRUS_ESHUTDOWN; after, an open starts a
 * new instance, as always.
 * @wait 0: returns once the instance has accepted the request.  Non-zero:
 * returns once the supervisor and its auxiliary processes have all exited
 * (the directory lock is free); a smart stop waits for the other processes'
 * handles, for as long as they stay open.
 * Errors: ENOTRUNNING (no instance serves @dir), ENOENT (no such
 * directory), EINVAL (bad mode), EBUSY (a smart stop with @wait from a
 * process that has @dir open itself: it would wait for ever), EPROTO (the
 * supervisor did not answer: an older walrus?).
 */
#define WALRUS_STOP_SMART     1
#define WALRUS_STOP_FAST      2
#define WALRUS_STOP_IMMEDIATE 3
WALRUS_API int walrus_stop(const char *dir, int mode, int wait);

/*
 * Promotes the standby running on @dir (a directory holding walrus.standby,
 * see docs/architecture.md "Hot standby"): its sources stop, the WAL they
 * made durable is replayed, a new timeline begins where replay ended, and
 * once the end-of-recovery checkpoint is written the instance accepts
 * writes.  Returns when that is done.  Errors: ENOTRUNNING (no instance
 * serves @dir), EINVAL (not a standby, or not consistent yet), EIO (the
 * promotion failed: the message says why; the instance stops).
 */
WALRUS_API int walrus_promote(const char *dir);

/*
 * Messages.  The library never writes to the caller's stdout or stderr.
 * What the instance's processes have to say goes to DIR/log/walrus.log; a
 * process with a handle open appends its own lines there too (from level
 * log_min_messages), and hands them to the handler installed here.
 *
 * @fn is called with each message of this process at @min_level or above
 * (WALRUS_LOG_*): @line is the message alone, without time stamp, level or
 * newline, valid during the call only.  The handler is process-wide (one
 * for all handles), may be installed or replaced at any time, and may be
 * called from any thread of the process that uses walrus, while that thread
 * is inside a walrus call; calls are serialised, never concurrent.  It must
 * not call back into walrus, and must not fork() or block for long: other
 * threads' messages wait for it.  When walrus_set_log_handler returns, the
 * previous handler is no longer running and is not called again, so its
 * @arg may be freed.  NULL @fn removes the handler.
 */
enum walrus_log_level {
	WALRUS_LOG_DEBUG = 0,   /* details for developers */
	WALRUS_LOG_LOG = 1,     /* events worth a line: an option ignored, a checkpoint */
	WALRUS_LOG_WARNING = 2, /* something odd that the engine worked around */
	WALRUS_LOG_ERROR = 3,   /* an operation failed (the call returns an error too) */
	WALRUS_LOG_FATAL = 4,   /* a process of the instance could not go on */
	WALRUS_LOG_PANIC = 5,   /* the instance restarts from its WAL (a call returns EPANIC) */
};
typedef void (*walrus_log_fn)(void *arg, int level, const char *line);
WALRUS_API void walrus_set_log_handler(walrus_log_fn fn, void *arg, int min_level);

/* ---------------------------------------------------------------- key-value API */

/*
 * Keys are binary strings of 1..WALRUS_MAX_KEY bytes, ordered bytewise
 * (memcmp; a prefix sorts first); values are 0..WALRUS_MAX_VALUE bytes.
 * Every call returns WALRUS_OK or an error code with a message in
 * walrus_errmsg(); WALRUS_ERESTART means the instance crashed and restarted
 * under the handle: close it and open again (committed data is safe).
 *
 * shared_buffers limits values too: a value over a quarter of a page or
 * so takes one page (WALRUS_PAGE_SIZE bytes) per WALRUS_PAGE_SIZE - 56
 * bytes, and a write keeps all of its pages in the buffer pool at once, plus
 * 8 for the tree, in at most a quarter of the pool.  So with 8 KiB pages a
 * value of N bytes needs shared_buffers of at least 32kB x (ceil(N / 8136)
 * + 8), and a batch the same for its values together.  With the default
 * shared_buffers (128MB) the largest value is WALRUS_MAX_VALUE_DEFAULT_POOL
 * bytes (about 31.7 MiB; 31.5 MiB with 4 KiB pages); WALRUS_MAX_VALUE needs
 * shared_buffers of 259MB (260MB).  Over either limit a write fails with
 * WALRUS_ETOOBIG and changes nothing; the message names the shared_buffers
 * the value needs.
 *
 * The largest key is smaller with 4 KiB pages, so that every split of a
 * page still finds two halves that fit.
 */
#define WALRUS_MAX_VALUE (64u << 20)
#if WALRUS_PAGE_SIZE == 8192
#define WALRUS_MAX_KEY                1024u
#define WALRUS_MAX_VALUE_DEFAULT_POOL 33259968u /* (128MB / 32kB - 8) x 8136 */
#elif WALRUS_PAGE_SIZE == 4096
#define WALRUS_MAX_KEY                480u
#define WALRUS_MAX_VALUE_DEFAULT_POOL 33063360u /* (128MB / 16kB - 8) x 4040 */
#else
#error "walrus is built with 4096- or 8192-byte pages"
#endif

/* WALRUS_MAX_KEY of the library itself, for bindings that cannot read it here. */
WALRUS_API size_t walrus_max_key(void);

/*
 * Per-write durability (the @flags of writes).  0 means "as the handle's
 * synchronous_commit option says", which is on unless the handle was opened
 * with synchronous_commit=off: by default a write returns once it is
 * durable.  WALRUS_SYNC and WALRUS_ASYNC override the option for one write;
 * both at once is WALRUS_EINVAL.  An asynchronous write is durable within
 * wal_writer_delay (3 x that at worst), or after walrus_sync().
 */
#define WALRUS_SYNC  0x1 /* return once the write is durable (group commit) */
#define WALRUS_ASYNC 0x2 /* return at once; durable within wal_writer_delay */

WALRUS_API int walrus_put(walrus *db, const void *key, size_t klen, const void *val, size_t vlen,
                          int flags);
/* WALRUS_ENOTFOUND when absent; else *val is malloc'd (free with walrus_free). */
WALRUS_API int walrus_get(walrus *db, const void *key, size_t klen, void **val, size_t *vlen);
/* Into the caller's buffer: *vlen gets the value's size; ETOOBIG (nothing
 * copied) when it exceeds @cap. */
WALRUS_API int walrus_get_into(walrus *db, const void *key, size_t klen, void *buf, size_t cap,
                               size_t *vlen);
/* WALRUS_ENOTFOUND when the key was absent (nothing written). */
WALRUS_API int walrus_delete(walrus *db, const void *key, size_t klen, int flags);
WALRUS_API void walrus_free(void *p);

/* Atomic write batches: all operations become visible, and survive a
 * crash, together or not at all.  A batch copies keys and values. */
typedef struct walrus_batch walrus_batch;
WALRUS_API walrus_batch *walrus_batch_new(void); /* NULL when out of memory */
WALRUS_API int walrus_batch_put(walrus_batch *b, const void *key, size_t klen, const void *val,
                                size_t vlen);
WALRUS_API int walrus_batch_delete(walrus_batch *b, const void *key, size_t klen);
WALRUS_API size_t walrus_batch_count(const walrus_batch *b);
WALRUS_API void walrus_batch_clear(walrus_batch *b);
WALRUS_API void walrus_batch_free(walrus_batch *b);
/* Applies the batch (left unchanged: clear it to reuse). */
WALRUS_API int walrus_batch_commit(walrus *db, walrus_batch *b, int flags);

/*
 * Ordered iteration over [lo, hi) (NULL = unbounded; hi exclusive), positioned
 * on the first key >= lo.  Under concurrent writes a key present for the whole
 * scan is returned exactly once, and values are never torn.  Key and value
 * pointers stay valid until the iterator moves or closes.  An iterator is
 * used through its handle (the handle rules above apply); after
 * walrus_close of that handle its moves fail with WALRUS_EMISUSE and
 * walrus_iter_valid says 0: close it still, to free it.
 */
typedef struct walrus_iter walrus_iter;
WALRUS_API int walrus_iter_open(walrus *db, const void *lo, size_t lolen, const void *hi,
                                size_t hilen, walrus_iter **it);
WALRUS_API int walrus_iter_seek(walrus_iter *it, const void *key,
                                size_t klen); /* first key >= key */
WALRUS_API int walrus_iter_seek_last(walrus_iter *it);
WALRUS_API int walrus_iter_next(walrus_iter *it);
WALRUS_API int walrus_iter_prev(walrus_iter *it);
WALRUS_API int walrus_iter_valid(const walrus_iter *it); /* 1 on a key, 0 past either end */
WALRUS_API void walrus_iter_key(const walrus_iter *it, const void **key, size_t *klen);
WALRUS_API void walrus_iter_value(const walrus_iter *it, const void **val, size_t *vlen);
WALRUS_API void walrus_iter_close(walrus_iter *it);

/*
 * Snapshots.  walrus_snapshot_take returns at once (no copy): every read
 * through the snapshot sees the store as of one commit, all of a batch or
 * transaction or none of it, and nothing committed later.  Readers never
 * block writers, nor writers readers.  While any snapshot lives, writers
 * keep the values it needs in shared memory (option snapshot_memory; when
 * it is full, the oldest snapshots lose theirs); with
 * old_snapshot_threshold set, reads through an older snapshot fail.  Either
 * way: WALRUS_ESNAPSHOT, and the snapshot stays to be released.
 *
 * A snapshot belongs to the handle that took it (the handle rules above
 * apply): read through it with that handle (another: WALRUS_EMISUSE).
 * After walrus_close of its handle its reads fail with WALRUS_EMISUSE, and
 * it must still be released.  Snapshots do not outlive the instance: after
 * a restart their reads fail with WALRUS_ERESTART, as every call does.  On a
 * standby in recovery, snapshots and transactions read as of one replayed
 * commit of the primary, whole (a transaction that wrote is refused at
 * commit: WALRUS_EREADONLY).  At most 4096 snapshots and transactions live
 * at once per instance (WALRUS_ELIMIT).
 */
typedef struct walrus_snapshot walrus_snapshot;
WALRUS_API int walrus_snapshot_take(walrus *db, walrus_snapshot **snap);
/* Ends it and frees it; its iterators become dead (their calls: EMISUSE). */
WALRUS_API void walrus_snapshot_release(walrus_snapshot *snap);
/* walrus_get, walrus_get_into and walrus_iter_open as of @snap. */
WALRUS_API int walrus_get_at(walrus *db, const walrus_snapshot *snap, const void *key, size_t klen,
                             void **val, size_t *vlen);
WALRUS_API int walrus_get_into_at(walrus *db, const walrus_snapshot *snap, const void *key,
                                  size_t klen, void *buf, size_t cap, size_t *vlen);
WALRUS_API int walrus_iter_open_at(walrus *db, const walrus_snapshot *snap, const void *lo,
                                   size_t lolen, const void *hi, size_t hilen, walrus_iter **it);

/*
 * Transactions (optimistic, as RocksDB's OptimisticTransactionDB).  A
 * transaction reads as of a snapshot taken at walrus_txn_begin, with its own
 * writes over it (an iterator sees the writes made before it was opened);
 * its writes are buffered, and walrus_txn_commit applies them as one atomic
 * batch with the usual durability (WALRUS_SYNC, WALRUS_ASYNC or 0 for the
 * handle's synchronous_commit): all or nothing across crashes, on a standby
 * and in a restore.
 *
 * Serializable by default: the commit fails with WALRUS_ECONFLICT, nothing
 * applied, when a key the transaction read (present or not), a range it
 * iterated (an insert into it counts: phantoms) or a key it wrote was
 * changed by a commit after its snapshot; the caller runs it again.  A
 * transaction that wrote nothing needs no check (its snapshot is one serial
 * point); a durable commit of it returns once what it read is durable (a
 * write is visible to others before its own flush returns).  WALRUS_TXN_SNAPSHOT asks for snapshot
 * isolation instead: only a key it wrote conflicts (write skew is then possible).
 *
 * A transaction is used through the handle that began it, one call at a
 * time.  walrus_txn_commit and walrus_txn_abort end it, whatever they
 * return; any later call on it (a second commit included) fails with
 * WALRUS_EMISUSE, as do calls after walrus_close of its handle or in a
 * child created by fork().  walrus_txn_free frees it (aborting it if open).
 */
typedef struct walrus_txn walrus_txn;
#define WALRUS_TXN_SNAPSHOT 0x1 /* snapshot isolation: write-write conflicts only */
WALRUS_API int walrus_txn_begin(walrus *db, int flags, walrus_txn **txn);
WALRUS_API int walrus_txn_get(walrus_txn *txn, const void *key, size_t klen, void **val,
                              size_t *vlen);
WALRUS_API int walrus_txn_get_into(walrus_txn *txn, const void *key, size_t klen, void *buf,
                                   size_t cap, size_t *vlen);
WALRUS_API int walrus_txn_put(walrus_txn *txn, const void *key, size_t klen, const void *val,
                              size_t vlen);
WALRUS_API int walrus_txn_delete(walrus_txn *txn, const void *key, size_t klen);
WALRUS_API int walrus_txn_iter_open(walrus_txn *txn, const void *lo, size_t lolen, const void *hi,
                                    size_t hilen, walrus_iter **it);
WALRUS_API int walrus_txn_commit(walrus_txn *txn, int flags);
WALRUS_API int walrus_txn_abort(walrus_txn *txn);
WALRUS_API void walrus_txn_free(walrus_txn *txn);

/*
 * Named key spaces (LMDB's named databases, RocksDB's column families): each
 * an ordered key space of its own, stored as its own relation (its own data
 * files, DIR/base/<n>), apart from the default space that the calls above
 * read and write.  Names are 1 to 64 bytes of letters, digits, '_', '-'
 * and '.' (WALRUS_EINVAL otherwise).
 *
 * walrus_space_create and walrus_space_drop are durable when they return
 * (WALRUS_EEXIST, WALRUS_ENOTFOUND); a drop gives the space's files back to
 * the file system once every call reading the space has finished, and a
 * call on the space after the drop fails with WALRUS_ENOTFOUND ("key space
 * "NAME" was dropped"), in every handle and process.  walrus_space_open
 * returns the handle's handle of the space (the same one each time, until
 * the space is dropped), or creates the space first with
 * WALRUS_SPACE_CREATE; a space handle belongs to its walrus handle and is
 * freed by walrus_close (using it with another: WALRUS_EMISUSE).
 *
 * The _in calls are the calls above on space @sp (NULL: the default
 * space).  A batch or a transaction may hold writes to several spaces: its
 * commit is atomic across all of them.  Backups, restores, standbys,
 * walrus_compact, walrus_verify and walrus_stats cover every space.
 * walrus_space_list gives the names in order in one allocation (free it
 * with walrus_free).
 */
typedef struct walrus_space walrus_space;
#define WALRUS_SPACE_CREATE 0x1 /* walrus_space_open: create it if missing */
WALRUS_API int walrus_space_create(walrus *db, const char *name);
WALRUS_API int walrus_space_open(walrus *db, const char *name, int flags, walrus_space **sp);
WALRUS_API int walrus_space_drop(walrus *db, const char *name);
WALRUS_API int walrus_space_list(walrus *db, char ***names, size_t *n);
WALRUS_API const char *walrus_space_name(const walrus_space *sp);
WALRUS_API int walrus_put_in(walrus *db, walrus_space *sp, const void *key, size_t klen,
                             const void *val, size_t vlen, int flags);
WALRUS_API int walrus_get_in(walrus *db, walrus_space *sp, const void *key, size_t klen, void **val,
                             size_t *vlen);
WALRUS_API int walrus_get_into_in(walrus *db, walrus_space *sp, const void *key, size_t klen,
                                  void *buf, size_t cap, size_t *vlen);
WALRUS_API int walrus_delete_in(walrus *db, walrus_space *sp, const void *key, size_t klen,
                                int flags);
WALRUS_API int walrus_batch_put_in(walrus_batch *b, walrus_space *sp, const void *key, size_t klen,
                                   const void *val, size_t vlen);
WALRUS_API int walrus_batch_delete_in(walrus_batch *b, walrus_space *sp, const void *key,
                                      size_t klen);
WALRUS_API int walrus_iter_open_in(walrus *db, walrus_space *sp, const void *lo, size_t lolen,
                                   const void *hi, size_t hilen, walrus_iter **it);
WALRUS_API int walrus_get_at_in(walrus *db, const walrus_snapshot *snap, walrus_space *sp,
                                const void *key, size_t klen, void **val, size_t *vlen);
WALRUS_API int walrus_get_into_at_in(walrus *db, const walrus_snapshot *snap, walrus_space *sp,
                                     const void *key, size_t klen, void *buf, size_t cap,
                                     size_t *vlen);
WALRUS_API int walrus_iter_open_at_in(walrus *db, const walrus_snapshot *snap, walrus_space *sp,
                                      const void *lo, size_t lolen, const void *hi, size_t hilen,
                                      walrus_iter **it);
WALRUS_API int walrus_txn_get_in(walrus_txn *txn, walrus_space *sp, const void *key, size_t klen,
                                 void **val, size_t *vlen);
WALRUS_API int walrus_txn_get_into_in(walrus_txn *txn, walrus_space *sp, const void *key,
                                      size_t klen, void *buf, size_t cap, size_t *vlen);
WALRUS_API int walrus_txn_put_in(walrus_txn *txn, walrus_space *sp, const void *key, size_t klen,
                                 const void *val, size_t vlen);
WALRUS_API int walrus_txn_delete_in(walrus_txn *txn, walrus_space *sp, const void *key,
                                    size_t klen);
WALRUS_API int walrus_txn_iter_open_in(walrus_txn *txn, walrus_space *sp, const void *lo,
                                       size_t lolen, const void *hi, size_t hilen,
                                       walrus_iter **it);

/*
 * Returns once every write acknowledged so far, by any process of the
 * instance, is durable: what WALRUS_SYNC does after a write, for the
 * WALRUS_ASYNC writes before it (one flush, shared by concurrent callers).
 * With synchronous_standby set, that includes the standby's confirmation,
 * as for WALRUS_SYNC: WALRUS_ESHUTDOWN or WALRUS_ERESTART when the instance
 * stops or crashes during that wait (durable here, not confirmed there).
 */
WALRUS_API int walrus_sync(walrus *db);
/*
 * Ends the current WAL segment (PostgreSQL's pg_switch_wal) so that the
 * archiver can archive it; *lsn (may be NULL) gets the end of that segment,
 * or 0 when nothing was written since the segment began (no switch).
 */
WALRUS_API int walrus_switch_wal(walrus *db, uint64_t *lsn);
/*
 * Writes a named restore point into the WAL (pg_create_restore_point) and
 * makes it durable: `walrus restore --target-name NAME` stops right after
 * it.  NAME: 1 to 63 printable characters.  *lsn (may be NULL) gets the
 * end of its record.
 */
WALRUS_API int walrus_restore_point(walrus *db, const char *name, uint64_t *lsn);

/*
 * Replication slots (PostgreSQL's physical slots): a standby streaming with
 * `--slot NAME` has the primary keep every WAL segment it has not flushed
 * yet, up to max_slot_wal_keep_size behind the redo point (beyond, the slot
 * is invalidated with a WARNING).  A new slot keeps WAL from the last
 * checkpoint's redo point.  Names: 1 to 63 of a-z, A-Z, 0-9, '_', '-'.
 * Listed in walrus_stats ("slots").  Errors: EINVAL (bad name), EBUSY (it
 * exists; drop: a standby streams with it), ELIMIT (max_replication_slots),
 * ENOTFOUND (drop: no such slot), EREADONLY (on a standby).
 */
WALRUS_API int walrus_slot_create(walrus *db, const char *name);
WALRUS_API int walrus_slot_drop(walrus *db, const char *name);
/*
 * Base backup (pg_basebackup's), online: writers keep running.  Requests a
 * checkpoint (spread over checkpoint_completion_target of
 * checkpoint_timeout as a timed one, so that writers barely notice it; with
 * @flags WALRUS_BACKUP_FAST, immediate: the backup starts at once, at the
 * cost of a burst of writes), forces full-page images until the backup ends, copies the
 * data files, then the WAL from the checkpoint's redo point to an end
 * record written at the end, writes DEST/walrus.control and
 * DEST/backup_label (start, checkpoint and end LSN, start time, system
 * identifier, timeline, segment size), and makes everything in DEST, DEST
 * and its parent durable.  DEST must not exist or be an empty directory
 * (WALRUS_EINVAL).  Until it returns WALRUS_OK, DEST holds
 * walrus.backup-incomplete: a killed or failed backup is never mistaken
 * for a good one (walrus_restore and walrus_open refuse it).  One backup at
 * a time per instance (WALRUS_EBUSY).  @progress (may be NULL) is called
 * after each chunk copied (1 MiB) with the bytes done and the total known
 * so far, in the calling thread.  The handle is taken by the steps that
 * talk to the instance (begin, end record, release), not while files are
 * copied: other threads may call on it meanwhile.  A backup ends with its
 * process: if the process exits or dies during it, the instance cancels
 * it (no forced full-page images, no WAL kept for it), and a backup begun
 * meanwhile is not refused for it.  walrus_interrupt()
 * stops it between two chunks: WALRUS_EINTR, DEST left incomplete.
 */
typedef void (*walrus_progress_fn)(uint64_t done_bytes, uint64_t total_bytes, void *arg);
#define WALRUS_BACKUP_FAST 0x1 /* an immediate checkpoint, not a spread one */
WALRUS_API int walrus_backup(walrus *db, const char *dest, int flags, walrus_progress_fn progress,
                             void *arg);
/*
 * Asks the long calls running in this process to stop at their next step
 * and return WALRUS_EINTR (now: walrus_backup).  A call that begins after
 * it is not affected.  Async-signal-safe: meant for a SIGINT handler, as
 * sqlite3_interrupt is.
 */
WALRUS_API void walrus_interrupt(void);
/*
 * Restores the base backup @backup into @newdir (must not exist or be
 * empty) and recovers it: WAL after the backup is taken from @wal_archive
 * (NULL: none; segments named TTTTTTTT + 16 hex digits, following the
 * backup's timeline history) until one is missing, and replayed up to the
 * target: @target_kind NULL or "end" (all of it), "lsn" (@target_value
 * "X/Y"), "time" ("YYYY-MM-DD HH:MM:SS[.fff]" local time, or with "Z" or
 * "+HH:MM", or "@SECONDS[.fff]" since the epoch: records inserted no later)
 * or "name" (a restore point, walrus_restore_point).  Recovery ends there
 * on a new timeline, and @newdir is left an ordinary stopped data
 * directory.  Not on a handle: the instance on @newdir is started and
 * stopped inside.  Errors: WALRUS_EINVAL for a bad argument, a non-empty
 * @newdir, or an incomplete backup; WALRUS_ECORRUPT when the backup lacks a
 * WAL segment it needs (named); the recovery's error (the target not
 * reached: the missing archive segment named).  A failed restore leaves
 * @newdir holding walrus.restore-incomplete (it will not open).
 */
WALRUS_API int walrus_restore(const char *backup, const char *wal_archive, const char *target_kind,
                              const char *target_value, const char *newdir);
/*
 * walrus_restore following a chosen timeline (PostgreSQL's
 * recovery_target_timeline): @target_timeline NULL or "latest" (what
 * walrus_restore does) follows the highest timeline in @wal_archive whose
 * history passes through the backup (a backup taken before a failover
 * recovers the writes of the promoted standby); "current" stays on the
 * backup's timeline; a number follows that timeline (WALRUS_EINVAL when it
 * did not descend from the backup's timeline after the backup's end).
 * Segments are taken from the archive by the followed history; the new
 * timeline is one above every timeline the archive and the backup hold.
 * The archive's copy of the backup's last segment must match the backup's
 * up to its end (WALRUS_ECORRUPT otherwise: another history).
 */
WALRUS_API int walrus_restore_timeline(const char *backup, const char *wal_archive,
                                       const char *target_kind, const char *target_value,
                                       const char *target_timeline, const char *newdir);
/* An immediate checkpoint; returns when it is complete (EIO if it failed). */
WALRUS_API int walrus_checkpoint(walrus *db);
/*
 * Compaction: gives back the space a tree keeps after random inserts or
 * deletes.  Packs the leaves (each leaf takes what fits of its right
 * sibling, leaving a thirty-second of a page free), moves the tree's pages
 * to the front of the data file, runs an immediate checkpoint and punches
 * the file's unused tail out (the file keeps its size; its blocks go back
 * to the file system).  Works in small atomic batches: other writers wait
 * for one batch at a time, readers never.  On a file system that cannot
 * punch holes the space stays with the file (a warning in the log).
 * @stats may be NULL.  Errors: a standby or a full disk refuses it like a
 * write; EIO if the checkpoint failed.
 */
typedef struct walrus_compact_stats {
	uint64_t leaves_merged;     /* leaves emptied into their left sibling and freed */
	uint64_t leaves_poured;     /* leaves that gave their first entries to their left sibling */
	uint64_t pages_moved;       /* pages moved nearer the start of the file */
	uint64_t blocks_before;     /* 8 KiB blocks the tree used before, free ones included */
	uint64_t blocks_after;      /* and after */
	uint64_t blocks_given_back; /* blocks punched out of the data file */
} walrus_compact_stats;
WALRUS_API int walrus_compact(walrus *db, walrus_compact_stats *stats);
/* The instance's counters as a JSON object; free *json with walrus_free. */
WALRUS_API int walrus_stats(walrus *db, char **json);
/*
 * Checks every page checksum and the tree's invariants; @report (may be
 * NULL) is called for each problem with the block it concerns.  Returns
 * WALRUS_OK when clean, WALRUS_ECORRUPT when problems were found.
 */
typedef void (*walrus_report_fn)(void *arg, uint32_t block, const char *msg);
WALRUS_API int walrus_verify(walrus *db, walrus_report_fn report, void *arg);

#ifdef __cplusplus
}
#endif
#endif /* WALRUS_H */
