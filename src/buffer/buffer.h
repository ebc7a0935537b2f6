/*
 * buffer.h - the shared buffer pool: shared_buffers / 8 KiB pages in shared
 * memory, one descriptor per page, a partitioned mapping table from
 * (relation, block) to buffer, clock-sweep replacement with usage counts.
 *
 * Buffers are numbered 1..nbuffers; 0 (BUF_INVALID) is "no buffer", so a
 * zeroed variable never names a real buffer.
 *
 * Owns: region "buffers" (descriptors, mapping table, pages, counters,
 * relation extension locks) and, per backend, the private pin counts and
 * content-lock modes.  A backend pins a buffer once in the shared refcount
 * and counts further pins of its own privately.
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
 * buf_read/buf_extend.  A backend may hold a given buffer's content lock once.
 * I/O in progress is a state flag; waiters sleep on the buffer's futex word.
 * Each buffer also has a version (a seqlock for buf_peek): odd while its
 * content lock is held exclusive or it is being retagged, written only by
 * that holder; readers that peek take no lock at all.
 *
 * New pages (buf_read_zero) map their chunk of 64 buffers into the process
 * in one madvise before the first touch, and have the next chunks mapped by
 * a kernel worker through io_uring (prefault.c): per-process advice, no
 * shared state, off where the kernel lacks it.
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
/*
 * After buf_shmem_init, once per start: decides whether the instance's data
 * files are opened O_DIRECT (option data_direct_io, smgr_direct_probe on
 * @datadir) and keeps the answer in the region, where buf_attach hands it
 * to storage (smgr_set_direct) in every process.  WALRUS_EINVAL when
 * data_direct_io=on and the file system refuses O_DIRECT.
 */
int buf_direct_io_init(const wr_options *o, const char *datadir);
/*
 * Backends.  Each handle of the application is a backend with its own pins,
 * content locks, hints, change in progress and read-stream ring; the engine
 * makes one current in the calling thread (buf_backend_set) for the length
 * of a public call.  buf_attach() maps the pool for the process and gives it
 * a default backend, used by the instance's own processes and by code that
 * never sets one.
 */
typedef struct buf_backend buf_backend;
buf_backend *buf_backend_new(void);   /* after buf_attach; NULL with a message */
void buf_backend_set(buf_backend *b); /* NULL: the process's default */
/* Releases its pins and locks (buf_detach_check's report) and frees it. */
int buf_backend_close(buf_backend *b);
/* Frees it without touching shared memory: after fork() or a crash restart. */
void buf_backend_forget(buf_backend *b);
/*
 * Forgets every buffer of relation @rel without writing it, dirty or not:
 * the relation is being removed (a dropped key space, an orphan file).
 * The caller guarantees nobody reads or changes @rel any more; pins still
 * held (a write or a read finishing) are waited for.
 */
void buf_drop_rel(wr_relid rel);
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
/*
 * The reads from storage the calling thread waited for in buf_read (and in
 * read streams under io_method=sync), and their time: a caller compares two
 * calls to learn whether its misses came from the page cache or the device.
 */
typedef struct buf_my_reads {
	uint64_t n, ns;
} buf_my_reads;
buf_my_reads buf_my_read_counts(void);
/* Pins and exclusively locks (rel, blk) without reading it: a zero page if it
 * was not in the pool (for pages about to be rebuilt whole, e.g. by redo). */
int buf_read_zero(wr_relid rel, wr_blkno blk, int *buf);
/* Before the first touch of new page @buf: maps its chunk of the pool into
 * this process in one call, and queues the next chunks' to a kernel worker
 * (prefault.c); buf_prefault_chunks counts the chunks done or queued. */
void buf_prefault_new(int buf);
uint64_t buf_prefault_chunks(void);
/* Waits for the queued populates and closes their ring; run by shm_detach
 * before the pool is unmapped. */
void buf_prefault_release(void);
#ifdef WALRUS_TEST_HOOKS
/* Takes (@hold) or gives back the prefault lock, as a prefault in flight holds it. */
void buf_test_prefault_lock(bool hold);
/* Whether the prefault lock is free in this process (a forked child's copy included). */
bool buf_test_prefault_lock_free(void);
/* From now on this process populates as if io_uring were refused. */
void buf_test_prefault_refuse_ring(void);
/* Whether this process populates in the call only (io_uring refused or failed). */
bool buf_test_prefault_ring_off(void);
#endif
/* Adds a new page_init'ed block at the end of @rel: pinned and exclusively locked. */
int buf_extend(wr_relid rel, int *buf, wr_blkno *blk);
void buf_release(int buf);

void buf_lock(int buf, bool exclusive);
/*
 * Optimistic reads (a seqlock per buffer): each buffer's version is odd
 * while its content lock is held exclusive or it is being given another
 * tag, and changes at each.  buf_peek finds (rel, blk) where this backend
 * last found it (no mapping table), pins and locks nothing, and calls @fn
 * on the page between two reads of the version.  BUF_PEEK_DONE: the buffer
 * was valid, held (rel, blk), and nothing changed the page while @fn ran:
 * what @fn read is what a share lock would have shown.  BUF_PEEK_CHANGED:
 * an exclusive holder or a retag overlapped (or was under way), and
 * BUF_PEEK_NONE: not known where the page is, not valid there, or its
 * header lock held (the locked path waits for that); then
 * whatever @fn found is garbage (@fn may not have run), and the caller
 * reads the page with buf_read and a share lock.  @fn reads a page that may
 * change under it: it must clamp every offset it takes from the page to the
 * page, write only its own memory, and make no call that could fail or
 * block.  A peek counts as a use of the buffer for the clock sweep.
 */
#define BUF_PEEK_DONE    0
#define BUF_PEEK_CHANGED 1
#define BUF_PEEK_NONE    2
typedef void (*buf_peek_fn)(const char *page, void *arg);
int buf_peek(wr_relid rel, wr_blkno blk, buf_peek_fn fn, void *arg);
/*
 * buf_peek trying buffer *@guess first (0: none), as a caller remembers it
 * from an earlier peek: a guess is checked like any hint (the buffer must
 * hold the tag), so a stale one costs a look at its descriptor.  On
 * BUF_PEEK_DONE, *@guess is the buffer that held the page.
 */
int buf_peek_at(wr_relid rel, wr_blkno blk, int32_t *guess, buf_peek_fn fn, void *arg);
/*
 * Reading a page from outside the pool (a mapping of its file): only a page
 * no buffer holds has its latest version in the file, and only while no
 * buffer takes it, since the file is written from a buffer holding the page
 * (a victim is written before it loses its tag).  buf_absent: true when no
 * buffer holds (rel, blk) now (the mapping table under its partition lock,
 * shared); *@ticket is the count of tag changes in its part of the table.
 * buf_absent_still, after the read: true when no tag changed there since,
 * so the page was in no buffer during the whole read and what was read is
 * whole.  A false answer sends the caller to buf_read.
 */
bool buf_absent(wr_relid rel, wr_blkno blk, uint32_t *ticket);
bool buf_absent_still(wr_relid rel, wr_blkno blk, uint32_t ticket);
void buf_unlock(int buf);
void *buf_page(int buf);
/* Requires the exclusive content lock: the page will be written before eviction. */
void buf_mark_dirty(int buf);
void buf_tag(int buf, wr_relid *rel, wr_blkno *blk);
/*
 * A mark for the access method: set once it has checked the structure of
 * the page in a pinned buffer (kv: every entry decodes), so that its writer
 * does not check again on every batch while the page stays.  Changes made
 * by its own page ops keep a page well formed; the mark goes when the
 * buffer takes another page (read or made) and when redo replaces the page
 * whole (a full-page image, an init).
 */
bool buf_checked(int buf);
void buf_set_checked(int buf);
void buf_clear_checked(int buf);

/*
 * Logged changes (PostgreSQL's START_CRIT_SECTION ... XLogInsert ... pattern):
 *   buf_change_begin();
 *   buf_change_register(0, buf, 0);         buffer pinned and exclusively locked
 *   buf_change_data(0, &op, sizeof(op));    redo data for block 0
 *   buf_change_main(&hdr, sizeof(hdr));     record-wide data
 *   ...change the registered pages in memory...
 *   lsn = buf_change_insert(RM_KV, info);   marks dirty, inserts, stamps page LSNs
 *   buf_change_end();
 * The page changes may be made before or after the register calls but before
 * buf_change_insert; the WAL decides each block's full-page image against
 * the redo pointer at insert time (first change after a checkpoint's redo
 * LSN), so a block is registered with its page as it will be after the
 * change.  Buffers are marked dirty *before* the record is inserted, so a
 * checkpoint whose redo point falls after the record always finds them
 * dirty.  Flags are WAL_BLK_WILL_INIT (redo rebuilds the page from the data
 * alone: no image, no read).  At most WAL_MAX_BLOCKS blocks per record.
 * Pointers passed stay valid until buf_change_insert returns.
 * PANICs when a registered buffer is not exclusively locked by the caller,
 * on a block id registered twice, or on a change begun twice.
 */
void buf_change_begin(void);
void buf_change_register(int id, int buf, uint8_t flags);
void buf_change_data(int id, const void *data, size_t len);
void buf_change_main(const void *data, size_t len);
/* Returns the record's end LSN: the LSN a commit waits for with wal_flush_to. */
wr_lsn buf_change_insert(uint8_t rmid, uint8_t info);
void buf_change_end(void);
/* Forgets a change cut short by a PANIC (at attach). */
void buf_change_reset(void);

/* Writes every dirty buffer (tests, shutdown); the first error is returned.
 * Waits for each content lock: call it holding none but your own buffers'. */
int buf_flush_all(void);

uint32_t buf_nbuffers(void);

/* ---------------------------------------------------------------- writing for others */

/*
 * Write-back hints (PostgreSQL's WritebackContext): the tags of pages just
 * written collect here; every @max_pages of them are sorted and handed to
 * sync_file_range(WRITE), one call per segment file spanning its hinted
 * blocks (bufsync.c says why), so the kernel starts writing early and the
 * later fsync finds little to do.
 * max_pages 0 disables.  A sync_file_range error is a PANIC (rule 5).
 */
typedef struct buf_wb {
	uint32_t max, n;
	struct buf_wb_tag {
		wr_relid rel;
		wr_blkno blk;
	} * tags;
} buf_wb;
int buf_wb_init(buf_wb *w, uint32_t max_pages);
void buf_wb_add(buf_wb *w, wr_relid rel, wr_blkno blk);
void buf_wb_issue(buf_wb *w);
void buf_wb_free(buf_wb *w);

/*
 * Checkpoint support.  buf_ckpt_mark flags every dirty buffer
 * CHECKPOINT_NEEDED and lists it (@items has room for buf_nbuffers()); a
 * page dirtied later is the next checkpoint's.  buf_ckpt_write writes one
 * listed buffer if it still needs it (whoever writes it first clears the
 * flag), waiting for its share content lock.
 */
typedef struct buf_ckpt_item {
	wr_relid rel;
	wr_blkno blk;
	int buf;
} buf_ckpt_item;
uint32_t buf_ckpt_mark(buf_ckpt_item *items);
int buf_ckpt_write(const buf_ckpt_item *it, buf_wb *wb, bool *written);
/*
 * The same for io_method=io_uring: writes a batch of the listed items from
 * @items (up to 16 in flight), all covered by one WAL flush; *used says how
 * many items it went through (at least one), *written how many it wrote.
 * Only the batch's first buffer may wait for its content lock; a buffer
 * whose lock is taken ends the batch and starts the next one.
 */
int buf_ckpt_write_batch(const buf_ckpt_item *items, uint32_t n, buf_wb *wb, uint32_t *used,
                         uint32_t *written);

/*
 * One round of the background writer: estimates from recent allocations
 * how many buffers the clock sweep will need before the next round
 * (times bgwriter_lru_multiplier) and cleans that many ahead of the clock
 * hand, writing at most bgwriter_lru_maxpages.  Returns true when nothing
 * was allocated or written (the caller may sleep longer).
 */
typedef struct buf_bgw {
	uint64_t next_to_clean; /* clock position this writer reached */
	uint64_t prev_allocs;
	double smoothed_allocs;
} buf_bgw;
bool buf_bgwriter_round(buf_bgw *st, int64_t maxpages, double multiplier, buf_wb *wb);

/* Redo through the pool: install with wal_redo_set_pages(&buf_redo_pages). */
extern const struct wal_redo_pages buf_redo_pages;

typedef struct buf_stats {
	uint64_t hits;            /* buf_read found the page valid in the pool */
	uint64_t reads;           /* pages read from storage */
	uint64_t extends;         /* pages added by buf_extend */
	uint64_t backend_writes;  /* dirty victims written by the process needing the slot */
	uint64_t flush_writes;    /* pages written by buf_flush_all */
	uint64_t evictions;       /* valid pages replaced by another */
	uint64_t ckpt_writes;     /* pages written by checkpoints */
	uint64_t bgwriter_writes; /* pages written by the background writer */
	uint64_t bgwriter_stops;  /* rounds the bgwriter ended at bgwriter_lru_maxpages */
	uint64_t allocs;          /* buffers taken by the clock sweep */
	uint64_t writebacks;      /* sync_file_range write-back requests issued */
	uint64_t content_wait_ns; /* time blocked on content locks */
	uint64_t io_wait_ns;      /* time waiting for another process's I/O */
	uint64_t io_wakeups;      /* I/Os that ended with a waiter to wake */
	uint32_t nbuffers;
	bool data_direct; /* data files are opened O_DIRECT (data_direct_io) */
} buf_stats;
void buf_get_stats(buf_stats *s);
/* Buffers dirty right now, by a scan without locks (a snapshot, may be stale). */
uint32_t buf_count_dirty(void);

/* Test hook: called just before each data page write (per process; NULL removes). */
typedef void (*buf_write_observer)(wr_relid rel, wr_blkno blk, wr_lsn page_lsn);
void buf_set_write_observer(buf_write_observer fn);

/* ---------------------------------------------------------------- read streams */

/*
 * A read stream returns the blocks [from, to) of a relation in order,
 * pinned, reading ahead of its caller (PostgreSQL's read_stream.c):
 *
 *   buf_stream *s;
 *   rc = buf_stream_open(&s, rel, 0, nblocks, 32);
 *   while ((rc = buf_stream_next(s, &buf, &blk)) != WALRUS_ENOTFOUND) {
 *       if (rc != WALRUS_OK) ...             block blk failed; the stream goes on
 *       buf_lock(buf, false); ...; buf_unlock(buf); buf_release(buf);
 *   }
 *   buf_stream_close(s);
 *
 * With io_method=io_uring up to @depth blocks are read ahead: for each
 * upcoming block not valid in the pool the stream maps a buffer, takes its
 * I/O-in-progress flag and reads straight into the page (adjacent blocks
 * in one vectored read of up to 128 kB); each block is verified as
 * smgr_read verifies (short read, checksum) and its I/O ended, valid or
 * with the error flag.  Other processes wanting such
 * a block wait on the flag as for any read; blocks already valid are just
 * pinned.  The pinned look-ahead is capped at a quarter of the pool and at
 * BUF_STREAM_MAX_DEPTH.  The io_uring is per process, made at the first
 * stream (again in a forked child); if it cannot be made, streams read as
 * with io_method=sync (a WARNING says so once).
 * With io_method=sync: posix_fadvise(WILLNEED) for the blocks not in the
 * pool, @depth blocks ahead, then buf_read; a run of such blocks that
 * continues the previous one is left to the kernel's readahead (as in
 * PostgreSQL: advice there only shrinks the kernel's window).
 *
 * buf_stream_next: WALRUS_ENOTFOUND (no message) after the last block.
 * Otherwise *blk is the next block and, on WALRUS_OK, *buf its buffer,
 * pinned, not locked: the caller locks and releases it.  A block whose read
 * failed returns that error with smgr_read's message (WALRUS_ECORRUPT,
 * WALRUS_EIO ...) and *buf = BUF_INVALID, nothing pinned; the next call
 * goes on with the following block.
 * buf_stream_close: releases every buffer the stream still pins, after
 * waiting for its reads in flight.  No error path leaves a pin or an I/O
 * flag behind.
 *
 * A stream belongs to the process that opened it (a forked child may only
 * close its copy, which frees memory).  Its completed reads are processed
 * at each buf_stream_next, and before this process sleeps for another one
 * (an I/O flag, a content lock) it completes all its reads in flight,
 * since the other may be waiting for one of them.  Segment files of the
 * relation must not be truncated or removed while a stream is open.
 * Returns: WALRUS_EINVAL for from > to or depth < 1, WALRUS_ENOMEM.
 */
#define BUF_STREAM_MAX_DEPTH 256
typedef struct buf_stream buf_stream;
int buf_stream_open(buf_stream **s, wr_relid rel, wr_blkno from, wr_blkno to, int depth);
/*
 * Streams whose blocks the caller names (PostgreSQL's read_stream with its
 * block-number callback), in any order, repeats allowed: buf_stream_open_cb
 * asks @next(@arg) for the block after those it named before, as far ahead
 * as the stream looks; WR_INVALID_BLKNO means none for now, and it is asked
 * again at the next buf_stream_next (which returns WALRUS_ENOTFOUND while
 * nothing is queued and @next names nothing).  Each block is asked for
 * once.  buf_stream_open_list streams blk[0 .. n), an array the caller
 * keeps until the close.  Everything above holds for them: order, the
 * verification and the errors per block, the caps, the close, a forked
 * child.  Under io_method=sync the stream queues up to @depth of the
 * numbers (nothing pinned) and advises the new ones the pool does not hold
 * (adjacent blocks in one call; a run continuing the one advised before is
 * left to the kernel's readahead), refreshed when half are consumed.
 * *@s is set before the first read starts, so a caller unwound by a PANIC
 * during the open still finds it.  Returns WALRUS_EINVAL for a NULL
 * callback or list (n > 0) or depth < 1, WALRUS_ENOMEM.
 */
typedef wr_blkno (*buf_stream_cb)(void *arg);
int buf_stream_open_cb(buf_stream **s, wr_relid rel, buf_stream_cb next, void *arg, int depth);
int buf_stream_open_list(buf_stream **s, wr_relid rel, const wr_blkno *blk, uint32_t n, int depth);
int buf_stream_next(buf_stream *s, int *buf, wr_blkno *blk);
/*
 * Completes the stream's reads in flight (io_uring; nothing under sync):
 * what it read is valid in the pool, still pinned by the stream.  A caller
 * that only wanted blocks brought into the pool calls it before
 * buf_stream_get_stats and buf_stream_close.
 */
void buf_stream_wait(buf_stream *s);
void buf_stream_close(buf_stream *s);

typedef struct buf_stream_stats {
	int io_method;         /* enum wr_io_method the stream runs with */
	int depth;             /* after the caps */
	uint64_t hits;         /* io_uring: blocks valid already when looked at */
	uint64_t submitted;    /* io_uring: reads submitted; sync: blocks advised */
	uint64_t blocks;       /* io_uring: blocks those reads covered */
	uint32_t max_inflight; /* io_uring: most blocks being read at once */
	/* io_uring: times the stream slept for one of its reads (0: every read
	 * had completed when it was needed, as reads the page cache serves do) */
	uint64_t waits;
} buf_stream_stats;
void buf_stream_get_stats(const buf_stream *s, buf_stream_stats *st);

#endif /* WALRUS_BUFFER_H */
