/*
 * bufuring.c - the checkpoint's page writes through io_uring: a batch of
 * buffers is write-locked (shared), copied, covered by one WAL flush, and
 * written with several writes in flight, with exactly the results of the
 * one-at-a-time path: the same checksums, the same sync hand-off, the same
 * error handling (a failed write leaves the page dirty and is returned).
 *
 * Deadlock: only the first buffer of a batch may wait for its content
 * lock; the others are only tried (a writer may hold one of them while
 * waiting for another we hold).  A buffer we could not lock ends the batch
 * and starts the next.
 */
#include <liburing.h>
#include <string.h>
#include <unistd.h>

#include "buffer/buf_int.h"
#include "fdcache/fdcache.h"
#include "wal/wal.h"

#define BUF_URING_BATCH 16 /* writes in flight at once */

static struct io_uring ck_ring;
static pid_t ck_ring_owner;
static _Alignas(4096) char ck_copy[BUF_URING_BATCH][WR_PAGE_SIZE];

typedef struct ck_slot {
	const buf_ckpt_item *it;
	smgr_rel *rel;
	fdc_file f;
	int err;         /* errno of a failed write, 0 when written */
	bool guarded;    /* inside the I/O guard until the write completed */
	uint64_t intent; /* the power-loss journal's record of the write, or 0 */
} ck_slot;

static int ck_ring_init(void)
{
	if (ck_ring_owner == getpid())
		return WALRUS_OK;
	int rc = io_uring_queue_init(BUF_URING_BATCH, &ck_ring, 0);
	char eb[128];
	if (rc < 0)
		return wr_error(WALRUS_EIO, "could not set up io_uring: %s",
		                strerror_r(-rc, eb, sizeof(eb)));
	ck_ring_owner = getpid();
	return WALRUS_OK;
}

/* Pins, share-locks and starts the output I/O of @it; false when there is nothing to write. */
static bool ck_claim(const buf_ckpt_item *it, bool wait, bool *busy)
{
	buf_desc *d = buf_get_desc(it->buf);
	*busy = false;
	uint32_t s = buf_hdr_lock(d);
	bool ok = (s & BM_CHECKPOINT_NEEDED) && (s & BM_TAG_VALID) && d->rel == it->rel &&
	          d->blk == it->blk;
	if (ok)
		buf_pin_locked(it->buf, &s);
	buf_hdr_unlock(d, s);
	if (!ok)
		return false;
	if (wait) {
		buf_lock(it->buf, false);
	} else if (rw_trylock_shared(&d->content)) {
		WR_ASSERT(buf_me->locked[it->buf - 1] ==
		          0); /* buf_lock refuses a second lock too */
		buf_me->locked[it->buf - 1] = BUF_LOCK_SHARED;
	} else {
		buf_unpin(it->buf);
		*busy = true;
		return false;
	}
	if (buf_start_io(d, false))
		return true;
	buf_unlock(it->buf); /* cleaned by someone else meanwhile */
	buf_unpin(it->buf);
	return false;
}

static void ck_release(int buf)
{
	buf_unlock(buf);
	buf_unpin(buf);
}

/* Queues the write of slot @i; on a setup error the slot fails without a write. */
static void ck_queue(ck_slot *s, int i)
{
	int fd, injected = 0;
	off_t off;
	char *page = ck_copy[i];
	int rc = smgr_open(s->it->rel, &s->rel);
	if (rc == WALRUS_OK)
		rc = smgr_block_handle(s->rel, s->it->blk, &s->f, &off);
	if (rc == WALRUS_OK)
		rc = fdc_fd(s->f, &fd);
	if (rc != WALRUS_OK) {
		s->err = EIO;
		s->f = FDC_INVALID;
		return;
	}
	fdc_pin(s->f, true); /* the fd must stay open while the kernel uses it */
	/* The seam's guard and failpoints apply as to a pwrite; the guard is
	 * held until the write completed (ck_finish). */
	if (fdc_io_begin(s->f, "pwrite", &injected) != WALRUS_OK) {
		s->err = EIO;
		return;
	}
	s->guarded = true;
	if (injected) {
		s->err = injected;
		return;
	}
	page_set_checksum(page, s->it->blk);
	s->intent = fdc_io_write_intent(s->f, off, WR_PAGE_SIZE);
	struct io_uring_sqe *sqe = io_uring_get_sqe(&ck_ring);
	io_uring_prep_write(sqe, fd, page, WR_PAGE_SIZE, (uint64_t)off);
	io_uring_sqe_set_data64(sqe, (uint64_t)i);
}

static int ck_reap(ck_slot *slots, int queued)
{
	for (int done = 0; done < queued; done++) {
		struct io_uring_cqe *cqe;
		int rc;
		do
			rc = io_uring_wait_cqe(&ck_ring, &cqe);
		while (rc == -EINTR);
		char eb[128];
		if (rc < 0)
			return wr_error(WALRUS_EIO, "io_uring wait: %s",
			                strerror_r(-rc, eb, sizeof(eb)));
		ck_slot *s = &slots[io_uring_cqe_get_data64(cqe)];
		/* A short page write is an error here: the page is retried whole
		 * at the next checkpoint, never left half-written and clean. */
		s->err = cqe->res == WR_PAGE_SIZE ? 0 : (cqe->res < 0 ? -cqe->res : EIO);
		io_uring_cqe_seen(&ck_ring, cqe);
	}
	return WALRUS_OK;
}

/* Ends slot @s's I/O: clean and handed to the checkpointer, or still dirty. */
static int ck_finish(ck_slot *s, buf_wb *wb, uint32_t *written)
{
	buf_desc *d = buf_get_desc(s->it->buf);
	int rc = WALRUS_OK;
	if (s->err == 0)
		fdc_io_write_done(s->f, s->intent);
	if (s->guarded)
		fdc_io_end();
	if (s->err == 0)
		rc = smgr_written(s->rel, s->it->blk);
	if (s->f != FDC_INVALID)
		fdc_pin(s->f, false);
	if (s->err != 0 || rc != WALRUS_OK) {
		char eb[128];
		if (rc == WALRUS_OK)
			rc = wr_error(wr_errno_code(s->err),
			              "could not write block %u of relation %u: %s", s->it->blk,
			              s->it->rel, strerror_r(s->err, eb, sizeof(eb)));
		buf_end_io(d, 0, BM_IO_ERROR);
		ck_release(s->it->buf);
		return rc;
	}
	buf_end_io(d, BM_DIRTY | BM_CHECKPOINT_NEEDED | BM_IO_ERROR, 0);
	atomic_fetch_add(&buf_l.r->stats.ckpt_writes, 1);
	buf_wb_add(wb, s->it->rel, s->it->blk);
	ck_release(s->it->buf);
	(*written)++;
	return WALRUS_OK;
}

int buf_ckpt_write_batch(const buf_ckpt_item *items, uint32_t n, buf_wb *wb, uint32_t *used,
                         uint32_t *written)
{
	ck_slot slots[BUF_URING_BATCH];
	int nslots = 0;
	wr_lsn upto = 0;
	uint32_t i = 0;
	*written = 0;
	int rc = ck_ring_init();
	for (; rc == WALRUS_OK && i < n && nslots < BUF_URING_BATCH; i++) {
		bool busy;
		if (!ck_claim(&items[i], nslots == 0, &busy)) {
			if (busy)
				break; /* it starts the next batch, where it may wait */
			continue;
		}
		memcpy(ck_copy[nslots], buf_page_ptr(items[i].buf), WR_PAGE_SIZE);
		upto = WR_MAX(upto, page_get_lsn(ck_copy[nslots]));
		slots[nslots++] = (ck_slot){.it = &items[i], .f = FDC_INVALID};
	}
	*used = i;
	if (nslots == 0)
		return rc;
	if (upto > wal_flushed_lsn())
		wal_flush_to(upto); /* WAL before data, once for the batch */
	for (int k = 0; k < nslots; k++)
		buf_notify_write(slots[k].it->rel, slots[k].it->blk, page_get_lsn(ck_copy[k]));
	for (int k = 0; k < nslots; k++)
		ck_queue(&slots[k], k);
	int queued = 0;
	for (int k = 0; k < nslots; k++)
		queued += slots[k].err == 0;
	int sub = queued ? io_uring_submit(&ck_ring) : 0;
	char eb[128];
	if (sub < 0 || sub != queued)
		wr_panic("io_uring submit of checkpoint writes: %s",
		         strerror_r(sub < 0 ? -sub : EIO, eb, sizeof(eb)));
	int rrc = ck_reap(slots, queued);
	if (rrc != WALRUS_OK)
		wr_panic("%s", walrus_errmsg()); /* writes in flight we cannot account for */
	for (int k = 0; k < nslots; k++) {
		int frc = ck_finish(&slots[k], wb, written);
		if (rc == WALRUS_OK)
			rc = frc;
	}
	return rc;
}
