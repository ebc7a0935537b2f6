/*
 * fdcache.h - the per-process cache of virtual file descriptors, and the
 * engine's single I/O seam.
 *
 * Like PostgreSQL's fd.c (VFDs) and SQLite's VFS: every open, pread, pwrite,
 * fsync, fdatasync, sync_file_range, ftruncate, fallocate (and hole
 * punching), rename, unlink, directory fsync and close of the engine goes through this module, so
 * that the test builds' failpoints and power-loss journal (src/testsupport, compiled to nothing
 * otherwise) plug in at one place.
 *
 * Owns: the table of virtual fds of this process.  A caller holds a small
 * integer handle (fdc_file); at most `bound` real fds are open at once,
 * where bound = min(max_open_files, RLIMIT_NOFILE - fds already open -
 * FDC_RESERVED_FDS).  When a slot is needed, the least recently used real fd
 * is closed, and reopened transparently on the next use with the same flags
 * minus O_CREAT|O_EXCL|O_TRUNC.
 *
 * Write tracking (design rule 4): each handle knows whether it has been
 * written since it was last handed to the checkpointer ("dirty").  Before a
 * dirty fd is closed (LRU eviction or fdc_close), the before-close hook is
 * called with the real fd so the storage layer can hand it over (or fsync);
 * the fd is closed only after the hook returns.  A close() that fails after
 * writes is a PANIC: the kernel may have dropped a write-back error with it.
 *
 * Locks: the cache is per process and shared by all its threads, behind one
 * recursive mutex (fdc_lock) that every call takes for its bookkeeping and
 * lets go during pread, pwrite and the sync calls (the entry is kept busy:
 * the LRU never closes an fd under a system call).  The storage layer takes
 * the same lock around its own per-process tables and the hand-off of fds,
 * so that the before-close hook, called with the lock held, sees them
 * consistent.  A handle must not be closed while another thread uses it.
 * Returns: WALRUS_* codes with a message (wr_error) naming the path and errno;
 * errno is left set to the syscall's errno, so a caller can name it too.
 * The sync calls (fdc_fsync, fdc_fdatasync, fdc_sync_range) only *report*
 * errors: deciding that an fsync error is a PANIC belongs to the caller
 * (storage's data_sync_failed, the WAL's flush), and they are never retried.
 * PANICs on: close() failing on an fd that was written.
 */
#ifndef WALRUS_FDCACHE_H
#define WALRUS_FDCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define FDC_RESERVED_FDS 16 /* left for sockets, logs, and the application */

typedef int fdc_file; /* a handle; never a real fd */
#define FDC_INVALID (-1)

/* (Re)initialises the cache: closes nothing that is open; sets the bound. */
int fdc_init(int64_t max_open_files);
/* The bound in force (after the RLIMIT_NOFILE adjustment). */
int fdc_bound(void);
/* Lowers the bound to @n (at least 1) for fds this process holds outside
 * the cache; handles over it are closed as new ones are opened. */
void fdc_lower_bound(int n);
/* Closes every handle (dirty ones go through the before-close hook first). */
void fdc_close_all(void);
/*
 * Forgets every handle without calling hooks, closing the real fds: after a
 * crash restart, the old instance's fds mean nothing (and fsyncing them would
 * be wrong: recovery rewrites whatever they held).
 */
void fdc_reset(void);

/* Opens now (so errors are reported now); path is kept for reopen and messages. */
int fdc_open(const char *path, int flags, mode_t mode, fdc_file *out);
int fdc_close(fdc_file f);

/* Reads up to len bytes; returns bytes read (short only at EOF) or < 0 error. */
ssize_t fdc_pread(fdc_file f, void *buf, size_t len, off_t off);
/* Writes all of buf (short writes and EINTR handled); marks the handle dirty. */
int fdc_pwrite(fdc_file f, const void *buf, size_t len, off_t off);
int fdc_fsync(fdc_file f);
/*
 * fsync of a raw fd that is not a handle (the checkpointer's received fds, a
 * sender's fd), through the I/O guard and the "fsync" failpoints on @path.
 * Once, never retried; reports the error, the caller decides (a PANIC).
 */
int fdc_fsync_fd(int fd, const char *path);
/*
 * close of a raw fd through the "close" failpoints on @path.  Never retried
 * (not even after EINTR); reports the error: for a written fd the caller
 * PANICs, since the error may be a write-back error reported only once.
 */
int fdc_close_fd(int fd, const char *path);
int fdc_fdatasync(fdc_file f);
/* sync_file_range(2) with its flags; used for write-back hints. */
int fdc_sync_range(fdc_file f, off_t off, off_t len, unsigned int flags);
int fdc_truncate(fdc_file f, off_t len);
int fdc_fallocate(fdc_file f, off_t off, off_t len); /* zero-filled space, posix_fallocate */
/* Gives [off, off + len) back to the file system (a hole that reads as zeroes), size kept. */
int fdc_punch(fdc_file f, off_t off, off_t len);
/* Whether the file has holes: fewer bytes allocated than its size. */
int fdc_sparse(fdc_file f, bool *sparse);
int fdc_size(fdc_file f, off_t *size);
int fdc_advise_willneed(fdc_file f, off_t off, off_t len);

/* The real fd (opening it if needed): for fd passing and io_uring.  Valid
 * while the caller holds fdc_lock or a pin on @f. */
int fdc_fd(fdc_file f, int *fd);
const char *fdc_path(fdc_file f);
/*
 * When the handle's real fd was opened: CLOCK_MONOTONIC nanoseconds read just
 * after open() returned (wr_now_ns), strictly increasing within the process.
 * Comparable across the processes of a machine, for "oldest fd" ordering.
 */
uint64_t fdc_open_seq(fdc_file f);

/*
 * A pinned handle's fd is never closed by the LRU: the WAL keeps the fd it
 * wrote through open until it has flushed it, because an fd opened later
 * may not see a write-back error of those writes (errseq semantics).
 * Pins are counted: every fdc_pin(f, true) needs its fdc_pin(f, false).
 * Pin before fdc_fd() when the fd must outlive the call.
 */
void fdc_pin(fdc_file f, bool pin);

/* The process's storage lock (recursive); see "Locks" above. */
void fdc_lock(void);
void fdc_unlock(void);
void fdc_unlock_scope(int *unused); /* for FDC_LOCKED's cleanup */
/* Holds the storage lock until the enclosing block ends, whatever path leaves it. */
#define FDC_LOCKED()                                                                               \
	fdc_lock();                                                                                \
	int fdc_scope_ __attribute__((cleanup(fdc_unlock_scope), unused)) = 0

/* Dirty = written since the last fdc_clear_dirty (set by fdc_pwrite/fallocate/truncate). */
bool fdc_is_dirty(fdc_file f);
void fdc_clear_dirty(fdc_file f);
/* A caller's tag per handle (the storage layer stores its sync cycle here). */
uint64_t fdc_get_tag(fdc_file f);
void fdc_set_tag(fdc_file f, uint64_t tag);

/* Path operations, all through the seam. */
int fdc_rename(const char *from, const char *to);
/* Fails with WALRUS_EBUSY (errno EEXIST) instead of replacing an existing @to. */
int fdc_rename_noreplace(const char *from, const char *to);
int fdc_unlink(const char *path);
int fdc_mkdir(const char *path, mode_t mode); /* EEXIST is not an error */
int fdc_fsync_path(const char *path);         /* open + fsync + close: a file or a directory */
int fdc_fsync_parent(const char *path);       /* fsync the directory that holds path */
/*
 * fsyncs every regular file and directory under @dir, and @dir: what an
 * instance that crashed wrote may still sit in the page cache only (its
 * processes died before their fsyncs), and recovery must not build on it
 * before it is durable.  Stops at the first error.
 */
int fdc_sync_tree(const char *dir, uint64_t *nfiles);

/* ---------------------------------------------------------------- hooks */

/*
 * Called before a dirty real fd is closed; returning non-zero aborts the
 * close (the handle stays open) and the error is returned to the caller.
 */
typedef int (*fdc_before_close_fn)(fdc_file f, int fd, const char *path);
void fdc_set_before_close(fdc_before_close_fn fn);

/*
 * The I/O guard: enter is called before every write-class operation (pwrite,
 * fsync, fdatasync, sync_range, truncate, fallocate, rename, unlink) and may
 * refuse it with an error code (the instance crashed); exit after it.  The
 * engine uses it so that a crash restart can wait for in-flight I/O of live
 * backends to finish and refuse new I/O to the old instance's files.
 */
typedef int (*fdc_guard_enter_fn)(void);
typedef void (*fdc_guard_exit_fn)(void);
void fdc_set_io_guard(fdc_guard_enter_fn enter, fdc_guard_exit_fn exit);

/* Observes every successful data write (tests: WAL-before-data, sort order). */
typedef void (*fdc_write_observer_fn)(const char *path, off_t off, size_t len, const void *buf);
void fdc_set_write_observer(fdc_write_observer_fn fn);

/*
 * Bracket I/O submitted outside the seam (io_uring) on @f: runs the guard
 * (its error is returned; then fdc_io_end must not be called) and asks the
 * failpoints (test builds) about @op ("pwrite", "fdatasync", ...): *injected is the errno
 * the caller must treat as the kernel's answer, or 0.
 */
int fdc_io_begin(fdc_file f, const char *op, int *injected);
void fdc_io_end(void);
/*
 * A named step of a multi-step change (test builds: the failpoint op "step",
 * matched against "POINT PATH"): 0 to go on, or the errno a failpoint
 * injects (KILL and STOP act here).  Always 0 in other builds.
 */
int fdc_step(const char *point, const char *path);
/*
 * The power-loss journal's view of I/O submitted outside the seam: an intent
 * before a write is submitted (TS_PL_NONE when the journal is off), done once it
 * completed, and synced once a flush of @f submitted after every write it
 * covers completed (with IOSQE_IO_DRAIN, when its completion is reaped after
 * theirs).  No-ops unless WALRUS_POWERLOSS is set.
 */
uint64_t fdc_io_write_intent(fdc_file f, off_t off, size_t len);
void fdc_io_write_done(fdc_file f, uint64_t intent);
void fdc_io_synced(fdc_file f);

/* ---------------------------------------------------------------- stats */

typedef struct fdc_stats {
	uint64_t opens;   /* real open() calls */
	uint64_t reopens; /* of which reopens after LRU closing */
	uint64_t lru_closes;
	uint64_t hook_calls; /* before-close hook invocations */
	int open_now;        /* real fds open now */
	int handles;         /* handles in use */
} fdc_stats;
void fdc_get_stats(fdc_stats *s);

/* ---------------------------------------------------------------- test support */

/* True while @f has a real fd open (not closed by the LRU). */
bool fdc_debug_is_open(fdc_file f);

#endif /* WALRUS_FDCACHE_H */
