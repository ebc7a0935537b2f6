/*
 * prefault.c - maps the pool pages around a new page into this process
 * before their first touch, and the next ones in the background.
 *
 * Interface: buf_prefault_new, buf_prefault_chunks, buf_prefault_release
 * (buffer.h).
 *
 * Every process maps the pool's memfd on its own, so each one faults in
 * every pool page it touches first, 4 KiB at a time.  A load into a fresh
 * pool takes a never-touched buffer for each new page, and those faults
 * were the largest single cost of an ascending load (measured with perf on
 * a fillseq of 1M keys).  One madvise(MADV_POPULATE_WRITE) over a chunk of
 * buffers costs less than the faults it saves, and the clock sweep hands a
 * fresh pool out in buffer order, so the chunk of a new page holds the next
 * pages a load will take.  Even so the kernel's work (allocating, zeroing
 * and charging each page of a fresh segment) was 15-20% of the loading
 * process's CPU time.  So the PF_AHEAD chunks after a new page's are
 * populated by io_uring madvise requests, which the kernel runs in a worker
 * thread of this process (io-wq) on another CPU while the load goes on:
 * when the load reaches them they are mapped already.  Without io_uring
 * (too old, disabled, or refused) each chunk is populated in the call that
 * needs it.  The advice changes no content; a kernel without it (EINVAL)
 * turns it off.  A pool in huge pages (huge_pages) needs none of it.
 *
 * Per process, under a mutex (threads share the mapping): one bit per chunk
 * already populated here, for the mapping it was made for (a crash restart
 * maps a new segment), and the ring with the count of populates in flight.
 * A forked child has no page of the pool mapped yet and its own io-wq: it
 * starts both afresh.  The pool is not unmapped while a populate of it is in
 * flight (buf_prefault_release, run by shm_detach), so none can land on what
 * is mapped at that address afterwards.
 */
#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "buffer/buf_int.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

#define PF_CHUNK 64u /* buffers: 512 KiB */
#define PF_AHEAD 8u  /* chunks populated in the background after a new page's */
#define PF_RING  16u /* entries: room for PF_AHEAD in flight and more */

static pthread_mutex_t pf_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t pf_fork_once = PTHREAD_ONCE_INIT;

static uint64_t *pf_done;  /* a bit per chunk */
static char *pf_pages;     /* the pool mapping pf_done describes */
static bool pf_off;        /* the kernel has no MADV_POPULATE_WRITE */
static uint64_t pf_chunks; /* chunks populated or queued by this process */
static bool pf_forked;     /* in a child of fork: the state above is the parent's */

static struct io_uring pf_ring;
static bool pf_ring_ready, pf_ring_off; /* off: no io_uring, or it refused */
static uint32_t pf_inflight;            /* populates submitted, not yet reaped */

/* fork() while another thread holds pf_lock: the child would inherit it held
 * by a thread it does not have, and its first prefault would wait for ever. */
static void pf_fork_prepare(void)
{
	pthread_mutex_lock(&pf_lock);
}

static void pf_fork_parent(void)
{
	pthread_mutex_unlock(&pf_lock);
}

static void pf_fork_child(void)
{
	pf_forked = true;
	pthread_mutex_unlock(&pf_lock);
}

static void pf_fork_hook(void)
{
	if (pthread_atfork(pf_fork_prepare, pf_fork_parent, pf_fork_child) != 0)
		wr_log(WR_WARNING, "could not install the prefault fork handlers");
}

static void pf_lock_take(void)
{
	(void)pthread_once(&pf_fork_once, pf_fork_hook);
	pthread_mutex_lock(&pf_lock);
}

/*
 * Installs the fork handlers at the pool's attach, before the client's:
 * prepare handlers run last installed first, so a fork takes the client's
 * mutex before pf_lock, in the order shm_detach (which runs
 * buf_prefault_release) takes them under the client's mutex.
 */
void buf_prefault_attach(void)
{
	(void)pthread_once(&pf_fork_once, pf_fork_hook);
}

/* In a forked child: the ring is the parent's (closing our copies leaves it
 * alone) and the shared mapping's pages are not in our page tables. */
static void pf_after_fork(void)
{
	if (!pf_forked)
		return;
	pf_forked = false;
	if (pf_ring_ready)
		io_uring_queue_exit(&pf_ring);
	pf_ring_ready = false;
	pf_inflight = 0;
	free(pf_done);
	pf_done = NULL;
	pf_pages = NULL;
	pf_chunks = 0;
}

static uint32_t pf_nchunks(void)
{
	return (buf_l.r->nbuffers + PF_CHUNK - 1) / PF_CHUNK;
}

/* The bitmap for the current mapping; false if there is none (no memory). */
static bool pf_bitmap(void)
{
	if (pf_pages == buf_l.pages)
		return true;
	free(pf_done);
	pf_done = calloc((pf_nchunks() + 63) / 64, sizeof(uint64_t));
	pf_pages = pf_done != NULL ? buf_l.pages : NULL;
	return pf_done != NULL; /* only advice: the touch faults the pages in */
}

/* Claims chunk @c for population; false if done (or impossible) already. */
static bool pf_claim(uint32_t c)
{
	if (pf_off || !pf_bitmap())
		return false;
	uint64_t bit = 1ull << (c % 64);
	if (pf_done[c / 64] & bit)
		return false;
	pf_done[c / 64] |= bit;
	pf_chunks++;
	return true;
}

static void pf_unclaim(uint32_t c)
{
	pf_done[c / 64] &= ~(1ull << (c % 64));
	pf_chunks--;
}

/* The page-aligned span of chunk @c. */
static void pf_span(uint32_t c, void **addr, size_t *len)
{
	uint32_t first = c * PF_CHUNK, n = WR_MIN(PF_CHUNK, buf_l.r->nbuffers - first);
	uintptr_t psz = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t lo = (uintptr_t)buf_page_ptr((int)first + 1) & ~(psz - 1);
	uintptr_t hi = (uintptr_t)buf_page_ptr((int)first + 1) + (size_t)n * WR_PAGE_SIZE;
	*addr = (void *)lo;
	*len = hi - lo;
}

static void pf_populate(uint32_t c)
{
	void *addr;
	size_t len;
	pf_span(c, &addr, &len);
	if (madvise(addr, len, MADV_POPULATE_WRITE) == 0 || errno != EINVAL)
		return; /* other errors (EINTR, ENOMEM) leave the faults to the touch */
	pf_lock_take();
	pf_off = true;
	pthread_mutex_unlock(&pf_lock);
}

static const char *pf_stop_why; /* why the ring was given up, to log */
static int pf_stop_err;

/* No more populates through the ring; logged by pf_log_stop, out of pf_lock
 * (a log handler takes a lock of its own). */
static void pf_ring_stop(const char *why, int err)
{
	pf_ring_off = true;
	pf_stop_why = why;
	pf_stop_err = err;
}

static void pf_log_stop(const char *why, int err)
{
	if (why == NULL)
		return;
	errno = err;
	wr_log(WR_DEBUG, "pool pages populated in the call only: %s: %m", why);
}

/* Takes the completed populates off the ring. */
static void pf_reap(void)
{
	struct io_uring_cqe *cqe;
	while (pf_inflight > 0 && io_uring_peek_cqe(&pf_ring, &cqe) == 0) {
		/* EINVAL: no MADV_POPULATE_WRITE or no IORING_OP_MADVISE here.
		 * Other errors leave the chunk's faults to the touch. */
		if (cqe->res == -EINVAL && !pf_ring_off)
			pf_ring_stop("io_uring madvise", EINVAL);
		io_uring_cqe_seen(&pf_ring, cqe);
		pf_inflight--;
	}
}

static bool pf_ring_usable(void)
{
	if (pf_ring_off)
		return false;
	if (pf_ring_ready)
		return true;
	/* Completions wait for our next system call rather than interrupt
	 * the load (5.19); an older kernel refuses the flag. */
	int rc = io_uring_queue_init(PF_RING, &pf_ring, IORING_SETUP_COOP_TASKRUN);
	if (rc == -EINVAL)
		rc = io_uring_queue_init(PF_RING, &pf_ring, 0);
	if (rc < 0) {
		pf_ring_stop("io_uring", -rc);
		return false;
	}
	pf_ring_ready = true;
	shm_set_unmap_hook(buf_prefault_release);
	return true;
}

/* Queues the populates of the PF_AHEAD chunks after @c not done yet. */
static void pf_ahead(uint32_t c)
{
	if (!pf_ring_usable())
		return;
	pf_reap();
	uint32_t claimed[PF_AHEAD], n = 0;
	uint32_t end = WR_MIN(c + 1 + PF_AHEAD, pf_nchunks());
	for (uint32_t a = c + 1; a < end && pf_inflight + n < PF_RING && !pf_ring_off; a++) {
		if (!pf_claim(a))
			continue;
		struct io_uring_sqe *sqe = io_uring_get_sqe(&pf_ring);
		if (sqe == NULL) {
			pf_unclaim(a);
			break;
		}
		void *addr;
		size_t len;
		pf_span(a, &addr, &len);
		io_uring_prep_madvise(sqe, addr, (off_t)len, MADV_POPULATE_WRITE);
		claimed[n++] = a;
	}
	if (n == 0)
		return;
	int rc = io_uring_submit(&pf_ring);
	uint32_t taken = rc > 0 ? WR_MIN((uint32_t)rc, n) : 0;
	pf_inflight += taken;
	if (taken == n)
		return;
	/* The kernel took fewer than asked: no more through the ring (what it
	 * left queued is never submitted), those chunks back to the calls. */
	pf_ring_stop("io_uring submit", rc < 0 ? -rc : EAGAIN);
	for (uint32_t i = taken; i < n; i++)
		pf_unclaim(claimed[i]);
}

void buf_prefault_new(int buf)
{
	/* In huge pages a first touch faults 256 buffers at once already. */
	if (shm_hdr()->huge_page_size != 0)
		return;
	uint32_t c = (uint32_t)(buf - 1) / PF_CHUNK;
	pf_lock_take();
	pf_after_fork();
	bool todo = pf_claim(c);
	/* Queued first: the worker populates them while this call does @c. */
	if (!pf_off)
		pf_ahead(c);
	const char *why = pf_stop_why;
	int err = pf_stop_err;
	pf_stop_why = NULL;
	pthread_mutex_unlock(&pf_lock);
	pf_log_stop(why, err);
	if (todo)
		pf_populate(c);
}

uint64_t buf_prefault_chunks(void)
{
	pf_lock_take();
	pf_after_fork();
	uint64_t n = pf_chunks;
	pthread_mutex_unlock(&pf_lock);
	return n;
}

void buf_prefault_release(void)
{
	int rc = 0;
	pf_lock_take();
	pf_after_fork();
	uint32_t left = pf_inflight;
	while (pf_ring_ready && left > 0) {
		struct io_uring_cqe *cqe;
		rc = io_uring_wait_cqe(&pf_ring, &cqe);
		if (rc == -EINTR)
			continue;
		if (rc < 0)
			break; /* cannot happen with a ring that took our entries */
		io_uring_cqe_seen(&pf_ring, cqe);
		left--;
	}
	if (pf_ring_ready)
		io_uring_queue_exit(&pf_ring);
	pf_ring_ready = false;
	pf_inflight = 0;
	pthread_mutex_unlock(&pf_lock);
	if (rc < 0) {
		/* The populates still in flight change no content. */
		errno = -rc;
		wr_log(WR_WARNING, "could not wait for %u pool populates: %m", left);
	}
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

void buf_test_prefault_refuse_ring(void)
{
	pf_lock_take();
	pf_ring_off = true;
	pthread_mutex_unlock(&pf_lock);
}

bool buf_test_prefault_ring_off(void)
{
	pf_lock_take();
	bool off = pf_ring_off;
	pthread_mutex_unlock(&pf_lock);
	return off;
}
#endif
