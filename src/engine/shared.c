/*
 * shared.c - this process's view of the engine's regions in shared memory.
 *
 * The segment is replaced by every crash restart and mapped at a different
 * address in every backend, so the region pointers are cached per base and
 * looked up again whenever the base changes.
 */
#include "engine/engine.h"

static int my_slot = -1;
static char *cached_base;
static engine_shared *cached_engine;
static wr_proc *cached_procs;

static void refresh(void)
{
	if (cached_base == shm_base_)
		return;
	cached_base = shm_base_;
	cached_engine = shm_base_ ? shm_lookup("engine", NULL) : NULL;
	cached_procs = shm_base_ ? shm_lookup("procs", NULL) : NULL;
}

engine_shared *engine_sh(void)
{
	refresh();
	return cached_engine;
}

wr_proc *engine_procs(void)
{
	refresh();
	return cached_procs;
}

wr_proc *engine_my_proc(void)
{
	wr_proc *procs = engine_procs();
	return procs && my_slot >= 0 ? &procs[my_slot] : NULL;
}

void engine_my_proc_set(int slot)
{
	my_slot = slot;
}

bool engine_running(void)
{
	shm_header *h = shm_hdr();
	return h != NULL && atomic_load(&h->state) == SHM_STATE_RUNNING;
}
