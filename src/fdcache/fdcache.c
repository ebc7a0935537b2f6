/*
 * fdcache.c - virtual file descriptors: a bounded cache of real fds, and the
 * engine's single I/O seam.
 *
 * The engine may have more files than the process may keep open (relations
 * times segments, WAL segments), so callers hold handles and this module
 * keeps at most `bound` real fds, closing the least recently used one when
 * it needs a slot and reopening it on the next use.  Because every syscall of
 * the engine's file I/O is made here, the I/O guard, the write observer and,
 * in test builds, the failpoints and the power-loss journal (src/testsupport)
 * apply to all of them.
 *
 * Interface: see fdcache.h.  Test support: fdc_debug_is_open.
 *
 * Notes:
 * - Entries live in chunks that never move, and refer to each other by
 *   index (the LRU list, the free list); an entry pointer stays valid while
 *   its handle is open.
 * - Threads: the cache is per process, shared by every handle of the
 *   application's threads, behind one mutex, recursive per thread (fdc_lock).  It guards
 *   the bookkeeping only: pread, pwrite and the sync calls run with it
 *   released and the entry marked busy, so the LRU never closes an fd under
 *   a system call and one thread's fdatasync never holds up another's read.
 *   (With the power-loss journal on, the syscall stays under the lock so the
 *   journal's intent, syscall and done records of two threads never mix.)
 * - A failing call leaves errno set to the syscall's (or injected) errno, so
 *   a caller deciding to PANIC can name it.
 */
#include "fdcache/fdcache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "testsupport/testsupport.h"

#define FDC_DEFAULT_MAX_OPEN 1000 /* used if a call comes before fdc_init */
#define FDC_NONE             (-1) /* end of an index list */

typedef struct fdc_entry {
	char *path;
	int flags; /* as given to fdc_open; a reopen drops O_CREAT|O_EXCL|O_TRUNC */
	mode_t mode;
	int fd;                 /* real fd, or -1 while closed by the LRU */
	int lru_prev, lru_next; /* towards the most / least recently used */
	int next_free;
	bool in_use;
	bool dirty;
	bool closing; /* in its before-close hook: not a victim for eviction */
	int pins;     /* fdc_pin: never closed by the LRU while > 0 */
	int busy;     /* system calls in flight on fd, the lock released */
	uint64_t tag;
	uint64_t open_seq;
} fdc_entry;

#define FDC_CHUNK_SHIFT 8
#define FDC_CHUNK       (1 << FDC_CHUNK_SHIFT)
#define FDC_MAX_CHUNKS  4096 /* a million handles */

static fdc_entry *fdc_chunks[FDC_MAX_CHUNKS];
static int fdc_nentries; /* entries ever allocated (used + free) */
static int fdc_free_head = FDC_NONE;
static int fdc_lru_head = FDC_NONE; /* most recently used open entry */
static int fdc_lru_tail = FDC_NONE; /* least recently used: the next victim */
static int fdc_max_fds;             /* the bound; 0 until fdc_init */
static uint64_t fdc_seq;
static fdc_stats fdc_st;

static fdc_before_close_fn fdc_before_close;
static fdc_guard_enter_fn fdc_guard_enter;
static fdc_guard_exit_fn fdc_guard_exit;
static fdc_write_observer_fn fdc_observer;

/*
 * A plain mutex made recursive by a per-thread depth: the storage layer
 * holds it around calls into this module, and a plain mutex can be released
 * by a forked child's handler (a recursive one names its owner by thread
 * id, which the child's only thread does not have).
 */
static pthread_mutex_t fdc_mu = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int fdc_depth;
static pthread_once_t fdc_fork_once = PTHREAD_ONCE_INIT;

static inline fdc_entry *fdc_ent(int i)
{
	return &fdc_chunks[i >> FDC_CHUNK_SHIFT][i & (FDC_CHUNK - 1)];
}

/* ---------------------------------------------------------------- the lock */

/*
 * fork() while another thread holds the lock would leave the child a lock
 * nobody can release and a half-updated table: the fork waits for it, and
 * both sides let it go after.
 */
static void fdc_fork_prepare(void)
{
	fdc_lock();
}

static void fdc_fork_release(void)
{
	fdc_unlock();
}

static void fdc_fork_hook(void)
{
	if (pthread_atfork(fdc_fork_prepare, fdc_fork_release, fdc_fork_release) != 0)
		wr_log(WR_WARNING, "could not install the fd cache's fork handlers");
}

void fdc_lock(void)
{
	(void)pthread_once(&fdc_fork_once, fdc_fork_hook);
	if (fdc_depth++ == 0 && pthread_mutex_lock(&fdc_mu) != 0)
		wr_panic("could not lock the fd cache");
}

void fdc_unlock(void)
{
	if (WR_UNLIKELY(fdc_depth <= 0))
		wr_panic("fd cache lock released more often than taken");
	if (--fdc_depth == 0 && pthread_mutex_unlock(&fdc_mu) != 0)
		wr_panic("could not unlock the fd cache");
}

void fdc_unlock_scope(int *unused)
{
	(void)unused;
	fdc_unlock();
}

/* ---------------------------------------------------------------- errors */

/* Records "could not WHAT KIND "PATH": <errno text>" and leaves errno = err. */
static int fdc_syserr_kind(int err, const char *what, const char *kind, const char *path)
{
	errno = err;
	int rc = wr_error(wr_errno_code(err), "could not %s %s \"%s\": %m", what, kind, path);
	errno = err;
	return rc;
}

static int fdc_syserr(int err, const char *what, const char *path)
{
	return fdc_syserr_kind(err, what, "file", path);
}

static fdc_entry *fdc_get(fdc_file f)
{
	if (f < 0 || f >= fdc_nentries || !fdc_ent(f)->in_use)
		return NULL;
	return fdc_ent(f);
}

/* Marks @e busy and lets the lock go for a system call on its fd; false: keep it. */
static bool fdc_release_for_io(fdc_entry *e)
{
	e->busy++;
	if (ts_pl_enabled())
		return false;
	fdc_unlock();
	return true;
}

static void fdc_retake_after_io(fdc_entry *e, bool released)
{
	int err = errno;
	if (released)
		fdc_lock();
	WR_ASSERT(e->busy > 0);
	e->busy--;
	errno = err;
}

static int fdc_bad_handle(fdc_file f)
{
	errno = EBADF;
	return wr_error(WALRUS_EINVAL, "invalid fd cache handle %d", f);
}

/* ---------------------------------------------------------------- init */

static int fdc_count_open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (d == NULL)
		return -1;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL)
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* the directory stream's own fd */
}

int fdc_init(int64_t max_open_files)
{
	FDC_LOCKED();
	if (max_open_files < 1)
		return wr_error(WALRUS_EINVAL, "max_open_files must be at least 1, not %lld",
		                (long long)max_open_files);
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return wr_error(WALRUS_EINTERNAL, "could not get RLIMIT_NOFILE: %m");
	int open_fds = fdc_count_open_fds();
	if (open_fds < 0)
		return wr_error(WALRUS_EINTERNAL, "could not list /proc/self/fd: %m");
	/* Our own open fds are inside the bound, not in the way of it. */
	int64_t others = open_fds - fdc_st.open_now;
	int64_t avail = INT32_MAX;
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (rlim_t)INT32_MAX)
		avail = (int64_t)rl.rlim_cur - others - FDC_RESERVED_FDS;
	if (avail < 1)
		return wr_error(WALRUS_ELIMIT,
		                "too few file descriptors: RLIMIT_NOFILE is %llu, %lld are open "
		                "and %d are reserved",
		                (unsigned long long)rl.rlim_cur, (long long)others,
		                FDC_RESERVED_FDS);
	int rc = ts_failpoints_from_env();
	if (rc != 0)
		return rc;
	fdc_max_fds = (int)WR_MIN(max_open_files, avail);
	return 0;
}

int fdc_bound(void)
{
	FDC_LOCKED();
	return fdc_max_fds;
}

static void fdc_ensure_init(void)
{
	if (fdc_max_fds == 0 && fdc_init(FDC_DEFAULT_MAX_OPEN) != 0)
		fdc_max_fds = 1; /* keep working: one real fd at a time */
}

void fdc_lower_bound(int n)
{
	FDC_LOCKED();
	fdc_ensure_init();
	if (n >= 1 && n < fdc_max_fds)
		fdc_max_fds = n;
}

/* ---------------------------------------------------------------- LRU list */

static void fdc_lru_unlink(int i)
{
	fdc_entry *e = fdc_ent(i);
	if (e->lru_prev != FDC_NONE)
		fdc_ent(e->lru_prev)->lru_next = e->lru_next;
	else
		fdc_lru_head = e->lru_next;
	if (e->lru_next != FDC_NONE)
		fdc_ent(e->lru_next)->lru_prev = e->lru_prev;
	else
		fdc_lru_tail = e->lru_prev;
	e->lru_prev = e->lru_next = FDC_NONE;
}

static void fdc_lru_push_head(int i)
{
	fdc_entry *e = fdc_ent(i);
	e->lru_prev = FDC_NONE;
	e->lru_next = fdc_lru_head;
	if (fdc_lru_head != FDC_NONE)
		fdc_ent(fdc_lru_head)->lru_prev = i;
	fdc_lru_head = i;
	if (fdc_lru_tail == FDC_NONE)
		fdc_lru_tail = i;
}

/* ---------------------------------------------------------------- real open and close */

/*
 * Closes the real fd of entry @i.  With @hooks, a dirty fd goes through the
 * before-close hook first, and a failed close of a written fd PANICs; without
 * (fdc_reset) the fd is just dropped.
 */
static int fdc_close_real(int i, bool hooks)
{
	bool was_dirty = fdc_ent(i)->dirty;
	if (hooks && was_dirty && fdc_before_close != NULL) {
		fdc_ent(i)->closing = true;
		fdc_st.hook_calls++;
		int rc = fdc_before_close(i, fdc_ent(i)->fd, fdc_ent(i)->path);
		fdc_ent(i)->closing = false; /* the hook may have moved the array */
		if (rc != 0)
			return rc;
	}
	fdc_entry *e = fdc_ent(i);
	int injected = ts_fp_check("close", e->path, NULL);
	/*
	 * close() is never retried, not even after EINTR: Linux releases the fd
	 * before reporting anything, so a retry could close an fd that another
	 * open() has just been given.
	 */
	int rc = close(e->fd);
	int err = errno;
	if (injected > 0) {
		rc = -1;
		err = injected;
	}
	fdc_lru_unlink(i);
	e->fd = -1;
	fdc_st.open_now--;
	if (rc == 0 || !hooks)
		return 0;
	/*
	 * close() reports write-back errors of some file systems (NFS, FUSE, and
	 * an interrupted flush).  The kernel reports such an error once: with the
	 * fd gone, no later fsync through another fd is guaranteed to see it, so
	 * data we wrote may be lost without anyone noticing.  Only WAL replay can
	 * restore it.
	 */
	if (was_dirty) {
		errno = err;
		wr_panic("could not close file \"%s\" after writing: %m", e->path);
	}
	errno = err;
	wr_log(WR_WARNING, "could not close file \"%s\": %m", e->path);
	return 0;
}

/* Closes the least recently used real fd; WALRUS_ELIMIT if there is none to close. */
static int fdc_evict_one(void)
{
	int victim = fdc_lru_tail;
	while (victim != FDC_NONE &&
	       (fdc_ent(victim)->closing || fdc_ent(victim)->pins > 0 || fdc_ent(victim)->busy > 0))
		victim = fdc_ent(victim)->lru_prev;
	if (victim == FDC_NONE)
		return wr_error(WALRUS_ELIMIT, "no file descriptor of the fd cache can be closed");
	int rc = fdc_close_real(victim, true);
	if (rc == 0)
		fdc_st.lru_closes++;
	return rc;
}

/* open(2) through the failpoints, EINTR retried (a slow device or FIFO may be interrupted). */
static int fdc_sys_open(const char *path, int flags, mode_t mode)
{
	/* "open" failpoints match both; "open_direct" only an open with O_DIRECT. */
	int injected = ts_fp_check((flags & O_DIRECT) ? "open_direct" : "open", path, NULL);
	if (injected > 0) {
		errno = injected;
		return -1;
	}
	uint64_t pl = (flags & O_CREAT) && ts_pl_enabled() ? ts_pl_create_intent(path) : TS_PL_NONE;
	int fd;
	do
		fd = open(path, flags | O_CLOEXEC, mode);
	while (fd < 0 && errno == EINTR);
	if (fd >= 0 && pl != TS_PL_NONE) {
		int err = errno;
		ts_pl_done(pl);
		errno = err;
	}
	return fd;
}

/*
 * Opens @path, with a slot under the bound if @cached (a short-lived fd, as
 * for a directory fsync, lives in FDC_RESERVED_FDS instead).  The kernel may
 * still refuse with EMFILE/ENFILE (fds opened behind our back, the system
 * table full): then one more of ours is given up and the open tried once
 * more.
 */
static int fdc_open_slot(const char *path, int flags, mode_t mode, bool cached, int *out)
{
	fdc_ensure_init();
	while (cached && fdc_st.open_now >= fdc_max_fds) {
		int rc = fdc_evict_one();
		if (rc != 0)
			return rc;
	}
	int fd = fdc_sys_open(path, flags, mode);
	if (fd < 0 && (errno == EMFILE || errno == ENFILE) && fdc_st.open_now > 0) {
		int err = errno;
		if (fdc_evict_one() != 0)
			return fdc_syserr(err, "open", path);
		fd = fdc_sys_open(path, flags, mode);
	}
	if (fd < 0)
		return fdc_syserr(errno, "open", path);
	*out = fd;
	return 0;
}

/*
 * The open sequence is CLOCK_MONOTONIC nanoseconds, so "the oldest fd of a
 * file" compares across processes (the checkpointer keeps the oldest fd it
 * is sent).  It is read *after* open() returned: then every fd's real open
 * precedes its stamp, and every write through an fd follows that fd's stamp,
 * so the fd with the smallest stamp was opened before every write through
 * any fd with a larger one, which is what its fsync must cover (errseq_t
 * samples the error state at open).  Strictly increasing within a process.
 */
static uint64_t fdc_next_seq(void)
{
	uint64_t now = wr_now_ns();
	fdc_seq = now > fdc_seq ? now : fdc_seq + 1;
	return fdc_seq;
}

static void fdc_attach_fd(int i, int fd)
{
	fdc_ent(i)->fd = fd;
	fdc_ent(i)->open_seq = fdc_next_seq();
	fdc_lru_push_head(i);
	fdc_st.open_now++;
	fdc_st.opens++;
}

/* Makes @f usable: reopens it if the LRU closed it, and marks it most recently used. */
static int fdc_touch(fdc_file f)
{
	fdc_entry *e = fdc_get(f);
	if (e == NULL)
		return fdc_bad_handle(f);
	if (e->fd >= 0) {
		if (fdc_lru_head != f) {
			fdc_lru_unlink(f);
			fdc_lru_push_head(f);
		}
		return 0;
	}
	int fd;
	int flags = e->flags & ~(O_CREAT | O_EXCL | O_TRUNC);
	int rc = fdc_open_slot(e->path, flags, e->mode, true, &fd);
	if (rc != 0)
		return rc;
	fdc_attach_fd(f, fd);
	fdc_st.reopens++;
	return 0;
}

/* ---------------------------------------------------------------- handles */

static int fdc_new_entry(void)
{
	if (fdc_free_head != FDC_NONE) {
		int i = fdc_free_head;
		fdc_free_head = fdc_ent(i)->next_free;
		return i;
	}
	int chunk = fdc_nentries >> FDC_CHUNK_SHIFT;
	if (chunk >= FDC_MAX_CHUNKS)
		return FDC_NONE;
	if (fdc_chunks[chunk] == NULL) {
		fdc_chunks[chunk] = calloc(FDC_CHUNK, sizeof(fdc_entry));
		if (fdc_chunks[chunk] == NULL)
			return FDC_NONE;
	}
	return fdc_nentries++;
}

static void fdc_free_entry(int i)
{
	fdc_entry *e = fdc_ent(i);
	free(e->path);
	memset(e, 0, sizeof(*e));
	e->fd = -1;
	e->next_free = fdc_free_head;
	fdc_free_head = i;
	fdc_st.handles--;
}

int fdc_open(const char *path, int flags, mode_t mode, fdc_file *out)
{
	FDC_LOCKED();
	*out = FDC_INVALID;
	int fd;
	int rc = fdc_open_slot(path, flags, mode, true, &fd);
	if (rc != 0)
		return rc;
	char *copy = strdup(path);
	int i = copy ? fdc_new_entry() : FDC_NONE;
	if (i == FDC_NONE) {
		free(copy);
		close(fd); /* nothing written through it yet */
		return wr_error(WALRUS_ENOMEM, "out of memory opening file \"%s\"", path);
	}
	fdc_entry *e = fdc_ent(i);
	memset(e, 0, sizeof(*e));
	e->path = copy;
	e->flags = flags;
	e->mode = mode;
	e->in_use = true;
	e->lru_prev = e->lru_next = e->next_free = FDC_NONE;
	fdc_attach_fd(i, fd);
	fdc_st.handles++;
	*out = i;
	return 0;
}

int fdc_close(fdc_file f)
{
	FDC_LOCKED();
	fdc_entry *e = fdc_get(f);
	if (e == NULL)
		return fdc_bad_handle(f);
	if (e->fd >= 0) {
		int rc = fdc_close_real(f, true);
		if (rc != 0)
			return rc;
	}
	fdc_free_entry(f);
	return 0;
}

void fdc_close_all(void)
{
	FDC_LOCKED();
	for (int i = 0; i < fdc_nentries; i++) {
		if (!fdc_ent(i)->in_use)
			continue;
		int rc = fdc_close(i);
		if (rc != 0)
			wr_log(WR_WARNING, "could not close file \"%s\": %s", fdc_ent(i)->path,
			       walrus_errmsg());
	}
}

void fdc_reset(void)
{
	FDC_LOCKED();
	for (int i = 0; i < fdc_nentries; i++) {
		if (!fdc_ent(i)->in_use)
			continue;
		if (fdc_ent(i)->fd >= 0)
			fdc_close_real(i, false);
		fdc_free_entry(i);
	}
}

/* ---------------------------------------------------------------- guard */

static int fdc_enter(void)
{
	return fdc_guard_enter != NULL ? fdc_guard_enter() : 0;
}

static void fdc_exit(void)
{
	if (fdc_guard_exit != NULL)
		fdc_guard_exit();
}

/* Touch + guard for a write-class operation on a handle. */
static int fdc_begin_write(fdc_file f)
{
	int rc = fdc_touch(f);
	if (rc != 0)
		return rc;
	return fdc_enter();
}

/* ---------------------------------------------------------------- data I/O */

ssize_t fdc_pread(fdc_file f, void *buf, size_t len, off_t off)
{
	FDC_LOCKED();
	int rc = fdc_touch(f);
	if (rc != 0)
		return rc;
	fdc_entry *e = fdc_ent(f);
	size_t done = 0;
	while (done < len) {
		int injected = ts_fp_check("pread", e->path, NULL);
		ssize_t n;
		if (injected > 0) {
			errno = injected;
			n = -1;
		} else {
			bool released = fdc_release_for_io(e);
			n = pread(e->fd, (char *)buf + done, len - done, off + (off_t)done);
			fdc_retake_after_io(e, released);
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return fdc_syserr(errno, "read", e->path);
		if (n == 0)
			break; /* end of file */
		done += (size_t)n;
	}
	return (ssize_t)done;
}

static int fdc_pwrite_all(fdc_entry *e, const void *buf, size_t len, off_t off)
{
	size_t done = 0;
	while (done < len) {
		size_t want = len - done;
		int injected = ts_fp_check("pwrite", e->path, NULL);
		if (injected == TS_FP_SHORT && want > 1)
			want /= 2;
		ssize_t n;
		if (injected > 0) {
			errno = injected;
			n = -1;
		} else {
			bool released = fdc_release_for_io(e);
			n = pwrite(e->fd, (const char *)buf + done, want, off + (off_t)done);
			fdc_retake_after_io(e, released);
		}
		if (n < 0 && errno == EINTR)
			continue;
		/* A write that makes no progress means the device is full. */
		if (n == 0)
			errno = ENOSPC;
		if (n <= 0)
			return fdc_syserr(errno, "write to", e->path);
		done += (size_t)n;
	}
	return 0;
}

int fdc_pwrite(fdc_file f, const void *buf, size_t len, off_t off)
{
	FDC_LOCKED();
	int rc = fdc_begin_write(f);
	if (rc != 0)
		return rc;
	fdc_entry *e = fdc_ent(f);
	/* Before the write: a failed write may still have left dirty pages behind. */
	e->dirty = true;
	bool pl = ts_pl_enabled();
	uint64_t intent = pl ? ts_pl_data_intent(TS_PL_WRITE, e->fd, e->path, off, (off_t)len) : 0;
	rc = fdc_pwrite_all(e, buf, len, off);
	if (rc == 0 && pl) {
		ts_pl_done(intent);
		if (e->flags & (O_DSYNC | O_SYNC)) /* durable when it returns */
			ts_pl_synced(e->fd, e->path, ts_pl_sync_begin());
	}
	if (rc == 0 && fdc_observer != NULL)
		fdc_observer(e->path, off, len, buf);
	fdc_exit();
	return rc;
}

/*
 * The sync calls are made once and never retried, whatever the error: after
 * a failed fsync the kernel may have marked the pages clean and cleared the
 * error, so a second call could succeed with the data gone.  The caller
 * decides what the failure means (for data files and the WAL: a PANIC).
 */
static int fdc_sync_common(fdc_file f, const char *op, const char *what, int how, off_t off,
                           off_t len, unsigned int flags)
{
	FDC_LOCKED();
	int rc = fdc_begin_write(f);
	if (rc != 0)
		return rc;
	fdc_entry *e = fdc_ent(f);
	int injected = ts_fp_check(op, e->path, NULL);
	bool pl = how != 2 && ts_pl_enabled(); /* sync_file_range makes nothing durable */
	uint64_t began = pl ? ts_pl_sync_begin() : 0;
	int res;
	if (injected > 0) {
		errno = injected;
		res = -1;
	} else {
		bool released = fdc_release_for_io(e);
		if (how == 0)
			res = fsync(e->fd);
		else if (how == 1)
			res = fdatasync(e->fd);
		else
			res = sync_file_range(e->fd, off, len, flags);
		fdc_retake_after_io(e, released);
	}
	if (res == 0 && pl)
		ts_pl_synced(e->fd, e->path, began);
	rc = res == 0 ? 0 : fdc_syserr(errno, what, e->path);
	int err = errno;
	fdc_exit();
	errno = err;
	return rc;
}

int fdc_fsync_fd(int fd, const char *path)
{
	int rc = fdc_enter();
	if (rc != 0)
		return rc;
	fdc_lock();
	int injected = ts_fp_check("fsync", path, NULL);
	bool pl = ts_pl_enabled();
	uint64_t began = pl ? ts_pl_sync_begin() : 0;
	if (!pl)
		fdc_unlock(); /* the journal's records stay in order only under the lock */
	int res;
	if (injected > 0) {
		errno = injected;
		res = -1;
	} else {
		res = fsync(fd); /* once: see fdc_sync_common */
	}
	if (res == 0 && pl)
		ts_pl_synced(fd, path, began);
	if (pl) {
		int err = errno;
		fdc_unlock();
		errno = err;
	}
	rc = res == 0 ? 0 : fdc_syserr(errno, "fsync", path);
	int err = errno;
	fdc_exit();
	errno = err;
	return rc;
}

int fdc_close_fd(int fd, const char *path)
{
	FDC_LOCKED();
	int injected = ts_fp_check("close", path, NULL);
	int res = close(fd); /* never retried: see fdc_close_real */
	if (injected > 0) {
		errno = injected;
		res = -1;
	}
	return res == 0 ? 0 : fdc_syserr(errno, "close", path);
}

int fdc_fsync(fdc_file f)
{
	return fdc_sync_common(f, "fsync", "fsync", 0, 0, 0, 0);
}

int fdc_fdatasync(fdc_file f)
{
	return fdc_sync_common(f, "fdatasync", "fdatasync", 1, 0, 0, 0);
}

int fdc_sync_range(fdc_file f, off_t off, off_t len, unsigned int flags)
{
	return fdc_sync_common(f, "sync_range", "sync_file_range", 2, off, len, flags);
}

int fdc_truncate(fdc_file f, off_t len)
{
	FDC_LOCKED();
	int rc = fdc_begin_write(f);
	if (rc != 0)
		return rc;
	fdc_entry *e = fdc_ent(f);
	e->dirty = true;
	int injected = ts_fp_check("truncate", e->path, NULL);
	bool pl = ts_pl_enabled();
	uint64_t intent = pl ? ts_pl_data_intent(TS_PL_TRUNC, e->fd, e->path, len, 0) : 0;
	int res;
	if (injected > 0) {
		errno = injected;
		res = -1;
	} else {
		do
			res = ftruncate(e->fd, len);
		while (res < 0 && errno == EINTR);
	}
	if (res == 0 && pl) {
		int err = errno;
		ts_pl_done(intent);
		errno = err;
	}
	rc = res == 0 ? 0 : fdc_syserr(errno, "truncate", e->path);
	int err = errno;
	fdc_exit();
	errno = err;
	return rc;
}

int fdc_fallocate(fdc_file f, off_t off, off_t len)
{
	FDC_LOCKED();
	int rc = fdc_begin_write(f);
	if (rc != 0)
		return rc;
	fdc_entry *e = fdc_ent(f);
	e->dirty = true;
	int err = ts_fp_check("fallocate", e->path, NULL);
	bool pl = ts_pl_enabled();
	uint64_t intent = pl ? ts_pl_data_intent(TS_PL_FALLOC, e->fd, e->path, off, len) : 0;
	if (err <= 0) {
		do /* posix_fallocate returns the error instead of setting errno */
			err = posix_fallocate(e->fd, off, len);
		while (err == EINTR);
	}
	if (err == 0 && pl)
		ts_pl_done(intent);
	rc = err == 0 ? 0 : fdc_syserr(err, "allocate space in", e->path);
	fdc_exit();
	errno = err;
	return rc;
}

/* Not in the power-loss journal: only blocks nobody uses are punched, so
 * whether a punch survives a crash makes no difference to the data. */
int fdc_punch(fdc_file f, off_t off, off_t len)
{
	FDC_LOCKED();
	int rc = fdc_begin_write(f);
	if (rc != 0)
		return rc;
	fdc_entry *e = fdc_ent(f);
	int err = ts_fp_check("punch", e->path, NULL);
	if (err <= 0) {
		err = 0;
		while (fallocate(e->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, len) !=
		       0) {
			if (errno != EINTR) {
				err = errno;
				break;
			}
		}
	}
	rc = err == 0 ? 0 : fdc_syserr(err, "give back space in", e->path);
	fdc_exit();
	errno = err;
	return rc;
}

static int fdc_stat(fdc_file f, struct stat *st)
{
	FDC_LOCKED();
	int rc = fdc_touch(f);
	if (rc != 0)
		return rc;
	if (fstat(fdc_ent(f)->fd, st) != 0)
		return fdc_syserr(errno, "stat", fdc_ent(f)->path);
	return 0;
}

int fdc_size(fdc_file f, off_t *size)
{
	struct stat st;
	int rc = fdc_stat(f, &st);
	if (rc == 0)
		*size = st.st_size;
	return rc;
}

int fdc_sparse(fdc_file f, bool *sparse)
{
	struct stat st;
	int rc = fdc_stat(f, &st);
	/* Preallocated (unwritten) extents count in st_blocks; holes do not. */
	if (rc == 0)
		*sparse = (uint64_t)st.st_blocks * 512u < (uint64_t)st.st_size;
	return rc;
}

int fdc_advise_willneed(fdc_file f, off_t off, off_t len)
{
	FDC_LOCKED();
	int rc = fdc_touch(f);
	if (rc != 0)
		return rc;
	int err = posix_fadvise(fdc_ent(f)->fd, off, len, POSIX_FADV_WILLNEED);
	return err == 0 ? 0 : fdc_syserr(err, "prefetch from", fdc_ent(f)->path);
}

/* ---------------------------------------------------------------- accessors */

int fdc_fd(fdc_file f, int *fd)
{
	FDC_LOCKED();
	int rc = fdc_touch(f);
	if (rc != 0)
		return rc;
	*fd = fdc_ent(f)->fd;
	return 0;
}

const char *fdc_path(fdc_file f)
{
	FDC_LOCKED();
	fdc_entry *e = fdc_get(f);
	return e ? e->path : NULL;
}

uint64_t fdc_open_seq(fdc_file f)
{
	FDC_LOCKED();
	fdc_entry *e = fdc_get(f);
	return e ? e->open_seq : 0;
}

bool fdc_is_dirty(fdc_file f)
{
	FDC_LOCKED();
	fdc_entry *e = fdc_get(f);
	return e ? e->dirty : false;
}

void fdc_clear_dirty(fdc_file f)
{
	FDC_LOCKED();
	fdc_entry *e = fdc_get(f);
	if (e != NULL)
		e->dirty = false;
}

uint64_t fdc_get_tag(fdc_file f)
{
	FDC_LOCKED();
	fdc_entry *e = fdc_get(f);
	return e ? e->tag : 0;
}

void fdc_set_tag(fdc_file f, uint64_t tag)
{
	FDC_LOCKED();
	fdc_entry *e = fdc_get(f);
	if (e != NULL)
		e->tag = tag;
}

bool fdc_debug_is_open(fdc_file f)
{
	FDC_LOCKED();
	fdc_entry *e = fdc_get(f);
	return e != NULL && e->fd >= 0;
}

/* ---------------------------------------------------------------- path operations */

static int fdc_rename_flags(const char *from, const char *to, unsigned int flags)
{
	FDC_LOCKED();
	int rc = fdc_enter();
	if (rc != 0)
		return rc;
	int injected = ts_fp_check("rename", from, to);
	bool pl = ts_pl_enabled();
	uint64_t intent = pl ? ts_pl_rename_intent(from, to) : 0;
	int res;
	if (injected > 0) {
		errno = injected;
		res = -1;
	} else {
		res = renameat2(AT_FDCWD, from, AT_FDCWD, to, flags);
	}
	if (res == 0 && pl)
		ts_pl_done(intent);
	if (res != 0) {
		int err = errno;
		rc = wr_error(wr_errno_code(err), "could not rename file \"%s\" to \"%s\": %m",
		              from, to);
		errno = err;
	}
	fdc_exit();
	return rc;
}

int fdc_rename(const char *from, const char *to)
{
	return fdc_rename_flags(from, to, 0);
}

int fdc_rename_noreplace(const char *from, const char *to)
{
	return fdc_rename_flags(from, to, RENAME_NOREPLACE);
}

int fdc_unlink(const char *path)
{
	FDC_LOCKED();
	int rc = fdc_enter();
	if (rc != 0)
		return rc;
	int injected = ts_fp_check("unlink", path, NULL);
	bool pl = ts_pl_enabled();
	uint64_t intent = pl ? ts_pl_unlink_intent(path) : 0;
	int res;
	if (injected > 0) {
		errno = injected;
		res = -1;
	} else {
		res = unlink(path);
	}
	if (res == 0 && pl)
		ts_pl_done(intent);
	rc = res == 0 ? 0 : fdc_syserr(errno, "remove", path);
	int err = errno;
	fdc_exit();
	errno = err;
	return rc;
}

int fdc_mkdir(const char *path, mode_t mode)
{
	FDC_LOCKED();
	int injected = ts_fp_check("mkdir", path, NULL);
	int res;
	if (injected > 0) {
		errno = injected;
		res = -1;
	} else {
		res = mkdir(path, mode);
	}
	if (res == 0)
		return 0;
	int err = errno;
	struct stat st;
	if (err == EEXIST && stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		return 0;
	errno = err;
	int rc = wr_error(wr_errno_code(err), "could not create directory \"%s\": %m", path);
	errno = err;
	return rc;
}

/* Opens @path (a directory if @dir), fsyncs it once, closes it.  @child: the
 * file whose name the sync is for, if any (failpoints match it too). */
static int fdc_fsync_open_path(const char *path, bool dir, const char *child)
{
	int fd;
	int rc = fdc_open_slot(path, O_RDONLY | (dir ? O_DIRECTORY : 0), 0, false, &fd);
	if (rc != 0)
		return rc;
	struct stat st;
	if (!dir && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode))
		dir = true;
	int injected = ts_fp_check(dir ? "fsync_dir" : "fsync", path, child);
	bool pl = ts_pl_enabled();
	uint64_t began = pl ? ts_pl_sync_begin() : 0;
	int res;
	if (injected > 0) {
		errno = injected;
		res = -1;
	} else {
		res = fsync(fd); /* once: see fdc_sync_common */
	}
	int err = errno;
	if (res == 0 && pl)
		ts_pl_synced(fd, path, began);
	injected = ts_fp_check("close", path, NULL);
	int cres = close(fd); /* read-only: close reports no write-back error of ours */
	if (injected > 0 || (cres != 0 && res == 0)) {
		res = -1;
		err = injected > 0 ? injected : errno;
	}
	if (res == 0)
		return 0;
	return fdc_syserr_kind(err, "fsync", dir ? "directory" : "file", path);
}

int fdc_fsync_path(const char *path)
{
	FDC_LOCKED();
	int rc = fdc_enter();
	if (rc != 0)
		return rc;
	rc = fdc_fsync_open_path(path, false, NULL);
	int err = errno;
	fdc_exit();
	errno = err;
	return rc;
}

int fdc_fsync_parent(const char *path)
{
	FDC_LOCKED();
	char *copy = strdup(path);
	if (copy == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory");
	char *dir = dirname(copy);
	int rc = fdc_enter();
	if (rc == 0) {
		rc = fdc_fsync_open_path(dir, true, path);
		int err = errno;
		fdc_exit();
		errno = err;
	}
	free(copy);
	return rc;
}

/* lstat through the failpoints (test builds). */
static int fdc_sys_lstat(const char *path, struct stat *st)
{
	int injected = ts_fp_check("stat", path, NULL);
	if (injected > 0) {
		errno = injected;
		return -1;
	}
	return lstat(path, st);
}

/*
 * Regular files and directories under @dir (symbolic links, sockets and
 * the like are skipped), children before their directory.  An entry gone
 * between readdir and its stat or open (ENOENT) has nothing left to make
 * durable, and is skipped, as PostgreSQL's walk does: after a crash the
 * dead instance's last processes may still be removing their sockets and
 * temporary files while the next instance syncs the directory.  The
 * directory stream holds one fd outside the cache's bound per level: the
 * data directory is three levels deep.
 */
static int fdc_sync_tree_at(const char *dir, int depth, uint64_t *nfiles)
{
	if (depth > 16)
		return wr_error(WALRUS_EINVAL, "directory tree too deep at \"%s\"", dir);
	DIR *d = opendir(dir);
	if (d == NULL)
		return fdc_syserr(errno, "open directory", dir);
	int rc = 0;
	for (;;) {
		errno = 0;
		struct dirent *e = readdir(d);
		if (e == NULL) {
			if (errno != 0)
				rc = fdc_syserr(errno, "read directory", dir);
			break;
		}
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		char path[PATH_MAX];
		if (!wr_snprintf(path, sizeof(path), "%s/%s", dir, e->d_name)) {
			rc = wr_error(WALRUS_EINVAL, "path too long under \"%s\"", dir);
			break;
		}
		struct stat st;
		if (fdc_sys_lstat(path, &st) != 0) {
			if (errno == ENOENT)
				continue;
			rc = fdc_syserr(errno, "stat", path);
			break;
		}
		if (S_ISDIR(st.st_mode))
			rc = fdc_sync_tree_at(path, depth + 1, nfiles);
		else if (S_ISREG(st.st_mode)) {
			rc = fdc_fsync_open_path(path, false, NULL);
			/* fsync never says ENOENT: the open did, the file is gone. */
			if (rc != 0 && errno == ENOENT) {
				wr_error_clear();
				continue;
			}
			*nfiles += rc == 0;
		}
		if (rc != 0)
			break;
	}
	int err = errno;
	(void)closedir(d); /* read-only stream: nothing to lose */
	errno = err;
	return rc != 0 ? rc : fdc_fsync_open_path(dir, true, NULL);
}

int fdc_sync_tree(const char *dir, uint64_t *nfiles)
{
	FDC_LOCKED();
	*nfiles = 0;
	int rc = fdc_enter();
	if (rc != 0)
		return rc;
	rc = fdc_sync_tree_at(dir, 0, nfiles);
	int err = errno;
	fdc_exit();
	errno = err;
	return rc;
}

/* ---------------------------------------------------------------- hooks and stats */

void fdc_set_before_close(fdc_before_close_fn fn)
{
	FDC_LOCKED();
	fdc_before_close = fn;
}

void fdc_set_io_guard(fdc_guard_enter_fn enter, fdc_guard_exit_fn exit)
{
	FDC_LOCKED();
	fdc_guard_enter = enter;
	fdc_guard_exit = exit;
}

void fdc_set_write_observer(fdc_write_observer_fn fn)
{
	FDC_LOCKED();
	fdc_observer = fn;
}

void fdc_get_stats(fdc_stats *s)
{
	FDC_LOCKED();
	*s = fdc_st;
}

void fdc_pin(fdc_file f, bool pin)
{
	FDC_LOCKED();
	fdc_entry *e = fdc_get(f);
	if (e == NULL)
		return;
	WR_ASSERT(pin || e->pins > 0); /* a pin dropped twice would let the LRU close the fd */
	e->pins += pin ? 1 : -1;
}

/*
 * For I/O submitted outside the seam's own syscalls (io_uring): the same
 * guard and failpoints apply, so an injected error looks identical whichever
 * io_method runs.
 */
int fdc_io_begin(fdc_file f, const char *op, int *injected)
{
	FDC_LOCKED();
	*injected = 0;
	if (fdc_get(f) == NULL)
		return wr_error(WALRUS_EINVAL, "fdc_io_begin: bad handle %d", f);
	int rc = fdc_enter();
	if (rc != 0)
		return rc;
	int e = ts_fp_check(op, fdc_ent(f)->path, NULL);
	*injected = e == TS_FP_SHORT ? 0 : e;
	if (strcmp(op, "pwrite") == 0)
		fdc_ent(f)->dirty = true;
	return 0;
}

void fdc_io_end(void)
{
	fdc_exit();
}

int fdc_step(const char *point, const char *path)
{
	char what[PATH_MAX + 64];
	if (!wr_snprintf(what, sizeof(what), "%s %s", point, path != NULL ? path : ""))
		return 0;
	FDC_LOCKED();
	int e = ts_fp_check("step", what, NULL);
	return e > 0 ? e : 0;
}

/* Without the journal (every build but the tests') these take no lock: the
 * WAL's io_uring path calls them for each batch. */
uint64_t fdc_io_write_intent(fdc_file f, off_t off, size_t len)
{
	if (!ts_pl_enabled())
		return TS_PL_NONE;
	FDC_LOCKED();
	fdc_entry *e = fdc_get(f);
	if (e == NULL)
		return TS_PL_NONE;
	return ts_pl_data_intent(TS_PL_WRITE, e->fd, e->path, off, (off_t)len);
}

void fdc_io_write_done(fdc_file f, uint64_t intent)
{
	if (intent == TS_PL_NONE)
		return;
	FDC_LOCKED();
	fdc_entry *e = fdc_get(f);
	if (e == NULL)
		return;
	ts_pl_done(intent);
	if (e->flags & (O_DSYNC | O_SYNC)) /* durable when it completed */
		ts_pl_synced(e->fd, e->path, ts_pl_sync_begin());
}

void fdc_io_synced(fdc_file f)
{
	if (!ts_pl_enabled())
		return;
	FDC_LOCKED();
	fdc_entry *e = fdc_get(f);
	if (e != NULL)
		ts_pl_synced(e->fd, e->path, ts_pl_sync_begin());
}
