/*
 * prefault.c - maps the pool pages around a new page into this process
 * before their first touch.
 *
 * Interface: buf_prefault_new, buf_prefault_chunks (buffer.h).
 *
 * Every process maps the pool's memfd on its own, so each one faults in
 * every pool page it touches first, 4 KiB at a time.  A load into a fresh
 * pool takes a never-touched buffer for each new page, and those faults
 * were the largest single cost of an ascending load (measured with perf on
 * a fillseq of 1M keys).  One
 * madvise(MADV_POPULATE_WRITE) over a chunk of buffers costs less than the
 * faults it saves, and the clock sweep hands a fresh pool out in buffer
 * order, so the chunk of a new page holds the next pages a load will take.
 * The advice changes no content; a kernel without it (EINVAL) turns it off.
 * A pool in huge pages (huge_pages) needs none of it.
 *
 * Per process, under a mutex (threads share the mapping): one bit per chunk
 * already populated here, for the mapping it was made for (a crash restart
 * maps a new segment).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "buffer/buf_int.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

#define PF_CHUNK 64u /* buffers: 512 KiB */

static pthread_mutex_t pf_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t pf_fork_once = PTHREAD_ONCE_INIT;

/* fork() while another thread holds pf_lock: the child would inherit it held
 * by a thread it does not have, and its first prefault would wait for ever. */
static void pf_fork_prepare(void)
{
	pthread_mutex_lock(&pf_lock);
}

static void pf_fork_release(void)
{
	pthread_mutex_unlock(&pf_lock);
}

static void pf_fork_hook(void)
{
	if (pthread_atfork(pf_fork_prepare, pf_fork_release, pf_fork_release) != 0)
		wr_log(WR_WARNING, "could not install the prefault fork handlers");
}

static void pf_lock_take(void)
{
	(void)pthread_once(&pf_fork_once, pf_fork_hook);
	pthread_mutex_lock(&pf_lock);
}
static uint64_t *pf_done;  /* a bit per chunk */
static char *pf_pages;     /* the pool mapping pf_done describes */
static bool pf_off;        /* the kernel has no MADV_POPULATE_WRITE */
static uint64_t pf_chunks; /* chunks populated by this process */

/* Claims chunk @c for population; false if done (or impossible) already. */
static bool pf_claim(uint32_t c)
{
	uint32_t nchunks = (buf_l.r->nbuffers + PF_CHUNK - 1) / PF_CHUNK;
	if (pf_off)
		return false;
	if (pf_pages != buf_l.pages) {
		free(pf_done);
		pf_done = calloc((nchunks + 63) / 64, sizeof(uint64_t));
		pf_pages = pf_done != NULL ? buf_l.pages : NULL;
		if (pf_done == NULL)
			return false; /* only advice: the touch faults the pages in */
	}
	uint64_t bit = 1ull << (c % 64);
	if (pf_done[c / 64] & bit)
		return false;
	pf_done[c / 64] |= bit;
	pf_chunks++;
	return true;
}

static void pf_populate(uint32_t c)
{
	uint32_t first = c * PF_CHUNK, n = WR_MIN(PF_CHUNK, buf_l.r->nbuffers - first);
	uintptr_t psz = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t lo = (uintptr_t)buf_page_ptr((int)first + 1) & ~(psz - 1);
	uintptr_t hi = (uintptr_t)buf_page_ptr((int)first + 1) + (size_t)n * WR_PAGE_SIZE;
	if (madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE) == 0 || errno != EINVAL)
		return; /* other errors (EINTR, ENOMEM) leave the faults to the touch */
	pf_lock_take();
	pf_off = true;
	pthread_mutex_unlock(&pf_lock);
}

void buf_prefault_new(int buf)
{
	/* In huge pages a first touch faults 256 buffers at once already. */
	if (shm_hdr()->huge_page_size != 0)
		return;
	uint32_t c = (uint32_t)(buf - 1) / PF_CHUNK;
	pf_lock_take();
	bool todo = pf_claim(c);
	pthread_mutex_unlock(&pf_lock);
	if (todo)
		pf_populate(c);
}

uint64_t buf_prefault_chunks(void)
{
	pf_lock_take();
	uint64_t n = pf_chunks;
	pthread_mutex_unlock(&pf_lock);
	return n;
}

#ifdef WALRUS_TEST_HOOKS
void buf_test_prefault_lock(bool hold)
{
	if (hold)
		pf_lock_take();
	else
		pthread_mutex_unlock(&pf_lock);
}

bool buf_test_prefault_lock_free(void)
{
	if (pthread_mutex_trylock(&pf_lock) != 0)
		return false;
	pthread_mutex_unlock(&pf_lock);
	return true;
}
#endif
