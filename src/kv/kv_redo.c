/*
 * kv_redo.c - the RM_KV resource manager: redo and describe.
 *
 * Every RM_KV record carries, per block, a list of page ops (kv_page.c) to
 * apply when the page is older than the record.  Records of a batch are
 * applied only once the batch's last record (the one without KV_MORE) is
 * read: until then they are copied aside.  A batch whose last record never
 * arrives (a crash in the middle) is dropped: at the end of recovery
 * (kv_redo_end), when the next batch starts (KV_FIRST), when an ABORT
 * record says so, or when a new recovery starts (LSNs go back).  Nothing of
 * such a batch reached the data files: its pages stayed locked in the pool
 * until its last record was in the WAL, and carry that record's end as
 * their LSN (kv_write.c, stamp_commit), so none is written before the last
 * record is durable.
 *
 * A standby's readers run during redo: each page a batch changes stays
 * locked from its change until the batch's last record is applied
 * (wal_redo_hold), as on the primary until the last record is inserted, so
 * a reader never sees a page of an unfinished batch.
 *
 * Recovery may also start in the middle of a batch (its first records lie
 * before the checkpoint's redo point).  Then the pages it changed before
 * that point were written by the checkpoint with the whole batch in them
 * (the checkpoint waited for their locks), so their LSNs skip the records
 * replayed here, and the rest applies as usual.
 *
 * Interface: kv.h (kv_register_rmgr, kv_redo_end).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_int.h"

/* Copies of the records of the batch in progress. */
typedef struct stashed {
	char *raw;
	uint32_t len;
	wr_lsn lsn, end;
} stashed;

/* A page a batch changes. */
typedef struct page_ref {
	wr_relid rel;
	wr_blkno blk;
} page_ref;

static struct {
	stashed *recs;
	size_t n, cap;
	wr_lsn last;     /* LSN of the last record seen, to notice a new recovery */
	page_ref *pages; /* of every record kept, duplicates included */
	size_t npages, pcap;
} stash;

/* Forgets the kept records; @unfinished says they belong to a batch that never ended. */
static void stash_clear(bool unfinished)
{
	if (unfinished && stash.n > 0)
		wr_log(WR_LOG, "discarding %zu WAL record(s) of an unfinished key-value batch",
		       stash.n);
	for (size_t i = 0; i < stash.n; i++)
		free(stash.recs[i].raw);
	stash.n = 0;
	stash.npages = 0;
}

wr_lsn kv_redo_batch_start(void)
{
	return stash.n > 0 ? stash.recs[0].lsn : 0;
}

void kv_redo_end(void)
{
	stash_clear(true);
	free(stash.recs);
	stash.recs = NULL;
	stash.cap = 0;
	free(stash.pages);
	stash.pages = NULL;
	stash.pcap = 0;
	stash.last = 0;
}

static void pages_add(const wal_decoded *rec)
{
	if (wr_grow(&stash.pages, &stash.pcap, stash.npages + (size_t)rec->nblocks,
	            sizeof(*stash.pages), 64) != WALRUS_OK)
		wr_panic("out of memory keeping a key-value batch for redo");
	for (int i = 0; i < rec->nblocks; i++)
		stash.pages[stash.npages++] =
		    (page_ref){.rel = rec->blocks[i].rel, .blk = rec->blocks[i].blkno};
}

static int page_ref_cmp(const void *a, const void *b)
{
	const page_ref *x = a, *y = b;
	if (x->rel != y->rel)
		return x->rel < y->rel ? -1 : 1;
	return x->blk < y->blk ? -1 : x->blk > y->blk;
}

/* Distinct pages the kept records and @last change. */
static size_t batch_pages(const wal_decoded *last)
{
	pages_add(last);
	qsort(stash.pages, stash.npages, sizeof(*stash.pages), page_ref_cmp);
	size_t n = 0;
	for (size_t i = 0; i < stash.npages; i++)
		n += i == 0 || page_ref_cmp(&stash.pages[i - 1], &stash.pages[i]) != 0;
	return n;
}

/*
 * The batch's pages must all be held at once.  A standby (or a restart)
 * given a smaller shared_buffers than the primary that wrote the batch
 * could not: say so, with the size that does, instead of failing on
 * whichever pin finds the pool full.
 */
static bool batch_fits(const wal_decoded *last)
{
	uint32_t limit = wal_redo_hold_limit();
	if (limit == 0 || (stash.n == 0 && (uint32_t)last->nblocks <= limit))
		return true;
	size_t n = batch_pages(last);
	if (n <= limit)
		return true;
	unsigned long long need_mb =
	    ((unsigned long long)n * 2 * WR_PAGE_SIZE + (1u << 20) - 1) >> 20;
	wal_redo_fail(
	    wr_error(WALRUS_ETOOBIG,
	             "the key-value batch ending at " WAL_LSN_FMT " changes %zu pages, which redo "
	             "holds at once, over the %u (half of shared_buffers) it may hold: give this "
	             "instance shared_buffers of at least %lluMB (a standby: at least half its "
	             "primary's)",
	             WAL_LSN_ARGS(last->lsn), n, (unsigned)limit, need_mb));
	return false;
}

static void stash_add(const wal_decoded *rec)
{
	pages_add(rec);
	if (wr_grow(&stash.recs, &stash.cap, stash.n + 1, sizeof(*stash.recs), 64) != WALRUS_OK)
		wr_panic("out of memory keeping a key-value batch for redo");
	stashed *s = &stash.recs[stash.n];
	s->raw = malloc(rec->hdr.tot_len);
	if (s->raw == NULL)
		wr_panic("out of memory keeping a key-value batch for redo");
	memcpy(s->raw, rec->raw, rec->hdr.tot_len);
	s->len = rec->hdr.tot_len;
	s->lsn = rec->lsn;
	s->end = rec->end;
	stash.n++;
}

/* Applies one record's page ops to every block that needs them. */
static void apply_record(const wal_decoded *rec)
{
	for (int i = 0; i < rec->nblocks; i++) {
		const wal_decoded_block *b = &rec->blocks[i];
		void *page;
		int action;
		if (wal_redo_get_block(rec, b->id, &page, &action) != WALRUS_OK)
			return; /* recorded by the page source; recovery reports it */
		bool apply = action == REDO_NEEDED;
		char why[160];
		if (apply && !kvop_apply(page, b->data, b->data_len, why, sizeof(why)))
			wr_panic("redo of key-value record at " WAL_LSN_FMT
			         " failed on block %u of relation %u: %s",
			         WAL_LSN_ARGS(rec->lsn), b->blkno, b->rel, why);
		kv_rv_after(b->rel, b->blkno, page); /* a snapshot's versions (kv_redo_mv.c) */
		wal_redo_release_block(rec, b->id, page, apply);
	}
}

static void stash_apply(void)
{
	wal_decoded dec;
	for (size_t i = 0; i < stash.n; i++) {
		stashed *s = &stash.recs[i];
		if (wal_decode(s->raw, s->len, s->lsn, &dec) != WALRUS_OK)
			wr_panic("could not decode a kept key-value record: %s", walrus_errmsg());
		dec.end = s->end;
		apply_record(&dec);
	}
}

/* While a snapshot lives (a standby's reader): the batch's pages before it. */
static void versions_begin(const wal_decoded *last)
{
	size_t n = 0;
	kv_rv_blk *blks = malloc((stash.npages + (size_t)last->nblocks + 1) * sizeof(*blks));
	if (blks == NULL) {
		kv_mv_lose_open_batch();
		return;
	}
	for (size_t i = 0; i < stash.npages; i++)
		blks[n++] = (kv_rv_blk){stash.pages[i].rel, stash.pages[i].blk};
	for (int i = 0; i < last->nblocks; i++)
		blks[n++] = (kv_rv_blk){last->blocks[i].rel, last->blocks[i].blkno};
	kv_rv_begin(blks, n);
	free(blks);
}

/*
 * A page op this walrus does not know, in a record that passed its CRC: a
 * newer walrus wrote it (a new op is a new WAL format).  Found before any
 * record of the batch is applied, so no page holds part of it.
 */
static bool ops_known(const wal_decoded *rec)
{
	uint8_t info = rec->hdr.info;
	if ((info & ~(KV_INFO_OP | KV_DROPS | KV_FIRST | KV_MORE)) != 0 ||
	    (info & KV_INFO_OP) > KV_INFO_ABORT) {
		wal_redo_fail(wr_error(WALRUS_EVERSION,
		                       "key-value record at " WAL_LSN_FMT
		                       " has info 0x%02x, which walrus %s does not know: a newer "
		                       "walrus wrote it (this one writes WAL format %u)",
		                       WAL_LSN_ARGS(rec->lsn), info, WR_WALRUS_VERSION,
		                       WAL_FORMAT));
		return false;
	}
	for (int i = 0; i < rec->nblocks; i++) {
		const wal_decoded_block *b = &rec->blocks[i];
		int code = kvop_unknown(b->data, b->data_len);
		if (code < 0)
			continue;
		wal_redo_fail(wr_error(
		    WALRUS_EVERSION,
		    "key-value record at " WAL_LSN_FMT
		    " has page op %d (block %u of relation %u), which walrus %s "
		    "does not know: a newer walrus wrote it (this one writes WAL "
		    "format %u)",
		    WAL_LSN_ARGS(rec->lsn), code, b->blkno, b->rel, WR_WALRUS_VERSION, WAL_FORMAT));
		return false;
	}
	return true;
}

/* The key spaces a committed batch dropped: their files go, as on the primary. */
static void redo_drops(const wal_decoded *rec)
{
	if (rec->main_len % sizeof(wr_relid) != 0)
		wr_panic("key-value commit record at " WAL_LSN_FMT " has a malformed drop list",
		         WAL_LSN_ARGS(rec->lsn));
	for (uint32_t i = 0; i < rec->main_len / sizeof(wr_relid); i++) {
		wr_relid rel;
		memcpy(&rel, rec->main_data + i * sizeof(rel), sizeof(rel));
		kv_drop_files(rel);
	}
}

static void kv_redo(const wal_decoded *rec)
{
	uint8_t info = rec->hdr.info;
	if (!ops_known(rec))
		return;
	if ((info & KV_FIRST) || rec->lsn <= stash.last)
		stash_clear(true);
	stash.last = rec->lsn;
	if ((info & KV_INFO_OP) == KV_INFO_ABORT) {
		stash_clear(true);
		return;
	}
	if (info & KV_MORE) {
		stash_add(rec);
		return;
	}
	/* Every page of the batch stays locked until all of it is applied, as on
	 * the primary: a reader on a standby never sees half a batch. */
	if (!batch_fits(rec)) {
		stash_clear(false);
		return;
	}
	bool versioned = kv_mv_batch_begin(NULL);
	if (versioned)
		versions_begin(rec);
	wal_redo_hold(true);
	stash_apply();
	apply_record(rec);
	if (versioned)
		kv_rv_finish(); /* the pages still held: no reader sees them before */
	kv_mv_batch_end(true, rec->end);
	wal_redo_hold(false);
	stash_clear(false);
	if (info & KV_DROPS)
		redo_drops(rec);
}

/* ---------------------------------------------------------------- describe */

static const char *kv_info_name(uint8_t info)
{
	switch (info & KV_INFO_OP) {
	case KV_INFO_CREATE:
		return "CREATE";
	case KV_INFO_CHANGE:
		return "CHANGE";
	case KV_INFO_COMMIT:
		return "COMMIT";
	case KV_INFO_ABORT:
		return "ABORT";
	default:
		return NULL;
	}
}

static const char *batch_part(uint8_t info)
{
	bool first = info & KV_FIRST, more = info & KV_MORE;
	return first && !more ? "whole batch"
	       : first        ? "batch starts"
	       : more         ? "batch continues"
	                      : "batch ends";
}

static void kv_describe(const wal_decoded *rec, char *buf, size_t len)
{
	snprintf(buf, len, "%s", batch_part(rec->hdr.info));
	size_t used = strlen(buf);
	for (int i = 0; i < rec->nblocks && used + 1 < len; i++) {
		const wal_decoded_block *b = &rec->blocks[i];
		char ops[512];
		kvop_describe(b->data, b->data_len, ops, sizeof(ops));
		char rel[24] = "";
		if (b->rel != KV_REL) /* a key space's tree, or the catalog */
			snprintf(rel, sizeof(rel), " rel %u", b->rel);
		snprintf(buf + used, len - used, ";%s blk %u%s: %s", rel, b->blkno,
		         (b->flags & WAL_BLK_HAS_IMAGE) ? " FPW" : "", ops);
		used += strlen(buf + used);
	}
	if (!(rec->hdr.info & KV_DROPS))
		return;
	for (uint32_t i = 0; i + 1 <= rec->main_len / sizeof(wr_relid) && used + 1 < len; i++) {
		wr_relid rel;
		memcpy(&rel, rec->main_data + i * sizeof(rel), sizeof(rel));
		snprintf(buf + used, len - used, "; drops relation %u", rel);
		used += strlen(buf + used);
	}
}

static const wal_rmgr kv_rmgr = {
    .name = "KV",
    .redo = kv_redo,
    .describe = kv_describe,
    .info_name = kv_info_name,
};

void kv_register_rmgr(void)
{
	wal_rmgr_register(RM_KV, &kv_rmgr);
}
