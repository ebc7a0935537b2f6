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

#include <stdint.h>

#include "common/common.h"
#include "wal/wal.h"

enum ckpt_flags {
	CKPT_SHUTDOWN = 1 << 0,        /* quiet system: record type SHUTDOWN, state shut down */
	CKPT_END_OF_RECOVERY = 1 << 1, /* quiet system at start: state in production */
};

typedef struct ckpt_result {
	wr_lsn lsn, redo;
	uint64_t distance; /* WAL bytes since the previous checkpoint's redo */
	int segs_added, segs_removed, segs_recycled;
	double total_s;
} ckpt_result;

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
