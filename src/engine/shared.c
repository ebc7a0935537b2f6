/*
 * shared.c - this process's view of the engine's regions in shared memory.
 *
 * The segment is replaced by every crash restart and mapped at a different
 * address in every backend, so the region pointers are cached per base and
 * looked up again whenever the base changes.
 */
#include "engine/engine.h"

#include <stdlib.h>

/* The calling thread's backend's slot (the process's, in the instance's own processes). */
static WR_TLS int my_slot = -1;

/* One view per mapping; the pointers are the process's, read by all its threads. */
typedef struct view {
	char *base;
	engine_shared *engine;
	wr_proc *procs;
} view;
static _Atomic(view *) cached;

static view *refresh(void)
{
	view *v = atomic_load_explicit(&cached, memory_order_acquire);
	if (v != NULL && v->base == shm_base_)
		return v;
	view *n = malloc(sizeof(*n));
	if (n == NULL)
		return NULL;
	n->base = shm_base_;
	n->engine = shm_base_ ? shm_lookup("engine", NULL) : NULL;
	n->procs = shm_base_ ? shm_lookup("procs", NULL) : NULL;
	/* The old view is left behind (a few bytes per attachment): a thread may still read it. */
	atomic_store_explicit(&cached, n, memory_order_release);
	return n;
}

engine_shared *engine_sh(void)
{
	view *v = refresh();
	return v ? v->engine : NULL;
}

wr_proc *engine_procs(void)
{
	view *v = refresh();
	return v ? v->procs : NULL;
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
