/*
 * bufredo.c - redo through the buffer pool: the startup process replays
 * into shared buffers, so a page changed by many records is read once and
 * written once (by the end-of-recovery checkpoint or an eviction), instead
 * of read and written back per record.
 */
#include <string.h>

#include "buffer/buf_int.h"
#include "wal/wal.h"

static struct redo_slot {
	int buf;
	bool restored; /* image applied: dirty even if the redo function changed nothing */
	bool held;     /* one of the held pages: stays locked at release */
} slots[WAL_MAX_BLOCKS];

/* Pages of a group of records kept locked until its end (redo_hold). */
typedef struct held_page {
	wr_relid rel;
	wr_blkno blk;
	int buf;
} held_page;
static struct {
	bool on;
	held_page *pages;
	size_t n, cap;
} hold;

static int held_find(wr_relid rel, wr_blkno blk)
{
	for (size_t i = 0; i < hold.n; i++)
		if (hold.pages[i].rel == rel && hold.pages[i].blk == blk)
			return hold.pages[i].buf;
	return BUF_INVALID;
}

static const wal_decoded_block *find_block(const wal_decoded *rec, int id)
{
	for (int i = 0; i < rec->nblocks; i++)
		if (rec->blocks[i].id == id)
			return &rec->blocks[i];
	return NULL;
}

/*
 * A record may name a relation or block that is not on disk: created or
 * extended after the last checkpoint.  The file grows to hold the block so
 * a later write of the buffer lands inside it.
 */
static int ensure_block(wr_relid rel, wr_blkno blk)
{
	_Alignas(4096) char zero[WR_PAGE_SIZE];
	int rc = smgr_exists(rel) ? WALRUS_OK : smgr_create(rel);
	smgr_rel *r;
	wr_blkno nblocks;
	if (rc == WALRUS_OK)
		rc = smgr_open(rel, &r);
	if (rc == WALRUS_OK)
		rc = smgr_nblocks(r, &nblocks);
	if (rc == WALRUS_OK && blk >= nblocks) {
		memset(zero, 0, sizeof(zero));
		rc = smgr_extend(r, blk, zero);
	}
	return rc;
}

/* The block's buffer, exclusively locked, and what redo has to do with it. */
static int redo_get(const wal_decoded *rec, int id, void **page, int *action)
{
	const wal_decoded_block *b = find_block(rec, id);
	struct redo_slot *s = &slots[id];
	s->buf = BUF_INVALID;
	s->restored = false;
	s->held = false;
	bool whole = b->flags & (WAL_BLK_HAS_IMAGE | WAL_BLK_WILL_INIT);
	int rc = ensure_block(b->rel, b->blkno);
	if (rc == WALRUS_OK && hold.on && (s->buf = held_find(b->rel, b->blkno)) != BUF_INVALID)
		s->held = true; /* changed by an earlier record of the group: locked already */
	else if (rc == WALRUS_OK && whole)
		rc = buf_read_zero(b->rel, b->blkno, &s->buf);
	else if (rc == WALRUS_OK) {
		rc = buf_read(b->rel, b->blkno, &s->buf);
		if (rc == WALRUS_OK)
			buf_lock(s->buf, true);
	}
	if (rc != WALRUS_OK)
		return rc;
	void *p = buf_page(s->buf);
	*action = REDO_NEEDED;
	if (whole)
		buf_clear_checked(s->buf);
	if (b->flags & WAL_BLK_HAS_IMAGE) {
		rc = wal_fpi_decode(b->image, &b->ih, b->flags, p);
		s->restored = rc == WALRUS_OK;
		*action = REDO_RESTORED_IMAGE;
	} else if (b->flags & WAL_BLK_WILL_INIT)
		memset(p, 0, WR_PAGE_SIZE);
	else if (page_get_lsn(p) >= rec->end)
		*action = REDO_DONE_ALREADY;
	if (rc != WALRUS_OK) {
		if (!s->held) {
			buf_unlock(s->buf);
			buf_release(s->buf);
		}
		s->buf = BUF_INVALID;
		return rc;
	}
	*page = p;
	return WALRUS_OK;
}

static void redo_release(const wal_decoded *rec, int id, void *page, bool changed)
{
	struct redo_slot *s = &slots[id];
	(void)page;
	if (s->buf == BUF_INVALID)
		return;
	if (changed || s->restored) {
		page_set_lsn(buf_page(s->buf), rec->end);
		buf_mark_dirty(s->buf);
	}
	if (hold.on && !s->held) {
		const wal_decoded_block *b = find_block(rec, id);
		if (wr_grow(&hold.pages, &hold.cap, hold.n + 1, sizeof(*hold.pages), 16) !=
		    WALRUS_OK)
			wr_panic("out of memory holding the pages of a batch in redo");
		hold.pages[hold.n++] = (held_page){.rel = b->rel, .blk = b->blkno, .buf = s->buf};
	} else if (!hold.on) {
		buf_unlock(s->buf);
		buf_release(s->buf);
	}
	s->buf = BUF_INVALID;
	s->restored = false;
	s->held = false;
}

static void redo_hold(bool on)
{
	if (!on) {
		for (size_t i = 0; i < hold.n; i++) {
			buf_unlock(hold.pages[i].buf);
			buf_release(hold.pages[i].buf);
		}
		hold.n = 0;
	}
	hold.on = on;
}

/*
 * Half the pool: the other half stays for a standby's readers.  A primary's
 * batch pins at most a quarter of its own pool, so a standby (or a restart)
 * with at least half the primary's shared_buffers replays every batch.
 */
static uint32_t redo_hold_limit(void)
{
	return buf_nbuffers() / 2;
}

/* Nothing to do: the end-of-recovery checkpoint writes and syncs the pool. */
static void redo_finish(void) {}

const wal_redo_pages buf_redo_pages = {
    .get = redo_get,
    .release = redo_release,
    .finish = redo_finish,
    .hold = redo_hold,
    .hold_limit = redo_hold_limit,
};
