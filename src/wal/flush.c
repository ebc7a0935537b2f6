/*
 * flush.c - writing the WAL buffers to segment files and making them
 * durable: group commit, the sync methods, O_DIRECT, io_uring, and the WAL
 * writer's round.
 *
 * One process at a time holds write_lock and writes: it takes everything
 * that is inserted (not just what it needs), so one write and one
 * fdatasync cover every committer waiting behind it, and then wakes them
 * all with one futex call on flush_seq.  Before a flush starts, committers
 * gather (see "group commit" below).
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
#define WAL_SPIN_NS         10000 /* spin only when the flush should end this soon */
#define WAL_WAIT_NS         (10ULL * 1000 * 1000) /* a sleeper re-checks at least this often */
#define WAL_NAP_EXTRA_NS    1000    /* a gather's timer wakes just past its deadline */
#define WAL_GATHER_STALE_NS 1000000 /* a holder this late past commit_gather left */
#define WAL_URING_DEPTH     64

static void (*flush_hook)(void);

void wal_set_flush_hook(void (*fn)(void))
{
	flush_hook = fn;
}

static struct {
	uint64_t start; /* of the segment this process has open, or UINT64_MAX */
	fdc_file f;
} seg = {UINT64_MAX, FDC_INVALID};

/* The ring of the process that set it up: a forked child (a supervisor
 * started from an application) shares its memory with the parent, and its
 * fd may be closed, so the child sets up its own. */
static struct io_uring ring;
static pid_t ring_owner;

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
	if (atomic_load_explicit(&wal_sh->direct, memory_order_relaxed))
		fl |= O_DIRECT;
	return fl;
}

/*
 * Opens a segment.  O_DIRECT refused (EINVAL at open: a file system without
 * it, as tmpfs before Linux 6.6) under wal_direct_io=auto turns it off for
 * the instance, said once; an explicit wal_direct_io=on keeps the PANIC.
 */
static void segment_open(const char *path)
{
	int fl = open_flags();
	int rc = fdc_open(path, fl, 0600, &seg.f);
	if (rc == WALRUS_EINVAL && (fl & O_DIRECT) && wal_sh->direct_auto) {
		if (atomic_exchange(&wal_sh->direct, false))
			wr_log(WR_LOG,
			       "the file system of \"%s\" refuses O_DIRECT (%s): WAL goes through "
			       "the page cache (wal_direct_io=auto)",
			       wal_sh->waldir, walrus_errmsg());
		rc = fdc_open(path, open_flags(), 0600, &seg.f);
	}
	if (rc != WALRUS_OK)
		wr_panic("could not open WAL segment: %s", walrus_errmsg());
}

/* Set while this process runs a WAL writer round: what it creates is
 * preallocation, not a wait in a committer's path. */
static bool in_writer_round;

/*
 * A process writing WAL had to zero-fill a segment itself: the WAL writer
 * was not far enough ahead.  It keeps twice as many ready from now on (up
 * to prealloc_max), and is woken to catch up.
 */
static void note_on_demand(void)
{
	atomic_fetch_add_explicit(&wal_sh->st_seg_on_demand, 1, memory_order_relaxed);
	uint32_t a = atomic_load(&wal_sh->prealloc_ahead);
	uint32_t want = WR_MIN(a * 2, wal_sh->prealloc_max);
	while (a < want && !atomic_compare_exchange_weak(&wal_sh->prealloc_ahead, &a, want))
		want = WR_MIN(a * 2, wal_sh->prealloc_max);
	atomic_fetch_add(&wal_sh->writer_latch, 1);
	ipc_wake_all(&wal_sh->writer_latch);
}

static void ensure_segment(uint64_t seg_start)
{
	if (seg_start + wal_sh->seg_size <= atomic_load(&wal_sh->prealloc_end))
		return;
	bool filled;
	int rc = wal_segment_make(wal_sh->waldir, wal_sh->seg_size, seg_start,
	                          atomic_load(&wal_sh->direct), &filled);
	if (rc != WALRUS_OK)
		wr_panic("could not create WAL segment for " WAL_LSN_FMT ": %s",
		         WAL_LSN_ARGS(seg_start), walrus_errmsg());
	if (filled && !in_writer_round)
		note_on_demand();
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
	segment_open(path);
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
		/* The last page's tail may still be filling (wal_wait_insertions
		 * waited only for what the flush covers): written again later. */
		WR_RACY_READS_BEGIN();
		int rc = fdc_pwrite(f, wal_bufs + (size_t)idx * WAL_PAGE_SIZE,
		                    (size_t)run * WAL_PAGE_SIZE, (off_t)(page_start - seg_start));
		WR_RACY_READS_END();
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
	if (ring_owner == getpid())
		return;
	int rc = io_uring_queue_init(WAL_URING_DEPTH, &ring, 0);
	if (rc < 0) {
		errno = -rc;
		wr_panic("could not set up io_uring for the WAL: %m");
	}
	ring_owner = getpid();
}

/* After a failed batch every submitted request has been reaped, but some
 * may never have been submitted: tear the ring down so no later submission
 * carries them. */
static void ring_discard(void)
{
	io_uring_queue_exit(&ring);
	ring_owner = 0;
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
	uint64_t intent; /* the power-loss journal's record of it, or 0 */
} uring_run;

static int queue_writes(fdc_file f, int fd, uint64_t seg_start, uint64_t *page_start,
                        uint32_t *npages, uring_run *runs)
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
		runs[n].len = run * WAL_PAGE_SIZE;
		runs[n++].intent = fdc_io_write_intent(f, (off_t)(*page_start - seg_start),
		                                       (size_t)run * WAL_PAGE_SIZE);
		*page_start += (uint64_t)run * WAL_PAGE_SIZE;
		*npages -= run;
	}
	return n;
}

/* Whether queue_writes would queue all of @npages in one batch. */
static bool batch_ends(uint64_t page_start, uint32_t npages)
{
	for (int n = 0; n < WAL_URING_DEPTH - 1; n++) {
		uint32_t run = WR_MIN(npages, wal_sh->nbufs - wal_buf_index(page_start));
		page_start += (uint64_t)run * WAL_PAGE_SIZE;
		npages -= run;
		if (npages == 0)
			return true;
	}
	return false;
}

/* The first failure of a batch: reported once every request has completed. */
typedef struct uring_err {
	const char *what;
	int err;
} uring_err;

static void uring_note(uring_err *e, const char *what, int err)
{
	if (e->err == 0) {
		e->what = what;
		e->err = err;
	}
}

/*
 * Reaps @total completions.  A failed request does not stop the reaping: the
 * others are still in flight, and the I/O guard may be dropped (a PANIC)
 * only when none of this instance's writes can still land.
 */
static bool reap_batch(fdc_file f, uint64_t seg_start, const uring_run *runs, int total,
                       uring_err *e)
{
	bool short_write = false;
	for (int i = 0; i < total; i++) {
		struct io_uring_cqe *cqe;
		int rc = io_uring_wait_cqe(&ring, &cqe);
		if (rc == -EINTR) {
			i--;
			continue;
		}
		if (rc < 0) {
			/* The ring itself failed: nothing more can be reaped. */
			errno = -rc;
			wr_panic("could not wait for writes to the WAL: %m");
		}
		uint64_t id = io_uring_cqe_get_data64(cqe);
		int res = cqe->res;
		io_uring_cqe_seen(&ring, cqe);
		if (res < 0) {
			uring_note(e, id == UINT64_MAX ? "fdatasync" : "write to", -res);
			continue;
		}
		if (id == UINT64_MAX) {
			if (e->err == 0)
				fdc_io_synced(f);
			continue;
		}
		fdc_io_write_done(f, runs[id].intent);
		if (e->err != 0)
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
	return short_write;
}

/* Enters the I/O guard for @op on @f; PANICs when refused (the instance crashed). */
static void uring_begin(fdc_file f, uint64_t seg_start, const char *op, int *held)
{
	int injected;
	if (fdc_io_begin(f, op, &injected) != WALRUS_OK) {
		for (; *held > 0; (*held)--)
			fdc_io_end();
		wr_panic("WAL %s refused: %s", op, walrus_errmsg());
	}
	(*held)++;
	if (injected)
		wal_io_failed(strcmp(op, "pwrite") == 0 ? "write to" : op, seg_start, injected);
}

/*
 * Writes the pages with one SQE per contiguous run of the ring and, when the
 * batch ends the range and the sync method needs one, an fdatasync SQE with
 * IOSQE_IO_DRAIN so it starts after every write.  Short writes are finished
 * on the sync path, which then also flushes again.  The I/O guard is held
 * from before the submission until the last completion (one bracket for the
 * writes, one for the flush).  Returns whether the batch's flush covered
 * everything.
 */
static bool write_pages_uring(fdc_file f, uint64_t seg_start, uint64_t page_start, uint32_t npages)
{
	int fd;
	uring_run runs[WAL_URING_DEPTH];
	ring_init();
	if (fdc_fd(f, &fd) != WALRUS_OK)
		wr_panic("could not open WAL segment: %s", walrus_errmsg());
	while (npages > 0) {
		/* Both brackets before anything is queued: a refusal must not
		 * leave SQEs behind for the next submission. */
		int held = 0;
		uring_begin(f, seg_start, "pwrite", &held);
		bool flush =
		    wal_sh->sync_method != WR_SYNC_OPEN_DATASYNC && batch_ends(page_start, npages);
		if (flush)
			uring_begin(f, seg_start, "fdatasync", &held);
		int nw = queue_writes(f, fd, seg_start, &page_start, &npages, runs);
		if (flush) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
			io_uring_prep_fsync(
			    sqe, fd,
			    wal_sh->sync_method == WR_SYNC_FSYNC ? 0 : IORING_FSYNC_DATASYNC);
			sqe->flags |= IOSQE_IO_DRAIN;
			io_uring_sqe_set_data64(sqe, UINT64_MAX);
		}
		int total = nw + (flush ? 1 : 0);
		uring_err e = {NULL, 0};
		bool short_write = false;
		int rc;
		do
			rc = io_uring_submit(&ring);
		while (rc == -EINTR);
		if (rc < 0)
			uring_note(&e, "submit writes to", -rc);
		else
			short_write = reap_batch(f, seg_start, runs, rc, &e);
		if (rc >= 0 && rc < total)
			uring_note(&e, "submit every write to", EAGAIN);
		for (; held > 0; held--)
			fdc_io_end();
		if (e.err != 0) {
			ring_discard();
			wal_io_failed(e.what, seg_start, e.err);
		}
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
	/* A flush target just past a page's header (a record ended at the end
	 * of the page before) puts nothing on that page, which an inserter may
	 * not even have initialised yet: leave the page, header included, to
	 * the write that carries its first record.  No page written now claims
	 * that position as durable (they carry the previous flush position). */
	uint64_t off = upto % WAL_PAGE_SIZE;
	if (off != 0 && off == wal_page_header_size(upto - off, wal_sh->seg_size))
		upto -= off;
	if (upto <= from - from % WAL_PAGE_SIZE)
		return;
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
		ipc_spin sp = IPC_SPIN_INIT("a WAL insertion to finish its copy");
		/* Busy and silent: it is copying and cannot block, so wait. */
		while ((x = atomic_load(v)) == WAL_SLOT_BUSY)
			ipc_spin_delay(&sp);
		if (x != WAL_SLOT_IDLE && x < done)
			done = x;
	}
	return done;
}

/* One writer round under write_lock: write and flush what is inserted, at least up to @want. */
static void write_round(uint64_t want)
{
	/* Fix the range.  The committers counted so far inserted before they
	 * were counted, so the reserved end read below covers them: a new
	 * gather round begins (gather_word's high half), with nobody yet. */
	uint64_t w = atomic_load(&wal_sh->gather_word);
	atomic_store(&wal_sh->gather_word, ((w >> 32) + 1) << 32);
	atomic_store(&wal_sh->gather_start_ns, 0);
	uint64_t target = WR_MAX(want, wal_reserved_end());
	uint64_t upto = wal_wait_insertions(target);
	uint64_t from = atomic_load(&wal_sh->write_lsn);
	if (upto <= from)
		return;
	atomic_store(&wal_sh->flush_target, upto);
	uint64_t t0 = wr_now_ns();
	atomic_store(&wal_sh->flush_start_ns, t0);
	write_and_flush(from, upto);
	atomic_store(&wal_sh->write_lsn, upto);
	atomic_store(&wal_sh->flush_lsn, upto);
	if (flush_hook != NULL)
		flush_hook(); /* the WAL senders' wake-up: a load when none sleeps */
	uint64_t t1 = wr_now_ns(), ns = t1 - t0;
	atomic_store(&wal_sh->flush_start_ns, 0);
	/* Whoever is waiting now comes back for the next flush: the ones this
	 * flush covered with their next commit, the others already counted.
	 * Those arrived during the flush could not have been served sooner:
	 * for the gather, they arrived now. */
	atomic_store(&wal_sh->gather_expect, atomic_load(&wal_sh->in_flush));
	atomic_store(&wal_sh->gather_last_ns, t1);
	atomic_store(&wal_sh->gather_start_ns, 0);
	uint64_t avg = atomic_load(&wal_sh->flush_avg_ns);
	atomic_store(&wal_sh->flush_avg_ns, avg ? avg - avg / 8 + ns / 8 : ns);
	atomic_fetch_add_explicit(&wal_sh->st_flushes, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&wal_sh->st_flush_ns, ns, memory_order_relaxed);
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

/* ---------------------------------------------------------------- group commit */

/*
 * Committers fall into two alternating groups when whoever arrives first
 * flushes at once: those released by one flush insert their next record
 * while the next flush is already under way, so each flush covers about
 * half of them.  So a flush waits for the committers it can expect: those
 * that were inside wal_flush_to when the last flush ended (released, they
 * come back with their next commit; the others are waiting already).
 * While no flush is under way and fewer of them have arrived since the
 * last flush fixed its range, an arriving committer sleeps instead of
 * flushing, and the one that completes the set flushes at once: nobody is
 * woken just to start the flush, and no CPU is kept busy watching the
 * arrivals (on 2 CPUs the arriving committers need it).
 *
 * When some do not come, the first sleeper, which holds the gather's timer
 * (@token: the gather's start time), wakes and flushes for all.  One more
 * commit is worth waiting for while it comes within (flush time + time
 * waited) / commits gathered of the last arrival: later than that, the
 * flush would serve fewer commits per unit of time than it would now.
 * A lone arrival waits at most one flush time, and no gather lasts longer
 * than commit_gather.  The expectation corrects itself: a committer that
 * stopped committing is not inside wal_flush_to when the next flush ends.
 *
 * Returns how long to sleep, 0 to flush now.
 */
static uint64_t gather_wait(uint64_t *token)
{
	uint32_t expect = atomic_load(&wal_sh->gather_expect);
	uint32_t n = (uint32_t)atomic_load(&wal_sh->gather_word);
	if (wal_sh->gather_ns == 0 || n == 0 || n >= expect)
		return 0;
	uint64_t now = wr_now_ns();
	uint64_t start = atomic_load(&wal_sh->gather_start_ns);
	if (start == 0) {
		if (!atomic_compare_exchange_strong(&wal_sh->gather_start_ns, &start, now))
			return WAL_WAIT_NS; /* another committer just began it: its timer */
		start = *token = now;
	}
	if (start != *token) {
		/* The holder's timer ends the gather, or a flush ends our sleep.
		 * A holder that left (a flush covered it meanwhile) would end
		 * neither: past commit_gather, the timer is anyone's. */
		if (start > now || now - start < wal_sh->gather_ns + WAL_GATHER_STALE_NS ||
		    !atomic_compare_exchange_strong(&wal_sh->gather_start_ns, &start, now))
			return WAL_WAIT_NS;
		start = *token = now;
	}
	uint64_t waited = now - start;
	if (waited >= wal_sh->gather_ns)
		return 0;
	/* Times relative to the start: the last arrival at a, the flush takes f. */
	int64_t a = (int64_t)(atomic_load(&wal_sh->gather_last_ns) - start);
	int64_t f = (int64_t)atomic_load(&wal_sh->flush_avg_ns);
	int64_t t = (int64_t)waited, nn = (int64_t)n;
	if (nn * (t - a) >= f + t || (nn == 1 && t >= f))
		return 0;
	/* Without another arrival, that happens at t = (f + n a) / (n - 1). */
	int64_t deadline = nn >= 2 ? (f + nn * a) / (nn - 1) : f;
	deadline = WR_MIN(deadline, (int64_t)wal_sh->gather_ns);
	return deadline > t ? (uint64_t)(deadline - t) + WAL_NAP_EXTRA_NS : 0;
}

/* Counts this committer into the current gather round; returns the round. */
static uint32_t gather_arrive(void)
{
	atomic_store(&wal_sh->gather_last_ns, wr_now_ns());
	return (uint32_t)(atomic_fetch_add(&wal_sh->gather_word, 1) >> 32);
}

/*
 * A waiter spins only when the flush under way should end within
 * WAL_SPIN_NS; otherwise it sleeps at once.  Spinning through a flush
 * takes CPU from the committers still on their way.
 */
static bool flush_ends_soon(void)
{
	uint64_t start = atomic_load(&wal_sh->flush_start_ns);
	return start != 0 &&
	       wr_now_ns() - start + WAL_SPIN_NS >= atomic_load(&wal_sh->flush_avg_ns);
}

/* Sleeps until flush_seq moves from @seen, or @timeout_ns passes. */
static void wait_for_flush(uint32_t seen, uint64_t timeout_ns)
{
	atomic_fetch_add(&wal_sh->flush_sleepers, 1);
	if (atomic_load(&wal_sh->flush_seq) == seen)
		ipc_wait_u32(&wal_sh->flush_seq, seen, timeout_ns);
	atomic_fetch_sub(&wal_sh->flush_sleepers, 1);
	/* The flusher may have died holding the write lock: then nobody will
	 * ever flush this instance's WAL again, and the commit's fate is
	 * decided by recovery.  The supervisor's PANIC handling ignores a
	 * PANIC from a process of an instance it already restarted. */
	if (atomic_load(&shm_hdr()->state) == SHM_STATE_CRASHED)
		wr_panic("instance crashed while this process waited for the WAL flush");
	/* Nor will anyone mark it crashed once its supervisor is gone: this
	 * process does, so that every waiter ends (its call reports the
	 * restart) instead of waiting for ever on a dead instance. */
	if (wal_supervisor_gone()) {
		atomic_store(&shm_hdr()->state, SHM_STATE_CRASHED);
		ipc_wake_all(&shm_hdr()->state);
		ipc_wake_all(&wal_sh->flush_seq);
		wr_panic("the instance's supervisor exited while this process waited for the WAL "
		         "flush");
	}
}

/*
 * Returns once the WAL up to @lsn is durable, flushing it when nobody else
 * does.  A @committer takes part in the gather; the WAL writer does not:
 * nobody waits for it, and it should wait for nobody.
 */
static void flush_upto(uint64_t lsn, bool committer)
{
	/* Only a committer that has to wait counts: one whose WAL is durable
	 * already (a page's LSN, say) is not coming back for a flush. */
	if (atomic_load(&wal_sh->flush_lsn) >= lsn)
		return;
	uint64_t reserved = wal_reserved_end();
	if (lsn > reserved)
		lsn = reserved; /* nothing beyond the inserted WAL can be asked for */
	if (atomic_load(&wal_sh->flush_lsn) >= lsn)
		return;
	bool waited = false, flushed = false;
	int round = 0;
	uint64_t token = 0;
	uint32_t counted = UINT32_MAX; /* the gather round this committer is counted in */
	if (committer)
		atomic_fetch_add(&wal_sh->in_flush, 1);
	while (atomic_load(&wal_sh->flush_lsn) < lsn) {
		uint32_t seen = atomic_load(&wal_sh->flush_seq);
		/* Not covered by the latest flush started: count in once per round
		 * (a flush whose range stopped short of us began a new round). */
		if (committer && lsn > atomic_load(&wal_sh->flush_target) &&
		    (uint32_t)(atomic_load(&wal_sh->gather_word) >> 32) != counted)
			counted = gather_arrive();
		if (!rw_held_excl(&wal_sh->write_lock)) {
			uint64_t nap = committer ? gather_wait(&token) : 0;
			if (nap != 0) {
				waited = true;
				atomic_fetch_add_explicit(&wal_sh->st_gather_naps, 1,
				                          memory_order_relaxed);
				wait_for_flush(seen, nap);
				continue;
			}
			if (rw_trylock_excl(&wal_sh->write_lock)) {
				if (atomic_load(&wal_sh->flush_lsn) < lsn) {
					write_round(lsn);
					flushed = true;
				}
				release_and_wake();
				continue;
			}
		}
		/* Someone else is writing, probably for us too. */
		waited = true;
		if (++round < WAL_SPIN_ROUNDS && flush_ends_soon())
			wal_cpu_relax();
		else
			wait_for_flush(seen, WAL_WAIT_NS);
	}
	if (committer)
		atomic_fetch_sub(&wal_sh->in_flush, 1);
	/* A holder that a flush covered after that flush ended the gather
	 * (it took the timer just too late) hands it back, and wakes the
	 * others to take it. */
	if (token != 0 && atomic_compare_exchange_strong(&wal_sh->gather_start_ns, &token, 0))
		ipc_wake_all(&wal_sh->flush_seq);
	if (waited && !flushed)
		atomic_fetch_add_explicit(&wal_sh->st_group_waits, 1, memory_order_relaxed);
}

void wal_flush_to(wr_lsn lsn)
{
	flush_upto(lsn, true);
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
 * Creates the segments up to prealloc_ahead past the insert position's
 * before anyone needs them, so commits do not wait for a zero-fill (those
 * that still do are counted, and make the distance grow).  prealloc_end
 * only grows over segments that exist, contiguously from the flush
 * position: ensure_segment trusts every name below it.  (Inserts may run
 * several segments ahead of the flush; creating only the insert's segment
 * and the next left a gap that ensure_segment then believed created.)
 */
static void preallocate_segments(void)
{
	uint64_t size = wal_sh->seg_size;
	uint64_t end = wal_reserved_end();
	uint64_t next = end - end % size + (uint64_t)atomic_load(&wal_sh->prealloc_ahead) * size;
	uint64_t have = atomic_load(&wal_sh->prealloc_end);
	if (have >= next + size)
		return;
	uint64_t flushed = atomic_load(&wal_sh->flush_lsn);
	for (uint64_t s = WR_MAX(have, flushed - flushed % size); s <= next; s += size) {
		bool filled;
		int rc = wal_segment_make(wal_sh->waldir, size, s, atomic_load(&wal_sh->direct),
		                          &filled);
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

/* Dekker with wal_stop_preallocation: busy first, then the stop flag. */
static void preallocate(void)
{
	atomic_fetch_add(&wal_sh->prealloc_busy, 1);
	if (!atomic_load(&wal_sh->prealloc_stop))
		preallocate_segments();
	if (atomic_fetch_sub(&wal_sh->prealloc_busy, 1) == 1)
		ipc_wake_all(&wal_sh->prealloc_busy);
}

bool wal_stop_preallocation(uint64_t timeout_ns)
{
	if (wal_sh == NULL)
		return true;
	atomic_store(&wal_sh->prealloc_stop, 1);
	uint64_t deadline = wr_now_ns() + timeout_ns;
	uint32_t busy;
	while ((busy = atomic_load(&wal_sh->prealloc_busy)) != 0) {
		uint64_t now = wr_now_ns();
		if (now >= deadline)
			return false;
		(void)ipc_wait_u32(&wal_sh->prealloc_busy, busy, deadline - now);
	}
	return true;
}

void wal_writer_round(void)
{
	if (wal_sh == NULL || !atomic_load(&wal_sh->started))
		return;
	in_writer_round = true;
	uint64_t end = wal_reserved_end();
	if (atomic_load(&wal_sh->flush_lsn) < end)
		flush_upto(end, false);
	preallocate();
	in_writer_round = false;
}
