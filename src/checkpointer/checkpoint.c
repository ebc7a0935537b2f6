/*
 * checkpoint.c - performing a checkpoint and the checkpointer's loop.
 *
 * The order is DESIGN.md rule 7 with the buffer phases still empty: redo
 * pointer; (write and sync dirty buffers: with the buffer pool); checkpoint
 * record, flushed; control file; WAL recycling.  The control file is only
 * replaced after the record is durable, so it always names a checkpoint
 * that recovery can read.
 */
#include "checkpointer/checkpointer.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <unistd.h>

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

static void update_control(const char *datadir, wal_control *c, wr_lsn start, wr_lsn redo,
                           uint64_t next_relid, int flags)
{
	c->prev_checkpoint_lsn = c->checkpoint_lsn;
	c->checkpoint_lsn = start;
	c->redo_lsn = redo;
	c->checkpoint_time_us = wr_wall_us();
	c->next_relid = next_relid;
	c->state = flags & CKPT_SHUTDOWN ? WAL_DB_SHUTDOWN : WAL_DB_IN_PRODUCTION;
	/* The record is durable; a control file still naming the previous
	 * checkpoint would be safe, but one half-written is not, and we cannot
	 * tell which we got: stop here. */
	if (wal_control_write(datadir, c) != WALRUS_OK)
		wr_panic("could not write the control file: %s", walrus_errmsg());
}

static void log_checkpoint(const char *reason, const ckpt_result *r)
{
	wr_log(
	    WR_LOG,
	    "checkpoint complete (%s): wrote 0 buffers (0.0%%); %d WAL file(s) added, %d removed, "
	    "%d recycled; write=0.000 s, sync=0.000 s, total=%.3f s; sync files=0, "
	    "longest=0.000 s, average=0.000 s; distance=%llu kB; lsn=" WAL_LSN_FMT
	    ", redo lsn=" WAL_LSN_FMT,
	    reason, r->segs_added, r->segs_removed, r->segs_recycled, r->total_s,
	    (unsigned long long)(r->distance / 1024), WAL_LSN_ARGS(r->lsn), WAL_LSN_ARGS(r->redo));
}

void ckpt_perform(const char *datadir, const wr_options *o, int flags, const char *reason,
                  uint64_t next_relid, ckpt_result *r)
{
	wal_control c;
	wal_stats s0, s1;
	uint64_t t0 = wr_now_ns();
	read_control(datadir, &c);
	wal_get_stats(&s0);
	*r = (ckpt_result){0};
	r->redo = wal_set_redo_here();
	r->distance = r->redo > c.redo_lsn ? r->redo - c.redo_lsn : 0;
	next_relid = WR_MAX(next_relid, c.next_relid);
	write_record(r->redo, next_relid, flags, &r->lsn);
	update_control(datadir, &c, r->lsn, r->redo, next_relid, flags);
	char waldir[PATH_MAX];
	int recycled = 0, removed = 0;
	if (wr_snprintf(waldir, sizeof(waldir), "%s/wal", datadir) &&
	    wal_recycle(waldir, o, r->redo, wal_insert_lsn(), &recycled, &removed) != WALRUS_OK)
		wr_log(WR_WARNING, "could not recycle WAL segments: %s", walrus_errmsg());
	wal_get_stats(&s1);
	r->segs_recycled = recycled;
	r->segs_removed = removed;
	r->segs_added = (int)(s1.segments_created - s0.segments_created);
	r->total_s = (double)(wr_now_ns() - t0) / 1e9;
	if (o->log_checkpoints)
		log_checkpoint(reason, r);
}

_Noreturn void ckpt_main(const char *datadir, const wr_options *o, _Atomic uint32_t *shutdown,
                         pid_t supervisor)
{
	_Atomic uint32_t *latch = wal_ckpt_latch();
	uint64_t last = wr_now_ns();
	wr_lsn last_end = wal_insert_lsn();
	ckpt_result r;
	for (;;) {
		uint32_t seen = atomic_load(latch);
		if (atomic_load(shutdown)) {
			ckpt_perform(datadir, o, CKPT_SHUTDOWN, "shutdown", 0, &r);
			_exit(0);
		}
		if (getppid() != supervisor)
			_exit(1);
		uint64_t now = wr_now_ns();
		bool timed = now - last >= (uint64_t)o->checkpoint_timeout_us * 1000;
		bool wal = wal_take_ckpt_request();
		/* An idle instance needs no checkpoint: nothing to replay since. */
		if (wal || (timed && wal_insert_lsn() != last_end)) {
			ckpt_perform(datadir, o, 0, wal ? "wal" : "time", 0, &r);
			last_end = wal_insert_lsn();
			last = wr_now_ns();
		} else if (timed) {
			last = now;
		}
		uint64_t period = (uint64_t)o->checkpoint_timeout_us * 1000,
		         gone = wr_now_ns() - last;
		uint64_t left = gone < period ? period - gone : 1;
		ipc_wait_u32(latch, seen, WR_MIN(left, 1000000000ULL));
	}
}
