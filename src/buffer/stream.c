/*
 * stream.c - read streams: the blocks of a range of a relation, in order,
 * read ahead of the caller (PostgreSQL's read_stream.c, with its io_uring
 * method).
 *
 * Interface: buffer.h.
 *
 * io_method=io_uring.  The stream keeps a queue of the next @depth blocks,
 * each pinned in the pool.  Looking at an upcoming block it maps a buffer
 * for it (buf_get, as buf_read does) and, without waiting, tries its I/O:
 *   - valid already: the slot just holds the pin (a hit);
 *   - another process's I/O in progress: the pin too; at that block the
 *     stream waits for that I/O as buf_read would (buf_load);
 *   - otherwise the stream now owns BM_IO_IN_PROGRESS and reads the block
 *     into the buffer's page, with the segment's fd pinned in the fd cache
 *     while the read is in flight.  Adjacent blocks to read go into one
 *     IORING_OP_READV of up to STREAM_COMBINE pages (PostgreSQL's I/O
 *     combining): one submission and one completion per read, not per
 *     page (docs/performance.md: from about sync's CPU per page to 12-27%
 *     less).
 * A completion (whoever reaps it: every stream of the process shares one
 * ring) is checked with smgr_check_read, exactly as smgr_read checks, and
 * ends the I/O: the buffer valid, or the error flag set, the pin dropped
 * and the error kept for the caller until it reaches that block.  A short
 * read is finished through the fd cache first.
 *
 * Completions are reaped at each buf_stream_next, so other processes
 * waiting on one of our I/O flags wait at most one step of our caller, and
 * before this process sleeps on anything of the pool (bufmgr.c calls
 * buf_stream_drain), so two processes asleep in the pool never wait for
 * each other's reads.
 *
 * io_method=sync.  posix_fadvise(WILLNEED) through smgr_prefetch for the
 * upcoming blocks not valid in the pool, in runs, refreshed when half the
 * window is consumed, but only for runs that do not continue the previous
 * one (the kernel's readahead serves those better); then plain buf_read.
 *
 * Where the blocks come from: a range [from, to), or the caller (a
 * callback, or a list it hands over: buf_stream_open_cb/_list).  Both
 * methods take the next block from source_peek and consume it with
 * source_take; a block taken from the callback that could not be queued
 * yet (no buffer free) waits in @pending, so the callback is never asked
 * twice for one block.  Under io_method=sync a caller's blocks are queued
 * (numbers only, nothing pinned) so that advice can run ahead of them.
 */
#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "buffer/buf_int.h"

#define STREAM_RING_MIN 32
#define STREAM_COMBINE  16 /* blocks per read at most: 128 kB, PostgreSQL's io_combine_limit */

enum slot_state {
	SLOT_HIT,      /* valid when looked at: pinned */
	SLOT_BUSY,     /* another process's I/O was in progress: pinned */
	SLOT_INFLIGHT, /* our read is in flight: pinned, I/O flag ours */
	SLOT_READ,     /* our read completed: pinned, valid */
	SLOT_FAILED,   /* our read failed: nothing pinned; rc and msg kept */
};

typedef struct stream_slot {
	buf_stream *owner;
	wr_blkno blk;
	int buf;
	int state;
	int nrun;   /* the first slot of a read: the blocks it covers */
	fdc_file f; /* SLOT_INFLIGHT: the segment's handle (pinned once per read) */
	off_t off;
	int rc;
	char *msg;
} stream_slot;

struct buf_stream {
	wr_relid rel;
	/* The caller's blocks (NULL: the range [next, to)), and the one taken
	 * from it but not queued yet (WR_INVALID_BLKNO: none). */
	buf_stream_cb cb;
	void *cb_arg;
	wr_blkno pending;
	const wr_blkno *list; /* buf_stream_open_list: list[ilist .. nlist) are still to come */
	uint32_t nlist, ilist;
	wr_blkno next;    /* range: the block buf_stream_next returns next */
	wr_blkno ahead;   /* range, io_uring: the next block to look at */
	wr_blkno advised; /* sync: blocks before this were looked at for advice */
	wr_blkno seq_end; /* sync: just past the last block read from storage, as planned */
	wr_blkno to;
	int depth;
	bool uring;
	pid_t pid;
	uint32_t head, count; /* queue: slots[head .. head + count) modulo depth */
	uint32_t inflight;    /* blocks whose read is in flight */
	stream_slot *slots;
	struct iovec *iov; /* by slot: a combined read's pages */
	/* The read being gathered: adjacent blocks in consecutive slots. */
	uint32_t run_first, run_len;
	fdc_file run_f;
	int run_fd;
	off_t run_off;
	buf_stream_stats st;
};

/* ---------------------------------------------------------------- sources */

/* The next block to look at; WR_INVALID_BLKNO when there is none (for now). */
static wr_blkno source_peek(buf_stream *s)
{
	if (s->cb == NULL)
		return s->ahead < s->to ? s->ahead : WR_INVALID_BLKNO;
	if (s->pending == WR_INVALID_BLKNO)
		s->pending = s->cb(s->cb_arg);
	return s->pending;
}

/* The block source_peek returned is queued, or read: the next one is due. */
static void source_take(buf_stream *s)
{
	if (s->cb == NULL)
		s->ahead++;
	else
		s->pending = WR_INVALID_BLKNO;
}

/* The callback of buf_stream_open_list. */
static wr_blkno list_next(void *arg)
{
	buf_stream *s = arg;
	return s->ilist < s->nlist ? s->list[s->ilist++] : WR_INVALID_BLKNO;
}

/* The calling backend's ring, shared by its streams. */
#define su (buf_me->stream)

void buf_stream_ring_free(buf_stream_ring *r)
{
	/* In a forked child this unmaps and closes its copies only (see ring_check_fork). */
	if (r->ready)
		io_uring_queue_exit(&r->ring);
	free(r->fpins);
	memset(r, 0, sizeof(*r));
}

/* ---------------------------------------------------------------- the ring */

/* After fork: the ring and the counts are the parent's, not ours. */
static void ring_check_fork(void)
{
	pid_t me = getpid();
	if (su.pid == me)
		return;
	if (su.pid != 0) {
		/* Our copies only: unmapping and closing them leaves the parent's ring
		 * alone.  The fd cache pins are left: the child's cache may have been
		 * reset and its handle numbers given to other files since. */
		if (su.ready)
			io_uring_queue_exit(&su.ring);
		free(su.fpins);
		su.fpins = NULL;
		su.nfpins = 0;
		su.ready = false;
		su.entries = 0;
		su.inflight = su.unsubmitted = 0;
	}
	su.pid = me;
}

/* True when the ring is usable, with room for @depth reads if it could be made so. */
static bool ring_setup(int depth)
{
	ring_check_fork();
	if (su.failed)
		return false;
	if (su.ready && (su.entries >= (unsigned)depth || su.inflight > 0))
		return true; /* a smaller ring in use: the in-flight cap makes do */
	if (su.ready) {
		io_uring_queue_exit(&su.ring);
		su.ready = false;
	}
	unsigned n = STREAM_RING_MIN;
	while (n < (unsigned)depth)
		n <<= 1;
	int rc = io_uring_queue_init(n, &su.ring, 0);
	if (rc < 0) {
		errno = -rc;
		wr_log(WR_WARNING, "could not set up io_uring for read streams: %m; reading "
		                   "synchronously");
		su.failed = true;
		return false;
	}
	su.ready = true;
	su.entries = n;
	return true;
}

uint32_t buf_stream_inflight(void)
{
	if (su.inflight == 0)
		return 0;
	ring_check_fork();
	return su.inflight;
}

static int fd_pin(fdc_file f)
{
	if (f >= su.nfpins) {
		int n = WR_MAX(f + 1, su.nfpins * 2);
		n = WR_MAX(n, 64);
		uint32_t *p = realloc(su.fpins, sizeof(*p) * (size_t)n);
		if (p == NULL)
			return wr_error(WALRUS_ENOMEM, "out of memory");
		memset(p + su.nfpins, 0, sizeof(*p) * (size_t)(n - su.nfpins));
		su.fpins = p;
		su.nfpins = n;
	}
	if (su.fpins[f]++ == 0)
		fdc_pin(f, true);
	return WALRUS_OK;
}

static void fd_unpin(fdc_file f)
{
	WR_ASSERT(f >= 0 && f < su.nfpins && su.fpins[f] > 0);
	if (--su.fpins[f] == 0)
		fdc_pin(f, false);
}

static void ring_submit(void)
{
	int idle = 0;
	while (su.unsubmitted > 0) {
		int rc = io_uring_submit(&su.ring);
		if (rc > 0) {
			su.unsubmitted -= WR_MIN((uint32_t)rc, su.unsubmitted);
			continue;
		}
		if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
			errno = -rc;
			/* The reads stay queued and their buffers flagged: nothing to undo. */
			wr_panic("could not submit %u reads to io_uring: %m", su.unsubmitted);
		}
		/* Kernel short of resources: let some reads finish. */
		if (++idle > 10000)
			wr_panic("io_uring accepts none of %u reads", su.unsubmitted);
		wr_sleep_us(100);
	}
}

/* Our read of @sl ended: rc OK (the page is valid) or an error (message set). */
static void slot_end_read(stream_slot *sl, int rc)
{
	buf_desc *d = buf_get_desc(sl->buf);
	if (rc == WALRUS_OK) {
		buf_end_io(d, BM_IO_ERROR, BM_VALID);
		atomic_fetch_add(&buf_l.r->stats.reads, 1);
		sl->state = SLOT_READ;
		return;
	}
	/* Left mapped but invalid, as buf_read leaves it: the next reader retries. */
	sl->rc = rc;
	sl->msg = strdup(walrus_errmsg());
	buf_end_io(d, 0, BM_IO_ERROR);
	buf_unpin(sl->buf);
	sl->buf = BUF_INVALID;
	sl->state = SLOT_FAILED;
}

/*
 * A read of @first->nrun adjacent blocks ended with @res (bytes, or
 * -errno).  Each block is checked as smgr_read checks it; a block the read
 * did not fill (a short read) gets the rest through the seam, where the end
 * of the file reads as 0 bytes, as for fdc_pread.
 */
static void read_complete(stream_slot *first, int res)
{
	buf_stream *s = first->owner;
	stream_slot *run = first;
	smgr_rel *r;
	int orc = smgr_open(s->rel, &r);
	for (int i = 0; i < first->nrun; i++) {
		stream_slot *sl = &run[i];
		char *page = buf_page_ptr(sl->buf);
		int rc = orc;
		ssize_t got = res;
		if (res >= 0) {
			got = WR_MIN(WR_MAX(res - i * WR_PAGE_SIZE, 0), WR_PAGE_SIZE);
			if (rc == WALRUS_OK && got < WR_PAGE_SIZE) {
				ssize_t n = fdc_pread(first->f, page + got,
				                      (size_t)(WR_PAGE_SIZE - got), sl->off + got);
				if (n < 0)
					rc = (int)n;
				else
					got += n;
			}
		}
		if (rc == WALRUS_OK)
			rc = smgr_check_read(r, sl->blk, page, got);
		else
			memset(page, 0, WR_PAGE_SIZE);
		s->inflight--;
		slot_end_read(sl, rc);
	}
	fd_unpin(first->f);
	su.inflight--;
}

/*
 * Completes every read that has finished; with @wait, at least one (if any
 * is in flight).  Returns 1 when it had to sleep for one, else 0.
 */
static int ring_reap(bool wait)
{
	int slept = 0;
	ring_submit();
	while (su.inflight > 0) {
		struct io_uring_cqe *cqe;
		int rc = io_uring_peek_cqe(&su.ring, &cqe);
		if (rc == -EAGAIN) {
			if (!wait)
				return slept;
			slept = 1;
			rc = io_uring_wait_cqe(&su.ring, &cqe);
		}
		if (rc == -EINTR)
			continue;
		if (rc < 0) {
			errno = -rc;
			wr_panic("could not wait for reads from io_uring: %m");
		}
		stream_slot *first = io_uring_cqe_get_data(cqe);
		int res = cqe->res;
		io_uring_cqe_seen(&su.ring, cqe);
		read_complete(first, res);
		wait = false;
	}
	return slept;
}

void buf_stream_drain(void)
{
	if (buf_stream_inflight() == 0)
		return;
	while (su.inflight > 0)
		ring_reap(true);
}

/* ---------------------------------------------------------------- io_uring streams */

/* Queues the read gathered so far as one SQE (a readv for several blocks). */
static void stream_flush_run(buf_stream *s)
{
	if (s->run_len == 0)
		return;
	struct io_uring_sqe *sqe = io_uring_get_sqe(&su.ring);
	if (sqe == NULL) { /* cannot happen below the in-flight cap; be safe */
		ring_submit();
		sqe = io_uring_get_sqe(&su.ring);
		if (sqe == NULL)
			wr_panic("no io_uring submission entry free (%u in flight)", su.inflight);
	}
	stream_slot *first = &s->slots[s->run_first];
	const struct iovec *iov = &s->iov[s->run_first];
	if (s->run_len == 1)
		io_uring_prep_read(sqe, s->run_fd, iov->iov_base, WR_PAGE_SIZE,
		                   (uint64_t)s->run_off);
	else
		io_uring_prep_readv(sqe, s->run_fd, iov, s->run_len, (uint64_t)s->run_off);
	io_uring_sqe_set_data(sqe, first);
	first->nrun = (int)s->run_len;
	first->f = s->run_f;
	su.inflight++;
	su.unsubmitted++;
	s->st.submitted++;
	s->st.blocks += s->run_len;
	s->run_len = 0;
}

/*
 * Our read of the block in slot @idx (its I/O flag is ours): joins the read
 * being gathered when it is the next block of the same segment in the next
 * slot, else starts a new one.
 */
static void stream_start_read(buf_stream *s, uint32_t idx)
{
	stream_slot *sl = &s->slots[idx];
	smgr_rel *r;
	fdc_file f = FDC_INVALID;
	off_t off = 0;
	int injected = 0;
	int rc = smgr_open(s->rel, &r);
	if (rc == WALRUS_OK)
		rc = smgr_block_handle(r, sl->blk, &f, &off);
	/* The same failpoints as fdc_pread, once per block, so both methods fail alike. */
	if (rc == WALRUS_OK)
		rc = fdc_io_begin(f, "pread", &injected);
	if (rc == WALRUS_OK) {
		fdc_io_end();
		if (injected)
			rc = smgr_check_read(r, sl->blk, buf_page_ptr(sl->buf), -injected);
	}
	if (rc == WALRUS_OK && s->run_len > 0 &&
	    (f != s->run_f || idx != s->run_first + s->run_len || s->run_len == STREAM_COMBINE ||
	     off != s->run_off + (off_t)s->run_len * WR_PAGE_SIZE))
		stream_flush_run(s);
	if (rc == WALRUS_OK && s->run_len == 0) {
		/* Pinned: the LRU must not close the fd while the read is in flight. */
		rc = fd_pin(f);
		if (rc == WALRUS_OK) {
			rc = fdc_fd(f, &s->run_fd);
			if (rc != WALRUS_OK)
				fd_unpin(f);
		}
		s->run_first = idx;
		s->run_f = f;
		s->run_off = off;
	}
	if (rc != WALRUS_OK) {
		stream_flush_run(s); /* the blocks before it are read */
		slot_end_read(sl, rc);
		return;
	}
	s->iov[idx] = (struct iovec){.iov_base = buf_page_ptr(sl->buf), .iov_len = WR_PAGE_SIZE};
	sl->f = f;
	sl->off = off;
	sl->state = SLOT_INFLIGHT;
	s->run_len++;
	s->inflight++;
	s->st.max_inflight = WR_MAX(s->st.max_inflight, s->inflight);
}

/* Looks ahead until @depth blocks are queued, then submits the reads. */
static void stream_fill(buf_stream *s)
{
	wr_blkno blk;
	while (s->count < (uint32_t)s->depth && (blk = source_peek(s)) != WR_INVALID_BLKNO) {
		/* Room for the read being gathered and one more. */
		if (su.inflight + 1 >= su.entries) {
			ring_reap(false); /* the ring is full: room first, without waiting */
			if (su.inflight + 1 >= su.entries)
				break;
		}
		int buf;
		bool valid;
		if (buf_get(s->rel, blk, &buf, &valid) != WALRUS_OK) {
			/* No buffer now: buf_stream_next reads this block itself, and
			 * reports the error if it persists. */
			wr_error_clear();
			break;
		}
		uint32_t idx = (s->head + s->count) % (uint32_t)s->depth;
		stream_slot *sl = &s->slots[idx];
		*sl = (stream_slot){.owner = s, .blk = blk, .buf = buf, .f = FDC_INVALID};
		s->count++;
		source_take(s);
		switch (valid ? BUF_IO_DONE : buf_try_start_io(buf_get_desc(buf), true, false)) {
		case BUF_IO_DONE:
			stream_flush_run(s);
			sl->state = SLOT_HIT;
			s->st.hits++;
			atomic_fetch_add(&buf_l.r->stats.hits, 1);
			break;
		case BUF_IO_BUSY:
			stream_flush_run(s);
			sl->state = SLOT_BUSY;
			break;
		default:
			stream_start_read(s, idx);
			break;
		}
	}
	stream_flush_run(s);
	ring_submit();
}

static int stream_next_uring(buf_stream *s, int *out, wr_blkno *blk)
{
	ring_reap(false); /* others may be waiting for one of our reads */
	/* Top up in batches (one submission for half the depth), not a block
	 * per call: the submission is a system call. */
	if (s->count <= (uint32_t)s->depth / 2)
		stream_fill(s);
	if (s->count == 0) {
		/* The look-ahead could not take this block: read it plainly. */
		wr_blkno b = source_peek(s);
		if (b == WR_INVALID_BLKNO)
			return WALRUS_ENOTFOUND;
		source_take(s);
		*blk = b;
		s->next = b + 1;
		return buf_read(s->rel, b, out);
	}
	stream_slot *sl = &s->slots[s->head];
	while (sl->state == SLOT_INFLIGHT)
		s->st.waits += (uint64_t)ring_reap(true);
	s->head = (s->head + 1) % (uint32_t)s->depth;
	s->count--;
	*blk = sl->blk;
	s->next = sl->blk + 1;
	switch (sl->state) {
	case SLOT_BUSY: {
		int rc = buf_load(sl->buf); /* waits for the other process's read */
		if (rc != WALRUS_OK)
			return rc;
		break;
	}
	case SLOT_FAILED: {
		int rc = sl->msg ? wr_error(sl->rc, "%s", sl->msg) : sl->rc;
		free(sl->msg);
		sl->msg = NULL;
		return rc;
	}
	default:
		break;
	}
	*out = sl->buf;
	return WALRUS_OK;
}

/* ---------------------------------------------------------------- sync streams */

/* True when (rel, blk) is valid in the pool (a peek: nothing pinned). */
static bool buf_cached(wr_relid rel, wr_blkno blk)
{
	uint32_t hash = buf_tag_hash(rel, blk);
	wr_rwlock *part = buf_partition_lock(hash);
	rw_lock_shared(part);
	int buf = buf_table_lookup(hash, rel, blk);
	bool valid = buf != 0 && (atomic_load(&buf_get_desc(buf)->state) & BM_VALID);
	rw_unlock(part);
	return valid;
}

/*
 * Advises the blocks up to @depth ahead that the pool does not hold, in
 * runs, except a run that continues the previous one: reads the kernel
 * sees as sequential are its readahead's business (as PostgreSQL's read
 * stream leaves them), and advice in our small batches would replace its
 * larger window (read_ahead_kb): measured, a cold scan took twice as long.
 */
static void stream_advise(buf_stream *s)
{
	if (smgr_direct())
		return; /* advice fills the page cache, which direct reads bypass */
	if (s->advised < s->next)
		s->advised = s->next;
	if (s->advised >= s->to || s->advised - s->next > (wr_blkno)s->depth / 2)
		return;
	wr_blkno end = (wr_blkno)WR_MIN((uint64_t)s->to, (uint64_t)s->next + (uint64_t)s->depth);
	smgr_rel *r;
	if (smgr_open(s->rel, &r) != WALRUS_OK) {
		wr_error_clear();
		return;
	}
	uint64_t run = s->advised;
	for (uint64_t b = s->advised; b <= end; b++) {
		if (b < end && !buf_cached(s->rel, (wr_blkno)b))
			continue;
		if (b > run && run != s->seq_end) {
			smgr_prefetch(r, (wr_blkno)run, (wr_blkno)(b - run));
			s->st.submitted += b - run;
		}
		if (b > run)
			s->seq_end = (wr_blkno)b;
		run = b + 1;
	}
	s->advised = end;
}

/* Advises @len blocks from @first, unless they continue the run advised before. */
static void advise_run(buf_stream *s, smgr_rel *r, wr_blkno first, uint32_t len)
{
	if (first != s->seq_end) {
		smgr_prefetch(r, first, len);
		s->st.submitted += len;
	}
	s->seq_end = first + len;
}

/*
 * A caller's blocks under io_method=sync: queues up to @depth of them
 * (numbers only) and advises those of the new ones the pool does not hold,
 * adjacent ones in one call.
 */
static void stream_queue_advise(buf_stream *s)
{
	uint32_t first = s->count;
	wr_blkno b;
	while (s->count < (uint32_t)s->depth && (b = source_peek(s)) != WR_INVALID_BLKNO) {
		s->slots[(s->head + s->count) % (uint32_t)s->depth] =
		    (stream_slot){.owner = s, .blk = b, .buf = BUF_INVALID, .f = FDC_INVALID};
		s->count++;
		source_take(s);
	}
	smgr_rel *r;
	if (first == s->count || smgr_direct())
		return;
	if (smgr_open(s->rel, &r) != WALRUS_OK) {
		wr_error_clear();
		return;
	}
	wr_blkno run = 0;
	uint32_t len = 0;
	for (uint32_t i = first; i < s->count; i++) {
		b = s->slots[(s->head + i) % (uint32_t)s->depth].blk;
		if (buf_cached(s->rel, b))
			continue;
		if (len > 0 && b == run + len && len < STREAM_COMBINE) {
			len++;
			continue;
		}
		if (len > 0)
			advise_run(s, r, run, len);
		run = b;
		len = 1;
	}
	if (len > 0)
		advise_run(s, r, run, len);
}

static int stream_next_queued(buf_stream *s, int *out, wr_blkno *blk)
{
	if (s->count <= (uint32_t)s->depth / 2)
		stream_queue_advise(s);
	if (s->count == 0)
		return WALRUS_ENOTFOUND;
	*blk = s->slots[s->head].blk;
	s->head = (s->head + 1) % (uint32_t)s->depth;
	s->count--;
	return buf_read(s->rel, *blk, out);
}

/* ---------------------------------------------------------------- interface */

/*
 * A stream of @depth blocks ahead (after the caps) on @rel; the caller sets
 * its source.  Queues: io_uring's slots, or a caller's block numbers under
 * io_method=sync (@queued).
 */
static int stream_new(buf_stream **out, wr_relid rel, int depth, bool queued)
{
	*out = NULL;
	depth = WR_MIN(depth, BUF_STREAM_MAX_DEPTH);
	bool uring = buf_l.r->io_method == WR_IO_URING;
	if (uring) {
		/* Pins held ahead must leave buffers for everyone else. */
		depth = WR_MIN(depth, (int)WR_MAX(1u, buf_l.r->nbuffers / 4));
		uring = ring_setup(depth);
	}
	buf_stream *s = calloc(1, sizeof(*s));
	if (s != NULL && (uring || queued))
		s->slots = calloc((size_t)depth, sizeof(stream_slot));
	if (s != NULL && uring)
		s->iov = calloc((size_t)depth, sizeof(struct iovec));
	if (s == NULL || ((uring || queued) && s->slots == NULL) || (uring && s->iov == NULL)) {
		if (s != NULL) {
			free(s->slots);
			free(s->iov);
		}
		free(s);
		return wr_error(WALRUS_ENOMEM, "out of memory for a read stream");
	}
	s->rel = rel;
	s->pending = WR_INVALID_BLKNO;
	s->depth = depth;
	s->uring = uring;
	s->pid = getpid();
	s->st.io_method = uring ? WR_IO_URING : WR_IO_SYNC;
	s->st.depth = depth;
	*out = s;
	return WALRUS_OK;
}

/* Start reading now: the I/O overlaps whatever the caller does next. */
static void stream_start(buf_stream *s)
{
	if (s->uring)
		stream_fill(s);
	else if (s->cb != NULL)
		stream_queue_advise(s);
	else
		stream_advise(s);
}

int buf_stream_open(buf_stream **out, wr_relid rel, wr_blkno from, wr_blkno to, int depth)
{
	*out = NULL;
	if (from > to || depth < 1)
		return wr_error(WALRUS_EINVAL, "bad read stream: blocks %u..%u, depth %d", from, to,
		                depth);
	buf_stream *s;
	int rc = stream_new(&s, rel, depth, false);
	if (rc != WALRUS_OK)
		return rc;
	s->next = s->ahead = s->advised = s->seq_end = from;
	s->to = to;
	*out = s; /* before any read: what a PANIC unwinds still finds it */
	stream_start(s);
	return WALRUS_OK;
}

int buf_stream_open_cb(buf_stream **out, wr_relid rel, buf_stream_cb next, void *arg, int depth)
{
	*out = NULL;
	if (next == NULL || depth < 1)
		return wr_error(WALRUS_EINVAL, "bad read stream: %s, depth %d",
		                next == NULL ? "no callback" : "a callback", depth);
	buf_stream *s;
	int rc = stream_new(&s, rel, depth, true);
	if (rc != WALRUS_OK)
		return rc;
	s->cb = next;
	s->cb_arg = arg;
	s->seq_end = WR_INVALID_BLKNO;
	*out = s;
	stream_start(s);
	return WALRUS_OK;
}

int buf_stream_open_list(buf_stream **out, wr_relid rel, const wr_blkno *blk, uint32_t n, int depth)
{
	*out = NULL;
	if ((blk == NULL && n > 0) || depth < 1)
		return wr_error(WALRUS_EINVAL, "bad read stream: a list of %u blocks, depth %d", n,
		                depth);
	buf_stream *s;
	int rc = stream_new(&s, rel, depth, true);
	if (rc != WALRUS_OK)
		return rc;
	s->cb = list_next;
	s->cb_arg = s;
	s->list = blk;
	s->nlist = n;
	s->seq_end = WR_INVALID_BLKNO;
	*out = s;
	stream_start(s);
	return WALRUS_OK;
}

int buf_stream_next(buf_stream *s, int *buf, wr_blkno *blk)
{
	*buf = BUF_INVALID;
	if (s->uring)
		return stream_next_uring(s, buf, blk);
	if (s->cb != NULL)
		return stream_next_queued(s, buf, blk);
	if (s->next >= s->to)
		return WALRUS_ENOTFOUND;
	*blk = s->next;
	stream_advise(s);
	return buf_read(s->rel, s->next++, buf);
}

void buf_stream_wait(buf_stream *s)
{
	if (!s->uring || s->pid != getpid() || buf_me->pins == NULL)
		return;
	while (s->inflight > 0)
		s->st.waits += (uint64_t)ring_reap(true);
}

void buf_stream_close(buf_stream *s)
{
	if (s == NULL)
		return;
	/* Another process's copy, or after buf_detach_check took the pins back: memory only. */
	bool mine = s->uring && s->pid == getpid() && buf_me->pins != NULL;
	while (mine && s->inflight > 0)
		ring_reap(true);
	for (uint32_t i = 0; s->uring && i < s->count; i++) {
		stream_slot *sl = &s->slots[(s->head + i) % (uint32_t)s->depth];
		if (mine && sl->state != SLOT_FAILED)
			buf_unpin(sl->buf);
		free(sl->msg);
	}
	free(s->slots);
	free(s->iov);
	free(s);
}

void buf_stream_get_stats(const buf_stream *s, buf_stream_stats *st)
{
	*st = s->st;
}
