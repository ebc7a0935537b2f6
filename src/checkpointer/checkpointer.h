/*
 * checkpointer.h - checkpoints and the checkpointer process.
 *
 * A checkpoint makes everything before its redo point durable in the data
 * files, so recovery may start there and older WAL segments can be
 * recycled: set the redo pointer, write the buffer pool's dirty pages in
 * sorted order (paced), fsync every file written (the sync phase), write
 * the checkpoint record, flush it, replace the control file, recycle WAL
 * (DESIGN.md rule 7).
 *
 * Files: checkpoint.c (one checkpoint, the checkpointer's loop), request.c
 * (requests and waiting for them, region "ckpt"), pacing.c (spreading the
 * writes), sync.c (the checkpointer's side of the sync-request queue: the
 * fds it holds and fsyncs), sync_send.c (the side every writing process
 * runs: handing fds over), sync_int.h (what the two sync files share).
 *
 * Owns: the control file's checkpoint fields (only the checkpointer and the
 * startup process write it, never at the same time).
 * Locks: none of its own; the WAL's insert lock through wal_set_redo_here.
 * Returns: nothing to callers outside this process; logs each checkpoint
 * like PostgreSQL's log_checkpoints, and warns (checkpoint_warning) when
 * WAL volume starts them close together.
 * PANICs: when the control file cannot be replaced after the checkpoint
 * record is durable (the instance cannot say where recovery starts), and
 * through the WAL on any flush error.
 */
#ifndef WALRUS_CHECKPOINTER_H
#define WALRUS_CHECKPOINTER_H

#include <stdbool.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/common.h"
#include "storage/storage.h"
#include "buffer/buffer.h"
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
	/* Started by checkpoint_timeout (and shutdown), by max_wal_size, by a
	 * request.  PostgreSQL counts the WAL's with the requests; kept apart
	 * here, since many of them is what says max_wal_size is too small. */
	_Atomic uint64_t num_timed, num_wal, num_requested;
	ckpt_result last;
	/* What the running checkpoint is doing (enum ckpt_phase) and since when
	 * (wr_now_ns: CLOCK_MONOTONIC, comparable across processes), for
	 * observers such as `walrus bench --progress`; written by the
	 * checkpointer only. */
	_Atomic uint32_t phase;
	_Atomic uint64_t phase_start_ns;
} ckpt_shared;

enum ckpt_phase {
	CKPT_PHASE_IDLE = 0,   /* no checkpoint running */
	CKPT_PHASE_WRITE = 1,  /* set by ckpt_note_started: redo point, then the writes */
	CKPT_PHASE_SYNC = 2,   /* fsync of every file written */
	CKPT_PHASE_FINISH = 3, /* checkpoint record, control file, WAL recycling */
};
/* The checkpointer enters @phase (ckpt_note_started and ckpt_note_done set
 * WRITE and IDLE themselves); a no-op outside an instance. */
void ckpt_note_phase(int phase);
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
/* Called (with @arg) at least every 100 ms while this process waits in
 * ckpt_request; NULL: nothing.  A WAL sender's keepalives to a standby. */
void ckpt_set_wait_tick(void (*fn)(void *), void *arg);
/* How a waiting requester learns that the supervisor died (it marks nothing in shared memory). */
void ckpt_set_alive_check(bool (*fn)(void));
/* Checkpointer side. */
uint32_t ckpt_take_requests(void);
void ckpt_note_started(void);
void ckpt_note_done(bool ok, const ckpt_result *r);
/* A requested checkpoint found nothing to do since the last one: waiters are released. */
void ckpt_note_skipped(void);
/*
 * A standby's promotion: the first checkpoint on the new timeline writes the
 * control file with the timeline and `promoted` set before its record, then
 * calls @fn (which removes the standby's settings, durably): from then on a
 * crash restarts the directory as the new primary, never as a standby
 * following the old timeline past the cut.
 */
void ckpt_set_promote_hook(void (*fn)(void));
/* Test hook: called in the checkpointer before each page it writes, in write order. */
typedef void (*ckpt_write_observer)(const buf_ckpt_item *it);
void ckpt_set_write_observer(ckpt_write_observer fn);

/*
 * Performs one checkpoint now and logs it.  Returns a write error (the
 * checkpoint is then abandoned: no record, the previous one stays in
 * force); sync errors PANIC instead.
 */
int ckpt_perform(const char *datadir, const wr_options *o, int flags, const char *reason,
                 uint64_t next_relid, ckpt_result *r);

/*
 * The checkpointer's loop: a checkpoint every checkpoint_timeout (skipped
 * when no WAL was written since the last one), whenever the WAL asks for one
 * (max_wal_size), and a shutdown checkpoint when *shutdown becomes non-zero.
 */
_Noreturn void ckpt_main(const char *datadir, const wr_options *o, _Atomic uint32_t *shutdown,
                         pid_t supervisor);

/* ---------------------------------------------------------------- sync requests (sync.c,
 * sync_send.c) */

/*
 * Design rule 4: only the checkpointer fsyncs data files.  The first write
 * through an fd in a checkpoint cycle hands that fd to the checkpointer
 * (storage calls ckpt_sync_register after the pwrite, before the write is
 * reported done, and before a written fd is closed), so the checkpointer
 * holds an fd opened no later than the write, and its fsync sees the write's
 * write-back error (errseq_t).
 *
 * Transport: every process connects lazily to the SOCK_SEQPACKET socket
 * DIR/walrus-ckpt.sock (again after fork: a child never shares its parent's
 * connection) and sends REGISTER {rel, seg, open_seq, cycle} with the fd
 * (SCM_RIGHTS), or FORGET {rel, from_seg, time}.  Senders wake the
 * checkpointer's latch when 64 requests wait to be absorbed.  Sends never
 * block: when the queue is full the sender wakes it and retries for up to
 * CKPT_SYNC_RETRY_US; when that fails, or no checkpointer listens, it fsyncs
 * the file itself (counted): a request is never dropped.  In the checkpointer
 * process a request is added to the table directly.
 *
 * The checkpointer's table holds one fd per (rel, seg): of several fds of the
 * same file (inode) the one with the OLDEST open_seq (fdc_open_seq: monotonic
 * time at open, comparable across processes) is kept and the newer closed; an
 * fd of another inode under the same name means the file was unlinked and
 * created again, and the fd of the newer file wins.  At most the fd budget is
 * held: beyond it the oldest entries are fsynced and closed early, after the
 * shared cycle advanced, so that every later write hands an fd over again.
 *
 * The cycle: a counter in shared memory ("ckptsync"), advanced at the start
 * of each sync phase (and by early syncs).  storage tags each fd cache handle
 * with the value of ckpt_sync_cycle() when it handed the fd over and hands
 * it over again when the value changed.  ckpt_sync_cycle() is the shared
 * counter plus the number of fallback fsyncs this process made: after a
 * sender fsynced a file itself, its later writes must be handed over (or
 * fsynced) again, since nobody holds an fd for them.
 *
 * Locks: none; the table and connections are the checkpointer's private
 * state; the shared counters are atomics.
 * Returns: WALRUS_* codes for setup calls.
 * PANICs (data_sync_failed): any fsync or close error on a data file fd, by
 * the checkpointer or by a sender falling back; a malformed or truncated
 * request (a request may have been lost).  fsync is never retried.
 */

#define CKPT_SYNC_SOCKET   "walrus-ckpt.sock"
#define CKPT_SYNC_RETRY_US 100000 /* how long a sender retries a full queue */

/* Shared memory for region "ckptsync". */
size_t ckpt_sync_shmem_size(void);
/* While creating shared memory: carves and zeroes the region. */
int ckpt_sync_shmem_init(void);
/* In every process after attaching (and after fork, harmlessly again). */
int ckpt_sync_attach(void);

/* --- checkpointer side (sync.c) */

/*
 * Listens on DIR/walrus-ckpt.sock (a stale socket is replaced) and makes
 * this process the checkpointer: requests made by this process go to its
 * table directly.  The fd budget defaults to half of fdc_bound(), and the
 * checkpointer's fd cache is lowered to the other half.
 */
int ckpt_sync_listen(const char *datadir);
/*
 * The futex word senders bump and wake when they need the checkpointer to
 * absorb (the checkpointer's latch, e.g. wal_ckpt_latch()); stored as an
 * offset in shared memory.  Until set: a word of the "ckptsync" region.
 */
void ckpt_sync_set_latch(_Atomic uint32_t *latch);
_Atomic uint32_t *ckpt_sync_latch(void);
/* Sets the fd budget (at least 1); a smaller budget takes effect at the next absorb. */
void ckpt_sync_set_budget(int n);
int ckpt_sync_budget(void);
/* True when requests wait to be absorbed, or a sender woke us (a cheap check: two atomics). */
bool ckpt_sync_pending(void);
/* Non-blocking: accepts every pending connection and applies every queued request. */
void ckpt_sync_absorb(void);

typedef struct ckpt_sync_result {
	int files;        /* files fsynced by this sync phase */
	int kept;         /* of which left open for the next checkpoint */
	double longest_s; /* the longest fsync */
	double total_s;   /* all fsyncs together */
	double average_s; /* total_s / files (0 without files) */
	uint64_t cycle;   /* the cycle that started with this sync phase */
} ckpt_sync_result;

/*
 * The sync phase of a checkpoint (after the writes): advances the shared
 * cycle, THEN absorbs, then fsyncs every file in the table exactly once
 * through the fd it kept, absorbing in between when senders are waiting.
 * An entry requested with the new cycle stays open for the next checkpoint
 * (its sender will not send again in this cycle); the others are closed.
 * Any fsync or close error PANICs.  WALRUS_EINVAL if not the checkpointer.
 */
int ckpt_sync_all(ckpt_sync_result *r);

/*
 * Closes the listening socket (removes it), the connections and the table's
 * fds (closes checked, no fsync: call it after the shutdown checkpoint, or
 * when throwing the instance away), and a sender's connection.
 */
void ckpt_sync_shutdown(void);

/* --- sender side (sync_send.c: every process that writes data files) */

/*
 * The three storage hooks (see smgr_set_sync_hooks).  The register hook
 * succeeds (sent, or fsynced by the sender) or PANICs; its only error is the
 * I/O guard's WALRUS_ERESTART when the instance crashed (nothing was done).
 */
int ckpt_sync_register(const smgr_sync_req *req, int fd);
void ckpt_sync_forget(wr_relid rel, uint32_t from_seg);
uint64_t ckpt_sync_cycle(void);
/* Remembers DIR (where walrus-ckpt.sock lives) and installs the three hooks into storage. */
int ckpt_sync_install_hooks(const char *datadir);

/* --- statistics and test support */

typedef struct ckpt_sync_stats {
	uint64_t cycle;         /* the shared cycle */
	uint64_t requests;      /* REGISTER requests sent (or added directly by the checkpointer) */
	uint64_t absorbed;      /* REGISTER requests applied by the checkpointer */
	uint64_t sender_fsyncs; /* files fsynced by their writer: no checkpointer, or queue full */
	uint64_t early_syncs;   /* files fsynced early because of the fd budget */
	uint64_t forgets;       /* FORGET requests applied */
	uint64_t files_synced;  /* fsyncs by the checkpointer (sync phases and early) */
} ckpt_sync_stats;
void ckpt_sync_get_stats(ckpt_sync_stats *s);

/* Called in the checkpointer after each successful fsync of a table entry. */
typedef void (*ckpt_sync_observer_fn)(wr_relid rel, uint32_t seg, int fd, bool early);
void ckpt_sync_set_observer(ckpt_sync_observer_fn fn);
/* Entries in the table now. */
int ckpt_sync_debug_count(void);
/* The entry of (rel, seg): its fd, open_seq and cycle; false if none. */
bool ckpt_sync_debug_lookup(wr_relid rel, uint32_t seg, int *fd, uint64_t *open_seq,
                            uint64_t *cycle);
/* Connections open at the checkpointer / ever accepted by it. */
int ckpt_sync_debug_connections(int *accepted);

/* ---------------------------------------------------------------- pacing (pacing.c) */

/*
 * Spreading a checkpoint's writes (PostgreSQL's IsCheckpointOnSchedule):
 * with progress = pages written / pages to write, scaled by
 * checkpoint_completion_target, the checkpoint is on schedule while progress
 * is at least the fraction of checkpoint_timeout elapsed AND the fraction of
 * the WAL budget consumed since it started (budget: max_wal_size /
 * (1 + checkpoint_completion_target), the distance that triggers the next
 * checkpoint).  Clock and WAL position are passed in, so tests inject them.
 */
#define CKPT_PACE_MAX_SLEEP_US 100000 /* re-check (absorb, shutdown, WAL) at least this often */
#define CKPT_PACE_MIN_SLEEP_US 1000   /* shorter sleeps are not worth a wake-up: write on */

typedef struct ckpt_pacer {
	bool immediate;      /* shutdown, end of recovery, explicit request: never sleep */
	uint64_t start_us;   /* when the write phase started */
	uint64_t wal_start;  /* WAL position then */
	uint64_t timeout_us; /* checkpoint_timeout */
	double wal_budget;   /* bytes of WAL a checkpoint interval may take */
	double target;       /* checkpoint_completion_target */
} ckpt_pacer;

void ckpt_pace_start(ckpt_pacer *p, const wr_options *o, uint64_t now_us, uint64_t wal_pos,
                     bool immediate);
/* @progress: fraction of the pages written so far (0..1), not yet scaled. */
bool ckpt_pace_on_schedule(const ckpt_pacer *p, double progress, uint64_t now_us, uint64_t wal_pos);
/*
 * How long to sleep before writing the next page: 0 when behind schedule or
 * immediate; otherwise until the schedule catches up with @progress (by time,
 * or by the WAL rate seen so far if that comes first), at most
 * CKPT_PACE_MAX_SLEEP_US; 0 below CKPT_PACE_MIN_SLEEP_US.
 */
uint64_t ckpt_pace_sleep_us(const ckpt_pacer *p, double progress, uint64_t now_us,
                            uint64_t wal_pos);

/*
 * When the checkpointer starts the next checkpoint.  checkpoint_timeout
 * counts from the *start* of the previous one, as PostgreSQL counts it: a
 * spread checkpoint that took 0.9 of the interval is followed by a timed
 * one 0.1 later, not a whole interval after it ended, and the pacing above
 * spreads the writes over the interval that really separates them.  An
 * idle instance (no WAL since the last checkpoint ended) skips the timed
 * one; a request finding nothing to do is skipped unless forced.  Pure:
 * the clock is the caller's, so tests inject it.
 */
typedef enum ckpt_action {
	CKPT_ACT_WAIT = 0, /* nothing due */
	CKPT_ACT_RUN,      /* perform one now */
	CKPT_ACT_SKIP,     /* a request with nothing to do: count it skipped */
} ckpt_action;

typedef struct ckpt_sched {
	uint64_t period_ns; /* checkpoint_timeout */
	uint64_t last_ns;   /* start of the last checkpoint (or skip, or idle timeout) */
	wr_lsn last_end;    /* WAL insert position when the last checkpoint ended */
	uint64_t run_ns;    /* start of the last checkpoint run (or of the schedule) */
	uint64_t gap_ns;    /* from the run before it to that start: checkpoint_warning */
} ckpt_sched;

void ckpt_sched_init(ckpt_sched *s, uint64_t period_ns, uint64_t now_ns, wr_lsn insert_lsn);
/* @req: the flags taken from the request word; @wal: max_wal_size asked for one. */
ckpt_action ckpt_sched_decide(ckpt_sched *s, uint64_t now_ns, uint32_t req, bool wal,
                              wr_lsn insert_lsn);
/* After a checkpoint (or skip) ended, with the insert position then. */
void ckpt_sched_ended(ckpt_sched *s, wr_lsn insert_lsn);
/* How long until the next timed checkpoint is due (at least 1 ns). */
uint64_t ckpt_sched_wait_ns(const ckpt_sched *s, uint64_t now_ns);

/* A dirty buffer to write, sorted by (rel, blk) so writes go in file order. */
typedef buf_ckpt_item ckpt_item;
void ckpt_sort_items(ckpt_item *items, size_t n);

#endif /* WALRUS_CHECKPOINTER_H */
