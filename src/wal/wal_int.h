/*
 * wal_int.h - private to src/wal: the shared WAL state that insert.c and
 * flush.c both work on.  Nothing outside src/wal includes it.
 *
 * Insertion progress (PostgreSQL's insertingAt, one slot per process):
 *   done_upto == 0      the process is not inserting
 *   done_upto == 1      inserting, nothing advertised: a writer must wait
 *                       until it finishes or advertises
 *   done_upto >= 2      inserting, and every byte it reserved below this
 *                       position is copied; it may be blocked waiting for
 *                       a WAL buffer, so a writer must not wait for it
 * An inserter advertises before anything that can block (getting a buffer
 * page that still holds unwritten WAL), which is what makes "write WAL to
 * free a buffer" and "wait for insertions to finish" deadlock-free.
 */
#ifndef WALRUS_WAL_INT_H
#define WALRUS_WAL_INT_H

#include <limits.h>

#include "wal/wal.h"

#define WAL_SLOT_IDLE 0
#define WAL_SLOT_BUSY 1

/* Most segments the WAL writer keeps ready past the insert position's. */
#define WAL_PREALLOC_MAX 8u

/* ---------------------------------------------------------------- a backend's own state */

#define WAL_STATIC_CHUNKS 64

/* A piece of registered data; owner is a block id or WAL_MAIN_OWNER. */
typedef struct wal_chunk {
	const void *data;
	size_t len;
	int owner;
} wal_chunk;

typedef struct wal_reg_block {
	bool used;
	uint8_t flags;
	wr_relid rel;
	wr_blkno blk;
	const void *page;
	size_t data_len;
} wal_reg_block;

/* The record being registered (record.c). */
typedef struct wal_reg_state {
	wal_reg_block blocks[WAL_MAX_BLOCKS];
	wal_chunk fixed[WAL_STATIC_CHUNKS];
	wal_chunk *chunks; /* fixed, or a heap array once there are more */
	size_t nchunks, cap;
	uint64_t main_len;
	int error; /* the first misuse, reported by wal_assemble */
	char why[128];
} wal_reg_state;

/*
 * What a backend (an application's handle, or one of the instance's own
 * processes) keeps of the WAL: its insertion slot, the record it is
 * registering and its assembled bytes, its zstd context.  The calling
 * thread's current one is wal_me (see wal_backend_set).
 */
struct wal_backend {
	int slot; /* its insertion slot: the proc slot; -1 while none */
	wal_reg_state reg;
	wal_assembled scratch;
	void *cctx; /* ZSTD_CCtx, created on first use */
};
extern WR_TLS wal_backend *wal_me;

typedef struct wal_slot {
	_Atomic uint64_t done_upto;
	char pad[56];
} wal_slot;

/* A replication slot (slot.c); name and in_use change under rslot_lock. */
#define WAL_MAX_RSLOTS 64
typedef struct wal_rslot {
	_Atomic uint32_t in_use;
	_Atomic uint32_t active_pid;  /* the WAL sender streaming for it, 0: none */
	_Atomic uint32_t invalidated; /* fell more than max_slot_wal_keep_size behind */
	_Atomic uint32_t dirty;       /* restart_lsn moved since the slot's file was written */
	_Atomic uint64_t restart_lsn; /* the oldest WAL its standby still needs */
	char name[64];
} wal_rslot;

typedef struct wal_shared {
	/* fixed at creation */
	uint64_t seg_size;
	uint32_t nbufs, nslots;
	int sync_method, io_method, zstd_level;
	bool fpw;
	/* Segments opened with O_DIRECT; wal_direct_io=auto clears it for good
	 * when the file system refuses O_DIRECT (flush.c, segment_open). */
	_Atomic bool direct;
	bool direct_auto;
	int64_t max_wal_size;
	uint64_t gather_ns;      /* commit_gather */
	uint64_t ckpt_wal_bytes; /* WAL since redo that asks for a checkpoint */
	char waldir[PATH_MAX];
	uint64_t bufs_off, page_end_off, slots_off; /* offsets in shared memory */

	/* set when insertion may start (after recovery) */
	_Atomic uint32_t started;
	uint64_t sysid;

	/* insert position: insert_lock */
	wr_spinlock insert_lock;
	uint64_t cur_start;  /* where the next record starts */
	uint64_t cur_end;    /* end of the last reserved record */
	uint64_t prev_start; /* start of the last reserved record */
	_Atomic uint64_t redo;

	/* re-mapping buffer pages to new LSNs, strictly in LSN order: buf_lock */
	wr_spinlock buf_lock;
	uint64_t init_upto; /* the next page to map starts here */

	/* writing and flushing: write_lock admits one writer */
	wr_rwlock write_lock;
	_Atomic uint64_t write_lsn;
	_Atomic uint64_t flush_lsn;
	_Atomic uint32_t flush_seq; /* bumped after every flush: group-commit waiters sleep on it */
	_Atomic uint32_t flush_sleepers;
	/* group commit's gather (flush.c) */
	_Atomic uint32_t in_flush;      /* committers inside wal_flush_to that had to wait */
	_Atomic uint32_t gather_expect; /* in_flush when the last flush ended: they come back */
	/* committers not covered by the latest flush started: its number in the
	 * high 32 bits (bumped when a flush fixes its range), the count low */
	_Atomic uint64_t gather_word;
	_Atomic uint64_t gather_last_ns;  /* when the latest of them arrived */
	_Atomic uint64_t gather_start_ns; /* 0: none; else its start, the timer's token */
	_Atomic uint64_t flush_target;    /* end of the latest flush started (its range is fixed) */
	_Atomic uint64_t flush_start_ns;  /* when the flush under way began; 0: none */
	_Atomic uint64_t flush_avg_ns;    /* moving average of one write + flush */
	_Atomic uint64_t async_lsn;
	_Atomic uint32_t writer_latch;
	_Atomic uint64_t prealloc_end; /* segments are known to exist up to here */
	/* Segments the WAL writer keeps ready past the insert position's: doubled
	 * (up to prealloc_max) each time a process writing WAL had to create
	 * one itself, a zero-fill in a committer's path (flush.c). */
	_Atomic uint32_t prealloc_ahead;
	uint32_t prealloc_max;
	/* Ended for good by the settling checkpoint (wal_stop_preallocation),
	 * which then waits for prealloc_busy (a futex word) to reach 0: a segment
	 * installed after its trim of future segments would outlive it. */
	_Atomic uint32_t prealloc_stop, prealloc_busy;
	_Atomic uint32_t ckpt_requested; /* by WAL volume: consumed by the checkpointer */
	_Atomic uint32_t ckpt_latch;
	/* a base backup (wal_backup_begin): forces full-page writes, keeps WAL */
	_Atomic uint32_t backup_running;
	_Atomic uint32_t backup_holder; /* its process (wal_backup_end_for) */
	_Atomic uint64_t backup_keep;

	/* a standby's recovery (standby.c): written by the startup process */
	_Atomic uint32_t in_recovery;
	_Atomic uint32_t timeline;        /* after a promotion: the control file's next (0: keep) */
	_Atomic uint32_t follow_timeline; /* a standby's: the newer timeline it streams (0: none) */
	_Atomic uint64_t replayed_end;
	_Atomic uint64_t replayed_time_ms; /* the last replayed record's insertion time */
	_Atomic uint32_t rp_seq;           /* odd while the startup writes rp_* */
	_Atomic uint64_t rp_lsn, rp_redo, rp_next_relid,
	    rp_time_us; /* the last checkpoint replayed */

	/* a synchronous standby (syncrep.c) */
	_Atomic uint32_t sync_wanted; /* synchronous_standby is set: durable commits wait */
	char sync_name[64];           /* its application_name, for the log */
	_Atomic uint64_t sync_lsn;    /* what the synchronous standby confirmed */
	_Atomic uint32_t sync_seq;    /* futex word: bumped when sync_lsn moves */
	_Atomic uint32_t sync_sleepers;

	/* replication slots (slot.c) */
	wr_spinlock rslot_lock;
	wal_rslot rslots[WAL_MAX_RSLOTS];

	/* statistics */
	_Atomic uint64_t st_records, st_bytes, st_fpis, st_fpi_raw, st_fpi_stored;
	_Atomic uint64_t st_writes, st_write_bytes, st_flushes, st_flush_ns;
	_Atomic uint64_t st_buffer_full_waits, st_group_waits, st_gather_naps;
	_Atomic uint64_t st_seg_created, st_seg_recycled, st_seg_removed, st_seg_on_demand;
} wal_shared;

/* This process's view, set by wal_attach / wal_shmem_init. */
extern wal_shared *wal_sh;
extern char *wal_bufs;
extern _Atomic uint64_t *wal_page_end;
extern wal_slot *wal_slots;

/* Sets each page header's durable position (insert.c); the writer calls it. */
void wal_stamp_durable(uint64_t from, uint64_t upto, uint64_t durable);

static inline char *wal_buf_page(uint64_t page_start)
{
	return wal_bufs + ((page_start / WAL_PAGE_SIZE) % wal_sh->nbufs) * WAL_PAGE_SIZE;
}

static inline uint32_t wal_buf_index(uint64_t page_start)
{
	return (uint32_t)((page_start / WAL_PAGE_SIZE) % wal_sh->nbufs);
}

static inline void wal_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/* flush.c */
/* Writes until write_lsn >= @upto, and flushes what it wrote through the fds
 * that wrote it (flush.c): blocks for the write lock. */
void wal_write_upto(uint64_t upto);
/* The position below which every insertion has finished copying (<= @upto). */
uint64_t wal_wait_insertions(uint64_t upto);
/* Forgets this process's open segment (after a reset of the fd cache). */
void wal_forget_segment(void);

/* insert.c */
uint64_t wal_reserved_end(void);

/* ---------------------------------------------------------------- archive recovery (target.c) */

enum wal_target_kind { WAL_TARGET_END, WAL_TARGET_LSN, WAL_TARGET_TIME, WAL_TARGET_NAME };

typedef struct wal_target {
	bool active; /* DIR/walrus.recovery exists */
	enum wal_target_kind kind;
	wr_lsn backup_end, lsn, cut; /* cut: where an earlier run of this recovery stopped */
	uint64_t time_us;
	char name[WAL_RESTORE_POINT_NAME];
	uint32_t new_tli;
	uint32_t follow_tli; /* the timeline whose history replay follows (0: the control file's) */
	char passed[256]; /* restore points replay passed ("\"a\", \"b\""), for wal_target_missed */
} wal_target;

/* Reads DIR/walrus.recovery (t->active false when there is none). */
int wal_target_read(const char *datadir, wal_target *t);
void wal_target_describe(const wal_target *t, char *buf, size_t len);
/* Whether replay stops before @rec, or right after it. */
bool wal_target_stop_before(const wal_target *t, const wal_decoded *rec);
bool wal_target_stop_after(const wal_target *t, const wal_decoded *rec);
/* After replaying @rec: a restore point is remembered (t->passed). */
void wal_target_note(wal_target *t, const wal_decoded *rec);
/* At the end of the WAL (@end): whether the target counts as reached. */
bool wal_target_reached_at_end(const wal_target *t, wr_lsn end);
/* WALRUS_ENOTFOUND naming the target first: it is not in the WAL replayed from
 * @from to @end (@why: the reader's reason for the end); a restore point's
 * message lists those that are there. */
int wal_target_missed(const wal_target *t, wr_lsn from, wr_lsn end, const char *why);
/* Records @cut in the recovery file, then zeroes the WAL after it and removes later segments. */
int wal_target_cut(const char *datadir, const wal_target *t, wr_lsn cut, uint64_t seg_size);
/* Zeroes the WAL after @cut in its segment and removes every later segment
 * (a new timeline starts at @cut: nothing of the old one may be read past it). */
int wal_cut_after(const char *waldir, wr_lsn cut, uint64_t seg_size, int *removed);

/* PANIC helper for WAL I/O: the commit contract cannot be kept after it. */
_Noreturn void wal_io_failed(const char *what, uint64_t seg_start, int err);

#endif /* WALRUS_WAL_INT_H */
