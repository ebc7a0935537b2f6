/*
 * wal.h - the write-ahead log: record format, insertion into shared WAL
 * buffers, group-commit flushing, segments, the control file, the reader
 * and decoder, full-page images, and the redo framework.
 *
 * LSNs are byte positions in the WAL stream (0 is invalid).  The stream is
 * cut into segment files of wal_segment_size bytes, named by the 16 hex
 * digits of their first LSN (DIR/wal/0000000001000000), and into 8 KiB WAL
 * pages.  Each page starts with a header; the first page of a segment with
 * a long header that also names the system and the sizes.  Records start on
 * 8-byte boundaries and may cross pages and segments anywhere, their header
 * included; a page whose start continues a record says how many bytes of it
 * remain (rem_len) and carries WAL_PAGE_CONT.
 *
 * Record := wal_record header (24 bytes) + payload, where payload :=
 *   { wal_block_header [wal_image_header if WAL_BLK_HAS_IMAGE] } per block,
 *       block ids strictly increasing;
 *   the byte WAL_MAIN_DATA_ID and a uint32 main data length (always present:
 *       it ends the headers);
 *   { image bytes (ih.length), block data (data_len) } per block, in order;
 *   the main data.
 * Multi-byte fields are little-endian, copied with memcpy (no alignment
 * inside the payload).  The CRC32C covers the payload and then the header's
 * first 20 bytes (everything but the crc field).
 *
 * Owns: the shared WAL state (region "wal": insert position, buffers, write
 * and flush positions), the per-process segment fds, the control file.
 * Locks: insert_lock (spinlock) guards the reserved insert position and the
 * redo pointer; each process advertises its own insertion progress in its
 * slot (no lock); write_lock (rw lock, exclusive) admits one writer/flusher
 * at a time; buf_lock (spinlock) guards re-mapping a buffer page to a new
 * LSN.  Order: insert_lock and buf_lock are leaf locks; write_lock may be
 * taken while a process has an insertion in progress.
 * Returns: WALRUS_* codes.  The reader reports end of WAL as WALRUS_ENOTFOUND
 * with a message naming the LSN and the reason; WAL of a format this walrus
 * does not read (see "WAL formats" below), and in replay a resource manager,
 * record type or page op it does not know, as WALRUS_EVERSION.
 * PANICs: on any error writing or flushing the WAL (the commit contract
 * cannot be kept), and on a bad record inside a critical section.
 */
#ifndef WALRUS_WAL_H
#define WALRUS_WAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/common.h"
#include "ipc/ipc.h"
#include "storage/storage.h"

/* ---------------------------------------------------------------- format */

/*
 * WAL formats.  The magic that starts every page header names the format of
 * the WAL on the page: format N has magic WAL_MAGIC_BASE + N - 1.  Any
 * change that a walrus writing format WAL_FORMAT could not read or replay
 * (a page or record layout, a resource manager, a record type, a key-value
 * page op) is a new format: WAL_FORMAT + 1, and its entry in wal_formats[]
 * (format.c) naming the first walrus version that writes it.
 *
 * So that an older walrus names a later format instead of taking its pages
 * for the end of WAL or for damage, every format keeps the magic (offset 0)
 * and pageaddr (offset 8) of every page header where they are.  A format
 * that changes the page layout makes its segments' first page hold at
 * WAL_NEEDS_OFF the first walrus version that reads it, NUL-terminated in
 * WAL_NEEDS_LEN bytes; format 2 (key spaces: a commit record may name the
 * relations it drops) keeps format 1's pages, so a record's bytes are
 * there and an older walrus names the format without the version (it
 * checks that the bytes are a version).  A walrus that continues a page of
 * an older format restamps the page's magic with its own: a page names the
 * newest format on it.  A reader meeting a page of a format it does not
 * read, at its own address, returns WALRUS_EVERSION naming the format and,
 * when the page says, that version (not the end of WAL, nor damage); the
 * replication handshake carries the same pair (src/repl).
 */
#define WAL_FORMAT          2       /* the format this walrus writes */
#define WAL_FORMAT_OLDEST   1       /* the oldest format it reads */
#define WAL_MAGIC_BASE      0xD17Eu /* format 1's magic */
#define WAL_MAGIC_FORMATS   256     /* magics BASE .. BASE + 255 are walrus WAL pages */
#define WAL_FORMAT_MAGIC(n) ((uint16_t)(WAL_MAGIC_BASE + (n)-1))
#define WAL_NEEDS_OFF       40
#define WAL_NEEDS_LEN       16

/* The format of a page whose header starts with @magic; 0: not a walrus WAL page. */
static inline uint32_t wal_magic_format(uint16_t magic)
{
	return magic >= WAL_MAGIC_BASE && magic < WAL_MAGIC_BASE + WAL_MAGIC_FORMATS
	           ? (uint32_t)(magic - WAL_MAGIC_BASE) + 1
	           : 0;
}
static inline bool wal_format_readable(uint32_t format)
{
	return format >= WAL_FORMAT_OLDEST && format <= WAL_FORMAT;
}
/* The first walrus version that writes @format; NULL for a format this walrus does not know. */
const char *wal_format_walrus(uint32_t format);
/* Whether @v (a field of WAL_NEEDS_LEN bytes, from the WAL or a peer) holds a
 * version fit for a message: terminated inside, printable, no space or quote. */
bool wal_walrus_version_ok(const char *v);
/*
 * Why this walrus does not read @format, as the end of a sentence: "needs
 * walrus >= V" (@needs: V as the WAL or the primary said, or NULL or "" when
 * unknown: "needs a walrus newer than this one"), or "is no longer read by
 * walrus W (it reads WAL formats A to B ...)".
 */
void wal_format_why(uint32_t format, const char *needs, char *buf, size_t len);

#define WAL_PAGE_SIZE    8192
#define WAL_PAGE_MAGIC   WAL_FORMAT_MAGIC(WAL_FORMAT)
#define WAL_PAGE_CONT    0x0001u /* the page starts with the rest of a record */
#define WAL_PAGE_LONG    0x0002u /* first page of a segment: wal_long_page_header */
#define WAL_ALIGN        8
#define WAL_MAX_RECORD   (1u << 30) /* 1 GiB */
#define WAL_MAX_BLOCKS   32
#define WAL_MAIN_DATA_ID 0xFF

typedef struct wal_page_header {
	uint16_t magic;
	uint16_t info;     /* WAL_PAGE_CONT | WAL_PAGE_LONG */
	uint32_t rem_len;  /* bytes of a continued record still to come at the page start */
	uint64_t pageaddr; /* LSN of the page's first byte: catches recycled segments */
	/* All WAL before this position was durable when this page was written:
	 * tells damage in flushed WAL from a torn tail (reader.c). */
	uint64_t durable;
} wal_page_header;

typedef struct wal_long_page_header {
	wal_page_header std;
	uint64_t sysid;    /* the instance's system identifier (control file) */
	uint32_t seg_size; /* wal_segment_size of the stream */
	uint32_t page_size;
} wal_long_page_header;

#define WAL_SHORT_PHD ((uint32_t)sizeof(wal_page_header))      /* 24 */
#define WAL_LONG_PHD  ((uint32_t)sizeof(wal_long_page_header)) /* 40 */

typedef struct wal_record {
	uint32_t tot_len; /* header + payload */
	uint8_t rmid;     /* resource manager */
	uint8_t info;     /* rmgr-specific */
	uint16_t time_hi; /* with time_lo: milliseconds since the epoch when inserted (48 bits) */
	uint64_t prev;    /* LSN of the previous record */
	uint32_t time_lo; /* point-in-time recovery stops by it (0: unknown, older WAL) */
	uint32_t crc;     /* CRC32C(payload, then the 20 bytes above) */
} wal_record;
#define WAL_RECORD_HEADER ((uint32_t)sizeof(wal_record)) /* 24 */

/* The record's insertion time in milliseconds since the epoch (0: not recorded). */
static inline uint64_t wal_record_time_ms(const wal_record *h)
{
	return ((uint64_t)h->time_hi << 32) | h->time_lo;
}

/* Block reference flags. */
#define WAL_BLK_HAS_IMAGE  0x01
#define WAL_BLK_HAS_DATA   0x02
#define WAL_BLK_WILL_INIT  0x04 /* redo rebuilds the page from scratch: no read needed */
#define WAL_BLK_IMAGE_ZSTD 0x08
#define WAL_BLK_IMAGE_HOLE 0x10

typedef struct wal_block_header {
	uint8_t id; /* 0..WAL_MAX_BLOCKS-1, in increasing order */
	uint8_t flags;
	uint16_t data_len; /* bytes of block data */
	uint32_t rel;
	uint32_t blkno;
} wal_block_header; /* 12 bytes, packed by construction */

typedef struct wal_image_header {
	uint16_t length;   /* stored bytes of the image */
	uint16_t hole_off; /* the removed hole [hole_off, hole_off + hole_len) */
	uint16_t hole_len;
	uint16_t reserved;
} wal_image_header;

/* LSN helpers. */
#define WAL_LSN_FMT     "%X/%08X"
#define WAL_LSN_ARGS(l) (unsigned)((uint64_t)(l) >> 32), (unsigned)((uint64_t)(l)&0xffffffffu)
static inline uint64_t wal_align(uint64_t x)
{
	return (x + WAL_ALIGN - 1) & ~(uint64_t)(WAL_ALIGN - 1);
}
/* "DIR/wal/<16 hex digits>" of the segment holding @lsn. */
void wal_segment_path(const char *waldir, uint64_t seg_size, wr_lsn lsn, char *buf, size_t len);
/* Segment start LSN from a file name; false if the name is not a segment's. */
bool wal_segment_parse_name(const char *name, uint64_t seg_size, wr_lsn *start);

/* ---------------------------------------------------------------- full-page images */

/*
 * Encodes a page image: drops the hole between pd_lower and pd_upper when
 * the page has a standard layout, then compresses with zstd when @level > 0
 * and that saves space.  @out must hold WR_PAGE_SIZE bytes.  Sets the image
 * header and returns the WAL_BLK_* image flags.
 */
uint8_t wal_fpi_encode(const void *page, int zstd_level, void *out, wal_image_header *ih);
/* Restores an 8 KiB page; WALRUS_ECORRUPT when the image does not decode. */
int wal_fpi_decode(const void *img, const wal_image_header *ih, uint8_t flags, void *page);

/* ---------------------------------------------------------------- record assembly */

/*
 * Building a record (process-local, like PostgreSQL's XLogBeginInsert...):
 *   wal_begin();
 *   wal_register_block(0, rel, blk, page, flags);  page LSN decides the FPI
 *   wal_register_block_data(0, &change, sizeof(change));
 *   wal_register_data(&main, sizeof(main));
 *   lsn = wal_insert(RM_KV, KV_INSERT);            end LSN of the record
 * The registered pointers must stay valid until wal_insert returns.
 */
void wal_begin(void);
void wal_register_block(int id, wr_relid rel, wr_blkno blk, const void *page, uint8_t flags);
void wal_register_block_data(int id, const void *data, size_t len);
void wal_register_data(const void *data, size_t len);
/*
 * Assembles the registered parts into a contiguous record in @buf (grown as
 * needed) with FPIs for blocks whose page LSN <= @redo (when fpw is on).
 * Exposed for tests and tools; wal_insert uses it.
 */
typedef struct wal_assembled {
	char *buf;
	size_t cap;
	uint32_t len;         /* tot_len */
	uint32_t payload_crc; /* CRC32C of the payload, to be finished with the header */
	uint32_t fpi_count;
	uint64_t fpi_bytes_raw, fpi_bytes_stored;
} wal_assembled;
int wal_assemble(wal_assembled *a, uint8_t rmid, uint8_t info, wr_lsn redo, bool fpw,
                 int zstd_level);
/* Stamps prev, the time and the CRC into an assembled record. */
void wal_finish_record(wal_assembled *a, wr_lsn prev);
/* The clock of record times (NULL: CLOCK_REALTIME); tests that compare WAL
 * bytes, or stop recovery at a time, set their own. */
void wal_set_clock(uint64_t (*now_ms)(void));

/* ---------------------------------------------------------------- writing WAL files directly */

/*
 * Appends records straight into segment files, without shared memory: for
 * bootstrap (the first checkpoint record), tools and tests.  Pages get
 * their headers (long header on a segment's first page) as the stream
 * crosses them; missing segments are created.  Nothing else may write the
 * same WAL at the same time.
 */
typedef struct wal_file_writer wal_file_writer;
int wal_fw_open(const char *waldir, uint64_t seg_size, uint64_t sysid, wr_lsn start, wr_lsn prev,
                wal_file_writer **out);
/* Stamps prev and CRC into @a (wal_finish_record) and appends it; returns its start and end. */
int wal_fw_append(wal_file_writer *w, wal_assembled *a, wr_lsn *start, wr_lsn *end);
/* Writes what is buffered; with @sync, fdatasync (errors returned, not PANIC: no instance yet). */
int wal_fw_flush(wal_file_writer *w, bool sync);
void wal_fw_close(wal_file_writer *w);
/* Usable-byte arithmetic shared by every writer: the LSN after writing @len
 * record bytes starting at @lsn, skipping page headers. */
wr_lsn wal_lsn_advance(wr_lsn lsn, uint64_t len, uint64_t seg_size);
/* Page header size at the page that holds @lsn (long at a segment start). */
uint32_t wal_page_header_size(wr_lsn page_start, uint64_t seg_size);

/* ---------------------------------------------------------------- backends */

/*
 * Each handle of the application is a backend with its own WAL insertion
 * slot and its own record under construction; the engine makes one current
 * in the calling thread (wal_backend_set) for the length of a public call.
 * The instance's own processes, and code that never sets one, use the
 * process's default backend, whose slot wal_attach() sets.
 */
typedef struct wal_backend wal_backend;
wal_backend *wal_backend_new(int slot); /* NULL: out of memory */
void wal_backend_free(wal_backend *b);
void wal_backend_set(wal_backend *b); /* NULL: the process's default */

/* ---------------------------------------------------------------- shared WAL, insert, flush */

/* Shared memory needed for the WAL (region "wal"), from the options. */
size_t wal_shmem_size(const wr_options *o, int nslots);
/* In the supervisor, while creating shared memory. */
int wal_shmem_init(const wr_options *o, const char *datadir, int nslots);
/* In every process after attaching: finds the region; @slot is the process's
 * slot (0 <= slot < nslots) for advertising insertion progress. */
int wal_attach(int slot);
void wal_detach(void);

/* After recovery: the stream continues at @end (end of the last valid record). */
int wal_start_insert_at(wr_lsn end, wr_lsn prev, wr_lsn redo, uint64_t sysid,
                        const void *last_page);
/* The WAL writer's latch: wal_flush_async wakes it. */
_Atomic uint32_t *wal_writer_latch(void);
/* Bytes of WAL since the redo pointer (for max_wal_size checkpoint requests). */
uint64_t wal_since_redo(void);
/*
 * Checkpoint requests by WAL volume: an insert that enters a new segment
 * when more than max_wal_size / (1 + checkpoint_completion_target) bytes
 * were written since the redo pointer sets the request and wakes the
 * checkpointer's latch; the checkpointer takes it (true once per request).
 */
bool wal_take_ckpt_request(void);
/* Wakes the WAL writer and the checkpointer (shutdown: they re-check at once). */
void wal_wake_workers(void);
_Atomic uint32_t *wal_ckpt_latch(void);

/* Inserts the registered record; returns its end LSN (where the next one may start). */
wr_lsn wal_insert(uint8_t rmid, uint8_t info);
/* Like wal_insert with the start LSN of the record too. */
wr_lsn wal_insert_at(uint8_t rmid, uint8_t info, wr_lsn *start);

/* Called after each flush moves the flush LSN (the WAL senders' wake-up,
 * src/repl): it must be cheap.  Per process; NULL for none. */
void wal_set_flush_hook(void (*fn)(void));

/* Returns once the WAL up to @lsn is durable (group commit).  PANICs on I/O error. */
void wal_flush_to(wr_lsn lsn);
/* Asynchronous commit: asks the WAL writer to flush up to @lsn soon. */
void wal_flush_async(wr_lsn lsn);
/* One round of the WAL writer: write and flush what is inserted; preallocate segments. */
void wal_writer_round(void);
/*
 * Ends preallocation for good and waits (up to @timeout_ns) for one under
 * way to finish: true once none can install a segment any more.  For the
 * checkpoint that settles the WAL directory at shutdown.
 */
bool wal_stop_preallocation(uint64_t timeout_ns);

wr_lsn wal_insert_lsn(void);  /* current end of reserved WAL */
wr_lsn wal_flushed_lsn(void); /* durable up to */
wr_lsn wal_redo_lsn(void);    /* current redo pointer (for FPI decisions) */
/*
 * Sets a new redo pointer at the current insert position and returns it:
 * every record reserved after it decides its FPIs against it (checkpoint
 * start).
 */
wr_lsn wal_set_redo_here(void);

typedef struct wal_stats {
	uint64_t records, bytes, fpis, fpi_bytes_raw, fpi_bytes_stored;
	uint64_t writes, flushes, flush_ns, write_bytes;
	uint64_t buffer_full_waits; /* inserts that had to write WAL to get a buffer */
	uint64_t group_waits;       /* flush_to calls served by someone else's flush */
	uint64_t gather_naps;       /* sleeps of committers waiting for others to gather */
	uint64_t segments_created, segments_recycled, segments_removed;
	/* zero-fills by a process writing WAL (not the WAL writer's
	 * preallocation): it reached a segment that was not there yet */
	uint64_t segments_on_demand;
	uint32_t prealloc_ahead; /* segments the WAL writer keeps ready past the insert's */
	bool direct_io;          /* segments are opened with O_DIRECT (wal_direct_io) */
} wal_stats;
void wal_get_stats(wal_stats *s);

/* ---------------------------------------------------------------- a standby's recovery */

/*
 * A standby replays while the instance runs (standby.c): its checkpointer
 * makes restartpoints from the checkpoint records replayed, and promotion
 * hands the new timeline to the end-of-recovery checkpoint.  Written by the
 * startup process, read by the checkpointer and statistics.
 */
void wal_set_in_recovery(bool on);
bool wal_in_recovery(void);
void wal_note_replayed(wr_lsn end, uint64_t time_ms);
wr_lsn wal_replayed_lsn(void);
uint64_t wal_replayed_time_ms(void);
struct wal_checkpoint_rec;
void wal_note_replayed_checkpoint(wr_lsn lsn, const struct wal_checkpoint_rec *ck);
/* The last checkpoint record replayed (false: none yet). */
bool wal_replayed_checkpoint(wr_lsn *lsn, struct wal_checkpoint_rec *ck);
/* The timeline the next checkpoint records in the control file (0: keep). */
void wal_set_timeline(uint32_t tli);
uint32_t wal_timeline(void);
/* A standby's WAL receiver follows the primary onto a newer timeline (0:
 * none): the next restartpoint records it in the control file, and a
 * promotion branches off it. */
void wal_set_follow_timeline(uint32_t tli);
uint32_t wal_follow_timeline(void);

/* ---------------------------------------------------------------- a synchronous standby */

/*
 * With synchronous_standby set, a durable commit returns only once the WAL
 * sender of that standby reports it flushed (or, with
 * synchronous_standby_level = apply, replayed) the commit's WAL: PostgreSQL's
 * synchronous_commit = on (remote_apply) with one synchronous standby.  With
 * no such standby connected, commits wait for one, as PostgreSQL's do.
 * A stop does not wait for them: the commit is durable here but not
 * confirmed by the standby, and says so (WALRUS_ESHUTDOWN).
 */
/* @name: synchronous_standby ("" or NULL: none). */
void wal_sync_standby_set(const char *name);
/* How a waiting commit tells that the instance's supervisor is gone (NULL: it does not). */
void wal_set_alive_check(bool (*fn)(void));
/* That check says the supervisor is gone (false without a check). */
bool wal_supervisor_gone(void);
bool wal_sync_standby_wanted(void);
/* The synchronous standby's sender: it confirmed up to @lsn. */
void wal_sync_standby_confirm(wr_lsn lsn);
wr_lsn wal_sync_standby_lsn(void);
/* Commits waiting for the synchronous standby now (statistics, tests). */
uint32_t wal_sync_standby_waiters(void);
/* A durable commit: wal_flush_to(@lsn), then the synchronous standby's
 * confirmation when one is wanted.  WALRUS_OK, or ESHUTDOWN / ERESTART when
 * the instance stops or crashes during the wait. */
int wal_commit_durable(wr_lsn lsn);

/* ---------------------------------------------------------------- replication slots */

/*
 * A replication slot keeps the WAL a standby still needs while it is away
 * (PostgreSQL's physical slots): no segment at or after its restart_lsn is
 * recycled, unless it falls more than max_slot_wal_keep_size behind the
 * redo point: then it is invalidated (a WARNING), and its standby catches
 * up from the archive or is told which segment is gone.  Slots live in
 * shared memory and in DIR/slots/NAME (written durably at creation, at
 * invalidation and, when they moved, by each checkpoint before it recycles
 * WAL: a crash restarts a slot from an older position, keeping more WAL,
 * never less).  Names: 1 to 63 of [A-Za-z0-9_-].
 */
#define WAL_SLOT_DIR      "slots"
#define WAL_SLOT_NAME_MAX 63
/* Loads DIR/slots into shared memory (the supervisor, after wal_shmem_init). */
int wal_slots_load(const char *datadir);
/* EINVAL (bad name), EBUSY (exists), ELIMIT (max_replication_slots). Reserves WAL from
 * the current redo point. */
int wal_slot_create(const char *datadir, const char *name, int max_slots);
/* ENOTFOUND, EBUSY (a sender streams for it). */
int wal_slot_drop(const char *datadir, const char *name);
/* A sender takes the slot for its standby: ENOTFOUND, EBUSY (another streams),
 * EINVAL (invalidated).  *restart: where it keeps WAL from. */
int wal_slot_acquire(const char *name, uint32_t pid, wr_lsn *restart);
void wal_slot_release(const char *name, uint32_t pid);
/* Frees every slot process @pid held (it is gone). */
void wal_slots_release_pid(uint32_t pid);
/* The standby flushed up to @lsn: WAL before it is no longer needed. */
void wal_slot_advance(const char *name, wr_lsn lsn);
/* Writes the slots that moved (each checkpoint, before recycling). */
int wal_slots_save(const char *datadir);
/* The oldest restart_lsn of the valid slots (0: none); invalidates those more than
 * @max_keep bytes behind @redo first (and saves them). */
wr_lsn wal_slots_keep(const char *datadir, wr_lsn redo, int64_t max_keep);
typedef struct wal_slot_info {
	char name[64];
	wr_lsn restart_lsn;
	uint32_t active_pid;
	bool invalidated;
} wal_slot_info;
#define WAL_MAX_RSLOTS_LISTED 64
/* Up to @max slots into @out; returns how many. */
int wal_slots_list(wal_slot_info *out, int max);

/* ---------------------------------------------------------------- segments */

/*
 * Creates the segment that starts at @start: zero-filled temp file, fsync,
 * rename into place, fsync the directory.  When it exists already with the
 * right size (installed by another process, or recycled by wal_recycle), only
 * the directory fsync: the installer may not have made the name durable yet.
 * WALRUS_ECORRUPT when it exists with the wrong size.  PANICs when the
 * directory fsync fails.
 */
int wal_segment_create(const char *waldir, uint64_t seg_size, wr_lsn start);
/* The same, zero-filling through O_DIRECT if @direct; *filled tells whether
 * this call wrote a zero-filled file (even one that another process's rename
 * then made useless). */
int wal_segment_make(const char *waldir, uint64_t seg_size, wr_lsn start, bool direct,
                     bool *filled);
/*
 * Removes the temporary segments (NAME.tmp.PID) that processes killed while
 * creating a segment left in @waldir; only while no other process can be
 * creating one (the startup process).  Returns how many; failures are
 * logged as warnings (the files only take space).
 */
int wal_remove_temp_segments(const char *waldir);
/*
 * After a checkpoint whose redo LSN is @redo: segments wholly before it are
 * renamed to future names (keeping enough for min_wal_size .. max_wal_size)
 * or removed; counts go to the stats.  @settle (a shutdown checkpoint: no
 * WAL is written after it) keeps min_wal_size only, and also removes the
 * future segments past it that earlier, busier cycles recycled.
 */
int wal_recycle(const char *waldir, const wr_options *o, wr_lsn redo, wr_lsn insert, bool settle,
                int *recycled, int *removed);

/* ---------------------------------------------------------------- control file */

#define WAL_CONTROL_FILE    "walrus.control"
#define WAL_CONTROL_MAGIC   0x574c4354u /* "WLCT" */
#define WAL_CONTROL_VERSION 1
#define WAL_CONTROL_SIZE    512 /* bytes on disk */

enum wal_db_state {
	WAL_DB_SHUTDOWN = 1,      /* clean: no redo needed */
	WAL_DB_IN_PRODUCTION = 2, /* running, or crashed */
	WAL_DB_IN_RECOVERY = 3,
};

typedef struct wal_control {
	uint32_t magic;
	uint32_t version;
	uint64_t sysid;
	uint32_t state; /* enum wal_db_state */
	uint32_t page_size;
	uint64_t wal_seg_size;
	uint64_t data_seg_size;
	uint64_t checkpoint_lsn; /* where the last checkpoint record starts */
	uint64_t redo_lsn;       /* its redo point: replay starts here */
	uint64_t prev_checkpoint_lsn;
	uint64_t checkpoint_time_us;
	uint64_t next_relid; /* first relation id not yet used */
	/* The history this WAL belongs to: 1 at creation, a new one at the end of
	 * each point-in-time recovery (0 in older files means 1). */
	uint32_t timeline;
	/* Nonzero once a standby's promotion to @timeline is decided (written
	 * before anything of that timeline is in the WAL): a start that finds
	 * the standby's settings still there completes the promotion instead of
	 * following the old timeline past the cut.  Cleared by the first
	 * checkpoint after it.  (Older files hold 0 here.) */
	uint32_t promoted;
	/* A base backup's copy: its start (redo) and end LSNs; replay must reach
	 * the end before the copy is consistent.  0 elsewhere. */
	uint64_t backup_start_lsn, backup_end_lsn;
	uint64_t reserved[5];
	uint32_t crc; /* CRC32C of everything before it */
} wal_control;

static inline uint32_t wal_control_timeline(const wal_control *c)
{
	return c->timeline == 0 ? 1 : c->timeline;
}

/* Reads and verifies DIR/walrus.control: ENOENT, ECORRUPT (bad CRC/magic), EVERSION. */
int wal_control_read(const char *datadir, wal_control *c);
/* Replaces it atomically: temp file, fsync, rename, fsync directory. */
int wal_control_write(const char *datadir, const wal_control *c);
/* The on-disk bytes of @c (magic, version, page size and CRC set), as written. */
void wal_control_encode(const wal_control *c, uint8_t out[WAL_CONTROL_SIZE]);
/* Verifies and decodes control-file bytes that came from elsewhere (a base backup
 * received from a primary): as wal_control_read, @what naming them in errors. */
int wal_control_decode(const uint8_t *buf, size_t len, const char *what, wal_control *c);
/* A new instance: control file + first segment holding a shutdown checkpoint record. */
int wal_bootstrap(const char *datadir, const wr_options *o);
/*
 * Removes what an interrupted wal_bootstrap may have written in @datadir (the
 * control file and its temp file, every segment and temporary segment in
 * DIR/wal), logging each file, and makes the removals durable.  Only for a
 * directory whose initialisation is known not to have finished.
 */
int wal_bootstrap_undo(const char *datadir);
/* The name of the first WAL segment or temporary segment in @waldir into
 * @found (an empty string when it holds none, or does not exist). */
int wal_dir_first_file(const char *waldir, char *found, size_t len);

/* ---------------------------------------------------------------- archive names and timelines */

/*
 * Segments are archived as TTTTTTTT + the 16 hex digits of their start
 * (24 characters, as PostgreSQL's names): the timeline keeps the WAL of a
 * new history (after a point-in-time recovery) apart from the old one, whose
 * segments have the same LSNs.  Inside DIR/wal, names stay LSN-only: a data
 * directory holds one history.
 */
#define WAL_ARCHIVE_NAME_LEN 24
void wal_archive_name(uint32_t tli, wr_lsn seg_start, char *buf, size_t len);
bool wal_archive_parse_name(const char *name, uint32_t *tli, wr_lsn *seg_start);

/*
 * Timeline history (DIR/wal/TTTTTTTT.history, archived too): one line per
 * ancestor, "PARENT_TLI<TAB>X/Y<TAB>reason", where X/Y is the LSN at which
 * the child timeline branched off PARENT_TLI (WAL before it is the parent's).
 * Timeline 1 has no file.
 */
#define WAL_HISTORY_MAX 64
typedef struct wal_history {
	int n;
	struct {
		uint32_t tli; /* an ancestor ... */
		wr_lsn end;   /* ... whose WAL is followed up to here (exclusive) */
	} e[WAL_HISTORY_MAX]; /* oldest first; the timeline itself is not listed */
	uint32_t tli;         /* the timeline the file describes */
} wal_history;
void wal_history_name(uint32_t tli, char *buf, size_t len); /* "TTTTTTTT.history" */
bool wal_history_parse_name(const char *name, uint32_t *tli);
/*
 * The highest of @tli and every timeline that a history file or an archived
 * segment's name in @dir mentions (NULL, "" or a directory that cannot be
 * read: @tli).  A new timeline is one above this over every place that
 * holds WAL (the local WAL, the archive), as PostgreSQL picks it: two
 * promotions, or a promotion after a point-in-time recovery, never reuse a
 * number.
 */
uint32_t wal_history_highest(const char *dir, uint32_t tli);
/* Replaces DIR/NAME with @text durably: temp file, fsync, rename, fsync DIR. */
int wal_write_file(const char *dir, const char *name, const char *text);
/* "X/Y" (hex, as printed by WAL_LSN_FMT) into *out. */
bool wal_parse_lsn(const char *s, wr_lsn *out);
/* Reads @path (the file of timeline @tli); timeline 1 needs no file (empty history). */
int wal_history_read(const char *path, uint32_t tli, wal_history *h);
/* @h becomes the history of the timeline that holds @lsn when following @h
 * (a point at or before a branch lies on the parent). */
void wal_history_at(wal_history *h, wr_lsn lsn);
/* Following @h, the WAL before @upto is timeline @tli's: @tli is @h's own
 * timeline, or an ancestor it branched off at @upto or later. */
bool wal_history_contains(const wal_history *h, uint32_t tli, wr_lsn upto);
/* The timeline whose WAL holds the segment starting at @seg_start when following @h. */
uint32_t wal_history_tli_for(const wal_history *h, wr_lsn seg_start, uint64_t seg_size);
/* Writes WALDIR/<child>.history durably: @parent's lines, then "parent<TAB>X/Y<TAB>reason". */
int wal_history_write(const char *waldir, const wal_history *parent, uint32_t child, wr_lsn branch,
                      const char *reason);

/* ---------------------------------------------------------------- backups and archiving hooks */

/*
 * A base backup runs between wal_backup_begin and wal_backup_end_for: meanwhile
 * every page's first change after the redo point carries a full image even
 * with full_page_writes=off (the copy may read torn pages), and no segment
 * at or after @keep is recycled.  One at a time: WALRUS_EBUSY otherwise.
 * Shared memory is reset by a crash restart, which ends a backup whose
 * process died; @holder_pid names the process that holds it, so that the
 * supervisor can end the backup of a WAL sender that died without a crash
 * restart (wal_backup_end_for).
 */
int wal_backup_begin(wr_lsn keep, uint32_t holder_pid);
wr_lsn wal_backup_keep_lsn(void); /* 0: no backup running */
/* Ends the backup process @pid holds, if any: the holder's own release, and
 * the supervisor's when that process ends or detaches (a backup never
 * outlives its process).  True if it did. */
bool wal_backup_end_for(uint32_t holder_pid);
/* Whether process @pid holds the running backup (not one that replaced its own). */
bool wal_backup_held_by(uint32_t pid);
/* The process holding the running backup; 0 when none (or not yet named). */
uint32_t wal_backup_holder(void);

/*
 * Ends the current segment: inserts an XLOG_SWITCH record, moves the insert
 * position to the next segment's start and flushes up to there.  Returns
 * that start (the end of the switched segment), or 0 when nothing was
 * inserted since the segment began (nothing to switch).
 */
wr_lsn wal_insert_switch(void);

/*
 * Whether the segment starting at @seg_start may be recycled or removed:
 * with archive_mode=on only once archived (DIR/wal/archive_status/NAME.done).
 */
bool wal_archive_may_remove(const char *waldir, const wr_options *o, wr_lsn seg_start);

/*
 * Archive status (wal/archive.c, as PostgreSQL's): DIR/wal/archive_status/
 * NAME.ready once a completed segment (or a history file) waits for the
 * archiver, renamed to NAME.done once the archive holds it durably.  NAME is
 * the segment's name inside DIR/wal.
 */
#define WAL_ARCHIVE_STATUS_DIR "archive_status"
#define WAL_ARCHIVE_READY      ".ready"
#define WAL_ARCHIVE_DONE       ".done"
#define WAL_SEGMENT_NAME_LEN   16 /* "%016llX" of the segment's start */
/* WALDIR/archive_status/NAME+SUFFIX; false when it does not fit. */
bool wal_archive_status_path(const char *waldir, const char *name, const char *suffix, char *buf,
                             size_t len);
/* The segment's file name inside DIR/wal (no directory). */
void wal_segment_name(uint64_t seg_size, wr_lsn seg_start, char *buf, size_t len);
/* Removes a recycled or removed segment's status files (a failure is a WARNING). */
/* Marks every segment in WALDIR that ends at or before @upto as archived:
 * after a point-in-time recovery, those hold the old history, archived under
 * its timeline (or in the backup); the new timeline's begin at the branch. */
int wal_archive_mark_done_before(const char *waldir, uint64_t seg_size, wr_lsn upto);
void wal_archive_forget(const char *waldir, uint64_t seg_size, wr_lsn seg_start);
/*
 * A standby with archive_mode and archive_dir: marks archived (.done) each
 * segment of WALDIR whose copy its primary put in @archive_dir (named by
 * timeline @tli's history).  The others stay until the standby, once
 * promoted, archives them itself: WAL its primary never archived is not
 * recycled and lost to point-in-time recovery.
 */
int wal_archive_mark_present(const char *waldir, const char *archive_dir, uint32_t tli,
                             uint64_t seg_size);

/* ---------------------------------------------------------------- reader */

typedef struct wal_decoded_block {
	uint8_t id, flags;
	wr_relid rel;
	wr_blkno blkno;
	const char *image; /* stored image bytes (NULL if none) */
	wal_image_header ih;
	const char *data; /* block data */
	uint32_t data_len;
} wal_decoded_block;

typedef struct wal_decoded {
	wr_lsn lsn, end; /* start of the record; end = just past its last byte */
	wal_record hdr;
	int nblocks;
	wal_decoded_block blocks[WAL_MAX_BLOCKS];
	const char *main_data;
	uint32_t main_len;
	const char *raw; /* the whole record, header included */
} wal_decoded;

typedef struct wal_reader wal_reader;

/* A reader over DIR/wal; @sysid 0 accepts any system id. */
int wal_reader_open(const char *waldir, uint64_t seg_size, uint64_t sysid, wal_reader **out);
void wal_reader_close(wal_reader *r);
/*
 * Reads the record at @lsn (or, with 0, the one after the previous read).
 * WALRUS_OK with *rec valid until the next call; WALRUS_ENOTFOUND at the
 * end of WAL (a zeroed or torn tail, a missing or empty next segment), with the
 * reason in walrus_errmsg(); WALRUS_ECORRUPT when a bad record is followed
 * by valid WAL (damage, not a tail), naming the LSN; WALRUS_EVERSION when
 * the stream reaches a page of a WAL format this walrus does not read.
 */
int wal_read_record(wal_reader *r, wr_lsn lsn, wal_decoded **rec);
/*
 * A standby's reader: WAL at or past @limit is not durable yet (its
 * receiver is still writing it), so a record that reaches past it is not
 * read: wal_read_record returns WAL_NOT_YET (a positive code, no message)
 * and reading it again after a higher limit succeeds.  0: no limit.
 */
#define WAL_NOT_YET 2
void wal_reader_set_limit(wal_reader *r, wr_lsn limit);
/* Forgets the open segment and the page in memory: a source replaced a
 * segment file (a copy from the archive over a partly received one), or
 * pages were read with no limit (the local WAL, then a source's). */
void wal_reader_reopen(wal_reader *r);
/* The first valid record at or after @lsn (used by waldump --from a non-record LSN). */
int wal_find_first(wal_reader *r, wr_lsn lsn, wr_lsn *found);
/* Decodes a contiguous record (header + payload) already in memory. */
int wal_decode(const char *raw, uint32_t len, wr_lsn lsn, wal_decoded *out);

/* ---------------------------------------------------------------- resource managers and redo */

enum wal_rmid { RM_XLOG = 0, RM_STORAGE = 1, RM_KV = 2, RM_TEST = 3, RM_MAX = 16 };

/* RM_XLOG infos */
#define XLOG_CHECKPOINT_SHUTDOWN 0x10
#define XLOG_CHECKPOINT_ONLINE   0x20
#define XLOG_NOOP                0x30
#define XLOG_FPI                 0x40 /* a page image on its own */
/* The rest of the segment is unused: the next record starts the next segment
 * (switch-wal, archive_timeout: a segment ends so that it can be archived). */
#define XLOG_SWITCH        0x50
#define XLOG_RESTORE_POINT 0x60 /* main data: wal_restore_point_rec; its time is the header's */
#define XLOG_BACKUP_END    0x70 /* main data: the backup's start (wr_lsn): consistent from here */

#define WAL_RESTORE_POINT_NAME 64 /* with its terminating zero */
typedef struct wal_restore_point_rec {
	char name[WAL_RESTORE_POINT_NAME];
} wal_restore_point_rec;

/* Where the WAL continues after @rec, which ends at @end: a switch record
 * ends its segment (the rest is unused), any other record at @end. */
static inline wr_lsn wal_record_next_end(const wal_decoded *rec, wr_lsn end, uint64_t seg_size)
{
	if (rec->hdr.rmid == RM_XLOG && rec->hdr.info == XLOG_SWITCH && end % seg_size != 0)
		end += seg_size - end % seg_size;
	return end;
}

typedef struct wal_checkpoint_rec {
	wr_lsn redo;
	uint64_t time_us;
	uint64_t next_relid;
} wal_checkpoint_rec;

/* What a redo function gets for its blocks: the page to change, or nothing to do. */
enum wal_redo_action { REDO_NEEDED, REDO_DONE_ALREADY, REDO_RESTORED_IMAGE };

typedef struct wal_rmgr {
	const char *name;
	void (*redo)(const wal_decoded *rec);
	/* Writes a one-line description of the record ("insert key 5 bytes at 3"). */
	void (*describe)(const wal_decoded *rec, char *buf, size_t len);
	const char *(*info_name)(uint8_t info);
} wal_rmgr;

void wal_rmgr_register(int rmid, const wal_rmgr *rm);
const wal_rmgr *wal_rmgr_get(int rmid);
/* Registers RM_XLOG and RM_TEST (done on first use of the table; idempotent). */
void wal_register_builtin_rmgrs(void);

/*
 * The page source redo works through: the storage layer directly now, the
 * buffer pool when it exists.  get returns the page for block @id of @rec,
 * applying its image when it has one; release stamps the record's LSN when
 * the page was changed and hands it back.
 */
typedef struct wal_redo_pages {
	int (*get)(const wal_decoded *rec, int id, void **page, int *action);
	void (*release)(const wal_decoded *rec, int id, void *page, bool changed);
	void (*finish)(void); /* end of recovery: make what redo wrote durable */
	/* While on, pages released stay locked and pinned, and a page asked for
	 * again is the one held; off releases them all (NULL: not needed). */
	void (*hold)(bool on);
	/* How many pages a hold may keep at once (NULL: no limit). */
	uint32_t (*hold_limit)(void);
} wal_redo_pages;
/* Keeps the pages of a group of records (a key-value batch) locked until
 * all of them are applied: a standby's readers never see a part of it. */
void wal_redo_hold(bool on);
/* The page source's bound on a hold (0: none): a group changing more pages
 * cannot be applied, and says so with wal_redo_fail. */
uint32_t wal_redo_hold_limit(void);
/* Makes the current record's redo fail with @rc (its message set by
 * wr_error): recovery stops there and reports it. */
void wal_redo_fail(int rc);
void wal_redo_set_pages(const wal_redo_pages *p);
int wal_redo_get_block(const wal_decoded *rec, int id, void **page, int *action);
void wal_redo_release_block(const wal_decoded *rec, int id, void *page, bool changed);

/*
 * Recovery: from the control file's redo LSN, replays every record to the
 * end of WAL and reports where the stream ends (so insertion continues
 * there).  Returns ECORRUPT on damage, naming the LSN.
 *
 * Archive recovery (a restored base backup): DIR/walrus.recovery, written by
 * `walrus restore`, in walrus.conf's "name = value" format:
 *   backup_end_lsn = X/Y   the backup is consistent only once replay gets here
 *   target = end | lsn | time | name
 *   target_lsn = X/Y       replay the records that end at or before it
 *   target_time = N        microseconds since the epoch: replay records inserted no later
 *   target_name = NAME     replay up to and including this restore point
 *   new_timeline = N       the timeline that starts where replay stops
 *   timeline = N           the timeline whose history replay follows (the
 *                          restore copied its segments; default: the
 *                          control file's): the new one branches off it
 * Replay stops at the target (an error when the WAL ends first, or before
 * backup_end_lsn, naming where it ended); the WAL after that point is cut
 * off (the rest of its segment zeroed, later segments removed), the new
 * timeline's history file written, and the end-of-recovery checkpoint
 * records the timeline in the control file; then the file is removed.
 */
#define WAL_RECOVERY_FILE "walrus.recovery"
#define WAL_BACKUP_LABEL  "backup_label"

typedef struct wal_recovery_result {
	wr_lsn end, last_lsn, last_redo;
	uint64_t records;
	uint64_t next_relid;
	char last_page[WAL_PAGE_SIZE]; /* the partial page at the end, to continue it */
	/* Archive recovery: a new timeline starts at the end (0: none), and
	 * whether DIR/walrus.recovery goes after the end-of-recovery checkpoint. */
	uint32_t new_timeline;
	bool archive_done;
} wal_recovery_result;
int wal_recover(const char *datadir, const wr_options *o, wal_recovery_result *res);

/*
 * A standby's recovery (PostgreSQL's standby mode): the local WAL is
 * replayed to its end, then only WAL the standby's sources made durable,
 * as they make more of it, until a promotion.  Then the WAL after the last
 * record replayed is cut off, a history file names the new timeline
 * (res->new_timeline, one above every timeline of the local WAL, the
 * standby's archive and archive_dir) and the result is as
 * at the end of crash recovery.  The hooks run in the startup process:
 *   local_end(end)   the local WAL ends at @end: sources continue there;
 *   wait(limit, &promote, &replaced)  blocks until WAL past @limit is
 *                    durable and returns its new end (replaced: a segment
 *                    file was swapped meanwhile); or sets promote
 *                    (everything up to @limit replayed) to end recovery;
 *   replayed(rec, end)  after each record (@end: where the WAL goes on).
 */
typedef struct wal_standby_hooks {
	void (*local_end)(wr_lsn end);
	wr_lsn (*wait)(wr_lsn limit, bool *promote, bool *replaced);
	void (*replayed)(const wal_decoded *rec, wr_lsn end);
	/* The directory the standby restores archived WAL from ("": none):
	 * with the local WAL and archive_dir, where promotion looks for the
	 * timelines in use (wal_history_highest). */
	const char *archive;
} wal_standby_hooks;
int wal_recover_standby(const char *datadir, const wr_options *o, const wal_standby_hooks *sb,
                        wal_recovery_result *res);

#endif /* WALRUS_WAL_H */
