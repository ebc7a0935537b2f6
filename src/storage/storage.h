/*
 * storage.h - data files: relations in segments, the page layout, checksums,
 * and the client side of sync requests.
 *
 * A relation is a numbered file of 8 KiB blocks, stored as segment files
 * DIR/base/<relid>, DIR/base/<relid>.1, ... of data_segment_size bytes each
 * (as PostgreSQL's relation segments).  Block b lives in segment
 * b / blocks_per_segment at offset (b % blocks_per_segment) * 8192.
 *
 * Pages carry a 24-byte header (LSN, CRC32C checksum, flags, lower/upper/
 * special offsets of a slotted page, a type and a layout version).  The
 * checksum covers the whole page, with the checksum field taken as zero, and
 * the block number, so a page written at the wrong place is detected too.
 * An all-zero page is valid (a block extended or grown, never written).
 *
 * Owns: the per-process table of open relations (smgr_rel) and their segment
 * handles in the fd cache; the read-only mappings of segments that
 * smgr_map_block hands out (kept until smgr_shutdown), and while there are
 * any, the process's SIGBUS handler (mapguard.c: a read error under a
 * mapping is an error code, not the end of the process); whether this
 * process opens data files O_DIRECT (direct.c, data_direct_io).
 * Locks: the fd cache's process lock (fdc_lock) around the tables and the
 * fd hand-off, shared by the process's threads; released for page reads and
 * writes.  The buffer pool serialises access to a block.
 * Returns: WALRUS_* codes; a checksum failure is WALRUS_ECORRUPT with a
 * message naming the file and block ("invalid page in block 7 of file
 * "DIR/base/1" (stored checksum 0x..., computed 0x...)").  Bad data is never
 * returned to the caller.
 * PANICs: every error of fsync, fdatasync or sync_file_range on a data file
 * goes through data_sync_failed(), which PANICs: after a failed fsync the
 * kernel may have dropped the dirty pages and cleared the error, so a retry
 * would "succeed" with data lost.  Only recovery from the WAL is safe.
 */
#ifndef WALRUS_STORAGE_H
#define WALRUS_STORAGE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/common.h"
#include "fdcache/fdcache.h"

typedef uint64_t wr_lsn;
typedef uint32_t wr_relid;
typedef uint32_t wr_blkno;
#define WR_INVALID_BLKNO UINT32_MAX

/* ---------------------------------------------------------------- pages */

typedef struct wr_page_header {
	uint64_t lsn;      /* LSN of the last WAL record that changed the page */
	uint32_t checksum; /* CRC32C, see page_checksum() */
	uint16_t flags;
	uint16_t lower;   /* end of the slot array */
	uint16_t upper;   /* start of the tuple space */
	uint16_t special; /* start of the access method's special space */
	uint8_t type;     /* access-method page type (0 = unset) */
	uint8_t version;  /* WR_PAGE_VERSION */
	uint16_t reserved;
} wr_page_header;

#define WR_PAGE_HEADER_SIZE ((uint16_t)sizeof(wr_page_header)) /* 24 */
#define WR_PAGE_VERSION     1

/* Initialises an empty slotted page with @special bytes of special space at its end. */
void page_init(void *page, uint16_t special, uint8_t type);
bool page_is_new(const void *page); /* all zero */
wr_lsn page_get_lsn(const void *page);
void page_set_lsn(void *page, wr_lsn lsn);
/* Free bytes between lower and upper. */
uint16_t page_free_space(const void *page);

uint32_t page_checksum(const void *page, wr_blkno blkno);
void page_set_checksum(void *page, wr_blkno blkno);
/* True for a new page or a page whose header is sane and checksum matches. */
bool page_verify(const void *page, wr_blkno blkno);

/* ---------------------------------------------------------------- relations */

typedef struct smgr_rel smgr_rel;

/* Sets the data directory and segment size for this process; creates DIR/base if missing. */
int smgr_init(const char *datadir, int64_t segment_size);
/* Closes every relation (dirty fds go through the fd cache's before-close hook). */
void smgr_shutdown(void);

int smgr_create(wr_relid rel); /* new empty relation: file + directory fsynced */
bool smgr_exists(wr_relid rel);
int smgr_open(wr_relid rel, smgr_rel **out); /* cached per process */
int smgr_nblocks(smgr_rel *r, wr_blkno *out);

/* Reads and verifies block @b; ECORRUPT on a bad checksum, EIO/... on a short read. */
int smgr_read(smgr_rel *r, wr_blkno b, void *page);
/* Stamps the checksum into @page and writes it (the page is modified in place). */
int smgr_write(smgr_rel *r, wr_blkno b, void *page);
/* After a write of block @b made outside smgr_write (io_uring): the sync hand-off it owes. */
int smgr_written(smgr_rel *r, wr_blkno b);
/* Adds block @b (== nblocks, or beyond: the gap is zero-filled) with @page's content. */
int smgr_extend(smgr_rel *r, wr_blkno b, void *page);
/* Blocks [@b, @b+@n) allocated as zeroes (fallocate), not written; @b <= nblocks. */
int smgr_grow(smgr_rel *r, wr_blkno b, wr_blkno n);
/* Blocks [@b, @b+@n) punched out (holes reading as zeroes), the size kept; for unused blocks. */
int smgr_punch(smgr_rel *r, wr_blkno b, wr_blkno n);
/* Whether any segment has holes (allocated bytes below its size). */
int smgr_sparse(smgr_rel *r, bool *sparse);
/* Cuts the relation to @nblocks; forgets pending sync requests for removed segments. */
int smgr_truncate(smgr_rel *r, wr_blkno nblocks);
/* Write-back hint: sync_file_range(SYNC_FILE_RANGE_WRITE) over blocks [b, b+n). PANICs on error. */
void smgr_writeback(smgr_rel *r, wr_blkno b, wr_blkno n);
/* fsync every segment of the relation now. PANICs on error. */
void smgr_immedsync(smgr_rel *r);
/* Removes every segment (files, then a directory fsync); forgets sync requests. */
int smgr_unlink(wr_relid rel);
/* "DIR/base/<rel>[.<seg>]" into buf. */
void smgr_segment_path(wr_relid rel, uint32_t seg, char *buf, size_t len);
uint32_t smgr_blocks_per_segment(void);

/* ---------------------------------------------------------------- direct I/O */

/*
 * Data files with O_DIRECT (option data_direct_io; direct.c).  While it is
 * on in a process, segments are opened with O_DIRECT, a page is read into
 * and written from memory aligned to SMGR_DIRECT_ALIGN (a caller's page
 * that is not goes through an aligned copy), and the read-ahead and
 * write-back hints (smgr_prefetch, smgr_writeback) do nothing: the pages
 * are not in the page cache.  fsync still runs: O_DIRECT makes nothing
 * durable (the device's cache, the file's metadata).  Mapped reads are
 * refused (smgr_map_block returns NULL): a mapping reads the page cache,
 * which direct writes bypass.
 *
 * smgr_set_direct: for this process, before it opens a data file (the
 * buffer pool's attach sets the instance's decision).
 * smgr_direct_probe: the decision, once per start: @mode is the option
 * (enum wr_direct_io).  off: false.  auto: true when the file system of
 * DIR/base takes O_DIRECT and @mmap_reads is off, else false with one LOG
 * line saying why.  on: true, or WALRUS_EINVAL naming DIR/base and its
 * file system when that refuses O_DIRECT.
 */
#define SMGR_DIRECT_ALIGN 4096
void smgr_set_direct(bool on);
bool smgr_direct(void);
int smgr_direct_probe(const char *datadir, int mode, bool mmap_reads, bool *use);

/* ---------------------------------------------------------------- reading ahead */

/*
 * For readers that ask ahead (the buffer pool's read streams).
 *
 * smgr_prefetch: posix_fadvise(WILLNEED) over blocks [b, b+n), so the kernel
 * starts reading them.  Only a hint: errors are logged at DEBUG and ignored,
 * blocks in missing segments (past the end) are skipped.
 *
 * smgr_block_handle: the fd cache handle of the segment holding block @b
 * and the block's offset in it, for a read submitted outside the seam
 * (io_uring).  The caller fdc_pin()s the handle while the read is in
 * flight, so the LRU does not close its fd.  A missing segment is the same
 * WALRUS_EIO short read ("read only 0 of 8192 bytes") smgr_read reports.
 *
 * smgr_check_read: the checks smgr_read applies after its pread, for a read
 * done elsewhere: @got is the number of bytes read, or -errno of a read
 * that failed (io_uring's result).  Returns what smgr_read would have
 * returned, with the same messages: EIO-class errors naming the file,
 * WALRUS_EIO for a short read, WALRUS_ECORRUPT for a bad checksum (also
 * logged at WARNING).  On any error @page is zeroed.
 */
/*
 * smgr_map_block: block @b of @rel through a read-only shared mapping of its
 * segment (mapped at the first use in this process, for all its threads,
 * until smgr_shutdown), or NULL when it cannot be (past the end of the file,
 * no such segment, or mmap failed: the caller reads the usual way).  The
 * page may be changing under the reader, and is not verified: the caller
 * validates what it read (buf_absent_still) and verifies the checksum.
 * Read it only through smgr_map_read.
 */
const char *smgr_map_block(wr_relid rel, wr_blkno b);
/*
 * smgr_map_prefetch: asks the kernel to read @page (from smgr_map_block)
 * whole, in one request, without waiting for it.  The mappings are advised
 * random (a fault reads no more than it touches: the kernel's read-around
 * would read read_ahead_kb around each one), so a page larger than the
 * system's is otherwise read a system page per fault, one after the other.
 * A system call: worth it only when the page is likely not in memory.
 */
void smgr_map_prefetch(const char *page);
/*
 * smgr_map_read: @fn(@page, @arg) on block @b of @rel as smgr_map_block
 * returned it, and true; false when a load from the page raised SIGBUS (the
 * device failed the read, or someone cut the file short): @fn was abandoned
 * at that load, so whatever it wrote is garbage, and the relation is not
 * read through its mappings again in this process (one WARNING naming the
 * file and block; a read the usual way then reports the error).  @fn may be
 * abandoned at any load of @page: it must take no lock, allocate nothing
 * and write only memory of its caller's.
 */
typedef void (*smgr_map_fn)(const char *page, void *arg);
bool smgr_map_read(wr_relid rel, wr_blkno b, const char *page, smgr_map_fn fn, void *arg);
/* mapguard.c, for smgr.c: install and remove under fdc_lock. */
int smgr_guard_install(void);
void smgr_guard_remove(void);
bool smgr_guard_call(const char *lo, size_t len, smgr_map_fn fn, void *arg);
void smgr_prefetch(smgr_rel *r, wr_blkno b, wr_blkno n);
int smgr_block_handle(smgr_rel *r, wr_blkno b, fdc_file *f, off_t *off);
int smgr_check_read(smgr_rel *r, wr_blkno b, void *page, ssize_t got);

/*
 * PANIC for a failed fsync/fdatasync/sync_file_range/close on a data file.
 * The one place where this decision is made.
 */
_Noreturn void data_sync_failed(const char *what, const char *path, int err);

/* ---------------------------------------------------------------- sync requests */

/*
 * The client side of design rule 4.  The first write through a segment's fd
 * in a checkpoint cycle calls the sync hook with that fd, before the write is
 * reported done, so the checkpointer holds an fd opened no later than the
 * write.  The checkpointer module installs the real hook; until then (and in
 * unit tests) a hook may be a test double.  A hook error is returned from the
 * write.  @cycle comes from the cycle source (shared memory, later).
 */
typedef struct smgr_sync_req {
	wr_relid rel;
	uint32_t seg;
	uint64_t open_seq; /* the fd cache's open sequence of this fd */
	uint64_t cycle;
} smgr_sync_req;
typedef int (*smgr_sync_hook_fn)(const smgr_sync_req *req, int fd);
typedef void (*smgr_forget_hook_fn)(wr_relid rel, uint32_t from_seg);
typedef uint64_t (*smgr_cycle_fn)(void);
void smgr_set_sync_hooks(smgr_sync_hook_fn reg, smgr_forget_hook_fn forget, smgr_cycle_fn cycle);

#endif /* WALRUS_STORAGE_H */
