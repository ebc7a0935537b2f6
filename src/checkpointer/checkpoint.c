/*
 * checkpoint.c - performing a checkpoint and the checkpointer's loop.
 *
 * The order is DESIGN.md rule 7: redo pointer; mark the dirty buffers; sort
 * them by (file, block); write them, spread over the interval, with
 * write-back hints; sync every file written since the last checkpoint
 * through the fds handed to us; then the checkpoint record, flushed; the
 * control file; WAL recycling.  The control file is only replaced after the
 * record is durable, so it always names a checkpoint that recovery can read,
 * and the record is only written after every sync succeeded: a failed
 * fsync PANICs before it (sync.c), so no checkpoint ever claims pages that
 * did not reach the disk.
 */
#include "checkpointer/checkpointer.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buffer/buffer.h"
#include "fdcache/fdcache.h"
#include "ipc/ipc.h"

static _Atomic uint32_t *ckpt_shutdown; /* set by ckpt_main: a shutdown hurries the writes */
static uint64_t ckpt_estimate;          /* smoothed distance between checkpoints */

static void read_control(const char *datadir, wal_control *c)
{
	if (wal_control_read(datadir, c) != WALRUS_OK)
		wr_panic("could not read the control file during a checkpoint: %s",
		         walrus_errmsg());
}

static wr_lsn write_record(wr_lsn redo, uint64_t next_relid, int flags, wr_lsn *start)
{
	wal_checkpoint_rec ck = {.redo = redo, .time_us = wr_wall_us(), .next_relid = next_relid};
	uint8_t info = flags & (CKPT_SHUTDOWN | CKPT_END_OF_RECOVERY) ? XLOG_CHECKPOINT_SHUTDOWN
	                                                              : XLOG_CHECKPOINT_ONLINE;
	wal_begin();
	wal_register_data(&ck, sizeof(ck));
	wr_lsn end = wal_insert_at(RM_XLOG, info, start);
	wal_flush_to(end);
	return end;
}

static void (*promote_hook)(void);

void ckpt_set_promote_hook(void (*fn)(void))
{
	promote_hook = fn;
}

/*
 * The first checkpoint after a standby's promotion, before its record (the
 * first WAL of the new timeline that a restart would replay): the control
 * file names the new timeline and says the promotion is decided, then the
 * standby's settings go.  A crash before the control file is written
 * restarts a standby on the old timeline with nothing of the new one in its
 * WAL; after it, a start completes the promotion.
 */
static bool promote_decide(const char *datadir, wal_control *c)
{
	if (wal_timeline() == 0 || wal_timeline() == wal_control_timeline(c))
		return false;
	c->timeline = wal_timeline();
	c->promoted = 1;
	c->backup_start_lsn = c->backup_end_lsn = 0;
	if (wal_control_write(datadir, c) != WALRUS_OK)
		wr_panic("could not write the control file: %s", walrus_errmsg());
	(void)fdc_step("promotion-decided", datadir);
	if (promote_hook != NULL)
		promote_hook();
	return true;
}

static void update_control(const char *datadir, wal_control *c, wr_lsn start, wr_lsn redo,
                           uint64_t next_relid, int flags)
{
	c->prev_checkpoint_lsn = c->checkpoint_lsn;
	c->checkpoint_lsn = start;
	c->redo_lsn = redo;
	c->checkpoint_time_us = wr_wall_us();
	c->next_relid = next_relid;
	c->state = flags & CKPT_SHUTDOWN ? WAL_DB_SHUTDOWN : WAL_DB_IN_PRODUCTION;
	/* promote_decide ran before the record: the standby's settings are gone. */
	c->promoted = 0;
	/* The record is durable; a control file still naming the previous
	 * checkpoint would be safe, but one half-written is not, and we cannot
	 * tell which we got: stop here. */
	if (wal_control_write(datadir, c) != WALRUS_OK)
		wr_panic("could not write the control file: %s", walrus_errmsg());
}

/* Where the WAL is: inserted on a primary, replayed on a standby. */
static wr_lsn wal_position(void)
{
	return wal_in_recovery() ? wal_replayed_lsn() : wal_insert_lsn();
}

static void log_checkpoint(const char *what, const char *reason, const ckpt_result *r)
{
	wr_log(
	    WR_LOG,
	    "%s complete (%s): wrote %u buffers (%.1f%%); %d WAL file(s) added, %d "
	    "removed, %d recycled; write=%.3f s, sync=%.3f s, total=%.3f s; sync files=%u, "
	    "longest=%.3f s, average=%.3f s; distance=%llu kB, estimate=%llu kB; lsn=" WAL_LSN_FMT
	    ", redo lsn=" WAL_LSN_FMT,
	    what, reason, r->bufs_written,
	    r->nbuffers ? 100.0 * (double)r->bufs_written / (double)r->nbuffers : 0.0,
	    r->segs_added, r->segs_removed, r->segs_recycled, r->write_s, r->sync_s, r->total_s,
	    r->sync_files, r->sync_longest_s, r->sync_avg_s,
	    (unsigned long long)(r->distance / 1024), (unsigned long long)(r->estimate / 1024),
	    WAL_LSN_ARGS(r->lsn), WAL_LSN_ARGS(r->redo));
}

/* ---------------------------------------------------------------- write phase */

static ckpt_write_observer write_observer;

void ckpt_set_write_observer(ckpt_write_observer fn)
{
	write_observer = fn;
}

/* Someone wants this checkpoint over quickly: shutdown or an immediate request. */
static bool hurry(void)
{
	ckpt_shared *sh = ckpt_shared_state();
	return (ckpt_shutdown != NULL && atomic_load(ckpt_shutdown)) ||
	       (sh != NULL && (atomic_load(&sh->requested) & CKPT_IMMEDIATE));
}

/* Between two page writes: absorb sync requests, then sleep if ahead of schedule. */
static void write_delay(ckpt_pacer *p, double progress)
{
	if (ckpt_sync_pending())
		ckpt_sync_absorb();
	if (hurry())
		p->immediate = true;
	uint64_t us = ckpt_pace_sleep_us(p, progress, wr_now_ns() / 1000, wal_position());
	if (us == 0)
		return;
	_Atomic uint32_t *latch = wal_ckpt_latch();
	(void)ipc_wait_u32(latch, atomic_load(latch), us * 1000);
	ckpt_sync_absorb();
}

/* Marks the buffers to write into @items (room for every buffer), then writes them. */
static int write_items(const wr_options *o, int flags, ckpt_result *r, buf_ckpt_item *items,
                       uint32_t nbuf)
{
	uint32_t n = buf_ckpt_mark(items);
	r->nbuffers = nbuf;
	r->bufs_marked = n;
	if (o->checkpoint_sort)
		ckpt_sort_items(items, n);
	buf_wb wb;
	int rc = buf_wb_init(&wb, (uint32_t)(o->checkpoint_flush_after / WR_PAGE_SIZE));
	if (rc != WALRUS_OK)
		return rc;
	ckpt_pacer p;
	bool immediate = flags & (CKPT_IMMEDIATE | CKPT_SHUTDOWN | CKPT_END_OF_RECOVERY);
	ckpt_pace_start(&p, o, wr_now_ns() / 1000, wal_position(), immediate);
	bool uring = o->io_method == WR_IO_URING;
	for (uint32_t i = 0; i < n && rc == WALRUS_OK;) {
		uint32_t used = 1, written = 0;
		if (uring) {
			rc = buf_ckpt_write_batch(&items[i], n - i, &wb, &used, &written);
		} else {
			bool one;
			rc = buf_ckpt_write(&items[i], &wb, &one);
			written = one;
		}
		for (uint32_t k = i; write_observer && k < i + used; k++)
			write_observer(&items[k]);
		r->bufs_written += written;
		i += used;
		write_delay(&p, (double)i / (double)n);
	}
	buf_wb_issue(&wb);
	buf_wb_free(&wb);
	return rc;
}

/* The items array is the checkpoint's own: allocated per run, for the pool's current size. */
static int write_buffers(const wr_options *o, int flags, ckpt_result *r)
{
	uint32_t nbuf = buf_nbuffers();
	buf_ckpt_item *items = malloc(nbuf * sizeof(*items));
	if (items == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory for %u checkpoint items", nbuf);
	int rc = write_items(o, flags, r, items, nbuf);
	free(items);
	return rc;
}

static void sync_files(ckpt_result *r)
{
	ckpt_sync_result sr;
	/* Not being the checkpointer is a bug of the caller: the record that
	 * follows would claim files nobody synced. */
	if (ckpt_sync_all(&sr) != WALRUS_OK)
		wr_panic("checkpoint sync phase: %s", walrus_errmsg());
	r->sync_files = (uint32_t)sr.files;
	r->sync_longest_s = sr.longest_s;
	r->sync_avg_s = sr.average_s;
}

/* ---------------------------------------------------------------- the checkpoint */

static void recycle_wal(const char *datadir, const wr_options *o, bool settle, ckpt_result *r)
{
	char waldir[PATH_MAX];
	int recycled = 0, removed = 0;
	/* The slots' files first: a crash must not restart a slot from WAL
	 * recycled here. */
	if (wal_slots_save(datadir) != WALRUS_OK) {
		wr_log(WR_WARNING, "could not save the replication slots: %s (no WAL recycled)",
		       walrus_errmsg());
		return;
	}
	/* Future segments are trimmed only once the WAL writer can make no more. */
	if (settle && !wal_stop_preallocation(10ull * 1000 * 1000 * 1000)) {
		wr_log(WR_WARNING, "WAL preallocation did not stop within 10 s: future WAL "
		                   "segments are kept");
		settle = false;
	}
	if (wr_snprintf(waldir, sizeof(waldir), "%s/wal", datadir) &&
	    wal_recycle(waldir, o, r->redo, wal_position(), settle, &recycled, &removed) !=
	        WALRUS_OK)
		wr_log(WR_WARNING, "could not recycle WAL segments: %s", walrus_errmsg());
	r->segs_recycled = recycled;
	r->segs_removed = removed;
}

static void update_estimate(ckpt_result *r)
{
	/* As PostgreSQL: follow a rise at once, a fall slowly. */
	if (r->distance > ckpt_estimate)
		ckpt_estimate = r->distance;
	else
		ckpt_estimate = (uint64_t)(0.9 * (double)ckpt_estimate + 0.1 * (double)r->distance);
	r->estimate = ckpt_estimate;
}

int ckpt_perform(const char *datadir, const wr_options *o, int flags, const char *reason,
                 uint64_t next_relid, ckpt_result *r)
{
	wal_control c;
	wal_stats s0, s1;
	uint64_t t0 = wr_now_ns();
	read_control(datadir, &c);
	wal_get_stats(&s0);
	*r = (ckpt_result){0};
	if (o->log_checkpoints)
		wr_log(WR_LOG, "checkpoint starting: %s", reason);
	r->redo = wal_set_redo_here();
	r->distance = r->redo > c.redo_lsn ? r->redo - c.redo_lsn : 0;
	int rc = write_buffers(o, flags, r);
	uint64_t t1 = wr_now_ns();
	r->write_s = (double)(t1 - t0) / 1e9;
	if (rc != WALRUS_OK) {
		wr_log(WR_ERROR, "checkpoint (%s) failed: %s", reason, walrus_errmsg());
		return rc;
	}
	ckpt_note_phase(CKPT_PHASE_SYNC);
	sync_files(r);
	r->sync_s = (double)(wr_now_ns() - t1) / 1e9;
	ckpt_note_phase(CKPT_PHASE_FINISH);
	next_relid = WR_MAX(next_relid, c.next_relid);
	wal_checkpoint_rec
	    replayed; /* a promoted standby's: relations made since its restartpoint */
	wr_lsn replayed_lsn;
	if (wal_replayed_checkpoint(&replayed_lsn, &replayed))
		next_relid = WR_MAX(next_relid, replayed.next_relid);
	bool promotion = promote_decide(datadir, &c);
	write_record(r->redo, next_relid, flags, &r->lsn);
	if (promotion)
		(void)fdc_step("promotion-record-written", datadir);
	update_control(datadir, &c, r->lsn, r->redo, next_relid, flags);
	/* Nothing writes WAL after a shutdown checkpoint: the WAL directory
	 * can shrink to min_wal_size, future segments included. */
	recycle_wal(datadir, o, (flags & CKPT_SHUTDOWN) != 0, r);
	wal_get_stats(&s1);
	r->segs_added = (int)(s1.segments_created - s0.segments_created);
	r->total_s = (double)(wr_now_ns() - t0) / 1e9;
	update_estimate(r);
	if (o->log_checkpoints)
		log_checkpoint("checkpoint", reason, r);
	return WALRUS_OK;
}

/*
 * A standby's checkpoint (PostgreSQL's restartpoint): the last checkpoint
 * record replayed becomes the control file's, once every page dirtied
 * before its redo point is written and synced.  No record is written (the
 * WAL is the primary's).  The startup process publishes a checkpoint only
 * when no key-value batch begun before its redo point is still held back
 * (kv_redo.c): otherwise the pages written here would lack that batch.
 */
static int restartpoint(const char *datadir, const wr_options *o, int flags, const char *reason,
                        ckpt_result *r)
{
	wal_control c;
	wal_checkpoint_rec ck;
	wr_lsn lsn;
	uint64_t t0 = wr_now_ns();
	read_control(datadir, &c);
	*r = (ckpt_result){0};
	/* The WAL receiver follows a new timeline: recorded before its WAL arrives. */
	if (wal_follow_timeline() != 0 && wal_follow_timeline() != wal_control_timeline(&c)) {
		c.timeline = wal_follow_timeline();
		if (wal_control_write(datadir, &c) != WALRUS_OK)
			wr_panic("could not write the control file: %s", walrus_errmsg());
		wr_log(WR_LOG, "the standby follows timeline %u", c.timeline);
	}
	if (!wal_replayed_checkpoint(&lsn, &ck) || lsn <= c.checkpoint_lsn) {
		wr_log(WR_DEBUG, "restartpoint (%s) skipped: no checkpoint replayed since the last",
		       reason);
		return WALRUS_OK;
	}
	if (o->log_checkpoints)
		wr_log(WR_LOG, "restartpoint starting: %s", reason);
	r->lsn = lsn;
	r->redo = ck.redo;
	r->distance = ck.redo > c.redo_lsn ? ck.redo - c.redo_lsn : 0;
	int rc = write_buffers(o, flags, r);
	uint64_t t1 = wr_now_ns();
	r->write_s = (double)(t1 - t0) / 1e9;
	if (rc != WALRUS_OK) {
		wr_log(WR_ERROR, "restartpoint (%s) failed: %s", reason, walrus_errmsg());
		return rc;
	}
	ckpt_note_phase(CKPT_PHASE_SYNC);
	sync_files(r);
	r->sync_s = (double)(wr_now_ns() - t1) / 1e9;
	ckpt_note_phase(CKPT_PHASE_FINISH);
	c.prev_checkpoint_lsn = c.checkpoint_lsn;
	c.checkpoint_lsn = lsn;
	c.redo_lsn = ck.redo;
	c.checkpoint_time_us = ck.time_us;
	c.next_relid = WR_MAX(c.next_relid, ck.next_relid);
	c.state = WAL_DB_IN_RECOVERY;
	/* Replay went past a base backup's end: a restart need not wait for it. */
	if (c.backup_end_lsn != 0 && lsn >= c.backup_end_lsn)
		c.backup_start_lsn = c.backup_end_lsn = 0;
	if (wal_control_write(datadir, &c) != WALRUS_OK)
		wr_panic("could not write the control file: %s", walrus_errmsg());
	/* A standby archives nothing while it is one: its segments are the
	 * primary's.  With archive_dir it keeps those its primary has not
	 * archived yet, to archive them if it is promoted; with archive_command
	 * it cannot tell, and recycles as without archiving. */
	wr_options keep = *o;
	char waldir[PATH_MAX];
	if (o->archive_mode && o->archive_dir[0] != '\0' &&
	    wr_snprintf(waldir, sizeof(waldir), "%s/wal", datadir) &&
	    wal_archive_mark_present(waldir, o->archive_dir, wal_control_timeline(&c),
	                             c.wal_seg_size) != WALRUS_OK)
		wr_log(WR_WARNING, "restartpoint: %s", walrus_errmsg());
	if (o->archive_dir[0] == '\0')
		keep.archive_mode = 0;
	recycle_wal(datadir, &keep, false, r);
	r->total_s = (double)(wr_now_ns() - t0) / 1e9;
	update_estimate(r);
	if (o->log_checkpoints)
		log_checkpoint("restartpoint", reason, r);
	return WALRUS_OK;
}

/* ---------------------------------------------------------------- the checkpointer */

static const char *reason_of(uint32_t req, bool wal, int *flags)
{
	*flags = (int)(req & (CKPT_IMMEDIATE | CKPT_FORCE));
	if (req & CKPT_REQUESTED)
		return req & CKPT_IMMEDIATE ? "immediate" : "requested";
	return wal ? "wal" : "time";
}

static void run_one(const char *datadir, const wr_options *o, int flags, const char *reason)
{
	ckpt_result r;
	ckpt_shared *sh = ckpt_shared_state();
	ckpt_note_started();
	if (flags & CKPT_REQUESTED)
		atomic_fetch_add(&sh->num_requested, 1);
	else if (strcmp(reason, "wal") == 0)
		atomic_fetch_add(&sh->num_wal, 1);
	else
		atomic_fetch_add(&sh->num_timed, 1);
	int rc = wal_in_recovery() ? restartpoint(datadir, o, flags, reason, &r)
	                           : ckpt_perform(datadir, o, flags, reason, 0, &r);
	ckpt_note_done(rc == WALRUS_OK, &r);
}

/*
 * PostgreSQL's checkpoint_warning: checkpoints that WAL volume starts close
 * together feed themselves, since the first change of each page after one
 * logs the whole page, and those images fill max_wal_size sooner.  Said
 * when the checkpoint starts, before its own log lines.
 */
static void warn_if_frequent(const wr_options *o, const ckpt_sched *s)
{
	uint64_t limit_ns = (uint64_t)o->checkpoint_warning_us * 1000;
	if (limit_ns == 0 || s->gap_ns >= limit_ns)
		return;
	char warn[32], wal[32];
	if (wr_opts_get(o, "checkpoint_warning", warn, sizeof(warn)) != WALRUS_OK ||
	    wr_opts_get(o, "max_wal_size", wal, sizeof(wal)) != WALRUS_OK)
		return;
	wr_log(
	    WR_WARNING,
	    "checkpoints are occurring too frequently: WAL volume started this one %.1f s "
	    "after the previous one (checkpoint_warning is %s); after each checkpoint the first "
	    "change of every page logs the whole page, so consider raising max_wal_size (now %s)",
	    (double)s->gap_ns / 1e9, warn, wal);
}

_Noreturn void ckpt_main(const char *datadir, const wr_options *o, _Atomic uint32_t *shutdown,
                         pid_t supervisor)
{
	_Atomic uint32_t *latch = wal_ckpt_latch();
	ckpt_sched sched;
	ckpt_sched_init(&sched, (uint64_t)o->checkpoint_timeout_us * 1000, wr_now_ns(),
	                wal_position());
	ckpt_shutdown = shutdown;
	if (ckpt_sync_listen(datadir) != WALRUS_OK)
		wr_panic("checkpointer could not listen for sync requests: %s", walrus_errmsg());
	ckpt_sync_set_latch(latch);
	for (;;) {
		uint32_t seen = atomic_load(latch);
		ckpt_sync_absorb();
		if (atomic_load(shutdown)) {
			run_one(datadir, o, CKPT_SHUTDOWN | CKPT_IMMEDIATE, "shutdown");
			ckpt_sync_shutdown();
			_exit(0);
		}
		if (getppid() != supervisor)
			_exit(1);
		bool wal = wal_take_ckpt_request();
		uint32_t req = ckpt_take_requests();
		int flags;
		const char *reason = reason_of(req, wal, &flags);
		switch (ckpt_sched_decide(&sched, wr_now_ns(), req, wal, wal_position())) {
		case CKPT_ACT_RUN:
			if (wal && !(req & CKPT_REQUESTED))
				warn_if_frequent(o, &sched);
			run_one(datadir, o, flags | (int)(req & CKPT_REQUESTED), reason);
			ckpt_sched_ended(&sched, wal_position());
			break;
		case CKPT_ACT_SKIP:
			ckpt_note_skipped();
			ckpt_sched_ended(&sched, wal_position());
			break;
		case CKPT_ACT_WAIT:
			break;
		}
		uint64_t left = ckpt_sched_wait_ns(&sched, wr_now_ns());
		ipc_wait_u32(latch, seen, WR_MIN(left, 1000000000ULL));
	}
}
