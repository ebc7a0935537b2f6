/*
 * checkpointer.h - checkpoints and the checkpointer process.
 *
 * A checkpoint makes everything before its redo point durable in the data
 * files, so recovery may start there and older WAL segments can be
 * recycled.  Today the engine has no shared buffers yet, so nothing dirty
 * lives outside the WAL and a checkpoint is: set the redo pointer, write
 * the checkpoint record, flush it, replace the control file, recycle WAL.
 * The buffer pool's sorted write and sync phases slot in between the redo
 * pointer and the record (DESIGN.md rule 7) when it arrives.
 *
 * Owns: the control file's checkpoint fields (only the checkpointer and the
 * startup process write it, never at the same time).
 * Locks: none of its own; the WAL's insert lock through wal_set_redo_here.
 * Returns: nothing to callers outside this process; logs each checkpoint
 * like PostgreSQL's log_checkpoints.
 * PANICs: when the control file cannot be replaced after the checkpoint
 * record is durable (the instance cannot say where recovery starts), and
 * through the WAL on any flush error.
 */
#ifndef WALRUS_CHECKPOINTER_H
#define WALRUS_CHECKPOINTER_H

#include <stdbool.h>
#include <stdint.h>

#include "common/common.h"
#include "wal/wal.h"

enum ckpt_flags {
	CKPT_SHUTDOWN = 1 << 0,        /* quiet system: record type SHUTDOWN, state shut down */
	CKPT_END_OF_RECOVERY = 1 << 1, /* quiet system at start: state in production */
	CKPT_IMMEDIATE = 1 << 2,       /* write as fast as possible (no spreading) */
	CKPT_FORCE = 1 << 3,           /* even if no WAL was written since the last one */
	CKPT_REQUESTED = 1 << 8,       /* internal: some request is pending */
};

typedef struct ckpt_result {
	wr_lsn lsn, redo;
	uint64_t distance; /* WAL bytes since the previous checkpoint's redo */
	uint64_t estimate; /* smoothed distance, as PostgreSQL's */
	uint32_t bufs_written, nbuffers, bufs_marked;
	int segs_added, segs_removed, segs_recycled;
	uint32_t sync_files;
	double write_s, sync_s, total_s, sync_longest_s, sync_avg_s;
} ckpt_result;

/*
 * Shared state (region "ckpt"): pending request flags, counters of
 * checkpoints started/done/failed with a futex word bumped at each change,
 * and the last checkpoint's figures for `walrus stats`.
 */
typedef struct ckpt_shared {
	_Atomic uint32_t requested; /* enum ckpt_flags, taken by the checkpointer */
	_Atomic uint32_t seq;       /* futex word */
	_Atomic uint64_t started, done, failed, count;
	_Atomic uint64_t num_timed, num_requested;
	ckpt_result last;
} ckpt_shared;
size_t ckpt_shmem_size(void);
int ckpt_shmem_init(void);
int ckpt_attach(void);
ckpt_shared *ckpt_shared_state(void);
/*
 * Asks for a checkpoint (CKPT_IMMEDIATE / CKPT_FORCE); requests coalesce.
 * With @wait, returns when a checkpoint that started after the request has
 * ended: WALRUS_OK, WALRUS_EIO if it failed, WALRUS_ERESTART on a crash.
 */
int ckpt_request(int flags, bool wait);
/* Checkpointer side. */
uint32_t ckpt_take_requests(void);
void ckpt_note_started(void);
void ckpt_note_done(bool ok, const ckpt_result *r);

/* Performs one checkpoint now and logs it. */
void ckpt_perform(const char *datadir, const wr_options *o, int flags, const char *reason,
                  uint64_t next_relid, ckpt_result *r);

/*
 * The checkpointer's loop: a checkpoint every checkpoint_timeout (skipped
 * when no WAL was written since the last one), whenever the WAL asks for one
 * (max_wal_size), and a shutdown checkpoint when *shutdown becomes non-zero.
 */
_Noreturn void ckpt_main(const char *datadir, const wr_options *o, _Atomic uint32_t *shutdown,
                         pid_t supervisor);

#endif /* WALRUS_CHECKPOINTER_H */
