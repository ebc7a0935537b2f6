/*
 * standby.c - the WAL's share of a standby's recovery: what the startup
 * process publishes while it replays (how far, the last checkpoint record
 * replayed) for the processes that run beside it, and the timeline a
 * promotion hands to the end-of-recovery checkpoint.
 *
 * On a standby the checkpointer runs during recovery and makes
 * restartpoints: it writes the pages dirtied by replay and moves the control
 * file's checkpoint to a checkpoint record already replayed, so the
 * standby's own restart replays only what followed.  The record is read by
 * the startup process and copied here under a sequence word (odd while it
 * writes), since the checkpointer reads it at any moment.
 *
 * Interface: wal.h ("a standby's recovery").
 */
#include "wal/wal_int.h"

void wal_set_in_recovery(bool on)
{
	atomic_store(&wal_sh->in_recovery, on ? 1u : 0u);
}

bool wal_in_recovery(void)
{
	return wal_sh != NULL && atomic_load(&wal_sh->in_recovery) != 0;
}

void wal_note_replayed(wr_lsn end, uint64_t time_ms)
{
	if (time_ms != 0)
		atomic_store_explicit(&wal_sh->replayed_time_ms, time_ms, memory_order_relaxed);
	atomic_store(&wal_sh->replayed_end, end);
}

wr_lsn wal_replayed_lsn(void)
{
	return atomic_load(&wal_sh->replayed_end);
}

uint64_t wal_replayed_time_ms(void)
{
	return atomic_load(&wal_sh->replayed_time_ms);
}

void wal_note_replayed_checkpoint(wr_lsn lsn, const wal_checkpoint_rec *ck)
{
	atomic_fetch_add(&wal_sh->rp_seq, 1);
	atomic_store_explicit(&wal_sh->rp_lsn, lsn, memory_order_relaxed);
	atomic_store_explicit(&wal_sh->rp_redo, ck->redo, memory_order_relaxed);
	atomic_store_explicit(&wal_sh->rp_next_relid, ck->next_relid, memory_order_relaxed);
	atomic_store_explicit(&wal_sh->rp_time_us, ck->time_us, memory_order_relaxed);
	atomic_fetch_add(&wal_sh->rp_seq, 1);
}

bool wal_replayed_checkpoint(wr_lsn *lsn, wal_checkpoint_rec *ck)
{
	for (;;) {
		uint32_t s = atomic_load(&wal_sh->rp_seq);
		if (s & 1u)
			continue; /* the startup process is writing: a few stores */
		*lsn = atomic_load_explicit(&wal_sh->rp_lsn, memory_order_relaxed);
		ck->redo = atomic_load_explicit(&wal_sh->rp_redo, memory_order_relaxed);
		ck->next_relid = atomic_load_explicit(&wal_sh->rp_next_relid, memory_order_relaxed);
		ck->time_us = atomic_load_explicit(&wal_sh->rp_time_us, memory_order_relaxed);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load(&wal_sh->rp_seq) == s)
			return *lsn != 0;
	}
}

void wal_set_timeline(uint32_t tli)
{
	atomic_store(&wal_sh->timeline, tli);
}

uint32_t wal_timeline(void)
{
	return wal_sh == NULL ? 0 : atomic_load(&wal_sh->timeline);
}

void wal_set_follow_timeline(uint32_t tli)
{
	atomic_store(&wal_sh->follow_timeline, tli);
}

uint32_t wal_follow_timeline(void)
{
	return wal_sh == NULL ? 0 : atomic_load(&wal_sh->follow_timeline);
}
