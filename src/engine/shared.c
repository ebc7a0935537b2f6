/*
 * shared.c - this process's view of the engine's regions in shared memory.
 *
 * The segment is replaced by every crash restart and mapped at a different
 * address in every backend, so the region pointers are cached per base and
 * looked up again whenever the base changes.
 */
#include "engine/engine.h"

/* The calling thread's backend's slot (the process's, in the instance's own processes). */
static WR_TLS int my_slot = -1;

/*
 * The regions of the current mapping, looked up again when the base moves
 * (an attachment or a crash restart, when no other thread of the process is
 * inside a call).  Atomics: threads that refresh at once store the same
 * values.
 */
static _Atomic(char *) cached_base;
static _Atomic(engine_shared *) cached_engine;
static _Atomic(wr_proc *) cached_procs;

static void refresh(void)
{
	char *base = shm_base_;
	if (atomic_load_explicit(&cached_base, memory_order_acquire) == base)
		return;
	atomic_store_explicit(&cached_engine, base ? shm_lookup("engine", NULL) : NULL,
	                      memory_order_relaxed);
	atomic_store_explicit(&cached_procs, base ? shm_lookup("procs", NULL) : NULL,
	                      memory_order_relaxed);
	atomic_store_explicit(&cached_base, base, memory_order_release);
}

engine_shared *engine_sh(void)
{
	refresh();
	return atomic_load_explicit(&cached_engine, memory_order_relaxed);
}

wr_proc *engine_procs(void)
{
	refresh();
	return atomic_load_explicit(&cached_procs, memory_order_relaxed);
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
