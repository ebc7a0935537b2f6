/*
 * flush.c - writing the WAL buffers to segment files and making them
 * durable: group commit, the sync methods, O_DIRECT, io_uring, and the WAL
 * writer's round.
 *
 * One process at a time holds write_lock and writes: it takes everything
 * that is inserted (not just what it needs), so one write and one
 * fdatasync cover every committer waiting behind it, and then wakes them
 * all with one futex call on flush_seq.  Waiters spin briefly first: on
 * this kind of machine a cross-CPU wake-up costs about as much as half a
 * durable write.
 *
 * Every write is followed by its flush, through the same fd, before
 * write_lock is released: WAL is never written by one fd and synced by
 * another opened later, which could miss a write-back error (errseq).  An
 * error from a write or a flush PANICs: a commit may already have been
 * promised on the strength of it.
 */
#include "wal/wal_int.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

#include "fdcache/fdcache.h"

#define WAL_SPIN_ROUNDS     200
#define WAL_URING_DEPTH     64
#define WAL_GATHER_QUIET_NS 15000

static struct {
	uint64_t start; /* of the segment this process has open, or UINT64_MAX */
	fdc_file f;
} seg = {UINT64_MAX, FDC_INVALID};

static struct io_uring ring;
static bool ring_ready;

_Noreturn void wal_io_failed(const char *what, uint64_t seg_start, int err)
{
	char path[PATH_MAX];
	wal_segment_path(wal_sh->waldir, wal_sh->seg_size, seg_start, path, sizeof(path));
	errno = err;
	/* The commit contract cannot be kept: a flush that failed may have
	 * dropped the pages, and a retry could report success.  Recovery
	 * rebuilds from what is durable. */
	wr_panic("could not %s WAL segment \"%s\": %m", what, path);
}

void wal_forget_segment(void)
{
	seg.start = UINT64_MAX;
	seg.f = FDC_INVALID;
}

/* ---------------------------------------------------------------- segments */

static int open_flags(void)
{
	int fl = O_RDWR | O_CLOEXEC;
	if (wal_sh->sync_method == WR_SYNC_OPEN_DATASYNC)
		fl |= O_DSYNC;
	if (wal_sh->direct)
		fl |= O_DIRECT;
	return fl;
}

static void ensure_segment(uint64_t seg_start)
{
	if (seg_start + wal_sh->seg_size <= atomic_load(&wal_sh->prealloc_end))
		return;
	int rc = wal_segment_create(wal_sh->waldir, wal_sh->seg_size, seg_start);
	if (rc != WALRUS_OK)
		wr_panic("could not create WAL segment for " WAL_LSN_FMT ": %s",
		         WAL_LSN_ARGS(seg_start), walrus_errmsg());
}

static fdc_file segment_fd(uint64_t seg_start)
{
	if (seg.start == seg_start)
		return seg.f;
	if (seg.f != FDC_INVALID) {
		/* Flushed before we got here (every write is): closing is safe. */
		fdc_clear_dirty(seg.f);
		fdc_pin(seg.f, false);
		if (fdc_close(seg.f) != WALRUS_OK)
			wal_io_failed("close", seg.start, errno);
		wal_forget_segment();
	}
	ensure_segment(seg_start);
	char path[PATH_MAX];
	wal_segment_path(wal_sh->waldir, wal_sh->seg_size, seg_start, path, sizeof(path));
	if (fdc_open(path, open_flags(), 0600, &seg.f) != WALRUS_OK)
		wr_panic("could not open WAL segment: %s", walrus_errmsg());
	fdc_pin(seg.f, true);
	seg.start = seg_start;
	return seg.f;
}

/* ---------------------------------------------------------------- sync path */

static void sync_segment(fdc_file f, uint64_t seg_start)
{
	if (wal_sh->sync_method == WR_SYNC_OPEN_DATASYNC)
		return; /* every write was already durable */
	int rc = wal_sh->sync_method == WR_SYNC_FSYNC ? fdc_fsync(f) : fdc_fdatasync(f);
	if (rc == WALRUS_ERESTART)
		wr_panic("WAL flush refused: the instance crashed");
	if (rc != WALRUS_OK)
		wal_io_failed(wal_sh->sync_method == WR_SYNC_FSYNC ? "fsync" : "fdatasync",
		              seg_start, errno);
	fdc_clear_dirty(f);
}

/* Writes ring pages [first, first + npages) of one segment at file offset @off. */
static void write_pages_sync(fdc_file f, uint64_t seg_start, uint64_t page_start, uint32_t npages)
{
	while (npages > 0) {
		uint32_t idx = wal_buf_index(page_start);
		uint32_t run = WR_MIN(npages, wal_sh->nbufs - idx); /* up to the ring's end */
		int rc = fdc_pwrite(f, wal_bufs + (size_t)idx * WAL_PAGE_SIZE,
		                    (size_t)run * WAL_PAGE_SIZE, (off_t)(page_start - seg_start));
		if (rc == WALRUS_ERESTART)
			wr_panic("WAL write refused: the instance crashed");
		if (rc != WALRUS_OK)
			wal_io_failed("write to", seg_start, errno);
		atomic_fetch_add_explicit(&wal_sh->st_writes, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&wal_sh->st_write_bytes, (uint64_t)run * WAL_PAGE_SIZE,
		                          memory_order_relaxed);
		page_start += (uint64_t)run * WAL_PAGE_SIZE;
		npages -= run;
	}
}

/* ---------------------------------------------------------------- io_uring path */

static void ring_init(void)
{
	if (ring_ready)
		return;
	int rc = io_uring_queue_init(WAL_URING_DEPTH, &ring, 0);
	if (rc < 0) {
		errno = -rc;
		wr_panic("could not set up io_uring for the WAL: %m");
	}
	ring_ready = true;
}

static void uring_fail(const char *what, uint64_t seg_start, int err)
{
	fdc_io_end();
	wal_io_failed(what, seg_start, err);
}

/* Completes a write the kernel did only part of, on the sync path. */
static void finish_short_write(fdc_file f, uint64_t seg_start, uint64_t page, uint32_t done,
                               uint32_t len)
{
	char *buf = wal_bufs + (size_t)wal_buf_index(page) * WAL_PAGE_SIZE;
	int rc = fdc_pwrite(f, buf + done, len - done, (off_t)(page - seg_start + done));
	if (rc != WALRUS_OK)
		wal_io_failed("write to", seg_start, errno);
}

typedef struct uring_run {
	uint64_t page;
	uint32_t len;
} uring_run;

static int queue_writes(int fd, uint64_t seg_start, uint64_t *page_start, uint32_t *npages,
                        uring_run *runs)
{
	int n = 0;
	while (*npages > 0 && n < WAL_URING_DEPTH - 1) {
		uint32_t idx = wal_buf_index(*page_start);
		uint32_t run = WR_MIN(*npages, wal_sh->nbufs - idx);
		struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
		io_uring_prep_write(sqe, fd, wal_bufs + (size_t)idx * WAL_PAGE_SIZE,
		                    run * WAL_PAGE_SIZE, *page_start - seg_start);
		io_uring_sqe_set_data64(sqe, (uint64_t)n);
		runs[n].page = *page_start;
		runs[n++].len = run * WAL_PAGE_SIZE;
		*page_start += (uint64_t)run * WAL_PAGE_SIZE;
		*npages -= run;
	}
	return n;
}

/*
 * Writes the pages with one SQE per contiguous run of the ring and, when the
 * batch ends the range and the sync method needs one, an fdatasync SQE with
 * IOSQE_IO_DRAIN so it starts after every write.  Short writes are finished
 * on the sync path, which then also flushes again.  Returns whether the
 * batch's flush covered everything.
 */
static bool write_pages_uring(fdc_file f, uint64_t seg_start, uint64_t page_start, uint32_t npages)
{
	int fd, injected;
	uring_run runs[WAL_URING_DEPTH];
	ring_init();
	if (fdc_fd(f, &fd) != WALRUS_OK)
		wr_panic("could not open WAL segment: %s", walrus_errmsg());
	while (npages > 0) {
		if (fdc_io_begin(f, "pwrite", &injected) != WALRUS_OK)
			wr_panic("WAL write refused: %s", walrus_errmsg());
		if (injected)
			uring_fail("write to", seg_start, injected);
		int nw = queue_writes(fd, seg_start, &page_start, &npages, runs);
		bool flush = npages == 0 && wal_sh->sync_method != WR_SYNC_OPEN_DATASYNC;
		if (flush) {
			if (fdc_io_begin(f, "fdatasync", &injected) == WALRUS_OK)
				fdc_io_end();
			if (injected)
				uring_fail("fdatasync", seg_start, injected);
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
			io_uring_prep_fsync(
			    sqe, fd,
			    wal_sh->sync_method == WR_SYNC_FSYNC ? 0 : IORING_FSYNC_DATASYNC);
			sqe->flags |= IOSQE_IO_DRAIN;
			io_uring_sqe_set_data64(sqe, UINT64_MAX);
		}
		int total = nw + (flush ? 1 : 0);
		int rc = io_uring_submit_and_wait(&ring, (unsigned)total);
		if (rc < 0)
			uring_fail("submit writes to", seg_start, -rc);
		bool short_write = false;
		for (int i = 0; i < total; i++) {
			struct io_uring_cqe *cqe;
			rc = io_uring_wait_cqe(&ring, &cqe);
			if (rc < 0)
				uring_fail("wait for writes to", seg_start, -rc);
			uint64_t id = io_uring_cqe_get_data64(cqe);
			int res = cqe->res;
			io_uring_cqe_seen(&ring, cqe);
			if (res < 0)
				uring_fail(id == UINT64_MAX ? "fdatasync" : "write to", seg_start,
				           -res);
			if (id == UINT64_MAX)
				continue;
			if ((uint32_t)res < runs[id].len) {
				finish_short_write(f, seg_start, runs[id].page, (uint32_t)res,
				                   runs[id].len);
				short_write = true;
			}
			atomic_fetch_add_explicit(&wal_sh->st_writes, 1, memory_order_relaxed);
			atomic_fetch_add_explicit(&wal_sh->st_write_bytes, runs[id].len,
			                          memory_order_relaxed);
		}
		fdc_io_end();
		if (npages == 0)
			return flush && !short_write;
	}
	return false;
}

/* ---------------------------------------------------------------- writing */

/*
 * Writes the WAL in [from, upto) - whole pages, the last one partial - and
 * flushes each segment it touched.  Caller holds write_lock.
 */
static void write_and_flush(uint64_t from, uint64_t upto)
{
	wal_stamp_durable(from, upto, atomic_load(&wal_sh->flush_lsn));
	uint64_t pos = from - from % WAL_PAGE_SIZE;
	while (pos < upto) {
		uint64_t seg_start = pos - pos % wal_sh->seg_size;
		uint64_t chunk_end = WR_MIN(upto, seg_start + wal_sh->seg_size);
		uint32_t npages = (uint32_t)((chunk_end - pos + WAL_PAGE_SIZE - 1) / WAL_PAGE_SIZE);
		fdc_file f = segment_fd(seg_start);
		bool synced = false;
		if (wal_sh->io_method == WR_IO_URING)
			synced = write_pages_uring(f, seg_start, pos, npages);
		else
			write_pages_sync(f, seg_start, pos, npages);
		if (!synced)
			sync_segment(f, seg_start);
		else
			fdc_clear_dirty(f);
		pos = seg_start + wal_sh->seg_size;
	}
}

uint64_t wal_wait_insertions(uint64_t upto)
{
	uint64_t done = upto;
	for (uint32_t i = 0; i < wal_sh->nslots; i++) {
		_Atomic uint64_t *v = &wal_slots[i].done_upto;
		uint64_t x;
		int round = 0;
		/* Busy and silent: it is copying and cannot block, so wait. */
		while ((x = atomic_load(v)) == WAL_SLOT_BUSY) {
			if (++round < WAL_SPIN_ROUNDS)
				wal_cpu_relax();
			else
				sched_yield();
		}
		if (x != WAL_SLOT_IDLE && x < done)
			done = x;
	}
	return done;
}

/*
 * Group commit's other half.  Committers fall into two alternating groups
 * when the leader flushes at once: those released by one flush insert their
 * next record while the next flush is already under way, so each flush
 * covers about half of them.  When other committers are inside
 * wal_flush_to, the leader waits while more keep arriving (each new one
 * restarts a short quiet window), at most commit_gather.  Measured on 2
 * vCPUs with 8 committers: commits per flush 4.3 -> 6, commits/s about +30%
 * (docs/performance.md).
 */
static void gather_committers(void)
{
	if (wal_sh->gather_ns == 0 || atomic_load(&wal_sh->in_flush) < 2)
		return;
	uint64_t start = wr_now_ns(), changed = start, now = start;
	uint32_t seen = atomic_load(&wal_sh->in_flush);
	while (now - start < wal_sh->gather_ns && now - changed < WAL_GATHER_QUIET_NS) {
		sched_yield(); /* on 2 CPUs the arriving committers need ours */
		now = wr_now_ns();
		uint32_t n = atomic_load(&wal_sh->in_flush);
		if (n != seen) {
			seen = n;
			changed = now;
		}
	}
}

/* One writer round under write_lock: write and flush what is inserted, at least up to @want. */
static void write_round(uint64_t want)
{
	gather_committers();
	uint64_t target = WR_MAX(want, wal_reserved_end());
	uint64_t upto = wal_wait_insertions(target);
	uint64_t from = atomic_load(&wal_sh->write_lsn);
	if (upto <= from)
		return;
	uint64_t t0 = wr_now_ns();
	write_and_flush(from, upto);
	atomic_store(&wal_sh->write_lsn, upto);
	atomic_store(&wal_sh->flush_lsn, upto);
	atomic_fetch_add_explicit(&wal_sh->st_flushes, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&wal_sh->st_flush_ns, wr_now_ns() - t0, memory_order_relaxed);
}

static void release_and_wake(void)
{
	rw_unlock(&wal_sh->write_lock);
	atomic_fetch_add(&wal_sh->flush_seq, 1);
	if (atomic_load(&wal_sh->flush_sleepers) > 0)
		ipc_wake_all(&wal_sh->flush_seq);
}

void wal_write_upto(uint64_t upto)
{
	while (atomic_load(&wal_sh->write_lsn) < upto) {
		rw_lock_excl(&wal_sh->write_lock);
		write_round(upto);
		release_and_wake();
		if (atomic_load(&wal_sh->write_lsn) < upto)
			sched_yield(); /* an inserter below upto is itself waiting for a buffer */
	}
}

/* Sleeps until flush_seq moves from @seen (bounded: the state is re-checked). */
static void wait_for_flush(uint32_t seen)
{
	atomic_fetch_add(&wal_sh->flush_sleepers, 1);
	if (atomic_load(&wal_sh->flush_seq) == seen)
		ipc_wait_u32(&wal_sh->flush_seq, seen, 10ULL * 1000 * 1000);
	atomic_fetch_sub(&wal_sh->flush_sleepers, 1);
	/* The flusher may have died holding the write lock: then nobody will
	 * ever flush this instance's WAL again, and the commit's fate is
	 * decided by recovery.  The supervisor's PANIC handling ignores a
	 * PANIC from a process of an instance it already restarted. */
	if (atomic_load(&shm_hdr()->state) == SHM_STATE_CRASHED)
		wr_panic("instance crashed while this process waited for the WAL flush");
}

void wal_flush_to(wr_lsn lsn)
{
	bool counted = false;
	int round = 0;
	uint64_t reserved = wal_reserved_end();
	if (lsn > reserved)
		lsn = reserved; /* nothing beyond the inserted WAL can be asked for */
	atomic_fetch_add(&wal_sh->in_flush, 1);
	while (atomic_load(&wal_sh->flush_lsn) < lsn) {
		uint32_t seen = atomic_load(&wal_sh->flush_seq);
		if (rw_trylock_excl(&wal_sh->write_lock)) {
			if (atomic_load(&wal_sh->flush_lsn) < lsn)
				write_round(lsn);
			release_and_wake();
			continue;
		}
		if (!counted) {
			atomic_fetch_add_explicit(&wal_sh->st_group_waits, 1, memory_order_relaxed);
			counted = true;
		}
		/* Someone else is flushing, probably for us too. */
		if (++round < WAL_SPIN_ROUNDS)
			wal_cpu_relax();
		else
			wait_for_flush(seen);
	}
	atomic_fetch_sub(&wal_sh->in_flush, 1);
}

wr_lsn wal_flushed_lsn(void)
{
	return atomic_load(&wal_sh->flush_lsn);
}

void wal_flush_async(wr_lsn lsn)
{
	uint64_t cur = atomic_load(&wal_sh->async_lsn);
	while (cur < lsn && !atomic_compare_exchange_weak(&wal_sh->async_lsn, &cur, lsn))
		;
	/* Wake the WAL writer early when a whole buffer's worth is waiting. */
	uint64_t flushed = atomic_load(&wal_sh->flush_lsn);
	if (lsn - flushed > (uint64_t)wal_sh->nbufs * WAL_PAGE_SIZE / 4) {
		atomic_fetch_add(&wal_sh->writer_latch, 1);
		ipc_wake_all(&wal_sh->writer_latch);
	}
}

/*
 * Creates the segments up to the one after the insert position before
 * anyone needs them, so commits never wait for a zero-fill.  prealloc_end
 * only grows over segments that exist, contiguously from the flush
 * position: ensure_segment trusts every name below it.  (Inserts may run
 * several segments ahead of the flush; creating only the insert's segment
 * and the next left a gap that ensure_segment then believed created.)
 */
static void preallocate(void)
{
	uint64_t size = wal_sh->seg_size;
	uint64_t end = wal_reserved_end();
	uint64_t next = end - end % size + size;
	uint64_t have = atomic_load(&wal_sh->prealloc_end);
	if (have >= next + size)
		return;
	uint64_t flushed = atomic_load(&wal_sh->flush_lsn);
	for (uint64_t s = WR_MAX(have, flushed - flushed % size); s <= next; s += size) {
		int rc = wal_segment_create(wal_sh->waldir, size, s);
		if (rc != WALRUS_OK) {
			wr_log(WR_WARNING, "could not preallocate WAL segment: %s",
			       walrus_errmsg());
			return;
		}
		/* Never lower it: a concurrent caller may have gone further. */
		uint64_t cur = atomic_load(&wal_sh->prealloc_end);
		while (cur < s + size &&
		       !atomic_compare_exchange_weak(&wal_sh->prealloc_end, &cur, s + size))
			;
	}
}

void wal_writer_round(void)
{
	if (wal_sh == NULL || !atomic_load(&wal_sh->started))
		return;
	uint64_t end = wal_reserved_end();
	if (atomic_load(&wal_sh->flush_lsn) < end)
		wal_flush_to(end);
	preallocate();
}
