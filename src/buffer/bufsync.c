/*
 * bufsync.c - writing buffers for others: the checkpoint's marked set, the
 * background writer's cleaning ahead of the clock hand, and write-back
 * hints for both.
 *
 * Neither writer bumps a buffer's usage count: writing a page is not a use
 * of it, and counting it would keep cold pages in the pool.
 */
#include <stdlib.h>
#include <string.h>

#include "buffer/buf_int.h"

uint32_t buf_nbuffers(void)
{
	return buf_l.r->nbuffers;
}

/* ---------------------------------------------------------------- write-back hints */

int buf_wb_init(buf_wb *w, uint32_t max_pages)
{
	memset(w, 0, sizeof(*w));
	if (max_pages == 0)
		return WALRUS_OK;
	w->tags = calloc(max_pages, sizeof(*w->tags));
	if (w->tags == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory for %u write-back tags", max_pages);
	w->max = max_pages;
	return WALRUS_OK;
}

void buf_wb_free(buf_wb *w)
{
	free(w->tags);
	memset(w, 0, sizeof(*w));
}

static int wb_cmp(const void *a, const void *b)
{
	const struct buf_wb_tag *x = a, *y = b;
	if (x->rel != y->rel)
		return x->rel < y->rel ? -1 : 1;
	return x->blk < y->blk ? -1 : x->blk > y->blk;
}

/*
 * One sync_file_range per segment file, from its first hinted block to its
 * last.  Pages a pool evicts at random are rarely adjacent, and a call per
 * page cost a system call and a submission to the device of its own for
 * each page.  A call over the span submits them together; the kernel visits
 * only the span's dirty pages, all of which walrus wrote and a checkpoint's
 * fsync would write anyway, so the clean blocks in between cost nothing and
 * nothing is written that would not be.
 */
void buf_wb_issue(buf_wb *w)
{
	if (w->n == 0)
		return;
	qsort(w->tags, w->n, sizeof(*w->tags), wb_cmp);
	uint32_t bps = smgr_blocks_per_segment();
	uint32_t i = 0;
	while (i < w->n) {
		wr_relid rel = w->tags[i].rel;
		wr_blkno seg = w->tags[i].blk / bps;
		uint32_t j = i + 1;
		while (j < w->n && w->tags[j].rel == rel && w->tags[j].blk / bps == seg)
			j++;
		smgr_rel *r;
		if (smgr_open(rel, &r) == WALRUS_OK) {
			wr_blkno first = w->tags[i].blk;
			smgr_writeback(r, first, w->tags[j - 1].blk - first + 1);
			atomic_fetch_add(&buf_l.r->stats.writebacks, 1);
		}
		/* A relation that cannot be opened was dropped: nothing to hint. */
		i = j;
	}
	w->n = 0;
}

void buf_wb_add(buf_wb *w, wr_relid rel, wr_blkno blk)
{
	/* Direct writes leave nothing in the page cache to write back. */
	if (w == NULL || w->max == 0 || smgr_direct())
		return;
	w->tags[w->n].rel = rel;
	w->tags[w->n].blk = blk;
	if (++w->n == w->max)
		buf_wb_issue(w);
}

/* ---------------------------------------------------------------- checkpoint */

uint32_t buf_ckpt_mark(buf_ckpt_item *items)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < buf_l.r->nbuffers; i++) {
		buf_desc *d = &buf_l.desc[i];
		if (!(atomic_load(&d->state) & BM_DIRTY))
			continue; /* unlocked peek: a page dirtied now is the next checkpoint's */
		uint32_t s = buf_hdr_lock(d);
		if ((s & (BM_DIRTY | BM_VALID)) == (BM_DIRTY | BM_VALID)) {
			s |= BM_CHECKPOINT_NEEDED;
			items[n].rel = d->rel;
			items[n].blk = d->blk;
			items[n].buf = (int)i + 1;
			n++;
		}
		buf_hdr_unlock(d, s);
	}
	return n;
}

/* Pins @buf without counting a use if it still holds (rel, blk) with @flag set. */
static bool pin_if_flagged(int buf, wr_relid rel, wr_blkno blk, uint32_t flag)
{
	buf_desc *d = buf_get_desc(buf);
	uint32_t s = buf_hdr_lock(d);
	bool ok = (s & flag) && (s & BM_TAG_VALID) && d->rel == rel && d->blk == blk;
	if (ok)
		buf_pin_locked(buf, &s);
	buf_hdr_unlock(d, s);
	return ok;
}

int buf_ckpt_write(const buf_ckpt_item *it, buf_wb *wb, bool *written)
{
	*written = false;
	if (!pin_if_flagged(it->buf, it->rel, it->blk, BM_CHECKPOINT_NEEDED))
		return WALRUS_OK; /* written by someone else meanwhile */
	buf_lock(it->buf, false);
	int rc = buf_write_page(it->buf, &buf_l.r->stats.ckpt_writes, written);
	buf_unlock(it->buf);
	buf_unpin(it->buf);
	if (rc == WALRUS_OK && *written)
		buf_wb_add(wb, it->rel, it->blk);
	return rc;
}

/* ---------------------------------------------------------------- background writer */

enum { BGW_NOT_REUSABLE, BGW_REUSABLE, BGW_WRITTEN };

/* Cleans @buf if nobody uses it and the sweep would take it next (usage 0). */
static int bgw_clean_one(int buf, buf_wb *wb)
{
	buf_desc *d = buf_get_desc(buf);
	uint32_t s = buf_hdr_lock(d);
	if (BUF_REFCOUNT(s) != 0 || BUF_USAGE(s) != 0) {
		buf_hdr_unlock(d, s);
		return BGW_NOT_REUSABLE;
	}
	if ((s & (BM_VALID | BM_DIRTY)) != (BM_VALID | BM_DIRTY)) {
		buf_hdr_unlock(d, s);
		return BGW_REUSABLE;
	}
	buf_pin_locked(buf, &s);
	wr_relid rel = d->rel;
	wr_blkno blk = d->blk;
	buf_hdr_unlock(d, s);
	bool written = false;
	/* Only try: a locked page is in use, not about to be evicted. */
	if (rw_trylock_shared(&d->content)) {
		int rc = buf_write_page(buf, &buf_l.r->stats.bgwriter_writes, &written);
		rw_unlock(&d->content);
		if (rc != WALRUS_OK)
			wr_log(WR_WARNING, "background writer: %s", walrus_errmsg());
	}
	buf_unpin(buf);
	if (!written)
		return BGW_NOT_REUSABLE;
	buf_wb_add(wb, rel, blk);
	return BGW_WRITTEN;
}

/* How many buffers the sweep will want before the next round. */
static uint32_t bgw_upcoming(buf_bgw *st, double multiplier, uint64_t *recent)
{
	uint64_t allocs = atomic_load(&buf_l.r->stats.allocs);
	*recent = allocs - st->prev_allocs;
	st->prev_allocs = allocs;
	/* Follow rises at once, decay slowly: allocation comes in bursts. */
	if ((double)*recent > st->smoothed_allocs)
		st->smoothed_allocs = (double)*recent;
	else
		st->smoothed_allocs += ((double)*recent - st->smoothed_allocs) / 16.0;
	double want = st->smoothed_allocs * multiplier;
	return want > buf_l.r->nbuffers ? buf_l.r->nbuffers : (uint32_t)want;
}

bool buf_bgwriter_round(buf_bgw *st, int64_t maxpages, double multiplier, buf_wb *wb)
{
	uint64_t recent;
	uint32_t upcoming = bgw_upcoming(st, multiplier, &recent);
	uint64_t hand = atomic_load(&buf_l.r->clock_hand);
	uint32_t n = buf_l.r->nbuffers;
	/* Behind the hand, our work was used up: restart at the hand. */
	if (st->next_to_clean < hand || st->next_to_clean > hand + n)
		st->next_to_clean = hand;
	uint64_t limit = hand + n; /* never lap the sweep */
	uint32_t reusable = 0;
	int64_t written = 0;
	while (reusable < upcoming && st->next_to_clean < limit) {
		int buf = (int)(st->next_to_clean % n) + 1;
		st->next_to_clean++;
		int r = bgw_clean_one(buf, wb);
		if (r == BGW_NOT_REUSABLE)
			continue;
		reusable++;
		if (r == BGW_WRITTEN && ++written >= maxpages) {
			atomic_fetch_add(&buf_l.r->stats.bgwriter_stops, 1);
			break;
		}
	}
	buf_wb_issue(wb);
	return recent == 0 && written == 0;
}
