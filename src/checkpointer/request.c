/*
 * request.c - asking the checkpointer for a checkpoint and waiting for it.
 *
 * As PostgreSQL's RequestCheckpoint: requests only set flags and wake the
 * checkpointer, so any number of them coalesce into one checkpoint; a
 * waiter notes the number of checkpoints started, then waits until one
 * that started after its request has ended, and learns whether it failed.
 */
#include "checkpointer/checkpointer.h"

#include <string.h>

#include "ipc/ipc.h"

static ckpt_shared *ckpt_sh;
static bool (*ckpt_alive)(void); /* is the instance's supervisor still there? */

void ckpt_set_alive_check(bool (*fn)(void))
{
	ckpt_alive = fn;
}

/* A crashed instance marks shared memory; a dead supervisor marks nothing. */
static bool ckpt_instance_gone(void)
{
	return atomic_load(&shm_hdr()->state) == SHM_STATE_CRASHED ||
	       (ckpt_alive != NULL && !ckpt_alive());
}

size_t ckpt_shmem_size(void)
{
	return sizeof(ckpt_shared);
}

int ckpt_shmem_init(void)
{
	ckpt_sh = shm_alloc("ckpt", sizeof(ckpt_shared));
	if (ckpt_sh == NULL)
		return wr_error(WALRUS_ENOMEM,
		                "no room in shared memory for the checkpointer's state");
	memset(ckpt_sh, 0, sizeof(*ckpt_sh));
	return WALRUS_OK;
}

int ckpt_attach(void)
{
	ckpt_sh = shm_lookup("ckpt", NULL);
	if (ckpt_sh == NULL)
		return wr_error(WALRUS_EINTERNAL, "shared memory has no \"ckpt\" region");
	return WALRUS_OK;
}

ckpt_shared *ckpt_shared_state(void)
{
	return ckpt_sh;
}

/* Waits until @target checkpoints have ended (false: the instance crashed). */
static void (*wait_tick)(void *);
static void *wait_tick_arg;

void ckpt_set_wait_tick(void (*fn)(void *), void *arg)
{
	wait_tick = fn;
	wait_tick_arg = arg;
}

static void tick(void)
{
	if (wait_tick != NULL)
		wait_tick(wait_tick_arg);
}

static bool ckpt_wait_done(uint64_t target)
{
	for (;;) {
		tick();
		uint32_t seq = atomic_load(&ckpt_sh->seq);
		uint64_t done = atomic_load(&ckpt_sh->done);
		if (done >= target)
			return true;
		if (ckpt_instance_gone())
			return false;
		(void)ipc_wait_u32(&ckpt_sh->seq, seq, 100ULL * 1000 * 1000);
	}
}

int ckpt_request(int flags, bool wait)
{
	if (ckpt_sh == NULL)
		return wr_error(WALRUS_EINTERNAL, "checkpoint requested outside an instance");
	uint64_t started0 = atomic_load(&ckpt_sh->started);
	uint64_t failed0 = atomic_load(&ckpt_sh->failed);
	atomic_fetch_or(&ckpt_sh->requested, (uint32_t)(flags | CKPT_REQUESTED));
	atomic_fetch_add(wal_ckpt_latch(), 1);
	ipc_wake_all(wal_ckpt_latch());
	if (!wait)
		return WALRUS_OK;
	/* A checkpoint running now may have started before our request: we
	 * need the end of one that starts after it. */
	for (;;) {
		tick();
		uint64_t started = atomic_load(&ckpt_sh->started);
		if (started > started0)
			break;
		uint32_t seq = atomic_load(&ckpt_sh->seq);
		if (ckpt_instance_gone())
			return wr_error(WALRUS_ERESTART,
			                "the instance crashed during the checkpoint");
		if (atomic_load(&ckpt_sh->started) == started0)
			(void)ipc_wait_u32(&ckpt_sh->seq, seq, 100ULL * 1000 * 1000);
	}
	if (!ckpt_wait_done(started0 + 1))
		return wr_error(WALRUS_ERESTART, "the instance crashed during the checkpoint");
	if (atomic_load(&ckpt_sh->failed) != failed0)
		return wr_error(WALRUS_EIO, "checkpoint failed: see the server log");
	return WALRUS_OK;
}

uint32_t ckpt_take_requests(void)
{
	return atomic_exchange(&ckpt_sh->requested, 0);
}

void ckpt_note_phase(int phase)
{
	if (ckpt_sh == NULL)
		return;
	atomic_store(&ckpt_sh->phase_start_ns, wr_now_ns());
	atomic_store(&ckpt_sh->phase, (uint32_t)phase);
}

void ckpt_note_started(void)
{
	ckpt_note_phase(CKPT_PHASE_WRITE);
	atomic_fetch_add(&ckpt_sh->started, 1);
	atomic_fetch_add(&ckpt_sh->seq, 1);
	ipc_wake_all(&ckpt_sh->seq);
}

void ckpt_note_done(bool ok, const ckpt_result *r)
{
	if (!ok)
		atomic_fetch_add(&ckpt_sh->failed, 1);
	else {
		if (r != &ckpt_sh->last)
			ckpt_sh->last = *r;
		atomic_fetch_add(&ckpt_sh->count, 1);
	}
	ckpt_note_phase(CKPT_PHASE_IDLE);
	atomic_store(&ckpt_sh->done, atomic_load(&ckpt_sh->started));
	atomic_fetch_add(&ckpt_sh->seq, 1);
	ipc_wake_all(&ckpt_sh->seq);
}

void ckpt_note_skipped(void)
{
	ckpt_note_started();
	ckpt_note_done(true, &ckpt_sh->last);
}
