/*
 * buffer.h - the shared buffer pool: shared_buffers / 8 KiB pages in shared
 * memory, one descriptor per page, a partitioned mapping table from
 * (relation, block) to buffer, clock-sweep replacement with usage counts.
 *
 * Buffers are numbered 1..nbuffers; 0 (BUF_INVALID) is "no buffer", so a
 * zeroed variable never names a real buffer.
 *
 * Owns: region "buffers" (descriptors, mapping table, pages, counters,
 * relation extension locks) and, per process, the private pin counts and
 * content-lock modes (allocated by buf_attach, freed by buf_detach_check).
 * A process pins a buffer once in the shared refcount and counts further
 * pins of its own privately.
 *
 * Locks, in the order they may be taken (never the reverse):
 *   1. a relation extension lock (buf_extend only; held across the extend I/O)
 *   2. mapping partition locks (rw locks; two at most, lower index first;
 *      never held across I/O or while waiting for anything but a header lock)
 *   3. a buffer header lock (a bit of the state word; a few instructions)
 * A buffer's content lock (shared/exclusive rw lock) is taken by callers
 * through buf_lock(), only while pinned, and never while this module holds
 * a partition or header lock; the pool itself only *tries* a victim's content
 * lock, so a caller may hold content locks on other buffers while calling
 * buf_read/buf_extend.  A process may hold a given buffer's content lock once.
 * I/O in progress is a state flag; waiters sleep on the buffer's futex word.
 *
 * WAL before data: every write of a page first calls wal_flush_to(page LSN),
 * so the WAL must be attached in any process that can write a dirty page.
 *
 * Returns: WALRUS_* codes with a message.  buf_read passes storage errors
 * through (ECORRUPT for a bad checksum, EIO ...), leaving nothing pinned.
 * WALRUS_EBUSY when every buffer is pinned.
 * PANICs: on broken invariants: releasing/locking/unlocking a buffer this
 * process has not pinned or locked, buf_mark_dirty without the exclusive
 * content lock; and while waiting for another process's I/O when the
 * instance has crashed (that process may be dead, the I/O never ending).
 */
#ifndef WALRUS_BUFFER_H
#define WALRUS_BUFFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/common.h"
#include "storage/storage.h"

#define BUF_INVALID     0
#define BUF_MIN_BUFFERS 16

/* Shared memory for region "buffers" from shared_buffers. */
size_t buf_shmem_size(const wr_options *o);
/* While creating shared memory: carves and initialises the region.
 * WALRUS_EINVAL when shared_buffers is below BUF_MIN_BUFFERS pages. */
int buf_shmem_init(const wr_options *o);
/* In every process after shm attach: finds the region, allocates private state. */
int buf_attach(void);
/*
 * Detaches this process from the pool: frees its private state.  If it still
 * holds pins or content locks, releases them and returns WALRUS_EINTERNAL
 * naming the first leaked buffer (a bug of the caller).
 */
int buf_detach_check(void);

/* Pins the buffer holding (rel, blk), reading it on a miss; *buf = BUF_INVALID on error. */
int buf_read(wr_relid rel, wr_blkno blk, int *buf);
/* Adds a new page_init'ed block at the end of @rel: pinned and exclusively locked. */
int buf_extend(wr_relid rel, int *buf, wr_blkno *blk);
void buf_release(int buf);

void buf_lock(int buf, bool exclusive);
void buf_unlock(int buf);
void *buf_page(int buf);
/* Requires the exclusive content lock: the page will be written before eviction. */
void buf_mark_dirty(int buf);
void buf_tag(int buf, wr_relid *rel, wr_blkno *blk);

/* Writes every dirty buffer (tests, shutdown); the first error is returned.
 * Waits for each content lock: call it holding none but your own buffers'. */
int buf_flush_all(void);

typedef struct buf_stats {
	uint64_t hits;            /* buf_read found the page valid in the pool */
	uint64_t reads;           /* pages read from storage */
	uint64_t extends;         /* pages added by buf_extend */
	uint64_t backend_writes;  /* dirty victims written by the process needing the slot */
	uint64_t flush_writes;    /* pages written by buf_flush_all */
	uint64_t evictions;       /* valid pages replaced by another */
	uint64_t content_wait_ns; /* time blocked on content locks */
	uint64_t io_wait_ns;      /* time waiting for another process's I/O */
	uint32_t nbuffers;
} buf_stats;
void buf_get_stats(buf_stats *s);

/* Test hook: called just before each data page write (per process; NULL removes). */
typedef void (*buf_write_observer)(wr_relid rel, wr_blkno blk, wr_lsn page_lsn);
void buf_set_write_observer(buf_write_observer fn);

#endif /* WALRUS_BUFFER_H */
